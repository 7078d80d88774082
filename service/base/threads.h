/* sigserve's own threads: names (seen in top -H, in logs, and by tests that count what the
 * server's threads do), CPU pinning, and a sleep/wake pair without lost wake-ups. */
#ifndef SIGSERVE_THREADS_H
#define SIGSERVE_THREADS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Names the calling thread (up to 15 bytes show in the OS) and records it as one of
 * sigserve's serving threads; threads_role () then returns the name. */
void threads_set_role (const char *name);
/* The calling thread's role, or "" for a thread sigserve did not name (libzmq's, a test's). */
const char *threads_role (void);

/* Pins the calling thread to CPU. 0, or -1 with ERR (the CPU does not exist or is not allowed). */
int threads_pin (int cpu, char *err, size_t errlen);
/* Pins the calling thread to the CPUs in the list. */
int threads_pin_set (const int *cpus, size_t count, char *err, size_t errlen);

/* One thread sleeps until another has work for it. The sleeper announces itself with
 * waker_prepare, looks for work once more, then either waker_cancel (found some) or
 * waker_sleep; the other side calls waker_wake after publishing work, which costs one atomic
 * exchange when nobody sleeps and a write(2) to an eventfd when somebody does. The sequentially
 * consistent store/load pair on each side guarantees that either the sleeper sees the work or the
 * waker sees the sleeper. The eventfd can also sit in a zmq_poll set (the front does that).
 * A waker in memory shared between processes (base/shm.h) works across them: a futex one
 * (waker_init_futex: no descriptor, the word itself is shared), or an eventfd one that child
 * processes inherit at the same number (waker_init_inheritable). */
typedef struct {
    _Alignas (64) _Atomic int sleeping;
    int fd;                     /* eventfd, non-blocking; -1: a futex on seq */
    _Atomic uint32_t seq;       /* futex: bumped by each wake-up of a sleeper */
    uint32_t snap;              /* futex: seq when the sleeper announced itself */
} waker_t;

int waker_init (waker_t *w);
int waker_init_inheritable (waker_t *w);
void waker_init_futex (waker_t *w);
void waker_release (waker_t *w);
static inline void waker_prepare (waker_t *w)
{
    atomic_store (&w->sleeping, 1);
    w->snap = atomic_load (&w->seq);    /* a wake-up after this makes the futex wait return at once */
}
static inline void waker_cancel (waker_t *w) { atomic_store (&w->sleeping, 0); }
/* Sleeps until woken or TIMEOUT_NS pass (0: no limit); clears the wake-up either way. */
void waker_sleep (waker_t *w, uint64_t timeout_ns);
/* Reads away a wake-up after the fd polled readable elsewhere (zmq_poll). */
void waker_clear (waker_t *w);
void waker_wake (waker_t *w);

#endif
