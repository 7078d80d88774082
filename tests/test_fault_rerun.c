/* Requests held by a lost device process re-run on another instance (issue 38, item 1), over the
 * socket with sigserve-test (CPU models placed in device processes; a CPU model with devices
 * [0, 1] has its instances alternate between two of them, "cpu" and "cpu1": serving/devices.h):
 *   - two instances on two device processes, one killed under load: every request answered exactly
 *     once and OK, with outputs against the float64 reference; what the lost one held re-run on the
 *     other (sigserve_lost_requests_total{result="rerun"}, the log line saying so), none answered
 *     UNAVAILABLE; the lost process back, both serving again;
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
    ck_assert (rerun >= 0);
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
    tcase_add_test (c, single_instance_answers_what_it_held_with_the_reason);
    suite_add_tcase (suite, c);
    return suite;
}

int main (void)
{
    return s_main (s_suite ());
}
