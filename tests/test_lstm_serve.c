/* LSTM models served over real sockets (CPU backend): the model list, whole windows, streams
 * (interleaved, longer than the window, split over two instances) against the float64 reference
 * (each output within its error bound, tolerance.h); the same on the CUDA backend where a GPU is
 * (its persistent kernel in the device process, advances in the serving kernel and, with
 * advances_apart, on other SMs; skipped without one, saying so),
 * shape errors naming the step and window sizes, numbered steps (duplicates and gaps refused, not
 * applied), the stream limit and idle streams giving their slots up. Order and counts are
 * asserted, never times; waits are on the condition. */
#define _GNU_SOURCE
#include "lstm_reference.h"
#include "rng.h"
#include "signal.pb-c.h"
#include "testutil.h"
#include "tolerance.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define LAYERS 2
#define WINDOW 16
#define STEP 8
#define HIDDEN 12
#define OUTS 2
#define STREAMS 3

static char s_dir[2048], s_endpoint[64];
static pid_t s_server = -1;
static const char *s_backend = "cpu";   /* the "seq" model's, set by the fixture of its test case */
static bool s_apart;                    /* its advances_apart (cuda) */
static bool s_no_gpu;                   /* a GPU case on a host without a GPU: its tests say so and pass */
static lstm_weights_t *s_w;
static weights_t *s_weights;
static void *s_ctx;
static uint64_t s_seed = 1234;

#include "rnn_serve_tests.h"

/* A GPU case's test on a host without a GPU: says so (true) and does nothing. */
static bool s_skipped (const char *test)
{
    if (s_no_gpu)
        printf ("%s (%s%s): skipped: no NVIDIA driver on this host (no /proc/driver/nvidia)\n", test, s_backend,
                s_apart ? ", advances apart" : "");
    return s_no_gpu;
}

START_TEST (list_describes_the_lstm)
{
    if (s_skipped ("list_describes_the_lstm"))
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
    Sigserve__V1__ModelInfo *m = r->list_models->models[0];
    ck_assert_str_eq (m->name, "seq");
    ck_assert_str_eq (m->type, "lstm");
    ck_assert_uint_eq (m->window, WINDOW);
    ck_assert_uint_eq (m->step_size, STEP);
    ck_assert_uint_eq (m->input_size, WINDOW * STEP);
    ck_assert_uint_eq (m->output_size, OUTS);
    ck_assert_str_eq (m->backend, s_backend);
    ck_assert_uint_eq (m->instances, 2);
    ck_assert_str_eq (r->list_models->models[1]->type, "mlp");
    sigserve__v1__reply__free_unpacked (r, NULL);
    zmq_close (s);
}
END_TEST

START_TEST (whole_windows_match_the_reference)
{
    if (s_skipped ("whole_windows_match_the_reference"))
        return;
    void *s = s_socket (5000);
    float in[3 * WINDOW * STEP];
    s_random (in, 3 * WINDOW * STEP);
    Sigserve__V1__Reply *r;
    Sigserve__V1__InferReply *rep = s_infer (s, "seq", in, 3 * WINDOW * STEP, 3, 0, 1, &r);
    ck_assert_msg (rep->status == SIGSERVE__V1__STATUS__STATUS_OK, "%s", rep->error);
    ck_assert_uint_eq (rep->n_outputs, 3 * OUTS);
    double ref[3 * OUTS], bound[3 * OUTS];
    ck_assert_int_eq (tol_lstm_window (s_w, WEIGHT_DTYPE_F32, in, 3, ref, bound), 0);
    TOL_ASSERT (rep->outputs, ref, bound, 3 * OUTS, OUTS, "three windows");
    sigserve__v1__reply__free_unpacked (r, NULL);
    zmq_close (s);
}
END_TEST

