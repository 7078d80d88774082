/* GPU suite of the CUDA GRU backend (backend_gru_cuda.c, kernels/gru_*.cu): whole windows of 1 to
 * max_rows rows (every graph bucket, padded ones included) and streams against the float64
 * reference, at irregular shapes (odd inputs and widths, 1 to 4 layers, no biases, windows of 1 to
 * 100 steps, heads of every activation, layers wider than the sequence kernel's), the recurrence in
 * both modes (one block a row looping over the steps; a launch a step over blocks of units), graphs
 * and direct launches, every wait mode; streams interleaved on several slots, longer than the
 * window, reset halfway, an advance left owed (the next step runs it), two instances side by side;
 * the backend's row in the model types table; refusals with their messages.
 *
 * Tolerances (tolerance_gru.h): every output within TOL_SAFETY x its forward error bound, on fresh
 * random inputs, every output poisoned with NaN before the call; a streamed output and the full
 * window over the same steps, each within it, within twice it of each other. The largest error
 * seen is printed as a fraction of the bound.
 *
 * Prints "SKIP: <why>" and passes where there is no CUDA build or no device of compute capability
 * 9.0 or later. CUDA starts only inside the tests (the device is asked in a child): run forked, or
 * with CK_FORK=no as tools/gpu-run.sh does. */
#ifdef SIGSERVE_HAVE_CUDA
#include "backends/backend_gru.h"
#include "backends/backends.h"
#include "backends/cuda/backend_gru_cuda.h"
#include "backends/cuda/device.h"
#include "gru_weights.h"
#include "rng.h"
#include "sig_gru.h"
#include "testutil.h"
#include "tolerance_gru.h"
#include "weights/gru.h"
#include "weights/weights.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t s_seed;
static char *s_dir;
static const backend_iface_t *B = &backend_gru_cuda_iface;
static const char *const s_mode_names[] = { "plan", "seq", "step" };

typedef struct {
    weights_t *w;
    model_config_t cfg;
    backend_model_t *m;
} fixture_t;

/* The fixtures open now: with CK_FORK=no a failed assertion leaves the test at once; the checked
 * teardown destroys what it left. */
static fixture_t *s_live[2];

static void s_teardown (void)
{
    gru_cuda_force_mode (GRU_CUDA_PLAN);
    for (int i = 0; i < 2; i++)
        if (s_live[i]) {
            B->destroy (&s_live[i]->m);
            weights_destroy (&s_live[i]->w);
            s_live[i] = NULL;
        }
}

static void s_fill (float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform (&s_seed, -1.0f, 1.0f);
}

typedef struct {
    gru_cuda_mode_t mode;
    bool graph;
    cuda_wait_t wait;
    bool bias;
    uint32_t max_rows, slots;
} opts_t;

/* F: random weights of SHAPE loaded on the CUDA backend as O says; the mode and the kernel's name
 * are what was asked for. LIVE: which of s_live holds it (the teardown destroys it after a failure). */
static void s_open (fixture_t *f, int live, const lstm_shape_t *shape, const opts_t *o)
{
    char path[512], err[1024] = "";
    snprintf (path, sizeof path, "%s/gru-%d-%u-%u-%u-%u.safetensors", s_dir, live, shape->layers, shape->step_size,
              shape->hidden, shape->window);
    ck_assert_msg (gru_random_file (path, shape, o->bias, rng_next (&s_seed), err, sizeof err) == 0, "%s", err);
    gru_config (&f->cfg, "gru", path, shape);
    f->cfg.backend = BACKEND_CUDA;
    f->cfg.max_rows = o->max_rows;
    f->cfg.max_batch_rows = o->max_rows;
    f->cfg.max_streams = o->slots;
    f->cfg.graph = o->graph;
    f->cfg.wait = o->wait;
    f->cfg.graph_rows_count = 0;
    config_graph_rows_default (&f->cfg);
    f->w = weights_load (&f->cfg, err, sizeof err);
    ck_assert_msg (f->w != NULL, "weights: %s", err);
    gru_cuda_force_mode (o->mode);
    f->m = B->load (f->w, &f->cfg, 0, err, sizeof err);
    gru_cuda_force_mode (GRU_CUDA_PLAN);
    s_live[live] = f;
    ck_assert_msg (f->m != NULL, "load: %s", err);
    const gru_cuda_mode_t want = o->mode != GRU_CUDA_PLAN ? o->mode
                                 : shape->hidden <= GRU_CUDA_SEQ_MAX_HIDDEN ? GRU_CUDA_SEQ : GRU_CUDA_STEP;
    ck_assert_int_eq (gru_cuda_mode (f->m), want);
    char name[32];
    snprintf (name, sizeof name, "%s%s", want == GRU_CUDA_SEQ ? "gru-seq" : "gru-step", o->graph ? "+graph" : "");
    ck_assert_str_eq (B->kernel_name (f->m), name);
}

