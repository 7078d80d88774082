/* The per-layer kernels (kernel "warp", "mbyv", and "cublas"'s epilogue), as C entry points
 * (sig_common.h: what every kernel entry does).
 *
 * Shapes: a dense layer maps `in` (K) inputs to `out` (M) outputs for `rows` >= 1 rows; inputs are
 * rows x K row-major, outputs rows x M row-major. Every kernel is correct for any 1 <= K, M <= 8192
 * and rows >= 1. `rows` is a kernel argument: the backend captures one graph per batch size, so it
 * is a constant of each graph, never a value a replay changes. `act` is a SIG_ACT_*. */
#ifndef SIGSERVE_SIG_DENSE_H
#define SIGSERVE_SIG_DENSE_H

#include "sig_common.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif
