/* The CPU MLP backend's dense layers (y = act (W x + b), a batch of rows) in each weight dtype, one
 * set of kernels per instruction path (cpu_isa.h): cpu_dense_scalar.c (plain C, the reference),
 * cpu_dense_avx2.c and cpu_dense_avx512.c (one source, cpu_dense_body.h, compiled for each).
 *
 * LAYOUT. Every dtype packs W the same way, so each path reads the same bytes and a K-major walk
 * needs no horizontal sums: the outputs, padded to a multiple of 16, go in blocks of 16, each block
 * contiguous (16 in_pad elements), of in_pad / STEP slices, each the block's 16 outputs x STEP inputs:
 *     block b (outputs 16b ..), slice s, output j of the block, t < STEP:  W[o = 16b + j][k = s STEP + t]
 * at element  16b in_pad + (16 s + j) STEP + t.
 * STEP is 1 for f32 and f16, 2 for bf16 (a 32-bit lane holds inputs 2s and 2s + 1 of one output) and
 * 4 for int8 (the four bytes vpdpbusd sums into one lane; 16 slices of a block are an AMX B tile, 1 KiB
 * in one piece). The kernels walk up to 4 blocks at once (a group: one broadcast input feeds 4 vectors),
 * one stream each: any run of blocks is whole lines in one piece per block, so a core's share of a split
 * layer (cpu_split.h) reads no line it does not use (with groups of 64 outputs interleaved slice by
 * slice, as before 2026-12-07, a share ending inside a group read half a 128-byte pair of lines and paid
 * for the whole pair: 9 blocks of tick_mlp's first layer cost as much as 10). in_pad is in rounded up
 * to 16 (every kernel's unrolled k loop divides it), 64 for int8 (an AMX tile's k); the padding is
 * zero. For rows > 1 the k loop is cut into chunks whose slice of a group fits in L1 (16 KiB), and each
 * chunk serves every row before the next is read: a batch reads the weights from L2 once, not once a
 * row.
 *
 * NUMERICS (tests/tolerance.c derives each bound). f32: fp32 FMAs. f16: each weight rounded to
 * nearest f16 at load, widened exactly as it is loaded (vcvtph2ps), fp32 arithmetic. bf16: the even
 * input's weight rounded to nearest bf16 (the lane's low half), the odd one's the nearest value whose
 * low 16 bits are that bf16 (the whole lane read as an fp32: within 2^-8 / (1 - 2^-8) of the weight,
 * |w| 2^-8 as for bf16, or 2^-133 absolute), so one shift widens two weights and the activations stay
 * fp32. Measured on the development machine (Sapphire Rapids; docs/perf.md, 2026-12-06): vdpbf16ps
 * issues once per ~2.2 cycles (64 weight bytes: 64 B/ns, under the L2's ~100), an fp32 FMA twice a
 * cycle; two FMAs and a shift per 64 bytes ran a 512x256 layer 12% faster than vdpbf16ps, and 20%
 * faster than widening both halves (a shift and a mask). int8: each row of W
 * quantized symmetrically (scale max |w| / 127, round to nearest even); each row of activations at
 * every layer as well, to u8 with zero point 0 and scale max / 255 when no value is negative, else
 * zero point 128 and scale max |x| / 127; exact int32 dot products (vpdpbusd, or pmaddwd on AVX2, or
 * C), then y = fma ((float) (dot - zero rowsum), w_scale x_scale, b): every path's int8 outputs are
 * the same bits.
 *
 * Nothing here allocates or locks after cpu_dense_pack. */
#ifndef SIGSERVE_CPU_DENSE_H
#define SIGSERVE_CPU_DENSE_H

#include "base/config.h"
#include "weights/weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CPU_DENSE_BLOCK 16      /* outputs a vector of the layout holds; out_pad is a multiple */
#define CPU_DENSE_GROUP 64      /* outputs the kernels walk at once (4 blocks) */
#define CPU_DENSE_KPAD 16       /* in_pad is a multiple (int8: of CPU_DENSE_KPAD_INT8) */
#define CPU_DENSE_KPAD_INT8 64  /* an AMX tile's 64 bytes of k */
#define CPU_DENSE_CHUNK_BYTES 16384     /* a group's slice of weights per k chunk when rows > 1 */

typedef struct {
    uint32_t in, out;           /* logical sizes */
    uint32_t in_pad, out_pad;   /* in rounded up to CPU_DENSE_KPAD (int8: _INT8), out to CPU_DENSE_BLOCK */
    activation_t activation;
    weight_dtype_t dtype;
    void *weight;               /* the layout above: f32 floats, f16 / bf16 uint16_t, int8 int8_t */
    size_t weight_bytes;        /* what weight holds (padding included) */
    float *bias;                /* [out_pad], 0 past out */
    float *scale;               /* int8: [out_pad] each row's scale (0 past out); else NULL */
    int32_t *rowsum;            /* int8: [out_pad] the sum of each row's int8 weights; else NULL */
} cpu_dense_t;

