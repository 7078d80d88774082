#define _GNU_SOURCE
#include <linux/futex.h>
#include <sys/syscall.h>
#include "base/threads.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char s_role[16];

void threads_set_role (const char *name)
{
    snprintf (s_role, sizeof s_role, "%s", name);
    pthread_setname_np (pthread_self (), s_role);
}

const char *threads_role (void) { return s_role; }

int threads_pin_set (const int *cpus, size_t count, char *err, size_t errlen)
{
    cpu_set_t set;
    CPU_ZERO (&set);
    for (size_t i = 0; i < count; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) {
            snprintf (err, errlen, "CPU %d does not exist", cpus[i]);
            return -1;
        }
        CPU_SET (cpus[i], &set);
    }
    int rc = pthread_setaffinity_np (pthread_self (), sizeof set, &set);
    if (rc != 0) {
        char list[128] = "";
        size_t n = 0;
        for (size_t i = 0; i < count && n < sizeof list; i++)
            n += (size_t) snprintf (list + n, sizeof list - n, "%s%d", i ? "," : "", cpus[i]);
        snprintf (err, errlen, "cannot pin to CPU %s: %s (the process may run on: see taskset -p %d)", list,
                  strerror (rc), (int) getpid ());
        return -1;
    }
    return 0;
}

int threads_pin (int cpu, char *err, size_t errlen) { return threads_pin_set (&cpu, 1, err, errlen); }

int waker_init (waker_t *w)
{
    atomic_init (&w->sleeping, 0);
    atomic_init (&w->seq, 0);
    w->fd = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
    return w->fd >= 0 ? 0 : -1;
}

int waker_init_inheritable (waker_t *w)
{
    atomic_init (&w->sleeping, 0);
    atomic_init (&w->seq, 0);
    w->fd = eventfd (0, EFD_NONBLOCK);
    return w->fd >= 0 ? 0 : -1;
}

void waker_init_futex (waker_t *w)
{
    atomic_init (&w->sleeping, 0);
    atomic_init (&w->seq, 0);
    w->fd = -1;
}

void waker_release (waker_t *w)
{
    if (w->fd >= 0)
        close (w->fd);
    w->fd = -1;
}

void waker_clear (waker_t *w)
{
    if (w->fd < 0)
        return;
    uint64_t v;
    while (read (w->fd, &v, sizeof v) == sizeof v)
        ;
}

void waker_sleep (waker_t *w, uint64_t timeout_ns)
{
    struct timespec ts = { .tv_sec = (time_t) (timeout_ns / 1000000000ull), .tv_nsec = (long) (timeout_ns % 1000000000ull) };
    if (w->fd < 0) {    /* shared between processes: no FUTEX_PRIVATE_FLAG */
        syscall (SYS_futex, &w->seq, FUTEX_WAIT, w->snap, timeout_ns ? &ts : NULL, NULL, 0);
        atomic_store (&w->sleeping, 0);
        return;
    }
    struct pollfd p = { .fd = w->fd, .events = POLLIN };
    ppoll (&p, 1, timeout_ns ? &ts : NULL, NULL);
    atomic_store (&w->sleeping, 0);
    waker_clear (w);
}

void waker_wake (waker_t *w)
{
    /* The work was published with a release store; without a full fence the load of sleeping
     * below could be done before it (store-load reordering), and a sleeper that checked for work
     * in between would never be woken. */
    atomic_thread_fence (memory_order_seq_cst);
    if (atomic_load_explicit (&w->sleeping, memory_order_relaxed) && atomic_exchange (&w->sleeping, 0)) {
        if (w->fd < 0) {
            atomic_fetch_add (&w->seq, 1);
            syscall (SYS_futex, &w->seq, FUTEX_WAKE, 1, NULL, NULL, 0);
            return;
        }
        uint64_t one = 1;
        ssize_t n = write (w->fd, &one, sizeof one);
        (void) n;   /* EAGAIN: a wake-up is already pending, which is all we need */
    }
}
