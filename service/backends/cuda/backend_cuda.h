/* The CUDA MLP backend: per model, weights on the device in its kernel's layout, device activations,
 * pinned host input and output buffers, its own non-blocking stream, and one CUDA graph per batch
 * size (H2D copy, every layer, D2H copy) captured, instantiated, uploaded and warmed at load
 * (graph.c). Kernel "persistent": one resident cluster per instance holding the weights on chip,
 * requests through a ring of slots in mapped pinned memory, a host watchdog (model config
 * watchdog_ms) (mlp_persistent.c). Nothing is allocated or captured when a request runs. CUDA
 * errors become statuses; an error that leaves the context unusable marks the model lost
 * (SIG_UNAVAILABLE from then on) and records its device's fault (device.h). Built only when nvcc
 * is found: backends/cuda/ is in the build or not (the Makefile decides, nowhere else). */
#ifndef SIGSERVE_BACKEND_CUDA_H
#define SIGSERVE_BACKEND_CUDA_H

#include "backends/backend.h"
#include "backends/persistent_box.h"
#include "sig_persistent.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>

extern const backend_iface_t backend_cuda_iface;

/* Below: the same model driven piece by piece, for sigbench and the GPU suites. */
typedef enum {
    CUDA_RUN_KERNELS,       /* the layers only, device input to device output */
    CUDA_RUN_END_TO_END,    /* H2D from the given host input, layers, D2H into the given host output */
} cuda_run_t;

cudaStream_t cuda_model_stream (backend_model_t *m);
float *cuda_model_pinned_input (backend_model_t *m);    /* max_rows x input size */
float *cuda_model_pinned_output (backend_model_t *m);   /* max_rows x output size */
/* Enqueues one run on the model's stream, by graph replay when GRAPH (then HOST_IN and HOST_OUT must
 * be the pinned buffers, which the graph was captured with) or by direct launches. No wait. */
int cuda_model_enqueue (backend_model_t *m, cuda_run_t what, bool graph, uint32_t rows, const float *host_in,
                        float *host_out);
/* Copies the device output of the last run (ROWS rows) to HOST_OUT, synchronously (benchmarks
 * check kernel-only runs with it). */
int cuda_model_fetch_output (backend_model_t *m, uint32_t rows, float *host_out);
/* Waits for the stream as the model's wait mode says. 0, or a cudaError_t. */
int cuda_model_wait (backend_model_t *m);
/* Fills the device activations and outputs and the pinned output with NaN (tests: an output the
 * kernels fail to write then shows). Synchronous. */
int cuda_model_poison (backend_model_t *m);
/* Launches a trapping kernel on the model's stream (a persistent model's second stream: tests of
 * the lost-context path). */
int cuda_model_inject_fault (backend_model_t *m);
/* Hangs the model (tests of a launch that hangs past watchdog_ms): a persistent kernel stalled (it
 * stops answering, cuda_model_persistent_stall); else a kernel spinning MS ms on the model's stream,
 * which its next launch waits behind. */
int cuda_model_inject_hang (backend_model_t *m, unsigned ms);
bool cuda_model_lost (const backend_model_t *m);
/* backend.h's share_box: a persistent MLP with its mailbox in the shared region. */
int cuda_model_share_box (backend_model_t *m, persistent_box_t *dest);
/* backend.h's kernel_stopped. */
const char *cuda_model_kernel_stopped (backend_model_t *m);

/* Persistent models (the functions above that launch or copy answer cudaErrorNotSupported for
 * them; poison fills the slots' outputs with NaN). Test only: STALL makes the kernel stop answering
 * (it still honours stop), so the watchdog fires. 0 or a cudaError_t. */
int cuda_model_persistent_stall (backend_model_t *m, bool stall);
/* What the load planned (cluster size, placement, shared memory); NULL for other kernels. */
const sig_persistent_plan_t *cuda_model_persistent_plan (const backend_model_t *m);
/* Tests and benchmarks: the knobs every later persistent load uses (NULL: the defaults). */
void cuda_persistent_tuning (const sig_persistent_tuning_t *tuning);
/* The ping-pong floor on the same request path (sigbench): a one-block persistent kernel that
 * echoes the sequence (FLAGS 0), or also reads the IN features (SIG_PINGPONG_READ: output 0 is
 * their sum) or writes an output (SIG_PINGPONG_OUTPUT). One output, one row; infer and destroy
 * through backend_cuda_iface. NULL with ERR on failure. */
backend_model_t *cuda_pingpong_load (int device, uint32_t in, uint32_t flags, uint32_t done_mode, cuda_wait_t wait,
                                     char *err, size_t errlen);

#endif
