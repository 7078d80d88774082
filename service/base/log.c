/* Levelled logging (log.h). Every line is built in one buffer and written with one write(2).
 * JSON lines are valid JSON whatever the message holds: quotes, backslashes and control bytes
 * are escaped, bytes that are not UTF-8 become U+FFFD, and a message longer than the line is cut
 * on a character boundary and ends in "...". Text lines escape control bytes too, so a message
 * cannot start a line of its own. */
#include "base/log.h"

#include <cJSON.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MSG_BYTES 4096          /* a message as formatted; longer ones are cut */
#define LINE_BYTES 8192         /* a whole line, newline included */
#define FIELDS_BYTES 2048       /* structured fields written as an object; longer ones as a cut string */

log_level_t log_current_level = LOG_LEVEL_INFO;
static log_format_t s_format = LOG_FORMAT_TEXT;

static const char *s_level_names[] = { "error", "warn", "info", "debug" };

void log_set_level (log_level_t level) { log_current_level = level; }
void log_set_format (log_format_t format) { s_format = format; }

int log_level_from_name (const char *name, log_level_t *level)
{
    for (int i = 0; i < 4; i++)
        if (strcmp (name, s_level_names[i]) == 0) {
            *level = (log_level_t) i;
            return 0;
        }
    return -1;
}

/* ---------------------------------------------------------------- a bounded line */

typedef struct {
    char *buf;
    size_t len, cap;
} line_t;

static bool s_fits (const line_t *l, size_t n, size_t reserve) { return l->len + n + reserve <= l->cap; }

static void s_put (line_t *l, const char *s, size_t n)
{
    if (s_fits (l, n, 0)) {
        memcpy (l->buf + l->len, s, n);
        l->len += n;
    }
}

static void s_puts (line_t *l, const char *s) { s_put (l, s, strlen (s)); }

/* The length of the well-formed UTF-8 sequence at S (1 to 4), or 0 when the bytes there are not
 * one (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short). */
static size_t s_utf8_length (const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;     /* the allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;           /* overlong */
        if (c == 0xed) hi = 0x9f;           /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90;           /* overlong */
        if (c == 0xf4) hi = 0x8f;           /* past U+10FFFF */
    } else
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

/* One character of S as JSON string content (UNIT, its length) and how many bytes of S it takes. */
static size_t s_json_unit (const unsigned char *s, char unit[8], size_t *unit_len)
{
    unsigned char c = s[0];
    const char *esc = NULL;
    switch (c) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    default: break;
    }
    if (esc) {
        *unit_len = strlen (esc);
        memcpy (unit, esc, *unit_len);
        return 1;
    }
    if (c < 0x20 || c == 0x7f) {
        *unit_len = (size_t) snprintf (unit, 8, "\\u%04x", c);
        return 1;
    }
    size_t n = s_utf8_length (s);
    if (n == 0) {
        memcpy (unit, "\\ufffd", 6);
        *unit_len = 6;
        return 1;
    }
    memcpy (unit, s, n);
    *unit_len = n;
    return n;
}

/* One character of S for a text line: printable bytes and UTF-8 as they are, the rest as \n, \t
 * or \xNN (a line never holds a newline of its own). */
