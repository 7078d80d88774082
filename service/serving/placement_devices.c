/* A model whose instances run in device processes, the server's side (placement.h's
 * placement_devices; serving/devices.h): its load asks each device process its instances use to
 * load the instances placed there, and takes the model's description from the first one's reply as
 * it is (the device process filled it with placement_threads' load); its jobs, rings and drift lie
 * in the shared region and its workers run there (no worker thread here); and when one of those
 * processes is lost and comes back, the model goes and comes back with it. */
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

/* Whether CFG's backend (resolved: model_new measures "auto" first) runs on a GPU. */
static bool s_gpu (const model_config_t *cfg) { return cfg->backend != BACKEND_CPU; }

/* The device process instance I of CFG runs in (GPU: where its backend runs). A CPU model (test
 * builds) runs in the CPU device process, or, with devices [0, 1], its instances alternate between
 * two of them (devices.h: DEVICE_CPU_TEST_OTHER), so that one can be lost while the other serves. */
static int s_device (const model_config_t *cfg, bool gpu, uint32_t i)
{
    if (gpu)
        return cfg->devices[i % cfg->device_count];
    return cfg->device_count > 1 && cfg->devices[i % cfg->device_count] % 2 ? DEVICE_CPU_TEST_OTHER : DEVICE_CPU_TEST;
}

static uint64_t s_here (const model_config_t *cfg, bool gpu, int device)
{
    uint64_t mask = 0;
    for (uint32_t i = 0; i < cfg->instances; i++)
        if (s_device (cfg, gpu, i) == device)
            mask |= 1ull << i;
    return mask;
}

/* The distinct devices CFG's instances use, in instance order; how many. */
static size_t s_devices (const model_config_t *cfg, bool gpu, int *out)
{
    size_t n = 0;
    for (uint32_t i = 0; i < cfg->instances; i++) {
        int d = s_device (cfg, gpu, i), k = 0;
        while (k < (int) n && out[k] != d)
            k++;
        if (k == (int) n)
            out[n++] = d;
    }
    return n;
}

static void s_load_request (dev_request_t *rq, const model_t *m, uint64_t here)
{
    memset (rq, 0, sizeof *rq);
    rq->op = DEV_LOAD;
    rq->token = (uintptr_t) m;
    rq->cfg = m->desc.cfg;
    rq->busy_poll = m->busy_poll;
    rq->spin_ns = m->spin_ns;
    rq->max_message_bytes = m->max_message_bytes;
    rq->here = here;
}

/* DEV_PREPARE of CFG on DEVICE's process (started if need be); logged when not done. */
static void s_prepare_on (devices_t *devices, const model_config_t *cfg, int device)
{
    call_t *c = calloc (1, sizeof *c);
    char err[512] = "";
    if (!c)
        return;
    c->rq.op = DEV_PREPARE;
    c->rq.cfg = *cfg;
    const char *why = devices_call (devices, device, &c->rq, &c->rp, err, sizeof err) != 0 ? err
                      : c->rp.prepared < 0                                               ? c->rp.error
                                                                                         : NULL;
    if (why)
        log_info ("model \"%s\": not prepared on device %d (%s); its load goes on without", cfg->name, device, why);
    free (c);
}

/* DEV_START for DEVICE: the shared addresses of M's instances. */
static int s_start_on (model_t *m, int device, call_t *c, char *err, size_t errlen)
{
    memset (&c->rq, 0, sizeof c->rq);
    c->rq.op = DEV_START;
    c->rq.token = (uintptr_t) m;
    c->rq.here = s_here (&m->desc.cfg, s_gpu (&m->desc.cfg), device);
    c->rq.job_count = m->job_count;
    for (uint32_t i = 0; i < m->instance_count; i++)
        c->rq.shared[i] = (uintptr_t) m->instances[i].sh;
    c->rq.drift = (uintptr_t) m->drift;
    c->rq.lane_count = m->lane_count;
    c->rq.inline_way = m->inline_way;
    for (uint32_t k = 0; k < m->lane_count; k++)
        c->rq.front[k] = (uintptr_t) devices_front_waker (m->devices, k);
    return devices_call (m->devices, device, &c->rq, &c->rp, err, errlen);
}

