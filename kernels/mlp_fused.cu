/* fused: the whole MLP in one launch. One thread-block cluster is the whole grid: FUSED_CLUSTER_BLOCKS
 * = 8 blocks (the portable cluster size) of FUSED_THREADS = 1024 threads, 256 warps, numbered across
 * blocks first (warp w of block b is cluster warp w * 8 + b), so even a 64-output layer keeps all
 * 8 SMs busy. The network description is read from device memory at every launch, so a captured
 * graph freezes only the pointer to it. Two paths, chosen per launch, the same in every thread of
 * the cluster (so every barrier below is reached by all of them or by none):
 *
 * REGISTER PATH (descriptor field fast = 1, set by sig_fused_net_validate, and the kernel's own
 * check agrees: every layer has out <= 256, the slots below sum to <= FAST_SLOTS = 8 (so at most 8
 * layers), and rows x every layer's in <= FAST_BUF_FLOATS = 4096). The point: one memory round trip
 * for all the weights instead of one per layer, and no global memory between layers.
 *   - Warp 0 of each block checks the descriptor (lane l checks layer l, with the host's code) and
 *     writes a layer table and a slot table into shared memory; the other warps wait at a
 *     __syncthreads instead of repeating the same checks 32 times over (with 32 warps to an SM,
 *     every instruction all warps run costs 8 issue cycles of each scheduler).
 *   - Output m of layer l belongs to cluster warp m (one output per warp and layer). A lane holds
 *     its part of that weight row in C(l) = ceil(in / 128) slots of 4 floats: in slot k, floats
 *     128k + 4 lane .. + 3 (one 16-byte load) when in % 4 == 0 and w is 16-byte aligned, else
 *     floats 128k + lane + 32c, c = 0..3 (four scalar loads). Layer l's slots are wr[base(l) ..
 *     base(l) + C(l)) of one register array wr[FAST_SLOTS] (32 registers: a thread of a
 *     1024-thread block has 64), indexed only by constants: the loads by an unrolled loop over the
 *     slots, the dot products through one instance per possible base (no local memory). The bias
 *     of layer l sits in lane l of one more register and joins the shuffle sum there. The loads
 *     of every layer, and of layer 0's input x (into this block's shared buffer 0), are issued by
 *     straight-line code in which no instruction waits for a weight load (checked in the SASS:
 *     no loop around the loads, no call): one round trip for all of them.
 *   - For rows > 1 the weights stay in registers for every row. A layer with out < 256 leaves
 *     warps idle: warp g then takes output g mod out for rows g / out, g / out + G, ... with G =
 *     min(rows, 256 / out) (those warps load the same weights), so the rows do not queue in one warp.
 *   - Activations go through distributed shared memory: layer l reads its input from this block's
 *     buffer l & 1 and a warp that has an output (shuffle sum, bias, activation) stores it with
 *     lanes 0..7 into buffer (l + 1) & 1 of each of the 8 blocks (lane = block rank), then every
 *     thread of the cluster does cluster.sync() (barrier.cluster.arrive.release +
 *     barrier.cluster.wait.acquire). The last layer writes y with one plain store per output (y may
 *     be mapped host memory).
 *   - Why one cluster barrier per layer is enough. Call S(l) the barrier after layer l.
 *     Read after write: layer l's stores into buffer (l + 1) & 1 precede their thread's arrive at
 *     S(l) (release); layer l + 1 reads it after its thread's wait at S(l) (acquire), which returns
 *     only when every thread of the cluster has arrived.
 *     Write after read: the stores of layer l + 1 go to buffer (l + 2) & 1 = l & 1, the buffer layer
 *     l reads. Any block's layer-l reads come before that block's arrive at S(l); any block's
 *     layer-(l + 1) stores come after its own wait at S(l), which cannot return before every block
 *     has arrived. So no store of layer l + 1 can overtake a read of layer l, in any block; layer
 *     l + 2 stores into the other buffer, after S(l + 1), and so on. Buffer 0 of layer 0 is filled
 *     by the block itself before a __syncthreads and is first overwritten by layer 1, after S(0).
 *     Start: a block may store into another block's shared memory only once that block is running;
 *     every thread arrives (relaxed: no fence, so it does not wait for its loads) at a start
 *     barrier once its loads are issued and waits on it just before layer 0, after staging x, so
 *     the wait costs next to nothing. End: after the last S no block touches another's shared
 *     memory (the last layer writes y), so a block may exit as soon as it is done. A one-layer net
 *     stores nothing remote and has no cluster barrier at all.
 *
 * GENERAL PATH (everything else: wide layers, many layers, big batches). The blocks split each
 * layer's rows x out outputs (one warp per output, the dense_warp code): output o = r * out + m goes
 * to cluster warp o mod 256 (a warp takes o, o + 256, ...). Layer 0 reads x, layer l > 0 reads the
 * scratch half (l - 1) & 1 and layer l writes the half l & 1 (each half rows x widest floats), the
 * last layer writes y. When the layer's input (rows x in floats) fits FUSED_STAGE_FLOATS, each block
 * first copies it into its shared memory (read once per block instead of once per warp); otherwise
 * the warps read it from global memory at L2 (ld.global.cg), never through the read-only path.
 *   Visibility between layers: cluster.sync() is barrier.cluster.arrive (release semantics by
 * default) + barrier.cluster.wait (acquire semantics by default), at cluster scope, executed by
 * every thread of every block. So every store of layer l (global scratch) happens-before every
 * load of layer l + 1 in any block of the cluster, and every load of layer l (of the half that
 * layer l + 1 overwrites) happens-before those stores. The __threadfence() before it (a gpu-scope
 * fence, stronger than needed) is belt and braces; build with -DSIG_FUSED_EXTRA_FENCE=0 to time
 * without it. Scratch is read with ld.global.cg (L2), so no stale L1 line of an earlier layer can
 * be read even in principle.
 *
 * The kernel checks the descriptor (1..SIG_FUSED_MAX_LAYERS layers, every in/out in 1..widest,
 * each layer's in = the previous out, rows x widest < 2^32, non-NULL pointers) and, when it is
 * wrong, returns without writing anything. Warp 0 of every block decides (bad, register path or
 * general path) from the same descriptor and rows, so every block takes the same decision before
 * any cluster barrier (no block can wait forever), and every thread of a block follows its warp 0
 * (through shared memory, after a __syncthreads). The host-side sig_fused_net_validate() performs
 * the same checks, with the same code, with a message-worthy status, and fills fast. */
