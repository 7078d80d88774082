/* A model whose instances run in this process's threads (placement.h's placement_threads): the
 * server's own, or, for the instances placed on its device, a device process's (device_main.c loads
 * them with this load, and its reply carries the description it filled). Its load reads the
 * weights, chooses the backend ("auto" measures the candidates), loads each instance's backend
 * context, times a launch and describes what it loaded; its job pools are in this process's memory,
 * its instances' shared state is their own, and its workers are threads here (or a group's). */
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

/* The backend D->cfg names, or the one "auto" measures fastest (D->cfg updated to it, D's candidates
 * and selected_by filled). */
static const backend_iface_t *s_choose_backend (model_desc_t *d, const weights_t *w, char *err, size_t errlen)
{
    model_config_t *cfg = &d->cfg;
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
        snprintf (d->selected_by, sizeof d->selected_by, "config");
        return iface;
    }
    size_t count = 0;
    const backend_iface_t *iface = autoselect_choose (w, cfg, cfg->devices[0], d->candidates, MODEL_CANDIDATES_MAX,
                                                      &count, err, errlen);
    d->candidate_count = (uint32_t) count;
    snprintf (d->selected_by, sizeof d->selected_by, "measurement");
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

static int s_plan (devices_t *devices, const model_config_t *cfg, model_plan_t *plan, char *err, size_t errlen)
{
    (void) devices;
    memset (plan, 0, sizeof *plan);
    plan->given = plan->cfg = *cfg;
    if (cfg->backend != BACKEND_AUTO)
        return 0;
    model_desc_t *d = calloc (1, sizeof *d);
    weights_t *w = d ? weights_load (cfg, err, errlen) : NULL;
    if (!d)
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
    int rc = -1;
    if (w) {
        d->cfg = *cfg;
        rc = s_choose_backend (d, w, err, errlen) ? 0 : -1;
    }
    if (rc == 0) {
        plan->cfg = d->cfg;
        plan->measured = true;
        plan->candidate_count = d->candidate_count;
        memcpy (plan->candidates, d->candidates, sizeof plan->candidates);
    }
    weights_destroy (&w);
    free (d);
    return rc;
}

static void s_prepare (devices_t *devices, const model_config_t *cfg)
{
    (void) devices;
    char why[1024] = "";
    const bool gpu = model_preparer (cfg)->device == BACKEND_DEVICE_GPU;
    for (uint32_t i = 0; i < cfg->instances; i++) {
        const int device = gpu ? cfg->devices[i % cfg->device_count] : 0;
        bool seen = false;
        for (uint32_t k = 0; k < i; k++)
            seen = seen || (gpu ? cfg->devices[k % cfg->device_count] : 0) == device;
        if (!seen && model_prepare_here (cfg, device, why, sizeof why) < 0)
            log_info ("model \"%s\": not prepared on device %d (%s); its load goes on without", cfg->name, device, why);
    }
}

/* Instance IN's CPUs and backend context (before the job pool exists: the timing that sizes it
 * runs on the first instance loaded). */
static int s_instance_load (model_t *m, instance_t *in, char *err, size_t errlen)
{
    const model_config_t *cfg = &m->desc.cfg;
    /* with "split" instance i owns the i-th share of cpus (config_split_cores): its worker the first */
    const uint32_t cores = m->iface->split ? config_split_cores (cfg) : 1;
    if (cfg->cpu_count) {
        in->cpus[0] = cfg->cpus[(size_t) in->index * cores % cfg->cpu_count];
        in->cpu_count = 1;
    } else if (in->device >= 0)     /* by default a GPU's workers run on the CPUs of its NUMA node */
        in->cpu_count = backends_gpu (NULL, 0)->device_cpus (in->device, in->cpus, CONFIG_MAX_CPUS);
    in->impl = m->iface->load (m->weights, cfg, in->device < 0 ? 0 : in->device, err, errlen);
    atomic_init (&in->green_sms, in->impl && m->iface->green_sms ? m->iface->green_sms (in->impl) : 0u);
    if (in->impl && cores > 1
        && m->iface->split (in->impl, &cfg->cpus[(size_t) in->index * cores], cores, cfg, err, errlen) != 0)
        return -1;
    return in->impl ? 0 : -1;
}

/* What the loaded model is: its kernel and instruction path (the first instance loaded here names
 * them), and what it can do, from its type's row and its backend. */
static void s_describe (model_t *m, const backend_model_t *first)
{
    model_desc_t *d = &m->desc;
    const model_type_t type = d->cfg.type;
    snprintf (d->kernel, sizeof d->kernel, "%s", m->iface->kernel_name (first));
    snprintf (d->isa, sizeof d->isa, "%s", m->iface->isa ? m->iface->isa (first) : "");
    snprintf (d->split, sizeof d->split, "%s", m->iface->split_text ? m->iface->split_text (first) : "");
    /* a front may publish its requests too (a device process's DEV_START then moves the protocol's state) */
    const bool shareable = m->iface->share_box && m->iface->share_box ((backend_model_t *) first, NULL) == 0;
    d->can = (model_type_can (type, MODEL_CAP_STREAM) ? MODEL_CAN_STREAM : 0u)
             | (model_type_can (type, MODEL_CAP_BATCH) ? MODEL_CAN_BATCH : 0u)
             | (model_type_can (type, MODEL_CAP_INLINE) && !d->cfg.keep_warm_us ? MODEL_CAN_INLINE : 0u)
             | (shareable ? MODEL_CAN_SHARE_BOX : 0u) | (m->iface->park && m->iface->unpark ? MODEL_CAN_PARK : 0u);
}