/* What DEVICE's process reported of the instances it loaded (RP): their CPUs and green contexts. */
static void s_take_instances (model_t *m, int device, const dev_reply_t *rp)
{
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (s_device (&m->desc.cfg, s_gpu (&m->desc.cfg), i) == device) {
            instance_t *in = &m->instances[i];
            in->cpu_count = rp->cpus[i] >= 0 ? 1 : 0;
            in->cpus[0] = rp->cpus[i];
            atomic_store (&in->green_sms, rp->green_sms[i]);
        }
}

/* ------------------------------------------------------------ lost and back (supervisor thread) */

static void s_lost (void *arg, int device, const char *why)
{
    model_t *m = arg;
    const bool gpu = s_gpu (&m->desc.cfg);
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (s_device (&m->desc.cfg, gpu, i) != device || !atomic_load (&in->sh->available))
            continue;
        snprintf (in->sh->state, sizeof in->sh->state, "device process lost (%.80s); starting it again", why);
        atomic_store (&in->sh->available, false);
        atomic_store (&in->sh->box_ready, false);   /* its mailbox went with it */
    }
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (s_device (&m->desc.cfg, gpu, i) == device) {
            atomic_store (&m->instances[i].reclaimed, 0);
            atomic_store (&m->instances[i].lost, 1);
        }
    for (uint32_t k = 0; k < m->lane_count; k++)    /* each front answers what its lane held */
        atomic_store (&m->lanes[k].lost_pending, true);
    if (!model_available (m))
        model_fallback_note (m, true);
}

static bool s_swept (void *arg, int device)
{
    model_t *m = arg;
    const bool gpu = s_gpu (&m->desc.cfg);
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (s_device (&m->desc.cfg, gpu, i) == device && atomic_load (&m->instances[i].lost) == 1)
            return false;
    return true;
}

/* Before any model rejoins DEVICE's new process (no persistent kernel resident there yet). */
static void s_prepare_rejoin (void *arg, int device)
{
    const model_t *m = arg;
    if (model_preparer (&m->desc.cfg))
        s_prepare_on (m->devices, &m->desc.cfg, device);
}

/* Whether M's instances keep a kernel resident (a persistent MLP, its emulation in test builds, an
 * LSTM on a GPU): a spare process must hold none while it waits (its SMs, and the GPU's time shared
 * with the serving process's kernel), so such a model is parked there, or loads at the promotion. */
static bool s_resident (const model_t *m)
{
    return (m->desc.can & MODEL_CAN_SHARE_BOX) || (s_gpu (&m->desc.cfg) && m->desc.cfg.type == MODEL_TYPE_LSTM)
           || strncmp (m->desc.kernel, "persistent", 10) == 0;
}

/* The call that prepares DEVICE's spare for M (devices.h: stage): its load (a resident kernel parked
 * once loaded and warmed, where its backend can), or, for a resident kernel that cannot be parked,
 * its prepare (a module loaded, green contexts made: no kernel resident there yet). */
static bool s_stage (void *arg, int device, dev_request_t *rq)
{
    const model_t *m = arg;
    if (!s_resident (m) || (m->desc.can & MODEL_CAN_PARK)) {     /* parked: its kernel stopped once loaded */
        s_load_request (rq, m, s_here (&m->desc.cfg, s_gpu (&m->desc.cfg), device));
        rq->park = s_resident (m);
        return true;
    }
    if (!model_preparer (&m->desc.cfg))
        return false;
    memset (rq, 0, sizeof *rq);
    rq->op = DEV_PREPARE;
    rq->cfg = m->desc.cfg;
    return true;
}

