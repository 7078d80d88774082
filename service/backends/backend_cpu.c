/* CPU backend: fused dense layers (GEMV + bias + activation) on one core.
 * Two kernels, chosen per model by "cpu_kernel":
 *   loop: hand-written (cpu_dense.h): the weights packed at load, K-major in groups of 64 outputs, in
 *         the model's weight_dtype (f32, f16, bf16 or int8), on the best instruction path this CPU
 *         has (cpu_isa.h: AVX-512, AVX2 or plain C, chosen at load; SIGSERVE_CPU_ISA caps it). A
 *         batch of rows reads each chunk of weights once for all of them.
 *   blas: OpenBLAS sgemv (rows == 1) / sgemm (rows > 1) with one thread, then bias + activation
 *         (f32 weights only).
 * Everything is allocated at load; infer allocates nothing and takes no lock. */
#include "backends/backend.h"
#include "backends/cpu_dense.h"
#include "backends/cpu_isa.h"
#include "base/floats.h"
#include "base/log.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VEC 16   /* the padding unit of every activation row */

/* The blas kernel's layers: W [out][in] as the file has it. */
typedef struct {
    uint32_t in, out;
    activation_t activation;
    float *weight;              /* [out][in] */
    float *bias;                /* [out] */
} cpu_layer_t;

struct backend_model {
    cpu_kernel_t kernel;
    weight_dtype_t dtype;
    const cpu_dense_ops_t *ops; /* loop: the path's kernels */
    const cpu_dense_ops_t *batch_ops;   /* for rows >= CPU_AMX_MIN_ROWS where another path wins (AMX), else NULL */
    char isa[48];               /* the path, as /models and the load's log line name it */
    uint32_t max_rows;          /* rows one call may carry (backend_rows) */
    size_t layer_count;
    cpu_dense_t *dense;         /* loop */
    cpu_layer_t *layers;        /* blas */
    uint32_t input_size, output_size;
    uint32_t act_stride;        /* floats per row in the activation buffers (widest, padded) */
    float *act[2];              /* ping-pong activations: max_rows x act_stride, padding finite */
    uint8_t *q;                 /* int8: quantized activations, max_rows x q_stride bytes */
    uint32_t q_stride;          /* the widest layer's inputs rounded up to CPU_DENSE_KPAD_INT8 */
    float *q_scale;             /* int8: per row */
    int32_t *q_zero;
    float *partial;             /* rows > 1: max_rows x act_stride partial sums (fp32 or int32) */
};

static size_t s_pad (size_t n) { return (n + VEC - 1) / VEC * VEC; }

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
        for (size_t i = 0; m->dense && i < m->layer_count; i++)
            cpu_dense_free (&m->dense[i]);
        free (m->layers);
        free (m->dense);
        free (m->act[0]);
        free (m->act[1]);
        free (m->q);
        free (m->q_scale);
        free (m->q_zero);
        free (m->partial);
        free (m);
        *m_p = NULL;
    }
}

