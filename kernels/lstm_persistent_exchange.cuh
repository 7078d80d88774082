/* lstm persistent (lstm_persistent.cu: EXCHANGES, MEMORY ORDERING): how the blocks hand each other h and
 * a command's words (LL words tagged with their generation, in a cluster's shared memory or a grid's
 * device memory), and how block 0 takes a command from the mailbox: the poll, the features read
 * and forwarded as they come. A part of lstm_persistent.cu, included by it after
 * lstm_persistent_ctx.cuh (and embedded with it for NVRTC). */
#ifndef SIGSERVE_LSTM_PERSISTENT_EXCHANGE_CUH
#define SIGSERVE_LSTM_PERSISTENT_EXCHANGE_CUH

#ifndef SIGSERVE_LSTM_PERSISTENT_CU
#error "a part of lstm_persistent.cu, which includes it: include that file"
#endif

/* ---------------------------------------------------------------------------------------------
 * Exchanges */

template <int MODE> __device__ __forceinline__ uint64_t l_ll_load (const uint64_t *p)
{
    return MODE == SIG_LSTM_GRID ? l_ld_gpu_u64 (p) : l_ld_local_u64 (p);
}
template <int MODE> __device__ __forceinline__ uint64_t *l_bc (const l_ctx_t &c)
{
    return MODE == SIG_LSTM_GRID ? c.xchg : l_at<uint64_t> (c, c.P->off_bc);
}
template <int MODE> __device__ __forceinline__ uint64_t *l_ag (const l_ctx_t &c)
{
    return MODE == SIG_LSTM_GRID ? c.xchg + 2u * c.P->bc_words : l_at<uint64_t> (c, c.P->off_ag);
}
/* Where input element E of a broadcast goes in the input buffer (batches: one step per in_pad). */
__device__ __forceinline__ uint32_t l_xmap (const sig_lstm_plan_t &P, uint32_t e)
{
    const uint32_t s = e / P.in;
    return s * P.in_pad + (e - s * P.in);
}

/* The unit lane's new h of layer K: into every block's vector (B == 1: straight into its own). */
template <int MODE> __device__ __forceinline__ void l_publish (const l_ctx_t &c, uint32_t k, float h)
{
    const sig_lstm_plan_t &P = *c.P;
    if (c.B == 1u) {
        l_at<float> (c, P.off_hv)[k * P.hs + c.u0 + c.j] = h;
        return;
    }
    const uint64_t w = ((uint64_t) c.agg << 32) | __float_as_uint (h);
    const uint32_t idx = (c.agg & 1u) * P.ag_words + k * P.hidden + c.u0 + c.j;
    if (MODE == SIG_LSTM_GRID) {
        l_st_gpu_u64 (l_ag<MODE> (c) + idx, w);
    } else {
        const uint32_t addr = sig_smem_addr (l_ag<MODE> (c) + idx);
        for (uint32_t r = 0; r < c.B; ++r)
            l_st_cluster_u64 (sig_mapa (addr, r), w);
    }
}

/* Copies N LL words from SRC, each once it carries generation GEN, to DST[MAP (i)]: every thread its
 * own words (i = t, t + T, ...), up to 4 loads in flight, spinning on a stale word alone; no block
 * barrier inside (the caller meets at one after). */
template <int MODE, typename Map>
__device__ __forceinline__ void l_ll_copy (const uint64_t *src, uint32_t n, uint32_t gen, float *dst, Map map)
{
    for (uint32_t i0 = threadIdx.x; i0 < n; i0 += 4u * L_T) {
        uint64_t w[4];
#pragma unroll
        for (uint32_t u = 0; u < 4u; ++u)
            if (i0 + u * L_T < n)
                w[u] = l_ll_load<MODE> (src + i0 + u * L_T);
#pragma unroll
        for (uint32_t u = 0; u < 4u; ++u) {
            const uint32_t i = i0 + u * L_T;
            if (i < n) {
                while ((uint32_t) (w[u] >> 32) != gen)
                    w[u] = l_ll_load<MODE> (src + i);
                dst[map (i)] = __uint_as_float ((uint32_t) w[u]);
            }
        }
    }
}