static int s_rejoin (void *arg, int device, const dev_reply_t *loaded, char *err, size_t errlen)
{
    model_t *m = arg;
    const bool gpu = s_gpu (&m->desc.cfg);
    call_t *c = calloc (1, sizeof *c);
    if (!c) {
        snprintf (err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    if (loaded)     /* a promoted spare: loaded there already */
        c->rp = *loaded;
    else {
        s_load_request (&c->rq, m, s_here (&m->desc.cfg, gpu, device));
        rc = devices_call (m->devices, device, &c->rq, &c->rp, err, errlen);
    }
    const char *was = model_kernel_name (m);
    if (rc == 0 && strcmp (c->rp.desc.kernel, was) != 0) {    /* e.g. specialised now: prepared before it rejoined */
        const uint32_t at = atomic_load (&m->kernel_at) + 1u;
        snprintf (m->kernel_names[at & 1u], sizeof m->kernel_names[0], "%s", c->rp.desc.kernel);
        atomic_store (&m->kernel_at, at);
        log_info ("model \"%s\": kernel %s on device %d's new process (was %s)", m->desc.cfg.name, c->rp.desc.kernel,
                  device, was);
    }
    if (rc == 0) {
        for (uint32_t i = 0; i < m->instance_count; i++)
            if (s_device (&m->desc.cfg, gpu, i) == device) {
                atomic_store (&m->instances[i].sh->busy_since, 0);
                atomic_store (&m->instances[i].sh->claim, 0);   /* no front holds it: it was unavailable */
                atomic_store (&m->instances[i].green_sms, c->rp.green_sms[i]);
            }
        rc = s_start_on (m, device, c, err, errlen);
    }
    free (c);
    if (rc != 0)
        return -1;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (s_device (&m->desc.cfg, gpu, i) != device)
            continue;
        snprintf (in->sh->state, sizeof in->sh->state, "serving");
        atomic_store (&in->lost, 0);
        atomic_store (&in->sh->available, true);
    }
    model_fallback_note (m, false);
    return 0;
}

/* Whether a launch of M's on DEVICE has run too long at NOW: past watchdog_ms (0: 1000), or, where M
 * has a fallback (stall_ns) and DEVICE's standby is ready (STANDBY), past its stall switch (model_impl.h:
 * stall_switch_ns). The switch ends a trap the driver has not reported yet (0.58 s on an H100)
 * or a hang in tens of ms: the standby takes over at once and the held requests re-run, where the
 * watchdog would leave the instance out for a second; without a ready standby a kill would leave the
 * device without an instance for the ~0.2 s of a restart, so only the watchdog ends the process. */
static bool s_hung (void *arg, int device, uint64_t now, bool standby, char *why, size_t len)
{
    model_t *m = arg;
    const bool gpu = s_gpu (&m->desc.cfg);
    const uint64_t limit = (uint64_t) (m->desc.cfg.watchdog_ms ? m->desc.cfg.watchdog_ms : 1000) * 1000000ull;
    const uint64_t stall_switch = standby ? m->stall_switch_ns : 0;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        const uint64_t since = atomic_load_explicit (&m->instances[i].sh->busy_since, memory_order_relaxed);
        if (s_device (&m->desc.cfg, gpu, i) != device || !since || now <= since)
            continue;
        if (now - since > limit) {
            log_error ("model %s instance %u: a launch has run %.0f ms, over watchdog_ms = %u", m->desc.cfg.name, i,
                       (now - since) / 1e6, m->desc.cfg.watchdog_ms);
            snprintf (why, len, "a launch ran past its model's watchdog_ms; the process was killed");
            return true;
        }
        if (stall_switch && stall_switch < limit && now - since > stall_switch) {
            snprintf (why, len, "model %s instance %u: a launch stalled %.1f ms, over its stall switch of %.1f ms with "
                      "the standby ready; the process was killed and the standby takes over", m->desc.cfg.name, i,
                      (now - since) / 1e6, stall_switch / 1e6);
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------- the placement's entries */

static int s_plan (devices_t *devices, const model_config_t *cfg, model_plan_t *plan, char *err, size_t errlen)
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
    const int rc = devices_call (devices, s_device (cfg, true, 0), &c->rq, &c->rp, err, errlen);
    if (rc == 0) {
        plan->cfg = c->rp.desc.cfg;
        plan->measured = true;
        plan->candidate_count = c->rp.desc.candidate_count;
        memcpy (plan->candidates, c->rp.desc.candidates, sizeof plan->candidates);
    }
    free (c);
    return rc;
}

static void s_prepare (devices_t *devices, const model_config_t *cfg)
{
    const bool gpu = model_preparer (cfg)->device == BACKEND_DEVICE_GPU;
    int devs[DEVICES_MAX];
    const size_t n = s_devices (cfg, gpu, devs);
    for (size_t k = 0; k < n; k++)
        s_prepare_on (devices, cfg, devs[k]);
}

static int s_load (model_t *m, const model_env_t *env, char *err, size_t errlen)
{
    (void) env;
    const model_config_t *cfg = &m->desc.cfg;
    /* the drift word first: release frees it (and nothing of the model's own) */
    if (!(m->drift = devices_alloc (m->devices, sizeof *m->drift))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        return -1;
    }
    if (cfg->backend == BACKEND_AUTO) {     /* model_new measures it first: it may run here */
        sig_set_error (err, errlen, "model \"%s\": \"auto\" not measured before its load in device processes", cfg->name);
        return -1;
    }
    atomic_store (m->drift, DRIFT_AS_TIMED);
    call_t *c = calloc (1, sizeof *c);
    if (!c) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        return -1;
    }
    const bool gpu = s_gpu (cfg);
    int devs[DEVICES_MAX];
    const size_t dev_count = s_devices (cfg, gpu, devs);
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < dev_count; k++) {
        s_load_request (&c->rq, m, s_here (cfg, gpu, devs[k]));
        if ((rc = devices_call (m->devices, devs[k], &c->rq, &c->rp, err, errlen)) != 0)
            break;
        if (k == 0) {   /* the first one's description is the model's, as it loaded there */
            m->desc = c->rp.desc;
            char why[768] = "";
            if (gpu && !backends_gpu (why, sizeof why)) {
                sig_set_error (err, errlen, "model \"%s\": loaded in its device process, but this process cannot open "
                               "the GPU backend: %s", cfg->name, why);
                rc = -1;
                break;
            }
            if (!(m->iface = backends_built (cfg->type, cfg->backend))) {
                sig_set_error (err, errlen, "model \"%s\": loaded in its device process, but this build has no backend "
                               "\"%s\" for it", cfg->name, backend_kind_name (cfg->backend));
                rc = -1;
                break;
            }
            for (uint32_t i = 0; i < m->instance_count; i++)
                model_instance_init (m, i);
        }
        s_take_instances (m, devs[k], &c->rp);
    }
    free (c);
    return rc;
}

