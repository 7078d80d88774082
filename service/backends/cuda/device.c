/* The device level of the CUDA backends (device.h). Process-wide state, per device, under one lock
 * that loads, destroys and faults take (never a request). */
#define _GNU_SOURCE
#include "backends/cuda/device.h"

#include "backends/backends.h"

#include "base/log.h"
#include "base/numa.h"

#include <cublas_v2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAULT_MAX 256

typedef struct {
    int device;
    cuda_release_t kind;
    void *p;
} release_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static int s_resident[CUDA_DEVICE_MAX];     /* persistent kernels launched and not seen to exit */
static int s_resident_total;
static cudaMemPool_t s_pools[CUDA_DEVICE_MAX];
static release_t *s_deferred;               /* releases waiting for the device to have no resident kernel */
static size_t s_deferred_count, s_deferred_cap;
static _Atomic bool s_faulted[CUDA_DEVICE_MAX];   /* set once, after s_fault[d] is written (release) */
static char s_fault[CUDA_DEVICE_MAX][FAULT_MAX];
/* Told of a device's first fault the moment it is recorded (cuda_device_on_fault): a device process
 * exits at once, so its supervisor recovers without waiting for a watchdog. */
static void (*_Atomic s_fault_hook) (int device, const char *fault);

static bool s_valid (int device) { return device >= 0 && device < CUDA_DEVICE_MAX; }

int cuda_device_count (int *count, char *why, size_t whylen)
{
    *count = 0;
    cudaError_t e = cudaGetDeviceCount (count);
    if (e == cudaSuccess && *count > 0)
        return 0;
    *count = 0;
    (void) cudaGetLastError ();
    if (!backends_gpu_driver (why, whylen))
        ;   /* the runtime says "driver version is insufficient" when there is no driver at all */
    else if (e == cudaSuccess || e == cudaErrorNoDevice)
        snprintf (why, whylen, "no CUDA device (the NVIDIA driver is loaded but reports none: check CUDA_VISIBLE_DEVICES "
                  "and the container's device access)");
    else
        snprintf (why, whylen, "%s (%s)", cudaGetErrorString (e), cudaGetErrorName (e));
    return -1;
}

int cuda_device_check (int device, const char *model, char *err, size_t errlen)
{
    int count = 0;
    char why[256];
    if (cuda_device_count (&count, why, sizeof why) != 0) {
        sig_set_error (err, errlen, "model \"%s\": device %d: %s", model, device, why);
        return -1;
    }
    if (device < 0 || device >= count) {
        sig_set_error (err, errlen, "model \"%s\": device %d: no such CUDA device (this machine has %d)", model, device,
                       count);
        return -1;
    }
    return 0;
}

/* ---- memory ---- */

