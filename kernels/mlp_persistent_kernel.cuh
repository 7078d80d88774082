/* persistent: the whole MLP served by one resident thread-block cluster (sig_persistent.h: the mailbox).
 *
 * ROLES. The cluster has C = 1, 2, 4 or 8 blocks (the grid is the cluster) of T = 256 threads,
 * one block per SM. Block 0, the leader, polls the mailbox, runs the "local" layers and writes the
 * outputs; blocks 1..C-1, the workers, hold the "split" layers. A split layer is divided by input
 * columns over the W = C - 1 workers: worker w holds, for every output, the float4 column chunks
 * [in4 * w / W, in4 * (w + 1) / W) and the matching slice of the input, computes partial sums and
 * stores them into the leader's shared memory (distributed shared memory, DSMEM); after a cluster
 * barrier the leader adds the W partials in worker order, the bias, the activation. The input of a
 * split layer 0 comes from the leader: it reads every feature from the mapped slot (all loads at
 * once, one PCIe round trip, from the SM that polls) and stores each chunk into its worker's slice
 * before the start barrier, so it costs no barrier of its own. (Tuning read_workers: each worker
 * reads its own slice after the start barrier instead; measured 0.6 us slower.) A split layer after
 * the first gets its slices from the leader (DSMEM stores + a barrier).
 * A split layer may instead be divided by outputs (narrow inputs, where column chunks do not divide
 * evenly): every worker gets the whole input and computes whole outputs. Where the next layer is
 * split by columns, such a layer is FUSED with it: each worker adds the bias, applies the activation
 * and keeps its outputs (whole float4 chunks, so they are exactly its columns of the next layer) in
 * its own second slice: no gather, no scatter between the two, nothing as wide as that layer on the
 * leader (the planner splits a next layer that would have been the leader's for this). With inputs
 * of a few features such a layer uses the NARROW layout: a thread 4 outputs, its slot k their four
 * weights of input k (s_gemv_narrow), so the input is not padded to whole chunks. A narrow layer
 * before a layer of at most 8 outputs is STREAMED into it (s_gemv_stream): each thread multiplies its
 * 4 outputs by that layer's weights at once and the block sums the products as the worker's partials
 * of it, so the hidden layer is never stored (a 1 -> 100,000 -> 1 net holds its weights and biases
 * only).
 * tick_mlp (512 -> 256 -> 64 -> 1) at C = 8: layer 0 split over 7 workers (19 chunks each),
 * layers 1 and 2 local: two cluster barriers per request (start, gather).
 *
 * THE TAIL. The leader's layers after the last split layer (single pass, no registers) run in one
 * compact loop (s_tail_gemv: loops not unrolled), one block barrier before it; from the first layer
 * of at most one warp's threads on (tick_mlp's 64 -> 1) warp 0 runs alone, handed over by a named
 * barrier (bar.arrive / bar.sync 1, 256), __syncwarp between its layers. (Tuning sync |=
 * SIG_SYNC_OLD_TAIL: every layer through the general path with a block barrier each; measured
 * 0.25-0.45 us slower on tick_mlp.) The hand-offs can also be DSMEM stores + remote mbarrier
 * arrivals (tuning sync = SIG_SYNC_MBAR_WARPS or _BLOCKS, when layer 0 is split and the leader
 * reads): measured 0.3-0.7 us slower than the cluster barriers on tick_mlp with the generic kernel,
 * level with the specialised one, and 0.2-0.6 us faster where a layer is fused (docs/persistent-notes.md
 * has the ordering and parity argument and the numbers). Where the leader reads, the default is
 * SIG_SYNC_ASYNC (fused pairs too): the slices, the command and
 * the partials go by st.async, each store completing the receiver's mbarrier itself (complete_tx:
 * no fence, no arrival after the stores), and the sender's one arrive.expect_tx says how many bytes
 * come (the leader knows what it sends and how many partials each gather brings); a worker's
 * threads meet at a block barrier after each wait, so none still waits on a phase when the next
 * completes. Measured 0.8-1.1 us p50 faster than cluster barriers on tick_mlp, 0.7-0.8 faster than
 * the mbarrier arrivals on fused pairs.
 *
 * THREADS AND WEIGHTS. In a layer, G = 2^glog consecutive threads (G <= 32, same warp) share an
 * output: thread t has output m = p * (T / G) + t / G in pass p (more outputs than T / G: several
 * passes) and input chunks g, g + G, g + 2G, ... of its block's range (g = t % G): S "slots" of
 * one float4 of weights each. The image stores slot s of thread t at [(p * S + s) * active + t],
 * so a warp's 16-byte loads of one slot are 512 contiguous bytes (conflict-free in shared memory).
 * When shared memory alone cannot hold a plan, one layer per role (the split layer, resp. the
 * local layer, that would read most from shared memory) keeps its first 20 slots (pass-major: a
 * layer of several passes of `active` threads banks pass 0's, then pass 1's) in registers
 * (float4 wr[20], loaded once, indexed only by constants in unrolled loops); a block never runs a
 * layer of the other role, so one array serves both. (Registers only when needed: on tick_mlp
 * they were measured 0.5 us slower than the shared-memory loop.) The G partial dot products of an
 * output meet by shuffles; a missing chunk or output has zero weights, and every buffer starts
 * zeroed, so padding only ever multiplies zeros by finite values.
 *
 * THE LOOP. Warp 0 of the leader polls the next slot: lane 0 issues, back to back, ld.relaxed.sys
 * of the control line (stop, stall) and ld.acquire.sys.u64 of the slot's request word (one round
 * trip per poll; an acquire does not hold back the load issued before it). On a request the
 * command (op, rows, slot, sequence) goes into s_cmd of the leader, its other warps (waiting at a
 * __syncthreads) read the features and scatter them, lanes 1..C-1 of warp 0 store the command
 * into s_cmd of every worker (DSMEM), and every thread of the cluster meets at a cluster barrier
 * (barrier.cluster.arrive.release / wait.acquire; a plain __syncthreads when C = 1). Then the
 * layers, then the completion, and warp 0 polls again while the other threads wait at the next
 * start barrier. (read_workers: lanes 0..C-1 store the command at once, everyone meets at the
 * start barrier, the workers read.)
 *
 * MEMORY ORDERING.
 *   Host -> kernel: the host stores the features, then the request word with a release store (on
 *   x86 plain stores in program order). Lane 0's ld.acquire.sys that returns the new sequence
 *   synchronises with it. The leader's threads load the features after a __syncthreads that
 *   follows that acquire (ld.relaxed.sys: never a stale cached line), so they are in causality
 *   order after the host's stores; the chunks reach the workers through DSMEM stores made before
 *   the leader's arrive.release at the start barrier, which the workers' wait.acquire matches.
 *   (read_workers: lane 0's arrive.release at the start barrier and every worker thread's
 *   wait.acquire carry the acquire to the workers' own ld.relaxed.sys of the features.)
 *   Inside the cluster: a block's DSMEM stores (partials, input slices, the command) precede its
 *   threads' arrive.release; the reader reads after its wait.acquire, which returns only once
 *   every thread has arrived. Write after read: the leader reads the partials of a split layer
 *   after its gather barrier and before it arrives at the next barrier (a scatter or the next
 *   request's start), and no worker writes partials again before passing that barrier; a worker
 *   reads its input slice before it arrives at the gather barrier, the leader scatters the next
 *   slices (of layer 0 too, before the next start barrier) only after passing it; s_cmd of request n
 *   is read right after the start barrier and the next command is stored only after the leader
 *   finished request n, which needs at least one more barrier (C > 1: the gather; C = 1: a
 *   __syncthreads after the last layer) that every thread reaches after reading it. The leader's
 *   act buffers are its own, with a __syncthreads between a layer's writes and the next layer's
 *   reads.
 *   Kernel -> host (SIG_DONE_SEQUENCE): every thread that stored an output fences at system scope
 *   (fence.acq_rel.sys), the leader meets at __syncthreads, thread 0 fences again and stores the
 *   sequence with st.relaxed.sys: a release pattern, so the host's acquire load that sees the
 *   sequence sees the outputs. (SIG_DONE_OUTPUTS: each output word is stored with st.relaxed.sys
 *   and is its own completion flag; the host waits until none holds the sentinel any more.) Only
 *   the leader writes host memory.
 *   Stop: the poller sees stop, sends OP_STOP through the same start barrier, every block leaves
 *   its loop; after that barrier no block touches another's shared memory, so they may exit.
 *
 * The ping-pong floor kernel at the end uses the same mailbox, poll and completion.
 *
 * SPECIALISED (P_SPEC defined: mlp_persistent_spec.cu compiles this file with NVRTC at load for one
 * model). P_SPEC_HEADER is then the model's image header as a constant initializer and P_SPEC_DTYPE its
 * weight type: the header lives in no memory, every field the kernel reads is a constant, the layer
 * loops unroll (each layer's plan folds into its own code: passes, slots, which role, which hand-off),
 * and the kernel is extern "C" sig_persistent_spec. The image it is given must carry the same header:
 * it checks that word by word at start and, like the generic kernel on a bad magic, returns at once
 * otherwise (the host's start wait then fails the load).
 *
 * This file: the kernel's body and entries (mlp_persistent.cu launches it, compiled by nvcc;
 * mlp_persistent_spec.cu embeds this file's text and its parts' and compiles them with NVRTC); its
 * parts: mlp_persistent_sync.cuh (the hand-offs' device helpers), mlp_persistent_gemv.cuh (the
 * layers) and mlp_persistent_io.cuh (the features in); the layout, the plan and the packing are in
 * mlp_persistent_plan.cu; what both share is in mlp_persistent_impl.cuh. Which devices run it:
 * sig_clusters_supported (caps.cu). */
