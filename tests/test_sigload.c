/* sigload's load runs and what they report, run as a subprocess the way a user runs it, against
 * (a) the real sigserve started by the fixture (CPU backend, the demo model and an LSTM model "seq")
 * and (b) test servers written here: a ROUTER thread in the test process that answers with status
 * OK but stalls once, or answers with error statuses, or with a wrong request_id
 * (tests/sigload_tests.h: both, and the helpers test_sigload_options.c shares).
 *
 * What is asserted is what a user reads: the summary CSV (one row per step), the .hgrm files,
 * the markdown table, plots.gp (its points and the floor) and the exit code; saturation, and
 * what the plots make of it, in test_sigload_saturation.c. Timing assertions are limited to what
 * a loaded 2-core machine holds: pacing at 2000 requests/s, and a 200 ms stall that is 100x the
 * normal latency.
 *
 * Every case runs once per engine (a TCase each): every sigload the suite starts, --serve-echo
 * included, is given --engine (a case's own --engine, later on the line, wins). */
#define _GNU_SOURCE
#include "sigload_tests.h"

/* ---- reading the plots ---- */

/* Today's date in UTC, as the plots' titles write it. */
static void s_utc_date (char *buf, size_t len)
{
    time_t now = time (NULL);
    struct tm tm;
    gmtime_r (&now, &tm);
    strftime (buf, len, "%Y-%m-%d", &tm);
}

/* ---- against sigserve ---- */

