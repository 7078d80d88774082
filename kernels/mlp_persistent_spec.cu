/* persistent, specialised at load: the kernel of mlp_persistent_kernel.cuh compiled with NVRTC for one
 * model's image header (its shapes and plan as constants, mlp_persistent_kernel.cuh says what that
 * changes), loaded and launched through the driver API. The kernel's source text is embedded in the
 * binary at build time (tools/embed-sources.sh, the Makefile's SPEC_SOURCES: the family headers it
 * includes, mlp_persistent_impl.cuh, sig_device.cuh, mlp_persistent_kernel.cuh and its parts), so the
 * server needs libnvrtc but no CUDA headers: the few system headers they include are given as stubs
 * below (cuda_fp16.h is one of NVRTC's built-in headers).
 *
 * The driver entry points come from the runtime (cudaGetDriverEntryPointByVersion): nothing links
 * libcuda, and a machine without a driver (CI) can still compile. Host code only. */
#include "sig_fused.h"
#include "sig_persistent.h"
#include "sig_spec.h"
#include "mlp_persistent_impl.cuh"

#include <cuda.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tools/embed-sources.sh's table (generated C) */
typedef struct {
    const char *name, *text;
} sig_spec_file_t;
extern "C" const sig_spec_file_t sig_spec_files[];
extern "C" const size_t sig_spec_file_count;

/* The header initializer below lists p_header_t's fields in declaration order: a field added or
 * moved there must be added here too (these fail the build until it is). */
static_assert (sizeof (p_header_t) == 1504u, "p_header_t changed: update s_header_init");
static_assert (offsetof (p_header_t, payload) == 80u && offsetof (p_header_t, box) == 96u
                   && offsetof (p_header_t, sync) == 140u && offsetof (p_header_t, slice2_off) == 144u
                   && offsetof (p_header_t, layer) == 160u && offsetof (p_header_t, in_) == 1312u
                   && offsetof (p_header_t, act) == 1440u,
               "p_header_t changed: update s_header_init");
static_assert (sizeof (sig_persistent_layer_plan_t) == 72u && offsetof (sig_persistent_layer_plan_t, fuse) == 48u
                   && offsetof (sig_persistent_layer_plan_t, image) == 56u,
               "sig_persistent_layer_plan_t changed: update s_header_init");
static_assert (sizeof (sig_persistent_layout_t) == 44u, "sig_persistent_layout_t changed: update s_header_init");

/* System headers the embedded files include, as NVRTC needs them (device code only). */
static const char s_stub_runtime_api[] = "#pragma once\ntypedef struct CUstream_st *cudaStream_t;\n";
static const char s_stub_runtime[] = "#pragma once\n";
static const char s_stub_stdint[] =
    "#pragma once\n"
    "typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;\n"
    "typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;\n"
    "typedef unsigned long long uint64_t; typedef unsigned long long uintptr_t;\n"
    "#define UINT32_MAX 0xffffffffu\n#define UINT64_MAX 0xffffffffffffffffull\n#define INT32_MAX 0x7fffffff\n";
static const char s_stub_stddef[] = "#pragma once\n";   /* size_t is NVRTC's own */

/* A growing text. */
typedef struct {
    char *p;
    size_t len, cap;
    bool failed;
} s_text_t;

