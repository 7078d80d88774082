/* Request outcomes, with the values of sigserve.v1.Status on the wire (codec.c checks they agree). */
#ifndef SIGSERVE_STATUS_H
#define SIGSERVE_STATUS_H

#include <stddef.h>

typedef enum {
    SIG_OK = 0,
    SIG_BAD_REQUEST = 1,
    SIG_UNKNOWN_MODEL = 2,
    SIG_BAD_SHAPE = 3,
    SIG_BAD_VALUE = 4,
    SIG_OVERLOADED = 5,
    SIG_DEADLINE_EXCEEDED = 6,
    SIG_UNAVAILABLE = 7,
    SIG_INTERNAL = 8,
} sig_status_t;

const char *sig_status_name (sig_status_t s);   /* "STATUS_OK", ... */

/* printf into a caller's error buffer; nothing when ERR is NULL or ERRLEN 0. */
void sig_set_error (char *err, size_t errlen, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));

#endif
