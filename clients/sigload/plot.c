/* sigload's plots: plots.gp, written from the merged results of every step, and the PNGs gnuplot
 * makes of it (percentiles.png, latency_vs_throughput.png). */
#define _GNU_SOURCE
#include "sigload.h"

#include <errno.h>
#include <math.h>
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
 * connections, YYYY-MM-DD (UTC)" (with --echo: "an echo server, ..."; with --processes N: "C
 * connections over N processes", C the whole load's) in *WHAT, both escaped for a double-quoted
 * gnuplot string. */
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
    unsigned conns = opt->processes > 1 && opt->all_connections ? opt->all_connections : opt->connections;
    char procs[48] = "";
    if (opt->processes > 1)
        snprintf (procs, sizeof procs, " over %u processes", opt->processes);
    snprintf (text, sizeof text, "%s%s, %u connection%s%s, %s (UTC)", opt->echo ? "an echo server" : "model ",
              opt->echo ? "" : opt->model, conns, conns == 1 ? "" : "s", procs, date);
    s_gp_escape (what, len, text);
}

static bool s_is_floor (const result_t *r) { return r->step.set == SET_FLOOR; }

static bool s_has_data (const result_t *r) { return histogram_count (r->total) > 0; }

static double s_pct_us (const result_t *r, double p) { return sigload_us (histogram_value_at_percentile (r->total, p)); }

/* ---- the notes of a plot: one line each in a band at the top of the graph ---- */

#define MAX_NOTES 10            /* lines in the band; more are summed up in one more (the band and
                                 * its summary then take 0.431 of the graph, the curves the rest) */
#define NOTE_TOP 0.965          /* the band's first line, as a fraction of the graph's height */
#define NOTE_ROW 0.036          /* its line height (22 px at 800 px for a 9-point line) */
#define NOTE_CHARS 90           /* a step's line at most: half the graph's width at 9 points */
#define NOTE_NO_X (-1.0)        /* a line of no step: at the graph's left edge, the whole width */

/* How much a line matters when the band cannot hold them all: the lines that say what the marks
 * mean, then the saturated steps where saturation began (each kind's first) or that were sigload's
 * doing, then the other saturated steps, then the rest. */
enum { NOTE_KEY, NOTE_SATURATED, NOTE_SATURATED_MORE, NOTE_OTHER };

typedef struct {
    double x;                   /* where its marker goes: a step's achieved rate, or NOTE_NO_X */
    const char *color;
    int pt;                     /* its marker's point type; 0: a line without marker */
    int rank;                   /* NOTE_* */
    size_t group;               /* the lines of one step go in, or stay out, together */
    bool kept;
    char text[4 * NOTE_CHARS];
} note_line_t;

typedef struct {
    note_line_t *lines;         /* every candidate, in order */
    size_t n, cap;
    size_t kept, dropped;       /* lines in the band, lines left out (s_notes_choose) */
} notes_t;

static void s_note (notes_t *notes, size_t group, int rank, double x, const char *color, int pt, const char *text)
{
    if (notes->n == notes->cap)
        return;     /* cap: two a step and the key's three, never reached */
    note_line_t *l = &notes->lines[notes->n++];
    *l = (note_line_t) { .x = x, .color = color, .pt = pt, .rank = rank, .group = group };
    s_gp_escape (l->text, sizeof l->text, text);
}

/* Keeps what fits in MAX_NOTES lines, a group at a time, by rank, then in order. */
static void s_notes_choose (notes_t *notes)
{
    size_t room = MAX_NOTES;
    for (int rank = NOTE_KEY; rank <= NOTE_OTHER; rank++)
        for (size_t i = 0; i < notes->n; i++) {
            if (notes->lines[i].rank != rank || (i > 0 && notes->lines[i - 1].group == notes->lines[i].group
                                                 && notes->lines[i - 1].rank == rank))
                continue;   /* a group is taken at its first line */
            size_t len = 1;
            while (i + len < notes->n && notes->lines[i + len].group == notes->lines[i].group)
                len++;
            if (len > room)
                continue;
            for (size_t k = 0; k < len; k++)
                notes->lines[i + k].kept = true;
            room -= len;
        }
    notes->kept = MAX_NOTES - room;
    notes->dropped = notes->n - notes->kept;
}

