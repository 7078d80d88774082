/* mbyv (seed 000, section 1.6): one thread per output neuron, the input broadcast by warp shuffle,
 * W packed K-major, wp[k * out_pad + m] = W[m][k], out_pad = out rounded up to 32 (zero padding).
 *
 * Work split. A block owns one row tile of outputs and one batch row (grid.y; a block loops over
 * batch rows when rows > 65535):
 *   - blockIdx.x < out / 32: a full tile of 32 outputs, lane = output;
 *   - the last block, when r = out % 32 != 0: the r remaining outputs, as the power-of-two tiles of
 *     r's binary digits (22 = 16 + 4 + 2), largest first, one after the other.
 * The block's warps split K: the 32-column chunks 0 .. ceil(K/32)-1 go in equal runs of cpw
 * chunks to consecutive warps, so every warp's slice is a multiple of 32 columns except the one
 * holding the last chunk, which is short (K % 32 columns) when 32 does not divide K. Each warp
 * leaves its partial sums in shared memory; warp 0 adds them in warp order (a fixed order: the
 * result does not depend on timing), adds the bias, applies the activation and writes y.
 *
 * A tile of N rows (N = 32, 16, 8, 4, 2, 1) splits the warp into N row lanes x G = 32 / N
 * cooperating lanes: lane = coop * N + row. For each 32-column chunk at k0, lane l loads
 * x[k0 + l]; at step s (0 .. N-1) lane (row, coop) takes column j = s * G + coop, gets x[k0 + j]
 * from lane j by __shfl_sync and multiplies it by wp[(k0 + j) * out_pad + base + row]. Over the
 * N steps the G lanes of a row take the G disjoint column classes j = coop (mod G) and together
 * every column of the chunk once; a __shfl_xor_sync over offsets N, 2N, .., 16 (which keep
 * lane % N, the row) then sums them. For N = 32 that is the plain 32-step broadcast loop, G = 1,
 * no reduction. The short last chunk of c = K % 32 columns runs only ceil(c / G) steps; lanes
 * >= c hold x = 0, and a weight is read only when its column j < c, so nothing past K is read.
 *
 * Bounds: rows read are base .. base + N - 1 < out (the tiles exactly cover 0 .. out - 1, so the
 * padding is never even read), columns read are < K; x is read at r * K + k, k < K; y is written
 * at r * out + m, m < out. fp32 FMA throughout. */
#include "cuda_check.h"
#include "sig_dense.h"
#include "sig_device.cuh"

#include <string.h>

#define MBYV_MAX_WARPS 16u

/* U full 32-column chunks starting at k0 for a tile of N rows: all U x N weight loads (and the
 * U x loads) are issued before the first shuffle. WO = (k0 + coop) * out_pad + base + row, the
 * lane's first weight; offsets are 32-bit (the launcher checks in * out_pad < 2^32). */
template <uint32_t N, uint32_t U>
__device__ __forceinline__ void s_full_chunks (const float *__restrict__ wp, uint32_t wo, uint32_t out_pad,
                                               const float *__restrict__ xr, uint32_t k0, uint32_t lane,
                                               uint32_t coop, float (&acc)[4])
{
    constexpr uint32_t G = 32u / N;
    float xv[U], wv[U][N];
#pragma unroll
    for (uint32_t u = 0; u < U; ++u)
        xv[u] = __ldg (xr + k0 + 32u * u + lane);
#pragma unroll
    for (uint32_t u = 0; u < U; ++u)
#pragma unroll
        for (uint32_t s = 0; s < N; ++s)
            wv[u][s] = __ldg (wp + (wo + (32u * u + s * G) * out_pad));
#pragma unroll
    for (uint32_t u = 0; u < U; ++u)
#pragma unroll
        for (uint32_t s = 0; s < N; ++s)
            acc[(u * N + s) & 3u] = fmaf (wv[u][s], __shfl_sync (SIG_FULL_MASK, xv[u], s * G + coop),
                                          acc[(u * N + s) & 3u]);
}

/* Rows base .. base + N - 1 over this warp's slice: NFULL full chunks from K_BEGIN, then, when
 * TAIL != 0, the short chunk of TAIL columns. Every lane of row `lane % N` returns the row's sum. */
