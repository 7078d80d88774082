/* The CUDA backend (backend_cuda.h says what it holds). One model = one stream, its buffers and
 * its graphs; the request path is: copy the features into pinned memory, replay the graph for
 * that batch size (or launch directly when "graph" is false), record the completion event, wait
 * as configured, copy the outputs out of pinned memory.
 *
 * Kernel "persistent" instead launches one resident cluster at load (kernels/mlp_persistent.cu)
 * and serves each request through a slot of a mailbox in mapped pinned memory: features in, the
 * request word published with a release store, a spin (or yield, or short sleeps) on the slot's
 * completion with acquire loads, outputs out. No CUDA call on that path. A host watchdog turns a
 * kernel that stops answering into SIG_UNAVAILABLE.
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
#include "backend_cuda.h"

#include "kernels.h"
#include "log.h"

#include <cublas_v2.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CUBLAS_WORKSPACE_BYTES (4u << 20)

typedef struct {
    uint32_t in, out, out_pad;  /* out_pad: mbyv's M padded to 32; out otherwise */
    activation_t activation;
    float *w;                   /* device, in the kernel's layout */
    float *b;                   /* device */
} cuda_layer_t;

struct backend_model {
    char name[CONFIG_NAME_MAX];
    int device;
    cuda_kernel_t kernel;
    bool graph;                 /* the request path replays graphs (else direct launches) */
    bool zero_copy;             /* d_in/d_out are the device addresses of mapped h_in/h_out */
    cuda_wait_t wait;
    uint32_t max_rows, input_size, output_size, widest;
    size_t layer_count;
    cuda_layer_t *layers;
    cudaStream_t stream;        /* non-blocking: never synchronises with the legacy stream */
    cudaEvent_t done;           /* recorded after each run; what the host waits on */
    float *h_in, *h_out;        /* pinned, max_rows rows */
    float *d_in, *d_out;        /* device, max_rows rows (zero_copy: h_in and h_out, mapped) */
    float *d_act[2];            /* device ping-pong activations, max_rows x widest each, one block:
                                   the fused kernel takes the pair as its 2 x rows x widest scratch */
    sig_fused_net_t *d_net;     /* fused: the network description, in device memory */
    cublasHandle_t cublas;      /* cublas: handle bound to the stream, with its own workspace */
    void *cublas_workspace;
    cudaGraphExec_t *e2e;       /* [rows]: H2D, layers, D2H with the pinned buffers */
    cudaGraphExec_t *kernels;   /* [rows]: the layers only (benchmarks) */
    bool lost;                  /* the context is unusable: every infer answers UNAVAILABLE */
    /* kernel "persistent" (and the ping-pong floor) */
    bool persistent;
    bool pingpong;              /* the floor kernel, not the MLP (sigbench) */
    bool resident;              /* launched and not yet seen to exit: counts in s_resident */
    bool hung;                  /* the watchdog fired */
    uint8_t *box;               /* the mailbox, mapped pinned memory (host address) */
    void *d_box;                /* its device address */
    void *d_image;              /* the weights image (device) */
    sig_persistent_layout_t layout;
    sig_persistent_plan_t plan;
    uint64_t next;              /* requests published so far: request n uses slot n % RING, sequence n + 1 */
    uint32_t watchdog_ms;
    uint32_t done_mode;
    cudaStream_t side;          /* a second stream (the first is the kernel's for good): test faults */
};

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
static sig_status_t s_fail (backend_model_t *m, cudaError_t e, const char *what, char *err, size_t errlen)
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

static void s_resident_add (int device, int delta)
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

/* The device's pool for stream-ordered allocations; it keeps what is freed (no trimming, which
 * could synchronise). */
