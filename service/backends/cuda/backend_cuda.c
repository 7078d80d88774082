/* The CUDA backend (backend_cuda.h says what it holds). One model = one stream, its buffers and
 * its graphs; the request path is: copy the features into pinned memory, replay the graph for
 * that batch size (or launch directly when "graph" is false), record the completion event, wait
 * as configured, copy the outputs out of pinned memory.
 *
 * Kernel "persistent" (and the ping-pong floor) lives in backend_cuda_persistent.c: infer, destroy
 * and load hand such models to it. What the two files share is in backend_cuda_impl.h.
 *
 * While a persistent kernel runs, any call that synchronises the device waits for it forever.
 * Measured on an H100 (docs/persistent-notes.md): cudaFree, cudaFreeHost, cublasCreate,
 * cublasDestroy and a cuBLAS handle's first GEMM do; cudaMalloc, cudaHostAlloc, the stream-ordered
 * allocator, streams, events and graph instantiate/upload/destroy do not (with
 * CUDA_MODULE_LOADING=EAGER; lazily loaded modules wait too). So, for every model, persistent or
 * not: device memory comes from a stream-ordered pool per device (cudaMallocFromPoolAsync /
 * cudaFreeAsync on the model's own stream; the pool never gives memory back), pinned host memory,
 * cuBLAS handles (and, to be safe, graph executables) are released at once only while no
 * persistent kernel is resident on the device (on any device, for host memory), otherwise queued
 * for the last resident kernel's destroy; and a cublas model is refused while a persistent kernel
 * is resident on its device. Nothing here calls cudaDeviceSynchronize. */
#define _GNU_SOURCE
#include "backends/cuda/backend_cuda_impl.h"

#include "base/log.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUBLAS_WORKSPACE_BYTES (4u << 20)

/* Errors after which the context cannot run anything again (the "sticky" ones). */
static bool s_sticky (cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction: case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc: case cudaErrorLaunchTimeout: case cudaErrorECCUncorrectable:
    case cudaErrorAssert: case cudaErrorContextIsDestroyed: case cudaErrorDevicesUnavailable:
    case cudaErrorCudartUnloading: case cudaErrorUnknown: case cudaErrorNvlinkUncorrectable:
    case cudaErrorSystemNotReady: case cudaErrorStreamCaptureInvalidated:
        return true;
    default:
        return false;
    }
}

/* Turns a CUDA error into a status, naming the model and what failed. */
sig_status_t cuda_fail (backend_model_t *m, cudaError_t e, const char *what, char *err, size_t errlen)
{
    if (s_sticky (e))
        m->lost = true;
    sig_set_error (err, errlen, "model \"%s\": CUDA %s failed on device %d: %s (%s)%s", m->name, what, m->device,
                   cudaGetErrorString (e), cudaGetErrorName (e), m->lost ? "; the model is unavailable" : "");
    return m->lost ? SIG_UNAVAILABLE : SIG_INTERNAL;
}

int cuda_device_count (int *count, char *why, size_t whylen)
{
    *count = 0;
    cudaError_t e = cudaGetDeviceCount (count);
    if (e != cudaSuccess || *count == 0) {
        sig_set_error (why, whylen, "%s", e != cudaSuccess ? cudaGetErrorString (e) : "no CUDA device");
        *count = 0;
        return -1;
    }
    return 0;
}

/* ---- resources that must not synchronise the device while a persistent kernel runs ---- */

#define MAX_DEVICES 64

typedef enum { RELEASE_HOST, RELEASE_GRAPH, RELEASE_CUBLAS } release_kind_t;
typedef struct {
    int device;
    release_kind_t kind;
    void *p;
} release_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;   /* load and destroy only, never a request */
static int s_resident[MAX_DEVICES];       /* persistent kernels launched and not seen to exit */
static int s_resident_total;
static cudaMemPool_t s_pools[MAX_DEVICES];
static release_t *s_deferred;             /* releases waiting for the device to have no resident kernel */
static size_t s_deferred_count, s_deferred_cap;
static sig_persistent_tuning_t s_tuning;  /* tests and benchmarks: cuda_persistent_tuning */

