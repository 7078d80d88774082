/* The vector kernels of the dense layers (cpu_dense.h), written once on GCC vectors of VW lanes and
 * compiled per instruction path: cpu_dense_avx512.c (VW 16: a block of 16 outputs is one register)
 * and cpu_dense_avx2.c (VW 8: two). Written for the path's own width: 64-byte GCC vectors on AVX2
 * went through memory (GCC 12 lowers them badly: tick_mlp f32 took 134 us, against 7 on AVX-512).
 * The including file sets its #pragma GCC target first and defines:
 *   S_NAME, S_PATH         the ops table's name (cpu_dense_avx512) and its path ("avx512")
 *   VW and the types vf, vi, vu (VW lanes of float, int32, uint32) and vb (VW uint8)
 *   s_bcast (f)            F in every lane
 *   s_f16 (p)              VW halves at P widened to a vf
 *   s_x4_t, s_x4 (x4)      four u8 activations (one 32-bit word) made ready for s_dot4
 *   s_dot4 (acc, w, x)     ACC + in each lane the dot product of its four s8 weights in W with X
 *   s_round (v)            V rounded to the nearest integer, ties to even (the FPU's mode)
 *   S_KEEP (v)             one load feeding both uses of V (GCC would load a bf16 lane again for
 *                          the shift)
 *   s_max (a, b), s_min (a, b), s_hmax (v), s_hmin (v)   lane maxima and minima (no NaN here), V's
 *                          largest and least lane
 *   s_u8 (t)               T's lanes clamped to [0, 255] as bytes
 *   s_u8x4 (q, a, b, c, d) the four vectors' lanes clamped to [0, 255] as 4 VW bytes at Q, in order
 *   s_fma (a, b, c)        a b + c rounded once (the int8 outputs must be the scalar path's bits)
 *   S_INT8_TARGET          the int8 functions' target attribute (VNNI on AVX-512; empty on AVX2)
 *   S_KU_F32 (G), S_KU_F16 (G), S_KU_BF16 (G), S_KU_INT8 (G)   input steps unrolled for a group of
 *                          G blocks (independent accumulators: enough to hide the FMA's latency,
 *                          few enough to stay in registers; each divides in_pad's steps)
 * Aligned loads throughout: the layout's groups and slices sit on 64 bytes (32 for f16). */
#ifndef S_NAME
#error "cpu_dense_body.h is included by cpu_dense_avx512.c and cpu_dense_avx2.c only"
#endif

#include "backends/backend.h"
#include "backends/cpu_dense.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define S_INLINE static inline __attribute__ ((always_inline))
#define NV (CPU_DENSE_BLOCK / VW)           /* vectors a block of 16 outputs */
#define S_AL(p) __builtin_assume_aligned ((p), VW * 4)

/* ---------------------------------------------------------------- the k loops of one group */

/* ACC[j] += vector j of the group (block j / NV, its vector j % NV) over inputs [k0, k1) of X, for G
 * blocks; W is the group's first block, BS elements from one block to the next (16 in_pad): a stream a
 * block. Each stream has its own pointer (S_STREAMS), advanced on its own (S_ADVANCE) behind an empty asm
 * that hides from GCC that they move together: merged into one, blocks 1-3 were addressed base + index,
 * and an FMA whose memory operand is indexed issues as two uops (un-lamination), 3.5% slower on batches
 * of 16 rows (f32, the VM). S_WP: vector j's elements at step u of the unrolled k loop (STEP inputs a
 * slice). */
#define S_STREAMS(ELEM, W, bs, k0, G)                                                                          \
    const ELEM *wp[4];                                                                                         \
    for (int b = 0; b < (G); b++)                                                                              \
        wp[b] = (W) + (size_t) b * (bs) + (size_t) (k0) * CPU_DENSE_BLOCK
