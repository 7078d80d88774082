/* Where a model runs (model.h's model_new and model_destroy): in this process (model.c), or, for
 * work that may touch a GPU while device processes are on, in them (model_remote.c). */
#include "serving/model_impl.h"

model_t *model_new (const model_config_t *cfg, const server_config_t *server, stats_t *stats, char *err,
                    size_t errlen)
{
    if (model_remote_wanted (cfg))
        return model_remote_new (cfg, server, stats, err, errlen);
    return model_local_new (cfg, server, stats, err, errlen);
}

void model_destroy (model_t **self_p)
{
    if (self_p && *self_p && (*self_p)->remote)     /* its workers are in device processes: they stop there */
        model_remote_release (*self_p);
    model_local_destroy (self_p);
}
