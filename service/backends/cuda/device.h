/* The device level of the CUDA backends (MLP graphs, the persistent MLP, the LSTM): what belongs
 * to a GPU rather than to one model on it, in one place:
 *   - which devices exist, and a reason that a user can act on when none does;
 *   - the stream-ordered memory pool of each device (it never gives memory back: trimming could
 *     synchronise with a resident kernel);
 *   - the resident-kernel registry: persistent kernels launched and not yet seen to exit, per
 *     device. While one is resident, anything that synchronises the device waits for it forever
 *     (measured on an H100, docs/persistent-notes.md: cudaFree, cudaFreeHost, cublasCreate,
 *     cublasDestroy, a cuBLAS handle's first GEMM; lazily loaded modules too), so releases of that
 *     kind are deferred until the device has none (any device, for pinned host memory) and a cuBLAS
 *     load is refused;
 *   - the CPUs of each GPU's NUMA node (where its workers run by default);
 *   - the fault state: the first sticky error seen on a device (a trapped or lost context), which
 *     marks every model on it unavailable. GPU-fault recovery builds on this.
 * Every function may be called from any thread; none is on a request's path except
 * cuda_device_error (and only when a CUDA call failed). Built only with nvcc. */
#ifndef SIGSERVE_CUDA_DEVICE_H
#define SIGSERVE_CUDA_DEVICE_H

#include "base/status.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

#define CUDA_DEVICE_MAX 64

/* Devices visible to this process: 0 with *COUNT, or -1 with the reason in WHY ("no NVIDIA driver
 * on this host (no /proc/driver/nvidia): no GPU, or its driver is not installed", "no CUDA
 * device", the runtime's own words otherwise). Initialises the CUDA runtime: not in a process that
 * will fork and use CUDA after. */
int cuda_device_count (int *count, char *why, size_t whylen);
/* 0 when DEVICE exists; else -1 with ERR "model \"NAME\": device D: <why>". */
int cuda_device_check (int device, const char *model, char *err, size_t errlen);

/* The device's pool for stream-ordered allocations, made on first use. */
cudaError_t cuda_device_pool (int device, cudaMemPool_t *pool);
/* Device memory from DEVICE's pool, ordered on STREAM (synchronise STREAM before another stream
 * uses it), and its release ordered on STREAM (P may be NULL). */
cudaError_t cuda_device_alloc (int device, cudaStream_t stream, void **p, size_t bytes);
void cuda_device_free (cudaStream_t stream, void *p);

/* Counts persistent kernels launched (+1) or seen to exit (-1) on DEVICE, then runs the deferred
 * releases that no longer have to wait. */
void cuda_device_resident_add (int device, int delta);
/* Persistent kernels resident on DEVICE now. */
int cuda_device_resident (int device);

typedef enum { CUDA_RELEASE_HOST, CUDA_RELEASE_GRAPH, CUDA_RELEASE_CUBLAS } cuda_release_t;
/* Releases P (pinned host memory, a graph executable, a cuBLAS handle) now, or once no resident
 * kernel could be made to wait by it. P may be NULL. */
void cuda_device_release (int device, cuda_release_t kind, void *p);
/* Releases still waiting for a resident kernel to leave (tests). */
size_t cuda_device_deferred (void);

/* The CPUs of DEVICE's NUMA node (sysfs) into CPUS (up to CAP); 0 when the system does not say. */
size_t cuda_device_cpus (int device, int *cpus, size_t cap);

/* Whether E leaves the context unusable (a trap, an illegal address, a lost device, ...). */
bool cuda_error_sticky (cudaError_t e);
/* Turns E, returned by WHAT for model MODEL on DEVICE, into a status and a message naming both. A
 * sticky error records DEVICE's fault (cuda_device_fault), sets *LOST and gives SIG_UNAVAILABLE;
 * any other gives SIG_INTERNAL. */
sig_status_t cuda_device_error (int device, const char *model, cudaError_t e, const char *what, bool *lost, char *err,
                                size_t errlen);
/* DEVICE's fault: NULL while none was seen, else what was seen first ("unspecified launch failure
 * (cudaErrorLaunchFailure) in CUDA graph launch of model \"m\""). */
const char *cuda_device_fault (int device);
/* FN (or NULL) is called with a device's fault the moment its first sticky error is recorded, on the
 * thread that saw it (a worker in its wait, a stream query): a device process exits there (status 70)
 * instead of waiting for its health poll or the server's watchdog. */
void cuda_device_on_fault (void (*fn) (int device, const char *fault));

#endif