#ifndef SIGSERVE_MLP_PERSISTENT_KERNEL_CUH
#define SIGSERVE_MLP_PERSISTENT_KERNEL_CUH

#include "sig_persistent.h"
#include "mlp_persistent_impl.cuh"
#include "sig_device.cuh"

#include <stddef.h>

/* Loops over layers, passes and slots: unrolled where their bounds are constants (specialised). */
/* P_TAIL_UNROLL: the compact tail's loops (rows, slots, the group's shuffles) compact in the generic
 * kernel (one copy of the code for every layer), unrolled where specialised. */
#ifdef P_SPEC
#define P_SPEC_UNROLL _Pragma ("unroll")
#define P_TAIL_LAYERS_UNROLL _Pragma ("unroll")
#define P_TAIL_UNROLL _Pragma ("unroll")
#else
#define P_SPEC_UNROLL
#define P_TAIL_LAYERS_UNROLL _Pragma ("unroll 1")
#define P_TAIL_UNROLL _Pragma ("unroll 1")
#endif

enum { OP_RUN = 1u, OP_STOP = 2u };

/* The kernel's parts, in order: the hand-offs' device helpers, the layers, the features in. */
#include "mlp_persistent_sync.cuh"
#include "mlp_persistent_gemv.cuh"
#include "mlp_persistent_io.cuh"

