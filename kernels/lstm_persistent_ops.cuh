/* lstm persistent (lstm_persistent.cu says what each command does): the operations. The ring of a
 * stream slot's layer-0 projections and its state, the head, the state records of the advances
 * apart (plan 4), one step, a sequence of steps (an advance), the state stored, a full window, and
 * the traced blocks' records. A part of lstm_persistent.cu, included by it after
 * lstm_persistent_exchange.cuh (and embedded with it for NVRTC). */
#ifndef SIGSERVE_LSTM_PERSISTENT_OPS_CUH
#define SIGSERVE_LSTM_PERSISTENT_OPS_CUH

#ifndef SIGSERVE_LSTM_PERSISTENT_CU
#error "a part of lstm_persistent.cu, which includes it: include that file"
#endif

/* ---------------------------------------------------------------------------------------------
 * The operations */

__device__ __forceinline__ float4 *l_ring (const l_ctx_t &c, uint32_t slot, uint32_t pos)
{
    const sig_lstm_plan_t &P = *c.P;
    return reinterpret_cast<float4 *> (c.state)
           + (((size_t) slot * P.window + pos) * c.B + c.b) * P.units + c.j;
}
__device__ __forceinline__ size_t l_state_index (const l_ctx_t &c, uint32_t slot, uint32_t k)
{
    const sig_lstm_plan_t &P = *c.P;
    return (((size_t) slot * P.layers + k) * c.B + c.b) * P.units + c.j;
}

/* Block 0: the head on the last layer's h (the vectors) into DST (host memory, st.relaxed.sys).
 * FENCE: each writer fences at system scope after its store (a window's outputs). */
__device__ __forceinline__ void l_head (const l_ctx_t &c, float *dst, bool fence)
{
    const sig_lstm_plan_t &P = *c.P;
    const uint32_t warp = c.t >> 5, lane = c.t & 31u, H = P.hidden;
    const float *h = l_at<float> (c, P.off_hv) + (P.layers - 1u) * P.hs;
    const float *hw = P.head_in_smem ? l_at<float> (c, P.off_head)
                                     : reinterpret_cast<const float *> (c.img + P.head_image);
    const float *hb = hw + (size_t) P.out * P.hs;
    for (uint32_t o = warp; o < P.out; o += L_T / 32u) {
        float acc = 0.0f;
        for (uint32_t i = lane; i < H; i += 32u)
            acc = fmaf (P.head_in_smem ? hw[(size_t) o * P.hs + i] : __ldg (hw + (size_t) o * P.hs + i), h[i], acc);
        acc = sig_warp_sum (acc);
        if (lane == 0u) {
            const float bias = P.head_in_smem ? hb[o] : __ldg (hb + o);
            sig_st_sys_output (dst + o, sig_activate (acc + bias, (int) P.head_act));
            if (fence)
                l_fence_sys ();
        }
    }
}

/* Apart (plan 4): the records (G's four words, c's, a pad: sig_lstm.h) of SLOT's layer K, the unit
 * lane's, in device memory and in the staging buffer. */
__device__ __forceinline__ uint64_t *l_record (const l_ctx_t &c, uint32_t slot, uint32_t k)
{
    return reinterpret_cast<uint64_t *> (c.state + c.P->state_g) + 6u * l_state_index (c, slot, k);
}
__device__ __forceinline__ uint64_t *l_staged (const l_ctx_t &c, uint32_t k)
{
    return l_at<uint64_t> (c, c.P->off_stage) + 6u * ((size_t) k * c.P->units + c.j);
}

/* Every layer's record, copied asynchronously into the staging buffer at L2 (cp.async.cg: no
 * register held while in flight, no L1 line that could be stale); l_state_take checks them. */
__device__ __forceinline__ void l_state_issue (const l_ctx_t &c, uint32_t slot)
{
    for (uint32_t k = 0; k < c.P->layers; ++k) {
        const uint64_t *src = l_record (c, slot, k);
        uint64_t *dst = l_staged (c, k);
        l_cp16 (dst, src);
        l_cp16 (dst + 2, src + 2);
        l_cp16 (dst + 4, src + 4);
    }
}

/* Layer K's G and c once each word carries version VER (after l_cp_wait): a stale one re-read alone
 * from device memory (the advancer is still at it); stop ends the wait (the values are then
 * whatever was read). */
