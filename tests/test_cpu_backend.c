/* The CPU backend against the float64 reference, on fresh random inputs at irregular shapes: every
 * output within its forward error bound (tolerance.h), for each weight dtype on every instruction path
 * this machine has (SIGSERVE_CPU_ISA caps the path at load: cpu_isa.h). */
#define _GNU_SOURCE
#include "rng.h"
#include "reference.h"
#include "backends/backend.h"
#include "backends/cpu_dense.h"
#include "backends/cpu_isa.h"
#include "base/config.h"
#include "backends/backends.h"
#include "serving/model.h"
#include "weights/weights.h"
#include "testutil.h"
#include "tolerance.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t s_seed;

static model_config_t s_config (cpu_kernel_t kernel, uint32_t max_rows, weight_dtype_t dtype)
{
    model_config_t cfg;
    memset (&cfg, 0, sizeof cfg);
    strcpy (cfg.name, "t");
    strcpy (cfg.version, "1");
    cfg.backend = BACKEND_CPU;
    cfg.cpu_kernel = kernel;
    cfg.max_rows = max_rows;
    cfg.weight_dtype = dtype;
    return cfg;
}

/* The paths to run: every SIGSERVE_CPU_ISA cap whose path this machine has ("amx": the tiles, for
 * int8 batches of 16 rows or more; the rest as under "avx512"). */
static const char *const s_caps[] = { "scalar", "avx2", "avx512", "amx" };

static int s_cap_count (void)
{
    const cpu_features_t *f = cpu_isa_features ();
    return f->amx_cpu && f->vnni ? 4 : f->avx512 ? 3 : f->avx2 ? 2 : 1;
}

/* The path a load under cap CAP must report for DTYPE and MAX_ROWS, from the features alone. */
static const char *s_expected_isa (int cap, weight_dtype_t dtype, uint32_t max_rows)
{
    const cpu_features_t *f = cpu_isa_features ();
    if (cap >= 3 && dtype == WEIGHT_DTYPE_INT8 && max_rows >= CPU_AMX_MIN_ROWS && f->amx_cpu && f->vnni)
        return "avx512-vnni+amx";
    if (cap >= 2 && f->avx512 && (dtype != WEIGHT_DTYPE_INT8 || f->vnni))
        return dtype == WEIGHT_DTYPE_INT8 ? "avx512-vnni" : "avx512";
    return cap >= 1 && f->avx2 ? "avx2" : "scalar";
}

/* Runs the model on fresh inputs, round after round (so state one call leaves cannot hide in the
 * next), outputs poisoned with NaN first, and checks every output within its error bound
 * (tolerance.h) of the float64 reference: a 1x1 relu layer whose bias leaves an output near zero
 * is judged by the magnitudes it came from, not by its own. The loop kernel runs under SIGSERVE_CPU_ISA
 * = s_caps[CAP] and must say so (its isa). LABEL names the case in a failure. */
