/* gru stream: a stream advance's two moves of data (sig_gru.h), at a slot and ring position read
 * from device memory (one graph serves every slot): the slot's last window - 1 steps gathered in
 * order out of its ring, and the state the advance computed stored as the slot's. Grid-stride
 * loops, one float a thread. */
#include "cuda_check.h"
#include "sig_device.cuh"
#include "sig_gru.h"

#define GRU_STREAM_THREADS 256u
#define GRU_STREAM_MAX_BLOCKS 1024u

static __global__ void __launch_bounds__ (GRU_STREAM_THREADS)
s_gru_gather_kernel (const sig_gru_cmd_t *cmd, const float *ring, uint64_t slot_stride, uint32_t window, uint32_t in,
                     uint32_t T, float *dst)
{
    const float *base = ring + (size_t) cmd->slot * slot_stride;
    const uint32_t first = cmd->pos + 1u;
    const size_t n = (size_t) T * in;
    for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        const uint32_t t = (uint32_t) (i / in), k = (uint32_t) (i % in);
        dst[i] = base[(size_t) ((first + t) % window) * in + k];
    }
}

static __global__ void __launch_bounds__ (GRU_STREAM_THREADS)
s_gru_store_kernel (const sig_gru_cmd_t *cmd, const float *src, uint64_t src_stride, uint32_t layers, uint32_t H,
                    float *state, uint64_t slot_stride)
{
    float *base = state + (size_t) cmd->slot * slot_stride;
    const size_t n = (size_t) layers * H;
    for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        const size_t k = i / H, j = i % H;
        base[k * H + j] = src[k * src_stride + j];
    }
}

static uint32_t s_blocks (size_t n)
{
    const size_t b = (n + GRU_STREAM_THREADS - 1u) / GRU_STREAM_THREADS;
    return b < GRU_STREAM_MAX_BLOCKS ? (uint32_t) b : GRU_STREAM_MAX_BLOCKS;
}

static int s_gru_gather (const sig_gru_cmd_t *cmd, const float *ring, uint64_t slot_stride, uint32_t window, uint32_t in,
                         uint32_t T, float *dst, cudaStream_t stream)
{
    if (!cmd || !ring || !dst || window == 0 || T == 0 || T >= window || in == 0 || in > SIG_MAX_DIM)
        return (int) cudaErrorInvalidValue;
    s_gru_gather_kernel<<<s_blocks ((size_t) T * in), GRU_STREAM_THREADS, 0, stream>>> (cmd, ring, slot_stride, window, in,
                                                                                        T, dst);
    CUDA_TRY_LAUNCH ();
    return (int) cudaSuccess;
}

static int s_gru_store (const sig_gru_cmd_t *cmd, const float *src, uint64_t src_stride, uint32_t layers, uint32_t H,
                        float *state, uint64_t slot_stride, cudaStream_t stream)
{
    if (!cmd || !src || !state || layers == 0 || H == 0 || H > SIG_GRU_MAX_HIDDEN || src_stride < H)
        return (int) cudaErrorInvalidValue;
    s_gru_store_kernel<<<s_blocks ((size_t) layers * H), GRU_STREAM_THREADS, 0, stream>>> (cmd, src, src_stride, layers, H,
                                                                                           state, slot_stride);
    CUDA_TRY_LAUNCH ();
    return (int) cudaSuccess;
}

extern "C" int sig_gru_gather (const sig_gru_cmd_t *cmd, const float *ring, uint64_t slot_stride, uint32_t window,
                               uint32_t in, uint32_t T, float *dst, cudaStream_t stream)
{
    return s_gru_gather (cmd, ring, slot_stride, window, in, T, dst, stream);
}

extern "C" int sig_gru_store (const sig_gru_cmd_t *cmd, const float *src, uint64_t src_stride, uint32_t layers,
                              uint32_t hidden, float *state, uint64_t slot_stride, cudaStream_t stream)
{
    return s_gru_store (cmd, src, src_stride, layers, hidden, state, slot_stride, stream);
}
