/* Packing the dense layers into the CPU layout in each dtype (cpu_dense.h), at load. */
#include "backends/cpu_dense.h"

#include "base/floats.h"
#include "base/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t s_bits (float v)
{
    uint32_t u;
    memcpy (&u, &v, sizeof u);
    return u;
}

static float s_float (uint32_t u)
{
    float v;
    memcpy (&v, &u, sizeof v);
    return v;
}

uint16_t cpu_dense_f16_from_f32 (float v)
{
    const uint32_t u = s_bits (v), sign = u >> 16 & 0x8000;
    const uint32_t a = u & 0x7fffffff;
    if (a >= 0x7f800000)                            /* inf, nan */
        return (uint16_t) (sign | 0x7c00 | (a > 0x7f800000 ? 0x200 : 0));
    if (a >= 0x477ff000)                            /* rounds past 65504 */
        return (uint16_t) (sign | 0x7c00);
    if (a < 0x38800000) {                           /* below 2^-14: f16 subnormal (or 0) */
        /* the value in units of 2^-24, rounded to nearest even, by the FPU (exact: a's ulp is
         * at most 2^-37, and the sum below rounds once) */
        const float scaled = s_float (a) * 0x1p24f;
        const float r = (scaled + 0x1p23f) - 0x1p23f;   /* round to an integer, ties to even */
        return (uint16_t) (sign | (uint32_t) r);
    }
    /* normal: drop 13 mantissa bits, round to nearest even (a carry into the exponent is right) */
    const uint32_t rebias = a - ((uint32_t) (127 - 15) << 23);
    const uint32_t r = rebias + 0xfff + (rebias >> 13 & 1);
    return (uint16_t) (sign | r >> 13);
}

float cpu_dense_f32_from_f16 (uint16_t h)
{
    const uint32_t sign = (uint32_t) (h & 0x8000) << 16, e = h >> 10 & 0x1f, m = h & 0x3ff;
    if (e == 0)
        return s_float (sign | s_bits ((float) m * 0x1p-24f));     /* exact: m < 2^10 */
    if (e == 31)
        return s_float (sign | 0x7f800000 | m << 13);
    return s_float (sign | (e + 127 - 15) << 23 | m << 13);
}

static uint16_t s_bf16 (float v)
{
    const uint32_t u = s_bits (v);
    return (uint16_t) ((u + 0x7fff + (u >> 16 & 1)) >> 16);
}

/* The odd input's half of a bf16 lane: the H whose H:LO, read as fp32, is nearest W (cpu_dense.h).
 * The nearest lies among the truncation of W and its two neighbours of the same sign. */
static uint16_t s_bf16_high (float w, uint16_t lo)
{
    const uint32_t t = s_bits (w) >> 16;
    uint32_t best = t;
    double err = INFINITY;
    for (int d = -1; d <= 1; d++) {
        const uint32_t h = (t + (uint32_t) d) & 0xffff;
        if ((h ^ t) & 0x8000 || (h & 0x7f80) == 0x7f80)
            continue;       /* another sign, or inf / nan */
        const double e = fabs ((double) s_float (h << 16 | lo) - (double) w);
        if (e < err) {
            err = e;
            best = h;
        }
    }
    return (uint16_t) best;
}

void cpu_dense_bf16_lane (float even, float odd, uint16_t lane[2])
{
    lane[0] = s_bf16 (even);
    lane[1] = s_bf16_high (odd, lane[0]);
}

float cpu_dense_weight (const cpu_dense_t *L, uint32_t o, uint32_t k)
{
    const size_t i = cpu_dense_index (L, o, k);
    switch (L->dtype) {
    case WEIGHT_DTYPE_F32: return ((const float *) L->weight)[i];
    case WEIGHT_DTYPE_F16: return cpu_dense_f32_from_f16 (((const uint16_t *) L->weight)[i]);
    case WEIGHT_DTYPE_BF16: {
        const uint16_t *h = (const uint16_t *) L->weight + (i & ~(size_t) 1);   /* the lane: lo, hi */
        return i & 1 ? s_float ((uint32_t) h[1] << 16 | h[0]) : s_float ((uint32_t) h[0] << 16);
    }
    case WEIGHT_DTYPE_INT8: return (float) ((const int8_t *) L->weight)[i] * L->scale[o];
    }
    return 0;
}

void cpu_dense_free (cpu_dense_t *L)
{
    free (L->weight);
    free (L->bias);
    free (L->scale);
    free (L->rowsum);
    memset (L, 0, sizeof *L);
}

/* The first weight of SRC that DTYPE cannot hold, or -1. */
static long s_unheld (const dense_layer_t *src, weight_dtype_t dtype)
{
    const float limit = dtype == WEIGHT_DTYPE_F16 ? 65504.0f : 0x1.fep127f;    /* the largest finite */
    for (size_t i = 0; dtype != WEIGHT_DTYPE_F32 && dtype != WEIGHT_DTYPE_INT8 && i < (size_t) src->in * src->out; i++)
        if (!(fabsf (src->weight[i]) <= limit))
            return (long) i;
    return -1;
}

