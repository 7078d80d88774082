/* A model's lifecycle (model.h): weights, backend choice, instances, workers, job pool. */
#define _GNU_SOURCE
#include "serving/model_impl.h"

#include "backends/autoselect.h"
#include "backends/backends.h"
#include "base/floats.h"
#include "base/log.h"
#include "weights/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes a packed InferRequest adds to its features: request id, model name, rows, deadline, tags. */
#define REQUEST_FRAMING 128

/* "use \"backend\": \"cpu\" or \"auto\"" for a model that cannot have the GPU it names, with the keys that go
 * only with a GPU backend changed too: a weight_dtype the CPU backend of its type does not hold, and
 * green_context, which is for "cuda" alone (every fix a message offers is one the load then accepts:
 * tests/test_config_advice.c). */
static const char *s_cpu_advice (const model_config_t *cfg, char *out, size_t len)
{
    const backend_iface_t *cpu = backends_built (cfg->type, BACKEND_CPU);
    const bool dtype = cpu && !backend_holds (cpu, cfg->weight_dtype);
    snprintf (out, len, "use \"backend\": \"cpu\" or \"auto\"%s%s%s%s", dtype || cfg->green_context ? " with " : "",
              dtype ? "\"weight_dtype\": \"f32\"" : "", dtype && cfg->green_context ? " and " : "",
              cfg->green_context ? "\"green_context\": false" : "");
    return out;
}

/* The backend CFG names, or the one "auto" measures fastest (CFG updated to it). */
const backend_iface_t *model_choose_backend (model_t *m, model_config_t *cfg, const weights_t *w, char *err,
                                             size_t errlen)
{
    if (cfg->backend != BACKEND_AUTO) {
        char why[256], advice[160];
        const backend_iface_t *iface = backends_find (cfg->type, cfg->backend, why, sizeof why);
        if (!iface) {
            sig_set_error (err, errlen, "model \"%s\": backend \"%s\": %s; %s", cfg->name,
                           backend_kind_name (cfg->backend), why, s_cpu_advice (cfg, advice, sizeof advice));
            return NULL;
        }
        if (!backend_holds (iface, cfg->weight_dtype)) {
            /* the type's other backend where it holds the type, as a whole, and can load (the CUDA LSTM
             * kernel holds f16 and bf16; the MLP's, one kernel of them) */
            const backend_kind_t other = cfg->backend == BACKEND_CPU ? BACKEND_CUDA : BACKEND_CPU;
            const backend_iface_t *holds = backends_find (cfg->type, other, why, sizeof why);
            const model_type_info_t *type = model_type_info (cfg->type);
            const bool kernels = model_type_can (cfg->type, MODEL_CAP_CUDA_KERNELS);
            char what[64], offer[128] = "", held[64];
            if (kernels)
                snprintf (what, sizeof what, "%s", cfg->backend == BACKEND_CPU ? cpu_kernel_name (cfg->cpu_kernel)
                                                                                : cuda_kernel_name (cfg->kernel));
            else
                snprintf (what, sizeof what, "the %s %s", type->title, cfg->backend == BACKEND_CPU ? "loop" : "kernel");
            if (!kernels && holds && backend_holds (holds, cfg->weight_dtype))
                snprintf (offer, sizeof offer, ", or \"backend\": \"%s\" (its %s kernel holds f16 and bf16)",
                          backend_kind_name (other), type->title);
            sig_set_error (err, errlen, "model \"%s\": weight_dtype \"%s\": backend \"%s\" (%s) holds weights in %s; "
                           "use \"weight_dtype\": \"f32\"%s", cfg->name, weight_dtype_name (cfg->weight_dtype),
                           backend_kind_name (cfg->backend), what, backend_holds_text (iface, held, sizeof held), offer);
            return NULL;
        }
        int count = 0;
        if (iface->device == BACKEND_DEVICE_GPU && backends_gpu (NULL, 0)->device_count (&count, why, sizeof why) == 0)
            for (size_t i = 0; i < cfg->device_count; i++)
                if (cfg->devices[i] >= count) {
                    char devices[64] = "";
                    if (count == 1 && cfg->device_count == 1)
                        snprintf (devices, sizeof devices, "use \"device\": 0, or ");
                    else if (count > 1 && cfg->device_count == 1)
                        snprintf (devices, sizeof devices, "use a \"device\" from 0 to %d, or ", count - 1);
                    sig_set_error (err, errlen, "model \"%s\": backend \"%s\": device %d does not exist (this "
                                   "machine has %d); %s%s", cfg->name, backend_kind_name (cfg->backend),
                                   cfg->devices[i], count, devices, s_cpu_advice (cfg, advice, sizeof advice));
                    return NULL;
                }
        snprintf (m->selected_by, sizeof m->selected_by, "config");
        return iface;
    }
    const backend_iface_t *iface = autoselect_choose (w, cfg, cfg->devices[0], m->candidates, MODEL_CANDIDATES_MAX,
                                                      &m->candidate_count, err, errlen);
    snprintf (m->selected_by, sizeof m->selected_by, "measurement");
    return iface;
}