/* One call of a layer on ROWS rows: its outputs [o_begin, o_end) over its inputs [k_begin, k_end)
 * (multiples of CPU_DENSE_BLOCK; an end 0: out_pad, in_pad), so that cores splitting a layer (cpu_split.h)
 * each compute theirs from the same layout: a share of the outputs, or (raw: f32, f16, bf16) every
 * output's sum over a share of the inputs, stored in y as it is (no bias, no activation) for the caller
 * to add up. */
typedef struct {
    uint32_t rows;
    uint32_t o_begin, o_end;
    uint32_t k_begin, k_end;
    bool raw;
    const float *x;             /* rows x x_stride floats: in_pad each, the padding finite */
    uint32_t x_stride;
    float *y;                   /* rows x y_stride floats: out_pad written each */
    uint32_t y_stride;
    /* int8: the quantized activations (rows x q_stride bytes, in_pad each), their scales and zero
     * points (cpu_dense_ops_t.quantize fills them); else unused */
    uint8_t *q;
    uint32_t q_stride;
    float *q_scale;
    int32_t *q_zero;
    void *partial;              /* rows > 1: rows x out_pad fp32 or int32 partial sums */
} cpu_dense_io_t;

typedef struct {
    const char *name;           /* the file's path: "scalar", "avx2", "avx512" */
    /* The layer for DTYPE (NULL: this path has none). */
    void (*dense[WEIGHT_DTYPE_COUNT]) (const cpu_dense_t *L, const cpu_dense_io_t *io);
    /* int8: each row's activations X (n logical floats a row, X_STRIDE apart) into Q (n_pad bytes,
     * the padding 0), with its scale and zero point (the rule above). */
    void (*quantize) (const float *x, uint32_t x_stride, uint32_t rows, uint32_t n, uint32_t n_pad, uint8_t *q,
                      uint32_t q_stride, float *scale, int32_t *zero);
} cpu_dense_ops_t;

extern const cpu_dense_ops_t cpu_dense_scalar;
extern const cpu_dense_ops_t cpu_dense_avx2;
extern const cpu_dense_ops_t cpu_dense_avx512;
/* Batches of rows >= CPU_AMX_MIN_ROWS (cpu_isa.h) on AMX tiles: int8 only (tdpbusd: the same exact
 * sums, the same bits as every other path), with AVX-512 VNNI's quantization and rescaling; 16 rows
 * a tile, the weights of a group's 64 k a B tile straight from the layout (rows: k quads). */
extern const cpu_dense_ops_t cpu_dense_amx;

/* Packs SRC into L in DTYPE (the layout above). 0, or -1 with ERR: out of memory; a weight the dtype
 * cannot hold (f16: |w| > 65504; bf16: past 3.3895e38); int8 with more inputs than an int32 dot
 * product can sum (CPU_DENSE_INT8_MAX_IN). NAME names the layer's tensor in messages. */
#define CPU_DENSE_INT8_MAX_IN 65536
int cpu_dense_pack (cpu_dense_t *L, const dense_layer_t *src, weight_dtype_t dtype, const char *name, char *err,
                    size_t errlen);
void cpu_dense_free (cpu_dense_t *L);

/* Elements of one input step (STEP above) and bytes of a weight in DTYPE. */
static inline uint32_t cpu_dense_step (weight_dtype_t d) { return d == WEIGHT_DTYPE_BF16 ? 2 : d == WEIGHT_DTYPE_INT8 ? 4 : 1; }
static inline uint32_t cpu_dense_bytes (weight_dtype_t d)
{
    return d == WEIGHT_DTYPE_F32 ? 4 : d == WEIGHT_DTYPE_INT8 ? 1 : 2;
}
/* Inputs per k chunk for rows > 1 (a multiple of CPU_DENSE_KPAD). */
static inline uint32_t cpu_dense_chunk (weight_dtype_t d) { return CPU_DENSE_CHUNK_BYTES / (CPU_DENSE_GROUP * cpu_dense_bytes (d)); }

/* Where W[o][k] sits in the layout, in elements. */
static inline size_t cpu_dense_index (const cpu_dense_t *L, uint32_t o, uint32_t k)
{
    const uint32_t b = o / CPU_DENSE_BLOCK, j = o % CPU_DENSE_BLOCK, step = cpu_dense_step (L->dtype);
    return (size_t) b * CPU_DENSE_BLOCK * L->in_pad + ((size_t) (k / step) * CPU_DENSE_BLOCK + j) * step + k % step;
}

/* The weight W[o][k] as the kernels compute with it (the scale included for int8). */
float cpu_dense_weight (const cpu_dense_t *L, uint32_t o, uint32_t k);

/* A bf16 lane as the layout holds it (the NUMERICS above): LANE[0] the even input's weight (bf16,
 * nearest even), LANE[1] the odd's high half. Also the CPU LSTM's bf16 matrices. */
void cpu_dense_bf16_lane (float even, float odd, uint16_t lane[2]);

/* f16 <-> f32, round to nearest even (for machines without F16C: the scalar path and the packing). */
uint16_t cpu_dense_f16_from_f32 (float v);
float cpu_dense_f32_from_f16 (uint16_t h);

#endif
