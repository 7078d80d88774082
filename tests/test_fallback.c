/* A model's CPU fallback (issue 38, items 2 and 5), over the socket with sigserve-test: a CPU model
 * placed in the test build's CPU device process (--test-cpu-device-process) with "fallback":
 * {"backend": "cpu", "instances": 1} stands for a GPU model with one (serving/fallback.c: an explicit
 * fallback is loaded wherever the model's instances may be lost). Its device process is killed, and
 * its weights file moved away first where the outage must last (the restart's load then fails, and is
 * tried again with backoff until the file is back): a deterministic outage, no sleeps (with
 * "standby": false: a warm spare loaded before the file moved would end it at once).
 *   - killed under steady load: every request answered exactly once, none UNAVAILABLE, every output
 *     within the float64 reference's bound; those after the kill computed by the fallback (their reply
 *     says "cpu (fallback)"), counted by sigserve_fallback_total; logged once each way; after the
 *     process is back, sigserve_fallback_active and sigserve_degraded 0 and the model's own instance
 *     serving again;
 *   - stopped while a burst arrives, then killed: every request it held re-run on the fallback;
 *   - an LSTM's two streams across two kills: each step during an outage computed by the fallback,
 *     which rebuilt the streams from the history (the second time over its own stale slots), and each
 *     after it by the model's own instances, which rebuilt them again; every step's output within the
 *     bound of the reference over the whole stream, as in an undisturbed run;
 *   - "fallback": "off": what the lost process held re-run on a surviving instance (devices [0, 1]);
 *     with none, answered UNAVAILABLE saying that no instance nor fallback can take it, and a request
 *     while it is down refused at admission saying so;
 *   - "auto" gives a CPU model none, and an explicit one on a CPU model in the server's process is
 *     logged as having nothing to fall back from.
 * Counts and values only, never times. The config errors of "fallback" are in test_config_errors. */
#define _GNU_SOURCE
#include "device_processes_tests.h"
#include "lstm_reference.h"
#include "lstm_seq_tests.h"
#include "rng.h"

#include <dirent.h>

#define FALLBACK "\"fallback\": { \"backend\": \"cpu\", \"instances\": 1 },"
#define SPREAD "\"backend\": \"cpu\", \"instances\": 2, \"devices\": [0, 1],"

static char s_moved[4200];      /* where s_move_weights put them */

/* The demo weights copied into a folder of this case's: those the models load (moved away at will). */
static void s_own_weights (void)
{
    char from[4096];
    snprintf (from, sizeof from, "%s/models/tick_mlp.safetensors", tu_build_abs ());
    char *dir = tu_tmpdir ();
    snprintf (s_tick_path, sizeof s_tick_path, "%s/tick_mlp.safetensors", dir);
    free (dir);
    FILE *in = fopen (from, "rb"), *out = fopen (s_tick_path, "wb");
    ck_assert (in && out);
    static char buf[1 << 16];
    size_t n;
    while ((n = fread (buf, 1, sizeof buf, in)) > 0)
        ck_assert_uint_eq (fwrite (buf, 1, n, out), n);
    fclose (in);
    ck_assert_int_eq (fclose (out), 0);
}

/* PATH moved away (a restart's load then fails) or back. */
static void s_move_weights (const char *path, bool away)
{
    snprintf (s_moved, sizeof s_moved, "%s.away", path);
    ck_assert_int_eq (away ? rename (path, s_moved) : rename (s_moved, path), 0);
}

/* Posts a kill of the CPU device process and waits until the loss is noticed. */
static void s_kill (server_t *s, double losses_before)
{
    char body[512];
    const int st = s_http (s->http_port, "POST", "/debug/fault?device=cpu&kind=kill", body, sizeof body);
    ck_assert_msg (st == 200, "POST /debug/fault: %d %s", st, body);
    for (int waited = 0; s_metric (s, "sigserve_device_losses_total{device=\"cpu\"}") < losses_before + 1; waited += 20) {
        ck_assert_msg (waited < 60000, "the loss was not noticed (log: %s)", s->log);
        usleep (20 * 1000);
    }
}


/* Waits for the log line TEXT. */
static void s_wait_log (server_t *s, const char *text)
{
    for (int waited = 0; !s_log_has (s, text); waited += 20) {
        ck_assert_msg (waited < 60000, "no \"%s\" in the log %s", text, s->log);
        usleep (20 * 1000);
    }
}

