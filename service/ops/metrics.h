/* The Prometheus text format 0.0.4 of /metrics (docs/operations.md lists every metric), built in a
 * growing buffer: the pieces http.c's scrape puts together under its own locks. Read-only: counters
 * and histograms from stats_t (relaxed loads, no lock), gauges from a model set the caller holds. */
#ifndef SIGSERVE_METRICS_H
#define SIGSERVE_METRICS_H

#include "base/stats.h"
#include "serving/registry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *data;                     /* malloc'd; the caller frees it */
    size_t len, cap;
    bool failed;                    /* out of memory: the response becomes a 500 */
} metrics_text_t;

void metrics_append (metrics_text_t *t, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));
/* "# HELP NAME HELP" and "# TYPE NAME TYPE". */
void metrics_family (metrics_text_t *t, const char *name, const char *type, const char *help);
/* VALUE as a label value (backslash, double quote and newline escaped) in BUF. */
const char *metrics_label (const char *value, char *buf, size_t cap);

/* sigserve_requests_total by model and status. */
void metrics_requests (metrics_text_t *t, stats_t *stats);
/* sigserve_request_duration_seconds by model and stage, and sigserve_batch_rows. */
void metrics_histograms (metrics_text_t *t, stats_t *stats);
/* sigserve_shed_total{model,reason} and sigserve_inline_total{model}. */
void metrics_front (metrics_text_t *t, stats_t *stats);
/* The gauges of MODELS (NULL: the families alone): queue depth, availability, per instance. */
void metrics_models (metrics_text_t *t, model_registry_t *models);
/* The device processes (server.gpu_processes; DEVICES NULL: the families alone): up, losses,
 * restarts, the last recovery's time. */
void metrics_devices (metrics_text_t *t, devices_t *devices);
/* process_* (CPU time, memory, descriptors, start time). */
void metrics_process (metrics_text_t *t);
/* Requests waiting for a worker of M, read from another thread: bounded by its queue_depth. */
uint32_t metrics_queued (model_t *m);

#endif