static void s_release_now (const release_t *r)
{
    cudaSetDevice (r->device);
    switch (r->kind) {
    case RELEASE_HOST: cudaFreeHost (r->p); break;
    case RELEASE_GRAPH: cudaGraphExecDestroy ((cudaGraphExec_t) r->p); break;
    case RELEASE_CUBLAS: cublasDestroy ((cublasHandle_t) r->p); break;
    }
}

/* Releases P now, or later when no persistent kernel could be made to wait by it. */
static void s_release (int device, release_kind_t kind, void *p)
{
    if (!p)
        return;
    release_t r = { device, kind, p };
    pthread_mutex_lock (&s_lock);
    const bool busy = kind == RELEASE_HOST || device < 0 || device >= MAX_DEVICES ? s_resident_total > 0
                                                                                 : s_resident[device] > 0;
    if (busy && s_deferred_count == s_deferred_cap) {
        size_t cap = s_deferred_cap ? 2 * s_deferred_cap : 64;
        release_t *grown = realloc (s_deferred, cap * sizeof *grown);
        if (grown) {
            s_deferred = grown;
            s_deferred_cap = cap;
        }
    }
    if (busy && s_deferred_count < s_deferred_cap)
        s_deferred[s_deferred_count++] = r;
    else if (busy)
        log_warn ("CUDA backend: out of memory for the list of deferred releases; one buffer is leaked");
    else
        s_release_now (&r);
    pthread_mutex_unlock (&s_lock);
}

void cuda_resident_add (int device, int delta)
{
    if (device < 0 || device >= MAX_DEVICES)
        return;
    pthread_mutex_lock (&s_lock);
    s_resident[device] += delta;
    s_resident_total += delta;
    size_t kept = 0;
    for (size_t i = 0; i < s_deferred_count; i++) {
        const release_t *r = &s_deferred[i];
        if (r->kind == RELEASE_HOST || r->device < 0 || r->device >= MAX_DEVICES ? s_resident_total == 0
                                                                                 : s_resident[r->device] == 0)
            s_release_now (r);
        else
            s_deferred[kept++] = *r;
    }
    s_deferred_count = kept;
    pthread_mutex_unlock (&s_lock);
}

