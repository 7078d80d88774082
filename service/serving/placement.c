/* Where a model runs (placement.h's placement_for), and the entries of model.h that ask it:
 * model_new, model_plan, model_new_planned and model_prepare. The device processes are the
 * caller's (main.c starts them and passes them down), never found here. */
#include "serving/model_impl.h"

#include "backends/backends.h"
#include "serving/devices.h"

#include <stdlib.h>

const placement_t *placement_for (devices_t *devices, const model_config_t *cfg)
{
    if (!devices)
        return &placement_threads;
    if (cfg->backend == BACKEND_CPU)
        return devices_cpu_models_placed (devices) ? &placement_devices : &placement_threads;
    return backends_gpu_built () ? &placement_devices : &placement_threads;   /* "cuda", or "auto": measured there */
}

static model_env_t s_env (const server_config_t *server, stats_t *stats, devices_t *devices)
{
    return (model_env_t) { .busy_poll = server->busy_poll, .spin_ns = server->spin_cap_ns,
                           .lanes = server->fronts == 0 ? 1 : server->fronts > LANES_MAX ? LANES_MAX : server->fronts,
                           .inline_us = server->inline_us, .max_message_bytes = server->max_message_bytes,
                           .stats = stats, .devices = devices, .front_cpus = server->cpus,
                           .front_cpu_count = server->cpu_count };
}

/* CFG (PLAN, may be NULL, resolved it ahead) loaded where it runs, and serving. */
static model_t *s_new (const model_config_t *cfg, const model_plan_t *plan, devices_t *devices,
                       const server_config_t *server, stats_t *stats, char *err, size_t errlen)
{
    const model_env_t env = s_env (server, stats, devices);
    model_t *m = model_load (cfg, plan, placement_for (devices, cfg), &env, err, errlen);
    if (m && (model_serve (m, err, errlen) != 0 || model_fallback_load (m, &env, err, errlen) != 0))
        model_destroy (&m);
    return m;
}

model_t *model_new (const model_config_t *cfg, const server_config_t *server, stats_t *stats, devices_t *devices,
                    char *err, size_t errlen)
{
    /* Where "auto" runs follows from what it measured to where device processes are on (the CPU stays in
     * the server): measured there first, as a configuration's models are (model_registry_load). */
    if (cfg->backend != BACKEND_AUTO || placement_for (devices, cfg) == &placement_threads)
        return s_new (cfg, NULL, devices, server, stats, err, errlen);
    model_plan_t *plan = malloc (sizeof *plan);
    if (!plan) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        return NULL;
    }
    model_t *m = model_plan (cfg, devices, plan, err, errlen) == 0 ? model_new_planned (plan, server, stats, err, errlen)
                                                                   : NULL;
    free (plan);
    return m;
}

int model_plan (const model_config_t *cfg, devices_t *devices, model_plan_t *plan, char *err, size_t errlen)
{
    const int rc = placement_for (devices, cfg)->plan (devices, cfg, plan, err, errlen);
    plan->devices = devices;
    return rc;
}

bool model_plan_resident (const model_plan_t *plan)
{
    return plan->cfg.backend == BACKEND_CUDA
           && (model_type_can (plan->cfg.type, MODEL_CAP_CUDA_RESIDENT)
               || (model_type_can (plan->cfg.type, MODEL_CAP_CUDA_KERNELS) && cuda_kernel_info (plan->cfg.kernel)->resident));
}

model_t *model_new_planned (const model_plan_t *plan, const server_config_t *server, stats_t *stats, char *err,
                            size_t errlen)
{
    return s_new (&plan->cfg, plan, plan->devices, server, stats, err, errlen);
}

void model_prepare (const model_plan_t *plan)
{
    if (model_preparer (&plan->cfg))
        placement_for (plan->devices, &plan->cfg)->prepare (plan->devices, &plan->cfg);
}