static int s_copy_layer (cpu_layer_t *dst, const dense_layer_t *src)
{
    dst->in = src->in;
    dst->out = src->out;
    dst->activation = src->activation;
    dst->weight = floats_zeroed ((size_t) src->out * src->in);
    dst->bias = floats_zeroed (src->out);
    if (!dst->weight || !dst->bias)
        return -1;
    memcpy (dst->weight, src->weight, (size_t) src->out * src->in * sizeof (float));
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

/* The loop kernel's layers in the model's dtype, on the path cpu_isa picks. */
static int s_load_dense (backend_model_t *m, const weights_t *w, const model_config_t *cfg, char *err, size_t errlen)
{
    char why[160];
    cpu_isa_features ();        /* logs what this CPU has, once */
    const cpu_path_t path = cpu_isa_path (m->dtype, 1, why, sizeof why);
    m->ops = path >= CPU_PATH_AVX512 ? &cpu_dense_avx512 : path == CPU_PATH_AVX2 ? &cpu_dense_avx2 : &cpu_dense_scalar;
    snprintf (m->isa, sizeof m->isa, "%s", cpu_path_name (path, m->dtype));
    log_debug ("model %s: %s weights on the %s path", cfg->name, weight_dtype_name (m->dtype), why);
    if (m->max_rows >= CPU_AMX_MIN_ROWS && cpu_isa_path (m->dtype, m->max_rows, why, sizeof why) == CPU_PATH_AMX) {
        m->batch_ops = &cpu_dense_amx;
        snprintf (m->isa + strlen (m->isa), sizeof m->isa - strlen (m->isa), "+amx");
        log_debug ("model %s: batches of %u rows or more on %s", cfg->name, CPU_AMX_MIN_ROWS, why);
    }
    m->dense = calloc (w->layer_count, sizeof *m->dense);
    if (!m->dense)
        return -1;
    for (size_t i = 0; i < w->layer_count; i++) {
        char e[384];
        const char *tensor = i < cfg->layer_count ? cfg->layers[i].weight : "layer";
        if (cpu_dense_pack (&m->dense[i], &w->layers[i], m->dtype, tensor, e, sizeof e) != 0) {
            snprintf (err, errlen, "model \"%s\": %s", cfg->name, e);
            return -2;
        }
    }
    const size_t cells = (size_t) m->max_rows * m->act_stride;
    m->partial = m->max_rows > 1 ? floats_zeroed (cells) : NULL;
    if (m->dtype == WEIGHT_DTYPE_INT8) {
        m->q_stride = (w->widest + CPU_DENSE_KPAD_INT8 - 1) / CPU_DENSE_KPAD_INT8 * CPU_DENSE_KPAD_INT8;
        m->q = aligned_alloc (64, (size_t) m->max_rows * m->q_stride);
        m->q_scale = floats_zeroed (m->max_rows);
        m->q_zero = calloc (m->max_rows, sizeof *m->q_zero);
        if (m->q)
            memset (m->q, 0, (size_t) m->max_rows * m->q_stride);
    }
    return (m->max_rows > 1 && !m->partial) || (m->dtype == WEIGHT_DTYPE_INT8 && (!m->q || !m->q_scale || !m->q_zero))
           ? -1 : 0;
}

static backend_model_t *s_cpu_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    (void) device;
    if (cfg->cpu_kernel == CPU_KERNEL_BLAS && cfg->weight_dtype != WEIGHT_DTYPE_F32) {
        snprintf (err, errlen, "model \"%s\": weight_dtype \"%s\": cpu_kernel \"blas\" holds weights in f32 only; use "
                  "\"cpu_kernel\": \"loop\" or \"weight_dtype\": \"f32\"", cfg->name, weight_dtype_name (cfg->weight_dtype));
        return NULL;
    }
    backend_model_t *m = calloc (1, sizeof *m);
    if (!m)
        goto oom;
    m->kernel = cfg->cpu_kernel;
    m->dtype = cfg->weight_dtype;
    m->max_rows = backend_rows (cfg);
    m->layer_count = w->layer_count;
    m->input_size = w->input_size;
    m->output_size = w->output_size;
    m->act_stride = (uint32_t) s_pad (w->widest);
    m->act[0] = floats_zeroed ((size_t) m->max_rows * m->act_stride);
    m->act[1] = floats_zeroed ((size_t) m->max_rows * m->act_stride);
    if (!m->act[0] || !m->act[1])
        goto oom;
    if (m->kernel == CPU_KERNEL_BLAS) {
        m->layers = calloc (w->layer_count, sizeof *m->layers);
        if (!m->layers)
            goto oom;
        for (size_t i = 0; i < w->layer_count; i++)
            if (s_copy_layer (&m->layers[i], &w->layers[i]) != 0)
                goto oom;
        openblas_set_num_threads (1);   /* one core per model: threads would wreck the tail */
        s_warn_generic_openblas ();
        const char *core = openblas_get_corename ();
        snprintf (m->isa, sizeof m->isa, "openblas %s", core ? core : "?");
    } else {
        const int rc = s_load_dense (m, w, cfg, err, errlen);
        if (rc == -2) {
            s_cpu_destroy (&m);
            return NULL;
        }
        if (rc != 0)
            goto oom;
    }
    /* Warm: page in the weights and buffers. */
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
    /* Rows go into the padded activation buffer; the floats up to the padding boundary are cleared
     * (the layers read whole vectors). */
    const uint32_t in_pad = (uint32_t) s_pad (m->input_size);
    for (uint32_t r = 0; r < rows; r++) {
        float *row = m->act[0] + (size_t) r * stride;
        memcpy (row, in + (size_t) r * m->input_size, m->input_size * sizeof (float));
        memset (row + m->input_size, 0, (in_pad - m->input_size) * sizeof (float));
    }
    int cur = 0;
    for (size_t i = 0; i < m->layer_count; i++) {
        float *x = m->act[cur], *y = m->act[cur ^ 1];
        if (m->kernel == CPU_KERNEL_BLAS)
            s_dense_blas (&m->layers[i], x, stride, y, stride, rows);
        else {
            /* every layer writes out_pad floats a row (its padding: act (0), finite), which the next
             * reads as its in_pad: the same count */
            const cpu_dense_t *L = &m->dense[i];
            const cpu_dense_ops_t *ops = rows >= CPU_AMX_MIN_ROWS && m->batch_ops ? m->batch_ops : m->ops;
            const cpu_dense_io_t io = { .rows = rows, .x = x, .x_stride = stride, .y = y, .y_stride = stride,
                                        .q = m->q, .q_stride = m->q_stride, .q_scale = m->q_scale, .q_zero = m->q_zero,
                                        .partial = m->partial };
            if (L->dtype == WEIGHT_DTYPE_INT8)
                ops->quantize (x, stride, rows, L->in, L->in_pad, m->q, m->q_stride, m->q_scale, m->q_zero);
            ops->dense[L->dtype] (L, &io);
        }
        cur ^= 1;
    }
    for (uint32_t r = 0; r < rows; r++)
        memcpy (out + (size_t) r * m->output_size, m->act[cur] + (size_t) r * stride, m->output_size * sizeof (float));
    return SIG_OK;
}

static const char *s_cpu_kernel_name (const backend_model_t *m) { return cpu_kernel_name (m->kernel); }
static const char *s_cpu_isa (const backend_model_t *m) { return m->isa; }

const backend_iface_t backend_cpu_iface = {
    .name = "cpu",
    .weight_dtypes = 1u << WEIGHT_DTYPE_F16 | 1u << WEIGHT_DTYPE_BF16 | 1u << WEIGHT_DTYPE_INT8,
    .load = s_cpu_load,
    .infer = s_cpu_infer,
    .kernel_name = s_cpu_kernel_name,
    .isa = s_cpu_isa,
    .destroy = s_cpu_destroy,
};