static void s_close (fixture_t *f, int live)
{
    s_live[live] = NULL;
    B->destroy (&f->m);
    ck_assert_ptr_null (f->m);
    B->destroy (&f->m);   /* twice: safe */
    weights_destroy (&f->w);
}

static double s_worst (const float *out, const double *ref, const double *bound, size_t n, double worst)
{
    double q = 0;
    tol_outside (out, ref, bound, n, &q);
    return fmax (worst, q);
}

/* ROUNDS rounds of every row count 1 .. max_rows: each output within its bound. The worst seen. */
static double s_check_windows (fixture_t *f, int rounds, const char *label)
{
    const rnn_weights_t *g = f->w->rnn;
    const uint32_t R = f->cfg.max_rows;
    const size_t nin = (size_t) R * g->window * g->step_size, nout = (size_t) R * g->head.out;
    float *x = malloc (nin * sizeof (float)), *y = malloc (nout * sizeof (float));
    double *ref = malloc (nout * sizeof (double)), *bound = malloc (nout * sizeof (double));
    double worst = 0;
    char err[1024];
    for (int r = 0; r < rounds; r++)
        for (uint32_t rows = 1; rows <= R; rows++) {
            const size_t n = (size_t) rows * g->head.out;
            s_fill (x, (size_t) rows * g->window * g->step_size);
            for (size_t i = 0; i < nout; i++)
                y[i] = NAN;
            const sig_status_t st = B->infer (f->m, x, rows, y, err, sizeof err);
            ck_assert_msg (st == SIG_OK, "%s: infer of %u rows: %s", label, rows, err);
            for (size_t i = 0; i < n; i++)
                ck_assert_msg (isfinite (y[i]), "%s: %u rows: output %zu not written (%g)", label, rows, i, y[i]);
            for (size_t i = n; i < nout; i++)
                ck_assert_msg (isnan (y[i]), "%s: %u rows: output %zu written past the rows", label, rows, i);
            ck_assert_int_eq (tol_gru_window (g, x, rows, ref, bound), 0);
            TOL_ASSERT (y, ref, bound, n, g->head.out, "%s: %u rows, round %d", label, rows, r);
            worst = s_worst (y, ref, bound, n, worst);
        }
    free (x);
    free (y);
    free (ref);
    free (bound);
    return worst;
}

/* W steps ending with step COUNT of HIST (zeros before the first) into WIN. */
static void s_window_of (const float *hist, uint32_t count, uint32_t W, uint32_t in, float *win)
{
    for (uint32_t t = 0; t < W; t++) {
        const int64_t k = (int64_t) count - W + t;
        if (k >= 0)
            memcpy (win + (size_t) t * in, hist + (size_t) k * in, in * sizeof (float));
        else
            memset (win + (size_t) t * in, 0, in * sizeof (float));
    }
}

/* STREAMS interleaved streams on slots 1 .. STREAMS (in a shuffled order each round) of STEPS steps
 * each; stream 0 reset halfway and started over; every third step's advance left owed (its next
 * step runs it). Each output within its bound of the reference over that stream's steps; every
 * SELF_EVERY-th (and the last) also checked against the full window over the same steps. The worst
 * seen (streamed, full windows against them). */
