/* sigbench table 4: the CPU backend's loop kernel in each weight dtype (--cpu-dtypes), each beside its
 * floor, and its peers, all in one run on one core (--cpu):
 *   - cpu loop DTYPE (PATH): the backend's infer, the path cpu_isa chose (SIGSERVE_CPU_ISA caps it);
 *   - floor DTYPE: one streaming read of exactly the model's weight bytes in that dtype (the matrices,
 *     no biases or scales), with the path's loads (64 bytes on AVX-512, 32 on AVX2, 8 in C), timed
 *     like infer and call by call in turn with it: what reading the weights from L2 costs this core,
 *     the bound a kernel that reads every weight once cannot beat;
 *   - OpenBLAS sgemv, one thread, per layer, then bias and activation in C: the library peer for f32
 *     (it has no f16 or int8 GEMV, and Debian's build leaves out its bf16 routines: no
 *     cblas_sbgemv in libopenblas 0.3.21+ds). OpenBLAS picks its kernels from the CPU model at load: where a VM hides it, start
 *     with OPENBLAS_CORETYPE (the server warns; the row names the core it ran);
 *   - oneDNN's matmul in the same dtype after each backend row (onednn.c: f32 and bf16; where it
 *     has no kernel, or no dnnl.h was found at build time, its row says so).
 * Every timed output is checked against the float64 reference (a pooled relative error under a
 * sanity limit per dtype; the tests hold each output to its derived bound). */
#define _GNU_SOURCE
#include "sigbench.h"

#include "backends/cpu_isa.h"
#include "read_floor.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*read_fn) (const void *p, size_t n);

static void s_summary_row (const char *label, double *samples, uint32_t n, latency_summary_t *s)
{
    latency_summarize (samples, n, s);
    latency_print_row (stdout, label, s);
}

/* A floor: BYTES of weights read by the loads of PATH (a buffer of its own, as large). */
typedef struct {
    read_fn read;
    const char *loads;
    unsigned char *buf;
    size_t bytes;
} floor_t;

static void s_floor_open (floor_t *f, size_t bytes, cpu_path_t path)
{
    f->read = path >= CPU_PATH_AVX512 ? read_floor_64 : path == CPU_PATH_AVX2 ? read_floor_32 : read_floor_8;
    f->loads = path >= CPU_PATH_AVX512 ? "64-byte" : path == CPU_PATH_AVX2 ? "32-byte" : "8-byte";
    f->bytes = bytes;
    f->buf = aligned_alloc (64, (bytes + 63) / 64 * 64);
    for (size_t i = 0; i < bytes; i++)
        f->buf[i] = (unsigned char) (i * 2654435761u >> 13);
}

/* The backend (KERNEL, DTYPE), and its floor when FLOOR is not NULL: the two timed call by call in
 * turn, so both see the same machine (other processes' load comes and goes on a shared host); both
 * sets of weights stay in L2 (tick_mlp f32: 2 x 590 KB of 2 MiB). Rows printed; p50s in P50 and
 * FLOOR50. The pooled relative error, or -1 when the model did not load. */
static double s_bench_backend (const options_t *o, const weights_t *w, cpu_kernel_t kernel, weight_dtype_t dtype,
                               float *const *in, const double *const *ref, const floor_t *floor, double *samples,
                               double *p50, double *floor50)
{
    model_config_t cfg;
    memset (&cfg, 0, sizeof cfg);
    snprintf (cfg.name, sizeof cfg.name, "bench");
    cfg.cpu_kernel = kernel;
    cfg.max_rows = o->rows;
    cfg.weight_dtype = dtype;
    char err[512];
    backend_model_t *m = backend_cpu_iface.load (w, &cfg, cfg.device, err, sizeof err);
    if (!m) {
        fprintf (stderr, "sigbench: %s\n", err);
        return -1;
    }
    const size_t nout = (size_t) o->rows * w->output_size;
    float *y = malloc (nout * sizeof (float));
    double *floor_samples = samples + o->iterations;
    pooled_error_t error = { 0, 0 };
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        double t0 = sb_now_us ();
        backend_cpu_iface.infer (m, in[i % POOL], o->rows, y, err, sizeof err);
        double t1 = sb_now_us ();
        if (i >= o->warmup) {
            samples[i - o->warmup] = t1 - t0;
            /* one normalised error over every timed output, checked outside the timed region */
            sb_pool (&error, y, ref[i % POOL], nout);
        }
        if (floor) {
            t0 = sb_now_us ();
            floor->read (floor->buf, floor->bytes);
            t1 = sb_now_us ();
            if (i >= o->warmup)
                floor_samples[i - o->warmup] = t1 - t0;
        }
    }
    char label[160];
    if (kernel == CPU_KERNEL_BLAS)
        snprintf (label, sizeof label, "cpu blas f32 (OpenBLAS sgemv/sgemm, 1 thread, %s)", backend_cpu_iface.isa (m));
    else
        snprintf (label, sizeof label, "cpu loop %s (%s)", weight_dtype_name (dtype), backend_cpu_iface.isa (m));
    latency_summary_t s;
    s_summary_row (label, samples, o->iterations, &s);
    *p50 = s.p50;
    if (floor) {
        snprintf (label, sizeof label, "floor %s: one read of the %zu weight bytes (%s loads)", weight_dtype_name (dtype),
                  floor->bytes, floor->loads);
        s_summary_row (label, floor_samples, o->iterations, &s);
        *floor50 = s.p50;
    }
    free (y);
    backend_cpu_iface.destroy (&m);
    return sb_pooled (&error);
}

