/* A model's lifecycle (model.h): the one constructor (model_load: where it runs is its placement's,
 * serving/placement.h), the fronts' side of it (model_serve: job pools, shared state, workers
 * started), what it is (model_describe) and its end (model_destroy). */
#define _GNU_SOURCE
#include "serving/model_impl.h"

#include "base/floats.h"
#include "base/log.h"
#include "weights/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes a packed InferRequest adds to its features: request id, model name, rows, deadline, tags. */
#define REQUEST_FRAMING 128

/* queue_depth when neither the model nor the server gives it: the requests that fit max_queue_us
 * at the timed cost of a full batch (at least one row each), at least QUEUE_DEPTH_MIN, at most
 * QUEUE_DEPTH_MAX and what QUEUE_BYTES_MAX of buffers hold. Admission by time refuses first; this
 * only bounds memory. */
#define QUEUE_DEPTH_MIN 64u
#define QUEUE_DEPTH_MAX 1024u
#define QUEUE_BYTES_MAX (64u << 20)
static uint32_t s_queue_depth_default (const model_t *m)
{
    const uint64_t batch = m->batch_rows ? m->batch_rows : 1;
    const uint64_t per_row = (m->desc.launch_ns + batch * m->desc.row_ns) / batch;
    uint64_t depth = per_row ? m->max_queue_ns / per_row * m->instance_count : QUEUE_DEPTH_MAX;
    const uint64_t job_bytes = (uint64_t) m->buffer_rows * (m->desc.input_size + m->desc.output_size) * 4;
    if (depth > QUEUE_BYTES_MAX / job_bytes)
        depth = QUEUE_BYTES_MAX / job_bytes;
    if (depth > QUEUE_DEPTH_MAX)
        depth = QUEUE_DEPTH_MAX;
    return depth < QUEUE_DEPTH_MIN ? QUEUE_DEPTH_MIN : (uint32_t) depth;
}

/* The jobs whose buffers s_jobs_init writes (resident from the load): what one intake turn takes. */
static uint32_t s_warm_jobs (const model_t *m)
{
    return m->job_count < JOB_INTAKE_TURN ? m->job_count : JOB_INTAKE_TURN;
}

/* The request buffers' memory over every lane, in MiB. */
static double s_buffer_mib (const model_t *m)
{
    const double row = 4.0 * (m->desc.input_size + m->desc.output_size);
    return ((double) m->job_count * m->buffer_rows + (double) m->large_count * m->max_rows) * row * m->lane_count
           / 1048576.0;
}

