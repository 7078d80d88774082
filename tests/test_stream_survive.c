/* Streams survive a lost device process (issue 38 item 4), with sigserve-test and an LSTM on the CPU
 * in a device process (--test-cpu-device-process; the fault route POST /debug/fault kills it):
 *   - two streams (one numbered, one not; one on each instance), longer than the window, the
 *     process killed mid-stream: after it is back, every step's output is within the error bound of
 *     the float64 reference over the whole stream, as if nothing happened (the history kept in the
 *     shared region is replayed into the new process's slots), and the numbering goes on;
 *   - stream_history smaller than the streams: the least recently stepped is evicted; after a kill
 *     its next step is refused with the reason (never silently restarted), the others go on exactly,
 *     and the evicted one may start again at step 1;
 *   - a GRU stream across a kill, the same;
 *   - on a GPU host, the LSTM on CUDA (GPU 0's device process) across two kills (skipped, saying so,
 *     without a GPU).
 * Values and counts are asserted, never times; waits are on the condition. */
#define _GNU_SOURCE
#include "device_processes_tests.h"
#include "gru_weights.h"
#include "lstm_reference.h"
#include "rng.h"
#include "tolerance_gru.h"
#include "lstm_seq_tests.h"


static char s_gru_path[4096];
static weights_t *s_gru;
static uint64_t s_seed = 4321;

/* The LSTM's weights (random, written once) and the model's JSON with EXTRA keys, on the backend
 * s_backend names. */
static const char *s_backend = "\"backend\": \"cpu\"";

static const char *s_lstm_model (const char *extra)
{
    char keys[512];
    snprintf (keys, sizeof keys, "%s, %s", s_backend, extra);
    return seq_model (keys, 77);
}

/* The GRU's model JSON (random weights, written once). */
static const char *s_gru_model (void)
{
    if (!s_gru) {
        char *dir = tu_tmpdir (), err[512];
        snprintf (s_gru_path, sizeof s_gru_path, "%s/gru.safetensors", dir);
        free (dir);
        lstm_shape_t shape = { .layers = LAYERS, .step_size = STEP, .hidden = HIDDEN, .out = OUTS, .window = WINDOW,
                               .head_act = ACTIVATION_SIGMOID };
        model_config_t cfg;
        s_gru = gru_random_weights (s_gru_path, &shape, 78, &cfg, err, sizeof err);
        ck_assert_msg (s_gru != NULL, "%s", err);
    }
    snprintf (s_models, sizeof s_models,
              "{ \"name\": \"gru\", \"type\": \"gru\", \"backend\": \"cpu\", \"weights\": \"%s\", \"gru\": \"gru.\", "
              "\"window\": %d, \"head\": { \"weight\": \"head.weight\", \"activation\": \"sigmoid\" }, "
              "\"instances\": 1, \"max_streams\": 4 }", s_gru_path, WINDOW);
    return s_models;
}

/* One step of stream ID (numbered STEP_NO, 0: not numbered) over SOCK; its reply (free_unpacked by the caller). */
static const char *s_name = "seq";     /* the model the steps go to: "seq" (LSTM) or "gru" */

static Sigserve__V1__Reply *s_step (void *sock, const float *x, uint64_t id, uint64_t step_no, uint64_t request_id)
{
    return seq_step (sock, s_name, x, id, step_no, request_id, true);
}

/* Step T (1-based) of stream ID, whose steps are STEPS: OK, and within the bound of the float64
 * reference over its first T steps. */
static void s_step_ok (void *sock, const float *steps, uint64_t id, uint64_t t, bool numbered)
{
    static uint64_t request_id = 1;
    Sigserve__V1__Reply *r = s_step (sock, steps + (size_t) (t - 1) * STEP, id, numbered ? t : 0, request_id++);
    ck_assert_msg (r->infer->status == SIGSERVE__V1__STATUS__STATUS_OK, "stream %llu step %llu: %d %s",
                   (unsigned long long) id, (unsigned long long) t, r->infer->status, r->infer->error);
    ck_assert_uint_eq (r->infer->n_outputs, OUTS);
    double ref[OUTS], bound[OUTS];
    if (s_gru && strcmp (s_name, "gru") == 0)
        ck_assert_int_eq (tol_gru_stream (s_gru->rnn, steps, t, ref, bound), 0);
    else
        ck_assert_int_eq (tol_lstm_stream (s_lstm->lstm, WEIGHT_DTYPE_F32, steps, t, ref, bound), 0);
    TOL_ASSERT (r->infer->outputs, ref, bound, OUTS, OUTS, "stream %llu step %llu", (unsigned long long) id,
                (unsigned long long) t);
    sigserve__v1__reply__free_unpacked (r, NULL);
}

/* A device process (the CPU one, or GPU 0's: s_gpu) lost to KIND (kill, trap), and the model serving
 * again in its successor. */
static bool s_gpu;

