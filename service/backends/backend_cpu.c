/* CPU backend: fused dense layers (GEMV + bias + activation) on one core, or split over the cores an
 * instance owns ("split": cpu_split.h, decided at load by measuring both).
 * Two kernels, chosen per model by "cpu_kernel":
 *   loop: hand-written (cpu_dense.h): the weights packed at load, K-major in blocks of 16 outputs, in
 *         the model's weight_dtype (f32, f16, bf16 or int8), on the best instruction path this CPU
 *         has (cpu_isa.h: AVX-512, AVX2 or plain C, chosen at load; SIGSERVE_CPU_ISA caps it). A
 *         batch of rows reads each chunk of weights once for all of them.
 *   blas: OpenBLAS sgemv (rows == 1) / sgemm (rows > 1) with one thread, then bias + activation
 *         (f32 weights only).
 * Everything is allocated at load; infer allocates nothing and takes no lock. */
#define _GNU_SOURCE
#include "backends/backend.h"
#include "backends/cpu_dense.h"
#include "backends/cpu_isa.h"
#include "backends/cpu_split.h"
#include "base/floats.h"
#include "base/log.h"
#include "base/threads.h"
#include "clock.h"
#include "latency.h"
#include "rng.h"

#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
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
    /* int8: each part's (a split's cores each quantize a layer's inputs for themselves; part 0 the
     * caller's) quantized activations (max_rows x q_stride bytes) and per-row scales and zero points
     * (q_rows apart: max_rows padded to a line), part p's at p times those */
    uint8_t *q;
    uint32_t q_stride;          /* the widest layer's inputs rounded up to CPU_DENSE_KPAD_INT8 */
    float *q_scale;
    int32_t *q_zero;
    uint32_t q_rows;
    float *partial;             /* rows > 1: max_rows x act_stride partial sums (fp32 or int32); each part its outputs' */
    cpu_split_t *split;         /* NULL: one core */
    cpu_split_plan_t plan;      /* what it splits, and how */
    float *raw;                 /* each part's sums of a layer split by inputs (plan.chain): rows x act_stride,
                                   raw_part floats apart */
    size_t raw_part;
    bool prefetchw;             /* the CPU has PREFETCHW (every AVX-512 one): a part owns its output lines early */
    char split_text[384];       /* what the split decided, "" where none was asked */
    /* What the leader writes each call, on a line of its own: the fields above are read by every part
     * of a split, and a line they read that the leader wrote would cost each a crossing (the call's
     * inputs travel with its tick: cpu_split_run's argument). */
    _Alignas (64) int raw_layer;    /* the leader's: the layer whose parts' sums wait to be added up, or -1 */
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
        cpu_split_destroy (&m->split);      /* its helpers first: they read everything below */
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
        free (m->raw);
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

/* int8's scratch for PARTS parts (cpu_dense.h's quantize writes it): 0, or -1 out of memory. */
static int s_int8_scratch (backend_model_t *m, uint32_t parts)
{
    free (m->q);
    free (m->q_scale);
    free (m->q_zero);
    m->q_rows = (uint32_t) s_pad (m->max_rows);
    const size_t q_bytes = (size_t) parts * m->max_rows * m->q_stride;
    m->q = aligned_alloc (64, q_bytes);
    m->q_scale = floats_zeroed ((size_t) parts * m->q_rows);
    m->q_zero = aligned_alloc (64, (size_t) parts * m->q_rows * sizeof *m->q_zero);
    if (m->q)
        memset (m->q, 0, q_bytes);
    if (m->q_zero)
        memset (m->q_zero, 0, (size_t) parts * m->q_rows * sizeof *m->q_zero);
    return m->q && m->q_scale && m->q_zero ? 0 : -1;
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
        if (s_int8_scratch (m, 1) != 0)
            return -1;
    }
    return m->max_rows > 1 && !m->partial ? -1 : 0;
}

