/* persistent, host side: the mailbox layout, the plan (cluster size, placement of the layers,
 * threads, shared memory) and the packing of the weight image, for the kernels of
 * mlp_persistent.cu (which says how they work, and holds the launches and the two kernel queries
 * the plan needs: p_static_smem, p_placeable). Shared definitions: mlp_persistent_impl.cuh. */
#include "sig_fused.h"
#include "sig_persistent.h"
#include "mlp_persistent_impl.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

static uint64_t s_align (uint64_t v, uint64_t a) { return (v + a - 1u) / a * a; }

/* ---------------------------------------------------------------------------------------------
 * Host side: layout, plan, pack (the launches: mlp_persistent.cu) */

extern "C" int sig_persistent_layout (uint32_t in, uint32_t out, uint32_t max_rows, uint32_t ring,
                                      sig_persistent_layout_t *layout)
{
    ring = ring ? ring : SIG_PERSISTENT_RING;
    if (!layout || in == 0u || out == 0u || max_rows == 0u || ring > SIG_PERSISTENT_RING)
        return (int) cudaErrorInvalidValue;
    /* request | features | outputs, done: the done word right after the outputs, so that for a
     * few outputs the host's one cache miss on the done line brings the outputs too */
    const uint64_t row_floats = s_align (in, 4u);
    const uint64_t features = P_LINE;
    const uint64_t outputs = features + s_align ((uint64_t) max_rows * row_floats * 4u, P_LINE);
    const uint64_t done = outputs + s_align ((uint64_t) max_rows * out * 4u, 4u);
    const uint64_t slot = s_align (done + 4u, 2u * P_LINE);
    const uint64_t total = 2u * P_LINE + ring * slot;
    if (total > (1u << 30))
        return (int) cudaErrorInvalidValue;
    layout->ctrl = 0u;
    layout->status = P_LINE;
    layout->slots = 2u * P_LINE;
    layout->slot_bytes = (uint32_t) slot;
    layout->request = 0u;
    layout->done = (uint32_t) done;
    layout->features = (uint32_t) features;
    layout->outputs = (uint32_t) outputs;
    layout->row_floats = (uint32_t) row_floats;
    layout->ring = ring;
    layout->total = (uint32_t) total;
    return (int) cudaSuccess;
}

/* The descriptor checks of the fused kernel (sig_fused.h), on host pointers. */
static bool s_net_ok (const sig_fused_net_t *n)
{
    if (n->layer_count < 1u || n->layer_count > SIG_FUSED_MAX_LAYERS)
        return false;
    for (uint32_t l = 0; l < n->layer_count; ++l) {
        const sig_fused_layer_t *L = &n->layers[l];
        if (!L->w || !L->b || L->in == 0u || L->out == 0u || L->in > (1u << 20) || L->out > (1u << 20))
            return false;
        if (L->act < SIG_ACT_NONE || L->act > SIG_ACT_TANH)
            return false;
        if (l > 0u && L->in != n->layers[l - 1u].out)
            return false;
    }
    return true;
}

/* Threads, slots and strides of one layer (its placement given; W workers; BY_OUT: a split layer
 * divided by outputs (P_BY_OUT, or P_BY_OUT_NARROW: a thread 4 outputs), else by input columns;
 * FUSE: kept in the workers. By outputs in float4 chunks when fused or narrow. */
static void s_shape (uint32_t in, uint32_t out, uint32_t W, bool spread, uint32_t by_out, bool fuse,
                     sig_persistent_layer_plan_t *L)
{
    const uint32_t in4 = s_div_up (in, 4u);
    const uint32_t k4 = spread && !by_out ? s_div_up (in4, W) : in4;   /* the most chunks a block has */
    const bool narrow = spread && by_out == P_BY_OUT_NARROW;
    if (spread && by_out)   /* the most outputs a worker has */
        out = fuse || narrow ? 4u * s_div_up (s_div_up (out, 4u), W) : s_div_up (out, W);
    uint32_t glog = 0u;
    memset (L, 0, sizeof *L);
    L->spread = spread ? 1u : 0u;
    L->by_out = spread ? by_out : 0u;
    L->fuse = spread && by_out && fuse ? (uint32_t) P_FUSE_KEEP : 0u;
    L->bank = 2u;
    if (narrow) {   /* thread j: outputs 4 j .. 4 j + 3, slot k: their 4 weights of input k */
        const uint32_t c = out / 4u;
        L->passes = s_div_up (c, P_T);
        L->active = L->passes > 1u ? P_T : (uint32_t) s_align (c, 32u);
        L->last_active = (uint32_t) s_align (c - (L->passes - 1u) * P_T, 32u);
        L->slots = in;
        L->xs = in4;
        return;
    }
    if (out <= P_T) {
        /* as many threads per output as the block has room for, up to a warp, no more than chunks */
        while ((1u << (glog + 1u)) <= P_GROUP_MAX && ((uint64_t) out << (glog + 1u)) <= P_T && (1u << glog) < k4)
            ++glog;
        L->passes = 1u;
        L->active = (uint32_t) s_align ((uint64_t) out << glog, 32u);
        L->last_active = L->active;
    } else {   /* full passes of T outputs, then the rest on as many warps as it needs */
        L->passes = s_div_up (out, P_T);
        L->active = P_T;
        L->last_active = (uint32_t) s_align (out - (L->passes - 1u) * P_T, 32u);
    }
    L->glog = glog;
    L->slots = s_div_up (k4, 1u << glog);
    L->xs = L->slots << glog;
}