/* TRACE: the instantiation sigbench --trace runs (stamps into TRACE, sig_persistent.h); the serving kernel
 * is the other one, with every stamp compiled out. DT: how the weights are held (SIG_DTYPE_*), one
 * instantiation each, so that no dtype's code adds to another's registers. */
#ifdef P_SPEC
__constant__ uint32_t p_spec_words[sizeof (p_header_t) / 4u] = P_SPEC_WORDS;
#endif

/* The compact tail's first layer (see THE TAIL above): after the last split layer, single pass, no
 * registers; LAYERS when there is none (or the plan does not use it). */
__host__ __device__ constexpr uint32_t p_tail_from (const p_header_t &h)
{
    uint32_t tail_from = h.layers;
    if (h.sync & SIG_PLAN_SYNC_TAIL)
        for (uint32_t l = h.layers; l-- > 1u;) {
            if (h.layer[l].spread != 0u || h.layer[l].passes != 1u || h.layer[l].bank == 0u)
                break;
            tail_from = l;
        }
    return tail_from;
}
/* Of the tail, the first layer from which on every layer has one warp's worth of threads. */
__host__ __device__ constexpr uint32_t p_solo_from (const p_header_t &h, uint32_t tail_from)
{
    uint32_t solo_from = h.layers;
    if (h.sync & SIG_PLAN_SYNC_TAIL)
        for (uint32_t l = h.layers; l-- > tail_from;) {
            if (h.layer[l].active > 32u)
                break;
            solo_from = l;
        }
    return solo_from;
}

/* The kernel's body (the generic kernel and the specialised one below are this, nothing else).
 * TRACE: the instantiation sigbench --trace runs (stamps into TRACE, sig_persistent.h); the serving kernel
 * is the other one, with every stamp compiled out. DT: how the weights are held (SIG_DTYPE_*), one
 * instantiation each, so that no dtype's code adds to another's registers. */