cudaError_t cuda_device_pool (int device, cudaMemPool_t *pool)
{
    if (!s_valid (device))
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

cudaError_t cuda_device_alloc (int device, cudaStream_t stream, void **p, size_t bytes)
{
    cudaMemPool_t pool;
    cudaError_t e = cuda_device_pool (device, &pool);
    return e != cudaSuccess ? e : cudaMallocFromPoolAsync (p, bytes ? bytes : 16, pool, stream);
}

void cuda_device_free (cudaStream_t stream, void *p)
{
    if (p && stream)
        cudaFreeAsync (p, stream);
}

/* ---- the resident-kernel registry and deferred releases ---- */

static void s_release_now (const release_t *r)
{
    cudaSetDevice (r->device);
    switch (r->kind) {
    case CUDA_RELEASE_HOST: cudaFreeHost (r->p); break;
    case CUDA_RELEASE_GRAPH: cudaGraphExecDestroy ((cudaGraphExec_t) r->p); break;
    case CUDA_RELEASE_CUBLAS: cublasDestroy ((cublasHandle_t) r->p); break;
    }
}

/* Whether R would wait for a resident kernel now (lock held). Pinned host memory: any device's. */
static bool s_must_wait (const release_t *r)
{
    if (r->kind == CUDA_RELEASE_HOST || !s_valid (r->device))
        return s_resident_total > 0;
    return s_resident[r->device] > 0;
}

void cuda_device_release (int device, cuda_release_t kind, void *p)
{
    if (!p)
        return;
    release_t r = { device, kind, p };
    pthread_mutex_lock (&s_lock);
    const bool wait = s_must_wait (&r);
    if (wait && s_deferred_count == s_deferred_cap) {
        size_t cap = s_deferred_cap ? 2 * s_deferred_cap : 64;
        release_t *grown = realloc (s_deferred, cap * sizeof *grown);
        if (grown) {
            s_deferred = grown;
            s_deferred_cap = cap;
        }
    }
    if (wait && s_deferred_count < s_deferred_cap)
        s_deferred[s_deferred_count++] = r;
    else if (wait)
        log_warn ("CUDA device %d: out of memory for the list of deferred releases; one buffer is leaked", device);
    else
        s_release_now (&r);
    pthread_mutex_unlock (&s_lock);
}

void cuda_device_resident_add (int device, int delta)
{
    if (!s_valid (device))
        return;
    pthread_mutex_lock (&s_lock);
    s_resident[device] += delta;
    s_resident_total += delta;
    size_t kept = 0;
    for (size_t i = 0; i < s_deferred_count; i++) {
        if (s_must_wait (&s_deferred[i]))
            s_deferred[kept++] = s_deferred[i];
        else
            s_release_now (&s_deferred[i]);
    }
    s_deferred_count = kept;
    pthread_mutex_unlock (&s_lock);
}

int cuda_device_resident (int device)
{
    if (!s_valid (device))
        return 0;
    pthread_mutex_lock (&s_lock);
    int n = s_resident[device];
    pthread_mutex_unlock (&s_lock);
    return n;
}

size_t cuda_device_deferred (void)
{
    pthread_mutex_lock (&s_lock);
    size_t n = s_deferred_count;
    pthread_mutex_unlock (&s_lock);
    return n;
}

/* ---- NUMA ---- */

size_t cuda_device_cpus (int device, int *cpus, size_t cap)
{
    char bus[32];
    if (cudaDeviceGetPCIBusId (bus, sizeof bus, device) != cudaSuccess) {
        (void) cudaGetLastError ();
        return 0;
    }
    return numa_device_cpus ("/sys", bus, cpus, cap);
}

/* ---- faults ---- */

bool cuda_error_sticky (cudaError_t e)
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

sig_status_t cuda_device_error (int device, const char *model, cudaError_t e, const char *what, bool *lost, char *err,
                                size_t errlen)
{
    const bool sticky = cuda_error_sticky (e);
    bool first = false;
    if (sticky) {
        *lost = true;
        if (s_valid (device)) {
            pthread_mutex_lock (&s_lock);
            if (!atomic_load_explicit (&s_faulted[device], memory_order_relaxed)) {
                snprintf (s_fault[device], FAULT_MAX, "%s (%s) in CUDA %s of model \"%s\"", cudaGetErrorString (e),
                          cudaGetErrorName (e), what, model);
                atomic_store_explicit (&s_faulted[device], true, memory_order_release);
                first = true;
            }
            pthread_mutex_unlock (&s_lock);
        }
        void (*hook) (int, const char *) = atomic_load (&s_fault_hook);
        if (first && hook)
            hook (device, s_fault[device]);
    }
    sig_set_error (err, errlen, "model \"%s\": CUDA %s failed on device %d: %s (%s)%s", model, what, device,
                   cudaGetErrorString (e), cudaGetErrorName (e), *lost ? "; the model is unavailable" : "");
    return *lost ? SIG_UNAVAILABLE : SIG_INTERNAL;
}

const char *cuda_device_fault (int device)
{
    if (!s_valid (device) || !atomic_load_explicit (&s_faulted[device], memory_order_acquire))
        return NULL;
    return s_fault[device];
}

void cuda_device_on_fault (void (*fn) (int device, const char *fault)) { atomic_store (&s_fault_hook, fn); }
