/* persistent (mlp_persistent_kernel.cuh, whose THREADS AND WEIGHTS says how a layer is laid out):
 * the layers' arithmetic. Where a layer's outputs go (the leader's partials, its activations, host
 * memory), half weights widened, one layer's share of a block (registers or shared memory), the
 * compact tail's layer, the narrow layout and a narrow layer streamed into the next. A part of
 * mlp_persistent_kernel.cuh, included by it after mlp_persistent_sync.cuh (and embedded with it for
 * NVRTC). */
#ifndef SIGSERVE_MLP_PERSISTENT_GEMV_CUH
#define SIGSERVE_MLP_PERSISTENT_GEMV_CUH

#ifndef SIGSERVE_MLP_PERSISTENT_KERNEL_CUH
#error "a part of mlp_persistent_kernel.cuh, which includes it: include that file"
#endif

/* Where a layer's outputs go. */
enum { OUT_PARTIAL = 0, OUT_ACT = 1, OUT_HOST = 2 };
struct s_out_t {
    uint32_t kind;
    uint32_t stride;       /* floats per row of the destination */
    uint32_t remote;       /* OUT_PARTIAL: shared::cluster address of this block's rows in block 0 */
    uint32_t host_relaxed; /* OUT_HOST: st.relaxed.sys (SIG_DONE_OUTPUTS) instead of a plain store */
    uint32_t m0;           /* OUT_PARTIAL: this block's first output (a layer split by outputs) */
    uint32_t mb;           /* OUT_PARTIAL: the leader's gather mbarrier (shared::cluster) the stores
                              complete (st.async, SIG_PLAN_SYNC_ASYNC); 0: plain DSMEM stores */
    float *dst;            /* OUT_ACT, OUT_HOST */
    const float *bias;     /* OUT_ACT, OUT_HOST: the layer's */
    int act;
};

/* Partial sums into the leader's area AT (this block's pointer to it in the leader's layout; row
 * stride STRIDE floats, this block's first output M0). */
__device__ __forceinline__ s_out_t s_out_partial (const float *at, uint32_t stride, uint32_t m0, uint32_t mb)
{
    s_out_t o;
    o.kind = OUT_PARTIAL;
    o.stride = stride;
    o.remote = sig_mapa (sig_smem_addr (at), 0u);
    o.host_relaxed = 0u;
    o.m0 = m0;
    o.mb = mb;
    o.dst = nullptr;
    o.bias = nullptr;
    o.act = 0;
    return o;
}

/* Stores output (R, M) (a partial sum for OUT_PARTIAL); true when it went to host memory. */
__device__ __forceinline__ bool s_put (const s_out_t &o, uint32_t r, uint32_t m, float acc)
{
    if (o.kind == OUT_PARTIAL) {
        if (o.mb)
            s_st_async_f32 (o.remote + 4u * (r * o.stride + o.m0 + m), acc, o.mb);
        else
            s_st_cluster_f32 (o.remote + 4u * (r * o.stride + o.m0 + m), acc);
        return false;
    }
    const float v = sig_activate (acc + o.bias[m], o.act);
    float *p = o.dst + (size_t) r * o.stride + m;
    if (o.kind == OUT_ACT) {
        *p = v;
        return false;
    }
    if (o.host_relaxed)
        sig_st_sys_output (p, v);
    else
        *p = v;
    return true;
}

/* Half weights: two of them (one 32-bit word) widened to two floats, exactly. */
template <int DT>
__device__ __forceinline__ float2 s_widen2 (uint32_t bits)
{
    if constexpr (DT == SIG_DTYPE_F16) {   /* cvt.f32.f16 (__half22float2's instructions, without cuda_fp16.h,
                                              which NVRTC does not carry) */
        float lo, hi;
        asm ("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
             : "=f"(lo), "=f"(hi)
             : "r"(bits));
        return make_float2 (lo, hi);
    } else {
        return make_float2 (__uint_as_float (bits << 16), __uint_as_float (bits & 0xffff0000u));
    }
}
/* One slot of weights as four floats: WS points to the slots (float4 in f32; uint2, 8 bytes, in
 * f16 and bf16), I is the slot's index. */