/* A pool of job_count jobs for each lane, in the memory of M's placement. */
static int s_jobs_init (model_t *m, char *err, size_t errlen)
{
    /* Queued requests, what every worker can hold in one batch, and what the front admits before it
     * collects finished jobs again: a free job exists whenever the queue has room. */
    m->job_count = m->desc.cfg.queue_depth + m->instance_count * m->batch_rows + JOB_INTAKE_TURN;
    /* Each job owns buffer_rows rows; a larger request borrows one of large_count buffers of
     * max_rows rows: memory grows with the queue times a typical request, not times the largest. */
    m->large_count = m->max_rows > m->buffer_rows ? m->desc.cfg.large_buffers : 0;
    const size_t row = m->desc.input_size + m->desc.output_size;
    size_t per_job = ((size_t) m->buffer_rows * row + 15) & ~(size_t) 15;   /* 64-byte aligned starts */
    size_t per_large = ((size_t) m->max_rows * row + 15) & ~(size_t) 15;
    for (uint32_t k = 0; k < m->lane_count; k++) {     /* a pool for each front */
        lane_t *l = &m->lanes[k];
        l->jobs = m->where->alloc (m, m->job_count * sizeof *l->jobs);
        l->free_jobs = calloc (m->job_count, sizeof *l->free_jobs);
        l->job_floats = m->where->alloc (m, per_job * m->job_count * sizeof (float));
        l->large_free = calloc (m->large_count ? m->large_count : 1, sizeof *l->large_free);
        l->large_floats = m->large_count ? m->where->alloc (m, per_large * m->large_count * sizeof (float)) : NULL;
        if (!l->jobs || !l->free_jobs || !l->job_floats || !l->large_free || (m->large_count && !l->large_floats)) {
            sig_set_error (err, errlen, "model \"%s\": out of memory for %u request buffers of %u rows and %u of %u "
                           "rows for each of %u front(s) (%.0f MiB; lower queue_depth, buffer_rows or large_buffers)",
                           m->desc.cfg.name, m->job_count, m->buffer_rows, m->large_count, m->max_rows, m->lane_count,
                           s_buffer_mib (m));
            return -1;
        }
        for (uint32_t i = 0; i < m->large_count; i++)
            l->large_free[l->large_free_count++] = m->large_count - 1 - i;
        /* The jobs a steady load reuses (the free list is last-in first-out: the first are taken first)
         * are written now, so their first requests take no page fault; the rest become resident when
         * a deeper queue first needs them. */
        memset (l->job_floats, 0, per_job * s_warm_jobs (m) * sizeof (float));
        for (uint32_t i = 0; i < m->job_count; i++) {
            job_t *j = &l->jobs[i];
            j->lane = (uint8_t) k;
            j->features = j->own_features = l->job_floats + per_job * i;
            j->outputs = j->own_outputs = j->features + (size_t) m->buffer_rows * m->desc.input_size;
            j->large = -1;
            j->instance = -1;
            l->free_jobs[l->free_count++] = &l->jobs[m->job_count - 1 - i];
        }
    }
    return 0;
}

void model_take_sizes (model_t *m, const weights_t *w)
{
    m->desc.input_size = w->input_size;
    m->desc.output_size = w->output_size;
    m->desc.window = w->window;
    m->desc.step_size = w->step_size;
}

/* The bytes a request of ROWS rows of ROW_BYTES each may take. */
static uint64_t s_request_bytes (uint64_t rows, uint64_t row_bytes) { return rows * row_bytes + REQUEST_FRAMING; }

/* Rows of ROW_BYTES that fit a message of MESSAGE_BYTES. */
static uint64_t s_rows_fitting (uint64_t message_bytes, uint64_t row_bytes)
{
    return message_bytes > REQUEST_FRAMING ? (message_bytes - REQUEST_FRAMING) / row_bytes : 0;
}

/* A fix for a max_rows whose requests do not fit MAX_MESSAGE_BYTES, within the keys' ranges (max_rows
 * 1 to 4096, max_message_bytes up to CONFIG_MAX_MESSAGE_BYTES, an LSTM's window 1 and up): fewer rows
 * when one fits, else a larger message, else both, else (an LSTM whose one window is too large for
 * any message) a shorter window. */
static void s_message_size_advice (const model_config_t *cfg, uint32_t input_size, uint32_t step_size,
                                   uint32_t max_message_bytes, char *out, size_t len)
{
    const uint64_t row = 4ull * input_size, need = s_request_bytes (cfg->max_rows, row);
    const uint64_t fit = s_rows_fitting (max_message_bytes, row), fit_most = s_rows_fitting (CONFIG_MAX_MESSAGE_BYTES, row);
    const uint64_t window = step_size ? s_rows_fitting (CONFIG_MAX_MESSAGE_BYTES, 4ull * step_size) : 0;
    if (fit >= 1 && need <= CONFIG_MAX_MESSAGE_BYTES)
        snprintf (out, len, "lower max_rows to %llu or raise max_message_bytes to %llu", (unsigned long long) fit,
                  (unsigned long long) need);
    else if (fit >= 1)
        snprintf (out, len, "lower max_rows to %llu", (unsigned long long) fit);
    else if (need <= CONFIG_MAX_MESSAGE_BYTES)
        snprintf (out, len, "not one row fits: raise max_message_bytes to %llu", (unsigned long long) need);
    else if (fit_most >= 1)
        snprintf (out, len, "not one row fits: lower max_rows to %llu and raise max_message_bytes to %llu",
                  (unsigned long long) fit_most, (unsigned long long) s_request_bytes (fit_most, row));
    else if (window >= 1)
        snprintf (out, len, "one window of %u steps is over the largest message (%d bytes): lower window to %llu%s and "
                  "raise max_message_bytes to %llu", cfg->window, CONFIG_MAX_MESSAGE_BYTES, (unsigned long long) window,
                  cfg->max_rows > 1 ? ", max_rows to 1" : "",
                  (unsigned long long) s_request_bytes (1, window * 4ull * step_size));
    else
        snprintf (out, len, "one row is over the largest message (%d bytes): no max_message_bytes serves this model",
                  CONFIG_MAX_MESSAGE_BYTES);
}