/* The room the notes take at the top of the graph, as a fraction of its height. */
static double s_notes_room (const notes_t *notes)
{
    size_t lines = notes->kept + (notes->dropped > 0);
    return lines ? 1 - NOTE_TOP + NOTE_ROW * (double) lines : 0;
}

/* Writes the lines kept as labels inside the graph, between XLO and XHI: each line of a step at
 * the step's rate (its marker there), its text running towards the middle so that it never leaves
 * the graph; the others at its left edge. */
static void s_write_notes (FILE *f, const notes_t *notes, double xlo, double xhi)
{
    size_t row = 0;
    for (size_t i = 0; i < notes->n; i++) {
        const note_line_t *l = &notes->lines[i];
        if (!l->kept)
            continue;
        double y = NOTE_TOP - NOTE_ROW * (double) row++;
        if (l->x == NOTE_NO_X) {
            fprintf (f, "set label \"%s\" at graph 0.01, graph %.3f left tc rgb '%s' font ',9'\n", l->text, y, l->color);
            continue;
        }
        double x = l->x < xlo ? xlo : l->x > xhi ? xhi : l->x;
        bool right = xhi > xlo && (x - xlo) / (xhi - xlo) > 0.5;
        /* the marker a label of its own: gnuplot raises the text of a label that has a point, so
         * the line would sit off its row (and closer to the line above than to the one below) */
        if (l->pt)
            fprintf (f, "set label \"\" at first %.3f, graph %.3f point pt %d ps 1.5 lc rgb '%s'\n", x, y, l->pt,
                     l->color);
        fprintf (f, "set label \"%s\" at first %.3f, graph %.3f %s offset %d,0 tc rgb '%s' font ',9'\n", l->text, x, y,
                 right ? "right" : "left", right ? -1 : 1, l->color);
    }
    if (notes->dropped)
        fprintf (f, "set label \"... and %zu more line%s of notes: the lines below sigload's table say it all\" at graph "
                    "0.01, graph %.3f left tc rgb 'black' font ',9'\n",
                 notes->dropped, notes->dropped == 1 ? "" : "s", NOTE_TOP - NOTE_ROW * (double) row);
}

/* ---- percentiles.png ---- */

/* The curves' colors, one a value of the sweep (gnuplot's own cycle has 8, one of them a pale
 * yellow, and gives a floor step and its step two unrelated ones). */
