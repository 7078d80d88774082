/* Where a model runs (model.h's model_new, model_prepare and model_destroy): in this process
 * (model.c), or, for work that may touch a GPU while device processes are on, in them
 * (model_remote.c). */
#include "serving/model_impl.h"

#include "base/log.h"

model_t *model_new (const model_config_t *cfg, const server_config_t *server, stats_t *stats, char *err,
                    size_t errlen)
{
    if (model_remote_wanted (cfg))
        return model_remote_new (cfg, NULL, server, stats, err, errlen);
    return model_local_new (cfg, NULL, server, stats, err, errlen);
}

int model_plan (const model_config_t *cfg, model_plan_t *plan, char *err, size_t errlen)
{
    if (model_remote_wanted (cfg))
        return model_remote_plan (cfg, plan, err, errlen);
    return model_local_plan (cfg, plan, err, errlen);
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
    if (model_remote_wanted (&plan->cfg))
        return model_remote_new (&plan->cfg, plan, server, stats, err, errlen);
    return model_local_new (&plan->cfg, plan, server, stats, err, errlen);
}

void model_prepare (const model_config_t *cfg)
{
    char why[1024] = "";
    const backend_iface_t *iface = model_preparer (cfg);
    if (!iface)
        return;
    const bool gpu = iface->device == BACKEND_DEVICE_GPU;
    if (model_remote_wanted (cfg)) {
        model_remote_prepare (cfg, gpu);
        return;
    }
    for (uint32_t i = 0; i < cfg->instances; i++) {
        const int device = gpu ? cfg->devices[i % cfg->device_count] : 0;
        bool seen = false;
        for (uint32_t k = 0; k < i; k++)
            seen = seen || (gpu ? cfg->devices[k % cfg->device_count] : 0) == device;
        if (!seen && model_prepare_here (cfg, device, why, sizeof why) < 0)
            log_info ("model \"%s\": not prepared on device %d (%s); its load goes on without", cfg->name, device, why);
    }
}

void model_destroy (model_t **self_p)
{
    if (self_p && *self_p && (*self_p)->remote)     /* its workers are in device processes: they stop there */
        model_remote_release (*self_p);
    model_local_destroy (self_p);
}