/* The same in block-wide rounds, every word re-read until all are current (SIG_LSTM_SYNC_XCHG_ROUNDS,
 * the synchronisation before plan 2). Block-wide. */
template <int MODE, typename Map>
__device__ __forceinline__ void l_ll_copy_rounds (const uint64_t *src, uint32_t n, uint32_t gen, float *dst, Map map)
{
    for (;;) {
        bool bad = false;
        for (uint32_t i = threadIdx.x; i < n; i += L_T) {
            const uint64_t w = l_ll_load<MODE> (src + i);
            if ((uint32_t) (w >> 32) != gen)
                bad = true;
            else
                dst[map (i)] = __uint_as_float ((uint32_t) w);
        }
        if (!__syncthreads_or (bad))
            break;
    }
}

/* Whether exchanges go in block-wide rounds: a grid's always (every thread of 132 blocks spinning
 * on the same few L2 lines was measured slower: docs/lstm-notes.md, plan 2), a cluster's under
 * SIG_LSTM_SYNC_XCHG_ROUNDS. */
template <int MODE> __device__ __forceinline__ bool l_rounds (const sig_lstm_plan_t &P)
{
    return MODE == SIG_LSTM_GRID || (P.sync & SIG_LSTM_SYNC_XCHG_ROUNDS);
}

/* Waits for the all-gather of layers [LO, HI) and copies it into the vectors. Block-wide. */
template <int MODE> __device__ __forceinline__ void l_gather (l_ctx_t &c, uint32_t lo, uint32_t hi)
{
    const sig_lstm_plan_t &P = *c.P;
    if (c.B == 1u) {
        __syncthreads ();
        ++c.agg;
        return;
    }
    const uint32_t H = P.hidden, hs = P.hs;
    const uint64_t *ag = l_ag<MODE> (c) + (c.agg & 1u) * P.ag_words + lo * H;
    float *hv = l_at<float> (c, P.off_hv) + lo * hs;
    const auto at = [H, hs] (uint32_t i) {
        const uint32_t k = i / H;
        return k * hs + (i - k * H);
    };
    if (l_rounds<MODE> (P))
        l_ll_copy_rounds<MODE> (ag, (hi - lo) * H, c.agg, hv, at);
    else
        l_ll_copy<MODE> (ag, (hi - lo) * H, c.agg, hv, at);
    __syncthreads ();
    ++c.agg;
}

/* Block 0: the command words CW0, CW1 and NX input floats from the input buffer to every other
 * block. Block-wide (the input buffer complete before). */
template <int MODE> __device__ __forceinline__ void l_broadcast (l_ctx_t &c, uint32_t cw0, uint32_t cw1, uint32_t nx)
{
    const sig_lstm_plan_t &P = *c.P;
    ++c.bcg;
    const uint64_t tag = (uint64_t) c.bcg << 32;
    const uint32_t nw = 2u + nx;
    uint64_t *bc = l_bc<MODE> (c) + (c.bcg & 1u) * P.bc_words;
    const float *xf = l_at<float> (c, P.off_xf);
    if (MODE == SIG_LSTM_GRID) {
        for (uint32_t i = c.t; i < nw; i += L_T)
            l_st_gpu_u64 (bc + i, tag | (i == 0u ? cw0 : i == 1u ? cw1 : __float_as_uint (xf[l_xmap (P, i - 2u)])));
    } else {
        const uint32_t addr = sig_smem_addr (bc);
        for (uint32_t i = c.t; i < nw * (c.B - 1u); i += L_T) {
            const uint32_t r = i / nw, k = i - r * nw;
            const uint64_t w = tag | (k == 0u ? cw0 : k == 1u ? cw1 : __float_as_uint (xf[l_xmap (P, k - 2u)]));
            l_st_cluster_u64 (sig_mapa (addr + 8u * k, r + 1u), w);
        }
    }
}

/* Blocks 1..B-1: the next broadcast. COMMAND: its words go to CW (and a step's features to the
 * input buffer); else a batch of NX inputs. Block-wide. */