#include "cuda_check.h"
#include "sig_fused.h"
#include "sig_device.cuh"

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#ifndef SIG_FUSED_EXTRA_FENCE
#define SIG_FUSED_EXTRA_FENCE 1
#endif

#define FUSED_CLUSTER_BLOCKS 8u
#define FUSED_THREADS 1024u
#define FUSED_WARPS (FUSED_CLUSTER_BLOCKS * FUSED_THREADS / 32u)   /* 256 warps in the cluster */
#define FUSED_STAGE_FLOATS 8192u   /* 32 KB: any batch-1 layer input of the contract (K <= 8192) */

/* Register path: weight slots (one float4 register each) per lane, all layers together, and the
 * two activation buffers, which share the general path's staging array. With 1024 threads a thread
 * has at most 64 registers: 8 slots are 32 of them. The demo net (512 -> 256 -> 64 -> 1) takes
 * 4 + 2 + 1 = 7 slots. */
#define FAST_SLOTS 8u
#define FAST_BUF_FLOATS (FUSED_STAGE_FLOATS / 2u)   /* 4096 floats (16 KB) per buffer, two buffers */
#define FAST_CHUNK 128u   /* floats of a weight row per slot: 32 lanes x 4 */

static_assert (FAST_SLOTS <= 32u, "the bias of layer l in lane l (layers <= slots)");
static_assert (FUSED_WARPS == 256u, "the file comment and the fast shape assume 256 warps");
static_assert (FAST_BUF_FLOATS % 4u == 0u, "buffer 1 stays 16-byte aligned");

/* The checks of the file comment, in two parts so that the device can check the layers in
 * parallel (one lane each) with the very code the host runs in a loop. */
