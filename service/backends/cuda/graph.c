/* The CUDA MLP backend's graph path (backend_cuda_impl.h): every kernel but "persistent". One model
 * = one stream, its buffers and its graphs; the request path is: copy the features into pinned
 * memory, replay the graph for that batch size (or launch directly when "graph" is false), record
 * the completion event, wait as configured, copy the outputs out of pinned memory.
 *
 * Device memory comes from the device's stream-ordered pool (cudaMallocFromPoolAsync /
 * cudaFreeAsync on the model's own stream); pinned host memory, cuBLAS handles and graph
 * executables are released through the device level, which defers them while a persistent kernel
 * is resident (device.h says why); a cublas model is refused while one is resident on its device.
 * Nothing here calls cudaDeviceSynchronize. */
#define _GNU_SOURCE
#include "backends/cuda/backend_cuda_impl.h"

#include "backends/cuda/device.h"
#include "sig_common.h"
#include "sig_dense.h"
#include "sig_fused.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUBLAS_WORKSPACE_BYTES (4u << 20)

static sig_status_t s_fail (backend_model_t *m, cudaError_t e, const char *what, char *err, size_t errlen)
{
    return cuda_device_error (m->device, m->name, e, what, &m->lost, err, errlen);
}

static cudaError_t s_dev_alloc (backend_model_t *m, void **p, size_t bytes)
{
    return cuda_device_alloc (m->device, m->stream, p, bytes);
}

/* ---- launching the layers: the launch column of the kernels table (base/cuda_kernel.h) ---- */

static int s_warp (backend_model_t *m, const cuda_layer_t *L, const float *x, float *y, uint32_t rows)
{
    return sig_dense_warp (L->w, L->b, x, y, L->in, L->out, rows, (int) L->activation, m->stream);
}

static int s_mbyv (backend_model_t *m, const cuda_layer_t *L, const float *x, float *y, uint32_t rows)
{
    return sig_dense_mbyv (L->w, L->b, x, y, L->in, L->out, L->out_pad, rows, (int) L->activation, m->stream);
}

static int s_cublas (backend_model_t *m, const cuda_layer_t *L, const float *x, float *y, uint32_t rows)
{
    /* Row-major W [out][in] is column-major [in][out]: y (out x rows) = W^T-view x. */
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasSgemm (m->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int) L->out, (int) rows, (int) L->in, &one,
                                     L->w, (int) L->in, x, (int) L->in, &zero, y, (int) L->out);
    if (st != CUBLAS_STATUS_SUCCESS)
        return (int) cudaErrorLaunchFailure;
    return sig_bias_act (L->b, y, L->out, rows, (int) L->activation, m->stream);
}

static int s_fused (backend_model_t *m, uint32_t rows)
{
    return sig_mlp_fused (m->d_net, m->d_in, m->d_out, m->d_act[0], rows, m->stream);
}

/* A kernel launched a layer at a time, or once for the whole model; "persistent" has neither here (it
 * is launched once at load: mlp_persistent.c). */
static const struct {
    int (*layer) (backend_model_t *m, const cuda_layer_t *L, const float *x, float *y, uint32_t rows);
    int (*whole) (backend_model_t *m, uint32_t rows);
} s_launch[CUDA_KERNEL_COUNT] = {
    [CUDA_KERNEL_WARP] = { .layer = s_warp },
    [CUDA_KERNEL_CUBLAS] = { .layer = s_cublas },
    [CUDA_KERNEL_MBYV] = { .layer = s_mbyv },
    [CUDA_KERNEL_FUSED] = { .whole = s_fused },
};

static int s_enqueue_layers (backend_model_t *m, uint32_t rows)
{
    if (s_launch[m->kernel].whole)
        return s_launch[m->kernel].whole (m, rows);
    if (!s_launch[m->kernel].layer)
        return (int) cudaErrorInvalidValue;
    const float *x = m->d_in;
    for (size_t i = 0; i < m->layer_count; i++) {
        float *y = i + 1 == m->layer_count ? m->d_out : m->d_act[i & 1];
        const int rc = s_launch[m->kernel].layer (m, &m->layers[i], x, y, rows);
        if (rc != 0)
            return rc;
        x = y;
    }
    return 0;
}