template <int MODE>
__device__ __forceinline__ void l_receive (l_ctx_t &c, bool command, uint32_t nx, uint32_t *cw)
{
    const sig_lstm_plan_t &P = *c.P;
    ++c.bcg;
    const uint64_t *bc = l_bc<MODE> (c) + (c.bcg & 1u) * P.bc_words;
    if (c.t == 0u) {
        uint64_t w0, w1;
        do {
            w0 = l_ll_load<MODE> (bc);
            w1 = l_ll_load<MODE> (bc + 1);
        } while ((uint32_t) (w0 >> 32) != c.bcg || (uint32_t) (w1 >> 32) != c.bcg);
        cw[0] = (uint32_t) w0;
        cw[1] = (uint32_t) w1;
        if (command && c.stamps) {   /* the traced block 1: the command's words received */
            c.stamps[SIG_LSTM_TRACE_STAMPS] = l_globaltimer ();
            l_stamp (c, 0u);
        }
    }
    __syncthreads ();
    if (command)
        nx = (cw[0] & 0xffu) == SIG_LSTM_OP_STEP ? P.in : 0u;
    const auto at = [&P] (uint32_t e) { return l_xmap (P, e); };
    if (l_rounds<MODE> (P)) {
        l_ll_copy_rounds<MODE> (bc + 2u, nx, c.bcg, l_at<float> (c, P.off_xf), at);
        return;
    }
    l_ll_copy<MODE> (bc + 2u, nx, c.bcg, l_at<float> (c, P.off_xf), at);
    if (!command)
        __syncthreads ();   /* a command's caller meets at a barrier after reading CW anyway */
    else if (c.stamps && nx) {   /* the traced block 1: every feature copied (a barrier only it has) */
        __syncthreads ();
        l_stamp (c, 1u);
    }
}

/* Block 0: waits for command N (sequence N + 1) in its ring entry, reading the command words and
 * the features in one pass (16 bytes a thread, all in flight at once), or for stop. Returns the
 * op (L_OP_STOP for stop); CW gets the command words, the input buffer a step's features. */
__device__ __forceinline__ uint32_t l_poll_host_rounds (const l_ctx_t &c, const sig_lstm_layout_t &lay, uint32_t n,
                                                        uint32_t *cw, uint32_t *flag)
{
    const sig_lstm_plan_t &P = *c.P;
    const char *entry = c.box + lay.ring + (size_t) (n % SIG_LSTM_RING) * lay.entry_bytes + lay.cmd;
    const uint32_t seq = n + 1u, nw = 2u + P.in, pairs = (nw + 1u) / 2u;
    float *xf = l_at<float> (c, P.off_xf);
    for (;;) {
        bool bad = false;
        for (uint32_t p = c.t; p < pairs; p += L_T) {
            uint64_t w[2];
            l_ld_sys_v2 (entry + 16u * p, w[0], w[1]);
#pragma unroll
            for (uint32_t h = 0; h < 2u; ++h) {
                const uint32_t i = 2u * p + h;
                if (i >= nw)
                    continue;
                const bool ok = (uint32_t) (w[h] >> 32) == seq;
                if (i >= 2u) {
                    if (ok)
                        xf[i - 2u] = __uint_as_float ((uint32_t) w[h]);
                    else
                        bad = true;
                } else if (ok) {
                    cw[i] = (uint32_t) w[h];
                }
            }
            if (p == 0u)
                flag[0] = (uint32_t) (w[0] >> 32) == seq && (uint32_t) (w[1] >> 32) == seq;
        }
        if (c.t == 0u)
            flag[1] = l_ld_sys_u32 (c.box + lay.ctrl);
        const int anybad = __syncthreads_or (bad);
        const uint32_t have = flag[0], stop = flag[1];
        const uint32_t op = cw[0] & 0xffu;
        __syncthreads ();   /* flag and cw are written again in the next round */
        if (have) {
            if (!((op == SIG_LSTM_OP_STEP || op == SIG_LSTM_OP_PING) && anybad)) {
                if (c.stamps) {
                    c.stamps[SIG_LSTM_TRACE_STAMPS] = l_globaltimer ();
                    l_stamp (c, 0u);
                    l_stamp (c, 1u);
                }
                return op;
            }
        } else if (stop) {
            return L_OP_STOP;
        }
    }
}