static void s_check_streams (fixture_t *f, uint32_t streams, uint32_t steps, uint32_t self_every, const char *label,
                             double *worst, double *worst_self)
{
    const rnn_weights_t *g = f->w->rnn;
    const uint32_t in = g->step_size, W = g->window, out = g->head.out;
    ck_assert_uint_ge (f->cfg.max_streams, streams + 1);
    float *hist = calloc ((size_t) streams * steps * in, sizeof (float));
    uint32_t *count = calloc (streams, sizeof (uint32_t));
    float *y = malloc (out * sizeof (float)), *yw = malloc (out * sizeof (float));
    float *win = malloc ((size_t) W * in * sizeof (float));
    double *ref = malloc (out * sizeof (double)), *bound = malloc (out * sizeof (double));
    double *as_ref = malloc (out * sizeof (double)), *bound2 = malloc (out * sizeof (double));
    char err[1024];
    for (uint32_t s = 0; s < streams; s++)
        B->stream_reset (f->m, s + 1);
    for (uint32_t i = 0; i < steps; i++) {
        const uint32_t rot = (uint32_t) (rng_next (&s_seed) % streams);
        for (uint32_t q = 0; q < streams; q++) {
            const uint32_t s = (q + rot) % streams;
            if (s == 0 && i == steps / 2) {   /* a reset: the stream starts over from zeros */
                B->stream_reset (f->m, 1);
                count[0] = 0;
            }
            float *mine = hist + (size_t) s * steps * in, *x = mine + (size_t) count[s] * in;
            s_fill (x, in);
            count[s]++;
            for (uint32_t o = 0; o < out; o++)
                y[o] = NAN;
            const sig_status_t st = B->stream_step (f->m, s + 1, x, y, err, sizeof err);
            ck_assert_msg (st == SIG_OK, "%s: stream %u step %u: %s", label, s, i, err);
            if (i % 3 != 1)
                B->stream_advance (f->m, s + 1);
            for (uint32_t o = 0; o < out; o++)
                ck_assert_msg (isfinite (y[o]), "%s: stream %u step %u: output %u not written", label, s, i, o);
            ck_assert_int_eq (tol_gru_stream (g, mine, count[s], ref, bound), 0);
            TOL_ASSERT (y, ref, bound, out, out, "%s: stream %u step %u (%u steps in)", label, s, i, count[s]);
            *worst = s_worst (y, ref, bound, out, *worst);
            if (i % self_every != 0 && i + 1 != steps)
                continue;
            s_window_of (mine, count[s], W, in, win);
            for (uint32_t o = 0; o < out; o++)
                yw[o] = NAN;
            ck_assert_msg (B->infer (f->m, win, 1, yw, err, sizeof err) == SIG_OK, "%s: window: %s", label, err);
            TOL_ASSERT (yw, ref, bound, out, out, "%s: stream %u step %u: the full window", label, s, i);
            tol_pair (y, bound, out, as_ref, bound2);
            TOL_ASSERT (yw, as_ref, bound2, out, out, "%s: stream %u step %u: the full window against the streamed "
                        "output", label, s, i);
            *worst_self = s_worst (yw, as_ref, bound2, out, *worst_self);
        }
    }
    free (hist);
    free (count);
    free (y);
    free (yw);
    free (win);
    free (ref);
    free (bound);
    free (as_ref);
    free (bound2);
}

static const char *s_label (char *buf, size_t len, const lstm_shape_t *s, const opts_t *o)
{
    snprintf (buf, len, "%u layers, %u inputs, %u units, %u outputs, window %u, mode %s, %s, wait %s%s", s->layers,
              s->step_size, s->hidden, s->out, s->window, s_mode_names[o->mode], o->graph ? "graphs" : "direct",
              cuda_wait_name (o->wait), o->bias ? "" : ", no biases");
    return buf;
}

/* The shapes of the window cases: odd everything; a window of 1; long windows; several layers;
 * layers wider than the sequence kernel's (the plan's "gru-step"), and one not a multiple of the
 * 8 units of a block. */
static const lstm_shape_t s_window_shapes[] = {
    { .layers = 1, .step_size = 1, .hidden = 1, .out = 1, .window = 1 },
    { .layers = 2, .step_size = 7, .hidden = 13, .out = 3, .window = 5, .head_act = ACTIVATION_TANH },
    { .layers = 3, .step_size = 33, .hidden = 17, .out = 2, .window = 9, .head_act = ACTIVATION_SIGMOID },
    { .layers = 1, .step_size = 5, .hidden = 45, .out = 1, .window = 64 },
    { .layers = 2, .step_size = 37, .hidden = 130, .out = 4, .window = 11, .head_act = ACTIVATION_RELU },
    { .layers = 4, .step_size = 3, .hidden = 64, .out = 2, .window = 100 },
    { .layers = 2, .step_size = 128, .hidden = 96, .out = 1, .window = 64 },   /* the LSTM's small size */
    { .layers = 1, .step_size = 2, .hidden = 257, .out = 1, .window = 3 },
};

/* _i: a shape; each in the plan's mode, forced to both, and launched directly; every row count up
 * to 5 (graph buckets 1, 2, 4, 5: 3 rows replay the graph of 4). */
START_TEST (windows_every_shape_and_mode)
{
    const lstm_shape_t *s = &s_window_shapes[_i];
    const opts_t runs[] = {
        { .mode = GRU_CUDA_PLAN, .graph = true, .bias = true, .max_rows = 5, .slots = 2 },
        { .mode = GRU_CUDA_SEQ, .graph = true, .bias = true, .max_rows = 5, .slots = 2 },
        { .mode = GRU_CUDA_STEP, .graph = true, .bias = true, .max_rows = 5, .slots = 2 },
        { .mode = GRU_CUDA_PLAN, .graph = false, .bias = true, .max_rows = 3, .slots = 2 },
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        static fixture_t f;
        char label[256];
        s_label (label, sizeof label, s, &runs[k]);
        s_open (&f, 0, s, &runs[k]);
        const double worst = s_check_windows (&f, 2, label);
        printf ("  %s (kernel %s): largest error %.3g of the bound x %g\n", label, B->kernel_name (f.m), worst,
                TOL_SAFETY);
        fflush (stdout);
        s_close (&f, 0);
    }
}
END_TEST

/* The wait modes and custom graph batch sizes (graph_rows 2, 6: 1 row replays the graph of 2). */
START_TEST (wait_modes_and_graph_rows)
{
    const lstm_shape_t s = { .layers = 2, .step_size = 11, .hidden = 29, .out = 2, .window = 7 };
    for (int w = CUDA_WAIT_SPIN; w <= CUDA_WAIT_BLOCK; w++) {
        static fixture_t f;
        const opts_t o = { .mode = GRU_CUDA_PLAN, .graph = true, .wait = (cuda_wait_t) w, .bias = true, .max_rows = 6,
                           .slots = 3 };
        char label[256];
        s_label (label, sizeof label, &s, &o);
        s_open (&f, 0, &s, &o);
        s_check_windows (&f, 1, label);
        double worst = 0, self = 0;
        s_check_streams (&f, 2, 10, 3, label, &worst, &self);
        s_close (&f, 0);
    }
    static fixture_t f;
    char path[512], err[1024] = "";
    snprintf (path, sizeof path, "%s/gru-rows.safetensors", s_dir);
    ck_assert_msg (gru_random_file (path, &s, true, rng_next (&s_seed), err, sizeof err) == 0, "%s", err);
    gru_config (&f.cfg, "gru", path, &s);
    f.cfg.backend = BACKEND_CUDA;
    f.cfg.max_rows = f.cfg.max_batch_rows = 6;
    f.cfg.graph = true;
    f.cfg.graph_rows[0] = 2;
    f.cfg.graph_rows[1] = 6;
    f.cfg.graph_rows_count = 2;
    f.w = weights_load (&f.cfg, err, sizeof err);
    ck_assert_msg (f.w != NULL, "%s", err);
    f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
    s_live[0] = &f;
    ck_assert_msg (f.m != NULL, "%s", err);
    s_check_windows (&f, 2, "graph_rows 2, 6");
    s_close (&f, 0);
    /* graph_rows whose largest is below the largest launch: refused naming the key */
    f.cfg.graph_rows[1] = 5;
    f.w = weights_load (&f.cfg, err, sizeof err);
    ck_assert_ptr_nonnull (f.w);
    ck_assert_ptr_null (B->load (f.w, &f.cfg, 0, err, sizeof err));
    ck_assert_str_eq (err, "model \"gru\": graph_rows: the largest (5) is below the largest launch (6)");
    weights_destroy (&f.w);
}
END_TEST