START_TEST (interleaved_streams_match_the_reference)
{
    /* Three streams, 2.5 windows each, steps interleaved; each reply equals the reference over that
     * stream's steps so far (zeros before its first). Stream ids 10, 11, 12 land on both
     * instances (id % 2). */
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
            Sigserve__V1__InferReply *rep = s_infer (s, "seq", steps[k] + (size_t) t * STEP, STEP, 1, 10 + (uint64_t) k,
                                                     id++, &r);
            ck_assert_msg (rep->status == SIGSERVE__V1__STATUS__STATUS_OK, "%s", rep->error);
            ck_assert_uint_eq (rep->n_outputs, OUTS);
            ck_assert_uint_eq (rep->rows, 1);
            double ref[OUTS], bound[OUTS];
            ck_assert_int_eq (tol_lstm_stream (s_w, WEIGHT_DTYPE_F32, steps[k], (uint64_t) t + 1, ref, bound), 0);
            TOL_ASSERT (rep->outputs, ref, bound, OUTS, OUTS, "stream %d step %d", 10 + k, t + 1);
            sigserve__v1__reply__free_unpacked (r, NULL);
        }
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
    static float f[2 * WINDOW * STEP > 512 ? 2 * WINDOW * STEP : 512];   /* tick_mlp's 512 too */
    s_expect (s, "seq", f, STEP + 1, 1, 5, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE,
              "features: expected one step of 8 values for model \"seq\" (stream_id 5), got 9; a whole window of "
              "16 x 8 goes with stream_id 0");
    s_expect (s, "seq", f, 2 * STEP, 2, 5, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE,
              "rows: a streaming request (stream_id 5) carries one step of model \"seq\": expected 1, got 2");
    s_expect (s, "seq", f, STEP, 1, 0, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE,
              "features: expected rows x window x step size = 1 x 16 x 8 = 128 values for model \"seq\" (whole "
              "windows; one step goes with a stream_id), got 8");
    s_expect (s, "tick_mlp", f, 512, 1, 3, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE,
              "stream_id: model \"tick_mlp\" is of type mlp, which keeps no streams; send stream_id 0");
    zmq_close (s);
}
END_TEST

/* Sends step T of stream ID until it is accepted (its new stream finds a slot once another stream
 * has been idle for stream_idle_s): every refusal is OVERLOADED naming max_streams, none is applied.
 * Waits on the condition, at most 30 s. */
static void s_until_accepted (void *s, uint64_t id, const float *f, uint64_t *request)
{
    for (int tries = 0;; tries++) {
        Sigserve__V1__Reply *r;
        Sigserve__V1__InferReply *rep = s_infer (s, "seq", f, STEP, 1, id, (*request)++, &r);
        const int st = rep->status;
        ck_assert_msg (st == SIGSERVE__V1__STATUS__STATUS_OK || (st == SIGSERVE__V1__STATUS__STATUS_OVERLOADED
                       && strstr (rep->error, "holds max_streams = 4 streams")), "stream %llu: %d %s",
                       (unsigned long long) id, st, rep->error);
        sigserve__v1__reply__free_unpacked (r, NULL);
        if (st == SIGSERVE__V1__STATUS__STATUS_OK)
            return;
        ck_assert_msg (tries < 3000, "stream %llu was refused for 30 s", (unsigned long long) id);
        usleep (10000);
    }
}

START_TEST (stream_limit_and_idle_streams)
{
    /* max_streams 4 over 2 instances: 2 slots each. Two streams with even ids fill instance 0's
     * slots (once the streams of the tests before have been idle stream_idle_s = 3 s) and a third is
     * refused; an odd id still fits on instance 1; once the even ids are idle in turn, the third
     * takes a slot. */
    void *s = s_socket (5000);
    float f[STEP] = { 0.5f };
    uint64_t request = 1;
    Sigserve__V1__Reply *r;
    s_until_accepted (s, 1000, f, &request);
    s_until_accepted (s, 1002, f, &request);
    /* both just stepped (1000 again: it may have waited for 1002's slot): neither is idle */
    ck_assert_int_eq (s_infer (s, "seq", f, STEP, 1, 1000, request++, &r)->status, SIGSERVE__V1__STATUS__STATUS_OK);
    sigserve__v1__reply__free_unpacked (r, NULL);
    Sigserve__V1__InferReply *rep = s_infer (s, "seq", f, STEP, 1, 1004, request++, &r);
    ck_assert_int_eq (rep->status, SIGSERVE__V1__STATUS__STATUS_OVERLOADED);
    ck_assert_str_eq (rep->error, "stream_id 1004: model \"seq\" holds max_streams = 4 streams (2 on this instance) "
                                  "and none has been idle for stream_idle_s = 3 s; a new stream is refused until one is");
    sigserve__v1__reply__free_unpacked (r, NULL);
    s_until_accepted (s, 1005, f, &request);
    /* A known stream keeps going while new ones are refused. */
    ck_assert_int_eq (s_infer (s, "seq", f, STEP, 1, 1000, request++, &r)->status, SIGSERVE__V1__STATUS__STATUS_OK);
    sigserve__v1__reply__free_unpacked (r, NULL);
    s_until_accepted (s, 1004, f, &request);
    zmq_close (s);
}
END_TEST