static void s_check_on (const uint32_t *sizes, const activation_t *acts, size_t layers, uint32_t rows, cpu_kernel_t kernel,
                        weight_dtype_t dtype, int cap, const char *label)
{
    weights_t *w = weights_random (sizes, acts, layers, rng_next (&s_seed));
    ck_assert_ptr_nonnull (w);
    model_config_t cfg = s_config (kernel, rows + 2, dtype);
    char err[256] = "";
    setenv ("SIGSERVE_CPU_ISA", s_caps[cap], 1);
    backend_model_t *m = backend_cpu_iface.load (w, &cfg, cfg.device, err, sizeof err);
    unsetenv ("SIGSERVE_CPU_ISA");
    ck_assert_msg (m != NULL, "load: %s", err);
    if (kernel == CPU_KERNEL_LOOP)
        ck_assert_str_eq (backend_cpu_iface.isa (m), s_expected_isa (cap, dtype, cfg.max_rows));
    size_t nin = (size_t) rows * w->input_size, nout = (size_t) rows * w->output_size;
    const int ROUNDS = nout >= 32 ? 8 : (int) ((256 + nout - 1) / nout);
    /* the inputs one float past malloc's alignment: a row that needs no padding is read where it is
     * (backend_cpu.c), on every path, with no alignment to count on */
    float *in_buf = malloc ((nin + 1) * sizeof (float)), *in = in_buf + 1, *out = malloc (nout * sizeof (float));
    double *ref = malloc (nout * sizeof (double)), *bound = malloc (nout * sizeof (double));
    for (int round = 0; round < ROUNDS; round++) {
        /* features in +-1, or in [0, 1) every other round (int8 quantizes those with 255 steps) */
        for (size_t i = 0; i < nin; i++)
            in[i] = rng_uniform (&s_seed, round & 1 ? 0.0f : -1.0f, 1.0f);
        for (size_t i = 0; i < nout; i++)
            out[i] = NAN;
        ck_assert_int_eq (backend_cpu_iface.infer (m, in, rows, out, err, sizeof err), SIG_OK);
        for (size_t i = 0; i < nout; i++)
            ck_assert_msg (isfinite (out[i]), "output %zu not written", i);
        ck_assert_int_eq (tol_mlp_held (w, dtype, in, rows, ref, bound), 0);
        TOL_ASSERT (out, ref, bound, nout, w->output_size, "%s rows %u kernel %s %s on %s round %d", label, rows,
                    cpu_kernel_name (kernel), weight_dtype_name (dtype), s_caps[cap], round);
    }
    free (in_buf);
    free (out);
    free (ref);
    free (bound);
    backend_cpu_iface.destroy (&m);
    ck_assert_ptr_null (m);
    weights_destroy (&w);
}

/* The blas kernel (f32), then the loop kernel in every dtype on every path. */
static void s_check (const uint32_t *sizes, const activation_t *acts, size_t layers, uint32_t rows, const char *label)
{
    s_check_on (sizes, acts, layers, rows, CPU_KERNEL_BLAS, WEIGHT_DTYPE_F32, 0, label);
    for (int d = 0; d < WEIGHT_DTYPE_COUNT; d++)
        for (int cap = 0; cap < s_cap_count (); cap++)
            s_check_on (sizes, acts, layers, rows, CPU_KERNEL_LOOP, (weight_dtype_t) d, cap, label);
}

/* One dense layer out x in: widths not a multiple of any vector (1, 31, 33, 597, 293, 17, 4097), of
 * a vector but not of a group (48: three blocks of 16), 1-wide; rows 1 and 5 (the k loop in chunks),
 * each activation. */
static const uint32_t s_shapes[][2] = { { 1, 1 }, { 31, 33 }, { 597, 293 }, { 512, 256 }, { 256, 512 }, { 17, 4097 },
                                        { 48, 1 }, { 1, 300 } };

START_TEST (single_layer_matches_reference)
{
    const uint32_t out = s_shapes[_i][0], in = s_shapes[_i][1];
    const uint32_t rows_list[] = { 1, 5 };
    const activation_t acts[] = { ACTIVATION_NONE, ACTIVATION_RELU, ACTIVATION_SIGMOID, ACTIVATION_TANH };
    for (int r = 0; r < 2; r++)
        for (int a = 0; a < 4; a++) {
            uint32_t sizes[2] = { in, out };
            char label[64];
            snprintf (label, sizeof label, "%ux%u act %s", out, in, activation_name (acts[a]));
            s_check (sizes, &acts[a], 1, rows_list[r], label);
        }
}
END_TEST