#define S_ADVANCE(G, by)                                                                                       \
    for (int b = 0; b < (G); b++) {                                                                            \
        wp[b] += (by);                                                                                         \
        __asm__ ("" : "+r" (wp[b]));                                                                           \
    }
#define S_WP(j, u, STEP) (wp[(j) / NV] + (size_t) (u) * (STEP) * CPU_DENSE_BLOCK + (STEP) * VW * ((j) % NV))
S_INLINE void s_f32_tile (const float *W, size_t bs, const float *x, uint32_t k0, uint32_t k1, vf *acc,
                          const int G, const int KU)
{
    vf a[16][4 * NV] = { { { 0 } } };
    S_STREAMS (float, W, bs, k0, G);
    const float *xk = x + k0;
    for (uint32_t n = (k1 - k0) / (uint32_t) KU; n; n--, xk += KU) {
#pragma GCC unroll 16
        for (int u = 0; u < KU; u++) {
            const vf xb = s_bcast (xk[u]);
#pragma GCC unroll 8
            for (int j = 0; j < G * NV; j++)
                a[u][j] += *(const vf *) S_AL (S_WP (j, u, 1)) * xb;
        }
        S_ADVANCE (G, (size_t) KU * CPU_DENSE_BLOCK);
    }
#pragma GCC unroll 8
    for (int j = 0; j < G * NV; j++)
#pragma GCC unroll 16
        for (int u = 0; u < KU; u++)
            acc[j] += a[u][j];
}

S_INLINE void s_f16_tile (const uint16_t *W, size_t bs, const float *x, uint32_t k0, uint32_t k1, vf *acc,
                          const int G, const int KU)
{
    vf a[8][4 * NV] = { { { 0 } } };
    S_STREAMS (uint16_t, W, bs, k0, G);
    const float *xk = x + k0;
    for (uint32_t n = (k1 - k0) / (uint32_t) KU; n; n--, xk += KU) {
#pragma GCC unroll 8
        for (int u = 0; u < KU; u++) {
            const vf xb = s_bcast (xk[u]);
#pragma GCC unroll 8
            for (int j = 0; j < G * NV; j++)
                a[u][j] += s_f16 (S_WP (j, u, 1)) * xb;
        }
        S_ADVANCE (G, (size_t) KU * CPU_DENSE_BLOCK);
    }
#pragma GCC unroll 8
    for (int j = 0; j < G * NV; j++)
#pragma GCC unroll 8
        for (int u = 0; u < KU; u++)
            acc[j] += a[u][j];
}

/* bf16: a lane holds inputs 2s (low half: shifted up, the plain bf16) and 2s + 1 (the whole lane);
 * both products go to one accumulator (two dependent FMAs a step: KU sets the chains). */
S_INLINE void s_bf16_tile (const uint16_t *W, size_t bs, const float *x, uint32_t k0, uint32_t k1, vf *acc,
                           const int G, const int KU)
{
    vf a[8][4 * NV] = { { { 0 } } };
    S_STREAMS (uint16_t, W, bs, k0, G);       /* slice k0 / 2 of each block, 2 x 16 halves a slice */
    const float *xk = x + k0;
    for (uint32_t n = (k1 - k0) / (2 * (uint32_t) KU); n; n--, xk += 2 * KU) {
#pragma GCC unroll 8
        for (int u = 0; u < KU; u++) {
            const vf xe = s_bcast (xk[2 * u]), xo = s_bcast (xk[2 * u + 1]);
#pragma GCC unroll 8
            for (int j = 0; j < G * NV; j++) {
                vu lane = *(const vu *) S_AL (S_WP (j, u, 2));
                S_KEEP (lane);
                a[u][j] += (vf) (lane << 16) * xe;
                a[u][j] += (vf) lane * xo;
            }
        }
        S_ADVANCE (G, (size_t) KU * 2 * CPU_DENSE_BLOCK);
    }
#pragma GCC unroll 8
    for (int j = 0; j < G * NV; j++)
#pragma GCC unroll 8
        for (int u = 0; u < KU; u++)
            acc[j] += a[u][j];
}