template <bool TRACE, int DT>
__device__ __forceinline__ void s_persistent_body (const p_header_t *__restrict__ img, char *box,
                                                   unsigned long long *trace)
{
#ifdef P_SPEC
    constexpr p_header_t s_h = P_SPEC_HEADER;
#else
    __shared__ p_header_t s_h;
#endif
    __shared__ uint4 s_cmd;
    __shared__ __align__ (8) uint64_t s_mb[2];   /* SIG_PLAN_SYNC_MBAR: [0] a worker's input, [1] the leader's gather */
    extern __shared__ float4 s_dyn[];
    float *const sf = reinterpret_cast<float *> (s_dyn);
    const uint32_t t = threadIdx.x, warp = t >> 5, lane = t & 31u;
    const uint32_t b = sig_cluster_rank ();
    const bool leader = b == 0u;

#ifdef P_SPEC
    {   /* the image's header must be the one compiled in, word by word (P_SPEC_WORDS: the same header
         * as words, so that s_h itself is never in memory) */
        const uint32_t *src = reinterpret_cast<const uint32_t *> (img);
        int same = 1;
        for (uint32_t i = t; i < sizeof (p_header_t) / 4u; i += P_T)
            same &= src[i] == p_spec_words[i];
        if (!__syncthreads_and (same))
            return;   /* every block the same: nobody waits at a barrier */
    }
    constexpr uint32_t C = s_h.blocks, W = C - 1u, layers = s_h.layers;
    static_assert (s_h.magic == P_MAGIC && s_h.dtype == (uint32_t) DT, "a header of this kernel's kind");
#else
    {   /* the header, word by word */
        const uint32_t *src = reinterpret_cast<const uint32_t *> (img);
        uint32_t *dst = reinterpret_cast<uint32_t *> (&s_h);
        for (uint32_t i = t; i < sizeof (p_header_t) / 4u; i += P_T)
            dst[i] = src[i];
    }
    __syncthreads ();
    const uint32_t C = s_h.blocks, W = C - 1u, layers = s_h.layers;
    if (s_h.magic != P_MAGIC || s_h.dtype != (uint32_t) DT)
        return;   /* every block the same: nobody waits at a barrier */
#endif

    /* Buffers zeroed (padding must hold finite values); this block's weights copied in, the
     * banked layer's first slots into registers. */
    const float4 *payload = reinterpret_cast<const float4 *> (reinterpret_cast<const char *> (img) + s_h.payload);
    {   /* this role's buffers (the leader's biases are copied below, over their whole area) */
        const uint32_t lo = (leader ? s_h.act_off0 : s_h.slice_off) / 4u, hi = (leader ? s_h.lead_end : s_h.work_end) / 4u;
        for (uint32_t i = lo + t; i < hi; i += P_T)
            s_dyn[i] = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
    }
    float4 wr[P_BANK];
#pragma unroll
    for (uint32_t s = 0; s < P_BANK; ++s)
        wr[s] = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
    P_SPEC_UNROLL
    for (uint32_t l = 0; l < layers; ++l) {
        const sig_persistent_layer_plan_t &L = s_h.layer[l];
        if ((L.spread != 0u) == leader)
            continue;   /* the other role's */
        const float4 *src = payload + L.image + (L.spread ? (uint64_t) (b - 1u) * L.per_block : 0u);
        const uint32_t R = L.bank == 0u ? L.regs : 0u;
        if (L.bank == 0u && t < L.active) {
            if constexpr (DT == SIG_DTYPE_F32) {
#pragma unroll
                for (uint32_t s = 0; s < P_BANK; ++s)
                    if (s < R)
                        wr[s] = __ldg (src + (size_t) s * L.active + t);
            } else {   /* two 8-byte slots a register */
                const uint2 *src2 = reinterpret_cast<const uint2 *> (src);
#pragma unroll
                for (uint32_t s = 0; s < p_bank_slots (DT); ++s)
                    if (s < R) {
                        const uint2 u = __ldg (src2 + (size_t) s * L.active + t);
                        if (s & 1u) {
                            wr[s >> 1].z = __uint_as_float (u.x);
                            wr[s >> 1].w = __uint_as_float (u.y);
                        } else {
                            wr[s >> 1].x = __uint_as_float (u.x);
                            wr[s >> 1].y = __uint_as_float (u.y);
                        }
                    }
            }
        }
        /* the rest, 16 bytes at a time (R slots x active threads is a multiple of 16 bytes) */
        constexpr uint32_t WB = DT == SIG_DTYPE_F32 ? 16u : 8u;
        const uint64_t n = L.per_block - (uint64_t) R * L.active * WB / 16u;
        const float4 *rest = src + (uint64_t) R * L.active * WB / 16u;
        for (uint64_t i = t; i < n; i += P_T)
            s_dyn[L.w_smem + i] = __ldg (rest + i);
    }
    {
        const float *bsrc = reinterpret_cast<const float *> (payload) + s_h.bias_image;
        if (leader) {
            for (uint32_t i = t; i < s_h.act_off0 - s_h.bias_off; i += P_T)
                sf[s_h.bias_off + i] = __ldg (bsrc + i);
        } else {   /* a fused layer's biases of this worker's outputs */
            P_SPEC_UNROLL
            for (uint32_t l = 0; l < layers; ++l) {
                const sig_persistent_layer_plan_t &L = s_h.layer[l];
                uint32_t m0 = 0u, m1 = 0u;
                p_out_range (L, s_h.out_[l], b - 1u, W, &m0, &m1);
                for (uint32_t i = t; L.fuse && i < m1 - m0; i += P_T)
                    sf[L.wbias + i] = __ldg (bsrc + L.bias + m0 + i);
            }
        }
    }
    /* Hand-offs by mbarrier: each block's own, initialised before the setup barrier below (with the
     * fence that makes the initialisation visible to the cluster's remote arrivals). A worker's
     * input barrier completes when the leader's P_T / 32 warps have arrived; the leader's gather
     * when every worker's warps have. */
    const bool mbar = (s_h.sync & SIG_PLAN_SYNC_MBAR) != 0u && C > 1u;
    /* one arrival per block (every thread fences at cluster scope, a block barrier, one thread
     * arrives) instead of one per warp */
    const bool mbar_block = mbar && (s_h.sync & SIG_PLAN_SYNC_MBAR_BLOCK) != 0u;
    /* the stores complete the barriers (st.async): one arrival a phase, the receiver's expected bytes */
    const bool sasync = mbar && (s_h.sync & SIG_PLAN_SYNC_ASYNC) != 0u;
    const uint32_t mb_in = sig_smem_addr (&s_mb[0]), mb_gather = sig_smem_addr (&s_mb[1]);
    if (mbar && t == 0u) {
        s_mbar_init (mb_in, mbar_block || sasync ? 1u : P_T / 32u);
        s_mbar_init (mb_gather, sasync ? 1u : mbar_block ? W : W * (P_T / 32u));
        s_mbar_init_fence ();
    }
    uint32_t ph_in = 0u, ph_gather = 0u;   /* the parity of the phase each waiter waits for next */
    const uint32_t mb_gather_lead = mbar ? sig_mapa (mb_gather, 0u) : 0u;   /* workers: the leader's */
    /* The compact tail: the leader's layers from tail_from on (after the last split layer, single
     * pass, no registers) run in one loop (s_tail_gemv); from solo_from on (one warp's worth of
     * threads each) warp 0 alone runs them, handed over by a named barrier, the other warps go on. */
#ifdef P_SPEC
    constexpr uint32_t tail_from = p_tail_from (s_h), solo_from = p_solo_from (s_h, tail_from);
#else
    const uint32_t tail_from = p_tail_from (s_h), solo_from = p_solo_from (s_h, tail_from);
#endif
    __syncthreads ();
    s_barrier (C);   /* every block runs and is set up before anyone stores into its shared memory */
    const sig_persistent_layout_t &lay = s_h.box;
    if (leader && t == 0u) {
        sig_st_sys_u32 (box + lay.status, 1u);
        s_fence_sys ();
    }

    float4 *const slice = s_dyn + s_h.slice_off / 4u;
    float4 *const slice2 = s_dyn + s_h.slice2_off / 4u;   /* the input of a layer after a fused one */
    /* act buffer i at act0 + i * act_step (no array of pointers: a run-time index would put it in
     * local memory) */
    float4 *const act0 = s_dyn + s_h.act_off0 / 4u;
    const uint32_t act_step = (s_h.act_off1 - s_h.act_off0) / 4u;
    const float *const part = sf + s_h.part_off;
    const float *const bias = sf + s_h.bias_off;
    const bool seq_done = s_h.done_mode == SIG_DONE_SEQUENCE;
    uint32_t next_slot = 0u, next_seq = 1u;   /* the poller's */
    /* A worker's chunks of a split layer 0, worked out once: after the start barrier the features'
     * loads are the first thing a worker issues. */
    const bool read_leader = s_h.read_leader != 0u;
    /* what the leader's read needs, out of shared memory before the loop */
    const char *const features0 = box + lay.slots + lay.features;
    const uint32_t slot_bytes = lay.slot_bytes, rs0 = lay.row_floats / 4u, in4_0 = s_div_up (s_h.in_[0], 4u);
    const uint32_t xs0 = s_h.layer[0].xs, slice_addr = sig_smem_addr (slice), chunk = s_h.chunk_rows;
    uint32_t x_kc0 = 0u, x_nk = 0u;
    if (!leader && s_h.layer[0].spread) {
        const uint32_t in4 = s_div_up (s_h.in_[0], 4u);
        x_kc0 = s_h.layer[0].by_out ? 0u : in4 * (b - 1u) / W;
        x_nk = s_h.layer[0].by_out ? in4 : in4 * b / W - x_kc0;
    }
    const bool bcast0 = s_h.layer[0].by_out != 0u;
    /* every block polls and the workers read their own slices: no start barrier (the partials in two
     * areas, by the request's parity: a worker may be one request ahead of the leader) */
    const bool wpoll = (s_h.sync & SIG_PLAN_SYNC_WPOLL) != 0u;

    for (;;) {
        unsigned long long *st = nullptr;   /* this request's stamps (TRACE, the leader's thread 0) */
        unsigned long long seen = 0ull;
        if ((leader || wpoll) && warp == 0u) {
            uint32_t rows = 0u;
            const uint32_t op = s_poll (box, lay, next_slot, next_seq, rows, wpoll);
            if (TRACE && t == 0u)
                seen = clock64 ();
            rows = rows < 1u ? 1u : rows > s_h.max_rows ? s_h.max_rows : rows;
            const uint4 cmd = make_uint4 (op, rows, next_slot, next_seq);
            if (C == 1u || read_leader || wpoll) {
                if (lane == 0u)
                    s_cmd = cmd;
            } else if (lane < C) {
                s_st_cluster_v4u (sig_mapa (sig_smem_addr (&s_cmd), lane), cmd);
            }
            next_slot = next_slot + 1u == lay.ring ? 0u : next_slot + 1u;
            ++next_seq;
        }
        /* The request's rows, chunk_rows at a time (every buffer holds that many): each chunk is
         * what a request of that many rows would be, from its start barrier to its last layer. */
        uint4 cmd;
        bool wrote = false;
        for (uint32_t r0 = 0u;;) {
            if (leader && read_leader) {   /* the leader reads every feature and scatters the slices */
                __syncthreads ();
                const uint4 c = s_cmd;
                const uint32_t nr = c.x == OP_RUN ? min (chunk, c.y - r0) : 0u;
                if (c.x == OP_RUN)
                    s_read_scatter (reinterpret_cast<const float4 *> (features0 + (size_t) c.z * slot_bytes) + (size_t) r0 * rs0,
                                    rs0, in4_0, nr, W, slice_addr, xs0, bcast0, sasync ? mb_in : 0u);
                if (r0 == 0u && warp == 0u && lane >= 1u && lane < C) {
                    if (sasync)
                        s_st_async_v4 (sig_mapa (sig_smem_addr (&s_cmd), lane),
                                       make_float4 (__uint_as_float (c.x), __uint_as_float (c.y), __uint_as_float (c.z),
                                                    __uint_as_float (c.w)),
                                       sig_mapa (mb_in, lane));
                    else
                        s_st_cluster_v4u (sig_mapa (sig_smem_addr (&s_cmd), lane), c);
                }
                if (sasync) {   /* worker k's bytes: its command (first chunk) and its slice of the chunk's rows */
                    if (warp == 0u && lane >= 1u && lane < C)
                        s_mbar_expect_remote (sig_mapa (mb_in, lane),
                                              (r0 == 0u ? 16u : 0u) + 16u * nr * (bcast0 ? in4_0 : s_chunks_of (lane - 1u, in4_0, W)));
                } else if (mbar_block) {   /* every thread's stores, then warp 0's lane k arrives on worker k's */
                    s_fence_cluster ();
                    __syncthreads ();
                    if (warp == 0u && lane >= 1u && lane < C)
                        s_mbar_arrive_remote (sig_mapa (mb_in, lane));
                } else if (mbar) {   /* this warp's stores, then lane k arrives on worker k's input barrier */
                    __syncwarp ();
                    if (lane >= 1u && lane < C)
                        s_mbar_arrive_remote (sig_mapa (mb_in, lane));
                }
            }
            if (wpoll) {
                __syncthreads ();   /* warp 0's command to the block */
            } else if (!mbar) {
                s_barrier (C);   /* start */
            } else if (!leader) {
                s_mbar_wait (mb_in, ph_in);
                ph_in ^= 1u;
            }
            cmd = s_cmd;   /* after a barrier (a compiler barrier too) */
            if (sasync && !leader)
                __syncthreads ();   /* every thread is past the wait and has its command before any
                                       partial completes the gather, after which the leader may store
                                       the next command and complete this barrier's next phase */
            if (cmd.x != OP_RUN)
                break;
            if (TRACE && leader && t == 0u && r0 == 0u) {
                st = trace + (size_t) (cmd.w % SIG_TRACE_RING) * SIG_TRACE_STAMPS;
                for (uint32_t k = 0; k < SIG_TRACE_STAMPS; ++k)
                    st[k] = 0ull;
                st[SIG_TRACE_SEEN] = seen;
                st[SIG_TRACE_STARTED] = clock64 ();
            }
            const uint32_t rows = min (chunk, cmd.y - r0);
            const uint32_t pp = wpoll ? (cmd.w & 1u) * s_h.part_stride : 0u;   /* this request's partials */
            char *const sb = box + lay.slots + (size_t) cmd.z * lay.slot_bytes;
            const float4 *const feat = reinterpret_cast<const float4 *> (sb + lay.features) + (size_t) r0 * (lay.row_floats / 4u);
            float *const outp = reinterpret_cast<float *> (sb + lay.outputs) + (size_t) r0 * s_h.out;
            uint32_t cur = 0u;   /* leader: the act buffer holding this layer's input */

            P_SPEC_UNROLL
            for (uint32_t l = 0; l < tail_from; ++l) {
                const sig_persistent_layer_plan_t &L = s_h.layer[l];
                const uint32_t in4 = s_div_up (s_h.in_[l], 4u);
                const uint32_t out = s_h.out_[l];
                const bool last = l + 1u == layers;
                const bool next_spread = !last && s_h.layer[l + 1u].spread != 0u;
                if (L.spread) {
                    if (!leader) {
                        const uint32_t w = b - 1u;
                        if (l == 0u && !read_leader) {
                            s_read_host (feat, lay.row_floats / 4u, x_kc0, x_nk, rows, slice, L.xs);
                            __syncthreads ();
                        }
                        uint32_t m0 = 0u, m1 = 0u;
                        p_out_range (L, out, w, W, &m0, &m1);
                        /* worker w's partials at part + w x chunk x mpad (row stride mpad, the layer's
                         * outputs rounded up to 4); by outputs, everyone's in the first area */
                        const uint32_t mpad = 4u * s_div_up (out, 4u);
                        s_out_t po = s_out_partial (part + pp + (L.by_out ? 0u : (size_t) w * chunk * mpad), mpad, m0,
                                                    sasync ? mb_gather_lead : 0u);
                        if (L.fuse == P_FUSE_KEEP) {   /* bias and activation here: the outputs are this
                                                          worker's columns of the next layer, in its second slice */
                            po.kind = OUT_ACT;
                            po.stride = 4u * s_h.layer[l + 1u].xs;
                            po.remote = 0u;
                            po.m0 = 0u;
                            po.dst = reinterpret_cast<float *> (slice2);
                            po.bias = sf + L.wbias;
                            po.act = s_h.act[l];
                        }
                        const bool after_fuse = l > 0u && s_h.layer[l - 1u].fuse;
                        if (L.fuse == P_FUSE_STREAM) {   /* this layer and the next's partials at once (a
                                                            narrow layer is split by outputs: its input is the slice) */
                            const sig_persistent_layer_plan_t &N = s_h.layer[l + 1u];
                            const uint32_t out1 = s_h.out_[l + 1u], mpad1 = 4u * s_div_up (out1, 4u);
                            s_gemv_stream<DT> (L, m1 - m0, s_dyn + L.w_smem, slice, rows, sf + L.wbias, s_h.act[l], N, out1,
                                               s_dyn + N.w_smem, wr, reinterpret_cast<float *> (slice2),
                                               s_out_partial (part + pp + (size_t) w * chunk * mpad1, mpad1, 0u,
                                                              sasync ? mb_gather_lead : 0u));
                        } else if (!(after_fuse && s_h.layer[l - 1u].fuse == P_FUSE_STREAM)) {
                            s_gemv_any<DT> (L, m1 - m0, s_dyn + L.w_smem, wr, after_fuse ? slice2 : slice, rows, po);
                        }   /* (streamed into: its partials were put by the layer before) */
                        if (L.fuse) {   /* kept: the next layer reads what every thread stored; streamed:
                                           nothing stored, the next layer's partials are on their way */
                            if (L.fuse == P_FUSE_KEEP)
                                __syncthreads ();
                        } else if (sasync) {   /* the partials themselves complete the gather */
                        } else if (mbar_block) {   /* the block's partials (and its reads of the slice) done */
                            s_fence_cluster ();
                            __syncthreads ();
                            if (t == 0u)
                                s_mbar_arrive_remote (mb_gather_lead);
                        } else if (mbar) {   /* this warp's partials (and its reads of the slice) done */
                            __syncwarp ();
                            if (lane == 0u)
                                s_mbar_arrive_remote (mb_gather_lead);
                        }
                    }
                    if (L.fuse) {   /* nothing to gather or scatter; the leader's act buffers keep
                                       their parity (layer l's input in buffer l % 2) */
                        cur ^= 1u;
                        continue;
                    }
                    if (!mbar) {
                        s_barrier (C);   /* gather */
                    } else if (leader) {
                        /* every worker's partials of every row: all the outputs each, or its own share */
                        if (sasync && t == 0u)
                            s_mbar_expect_local (mb_gather, 4u * rows * out * (L.by_out ? 1u : W));
                        s_mbar_wait (mb_gather, ph_gather);
                        ph_gather ^= 1u;
                    }
                    if (TRACE && st)
                        st[SIG_TRACE_GATHER (l)] = clock64 ();
                }
                if (leader) {
                    /* where this layer's final values go */
                    s_out_t fin;
                    fin.remote = 0u;
                    fin.host_relaxed = seq_done ? 0u : 1u;
                    fin.bias = bias + L.bias;
                    fin.act = s_h.act[l];
                    if (last) {
                        fin.kind = OUT_HOST;
                        fin.dst = outp;
                        fin.stride = out;
                    } else {
                        fin.kind = OUT_ACT;
                        fin.dst = reinterpret_cast<float *> (act0 + (cur ^ 1u) * act_step);
                        fin.stride = 4u * (next_spread ? s_div_up (out, 4u) : s_h.layer[l + 1u].xs);
                    }
                    if (L.spread) {
                        for (uint32_t i = t; i < rows * out; i += P_T) {
                            const uint32_t r = rows == 1u ? 0u : i / out, m = i - r * out;
                            float v = 0.0f;
                            const uint32_t mpad = 4u * s_div_up (out, 4u);
                            if (L.by_out)   /* the one worker holding output m computed all of it */
                                v = part[pp + r * mpad + m];
                            else
                                for (uint32_t k = 0; k < W; ++k)
                                    v += part[pp + (size_t) k * chunk * mpad + r * mpad + m];
                            wrote |= s_put (fin, r, m, v);
                        }
                    } else {
                        if (l == 0u) {
                            s_read_host (feat, lay.row_floats / 4u, 0u, in4, rows, act0 + cur * act_step, L.xs);
                            __syncthreads ();
                        }
                        wrote |= s_gemv_any<DT> (L, out, s_dyn + L.w_smem, wr, act0 + cur * act_step, rows, fin);
                    }
                    cur ^= 1u;
                    __syncthreads ();   /* this layer's act writes before the next layer (or scatter) reads */
                    if (TRACE && st)
                        st[SIG_TRACE_COMPUTED (l)] = clock64 ();
                }
                if (next_spread) {
                    if (leader) {   /* act0 + cur holds rows x out4 chunks; worker k gets its slice */
                        const sig_persistent_layer_plan_t &N = s_h.layer[l + 1u];
                        const uint32_t n4 = s_div_up (out, 4u);
                        const uint32_t saddr = sig_smem_addr (slice);
                        const float4 *src = act0 + cur * act_step;
                        for (uint32_t i = t; i < rows * n4; i += P_T) {
                            const uint32_t r = i / n4, kc = i - r * n4;
                            s_st_slice (saddr, r, kc, n4, W, N.xs, N.by_out != 0u, src[(size_t) r * n4 + kc],
                                        sasync ? mb_in : 0u);
                        }
                        if (sasync) {
                            if (warp == 0u && lane >= 1u && lane < C)
                                s_mbar_expect_remote (sig_mapa (mb_in, lane),
                                                      16u * rows * (N.by_out ? n4 : s_chunks_of (lane - 1u, n4, W)));
                        } else if (mbar_block) {
                            s_fence_cluster ();
                            __syncthreads ();
                            if (warp == 0u && lane >= 1u && lane < C)
                                s_mbar_arrive_remote (sig_mapa (mb_in, lane));
                        } else if (mbar) {
                            __syncwarp ();
                            if (lane >= 1u && lane < C)
                                s_mbar_arrive_remote (sig_mapa (mb_in, lane));
                        }
                    }
                    if (!mbar) {
                        s_barrier (C);   /* scatter */
                    } else if (!leader) {
                        s_mbar_wait (mb_in, ph_in);
                        ph_in ^= 1u;
                        if (sasync)   /* no thread still waits for this phase when the next completes */
                            __syncthreads ();
                    }
                    if (TRACE && st)
                        st[SIG_TRACE_SCATTER (l)] = clock64 ();
                }
            }
            if (leader && tail_from < layers) {
                /* The compact tail (the layers before it ended with a __syncthreads). */
P_TAIL_LAYERS_UNROLL
                for (uint32_t l = tail_from; l < layers; ++l) {
                    if (l >= solo_from) {   /* warp 0 alone from here */
                        if (l == solo_from) {
                            if (warp != 0u) {   /* this warp's outputs of the layer before are stored */
                                if (l > tail_from)
                                    s_named_arrive (1u, P_T);
                                break;
                            }
                            if (l > tail_from)
                                s_named_sync (1u, P_T);
                        } else {
                            __syncwarp ();
                        }
                    } else if (l > tail_from) {
                        __syncthreads ();
                    }
                    const sig_persistent_layer_plan_t &L = s_h.layer[l];
                    const uint32_t out = s_h.out_[l];
                    s_out_t fin;
                    fin.remote = 0u;
                    fin.m0 = 0u;
                    fin.host_relaxed = seq_done ? 0u : 1u;
                    fin.bias = bias + L.bias;
                    fin.act = s_h.act[l];
                    if (l + 1u == layers) {
                        fin.kind = OUT_HOST;
                        fin.dst = outp;
                        fin.stride = out;
                    } else {
                        fin.kind = OUT_ACT;
                        fin.dst = reinterpret_cast<float *> (act0 + (cur ^ 1u) * act_step);
                        fin.stride = 4u * s_h.layer[l + 1u].xs;
                    }
                    if (TRACE && st && l < SIG_TRACE_SUB_LAYERS && (s_h.sync & SIG_PLAN_SYNC_REPEAT))
                        st[SIG_TRACE_SUB (l, 0u)] = clock64 ();
                    if (t < L.active)
                        wrote |= s_tail_gemv<DT> (L, out, s_dyn + L.w_smem, act0 + cur * act_step, rows, fin);
                    if (TRACE && l < SIG_TRACE_SUB_LAYERS && (s_h.sync & SIG_PLAN_SYNC_REPEAT)) {
                        /* the same layer again, the same values stored again (the host may already
                         * have taken them: the same bits; the slot is reused only 3 requests later) */
                        if (st)
                            st[SIG_TRACE_SUB (l, 1u)] = clock64 ();
                        if (t < L.active)
                            s_tail_gemv<DT> (L, out, s_dyn + L.w_smem, act0 + cur * act_step, rows, fin);
                        if (st)
                            st[SIG_TRACE_SUB (l, 2u)] = clock64 ();
                    }
                    cur ^= 1u;
                    if (TRACE && st)
                        st[SIG_TRACE_COMPUTED (l)] = clock64 ();
                }
            }
            r0 += chunk;
            if (r0 >= cmd.y)
                break;
        }
        if (cmd.x != OP_RUN)
            break;
        if (TRACE && st)
            st[SIG_TRACE_END] = clock64 ();
        if (leader && seq_done) {
            if (wrote)
                s_fence_sys ();
            __syncthreads ();
            if (t == 0u) {
                s_fence_sys ();
                sig_st_sys_u32 (box + lay.slots + (size_t) cmd.z * lay.slot_bytes + lay.done, cmd.w);
            }
        }
    }
    if (mbar)   /* no block leaves while another may still touch its shared memory */
        sig_cluster_sync ();
    if (leader && t == 0u) {
        sig_st_sys_u32 (box + lay.status + 4u, 1u);
        s_fence_sys ();
    }
}

#ifdef P_SPEC
/* The specialised kernel: one model's shapes and plan (P_SPEC_HEADER), weights in P_SPEC_DTYPE;
 * P_SPEC_TRACED: the traced instantiation (sigbench --trace). */
#ifndef P_SPEC_TRACED
#define P_SPEC_TRACED 0
#endif
extern "C" __global__ void __launch_bounds__ (P_T, 1)
sig_persistent_spec (const p_header_t *__restrict__ img, char *box, unsigned long long *trace)
{
    s_persistent_body<P_SPEC_TRACED != 0, P_SPEC_DTYPE> (img, box, trace);
}
#else
template <bool TRACE, int DT>
static __global__ void __launch_bounds__ (P_T, 1)
s_persistent_kernel (const p_header_t *__restrict__ img, char *box, unsigned long long *trace)
{
    s_persistent_body<TRACE, DT> (img, box, trace);
}
#endif

#endif
