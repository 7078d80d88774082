/* An MLP split across cores ("split", backends/cpu_split.h): the protocol (every part computes its slice
 * of every split layer once a call, a layer only after every part finished the one before, unsplit
 * layers on the leader alone, a chained layer after its own part's slice), the helpers' pinning (never a
 * core they were not given) and their sleep and wake; the backend split over two cores against the
 * float64 reference within each output's derived bound (tolerance.h), in every weight dtype on every
 * instruction path and under every plan of split layers, int8 bit for bit with one core, no allocation
 * by a split call on either core (the link wraps malloc and its kin: the Makefile); the load's decision
 * ("auto": measured) in /models' fields and the config's refusals. Needs two CPUs this process may run
 * on (else it says SKIP). */
#define _GNU_SOURCE
#include "rng.h"
#include "reference.h"
#include "backends/backend.h"
#include "backends/cpu_dense.h"
#include "backends/cpu_isa.h"
#include "backends/cpu_split.h"
#include "base/config.h"
#include "serving/model.h"
#include "weights/weights.h"
#include "testutil.h"
#include "tolerance.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t s_seed;
static int s_cpus[2];       /* two CPUs this process may run on */

/* Allocations while counting, on any thread (the helper's too): the link wraps them (the Makefile). */
void *__real_malloc (size_t n);
void *__real_calloc (size_t n, size_t m);
void *__real_realloc (void *p, size_t n);
void *__real_aligned_alloc (size_t a, size_t n);
int __real_posix_memalign (void **p, size_t a, size_t n);
static _Atomic int s_counting;
static _Atomic long s_allocations;
#define S_COUNT() (atomic_load (&s_counting) ? (void) atomic_fetch_add (&s_allocations, 1) : (void) 0)
void *__wrap_malloc (size_t n) { S_COUNT (); return __real_malloc (n); }
void *__wrap_calloc (size_t n, size_t m) { S_COUNT (); return __real_calloc (n, m); }
void *__wrap_realloc (void *p, size_t n) { S_COUNT (); return __real_realloc (p, n); }
void *__wrap_aligned_alloc (size_t a, size_t n) { S_COUNT (); return __real_aligned_alloc (a, n); }
int __wrap_posix_memalign (void **p, size_t a, size_t n)
{
    S_COUNT ();
    return __real_posix_memalign (p, a, n);
}

static int s_two_cpus (void)
{
    cpu_set_t set;
    if (sched_getaffinity (0, sizeof set, &set) != 0)
        return -1;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET (c, &set))
            s_cpus[n++] = c;
    return n == 2 ? 0 : -1;
}

/* ---------------------------------------------------------------- the protocol, with a layer that records */

#define P_LAYERS 6
typedef struct {
    uint32_t parts;
    uint64_t mask, chain;
    _Atomic uint32_t finished[P_LAYERS][2];    /* (layer, part) done this call */
    _Atomic uint32_t calls[P_LAYERS][2];       /* (layer, part) calls over the run */
    _Atomic uint32_t early;                    /* a layer started before what it reads was written */
    _Atomic uint32_t whole;                    /* calls with parts 1 */
    const void *arg;                           /* this call's argument */
    _Atomic uint32_t wrong_arg;                /* a layer handed another */
} s_probe_t;

/* Layer L of part PART reads: a split layer's slice, every part's slice of the layer below (or the whole
 * of it, unsplit); a chained one only its own part's slice of the layer below. */