__host__ __device__ static bool s_net_head_ok (const sig_fused_net_t *n, uint32_t rows)
{
    return n->layer_count >= 1u && n->layer_count <= SIG_FUSED_MAX_LAYERS && n->widest != 0u &&
           (uint64_t) rows * n->widest <= UINT32_MAX;
}
__host__ __device__ static bool s_layer_ok (const sig_fused_net_t *n, uint32_t l)   /* after s_net_head_ok */
{
    const sig_fused_layer_t *L = &n->layers[l];
    if (!L->w || !L->b || L->in == 0u || L->out == 0u || L->in > n->widest || L->out > n->widest)
        return false;
    return l == 0u || L->in == n->layers[l - 1u].out;
}
__host__ static bool s_net_ok (const sig_fused_net_t *n, uint32_t rows)
{
    if (!s_net_head_ok (n, rows))
        return false;
    for (uint32_t l = 0; l < n->layer_count; ++l)
        if (!s_layer_ok (n, l))
            return false;
    return true;
}

/* Register path: the weight slots layer L needs (ceil(in / 128)), or FAST_SLOTS + 1 when it cannot
 * take the register path at all: more than 256 outputs (one output per warp), more than FAST_SLOTS
 * slots, or (unless ROWS is 0: validate, rows not known yet) rows x in > one buffer. The net takes
 * the register path when the sum over its layers is <= FAST_SLOTS. After s_layer_ok. */
__host__ __device__ static uint32_t s_fast_slots (const sig_fused_net_t *n, uint32_t l, uint32_t rows)
{
    const sig_fused_layer_t *L = &n->layers[l];
    const uint32_t c = L->in / FAST_CHUNK + (L->in % FAST_CHUNK != 0u ? 1u : 0u);   /* ceil, no wrap */
    if (L->out > FUSED_WARPS || c > FAST_SLOTS || (uint64_t) rows * L->in > FAST_BUF_FLOATS)
        return FAST_SLOTS + 1u;
    return c;
}
__host__ static bool s_fast_ok (const sig_fused_net_t *n)   /* host: validate, after s_net_ok */
{
    uint32_t slots = 0;   /* <= 16 x 9: no wrap */
    for (uint32_t l = 0; l < n->layer_count; ++l)
        slots += s_fast_slots (n, l, 0u);
    return slots <= FAST_SLOTS;
}

/* Every output value the kernel produces (y or the next layer's input) is written through here:
 * one plain store. (The CPU emulation counts the calls, to prove each y is written once.) */
__device__ __forceinline__ void s_put_output (float *p, float v)
{
    *p = v;
}

/* All threads of the block copy N floats from global SRC (at L2: SRC may be this launch's
 * scratch) into shared DST (16-byte aligned). */