S_INT8_TARGET S_INLINE void s_int8_tile (const int8_t *W, size_t bs, const uint8_t *q, uint32_t k0, uint32_t k1, vi *acc,
                           const int G, const int KU)
{
    vi a[4][4 * NV] = { { { 0 } } };
    S_STREAMS (int8_t, W, bs, k0, G);         /* slice k0 / 4 of each block, 4 x 16 bytes a slice */
    const uint8_t *qk = q + k0;
    for (uint32_t n = (k1 - k0) / (4 * (uint32_t) KU); n; n--, qk += 4 * KU) {
#pragma GCC unroll 4
        for (int u = 0; u < KU; u++) {
            uint32_t x4;
            memcpy (&x4, qk + 4 * u, sizeof x4);
            const s_x4_t xb = s_x4 (x4);
#pragma GCC unroll 8
            for (int j = 0; j < G * NV; j++)
                a[u][j] = s_dot4 (a[u][j], *(const vi *) S_AL (S_WP (j, u, 4)), xb);
        }
        S_ADVANCE (G, (size_t) KU * 4 * CPU_DENSE_BLOCK);
    }
#pragma GCC unroll 8
    for (int j = 0; j < G * NV; j++)
#pragma GCC unroll 4
        for (int u = 0; u < KU; u++)
            acc[j] += a[u][j];
}

/* ---------------------------------------------------------------- bias, activation, stores */

S_INLINE void s_store (float *y, vf v, activation_t act)
{
    if (act == ACTIVATION_RELU)
        v = (vf) ((vi) v & (vi) (v > 0));
    *(vf *) S_AL (y) = v;
    if (act == ACTIVATION_SIGMOID || act == ACTIVATION_TANH)
        for (int i = 0; i < VW; i++)
            y[i] = backend_activate (y[i], act);
}

/* ---------------------------------------------------------------- one layer */

/* The walk every dtype shares: groups of up to 4 blocks from o_begin, k chunks (rows > 1), rows, over the
 * outputs [o_begin, o_end) (whole blocks: each its own stream, so a share may start and end at any block)
 * and the inputs [k_begin, k_end). TILE (W, bs, row, k0, k1, acc, G) runs G blocks of one group over a k
 * range for one row; ACC_T is its accumulators' type. First chunk: accumulators from 0; later ones from
 * the partial sums; the last one finishes the outputs (FINISH: vector j, outputs o = g0 + VW j, g0 the
 * group's first output), or with RAW (io->raw for the float dtypes, 0 for int8) stores the sums as they
 * are in y, which then holds the chunks' too. */
