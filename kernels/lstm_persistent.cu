/* lstm persistent: an LSTM served by one resident launch (sig_lstm.h: the mailbox and commands).
 *
 * WHO HOLDS WHAT. B blocks of 512 threads, one per SM: a thread-block cluster of 1..16 (CLUSTER)
 * or a cooperative grid of one block per SM (GRID, when no cluster holds the weights). Block b owns
 * hidden units [H b / B, H (b + 1) / B) of every layer, i.e. their four gate rows of W_ih and W_hh;
 * a unit is computed by G = 2^g consecutive threads of one warp (G <= 32, the most that fits
 * 512 / units), thread (unit j, lane l) reading 16-byte chunks l, l + G, l + 2G, ... of the four
 * rows, so the input chunk it loads serves four gates, and the G partial sums meet by shuffles;
 * lane 0 (the unit lane) then has all four gates and does the cell update. A matrix is packed
 * [slot][gate][thread] (a warp's loads of one slot and gate are 512 contiguous bytes: conflict
 * free in shared memory, coalesced in device memory). Shared memory holds, after the buffers, a
 * prefix of every matrix, W_ih first (the step reads only W_ih), then W_hh; the rest of a matrix
 * is read from the image in device memory (L2) by the same loop. Weights are f32, f16 or bf16;
 * f16 / bf16 either widened to f32 as they are loaded, every sum fp32 FMA (SIG_LSTM_MATH_WIDE), or
 * multiplied in their own type, the inputs rounded to it, 4 products per half lane summed in it by
 * packed FMAs and each such run added into the fp32 sum (SIG_LSTM_MATH_HALF, plan 3 in
 * docs/lstm-notes.md; tests/tolerance.c bounds its error).
 *
 * STREAMS (Tacana). Per stream slot, in device memory: a ring of W entries holding layer 0's input
 * projection W_ih x of each step (a step computes it on its way anyway), and the precomputed
 * state of the window's last W - 1 steps from a zero start: per layer G = W_hh h + b and c. A STEP
 * is then, per layer, gates = G + W_ih x_k, one cell update, an exchange of the new h (the next
 * layer's input), and the head: only W_ih on the critical path. The block-private parts of the
 * state (a block reads and writes only its own units' entries, always from the same thread) need
 * no ordering between blocks; the state of the slot last advanced stays in shared memory ("hot"),
 * so a stream ticking alone never waits for a load. ADVANCE (after the reply) reruns the last
 * W - 1 steps from zero as a wavefront: stage s runs step s - k of every layer k at once, one
 * exchange per stage (W + L - 2 stages, not L (W - 1)); layer 0's input projections come from
 * the ring; it ends with G = W_hh h + b and c of every layer, stored and kept hot. RESET zeroes
 * the ring and advances. A WINDOW projects its steps into a scratch slot and runs the same
 * wavefront over all W steps, then the head.
 *
 * EXCHANGES: LL (low latency) words. Every value travels as a 64-bit word (generation << 32 |
 * float bits), single-copy atomic, so a reader knows a word is current from the word itself: no
 * barrier, no fence, no flag. All-gathers (a layer's h: every block writes its units' words to
 * every block, every block reads all H) go to each block's shared memory through distributed
 * shared memory (CLUSTER) or to device memory (GRID); readers poll and copy the floats into their
 * own vectors (CLUSTER: every thread spins on its own words alone, then one __syncthreads; GRID:
 * block-wide rounds until every word is current, measured faster where 132 blocks poll the same
 * few L2 lines; docs/lstm-notes.md, plan 2). Each kind has two buffers used by generation parity;
 * a buffer is written again two generations later, by which time every block has read it, because
 * every block reads every all-gather completely, and between two uses of a broadcast buffer there
 * is always an all-gather (commands end with one; the window batches add a one-word "ack"). Block
 * 0 alone talks to the host (several SMs reading mapped memory at once was measured much slower,
 * see docs/persistent-notes.md): its thread 0 alone polls the ring entry's two command words (as
 * the MLP kernel's poll: no block barrier per round), then the block reads a step's features once,
 * all loads in flight, re-reading only a stale word (docs/lstm-notes.md, plan 1), and sends the
 * command (and a step's features) to the other blocks as LL words (CLUSTER: DSMEM; GRID: device
 * memory, the receivers' thread 0 polling two words): a step's command words as soon as thread 0
 * sees them and each feature as soon as its thread has read it (l_forward: measured -0.6 us a step
 * on the grid), any other command after the read (l_broadcast).
 *
 * MEMORY ORDERING. Host -> kernel: tagged words only (no ordering needed: a stale word is read
 * again); for WINDOW the plain window_in floats are read after a fence.acq_rel.sys that follows
 * the relaxed loads which saw the command (the acquire pattern), the host having written them
 * before the command's words. (Plain features after an ld.acquire.sys poll, as the MLP kernel,
 * were measured slower: docs/lstm-notes.md.)
 * Kernel -> host: a step's outputs are st.relaxed.sys, each its own completion (host sentinel);
 * the done word follows (bookkeeping: ring reuse). WINDOW: each output writer fences at system
 * scope, __syncthreads, thread 0 fences again and stores done (release pattern, as the MLP kernel).
 * Inside the kernel, the LL words carry their own validity; shared-memory vectors are ordered by
 * __syncthreads (dots of a stage before the cell updates that overwrite what they read). A
 * cluster meets at a barrier once after setup (nobody writes a block's shared memory before it
 * zeroed it) and once before exit (nobody writes into an exited block).
 *
 * APART (plan 4, sig_lstm.h; the plan's `apart`, a cluster's only, asked for: SIG_LSTM_SYNC_ADVANCE_APART,
 * a model's `advances_apart`; a single stream's step measured 0.4-1.2 us slower): two resident launches of the
 * same instantiation (AP), each with its own mailbox and its own copy of the weights. The serving
 * one (ROLE_SERVE) takes STEP, WINDOW and PING; the advancer (ROLE_ADVANCE) ADVANCE and RESET, on
 * other SMs, so no stream's step waits behind another's advance. The state's G and c are then
 * records of LL words in device memory (version << 32 | float bits), stored by the advancer at the
 * version its command carries; a step copies its slot's records into the staging buffer
 * (cp.async.cg, at L2) as it starts, and each unit lane checks the words where the cell needs them,
 * re-reading a stale one (its advance is still running) until it carries the version the step's
 * command asks for: no hot copy, no fence, no flag on the critical path. The ring of projections
 * goes the other way, ordered through the host: after a step, its unit lanes fence at gpu scope and
 * the cluster meets before block 0 stores done (after the outputs: off the critical path); the
 * host posts the slot's advance after that done; the advancer's thread 0 fences on seeing it and
 * reads the ring with ld.cg. A RESET's zeros are fenced before its state words (the next step
 * writes the ring). The grid (every SM) keeps its advances in the serving kernel (ROLE_ALL).
 *
 * A zero-stage advance (W = 1) and every window batch still do one all-gather, so the rule above
 * holds for every command. STALL (tests) makes block 0 stop reading commands; it still sees stop.
 *
 * SPECIALISED (L_SPEC, the default: sig_lstm.h SIG_LSTM_SYNC_GENERIC): lstm_persistent_spec.cu has
 * NVRTC compile this file at load with the model's image header as constant words, so every plan
 * and layout field is a constant where the generic kernel reads it from shared memory; the kernel
 * checks the image's header against them word by word and exits at once (never ready) on a mismatch.
 * The host code below is not in that source (__CUDACC_RTC__), nor is any header NVRTC lacks (halves
 * are PTX and bit operations).
 *
 * This file: the kernel, its launch and l_kernel_for (the instantiations, for the planner's
 * queries); the plan, the layout and the packing are in lstm_persistent_plan.cu; what both share is
 * in lstm_persistent_impl.cuh; the stateless device helpers (PTX, arithmetic) in
 * lstm_persistent_device.cuh; the specialised kernel's source and launch in lstm_persistent_spec.cu.
 * Which devices run it: sig_clusters_supported (caps.cu). */
