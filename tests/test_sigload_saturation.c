/* sigload at saturation (issue 39), run as a subprocess the way a user runs it: whether a step
 * saturated and whose doing it was (the server's, or sigload's own sender's), as the table, its
 * lines below, summary.csv and plots.gp say it; the throughput plot's curves and axes made of the
 * steps that did not saturate, a saturated step a marked point off them, every note inside the
 * graph and the legend below it; the --floor step beside every step of a sweep.
 *
 * What saturates a step is a stall long against a loaded 2-core machine's noise: a test server
 * that answers nothing for 600 ms (tests/sigload_tests.h), or sigload itself stopped (SIGSTOP) for
 * 600 ms, with the saturation limit given (--saturation-p99 300 ms) where a case needs a step
 * judged saturated by its p99. What is asserted is what follows from the stall, not its timing:
 * who is named, which steps make the curves, and the ranges as plots.gp's own rule computes them
 * from summary.csv's rows. Every case runs once per engine (a TCase each). */
#define _GNU_SOURCE
#include "sigload_tests.h"

#define STALL_MS 600

/* The line of the throughput plot's notes that says what an orange circle means. */
#define KEY_BEHIND "sigload fell behind where circled or said so: its own send lag is in those latencies; try " \
                   "--processes, or give sigload cores of its own"

/* Waits (up to 20 s) until the test server TS has seen N inferences. */
static void s_wait_infers (test_server_t *ts, int n)
{
    for (int waited = 0; waited < 20000 && __atomic_load_n (&ts->infers, __ATOMIC_RELAXED) < n; waited++)
        usleep (1000);
    ck_assert_int_ge (__atomic_load_n (&ts->infers, __ATOMIC_RELAXED), n);
}

/* Runs sigload (NAME, ARGS) against TS and stops it for STALL_MS once TS has seen AT inferences. */
static void s_sigload_stopped (const char *name, const char *const *args, test_server_t *ts, int at, run_t *run)
{
    pid_t pid = s_sigload_start (name, args, run, 0);
    s_wait_infers (ts, at);
    ck_assert_int_eq (kill (pid, SIGSTOP), 0);
    usleep (STALL_MS * 1000);
    ck_assert_int_eq (kill (pid, SIGCONT), 0);
    s_sigload_wait (name, pid, run);
}

/* The throughput plot's part of plots.gp (from its "set output"). */
static const char *s_throughput (const char *gp)
{
    const char *at = strstr (gp, "set output 'latency_vs_throughput.png'");
    ck_assert_msg (at != NULL, "no throughput plot in:\n%s", gp);
    return at;
}

/* The lines of TEXT that start with PREFIX, counted. */
static int s_count_lines (const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p; p = strchr (p, '\n') ? strchr (p, '\n') + 1 : NULL)
        n += strncmp (p, prefix, strlen (prefix)) == 0;
    return n;
}

/* The color of STEP's curve in the percentile plot of GP ("" when it has none), in a static buffer
 * of its own for each of the last 4 calls. */
static const char *s_hgrm_color (const char *gp, const char *step)
{
    static char colors[4][16];
    static int next;
    char *c = colors[next++ % 4], key[96];
    c[0] = 0;
    snprintf (key, sizeof key, "'%s.hgrm' using 4:1 with lines lw 2", step);
    const char *at = strstr (gp, key);
    if (at) {
        const char *lc = strstr (at, " lc rgb '"), *eol = strchr (at, '\n');
        if (lc && (!eol || lc < eol))
            sscanf (lc, " lc rgb '%15[^']'", c);
    }
    return c;
}

/* Checks the throughput plot's ranges against plots.gp's rule, from summary.csv's rows: x, the
 * achieved rates of the steps on the curves (ON_CURVE, N of them) padded by 5% of their span, or
 * of the highest rate where that is more (so the range is never a sliver of one rate); y, their latencies from the least / 1.5 to the most x 1.5, with ticks
 * up to there and the notes' room above. Every note's label lies inside the x range, at the top of
 * the graph, its text towards the middle. */