#define S_WALK(ELEM, ACC_T, ROW_IN, TILE, FINISH, RAW)                                                      \
    do {                                                                                                       \
        const uint32_t chunk = io->rows == 1 ? L->in_pad : cpu_dense_chunk (L->dtype);                        \
        const uint32_t o_end = io->o_end ? io->o_end : L->out_pad;                                            \
        const uint32_t kb = io->k_begin, ke = io->k_end ? io->k_end : L->in_pad;                              \
        const size_t bs = (size_t) CPU_DENSE_BLOCK * L->in_pad;                                               \
        const bool raw = (RAW);                                                                             \
        for (uint32_t g0 = io->o_begin; g0 < o_end; g0 += CPU_DENSE_GROUP) {                                   \
            const int G = (int) ((o_end - g0 < CPU_DENSE_GROUP ? o_end - g0 : CPU_DENSE_GROUP) / CPU_DENSE_BLOCK); \
            const ELEM *Wg = (const ELEM *) L->weight + (size_t) g0 * L->in_pad;                               \
            for (uint32_t k0 = kb; k0 < ke; k0 += chunk) {                                                     \
                const uint32_t k1 = k0 + chunk < ke ? k0 + chunk : ke;                                         \
                for (uint32_t r = 0; r < io->rows; r++) {                                                      \
                    ACC_T acc[4 * NV] = { { 0 } };                                                             \
                    ACC_T *part = raw ? (ACC_T *) S_AL (io->y + (size_t) r * io->y_stride + g0)               \
                                      : (ACC_T *) io->partial + ((size_t) r * L->out_pad + g0) / VW;          \
                    if (k0 > kb)                                                                               \
                        for (int j = 0; j < G * NV; j++)                                                       \
                            acc[j] = part[j];                                                                  \
                    switch (G) {       /* G a constant in each: the k loop unrolled for it */                  \
                    case 4: TILE (Wg, bs, ROW_IN, k0, k1, acc, 4); break;                                      \
                    case 3: TILE (Wg, bs, ROW_IN, k0, k1, acc, 3); break;                                      \
                    case 2: TILE (Wg, bs, ROW_IN, k0, k1, acc, 2); break;                                      \
                    default: TILE (Wg, bs, ROW_IN, k0, k1, acc, 1); break;                                     \
                    }                                                                                          \
                    if (k1 < ke || raw)                                                                        \
                        for (int j = 0; j < G * NV; j++)                                                       \
                            part[j] = acc[j];                                                                  \
                    else                                                                                       \
                        for (int j = 0; j < G * NV; j++)                                                       \
                            FINISH;                                                                            \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    } while (0)

#define S_ROW_X (io->x + (size_t) r * io->x_stride)
#define S_ROW_Q (io->q + (size_t) r * io->q_stride)
#define S_FINISH_FLOAT                                                                                         \
    s_store (io->y + (size_t) r * io->y_stride + g0 + VW * j,                                                  \
             acc[j] + *(const vf *) S_AL (L->bias + g0 + VW * j), L->activation)

#define S_F32_TILE(W, bs, x, k0, k1, acc, G) s_f32_tile (W, bs, x, k0, k1, acc, G, S_KU_F32 (G))
#define S_F16_TILE(W, bs, x, k0, k1, acc, G) s_f16_tile (W, bs, x, k0, k1, acc, G, S_KU_F16 (G))
#define S_BF16_TILE(W, bs, x, k0, k1, acc, G) s_bf16_tile (W, bs, x, k0, k1, acc, G, S_KU_BF16 (G))
#define S_INT8_TILE(W, bs, q, k0, k1, acc, G) s_int8_tile (W, bs, q, k0, k1, acc, G, S_KU_INT8 (G))

static void s_dense_f32 (const cpu_dense_t *L, const cpu_dense_io_t *io)
{
    S_WALK (float, vf, S_ROW_X, S_F32_TILE, S_FINISH_FLOAT, io->raw);
}

static void s_dense_f16 (const cpu_dense_t *L, const cpu_dense_io_t *io)
{
    S_WALK (uint16_t, vf, S_ROW_X, S_F16_TILE, S_FINISH_FLOAT, io->raw);
}

static void s_dense_bf16 (const cpu_dense_t *L, const cpu_dense_io_t *io)
{
    S_WALK (uint16_t, vf, S_ROW_X, S_BF16_TILE, S_FINISH_FLOAT, io->raw);
}

/* int8: y = fma ((float) (dot - zero rowsum), w_scale x_scale, b), as every path computes it;
 * outputs O .. O + VW - 1 of row R. */
S_INT8_TARGET S_INLINE void s_int8_finish (const cpu_dense_t *L, const cpu_dense_io_t *io, uint32_t r, uint32_t o, vi acc)
{
    const vi rowsum = *(const vi *) S_AL (L->rowsum + o);
    const vf dot = __builtin_convertvector (acc - rowsum * io->q_zero[r], vf);
    const vf scale = *(const vf *) S_AL (L->scale + o) * io->q_scale[r];
    s_store (io->y + (size_t) r * io->y_stride + o, s_fma (dot, scale, *(const vf *) S_AL (L->bias + o)), L->activation);
}

S_INT8_TARGET static void s_dense_int8 (const cpu_dense_t *L, const cpu_dense_io_t *io)
{
    S_WALK (int8_t, vi, S_ROW_Q, S_INT8_TILE, s_int8_finish (L, io, r, g0 + VW * (uint32_t) j, acc[j]), false);
}

/* ---------------------------------------------------------------- int8 activations */

/* VW floats at P, aligned or not: the first layer's rows may be the caller's own (backend_cpu.c) */
S_INLINE vf s_loadu (const float *p)
{
    vf v;
    memcpy (&v, p, sizeof v);
    return v;
}

static void s_quantize (const float *x, uint32_t x_stride, uint32_t rows, uint32_t n, uint32_t n_pad, uint8_t *q,
                        uint32_t q_stride, float *scale, int32_t *zero)
{
    for (uint32_t r = 0; r < rows; r++) {
        const float *row = x + (size_t) r * x_stride;
        uint8_t *qr = q + (size_t) r * q_stride;
        /* the row's largest and least x (from 0: -0 is not below it, as on the scalar path), four chains
         * each: its largest |x| is the larger of the largest and minus the least, and any x < 0 the least's */
        vf hi[4] = { { 0 } }, lo[4] = { { 0 } };
        uint32_t i = 0;
        for (; i + 4 * VW <= n; i += 4 * VW)
            for (int u = 0; u < 4; u++) {
                const vf v = s_loadu (row + i + VW * (uint32_t) u);
                hi[u] = s_max (hi[u], v);
                lo[u] = s_min (lo[u], v);
            }
        for (; i + VW <= n; i += VW) {
            const vf v = s_loadu (row + i);
            hi[0] = s_max (hi[0], v);
            lo[0] = s_min (lo[0], v);
        }
        float top = s_hmax (s_max (s_max (hi[0], hi[1]), s_max (hi[2], hi[3])));
        float bottom = s_hmin (s_min (s_min (lo[0], lo[1]), s_min (lo[2], lo[3])));
        for (; i < n; i++) {
            top = row[i] > top ? row[i] : top;
            bottom = row[i] < bottom ? row[i] : bottom;
        }
        const int any = bottom < 0;
        float amax = -bottom > top ? -bottom : top;
        amax = amax > 0 ? amax : 0.0f;     /* +0 where every x is 0 or -0 (as the scalar path's) */
        const float levels = any ? 127.0f : 255.0f;
        scale[r] = amax / levels;
        zero[r] = any ? 128 : 0;
        const float inv = amax > 0 ? levels / amax : 0.0f;
        /* X holds n rounded up to VW floats a row (int8's n_pad may be more: zeros); four vectors packed
         * at a time where n allows */
        const vi z = (vi) { 0 } + zero[r];
        for (i = 0; i + 4 * VW <= n; i += 4 * VW)
            s_u8x4 (qr + i, s_round (s_loadu (row + i) * inv) + z, s_round (s_loadu (row + i + VW) * inv) + z,
                    s_round (s_loadu (row + i + 2 * VW) * inv) + z, s_round (s_loadu (row + i + 3 * VW) * inv) + z);
        for (; i < n; i += VW)
            *(vb *) (qr + i) = s_u8 (s_round (s_loadu (row + i) * inv) + z);
        memset (qr + n, 0, n_pad - n);
    }
}

const cpu_dense_ops_t S_NAME = {
    .name = S_PATH,
    .dense = { [WEIGHT_DTYPE_F32] = s_dense_f32, [WEIGHT_DTYPE_F16] = s_dense_f16, [WEIGHT_DTYPE_BF16] = s_dense_bf16,
               [WEIGHT_DTYPE_INT8] = s_dense_int8 },
    .quantize = s_quantize,
};