static const char *const s_colors[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf" };
#define N_COLORS (sizeof s_colors / sizeof s_colors[0])

/* Every step's percentile spectrum from its .hgrm; x is 1/(1-percentile) on a log axis. The latency
 * axis is bounded by the steps that did not saturate: a saturated step's curve runs off its top
 * rather than flatten the others. The floor steps are dashed like their baseline in the other
 * plot, in the color of the step measured beside them; a step with no OK reply has no curve. */
static bool s_plot_percentiles (FILE *f, const char *where, const char *what, const result_t *results, size_t n)
{
    size_t curves = 0;
    double lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        if (!s_has_data (r))
            continue;
        curves++;
        if (r->saturated)
            continue;
        double min = sigload_us (histogram_min (r->total)), max = sigload_us (histogram_max (r->total));
        lo = lo == 0 || min < lo ? min : lo;
        hi = max > hi ? max : hi;
    }
    if (curves == 0) {
        fprintf (f, "# percentiles.png: no step had an OK reply, so there is no percentile to plot\n\n");
        return false;
    }
    fprintf (f, "# Every step's percentile spectrum; x is 1/(1-percentile) on a log axis.\n"
                "set output 'percentiles.png'\n"
                "set title \"sigload %s: latency by percentile\\n%s; open loop: from each scheduled send, "
                "closed loop: from the actual send\"\n"
                "unset label\n"
                "unset arrow\n"
                "set ytics autofreq\n"
                "set logscale x\n"
                "set xrange [*:*]\n"
                "set xlabel 'percentile'\n"
                "set xtics ('0%%%%' 1, '90%%%%' 10, '99%%%%' 100, '99.9%%%%' 1000, '99.99%%%%' 10000, '99.999%%%%' 100000, "
                "'99.9999%%%%' 1000000)\n", where, what);
    if (hi > 0)
        fprintf (f, "# y range: the steps that did not saturate, from their least latency / 1.5 to their most x 1.5\n"
                    "set yrange [%.3f:%.3f]\n", (lo > 0 ? lo : 1) / 1.5, hi * 1.5);
    else
        fprintf (f, "# y range: every step saturated, so theirs\nset yrange [*:*]\n");
    fprintf (f, "plot");
    size_t plotted = 0, value = 0;
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        /* a color a value of the sweep: a floor step and its own step (just after it) share one */
        const char *color = s_colors[value % N_COLORS];
        value += !s_is_floor (r);
        if (!s_has_data (r))
            continue;
        bool off = r->saturated && hi > 0 && sigload_us (histogram_max (r->total)) > hi * 1.5;
        fprintf (f, "%s \\\n     '%s.hgrm' using 4:1 with lines lw 2%s lc rgb '%s' title '%s%s%s'", plotted++ ? "," : "",
                 r->step.name, s_is_floor (r) ? " dt 2" : "", color, r->step.name, s_is_floor (r) ? " (echo floor)" : "",
                 !r->saturated ? "" : off ? " (saturated: off the top)" : " (saturated)");
    }
    fprintf (f, "\n\n");
    return true;
}

/* ---- latency_vs_throughput.png ---- */

static const struct { bool echo; load_mode_t mode; const char *block, *label; } s_series[] = {
    { false, MODE_OPEN, "sigserve_open", "sigserve open loop" },
    { false, MODE_CLOSED, "sigserve_closed", "sigserve closed loop" },
    { true, MODE_OPEN, "echo_open", "echo open loop" },
    { true, MODE_CLOSED, "echo_closed", "echo closed loop" },
};
#define N_SERIES (sizeof s_series / sizeof s_series[0])

static size_t s_series_of (const result_t *r)
{
    for (size_t s = 0; s < N_SERIES; s++)
        if (r->step.echo == s_series[s].echo && r->step.mode == s_series[s].mode)
            return s;
    return 0;
}

/* Who saturated R, as a note says it; sigload with its own lag (LAG). */
static void s_by (const result_t *r, const char *lag, char *buf, size_t len)
{
    const char *server = r->step.echo ? "the echo server" : "the server";
    if (r->saturated_by == SAT_SIGLOAD)
        snprintf (buf, len, "sigload (its own send lag %s), not %s", lag, server);
    else if (r->saturated_by == SAT_BOTH)
        snprintf (buf, len, "sigload (its own send lag %s) and %s", lag, server);
    else
        snprintf (buf, len, "%s", server);
}

/* Whether step I is on a curve with a p50 under that of the floor measured beside it (FLOOR_OF). */
static bool s_under_floor (const result_t *results, size_t i, const bool *curve, const long *floor_of)
{
    return curve[i] && floor_of[i] >= 0 && curve[floor_of[i]]
           && s_pct_us (&results[i], 50) < s_pct_us (&results[floor_of[i]], 50);
}

