/* The CPU backend against the float64 reference, on fresh random inputs at irregular shapes: every
 * output within its forward error bound (tolerance.h). */
#include "rng.h"
#include "reference.h"
#include "backends/backend.h"
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

static model_config_t s_config (cpu_kernel_t kernel, uint32_t max_rows)
{
    model_config_t cfg;
    memset (&cfg, 0, sizeof cfg);
    strcpy (cfg.name, "t");
    strcpy (cfg.version, "1");
    cfg.backend = BACKEND_CPU;
    cfg.cpu_kernel = kernel;
    cfg.max_rows = max_rows;
    return cfg;
}

/* Runs the model on fresh inputs, round after round (so state one call leaves cannot hide in the
 * next), outputs poisoned with NaN first, and checks every output within its error bound
 * (tolerance.h) of the float64 reference: a 1x1 relu layer whose bias leaves an output near zero
 * is judged by the magnitudes it came from, not by its own. LABEL names the case in a failure. */
static void s_check (const uint32_t *sizes, const activation_t *acts, size_t layers, uint32_t rows, cpu_kernel_t kernel,
                     const char *label)
{
    weights_t *w = weights_random (sizes, acts, layers, rng_next (&s_seed));
    ck_assert_ptr_nonnull (w);
    model_config_t cfg = s_config (kernel, rows + 2);
    char err[256] = "";
    backend_model_t *m = backend_cpu_iface.load (w, &cfg, cfg.device, err, sizeof err);
    ck_assert_msg (m != NULL, "load: %s", err);
    size_t nin = (size_t) rows * w->input_size, nout = (size_t) rows * w->output_size;
    const int ROUNDS = nout >= 32 ? 8 : (int) ((256 + nout - 1) / nout);
    float *in = malloc (nin * sizeof (float)), *out = malloc (nout * sizeof (float));
    double *ref = malloc (nout * sizeof (double)), *bound = malloc (nout * sizeof (double));
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t i = 0; i < nin; i++)
            in[i] = rng_uniform (&s_seed, -1.0f, 1.0f);
        for (size_t i = 0; i < nout; i++)
            out[i] = NAN;
        ck_assert_int_eq (backend_cpu_iface.infer (m, in, rows, out, err, sizeof err), SIG_OK);
        for (size_t i = 0; i < nout; i++)
            ck_assert_msg (isfinite (out[i]), "output %zu not written", i);
        ck_assert_int_eq (tol_mlp (w, in, rows, ref, bound), 0);
        TOL_ASSERT (out, ref, bound, nout, w->output_size, "%s rows %u kernel %s round %d", label, rows,
                    cpu_kernel_name (kernel), round);
    }
    free (in);
    free (out);
    free (ref);
    free (bound);
    backend_cpu_iface.destroy (&m);
    ck_assert_ptr_null (m);
    weights_destroy (&w);
}

/* One dense layer out x in (the shapes), both kernels, rows 1 and 5, each activation. */
static const uint32_t s_shapes[][2] = { { 1, 1 }, { 31, 33 }, { 597, 293 }, { 512, 256 }, { 256, 512 }, { 17, 4097 } };

START_TEST (single_layer_matches_reference)
{
    const uint32_t out = s_shapes[_i][0], in = s_shapes[_i][1];
    const uint32_t rows_list[] = { 1, 5 };
    const activation_t acts[] = { ACTIVATION_NONE, ACTIVATION_RELU, ACTIVATION_SIGMOID, ACTIVATION_TANH };
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < 2; r++)
            for (int a = 0; a < 4; a++) {
                uint32_t sizes[2] = { in, out };
                char label[64];
                snprintf (label, sizeof label, "%ux%u act %s", out, in, activation_name (acts[a]));
                s_check (sizes, &acts[a], 1, rows_list[r], (cpu_kernel_t) k, label);
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
    for (size_t c = 0; c < 4; c++)
        for (int k = 0; k < 2; k++)
            for (uint32_t rows = 1; rows <= 7; rows += 2) {
                acts[chains[c].layers - 1] = ACTIVATION_NONE;
                char label[32];
                snprintf (label, sizeof label, "chain %zu", c);
                s_check (chains[c].sizes, acts, chains[c].layers, rows, (cpu_kernel_t) k, label);
            }
}
END_TEST

