/* The Prometheus text of /metrics (metrics.h): what http.c's scrape is made of. */
#define _GNU_SOURCE
#include "ops/metrics.h"
#include "serving/devices.h"

#include "serving/dispatch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void metrics_append (metrics_text_t *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start (ap, fmt);
        int n = vsnprintf (t->data ? t->data + t->len : NULL, t->data ? t->cap - t->len : 0, fmt, ap);
        va_end (ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if (t->data && t->len + (size_t) n < t->cap) {
            t->len += (size_t) n;
            return;
        }
        size_t cap = t->cap ? t->cap : 16384;
        while (cap <= t->len + (size_t) n)
            cap *= 2;
        char *data = realloc (t->data, cap);
        if (!data) {
            t->failed = true;
            return;
        }
        t->data = data;
        t->cap = cap;
    }
}

/* A Prometheus label value: backslash, double quote and newline escaped. */
const char *metrics_label (const char *value, char *buf, size_t cap)
{
    size_t n = 0;
    for (const char *c = value; *c && n + 3 < cap; c++) {
        if (*c == '\\' || *c == '"' || *c == '\n') {
            buf[n++] = '\\';
            buf[n++] = *c == '\n' ? 'n' : *c;
        } else
            buf[n++] = *c;
    }
    buf[n] = '\0';
    return buf;
}

/* "ok", "bad_shape", ...: the wire name, lower case, without "STATUS_". */
static const char *s_status_label (sig_status_t st, char *buf, size_t cap)
{
    const char *name = sig_status_name (st);
    if (strncmp (name, "STATUS_", 7) == 0)
        name += 7;
    size_t n = 0;
    for (; name[n] && n + 1 < cap; n++)
        buf[n] = (char) (name[n] >= 'A' && name[n] <= 'Z' ? name[n] - 'A' + 'a' : name[n]);
    buf[n] = '\0';
    return buf;
}

