/* sigbench tables 1-3 on one GPU (main.c says what each row times). */
#define _GNU_SOURCE
#include "sigbench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SIGSERVE_HAVE_CUDA

double sb_elapsed_us (cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    CUDA_OK (cudaEventSynchronize (b));
    CUDA_OK (cudaEventElapsedTime (&ms, a, b));
    return (double) ms * 1e3;
}

static void s_bench_launch (const options_t *o)
{
    cudaStream_t s;
    cudaEvent_t a, b;
    CUDA_OK (cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking));
    CUDA_OK (cudaEventCreate (&a));
    CUDA_OK (cudaEventCreate (&b));
    double *samples = malloc (o->iterations * sizeof (double));
    latency_summary_t sum;
    printf ("### Empty-kernel launch, %u iterations after %u warm-up, microseconds\n\n", o->iterations, o->warmup);
    latency_print_header (stdout, "configuration");
    const int reps[] = { 1, 32 };
    for (int r = 0; r < 2; r++) {
        for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
            CUDA_OK (cudaEventRecord (a, s));
            for (int k = 0; k < reps[r]; k++)
                CUDA_OK (sig_empty_kernel (s));
            CUDA_OK (cudaEventRecord (b, s));
            double us = sb_elapsed_us (a, b) / reps[r];
            if (i >= o->warmup)
                samples[i - o->warmup] = us;
        }
        latency_summarize (samples, o->iterations, &sum);
        latency_print_row (stdout, reps[r] == 1 ? "CUDA events, 1 launch" : "CUDA events, 32 launches (per launch)", &sum);
    }
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        double t0 = sb_now_us ();
        CUDA_OK (sig_empty_kernel (s));
        CUDA_OK (cudaStreamSynchronize (s));
        if (i >= o->warmup)
            samples[i - o->warmup] = sb_now_us () - t0;
    }
    latency_summarize (samples, o->iterations, &sum);
    latency_print_row (stdout, "launch + stream sync, host clock", &sum);
    printf ("\n");
    free (samples);
    cudaEventDestroy (a);
    cudaEventDestroy (b);
    cudaStreamDestroy (s);
}

/* Where an end-to-end request's fixed cost goes: host clock around launch + event record + spin,
 * for an empty kernel, an empty-kernel graph, a graph of the two copies alone, and a graph of
 * H2D (the demo's 2 KiB input) + empty kernel + D2H (4 bytes). */
static void s_bench_overheads (const options_t *o)
{
    cudaStream_t s;
    cudaEvent_t done;
    float *h_in, *h_out, *d_in, *d_out;
    const size_t in_bytes = 512 * sizeof (float), out_bytes = sizeof (float);
    CUDA_OK (cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking));
    CUDA_OK (cudaEventCreateWithFlags (&done, cudaEventDisableTiming));
    CUDA_OK (cudaHostAlloc ((void **) &h_in, in_bytes, cudaHostAllocDefault));
    CUDA_OK (cudaHostAlloc ((void **) &h_out, out_bytes, cudaHostAllocDefault));
    CUDA_OK (cudaMalloc ((void **) &d_in, in_bytes));
    CUDA_OK (cudaMalloc ((void **) &d_out, out_bytes));
    cudaGraphExec_t graphs[3];
    for (int g = 0; g < 3; g++) {
        cudaGraph_t graph;
        CUDA_OK (cudaStreamBeginCapture (s, cudaStreamCaptureModeThreadLocal));
        if (g >= 1)
            CUDA_OK (cudaMemcpyAsync (d_in, h_in, in_bytes, cudaMemcpyHostToDevice, s));
        if (g != 1)
            CUDA_OK (sig_empty_kernel (s));
        if (g >= 1)
            CUDA_OK (cudaMemcpyAsync (h_out, d_out, out_bytes, cudaMemcpyDeviceToHost, s));
        CUDA_OK (cudaStreamEndCapture (s, &graph));
        CUDA_OK (cudaGraphInstantiate (&graphs[g], graph, 0));
        CUDA_OK (cudaGraphUpload (graphs[g], s));
        cudaGraphDestroy (graph);
    }
    const char *labels[] = { "empty kernel, direct launch", "graph: empty kernel", "graph: H2D 2 KiB + D2H 4 B",
                             "graph: H2D 2 KiB + empty kernel + D2H 4 B" };
    double *samples = malloc (o->iterations * sizeof (double));
    printf ("### Fixed costs of a request, host clock around launch + event record + spin on the event, %u "
            "iterations, microseconds\n\n", o->iterations);
    latency_print_header (stdout, "what is launched");
    for (int v = 0; v < 4; v++) {
        for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
            double t0 = sb_now_us ();
            if (v == 0)
                CUDA_OK (sig_empty_kernel (s));
            else
                CUDA_OK (cudaGraphLaunch (graphs[v == 1 ? 0 : v == 2 ? 1 : 2], s));
            CUDA_OK (cudaEventRecord (done, s));
            cudaError_t e;
            while ((e = cudaEventQuery (done)) == cudaErrorNotReady)
                ;
            CUDA_OK (e);
            if (i >= o->warmup)
                samples[i - o->warmup] = sb_now_us () - t0;
        }
        latency_summary_t sum;
        latency_summarize (samples, o->iterations, &sum);
        latency_print_row (stdout, labels[v], &sum);
    }
    printf ("\n");
    free (samples);
    for (int g = 0; g < 3; g++)
        cudaGraphExecDestroy (graphs[g]);
    cudaFree (d_in);
    cudaFree (d_out);
    cudaFreeHost (h_in);
    cudaFreeHost (h_out);
    cudaEventDestroy (done);
    cudaStreamDestroy (s);
}