#include "sig_lstm.h"
#include "lstm_persistent_device.cuh"
#include "lstm_persistent_impl.cuh"
#include "sig_device.cuh"

#ifndef __CUDACC_RTC__   /* the launch (host code): not in the specialised kernel's NVRTC source */
#include "cuda_check.h"
#include <stddef.h>
#include <string.h>
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

/* TR: the traced instantiation (blocks 0 and 1 stamp their phases, sig_lstm.h SIG_LSTM_TRACE_*); the serving
 * one (TR false) has no stamp code (c.stamps is nullptr, known at compile time). AP: the instantiation
 * of the two apart launches (plan 4: ROLE_SERVE and ROLE_ADVANCE, a cluster's only), so that the one
 * of ROLE_ALL keeps its code (and its registers: the state words in flight spill a few). */
#ifdef L_SPEC
/* SPECIALISED (lstm_persistent_spec.cu compiles this file with NVRTC at load for one plan): the
 * image's header as words, L_SPEC_WORDS. Every plan and layout field the kernel reads through it is
 * then a constant (the compiler folds loads from a constant array at known offsets, whatever the
 * field's type): loops over layers, slots and outputs unroll, offsets fold; a field read at an index
 * known only at run time (arrays[a] in a loop the compiler keeps) comes from the constant cache. */
