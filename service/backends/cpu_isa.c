/* Run-time choice of the CPU backends' instruction paths (cpu_isa.h). */
#define _GNU_SOURCE
#include "backends/cpu_isa.h"

#include "base/log.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023      /* <asm/prctl.h>; not in every libc's headers */
#define XFEATURE_XTILEDATA 18

static cpu_features_t s_features;
static char s_found[256];               /* what cpuid and xgetbv said, for the log line */
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* XCR0: the register state the OS saves and restores (an instruction set the CPU has is usable only
 * when its registers are in it). */
static uint64_t s_xcr0 (void)
{
    uint32_t lo, hi;
    __asm__ volatile ("xgetbv" : "=a" (lo), "=d" (hi) : "c" (0));
    return (uint64_t) hi << 32 | lo;
}

static void s_detect (void)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    cpu_features_t *f = &s_features;
    if (!__get_cpuid (1, &a, &b, &c, &d))
        return;
    const bool osxsave = c >> 27 & 1, avx = c >> 28 & 1, fma = c >> 12 & 1, f16c = c >> 29 & 1;
    const uint64_t xcr0 = osxsave ? s_xcr0 () : 0;
    const bool ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0, tiles = (xcr0 & 0x60000) == 0x60000;
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (__get_cpuid_count (7, 0, &a, &b7, &c7, &d7) && a >= 1)
        __get_cpuid_count (7, 1, &a71, &b, &c, &d);
    f->avx2 = avx && ymm && fma && f16c && (b7 >> 5 & 1);
    f->avx512 = f->avx2 && zmm && (b7 >> 16 & 1) && (b7 >> 17 & 1) && (b7 >> 30 & 1) && (b7 >> 31 & 1);
    f->vnni = f->avx512 && (c7 >> 11 & 1);
    f->bf16 = f->avx512 && (a71 >> 5 & 1);
    f->amx_cpu = tiles && (d7 >> 22 & 1) && (d7 >> 24 & 1) && (d7 >> 25 & 1);
    snprintf (s_found, sizeof s_found, "%s%s%s%s%s%s%s", f->avx2 ? "avx2 fma f16c" : "no avx2",
              f->avx512 ? ", avx512f/bw/vl/dq" : zmm ? "" : " (the OS keeps no AVX-512 state)",
              f->vnni ? ", avx512_vnni" : "", f->bf16 ? ", avx512_bf16" : "", d7 >> 23 & 1 ? ", avx512_fp16" : "",
              f->amx_cpu ? ", amx (tile, bf16, int8)" : "", !tiles && (d7 >> 24 & 1) ? " (the OS keeps no AMX state)" : "");
}

static const char *const s_cap_names[CPU_PATH_COUNT] = { "scalar", "avx2", "avx512", "amx" };

int cpu_isa_cap (cpu_path_t *cap)
{
    *cap = CPU_PATH_AMX;
    const char *v = getenv ("SIGSERVE_CPU_ISA");
    if (!v || !*v)
        return 0;
    for (int i = 0; i < CPU_PATH_COUNT; i++)
        if (strcmp (v, s_cap_names[i]) == 0) {
            *cap = (cpu_path_t) i;
            return 0;
        }
    return -1;
}

const cpu_features_t *cpu_isa_features (void)
{
    pthread_once (&s_once, s_detect);
    static atomic_int logged;
    if (atomic_exchange (&logged, 1) == 0) {
        cpu_path_t cap;
        const int bad = cpu_isa_cap (&cap);
        const char *env = getenv ("SIGSERVE_CPU_ISA");
        log_info ("cpu: %s; dense layers run f32 and f16 on %s, bf16 on %s, int8 on %s (weights as the config "
                  "says: never a lower dtype)%s%s%s", s_found,
                  cpu_path_name (cpu_isa_path (WEIGHT_DTYPE_F32, 1, NULL, 0), WEIGHT_DTYPE_F32),
                  cpu_path_name (cpu_isa_path (WEIGHT_DTYPE_BF16, 1, NULL, 0), WEIGHT_DTYPE_BF16),
                  cpu_path_name (cpu_isa_path (WEIGHT_DTYPE_INT8, 1, NULL, 0), WEIGHT_DTYPE_INT8),
                  env && *env ? "; SIGSERVE_CPU_ISA=" : "", env && *env ? env : "",
                  bad ? " (not one of scalar, avx2, avx512, amx: ignored)" : cap < CPU_PATH_AMX ? " caps them" : "");
    }
    return &s_features;
}

int cpu_isa_amx_grant (void)
{
    static int answer = 1;      /* 1: not asked yet; asked at load, on the loading thread */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock (&lock);
    if (answer == 1)
        answer = cpu_isa_features ()->amx_cpu && syscall (SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
                 ? 0 : -1;
    const int rc = answer;
    pthread_mutex_unlock (&lock);
    return rc;
}

cpu_path_t cpu_isa_path (weight_dtype_t dtype, unsigned rows, char *why, size_t whylen)
{
    pthread_once (&s_once, s_detect);
    const cpu_features_t *f = &s_features;
    cpu_path_t cap;
    const bool capped = cpu_isa_cap (&cap) == 0 && cap < CPU_PATH_AMX;
    char because[96] = "";
    cpu_path_t p = CPU_PATH_SCALAR;
    /* AMX: batches of int8 (cpu_dense.h); bf16 and f32 have no AMX kernel (yet) */
    if (rows >= CPU_AMX_MIN_ROWS && dtype == WEIGHT_DTYPE_INT8 && f->amx_cpu && f->vnni && cap >= CPU_PATH_AMX
        && cpu_isa_amx_grant () == 0) {
        if (why)
            snprintf (why, whylen, "amx: tiles for batches of %u rows or more", CPU_AMX_MIN_ROWS);
        return CPU_PATH_AMX;
    }
    if (f->avx512 && (dtype != WEIGHT_DTYPE_INT8 || f->vnni) && cap >= CPU_PATH_AVX512)
        p = CPU_PATH_AVX512;
    else if (f->avx2 && cap >= CPU_PATH_AVX2) {
        p = CPU_PATH_AVX2;
        snprintf (because, sizeof because, "%s", cap < CPU_PATH_AVX512 && f->avx512 && (dtype != WEIGHT_DTYPE_INT8 || f->vnni)
                  ? "SIGSERVE_CPU_ISA caps it" : !f->avx512 ? "no AVX-512" : "no AVX512_VNNI");
    } else
        snprintf (because, sizeof because, "%s", f->avx2 ? "SIGSERVE_CPU_ISA caps it" : "no AVX2, FMA and F16C");
    if (why)
        snprintf (why, whylen, "%s%s%s%s", cpu_path_name (p, dtype), because[0] ? ": " : "", because,
                  capped && !because[0] ? " (under SIGSERVE_CPU_ISA)" : "");
    return p;
}

const char *cpu_path_name (cpu_path_t path, weight_dtype_t dtype)
{
    switch (path) {
    case CPU_PATH_SCALAR: return "scalar";
    case CPU_PATH_AVX2: return "avx2";
    case CPU_PATH_AVX512: return dtype == WEIGHT_DTYPE_INT8 ? "avx512-vnni" : "avx512";
    case CPU_PATH_AMX: return "amx";
    }
    return "?";
}