static cudaError_t s_pool (int device, cudaMemPool_t *pool)
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
static cudaError_t s_dev_alloc (backend_model_t *m, void **p, size_t bytes)
{
    cudaMemPool_t pool;
    cudaError_t e = s_pool (m->device, &pool);
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

/* ---- persistent: the request path ---- */

static double s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static uint8_t *s_slot (backend_model_t *m, uint64_t n)
{
    return m->box + m->layout.slots + (size_t) (n % m->layout.ring) * m->layout.slot_bytes;
}

/* Whether request N's outputs are complete (acquire loads: what the kernel wrote before is
 * visible once this says yes). */
static bool s_answered (const backend_model_t *m, const uint8_t *slot, uint32_t seq, uint32_t words)
{
    if (m->done_mode == SIG_DONE_SEQUENCE)
        return __atomic_load_n ((const uint32_t *) (slot + m->layout.done), __ATOMIC_ACQUIRE) == seq;
    const uint32_t *y = (const uint32_t *) (slot + m->layout.outputs);
    for (uint32_t i = 0; i < words; i++)
        if (__atomic_load_n (&y[i], __ATOMIC_ACQUIRE) == SIG_PERSISTENT_SENTINEL)
            return false;
    return true;
}

/* A request that got no answer: the watchdog fired, or the kernel is gone (a sticky error in the
 * context, or it exited). The model is unavailable from now on. */
static sig_status_t s_persistent_lost (backend_model_t *m, cudaError_t e, char *err, size_t errlen)
{
    m->lost = true;
    if (e == cudaErrorNotReady) {
        m->hung = true;
        sig_set_error (err, errlen, "model \"%s\": the persistent kernel on device %d did not answer within the "
                       "watchdog (%u ms); the model is unavailable", m->name, m->device, m->watchdog_ms);
    } else if (e == cudaSuccess) {
        m->resident = false;   /* it exited: nothing of this model runs on the device any more */
        s_resident_add (m->device, -1);
        sig_set_error (err, errlen, "model \"%s\": the persistent kernel on device %d exited unexpectedly; the "
                       "model is unavailable", m->name, m->device);
    } else {
        sig_set_error (err, errlen, "model \"%s\": CUDA persistent kernel failed on device %d: %s (%s); the model "
                       "is unavailable", m->name, m->device, cudaGetErrorString (e), cudaGetErrorName (e));
    }
    return SIG_UNAVAILABLE;
}

/* Waits for request SEQ in SLOT: spin (pause), yield, or short sleeps, with the watchdog. The
 * clock is read every 64 rounds only, the first reading starting the watchdog (a few microseconds
 * after the request was published); past 1 ms the stream is asked about every millisecond, so a
 * context trapped by another model is reported long before the watchdog. */
static sig_status_t s_persistent_wait (backend_model_t *m, const uint8_t *slot, uint32_t seq, uint32_t words,
                                       char *err, size_t errlen)
{
    double start = 0.0, asked = 0.0;
    for (uint32_t spins = 1;; spins++) {
        if (s_answered (m, slot, seq, words))
            return SIG_OK;
        if ((spins & 63u) == 0u) {
            const double now = s_now_ms ();
            if (start == 0.0)
                start = asked = now;
            else if (now - start >= (double) m->watchdog_ms) {
                if (s_answered (m, slot, seq, words))
                    return SIG_OK;
                cudaSetDevice (m->device);
                cudaError_t e = cudaStreamQuery (m->stream);
                return s_persistent_lost (m, e == cudaSuccess || e == cudaErrorNotReady ? cudaErrorNotReady : e, err,
                                          errlen);
            } else if (now - asked >= 1.0) {
                asked = now;
                cudaSetDevice (m->device);
                cudaError_t e = cudaStreamQuery (m->stream);
                if (e != cudaErrorNotReady && !s_answered (m, slot, seq, words))
                    return s_persistent_lost (m, e, err, errlen);
            }
        }
        switch (m->wait) {
        case CUDA_WAIT_SPIN: __builtin_ia32_pause (); break;
        case CUDA_WAIT_YIELD: sched_yield (); break;
        case CUDA_WAIT_BLOCK: {
            const struct timespec ts = { 0, 2000 };
            nanosleep (&ts, NULL);
            break;
        }
        }
    }
}

static sig_status_t s_persistent_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err,
                                        size_t errlen)
{
    const uint64_t n = m->next;
    const uint32_t seq = (uint32_t) (n + 1u);
    uint8_t *slot = s_slot (m, n);
    float *x = (float *) (slot + m->layout.features);
    if (m->layout.row_floats == m->input_size)
        memcpy (x, in, (size_t) rows * m->input_size * sizeof (float));
    else
        for (uint32_t r = 0; r < rows; r++)   /* the padding of each row stays zero */
            memcpy (x + (size_t) r * m->layout.row_floats, in + (size_t) r * m->input_size, m->input_size * sizeof (float));
    const uint32_t words = rows * m->output_size;
    float *y = (float *) (slot + m->layout.outputs);
    if (m->done_mode == SIG_DONE_OUTPUTS)
        for (uint32_t i = 0; i < words; i++)
            ((uint32_t *) y)[i] = SIG_PERSISTENT_SENTINEL;
    /* features (and sentinels) first, then the request word: a release store */
    __atomic_store_n ((uint64_t *) (slot + m->layout.request), ((uint64_t) rows << 32) | seq, __ATOMIC_RELEASE);
    m->next = n + 1u;
    sig_status_t st = s_persistent_wait (m, slot, seq, words, err, errlen);
    if (st == SIG_OK)
        memcpy (out, y, (size_t) words * sizeof (float));
    return st;
}

