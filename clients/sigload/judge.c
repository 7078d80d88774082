/* sigload's verdicts on a step, made as it ends: whether it saturated (the sweep stops there with
 * --stop-when-saturated; the plots keep it off their scale), whether sigload's own sender fell
 * behind (the latencies then hold the generator's delay, not only the server's), and whose doing a
 * saturation was. The table, summary.csv and the plots say all three (report.c, plot.c). */
#define _GNU_SOURCE
#include "sigload.h"

#include <inttypes.h>
#include <string.h>

/* The sender fell behind when its own send lag (late while a connection had room) averaged at
 * least this much and at least this share of the mean latency: what it adds to every percentile
 * is then of the order of what it measures. Below, a sleeping thread's late wake-ups (tens of us
 * on a VM) would count. */
#define SENDER_LAG_MIN_US 50.0
#define SENDER_LAG_SHARE 0.25

double judge_own_lag_us (const result_t *r)
{
    return r->counts.lag_sent ? r->counts.own_lag_sum / (double) r->counts.lag_sent / 1e3 : 0;
}

double judge_held_lag_us (const result_t *r)
{
    return r->counts.lag_sent ? r->counts.held_lag_sum / (double) r->counts.lag_sent / 1e3 : 0;
}

const char *judge_by_name (saturated_by_t by)
{
    static const char *const names[] = { "-", "server", "sigload", "sigload+server" };
    return names[by];
}

void judge_format_us (double us, char *buf, size_t len)
{
    if (us >= 1e6)
        snprintf (buf, len, "%.2f s", us / 1e6);
    else if (us >= 1e4)
        snprintf (buf, len, "%.1f ms", us / 1e3);
    else
        snprintf (buf, len, "%.0f us", us);
}

/* A lag that is a material part of the latency: at least SENDER_LAG_MIN_US and SENDER_LAG_SHARE of
 * the mean (of the OK replies; none: the minimum alone). */
static bool s_material (double lag_us, double mean_us)
{
    return lag_us >= SENDER_LAG_MIN_US && lag_us >= SENDER_LAG_SHARE * mean_us;
}

/* Whether sigload's sender fell behind in R (open loop only: closed loop sends when replies come);
 * how, in WHY. */
static bool s_sender_behind (const options_t *opt, const result_t *r, char *why, size_t len)
{
    why[0] = 0;
    if (r->step.mode != MODE_OPEN)
        return false;
    double own = judge_own_lag_us (r), mean = histogram_mean (r->total) / 1e3;
    char lag[32], max[32], unsent[128] = "";
    judge_format_us (own, lag, sizeof lag);
    judge_format_us (sigload_us (r->counts.own_lag_max), max, sizeof max);
    if (r->counts.unsent_own)
        snprintf (unsent, sizeof unsent, "; %" PRIu64 " requests not sent within --timeout of their scheduled time",
                  r->counts.unsent_own);
    if (!r->counts.unsent_own && !s_material (own, mean))
        return false;
    char procs[64];
    if (opt->processes > 1)
        snprintf (procs, sizeof procs, "more --processes than %u", opt->processes);
    else
        snprintf (procs, sizeof procs, "--processes N");
    snprintf (why, len, "sigload fell behind: its own send lag averaged %s (max %s)%s, while its connections had "
                        "room; spread the load with %s, or give sigload cores of its own", lag, max, unsent, procs);
    return true;
}

/* Whether the server showed saturation of its own in R: a status that says so, or a sender held
 * back by full connections (requests outstanding up to --max-outstanding, or unread sockets). */
static bool s_server_signs (const result_t *r)
{
    const uint64_t *o = r->counts.outcomes;
    if (o[SIGSERVE__V1__STATUS__STATUS_OVERLOADED] || o[SIGSERVE__V1__STATUS__STATUS_DEADLINE_EXCEEDED]
        || o[SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE] || r->counts.unsent_held)
        return true;
    return s_material (judge_held_lag_us (r), histogram_mean (r->total) / 1e3);
}

/* Why R is past saturation, or "": it achieved less than 90% of its target rate, saw errors, or
 * its p99 exceeded --saturation-p99 (default: 10 x the first step's p99, at least 1000 us). */
static void s_saturation (const options_t *opt, result_t *r, double *first_p99_us, char *why, size_t len)
{
    double p99 = sigload_us (histogram_value_at_percentile (r->total, 99));
    if (*first_p99_us == 0)
        *first_p99_us = p99 > 0 ? p99 : 1;
    double limit = opt->saturation_p99_us > 0 ? opt->saturation_p99_us
                                              : (10 * *first_p99_us > 1000 ? 10 * *first_p99_us : 1000);
    r->p99_limit_us = limit;
    why[0] = 0;
    if (opt->mode == MODE_OPEN && !r->step.schedule && r->achieved < 0.9 * r->step.target)
        snprintf (why, len, "achieved %.0f req/s, less than 90%% of %.10g", r->achieved, r->step.target);
    else if (r->errors)
        snprintf (why, len, "%" PRIu64 " errors", r->errors);
    else if (p99 > limit)
        snprintf (why, len, "p99 %.1f us above %.1f us", p99, limit);
}

void judge_step (const options_t *opt, double *first_p99_us, result_t *r)
{
    s_saturation (opt, r, first_p99_us, r->saturation, sizeof r->saturation);
    r->saturated = r->saturation[0] != 0;
    r->sender_behind = s_sender_behind (opt, r, r->sender, sizeof r->sender);
    if (!r->saturated)
        r->saturated_by = SAT_NONE;
    else if (r->sender_behind)
        r->saturated_by = s_server_signs (r) ? SAT_BOTH : SAT_SIGLOAD;
    else
        r->saturated_by = SAT_SERVER;
}
