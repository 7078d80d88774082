/* The dense layers on AVX-512 (F, BW, VL, DQ; int8 with VNNI): cpu_dense_body.h compiled for it.
 * Called only where cpu_isa.h found those (the rest of the build targets baseline x86-64). */
#pragma GCC target ("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")
#include <immintrin.h>
#include <stdint.h>

typedef float v16f __attribute__ ((vector_size (64)));
typedef int32_t v16i __attribute__ ((vector_size (64)));
typedef uint32_t v16u __attribute__ ((vector_size (64)));
typedef uint8_t v16b __attribute__ ((vector_size (16)));

static inline v16f s_bcast (float f) { return (v16f) _mm512_set1_ps (f); }
static inline v16f s_f16 (const uint16_t *p) { return (v16f) _mm512_cvtph_ps (_mm256_load_si256 ((const __m256i *) p)); }

typedef __m512i s_x4_t;
static inline s_x4_t s_x4 (uint32_t x4) { return _mm512_set1_epi32 ((int) x4); }
static inline v16i s_dot4 (v16i acc, v16i w, s_x4_t x) { return (v16i) _mm512_dpbusd_epi32 ((__m512i) acc, x, (__m512i) w); }
static inline v16i s_round (v16f v) { return (v16i) _mm512_cvtps_epi32 ((__m512) v); }
static inline v16f s_max (v16f a, v16f b) { return (v16f) _mm512_max_ps ((__m512) a, (__m512) b); }
static inline float s_hmax (v16f v) { return _mm512_reduce_max_ps ((__m512) v); }
static inline int s_any (v16i m) { return _mm512_test_epi32_mask ((__m512i) m, (__m512i) m) != 0; }
static inline v16b s_u8 (v16i t) { return (v16b) _mm512_cvtusepi32_epi8 (_mm512_max_epi32 ((__m512i) t, _mm512_setzero_si512 ())); }
static inline v16f s_fma (v16f a, v16f b, v16f c) { return (v16f) _mm512_fmadd_ps ((__m512) a, (__m512) b, (__m512) c); }

/* 16 independent accumulator chains per group where the layout allows (in_pad is a multiple of 16):
 * a layer of one group (64 outputs or fewer) is otherwise bound by the FMA's (4 cycles) and
 * vpdpbusd's (5) latency, not by L2 (tick_mlp's 256x64 in int8: 0.24 us with 8, floor 0.11) */
#define S_KU_F32(G) ((G) >= 3 ? 4 : (G) == 2 ? 8 : 16)
#define S_KU_BF16(G) ((G) >= 3 ? 2 : (G) == 2 ? 4 : 8)
#define S_KU_F16(G) ((G) >= 3 ? 2 : (G) == 2 ? 4 : 8)  /* bound by vcvtph2ps (two uops), not latency */
#define S_KU_INT8(G) 4

#define S_KEEP(v) __asm__ ("" : "+v" (v))
#define S_NAME cpu_dense_avx512
#define S_PATH "avx512"
#include "backends/cpu_dense_body.h"
