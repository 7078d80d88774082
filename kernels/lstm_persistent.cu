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
 * This file: the kernel's body, its launch and l_kernel_for (the instantiations, for the planner's
 * queries); its parts: lstm_persistent_ctx.cuh (the per-thread context and the gate sums),
 * lstm_persistent_exchange.cuh (the blocks' exchanges and the poll) and lstm_persistent_ops.cuh (the
 * operations); the plan, the layout and the packing are in lstm_persistent_plan.cu; what both share is
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
/* Included by this file alone, in order (each part checks it). */
#define SIGSERVE_LSTM_PERSISTENT_CU 1
#include "lstm_persistent_ctx.cuh"
#include "lstm_persistent_exchange.cuh"
#include "lstm_persistent_ops.cuh"

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
