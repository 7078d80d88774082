/* What the GPU suites of the CUDA LSTM backend share (backend_lstm_cuda.c, kernels/lstm_persistent.cu):
 * test_lstm_cuda.c (sizes, weight types, launch shapes, the generic kernel, heads, slots, refusals,
 * the watchdog, green contexts) and test_lstm_cuda_apart.c (plan 4: the advances on other SMs). A
 * model opened as a fixture (a resident kernel left by a failed assertion is destroyed by the checked
 * teardown), its full windows and interleaved streams checked against the float64 references, and
 * the main: a suite prints "SKIP: <why>" and passes where there is no device, or one other than
 * compute capability 9.0.
 *
 * Tolerances: every output within its forward error bound (tolerance.h), on fresh random inputs,
 * outputs poisoned first, the largest error seen printed as a fraction of the bound:
 *   - against float64 with the weights rounded to the kernel's type (what the kernel computes
 *     with, fp32 sums): the f32 bound of those weights;
 *   - against float64 with the file's fp32 weights: the bound that adds the weights' rounding to
 *     the type (2^-11 relative for f16, 2^-8 for bf16; nothing for f32);
 *   - a streamed output against the same kernel's full window over the same W steps: twice the
 *     first (each is within it of the reference).
 * Where the kernel's products are in half precision (SIG_LSTM_MATH_HALF, f16 / bf16 weights), each
 * bound adds the inputs' rounding to the weights' type and the runs summed in it
 * (tol_lstm_*_products); the widening math (SIG_LSTM_MATH_WIDE) keeps the float32 products' bounds.
 *
 * Each suite's binary includes it once, inside #ifdef SIGSERVE_HAVE_CUDA: everything here is static. */
#ifndef SIGSERVE_LSTM_CUDA_TESTS_H
#define SIGSERVE_LSTM_CUDA_TESTS_H

#include "backends/backend_lstm.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/backend_lstm_cuda.h"
#include "backends/cuda/device.h"
#include "backends/cuda/green.h"
#include "clock.h"
#include "lstm_reference.h"
#include "reference.h"
#include "rng.h"
#include "testutil.h"
#include "tolerance.h"
#include "weights/weights.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t s_seed;
static char *s_dir;
static const backend_iface_t *B = &backend_lstm_cuda_iface;

static const char *s_dtype_names[3] = { "f32", "f16", "bf16" };

static float s_scale = 1.0f;   /* the inputs: uniform in [-s_scale, s_scale] */
static uint32_t s_slots = 3;   /* s_check_model's stream slots */
static int s_expect_apart = -1;   /* s_open asserts lstm_cuda_apart is this (-1: either) */
static int s_expect_head_smem = -1;   /* s_open asserts the plan's head_in_smem is this (-1: either) */
static int s_expect_spec = -1;   /* s_open asserts the specialised kernel runs (1) or the generic one (0) (-1: either) */
static bool s_cfg_apart;          /* s_open sets the model key advances_apart */
static bool s_cfg_green;          /* s_open sets the model key green_context and asserts a group of 8+ SMs */

static inline void s_fill (float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = s_scale * rng_uniform (&s_seed, -1.0f, 1.0f);
}

_Static_assert (TOL_HALF_RUN == SIG_LSTM_HALF_RUN, "the bound's runs are the kernel's");

typedef struct {
    weights_t *w, *wr;          /* as in the file; rounded to the kernel's type */
    model_config_t cfg;
    backend_model_t *m;
    weight_dtype_t products;    /* the kernel's products: the weights' type (half math) or f32 */
} fixture_t;

/* The fixture open now: with CK_FORK=no a failed assertion leaves the test at once, and a
 * resident kernel left behind would hold its SMs for the tests after (a grid needs them all), so
 * the checked teardown destroys it. */
static fixture_t *s_live;

