/* warp: one warp per output neuron (seed 000, section 1.5). Fused GEMV + bias + activation.
 *
 * Launch: blocks of 4 warps (128 threads); grid.x covers the outputs (warp m = blockIdx.x * 4 +
 * warp), grid.y the batch rows (a block loops when rows > 65535). Small blocks spread a batch-1
 * layer over many SMs: 256 outputs -> 64 blocks, 64 outputs -> 16, which is what a latency-bound
 * GEMV wants (each SM's L2 bandwidth is the limit once its warps' loads are all in flight). */
#include "cuda_check.h"
#include "sig_dense.h"
#include "sig_device.cuh"

#define WARP_WARPS_PER_BLOCK 4u

/* VEC4: K % 4 == 0 and w, x 16-byte aligned (then every row start is, too). */
template <bool VEC4>
static __global__ void __launch_bounds__ (WARP_WARPS_PER_BLOCK * 32u)
s_dense_warp_kernel (const float *__restrict__ w, const float *__restrict__ b, const float *__restrict__ x,
                     float *__restrict__ y, uint32_t in, uint32_t out, uint32_t rows, int act)
{
    const uint32_t lane = threadIdx.x & 31u;
    const uint32_t m = blockIdx.x * WARP_WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (m >= out)   /* warp-uniform: a warp leaves whole, so the shuffles below see all 32 lanes */
        return;
    const float *wm = w + (size_t) m * in;
    const float bias = __ldg (b + m);
    for (uint32_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float v = sig_warp_output<SIG_X_RO> (wm, x + (size_t) r * in, in, VEC4, bias, act, lane);
        if (lane == 0)
            y[(size_t) r * out + m] = v;
    }
}

static int s_dense_warp (const float *w, const float *b, const float *x, float *y, uint32_t in, uint32_t out,
                         uint32_t rows, int act, cudaStream_t stream)
{
    if (!w || !b || !x || !y || in == 0 || out == 0 || rows == 0 || in > SIG_MAX_DIM || out > SIG_MAX_DIM ||
        act < SIG_ACT_NONE || act > SIG_ACT_TANH)
        return (int) cudaErrorInvalidValue;
    const dim3 grid ((out + WARP_WARPS_PER_BLOCK - 1u) / WARP_WARPS_PER_BLOCK, rows < SIG_MAX_GRID_Y ? rows : SIG_MAX_GRID_Y);
    const dim3 block (WARP_WARPS_PER_BLOCK * 32u);
    if (in % 4u == 0u && sig_aligned16 (w) && sig_aligned16 (x))
        s_dense_warp_kernel<true><<<grid, block, 0, stream>>> (w, b, x, y, in, out, rows, act);
    else
        s_dense_warp_kernel<false><<<grid, block, 0, stream>>> (w, b, x, y, in, out, rows, act);
    CUDA_TRY_LAUNCH ();
    return (int) cudaSuccess;
}

extern "C" int sig_dense_warp (const float *w, const float *b, const float *x, float *y, uint32_t in, uint32_t out,
                               uint32_t rows, int act, cudaStream_t stream)
{
    return s_dense_warp (w, b, x, y, in, out, rows, act, stream);
}