/* PyTorch's bias=False: zero biases, the same arithmetic; windows and streams in both modes. */
START_TEST (no_biases)
{
    const lstm_shape_t s = { .layers = 2, .step_size = 6, .hidden = 21, .out = 2, .window = 4 };
    for (int mode = GRU_CUDA_SEQ; mode <= GRU_CUDA_STEP; mode++) {
        static fixture_t f;
        const opts_t o = { .mode = (gru_cuda_mode_t) mode, .graph = true, .bias = false, .max_rows = 2, .slots = 3 };
        char label[256];
        s_label (label, sizeof label, &s, &o);
        s_open (&f, 0, &s, &o);
        for (size_t k = 0; k < f.w->rnn->layer_count; k++)
            for (size_t i = 0; i < 3 * (size_t) s.hidden; i++)
                ck_assert (f.w->rnn->layers[k].bias_ih[i] == 0.0f && f.w->rnn->layers[k].bias_hh[i] == 0.0f);
        s_check_windows (&f, 2, label);
        double worst = 0, self = 0;
        s_check_streams (&f, 2, 11, 2, label, &worst, &self);
        s_close (&f, 0);
    }
}
END_TEST

/* The shapes of the stream cases: streams of 2.5 to 5 windows; a window of 1 (no advance to run);
 * a window of 2; wider layers than the sequence kernel's; a long window. */
static const struct {
    lstm_shape_t shape;
    uint32_t streams, steps, self_every;
} s_stream_cases[] = {
    { { .layers = 2, .step_size = 5, .hidden = 19, .out = 2, .window = 6 }, 3, 17, 2 },
    { { .layers = 3, .step_size = 12, .hidden = 33, .out = 1, .window = 1 }, 2, 5, 1 },
    { { .layers = 1, .step_size = 2, .hidden = 3, .out = 1, .window = 2, .head_act = ACTIVATION_TANH }, 4, 9, 1 },
    { { .layers = 2, .step_size = 9, .hidden = 130, .out = 3, .window = 5, .head_act = ACTIVATION_SIGMOID }, 2, 12, 3 },
    { { .layers = 1, .step_size = 16, .hidden = 40, .out = 1, .window = 33 }, 3, 40, 7 },
};

/* _i: a case; in the plan's mode, both modes forced, and launched directly. */
START_TEST (streams_every_shape_and_mode)
{
    const lstm_shape_t *s = &s_stream_cases[_i].shape;
    const opts_t runs[] = {
        { .mode = GRU_CUDA_PLAN, .graph = true, .bias = true, .max_rows = 1, .slots = 8 },
        { .mode = GRU_CUDA_SEQ, .graph = true, .bias = true, .max_rows = 2, .slots = 6 },
        { .mode = GRU_CUDA_STEP, .graph = true, .bias = true, .max_rows = 1, .slots = 5 },
        { .mode = GRU_CUDA_PLAN, .graph = false, .bias = true, .max_rows = 1, .slots = 5 },
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        static fixture_t f;
        char label[256];
        s_label (label, sizeof label, s, &runs[k]);
        s_open (&f, 0, s, &runs[k]);
        double worst = 0, self = 0;
        s_check_streams (&f, s_stream_cases[_i].streams, s_stream_cases[_i].steps, s_stream_cases[_i].self_every, label,
                         &worst, &self);
        printf ("  %s (kernel %s): %u streams x %u steps: largest error %.3g (against the reference), %.3g (its full "
                "windows against it) of the bound x %g\n", label, B->kernel_name (f.m), s_stream_cases[_i].streams,
                s_stream_cases[_i].steps, worst, self, TOL_SAFETY);
        fflush (stdout);
        s_close (&f, 0);
    }
}
END_TEST