static int s_check_request_size (const model_config_t *cfg, uint32_t input_size, uint32_t step_size,
                                 uint32_t max_message_bytes, char *err, size_t errlen)
{
    uint64_t need = s_request_bytes (cfg->max_rows, 4ull * input_size);
    if (need <= max_message_bytes)
        return 0;
    char advice[256];
    s_message_size_advice (cfg, input_size, step_size, max_message_bytes, advice, sizeof advice);
    sig_set_error (err, errlen, "model \"%s\": max_rows: a request of %u rows x %u features takes up to %llu "
                   "bytes, over server.max_message_bytes (%u); %s", cfg->name, cfg->max_rows, input_size,
                   (unsigned long long) need, max_message_bytes, advice);
    return -1;
}

int model_check_request_size (const model_config_t *cfg, const weights_t *w, uint32_t max_message_bytes, char *err,
                              size_t errlen)
{
    return s_check_request_size (cfg, w->input_size, w->step_size, max_message_bytes, err, errlen);
}

/* A request of max_rows rows that ZeroMQ would drop for its size could never be answered. */
int model_check_message_size (const model_t *m, uint32_t max_message_bytes, char *err, size_t errlen)
{
    return s_check_request_size (&m->desc.cfg, m->desc.input_size, m->desc.step_size, max_message_bytes, err, errlen);
}

void model_instance_init (model_t *m, uint32_t i)
{
    const model_config_t *cfg = &m->desc.cfg;
    instance_t *in = &m->instances[i];
    in->model = m;
    in->index = i;
    in->device = m->iface->device == BACKEND_DEVICE_GPU ? cfg->devices[i % cfg->device_count] : -1;
    spin_init (&in->spin, m->spin_ns);
}

void model_shared_init (instance_shared_t *sh)
{
    atomic_init (&sh->stop, false);
    atomic_init (&sh->abort, false);
    atomic_init (&sh->available, true);
    atomic_init (&sh->served, 0);
    atomic_init (&sh->warm_runs, 0);
    for (uint32_t k = 0; k < LANES_MAX; k++)
        atomic_init (&sh->lanes[k].rows_taken, 0);
    atomic_init (&sh->busy_since, 0);
    atomic_init (&sh->claim, 0);
    snprintf (sh->state, sizeof sh->state, "serving");
}

int model_instance_buffers (model_t *m, instance_t *in, char *err, size_t errlen)
{
    const model_config_t *cfg = &m->desc.cfg;
    const uint32_t rows = backend_rows (cfg);
    if (!(in->batch_in = floats_zeroed ((size_t) rows * m->desc.input_size))
        || !(in->batch_out = floats_zeroed ((size_t) rows * m->desc.output_size))
        || !(in->warm_in = floats_zeroed (m->desc.input_size)) || !(in->taken = calloc (m->batch_rows, sizeof *in->taken))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory for instance %u", cfg->name, in->index);
        return -1;
    }
    if ((m->desc.can & MODEL_CAN_STREAM)
        && (!(in->streams = streams_new (backend_stream_slots (cfg), (uint64_t) cfg->stream_idle_s * 1000000000ull))
            || !(in->history_entry = malloc ((backend_stream_slots (cfg) + 1) * sizeof *in->history_entry)))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory for instance %u's streams", cfg->name, in->index);
        return -1;
    }
    for (uint32_t s = 0; in->history_entry && s < backend_stream_slots (cfg); s++)
        in->history_entry[s] = -1;
    return 0;
}

