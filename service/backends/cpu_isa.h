/* Which instructions the CPU backends may use, decided at run time (cpuid, xgetbv; AMX also needs the
 * kernel's grant, arch_prctl ARCH_REQ_XCOMP_PERM): the build targets baseline x86-64 and carries code
 * for each path (cpu_dense_*.c), and a model's load picks the best path this CPU and OS allow for its
 * weight dtype. What was found and chosen is logged once per process; the load's log line and
 * /models name the path each model runs.
 *
 * SIGSERVE_CPU_ISA (scalar, avx2, avx512 or amx) caps the paths, read at every load: the tests run
 * every lower path on one machine with it, and an operator can rule a path out. It never raises a
 * path over what the CPU has, and it never changes a model's dtype (precision is the config's). */
#ifndef SIGSERVE_CPU_ISA_H
#define SIGSERVE_CPU_ISA_H

#include "base/config.h"

#include <stdbool.h>
#include <stddef.h>

/* The paths, lowest first (a cap lets through those at or below it). */
typedef enum {
    CPU_PATH_SCALAR = 0,    /* plain C on any x86-64: the reference */
    CPU_PATH_AVX2,          /* AVX2 + FMA + F16C (Haswell, Zen) */
    CPU_PATH_AVX512,        /* AVX-512 F/BW/VL/DQ; int8 also needs AVX512_VNNI */
    CPU_PATH_AMX            /* AMX tiles (bf16, int8): batches only (cpu_dense.h says when) */
} cpu_path_t;
#define CPU_PATH_COUNT 4

/* What this CPU and OS allow (each with the OS's register state for it enabled). */
typedef struct {
    bool avx2;          /* avx2, fma, f16c */
    bool avx512;        /* avx512f, bw, vl, dq */
    bool vnni;          /* avx512_vnni */
    bool bf16;          /* avx512_bf16 (vdpbf16ps: not used, cpu_dense.h says why) */
    bool amx_cpu;       /* amx_tile, amx_bf16, amx_int8, and the OS saves tile state */
} cpu_features_t;

/* The features, detected once (thread-safe); the first call logs them. */
const cpu_features_t *cpu_isa_features (void);

/* The path a model holding weights in DTYPE runs for ROWS rows a call, under SIGSERVE_CPU_ISA; WHY
 * (may be NULL) says why, e.g. "avx2: SIGSERVE_CPU_ISA=avx2" or "avx2: no AVX512_VNNI". An unknown
 * SIGSERVE_CPU_ISA is logged (once) and ignored. AMX is returned only for ROWS >= CPU_AMX_MIN_ROWS
 * and once the kernel granted this process the tile state (asked here, once). */
#define CPU_AMX_MIN_ROWS 16
cpu_path_t cpu_isa_path (weight_dtype_t dtype, unsigned rows, char *why, size_t whylen);

/* "scalar", "avx2", "avx512", "avx512-vnni" (int8 on AVX-512), "amx". */
const char *cpu_path_name (cpu_path_t path, weight_dtype_t dtype);

/* The cap SIGSERVE_CPU_ISA sets now (CPU_PATH_AMX when unset): 0, or -1 for a value that is none of
 * the names (then *CAP is CPU_PATH_AMX). */
int cpu_isa_cap (cpu_path_t *cap);

/* Asks the kernel for the AMX tile state for this process (once; later calls return the first
 * answer): 0 when granted. */
int cpu_isa_amx_grant (void);

#endif
