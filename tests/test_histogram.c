/* The latency histogram (clients/histogram.h): percentiles against a sorted reference on random
 * data over the whole range, within 3 significant digits; bucket boundaries; merging; min, max,
 * mean and standard deviation; clamping of out-of-range values; and the .hgrm text, byte for
 * byte as HdrHistogram's outputPercentileDistribution writes it. */
#define _GNU_SOURCE
#include "histogram.h"
#include "rng.h"
#include "testutil.h"

#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t s_seed, s_seed0;   /* common/rng.h's state; the seed is printed */

static uint64_t s_next (void) { return rng_next (&s_seed); }
/* Uniform in (0, 1]. */
static double s_unit (void) { return rng_unit_open (&s_seed); }

/* Log-uniform over [1 ns, 60 s], with some exact small values mixed in. */
static int64_t s_random_value (void)
{
    if (s_next () % 8 == 0)
        return (int64_t) (s_next () % 3000);
    int64_t v = (int64_t) exp (s_unit () * log ((double) HISTOGRAM_HIGHEST_NS));
    return v > HISTOGRAM_HIGHEST_NS ? HISTOGRAM_HIGHEST_NS : v;
}

static int s_compare (const void *a, const void *b)
{
    int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
    return (x > y) - (x < y);
}

/* HdrHistogram's nearest rank: the smallest rank r with r >= p/100 * n, p taken one ulp low. */
static uint64_t s_rank (double p, uint64_t n)
{
    double requested = nextafter (p, -INFINITY);
    if (requested < 0)
        requested = 0;
    uint64_t rank = (uint64_t) ceil (requested / 100.0 * (double) n);
    return rank < 1 ? 1 : rank;
}

static void s_expect_percentile (const histogram_t *h, const int64_t *sorted, size_t n, double p)
{
    int64_t ref = sorted[s_rank (p, n) - 1];
    int64_t got = histogram_value_at_percentile (h, p);
    ck_assert_msg (got >= ref && got <= histogram_highest_equivalent (ref),
                   "p%.6g: %" PRId64 " ns, reference %" PRId64 " ns (its bucket ends at %" PRId64 "; seed %" PRIu64 ")", p,
                   got, ref, histogram_highest_equivalent (ref), s_seed0);
    /* 3 significant digits: off by less than a thousandth (exact below 2048 ns) */
    if (ref < 2048)
        ck_assert_int_eq (got, ref);
    else
        ck_assert_msg ((double) (got - ref) < (double) ref / 1000.0, "p%.6g: %" PRId64 " vs %" PRId64, p, got, ref);
}

START_TEST (percentiles_match_sorted_reference)
{
    enum { N = 200000 };
    int64_t *v = malloc (N * sizeof *v);
    histogram_t *h = histogram_new ();
    ck_assert (v && h);
    for (size_t i = 0; i < N; i++) {
        v[i] = s_random_value ();
        histogram_record (h, v[i]);
    }
    qsort (v, N, sizeof *v, s_compare);
    ck_assert_uint_eq (histogram_count (h), N);
    ck_assert_uint_eq (histogram_clamped (h), 0);
    ck_assert_int_eq (histogram_min (h), v[0]);
    ck_assert_int_eq (histogram_max (h), v[N - 1]);
    static const double fixed[] = { 0, 0.001, 0.1, 1, 5, 10, 25, 33.3, 50, 66.6, 75, 90, 95, 99, 99.5, 99.9, 99.99,
                                    99.999, 99.9999, 100 };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        s_expect_percentile (h, v, N, fixed[i]);
    for (int i = 0; i < 2000; i++)
        s_expect_percentile (h, v, N, 100.0 * s_unit ());
    ck_assert_int_eq (histogram_value_at_percentile (h, 0), v[0]);
    ck_assert_int_eq (histogram_value_at_percentile (h, 100), v[N - 1]);
    ck_assert_int_eq (histogram_value_at_percentile (h, -5), v[0]);      /* clamped to [0, 100] */
    ck_assert_int_eq (histogram_value_at_percentile (h, 250), v[N - 1]);
    histogram_destroy (&h);
    ck_assert_ptr_null (h);
    histogram_destroy (&h);   /* twice is fine */
    free (v);
}
END_TEST

START_TEST (small_sets_are_exact_nearest_rank)
{
    /* Below 2048 ns every value is its own bucket: percentiles are the nearest-rank samples. */
    histogram_t *h = histogram_new ();
    int64_t v[1000];
    for (int i = 0; i < 1000; i++) {
        v[i] = (int64_t) (s_next () % 2048);
        histogram_record (h, v[i]);
    }
    qsort (v, 1000, sizeof *v, s_compare);
    ck_assert_int_eq (histogram_value_at_percentile (h, 50), v[499]);
    ck_assert_int_eq (histogram_value_at_percentile (h, 99), v[989]);
    ck_assert_int_eq (histogram_value_at_percentile (h, 99.9), v[998]);   /* rank 999, not 1000 */
    ck_assert_int_eq (histogram_value_at_percentile (h, 100), v[999]);
    histogram_destroy (&h);
}
END_TEST

