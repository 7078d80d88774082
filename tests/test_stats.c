/* base/stats.h: counts per model slot and status, slots named once and reused, the Prometheus
 * histograms (each value in exactly the bucket its bound says, cumulative, with the exact sum),
 * percentiles from the fine histogram between two snapshots, the batch-rows histogram, the reload
 * and send-failure counters, and the process figures for the process_* metrics. */
#include "base/stats.h"
#include "testutil.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

START_TEST (requests_are_counted_per_slot_and_status)
{
    stats_t *s = stats_new ();
    ck_assert_ptr_nonnull (s);
    int a = stats_slot (s, "tick_mlp"), b = stats_slot (s, "odd");
    ck_assert_int_eq (a, 1);        /* slot 0 is "_unknown" */
    ck_assert_int_eq (b, 2);
    for (int i = 0; i < 3; i++)
        stats_count (s, a, SIG_OK);
    stats_count (s, a, SIG_BAD_SHAPE);
    stats_count (s, b, SIG_OK);
    stats_count (s, b, SIG_OK);
    stats_count (s, STATS_UNKNOWN, SIG_UNKNOWN_MODEL);
    stats_count (s, a, (sig_status_t) STATS_STATUS_COUNT);      /* past the statuses: not counted */
    for (int st = 0; st < STATS_STATUS_COUNT; st++) {
        ck_assert_uint_eq (stats_requests (s, (size_t) a, st), st == SIG_OK ? 3 : st == SIG_BAD_SHAPE ? 1 : 0);
        ck_assert_uint_eq (stats_requests (s, (size_t) b, st), st == SIG_OK ? 2 : 0);
        ck_assert_uint_eq (stats_requests (s, STATS_UNKNOWN, st), st == SIG_UNKNOWN_MODEL ? 1 : 0);
    }
    ck_assert_uint_eq (stats_requests (s, (size_t) a, (sig_status_t) STATS_STATUS_COUNT), 0);
    stats_destroy (&s);
    ck_assert_ptr_null (s);
    stats_destroy (&s);
}
END_TEST

START_TEST (a_name_keeps_its_slot_until_the_slots_run_out)
{
    stats_t *s = stats_new ();
    ck_assert_uint_eq (stats_slot_count (s), 1);
    ck_assert_str_eq (stats_slot_name (s, STATS_UNKNOWN), "_unknown");
    ck_assert_int_eq (stats_slot (s, "_unknown"), STATS_UNKNOWN);
    int a = stats_slot (s, "a");
    stats_count (s, a, SIG_OK);
    /* Asked again (a reload, a model removed and added back): the same slot, counts kept. */
    ck_assert_int_eq (stats_slot (s, "a"), a);
    ck_assert_uint_eq (stats_requests (s, (size_t) a, SIG_OK), 1);
    ck_assert_uint_eq (stats_slot_count (s), 2);
    char name[32];
    for (int i = 2; i < STATS_SLOTS; i++) {
        snprintf (name, sizeof name, "model-%d", i);
        ck_assert_int_eq (stats_slot (s, name), i);
    }
    ck_assert_uint_eq (stats_slot_count (s), STATS_SLOTS);
    ck_assert_int_eq (stats_slot (s, "one-too-many"), -1);
    ck_assert_uint_eq (stats_slot_count (s), STATS_SLOTS);
    ck_assert_int_eq (stats_slot (s, "model-100"), 100);   /* the names already in still have theirs */
    ck_assert_str_eq (stats_slot_name (s, 100), "model-100");
    ck_assert_int_eq (stats_slot (s, "a"), a);
    stats_destroy (&s);
}
END_TEST

