/* The CUDA kernels sigserve runs, as C entry points: what every family shares (sig_dense.h,
 * sig_fused.h, sig_persistent.h, sig_lstm.h; sig_spec.h loads the kernels NVRTC compiles at load).
 * One op per .cu file: a static __global__ kernel, a static launcher taking a stream, and the
 * extern "C" entry in its family's header (the persistent kernels keep their host-side planning and
 * packing in a *_plan.cu beside them, sharing a private *_impl.cuh). Every entry launches on the
 * stream it is given (never the legacy default stream), checks the launch, and returns a cudaError_t
 * value as int (0 = cudaSuccess). All are capturable into a CUDA graph.
 *
 * Here: the activations, what a device runs, the completion sentinel of the resident kernels, and
 * the kernels of tests and tables (empty, trap, hang). */
#ifndef SIGSERVE_SIG_COMMON_H
#define SIGSERVE_SIG_COMMON_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SIG_ACT_NONE = 0, SIG_ACT_RELU = 1, SIG_ACT_SIGMOID = 2, SIG_ACT_TANH = 3 };  /* = activation_t */

/* Whether DEVICE runs the thread-block cluster kernels (fused, persistent, lstm): cluster launch and
 * compute capability 9.0. EXACT 1: exactly 9.0, as the persistent kernels require (built for sm_90
 * and measured there); 0: 9.0 or later, which the fused kernel runs on from its PTX. 1 or 0;
 * MAJOR and MINOR (may be NULL) get the capability (0.0 when the device cannot be queried). */
int sig_clusters_supported (int device, int exact, int *major, int *minor);

/* An empty kernel, for the launch-overhead table. */
int sig_empty_kernel (cudaStream_t stream);

/* A kernel that executes a trap: the context is lost (tests of the unavailable path only). */
int sig_fault_kernel (cudaStream_t stream);
/* A kernel that spins for MS ms (tests of a launch that hangs past a model's watchdog_ms). */
int sig_hang_kernel (cudaStream_t stream, unsigned ms);

/* The completion sentinel of the resident kernels (the persistent MLP's SIG_DONE_OUTPUTS, the LSTM's
 * steps): the host sets every output word it waits for to this NaN before publishing, and the
 * kernel's stores of the outputs themselves are the completion (no fence, no sequence: 1.3 us less a
 * request, docs/perf.md). No arithmetic produces this payload (the GPU's NaNs are 0x7fffffff), and
 * the kernels store any output that holds it as the canonical NaN (sig_st_sys_output,
 * sig_device.cuh), so no value the model computes can leave the host waiting. */
#define SIG_PERSISTENT_SENTINEL 0x7fbadbadu

#ifdef __cplusplus
}
#endif

#endif