template <int DT>
__device__ __forceinline__ float4 s_wslot (const void *__restrict__ ws, size_t i)
{
    if constexpr (DT == SIG_DTYPE_F32) {
        return static_cast<const float4 *> (ws)[i];
    } else {
        const uint2 u = static_cast<const uint2 *> (ws)[i];
        const float2 a = s_widen2<DT> (u.x), b = s_widen2<DT> (u.y);
        return make_float4 (a.x, a.y, b.x, b.y);
    }
}
/* Register slot S (a constant) of the bank: f32, wr[s]; f16 and bf16, half of wr[s / 2]. */
template <int DT>
__device__ __forceinline__ float4 s_wreg (const float4 (&wr)[P_BANK], uint32_t s)
{
    if constexpr (DT == SIG_DTYPE_F32) {
        return wr[s];
    } else {
        const float4 v = wr[s >> 1];
        const uint32_t lo = __float_as_uint ((s & 1u) ? v.z : v.x), hi = __float_as_uint ((s & 1u) ? v.w : v.y);
        const float2 a = s_widen2<DT> (lo), b = s_widen2<DT> (hi);
        return make_float4 (a.x, a.y, b.x, b.y);
    }
}

/* One layer's share of this block: for every row, every output this thread has, the dot product of
 * its slots with the input X (shared memory, row stride L.xs float4), reduced over the G threads of
 * the output, stored through O. BANKED: the first L.regs slots are in WR, in pass-major order
 * (pass 0's slots, then pass 1's, ...: only passes of `active` threads). DT: the weights' type
 * (SIG_DTYPE_*); the products and sums are fp32 FMAs in every case. Whole warps call it
 * (active % 32 == 0). */
template <bool BANKED, int DT>
__device__ __forceinline__ bool s_gemv (const sig_persistent_layer_plan_t &L, uint32_t out, const float4 *__restrict__ wsm,
                                        const float4 (&wr)[P_BANK], const float4 *__restrict__ x, uint32_t rows,
                                        const s_out_t &o)
{
    constexpr uint32_t NB = p_bank_slots (DT);   /* slots the bank holds */
    const uint32_t t = threadIdx.x;
    if (t >= L.active)
        return false;
    const uint32_t glog = L.glog, G = 1u << glog, g = t & (G - 1u), S = L.slots;
    const uint32_t R0 = BANKED ? L.regs : 0u;   /* the banked slots: the first R0 in pass-major order */
    bool wrote = false;
    P_SPEC_UNROLL
    for (uint32_t p = 0; p < L.passes; ++p) {
        /* pass p's slots start at p S active (every pass before the last has `active` threads);
         * the last pass has last_active (whole warps: the outputs left), G = 1 when passes > 1 */
        const uint32_t A = p + 1u == L.passes ? L.last_active : L.active;
        if (t >= A)
            break;
        /* this pass's banked slots, its first R: bank entries pS .. pS + R - 1 */
        const uint32_t pS = p * S, R = min (R0 - min (R0, pS), S);     /* 0 when R0 <= pS */
        const uint32_t m = p * (P_T >> glog) + (t >> glog);
        /* slot s >= R of pass p: slot p S active + s A + t of the image, less the banked slots before
         * it (this pass's and the earlier passes') */
        const size_t wp = (size_t) p * S * L.active + t - (size_t) min (R0, pS + S) * L.active;
        for (uint32_t r = 0; r < rows; ++r) {
            const float4 *xr = x + (size_t) r * L.xs + g;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            if constexpr (BANKED) {
                /* P_GROUP input loads in flight at a time: all 20 at once would take 80 more
                 * registers and push loop-invariant values out to local memory (seen in ptxas -v);
                 * the empty asm keeps the next group's loads behind this group's. */
#pragma unroll
                for (uint32_t s0 = 0; s0 < NB; s0 += P_XGROUP) {
                    float4 xv[P_XGROUP];
#pragma unroll
                    for (uint32_t u = 0; u < P_XGROUP; ++u)
                        if (s0 + u - pS < R)   /* bank entry s0 + u is this pass's slot s0 + u - pS */
                            xv[u] = xr[(s0 + u - pS) << glog];
#pragma unroll
                    for (uint32_t u = 0; u < P_XGROUP; ++u) {
                        if (s0 + u - pS < R) {
                            const float4 wv = s_wreg<DT> (wr, s0 + u);
                            if (u % 4u == 0u)
                                a0 = sig_fma4 (wv, xv[u], a0);
                            else if (u % 4u == 1u)
                                a1 = sig_fma4 (wv, xv[u], a1);
                            else if (u % 4u == 2u)
                                a2 = sig_fma4 (wv, xv[u], a2);
                            else
                                a3 = sig_fma4 (wv, xv[u], a3);
                        }
                    }
                    asm volatile ("" ::: "memory");
                }
            }
            uint32_t s = R;
            P_SPEC_UNROLL
            for (; s + 4u <= S; s += 4u) {   /* four loads of each in flight */
                const float4 w0 = s_wslot<DT> (wsm, wp + (size_t) s * A);
                const float4 w1 = s_wslot<DT> (wsm, wp + (size_t) (s + 1u) * A);
                const float4 w2 = s_wslot<DT> (wsm, wp + (size_t) (s + 2u) * A);
                const float4 w3 = s_wslot<DT> (wsm, wp + (size_t) (s + 3u) * A);
                const float4 x0 = xr[s << glog], x1 = xr[(s + 1u) << glog];
                const float4 x2 = xr[(s + 2u) << glog], x3 = xr[(s + 3u) << glog];
                a0 = sig_fma4 (w0, x0, a0);
                a1 = sig_fma4 (w1, x1, a1);
                a2 = sig_fma4 (w2, x2, a2);
                a3 = sig_fma4 (w3, x3, a3);
            }
            for (; s < S; ++s)
                a0 = sig_fma4 (s_wslot<DT> (wsm, wp + (size_t) s * A), xr[s << glog], a0);
            float acc = (a0 + a1) + (a2 + a3);
            for (uint32_t off = G >> 1; off > 0u; off >>= 1)
                acc += __shfl_xor_sync (SIG_FULL_MASK, acc, off);
            if (g == 0u && m < out)
                wrote |= s_put (o, r, m, acc);
        }
    }
    return wrote;
}