static void s_check_ranges (const csv_t *csv, const char *gp, const int *on_curve, int n)
{
    const char *plot = s_throughput (gp);
    double xlo = 0, xhi = 0, ylo = 0, yhi = 0;
    for (int k = 0; k < n; k++) {
        int i = on_curve[k];
        bool floor = strcmp (s_csv (csv, i, "kind"), "echo") == 0 && strncmp (s_csv (csv, i, "step"), "echo-", 5) == 0;
        double x = s_csv_num (csv, i, "achieved_rps");
        double v[3] = { s_csv_num (csv, i, "p50_us"), s_csv_num (csv, i, "p99_us"), s_csv_num (csv, i, "p999_us") };
        xlo = k == 0 || x < xlo ? x : xlo;
        xhi = k == 0 || x > xhi ? x : xhi;
        for (int j = 0; j < (floor ? 2 : 3); j++) {
            ylo = ylo == 0 || v[j] < ylo ? v[j] : ylo;
            yhi = v[j] > yhi ? v[j] : yhi;
        }
    }
    double pad = 0.05 * (xhi - xlo) > 0.05 * xhi ? 0.05 * (xhi - xlo) : 0.05 * xhi;
    double x0, x1, y0, y1, top, room;
    size_t lines;
    char expect[128];
    snprintf (expect, sizeof expect, "# x range: the achieved rates of the %d steps on the curves", n);
    EXPECT_IN (plot, expect);
    ck_assert_int_eq (sscanf (strstr (plot, "set xrange ["), "set xrange [%lf:%lf]", &x0, &x1), 2);
    ck_assert_double_eq_tol (x0, xlo - pad > 0 ? xlo - pad : 0, 0.01);
    ck_assert_double_eq_tol (x1, xhi + pad, 0.01);
    ck_assert_msg (x1 - x0 >= 0.0999 * xhi, "x range [%.3f:%.3f]: a sliver of the rate %.3f", x0, x1, xhi);
    ck_assert_int_eq (sscanf (strstr (plot, "# most x 1.5 ("),
                              "# most x 1.5 (%lf, where the ticks stop), and above that %zu lines of notes (%lf", &top,
                              &lines, &room), 3);
    ck_assert_double_eq_tol (room, lines ? 0.035 + 0.036 * (double) lines : 0, 0.0006);
    ck_assert_msg (room < 0.45, "the notes take %.3f of the graph: the curves less than half", room);
    ck_assert_int_eq (sscanf (strstr (plot, "set yrange ["), "set yrange [%lf:%lf]", &y0, &y1), 2);
    ck_assert_double_eq_tol (y0, ylo / 1.5, 0.001 + 1e-6 * ylo);
    ck_assert_double_eq_tol (top, yhi * 1.5, 0.002 + 1e-6 * yhi);
    /* ticks: at least one, each within [y0, top] (none in the band of notes) */
    const char *tics = strstr (plot, "set ytics (");
    ck_assert_ptr_nonnull (tics);
    tics += strlen ("set ytics (");
    int n_tics = 0;
    for (char *end; *tics != ')'; tics = *end == ',' ? end + 1 : end) {
        double tick = strtod (tics, &end);
        ck_assert_msg (end != tics, "set ytics: \"%.40s\"", tics);
        ck_assert_msg (tick >= y0 - 1e-9 && tick <= top + 1e-9, "a y tick at %g, outside [%.3f:%.3f]", tick, y0, top);
        n_tics++;
    }
    ck_assert_int_gt (n_tics, 0);
    /* a decade or more: enough ticks to read a value by (two powers of ten alone are not) */
    if (top / y0 >= 10)
        ck_assert_msg (n_tics >= 3, "%d y ticks over [%.3f:%.3f]", n_tics, y0, top);
    double y1_rule = exp (log (y0) + (log (top) - log (y0)) / (1 - room));
    ck_assert_msg (fabs (y1 - y1_rule) <= 1e-4 * y1_rule, "y top %.3f, the rule gives %.3f", y1, y1_rule);
    /* every note inside: at first X in the x range (or the left edge), graph Y in the band */
    int labels = 0;
    for (const char *p = strstr (plot, "set label \""); p; p = strstr (p + 1, "set label \"")) {
        const char *at = strstr (p, "\" at ");
        ck_assert_ptr_nonnull (at);
        double x, y;
        if (strncmp (at, "\" at graph 0.01, graph ", 23) == 0) {
            labels++;
            continue;
        }
        if (sscanf (at, "\" at first %lf, graph %lf", &x, &y) != 2)
            continue;   /* a circle on a curve: at first X, first Y */
        ck_assert_msg (x >= x0 - 0.001 && x <= x1 + 0.001, "a note at x %.3f, outside [%.3f:%.3f]", x, x0, x1);
        ck_assert_msg (y > 1 - room && y < 1, "a note at graph y %.3f, under the band from %.3f", y, 1 - room);
        if (at == p + strlen ("set label \"")) {
            /* a line's marker, a label of its own (a label with a point has its text raised off
             * the row): a line of text at the same place */
            const char *point = strstr (at, " point pt ");
            ck_assert_msg (point && point < strchr (at, '\n'), "an empty label with no point: %.80s", p);
            char place[96];
            snprintf (place, sizeof place, "%.*s ", (int) (point - at), at);
            bool text = false;
            for (const char *q = strstr (plot, place); q && !text; q = strstr (q + 1, place))
                text = q[-1] != '"' || q[-2] != ' ';
            ck_assert_msg (text, "a marker%s has no line of text", place + 1);
            ck_assert_msg (strstr (at, " offset ") == NULL || strstr (at, " offset ") > strchr (at, '\n'),
                           "a marker label has text offsets: %.80s", p);
            continue;
        }
        labels++;
        const char *eol0 = strchr (at, '\n');
        const char *pt = strstr (at, " point ");
        ck_assert_msg (!pt || pt > eol0, "a line of text with a point (gnuplot raises its text): %.100s", p);
        bool right = (x - x0) / (x1 - x0) > 0.5;
        if (fabs ((x - x0) / (x1 - x0) - 0.5) < 0.001)
            continue;   /* the middle, either side (plots.gp's numbers are rounded) */
        const char *eol = strchr (at, '\n');
        const char *side = strstr (at, right ? " right" : " left");
        ck_assert_msg (side && side < eol, "a note at x %.3f of [%.3f:%.3f] not %s-aligned", x, x0, x1,
                       right ? "right" : "left");
    }
    ck_assert_int_eq ((size_t) labels, lines);
    EXPECT_IN (gp, "set key below horizontal\n");
}

