/* lstm persistent (lstm_persistent.cu says how the kernel works): the per-thread context every part
 * of the kernel passes on, the trace's stamps, and the gate sums of a thread's unit (the dot
 * products per weight type and math, reduced over the unit's lanes). A part of lstm_persistent.cu,
 * included by it (and embedded with it for NVRTC). */
#ifndef SIGSERVE_LSTM_PERSISTENT_CTX_CUH
#define SIGSERVE_LSTM_PERSISTENT_CTX_CUH

#ifndef SIGSERVE_LSTM_PERSISTENT_CU
#error "a part of lstm_persistent.cu, which includes it: include that file"
#endif

/* ---------------------------------------------------------------------------------------------
 * The per-thread context */

struct l_ctx_t {
    const sig_lstm_plan_t *P;     /* in shared memory */
    unsigned char *dyn;           /* dynamic shared memory */
    const unsigned char *img;     /* the image (device memory) */
    char *state, *box;
    uint64_t *xchg;
    uint32_t b, B, t, j, l, u0, nu;
    bool lanes;                   /* t < active: this warp takes part in the dot products */
    bool unit;                    /* the unit lane of a unit this block owns */
    uint32_t bcg, agg;            /* LL generations: broadcasts, all-gathers */
    uint32_t role;                /* SIG_LSTM_ROLE_* (sig_lstm.h: plan 4) */
    const char *ctrl;             /* the stop word (a step waiting apart for its state honours it) */
    uint64_t *stamps;             /* the traced instantiation's blocks 0 and 1: this command's stamps
                                   * (thread 0's; SIG_LSTM_TRACE_STAMPS + 1, the last %globaltimer
                                   * when seen), else nullptr: the serving kernel has no stamp code */
};

/* Thread 0 of a traced block (0 or 1) notes stamp I (sig_lstm.h: SIG_LSTM_TRACE_*). */
__device__ __forceinline__ void l_stamp (const l_ctx_t &c, uint32_t i)
{
    if (c.stamps && c.t == 0u && i < SIG_LSTM_TRACE_STAMPS)
        c.stamps[i] = (uint64_t) clock64 ();
}

template <typename T> __device__ __forceinline__ T *l_at (const l_ctx_t &c, uint32_t off)
{
    return reinterpret_cast<T *> (c.dyn + off);
}

/* The four gate sums of this thread's unit over array A and the vector X (shared memory, zero
 * padded), added to ACC, then reduced over the unit's G lanes (every lane gets them). HALF: the
 * products in the weights' type (SIG_LSTM_MATH_HALF: X rounded to it once per chunk, l_hfma), else
 * each weight widened to fp32 (l_fma). */
template <int DT, bool HALF>
__device__ __forceinline__ float4 l_dot_as (const l_ctx_t &c, uint32_t a, const float *x, float4 acc)
{
    constexpr uint32_t CE = DT == SIG_LSTM_F32 ? 4u : 8u;
    static_assert (!HALF || DT != SIG_LSTM_F32, "f32 weights have no half products");
    const sig_lstm_array_t &ar = c.P->arrays[a];
    const uint32_t A = c.P->active, G = c.P->group, S = ar.slots, SS = ar.smem_slots;
    const float *xs = x + c.l * CE;
    const uint32_t xstep = G * CE;
    const uint4 *ws = reinterpret_cast<const uint4 *> (c.dyn + ar.smem_off) + c.t;
    uint32_t s = 0;
#define L_DOT_CHUNK(w0, w1, w2, w3)                                                   \
    {                                                                                  \
        const float4 x0 = reinterpret_cast<const float4 *> (xs)[0];                    \
        const float4 x1 = CE == 8u ? reinterpret_cast<const float4 *> (xs)[1] : x0;    \
        xs += xstep;                                                                   \
        if constexpr (HALF) {                                                          \
            const uint4 xh = l_pack_x<DT> (x0, x1);                                    \
            acc.x = l_hfma<DT> (w0, xh, acc.x);                                        \
            acc.y = l_hfma<DT> (w1, xh, acc.y);                                        \
            acc.z = l_hfma<DT> (w2, xh, acc.z);                                        \
            acc.w = l_hfma<DT> (w3, xh, acc.w);                                        \
        } else {                                                                       \
            acc.x = l_fma<DT> (w0, x0, x1, acc.x);                                     \
            acc.y = l_fma<DT> (w1, x0, x1, acc.y);                                     \
            acc.z = l_fma<DT> (w2, x0, x1, acc.z);                                     \
            acc.w = l_fma<DT> (w3, x0, x1, acc.w);                                     \
        }                                                                              \
    }
#pragma unroll 2
    for (; s < SS; ++s) {
        const uint4 w0 = ws[0], w1 = ws[A], w2 = ws[2u * A], w3 = ws[3u * A];
        ws += 4u * A;
        L_DOT_CHUNK (w0, w1, w2, w3)
    }
    if (s < S) {
        const uint4 *wg = reinterpret_cast<const uint4 *> (c.img + ar.image_off + (uint64_t) c.b * ar.block_bytes)
                          + (size_t) SS * 4u * A + c.t;
#pragma unroll 2
        for (; s < S; ++s) {
            const uint4 w0 = __ldg (wg), w1 = __ldg (wg + A), w2 = __ldg (wg + 2u * A), w3 = __ldg (wg + 3u * A);
            wg += 4u * A;
            L_DOT_CHUNK (w0, w1, w2, w3)
        }
    }
#undef L_DOT_CHUNK
    return acc;
}

/* l_dot_as in the plan's math; WIDE: this command's features pass the plan's half_x_max (the
 * host's SIG_LSTM_WIDE_INPUTS), so their products are widened whatever the plan says. */
template <int DT>
__device__ __forceinline__ float4 l_dot (const l_ctx_t &c, uint32_t a, const float *x, float4 acc, bool wide = false)
{
    constexpr bool half = DT != SIG_LSTM_F32;
    if (half && c.P->math == SIG_LSTM_MATH_HALF && !wide)
        return l_dot_as<DT, half> (c, a, x, acc);
    return l_dot_as<DT, false> (c, a, x, acc);
}

__device__ __forceinline__ float4 l_reduce (float4 a, uint32_t G)
{
    for (uint32_t off = G >> 1; off > 0u; off >>= 1) {
        a.x += __shfl_xor_sync (SIG_FULL_MASK, a.x, off);
        a.y += __shfl_xor_sync (SIG_FULL_MASK, a.y, off);
        a.z += __shfl_xor_sync (SIG_FULL_MASK, a.z, off);
        a.w += __shfl_xor_sync (SIG_FULL_MASK, a.w, off);
    }
    return a;
}

#endif