/* A persistent kernel whose mailbox lies in the region: a front publishes into it (the front makes
 * no CUDA call); graphs need the device process's context, and nothing else runs inline. */
static model_inline_t s_inline_way (const model_t *m, const model_env_t *env)
{
    (void) env;
    return m->desc.can & MODEL_CAN_SHARE_BOX ? INLINE_CLAIM_MAILBOX : INLINE_NEVER;
}

static void *s_alloc (model_t *m, size_t bytes) { return devices_alloc (m->devices, bytes); }
static void s_free (model_t *m, void *block) { devices_free (m->devices, block); }

/* Instance IN's side of the region: its rings (every job of the model fits each), its futex waker. */
static int s_share (model_t *m, instance_t *in, char *err, size_t errlen)
{
    const size_t slots = ring_slots (m->job_count);
    instance_shared_t *sh = devices_alloc (m->devices, sizeof *sh);
    if (!sh) {
        sig_set_error (err, errlen, "model \"%s\": the shared region is full (instance %u's rings)", m->desc.cfg.name,
                       in->index);
        return -1;
    }
    memset (sh, 0, sizeof *sh);
    in->sh = sh;    /* from here s_unshare frees what was made */
    for (uint32_t k = 0; k < m->lane_count; k++) {
        void **requests = devices_alloc (m->devices, slots * sizeof (void *));
        void **done = devices_alloc (m->devices, slots * sizeof (void *));
        if (!requests || !done) {
            devices_free (m->devices, requests);
            devices_free (m->devices, done);
            sig_set_error (err, errlen, "model \"%s\": the shared region is full (instance %u's rings)",
                           m->desc.cfg.name, in->index);
            return -1;
        }
        ring_init_at (&sh->lanes[k].requests, requests, slots);
        ring_init_at (&sh->lanes[k].done, done, slots);
    }
    waker_init_futex (&sh->wake);
    model_shared_init (sh);
    atomic_init (&in->lost, 0);
    return 0;
}