static void s_probe_layer (void *ctx, const void *arg, uint32_t layer, uint32_t rows, uint32_t part, uint32_t parts)
{
    s_probe_t *p = ctx;
    (void) rows;
    if (arg != p->arg)
        atomic_fetch_add (&p->wrong_arg, 1);
    if (layer > 0) {
        const bool below_split = p->mask >> (layer - 1) & 1;       /* (the calls run alone reset early) */
        bool ready;
        if (parts > 1 && p->chain >> layer & 1)
            ready = atomic_load (&p->finished[layer - 1][part]) == 1;
        else if (below_split)
            ready = atomic_load (&p->finished[layer - 1][0]) == 1 && atomic_load (&p->finished[layer - 1][1]) == 1;
        else
            ready = atomic_load (&p->finished[layer - 1][0]) == 1;
        if (!ready)
            atomic_fetch_add (&p->early, 1);
    }
    if (parts == 1)
        atomic_fetch_add (&p->whole, 1);
    for (volatile int spin = 0; spin < 200 * (int) (part + 1); spin++)     /* the parts finish at other times */
        ;
    atomic_fetch_add (&p->calls[layer][part], 1);
    atomic_fetch_add (&p->finished[layer][part], 1);
}

static void s_probe_reset (s_probe_t *p)
{
    for (int l = 0; l < P_LAYERS; l++)
        for (int k = 0; k < 2; k++)
            atomic_store (&p->finished[l][k], 0);
}

START_TEST (protocol_orders_every_layer)
{
    /* masks, and chains among them (a chained layer follows a split one) */
    static const uint64_t plans[][2] = { { 0x3f, 0 }, { 0x01, 0 }, { 0x20, 0 }, { 0x15, 0 }, { 0x2a, 0 }, { 0x0c, 0 },
                                         { 0x21, 0 }, { 0x03, 0x02 }, { 0x3f, 0x2a }, { 0x1b, 0x12 }, { 0x30, 0x20 } };
    s_probe_t *p = calloc (1, sizeof *p);
    p->parts = 2;
    char err[256];
    cpu_split_t *s = cpu_split_new (s_cpus, 2, P_LAYERS, s_probe_layer, p, UINT64_MAX, "probe", err, sizeof err);
    ck_assert_msg (s != NULL, "%s", err);
    ck_assert_uint_eq (cpu_split_parts (s), 2);
    enum { CALLS = 300 };
    for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
        p->mask = plans[k][0];
        p->chain = plans[k][1];
        memset ((void *) p->calls, 0, sizeof p->calls);
        atomic_store (&p->whole, 0);
        for (int c = 0; c < CALLS; c++) {
            s_probe_reset (p);
            p->arg = &p->calls[c % P_LAYERS][c % 2];      /* a call's own: every part is handed it */
            ck_assert (cpu_split_run (s, p->mask, p->chain, 1, p->arg));
            for (int l = 0; l < P_LAYERS; l++) {    /* the call is over once it returns: every slice done */
                ck_assert_uint_eq (atomic_load (&p->finished[l][0]), 1);
                ck_assert_uint_eq (atomic_load (&p->finished[l][1]), p->mask >> l & 1);
            }
        }
        for (int l = 0; l < P_LAYERS; l++) {
            ck_assert_uint_eq (atomic_load (&p->calls[l][0]), CALLS);
            ck_assert_uint_eq (atomic_load (&p->calls[l][1]), p->mask >> l & 1 ? CALLS : 0);
        }
        ck_assert_uint_eq (atomic_load (&p->whole), (uint32_t) (P_LAYERS - __builtin_popcountll (p->mask)) * CALLS);
        ck_assert_msg (atomic_load (&p->early) == 0, "plan %zu: %u layers began early", k, atomic_load (&p->early));
        ck_assert_msg (atomic_load (&p->wrong_arg) == 0, "plan %zu: %u layers were handed another call's argument", k,
                       atomic_load (&p->wrong_arg));
    }
    p->mask = 0;
    ck_assert (!cpu_split_run (s, 0, 0, 1, p->arg));       /* no layer split: all on the caller */
    uint64_t split, woke;
    cpu_split_counts (s, &split, &woke);
    ck_assert_uint_eq (split, CALLS * (sizeof plans / sizeof plans[0]));
    ck_assert_uint_eq (woke, 0);
    cpu_split_destroy (&s);
    cpu_split_destroy (&s);
    ck_assert_ptr_null (s);
    free (p);
}
END_TEST

