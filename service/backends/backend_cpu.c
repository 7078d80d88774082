/* CPU backend: fused dense layers (GEMV + bias + activation) on one core.
 * Two kernels, chosen per model by "cpu_kernel":
 *   loop: hand-written; weights copied at load into rows padded to a multiple of 16 floats and
 *         64-byte aligned, so the dot products run on whole 16-float vectors with no tail, eight
 *         output neurons at a time so each input vector load serves eight weight rows; a batch
 *         of rows is one pass over the weights (each block of eight weight rows serves every row).
 *         Compiled for AVX-512, AVX2 and baseline x86-64; the loader picks at start.
 *   blas: OpenBLAS sgemv (rows == 1) / sgemm (rows > 1) with one thread, then bias + activation.
 * Everything is allocated at load; infer allocates nothing. */
#include "backends/backend.h"
#include "base/floats.h"
#include "base/log.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VEC 16   /* floats per vector and the padding unit of every row */

typedef float v16 __attribute__ ((vector_size (64)));

typedef struct {
    uint32_t in, out;           /* logical sizes */
    uint32_t in_pad;            /* in rounded up to VEC */
    activation_t activation;
    float *weight;              /* loop: [out][in_pad], zero-padded; blas: [out][in] */
    float *bias;                /* [out] */
} cpu_layer_t;

struct backend_model {
    cpu_kernel_t kernel;
    uint32_t max_rows;          /* rows one call may carry (backend_rows) */
    size_t layer_count;
    cpu_layer_t *layers;
    uint32_t input_size, output_size;
    uint32_t act_stride;        /* floats per row in the activation buffers (widest, padded) */
    float *act[2];              /* ping-pong activations: max_rows x act_stride, padding zero */
};

static size_t s_pad (size_t n) { return (n + VEC - 1) / VEC * VEC; }

#define ROWS_PER_BLOCK 8   /* independent accumulator chains: enough to keep both FMA ports busy */

typedef float v8 __attribute__ ((vector_size (32)));
typedef float v4 __attribute__ ((vector_size (16)));