static inline void s_teardown (void)
{
    s_scale = 1.0f;
    s_slots = 3;
    s_expect_apart = -1;
    s_expect_head_smem = -1;
    s_expect_spec = -1;
    s_cfg_apart = false;
    s_cfg_green = false;
    if (s_live) {
        B->destroy (&s_live->m);
        weights_destroy (&s_live->w);
        weights_destroy (&s_live->wr);
        s_live = NULL;
    }
}

static inline void s_open (fixture_t *f, const lstm_shape_t *shape, weight_dtype_t dtype, uint32_t rows, uint32_t slots,
                    const sig_lstm_tuning_t *tuning)
{
    char path[512], err[512] = "";
    snprintf (path, sizeof path, "%s/lstm-%u-%u-%u.safetensors", s_dir, shape->layers, shape->hidden, shape->window);
    f->w = lstm_random_weights (path, shape, rng_next (&s_seed), &f->cfg, err, sizeof err);
    ck_assert_msg (f->w != NULL, "weights: %s", err);
    f->wr = weights_load (&f->cfg, err, sizeof err);
    ck_assert_msg (f->wr != NULL, "weights: %s", err);
    tol_round_lstm (f->wr->lstm, dtype);
    f->cfg.backend = BACKEND_CUDA;
    f->cfg.weight_dtype = dtype;
    f->cfg.max_rows = rows;
    f->cfg.max_batch_rows = rows;
    f->cfg.max_streams = slots;
    f->cfg.watchdog_ms = 5000;
    f->cfg.advances_apart = s_cfg_apart;
    f->cfg.green_context = s_cfg_green;
    lstm_cuda_tuning (tuning);
    f->m = B->load (f->w, &f->cfg, 0, err, sizeof err);
    lstm_cuda_tuning (NULL);
    s_live = f;
    ck_assert_msg (f->m != NULL, "load: %s", err);
    const sig_lstm_plan_t *p = lstm_cuda_plan (f->m);
    f->products = p->math == SIG_LSTM_MATH_HALF ? dtype : WEIGHT_DTYPE_F32;
    printf ("  %u layers, window %u, %u inputs, %u units, %s (%s products): %s of %u blocks, G %u, %u KiB shared memory "
            "per block, weights %.1f MiB (%.1f MiB on chip), W_ih per block %.0f KiB on chip + %.0f KiB from L2; "
            "head in %s; kernel %s; advances %s%s\n",
            shape->layers, shape->window, shape->step_size, shape->hidden, s_dtype_names[dtype],
            s_dtype_names[f->products],
            p->mode == SIG_LSTM_GRID ? "grid" : "cluster", p->blocks, p->group, p->smem_bytes >> 10,
            p->weight_bytes / 1048576.0, p->smem_weight_bytes / 1048576.0, p->critical_smem_bytes / 1024.0,
            p->critical_global_bytes / 1024.0, p->head_in_smem ? "shared memory" : "the image", B->kernel_name (f->m),
            p->apart ? "apart" : "inline: ",
            p->apart ? "" : p->why);
    fflush (stdout);
    ck_assert_int_eq (lstm_cuda_apart (f->m), p->apart != 0);
    if (s_cfg_green) {   /* the H100 and H200 hosts have green contexts: groups of 8 SMs */
        ck_assert_uint_ge (B->green_sms (f->m), 8);
        ck_assert_uint_ge (B->green_sms (f->m), p->blocks);
        uint32_t groups = 0;
        ck_assert_uint_eq (cuda_green_lent (0, &groups), p->apart ? 2 : 1);
        printf ("  green context of %u SMs (%u groups on the device)\n", B->green_sms (f->m), groups);
    } else {
        ck_assert_uint_eq (B->green_sms (f->m), 0);
    }
    const bool spec = strstr (B->kernel_name (f->m), "-nvrtc") != NULL;
    ck_assert_msg (spec == !(p->sync & SIG_LSTM_SYNC_GENERIC), "kernel %s, plan sync %u", B->kernel_name (f->m), p->sync);
    if (s_expect_spec >= 0)
        ck_assert_msg (spec == (s_expect_spec == 1), "kernel %s, expected the %s one", B->kernel_name (f->m),
                       s_expect_spec ? "specialised" : "generic");
    if (s_expect_head_smem >= 0)
        ck_assert_msg ((p->head_in_smem != 0) == (s_expect_head_smem == 1), "head in %s, expected %s (%u outputs)",
                       p->head_in_smem ? "shared memory" : "the image", s_expect_head_smem ? "shared memory" : "the image",
                       p->out);
    if (s_expect_apart >= 0)
        ck_assert_msg (lstm_cuda_apart (f->m) == (s_expect_apart == 1), "advances %s, expected %s (%s)",
                       lstm_cuda_apart (f->m) ? "apart" : "inline", s_expect_apart ? "apart" : "inline", p->why);
}

