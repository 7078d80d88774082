/* A latency histogram in the manner of HdrHistogram: log-linear buckets with 3 significant digits
 * from 100 ns to 60 s, constant-time recording with no allocation, mergeable across threads, and
 * the percentile-distribution text format (.hgrm) that HdrHistogram's plotters read.
 *
 * Values are integer nanoseconds. Buckets follow HdrHistogram's layout for a lowest discernible
 * value of 1 ns, a highest trackable value of 60 s and 3 significant digits: 2048 sub-buckets,
 * values below 2048 ns exact, above that buckets of width 2^k for values in [1024 * 2^k,
 * 2048 * 2^k), so any value is known to within 1/1024 of itself (3 significant digits; at 100 ns
 * that is the nanosecond). 26 buckets, 27,648 counters, 216 KiB.
 *
 * Values outside [0, 60 s] are clamped to the nearest end and counted (histogram_clamped). The
 * clamped value is what min, max, mean and the percentiles see.
 *
 * Percentiles follow HdrHistogram's getValueAtPercentile: the nearest-rank sample (the smallest
 * value with at least ceil (p / 100 * count) samples at or below it), reported as the highest value
 * of its bucket, except that it is never reported above the largest value recorded (so p100 is the
 * exact max) nor below the smallest (so p0 is the exact min). The result is therefore the exact
 * nearest-rank value or above it by less than 1/1024 of it (exact below 2048 ns).
 *
 * Mean and standard deviation come from exact running sums, not from bucket midpoints; the
 * standard deviation is the population one (divided by count), as HdrHistogram prints it.
 *
 * A histogram_t is not thread-safe: give each thread its own and merge them when they are done. */
#ifndef SIGSERVE_HISTOGRAM_H
#define SIGSERVE_HISTOGRAM_H

#include <stdint.h>
#include <stdio.h>

typedef struct _histogram_t histogram_t;

#define HISTOGRAM_LOWEST_NS 100                      /* from here on, 3 significant digits */
#define HISTOGRAM_HIGHEST_NS 60000000000LL           /* 60 s: larger values are clamped */
#define HISTOGRAM_SIGNIFICANT_DIGITS 3

/* An empty histogram, or NULL when memory runs out. */
histogram_t *histogram_new (void);
/* Safe on NULL and twice; NULLs *SELF_P. */
void histogram_destroy (histogram_t **self_p);

/* Records one value in nanoseconds; constant time, no allocation. */
void histogram_record (histogram_t *self, int64_t value_ns);
/* Adds every count of FROM to SELF (FROM is left alone). */
void histogram_merge (histogram_t *self, const histogram_t *from);
/* Back to empty. */
void histogram_reset (histogram_t *self);
/* The bytes a histogram takes: one may live in memory the caller provides (histogram_reset makes it
 * empty), e.g. shared with another process; it holds no pointers. */
size_t histogram_bytes (void);

uint64_t histogram_count (const histogram_t *self);
/* How many recorded values were outside [0, HISTOGRAM_HIGHEST_NS] and clamped. */
uint64_t histogram_clamped (const histogram_t *self);
/* 0 for an empty histogram. */
int64_t histogram_min (const histogram_t *self);
int64_t histogram_max (const histogram_t *self);
double histogram_mean (const histogram_t *self);
double histogram_stddev (const histogram_t *self);
/* PERCENTILE in [0, 100] (clamped); 0 for an empty histogram. See above for the convention. */
int64_t histogram_value_at_percentile (const histogram_t *self, double percentile);

/* The lowest and the highest value that share VALUE's bucket (both VALUE below 2048 ns). */
int64_t histogram_lowest_equivalent (int64_t value_ns);
int64_t histogram_highest_equivalent (int64_t value_ns);

/* Writes the percentile distribution in HdrHistogram's text format (outputPercentileDistribution
 * with 5 ticks per half distance): the header line, a blank line, one row per reporting level
 * ("%12.3f %2.12f %10d %14.2f": value, percentile as a fraction, total count to that value,
 * 1/(1-percentile)), the 100% row without the last column, then the footer
 *   #[Mean    = %12.3f, StdDeviation   = %12.3f]
 *   #[Max     = %12.3f, Total count    = %12d]
 *   #[Buckets = %12d, SubBuckets     = %12d]
 * Values are divided by UNIT_RATIO (1000.0 writes microseconds from nanoseconds). An empty
 * histogram writes the header and the footer only. 0 on success, -1 when writing fails. */
int histogram_write_hgrm (const histogram_t *self, FILE *out, double unit_ratio);

#endif