/* Whether block 0 forwards a step's features to the other blocks as it reads them (l_read_features):
 * with several blocks, unless SIG_LSTM_SYNC_BCAST_AFTER or the old poll (which reads the entry in
 * rounds) is asked for; never the apart advancer (it takes no step, and a step it is sent stops it).
 * The words go into the next generation's buffer while block 0 is still at the poll: the previous
 * command ended with an all-gather every block completed, so every block has read that buffer's
 * last use (the rule above), as when l_broadcast writes it. */
__device__ __forceinline__ bool l_forwards (const l_ctx_t &c)
{
    return c.B > 1u && c.role != SIG_LSTM_ROLE_ADVANCE
           && !(c.P->sync & (SIG_LSTM_SYNC_BCAST_AFTER | SIG_LSTM_SYNC_POLL_ROUNDS));
}

/* Block 0: LL word K of the broadcast BC (block 0's own buffer of the generation GEN) carrying BITS, into
 * every other block's copy (CLUSTER: DSMEM) or device memory (GRID: one buffer every block reads). */
template <int MODE>
__device__ __forceinline__ void l_forward (const l_ctx_t &c, uint64_t *bc, uint32_t k, uint32_t gen, uint32_t bits)
{
    const uint64_t w = ((uint64_t) gen << 32) | bits;
    if (MODE == SIG_LSTM_GRID) {
        l_st_gpu_u64 (bc + k, w);
    } else {
        const uint32_t addr = sig_smem_addr (bc + k);
#pragma unroll 1
        for (uint32_t r = 1; r < c.B; ++r)
            l_st_cluster_u64 (sig_mapa (addr, r), w);
    }
}

/* Block 0: the features of the command with sequence SEQ (words FEAT .. FEAT + IN of ENTRY; FEAT
 * even: the layout's, 2 right after the command words or a line further), into the input buffer:
 * every thread its own 16-byte pairs of words, up to 4 loads in flight, re-reading a pair only
 * while a word of it is stale (the host wrote the features before the command words, so the first
 * pass finds them all: 0 re-reads in every traced step measured). No block barrier inside. BC (a
 * step of several blocks, nullptr else): each feature is also forwarded to the other blocks as the
 * LL word 2 + e of the broadcast of generation GEN as soon as it is read (l_forward), its command
 * words having gone out when thread 0 saw them, so the others do not wait for the whole block's read
 * and a second pass (SIG_LSTM_SYNC_BCAST_AFTER: l_broadcast after the read, as before). */
template <int MODE>
__device__ __forceinline__ void l_read_features (const l_ctx_t &c, const char *entry, uint32_t seq, uint32_t feat,
                                                 uint32_t in, float *xf, uint32_t *stale, uint64_t *bc, uint32_t gen)
{
    const uint32_t nw = feat + in, pairs = (nw + 1u) / 2u;
    constexpr uint32_t T = L_T;
    for (uint32_t p0 = feat / 2u + threadIdx.x; p0 < pairs; p0 += 4u * T) {
        uint64_t w[4][2];
#pragma unroll
        for (uint32_t u = 0; u < 4u; ++u)
            if (p0 + u * T < pairs)
                l_ld_sys_v2 (entry + 16u * (p0 + u * T), w[u][0], w[u][1]);
#pragma unroll
        for (uint32_t u = 0; u < 4u; ++u) {
            const uint32_t p = p0 + u * T, i = 2u * p;   /* word i is feature i - feat */
            if (p >= pairs)
                continue;
            const bool two = i + 1u < nw;
            while ((uint32_t) (w[u][0] >> 32) != seq || (two && (uint32_t) (w[u][1] >> 32) != seq)) {
                if (stale)   /* the traced kernel counts the re-reads (sig_lstm.h: SIG_LSTM_TRACE_STALE) */
                    atomicAdd (stale, 1u);
                l_ld_sys_v2 (entry + 16u * p, w[u][0], w[u][1]);
            }
            xf[i - feat] = __uint_as_float ((uint32_t) w[u][0]);
            if (two)
                xf[i + 1u - feat] = __uint_as_float ((uint32_t) w[u][1]);
            if (bc) {
                l_forward<MODE> (c, bc, 2u + i - feat, gen, (uint32_t) w[u][0]);
                if (two)
                    l_forward<MODE> (c, bc, 3u + i - feat, gen, (uint32_t) w[u][1]);
            }
        }
    }
}

