/* lstm persistent, host side: the plan (cluster or grid, blocks, shared memory, image and state
 * offsets), the mailbox layout and the packing of the weight image, for the kernel of
 * lstm_persistent.cu (which says how it works, and holds the launch and l_kernel_for, the
 * instantiations the plan queries). Shared definitions: lstm_persistent_impl.cuh. */
#include "sig_lstm.h"
#include "lstm_persistent_impl.cuh"
#include "sig_device.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

__host__ __device__ __forceinline__ uint32_t l_div_up (uint32_t a, uint32_t b) { return a / b + (a % b != 0u ? 1u : 0u); }
static uint64_t l_align (uint64_t v, uint64_t a) { return (v + a - 1u) / a * a; }

/* ---------------------------------------------------------------------------------------------
 * Host side: plan, layout, pack (the launch: lstm_persistent.cu) */

/* The stream state's offsets: per slot (and the window's scratch) a ring of W projections, then G
 * and c per layer: floats, or apart (plan 4) LL words of a version and a float each. */
static void l_state_sizes (sig_lstm_plan_t *p)
{
    const uint64_t per = (uint64_t) p->blocks * p->units * p->slots * p->layers;
    p->state_g = l_align (16ull * ((uint64_t) p->slots + 1u) * p->window * p->blocks * p->units, 256u);
    p->state_c = l_align (p->state_g + (p->apart ? 48ull : 16ull) * per, 256u);   /* apart: records, c in them */
    p->state_bytes = l_align (p->state_c + (p->apart ? 0u : 4ull * per), 256u);
}

/* Everything about one candidate (MODE, B blocks) but whether it can be launched. False with
 * p->why when it does not fit LIMIT bytes of shared memory per block. */