const backend_iface_t *model_preparer (const model_config_t *cfg)
{
    char why[256];
    /* no GPU touched here ("auto" never picks a kernel to prepare: NULL) */
    const backend_iface_t *iface = backends_built (cfg->type, cfg->backend);
    return iface && iface->prepare && iface->prepare (NULL, cfg, 0, why, sizeof why) == 1 ? iface : NULL;
}

int model_prepare_here (const model_config_t *cfg, int device, char *why, size_t whylen)
{
    const backend_iface_t *iface = model_preparer (cfg);
    if (!iface)
        return 0;
    weights_t *w = weights_load (cfg, why, whylen);
    if (!w)
        return -1;
    const int rc = iface->prepare (w, cfg, device, why, whylen);
    weights_destroy (&w);
    return rc;
}

/* Instance INDEX's placement and backend context (before the job pool exists: the timing that
 * sizes it runs on instance 0). */
int model_instance_load (model_t *m, instance_t *in, uint32_t index, const weights_t *w, char *err, size_t errlen)
{
    const model_config_t *cfg = &m->cfg;
    in->model = m;
    in->index = index;
    in->here = true;
    in->sh = &in->own;
    in->wake = &in->own.wake;
    in->device = m->iface->device == BACKEND_DEVICE_GPU ? cfg->devices[index % cfg->device_count] : -1;
    /* with "split" instance i owns the i-th share of cpus (config_split_cores): its worker the first */
    const uint32_t cores = m->iface->split ? config_split_cores (cfg) : 1;
    if (cfg->cpu_count) {
        in->cpus[0] = cfg->cpus[(size_t) index * cores % cfg->cpu_count];
        in->cpu_count = 1;
    } else if (in->device >= 0)     /* by default a GPU's workers run on the CPUs of its NUMA node */
        in->cpu_count = backends_gpu (NULL, 0)->device_cpus (in->device, in->cpus, CONFIG_MAX_CPUS);
    atomic_init (&in->sh->stop, false);
    atomic_init (&in->sh->abort, false);
    atomic_init (&in->sh->available, true);
    atomic_init (&in->sh->served, 0);
    atomic_init (&in->sh->warm_runs, 0);
    for (uint32_t k = 0; k < LANES_MAX; k++)
        atomic_init (&in->sh->lanes[k].rows_taken, 0);
    in->sh->wake.fd = -1;
    atomic_init (&in->sh->busy_since, 0);
    atomic_init (&in->sh->claim, 0);
    spin_init (&in->spin, m->spin_ns);
    snprintf (in->sh->state, sizeof in->sh->state, "serving");
    in->impl = m->iface->load (w, cfg, in->device < 0 ? 0 : in->device, err, errlen);
    atomic_init (&in->green_sms, in->impl && m->iface->green_sms ? m->iface->green_sms (in->impl) : 0u);
    if (in->impl && cores > 1
        && m->iface->split (in->impl, &cfg->cpus[(size_t) index * cores], cores, cfg, err, errlen) != 0)
        return -1;
    return in->impl ? 0 : -1;
}