static void s_unshare (model_t *m, instance_t *in)
{
    for (uint32_t k = 0; k < m->lane_count; k++) {
        devices_free (m->devices, in->sh->lanes[k].requests.items);
        devices_free (m->devices, in->sh->lanes[k].done.items);
    }
    devices_free (m->devices, in->sh);
    in->sh = NULL;
}

static int s_start (model_t *m, char *err, size_t errlen)
{
    int devs[DEVICES_MAX];
    const size_t dev_count = s_devices (&m->desc.cfg, s_gpu (&m->desc.cfg), devs);
    /* tenants before the start: a process lost from here on brings the model back with it */
    for (size_t k = 0; k < dev_count; k++)
        devices_add_tenant (m->devices, devs[k], &(dev_tenant_t) { .arg = m, .lost = s_lost, .swept = s_swept,
                                                                 .rejoin = s_rejoin, .prepare = s_prepare_rejoin,
                                                                 .hung = s_hung, .stage = s_stage });
    call_t *c = calloc (1, sizeof *c);
    int rc = c ? 0 : -1;
    if (!c)
        sig_set_error (err, errlen, "model \"%s\": out of memory", m->desc.cfg.name);
    for (size_t k = 0; rc == 0 && k < dev_count; k++)
        rc = s_start_on (m, devs[k], c, err, errlen);
    free (c);
    return rc;
}

static void s_release (model_t *m)
{
    int devs[DEVICES_MAX];
    /* (no process was asked anything before the first load answered) */
    const size_t dev_count = m->iface ? s_devices (&m->desc.cfg, s_gpu (&m->desc.cfg), devs) : 0;
    for (size_t k = 0; k < dev_count; k++)
        devices_remove_tenant (m->devices, devs[k], m);
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (m->instances[i].sh) {
            atomic_store (&m->instances[i].sh->stop, true);
            waker_wake (&m->instances[i].sh->wake);
        }
    call_t *c = calloc (1, sizeof *c);
    char err[512];
    for (size_t k = 0; c && k < dev_count; k++) {
        c->rq.op = DEV_UNLOAD;
        c->rq.token = (uintptr_t) m;
        if (devices_call (m->devices, devs[k], &c->rq, &c->rp, err, sizeof err) != 0)
            log_warn ("model %s: unloading it from device %d: %s", m->desc.cfg.name, devs[k], err);
    }
    free (c);
    devices_free (m->devices, (void *) m->drift);
    m->drift = NULL;
}

const placement_t placement_devices = {
    .name = "device processes",
    .suffix = " (device process)",
    .loses_workers = true,
    .plan = s_plan,
    .prepare = s_prepare,
    .load = s_load,
    .inline_way = s_inline_way,
    .alloc = s_alloc,
    .free = s_free,
    .share = s_share,
    .unshare = s_unshare,
    .start = s_start,
    .release = s_release,
};