/* Two slots fed the same steps give the same outputs bit for bit, whatever a third slot does in
 * between (steps, a reset); a stream's state survives whole-window requests between its steps. */
START_TEST (slots_isolated)
{
    const lstm_shape_t s = { .layers = 2, .step_size = 4, .hidden = 23, .out = 2, .window = 5 };
    static fixture_t f;
    const opts_t o = { .mode = GRU_CUDA_PLAN, .graph = true, .bias = true, .max_rows = 2, .slots = 3 };
    s_open (&f, 0, &s, &o);
    float x[4], noise[4], win[2 * 5 * 4], ya[2], yb[2], yc[2], yw[4];
    char err[1024];
    for (uint32_t i = 0; i < 13; i++) {
        s_fill (x, 4);
        ck_assert_msg (B->stream_step (f.m, 0, x, ya, err, sizeof err) == SIG_OK, "%s", err);
        B->stream_advance (f.m, 0);
        s_fill (noise, 4);
        ck_assert_msg (B->stream_step (f.m, 1, noise, yc, err, sizeof err) == SIG_OK, "%s", err);
        if (i % 4 == 0)
            B->stream_reset (f.m, 1);
        else
            B->stream_advance (f.m, 1);
        s_fill (win, sizeof win / sizeof win[0]);
        ck_assert_msg (B->infer (f.m, win, 2, yw, err, sizeof err) == SIG_OK, "%s", err);
        ck_assert_msg (B->stream_step (f.m, 2, x, yb, err, sizeof err) == SIG_OK, "%s", err);
        B->stream_advance (f.m, 2);
        for (int o2 = 0; o2 < 2; o2++)
            ck_assert_msg (memcmp (&ya[o2], &yb[o2], sizeof (float)) == 0, "step %u output %d: slot 0 %.9g, slot 2 %.9g",
                           i, o2, ya[o2], yb[o2]);
    }
    s_close (&f, 0);
}
END_TEST

/* Two instances of one model (as a model's instances are: each its own stream and buffers), used
 * alternately: each answers as the reference says. */
START_TEST (instances_side_by_side)
{
    const lstm_shape_t s = { .layers = 2, .step_size = 9, .hidden = 27, .out = 2, .window = 8 };
    static fixture_t a, b;
    const opts_t o = { .mode = GRU_CUDA_PLAN, .graph = true, .bias = true, .max_rows = 2, .slots = 4 };
    s_open (&a, 0, &s, &o);
    s_open (&b, 1, &s, &o);
    double worst = 0, self = 0;
    for (int round = 0; round < 2; round++) {
        s_check_windows (&a, 1, "instance a");
        s_check_streams (&b, 3, 12, 4, "instance b", &worst, &self);
        s_check_streams (&a, 2, 10, 5, "instance a", &worst, &self);
        s_check_windows (&b, 1, "instance b");
    }
    s_close (&b, 1);
    s_close (&a, 0);
}
END_TEST