/* The notes of the throughput plot, in the order of the steps: a saturated step off the curve (a
 * red triangle at its achieved rate: who, with sigload's own lag when it fell behind; why; its
 * latencies), a step on the curve whose sender fell behind (orange, circled on its curve), a step
 * under the floor measured beside it (blue); then a line that says what the orange and the blue
 * ones mean. Where the saturated steps' two lines each would not fit in the band, each has one
 * (who, its rate and p99; the table below says why): a sweep run past saturation without
 * --stop-when-saturated keeps its curves half the graph at least, and every saturated step a
 * mark. CURVE says which steps are on the curves; FLOOR_OF which floor step was measured beside
 * each step (-1: none). */
static void s_throughput_notes (const result_t *results, size_t n, const bool *curve, const long *floor_of,
                                notes_t *notes)
{
    char a[32], b[32], by[128], line[4 * NOTE_CHARS];
    size_t behind = 0, under = 0, saturated = 0, points = 0;
    for (size_t i = 0; i < n; i++) {
        behind += results[i].sender_behind;
        under += !results[i].saturated && s_under_floor (results, i, curve, floor_of);
        saturated += results[i].saturated && !curve[i];
        points += results[i].saturated && curve[i];
    }
    const bool compact = 2 * saturated + (behind > 0) + (under > 0) + (points > 0) > MAX_NOTES;
    bool onset[N_SERIES] = { false };  /* a kind's first saturated step seen */
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        judge_format_us (judge_own_lag_us (r), a, sizeof a);
        judge_format_us (sigload_us (r->counts.own_lag_max), b, sizeof b);
        if (r->saturated && curve[i])
            continue;   /* every step saturated: a point on the graph, said once below */
        if (r->saturated) {
            char p50[32], p99[32], limit[32];
            judge_format_us (s_pct_us (r, 50), p50, sizeof p50);
            judge_format_us (s_pct_us (r, 99), p99, sizeof p99);
            judge_format_us (r->p99_limit_us, limit, sizeof limit);
            const size_t series = s_series_of (r);
            const int rank = !onset[series] || r->saturated_by == SAT_SIGLOAD || r->saturated_by == SAT_BOTH
                                     ? NOTE_SATURATED
                                     : NOTE_SATURATED_MORE;
            onset[series] = true;
            if (compact) {
                const char *server = r->step.echo ? "the echo server" : "the server";
                char who[64], lat[64] = ", no OK reply";
                if (r->saturated_by == SAT_SIGLOAD)
                    snprintf (who, sizeof who, "sigload");
                else if (r->saturated_by == SAT_BOTH)
                    snprintf (who, sizeof who, "sigload and %s", server);
                else
                    snprintf (who, sizeof who, "%s", server);
                if (s_has_data (r))
                    snprintf (lat, sizeof lat, ", p99 %s", p99);
                snprintf (line, sizeof line, "%s: saturated by %s, %.0f req/s%s", r->step.name, who, r->achieved, lat);
                s_note (notes, i, rank, r->achieved, "red", 9, line);
                continue;
            }
            s_by (r, a, by, sizeof by);
            snprintf (line, sizeof line, "%s: saturated, by %s", r->step.name, by);
            s_note (notes, i, rank, r->achieved, "red", 9, line);
            /* its rate (the reason, when it is the rate), the reason, its latencies */
            char lat[96] = "; no OK reply";
            if (s_has_data (r))
                snprintf (lat, sizeof lat, ": p50 %s, p99 %s", p50, p99);
            if (strncmp (r->saturation, "achieved", 8) == 0)
                snprintf (line, sizeof line, "    %s%s", r->saturation, lat);
            else if (strncmp (r->saturation, "p99", 3) == 0)
                snprintf (line, sizeof line, "    %.0f req/s: p50 %s, p99 %s, over the limit of %s", r->achieved, p50,
                          p99, limit);
            else
                snprintf (line, sizeof line, "    %.0f req/s, %s%s", r->achieved, r->saturation, lat);
            s_note (notes, i, rank, r->achieved, "red", 0, line);
            continue;
        }
        if (r->sender_behind) {
            snprintf (line, sizeof line, "%s: sigload fell behind, its own send lag %s on average (max %s)",
                      r->step.name, a, b);
            s_note (notes, i, NOTE_OTHER, r->achieved, "dark-orange", 6, line);
        }
        if (s_under_floor (results, i, curve, floor_of)) {
            const result_t *fl = &results[floor_of[i]];
            judge_format_us (s_pct_us (r, 50), a, sizeof a);
            judge_format_us (s_pct_us (fl, 50), b, sizeof b);
            snprintf (line, sizeof line, "%s: p50 %s, under its echo floor's %s (%s, measured just before)",
                      r->step.name, a, b, fl->step.name);
            s_note (notes, n + i, NOTE_OTHER, r->achieved, "blue", 12, line);
        }
    }
    if (points)
        s_note (notes, 2 * n + 2, NOTE_KEY, NOTE_NO_X, "red", 0,
                "every step saturated: each is a point, none joined to another (no curve, no knee); the lines "
                "below sigload's table say why");
    if (behind)
        s_note (notes, 2 * n, NOTE_KEY, NOTE_NO_X, "dark-orange", 0,
                "sigload fell behind where circled or said so: its own send lag is in those latencies; try "
                "--processes, or give sigload cores of its own");
    if (under)
        s_note (notes, 2 * n + 1, NOTE_KEY, NOTE_NO_X, "blue", 0,
                "under the floor: the echo server is another process, woken apart; the host's scheduling, not a "
                "server faster than its transport");
    s_notes_choose (notes);
}