/* ---- whose doing ---- */

START_TEST (a_stopped_sender_is_sigloads_doing)
{
    /* open-500, then open-1000 with sigload stopped 600 ms at its 300th request: the ~600 requests
     * scheduled meanwhile leave late while every connection has room (8192 outstanding each): the
     * lag is sigload's own; p99 above 300 ms: saturated, by sigload, not the server */
    test_server_t *ts = calloc (1, sizeof *ts);
    s_test_server_start (ts);
    run_t run;
    const char *args[] = { "--endpoint", ts->endpoint, "--model", "test", "--rate", "500,1000", "--duration", "1",
                           "--warmup", "0", "--saturation-p99", "300000", NULL };
    s_sigload_stopped ("sender", args, ts, 800, &run);
    s_test_server_stop (ts);
    free (ts);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 2);
    ck_assert_str_eq (s_csv (&csv, 1, "step"), "open-1000");
    ck_assert_str_eq (s_csv (&csv, 1, "saturated"), "1");
    ck_assert_str_eq (s_csv (&csv, 1, "saturated_by"), "sigload");
    ck_assert_str_eq (s_csv (&csv, 1, "sigload_behind"), "1");
    ck_assert_str_eq (s_csv (&csv, 1, "held_lag_mean_us"), "0.000");
    ck_assert_str_eq (s_csv (&csv, 1, "unsent_sigload"), "0");
    ck_assert_str_eq (s_csv (&csv, 1, "unsent_held"), "0");
    ck_assert_double_ge (s_csv_num (&csv, 1, "sigload_lag_max_us"), 0.75 * STALL_MS * 1000);
    ck_assert_msg (strncmp (s_csv (&csv, 1, "saturation"), "p99 ", 4) == 0, "%s", s_csv (&csv, 1, "saturation"));
    EXPECT_IN (s_csv (&csv, 1, "saturation"), " us above 300000.0 us");
    EXPECT_IN (s_csv (&csv, 1, "sigload_behind_why"), "sigload fell behind: its own send lag averaged ");
    EXPECT_IN (s_csv (&csv, 1, "sigload_behind_why"), "; while its connections had room; spread the load with "
                                                      "--processes N; or give sigload cores of its own");
    ck_assert_str_eq (s_csv (&csv, 0, "saturated"), "0");
    ck_assert_str_eq (s_csv (&csv, 0, "saturated_by"), "-");
    /* the table: the verdict column, and a line below it that says what to do */
    EXPECT_IN (run.out, "| yes (sigload) | 0 |\n");
    EXPECT_IN (run.out, "\nopen-1000: saturated by sigload, not the server: p99 ");
    EXPECT_IN (run.out, " us above 300000.0 us; sigload fell behind: its own send lag averaged ");
    /* the plot: open-500 alone makes the curve and the axes; open-1000 a red triangle in the notes */
    char *gp = s_plots (&run);
    char *block = s_block (gp, "$sigserve_open << EOD\n");
    ck_assert_int_eq (s_count_lines (block, ""), 1);
    EXPECT_IN (block, " open-500");
    free (block);
    EXPECT_IN (gp, "# saturated: open-1000 (p99 ");
    EXPECT_IN (gp, " us above 300000.0 us), by sigload: a marked point off the curve\n");
    EXPECT_IN (gp, "set label \"open-1000: saturated, by sigload (its own send lag ");
    EXPECT_IN (gp, "), not the server\" at first ");
    EXPECT_IN (gp, " point pt 9 ps 1.5 lc rgb 'red'");
    EXPECT_IN (gp, ", over the limit of 300.0 ms\" at first ");
    EXPECT_IN (gp, "set label \"" KEY_BEHIND "\" at graph 0.01, graph ");
    const int on_curve[] = { 0 };
    s_check_ranges (&csv, gp, on_curve, 1);
    free (gp);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (a_stopped_sender_that_did_not_saturate_is_said)
{
    /* one step: its own p99 is the saturation limit's base, so the stop does not saturate it, but
     * its latencies hold sigload's lag: said in the table, circled on the curve */
    test_server_t *ts = calloc (1, sizeof *ts);
    s_test_server_start (ts);
    run_t run;
    const char *args[] = { "--endpoint", ts->endpoint, "--model", "test", "--rate", "1000", "--duration", "1",
                           "--warmup", "0", NULL };
    s_sigload_stopped ("behind", args, ts, 300, &run);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "saturated"), "0");
    ck_assert_str_eq (s_csv (&csv, 0, "saturated_by"), "-");
    ck_assert_str_eq (s_csv (&csv, 0, "sigload_behind"), "1");
    ck_assert_str_eq (s_csv (&csv, 0, "saturation"), "");
    EXPECT_IN (run.out, "| no (sigload fell behind) | 0 |\n");
    EXPECT_IN (run.out, "\nopen-1000: not saturated, but sigload fell behind: its own send lag averaged ");
    EXPECT_IN (run.out, "or give sigload cores of its own (its latencies hold that lag)\n");
    char *gp = s_plots (&run);
    char circle[160];
    snprintf (circle, sizeof circle, "set label \"\" at first %.3f, first ", s_csv_num (&csv, 0, "achieved_rps"));
    EXPECT_IN (gp, circle);
    EXPECT_IN (gp, " point pt 6 ps 3 lc rgb 'dark-orange'\n");
    EXPECT_IN (gp, "set label \"open-1000: sigload fell behind, its own send lag ");
    EXPECT_IN (gp, "set label \"" KEY_BEHIND "\" at graph 0.01, graph ");
    const int on_curve[] = { 0 };
    s_check_ranges (&csv, gp, on_curve, 1);
    free (gp);
    free (csv.text);
    s_run_free (&run);

    /* --timeout 100: the requests scheduled in the first 500 ms of the stop could not be sent in
     * time while the connections had room: unsent by sigload, counted as TIMEOUT */
    const char *timeout_args[] = { "--endpoint", ts->endpoint, "--model", "test", "--rate", "1000", "--duration", "1",
                                   "--warmup", "0", "--timeout", "100", NULL };
    int seen = __atomic_load_n (&ts->infers, __ATOMIC_RELAXED);
    s_sigload_stopped ("unsent", timeout_args, ts, seen + 300, &run);
    s_test_server_stop (ts);
    free (ts);
    EXPECT_STATUS (&run, 1);
    s_csv_read (&run, &csv);
    ck_assert_double_gt (s_csv_num (&csv, 0, "unsent_sigload"), 0);
    ck_assert_str_eq (s_csv (&csv, 0, "unsent_held"), "0");
    ck_assert_str_eq (s_csv (&csv, 0, "saturated_by"), "sigload");
    EXPECT_IN (s_csv (&csv, 0, "sigload_behind_why"), " requests not sent within --timeout of their scheduled time");
    EXPECT_IN (run.out, "x TIMEOUT, first: not sent within --timeout of its scheduled time");
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (full_connections_are_the_servers_doing)
{
    /* open-500, then open-1000 with the server stalled 600 ms at its 100th inference and 4 requests
     * outstanding at most: the sender is held back by full connections, the lag the server's (and
     * sigload's too only if this host stalls sigload itself meanwhile: then it says both) */
    test_server_t *ts = calloc (1, sizeof *ts);
    ts->stall_at = 600;
    ts->stall_ms = STALL_MS;
    s_test_server_start (ts);
    run_t run;
    const char *args[] = { "--endpoint", ts->endpoint, "--model", "test", "--rate", "500,1000", "--duration", "1",
                           "--warmup", "0", "--saturation-p99", "300000", "--max-outstanding", "4", NULL };
    s_sigload ("held", args, &run);
    s_test_server_stop (ts);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 1, "saturated"), "1");
    ck_assert_double_gt (s_csv_num (&csv, 1, "held_lag_mean_us"), s_csv_num (&csv, 1, "sigload_lag_mean_us"));
    if (strcmp (s_csv (&csv, 1, "sigload_behind"), "1") == 0) {
        printf ("full connections: this host stalled sigload too (its own lag %s us): said as both\n",
                s_csv (&csv, 1, "sigload_lag_mean_us"));
        ck_assert_str_eq (s_csv (&csv, 1, "saturated_by"), "sigload+server");
        EXPECT_IN (run.out, "| yes (sigload and server) | 0 |\n");
        free (csv.text);
        s_run_free (&run);
        free (ts);
        return;
    }
    ck_assert_str_eq (s_csv (&csv, 1, "saturated_by"), "server");
    ck_assert_str_eq (s_csv (&csv, 1, "sigload_behind_why"), "");
    EXPECT_IN (run.out, "| yes (server) | 0 |\n");
    EXPECT_IN (run.out, "\nopen-1000: saturated by the server: p99 ");
    char *gp = s_plots (&run);
    EXPECT_IN (gp, "set label \"open-1000: saturated, by the server\" at first ");
    EXPECT_IN (gp, " req/s: p50 ");
    EXPECT_IN (gp, ", over the limit of 300.0 ms\" at first ");
    EXPECT_NOT_IN (gp, "set label \"open-1000: saturated, by sigload");
    EXPECT_NOT_IN (gp, "set label \"open-1000: sigload fell behind");
    free (gp);
    free (csv.text);
    s_run_free (&run);

    /* --timeout 100: the requests scheduled in the stall could not be sent in time because every
     * connection was full: unsent, held back by the server */
    memset (ts, 0, sizeof *ts);
    ts->stall_at = 300;
    ts->stall_ms = STALL_MS;
    s_test_server_start (ts);
    const char *timeout_args[] = { "--endpoint", ts->endpoint, "--model", "test", "--rate", "1000", "--duration", "1",
                                   "--warmup", "0", "--max-outstanding", "4", "--timeout", "100", NULL };
    s_sigload ("held-unsent", timeout_args, &run);
    s_test_server_stop (ts);
    free (ts);
    EXPECT_STATUS (&run, 1);
    s_csv_read (&run, &csv);
    ck_assert_double_gt (s_csv_num (&csv, 0, "unsent_held"), 0);
    ck_assert_str_eq (s_csv (&csv, 0, "unsent_sigload"), "0");
    ck_assert_str_eq (s_csv (&csv, 0, "saturated_by"),
                      strcmp (s_csv (&csv, 0, "sigload_behind"), "1") == 0 ? "sigload+server" : "server");
    free (csv.text);
    s_run_free (&run);
}
END_TEST

