/* lstmbench's parts (main.c says what every row times): the options, a row of samples, the small
 * helpers every file uses, and what each file gives the others: rows.c (the rows of any backend: the
 * stream's step, round-robin, the full window), gpu.c (the CUDA rows: the floors, several instances
 * at once), trace.c (the traced kernel's records as rows), size.c (one size: every backend, weight
 * type and launch size asked for, the CPU's floors), check.c (--check). */
#ifndef LSTMBENCH_H
#define LSTMBENCH_H

#include "backends/backend_lstm.h"
#include "rng.h"
#include "weights/weights.h"
#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/backend_lstm_cuda.h"
#include "kernels.h"
#endif

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define CHECK_EVERY 500

typedef struct {
    const char *sizes, *dtypes, *backends;
    uint32_t iterations, warmup;
    double seconds;
    int cpu;
    uint64_t seed;
    cuda_wait_t wait;
    const char *blocks;     /* CUDA: "" (the plan's choice) or a list of cluster/grid sizes, a row each */
    int grid;
    uint32_t slots;
    int no_window, no_floors;
    const char *instances;  /* CUDA: "" or a list of instance counts, each driven at once (a row each) */
    const char *sync;       /* CUDA: a list of SIG_LSTM_SYNC_* values, the rows of each launch size per value */
    const char *math;       /* CUDA: a list of products (default, wide, half), the rows of each per value */
    int trace;              /* CUDA: also the traced instantiation, its phases as rows */
    int green;              /* CUDA: the --instances rows each in a green context (model key green_context) */
    uint32_t rr;            /* also the round-robin row of this many streams (0: none) */
    const char *rr_gap;     /* its steps' spacing, a list of fractions of the advance's time (a row each) */
    /* --check */
    const char *check, *backend, *dtype;
    uint32_t window;
    activation_t head_act;
} options_t;

static inline int lb_dtype (const char *s)
{
    return strcmp (s, "f32") == 0 ? WEIGHT_DTYPE_F32 : strcmp (s, "f16") == 0 ? WEIGHT_DTYPE_F16
                                                     : strcmp (s, "bf16") == 0 ? WEIGHT_DTYPE_BF16 : -1;
}

/* --math's names as tuning values (0: the plan's default) */
static inline uint32_t lb_math (const char *name)
{
#ifdef SIGSERVE_HAVE_CUDA
    return strcmp (name, "wide") == 0 ? SIG_LSTM_MATH_WIDE : strcmp (name, "half") == 0 ? SIG_LSTM_MATH_HALF : 0u;
#else
    (void) name;
    return 0u;
#endif
}

static inline const backend_iface_t *lb_iface (const char *name)
{
    if (strcmp (name, "cpu") == 0)
        return &backend_lstm_cpu_iface;
#ifdef SIGSERVE_HAVE_CUDA
    if (strcmp (name, "cuda") == 0)
        return &backend_lstm_cuda_iface;
#endif
    return NULL;
}

static inline void lb_fill (uint64_t *seed, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform (seed, -1.0f, 1.0f);
}

/* A row's samples (room for --iterations + 16) and what its checks found. */
typedef struct {
    double *samples;
    size_t n;
    double check;     /* the worst relative difference seen by the output checks (NAN: none) */
    char note[160];
} row_t;

/* rows.c: the row printed (LABEL, its count and note) as a line of the table. */
void lb_print (const char *label, row_t *r);
/* rows.c: the streaming critical path of one stream on slot 0 (CUDA: each advance waited for, not
 * timed); a window per CHECK_EVERY steps against the same backend's full window. 0, or -1 when an
 * output or a check failed (said on stderr). */
int lb_bench_step (const options_t *o, const backend_iface_t *B, backend_model_t *m, const lstm_weights_t *w, bool cuda,
                   uint64_t *seed, row_t *r);
/* rows.c: --rr, STREAMS streams stepping in turn, a round every GAP_US (0: back to back). 0 or -1. */
int lb_bench_rr (const options_t *o, const backend_iface_t *B, backend_model_t *m, const lstm_weights_t *w,
                 uint32_t streams, double gap_us, uint64_t *seed, row_t *r);
/* rows.c: whole windows (rows 1), one against the float64 reference. 0 or -1. */
int lb_bench_window (const options_t *o, const backend_iface_t *B, backend_model_t *m, const lstm_weights_t *w,
                     uint64_t *seed, row_t *r);

/* size.c: SIZE (a name or LAYERS:WINDOW:INPUTS:UNITS[:OUTPUTS]) on every backend and weight type asked
 * for, its weights written under DIR. 0, or -1 when a row failed. */
int lb_bench_size (const options_t *o, const char *size, uint64_t *seed, const char *dir);

/* check.c: --check, an export's outputs on stdin's inputs, for a test to compare. The exit status. */
int lb_check (const options_t *o);

#ifdef SIGSERVE_HAVE_CUDA
/* gpu.c: the LSTM kernel's own ring with IN features and no compute (its floor). 0 or -1. */
int lb_bench_ping (const options_t *o, backend_model_t *m, uint32_t in, uint64_t *seed, row_t *r);
/* gpu.c: the MLP persistent kernel's ping-pong floor reading IN floats. 0 or -1. */
int lb_bench_pingpong (const options_t *o, uint32_t in, uint64_t *seed, row_t *r);
/* gpu.c: N instances of SIZE's model on GPU 0, each driven by its own thread at once: a row. 0 or -1. */
int lb_bench_instances (const options_t *o, const char *size, const char *dname, uint32_t n, const weights_t *w,
                        model_config_t *cfg, uint64_t *seed);
/* trace.c: the records of the traced kernel (stopped) at device address TRACE as rows, block by
 * block; the buffer zeroed again for the next use. 0 or -1. */
int lb_trace_rows (const options_t *o, const char *size, const char *dname, const char *how, uint64_t trace,
                   size_t layers, row_t *r);
#endif

#endif