static inline void s_close (fixture_t *f)
{
    s_live = NULL;
    B->destroy (&f->m);
    ck_assert_ptr_null (f->m);
    weights_destroy (&f->w);
    weights_destroy (&f->wr);
}

/* The largest error seen, as a fraction of TOL_SAFETY x the bound, per comparison. */
typedef struct {
    double rounded, raw, self;
} worst_t;

static inline void s_worst (double *worst, const float *out, const double *ref, const double *bound, size_t n)
{
    double q;
    tol_outside (out, ref, bound, n, &q);
    *worst = fmax (*worst, q);
}

/* ROUNDS x ROWS full windows: every output within its bound of both references. */
static inline void s_check_windows (fixture_t *f, uint32_t rows, int rounds, const char *label, worst_t *worst)
{
    const lstm_weights_t *l = f->w->lstm;
    const weight_dtype_t d = f->cfg.weight_dtype;
    const size_t nin = (size_t) rows * l->window * l->step_size, nout = (size_t) rows * l->head.out;
    float *x = malloc (nin * sizeof (float)), *y = malloc (nout * sizeof (float));
    double *rr = malloc (nout * sizeof (double)), *br = malloc (nout * sizeof (double));
    double *rw = malloc (nout * sizeof (double)), *bw = malloc (nout * sizeof (double));
    char err[512];
    for (int r = 0; r < rounds; r++) {
        s_fill (x, nin);
        for (size_t i = 0; i < nout; i++)
            y[i] = NAN;
        sig_status_t st = B->infer (f->m, x, rows, y, err, sizeof err);
        ck_assert_msg (st == SIG_OK, "infer: %s", err);
        for (size_t i = 0; i < nout; i++)
            ck_assert_msg (isfinite (y[i]), "window output %zu not written", i);
        ck_assert_int_eq (tol_lstm_window_products (f->wr->lstm, WEIGHT_DTYPE_F32, f->products, x, rows, rr, br), 0);
        ck_assert_int_eq (tol_lstm_window_products (l, d, f->products, x, rows, rw, bw), 0);
        TOL_ASSERT (y, rr, br, nout, l->head.out, "%s %s full windows, round %d (rounded weights)", label,
                    s_dtype_names[d], r);
        TOL_ASSERT (y, rw, bw, nout, l->head.out, "%s %s full windows, round %d (fp32 weights)", label,
                    s_dtype_names[d], r);
        s_worst (&worst->rounded, y, rr, br, nout);
        s_worst (&worst->raw, y, rw, bw, nout);
    }
    free (x);
    free (y);
    free (rr);
    free (br);
    free (rw);
    free (bw);
}

/* STREAMS interleaved streams (slots 0..STREAMS-1 in a shuffled order each round) of STEPS steps;
 * stream 1 reset halfway; every SELF_EVERY-th output (and the last of each stream) within its
 * bound of the rounded weights' reference, and the same kernel's full window over the same steps
 * within it too and within twice it of the streamed output; every REF_EVERY-th (and the last)
 * within its bound of the fp32 weights' reference. */
