#include "backends/autoselect.h"

#include "backends/backends.h"
#include "base/log.h"
#include "clock.h"
#include "latency.h"
#include "rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS1_ITERATIONS 2000
#define BATCH_ITERATIONS 300
#define INPUT_POOL 16

typedef struct {
    const backend_iface_t *iface;
    model_config_t cfg;
    bool beside;        /* not measured: a kernel of another model is resident on the device */
} option_t;

/* Times ITER calls of ROWS rows after a tenth as many unmeasured; p50/p99 in us. */
static int s_time (const backend_iface_t *iface, backend_model_t *impl, const weights_t *w, uint32_t rows, int iter,
                   double *p50, double *p99)
{
    size_t nin = (size_t) rows * w->input_size;
    float *in = malloc (INPUT_POOL * nin * sizeof (float));
    float *out = malloc ((size_t) rows * w->output_size * sizeof (float));
    double *samples = malloc ((size_t) iter * sizeof (double));
    int rc = in && out && samples ? 0 : -1;
    uint64_t seed = 0x5eed;
    for (size_t i = 0; rc == 0 && i < INPUT_POOL * nin; i++)
        in[i] = rng_uniform (&seed, -1.0f, 1.0f);
    char err[256];
    for (int i = -iter / 10; rc == 0 && i < iter; i++) {
        uint64_t t0 = clock_now_ns ();
        if (iface->infer (impl, in + (size_t) ((unsigned) i % INPUT_POOL) * nin, rows, out, err, sizeof err) != SIG_OK)
            rc = -1;
        if (i >= 0)
            samples[i] = (double) (clock_now_ns () - t0) / 1e3;
    }
    if (rc == 0) {
        latency_summary_t s;
        latency_summarize (samples, (size_t) iter, &s);
        *p50 = s.p50;
        *p99 = s.p99;
    }
    free (in);
    free (out);
    free (samples);
    return rc;
}

static int s_by_p99 (const void *a, const void *b)
{
    const autoselect_candidate_t *x = a, *y = b;
    if (x->note[0] || y->note[0])
        return (x->note[0] != 0) - (y->note[0] != 0);
    return (x->p99_us > y->p99_us) - (x->p99_us < y->p99_us);
}

