/* The server's side of a model whose instances run in device processes (serving/devices.h): the
 * model as the front sees it (its jobs, rings and drift in the shared region, no worker threads
 * here), loading and starting it in each device process it uses, and what happens to it when one
 * of those processes is lost and comes back. */
#define _GNU_SOURCE
#include "serving/model_impl.h"

#include "backends/backends.h"
#include "base/log.h"
#include "clock.h"
#include "serving/devices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DRIFT_AS_TIMED 1024u    /* model_time.c's DRIFT_ONE */

typedef struct {
    dev_request_t rq;
    dev_reply_t rp;
} call_t;

bool model_remote_wanted (const model_config_t *cfg)
{
    devices_t *d = devices_current ();
    if (!d)
        return false;
    if (cfg->backend == BACKEND_CPU)
        return devices_cpu_models_placed (d);
    return backends_gpu_built ();   /* "cuda", or "auto": measured where the GPU is */
}

/* The device process instance I of M runs in (M's cfg resolved; GPU: where its backend runs). */
static int s_device (const model_config_t *cfg, bool gpu, uint32_t i)
{
    return gpu ? cfg->devices[i % cfg->device_count] : DEVICE_CPU_TEST;
}

static uint64_t s_here (const model_config_t *cfg, bool gpu, int device)
{
    uint64_t mask = 0;
    for (uint32_t i = 0; i < cfg->instances; i++)
        if (s_device (cfg, gpu, i) == device)
            mask |= 1ull << i;
    return mask;
}

/* The distinct devices M's instances use, in instance order; how many. */
static size_t s_devices (const model_t *m, int *out)
{
    size_t n = 0;
    const bool gpu = m->iface->device == BACKEND_DEVICE_GPU;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        int d = s_device (&m->cfg, gpu, i), k = 0;
        while (k < (int) n && out[k] != d)
            k++;
        if (k == (int) n)
            out[n++] = d;
    }
    return n;
}

static void s_load_request (dev_request_t *rq, const model_t *m, const model_config_t *cfg, uint64_t here)
{
    memset (rq, 0, sizeof *rq);
    rq->op = DEV_LOAD;
    rq->token = (uintptr_t) m;
    rq->cfg = *cfg;
    rq->busy_poll = m->busy_poll;
    rq->spin_ns = m->spin_ns;
    rq->here = here;
}

/* DEV_PREPARE of CFG on DEVICE's process (started if need be); logged when not done. */
static void s_prepare_on (const model_config_t *cfg, int device)
{
    call_t *c = calloc (1, sizeof *c);
    char err[512] = "";
    if (!c)
        return;
    c->rq.op = DEV_PREPARE;
    c->rq.cfg = *cfg;
    const char *why = devices_call (devices_current (), device, &c->rq, &c->rp, err, sizeof err) != 0 ? err
                      : c->rp.prepared < 0                                                        ? c->rp.error
                                                                                                  : NULL;
    if (why)
        log_info ("model \"%s\": not prepared on device %d (%s); its load goes on without", cfg->name, device, why);
    free (c);
}

void model_remote_prepare (const model_config_t *cfg, bool gpu)
{
    for (uint32_t i = 0; i < cfg->instances; i++) {
        bool seen = false;
        for (uint32_t k = 0; k < i; k++)
            seen = seen || s_device (cfg, gpu, k) == s_device (cfg, gpu, i);
        if (!seen)
            s_prepare_on (cfg, s_device (cfg, gpu, i));
    }
}

/* DEV_START for DEVICE: the shared addresses of M's instances. */
static int s_start (model_t *m, int device, call_t *c, char *err, size_t errlen)
{
    const bool gpu = m->iface->device == BACKEND_DEVICE_GPU;
    memset (&c->rq, 0, sizeof c->rq);
    c->rq.op = DEV_START;
    c->rq.token = (uintptr_t) m;
    c->rq.here = s_here (&m->cfg, gpu, device);
    c->rq.job_count = m->job_count;
    for (uint32_t i = 0; i < m->instance_count; i++)
        c->rq.shared[i] = (uintptr_t) m->instances[i].sh;
    c->rq.drift = (uintptr_t) m->drift;
    c->rq.lane_count = m->lane_count;
    c->rq.inline_shared = m->inline_shared;
    for (uint32_t k = 0; k < m->lane_count; k++)
        c->rq.front[k] = (uintptr_t) devices_front_waker (devices_current (), k);
    return devices_call (devices_current (), device, &c->rq, &c->rp, err, errlen);
}

