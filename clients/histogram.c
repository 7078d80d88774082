#include "histogram.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* HdrHistogram's layout for lowest discernible value 1, highest trackable 60e9, 3 digits:
 * sub_bucket_count = 2^ceil (log2 (2 * 10^3)) = 2048, and as many buckets as it takes for
 * 2048 << (buckets - 1) to exceed 60e9. */
#define SUB_BUCKET_COUNT 2048
#define SUB_BUCKET_HALF_COUNT 1024
#define SUB_BUCKET_HALF_MAGNITUDE 10
#define SUB_BUCKET_MASK ((int64_t) SUB_BUCKET_COUNT - 1)
#define BUCKET_COUNT 26
#define COUNTS_LEN ((BUCKET_COUNT + 1) * SUB_BUCKET_HALF_COUNT)
#define TICKS_PER_HALF_DISTANCE 5

_Static_assert (((int64_t) SUB_BUCKET_COUNT << (BUCKET_COUNT - 1)) > HISTOGRAM_HIGHEST_NS, "buckets cover 60 s");
_Static_assert (((int64_t) SUB_BUCKET_COUNT << (BUCKET_COUNT - 2)) <= HISTOGRAM_HIGHEST_NS, "no bucket to spare");

struct _histogram_t {
    uint64_t counts[COUNTS_LEN];    /* samples per bucket, in value order */
    uint64_t total;                 /* samples recorded */
    uint64_t clamped;               /* of which outside [0, HISTOGRAM_HIGHEST_NS] */
    int64_t min, max;               /* exact extremes (after clamping); INT64_MAX / 0 when empty */
    double sum, sum_sq;             /* exact sums for the mean and standard deviation */
};

static int s_bucket_index (int64_t value)
{
    /* the position of the highest bit above the sub-bucket range; 0 below 2048 */
    return 64 - __builtin_clzll ((uint64_t) (value | SUB_BUCKET_MASK)) - (SUB_BUCKET_HALF_MAGNITUDE + 1);
}

static int s_counts_index (int64_t value)
{
    int bucket = s_bucket_index (value);
    int sub = (int) (value >> bucket);
    return ((bucket + 1) << SUB_BUCKET_HALF_MAGNITUDE) + (sub - SUB_BUCKET_HALF_COUNT);
}

/* The lowest value of the bucket at INDEX. */
static int64_t s_value_from_index (int index)
{
    int bucket = (index >> SUB_BUCKET_HALF_MAGNITUDE) - 1;
    int64_t sub = (index & (SUB_BUCKET_HALF_COUNT - 1)) + SUB_BUCKET_HALF_COUNT;
    if (bucket < 0) {
        sub -= SUB_BUCKET_HALF_COUNT;
        bucket = 0;
    }
    return sub << bucket;
}

int64_t histogram_lowest_equivalent (int64_t value_ns)
{
    if (value_ns < 0)
        value_ns = 0;
    int bucket = s_bucket_index (value_ns);
    return (value_ns >> bucket) << bucket;
}

int64_t histogram_highest_equivalent (int64_t value_ns)
{
    if (value_ns < 0)
        value_ns = 0;
    int bucket = s_bucket_index (value_ns);
    return histogram_lowest_equivalent (value_ns) + ((int64_t) 1 << bucket) - 1;
}

/* The value reported for a bucket: its highest value, kept within what was recorded. */
static int64_t s_reported (const histogram_t *self, int64_t value)
{
    if (value > self->max)
        value = self->max;
    if (value < self->min)
        value = self->min;
    return value;
}

histogram_t *histogram_new (void)
{
    histogram_t *self = malloc (sizeof *self);
    if (self)
        histogram_reset (self);
    return self;
}

void histogram_destroy (histogram_t **self_p)
{
    if (self_p && *self_p) {
        free (*self_p);
        *self_p = NULL;
    }
}

size_t histogram_bytes (void) { return sizeof (histogram_t); }

void histogram_reset (histogram_t *self)
{
    memset (self, 0, sizeof *self);
    self->min = INT64_MAX;
}

void histogram_record (histogram_t *self, int64_t value_ns)
{
    if (value_ns < 0 || value_ns > HISTOGRAM_HIGHEST_NS) {
        value_ns = value_ns < 0 ? 0 : HISTOGRAM_HIGHEST_NS;
        self->clamped++;
    }
    self->counts[s_counts_index (value_ns)]++;
    self->total++;
    if (value_ns < self->min)
        self->min = value_ns;
    if (value_ns > self->max)
        self->max = value_ns;
    double v = (double) value_ns;
    self->sum += v;
    self->sum_sq += v * v;
}

