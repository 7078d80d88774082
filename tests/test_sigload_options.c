/* sigload's options that shape the load or the run, and its command line, run as a subprocess the
 * way a user runs it: --streams (against a test server that records each step's stream id, step
 * number and connection, and against the fixture's LSTM model "seq"), --schedule (the arrival
 * times a test server recorded), --processes (against sigload's own --serve-echo), the default
 * thread count under an affinity mask, the progress line, --engine, and the usage errors
 * (tests/sigload_tests.h: the fixture, the test servers and the helpers shared with test_sigload.c).
 *
 * What is asserted is what a user reads: the summary CSV, the .hgrm files, the markdown table, the
 * progress line, the settings --dry-run prints, --help, and the exit code.
 *
 * Every case runs once per engine (a TCase each): every sigload the suite starts, --serve-echo
 * included, is given --engine (a case's own --engine, later on the line, wins). */
#define _GNU_SOURCE
#include "sigload_tests.h"

/* ---- LSTM streams and schedules ---- */

/* Asserts that LOG holds N_STREAMS streams (ids BASE...) of STEPS steps each, every stream on one
 * connection, its steps 1..STEPS in arrival order; stream k on the connection of stream k mod C. */
static void s_expect_streams (const test_server_t *ts, uint64_t base, int n_streams, int steps, int connections)
{
    int next[64] = { 0 }, conn_of[64];
    for (int k = 0; k < n_streams; k++)
        conn_of[k] = -1;
    for (int i = 0; i < ts->n_log; i++) {
        const received_t *r = &ts->log[i];
        ck_assert_msg (r->stream_id >= base && r->stream_id < base + (uint64_t) n_streams, "stream_id %llu",
                       (unsigned long long) r->stream_id);
        int k = (int) (r->stream_id - base);
        ck_assert_msg (conn_of[k] == -1 || conn_of[k] == r->conn, "stream %llu came on two connections",
                       (unsigned long long) r->stream_id);
        conn_of[k] = r->conn;
        ck_assert_msg (r->step == (uint64_t) ++next[k], "stream %llu: step %llu arrived where %d was due",
                       (unsigned long long) r->stream_id, (unsigned long long) r->step, next[k]);
        ck_assert_uint_eq (r->n_features, 8);     /* one step of the model's step_size */
    }
    for (int k = 0; k < n_streams; k++) {
        ck_assert_int_eq (next[k], steps);
        ck_assert_int_eq (conn_of[k], conn_of[k % connections]);
        if (k < connections && k > 0)
            ck_assert_int_ne (conn_of[k], conn_of[0]);
    }
}

START_TEST (streams_send_each_streams_steps_in_order_on_one_connection)
{
    /* open loop: 4 streams over 2 connections (2 threads), 200 requests: 50 steps a stream */
    test_server_t *ts = calloc (1, sizeof *ts);
    ts->lstm = true;
    s_test_server_start (ts);
    run_t run;
    const char *open_args[] = { "--endpoint", ts->endpoint, "--model", "test", "--streams", "4", "--connections", "2",
                                "--rate", "2000", "--requests", "200", "--warmup", "0", NULL };
    s_sigload ("streams-open", open_args, &run);
    s_test_server_stop (ts);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "Streams: 4 (ids 1 to 4), stream k on connection k mod 2, steps of 8 features numbered from 1");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 200);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 200);
    free (csv.text);
    s_run_free (&run);
    ck_assert_int_eq (ts->n_log, 200);
    ck_assert_int_eq (ts->n_identities, 2);
    s_expect_streams (ts, 1, 4, 50, 2);

    /* closed loop, ids from --stream-base, numbering carried across the warm-up: 3 streams on one
     * connection, 2 outstanding */
    memset (ts, 0, sizeof *ts);
    ts->lstm = true;
    s_test_server_start (ts);
    const char *closed_args[] = { "--endpoint", ts->endpoint, "--model", "test", "--streams", "3", "--stream-base",
                                  "1000", "--concurrency", "2", "--requests", "90", "--warmup", "0", NULL };
    s_sigload ("streams-closed", closed_args, &run);
    s_test_server_stop (ts);
    EXPECT_STATUS (&run, 0);
    ck_assert_int_eq (ts->n_log, 90);
    s_expect_streams (ts, 1000, 3, 30, 1);
    s_run_free (&run);
    free (ts);
}
END_TEST

