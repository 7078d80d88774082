/* The cuBLAS baseline's epilogue: y[r][m] = act(y[r][m] + b[m]) in place, after a GEMM with N = rows.
 *
 * Launch: 256 threads per block, one thread per element; grid.x covers the outputs, grid.y the
 * batch rows (a block loops when rows > 65535). No division: the 2-D grid gives m and r directly. */
#include "cuda_check.h"
#include "sig_dense.h"
#include "sig_device.cuh"

#define BIAS_ACT_THREADS 256u

static __global__ void __launch_bounds__ (BIAS_ACT_THREADS)
s_bias_act_kernel (const float *__restrict__ b, float *__restrict__ y, uint32_t out, uint32_t rows, int act)
{
    const uint32_t m = blockIdx.x * BIAS_ACT_THREADS + threadIdx.x;
    if (m >= out)
        return;
    const float bias = __ldg (b + m);
    for (uint32_t r = blockIdx.y; r < rows; r += gridDim.y) {
        float *p = y + (size_t) r * out + m;
        *p = sig_activate (*p + bias, act);
    }
}

static int s_bias_act (const float *b, float *y, uint32_t out, uint32_t rows, int act, cudaStream_t stream)
{
    if (!b || !y || out == 0 || rows == 0 || out > SIG_MAX_DIM || act < SIG_ACT_NONE || act > SIG_ACT_TANH)
        return (int) cudaErrorInvalidValue;
    const dim3 grid ((out + BIAS_ACT_THREADS - 1u) / BIAS_ACT_THREADS, rows < SIG_MAX_GRID_Y ? rows : SIG_MAX_GRID_Y);
    s_bias_act_kernel<<<grid, BIAS_ACT_THREADS, 0, stream>>> (b, y, out, rows, act);
    CUDA_TRY_LAUNCH ();
    return (int) cudaSuccess;
}

extern "C" int sig_bias_act (const float *b, float *y, uint32_t out, uint32_t rows, int act, cudaStream_t stream)
{
    return s_bias_act (b, y, out, rows, act, stream);
}