template <uint32_t N>
__device__ __forceinline__ float s_tile_dot (const float *__restrict__ wp, uint32_t out_pad, const float *__restrict__ xr,
                                             uint32_t base, uint32_t k_begin, uint32_t nfull, uint32_t tail,
                                             uint32_t lane)
{
    constexpr uint32_t G = 32u / N;
    /* chunks per step: about 16 weight loads in flight per lane whatever N is */
    constexpr uint32_t U = N >= 16u ? 1u : 16u / N;
    const uint32_t row = lane % N, coop = lane / N;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint32_t k0 = k_begin, c = 0;
    for (; c + U <= nfull; c += U, k0 += 32u * U)
        s_full_chunks<N, U> (wp, (k0 + coop) * out_pad + base + row, out_pad, xr, k0, lane, coop, acc);
    if constexpr (U > 1u)
        for (; c < nfull; ++c, k0 += 32u)
            s_full_chunks<N, 1u> (wp, (k0 + coop) * out_pad + base + row, out_pad, xr, k0, lane, coop, acc);
    if (tail != 0u) {
        /* The short last chunk, columns k0 .. k0 + tail - 1 (tail < 32). Every weight load is
         * issued first (predicated: column j < tail only), then the shortened loop runs only the
         * ceil(tail / G) steps that hold a valid column for some lane. */
        const float xt = lane < tail ? __ldg (xr + k0 + lane) : 0.0f;
        float wv[N];
#pragma unroll
        for (uint32_t s = 0; s < N; ++s) {
            const uint32_t j = s * G + coop;   /* < 32 */
            wv[s] = j < tail ? __ldg (wp + ((k0 + j) * out_pad + base + row)) : 0.0f;
        }
#pragma unroll
        for (uint32_t s = 0; s < N; ++s)
            if (s * G < tail)   /* warp-uniform */
                acc[s & 3u] = fmaf (wv[s], __shfl_sync (SIG_FULL_MASK, xt, s * G + coop), acc[s & 3u]);
    }
    float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
#pragma unroll
    for (uint32_t off = N; off < 32u; off <<= 1)
        sum += __shfl_xor_sync (SIG_FULL_MASK, sum, off);
    return sum;
}

/* One power-of-two tile of the remainder block, when N is one of REM's binary digits: its rows
 * go to partial[off .. off + N - 1]. */
template <uint32_t N>
__device__ __forceinline__ void s_rem_tile (uint32_t rem, uint32_t &off, float *partial_w, const float *__restrict__ wp,
                                            uint32_t out_pad, const float *__restrict__ xr, uint32_t base,
                                            uint32_t k_begin, uint32_t nfull, uint32_t tail, uint32_t lane)
{
    if (rem & N) {   /* block-uniform */
        const float v = s_tile_dot<N> (wp, out_pad, xr, base + off, k_begin, nfull, tail, lane);
        if (lane < N)
            partial_w[off + lane] = v;
        off += N;
    }
}

static __global__ void __launch_bounds__ (MBYV_MAX_WARPS * 32u)
s_dense_mbyv_kernel (const float *__restrict__ wp, const float *__restrict__ b, const float *__restrict__ x,
                     float *__restrict__ y, uint32_t in, uint32_t out, uint32_t out_pad, uint32_t rows, int act)
{
    __shared__ float partial[MBYV_MAX_WARPS][32];
    const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const uint32_t base = blockIdx.x * 32u;
    const uint32_t tile_rows = out - base < 32u ? out - base : 32u;   /* 32, or 1..31 in the last block */

    /* this warp's columns: chunks [c_begin, c_end) of the ceil(K/32) chunks */
    const uint32_t chunks = (in + 31u) / 32u;
    const uint32_t cpw = (chunks + warps - 1u) / warps;
    const uint32_t c_begin = warp * cpw < chunks ? warp * cpw : chunks;
    const uint32_t c_end = chunks - c_begin < cpw ? chunks : c_begin + cpw;
    const bool short_last = c_end == chunks && c_end > c_begin && in % 32u != 0u;
    const uint32_t nfull = c_end - c_begin - (short_last ? 1u : 0u);
    const uint32_t tail = short_last ? in % 32u : 0u;
    const uint32_t k_begin = c_begin * 32u;

    for (uint32_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float *xr = x + (size_t) r * in;
        if (tile_rows == 32u) {
            partial[warp][lane] = s_tile_dot<32u> (wp, out_pad, xr, base, k_begin, nfull, tail, lane);
        } else {
            uint32_t off = 0;
            s_rem_tile<16u> (tile_rows, off, partial[warp], wp, out_pad, xr, base, k_begin, nfull, tail, lane);
            s_rem_tile<8u> (tile_rows, off, partial[warp], wp, out_pad, xr, base, k_begin, nfull, tail, lane);
            s_rem_tile<4u> (tile_rows, off, partial[warp], wp, out_pad, xr, base, k_begin, nfull, tail, lane);
            s_rem_tile<2u> (tile_rows, off, partial[warp], wp, out_pad, xr, base, k_begin, nfull, tail, lane);
            s_rem_tile<1u> (tile_rows, off, partial[warp], wp, out_pad, xr, base, k_begin, nfull, tail, lane);
        }
        __syncthreads ();
        if (warp == 0u && lane < tile_rows) {
            float v = 0.0f;
            for (uint32_t w = 0; w < warps; ++w)
                v += partial[w][lane];
            y[(size_t) r * out + base + lane] = sig_activate (v + __ldg (b + base + lane), act);
        }
        if (r + gridDim.y < rows)   /* partial is written again for the next batch row */
            __syncthreads ();
    }
}