static size_t s_text_unit (const unsigned char *s, char unit[8], size_t *unit_len)
{
    unsigned char c = s[0];
    if (c == '\n' || c == '\r' || c == '\t') {
        unit[0] = '\\';
        unit[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        *unit_len = 2;
        return 1;
    }
    size_t n = c < 0x20 || c == 0x7f ? 0 : s_utf8_length (s);
    if (n == 0) {
        *unit_len = (size_t) snprintf (unit, 8, "\\x%02x", c);
        return 1;
    }
    memcpy (unit, s, n);
    *unit_len = n;
    return n;
}

typedef size_t (*unit_fn) (const unsigned char *s, char unit[8], size_t *unit_len);

/* Writes N bytes of S a character at a time, leaving RESERVE bytes free; when a character does not
 * fit, writes "..." in its place and stops (RESERVE must leave room for the 3 bytes). */
static void s_put_escaped (line_t *l, const char *s, size_t n, size_t reserve, unit_fn unit_of)
{
    const unsigned char *p = (const unsigned char *) s, *end = p + n;
    while (p < end) {
        char unit[8];
        size_t unit_len;
        /* A sequence cut short by the end of S is not a character: never read past S. */
        unsigned char tail[5] = { 0 };
        const unsigned char *at = p;
        if ((size_t) (end - p) < 4) {
            memcpy (tail, p, (size_t) (end - p));
            at = tail;
        }
        size_t used = unit_of (at, unit, &unit_len);
        if (!s_fits (l, unit_len, reserve)) {
            s_put (l, "...", 3);
            return;
        }
        s_put (l, unit, unit_len);
        p += used;
    }
}

static void s_timestamp (line_t *l)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r (&ts.tv_sec, &tm);
    char buf[64];
    int n = snprintf (buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                      tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
    s_put (l, buf, n > 0 ? (size_t) n : 0);
}

/* Whether FIELDS is a list of JSON object members ("\"a\":1,\"b\":\"x\""). */
static bool s_fields_valid (const char *fields, size_t n)
{
    char buf[FIELDS_BYTES + 3];
    if (n > FIELDS_BYTES)
        return false;
    buf[0] = '{';
    memcpy (buf + 1, fields, n);
    buf[n + 1] = '}';
    buf[n + 2] = '\0';
    cJSON *j = memchr (fields, '\0', n) ? NULL : cJSON_ParseWithOpts (buf, NULL, 1);   /* nothing after the object */
    bool ok = j && cJSON_IsObject (j);
    cJSON_Delete (j);
    return ok;
}

static void s_json_line (line_t *l, log_level_t level, const char *msg, size_t msg_len, const char *fields)
{
    s_puts (l, "{\"ts\":\"");
    s_timestamp (l);
    s_puts (l, "\",\"level\":\"");
    s_puts (l, s_level_names[level]);
    s_puts (l, "\",\"msg\":\"");
    size_t fields_len = fields ? strlen (fields) : 0;
    bool as_object = fields && s_fields_valid (fields, fields_len);
    /* What must still fit after the message: its closing quote, the fields, "}\n" and "...". */
    size_t after = 1 + 2 + 3 + (as_object ? sizeof ",\"fields\":{}" - 1 + fields_len : 0);
    if (fields && !as_object)
        after += sizeof ",\"fields_raw\":\"\"" - 1 + 256;  /* room for the start of them at least */
    s_put_escaped (l, msg, msg_len, after, s_json_unit);
    s_puts (l, "\"");
    if (as_object) {
        s_puts (l, ",\"fields\":{");
        s_put (l, fields, fields_len);
        s_puts (l, "}");
    } else if (fields) {
        /* Not JSON members, or too long: kept as a string, so the line stays JSON. */
        s_puts (l, ",\"fields_raw\":\"");
        s_put_escaped (l, fields, fields_len, 1 + 2 + 3, s_json_unit);
        s_puts (l, "\"");
    }
    s_puts (l, "}");
}

/* "a":1,"b":"x y" -> a=1 b=x y (quotes dropped, separators inside strings kept). */
static void s_text_fields (line_t *l, const char *fields)
{
    bool in_string = false;
    for (const char *f = fields; *f; f++) {
        if (!s_fits (l, 8, 3)) {    /* room for one more character (escaped) and the "..." */
            s_puts (l, "...");
            return;
        }
        char c = *f;
        if (in_string) {
            if (c == '"') {
                in_string = false;
                continue;
            }
            if (c == '\\' && f[1])
                c = *++f;
            s_put_escaped (l, &c, 1, 0, s_text_unit);
        } else if (c == '"')
            in_string = true;
        else if (c == ':')
            s_puts (l, "=");
        else if (c == ',')
            s_puts (l, " ");
        else if (c != ' ' && c != '\n' && c != '\t' && c != '\r')
            s_put_escaped (l, &c, 1, 0, s_text_unit);
    }
}

static void s_text_line (line_t *l, log_level_t level, const char *msg, size_t msg_len, const char *fields)
{
    s_timestamp (l);
    char lvl[16];
    snprintf (lvl, sizeof lvl, " %-5s ", s_level_names[level]);
    s_puts (l, lvl);
    size_t fields_len = fields ? strlen (fields) : 0;
    s_put_escaped (l, msg, msg_len, 1 + 3 + (fields_len < 512 ? fields_len + 1 : 0), s_text_unit);
    if (fields && *fields) {
        s_puts (l, " ");
        s_text_fields (l, fields);
    }
}

static void s_write (log_level_t level, const char *msg, size_t msg_len, const char *fields)
{
    char buf[LINE_BYTES];
    line_t l = { .buf = buf, .len = 0, .cap = sizeof buf - 1 };    /* - 1: the newline */
    if (s_format == LOG_FORMAT_JSON)
        s_json_line (&l, level, msg, msg_len, fields);
    else
        s_text_line (&l, level, msg, msg_len, fields);
    buf[l.len++] = '\n';
    ssize_t w = write (STDERR_FILENO, buf, l.len);
    (void) w;
}

void log_write (log_level_t level, const char *fmt, ...)
{
    char msg[MSG_BYTES];
    va_list ap;
    va_start (ap, fmt);
    int n = vsnprintf (msg, sizeof msg, fmt, ap);
    va_end (ap);
    if (n < 0)
        return;
    size_t len = (size_t) n;
    if (len >= sizeof msg) {
        /* Cut: drop a character the cut split (its lead byte and what came of it), mark the cut. */
        len = sizeof msg - 4;
        size_t back = 0;
        while (back < 3 && len > back && ((unsigned char) msg[len - 1 - back] & 0xc0) == 0x80)
            back++;
        if (len > back && (unsigned char) msg[len - 1 - back] >= 0xc0
            && s_utf8_length ((const unsigned char *) msg + len - 1 - back) != back + 1)
            len -= back + 1;
        memcpy (msg + len, "...", 3);
        len += 3;
    }
    s_write (level, msg, len, NULL);
}

void log_write_fields (log_level_t level, const char *msg, const char *fields)
{
    if (level <= log_current_level)
        s_write (level, msg, strlen (msg), fields);
}

size_t log_json_escape (const char *s, char *dst, size_t cap)
{
    if (cap == 0)
        return 0;
    line_t l = { .buf = dst, .len = 0, .cap = cap - 1 };
    s_put_escaped (&l, s, strlen (s), 3, s_json_unit);
    dst[l.len] = '\0';
    return l.len;
}