__device__ __forceinline__ void l_state_take (const l_ctx_t &c, uint32_t slot, uint32_t k, uint32_t ver, float4 &g,
                                              float &cc)
{
    const uint64_t *src = l_record (c, slot, k), *st = l_staged (c, k);
    uint64_t w[5] = { st[0], st[1], st[2], st[3], st[4] };
#pragma unroll
    for (uint32_t q = 0; q < 5u; ++q)
        for (uint32_t spins = 0; (uint32_t) (w[q] >> 32) != ver; ++spins) {
            if ((spins & 1023u) == 1023u && l_ld_sys_u32 (c.ctrl))
                break;
            w[q] = l_ld_gpu_u64 (src + q);
        }
    g = make_float4 (__uint_as_float ((uint32_t) w[0]), __uint_as_float ((uint32_t) w[1]),
                     __uint_as_float ((uint32_t) w[2]), __uint_as_float ((uint32_t) w[3]));
    cc = __uint_as_float ((uint32_t) w[4]);
}

/* A step of stream SLOT at ring position POS: the critical path. VER: apart (c.role SERVE), the
 * version of the state it needs (sig_lstm.h: plan 4), read from device memory; else the state comes
 * from the hot copy. */
template <int DT, int MODE, bool AP>
__device__ __forceinline__ void l_step (l_ctx_t &c, uint32_t slot, uint32_t pos, bool wide, uint32_t ver, uint32_t &hot,
                                        float *out)
{
    const sig_lstm_plan_t &P = *c.P;
    const uint32_t U = P.units;
    float4 *hot_g = l_at<float4> (c, P.off_hot_g);
    float *hot_c = l_at<float> (c, P.off_hot_c);
    constexpr bool apart = AP;   /* the apart instantiation's steps are ROLE_SERVE's */
    if (apart) {
        if (c.unit)
            l_state_issue (c, slot);   /* in flight during layer 0's dot products */
    } else if (hot != slot) {   /* another slot's state is hot: fetch this one's */
        if (c.unit) {
            const float4 *g = reinterpret_cast<const float4 *> (c.state + P.state_g);
            const float *cc = reinterpret_cast<const float *> (c.state + P.state_c);
            for (uint32_t k = 0; k < P.layers; ++k) {
                hot_g[k * U + c.j] = g[l_state_index (c, slot, k)];
                hot_c[k * U + c.j] = cc[l_state_index (c, slot, k)];
            }
        }
        hot = slot;
        /* the unit lane that loads is the one that reads: no barrier needed */
    }
    const float *xf = l_at<float> (c, P.off_xf), *hv = l_at<float> (c, P.off_hv);
    const bool fine = c.stamps && P.layers <= SIG_LSTM_TRACE_FINE_LAYERS;   /* the traced kernel's finer stamps */
    if (fine)
        l_stamp (c, SIG_LSTM_TRACE_ENTER);
    for (uint32_t k = 0; k < P.layers; ++k) {
        float4 acc = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
        if (c.lanes) {
            acc = l_dot<DT> (c, 2u * k, k == 0u ? xf : hv + (k - 1u) * P.hs, acc, k == 0u && wide);
            if (fine && k == 0u)
                l_stamp (c, SIG_LSTM_TRACE_L0_DOT);
            acc = l_reduce (acc, P.group);
        }
        l_stamp (c, 3u + 3u * k);
        if (c.unit) {
            float4 g;
            float cc;
            if (apart) {
                if (k == 0u)
                    l_cp_wait ();
                l_state_take (c, slot, k, ver, g, cc);
            } else {
                g = hot_g[k * U + c.j];
                cc = hot_c[k * U + c.j];
            }
            if (fine && k == 0u) {   /* the state's loads complete: a use of both (the test is never
                                      * true in practice; if it were, only the trace's count would suffer) */
                if (g.x + cc == 1.2345e30f)
                    c.stamps[SIG_LSTM_TRACE_STALE] = 0u;
                l_stamp (c, SIG_LSTM_TRACE_L0_STATE);
            }
            /* W_ih x, for the advances to come; apart, after the state's words: a RESET zeroes the
             * ring and fences the zeros before them, so none lands on this store */
            if (k == 0u)
                *l_ring (c, slot, pos) = acc;
            const float h = l_cell (l_add4 (acc, g), cc);
            l_publish<MODE> (c, k, h);
        }
        l_stamp (c, 4u + 3u * k);
        l_gather<MODE> (c, k, k + 1u);
        l_stamp (c, 5u + 3u * k);
    }
    if (c.b == 0u) {
        l_head (c, out, false);
        l_stamp (c, 3u + 3u * P.layers);
    }
}