/* The phase stamps (cpu_split_set_trace): a ring of CALLS slots, a line a part, each part's stamps in
 * order (one core's clock: no claim across cores), every segment's and every leader layer's where the
 * stamps have room, none where nothing happened, and nothing written once the trace is off. */
START_TEST (trace_stamps_every_phase_in_order)
{
    s_probe_t *p = calloc (1, sizeof *p);
    p->parts = 2;
    char err[256];
    cpu_split_t *s = cpu_split_new (s_cpus, 2, P_LAYERS, s_probe_layer, p, UINT64_MAX, "trace", err, sizeof err);
    ck_assert_msg (s != NULL, "%s", err);
    enum { SLOTS = 8, CALLS = 20 };
    cpu_split_stamps_t *st = aligned_alloc (64, SLOTS * 2 * sizeof *st);
    /* every layer split (6 segments: stamps for the first 3), and layer 0 split with 1 chained (one
     * segment, layers 2-5 on the leader) */
    static const uint64_t plans[2][2] = { { 0x3f, 0 }, { 0x03, 0x02 } };
    for (int k = 0; k < 2; k++) {
        memset (st, 0, SLOTS * 2 * sizeof *st);
        p->mask = plans[k][0];
        p->chain = plans[k][1];
        cpu_split_set_trace (s, st, SLOTS);
        for (int c = 0; c < CALLS; c++) {
            s_probe_reset (p);
            ck_assert (cpu_split_run (s, p->mask, p->chain, 1, p->arg));
        }
        cpu_split_set_trace (s, NULL, 0);
        const int segments = k == 0 ? 3 : 1;    /* with stamps */
        for (int slot = 0; slot < SLOTS; slot++) {
            const uint64_t *lead = st[slot * 2].t, *help = st[slot * 2 + 1].t;
            ck_assert_msg (lead[0] && help[0], "plan %d slot %d: a start not stamped", k, slot);
            for (int j = 1; j <= segments; j++) {
                ck_assert_msg (lead[2 * j - 1] >= lead[2 * j - 2] && lead[2 * j] >= lead[2 * j - 1],
                               "plan %d slot %d: leader's segment %d out of order", k, slot, j);
                ck_assert_msg (help[2 * j - 1] >= help[2 * j - 2] && (k == 1 || help[2 * j] >= help[2 * j - 1]),
                               "plan %d slot %d: helper's segment %d out of order", k, slot, j);
            }
            if (k == 1)     /* one segment: the helper waits for nothing after it */
                ck_assert_uint_eq (help[2], 0);
            for (int e = 2 * segments + 1; e < CPU_SPLIT_STAMP_LAYER; e++)
                ck_assert_msg (lead[e] == 0 && help[e] == 0, "plan %d slot %d: stamp %d past the segments", k, slot, e);
            for (int l = 0; l < P_LAYERS; l++) {
                ck_assert_msg (lead[CPU_SPLIT_STAMP_LAYER + l] >= (l ? lead[CPU_SPLIT_STAMP_LAYER + l - 1] : lead[0]),
                               "plan %d slot %d: layer %d's stamp out of order", k, slot, l);
                ck_assert_uint_eq (help[CPU_SPLIT_STAMP_LAYER + l], 0);     /* the leader's alone */
            }
            ck_assert (lead[CPU_SPLIT_STAMPS - 1] >= lead[CPU_SPLIT_STAMP_LAYER + P_LAYERS - 1]);
            ck_assert_uint_eq (help[CPU_SPLIT_STAMPS - 1], 0);
        }
    }
    /* off: the ring is left as it is */
    memset (st, 0, SLOTS * 2 * sizeof *st);
    for (int c = 0; c < CALLS; c++) {
        s_probe_reset (p);
        ck_assert (cpu_split_run (s, p->mask, p->chain, 1, p->arg));
    }
    for (size_t b = 0; b < SLOTS * 2 * sizeof *st; b++)
        ck_assert_uint_eq (((const unsigned char *) st)[b], 0);
    cpu_split_destroy (&s);
    free (st);
    free (p);
}
END_TEST

