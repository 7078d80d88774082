/* lstmbench: in-process LSTM timings (docs/perf.md's method) for the three sizes, on the CPU
 * (fp32) and on the GPU in every weight type, plus the floors measured in the same run.
 *   step    the streaming critical path: a host clock from handing the step to stream_step to
 *           having its outputs (the advance that follows, and its completion, are not timed:
 *           Tacana's precomputation), one stream, fresh random steps;
 *   round-robin (--rr N)  N streams stepping in turn, each step followed by its advance, posted and
 *           not waited for (as a server does): the same host clock around each step, which waits
 *           behind the previous streams' advances where the advances run in the serving kernel and
 *           not where they run apart (plan 4: --sync 0 against --sync 8 in one binary). A row per
 *           --rr-gap F: the N steps of a round back to back (every stream's data at once), a round
 *           F x N advances (the advance's time measured first, on slot 0) after the last (F > 1:
 *           the advances keep up; F 0: rounds back to back, the advances bound the rate either way);
 *   window  a full window (rows 1): a host clock around infer;
 *   ping    the LSTM kernel's own ring with the step's features and no compute (its floor);
 *   pingpong  the MLP persistent kernel's ping-pong floor reading the same number of floats, output
 *           as completion (kernels/mlp_persistent.cu), when this build has it.
 * Every row: warm-up dropped, then --iterations timed calls (a row stops early after --seconds and
 * says how many it took), p50 p90 p99 p99.9 min max mean sd in microseconds. Outputs are checked:
 * every step's finite, every 500th against the same backend's full window over the same W steps,
 * and one window per row against the float64 reference (relative error printed).
 *
 * lstmbench --check FILE --window W [--head-act none] [--backend cpu|cuda] [--dtype f32]: loads an
 * nn.LSTM + Linear export (tensors "lstm.*" and "head.*"), reads floats from stdin: one window
 * (W x inputs), then any number of steps of one stream; prints "window v..." then "step i v..."
 * (tests/python/test_lstm_torch.py compares them with PyTorch). */
#define _GNU_SOURCE
#include "backends/backend_lstm.h"
#include "clock.h"
#include "base/threads.h"
#include "latency.h"
#include "lstm_reference.h"
#include "rng.h"
#include "weights/weights.h"
#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/backend_lstm_cuda.h"
#include "kernels.h"
#include <cuda_runtime_api.h>
#endif

#include <getopt.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK_EVERY 500

typedef struct {
    const char *sizes, *dtypes, *backends;
    uint32_t iterations, warmup;
    double seconds;
    int cpu;
    uint64_t seed;
    cuda_wait_t wait;
    const char *blocks;     /* CUDA: "" (the plan's choice) or a list of cluster/grid sizes, a row each */
    int grid;
    uint32_t slots;
    int no_window, no_floors;
    const char *instances;  /* CUDA: "" or a list of instance counts, each driven at once (a row each) */
    const char *sync;       /* CUDA: a list of SIG_LSTM_SYNC_* values, the rows of each launch size per value */
    const char *math;       /* CUDA: a list of products (default, wide, half), the rows of each per value */
    int trace;              /* CUDA: also the traced instantiation, its phases as rows */
    int green;              /* CUDA: the --instances rows each in a green context (model key green_context) */
    uint32_t rr;            /* also the round-robin row of this many streams (0: none) */
    const char *rr_gap;     /* its steps' spacing, a list of fractions of the advance's time (a row each) */
    /* --check */
    const char *check, *backend, *dtype;
    uint32_t window;
    activation_t head_act;
} options_t;

static void s_usage (FILE *out)
{
    fprintf (out,
             "usage: lstmbench [--sizes small,medium,large] [--dtypes f32,f16,bf16] [--backends cpu,cuda]\n"
             "                 [--iterations N] [--warmup N] [--seconds S] [--cpu CORE] [--seed N]\n"
             "                 [--blocks B1,B2,..] [--grid] [--slots N] [--no-window] [--no-floors]\n"
             "                 [--instances N1,N2,..]   (CUDA: N instances on GPU 0, a thread each driving its own\n"
             "                  stream at once, pinned to --cpu + k: one step row over all their steps per N)\n"
             "                 [--green]   (CUDA: the --instances rows with the model key green_context, each\n"
             "                  instance's kernel in a green context of SMs of its own)\n"
             "                 [--sync S1,S2,..]   (CUDA: the rows once per synchronisation: 0 today's, 1 the old\n"
             "                  poll in block-wide rounds, 2 a cluster's exchanges in rounds (a grid's always), 3 both;\n"
             "                  + 4: the features in the command words' line, as before 2026-11-26; + 8: the advances\n"
             "                  in a second resident launch on other SMs (plan 4, opt-in); + 16: a step's features\n"
             "                  broadcast after block 0 read them all, as before 2026-11-26 15:00; + 64: the generic\n"
             "                  kernel, not the one specialised for the plan at load (NVRTC), as before 2026-11-26)\n"
             "                 [--math default,wide,half]   (CUDA, f16 / bf16 weights: the rows once per kind of gate\n"
             "                  products: wide, each weight widened to fp32; half, in the weights' type (plan 3))\n"
             "                 [--trace]   (CUDA: also the traced instantiation of the kernel: where a step's and\n"
             "                  a ping's time goes in the kernel, a row per phase, beside the serving kernel's rows)\n"
             "                 [--rr N] [--rr-gap F1,F2,..]   (also a row per F of N streams stepping round-robin, each\n"
             "                  step followed by its advance, not waited for, rounds of N steps F x N advances apart\n"
             "                  (0: back to back); --sync 8: the advances in a second launch, plan 4)\n"
             "       lstmbench --check FILE --window W [--head-act none|relu|sigmoid|tanh] [--backend cpu|cuda]\n"
             "                 [--dtype f32|f16|bf16] [--math wide|half]   (floats on stdin: a window, then steps)\n"
             "sizes: small, medium, large (the issue's), or LAYERS:WINDOW:INPUTS:UNITS[:OUTPUTS]\n");
}

static int s_dtype (const char *s)
{
    return strcmp (s, "f32") == 0 ? WEIGHT_DTYPE_F32 : strcmp (s, "f16") == 0 ? WEIGHT_DTYPE_F16
                                                     : strcmp (s, "bf16") == 0 ? WEIGHT_DTYPE_BF16 : -1;
}

/* --math's names as tuning values (0: the plan's default) */
static uint32_t s_math (const char *name)
{
#ifdef SIGSERVE_HAVE_CUDA
    return strcmp (name, "wide") == 0 ? SIG_LSTM_MATH_WIDE : strcmp (name, "half") == 0 ? SIG_LSTM_MATH_HALF : 0u;
#else
    (void) name;
    return 0u;
#endif
}

static const backend_iface_t *s_iface (const char *name)
{
    if (strcmp (name, "cpu") == 0)
        return &backend_lstm_cpu_iface;
#ifdef SIGSERVE_HAVE_CUDA
    if (strcmp (name, "cuda") == 0)
        return &backend_lstm_cuda_iface;
#endif
    return NULL;
}

static void s_fill (uint64_t *seed, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform (seed, -1.0f, 1.0f);
}

/* ---------------------------------------------------------------------------------------------
 * Rows */