/* Warps per block: enough to give each warp at least one chunk, at most 16 (512 threads) while the
 * grid is small (a batch-1 layer of M = 256 has 8 blocks, M = 64 has 2: more warps per block is
 * then the only parallelism over K), at most 8 once the grid has 128 blocks or more. The chunks are
 * spread evenly: cpw = ceil(chunks / max), warps = ceil(chunks / cpw), so no warp is idle.
 *   M=256 K=512: 8 blocks x 16 warps, 1 chunk each;  M=64 K=256: 2 x 8, 1 chunk;  M=1 K=64: 1 x 2;
 *   M=597 K=293: 19 x 10 (the last warp's chunk is 5 columns);  M=8192 K=8192: 256 x 8, 32 chunks. */
static uint32_t s_warps_per_block (uint32_t in, uint32_t blocks)
{
    const uint32_t chunks = (in + 31u) / 32u;
    const uint32_t max_warps = blocks >= 128u ? 8u : MBYV_MAX_WARPS;
    const uint32_t cpw = (chunks + max_warps - 1u) / max_warps;
    return (chunks + cpw - 1u) / cpw;
}

static int s_dense_mbyv (const float *wp, const float *b, const float *x, float *y, uint32_t in, uint32_t out,
                         uint32_t out_pad, uint32_t rows, int act, cudaStream_t stream)
{
    if (!wp || !b || !x || !y || in == 0 || out == 0 || rows == 0 || in > SIG_MAX_DIM || out > SIG_MAX_DIM ||
        out_pad < out || out_pad % 32u != 0u || (uint64_t) in * out_pad > UINT32_MAX || act < SIG_ACT_NONE ||
        act > SIG_ACT_TANH)
        return (int) cudaErrorInvalidValue;
    const uint32_t tiles = (out + 31u) / 32u;
    const uint32_t grid_y = rows < SIG_MAX_GRID_Y ? rows : SIG_MAX_GRID_Y;
    const uint32_t warps = s_warps_per_block (in, tiles * grid_y);
    s_dense_mbyv_kernel<<<dim3 (tiles, grid_y), warps * 32u, 0, stream>>> (wp, b, x, y, in, out, out_pad, rows, act);
    CUDA_TRY_LAUNCH ();
    return (int) cudaSuccess;
}

extern "C" int sig_dense_mbyv (const float *wp, const float *b, const float *x, float *y, uint32_t in, uint32_t out,
                               uint32_t out_pad, uint32_t rows, int act, cudaStream_t stream)
{
    return s_dense_mbyv (wp, b, x, y, in, out, out_pad, rows, act, stream);
}

extern "C" uint32_t sig_mbyv_out_pad (uint32_t out)
{
    return out > UINT32_MAX - 31u ? 0u : (out + 31u) & ~31u;
}

/* Host side, once per model load: wp[k * out_pad + m] = w[m * in + k] for m < out, 0 for
 * out <= m < out_pad. Written in wp order (k outer), so the padding is written, not assumed. */
extern "C" void sig_pack_kmajor (const float *w, uint32_t in, uint32_t out, float *wp, uint32_t out_pad)
{
    if (!w || !wp || out_pad < out)
        return;
    for (uint32_t k = 0; k < in; ++k) {
        float *dst = wp + (size_t) k * out_pad;
        for (uint32_t m = 0; m < out; ++m)
            dst[m] = w[(size_t) m * in + k];
        if (out_pad > out)
            memset (dst + out, 0, (size_t) (out_pad - out) * sizeof (float));
    }
}