/* Numbered steps (InferRequest.step): a stream the server does not hold expects 1; then each step
 * must be the one after the steps applied; a duplicate or out-of-order step is answered BAD_REQUEST
 * naming the expected number and not applied (the outputs after it equal the reference over the
 * accepted steps only); unnumbered steps count too. Stream 2001 lives on instance 1. */
START_TEST (numbered_steps_refuse_duplicates_and_gaps)
{
    if (s_skipped ("numbered_steps_refuse_duplicates_and_gaps"))
        return;
    void *s = s_socket (5000);
    static float x[6][STEP], accepted[6 * STEP];
    for (int i = 0; i < 6; i++)
        s_random (x[i], STEP);
    size_t applied = 0;
    uint64_t request = 500;
    struct { int x; uint64_t step; int status; const char *error; } cases[] = {
        { 0, 2, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST,
          "step: model \"seq\" holds no stream 2001 (a new stream, or one given up after stream_idle_s = 3 s without a "
          "step): it expects step 1, got 2; it was not applied" },
        { 0, 1, SIGSERVE__V1__STATUS__STATUS_OK, NULL },
        { 1, 1, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST,
          "step: stream 2001 of model \"seq\" expects step 2, got 1 (a step already applied: its reply may have been "
          "lost); it was not applied" },
        { 1, 3, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST,
          "step: stream 2001 of model \"seq\" expects step 2, got 3 (a step is missing before it); it was not "
          "applied" },
        { 1, 2, SIGSERVE__V1__STATUS__STATUS_OK, NULL },
        { 2, 0, SIGSERVE__V1__STATUS__STATUS_OK, NULL },     /* unnumbered: applied, counted */
        { 3, 4, SIGSERVE__V1__STATUS__STATUS_OK, NULL },
        { 4, 4, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST,
          "step: stream 2001 of model \"seq\" expects step 5, got 4 (a step already applied: its reply may have been "
          "lost); it was not applied" },
        { 4, 5, SIGSERVE__V1__STATUS__STATUS_OK, NULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Sigserve__V1__Reply *r;
        Sigserve__V1__InferReply *rep = s_infer_step (s, "seq", x[cases[i].x], STEP, 1, 2001, cases[i].step,
                                                      request++, &r);
        ck_assert_msg ((int) rep->status == cases[i].status, "case %zu: status %d: %s", i, rep->status, rep->error);
        if (cases[i].error) {
            ck_assert_str_eq (rep->error, cases[i].error);
            ck_assert_uint_eq (rep->n_outputs, 0);
        } else {
            memcpy (accepted + applied * STEP, x[cases[i].x], sizeof x[0]);
            applied++;
            double ref[OUTS], bound[OUTS];
            ck_assert_int_eq (tol_lstm_stream (s_w, WEIGHT_DTYPE_F32, accepted, applied, ref, bound), 0);
            TOL_ASSERT (rep->outputs, ref, bound, OUTS, OUTS, "case %zu", i);
        }
        sigserve__v1__reply__free_unpacked (r, NULL);
    }
    ck_assert_uint_eq (applied, 5);
    zmq_close (s);
}
END_TEST

static void s_ctx_new (void) { s_ctx = zmq_ctx_new (); }
static void s_ctx_term (void) { zmq_ctx_term (s_ctx); s_ctx = NULL; }

static void s_setup (void)
{
    s_no_gpu = strcmp (s_backend, "cpu") != 0 && access ("/proc/driver/nvidia", F_OK) != 0;
    if (s_no_gpu)
        return;
    char *dir = tu_tmpdir ();
    snprintf (s_dir, sizeof s_dir, "%s", dir);
    free (dir);
    char path[2200], err[512];
    snprintf (path, sizeof path, "%s/seq.safetensors", s_dir);
    lstm_shape_t shape = { .layers = LAYERS, .step_size = STEP, .hidden = HIDDEN, .out = OUTS, .window = WINDOW,
                           .head_act = ACTIVATION_TANH };
    model_config_t cfg;
    s_weights = lstm_random_weights (path, &shape, 99, &cfg, err, sizeof err);
    ck_assert_msg (s_weights != NULL, "%s", err);
    s_w = s_weights->lstm;
    snprintf (s_endpoint, sizeof s_endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    char json[4096];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"log_level\": \"warn\", \"stats_interval_s\": 0 },"
              "  \"models\": [ { \"name\": \"seq\", \"type\": \"lstm\", \"backend\": \"%s\", \"weights\": \"seq.safetensors\","
              "    \"lstm\": \"lstm.\", \"window\": %d, \"head\": { \"weight\": \"head.weight\", \"activation\": \"tanh\" },"
              "    \"instances\": 2, \"max_rows\": 3, \"max_streams\": 4, \"stream_idle_s\": 3%s },"
              "   { \"name\": \"tick_mlp\", \"backend\": \"cpu\", \"weights\": \"%s/models/tick_mlp.safetensors\","
              "    \"layers\": [ { \"weight\": \"0.weight\" }, { \"weight\": \"2.weight\" }, { \"weight\": \"4.weight\" } ] } ] }",
              s_endpoint, s_backend, WINDOW, s_apart ? ", \"advances_apart\": true" : "", tu_build_abs ());
    char *cp = tu_write_file (s_dir, "lstm.json", json, -1);
    char log[2300];
    snprintf (log, sizeof log, "%s/server.log", s_dir);
    s_server = tu_server_start_logged (cp, s_endpoint, 30000, log, "warn");
    free (cp);
    ck_assert_msg (s_server > 0, "sigserve did not become ready");
    if (s_apart) {   /* asked for and granted: no warning that the advances stayed in the serving kernel */
        FILE *f = fopen (log, "r");
        ck_assert_ptr_nonnull (f);
        char line[1024];
        while (fgets (line, sizeof line, f))
            ck_assert_msg (!strstr (line, "run in the serving kernel"), "%s", line);
        fclose (f);
    }
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
    s_apart = false;
    s_setup ();
}

static void s_setup_apart (void)
{
    s_backend = "cuda";
    s_apart = true;
    s_setup ();
}

/* A test case NAME of suite S serving the model as SETUP starts it: the tests that hold for any backend. */
static void s_gpu_case (Suite *s, const char *name, void (*setup) (void))
{
    TCase *g = tcase_create (name);
    tcase_add_unchecked_fixture (g, setup, s_teardown);
    tcase_add_checked_fixture (g, s_ctx_new, s_ctx_term);
    tcase_set_timeout (g, 120);
    tcase_add_test (g, list_describes_the_lstm);
    tcase_add_test (g, whole_windows_match_the_reference);
    tcase_add_test (g, interleaved_streams_match_the_reference);
    tcase_add_test (g, numbered_steps_refuse_duplicates_and_gaps);
    suite_add_tcase (s, g);
}

int main (void)
{
    Suite *s = suite_create ("lstm-serve");
    TCase *tc = tcase_create ("lstm_over_sockets");
    tcase_add_unchecked_fixture (tc, s_setup, s_teardown);
    tcase_add_checked_fixture (tc, s_ctx_new, s_ctx_term);
    tcase_set_timeout (tc, 120);
    tcase_add_test (tc, list_describes_the_lstm);
    tcase_add_test (tc, whole_windows_match_the_reference);
    tcase_add_test (tc, interleaved_streams_match_the_reference);
    tcase_add_test (tc, shape_errors_name_the_sizes);
    tcase_add_test (tc, numbered_steps_refuse_duplicates_and_gaps);
    tcase_add_test (tc, stream_limit_and_idle_streams);
    suite_add_tcase (s, tc);
    /* the same model on the CUDA backend, advances in the serving kernel, then apart (plan 4) */
    s_gpu_case (s, "gpu", s_setup_cuda);
    s_gpu_case (s, "gpu_apart", s_setup_apart);
    return tu_run_suite (s);
}
