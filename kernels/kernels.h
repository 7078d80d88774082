/* The CUDA kernels sigserve runs, as C entry points. One op per .cu file: a static __global__
 * kernel, a static launcher taking a stream, and the extern "C" entry below. Every entry
 * launches on the stream it is given (never the legacy default stream), checks the launch, and
 * returns a cudaError_t value as int (0 = cudaSuccess). All are capturable into a CUDA graph.
 *
 * Shapes: a dense layer maps `in` (K) inputs to `out` (M) outputs for `rows` >= 1 rows; inputs are
 * rows x K row-major, outputs rows x M row-major. Every kernel is correct for any 1 <= K, M <= 8192
 * and rows >= 1. `rows` is a kernel argument: the backend captures one graph per batch size, so it
 * is a constant of each graph, never a value a replay changes. */
#ifndef SIGSERVE_KERNELS_H
#define SIGSERVE_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SIG_ACT_NONE = 0, SIG_ACT_RELU = 1, SIG_ACT_SIGMOID = 2, SIG_ACT_TANH = 3 };  /* = activation_t */

/* warp: one warp per output neuron. W row-major [M][K] (the PyTorch layout). Fused GEMV + bias +
 * activation; 16-byte loads when K % 4 == 0 (rows then stay 16-byte aligned), scalar otherwise. */
int sig_dense_warp (const float *w, const float *b, const float *x, float *y, uint32_t in, uint32_t out,
                    uint32_t rows, int act, cudaStream_t stream);

/* mbyv (seed 000, thread per output): W packed K-major with M padded to a multiple of 32:
 * wp[k * out_pad + m] = W[m][k], zeros in the padding (sig_pack_kmajor does it on the host).
 * The input is broadcast by warp shuffle; edges by power-of-two row tiles with fixed shuffle
 * reductions and a shortened column tail. */
int sig_dense_mbyv (const float *wp, const float *b, const float *x, float *y, uint32_t in, uint32_t out,
                    uint32_t out_pad, uint32_t rows, int act, cudaStream_t stream);
uint32_t sig_mbyv_out_pad (uint32_t out);   /* out rounded up to a multiple of 32 */
/* Host-side packing: W row-major [out][in] -> wp [in][out_pad], padding zero. */
void sig_pack_kmajor (const float *w, uint32_t in, uint32_t out, float *wp, uint32_t out_pad);

/* cublas epilogue: y[r][m] = act(y[r][m] + b[m]) in place (cuBLAS GEMM with N = rows before it). */
int sig_bias_act (const float *b, float *y, uint32_t out, uint32_t rows, int act, cudaStream_t stream);

/* fused: the whole MLP in one launch, a thread-block cluster whose blocks split each layer's outputs
 * and meet at a cluster barrier between layers. The network description lives in device memory
 * (written once at load), so nothing about the model is frozen into a captured launch but the
 * pointer to it. Activations between layers go through `scratch` (2 x rows x widest floats), except
 * on the register path (small nets, see `fast`): weights loaded into registers once, activations
 * through distributed shared memory, scratch untouched. */
#define SIG_FUSED_MAX_LAYERS 16
typedef struct {
    const float *w;     /* row-major [out][in], like warp */
    const float *b;
    uint32_t in, out;
    int act;
} sig_fused_layer_t;
typedef struct {
    uint32_t layer_count;
    uint32_t widest;    /* max over every layer's in and out */
    uint32_t fast;      /* filled by sig_fused_net_validate: 1 = the shape allows the register path */
    sig_fused_layer_t layers[SIG_FUSED_MAX_LAYERS];
} sig_fused_net_t;
/* NET points to device memory holding a sig_fused_net_t. */
int sig_mlp_fused (const sig_fused_net_t *net, const float *x, float *y, float *scratch, uint32_t rows,
                   cudaStream_t stream);
/* Whether this device can run the fused kernel (thread-block clusters: compute capability >= 9.0). */
int sig_fused_supported (int device);
/* Host-side check of a descriptor (in host memory) before it is uploaded: 1..SIG_FUSED_MAX_LAYERS
 * layers, every in/out in 1..widest, each layer's in = the previous layer's out, non-NULL w and b,
 * max_rows x widest < 2^32. 0 (cudaSuccess) or cudaErrorInvalidValue. The kernel makes the same
 * checks and, on a bad descriptor, returns without writing y.
 * It also fills NET->fast (0 when the descriptor is bad): 1 when every layer's share of the weights
 * fits the kernel's register path (weights loaded once into registers, activations passed through
 * distributed shared memory), 0 otherwise. The kernel takes that path only when fast is 1, its own
 * check of the shape agrees, and the launch's rows x every layer's in fits its shared buffers; so
 * a caller may set fast = 0 after validating to force the general path (e.g. to compare them). */
int sig_fused_net_validate (sig_fused_net_t *net, uint32_t max_rows);

/* An empty kernel, for the launch-overhead table. */
int sig_empty_kernel (cudaStream_t stream);

/* A kernel that executes a trap: the context is lost (tests of the unavailable path only). */
int sig_fault_kernel (cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