static sig_status_t s_cuda_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err,
                                  size_t errlen)
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
        return s_persistent_infer (m, in, rows, out, err, errlen);
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

/* Persistent: raises stop and waits (bounded by the watchdog) for the kernel to leave. true when it
 * is gone (exited or its context is lost); false when it still runs, and then nothing it may touch
 * can be freed. */
static bool s_persistent_stop (backend_model_t *m)
{
    if (!m->resident)
        return true;
    __atomic_store_n ((uint32_t *) (m->box + m->layout.ctrl), 1u, __ATOMIC_RELEASE);
    const double start = s_now_ms ();
    const uint32_t limit = m->watchdog_ms > 10u ? m->watchdog_ms : 10u;
    for (;;) {
        cudaError_t e = cudaStreamQuery (m->stream);
        if (e != cudaErrorNotReady) {
            m->resident = false;
            s_resident_add (m->device, -1);
            return true;
        }
        if (s_now_ms () - start > (double) limit)
            break;
        const struct timespec ts = { 0, 100000 };
        nanosleep (&ts, NULL);
    }
    log_warn ("model \"%s\": the persistent kernel on device %d did not stop within %u ms of being asked to; its "
              "stream, mailbox and weights are left to the end of the process", m->name, m->device, limit);
    return false;
}