static int s_enqueue_direct (backend_model_t *m, cuda_run_t what, uint32_t rows, const float *host_in, float *host_out)
{
    cudaError_t e;
    if (m->zero_copy) {
        /* The kernels read and write the mapped buffers themselves: nothing to copy, and only those. */
        if (what == CUDA_RUN_END_TO_END && (host_in != m->h_in || host_out != m->h_out))
            return (int) cudaErrorInvalidValue;
        return s_enqueue_layers (m, rows);
    }
    if (what == CUDA_RUN_END_TO_END
        && (e = cudaMemcpyAsync (m->d_in, host_in, (size_t) rows * m->input_size * sizeof (float),
                                 cudaMemcpyHostToDevice, m->stream)) != cudaSuccess)
        return (int) e;
    int rc = s_enqueue_layers (m, rows);
    if (rc != 0)
        return rc;
    if (what == CUDA_RUN_END_TO_END
        && (e = cudaMemcpyAsync (host_out, m->d_out, (size_t) rows * m->output_size * sizeof (float),
                                 cudaMemcpyDeviceToHost, m->stream)) != cudaSuccess)
        return (int) e;
    return 0;
}

/* Captures what s_enqueue_direct does for ROWS into an instantiated, uploaded graph. */
static int s_capture (backend_model_t *m, cuda_run_t what, uint32_t rows, cudaGraphExec_t *exec)
{
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture (m->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return (int) e;
    int rc = s_enqueue_direct (m, what, rows, m->h_in, m->h_out);
    e = cudaStreamEndCapture (m->stream, &graph);
    if (rc == 0 && e != cudaSuccess)
        rc = (int) e;
    if (rc == 0 && (e = cudaGraphInstantiate (exec, graph, 0)) != cudaSuccess)
        rc = (int) e;
    if (graph)
        cudaGraphDestroy (graph);
    if (rc == 0 && (e = cudaGraphUpload (*exec, m->stream)) != cudaSuccess)
        rc = (int) e;
    return rc;
}

/* ---- the piecewise interface (benchmarks, tests) ---- */

cudaStream_t cuda_model_stream (backend_model_t *m) { return m->stream; }
float *cuda_model_pinned_input (backend_model_t *m) { return m->h_in; }
float *cuda_model_pinned_output (backend_model_t *m) { return m->h_out; }

int cuda_model_enqueue (backend_model_t *m, cuda_run_t what, bool graph, uint32_t rows, const float *host_in,
                        float *host_out)
{
    if (m->persistent)
        return (int) cudaErrorNotSupported;   /* its stream belongs to the resident kernel */
    if (rows < 1 || rows > m->max_rows)
        return (int) cudaErrorInvalidValue;
    if (!graph)
        return s_enqueue_direct (m, what, rows, host_in, host_out);
    if (what == CUDA_RUN_END_TO_END && (host_in != m->h_in || host_out != m->h_out))
        return (int) cudaErrorInvalidValue;    /* the graphs were captured with the pinned buffers */
    const uint32_t k = m->bucket[rows];
    cudaGraphExec_t exec = what == CUDA_RUN_END_TO_END ? m->e2e[k] : m->kernels[k];
    return (int) cudaGraphLaunch (exec, m->stream);
}

int cuda_model_fetch_output (backend_model_t *m, uint32_t rows, float *host_out)
{
    if (m->persistent)
        return (int) cudaErrorNotSupported;
    cudaError_t e = cudaMemcpyAsync (host_out, m->d_out, (size_t) rows * m->output_size * sizeof (float),
                                     cudaMemcpyDefault, m->stream);   /* d_out may be mapped host memory */
    return (int) (e != cudaSuccess ? e : cudaStreamSynchronize (m->stream));
}

int cuda_model_wait (backend_model_t *m)
{
    if (m->persistent)
        return (int) cudaErrorNotSupported;
    cudaError_t e = cudaEventRecord (m->done, m->stream);
    if (e != cudaSuccess)
        return (int) e;
    switch (m->wait) {
    case CUDA_WAIT_BLOCK:
        return (int) cudaEventSynchronize (m->done);   /* a blocking-sync event: sleeps in the driver */
    case CUDA_WAIT_YIELD:
        while ((e = cudaEventQuery (m->done)) == cudaErrorNotReady)
            sched_yield ();
        return (int) e;
    case CUDA_WAIT_SPIN:
        break;
    }
    while ((e = cudaEventQuery (m->done)) == cudaErrorNotReady)
        ;
    return (int) e;
}

int cuda_graph_poison (backend_model_t *m)
{
    size_t act = (((size_t) m->max_rows * m->widest + 63) & ~(size_t) 63) * sizeof (float);
    cudaError_t e;
    if ((e = cudaMemsetAsync (m->d_out, 0xff, (size_t) m->max_rows * m->output_size * sizeof (float), m->stream))
            != cudaSuccess
        || (e = cudaMemsetAsync (m->d_act[0], 0xff, 2 * act, m->stream)) != cudaSuccess)
        return (int) e;
    e = cudaStreamSynchronize (m->stream);
    memset (m->h_out, 0xff, (size_t) m->max_rows * m->output_size * sizeof (float));   /* 0xffffffff is a NaN */
    return (int) e;
}

/* ---- the backend interface ---- */

sig_status_t cuda_graph_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err,
                               size_t errlen)
{
    if (m->lost) {
        sig_set_error (err, errlen, "model \"%s\": its CUDA context on device %d was lost; the model is unavailable",
                       m->name, m->device);
        return SIG_UNAVAILABLE;
    }
    /* Models of one server may sit on different devices: launches need this model's device
     * current on the serving thread (a thread-local setting, no system call). */
    cudaError_t e = cudaSetDevice (m->device);
    if (e != cudaSuccess)
        return s_fail (m, e, "set device", err, errlen);
    memcpy (m->h_in, in, (size_t) rows * m->input_size * sizeof (float));
    int rc = cuda_model_enqueue (m, CUDA_RUN_END_TO_END, m->graph, rows, m->h_in, m->h_out);
    if (rc != 0)
        return s_fail (m, (cudaError_t) rc, m->graph ? "graph launch" : "launch", err, errlen);
    rc = cuda_model_wait (m);
    if (rc != 0)
        return s_fail (m, (cudaError_t) rc, "wait", err, errlen);
    memcpy (out, m->h_out, (size_t) rows * m->output_size * sizeof (float));
    return SIG_OK;
}

