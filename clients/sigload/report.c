/* sigload's results: the workers' histograms and counts merged per step, and everything printed or
 * written from them: the markdown table on stdout, summary.csv, <step>.hgrm, plots.gp (and the
 * PNGs gnuplot makes of it), the error details, and the progress line on stderr. */
#define _GNU_SOURCE
#include "clock.h"
#include "sigclient.h"
#include "sigload.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const s_outcome_names[OUT_COUNT] = {
    "STATUS_OK", "STATUS_BAD_REQUEST", "STATUS_UNKNOWN_MODEL", "STATUS_BAD_SHAPE", "STATUS_BAD_VALUE",
    "STATUS_OVERLOADED", "STATUS_DEADLINE_EXCEEDED", "STATUS_UNAVAILABLE", "STATUS_INTERNAL",
    "TIMEOUT", "BAD_REPLY", "UNMATCHED_ID", "OUTPUT_MISMATCH", "SEND_FAILED",
};

_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_INTERNAL == OUT_STATUS_COUNT - 1, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_UNKNOWN_MODEL == 2, "status values");

void report_merge (const sigload_t *L, result_t *r)
{
    r->step = L->step;
    histogram_reset (r->total);
    histogram_reset (r->server);
    histogram_reset (r->network);
    memset (&r->counts, 0, sizeof r->counts);
    r->counts.last_answer = L->step.measure_start;
    for (size_t t = 0; t < L->n_workers; t++) {
        const worker_t *w = &L->workers[t];
        report_add (r, &w->counts, w->total, w->server, w->network);
    }
    report_totals (r);
}

void report_add (result_t *r, const counts_t *c, const histogram_t *total, const histogram_t *server,
                 const histogram_t *network)
{
    histogram_merge (r->total, total);
    histogram_merge (r->server, server);
    histogram_merge (r->network, network);
    for (int o = 0; o < OUT_COUNT; o++) {
        r->counts.outcomes[o] += c->outcomes[o];
        counts_copy_error (r->counts.first_error[o], c->first_error[o]);
    }
    r->counts.requests += c->requests;
    r->counts.answered += c->answered;
    r->counts.sent += c->sent;
    r->counts.warmup_errors += c->warmup_errors;
    r->counts.late += c->late;
    r->counts.lag_sum += c->lag_sum;
    if (c->last_answer > r->counts.last_answer)
        r->counts.last_answer = c->last_answer;
    if (c->lag_max > r->counts.lag_max)
        r->counts.lag_max = c->lag_max;
}

void report_totals (result_t *r)
{
    r->errors = 0;
    for (int o = 1; o < OUT_COUNT; o++)
        r->errors += r->counts.outcomes[o];
    double seconds = (double) (r->counts.last_answer - r->step.measure_start) / 1e9;
    r->achieved = r->counts.answered && seconds > 0 ? (double) r->counts.answered / seconds : 0;
}

static void s_format_target (const step_t *st, char *buf, size_t len)
{
    if (st->schedule)
        snprintf (buf, len, "schedule (%.10g/s mean)", st->target);
    else if (st->mode == MODE_OPEN)
        snprintf (buf, len, "%.10g/s", st->target);
    else
        snprintf (buf, len, "%.10g outstanding", st->target);
}

/* "STATUS_X:n;TIMEOUT:m" (SEP ";" and ":"), or "STATUS_X n, TIMEOUT m" for the table. */
static void s_format_errors (const result_t *r, bool csv, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (int o = 1; o < OUT_COUNT; o++) {
        if (!r->counts.outcomes[o])
            continue;
        int n = snprintf (buf + used, len - used, csv ? "%s%s:%" PRIu64 : "%s%s %" PRIu64, used ? (csv ? ";" : ", ") : "",
                          s_outcome_names[o], r->counts.outcomes[o]);
        if (n < 0 || used + (size_t) n >= len)
            break;
        used += (size_t) n;
    }
}