/* Its rings (which hold every job of the model), buffers and streams. */
int model_instance_queues (model_t *m, instance_t *in, char *err, size_t errlen)
{
    const model_config_t *cfg = &m->cfg;
    uint32_t rows = backend_rows (cfg);
    const bool own = in->sh == &in->own;    /* else the server made them in the shared region */
    bool rings = true;
    for (uint32_t k = 0; own && k < m->lane_count; k++)
        rings = rings && ring_init (&in->sh->lanes[k].requests, m->job_count) == 0
                && ring_init (&in->sh->lanes[k].done, m->job_count) == 0;
    if ((own && (!rings || waker_init (&in->sh->wake) != 0)) || !(in->batch_in = floats_zeroed ((size_t) rows * m->input_size))
        || !(in->batch_out = floats_zeroed ((size_t) rows * m->output_size))
        || !(in->warm_in = floats_zeroed (m->input_size)) || !(in->taken = calloc (m->batch_rows, sizeof *in->taken))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory for instance %u", cfg->name, in->index);
        return -1;
    }
    if (model_type_can (cfg->type, MODEL_CAP_STREAM) && !m->iface->stream_step) {
        sig_set_error (err, errlen, "model \"%s\": backend \"%s\" serves \"type\": \"%s\" without its stream entries",
                       cfg->name, m->iface->name, model_type_name (cfg->type));
        return -1;
    }
    if (model_type_can (cfg->type, MODEL_CAP_STREAM)
        && !(in->streams = streams_new (backend_stream_slots (cfg), (uint64_t) cfg->stream_idle_s * 1000000000ull))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory for instance %u's streams", cfg->name, in->index);
        return -1;
    }
    return 0;
}

/* queue_depth when neither the model nor the server gives it: the requests that fit max_queue_us
 * at the timed cost of a full batch (at least one row each), at least QUEUE_DEPTH_MIN, at most
 * QUEUE_DEPTH_MAX and what QUEUE_BYTES_MAX of buffers hold. Admission by time refuses first; this
 * only bounds memory. */
#define QUEUE_DEPTH_MIN 64u
#define QUEUE_DEPTH_MAX 1024u
#define QUEUE_BYTES_MAX (64u << 20)
uint32_t model_queue_depth_default (const model_t *m)
{
    const uint64_t batch = m->batch_rows ? m->batch_rows : 1;
    const uint64_t per_row = (m->launch_ns + batch * m->row_ns) / batch;
    uint64_t depth = per_row ? m->max_queue_ns / per_row * m->instance_count : QUEUE_DEPTH_MAX;
    const uint64_t job_bytes = (uint64_t) m->buffer_rows * (m->input_size + m->output_size) * 4;
    if (depth > QUEUE_BYTES_MAX / job_bytes)
        depth = QUEUE_BYTES_MAX / job_bytes;
    if (depth > QUEUE_DEPTH_MAX)
        depth = QUEUE_DEPTH_MAX;
    return depth < QUEUE_DEPTH_MIN ? QUEUE_DEPTH_MIN : (uint32_t) depth;
}

uint32_t model_warm_jobs (const model_t *m)
{
    return m->job_count < JOB_INTAKE_TURN ? m->job_count : JOB_INTAKE_TURN;
}

/* The request buffers' memory over every lane, in MiB. */
double model_buffer_mib (const model_t *m)
{
    const double row = 4.0 * (m->input_size + m->output_size);
    return ((double) m->job_count * m->buffer_rows + (double) m->large_count * m->max_rows) * row * m->lane_count
           / 1048576.0;
}

uint32_t model_lanes (const server_config_t *server)
{
    return server->fronts == 0 ? 1 : server->fronts > LANES_MAX ? LANES_MAX : server->fronts;
}

