/* base/threads.h: the waker (a sleep/wake pair that never loses a wake-up, and costs no system
 * call when nobody sleeps), thread roles, and CPU pinning with errors that name the CPU. */
#define _GNU_SOURCE
#include "base/threads.h"
#include "clock.h"
#include "testutil.h"

#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Whether FD polls readable right now (a zero timeout: nothing is waited for). */
static bool s_readable (int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return poll (&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* ---- the waker ---- */

#define ROUNDS 20000

typedef struct {
    waker_t waker;
    _Atomic uint64_t published;     /* rounds whose item is written */
    _Atomic uint64_t consumed;      /* rounds whose item the sleeper has seen */
    uint64_t items[ROUNDS];         /* written before publishing, read after seeing it published */
    uint64_t sum;                   /* of the items the sleeper saw */
    uint64_t sleeps;                /* times the sleeper really slept */
    uint64_t cancels;               /* times it announced itself, then found the item */
} handoff_t;

/* The worker's pattern: announce, look once more, then cancel or sleep (no timeout: a lost
 * wake-up would leave it asleep for good, which the publisher notices). */
static void *s_sleeper (void *arg)
{
    handoff_t *h = arg;
    for (uint64_t r = 0; r < ROUNDS; r++) {
        while (atomic_load_explicit (&h->published, memory_order_acquire) <= r) {
            waker_prepare (&h->waker);
            for (volatile uint64_t k = 0; k < (r * 31) % 300; k++)
                ;   /* a varying look for work: a publish lands inside it, or after it */
            if (atomic_load_explicit (&h->published, memory_order_acquire) > r) {
                waker_cancel (&h->waker);
                h->cancels++;
                break;
            }
            h->sleeps++;
            waker_sleep (&h->waker, 0);
        }
        h->sum += h->items[r];
        atomic_store_explicit (&h->consumed, r + 1, memory_order_release);
    }
    return NULL;
}

START_TEST (a_wake_after_publishing_is_never_lost)
{
    /* Each round the publisher writes an item, publishes it (release), wakes, and waits until the
     * sleeper has seen it: the sleeper is between its announcement and its sleep at every point
     * the scheduler happens to choose, 20 000 times. A round not seen within 10 s is a lost
     * wake-up (the sleeper sleeps with no timeout). */
    static handoff_t h;
    memset (&h, 0, sizeof h);
    ck_assert_int_eq (waker_init (&h.waker), 0);
    pthread_t sleeper;
    ck_assert_int_eq (pthread_create (&sleeper, NULL, s_sleeper, &h), 0);
    uint64_t want = 0;
    for (uint64_t r = 0; r < ROUNDS; r++) {
        for (volatile uint64_t k = 0; k < (r * 7919) % 400; k++)
            ;   /* a varying pause: the publish lands at a different point of the sleeper's steps */
        h.items[r] = r * 3 + 1;
        want += h.items[r];
        atomic_store_explicit (&h.published, r + 1, memory_order_release);
        waker_wake (&h.waker);
        const uint64_t until = clock_now_ns () + 10000000000ull;
        for (uint64_t spins = 1; atomic_load_explicit (&h.consumed, memory_order_acquire) <= r; spins++)
            if (spins % 1024 == 0) {    /* spinning, so the next publish can land mid-announcement */
                if (clock_now_ns () >= until)
                    ck_abort_msg ("round %llu was published and woken, and the sleeper never saw it in 10 s: a lost "
                                  "wake-up", (unsigned long long) r);
                sched_yield ();
            }
    }
    ck_assert_int_eq (pthread_join (sleeper, NULL), 0);
    ck_assert_uint_eq (atomic_load (&h.consumed), ROUNDS);
    ck_assert_uint_eq (h.sum, want);
    printf ("%d rounds: the sleeper slept %llu times and cancelled %llu times\n", ROUNDS,
            (unsigned long long) h.sleeps, (unsigned long long) h.cancels);
    ck_assert_uint_gt (h.sleeps, 0);    /* the sleeping path was taken, not only the cancelling one */
    waker_release (&h.waker);
    ck_assert_int_eq (h.waker.fd, -1);
}
END_TEST

START_TEST (a_sleep_with_a_timeout_returns_unwoken)
{
    waker_t w;
    ck_assert_int_eq (waker_init (&w), 0);
    waker_prepare (&w);
    const uint64_t t0 = clock_now_ns ();
    waker_sleep (&w, 2000000);          /* 2 ms, and nobody wakes it */
    ck_assert_uint_ge (clock_now_ns () - t0, 2000000);
    ck_assert_int_eq (atomic_load (&w.sleeping), 0);    /* no longer announced as sleeping */
    ck_assert (!s_readable (w.fd));
    waker_release (&w);
}
END_TEST

START_TEST (a_wake_without_a_sleeper_writes_nothing)
{
    waker_t w;
    ck_assert_int_eq (waker_init (&w), 0);
    for (int i = 0; i < 3; i++)
        waker_wake (&w);
    ck_assert_msg (!s_readable (w.fd), "waker_wake wrote to the eventfd with nobody asleep");
    ck_assert_int_eq (atomic_load (&w.sleeping), 0);
    /* A sleeper that announced itself then cancelled (it found work) is not woken either. */
    waker_prepare (&w);
    waker_cancel (&w);
    waker_wake (&w);
    ck_assert (!s_readable (w.fd));
    waker_release (&w);
}
END_TEST

START_TEST (a_wake_makes_the_eventfd_readable_and_clear_empties_it)
{
    /* The front sleeps in zmq_poll on the fd instead of waker_sleep: what it relies on. */
    waker_t w;
    ck_assert_int_eq (waker_init (&w), 0);
    waker_prepare (&w);
    waker_wake (&w);
    ck_assert_msg (s_readable (w.fd), "a wake with a sleeper announced left the eventfd unreadable");
    ck_assert_int_eq (atomic_load (&w.sleeping), 0);    /* the waker took the announcement */
    waker_wake (&w);                                    /* so a second wake writes nothing more */
    waker_clear (&w);
    ck_assert_msg (!s_readable (w.fd), "waker_clear left the eventfd readable");
    waker_clear (&w);                                   /* clearing an empty one does not block */
    /* Two announced sleeps, two wakes, one clear: both wake-ups read away at once. */
    waker_prepare (&w);
    waker_wake (&w);
    waker_prepare (&w);
    waker_wake (&w);
    ck_assert (s_readable (w.fd));
    waker_clear (&w);
    ck_assert (!s_readable (w.fd));
    /* A sleep after a wake that came before it returns at once and leaves the fd empty. */
    waker_prepare (&w);
    waker_wake (&w);
    waker_sleep (&w, 0);
    ck_assert (!s_readable (w.fd));
    waker_release (&w);
}
END_TEST

/* ---- roles ---- */

typedef struct {
    char before[16], after[16], os_name[16];
} role_seen_t;

static void *s_named (void *arg)
{
    role_seen_t *seen = arg;
    snprintf (seen->before, sizeof seen->before, "%s", threads_role ());
    threads_set_role ("w3-a-rather-long-model-name");
    snprintf (seen->after, sizeof seen->after, "%s", threads_role ());
    pthread_getname_np (pthread_self (), seen->os_name, sizeof seen->os_name);
    return NULL;
}

START_TEST (a_role_names_the_calling_thread_only)
{
    ck_assert_str_eq (threads_role (), "");     /* a thread sigserve did not name */
    threads_set_role ("front");
    ck_assert_str_eq (threads_role (), "front");
    char os_name[16];
    ck_assert_int_eq (pthread_getname_np (pthread_self (), os_name, sizeof os_name), 0);
    ck_assert_str_eq (os_name, "front");
    role_seen_t seen;
    pthread_t th;
    ck_assert_int_eq (pthread_create (&th, NULL, s_named, &seen), 0);
    pthread_join (th, NULL);
    ck_assert_str_eq (seen.before, "");                 /* a new thread starts without one */
    ck_assert_str_eq (seen.after, "w3-a-rather-lon");   /* cut to the 15 bytes the OS shows */
    ck_assert_str_eq (seen.os_name, "w3-a-rather-lon");
    ck_assert_str_eq (threads_role (), "front");        /* this thread's is its own */
    threads_set_role ("");                              /* as it was (CK_FORK=no) */
}
END_TEST

/* ---- pinning ---- */

START_TEST (pinning_to_an_allowed_cpu_confines_the_thread_to_it)
{
    cpu_set_t allowed;
    ck_assert_int_eq (sched_getaffinity (0, sizeof allowed, &allowed), 0);
    int cpu = 0;
    while (cpu < CPU_SETSIZE && !CPU_ISSET (cpu, &allowed))
        cpu++;
    ck_assert_int_lt (cpu, CPU_SETSIZE);
    char err[256] = "";
    ck_assert_msg (threads_pin (cpu, err, sizeof err) == 0, "%s", err);
    cpu_set_t now;
    ck_assert_int_eq (pthread_getaffinity_np (pthread_self (), sizeof now, &now), 0);
    ck_assert_int_eq (CPU_COUNT (&now), 1);
    ck_assert (CPU_ISSET (cpu, &now));
    /* A list: every CPU allowed now (just the one), given twice. */
    int list[2] = { cpu, cpu };
    ck_assert_msg (threads_pin_set (list, 2, err, sizeof err) == 0, "%s", err);
    pthread_setaffinity_np (pthread_self (), sizeof allowed, &allowed);     /* as it was (CK_FORK=no) */
}
END_TEST

START_TEST (pinning_to_a_cpu_that_does_not_exist_fails_naming_it)
{
    char err[256], want[256];
    /* Past what a cpu_set_t can hold, or negative: refused before asking the kernel. */
    ck_assert_int_eq (threads_pin (CPU_SETSIZE + 5, err, sizeof err), -1);
    snprintf (want, sizeof want, "CPU %d does not exist", CPU_SETSIZE + 5);
    ck_assert_str_eq (err, want);
    ck_assert_int_eq (threads_pin (-1, err, sizeof err), -1);
    ck_assert_str_eq (err, "CPU -1 does not exist");
    int list[3] = { 0, 70000, 1 };
    ck_assert_int_eq (threads_pin_set (list, 3, err, sizeof err), -1);
    ck_assert_str_eq (err, "CPU 70000 does not exist");
    /* One a cpu_set_t can hold but this machine has not: the kernel refuses, the error names it
     * and says where to look. */
    const int absent = CPU_SETSIZE - 1;
    ck_assert_int_lt (sysconf (_SC_NPROCESSORS_CONF), absent);
    ck_assert_int_eq (threads_pin (absent, err, sizeof err), -1);
    snprintf (want, sizeof want, "cannot pin to CPU %d: Invalid argument (the process may run on: see taskset -p %d)",
              absent, (int) getpid ());
    ck_assert_str_eq (err, want);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("threads");
    TCase *tw = tcase_create ("waker");
    tcase_set_timeout (tw, 120);
    tcase_add_test (tw, a_wake_after_publishing_is_never_lost);
    tcase_add_test (tw, a_sleep_with_a_timeout_returns_unwoken);
    tcase_add_test (tw, a_wake_without_a_sleeper_writes_nothing);
    tcase_add_test (tw, a_wake_makes_the_eventfd_readable_and_clear_empties_it);
    suite_add_tcase (s, tw);
    TCase *tr = tcase_create ("roles_and_pinning");
    tcase_add_test (tr, a_role_names_the_calling_thread_only);
    tcase_add_test (tr, pinning_to_an_allowed_cpu_confines_the_thread_to_it);
    tcase_add_test (tr, pinning_to_a_cpu_that_does_not_exist_fails_naming_it);
    suite_add_tcase (s, tr);
    return tu_run_suite (s);
}