/* The log latency axis's ticks from LO to TOP alone (not in the notes' band above): 1, 2, 3 and 5
 * times the powers of ten where the range spans less than two decades (TOP is at least 2.25 x LO,
 * and no two of those are further apart than 2 x: there is always one), 1, 2 and 5 times them up
 * to three and a half (two powers of ten alone are too few to read a value by), the powers of ten
 * beyond. */
static void s_write_ytics (FILE *f, double lo, double top)
{
    static const double fine[] = { 1, 2, 3, 5 }, mid[] = { 1, 2, 5 }, coarse[] = { 1 };
    const double decades = log10 (top / lo);
    const double *steps = decades < 2 ? fine : decades < 3.5 ? mid : coarse;
    const size_t n_steps = decades < 2 ? 4 : decades < 3.5 ? 3 : 1;
    int written = 0;
    fprintf (f, "set ytics (");
    for (double decade = pow (10, floor (log10 (lo))); decade <= top; decade *= 10)
        for (size_t k = 0; k < n_steps; k++) {
            double v = decade * steps[k];
            if (v >= lo && v <= top)
                fprintf (f, "%s%g", written++ ? ", " : "", v);
        }
    fprintf (f, ")\n");
}

/* Latency against achieved throughput. A curve per kind and mode joins the steps that did not
 * saturate; a saturated step is never on it but a red triangle in the band of notes at the top, at
 * its achieved rate, saying who saturated (the server, or sigload itself) and its latencies (unless
 * every step of the sweep saturated: then the steps are points, joined by no line, and one line of
 * the band says so). Both axes
 * are bounded by the steps on the curves, the band of notes kept above them; the legend sits below
 * the graph, clear of it. The --floor steps: a dashed baseline at their p50 and p99 (one step), or
 * dashed curves (one a rate); a step under its floor says so, and a step whose sender fell behind
 * is circled. */