typedef struct {
    double *samples;
    size_t n;
    double check;     /* the worst relative difference seen by the output checks (NAN: none) */
    char note[160];
} row_t;

static void s_print (const char *label, row_t *r)
{
    latency_summary_t s;
    latency_summarize (r->samples, r->n, &s);
    char l[512];
    snprintf (l, sizeof l, "%s (n %zu%s%s)", label, r->n, r->note[0] ? ", " : "", r->note);
    latency_print_row (stdout, l, &s);
    fflush (stdout);
}

static bool s_out_of_time (const options_t *o, double start_us, uint32_t i)
{
    return o->seconds > 0 && (i & 63u) == 0 && clock_now_us () - start_us > o->seconds * 1e6;
}

/* The streaming critical path of one stream on slot 0. */
/* A stream's window in full: its last W steps from HIST (a ring of W rows of IN floats, COUNT steps
 * so far; zeros before the first) into WIN, run as one window into YW, and the largest relative
 * difference of its step outputs Y (OUT) from those folded into *CHECK (NAN: none yet). -1 when the
 * window fails (said on stderr). */
static int s_check_window (const backend_iface_t *B, backend_model_t *m, const float *hist, uint64_t count, uint32_t W,
                           uint32_t in, uint32_t out, const float *y, float *win, float *yw, double *check)
{
    for (uint32_t t = 0; t < W; t++) {
        const int64_t k = (int64_t) count - W + t;
        if (k >= 0)
            memcpy (win + (size_t) t * in, hist + (size_t) (k % W) * in, in * sizeof (float));
        else
            memset (win + (size_t) t * in, 0, in * sizeof (float));
    }
    char err[512];
    if (B->infer (m, win, 1, yw, err, sizeof err) != SIG_OK) {
        fprintf (stderr, "lstmbench: window: %s\n", err);
        return -1;
    }
    for (uint32_t k = 0; k < out; k++) {
        const double d = fabs ((double) y[k] - yw[k]) / fmax (fabs ((double) yw[k]), 1e-3);
        *check = isnan (*check) || d > *check || isnan (d) ? d : *check;
    }
    return 0;
}

/* The row's note: WHAT and the worst difference its window checks saw, or that none ran. */
static void s_check_note (row_t *r, const char *what)
{
    if (isnan (r->check))
        snprintf (r->note, sizeof r->note, "%s: not reached (every %d)", what, CHECK_EVERY);
    else
        snprintf (r->note, sizeof r->note, "%s %.1e", what, r->check);
}

/* A slow row's warm-up is cut at a quarter of its time (--seconds); the timed part's START is reset
 * when it begins (at I == *WARM). */
static void s_warm_cut (const options_t *o, uint32_t i, uint32_t *warm, double *start)
{
    if (i < *warm && o->seconds > 0 && clock_now_us () - *start > o->seconds * 0.25e6)
        *warm = i;
    if (i == *warm)
        *start = clock_now_us ();
}

/* Step I (WHAT, for the messages) of stream SLOT on X into Y (OUT outputs), a sample of R when TIMED,
 * every output checked finite. 0; -1 an output not finite; -2 the step failed. */
static int s_timed_step (const backend_iface_t *B, backend_model_t *m, uint32_t slot, const float *x, float *y,
                         uint32_t out, uint32_t i, bool timed, const char *what, row_t *r)
{
    char err[512];
    const uint64_t t0 = clock_now_ns ();
    const sig_status_t st = B->stream_step (m, slot, x, y, err, sizeof err);
    const uint64_t t1 = clock_now_ns ();
    if (st != SIG_OK) {
        fprintf (stderr, "lstmbench: %s: %s\n", what, err);
        return -2;
    }
    if (timed)
        r->samples[r->n++] = (double) (t1 - t0) / 1e3;
    int rc = 0;
    for (uint32_t k = 0; k < out; k++)
        if (!isfinite (y[k])) {
            fprintf (stderr, "lstmbench: %s %u: output %u is %g\n", what, i, k, y[k]);
            rc = -1;
        }
    return rc;
}

static int s_bench_step (const options_t *o, const backend_iface_t *B, backend_model_t *m, const lstm_weights_t *w,
                         bool cuda, uint64_t *seed, row_t *r)
{
    const uint32_t in = w->step_size, W = w->window, out = w->head.out;
    float *hist = calloc ((size_t) W * in, sizeof (float)), *win = malloc ((size_t) W * in * sizeof (float));
    float *y = malloc (out * sizeof (float)), *yw = malloc (out * sizeof (float));
    uint64_t count = 0;
    int rc = 0;
    B->stream_reset (m, 0);
    r->check = NAN;
    double start = clock_now_us ();
    uint32_t warm = o->warmup;
    for (uint32_t i = 0; i < warm + o->iterations && rc == 0; i++) {
        s_warm_cut (o, i, &warm, &start);
        float *x = hist + (size_t) (count % W) * in;
        s_fill (seed, x, in);
        const int st = s_timed_step (B, m, 0, x, y, out, i, i >= warm, "step", r);
        count++;
        if (st != 0)
            rc = -1;
        if (st == -2)
            break;
        B->stream_advance (m, 0);
#ifdef SIGSERVE_HAVE_CUDA
        char err[512];
        if (cuda && lstm_cuda_sync (m, err, sizeof err) != SIG_OK) {   /* the precomputation: not timed */
            fprintf (stderr, "lstmbench: advance: %s\n", err);
            rc = -1;
        }
#else
        (void) cuda;
#endif
        if (i % CHECK_EVERY == CHECK_EVERY - 1 && s_check_window (B, m, hist, count, W, in, out, y, win, yw, &r->check) != 0)
            rc = -1;   /* the same window in full, zeros before the first step */
        if (i >= warm && s_out_of_time (o, start, i - warm))
            break;
    }
    s_check_note (r, "stream vs its full window");
    free (hist);
    free (win);
    free (y);
    free (yw);
    return rc;
}

/* --rr: STREAMS streams (slots 0..STREAMS-1) in turn, each step followed by its advance, which is
 * posted and not waited for: a step may wait behind the previous streams' advances (in the serving
 * kernel) or not (apart). A round (every stream once) starts GAP_US after the last one's start (0: at
 * once). Every output finite; every CHECK_EVERY-th against its stream's full window. */