void report_table_header (FILE *out)
{
    fprintf (out, "| step | mode | target | achieved req/s | requests | p50 | p90 | p99 | p99.9 | max | "
                  "server mean | network mean | send lag mean | errors |\n");
    fprintf (out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
}

void report_table_row (FILE *out, const result_t *r)
{
    char target[64], errors[512], server[32], lag[32];
    s_format_target (&r->step, target, sizeof target);
    s_format_errors (r, false, errors, sizeof errors);
    const histogram_t *h = r->total;
    uint64_t ok = r->counts.outcomes[OUT_OK];
    if (r->step.echo)
        snprintf (server, sizeof server, "-");
    else
        snprintf (server, sizeof server, "%.2f", histogram_mean (r->server) / 1e3);
    if (r->step.mode == MODE_CLOSED)
        snprintf (lag, sizeof lag, "-");
    else
        snprintf (lag, sizeof lag, "%.2f", ok ? r->counts.lag_sum / (double) ok / 1e3 : 0.0);
    fprintf (out, "| %s | %s | %s | %.1f | %" PRIu64 " | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %.2f | %s | %" PRIu64
             "%s%s%s |\n",
             r->step.name, r->step.mode == MODE_OPEN ? "open loop" : "closed loop", target, r->achieved,
             r->counts.requests, sigload_us (histogram_value_at_percentile (h, 50)),
             sigload_us (histogram_value_at_percentile (h, 90)), sigload_us (histogram_value_at_percentile (h, 99)),
             sigload_us (histogram_value_at_percentile (h, 99.9)), sigload_us (histogram_max (h)), server,
             histogram_mean (r->network) / 1e3, lag, r->errors,
             r->errors ? " (" : "", errors, r->errors ? ")" : "");
    fflush (out);
}

/* The engine is the last column, so that those before it stay where tools read them. */
void report_csv_header (FILE *out)
{
    fputs ("step,kind,mode,target,achieved_rps,requests,ok,errors,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,"
           "server_mean_us,server_p50_us,server_p99_us,network_mean_us,network_p50_us,network_p99_us,"
           "send_lag_mean_us,send_lag_max_us,errors_by_status,engine\n", out);
}

void report_csv_row (FILE *out, const result_t *r)
{
    char errors[512];
    s_format_errors (r, true, errors, sizeof errors);
    const histogram_t *h = r->total, *s = r->server, *n = r->network;
    uint64_t ok = r->counts.outcomes[OUT_OK];
    fprintf (out,
             "%s,%s,%s,%.10g,%.3f,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
             "%.3f,%.3f,%.3f,%.3f,%.3f,%s,%s\n",
             r->step.name, r->step.echo ? "echo" : "sigserve", r->step.mode == MODE_OPEN ? "open" : "closed",
             r->step.target, r->achieved, r->counts.requests, ok, r->errors,
             sigload_us (histogram_value_at_percentile (h, 50)), sigload_us (histogram_value_at_percentile (h, 90)),
             sigload_us (histogram_value_at_percentile (h, 99)), sigload_us (histogram_value_at_percentile (h, 99.9)),
             sigload_us (histogram_max (h)), histogram_mean (h) / 1e3, histogram_mean (s) / 1e3,
             sigload_us (histogram_value_at_percentile (s, 50)), sigload_us (histogram_value_at_percentile (s, 99)),
             histogram_mean (n) / 1e3, sigload_us (histogram_value_at_percentile (n, 50)),
             sigload_us (histogram_value_at_percentile (n, 99)), ok ? r->counts.lag_sum / (double) ok / 1e3 : 0.0,
             sigload_us (r->counts.lag_max), errors, sigclient_engine_name (r->step.engine));
    fflush (out);
}

int report_write_hgrm (const char *dir, const result_t *r)
{
    char path[4096];
    snprintf (path, sizeof path, "%s/%s.hgrm", dir, r->step.name);
    FILE *f = fopen (path, "w");
    if (!f) {
        fprintf (stderr, "sigload: cannot write %s: %s\n", path, strerror (errno));
        return -1;
    }
    int rc = histogram_write_hgrm (r->total, f, 1000.0);
    if (fclose (f) != 0 || rc != 0) {
        fprintf (stderr, "sigload: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

/* ---- plots ---- */

/* SRC inside a gnuplot double-quoted string: '"' and '\' escaped, control characters dropped. */
static void s_gp_escape (char *dst, size_t len, const char *src)
{
    size_t n = 0;
    for (; *src && n + 3 < len; src++) {
        if (*src == '"' || *src == '\\')
            dst[n++] = '\\';
        if ((unsigned char) *src >= 0x20)
            dst[n++] = *src;
    }
    dst[n] = 0;
}

/* What every plot's title carries besides its subject: "on HOST" in *WHERE, and "model M, C
 * connections, YYYY-MM-DD (UTC)" (with --echo: "an echo server, ...") in *WHAT, both escaped
 * for a double-quoted gnuplot string. */
static void s_plot_context (const options_t *opt, char *where, char *what, size_t len)
{
    char host[256] = "", date[32] = "", text[512];
    if (gethostname (host, sizeof host) != 0 || !host[0])
        snprintf (host, sizeof host, "an unnamed host");
    host[sizeof host - 1] = 0;
    time_t now = time (NULL);
    struct tm tm;
    if (gmtime_r (&now, &tm))
        strftime (date, sizeof date, "%Y-%m-%d", &tm);
    snprintf (text, sizeof text, "on %s", host);
    s_gp_escape (where, len, text);
    snprintf (text, sizeof text, "%s%s, %u connection%s, %s (UTC)", opt->echo ? "an echo server" : "model ",
              opt->echo ? "" : opt->model, opt->connections, opt->connections == 1 ? "" : "s", date);
    s_gp_escape (what, len, text);
}

static bool s_is_floor (const result_t *r) { return r->step.set == SET_FLOOR; }

/* Every step's percentile spectrum from its .hgrm; x is 1/(1-percentile) on a log axis. The floor
 * step is dashed like its baseline in the other plot; a step with no OK reply has no curve. */
static bool s_plot_percentiles (FILE *f, const char *where, const char *what, const result_t *results, size_t n)
{
    size_t curves = 0;
    for (size_t i = 0; i < n; i++)
        curves += histogram_count (results[i].total) > 0;
    if (curves == 0) {
        fprintf (f, "# percentiles.png: no step had an OK reply, so there is no percentile to plot\n\n");
        return false;
    }
    fprintf (f, "# Every step's percentile spectrum; x is 1/(1-percentile) on a log axis.\n"
                "set output 'percentiles.png'\n"
                "set title \"sigload %s: latency by percentile\\n%s; open loop: from each scheduled send, "
                "closed loop: from the actual send\"\n"
                "set logscale x\n"
                "set xlabel 'percentile'\n"
                "set xtics ('0%%%%' 1, '90%%%%' 10, '99%%%%' 100, '99.9%%%%' 1000, '99.99%%%%' 10000, '99.999%%%%' 100000, "
                "'99.9999%%%%' 1000000)\n"
                "plot", where, what);
    size_t plotted = 0;
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        if (histogram_count (r->total) == 0)
            continue;
        fprintf (f, "%s \\\n     '%s.hgrm' using 4:1 with lines lw 2%s title '%s%s'", plotted++ ? "," : "",
                 r->step.name, s_is_floor (r) ? " dt 2" : "", r->step.name,
                 s_is_floor (r) ? " (echo floor)" : r->saturated ? " (saturated)" : "");
    }
    fprintf (f, "\n\n");
    return true;
}

/* Latency against achieved throughput. The first saturated step of each curve is its knee: it is
 * plotted with the others and marked "saturated". Steps past it would stretch the latency axis by
 * orders of magnitude and flatten every other point: they are left out of the points and shown as
 * a vertical line at their throughput instead (unless every step saturated). A saturated step with
 * no OK reply has no latency to plot: a vertical line too. The --floor step is a dashed horizontal
 * baseline at its p50 and p99. */
static bool s_plot_throughput (FILE *f, const char *where, const char *what, const result_t *results, size_t n)
{
    static const struct { bool echo; load_mode_t mode; const char *block, *label; } series[] = {
        { false, MODE_OPEN, "sigserve_open", "sigserve open loop" },
        { false, MODE_CLOSED, "sigserve_closed", "sigserve closed loop" },
        { true, MODE_OPEN, "echo_open", "echo open loop" },
        { true, MODE_CLOSED, "echo_closed", "echo closed loop" },
    };
    static const struct { int column; const char *name; } pcts[] = { { 2, "p50" }, { 3, "p99" }, { 4, "p99.9" } };
    size_t steps = 0, with_data = 0, unsaturated = 0;
    double lo = 0, hi = 0;
    const result_t *floor = NULL;
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        bool data = histogram_count (r->total) > 0;   /* an OK reply, so latencies */
        if (s_is_floor (r)) {
            floor = data ? r : NULL;
            continue;
        }
        lo = steps == 0 || r->achieved < lo ? r->achieved : lo;
        hi = steps == 0 || r->achieved > hi ? r->achieved : hi;
        steps++;
        with_data += data;
        unsaturated += data && !r->saturated;
    }
    if (with_data == 0 && !floor) {
        fprintf (f, "# latency_vs_throughput.png: no step had an OK reply, so there is no latency to plot\n");
        return false;
    }
    /* every step with latencies saturated: plot them as they are, there is nothing else */
    bool all_saturated = unsaturated == 0 && with_data > 0;
    fprintf (f, "# Latency against achieved throughput: the steps below saturation and each curve's first\n"
                "# saturated step (its knee), one data block per kind and mode (columns: achieved req/s,\n"
                "# p50, p99, p99.9 in us, the step).\n");
    bool present[sizeof series / sizeof series[0]] = { false };
    /* each curve's knee: its first saturated step with latencies (plotted, marked) */
    const result_t *knee[sizeof series / sizeof series[0]] = { NULL };
    for (size_t s = 0; s < sizeof series / sizeof series[0] && !all_saturated; s++)
        for (size_t i = 0; i < n && !knee[s]; i++) {
            const result_t *r = &results[i];
            if (!s_is_floor (r) && r->step.echo == series[s].echo && r->step.mode == series[s].mode && r->saturated
                && histogram_count (r->total) > 0)
                knee[s] = r;
        }
    for (size_t s = 0; s < sizeof series / sizeof series[0]; s++) {
        for (size_t i = 0; i < n; i++) {
            const result_t *r = &results[i];
            if (s_is_floor (r) || r->step.echo != series[s].echo || r->step.mode != series[s].mode
                || histogram_count (r->total) == 0 || (r->saturated && !all_saturated && r != knee[s]))
                continue;
            if (!present[s])
                fprintf (f, "$%s << EOD\n", series[s].block);
            present[s] = true;
            fprintf (f, "%.3f %.3f %.3f %.3f %s\n", r->achieved, sigload_us (histogram_value_at_percentile (r->total, 50)),
                     sigload_us (histogram_value_at_percentile (r->total, 99)),
                     sigload_us (histogram_value_at_percentile (r->total, 99.9)), r->step.name);
        }
        if (present[s])
            fprintf (f, "EOD\n");
    }
    fprintf (f, "set output 'latency_vs_throughput.png'\n"
                "set title \"sigload %s: latency against achieved throughput\\n%s\"\n"
                "unset logscale x\n"
                "set xtics autofreq\n"
                "set xlabel 'achieved throughput (requests/s)'\n", where, what);
    if (steps > 0) {
        double pad = hi > lo ? 0.05 * (hi - lo) : (hi > 0 ? 0.1 * hi : 1);
        fprintf (f, "set xrange [%.3f:%.3f]\n", lo - pad > 0 ? lo - pad : 0, hi + pad);
    }
    for (size_t s = 0; s < sizeof series / sizeof series[0]; s++) {
        const result_t *r = knee[s];
        if (!r)
            continue;
        char why[512];
        s_gp_escape (why, sizeof why, r->saturation);
        double p99 = sigload_us (histogram_value_at_percentile (r->total, 99));
        fprintf (f, "# knee: %s (%s), the first saturated step of %s\n"
                    "set label \"saturated: %s\" at first %.3f, first %.3f point pt 6 ps 3 lc rgb 'red' "
                    "offset 1,1 tc rgb 'red'\n", r->step.name, why, series[s].label, r->step.name, r->achieved, p99);
    }
    for (size_t i = 0; i < n && !all_saturated; i++) {
        const result_t *r = &results[i];
        bool is_knee = false;
        for (size_t s = 0; s < sizeof series / sizeof series[0]; s++)
            is_knee = is_knee || knee[s] == r;
        if (s_is_floor (r) || !r->saturated || is_knee)
            continue;
        char why[512], p99[64] = "";
        s_gp_escape (why, sizeof why, r->saturation);
        if (histogram_count (r->total) > 0)
            snprintf (p99, sizeof p99, ", p99 %.0f us", sigload_us (histogram_value_at_percentile (r->total, 99)));
        fprintf (f, "# saturated: %s (%s)\n"
                    "set arrow from first %.3f, graph 0 to first %.3f, graph 1 nohead dt 3 lw 2 lc rgb 'red'\n"
                    "set label \"saturated: %s%s\" at first %.3f, graph 0.98 right rotate by 90 offset -1,0 "
                    "tc rgb 'red'\n", r->step.name, why, r->achieved, r->achieved, r->step.name, p99, r->achieved);
    }
    fprintf (f, "plot");
    int plotted = 0;
    for (size_t s = 0; s < sizeof series / sizeof series[0]; s++)
        for (size_t p = 0; present[s] && p < sizeof pcts / sizeof pcts[0]; p++)
            fprintf (f, "%s \\\n     $%s using 1:%d with linespoints lw 2 pt 7 title '%s %s%s'", plotted++ ? "," : "",
                     series[s].block, pcts[p].column, series[s].label, pcts[p].name,
                     all_saturated ? " (saturated)" : "");
    if (floor) {
        double p50 = sigload_us (histogram_value_at_percentile (floor->total, 50));
        double p99 = sigload_us (histogram_value_at_percentile (floor->total, 99));
        fprintf (f, "%s \\\n     %.3f with lines dt 2 lw 2 lc rgb 'gray30' title 'echo floor p50 (%.1f us, %s)', \\\n"
                    "     %.3f with lines dt 2 lw 1 lc rgb 'gray50' title 'echo floor p99 (%.1f us)'",
                 plotted++ ? "," : "", p50, p50, floor->step.name, p99, p99);
    }
    fprintf (f, "\n");
    return true;
}

bool report_plot (const options_t *opt, const result_t *results, size_t n, char *made, size_t made_len)
{
    const char *dir = opt->out_dir;
    char path[4096], where[600], what[600];
    made[0] = 0;
    snprintf (path, sizeof path, "%s/plots.gp", dir);
    FILE *f = fopen (path, "w");
    if (!f) {
        fprintf (stderr, "sigload: cannot write %s: %s\n", path, strerror (errno));
        return false;
    }
    s_plot_context (opt, where, what, sizeof where);
    fprintf (f, "# sigload's plots: run \"gnuplot plots.gp\" in this folder.\n"
                "set terminal pngcairo size 1280,800 noenhanced\n"
                "set rmargin 8\n"
                "set grid\n"
                "set key top left\n"
                "set logscale y\n"
                "set ylabel 'latency (us)'\n"
                "\n");
    bool percentiles = s_plot_percentiles (f, where, what, results, n);
    bool throughput = s_plot_throughput (f, where, what, results, n);
    if (fclose (f) != 0) {
        fprintf (stderr, "sigload: cannot write %s\n", path);
        return false;
    }
    if (!percentiles && !throughput)
        return false;
    fflush (stdout);
    fflush (stderr);
    pid_t pid = fork ();
    if (pid == 0) {
        if (chdir (dir) != 0)
            _exit (126);
        FILE *log = freopen ("gnuplot.log", "w", stderr);   /* its warnings, out of the way */
        (void) log;
        execlp ("gnuplot", "gnuplot", "plots.gp", (char *) NULL);
        _exit (127);
    }
    int status = 0;
    if (pid < 0 || waitpid (pid, &status, 0) != pid) {
        fprintf (stderr, "sigload: cannot run gnuplot: %s\n", strerror (errno));
        return false;
    }
    int code = WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
    char log[4200];
    snprintf (log, sizeof log, "%s/gnuplot.log", dir);
    if (code == 0 || code == 127)
        unlink (log);   /* only warnings, or nothing */
    if (code == 127)
        fprintf (stderr, "sigload: gnuplot is not installed: no PNG plots (the data files and %s are written; "
                         "install gnuplot and run it there)\n", path);
    else if (code != 0)
        fprintf (stderr, "sigload: gnuplot failed on %s (%s/gnuplot.log says why)\n", path, dir);
    if (code == 0)
        snprintf (made, made_len, "%s%s%s", percentiles ? "percentiles.png" : "", percentiles && throughput ? ", " : "",
                  throughput ? "latency_vs_throughput.png" : "");
    return code == 0;
}

void report_error_details (FILE *out, const result_t *results, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        if (r->counts.warmup_errors)
            fprintf (out, "%s: %" PRIu64 " errors in the warm-up\n", r->step.name, r->counts.warmup_errors);
        for (int o = 1; o < OUT_COUNT; o++)
            if (r->counts.outcomes[o])
                fprintf (out, "%s: %" PRIu64 " x %s%s%s\n", r->step.name, r->counts.outcomes[o], s_outcome_names[o],
                        r->counts.first_error[o][0] ? ", first: " : "", r->counts.first_error[o]);
        if (r->counts.late)
            fprintf (out, "%s: %" PRIu64 " replies came after their timeout\n", r->step.name, r->counts.late);
    }
}

void report_progress (const sigload_t *L, int64_t now)
{
    uint64_t sent = 0, measured = 0, answered = 0, errors = 0;
    for (size_t t = 0; t < L->n_workers; t++) {
        sent += atomic_load_explicit (&L->workers[t].pub_sent, memory_order_relaxed);
        measured += atomic_load_explicit (&L->workers[t].pub_measured, memory_order_relaxed);
        answered += atomic_load_explicit (&L->workers[t].pub_answered, memory_order_relaxed);
        errors += atomic_load_explicit (&L->workers[t].pub_errors, memory_order_relaxed);
    }
    const step_t *st = &L->step;
    const options_t *opt = L->opt;
    if (now < st->measure_start) {
        double done = now > st->t0 ? (double) (now - st->t0) / 1e9 : 0;
        fprintf (stderr, "sigload: %s: warm-up %.1f/%.1f s, %" PRIu64 " sent, %" PRIu64 " errors\n", st->name, done,
                 opt->warmup_s, sent, errors);
        return;
    }
    double done = (double) (now - st->measure_start) / 1e9;
    if (opt->requests)
        fprintf (stderr, "sigload: %s: measuring %.1f s, %" PRIu64 "/%" PRIu64 " sent, %" PRIu64 " answered, %" PRIu64
                         " errors\n", st->name, done, measured, opt->requests, answered, errors);
    else if (now < st->measure_end)
        fprintf (stderr, "sigload: %s: measuring %.1f/%.1f s, %" PRIu64 " sent, %" PRIu64 " answered, %" PRIu64
                         " errors\n", st->name, done, opt->duration_s, measured, answered, errors);
    else
        fprintf (stderr, "sigload: %s: measured %.1f s, %" PRIu64 " sent, %" PRIu64 " answered, %" PRIu64
                         " errors; waiting for the last replies\n", st->name, opt->duration_s, measured, answered,
                 errors);
}