int model_jobs_init (model_t *m, void *(*alloc) (void *arg, size_t bytes), void *arg, char *err, size_t errlen)
{
    /* Queued requests, what every worker can hold in one batch, and what the front admits before it
     * collects finished jobs again: a free job exists whenever the queue has room. */
    m->job_count = m->cfg.queue_depth + m->instance_count * m->batch_rows + JOB_INTAKE_TURN;
    /* Each job owns buffer_rows rows; a larger request borrows one of large_count buffers of
     * max_rows rows: memory grows with the queue times a typical request, not times the largest. */
    m->large_count = m->max_rows > m->buffer_rows ? m->cfg.large_buffers : 0;
    const size_t row = m->input_size + m->output_size;
    size_t per_job = ((size_t) m->buffer_rows * row + 15) & ~(size_t) 15;   /* 64-byte aligned starts */
    size_t per_large = ((size_t) m->max_rows * row + 15) & ~(size_t) 15;
    for (uint32_t k = 0; k < m->lane_count; k++) {     /* a pool for each front */
        lane_t *l = &m->lanes[k];
        l->jobs = alloc (arg, m->job_count * sizeof *l->jobs);
        l->free_jobs = calloc (m->job_count, sizeof *l->free_jobs);
        l->job_floats = alloc (arg, per_job * m->job_count * sizeof (float));
        l->large_free = calloc (m->large_count ? m->large_count : 1, sizeof *l->large_free);
        l->large_floats = m->large_count ? alloc (arg, per_large * m->large_count * sizeof (float)) : NULL;
        if (!l->jobs || !l->free_jobs || !l->job_floats || !l->large_free || (m->large_count && !l->large_floats)) {
            sig_set_error (err, errlen, "model \"%s\": out of memory for %u request buffers of %u rows and %u of %u "
                           "rows for each of %u front(s) (%.0f MiB; lower queue_depth, buffer_rows or large_buffers)",
                           m->cfg.name, m->job_count, m->buffer_rows, m->large_count, m->max_rows, m->lane_count,
                           model_buffer_mib (m));
            return -1;
        }
        for (uint32_t i = 0; i < m->large_count; i++)
            l->large_free[l->large_free_count++] = m->large_count - 1 - i;
        /* The jobs a steady load reuses (the free list is last-in first-out: the first are taken first)
         * are written now, so their first requests take no page fault; the rest become resident when
         * a deeper queue first needs them. */
        memset (l->job_floats, 0, per_job * model_warm_jobs (m) * sizeof (float));
        for (uint32_t i = 0; i < m->job_count; i++) {
            job_t *j = &l->jobs[i];
            j->lane = (uint8_t) k;
            j->features = j->own_features = l->job_floats + per_job * i;
            j->outputs = j->own_outputs = j->features + (size_t) m->buffer_rows * m->input_size;
            j->large = -1;
            j->instance = -1;
            l->free_jobs[l->free_count++] = &l->jobs[m->job_count - 1 - i];
        }
    }
    return 0;
}

void model_take_sizes (model_t *m, const weights_t *w)
{
    m->input_size = w->input_size;
    m->output_size = w->output_size;
    m->window = w->window;
    m->step_size = w->step_size;
    model_take_limits (m);
}

void model_take_limits (model_t *m)
{
    m->max_rows = m->cfg.max_rows;
    m->batch_rows = m->cfg.max_batch_rows;
    m->buffer_rows = m->cfg.buffer_rows ? m->cfg.buffer_rows : m->max_rows;
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
    return s_check_request_size (&m->cfg, m->input_size, m->step_size, max_message_bytes, err, errlen);
}

void *model_heap_alloc (void *arg, size_t bytes)
{
    (void) arg;
    return floats_mapped ((bytes + sizeof (float) - 1) / sizeof (float));
}

int model_start_workers (model_t *m, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (!in->here)
            continue;
        if (m->cfg.group[0] && !m->device_side) {
            if (group_join (in, err, errlen) != 0)
                return -1;
            continue;
        }
        if (pthread_create (&in->thread, NULL, worker_main, in) != 0) {
            sig_set_error (err, errlen, "model \"%s\": cannot start the worker of instance %u", m->cfg.name, i);
            return -1;
        }
        in->started = true;
    }
    return 0;
}