static int s_bench_rr (const options_t *o, const backend_iface_t *B, backend_model_t *m, const lstm_weights_t *w,
                       uint32_t streams, double gap_us, uint64_t *seed, row_t *r)
{
    const uint32_t in = w->step_size, W = w->window, out = w->head.out;
    float *hist = calloc ((size_t) streams * W * in, sizeof (float)), *win = malloc ((size_t) W * in * sizeof (float));
    float *y = malloc (out * sizeof (float)), *yw = malloc (out * sizeof (float));
    uint64_t *count = calloc (streams, sizeof (uint64_t));
    int rc = 0;
    for (uint32_t s = 0; s < streams; s++)
        B->stream_reset (m, s);
    r->check = NAN;
    double start = clock_now_us ();
    uint32_t warm = o->warmup;
    uint64_t next = 0;   /* when the next step may start (the gap) */
    for (uint32_t i = 0; i < warm + o->iterations && rc == 0; i++) {
        s_warm_cut (o, i, &warm, &start);
        const uint32_t s = i % streams;
        float *mine = hist + (size_t) s * W * in, *x = mine + (size_t) (count[s] % W) * in;
        s_fill (seed, x, in);
        if (s == 0) {   /* a round: its steps back to back */
            if (i == 0 || gap_us <= 0)
                next = clock_now_ns ();
            while (clock_now_ns () < next) {
            }
            next += (uint64_t) (gap_us * 1e3);
        }
        const int st = s_timed_step (B, m, s, x, y, out, i, i >= warm, "round-robin step", r);
        count[s]++;
        if (st != 0)
            rc = -1;
        if (st == -2)
            break;
        B->stream_advance (m, s);
        if (i % CHECK_EVERY == CHECK_EVERY - 1 && s_check_window (B, m, mine, count[s], W, in, out, y, win, yw, &r->check) != 0)
            rc = -1;   /* its stream's window in full (the advance not waited for) */
        if (i >= warm && s_out_of_time (o, start, i - warm))
            break;
    }
    s_check_note (r, "streams vs their full windows");
    free (hist);
    free (win);
    free (y);
    free (yw);
    free (count);
    return rc;
}

static int s_bench_window (const options_t *o, const backend_iface_t *B, backend_model_t *m, const lstm_weights_t *w,
                           uint64_t *seed, row_t *r)
{
    const size_t nin = (size_t) w->window * w->step_size;
    float *x = malloc (nin * sizeof (float)), *y = malloc (w->head.out * sizeof (float));
    double *ref = malloc (w->head.out * sizeof (double));
    char err[512];
    int rc = 0;
    double start = clock_now_us ();
    uint32_t warm = o->warmup / 10;
    for (uint32_t i = 0; i < warm + o->iterations && rc == 0; i++) {
        if (i < warm && o->seconds > 0 && clock_now_us () - start > o->seconds * 0.25e6)
            warm = i;
        if (i == warm)
            start = clock_now_us ();
        s_fill (seed, x, nin);
        const uint64_t t0 = clock_now_ns ();
        sig_status_t st = B->infer (m, x, 1, y, err, sizeof err);
        const uint64_t t1 = clock_now_ns ();
        if (st != SIG_OK) {
            fprintf (stderr, "lstmbench: window: %s\n", err);
            rc = -1;
        }
        if (i >= warm)
            r->samples[r->n++] = (double) (t1 - t0) / 1e3;
        if (i == warm) {   /* one against float64 */
            lstm_reference_window (w, x, 1, ref);
            double num = 0, den = 0;
            for (uint32_t k = 0; k < w->head.out; k++) {
                num += ((double) y[k] - ref[k]) * ((double) y[k] - ref[k]);
                den += ref[k] * ref[k];
            }
            r->check = sqrt (num) / fmax (sqrt (den), 1e-6);
            snprintf (r->note, sizeof r->note, "vs float64 %.1e", r->check);
        }
        if (i >= warm && s_out_of_time (o, start, i - warm))
            break;
    }
    free (x);
    free (y);
    free (ref);
    return rc;
}

#ifdef SIGSERVE_HAVE_CUDA
static int s_bench_ping (const options_t *o, backend_model_t *m, uint32_t in, uint64_t *seed, row_t *r)
{
    float *x = malloc (in * sizeof (float)), y;
    char err[512];
    int rc = 0;
    for (uint32_t i = 0; i < o->warmup + o->iterations && rc == 0; i++) {
        s_fill (seed, x, in);
        const uint64_t t0 = clock_now_ns ();
        sig_status_t st = lstm_cuda_ping (m, x, &y, err, sizeof err);
        const uint64_t t1 = clock_now_ns ();
        if (st != SIG_OK || y != x[0]) {
            fprintf (stderr, "lstmbench: ping: %s (answer %g, sent %g)\n", st != SIG_OK ? err : "wrong answer", y, x[0]);
            rc = -1;
        }
        if (i >= o->warmup)
            r->samples[r->n++] = (double) (t1 - t0) / 1e3;
    }
    snprintf (r->note, sizeof r->note, "%u floats in, 1 out", in);
    free (x);
    return rc;
}

/* The MLP persistent kernel's floor (backend_cuda.h): one block, reads IN floats, sums them, the
 * output store as completion. */
static int s_bench_pingpong (const options_t *o, uint32_t in, uint64_t *seed, row_t *r)
{
    char err[512];
    backend_model_t *pp = cuda_pingpong_load (0, in, SIG_PINGPONG_READ, SIG_DONE_OUTPUTS, o->wait, err, sizeof err);
    if (!pp) {
        fprintf (stderr, "lstmbench: ping-pong floor: %s\n", err);
        return -1;
    }
    float *x = malloc (in * sizeof (float)), y;
    int rc = 0;
    for (uint32_t i = 0; i < o->warmup + o->iterations && rc == 0; i++) {
        s_fill (seed, x, in);
        const uint64_t t0 = clock_now_ns ();
        sig_status_t st = backend_cuda_iface.infer (pp, x, 1, &y, err, sizeof err);
        const uint64_t t1 = clock_now_ns ();
        if (st != SIG_OK) {
            fprintf (stderr, "lstmbench: ping-pong: %s\n", err);
            rc = -1;
        }
        if (i >= o->warmup)
            r->samples[r->n++] = (double) (t1 - t0) / 1e3;
    }
    snprintf (r->note, sizeof r->note, "MLP kernel's, %u floats read", in);
    free (x);
    backend_cuda_iface.destroy (&pp);
    return rc;
}
#endif

#ifdef SIGSERVE_HAVE_CUDA
/* The name of trace stamp I of a model of L layers in block BLOCK's records (kernels.h:
 * SIG_LSTM_TRACE_*). */
static void s_stamp_name (uint32_t i, uint32_t L, bool ping, uint32_t block, char *out, size_t len)
{
    if (i == 0)
        snprintf (out, len, block ? "words received" : "seen");
    else if (i == 1)
        snprintf (out, len, block ? "features copied" : "features read");
    else if (i == 2)
        snprintf (out, len, ping ? "output stored" : "broadcast sent");
    else if (i == 3 + 3 * L)
        snprintf (out, len, "output stored");
    else
        snprintf (out, len, "L%u %s", (i - 3) / 3, (i - 3) % 3 == 0 ? "gates" : (i - 3) % 3 == 1 ? "h published" : "gathered");
}

static int s_trace_block (const options_t *o, const char *size, const char *dname, const char *how, uint64_t trace,
                          size_t layers, uint32_t block, row_t *r);

/* The records of the traced kernel (stopped) at device address TRACE, block 0's and then (a model of
 * several blocks) block 1's (s_trace_block). The buffer is zeroed again for the next use. */
static int s_trace_rows (const options_t *o, const char *size, const char *dname, const char *how, uint64_t trace,
                         size_t layers, row_t *r)
{
    const size_t bytes = (size_t) SIG_LSTM_TRACE_RECORDS * SIG_LSTM_TRACE_WORDS * sizeof (uint64_t);
    int rc = 0;
    for (uint32_t b = 0; b < SIG_LSTM_TRACE_BLOCKS && rc == 0; b++)
        rc = s_trace_block (o, size, dname, how, trace + b * bytes, layers, b, r);
    return rc;
}