/* The affinity of the thread named NAME in this process ("" when there is none). */
static void s_thread_cpus (const char *name, char *out, size_t len)
{
    out[0] = '\0';
    DIR *d = opendir ("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir (d))) {
        char path[300], comm[64] = "", line[256];
        snprintf (path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen (path, "r");
        if (!f)
            continue;
        if (fgets (comm, sizeof comm, f))
            comm[strcspn (comm, "\n")] = '\0';
        fclose (f);
        if (strcmp (comm, name) != 0)
            continue;
        snprintf (path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        if ((f = fopen (path, "r"))) {
            while (fgets (line, sizeof line, f))
                if (strncmp (line, "Cpus_allowed_list:", 18) == 0)
                    snprintf (out, len, "%s", line + 18 + strspn (line + 18, " \t"));
            fclose (f);
        }
        out[strcspn (out, "\n")] = '\0';
    }
    if (d)
        closedir (d);
}

/* A helper runs on its one CPU and no other; a CPU the process may not use starts nothing. */
START_TEST (helpers_pinned_to_their_cpu_only)
{
    s_probe_t *p = calloc (1, sizeof *p);
    p->parts = 2;
    char err[256], cpus[64], want[16];
    const int other[2] = { s_cpus[1], s_cpus[0] };
    for (int k = 0; k < 2; k++) {
        cpu_split_t *s = cpu_split_new (k ? other : s_cpus, 2, P_LAYERS, s_probe_layer, p, UINT64_MAX, "pin", err,
                                        sizeof err);
        ck_assert_msg (s != NULL, "%s", err);
        s_thread_cpus ("pin-s1", cpus, sizeof cpus);
        snprintf (want, sizeof want, "%d", (k ? other : s_cpus)[1]);
        ck_assert_str_eq (cpus, want);
        cpu_split_destroy (&s);
    }
    s_thread_cpus ("pin-s1", cpus, sizeof cpus);
    ck_assert_str_eq (cpus, "");        /* stopped and joined */
    const int bad[2] = { s_cpus[0], CPU_SETSIZE - 1 };
    ck_assert_ptr_null (cpu_split_new (bad, 2, P_LAYERS, s_probe_layer, p, UINT64_MAX, "pin", err, sizeof err));
    char text[128];
    snprintf (text, sizeof text, "cannot start the split's helper on cpu %d: Invalid argument", CPU_SETSIZE - 1);
    ck_assert_msg (strstr (err, text) != NULL, "%s", err);
    free (p);
}
END_TEST

/* A helper idle past its spin sleeps; the next call runs on the caller alone and wakes it (counted);
 * calls split again once it spins. */
START_TEST (idle_helper_sleeps_and_is_woken)
{
    s_probe_t *p = calloc (1, sizeof *p);
    p->parts = 2;
    p->mask = 0x3f;
    char err[256];
    cpu_split_t *s = cpu_split_new (s_cpus, 2, P_LAYERS, s_probe_layer, p, 2000000 /* 2 ms */, "nap", err,
                                    sizeof err);
    ck_assert_msg (s != NULL, "%s", err);
    ck_assert (cpu_split_run (s, p->mask, 0, 1, p->arg));
    for (int i = 0; i < 500 && !cpu_split_helpers_asleep (s); i++)
        usleep (2000);
    ck_assert (cpu_split_helpers_asleep (s));
    s_probe_reset (p);
    ck_assert (!cpu_split_run (s, p->mask, 0, 1, p->arg));     /* alone: never waits for a wake-up */
    for (int l = 0; l < P_LAYERS; l++)
        ck_assert_uint_eq (atomic_load (&p->finished[l][0]) + atomic_load (&p->finished[l][1]), 1);
    uint64_t split, woke;
    cpu_split_counts (s, &split, &woke);
    ck_assert_uint_eq (split, 1);
    ck_assert_uint_eq (woke, 1);
    bool again = false;
    atomic_store (&p->early, 0);
    for (int i = 0; i < 2000 && !again; i++) {
        usleep (100);
        s_probe_reset (p);
        again = cpu_split_run (s, p->mask, 0, 1, p->arg);
        if (!again)
            atomic_store (&p->early, 0);    /* the probe expects split layers in two */
    }
    ck_assert (again);
    ck_assert_uint_eq (atomic_load (&p->early), 0);
    cpu_split_destroy (&s);     /* stops a helper spinning or asleep alike */
    free (p);
}
END_TEST

/* ---------------------------------------------------------------- the backend split, against the reference */

static model_config_t s_config (uint32_t max_rows, weight_dtype_t dtype, cpu_split_mode_t split)
{
    model_config_t cfg;
    memset (&cfg, 0, sizeof cfg);
    strcpy (cfg.name, "t");
    strcpy (cfg.version, "1");
    cfg.backend = BACKEND_CPU;
    cfg.cpu_kernel = CPU_KERNEL_LOOP;
    cfg.max_rows = max_rows;
    cfg.weight_dtype = dtype;
    cfg.split = split;
    cfg.split_spin_ns = UINT64_MAX;
    return cfg;
}

static const char *const s_caps[] = { "scalar", "avx2", "avx512", "amx" };

static int s_cap_count (void)
{
    const cpu_features_t *f = cpu_isa_features ();
    return f->amx_cpu && f->vnni ? 4 : f->avx512 ? 3 : f->avx2 ? 2 : 1;
}

/* The split model (every layer of two blocks or more split, then each one alone) on ROWS rows of fresh
 * inputs, outputs poisoned first: every output within its bound of the float64 reference; int8's the
 * same bits as one core's (exact integer sums: a slice computes its outputs as the whole layer does). */
static void s_check_split (const uint32_t *sizes, const activation_t *acts, size_t layers, uint32_t rows, weight_dtype_t dtype,
                           int cap, const char *label)
{
    weights_t *w = weights_random (sizes, acts, layers, rng_next (&s_seed));
    ck_assert_ptr_nonnull (w);
    model_config_t cfg = s_config (rows + 2, dtype, CPU_SPLIT_ON);
    char err[256] = "";
    setenv ("SIGSERVE_CPU_ISA", s_caps[cap], 1);
    backend_model_t *one = backend_cpu_iface.load (w, &cfg, 0, err, sizeof err);
    backend_model_t *m = backend_cpu_iface.load (w, &cfg, 0, err, sizeof err);
    unsetenv ("SIGSERVE_CPU_ISA");
    ck_assert_msg (one && m, "load: %s", err);
    ck_assert_int_eq (backend_cpu_iface.split (m, s_cpus, 2, &cfg, err, sizeof err), 0);
    const char *text = backend_cpu_iface.split_text (m);
    ck_assert_msg (strncmp (text, "2 cores", 7) == 0, "%s: %s", label, text);
    /* the leader's share moves a block of the largest split layer a step, in eighths of a share over 2
     * cores: 1 for 16 blocks or more (1/8 of a 16-block layer's share is a block; at least 1 above),
     * 4 for tick_mlp's 4-block second layer, 5 for 3 blocks (8/3 rounded), 8 for 2, 16 for 1 */
    static const uint32_t want[17] = { 0, 16, 8, 5, 4, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1 };
    for (size_t l = 0; l < layers; l++) {
        const uint32_t blocks = (sizes[l + 1] + CPU_DENSE_BLOCK - 1) / CPU_DENSE_BLOCK;
        ck_assert_uint_eq (backend_cpu_split_lead_step (m, 1ull << l), blocks >= 16 ? 1 : want[blocks]);
    }
    size_t nin = (size_t) rows * w->input_size, nout = (size_t) rows * w->output_size;
    float *in = malloc (nin * sizeof (float)), *out = malloc (nout * sizeof (float)), *base = malloc (nout * sizeof (float));
    double *ref = malloc (nout * sizeof (double)), *bound = malloc (nout * sizeof (double));
    /* the plans: every layer it can split, each layer alone, each with the next by inputs (not int8: the
     * backend leaves the chain out) */
    cpu_split_plan_t plans[16];
    size_t n = 0;
    plans[n++] = (cpu_split_plan_t) { ~0ull, 0, 0 };
    plans[n++] = (cpu_split_plan_t) { ~0ull, 0, 8 * CPU_SPLIT_MAX_PARTS };     /* the leader all of it: helpers idle */
    plans[n++] = (cpu_split_plan_t) { ~0ull, 0, -8 };     /* the leader none of it: its slices empty */
    plans[n++] = (cpu_split_plan_t) { 3, 2, -8 };         /* ... and none of a chained layer's inputs */
    for (size_t l = 0; l < layers && n < 15; l++) {
        plans[n++] = (cpu_split_plan_t) { 1ull << l, 0, (int32_t) (l % 3) - 1 };
        if (l + 1 < layers)
            plans[n++] = (cpu_split_plan_t) { 3ull << l, 2ull << l, (int32_t) ((l + 1) % 3) - 1 };
    }
    for (size_t k = 0; k < n; k++) {
        for (int round = 0; round < 2; round++) {
            for (size_t i = 0; i < nin; i++)
                in[i] = rng_uniform (&s_seed, round & 1 ? 0.0f : -1.0f, 1.0f);
            for (size_t i = 0; i < nout; i++)
                out[i] = NAN;
            ck_assert_int_eq (backend_cpu_iface.infer (one, in, rows, base, err, sizeof err), SIG_OK);
            backend_cpu_set_split_plan (m, plans[k]);
            if (dtype != WEIGHT_DTYPE_INT8)
                ck_assert_uint_eq (backend_cpu_split_plan (m).chain, plans[k].chain);
            atomic_store (&s_counting, 1);     /* a split call allocates nothing, on either core */
            const sig_status_t st = backend_cpu_iface.infer (m, in, rows, out, err, sizeof err);
            atomic_store (&s_counting, 0);
            ck_assert_int_eq (st, SIG_OK);
            ck_assert_int_eq (atomic_load (&s_allocations), 0);
            ck_assert_int_eq (tol_mlp_held (w, dtype, in, rows, ref, bound), 0);
            TOL_ASSERT (out, ref, bound, nout, w->output_size, "%s rows %u %s on %s, plan %#llx chain %#llx, round %d",
                        label, rows, weight_dtype_name (dtype), s_caps[cap], (unsigned long long) plans[k].mask,
                        (unsigned long long) plans[k].chain, round);
            if (dtype == WEIGHT_DTYPE_INT8)
                for (size_t i = 0; i < nout; i++)
                    ck_assert_msg (memcmp (&out[i], &base[i], sizeof (float)) == 0, "%s int8 on %s: output %zu split "
                                   "%.9g, one core %.9g", label, s_caps[cap], i, (double) out[i], (double) base[i]);
        }
    }
    free (in);
    free (out);
    free (base);
    free (ref);
    free (bound);
    backend_cpu_iface.destroy (&m);
    backend_cpu_iface.destroy (&one);
    weights_destroy (&w);
}

/* Chains whose layers split unevenly: 1000 outputs (63 blocks: 31 and 32, across a group), 48 (three
 * blocks), 33 (three, the last mostly padding), 597, the demo model; rows 1, 3, and 16 / 21 (AMX tiles
 * for int8: each part's own). */
START_TEST (split_matches_reference_every_dtype_and_path)
{
    const uint32_t demo[] = { 512, 256, 64, 1 };
    const uint32_t odd[] = { 293, 597, 31, 33, 1 };
    const uint32_t wide[] = { 7, 1000, 48, 3 };
    const struct { const uint32_t *sizes; size_t layers; } chains[] = { { demo, 3 }, { odd, 4 }, { wide, 3 } };
    activation_t acts[4] = { ACTIVATION_RELU, ACTIVATION_TANH, ACTIVATION_SIGMOID, ACTIVATION_NONE };
    const uint32_t rows_list[] = { 1, 3, 21 };
    const size_t c = (size_t) _i;
    atomic_store (&s_counting, 1);      /* the count works (a wrap that did nothing would pass anything) */
    void *volatile probe = malloc (8);
    free (probe);
    atomic_store (&s_counting, 0);
    ck_assert_int_eq (atomic_exchange (&s_allocations, 0), 1);
    for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
        acts[chains[c].layers - 1] = ACTIVATION_NONE;
        char label[32];
        snprintf (label, sizeof label, "chain %zu", c);
        for (int d = 0; d < WEIGHT_DTYPE_COUNT; d++)
            for (int cap = 0; cap < s_cap_count (); cap++)
                s_check_split (chains[c].sizes, acts, chains[c].layers, rows_list[ri], (weight_dtype_t) d, cap, label);
    }
}
END_TEST

/* ---------------------------------------------------------------- the served model and its config */

static config_t *s_parse (const char *model_keys, char *err, size_t errlen)
{
    char path[1024], json[4096];
    snprintf (path, sizeof path, "%s/models/tick_mlp.safetensors", tu_build_abs ());
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:1\"] }, \"models\": [ { \"name\": \"m\", %s, "
              "\"weights\": \"%s\", \"layers\": [ { \"weight\": \"0.weight\", \"activation\": \"relu\" }, "
              "{ \"weight\": \"2.weight\", \"activation\": \"relu\" }, { \"weight\": \"4.weight\" } ] } ] }",
              model_keys, path);
    return config_parse (json, "t.json", NULL, err, errlen);
}

