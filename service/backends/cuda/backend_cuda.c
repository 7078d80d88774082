/* The CUDA MLP backend's interface (backend_cuda.h): each call handed to the kind of model it is,
 * kernel "persistent" (mlp_persistent.c) or the kernels launched per request (graph.c), and the
 * parts of the piecewise interface that apply to both. */
#include "backends/cuda/backend_cuda_impl.h"

#include "backends/cuda/device.h"
#include "sig_common.h"

bool cuda_model_lost (const backend_model_t *m) { return m->persistent ? m->host.lost : m->lost; }

int cuda_model_poison (backend_model_t *m)
{
    return m->persistent ? cuda_persistent_poison (m) : cuda_graph_poison (m);
}

int cuda_model_share_box (backend_model_t *m, persistent_box_t *dest) { return cuda_persistent_share (m, dest); }

const char *cuda_model_kernel_stopped (backend_model_t *m)
{
    if (!m->persistent || m->pingpong || !m->host.kstream)
        return NULL;
    cudaSetDevice (m->device);
    const cudaError_t e = cudaStreamQuery (m->host.kstream);
    return e == cudaErrorNotReady ? NULL : e == cudaSuccess ? "its persistent kernel exited" : cudaGetErrorString (e);
}

static uint32_t s_green_sms (const backend_model_t *m) { return m->persistent ? m->host.green_sms : 0u; }

int cuda_model_inject_fault (backend_model_t *m)
{
    cudaSetDevice (m->device);
    return sig_fault_kernel (m->persistent ? m->side : m->stream);
}

/* A persistent kernel is stalled itself (its control line's stall word: it keeps polling, honours
 * stop and answers nothing), so the watchdog is what notices; a kernel spinning on its stream or a
 * side stream would queue behind the resident one and change nothing. A graph model's next launch
 * queues behind a kernel spinning MS ms on its stream. */
int cuda_model_inject_hang (backend_model_t *m, unsigned ms)
{
    if (m->persistent && !m->pingpong)
        return cuda_model_persistent_stall (m, true);
    cudaSetDevice (m->device);
    return sig_hang_kernel (m->stream, ms);
}

/* Whether KERNEL holds weights in D (the iface's weight_dtypes says what the backend as a whole may
 * hold; the kernels table, which of its kernels do). */
static bool s_kernel_holds (cuda_kernel_t kernel, weight_dtype_t d)
{
    return d == WEIGHT_DTYPE_F32 || (cuda_kernel_info (kernel)->weight_dtypes & (1u << d)) != 0;
}

static backend_model_t *s_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    if (!s_kernel_holds (cfg->kernel, cfg->weight_dtype)) {
        sig_set_error (err, errlen, "model \"%s\": weight_dtype \"%s\": kernel \"%s\" holds weights in f32 only; use "
                       "\"kernel\": \"persistent\" (it holds f16 and bf16) or \"weight_dtype\": \"f32\"", cfg->name,
                       weight_dtype_name (cfg->weight_dtype), cuda_kernel_name (cfg->kernel));
        return NULL;
    }
    if (cuda_device_check (device, cfg->name, err, errlen) != 0)
        return NULL;
    return cuda_kernel_info (cfg->kernel)->resident ? cuda_persistent_load (w, cfg, device, err, errlen)
                                                    : cuda_graph_load (w, cfg, device, err, errlen);
}

/* The device's green contexts (green_context) and the specialised kernel's module, ahead of the load. */
static int s_prepare (const weights_t *w, const model_config_t *cfg, int device, char *why, size_t whylen)
{
    if (!cuda_kernel_info (cfg->kernel)->resident || !(cfg->specialise || cfg->green_context))
        return 0;
    if (!w)
        return 1;
    if (cuda_device_check (device, cfg->name, why, whylen) != 0)
        return -1;
    if (cfg->green_context && persistent_green_prepare (device, why, whylen) < 0)
        return -1;
    return cfg->specialise ? cuda_persistent_prepare (w, cfg, device, why, whylen) : 1;
}

static sig_status_t s_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    return m->persistent ? cuda_persistent_infer (m, in, rows, out, err, errlen)
                         : cuda_graph_infer (m, in, rows, out, err, errlen);
}

static void s_destroy (backend_model_t **m_p)
{
    if (m_p && *m_p && (*m_p)->persistent)
        cuda_persistent_destroy (m_p);
    else
        cuda_graph_destroy (m_p);
}

static const char *s_kernel_name (const backend_model_t *m)
{
    if (m->persistent)
        return m->pingpong ? "pingpong" : m->spec ? "persistent-nvrtc" : "persistent";   /* always mapped memory */
    return m->label;    /* the kernel's name from the kernels table, and how it runs (cuda_graph_load) */
}

const backend_iface_t backend_cuda_iface = {
    .name = "cuda",
    .device = BACKEND_DEVICE_GPU,
    /* kernel "persistent" only: every other kernel refuses them at load, naming itself */
    .weight_dtypes = 1u << WEIGHT_DTYPE_F16 | 1u << WEIGHT_DTYPE_BF16,
    .load = s_load,
    .infer = s_infer,
    .kernel_name = s_kernel_name,
    .destroy = s_destroy,
    .share_box = cuda_model_share_box,
    .kernel_stopped = cuda_model_kernel_stopped,
    .park = cuda_persistent_park,
    .unpark = cuda_persistent_unpark,
    .green_sms = s_green_sms,
    .prepare = s_prepare,
};