/* Block BLOCK's records at device address TRACE: for the steps (or, when there are none, the pings)
 * a row per phase, from each stamp to the next one reached, and seen -> output (the kernel's part of
 * the critical path); clock64 converted at the clock measured over the records (%globaltimer against
 * clock64). Block 1 (none in a model of one block: no rows) has its own clock: its rows compare
 * with each other only. */
static int s_trace_block (const options_t *o, const char *size, const char *dname, const char *how, uint64_t trace,
                          size_t layers, uint32_t block, row_t *r)
{
    const size_t words = (size_t) SIG_LSTM_TRACE_RECORDS * SIG_LSTM_TRACE_WORDS;
    uint64_t *h = malloc (words * sizeof *h);
    if (!h || cudaMemcpy (h, (void *) (uintptr_t) trace, words * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess
        || cudaMemset ((void *) (uintptr_t) trace, 0, words * sizeof *h) != cudaSuccess) {
        fprintf (stderr, "lstmbench: --trace: the records could not be read\n");
        free (h);
        return -1;
    }
    char who[32] = "";   /* block 1's rows say so */
    if (block)
        snprintf (who, sizeof who, ", block %u", block);
    /* the last stamp: the output stored (block 0), the last layer gathered (block 1: no head) */
    const uint32_t L = (uint32_t) layers, end_stamp = block ? 2 + 3 * L : 3 + 3 * L,
                   last = end_stamp < SIG_LSTM_TRACE_STAMPS ? end_stamp : SIG_LSTM_TRACE_STAMPS - 1;
    uint32_t steps = 0, pings = 0;
    double cycles = 0, ns = 0;
    for (uint32_t k = 0; k < SIG_LSTM_TRACE_RECORDS; k++) {
        const uint64_t *rec = h + (size_t) k * SIG_LSTM_TRACE_WORDS;
        steps += rec[0] == SIG_LSTM_OP_STEP;
        pings += rec[0] == SIG_LSTM_OP_PING;
        const uint32_t end = rec[0] == SIG_LSTM_OP_PING ? 2 : last;
        if (rec[0] && rec[3] && rec[3 + end] && rec[2] > rec[1]) {
            cycles += (double) (rec[3 + end] - rec[3]);
            ns += (double) (rec[2] - rec[1]);
        }
    }
    const bool ping = steps == 0;
    const uint64_t op = ping ? SIG_LSTM_OP_PING : SIG_LSTM_OP_STEP;
    const double mhz = ns > 0 ? cycles / ns * 1e3 : 0;
    if (!(steps || pings) || mhz <= 0) {
        if (!block)
            printf ("| %s cuda %s traced [%s]: no records | | | | | | | | |\n", size, dname, how);
        free (h);
        return 0;
    }
    char label[256], a[32], b[32];
    const uint32_t end = ping ? 2 : last, cap = o->iterations + 16;
    for (uint32_t i = 0; i <= end; i++) {   /* the phase ending at stamp i (i = 0: seen -> output) */
        r->n = 0;
        uint32_t shown = 0;                  /* the stamp the phase starts at, as first found */
        for (uint32_t k = 0; k < SIG_LSTM_TRACE_RECORDS && r->n < cap; k++) {
            const uint64_t *rec = h + (size_t) k * SIG_LSTM_TRACE_WORDS;
            const uint32_t to = i == 0 ? end : i;
            if (rec[0] != op || !rec[3 + to] || !rec[3])
                continue;
            uint32_t from = 0;
            if (i > 0) {   /* the latest earlier stamp reached (no broadcast in one block) */
                from = i - 1;
                while (from > 0 && !rec[3 + from])
                    from--;
            }
            if (r->n == 0)
                shown = from;
            r->samples[r->n++] = (double) (rec[3 + to] - rec[3 + from]) / mhz;
        }
        if (!r->n)
            continue;
        if (i == 0) {
            s_stamp_name (0, L, ping, block, a, sizeof a);
            s_stamp_name (end, L, ping, block, b, sizeof b);
            snprintf (label, sizeof label, "%s cuda %s traced %s%s, in the kernel: %s -> %s [%s]", size, dname,
                      ping ? "ping" : "step", who, a, b, how);
        } else {
            const uint32_t from = shown;
            s_stamp_name (from, L, ping, block, a, sizeof a);
            s_stamp_name (i, L, ping, block, b, sizeof b);
            snprintf (label, sizeof label, "%s cuda %s traced %s%s: %s -> %s", size, dname, ping ? "ping" : "step", who,
                      a, b);
        }
        snprintf (r->note, sizeof r->note, "SM clock %.0f MHz", mhz);
        s_print (label, r);
    }
    /* kernels.h SIG_LSTM_TRACE_ENTER ..: the finer stamps of a step of up to 4 layers, a row per pair */
    static const struct {
        uint32_t from, to;
        const char *name;
    } fine[] = {
        { 2, SIG_LSTM_TRACE_ENTER, "features read (or broadcast sent) -> step entered" },
        { SIG_LSTM_TRACE_ENTER, SIG_LSTM_TRACE_L0_DOT, "step entered -> L0 dot summed (thread 0, before the reduction)" },
        { SIG_LSTM_TRACE_L0_DOT, 3, "L0 dot summed -> L0 gates (the reduction over the unit's lanes)" },
        { 3, SIG_LSTM_TRACE_L0_STATE, "L0 gates -> L0 state read (G and c)" },
    };
    for (size_t f = 0; f < sizeof fine / sizeof fine[0] && !ping && L <= SIG_LSTM_TRACE_FINE_LAYERS; f++) {
        r->n = 0;
        for (uint32_t k = 0; k < SIG_LSTM_TRACE_RECORDS && r->n < cap; k++) {
            const uint64_t *rec = h + (size_t) k * SIG_LSTM_TRACE_WORDS;
            const uint32_t from = fine[f].from == 2 && !rec[3 + 2] ? 1 : fine[f].from;   /* one block: no broadcast */
            if (rec[0] != op || !rec[3 + from] || !rec[3 + fine[f].to])
                continue;
            r->samples[r->n++] = (double) ((int64_t) (rec[3 + fine[f].to] - rec[3 + from])) / mhz;
        }
        if (!r->n)
            continue;
        snprintf (label, sizeof label, "%s cuda %s traced step%s: %s", size, dname, who, fine[f].name);
        snprintf (r->note, sizeof r->note, "SM clock %.0f MHz", mhz);
        s_print (label, r);
    }
    /* kernels.h SIG_LSTM_TRACE_STALE (up to 5 layers): the feature words read again because their tag
     * was stale */
    uint64_t stale = 0, stale_max = 0, counted = 0, with_stale = 0;
    for (uint32_t k = 0; k < SIG_LSTM_TRACE_RECORDS && L <= 5u; k++) {
        const uint64_t *rec = h + (size_t) k * SIG_LSTM_TRACE_WORDS;
        if (rec[0] != op || !rec[3])
            continue;
        if (rec[3 + SIG_LSTM_TRACE_STALE]) {
            const uint64_t s = rec[3 + SIG_LSTM_TRACE_STALE] - 1u;
            stale += s;
            stale_max = s > stale_max ? s : stale_max;
            with_stale += s > 0;
            counted++;
        }
    }
    if (counted)
        printf ("%s cuda %s traced %s [%s]: stale feature words re-read after the poll: %.3f a command, at most %llu, "
                "in %llu of %llu commands\n", size, dname, ping ? "ping" : "step", how,
                (double) stale / (double) counted, (unsigned long long) stale_max, (unsigned long long) with_stale,
                (unsigned long long) counted);
    free (h);
    return 0;
}
#endif

/* One backend, weight type and launch size (BLOCKS; 0: the plan's): load, the rows, destroy. A
 * model that does not load is a row saying why, not a failure. FIRST: the first launch size of
 * this weight type (the ping floor is measured once). */
static int s_bench_model (const options_t *o, const char *size, const char *bname, const char *dname, uint32_t blocks,
                          uint32_t sync, uint32_t math, uint64_t trace, bool first, const weights_t *w, model_config_t *cfg,
                          uint64_t *seed, row_t *r)
{
    const backend_iface_t *B = s_iface (bname);
    const bool cuda = strcmp (bname, "cuda") == 0;
    const lstm_weights_t *l = w->lstm;
    char err[512];
    cfg->backend = cuda ? BACKEND_CUDA : BACKEND_CPU;
    cfg->weight_dtype = (weight_dtype_t) s_dtype (dname);
    cfg->wait = o->wait;
    cfg->max_streams = o->slots > o->rr ? o->slots : o->rr;
    cfg->watchdog_ms = 10000;
#ifdef SIGSERVE_HAVE_CUDA
    if (cuda) {
        const sig_lstm_tuning_t t = { .blocks = blocks, .grid = (uint32_t) o->grid, .sync = sync, .math = math,
                                      .trace = trace };
        lstm_cuda_tuning (&t);
    }
#else
    (void) blocks;
    (void) first;
    (void) sync;
    (void) math;
    (void) trace;
#endif
    const double t0 = clock_now_us ();
    backend_model_t *m = B->load (w, cfg, 0, err, sizeof err);
    const double load_ms = (clock_now_us () - t0) / 1e3;
    if (!m) {
        printf ("| %s %s %s: %s | | | | | | | | |\n", size, bname, dname, err);
        return 0;
    }
    char label[256], how[160] = "1 core";
#ifdef SIGSERVE_HAVE_CUDA
    if (cuda) {
        const sig_lstm_plan_t *p = lstm_cuda_plan (m);
        static const char *const syncs[4] = { "", ", old poll", ", old exchanges", ", old poll and exchanges" };
        snprintf (how, sizeof how, "%s %u, %u KiB smem%s%s%s%s, advances %s%s", p->mode == SIG_LSTM_GRID ? "grid" : "cluster",
                  p->blocks, p->smem_bytes >> 10, syncs[p->sync & 3u],
                  (p->sync & SIG_LSTM_SYNC_BCAST_AFTER) && p->blocks > 1 ? ", broadcast after the read" : "",
                  (p->sync & SIG_LSTM_SYNC_GENERIC) ? ", generic kernel" : "",
                  p->dtype == SIG_LSTM_F32 ? "" : p->math == SIG_LSTM_MATH_HALF ? ", half math" : ", wide math",
                  p->apart ? "apart" : "inline", trace ? ", TRACED" : "");
    }
#endif
    fprintf (stderr, "lstmbench: %s %s %s loaded in %.0f ms (%s)\n", size, bname, dname, load_ms, how);
    r->n = 0;
    r->note[0] = 0;
    int rc = s_bench_step (o, B, m, l, cuda, seed, r);
    snprintf (label, sizeof label, "%s %s %s step, critical path [%s]", size, bname, dname, how);
    if (rc == 0)
        s_print (label, r);
    if (rc == 0 && trace) {   /* the traced launch: its step row, then (f32) its pings; no window */
#ifdef SIGSERVE_HAVE_CUDA
        if (cuda && cfg->weight_dtype == WEIGHT_DTYPE_F32 && first) {
            B->destroy (&m);   /* the step records are read once this kernel stops */
            rc = s_trace_rows (o, size, dname, how, trace, l->layer_count, r);
            if (rc == 0 && (m = B->load (w, cfg, 0, err, sizeof err)) == NULL) {
                printf ("| %s %s %s: %s | | | | | | | | |\n", size, bname, dname, err);
                return 0;
            }
            r->n = 0;
            r->note[0] = 0;
            if (rc == 0 && (rc = s_bench_ping (o, m, l->step_size, seed, r)) == 0) {
                snprintf (label, sizeof label, "%s floor: LSTM ring ping, no compute [%s]", size, how);
                s_print (label, r);
            }
        }
        B->destroy (&m);
        return rc == 0 ? s_trace_rows (o, size, dname, how, trace, l->layer_count, r) : rc;
#endif
    }
    if (rc == 0 && o->rr) {   /* the advance's time first (slot 0: a step, then its advance waited for) */
        double adv[32];
        float *x = calloc (l->step_size, sizeof (float)), *y = calloc (l->head.out, sizeof (float));
        for (int i = 0; i < 32 && rc == 0; i++) {
            s_fill (seed, x, l->step_size);
            if (B->stream_step (m, 0, x, y, err, sizeof err) != SIG_OK)
                rc = -1;
            const uint64_t t0 = clock_now_ns ();
            B->stream_advance (m, 0);
#ifdef SIGSERVE_HAVE_CUDA
            if (cuda && lstm_cuda_sync (m, err, sizeof err) != SIG_OK)
                rc = -1;
#endif
            adv[i] = (double) (clock_now_ns () - t0) / 1e3;
        }
        free (x);
        free (y);
        latency_summary_t as;
        latency_summarize (adv, 32, &as);
        char gl[64];
        snprintf (gl, sizeof gl, "%s", o->rr_gap);
        for (char *s7 = NULL, *g = strtok_r (gl, ",", &s7); g && rc == 0; g = strtok_r (NULL, ",", &s7)) {
            const double f = atof (g), gap = f * o->rr * as.p50;
            r->n = 0;
            r->note[0] = 0;
            rc = s_bench_rr (o, B, m, l, o->rr, gap, seed, r);
            snprintf (label, sizeof label, "%s %s %s step, %u streams round-robin, a round every %.0f us (%.2g x %u "
                      "advances of %.0f us) [%s]", size, bname, dname, o->rr, gap, f, o->rr, as.p50, how);
            if (rc == 0)
                s_print (label, r);
        }
    }
    if (rc == 0 && !o->no_window) {
        r->n = 0;
        r->note[0] = 0;
        rc = s_bench_window (o, B, m, l, seed, r);
        snprintf (label, sizeof label, "%s %s %s full window [%s]", size, bname, dname, how);
        if (rc == 0)
            s_print (label, r);
    }
#ifdef SIGSERVE_HAVE_CUDA
    if (rc == 0 && cuda && !o->no_floors && cfg->weight_dtype == WEIGHT_DTYPE_F32 && first) {
        r->n = 0;
        r->note[0] = 0;
        rc = s_bench_ping (o, m, l->step_size, seed, r);
        snprintf (label, sizeof label, "%s floor: LSTM ring ping, no compute [%s]", size, how);
        if (rc == 0)
            s_print (label, r);
    }
#endif
    const double d0 = clock_now_us ();
    B->destroy (&m);
    fprintf (stderr, "lstmbench: %s %s %s destroyed in %.0f ms\n", size, bname, dname, (clock_now_us () - d0) / 1e3);
    return rc;
}

#ifdef SIGSERVE_HAVE_CUDA
/* ---------------------------------------------------------------------------------------------
 * Several instances at once (issue 19 item 5): N instances of one model on GPU 0, each driven by
 * its own thread (pinned to --cpu + k when --cpu is given), one stream each, at the same time. */

typedef struct {
    const options_t *o;
    const backend_iface_t *B;
    backend_model_t *m;
    const lstm_weights_t *w;
    int cpu;
    uint64_t seed;
    row_t r;
    int rc;
} driver_t;

static void *s_drive (void *arg)
{
    driver_t *d = arg;
    char err[256];
    if (d->cpu >= 0 && threads_pin (d->cpu, err, sizeof err) != 0)
        fprintf (stderr, "lstmbench: a driver: %s\n", err);
    d->rc = s_bench_step (d->o, d->B, d->m, d->w, true, &d->seed, &d->r);
    return NULL;
}

static int s_bench_instances (const options_t *o, const char *size, const char *dname, uint32_t n, const weights_t *w,
                              model_config_t *cfg, uint64_t *seed)
{
    const backend_iface_t *B = s_iface ("cuda");
    cfg->backend = BACKEND_CUDA;
    cfg->weight_dtype = (weight_dtype_t) s_dtype (dname);
    cfg->wait = o->wait;
    cfg->max_streams = o->slots;
    cfg->watchdog_ms = 10000;
    cfg->green_context = o->green != 0;
    driver_t *d = calloc (n, sizeof *d);
    pthread_t *th = calloc (n, sizeof *th);
    char err[512];
    int rc = 0;
    uint32_t loaded = 0;
    for (; loaded < n; loaded++) {
        d[loaded] = (driver_t) { .o = o, .B = B, .w = w->lstm, .cpu = o->cpu >= 0 ? o->cpu + (int) loaded : -1,
                                 .seed = rng_next (seed),
                                 .r = { .samples = malloc ((size_t) (o->iterations + 16) * sizeof (double)) } };
        if (!(d[loaded].m = B->load (w, cfg, 0, err, sizeof err))) {
            printf ("| %s cuda %s, %u instances at once: instance %u: %s | | | | | | | | |\n", size, dname, n, loaded, err);
            break;
        }
    }
    if (loaded == n) {
        for (uint32_t k = 0; k < n; k++)
            pthread_create (&th[k], NULL, s_drive, &d[k]);
        for (uint32_t k = 0; k < n; k++)
            pthread_join (th[k], NULL);
        row_t all = { .samples = malloc ((size_t) n * (o->iterations + 16) * sizeof (double)) };
        double worst = 0;
        for (uint32_t k = 0; k < n; k++) {
            rc |= d[k].rc;
            memcpy (all.samples + all.n, d[k].r.samples, d[k].r.n * sizeof (double));
            all.n += d[k].r.n;
            latency_summary_t one;
            latency_summarize (d[k].r.samples, d[k].r.n, &one);
            worst = one.p99 > worst ? one.p99 : worst;
        }
        const sig_lstm_plan_t *p = lstm_cuda_plan (d[0].m);
        char label[256];
        snprintf (all.note, sizeof all.note, "the worst instance's p99 %.2f", worst);
        char green[48] = "";
        if (B->green_sms (d[0].m))
            snprintf (green, sizeof green, ", each in a green context of %u SMs", B->green_sms (d[0].m));
        snprintf (label, sizeof label, "%s cuda %s step, %u instance(s) at once%s [%s %u, %u KiB smem each]", size, dname,
                  n, green, p->mode == SIG_LSTM_GRID ? "grid" : "cluster", p->blocks, p->smem_bytes >> 10);
        if (rc == 0)
            s_print (label, &all);
        free (all.samples);
    }
    for (uint32_t k = 0; k < n; k++) {
        if (d[k].m)
            B->destroy (&d[k].m);
        free (d[k].r.samples);
    }
    free (d);
    free (th);
    return rc;
}
#endif

/* ---------------------------------------------------------------------------------------------
 * One size: every backend and weight type asked for */

static volatile uint64_t s_sink;

/* One streaming read of N bytes with 64-byte loads (the CPU rows' floor). */
__attribute__ ((target ("avx512f"))) static void s_read64 (const void *p, size_t n)
{
    const __m512i *v = p;
    __m512i a = _mm512_setzero_si512 (), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 4 <= n / 64; i += 4) {
        a = _mm512_or_si512 (a, _mm512_load_si512 (v + i));
        b = _mm512_or_si512 (b, _mm512_load_si512 (v + i + 1));
        c = _mm512_or_si512 (c, _mm512_load_si512 (v + i + 2));
        d = _mm512_or_si512 (d, _mm512_load_si512 (v + i + 3));
    }
    for (; i < n / 64; i++)
        a = _mm512_or_si512 (a, _mm512_load_si512 (v + i));
    s_sink = (uint64_t) _mm512_reduce_or_epi64 (_mm512_or_si512 (_mm512_or_si512 (a, b), _mm512_or_si512 (c, d)));
}