static bool s_plot_throughput (FILE *f, const char *where, const char *what, const result_t *results, size_t n)
{
    bool *curve = calloc (n ? n : 1, sizeof *curve);
    long *floor_of = calloc (n ? n : 1, sizeof *floor_of);
    if (!curve || !floor_of) {
        free (curve);
        free (floor_of);
        fprintf (f, "# latency_vs_throughput.png: out of memory\n");
        return false;
    }
    size_t with_data = 0, unsaturated = 0, floors = 0;
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        with_data += s_has_data (r);
        unsaturated += s_has_data (r) && !r->saturated && !s_is_floor (r);
        /* with --floor, each step's floor is the step just before it */
        floor_of[i] = !s_is_floor (r) && i > 0 && s_is_floor (&results[i - 1])
                              && results[i - 1].step.target == r->step.target ? (long) i - 1 : -1;
    }
    /* every step with latencies saturated: plot them as points, unjoined (a line through them would
     * run back where a step achieved less than the one before, and show a knee that is none) */
    bool all_saturated = unsaturated == 0;
    double xlo = 0, xhi = 0, ylo = 0, yhi = 0;
    size_t on_curves = 0;
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        curve[i] = s_has_data (r) && (!r->saturated || (all_saturated && !s_is_floor (r)));
        if (!curve[i])
            continue;
        floors += s_is_floor (r);
        double v[3] = { s_pct_us (r, 50), s_pct_us (r, 99), s_pct_us (r, 99.9) };
        xlo = on_curves == 0 || r->achieved < xlo ? r->achieved : xlo;
        xhi = on_curves == 0 || r->achieved > xhi ? r->achieved : xhi;
        for (int k = 0; k < (s_is_floor (r) ? 2 : 3); k++) {
            ylo = ylo == 0 || v[k] < ylo ? v[k] : ylo;
            yhi = v[k] > yhi ? v[k] : yhi;
        }
        on_curves++;
    }
    if (with_data == 0 || on_curves == 0) {
        fprintf (f, "# latency_vs_throughput.png: no step had an OK reply, so there is no latency to plot\n");
        free (curve);
        free (floor_of);
        return false;
    }
    fprintf (f, "# Latency against achieved throughput: one data block per kind and mode, the steps that did\n"
                "# not saturate%s (columns: achieved req/s, p50, p99, p99.9 in us, the step).\n",
             all_saturated ? " (none did: every step, drawn as points)" : "");
    bool present[N_SERIES] = { false };
    for (size_t s = 0; s < N_SERIES; s++) {
        for (size_t i = 0; i < n; i++) {
            const result_t *r = &results[i];
            if (!curve[i] || s_is_floor (r) || s_series_of (r) != s)
                continue;
            if (!present[s])
                fprintf (f, "$%s << EOD\n", s_series[s].block);
            present[s] = true;
            fprintf (f, "%.3f %.3f %.3f %.3f %s\n", r->achieved, s_pct_us (r, 50), s_pct_us (r, 99), s_pct_us (r, 99.9),
                     r->step.name);
        }
        if (present[s])
            fprintf (f, "EOD\n");
    }
    if (floors > 1) {
        fprintf (f, "# The echo floor measured beside each step (columns: achieved req/s, p50, p99 in us, the step).\n"
                    "$echo_floor << EOD\n");
        for (size_t i = 0; i < n; i++)
            if (curve[i] && s_is_floor (&results[i]))
                fprintf (f, "%.3f %.3f %.3f %s\n", results[i].achieved, s_pct_us (&results[i], 50),
                         s_pct_us (&results[i], 99), results[i].step.name);
        fprintf (f, "EOD\n");
    }
    notes_t notes = { .cap = 2 * n + 3 };
    notes.lines = calloc (notes.cap, sizeof *notes.lines);
    if (notes.lines)
        s_throughput_notes (results, n, curve, floor_of, &notes);
    /* the latency axis: the curves' values, then room above them for the notes (a log axis) */
    double room = s_notes_room (&notes), lo = ylo / 1.5, top = yhi * 1.5;   /* room: 0.595 at most */
    double hi = exp (log (lo) + (log (top) - log (lo)) / (1 - room));
    /* padded by 5% of their span, or of the highest rate where that is more: a floor step and its
     * server step at one rate (9,991 and 10,000 req/s) are not a span to stretch across the graph */
    double pad = 0.05 * (xhi - xlo) > 0.05 * xhi ? 0.05 * (xhi - xlo) : 0.05 * xhi;
    if (pad <= 0)
        pad = 1;
    double x0 = xlo - pad > 0 ? xlo - pad : 0, x1 = xhi + pad;
    fprintf (f, "set output 'latency_vs_throughput.png'\n"
                "set title \"sigload %s: latency against achieved throughput\\n%s\"\n"
                "unset label\n"
                "unset arrow\n"
                "unset logscale x\n"
                "set xtics autofreq\n"
                "set xlabel 'achieved throughput (requests/s)'\n"
                "# x range: the achieved rates of the %zu steps on the curves, padded by 5%% of their span\n"
                "# or of the highest, the more of the two\n"
                "set xrange [%.3f:%.3f]\n"
                "# y range: their latencies (p50 to p99.9; the floor's p50 and p99) from the least / 1.5 to the\n"
                "# most x 1.5 (%.3f, where the ticks stop), and above that %zu lines of notes (%.3f of the graph)\n"
                "set yrange [%.3f:%.3f]\n",
             where, what, on_curves, x0, x1, top, notes.kept + (notes.dropped > 0), room, lo, hi);
    s_write_ytics (f, lo, top);
    if (room > 0)
        fprintf (f, "set arrow from graph 0, first %.3f to graph 1, first %.3f nohead lc rgb 'gray70'\n", top, top);
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        if (r->saturated) {
            char why[512];
            s_gp_escape (why, sizeof why, r->saturation);
            fprintf (f, "# saturated: %s (%s), by %s: %s\n", r->step.name, why, judge_by_name (r->saturated_by),
                     curve[i] ? "a point, not joined: every step saturated" : "a marked point off the curve");
        }
        if (curve[i] && r->sender_behind)     /* circled on its curve */
            fprintf (f, "set label \"\" at first %.3f, first %.3f point pt 6 ps 3 lc rgb 'dark-orange'\n", r->achieved,
                     s_pct_us (r, 50));
    }
    s_write_notes (f, &notes, x0, x1);
    fprintf (f, "plot");
    int plotted = 0;
    static const struct { int column; const char *name; } pcts[] = { { 2, "p50" }, { 3, "p99" }, { 4, "p99.9" } };
    for (size_t s = 0; s < N_SERIES; s++)
        for (size_t p = 0; present[s] && p < sizeof pcts / sizeof pcts[0]; p++)
            fprintf (f, "%s \\\n     $%s using 1:%d with %s pt 7 title '%s %s%s'", plotted++ ? "," : "",
                     s_series[s].block, pcts[p].column, all_saturated ? "points ps 1.3" : "linespoints lw 2",
                     s_series[s].label, pcts[p].name, all_saturated ? " (saturated: points)" : "");
    for (size_t i = 0; i < n && floors == 1; i++) {
        const result_t *fl = &results[i];
        if (!curve[i] || !s_is_floor (fl))
            continue;
        double p50 = s_pct_us (fl, 50), p99 = s_pct_us (fl, 99);
        fprintf (f, "%s \\\n     %.3f with lines dt 2 lw 2 lc rgb 'gray30' title 'echo floor p50 (%.1f us, %s)', \\\n"
                    "     %.3f with lines dt 2 lw 1 lc rgb 'gray50' title 'echo floor p99 (%.1f us)'",
                 plotted++ ? "," : "", p50, p50, fl->step.name, p99, p99);
    }
    if (floors > 1)
        fprintf (f, "%s \\\n     $echo_floor using 1:2 with linespoints dt 2 lw 2 pt 1 lc rgb 'gray30' "
                    "title 'echo floor p50 (beside each step)', \\\n"
                    "     $echo_floor using 1:3 with linespoints dt 2 lw 1 pt 1 lc rgb 'gray50' title 'echo floor p99'",
                 plotted++ ? "," : "");
    fprintf (f, "\n");
    free (notes.lines);
    free (curve);
    free (floor_of);
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
                "# the legend below the graph: the notes inside it never meet it\n"
                "set key below horizontal\n"
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