int model_start_worker (model_t *m, instance_t *in, char *err, size_t errlen)
{
    if (pthread_create (&in->thread, NULL, worker_main, in) != 0) {
        sig_set_error (err, errlen, "model \"%s\": cannot start the worker of instance %u", m->desc.cfg.name, in->index);
        return -1;
    }
    in->started = true;
    return 0;
}

static void s_log_loaded (const model_t *m, bool derived)
{
    char placement[512] = "";
    size_t used = 0;
    for (uint32_t i = 0; i < m->instance_count && used < sizeof placement; i++) {
        const instance_t *in = &m->instances[i];
        char where[80] = "cpu";
        if (in->device >= 0)
            snprintf (where, sizeof where, "gpu %d", in->device);
        const uint32_t green = atomic_load (&in->green_sms);
        if (green)
            snprintf (where + strlen (where), sizeof where - strlen (where), " in a green context of %u SMs", green);
        used += (size_t) snprintf (placement + used, sizeof placement - used, "%s%s%s", i ? ", " : "", where,
                                   m->where->suffix);
        if (in->cpu_count && used < sizeof placement)
            used += (size_t) snprintf (placement + used, sizeof placement - used, " on cpu %d%s", in->cpus[0],
                                       in->cpu_count > 1 ? "+" : "");
    }
    const model_desc_t *d = &m->desc;
    char path[96 + sizeof d->split] = "";
    if (d->isa[0] || d->cfg.weight_dtype != WEIGHT_DTYPE_F32)
        snprintf (path, sizeof path, " (%s%s%s weights%s%s)", d->isa, d->isa[0] ? ", " : "",
                  weight_dtype_name (d->cfg.weight_dtype), d->split[0] ? "; split: " : "", d->split);
    log_info ("model %s version %s: %u -> %u, backend %s (%s), kernel %s%s, max_rows %u, max_batch_rows %u, "
              "%u instance(s) [%s]; a launch takes %.1f us + %.2f us a row%s; max_queue_us %u, queue_depth %u%s; "
              "request buffers %u x %u rows + %u x %u rows%s (%.1f MiB; %.1f MiB resident, the rest as a deeper "
              "queue first needs it)",
              d->cfg.name, d->cfg.version, d->input_size, d->output_size, m->iface->name, d->selected_by,
              model_kernel_name (m), path, m->max_rows, m->batch_rows, m->instance_count, placement, d->launch_ns / 1e3,
              d->row_ns / 1e3, !m->inline_ns ? "" : model_launch_ns (m, 1) <= m->inline_ns ? " (run on the front when idle)"
                                                  : " (over server.inline_us: never run on the front)",
              d->cfg.max_queue_us, d->cfg.queue_depth, derived ? " (derived)" : "", m->job_count,
              m->buffer_rows, m->large_count, m->max_rows, m->lane_count > 1 ? " for each front" : "",
              s_buffer_mib (m), s_buffer_mib (m) * s_warm_jobs (m) * m->buffer_rows
                                / ((double) m->job_count * m->buffer_rows + (double) m->large_count * m->max_rows));
}

void model_take_plan (model_t *m, const model_plan_t *plan)
{
    m->given = plan->given;
    if (!plan->measured)
        return;
    snprintf (m->desc.selected_by, sizeof m->desc.selected_by, "measurement");
    m->desc.candidate_count = (uint32_t) plan->candidate_count;
    memcpy (m->desc.candidates, plan->candidates, sizeof m->desc.candidates);
}

/* INLINE_FRONT_CONTEXT: each front's own backend context, from the weights the load kept. */
static int s_front_contexts (model_t *m, char *err, size_t errlen)
{
    for (uint32_t k = 0; k < m->lane_count; k++)
        if (!(m->lanes[k].front_impl = m->iface->load (m->weights, &m->desc.cfg, 0, err, errlen)))
            return -1;
    return 0;
}