static int s_load (model_t *m, const model_env_t *env, char *err, size_t errlen)
{
    const model_config_t *cfg = &m->desc.cfg;
    if (!(m->weights = weights_load (cfg, err, errlen)))
        return -1;
    model_take_sizes (m, m->weights);
    if (!(m->iface = s_choose_backend (&m->desc, m->weights, err, errlen)))
        return -1;
    if (model_type_can (cfg->type, MODEL_CAP_STREAM) && !m->iface->stream_step) {
        sig_set_error (err, errlen, "model \"%s\": backend \"%s\" serves \"type\": \"%s\" without its stream entries",
                       cfg->name, m->iface->name, model_type_name (cfg->type));
        return -1;
    }
    const backend_model_t *first = NULL;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        model_instance_init (m, i);
        if (env->only && !(env->only >> i & 1))
            continue;       /* another device process's */
        if (s_instance_load (m, &m->instances[i], err, errlen) != 0)
            return -1;
        if (!first)
            first = m->instances[i].impl;
    }
    if (model_time (m, err, errlen) != 0)
        return -1;
    s_describe (m, first);
    return 0;
}

/* A split model (its instances own several cores): a front may run its requests on an idle instance's
 * own context, leading its helpers, only where every front is pinned (server.cpus) to cores none of the
 * model's are: a front spinning on a helper's slice must never hold the core that helper needs.
 * Elsewhere the fronts keep contexts of their own, on one core. */
static bool s_split_inline (const model_t *m, const model_env_t *env)
{
    const model_config_t *cfg = &m->desc.cfg;
    if (!m->iface->split || config_split_cores (cfg) < 2 || env->front_cpu_count == 0)
        return false;
    for (size_t i = 0; i < env->front_cpu_count; i++)
        for (size_t k = 0; k < cfg->cpu_count; k++)
            if (env->front_cpus[i] == cfg->cpus[k]) {
                log_warn ("model %s: split: cpu %d is in server.cpus too: a front there shares it with this model's "
                          "worker or helper, which spins while calls come (give each its own cores)", cfg->name,
                          env->front_cpus[i]);
                return false;
            }
    return true;
}

/* A CPU model: each front has a context of its own (but a split one, above); a GPU model holds one
 * resident kernel or graph set an instance, so a front runs on an idle instance's (worker_run_inline_on). */
static model_inline_t s_inline_way (const model_t *m, const model_env_t *env)
{
    if (s_split_inline (m, env))
        return INLINE_CLAIM_CONTEXT;    /* the front leads the instance's split (its cores stay the model's) */
    return m->iface->device == BACKEND_DEVICE_CPU ? INLINE_FRONT_CONTEXT : INLINE_CLAIM_CONTEXT;
}

/* Zeroed, resident as it is first written (floats_mapped). */
static void *s_alloc (model_t *m, size_t bytes)
{
    (void) m;
    return floats_mapped ((bytes + sizeof (float) - 1) / sizeof (float));
}

static void s_free (model_t *m, void *block)
{
    (void) m;
    floats_unmap (block);
}

/* The instance's own: rings on the heap (each holds every job of its lane), an eventfd waker. */
static int s_share (model_t *m, instance_t *in, char *err, size_t errlen)
{
    instance_shared_t *sh = &in->own;
    model_shared_init (sh);
    in->sh = sh;
    bool made = true;
    const uint32_t jobs = m->ring_jobs > m->job_count ? m->ring_jobs : m->job_count;
    for (uint32_t k = 0; made && k < m->lane_count; k++)
        made = ring_init (&sh->lanes[k].requests, jobs) == 0 && ring_init (&sh->lanes[k].done, jobs) == 0;
    if (!made || waker_init (&sh->wake) != 0) {
        sig_set_error (err, errlen, "model \"%s\": out of memory for instance %u", m->desc.cfg.name, in->index);
        return -1;
    }
    return 0;
}

/* Safe on an instance whose own state was never made (a device process's: model_load zeroed it). */
static void s_unshare (model_t *m, instance_t *in)
{
    (void) m;
    for (uint32_t k = 0; k < LANES_MAX; k++) {
        ring_release (&in->own.lanes[k].requests);
        ring_release (&in->own.lanes[k].done);
    }
    waker_release (&in->own.wake);
}

static int s_start (model_t *m, char *err, size_t errlen)
{
    const model_config_t *cfg = &m->desc.cfg;
    if (cfg->group[0] && cfg->keep_warm_us) {
        sig_set_error (err, errlen, "model \"%s\": keep_warm_us: a model in a group (\"%s\") is served by the group's "
                       "workers, which keep no one model warm; remove keep_warm_us or group", cfg->name, cfg->group);
        return -1;
    }
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (model_instance_buffers (m, &m->instances[i], err, errlen) != 0)
            return -1;
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (cfg->group[0] ? group_join (in, err, errlen) != 0 : model_start_worker (m, in, err, errlen) != 0)
            return -1;
    }
    return 0;
}

const placement_t placement_threads = {
    .name = "threads",
    .suffix = "",
    .plan = s_plan,
    .prepare = s_prepare,
    .load = s_load,
    .inline_way = s_inline_way,
    .alloc = s_alloc,
    .free = s_free,
    .share = s_share,
    .unshare = s_unshare,
    .start = s_start,
};