static backend_model_t *s_cpu_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    (void) device;
    if (cfg->cpu_kernel == CPU_KERNEL_BLAS && cfg->weight_dtype != WEIGHT_DTYPE_F32) {
        snprintf (err, errlen, "model \"%s\": weight_dtype \"%s\": cpu_kernel \"blas\" holds weights in f32 only; use "
                  "\"cpu_kernel\": \"loop\" or \"weight_dtype\": \"f32\"", cfg->name, weight_dtype_name (cfg->weight_dtype));
        return NULL;
    }
    backend_model_t *m = aligned_alloc (64, (sizeof *m + 63) / 64 * 64);     /* (its per-call line) */
    if (!m)
        goto oom;
    memset (m, 0, sizeof *m);
    m->kernel = cfg->cpu_kernel;
    m->dtype = cfg->weight_dtype;
    m->raw_layer = -1;
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
    float *probe_in = floats_zeroed ((size_t) m->max_rows * m->input_size);
    for (int i = 0; probe_out && probe_in && i < 8; i++)
        s_cpu_infer (m, probe_in, m->max_rows, probe_out, err, errlen);
    const bool probed = probe_out && probe_in;
    free (probe_out);
    free (probe_in);
    if (!probed)
        goto oom;
    memset (m->act[0], 0, (size_t) m->max_rows * m->act_stride * sizeof (float));
    memset (m->act[1], 0, (size_t) m->max_rows * m->act_stride * sizeof (float));
    return m;
oom:
    snprintf (err, errlen, "model \"%s\": out of memory loading the CPU backend", cfg->name);
    s_cpu_destroy (&m);
    return NULL;
}

/* Part PART's blocks [*B0, *B1) of BLOCKS split PARTS ways: the leader (part 0) LEAD eighths of a share
 * more than the others (it meets the call first: each helper a hand-off later; less where LEAD < 0, at
 * least none), the rest even. */
static void s_share (uint32_t blocks, uint32_t part, uint32_t parts, int32_t lead, uint32_t *b0, uint32_t *b1)
{
    const uint32_t eighths = lead < -8 ? 0 : (uint32_t) (8 + lead);
    uint32_t first = (blocks * eighths + 4 * parts) / (8 * parts);
    first = first > blocks ? blocks : first;
    if (parts == 1 || part == 0) {
        *b0 = 0;
        *b1 = parts == 1 ? blocks : first;
        return;
    }
    const uint32_t rest = blocks - first, helpers = parts - 1;
    *b0 = first + rest * (part - 1) / helpers;
    *b1 = first + rest * part / helpers;
}

/* Layer I split by inputs: its outputs from the parts' sums (in order: the same bits each call), its
 * bias and activation, into act as every layer leaves its outputs. */
static void s_add_up (backend_model_t *m, uint32_t i, uint32_t rows, uint32_t parts)
{
    const cpu_dense_t *L = &m->dense[i];
    float *y = m->act[(i & 1) ^ 1];
    for (uint32_t p = 1; p < parts; p++)        /* the other cores' lines, asked for at once */
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t o = 0; o < L->out_pad; o += 16)
                _mm_prefetch ((const char *) (m->raw + p * m->raw_part + (size_t) r * m->act_stride + o), _MM_HINT_T0);
    /* part by part over every output (loops the compiler vectorizes: the sums in the same order as one
     * output at a time), then the bias and the activation */
    for (uint32_t r = 0; r < rows; r++) {
        const size_t at = (size_t) r * m->act_stride;
        float *restrict yr = y + at;
        const float *restrict own = m->raw + at;
        for (uint32_t o = 0; o < L->out_pad; o++)
            yr[o] = own[o];
        for (uint32_t p = 1; p < parts; p++) {
            const float *restrict theirs = m->raw + p * m->raw_part + at;
            for (uint32_t o = 0; o < L->out_pad; o++)
                yr[o] += theirs[o];
        }
        const float *restrict bias = L->bias;
        if (L->activation == ACTIVATION_RELU)
            for (uint32_t o = 0; o < L->out_pad; o++) {
                const float v = yr[o] + bias[o];
                yr[o] = v > 0.0f ? v : 0.0f;
            }
        else
            for (uint32_t o = 0; o < L->out_pad; o++)
                yr[o] = backend_activate (yr[o] + bias[o], L->activation);
    }
    m->raw_layer = -1;
}

/* The lines of ROWS rows of BYTES at P, STRIDE floats apart, asked for to be written: the part that will
 * write them owns them before it does (the other core read them the call before), rather than at the end,
 * where the store of its tick would wait behind them. */
