/* cpu-dot-probe: the instruction costs behind the CPU backend's choices (cpu_dense.h, docs/perf.md
 * "CPU weight dtypes"), on this core, p50 of many calls:
 *   1. register-only loops: latency (one chain) and throughput (16 chains) of vfmadd231ps,
 *      vdpbf16ps and vpdpbusd on zmm (the least of five tries);
 *   2. one 512x256 layer at rows 1, weights K-major in groups of 64 outputs, beside a streaming
 *      read of the same bytes: f32 FMAs; bf16 by vdpbf16ps (x in bf16), by a shift and a mask then
 *      two FMAs, by one shift (the odd weight read as the whole lane: the backend's), by no shift
 *      (the even weight read 2 bytes early, an unaligned load that splits lines), by the two mixed
 *      block by block, by vdpbf16ps for one or two blocks in four; int8 by vpdpbusd, and by AMX
 *      tdpbusd with one row in the A tile.
 * Needs AVX-512 with BF16 and VNNI (and AMX for the last row; skipped without it). Pin it:
 *     taskset -c 1 build/cpu-dot-probe [calls]
 * Not a test: numbers only, for the notes. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define IN 512
#define OUT 256
#define CHAINS_ITER 10000000L

static double s_now_ns (void)
{
    struct timespec t;
    clock_gettime (CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec * 1e9 + (double) t.tv_nsec;
}

static int s_cmp (const void *a, const void *b)
{
    const double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static volatile float s_fsink;
static volatile int s_isink;
static volatile uint64_t s_sink;

/* ---- 1. register-only loops ---- */

#define CHAIN_LOOP(T, INIT, OP, REDUCE)                                                                     \
    T a[16];                                                                                             \
    for (int i = 0; i < 16; i++)                                                                         \
        a[i] = INIT;                                                                                     \
    if (chains == 1)                                                                                     \
        for (long i = 0; i < CHAINS_ITER; i++)                                                           \
            a[0] = OP (a[0]);                                                                            \
    else                                                                                                 \
        for (long i = 0; i < CHAINS_ITER; i++) {                                                         \
            _Pragma ("GCC unroll 16") for (int j = 0; j < 16; j++) a[j] = OP (a[j]);                     \
        }                                                                                                \
    REDUCE

__attribute__ ((target ("avx512f"), noinline)) static void s_fma (int chains)
{
    const __m512 b = _mm512_set1_ps (1.0001f), c = _mm512_set1_ps (0.999f);
#define FMA_OP(x) _mm512_fmadd_ps (x, b, c)
    CHAIN_LOOP (__m512, _mm512_set1_ps ((float) i), FMA_OP, for (int i = 0; i < 16; i++) s_fsink += _mm512_reduce_add_ps (a[i]);)
}

__attribute__ ((target ("avx512f,avx512bf16"), noinline)) static void s_dpbf16 (int chains)
{
    const __m512bh b = (__m512bh) _mm512_set1_epi32 (0x3f803f80), c = (__m512bh) _mm512_set1_epi32 (0x3f003f00);
#define DPBF16_OP(x) _mm512_dpbf16_ps (x, b, c)
    CHAIN_LOOP (__m512, _mm512_set1_ps ((float) i), DPBF16_OP, for (int i = 0; i < 16; i++) s_fsink += _mm512_reduce_add_ps (a[i]);)
}

__attribute__ ((target ("avx512f,avx512vnni"), noinline)) static void s_dpbusd (int chains)
{
    const __m512i b = _mm512_set1_epi32 (0x01010101), c = _mm512_set1_epi32 (0x02020202);
#define DPBUSD_OP(x) _mm512_dpbusd_epi32 (x, b, c)
    CHAIN_LOOP (__m512i, _mm512_set1_epi32 (i), DPBUSD_OP, for (int i = 0; i < 16; i++) s_isink += _mm512_reduce_add_epi32 (a[i]);)
}

/* ---- 2. one layer ---- */

__attribute__ ((target ("avx512f"), noinline)) static void s_floor (const void *p, size_t n)
{
    const __m512i *v = p;
    __m512i a = _mm512_setzero_si512 (), b = a, c = a, d = a;
    for (size_t i = 0; i + 4 <= n / 64; i += 4) {
        a = _mm512_or_si512 (a, v[i]);
        b = _mm512_or_si512 (b, v[i + 1]);
        c = _mm512_or_si512 (c, v[i + 2]);
        d = _mm512_or_si512 (d, v[i + 3]);
    }
    s_sink = (uint64_t) _mm512_reduce_or_epi64 (_mm512_or_si512 (_mm512_or_si512 (a, b), _mm512_or_si512 (c, d)));
}

