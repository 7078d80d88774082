/* The CPU floors of the benchmarks (sigbench's table 4, lstmbench's CPU rows): one streaming read
 * of N bytes from P (64-byte aligned) and nothing else, with the loads of an instruction path:
 * 64 bytes (AVX-512), 32 (AVX2) or 8 (plain C). What reading a model's weights costs the core, the
 * bound a kernel that reads every weight once cannot beat. Header only: each benchmark's own copy
 * of the loops, compiled for their targets whatever the build's. */
#ifndef SIGSERVE_READ_FLOOR_H
#define SIGSERVE_READ_FLOOR_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

static volatile uint64_t read_floor_sink;   /* what was read, so no load is optimised away */

__attribute__ ((target ("avx512f"))) static inline void read_floor_64 (const void *p, size_t n)
{
    const __m512i *v = p;
    __m512i a = _mm512_setzero_si512 (), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 4 <= n / 64; i += 4) {
        a = _mm512_or_si512 (a, _mm512_load_si512 (v + i));
        b = _mm512_or_si512 (b, _mm512_load_si512 (v + i + 1));
        c = _mm512_or_si512 (c, _mm512_load_si512 (v + i + 2));
        d = _mm512_or_si512 (d, _mm512_load_si512 (v + i + 3));
    }
    for (; i < n / 64; i++)
        a = _mm512_or_si512 (a, _mm512_load_si512 (v + i));
    a = _mm512_or_si512 (_mm512_or_si512 (a, b), _mm512_or_si512 (c, d));
    read_floor_sink = (uint64_t) _mm512_reduce_or_epi64 (a);
}

__attribute__ ((target ("avx2"))) static inline void read_floor_32 (const void *p, size_t n)
{
    const __m256i *v = p;
    __m256i a = _mm256_setzero_si256 (), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 4 <= n / 32; i += 4) {
        a = _mm256_or_si256 (a, _mm256_load_si256 (v + i));
        b = _mm256_or_si256 (b, _mm256_load_si256 (v + i + 1));
        c = _mm256_or_si256 (c, _mm256_load_si256 (v + i + 2));
        d = _mm256_or_si256 (d, _mm256_load_si256 (v + i + 3));
    }
    for (; i < n / 32; i++)
        a = _mm256_or_si256 (a, _mm256_load_si256 (v + i));
    a = _mm256_or_si256 (_mm256_or_si256 (a, b), _mm256_or_si256 (c, d));
    read_floor_sink = (uint64_t) _mm256_extract_epi64 (a, 0) | (uint64_t) _mm256_extract_epi64 (a, 3);
}

static inline void read_floor_8 (const void *p, size_t n)
{
    const volatile uint64_t *v = p;     /* volatile: the compiler would widen the loads */
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i + 2 <= n / 8; i += 2) {
        a |= v[i];
        b |= v[i + 1];
    }
    read_floor_sink = a | b;
}

#endif
