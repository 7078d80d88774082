/* Levelled logging on stderr, as text ("2026-11-23T19:20:35.123456Z info  message") or as JSON
 * lines ({"ts":"...","level":"info","msg":"...","fields":{...}}: server.log_format). The macros
 * test the level before evaluating their arguments, so a debug line costs one compare when debug
 * is off. One write(2) per line, so lines from several threads never interleave. Every JSON line
 * parses, whatever the message holds (see log.c); a message over 4 KiB is cut on a character
 * boundary and ends in "...". */
#ifndef SIGSERVE_LOG_H
#define SIGSERVE_LOG_H

#include "base/config.h"

/* (not LOG_INFO and the like: <syslog.h>, which czmq includes, defines those as macros) */
typedef enum { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN = 1, LOG_LEVEL_INFO = 2, LOG_LEVEL_DEBUG = 3 } log_level_t;

extern log_level_t log_current_level;

void log_set_level (log_level_t level);
void log_set_format (log_format_t format);
/* "error", "warn", "info" or "debug"; -1 when the name is none of these. */
int log_level_from_name (const char *name, log_level_t *level);
void log_write (log_level_t level, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));
/* A line with structured fields: FIELDS is JSON object members without the braces
 * ("\"model\":\"tick_mlp\",\"rate\":120.5"), written as such in JSON and as key=value pairs in
 * text (where MSG comes first). */
void log_write_fields (log_level_t level, const char *msg, const char *fields);
/* S as the inside of a JSON string (no quotes) in DST (CAP bytes, NUL included), cut on a
 * character boundary with "..." when it does not fit; for callers building FIELDS. The length. */
size_t log_json_escape (const char *s, char *dst, size_t cap);

#define LOG_AT(lvl, ...) \
    do { if ((lvl) <= log_current_level) log_write ((lvl), __VA_ARGS__); } while (0)
#define log_error(...) LOG_AT (LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)  LOG_AT (LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)  LOG_AT (LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) LOG_AT (LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