/* A tree of shuffles and adds (four steps), not sixteen dependent scalar adds. */
static inline float s_hsum (v16 v)
{
    v8 h = __builtin_shufflevector (v, v, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector (v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    v4 q = __builtin_shufflevector (h, h, 0, 1, 2, 3) + __builtin_shufflevector (h, h, 4, 5, 6, 7);
    return (q[0] + q[2]) + (q[1] + q[3]);
}


/* Outputs o .. o + ROWS_PER_BLOCK - 1 for one row: x and every W row hold in_pad floats, zero
 * beyond in. */
static inline __attribute__ ((always_inline)) void s_block (const cpu_layer_t *L, uint32_t o, const v16 *xv, float *y)
{
    const uint32_t n = L->in_pad / VEC;
    const v16 *w = (const v16 *) __builtin_assume_aligned (L->weight + (size_t) o * L->in_pad, 64);
    v16 a[ROWS_PER_BLOCK] = { { 0 } };
    for (uint32_t k = 0; k < n; k++) {
        v16 xk = xv[k];
        for (int r = 0; r < ROWS_PER_BLOCK; r++)
            a[r] += w[(size_t) r * n + k] * xk;
    }
    for (int r = 0; r < ROWS_PER_BLOCK; r++)
        y[o + r] = backend_activate (s_hsum (a[r]) + L->bias[o + r], L->activation);
}

/* Output o alone (the tail past the last whole block). */
static inline __attribute__ ((always_inline)) void s_single (const cpu_layer_t *L, uint32_t o, const v16 *xv, float *y)
{
    const uint32_t n = L->in_pad / VEC;
    const v16 *w = (const v16 *) __builtin_assume_aligned (L->weight + (size_t) o * L->in_pad, 64);
    v16 a = { 0 }, b = { 0 };
    uint32_t k = 0;
    for (; k + 2 <= n; k += 2) {
        a += w[k] * xv[k];
        b += w[k + 1] * xv[k + 1];
    }
    if (k < n)
        a += w[k] * xv[k];
    y[o] = backend_activate (s_hsum (a + b) + L->bias[o], L->activation);
}

/* y[r][o] = act(W[o] . x[r] + b[o]) for ROWS rows STRIDE floats apart. One pass over the weights:
 * a block of ROWS_PER_BLOCK weight rows (16 KiB at 512 inputs) serves every row of the batch from
 * L1 before the next block is read, instead of the whole matrix being read again from L2 per row. */
__attribute__ ((target_clones ("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void s_dense (const cpu_layer_t *L, const float *restrict x, uint32_t rows, uint32_t stride, float *restrict y)
{
    uint32_t o = 0;
    for (; o + ROWS_PER_BLOCK <= L->out; o += ROWS_PER_BLOCK)
        for (uint32_t r = 0; r < rows; r++)
            s_block (L, o, (const v16 *) __builtin_assume_aligned (x + (size_t) r * stride, 64), y + (size_t) r * stride);
    for (; o < L->out; o++)
        for (uint32_t r = 0; r < rows; r++)
            s_single (L, o, (const v16 *) __builtin_assume_aligned (x + (size_t) r * stride, 64), y + (size_t) r * stride);
}

static void s_biabackend_activate (const cpu_layer_t *L, float *y, uint32_t rows, uint32_t stride)
{
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t o = 0; o < L->out; o++)
            y[(size_t) r * stride + o] = backend_activate (y[(size_t) r * stride + o] + L->bias[o], L->activation);
}

static void s_dense_blas (const cpu_layer_t *L, const float *x, uint32_t x_stride, float *y,
                          uint32_t y_stride, uint32_t rows)
{
    if (rows == 1)
        cblas_sgemv (CblasRowMajor, CblasNoTrans, (int) L->out, (int) L->in, 1.0f, L->weight,
                     (int) L->in, x, 1, 0.0f, y, 1);
    else
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, (int) rows, (int) L->out, (int) L->in,
                     1.0f, x, (int) x_stride, L->weight, (int) L->in, 0.0f, y, (int) y_stride);
    s_biabackend_activate (L, y, rows, y_stride);
}

static void s_cpu_destroy (backend_model_t **m_p)
{
    if (m_p && *m_p) {
        backend_model_t *m = *m_p;
        for (size_t i = 0; m->layers && i < m->layer_count; i++) {
            free (m->layers[i].weight);
            free (m->layers[i].bias);
        }
        free (m->layers);
        free (m->act[0]);
        free (m->act[1]);
        free (m);
        *m_p = NULL;
    }
}

static int s_copy_layer (cpu_layer_t *dst, const dense_layer_t *src, cpu_kernel_t kernel)
{
    dst->in = src->in;
    dst->out = src->out;
    dst->activation = src->activation;
    dst->in_pad = kernel == CPU_KERNEL_LOOP ? (uint32_t) s_pad (src->in) : src->in;
    dst->weight = floats_zeroed ((size_t) src->out * dst->in_pad);
    dst->bias = floats_zeroed (src->out);
    if (!dst->weight || !dst->bias)
        return -1;
    for (uint32_t o = 0; o < src->out; o++)
        memcpy (dst->weight + (size_t) o * dst->in_pad, src->weight + (size_t) o * src->in,
                src->in * sizeof (float));
    memcpy (dst->bias, src->bias, src->out * sizeof (float));
    return 0;
}

static sig_status_t s_cpu_infer (backend_model_t *m, const float *in, uint32_t rows, float *out,
                                 char *err, size_t errlen);

/* OpenBLAS picks its kernels from the CPU model number at load; in VMs that mask it (seen: 0.3.21 on
 * a Sapphire Rapids guest) it falls back to "Prescott" SSE3 kernels, ~5x slower. Say so. */
static void s_warn_generic_openblas (void)
{
    static int warned = 0;      /* once per process: models load on one thread, at start */
    const char *core = openblas_get_corename ();
    if (!warned++ && core && (strcmp (core, "Prescott") == 0 || strcmp (core, "Core2") == 0 || strcmp (core, "Nehalem") == 0)
        && __builtin_cpu_supports ("avx2"))
        log_warn ("OpenBLAS chose its %s kernels on a CPU with AVX2%s: cpu_kernel \"blas\" will be slow; "
                  "start with OPENBLAS_CORETYPE=%s or use cpu_kernel \"loop\"", core,
                  __builtin_cpu_supports ("avx512f") ? " and AVX-512" : "",
                  __builtin_cpu_supports ("avx512f") ? "SkylakeX" : "Haswell");
}

static backend_model_t *s_cpu_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    backend_model_t *m = calloc (1, sizeof *m);
    if (!m)
        goto oom;
    m->kernel = cfg->cpu_kernel;
    (void) device;
    m->max_rows = backend_rows (cfg);
    m->layer_count = w->layer_count;
    m->input_size = w->input_size;
    m->output_size = w->output_size;
    m->act_stride = (uint32_t) s_pad (w->widest);
    m->layers = calloc (w->layer_count, sizeof *m->layers);
    m->act[0] = floats_zeroed ((size_t) m->max_rows * m->act_stride);
    m->act[1] = floats_zeroed ((size_t) m->max_rows * m->act_stride);
    if (!m->layers || !m->act[0] || !m->act[1])
        goto oom;
    for (size_t i = 0; i < w->layer_count; i++)
        if (s_copy_layer (&m->layers[i], &w->layers[i], m->kernel) != 0)
            goto oom;
    if (m->kernel == CPU_KERNEL_BLAS) {
        openblas_set_num_threads (1);   /* one core per model: threads would wreck the tail */
        s_warn_generic_openblas ();
    }
    /* Warm: page in the weights and buffers, and let the loader resolve the kernel clones. */
    float *probe_out = floats_zeroed ((size_t) m->max_rows * m->output_size);
    if (!probe_out)
        goto oom;
    for (int i = 0; i < 8; i++)
        s_cpu_infer (m, m->act[1], m->max_rows, probe_out, err, errlen);
    free (probe_out);
    memset (m->act[0], 0, (size_t) m->max_rows * m->act_stride * sizeof (float));
    memset (m->act[1], 0, (size_t) m->max_rows * m->act_stride * sizeof (float));
    return m;
oom:
    snprintf (err, errlen, "model \"%s\": out of memory loading the CPU backend", cfg->name);
    s_cpu_destroy (&m);
    return NULL;
}

static sig_status_t s_cpu_infer (backend_model_t *m, const float *in, uint32_t rows, float *out,
                                 char *err, size_t errlen)
{
    (void) err;
    (void) errlen;
    const uint32_t stride = m->act_stride;
    /* Rows go into the padded activation buffer. A wider layer may have left values past
     * input_size in it, so the few floats up to the padding boundary are cleared each time. */
    const uint32_t in_pad = (uint32_t) s_pad (m->input_size);
    for (uint32_t r = 0; r < rows; r++) {
        float *row = m->act[0] + (size_t) r * stride;
        memcpy (row, in + (size_t) r * m->input_size, m->input_size * sizeof (float));
        memset (row + m->input_size, 0, (in_pad - m->input_size) * sizeof (float));
    }
    int cur = 0;
    for (size_t i = 0; i < m->layer_count; i++) {
        const cpu_layer_t *L = &m->layers[i];
        float *x = m->act[cur], *y = m->act[cur ^ 1];
        if (m->kernel == CPU_KERNEL_BLAS)
            s_dense_blas (L, x, stride, y, stride, rows);
        else
            s_dense (L, x, rows, stride, y);
        /* The next layer reads in_pad floats: whatever a wider earlier layer left past out must
         * be zero again. Only the few floats up to the padding boundary need clearing. */
        uint32_t pad = (uint32_t) s_pad (L->out);
        if (pad > L->out)
            for (uint32_t r = 0; r < rows; r++)
                memset (y + (size_t) r * stride + L->out, 0, (pad - L->out) * sizeof (float));
        cur ^= 1;
    }
    for (uint32_t r = 0; r < rows; r++)
        memcpy (out + (size_t) r * m->output_size, m->act[cur] + (size_t) r * stride, m->output_size * sizeof (float));
    return SIG_OK;
}

static const char *s_cpu_kernel_name (const backend_model_t *m) { return cpu_kernel_name (m->kernel); }

const backend_iface_t backend_cpu_iface = {
    .name = "cpu",
    .load = s_cpu_load,
    .infer = s_cpu_infer,
    .kernel_name = s_cpu_kernel_name,
    .destroy = s_cpu_destroy,
};