__attribute__ ((target ("prfchw"))) static void s_own (const float *p, uint32_t rows, size_t stride, size_t bytes)
{
    for (uint32_t r = 0; r < rows; r++)
        for (size_t at = 0; at < bytes; at += 64)
            __builtin_prefetch ((const char *) (p + r * stride) + at, 1, 3);
}

/* The lines of ROWS rows of BYTES at P (STRIDE floats apart, at most 8 KiB in all) asked for at once. */
static void s_ask (const float *p, uint32_t rows, size_t stride, size_t bytes)
{
    size_t asked = 0;
    for (uint32_t r = 0; r < rows && asked < 8192; r++)
        for (size_t at = 0; at < bytes && asked < 8192; at += 64, asked += 64)
            _mm_prefetch ((const char *) (p + r * stride) + at, _MM_HINT_T0);
}

/* Part PART of PARTS (cpu_split.h; 0 of 1: the whole layer) of loop layer I: its share of the blocks of
 * 16 outputs, contiguous, from its own int8 scratch; or, for a layer the plan chains, every output's sum
 * over the inputs its part computed in the layer before (its raw buffer: the leader adds them up before
 * the next layer, or at the end). Layer i reads act[i & 1] and writes the other: every layer writes
 * out_pad floats a row (its padding: act (0), finite), which the next reads as its in_pad (the same
 * count). */
static void s_layer (void *ctx, const void *x0, uint32_t i, uint32_t rows, uint32_t part, uint32_t parts)
{
    backend_model_t *m = ctx;
    const cpu_dense_t *L = &m->dense[i];
    if (parts == 1 && m->raw_layer >= 0)
        s_add_up (m, (uint32_t) m->raw_layer, rows, cpu_split_parts (m->split));
    if (parts > 1 && (m->plan.chain >> i & 1)) {
        uint32_t k0, k1;
        s_share (m->dense[i - 1].out_pad / CPU_DENSE_BLOCK, part, parts, m->plan.lead, &k0, &k1);
        float *raw = m->raw + part * m->raw_part;
        if (part == 0)
            m->raw_layer = (int) i;
        if (m->prefetchw)
            s_own (raw, rows, m->act_stride, L->out_pad * sizeof (float));
        if (k0 == k1) {
            for (uint32_t r = 0; r < rows; r++)
                memset (raw + (size_t) r * m->act_stride, 0, L->out_pad * sizeof (float));
            return;
        }
        const cpu_dense_io_t io = { .rows = rows, .k_begin = k0 * CPU_DENSE_BLOCK, .k_end = k1 * CPU_DENSE_BLOCK,
                                    .raw = true, .x = i ? m->act[i & 1] : (const float *) x0,
                                    .x_stride = m->act_stride, .y = raw, .y_stride = m->act_stride };
        m->ops->dense[L->dtype] (L, &io);
        if (part == 0)      /* the others' sums, asked for while the barrier's line crosses */
            for (uint32_t p = 1; p < parts; p++)
                s_ask (m->raw + p * m->raw_part, rows, m->act_stride, L->out_pad * sizeof (float));
        return;
    }
    uint32_t b0, b1;
    s_share (L->out_pad / CPU_DENSE_BLOCK, part, parts, m->plan.lead, &b0, &b1);
    if (b0 == b1)
        return;
    const float *x = i ? m->act[i & 1] : (const float *) x0;
    if (m->split) {
        /* the inputs another core wrote (the caller, the leader's copy, a slice of the layer below): asked
         * for all at once, not one miss at a time as the k loop meets them (at most 8 KiB) */
        const size_t bytes = (size_t) (rows - 1) * m->act_stride * sizeof (float) + L->in_pad * sizeof (float);
        for (size_t at = 0; at < bytes && at < 8192; at += 64)
            _mm_prefetch ((const char *) x + at, _MM_HINT_T0);
        if (parts > 1 && m->prefetchw)
            s_own (m->act[(i & 1) ^ 1] + b0 * CPU_DENSE_BLOCK, rows, m->act_stride,
                   (b1 - b0) * CPU_DENSE_BLOCK * sizeof (float));
    }
    const cpu_dense_ops_t *ops = rows >= CPU_AMX_MIN_ROWS && m->batch_ops ? m->batch_ops : m->ops;
    const size_t q_at = (size_t) part * m->max_rows * m->q_stride, s_at = (size_t) part * m->q_rows;
    const cpu_dense_io_t io = { .rows = rows, .o_begin = b0 * CPU_DENSE_BLOCK, .o_end = b1 * CPU_DENSE_BLOCK,
                                .x = x, .x_stride = m->act_stride, .y = m->act[(i & 1) ^ 1],
                                .y_stride = m->act_stride, .q = m->q ? m->q + q_at : NULL, .q_stride = m->q_stride,
                                .q_scale = m->q_scale ? m->q_scale + s_at : NULL,
                                .q_zero = m->q_zero ? m->q_zero + s_at : NULL, .partial = m->partial };
    if (L->dtype == WEIGHT_DTYPE_INT8)
        ops->quantize (io.x, io.x_stride, rows, L->in, L->in_pad, io.q, io.q_stride, io.q_scale, io.q_zero);
    ops->dense[L->dtype] (L, &io);
    /* the other parts' outputs (the next layer reads them), asked for while the barrier's line crosses:
     * a part that finished first costs one crossing then, not two; not where the next layer is chained
     * (each part reads only its own: asking would only pull lines their writers want back) */
    const bool next_chained = i + 1 < m->layer_count && (m->plan.chain >> (i + 1) & 1);
    for (uint32_t p = 0; parts > 1 && !next_chained && p < parts; p++)
        if (p != part) {
            uint32_t c0, c1;
            s_share (L->out_pad / CPU_DENSE_BLOCK, p, parts, m->plan.lead, &c0, &c1);
            s_ask (m->act[(i & 1) ^ 1] + c0 * CPU_DENSE_BLOCK, rows, m->act_stride,
                   (c1 - c0) * CPU_DENSE_BLOCK * sizeof (float));
        }
}