static const char *const s_gpu_kernels[] = { "cublas", "warp", "mbyv", "fused" };
static const cuda_kernel_t s_gpu_kernel_ids[] = { CUDA_KERNEL_CUBLAS, CUDA_KERNEL_WARP, CUDA_KERNEL_MBYV, CUDA_KERNEL_FUSED };

/* Persistent loads: the kernel specialised for the model (NVRTC) instead of the generic one. */
bool sb_specialise;
bool sb_green;     /* the next load with green_context */

backend_model_t *sb_load_gpu_held (const options_t *o, const weights_t *w, cuda_kernel_t kernel, bool zero_copy,
                                         weight_dtype_t dtype)
{
    model_config_t cfg;
    memset (&cfg, 0, sizeof cfg);
    snprintf (cfg.name, sizeof cfg.name, "bench-%s", cuda_kernel_name (kernel));
    cfg.backend = BACKEND_CUDA;
    cfg.kernel = kernel;
    cfg.graph = true;
    cfg.zero_copy = zero_copy;
    cfg.wait = o->wait;
    cfg.max_rows = o->rows;
    cfg.weight_dtype = dtype;
    cfg.specialise = sb_specialise;
    cfg.green_context = sb_green;
    char err[2048];
    cfg.device = o->device;
    backend_model_t *m = backend_cuda_iface.load (w, &cfg, o->device, err, sizeof err);
    if (!m)
        fprintf (stderr, "sigbench: %s\n", err);
    return m;
}

static backend_model_t *s_load_gpu (const options_t *o, const weights_t *w, cuda_kernel_t kernel, bool zero_copy)
{
    return sb_load_gpu_held (o, w, kernel, zero_copy, WEIGHT_DTYPE_F32);
}

/* Kernel-only: events around the layers; the input for each call is copied to the device first,
 * outside the timed region, and the output checked after it. Returns the pooled error. */
static double s_bench_kernels (const options_t *o, backend_model_t *m, const weights_t *w, bool graph, int reps,
                               float *const *in, const double *const *ref, latency_summary_t *out)
{
    cudaStream_t s = cuda_model_stream (m);
    cudaEvent_t a, b;
    CUDA_OK (cudaEventCreate (&a));
    CUDA_OK (cudaEventCreate (&b));
    size_t nin = (size_t) o->rows * w->input_size, nout = (size_t) o->rows * w->output_size;
    float *pin = cuda_model_pinned_input (m), *pout = cuda_model_pinned_output (m);
    float *y = malloc (nout * sizeof (float));
    double *samples = malloc (o->iterations * sizeof (double));
    pooled_error_t err = { 0, 0 };
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        memcpy (pin, in[i % POOL], nin * sizeof (float));
        CUDA_OK (cuda_model_enqueue (m, CUDA_RUN_END_TO_END, false, o->rows, pin, pout));
        /* The single-launch method: the stream idle, then events around the launch (launch latency
         * included). A graph launched behind pending work waits on it in ways a kernel does not. */
        CUDA_OK (cudaStreamSynchronize (s));
        CUDA_OK (cudaEventRecord (a, s));
        for (int r = 0; r < reps; r++)
            CUDA_OK (cuda_model_enqueue (m, CUDA_RUN_KERNELS, graph, o->rows, NULL, NULL));
        CUDA_OK (cudaEventRecord (b, s));
        double us = sb_elapsed_us (a, b) / reps;
        if (i >= o->warmup) {
            samples[i - o->warmup] = us;
            if (i % 16 == 0) {   /* checking every call would double the run: every 16th, all pool entries */
                CUDA_OK (cuda_model_fetch_output (m, o->rows, y));
                sb_pool (&err, y, ref[i % POOL], nout);
            }
        }
    }
    latency_summarize (samples, o->iterations, out);
    free (samples);
    free (y);
    cudaEventDestroy (a);
    cudaEventDestroy (b);
    return sb_pooled (&err);
}


