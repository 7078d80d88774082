/* The dense layers on AVX2 + FMA + F16C (no AVX-512, or SIGSERVE_CPU_ISA=avx2): cpu_dense_body.h
 * compiled for it, each 16-lane vector in two registers. int8 without VNNI: each lane's four s8 x u8
 * products as two pmaddwd of the bytes widened to 16 bits (exact; pmaddubsw would saturate). */
#pragma GCC target ("avx2,fma,f16c")
#include <immintrin.h>
#include <stdint.h>

typedef float v16f __attribute__ ((vector_size (64)));
typedef int32_t v16i __attribute__ ((vector_size (64)));
typedef uint32_t v16u __attribute__ ((vector_size (64)));
typedef uint8_t v16b __attribute__ ((vector_size (16)));
typedef int32_t v8i __attribute__ ((vector_size (32)));
typedef float v8f __attribute__ ((vector_size (32)));

static inline v16f s_bcast (float f)
{
    const v8f h = (v8f) _mm256_set1_ps (f);
    return __builtin_shufflevector (h, h, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
}

static inline v16f s_f16 (const uint16_t *p)
{
    const v8f lo = (v8f) _mm256_cvtph_ps (_mm_load_si128 ((const __m128i *) p));
    const v8f hi = (v8f) _mm256_cvtph_ps (_mm_load_si128 ((const __m128i *) (p + 8)));
    return __builtin_shufflevector (lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* the even bytes (inputs 0 and 2 of the lane) and the odd ones, each as two 16-bit halves of a lane */
typedef struct { __m256i even, odd; } s_x4_t;
static inline s_x4_t s_x4 (uint32_t x4)
{
    return (s_x4_t) { _mm256_set1_epi32 ((int) (x4 & 0x00ff00ffu)), _mm256_set1_epi32 ((int) (x4 >> 8 & 0x00ff00ffu)) };
}

static inline __m256i s_dot4_half (__m256i acc, __m256i w, s_x4_t x)
{
    const __m256i even = _mm256_srai_epi16 (_mm256_slli_epi16 (w, 8), 8), odd = _mm256_srai_epi16 (w, 8);
    return _mm256_add_epi32 (acc, _mm256_add_epi32 (_mm256_madd_epi16 (even, x.even), _mm256_madd_epi16 (odd, x.odd)));
}

static inline v16i s_dot4 (v16i acc, v16i w, s_x4_t x)
{
    const v8i lo = (v8i) s_dot4_half ((__m256i) __builtin_shufflevector (acc, acc, 0, 1, 2, 3, 4, 5, 6, 7),
                                      (__m256i) __builtin_shufflevector (w, w, 0, 1, 2, 3, 4, 5, 6, 7), x);
    const v8i hi = (v8i) s_dot4_half ((__m256i) __builtin_shufflevector (acc, acc, 8, 9, 10, 11, 12, 13, 14, 15),
                                      (__m256i) __builtin_shufflevector (w, w, 8, 9, 10, 11, 12, 13, 14, 15), x);
    return __builtin_shufflevector (lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

static inline v16i s_round (v16f v)
{
    const v8i lo = (v8i) _mm256_cvtps_epi32 ((__m256) __builtin_shufflevector (v, v, 0, 1, 2, 3, 4, 5, 6, 7));
    const v8i hi = (v8i) _mm256_cvtps_epi32 ((__m256) __builtin_shufflevector (v, v, 8, 9, 10, 11, 12, 13, 14, 15));
    return __builtin_shufflevector (lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

static inline v16f s_max (v16f a, v16f b)
{
    const v16i more = a > b;
    return (v16f) (((v16i) a & more) | ((v16i) b & ~more));
}

static inline float s_hmax (v16f v)
{
    float m = v[0];
    for (int i = 1; i < 16; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static inline int s_any (v16i m)
{
    const __m256i lo = (__m256i) __builtin_shufflevector (m, m, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i hi = (__m256i) __builtin_shufflevector (m, m, 8, 9, 10, 11, 12, 13, 14, 15);
    return !_mm256_testz_si256 (_mm256_or_si256 (lo, hi), _mm256_or_si256 (lo, hi));
}

static inline v16b s_u8 (v16i t)
{
    t &= t > 0;
    const v16i big = t > 255;
    return __builtin_convertvector ((t & ~big) | (255 & big), v16b);
}

static inline v16f s_fma (v16f a, v16f b, v16f c)
{
#define S_HALF(v, i) (__m256) __builtin_shufflevector (v, v, i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7)
    const v8f lo = (v8f) _mm256_fmadd_ps (S_HALF (a, 0), S_HALF (b, 0), S_HALF (c, 0));
    const v8f hi = (v8f) _mm256_fmadd_ps (S_HALF (a, 8), S_HALF (b, 8), S_HALF (c, 8));
#undef S_HALF
    return __builtin_shufflevector (lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* 16 registers: a group's accumulators (two registers a block) must leave room for the loads */
#define S_KU_F32(G) ((G) >= 3 ? 1 : (G) == 2 ? 2 : 4)
#define S_KU_BF16(G) ((G) >= 2 ? 1 : 2)
#define S_KU_F16(G) S_KU_F32 (G)
#define S_KU_INT8(G) ((G) >= 2 ? 1 : 2)

#define S_KEEP(v) (void) (v)
#define S_NAME cpu_dense_avx2
#define S_PATH "avx2"
#include "backends/cpu_dense_body.h"