static sig_status_t s_cpu_infer (backend_model_t *m, const float *in, uint32_t rows, float *out,
                                 char *err, size_t errlen)
{
    (void) err;
    (void) errlen;
    const uint32_t stride = m->act_stride;
    /* Rows go into the padded activation buffer; the floats up to the padding boundary are cleared
     * (the layers read whole vectors). One row whose size needs no padding is read where it is by the
     * loop (the float dtypes broadcast one input at a time, int8 quantizes it with unaligned loads: no
     * alignment needed), saving the copy (int8: ~3% of tick_mlp's call) and a split's helpers from
     * waiting for the copy's lines. */
    const uint32_t in_pad = (uint32_t) s_pad (m->input_size);
    const float *x0 = m->act[0];
    if (rows == 1 && in_pad == m->input_size && m->kernel == CPU_KERNEL_LOOP)
        x0 = in;
    for (uint32_t r = 0; r < rows && x0 != in; r++) {
        float *row = m->act[0] + (size_t) r * stride;
        memcpy (row, in + (size_t) r * m->input_size, m->input_size * sizeof (float));
        memset (row + m->input_size, 0, (in_pad - m->input_size) * sizeof (float));
    }
    if (m->kernel == CPU_KERNEL_BLAS)
        for (size_t i = 0; i < m->layer_count; i++)
            s_dense_blas (&m->layers[i], m->act[i & 1], stride, m->act[(i & 1) ^ 1], stride, rows);
    else if (m->split) {
        cpu_split_run (m->split, m->plan.mask, m->plan.chain, rows, x0);
        if (m->raw_layer >= 0)      /* the last layer was split by inputs */
            s_add_up (m, (uint32_t) m->raw_layer, rows, cpu_split_parts (m->split));
    } else
        for (uint32_t i = 0; i < m->layer_count; i++)
            s_layer (m, x0, i, rows, 0, 1);
    const float *last = m->act[m->layer_count & 1];
    for (uint32_t r = 0; r < rows; r++)
        memcpy (out + (size_t) r * m->output_size, last + (size_t) r * stride, m->output_size * sizeof (float));
    return SIG_OK;
}

/* ---------------------------------------------------------------- the split (cpu_split.h) */

#define SPLIT_ROUNDS 2000           /* calls of each plan, interleaved call by call ... */
#define SPLIT_MIN_ROUNDS 20     /* (after as many unmeasured) */
#define SPLIT_BUDGET_NS 250000000ull    /* ... within this long (a large model gets fewer) */
#define SPLIT_GAIN 0.95             /* auto splits where its p50 is under this much of one core's */
#define SPLIT_POOL 16               /* distinct random inputs */