const backend_iface_t *autoselect_choose (const weights_t *w, model_config_t *cfg, int device,
                                          autoselect_candidate_t *out, size_t cap, size_t *count,
                                          char *err, size_t errlen)
{
    option_t opts[16];
    size_t n = 0;
    char why[256] = BACKENDS_NO_GPU;
    opts[n] = (option_t) { .iface = backends_find (cfg->type, BACKEND_CPU, why, sizeof why), .cfg = *cfg };
    opts[n].cfg.backend = BACKEND_CPU;
    n++;
    int devices = 0;
    const gpu_backend_t *gpu = backends_gpu (why, sizeof why);
    const backend_iface_t *cuda = gpu ? gpu->by_type[cfg->type] : NULL;
    if (!gpu || gpu->device_count (&devices, why, sizeof why) != 0 || device >= devices)
        log_info ("model %s: backend auto: no CUDA device to measure (%s)", cfg->name,
                  devices ? "the configured device does not exist" : why);
    else if (!cuda)
        log_info ("model %s: backend auto: no CUDA backend for \"type\": \"%s\"", cfg->name, model_type_name (cfg->type));
    else if (!model_type_can (cfg->type, MODEL_CAP_CUDA_KERNELS)) {
        /* one candidate: its kernel follows the shape and weight_dtype */
        opts[n] = (option_t) { .iface = cuda, .cfg = *cfg };
        opts[n].cfg.backend = BACKEND_CUDA;
        n++;
    } else {
        /* Next to a kernel another model keeps resident (a reload: the models loaded at start run), a
         * graph may wait for it forever (measured on an H100: the zero-copy mbyv graph's load); a
         * second persistent kernel does not. Such candidates are listed, not measured. */
        const int resident = gpu->resident (device);
        for (int k = 0; k < CUDA_KERNEL_COUNT; k++) {
            if (cfg->kernel_given && (int) cfg->kernel != k)
                continue;
            for (int zc = 0; zc < 2; zc++) {
                const cuda_kernel_info_t *kernel = cuda_kernel_info ((cuda_kernel_t) k);
                if (zc && !kernel->zero_copy_choice)
                    continue;       /* it always reads and writes mapped memory */
                opts[n] = (option_t) { .iface = cuda, .cfg = *cfg };
                opts[n].cfg.backend = BACKEND_CUDA;
                opts[n].cfg.kernel = (cuda_kernel_t) k;
                opts[n].cfg.zero_copy = zc;
                opts[n].cfg.graph = true;
                opts[n].beside = resident > 0 && !kernel->resident;
                n++;
            }
        }
    }
    autoselect_candidate_t cands[16];
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
        autoselect_candidate_t *c = &cands[i];
        memset (c, 0, sizeof *c);
        snprintf (c->backend, sizeof c->backend, "%s", opts[i].iface->name);
        char why_not[256] = "";
        backend_model_t *impl = NULL;
        const char *kname = opts[i].cfg.backend == BACKEND_CPU ? cpu_kernel_name (opts[i].cfg.cpu_kernel)
                                                                : cuda_kernel_name (opts[i].cfg.kernel);
        log_debug ("model %s: backend auto: loading candidate %s %s%s", cfg->name, c->backend, kname,
                   opts[i].cfg.zero_copy ? "+zerocopy" : "");
        char held[64];
        if (!backend_holds (opts[i].iface, cfg->weight_dtype))
            snprintf (why_not, sizeof why_not, "model: holds weights in %s, not %s",
                      backend_holds_text (opts[i].iface, held, sizeof held), weight_dtype_name (cfg->weight_dtype));
        else if (opts[i].beside)
            snprintf (why_not, sizeof why_not, "model: beside a resident kernel on device %d (a restart measures it)",
                      device);
        else
            impl = opts[i].iface->load (w, &opts[i].cfg, device, why_not, sizeof why_not);
        if (!impl) {
            snprintf (c->kernel, sizeof c->kernel, "%s%s", kname,
                      opts[i].cfg.zero_copy && opts[i].cfg.backend == BACKEND_CUDA ? "+zerocopy" : "");
            /* the backend's message starts with the model's name; keep the reason */
            const char *colon = strstr (why_not, ": ");
            snprintf (c->note, sizeof c->note, "not loaded: %.80s", colon ? colon + 2 : why_not);
            continue;
        }
        snprintf (c->kernel, sizeof c->kernel, "%s", opts[i].iface->kernel_name (impl));
        log_debug ("model %s: backend auto: timing candidate %s %s", cfg->name, c->backend, c->kernel);
        c->batch_rows = backend_rows (&opts[i].cfg);
        if (s_time (opts[i].iface, impl, w, 1, ROWS1_ITERATIONS, &c->p50_us, &c->p99_us) != 0
            || s_time (opts[i].iface, impl, w, c->batch_rows, BATCH_ITERATIONS, &c->batch_p50_us, &c->batch_p99_us) != 0)
            snprintf (c->note, sizeof c->note, "failed while being measured");
        else if (best == n || c->p99_us < cands[best].p99_us)
            best = i;
        log_debug ("model %s: backend auto: releasing candidate %s %s", cfg->name, c->backend, c->kernel);
        opts[i].iface->destroy (&impl);
    }
    if (best == n) {
        sig_set_error (err, errlen, "model \"%s\": backend auto: no candidate could be loaded (cpu: %s)", cfg->name,
                       cands[0].note);
        return NULL;
    }
    *cfg = opts[best].cfg;
    const backend_iface_t *chosen = opts[best].iface;
    log_info ("model %s: backend auto, measured in process on the real weights (us; rows 1 p99 decides):", cfg->name);
    log_info ("  %-6s %-24s %9s %9s %6s %9s %9s", "backend", "kernel", "p50", "p99", "rows", "p50", "p99");
    qsort (cands, n, sizeof cands[0], s_by_p99);
    for (size_t i = 0; i < n; i++) {
        const autoselect_candidate_t *c = &cands[i];
        if (c->note[0])
            log_info ("  %-6s %-24s %s", c->backend, c->kernel, c->note);
        else
            log_info ("  %-6s %-24s %9.2f %9.2f %6u %9.2f %9.2f%s", c->backend, c->kernel, c->p50_us, c->p99_us,
                      c->batch_rows, c->batch_p50_us, c->batch_p99_us, i == 0 ? "  <- chosen" : "");
        if (i < cap)
            out[i] = *c;
    }
    *count = n < cap ? n : cap;
    return chosen;
}