__device__ __forceinline__ void s_stage (float *dst, const float *src, uint32_t n)
{
    if (sig_aligned16 (src) && n % 4u == 0u) {
        float4 *d4 = reinterpret_cast<float4 *> (dst);
        const float4 *s4 = reinterpret_cast<const float4 *> (src);
        for (uint32_t i = threadIdx.x; i < n / 4u; i += blockDim.x)
            d4[i] = __ldcg (s4 + i);
    } else {
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
            dst[i] = __ldcg (src + i);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Register path */

enum { MODE_BAD = 0, MODE_GENERAL = 1, MODE_FAST = 2 };

/* Per layer (built once per block by warp 0, read by every warp). */
struct s_fast_layer_t {
    const float *b;
    uint32_t in, out;
    uint32_t c;        /* slots: ceil(in / 128) */
    uint32_t base;     /* first slot */
    uint32_t groups;   /* min(rows, 256 / out): warp groups that split the rows */
    int act;
    uint32_t vec;      /* 16-byte weight loads: in % 4 == 0 and w 16-byte aligned */
    uint32_t pad[3];
};
/* Per slot (the same). Slot base(l) + k holds floats 128k .. 128k + 127 of the weight row. */
struct s_fast_slot_t {
    const float *w;   /* layer l's w + 128 k */
    uint32_t in;
    uint32_t out;     /* 0: the slot is unused */
    uint32_t rem;     /* in - 128 k: floats of the row from this chunk on */
    uint32_t groups;  /* layer l's */
    uint32_t vec;
    uint32_t pad;
};
static_assert (sizeof (s_fast_layer_t) == 48 && sizeof (s_fast_slot_t) == 32, "16-byte loads");

/* floor(a / d) for a <= 256, 1 <= d <= 256, without an integer-division subroutine: a call waits
 * for every load in flight (step 1 of s_fast). __fdividef is off by 2 ulp at most, far less than
 * 1/d: the truncated quotient is within 1 of the exact one and the fixups make it exact. */
__device__ __forceinline__ uint32_t s_div_small (uint32_t a, uint32_t d)
{
    uint32_t q = __float2uint_rz (__fdividef ((float) a, (float) d));
    if ((q + 1u) * d <= a)
        ++q;
    if (q * d > a)
        --q;
    return q;
}

/* Which output and rows cluster warp G has in a layer of OUT <= 256 outputs split GROUPS ways:
 * output m = g mod out for rows q, q + groups, ... where q = g / out; nothing when q >= groups. */
__device__ __forceinline__ uint32_t s_fast_group (uint32_t g, uint32_t out, uint32_t groups, uint32_t &m)
{
    if (groups == 1u) {   /* rows == 1 or out > 128: no division */
        m = g;
        return g < out ? 0u : 1u;
    }
    const uint32_t q = s_div_small (g, out);
    m = g - q * out;
    return q;
}

/* Warp 0 of every block: checks the descriptor (lane l checks layer l) and, for the register path,
 * fills the layer and slot tables. Returns the mode, the same in every lane (and in every block:
 * the same descriptor, the same rows). */
__device__ static uint32_t s_prepare (const sig_fused_net_t *n, uint32_t rows, s_fast_layer_t *tab, s_fast_slot_t *slots,
                                      uint32_t lane)
{
    if (!s_net_head_ok (n, rows))
        return MODE_BAD;
    const uint32_t layers = n->layer_count;   /* 1..16 <= 32 lanes */
    const bool mine = lane < layers;
    const uint32_t bad = mine && !s_layer_ok (n, lane) ? 1u : 0u;
    const uint32_t c = mine && !bad ? s_fast_slots (n, lane, rows) : 0u;   /* <= 9 */
    uint32_t bad_all = bad, c_incl = c;   /* warp OR of bad; inclusive prefix sum of c */
#pragma unroll
    for (uint32_t off = 1u; off < 32u; off <<= 1) {
        bad_all |= __shfl_xor_sync (SIG_FULL_MASK, bad_all, off);
        const uint32_t t = __shfl_sync (SIG_FULL_MASK, c_incl, lane >= off ? lane - off : lane);
        if (lane >= off)
            c_incl += t;
    }
    if (bad_all != 0u)
        return MODE_BAD;
    const uint32_t total = __shfl_sync (SIG_FULL_MASK, c_incl, 31u);
    if (n->fast == 0u || total > FAST_SLOTS)
        return MODE_GENERAL;
    /* fast: layers <= total <= FAST_SLOTS (every layer has >= 1 slot) */
    if (mine) {
        const sig_fused_layer_t L = n->layers[lane];
        s_fast_layer_t T;
        T.b = L.b;
        T.in = L.in;
        T.out = L.out;
        T.c = c;
        T.base = c_incl - c;
        T.groups = min (rows, FUSED_WARPS / L.out);   /* >= 1: out <= 256 */
        T.act = L.act;
        T.vec = L.in % 4u == 0u && sig_aligned16 (L.w) ? 1u : 0u;
        T.pad[0] = T.pad[1] = T.pad[2] = 0u;
        tab[lane] = T;
        for (uint32_t k = 0; k < c; ++k) {
            s_fast_slot_t S;
            S.w = L.w + FAST_CHUNK * k;
            S.in = L.in;
            S.out = L.out;
            S.rem = L.in - FAST_CHUNK * k;
            S.groups = T.groups;
            S.vec = T.vec;
            S.pad = 0u;
            slots[T.base + k] = S;
        }
    }
    if (lane >= total && lane < FAST_SLOTS) {   /* the slots no layer has (disjoint from the above) */
        s_fast_slot_t S = {};
        S.w = nullptr;
        S.out = 0u;   /* no warp has an output there */
        S.groups = 1u;
        slots[lane] = S;
    }
    return MODE_FAST;
}

/* This lane's part of one output's dot product over slots wr[B .. B + c), the input row XR in
 * shared memory (IN floats), added to ACC. B is a constant: the register indices are, too. */
template <uint32_t B, bool VEC>
__device__ __forceinline__ float s_fast_dot (const float4 (&wr)[FAST_SLOTS], uint32_t c, const float *xr, uint32_t in,
                                             uint32_t lane, float acc)
{
#pragma unroll
    for (uint32_t t = 0; B + t < FAST_SLOTS; ++t) {
        if (t >= c)
            break;
        const uint32_t e = FAST_CHUNK * t;   /* first float of the chunk */
        if (VEC) {
            if (e + 4u * lane < in)   /* in % 4 == 0: the whole float4 is inside */
                acc = sig_fma4 (wr[B + t], *reinterpret_cast<const float4 *> (xr + e + 4u * lane), acc);
        } else {
            if (e + lane < in)
                acc = fmaf (wr[B + t].x, xr[e + lane], acc);
            if (e + lane + 32u < in)
                acc = fmaf (wr[B + t].y, xr[e + lane + 32u], acc);
            if (e + lane + 64u < in)
                acc = fmaf (wr[B + t].z, xr[e + lane + 64u], acc);
            if (e + lane + 96u < in)
                acc = fmaf (wr[B + t].w, xr[e + lane + 96u], acc);
        }
    }
    return acc;
}
/* The same with the first slot BASE a run-time value: dispatches to the instance for it. */
template <uint32_t B, bool VEC>
__device__ __forceinline__ float s_fast_dot_at (const float4 (&wr)[FAST_SLOTS], uint32_t base, uint32_t c,
                                                const float *xr, uint32_t in, uint32_t lane, float acc)
{
    if constexpr (B + 1u < FAST_SLOTS) {
        if (base != B)
            return s_fast_dot_at<B + 1u, VEC> (wr, base, c, xr, in, lane, acc);
    }
    return s_fast_dot<B, VEC> (wr, c, xr, in, lane, acc);
}

/* Step 1 of s_fast: slot s of this warp's output in its layer into wr[s]. Straight-line code (the
 * loop is unrolled, the branches only skip): each register is the target of one load at most, so
 * no instruction here waits for a load (a load in a loop would wait at the back edge for the
 * previous iteration's loads into the same registers; a call would wait for all of them). ROWS1:
 * rows == 1, so every layer has groups == 1 and warp g has output g (when g < out). */
template <bool ROWS1>
__device__ __forceinline__ void s_fast_walk (float4 (&wr)[FAST_SLOTS], const s_fast_slot_t *slots, uint32_t g, uint32_t lane)
{
#pragma unroll
    for (uint32_t s = 0; s < FAST_SLOTS; ++s) {
        const s_fast_slot_t d = slots[s];
        uint32_t m = g;
        if (ROWS1 ? g >= d.out : s_fast_group (g, d.out, d.groups, m) >= d.groups)
            continue;   /* warp-uniform: no output in this slot's layer (or an unused slot: out 0) */
        const float *wm = d.w + (size_t) m * d.in;
        if (d.vec) {
            if (4u * lane < d.rem)
                wr[s] = __ldg (reinterpret_cast<const float4 *> (wm) + lane);
        } else {
            if (lane < d.rem)
                wr[s].x = __ldg (wm + lane);
            if (lane + 32u < d.rem)
                wr[s].y = __ldg (wm + lane + 32u);
            if (lane + 64u < d.rem)
                wr[s].z = __ldg (wm + lane + 64u);
            if (lane + 96u < d.rem)
                wr[s].w = __ldg (wm + lane + 96u);
        }
    }
}

__device__ __forceinline__ void s_fast (const s_fast_layer_t *tab, const s_fast_slot_t *slots, uint32_t layers,
                                        const float *__restrict__ x, float *__restrict__ y, float *buf, uint32_t rows)
{
    cg::cluster_group cluster = cg::this_cluster ();
    const uint32_t lane = threadIdx.x & 31u;
    const uint32_t g = (threadIdx.x >> 5) * FUSED_CLUSTER_BLOCKS + cluster.block_rank ();

    /* 1. Every weight this lane will ever use, in flight at once (s_fast_walk), then its bias: lane
     * l < layers loads the bias of this warp's output in layer l. */
    float4 wr[FAST_SLOTS];
    if (rows == 1u)
        s_fast_walk<true> (wr, slots, g, lane);
    else
        s_fast_walk<false> (wr, slots, g, lane);
    float breg = 0.0f;
    if (lane < layers) {
        const s_fast_layer_t T = tab[lane];
        uint32_t m;
        if (s_fast_group (g, T.out, T.groups, m) < T.groups)
            breg = __ldg (T.b + m);
    }

    /* The start barrier (see the file comment): relaxed, so it does not wait for the loads above. */
    if (layers > 1u)
        __cluster_barrier_arrive_relaxed ();

    /* 2. Layer 0's input into this block's buffer 0 (the loads above are already in flight). */
    s_stage (buf, x, rows * tab[0].in);
    __syncthreads ();
    if (layers > 1u)
        __cluster_barrier_wait ();   /* every block is running: remote stores are allowed from here */

    /* 3. The layers: layer l reads buffer l & 1 and writes buffer (l + 1) & 1 of every block, or y. */
    for (uint32_t l = 0; l < layers; ++l) {
        const s_fast_layer_t T = tab[l];
        const float *in = buf + (l & 1u) * FAST_BUF_FLOATS;
        const bool remote = l + 1u < layers;
        float *dst = remote ? buf + ((l + 1u) & 1u) * FAST_BUF_FLOATS : y;
        uint32_t m;
        const uint32_t q = s_fast_group (g, T.out, T.groups, m);
        for (uint32_t r = q < T.groups ? q : rows; r < rows; r += T.groups) {   /* warp-uniform */
            const float *xr = in + (size_t) r * T.in;
            float acc = lane == l ? breg : 0.0f;   /* the bias joins the sum in one lane */
            acc = T.vec ? s_fast_dot_at<0u, true> (wr, T.base, T.c, xr, T.in, lane, acc)
                        : s_fast_dot_at<0u, false> (wr, T.base, T.c, xr, T.in, lane, acc);
            const float v = sig_activate (sig_warp_sum (acc), T.act);
            float *o = dst + (size_t) r * T.out + m;
            if (remote) {
                if (lane < FUSED_CLUSTER_BLOCKS)   /* lane = the block rank it stores to */
                    s_put_output (cluster.map_shared_rank (o, (int) lane), v);
            } else if (lane == 0u) {
                s_put_output (o, v);
            }
        }
        if (remote)
            cluster.sync ();   /* S(l) of the file comment */
    }
}

/* ---------------------------------------------------------------------------------------------
 * General path (unchanged algorithm) */

__device__ __forceinline__ void s_general (const sig_fused_net_t *net, const float *__restrict__ x,
                                           float *__restrict__ y, float *__restrict__ scratch, float *s_in,
                                           uint32_t rows)
{
    cg::cluster_group cluster = cg::this_cluster ();
    const uint32_t lane = threadIdx.x & 31u;
    const uint32_t warp = (threadIdx.x >> 5) * gridDim.x + blockIdx.x;   /* the grid is the cluster */
    const uint32_t warps = (blockDim.x >> 5) * gridDim.x;
    const size_t half = (size_t) rows * net->widest;
    const uint32_t layers = net->layer_count;

    for (uint32_t l = 0; l < layers; ++l) {
        const sig_fused_layer_t L = net->layers[l];
        const float *src = l == 0u ? x : scratch + ((l - 1u) & 1u) * half;
        float *dst = l + 1u == layers ? y : scratch + (l & 1u) * half;
        const uint32_t total = rows * L.out;   /* <= rows * widest < 2^32 */
        const bool staged = (uint64_t) rows * L.in <= FUSED_STAGE_FLOATS;   /* block-uniform */
        if (staged) {
            s_stage (s_in, src, rows * L.in);
            __syncthreads ();
        }
        /* s_in is 16-byte aligned; its rows are when in % 4 == 0 */
        const bool vec4 = L.in % 4u == 0u && sig_aligned16 (L.w) && (staged || sig_aligned16 (src));
        for (uint32_t o = warp; o < total; o += warps) {   /* warp-uniform */
            const uint32_t r = o / L.out, m = o - r * L.out;
            const float *wm = L.w + (size_t) m * L.in;
            const float bias = __ldg (L.b + m);
            const float v = staged ? sig_warp_output<SIG_X_SHARED> (wm, s_in + (size_t) r * L.in, L.in, vec4, bias, L.act, lane)
                                   : sig_warp_output<SIG_X_L2> (wm, src + (size_t) r * L.in, L.in, vec4, bias, L.act, lane);
            if (lane == 0u)
                s_put_output (dst + (size_t) r * L.out + m, v);
        }
        /* After the last layer nothing reads y in this launch. Otherwise: this layer's outputs
         * must be visible to the whole cluster, and every block must be done reading s_in and
         * this layer's input half before anyone overwrites them. */
        if (l + 1u < layers) {
#if SIG_FUSED_EXTRA_FENCE
            __threadfence ();
#endif
            cluster.sync ();
        }
    }
}

static __global__ void __launch_bounds__ (FUSED_THREADS, 1)
s_mlp_fused_kernel (const sig_fused_net_t *__restrict__ net, const float *__restrict__ x, float *__restrict__ y,
                    float *__restrict__ scratch, uint32_t rows)
{
    __shared__ sig_fused_net_t s_net;
    __shared__ __align__ (16) float s_in[FUSED_STAGE_FLOATS];   /* general: staging; fast: 2 buffers */
    __shared__ __align__ (16) s_fast_layer_t s_tab[FAST_SLOTS];   /* fast: <= FAST_SLOTS layers */
    __shared__ __align__ (16) s_fast_slot_t s_slots[FAST_SLOTS];
    __shared__ uint32_t s_mode;

    /* The descriptor, word by word (it is a multiple of 8 bytes: it holds pointers). */
    static_assert (sizeof (sig_fused_net_t) % sizeof (uint32_t) == 0, "descriptor copied as words");
    {
        const uint32_t *src = reinterpret_cast<const uint32_t *> (net);
        uint32_t *dst = reinterpret_cast<uint32_t *> (&s_net);
        for (uint32_t i = threadIdx.x; i < sizeof (sig_fused_net_t) / sizeof (uint32_t); i += blockDim.x)
            dst[i] = src[i];
    }
    __syncthreads ();
    /* Warp 0 checks it and decides the path (the other warps wait at the barrier: no issue slots
     * spent on the same checks 32 times over). */
    if (threadIdx.x < 32u) {
        const uint32_t mode = s_prepare (&s_net, rows, s_tab, s_slots, threadIdx.x);
        if (threadIdx.x == 0u)
            s_mode = mode;
    }
    __syncthreads ();
    const uint32_t mode = s_mode;   /* the same in every thread of the cluster: see above */
    if (mode == MODE_FAST)
        s_fast (s_tab, s_slots, s_net.layer_count, x, y, s_in, rows);
    else if (mode == MODE_GENERAL)
        s_general (&s_net, x, y, scratch, s_in, rows);
}

static int s_mlp_fused (const sig_fused_net_t *net, const float *x, float *y, float *scratch, uint32_t rows,
                        cudaStream_t stream)
{
    if (!net || !x || !y || !scratch || rows == 0u)
        return (int) cudaErrorInvalidValue;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = sig_cluster_config (FUSED_CLUSTER_BLOCKS, FUSED_THREADS, 0, stream, &attr);
    const cudaError_t launched = cudaLaunchKernelEx (&cfg, s_mlp_fused_kernel, net, x, y, scratch, rows);
    const cudaError_t last = cudaGetLastError ();   /* clears what the failed launch left, if anything */
    return (int) (launched != cudaSuccess ? launched : last);
}

extern "C" int sig_mlp_fused (const sig_fused_net_t *net, const float *x, float *y, float *scratch, uint32_t rows,
                              cudaStream_t stream)
{
    return s_mlp_fused (net, x, y, scratch, rows, stream);
}

extern "C" int sig_fused_net_validate (sig_fused_net_t *net, uint32_t max_rows)
{
    if (!net)
        return (int) cudaErrorInvalidValue;
    net->fast = 0u;
    if (max_rows < 1u || !s_net_ok (net, max_rows))
        return (int) cudaErrorInvalidValue;
    net->fast = s_fast_ok (net) ? 1u : 0u;
    return (int) cudaSuccess;
}