/* Slots of one block (every pass); bytes of them in shared memory, and in registers (per block),
 * at WB bytes a slot. Both are multiples of 16: active and last_active are multiples of 32. */
static uint64_t s_layer_slots (const sig_persistent_layer_plan_t *L)
{
    return ((uint64_t) (L->passes - 1u) * L->active + L->last_active) * L->slots;
}
static uint64_t s_layer_smem (const sig_persistent_layer_plan_t *L, uint32_t wb)
{
    return (s_layer_slots (L) - (L->bank == 0u ? (uint64_t) L->regs * L->active : 0u)) * wb;
}
static uint64_t s_layer_regs (const sig_persistent_layer_plan_t *L, uint32_t wb)
{
    return (L->bank == 0u ? (uint64_t) L->regs : 0u) * L->active * wb;
}

/* How split layer L (N) is divided over W workers: 0 by input columns; by outputs (P_BY_OUT) when
 * that holds fewer bytes a worker (narrow inputs: columns that do not divide evenly leave most
 * workers a padded chunk per output), or as the tuning says; P_BY_OUT_NARROW, 4 outputs a thread
 * and a slot an input, when that holds at least 10% fewer (an input of a few features padded to
 * whole chunks: 1 feature, 4 x the bytes) or the tuning says. */
static uint32_t s_by_out (const sig_fused_layer_t *N, uint32_t l, uint32_t W, const sig_persistent_tuning_t *tu)
{
    sig_persistent_layer_plan_t cols, outs, narrow;
    s_shape (N->in, N->out, W, true, 0u, false, &cols);
    s_shape (N->in, N->out, W, true, P_BY_OUT, false, &outs);
    s_shape (N->in, N->out, W, true, P_BY_OUT_NARROW, false, &narrow);
    const bool nar = tu->split_by == 4u || 10u * s_layer_slots (&narrow) <= 9u * s_layer_slots (&outs);
    const uint64_t by_out = nar ? s_layer_slots (&narrow) : s_layer_slots (&outs);
    const bool o = tu->split_by == 0u ? by_out < s_layer_slots (&cols)
                                      : tu->split_by == 2u || tu->split_by == 4u || (tu->split_by == 3u && l % 2u == 0u);
    return !o ? 0u : nar ? (uint32_t) P_BY_OUT_NARROW : (uint32_t) P_BY_OUT;
}

/* One candidate: every offset of a plan with this cluster size and placement. Returns whether it
 * fits STATIC_SMEM + the dynamic part in LIMIT; fills COST (clocks, a rough estimate). */