__constant__ __align__ (16) const uint32_t l_spec_words[sizeof (l_header_t) / 4u] = L_SPEC_WORDS;
#endif

template <int DT, int MODE, bool TR, bool AP>
__device__ __forceinline__ void l_kernel_body (const l_header_t *__restrict__ image, char *state, uint64_t *xchg,
                                               char *box, uint32_t role)
{
    __shared__ uint32_t s_cw[2], s_flag[2];
    __shared__ uint32_t s_wide;   /* a window's SIG_LSTM_WIDE_INPUTS, read where it projects (a register
                                   * held across the window spilled in the bf16 cluster kernel) */
    extern __shared__ __align__ (16) unsigned char s_dyn[];
#ifdef L_SPEC
    {   /* the image's header must be the one compiled in, word by word */
        const uint32_t *src = reinterpret_cast<const uint32_t *> (image);
        int same = 1;
        for (uint32_t i = threadIdx.x; i < sizeof (l_header_t) / 4u; i += L_T)
            same &= src[i] == l_spec_words[i];
        if (!__syncthreads_and (same))
            return;   /* every block the same: nobody waits for anybody (the host's ready wait fails) */
    }
    const l_header_t &s_h = *reinterpret_cast<const l_header_t *> (l_spec_words);
#else
    __shared__ l_header_t s_h;
    {
        const uint32_t *src = reinterpret_cast<const uint32_t *> (image);
        uint32_t *dst = reinterpret_cast<uint32_t *> (&s_h);
        for (uint32_t i = threadIdx.x; i < sizeof (l_header_t) / 4u; i += L_T)
            dst[i] = src[i];
    }
    __syncthreads ();
#endif
    if (s_h.magic != L_MAGIC)
        return;   /* every block the same: nobody waits for anybody */
    const sig_lstm_plan_t &P = s_h.plan;
    const sig_lstm_layout_t &lay = s_h.box;
    l_ctx_t c;
    c.P = &P;
    c.dyn = s_dyn;
    c.img = reinterpret_cast<const unsigned char *> (image);
    c.state = state;
    c.box = box;
    c.xchg = xchg;
    c.role = AP ? role : (uint32_t) SIG_LSTM_ROLE_ALL;   /* known at compile time in the other */
    c.ctrl = box + lay.ctrl;
    c.t = threadIdx.x;
    c.B = P.blocks;
    c.b = MODE == SIG_LSTM_CLUSTER && P.blocks > 1u ? sig_cluster_rank () : blockIdx.x;
    c.u0 = (uint32_t) ((uint64_t) P.hidden * c.b / c.B);
    c.nu = (uint32_t) ((uint64_t) P.hidden * (c.b + 1u) / c.B) - c.u0;
    c.j = c.t / P.group;
    c.l = c.t % P.group;
    c.lanes = c.t < P.active;
    c.unit = c.lanes && c.l == 0u && c.j < c.nu;
    c.bcg = 0u;
    c.agg = 1u;
    uint64_t stamps[TR ? SIG_LSTM_TRACE_STAMPS + 1u : 1u];   /* thread-local: no shared memory taken */
    c.stamps = TR && c.b < SIG_LSTM_TRACE_BLOCKS && P.trace ? stamps : nullptr;
    if (c.stamps)
        for (uint32_t i = 0; i < SIG_LSTM_TRACE_STAMPS; ++i)
            stamps[i] = 0u;
    uint32_t traced = 0u;   /* a traced block's records */

    /* Set up: everything zero (padding must hold finite values), this block's share of the
     * weights, its biases, the head (block 0 reads it; every block has the room). */
    for (uint32_t i = c.t; i < P.smem_bytes / 16u; i += L_T)
        reinterpret_cast<uint4 *> (s_dyn)[i] = make_uint4 (0u, 0u, 0u, 0u);
    __syncthreads ();
    for (uint32_t a = 0; a < 2u * P.layers; ++a) {
        const sig_lstm_array_t &ar = P.arrays[a];
        const uint4 *src = reinterpret_cast<const uint4 *> (c.img + ar.image_off + (uint64_t) c.b * ar.block_bytes);
        uint4 *dst = l_at<uint4> (c, ar.smem_off);
        const uint32_t n = ar.smem_slots * 4u * P.active;
        for (uint32_t i = c.t; i < n; i += L_T)
            dst[i] = __ldg (src + i);
    }
    {
        const float4 *src = reinterpret_cast<const float4 *> (c.img + P.bias_image) + (size_t) c.b * P.layers * P.units;
        float4 *dst = l_at<float4> (c, P.off_bias);
        for (uint32_t i = c.t; i < P.layers * P.units; i += L_T)
            dst[i] = __ldg (src + i);
    }
    if (P.head_in_smem) {
        const float *src = reinterpret_cast<const float *> (c.img + P.head_image);
        float *dst = l_at<float> (c, P.off_head);
        for (uint32_t i = c.t; i < P.out * P.hs + P.out; i += L_T)
            dst[i] = __ldg (src + i);
    }
    __syncthreads ();
    if (MODE == SIG_LSTM_CLUSTER && c.B > 1u)
        sig_cluster_sync ();   /* nobody stores into a block that has not zeroed its buffers */
    if (c.t == 0u)
        sig_st_sys_u32 (box + lay.ready + 4u * c.b, 1u);

    uint32_t n = 0u;                 /* block 0: commands taken from the ring */
    uint32_t hot = 0xffffffffu;      /* the slot whose state is in shared memory */
    for (;;) {
        uint32_t op;
        char *entry = nullptr;
        if (c.b == 0u) {
            op = l_poll_host<MODE> (c, lay, n, s_cw, s_flag);
            entry = box + lay.ring + (size_t) (n % SIG_LSTM_RING) * lay.entry_bytes;
            if (op != L_OP_STOP)
                ++n;
            if (op == SIG_LSTM_OP_PING) {
                if (c.t == 0u) {
                    sig_st_sys_output (entry + lay.outputs, l_at<float> (c, P.off_xf)[0]);
                    l_stamp (c, 2u);
                    sig_st_sys_u32 (entry + lay.done, n);
                }
                l_trace_record (c, op, traced);
                continue;
            }
            if (op == SIG_LSTM_OP_HOLD) {   /* tests: no next command while the hold word is up */
                if (c.t == 0u) {
                    while (l_ld_sys_u32 (box + lay.hold) != 0u && l_ld_sys_u32 (box + lay.ctrl) == 0u) {
                    }
                    sig_st_sys_u32 (entry + lay.done, n);
                }
                continue;
            }
            if (op == SIG_LSTM_OP_STALL) {
                for (;;) {   /* no more commands; stop still ends it */
                    if (c.t == 0u)
                        s_flag[1] = l_ld_sys_u32 (box + lay.ctrl);
                    __syncthreads ();
                    const uint32_t stop = s_flag[1];
                    __syncthreads ();
                    if (stop)
                        break;
                }
                op = L_OP_STOP;
            }
            const bool serves = c.role != SIG_LSTM_ROLE_ADVANCE, advances = c.role != SIG_LSTM_ROLE_SERVE;
            if (!(serves && (op == SIG_LSTM_OP_STEP || op == SIG_LSTM_OP_WINDOW))
                && !(advances && (op == SIG_LSTM_OP_ADVANCE || op == SIG_LSTM_OP_RESET)))
                op = L_OP_STOP;   /* an unknown command (or one of the other role's) stops the kernel rather than guess */
            if (c.B > 1u) {
                if (op == SIG_LSTM_OP_STEP && l_forwards (c))
                    ++c.bcg;   /* forwarded: its command words as seen, its features as read (l_poll_host) */
                else
                    l_broadcast<MODE> (c, op == L_OP_STOP ? L_OP_STOP : s_cw[0], s_cw[1], op == SIG_LSTM_OP_STEP ? P.in : 0u);
                l_stamp (c, 2u);
            }
        } else {
            l_receive<MODE> (c, true, 0u, s_cw);
            op = s_cw[0] & 0xffu;
        }
        if (op == L_OP_STOP)
            break;
        const uint32_t pos = s_cw[0] >> 8;
        /* apart (sig_lstm.h: plan 4), a stream command's word 1 carries the version too; a window's, rows */
        const uint32_t arg = s_cw[1] & ~SIG_LSTM_WIDE_INPUTS;
        const uint32_t slot = AP && op != SIG_LSTM_OP_WINDOW ? arg & SIG_LSTM_APART_SLOTS : arg;
        const uint32_t ver = (arg >> SIG_LSTM_VERSION_SHIFT) & SIG_LSTM_VERSION_MASK;
        const bool wide = (s_cw[1] & SIG_LSTM_WIDE_INPUTS) != 0u;   /* the features need the widening math */
        if (c.t == 0u) {
            s_wide = wide;   /* read after the barrier below; written again only after the next poll's */
            if (AP && c.role == SIG_LSTM_ROLE_ADVANCE)
                __threadfence ();   /* the command seen: the step's ring entry, fenced before its done, is visible */
        }
        __syncthreads ();   /* s_cw read by all before the next command's poll writes it */
        switch (op) {
        case SIG_LSTM_OP_STEP:
            l_step<DT, MODE, AP> (c, slot, pos, wide, ver, hot, reinterpret_cast<float *> (entry + lay.outputs));
            if (AP) {   /* ROLE_SERVE: every block's ring entry visible before done (the advancer reads it) */
                if (c.unit)
                    __threadfence ();
                if (MODE == SIG_LSTM_CLUSTER && c.B > 1u)
                    sig_cluster_sync ();
                else
                    __syncthreads ();
            }
            if (c.b == 0u && c.t == 0u)
                sig_st_sys_u32 (entry + lay.done, n);
            l_trace_record (c, op, traced);
            break;
        case SIG_LSTM_OP_RESET:
        case SIG_LSTM_OP_ADVANCE:
            if (op == SIG_LSTM_OP_RESET && c.unit) {
                for (uint32_t p = 0; p < P.window; ++p)
                    *l_ring (c, slot, p) = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
                if (AP)   /* ROLE_ADVANCE: the zeros before the state words a step waits for (it writes the ring next) */
                    __threadfence ();
            }
            l_sequence<DT, MODE> (c, slot, (pos + 1u) % P.window, P.window - 1u);
            l_store_state<DT, AP> (c, slot, ver, hot);
            if (c.b == 0u && c.t == 0u)
                sig_st_sys_u32 (entry + lay.done, n);
            break;
        case SIG_LSTM_OP_WINDOW:
            l_window<DT, MODE> (c, lay, slot, s_wide, s_cw);
            __syncthreads ();
            if (c.b == 0u && c.t == 0u) {
                l_fence_sys ();
                sig_st_sys_u32 (entry + lay.done, n);
            }
            break;
        }
    }
    if (MODE == SIG_LSTM_CLUSTER && c.B > 1u)
        sig_cluster_sync ();   /* nobody leaves while another may still store into it */
    if (c.t == 0u)
        sig_st_sys_u32 (box + lay.exited + 4u * c.b, 1u);
}

