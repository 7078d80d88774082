/* What a launch of a model costs, for admission by time (model_impl.h): timed once at load on
 * instance 0, before any request, as launch_ns + rows x row_ns; the workers then keep a running
 * ratio of what their launches took to what the model predicted (drift), so a model that slows
 * down (a busier machine, a throttled GPU) is waited for as it is, not as it was. */
#define _GNU_SOURCE
#include "serving/model_impl.h"

#include "base/floats.h"
#include "clock.h"
#include "latency.h"

#include <stdlib.h>

#define TIME_BUDGET_NS 50000000ull  /* at most ~50 ms of timing a model (a large model runs fewer times) */
#define TIME_RUNS_MAX 15
#define TIME_ROWS_MAX 64            /* the batched launch timed: up to this many rows */
#define DRIFT_ONE 1024u
#define DRIFT_MIN (DRIFT_ONE / 8)
#define DRIFT_MAX (DRIFT_ONE * 64)

/* The median time of launches of ROWS rows on the first instance loaded in this process (after one
 * untimed run), or 0 on failure. */
static uint64_t s_median (model_t *m, const float *x, float *y, uint32_t rows, char *err, size_t errlen)
{
    backend_model_t *impl = NULL;
    for (uint32_t i = 0; i < m->instance_count && !impl; i++)
        impl = m->instances[i].impl;
    if (!impl) {
        snprintf (err, errlen, "model \"%s\": no instance to time", m->desc.cfg.name);
        return 0;
    }
    uint64_t t0 = clock_now_ns ();
    if (m->iface->infer (impl, x, rows, y, err, errlen) != SIG_OK)
        return 0;
    uint64_t first = clock_now_ns () - t0;
    uint64_t runs = first ? TIME_BUDGET_NS / 2 / first : TIME_RUNS_MAX;
    if (runs > TIME_RUNS_MAX)
        runs = TIME_RUNS_MAX;
    if (runs < 1)
        runs = 1;
    double t[TIME_RUNS_MAX];
    for (uint64_t k = 0; k < runs; k++) {
        t0 = clock_now_ns ();
        if (m->iface->infer (impl, x, rows, y, err, errlen) != SIG_OK)
            return 0;
        t[k] = (double) (clock_now_ns () - t0);
    }
    latency_summary_t s;
    latency_summarize (t, runs, &s);
    return s.p50 >= 1 ? (uint64_t) s.p50 : 1;
}

int model_time (model_t *m, char *err, size_t errlen)
{
    uint32_t wide = backend_rows (&m->desc.cfg);
    if (wide > TIME_ROWS_MAX)
        wide = TIME_ROWS_MAX;
    if (wide > m->batch_rows && m->batch_rows > 1)
        wide = m->batch_rows;
    float *x = floats_zeroed ((size_t) wide * m->desc.input_size);
    float *y = floats_zeroed ((size_t) wide * m->desc.output_size);
    int rc = -1;
    if (!x || !y) {
        snprintf (err, errlen, "model \"%s\": out of memory for timing", m->desc.cfg.name);
        goto done;
    }
    const uint64_t one = s_median (m, x, y, 1, err, errlen);
    if (!one)
        goto done;
    uint64_t many = one;
    if (wide > 1 && !(many = s_median (m, x, y, wide, err, errlen)))
        goto done;
    /* one = a + b, many = a + wide x b; noise can make many < one: then the rows cost nothing extra */
    m->desc.row_ns = wide > 1 && many > one ? (many - one) / (wide - 1) : 0;
    m->desc.launch_ns = one > m->desc.row_ns ? one - m->desc.row_ns : 1;
    atomic_store (m->drift, DRIFT_ONE);
    rc = 0;
done:
    free (x);
    free (y);
    return rc;
}

/* (launch_ns + rows x row_ns) for ROWS rows taken BATCH at a time. */
static uint64_t s_cost (const model_t *m, uint64_t rows)
{
    const uint64_t batch = m->batch_rows ? m->batch_rows : 1;
    const uint64_t launches = (rows + batch - 1) / batch;
    return launches * m->desc.launch_ns + rows * m->desc.row_ns;
}

uint64_t model_queued_rows (const instance_t *in)
{
    /* exact for the calling front's own lane; another front's may move while it is read (taken can
     * then pass the admitted count read before it: counted as none) */
    uint64_t rows = 0;
    for (uint32_t k = 0; k < in->model->lane_count; k++) {
        const uint64_t admitted = atomic_load_explicit (&in->rows_admitted[k], memory_order_relaxed);
        const uint64_t taken = atomic_load_explicit (&in->sh->lanes[k].rows_taken, memory_order_relaxed);
        rows += admitted > taken ? admitted - taken : 0;
    }
    return rows;
}

uint64_t model_expected_wait (const model_t *m, uint64_t queued)
{
    if (queued == 0)
        return 0;
    return s_cost (m, queued) * atomic_load_explicit (m->drift, memory_order_relaxed) / DRIFT_ONE;
}

uint64_t model_launch_ns (const model_t *m, uint32_t rows)
{
    return (m->desc.launch_ns + rows * m->desc.row_ns) * atomic_load_explicit (m->drift, memory_order_relaxed) / DRIFT_ONE;
}

void model_observe_launch (model_t *m, uint32_t rows, uint64_t ns)
{
    const uint64_t predicted = m->desc.launch_ns + rows * m->desc.row_ns;
    if (!predicted)
        return;
    /* A running average over ~16 launches, each counted as at most twice or half the current ratio: a
     * launch that was preempted moves it by 1/16, a lasting change within tens of launches. Instances
     * of one model may race here; a lost update only slows the average. */
    const uint32_t old = atomic_load_explicit (m->drift, memory_order_relaxed);
    uint64_t ratio = ns * DRIFT_ONE / predicted;
    if (ratio > 2ull * old)
        ratio = 2ull * old;
    if (ratio < old / 2)
        ratio = old / 2;
    if (ratio < DRIFT_MIN)
        ratio = DRIFT_MIN;
    if (ratio > DRIFT_MAX)
        ratio = DRIFT_MAX;
    const int64_t next = (int64_t) old + ((int64_t) ratio - (int64_t) old) / 16;
    atomic_store_explicit (m->drift, (uint32_t) next, memory_order_relaxed);
}