START_TEST (open_loop_paces_within_1_percent)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--rate", "2000", "--duration", "3",
                           "--warmup", "0.5", NULL };
    s_sigload ("pacing", args, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "| open-2000 | open loop | 2000/s |");
    EXPECT_IN (run.out, "from each request's scheduled send time");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 1);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "open-2000");
    ck_assert_str_eq (s_csv (&csv, 0, "kind"), "sigserve");
    ck_assert_str_eq (s_csv (&csv, 0, "mode"), "open");
    ck_assert_double_eq (s_csv_num (&csv, 0, "target"), 2000);
    double achieved = s_csv_num (&csv, 0, "achieved_rps");
    printf ("pacing: target 2000/s, achieved %.1f/s, send lag mean %.1f us\n", achieved,
            s_csv_num (&csv, 0, "send_lag_mean_us"));
    ck_assert_msg (fabs (achieved - 2000) <= 20, "achieved %.1f requests/s for a target of 2000", achieved);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 6000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 6000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "errors"), 0);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "");
    /* the engine: the 24th column (where it always was; columns added since come after it), and a
     * line above the table */
    ck_assert_str_eq (s_csv (&csv, 0, "engine"), s_engine);
    ck_assert_str_eq (csv.cols[23], "engine");
    char engine_line[64];
    snprintf (engine_line, sizeof engine_line, "\nEngine: %s, for every step (", s_engine);
    EXPECT_IN (run.out, engine_line);
    /* the split: a real server time, and latency percentiles in order */
    ck_assert_double_gt (s_csv_num (&csv, 0, "server_mean_us"), 0);
    ck_assert_double_gt (s_csv_num (&csv, 0, "network_mean_us"), 0);
    double p50 = s_csv_num (&csv, 0, "p50_us"), p99 = s_csv_num (&csv, 0, "p99_us");
    ck_assert (p50 > 0 && p50 <= p99 && p99 <= s_csv_num (&csv, 0, "p999_us")
               && s_csv_num (&csv, 0, "p999_us") <= s_csv_num (&csv, 0, "max_us"));
    double max_us;
    ck_assert_int_eq (s_hgrm_check (&run, "open-2000", &max_us), 6000);
    ck_assert_double_eq_tol (max_us, s_csv_num (&csv, 0, "max_us"), 0.0011);
    char path[4400];
    snprintf (path, sizeof path, "%s/plots.gp", run.dir);
    ck_assert_int_eq (access (path, R_OK), 0);
    if (access ("/usr/bin/gnuplot", X_OK) == 0) {
        snprintf (path, sizeof path, "%s/percentiles.png", run.dir);
        ck_assert_int_eq (access (path, R_OK), 0);
        snprintf (path, sizeof path, "%s/latency_vs_throughput.png", run.dir);
        ck_assert_int_eq (access (path, R_OK), 0);
    }
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (closed_loop_is_labelled_and_splits_server_time)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--concurrency", "1,4", "--requests",
                           "2000", "--warmup", "0.2", NULL };
    s_sigload ("closed", args, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "| closed-1 | closed loop | 1 outstanding |");
    EXPECT_IN (run.out, "| closed-4 | closed loop | 4 outstanding |");
    EXPECT_IN (run.out, "closed loop, from each request's actual send");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 2);
    for (int r = 0; r < 2; r++) {
        ck_assert_str_eq (s_csv (&csv, r, "mode"), "closed");
        ck_assert_double_eq (s_csv_num (&csv, r, "target"), r == 0 ? 1 : 4);
        ck_assert_double_eq (s_csv_num (&csv, r, "requests"), 2000);
        ck_assert_double_eq (s_csv_num (&csv, r, "ok"), 2000);
        ck_assert_double_gt (s_csv_num (&csv, r, "achieved_rps"), 100);
        /* closed loop: total = network + server for every request, so for the means too */
        double server = s_csv_num (&csv, r, "server_mean_us"), network = s_csv_num (&csv, r, "network_mean_us");
        ck_assert_double_gt (server, 0);
        ck_assert_double_gt (network, 0);
        ck_assert_double_eq_tol (s_csv_num (&csv, r, "mean_us"), server + network, 0.01);
        ck_assert_double_eq (s_csv_num (&csv, r, "send_lag_mean_us"), 0);
    }
    ck_assert_int_eq (s_hgrm_check (&run, "closed-1", NULL), 2000);
    ck_assert_int_eq (s_hgrm_check (&run, "closed-4", NULL), 2000);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (unknown_model_counted_by_status)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "nope", "--concurrency", "2", "--requests", "300",
                           "--warmup", "0", NULL };
    s_sigload ("unknown", args, &run);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.err, "does not list model \"nope\" (served: tick_mlp, seq)");
    EXPECT_IN (run.out, "| 300 (STATUS_UNKNOWN_MODEL 300) |");
    EXPECT_IN (run.out, "closed-2: 300 x STATUS_UNKNOWN_MODEL, first: model: \"nope\" is not served here (served: tick_mlp, seq)");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 300);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 0);
    ck_assert_double_eq (s_csv_num (&csv, 0, "errors"), 300);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "STATUS_UNKNOWN_MODEL:300");
    ck_assert_int_eq (s_hgrm_check (&run, "closed-2", NULL), 0);   /* no successful request: an empty histogram */
    free (csv.text);
    s_run_free (&run);
}
END_TEST

