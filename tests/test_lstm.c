/* The LSTM CPU backend (backend_lstm_cpu.c) against a hand-computed case and against the float64
 * reference (weights/reference.h), full windows and streams, on fresh random inputs, every output
 * poisoned with NaN before it is written. Tolerance: every output within its forward error bound
 * of the reference (tolerance.h); a streamed output and the full window over the same steps, each
 * within it, within twice it of each other. */
#include "backends/backend_lstm.h"
#include "backends/cpu_isa.h"
#include "lstm_reference.h"
#include "rng.h"
#include "rnn_tests.h"
#include "st_write.h"
#include "testutil.h"
#include "tolerance.h"
#include "weights/reference.h"
#include "weights/weights.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The weight dtype the checks load and bound (bf16_matches_reference sets it). */
static weight_dtype_t s_dtype = WEIGHT_DTYPE_F32;

/* Loads random weights of SHAPE with MAX_ROWS and SLOTS, returns the model (and W, CFG). */
static backend_model_t *s_load (const lstm_shape_t *shape, uint32_t max_rows, uint32_t slots, weights_t **w,
                                model_config_t *cfg)
{
    char *path = s_path ("lstm.safetensors");
    char err[512] = "";
    *w = lstm_random_weights (path, shape, rng_next (&s_seed), cfg, err, sizeof err);
    ck_assert_msg (*w != NULL, "weights: %s", err);
    cfg->max_rows = max_rows;
    cfg->max_batch_rows = max_rows;
    cfg->max_streams = slots;
    cfg->weight_dtype = s_dtype;
    backend_model_t *m = backend_lstm_cpu_iface.load (*w, cfg, 0, err, sizeof err);
    ck_assert_msg (m != NULL, "load: %s", err);
    free (path);
    return m;
}

static int s_window_bound (const rnn_weights_t *w, const float *in, uint32_t rows, double *ref, double *bound)
{
    return tol_lstm_window (w, s_dtype, in, rows, ref, bound);
}

static int s_stream_bound (const rnn_weights_t *w, const float *steps, uint64_t count, double *ref, double *bound)
{
    return tol_lstm_stream (w, s_dtype, steps, count, ref, bound);
}

static const char *s_label (void) { return weight_dtype_name (s_dtype); }

static const rnn_suite_t s_lstm = { .B = &backend_lstm_cpu_iface, .load = s_load, .window_bound = s_window_bound,
                                    .stream_bound = s_stream_bound, .label = s_label };