/* The compact tail: one layer of the leader's tail (single pass, no registers), the same arithmetic
 * as s_gemv<false, DT> in the same order (bit for bit the same sums), written as loops that are not
 * unrolled, so the code a request walks stays small (docs/persistent-notes.md: the fixed ~0.8 us a
 * layer). Threads below L.active call it. */
template <int DT>
__device__ __forceinline__ bool s_tail_gemv (const sig_persistent_layer_plan_t &L, uint32_t out, const float4 *__restrict__ wsm,
                                             const float4 *__restrict__ x, uint32_t rows, const s_out_t &o)
{
    const uint32_t t = threadIdx.x, glog = L.glog, G = 1u << glog, g = t & (G - 1u), S = L.slots, A = L.active;
    const uint32_t m = t >> glog, xs = L.xs;
    bool wrote = false;
P_TAIL_UNROLL
    for (uint32_t r = 0; r < rows; ++r) {
        const float4 *xr = x + r * xs + g;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        uint32_t s = 0;
P_TAIL_UNROLL
        for (; s + 4u <= S; s += 4u) {   /* four loads of each in flight */
            const float4 w0 = s_wslot<DT> (wsm, t + s * A);
            const float4 w1 = s_wslot<DT> (wsm, t + (s + 1u) * A);
            const float4 w2 = s_wslot<DT> (wsm, t + (s + 2u) * A);
            const float4 w3 = s_wslot<DT> (wsm, t + (s + 3u) * A);
            const float4 x0 = xr[s << glog], x1 = xr[(s + 1u) << glog];
            const float4 x2 = xr[(s + 2u) << glog], x3 = xr[(s + 3u) << glog];
            a0 = sig_fma4 (w0, x0, a0);
            a1 = sig_fma4 (w1, x1, a1);
            a2 = sig_fma4 (w2, x2, a2);
            a3 = sig_fma4 (w3, x3, a3);
        }
P_TAIL_UNROLL
        for (; s < S; ++s)
            a0 = sig_fma4 (s_wslot<DT> (wsm, t + s * A), xr[s << glog], a0);
        float acc = (a0 + a1) + (a2 + a3);
P_TAIL_UNROLL
        for (uint32_t off = G >> 1; off > 0u; off >>= 1)
            acc += __shfl_xor_sync (SIG_FULL_MASK, acc, off);
        if (g == 0u && m < out)
            wrote |= s_put (o, r, m, acc);
    }
    return wrote;
}