/* ------------------------------------------------------------ lost and back (supervisor thread) */

static void s_lost (void *arg, int device, const char *why)
{
    model_t *m = arg;
    const bool gpu = m->iface->device == BACKEND_DEVICE_GPU;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (s_device (&m->cfg, gpu, i) != device || !atomic_load (&in->sh->available))
            continue;
        snprintf (in->sh->state, sizeof in->sh->state, "device process lost (%.80s); starting it again", why);
        atomic_store (&in->sh->available, false);
        atomic_store (&in->sh->box_ready, false);   /* its mailbox went with it */
    }
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (s_device (&m->cfg, gpu, i) == device) {
            atomic_store (&m->instances[i].reclaimed, 0);
            atomic_store (&m->instances[i].lost, 1);
        }
    for (uint32_t k = 0; k < m->lane_count; k++)    /* each front answers what its lane held */
        atomic_store (&m->lanes[k].lost_pending, true);
}

static bool s_swept (void *arg, int device)
{
    model_t *m = arg;
    const bool gpu = m->iface->device == BACKEND_DEVICE_GPU;
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (s_device (&m->cfg, gpu, i) == device && atomic_load (&m->instances[i].lost) == 1)
            return false;
    return true;
}

/* Before any model rejoins DEVICE's new process (no persistent kernel resident there yet). */
static void s_prepare (void *arg, int device)
{
    const model_t *m = arg;
    if (model_preparer (&m->cfg))
        s_prepare_on (&m->cfg, device);
}

static int s_rejoin (void *arg, int device, char *err, size_t errlen)
{
    model_t *m = arg;
    const bool gpu = m->iface->device == BACKEND_DEVICE_GPU;
    call_t *c = calloc (1, sizeof *c);
    if (!c) {
        snprintf (err, errlen, "out of memory");
        return -1;
    }
    s_load_request (&c->rq, m, &m->cfg, s_here (&m->cfg, gpu, device));
    int rc = devices_call (devices_current (), device, &c->rq, &c->rp, err, errlen);
    const char *was = model_kernel_name (m);
    if (rc == 0 && strcmp (c->rp.kernel, was) != 0) {     /* e.g. specialised now: prepared before it rejoined */
        const uint32_t at = atomic_load (&m->kernel_at) + 1u;
        snprintf (m->kernel_names[at & 1u], sizeof m->kernel_names[0], "%s", c->rp.kernel);
        atomic_store (&m->kernel_at, at);
        log_info ("model \"%s\": kernel %s on device %d's new process (was %s)", m->cfg.name, c->rp.kernel, device, was);
    }
    if (rc == 0) {
        for (uint32_t i = 0; i < m->instance_count; i++)
            if (s_device (&m->cfg, gpu, i) == device) {
                atomic_store (&m->instances[i].sh->busy_since, 0);
                atomic_store (&m->instances[i].sh->claim, 0);   /* no front holds it: it was unavailable */
                atomic_store (&m->instances[i].green_sms, c->rp.green_sms[i]);
            }
        rc = s_start (m, device, c, err, errlen);
    }
    free (c);
    if (rc != 0)
        return -1;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (s_device (&m->cfg, gpu, i) != device)
            continue;
        snprintf (in->sh->state, sizeof in->sh->state, "serving");
        atomic_store (&in->lost, 0);
        atomic_store (&in->sh->available, true);
    }
    return 0;
}