START_TEST (killed_under_load_serves_on_the_fallback_then_comes_back)
{
    s_own_weights ();
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", "\"backend\": \"cpu\", \"instances\": 1, " FALLBACK));
    server_t s;
    s_start (&s, s_models, true);
    ck_assert (s_log_has (&s, "model tick_mlp: CPU fallback of 1 instance(s) loaded and warmed"));
    ck_assert_double_eq (s_metric (&s, "sigserve_fallback_total{model=\"tick_mlp\"}"), 0);
    ck_assert_double_eq (s_metric (&s, "sigserve_fallback_active{model=\"tick_mlp\"}"), 0);
    static char body[1 << 16];
    ck_assert_int_eq (s_http (s.http_port, "GET", "/models", body, sizeof body), 200);
    ck_assert_msg (strstr (body, "\"fallback\":{\"backend\":\"cpu\",\"instances\":1,\"active\":false}"), "%s", body);
    /* the restart fails until the weights are back: the outage lasts the rest of the load */
    s_move_weights (s_tick_path, true);
    enum { TOTAL = 1000, KILL_AFTER = 200 };
    load_t l = { .models = { "tick_mlp" }, .model_count = 1, .total = TOTAL, .fault_after = KILL_AFTER,
                 .fault = "device=cpu&kind=kill", .check_outputs = true };
    s_load (&s, &l);
    const double computed = s_metric (&s, "sigserve_fallback_total{model=\"tick_mlp\"}");
    ck_assert_double_eq (s_metric (&s, "sigserve_fallback_active{model=\"tick_mlp\"}"), 1);
    ck_assert_double_eq (s_metric (&s, "sigserve_degraded"), 1);
    s_move_weights (s_tick_path, false);
    printf ("killed under load: %u OK (%u by the fallback), %u UNAVAILABLE\n", l.ok[0], l.fallback[0], l.unavailable[0]);
    /* every request answered once (s_load), OK and right (checked against the reference there) */
    ck_assert_uint_eq (l.ok[0], TOTAL);
    ck_assert_uint_eq (l.unavailable[0], 0);
    /* after the kill (the device process answers the fault call, then dies), what its process no longer
     * computed was computed by the fallback: the outage lasted past the load's end */
    ck_assert_uint_gt (l.fallback[0], 0);
    ck_assert_double_eq (computed, l.fallback[0]);
    ck_assert (s_log_has (&s, "model tick_mlp: no GPU instance available: serving on its CPU fallback"));
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    s_wait_log (&s, "model tick_mlp: back on cpu");
    ck_assert_double_eq (s_metric (&s, "sigserve_fallback_active{model=\"tick_mlp\"}"), 0);
    ck_assert_double_eq (s_metric (&s, "sigserve_degraded"), 0);
    /* its own instance serves again: nothing more on the fallback */
    load_t again = { .models = { "tick_mlp" }, .model_count = 1, .total = 200, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0], 200);
    ck_assert_uint_eq (again.fallback[0], 0);
    ck_assert_double_eq (s_metric (&s, "sigserve_fallback_total{model=\"tick_mlp\"}"), computed);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