START_TEST (streams_against_an_lstm_model)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "seq", "--streams", "4", "--connections", "2",
                           "--rate", "1000", "--duration", "1", "--warmup", "0.2", NULL };
    s_sigload ("streams-seq", args, &run);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "errors"), 0);
    free (csv.text);
    s_run_free (&run);
    /* a model that keeps no streams */
    const char *mlp[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--streams", "2", "--concurrency", "1",
                          "--requests", "10", NULL };
    s_sigload (NULL, mlp, &run);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.err, "--streams: model \"tick_mlp\" is of type mlp, which keeps no streams");
    s_run_free (&run);
}
END_TEST

START_TEST (schedule_sends_at_the_listed_offsets)
{
    char *good = tu_write_file (s_dir, "schedule.txt",
                                "# offsets in microseconds from the start\n"
                                "0\n"
                                "0   # two at once\n"
                                "\n"
                                "1000\n"
                                "2000.5\n"
                                "300000\n", -1);
    test_server_t *ts = calloc (1, sizeof *ts);
    s_test_server_start (ts);
    run_t run;
    const char *args[] = { "--endpoint", ts->endpoint, "--model", "test", "--schedule", good, NULL };
    int64_t launched = s_now_ns ();
    s_sigload ("schedule", args, &run);
    s_test_server_stop (ts);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "Schedule: 5 requests from ");
    EXPECT_IN (run.out, "| schedule | open loop | schedule (");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "schedule");
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 5);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 5);
    ck_assert_int_eq (s_hgrm_check (&run, "schedule", NULL), 5);
    /* sent in the file's order; the last not before its offset (sigload never sends early) */
    ck_assert_int_eq (ts->n_log, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_uint_eq (ts->log[i].request_id & ((UINT64_C (1) << 40) - 1), (uint64_t) i + 1);
    ck_assert_msg (ts->log[4].at_ns - launched >= 300000000LL, "the request listed at 300 ms arrived after %.1f ms",
                   (double) (ts->log[4].at_ns - launched) / 1e6);
    free (csv.text);
    s_run_free (&run);
    free (ts);

    /* --dry-run says what it would send */
    const char *dry[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--schedule", good, "--dry-run", NULL };
    s_sigload (NULL, dry, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "load: open loop, send times from --schedule\n");
    EXPECT_IN (run.out, "schedule: 5 requests from ");
    EXPECT_IN (run.out, ", the last at 300.000 ms\n");
    s_run_free (&run);

    /* errors name the file and the line */
    static const struct { const char *name, *text, *message; } bad[] = {
        { "not-a-number.txt", "0\n# fine\n10\nabc\n", "not-a-number.txt:4: expected an offset in microseconds from 0 to "
                                                     "86400000000 (one a line), got \"abc\"" },
        { "negative.txt", "-5\n", "negative.txt:1: expected an offset in microseconds" },
        { "two-on-a-line.txt", "0\n10 20\n", "two-on-a-line.txt:2: expected an offset in microseconds" },
        { "decreasing.txt", "0\n2000\n1000\n", "decreasing.txt:3: 1000 us comes before the line above's 2000 us: "
                                               "offsets are absolute (microseconds from the start), not intervals" },
        { "empty.txt", "# nothing\n\n", "empty.txt: no offsets" },
        { "missing/none.txt", NULL, "--schedule: cannot open " },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *path = bad[i].text ? tu_write_file (s_dir, bad[i].name, bad[i].text, -1) : NULL;
        if (!path && asprintf (&path, "%s/%s", s_dir, bad[i].name) < 0)
            ck_abort ();
        const char *a[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--schedule", path, NULL };
        s_sigload (NULL, a, &run);
        EXPECT_STATUS (&run, 2);
        EXPECT_IN (run.err, bad[i].message);
        s_run_free (&run);
        free (path);
    }
    free (good);
}
END_TEST

START_TEST (default_threads_follow_the_affinity_mask)
{
    /* --dry-run prints the effective settings without connecting: nobody listens on port 1 */
    run_t run;
    const char *args[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--rate", "1k,2k", "--connections", "4",
                           "--dry-run", NULL };
    s_sigload_with (NULL, args, &run, RUN_PINNED);   /* as under taskset -c N */
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "threads: 1 (default: the smaller of 4 connection(s) and 1 CPU(s) in the affinity mask)");
    EXPECT_IN (run.out, "connections: 4\n");
    EXPECT_IN (run.out, "steps: 1000/s, 2000/s\n");
    s_run_free (&run);

    /* unpinned: this process's CPUs, at most one thread per connection */
    cpu_set_t set;
    ck_assert_int_eq (sched_getaffinity (0, sizeof set, &set), 0);
    int cpus = CPU_COUNT (&set);
    char expect[128];
    snprintf (expect, sizeof expect, "threads: %d (default: the smaller of 4 connection(s) and %d CPU(s)",
              cpus < 4 ? cpus : 4, cpus);
    s_sigload (NULL, args, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, expect);
    s_run_free (&run);

    const char *given[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--connections", "4", "--threads", "3",
                            "--dry-run", NULL };
    s_sigload_with (NULL, given, &run, RUN_PINNED);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "threads: 3 (--threads)");
    s_run_free (&run);

    /* a real run says the same in its header */
    const char *real[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--concurrency", "4", "--requests", "200",
                           "--warmup", "0", "--connections", "4", NULL };
    s_sigload_with (NULL, real, &run, RUN_PINNED);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "4 connection(s), 1 thread(s)");
    s_run_free (&run);
}
END_TEST