static bool s_build (const sig_fused_net_t *net, uint32_t max_rows, uint32_t rows, uint32_t dtype, uint32_t C,
                     const bool *placed, bool registers, const sig_persistent_tuning_t *tu, uint32_t limit,
                     uint32_t static_smem, sig_persistent_plan_t *p, uint64_t *cost)
{
    const uint32_t n = net->layer_count, W = C > 1u ? C - 1u : 1u, wb = p_slot_bytes (dtype);
    const uint32_t bank_slots = p_bank_slots (dtype);
    /* A layer divided by outputs keeps them in the workers for the next layer when that one is split
     * by columns (fused, below): a next layer the placement left to the leader is split for it (as
     * many hand-offs, and the leader then holds nothing as wide as the two layers' shared width). */
    const bool fuse = C > 1u && !(tu->sync & (SIG_SYNC_NO_FUSE | SIG_SYNC_WORKERS_POLL));
    bool spread[SIG_FUSED_MAX_LAYERS];
    for (uint32_t l = 0; l < n; ++l)
        spread[l] = placed[l];
    for (uint32_t l = 0; l + 1u < n && fuse; ++l)
        if (spread[l] && !spread[l + 1u] && s_by_out (&net->layers[l], l, W, tu) && !s_by_out (&net->layers[l + 1u], l + 1u, W, tu))
            spread[l + 1u] = true;
    memset (p, 0, sizeof *p);
    p->dtype = dtype;
    p->cluster_blocks = C;
    p->threads = P_T;
    p->layer_count = n;
    p->max_rows = max_rows;
    p->chunk_rows = rows;   /* every row buffer below holds this many */
    p->done_mode = tu->done_mode;
    p->ring = tu->ring ? tu->ring : SIG_PERSISTENT_RING;
    p->trace = tu->trace;
    p->read_leader = C > 1u && spread[0] && !tu->read_workers ? 1u : 0u;
    /* mbarrier hand-offs need the start to be the leader's (it reads and scatters) and a gather
     * between any two hand-offs to the workers (layer 0 split): docs/persistent-notes.md. Where the
     * tuning names no kind: st.async where the leader reads (below), else cluster barriers. */
    const uint32_t kind = (tu->sync & SIG_SYNC_KIND_MASK) ? (tu->sync & SIG_SYNC_KIND_MASK) : (uint32_t) SIG_SYNC_BARRIERS;
    p->sync = (tu->sync & SIG_SYNC_OLD_TAIL) ? 0u : (uint32_t) SIG_PLAN_SYNC_TAIL;
    if (p->read_leader && kind == SIG_SYNC_MBAR_WARPS)
        p->sync |= SIG_PLAN_SYNC_MBAR;
    if (p->read_leader && kind == SIG_SYNC_MBAR_BLOCKS)
        p->sync |= SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_MBAR_BLOCK;
    if (tu->sync & SIG_SYNC_TRACE_REPEAT)
        p->sync |= SIG_PLAN_SYNC_REPEAT;
    /* every block polls: no start barrier (the workers read their slices as soon as they see the
     * request), so layer 0 must be the only split layer and a request one chunk */
    bool wpoll = (tu->sync & SIG_SYNC_WORKERS_POLL) && C > 1u && spread[0] && rows == max_rows
                 && kind == SIG_SYNC_BARRIERS;
    for (uint32_t l = 1; l < n && wpoll; ++l)
        wpoll = !spread[l];
    if (wpoll) {
        p->sync |= SIG_PLAN_SYNC_WPOLL;
        p->read_leader = 0u;
    }
    p->smem_limit = limit;
    p->max_cluster = C;
    for (uint32_t l = 0; l < n; ++l) {
        const sig_fused_layer_t *N = &net->layers[l];
        s_shape (N->in, N->out, W, spread[l], spread[l] ? s_by_out (N, l, W, tu) : 0u, false, &p->layers[l]);
    }
    /* A layer split by outputs before one split by columns keeps its outputs in the workers (each
     * worker's outputs, in whole float4 chunks, are its columns of the next layer): two hand-offs
     * fewer, and the leader holds nothing of the layer (no partials, bias or act buffer as wide as
     * its outputs: a wide hidden layer between narrow ones fits). */
    bool fused = false;
    for (uint32_t l = 0; l + 1u < n && fuse; ++l)
        if (p->layers[l].by_out && p->layers[l + 1u].spread && !p->layers[l + 1u].by_out) {
            s_shape (net->layers[l].in, net->layers[l].out, W, true, p->layers[l].by_out, true, &p->layers[l]);
            fused = true;
        }
    /* A narrow layer kept in the workers before a layer of a few outputs is streamed into it: each
     * thread multiplies its 4 outputs by that layer's weights at once (slot o of pass p: output o's 4
     * weights on the thread's 4 inputs), so the hidden layer is never stored: a wide hidden layer
     * between a few inputs and outputs holds its weights and biases alone. */
    for (uint32_t l = 0; l + 1u < n && fused; ++l) {
        sig_persistent_layer_plan_t *L = &p->layers[l], *N = &p->layers[l + 1u];
        if (L->fuse && L->by_out == P_BY_OUT_NARROW && net->layers[l + 1u].out <= P_STREAM_OUT
            && !(tu->sync & SIG_SYNC_NO_STREAM)) {
            L->fuse = P_FUSE_STREAM;
            memset (N, 0, sizeof *N);
            N->spread = 1u;
            N->bank = 2u;
            N->passes = L->passes;
            N->active = L->active;
            N->last_active = L->last_active;
            N->slots = net->layers[l + 1u].out;
        }
    }
    /* The stores complete the hand-offs (st.async) unless the tuning names another kind (a kept layer
     * has no gather, a streamed one's partials are the next layer's gather: the same byte counts).
     * Measured on an H100 (specialised, p50; docs/perf.md): tick_mlp 0.9-1.1 us faster than cluster
     * barriers, 37-8000-5 (kept) 0.7-0.8 and 5-20000-2 (streamed) 0.8 faster than mbarrier arrivals
     * a warp, which had been the default with a fused pair (0.2-0.6 faster than cluster barriers). */
    if ((kind == SIG_SYNC_ASYNC || !(tu->sync & SIG_SYNC_KIND_MASK)) && p->read_leader && !wpoll)
        p->sync |= SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC;
    /* Registers: per role, the layer that would read most from shared memory (its first pass's
     * first slots). */
    for (uint32_t role = 0; role < 2u && registers; ++role) {
        uint32_t best = n;
        uint64_t best_bytes = 0;
        for (uint32_t l = 0; l < n; ++l) {
            const sig_persistent_layer_plan_t *L = &p->layers[l];
            const uint64_t bytes = s_layer_slots (L);
            if (L->spread == role && L->by_out != P_BY_OUT_NARROW && bytes > best_bytes) {   /* (no bank in that loop) */
                best = l;
                best_bytes = bytes;
            }
        }
        if (best < n) {
            /* the bank holds the first slots in pass-major order: whole passes of `active` threads
             * (every pass but a short last one), as many as it has room for */
            sig_persistent_layer_plan_t *B = &p->layers[best];
            const uint32_t full = B->last_active == B->active ? B->passes : B->passes - 1u;
            const uint64_t slots = (uint64_t) B->slots * full;
            B->bank = 0u;
            B->regs = slots < bank_slots ? (uint32_t) slots : bank_slots;
        }
    }
    /* Shared memory (the same layout in every block): the weight area (the leader's local layers
     * and the workers' split layers both start at 0: a block holds one role's), the leader's
     * biases, the workers' input slice, the leader's two act buffers and partials. Image: every
     * layer's slots (worker after worker for a split layer), then the biases. */
    uint64_t w4[2] = { 0, 0 }, regs[2] = { 0, 0 }, img4 = 0, bias = 0, slice4 = 0, act4[2] = { 0, 0 }, mpad = 0;
    uint64_t slice24 = 0;   /* the second slice: the input of a layer after a fused one */
    uint32_t barriers = C > 1u && !wpoll ? 1u : 0u;   /* the start */
    for (uint32_t l = 0; l < n; ++l) {
        sig_persistent_layer_plan_t *L = &p->layers[l];
        const uint32_t role = L->spread, out4 = s_div_up (net->layers[l].out, 4u);
        const bool after_fuse = l > 0u && p->layers[l - 1u].fuse;
        L->w_smem = (uint32_t) w4[role];
        w4[role] += s_layer_smem (L, wb) / 16u;
        regs[role] += s_layer_regs (L, wb);
        L->per_block = s_layer_slots (L) * wb / 16u;
        L->image = img4;
        img4 += (L->spread ? W : 1u) * L->per_block;
        if (!L->fuse) {   /* the leader's biases (a fused layer's: below) */
            L->bias = (uint32_t) bias;
            bias += 4u * (uint64_t) out4;
        }
        /* The leader's act buffer l % 2 holds layer l's input: a local layer's (row stride xs),
         * or a split layer's before it is scattered (its in4 chunks, compact); a split layer 0
         * reads the host instead, a layer after a fused one the workers' own outputs. */
        uint64_t *a = &act4[l & 1u];
        const uint64_t need = L->spread ? (l > 0u && !after_fuse ? s_div_up (net->layers[l].in, 4u) : 0u) : L->xs;
        *a = *a > need ? *a : need;
        if (L->spread) {
            uint64_t *s4 = after_fuse ? &slice24 : &slice4;
            *s4 = *s4 > L->xs ? *s4 : L->xs;
            if (after_fuse && p->layers[l - 1u].fuse == P_FUSE_STREAM)   /* the block's sums of the products */
                slice24 = slice24 > P_STREAM_RED4 ? slice24 : P_STREAM_RED4;
            /* partials: W areas of rows x 4 out4 (by outputs: one, each output written once) */
            const uint64_t pf = L->fuse ? 0u : (L->by_out ? 1u : W) * 4u * (uint64_t) out4;
            mpad = mpad > pf ? mpad : pf;
            /* the scatter before it (after layer 0, not after a fused layer), the gather after it
             * (not for a fused layer) */
            barriers += (l > 0u && !after_fuse ? 1u : 0u) + (L->fuse ? 0u : 1u);
        }
    }
    /* A fused layer's biases: in the image after the leader's; each worker holds its outputs' */
    uint64_t all_bias = bias, wbias = 0;
    for (uint32_t l = 0; l < n; ++l) {
        sig_persistent_layer_plan_t *L = &p->layers[l];
        if (!L->fuse)
            continue;
        const uint32_t out4 = s_div_up (net->layers[l].out, 4u);
        L->bias = (uint32_t) all_bias;
        all_bias += 4u * (uint64_t) out4;
        L->wbias = (uint32_t) (4u * w4[1] + wbias);
        wbias += 4u * (uint64_t) s_div_up (out4, W);
    }
    const uint64_t bias_off = 4u * w4[0];
    const uint64_t act0 = bias_off + bias;
    const uint64_t act1 = act0 + 4u * act4[0] * rows;
    const uint64_t part_off = act1 + 4u * act4[1] * rows;
    const uint64_t part_stride = (uint64_t) rows * mpad;   /* the whole area: every split layer's fits */
    /* workers polling: a worker may write request n + 1's partials while the leader still reads
     * request n's: two areas, by the request's parity */
    const uint64_t lead_end = part_off + (C > 1u ? (wpoll ? 2u : 1u) * part_stride : 0u);
    const uint64_t slice_off = 4u * w4[1] + wbias;
    const uint64_t slice2_off = slice_off + 4u * slice4 * rows;
    const uint64_t work_end = C > 1u ? slice2_off + 4u * slice24 * rows : 0u;
    const uint64_t end = lead_end > work_end ? lead_end : work_end;
    const uint64_t dyn = 4u * end;
    const bool fits = dyn + static_smem <= limit && end < (1u << 28);
    p->smem_bytes = fits ? (uint32_t) dyn : UINT32_MAX;
    p->bias_off = (uint32_t) bias_off;
    p->act_off0 = (uint32_t) act0;
    p->act_off1 = (uint32_t) act1;
    p->part_off = (uint32_t) part_off;
    p->lead_end = (uint32_t) lead_end;
    p->part_stride = (uint32_t) part_stride;
    p->mpad = (uint32_t) mpad;
    p->slice_off = (uint32_t) slice_off;
    p->slice2_off = (uint32_t) slice2_off;
    p->work_end = (uint32_t) work_end;
    p->bias_image = 4u * img4;
    p->cluster_barriers = barriers;
    p->image_bytes = s_align (sizeof (p_header_t), 16u) + 16u * img4 + 4u * all_bias;
    uint64_t weights = 0;
    for (uint32_t l = 0; l < n; ++l)
        weights += 4u * ((uint64_t) net->layers[l].in + 1u) * net->layers[l].out;
    p->weight_bytes = weights;
    /* On chip: the leader's weights and buffers, each worker's weights and slice, the registers. */
    const uint64_t leader = 4u * lead_end, worker = 4u * (work_end > slice_off ? work_end : slice_off);
    p->need_bytes = leader + regs[0] + (C > 1u ? W * (worker + regs[1]) : 0u) + (uint64_t) C * static_smem;
    p->cluster_bytes = (uint64_t) C * limit + regs[0] + (C > 1u ? W * regs[1] : 0u);
    /* Per request: the hand-offs, and the longer of the two roles' weight reads (shared memory at
     * 128 B per clock, registers at 512 B of weights per clock). */
    const uint64_t lead_cost = 16u * w4[0] / 128u + regs[0] / 512u, work_cost = 16u * w4[1] / 128u + regs[1] / 512u;
    *cost = (uint64_t) barriers * P_BARRIER_CYCLES + lead_cost + (C > 1u ? work_cost : 0u);
    return fits;
}

