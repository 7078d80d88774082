/* The dense layers on AVX-512 (F, BW, VL, DQ; int8 with VNNI): cpu_dense_body.h compiled for it; and
 * int8 batches on AMX tiles (cpu_dense_amx). Called only where cpu_isa.h found those (the rest of the
 * build targets baseline x86-64). Only the int8 functions may use VNNI, and only the AMX ones AMX
 * (their own target attributes): f32 runs on AVX-512 CPUs without either. */
#pragma GCC target ("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define VW 16
typedef float vf __attribute__ ((vector_size (64)));
typedef int32_t vi __attribute__ ((vector_size (64)));
typedef uint32_t vu __attribute__ ((vector_size (64)));
typedef uint8_t vb __attribute__ ((vector_size (16)));

static inline vf s_bcast (float f) { return (vf) _mm512_set1_ps (f); }
static inline vf s_f16 (const uint16_t *p) { return (vf) _mm512_cvtph_ps (_mm256_load_si256 ((const __m256i *) p)); }

typedef __m512i s_x4_t;
static inline s_x4_t s_x4 (uint32_t x4) { return _mm512_set1_epi32 ((int) x4); }
#define S_INT8_TARGET __attribute__ ((target ("avx512vnni")))
S_INT8_TARGET static inline vi s_dot4 (vi acc, vi w, s_x4_t x) { return (vi) _mm512_dpbusd_epi32 ((__m512i) acc, x, (__m512i) w); }
static inline vi s_round (vf v) { return (vi) _mm512_cvtps_epi32 ((__m512) v); }
static inline vf s_max (vf a, vf b) { return (vf) _mm512_max_ps ((__m512) a, (__m512) b); }
static inline vf s_min (vf a, vf b) { return (vf) _mm512_min_ps ((__m512) a, (__m512) b); }
static inline float s_hmax (vf v) { return _mm512_reduce_max_ps ((__m512) v); }
static inline float s_hmin (vf v) { return _mm512_reduce_min_ps ((__m512) v); }
static inline vb s_u8 (vi t) { return (vb) _mm512_cvtusepi32_epi8 (_mm512_max_epi32 ((__m512i) t, _mm512_setzero_si512 ())); }
/* Four vectors' lanes clamped to [0, 255] as 64 bytes at Q, in order: two packs with unsigned saturation
 * (in 128-bit lanes: a dword of four bytes from each vector in turn), then one permute puts the dwords
 * back in order (4 shuffles, where four s_u8 take 8) */
