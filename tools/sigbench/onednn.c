/* sigbench table 4's library peer in the lower dtypes: oneDNN's matmul (Debian's libdnnl-dev, the v2
 * C API), one primitive per layer with its bias and activation as a post-op, weights reordered once
 * into the layout oneDNN picks for them (format_any: prepacked, as a serving library would hold
 * them), one thread, the same core, the same inputs and reference check as the backend's rows:
 *   - f32: src, weights and dst f32;
 *   - bf16: the input reordered to bf16 in the timed call, bf16 weights and hidden activations, f32
 *     accumulation and output (oneDNN's bf16 path: avx512_bf16 or AMX where it has them);
 *   - f16 where this oneDNN has a CPU f16 matmul (2.6 has none: the row says so).
 * int8 is not run: oneDNN's int8 matmul wants the activations' scale before the call, where ours
 * quantizes each row at each layer as it comes (a dynamic-quantization peer would be ours again).
 * Built only where dnnl.h is (the Makefile defines SIGBENCH_HAVE_DNNL); elsewhere the row says why. */
#define _GNU_SOURCE
#include "sigbench.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SIGBENCH_HAVE_DNNL

double sb_bench_onednn (const options_t *o, const weights_t *w, float *const *in, const double *const *ref,
                        weight_dtype_t dtype, double *samples, double *p50)
{
    (void) o, (void) w, (void) in, (void) ref, (void) samples, (void) p50;
    printf ("| oneDNN matmul %s | not built: no dnnl.h here (Debian: libdnnl-dev) |\n", weight_dtype_name (dtype));
    return -1;
}

#else
#include <dnnl.h>

#if DNNL_VERSION_MAJOR != 2
#error "tools/sigbench/onednn.c speaks oneDNN's v2 C API (Debian bookworm's 2.6)"
#endif

#define S_LAYERS_MAX 16

typedef struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t to_src;        /* bf16/f16: the f32 input reordered, in the timed call */
    dnnl_memory_t user_in, src0;
    dnnl_primitive_t layer[S_LAYERS_MAX];
    dnnl_memory_t weights[S_LAYERS_MAX], bias[S_LAYERS_MAX], dst[S_LAYERS_MAX];
    size_t layers;
} s_net_t;

static dnnl_alg_kind_t s_alg (activation_t a)
{
    return a == ACTIVATION_RELU ? dnnl_eltwise_relu : a == ACTIVATION_TANH ? dnnl_eltwise_tanh : dnnl_eltwise_logistic;
}

static void s_net_free (s_net_t *n)
{
    for (size_t l = 0; l < S_LAYERS_MAX; l++) {
        if (n->layer[l])
            dnnl_primitive_destroy (n->layer[l]);
        if (n->weights[l])
            dnnl_memory_destroy (n->weights[l]);
        if (n->bias[l])
            dnnl_memory_destroy (n->bias[l]);
        if (n->dst[l])
            dnnl_memory_destroy (n->dst[l]);
    }
    if (n->to_src)
        dnnl_primitive_destroy (n->to_src);
    if (n->user_in)
        dnnl_memory_destroy (n->user_in);
    if (n->src0)
        dnnl_memory_destroy (n->src0);
    if (n->stream)
        dnnl_stream_destroy (n->stream);
    if (n->engine)
        dnnl_engine_destroy (n->engine);
}

/* Weights [out][in] f32 (as {in, out} in "ba") reordered into MD, the layout the primitive asked for. */
static dnnl_status_t s_weights (s_net_t *n, const dense_layer_t *d, const dnnl_memory_desc_t *md, dnnl_memory_t *out)
{
    dnnl_dims_t dims = { d->in, d->out };
    dnnl_memory_desc_t user_md;
    dnnl_memory_t user = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_status_t s = dnnl_memory_desc_init_by_tag (&user_md, 2, dims, dnnl_f32, dnnl_ba);
    if (s == dnnl_success)
        s = dnnl_memory_create (&user, &user_md, n->engine, d->weight);
    if (s == dnnl_success)
        s = dnnl_memory_create (out, md, n->engine, DNNL_MEMORY_ALLOCATE);
    if (s == dnnl_success)
        s = dnnl_reorder_primitive_desc_create (&rpd, &user_md, n->engine, md, n->engine, NULL);
    if (s == dnnl_success)
        s = dnnl_primitive_create (&r, rpd);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, user }, { DNNL_ARG_TO, *out } };
        s = dnnl_primitive_execute (r, n->stream, 2, args);
    }
    if (s == dnnl_success)
        s = dnnl_stream_wait (n->stream);
    if (r)
        dnnl_primitive_destroy (r);
    if (rpd)
        dnnl_primitive_desc_destroy (rpd);
    if (user)
        dnnl_memory_destroy (user);
    return s;
}

