/* sigbench table 5 (--split A,B[,C..]): the CPU backend's loop kernel split across cores ("split",
 * backends/cpu_split.h) beside the same model on one core, in each weight dtype (--cpu-dtypes), all in
 * one run, in alternating blocks of calls (one core's rows, then the split's: below) so that every row
 * sees the same machine (the host is shared) and each finds the caches as its own calls leave them:
 *   - one core: the model loaded with "split" on, run with no layer split (the same buffers, the leader
 *     alone on A);
 *   - split, largest layer: only the layer with the most weight bytes split over the cores;
 *   - split, largest layer and the next by inputs: each core's share of the largest layer's outputs
 *     goes on through its share of the next layer's inputs, the leader adding the two up (no barrier
 *     between them; not for int8);
 *   - split, every layer: every layer of two or more blocks of 16 outputs split;
 *   - floor, one core: one streaming read of the model's weight bytes on A (table 4's);
 *   - floor, split: one read of the bytes the leader reads under "every layer" (its share of each split layer
 *     and the whole of the others, as with the next layer by inputs) on A, the start of the same buffer:
 *     what the split cannot beat without its hand-offs;
 * then, apart (its second thread would share B with the split's helper), the hand-off itself: one
 * cache line's round trip between A and B (a tick written on A, echoed from B), the cost a barrier
 * pays twice a split layer (one crossing each way, both at once). Every timed output is checked
 * against the float64 reference, as in table 4. */
#define _GNU_SOURCE
#include "sigbench.h"

#include "backends/cpu_dense.h"
#include "backends/cpu_isa.h"
#include "backends/cpu_split.h"
#include "base/threads.h"
#include "read_floor.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *s_buffer (size_t bytes)
{
    unsigned char *b = aligned_alloc (64, (bytes + 63) / 64 * 64);
    for (size_t i = 0; b && i < bytes; i++)
        b[i] = (unsigned char) (i * 2654435761u >> 13);
    return b;
}

/* ---------------------------------------------------------------- the hand-off */

typedef struct {
    _Alignas (64) _Atomic uint64_t ping;
    _Alignas (64) _Atomic uint64_t pong;
    int cpu;
} s_pair_t;

static void *s_echo (void *arg)
{
    s_pair_t *p = arg;
    char err[128];
    threads_pin (p->cpu, err, sizeof err);
    for (uint64_t seen = 0;;) {
        uint64_t v;
        while ((v = atomic_load_explicit (&p->ping, memory_order_acquire)) == seen)
            _mm_pause ();
        if (v == UINT64_MAX)
            return NULL;
        atomic_store_explicit (&p->pong, v, memory_order_release);
        seen = v;
    }
}

static void s_handoff (const options_t *o, double *samples)
{
    s_pair_t *p = aligned_alloc (64, sizeof *p);
    atomic_init (&p->ping, 0);
    atomic_init (&p->pong, 0);
    p->cpu = o->split_cpus[1];
    pthread_t t;
    pthread_create (&t, NULL, s_echo, p);
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        const double t0 = sb_now_us ();
        atomic_store_explicit (&p->ping, i + 1, memory_order_release);
        while (atomic_load_explicit (&p->pong, memory_order_acquire) != i + 1)
            _mm_pause ();
        const double t1 = sb_now_us ();
        if (i >= o->warmup)
            samples[i - o->warmup] = t1 - t0;
    }
    atomic_store (&p->ping, UINT64_MAX);
    pthread_join (t, NULL);
    free (p);
}

/* ---------------------------------------------------------------- the table */

static void s_cpus_text (const options_t *o, char *out, size_t len)
{
    size_t n = 0;
    out[0] = 0;
    for (int k = 0; k < o->split_count && n < len; k++)
        n += (size_t) snprintf (out + n, len - n, "%s%d", k ? "," : "", o->split_cpus[k]);
}

/* ---------------------------------------------------------------- the phases (--trace) */

/* Time stamp counter ticks a nanosecond, against the host clock over ~20 ms. */
static double s_tsc_per_ns (void)
{
    const double t0 = sb_now_us ();
    const uint64_t c0 = __rdtsc ();
    while (sb_now_us () - t0 < 20000.0)
        ;
    return (double) (__rdtsc () - c0) / ((sb_now_us () - t0) * 1000.0);
}