static inline void s_u8x4 (uint8_t *q, vi a, vi b, vi c, vi d)
{
    const __m512i ab = _mm512_packus_epi32 ((__m512i) a, (__m512i) b), cd = _mm512_packus_epi32 ((__m512i) c, (__m512i) d);
    const __m512i order = _mm512_setr_epi32 (0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512 (q, _mm512_permutexvar_epi32 (order, _mm512_packus_epi16 (ab, cd)));
}
static inline vf s_fma (vf a, vf b, vf c) { return (vf) _mm512_fmadd_ps ((__m512) a, (__m512) b, (__m512) c); }

/* Independent accumulator chains per group, where the layout allows (in_pad is a multiple of 16):
 * 16 for f32 and int8, 8 double-FMA chains for bf16; a layer of one group (64 outputs or fewer)
 * is otherwise bound by the FMA's (4 cycles) and vpdpbusd's (5) latency */
#define S_KU_F32(G) ((G) >= 3 ? 4 : (G) == 2 ? 8 : 16)
#define S_KU_F16(G) ((G) >= 3 ? 2 : (G) == 2 ? 4 : 8)   /* bound by vcvtph2ps (two uops), not latency */
#define S_KU_BF16(G) ((G) >= 3 ? 2 : (G) == 2 ? 4 : 8)
#define S_KU_INT8(G) 4
#define S_KEEP(v) __asm__ ("" : "+v" (v))
#define S_NAME cpu_dense_avx512
#define S_PATH "avx512"
#include "backends/cpu_dense_body.h"

/* ---------------------------------------------------------------- int8 batches on AMX */

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__ ((packed)) s_tilecfg_t;

/* Tiles 0-3: C, M rows x 16 int32 (a block of outputs each); 4: A, M rows x 64 u8; 5-7: B, 16 k quads x
 * 16 outputs x 4 s8. Loading a configuration zeroes every tile. */
#define S_AMX_TARGET __attribute__ ((target ("avx512vnni,amx-tile,amx-int8")))

S_AMX_TARGET static void s_tiles (unsigned m)
{
    s_tilecfg_t c;
    memset (&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = (uint8_t) (t < 5 ? m : 16);
        c.colsb[t] = 64;
    }
    /* GCC (12) does not see ldtilecfg read C: without this its stores are dropped */
    __asm__ volatile ("" : : "r" (&c) : "memory");
    _tile_loadconfig (&c);
}

S_AMX_TARGET static void s_dense_int8_amx (const cpu_dense_t *L, const cpu_dense_io_t *io)
{
    int32_t c[16][CPU_DENSE_GROUP] __attribute__ ((aligned (64)));
    for (uint32_t r0 = 0; r0 < io->rows; r0 += 16) {
        const unsigned m = io->rows - r0 < 16 ? io->rows - r0 : 16;
        if (r0 == 0 || m < 16)
            s_tiles (m);
        const uint8_t *q = io->q + (size_t) r0 * io->q_stride;
        const uint32_t o_end = io->o_end ? io->o_end : L->out_pad;
        const size_t bs = (size_t) CPU_DENSE_BLOCK * L->in_pad;       /* bytes from one block to the next */
        for (uint32_t g = io->o_begin; g < o_end; g += CPU_DENSE_GROUP) {
            /* this call's next blocks, up to 4 (cpu_dense_body.h's S_WALK): a B tile each, 1 KiB in one piece */
            const unsigned G = (o_end - g < CPU_DENSE_GROUP ? o_end - g : CPU_DENSE_GROUP) / CPU_DENSE_BLOCK;
            const int8_t *Wg = (const int8_t *) L->weight + (size_t) g * L->in_pad;
            _tile_zero (0);
            _tile_zero (1);
            _tile_zero (2);
            _tile_zero (3);
            for (uint32_t k = 0; k < L->in_pad; k += 64) {
                const int8_t *w = Wg + (size_t) k * CPU_DENSE_BLOCK;   /* slice k / 4 of each block */
                _tile_loadd (4, q + k, io->q_stride);
                _tile_loadd (5, w, 64);
                _tile_dpbusd (0, 4, 5);
                if (G > 1) {
                    _tile_loadd (6, w + bs, 64);
                    _tile_dpbusd (1, 4, 6);
                }
                if (G > 2) {
                    _tile_loadd (7, w + 2 * bs, 64);
                    _tile_dpbusd (2, 4, 7);
                }
                if (G > 3) {
                    _tile_loadd (5, w + 3 * bs, 64);
                    _tile_dpbusd (3, 4, 5);
                }
            }
            _tile_stored (0, &c[0][0], sizeof c[0]);
            _tile_stored (1, &c[0][16], sizeof c[0]);
            _tile_stored (2, &c[0][32], sizeof c[0]);
            _tile_stored (3, &c[0][48], sizeof c[0]);
            for (unsigned r = 0; r < m; r++)
                for (unsigned b = 0; b < G; b++)
                    s_int8_finish (L, io, r0 + r, g + 16 * b, *(const vi *) &c[r][16 * b]);
        }
    }
    _tile_release ();   /* the tiles back to their initial state: nothing for a context switch to save */
}

const cpu_dense_ops_t cpu_dense_amx = {
    .name = "amx",
    .dense = { [WEIGHT_DTYPE_INT8] = s_dense_int8_amx },
    .quantize = s_quantize,
};