/* The chain of W for ROWS rows with weights and activations in DT: dnnl_success, or where it failed. */
static dnnl_status_t s_net_build (s_net_t *n, const weights_t *w, uint32_t rows, dnnl_data_type_t dt, const char **what)
{
    dnnl_status_t s;
    *what = "engine";
    if ((s = dnnl_engine_create (&n->engine, dnnl_cpu, 0)) != dnnl_success
        || (s = dnnl_stream_create (&n->stream, n->engine, dnnl_stream_default_flags)) != dnnl_success)
        return s;
    if (w->layer_count > S_LAYERS_MAX) {
        *what = "layers";
        return dnnl_unimplemented;
    }
    dnnl_dims_t in_dims = { rows, w->layers[0].in };
    dnnl_memory_desc_t user_md, src_md;
    *what = "input";
    if ((s = dnnl_memory_desc_init_by_tag (&user_md, 2, in_dims, dnnl_f32, dnnl_ab)) != dnnl_success
        || (s = dnnl_memory_create (&n->user_in, &user_md, n->engine, DNNL_MEMORY_NONE)) != dnnl_success)
        return s;
    src_md = user_md;
    if (dt != dnnl_f32) {
        dnnl_primitive_desc_t rpd;
        if ((s = dnnl_memory_desc_init_by_tag (&src_md, 2, in_dims, dt, dnnl_ab)) != dnnl_success
            || (s = dnnl_memory_create (&n->src0, &src_md, n->engine, DNNL_MEMORY_ALLOCATE)) != dnnl_success
            || (s = dnnl_reorder_primitive_desc_create (&rpd, &user_md, n->engine, &src_md, n->engine, NULL)) != dnnl_success)
            return s;
        s = dnnl_primitive_create (&n->to_src, rpd);
        dnnl_primitive_desc_destroy (rpd);
        if (s != dnnl_success)
            return s;
    }
    for (size_t l = 0; l < w->layer_count; l++) {
        const dense_layer_t *d = &w->layers[l];
        const bool last = l + 1 == w->layer_count;
        dnnl_dims_t wd = { d->in, d->out }, bd = { 1, d->out }, dd = { rows, d->out };
        dnnl_memory_desc_t wmd, bmd, dmd;
        dnnl_matmul_desc_t mm;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        dnnl_primitive_desc_t pd = NULL;
        *what = "matmul";
        s = dnnl_memory_desc_init_by_tag (&wmd, 2, wd, dt, dnnl_format_tag_any);
        if (s == dnnl_success)
            s = dnnl_memory_desc_init_by_tag (&bmd, 2, bd, dnnl_f32, dnnl_ab);
        if (s == dnnl_success)
            s = dnnl_memory_desc_init_by_tag (&dmd, 2, dd, last ? dnnl_f32 : dt, dnnl_ab);
        if (s == dnnl_success)
            s = dnnl_matmul_desc_init (&mm, &src_md, &wmd, &bmd, &dmd);
        if (s == dnnl_success)
            s = dnnl_primitive_attr_create (&attr);
        if (s == dnnl_success && d->activation != ACTIVATION_NONE) {
            s = dnnl_post_ops_create (&po);
            if (s == dnnl_success)
                s = dnnl_post_ops_append_eltwise (po, 1.0f, s_alg (d->activation), 0.0f, 0.0f);
            if (s == dnnl_success)
                s = dnnl_primitive_attr_set_post_ops (attr, po);
        }
        if (s == dnnl_success)
            s = dnnl_primitive_desc_create (&pd, &mm, attr, n->engine, NULL);
        if (s == dnnl_success) {
            *what = "weights";
            s = s_weights (n, d, dnnl_primitive_desc_query_md (pd, dnnl_query_weights_md, 0), &n->weights[l]);
        }
        if (s == dnnl_success)
            s = dnnl_memory_create (&n->bias[l], &bmd, n->engine, d->bias);
        if (s == dnnl_success)
            s = dnnl_memory_create (&n->dst[l], &dmd, n->engine, last ? DNNL_MEMORY_NONE : DNNL_MEMORY_ALLOCATE);
        if (s == dnnl_success)
            s = dnnl_primitive_create (&n->layer[l], pd);
        if (pd)
            dnnl_primitive_desc_destroy (pd);
        if (po)
            dnnl_post_ops_destroy (po);
        if (attr)
            dnnl_primitive_attr_destroy (attr);
        if (s != dnnl_success)
            return s;
        n->layers = l + 1;
        src_md = dmd;
    }
    return dnnl_success;
}