void cuda_graph_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    cudaSetDevice (m->device);
    if (m->stream && !m->lost)
        cudaStreamSynchronize (m->stream);
    for (uint32_t k = 0; k < m->graph_count; k++) {
        if (m->e2e && m->e2e[k])
            cuda_device_release (m->device, CUDA_RELEASE_GRAPH, m->e2e[k]);
        if (m->kernels && m->kernels[k])
            cuda_device_release (m->device, CUDA_RELEASE_GRAPH, m->kernels[k]);
    }
    free (m->e2e);
    free (m->kernels);
    free (m->bucket);
    for (size_t i = 0; m->layers && i < m->layer_count; i++) {
        cuda_device_free (m->stream, m->layers[i].w);
        cuda_device_free (m->stream, m->layers[i].b);
    }
    free (m->layers);
    if (m->cublas)
        cuda_device_release (m->device, CUDA_RELEASE_CUBLAS, m->cublas);
    cuda_device_free (m->stream, m->cublas_workspace);
    cuda_device_free (m->stream, m->d_net);
    if (!m->zero_copy) {
        cuda_device_free (m->stream, m->d_in);
        cuda_device_free (m->stream, m->d_out);
    }
    cuda_device_free (m->stream, m->d_act[0]);
    cuda_device_release (m->device, CUDA_RELEASE_HOST, m->h_in);
    cuda_device_release (m->device, CUDA_RELEASE_HOST, m->h_out);
    if (m->done)
        cudaEventDestroy (m->done);
    if (m->stream)
        cudaStreamDestroy (m->stream);   /* returns at once; the frees queued on it still run */
    free (m);
    *m_p = NULL;
}

/* Copies one layer to the device in the layout of the model's kernel. */
static cudaError_t s_upload_layer (backend_model_t *m, cuda_layer_t *L, const dense_layer_t *src)
{
    L->in = src->in;
    L->out = src->out;
    L->activation = src->activation;
    L->out_pad = m->kernel == CUDA_KERNEL_MBYV ? sig_mbyv_out_pad (src->out) : src->out;
    size_t wcount = (size_t) L->in * L->out_pad;
    cudaError_t e;
    /* Copies from pageable memory return once the data is staged: the sources may go at once. */
    if ((e = s_dev_alloc (m, (void **) &L->w, wcount * sizeof (float))) != cudaSuccess
        || (e = s_dev_alloc (m, (void **) &L->b, L->out * sizeof (float))) != cudaSuccess
        || (e = cudaMemcpyAsync (L->b, src->bias, L->out * sizeof (float), cudaMemcpyHostToDevice, m->stream))
               != cudaSuccess)
        return e;
    if (m->kernel != CUDA_KERNEL_MBYV)
        return cudaMemcpyAsync (L->w, src->weight, wcount * sizeof (float), cudaMemcpyHostToDevice, m->stream);
    float *packed = malloc (wcount * sizeof (float));
    if (!packed)
        return cudaErrorMemoryAllocation;
    sig_pack_kmajor (src->weight, L->in, L->out, packed, L->out_pad);
    e = cudaMemcpyAsync (L->w, packed, wcount * sizeof (float), cudaMemcpyHostToDevice, m->stream);
    free (packed);
    return e;
}