void model_log_loaded (const model_t *m, bool derived)
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
                                   m->remote ? " (device process)" : "");
        if (in->cpu_count && used < sizeof placement)
            used += (size_t) snprintf (placement + used, sizeof placement - used, " on cpu %d%s", in->cpus[0],
                                       in->cpu_count > 1 ? "+" : "");
    }
    char path[96 + sizeof m->split] = "";
    if (m->isa[0] || m->cfg.weight_dtype != WEIGHT_DTYPE_F32)
        snprintf (path, sizeof path, " (%s%s%s weights%s%s)", m->isa, m->isa[0] ? ", " : "",
                  weight_dtype_name (m->cfg.weight_dtype), m->split[0] ? "; split: " : "", m->split);
    log_info ("model %s version %s: %u -> %u, backend %s (%s), kernel %s%s, max_rows %u, max_batch_rows %u, "
              "%u instance(s) [%s]; a launch takes %.1f us + %.2f us a row%s; max_queue_us %u, queue_depth %u%s; "
              "request buffers %u x %u rows + %u x %u rows%s (%.1f MiB; %.1f MiB resident, the rest as a deeper "
              "queue first needs it)",
              m->cfg.name, m->cfg.version, m->input_size, m->output_size, m->iface->name, m->selected_by,
              model_kernel_name (m), path, m->max_rows, m->batch_rows, m->instance_count, placement, m->launch_ns / 1e3,
              m->row_ns / 1e3, !m->inline_ns ? "" : model_launch_ns (m, 1) <= m->inline_ns ? " (run on the front when idle)"
                                                  : " (over server.inline_us: never run on the front)",
              m->cfg.max_queue_us, m->cfg.queue_depth, derived ? " (derived)" : "", m->job_count,
              m->buffer_rows, m->large_count, m->max_rows, m->lane_count > 1 ? " for each front" : "",
              model_buffer_mib (m), model_buffer_mib (m) * model_warm_jobs (m) * m->buffer_rows
                                    / ((double) m->job_count * m->buffer_rows + (double) m->large_count * m->max_rows));
}

void model_take_plan (model_t *m, const model_plan_t *plan)
{
    m->given = plan->given;
    if (!plan->measured)
        return;
    snprintf (m->selected_by, sizeof m->selected_by, "measurement");
    m->candidate_count = plan->candidate_count;
    memcpy (m->candidates, plan->candidates, sizeof m->candidates);
}

int model_local_plan (const model_config_t *cfg, model_plan_t *plan, char *err, size_t errlen)
{
    memset (plan, 0, sizeof *plan);
    plan->given = plan->cfg = *cfg;
    if (cfg->backend != BACKEND_AUTO)
        return 0;
    model_t *m = calloc (1, sizeof *m);
    weights_t *w = m ? weights_load (cfg, err, errlen) : NULL;
    if (!m)
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
    const int rc = w && model_choose_backend (m, &plan->cfg, w, err, errlen) ? 0 : -1;
    if (rc == 0) {
        plan->measured = true;
        plan->candidate_count = m->candidate_count;
        memcpy (plan->candidates, m->candidates, sizeof plan->candidates);
    }
    weights_destroy (&w);
    free (m);
    return rc;
}

/* A split model (its instances own several cores): a front may run its requests inline on an idle
 * instance's own context, leading its helpers, only where every front is pinned (server.cpus) to cores
 * none of the model's are: a front spinning on a helper's slice must never hold the core that helper
 * needs. Elsewhere the fronts keep contexts of their own, on one core. */
static bool s_split_inline (const model_t *m, const server_config_t *server)
{
    if (!m->iface->split || config_split_cores (&m->cfg) < 2 || server->cpu_count == 0)
        return false;
    for (size_t i = 0; i < server->cpu_count; i++)
        for (size_t k = 0; k < m->cfg.cpu_count; k++)
            if (server->cpus[i] == m->cfg.cpus[k]) {
                log_warn ("model %s: split: cpu %d is in server.cpus too: a front there shares it with this model's "
                          "worker or helper, which spins while calls come (give each its own cores)", m->cfg.name,
                          server->cpus[i]);
                return false;
            }
    return true;
}

