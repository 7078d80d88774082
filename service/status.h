/* Request outcomes, with the values of sigserve.v1.Status on the wire (codec.c checks they agree). */
#ifndef SIGSERVE_STATUS_H
#define SIGSERVE_STATUS_H

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

#endif