/* The pooled relative error a row may show (a sanity limit: the tests hold every output to its
 * derived bound): fp32's, the weights' rounding for f16 and bf16, int8's quantization. */
static double s_limit (weight_dtype_t d)
{
    return d == WEIGHT_DTYPE_F32 ? 1e-5 : d == WEIGHT_DTYPE_F16 ? 2e-3 : d == WEIGHT_DTYPE_BF16 ? 2e-2 : 5e-2;
}

int sb_bench_cpu (const options_t *o, const weights_t *w, float *const *in, const double *const *ref)
{
    double *samples = malloc (2 * (size_t) o->iterations * sizeof (double));
    cpu_path_t cap;
    const int bad_cap = cpu_isa_cap (&cap);
    const char *env = getenv ("SIGSERVE_CPU_ISA");
    printf ("### CPU backend, in process, %u iterations after %u warm-up, %s, host clock (CLOCK_MONOTONIC) around "
            "infer, microseconds%s%s%s\n\n", o->iterations, o->warmup, o->cpu >= 0 ? "pinned to one core" : "one thread",
            env ? "; SIGSERVE_CPU_ISA=" : "", env ? env : "", bad_cap ? " (ignored)" : "");
    latency_print_header (stdout, "method");
    int bad = 0;
    char notes[1024] = "";
    size_t used = 0;
    for (int d = 0; d < o->cpu_dtype_count; d++) {
        const weight_dtype_t dtype = o->cpu_dtypes[d];
        size_t bytes = 0;
        for (size_t l = 0; l < w->layer_count; l++)
            bytes += (size_t) w->layers[l].in * w->layers[l].out * (dtype == WEIGHT_DTYPE_F32 ? 4 : dtype == WEIGHT_DTYPE_INT8 ? 1 : 2);
        floor_t floor;
        s_floor_open (&floor, bytes, cpu_isa_path (dtype, o->rows, NULL, 0));
        double p50, floor50;
        const double e = s_bench_backend (o, w, CPU_KERNEL_LOOP, dtype, in, ref, &floor, samples, &p50, &floor50);
        free (floor.buf);
        if (e < 0) {
            bad = 1;
            continue;
        }
        double dnnl50 = 0;
        const double ed = sb_bench_onednn (o, w, in, ref, dtype, samples, &dnnl50);
        used += (size_t) snprintf (notes + used, sizeof notes - used, "%s%s %.2fx its floor (error %.2e)", used ? ", " : "",
                                   weight_dtype_name (dtype), p50 / floor50, e);
        if (ed >= 0 && used < sizeof notes)
            used += (size_t) snprintf (notes + used, sizeof notes - used, " and %.2fx oneDNN's (its error %.2e)",
                                       p50 / dnnl50, ed);
        if (ed >= 0 && !(ed <= s_limit (dtype))) {
            fprintf (stderr, "sigbench: oneDNN %s: relative error %.3g over %.0e\n", weight_dtype_name (dtype), ed,
                     s_limit (dtype));
            bad = 1;
        }
        if (!(e <= s_limit (dtype))) {
            fprintf (stderr, "sigbench: cpu loop %s: relative error %.3g over %.0e\n", weight_dtype_name (dtype), e,
                     s_limit (dtype));
            bad = 1;
        }
    }
    double p50, unused;
    const double eb = s_bench_backend (o, w, CPU_KERNEL_BLAS, WEIGHT_DTYPE_F32, in, ref, NULL, samples, &p50, &unused);
    printf ("\np50 over the floor of the same dtype: %s; relative error ||y - ref|| / ||ref|| against the float64 "
            "reference over every timed call: OpenBLAS %.2e\n\n", notes, eb);
    if (!(eb >= 0 && eb <= 1e-5))
        bad = 1;
    free (samples);
    return bad;
}
