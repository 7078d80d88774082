#include "ops/notify.h"

#include <stdio.h>
#include <systemd/sd-daemon.h>
#include <time.h>

void notify_ready (const char *status)
{
    char msg[512];
    snprintf (msg, sizeof msg, "READY=1\nSTATUS=%s", status);
    sd_notify (0, msg);
}

void notify_reloading (void)
{
    /* MONOTONIC_USEC lets systemd (253+) tell this reload from an earlier one. */
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    sd_notifyf (0, "RELOADING=1\nMONOTONIC_USEC=%llu",
                (unsigned long long) ts.tv_sec * 1000000ull + (unsigned long long) ts.tv_nsec / 1000);
}

void notify_stopping (void) { sd_notify (0, "STOPPING=1\nSTATUS=draining"); }
