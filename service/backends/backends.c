/* The backend table (backends.h). */
#include "backends/backends.h"

#include "backends/backend_lstm.h"

#include <stdio.h>

static const backend_iface_t *s_cpu_mlp = &backend_cpu_iface;

void backends_set_test_cpu_mlp (const backend_iface_t *iface) { s_cpu_mlp = iface ? iface : &backend_cpu_iface; }

const backend_iface_t *backends_built (model_type_t type, backend_kind_t kind)
{
    const bool lstm = type == MODEL_TYPE_LSTM;
    if (kind == BACKEND_CPU)
        return lstm ? &backend_lstm_cpu_iface : s_cpu_mlp;
    const gpu_backend_t *gpu = kind == BACKEND_CUDA ? backends_gpu (NULL, 0) : NULL;
    if (!gpu)
        return NULL;
    return lstm ? gpu->lstm : gpu->mlp;
}

const backend_iface_t *backends_find (model_type_t type, backend_kind_t kind, char *why, size_t whylen)
{
    if (kind == BACKEND_CPU)
        return backends_built (type, kind);
    if (kind != BACKEND_CUDA) {
        snprintf (why, whylen, "backend \"%s\" is not one backend but a choice among them", backend_kind_name (kind));
        return NULL;
    }
    const gpu_backend_t *gpu = backends_gpu (why, whylen);
    int count = 0;
    if (!gpu || gpu->device_count (&count, why, whylen) != 0)
        return NULL;
    return backends_built (type, kind);
}