static bool l_build (const sig_lstm_net_t *n, uint32_t dtype, uint32_t mode, uint32_t B, uint32_t slots,
                     uint32_t max_rows, uint32_t limit, bool apart, sig_lstm_plan_t *p)
{
    memset (p, 0, sizeof *p);
    p->apart = apart ? 1u : 0u;
    const uint32_t H = n->hidden, L = n->layers, in = n->in, W = n->window, out = n->out;
    p->mode = mode;
    p->dtype = dtype;
    p->blocks = B;
    p->threads = L_T;
    p->layers = L;
    p->in = in;
    p->hidden = H;
    p->out = out;
    p->window = W;
    p->head_act = (uint32_t) n->head_act;
    p->slots = slots;
    p->max_rows = max_rows;
    p->smem_limit = limit;
    const uint32_t U = l_div_up (H, B);
    p->units = U;
    if (U > L_T) {
        snprintf (p->why, sizeof p->why, "%u blocks: %u units per block, a block holds at most %u", B, U, L_T);
        return false;
    }
    uint32_t G = 32u;
    while (G > 1u && U * G > L_T)
        G >>= 1;
    p->group = G;
    p->active = (uint32_t) l_align ((uint64_t) U * G, 32u);
    const uint32_t CE = dtype == SIG_LSTM_F32 ? 4u : 8u;
    p->chunk = CE;
    p->in_pad = (uint32_t) l_align (in, (uint64_t) G * CE);
    p->hs = (uint32_t) l_align (H, (uint64_t) G * CE);
    const uint32_t tb = 512u / in;
    p->tb = tb < 1u ? 1u : tb > W ? W : tb;
    p->xf = p->tb * p->in_pad;
    p->bc_words = 2u + p->tb * in;
    p->ag_words = L * H;
    const bool ll_smem = mode == SIG_LSTM_CLUSTER && B > 1u;
    /* buffers first, then the weights */
    uint64_t off = 0;
    const uint64_t lu = (uint64_t) L * U;
    p->off_bias = (uint32_t) off, off += 16u * lu;
    p->off_hot_g = (uint32_t) off, off += 16u * lu;
    p->off_gates = (uint32_t) off, off += 16u * lu;
    p->off_hot_c = (uint32_t) off, off = l_align (off + 4u * lu, 16u);
    p->off_c_run = (uint32_t) off, off = l_align (off + 4u * lu, 16u);
    p->off_xf = (uint32_t) off, off = l_align (off + 4ull * p->xf, 16u);
    p->off_hv = (uint32_t) off, off = l_align (off + 4ull * L * p->hs, 16u);
    const uint64_t head_bytes = 4ull * ((uint64_t) out * p->hs + out);
    p->head_in_smem = head_bytes <= L_HEAD_SMEM_MAX;
    p->off_head = (uint32_t) off, off = l_align (off + (p->head_in_smem ? head_bytes : 0u), 16u);
    p->off_bc = (uint32_t) off, off += ll_smem ? 16ull * p->bc_words : 0u;
    p->off_ag = (uint32_t) off, off += ll_smem ? 16ull * p->ag_words : 0u;
    p->off_stage = (uint32_t) off, off += apart ? 48u * lu : 0u;
    if (off > limit) {
        snprintf (p->why, sizeof p->why, "%u blocks: the buffers alone take %llu KiB of shared memory per block (of %u "
                  "KiB): %u layers of %u units, %u inputs", B, (unsigned long long) (off >> 10), limit >> 10, L, H, in);
        return false;
    }
    /* the matrices: W_ih of every layer before any W_hh (the step reads W_ih only) */
    uint64_t budget = limit - off, img = l_align (sizeof (l_header_t), 256u);
    for (uint32_t g = 0; g < 2u; ++g)
        for (uint32_t k = 0; k < L; ++k) {
            sig_lstm_array_t *a = &p->arrays[2u * k + g];
            a->k = g == 0u && k == 0u ? in : H;
            a->slots = l_div_up (l_div_up (a->k, CE), G);
            const uint64_t slot_bytes = 4ull * p->active * 16u;
            a->block_bytes = a->slots * slot_bytes;
            const uint64_t fit = budget / slot_bytes;
            a->smem_slots = (uint32_t) (fit < a->slots ? fit : a->slots);
            a->smem_off = (uint32_t) off;
            off += a->smem_slots * slot_bytes;
            budget -= a->smem_slots * slot_bytes;
            p->weight_bytes += (uint64_t) B * a->block_bytes;
            p->smem_weight_bytes += (uint64_t) B * a->smem_slots * slot_bytes;
            if (g == 0u) {
                p->critical_smem_bytes += a->smem_slots * slot_bytes;
                p->critical_global_bytes += (a->slots - a->smem_slots) * slot_bytes;
            }
        }
    for (uint32_t a = 0; a < 2u * L; ++a) {
        p->arrays[a].image_off = img;
        img = l_align (img + (uint64_t) B * p->arrays[a].block_bytes, 256u);
    }
    p->bias_image = img;
    img = l_align (img + 16ull * B * L * U, 256u);
    p->head_image = img;
    img += head_bytes;
    p->image_bytes = l_align (img, 256u);
    p->smem_bytes = (uint32_t) l_align (off, 16u);
    l_state_sizes (p);
    p->xchg_bytes = mode == SIG_LSTM_GRID ? 16ull * (p->bc_words + p->ag_words) : 0u;
    /* a step, in clocks: W_ih from shared memory at 128 B a clock, from L2 at ~45 B a clock per SM,
     * an exchange per layer and the command's broadcast, ~300 clocks of cell update per layer. The
     * exchange costs are fitted to lstmbench --blocks on an H100 (docs/lstm-notes.md, 2026-11-23):
     * a cluster's 1,150 + 55 B clocks (0.6-1.0 us), a grid's through L2 ~4,300 (2.2 us). */
    const uint64_t xchg = B == 1u ? 64u : mode == SIG_LSTM_CLUSTER ? 1150u + 55u * B : 4300u;
    p->cost = p->critical_smem_bytes / 128u + p->critical_global_bytes / 45u + L * (xchg + 300u)
              + (B > 1u ? xchg : 0u) + 200u;
    return true;
}

/* How many launches of plan P (APART: the instantiation of a plan whose advances run apart) fit the
 * device's SMS SMs at once: *COUNT (0: it cannot be placed at all; a grid's blocks must all be
 * resident at once). */
static cudaError_t l_fits (const sig_lstm_plan_t *p, int sms, bool apart, int *count)
{
    const void *fn = l_kernel_for (p->dtype, p->mode, false, apart);
    *count = 0;
    if (p->mode == SIG_LSTM_GRID || p->blocks == 1u) {
        int per_sm = 0;
        cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor (&per_sm, fn, L_T, p->smem_bytes);
        if (e != cudaSuccess)
            return e;
        *count = per_sm * sms / (int) p->blocks;
        return cudaSuccess;
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = sig_cluster_config (p->blocks, L_T, p->smem_bytes, 0, &attr);
    if (cudaOccupancyMaxActiveClusters (count, fn, &cfg) != cudaSuccess) {
        (void) cudaGetLastError ();   /* this size cannot be placed (e.g. past the device's cluster limit) */
        *count = 0;
    }
    return cudaSuccess;
}

static float l_max_abs (const float *v, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; ++i)
        m = fabsf (v[i]) > m ? fabsf (v[i]) : m;
    return m;
}

