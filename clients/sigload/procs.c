/* --processes N: one load in N processes (sigload.h). Where one process cannot drive the server
 * hard enough (its threads and its ZeroMQ I/O thread saturate first), N copies each carry 1/N of the
 * rate (or concurrency), connections, threads and --requests. Process 0 chooses each step's start
 * time and passes it on through shared memory behind a process-shared barrier, so every copy's step
 * starts at once; after a step the others copy their counts and histograms (which hold no
 * pointers) into shared slots and process 0 merges them before it prints the step: one table, as if
 * one process had sent everything. Only process 0 writes output files; the others print nothing. */
#define _GNU_SOURCE
#include "sigload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PROCESSES 16

typedef struct {
    counts_t counts;
    size_t hist_off[3];             /* total, server, network: offsets from the shared area's start */
} slot_t_;

typedef struct {
    _Atomic unsigned arrived;       /* the barrier: processes in it ... */
    _Atomic unsigned generation;    /* ... and how many times it opened */
    _Atomic int abandoned;          /* a process was interrupted: nobody waits any more */
    int64_t t0;
    int stop;
    unsigned n;
    double total[MAX_STEPS];        /* each step's value for the whole load, and process 0's share */
    double share0[MAX_STEPS];
    slot_t_ slots[MAX_PROCESSES];
} shared_t;

static shared_t *s_shared;
static pid_t s_children[MAX_PROCESSES];

/* Every process waits here until all have come (polling: a few times between steps). False when one
 * was interrupted (SIGINT reaches them all): nobody waits for the others then. */
static bool s_barrier (void)
{
    const unsigned gen = atomic_load (&s_shared->generation);
    if (atomic_fetch_add (&s_shared->arrived, 1) + 1 == s_shared->n) {
        atomic_store (&s_shared->arrived, 0);
        atomic_fetch_add (&s_shared->generation, 1);
        return true;
    }
    while (atomic_load (&s_shared->generation) == gen) {
        if (sigload_interrupted || atomic_load (&s_shared->abandoned)) {
            atomic_store (&s_shared->abandoned, 1);
            return false;
        }
        usleep (50);
    }
    return true;
}

static histogram_t *s_hist (unsigned process, int which)
{
    return (histogram_t *) ((char *) s_shared + s_shared->slots[process].hist_off[which]);
}

/* COUNT split over N: process K's share (the first ones take the remainder). */
static uint64_t s_share (uint64_t count, unsigned n, unsigned k) { return count / n + (k < count % n ? 1 : 0); }

int procs_start (options_t *opt)
{
    const unsigned n = opt->processes;
    if (n <= 1) {
        opt->process = 0;
        return 0;
    }
    const size_t hbytes = (histogram_bytes () + 63) & ~(size_t) 63;
    const size_t head = (sizeof (shared_t) + 63) & ~(size_t) 63;
    const size_t bytes = head + (size_t) n * 3 * hbytes;
    void *mem = mmap (NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        fprintf (stderr, "sigload: --processes: cannot map %zu bytes of shared memory: %s\n", bytes, strerror (errno));
        return EXIT_USAGE;
    }
    s_shared = mem;
    s_shared->n = n;
    for (size_t i = 0; i < opt->n_values; i++)
        s_shared->total[i] = opt->values[i];
    for (unsigned k = 0; k < n; k++)
        for (int h = 0; h < 3; h++) {
            s_shared->slots[k].hist_off[h] = head + ((size_t) k * 3 + (size_t) h) * hbytes;
            histogram_reset (s_hist (k, h));
        }
    fflush (stdout);
    fflush (stderr);
    unsigned me = 0;
    for (unsigned k = 1; k < n; k++) {
        pid_t pid = fork ();
        if (pid < 0) {
            fprintf (stderr, "sigload: --processes: cannot start process %u: %s\n", k, strerror (errno));
            for (unsigned j = 1; j < k; j++)
                kill (s_children[j], SIGKILL);
            return EXIT_USAGE;
        }
        if (pid == 0) {
            me = k;
            break;
        }
        s_children[k] = pid;
    }
    opt->process = me;
    /* this process's share of the load: the rate split evenly, a concurrency in whole requests */
    for (size_t i = 0; i < opt->n_values; i++) {
        opt->values[i] = opt->mode == MODE_CLOSED ? (double) s_share ((uint64_t) opt->values[i], n, me)
                                                  : opt->values[i] / n;
        if (me == 0)
            s_shared->share0[i] = opt->values[i];
    }
    opt->all_connections = opt->connections;
    opt->connections = (unsigned) s_share (opt->connections, n, me);
    opt->threads = (unsigned) s_share (opt->threads, n, me);
    if (opt->threads < 1)
        opt->threads = 1;
    if (opt->requests)
        opt->requests = s_share (opt->requests, n, me);
    if (me != 0) {
        opt->quiet = true;
        opt->out_dir = NULL;
        int devnull = open ("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2 (devnull, STDOUT_FILENO);
            close (devnull);
        }
    }
    return 0;
}

int64_t procs_step_begin (const options_t *opt, int64_t t0, bool stop)
{
    if (!s_shared)
        return stop ? 0 : t0;
    if (opt->process == 0) {
        s_shared->t0 = t0 + 30 * 1000000LL;     /* the others are past the barrier by then */
        s_shared->stop = stop;
    }
    if (!s_barrier ())
        return 0;
    return s_shared->stop ? 0 : s_shared->t0;
}

void procs_step_end (const options_t *opt, result_t *r)
{
    if (!s_shared)
        return;
    const unsigned me = opt->process;
    if (me != 0) {
        s_shared->slots[me].counts = r->counts;
        histogram_t *const mine[3] = { r->total, r->server, r->network };
        for (int h = 0; h < 3; h++) {
            histogram_reset (s_hist (me, h));
            histogram_merge (s_hist (me, h), mine[h]);
        }
    }
    if (!s_barrier () || me != 0)
        return;
    for (unsigned k = 1; k < s_shared->n; k++)
        report_add (r, &s_shared->slots[k].counts, s_hist (k, 0), s_hist (k, 1), s_hist (k, 2));
    report_totals (r);
    /* the step's value as the whole load's, not process 0's share */
    for (size_t i = 0; i < MAX_STEPS; i++)
        if (s_shared->share0[i] == r->step.target && s_shared->total[i] > 0) {
            r->step.target = s_shared->total[i];
            break;
        }
}

int procs_finish (const options_t *opt)
{
    if (!s_shared || opt->process != 0)
        return 0;
    int worst = 0;
    for (unsigned k = 1; k < s_shared->n; k++) {
        int status = 0;
        if (waitpid (s_children[k], &status, 0) == s_children[k]) {
            const int code = WIFEXITED (status) ? WEXITSTATUS (status) : EXIT_ERRORS;
            worst = code > worst ? code : worst;
        }
    }
    return worst;
}
