/* sigload's plots: plots.gp, written from the merged results of every step, and the PNGs gnuplot
 * makes of it (percentiles.png, latency_vs_throughput.png). */
#define _GNU_SOURCE
#include "sigload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
