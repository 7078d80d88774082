#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *sig_status_name (sig_status_t s)
{
    switch (s) {
    case SIG_OK: return "STATUS_OK";
    case SIG_BAD_REQUEST: return "STATUS_BAD_REQUEST";
    case SIG_UNKNOWN_MODEL: return "STATUS_UNKNOWN_MODEL";
    case SIG_BAD_SHAPE: return "STATUS_BAD_SHAPE";
    case SIG_BAD_VALUE: return "STATUS_BAD_VALUE";
    case SIG_OVERLOADED: return "STATUS_OVERLOADED";
    case SIG_DEADLINE_EXCEEDED: return "STATUS_DEADLINE_EXCEEDED";
    case SIG_UNAVAILABLE: return "STATUS_UNAVAILABLE";
    case SIG_INTERNAL: return "STATUS_INTERNAL";
    }
    return "STATUS_UNKNOWN";
}

void sig_set_error (char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (err, errlen, fmt, ap);
    va_end (ap);
}