/* The GRU's row of the model types table: its CUDA column is this backend. */
START_TEST (its_row_in_the_table)
{
    const gpu_backend_t *gpu = backends_gpu (NULL, 0);
    ck_assert_ptr_nonnull (gpu);
    ck_assert_ptr_eq (gpu->by_type[MODEL_TYPE_GRU], B);
    ck_assert_ptr_eq (backends_built (MODEL_TYPE_GRU, BACKEND_CUDA), B);
    char why[256] = "";
    ck_assert_ptr_eq (backends_find (MODEL_TYPE_GRU, BACKEND_CUDA, why, sizeof why), B);
    ck_assert_str_eq (B->name, "cuda");
    ck_assert_int_eq (B->device, BACKEND_DEVICE_GPU);
    ck_assert_uint_eq (B->weight_dtypes, 0);   /* f32 only */
    ck_assert (backend_holds (B, WEIGHT_DTYPE_F32) && !backend_holds (B, WEIGHT_DTYPE_F16));
    ck_assert (B->load && B->infer && B->kernel_name && B->destroy && B->stream_reset && B->stream_step
               && B->stream_advance);
    ck_assert (!B->share_box && !B->prepare && !B->kernel_stopped);
}
END_TEST

/* What the backend refuses, and what it says. */
START_TEST (refusals)
{
    char err[1024] = "";
    /* MLP weights */
    weights_t *mlp = weights_alloc (1);
    ck_assert_ptr_nonnull (mlp);
    mlp->layers[0] = (dense_layer_t) { .in = 3, .out = 2 };
    weights_finish (mlp);
    model_config_t cfg;
    gru_config (&cfg, "notgru", "/nonexistent", &(lstm_shape_t) { .layers = 1, .step_size = 1, .hidden = 1, .out = 1,
                                                                  .window = 1 });
    cfg.backend = BACKEND_CUDA;
    ck_assert_ptr_null (B->load (mlp, &cfg, 0, err, sizeof err));
    ck_assert_str_eq (err, "model \"notgru\": the GRU backend needs GRU weights (\"type\": \"gru\"), got a model of "
                           "\"type\": \"mlp\"");
    weights_destroy (&mlp);
    /* a device that does not exist; h wider than the kernels keep in shared memory */
    static fixture_t f;
    const lstm_shape_t s = { .layers = 1, .step_size = 2, .hidden = 3, .out = 1, .window = 2 };
    char path[512];
    snprintf (path, sizeof path, "%s/gru-refusals.safetensors", s_dir);
    ck_assert_msg (gru_random_file (path, &s, true, rng_next (&s_seed), err, sizeof err) == 0, "%s", err);
    gru_config (&f.cfg, "gru", path, &s);
    f.cfg.backend = BACKEND_CUDA;
    f.cfg.max_streams = 2;
    f.w = weights_load (&f.cfg, err, sizeof err);
    ck_assert_ptr_nonnull (f.w);
    int count = 0;
    ck_assert_int_eq (cudaGetDeviceCount (&count), cudaSuccess);
    ck_assert_ptr_null (B->load (f.w, &f.cfg, count, err, sizeof err));
    char want[256];
    snprintf (want, sizeof want, "model \"gru\": device %d: no such CUDA device (this machine has %d)", count, count);
    ck_assert_str_eq (err, want);
    f.cfg.weight_dtype = WEIGHT_DTYPE_BF16;
    ck_assert_ptr_null (B->load (f.w, &f.cfg, 0, err, sizeof err));
    ck_assert_str_eq (err, "model \"gru\": weight_dtype \"bf16\": the CUDA GRU kernels hold weights in f32 only; use "
                           "\"weight_dtype\": \"f32\"");
    f.cfg.weight_dtype = WEIGHT_DTYPE_F32;
    f.w->rnn->hidden = SIG_GRU_MAX_HIDDEN + 1;   /* the check comes before any use of the tensors */
    ck_assert_ptr_null (B->load (f.w, &f.cfg, 0, err, sizeof err));
    ck_assert_str_eq (err, "model \"gru\": the CUDA GRU kernels take at most 4096 hidden units (h is kept in shared "
                           "memory), the model has 4097; use \"backend\": \"cpu\"");
    f.w->rnn->hidden = s.hidden;
    /* a slot past the table, rows out of range: errors, not crashes; resets and advances ignored */
    f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
    s_live[0] = &f;
    ck_assert_msg (f.m != NULL, "%s", err);
    float x[2] = { 0.5f, -0.5f }, y = NAN, win[8] = { 0 };
    ck_assert_int_eq (B->stream_step (f.m, 2, x, &y, err, sizeof err), SIG_INTERNAL);
    ck_assert_str_eq (err, "model \"gru\": stream slot 2 of 2");
    ck_assert (isnan (y));
    ck_assert_int_eq (B->infer (f.m, win, 2, &y, err, sizeof err), SIG_INTERNAL);
    ck_assert_str_eq (err, "model \"gru\": 2 rows, the GRU kernels take 1 to 1");
    ck_assert_int_eq (B->infer (f.m, win, 0, &y, err, sizeof err), SIG_INTERNAL);
    B->stream_reset (f.m, 7);
    B->stream_advance (f.m, 7);
    B->stream_advance (f.m, 1);   /* nothing owed: nothing posted */
    /* and it still answers as the reference says */
    double ref, bound;
    ck_assert_int_eq (B->stream_step (f.m, 1, x, &y, err, sizeof err), SIG_OK);
    ck_assert_int_eq (tol_gru_stream (f.w->rnn, x, 1, &ref, &bound), 0);
    TOL_ASSERT (&y, &ref, &bound, 1, 1, "after the refusals");
    s_close (&f, 0);
}
END_TEST

