/* GPU suite of the CUDA LSTM backend (backend_lstm_cuda.c, kernels/lstm_persistent.cu): the issue's
 * three sizes in every weight type, full windows and interleaved streams longer than the window,
 * against the float64 reference; forced cluster sizes, grid mode and weights read from device
 * memory; stream slots kept apart; refusals; the watchdog and stop; the advances on other SMs (plan 4,
 * SIG_LSTM_SYNC_ADVANCE_APART: many streams, and the order a held advancer leaves). Prints "SKIP: <why>" and passes
 * where there is no CUDA build, no device, or a device other than compute capability 9.0.
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
 * (tol_lstm_*_products); the widening math (SIG_LSTM_MATH_WIDE) keeps the float32 products' bounds. */
#include "backends/backend_lstm.h"
#include "clock.h"
#include "lstm_reference.h"
#include "rng.h"
#include "testutil.h"
#include "tolerance.h"
#include "weights/weights.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/backend_lstm_cuda.h"
#include "backends/cuda/device.h"
#include "backends/cuda/green.h"
#include "reference.h"

#include <cuda_runtime_api.h>

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

static void s_fill (float *x, size_t n)
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

static void s_teardown (void)
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

static void s_open (fixture_t *f, const lstm_shape_t *shape, weight_dtype_t dtype, uint32_t rows, uint32_t slots,
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

static void s_close (fixture_t *f)
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

static void s_worst (double *worst, const float *out, const double *ref, const double *bound, size_t n)
{
    double q;
    tol_outside (out, ref, bound, n, &q);
    *worst = fmax (*worst, q);
}

/* ROUNDS x ROWS full windows: every output within its bound of both references. */
static void s_check_windows (fixture_t *f, uint32_t rows, int rounds, const char *label, worst_t *worst)
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
static void s_check_streams (fixture_t *f, uint32_t streams, uint32_t steps, uint32_t self_every, uint32_t ref_every,
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

static void s_check_model (const lstm_shape_t *shape, weight_dtype_t d, const sig_lstm_tuning_t *tuning,
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

/* _i: size * 3 + dtype. Streams: W + 3 steps each (the rings wrap). */
START_TEST (sizes_and_weight_types)
{
    const lstm_shape_t *shapes[3] = { &LSTM_SHAPE_SMALL, &LSTM_SHAPE_MEDIUM, &LSTM_SHAPE_LARGE };
    static const char *names[3] = { "small", "medium", "large" };
    const lstm_shape_t *s = shapes[_i / 3];
    const weight_dtype_t d = (weight_dtype_t) (_i % 3);
    /* large: the float64 bound of one step costs ~1.5 s there: a few points a stream (the last, past the
     * ring's wrap, always) keep the suite within its time */
    const uint32_t self_every[3] = { 1, 2, 64 }, ref_every[3] = { 2, 12, 1000 };
    s_check_model (s, d, NULL, _i / 3 == 2 ? 2 : 3, s->window + 3, self_every[_i / 3], ref_every[_i / 3], _i / 3 == 2 ? 1 : 2, names[_i / 3]);
}
END_TEST

/* The same kernel in every shape of its launch: clusters of 1, 2, 4, 8 and 16, a grid, and weights
 * read from device memory (a shared-memory cap a little above the buffers: most of every matrix
 * from L2). Small irregular models; a window of 1 (advances of zero steps). */
START_TEST (launch_shapes)
{
    const lstm_shape_t odd = { .layers = 3, .step_size = 37, .hidden = 45, .out = 3, .window = 9,
                               .head_act = ACTIVATION_TANH };
    const lstm_shape_t one = { .layers = 1, .step_size = 5, .hidden = 20, .out = 1, .window = 1 };
    const struct { sig_lstm_tuning_t t; const char *label; } cases[] = {
        { { .blocks = 1 }, "cluster 1" },  { { .blocks = 2 }, "cluster 2" },  { { .blocks = 4 }, "cluster 4" },
        { { .blocks = 8 }, "cluster 8" },  { { .blocks = 16 }, "cluster 16" }, { { .blocks = 6, .grid = 1 }, "grid 6" },
        { { .blocks = 1, .smem_cap = 40960 }, "cluster 1, 40 KiB" },
        { { .blocks = 4, .smem_cap = 49152 }, "cluster 4, 48 KiB" },
        { { .blocks = 5, .grid = 1, .smem_cap = 40960 }, "grid 5, 40 KiB" },
        /* both kinds of products of f16 / bf16 weights, whichever is the default (plan 3) */
        { { .blocks = 1, .math = SIG_LSTM_MATH_WIDE }, "cluster 1, wide math" },
        { { .blocks = 4, .math = SIG_LSTM_MATH_WIDE }, "cluster 4, wide math" },
        { { .blocks = 6, .grid = 1, .math = SIG_LSTM_MATH_WIDE }, "grid 6, wide math" },
        { { .blocks = 1, .math = SIG_LSTM_MATH_HALF }, "cluster 1, half math" },
        { { .blocks = 5, .grid = 1, .smem_cap = 40960, .math = SIG_LSTM_MATH_HALF }, "grid 5, 40 KiB, half math" },
        /* the synchronisation before plans 1 and 2, kept to compare (lstmbench --sync) */
        { { .blocks = 4, .sync = SIG_LSTM_SYNC_POLL_ROUNDS | SIG_LSTM_SYNC_XCHG_ROUNDS }, "cluster 4, old sync" },
        { { .blocks = 6, .grid = 1, .sync = SIG_LSTM_SYNC_POLL_ROUNDS | SIG_LSTM_SYNC_XCHG_ROUNDS }, "grid 6, old sync" },
        /* a step's features broadcast after block 0 read them all, as before they were forwarded as
         * read (lstmbench --sync 16; the forwarding is the default, every other case of several blocks
         * checks it) */
        { { .blocks = 4, .sync = SIG_LSTM_SYNC_BCAST_AFTER }, "cluster 4, broadcast after the read" },
        { { .blocks = 6, .grid = 1, .sync = SIG_LSTM_SYNC_BCAST_AFTER }, "grid 6, broadcast after the read" },
        /* the advances in a second launch (plan 4, lstmbench --sync 8); W = 1: advances of zero steps */
        { { .blocks = 1, .sync = SIG_LSTM_SYNC_ADVANCE_APART }, "cluster 1, advances apart" },
        { { .blocks = 4, .sync = SIG_LSTM_SYNC_ADVANCE_APART }, "cluster 4, advances apart" },
        { { .blocks = 4, .sync = SIG_LSTM_SYNC_ADVANCE_APART, .math = SIG_LSTM_MATH_HALF }, "cluster 4, advances apart, "
          "half math" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 3; d++) {
            s_check_model (&odd, (weight_dtype_t) d, &cases[i].t, 3, 14, 1, 1, 2, cases[i].label);
            if (d == 0)
                s_check_model (&one, (weight_dtype_t) d, &cases[i].t, 3, 4, 1, 1, 2, cases[i].label);
        }
}
END_TEST

/* The half products (SIG_LSTM_MATH_HALF, a variant: the widening math is the default) at the issue's
 * three sizes in f16 and bf16, within their bound: full windows, and streams past the ring's wrap.
 * _i: size * 2 + (dtype - 1). */
START_TEST (half_products_every_size)
{
    const lstm_shape_t *shapes[3] = { &LSTM_SHAPE_SMALL, &LSTM_SHAPE_MEDIUM, &LSTM_SHAPE_LARGE };
    static const char *names[3] = { "small, half math", "medium, half math", "large, half math" };
    const lstm_shape_t *s = shapes[_i / 2];
    const weight_dtype_t d = (weight_dtype_t) (1 + _i % 2);
    const sig_lstm_tuning_t t = { .math = SIG_LSTM_MATH_HALF };
    const uint32_t self_every[3] = { 4, 8, 64 }, ref_every[3] = { 8, 24, 1000 };
    s_check_model (s, d, &t, 2, s->window + 3, self_every[_i / 2], ref_every[_i / 2], 1, names[_i / 2]);
}
END_TEST

/* f16 products take features up to the plan's half_x_max (2^12 / max |W_ih of layer 0|): features
 * of 10^5 (past f16's range: in half products, inf - inf) make the host send their products in the
 * widening math (SIG_LSTM_WIDE_INPUTS), the h products staying in half. Every output finite and within
 * the half products' bound (which holds for the widened ones too), windows and streams; then inputs
 * in range again on the same kernel. */
START_TEST (f16_features_past_half_range)
{
    const lstm_shape_t odd = { .layers = 2, .step_size = 37, .hidden = 45, .out = 3, .window = 9,
                               .head_act = ACTIVATION_TANH };
    const sig_lstm_tuning_t t[] = { { .blocks = 1, .math = SIG_LSTM_MATH_HALF },
                                    { .blocks = 6, .grid = 1, .math = SIG_LSTM_MATH_HALF } };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        s_scale = 1e5f;
        s_check_model (&odd, WEIGHT_DTYPE_F16, &t[i], 2, 12, 1, 1, 2, i ? "grid 6, features 1e5" : "cluster 1, features 1e5");
        s_scale = 1.0f;
        s_check_model (&odd, WEIGHT_DTYPE_F16, &t[i], 2, 12, 1, 1, 2, i ? "grid 6, features 1" : "cluster 1, features 1");
    }
}
END_TEST

/* Heads of several outputs with an activation, on one block, a cluster of 4 and a grid of 6 (block 0
 * computes the head from the gathered h, the other blocks none), f32 and f16; a model of one layer;
 * and a head too wide for shared memory (4 x 2056 weights, past L_HEAD_SMEM_MAX), which block 0
 * reads from the image: the only case of that path. Windows and streams within their bounds. */
START_TEST (head_shapes)
{
    const lstm_shape_t five = { .layers = 2, .step_size = 19, .hidden = 45, .out = 5, .window = 6,
                                .head_act = ACTIVATION_SIGMOID };
    const lstm_shape_t one = { .layers = 1, .step_size = 7, .hidden = 33, .out = 2, .window = 3,
                               .head_act = ACTIVATION_TANH };
    const lstm_shape_t wide = { .layers = 1, .step_size = 3, .hidden = 2056, .out = 4, .window = 2 };
    const struct { sig_lstm_tuning_t t; const char *label; } cases[] = {
        { { .blocks = 1 }, "cluster 1" },
        { { .blocks = 4 }, "cluster 4" },
        { { .blocks = 6, .grid = 1 }, "grid 6" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 2; d++) {
            s_check_model (&five, (weight_dtype_t) d, &cases[i].t, 3, 10, 1, 1, 2, cases[i].label);
            s_check_model (&one, (weight_dtype_t) d, &cases[i].t, 2, 6, 1, 1, 2, cases[i].label);
        }
    s_expect_head_smem = 0;
    s_check_model (&wide, WEIGHT_DTYPE_F16, &cases[2].t, 2, 4, 1, 1, 1, "grid 6, the head from the image");
    s_expect_head_smem = -1;
}
END_TEST

/* The generic kernel (SIG_LSTM_SYNC_GENERIC: the specialised one is the default, every other case runs
 * it) in the launch shapes: one block, clusters of 4 and 8, a grid of 6, weights read from L2 (a
 * shared-memory cap), both kinds of products, an odd three-layer model and a one-layer one in every
 * weight type, then the small and medium sizes in f16: every output within its bound. The
 * model says which kernel runs (list_models). */
START_TEST (generic_every_shape)
{
    const lstm_shape_t odd = { .layers = 3, .step_size = 37, .hidden = 45, .out = 3, .window = 9,
                               .head_act = ACTIVATION_TANH };
    const lstm_shape_t one = { .layers = 1, .step_size = 5, .hidden = 20, .out = 1, .window = 1 };
    const uint32_t S = SIG_LSTM_SYNC_GENERIC;
    const struct { sig_lstm_tuning_t t; const char *label; } cases[] = {
        { { .blocks = 1, .sync = S }, "cluster 1, generic" },
        { { .blocks = 4, .sync = S }, "cluster 4, generic" },
        { { .blocks = 8, .sync = S }, "cluster 8, generic" },
        { { .blocks = 6, .grid = 1, .sync = S }, "grid 6, generic" },
        { { .blocks = 4, .smem_cap = 49152, .sync = S }, "cluster 4, 48 KiB, generic" },
        { { .blocks = 1, .math = SIG_LSTM_MATH_HALF, .sync = S }, "cluster 1, half math, generic" },
        { { .blocks = 6, .grid = 1, .math = SIG_LSTM_MATH_HALF, .sync = S }, "grid 6, half math, generic" },
    };
    s_expect_spec = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 3; d++) {
            s_check_model (&odd, (weight_dtype_t) d, &cases[i].t, 3, 14, 1, 1, 2, cases[i].label);
            if (d == 0)
                s_check_model (&one, (weight_dtype_t) d, &cases[i].t, 3, 4, 1, 1, 2, cases[i].label);
        }
    const sig_lstm_tuning_t t = { .sync = S };
    s_check_model (&LSTM_SHAPE_SMALL, WEIGHT_DTYPE_F16, &t, 3, LSTM_SHAPE_SMALL.window + 3, 1, 2, 1, "small, generic");
    s_check_model (&LSTM_SHAPE_MEDIUM, WEIGHT_DTYPE_F16, &t, 2, LSTM_SHAPE_MEDIUM.window + 3, 4, 24, 1,
                   "medium, generic");
    s_expect_spec = -1;
}
END_TEST

/* The small size under every cluster size the plan could choose, and a grid: the timings differ,
 * the numbers must not. */
START_TEST (small_every_cluster)
{
    const sig_lstm_tuning_t t[] = { { .blocks = 1 }, { .blocks = 2 }, { .blocks = 4 }, { .blocks = 8 }, { .blocks = 16, .grid = 1 } };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        s_check_model (&LSTM_SHAPE_SMALL, WEIGHT_DTYPE_F16, &t[i], 3, 70, 3, 10, 1, "small, forced");
}
END_TEST

/* Slots are separate: a step on one slot (with its advance owed, not posted) never moves another
 * slot's output; a step whose advance is owed runs it first. */
START_TEST (slots_isolated)
{
    static fixture_t f;   /* static: the teardown may see it after a failed assertion left the frame */
    const lstm_shape_t s = { .layers = 2, .step_size = 16, .hidden = 24, .out = 1, .window = 4 };
    s_open (&f, &s, WEIGHT_DTYPE_F32, 1, 4, NULL);
    ck_assert (!lstm_cuda_apart (f.m));   /* the default: the advances in the serving kernel */
    float x[5][16], y0 = NAN, y1 = NAN, yagain = NAN;
    double r, b;
    char err[512];
    for (int i = 0; i < 5; i++)
        s_fill (x[i], 16);
    B->stream_reset (f.m, 2);
    B->stream_reset (f.m, 3);
    ck_assert_int_eq (B->stream_step (f.m, 2, x[0], &y0, err, sizeof err), SIG_OK);
    /* slot 3 gets other steps meanwhile, advances owed and never posted by the caller */
    for (int i = 1; i < 5; i++)
        ck_assert_int_eq (B->stream_step (f.m, 3, x[i], &y1, err, sizeof err), SIG_OK);
    ck_assert_int_eq (tol_lstm_stream (f.wr->lstm, WEIGHT_DTYPE_F32, x[1], 4, &r, &b), 0);
    TOL_ASSERT (&y1, &r, &b, 1, 1, "slot 3 after 4 steps");
    /* slot 2 resumes: its window is x[0], x[1] */
    ck_assert_int_eq (B->stream_step (f.m, 2, x[1], &yagain, err, sizeof err), SIG_OK);
    float pair[2][16];
    memcpy (pair[0], x[0], sizeof pair[0]);
    memcpy (pair[1], x[1], sizeof pair[1]);
    ck_assert_int_eq (tol_lstm_stream (f.wr->lstm, WEIGHT_DTYPE_F32, pair[0], 2, &r, &b), 0);
    TOL_ASSERT (&yagain, &r, &b, 1, 1, "slot 2");
    /* a slot past the table: an error, not a crash */
    ck_assert_int_eq (B->stream_step (f.m, 4, x[0], &y0, err, sizeof err), SIG_INTERNAL);
    ck_assert_msg (strstr (err, "slot 4") != NULL, "%s", err);
    ck_assert_str_eq (B->kernel_name (f.m), "lstm-persistent-nvrtc");   /* specialised: the default */
    s_close (&f);
}
END_TEST

START_TEST (refusals)
{
    char err[512] = "", path[512];
    model_config_t cfg;
    /* 60,000 inputs a step: its buffers alone pass a block's shared memory */
    const lstm_shape_t wide = { .layers = 1, .step_size = 60000, .hidden = 1, .out = 1, .window = 2 };
    snprintf (path, sizeof path, "%s/wide.safetensors", s_dir);
    weights_t *w = lstm_random_weights (path, &wide, 1, &cfg, err, sizeof err);
    ck_assert_msg (w != NULL, "%s", err);
    cfg.backend = BACKEND_CUDA;
    ck_assert_ptr_null (B->load (w, &cfg, 0, err, sizeof err));
    printf ("  refused: %s\n", err);
    ck_assert_msg (strstr (err, "cannot serve") != NULL && strstr (err, "shared memory") != NULL, "%s", err);
    /* no such device */
    const lstm_shape_t s = { .layers = 1, .step_size = 2, .hidden = 3, .out = 1, .window = 2 };
    weights_t *w2 = lstm_random_weights (path, &s, 2, &cfg, err, sizeof err);
    ck_assert_ptr_null (B->load (w2, &cfg, 99, err, sizeof err));
    ck_assert_msg (strstr (err, "device 99") != NULL, "%s", err);
    /* MLP weights */
    weights_t *mlp = weights_alloc (1);
    mlp->layers[0] = (dense_layer_t) { .in = 3, .out = 2 };
    weights_finish (mlp);
    ck_assert_ptr_null (B->load (mlp, &cfg, 0, err, sizeof err));
    ck_assert_msg (strstr (err, "LSTM weights") != NULL, "%s", err);
    weights_destroy (&w);
    weights_destroy (&w2);
    weights_destroy (&mlp);
}
END_TEST

/* A kernel that stops answering: the step comes back UNAVAILABLE after the watchdog, every later
 * call at once; destroy stops the kernel and returns; a new load works (stop and start). */
START_TEST (watchdog_and_stop)
{
    static fixture_t f;   /* static: the teardown may see it after a failed assertion left the frame */
    s_open (&f, &LSTM_SHAPE_SMALL, WEIGHT_DTYPE_F16, 1, 2, NULL);
    char err[512];
    float x[128], y;
    s_fill (x, 128);
    B->stream_reset (f.m, 0);
    ck_assert_int_eq (B->stream_step (f.m, 0, x, &y, err, sizeof err), SIG_OK);
    /* the fixture's watchdog is 5 s; this model's 50 ms */
    B->destroy (&f.m);
    f.cfg.watchdog_ms = 50;
    f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
    s_live = &f;
    ck_assert_msg (f.m != NULL, "%s", err);
    ck_assert_int_eq (lstm_cuda_stall (f.m), 0);
    const double t0 = (clock_now_us () / 1e6);
    ck_assert_int_eq (B->stream_step (f.m, 0, x, &y, err, sizeof err), SIG_UNAVAILABLE);
    const double waited = (clock_now_us () / 1e6) - t0;
    printf ("  watchdog: %s (after %.1f ms)\n", err, waited * 1e3);
    ck_assert_msg (strstr (err, "watchdog") != NULL, "%s", err);
    /* At least the watchdog; the cap only tells a watchdog that never fires from one that does. */
    ck_assert_msg (waited >= 0.045 && waited < 10.0, "fired after %.3f s", waited);
    ck_assert (lstm_cuda_lost (f.m));
    ck_assert_int_eq (B->infer (f.m, x, 1, &y, err, sizeof err), SIG_UNAVAILABLE);
    const double t1 = (clock_now_us () / 1e6);
    B->destroy (&f.m);
    printf ("  destroy of the stalled kernel: %.1f ms\n", ((clock_now_us () / 1e6) - t1) * 1e3);
    ck_assert_ptr_null (f.m);
    /* start again, many times: mailboxes are reused, nothing leaks into the next */
    for (int i = 0; i < 3; i++) {
        f.cfg.watchdog_ms = 1000;
        f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
        ck_assert_msg (f.m != NULL, "%s", err);
        ck_assert_int_eq (B->stream_step (f.m, 1, x, &y, err, sizeof err), SIG_OK);
        B->destroy (&f.m);
    }
    s_live = NULL;
    weights_destroy (&f.w);
    weights_destroy (&f.wr);
}
END_TEST

/* A resident LSTM kernel counts on its device like the MLP's (device.h): next to it a cuBLAS model
 * is refused (cuBLAS would wait for the kernel forever) and the pinned memory of a model destroyed
 * next to it is released later rather than waited for; once it stops, both work again. Before the
 * device level, the LSTM backend never registered its kernel: this hung or was not refused. */
START_TEST (resident_like_every_persistent_kernel)
{
    static fixture_t f;
    char err[512] = "";
    ck_assert_int_eq (cuda_device_resident (0), 0);
    const size_t deferred0 = cuda_device_deferred ();
    s_open (&f, &LSTM_SHAPE_SMALL, WEIGHT_DTYPE_F16, 1, 2, NULL);
    ck_assert_int_eq (cuda_device_resident (0), 1 + (int) lstm_cuda_apart (f.m));   /* apart: the advancer too */
    const uint32_t sizes[3] = { 37, 19, 3 };
    const activation_t acts[2] = { ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *mlp = weights_random (sizes, acts, 2, rng_next (&s_seed));
    model_config_t mcfg;
    memset (&mcfg, 0, sizeof mcfg);
    snprintf (mcfg.name, sizeof mcfg.name, "beside-the-lstm");
    mcfg.backend = BACKEND_CUDA;
    mcfg.kernel = CUDA_KERNEL_WARP;
    mcfg.graph = true;
    mcfg.max_rows = 2;
    backend_model_t *g = backend_cuda_iface.load (mlp, &mcfg, 0, err, sizeof err);
    ck_assert_msg (g != NULL, "warp model next to the LSTM kernel: %s", err);
    float x[2 * 37], y[2 * 3];
    s_fill (x, 2 * 37);
    ck_assert_int_eq (backend_cuda_iface.infer (g, x, 2, y, err, sizeof err), SIG_OK);
    backend_cuda_iface.destroy (&g);
    /* its pinned buffers and graph executables: released later, none waited for */
    ck_assert_uint_gt (cuda_device_deferred (), deferred0 + 1);
    mcfg.kernel = CUDA_KERNEL_CUBLAS;
    ck_assert_ptr_null (backend_cuda_iface.load (mlp, &mcfg, 0, err, sizeof err));
    ck_assert_msg (strstr (err, "kernel \"cublas\" cannot be loaded while a persistent kernel is resident on device 0")
                   != NULL, "%s", err);
    /* the LSTM still answers */
    float step[128], out;
    s_fill (step, 128);
    ck_assert_int_eq (B->stream_step (f.m, 0, step, &out, err, sizeof err), SIG_OK);
    s_close (&f);
    ck_assert_int_eq (cuda_device_resident (0), 0);
    ck_assert_uint_eq (cuda_device_deferred (), deferred0);       /* released once it stopped */
    g = backend_cuda_iface.load (mlp, &mcfg, 0, err, sizeof err);
    ck_assert_msg (g != NULL, "cublas once no kernel is resident: %s", err);
    backend_cuda_iface.destroy (&g);
    weights_destroy (&mlp);
}
END_TEST

/* Plan 4 (SIG_LSTM_SYNC_ADVANCE_APART): many streams interleaved (each step followed by its advance,
 * the advancer on other SMs), the small and medium sizes in every weight type (the plan's launch
 * size), and odd shapes at cluster 1, 4 and 16; within the bounds as every streamed output. _i: 0-5
 * size * 3 + dtype, 6-14 the odd shape at cluster (1, 4, 16)[(_i - 6) / 3] in dtype (_i - 6) % 3.
 * Case 0 asks through the model key advances_apart (as sigserve's config does), the others through
 * the tuning. */
START_TEST (advances_apart_many_streams)
{
    const lstm_shape_t odd = { .layers = 3, .step_size = 37, .hidden = 45, .out = 3, .window = 7,
                               .head_act = ACTIVATION_TANH };
    static const char *names[2] = { "small, 6 streams apart", "medium, 6 streams apart" };
    static const char *odd_names[3] = { "cluster 1, 6 streams apart", "cluster 4, 6 streams apart",
                                        "cluster 16, 6 streams apart" };
    s_slots = 6;
    s_expect_apart = 1;
    if (_i < 6) {
        const lstm_shape_t *s = _i < 3 ? &LSTM_SHAPE_SMALL : &LSTM_SHAPE_MEDIUM;
        const uint32_t self_every = _i < 3 ? 8 : 24, ref_every = _i < 3 ? 8 : 48;
        const sig_lstm_tuning_t t = { .sync = _i == 0 ? 0u : (uint32_t) SIG_LSTM_SYNC_ADVANCE_APART };
        s_cfg_apart = _i == 0;
        s_check_model (s, (weight_dtype_t) (_i % 3), &t, 6, s->window + 2, self_every, ref_every, 1,
                       _i == 0 ? "small, 6 streams apart (the model key)" : names[_i / 3]);
    } else {
        const uint32_t blocks[3] = { 1, 4, 16 };
        const sig_lstm_tuning_t t = { .blocks = blocks[(_i - 6) / 3], .sync = SIG_LSTM_SYNC_ADVANCE_APART };
        s_check_model (&odd, (weight_dtype_t) ((_i - 6) % 3), &t, 6, 2 * odd.window + 3, 1, 1, 1, odd_names[(_i - 6) / 3]);
    }
}
END_TEST

/* Model key green_context: the small and medium sizes (clusters of 1 and 8) in f16, medium with its
 * advances apart (two kernels, two groups), each within the bounds as every streamed output, the
 * groups given back at destroy; large (a grid over every SM) and a cluster of 16 are refused,
 * naming why. _i: 0 small, 1 medium, 2 medium apart, 3 large, 4 cluster 16. */
START_TEST (green_context_sizes)
{
    const lstm_shape_t odd = { .layers = 3, .step_size = 37, .hidden = 45, .out = 3, .window = 7,
                               .head_act = ACTIVATION_TANH };
    s_cfg_green = true;
    if (_i < 3) {
        const lstm_shape_t *s = _i == 0 ? &LSTM_SHAPE_SMALL : &LSTM_SHAPE_MEDIUM;
        s_expect_apart = _i == 2;
        s_cfg_apart = _i == 2;
        s_check_model (s, WEIGHT_DTYPE_F16, NULL, 3, s->window + 3, _i == 0 ? 1 : 2, _i == 0 ? 2 : 12, 2,
                       _i == 0 ? "small, green" : _i == 1 ? "medium, green" : "medium, green, advances apart");
        ck_assert_uint_eq (cuda_green_lent (0, NULL), 0);   /* given back */
        return;
    }
    char path[512], err[1024] = "";
    const lstm_shape_t *s = _i == 3 ? &LSTM_SHAPE_LARGE : &odd;
    snprintf (path, sizeof path, "%s/lstm-green-%d.safetensors", s_dir, _i);
    model_config_t cfg;
    weights_t *w = lstm_random_weights (path, s, rng_next (&s_seed), &cfg, err, sizeof err);
    ck_assert_msg (w != NULL, "weights: %s", err);
    cfg.backend = BACKEND_CUDA;
    cfg.weight_dtype = WEIGHT_DTYPE_F16;
    cfg.max_rows = cfg.max_batch_rows = 1;
    cfg.max_streams = 2;
    cfg.green_context = true;
    const sig_lstm_tuning_t t16 = { .blocks = 16 };
    lstm_cuda_tuning (_i == 4 ? &t16 : NULL);
    backend_model_t *m = B->load (w, &cfg, 0, err, sizeof err);
    lstm_cuda_tuning (NULL);
    ck_assert_msg (m == NULL, "loaded, expected a refusal");
    if (_i == 3)
        ck_assert_msg (strstr (err, "\": green_context: its LSTM kernel runs as a grid of ") != NULL
                           && strstr (err, "blocks, one on every SM of device 0 (its weights fit no cluster), and a green "
                                           "context holds a few SMs; drop green_context for this model") != NULL, "%s", err);
    else
        ck_assert_msg (strstr (err, "\": green_context: its kernel runs 16 blocks in clusters of 16 and a green context "
                                    "of device 0 holds 8 SMs (one block an SM, the driver's smallest partition)") != NULL,
                       "%s", err);
    ck_assert_uint_eq (cuda_green_lent (0, NULL), 0);   /* nothing held by a refused load */
    weights_destroy (&w);
}
END_TEST

typedef struct {
    backend_model_t *m;
    uint32_t slot;
    const float *x;
    float *y;
    sig_status_t st;
    int done;
    char err[512];
} step_arg_t;

static void *s_step_thread (void *arg)
{
    step_arg_t *a = arg;
    a->st = B->stream_step (a->m, a->slot, a->x, a->y, a->err, sizeof a->err);
    __atomic_store_n (&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* STEPS steps X of one stream: Y within the bound of the rounded weights' reference. */
static void s_check_stream_out (fixture_t *f, const float *x, uint32_t steps, const float *y, const char *what)
{
    const uint32_t out = f->w->lstm->head.out;
    double r[4], b[4];
    ck_assert (out <= 4);
    ck_assert_int_eq (tol_lstm_stream_products (f->wr->lstm, WEIGHT_DTYPE_F32, f->products, x, steps, r, b), 0);
    TOL_ASSERT (y, r, b, out, out, "%s (%s)", what, s_dtype_names[f->cfg.weight_dtype]);
}

/* Head-of-line, by order and counts (no clock): with the advancer held (lstm_cuda_hold), stream A's
 * advance stays pending while stream B's step is answered, and correct; A's next step, posted while
 * its advance is held, is not answered before the hold is lifted, then is correct. _i: the dtype.
 * Then (f32): an advancer held for good makes the step waiting for it UNAVAILABLE after the
 * watchdog; destroy stops both kernels (none left resident) and a new load works. */
START_TEST (advances_apart_head_of_line)
{
    static fixture_t f;   /* static: the teardown may see it after a failed assertion left the frame */
    const lstm_shape_t s = { .layers = 2, .step_size = 37, .hidden = 45, .out = 3, .window = 5,
                             .head_act = ACTIVATION_TANH };
    const sig_lstm_tuning_t apart = { .sync = SIG_LSTM_SYNC_ADVANCE_APART };
    s_expect_apart = 1;
    s_open (&f, &s, (weight_dtype_t) _i, 1, 3, &apart);
    float xa[3][37], xb[2][37], ya[3], yb[3];
    char err[512];
    s_fill (&xa[0][0], 3 * 37);
    s_fill (&xb[0][0], 2 * 37);
    B->stream_reset (f.m, 0);
    B->stream_reset (f.m, 1);
    ck_assert_int_eq (B->stream_step (f.m, 0, xa[0], ya, err, sizeof err), SIG_OK);
    B->stream_advance (f.m, 0);
    ck_assert_int_eq (B->stream_step (f.m, 1, xb[0], yb, err, sizeof err), SIG_OK);
    B->stream_advance (f.m, 1);
    ck_assert_int_eq (lstm_cuda_sync (f.m, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 0);
    /* hold the advancer; A steps, and its advance goes in behind the hold */
    ck_assert_int_eq (lstm_cuda_hold (f.m, true), 0);
    ck_assert_int_eq (B->stream_step (f.m, 0, xa[1], ya, err, sizeof err), SIG_OK);
    s_check_stream_out (&f, &xa[0][0], 2, ya, "A's second step, its advance done before the hold");
    B->stream_advance (f.m, 0);
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 2);   /* the hold, A's advance */
    /* B's step is answered, and right, while A's advance has not run */
    for (int o = 0; o < 3; o++)
        yb[o] = NAN;
    ck_assert_int_eq (B->stream_step (f.m, 1, xb[1], yb, err, sizeof err), SIG_OK);
    s_check_stream_out (&f, &xb[0][0], 2, yb, "B's step while A's advance is held");
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 2);
    /* A's next step waits for its advance: not answered while the hold is up */
    step_arg_t a = { .m = f.m, .slot = 0, .x = xa[2], .y = ya };
    for (int o = 0; o < 3; o++)
        ya[o] = NAN;
    pthread_t th;
    const uint64_t posted = lstm_cuda_commands_posted (f.m);
    ck_assert_int_eq (pthread_create (&th, NULL, s_step_thread, &a), 0);
    /* until its step is posted (at most 10 s): from then on it can only be waiting for the advance */
    for (int waited = 0; lstm_cuda_commands_posted (f.m) == posted && waited < 10000; waited++)
        usleep (1000);
    ck_assert_uint_gt (lstm_cuda_commands_posted (f.m), posted);
    ck_assert_int_eq (__atomic_load_n (&a.done, __ATOMIC_ACQUIRE), 0);
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 2);
    ck_assert_int_eq (lstm_cuda_hold (f.m, false), 0);
    pthread_join (th, NULL);
    ck_assert_msg (a.st == SIG_OK, "A's step after the hold: %s", a.err);
    s_check_stream_out (&f, &xa[0][0], 3, ya, "A's step posted while its advance was held");
    ck_assert_int_eq (lstm_cuda_sync (f.m, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 0);
    /* B goes on after all that: its third step over B's two and this one */
    float xb3[3][37];
    memcpy (xb3, xb, sizeof xb);
    s_fill (xb3[2], 37);
    ck_assert_int_eq (B->stream_step (f.m, 1, xb3[2], yb, err, sizeof err), SIG_OK);
    s_check_stream_out (&f, &xb3[0][0], 3, yb, "B's third step");
    s_close (&f);
    if (_i != 0)
        return;
    /* an advancer that never resumes: the watchdog, then stop */
    s_open (&f, &s, WEIGHT_DTYPE_F32, 1, 3, &apart);
    B->destroy (&f.m);
    f.cfg.watchdog_ms = 100;
    lstm_cuda_tuning (&apart);
    f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
    lstm_cuda_tuning (NULL);
    ck_assert_msg (f.m != NULL, "%s", err);
    ck_assert_int_eq (cuda_device_resident (0), 2);
    ck_assert_int_eq (lstm_cuda_hold (f.m, true), 0);
    ck_assert_int_eq (B->stream_step (f.m, 2, xa[0], ya, err, sizeof err), SIG_UNAVAILABLE);   /* its reset is held */
    printf ("  held advancer: %s\n", err);
    ck_assert_msg (strstr (err, "watchdog") != NULL, "%s", err);
    ck_assert (lstm_cuda_lost (f.m));
    ck_assert_int_eq (B->stream_step (f.m, 1, xa[0], ya, err, sizeof err), SIG_UNAVAILABLE);
    B->destroy (&f.m);
    ck_assert_int_eq (cuda_device_resident (0), 0);   /* both stopped */
    f.cfg.watchdog_ms = 5000;
    lstm_cuda_tuning (&apart);
    f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
    lstm_cuda_tuning (NULL);
    ck_assert_msg (f.m != NULL, "%s", err);
    ck_assert (lstm_cuda_apart (f.m));
    ck_assert_int_eq (B->stream_step (f.m, 0, xa[0], ya, err, sizeof err), SIG_OK);
    s_check_stream_out (&f, &xa[0][0], 1, ya, "a step after the reload");
    s_close (&f);
}
END_TEST

/* In a child: is there a device of compute capability 9.0? The parent must not start CUDA before
 * Check forks. */
static int s_probe (char *why, size_t len)
{
    int fds[2];
    if (pipe (fds) != 0)
        return 0;
    pid_t pid = fork ();
    if (pid == 0) {
        close (fds[0]);
        int count = 0, ok = 0;
        char reason[400] = "";
        char why[300] = "";
        if (cuda_device_count (&count, why, sizeof why) != 0)
            snprintf (reason, sizeof reason, "no CUDA device: %s", why);
        else {
            struct cudaDeviceProp p;
            cudaGetDeviceProperties (&p, 0);
            ok = p.major == 9 && p.minor == 0;
            if (!ok)
                snprintf (reason, sizeof reason, "device 0 (%s) has compute capability %d.%d; the LSTM kernel needs "
                          "9.0", p.name, p.major, p.minor);
            else
                snprintf (reason, sizeof reason, "%s, %d SMs", p.name, p.multiProcessorCount);
        }
        ssize_t ignored = write (fds[1], reason, strlen (reason) + 1);
        (void) ignored;
        _exit (ok ? 0 : 1);
    }
    close (fds[1]);
    ssize_t n = read (fds[0], why, len - 1);
    why[n > 0 ? n : 0] = 0;
    close (fds[0]);
    int status = 0;
    waitpid (pid, &status, 0);
    return WIFEXITED (status) && WEXITSTATUS (status) == 0;
}

int main (void)
{
    /* every kernel loaded when CUDA starts, as sigserve must: a lazy load next to a resident
     * kernel waits forever */
    setenv ("CUDA_MODULE_LOADING", "EAGER", 0);
    char why[400];
    if (!s_probe (why, sizeof why)) {
        printf ("SKIP: %s\n", why);
        return 0;
    }
    printf ("device: %s\n", why);
    s_seed = (uint64_t) time (NULL) * 0x9e3779b97f4a7c15ull;
    printf ("seed %llu\n", (unsigned long long) s_seed);
    s_dir = tu_tmpdir ();
    Suite *s = suite_create ("lstm_cuda");
    TCase *tc = tcase_create ("lstm");
    tcase_set_timeout (tc, 900);
    tcase_add_checked_fixture (tc, NULL, s_teardown);
    tcase_add_test (tc, refusals);
    tcase_add_test (tc, slots_isolated);
    tcase_add_loop_test (tc, sizes_and_weight_types, 0, 9);
    tcase_add_test (tc, launch_shapes);
    tcase_add_test (tc, small_every_cluster);
    tcase_add_loop_test (tc, half_products_every_size, 0, 6);
    tcase_add_test (tc, f16_features_past_half_range);
    tcase_add_test (tc, watchdog_and_stop);
    tcase_add_test (tc, resident_like_every_persistent_kernel);
    /* the generic kernel's own cases (CK_RUN_CASE=generic runs them alone) */
    TCase *ts = tcase_create ("generic");
    tcase_set_timeout (ts, 900);
    tcase_add_checked_fixture (ts, NULL, s_teardown);
    tcase_add_test (ts, generic_every_shape);
    suite_add_tcase (s, ts);
    /* the head's own cases (CK_RUN_CASE=head runs them alone) */
    TCase *th = tcase_create ("head");
    tcase_set_timeout (th, 900);
    tcase_add_checked_fixture (th, NULL, s_teardown);
    tcase_add_test (th, head_shapes);
    suite_add_tcase (s, th);
    /* plan 4's own cases first (CK_RUN_CASE=plan4 runs them alone; launch_shapes has three more) */
    TCase *t4 = tcase_create ("plan4");
    tcase_set_timeout (t4, 900);
    tcase_add_checked_fixture (t4, NULL, s_teardown);
    tcase_add_loop_test (t4, advances_apart_head_of_line, 0, 3);
    tcase_add_loop_test (t4, advances_apart_many_streams, 0, 15);
    suite_add_tcase (s, t4);
    suite_add_tcase (s, tc);
    /* green contexts last (CK_RUN_CASE=green runs them alone): with CK_FORK=no the device stays split
     * for the rest of the process, and every later kernel would follow the split */
    TCase *tg = tcase_create ("green");
    tcase_set_timeout (tg, 900);
    tcase_add_checked_fixture (tg, NULL, s_teardown);
    tcase_add_loop_test (tg, green_context_sizes, 0, 5);
    suite_add_tcase (s, tg);
    int rc = tu_run_suite (s);
    tu_remove_tree (s_dir);
    free (s_dir);
    return rc;
}

#else

int main (void)
{
    printf ("SKIP: this build has no CUDA backend (nvcc was not found when it was built)\n");
    return 0;
}

#endif