int cpu_dense_pack (cpu_dense_t *L, const dense_layer_t *src, weight_dtype_t dtype, const char *name, char *err,
                    size_t errlen)
{
    memset (L, 0, sizeof *L);
    L->in = src->in;
    L->out = src->out;
    const uint32_t kpad = dtype == WEIGHT_DTYPE_INT8 ? CPU_DENSE_KPAD_INT8 : CPU_DENSE_KPAD;
    L->in_pad = (src->in + kpad - 1) / kpad * kpad;
    L->out_pad = (src->out + CPU_DENSE_BLOCK - 1) / CPU_DENSE_BLOCK * CPU_DENSE_BLOCK;
    L->activation = src->activation;
    L->dtype = dtype;
    const long bad = s_unheld (src, dtype);
    if (bad >= 0) {
        sig_set_error (err, errlen, "weight_dtype \"%s\": weight %s [%ld][%ld] = %.9g does not fit in %s (largest "
                       "finite %s); use \"weight_dtype\": \"f32\"", weight_dtype_name (dtype), name, bad / (long) src->in,
                       bad % (long) src->in, (double) src->weight[bad], weight_dtype_name (dtype),
                       dtype == WEIGHT_DTYPE_F16 ? "65504" : "3.39e38");
        return -1;
    }
    if (dtype == WEIGHT_DTYPE_INT8 && L->in_pad > CPU_DENSE_INT8_MAX_IN) {
        sig_set_error (err, errlen, "weight_dtype \"int8\": %s has %u inputs, more than an int32 dot product of int8 "
                       "weights and u8 activations can sum (%u); use \"weight_dtype\": \"bf16\"", name, src->in,
                       CPU_DENSE_INT8_MAX_IN);
        return -1;
    }
    L->weight_bytes = (size_t) L->out_pad * L->in_pad * cpu_dense_bytes (dtype);
    L->weight = aligned_alloc (64, (L->weight_bytes + 63) / 64 * 64);
    L->bias = floats_zeroed (L->out_pad);
    if (dtype == WEIGHT_DTYPE_INT8) {
        L->scale = floats_zeroed (L->out_pad);
        /* read as whole 64-byte vectors (cpu_dense_body.h): aligned as the floats are */
        const size_t bytes = ((size_t) L->out_pad * sizeof *L->rowsum + 63) / 64 * 64;
        if ((L->rowsum = aligned_alloc (64, bytes)))
            memset (L->rowsum, 0, bytes);
    }
    if (!L->weight || !L->bias || (dtype == WEIGHT_DTYPE_INT8 && (!L->scale || !L->rowsum))) {
        sig_set_error (err, errlen, "out of memory packing %s", name);
        cpu_dense_free (L);
        return -1;
    }
    memset (L->weight, 0, L->weight_bytes);
    if (src->bias)
        memcpy (L->bias, src->bias, src->out * sizeof (float));
    for (uint32_t o = 0; o < src->out; o++) {
        const float *row = src->weight + (size_t) o * src->in;
        float inv = 0;
        if (dtype == WEIGHT_DTYPE_INT8) {
            float amax = 0;
            for (uint32_t k = 0; k < src->in; k++)
                amax = fmaxf (amax, fabsf (row[k]));
            L->scale[o] = amax / 127.0f;
            inv = amax > 0 ? 127.0f / amax : 0.0f;
        }
        for (uint32_t k = 0; k < src->in; k++) {
            const size_t i = cpu_dense_index (L, o, k);
            switch (dtype) {
            case WEIGHT_DTYPE_F32: ((float *) L->weight)[i] = row[k]; break;
            case WEIGHT_DTYPE_F16: ((uint16_t *) L->weight)[i] = cpu_dense_f16_from_f32 (row[k]); break;
            case WEIGHT_DTYPE_BF16: break;      /* by pairs, below */
            case WEIGHT_DTYPE_INT8: {
                const float q = fminf (fmaxf (nearbyintf (row[k] * inv), -127.0f), 127.0f);
                ((int8_t *) L->weight)[i] = (int8_t) q;
                L->rowsum[o] += (int32_t) q;
                break;
            }
            }
        }
        if (dtype == WEIGHT_DTYPE_BF16)
            for (uint32_t k = 0; k < L->in_pad; k += 2) {
                cpu_dense_bf16_lane (k < src->in ? row[k] : 0.0f, k + 1 < src->in ? row[k + 1] : 0.0f,
                                     (uint16_t *) L->weight + cpu_dense_index (L, o, k));
            }
    }
    return 0;
}
