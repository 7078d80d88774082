/* What mlp_persistent.cu (the kernels, their launches and the kernel queries of the planner) and
 * mlp_persistent_plan.cu (the host side: layout, plan, pack) share: the constants, the image
 * header, and the two functions of mlp_persistent.cu the planner calls. Private to those files. */
#ifndef SIGSERVE_MLP_PERSISTENT_IMPL_CUH
#define SIGSERVE_MLP_PERSISTENT_IMPL_CUH

#include "sig_fused.h"
#include "sig_persistent.h"

#include <stdint.h>

#define P_T SIG_PERSISTENT_THREADS
#define P_BANK 20u             /* float4 registers of the one register-resident layer per role: 20 slots
                                  of f32 weights, 40 of f16 or bf16 (two 8-byte slots a register) */
#ifndef P_XGROUP
#define P_XGROUP 5u            /* banked slots whose inputs are loaded together */
#endif
static_assert (P_BANK % P_XGROUP == 0u, "whole groups");
#define P_GROUP_MAX 32u        /* threads per output: a warp at most (shuffle reduction) */
#define P_LINE 64u
#define P_MAGIC 0x50455253u    /* "PERS" */
#define P_LOCAL_MAX_BYTES (96u * 1024u)   /* a layer this big is split when the cluster has > 1 block */
#define P_BARRIER_CYCLES 1500u /* cost estimate of one cluster hand-off (DSMEM + barrier), clocks */

static_assert (P_T % 32u == 0u && P_T / 32u <= 32u, "a warp per 32 threads, at most 32 warps");
static_assert (SIG_FUSED_MAX_LAYERS <= 32, "layer masks are 32-bit");

/* The image header, copied into shared memory at start (word by word). */
struct p_header_t {
    uint32_t magic, layers, blocks, max_rows;
    uint32_t in, out, done_mode, dyn_bytes;
    uint32_t bias_off, act_off0, act_off1, part_off;    /* float offsets in dynamic shared memory: the leader's */
    uint32_t lead_end, part_stride, mpad, slice_off;    /* part: chunk_rows x mpad floats (the kernel lays out
                                                           each split layer's partials itself) */
    uint32_t work_end, read_leader, dtype, chunk_rows;  /* a worker's: slice_off .. work_end; SIG_DTYPE_*;
                                                           rows computed at a time */
    uint64_t payload;     /* byte offset of the slots in the image */
    uint64_t bias_image;  /* float offset of the biases from the payload */
    sig_persistent_layout_t box;
    uint32_t sync;        /* SIG_PLAN_SYNC_* */
    uint32_t slice2_off;  /* a worker's second input slice (after a fused layer) */
    uint32_t pad2[3];     /* the header stays a multiple of 16 bytes */
    sig_persistent_layer_plan_t layer[SIG_FUSED_MAX_LAYERS];
    /* the same per layer, which the kernel needs but the plan keeps elsewhere */
    uint32_t in_[SIG_FUSED_MAX_LAYERS], out_[SIG_FUSED_MAX_LAYERS];
    int32_t act[SIG_FUSED_MAX_LAYERS];
};
static_assert (sizeof (p_header_t) % 16 == 0, "the payload after it stays 16-byte aligned");
static_assert (sizeof (sig_persistent_layer_plan_t) % 8 == 0, "plan entries are copied as words");

#ifndef P_BANK_HALF
#define P_BANK_HALF 10u        /* of those registers, the ones f16 and bf16 use: 20 slots (ptxas -v: all 20
                                  spilled 200 bytes, 15 spilled 24 once the chunk loop came, 10 none) */
#endif
static_assert (P_BANK_HALF <= P_BANK && (2u * P_BANK_HALF) % P_XGROUP == 0u, "whole groups");
/* Slots the register bank holds in DTYPE. */
__host__ __device__ constexpr uint32_t p_bank_slots (uint32_t dtype)
{
    return dtype == SIG_DTYPE_F32 ? P_BANK : 2u * P_BANK_HALF;
}

/* Bytes of one weight slot (4 weights) in DTYPE. */
__host__ __device__ __forceinline__ uint32_t p_slot_bytes (uint32_t dtype)
{
    return dtype == SIG_DTYPE_F32 ? 16u : 8u;
}

__host__ __device__ __forceinline__ uint32_t s_div_up (uint32_t a, uint32_t b)
{
    return a / b + (a % b != 0u ? 1u : 0u);
}

/* sig_persistent_layer_plan_t.by_out: by outputs, a thread an output (G threads: its chunks of the
 * input) or a thread 4 outputs (a slot their 4 weights of one input: narrow inputs, not padded) */
enum { P_BY_OUT = 1u, P_BY_OUT_NARROW = 2u };

/* sig_persistent_layer_plan_t.fuse: 1, the outputs kept in the workers as their slice of the next
 * layer's input; 2 (streamed: a narrow layer before one of at most P_STREAM_OUT outputs), each thread
 * multiplies its 4 outputs by the next layer's weights at once and the block sums the products: the
 * hidden layer is never stored, and the next layer's slots follow the narrow layer's threads (pass p,
 * slot o: output o's 4 weights on the thread's 4 inputs) */
enum { P_FUSE_KEEP = 1u, P_FUSE_STREAM = 2u };
#define P_STREAM_OUT 8u
#define P_STREAM_RED4 (2u * (P_T / 32u) * P_STREAM_OUT / 4u)   /* float4 of the streamed sums' scratch: two
                                                                    rows of a sum per warp and output */

/* The outputs [*M0, *M1) that worker BLK (0 .. W - 1) computes of a layer of OUT outputs split by
 * outputs (a fused or narrow layer's in whole float4 chunks: the worker's columns of the next layer,
 * a thread's 4 outputs); all of them for any other layer. */
__host__ __device__ __forceinline__ void p_out_range (const sig_persistent_layer_plan_t &L, uint32_t out, uint32_t blk,
                                                      uint32_t W, uint32_t *m0, uint32_t *m1)
{
    if (!L.by_out) {
        *m0 = 0u;
        *m1 = out;
    } else if (L.fuse || L.by_out == P_BY_OUT_NARROW) {
        const uint32_t out4 = s_div_up (out, 4u), end = 4u * (out4 * (blk + 1u) / W);
        *m0 = 4u * (out4 * blk / W);
        *m1 = end < out ? end : out;
    } else {
        *m0 = out * blk / W;
        *m1 = out * (blk + 1u) / W;
    }
}

/* mlp_persistent.cu: static shared memory of the persistent kernel (its header copy and command
 * word). */
uint32_t p_static_smem (void);
/* mlp_persistent.cu: lets the persistent kernel take OPTIN - STATIC_SMEM bytes of dynamic shared
 * memory, then checks that a cluster of PLAN's size with its shared memory can be placed at all.
 * A cudaError_t value as int. */
int p_placeable (const sig_persistent_plan_t *plan, int optin, uint32_t static_smem);

#endif
