/* The GRU: its float64 reference (weights/gru.c) against a case computed by hand, its weights and
 * config as the server reads them (PyTorch's names and gate order, every bad tensor refused naming
 * it), and the CPU backend (backend_gru_cpu.c) against the reference: full windows of 1 to 3 rows
 * and streams (interleaved, past the window, reset, the raw-step ring), at irregular shapes (odd
 * inputs, hidden sizes off the 16-unit blocks, 1 to 3 layers, windows 1 to 9, heads of each
 * activation), on fresh random inputs, every output poisoned with NaN before it is written. Each
 * output within its bound of the reference (tolerance_gru.h); a streamed output and the full window
 * over the same steps, each within it, within twice it of each other. The link wraps the allocator
 * (the Makefile): once loaded, the backend's infer, stream_step and stream_advance allocate nothing. */
#include "backends/backend_gru.h"
#include "backends/backends.h"
#include "base/config.h"
#include "gru_weights.h"
#include "rng.h"
#include "rnn_tests.h"
#include "st_write.h"
#include "testutil.h"
#include "tolerance_gru.h"
#include "weights/gru.h"
#include "weights/weights.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__real_malloc (size_t n);
void *__real_calloc (size_t n, size_t m);
void *__real_realloc (void *p, size_t n);
void *__real_aligned_alloc (size_t a, size_t n);
int __real_posix_memalign (void **p, size_t a, size_t n);

static int s_counting;      /* one thread: the test's */
static long s_allocations;

void *__wrap_malloc (size_t n) { s_allocations += s_counting; return __real_malloc (n); }
void *__wrap_calloc (size_t n, size_t m) { s_allocations += s_counting; return __real_calloc (n, m); }
void *__wrap_realloc (void *p, size_t n) { s_allocations += s_counting; return __real_realloc (p, n); }
void *__wrap_aligned_alloc (size_t a, size_t n) { s_allocations += s_counting; return __real_aligned_alloc (a, n); }
int __wrap_posix_memalign (void **p, size_t a, size_t n)
{
    s_allocations += s_counting;
    return __real_posix_memalign (p, a, n);
}

static const backend_iface_t *s_cpu = &backend_gru_cpu_iface;

/* Random weights of SHAPE (with biases, or none), loaded as the server loads them, with MAX_ROWS and
 * SLOTS stream slots; the backend model (and W, CFG). */
static backend_model_t *s_load_bias (const lstm_shape_t *shape, bool bias, uint32_t max_rows, uint32_t slots,
                                     weights_t **w, model_config_t *cfg)
{
    char *path = s_path ("gru.safetensors");
    char err[512] = "";
    ck_assert_msg (gru_random_file (path, shape, bias, rng_next (&s_seed), err, sizeof err) == 0, "%s", err);
    gru_config (cfg, "gru", path, shape);
    cfg->max_rows = max_rows;
    cfg->max_batch_rows = max_rows;
    cfg->max_streams = slots;
    *w = weights_load (cfg, err, sizeof err);
    ck_assert_msg (*w != NULL, "weights: %s", err);
    backend_model_t *m = s_cpu->load (*w, cfg, 0, err, sizeof err);
    ck_assert_msg (m != NULL, "load: %s", err);
    free (path);
    return m;
}

static backend_model_t *s_load (const lstm_shape_t *shape, uint32_t max_rows, uint32_t slots, weights_t **w,
                                model_config_t *cfg)
{
    return s_load_bias (shape, true, max_rows, slots, w, cfg);
}

static const char *s_label (void) { return "f32"; }

/* Every third step (i % 3 == 1) leaves its advance owed: the next step runs it. */
static const rnn_suite_t s_gru = { .B = &backend_gru_cpu_iface, .load = s_load, .window_bound = tol_gru_window,
                                   .stream_bound = tol_gru_stream, .reference = gru_reference_window,
                                   .label = s_label, .owe_every = 3 };

