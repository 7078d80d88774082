#include "floatlist.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_MAX 128

int floatlist_parse (const char *text, const char *name, bool allow_nonfinite, float **out, size_t *count,
                     char *err, size_t errlen)
{
    size_t cap = 1024, n = 0, line = 1;
    float *vals = malloc (cap * sizeof *vals);
    if (!vals) {
        snprintf (err, errlen, "%s: out of memory", name);
        return -1;
    }
    const char *p = text;
    while (*p) {
        if (*p == '\n') { line++; p++; continue; }
        if (isspace ((unsigned char) *p) || *p == ',') { p++; continue; }
        if (*p == '#') { while (*p && *p != '\n') p++; continue; }
        const char *start = p;
        while (*p && !isspace ((unsigned char) *p) && *p != ',' && *p != '#')
            p++;
        size_t len = (size_t) (p - start);
        char token[TOKEN_MAX];
        if (len >= sizeof token) {
            snprintf (err, errlen, "%s:%zu: a token longer than %d characters", name, line, TOKEN_MAX - 1);
            free (vals);
            return -1;
        }
        memcpy (token, start, len);
        token[len] = '\0';
        errno = 0;
        char *end;
        float v = strtof (token, &end);
        /* strtof sets ERANGE for an underflow too; only a finite token that became Inf is out of range */
        bool overflow = errno == ERANGE && isinf (v);
        const char *why = end == token || *end ? "not a number"
                          : overflow ? "out of float range"
                          : !allow_nonfinite && !isfinite (v) ? "not a finite number" : NULL;
        if (why) {
            snprintf (err, errlen, "%s:%zu: %s: '%s'", name, line, why, token);
            free (vals);
            return -1;
        }
        if (n == cap) {
            float *grown = realloc (vals, 2 * cap * sizeof *vals);
            if (!grown) {
                snprintf (err, errlen, "%s: out of memory", name);
                free (vals);
                return -1;
            }
            vals = grown;
            cap *= 2;
        }
        vals[n++] = v;
    }
    if (n == 0) {
        snprintf (err, errlen, "%s: no numbers", name);
        free (vals);
        return -1;
    }
    *out = vals;
    *count = n;
    return 0;
}

int floatlist_read (const char *path, bool allow_nonfinite, float **out, size_t *count, char *err, size_t errlen)
{
    bool std_in = strcmp (path, "-") == 0;
    const char *name = std_in ? "stdin" : path;
    FILE *f = std_in ? stdin : fopen (path, "rb");
    if (!f) {
        snprintf (err, errlen, "cannot open %s: %s", path, strerror (errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc (cap);
    while (buf) {
        n += fread (buf + n, 1, cap - n - 1, f);
        if (ferror (f) || feof (f))
            break;
        char *grown = realloc (buf, cap * 2);
        if (!grown) {
            free (buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    bool failed = !buf || ferror (f);
    if (!std_in)
        fclose (f);
    if (failed) {
        snprintf (err, errlen, "cannot read %s: %s", name, buf ? strerror (errno) : "out of memory");
        free (buf);
        return -1;
    }
    buf[n] = '\0';
    if (memchr (buf, '\0', n)) {
        snprintf (err, errlen, "%s: a NUL byte: expected text", name);
        free (buf);
        return -1;
    }
    int rc = floatlist_parse (buf, name, allow_nonfinite, out, count, err, errlen);
    free (buf);
    return rc;
}
