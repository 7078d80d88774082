/* GRU models served over real sockets by sigserve (the CPU backend, and whichever "auto" chooses),
 * beside an LSTM and the demo MLP: the model list, whole windows of several rows, streams
 * (interleaved, longer than the window, split over two instances, numbered steps) against the
 * float64 reference (each output within its error bound, tolerance_gru.h), shape errors naming the
 * step and window sizes; the same model on the CUDA backend where a GPU is (in its device process;
 * skipped without one, saying so), and a GRU asked of the CUDA backend on a host without one
 * refused at load naming the backend. Order and counts are asserted, never times. */
#define _GNU_SOURCE
#include "backends/backends.h"
#include "gru_weights.h"
#include "rng.h"
#include "serving/model.h"
#include "signal.pb-c.h"
#include "testutil.h"
#include "tolerance_gru.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define LAYERS 2
#define WINDOW 12
#define STEP 7
#define HIDDEN 19
#define OUTS 2
#define STREAMS 3

static char s_dir[2048], s_endpoint[64];
static pid_t s_server = -1;
static const char *s_backend = "cpu";   /* the "gru" model's, set by the fixture of its test case */
static bool s_no_gpu;                   /* the GPU case on a host without a GPU: its tests say so and pass */
static const rnn_weights_t *s_w;
static weights_t *s_weights;
static void *s_ctx;
static uint64_t s_seed = 4321;

#include "rnn_serve_tests.h"

/* Whether this host has an NVIDIA driver (the CUDA backend can serve here). */
static bool s_gpu_host (void) { return access ("/proc/driver/nvidia", F_OK) == 0; }

/* The GPU case's test on a host without a GPU: says so (true) and does nothing. */
static bool s_skipped (const char *test)
{
    if (s_no_gpu)
        printf ("%s (%s): skipped: no NVIDIA driver on this host (no /proc/driver/nvidia)\n", test, s_backend);
    return s_no_gpu;
}

/* What a GRU of these shapes is served by on BACKEND: the kernel's name (19 units: the CUDA
 * backend's sequence kernel, in graphs). */
static const char *s_kernel_of (const char *backend) { return strcmp (backend, "cuda") == 0 ? "gru-seq+graph" : "gru-loop"; }

START_TEST (list_describes_the_gru)
{
    if (s_skipped ("list_describes_the_gru"))
        return;
    void *s = s_socket (5000);
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__ListModelsRequest l = SIGSERVE__V1__LIST_MODELS_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_LIST_MODELS;
    req.list_models = &l;
    uint8_t buf[16384];
    size_t len = sigserve__v1__request__pack (&req, buf);
    zmq_send (s, buf, len, 0);
    int n = zmq_recv (s, buf, sizeof buf, 0);
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, (size_t) n, buf);
    ck_assert_uint_eq (r->list_models->n_models, 4);
    const char *names[4] = { "gru", "auto_gru", "seq", "tick_mlp" }, *types[4] = { "gru", "gru", "lstm", "mlp" };
    const char *backends[4] = { s_backend, "cpu", "cpu", "cpu" };
    const char *kernels[4] = { s_kernel_of (s_backend), "gru-loop", "lstm-loop", "loop" };
    /* where a GPU is, "auto" measures the CUDA backend too, and either may win */
    const bool auto_cuda = s_gpu_host () && strcmp (r->list_models->models[1]->backend, "cuda") == 0;
    if (auto_cuda) {
        backends[1] = "cuda";
        kernels[1] = s_kernel_of ("cuda");
    }
    for (size_t i = 0; i < 4; i++) {
        Sigserve__V1__ModelInfo *m = r->list_models->models[i];
        ck_assert_str_eq (m->name, names[i]);
        ck_assert_str_eq (m->type, types[i]);
        ck_assert_str_eq (m->backend, backends[i]);
        ck_assert_str_eq (m->kernel, kernels[i]);
    }
    /* "auto" measured the CPU's loop and, where a GPU is, the CUDA backend: each loaded and timed */
    Sigserve__V1__ModelInfo *a = r->list_models->models[1];
    ck_assert_str_eq (a->selected_by, "measurement");
    ck_assert_uint_eq (a->n_candidates, s_gpu_host () && backends_gpu_built () ? 2 : 1);
    bool seen[2] = { false, false };
    for (size_t i = 0; i < a->n_candidates; i++) {
        const Sigserve__V1__Candidate *c = a->candidates[i];
        const int cuda = strcmp (c->backend, "cuda") == 0;
        ck_assert_msg (cuda || strcmp (c->backend, "cpu") == 0, "candidate %zu: backend %s", i, c->backend);
        ck_assert_msg (!seen[cuda], "candidate %zu: backend %s twice", i, c->backend);
        seen[cuda] = true;
        ck_assert_str_eq (c->kernel, s_kernel_of (c->backend));
        ck_assert_msg (c->note[0] == 0 && c->p99_us > 0, "candidate %s: %s", c->backend, c->note);
    }
    Sigserve__V1__ModelInfo *m = r->list_models->models[0];
    ck_assert_uint_eq (m->window, WINDOW);
    ck_assert_uint_eq (m->step_size, STEP);
    ck_assert_uint_eq (m->input_size, WINDOW * STEP);
    ck_assert_uint_eq (m->output_size, OUTS);
    ck_assert_uint_eq (m->instances, 2);
    ck_assert_uint_eq (m->max_rows, 3);
    sigserve__v1__reply__free_unpacked (r, NULL);
    zmq_close (s);
}
END_TEST

