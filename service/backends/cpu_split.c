/* A CPU model instance's layers split across its cores (cpu_split.h says the protocol). */
#define _GNU_SOURCE
#include "backends/cpu_split.h"

#include "base/threads.h"
#include "clock.h"

#include <errno.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A helper's sleep state: spinning (or working), asleep (or about to: it checks for a call once more
 * after saying so), woken (its futex bumped, not yet spinning again). */
enum { S_SPINNING = 0, S_ASLEEP = 1, S_WOKEN = 2 };

/* One part's cache line: only that part writes it (and a leader waking a helper: state, bell). */
typedef struct {
    _Alignas (64) _Atomic uint64_t tick;   /* the last tick it published */
    _Atomic uint32_t state;     /* helpers: S_* (the leader reads it at every call: this line is one it reads anyway) */
    _Atomic uint32_t bell;      /* helpers: the futex word a wake-up bumps */
    uint32_t rows;              /* the leader's: this call's rows ... */
    uint32_t slot;              /* ... its stamps' slot where a trace is set ... */
    uint64_t mask, chain;       /* ... its split layers and chained ones ... */
    const void *arg;            /* ... and its argument, written before the tick that starts it */
} s_line_t;
_Static_assert (sizeof (s_line_t) == 64, "one cache line a part");

typedef struct {
    cpu_split_t *split;
    uint32_t part;
    pthread_t thread;
    bool started;
} s_helper_t;

struct cpu_split {
    s_line_t line[CPU_SPLIT_MAX_PARTS];    /* part p's line; 0 the leader's */
    /* read by every part, written only at start and stop (apart from the leader's own below: a line
     * the helpers poll must not be one it writes each call, or its locked add waits for their copies) */
    _Alignas (64) uint32_t parts, layers;
    cpu_split_layer_fn fn;
    void *ctx;
    uint64_t spin_ns;           /* a helper idle this long sleeps (UINT64_MAX: never) */
    _Atomic bool stop;
    cpu_split_stamps_t *trace;  /* CALLS x parts stamps lines, or NULL (cpu_split_set_trace) */
    uint32_t trace_calls;
    char name[16];
    /* the leader's own */
    _Alignas (64) uint64_t tick;    /* the last tick of the last split call, every helper's too */
    _Atomic uint64_t split_calls, woke_calls;   /* written by the leader alone (no locked add), read by anyone */
    _Alignas (64) s_helper_t helper[CPU_SPLIT_MAX_PARTS];
};

#define S_END UINT32_MAX     /* the leader's end stamp (the last) */

/* The leader's stamp of its part of layer L done, in the call of SLOT, where a trace is set (layers past
 * the stamps' room: none). */
static inline void s_stamp_layer (const cpu_split_t *s, uint32_t slot, uint32_t l)
{
    if (__builtin_expect (s->trace != NULL, 0) && l < CPU_SPLIT_STAMPS - 1 - CPU_SPLIT_STAMP_LAYER)
        s->trace[(size_t) slot * s->parts].t[CPU_SPLIT_STAMP_LAYER + l] = __rdtsc ();
}

/* Part P's stamp E (or S_END) of the call in SLOT, where a trace is set (segments past the stamps' room:
 * none). */
static inline void s_stamp (const cpu_split_t *s, uint32_t slot, uint32_t p, uint32_t e)
{
    if (__builtin_expect (s->trace != NULL, 0) && (e < CPU_SPLIT_STAMP_LAYER - 1 || e == S_END))
        s->trace[(size_t) slot * s->parts + p].t[e == S_END ? CPU_SPLIT_STAMPS - 1 : e] = __rdtsc ();
}