START_TEST (bucket_boundaries)
{
    for (int64_t x = 0; x < 5000; x++) {
        int64_t lo = histogram_lowest_equivalent (x), hi = histogram_highest_equivalent (x);
        ck_assert (lo <= x && x <= hi);
        if (x < 2048)
            ck_assert (lo == x && hi == x);
    }
    for (int i = 0; i < 100000; i++) {
        int64_t x = s_random_value ();
        int64_t lo = histogram_lowest_equivalent (x), hi = histogram_highest_equivalent (x);
        ck_assert (lo <= x && x <= hi);
        if (x >= 2048)
            ck_assert_msg ((double) (hi - lo + 1) <= (double) lo / 1024.0, "bucket [%" PRId64 ", %" PRId64 "]", lo, hi);
        /* buckets tile the range: the next value starts the next bucket */
        ck_assert_int_eq (histogram_lowest_equivalent (hi + 1), hi + 1);
        ck_assert_int_eq (histogram_lowest_equivalent (lo), lo);
    }
    int64_t top = HISTOGRAM_HIGHEST_NS;
    ck_assert (histogram_lowest_equivalent (top) <= top && histogram_highest_equivalent (top) >= top);
}
END_TEST

START_TEST (merge_equals_one_histogram)
{
    enum { N = 100000, PARTS = 4 };
    histogram_t *all = histogram_new (), *parts[PARTS], *merged = histogram_new ();
    for (int p = 0; p < PARTS; p++)
        parts[p] = histogram_new ();
    for (int i = 0; i < N; i++) {
        int64_t x = s_random_value ();
        histogram_record (all, x);
        histogram_record (parts[i % PARTS], x);
    }
    /* merging into a histogram that already holds data, and merging an empty one, both work */
    histogram_merge (merged, parts[0]);
    histogram_t *empty = histogram_new ();
    histogram_merge (merged, empty);
    for (int p = 1; p < PARTS; p++)
        histogram_merge (merged, parts[p]);
    ck_assert_uint_eq (histogram_count (merged), N);
    ck_assert_int_eq (histogram_min (merged), histogram_min (all));
    ck_assert_int_eq (histogram_max (merged), histogram_max (all));
    ck_assert_double_eq_tol (histogram_mean (merged), histogram_mean (all), histogram_mean (all) * 1e-12);
    ck_assert_double_eq_tol (histogram_stddev (merged), histogram_stddev (all), histogram_stddev (all) * 1e-9);
    for (double p = 0; p <= 100; p += 0.25)
        ck_assert_int_eq (histogram_value_at_percentile (merged, p), histogram_value_at_percentile (all, p));
    ck_assert_int_eq (histogram_value_at_percentile (merged, 99.99), histogram_value_at_percentile (all, 99.99));
    /* reset: empty again, and reusable */
    histogram_reset (merged);
    ck_assert_uint_eq (histogram_count (merged), 0);
    ck_assert_int_eq (histogram_max (merged), 0);
    histogram_record (merged, 1234);
    ck_assert_int_eq (histogram_min (merged), 1234);
    ck_assert_int_eq (histogram_value_at_percentile (merged, 50), 1234);
    for (int p = 0; p < PARTS; p++)
        histogram_destroy (&parts[p]);
    histogram_destroy (&all);
    histogram_destroy (&merged);
    histogram_destroy (&empty);
}
END_TEST

START_TEST (min_max_mean_stddev_exact)
{
    enum { N = 50000 };
    histogram_t *h = histogram_new ();
    double *v = malloc (N * sizeof *v);
    double sum = 0;
    int64_t lo = INT64_MAX, hi = 0;
    for (int i = 0; i < N; i++) {
        int64_t x = 1000 + (int64_t) (s_next () % 1000000);
        v[i] = (double) x;
        sum += v[i];
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
        histogram_record (h, x);
    }
    double mean = sum / N, sq = 0;
    for (int i = 0; i < N; i++)
        sq += (v[i] - mean) * (v[i] - mean);
    double sd = sqrt (sq / N);   /* population, as HdrHistogram prints it */
    ck_assert_int_eq (histogram_min (h), lo);
    ck_assert_int_eq (histogram_max (h), hi);
    ck_assert_double_eq_tol (histogram_mean (h), mean, mean * 1e-12);
    ck_assert_double_eq_tol (histogram_stddev (h), sd, sd * 1e-8);
    free (v);
    histogram_destroy (&h);

    /* empty: zeros everywhere */
    h = histogram_new ();
    ck_assert_uint_eq (histogram_count (h), 0);
    ck_assert_int_eq (histogram_min (h), 0);
    ck_assert_int_eq (histogram_max (h), 0);
    ck_assert_double_eq (histogram_mean (h), 0);
    ck_assert_double_eq (histogram_stddev (h), 0);
    ck_assert_int_eq (histogram_value_at_percentile (h, 50), 0);
    histogram_destroy (&h);
}
END_TEST