/* Chains whose widths go up and down, so a wide layer leaves data where a narrow one pads. */
START_TEST (chains_match_reference)
{
    const uint32_t demo[] = { 512, 256, 64, 1 };
    const uint32_t odd[] = { 293, 597, 31, 33, 1 };
    const uint32_t tiny[] = { 1, 1, 1 };
    const uint32_t wide[] = { 7, 1000, 3 };
    const struct { const uint32_t *sizes; size_t layers; } chains[] = { { demo, 3 }, { odd, 4 }, { tiny, 2 }, { wide, 2 } };
    activation_t acts[4] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_TANH, ACTIVATION_NONE };
    /* rows 16 and 21: batches (AMX tiles for int8: a full tile and a partial one) */
    const uint32_t rows_list[] = { 1, 3, 7, 16, 21 };
    for (size_t c = 0; c < 4; c++)
        for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
            const uint32_t rows = rows_list[ri];
            acts[chains[c].layers - 1] = ACTIVATION_NONE;
            char label[32];
            snprintf (label, sizeof label, "chain %zu", c);
            s_check (chains[c].sizes, acts, chains[c].layers, rows, label);
        }
}
END_TEST

START_TEST (kernel_names_and_destroy_twice)
{
    const uint32_t sizes[] = { 3, 2 };
    const activation_t act = ACTIVATION_NONE;
    weights_t *w = weights_random (sizes, &act, 1, 7);
    char err[256];
    model_config_t cfg = s_config (CPU_KERNEL_BLAS, 1, WEIGHT_DTYPE_F32);
    backend_model_t *m = backend_cpu_iface.load (w, &cfg, cfg.device, err, sizeof err);
    ck_assert_str_eq (backend_cpu_iface.kernel_name (m), "blas");
    backend_cpu_iface.destroy (&m);
    backend_cpu_iface.destroy (&m);
    ck_assert_ptr_null (m);
    weights_destroy (&w);
}
END_TEST

/* weight_dtype is a promise about how the weights are held: the loop kernel holds each dtype it is
 * given (and says which in its isa and /models), the blas kernel holds f32 only and refuses the others
 * by name at load, whether configured or measured by "auto" (before this backend held f16, bf16 and
 * int8, it refused them all). */
START_TEST (weight_dtypes_held_or_refused_by_name)
{
    static const char *const cases[][4] = {
        /* backend, cpu_kernel, weight_dtype, expected error text ("": loads) */
        { "cpu", "loop", "f16", "" },
        { "cpu", "loop", "bf16", "" },
        { "cpu", "loop", "int8", "" },
        { "auto", "loop", "int8", "" },
        { "cpu", "blas", "bf16", "model \"m\": weight_dtype \"bf16\": cpu_kernel \"blas\" holds weights in f32 only; use "
                                 "\"cpu_kernel\": \"loop\" or \"weight_dtype\": \"f32\"" },
        { "auto", "blas", "f16", "(cpu: not loaded: weight_dtype \"f16\": cpu_kernel \"blas\" holds weights in f32 only" },
    };
    char path[1024];
    snprintf (path, sizeof path, "%s/models/tick_mlp.safetensors", tu_build_abs ());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[2048], err[1024] = "";
        snprintf (json, sizeof json,
                  "{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:1\"] }, \"models\": [ { \"name\": \"m\", "
                  "\"backend\": \"%s\", \"cpu_kernel\": \"%s\", \"weight_dtype\": \"%s\", \"weights\": \"%s\", "
                  "\"layers\": [ { \"weight\": \"0.weight\", \"activation\": \"relu\" }, { \"weight\": \"2.weight\", "
                  "\"activation\": \"relu\" }, { \"weight\": \"4.weight\" } ] } ] }",
                  cases[i][0], cases[i][1], cases[i][2], path);
        config_t *cfg = config_parse (json, "t.json", NULL, err, sizeof err);
        ck_assert_msg (cfg != NULL, "%s", err);
        if (strcmp (cases[i][0], "auto") == 0 && backends_gpu (NULL, 0))
            cfg->models[0].devices[0] = 63;     /* no GPU candidate here either: the CPU decides */
        model_t *m = model_new (&cfg->models[0], &cfg->server, NULL, NULL, err, sizeof err);
        if (cases[i][3][0]) {
            ck_assert_ptr_null (m);
            ck_assert_msg (strstr (err, cases[i][3]) != NULL, "case %zu: %s", i, err);
        } else {
            ck_assert_msg (m != NULL, "case %zu: %s", i, err);
            model_info_t info;
            model_describe (m, &info);
            ck_assert_str_eq (info.weight_dtype, cases[i][2]);
            ck_assert_str_eq (info.isa, s_expected_isa (3, cfg->models[0].weight_dtype, cfg->models[0].max_rows));
            model_destroy (&m);
        }
        config_destroy (&cfg);
    }
}
END_TEST

