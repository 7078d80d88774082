/* Adaptive spinning (spin.h). */
#define _GNU_SOURCE
#include "base/spin.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GAP_WEIGHT 8            /* the average follows the last ~8 gaps */

void spin_init (spin_t *s, uint64_t cap_ns)
{
    memset (s, 0, sizeof *s);
    s->cap_ns = cap_ns;
}

void spin_arrival (spin_t *s, uint64_t now)
{
    if (s->last_ns) {
        uint64_t gap = now - s->last_ns;
        if (gap > 4 * s->cap_ns)    /* after a quiet spell the average starts again from the cap */
            gap = 4 * s->cap_ns;
        s->gap_ns = s->gap_ns ? s->gap_ns - s->gap_ns / GAP_WEIGHT + gap / GAP_WEIGHT : gap;
    }
    s->last_ns = now;
    s->spun = false;
}

bool spin_idle (spin_t *s, uint64_t now, bool waiting)
{
    if (!s->cap_ns || !s->last_ns)
        return false;
    uint64_t window = waiting ? s->cap_ns : 2 * s->gap_ns;
    if (window > s->cap_ns)
        window = s->cap_ns;
    const bool spin = now - s->last_ns < window;
    s->spun |= spin;
    return spin;
}

bool spin_ended (spin_t *s)
{
    const bool spun = s->spun;
    s->spun = false;
    return spun;
}

int spin_cgroup_cpus (const char *cpu_max)
{
    char quota[32];
    unsigned long long period = 0;
    if (!cpu_max || sscanf (cpu_max, "%31s %llu", quota, &period) != 2 || period == 0 || strcmp (quota, "max") == 0)
        return -1;
    char *end;
    unsigned long long q = strtoull (quota, &end, 10);
    if (*end != '\0' || q == 0)
        return -1;
    unsigned long long cpus = q / period;
    return cpus ? (int) cpus : 1;
}

/* This process's cgroup v2 cpu.max, if any ("0::/PATH" in /proc/self/cgroup). */
static int s_cgroup_cpus (void)
{
    FILE *f = fopen ("/proc/self/cgroup", "r");
    char line[4096], path[4200];
    int cpus = -1;
    while (f && fgets (line, sizeof line, f))
        if (strncmp (line, "0::", 3) == 0) {
            line[strcspn (line, "\n")] = '\0';
            snprintf (path, sizeof path, "/sys/fs/cgroup%s/cpu.max", line + 3);
            FILE *m = fopen (path, "r");
            char max[128];
            if (m && fgets (max, sizeof max, m))
                cpus = spin_cgroup_cpus (max);
            if (m)
                fclose (m);
        }
    if (f)
        fclose (f);
    return cpus;
}

int spin_cpus_available (void)
{
    cpu_set_t set;
    int cpus = sched_getaffinity (0, sizeof set, &set) == 0 ? CPU_COUNT (&set) : -1;
    const int quota = s_cgroup_cpus ();
    if (quota > 0 && (cpus < 0 || quota < cpus))
        cpus = quota;
    return cpus;
}

uint64_t spin_cap (uint64_t cap_ns, int threads, int available, char *why, size_t whylen)
{
    if (cap_ns == 0) {
        snprintf (why, whylen, "off (server.spin_us 0)");
        return 0;
    }
    if (available < 0) {
        snprintf (why, whylen, "off: the CPUs this process may use cannot be read");
        return 0;
    }
    if (threads > available) {
        snprintf (why, whylen, "off: %d serving thread(s) and %d CPU(s) to run them on (affinity and cgroup quota): a "
                  "spinning thread would take the time another needs", threads, available);
        return 0;
    }
    if (threads == available) {
        /* Spinning threads on every CPU leave none for the kernel's network work, the control and HTTP
         * threads or a client on the same host: on 2 CPUs (the zmtp front and one worker, no I/O thread)
         * a 2k/s load's server time went from 12 to 600 us. */
        snprintf (why, whylen, "off: %d serving thread(s) on %d CPU(s) (affinity and cgroup quota) would leave none for "
                  "the rest (the kernel's network work, a client on this host)", threads, available);
        return 0;
    }
    snprintf (why, whylen, "up to %llu us (%d serving thread(s), %d CPU(s))", (unsigned long long) (cap_ns / 1000),
              threads, available);
    return cap_ns;
}