model_t *model_local_new (const model_config_t *cfg, const model_plan_t *plan, const server_config_t *server,
                          stats_t *stats, char *err, size_t errlen)
{
    const uint32_t max_message_bytes = server->max_message_bytes;
    model_t *m = calloc (1, sizeof *m);
    if (!m) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        return NULL;
    }
    m->given = *cfg;
    m->cfg = *cfg;
    m->busy_poll = server->busy_poll;
    m->spin_ns = server->spin_cap_ns;
    m->stats = stats;
    m->stats_slot = STATS_UNKNOWN;
    m->drift = &m->own_drift;
    m->lane_count = model_lanes (server);
    weights_t *w = NULL;    /* before the first goto failed, which destroys it */
    if (cfg->group[0] && cfg->keep_warm_us) {
        sig_set_error (err, errlen, "model \"%s\": keep_warm_us: a model in a group (\"%s\") is served by the group's "
                       "workers, which keep no one model warm; remove keep_warm_us or group", cfg->name, cfg->group);
        goto failed;
    }
    if (!(w = weights_load (cfg, err, errlen)))
        goto failed;
    model_take_sizes (m, w);
    if (model_check_message_size (m, max_message_bytes, err, errlen) != 0)
        goto failed;
    if (!(m->iface = model_choose_backend (m, &m->cfg, w, err, errlen)))
        goto failed;
    if (plan)
        model_take_plan (m, plan);
    m->instance_count = cfg->instances;
    m->instances = calloc (m->instance_count, sizeof *m->instances);
    if (!m->instances) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        goto failed;
    }
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (model_instance_load (m, &m->instances[i], i, w, err, errlen) != 0)
            goto failed;
    /* The front's own context, for the requests it runs itself: types that hold nothing per instance
     * between requests (not a stream's window) and without keep_warm_us (which keeps the workers warm
     * for the next request: that request must then go to them). */
    if (server->inline_us && model_type_can (cfg->type, MODEL_CAP_INLINE) && !cfg->keep_warm_us) {
        if (s_split_inline (m, server))
            m->inline_shared = true;    /* the front leads the instance's split (its cores stay the model's) */
        else if (m->iface->device == BACKEND_DEVICE_CPU) {
            for (uint32_t k = 0; k < m->lane_count; k++)     /* one for each front */
                if (!(m->lanes[k].front_impl = m->iface->load (w, &m->cfg, 0, err, errlen)))
                    goto failed;
        } else
            m->inline_shared = true;    /* a GPU model: on an idle instance's context (worker_run_inline_on) */
        m->inline_ns = (uint64_t) server->inline_us * 1000;
    }
    weights_destroy (&w);
    m->max_queue_ns = (uint64_t) cfg->max_queue_us * 1000;
    if (model_time (m, err, errlen) != 0)
        goto failed;
    bool derived = m->cfg.queue_depth == 0;
    if (derived)
        m->cfg.queue_depth = model_queue_depth_default (m);
    if (model_jobs_init (m, model_heap_alloc, NULL, err, errlen) != 0)
        goto failed;
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (model_instance_queues (m, &m->instances[i], err, errlen) != 0)
            goto failed;
    snprintf (m->kernel_names[0], sizeof m->kernel_names[0], "%s", m->iface->kernel_name (m->instances[0].impl));
    snprintf (m->isa, sizeof m->isa, "%s", m->iface->isa ? m->iface->isa (m->instances[0].impl) : "");
    snprintf (m->split, sizeof m->split, "%s", m->iface->split_text ? m->iface->split_text (m->instances[0].impl) : "");
    if (model_start_workers (m, err, errlen) != 0)
        goto failed;
    if (stats) {
        int slot = stats_slot (stats, cfg->name);
        m->stats_slot = slot < 0 ? STATS_UNKNOWN : slot;
    }
    model_log_loaded (m, derived);
    return m;
failed:
    weights_destroy (&w);
    model_local_destroy (&m);
    return NULL;
}