static cudaError_t s_upload_fused_net (backend_model_t *m)
{
    sig_fused_net_t net;
    memset (&net, 0, sizeof net);
    net.layer_count = (uint32_t) m->layer_count;
    net.widest = m->widest;
    for (size_t i = 0; i < m->layer_count; i++)
        net.layers[i] = (sig_fused_layer_t) { .w = m->layers[i].w, .b = m->layers[i].b, .in = m->layers[i].in,
                                              .out = m->layers[i].out, .act = (int) m->layers[i].activation };
    cudaError_t e = (cudaError_t) sig_fused_net_validate (&net, m->max_rows);
    if (e == cudaSuccess)
        e = s_dev_alloc (m, (void **) &m->d_net, sizeof net);
    return e != cudaSuccess ? e : cudaMemcpyAsync (m->d_net, &net, sizeof net, cudaMemcpyHostToDevice, m->stream);
}

static cudaError_t s_allocate (backend_model_t *m, const weights_t *w)
{
    size_t in_bytes = (size_t) m->max_rows * m->input_size * sizeof (float);
    size_t out_bytes = (size_t) m->max_rows * m->output_size * sizeof (float);
    /* Each half rounded up to 64 floats: the second stays 256-byte aligned, so kernels reading it
     * keep their 16-byte loads. */
    size_t act_floats = ((size_t) m->max_rows * m->widest + 63) & ~(size_t) 63;
    size_t act_bytes = act_floats * sizeof (float);
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags (&m->stream, cudaStreamNonBlocking)) != cudaSuccess
        || (e = cudaEventCreateWithFlags (&m->done, cudaEventDisableTiming
                                                        | (m->wait == CUDA_WAIT_BLOCK ? cudaEventBlockingSync : 0)))
               != cudaSuccess
        || (e = cudaHostAlloc ((void **) &m->h_in, in_bytes, m->zero_copy ? cudaHostAllocMapped : cudaHostAllocDefault))
               != cudaSuccess
        || (e = cudaHostAlloc ((void **) &m->h_out, out_bytes, m->zero_copy ? cudaHostAllocMapped : cudaHostAllocDefault))
               != cudaSuccess
        || (e = s_dev_alloc (m, (void **) &m->d_act[0], 2 * act_bytes)) != cudaSuccess)
        return e;
    if (m->zero_copy) {
        if ((e = cudaHostGetDevicePointer ((void **) &m->d_in, m->h_in, 0)) != cudaSuccess
            || (e = cudaHostGetDevicePointer ((void **) &m->d_out, m->h_out, 0)) != cudaSuccess)
            return e;
    } else if ((e = s_dev_alloc (m, (void **) &m->d_in, in_bytes)) != cudaSuccess
               || (e = s_dev_alloc (m, (void **) &m->d_out, out_bytes)) != cudaSuccess)
        return e;
    m->d_act[1] = m->d_act[0] + act_floats;
    memset (m->h_in, 0, in_bytes);
    memset (m->h_out, 0, out_bytes);
    for (size_t i = 0; i < w->layer_count; i++)
        if ((e = s_upload_layer (m, &m->layers[i], &w->layers[i])) != cudaSuccess)
            return e;
    if (m->kernel == CUDA_KERNEL_FUSED && (e = s_upload_fused_net (m)) != cudaSuccess)
        return e;
    if (m->kernel == CUDA_KERNEL_CUBLAS) {
        /* The handle gets its stream and an explicit workspace before any capture: cuBLAS must not
         * allocate while a graph is being captured. */
        if (cublasCreate (&m->cublas) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorInitializationError;
        if ((e = s_dev_alloc (m, &m->cublas_workspace, CUBLAS_WORKSPACE_BYTES)) != cudaSuccess)
            return e;
        if (cublasSetStream (m->cublas, m->stream) != CUBLAS_STATUS_SUCCESS
            || cublasSetWorkspace (m->cublas, m->cublas_workspace, CUBLAS_WORKSPACE_BYTES) != CUBLAS_STATUS_SUCCESS
            || cublasSetMathMode (m->cublas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorInitializationError;
    }
    return cudaStreamSynchronize (m->stream);   /* every allocation and copy done before anything else uses them */
}

backend_model_t *cuda_graph_load (const weights_t *w, const model_config_t *cfg, int device, char *err,
                                  size_t errlen)
{
    const cuda_kernel_info_t *kernel = cuda_kernel_info (cfg->kernel);
    if (!kernel || (!s_launch[cfg->kernel].layer && !s_launch[cfg->kernel].whole)) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"%s\" is not launched per request (no graph path)",
                       cfg->name, cuda_kernel_name (cfg->kernel));
        return NULL;
    }
    if (!kernel->beside_resident && cuda_device_resident (device) > 0) {   /* docs/persistent-notes.md */
        sig_set_error (err, errlen, "model \"%s\": kernel \"%s\" cannot be loaded while a persistent kernel is "
                       "resident on device %d (cuBLAS waits for the whole device, which a persistent kernel never lets "
                       "go idle); load it before the persistent models, or use kernel \"warp\", \"mbyv\" or "
                       "\"fused\"", cfg->name, cuda_kernel_name (cfg->kernel), device);
        return NULL;
    }
    if (kernel->clusters && !sig_clusters_supported (device, 0, NULL, NULL)) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"%s\" needs thread-block clusters (compute capability "
                       "9.0 or later) and device %d has none; use warp, mbyv or cublas", cfg->name,
                       cuda_kernel_name (cfg->kernel), device);
        return NULL;
    }
    if (cfg->kernel == CUDA_KERNEL_FUSED && w->layer_count > SIG_FUSED_MAX_LAYERS) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"fused\" takes at most %d layers, the model has %zu",
                       cfg->name, SIG_FUSED_MAX_LAYERS, w->layer_count);
        return NULL;
    }
    model_config_t buckets = *cfg;
    config_graph_rows_default (&buckets);
    if ((uint32_t) buckets.graph_rows[buckets.graph_rows_count - 1] < backend_rows (cfg)) {
        sig_set_error (err, errlen, "model \"%s\": graph_rows: the largest (%d) is below the largest launch (%u)",
                       cfg->name, buckets.graph_rows[buckets.graph_rows_count - 1], backend_rows (cfg));
        return NULL;
    }
    backend_model_t *m = calloc (1, sizeof *m);
    if (!m || !(m->layers = calloc (w->layer_count, sizeof *m->layers))
        || !(m->e2e = calloc (buckets.graph_rows_count, sizeof *m->e2e))
        || !(m->kernels = calloc (buckets.graph_rows_count, sizeof *m->kernels))
        || !(m->bucket = calloc (backend_rows (cfg) + 1, sizeof *m->bucket))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        if (m) {
            free (m->layers);
            free (m->e2e);
            free (m->kernels);
            free (m);
        }
        return NULL;
    }
    m->graph_count = (uint32_t) buckets.graph_rows_count;
    for (uint32_t k = 0, r = 1; k < m->graph_count; k++) {
        m->graph_rows[k] = (uint32_t) buckets.graph_rows[k];
        for (; r <= m->graph_rows[k] && r <= backend_rows (cfg); r++)
            m->bucket[r] = (uint8_t) k;
    }
    snprintf (m->name, sizeof m->name, "%s", cfg->name);
    m->device = device;
    m->kernel = cfg->kernel;
    m->graph = cfg->graph;
    m->zero_copy = cfg->zero_copy;
    snprintf (m->label, sizeof m->label, "%s%s%s", cuda_kernel_name (m->kernel), m->graph ? "+graph" : "",
              m->zero_copy ? "+zerocopy" : "");
    m->wait = cfg->wait;
    m->max_rows = backend_rows (cfg);
    m->input_size = w->input_size;
    m->output_size = w->output_size;
    m->widest = w->widest;
    m->layer_count = w->layer_count;
    cudaError_t e = cudaSetDevice (m->device);
    if (e == cudaSuccess)
        e = s_allocate (m, w);
    if (e != cudaSuccess) {
        s_fail (m, e, "allocation", err, errlen);
        cuda_graph_destroy (&m);
        return NULL;
    }
    /* One graph per batch size of graph_rows, for the request (copies included) and for the layers
     * alone; each replayed a few times so the first request finds everything resident and warm. */
    for (uint32_t k = 0; k < m->graph_count; k++) {
        const uint32_t r = m->graph_rows[k];
        int rc = s_capture (m, CUDA_RUN_END_TO_END, r, &m->e2e[k]);
        if (rc == 0)
            rc = s_capture (m, CUDA_RUN_KERNELS, r, &m->kernels[k]);
        for (int i = 0; rc == 0 && i < 3; i++) {
            rc = cuda_model_enqueue (m, CUDA_RUN_END_TO_END, m->graph, r, m->h_in, m->h_out);
            if (rc == 0)
                rc = (int) cudaStreamSynchronize (m->stream);
        }
        if (rc != 0) {
            s_fail (m, (cudaError_t) rc, "graph capture and warm-up", err, errlen);
            cuda_graph_destroy (&m);
            return NULL;
        }
    }
    return m;
}
