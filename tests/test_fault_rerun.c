/* Requests held by a lost device process re-run on another instance (issue 38, item 1), over the
 * socket with sigserve-test (CPU models placed in device processes; a CPU model with devices
 * [0, 1] has its instances alternate between two of them, "cpu" and "cpu1": serving/devices.h):
 *   - two instances on two device processes, one killed under load: every request answered exactly
 *     once and OK, with outputs against the float64 reference; what the lost one held re-run on the
 *     other (sigserve_lost_requests_total{result="rerun"}, the log line saying so), none answered
 *     UNAVAILABLE; the lost process back, both serving again;
 *   - the same made deterministic: instance 0's process stopped while a burst arrives, then killed:
 *     every job it held (the model's queue depth) re-run, counted exactly;
 *   - one instance, killed under load: what it held answered UNAVAILABLE, each reply saying why it
 *     was not re-run (no other instance), counted as result="unavailable".
 * Counts and values only, never times. */
#define _GNU_SOURCE
#include "device_processes_tests.h"

#define SPREAD "\"backend\": \"cpu\", \"instances\": 2, \"devices\": [0, 1],"

START_TEST (spread_instances_use_two_device_processes)
{
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", SPREAD));
    server_t s;
    s_start (&s, s_models, true);
    ck_assert_int_gt (s_device_pid (&s, "cpu (test)"), 0);
    ck_assert_int_gt (s_device_pid (&s, "cpu1 (test)"), 0);
    load_t l = { .models = { "tick_mlp" }, .model_count = 1, .total = 400, .check_outputs = true };
    s_load (&s, &l);
    ck_assert_uint_eq (l.ok[0], 400);
    ck_assert_double_eq (s_metric (&s, "sigserve_device_process_up{device=\"cpu\"}"), 1);
    ck_assert_double_eq (s_metric (&s, "sigserve_device_process_up{device=\"cpu1\"}"), 1);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

START_TEST (killed_process_reruns_what_it_held_on_the_other)
{
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", SPREAD));
    server_t s;
    s_start (&s, s_models, true);
    const pid_t first = s_device_pid (&s, "cpu (test)"), other = s_device_pid (&s, "cpu1 (test)");
    ck_assert_int_gt (first, 0);
    ck_assert_int_gt (other, 0);
    load_t l = { .models = { "tick_mlp" }, .model_count = 1, .total = 3000, .fault_after = 300,
                 .fault = "device=cpu&kind=kill", .check_outputs = true };
    s_load (&s, &l);
    const double rerun = s_metric (&s, "sigserve_lost_requests_total{model=\"tick_mlp\",result=\"rerun\"}");
    printf ("killed one of two: %u OK, %u UNAVAILABLE, %.0f re-run\n", l.ok[0], l.unavailable[0], rerun);
    /* every request answered once (s_load), all of them OK and right: nothing refused */
    ck_assert_uint_eq (l.ok[0], 3000);
    ck_assert_uint_eq (l.unavailable[0], 0);
    ck_assert_double_eq (s_metric (&s, "sigserve_lost_requests_total{model=\"tick_mlp\",result=\"unavailable\"}"), 0);
    /* how many the lost process held when it went is up to the scheduler: 0 or more, each re-run */
    ck_assert (rerun == 0 || s_log_has (&s, "re-run on other instances"));
    ck_assert (!s_log_has (&s, "answered UNAVAILABLE"));
    ck_assert (s_log_has (&s, "lost (killed by signal 9)"));
    ck_assert_msg (s_wait_serving (&s, 30000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_ne (s_device_pid (&s, "cpu (test)"), first);
    ck_assert_int_eq (s_device_pid (&s, "cpu1 (test)"), other);
    ck_assert_double_eq (s_metric (&s, "sigserve_device_losses_total{device=\"cpu\"}"), 1);
    ck_assert_double_eq (s_metric (&s, "sigserve_device_losses_total{device=\"cpu1\"}"), 0);
    /* both serve again, right */
    const double a0 = s_metric (&s, "sigserve_instance_requests_total{model=\"tick_mlp\",instance=\"0\",device=\"cpu\"}");
    load_t again = { .models = { "tick_mlp" }, .model_count = 1, .total = 400, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0], 400);
    ck_assert_double_gt (s_metric (&s, "sigserve_instance_requests_total{model=\"tick_mlp\",instance=\"0\",device=\"cpu\"}"),
                         a0);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

/* One reply of SOCK within REPLY_WAIT_MS, checked: an infer reply of a request below TOTAL not seen
 * before, OK, its output against the float64 reference of SENT. */
static void s_take_ok_reply (server_t *s, void *sock, uint8_t *seen, const float *sent, uint32_t total)
{
    Sigserve__V1__Reply *r = s_infer_reply (sock, seen, total);
    const Sigserve__V1__InferReply *rep = r->infer;
    ck_assert_msg (rep->status == SIGSERVE__V1__STATUS__STATUS_OK, "request %llu: status %d: %s",
                   (unsigned long long) rep->request_id, rep->status, rep->error);
    ck_assert_str_eq (rep->backend, "cpu");
    ck_assert_uint_eq (rep->n_outputs, 1);
    double ref, bound;
    ck_assert_int_eq (tol_mlp (s->tick, sent + rep->request_id * 512, 1, &ref, &bound), 0);
    TOL_ASSERT (rep->outputs, &ref, &bound, 1, 1, "request %llu", (unsigned long long) rep->request_id);
    sigserve__v1__reply__free_unpacked (r, NULL);
}

/* Deterministic: the process of instance 0 stopped (SIGSTOP) while a burst arrives, so the jobs
 * admitted to it stay queued there (the model's queue depth bounds how many); then killed. Every one
 * of those is re-run on instance 1: all answered once, OK and right, none UNAVAILABLE, each counted. */
START_TEST (stopped_then_killed_process_reruns_every_job_it_held)
{
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", SPREAD));
    server_t s;
    s_start (&s, s_models, true);
    const pid_t dev0 = s_device_pid (&s, "cpu (test)");
    ck_assert_int_gt (dev0, 0);
    ck_assert_int_eq (kill (dev0, SIGSTOP), 0);
    enum { TOTAL = 200 };
    void *sock = s_dealer (&s, s.endpoint);
    int timeout = REPLY_WAIT_MS;
    zmq_setsockopt (sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    static uint8_t buf[1 << 16];
    static float sent[TOTAL * 512];
    uint8_t seen[TOTAL] = { 0 };
    unsigned seed = 11;
    for (uint32_t i = 0; i < TOTAL; i++) {
        s_random (sent + (size_t) i * 512, 512, &seed);
        size_t len = tu_pack_infer (buf, sizeof buf, "tick_mlp", sent + (size_t) i * 512, 512, 1, i, 0);
        ck_assert_int_eq (zmq_send (sock, buf, len, 0), (int) len);
    }
    /* instance 1 answers what it took; what instance 0 took waits in its queue */
    uint32_t received = 0;
    double held = 0;
    for (;;) {
        held = s_metric (&s, "sigserve_queue_depth{model=\"tick_mlp\"}");
        if (held > 0 && received + (uint32_t) held == TOTAL)
            break;
        ck_assert_uint_lt (received, TOTAL);
        s_take_ok_reply (&s, sock, seen, sent, TOTAL);
        received++;
    }
    printf ("stopped instance 0 holds %.0f of %d\n", held, TOTAL);
    ck_assert_int_eq (kill (dev0, SIGKILL), 0);
    while (received < TOTAL) {
        s_take_ok_reply (&s, sock, seen, sent, TOTAL);
        received++;
    }
    for (uint32_t i = 0; i < TOTAL; i++)
        ck_assert_msg (seen[i] == 1, "request %u never answered", i);
    /* re-run: what instance 0 held. The queue depth read above counts instance 1's queue too
     * (a loaded machine may read it before instance 1 has taken its share), so it bounds the count */
    const double rerun = s_metric (&s, "sigserve_lost_requests_total{model=\"tick_mlp\",result=\"rerun\"}");
    ck_assert_msg (rerun >= 1 && rerun <= held, "re-run %.0f of the %.0f queued", rerun, held);
    ck_assert_double_eq (s_metric (&s, "sigserve_lost_requests_total{model=\"tick_mlp\",result=\"unavailable\"}"), 0);
    ck_assert (s_log_has (&s, "re-run on other instances"));
    zmq_close (sock);
    ck_assert_msg (s_wait_serving (&s, 30000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

START_TEST (single_instance_answers_what_it_held_with_the_reason)
{
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", "\"backend\": \"cpu\", \"instances\": 1,"));
    server_t s;
    s_start (&s, s_models, true);
    load_t l = { .models = { "tick_mlp" }, .model_count = 1, .total = 2000, .fault_after = 200,
                 .fault = "device=cpu&kind=kill", .check_outputs = true };
    s_load (&s, &l);
    printf ("killed the only one: %u OK, %u UNAVAILABLE (%u held, %u saying why not re-run, %u refused at admission)\n",
            l.ok[0], l.unavailable[0], l.unavailable_lost, l.unavailable_no_rerun, l.unavailable_admission);
    ck_assert_uint_eq (l.ok[0] + l.unavailable[0], 2000);
    ck_assert_uint_eq (l.unavailable_lost + l.unavailable_admission, l.unavailable[0]);
    ck_assert_double_eq (s_metric (&s, "sigserve_lost_requests_total{model=\"tick_mlp\",result=\"rerun\"}"), 0);
    /* what the front answered for the lost process says why it was not re-run, and is counted */
    ck_assert_double_eq (s_metric (&s, "sigserve_lost_requests_total{model=\"tick_mlp\",result=\"unavailable\"}"),
                         l.unavailable_no_rerun);
    ck_assert (l.unavailable_no_rerun == 0 || s_log_has (&s, "no other instance of the model is available to re-run it"));
    ck_assert_msg (s_wait_serving (&s, 30000), "the model did not come back (log: %s)", s.log);
    load_t again = { .models = { "tick_mlp" }, .model_count = 1, .total = 200, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0], 200);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

static Suite *s_suite (void)
{
    Suite *suite = suite_create ("fault_rerun");
    TCase *c = s_tcase ("cpu");
    tcase_add_test (c, spread_instances_use_two_device_processes);
    tcase_add_test (c, killed_process_reruns_what_it_held_on_the_other);
    tcase_add_test (c, stopped_then_killed_process_reruns_every_job_it_held);
    tcase_add_test (c, single_instance_answers_what_it_held_with_the_reason);
    suite_add_tcase (suite, c);
    return suite;
}

int main (void)
{
    return s_main (s_suite ());
}