/* The layers worth splitting under "on": two or more blocks of 16 outputs (a share for two cores). */
static uint64_t s_splittable (const backend_model_t *m)
{
    uint64_t mask = 0;
    for (uint32_t i = 0; i < m->layer_count && i < 64; i++)
        if (m->dense[i].out_pad / CPU_DENSE_BLOCK >= 2)
            mask |= 1ull << i;
    return mask;
}

#define SPLIT_LEAD_LOW 1        /* the leader's extra shares measured: -1 to 3 blocks of the largest split layer's */
#define SPLIT_LEADS 5           /* (backend_cpu_split_lead_step: -1/8 to 3/8 of a share over 2 cores of 16
                                   blocks, -2/8 to 6/8 over 4) */
#define SPLIT_PLANS (1 + 2 * 64 * SPLIT_LEADS)

/* PLAN less what M cannot run (cpu_split.h's rules). */
static cpu_split_plan_t s_valid (const backend_model_t *m, cpu_split_plan_t plan)
{
    plan.mask &= s_splittable (m) | plan.chain;
    plan.chain &= plan.mask & plan.mask << 1 & ~(plan.chain << 1);
    plan.chain &= ~(plan.mask >> 1);        /* the layer after a chained one: not split (its leader adds up) */
    if (m->dtype == WEIGHT_DTYPE_INT8)
        plan.chain = 0;                     /* int8 quantizes a layer's inputs whole */
    plan.mask &= s_splittable (m) | plan.chain;
    plan.lead = plan.lead > 8 * CPU_SPLIT_MAX_PARTS ? 8 * CPU_SPLIT_MAX_PARTS : plan.lead < -8 ? -8 : plan.lead;
    return plan;
}

uint32_t backend_cpu_split_lead_step (const backend_model_t *m, uint64_t mask)
{
    uint32_t blocks = 0;
    for (uint32_t i = 0; i < m->layer_count && i < 64; i++)
        if (mask >> i & 1 && m->dense[i].out_pad / CPU_DENSE_BLOCK > blocks)
            blocks = m->dense[i].out_pad / CPU_DENSE_BLOCK;
    const uint32_t parts = m->split ? cpu_split_parts (m->split) : 1;
    const uint32_t step = blocks ? (8 * parts + blocks / 2) / blocks : 1;
    return step ? step : 1;
}

/* The plans to measure: no split, and (ALL: every splittable layer; else, for each size of the
 * splittable layers' weights, every one at least that large: the largest first, where the bytes a core
 * saves are most), each also with the layer after each split one chained where it can be, each with the
 * leader's extra shares. */
static size_t s_plans (const backend_model_t *m, bool all, cpu_split_plan_t *plans)
{
    const uint64_t able = s_splittable (m);
    uint64_t masks[64];
    size_t n = 0, count = 0;
    for (uint32_t t = 0; t < m->layer_count && t < 64; t++) {
        if (!(able >> t & 1))
            continue;
        uint64_t mask = 0;
        for (uint32_t i = 0; i < m->layer_count && i < 64; i++)
            if (able >> i & 1 && (all || m->dense[i].weight_bytes >= m->dense[t].weight_bytes))
                mask |= 1ull << i;
        bool seen = false;
        for (size_t k = 0; k < count; k++)
            seen |= masks[k] == mask;
        if (!seen)
            masks[count++] = mask;
    }
    plans[n++] = (cpu_split_plan_t) { 0, 0, 0 };
    for (size_t k = 0; k < count; k++) {
        const uint64_t after = m->layer_count < 64 ? (masks[k] << 1) & ((1ull << m->layer_count) - 1) : masks[k] << 1;
        const cpu_split_plan_t chained = s_valid (m, (cpu_split_plan_t) { masks[k] | after, after & ~masks[k], 0 });
        const int32_t step = (int32_t) backend_cpu_split_lead_step (m, masks[k]);
        for (int c = 0; c < 1 + (chained.chain != 0); c++)
            for (int32_t lead = -SPLIT_LEAD_LOW * step; lead < (SPLIT_LEADS - SPLIT_LEAD_LOW) * step; lead += step)
                plans[n++] = c ? (cpu_split_plan_t) { chained.mask, chained.chain, lead }
                               : (cpu_split_plan_t) { masks[k], 0, lead };
    }
    return n;
}

