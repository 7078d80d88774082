/* The CPU backends' vector math (backend_lstm_cpu.c, backend_gru_cpu.c): sixteen floats as one GCC
 * vector (an AVX-512 register, two AVX2 ones), and the exponential, sigmoid and tanh the recurrent
 * cells use. Every function is always inlined, so a kernel marked CLONES (compiled for AVX-512,
 * AVX2 and baseline x86-64; the loader picks at start) gets it in each of its target's instructions.
 * Exponentials are a vector Cephes expf (about 1 ulp); tanh (x) = 2 sigmoid (2x) - 1 (absolute
 * error ~1e-7): tests/tolerance.c bounds both. */
#ifndef SIGSERVE_VEC16_H
#define SIGSERVE_VEC16_H

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
    x = vec16_select (x > vec16_splat (88.0f), vec16_splat (88.0f), x);
    x = vec16_select (x < vec16_splat (-87.3f), vec16_splat (-87.3f), x);
    v16 fx = x * vec16_splat (1.44269504088896341f) + vec16_splat (0.5f);
    vi16 n = __builtin_convertvector (fx, vi16);       /* toward zero */
    v16 fn = __builtin_convertvector (n, v16);
    n += (vi16) (fn > fx);                              /* -1 where the truncation went up: floor */
    fn = __builtin_convertvector (n, v16);
    x = x - fn * vec16_splat (0.693359375f) - fn * vec16_splat (-2.12194440e-4f);
    const v16 z = x * x;
    v16 y = vec16_splat (1.9875691500e-4f);
    y = y * x + vec16_splat (1.3981999507e-3f);
    y = y * x + vec16_splat (8.3334519073e-3f);
    y = y * x + vec16_splat (4.1665795894e-2f);
    y = y * x + vec16_splat (1.6666665459e-1f);
    y = y * x + vec16_splat (5.0000001201e-1f);
    y = y * z + x + vec16_splat (1.0f);
    const vi16 scale = (n + 127) << 23;
    return y * (v16) scale;
}

VEC16_INLINE v16 vec16_sigmoid (v16 x) { return vec16_splat (1.0f) / (vec16_splat (1.0f) + vec16_exp (-x)); }
VEC16_INLINE v16 vec16_tanh (v16 x) { return vec16_splat (2.0f) * vec16_sigmoid (x + x) - vec16_splat (1.0f); }

#endif