void model_local_destroy (model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    model_t *m = *self_p;
    for (uint32_t i = 0; m->instances && i < m->instance_count; i++) {
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
    for (uint32_t i = 0; m->instances && i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (in->impl)
            m->iface->destroy (&in->impl);
        if (in->sh == &in->own) {
            for (uint32_t k = 0; k < LANES_MAX; k++) {
                ring_release (&in->own.lanes[k].requests);
                ring_release (&in->own.lanes[k].done);
            }
            waker_release (&in->own.wake);
        }
        free (in->batch_in);
        free (in->batch_out);
        free (in->warm_in);
        free (in->taken);
        streams_destroy (&in->streams);
    }
    if (!m->remote) {
        for (uint32_t k = 0; k < m->lane_count; k++) {
            floats_unmap ((float *) m->lanes[k].jobs);
            floats_unmap (m->lanes[k].job_floats);
            floats_unmap (m->lanes[k].large_floats);
        }
    }
    free (m->instances);
    for (uint32_t k = 0; k < m->lane_count; k++) {
        free (m->lanes[k].free_jobs);
        free (m->lanes[k].large_free);
    }
    free (m);
    *self_p = NULL;
}

const char *model_name (const model_t *m) { return m->cfg.name; }
const char *model_version (const model_t *m) { return m->cfg.version; }
const char *model_backend_name (const model_t *m) { return m->iface->name; }
const char *model_kernel_name (const model_t *m) { return m->kernel_names[atomic_load (&m->kernel_at) & 1u]; }
uint32_t model_input_size (const model_t *m) { return m->input_size; }
uint32_t model_output_size (const model_t *m) { return m->output_size; }
uint32_t model_max_rows (const model_t *m) { return m->max_rows; }
uint32_t model_instance_count (const model_t *m) { return m->instance_count; }
uint32_t model_queue_depth (const model_t *m) { return m->cfg.queue_depth; }
model_type_t model_type (const model_t *m) { return m->cfg.type; }
uint32_t model_window (const model_t *m) { return m->window; }
uint32_t model_step_size (const model_t *m) { return m->step_size; }
const model_config_t *model_config (const model_t *m) { return &m->given; }
int model_stats_slot (const model_t *m) { return m->stats_slot; }

bool model_available (const model_t *m)
{
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (atomic_load_explicit (&m->instances[i].sh->available, memory_order_relaxed))
            return true;
    return false;
}

void model_describe (model_t *m, model_info_t *info)
{
    info->name = m->cfg.name;
    info->version = m->cfg.version;
    info->type = model_type_name (m->cfg.type);
    info->backend = m->iface->name;
    info->kernel = model_kernel_name (m);
    info->isa = m->isa;
    info->split = m->split;
    info->weight_dtype = weight_dtype_name (m->cfg.weight_dtype);
    info->selected_by = m->selected_by;
    info->input_size = m->input_size;
    info->output_size = m->output_size;
    info->max_rows = m->max_rows;
    info->max_batch_rows = m->batch_rows;
    info->queue_depth = m->cfg.queue_depth;
    info->max_queue_us = m->cfg.max_queue_us;
    info->launch_ns = m->launch_ns;
    info->row_ns = m->row_ns;
    info->instances = m->instance_count;
    info->window = m->window;
    info->step_size = m->step_size;
    info->available = model_available (m);
    info->candidate_count = m->candidate_count;
    info->candidates = m->candidates;
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
uint64_t model_instance_requests (const model_t *m, uint32_t i) { return atomic_load (&m->instances[i].sh->served); }
int model_instance_device (const model_t *m, uint32_t i) { return m->instances[i].device; }

backend_model_t *model_backend_handle (model_t *m) { return m->instances[0].impl; }
backend_model_t *model_instance_handle (model_t *m, uint32_t i) { return m->instances[i].impl; }

sig_status_t model_infer_instance (model_t *m, uint32_t i, const float *in, uint32_t rows, float *out, char *err,
                                   size_t errlen)
{
    instance_t *in_ = &m->instances[i];
    if (!atomic_load (&in_->sh->available)) {
        sig_set_error (err, errlen, "model \"%s\" is unavailable on instance %u: %s", m->cfg.name, i, in_->sh->state);
        return SIG_UNAVAILABLE;
    }
    sig_status_t st = m->iface->infer (in_->impl, in, rows, out, err, errlen);
    if (st == SIG_UNAVAILABLE) {
        snprintf (in_->sh->state, sizeof in_->sh->state, "%.127s", err);
        atomic_store (&in_->sh->available, false);
        log_error ("model %s instance %u marked unavailable: %s", m->cfg.name, i, err);
    }
    return st;
}

sig_status_t model_infer (model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    return model_infer_instance (m, 0, in, rows, out, err, errlen);
}