model_t *model_load (const model_config_t *cfg, const model_plan_t *plan, const placement_t *where,
                     const model_env_t *env, char *err, size_t errlen)
{
    model_t *m = calloc (1, sizeof *m);
    instance_t *instances = m ? calloc (cfg->instances, sizeof *instances) : NULL;
    if (!instances) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        free (m);
        return NULL;
    }
    m->given = *cfg;
    m->desc.cfg = *cfg;
    m->where = where;
    m->devices = env->devices;
    m->busy_poll = env->busy_poll;
    m->spin_ns = env->spin_ns;
    m->stats = env->stats;
    m->stats_slot = STATS_UNKNOWN;
    m->drift = &m->own_drift;
    m->lane_count = env->lanes ? env->lanes : 1;
    m->max_message_bytes = env->max_message_bytes;
    m->ring_jobs = env->ring_jobs;
    m->instance_count = cfg->instances;
    m->instances = instances;
    for (uint32_t i = 0; i < m->instance_count; i++)
        m->instances[i].own.wake.fd = -1;
    /* the row limits: what auto chooses leaves them as configured */
    m->max_rows = cfg->max_rows;
    m->batch_rows = cfg->max_batch_rows;
    m->buffer_rows = cfg->buffer_rows ? cfg->buffer_rows : m->max_rows;
    if (where->load (m, env, err, errlen) != 0 || model_check_message_size (m, m->max_message_bytes, err, errlen) != 0)
        goto failed;
    if (plan)
        model_take_plan (m, plan);
    snprintf (m->kernel_names[0], sizeof m->kernel_names[0], "%s", m->desc.kernel);
    /* Run to completion on a front (server.inline_us), decided here alone: whether from what the model
     * can do, how from where it runs. */
    m->inline_way = env->inline_us && (m->desc.can & MODEL_CAN_INLINE) ? where->inline_way (m, env) : INLINE_NEVER;
    m->inline_ns = m->inline_way != INLINE_NEVER ? (uint64_t) env->inline_us * 1000 : 0;
    if (m->inline_way == INLINE_FRONT_CONTEXT && s_front_contexts (m, err, errlen) != 0)
        goto failed;
    weights_destroy (&m->weights);
    return m;
failed:
    model_destroy (&m);
    return NULL;
}

/* A type with streams whose instances run in device processes: IN's stream history (stream_history.h)
 * beside its shared state, where it outlives a lost process: stream_history streams (0: max_streams)
 * over the instances, each of window x step_size floats. Elsewhere nothing loses a worker's streams. */
static int s_history_init (model_t *m, instance_t *in, char *err, size_t errlen)
{
    const model_config_t *cfg = &m->desc.cfg;
    if (!(m->desc.can & MODEL_CAN_STREAM) || !m->where->loses_workers)
        return 0;
    const uint32_t total = cfg->stream_history ? cfg->stream_history : cfg->max_streams;
    const uint32_t streams = (total + m->instance_count - 1) / m->instance_count;
    const size_t bytes = stream_history_bytes (streams, m->desc.window, m->desc.step_size);
    void *block = m->where->alloc (m, bytes);
    if (!block) {
        sig_set_error (err, errlen, "model \"%s\": the shared region is full (instance %u's stream history of %u "
                       "streams, %.1f MiB: lower stream_history)", cfg->name, in->index, streams, bytes / 1048576.0);
        return -1;
    }
    in->sh->history = stream_history_init (block, streams, m->desc.window, m->desc.step_size,
                                           (uint64_t) cfg->stream_idle_s * 1000000000ull);
    return 0;
}

int model_serve (model_t *m, char *err, size_t errlen)
{
    model_config_t *cfg = &m->desc.cfg;
    m->max_queue_ns = (uint64_t) cfg->max_queue_us * 1000;
    const bool derived = cfg->queue_depth == 0;
    if (derived)
        cfg->queue_depth = s_queue_depth_default (m);
    if (s_jobs_init (m, err, errlen) != 0)
        return -1;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (m->where->share (m, in, err, errlen) != 0 || s_history_init (m, in, err, errlen) != 0)
            return -1;
        in->wake = &in->sh->wake;
    }
    if (m->where->start (m, err, errlen) != 0)
        return -1;
    if (m->stats) {
        int slot = stats_slot (m->stats, cfg->name);
        m->stats_slot = slot < 0 ? STATS_UNKNOWN : slot;
    }
    s_log_loaded (m, derived);
    return 0;
}