/* ---- the plot ---- */

START_TEST (a_saturated_step_is_never_on_the_curve)
{
    /* closed-1: 200 OK; closed-2 and closed-3: every other reply OVERLOADED, so both saturated
     * (errors) with OK replies: neither on the curve nor in the ranges; each a red triangle at its
     * achieved rate (clamped into the range: they went faster than closed-1), its text inside */
    test_server_t *ts = calloc (1, sizeof *ts);
    ts->overloaded_every = 2;
    ts->errors_from = 200;
    s_test_server_start (ts);
    run_t run;
    const char *args[] = { "--endpoint", ts->endpoint, "--model", "test", "--concurrency", "1,2,3", "--requests", "200",
                           "--warmup", "0", NULL };
    s_sigload ("knee", args, &run);
    s_test_server_stop (ts);
    free (ts);
    EXPECT_STATUS (&run, 1);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "saturated"), "0");
    for (int i = 1; i < 3; i++) {
        ck_assert_str_eq (s_csv (&csv, i, "saturated"), "1");
        ck_assert_str_eq (s_csv (&csv, i, "saturated_by"), "server");
        ck_assert_str_eq (s_csv (&csv, i, "saturation"), "100 errors");
        ck_assert_str_eq (s_csv (&csv, i, "sigload_lag_mean_us"), "0.000");   /* closed loop: no schedule */
    }
    EXPECT_IN (run.out, "| closed-2 | closed loop | 2 outstanding |");
    EXPECT_IN (run.out, "| - | - | yes (server) | 100 (STATUS_OVERLOADED 100) |\n");
    EXPECT_IN (run.out, "\nclosed-2: saturated by the server: 100 errors\nclosed-3: saturated by the server: 100 errors\n");
    char *gp = s_plots (&run);
    char *block = s_block (gp, "$sigserve_closed << EOD\n");
    ck_assert_int_eq (s_count_lines (block, ""), 1);
    EXPECT_IN (block, " closed-1");
    free (block);
    EXPECT_IN (gp, "# saturated: closed-2 (100 errors), by server: a marked point off the curve\n");
    EXPECT_IN (gp, "# saturated: closed-3 (100 errors), by server: a marked point off the curve\n");
    EXPECT_IN (gp, "set label \"closed-2: saturated, by the server\" at first ");
    EXPECT_IN (gp, "set label \"closed-3: saturated, by the server\" at first ");
    char line[160];
    for (int i = 1; i < 3; i++) {
        snprintf (line, sizeof line, "set label \"    %.0f req/s, 100 errors: p50 ", s_csv_num (&csv, i, "achieved_rps"));
        EXPECT_IN (gp, line);
    }
    EXPECT_NOT_IN (gp, "knee");
    EXPECT_NOT_IN (gp, "title 'sigserve closed loop p50 (saturated)'");
    /* the percentile plot: each spectrum, the saturated ones marked; its axis the unsaturated one's */
    EXPECT_IN (gp, "'closed-1.hgrm' using 4:1 with lines lw 2 lc rgb '");
    EXPECT_IN (gp, "' title 'closed-1'");
    EXPECT_IN (gp, "'closed-2.hgrm' using 4:1 with lines lw 2 lc rgb '");
    EXPECT_IN (gp, "' title 'closed-2 (saturated");
    /* one color a step, none shared */
    ck_assert_str_ne (s_hgrm_color (gp, "closed-1"), s_hgrm_color (gp, "closed-2"));
    ck_assert_str_ne (s_hgrm_color (gp, "closed-2"), s_hgrm_color (gp, "closed-3"));
    snprintf (line, sizeof line, "# y range: the steps that did not saturate, from their least latency / 1.5 to "
                                 "their most x 1.5\nset yrange [");
    EXPECT_IN (gp, line);
    const int on_curve[] = { 0 };
    s_check_ranges (&csv, gp, on_curve, 1);
    free (gp);
    if (access ("/usr/bin/gnuplot", X_OK) == 0)
        EXPECT_IN (run.out, "percentiles.png, latency_vs_throughput.png");
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (notes_beyond_the_band_are_summed_up)
{
    /* closed-1 and eight saturated steps (every other reply OVERLOADED after closed-1's): two lines
     * each would be 16, over the band's 10, so each has one (who, rate, p99) and all eight are
     * marked; then closed-1 and twelve: the ten kept are closed-2 (where saturation began) and the
     * next nine, one more line says what is left out. The curves keep more than half the graph. */
    static const struct { const char *values; int last, kept; } runs[] = { { "1,2,3,4,5,6,7,8,9", 9, 9 },
                                                                          { "1,2,3,4,5,6,7,8,9,10,11,12,13", 13, 11 } };
    for (size_t k = 0; k < 2; k++) {
        test_server_t *ts = calloc (1, sizeof *ts);
        ts->overloaded_every = 2;
        ts->errors_from = 100;
        s_test_server_start (ts);
        run_t run;
        const char *args[] = { "--endpoint", ts->endpoint, "--model", "test", "--concurrency", runs[k].values,
                               "--requests", "100", "--warmup", "0", NULL };
        s_sigload (k == 0 ? "many" : "more", args, &run);
        s_test_server_stop (ts);
        free (ts);
        EXPECT_STATUS (&run, 1);
        char *gp = s_plots (&run), label[128];
        for (int c = 2; c <= runs[k].last; c++) {
            snprintf (label, sizeof label, "set label \"closed-%d: saturated by the server, ", c);
            if (c <= runs[k].kept)
                EXPECT_IN (gp, label);
            else
                EXPECT_NOT_IN (gp, label);
            snprintf (label, sizeof label, "# saturated: closed-%d (50 errors), by server: a marked point off the curve\n",
                      c);
            EXPECT_IN (gp, label);
            snprintf (label, sizeof label, "\nclosed-%d: saturated by the server: 50 errors\n", c);
            EXPECT_IN (run.out, label);
        }
        EXPECT_NOT_IN (gp, ": saturated, by the server\"");     /* no two-line form */
        EXPECT_IN (gp, " req/s, p99 ");
        if (k == 0) {
            EXPECT_NOT_IN (gp, "more lines of notes");
            EXPECT_IN (gp, "and above that 8 lines of notes (0.323 of the graph)\n");
        } else {
            EXPECT_IN (gp, "set label \"... and 2 more lines of notes: the lines below sigload's table say it all\" at "
                           "graph 0.01, graph 0.605 left");
            EXPECT_IN (gp, "and above that 11 lines of notes (0.431 of the graph)\n");
        }
        csv_t csv;
        s_csv_read (&run, &csv);
        const int on_curve[] = { 0 };
        s_check_ranges (&csv, gp, on_curve, 1);
        free (gp);
        free (csv.text);
        s_run_free (&run);
    }
}
END_TEST