/* One inference: IN (f32) to Y (f32). */
static dnnl_status_t s_net_run (s_net_t *n, const float *in, float *y)
{
    dnnl_status_t s = dnnl_memory_set_data_handle (n->user_in, (void *) in);
    if (s == dnnl_success && n->to_src) {
        dnnl_exec_arg_t a[2] = { { DNNL_ARG_FROM, n->user_in }, { DNNL_ARG_TO, n->src0 } };
        s = dnnl_primitive_execute (n->to_src, n->stream, 2, a);
    }
    if (s == dnnl_success)
        s = dnnl_memory_set_data_handle (n->dst[n->layers - 1], y);
    dnnl_memory_t src = n->to_src ? n->src0 : n->user_in;
    for (size_t l = 0; s == dnnl_success && l < n->layers; l++) {
        dnnl_exec_arg_t a[4] = { { DNNL_ARG_SRC, src }, { DNNL_ARG_WEIGHTS, n->weights[l] },
                                 { DNNL_ARG_BIAS, n->bias[l] }, { DNNL_ARG_DST, n->dst[l] } };
        s = dnnl_primitive_execute (n->layer[l], n->stream, 4, a);
        src = n->dst[l];
    }
    return s == dnnl_success ? dnnl_stream_wait (n->stream) : s;
}

static const char *s_isa (void)
{
    switch (dnnl_get_effective_cpu_isa ()) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    default: return "other";
    }
}

double sb_bench_onednn (const options_t *o, const weights_t *w, float *const *in, const double *const *ref,
                        weight_dtype_t dtype, double *samples, double *p50)
{
    /* one thread, as the backend's rows: Debian's oneDNN runs on OpenMP, which reads
     * OMP_NUM_THREADS only as it loads */
    void (*omp_threads) (int) = (void (*) (int)) dlsym (RTLD_DEFAULT, "omp_set_num_threads");
    if (omp_threads)
        omp_threads (1);
    const dnnl_version_t *v = dnnl_version ();
    const dnnl_data_type_t dt = dtype == WEIGHT_DTYPE_BF16 ? dnnl_bf16 : dtype == WEIGHT_DTYPE_F16 ? dnnl_f16 : dnnl_f32;
    if (dtype == WEIGHT_DTYPE_INT8) {
        printf ("| oneDNN matmul int8 | not run: its int8 matmul wants the activations' scales before the call "
                "(tools/sigbench/onednn.c) |\n");
        return -1;
    }
    s_net_t n;
    memset (&n, 0, sizeof n);
    const char *what = "";
    dnnl_status_t s = s_net_build (&n, w, o->rows, dt, &what);
    if (s != dnnl_success) {
        printf ("| oneDNN %d.%d.%d matmul %s | not run: its %s primitive was refused (status %d: %s) |\n", v->major,
                v->minor, v->patch, weight_dtype_name (dtype), what, (int) s,
                s == dnnl_unimplemented ? "this build has no such kernel on this CPU" : "an error");
        s_net_free (&n);
        return -1;
    }
    const size_t nout = (size_t) o->rows * w->output_size;
    float *y = malloc (nout * sizeof (float));
    pooled_error_t error = { 0, 0 };
    for (uint32_t i = 0; i < o->warmup + o->iterations && s == dnnl_success; i++) {
        double t0 = sb_now_us ();
        s = s_net_run (&n, in[i % POOL], y);
        double t1 = sb_now_us ();
        if (i >= o->warmup) {
            samples[i - o->warmup] = t1 - t0;
            sb_pool (&error, y, ref[i % POOL], nout);
        }
    }
    double e = -1;
    if (s == dnnl_success) {
        char label[160];
        snprintf (label, sizeof label, "oneDNN %d.%d.%d matmul %s (1 thread, %s)", v->major, v->minor, v->patch,
                  weight_dtype_name (dtype), s_isa ());
        latency_summary_t sum;
        latency_summarize (samples, o->iterations, &sum);
        latency_print_row (stdout, label, &sum);
        *p50 = sum.p50;
        e = sb_pooled (&error);
    } else
        printf ("| oneDNN matmul %s | failed during the run (status %d) |\n", weight_dtype_name (dtype), (int) s);
    free (y);
    s_net_free (&n);
    return e;
}
#endif