/* Block 0: waits for command N (sequence N + 1) in its ring entry, or for stop. Thread 0 alone
 * polls: the stop word and the entry's two command words (16 bytes), issued back to back, one
 * round trip a poll and no block barrier per round (as the MLP kernel's poll); then a step's or a
 * ping's features are read once by the whole block (l_read_features). Returns the op (L_OP_STOP
 * for stop); CW gets the command words, the input buffer a step's features. Block-wide. */
template <int MODE>
__device__ __forceinline__ uint32_t l_poll_host (const l_ctx_t &c, const sig_lstm_layout_t &lay, uint32_t n,
                                                 uint32_t *cw, uint32_t *flag)
{
    const sig_lstm_plan_t &P = *c.P;
    if (P.sync & SIG_LSTM_SYNC_POLL_ROUNDS)
        return l_poll_host_rounds (c, lay, n, cw, flag);
    const char *entry = c.box + lay.ring + (size_t) (n % SIG_LSTM_RING) * lay.entry_bytes + lay.cmd;
    const uint32_t seq = n + 1u;
    if (c.t == 0u) {
        uint32_t have = 0u;
        for (;;) {
            const uint32_t stop = l_ld_sys_u32 (c.box + lay.ctrl);   /* issued first: one round trip for both */
            uint64_t w0, w1;
            l_ld_sys_v2 (entry, w0, w1);
            if ((uint32_t) (w0 >> 32) == seq && (uint32_t) (w1 >> 32) == seq) {
                if (c.stamps) {
                    c.stamps[SIG_LSTM_TRACE_STAMPS] = l_globaltimer ();
                    l_stamp (c, 0u);
                }
                cw[0] = (uint32_t) w0;
                cw[1] = (uint32_t) w1;
                have = 1u;
                if (((uint32_t) w0 & 0xffu) == SIG_LSTM_OP_STEP && l_forwards (c)) {
                    /* a step of several blocks: its command words to the others at once (its features
                     * follow as the block reads them), so they wait for the features, not for the read */
                    uint64_t *bc = l_bc<MODE> (c) + ((c.bcg + 1u) & 1u) * P.bc_words;
                    l_forward<MODE> (c, bc, 0u, c.bcg + 1u, (uint32_t) w0);
                    l_forward<MODE> (c, bc, 1u, c.bcg + 1u, (uint32_t) w1);
                }
                break;
            }
            if (stop)
                break;
            if (c.role == SIG_LSTM_ROLE_ADVANCE)   /* apart, the advancer polls less often: fewer reads of
                                                    * mapped memory beside the serving kernel's */
                __nanosleep (L_ADVANCER_POLL_NS);
        }
        flag[0] = have;
        flag[1] = 0u;   /* the traced kernel's count of stale feature words re-read */
    }
    __syncthreads ();
    if (!flag[0])
        return L_OP_STOP;
    const uint32_t op = cw[0] & 0xffu;
    if (op == SIG_LSTM_OP_STEP || op == SIG_LSTM_OP_PING) {
        /* a step of several blocks: the features forwarded as read, in the next broadcast's buffer */
        uint64_t *bc = op == SIG_LSTM_OP_STEP && l_forwards (c) ? l_bc<MODE> (c) + ((c.bcg + 1u) & 1u) * P.bc_words : nullptr;
        l_read_features<MODE> (c, entry, seq, lay.feat, P.in, l_at<float> (c, P.off_xf), c.stamps ? &flag[1] : nullptr,
                               bc, c.bcg + 1u);
        __syncthreads ();   /* the features complete; flag and cw read by all before the next poll */
        l_stamp (c, 1u);
        if (c.stamps && c.t == 0u && P.layers <= 5u)
            c.stamps[SIG_LSTM_TRACE_STALE] = 1u + flag[1];   /* a count, not a clock (0: not recorded) */
    }
    return op;
}

#endif