static bool s_hung (void *arg, int device, uint64_t now)
{
    model_t *m = arg;
    const bool gpu = m->iface->device == BACKEND_DEVICE_GPU;
    const uint64_t limit = (uint64_t) (m->cfg.watchdog_ms ? m->cfg.watchdog_ms : 1000) * 1000000ull;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        const uint64_t since = atomic_load_explicit (&m->instances[i].sh->busy_since, memory_order_relaxed);
        if (s_device (&m->cfg, gpu, i) == device && since && now > since && now - since > limit) {
            log_error ("model %s instance %u: a launch has run %.0f ms, over watchdog_ms = %u", m->cfg.name, i,
                       (now - since) / 1e6, m->cfg.watchdog_ms);
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------------ load and release */

static void *s_region_alloc (void *arg, size_t bytes) { return devices_alloc (arg, bytes); }

/* Instance I's side of the region: its rings (every job of the model fits each), its futex waker. */
static int s_instance_shared (model_t *m, devices_t *d, uint32_t i, const int *cpus, const uint32_t *green)
{
    instance_t *in = &m->instances[i];
    in->model = m;
    in->index = i;
    in->here = false;
    in->device = m->iface->device == BACKEND_DEVICE_GPU ? m->cfg.devices[i % m->cfg.device_count] : -1;
    if (cpus[i] >= 0) {
        in->cpus[0] = cpus[i];
        in->cpu_count = 1;
    }
    atomic_init (&in->green_sms, green[i]);
    const size_t slots = ring_slots (m->job_count);
    instance_shared_t *sh = devices_alloc (d, sizeof *sh);
    if (!sh)
        return -1;
    memset (sh, 0, sizeof *sh);
    in->sh = sh;    /* from here model_remote_release frees what was made */
    for (uint32_t k = 0; k < m->lane_count; k++) {
        void **requests = devices_alloc (d, slots * sizeof (void *)), **done = devices_alloc (d, slots * sizeof (void *));
        if (!requests || !done) {
            devices_free (d, requests);
            devices_free (d, done);
            return -1;
        }
        ring_init_at (&sh->lanes[k].requests, requests, slots);
        ring_init_at (&sh->lanes[k].done, done, slots);
        atomic_init (&sh->lanes[k].rows_taken, 0);
    }
    waker_init_futex (&sh->wake);
    atomic_init (&sh->stop, false);
    atomic_init (&sh->abort, false);
    atomic_init (&sh->available, true);
    atomic_init (&sh->served, 0);
    atomic_init (&sh->warm_runs, 0);
    atomic_init (&sh->busy_since, 0);
    snprintf (sh->state, sizeof sh->state, "serving");
    in->wake = &sh->wake;
    atomic_init (&in->lost, 0);
    return 0;
}

/* M as the device process of its first instance resolved it (RP): sizes, kernel, timing, "auto"'s
 * measurements. */
static int s_take_reply (model_t *m, const dev_reply_t *rp, char *err, size_t errlen)
{
    m->cfg = rp->cfg;
    char why[768] = "";
    if (rp->on_gpu && !backends_gpu (why, sizeof why)) {
        sig_set_error (err, errlen, "model \"%s\": loaded in its device process, but this process cannot open the "
                       "GPU backend: %s", m->cfg.name, why);
        return -1;
    }
    m->iface = backends_built (m->cfg.type, rp->on_gpu ? BACKEND_CUDA : BACKEND_CPU);
    m->input_size = rp->input_size;
    m->output_size = rp->output_size;
    m->window = rp->window;
    m->step_size = rp->step_size;
    m->launch_ns = rp->launch_ns;
    m->row_ns = rp->row_ns;
    snprintf (m->kernel_names[0], sizeof m->kernel_names[0], "%s", rp->kernel);
    snprintf (m->selected_by, sizeof m->selected_by, "%s", rp->selected_by);
    m->candidate_count = rp->candidate_count;
    memcpy (m->candidates, rp->candidates, sizeof m->candidates);
    return 0;
}

int model_remote_plan (const model_config_t *cfg, model_plan_t *plan, char *err, size_t errlen)
{
    memset (plan, 0, sizeof *plan);
    plan->given = plan->cfg = *cfg;
    if (cfg->backend != BACKEND_AUTO)
        return 0;
    call_t *c = calloc (1, sizeof *c);
    if (!c) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        return -1;
    }
    c->rq.op = DEV_LOAD;
    c->rq.cfg = *cfg;
    c->rq.here = 1;     /* instance 0: where "auto" measures */
    c->rq.resolve_only = true;
    const int rc = devices_call (devices_current (), s_device (cfg, true, 0), &c->rq, &c->rp, err, errlen);
    if (rc == 0) {
        plan->cfg = c->rp.cfg;
        plan->measured = true;
        plan->candidate_count = c->rp.candidate_count;
        memcpy (plan->candidates, c->rp.candidates, sizeof plan->candidates);
    }
    free (c);
    return rc;
}

model_t *model_remote_new (const model_config_t *cfg, const model_plan_t *plan, const server_config_t *server,
                           stats_t *stats, char *err, size_t errlen)
{
    devices_t *d = devices_current ();
    call_t *c = calloc (1, sizeof *c);
    model_t *m = calloc (1, sizeof *m);
    if (!c || !m) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        free (c);
        free (m);
        return NULL;
    }
    m->given = *cfg;
    m->cfg = *cfg;
    m->remote = true;
    m->busy_poll = server->busy_poll;
    m->spin_ns = server->spin_cap_ns;
    m->stats = stats;
    m->stats_slot = STATS_UNKNOWN;
    m->lane_count = model_lanes (server);
    m->instance_count = cfg->instances;
    int loaded[DEVICES_MAX];
    size_t loaded_count = 0;
    /* The first instance's process loads and resolves it ("auto" measures there). */
    const bool asked_gpu = cfg->backend != BACKEND_CPU;
    const int first = s_device (cfg, asked_gpu, 0);
    s_load_request (&c->rq, m, cfg, s_here (cfg, asked_gpu, first));
    if (devices_call (d, first, &c->rq, &c->rp, err, errlen) != 0)
        goto failed;
    if (!c->rp.on_gpu && !devices_cpu_models_placed (d)) {
        /* "auto" chose the CPU: the server runs it itself, with what was measured */
        model_t *local = model_local_new (&c->rp.cfg, plan, server, stats, err, errlen);
        if (local && !plan) {   /* (a plan's measurement is the one model_local_new took) */
            local->given = *cfg;
            snprintf (local->selected_by, sizeof local->selected_by, "%s", c->rp.selected_by);
            local->candidate_count = c->rp.candidate_count;
            memcpy (local->candidates, c->rp.candidates, sizeof local->candidates);
        }
        free (c);
        free (m);
        return local;
    }
    if (c->rp.on_gpu == asked_gpu)
        loaded[loaded_count++] = first;
    if (s_take_reply (m, &c->rp, err, errlen) != 0)
        goto failed;
    if (plan)
        model_take_plan (m, plan);
    const bool shareable = c->rp.shareable;
    int cpus[CONFIG_MAX_INSTANCES];     /* each instance's CPU, as its device process pinned it */
    uint32_t green[CONFIG_MAX_INSTANCES];   /* and its green context's SMs */
    memcpy (cpus, c->rp.cpus, sizeof cpus);
    memcpy (green, c->rp.green_sms, sizeof green);
    m->drift = devices_alloc (d, sizeof *m->drift);
    m->instances = calloc (m->instance_count, sizeof *m->instances);
    if (!m->drift || !m->instances) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        goto failed;
    }
    atomic_store (m->drift, DRIFT_AS_TIMED);
    /* every other device its instances use loads them too (as resolved) */
    int devs[DEVICES_MAX];
    const size_t dev_count = s_devices (m, devs);
    const bool gpu = m->iface->device == BACKEND_DEVICE_GPU;
    for (size_t k = 0; k < dev_count; k++) {
        bool done = false;
        for (size_t l = 0; l < loaded_count; l++)
            done |= loaded[l] == devs[k];
        if (done)
            continue;
        s_load_request (&c->rq, m, &m->cfg, s_here (&m->cfg, gpu, devs[k]));
        if (devices_call (d, devs[k], &c->rq, &c->rp, err, errlen) != 0)
            goto failed;
        loaded[loaded_count++] = devs[k];
        for (uint32_t i = 0; i < m->instance_count; i++)
            if (s_device (&m->cfg, gpu, i) == devs[k]) {
                cpus[i] = c->rp.cpus[i];
                green[i] = c->rp.green_sms[i];
            }
    }
    model_take_limits (m);
    if (model_check_message_size (m, server->max_message_bytes, err, errlen) != 0)
        goto failed;
    /* Run to completion on the front: a persistent MLP, through its mailbox in the region (the front
     * makes no CUDA call); graphs need the device process's context, types holding streams never run
     * inline. */
    if (server->inline_us && shareable && model_type_can (m->cfg.type, MODEL_CAP_INLINE) && !m->cfg.keep_warm_us) {
        m->inline_shared = true;
        m->inline_ns = (uint64_t) server->inline_us * 1000;
    }
    m->max_queue_ns = (uint64_t) m->cfg.max_queue_us * 1000;
    const bool derived = m->cfg.queue_depth == 0;
    if (derived)
        m->cfg.queue_depth = model_queue_depth_default (m);
    if (model_jobs_init (m, s_region_alloc, d, err, errlen) != 0)
        goto failed;
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (s_instance_shared (m, d, i, cpus, green) != 0) {
            sig_set_error (err, errlen, "model \"%s\": the shared region is full (instance %u's rings)", cfg->name, i);
            goto failed;
        }
    /* tenants before the start: a process lost from here on brings the model back with it */
    for (size_t k = 0; k < dev_count; k++)
        devices_add_tenant (d, devs[k], &(dev_tenant_t) { .arg = m, .lost = s_lost, .swept = s_swept, .rejoin = s_rejoin,
                                                     .prepare = s_prepare,
                                                          .hung = s_hung });
    for (size_t k = 0; k < dev_count; k++)
        if (s_start (m, devs[k], c, err, errlen) != 0)
            goto failed;
    if (stats) {
        int slot = stats_slot (stats, cfg->name);
        m->stats_slot = slot < 0 ? STATS_UNKNOWN : slot;
    }
    model_log_loaded (m, derived);
    free (c);
    return m;
