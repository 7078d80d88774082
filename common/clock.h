/* The monotonic clock every part of sigserve times with (server stamps, client round trips,
 * benchmarks). Inline: one clock_gettime through the vDSO, no system call. */
#ifndef SIGSERVE_CLOCK_H
#define SIGSERVE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t clock_now_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* CLOCK_MONOTONIC in microseconds, as a double (benchmarks and reports). */
static inline double clock_now_us (void) { return (double) clock_now_ns () / 1e3; }

#endif