START_TEST (hand_computed_case)
{
    /* 1 layer, 1 input, 1 unit, window 2, head y = 2 h - 0.5; expected values computed in float64
     * from the equations by hand (python: the cell loop written out). */
    const float wih[4] = { 0.5f, -0.25f, 0.75f, 1.0f }, whh[4] = { 0.1f, 0.2f, -0.3f, 0.4f };
    const float bih[4] = { 0.05f, 0.1f, -0.05f, 0.2f }, bhh[4] = { 0.0f, 0.3f, 0.1f, -0.1f };
    const float hw = 2.0f, hb = -0.5f;
    const st_write_tensor_t t[] = {
        { "lstm.weight_ih_l0", 2, { 4, 1 }, wih }, { "lstm.weight_hh_l0", 2, { 4, 1 }, whh },
        { "lstm.bias_ih_l0", 1, { 4 }, bih },      { "lstm.bias_hh_l0", 1, { 4 }, bhh },
        { "head.weight", 2, { 1, 1 }, &hw },        { "head.bias", 1, { 1 }, &hb },
    };
    char *path = s_path ("hand.safetensors");
    char err[512] = "";
    ck_assert_msg (safetensors_write_f32 (path, t, 6, err, sizeof err) == 0, "%s", err);
    const lstm_shape_t shape = { .layers = 1, .step_size = 1, .hidden = 1, .out = 1, .window = 2 };
    model_config_t cfg;
    lstm_config (&cfg, "hand", path, &shape);
    weights_t *w = weights_load (&cfg, err, sizeof err);
    ck_assert_msg (w != NULL, "%s", err);
    backend_model_t *m = backend_lstm_cpu_iface.load (w, &cfg, 0, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    /* the hand's values: the stream's windows [0, 1], [1, -2], [-2, 3]; [1, -2] alone */
    const double want[3] = { 0.11357185865533792, -0.4871412369021575, 0.6626177413617271 };
    s_check_hand (&s_lstm, m, w, -0.4871412369021575, want);
    weights_destroy (&w);
    unlink (path);
    free (path);
}
END_TEST

/* Irregular shapes: H not a multiple of 16, odd inputs, 1 to 3 layers, windows 1 to 7, a head
 * of 3 outputs with each activation, rows 1 to 3. */
START_TEST (full_window_matches_reference)
{
    const lstm_shape_t shapes[] = {
        { .layers = 1, .step_size = 1, .hidden = 1, .out = 1, .window = 1 },
        { .layers = 1, .step_size = 7, .hidden = 5, .out = 3, .window = 4, .head_act = ACTIVATION_TANH },
        { .layers = 2, .step_size = 33, .hidden = 17, .out = 1, .window = 7, .head_act = ACTIVATION_SIGMOID },
        { .layers = 3, .step_size = 3, .hidden = 40, .out = 2, .window = 5, .head_act = ACTIVATION_RELU },
        { .layers = 2, .step_size = 64, .hidden = 96, .out = 1, .window = 3 },
    };
    s_check_shapes (&s_lstm, shapes, sizeof shapes / sizeof shapes[0], 1, 4);
}
END_TEST

START_TEST (streams_match_reference)
{
    const lstm_shape_t a = { .layers = 2, .step_size = 5, .hidden = 19, .out = 2, .window = 6 };
    s_check_streams (&s_lstm, &a, 3, 17, 1);
    const lstm_shape_t b = { .layers = 3, .step_size = 12, .hidden = 33, .out = 1, .window = 1 };
    s_check_streams (&s_lstm, &b, 2, 5, 1);
    const lstm_shape_t c = { .layers = 1, .step_size = 2, .hidden = 3, .out = 1, .window = 2,
                             .head_act = ACTIVATION_TANH };
    s_check_streams (&s_lstm, &c, 4, 9, 1);
}
END_TEST

/* bf16 weights (two to a lane, fp32 arithmetic): the same windows and streams within the bound of
 * the f32 weights' reference plus their rounding (tolerance.c), odd inputs and units included. */
START_TEST (bf16_matches_reference)
{
    s_dtype = WEIGHT_DTYPE_BF16;
    const lstm_shape_t shapes[] = {
        { .layers = 1, .step_size = 1, .hidden = 1, .out = 1, .window = 1 },
        { .layers = 2, .step_size = 33, .hidden = 17, .out = 1, .window = 7, .head_act = ACTIVATION_SIGMOID },
        { .layers = 3, .step_size = 3, .hidden = 40, .out = 2, .window = 5, .head_act = ACTIVATION_RELU },
        { .layers = 2, .step_size = 64, .hidden = 96, .out = 1, .window = 3 },
    };
    s_check_shapes (&s_lstm, shapes, sizeof shapes / sizeof shapes[0], 2, 4);
    const lstm_shape_t a = { .layers = 2, .step_size = 5, .hidden = 19, .out = 2, .window = 6 };
    s_check_streams (&s_lstm, &a, 3, 17, 1);
    const lstm_shape_t c = { .layers = 1, .step_size = 2, .hidden = 3, .out = 1, .window = 2, .head_act = ACTIVATION_TANH };
    s_check_streams (&s_lstm, &c, 4, 9, 1);
    s_dtype = WEIGHT_DTYPE_F32;
}
END_TEST

/* The products run the MLP's dense kernels (cpu_dense.h) on the path cpu_isa.h picks: every path this
 * machine has (SIGSERVE_CPU_ISA caps it at load), f32 and bf16, odd inputs (a padded copy of each row)
 * and units, windows and streams, each path named by the model as expected. */
START_TEST (every_isa_path_matches_reference)
{
    const cpu_features_t *f = cpu_isa_features ();
    const char *const caps[] = { "scalar", "avx2", "avx512" };
    const int count = f->avx512 ? 3 : f->avx2 ? 2 : 1;
    const lstm_shape_t shapes[] = {
        { .layers = 2, .step_size = 33, .hidden = 17, .out = 1, .window = 7, .head_act = ACTIVATION_SIGMOID },
        { .layers = 1, .step_size = 16, .hidden = 40, .out = 2, .window = 3 },
    };
    const lstm_shape_t a = { .layers = 2, .step_size = 5, .hidden = 19, .out = 2, .window = 6 };
    for (int cap = 0; cap < count; cap++)
        for (int d = 0; d < 2; d++) {
            setenv ("SIGSERVE_CPU_ISA", caps[cap], 1);
            s_dtype = d ? WEIGHT_DTYPE_BF16 : WEIGHT_DTYPE_F32;
            weights_t *w;
            model_config_t cfg;
            backend_model_t *m = s_load (&a, 1, 1, &w, &cfg);
            ck_assert_str_eq (backend_lstm_cpu_iface.isa (m), caps[cap]);
            backend_lstm_cpu_iface.destroy (&m);
            weights_destroy (&w);
            s_check_shapes (&s_lstm, shapes, sizeof shapes / sizeof shapes[0], 2, 2);
            s_check_streams (&s_lstm, &a, 2, 9, 1);
            unsetenv ("SIGSERVE_CPU_ISA");
        }
    s_dtype = WEIGHT_DTYPE_F32;
}
END_TEST

/* The small model (NVIDIA's: 2 layers, window 64, 128 inputs, 96 units): full windows and
 * two streams past the window. */
START_TEST (small_model)
{
    weights_t *w;
    model_config_t cfg;
    backend_model_t *m = s_load (&LSTM_SHAPE_SMALL, 2, 2, &w, &cfg);
    s_check_windows (&s_lstm, m, w, 2, 3, "small, full window");
    backend_lstm_cpu_iface.destroy (&m);
    weights_destroy (&w);
    s_check_streams (&s_lstm, &LSTM_SHAPE_SMALL, 2, 70, 9);
}
END_TEST

/* A ring too big for the projections (every slot W x 4H floats over 512 MiB) keeps raw steps and
 * projects them again at each advance: the same outputs. */
START_TEST (raw_step_ring)
{
    const lstm_shape_t s = { .layers = 1, .step_size = 3, .hidden = 32, .out = 1, .window = 600 };
    /* 1800 slots x 600 steps x 128 gate floats x 4 B = 553 MB of projections: raw steps instead */
    weights_t *w2;
    model_config_t cfg2;
    char *path = s_path ("raw.safetensors");
    char err[512];
    w2 = lstm_random_weights (path, &s, rng_next (&s_seed), &cfg2, err, sizeof err);
    ck_assert_msg (w2 != NULL, "%s", err);
    cfg2.max_streams = 1800;
    backend_model_t *m2 = backend_lstm_cpu_iface.load (w2, &cfg2, 0, err, sizeof err);
    ck_assert_msg (m2 != NULL, "%s", err);
    const uint32_t steps = 610, in = 3;
    float *hist = malloc ((size_t) steps * in * sizeof (float));
    float y;
    double ref, bound;
    backend_lstm_cpu_iface.stream_reset (m2, 1799);
    for (uint32_t i = 0; i < steps; i++) {
        s_fill (hist + (size_t) i * in, in);
        y = NAN;
        ck_assert_int_eq (backend_lstm_cpu_iface.stream_step (m2, 1799, hist + (size_t) i * in, &y, err, sizeof err),
                          SIG_OK);
        backend_lstm_cpu_iface.stream_advance (m2, 1799);
        if (i == 0 || i == 300 || i >= steps - 6) {
            ck_assert_int_eq (tol_lstm_stream (w2->lstm, WEIGHT_DTYPE_F32, hist, i + 1, &ref, &bound), 0);
            TOL_ASSERT (&y, &ref, &bound, 1, 1, "raw step ring, step %u", i);
        }
    }
    free (hist);
    backend_lstm_cpu_iface.destroy (&m2);
    weights_destroy (&w2);
    unlink (path);
    free (path);
}
END_TEST

START_TEST (refusals)
{
    /* MLP weights: refused with a message */
    weights_t *mlp = weights_alloc (1);
    ck_assert_ptr_nonnull (mlp);
    mlp->layers[0] = (dense_layer_t) { .in = 3, .out = 2 };
    weights_finish (mlp);
    model_config_t cfg;
    lstm_config (&cfg, "notlstm", "/nonexistent", &LSTM_SHAPE_SMALL);
    char err[256] = "";
    ck_assert_ptr_null (backend_lstm_cpu_iface.load (mlp, &cfg, 0, err, sizeof err));
    ck_assert_msg (strstr (err, "LSTM") != NULL, "%s", err);
    weights_destroy (&mlp);
    /* a slot past the table: an error, not a crash */
    weights_t *w;
    backend_model_t *m = s_load (&(lstm_shape_t) { .layers = 1, .step_size = 2, .hidden = 3, .out = 1, .window = 2 },
                                 1, 2, &w, &cfg);
    float x[2] = { 0.5f, -0.5f }, y;
    ck_assert_int_eq (backend_lstm_cpu_iface.stream_step (m, 2, x, &y, err, sizeof err), SIG_INTERNAL);
    ck_assert_msg (strstr (err, "slot 2") != NULL, "%s", err);
    backend_lstm_cpu_iface.stream_reset (m, 7);     /* ignored */
    backend_lstm_cpu_iface.stream_advance (m, 7);
    ck_assert_str_eq (backend_lstm_cpu_iface.kernel_name (m), "lstm-loop");
    backend_lstm_cpu_iface.destroy (&m);
    weights_destroy (&w);
}
END_TEST

/* ---- the bound of half-precision products (the CUDA kernel's SIG_LSTM_MATH_HALF, plan 3) ---- */

/* V rounded to nearest even with P significant bits, exponents down to EMIN (below: the subnormal
 * spacing of that type), from a double (no double rounding): f16 (11, -14), bf16 (8, -126). */
static double s_round_bits (double v, int p, int emin)
{
    if (v == 0 || !isfinite (v))
        return v;
    int e;
    frexp (v, &e);   /* v = m 2^e, 0.5 <= |m| < 1: the leading bit has exponent e - 1 */
    const int q = (e - 1 > emin ? e - 1 : emin) - (p - 1);
    return ldexp (nearbyint (ldexp (v, -q)), q);
}

typedef struct {
    int p, emin;
} half_t;

/* The kernel's gate sum over K inputs of row W with X (float32, zero padded to chunks of 8): each
 * input rounded to the half type, per chunk two runs of 4 products (elements 0, 2, 4, 6 and 1, 3, 5,
 * 7) summed by fused multiply-adds rounded to the type (a product of two halves is exact in double,
 * and so is its sum with a half at these magnitudes: one rounding), the runs widened and added in
 * float32: acc + (lo + hi), as l_hfma. */
static float s_half_dot (const float *w, const float *x, uint32_t k, half_t t, float acc)
{
    for (uint32_t c0 = 0; c0 < k; c0 += 8) {
        double run[2] = { 0, 0 };
        for (uint32_t e = 0; e < 8; e++) {
            const uint32_t i = c0 + e;
            const double wi = i < k ? w[i] : 0.0, xi = i < k ? s_round_bits (x[i], t.p, t.emin) : 0.0;
            run[e & 1u] = s_round_bits (wi * xi + run[e & 1u], t.p, t.emin);
        }
        acc = acc + ((float) run[0] + (float) run[1]);
    }
    return acc;
}

static float s_sigf (float x) { return 1.0f / (1.0f + expf (-x)); }

/* One window of L (weights already rounded to the type) in the kernel's arithmetic with half
 * products: OUT gets head.out values. */
static void s_half_window (const lstm_weights_t *l, const float *in, half_t t, float *out)
{
    const uint32_t H = l->hidden, L = (uint32_t) l->layer_count;
    float *h = calloc ((size_t) L * H, sizeof (float)), *c = calloc ((size_t) L * H, sizeof (float));
    float *hn = malloc (H * sizeof (float)), *z = malloc (4 * H * sizeof (float));
    for (uint32_t step = 0; step < l->window; step++)
        for (uint32_t k = 0; k < L; k++) {
            const lstm_layer_t *Lk = &l->layers[k];
            const float *x = k == 0 ? in + (size_t) step * l->step_size : h + (size_t) (k - 1) * H;
            for (uint32_t q = 0; q < 4 * H; q++) {
                const float gi = s_half_dot (Lk->w_ih + (size_t) q * Lk->in, x, Lk->in, t, 0.0f);
                const float gh = s_half_dot (Lk->w_hh + (size_t) q * H, h + (size_t) k * H, H, t, 0.0f);
                z[q] = (gh + Lk->bias[q]) + gi;
            }
            for (uint32_t j = 0; j < H; j++) {
                const float i = s_sigf (z[j]), f = s_sigf (z[H + j]), g = 2.0f * s_sigf (2.0f * z[2 * H + j]) - 1.0f,
                            o = s_sigf (z[3 * H + j]);
                float *cj = c + (size_t) k * H + j;
                *cj = fmaf (f, *cj, i * g);
                hn[j] = o * (2.0f * s_sigf (2.0f * *cj) - 1.0f);
            }
            memcpy (h + (size_t) k * H, hn, H * sizeof (float));
        }
    const float *last = h + (size_t) (L - 1) * H;
    for (uint32_t o = 0; o < l->head.out; o++) {
        float acc = 0.0f;
        for (uint32_t i = 0; i < H; i++)
            acc = fmaf (l->head.weight[(size_t) o * H + i], last[i], acc);
        out[o] = (float) reference_activate (l->head.activation, (double) (acc + l->head.bias[o]));
    }
    free (h);
    free (c);
    free (hn);
    free (z);
}

/* The bound tolerance.c derives for half products holds for an emulation of the kernel's
 * arithmetic (the CPU cannot run the CUDA kernel: test_lstm_cuda checks the kernel itself), in f16
 * and bf16, odd shapes and the small size, fresh random inputs; the float32 products' bound is the
 * same bound as before, to the bit, and is printed next to it (half products need more). */
START_TEST (half_products_within_their_bound)
{
    const lstm_shape_t shapes[] = {
        { .layers = 3, .step_size = 37, .hidden = 45, .out = 3, .window = 9, .head_act = ACTIVATION_TANH },
        { .layers = 1, .step_size = 5, .hidden = 20, .out = 1, .window = 3 },
        { .layers = 2, .step_size = 128, .hidden = 96, .out = 1, .window = 16 },
    };
    const struct { weight_dtype_t d; half_t t; const char *name; } types[] = {
        { WEIGHT_DTYPE_F16, { 11, -14 }, "f16" },
        { WEIGHT_DTYPE_BF16, { 8, -126 }, "bf16" },
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t d = 0; d < 2; d++) {
            char *path = s_path ("half.safetensors");
            char err[512] = "";
            model_config_t cfg;
            weights_t *w = lstm_random_weights (path, &shapes[s], rng_next (&s_seed), &cfg, err, sizeof err);
            ck_assert_msg (w != NULL, "weights: %s", err);
            free (path);
            lstm_weights_t *l = w->lstm;
            tol_round_lstm (l, types[d].d);
            const uint32_t out = l->head.out;
            const size_t nin = (size_t) l->window * l->step_size;
            float *x = malloc (nin * sizeof (float)), y[4];
            double ref[4], bound[4], ref32[4], bound32[4], old32[4], oldref[4];
            double worst = 0, worst32 = 0;
            for (int round = 0; round < 6; round++) {
                s_fill (x, nin);
                s_half_window (l, x, types[d].t, y);
                ck_assert_int_eq (tol_lstm_window_products (l, WEIGHT_DTYPE_F32, types[d].d, x, 1, ref, bound), 0);
                TOL_ASSERT (y, ref, bound, out, out, "shape %zu %s, half products, round %d", s, types[d].name, round);
                ck_assert_int_eq (tol_lstm_window_products (l, WEIGHT_DTYPE_F32, WEIGHT_DTYPE_F32, x, 1, ref32, bound32), 0);
                ck_assert_int_eq (tol_lstm_window (l, WEIGHT_DTYPE_F32, x, 1, oldref, old32), 0);
                for (uint32_t o = 0; o < out; o++) {   /* the float32 products' bound: unchanged */
                    ck_assert (ref32[o] == oldref[o] && bound32[o] == old32[o]);
                    ck_assert (bound[o] >= bound32[o]);
                }
                double q;
                tol_outside (y, ref, bound, out, &q);
                worst = fmax (worst, q);
                tol_outside (y, ref32, bound32, out, &q);
                worst32 = fmax (worst32, q);
            }
            printf ("  shape %zu %s, emulated half products: largest error %.3g of their bound x %g (%.3g of the "
                    "float32 products' bound)\n", s, types[d].name, worst, TOL_SAFETY, worst32);
            free (x);
            weights_destroy (&w);
        }
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("lstm");
    TCase *tc = tcase_create ("cpu");
    tcase_set_timeout (tc, 120);
    tcase_add_test (tc, hand_computed_case);
    tcase_add_test (tc, full_window_matches_reference);
    tcase_add_test (tc, streams_match_reference);
    tcase_add_test (tc, bf16_matches_reference);
    tcase_add_test (tc, every_isa_path_matches_reference);
    tcase_add_test (tc, small_model);
    tcase_add_test (tc, raw_step_ring);
    tcase_add_test (tc, refusals);
    tcase_add_test (tc, half_products_within_their_bound);
    suite_add_tcase (s, tc);
    return s_run (s);
}