/* The CPU rows' floor for DTYPE: one read of the LSTM's W_ih and W_hh bytes in that dtype (a step
 * reads the W_ih part; its advance, the W_hh part), with AVX-512 loads, on the same core; a row. */
static void s_cpu_floor (const options_t *o, const char *size, const lstm_weights_t *l, const char *dname, row_t *r)
{
    if (!__builtin_cpu_supports ("avx512f"))
        return;
    size_t weights = 0;
    for (size_t k = 0; k < l->layer_count; k++)
        weights += 4 * (size_t) l->hidden * (l->layers[k].in + l->hidden);
    const size_t bytes = weights * (strcmp (dname, "f32") == 0 ? 4 : 2);
    unsigned char *buf = aligned_alloc (64, (bytes + 63) / 64 * 64);
    memset (buf, 0x5a, bytes);
    r->n = 0;
    r->note[0] = 0;
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        const double t0 = clock_now_us ();
        s_read64 (buf, bytes);
        const double t1 = clock_now_us ();
        if (i >= o->warmup)
            r->samples[r->n++] = t1 - t0;
    }
    char label[160];
    snprintf (label, sizeof label, "%s floor %s: one read of the %zu bytes of W_ih and W_hh (64-byte loads)", size, dname,
              bytes);
    s_print (label, r);
    free (buf);
}