static int s_cmp_double (const void *a, const void *b)
{
    const double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

#define S_TRACE_CALLS 2000

/* Each plan of PLANS (COUNT, labels LABELS) at the leader's shares of -1 to 4 more blocks of its largest split
 * layer (backend_cpu_split_lead_step; -1/8 to +4/8 of a share over 2 cores): S_TRACE_CALLS calls
 * traced after as many untraced, and per part the p50 of each phase from the leader's start (ns; "-"
 * where none happened), the end-to-end p50 last: where a split's time goes, on this machine. */
static void s_trace_plans (backend_model_t *m, const cpu_split_plan_t *plans, const char *const *labels, int count,
                           uint32_t rows, size_t nout, float *const *in, uint32_t parts)
{
    cpu_split_t *split = backend_cpu_split (m);
    cpu_split_stamps_t *st = aligned_alloc (64, (size_t) S_TRACE_CALLS * parts * sizeof *st);
    double *v = malloc (S_TRACE_CALLS * sizeof *v);
    float *y = malloc (nout * sizeof (float));
    if (!split || !st || !v || !y) {
        printf ("(no trace: %s)\n\n", split ? "out of memory" : "the model has no split");
        free (st), free (v), free (y);
        return;
    }
    const double per_ns = s_tsc_per_ns ();
    char err[256];
    printf ("Phases, p50 ns from the leader's publish (%d calls each): seen = the helper saw the call, done j = "
            "its slice of split segment j, passed j = it saw every other part's tick of segment j; layer l = the "
            "leader's part of layer l done\n\n"
            "| plan | lead | part | seen | done 1 | passed 1 | done 2 | passed 2 | layer 0 | layer 1 | layer 2 | end |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n", S_TRACE_CALLS);
    for (int k = 0; k < count; k++)
        for (int32_t step = (int32_t) backend_cpu_split_lead_step (m, plans[k].mask), lead = -step; lead <= 4 * step;
             lead += step) {
            cpu_split_plan_t plan = plans[k];
            plan.lead = lead;
            backend_cpu_set_split_plan (m, plan);
            memset (st, 0, (size_t) S_TRACE_CALLS * parts * sizeof *st);
            for (uint32_t i = 0; i < 2 * S_TRACE_CALLS; i++) {
                if (i == S_TRACE_CALLS)
                    cpu_split_set_trace (split, st, S_TRACE_CALLS);
                backend_cpu_iface.infer (m, in[i % POOL], rows, y, err, sizeof err);
            }
            cpu_split_set_trace (split, NULL, 0);
            for (uint32_t p = 0; p < parts; p++) {
                printf ("| %s | %+d/8 | %u |", labels[k], lead, p);
                static const int cols[9] = { 0, 1, 2, 3, 4, CPU_SPLIT_STAMP_LAYER, CPU_SPLIT_STAMP_LAYER + 1,
                                             CPU_SPLIT_STAMP_LAYER + 2, CPU_SPLIT_STAMPS - 1 };
                for (int c = 0; c < 9; c++) {
                    const int e = cols[c];
                    size_t n = 0;
                    for (uint32_t i = 0; i < S_TRACE_CALLS && (p > 0 || e > 0) && (p == 0 || e < CPU_SPLIT_STAMP_LAYER); i++) {
                        const cpu_split_stamps_t *lead_st = &st[(size_t) i * parts], *mine = &st[(size_t) i * parts + p];
                        if (mine->t[e] && lead_st->t[0])
                            v[n++] = ((double) mine->t[e] - (double) lead_st->t[0]) / per_ns;
                    }
                    if (n == 0) {
                        printf (" - |");
                        continue;
                    }
                    qsort (v, n, sizeof *v, s_cmp_double);
                    printf (" %.0f |", v[n / 2]);
                }
                printf ("\n");
            }
        }
    printf ("\n");
    free (st), free (v), free (y);
}

enum { R_ONE, R_LARGEST, R_CHAINED, R_EVERY, R_FLOOR, R_FLOOR_SPLIT, R_COUNT };
#define S_BLOCK 500
#define S_BLOCK_WARM 50

static int s_bench_dtype (const options_t *o, const weights_t *w, weight_dtype_t dtype, float *const *in,
                          const double *const *ref, double *samples, char *notes, size_t notes_len)
{
    model_config_t cfg;
    memset (&cfg, 0, sizeof cfg);
    snprintf (cfg.name, sizeof cfg.name, "bench");
    cfg.cpu_kernel = CPU_KERNEL_LOOP;
    cfg.max_rows = o->rows;
    cfg.weight_dtype = dtype;
    cfg.split = CPU_SPLIT_ON;
    cfg.split_spin_ns = UINT64_MAX;
    char err[512];
    backend_model_t *m = backend_cpu_iface.load (w, &cfg, 0, err, sizeof err);
    if (!m || backend_cpu_iface.split (m, o->split_cpus, (size_t) o->split_count, &cfg, err, sizeof err) != 0) {
        fprintf (stderr, "sigbench: split %s: %s\n", weight_dtype_name (dtype), err);
        backend_cpu_iface.destroy (&m);
        return 1;
    }
    /* the plans: the layer of the most bytes alone, and with the next split by inputs; every splittable
     * one; and the bytes each part reads */
    const int32_t lead = backend_cpu_split_plan (m).lead;
    uint64_t every = 0;
    const size_t wbytes = cpu_dense_bytes (dtype);
    size_t total = 0, leader = 0, most = 0;
    int largest = -1;
    for (size_t l = 0; l < w->layer_count; l++) {
        const size_t b = (size_t) w->layers[l].in * w->layers[l].out * wbytes;
        total += b;
        if (w->layers[l].out > CPU_DENSE_BLOCK && l < 64) {
            every |= 1ull << l;
            if (b > most) {
                most = b;
                largest = (int) l;
            }
        }
        leader += w->layers[l].out > CPU_DENSE_BLOCK ? b / (size_t) o->split_count : b;
    }
    const uint64_t one = largest >= 0 ? 1ull << largest : 0, next = one << 1;
    const cpu_split_plan_t plans[4] = { { 0, 0, 0 }, { one, 0, lead }, { one | next, next, lead }, { every, 0, lead } };
    backend_cpu_set_split_plan (m, plans[2]);
    const bool chained = backend_cpu_split_plan (m).chain != 0;     /* (not for int8) */
    /* one buffer for both floors: core A's working set stays the model's weights and one copy (1.2 MB of
     * its 2 MiB L2 for tick_mlp f32; a third buffer pushed reads out to L3 at times) */
    unsigned char *floor_one = s_buffer (total);
    const size_t nout = (size_t) o->rows * w->output_size;
    float *y = malloc (nout * sizeof (float));
    pooled_error_t error[4] = { { 0, 0 }, { 0, 0 }, { 0, 0 }, { 0, 0 } };
    /* In blocks of S_BLOCK calls, one core's (plan 0 and its floor) and the split's (the plans and the
     * leader's floor) in turn, each block's first S_BLOCK_WARM left out: each phase finds the caches as
     * it leaves them (call by call in turn, the split plans, which read half the weights on core A,
     * let the other half age out of its L2 and the one-core row read it from L3: up to 1.6x its time
     * here). Until every row has o->iterations samples after o->warmup calls of each phase. */
    uint32_t got[R_COUNT] = { 0 }, calls[2] = { 0 };
    for (uint32_t i = 0; got[R_ONE] < o->iterations || got[R_EVERY] < o->iterations; i++) {
        const int phase = (int) (i / S_BLOCK % 2);      /* 0: one core, 1: split */
        const bool keep = i % S_BLOCK >= S_BLOCK_WARM && calls[phase]++ >= o->warmup;
        for (int k = phase ? R_LARGEST : R_ONE; k <= (phase ? R_EVERY : R_ONE); k++) {
            if (k == R_CHAINED && !chained)
                continue;
            backend_cpu_set_split_plan (m, plans[k]);
            const double t0 = sb_now_us ();
            backend_cpu_iface.infer (m, in[i % POOL], o->rows, y, err, sizeof err);
            const double t = sb_now_us () - t0;
            if (keep && got[k] < o->iterations) {
                samples[(size_t) k * o->iterations + got[k]++] = t;
                sb_pool (&error[k], y, ref[i % POOL], nout);
            }
        }
        const int f = phase ? R_FLOOR_SPLIT : R_FLOOR;
        const double t0 = sb_now_us ();
        read_floor_64 (floor_one, phase ? leader : total);
        const double t = sb_now_us () - t0;
        if (keep && got[f] < o->iterations)
            samples[(size_t) f * o->iterations + got[f]++] = t;
    }
    char layers_every[64] = "", label[256], cpus[96];
    s_cpus_text (o, cpus, sizeof cpus);
    for (size_t l = 0, n = 0; l < w->layer_count && n < sizeof layers_every; l++)
        if (every >> l & 1)
            n += (size_t) snprintf (layers_every + n, sizeof layers_every - n, "%s%zu", n ? "," : "", l);
    const char *isa = backend_cpu_iface.isa (m);
    latency_summary_t s[R_COUNT];
    for (int r = 0; r < R_COUNT; r++) {
        if (r == R_CHAINED && !chained)
            continue;
        switch (r) {
        case R_ONE: snprintf (label, sizeof label, "cpu loop %s (%s), one core (cpu %d)", weight_dtype_name (dtype), isa,
                              o->split_cpus[0]); break;
        case R_LARGEST: snprintf (label, sizeof label, "split over cpus %s: layer %d (the largest), leader %+d/8",
                                  cpus, largest, lead); break;
        case R_CHAINED: snprintf (label, sizeof label, "split over cpus %s: layer %d, layer %d by inputs, leader %+d/8",
                                  cpus, largest, largest + 1, lead); break;
        case R_EVERY: snprintf (label, sizeof label, "split over cpus %s: layers %s, leader %+d/8", cpus,
                                layers_every, lead); break;
        case R_FLOOR: snprintf (label, sizeof label, "floor %s, one core: one read of %zu weight bytes",
                                weight_dtype_name (dtype), total); break;
        default: snprintf (label, sizeof label, "floor %s, split: one read of the leader's %zu bytes",
                           weight_dtype_name (dtype), leader); break;
        }
        latency_summarize (samples + (size_t) r * o->iterations, o->iterations, &s[r]);
        latency_print_row (stdout, label, &s[r]);
    }
    double best = s[R_LARGEST].p50 < s[R_EVERY].p50 ? s[R_LARGEST].p50 : s[R_EVERY].p50;
    if (chained && s[R_CHAINED].p50 < best)
        best = s[R_CHAINED].p50;
    const size_t used = strlen (notes);
    char chain_error[16] = "-";
    if (chained)
        snprintf (chain_error, sizeof chain_error, "%.1e", sb_pooled (&error[R_CHAINED]));
    snprintf (notes + used, notes_len - used, "%s%s: split %.2fx one core (floors: split %.2fx one core's; best split "
              "%.2fx its floor), errors %.1e / %.1e / %s / %.1e", used ? "; " : "", weight_dtype_name (dtype),
              best / s[R_ONE].p50, s[R_FLOOR_SPLIT].p50 / s[R_FLOOR].p50, best / s[R_FLOOR_SPLIT].p50,
              sb_pooled (&error[R_ONE]), sb_pooled (&error[R_LARGEST]), chain_error, sb_pooled (&error[R_EVERY]));
    const double limit = dtype == WEIGHT_DTYPE_F32 ? 1e-5 : dtype == WEIGHT_DTYPE_F16 ? 2e-3 : dtype == WEIGHT_DTYPE_BF16 ? 2e-2 : 5e-2;
    int bad = 0;
    for (int k = 0; k < 4; k++)
        if ((k != R_CHAINED || chained) && !(sb_pooled (&error[k]) <= limit)) {
            fprintf (stderr, "sigbench: split %s plan %d: relative error %.3g over %.0e\n", weight_dtype_name (dtype), k,
                     sb_pooled (&error[k]), limit);
            bad = 1;
        }
    if (o->trace) {
        char l1[96], l2[96], l3[96];
        snprintf (l1, sizeof l1, "layer %d", largest);
        snprintf (l2, sizeof l2, "layer %d, %d by inputs", largest, largest + 1);
        snprintf (l3, sizeof l3, "layers %s", layers_every);
        const cpu_split_plan_t traced[3] = { plans[R_LARGEST], plans[R_CHAINED], plans[R_EVERY] };
        const char *labels[3] = { l1, l2, l3 };
        printf ("\n%s, %s:\n\n", weight_dtype_name (dtype), cpus);
        s_trace_plans (m, chained ? traced : (const cpu_split_plan_t[2]) { traced[0], traced[2] },
                       chained ? labels : (const char *[2]) { l1, l3 }, chained ? 3 : 2, o->rows, nout, in,
                       (uint32_t) o->split_count);
    }
    free (y);
    free (floor_one);
    backend_cpu_iface.destroy (&m);
    return bad;
}

int sb_bench_split (const options_t *o, const weights_t *w, float *const *in, const double *const *ref)
{
    char err[256];
    if (!cpu_isa_features ()->avx512) {
        printf ("Split table skipped: its floors read with AVX-512 loads, which this CPU lacks\n\n");
        return 0;
    }
    if (threads_pin (o->split_cpus[0], err, sizeof err) != 0) {
        fprintf (stderr, "sigbench: --split: %s\n", err);
        return 1;
    }
    double *samples = malloc ((size_t) R_COUNT * o->iterations * sizeof (double));
    char helpers[96];
    s_cpus_text (o, helpers, sizeof helpers);
    printf ("### CPU backend split across cores, in process, %u iterations after %u warm-up, leader on cpu %d, "
            "helpers on cpus %s, rows %u, host clock around infer, microseconds\n\n", o->iterations, o->warmup,
            o->split_cpus[0], strchr (helpers, ',') + 1, o->rows);
    latency_print_header (stdout, "method");
    int bad = 0;
    char notes[2048] = "";
    for (int d = 0; d < o->cpu_dtype_count; d++)
        bad |= s_bench_dtype (o, w, o->cpu_dtypes[d], in, ref, samples, notes, sizeof notes);
    latency_summary_t h;
    s_handoff (o, samples);
    latency_summarize (samples, o->iterations, &h);
    char label[128];
    snprintf (label, sizeof label, "hand-off: a cache line's round trip, cpu %d -> %d -> %d", o->split_cpus[0],
              o->split_cpus[1], o->split_cpus[0]);
    latency_print_row (stdout, label, &h);
    printf ("\np50s: %s\n\n", notes);
    if (o->cpu >= 0)
        threads_pin (o->cpu, err, sizeof err);
    free (samples);
    return bad;
}