START_TEST (each_duration_falls_in_the_bucket_of_its_bound)
{
    /* The bounds are "less than or equal" (Prometheus le): a value on a bound is in that bound's
     * bucket, one nanosecond more is in the next. */
    stats_t *s = stats_new ();
    int m = stats_slot (s, "m");
    static const uint64_t bound_ns[STATS_LE_COUNT] = {
        1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000,
        1000000, 2000000, 5000000, 10000000, 20000000, 50000000, 100000000,
    };
    for (int b = 0; b < STATS_LE_COUNT; b++)
        ck_assert_msg ((uint64_t) (stats_le_seconds[b] * 1e9 + 0.5) == bound_ns[b], "bound %d is %g s", b,
                       stats_le_seconds[b]);
    for (int b = 0; b < STATS_LE_COUNT; b++) {
        for (int over = 0; over < 2; over++) {
            const uint64_t ns = bound_ns[b] + (uint64_t) over;
            uint64_t before[STATS_LE_COUNT + 1], after[STATS_LE_COUNT + 1], sum0, sum1;
            stats_histogram (s, (size_t) m, STAGE_SERVER, before, &sum0);
            stats_observe (s, m, STAGE_SERVER, ns);
            stats_histogram (s, (size_t) m, STAGE_SERVER, after, &sum1);
            const int want = b + over;      /* the bucket it must land in (STATS_LE_COUNT: +Inf) */
            for (int k = 0; k <= STATS_LE_COUNT; k++)
                ck_assert_msg (after[k] - before[k] == (k >= want ? 1u : 0u), "%llu ns: cumulative bucket %d went "
                               "from %llu to %llu", (unsigned long long) ns, k, (unsigned long long) before[k],
                               (unsigned long long) after[k]);
            ck_assert_uint_eq (sum1 - sum0, ns);
        }
    }
    /* Zero, and far past the last bound. */
    stats_observe (s, m, STAGE_SERVER, 0);
    stats_observe (s, m, STAGE_SERVER, 5000000000ull);
    uint64_t c[STATS_LE_COUNT + 1], sum;
    stats_histogram (s, (size_t) m, STAGE_SERVER, c, &sum);
    ck_assert_uint_eq (c[0], 2);                            /* 1000 ns itself, and 0 */
    ck_assert_uint_eq (c[STATS_LE_COUNT], 2 * STATS_LE_COUNT + 2);     /* +Inf: every value */
    for (int k = 1; k <= STATS_LE_COUNT; k++)
        ck_assert_uint_ge (c[k], c[k - 1]);
    uint64_t want_sum = 5000000000ull;
    for (int b = 0; b < STATS_LE_COUNT; b++)
        want_sum += 2 * bound_ns[b] + 1;
    ck_assert_uint_eq (sum, want_sum);
    /* Other stages, other slots: untouched. */
    stats_histogram (s, (size_t) m, STAGE_QUEUE, c, &sum);
    ck_assert_uint_eq (c[STATS_LE_COUNT], 0);
    ck_assert_uint_eq (sum, 0);
    stats_histogram (s, STATS_UNKNOWN, STAGE_SERVER, c, &sum);
    ck_assert_uint_eq (c[STATS_LE_COUNT], 0);
    stats_destroy (&s);
}
END_TEST

START_TEST (batch_rows_fall_in_the_bucket_of_their_bound)
{
    stats_t *s = stats_new ();
    int m = stats_slot (s, "m");
    const uint32_t rows[] = { 1, 2, 3, 4, 5, 64, 65, 4096, 4097, 100000 };
    const int bucket[] = { 0, 1, 2, 2, 3, 6, 7, 12, STATS_ROWS_LE_COUNT, STATS_ROWS_LE_COUNT };
    for (int b = 0; b < STATS_ROWS_LE_COUNT; b++)
        ck_assert_uint_eq (stats_le_rows[b], 1u << b);
    uint64_t sum_want = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint64_t before[STATS_ROWS_LE_COUNT + 1], after[STATS_ROWS_LE_COUNT + 1], s0, s1;
        stats_batch_histogram (s, (size_t) m, before, &s0);
        stats_observe_batch (s, m, rows[i]);
        stats_batch_histogram (s, (size_t) m, after, &s1);
        for (int k = 0; k <= STATS_ROWS_LE_COUNT; k++)
            ck_assert_msg (after[k] - before[k] == (k >= bucket[i] ? 1u : 0u), "%u rows: cumulative bucket %d +%llu",
                           rows[i], k, (unsigned long long) (after[k] - before[k]));
        ck_assert_uint_eq (s1 - s0, rows[i]);
        sum_want += rows[i];
    }
    uint64_t c[STATS_ROWS_LE_COUNT + 1], sum;
    stats_batch_histogram (s, (size_t) m, c, &sum);
    ck_assert_uint_eq (c[STATS_ROWS_LE_COUNT], 10);
    ck_assert_uint_eq (sum, sum_want);
    stats_destroy (&s);
}
END_TEST

/* ---- percentiles ---- */

/* The fine buckets are 8 per power of two: a quantile is the upper edge of the bucket holding the
 * value, above it by at most an eighth (values under 256 ns share one bucket, edge 256). */
static void s_assert_edge_of (uint64_t got, uint64_t value)
{
    if (value < 256)
        ck_assert_uint_eq (got, 256);
    else
        ck_assert_msg (got > value && got * 8 <= value * 9, "quantile %llu for a value of %llu ns",
                       (unsigned long long) got, (unsigned long long) value);
}