/* "split" through the serving layer: the load decides (auto: measured; on: split), says so with both
 * numbers in the model's description (/models renders it), and the instance answers within the bound. */
START_TEST (served_model_says_what_its_split_decided)
{
    const char *const modes[] = { "auto", "on" };
    for (int k = 0; k < 2; k++) {
        char keys[256], err[1024] = "";
        snprintf (keys, sizeof keys, "\"backend\": \"cpu\", \"weight_dtype\": \"bf16\", \"split\": \"%s\", "
                  "\"cpus\": [%d, %d]", modes[k], s_cpus[0], s_cpus[1]);
        config_t *cfg = s_parse (keys, err, sizeof err);
        ck_assert_msg (cfg != NULL, "%s", err);
        ck_assert_uint_eq (config_split_cores (&cfg->models[0]), 2);
        model_t *m = model_new (&cfg->models[0], &cfg->server, NULL, NULL, err, sizeof err);
        ck_assert_msg (m != NULL, "%s", err);
        model_info_t info;
        model_describe (m, &info);
        ck_assert_msg (strstr (info.split, "us p50 against") && strstr (info.split, "measured at load"), "%s", info.split);
        if (k == 1)
            ck_assert_msg (strncmp (info.split, "2 cores (cpus ", 14) == 0, "%s", info.split);
        else
            ck_assert_msg (strncmp (info.split, "2 cores", 7) == 0 || strncmp (info.split, "one core: ", 10) == 0,
                           "%s", info.split);
        weights_t *w = weights_load (&cfg->models[0], err, sizeof err);
        ck_assert_msg (w != NULL, "%s", err);
        float in[3 * 512], out[3];
        double ref[3], bound[3];
        for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
            in[i] = rng_uniform (&s_seed, -1.0f, 1.0f);
        ck_assert_int_eq (model_infer (m, in, 3, out, err, sizeof err), SIG_OK);
        ck_assert_int_eq (tol_mlp_held (w, WEIGHT_DTYPE_BF16, in, 3, ref, bound), 0);
        TOL_ASSERT (out, ref, bound, 3, 1, "split %s, served", modes[k]);
        weights_destroy (&w);
        model_destroy (&m);
        config_destroy (&cfg);
    }
}
END_TEST

