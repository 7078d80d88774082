/* sigload's results: the workers' histograms and counts merged per step, and everything printed or
 * written from them but the plots (plot.c): the markdown table on stdout, summary.csv,
 * <step>.hgrm, the error details, and the progress line on stderr. */
#define _GNU_SOURCE
#include "clock.h"
#include "sigclient.h"
#include "sigload.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

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
    r->counts.lag_sent += c->lag_sent;
    r->counts.own_lag_sum += c->own_lag_sum;
    r->counts.held_lag_sum += c->held_lag_sum;
    if (c->own_lag_max > r->counts.own_lag_max)
        r->counts.own_lag_max = c->own_lag_max;
    r->counts.unsent_own += c->unsent_own;
    r->counts.unsent_held += c->unsent_held;
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

/* The errors column stays the last (tools read it from the end), the others where they were. */
void report_table_header (FILE *out)
{
    fprintf (out, "| step | mode | target | achieved req/s | requests | p50 | p90 | p99 | p99.9 | max | "
                  "server mean | network mean | send lag mean | sigload lag mean | saturated | errors |\n");
    fprintf (out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
                  "--- | --- |\n");
}

/* The table's verdict: "no", "no (sigload fell behind)", or "yes (server)", "yes (sigload)",
 * "yes (sigload and server)". */
static const char *s_verdict (const result_t *r)
{
    static const char *const by[] = { "no", "yes (server)", "yes (sigload)", "yes (sigload and server)" };
    if (!r->saturated)
        return r->sender_behind ? "no (sigload fell behind)" : "no";
    return by[r->saturated_by];
}

void report_table_row (FILE *out, const result_t *r)
{
    char target[64], errors[512], server[32], lag[32], own[32];
    s_format_target (&r->step, target, sizeof target);
    s_format_errors (r, false, errors, sizeof errors);
    const histogram_t *h = r->total;
    uint64_t ok = r->counts.outcomes[OUT_OK];
    if (r->step.echo)
        snprintf (server, sizeof server, "-");
    else
        snprintf (server, sizeof server, "%.2f", histogram_mean (r->server) / 1e3);
    if (r->step.mode == MODE_CLOSED) {
        snprintf (lag, sizeof lag, "-");
        snprintf (own, sizeof own, "-");
    } else {
        snprintf (lag, sizeof lag, "%.2f", ok ? r->counts.lag_sum / (double) ok / 1e3 : 0.0);
        snprintf (own, sizeof own, "%.2f", judge_own_lag_us (r));
    }
    fprintf (out, "| %s | %s | %s | %.1f | %" PRIu64 " | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %.2f | %s | %s | %s | %"
             PRIu64 "%s%s%s |\n",
             r->step.name, r->step.mode == MODE_OPEN ? "open loop" : "closed loop", target, r->achieved,
             r->counts.requests, sigload_us (histogram_value_at_percentile (h, 50)),
             sigload_us (histogram_value_at_percentile (h, 90)), sigload_us (histogram_value_at_percentile (h, 99)),
             sigload_us (histogram_value_at_percentile (h, 99.9)), sigload_us (histogram_max (h)), server,
             histogram_mean (r->network) / 1e3, lag, own, s_verdict (r), r->errors,
             r->errors ? " (" : "", errors, r->errors ? ")" : "");
    fflush (out);
}

/* New columns go after the engine, so that those before it stay where tools read them. */
void report_csv_header (FILE *out)
{
    fputs ("step,kind,mode,target,achieved_rps,requests,ok,errors,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,"
           "server_mean_us,server_p50_us,server_p99_us,network_mean_us,network_p50_us,network_p99_us,"
           "send_lag_mean_us,send_lag_max_us,errors_by_status,engine,"
           "sigload_lag_mean_us,sigload_lag_max_us,held_lag_mean_us,unsent_sigload,unsent_held,"
           "saturated,saturated_by,sigload_behind,saturation,sigload_behind_why\n", out);
}

/* TEXT as one CSV field: its commas made semicolons, so that no quoting is needed (awk -F, reads it). */
static void s_csv_text (char *dst, size_t len, const char *text)
{
    size_t n = 0;
    for (; *text && n + 1 < len; text++)
        dst[n++] = *text == ',' ? ';' : (unsigned char) *text < 0x20 ? ' ' : *text;
    dst[n] = 0;
}

void report_csv_row (FILE *out, const result_t *r)
{
    char errors[512], saturation[256], sender[320];
    s_format_errors (r, true, errors, sizeof errors);
    s_csv_text (saturation, sizeof saturation, r->saturation);
    s_csv_text (sender, sizeof sender, r->sender);
    const histogram_t *h = r->total, *s = r->server, *n = r->network;
    uint64_t ok = r->counts.outcomes[OUT_OK];
    fprintf (out,
             "%s,%s,%s,%.10g,%.3f,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
             "%.3f,%.3f,%.3f,%.3f,%.3f,%s,%s,",
             r->step.name, r->step.echo ? "echo" : "sigserve", r->step.mode == MODE_OPEN ? "open" : "closed",
             r->step.target, r->achieved, r->counts.requests, ok, r->errors,
             sigload_us (histogram_value_at_percentile (h, 50)), sigload_us (histogram_value_at_percentile (h, 90)),
             sigload_us (histogram_value_at_percentile (h, 99)), sigload_us (histogram_value_at_percentile (h, 99.9)),
             sigload_us (histogram_max (h)), histogram_mean (h) / 1e3, histogram_mean (s) / 1e3,
             sigload_us (histogram_value_at_percentile (s, 50)), sigload_us (histogram_value_at_percentile (s, 99)),
             histogram_mean (n) / 1e3, sigload_us (histogram_value_at_percentile (n, 50)),
             sigload_us (histogram_value_at_percentile (n, 99)), ok ? r->counts.lag_sum / (double) ok / 1e3 : 0.0,
             sigload_us (r->counts.lag_max), errors, sigclient_engine_name (r->step.engine));
    fprintf (out, "%.3f,%.3f,%.3f,%" PRIu64 ",%" PRIu64 ",%d,%s,%d,%s,%s\n", judge_own_lag_us (r),
             sigload_us (r->counts.own_lag_max), judge_held_lag_us (r), r->counts.unsent_own, r->counts.unsent_held,
             r->saturated, judge_by_name (r->saturated_by), r->sender_behind, saturation, sender);
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

void report_verdicts (FILE *out, const result_t *results, size_t n)
{
    /* an echo step's server is the echo server (a --floor step, or --echo) */
    static const char *const by[] = { "", "by the %s", "by sigload, not the %s",
                                      "by sigload and the %s (its statuses or full connections)" };
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        char who[96];
        snprintf (who, sizeof who, by[r->saturated_by], r->step.echo ? "echo server" : "server");
        if (r->saturated)
            fprintf (out, "%s: saturated %s: %s%s%s\n", r->step.name, who, r->saturation,
                     r->sender_behind ? "; " : "", r->sender);
        else if (r->sender_behind)
            fprintf (out, "%s: not saturated, but %s (its latencies hold that lag)\n", r->step.name, r->sender);
    }
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