START_TEST (kernel_names_and_destroy_twice)
{
    const uint32_t sizes[] = { 3, 2 };
    const activation_t act = ACTIVATION_NONE;
    weights_t *w = weights_random (sizes, &act, 1, 7);
    char err[256];
    model_config_t cfg = s_config (CPU_KERNEL_BLAS, 1);
    backend_model_t *m = backend_cpu_iface.load (w, &cfg, cfg.device, err, sizeof err);
    ck_assert_str_eq (backend_cpu_iface.kernel_name (m), "blas");
    backend_cpu_iface.destroy (&m);
    backend_cpu_iface.destroy (&m);
    ck_assert_ptr_null (m);
    weights_destroy (&w);
}
END_TEST

/* weight_dtype is a promise about how the weights are held: a backend that holds f32 only refuses
 * f16 and bf16 by name at load, whether configured or measured by "auto" (before, the CPU backend
 * took "f16" without a word and computed in f32). */
START_TEST (half_precision_weights_refused_by_f32_backends)
{
    static const char *const cases[][3] = {
        /* backend, weight_dtype, expected text */
        { "cpu", "f16", "model \"m\": weight_dtype \"f16\": backend \"cpu\" (loop) holds weights in f32 only; use "
                        "\"weight_dtype\": \"f32\"" },
        { "cpu", "bf16", "model \"m\": weight_dtype \"bf16\": backend \"cpu\" (loop) holds weights in f32 only" },
        { "auto", "f16", "(cpu: not loaded: holds weights in f32 only, not f16)" },
    };
    char path[1024];
    snprintf (path, sizeof path, "%s/models/tick_mlp.safetensors", tu_build_abs ());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[2048], err[1024] = "";
        snprintf (json, sizeof json,
                  "{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:1\"] }, \"models\": [ { \"name\": \"m\", "
                  "\"backend\": \"%s\", \"weight_dtype\": \"%s\", \"weights\": \"%s\", \"layers\": [ "
                  "{ \"weight\": \"0.weight\", \"activation\": \"relu\" }, { \"weight\": \"2.weight\", "
                  "\"activation\": \"relu\" }, { \"weight\": \"4.weight\" } ] } ] }",
                  cases[i][0], cases[i][1], path);
        config_t *cfg = config_parse (json, "t.json", NULL, err, sizeof err);
        ck_assert_msg (cfg != NULL, "%s", err);
        if (strcmp (cases[i][0], "auto") == 0 && backends_gpu (NULL, 0))
            cfg->models[0].devices[0] = 63;     /* no GPU candidate here either: the CPU's refusal decides */
        model_t *m = model_new (&cfg->models[0], &cfg->server, NULL, err, sizeof err);
        ck_assert_ptr_null (m);
        ck_assert_msg (strstr (err, cases[i][2]) != NULL, "case %zu: %s", i, err);
        config_destroy (&cfg);
    }
}
END_TEST

int main (void)
{
    s_seed = (uint64_t) time (NULL) ^ ((uint64_t) clock () << 32);
    printf ("seed %llu\n", (unsigned long long) s_seed);
    Suite *s = suite_create ("cpu_backend");
    TCase *tc = tcase_create ("reference");
    tcase_set_timeout (tc, 120);
    tcase_add_loop_test (tc, single_layer_matches_reference, 0, (int) (sizeof s_shapes / sizeof s_shapes[0]));
    tcase_add_test (tc, chains_match_reference);
    tcase_add_test (tc, kernel_names_and_destroy_twice);
    tcase_add_test (tc, half_precision_weights_refused_by_f32_backends);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