void histogram_merge (histogram_t *self, const histogram_t *from)
{
    if (from->total == 0)
        return;
    for (int i = 0; i < COUNTS_LEN; i++)
        self->counts[i] += from->counts[i];
    self->total += from->total;
    self->clamped += from->clamped;
    if (from->min < self->min)
        self->min = from->min;
    if (from->max > self->max)
        self->max = from->max;
    self->sum += from->sum;
    self->sum_sq += from->sum_sq;
}

uint64_t histogram_count (const histogram_t *self)
{
    return self->total;
}

uint64_t histogram_clamped (const histogram_t *self)
{
    return self->clamped;
}

int64_t histogram_min (const histogram_t *self)
{
    return self->total ? self->min : 0;
}

int64_t histogram_max (const histogram_t *self)
{
    return self->max;
}

double histogram_mean (const histogram_t *self)
{
    return self->total ? self->sum / (double) self->total : 0;
}

double histogram_stddev (const histogram_t *self)
{
    if (self->total == 0)
        return 0;
    double mean = histogram_mean (self);
    double var = self->sum_sq / (double) self->total - mean * mean;
    return var > 0 ? sqrt (var) : 0;
}

int64_t histogram_value_at_percentile (const histogram_t *self, double percentile)
{
    if (self->total == 0)
        return 0;
    if (!(percentile > 0))
        percentile = 0;
    if (percentile > 100)
        percentile = 100;
    /* As HdrHistogram: one ulp below the request, so that 99.9 of 1000 is rank 999, not 1000. */
    double requested = nextafter (percentile, -INFINITY);
    if (requested < 0)
        requested = 0;
    uint64_t rank = (uint64_t) ceil (requested / 100.0 * (double) self->total);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (int i = 0; i < COUNTS_LEN; i++) {
        seen += self->counts[i];
        if (seen >= rank) {
            int64_t low = s_value_from_index (i);
            int64_t value = percentile == 0 ? low : histogram_highest_equivalent (low);
            return s_reported (self, value);
        }
    }
    return self->max;
}

/* HdrHistogram's PercentileIterator: reporting levels that halve their distance to 100% every
 * TICKS_PER_HALF_DISTANCE steps. */
static double s_next_level (double level)
{
    double halvings = level < 100 ? floor (log (100.0 / (100.0 - level)) / log (2)) : 62;
    if (halvings > 61)
        halvings = 61;
    int64_t ticks = (int64_t) TICKS_PER_HALF_DISTANCE * ((int64_t) 1 << ((int) halvings + 1));
    return level + 100.0 / (double) ticks;
}

int histogram_write_hgrm (const histogram_t *self, FILE *out, double unit_ratio)
{
    if (!(unit_ratio > 0))
        unit_ratio = 1;
    fprintf (out, "%12s %14s %10s %14s\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    if (self->total > 0) {
        double level = 0;
        uint64_t cumulative = 0;
        int last = 0;
        for (int i = 0; i < COUNTS_LEN && cumulative < self->total; i++) {
            if (self->counts[i] == 0)
                continue;
            cumulative += self->counts[i];
            last = i;
            double reached = 100.0 * (double) cumulative / (double) self->total;
            double value = (double) s_reported (self, histogram_highest_equivalent (s_value_from_index (i)));
            while (level <= reached) {
                fprintf (out, "%12.3f %2.12f %10" PRIu64 " %14.2f\n", value / unit_ratio, level / 100.0, cumulative,
                         1.0 / (1.0 - level / 100.0));
                level = s_next_level (level);
                if (cumulative >= self->total)
                    break;   /* the last bucket reports once, then the 100% row */
            }
        }
        double value = (double) s_reported (self, histogram_highest_equivalent (s_value_from_index (last)));
        fprintf (out, "%12.3f %2.12f %10" PRIu64 "\n", value / unit_ratio, 1.0, self->total);
    }
    fprintf (out, "#[Mean    = %12.3f, StdDeviation   = %12.3f]\n", histogram_mean (self) / unit_ratio,
             histogram_stddev (self) / unit_ratio);
    fprintf (out, "#[Max     = %12.3f, Total count    = %12" PRIu64 "]\n", (double) histogram_max (self) / unit_ratio,
             self->total);
    fprintf (out, "#[Buckets = %12d, SubBuckets     = %12d]\n", BUCKET_COUNT, SUB_BUCKET_COUNT);
    return ferror (out) ? -1 : 0;
}