static void s_cuda_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    cudaSetDevice (m->device);
    if (m->persistent && !s_persistent_stop (m)) {
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

/* ---- persistent: load ---- */

/* How long a fresh launch may take to report its weights loaded (the first launch of the process
 * may still be loading modules; compute-sanitizer slows it down by far more). */
#define PERSISTENT_START_MS 20000.0
#define PERSISTENT_WARMUP 256

/* A model struct for a persistent kernel: its stream, side stream and mapped mailbox. */
static backend_model_t *s_persistent_new (const char *name, int device, uint32_t in, uint32_t out, uint32_t rows,
                                          uint32_t ring, cuda_wait_t wait, uint32_t watchdog_ms, char *err, size_t errlen)
{
    backend_model_t *m = calloc (1, sizeof *m);
    if (!m) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", name);
        return NULL;
    }
    snprintf (m->name, sizeof m->name, "%s", name);
    m->device = device;
    m->kernel = CUDA_KERNEL_PERSISTENT;
    m->persistent = true;
    m->zero_copy = true;
    m->wait = wait;
    m->max_rows = rows;
    m->input_size = in;
    m->output_size = out;
    m->watchdog_ms = watchdog_ms ? watchdog_ms : 1000u;
    cudaError_t e = cudaSetDevice (device);
    if (e == cudaSuccess)
        e = (cudaError_t) sig_persistent_layout (in, out, rows, ring, &m->layout);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags (&m->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags (&m->side, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaHostAlloc ((void **) &m->box, m->layout.total, cudaHostAllocMapped);
    if (e == cudaSuccess)
        e = cudaHostGetDevicePointer (&m->d_box, m->box, 0);
    if (e != cudaSuccess) {
        s_fail (m, e, "allocation", err, errlen);
        s_cuda_destroy (&m);
        return NULL;
    }
    memset (m->box, 0, m->layout.total);
    return m;
}

/* After the launch: waits for status.ready (or a launch failure), then counts as resident. */
static int s_persistent_started (backend_model_t *m, char *err, size_t errlen)
{
    const double start = s_now_ms ();
    for (;;) {
        if (__atomic_load_n ((const uint32_t *) (m->box + m->layout.status), __ATOMIC_ACQUIRE) != 0u)
            return 0;
        cudaError_t e = cudaStreamQuery (m->stream);
        if (e != cudaErrorNotReady) {   /* it ended (or never ran) without loading its weights */
            m->resident = false;
            s_resident_add (m->device, -1);
            s_fail (m, e == cudaSuccess ? cudaErrorLaunchFailure : e, "persistent kernel start", err, errlen);
            return -1;
        }
        if (s_now_ms () - start > PERSISTENT_START_MS) {
            sig_set_error (err, errlen, "model \"%s\": the persistent kernel on device %d did not start within %.0f s "
                           "(no room for its cluster next to the kernels already resident?)", m->name, m->device,
                           PERSISTENT_START_MS / 1e3);
            return -1;
        }
        const struct timespec ts = { 0, 50000 };
        nanosleep (&ts, NULL);
    }
}

/* The float64 forward pass of W on one row (the warm-up's check). */
static void s_forward_f64 (const weights_t *w, const float *x, double *y, double *a, double *b)
{
    for (uint32_t i = 0; i < w->input_size; i++)
        a[i] = x[i];
    for (size_t l = 0; l < w->layer_count; l++) {
        const dense_layer_t *L = &w->layers[l];
        for (uint32_t o = 0; o < L->out; o++) {
            double acc = L->bias[o];
            for (uint32_t i = 0; i < L->in; i++)
                acc += (double) L->weight[(size_t) o * L->in + i] * a[i];
            switch (L->activation) {
            case ACTIVATION_RELU: acc = acc > 0 ? acc : 0; break;
            case ACTIVATION_SIGMOID: acc = 1.0 / (1.0 + exp (-acc)); break;
            case ACTIVATION_TANH: acc = tanh (acc); break;
            default: break;
            }
            b[o] = acc;
        }
        double *t = a;
        a = b;
        b = t;
    }
    memcpy (y, a, w->output_size * sizeof (double));
}

/* A few hundred requests through the kernel, rows 1 and max_rows in turn, two in every 16 checked
 * against the float64 forward pass: ||y - ref|| / ||ref|| pooled over them (as the tests judge)
 * must stay within 1e-5. 0, or -1 with ERR. */
static int s_persistent_warm (backend_model_t *m, const weights_t *w, char *err, size_t errlen)
{
    const size_t nin = (size_t) m->max_rows * w->input_size, nout = (size_t) m->max_rows * w->output_size;
    float *x = malloc (nin * sizeof (float)), *y = malloc (nout * sizeof (float));
    double *ref = malloc (w->output_size * sizeof (double)), *a = malloc (w->widest * sizeof (double)),
           *b = malloc (w->widest * sizeof (double));
    int rc = x && y && ref && a && b ? 0 : -1;
    if (rc)
        sig_set_error (err, errlen, "model \"%s\": out of memory", m->name);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    double num = 0, den = 0;   /* pooled over every checked output: a lone output near zero would
                                  turn rounding into a large relative error */
    for (int i = 0; rc == 0 && i < PERSISTENT_WARMUP; i++) {
        const uint32_t rows = i % 2 ? m->max_rows : 1u;
        for (size_t k = 0; k < (size_t) rows * w->input_size; k++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            x[k] = (float) ((double) (state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
        if (s_cuda_infer (m, x, rows, y, err, errlen) != SIG_OK) {
            rc = -1;
            break;
        }
        if (i % 16 != 0 && i % 16 != 1)
            continue;
        for (uint32_t r = 0; r < rows; r++) {
            s_forward_f64 (w, x + (size_t) r * w->input_size, ref, a, b);
            for (uint32_t o = 0; o < w->output_size; o++) {
                const double d = (double) y[(size_t) r * w->output_size + o] - ref[o];
                num += isfinite (d) ? d * d : INFINITY;
                den += ref[o] * ref[o];
            }
        }
    }
    const double rel = sqrt (num) / fmax (sqrt (den), 1e-30);
    if (rc == 0 && !(rel <= 1e-5)) {
        sig_set_error (err, errlen, "model \"%s\": the persistent kernel's warm-up answers differ from the reference "
                       "(relative error %.3g over the checked requests)", m->name, rel);
        rc = -1;
    }
    free (x);
    free (y);
    free (ref);
    free (a);
    free (b);
    return rc;
}

static backend_model_t *s_persistent_load (const weights_t *w, const model_config_t *cfg, int device, char *err,
                                           size_t errlen)
{
    int major = 0, minor = 0;
    if (!sig_persistent_supported (device, &major, &minor)) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties (&prop, device) != cudaSuccess)
            snprintf (prop.name, sizeof prop.name, "?");
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\" needs a GPU of compute capability 9.0 "
                       "(thread-block clusters; built for sm_90) and device %d (%s) has %d.%d; use kernel \"fused\" "
                       "or \"warp\"", cfg->name, device, prop.name, major, minor);
        return NULL;
    }
    if (w->layer_count > SIG_FUSED_MAX_LAYERS) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\" takes at most %d layers, the model has %zu",
                       cfg->name, SIG_FUSED_MAX_LAYERS, w->layer_count);
        return NULL;
    }
    sig_fused_net_t net;
    memset (&net, 0, sizeof net);
    net.layer_count = (uint32_t) w->layer_count;
    net.widest = w->widest;
    for (size_t i = 0; i < w->layer_count; i++)
        net.layers[i] = (sig_fused_layer_t) { .w = w->layers[i].weight, .b = w->layers[i].bias, .in = w->layers[i].in,
                                              .out = w->layers[i].out, .act = (int) w->layers[i].activation };
    sig_persistent_tuning_t tuning;
    pthread_mutex_lock (&s_lock);
    tuning = s_tuning;
    pthread_mutex_unlock (&s_lock);
    sig_persistent_plan_t plan;
    cudaError_t e = cudaSetDevice (device);
    if (e == cudaSuccess)
        e = (cudaError_t) sig_persistent_plan (&net, backend_rows (cfg), device, &tuning, &plan);
    if (e == cudaErrorMemoryAllocation) {
        const uint64_t need = plan.need_bytes, have = plan.cluster_bytes;
        const uint64_t regs = have - (uint64_t) plan.max_cluster * plan.smem_limit;
        char extra[160] = "";
        if (regs)
            snprintf (extra, sizeof extra, " + %llu KiB of registers", (unsigned long long) (regs >> 10));
        if (need <= have)   /* enough in total, but the leader's share does not fit one block */
            snprintf (extra + strlen (extra), sizeof extra - strlen (extra), "; block 0 alone would need %llu KiB",
                      (unsigned long long) ((plan.smem_bytes == UINT32_MAX ? need : plan.smem_bytes) >> 10));
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\": the weights need %llu KiB on chip, the "
                       "cluster holds %llu KiB (%u blocks x %u KiB%s); use kernel \"fused\" or \"warp\"", cfg->name,
                       (unsigned long long) (need >> 10), (unsigned long long) (have >> 10), plan.max_cluster,
                       plan.smem_limit >> 10, extra);
        return NULL;
    }
    if (e != cudaSuccess) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\": planning on device %d failed: %s", cfg->name,
                       device, cudaGetErrorString (e));
        return NULL;
    }
    backend_model_t *m = s_persistent_new (cfg->name, device, w->input_size, w->output_size, backend_rows (cfg),
                                           plan.ring, cfg->wait, cfg->watchdog_ms, err, errlen);
    if (!m)
        return NULL;
    m->plan = plan;
    m->done_mode = plan.done_mode;
    m->widest = w->widest;
    void *image = malloc (plan.image_bytes);
    e = image ? (cudaError_t) sig_persistent_pack (&net, &plan, &m->layout, image) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = s_dev_alloc (m, &m->d_image, plan.image_bytes);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync (m->d_image, image, plan.image_bytes, cudaMemcpyHostToDevice, m->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize (m->stream);
    free (image);
    if (e == cudaSuccess) {
        s_resident_add (device, +1);   /* from here on, releases elsewhere wait for it */
        m->resident = true;
        e = (cudaError_t) sig_persistent_launch (m->d_image, m->d_box, &plan, m->stream);
        if (e != cudaSuccess) {
            m->resident = false;
            s_resident_add (device, -1);
        }
    }
    if (e != cudaSuccess) {
        s_fail (m, e, "persistent kernel launch", err, errlen);
        s_cuda_destroy (&m);
        return NULL;
    }
    if (s_persistent_started (m, err, errlen) != 0 || s_persistent_warm (m, w, err, errlen) != 0) {
        s_cuda_destroy (&m);
        return NULL;
    }
    return m;
}