/* --model a,b: request k goes to model k mod 2, so half of them find no model. */
START_TEST (several_models_take_turns)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp,nope", "--concurrency", "1", "--requests",
                           "300", "--warmup", "0", NULL };
    s_sigload ("models", args, &run);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.err, "does not list model \"nope\" (served: tick_mlp, seq)\n");
    EXPECT_IN (run.out, "| 150 (STATUS_UNKNOWN_MODEL 150) |");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 300);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 150);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "STATUS_UNKNOWN_MODEL:150");
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (echo_floor_in_the_same_run)
{
    int port = tu_free_port ();
    char echo[128], out_path[4300], err_path[4300];
    snprintf (echo, sizeof echo, "tcp://127.0.0.1:%d", port);
    snprintf (out_path, sizeof out_path, "%s/echo-server.out", s_dir);
    snprintf (err_path, sizeof err_path, "%s/echo-server.err", s_dir);
    const char *serve[] = { "--serve-echo", echo, NULL };
    pid_t pid = s_spawn (serve, out_path, err_path);
    ck_assert_int_gt (pid, 0);

    run_t run;
    char date_before[32];
    s_utc_date (date_before, sizeof date_before);
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--floor", echo, "--rate", "1000",
                           "--duration", "1", "--warmup", "0.2", NULL };
    s_sigload ("floor", args, &run);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 2);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "echo-open-1000");
    ck_assert_str_eq (s_csv (&csv, 0, "kind"), "echo");
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "server_mean_us"), 0);
    ck_assert_str_eq (s_csv (&csv, 0, "engine"), s_engine);
    ck_assert_str_eq (s_csv (&csv, 1, "step"), "open-1000");
    ck_assert_str_eq (s_csv (&csv, 1, "kind"), "sigserve");
    ck_assert_str_eq (s_csv (&csv, 1, "engine"), s_engine);
    ck_assert_double_eq (s_csv_num (&csv, 1, "ok"), 1000);
    ck_assert_int_eq (s_hgrm_check (&run, "echo-open-1000", NULL), 1000);
    ck_assert_int_eq (s_hgrm_check (&run, "open-1000", NULL), 1000);
    /* the plots: titles name the host, the model, the connections and the date; the floor is a
     * dashed baseline at its p50 and p99, not a point series */
    char path[4400], host[256] = "", date_after[32];
    snprintf (path, sizeof path, "%s/plots.gp", run.dir);
    char *gp = s_slurp (path);
    ck_assert_int_eq (gethostname (host, sizeof host), 0);
    s_utc_date (date_after, sizeof date_after);
    EXPECT_IN (gp, "set title \"sigload on ");
    EXPECT_IN (gp, host);
    EXPECT_IN (gp, "model tick_mlp, 1 connection, ");
    ck_assert_msg (strstr (gp, date_before) || strstr (gp, date_after), "no date %s in:\n%s", date_after, gp);
    EXPECT_IN (gp, "with lines dt 2 lw 2 lc rgb 'gray30' title 'echo floor p50 (");
    EXPECT_IN (gp, "with lines dt 2 lw 1 lc rgb 'gray50' title 'echo floor p99 (");
    EXPECT_IN (gp, "'echo-open-1000.hgrm' using 4:1 with lines lw 2 dt 2");
    EXPECT_NOT_IN (gp, "$echo_open");
    char *block = s_block (gp, "$sigserve_open << EOD\n");
    EXPECT_IN (block, " open-1000");
    free (block);
    free (gp);
    if (access ("/usr/bin/gnuplot", X_OK) == 0) {
        snprintf (path, sizeof path, "%s/gnuplot.log", run.dir);
        char *log = s_slurp (path);
        ck_assert_msg (strstr (run.out, "percentiles.png, latency_vs_throughput.png") != NULL,
                       "no plots made:\n%s\nstderr:\n%s\ngnuplot.log:\n%s", run.out, run.err, log);
        free (log);
        snprintf (path, sizeof path, "%s/latency_vs_throughput.png", run.dir);
        ck_assert_int_eq (access (path, R_OK), 0);
    }
    free (csv.text);
    s_run_free (&run);

    /* --echo: every step against the echo server */
    const char *echo_args[] = { "--endpoint", echo, "--echo", "--concurrency", "2", "--requests", "1000",
                                "--warmup", "0", "--connections", "2", NULL };
    s_sigload ("echo", echo_args, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "| echo-closed-2 | closed loop | 2 outstanding |");
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "kind"), "echo");
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 1000);
    free (csv.text);
    s_run_free (&run);

    /* the other engine's client against this engine's echo server: both speak ZeroMQ */
    const char *other = strcmp (s_engine, "zmtp") == 0 ? "libzmq" : "zmtp";
    const char *cross_args[] = { "--endpoint", echo, "--echo", "--rate", "1000", "--requests", "500", "--warmup", "0",
                                 "--engine", other, NULL };
    s_sigload ("echo-cross", cross_args, &run);
    EXPECT_STATUS (&run, 0);
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "engine"), other);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 500);
    free (csv.text);
    s_run_free (&run);

    kill (pid, SIGTERM);
    int status = 0;
    ck_assert_int_eq (waitpid (pid, &status, 0), pid);
    ck_assert (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    char *err = s_slurp (err_path);
    EXPECT_IN (err, "echo server stopping: ");
    free (err);
}
END_TEST