/* Tries cluster size C: the placement grows from "big layers split" until the leader fits; each
 * placement first with buffers for every row a launch may have, then for fewer (a request of more
 * rows runs in chunks: one more start barrier per chunk, paid by big batches only, where splitting
 * another layer would cost every request two barriers). */
static bool s_try (const sig_fused_net_t *net, uint32_t max_rows, uint32_t dtype, uint32_t C,
                   const sig_persistent_tuning_t *tu, uint32_t limit, uint32_t static_smem, sig_persistent_plan_t *p,
                   uint64_t *cost)
{
    const uint32_t n = net->layer_count;
    bool spread[SIG_FUSED_MAX_LAYERS];
    uint32_t count = 0;
    for (uint32_t l = 0; l < n; ++l) {
        const uint64_t bytes = p_slot_bytes (dtype) / 4u * (uint64_t) net->layers[l].in * net->layers[l].out;
        spread[l] = C > 1u && (tu->spread_all || bytes > P_LOCAL_MAX_BYTES);
        count += spread[l] ? 1u : 0u;
    }
    for (;;) {
        if (C > 1u && count == 0u) {   /* a cluster with nothing split would only add barriers */
            uint32_t big = 0;
            for (uint32_t l = 1; l < n; ++l)
                if ((uint64_t) net->layers[l].in * net->layers[l].out > (uint64_t) net->layers[big].in * net->layers[big].out)
                    big = l;
            spread[big] = true;
            ++count;
        }
        /* (The register path is the faster one on paper, but measured slower on tick_mlp: 10.52 us
         * p50 without, 11.03 with, H100, same run: docs/persistent-notes.md.) */
        /* Registers only when shared memory alone cannot hold it at any chunk size (tuning: never,
         * or always): they cost every request (0.5 us on tick_mlp), a chunk only a large batch. */
        for (int regs = 0; regs < 2; ++regs) {
            if ((regs == 0 && tu->no_registers == 2u) || (regs == 1 && tu->no_registers == 1u))
                continue;
            for (uint32_t rows = max_rows;; rows = rows > 16u ? rows / 2u : rows - 1u) {
                if (s_build (net, max_rows, rows, dtype, C, spread, regs == 1, tu, limit, static_smem, p, cost))
                    return true;
                if (rows == 1u)
                    break;
            }
        }
        /* the message reports the smallest need: one row at a time, registers unless ruled out */
        (void) s_build (net, max_rows, 1u, dtype, C, spread, tu->no_registers != 1u, tu, limit, static_smem, p, cost);
        if (C == 1u || count == n)
            return false;
        uint32_t big = n;   /* split the largest local layer and try again */
        for (uint32_t l = 0; l < n; ++l)
            if (!spread[l] && (big == n || (uint64_t) net->layers[l].in * net->layers[l].out
                                               > (uint64_t) net->layers[big].in * net->layers[big].out))
                big = l;
        spread[big] = true;
        ++count;
    }
}