START_TEST (a_quantile_is_the_edge_of_the_bucket_holding_its_rank)
{
    stats_t *s = stats_new ();
    int m = stats_slot (s, "m");
    stats_snapshot_t none, one;
    stats_snapshot (s, (size_t) m, STAGE_COMPUTE, &none);
    uint64_t count = 99;
    ck_assert_uint_eq (stats_quantile_ns (&none, NULL, 0.5, &count), 0);     /* nothing observed */
    ck_assert_uint_eq (count, 0);
    const uint64_t values[] = { 0, 255, 256, 257, 1000, 4095, 4096, 123456, 999999937 };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        stats_snapshot (s, (size_t) m, STAGE_COMPUTE, &none);
        stats_observe (s, m, STAGE_COMPUTE, values[i]);
        stats_snapshot (s, (size_t) m, STAGE_COMPUTE, &one);
        for (double q = 0; q <= 1.0; q += 0.25) {
            s_assert_edge_of (stats_quantile_ns (&one, &none, q, &count), values[i]);
            ck_assert_uint_eq (count, 1);
        }
    }
    stats_destroy (&s);
}
END_TEST

START_TEST (quantiles_between_two_snapshots_see_only_what_happened_between)
{
    stats_t *s = stats_new ();
    int m = stats_slot (s, "m");
    for (int i = 0; i < 1000; i++)
        stats_observe (s, m, STAGE_QUEUE, 10000);           /* 10 us, before */
    stats_snapshot_t before, now;
    stats_snapshot (s, (size_t) m, STAGE_QUEUE, &before);
    ck_assert_uint_eq (before.count, 1000);
    for (int i = 0; i < 990; i++)
        stats_observe (s, m, STAGE_QUEUE, 1000000);         /* 1 ms, between */
    for (int i = 0; i < 10; i++)
        stats_observe (s, m, STAGE_QUEUE, 50000000);        /* 50 ms: the slowest 1% between */
    stats_snapshot (s, (size_t) m, STAGE_QUEUE, &now);
    ck_assert_uint_eq (now.count, 2000);
    uint64_t count = 0;
    s_assert_edge_of (stats_quantile_ns (&now, &before, 0.5, &count), 1000000);
    ck_assert_uint_eq (count, 1000);
    s_assert_edge_of (stats_quantile_ns (&now, &before, 0.99, &count), 1000000);    /* rank 990 */
    s_assert_edge_of (stats_quantile_ns (&now, &before, 0.991, &count), 50000000);  /* rank 991 */
    s_assert_edge_of (stats_quantile_ns (&now, &before, 1.0, &count), 50000000);
    s_assert_edge_of (stats_quantile_ns (&now, &before, 0.0, &count), 1000000);     /* the smallest between */
    /* Over everything (no BEFORE): half of it was 10 us. */
    s_assert_edge_of (stats_quantile_ns (&now, NULL, 0.5, &count), 10000);          /* rank 1000 */
    ck_assert_uint_eq (count, 2000);
    s_assert_edge_of (stats_quantile_ns (&now, NULL, 0.5005, &count), 1000000);     /* rank 1001 */
    /* Nothing between two equal snapshots. */
    ck_assert_uint_eq (stats_quantile_ns (&now, &now, 0.5, &count), 0);
    ck_assert_uint_eq (count, 0);
    /* The fine histogram is per stage: compute saw none of it. */
    stats_snapshot (s, (size_t) m, STAGE_COMPUTE, &now);
    ck_assert_uint_eq (now.count, 0);
    stats_destroy (&s);
}
END_TEST

/* ---- the other counters, and the process ---- */

START_TEST (reloads_and_send_failures_are_counted)
{
    stats_t *s = stats_new ();
    ck_assert_uint_eq (stats_reloads (s, true), 0);
    ck_assert_uint_eq (stats_reloads (s, false), 0);
    ck_assert_uint_eq (stats_send_failures (s), 0);
    stats_count_reload (s, true);
    stats_count_reload (s, true);
    stats_count_reload (s, false);
    for (int i = 0; i < 5; i++)
        stats_count_send_failure (s);
    ck_assert_uint_eq (stats_reloads (s, true), 2);
    ck_assert_uint_eq (stats_reloads (s, false), 1);
    ck_assert_uint_eq (stats_send_failures (s), 5);
    stats_destroy (&s);
}
END_TEST

/* Fronts count the same model at once, each in its shard (stats_writer): nothing is lost, and every
 * reader sums the shards (requests, histograms, server counts, inline runs, sheds). A plain load and
 * store on one shared counter loses increments when two fronts interleave. */