/* ---- against test servers ---- */

START_TEST (coordinated_omission_open_shows_stall_closed_hides_it)
{
    /* Open loop, 1000/s for 3 s after 0.5 s of warm-up: the server stalls 200 ms at the 1500th
     * inference (1 s into the measurement). The ~200 requests scheduled during the stall wait
     * 200 ms down to 0 ms: p99.9 (the 3rd worst of 3000) is close to 200 ms. */
    test_server_t ts = { .stall_at = 1500, .stall_ms = 200 };
    s_test_server_start (&ts);
    run_t run;
    const char *open_args[] = { "--endpoint", ts.endpoint, "--model", "test", "--rate", "1000", "--duration", "3",
                                "--warmup", "0.5", NULL };
    s_sigload ("stall-open", open_args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 3000);
    double open_p999 = s_csv_num (&csv, 0, "p999_us"), open_p50 = s_csv_num (&csv, 0, "p50_us");
    printf ("stall of 200 ms, open loop 1000/s: p50 %.0f us, p99 %.0f us, p99.9 %.0f us\n", open_p50,
            s_csv_num (&csv, 0, "p99_us"), open_p999);
    ck_assert_msg (open_p999 >= 150000, "open loop p99.9 %.0f us: the 200 ms stall does not show", open_p999);
    ck_assert_msg (s_csv_num (&csv, 0, "p99_us") >= 100000, "open loop p99 %.0f us", s_csv_num (&csv, 0, "p99_us"));
    ck_assert_msg (open_p50 < 20000, "open loop p50 %.0f us", open_p50);
    /* the server stalled, not sigload: the requests left on time, the connections had room (8192
     * outstanding each), and the first step of a sweep sets its own saturation limit */
    ck_assert_str_eq (s_csv (&csv, 0, "sigload_behind"), "0");
    ck_assert_str_eq (s_csv (&csv, 0, "saturated"), "0");
    ck_assert_str_eq (s_csv (&csv, 0, "saturated_by"), "-");
    ck_assert_str_eq (s_csv (&csv, 0, "held_lag_mean_us"), "0.000");
    EXPECT_IN (run.out, "| no | 0 |\n");
    free (csv.text);
    s_run_free (&run);

    /* Closed loop, one request at a time: the stall delays one request; the ones that would have
     * been sent meanwhile simply are not. 1 sample in 20,000: p99.9 does not see it, max does. */
    test_server_t tc = { .stall_at = 2000, .stall_ms = 200 };
    s_test_server_start (&tc);
    const char *closed_args[] = { "--endpoint", tc.endpoint, "--model", "test", "--concurrency", "1", "--requests",
                                  "20000", "--warmup", "0", NULL };
    s_sigload ("stall-closed", closed_args, &run);
    s_test_server_stop (&tc);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "| closed-1 | closed loop |");
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 20000);
    double closed_p999 = s_csv_num (&csv, 0, "p999_us"), closed_max = s_csv_num (&csv, 0, "max_us");
    printf ("stall of 200 ms, closed loop concurrency 1: p50 %.0f us, p99.9 %.0f us, max %.0f us\n",
            s_csv_num (&csv, 0, "p50_us"), closed_p999, closed_max);
    ck_assert_msg (closed_p999 < 50000, "closed loop p99.9 %.0f us: expected the stall to hide", closed_p999);
    ck_assert_msg (closed_max >= 190000, "closed loop max %.0f us: the stalled request itself", closed_max);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (error_statuses_counted_by_status)
{
    /* every 10th inference OVERLOADED (100 of 1000), every other 25th DEADLINE_EXCEEDED (20) */
    test_server_t ts = { .overloaded_every = 10, .deadline_every = 25 };
    s_test_server_start (&ts);
    run_t run;
    const char *args[] = { "--endpoint", ts.endpoint, "--model", "test", "--concurrency", "1", "--requests", "1000",
                           "--warmup", "0", NULL };
    s_sigload ("statuses", args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.out, "| 120 (STATUS_OVERLOADED 100, STATUS_DEADLINE_EXCEEDED 20) |");
    EXPECT_IN (run.out, "closed-1: 100 x STATUS_OVERLOADED, first: queue full");
    EXPECT_IN (run.out, "closed-1: 20 x STATUS_DEADLINE_EXCEEDED, first: deadline_us: too late");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 880);
    ck_assert_double_eq (s_csv_num (&csv, 0, "errors"), 120);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "STATUS_OVERLOADED:100;STATUS_DEADLINE_EXCEEDED:20");
    ck_assert_int_eq (s_hgrm_check (&run, "closed-1", NULL), 880);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (wrong_request_id_is_unmatched_and_times_out)
{
    test_server_t ts = { .wrong_id_at = 5 };
    s_test_server_start (&ts);
    run_t run;
    const char *args[] = { "--endpoint", ts.endpoint, "--model", "test", "--concurrency", "1", "--requests", "50",
                           "--warmup", "0", "--timeout", "300", NULL };
    s_sigload ("unmatched", args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 1);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 49);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "TIMEOUT:1;UNMATCHED_ID:1");
    EXPECT_IN (run.out, "1 x UNMATCHED_ID");
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (outputs_checked_against_expected_file)
{
    /* the test server answers the sum of the features */
    char *features = tu_write_file (s_dir, "features.txt",
                                    "# three requests of 8 features\n"
                                    "1 2 3 4 5 6 7 8\n"
                                    "0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5\n"
                                    "-1 1 -1 1 -1 1 -1 1\n", -1);
    char *good = tu_write_file (s_dir, "good.txt", "36\n4\n0\n", -1);
    char *bad = tu_write_file (s_dir, "bad.txt", "36\n4\n1\n", -1);
    ck_assert (features && good && bad);
    test_server_t ts = { 0 };
    s_test_server_start (&ts);
    run_t run;
    const char *args[] = { "--endpoint", ts.endpoint, "--model", "test", "--concurrency", "1", "--requests", "300",
                           "--warmup", "0", "--features", features, "--expect", good, NULL };
    s_sigload ("expect-good", args, &run);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 300);
    free (csv.text);
    s_run_free (&run);
    /* the third request's expected output is wrong: a third of the replies mismatch */
    args[13] = bad;
    s_sigload ("expect-bad", args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 1);
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 200);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "OUTPUT_MISMATCH:100");
    /* which request and output, what was expected, what came, and the tolerance */
    EXPECT_IN (run.out, "closed-1: 100 x OUTPUT_MISMATCH, first: request 3 of --features, output 0: expected 1, got 0 "
                        "(tolerance 0.0001 x max(1, |expected|))\n");
    free (csv.text);
    s_run_free (&run);
    free (features);
    free (good);
    free (bad);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("sigload");
    for (size_t e = 0; e < 2; e++) {
        TCase *tc = s_engine_tcase (e);
        tcase_add_test (tc, open_loop_paces_within_1_percent);
        tcase_add_test (tc, closed_loop_is_labelled_and_splits_server_time);
        tcase_add_test (tc, unknown_model_counted_by_status);
        tcase_add_test (tc, several_models_take_turns);
        tcase_add_test (tc, echo_floor_in_the_same_run);
        tcase_add_test (tc, coordinated_omission_open_shows_stall_closed_hides_it);
        tcase_add_test (tc, error_statuses_counted_by_status);
        tcase_add_test (tc, wrong_request_id_is_unmatched_and_times_out);
        tcase_add_test (tc, outputs_checked_against_expected_file);
        suite_add_tcase (s, tc);
    }
    return tu_run_suite (s);
}