START_TEST (progress_counts_warmup_apart)
{
    /* one progress line a second: at about 1 s the warm-up (2 s) runs, at about 3 s the measured
     * part (2 s) does. Only the phases and their totals are asserted, not when the lines came. */
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--rate", "500", "--warmup", "2",
                           "--duration", "2", NULL };
    s_sigload_with (NULL, args, &run, RUN_VERBOSE);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.err, "sigload: open-500: warm-up ");
    EXPECT_IN (run.err, "/2.0 s, ");
    EXPECT_IN (run.err, "sigload: open-500: measuring ");
    EXPECT_IN (run.err, " answered, 0 errors\n");
    s_run_free (&run);
}
END_TEST

/* --processes: the load from several processes, one table: every step's counts are the sum of
 * theirs (exact with --requests), the target the whole load's, the histograms merged. */
START_TEST (processes_merge_into_one_table)
{
    int port = tu_free_port ();
    char echo[128], out_path[4300], err_path[4300];
    snprintf (echo, sizeof echo, "tcp://127.0.0.1:%d", port);
    snprintf (out_path, sizeof out_path, "%s/echo-procs.out", s_dir);
    snprintf (err_path, sizeof err_path, "%s/echo-procs.err", s_dir);
    const char *serve[] = { "--serve-echo", echo, NULL };
    pid_t pid = s_spawn (serve, out_path, err_path);
    ck_assert_int_gt (pid, 0);
    run_t run;
    const char *open_args[] = { "--endpoint", echo, "--echo", "--processes", "2", "--connections", "3", "--rate",
                                "1000,2000", "--requests", "1001", "--warmup", "0.1", NULL };
    s_sigload_with ("procs-open", open_args, &run, RUN_VERBOSE);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "in each of 2 processes (1/2 of the load each)");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 2);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "echo-open-1000");
    ck_assert_double_eq (s_csv_num (&csv, 0, "target"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 1001);     /* 501 + 500 */
    ck_assert_str_eq (s_csv (&csv, 1, "step"), "echo-open-2000");
    ck_assert_double_eq (s_csv_num (&csv, 1, "ok"), 1001);
    ck_assert_int_eq (s_hgrm_check (&run, "echo-open-2000", NULL), 1001);
    /* the plots' titles: the whole load's connections (process 0 holds 2 of the 3), and the processes */
    char *gp = s_plots (&run);
    EXPECT_IN (gp, "an echo server, 3 connections over 2 processes, ");
    free (gp);
    free (csv.text);
    s_run_free (&run);
    const char *closed_args[] = { "--endpoint", echo, "--echo", "--processes", "3", "--connections", "3",
                                  "--concurrency", "7", "--requests", "3001", "--warmup", "0", NULL };
    s_sigload ("procs-closed", closed_args, &run);
    EXPECT_STATUS (&run, 0);
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "echo-closed-7");
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 3001);
    free (csv.text);
    s_run_free (&run);
    kill (pid, SIGTERM);
    int status = 0;
    ck_assert_int_eq (waitpid (pid, &status, 0), pid);
}
END_TEST

