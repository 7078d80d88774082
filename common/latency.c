#include "latency.h"

#include <math.h>
#include <stdlib.h>

static int s_compare (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

double latency_percentile (const double *sorted, size_t count, double p)
{
    if (count == 0)
        return 0;
    size_t rank = (size_t) ceil (p / 100.0 * (double) count);
    if (rank < 1)
        rank = 1;
    if (rank > count)
        rank = count;
    return sorted[rank - 1];
}

void latency_summarize (double *samples, size_t count, latency_summary_t *out)
{
    *out = (latency_summary_t) { .count = count };
    if (count == 0)
        return;
    qsort (samples, count, sizeof *samples, s_compare);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < count; i++)
        sum += samples[i];
    out->mean = sum / (double) count;
    for (size_t i = 0; i < count; i++)
        sq += (samples[i] - out->mean) * (samples[i] - out->mean);
    out->sd = count > 1 ? sqrt (sq / (double) (count - 1)) : 0;
    out->min = samples[0];
    out->max = samples[count - 1];
    out->p50 = latency_percentile (samples, count, 50);
    out->p90 = latency_percentile (samples, count, 90);
    out->p99 = latency_percentile (samples, count, 99);
    out->p999 = latency_percentile (samples, count, 99.9);
}

void latency_print_header (FILE *out, const char *first_column)
{
    fprintf (out, "| %s | p50 | p90 | p99 | p99.9 | min | max | mean | sd |\n", first_column);
    fprintf (out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
}

void latency_print_row (FILE *out, const char *label, const latency_summary_t *s)
{
    fprintf (out, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", label, s->p50, s->p90,
             s->p99, s->p999, s->min, s->max, s->mean, s->sd);
}