/* Packing: every weight as a kernel computes with it (cpu_dense_weight) within its dtype's rounding of
 * the f32 weight (tolerance.c's u_w, eta_w; int8: half a step of its row's scale), the padding zero;
 * f16 conversion to nearest even against the compiler's _Float16, every f16 back to f32 exactly. */
START_TEST (packed_weights_within_their_rounding)
{
    const uint32_t sizes[] = { 37, 45 };
    const activation_t act = ACTIVATION_NONE;
    weights_t *w = weights_random (sizes, &act, 1, rng_next (&s_seed));
    dense_layer_t *src = &w->layers[0];
    /* exact bf16 values, ties, subnormals, zeros of both signs, a power of two's neighbours */
    const float special[] = { 0.0f, -0.0f, 1.0f, -1.0f, 0x1.01p0f, 0x1.fffffep0f, 0x1.008p0f, 1e-40f, -3e-39f,
                              -65504.0f, 65504.0f, 6e-8f, 2.9e-8f };
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        src->weight[i * 3] = special[i];
    for (int d = WEIGHT_DTYPE_F32; d < WEIGHT_DTYPE_COUNT; d++) {
        cpu_dense_t L;
        char err[256];
        ck_assert_msg (cpu_dense_pack (&L, src, (weight_dtype_t) d, "0.weight", err, sizeof err) == 0, "%s", err);
        ck_assert_uint_eq (L.in_pad, d == WEIGHT_DTYPE_INT8 ? 64 : 48);
        ck_assert_uint_eq (L.out_pad, 48);
        /* the layout: each block of 16 outputs its own 16 in_pad elements (a split's share of blocks reads
         * only its own lines), every weight once; W[17][5] at 16 in_pad + (16 (5 / step) + 1) step + 5 % step */
        static const size_t at_17_5[WEIGHT_DTYPE_COUNT] = { [WEIGHT_DTYPE_F32] = 849, [WEIGHT_DTYPE_F16] = 849,
                                                            [WEIGHT_DTYPE_BF16] = 835, [WEIGHT_DTYPE_INT8] = 1093 };
        ck_assert_uint_eq (cpu_dense_index (&L, 17, 5), at_17_5[d]);
        unsigned char *seen = calloc ((size_t) L.out_pad * L.in_pad, 1);
        for (uint32_t o = 0; o < L.out_pad; o++)
            for (uint32_t k = 0; k < L.in_pad; k++) {
                const size_t i = cpu_dense_index (&L, o, k), b = o / CPU_DENSE_BLOCK;
                ck_assert_msg (i >= b * CPU_DENSE_BLOCK * L.in_pad && i < (b + 1) * CPU_DENSE_BLOCK * L.in_pad && !seen[i],
                               "%s W[%u][%u] at %zu", weight_dtype_name ((weight_dtype_t) d), o, k, i);
                seen[i] = 1;
            }
        free (seen);
        for (uint32_t o = 0; o < L.out_pad; o++) {
            double wmax = 0;
            for (uint32_t k = 0; o < src->out && k < src->in; k++)
                wmax = fmax (wmax, fabs ((double) src->weight[(size_t) o * src->in + k]));
            for (uint32_t k = 0; k < L.in_pad; k++) {
                const double want = o < src->out && k < src->in ? src->weight[(size_t) o * src->in + k] : 0.0;
                const double got = cpu_dense_weight (&L, o, k);
                const double tol = d == WEIGHT_DTYPE_F32 ? 0
                                   : d == WEIGHT_DTYPE_F16 ? 0x1p-11 * fabs (want) + 0x1p-25
                                   : d == WEIGHT_DTYPE_BF16 ? 0x1p-8 / (1 - 0x1p-8) * fabs (want) + 0x1p-133
                                   : wmax / 127 * (0.5 + 0x1p-10);
                ck_assert_msg (fabs (got - want) <= tol, "%s W[%u][%u] = %.9g held as %.9g", weight_dtype_name ((weight_dtype_t) d),
                               o, k, want, got);
            }
        }
        cpu_dense_free (&L);
    }
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float v = cpu_dense_f32_from_f16 ((uint16_t) h);
        if (isnan (v))
            continue;
        ck_assert_uint_eq (cpu_dense_f16_from_f32 (v), h);
        ck_assert_float_eq (v, (float) *(const _Float16 *) &(uint16_t) { (uint16_t) h });
    }
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t) rng_next (&s_seed);
        float v;
        memcpy (&v, &u, sizeof v);
        if (isnan (v))
            continue;
        const _Float16 want = (_Float16) v;
        uint16_t wbits;
        memcpy (&wbits, &want, sizeof wbits);
        ck_assert_msg (cpu_dense_f16_from_f32 (v) == wbits, "%a: %04x, want %04x", (double) v, cpu_dense_f16_from_f32 (v), wbits);
    }
    weights_destroy (&w);
}
END_TEST

