#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

log_level_t log_current_level = LOG_INFO;

static const char *s_level_names[] = { "error", "warn", "info", "debug" };

void log_set_level (log_level_t level) { log_current_level = level; }

int log_level_from_name (const char *name, log_level_t *level)
{
    for (int i = 0; i < 4; i++)
        if (strcmp (name, s_level_names[i]) == 0) {
            *level = (log_level_t) i;
            return 0;
        }
    return -1;
}

void log_write (log_level_t level, const char *fmt, ...)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r (&ts.tv_sec, &tm);
    char line[1024];
    int n = snprintf (line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ %-5s ",
                      tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                      tm.tm_sec, ts.tv_nsec / 1000, s_level_names[level]);
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (line + n, sizeof line - (size_t) n - 1, fmt, ap);
    va_end (ap);
    size_t len = strlen (line);
    line[len++] = '\n';
    /* One write per line so lines from several threads do not interleave. */
    fwrite (line, 1, len, stderr);
}
