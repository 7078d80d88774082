/* The backend table (backends.h): the model types table's backend half, and the backends this build
 * has for a type. */
#include "backends/backends.h"

#include "backends/backend_gru.h"
#include "backends/backend_lstm.h"
#include "weights/gru.h"
#include "weights/reference.h"

#include <stdio.h>

/* sigserve-test's stand-ins for the CPU column (NULL: the table's) */
static const backend_iface_t *s_cpu_test[MODEL_TYPE_COUNT];

void backends_set_test_cpu_mlp (const backend_iface_t *iface) { s_cpu_test[MODEL_TYPE_MLP] = iface; }

static int s_lstm_window (const weights_t *w, const float *in, uint32_t rows, double *out)
{
    return lstm_reference_window (w->lstm, in, rows, out);
}

static int s_lstm_stream (const weights_t *w, const float *steps, uint64_t count, double *out)
{
    return lstm_reference_stream (w->lstm, steps, count, out);
}

static const backends_type_t s_types[MODEL_TYPE_COUNT] = {
    [MODEL_TYPE_MLP] = { .cpu = &backend_cpu_iface, .reference = reference_forward },
    [MODEL_TYPE_LSTM] = { .cpu = &backend_lstm_cpu_iface, .reference = s_lstm_window,
                          .reference_stream = s_lstm_stream },
    [MODEL_TYPE_GRU] = { .cpu = &backend_gru_cpu_iface, .reference = gru_reference_window,
                         .reference_stream = gru_reference_stream },
};

const backends_type_t *backends_type (model_type_t type)
{
    return (unsigned) type < MODEL_TYPE_COUNT ? &s_types[type] : NULL;
}

const backend_iface_t *backends_built (model_type_t type, backend_kind_t kind)
{
    if ((unsigned) type >= MODEL_TYPE_COUNT)
        return NULL;
    if (kind == BACKEND_CPU)
        return s_cpu_test[type] ? s_cpu_test[type] : s_types[type].cpu;
    const gpu_backend_t *gpu = kind == BACKEND_CUDA ? backends_gpu (NULL, 0) : NULL;
    return gpu ? gpu->by_type[type] : NULL;
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
    const backend_iface_t *iface = backends_built (type, kind);
    if (!iface)
        snprintf (why, whylen, "this build's CUDA backends serve no models of \"type\": \"%s\"", model_type_name (type));
    return iface;
}