/* End-to-end, host clock: what one request costs the serving thread, copy-in to copy-out. */
/* The timed calls of one end-to-end row into SAMPLES (o->iterations of them); the pooled relative
 * error. Any thread (one model each). */
double sb_e2e_samples (const options_t *o, backend_model_t *m, const weights_t *w, e2e_mode_t mode,
                             float *const *in, const double *const *ref, double *samples)
{
    size_t nin = (size_t) o->rows * w->input_size, nout = (size_t) o->rows * w->output_size;
    float *pin = cuda_model_pinned_input (m), *pout = cuda_model_pinned_output (m);
    float *y = malloc (nout * sizeof (float));
    pooled_error_t err = { 0, 0 };
    char msg[512];
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        const float *x = in[i % POOL];
        double t0 = sb_now_us ();
        switch (mode) {
        case E2E_PAGEABLE:   /* the request's own (pageable) memory straight to the device */
            CUDA_OK (cuda_model_enqueue (m, CUDA_RUN_END_TO_END, false, o->rows, x, y));
            CUDA_OK (cuda_model_wait (m));
            break;
        case E2E_PINNED:
            memcpy (pin, x, nin * sizeof (float));
            CUDA_OK (cuda_model_enqueue (m, CUDA_RUN_END_TO_END, false, o->rows, pin, pout));
            CUDA_OK (cuda_model_wait (m));
            memcpy (y, pout, nout * sizeof (float));
            break;
        case E2E_PINNED_GRAPH:   /* exactly the service's request path */
            if (backend_cuda_iface.infer (m, x, o->rows, y, msg, sizeof msg) != SIG_OK) {
                fprintf (stderr, "sigbench: %s\n", msg);
                exit (1);
            }
            break;
        }
        double t1 = sb_now_us ();
        if (i >= o->warmup) {
            samples[i - o->warmup] = t1 - t0;
            sb_pool (&err, y, ref[i % POOL], nout);
        }
    }
    free (y);
    return sb_pooled (&err);
}

double sb_bench_e2e (const options_t *o, backend_model_t *m, const weights_t *w, e2e_mode_t mode,
                           float *const *in, const double *const *ref, latency_summary_t *out)
{
    double *samples = malloc (o->iterations * sizeof (double));
    const double e = sb_e2e_samples (o, m, w, mode, in, ref, samples);
    latency_summarize (samples, o->iterations, out);
    free (samples);
    return e;
}