cudaError_t cuda_device_pool (int device, cudaMemPool_t *pool)
{
    if (device < 0 || device >= MAX_DEVICES)
        return cudaErrorInvalidDevice;
    pthread_mutex_lock (&s_lock);
    cudaError_t e = cudaSuccess;
    if (!s_pools[device]) {
        struct cudaMemPoolProps props;
        memset (&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        e = cudaMemPoolCreate (&s_pools[device], &props);
        if (e == cudaSuccess) {
            uint64_t keep = UINT64_MAX;
            e = cudaMemPoolSetAttribute (s_pools[device], cudaMemPoolAttrReleaseThreshold, &keep);
        }
        if (e != cudaSuccess)
            s_pools[device] = NULL;
    }
    *pool = s_pools[device];
    pthread_mutex_unlock (&s_lock);
    return e;
}

/* Device memory for model M, ordered on its stream (the load synchronises the stream before
 * anything else uses it). */
cudaError_t cuda_dev_alloc (backend_model_t *m, void **p, size_t bytes)
{
    cudaMemPool_t pool;
    cudaError_t e = cuda_device_pool (m->device, &pool);
    return e != cudaSuccess ? e : cudaMallocFromPoolAsync (p, bytes ? bytes : 16, pool, m->stream);
}
static void s_dev_free (backend_model_t *m, void *p)
{
    if (p && m->stream)
        cudaFreeAsync (p, m->stream);
}

void cuda_persistent_tuning (const sig_persistent_tuning_t *tuning)
{
    pthread_mutex_lock (&s_lock);
    if (tuning)
        s_tuning = *tuning;
    else
        memset (&s_tuning, 0, sizeof s_tuning);
    pthread_mutex_unlock (&s_lock);
}

void cuda_persistent_tuning_get (sig_persistent_tuning_t *tuning)
{
    pthread_mutex_lock (&s_lock);
    *tuning = s_tuning;
    pthread_mutex_unlock (&s_lock);
}

/* ---- launching the layers ---- */

static int s_enqueue_layers (backend_model_t *m, uint32_t rows)
{
    if (m->kernel == CUDA_KERNEL_FUSED)
        return sig_mlp_fused (m->d_net, m->d_in, m->d_out, m->d_act[0], rows, m->stream);
    const float *x = m->d_in;
    for (size_t i = 0; i < m->layer_count; i++) {
        const cuda_layer_t *L = &m->layers[i];
        float *y = i + 1 == m->layer_count ? m->d_out : m->d_act[i & 1];
        int rc = 0;
        switch (m->kernel) {
        case CUDA_KERNEL_WARP:
            rc = sig_dense_warp (L->w, L->b, x, y, L->in, L->out, rows, (int) L->activation, m->stream);
            break;
        case CUDA_KERNEL_MBYV:
            rc = sig_dense_mbyv (L->w, L->b, x, y, L->in, L->out, L->out_pad, rows, (int) L->activation, m->stream);
            break;
        case CUDA_KERNEL_CUBLAS: {
            /* Row-major W [out][in] is column-major [in][out]: y (out x rows) = W^T-view x. */
            const float one = 1.0f, zero = 0.0f;
            cublasStatus_t st = cublasSgemm (m->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int) L->out, (int) rows,
                                             (int) L->in, &one, L->w, (int) L->in, x, (int) L->in, &zero, y,
                                             (int) L->out);
            rc = st == CUBLAS_STATUS_SUCCESS ? 0 : (int) cudaErrorLaunchFailure;
            if (rc == 0)
                rc = sig_bias_act (L->b, y, L->out, rows, (int) L->activation, m->stream);
            break;
        }
        case CUDA_KERNEL_FUSED:
        case CUDA_KERNEL_PERSISTENT:
            break;
        }
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
bool cuda_model_lost (const backend_model_t *m) { return m->lost; }

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
    cudaGraphExec_t exec = what == CUDA_RUN_END_TO_END ? m->e2e[rows] : m->kernels[rows];
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

int cuda_model_poison (backend_model_t *m)
{
    if (m->persistent) {   /* no device buffers outside the kernel's shared memory: the slots' outputs */
        for (uint32_t i = 0; i < m->layout.ring; i++)
            memset (m->box + m->layout.slots + (size_t) i * m->layout.slot_bytes + m->layout.outputs, 0xff,
                    (size_t) m->max_rows * m->output_size * sizeof (float));
        return 0;
    }
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

int cuda_model_inject_fault (backend_model_t *m)
{
    cudaSetDevice (m->device);
    return sig_fault_kernel (m->persistent ? m->side : m->stream);
}

int cuda_model_persistent_stall (backend_model_t *m, bool stall)
{
    if (!m || !m->persistent || !m->box)
        return (int) cudaErrorInvalidValue;
    __atomic_store_n ((uint32_t *) (m->box + m->layout.ctrl + 4), stall ? 1u : 0u, __ATOMIC_RELEASE);
    return 0;
}

const sig_persistent_plan_t *cuda_model_persistent_plan (const backend_model_t *m)
{
    return m && m->persistent && !m->pingpong ? &m->plan : NULL;
}

/* ---- the backend interface ---- */

sig_status_t cuda_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    if (m->lost) {
        if (m->hung)
            sig_set_error (err, errlen, "model \"%s\": its persistent kernel on device %d stopped answering (watchdog "
                           "%u ms); the model is unavailable", m->name, m->device, m->watchdog_ms);
        else
            sig_set_error (err, errlen, "model \"%s\": its CUDA context on device %d was lost; the model is "
                           "unavailable", m->name, m->device);
        return SIG_UNAVAILABLE;
    }
    if (m->persistent)
        return cuda_persistent_infer (m, in, rows, out, err, errlen);
    /* Models of one server may sit on different devices: launches need this model's device
     * current on the serving thread (a thread-local setting, no system call). */
    cudaError_t e = cudaSetDevice (m->device);
    if (e != cudaSuccess)
        return cuda_fail (m, e, "set device", err, errlen);
    memcpy (m->h_in, in, (size_t) rows * m->input_size * sizeof (float));
    int rc = cuda_model_enqueue (m, CUDA_RUN_END_TO_END, m->graph, rows, m->h_in, m->h_out);
    if (rc != 0)
        return cuda_fail (m, (cudaError_t) rc, m->graph ? "graph launch" : "launch", err, errlen);
    rc = cuda_model_wait (m);
    if (rc != 0)
        return cuda_fail (m, (cudaError_t) rc, "wait", err, errlen);
    memcpy (out, m->h_out, (size_t) rows * m->output_size * sizeof (float));
    return SIG_OK;
}

static const char *s_cuda_kernel_name (const backend_model_t *m)
{
    if (m->persistent)
        return m->pingpong ? "pingpong" : "persistent";   /* always mapped memory, never a graph */
    if ((unsigned) m->kernel > CUDA_KERNEL_FUSED)
        return cuda_kernel_name (m->kernel);
    static const char *const names[2][2][4] = {
        { { "warp", "cublas", "mbyv", "fused" }, { "warp+zerocopy", "cublas+zerocopy", "mbyv+zerocopy", "fused+zerocopy" } },
        { { "warp+graph", "cublas+graph", "mbyv+graph", "fused+graph" },
          { "warp+graph+zerocopy", "cublas+graph+zerocopy", "mbyv+graph+zerocopy", "fused+graph+zerocopy" } } };
    return names[m->graph][m->zero_copy][m->kernel];
}

void cuda_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    cudaSetDevice (m->device);
    if (m->persistent && !cuda_persistent_stop (m)) {
        free (m->layers);
        free (m->e2e);
        free (m->kernels);
        free (m);
        *m_p = NULL;
        return;
    }
    if (m->stream && !m->lost && !m->persistent)
        cudaStreamSynchronize (m->stream);
    for (uint32_t r = 0; r <= m->max_rows; r++) {
        if (m->e2e && m->e2e[r])
            s_release (m->device, RELEASE_GRAPH, m->e2e[r]);
        if (m->kernels && m->kernels[r])
            s_release (m->device, RELEASE_GRAPH, m->kernels[r]);
    }
    free (m->e2e);
    free (m->kernels);
    for (size_t i = 0; m->layers && i < m->layer_count; i++) {
        s_dev_free (m, m->layers[i].w);
        s_dev_free (m, m->layers[i].b);
    }
    free (m->layers);
    if (m->cublas)
        s_release (m->device, RELEASE_CUBLAS, m->cublas);
    s_dev_free (m, m->cublas_workspace);
    s_dev_free (m, m->d_net);
    if (!m->zero_copy) {
        s_dev_free (m, m->d_in);
        s_dev_free (m, m->d_out);
    }
    s_dev_free (m, m->d_act[0]);
    s_dev_free (m, m->d_image);
    s_release (m->device, RELEASE_HOST, m->h_in);
    s_release (m->device, RELEASE_HOST, m->h_out);
    s_release (m->device, RELEASE_HOST, m->box);
    if (m->done)
        cudaEventDestroy (m->done);
    if (m->stream)
        cudaStreamDestroy (m->stream);   /* returns at once; the frees queued on it still run */
    if (m->side)
        cudaStreamDestroy (m->side);
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
    if ((e = cuda_dev_alloc (m, (void **) &L->w, wcount * sizeof (float))) != cudaSuccess
        || (e = cuda_dev_alloc (m, (void **) &L->b, L->out * sizeof (float))) != cudaSuccess
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
        e = cuda_dev_alloc (m, (void **) &m->d_net, sizeof net);
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
        || (e = cuda_dev_alloc (m, (void **) &m->d_act[0], 2 * act_bytes)) != cudaSuccess)
        return e;
    if (m->zero_copy) {
        if ((e = cudaHostGetDevicePointer ((void **) &m->d_in, m->h_in, 0)) != cudaSuccess
            || (e = cudaHostGetDevicePointer ((void **) &m->d_out, m->h_out, 0)) != cudaSuccess)
            return e;
    } else if ((e = cuda_dev_alloc (m, (void **) &m->d_in, in_bytes)) != cudaSuccess
               || (e = cuda_dev_alloc (m, (void **) &m->d_out, out_bytes)) != cudaSuccess)
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
        if ((e = cuda_dev_alloc (m, &m->cublas_workspace, CUBLAS_WORKSPACE_BYTES)) != cudaSuccess)
            return e;
        if (cublasSetStream (m->cublas, m->stream) != CUBLAS_STATUS_SUCCESS
            || cublasSetWorkspace (m->cublas, m->cublas_workspace, CUBLAS_WORKSPACE_BYTES) != CUBLAS_STATUS_SUCCESS
            || cublasSetMathMode (m->cublas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorInitializationError;
    }
    return cudaStreamSynchronize (m->stream);   /* every allocation and copy done before anything else uses them */
}

static backend_model_t *s_cuda_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    int count = 0;
    char why[256];
    if (cuda_device_count (&count, why, sizeof why) != 0 || device >= count) {
        sig_set_error (err, errlen, "model \"%s\": device %d: %s", cfg->name, device,
                       count ? "no such CUDA device" : why);
        return NULL;
    }
    if (cfg->kernel == CUDA_KERNEL_PERSISTENT)
        return cuda_persistent_load (w, cfg, device, err, errlen);
    if (cfg->kernel == CUDA_KERNEL_CUBLAS && device < MAX_DEVICES) {
        pthread_mutex_lock (&s_lock);
        const int resident = s_resident[device];
        pthread_mutex_unlock (&s_lock);
        if (resident > 0) {   /* measured: docs/persistent-notes.md */
            sig_set_error (err, errlen, "model \"%s\": kernel \"cublas\" cannot be loaded while a persistent kernel "
                           "is resident on device %d (cuBLAS waits for the whole device, which a persistent kernel "
                           "never lets go idle); load it before the persistent models, or use kernel \"warp\", "
                           "\"mbyv\" or \"fused\"", cfg->name, device);
            return NULL;
        }
    }
    if (cfg->kernel == CUDA_KERNEL_FUSED && !sig_fused_supported (device)) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"fused\" needs thread-block clusters (compute capability "
                       "9.0 or later) and device %d has none; use warp, mbyv or cublas", cfg->name, device);
        return NULL;
    }
    if (cfg->kernel == CUDA_KERNEL_FUSED && w->layer_count > SIG_FUSED_MAX_LAYERS) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"fused\" takes at most %d layers, the model has %zu",
                       cfg->name, SIG_FUSED_MAX_LAYERS, w->layer_count);
        return NULL;
    }
    backend_model_t *m = calloc (1, sizeof *m);
    if (!m || !(m->layers = calloc (w->layer_count, sizeof *m->layers))
        || !(m->e2e = calloc (backend_rows (cfg) + 1, sizeof *m->e2e))
        || !(m->kernels = calloc (backend_rows (cfg) + 1, sizeof *m->kernels))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        if (m) {
            free (m->layers);
            free (m->e2e);
            free (m);
        }
        return NULL;
    }
    snprintf (m->name, sizeof m->name, "%s", cfg->name);
    m->device = device;
    m->kernel = cfg->kernel;
    m->graph = cfg->graph;
    m->zero_copy = cfg->zero_copy;
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
        cuda_fail (m, e, "allocation", err, errlen);
        cuda_destroy (&m);
        return NULL;
    }
    /* One graph per batch size, for the request (copies included) and for the layers alone;
     * each replayed a few times so the first request finds everything resident and warm. */
    for (uint32_t r = 1; r <= m->max_rows; r++) {
        int rc = s_capture (m, CUDA_RUN_END_TO_END, r, &m->e2e[r]);
        if (rc == 0)
            rc = s_capture (m, CUDA_RUN_KERNELS, r, &m->kernels[r]);
        for (int i = 0; rc == 0 && i < 3; i++) {
            rc = cuda_model_enqueue (m, CUDA_RUN_END_TO_END, m->graph, r, m->h_in, m->h_out);
            if (rc == 0)
                rc = (int) cudaStreamSynchronize (m->stream);
        }
        if (rc != 0) {
            cuda_fail (m, (cudaError_t) rc, "graph capture and warm-up", err, errlen);
            cuda_destroy (&m);
            return NULL;
        }
    }
    return m;
}

const backend_iface_t backend_cuda_iface = {
    .name = "cuda",
    .load = s_cuda_load,
    .infer = cuda_infer,
    .kernel_name = s_cuda_kernel_name,
    .destroy = cuda_destroy,
};