void metrics_family (metrics_text_t *t, const char *name, const char *type, const char *help)
{
    metrics_append (t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_requests (metrics_text_t *t, stats_t *stats)
{
    const size_t slots = stats_slot_count (stats);
    metrics_family (t, "sigserve_requests_total", "counter",
              "Infer requests answered, by model and status (unknown models and undecodable requests "
              "count under model=\"_unknown\").");
    char label[160], status[32];
    for (size_t slot = 0; slot < slots; slot++) {
        metrics_label (stats_slot_name (stats, slot), label, sizeof label);
        for (int st = 0; st < STATS_STATUS_COUNT; st++)
            metrics_append (t, "sigserve_requests_total{model=\"%s\",status=\"%s\"} %llu\n", label,
                      s_status_label ((sig_status_t) st, status, sizeof status),
                      (unsigned long long) stats_requests (stats, slot, (sig_status_t) st));
    }
}

/* What the front did instead of handing a request to a worker: refused it (by reason), or ran it
 * itself. */
void metrics_front (metrics_text_t *t, stats_t *stats)
{
    const size_t slots = stats_slot_count (stats);
    char label[160];
    metrics_family (t, "sigserve_shed_total", "counter",
                    "Infer requests refused before they ran, by model and reason: queue_time (the expected wait "
                    "for a worker over max_queue_us; OVERLOADED), deadline (the expected wait over the request's "
                    "deadline_us; DEADLINE_EXCEEDED), queue_depth, buffers, client (max_inflight_per_client).");
    for (size_t slot = 0; slot < slots; slot++) {
        metrics_label (stats_slot_name (stats, slot), label, sizeof label);
        for (int why = 0; why < SHED_COUNT; why++)
            metrics_append (t, "sigserve_shed_total{model=\"%s\",reason=\"%s\"} %llu\n", label, stats_shed_names[why],
                            (unsigned long long) stats_sheds (stats, slot, (stats_shed_t) why));
    }
    metrics_family (t, "sigserve_spin_sleeps_total", "counter",
                    "Times an idle serving thread spun (server.spin_us, where each has a CPU of its own) and then "
                    "went to sleep because no work came within its spin: thread is front or worker.");
    metrics_append (t, "sigserve_spin_sleeps_total{thread=\"front\"} %llu\n",
                    (unsigned long long) stats_spin_sleeps (stats, false));
    metrics_append (t, "sigserve_spin_sleeps_total{thread=\"worker\"} %llu\n",
                    (unsigned long long) stats_spin_sleeps (stats, true));
    metrics_family (t, "sigserve_inline_total", "counter",
                    "Infer requests the front computed itself (server.inline_us: the model had nothing queued and "
                    "runs in less than that), without a hand-off to a worker.");
    for (size_t slot = 1; slot < slots; slot++)
        metrics_append (t, "sigserve_inline_total{model=\"%s\"} %llu\n",
                        metrics_label (stats_slot_name (stats, slot), label, sizeof label),
                        (unsigned long long) stats_inline (stats, slot));
    metrics_family (t, "sigserve_lost_requests_total", "counter",
                    "Requests held by an instance whose device process was lost: result rerun, admitted again to "
                    "another instance of the model within max_queue_us and the request's deadline; result "
                    "unavailable, answered UNAVAILABLE with the reason because none could take them.");
    for (size_t slot = 1; slot < slots; slot++) {
        metrics_label (stats_slot_name (stats, slot), label, sizeof label);
        metrics_append (t, "sigserve_lost_requests_total{model=\"%s\",result=\"rerun\"} %llu\n", label,
                        (unsigned long long) stats_reruns (stats, slot, true));
        metrics_append (t, "sigserve_lost_requests_total{model=\"%s\",result=\"unavailable\"} %llu\n", label,
                        (unsigned long long) stats_reruns (stats, slot, false));
    }
}

void metrics_histograms (metrics_text_t *t, stats_t *stats)
{
    const size_t slots = stats_slot_count (stats);
    static const char *stages[STAGE_COUNT] = { [STAGE_QUEUE] = "queue", [STAGE_COMPUTE] = "compute",
                                               [STAGE_SERVER] = "server" };
    char label[160];
    metrics_family (t, "sigserve_request_duration_seconds", "histogram",
              "Time of the requests a worker answered, by stage: queue (receipt to the start of the "
              "launch), compute (the launch), server (receipt to the reply's send).");
    for (size_t slot = 0; slot < slots; slot++) {
        metrics_label (stats_slot_name (stats, slot), label, sizeof label);
        for (int stage = 0; stage < STAGE_COUNT; stage++) {
            uint64_t cumulative[STATS_LE_COUNT + 1], sum_ns;
            stats_histogram (stats, slot, (stats_stage_t) stage, cumulative, &sum_ns);
            for (int b = 0; b < STATS_LE_COUNT; b++)
                metrics_append (t, "sigserve_request_duration_seconds_bucket{model=\"%s\",stage=\"%s\",le=\"%g\"} %llu\n",
                          label, stages[stage], stats_le_seconds[b], (unsigned long long) cumulative[b]);
            metrics_append (t, "sigserve_request_duration_seconds_bucket{model=\"%s\",stage=\"%s\",le=\"+Inf\"} %llu\n",
                      label, stages[stage], (unsigned long long) cumulative[STATS_LE_COUNT]);
            metrics_append (t, "sigserve_request_duration_seconds_sum{model=\"%s\",stage=\"%s\"} %llu.%09llu\n", label,
                      stages[stage], (unsigned long long) (sum_ns / 1000000000ull),
                      (unsigned long long) (sum_ns % 1000000000ull));
            metrics_append (t, "sigserve_request_duration_seconds_count{model=\"%s\",stage=\"%s\"} %llu\n", label,
                      stages[stage], (unsigned long long) cumulative[STATS_LE_COUNT]);
        }
    }
    metrics_family (t, "sigserve_batch_rows", "histogram",
              "Rows of the launch each computed request was part of (its own and those batched with it).");
    for (size_t slot = 0; slot < slots; slot++) {
        metrics_label (stats_slot_name (stats, slot), label, sizeof label);
        uint64_t cumulative[STATS_ROWS_LE_COUNT + 1], sum_rows;
        stats_batch_histogram (stats, slot, cumulative, &sum_rows);
        for (int b = 0; b < STATS_ROWS_LE_COUNT; b++)
            metrics_append (t, "sigserve_batch_rows_bucket{model=\"%s\",le=\"%u\"} %llu\n", label, stats_le_rows[b],
                      (unsigned long long) cumulative[b]);
        metrics_append (t, "sigserve_batch_rows_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", label,
                  (unsigned long long) cumulative[STATS_ROWS_LE_COUNT]);
        metrics_append (t, "sigserve_batch_rows_sum{model=\"%s\"} %llu\n", label, (unsigned long long) sum_rows);
        metrics_append (t, "sigserve_batch_rows_count{model=\"%s\"} %llu\n", label,
                  (unsigned long long) cumulative[STATS_ROWS_LE_COUNT]);
    }
}

/* Requests waiting for a worker. A ring's count read from a third thread can be caught between
 * its two indices and come out absurd: such a reading is taken again, then bounded. */
uint32_t metrics_queued (model_t *m)
{
    uint32_t depth = model_queue_depth (m), q = 0;
    for (int attempt = 0; attempt < 4; attempt++)
        if ((q = dispatch_queued (m)) <= depth)
            return q;
    return depth;
}

/* One sample per instance of every model of MODELS: NAME{model,instance,device} with its
 * availability, or (REQUESTS) the requests it computed. */
/* A device label: "cpu" (an instance on the CPU, or the test build's CPU device process; "cpu1" its
 * second one), "cuda:N". */
static const char *s_device_label (int device, char *buf, size_t len)
{
    if (device == DEVICE_CPU_TEST_OTHER)
        snprintf (buf, len, "cpu1");
    else if (device < 0)
        snprintf (buf, len, "cpu");
    else
        snprintf (buf, len, "cuda:%d", device);
    return buf;
}

static void s_instances (metrics_text_t *t, model_registry_t *models, const char *name, bool requests)
{
    char label[160], dev[32];
    for (size_t i = 0; models && i < model_registry_count (models); i++) {
        model_t *m = model_registry_at (models, i);
        metrics_label (model_name (m), label, sizeof label);
        for (uint32_t k = 0; k < model_instance_count (m); k++) {
            s_device_label (model_instance_device (m, k), dev, sizeof dev);
            metrics_append (t, "%s{model=\"%s\",instance=\"%u\",device=\"%s\"} %llu\n", name, label, k, dev,
                            requests ? (unsigned long long) model_instance_requests (m, k)
                                     : (unsigned long long) model_instance_available (m, k));
        }
    }
}

/* The streams rebuilt after a lost device process and those evicted from the history first, for each
 * model that keeps one (serving/stream_history.h). */
static void s_stream_history (metrics_text_t *t, model_registry_t *models)
{
    char label[160];
    const size_t n = models ? model_registry_count (models) : 0;
    for (int family = 0; family < 2; family++) {
        metrics_family (t, family ? "sigserve_stream_history_evictions_total" : "sigserve_stream_history_rebuilds_total",
                        "counter", family ? "Streams evicted from the stream history while active (stream_history): "
                                            "such a stream cannot be rebuilt if its device process is lost."
                                          : "Streams rebuilt from the stream history in a device process that replaced "
                                            "a lost one.");
        for (size_t i = 0; i < n; i++) {
            model_t *m = model_registry_at (models, i);
            uint64_t rebuilds, evictions;
            if (model_stream_history (m, &rebuilds, &evictions))
                metrics_append (t, "%s{model=\"%s\"} %llu\n", family ? "sigserve_stream_history_evictions_total"
                                                                     : "sigserve_stream_history_rebuilds_total",
                                metrics_label (model_name (m), label, sizeof label),
                                (unsigned long long) (family ? evictions : rebuilds));
        }
    }
}

/* The CPU fallbacks (serving/fallback.c) of the models that have one: the requests each computed, and
 * whether the model serves on it now. */
/* One family of the models' fallbacks: NAME (TYPE, HELP), each model with a fallback's count of it
 * (ACTIVE: whether it serves on it now, as 0 or 1; else the requests it computed). */
static void s_fallback_family (metrics_text_t *t, model_registry_t *models, const char *name, const char *type,
                               const char *help, bool active_now)
{
    char label[160];
    const size_t n = models ? model_registry_count (models) : 0;
    uint32_t instances;
    uint64_t served;
    bool active;
    metrics_family (t, name, type, help);
    for (size_t i = 0; i < n; i++) {
        model_t *m = model_registry_at (models, i);
        if (model_fallback (m, &instances, &served, &active))
            metrics_append (t, "%s{model=\"%s\"} %llu\n", name, metrics_label (model_name (m), label, sizeof label),
                            active_now ? (unsigned long long) active : (unsigned long long) served);
    }
}

static void s_fallbacks (metrics_text_t *t, model_registry_t *models)
{
    s_fallback_family (t, models, "sigserve_fallback_total", "counter",
                       "Requests the model's CPU fallback computed (\"fallback\"): none of its own instances could run them.",
                       false);
    s_fallback_family (t, models, "sigserve_fallback_active", "gauge",
                       "1 while the model serves on its CPU fallback: none of its own instances is available.", true);
}

/* The gauges of the models being served. Called with the server lock held. */

void metrics_models (metrics_text_t *t, model_registry_t *models)
{
    char label[160];
    size_t n = models ? model_registry_count (models) : 0;
    metrics_family (t, "sigserve_queue_depth", "gauge", "Requests admitted and waiting for a worker of the model.");
    for (size_t i = 0; i < n; i++) {
        model_t *m = model_registry_at (models, i);
        metrics_append (t, "sigserve_queue_depth{model=\"%s\"} %u\n", metrics_label (model_name (m), label, sizeof label),
                  metrics_queued (m));
    }
    metrics_family (t, "sigserve_model_available", "gauge", "1 while at least one instance of the model can run.");
    for (size_t i = 0; i < n; i++) {
        model_t *m = model_registry_at (models, i);
        metrics_append (t, "sigserve_model_available{model=\"%s\"} %d\n", metrics_label (model_name (m), label, sizeof label),
                  model_available (m) ? 1 : 0);
    }
    metrics_family (t, "sigserve_instance_available", "gauge",
                    "1 while the instance (a worker with its own backend context) can run; device is \"cpu\" or "
                    "\"cuda:N\".");
    s_instances (t, models, "sigserve_instance_available", false);
    metrics_family (t, "sigserve_instance_requests_total", "counter",
                    "Requests the instance computed (starts again from 0 when a reload loads the model anew).");
    s_instances (t, models, "sigserve_instance_requests_total", true);
    s_stream_history (t, models);
    bool degraded = false;
    for (size_t i = 0; i < n; i++) {
        model_t *m = model_registry_at (models, i);
        for (uint32_t k = 0; k < model_instance_count (m); k++)
            degraded |= !model_instance_available (m, k);
    }
    metrics_family (t, "sigserve_degraded", "gauge",
                    "1 while an instance of a served model cannot run (a lost device, its process restarting): "
                    "/models says which and why.");
    metrics_append (t, "sigserve_degraded %d\n", degraded ? 1 : 0);
    s_fallbacks (t, models);
}

void metrics_devices (metrics_text_t *t, devices_t *d)
{
    devices_info_t info[DEVICES_MAX];
    const size_t n = d ? devices_list (d, info, DEVICES_MAX) : 0;
    char dev[32];
    metrics_family (t, "sigserve_device_process_up", "gauge",
                    "1 while the device's process (server.gpu_processes) runs.");
    for (size_t i = 0; i < n; i++)
        metrics_append (t, "sigserve_device_process_up{device=\"%s\"} %d\n", s_device_label (info[i].device, dev, sizeof dev),
                        info[i].running ? 1 : 0);
    metrics_family (t, "sigserve_device_losses_total", "counter",
                    "Times the device's process was lost: it exited, its context trapped, or a launch ran past watchdog_ms.");
    for (size_t i = 0; i < n; i++)
        metrics_append (t, "sigserve_device_losses_total{device=\"%s\"} %llu\n", s_device_label (info[i].device, dev, sizeof dev),
                        (unsigned long long) info[i].losses);
    metrics_family (t, "sigserve_device_restarts_total", "counter",
                    "Times the device's process was started again and every model it held rejoined.");
    for (size_t i = 0; i < n; i++)
        metrics_append (t, "sigserve_device_restarts_total{device=\"%s\",result=\"ok\"} %llu\n",
                        s_device_label (info[i].device, dev, sizeof dev), (unsigned long long) info[i].restarts);
    for (size_t i = 0; i < n; i++)
        metrics_append (t, "sigserve_device_restarts_total{device=\"%s\",result=\"failed\"} %llu\n",
                        s_device_label (info[i].device, dev, sizeof dev), (unsigned long long) info[i].failed_restarts);
    metrics_family (t, "sigserve_device_recovery_seconds", "gauge",
                    "The last recovery of the device's process: from its loss to every model rejoined.");
    for (size_t i = 0; i < n; i++)
        metrics_append (t, "sigserve_device_recovery_seconds{device=\"%s\"} %.4f\n",
                        s_device_label (info[i].device, dev, sizeof dev), info[i].last_recovery_ms / 1e3);
    metrics_family (t, "sigserve_device_standby_promotions_total", "counter",
                    "Of the restarts: the device's warm spare process promoted (server.standby).");
    for (size_t i = 0; i < n; i++)
        metrics_append (t, "sigserve_device_standby_promotions_total{device=\"%s\"} %llu\n",
                        s_device_label (info[i].device, dev, sizeof dev), (unsigned long long) info[i].promotions);
    metrics_family (t, "sigserve_device_standby_started_total", "counter",
                    "Warm spare processes started for the device (server.standby), the first included.");
    for (size_t i = 0; i < n; i++)
        metrics_append (t, "sigserve_device_standby_started_total{device=\"%s\"} %llu\n",
                        s_device_label (info[i].device, dev, sizeof dev), (unsigned long long) info[i].spares_started);
    metrics_family (t, "sigserve_device_standby_ready", "gauge",
                    "1 while the device's warm spare holds every model it may, ready to be promoted.");
    for (size_t i = 0; i < n; i++)
        metrics_append (t, "sigserve_device_standby_ready{device=\"%s\"} %d\n",
                        s_device_label (info[i].device, dev, sizeof dev), info[i].standby_ready ? 1 : 0);
}

void metrics_process (metrics_text_t *t)
{
    stats_process_t p;
    stats_process (&p);
    metrics_family (t, "process_cpu_seconds_total", "counter", "User and system CPU time of every thread, in seconds.");
    metrics_append (t, "process_cpu_seconds_total %.2f\n", p.cpu_seconds);
    metrics_family (t, "process_resident_memory_bytes", "gauge", "Resident memory (RSS), in bytes.");
    metrics_append (t, "process_resident_memory_bytes %llu\n", (unsigned long long) p.resident_bytes);
    metrics_family (t, "process_virtual_memory_bytes", "gauge", "Virtual memory size, in bytes.");
    metrics_append (t, "process_virtual_memory_bytes %llu\n", (unsigned long long) p.virtual_bytes);
    metrics_family (t, "process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch, in seconds.");
    metrics_append (t, "process_start_time_seconds %.2f\n", p.start_time_seconds);
    metrics_family (t, "process_open_fds", "gauge", "Open file descriptors.");
    metrics_append (t, "process_open_fds %llu\n", (unsigned long long) p.open_fds);
    if (p.max_fds) {
        metrics_family (t, "process_max_fds", "gauge", "The most file descriptors the process may open.");
        metrics_append (t, "process_max_fds %llu\n", (unsigned long long) p.max_fds);
    }
}