/* A layer split by outputs in the narrow layout (P_BY_OUT_NARROW): thread j of pass p has outputs
 * 4 (p T + j) .. + 3, its slot k their four weights of input k (no input padding: an input of a few
 * features), the input read as floats; fp32 FMAs, two accumulators, no registers bank. */
template <int DT>
__device__ __forceinline__ bool s_gemv_narrow (const sig_persistent_layer_plan_t &L, uint32_t out, const float4 *__restrict__ wsm,
                                               const float4 *__restrict__ x, uint32_t rows, const s_out_t &o)
{
    const uint32_t t = threadIdx.x, S = L.slots;
    bool wrote = false;
    for (uint32_t p = 0; p < L.passes; ++p) {
        const uint32_t A = p + 1u == L.passes ? L.last_active : L.active;
        if (t >= A)
            break;
        const uint32_t m = 4u * (p * P_T + t);
        const size_t wp = (size_t) p * S * L.active + t;
        for (uint32_t r = 0; r < rows; ++r) {
            const float *xr = reinterpret_cast<const float *> (x + (size_t) r * L.xs);
            float4 a = make_float4 (0.0f, 0.0f, 0.0f, 0.0f), c = a;
            uint32_t k = 0;
            for (; k + 2u <= S; k += 2u) {
                const float4 w0 = s_wslot<DT> (wsm, wp + (size_t) k * A), w1 = s_wslot<DT> (wsm, wp + (size_t) (k + 1u) * A);
                const float x0 = xr[k], x1 = xr[k + 1u];
                a = make_float4 (fmaf (w0.x, x0, a.x), fmaf (w0.y, x0, a.y), fmaf (w0.z, x0, a.z), fmaf (w0.w, x0, a.w));
                c = make_float4 (fmaf (w1.x, x1, c.x), fmaf (w1.y, x1, c.y), fmaf (w1.z, x1, c.z), fmaf (w1.w, x1, c.w));
            }
            if (k < S) {
                const float4 w0 = s_wslot<DT> (wsm, wp + (size_t) k * A);
                const float x0 = xr[k];
                a = make_float4 (fmaf (w0.x, x0, a.x), fmaf (w0.y, x0, a.y), fmaf (w0.z, x0, a.z), fmaf (w0.w, x0, a.w));
            }
            const float v[4] = { a.x + c.x, a.y + c.y, a.z + c.z, a.w + c.w };
#pragma unroll
            for (uint32_t e = 0; e < 4u; ++e)
                if (m + e < out)
                    wrote |= s_put (o, r, m + e, v[e]);
        }
    }
    return wrote;
}

/* Pass P's 4 outputs of thread T of a narrow layer (s_gemv_narrow's products, one running sum each),
 * its bias (local output m at BIAS[m]) and activation applied; 0 past the layer's OUT. */
template <int DT>
__device__ __forceinline__ float4 s_stream_h (const sig_persistent_layer_plan_t &L, uint32_t out, const float4 *__restrict__ wsm,
                                              const float *__restrict__ xr, const float *__restrict__ bias, int act, uint32_t p,
                                              uint32_t t)
{
    const uint32_t S = L.slots, A = p + 1u == L.passes ? L.last_active : L.active, m = 4u * (p * P_T + t);
    const size_t wp = (size_t) p * S * L.active + t;
    float4 a = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);   /* one accumulator: the bank's registers stay live */
    for (uint32_t k = 0; k < S; ++k) {
        const float4 w0 = s_wslot<DT> (wsm, wp + (size_t) k * A);
        const float x0 = xr[k];
        a = make_float4 (fmaf (w0.x, x0, a.x), fmaf (w0.y, x0, a.y), fmaf (w0.z, x0, a.z), fmaf (w0.w, x0, a.w));
    }
    const float v[4] = { a.x, a.y, a.z, a.w };
    float h[4];
#pragma unroll
    for (uint32_t e = 0; e < 4u; ++e)
        h[e] = m + e < out ? sig_activate (v[e] + bias[m + e], act) : 0.0f;
    return make_float4 (h[0], h[1], h[2], h[3]);
}

__device__ __forceinline__ float s_dot4 (float4 w, float4 h)
{
    return fmaf (w.w, h.w, fmaf (w.z, h.z, fmaf (w.y, h.y, w.x * h.x)));
}