/* The plan for a device whose per-block opt-in shared memory is OPTIN bytes and the kernel's static
 * shared memory STATIC_SMEM (sig_persistent_plan without the device: its queries and the placement). */
static int s_plan_for (const sig_fused_net_t *net, uint32_t max_rows, int optin, uint32_t static_smem, uint32_t dtype,
                       const sig_persistent_tuning_t *tuning, sig_persistent_plan_t *plan);

extern "C" int sig_persistent_plan (const sig_fused_net_t *net, uint32_t max_rows, int device, uint32_t dtype,
                                    const sig_persistent_tuning_t *tuning, sig_persistent_plan_t *plan)
{
    if (!net || !plan)
        return (int) cudaErrorInvalidValue;
    int optin = 0;
    cudaError_t e = cudaDeviceGetAttribute (&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e != cudaSuccess)
        return (int) e;
    const uint32_t static_smem = p_static_smem ();
    const int r = s_plan_for (net, max_rows, optin, static_smem, dtype, tuning, plan);
    if (r != 0)
        return r;
    /* The kernel's shared-memory limit, and whether the cluster can be placed (mlp_persistent.cu). */
    return p_placeable (plan, optin, static_smem);
}

extern "C" int sig_persistent_plan_offline (const sig_fused_net_t *net, uint32_t max_rows, int optin,
                                            uint32_t static_smem, uint32_t dtype, const sig_persistent_tuning_t *tuning,
                                            sig_persistent_plan_t *plan)
{
    return s_plan_for (net, max_rows, optin, static_smem, dtype, tuning, plan);
}

