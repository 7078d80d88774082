/* The dense layers on AVX2 + FMA + F16C (no AVX-512, or SIGSERVE_CPU_ISA=avx2): cpu_dense_body.h
 * compiled for it at 8 lanes (a block of 16 outputs: two registers). int8 without VNNI: each lane's four s8 x u8
 * products as two pmaddwd of the bytes widened to 16 bits (exact; pmaddubsw would saturate). */
#pragma GCC target ("avx2,fma,f16c")
#include <immintrin.h>
#include <stdint.h>

#define VW 8
typedef float vf __attribute__ ((vector_size (32)));
typedef int32_t vi __attribute__ ((vector_size (32)));
typedef uint32_t vu __attribute__ ((vector_size (32)));
typedef uint8_t vb __attribute__ ((vector_size (8)));

static inline vf s_bcast (float f) { return (vf) _mm256_set1_ps (f); }
static inline vf s_f16 (const uint16_t *p) { return (vf) _mm256_cvtph_ps (_mm_load_si128 ((const __m128i *) p)); }

/* the even bytes (inputs 0 and 2 of the lane) and the odd ones, each as two 16-bit halves of a lane */
typedef struct { __m256i even, odd; } s_x4_t;
static inline s_x4_t s_x4 (uint32_t x4)
{
    return (s_x4_t) { _mm256_set1_epi32 ((int) (x4 & 0x00ff00ffu)), _mm256_set1_epi32 ((int) (x4 >> 8 & 0x00ff00ffu)) };
}

static inline vi s_dot4 (vi acc, vi w, s_x4_t x)
{
    const __m256i even = _mm256_srai_epi16 (_mm256_slli_epi16 ((__m256i) w, 8), 8), odd = _mm256_srai_epi16 ((__m256i) w, 8);
    return acc + (vi) _mm256_add_epi32 (_mm256_madd_epi16 (even, x.even), _mm256_madd_epi16 (odd, x.odd));
}

static inline vi s_round (vf v) { return (vi) _mm256_cvtps_epi32 ((__m256) v); }
static inline vf s_max (vf a, vf b) { return (vf) _mm256_max_ps ((__m256) a, (__m256) b); }

static inline vf s_min (vf a, vf b) { return (vf) _mm256_min_ps ((__m256) a, (__m256) b); }

/* V's largest (least) lane: halves folded with OP (OP_SS for the last pair) */
#define S_FOLD(NAME, OP, OP_SS)                                                                               \
    static inline float NAME (vf v)                                                                           \
    {                                                                                                         \
        __m128 m = OP (_mm256_castps256_ps128 ((__m256) v), _mm256_extractf128_ps ((__m256) v, 1));           \
        m = OP (m, _mm_movehl_ps (m, m));                                                                     \
        return _mm_cvtss_f32 (OP_SS (m, _mm_shuffle_ps (m, m, 1)));                                           \
    }
S_FOLD (s_hmax, _mm_max_ps, _mm_max_ss)
S_FOLD (s_hmin, _mm_min_ps, _mm_min_ss)

/* Four vectors' lanes clamped to [0, 255] as 32 bytes at Q, in order (cpu_dense_avx512.c says how) */
static inline void s_u8x4 (uint8_t *q, vi a, vi b, vi c, vi d)
{
    const __m256i ab = _mm256_packus_epi32 ((__m256i) a, (__m256i) b), cd = _mm256_packus_epi32 ((__m256i) c, (__m256i) d);
    const __m256i order = _mm256_setr_epi32 (0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256 ((__m256i *) q, _mm256_permutevar8x32_epi32 (_mm256_packus_epi16 (ab, cd), order));
}

static inline vb s_u8 (vi t)
{
    const __m256i c = _mm256_min_epi32 (_mm256_max_epi32 ((__m256i) t, _mm256_setzero_si256 ()), _mm256_set1_epi32 (255));
    return __builtin_convertvector ((vi) c, vb);
}

static inline vf s_fma (vf a, vf b, vf c) { return (vf) _mm256_fmadd_ps ((__m256) a, (__m256) b, (__m256) c); }

/* 16 registers: a group's accumulators (two registers a block) must leave room for the loads: 8
 * chains (the FMA: 4 cycles, two a cycle) */
#define S_KU_F32(G) ((G) >= 3 ? 1 : (G) == 2 ? 2 : 4)
#define S_KU_F16(G) S_KU_F32 (G)
#define S_KU_BF16(G) ((G) >= 3 ? 1 : (G) == 2 ? 2 : 4)
#define S_KU_INT8(G) ((G) >= 2 ? 1 : 2)
#define S_KEEP(v) __asm__ ("" : "+x" (v))
#define S_INT8_TARGET
#define S_NAME cpu_dense_avx2
#define S_PATH "avx2"
#include "backends/cpu_dense_body.h"