/* The gate products (SIG_LSTM_MATH_*): f32 weights WIDE; else MATH (0: the default). HALF in f16
 * keeps every partial sum of a run (SIG_LSTM_HALF_RUN products) within 2^14, far inside f16's range
 * (65504): with |h| < 1, a weight above 2^12 anywhere (none in a trained LSTM) keeps the model WIDE;
 * the features up to half_x_max = 2^12 / max |W_ih of layer 0| (the host sends a command with a
 * larger one in WIDE: SIG_LSTM_WIDE_INPUTS). bf16 has fp32's range: no limit. */
static void l_plan_math (const sig_lstm_net_t *n, uint32_t math, sig_lstm_plan_t *p)
{
    p->math = math ? math : (uint32_t) SIG_LSTM_MATH_DEFAULT;
    if (p->dtype == SIG_LSTM_F32 || p->math != SIG_LSTM_MATH_HALF) {
        p->math = SIG_LSTM_MATH_WIDE;
        p->half_x_max = 0.0f;
        return;
    }
    p->half_x_max = FLT_MAX;
    if (p->dtype != SIG_LSTM_F16)
        return;
    const float run = 16384.0f / SIG_LSTM_HALF_RUN;   /* the largest |w x| a product may have */
    float wmax = 0.0f;
    for (uint32_t k = 0; k < n->layers; ++k) {
        const size_t kin = k == 0u ? n->in : n->hidden;
        const float ih = l_max_abs (n->w_ih[k], 4ull * n->hidden * kin), hh = l_max_abs (n->w_hh[k], 4ull * n->hidden * n->hidden);
        if (k > 0u)
            wmax = ih > wmax ? ih : wmax;
        wmax = hh > wmax ? hh : wmax;
        if (k == 0u)
            p->half_x_max = ih > 0.0f ? run / ih : 32768.0f;
    }
    if (!(wmax <= run) || !(p->half_x_max >= 1.0f)) {   /* NaN weights too */
        p->math = SIG_LSTM_MATH_WIDE;
        p->half_x_max = 0.0f;
        return;
    }
    if (p->half_x_max > 32768.0f)
        p->half_x_max = 32768.0f;   /* f16's inputs themselves */
}

/* What every plan takes from the tuning once its shape is chosen: the synchronisation, the math, the
 * trace. */
static void l_finish (const sig_lstm_net_t *n, const sig_lstm_tuning_t *tu, sig_lstm_plan_t *plan)
{
    plan->sync = tu->sync & (SIG_LSTM_SYNC_POLL_ROUNDS | SIG_LSTM_SYNC_XCHG_ROUNDS | SIG_LSTM_SYNC_FEAT_SHARED
                             | SIG_LSTM_SYNC_BCAST_AFTER | SIG_LSTM_SYNC_GENERIC);
    if (plan->sync & SIG_LSTM_SYNC_POLL_ROUNDS)   /* the old poll reads the entry as words 0 .. 2 + in */
        plan->sync |= SIG_LSTM_SYNC_FEAT_SHARED;
    l_plan_math (n, tu->math, plan);
    plan->trace = tu->trace;
    if (plan->apart)   /* the apart launches keep the generic kernel (sig_lstm.h) */
        plan->sync |= SIG_LSTM_SYNC_ADVANCE_APART | SIG_LSTM_SYNC_GENERIC;
}