static int s_plan_for (const sig_fused_net_t *net, uint32_t max_rows, int optin, uint32_t static_smem, uint32_t dtype,
                       const sig_persistent_tuning_t *tuning, sig_persistent_plan_t *plan)
{
    if (!net || !plan || max_rows < 1u || max_rows > 4096u || !s_net_ok (net) || dtype > SIG_DTYPE_BF16)
        return (int) cudaErrorInvalidValue;
    const sig_persistent_tuning_t none = {};
    const sig_persistent_tuning_t *tu = tuning ? tuning : &none;
    if (tu->cluster_blocks != 0u && tu->cluster_blocks != 1u && tu->cluster_blocks != 2u && tu->cluster_blocks != 4u
        && tu->cluster_blocks != 8u)
        return (int) cudaErrorInvalidValue;
    if (tu->done_mode != SIG_DONE_SEQUENCE && tu->done_mode != SIG_DONE_OUTPUTS || tu->ring > SIG_PERSISTENT_RING)
        return (int) cudaErrorInvalidValue;
    const uint32_t sizes[] = { 1u, 2u, 4u, 8u };
    bool found = false;
    uint64_t best_cost = 0;
    sig_persistent_plan_t cand;
    for (uint32_t i = 0; i < 4u; ++i) {
        const uint32_t C = sizes[i];
        if (tu->cluster_blocks != 0u && C != tu->cluster_blocks)
            continue;
        uint64_t cost = 0;
        const bool fits = s_try (net, max_rows, dtype, C, tu, (uint32_t) optin, static_smem, &cand, &cost);
        if (fits && (!found || cost < best_cost)) {
            *plan = cand;
            best_cost = cost;
            found = true;
        }
        if (!found)   /* the largest tried is what the message reports */
            *plan = cand;
    }
    plan->budget_bytes = (uint64_t) SIG_PERSISTENT_MAX_BLOCKS * ((uint64_t) optin - static_smem);
    return found ? 0 : (int) cudaErrorMemoryAllocation;
}

