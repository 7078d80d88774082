/* Levelled logging on stderr. The macros test the level before evaluating their arguments,
 * so a debug line costs one compare when debug is off. */
#ifndef SIGSERVE_LOG_H
#define SIGSERVE_LOG_H

typedef enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 } log_level_t;

extern log_level_t log_current_level;

void log_set_level (log_level_t level);
/* "error", "warn", "info" or "debug"; -1 when the name is none of these. */
int log_level_from_name (const char *name, log_level_t *level);
void log_write (log_level_t level, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));

#define LOG_AT(lvl, ...) \
    do { if ((lvl) <= log_current_level) log_write ((lvl), __VA_ARGS__); } while (0)
#define log_error(...) LOG_AT (LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  LOG_AT (LOG_WARN, __VA_ARGS__)
#define log_info(...)  LOG_AT (LOG_INFO, __VA_ARGS__)
#define log_debug(...) LOG_AT (LOG_DEBUG, __VA_ARGS__)

#endif