START_TEST (hand_computed_case)
{
    /* 1 layer, 1 input, 1 unit, window 2, head y = 2 h - 0.5; the expected values computed in
     * float64 from PyTorch's equations by hand (python: the cell written out, gates r, z, n). */
    const float wih[3] = { 0.5f, -0.25f, 0.75f }, whh[3] = { 0.1f, 0.2f, -0.3f };
    const float bih[3] = { 0.05f, 0.1f, -0.05f }, bhh[3] = { 0.0f, 0.3f, 0.1f };
    const float hw = 2.0f, hb = -0.5f;
    const st_write_tensor_t t[] = {
        { "gru.weight_ih_l0", 2, { 3, 1 }, wih }, { "gru.weight_hh_l0", 2, { 3, 1 }, whh },
        { "gru.bias_ih_l0", 1, { 3 }, bih },      { "gru.bias_hh_l0", 1, { 3 }, bhh },
        { "head.weight", 2, { 1, 1 }, &hw },       { "head.bias", 1, { 1 }, &hb },
    };
    char *path = s_path ("hand.safetensors");
    char err[512] = "";
    ck_assert_msg (safetensors_write_f32 (path, t, 6, err, sizeof err) == 0, "%s", err);
    const lstm_shape_t shape = { .layers = 1, .step_size = 1, .hidden = 1, .out = 1, .window = 2 };
    model_config_t cfg;
    gru_config (&cfg, "hand", path, &shape);
    weights_t *w = weights_load (&cfg, err, sizeof err);
    ck_assert_msg (w != NULL, "%s", err);
    ck_assert_int_eq (w->type, MODEL_TYPE_GRU);
    ck_assert_ptr_null (w->lstm);
    ck_assert_uint_eq (w->input_size, 2);
    ck_assert_uint_eq (w->window, 2);
    ck_assert_uint_eq (w->step_size, 1);
    backend_model_t *m = s_cpu->load (w, &cfg, 0, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    /* the hand's values: the stream's windows [0, 1], [1, -2], [-2, 3]; [1, -2] alone */
    const double want[3] = { 0.09539810594096676, -0.5757632654649656, 0.4662792339435027 };
    s_check_hand (&s_gru, m, w, -0.5757632654649656, want);
    weights_destroy (&w);
    unlink (path);
    free (path);
}
END_TEST

/* Irregular shapes: H off the 16-unit blocks (1, 5, 17, 33, 40, 50: one block, an odd number of
 * blocks, several), odd inputs, 1 to 3 layers, windows 1 to 9, heads of 1 to 3 outputs with each
 * activation, rows 1 to 3. */
START_TEST (full_window_matches_reference)
{
    const lstm_shape_t shapes[] = {
        { .layers = 1, .step_size = 1, .hidden = 1, .out = 1, .window = 1 },
        { .layers = 1, .step_size = 7, .hidden = 5, .out = 3, .window = 4, .head_act = ACTIVATION_TANH },
        { .layers = 2, .step_size = 33, .hidden = 17, .out = 1, .window = 7, .head_act = ACTIVATION_SIGMOID },
        { .layers = 3, .step_size = 3, .hidden = 40, .out = 2, .window = 5, .head_act = ACTIVATION_RELU },
        { .layers = 2, .step_size = 64, .hidden = 33, .out = 1, .window = 9 },
        { .layers = 1, .step_size = 13, .hidden = 50, .out = 2, .window = 3 },
    };
    s_check_shapes (&s_gru, shapes, sizeof shapes / sizeof shapes[0], 1, 3);
}
END_TEST

/* PyTorch's bias=False: no bias tensors, zeros, the same arithmetic. */
START_TEST (no_biases)
{
    const lstm_shape_t s = { .layers = 2, .step_size = 6, .hidden = 21, .out = 2, .window = 4 };
    weights_t *w;
    model_config_t cfg;
    backend_model_t *m = s_load_bias (&s, false, 2, 1, &w, &cfg);
    for (size_t k = 0; k < w->rnn->layer_count; k++)
        for (size_t i = 0; i < 3 * (size_t) s.hidden; i++)
            ck_assert (w->rnn->layers[k].bias_ih[i] == 0.0f && w->rnn->layers[k].bias_hh[i] == 0.0f);
    s_check_windows (&s_gru, m, w, 2, 3, "no biases");
    s_cpu->destroy (&m);
    weights_destroy (&w);
}
END_TEST

START_TEST (streams_match_reference)
{
    const lstm_shape_t a = { .layers = 2, .step_size = 5, .hidden = 19, .out = 2, .window = 6 };
    s_check_streams (&s_gru, &a, 3, 17, 1);
    const lstm_shape_t b = { .layers = 3, .step_size = 12, .hidden = 33, .out = 1, .window = 1 };
    s_check_streams (&s_gru, &b, 2, 5, 1);
    const lstm_shape_t c = { .layers = 1, .step_size = 2, .hidden = 3, .out = 1, .window = 2,
                             .head_act = ACTIVATION_TANH };
    s_check_streams (&s_gru, &c, 4, 9, 1);
    const lstm_shape_t d = { .layers = 1, .step_size = 9, .hidden = 48, .out = 3, .window = 5,
                             .head_act = ACTIVATION_SIGMOID };
    s_check_streams (&s_gru, &d, 2, 12, 1);
}
END_TEST

/* A ring too big for the projections (every slot W x 3Hp floats over 512 MiB) keeps raw steps and
 * projects them again at each advance: the same outputs. */
START_TEST (raw_step_ring)
{
    /* 2400 slots x 600 steps x 96 gate floats x 4 B = 553 MB of projections: raw steps instead */
    const lstm_shape_t s = { .layers = 2, .step_size = 3, .hidden = 32, .out = 1, .window = 600 };
    weights_t *w;
    model_config_t cfg;
    backend_model_t *m = s_load (&s, 1, 2400, &w, &cfg);
    const uint32_t steps = 610, in = 3;
    float *hist = malloc ((size_t) steps * in * sizeof (float));
    float y;
    double ref, bound;
    char err[256];
    s_cpu->stream_reset (m, 2399);
    for (uint32_t i = 0; i < steps; i++) {
        s_fill (hist + (size_t) i * in, in);
        y = NAN;
        ck_assert_int_eq (s_cpu->stream_step (m, 2399, hist + (size_t) i * in, &y, err, sizeof err), SIG_OK);
        s_cpu->stream_advance (m, 2399);
        if (i == 0 || i == 300 || i >= steps - 6) {
            ck_assert_int_eq (tol_gru_stream (w->rnn, hist, i + 1, &ref, &bound), 0);
            TOL_ASSERT (&y, &ref, &bound, 1, 1, "raw step ring, step %u", i);
        }
    }
    free (hist);
    s_cpu->destroy (&m);
    weights_destroy (&w);
}
END_TEST

/* The model types table's row: the CPU backend, the reference, what it can do. */
START_TEST (its_row_in_the_table)
{
    ck_assert_str_eq (model_type_name (MODEL_TYPE_GRU), "gru");
    const model_type_info_t *t = model_type_info (MODEL_TYPE_GRU);
    ck_assert_uint_eq (t->gates, 3);
    ck_assert_str_eq (t->gate_names, "r, z, n");
    ck_assert (model_type_can (MODEL_TYPE_GRU, MODEL_CAP_STREAM | MODEL_CAP_WINDOW | MODEL_CAP_BATCH));
    ck_assert (!model_type_can (MODEL_TYPE_GRU, MODEL_CAP_INLINE));
    ck_assert_ptr_eq (backends_type (MODEL_TYPE_GRU)->cpu, &backend_gru_cpu_iface);
    ck_assert_ptr_eq (backends_built (MODEL_TYPE_GRU, BACKEND_CPU), &backend_gru_cpu_iface);
    ck_assert_ptr_eq (backends_type (MODEL_TYPE_GRU)->reference, gru_reference_window);
    ck_assert_ptr_eq (backends_type (MODEL_TYPE_GRU)->reference_stream, gru_reference_stream);
    char list[64];
    ck_assert_str_eq (model_type_list (MODEL_CAP_STREAM, NULL, false, list, sizeof list), "lstm or gru");
}
END_TEST

/* A config of "type": "gru" as the server reads it: its keys, their defaults, and the errors that
 * name the key. */
START_TEST (config_keys)
{
    char err[512] = "";
    config_t *c = config_parse ("{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:5555\"] }, \"models\": [ { \"name\": "
                                "\"g\", \"type\": \"gru\", \"weights\": \"w.safetensors\", \"gru\": \"gru.\", \"window\": 8, "
                                "\"head\": { \"weight\": \"fc.weight\", \"activation\": \"tanh\" } } ] }",
                                "t.json", "/d", err, sizeof err);
    ck_assert_msg (c != NULL, "%s", err);
    const model_config_t *m = &c->models[0];
    ck_assert_int_eq (m->type, MODEL_TYPE_GRU);
    ck_assert_str_eq (m->rnn_prefix, "gru.");
    ck_assert_uint_eq (m->window, 8);
    ck_assert_str_eq (m->head.weight, "fc.weight");
    ck_assert_str_eq (m->head.bias, "fc.bias");
    ck_assert_int_eq (m->head.activation, ACTIVATION_TANH);
    ck_assert_uint_eq (m->max_streams, 1024);
    ck_assert_uint_eq (m->stream_idle_s, 300);
    ck_assert_str_eq (m->weights, "/d/w.safetensors");
    config_destroy (&c);
    const struct { const char *keys, *error; } bad[] = {
        { "\"window\": 8", "t.json: models[0].head: required key missing for \"type\": \"gru\"" },
        { "\"head\": { \"weight\": \"fc.weight\" }", "t.json: models[0].window: required key missing for \"type\": \"gru\"" },
        { "\"window\": 8, \"head\": { \"weight\": \"fc.weight\" }, \"lstm\": \"lstm.\"",
          "t.json: models[0].lstm: only for models of \"type\": \"lstm\"; this model is \"gru\"" },
        { "\"window\": 8, \"head\": { \"weight\": \"fc.weight\" }, \"advances_apart\": true",
          "t.json: models[0].advances_apart: only for models of \"type\": \"lstm\"; this model is \"gru\"" },
        { "\"window\": 8, \"head\": { \"weight\": \"fc.weight\" }, \"layers\": [ { \"weight\": \"0.weight\" } ]",
          "t.json: models[0].layers: only for models of \"type\": \"mlp\"; this model is \"gru\" (its layers come from "
          "the weight_ih_l{k}/weight_hh_l{k} tensors; its output layer is \"head\")" },
        { "\"window\": 0, \"head\": { \"weight\": \"fc.weight\" }",
          "t.json: models[0].window: expected an integer from 1 to 4096, got 0" },
        { "\"window\": 8, \"head\": { \"weight\": \"fc.weight\" }, \"gru\": 3",
          "t.json: models[0].gru: expected a string, got a number" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[1024];
        snprintf (json, sizeof json, "{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:5555\"] }, \"models\": [ { "
                  "\"name\": \"g\", \"type\": \"gru\", \"weights\": \"w\", %s } ] }", bad[i].keys);
        c = config_parse (json, "t.json", NULL, err, sizeof err);
        ck_assert_msg (c == NULL, "case %zu parsed", i);
        ck_assert_str_eq (err, bad[i].error);
    }
    /* the keys of a GRU on an MLP */
    c = config_parse ("{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:5555\"] }, \"models\": [ { \"name\": \"m\", "
                      "\"weights\": \"w\", \"layers\": [ { \"weight\": \"0.weight\" } ], \"gru\": \"gru.\" } ] }",
                      "t.json", NULL, err, sizeof err);
    ck_assert_ptr_null (c);
    ck_assert_str_eq (err, "t.json: models[0].gru: only for models of \"type\": \"gru\"; this model is \"mlp\"");
    c = config_parse ("{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:5555\"] }, \"models\": [ { \"name\": \"m\", "
                      "\"weights\": \"w\", \"layers\": [ { \"weight\": \"0.weight\" } ], \"window\": 4 } ] }",
                      "t.json", NULL, err, sizeof err);
    ck_assert_ptr_null (c);
    ck_assert_str_eq (err, "t.json: models[0].window: only for models of \"type\": \"lstm\" or \"gru\"; this model is "
                           "\"mlp\"");
}
END_TEST

/* Writes the tensors T (N of them) and loads them as a GRU of window 2: the error text, "" when it
 * loads. */
static void s_expect_load (const st_write_tensor_t *t, size_t n, const char *prefix, const char *error)
{
    char *path = s_path ("bad.safetensors");
    char err[512] = "";
    ck_assert_msg (safetensors_write_f32 (path, t, n, err, sizeof err) == 0, "%s", err);
    model_config_t cfg;
    const lstm_shape_t shape = { .layers = 1, .step_size = 2, .hidden = 2, .out = 1, .window = 2 };
    gru_config (&cfg, "bad", path, &shape);
    snprintf (cfg.rnn_prefix, sizeof cfg.rnn_prefix, "%s", prefix);
    weights_t *w = weights_load (&cfg, err, sizeof err);
    if (!error[0])
        ck_assert_msg (w != NULL, "%s", err);
    else {
        ck_assert_ptr_null (w);
        ck_assert_msg (strstr (err, error) != NULL, "error \"%s\", expected it to hold \"%s\"", err, error);
    }
    weights_destroy (&w);
    unlink (path);
    free (path);
}

/* Shapes checked against three gate blocks, every message naming the model, the tensor and the
 * expected shape; a file of LSTM weights (four blocks) is refused as a GRU. */
START_TEST (bad_weights_named)
{
    static float z[64];
    const st_write_tensor_t ok[] = {
        { "gru.weight_ih_l0", 2, { 6, 2 }, z }, { "gru.weight_hh_l0", 2, { 6, 2 }, z },
        { "gru.bias_ih_l0", 1, { 6 }, z },      { "gru.bias_hh_l0", 1, { 6 }, z },
        { "head.weight", 2, { 1, 2 }, z },      { "head.bias", 1, { 1 }, z },
    };
    s_expect_load (ok, 6, "gru.", "");
    st_write_tensor_t t[6];
    memcpy (t, ok, sizeof t);
    t[1].shape[0] = 8;      /* four blocks: an LSTM's */
    s_expect_load (t, 6, "gru.", "model \"bad\": tensor \"gru.weight_hh_l0\" has shape [8, 2], expected [3 x hidden, "
                   "hidden] (gates r, z, n)");
    memcpy (t, ok, sizeof t);
    t[0].shape[0] = 8;
    s_expect_load (t, 6, "gru.", "model \"bad\": tensor \"gru.weight_ih_l0\" has shape [8, 2], expected [6, 2] (3 x "
                   "hidden rows)");
    memcpy (t, ok, sizeof t);
    t[3].shape[0] = 4;
    s_expect_load (t, 6, "gru.", "model \"bad\": tensor \"gru.bias_hh_l0\" has shape [4], expected [6] (3 x hidden)");
    s_expect_load (ok, 3, "gru.", "gru.bias_hh_l0");          /* one bias of the two */
    s_expect_load (ok, 6, "rnn.", "rnn.weight_ih_l0");        /* the prefix names the tensors */
    memcpy (t, ok, sizeof t);
    t[4].shape[1] = 3;
    s_expect_load (t, 6, "gru.", "head");
}
END_TEST

/* Once loaded: whole windows of every row count, streams past the window (the advance on its own and
 * owed into the next step), a reset: no allocation (the count is of calls from sigserve's code). */
START_TEST (no_allocation_once_loaded)
{
    const lstm_shape_t s = { .layers = 2, .step_size = 6, .hidden = 21, .out = 2, .window = 5 };
    weights_t *w;
    model_config_t cfg;
    backend_model_t *m = s_load (&s, 3, 3, &w, &cfg);
    float x[3 * 5 * 6], y[6];
    s_fill (x, sizeof x / sizeof x[0]);
    char err[256];
    int failed = 0;
    s_allocations = 0;
    s_counting = 1;
    for (uint32_t rows = 1; rows <= 3; rows++)
        failed += s_cpu->infer (m, x, rows, y, err, sizeof err) != SIG_OK;
    s_cpu->stream_reset (m, 2);
    for (int i = 0; i < 12; i++) {
        failed += s_cpu->stream_step (m, 2, x + 6 * (i % 5), y, err, sizeof err) != SIG_OK;
        if (i % 2)
            s_cpu->stream_advance (m, 2);
    }
    s_counting = 0;
    ck_assert_int_eq (failed, 0);
    ck_assert_int_eq (s_allocations, 0);
    /* and the count counts: a load allocates */
    s_counting = 1;
    backend_model_t *m2 = s_cpu->load (w, &cfg, 0, err, sizeof err);
    s_counting = 0;
    ck_assert_int_gt (s_allocations, 0);
    s_cpu->destroy (&m2);
    s_cpu->destroy (&m);
    weights_destroy (&w);
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
    gru_config (&cfg, "notgru", "/nonexistent", &(lstm_shape_t) { .layers = 1, .step_size = 1, .hidden = 1, .out = 1,
                                                                  .window = 1 });
    char err[256] = "";
    ck_assert_ptr_null (s_cpu->load (mlp, &cfg, 0, err, sizeof err));
    ck_assert_str_eq (err, "model \"notgru\": the GRU backend needs GRU weights (\"type\": \"gru\"), got a model of "
                           "\"type\": \"mlp\"");
    double out;
    ck_assert_int_eq (gru_reference_window (mlp, NULL, 0, &out), -1);
    weights_destroy (&mlp);
    /* a slot past the table: an error, not a crash */
    weights_t *w;
    backend_model_t *m = s_load (&(lstm_shape_t) { .layers = 1, .step_size = 2, .hidden = 3, .out = 1, .window = 2 },
                                 1, 2, &w, &cfg);
    float x[2] = { 0.5f, -0.5f }, y;
    ck_assert_int_eq (s_cpu->stream_step (m, 2, x, &y, err, sizeof err), SIG_INTERNAL);
    ck_assert_str_eq (err, "model \"gru\": stream slot 2 of 2");
    s_cpu->stream_reset (m, 7);     /* ignored */
    s_cpu->stream_advance (m, 7);
    ck_assert_str_eq (s_cpu->kernel_name (m), "gru-loop");
    s_cpu->destroy (&m);
    weights_destroy (&w);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("gru");
    TCase *tc = tcase_create ("cpu");
    tcase_set_timeout (tc, 120);
    tcase_add_test (tc, hand_computed_case);
    tcase_add_test (tc, full_window_matches_reference);
    tcase_add_test (tc, no_biases);
    tcase_add_test (tc, streams_match_reference);
    tcase_add_test (tc, raw_step_ring);
    tcase_add_test (tc, its_row_in_the_table);
    tcase_add_test (tc, config_keys);
    tcase_add_test (tc, bad_weights_named);
    tcase_add_test (tc, no_allocation_once_loaded);
    tcase_add_test (tc, refusals);
    suite_add_tcase (s, tc);
    return s_run (s);
}