static inline void s_check_streams (fixture_t *f, uint32_t streams, uint32_t steps, uint32_t self_every, uint32_t ref_every,
                             const char *label, worst_t *worst)
{
    const lstm_weights_t *l = f->w->lstm;
    const weight_dtype_t d = f->cfg.weight_dtype;
    const uint32_t in = l->step_size, W = l->window, out = l->head.out;
    ck_assert (out <= 16);
    float *hist = calloc ((size_t) streams * steps * in, sizeof (float));
    uint32_t *count = calloc (streams, sizeof (uint32_t));
    float *y = malloc (out * sizeof (float)), *yw = malloc (out * sizeof (float));
    float *win = malloc ((size_t) W * in * sizeof (float));
    double rr[16], br[16], rw[16], bw[16], as_ref[16], bound2[16];
    char err[512];
    for (uint32_t s = 0; s < streams; s++)
        B->stream_reset (f->m, s);
    for (uint32_t i = 0; i < steps; i++) {
        const uint32_t rot = (uint32_t) (rng_next (&s_seed) % streams);
        for (uint32_t q = 0; q < streams; q++) {
            const uint32_t s = (q + rot) % streams;
            if (s == 1 && i == steps / 2) {
                B->stream_reset (f->m, s);
                count[s] = 0;
            }
            float *x = hist + ((size_t) s * steps + count[s]) * in;
            s_fill (x, in);
            count[s]++;
            for (uint32_t o = 0; o < out; o++)
                y[o] = NAN;
            sig_status_t st = B->stream_step (f->m, s, x, y, err, sizeof err);
            ck_assert_msg (st == SIG_OK, "stream %u step %u: %s", s, i, err);
            B->stream_advance (f->m, s);
            for (uint32_t o = 0; o < out; o++)
                ck_assert_msg (isfinite (y[o]), "stream %u step %u: output %u not written", s, i, o);
            const bool last = i + 1 == steps, self = i % self_every == 0 || last, raw = i % ref_every == 0 || last;
            if (!self && !raw)
                continue;
            const float *mine = hist + (size_t) s * steps * in;
            ck_assert_int_eq (tol_lstm_stream_products (f->wr->lstm, WEIGHT_DTYPE_F32, f->products, mine, count[s], rr, br),
                              0);
            TOL_ASSERT (y, rr, br, out, out, "%s %s stream %u step %u (rounded weights)", label, s_dtype_names[d], s,
                        i);
            s_worst (&worst->rounded, y, rr, br, out);
            if (self) {
                for (uint32_t t = 0; t < W; t++) {
                    const int64_t k = (int64_t) count[s] - W + t;
                    if (k >= 0)
                        memcpy (win + (size_t) t * in, hist + ((size_t) s * steps + k) * in, in * sizeof (float));
                    else
                        memset (win + (size_t) t * in, 0, in * sizeof (float));
                }
                st = B->infer (f->m, win, 1, yw, err, sizeof err);
                ck_assert_msg (st == SIG_OK, "window: %s", err);
                TOL_ASSERT (yw, rr, br, out, out, "%s %s stream %u step %u: the full window (rounded weights)", label,
                            s_dtype_names[d], s, i);
                tol_pair (y, br, out, as_ref, bound2);
                TOL_ASSERT (yw, as_ref, bound2, out, out, "%s %s stream %u step %u: the full window against the "
                            "streamed output", label, s_dtype_names[d], s, i);
                s_worst (&worst->self, yw, as_ref, bound2, out);
            }
            if (raw) {   /* f32: the rounded weights are the file's */
                const double *ref = rr, *bound = br;
                if (d != WEIGHT_DTYPE_F32) {
                    ck_assert_int_eq (tol_lstm_stream_products (l, d, f->products, mine, count[s], rw, bw), 0);
                    ref = rw;
                    bound = bw;
                }
                TOL_ASSERT (y, ref, bound, out, out, "%s %s stream %u step %u (fp32 weights)", label, s_dtype_names[d],
                            s, i);
                s_worst (&worst->raw, y, ref, bound, out);
            }
        }
    }
    free (hist);
    free (count);
    free (y);
    free (yw);
    free (win);
}