/* A weight the dtype cannot hold is refused by name, never stored as inf; int8's sums stay in int32. */
START_TEST (unholdable_weights_refused)
{
    const uint32_t sizes[] = { 3, 2 };
    const activation_t act = ACTIVATION_NONE;
    weights_t *w = weights_random (sizes, &act, 1, 7);
    w->layers[0].weight[4] = 70000.0f;
    cpu_dense_t L;
    char err[256];
    ck_assert_int_eq (cpu_dense_pack (&L, &w->layers[0], WEIGHT_DTYPE_F16, "0.weight", err, sizeof err), -1);
    ck_assert_str_eq (err, "weight_dtype \"f16\": weight 0.weight [1][1] = 70000 does not fit in f16 (largest finite "
                           "65504); use \"weight_dtype\": \"f32\"");
    ck_assert_int_eq (cpu_dense_pack (&L, &w->layers[0], WEIGHT_DTYPE_BF16, "0.weight", err, sizeof err), 0);
    cpu_dense_free (&L);
    w->layers[0].weight[4] = 3.4e38f;
    ck_assert_int_eq (cpu_dense_pack (&L, &w->layers[0], WEIGHT_DTYPE_BF16, "0.weight", err, sizeof err), -1);
    ck_assert_msg (strstr (err, "does not fit in bf16 (largest finite 3.39e38)") != NULL, "%s", err);
    weights_destroy (&w);
    const uint32_t wide[] = { CPU_DENSE_INT8_MAX_IN + 1, 1 };
    w = weights_random (wide, &act, 1, 7);
    ck_assert_int_eq (cpu_dense_pack (&L, &w->layers[0], WEIGHT_DTYPE_INT8, "0.weight", err, sizeof err), -1);
    ck_assert_str_eq (err, "weight_dtype \"int8\": 0.weight has 65537 inputs, more than an int32 dot product of int8 "
                           "weights and u8 activations can sum (65536); use \"weight_dtype\": \"bf16\"");
    weights_destroy (&w);
}
END_TEST

/* int8: integer sums, one quantization rule, one rescaling: every path gives the scalar path's bits
 * (rows 1 and 5, so the chunked k loop of batches too). */