/* Weight E of the slot at C, V rounded to nearest even in DTYPE (f16, bf16: 2 bytes each, the
 * kernel widens each to fp32 exactly). */
static void s_put_weight (char *c, uint32_t e, uint32_t dtype, float v)
{
    if (dtype == SIG_DTYPE_F32) {
        memcpy (c + 4u * e, &v, 4u);
        return;
    }
    uint16_t bits;
    if (dtype == SIG_DTYPE_F16) {
        const __half_raw r = __float2half_rn (v);
        bits = r.x;
    } else {
        const __nv_bfloat16_raw r = __float2bfloat16_rn (v);
        bits = r.x;
    }
    memcpy (c + 2u * e, &bits, 2u);
}

extern "C" int sig_persistent_dtype_check (const sig_fused_net_t *net, uint32_t dtype, uint32_t *layer, uint64_t *index)
{
    if (!net || dtype == SIG_DTYPE_F32)
        return 0;
    for (uint32_t l = 0; l < net->layer_count; ++l) {
        const sig_fused_layer_t *N = &net->layers[l];
        for (uint64_t i = 0; i < (uint64_t) N->in * N->out; ++i) {
            const float v = N->w[i];
            const bool over = dtype == SIG_DTYPE_F16 ? !(fabsf (v) <= 65504.0f)
                                                     : isfinite (v) && !isfinite (__bfloat162float (__float2bfloat16_rn (v)));
            if (over) {
                if (layer)
                    *layer = l;
                if (index)
                    *index = i;
                return -1;
            }
        }
    }
    return 0;
}