START_TEST (whole_windows_match_the_reference)
{
    if (s_skipped ("whole_windows_match_the_reference"))
        return;
    void *s = s_socket (5000);
    const char *models[2] = { "gru", "auto_gru" };
    for (int k = 0; k < 2; k++)
        for (uint32_t rows = 1; rows <= 3; rows++) {
            float in[3 * WINDOW * STEP];
            s_random (in, rows * WINDOW * STEP);
            Sigserve__V1__Reply *r;
            Sigserve__V1__InferReply *rep = s_infer (s, models[k], in, rows * WINDOW * STEP, rows, 0, 1 + rows, &r);
            ck_assert_msg (rep->status == SIGSERVE__V1__STATUS__STATUS_OK, "%s", rep->error);
            ck_assert_uint_eq (rep->n_outputs, rows * OUTS);
            ck_assert_uint_eq (rep->rows, rows);
            double ref[3 * OUTS], bound[3 * OUTS];
            ck_assert_int_eq (tol_gru_window (s_w, in, rows, ref, bound), 0);
            TOL_ASSERT (rep->outputs, ref, bound, rows * OUTS, OUTS, "%s: %u windows", models[k], rows);
            sigserve__v1__reply__free_unpacked (r, NULL);
        }
    zmq_close (s);
}
END_TEST

START_TEST (interleaved_streams_match_the_reference)
{
    /* Three streams, 2.5 windows each, steps interleaved; each reply equals the reference over that
     * stream's steps so far (zeros before its first). Stream ids 10, 11, 12 land on both
     * instances (id % 2). Numbered steps from 1. */
    if (s_skipped ("interleaved_streams_match_the_reference"))
        return;
    void *s = s_socket (5000);
    enum { STEPS = 5 * WINDOW / 2 };
    static float steps[STREAMS][STEPS * STEP];
    for (int k = 0; k < STREAMS; k++)
        s_random (steps[k], STEPS * STEP);
    uint64_t id = 100;
    for (int t = 0; t < STEPS; t++)
        for (int k = 0; k < STREAMS; k++) {
            Sigserve__V1__Reply *r;
            Sigserve__V1__InferReply *rep = s_infer_step (s, "gru", steps[k] + (size_t) t * STEP, STEP, 1,
                                                          10 + (uint64_t) k, (uint64_t) t + 1, id++, &r);
            ck_assert_msg (rep->status == SIGSERVE__V1__STATUS__STATUS_OK, "%s", rep->error);
            ck_assert_uint_eq (rep->n_outputs, OUTS);
            ck_assert_uint_eq (rep->rows, 1);
            double ref[OUTS], bound[OUTS];
            ck_assert_int_eq (tol_gru_stream (s_w, steps[k], (uint64_t) t + 1, ref, bound), 0);
            TOL_ASSERT (rep->outputs, ref, bound, OUTS, OUTS, "stream %d step %d", 10 + k, t + 1);
            sigserve__v1__reply__free_unpacked (r, NULL);
        }
    /* a duplicate step of stream 10 is refused and not applied: the next step still matches */
    Sigserve__V1__Reply *r;
    Sigserve__V1__InferReply *rep = s_infer_step (s, "gru", steps[0], STEP, 1, 10, STEPS, id++, &r);
    ck_assert_int_eq (rep->status, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST);
    ck_assert_uint_eq (rep->n_outputs, 0);
    sigserve__v1__reply__free_unpacked (r, NULL);
    zmq_close (s);
}
END_TEST