#ifdef L_SPEC
/* The specialised kernel: one plan (L_SPEC_WORDS), its dtype and mode as L_SPEC_DT and L_SPEC_MODE;
 * L_SPEC_TRACED: the traced instantiation. Never one of the apart launches (plan 4). */
#ifndef L_SPEC_TRACED
#define L_SPEC_TRACED 0
#endif
extern "C" __global__ void __launch_bounds__ (L_T, 1)
sig_lstm_spec (const l_header_t *__restrict__ image, char *state, uint64_t *xchg, char *box, uint32_t role)
{
    l_kernel_body<L_SPEC_DT, L_SPEC_MODE, L_SPEC_TRACED != 0, false> (image, state, xchg, box, role);
}
#else
template <int DT, int MODE, bool TR, bool AP>
static __global__ void __launch_bounds__ (L_T, 1)
l_kernel (const l_header_t *__restrict__ image, char *state, uint64_t *xchg, char *box, uint32_t role)
{
    l_kernel_body<DT, MODE, TR, AP> (image, state, xchg, box, role);
}

/* ---------------------------------------------------------------------------------------------
 * Host side: kernel lookup, device check, launch (plan, layout, pack: lstm_persistent_plan.cu) */

template <bool TR> static const void *l_kernel_of (uint32_t dtype, uint32_t mode, bool apart)
{
    if (apart)   /* a cluster's only */
        switch (mode == SIG_LSTM_CLUSTER ? dtype : 3u) {
        case 0: return (const void *) l_kernel<SIG_LSTM_F32, SIG_LSTM_CLUSTER, TR, true>;
        case 1: return (const void *) l_kernel<SIG_LSTM_F16, SIG_LSTM_CLUSTER, TR, true>;
        case 2: return (const void *) l_kernel<SIG_LSTM_BF16, SIG_LSTM_CLUSTER, TR, true>;
        default: return nullptr;
        }
    switch (dtype * 2u + mode) {
    case 0: return (const void *) l_kernel<SIG_LSTM_F32, SIG_LSTM_CLUSTER, TR, false>;
    case 1: return (const void *) l_kernel<SIG_LSTM_F32, SIG_LSTM_GRID, TR, false>;
    case 2: return (const void *) l_kernel<SIG_LSTM_F16, SIG_LSTM_CLUSTER, TR, false>;
    case 3: return (const void *) l_kernel<SIG_LSTM_F16, SIG_LSTM_GRID, TR, false>;
    case 4: return (const void *) l_kernel<SIG_LSTM_BF16, SIG_LSTM_CLUSTER, TR, false>;
    case 5: return (const void *) l_kernel<SIG_LSTM_BF16, SIG_LSTM_GRID, TR, false>;
    default: return nullptr;
    }
}