/* T steps from a zero state, step t's layer-0 projection at ring position (FIRST + t) % W of
 * SLOT: the wavefront. Leaves every layer's last h in the vectors and its c in c_run. */
template <int DT, int MODE>
__device__ __forceinline__ void l_sequence (l_ctx_t &c, uint32_t slot, uint32_t first, uint32_t T)
{
    const sig_lstm_plan_t &P = *c.P;
    const uint32_t L = P.layers, U = P.units, W = P.window;
    float *hv = l_at<float> (c, P.off_hv), *c_run = l_at<float> (c, P.off_c_run);
    float4 *gates = l_at<float4> (c, P.off_gates);
    const float4 *bias = l_at<float4> (c, P.off_bias);
    for (uint32_t i = c.t; i < L * P.hs; i += L_T)
        hv[i] = 0.0f;
    if (c.unit)
        for (uint32_t k = 0; k < L; ++k)
            c_run[k * U + c.j] = 0.0f;
    __syncthreads ();
    if (T == 0u) {   /* nothing to run; the all-gather every command ends with */
        if (c.unit)
            l_publish<MODE> (c, 0u, 0.0f);
        l_gather<MODE> (c, 0u, 1u);
        return;
    }
    for (uint32_t s = 0; s + 1u < T + L; ++s) {
        const uint32_t k_lo = s >= T ? s - T + 1u : 0u, k_hi = s < L - 1u ? s : L - 1u;
        float4 p0 = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
        if (c.unit && k_lo == 0u) {   /* layer 0's projection of step s: issued before the dots */
            const float4 *r = l_ring (c, slot, (first + s) % W);
            p0 = c.role == SIG_LSTM_ROLE_ADVANCE ? __ldcg (r) : *r;   /* the advancer: another SM's stores */
        }
        for (uint32_t k = k_lo; k <= k_hi; ++k) {
            float4 acc = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
            if (c.lanes) {
                if (k > 0u)
                    acc = l_dot<DT> (c, 2u * k, hv + (k - 1u) * P.hs, acc);
                acc = l_reduce (l_dot<DT> (c, 2u * k + 1u, hv + k * P.hs, acc), P.group);
            }
            if (c.unit)
                gates[k * U + c.j] = acc;
        }
        __syncthreads ();   /* every dot read the vectors before they change */
        if (c.unit)
            for (uint32_t k = k_lo; k <= k_hi; ++k) {
                float4 g = l_add4 (gates[k * U + c.j], bias[k * U + c.j]);
                if (k == 0u)
                    g = l_add4 (g, p0);
                float cc = c_run[k * U + c.j];
                const float h = l_cell (g, cc);
                c_run[k * U + c.j] = cc;
                l_publish<MODE> (c, k, h);
            }
        l_gather<MODE> (c, k_lo, k_hi + 1u);
    }
}

/* After a sequence: G = W_hh h + b and c of every layer into SLOT's state, and hot; the advancer
 * (plan 4): as LL words of version VER, which a step's unit lane waits for. */
template <int DT, bool AP>
__device__ __forceinline__ void l_store_state (l_ctx_t &c, uint32_t slot, uint32_t ver, uint32_t &hot)
{
    const sig_lstm_plan_t &P = *c.P;
    const uint32_t U = P.units;
    const float *hv = l_at<float> (c, P.off_hv), *c_run = l_at<float> (c, P.off_c_run);
    const float4 *bias = l_at<float4> (c, P.off_bias);
    float4 *hot_g = l_at<float4> (c, P.off_hot_g);
    float *hot_c = l_at<float> (c, P.off_hot_c);
    float4 *g = reinterpret_cast<float4 *> (c.state + P.state_g);
    float *cc = reinterpret_cast<float *> (c.state + P.state_c);
    for (uint32_t k = 0; k < P.layers; ++k) {
        float4 acc = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
        if (c.lanes)
            acc = l_reduce (l_dot<DT> (c, 2u * k + 1u, hv + k * P.hs, acc), P.group);
        if (c.unit) {
            acc = l_add4 (acc, bias[k * U + c.j]);
            const float ck = c_run[k * U + c.j];
            hot_g[k * U + c.j] = acc;
            hot_c[k * U + c.j] = ck;
            if (AP) {   /* the apart instantiation's advances are ROLE_ADVANCE's: LL words of version VER */
                const uint64_t tag = (uint64_t) ver << 32;
                uint64_t *r = l_record (c, slot, k);
                l_st_gpu_u64 (r, tag | __float_as_uint (acc.x));
                l_st_gpu_u64 (r + 1, tag | __float_as_uint (acc.y));
                l_st_gpu_u64 (r + 2, tag | __float_as_uint (acc.z));
                l_st_gpu_u64 (r + 3, tag | __float_as_uint (acc.w));
                l_st_gpu_u64 (r + 4, tag | __float_as_uint (ck));
            } else {
                g[l_state_index (c, slot, k)] = acc;
                cc[l_state_index (c, slot, k)] = ck;
            }
        }
    }
    hot = slot;
    __syncthreads ();
}