START_TEST (a_step_with_no_ok_reply_is_a_note_alone)
{
    /* closed-1 gets 200 OK replies; every inference after that is OVERLOADED, so closed-2 is
     * saturated with no latency at all: no curve of its own, a note that says so */
    test_server_t ts = { .overloaded_after = 200 };
    s_test_server_start (&ts);
    run_t run;
    const char *args[] = { "--endpoint", ts.endpoint, "--model", "test", "--concurrency", "1,2", "--requests", "200",
                           "--warmup", "0", NULL };
    s_sigload ("saturated", args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.out, "closed-2: 200 x STATUS_OVERLOADED");
    char *gp = s_plots (&run);
    EXPECT_IN (gp, "model test, 1 connection, ");
    char *block = s_block (gp, "$sigserve_closed << EOD\n");
    EXPECT_IN (block, " closed-1");
    EXPECT_NOT_IN (block, "closed-2");
    free (block);
    EXPECT_IN (gp, "# saturated: closed-2 (200 errors), by server: a marked point off the curve\n");
    EXPECT_IN (gp, "set label \"closed-2: saturated, by the server\" at first ");
    EXPECT_IN (gp, ", 200 errors; no OK reply\" at first ");
    EXPECT_IN (gp, "'closed-1.hgrm' using 4:1");
    EXPECT_NOT_IN (gp, "'closed-2.hgrm'");
    EXPECT_NOT_IN (gp, "echo floor");
    csv_t csv;
    s_csv_read (&run, &csv);
    const int on_curve[] = { 0 };
    s_check_ranges (&csv, gp, on_curve, 1);
    free (gp);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

/* sigload against the server with --floor at RATES (each 0.5 s after 0.1 s of warm-up), the floor's
 * echo server (ECHO_NAME.out / .err in the suite's folder) started for it and stopped after; RUN is
 * what sigload wrote and returned (0, or 1 where a step saturated). */
static void s_floor_run (const char *name, const char *echo_name, const char *rates, run_t *run)
{
    char echo[128], out_path[4300], err_path[4300];
    snprintf (echo, sizeof echo, "tcp://127.0.0.1:%d", tu_free_port ());
    snprintf (out_path, sizeof out_path, "%s/%s.out", s_dir, echo_name);
    snprintf (err_path, sizeof err_path, "%s/%s.err", s_dir, echo_name);
    const char *serve[] = { "--serve-echo", echo, NULL };
    pid_t pid = s_spawn (serve, out_path, err_path);
    ck_assert_int_gt (pid, 0);
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--floor", echo, "--rate", rates,
                           "--duration", "0.5", "--warmup", "0.1", NULL };
    s_sigload (name, args, run);
    kill (pid, SIGTERM);
    ck_assert_int_eq (waitpid (pid, NULL, 0), pid);
    ck_assert_msg (run->status == 0 || run->status == 1, "sigload exited %d\n%s%s", run->status, run->out, run->err);
}