static void s_expect (void *s, const char *model, const float *f, size_t n, uint32_t rows, uint64_t stream, int status,
                      const char *text)
{
    Sigserve__V1__Reply *r;
    Sigserve__V1__InferReply *rep = s_infer (s, model, f, n, rows, stream, 7, &r);
    ck_assert_msg ((int) rep->status == status, "status %d, expected %d: %s", rep->status, status, rep->error);
    ck_assert_msg (strcmp (rep->error, text) == 0, "error \"%s\", expected \"%s\"", rep->error, text);
    sigserve__v1__reply__free_unpacked (r, NULL);
}

START_TEST (shape_errors_name_the_sizes)
{
    void *s = s_socket (5000);
    static float f[4 * WINDOW * STEP > 512 ? 4 * WINDOW * STEP : 512];
    s_expect (s, "gru", f, STEP + 1, 1, 5, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE,
              "features: expected one step of 7 values for model \"gru\" (stream_id 5), got 8; a whole window of "
              "12 x 7 goes with stream_id 0");
    s_expect (s, "gru", f, 2 * STEP, 2, 5, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE,
              "rows: a streaming request (stream_id 5) carries one step of model \"gru\": expected 1, got 2");
    s_expect (s, "gru", f, STEP, 1, 0, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE,
              "features: expected rows x window x step size = 1 x 12 x 7 = 84 values for model \"gru\" (whole "
              "windows; one step goes with a stream_id), got 7");
    s_expect (s, "gru", f, 4 * WINDOW * STEP, 4, 0, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE,
              "rows: expected 1 to 3 for model \"gru\", got 4");
    f[3] = NAN;
    s_expect (s, "gru", f, STEP, 1, 6, SIGSERVE__V1__STATUS__STATUS_BAD_VALUE,
              "features[3] (row 0, column 3) is NaN; every feature must be finite");
    f[3] = 0;
    s_expect (s, "tick_mlp", f, 512, 1, 3, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE,
              "stream_id: model \"tick_mlp\" is of type mlp, which keeps no streams; send stream_id 0");
    zmq_close (s);
}
END_TEST

/* Not over sockets: on a host without a GPU (or a build without CUDA), a GRU asked of the CUDA
 * backend does not load, and says which backend, why, and what to use instead. (Where a GPU is, the
 * "gpu" case serves one.) */
START_TEST (cuda_without_a_gpu_is_refused)
{
    if (s_gpu_host () && backends_gpu_built ()) {
        printf ("cuda_without_a_gpu_is_refused: skipped: this host has a GPU (the \"gpu\" case serves a CUDA GRU)\n");
        return;
    }
    char path[2200], err[1024] = "";
    snprintf (path, sizeof path, "%s/gru.safetensors", s_dir);
    model_config_t cfg;
    gru_config (&cfg, "g", path, &(lstm_shape_t) { .layers = LAYERS, .step_size = STEP, .hidden = HIDDEN,
                                                   .out = OUTS, .window = WINDOW });
    cfg.backend = BACKEND_CUDA;
    const server_config_t server = { .max_message_bytes = 65536 };
    model_t *m = model_new (&cfg, &server, NULL, NULL, err, sizeof err);
    ck_assert_ptr_null (m);
    const char *prefix = "model \"g\": backend \"cuda\": ";
    ck_assert_msg (strncmp (err, prefix, strlen (prefix)) == 0, "%s", err);
    ck_assert_msg (strstr (err, "; use \"backend\": \"cpu\" or \"auto\"") != NULL, "%s", err);
    ck_assert_msg (strstr (err, backends_gpu_built () ? BACKENDS_NO_DRIVER : BACKENDS_NO_GPU) != NULL, "%s", err);
}
END_TEST

static void s_ctx_new (void) { s_ctx = zmq_ctx_new (); }
static void s_ctx_term (void) { zmq_ctx_term (s_ctx); s_ctx = NULL; }