/* A narrow layer L (OUT outputs on this worker, biases at BIAS) streamed into the next layer N
 * (OUT1 <= P_STREAM_OUT outputs, P_FUSE_STREAM): each thread makes its 4 outputs of a pass
 * (s_stream_h) and at once adds their products with N's slots (pass p's slot o: output o's 4
 * weights; N.regs of them, pass-major, in WR) into one sum per output; per row the block adds up each
 * output's sums (shuffles, then a sum per warp in RED: two rows' areas) and thread o puts output o's
 * partial through O. The hidden layer is never stored. Every thread of the block calls it. */
template <int DT>
__device__ __forceinline__ void s_gemv_stream (const sig_persistent_layer_plan_t &L, uint32_t out, const float4 *__restrict__ wsm,
                                               const float4 *__restrict__ x, uint32_t rows, const float *__restrict__ bias, int act,
                                               const sig_persistent_layer_plan_t &N, uint32_t out1, const float4 *__restrict__ wsm1,
                                               const float4 (&wr)[P_BANK], float *red, const s_out_t &o)
{
    constexpr uint32_t NB = p_bank_slots (DT), NW = P_T / 32u;
    const uint32_t t = threadIdx.x, lane = t & 31u, warp = t >> 5, S1 = out1;
    const uint32_t R = N.bank == 0u ? N.regs : 0u;   /* entry k: pass k / S1's output k % S1 (whole passes) */
    for (uint32_t r = 0; r < rows; ++r) {
        const float *xr = reinterpret_cast<const float *> (x + (size_t) r * L.xs);
        float acc[P_STREAM_OUT];
#pragma unroll
        for (uint32_t u = 0; u < P_STREAM_OUT; ++u)
            acc[u] = 0.0f;
        if (R > 0u && t < N.active) {   /* the bank (whole passes of N.active threads): k a constant */
            float4 h = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (uint32_t k = 0; k < NB; ++k) {
                if (k < R) {
                    const uint32_t p = k / S1, q = k - p * S1;
                    if (q == 0u)
                        h = s_stream_h<DT> (L, out, wsm, xr, bias, act, p, t);
                    const float d = s_dot4 (s_wreg<DT> (wr, k), h);
#pragma unroll
                    for (uint32_t u = 0; u < P_STREAM_OUT; ++u)
                        acc[u] += u == q ? d : 0.0f;
                }
            }
        }
        for (uint32_t p = R / S1; p < L.passes; ++p) {   /* the rest, from shared memory */
            const uint32_t A = p + 1u == L.passes ? L.last_active : L.active;
            if (t >= A)
                break;
            const float4 h = s_stream_h<DT> (L, out, wsm, xr, bias, act, p, t);
            const size_t wp = (size_t) p * S1 * N.active + t - (size_t) R * N.active;
#pragma unroll
            for (uint32_t u = 0; u < P_STREAM_OUT; ++u)
                if (u < S1 && p * S1 + u >= R)
                    acc[u] += s_dot4 (s_wslot<DT> (wsm1, wp + (size_t) u * A), h);
        }
        float *rb = red + (r & 1u) * NW * P_STREAM_OUT;
#pragma unroll
        for (uint32_t u = 0; u < P_STREAM_OUT; ++u) {
            if (u < S1) {
                float v = acc[u];
                for (uint32_t off = 16u; off > 0u; off >>= 1)
                    v += __shfl_xor_sync (SIG_FULL_MASK, v, off);
                if (lane == 0u)
                    rb[warp * P_STREAM_OUT + u] = v;
            }
        }
        __syncthreads ();
        if (t < S1) {
            float v = 0.0f;
#pragma unroll
            for (uint32_t w = 0; w < NW; ++w)
                v += rb[w * P_STREAM_OUT + t];
            s_put (o, r, t, v);
        }
    }
}

template <int DT>
__device__ __forceinline__ bool s_gemv_any (const sig_persistent_layer_plan_t &L, uint32_t out, const float4 *wsm,
                                            const float4 (&wr)[P_BANK], const float4 *x, uint32_t rows, const s_out_t &o)
{
    if (L.by_out == P_BY_OUT_NARROW)
        return s_gemv_narrow<DT> (L, out, wsm, x, rows, o);
    return L.bank == 0u ? s_gemv<true, DT> (L, out, wsm, wr, x, rows, o) : s_gemv<false, DT> (L, out, wsm, wr, x, rows, o);
}

#endif