/* What the config refuses, by key, with the fix. */
START_TEST (config_refuses_splits_it_cannot_give)
{
    static const char *const cases[][2] = {
        { "\"split\": \"on\", \"cpus\": [0]", "models[0].split: needs at least 2 cpus an instance, from \"cpus\" "
          "(instance i takes the i-th share of cpus / instances); this model has 1 cpus for 1 instance(s)" },
        { "\"split\": \"auto\", \"instances\": 2, \"cpus\": [0, 1, 2]", "this model has 3 cpus for 2 instance(s)" },
        { "\"split\": \"on\", \"cpus\": [1, 1]", "models[0].split: cpu 1 is listed twice in \"cpus\"" },
        { "\"split\": \"on\", \"backend\": \"cuda\", \"cpus\": [0, 1]", "models[0].split: only on the CPU with "
          "\"cpu_kernel\": \"loop\" (this model's backend is \"cuda\")" },
        { "\"split\": \"auto\", \"cpu_kernel\": \"blas\", \"cpus\": [0, 1]", "(this model's cpu_kernel is \"blas\")" },
        { "\"split\": \"sideways\", \"cpus\": [0, 1]", "models[0].split: expected one of off, auto, on" },
        { "\"split\": \"on\", \"group\": \"g\", \"cpus\": [0, 1]", "models[0].split: not with \"group\" (\"g\")" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[1024] = "";
        config_t *cfg = s_parse (cases[i][0], err, sizeof err);
        ck_assert_msg (cfg == NULL, "case %zu loaded", i);
        ck_assert_msg (strstr (err, cases[i][1]) != NULL, "case %zu: %s", i, err);
    }
    char err[1024] = "";
    config_t *cfg = s_parse ("\"instances\": 2, \"cpus\": [0, 1, 2, 3]", err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_uint_eq (config_split_cores (&cfg->models[0]), 1);     /* off: cpus[i % n] as before */
    const uint32_t plain = config_serving_threads (cfg);
    cfg->models[0].split = CPU_SPLIT_AUTO;
    ck_assert_uint_eq (config_split_cores (&cfg->models[0]), 2);
    ck_assert_uint_eq (config_serving_threads (cfg), plain + 2);    /* a helper each instance */
    config_destroy (&cfg);
}
END_TEST

int main (void)
{
    s_seed = (uint64_t) time (NULL) ^ ((uint64_t) clock () << 32);
    printf ("seed %llu\n", (unsigned long long) s_seed);
    if (s_two_cpus () != 0) {
        printf ("SKIP: this process may run on fewer than two CPUs (a split needs two)\n");
        return 0;
    }
    printf ("cpus %d and %d\n", s_cpus[0], s_cpus[1]);
    Suite *s = suite_create ("cpu_split");
    TCase *tc = tcase_create ("split");
    tcase_set_timeout (tc, 600);
    tcase_add_test (tc, protocol_orders_every_layer);
    tcase_add_test (tc, trace_stamps_every_phase_in_order);
    tcase_add_test (tc, helpers_pinned_to_their_cpu_only);
    tcase_add_test (tc, idle_helper_sleeps_and_is_woken);
    tcase_add_loop_test (tc, split_matches_reference_every_dtype_and_path, 0, 3);
    tcase_add_test (tc, served_model_says_what_its_split_decided);
    tcase_add_test (tc, config_refuses_splits_it_cannot_give);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