/* ---- the main ---- */

/* Is there a device of compute capability 9.0 or later? Asked in a child (tu_in_child): the parent
 * must not start CUDA before Check forks. */
static int s_device_90 (char *reason, size_t cap)
{
    int count = 0;
    char why[300] = "";
    if (cuda_device_count (&count, why, sizeof why) != 0) {
        snprintf (reason, cap, "no CUDA device: %s", why);
        return -1;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties (&p, 0) != cudaSuccess) {
        snprintf (reason, cap, "device 0 does not answer cudaGetDeviceProperties");
        return -1;
    }
    if (p.major < 9) {
        snprintf (reason, cap, "device 0 (%s) has compute capability %d.%d; this build's kernels are for 9.0 and later",
                  p.name, p.major, p.minor);
        return -1;
    }
    snprintf (reason, cap, "%s, %d SMs", p.name, p.multiProcessorCount);
    return 0;
}

int main (void)
{
    setenv ("CUDA_MODULE_LOADING", "EAGER", 0);   /* as sigserve runs: kernels loaded when CUDA starts */
    char why[400];
    if (!tu_in_child (s_device_90, why, sizeof why)) {
        printf ("SKIP: %s\n", why);
        return 0;
    }
    printf ("device: %s\n", why);
    s_seed = (uint64_t) time (NULL) * 0x9e3779b97f4a7c15ull;
    printf ("seed %llu\n", (unsigned long long) s_seed);
    s_dir = tu_tmpdir ();
    Suite *s = suite_create ("gru_cuda");
    TCase *tc = tcase_create ("gru");
    tcase_set_timeout (tc, 900);
    tcase_add_checked_fixture (tc, NULL, s_teardown);
    tcase_add_test (tc, its_row_in_the_table);
    tcase_add_test (tc, refusals);
    tcase_add_loop_test (tc, windows_every_shape_and_mode, 0, (int) (sizeof s_window_shapes / sizeof s_window_shapes[0]));
    tcase_add_test (tc, wait_modes_and_graph_rows);
    tcase_add_test (tc, no_biases);
    suite_add_tcase (s, tc);
    /* the streams' cases (CK_RUN_CASE=gru_streams runs them alone) */
    TCase *ts = tcase_create ("gru_streams");
    tcase_set_timeout (ts, 900);
    tcase_add_checked_fixture (ts, NULL, s_teardown);
    tcase_add_loop_test (ts, streams_every_shape_and_mode, 0, (int) (sizeof s_stream_cases / sizeof s_stream_cases[0]));
    tcase_add_test (ts, slots_isolated);
    tcase_add_test (ts, instances_side_by_side);
    suite_add_tcase (s, ts);
    const int rc = tu_run_suite (s);
    tu_remove_tree (s_dir);
    free (s_dir);
    return rc;
}

#else

#include "testutil.h"

int main (void) { return tu_skip_without_cuda (); }

#endif