START_TEST (out_of_range_values_are_clamped_and_counted)
{
    histogram_t *h = histogram_new ();
    histogram_record (h, -5);
    histogram_record (h, 0);
    histogram_record (h, 120);
    histogram_record (h, HISTOGRAM_HIGHEST_NS);          /* the top itself is in range */
    histogram_record (h, HISTOGRAM_HIGHEST_NS + 1);
    histogram_record (h, 3600LL * 1000000000LL);
    histogram_record (h, INT64_MAX);
    ck_assert_uint_eq (histogram_count (h), 7);
    ck_assert_uint_eq (histogram_clamped (h), 4);
    ck_assert_int_eq (histogram_min (h), 0);
    ck_assert_int_eq (histogram_max (h), HISTOGRAM_HIGHEST_NS);
    ck_assert_int_eq (histogram_value_at_percentile (h, 0), 0);
    ck_assert_int_eq (histogram_value_at_percentile (h, 100), HISTOGRAM_HIGHEST_NS);
    /* sorted: 0, 0, 120, then 60 s four times */
    ck_assert_int_eq (histogram_value_at_percentile (h, 25), 0);     /* rank 2 */
    ck_assert_int_eq (histogram_value_at_percentile (h, 40), 120);   /* rank 3 */
    ck_assert_int_eq (histogram_value_at_percentile (h, 50), HISTOGRAM_HIGHEST_NS);   /* rank 4 */
    ck_assert (isfinite (histogram_mean (h)) && isfinite (histogram_stddev (h)));
    histogram_destroy (&h);
}
END_TEST

/* ---- the .hgrm text ---- */

static char *s_hgrm_text (const histogram_t *h, double unit)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&text, &len);
    ck_assert_ptr_nonnull (f);
    ck_assert_int_eq (histogram_write_hgrm (h, f, unit), 0);
    fclose (f);
    return text;
}

START_TEST (hgrm_exact_text)
{
    /* Worked by hand through HdrHistogram's PercentileIterator (5 ticks per half distance): the
     * reporting levels 0, 10, 20, ... 50, 55, ... 75, 77.5, each at the first bucket whose
     * cumulative count reaches it; the last bucket reports once, then the 100% row without its
     * 1/(1-Percentile). 3000 ns shares a 2-ns bucket with 3001, reported as 3001; 4000 ns's
     * bucket would report 4001 but nothing above the recorded max is reported. */
    histogram_t *h = histogram_new ();
    histogram_record (h, 1000);
    histogram_record (h, 2000);
    histogram_record (h, 3000);
    histogram_record (h, 4000);
    static const char expected[] =
        "       Value     Percentile TotalCount 1/(1-Percentile)\n"
        "\n"
        "       1.000 0.000000000000          1           1.00\n"
        "       1.000 0.100000000000          1           1.11\n"
        "       1.000 0.200000000000          1           1.25\n"
        "       2.000 0.300000000000          2           1.43\n"
        "       2.000 0.400000000000          2           1.67\n"
        "       2.000 0.500000000000          2           2.00\n"
        "       3.001 0.550000000000          3           2.22\n"
        "       3.001 0.600000000000          3           2.50\n"
        "       3.001 0.650000000000          3           2.86\n"
        "       3.001 0.700000000000          3           3.33\n"
        "       3.001 0.750000000000          3           4.00\n"
        "       4.000 0.775000000000          4           4.44\n"
        "       4.000 1.000000000000          4\n"
        "#[Mean    =        2.500, StdDeviation   =        1.118]\n"
        "#[Max     =        4.000, Total count    =            4]\n"
        "#[Buckets =           26, SubBuckets     =         2048]\n";
    char *text = s_hgrm_text (h, 1000.0);
    ck_assert_str_eq (text, expected);
    free (text);
    /* unit ratio 1: nanoseconds */
    text = s_hgrm_text (h, 1.0);
    ck_assert_ptr_nonnull (strstr (text, "\n    1000.000 0.000000000000          1           1.00\n"));
    ck_assert_ptr_nonnull (strstr (text, "#[Max     =     4000.000, Total count    =            4]\n"));
    free (text);
    histogram_destroy (&h);

    /* empty: the header and the footer */
    h = histogram_new ();
    text = s_hgrm_text (h, 1000.0);
    ck_assert_str_eq (text, "       Value     Percentile TotalCount 1/(1-Percentile)\n"
                            "\n"
                            "#[Mean    =        0.000, StdDeviation   =        0.000]\n"
                            "#[Max     =        0.000, Total count    =            0]\n"
                            "#[Buckets =           26, SubBuckets     =         2048]\n");
    free (text);
    histogram_destroy (&h);
}
END_TEST

