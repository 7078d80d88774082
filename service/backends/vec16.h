/* The CPU backends' vector math (backend_lstm_cpu.c, backend_gru_cpu.c): sixteen floats as one GCC
 * vector (an AVX-512 register, two AVX2 ones), and the exponential, sigmoid and tanh the recurrent
 * cells use. Every function is always inlined, so a kernel marked CLONES (compiled for AVX-512,
 * AVX2 and baseline x86-64; the loader picks at start) gets it in each of its target's instructions.
 * Exponentials are a vector Cephes expf (about 1 ulp); tanh (x) = 2 sigmoid (2x) - 1 (absolute
 * error ~1e-7): tests/tolerance.c bounds both. Constants and inputs go in as scalar operands
 * (GCC broadcasts each once; vec16_splat's copies were broadcast again at every use). And the
 * dense products on K-major weights the GRU's f32 matrices run (the LSTM's run on cpu_dense.h's). */
#ifndef SIGSERVE_VEC16_H
#define SIGSERVE_VEC16_H

#include <stddef.h>
#include <stdint.h>

typedef float v16 __attribute__ ((vector_size (64)));
typedef int32_t vi16 __attribute__ ((vector_size (64)));

#define VEC16_INLINE static inline __attribute__ ((always_inline))
#define CLONES __attribute__ ((target_clones ("arch=x86-64-v4", "arch=x86-64-v3", "default")))

/* V in every lane (a brace list of sixteen copies compiled to sixteen masked broadcasts inside the clones) */
VEC16_INLINE v16 vec16_splat (float v)
{
    v16 r;
    __builtin_memcpy (&r, &(float[16]) { v }, 4);
    return __builtin_shufflevector (r, r, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

VEC16_INLINE v16 vec16_select (vi16 mask, v16 yes, v16 no) { return (v16) (((vi16) yes & mask) | ((vi16) no & ~mask)); }

/* Cephes expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-5 polynomial; about 1 ulp. Clamped to
 * [-87.3, 88] (normal results): sigmoid and tanh need nothing beyond. */
VEC16_INLINE v16 vec16_exp (v16 x)
{
    /* scalar operands throughout (GCC broadcasts them once, outside the loops; vec16_splat's here
     * were broadcast again at every use: a shuffle each, 110 in an LSTM cell update's loop) */
    x = vec16_select (x > 88.0f, (v16) {} + 88.0f, x);
    x = vec16_select (x < -87.3f, (v16) {} - 87.3f, x);
    v16 fx = x * 1.44269504088896341f + 0.5f;
    vi16 n = __builtin_convertvector (fx, vi16);       /* toward zero */
    v16 fn = __builtin_convertvector (n, v16);
    n += (vi16) (fn > fx);                              /* -1 where the truncation went up: floor */
    fn = __builtin_convertvector (n, v16);
    x = x - fn * 0.693359375f - fn * -2.12194440e-4f;
    const v16 z = x * x;
    v16 y = x * 1.9875691500e-4f + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * z + x + 1.0f;
    const vi16 scale = (n + 127) << 23;
    return y * (v16) scale;
}

VEC16_INLINE v16 vec16_sigmoid (v16 x) { return 1.0f / (1.0f + vec16_exp (-x)); }
VEC16_INLINE v16 vec16_tanh (v16 x) { return 2.0f * vec16_sigmoid (x + x) - 1.0f; }

/* The GRU's dense products on K-major weights (Wt: K rows of N floats, the columns
 * gate-blocked by 16, rows 64-byte aligned). Inlined into each kernel, so J is a constant there. */

/* Outputs NB .. NB + 16 J (J at most 8 accumulators) of y = b1 (+ b2) + sum_k Wt[k] x[k]; B1, B2 may
 * be NULL. */
VEC16_INLINE void vec16_gemv_block (const float *restrict Wt, uint32_t K, uint32_t N, const float *restrict x,
                                    const float *b1, const float *b2, float *restrict y, uint32_t nb, const int J)
{
    v16 acc[8];
    for (int j = 0; j < J; j++) {
        acc[j] = b1 ? *(const v16 *) (b1 + nb + 16 * j) : vec16_splat (0.0f);
        if (b2)
            acc[j] += *(const v16 *) (b2 + nb + 16 * j);
    }
    const float *w = Wt + nb;
    for (uint32_t k = 0; k < K; k++, w += N) {
        const float xk = x[k];  /* a scalar operand: one broadcast load (vec16_splat's cost a shuffle more) */
        for (int j = 0; j < J; j++)
            acc[j] += *(const v16 *) __builtin_assume_aligned (w + 16 * j, 64) * xk;
    }
    for (int j = 0; j < J; j++)
        *(v16 *) (y + nb + 16 * j) = acc[j];
}

/* Outputs NB .. NB + 16 J (J at most 4) of T rows: Y[t] = (BIAS ? bias : 0) + sum_k Wt[k] X[t][k] (rows
 * XS and YS floats apart), in tiles of 4 rows (4 J accumulators), so each weight vector loaded
 * serves four steps. */
VEC16_INLINE void vec16_gemm_cols (const float *restrict Wt, uint32_t K, uint32_t N, const float *restrict X, size_t xs,
                                   uint32_t T, float *restrict Y, size_t ys, const float *bias, uint32_t nb, const int J)
{
    for (uint32_t t0 = 0; t0 < T; t0 += 4) {
        const float *xr[4];
        for (int r = 0; r < 4; r++)   /* past the last row: recompute the last, store nothing */
            xr[r] = X + (size_t) (t0 + (uint32_t) r < T ? t0 + (uint32_t) r : T - 1) * xs;
        v16 acc[4][4];
        for (int j = 0; j < J; j++) {
            const v16 b = bias ? *(const v16 *) (bias + nb + 16 * j) : vec16_splat (0.0f);
            for (int r = 0; r < 4; r++)
                acc[r][j] = b;
        }
        const float *w = Wt + nb;
        for (uint32_t k = 0; k < K; k++, w += N) {
            v16 wv[4];
            for (int j = 0; j < J; j++)
                wv[j] = *(const v16 *) __builtin_assume_aligned (w + 16 * j, 64);
            for (int r = 0; r < 4; r++) {
                const float xk = xr[r][k];
                for (int j = 0; j < J; j++)
                    acc[r][j] += wv[j] * xk;
            }
        }
        for (int r = 0; r < 4 && t0 + (uint32_t) r < T; r++)
            for (int j = 0; j < J; j++)
                *(v16 *) (Y + (size_t) (t0 + r) * ys + nb + 16 * j) = acc[r][j];
    }
}

#endif