START_TEST (int8_paths_agree_bit_for_bit)
{
    const uint32_t sizes[] = { 293, 597, 31, 33, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_TANH, ACTIVATION_NONE, ACTIVATION_SIGMOID };
    weights_t *w = weights_random (sizes, acts, 4, rng_next (&s_seed));
    enum { ROWS = 21 };
    static float in[ROWS * 293], out[4][ROWS];
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        in[i] = rng_uniform (&s_seed, -2.0f, 2.0f);
    const uint32_t calls[] = { 1, 5, 16, ROWS };
    for (int cap = 0; cap < s_cap_count (); cap++) {
        model_config_t cfg = s_config (CPU_KERNEL_LOOP, ROWS, WEIGHT_DTYPE_INT8);
        char err[256];
        setenv ("SIGSERVE_CPU_ISA", s_caps[cap], 1);
        backend_model_t *m = backend_cpu_iface.load (w, &cfg, 0, err, sizeof err);
        unsetenv ("SIGSERVE_CPU_ISA");
        ck_assert_msg (m != NULL, "%s", err);
        ck_assert_str_eq (backend_cpu_iface.isa (m), s_expected_isa (cap, WEIGHT_DTYPE_INT8, ROWS));
        for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
            ck_assert_int_eq (backend_cpu_iface.infer (m, in, calls[c], out[cap], err, sizeof err), SIG_OK);
            for (uint32_t r = 0; r < calls[c]; r++)
                ck_assert_msg (memcmp (&out[cap][r], &out[0][r], sizeof (float)) == 0 || cap == 0,
                               "%u rows, row %u: %s %.9g, scalar %.9g", calls[c], r, s_caps[cap], (double) out[cap][r],
                               (double) out[0][r]);
        }
        backend_cpu_iface.destroy (&m);
    }
    weights_destroy (&w);
}
END_TEST

/* SIGSERVE_CPU_ISA only lowers: a cap above the CPU gives what the CPU has; an unknown value is
 * ignored (and said once in the log). */
START_TEST (isa_cap_lowers_only)
{
    cpu_path_t cap;
    setenv ("SIGSERVE_CPU_ISA", "amx", 1);
    ck_assert_int_eq (cpu_isa_cap (&cap), 0);
    ck_assert_int_eq (cap, CPU_PATH_AMX);
    ck_assert_str_eq (cpu_path_name (cpu_isa_path (WEIGHT_DTYPE_BF16, 1, NULL, 0), WEIGHT_DTYPE_BF16),
                      s_expected_isa (3, WEIGHT_DTYPE_BF16, 1));
    setenv ("SIGSERVE_CPU_ISA", "avx1024", 1);
    ck_assert_int_eq (cpu_isa_cap (&cap), -1);
    ck_assert_str_eq (cpu_path_name (cpu_isa_path (WEIGHT_DTYPE_INT8, 1, NULL, 0), WEIGHT_DTYPE_INT8),
                      s_expected_isa (3, WEIGHT_DTYPE_INT8, 1));
    setenv ("SIGSERVE_CPU_ISA", "scalar", 1);
    char why[160];
    ck_assert_int_eq (cpu_isa_path (WEIGHT_DTYPE_F32, 1, why, sizeof why), CPU_PATH_SCALAR);
    if (cpu_isa_features ()->avx2)
        ck_assert_str_eq (why, "scalar: SIGSERVE_CPU_ISA caps it");
    unsetenv ("SIGSERVE_CPU_ISA");
}
END_TEST

int main (void)
{
    s_seed = (uint64_t) time (NULL) ^ ((uint64_t) clock () << 32);
    printf ("seed %llu\n", (unsigned long long) s_seed);
    Suite *s = suite_create ("cpu_backend");
    TCase *tc = tcase_create ("reference");
    tcase_set_timeout (tc, 300);
    tcase_add_loop_test (tc, single_layer_matches_reference, 0, (int) (sizeof s_shapes / sizeof s_shapes[0]));
    tcase_add_test (tc, chains_match_reference);
    tcase_add_test (tc, kernel_names_and_destroy_twice);
    tcase_add_test (tc, weight_dtypes_held_or_refused_by_name);
    tcase_add_test (tc, packed_weights_within_their_rounding);
    tcase_add_test (tc, unholdable_weights_refused);
    tcase_add_test (tc, int8_paths_agree_bit_for_bit);
    tcase_add_test (tc, isa_cap_lowers_only);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