/* --engine: a bad value is a usage error naming the accepted values; --dry-run and --help say it. */
START_TEST (engine_option)
{
    run_t run;
    const char *bad[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--engine", "zeromq", NULL };
    s_sigload (NULL, bad, &run);
    EXPECT_STATUS (&run, 2);
    EXPECT_IN (run.err, "sigload: --engine: expected zmtp or libzmq, got \"zeromq\"\n");
    EXPECT_IN (run.err, "sigload --help");
    s_run_free (&run);
    const char *serve_bad[] = { "--serve-echo", "tcp://127.0.0.1:1", "--engine", "", NULL };
    s_sigload (NULL, serve_bad, &run);
    EXPECT_STATUS (&run, 2);
    EXPECT_IN (run.err, "sigload: --engine: expected zmtp or libzmq, got \"\"\n");
    s_run_free (&run);
    const char *dry[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--dry-run", NULL };
    s_sigload (NULL, dry, &run);
    EXPECT_STATUS (&run, 0);
    char line[64];
    snprintf (line, sizeof line, "\nengine: %s\n", s_engine);
    EXPECT_IN (run.out, line);
    if (strcmp (s_engine, "libzmq") == 0)
        EXPECT_IN (run.out, "\nio threads: 1\n");
    else
        EXPECT_NOT_IN (run.out, "io threads");
    s_run_free (&run);
    const char *help[] = { "--help", NULL };
    s_sigload (NULL, help, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "[--engine zmtp|libzmq]");
    EXPECT_IN (run.out, "  --engine E ");
    s_run_free (&run);
}
END_TEST

START_TEST (usage_errors_exit_2)
{
    static const char *const cases[][12] = {
        { NULL },
        { "--model", "m", "--rate", "100", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--rate", "100", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--rate", "100", "--concurrency", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--rate", "fast", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--concurrency", "1.5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--threads", "4", "--connections", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--duration", "1", "--requests", "10", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--arrivals", "bursty", "--rate", "5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--no-such-option", NULL },
        { "--serve-echo", "tcp://127.0.0.1:1", "--dry-run", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "a,b", "--expect", "x", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", ",", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--curve-server", "x", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--curve-server", "/nonexistent/s",
          "--curve-client", "/nonexistent/c_secret", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--streams", "0", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--streams", "2", "--connections", "3", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--streams", "2", "--rows", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "a,b", "--streams", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--streams", "2", "--expect", "x", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--stream-base", "5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--schedule", "x", "--rate", "5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--schedule", "x", "--requests", "5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--processes", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--processes", "17", "--connections", "17", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--processes", "2", "--connections", "2", "--streams",
          "2", NULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_t run;
        s_sigload (NULL, cases[i], &run);
        EXPECT_STATUS (&run, 2);
        EXPECT_IN (run.err, "sigload --help");
        s_run_free (&run);
    }
    run_t run;
    const char *help[] = { "--help", NULL };
    s_sigload (NULL, help, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "coordinated omission");
    EXPECT_IN (run.out, "--serve-echo E");
    EXPECT_IN (run.out, "affinity mask");
    EXPECT_IN (run.out, "--streams N");
    EXPECT_IN (run.out, "--schedule FILE");
    EXPECT_IN (run.out, "perf_analyzer's --request-intervals");
    s_run_free (&run);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("sigload_options");
    for (size_t e = 0; e < 2; e++) {
        TCase *tc = s_engine_tcase (e);
        tcase_add_test (tc, streams_send_each_streams_steps_in_order_on_one_connection);
        tcase_add_test (tc, streams_against_an_lstm_model);
        tcase_add_test (tc, schedule_sends_at_the_listed_offsets);
        tcase_add_test (tc, default_threads_follow_the_affinity_mask);
        tcase_add_test (tc, progress_counts_warmup_apart);
        tcase_add_test (tc, usage_errors_exit_2);
        tcase_add_test (tc, processes_merge_into_one_table);
        tcase_add_test (tc, engine_option);
        suite_add_tcase (s, tc);
    }
    return tu_run_suite (s);
}