/* Whether every thread of PID is stopped (SIGSTOP delivered to each). */
static bool s_all_threads_stopped (pid_t pid)
{
    char path[96];
    snprintf (path, sizeof path, "/proc/%d/task", (int) pid);
    DIR *d = opendir (path);
    ck_assert_ptr_nonnull (d);
    bool all = true;
    for (struct dirent *e; all && (e = readdir (d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char stat[128], state = 0;
        snprintf (stat, sizeof stat, "/proc/%d/task/%.16s/stat", (int) pid, e->d_name);
        FILE *f = fopen (stat, "r");
        if (f && fscanf (f, "%*d (%*[^)]) %c", &state) == 1)
            all = state == 'T' || state == 't';
        if (f)
            fclose (f);
    }
    closedir (d);
    return all;
}

/* TOTAL requests sent on SOCK while the only instance's process is stopped; once they all wait in its
 * queue, the process is killed. SENT: their features. */
static void s_burst_to_a_stopped_process (server_t *s, void *sock, float *sent, uint32_t total)
{
    const pid_t dev = s_device_pid (s, "cpu (test)");
    ck_assert_int_gt (dev, 0);
    ck_assert_int_eq (kill (dev, SIGSTOP), 0);
    /* stopped for good before the burst: a worker still running would take a batch, which the queue
     * depth then never counts */
    for (int waited = 0; !s_all_threads_stopped (dev); waited += 1) {
        ck_assert_msg (waited < 60000, "process %d did not stop", (int) dev);
        usleep (1000);
    }
    static uint8_t buf[1 << 16];
    unsigned seed = 13;
    for (uint32_t i = 0; i < total; i++) {
        s_random (sent + (size_t) i * 512, 512, &seed);
        size_t len = tu_pack_infer (buf, sizeof buf, "tick_mlp", sent + (size_t) i * 512, 512, 1, i, 0);
        ck_assert_int_eq (zmq_send (sock, buf, len, 0), (int) len);
    }
    for (int waited = 0; s_metric (s, "sigserve_queue_depth{model=\"tick_mlp\"}") < total; waited += 20) {
        ck_assert_msg (waited < 60000, "the burst did not queue (log: %s)", s->log);
        usleep (20 * 1000);
    }
    ck_assert_int_eq (kill (dev, SIGKILL), 0);
}

START_TEST (stopped_then_killed_reruns_what_it_held_on_the_fallback)
{
    s_own_weights ();
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", "\"backend\": \"cpu\", \"instances\": 1, " FALLBACK));
    server_t s;
    s_start (&s, s_models, true);
    void *sock = s_dealer (&s, s.endpoint);
    int timeout = REPLY_WAIT_MS;
    zmq_setsockopt (sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    enum { TOTAL = 200 };
    static float sent[TOTAL * 512];
    uint8_t seen[TOTAL] = { 0 };
    s_burst_to_a_stopped_process (&s, sock, sent, TOTAL);
    for (uint32_t i = 0; i < TOTAL; i++) {
        Sigserve__V1__Reply *r = s_infer_reply (sock, seen, TOTAL);
        const Sigserve__V1__InferReply *rep = r->infer;
        ck_assert_msg (rep->status == SIGSERVE__V1__STATUS__STATUS_OK, "request %llu: %d %s",
                       (unsigned long long) rep->request_id, rep->status, rep->error);
        ck_assert_str_eq (rep->backend, "cpu (fallback)");
        double ref, bound;
        ck_assert_int_eq (tol_mlp (s.tick, sent + rep->request_id * 512, 1, &ref, &bound), 0);
        TOL_ASSERT (rep->outputs, &ref, &bound, 1, 1, "request %llu", (unsigned long long) rep->request_id);
        sigserve__v1__reply__free_unpacked (r, NULL);
    }
    /* every one it held re-run, on the fallback: counted so, none answered UNAVAILABLE */
    ck_assert_double_eq (s_metric (&s, "sigserve_lost_requests_total{model=\"tick_mlp\",result=\"rerun\"}"), TOTAL);
    ck_assert_double_eq (s_metric (&s, "sigserve_lost_requests_total{model=\"tick_mlp\",result=\"unavailable\"}"), 0);
    ck_assert_double_eq (s_metric (&s, "sigserve_fallback_total{model=\"tick_mlp\"}"), TOTAL);
    ck_assert (s_log_has (&s, "200 request(s) held by its lost device process re-run on other instances (200 of them "
                              "on its CPU fallback)"));
    zmq_close (sock);
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

/* ------------------------------------------------------------------------------ an LSTM's streams */

static uint64_t s_seed = 8765;

/* Step T (1-based) of stream ID, whose steps are STEPS, numbered: OK, computed by BACKEND, and within
 * the bound of the float64 reference over its first T steps. */
static void s_step_ok (void *sock, const float *steps, uint64_t id, uint64_t t, const char *backend)
{
    static uint64_t request_id = 1;
    Sigserve__V1__Reply *r = seq_step (sock, "seq", steps + (size_t) (t - 1) * STEP, id, t, request_id++, false);
    ck_assert_msg (r->infer->status == SIGSERVE__V1__STATUS__STATUS_OK, "stream %llu step %llu: %d %s",
                   (unsigned long long) id, (unsigned long long) t, r->infer->status, r->infer->error);
    ck_assert_msg (strcmp (r->infer->backend, backend) == 0, "stream %llu step %llu computed by \"%s\", expected \"%s\"",
                   (unsigned long long) id, (unsigned long long) t, r->infer->backend, backend);
    ck_assert_uint_eq (r->infer->n_outputs, OUTS);
    double ref[OUTS], bound[OUTS];
    ck_assert_int_eq (tol_lstm_stream (s_lstm->lstm, WEIGHT_DTYPE_F32, steps, t, ref, bound), 0);
    TOL_ASSERT (r->infer->outputs, ref, bound, OUTS, OUTS, "stream %llu step %llu", (unsigned long long) id,
                (unsigned long long) t);
    sigserve__v1__reply__free_unpacked (r, NULL);
}

START_TEST (lstm_streams_go_to_the_fallback_and_back_twice_unchanged)
{
    /* ids 40 and 41: one on each instance (id % 2); the fallback stands in for each with one of its own */
    seq_model ("\"backend\": \"cpu\", \"instances\": 2, \"max_streams\": 8, " FALLBACK " \"max_rows\": 1", 79);
    server_t s;
    s_start (&s, s_models, true);
    ck_assert (s_log_has (&s, "model seq: CPU fallback of 2 instance(s) loaded and warmed"));
    void *sock = s_dealer (&s, s.endpoint);
    const int timeout = REPLY_WAIT_MS;
    zmq_setsockopt (sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    /* two outages: on the fallback, back, on the fallback again (whose slots are stale by then: it
     * rebuilds them from the history again), back */
    enum { STEPS = 5 * WINDOW };
    const uint64_t turn[5] = { WINDOW + WINDOW / 4, 2 * WINDOW + 3, 3 * WINDOW + 1, 4 * WINDOW - 2, STEPS };
    static float a[STEPS * STEP], b[STEPS * STEP];
    for (size_t i = 0; i < STEPS * STEP; i++) {
        a[i] = rng_uniform (&s_seed, -1, 1);
        b[i] = rng_uniform (&s_seed, -1, 1);
    }
    uint64_t t = 1, on_fallback = 0;
    for (int k = 0; k < 5; k++) {
        const bool outage = k % 2 == 1;
        if (outage) {
            s_move_weights (s_lstm_path, true);
            s_kill (&s, k / 2);
            ck_assert_msg (s_wait_metric (&s, "sigserve_fallback_active{model=\"seq\"}", 1, 60000), "fallback_active never read 1 (log: %s)", s.log);
        } else if (k > 0) {
            s_move_weights (s_lstm_path, false);
            ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
            ck_assert_msg (s_wait_metric (&s, "sigserve_fallback_active{model=\"seq\"}", 0, 60000), "fallback_active never read 0 (log: %s)", s.log);
        }
        /* in an outage each step on the fallback, which rebuilds the streams from their history first;
         * after it on the model's own instances, which rebuild them from what the fallback wrote there */
        for (; t <= turn[k]; t++) {
            s_step_ok (sock, a, 40, t, outage ? "cpu (fallback)" : "cpu");
            s_step_ok (sock, b, 41, t, outage ? "cpu (fallback)" : "cpu");
            on_fallback += outage ? 2 : 0;
        }
    }
    ck_assert (s_log_has (&s, "model seq: no GPU instance available: serving on its CPU fallback"));
    ck_assert (s_log_has (&s, "model seq: back on cpu"));
    ck_assert_double_eq (s_metric (&s, "sigserve_fallback_total{model=\"seq\"}"), (double) on_fallback);
    ck_assert_double_eq (s_metric (&s, "sigserve_device_losses_total{device=\"cpu\"}"), 2);
    /* each of the two streams rebuilt at each of the four moves */
    ck_assert_double_eq (s_metric (&s, "sigserve_stream_history_rebuilds_total{model=\"seq\"}"), 8);
    ck_assert_double_eq (s_metric (&s, "sigserve_stream_history_evictions_total{model=\"seq\"}"), 0);
    zmq_close (sock);
    ck_assert_int_eq (s_stop (&s), 0);
    weights_destroy (&s_lstm);
}
END_TEST

/* ------------------------------------------------------------------------------ "fallback": "off" */

START_TEST (without_a_fallback_a_surviving_instance_reruns_what_was_held)
{
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", SPREAD " \"fallback\": \"off\","));
    server_t s;
    s_start (&s, s_models, true);
    ck_assert (!s_log_has (&s, "CPU fallback"));
    load_t l = { .models = { "tick_mlp" }, .model_count = 1, .total = 2000, .fault_after = 200,
                 .fault = "device=cpu&kind=kill", .check_outputs = true };
    s_load (&s, &l);
    ck_assert_uint_eq (l.ok[0], 2000);
    ck_assert_uint_eq (l.unavailable[0], 0);
    ck_assert_uint_eq (l.fallback[0], 0);
    ck_assert_double_eq (s_metric (&s, "sigserve_fallback_total{model=\"tick_mlp\"}"), -1);    /* none to count */
    static char body[1 << 16];
    ck_assert_int_eq (s_http (s.http_port, "GET", "/models", body, sizeof body), 200);
    ck_assert (!strstr (body, "\"fallback\""));
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

START_TEST (without_a_fallback_nor_another_instance_held_requests_say_why)
{
    s_own_weights ();
    snprintf (s_models, sizeof s_models, "%s",
              s_model ("tick_mlp", "\"backend\": \"cpu\", \"instances\": 1, \"fallback\": \"off\","));
    server_t s;
    s_start (&s, s_models, true);
    void *sock = s_dealer (&s, s.endpoint);
    int timeout = REPLY_WAIT_MS;
    zmq_setsockopt (sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    enum { TOTAL = 100 };
    static float sent[TOTAL * 512];
    uint8_t seen[TOTAL] = { 0 };
    s_move_weights (s_tick_path, true);    /* the outage lasts until they are back */
    s_burst_to_a_stopped_process (&s, sock, sent, TOTAL);
    for (uint32_t i = 0; i < TOTAL; i++) {
        Sigserve__V1__Reply *r = s_infer_reply (sock, seen, TOTAL);
        ck_assert_int_eq (r->infer->status, SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE);
        ck_assert_msg (strstr (r->infer->error, "model \"tick_mlp\" instance 0: device process lost")
                       && strstr (r->infer->error, "(no other instance of the model is available to re-run it, and "
                                                   "it has no fallback)"), "%s", r->infer->error);
        sigserve__v1__reply__free_unpacked (r, NULL);
    }
    ck_assert_double_eq (s_metric (&s, "sigserve_lost_requests_total{model=\"tick_mlp\",result=\"unavailable\"}"), TOTAL);
    /* a request while it is down is refused at once, saying why */
    static uint8_t buf[1 << 16];
    size_t len = tu_pack_infer (buf, sizeof buf, "tick_mlp", sent, 512, 1, TOTAL, 0);
    ck_assert_int_eq (zmq_send (sock, buf, len, 0), (int) len);
    uint8_t more[TOTAL + 1] = { 0 };
    Sigserve__V1__Reply *r = s_infer_reply (sock, more, TOTAL + 1);
    ck_assert_int_eq (r->infer->status, SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE);
    ck_assert_str_eq (r->infer->error, "model \"tick_mlp\" is unavailable on backend cpu: no instance of it can run and "
                                       "it has no fallback");
    sigserve__v1__reply__free_unpacked (r, NULL);
    s_move_weights (s_tick_path, false);
    zmq_close (sock);
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

/* "auto" (the default) gives a CPU model none: nothing to fall back from; neither does an explicit
 * one on a CPU model in the server's own process (logged), which serves as before. */
START_TEST (a_cpu_model_in_the_server_gets_none)
{
    snprintf (s_models, sizeof s_models, "%s, %s", s_model ("plain", "\"backend\": \"cpu\","),
              s_model ("asked", "\"backend\": \"cpu\", " FALLBACK));
    server_t s;
    s_start (&s, s_models, false);
    ck_assert (s_log_has (&s, "model asked: no CPU fallback: its instances run on the CPU in this process: there is "
                              "nothing to fall back from"));
    ck_assert (!s_log_has (&s, "model plain: no CPU fallback"));
    ck_assert (!s_log_has (&s, "loaded and warmed (serves only while"));
    static char body[1 << 16];
    ck_assert_int_eq (s_http (s.http_port, "GET", "/models", body, sizeof body), 200);
    ck_assert (!strstr (body, "\"fallback\""));
    load_t l = { .models = { "plain", "asked" }, .model_count = 2, .total = 200, .check_outputs = true };
    s_load (&s, &l);
    ck_assert_uint_eq (l.ok[0] + l.ok[1], 200);
    ck_assert_uint_eq (l.fallback[0] + l.fallback[1], 0);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

int main (void)
{
    /* no warm standby: a promoted spare (its model loaded before the weights moved) would end the
     * outage these cases make; the fallback beside the standby is tools/fault-drive.sh's */
    s_server_extra = ", \"standby\": false";
    Suite *suite = suite_create ("fallback");
    TCase *c = s_tcase ("cpu");
    tcase_add_test (c, killed_under_load_serves_on_the_fallback_then_comes_back);
    tcase_add_test (c, stopped_then_killed_reruns_what_it_held_on_the_fallback);
    tcase_add_test (c, lstm_streams_go_to_the_fallback_and_back_twice_unchanged);
    tcase_add_test (c, without_a_fallback_a_surviving_instance_reruns_what_was_held);
    tcase_add_test (c, without_a_fallback_nor_another_instance_held_requests_say_why);
    tcase_add_test (c, a_cpu_model_in_the_server_gets_none);
    suite_add_tcase (suite, c);
    return s_main (suite);
}