START_TEST (the_floor_runs_beside_every_step)
{
    /* against sigserve, --floor at 500/s and 1000/s: each rate's echo step just before its own; the
     * floor a dashed curve of the floor steps that did not saturate; a sigserve step under its
     * floor's p50 says so, one that is not says nothing */
    run_t run;
    s_floor_run ("floors", "echo-server", "500,1000", &run);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 4);
    static const char *const steps[] = { "echo-open-500", "open-500", "echo-open-1000", "open-1000" };
    const char *row_at = run.out;
    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq (s_csv (&csv, i, "step"), steps[i]);
        ck_assert_str_eq (s_csv (&csv, i, "kind"), i % 2 ? "sigserve" : "echo");
        char row[64];
        snprintf (row, sizeof row, "| %s | open loop |", steps[i]);
        row_at = strstr (row_at, row);
        ck_assert_msg (row_at != NULL, "%s not in order in:\n%s", row, run.out);
    }
    char *gp = s_plots (&run);
    /* the percentile plot: each floor step dashed, in the color of the step measured beside it */
    for (int i = 0; i < 4; i++)
        if (s_csv_num (&csv, i, "ok") > 0)
            ck_assert_str_ne (s_hgrm_color (gp, steps[i]), "");
    if (s_csv_num (&csv, 0, "ok") > 0 && s_csv_num (&csv, 1, "ok") > 0) {
        ck_assert_str_eq (s_hgrm_color (gp, "echo-open-500"), s_hgrm_color (gp, "open-500"));
        EXPECT_IN (gp, "'echo-open-500.hgrm' using 4:1 with lines lw 2 dt 2 lc rgb ");
    }
    if (s_csv_num (&csv, 2, "ok") > 0 && s_csv_num (&csv, 3, "ok") > 0)
        ck_assert_str_eq (s_hgrm_color (gp, "echo-open-1000"), s_hgrm_color (gp, "open-1000"));
    if (s_csv_num (&csv, 1, "ok") > 0 && s_csv_num (&csv, 3, "ok") > 0)
        ck_assert_str_ne (s_hgrm_color (gp, "open-500"), s_hgrm_color (gp, "open-1000"));
    int floors = 0, curve[4], n_curve = 0;
    for (int i = 0; i < 4; i++)
        if (strcmp (s_csv (&csv, i, "saturated"), "0") == 0 && s_csv_num (&csv, i, "ok") > 0) {
            curve[n_curve++] = i;
            floors += i % 2 == 0;
        }
    if (floors == 2) {
        char *block = s_block (gp, "$echo_floor << EOD\n");
        EXPECT_IN (block, " echo-open-500\n");
        EXPECT_IN (block, " echo-open-1000");
        free (block);
        EXPECT_IN (gp, "title 'echo floor p50 (beside each step)'");
    }
    for (int i = 1; i < 4; i += 2) {
        bool both = strcmp (s_csv (&csv, i, "saturated"), "0") == 0 && strcmp (s_csv (&csv, i - 1, "saturated"), "0") == 0;
        bool under = both && s_csv_num (&csv, i, "p50_us") < s_csv_num (&csv, i - 1, "p50_us");
        char note[96];
        snprintf (note, sizeof note, "set label \"%s: p50 ", steps[i]);
        if (under) {
            EXPECT_IN (gp, note);
            EXPECT_IN (gp, "under its echo floor's ");
            EXPECT_IN (gp, "set label \"under the floor: the echo server is another process, woken apart; the host's "
                           "scheduling, not a server faster than its transport\" at graph 0.01, graph ");
        } else
            EXPECT_NOT_IN (gp, note);
    }
    if (n_curve > 0)
        s_check_ranges (&csv, gp, curve, n_curve);
    free (gp);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (one_rate_and_its_floor_are_not_a_sliver_of_axis)
{
    /* --floor at one rate: its echo step and its sigserve step achieve nearly the same rate (999.9
     * and 1000.1 req/s); the x axis must not stretch that 0.2 req/s across the graph (it did: ticks
     * from 999.9 to 1000.1), but hold both well inside a range of a tenth of the rate at least */
    run_t run;
    s_floor_run ("one-rate", "echo-one", "1000", &run);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 2);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "echo-open-1000");
    ck_assert_str_eq (s_csv (&csv, 1, "step"), "open-1000");
    char *gp = s_plots (&run);
    int curve[2], n_curve = 0;
    for (int i = 0; i < 2; i++)
        if (strcmp (s_csv (&csv, i, "saturated"), "0") == 0 && s_csv_num (&csv, i, "ok") > 0)
            curve[n_curve++] = i;
    if (n_curve > 0) {
        s_check_ranges (&csv, gp, curve, n_curve);
        double x0, x1;
        const char *plot = s_throughput (gp);
        ck_assert_int_eq (sscanf (strstr (plot, "set xrange ["), "set xrange [%lf:%lf]", &x0, &x1), 2);
        ck_assert_double_ge (x1 - x0, 0.0999 * 1000);
        for (int k = 0; k < n_curve; k++) {
            double x = s_csv_num (&csv, curve[k], "achieved_rps");
            ck_assert_msg (x - x0 >= 0.2 * (x1 - x0) && x1 - x >= 0.2 * (x1 - x0),
                           "%s at %.1f, at the edge of [%.3f:%.3f]", s_csv (&csv, curve[k], "step"), x, x0, x1);
        }
    }
    if (n_curve == 2)   /* one floor step on the curves: a baseline, not a curve of one point */
        EXPECT_IN (gp, "title 'echo floor p50 (");
    free (gp);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (a_saturated_floor_is_the_echo_servers_and_stops_nothing)
{
    /* --saturation-p99 1: every step saturates by its p99. The floor step is the echo server's
     * (never "the server", which is sigserve), and it does not stop the sweep: with
     * --stop-when-saturated the sweep stops after open-500, not before it, and open-1000 never runs */
    int port = tu_free_port ();
    char echo[128], out_path[4300], err_path[4300];
    snprintf (echo, sizeof echo, "tcp://127.0.0.1:%d", port);
    snprintf (out_path, sizeof out_path, "%s/echo-sat.out", s_dir);
    snprintf (err_path, sizeof err_path, "%s/echo-sat.err", s_dir);
    const char *serve[] = { "--serve-echo", echo, NULL };
    pid_t pid = s_spawn (serve, out_path, err_path);
    ck_assert_int_gt (pid, 0);
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--floor", echo, "--rate", "500,1000",
                           "--duration", "0.3", "--warmup", "0.1", "--saturation-p99", "1", "--stop-when-saturated",
                           NULL };
    s_sigload ("floor-saturated", args, &run);
    kill (pid, SIGTERM);
    ck_assert_int_eq (waitpid (pid, NULL, 0), pid);
    ck_assert_msg (run.status == 0 || run.status == 1, "sigload exited %d\n%s%s", run.status, run.out, run.err);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 2);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "echo-open-500");
    ck_assert_str_eq (s_csv (&csv, 1, "step"), "open-500");
    for (int i = 0; i < 2; i++) {
        ck_assert_str_eq (s_csv (&csv, i, "saturated"), "1");
        ck_assert_msg (strncmp (s_csv (&csv, i, "saturation"), "p99 ", 4) == 0, "%s", s_csv (&csv, i, "saturation"));
    }
    EXPECT_IN (run.out, "saturated at open-500 (p99 ");
    /* the lines below the table: who, by the kind of step */
    const char *line = strstr (run.out, "\necho-open-500: saturated by ");
    ck_assert_msg (line != NULL, "no verdict line for echo-open-500 in:\n%s", run.out);
    const char *eol = strchr (line + 1, '\n');
    const char *who = strstr (line, "echo server");
    ck_assert_msg (who && (!eol || who < eol), "echo-open-500's line names no echo server:\n%s", run.out);
    line = strstr (run.out, "\nopen-500: saturated by ");
    ck_assert_msg (line != NULL, "no verdict line for open-500 in:\n%s", run.out);
    eol = strchr (line + 1, '\n');
    who = strstr (line, "echo server");
    ck_assert_msg (!who || (eol && who > eol), "open-500's line names the echo server:\n%s", run.out);
    /* the plot: the floor step a red triangle of the echo server's; the server step (every server
     * step saturated) a point, joined to none (a line would run back where a step achieved less
     * than the one before it, and draw a knee), said once in the band, no triangle of its own */
    char *gp = s_plots (&run);
    EXPECT_IN (gp, "set label \"echo-open-500: saturated, by ");
    EXPECT_IN (gp, "$sigserve_open using 1:2 with points ps 1.3 pt 7 title 'sigserve open loop p50 (saturated: points)'");
    EXPECT_NOT_IN (gp, "$sigserve_open using 1:2 with linespoints");
    EXPECT_NOT_IN (gp, "set label \"open-500: saturated");
    EXPECT_IN (gp, "# saturated: open-500 (p99 ");
    EXPECT_IN (gp, "a point, not joined: every step saturated\n");
    EXPECT_IN (gp, "set label \"every step saturated: each is a point, none joined to another (no curve, no knee); "
                   "the lines below sigload's table say why\" at graph 0.01, graph ");
    EXPECT_NOT_IN (gp, "$echo_floor << EOD");
    const int on_graph[] = { 1 };
    s_check_ranges (&csv, gp, on_graph, 1);
    free (gp);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("sigload_saturation");
    for (size_t e = 0; e < 2; e++) {
        TCase *tc = s_engine_tcase (e);
        tcase_add_test (tc, a_stopped_sender_is_sigloads_doing);
        tcase_add_test (tc, a_stopped_sender_that_did_not_saturate_is_said);
        tcase_add_test (tc, full_connections_are_the_servers_doing);
        tcase_add_test (tc, a_saturated_step_is_never_on_the_curve);
        tcase_add_test (tc, notes_beyond_the_band_are_summed_up);
        tcase_add_test (tc, a_step_with_no_ok_reply_is_a_note_alone);
        tcase_add_test (tc, the_floor_runs_beside_every_step);
        tcase_add_test (tc, one_rate_and_its_floor_are_not_a_sliver_of_axis);
        tcase_add_test (tc, a_saturated_floor_is_the_echo_servers_and_stops_nothing);
        suite_add_tcase (s, tc);
    }
    return tu_run_suite (s);
}