/* C + 1, by its one writer (a plain store: readers see one value or the next). */
static inline void s_count (_Atomic uint64_t *c)
{
    atomic_store_explicit (c, atomic_load_explicit (c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static void s_futex_wait (_Atomic uint32_t *word, uint32_t seen)
{
    syscall (SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

/* Wakes helper H if it sleeps (or is about to: its futex word moves, so its wait returns at once). */
static void s_wake (cpu_split_t *s, uint32_t h)
{
    uint32_t asleep = S_ASLEEP;
    if (atomic_compare_exchange_strong (&s->line[h].state, &asleep, S_WOKEN)) {
        atomic_fetch_add (&s->line[h].bell, 1);
        syscall (SYS_futex, &s->line[h].bell, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* Until every part but SKIP (and the leader, part 0, unless WITH_LEADER) published at least T. Their lines
 * are asked for at once first (a part that finished long ago still costs one crossing to read). */
static inline void s_wait_parts (const cpu_split_t *s, uint64_t t, uint32_t skip, bool with_leader)
{
    for (uint32_t p = with_leader ? 0 : 1; p < s->parts; p++)
        if (p != skip)
            _mm_prefetch ((const char *) &s->line[p], _MM_HINT_T0);
    for (uint32_t p = with_leader ? 0 : 1; p < s->parts; p++)
        if (p != skip)
            while (atomic_load_explicit (&s->line[p].tick, memory_order_acquire) < t)
                _mm_pause ();
}

/* A helper between calls: true once the leader's tick passes DONE (a call), false at stop. Spins
 * while calls keep coming within spin_ns, then sleeps until woken. */
static bool s_await_call (cpu_split_t *s, s_line_t *mine, uint64_t done)
{
    const _Atomic uint64_t *leader = &s->line[0].tick;
    uint64_t idle_since = clock_now_ns ();
    for (;;) {
        for (int i = 0; i < 256; i++) {
            if (atomic_load_explicit (leader, memory_order_acquire) > done)
                return true;
            if (atomic_load_explicit (&s->stop, memory_order_relaxed))
                return false;
            _mm_pause ();
        }
        if (s->spin_ns == UINT64_MAX || clock_now_ns () - idle_since < s->spin_ns)
            continue;
        const uint32_t bell = atomic_load (&mine->bell);
        atomic_store (&mine->state, S_ASLEEP);     /* seq_cst: then the leader's tick, once more */
        if (atomic_load (leader) <= done && !atomic_load (&s->stop))
            while (atomic_load (&mine->state) == S_ASLEEP)
                s_futex_wait (&mine->bell, bell);
        atomic_store (&mine->state, S_SPINNING);
        idle_since = clock_now_ns ();
    }
}

static void *s_helper_main (void *arg)
{
    s_helper_t *h = arg;
    cpu_split_t *s = h->split;
    s_line_t *mine = &s->line[h->part];
    char role[32];
    snprintf (role, sizeof role, "%.10s-s%u", s->name, h->part);
    role[15] = '\0';
    threads_set_role (role);    /* one of the server's threads (what tests count) */
    uint64_t done = 0;
    while (s_await_call (s, mine, done)) {
        /* the call's first tick (the leader may be past it already, at its second) */
        const uint64_t base = done + 1;
        const uint32_t rows = s->line[0].rows, slot = s->line[0].slot;
        s_stamp (s, slot, h->part, 0);
        const uint64_t mask = s->line[0].mask, chain = s->line[0].chain;
        const void *arg = s->line[0].arg;
        uint64_t j = 0;
        for (uint32_t l = 0; l < s->layers; l++) {
            if (!(mask >> l & 1))
                continue;
            if (j > 0 && !(chain >> l & 1)) {   /* segment j + 1 reads segment j, every part's slice (and the
                                                   leader's unsplit layers after it) */
                while (atomic_load_explicit (&s->line[0].tick, memory_order_acquire) < base + j)
                    _mm_pause ();
                s_wait_parts (s, base + j, h->part, false);
                s_stamp (s, slot, h->part, (uint32_t) (2 * j));
            }
            s->fn (s->ctx, arg, l, rows, h->part, s->parts);
            if (l + 1 < s->layers && chain >> (l + 1) & 1)
                continue;   /* the next reads only what this part wrote: no barrier between them */
            j++;
            s_stamp (s, slot, h->part, (uint32_t) (2 * j - 1));
            atomic_store_explicit (&mine->tick, base + j, memory_order_release);
        }
        done = base + j;
    }
    return NULL;
}

cpu_split_t *cpu_split_new (const int *cpus, size_t count, uint32_t layers, cpu_split_layer_fn fn, void *ctx,
                            uint64_t spin_ns, const char *name, char *err, size_t errlen)
{
    if (count < 2 || count > CPU_SPLIT_MAX_PARTS || layers == 0 || layers > 64) {
        snprintf (err, errlen, "a split needs 2 to %d cores and 1 to 64 layers (got %zu cores, %u layers)",
                  CPU_SPLIT_MAX_PARTS, count, layers);
        return NULL;
    }
    cpu_split_t *s = aligned_alloc (64, sizeof *s);
    if (!s) {
        snprintf (err, errlen, "out of memory for the split");
        return NULL;
    }
    memset (s, 0, sizeof *s);
    s->parts = (uint32_t) count;
    s->layers = layers;
    s->fn = fn;
    s->ctx = ctx;
    s->spin_ns = spin_ns;
    snprintf (s->name, sizeof s->name, "%s", name);
    atomic_init (&s->stop, false);
    for (uint32_t p = 0; p < s->parts; p++) {
        atomic_init (&s->line[p].tick, 0);
        atomic_init (&s->line[p].state, S_SPINNING);
        atomic_init (&s->line[p].bell, 0);
    }
    for (uint32_t p = 1; p < s->parts; p++) {
        s_helper_t *h = &s->helper[p];
        h->split = s;
        h->part = p;
        pthread_attr_t attr;
        cpu_set_t set;
        CPU_ZERO (&set);
        int rc = cpus[p] >= 0 && cpus[p] < CPU_SETSIZE ? 0 : EINVAL;
        if (rc == 0) {
            CPU_SET (cpus[p], &set);
            pthread_attr_init (&attr);
            /* the affinity before it runs: it never touches a core the config did not give it */
            rc = pthread_attr_setaffinity_np (&attr, sizeof set, &set);
            if (rc == 0)
                rc = pthread_create (&h->thread, &attr, s_helper_main, h);
            pthread_attr_destroy (&attr);
        }
        if (rc == 0) {
            char role[32];
            snprintf (role, sizeof role, "%.10s-s%u", s->name, p);
            role[15] = '\0';   /* the OS keeps 15 bytes */
            pthread_setname_np (h->thread, role);   /* here: named before anyone looks for it */
        }
        if (rc != 0) {
            snprintf (err, errlen, "cannot start the split's helper on cpu %d: %s (the process may run on: see "
                      "taskset -p %d)", cpus[p], strerror (rc), (int) getpid ());
            cpu_split_destroy (&s);
            return NULL;
        }
        h->started = true;
    }
    return s;
}

void cpu_split_destroy (cpu_split_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    cpu_split_t *s = *self_p;
    atomic_store (&s->stop, true);
    for (uint32_t p = 1; p < s->parts; p++)
        if (s->helper[p].started) {
            s_wake (s, p);
            pthread_join (s->helper[p].thread, NULL);
        }
    free (s);
    *self_p = NULL;
}

static void s_alone (cpu_split_t *s, uint32_t rows, const void *arg)
{
    for (uint32_t l = 0; l < s->layers; l++)
        s->fn (s->ctx, arg, l, rows, 0, 1);
}

bool cpu_split_run (cpu_split_t *s, uint64_t mask, uint64_t chain, uint32_t rows, const void *arg)
{
    if (s->layers < 64)
        mask &= (1ull << s->layers) - 1;
    chain &= mask & mask << 1;
    if (!mask) {
        s_alone (s, rows, arg);
        return false;
    }
    bool asleep = false;
    for (uint32_t h = 1; h < s->parts; h++)
        if (atomic_load_explicit (&s->line[h].state, memory_order_relaxed) != S_SPINNING) {
            asleep = true;
            s_wake (s, h);
        }
    if (asleep) {
        s_count (&s->woke_calls);
        s_alone (s, rows, arg);
        return false;
    }
    s_line_t *me = &s->line[0];
    const uint64_t base = s->tick + 1;
    const uint32_t slot =
        s->trace ? (uint32_t) (atomic_load_explicit (&s->split_calls, memory_order_relaxed) % s->trace_calls) : 0;
    uint32_t l = 0;
    for (; !(mask >> l & 1); l++) {     /* the layers before the first split one: here */
        s->fn (s->ctx, arg, l, rows, 0, 1);
        s_stamp_layer (s, slot, l);
    }
    me->rows = rows;
    me->mask = mask;
    me->chain = chain;
    me->arg = arg;
    me->slot = slot;
    s_stamp (s, slot, 0, 0);
    /* released, not seq_cst: the line is the helpers' to read, and its store drains while the leader
     * computes (an xchg would wait for it: ~0.3 us here) */
    atomic_store_explicit (&me->tick, base, memory_order_release);
    bool checked = false;
    uint64_t j = 0;
    while (l < s->layers) {
        do {    /* segment j + 1: a split layer and those chained to it, the leader's slices */
            s->fn (s->ctx, arg, l, rows, 0, s->parts);
            s_stamp_layer (s, slot, l);
        } while (++l < s->layers && chain >> l & 1);
        j++;
        s_stamp (s, slot, 0, (uint32_t) (2 * j - 1));
        if (!checked) {
            /* whether a helper fell asleep as the call came: the fence orders the tick's store before
             * the loads of their states, as their seq_cst store of the state precedes their last look
             * at the tick (one of the two sees the other). Here its store has long drained: cheap. */
            checked = true;
            atomic_thread_fence (memory_order_seq_cst);
            for (uint32_t h = 1; h < s->parts; h++)
                if (atomic_load_explicit (&s->line[h].state, memory_order_relaxed) == S_ASLEEP)
                    s_wake (s, h);      /* it may not have seen the call: wait for it this once */
        }
        if (l < s->layers && (mask >> l & 1)) {
            atomic_store_explicit (&me->tick, base + j, memory_order_release);
            s_wait_parts (s, base + j, 0, false);
            s_stamp (s, slot, 0, (uint32_t) (2 * j));
            continue;
        }
        s_wait_parts (s, base + j, 0, false);
        s_stamp (s, slot, 0, (uint32_t) (2 * j));
        for (; l < s->layers && !(mask >> l & 1); l++) {
            s->fn (s->ctx, arg, l, rows, 0, 1);
            s_stamp_layer (s, slot, l);
        }
        if (l < s->layers)
            atomic_store_explicit (&me->tick, base + j, memory_order_release);
    }
    s->tick = base + j;
    s_stamp (s, slot, 0, S_END);
    s_count (&s->split_calls);
    return true;
}

void cpu_split_set_trace (cpu_split_t *s, cpu_split_stamps_t *stamps, uint32_t calls)
{
    s->trace_calls = calls ? calls : 1;
    s->trace = stamps;
}

uint32_t cpu_split_parts (const cpu_split_t *s) { return s->parts; }

void cpu_split_counts (const cpu_split_t *s, uint64_t *split, uint64_t *woke)
{
    *split = atomic_load_explicit (&s->split_calls, memory_order_relaxed);
    *woke = atomic_load_explicit (&s->woke_calls, memory_order_relaxed);
}

bool cpu_split_helpers_asleep (const cpu_split_t *s)
{
    for (uint32_t h = 1; h < s->parts; h++)
        if (atomic_load (&s->line[h].state) != S_ASLEEP)
            return false;
    return true;
}