static void s_put (s_text_t *t, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));
static void s_put (s_text_t *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start (ap, fmt);
        const int n = vsnprintf (t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end (ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if (t->p && t->len + (size_t) n < t->cap) {
            t->len += (size_t) n;
            return;
        }
        const size_t cap = (t->cap + (size_t) n + 1u) * 2u;
        char *q = static_cast<char *> (realloc (t->p, cap));
        if (!q) {
            t->failed = true;
            return;
        }
        t->p = q;
        t->cap = cap;
    }
}

/* H's fields, in p_header_t's order, as a brace initializer. */
static void s_header_init (s_text_t *t, const p_header_t *h)
{
    s_put (t, "{ %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, \\\n",
           h->magic, h->layers, h->blocks, h->max_rows, h->in, h->out, h->done_mode, h->dyn_bytes, h->bias_off,
           h->act_off0, h->act_off1, h->part_off, h->lead_end, h->part_stride, h->mpad, h->slice_off, h->work_end,
           h->read_leader, h->dtype, h->chunk_rows);
    s_put (t, "  %lluull, %lluull, \\\n", (unsigned long long) h->payload, (unsigned long long) h->bias_image);
    const sig_persistent_layout_t *b = &h->box;
    s_put (t, "  { %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu }, %uu, %uu, { 0u, 0u, 0u }, \\\n  {", b->ctrl, b->status,
           b->slots, b->slot_bytes, b->request, b->done, b->features, b->outputs, b->row_floats, b->ring, b->total, h->sync,
           h->slice2_off);
    for (uint32_t l = 0; l < SIG_FUSED_MAX_LAYERS; ++l) {
        const sig_persistent_layer_plan_t *L = &h->layer[l];
        s_put (t, " { %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %uu, %lluull, %lluull },%s",
               L->spread, L->glog, L->passes, L->active, L->last_active, L->by_out, L->slots, L->bank, L->regs, L->xs,
               L->w_smem, L->bias, L->fuse, L->wbias, (unsigned long long) L->image, (unsigned long long) L->per_block,
               l % 2u ? " \\\n  " : "");
    }
    s_put (t, " }, \\\n  {");
    for (uint32_t l = 0; l < SIG_FUSED_MAX_LAYERS; ++l)
        s_put (t, " %uu,", h->in_[l]);
    s_put (t, " }, {");
    for (uint32_t l = 0; l < SIG_FUSED_MAX_LAYERS; ++l)
        s_put (t, " %uu,", h->out_[l]);
    s_put (t, " }, {");
    for (uint32_t l = 0; l < SIG_FUSED_MAX_LAYERS; ++l)
        s_put (t, " %d,", h->act[l]);
    s_put (t, " } }\n");
}

static char *s_source (const void *image, bool traced);

extern "C" char *sig_persistent_spec_source (const void *image) { return s_source (image, false); }

extern "C" char *sig_persistent_spec_source_traced (const void *image) { return s_source (image, true); }

static char *s_source (const void *image, bool traced)
{
    const p_header_t *h = static_cast<const p_header_t *> (image);
    if (!h || h->magic != P_MAGIC || h->layers < 1u || h->layers > SIG_FUSED_MAX_LAYERS || h->dtype > SIG_DTYPE_BF16)
        return NULL;
    s_text_t t = { NULL, 0, 0, false };
    s_put (&t, "/* sigserve: the persistent MLP kernel specialised for %u layers, %u -> %u, cluster of %u, dtype %u */\n",
           h->layers, h->in, h->out, h->blocks, h->dtype);
    s_put (&t, "#define P_SPEC 1\n#define P_SPEC_DTYPE %u\n%s#define P_SPEC_HEADER ", h->dtype,
           traced ? "#define P_SPEC_TRACED 1\n" : "");
    s_header_init (&t, h);
    s_put (&t, "#define P_SPEC_WORDS {");
    const uint32_t *words = static_cast<const uint32_t *> (image);
    for (size_t i = 0; i < sizeof (p_header_t) / 4u; ++i)
        s_put (&t, "%s%uu,", i % 16u ? " " : " \\\n  ", words[i]);
    s_put (&t, " }\n");
    s_put (&t, "#include \"mlp_persistent_kernel.cuh\"\n");
    if (t.failed) {
        free (t.p);
        return NULL;
    }
    return t.p;
}

extern "C" int sig_spec_nvrtc_version (int *major, int *minor)
{
    return nvrtcVersion (major, minor) == NVRTC_SUCCESS ? 0 : -1;
}

extern "C" int sig_spec_compile (const char *src, int arch, void **cubin, size_t *bytes, char *log, size_t loglen)
{
    if (log && loglen)
        log[0] = 0;
    *cubin = NULL;
    *bytes = 0;
    const size_t nfiles = sig_spec_file_count + 4u;
    const char **texts = static_cast<const char **> (calloc (nfiles, sizeof *texts));
    const char **names = static_cast<const char **> (calloc (nfiles, sizeof *names));
    if (!texts || !names) {
        free (texts);
        free (names);
        snprintf (log, loglen, "out of memory");
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < sig_spec_file_count; ++i, ++n) {
        names[n] = sig_spec_files[i].name;
        texts[n] = sig_spec_files[i].text;
    }
    names[n] = "cuda_runtime_api.h", texts[n++] = s_stub_runtime_api;
    names[n] = "cuda_runtime.h", texts[n++] = s_stub_runtime;
    names[n] = "stdint.h", texts[n++] = s_stub_stdint;
    names[n] = "stddef.h", texts[n++] = s_stub_stddef;
    nvrtcProgram prog = NULL;
    nvrtcResult r = nvrtcCreateProgram (&prog, src, "sig_persistent_spec.cu", (int) n, texts, names);
    free (texts);
    free (names);
    if (r != NVRTC_SUCCESS) {
        snprintf (log, loglen, "nvrtcCreateProgram: %s", nvrtcGetErrorString (r));
        return -1;
    }
    char archopt[48];
    snprintf (archopt, sizeof archopt, "--gpu-architecture=sm_%d", arch);
    const char *opts[] = { archopt, "-std=c++17", "-default-device" };
    r = nvrtcCompileProgram (prog, (int) (sizeof opts / sizeof opts[0]), opts);
    if (r != NVRTC_SUCCESS) {
        size_t need = 0;
        int off = snprintf (log, loglen, "nvrtcCompileProgram: %s: ", nvrtcGetErrorString (r));
        if (nvrtcGetProgramLogSize (prog, &need) == NVRTC_SUCCESS && need > 1u && log && off >= 0
            && (size_t) off < loglen) {
            char *full = static_cast<char *> (malloc (need));
            if (full && nvrtcGetProgramLog (prog, full) == NVRTC_SUCCESS)
                snprintf (log + off, loglen - (size_t) off, "%s", full);
            free (full);
        }
        nvrtcDestroyProgram (&prog);
        return -1;
    }
    size_t size = 0;
    r = nvrtcGetCUBINSize (prog, &size);
    void *bin = r == NVRTC_SUCCESS && size ? malloc (size) : NULL;
    if (bin)
        r = nvrtcGetCUBIN (prog, static_cast<char *> (bin));
    nvrtcDestroyProgram (&prog);
    if (!bin || r != NVRTC_SUCCESS) {
        free (bin);
        snprintf (log, loglen, "nvrtcGetCUBIN: %s", r != NVRTC_SUCCESS ? nvrtcGetErrorString (r) : "no cubin");
        return -1;
    }
    *cubin = bin;
    *bytes = size;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The driver API, through the runtime's entry points */

typedef CUresult (*s_load_fn) (CUmodule *, const void *);
typedef CUresult (*s_get_fn) (CUfunction *, CUmodule, const char *);
typedef CUresult (*s_attr_fn) (CUfunction, CUfunction_attribute, int);
typedef CUresult (*s_launch_fn) (const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*s_unload_fn) (CUmodule);
typedef CUresult (*s_errstr_fn) (CUresult, const char **);
static struct {
    s_load_fn load;
    s_get_fn get;
    s_attr_fn attr;
    s_launch_fn launch;
    s_unload_fn unload;
    s_errstr_fn errstr;
    cudaError_t status;
} s_drv;
static pthread_once_t s_drv_once = PTHREAD_ONCE_INIT;

static void s_drv_init (void)
{
    struct {
        const char *name;
        void **fn;
    } want[] = { { "cuModuleLoadData", (void **) &s_drv.load },    { "cuModuleGetFunction", (void **) &s_drv.get },
                 { "cuFuncSetAttribute", (void **) &s_drv.attr },  { "cuLaunchKernelEx", (void **) &s_drv.launch },
                 { "cuModuleUnload", (void **) &s_drv.unload },    { "cuGetErrorString", (void **) &s_drv.errstr } };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        cudaError_t e = cudaGetDriverEntryPointByVersion (want[i].name, want[i].fn, 12000, cudaEnableDefault, &q);
        if (e == cudaSuccess && (q != cudaDriverEntryPointSuccess || !*want[i].fn))
            e = cudaErrorSymbolNotFound;
        if (e != cudaSuccess) {
            s_drv.status = e;
            return;
        }
    }
    s_drv.status = cudaSuccess;
}

struct sig_spec_module {
    CUmodule module;
    CUfunction fn;
};

static void s_cu_error (CUresult r, const char *what, char *err, size_t errlen)
{
    const char *s = NULL;
    if (s_drv.errstr)
        s_drv.errstr (r, &s);
    snprintf (err, errlen, "%s: CUDA driver error %d (%s)", what, (int) r, s ? s : "?");
}

extern "C" int sig_spec_load (const void *cubin, uint32_t smem_bytes, sig_spec_module_t **module, char *err,
                              size_t errlen)
{
    return sig_spec_load_fn (cubin, "sig_persistent_spec", smem_bytes, module, err, errlen);
}

extern "C" int sig_spec_load_fn (const void *cubin, const char *name, uint32_t smem_bytes, sig_spec_module_t **module,
                                 char *err, size_t errlen)
{
    *module = NULL;
    pthread_once (&s_drv_once, s_drv_init);
    if (s_drv.status != cudaSuccess) {
        snprintf (err, errlen, "the driver API's entry points: %s", cudaGetErrorString (s_drv.status));
        return -1;
    }
    sig_spec_module_t *m = static_cast<sig_spec_module_t *> (calloc (1, sizeof *m));
    if (!m) {
        snprintf (err, errlen, "out of memory");
        return -1;
    }
    CUresult r = s_drv.load (&m->module, cubin);
    if (r != CUDA_SUCCESS) {
        s_cu_error (r, "cuModuleLoadData", err, errlen);
        free (m);
        return -1;
    }
    r = s_drv.get (&m->fn, m->module, name);
    if (r == CUDA_SUCCESS)
        r = s_drv.attr (m->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int) smem_bytes);
    if (r == CUDA_SUCCESS)   /* clusters of more than 8 (the LSTM's 16) where the device has them */
        (void) s_drv.attr (m->fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
    if (r != CUDA_SUCCESS) {
        s_cu_error (r, "cuModuleGetFunction / cuFuncSetAttribute", err, errlen);
        s_drv.unload (m->module);
        free (m);
        return -1;
    }
    *module = m;
    return 0;
}

extern "C" int sig_spec_launch_args (const sig_spec_module_t *module, uint32_t blocks, uint32_t threads,
                                     uint32_t smem_bytes, int cluster, int cooperative, cudaStream_t stream, void **args)
{
    if (!module || !blocks || !threads || !args || !s_drv.launch)
        return (int) cudaErrorInvalidValue;
    CUlaunchAttribute attr;
    memset (&attr, 0, sizeof attr);
    if (cooperative) {
        attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attr.value.cooperative = 1;
    } else {
        attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = blocks;
        attr.value.clusterDim.y = 1;
        attr.value.clusterDim.z = 1;
    }
    CUlaunchConfig cfg;
    memset (&cfg, 0, sizeof cfg);
    cfg.gridDimX = blocks;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = threads;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = smem_bytes;
    cfg.hStream = (CUstream) stream;
    cfg.attrs = &attr;
    cfg.numAttrs = cooperative || cluster ? 1u : 0u;
    const CUresult r = s_drv.launch (&cfg, module->fn, args, NULL);
    /* the driver's codes for launches are the runtime's numbers */
    return r == CUDA_SUCCESS ? (int) cudaSuccess : (int) r;
}

extern "C" int sig_spec_launch (const sig_spec_module_t *module, const void *image, void *box,
                                const sig_persistent_plan_t *plan, cudaStream_t stream)
{
    if (!module || !image || !box || !plan || plan->cluster_blocks < 1u
        || plan->cluster_blocks > SIG_PERSISTENT_MAX_BLOCKS)
        return (int) cudaErrorInvalidValue;
    const void *img = image;
    void *b = box;
    unsigned long long *trace = reinterpret_cast<unsigned long long *> (plan->trace);   /* read when traced */
    void *args[] = { &img, &b, &trace };
    /* always as a cluster, of one block too */
    return sig_spec_launch_args (module, plan->cluster_blocks, P_T, plan->smem_bytes, 1, 0, stream, args);
}

extern "C" void sig_spec_unload (sig_spec_module_t **module)
{
    if (!module || !*module)
        return;
    if (s_drv.unload)
        s_drv.unload ((*module)->module);
    free (*module);
    *module = NULL;
}