static void s_print_device (void)
{
    int dev = 0, driver = 0, runtime = 0;
    struct cudaDeviceProp p;
    CUDA_OK (cudaGetDevice (&dev));
    CUDA_OK (cudaGetDeviceProperties (&p, dev));
    cudaDriverGetVersion (&driver);
    cudaRuntimeGetVersion (&runtime);
    printf ("GPU: %s (compute capability %d.%d, %d SMs), CUDA driver API %d.%d, runtime %d.%d\n\n", p.name, p.major,
            p.minor, p.multiProcessorCount, driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
}

/* Tables 1-3, PERSISTENT (sb_bench_persistent, passed in: persistent.c uses this file's helpers, so
 * this file does not call it by name) for the resident kernel's rows. 0 when they ran, -1 when there
 * is no device (the reason printed), 1 when the persistent rows missed an error bound. */
int sb_bench_gpu (const options_t *o, const weights_t *w, float *const *in, const double *const *ref,
                  sb_bench_fn persistent)
{
    int count = 0;
    char why[256];
    if (cuda_device_count (&count, why, sizeof why) != 0) {
        printf ("GPU tables skipped: no CUDA device (%s)\n\n", why);
        return -1;
    }
    s_print_device ();
    if (o->only_persistent) {
        printf ("### End-to-end in process, persistent kernel, %u iterations after %u warm-up, host clock from "
                "copy-in to copy-out (wait: %s), microseconds\n\n", o->iterations, o->warmup, cuda_wait_name (o->wait));
        latency_print_header (stdout, "kernel | host memory + launch");
        int rc = persistent (o, w, in, ref);
        printf ("\n");
        return rc ? 1 : 0;
    }
    s_bench_launch (o);
    s_bench_overheads (o);
    backend_model_t *models[4] = { NULL };
    for (int k = 0; k < 4; k++)
        models[k] = s_load_gpu (o, w, s_gpu_kernel_ids[k], false);
    printf ("### Kernel-only, %u iterations after %u warm-up, CUDA events around the layers on an idle stream "
            "(input already on the device), microseconds\n\n", o->iterations, o->warmup);
    latency_print_header (stdout, "kernel | mode");
    double errors[4][6];
    const char *kmodes[] = { "direct", "CUDA graph", "CUDA graph, 32 replays (per replay)" };
    for (int k = 0; k < 4; k++)
        for (int g = 0; g < 3 && models[k]; g++) {
            latency_summary_t sum;
            double e = s_bench_kernels (o, models[k], w, g > 0, g == 2 ? 32 : 1, in, ref, &sum);
            if (g < 2)
                errors[k][g] = e;
            char label[80];
            snprintf (label, sizeof label, "%s | %s", s_gpu_kernels[k], kmodes[g]);
            latency_print_row (stdout, label, &sum);
        }
    printf ("\n### End-to-end in process, %u iterations after %u warm-up, host clock from copy-in to copy-out "
            "(wait: %s), microseconds\n\n", o->iterations, o->warmup, cuda_wait_name (o->wait));
    latency_print_header (stdout, "kernel | host memory + launch");
    const char *modes[] = { "pageable + direct", "pinned + direct", "pinned + graph", "mapped zero-copy + graph" };
    for (int k = 0; k < 4; k++) {
        for (int mode = 0; mode < 3 && models[k]; mode++) {
            latency_summary_t sum;
            errors[k][2 + mode] = sb_bench_e2e (o, models[k], w, (e2e_mode_t) mode, in, ref, &sum);
            char label[64];
            snprintf (label, sizeof label, "%s | %s", s_gpu_kernels[k], modes[mode]);
            latency_print_row (stdout, label, &sum);
        }
        /* The same path with mapped buffers: no copy nodes, the kernels read and write host memory. */
        backend_model_t *zc = s_load_gpu (o, w, s_gpu_kernel_ids[k], true);
        if (zc) {
            latency_summary_t sum;
            errors[k][5] = sb_bench_e2e (o, zc, w, E2E_PINNED_GRAPH, in, ref, &sum);
            char label[64];
            snprintf (label, sizeof label, "%s | %s", s_gpu_kernels[k], modes[3]);
            latency_print_row (stdout, label, &sum);
            backend_cuda_iface.destroy (&zc);
        } else
            errors[k][5] = INFINITY;
    }
    /* Same table, same method: the resident kernel, then the floor it is measured against. */
    const int persistent_rc = persistent (o, w, in, ref);
    printf ("\nrelative error ||y - ref|| / ||ref|| against the float64 reference over the timed runs "
            "(kernel-only direct, graph; end-to-end pageable, pinned, pinned+graph, zero-copy+graph):\n");
    for (int k = 0; k < 4; k++) {
        if (!models[k]) {
            printf ("- %s: did not load\n", s_gpu_kernels[k]);
            continue;
        }
        printf ("- %s: %.2e %.2e %.2e %.2e %.2e %.2e\n", s_gpu_kernels[k], errors[k][0], errors[k][1], errors[k][2],
                errors[k][3], errors[k][4], errors[k][5]);
        for (int j = 0; j < 6; j++)
            if (!(errors[k][j] <= 1e-5))
                fprintf (stderr, "sigbench: %s: relative error %.3g over 1e-5\n", s_gpu_kernels[k], errors[k][j]);
        backend_cuda_iface.destroy (&models[k]);
    }
    printf ("\n");
    return persistent_rc ? 1 : 0;
}
#endif