const void *l_kernel_for (uint32_t dtype, uint32_t mode, bool traced, bool apart)
{
    return traced ? l_kernel_of<true> (dtype, mode, apart) : l_kernel_of<false> (dtype, mode, apart);
}

extern "C" int sig_lstm_launch (const void *image, void *state, void *xchg, void *box, const sig_lstm_plan_t *p,
                                uint32_t role, cudaStream_t stream)
{
    if (!image || !state || !box || !p || !p->blocks || (p->mode == SIG_LSTM_GRID && !xchg)
        || role > SIG_LSTM_ROLE_ADVANCE || (role != SIG_LSTM_ROLE_ALL && !p->apart))
        return (int) cudaErrorInvalidValue;
    const void *fn = l_kernel_for (p->dtype, p->mode, p->trace != 0u, role != SIG_LSTM_ROLE_ALL);
    if (!fn)
        return (int) cudaErrorInvalidValue;
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = sig_cluster_config (p->blocks, L_T, p->smem_bytes, stream, &attr);
    if (p->mode == SIG_LSTM_GRID) {   /* every block resident at once, or the launch fails */
        attr.id = cudaLaunchAttributeCooperative;
        attr.val.cooperative = 1;
    } else if (p->blocks == 1u)
        cfg.numAttrs = 0;             /* one block: no cluster */
    const l_header_t *img = static_cast<const l_header_t *> (image);
    char *st = static_cast<char *> (state);
    uint64_t *xc = static_cast<uint64_t *> (xchg);
    char *bx = static_cast<char *> (box);
    void *args[5] = { &img, &st, &xc, &bx, &role };
    const cudaError_t launched = cudaLaunchKernelExC (&cfg, fn, args);
    const cudaError_t last = cudaGetLastError ();
    return (int) (launched != cudaSuccess ? launched : last);
}
#endif   /* L_SPEC */