void model_destroy (model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    model_t *m = *self_p;
    if (m->fallback) {      /* its workers hold the model's jobs: first */
        for (uint32_t i = 0; i < m->fallback->instance_count; i++)
            if (m->fallback->instances[i].sh && m->where->loses_workers)
                m->fallback->instances[i].sh->history = NULL;   /* the model's (fallback.c), freed below */
        model_destroy (&m->fallback);
    }
    if (m->where->release)      /* its workers elsewhere: they stop there */
        m->where->release (m);
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (in->started) {
            atomic_store (&in->sh->stop, true);
            waker_wake (&in->sh->wake);
            pthread_join (in->thread, NULL);
        } else if (in->group)
            group_leave (in);
    }
    for (uint32_t k = 0; k < m->lane_count; k++)
        if (m->lanes[k].front_impl)
            m->iface->destroy (&m->lanes[k].front_impl);
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (in->impl)
            m->iface->destroy (&in->impl);
        if (in->sh && in->sh->history)
            m->where->free (m, in->sh->history);
        if (in->sh)
            m->where->unshare (m, in);
        free (in->history_entry);
        free (in->batch_in);
        free (in->batch_out);
        free (in->warm_in);
        free (in->taken);
        streams_destroy (&in->streams);
    }
    for (uint32_t k = 0; k < m->lane_count; k++) {
        lane_t *l = &m->lanes[k];
        m->where->free (m, l->jobs);
        m->where->free (m, l->job_floats);
        m->where->free (m, l->large_floats);
        free (l->free_jobs);
        free (l->large_free);
    }
    weights_destroy (&m->weights);
    free (m->instances);
    free (m);
    *self_p = NULL;
}

const char *model_name (const model_t *m) { return m->desc.cfg.name; }
const char *model_version (const model_t *m) { return m->desc.cfg.version; }
const char *model_backend_name (const model_t *m) { return m->iface->name; }
const char *model_kernel_name (const model_t *m) { return m->kernel_names[atomic_load (&m->kernel_at) & 1u]; }
uint32_t model_input_size (const model_t *m) { return m->desc.input_size; }
uint32_t model_output_size (const model_t *m) { return m->desc.output_size; }
uint32_t model_max_rows (const model_t *m) { return m->max_rows; }
uint32_t model_instance_count (const model_t *m) { return m->instance_count; }
uint32_t model_queue_depth (const model_t *m) { return m->desc.cfg.queue_depth; }
model_type_t model_type (const model_t *m) { return m->desc.cfg.type; }
uint32_t model_window (const model_t *m) { return m->desc.window; }
uint32_t model_step_size (const model_t *m) { return m->desc.step_size; }
bool model_keeps_streams (const model_t *m) { return (m->desc.can & MODEL_CAN_STREAM) != 0; }
const model_config_t *model_config (const model_t *m) { return &m->given; }
int model_stats_slot (const model_t *m) { return m->stats_slot; }

bool model_available (const model_t *m)
{
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (atomic_load_explicit (&m->instances[i].sh->available, memory_order_relaxed))
            return true;
    return false;
}

bool model_fallback (const model_t *m, uint32_t *instances, uint64_t *served, bool *active)
{
    const model_t *fb = m->fallback;
    *instances = 0;
    *served = 0;
    *active = false;
    if (!fb)
        return false;
    *instances = fb->instance_count;
    for (uint32_t i = 0; i < fb->instance_count; i++)
        *served += atomic_load_explicit (&fb->instances[i].sh->served, memory_order_relaxed);
    *active = !model_available (m) && model_available (fb);
    return true;
}

bool model_serving (const model_t *m) { return model_available (m) || (m->fallback && model_available (m->fallback)); }

