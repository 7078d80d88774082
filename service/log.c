#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

log_level_t log_current_level = LOG_INFO;
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

static size_t s_timestamp (char *buf, size_t len)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r (&ts.tv_sec, &tm);
    int n = snprintf (buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                      tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
    return n > 0 ? (size_t) n : 0;
}

/* S as a JSON string body (no quotes): escapes, and control bytes as \u00XX. */
static size_t s_json_escape (const char *s, char *buf, size_t len)
{
    size_t n = 0;
    for (; *s && n + 7 < len; s++) {
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char) c;
        } else if (c < 0x20)
            n += (size_t) snprintf (buf + n, len - n, "\\u%04x", c);
        else
            buf[n++] = (char) c;
    }
    buf[n] = '\0';
    return n;
}

static void s_emit (char *line, size_t len, size_t cap)
{
    if (len >= cap - 1)
        len = cap - 2;
    line[len++] = '\n';
    ssize_t w = write (STDERR_FILENO, line, len);
    (void) w;
}

static void s_write (log_level_t level, const char *msg, const char *fields)
{
    char line[2048], ts[64];
    s_timestamp (ts, sizeof ts);
    size_t n;
    if (s_format == LOG_FORMAT_JSON) {
        char esc[1400];
        s_json_escape (msg, esc, sizeof esc);
        n = (size_t) snprintf (line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"%s%s%s}", ts,
                               s_level_names[level], esc, fields ? ",\"fields\":{" : "", fields ? fields : "",
                               fields ? "}" : "");
    } else {
        n = (size_t) snprintf (line, sizeof line, "%s %-5s %s", ts, s_level_names[level], msg);
        /* "a":1,"b":"x" -> a=1 b=x */
        for (const char *f = fields; f && *f && n < sizeof line - 2; f++) {
            if (*f == '"')
                continue;
            char c = *f == ':' ? '=' : *f == ',' ? ' ' : *f;
            if (f == fields)
                line[n++] = ' ';
            line[n++] = c;
        }
    }
    s_emit (line, n < sizeof line ? n : sizeof line - 1, sizeof line);
}

void log_write (log_level_t level, const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (msg, sizeof msg, fmt, ap);
    va_end (ap);
    s_write (level, msg, NULL);
}

void log_write_fields (log_level_t level, const char *msg, const char *fields)
{
    if (level <= log_current_level)
        s_write (level, msg, fields);
}