extern "C" int sig_persistent_pack (const sig_fused_net_t *net, const sig_persistent_plan_t *plan,
                                    const sig_persistent_layout_t *layout, void *image)
{
    if (!net || !plan || !layout || !image || plan->layer_count != net->layer_count || plan->smem_bytes == UINT32_MAX)
        return (int) cudaErrorInvalidValue;
    const uint32_t C = plan->cluster_blocks, W = C > 1u ? C - 1u : 1u, n = plan->layer_count;
    const uint32_t dtype = plan->dtype, wb = p_slot_bytes (dtype);
    memset (image, 0, plan->image_bytes);
    p_header_t *h = static_cast<p_header_t *> (image);
    h->magic = P_MAGIC;
    h->layers = n;
    h->blocks = C;
    h->max_rows = plan->max_rows;
    h->in = net->layers[0].in;
    h->out = net->layers[n - 1u].out;
    h->done_mode = plan->done_mode;
    h->dyn_bytes = plan->smem_bytes;
    h->bias_off = plan->bias_off;
    h->act_off0 = plan->act_off0;
    h->act_off1 = plan->act_off1;
    h->part_off = plan->part_off;
    h->lead_end = plan->lead_end;
    h->part_stride = plan->part_stride;
    h->mpad = plan->mpad;
    h->slice_off = plan->slice_off;
    h->slice2_off = plan->slice2_off;
    h->work_end = plan->work_end;
    h->read_leader = plan->read_leader;
    h->sync = plan->sync;
    h->dtype = dtype;
    h->chunk_rows = plan->chunk_rows;
    h->payload = s_align (sizeof (p_header_t), 16u);
    h->bias_image = plan->bias_image;
    h->box = *layout;
    float *payload = reinterpret_cast<float *> (static_cast<char *> (image) + h->payload);
    for (uint32_t l = 0; l < n; ++l) {
        const sig_persistent_layer_plan_t *L = &plan->layers[l];
        const sig_fused_layer_t *N = &net->layers[l];
        h->layer[l] = *L;
        h->in_[l] = N->in;
        h->out_[l] = N->out;
        h->act[l] = N->act;
        const uint32_t in4 = s_div_up (N->in, 4u), G = 1u << L->glog;
        for (uint32_t blk = 0; blk < (L->spread ? W : 1u); ++blk) {
            const bool cols = L->spread && !L->by_out;
            const uint32_t kc0 = cols ? in4 * blk / W : 0u, kc1 = cols ? in4 * (blk + 1u) / W : in4;
            /* by outputs: this worker's are m0 .. m1 - 1 (its local output m is m0 + m) */
            uint32_t m0 = 0u, m1 = N->out;
            p_out_range (*L, N->out, blk, W, &m0, &m1);
            char *dst = reinterpret_cast<char *> (payload) + 16u * (L->image + (uint64_t) blk * L->per_block);
            /* Narrow (4 outputs a thread): pass p's slot k, thread t holds the weights of outputs
             * j = 4 (p T + t) .. + 3 of this worker's m0 .. m1 - 1 on input k. Streamed into (the
             * layer before is narrow): slot k holds output k's weights on that layer's outputs j of
             * this worker (j0 .. j1 - 1, its columns). Both: weight w[j][k] or w[k][j] of four j. */
            const bool streamed = l > 0u && plan->layers[l - 1u].fuse == P_FUSE_STREAM;
            uint32_t j0 = m0, j1 = m1;
            if (streamed)
                p_out_range (plan->layers[l - 1u], net->layers[l - 1u].out, blk, W, &j0, &j1);
            for (uint32_t p = 0; p < L->passes && (streamed || L->by_out == P_BY_OUT_NARROW); ++p) {
                const uint32_t A = p + 1u == L->passes ? L->last_active : L->active;
                for (uint32_t k = 0; k < L->slots; ++k)
                    for (uint32_t t = 0; t < A; ++t) {
                        char *c = dst + (size_t) wb * ((uint64_t) p * L->slots * L->active + (uint64_t) k * A + t);
                        for (uint32_t e = 0; e < 4u; ++e) {
                            const uint32_t j = j0 + 4u * (p * P_T + t) + e;
                            if (j < j1)
                                s_put_weight (c, e, dtype, N->w[streamed ? (size_t) k * N->in + j : (size_t) j * N->in + k]);
                        }
                    }
            }
            for (uint32_t p = 0; p < L->passes && L->by_out != P_BY_OUT_NARROW && !streamed; ++p) {
                const uint32_t A = p + 1u == L->passes ? L->last_active : L->active;
                for (uint32_t s = 0; s < L->slots; ++s)
                    for (uint32_t t = 0; t < A; ++t) {
                        const uint32_t m = m0 + p * (P_T >> L->glog) + (t >> L->glog);
                        const uint32_t kc = kc0 + (t & (G - 1u)) + s * G;
                        char *c = dst + (size_t) wb * ((uint64_t) p * L->slots * L->active + (uint64_t) s * A + t);
                        if (m >= m1 || kc >= kc1)
                            continue;   /* zeros */
                        for (uint32_t e = 0; e < 4u; ++e)
                            if (4u * kc + e < N->in)
                                s_put_weight (c, e, dtype, N->w[(size_t) m * N->in + 4u * kc + e]);
                    }
            }
        }
        memcpy (payload + plan->bias_image + L->bias, N->b, N->out * sizeof (float));
    }
    return (int) cudaSuccess;
}