failed:
    free (c);
    model_remote_release (m);
    model_local_destroy (&m);
    return NULL;
}

void model_remote_release (model_t *m)
{
    devices_t *d = devices_current ();
    if (!d)
        return;
    int devs[DEVICES_MAX];
    const size_t dev_count = m->instances && m->iface ? s_devices (m, devs) : 0;
    for (size_t k = 0; k < dev_count; k++)
        devices_remove_tenant (d, devs[k], m);
    for (uint32_t i = 0; m->instances && i < m->instance_count; i++)
        if (m->instances[i].sh) {
            atomic_store (&m->instances[i].sh->stop, true);
            waker_wake (&m->instances[i].sh->wake);
        }
    call_t *c = calloc (1, sizeof *c);
    char err[512];
    for (size_t k = 0; c && k < dev_count; k++) {
        c->rq.op = DEV_UNLOAD;
        c->rq.token = (uintptr_t) m;
        if (devices_call (d, devs[k], &c->rq, &c->rp, err, sizeof err) != 0)
            log_warn ("model %s: unloading it from device %d: %s", m->cfg.name, devs[k], err);
    }
    free (c);
    for (uint32_t k = 0; k < m->lane_count; k++) {
        lane_t *l = &m->lanes[k];
        devices_free (d, l->jobs);
        devices_free (d, l->job_floats);
        devices_free (d, l->large_floats);
        l->jobs = NULL;
        l->job_floats = l->large_floats = NULL;
    }
    for (uint32_t i = 0; m->instances && i < m->instance_count; i++) {
        instance_shared_t *sh = m->instances[i].sh;
        if (sh) {
            for (uint32_t k = 0; k < m->lane_count; k++) {
                devices_free (d, sh->lanes[k].requests.items);
                devices_free (d, sh->lanes[k].done.items);
            }
            devices_free (d, sh);
        }
        m->instances[i].sh = NULL;
    }
    devices_free (d, (void *) m->drift);
    m->drift = NULL;
}