static void s_setup (void)
{
    s_no_gpu = strcmp (s_backend, "cpu") != 0 && !s_gpu_host ();
    if (s_no_gpu)
        return;
    char *dir = tu_tmpdir ();
    snprintf (s_dir, sizeof s_dir, "%s", dir);
    free (dir);
    char path[2200], err[512];
    snprintf (path, sizeof path, "%s/gru.safetensors", s_dir);
    lstm_shape_t shape = { .layers = LAYERS, .step_size = STEP, .hidden = HIDDEN, .out = OUTS, .window = WINDOW,
                           .head_act = ACTIVATION_SIGMOID };
    model_config_t cfg;
    s_weights = gru_random_weights (path, &shape, 77, &cfg, err, sizeof err);
    ck_assert_msg (s_weights != NULL, "%s", err);
    s_w = s_weights->rnn;
    snprintf (path, sizeof path, "%s/seq.safetensors", s_dir);
    lstm_shape_t lshape = { .layers = 1, .step_size = 4, .hidden = 6, .out = 1, .window = 3 };
    ck_assert_msg (lstm_random_file (path, &lshape, 5, err, sizeof err) == 0, "%s", err);
    snprintf (s_endpoint, sizeof s_endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    char json[4096];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"log_level\": \"warn\", \"stats_interval_s\": 0 },"
              "  \"models\": [ { \"name\": \"gru\", \"type\": \"gru\", \"backend\": \"%s\", \"weights\": \"gru.safetensors\","
              "    \"gru\": \"gru.\", \"window\": %d, \"head\": { \"weight\": \"head.weight\", \"activation\": \"sigmoid\" },"
              "    \"instances\": 2, \"max_rows\": 3, \"max_streams\": 8 },"
              "   { \"name\": \"auto_gru\", \"type\": \"gru\", \"weights\": \"gru.safetensors\", \"gru\": \"gru.\","
              "    \"window\": %d, \"head\": { \"weight\": \"head.weight\", \"activation\": \"sigmoid\" }, \"max_rows\": 3 },"
              "   { \"name\": \"seq\", \"type\": \"lstm\", \"backend\": \"cpu\", \"weights\": \"seq.safetensors\","
              "    \"lstm\": \"lstm.\", \"window\": 3, \"head\": { \"weight\": \"head.weight\" } },"
              "   { \"name\": \"tick_mlp\", \"backend\": \"cpu\", \"weights\": \"%s/models/tick_mlp.safetensors\","
              "    \"layers\": [ { \"weight\": \"0.weight\" }, { \"weight\": \"2.weight\" }, { \"weight\": \"4.weight\" } ] } ] }",
              s_endpoint, s_backend, WINDOW, WINDOW, tu_build_abs ());
    char *cp = tu_write_file (s_dir, "gru.json", json, -1);
    char log[2300];
    snprintf (log, sizeof log, "%s/server.log", s_dir);
    s_server = tu_server_start_logged (cp, s_endpoint, 30000, log, "warn");
    free (cp);
    ck_assert_msg (s_server > 0, "sigserve did not become ready");
}

static void s_teardown (void)
{
    if (s_no_gpu)
        return;
    int rc = tu_server_stop (s_server);
    weights_destroy (&s_weights);
    tu_remove_tree (s_dir);
    ck_assert_int_eq (rc, 0);
}

static void s_setup_cuda (void)
{
    s_backend = "cuda";
    s_setup ();
}

int main (void)
{
    Suite *s = suite_create ("gru-serve");
    TCase *tc = tcase_create ("gru_over_sockets");
    tcase_add_unchecked_fixture (tc, s_setup, s_teardown);
    tcase_add_checked_fixture (tc, s_ctx_new, s_ctx_term);
    tcase_set_timeout (tc, 120);
    tcase_add_test (tc, list_describes_the_gru);
    tcase_add_test (tc, whole_windows_match_the_reference);
    tcase_add_test (tc, interleaved_streams_match_the_reference);
    tcase_add_test (tc, shape_errors_name_the_sizes);
    tcase_add_test (tc, cuda_without_a_gpu_is_refused);
    suite_add_tcase (s, tc);
    /* the same model on the CUDA backend (CK_RUN_CASE=gpu runs it alone) */
    TCase *g = tcase_create ("gpu");
    tcase_add_unchecked_fixture (g, s_setup_cuda, s_teardown);
    tcase_add_checked_fixture (g, s_ctx_new, s_ctx_term);
    tcase_set_timeout (g, 120);
    tcase_add_test (g, list_describes_the_gru);
    tcase_add_test (g, whole_windows_match_the_reference);
    tcase_add_test (g, interleaved_streams_match_the_reference);
    suite_add_tcase (s, g);
    return tu_run_suite (s);
}