extern "C" int sig_lstm_plan (const sig_lstm_net_t *net, uint32_t dtype, uint32_t slots, uint32_t max_rows,
                              int device, const sig_lstm_tuning_t *tuning, sig_lstm_plan_t *plan)
{
    if (!net || !plan)
        return (int) cudaErrorInvalidValue;
    memset (plan, 0, sizeof *plan);
    const sig_lstm_net_t *n = net;
    bool ok = n->layers >= 1u && n->layers <= SIG_LSTM_MAX_LAYERS && n->in >= 1u && n->hidden >= 1u && n->out >= 1u
              && n->window >= 1u && n->window <= (1u << 24) - 1u && dtype <= SIG_LSTM_BF16 && max_rows >= 1u
              && n->head_w && n->head_b && n->head_act >= SIG_ACT_NONE && n->head_act <= SIG_ACT_TANH
              && n->in <= (1u << 20) && n->hidden <= (1u << 20) && n->out <= (1u << 20) && slots < (1u << 30);
    for (uint32_t k = 0; ok && k < n->layers; ++k)
        ok = n->w_ih[k] && n->w_hh[k] && n->bias[k];
    if (!ok) {
        snprintf (plan->why, sizeof plan->why, "bad LSTM description (%u layers of %u units, %u inputs, %u outputs, "
                  "window %u, weight type %u)", n->layers, n->hidden, n->in, n->out, n->window, dtype);
        return (int) cudaErrorInvalidValue;
    }
    const sig_lstm_tuning_t none = {};
    const sig_lstm_tuning_t *tu = tuning ? tuning : &none;
    int optin = 0, sms = 0;
    cudaError_t e = cudaDeviceGetAttribute (&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute (&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess)
        return (int) e;
    /* every instantiation may take the whole opt-in limit (set once, the same value every time) */
    uint32_t statics[2] = { 0u, 0u };   /* the larger of the serving and the traced instantiation's */
    for (uint32_t v = 0; v < 6u; ++v) {   /* cluster and grid, serving and traced; the apart cluster ones */
        const uint32_t mode = v < 4u ? v & 1u : (uint32_t) SIG_LSTM_CLUSTER;
        const void *fn = l_kernel_for (dtype, mode, v < 4u ? v >= 2u : v == 5u, v >= 4u);
        cudaFuncAttributes fa;
        if ((e = cudaFuncGetAttributes (&fa, fn)) != cudaSuccess)
            return (int) e;
        if ((uint32_t) fa.sharedSizeBytes > statics[mode])
            statics[mode] = (uint32_t) fa.sharedSizeBytes;
        if ((e = cudaFuncSetAttribute (fn, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int) fa.sharedSizeBytes))
                != cudaSuccess)
            return (int) e;
        if (mode == SIG_LSTM_CLUSTER)
            (void) cudaFuncSetAttribute (fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        (void) cudaGetLastError ();
    }
    struct { uint32_t mode, blocks; } cand[8];
    uint32_t nc = 0;
    if (tu->blocks) {
        cand[nc++] = { tu->grid ? (uint32_t) SIG_LSTM_GRID : (uint32_t) SIG_LSTM_CLUSTER, tu->blocks };
    } else if (tu->grid) {
        cand[nc++] = { SIG_LSTM_GRID, (uint32_t) sms };
    } else {
        const uint32_t sizes[] = { 1u, 2u, 4u, 8u, 16u };
        for (uint32_t i = 0; i < 5u; ++i)
            cand[nc++] = { SIG_LSTM_CLUSTER, sizes[i] };
        cand[nc++] = { SIG_LSTM_GRID, (uint32_t) sms };
    }
    bool found = false;
    sig_lstm_plan_t p;
    char why[sizeof plan->why] = "";
    for (uint32_t i = 0; i < nc; ++i) {
        const uint32_t B = cand[i].blocks, mode = cand[i].mode;
        if (B < 1u || (mode == SIG_LSTM_CLUSTER && B > 16u) || B > n->hidden) {
            if (tu->blocks)
                snprintf (why, sizeof why, "%u blocks: a cluster has 1 to 16, and no more blocks than the %u units",
                          B, n->hidden);
            continue;
        }
        uint32_t limit = (uint32_t) optin - statics[mode];
        if (tu->smem_cap && tu->smem_cap < limit)
            limit = tu->smem_cap;
        if (!l_build (n, dtype, mode, B, slots, max_rows, limit, false, &p)) {
            memcpy (why, p.why, sizeof why);
            continue;
        }
        int placeable = 0;
        if ((e = l_fits (&p, sms, false, &placeable)) != cudaSuccess)
            return (int) e;
        if (placeable < 1) {
            snprintf (why, sizeof why, "%s of %u blocks with %u KiB of shared memory each cannot be placed on this "
                      "device (%d SMs)", mode == SIG_LSTM_GRID ? "a grid" : "a cluster", B, p.smem_bytes >> 10, sms);
            continue;
        }
        if (!found || p.cost < plan->cost) {
            *plan = p;
            found = true;
        }
    }
    if (!found) {
        memcpy (plan->why, why, sizeof why);
        return (int) cudaErrorNotSupported;
    }
    /* plan 4: the advances in a second launch of the same shape (and a staging buffer), where two fit
     * (sig_lstm.h) */
    char inline_why[sizeof plan->why] = "";
    if (!(tu->sync & SIG_LSTM_SYNC_ADVANCE_APART)) {
        snprintf (inline_why, sizeof inline_why, "the default (SIG_LSTM_SYNC_ADVANCE_APART not asked for)");
    } else if (plan->mode != SIG_LSTM_CLUSTER) {
        snprintf (inline_why, sizeof inline_why, "a grid takes every SM: no room for a second launch");
    } else if (slots == 0u) {
        snprintf (inline_why, sizeof inline_why, "no stream slots: nothing to advance");
    } else if (slots > SIG_LSTM_APART_SLOTS) {
        snprintf (inline_why, sizeof inline_why, "%u stream slots: apart takes at most %u", slots, SIG_LSTM_APART_SLOTS);
    } else if (!l_build (n, dtype, plan->mode, plan->blocks, slots, max_rows, plan->smem_limit, true, &p)) {
        snprintf (inline_why, sizeof inline_why, "the staging buffer does not fit: %.160s", p.why);
    } else {
        int two = 0;
        if ((e = l_fits (&p, sms, true, &two)) != cudaSuccess)
            return (int) e;
        if (two >= 2)
            *plan = p;
        else
            snprintf (inline_why, sizeof inline_why, "two clusters of %u blocks with %u KiB of shared memory each do "
                      "not fit this device (%d at once)", p.blocks, p.smem_bytes >> 10, two);
    }
    memcpy (plan->why, inline_why, sizeof plan->why);
    l_finish (n, tu, plan);
    return (int) cudaSuccess;
}

extern "C" int sig_lstm_plan_offline (const sig_lstm_net_t *net, uint32_t dtype, uint32_t mode, uint32_t blocks,
                                      uint32_t slots, uint32_t max_rows, uint32_t smem_limit,
                                      const sig_lstm_tuning_t *tuning, sig_lstm_plan_t *plan)
{
    if (!net || !plan || dtype > SIG_LSTM_BF16 || mode > SIG_LSTM_GRID || blocks < 1u || max_rows < 1u
        || (mode == SIG_LSTM_CLUSTER && blocks > 16u) || blocks > net->hidden)
        return (int) cudaErrorInvalidValue;
    const sig_lstm_tuning_t none = {};
    const sig_lstm_tuning_t *tu = tuning ? tuning : &none;
    if (!l_build (net, dtype, mode, blocks, slots, max_rows, smem_limit, false, plan))
        return (int) cudaErrorNotSupported;
    l_finish (net, tu, plan);
    return (int) cudaSuccess;
}

extern "C" int sig_lstm_layout (const sig_lstm_plan_t *plan, sig_lstm_layout_t *lay)
{
    if (!plan || !lay || !plan->blocks)
        return (int) cudaErrorInvalidValue;
    const uint64_t status = l_align (4ull * plan->blocks, L_LINE);
    /* the features from the 128-byte line after the command words' (sig_lstm.h) */
    const uint32_t feat = (plan->sync & SIG_LSTM_SYNC_FEAT_SHARED) ? 2u : 128u / 8u;
    const uint64_t cmd = l_align (8ull * (feat + plan->in), L_LINE);
    const uint64_t outs = l_align (4ull * plan->out, L_LINE);
    const uint64_t entry = cmd + L_LINE + outs;
    uint64_t off = 0;
    memset (lay, 0, sizeof *lay);
    lay->ctrl = 0u;
    lay->hold = 8u;
    off = L_LINE;
    lay->ready = (uint32_t) off, off += status;
    lay->exited = (uint32_t) off, off += status;
    lay->ring = (uint32_t) off;
    lay->entry_bytes = (uint32_t) entry;
    lay->cmd = 0u;
    lay->feat = feat;
    lay->done = (uint32_t) cmd;
    lay->outputs = (uint32_t) (cmd + L_LINE);
    off += SIG_LSTM_RING * entry;
    off = l_align (off, 4096u);
    lay->window_in = (uint32_t) off;
    off = l_align (off + 4ull * plan->max_rows * plan->window * plan->in, L_LINE);
    lay->window_out = (uint32_t) off;
    off = l_align (off + 4ull * plan->max_rows * plan->out, 4096u);
    if (off > (1ull << 31))
        return (int) cudaErrorInvalidValue;
    lay->total = (uint32_t) off;
    return (int) cudaSuccess;
}

template <typename T> static T l_from_float (float v);
template <> float l_from_float<float> (float v) { return v; }
template <> __half l_from_float<__half> (float v) { return __float2half_rn (v); }
template <> __nv_bfloat16 l_from_float<__nv_bfloat16> (float v) { return __float2bfloat16_rn (v); }

/* Block b's share of matrix SRC ([4H][K] row-major) into DST in the kernel's order. */
template <typename T>
static void l_pack_array (const float *src, const sig_lstm_plan_t *p, const sig_lstm_array_t *a, uint32_t b,
                          unsigned char *dst)
{
    const uint32_t H = p->hidden, B = p->blocks, G = p->group, A = p->active, CE = p->chunk, K = a->k;
    const uint32_t u0 = (uint32_t) ((uint64_t) H * b / B), nu = (uint32_t) ((uint64_t) H * (b + 1u) / B) - u0;
    T *out = reinterpret_cast<T *> (dst);
    for (uint32_t s = 0; s < a->slots; ++s)
        for (uint32_t q = 0; q < 4u; ++q)
            for (uint32_t t = 0; t < A; ++t) {
                const uint32_t j = t / G, l = t % G, ch = s * G + l;
                T *chunk = out + (((size_t) s * 4u + q) * A + t) * CE;
                for (uint32_t e = 0; e < CE; ++e) {
                    const uint32_t kk = ch * CE + e;
                    const float v = j < nu && kk < K ? src[((size_t) q * H + u0 + j) * K + kk] : 0.0f;
                    chunk[e] = l_from_float<T> (v);
                }
            }
}

extern "C" int sig_lstm_pack (const sig_lstm_net_t *net, const sig_lstm_plan_t *p, const sig_lstm_layout_t *lay,
                              void *image)
{
    if (!net || !p || !lay || !image || p->layers != net->layers || p->hidden != net->hidden || p->in != net->in)
        return (int) cudaErrorInvalidValue;
    unsigned char *img = static_cast<unsigned char *> (image);
    memset (img, 0, p->image_bytes);
    l_header_t *h = reinterpret_cast<l_header_t *> (img);
    h->magic = L_MAGIC;
    h->plan = *p;
    h->box = *lay;
    const uint32_t H = p->hidden, B = p->blocks, L = p->layers, U = p->units;
    for (uint32_t a = 0; a < 2u * L; ++a) {
        const sig_lstm_array_t *ar = &p->arrays[a];
        const float *src = a % 2u == 0u ? net->w_ih[a / 2u] : net->w_hh[a / 2u];
        for (uint32_t b = 0; b < B; ++b) {
            unsigned char *dst = img + ar->image_off + (uint64_t) b * ar->block_bytes;
            if (p->dtype == SIG_LSTM_F32)
                l_pack_array<float> (src, p, ar, b, dst);
            else if (p->dtype == SIG_LSTM_F16)
                l_pack_array<__half> (src, p, ar, b, dst);
            else
                l_pack_array<__nv_bfloat16> (src, p, ar, b, dst);
        }
    }
    float *bias = reinterpret_cast<float *> (img + p->bias_image);   /* [B][L][U] x (i, f, g, o) */
    for (uint32_t b = 0; b < B; ++b) {
        const uint32_t u0 = (uint32_t) ((uint64_t) H * b / B), nu = (uint32_t) ((uint64_t) H * (b + 1u) / B) - u0;
        for (uint32_t k = 0; k < L; ++k)
            for (uint32_t j = 0; j < nu; ++j)
                for (uint32_t q = 0; q < 4u; ++q)
                    bias[(((size_t) b * L + k) * U + j) * 4u + q] = net->bias[k][(size_t) q * H + u0 + j];
    }
    float *head = reinterpret_cast<float *> (img + p->head_image);   /* [out][hs], then [out] */
    for (uint32_t o = 0; o < p->out; ++o)
        memcpy (head + (size_t) o * p->hs, net->head_w + (size_t) o * H, H * sizeof (float));
    memcpy (head + (size_t) p->out * p->hs, net->head_b, p->out * sizeof (float));
    return (int) cudaSuccess;
}
