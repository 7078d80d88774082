/* gru cell: one step of one GRU layer for one sequence with its input projection (a stream's step,
 * sig_gru.h). Block b holds units [8b, 8b + 8), one a warp: six warp dot products (W_ir, W_iz, W_in
 * rows over x; W_hr, W_hz, W_hn rows over h), then lane 0 applies the gates. x and h are read
 * through the read-only path: an earlier node of the graph wrote them, nothing in this launch does.
 * Block 0 also stores x as the slot's ring entry for the advances (layer 0). */
#include "cuda_check.h"
#include "gru_device.cuh"
#include "sig_gru.h"

static __global__ void __launch_bounds__ (SIG_GRU_UNIT_WARPS * 32u)
s_gru_cell_kernel (sig_gru_layer_t L, const float *__restrict__ x, const float *__restrict__ h, uint64_t h_slot_stride,
                   float *__restrict__ h_out, const sig_gru_cmd_t *cmd, float *ring, uint64_t ring_slot_stride)
{
    const uint32_t H = L.hidden, in = L.in, lane = threadIdx.x & 31u;
    const uint32_t slot = cmd ? cmd->slot : 0u;
    if (ring && blockIdx.x == 0) {
        float *entry = ring + (size_t) slot * ring_slot_stride + (size_t) cmd->pos * in;
        for (uint32_t i = threadIdx.x; i < in; i += blockDim.x)
            entry[i] = __ldg (x + i);
    }
    const uint32_t u = blockIdx.x * SIG_GRU_UNIT_WARPS + (threadIdx.x >> 5);
    if (u >= H)   /* warp-uniform: a warp leaves whole */
        return;
    const float *hp = h + (size_t) slot * h_slot_stride;
    const float ir = gru_warp_dot<SIG_X_RO> (L.w_ih + (size_t) u * in, x, in, lane);
    const float iz = gru_warp_dot<SIG_X_RO> (L.w_ih + (size_t) (H + u) * in, x, in, lane);
    const float in_n = gru_warp_dot<SIG_X_RO> (L.w_ih + (size_t) (2u * H + u) * in, x, in, lane);
    const float hr = gru_warp_dot<SIG_X_RO> (L.w_hh + (size_t) u * H, hp, H, lane);
    const float hz = gru_warp_dot<SIG_X_RO> (L.w_hh + (size_t) (H + u) * H, hp, H, lane);
    const float hm = gru_warp_dot<SIG_X_RO> (L.w_hh + (size_t) (2u * H + u) * H, hp, H, lane);
    if (lane == 0)
        h_out[u] = gru_unit (ir + __ldg (L.b_i + u), iz + __ldg (L.b_i + H + u), in_n + __ldg (L.b_i + 2u * H + u), hr,
                             hz, hm + __ldg (L.b_hn + u), __ldg (hp + u));
}

static int s_gru_cell (const sig_gru_layer_t *L, const float *x, const float *h, uint64_t h_slot_stride, float *h_out,
                       const sig_gru_cmd_t *cmd, float *ring, uint64_t ring_slot_stride, cudaStream_t stream)
{
    if (!L || !L->w_ih || !L->w_hh || !L->b_i || !L->b_hn || !x || !h || !h_out || (ring && !cmd) || L->hidden == 0
        || L->hidden > SIG_GRU_MAX_HIDDEN || L->in == 0 || L->in > SIG_MAX_DIM)
        return (int) cudaErrorInvalidValue;
    const uint32_t blocks = (L->hidden + SIG_GRU_UNIT_WARPS - 1u) / SIG_GRU_UNIT_WARPS;
    s_gru_cell_kernel<<<blocks, SIG_GRU_UNIT_WARPS * 32u, 0, stream>>> (*L, x, h, h_slot_stride, h_out, cmd, ring,
                                                                        ring_slot_stride);
    CUDA_TRY_LAUNCH ();
    return (int) cudaSuccess;
}

extern "C" int sig_gru_cell (const sig_gru_layer_t *layer, const float *x, const float *h, uint64_t h_slot_stride,
                             float *h_out, const sig_gru_cmd_t *cmd, float *ring, uint64_t ring_slot_stride,
                             cudaStream_t stream)
{
    return s_gru_cell (layer, x, h, h_slot_stride, h_out, cmd, ring, ring_slot_stride, stream);
}