static inline void s_check_model (const lstm_shape_t *shape, weight_dtype_t d, const sig_lstm_tuning_t *tuning,
                           uint32_t streams, uint32_t steps, uint32_t self_every, uint32_t ref_every, int window_rounds,
                           const char *label)
{
    static fixture_t f;   /* static: the teardown may see it after a failed assertion left the frame */
    const double t0 = (clock_now_us () / 1e6);
    s_open (&f, shape, d, 2, s_slots, tuning);
    worst_t w = { 0, 0, 0 };
    s_check_windows (&f, shape->layers <= 3 ? 2 : 1, window_rounds, label, &w);
    printf ("  %s %s full windows: largest error %.3g (rounded weights), %.3g (fp32 weights) of the bound x %g\n",
            label, s_dtype_names[d], w.rounded, w.raw, TOL_SAFETY);
    w = (worst_t) { 0, 0, 0 };
    s_check_streams (&f, streams, steps, self_every, ref_every, label, &w);
    printf ("  %s %s streams: largest error %.3g (rounded weights), %.3g (fp32 weights), %.3g (against its own full "
            "windows) of the bound x %g [%.1f s]\n", label, s_dtype_names[d], w.rounded, w.raw, w.self, TOL_SAFETY,
            (clock_now_us () / 1e6) - t0);
    fflush (stdout);
    s_close (&f);
}

/* ---- the main ---- */

/* Is there a device of compute capability 9.0? Asked in a child (tu_in_child): the parent must not
 * start CUDA before Check forks. */
static inline int s_device_90 (char *reason, size_t cap)
{
    int count = 0, ok = 0;
    char why[300] = "";
    if (cuda_device_count (&count, why, sizeof why) != 0)
        snprintf (reason, cap, "no CUDA device: %s", why);
    else {
        struct cudaDeviceProp p;
        cudaGetDeviceProperties (&p, 0);
        ok = p.major == 9 && p.minor == 0;
        if (!ok)
            snprintf (reason, cap, "device 0 (%s) has compute capability %d.%d; the LSTM kernel needs 9.0", p.name,
                      p.major, p.minor);
        else
            snprintf (reason, cap, "%s, %d SMs", p.name, p.multiProcessorCount);
    }
    return ok ? 0 : -1;
}

static inline bool s_device_present (char *why, size_t len)
{
    return tu_in_child (s_device_90, why, len);
}

/* Whether the suite runs: SKIP (and false) without a 9.0 device; else the device and the seed,
 * printed, and the suite's folder made. Every kernel is loaded when CUDA starts, as sigserve must: a
 * lazy load next to a resident kernel waits forever. */
static inline bool s_lstm_cuda_start (void)
{
    setenv ("CUDA_MODULE_LOADING", "EAGER", 0);
    char why[400];
    if (!s_device_present (why, sizeof why)) {
        printf ("SKIP: %s\n", why);
        return false;
    }
    printf ("device: %s\n", why);
    s_seed = (uint64_t) time (NULL) * 0x9e3779b97f4a7c15ull;
    printf ("seed %llu\n", (unsigned long long) s_seed);
    s_dir = tu_tmpdir ();
    return true;
}

/* A TCase of NAME whose every test ends with the fixture's teardown. */
static inline TCase *s_lstm_cuda_tcase (const char *name)
{
    TCase *tc = tcase_create (name);
    tcase_set_timeout (tc, 900);
    tcase_add_checked_fixture (tc, NULL, s_teardown);
    return tc;
}

/* Runs S, then removes the suite's folder; the process's exit code. */
static inline int s_lstm_cuda_run (Suite *s)
{
    int rc = tu_run_suite (s);
    tu_remove_tree (s_dir);
    free (s_dir);
    return rc;
}

#endif