#define FRONT_COUNTS 200000

typedef struct {
    stats_t *stats;
    unsigned writer;
    int slot;
} front_arg_t;

static void *s_front (void *arg)
{
    const front_arg_t *a = arg;
    stats_writer (a->writer);
    for (int i = 0; i < FRONT_COUNTS; i++) {
        stats_count (a->stats, a->slot, SIG_OK);
        stats_observe (a->stats, a->slot, STAGE_SERVER, 3000);
        stats_count_server (a->stats, STATS_RECEIVED);
        stats_count_inline (a->stats, a->slot);
        stats_count_shed (a->stats, a->slot, SHED_DEADLINE);
    }
    return NULL;
}

START_TEST (fronts_count_one_model_at_once_and_lose_nothing)
{
    stats_t *s = stats_new ();
    const int slot = stats_slot (s, "m");
    front_arg_t args[4];
    pthread_t t[4];
    for (unsigned k = 0; k < 4; k++) {
        args[k] = (front_arg_t) { s, 1 + k, slot };
        ck_assert_int_eq (pthread_create (&t[k], NULL, s_front, &args[k]), 0);
    }
    for (int k = 0; k < 4; k++)
        pthread_join (t[k], NULL);
    stats_count_server (s, STATS_RECEIVED);        /* this thread: shard 0 */
    ck_assert_uint_eq (stats_requests (s, slot, SIG_OK), 4 * FRONT_COUNTS);
    ck_assert_uint_eq (stats_server (s, STATS_RECEIVED), 4 * FRONT_COUNTS + 1);
    ck_assert_uint_eq (stats_inline (s, slot), 4 * FRONT_COUNTS);
    ck_assert_uint_eq (stats_sheds (s, slot, SHED_DEADLINE), 4 * FRONT_COUNTS);
    uint64_t cumulative[STATS_LE_COUNT + 1], sum = 0;
    stats_histogram (s, slot, STAGE_SERVER, cumulative, &sum);
    ck_assert_uint_eq (cumulative[STATS_LE_COUNT], 4 * FRONT_COUNTS);
    ck_assert_uint_eq (cumulative[1], 0);                       /* 3 us: over the 2 us bound */
    ck_assert_uint_eq (cumulative[2], 4 * FRONT_COUNTS);        /* within 5 us */
    ck_assert_uint_eq (sum, 4ull * FRONT_COUNTS * 3000);
    stats_snapshot_t snap;
    stats_snapshot (s, slot, STAGE_SERVER, &snap);
    ck_assert_uint_eq (snap.count, 4 * FRONT_COUNTS);
    stats_destroy (&s);
}
END_TEST

START_TEST (the_process_figures_are_the_kernels)
{
    stats_process_t p;
    ck_assert_int_eq (stats_process (&p), 0);
    ck_assert_uint_gt (p.resident_bytes, 1 << 20);
    ck_assert_uint_ge (p.virtual_bytes, p.resident_bytes);
    ck_assert_uint_ge (p.open_fds, 3);              /* stdin, stdout, stderr at least */
    ck_assert_uint_ge (p.threads, 1);
    ck_assert (p.cpu_seconds >= 0);
    ck_assert (p.start_time_seconds > 1.5e9);       /* an epoch time, not seconds since boot */
    /* One more open file is one more counted. */
    int fd = dup (1);
    stats_process_t q;
    ck_assert_int_eq (stats_process (&q), 0);
    ck_assert_uint_eq (q.open_fds, p.open_fds + 1);
    close (fd);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("stats");
    TCase *tc = tcase_create ("counters_and_histograms");
    tcase_add_test (tc, requests_are_counted_per_slot_and_status);
    tcase_add_test (tc, a_name_keeps_its_slot_until_the_slots_run_out);
    tcase_add_test (tc, each_duration_falls_in_the_bucket_of_its_bound);
    tcase_add_test (tc, batch_rows_fall_in_the_bucket_of_their_bound);
    tcase_add_test (tc, reloads_and_send_failures_are_counted);
    tcase_add_test (tc, the_process_figures_are_the_kernels);
    tcase_add_test (tc, fronts_count_one_model_at_once_and_lose_nothing);
    suite_add_tcase (s, tc);
    TCase *tq = tcase_create ("percentiles");
    tcase_add_test (tq, a_quantile_is_the_edge_of_the_bucket_holding_its_rank);
    tcase_add_test (tq, quantiles_between_two_snapshots_see_only_what_happened_between);
    suite_add_tcase (s, tq);
    return tu_run_suite (s);
}