/* Times every plan at rows 1 call by call in turn (so each sees the same machine), on random inputs,
 * from the calling thread; their p50s in P50 (us). 0, or -1 out of memory. */
static int s_measure (backend_model_t *m, const cpu_split_plan_t *plans, size_t n, uint64_t budget_ns, double *p50)
{
    float *in = malloc ((size_t) SPLIT_POOL * m->input_size * sizeof (float));
    float *out = malloc (m->output_size * sizeof (float));
    double *samples = malloc ((size_t) n * SPLIT_ROUNDS * sizeof (double));
    if (!in || !out || !samples) {
        free (in);
        free (out);
        free (samples);
        return -1;
    }
    uint64_t seed = 0x5b117;
    for (size_t i = 0; i < (size_t) SPLIT_POOL * m->input_size; i++)
        in[i] = rng_uniform (&seed, -1.0f, 1.0f);
    char err[64];
    const uint64_t t_end = clock_now_ns () + budget_ns;
    uint32_t rounds = 0;
    for (int r = -SPLIT_MIN_ROUNDS; r < SPLIT_ROUNDS; r++) {
        if (r >= SPLIT_MIN_ROUNDS && clock_now_ns () > t_end)
            break;
        for (size_t k = 0; k < n; k++) {
            m->plan = plans[k];
            const uint64_t t0 = clock_now_ns ();
            s_cpu_infer (m, in + (size_t) ((unsigned) r % SPLIT_POOL) * m->input_size, 1, out, err, sizeof err);
            if (r >= 0)
                samples[k * SPLIT_ROUNDS + (size_t) r] = (double) (clock_now_ns () - t0) / 1e3;
        }
        rounds = r >= 0 ? (uint32_t) r + 1 : 0;
    }
    for (size_t k = 0; k < n; k++) {
        latency_summary_t sum;
        latency_summarize (samples + k * SPLIT_ROUNDS, rounds, &sum);
        p50[k] = sum.p50;
    }
    free (in);
    free (out);
    free (samples);
    return 0;
}

/* "layers 0, 1 split by outputs, layer 2 by inputs, leader +1/8" of PLAN. */
static size_t s_list (uint64_t mask, const char *lead, char *buf, size_t len)
{
    size_t used = (size_t) snprintf (buf, len, "%slayer%s", lead, __builtin_popcountll (mask) > 1 ? "s" : "");
    for (int i = 0, first = 1; i < 64 && used < len; i++)
        if (mask >> i & 1) {
            used += (size_t) snprintf (buf + used, len - used, "%s%d", first ? " " : ", ", i);
            first = 0;
        }
    return used < len ? used : len;
}

static const char *s_plan_text (const cpu_split_plan_t *plan, char *buf, size_t len)
{
    size_t used = s_list (plan->mask & ~plan->chain, "", buf, len);
    used += (size_t) snprintf (buf + used, len - used, " split by outputs");
    if (plan->chain && used < len) {
        used += s_list (plan->chain, ", ", buf + used, len - used);
        used += (size_t) snprintf (buf + used, len - used, " by inputs");
    }
    if (used < len)
        snprintf (buf + used, len - used, ", leader %+d/8", plan->lead);
    return buf;
}

/* The split's outcome when it never ran: WHY, logged. -1 (with ERR) under "on", else 0 (one core). */
static int s_split_off (backend_model_t *m, const model_config_t *cfg, const char *why, char *err, size_t errlen)
{
    cpu_split_destroy (&m->split);
    m->plan = (cpu_split_plan_t) { 0, 0, 0 };
    snprintf (m->split_text, sizeof m->split_text, "one core: %s", why);
    if (cfg->split == CPU_SPLIT_ON) {
        snprintf (err, errlen, "model \"%s\": split \"on\": %s", cfg->name, why);
        return -1;
    }
    log_warn ("model %s: split \"auto\": %s; on one core", cfg->name, why);
    return 0;
}