static int s_bench_size (const options_t *o, const char *size, uint64_t *seed, const char *dir)
{
    lstm_shape_t shape;
    char err[512], path[1024];
    if (lstm_shape_parse (size, &shape, err, sizeof err) != 0) {
        fprintf (stderr, "lstmbench: %s\n", err);
        return -1;
    }
    snprintf (path, sizeof path, "%s/lstmbench-%s.safetensors", dir, size);
    model_config_t cfg;
    weights_t *w = lstm_random_weights (path, &shape, rng_next (seed), &cfg, err, sizeof err);
    unlink (path);
    if (!w) {
        fprintf (stderr, "lstmbench: %s\n", err);
        return -1;
    }
    const lstm_weights_t *l = w->lstm;
    printf ("\n### %s: %zu layers, window %u, %u inputs, %u units, %u output (%.2f M weights)\n\n", size, l->layer_count,
            l->window, l->step_size, l->hidden, l->head.out,
            (double) (4ull * l->hidden * (l->step_size + l->hidden) + 8ull * l->hidden * l->hidden * (l->layer_count - 1))
                / 1e6);
    latency_print_header (stdout, "row (microseconds)");
    row_t r = { .samples = malloc ((size_t) (o->iterations + 16) * sizeof (double)) };
    int rc = 0;
    char list[256];
    snprintf (list, sizeof list, "%s", o->backends);
    for (char *save = NULL, *bname = strtok_r (list, ",", &save); bname && rc == 0; bname = strtok_r (NULL, ",", &save)) {
        const backend_iface_t *B = s_iface (bname);
        if (!B) {
            printf ("| %s: not in this build | | | | | | | | |\n", bname);
            continue;
        }
        const bool cuda = strcmp (bname, "cuda") == 0;
        char dl[64] = "";
        if (cuda)
            snprintf (dl, sizeof dl, "%s", o->dtypes);
        else {   /* the CPU's: those of --dtypes it holds (f32, bf16), each then beside its floor */
            char want[64];
            snprintf (want, sizeof want, "%s", o->dtypes);
            for (char *s8 = NULL, *d = strtok_r (want, ",", &s8); d; d = strtok_r (NULL, ",", &s8))
                if (s_dtype (d) >= 0 && backend_holds (B, (weight_dtype_t) s_dtype (d)))
                    snprintf (dl + strlen (dl), sizeof dl - strlen (dl), "%s%s", dl[0] ? "," : "", d);
        }
        for (char *s2 = NULL, *dname = strtok_r (dl, ",", &s2); dname && rc == 0; dname = strtok_r (NULL, ",", &s2)) {
#ifdef SIGSERVE_HAVE_CUDA
            if (cuda && o->instances[0]) {      /* --instances: those rows instead of the usual ones */
                char il[64];
                snprintf (il, sizeof il, "%s", o->instances);
                for (char *s4 = NULL, *nstr = strtok_r (il, ",", &s4); nstr && rc == 0; nstr = strtok_r (NULL, ",", &s4))
                    rc = s_bench_instances (o, size, dname, (uint32_t) strtoul (nstr, NULL, 10), w, &cfg, seed);
                continue;
            }
#endif
            char bl[128];
            snprintf (bl, sizeof bl, "%s", cuda && o->blocks[0] ? o->blocks : "0");
            for (char *s3 = NULL, *bstr = strtok_r (bl, ",", &s3); bstr && rc == 0; bstr = strtok_r (NULL, ",", &s3)) {
                char sl[64];
                snprintf (sl, sizeof sl, "%s", cuda ? o->sync : "0");
                for (char *s5 = NULL, *sy = strtok_r (sl, ",", &s5); sy && rc == 0; sy = strtok_r (NULL, ",", &s5)) {
                  char ml[64];   /* f32 weights have one kind of products */
                  snprintf (ml, sizeof ml, "%s", cuda && strcmp (dname, "f32") != 0 ? o->math : "default");
                  for (char *s6 = NULL, *ma = strtok_r (ml, ",", &s6); ma && rc == 0; ma = strtok_r (NULL, ",", &s6)) {
                    const uint32_t blocks = (uint32_t) strtoul (bstr, NULL, 10), sync = (uint32_t) strtoul (sy, NULL, 10);
                    const uint32_t math = s_math (ma);
                    const bool first = bstr == bl && sy == sl && ma == ml;
                    rc = s_bench_model (o, size, bname, dname, blocks, sync, math, 0, first, w, &cfg, seed, &r);
                    if (rc == 0 && !cuda && !o->no_floors)
                        s_cpu_floor (o, size, l, dname, &r);
#ifdef SIGSERVE_HAVE_CUDA
                    if (rc == 0 && cuda && o->trace) {   /* the traced instantiation, beside the serving rows */
                        const size_t bytes = (size_t) SIG_LSTM_TRACE_BLOCKS * SIG_LSTM_TRACE_RECORDS * SIG_LSTM_TRACE_WORDS
                                             * sizeof (uint64_t);
                        void *d = NULL;
                        if (cudaMalloc (&d, bytes) != cudaSuccess || cudaMemset (d, 0, bytes) != cudaSuccess) {
                            fprintf (stderr, "lstmbench: --trace: no device memory for the records\n");
                            rc = -1;
                        } else {
                            rc = s_bench_model (o, size, bname, dname, blocks, sync, math, (uint64_t) (uintptr_t) d, first,
                                                w, &cfg, seed, &r);
                        }
                        cudaFree (d);
                    }
#endif
                  }
                }
            }
        }
#ifdef SIGSERVE_HAVE_CUDA
        if (rc == 0 && cuda && !o->no_floors) {   /* a failure here is reported, not fatal */
            r.n = 0;
            r.note[0] = 0;
            char label[128];
            snprintf (label, sizeof label, "%s floor: MLP persistent ping-pong, read + output", size);
            if (s_bench_pingpong (o, l->step_size, seed, &r) == 0)
                s_print (label, &r);
        }
#endif
    }
    free (r.samples);
    weights_destroy (&w);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * --check: outputs of an export for a test to compare */

static int s_check (const options_t *o)
{
    model_config_t cfg;
    const lstm_shape_t shape = { .window = o->window, .head_act = o->head_act };
    lstm_config (&cfg, "check", o->check, &shape);
    const backend_iface_t *B = s_iface (o->backend);
    const int d = s_dtype (o->dtype);
    if (!B || d < 0) {
        fprintf (stderr, "lstmbench: backend \"%s\" or weight type \"%s\" not available in this build\n", o->backend,
                 o->dtype);
        return 2;
    }
    cfg.backend = strcmp (o->backend, "cuda") == 0 ? BACKEND_CUDA : BACKEND_CPU;
    cfg.weight_dtype = (weight_dtype_t) d;
#ifdef SIGSERVE_HAVE_CUDA
    if (cfg.backend == BACKEND_CUDA) {   /* --math wide or half: that kind of products, else the default */
        const sig_lstm_tuning_t t = { .math = s_math (o->math) };
        lstm_cuda_tuning (&t);
    }
#endif
    char err[512];
    weights_t *w = weights_load (&cfg, err, sizeof err);
    if (!w) {
        fprintf (stderr, "lstmbench: %s\n", err);
        return 1;
    }
    backend_model_t *m = B->load (w, &cfg, 0, err, sizeof err);
    if (!m) {
        fprintf (stderr, "lstmbench: %s\n", err);
        weights_destroy (&w);
        return 1;
    }
    const lstm_weights_t *l = w->lstm;
    const size_t nwin = (size_t) l->window * l->step_size;
    size_t cap = nwin + 1024, n = 0;
    float *v = malloc (cap * sizeof (float));
    double d_in;
    while (v && scanf ("%lf", &d_in) == 1) {
        if (n == cap)
            v = realloc (v, (cap *= 2) * sizeof (float));
        if (v)
            v[n++] = (float) d_in;
    }
    int rc = v && n >= nwin && (n - nwin) % l->step_size == 0 ? 0 : 1;
    if (rc)
        fprintf (stderr, "lstmbench: expected %zu floats (a window) and then whole steps of %u, got %zu\n", nwin,
                 l->step_size, n);
    float *y = malloc (l->head.out * sizeof (float));
    if (rc == 0 && B->infer (m, v, 1, y, err, sizeof err) != SIG_OK) {
        fprintf (stderr, "lstmbench: %s\n", err);
        rc = 1;
    }
    if (rc == 0) {
        printf ("window");
        for (uint32_t k = 0; k < l->head.out; k++)
            printf (" %.9g", y[k]);
        printf ("\n");
        B->stream_reset (m, 0);
    }
    for (size_t s = 0; rc == 0 && nwin + (s + 1) * l->step_size <= n; s++) {
        if (B->stream_step (m, 0, v + nwin + s * l->step_size, y, err, sizeof err) != SIG_OK) {
            fprintf (stderr, "lstmbench: %s\n", err);
            rc = 1;
            break;
        }
        B->stream_advance (m, 0);
        printf ("step %zu", s);
        for (uint32_t k = 0; k < l->head.out; k++)
            printf (" %.9g", y[k]);
        printf ("\n");
    }
    free (v);
    free (y);
    B->destroy (&m);
    weights_destroy (&w);
    return rc;
}

int main (int argc, char **argv)
{
    /* every kernel loaded when CUDA starts: a lazy load next to a resident kernel waits forever */
    setenv ("CUDA_MODULE_LOADING", "EAGER", 0);
    options_t o = { .sizes = "small,medium,large", .dtypes = "f32,f16,bf16", .backends = "cpu,cuda",
                    .iterations = 10000, .warmup = 1000, .seconds = 60, .cpu = -1, .wait = CUDA_WAIT_SPIN,
                    .slots = 4, .backend = "cpu", .dtype = "f32", .head_act = ACTIVATION_NONE, .blocks = "",
                    .instances = "", .sync = "0", .math = "default", .rr_gap = "0" };
    o.seed = (uint64_t) time (NULL) * 0x9e3779b97f4a7c15ull;
    static const struct option longs[] = {
        { "sizes", required_argument, 0, 's' },      { "dtypes", required_argument, 0, 'd' },
        { "backends", required_argument, 0, 'b' },   { "iterations", required_argument, 0, 'n' },
        { "warmup", required_argument, 0, 'w' },     { "seconds", required_argument, 0, 'S' },
        { "cpu", required_argument, 0, 'c' },        { "seed", required_argument, 0, 'r' },
        { "blocks", required_argument, 0, 'B' },     { "grid", no_argument, 0, 'G' },
        { "slots", required_argument, 0, 'L' },      { "no-window", no_argument, 0, 'N' },
        { "no-floors", no_argument, 0, 'F' },        { "check", required_argument, 0, 'k' },
        { "window", required_argument, 0, 'W' },     { "head-act", required_argument, 0, 'a' },
        { "backend", required_argument, 0, 'e' },    { "dtype", required_argument, 0, 't' },
        { "instances", required_argument, 0, 'I' },  { "help", no_argument, 0, 'h' },
        { "sync", required_argument, 0, 'y' },       { "trace", no_argument, 0, 'T' },
        { "math", required_argument, 0, 'M' },       { "rr", required_argument, 0, 'R' },
        { "rr-gap", required_argument, 0, 'g' },    { "green", no_argument, 0, 'E' },
        { 0, 0, 0, 0 },
    };
    for (int c; (c = getopt_long (argc, argv, "h", longs, NULL)) != -1;) {
        switch (c) {
        case 's': o.sizes = optarg; break;
        case 'd': o.dtypes = optarg; break;
        case 'b': o.backends = optarg; break;
        case 'n': o.iterations = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'w': o.warmup = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'S': o.seconds = atof (optarg); break;
        case 'c': o.cpu = atoi (optarg); break;
        case 'r': o.seed = strtoull (optarg, NULL, 10); break;
        case 'B': o.blocks = optarg; break;
        case 'G': o.grid = 1; break;
        case 'L': o.slots = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'N': o.no_window = 1; break;
        case 'F': o.no_floors = 1; break;
        case 'k': o.check = optarg; break;
        case 'W': o.window = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'a':
            o.head_act = strcmp (optarg, "relu") == 0 ? ACTIVATION_RELU : strcmp (optarg, "sigmoid") == 0 ? ACTIVATION_SIGMOID
                         : strcmp (optarg, "tanh") == 0 ? ACTIVATION_TANH : ACTIVATION_NONE;
            break;
        case 'e': o.backend = optarg; break;
        case 't': o.dtype = optarg; break;
        case 'I': o.instances = optarg; break;
        case 'y': o.sync = optarg; break;
        case 'T': o.trace = 1; break;
        case 'M': o.math = optarg; break;
        case 'R': o.rr = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'g': o.rr_gap = optarg; break;
        case 'E': o.green = 1; break;
        case 'h': s_usage (stdout); return 0;
        default: s_usage (stderr); return 2;
        }
    }
    if (o.check) {
        if (!o.window) {
            fprintf (stderr, "lstmbench: --check needs --window\n");
            return 2;
        }
        return s_check (&o);
    }
    if (o.iterations < 1 || o.slots < 1) {
        s_usage (stderr);
        return 2;
    }
    char pin_err[256];
    if (o.cpu >= 0 && threads_pin (o.cpu, pin_err, sizeof pin_err) != 0)
        fprintf (stderr, "lstmbench: --cpu: %s\n", pin_err);
    char host[128] = "?";
    gethostname (host, sizeof host);
    time_t now = time (NULL);
    char date[64];
    strftime (date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime (&now));
    printf ("lstmbench on %s, %s, %u timed iterations after %u warm-up (at most %.0f s a row), seed %llu, CPU %d\n",
            host, date, o.iterations, o.warmup, o.seconds, (unsigned long long) o.seed, o.cpu);
#ifdef SIGSERVE_HAVE_CUDA
    {
        int dev = 0, drv = 0, rt = 0;
        struct cudaDeviceProp p;
        if (strstr (o.backends, "cuda") && cudaGetDeviceCount (&dev) == cudaSuccess && dev > 0
            && cudaGetDeviceProperties (&p, 0) == cudaSuccess) {
            cudaDriverGetVersion (&drv);
            cudaRuntimeGetVersion (&rt);
            printf ("GPU 0: %s, %d SMs, %zu KiB L2, driver API %d, runtime %d\n", p.name, p.multiProcessorCount,
                    (size_t) p.l2CacheSize >> 10, drv, rt);
        } else if (strstr (o.backends, "cuda")) {
            printf ("no CUDA device: the cuda rows are skipped\n");
            o.backends = "cpu";
        }
    }
#endif
    char dir[] = "/tmp/lstmbench-XXXXXX";
    if (!mkdtemp (dir)) {
        perror ("lstmbench: mkdtemp");
        return 1;
    }
    int rc = 0;
    char list[256];
    snprintf (list, sizeof list, "%s", o.sizes);
    for (char *save = NULL, *size = strtok_r (list, ",", &save); size; size = strtok_r (NULL, ",", &save))
        rc |= s_bench_size (&o, size, &o.seed, dir);
    rmdir (dir);
    return rc ? 1 : 0;
}
