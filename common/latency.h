/* Latency distributions as docs/perf.md reports them: p50, p90, p99, p99.9, min, max, mean and sd
 * (nearest-rank percentiles over every sample), and markdown rows to print them. */
#ifndef SIGSERVE_LATENCY_H
#define SIGSERVE_LATENCY_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    size_t count;
    double p50, p90, p99, p999, min, max, mean, sd;
} latency_summary_t;

/* Sorts SAMPLES in place and summarises them. COUNT 0 gives all zeros. */
void latency_summarize (double *samples, size_t count, latency_summary_t *out);
/* The nearest-rank percentile P (0..100) of SORTED. */
double latency_percentile (const double *sorted, size_t count, double p);

/* "| method | p50 | p90 | ... |" and its separator; then one row per summary. */
void latency_print_header (FILE *out, const char *first_column);
void latency_print_row (FILE *out, const char *label, const latency_summary_t *s);

#endif