static int s_cpu_split (backend_model_t *m, const int *cpus, size_t count, const model_config_t *cfg, char *err,
                        size_t errlen)
{
    char why[160], list[64] = "", layers[160];
    if (cfg->split == CPU_SPLIT_OFF || count < 2)
        return 0;
    if (m->kernel != CPU_KERNEL_LOOP)
        return s_split_off (m, cfg, "cpu_kernel \"blas\" runs on one core", err, errlen);
    if (count > CPU_SPLIT_MAX_PARTS) {
        log_info ("model %s: split over the first %d of the %zu cpus an instance", cfg->name, CPU_SPLIT_MAX_PARTS, count);
        count = CPU_SPLIT_MAX_PARTS;
    }
    for (size_t i = 0, used = 0; i < count && used < sizeof list; i++)
        used += (size_t) snprintf (list + used, sizeof list - used, "%s%d", i ? "," : "", cpus[i]);
    if (cfg->split_spin_ns == 0)
        return s_split_off (m, cfg, "server.spin_us is 0: a helper would sleep between calls", err, errlen);
    if (!s_splittable (m))
        return s_split_off (m, cfg, "no layer has two blocks of 16 outputs to share", err, errlen);
    m->raw_part = (size_t) m->max_rows * m->act_stride;
    m->prefetchw = cpu_isa_features ()->avx512;
    if ((m->dtype == WEIGHT_DTYPE_INT8 && s_int8_scratch (m, (uint32_t) count) != 0)
        || !(m->raw = floats_zeroed (count * m->raw_part)))
        return s_split_off (m, cfg, "out of memory for its scratch", err, errlen);
    if (!(m->split = cpu_split_new (cpus, count, (uint32_t) m->layer_count, s_layer, m, cfg->split_spin_ns, cfg->name,
                                    why, sizeof why)))
        return s_split_off (m, cfg, why, err, errlen);
    /* measured from the leader's core: the calling thread's own affinity back afterwards */
    cpu_set_t mine;
    const bool had = pthread_getaffinity_np (pthread_self (), sizeof mine, &mine) == 0;
    if (threads_pin (cpus[0], why, sizeof why) != 0)
        return s_split_off (m, cfg, why, err, errlen);
    cpu_split_plan_t plans[SPLIT_PLANS];
    double p50[SPLIT_PLANS];
    const size_t n = s_plans (m, cfg->split == CPU_SPLIT_ON, plans);
    /* "on" only reports (a tenth of the time) */
    const int rc = s_measure (m, plans, n, cfg->split == CPU_SPLIT_ON ? SPLIT_BUDGET_NS / 10 : SPLIT_BUDGET_NS, p50);
    if (had)
        pthread_setaffinity_np (pthread_self (), sizeof mine, &mine);
    if (rc != 0)
        return s_split_off (m, cfg, "out of memory measuring it", err, errlen);
    size_t best = n > 1 ? 1 : 0;
    for (size_t k = 2; k < n; k++)
        if (p50[k] < p50[best])
            best = k;
    const bool split = cfg->split == CPU_SPLIT_ON || p50[best] < SPLIT_GAIN * p50[0];
    m->plan = split ? plans[best] : (cpu_split_plan_t) { 0, 0, 0 };
    s_plan_text (&plans[best], layers, sizeof layers);
    if (split)
        snprintf (m->split_text, sizeof m->split_text, "%zu cores (cpus %s), %s: %.2f us p50 against %.2f on one "
                  "core (%s, measured at load)", count, list, layers, p50[best], p50[0],
                  cpu_split_mode_name (cfg->split));
    else {
        snprintf (m->split_text, sizeof m->split_text, "one core: %.2f us p50 against %.2f split over %zu cores "
                  "(cpus %s, %s; auto, measured at load)", p50[0], p50[best], count, list, layers);
        cpu_split_destroy (&m->split);      /* its helpers stop: the cores stay the model's, idle */
    }
    log_info ("model %s: split %s", cfg->name, m->split_text);
    return 0;
}

static const char *s_cpu_split_text (const backend_model_t *m) { return m->split_text; }

cpu_split_plan_t backend_cpu_split_plan (const backend_model_t *m) { return m->plan; }
cpu_split_t *backend_cpu_split (backend_model_t *m) { return m->split; }

void backend_cpu_set_split_plan (backend_model_t *m, cpu_split_plan_t plan)
{
    m->plan = m->split ? s_valid (m, plan) : (cpu_split_plan_t) { 0, 0, 0 };
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
    .split = s_cpu_split,
    .split_text = s_cpu_split_text,
};