/* f32: W[g][k][64], 8 accumulators (2 k a step) */
__attribute__ ((target ("avx512f"), noinline)) static void s_f32 (const float *W, const float *x, float *y)
{
    for (int g = 0; g < OUT / 64; g++) {
        const float *w = W + (size_t) g * IN * 64;
        __m512 a[8];
        for (int i = 0; i < 8; i++)
            a[i] = _mm512_setzero_ps ();
        for (int k = 0; k < IN; k += 2) {
            const __m512 x0 = _mm512_set1_ps (x[k]), x1 = _mm512_set1_ps (x[k + 1]);
            for (int b = 0; b < 4; b++) {
                a[b] = _mm512_fmadd_ps (_mm512_load_ps (w + (size_t) k * 64 + 16 * b), x0, a[b]);
                a[4 + b] = _mm512_fmadd_ps (_mm512_load_ps (w + (size_t) (k + 1) * 64 + 16 * b), x1, a[4 + b]);
            }
        }
        for (int b = 0; b < 4; b++)
            _mm512_store_ps (y + 64 * g + 16 * b, _mm512_add_ps (a[b], a[4 + b]));
    }
}

/* bf16 lanes: W[g][k / 2][64][2]; MODE 0: vdpbf16ps (x as bf16 pairs), 1: shift and mask, 2: shift */
#define BF16_LAYER(NAME, TARGET, MODE)                                                                       \
    __attribute__ ((target (TARGET), noinline)) static void NAME (const uint16_t *W, const float *x,       \
                                                                  const uint32_t *x2, float *y)            \
    {                                                                                                      \
        for (int g = 0; g < OUT / 64; g++) {                                                               \
            const uint16_t *w = W + (size_t) g * IN * 64;                                                  \
            __m512 a[8];                                                                                   \
            for (int i = 0; i < 8; i++)                                                                    \
                a[i] = _mm512_setzero_ps ();                                                               \
            for (int p = 0; p < IN / 2; p++) {                                                             \
                const __m512 xe = _mm512_set1_ps (x[2 * p]), xo = _mm512_set1_ps (x[2 * p + 1]);           \
                for (int b = 0; b < 4; b++) {                                                              \
                    const uint16_t *wl = w + (size_t) p * 128 + 32 * b;                                    \
                    __m512i v = _mm512_load_si512 (wl);                                                    \
                    __asm__ ("" : "+v" (v));                                                               \
                    BF16_STEP_##MODE                                                                       \
                }                                                                                          \
            }                                                                                              \
            for (int b = 0; b < 4; b++)                                                                    \
                _mm512_store_ps (y + 64 * g + 16 * b, _mm512_add_ps (a[b], a[4 + b]));                     \
        }                                                                                                  \
        (void) x2;                                                                                         \
    }
#define BF16_STEP_0 a[b + 4 * (p & 1)] = _mm512_dpbf16_ps (a[b + 4 * (p & 1)], (__m512bh) v, (__m512bh) _mm512_set1_epi32 ((int) x2[p])); (void) xe; (void) xo;
#define BF16_STEP_1                                                                                          \
    a[b] = _mm512_fmadd_ps (_mm512_castsi512_ps (_mm512_slli_epi32 (v, 16)), xe, a[b]);                      \
    a[4 + b] = _mm512_fmadd_ps (_mm512_castsi512_ps (_mm512_and_si512 (v, _mm512_set1_epi32 ((int) 0xffff0000u))), xo, a[4 + b]);
#define BF16_STEP_2                                                                                          \
    a[b] = _mm512_fmadd_ps (_mm512_castsi512_ps (_mm512_slli_epi32 (v, 16)), xe, a[b]);                      \
    a[4 + b] = _mm512_fmadd_ps (_mm512_castsi512_ps (v), xo, a[4 + b]);
/* 3: the even weight read 2 bytes early (an unaligned load: lane i's high half is its even weight, its
 * low half the odd weight before it), no shift; 4: 3 for every other block, 2 for the rest (the shifts
 * on one port, the split loads on the load ports) */
#define BF16_STEP_3                                                                                          \
    a[b] = _mm512_fmadd_ps (_mm512_loadu_ps (wl - 1), xe, a[b]);                                             \
    a[4 + b] = _mm512_fmadd_ps (_mm512_castsi512_ps (v), xo, a[4 + b]);
#define BF16_STEP_4                                                                                          \
    if (b & 1) {                                                                                             \
        BF16_STEP_3                                                                                          \
    } else {                                                                                                 \
        BF16_STEP_2                                                                                          \
    }
#define BF16_STEP_5                                                                                          \
    if (b == 3) {                                                                                            \
        BF16_STEP_0                                                                                          \
    } else {                                                                                                 \
        BF16_STEP_2                                                                                          \
    }
