/* sigbench's parts (main.c): the options, the input pool, the error check every table shares, and
 * the tables each file prints: gpu.c (tables 1-3), persistent.c (the persistent rows and their
 * floors), cpu.c (table 4: the CPU backend per weight dtype, its floors and its peers), split.c
 * (table 5: the CPU backend split across two or more cores beside one). */
#ifndef SIGBENCH_H
#define SIGBENCH_H

#include "backends/backend.h"
#include "latency.h"
#include "weights/weights.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define POOL 64   /* distinct inputs cycled through, so the timed calls do not see one input */
#define MAX_LAYERS 16
#define SB_SPLIT_MAX 16  /* --split: cores (backends/cpu_split.h: CPU_SPLIT_MAX_PARTS) */

typedef struct {
    uint32_t sizes[MAX_LAYERS + 1];
    size_t layers;
    uint32_t rows, iterations, warmup;
    int cpu;
    const char *weights;
    uint64_t seed;
    cuda_wait_t wait;
    int gpu;            /* 0: CPU tables only */
    int only_persistent;    /* the persistent rows and floors alone (memcheck, quick looks) */
    int variants;           /* also persistent variants: cluster sizes, completion, registers, reads */
    int green;              /* --green: the --instances rows each in a green context (model key green_context) */
    int trace;              /* also the traced instantiation of the persistent kernel: where its time goes */
    weight_dtype_t dtypes[3];   /* --dtypes: the persistent rows once per weight dtype (default f32) */
    int dtype_count;
    int devices[16];        /* --devices: the GPU tables once per device */
    int device_count;
    int device;             /* the device the tables run on now */
    const char *instances;  /* --instances: "" or counts of specialised persistent instances driven at once */
    uint32_t sync;          /* --sync: the persistent rows' hand-offs (SIG_SYNC_*; 0: the plan's choice) */
    weight_dtype_t cpu_dtypes[WEIGHT_DTYPE_COUNT];  /* --cpu-dtypes: the CPU table's loop rows */
    int cpu_dtype_count;
    int split;              /* --split A,B[,C..]: the split table, leader on A, helpers on B .. */
    int split_cpus[SB_SPLIT_MAX];
    int split_count;
    int split_only;         /* --split-only: of the CPU tables, that one alone */
} options_t;

static inline double sb_now_us (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

/* ||y - ref|| / ||ref|| pooled over a timed run. */
typedef struct { double num, den; } pooled_error_t;

static inline void sb_pool (pooled_error_t *p, const float *y, const double *ref, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        double d = (double) y[k] - ref[k];
        p->num += isfinite (d) ? d * d : INFINITY;
        p->den += ref[k] * ref[k];
    }
}

static inline double sb_pooled (const pooled_error_t *p) { return p->den > 0 ? sqrt (p->num / p->den) : sqrt (p->num); }

/* Table 4 (cpu.c): the CPU backend in each of o->cpu_dtypes, beside its floor and its peers. 0, or 1
 * when a row's outputs missed the error check. */
int sb_bench_cpu (const options_t *o, const weights_t *w, float *const *in, const double *const *ref);
/* oneDNN's matmul in DTYPE, one thread (onednn.c): its row printed, p50 in *P50 (SAMPLES: o->iterations
 * of room); the pooled relative error, or -1 where it did not run (the row says why). */
double sb_bench_onednn (const options_t *o, const weights_t *w, float *const *in, const double *const *ref,
                        weight_dtype_t dtype, double *samples, double *p50);
/* Table 5 (split.c): the loop kernel split across o->split_cpus beside one core, per dtype, with both
 * floors and the hand-off between the cores. 0, or 1 when a row missed the error check. */
int sb_bench_split (const options_t *o, const weights_t *w, float *const *in, const double *const *ref);

#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>

#define CUDA_OK(expr)                                                                              \
    do {                                                                                           \
        int rc_ = (int) (expr);                                                                    \
        if (rc_ != 0) {                                                                            \
            fprintf (stderr, "sigbench: %s: %s\n", #expr, cudaGetErrorString ((cudaError_t) rc_)); \
            exit (1);                                                                              \
        }                                                                                          \
    } while (0)

typedef enum { E2E_PAGEABLE, E2E_PINNED, E2E_PINNED_GRAPH } e2e_mode_t;

/* gpu.c */
extern bool sb_specialise;      /* persistent loads: the kernel specialised for the model (NVRTC) */
extern bool sb_green;           /* the next load with green_context */
double sb_elapsed_us (cudaEvent_t a, cudaEvent_t b);
backend_model_t *sb_load_gpu_held (const options_t *o, const weights_t *w, cuda_kernel_t kernel, bool zero_copy,
                                   weight_dtype_t dtype);
double sb_e2e_samples (const options_t *o, backend_model_t *m, const weights_t *w, e2e_mode_t mode, float *const *in,
                       const double *const *ref, double *samples);
double sb_bench_e2e (const options_t *o, backend_model_t *m, const weights_t *w, e2e_mode_t mode, float *const *in,
                     const double *const *ref, latency_summary_t *out);
/* Tables 1-3. 0 when they ran, -1 when there is no device (the reason printed), 1 when the
 * persistent rows missed an error bound. */
/* A table of rows over W: 0, or 1 when a row missed its error bound. */
typedef int (*sb_bench_fn) (const options_t *o, const weights_t *w, float *const *in, const double *const *ref);
int sb_bench_gpu (const options_t *o, const weights_t *w, float *const *in, const double *const *ref,
                  sb_bench_fn persistent);
/* persistent.c: the persistent rows of the end-to-end table and the floors beside them. */
int sb_bench_persistent (const options_t *o, const weights_t *w, float *const *in, const double *const *ref);
#endif

#endif