START_TEST (hgrm_parses_back_on_random_data)
{
    enum { N = 100000 };
    histogram_t *h = histogram_new ();
    for (int i = 0; i < N; i++)
        histogram_record (h, s_random_value () / 1000);   /* up to 60 ms */
    char *text = s_hgrm_text (h, 1000.0);
    char *save = NULL, *line = strtok_r (text, "\n", &save);   /* strtok_r skips the blank line */
    ck_assert_str_eq (line, "       Value     Percentile TotalCount 1/(1-Percentile)");
    double prev_value = -1, prev_p = -1;
    long long prev_count = 0, rows = 0;
    bool last_seen = false;
    double footer_mean = -1, footer_sd = -1, footer_max = -1;
    long long footer_count = -1;
    int buckets = 0, sub_buckets = 0;
    while ((line = strtok_r (NULL, "\n", &save))) {
        if (line[0] == '#') {
            if (sscanf (line, "#[Mean    = %lf, StdDeviation   = %lf]", &footer_mean, &footer_sd) == 2)
                continue;
            if (sscanf (line, "#[Max     = %lf, Total count    = %lld]", &footer_max, &footer_count) == 2)
                continue;
            ck_assert_int_eq (sscanf (line, "#[Buckets = %d, SubBuckets     = %d]", &buckets, &sub_buckets), 2);
            continue;
        }
        ck_assert_msg (!last_seen, "a row after the 100%% row: %s", line);
        double value, p, inverse;
        long long count;
        int fields = sscanf (line, "%lf %lf %lld %lf", &value, &p, &count, &inverse);
        if (fields == 3) {
            ck_assert_double_eq (p, 1.0);
            ck_assert_int_eq (strlen (line), 12 + 1 + 14 + 1 + 10);
            last_seen = true;
        } else {
            ck_assert_int_eq (fields, 4);
            ck_assert_int_eq (strlen (line), 12 + 1 + 14 + 1 + 10 + 1 + 14);
            ck_assert_double_eq_tol (inverse, 1.0 / (1.0 - p), 0.006);
            ck_assert (p > prev_p);
        }
        ck_assert (value >= prev_value && count >= prev_count);
        ck_assert_msg ((double) count >= p * N - 1e-6, "row %s: %lld samples do not reach %g", line, count, p);
        prev_value = value;
        prev_p = p;
        prev_count = count;
        rows++;
    }
    ck_assert (last_seen);
    ck_assert_int_gt (rows, 50);
    ck_assert_int_eq (prev_count, N);
    ck_assert_double_eq_tol (prev_value, (double) histogram_max (h) / 1000.0, 0.0006);
    ck_assert_int_eq (footer_count, N);
    ck_assert_double_eq_tol (footer_max, (double) histogram_max (h) / 1000.0, 0.0006);
    ck_assert_double_eq_tol (footer_mean, histogram_mean (h) / 1000.0, 0.0006);
    ck_assert_double_eq_tol (footer_sd, histogram_stddev (h) / 1000.0, 0.0006);
    ck_assert_int_eq (buckets, 26);
    ck_assert_int_eq (sub_buckets, 2048);
    free (text);
    histogram_destroy (&h);
}
END_TEST

int main (void)
{
    s_seed = s_seed0 = ((uint64_t) time (NULL) * 2654435761u) | 1;
    printf ("test_histogram: seed %" PRIu64 "\n", s_seed0);
    fflush (stdout);
    Suite *s = suite_create ("histogram");
    TCase *tc = tcase_create ("histogram");
    tcase_set_timeout (tc, 30);
    tcase_add_test (tc, percentiles_match_sorted_reference);
    tcase_add_test (tc, small_sets_are_exact_nearest_rank);
    tcase_add_test (tc, bucket_boundaries);
    tcase_add_test (tc, merge_equals_one_histogram);
    tcase_add_test (tc, min_max_mean_stddev_exact);
    tcase_add_test (tc, out_of_range_values_are_clamped_and_counted);
    tcase_add_test (tc, hgrm_exact_text);
    tcase_add_test (tc, hgrm_parses_back_on_random_data);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
