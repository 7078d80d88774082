/* Adaptive spinning: how long an idle serving thread keeps polling before it sleeps. A thread
 * that sleeps pays a wake-up (~10-20 us on the hosts measured: docs/perf.md) when the next piece of
 * work comes; one that spins pays a core. So a thread spins only
 *   - where spinning is allowed at all: the threads that may spin have a CPU each to themselves
 *     (the process's affinity mask and its cgroup CPU quota, a Kubernetes limit, both counted:
 *     spin_cpus_available), and server.spin_us (the cap) is not 0;
 *   - while it waits for an answer of its own (the front, a request handed to a worker), up to the
 *     cap; or
 *   - after its last arrival, for twice the recent time between arrivals, up to the cap: work that
 *     comes that often is caught spinning, and a thread whose work stopped coming sleeps within the
 *     cap, so an idle server sleeps.
 * Cgroup v2 only (a v1 quota is not read: then the affinity mask alone counts). busy_poll is the
 * other extreme (never sleep) and is not this module's business. */
#ifndef SIGSERVE_SPIN_H
#define SIGSERVE_SPIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t cap_ns;            /* server.spin_us; 0: never spin */
    uint64_t last_ns;           /* the last arrival */
    uint64_t gap_ns;            /* running average of the time between arrivals (0: none yet) */
    bool spun;                  /* spin_idle said spin since the last arrival */
} spin_t;

void spin_init (spin_t *s, uint64_t cap_ns);
/* Work arrived at NOW. */
void spin_arrival (spin_t *s, uint64_t now);
/* Whether an idle thread keeps spinning at NOW; WAITING: an answer of its own is outstanding. */
bool spin_idle (spin_t *s, uint64_t now, bool waiting);
/* The thread goes to sleep: true when it had spun since its last arrival (a spin that ended in a
 * sleep, for the counters), once per such spin. */
bool spin_ended (spin_t *s);

/* The CPUs this process may keep busy: its affinity mask's, at most its cgroup's quota (rounded
 * down). -1 when neither can be read. */
int spin_cpus_available (void);
/* A cgroup v2 cpu.max line ("max 100000", "150000 100000"): whole CPUs of quota, rounded down
 * (1 at least), or -1 for no limit or a line that does not parse. */
int spin_cgroup_cpus (const char *cpu_max);
/* The cap the server's threads spin up to: CAP_NS when THREADS spinning threads (the front and
 * every worker; ZeroMQ's I/O threads counted too, as they run when messages come) each have a
 * CPU of AVAILABLE, else 0. WHY says which (for the log). */
uint64_t spin_cap (uint64_t cap_ns, int threads, int available, char *why, size_t whylen);

#endif