static void s_fault_and_wait (server_t *s, double losses_before, const char *kind)
{
    const pid_t first = s_device_pid (s, s_gpu ? "0" : "cpu (test)");
    char body[512], path[128], losses[128];
    snprintf (path, sizeof path, "/debug/fault?device=%s&kind=%s", s_gpu ? "0" : "cpu", kind);
    snprintf (losses, sizeof losses, "sigserve_device_losses_total{device=\"%s\"}", s_gpu ? "cuda:0" : "cpu");
    const int st = s_http (s->http_port, "POST", path, body, sizeof body);
    ck_assert_msg (st == 200, "POST %s: %d %s", path, st, body);
    for (int waited = 0; s_metric (s, losses) < losses_before + 1; waited += 20) {
        ck_assert_msg (waited < 60000, "the loss was not noticed (log: %s)", s->log);
        usleep (20 * 1000);
    }
    ck_assert_msg (s_wait_serving (s, 60000), "the model did not come back (log: %s)", s->log);
    ck_assert_int_ne (s_device_pid (s, s_gpu ? "0" : "cpu (test)"), first);
    ck_assert (s_gone (first));
}

static void s_kill_and_wait (server_t *s, double losses_before) { s_fault_and_wait (s, losses_before, "kill"); }

static void *s_socket (server_t *s)
{
    void *sock = s_dealer (s, s->endpoint);
    const int timeout = REPLY_WAIT_MS;
    zmq_setsockopt (sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    return sock;
}

START_TEST (an_lstm_stream_survives_a_kill)
{
    /* ids 40 and 41: one on each instance (id % 2), both in the one CPU device process */
    server_t s;
    s_start (&s, s_lstm_model ("\"instances\": 2, \"max_streams\": 8"), true);
    void *sock = s_socket (&s);
    enum { STEPS = 3 * WINDOW, KILL_AFTER = WINDOW + WINDOW / 4 };
    static float a[STEPS * STEP], b[STEPS * STEP];
    for (size_t i = 0; i < STEPS * STEP; i++) {
        a[i] = rng_uniform (&s_seed, -1, 1);
        b[i] = rng_uniform (&s_seed, -1, 1);
    }
    for (uint64_t t = 1; t <= KILL_AFTER; t++) {
        s_step_ok (sock, a, 40, t, true);
        s_step_ok (sock, b, 41, t, false);
    }
    s_kill_and_wait (&s, 0);
    /* every later step as in an undisturbed run: the state rebuilt from the last window - 1 steps */
    for (uint64_t t = KILL_AFTER + 1; t <= STEPS; t++) {
        s_step_ok (sock, a, 40, t, true);
        s_step_ok (sock, b, 41, t, false);
    }
    ck_assert_double_eq (s_metric (&s, "sigserve_device_losses_total{device=\"cpu\"}"), 1);
    ck_assert_double_eq (s_metric (&s, "sigserve_stream_history_rebuilds_total{model=\"seq\"}"), 2);
    ck_assert_double_eq (s_metric (&s, "sigserve_stream_history_evictions_total{model=\"seq\"}"), 0);
    zmq_close (sock);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

/* The same on GPU 0 (the CUDA LSTM in its device process, the default standby and fallback): a stream
 * across two kills (the second of the spare promoted by the first: sigserve-test traps and hangs only
 * an MLP); every step within the bound of the reference. The first kill finds the spare ready, the
 * LSTM loaded there and its kernel parked: the promotion relaunches it. Skipped without a GPU. */
START_TEST (an_lstm_stream_on_a_gpu_survives_two_kills)
{
    if (s_gpus () < 1) {
        printf ("an_lstm_stream_on_a_gpu_survives_two_kills: skipped: no GPU here\n");
        return;
    }
    s_backend = "\"backend\": \"cuda\", \"devices\": [0]";
    s_gpu = true;
    server_t s;
    s_start (&s, s_lstm_model ("\"instances\": 1, \"max_streams\": 8"), false);
    /* the spare loads the LSTM and parks its kernel: the first kill promotes it (a relaunch, no load) */
    for (int waited = 0; waited < 60000 && !s_log_has (&s, "(1 of 1 model(s) loaded there"); waited += 20)
        usleep (20 * 1000);
    ck_assert_msg (s_log_has (&s, "model \"seq\" loaded, its resident kernel(s) parked until it is promoted"),
                   "no spare with the LSTM parked (log: %s)", s.log);
    void *sock = s_socket (&s);
    enum { STEPS = 4 * WINDOW, KILL_AFTER = WINDOW + WINDOW / 4, KILL_AGAIN = 2 * WINDOW + 3 };
    static float a[STEPS * STEP];
    for (size_t i = 0; i < STEPS * STEP; i++)
        a[i] = rng_uniform (&s_seed, -1, 1);
    for (uint64_t t = 1; t <= STEPS; t++) {
        s_step_ok (sock, a, 70, t, true);
        if (t == KILL_AFTER)
            s_fault_and_wait (&s, 0, "kill");
        if (t == KILL_AGAIN)
            s_fault_and_wait (&s, 1, "kill");
    }
    printf ("an LSTM stream on GPU 0 across two kills: %d steps within bound; rebuilds %.0f\n", STEPS,
            s_metric (&s, "sigserve_stream_history_rebuilds_total{model=\"seq\"}"));
    ck_assert_double_eq (s_metric (&s, "sigserve_device_losses_total{device=\"cuda:0\"}"), 2);
    ck_assert_double_ge (s_metric (&s, "sigserve_device_standby_promotions_total{device=\"cuda:0\"}"), 1);
    ck_assert_msg (s_log_has (&s, "promoted, 1 model(s) rejoined (1 loaded there before)"), "log: %s", s.log);
    ck_assert_double_ge (s_metric (&s, "sigserve_stream_history_rebuilds_total{model=\"seq\"}"), 2);
    zmq_close (sock);
    ck_assert_int_eq (s_stop (&s), 0);
    s_backend = "\"backend\": \"cpu\"";
    s_gpu = false;
}
END_TEST

START_TEST (a_stream_evicted_from_the_history_is_refused_after_a_kill)
{
    /* one instance keeping 2 streams' history: of 50, 51, 52 (3 steps each, in that order), 50 is evicted */
    server_t s;
    s_start (&s, s_lstm_model ("\"instances\": 1, \"max_streams\": 8, \"stream_history\": 2"), true);
    void *sock = s_socket (&s);
    enum { STEPS = 6 };
    static float x[3][STEPS * STEP];
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < STEPS * STEP; i++)
            x[k][i] = rng_uniform (&s_seed, -1, 1);
    for (int k = 0; k < 3; k++)
        for (uint64_t t = 1; t <= 3; t++)
            s_step_ok (sock, x[k], 50 + (uint64_t) k, t, true);
    /* held by its worker, the evicted stream goes on as before the kill (re-entering the history, it
     * evicts 51, now the least recently stepped) */
    s_step_ok (sock, x[0], 50, 4, true);
    ck_assert_double_eq (s_metric (&s, "sigserve_stream_history_evictions_total{model=\"seq\"}"), 2);
    s_kill_and_wait (&s, 0);
    /* 50 re-entered the history at step 4 (evicting 51): it cannot be rebuilt; nor can 51; 52 can */
    Sigserve__V1__Reply *r = s_step (sock, x[0] + 4 * STEP, 50, 5, 900);
    ck_assert_int_eq (r->infer->status, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST);
    ck_assert_str_eq (r->infer->error, "stream_id 50: model \"seq\" cannot rebuild the stream: it was evicted from the "
                                       "stream history (stream_history = 2 streams on instance 0, the least recently "
                                       "stepped evicted) and its instance has lost it since; the step was not applied: "
                                       "start the stream again at step 1");
    sigserve__v1__reply__free_unpacked (r, NULL);
    r = s_step (sock, x[1] + 3 * STEP, 51, 0, 901);     /* not numbered: refused all the same */
    ck_assert_int_eq (r->infer->status, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST);
    ck_assert (strstr (r->infer->error, "stream_id 51: model \"seq\" cannot rebuild the stream: it was evicted"));
    sigserve__v1__reply__free_unpacked (r, NULL);
    for (uint64_t t = 4; t <= STEPS; t++)
        s_step_ok (sock, x[2], 52, t, true);
    /* the refused ones start again at step 1: a new stream over the same steps */
    for (uint64_t t = 1; t <= STEPS; t++)
        s_step_ok (sock, x[0], 50, t, true);
    ck_assert_double_eq (s_metric (&s, "sigserve_stream_history_rebuilds_total{model=\"seq\"}"), 1);
    zmq_close (sock);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

START_TEST (a_gru_stream_survives_a_kill)
{
    server_t s;
    s_start (&s, s_gru_model (), true);
    s_name = "gru";
    void *sock = s_socket (&s);
    enum { STEPS = 3 * WINDOW, KILL_AFTER = WINDOW + 3 };
    static float x[STEPS * STEP];
    for (size_t i = 0; i < STEPS * STEP; i++)
        x[i] = rng_uniform (&s_seed, -1, 1);
    for (uint64_t t = 1; t <= KILL_AFTER; t++)
        s_step_ok (sock, x, 60, t, true);
    s_kill_and_wait (&s, 0);
    for (uint64_t t = KILL_AFTER + 1; t <= STEPS; t++)
        s_step_ok (sock, x, 60, t, true);
    ck_assert_double_eq (s_metric (&s, "sigserve_stream_history_rebuilds_total{model=\"gru\"}"), 1);
    s_name = "seq";
    zmq_close (sock);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

int main (void)
{
    Suite *suite = suite_create ("stream_survive");
    TCase *c = s_tcase ("cpu");
    tcase_add_test (c, an_lstm_stream_survives_a_kill);
    tcase_add_test (c, a_stream_evicted_from_the_history_is_refused_after_a_kill);
    tcase_add_test (c, a_gru_stream_survives_a_kill);
    suite_add_tcase (suite, c);
    TCase *g = s_tcase ("gpu");
    tcase_add_test (g, an_lstm_stream_on_a_gpu_survives_two_kills);
    suite_add_tcase (suite, g);
    const int rc = s_main (suite);
    weights_destroy (&s_lstm);
    weights_destroy (&s_gru);
    return rc;
}