#define BF16_STEP_6                                                                                          \
    if (b & 1) {                                                                                             \
        BF16_STEP_0                                                                                          \
    } else {                                                                                                 \
        BF16_STEP_2                                                                                          \
    }
BF16_LAYER (s_bf16_dp, "avx512f,avx512bf16", 0)
BF16_LAYER (s_bf16_dp1, "avx512f,avx512bf16", 5)
BF16_LAYER (s_bf16_dp2, "avx512f,avx512bf16", 6)
BF16_LAYER (s_bf16_early, "avx512f", 3)
BF16_LAYER (s_bf16_mixed, "avx512f", 4)
BF16_LAYER (s_bf16_mask, "avx512f", 1)
BF16_LAYER (s_bf16_shift, "avx512f", 2)

/* int8: W[g][k / 4][64][4], 8 accumulators */
__attribute__ ((target ("avx512f,avx512vnni"), noinline)) static void s_int8 (const int8_t *W, const uint8_t *q, int32_t *y)
{
    const uint32_t *q4 = (const uint32_t *) q;
    for (int g = 0; g < OUT / 64; g++) {
        const int8_t *w = W + (size_t) g * IN * 64;
        __m512i a[8];
        for (int i = 0; i < 8; i++)
            a[i] = _mm512_setzero_si512 ();
        for (int s = 0; s < IN / 4; s += 2)
            for (int u = 0; u < 2; u++) {
                const __m512i x = _mm512_set1_epi32 ((int) q4[s + u]);
                for (int b = 0; b < 4; b++)
                    a[4 * u + b] = _mm512_dpbusd_epi32 (a[4 * u + b], x, _mm512_load_si512 (w + (size_t) (s + u) * 256 + 64 * b));
            }
        for (int b = 0; b < 4; b++)
            _mm512_store_si512 (y + 64 * g + 16 * b, _mm512_add_epi32 (a[b], a[4 + b]));
    }
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__ ((packed)) tilecfg_t;

__attribute__ ((target ("amx-tile"))) static void s_tiles (void)
{
    tilecfg_t c;
    memset (&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = t < 5 ? 1 : 16;
        c.colsb[t] = 64;
    }
    __asm__ volatile ("" : : "r" (&c) : "memory");   /* GCC 12 drops the stores otherwise */
    _tile_loadconfig (&c);
}

__attribute__ ((target ("amx-tile,amx-int8"), noinline)) static void s_int8_amx (const int8_t *W, const uint8_t *q, int32_t *y)
{
    int32_t c[16][64] __attribute__ ((aligned (64)));
    for (int g = 0; g < OUT / 64; g++) {
        const int8_t *Wg = W + (size_t) g * IN * 64;
        _tile_zero (0);
        _tile_zero (1);
        _tile_zero (2);
        _tile_zero (3);
        for (int k = 0; k < IN; k += 64) {
            const int8_t *w = Wg + (size_t) k * 64;
            _tile_loadd (4, q + k, 64);
            _tile_loadd (5, w, 256);
            _tile_dpbusd (0, 4, 5);
            _tile_loadd (6, w + 64, 256);
            _tile_dpbusd (1, 4, 6);
            _tile_loadd (7, w + 128, 256);
            _tile_dpbusd (2, 4, 7);
            _tile_loadd (5, w + 192, 256);
            _tile_dpbusd (3, 4, 5);
        }
        _tile_stored (0, &c[0][0], 256);
        _tile_stored (1, &c[0][16], 256);
        _tile_stored (2, &c[0][32], 256);
        _tile_stored (3, &c[0][48], 256);
        memcpy (y + 64 * g, c[0], 256);
    }
}

static double *s_samples;
static long s_calls = 20000;

#define TIME_ROW(label, bytes, call)                                                                       \
    do {                                                                                                   \
        for (long i = 0; i < s_calls / 10; i++)                                                            \
            call;                                                                                          \
        for (long i = 0; i < s_calls; i++) {                                                               \
            const double t0 = s_now_ns ();                                                                 \
            call;                                                                                          \
            s_samples[i] = s_now_ns () - t0;                                                               \
        }                                                                                                  \
        qsort (s_samples, (size_t) s_calls, sizeof (double), s_cmp);                                       \
        const double p50 = s_samples[s_calls / 2];                                                         \
        printf ("| %s | %zu | %.0f | %.1f |\n", label, (size_t) (bytes), p50, (double) (bytes) / p50);     \
    } while (0)

int main (int argc, char **argv)
{
    if (argc > 1)
        s_calls = atol (argv[1]) > 100 ? atol (argv[1]) : 100;
    if (!__builtin_cpu_supports ("avx512f") || !__builtin_cpu_supports ("avx512bf16")
        || !__builtin_cpu_supports ("avx512vnni")) {
        printf ("cpu-dot-probe: needs AVX-512 with BF16 and VNNI\n");
        return 0;
    }
    printf ("### Register-only loops, ns an instruction (zmm)\n\n| instruction | latency (one chain) | throughput (16 chains) |\n"
            "| --- | ---: | ---: |\n");
    void (*const fns[3]) (int) = { s_fma, s_dpbf16, s_dpbusd };
    const char *names[3] = { "vfmadd231ps", "vdpbf16ps", "vpdpbusd" };
    for (int f = 0; f < 3; f++) {
        double lat = 1e9, tput = 1e9;   /* the least of 5 tries: a try another process preempts is longer */
        for (int r = 0; r < 5; r++) {
            double t = s_now_ns ();
            fns[f] (1);
            const double l = (s_now_ns () - t) / CHAINS_ITER;
            t = s_now_ns ();
            fns[f] (16);
            const double p = (s_now_ns () - t) / CHAINS_ITER / 16;
            lat = l < lat ? l : lat;
            tput = p < tput ? p : tput;
        }
        printf ("| %s | %.2f | %.3f |\n", names[f], lat, tput);
    }
    s_samples = malloc ((size_t) s_calls * sizeof (double));
    const size_t n = (size_t) IN * OUT;
    float *W = aligned_alloc (64, n * 4), *x = aligned_alloc (64, IN * 4), *y = aligned_alloc (64, OUT * 4);
    uint16_t *Wb = (uint16_t *) aligned_alloc (64, n * 2 + 64) + 32;   /* 64 bytes before it: read 2 early */
    int8_t *Wi = aligned_alloc (64, n);
    uint8_t *q = aligned_alloc (64, IN);
    uint32_t *x2 = aligned_alloc (64, IN * 2);
    for (size_t i = 0; i < n; i++) {
        W[i] = (float) ((int) (i * 2654435761u >> 20) % 1000 - 500) / 1e4f;
        Wb[i] = (uint16_t) (0x3c00 + (i * 40503u >> 8) % 256);
        Wi[i] = (int8_t) (i * 2654435761u >> 24);
    }
    for (int i = 0; i < IN; i++) {
        x[i] = (float) (i % 100) / 100.0f;
        q[i] = (uint8_t) (i * 37);
    }
    for (int i = 0; i < IN / 2; i++)
        x2[i] = 0x3f803f80u;
    printf ("\n### One %dx%d layer, rows 1, p50 of %ld calls\n\n| kernel | bytes | ns | B/ns |\n| --- | ---: | ---: | ---: |\n",
            OUT, IN, s_calls);
    TIME_ROW ("floor: a read of the f32 weights", n * 4, s_floor (W, n * 4));
    TIME_ROW ("f32, FMAs", n * 4, s_f32 (W, x, y));
    TIME_ROW ("floor: a read of the bf16 weights", n * 2, s_floor (Wb, n * 2));
    TIME_ROW ("bf16, vdpbf16ps (x in bf16)", n * 2, s_bf16_dp (Wb, x, x2, y));
    TIME_ROW ("bf16, shift and mask, two FMAs", n * 2, s_bf16_mask (Wb, x, x2, y));
    TIME_ROW ("bf16, one shift, two FMAs (the backend's)", n * 2, s_bf16_shift (Wb, x, x2, y));
    TIME_ROW ("bf16, the even weight read 2 bytes early, two FMAs", n * 2, s_bf16_early (Wb, x, x2, y));
    TIME_ROW ("bf16, every other block shifted, the rest read early", n * 2, s_bf16_mixed (Wb, x, x2, y));
    TIME_ROW ("bf16, one block in four by vdpbf16ps, the rest shifted", n * 2, s_bf16_dp1 (Wb, x, x2, y));
    TIME_ROW ("bf16, every other block by vdpbf16ps, the rest shifted", n * 2, s_bf16_dp2 (Wb, x, x2, y));
    TIME_ROW ("floor: a read of the int8 weights", n, s_floor (Wi, n));
    TIME_ROW ("int8, vpdpbusd", n, s_int8 (Wi, q, (int32_t *) y));
    if (__builtin_cpu_supports ("amx-int8") && syscall (SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) == 0) {
        s_tiles ();
        TIME_ROW ("int8, AMX tdpbusd (one row in the A tile)", n, s_int8_amx (Wi, q, (int32_t *) y));
    } else
        printf ("| int8, AMX: no AMX here (or the kernel did not grant it) | | | |\n");
    return 0;
}
