/* The CUDA LSTM backend's specialised kernel (lstm_spec.h): the net of a model's weights, the kernel
 * compiled for its plan and loaded through the kernel cache, and the backend's prepare. */
#define _GNU_SOURCE
#include "backends/cuda/lstm_spec.h"

#include "backends/backend.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/persistent.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* LW's net (its weights borrowed). */
void lstm_cuda_net (const lstm_weights_t *lw, sig_lstm_net_t *net)
{
    memset (net, 0, sizeof *net);
    net->layers = (uint32_t) lw->layer_count;
    net->in = lw->step_size;
    net->hidden = lw->hidden;
    net->out = lw->head.out;
    net->window = lw->window;
    net->head_act = (int) lw->head.activation;
    for (uint32_t k = 0; k < net->layers; k++) {
        net->w_ih[k] = lw->layers[k].w_ih;
        net->w_hh[k] = lw->layers[k].w_hh;
        net->bias[k] = lw->layers[k].bias;
    }
    net->head_w = lw->head.weight;
    net->head_b = lw->head.bias;
}

/* The kernel specialised for IMAGE's header (host memory) on DEVICE: from the kernel cache, compiled
 * (NVRTC) and loaded there when new, which can happen only while no persistent kernel is resident on
 * DEVICE. NULL with WHY. */
const sig_spec_module_t *lstm_cuda_specialise (const model_config_t *cfg, int device, const void *image,
                                               const sig_lstm_plan_t *plan, char *why, size_t whylen)
{
    return kernel_cache_specialised (cfg->kernel_cache_dir, device, sig_lstm_spec_source (image), "sig_lstm_spec",
                                     plan->smem_bytes, cfg->name, "LSTM kernel specialised for its plan", why, whylen);
}

int lstm_cuda_prepare (const weights_t *w, const model_config_t *cfg, int device, const sig_lstm_tuning_t *tuning,
                       char *why, size_t whylen)
{
    if (cfg->type != MODEL_TYPE_LSTM || !cfg->specialise)
        return 0;
    if (!w)
        return 1;
    if (w->type != MODEL_TYPE_LSTM || !w->lstm || w->lstm->layer_count > SIG_LSTM_MAX_LAYERS)
        return 0;   /* the load says what is wrong */
    if (persistent_device_ok (device, cfg->name, "the CUDA LSTM kernel", "use \"backend\": \"cpu\"", why, whylen) != 0)
        return -1;
    sig_lstm_net_t net;
    lstm_cuda_net (w->lstm, &net);
    sig_lstm_plan_t plan;
    sig_lstm_layout_t lay;
    const uint32_t rows = backend_rows (cfg) ? backend_rows (cfg) : 1u;
    cudaError_t e = cudaSetDevice (device);
    if (e == cudaSuccess)
        e = (cudaError_t) sig_lstm_plan (&net, (uint32_t) cfg->weight_dtype, backend_stream_slots (cfg), rows, device,
                                         tuning, &plan);
    if (e == cudaSuccess && (plan.sync & SIG_LSTM_SYNC_GENERIC))
        return 0;   /* the advances apart: the generic kernel */
    if (e == cudaSuccess)
        e = (cudaError_t) sig_lstm_layout (&plan, &lay);
    void *image = e == cudaSuccess ? malloc (plan.image_bytes) : NULL;
    if (e == cudaSuccess && !image)
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = (cudaError_t) sig_lstm_pack (&net, &plan, &lay, image);
    if (e != cudaSuccess) {
        snprintf (why, whylen, "planning the LSTM kernel: %s%s%s", cudaGetErrorString (e), plan.why[0] ? ": " : "",
                  plan.why);
        free (image);
        return -1;
    }
    const sig_spec_module_t *mod = lstm_cuda_specialise (cfg, device, image, &plan, why, whylen);
    free (image);
    return mod ? 1 : -1;
}
