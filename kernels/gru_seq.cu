/* gru seq: the recurrence of one GRU layer over a sequence whose input projections were computed
 * before (sig_gru.h). Block (0, r) of a WHOLE launch holds every unit of row r and loops over the
 * steps: h in shared memory, double-buffered, so one barrier a step separates a step's reads of h
 * from the next step's writes. Otherwise block (b, r) holds units [8b, 8b + 8) of row r, one unit a
 * warp, for one step: the launch boundary is the barrier, h comes from device memory.
 *
 * Per unit and step: three warp dot products over h (W_hr, W_hz, W_hn rows; W_hh read through the
 * read-only path, L1/L2-resident across steps), then lane 0 applies the gates (gru_device.cuh). */
#include "cuda_check.h"
#include "gru_device.cuh"
#include "sig_gru.h"

template <bool WHOLE>
static __global__ void __launch_bounds__ (SIG_GRU_SEQ_MAX_WARPS * 32u)
s_gru_seq_kernel (sig_gru_layer_t L, const float *__restrict__ gi, uint32_t T, uint32_t t0, uint32_t nsteps,
                  const float *h0, float *h_out, float *seq)
{
    extern __shared__ float s_h[];   /* WHOLE: [2][H] (this step's h, the next); else [H] */
    const uint32_t H = L.hidden, lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const uint32_t r = blockIdx.y;
    const uint32_t u0 = WHOLE ? 0u : blockIdx.x * warps;
    const uint32_t u1 = WHOLE ? H : (u0 + warps < H ? u0 + warps : H);
    float *hc = s_h, *hn = s_h + H;
    for (uint32_t i = threadIdx.x; i < H; i += blockDim.x)
        hc[i] = h0 ? h0[(size_t) r * H + i] : 0.0f;
    __syncthreads ();
    for (uint32_t s = 0; s < nsteps; s++) {
        const uint32_t t = t0 + s;
        const float *g = gi + ((size_t) r * T + t) * 3u * H;
        for (uint32_t u = u0 + warp; u < u1; u += warps) {   /* warp-uniform: the shuffles see all 32 lanes */
            const float hr = gru_warp_dot<SIG_X_SHARED> (L.w_hh + (size_t) u * H, hc, H, lane);
            const float hz = gru_warp_dot<SIG_X_SHARED> (L.w_hh + (size_t) (H + u) * H, hc, H, lane);
            const float hm = gru_warp_dot<SIG_X_SHARED> (L.w_hh + (size_t) (2u * H + u) * H, hc, H, lane);
            if (lane == 0) {
                const float v = gru_unit (__ldg (g + u), __ldg (g + H + u), __ldg (g + 2u * H + u), hr, hz,
                                          hm + __ldg (L.b_hn + u), hc[u]);
                if (WHOLE)
                    hn[u] = v;
                if (seq)
                    seq[((size_t) r * T + t) * H + u] = v;
                if (s + 1u == nsteps)
                    h_out[(size_t) r * H + u] = v;
            }
        }
        if (WHOLE) {
            __syncthreads ();   /* hn complete; every read of hc done before the next step writes it */
            float *tmp = hc;
            hc = hn;
            hn = tmp;
        }
    }
}

static int s_gru_seq (const sig_gru_layer_t *L, const float *gi, uint32_t T, uint32_t t0, uint32_t nsteps, uint32_t rows,
                      const float *h0, float *h_out, float *seq, int whole, cudaStream_t stream)
{
    if (!L || !L->w_hh || !L->b_hn || !gi || !h_out || L->hidden == 0 || L->hidden > SIG_GRU_MAX_HIDDEN || rows == 0
        || rows > SIG_MAX_GRID_Y || nsteps == 0 || T == 0 || t0 >= T || nsteps > T - t0 || (!whole && nsteps != 1)
        || (!whole && h0 == h_out))
        return (int) cudaErrorInvalidValue;
    const uint32_t H = L->hidden;
    if (whole) {
        const uint32_t warps = H < SIG_GRU_SEQ_MAX_WARPS ? H : SIG_GRU_SEQ_MAX_WARPS;
        s_gru_seq_kernel<true><<<dim3 (1u, rows), warps * 32u, 2u * H * sizeof (float), stream>>> (
            *L, gi, T, t0, nsteps, h0, h_out, seq);
    } else {
        const uint32_t blocks = (H + SIG_GRU_UNIT_WARPS - 1u) / SIG_GRU_UNIT_WARPS;
        s_gru_seq_kernel<false><<<dim3 (blocks, rows), SIG_GRU_UNIT_WARPS * 32u, H * sizeof (float), stream>>> (
            *L, gi, T, t0, nsteps, h0, h_out, seq);
    }
    CUDA_TRY_LAUNCH ();
    return (int) cudaSuccess;
}

extern "C" int sig_gru_seq (const sig_gru_layer_t *layer, const float *gi, uint32_t T, uint32_t t0, uint32_t nsteps,
                            uint32_t rows, const float *h0, float *h_out, float *seq, int whole, cudaStream_t stream)
{
    return s_gru_seq (layer, gi, T, t0, nsteps, rows, h0, h_out, seq, whole, stream);
}