template <int DT, int MODE>
__device__ __forceinline__ void l_window (l_ctx_t &c, const sig_lstm_layout_t &lay, uint32_t rows, const uint32_t &wide,
                                          uint32_t *cw)
{
    const sig_lstm_plan_t &P = *c.P;
    const uint32_t W = P.window, in = P.in, scratch = P.slots;
    float *xf = l_at<float> (c, P.off_xf);
    if (c.b == 0u && c.t == 0u)
        l_fence_sys ();   /* the command was seen: window_in, written before it, is now visible */
    __syncthreads ();
    for (uint32_t r = 0; r < rows; ++r) {
        for (uint32_t t0 = 0; t0 < W; t0 += P.tb) {
            const uint32_t nb = W - t0 < P.tb ? W - t0 : P.tb, nx = nb * in;
            if (c.b == 0u) {
                const float *src = reinterpret_cast<const float *> (c.box + lay.window_in) + ((size_t) r * W + t0) * in;
                for (uint32_t e0 = c.t; e0 < nx; e0 += 4u * L_T) {
                    float v[4];
#pragma unroll
                    for (uint32_t u = 0; u < 4u; ++u)
                        if (e0 + u * L_T < nx)
                            v[u] = l_ld_sys_f32 (src + e0 + u * L_T);
#pragma unroll
                    for (uint32_t u = 0; u < 4u; ++u)
                        if (e0 + u * L_T < nx)
                            xf[l_xmap (P, e0 + u * L_T)] = v[u];
                }
                __syncthreads ();
                if (c.B > 1u)
                    l_broadcast<MODE> (c, 0u, 0u, nx);
            } else {
                l_receive<MODE> (c, false, nx, cw);
            }
            for (uint32_t s = 0; s < nb; ++s) {
                float4 acc = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
                if (c.lanes)
                    acc = l_reduce (l_dot<DT> (c, 0u, xf + s * P.in_pad, acc, wide != 0u), P.group);
                if (c.unit)
                    *l_ring (c, scratch, t0 + s) = acc;
            }
            if (c.B > 1u) {   /* the ack: nobody writes this batch's buffer again before all read it */
                if (c.unit)
                    l_publish<MODE> (c, 0u, 0.0f);
                l_gather<MODE> (c, 0u, 1u);
            } else {
                __syncthreads ();
            }
        }
        l_sequence<DT, MODE> (c, scratch, 0u, W);
        if (c.b == 0u)
            l_head (c, reinterpret_cast<float *> (c.box + lay.window_out) + (size_t) r * P.out, true);
        __syncthreads ();   /* the head read the vectors before the next row's exchanges write them */
    }
}

/* One record of a traced block (thread 0; block b's in its own area, sig_lstm.h SIG_LSTM_TRACE_BLOCKS):
 * op, when seen and now (%globaltimer), the stamps; the stamps cleared for the next command. */
__device__ __forceinline__ void l_trace_record (const l_ctx_t &c, uint32_t op, uint32_t &traced)
{
    if (!c.stamps || c.t != 0u)
        return;
    uint64_t *rec = reinterpret_cast<uint64_t *> (c.P->trace)
                    + ((size_t) c.b * SIG_LSTM_TRACE_RECORDS + traced++ % SIG_LSTM_TRACE_RECORDS) * SIG_LSTM_TRACE_WORDS;
    rec[0] = op;
    rec[1] = c.stamps[SIG_LSTM_TRACE_STAMPS];
    rec[2] = l_globaltimer ();
    for (uint32_t i = 0; i < SIG_LSTM_TRACE_STAMPS; ++i) {
        rec[3u + i] = c.stamps[i];
        c.stamps[i] = 0u;
    }
}

#endif