void model_describe (model_t *m, model_info_t *info)
{
    uint64_t fallback_served;
    model_fallback (m, &info->fallback_instances, &fallback_served, &info->fallback_active);
    info->name = m->desc.cfg.name;
    info->version = m->desc.cfg.version;
    info->type = model_type_name (m->desc.cfg.type);
    info->backend = m->iface->name;
    info->kernel = model_kernel_name (m);
    info->isa = m->desc.isa;
    info->split = m->desc.split;
    info->weight_dtype = weight_dtype_name (m->desc.cfg.weight_dtype);
    info->selected_by = m->desc.selected_by;
    info->input_size = m->desc.input_size;
    info->output_size = m->desc.output_size;
    info->max_rows = m->max_rows;
    info->max_batch_rows = m->batch_rows;
    info->queue_depth = m->desc.cfg.queue_depth;
    info->max_queue_us = m->desc.cfg.max_queue_us;
    info->launch_ns = m->desc.launch_ns;
    info->row_ns = m->desc.row_ns;
    info->instances = m->instance_count;
    info->window = m->desc.window;
    info->step_size = m->desc.step_size;
    info->available = model_available (m);
    info->candidate_count = m->desc.candidate_count;
    info->candidates = m->desc.candidates;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        model_instance_info_t *ii = &info->instance[i];
        ii->index = i;
        ii->device = in->device;
        ii->available = model_instance_available (m, i);
        snprintf (ii->state, sizeof ii->state, "%s", model_instance_state (m, i));
        ii->requests = atomic_load_explicit (&in->sh->served, memory_order_relaxed);
        ii->warm_runs = atomic_load_explicit (&in->sh->warm_runs, memory_order_relaxed);
        ii->green_sms = atomic_load_explicit (&in->green_sms, memory_order_relaxed);
    }
}

bool model_instance_available (const model_t *m, uint32_t i) { return atomic_load (&m->instances[i].sh->available); }
/* The text is written once, before available drops (release), so it is read only after seeing
 * the drop (acquire): never while being written. */
const char *model_instance_state (const model_t *m, uint32_t i)
{
    return atomic_load (&m->instances[i].sh->available) ? "serving" : m->instances[i].sh->state;
}
bool model_stream_history (const model_t *m, uint64_t *rebuilds, uint64_t *evictions)
{
    *rebuilds = *evictions = 0;
    bool kept = false;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        const stream_history_t *h = m->instances[i].sh ? m->instances[i].sh->history : NULL;
        if (h) {
            kept = true;
            *rebuilds += stream_history_rebuilds (h);
            *evictions += stream_history_evictions (h);
        }
    }
    return kept;
}
uint64_t model_instance_requests (const model_t *m, uint32_t i) { return atomic_load (&m->instances[i].sh->served); }
int model_instance_device (const model_t *m, uint32_t i) { return m->instances[i].device; }

backend_model_t *model_backend_handle (model_t *m) { return m->instances[0].impl; }
backend_model_t *model_instance_handle (model_t *m, uint32_t i) { return m->instances[i].impl; }

sig_status_t model_infer_instance (model_t *m, uint32_t i, const float *in, uint32_t rows, float *out, char *err,
                                   size_t errlen)
{
    instance_t *in_ = &m->instances[i];
    if (!atomic_load (&in_->sh->available)) {
        sig_set_error (err, errlen, "model \"%s\" is unavailable on instance %u: %s", m->desc.cfg.name, i, in_->sh->state);
        return SIG_UNAVAILABLE;
    }
    sig_status_t st = m->iface->infer (in_->impl, in, rows, out, err, errlen);
    if (st == SIG_UNAVAILABLE) {
        snprintf (in_->sh->state, sizeof in_->sh->state, "%.127s", err);
        atomic_store (&in_->sh->available, false);
        log_error ("model %s instance %u marked unavailable: %s", m->desc.cfg.name, i, err);
    }
    return st;
}

sig_status_t model_infer (model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    return model_infer_instance (m, 0, in, rows, out, err, errlen);
}