backend_model_t *cuda_pingpong_load (int device, uint32_t in, uint32_t flags, uint32_t done_mode, cuda_wait_t wait,
                                     char *err, size_t errlen)
{
    int count = 0;
    char why[256];
    if (cuda_device_count (&count, why, sizeof why) != 0 || device >= count) {
        sig_set_error (err, errlen, "ping-pong: device %d: %s", device, count ? "no such CUDA device" : why);
        return NULL;
    }
    if (in < 1 || in > 8192) {
        sig_set_error (err, errlen, "ping-pong: %u features: expected 1 to 8192", in);
        return NULL;
    }
    backend_model_t *m = s_persistent_new ("pingpong", device, in, 1u, 1u, 0u, wait, 1000u, err, errlen);
    if (!m)
        return NULL;
    m->pingpong = true;
    m->done_mode = done_mode;
    s_resident_add (device, +1);
    m->resident = true;
    cudaError_t e = (cudaError_t) sig_pingpong_launch (m->d_box, &m->layout, in, flags, done_mode, m->stream);
    if (e != cudaSuccess) {
        m->resident = false;
        s_resident_add (device, -1);
        s_fail (m, e, "ping-pong kernel launch", err, errlen);
        s_cuda_destroy (&m);
        return NULL;
    }
    if (s_persistent_started (m, err, errlen) != 0) {
        s_cuda_destroy (&m);
        return NULL;
    }
    float x[8192], y;
    for (uint32_t k = 0; k < in && k < 8192; k++)
        x[k] = (float) (k % 7) - 3.0f;
    for (int i = 0; i < PERSISTENT_WARMUP; i++)
        if (s_cuda_infer (m, x, 1, &y, err, errlen) != SIG_OK) {
            s_cuda_destroy (&m);
            return NULL;
        }
    return m;
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
        return s_persistent_load (w, cfg, device, err, errlen);
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
        s_fail (m, e, "allocation", err, errlen);
        s_cuda_destroy (&m);
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
            s_fail (m, (cudaError_t) rc, "graph capture and warm-up", err, errlen);
            s_cuda_destroy (&m);
            return NULL;
        }
    }
    return m;
}

const backend_iface_t backend_cuda_iface = {
    .name = "cuda",
    .load = s_cuda_load,
    .infer = s_cuda_infer,
    .kernel_name = s_cuda_kernel_name,
    .destroy = s_cuda_destroy,
};
