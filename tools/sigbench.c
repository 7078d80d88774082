/* sigbench: the latency tables of docs/perf.md, in one process on one GPU (its method): every timed call
 * on fresh inputs from a rotating pool, warm-up dropped, p50 p90 p99 p99.9 min max mean sd, and the
 * outputs of every timed run checked against the float64 reference.
 *   1. empty-kernel launch: CUDA events around 1 launch and around 32 (per launch), and a host clock
 *      around launch + stream synchronise;
 *   2. kernel-only, per kernel (cublas, warp, mbyv, fused), direct launches and graph replay: CUDA
 *      events around the layers, input already on the device;
 *   3. end-to-end, per kernel: pageable direct, pinned direct, pinned + graph (the service's path):
 *      a host clock around copy-in, H2D, layers, D2H, the wait and copy-out; kernel "persistent"
 *      (a host clock around its request path: features into the mapped slot, publish, spin, outputs
 *      out) and, beside it, the ping-pong floor: a resident kernel that only echoes the sequence
 *      number over the same mailbox (and variants that also write an output, read the features);
 *   4. the CPU backend (loop and OpenBLAS), host clock around infer.
 * Without a CUDA build or device only table 4 is printed, with the reason. */
#define _GNU_SOURCE
#include "rng.h"
#include "reference.h"
#include "backends/backend.h"
#include "base/threads.h"
#include "latency.h"
#include "weights/weights.h"
#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "kernels.h"
#endif

#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL 64   /* distinct inputs cycled through, so the timed calls do not see one input */
#define MAX_LAYERS 16

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
} options_t;

static double s_now_us (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

static void s_usage (FILE *out)
{
    fprintf (out,
             "usage: sigbench [--shape 512,256,64,1] [--rows R] [--iterations N] [--warmup W]\n"
             "                [--cpu C] [--weights FILE] [--seed S]\n"
             "  --shape      layer widths, input first (default: the demo model 512,256,64,1);\n"
             "               hidden layers relu, the last none\n"
             "  --weights    the demo model's safetensors file instead of random weights\n"
             "               (only with the default shape)\n"
             "  --rows       rows per call (default 1)\n"
             "  --iterations timed calls per method (default 20000); --warmup calls dropped first (2000)\n"
             "  --cpu        pin the process to core C (default: not pinned)\n"
             "  --wait       how the host waits for the GPU: spin, yield or block (default spin)\n"
             "  --no-gpu     the CPU table only\n"
             "  --devices D  the GPU tables once per CUDA device in the list D (\"0,1\"; default 0)\n"
             "  --only-persistent  of the GPU tables, only the persistent rows and the ping-pong floors\n"
             "  --persistent-variants  also time the persistent kernel at other cluster sizes, with\n"
             "               completion by the outputs, with weights in registers, with the workers\n"
             "               reading their own features, with a ring of one slot, with mbarrier\n"
             "               hand-offs, with a layer split by outputs handing them to the leader\n"
             "               (not kept in the workers for the next); each generic, then specialised\n"
             "               for the model (NVRTC)\n"
             "  --trace      also run the traced instantiations of the persistent kernel, generic\n"
             "               and specialised (the serving kernels' rows stay beside them, unchanged)\n"
             "               and print each phase's p50 in ns: seen -> started -> per layer\n"
             "               (gather, computed, scatter) -> outputs\n"
             "  --instances L  also N instances of the specialised persistent kernel on the device at\n"
             "               once for each N in L (\"1,2,4,8\"), each driven by its own thread on its own\n"
             "               core (--cpu C: C, C+1, ...): a row each, the pooled latencies and the\n"
             "               worst instance's p99\n"
             "  --green      the --instances rows with the model key green_context: each instance's\n"
             "               kernel in a green context of SMs of its own (8 on an H100)\n"
             "  --dtypes L   the persistent rows (and variants, trace) once per weight dtype in L\n"
             "               (\"f32,f16,bf16\"; default f32); f16 and bf16 also at cluster 2, 4 and 8\n"
             "  --sync K     the persistent rows' (and --instances') hand-offs: plan (default: the plan's choice), barriers\n"
             "               (cluster barriers), mbar (mbarrier arrivals, a warp) or async (st.async:\n"
             "               the stores complete the mbarriers)\n"
             "Prints a markdown table in microseconds.\n");
}

static int s_parse_shape (const char *text, options_t *o)
{
    o->layers = 0;
    const char *p = text;
    while (*p) {
        char *end;
        unsigned long v = strtoul (p, &end, 10);
        if (end == p || v == 0 || v > (1ul << 20) || o->layers > MAX_LAYERS)
            return -1;
        o->sizes[o->layers++] = (uint32_t) v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    if (o->layers < 2)
        return -1;
    o->layers--;
    return 0;
}

static int s_parse (int argc, char **argv, options_t *o)
{
    *o = (options_t) { .sizes = { 512, 256, 64, 1 }, .layers = 3, .rows = 1, .iterations = 20000, .warmup = 2000,
                       .cpu = -1, .seed = 42, .wait = CUDA_WAIT_SPIN, .gpu = 1, .instances = "" };
    static const struct option longs[] = {
        { "shape", required_argument, NULL, 's' }, { "rows", required_argument, NULL, 'r' },
        { "iterations", required_argument, NULL, 'n' }, { "warmup", required_argument, NULL, 'w' },
        { "cpu", required_argument, NULL, 'c' }, { "weights", required_argument, NULL, 'f' },
        { "seed", required_argument, NULL, 'S' }, { "wait", required_argument, NULL, 'W' },
        { "no-gpu", no_argument, NULL, 'G' }, { "help", no_argument, NULL, 'h' },
        { "only-persistent", no_argument, NULL, 'P' }, { "persistent-variants", no_argument, NULL, 'V' },
        { "devices", required_argument, NULL, 'D' }, { "trace", no_argument, NULL, 'T' },
        { "dtypes", required_argument, NULL, 'd' }, { "instances", required_argument, NULL, 'I' },
        { "sync", required_argument, NULL, 'Y' }, { "green", no_argument, NULL, 'g' }, { 0, 0, 0, 0 } };
    int c;
    while ((c = getopt_long (argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 's': if (s_parse_shape (optarg, o)) { fprintf (stderr, "sigbench: --shape: expected widths like 512,256,64,1 (each 1 to 1048576), got \"%s\"\n", optarg); return 2; } break;
        case 'r': o->rows = (uint32_t) atoi (optarg); break;
        case 'n': o->iterations = (uint32_t) atoi (optarg); break;
        case 'w': o->warmup = (uint32_t) atoi (optarg); break;
        case 'c': o->cpu = atoi (optarg); break;
        case 'f': o->weights = optarg; break;
        case 'S': o->seed = strtoull (optarg, NULL, 10); break;
        case 'W':
            if (strcmp (optarg, "spin") == 0) o->wait = CUDA_WAIT_SPIN;
            else if (strcmp (optarg, "yield") == 0) o->wait = CUDA_WAIT_YIELD;
            else if (strcmp (optarg, "block") == 0) o->wait = CUDA_WAIT_BLOCK;
            else { fprintf (stderr, "sigbench: --wait: expected spin, yield or block, got \"%s\"\n", optarg); return 2; }
            break;
        case 'G': o->gpu = 0; break;
        case 'P': o->only_persistent = 1; break;
        case 'V': o->variants = 1; break;
        case 'T': o->trace = 1; break;
        case 'I': o->instances = optarg; break;
        case 'g': o->green = 1; break;
        case 'Y':
#ifndef SIGSERVE_HAVE_CUDA
            fprintf (stderr, "sigbench: --sync: this build has no CUDA\n");
            return 2;
#else
            if (strcmp (optarg, "plan") == 0) o->sync = 0;
            else if (strcmp (optarg, "barriers") == 0) o->sync = SIG_SYNC_BARRIERS;
            else if (strcmp (optarg, "mbar") == 0) o->sync = SIG_SYNC_MBAR_WARPS;
            else if (strcmp (optarg, "async") == 0) o->sync = SIG_SYNC_ASYNC;
            else { fprintf (stderr, "sigbench: --sync: expected plan, barriers, mbar or async, got \"%s\"\n", optarg); return 2; }
            break;
#endif
        case 'd':
            o->dtype_count = 0;
            for (char *t = strtok (optarg, ","); t; t = strtok (NULL, ",")) {
                const int d = strcmp (t, "f32") == 0 ? WEIGHT_DTYPE_F32 : strcmp (t, "f16") == 0 ? WEIGHT_DTYPE_F16
                              : strcmp (t, "bf16") == 0 ? WEIGHT_DTYPE_BF16 : -1;
                if (d < 0 || o->dtype_count == 3) {
                    fprintf (stderr, "sigbench: --dtypes: expected up to three of f32, f16, bf16, got \"%s\"\n", t);
                    return 2;
                }
                o->dtypes[o->dtype_count++] = (weight_dtype_t) d;
            }
            break;
        case 'D': {
            o->device_count = 0;
            for (char *t = strtok (optarg, ","); t && o->device_count < 16; t = strtok (NULL, ","))
                o->devices[o->device_count++] = atoi (t);
            break;
        }
        case 'h': s_usage (stdout); exit (0);
        default: s_usage (stderr); return 2;
        }
    }
    if (o->rows < 1 || o->rows > 4096 || o->iterations < 1) {
        fprintf (stderr, "sigbench: --rows must be 1..4096 and --iterations >= 1\n");
        return 2;
    }
    return 0;
}

static weights_t *s_weights (const options_t *o)
{
    char err[1024];
    if (o->weights) {
        model_config_t cfg;
        memset (&cfg, 0, sizeof cfg);
        snprintf (cfg.name, sizeof cfg.name, "tick_mlp");
        snprintf (cfg.weights, sizeof cfg.weights, "%s", o->weights);
        cfg.layer_count = 3;
        const char *names[3][2] = { { "0.weight", "0.bias" }, { "2.weight", "2.bias" }, { "4.weight", "4.bias" } };
        for (int i = 0; i < 3; i++) {
            snprintf (cfg.layers[i].weight, sizeof cfg.layers[i].weight, "%s", names[i][0]);
            snprintf (cfg.layers[i].bias, sizeof cfg.layers[i].bias, "%s", names[i][1]);
            cfg.layers[i].activation = i < 2 ? ACTIVATION_RELU : ACTIVATION_NONE;
        }
        weights_t *w = weights_load (&cfg, err, sizeof err);
        if (!w)
            fprintf (stderr, "sigbench: %s\n", err);
        return w;
    }
    activation_t acts[MAX_LAYERS];
    for (size_t i = 0; i < o->layers; i++)
        acts[i] = i + 1 < o->layers ? ACTIVATION_RELU : ACTIVATION_NONE;
    return weights_random (o->sizes, acts, o->layers, o->seed);
}

/* ||y - ref|| / ||ref|| pooled over a timed run. */
typedef struct { double num, den; } pooled_error_t;

static void s_pool (pooled_error_t *p, const float *y, const double *ref, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        double d = (double) y[k] - ref[k];
        p->num += isfinite (d) ? d * d : INFINITY;
        p->den += ref[k] * ref[k];
    }
}

static double s_pooled (const pooled_error_t *p) { return p->den > 0 ? sqrt (p->num / p->den) : sqrt (p->num); }

/* Times one CPU kernel; returns ||y - ref|| / ||ref|| over the timed run (or -1 on failure). */
static double s_bench_cpu (const options_t *o, const weights_t *w, cpu_kernel_t kernel, float *const *in,
                           const double *const *ref, latency_summary_t *out)
{
    model_config_t cfg;
    memset (&cfg, 0, sizeof cfg);
    snprintf (cfg.name, sizeof cfg.name, "bench");
    cfg.cpu_kernel = kernel;
    cfg.max_rows = o->rows;
    char err[512];
    backend_model_t *m = backend_cpu_iface.load (w, &cfg, cfg.device, err, sizeof err);
    if (!m) {
        fprintf (stderr, "sigbench: %s\n", err);
        return -1;
    }
    size_t nout = (size_t) o->rows * w->output_size;
    float *y = malloc (nout * sizeof (float));
    double *samples = malloc (o->iterations * sizeof (double));
    pooled_error_t error = { 0, 0 };
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        const float *x = in[i % POOL];
        double t0 = s_now_us ();
        backend_cpu_iface.infer (m, x, o->rows, y, err, sizeof err);
        double t1 = s_now_us ();
        if (i >= o->warmup) {
            samples[i - o->warmup] = t1 - t0;
            /* Checked outside the timed region, as one normalised error over every timed output:
             * a one-output model judged call by call would measure cancellation in single values. */
            s_pool (&error, y, ref[i % POOL], nout);
        }
    }
    latency_summarize (samples, o->iterations, out);
    free (samples);
    free (y);
    backend_cpu_iface.destroy (&m);
    return s_pooled (&error);
}


#ifdef SIGSERVE_HAVE_CUDA
#define CUDA_OK(expr)                                                                              \
    do {                                                                                           \
        int rc_ = (int) (expr);                                                                    \
        if (rc_ != 0) {                                                                            \
            fprintf (stderr, "sigbench: %s: %s\n", #expr, cudaGetErrorString ((cudaError_t) rc_)); \
            exit (1);                                                                              \
        }                                                                                          \
    } while (0)

static double s_elapsed_us (cudaEvent_t a, cudaEvent_t b)
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
            double us = s_elapsed_us (a, b) / reps[r];
            if (i >= o->warmup)
                samples[i - o->warmup] = us;
        }
        latency_summarize (samples, o->iterations, &sum);
        latency_print_row (stdout, reps[r] == 1 ? "CUDA events, 1 launch" : "CUDA events, 32 launches (per launch)", &sum);
    }
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        double t0 = s_now_us ();
        CUDA_OK (sig_empty_kernel (s));
        CUDA_OK (cudaStreamSynchronize (s));
        if (i >= o->warmup)
            samples[i - o->warmup] = s_now_us () - t0;
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
            double t0 = s_now_us ();
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
                samples[i - o->warmup] = s_now_us () - t0;
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
static bool s_specialise;
static bool s_green;     /* the next load with green_context */

static backend_model_t *s_load_gpu_held (const options_t *o, const weights_t *w, cuda_kernel_t kernel, bool zero_copy,
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
    cfg.specialise = s_specialise;
    cfg.green_context = s_green;
    char err[2048];
    cfg.device = o->device;
    backend_model_t *m = backend_cuda_iface.load (w, &cfg, o->device, err, sizeof err);
    if (!m)
        fprintf (stderr, "sigbench: %s\n", err);
    return m;
}

static backend_model_t *s_load_gpu (const options_t *o, const weights_t *w, cuda_kernel_t kernel, bool zero_copy)
{
    return s_load_gpu_held (o, w, kernel, zero_copy, WEIGHT_DTYPE_F32);
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
        double us = s_elapsed_us (a, b) / reps;
        if (i >= o->warmup) {
            samples[i - o->warmup] = us;
            if (i % 16 == 0) {   /* checking every call would double the run: every 16th, all pool entries */
                CUDA_OK (cuda_model_fetch_output (m, o->rows, y));
                s_pool (&err, y, ref[i % POOL], nout);
            }
        }
    }
    latency_summarize (samples, o->iterations, out);
    free (samples);
    free (y);
    cudaEventDestroy (a);
    cudaEventDestroy (b);
    return s_pooled (&err);
}

typedef enum { E2E_PAGEABLE, E2E_PINNED, E2E_PINNED_GRAPH } e2e_mode_t;

/* End-to-end, host clock: what one request costs the serving thread, copy-in to copy-out. */
/* The timed calls of one end-to-end row into SAMPLES (o->iterations of them); the pooled relative
 * error. Any thread (one model each). */
static double s_e2e_samples (const options_t *o, backend_model_t *m, const weights_t *w, e2e_mode_t mode,
                             float *const *in, const double *const *ref, double *samples)
{
    size_t nin = (size_t) o->rows * w->input_size, nout = (size_t) o->rows * w->output_size;
    float *pin = cuda_model_pinned_input (m), *pout = cuda_model_pinned_output (m);
    float *y = malloc (nout * sizeof (float));
    pooled_error_t err = { 0, 0 };
    char msg[512];
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        const float *x = in[i % POOL];
        double t0 = s_now_us ();
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
        double t1 = s_now_us ();
        if (i >= o->warmup) {
            samples[i - o->warmup] = t1 - t0;
            s_pool (&err, y, ref[i % POOL], nout);
        }
    }
    free (y);
    return s_pooled (&err);
}

static double s_bench_e2e (const options_t *o, backend_model_t *m, const weights_t *w, e2e_mode_t mode,
                           float *const *in, const double *const *ref, latency_summary_t *out)
{
    double *samples = malloc (o->iterations * sizeof (double));
    const double e = s_e2e_samples (o, m, w, mode, in, ref, samples);
    latency_summarize (samples, o->iterations, out);
    free (samples);
    return e;
}

/* The ping-pong floor, timed exactly like the persistent rows (host clock around infer: features
 * into the slot, publish, spin, output out). With SIG_PINGPONG_READ the output is the features'
 * sum: checked against a float64 sum, |y - sum| <= 1e-4 x sum |x|. Returns the largest such
 * difference over the timed run in units of that bound (<= 1 passes), 0 when nothing is read, or
 * -1 when it did not load. */
static double s_bench_pingpong (const options_t *o, const weights_t *w, uint32_t flags, uint32_t done_mode,
                                float *const *in, latency_summary_t *out)
{
    char err[512];
    backend_model_t *m = cuda_pingpong_load (0, w->input_size, flags, done_mode, o->wait, err, sizeof err);
    if (!m) {
        fprintf (stderr, "sigbench: %s\n", err);
        return -1;
    }
    double *samples = malloc (o->iterations * sizeof (double)), worst = 0;
    float y;
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        const float *x = in[i % POOL];
        double t0 = s_now_us ();
        if (backend_cuda_iface.infer (m, x, 1, &y, err, sizeof err) != SIG_OK) {
            fprintf (stderr, "sigbench: ping-pong: %s\n", err);
            exit (1);
        }
        double t1 = s_now_us ();
        if (i >= o->warmup) {
            samples[i - o->warmup] = t1 - t0;
            if (flags & SIG_PINGPONG_READ) {
                double sum = 0, mag = 0;
                for (uint32_t k = 0; k < w->input_size; k++) {
                    sum += x[k];
                    mag += fabs (x[k]);
                }
                const double d = fabs ((double) y - sum) / (1e-4 * mag);
                worst = d > worst || isnan (d) ? d : worst;
            }
        }
    }
    latency_summarize (samples, o->iterations, out);
    free (samples);
    backend_cuda_iface.destroy (&m);
    return worst;
}

/* Loads the persistent kernel with TUNING (NULL: the service's choice); NULL when it does not load
 * (the reason printed). */
static backend_model_t *s_load_persistent (const options_t *o, const weights_t *w, const sig_persistent_tuning_t *tuning,
                                           weight_dtype_t dtype)
{
    cuda_persistent_tuning (tuning);
    backend_model_t *m = s_load_gpu_held (o, w, CUDA_KERNEL_PERSISTENT, false, dtype);
    cuda_persistent_tuning (NULL);
    return m;
}

static void s_persistent_label (backend_model_t *m, const char *what, char *label, size_t len)
{
    const sig_persistent_plan_t *p = cuda_model_persistent_plan (m);
    bool regs = false, kept = false, narrow = false, streamed = false;
    for (uint32_t l = 0; l < p->layer_count; l++) {
        regs |= p->layers[l].bank == 0 && p->layers[l].regs > 0;
        kept |= p->layers[l].fuse != 0;
        narrow |= p->layers[l].by_out == 2;
        streamed |= p->layers[l].fuse == 2;
    }
    static const char *const dt[] = { "f32", "f16", "bf16" };
    snprintf (label, len, "%s | %s: %s weights, cluster %u%s%s, %u %s/request, tail %s, %s, %s, completion by %s",
              backend_cuda_iface.kernel_name (m), what, p->dtype <= 2 ? dt[p->dtype] : "?", p->cluster_blocks,
              streamed ? " (streamed into the next layer)" : kept ? " (outputs kept in the workers)" : "",
              narrow ? " (narrow layout)" : "", p->cluster_barriers,
              (p->sync & SIG_PLAN_SYNC_ASYNC) ? "st.async hand-offs (the stores complete them)"
              : (p->sync & SIG_PLAN_SYNC_MBAR_BLOCK) ? "mbarrier hand-offs (a block)"
              : (p->sync & SIG_PLAN_SYNC_MBAR) ? "mbarrier hand-offs (a warp)" : "cluster barriers",
              (p->sync & SIG_PLAN_SYNC_TAIL) ? "fused" : "by layer",
              p->cluster_blocks == 1 ? "one block" : p->read_leader ? "leader reads"
              : (p->sync & SIG_PLAN_SYNC_WPOLL) ? "every block polls, workers read" : "workers read",
              regs ? "weights in registers + smem" : "weights in smem",
              p->done_mode == SIG_DONE_SEQUENCE ? "sequence" : "outputs");
}

static int s_by_value (const void *a, const void *b)
{
    const double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

/* The traced instantiation of the default persistent kernel (SPEC: of the kernel specialised for the
 * model, NVRTC): the same run as its row, then each phase's p50 (ns, from the leader SM's clock64 at
 * the SM clock the device reports) over the requests whose stamps the ring still holds. Returns the
 * run's relative error (or INFINITY). */
static double s_bench_trace (const options_t *o, const weights_t *w, weight_dtype_t dtype, uint32_t sync, bool spec,
                             float *const *in, const double *const *ref)
{
    unsigned long long step = 0;
    if (sig_globaltimer_step (o->device, 100000, &step) == 0)
        printf ("\n%%globaltimer on device %d: steps of %llu ns (clock64 used: cycles of the leader's SM)\n", o->device,
                step);
    unsigned long long *d_trace = NULL;
    const size_t bytes = (size_t) SIG_TRACE_RING * SIG_TRACE_STAMPS * sizeof (unsigned long long);
    if (cudaMalloc ((void **) &d_trace, bytes) != cudaSuccess || cudaMemset (d_trace, 0, bytes) != cudaSuccess) {
        fprintf (stderr, "sigbench: --trace: no device memory for the trace\n");
        return INFINITY;
    }
    sig_persistent_tuning_t tu = { 0 };
    tu.trace = (uint64_t) (uintptr_t) d_trace;
    tu.sync = sync;
    s_specialise = spec;
    backend_model_t *m = s_load_persistent (o, w, &tu, dtype);
    s_specialise = false;
    if (!m) {
        cudaFree (d_trace);
        return INFINITY;
    }
    latency_summary_t sum;
    char label[384];
    const double e = s_bench_e2e (o, m, w, E2E_PINNED_GRAPH, in, ref, &sum);
    const sig_persistent_plan_t *p = cuda_model_persistent_plan (m);
    const uint32_t layers = p->layer_count, blocks = p->cluster_blocks;   /* P goes with the model */
    s_persistent_label (m, sync == 0 ? "traced (clock64 stamps)"
                           : sync == (SIG_SYNC_BARRIERS | SIG_SYNC_OLD_TAIL) ? "traced, the old synchronisation (a block barrier a tail layer)"
                           : sync == SIG_SYNC_BARRIERS ? "traced, cluster barriers"
                           : sync == SIG_SYNC_MBAR_WARPS ? "traced, mbarriers (an arrival a warp)"
                           : sync == SIG_SYNC_MBAR_BLOCKS ? "traced, mbarriers (an arrival a block)"
                           : sync == SIG_SYNC_ASYNC ? "traced, st.async hand-offs"
                           : (sync & SIG_SYNC_TRACE_REPEAT) ? "traced, each tail layer twice" : "traced",
                        label, sizeof label);
    latency_print_row (stdout, label, &sum);
    backend_cuda_iface.destroy (&m);     /* the kernel stops: the trace can be read */
    unsigned long long *h = malloc (bytes);
    int khz = 0;
    cudaDeviceGetAttribute (&khz, cudaDevAttrClockRate, o->device);
    if (!h || cudaMemcpy (h, d_trace, bytes, cudaMemcpyDeviceToHost) != cudaSuccess || khz <= 0) {
        free (h);
        cudaFree (d_trace);
        return e;
    }
    const double ns_per_cycle = 1e6 / khz;
    /* phases: from each present stamp to the next present one, named by the later */
    enum { PHASES = SIG_TRACE_STAMPS };
    double *d = malloc ((size_t) SIG_TRACE_RING * sizeof (double));
    printf ("\n| phase (%u layer(s), cluster %u; SM clock %.0f MHz; sync %u) | requests | p50 ns | p99 ns |\n| --- | ---: | ---: | ---: |\n",
            layers, blocks, khz / 1e3, sync);
    static const char *kinds[3] = { "gather barrier passed", "the leader's share computed", "scatter barrier passed" };
    uint32_t order[PHASES], n_order = 0;
    order[n_order++] = SIG_TRACE_SEEN;
    order[n_order++] = SIG_TRACE_STARTED;
    for (uint32_t l = 0; l < layers; l++)
        for (uint32_t k = 0; k < 3; k++)
            order[n_order++] = SIG_TRACE_LAYER0 + 3 * l + k;
    order[n_order++] = SIG_TRACE_END;
    for (uint32_t i = 1; i < n_order; i++) {
        size_t n = 0;
        for (uint32_t r = 0; r < SIG_TRACE_RING; r++) {
            const unsigned long long *st = h + (size_t) r * SIG_TRACE_STAMPS;
            if (!st[SIG_TRACE_SEEN] || !st[order[i]])
                continue;
            uint32_t j = i;     /* the previous stamp this request has */
            while (j > 0 && !st[order[j - 1]])
                j--;
            if (j == 0)
                continue;
            d[n++] = (double) (st[order[i]] - st[order[j - 1]]) * ns_per_cycle;
        }
        if (!n)
            continue;
        qsort (d, n, sizeof *d, s_by_value);
        char name[96];
        if (order[i] == SIG_TRACE_STARTED)
            snprintf (name, sizeof name, "seen -> start barrier passed");
        else if (order[i] == SIG_TRACE_END)
            snprintf (name, sizeof name, "-> outputs stored (completion)");
        else
            snprintf (name, sizeof name, "-> layer %u: %s", (order[i] - SIG_TRACE_LAYER0) / 3,
                      kinds[(order[i] - SIG_TRACE_LAYER0) % 3]);
        printf ("| %s | %zu | %.0f | %.0f |\n", name, n, d[n / 2], d[(size_t) (n * 0.99)]);
    }
    /* SIG_SYNC_TRACE_REPEAT: each compact-tail layer's hand-off (from the stamp before it), first
     * pass and repeat */
    for (uint32_t l = 0; l < layers && l < SIG_TRACE_SUB_LAYERS; l++) {
        static const char *const sub[3] = { "hand-off (from the stamp before)", "first pass", "the same again" };
        for (uint32_t k = 0; k < 3; k++) {
            size_t n = 0;
            for (uint32_t r = 0; r < SIG_TRACE_RING; r++) {
                const unsigned long long *st = h + (size_t) r * SIG_TRACE_STAMPS;
                const unsigned long long prev = k > 0 ? st[SIG_TRACE_SUB (l, k - 1)]
                                                : l > 0 ? st[SIG_TRACE_COMPUTED (l - 1)] : 0;
                if (st[SIG_TRACE_SUB (l, k)] && prev)
                    d[n++] = (double) (st[SIG_TRACE_SUB (l, k)] - prev) * ns_per_cycle;
            }
            if (!n)
                continue;
            qsort (d, n, sizeof *d, s_by_value);
            printf ("| tail layer %u: %s | %zu | %.0f | %.0f |\n", l, sub[k], n, d[n / 2], d[(size_t) (n * 0.99)]);
        }
    }
    size_t n = 0;
    for (uint32_t r = 0; r < SIG_TRACE_RING; r++) {
        const unsigned long long *st = h + (size_t) r * SIG_TRACE_STAMPS;
        if (st[SIG_TRACE_SEEN] && st[SIG_TRACE_END])
            d[n++] = (double) (st[SIG_TRACE_END] - st[SIG_TRACE_SEEN]) * ns_per_cycle;
    }
    if (n) {
        qsort (d, n, sizeof *d, s_by_value);
        printf ("| seen -> outputs stored, in all | %zu | %.0f | %.0f |\n", n, d[n / 2], d[(size_t) (n * 0.99)]);
    }
    printf ("(the host's side: publish -> seen and outputs stored -> seen by the host are the rest of the "
            "round trip: the ping-pong floor's)\n\n");
    free (d);
    free (h);
    cudaFree (d_trace);
    return e;
}

/* The persistent rows of the end-to-end table (and the floors beside them). 0, or -1 when an
 * error bound was missed. */
/* The pooled relative error a persistent row may show: f32's, or the LSTM backend's sanity limits
 * for half weights (the tests judge each output against its bound). */
static double s_dtype_limit (weight_dtype_t d)
{
    return d == WEIGHT_DTYPE_F32 ? 1e-5 : d == WEIGHT_DTYPE_F16 ? 2e-2 : 1e-1;
}

/* Several instances at once (issue 19 item 5): N specialised persistent kernels of the model on the
 * device, each driven by its own thread (on core --cpu + k when --cpu is given) through the service's
 * request path, all at the same time. */
typedef struct {
    const options_t *o;
    backend_model_t *m;
    const weights_t *w;
    float *const *in;
    const double *const *ref;
    int cpu;
    double *samples, err;
} driver_t;

static void *s_drive (void *arg)
{
    driver_t *d = arg;
    char err[256];
    if (d->cpu >= 0 && threads_pin (d->cpu, err, sizeof err) != 0)
        fprintf (stderr, "sigbench: a driver: %s\n", err);
    d->err = s_e2e_samples (d->o, d->m, d->w, E2E_PINNED_GRAPH, d->in, d->ref, d->samples);
    return NULL;
}

/* One row for N instances; its largest pooled relative error (INFINITY when they did not load). */
static double s_bench_instances (const options_t *o, const weights_t *w, weight_dtype_t dtype, uint32_t n,
                                 float *const *in, const double *const *ref)
{
    driver_t *d = calloc (n, sizeof *d);
    pthread_t *th = calloc (n, sizeof *th);
    double *all = malloc ((size_t) n * o->iterations * sizeof (double)), e = 0, worst = 0;
    uint32_t loaded = 0;
    for (; d && th && all && loaded < n; loaded++) {
        s_specialise = true;
        s_green = o->green != 0;
        sig_persistent_tuning_t tu = { 0 };
        tu.sync = o->sync;
        d[loaded] = (driver_t) { .o = o, .m = s_load_persistent (o, w, o->sync ? &tu : NULL, dtype), .w = w, .in = in, .ref = ref,
                                 .cpu = o->cpu >= 0 ? o->cpu + (int) loaded : -1,
                                 .samples = all + (size_t) loaded * o->iterations };
        s_specialise = s_green = false;
        if (!d[loaded].m)
            break;
    }
    char label[384];
    if (loaded == n) {
        for (uint32_t k = 0; k < n; k++)
            pthread_create (&th[k], NULL, s_drive, &d[k]);
        for (uint32_t k = 0; k < n; k++)
            pthread_join (th[k], NULL);
        for (uint32_t k = 0; k < n; k++) {
            latency_summary_t one;
            latency_summarize (d[k].samples, o->iterations, &one);
            worst = one.p99 > worst ? one.p99 : worst;
            e = d[k].err > e ? d[k].err : e;
        }
        latency_summary_t sum;
        latency_summarize (all, (size_t) n * o->iterations, &sum);
        char green[48] = "";
        if (backend_cuda_iface.green_sms (d[0].m))
            snprintf (green, sizeof green, ", each in a green context of %u SMs", backend_cuda_iface.green_sms (d[0].m));
        snprintf (label, sizeof label, "%s | %u instance(s) at once%s, %s weights, all requests (the worst instance's "
                  "p99 %.2f)", backend_cuda_iface.kernel_name (d[0].m), n, green, weight_dtype_name (dtype), worst);
        latency_print_row (stdout, label, &sum);
    } else {
        printf ("| persistent | %u instance(s) at once: instance %u did not load (above) | | | | | | | | |\n", n, loaded);
        e = INFINITY;
    }
    for (uint32_t k = 0; k < loaded && k < n; k++)
        if (d[k].m)
            backend_cuda_iface.destroy (&d[k].m);
    free (all);
    free (th);
    free (d);
    return e;
}

static int s_bench_persistent (const options_t *o, const weights_t *w, float *const *in, const double *const *ref)
{
    int rc = 0;
    latency_summary_t sum;
    char label[384];
    const weight_dtype_t f32_only[] = { WEIGHT_DTYPE_F32 };
    const weight_dtype_t *dtypes = o->dtype_count ? o->dtypes : f32_only;
    const int ndt = o->dtype_count ? o->dtype_count : 1;
    double e_main[3] = { INFINITY, INFINITY, INFINITY };
    for (int d = 0; d < ndt; d++) {
        /* the generic kernel, then (the same run) the one specialised for the model (NVRTC) */
        sig_persistent_tuning_t tu = { 0 };
        tu.sync = o->sync;
        for (int spec = 0; spec < 2; spec++) {
            s_specialise = spec == 1;
            backend_model_t *m = s_load_persistent (o, w, o->sync ? &tu : NULL, dtypes[d]);
            s_specialise = false;
            if (!m)
                continue;
            const double e = s_bench_e2e (o, m, w, E2E_PINNED_GRAPH, in, ref, &sum);
            e_main[d] = spec == 0 || e > e_main[d] ? e : e_main[d];
            s_persistent_label (m, "mapped ring", label, sizeof label);
            latency_print_row (stdout, label, &sum);
            backend_cuda_iface.destroy (&m);
        }
    }
    double e_inst = 0;
    char il[64];
    snprintf (il, sizeof il, "%s", o->instances);
    for (char *save = NULL, *t = strtok_r (il, ",", &save); t; t = strtok_r (NULL, ",", &save)) {
        const double e = s_bench_instances (o, w, dtypes[0], (uint32_t) strtoul (t, NULL, 10), in, ref);
        e_inst = e > e_inst ? e : e_inst;
    }
    if (!(e_inst <= s_dtype_limit (dtypes[0])))
        rc = -1;
    const struct { uint32_t flags, done; const char *label; } floors[] = {
        { 0, SIG_DONE_SEQUENCE, "ping-pong floor | sequence echo only" },
        { SIG_PINGPONG_OUTPUT, SIG_DONE_SEQUENCE, "ping-pong floor | + output, system fence, sequence" },
        { SIG_PINGPONG_READ, SIG_DONE_SEQUENCE, "ping-pong floor | + read the features (one round trip), output, fence, sequence" },
        { SIG_PINGPONG_READ, SIG_DONE_OUTPUTS, "ping-pong floor | + read the features, output as completion (no fence)" } };
    double e_floor = 0;
    for (size_t f = 0; f < sizeof floors / sizeof floors[0]; f++) {
        if (o->rows != 1 && f > 0)
            break;
        const double e = s_bench_pingpong (o, w, floors[f].flags, floors[f].done, in, &sum);
        if (e < 0)
            continue;
        e_floor = e > e_floor ? e : e_floor;
        latency_print_row (stdout, floors[f].label, &sum);
    }
    double e_var[96], lim_var[96];
    size_t nvar = 0;
    /* the kernel as it serves, then (same run) its older synchronisation: the start and gather as
     * cluster barriers and the tail a block barrier a layer, to compare phase by phase */
    for (int d = 0; d < ndt && o->trace; d++) {
        static const uint32_t olds[] = { 0, SIG_SYNC_BARRIERS | SIG_SYNC_OLD_TAIL, SIG_SYNC_BARRIERS,
                                         SIG_SYNC_TRACE_REPEAT };
        for (size_t k = 0; k < sizeof olds / sizeof olds[0]; k++) {
            lim_var[nvar] = s_dtype_limit (dtypes[d]);
            e_var[nvar++] = s_bench_trace (o, w, dtypes[d], olds[k], false, in, ref);
        }
        /* the specialised kernel as it serves (persistent-nvrtc), traced: where its time goes; then
         * with cluster barriers (the default before st.async hand-offs) */
        lim_var[nvar] = s_dtype_limit (dtypes[d]);
        e_var[nvar++] = s_bench_trace (o, w, dtypes[d], 0, true, in, ref);
        lim_var[nvar] = s_dtype_limit (dtypes[d]);
        e_var[nvar++] = s_bench_trace (o, w, dtypes[d], SIG_SYNC_BARRIERS, true, in, ref);
    }
    for (int d = 0; d < ndt; d++) {   /* half weights: the cluster sizes (the plan's choice is above) */
        if (dtypes[d] == WEIGHT_DTYPE_F32)
            continue;
        for (uint32_t c = 1; c <= 8; c *= 2) {
            const sig_persistent_tuning_t tu = { c, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, 0 };
            backend_model_t *vm = s_load_persistent (o, w, &tu, dtypes[d]);
            if (!vm)
                continue;
            lim_var[nvar] = s_dtype_limit (dtypes[d]);
            e_var[nvar++] = s_bench_e2e (o, vm, w, E2E_PINNED_GRAPH, in, ref, &sum);
            s_persistent_label (vm, "variant", label, sizeof label);
            latency_print_row (stdout, label, &sum);
            backend_cuda_iface.destroy (&vm);
        }
    }
    if (o->variants) {
        /* cluster, spread_all, no_registers (0 auto, 1 never, 2 always), completion, read by the
         * workers, ring */
        const sig_persistent_tuning_t variants[] = {
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, 0 }, { 8, 0, 0, SIG_DONE_SEQUENCE, 1, 0, 0, 0, 0 },
            { 8, 0, 0, SIG_DONE_SEQUENCE, 1, 1, 0, 0, 0 }, { 8, 0, 0, SIG_DONE_SEQUENCE, 0, 1, 0, 0, 0 },
            { 4, 0, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 }, { 8, 0, 2, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 },
            { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 }, { 8, 0, 0, SIG_DONE_OUTPUTS, 1, 0, 0, 0, 0 },
            { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 2, 0 },
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_BARRIERS | SIG_SYNC_OLD_TAIL },
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_MBAR_WARPS },
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_MBAR_BLOCKS },
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_MBAR_BLOCKS | SIG_SYNC_OLD_TAIL },
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_WORKERS_POLL },
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_WORKERS_POLL | SIG_SYNC_OLD_TAIL },
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_NO_FUSE }, { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 3, 0 },
            { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 4, 0 }, { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 3, 0 },
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_BARRIERS }, { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_NO_STREAM },
            { 8, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_ASYNC }, { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 1, SIG_SYNC_ASYNC } };
        const char *what[] = { "variant", "variant: workers read their features", "variant: workers read, ring of 1",
                               "variant: ring of 1", "variant", "variant: registers", "variant: every layer split",
                               "variant: workers read", "variant: every layer split, by outputs",
                               "variant: the old synchronisation (cluster barriers, a block barrier a tail layer)",
                               "variant: mbarriers, an arrival a warp", "variant: mbarriers, an arrival a block",
                               "variant: mbarriers (a block), the old tail",
                               "variant: every block polls, the workers read (no start barrier)",
                               "variant: every block polls, the old tail",
                               "variant: outputs to the leader (not kept in the workers)",
                               "variant: every layer split, even ones by outputs kept in the workers",
                               "variant: every layer split by outputs, 4 a thread (the narrow layout)",
                               "variant: layer 0 by outputs, kept in the workers for layer 1 (split for it)",
                               "variant: cluster barriers (the kind named)",
                               "variant: a narrow layer's outputs stored for the next (not streamed)",
                               "variant: st.async hand-offs (the stores complete the mbarriers)",
                               "variant: st.async hand-offs, every layer split (scatters)" };
        /* each variant generic, then specialised for the model (as it would serve: the default) */
        for (size_t k = 0; k < 2 * (sizeof variants / sizeof variants[0]); k++) {
            const size_t v = k / 2;
            s_specialise = k % 2 == 1;
            backend_model_t *vm = s_load_persistent (o, w, &variants[v], WEIGHT_DTYPE_F32);
            s_specialise = false;
            if (!vm)
                continue;
            lim_var[nvar] = s_dtype_limit (WEIGHT_DTYPE_F32);
            e_var[nvar++] = s_bench_e2e (o, vm, w, E2E_PINNED_GRAPH, in, ref, &sum);
            s_persistent_label (vm, what[v], label, sizeof label);
            latency_print_row (stdout, label, &sum);
            backend_cuda_iface.destroy (&vm);
        }
    }
    printf ("\npersistent: relative error against the float64 reference over the timed run");
    for (int d = 0; d < ndt; d++) {
        printf (" %.2e (%s)", e_main[d], weight_dtype_name (dtypes[d]));
        if (!(e_main[d] <= s_dtype_limit (dtypes[d])))
            rc = -1;
    }
    for (size_t v = 0; v < nvar; v++)
        printf ("%s%.2e", v == 0 ? " (variants " : ", ", e_var[v]);
    printf ("%s; ping-pong sums within %.2f of their bound\n", nvar ? ")" : "", e_floor);
    if (!(e_floor <= 1.0))
        rc = -1;
    for (size_t v = 0; v < nvar; v++)
        if (!(e_var[v] <= lim_var[v]))
            rc = -1;
    if (rc)
        fprintf (stderr, "sigbench: persistent: an error bound was missed (or the model did not load)\n");
    return rc;
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

/* Tables 1-3. 0 when they ran, -1 when there is no device (the reason printed), 1 when the
 * persistent rows missed an error bound. */
static int s_bench_gpu (const options_t *o, const weights_t *w, float *const *in, const double *const *ref)
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
        int rc = s_bench_persistent (o, w, in, ref);
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
            errors[k][2 + mode] = s_bench_e2e (o, models[k], w, (e2e_mode_t) mode, in, ref, &sum);
            char label[64];
            snprintf (label, sizeof label, "%s | %s", s_gpu_kernels[k], modes[mode]);
            latency_print_row (stdout, label, &sum);
        }
        /* The same path with mapped buffers: no copy nodes, the kernels read and write host memory. */
        backend_model_t *zc = s_load_gpu (o, w, s_gpu_kernel_ids[k], true);
        if (zc) {
            latency_summary_t sum;
            errors[k][5] = s_bench_e2e (o, zc, w, E2E_PINNED_GRAPH, in, ref, &sum);
            char label[64];
            snprintf (label, sizeof label, "%s | %s", s_gpu_kernels[k], modes[3]);
            latency_print_row (stdout, label, &sum);
            backend_cuda_iface.destroy (&zc);
        } else
            errors[k][5] = INFINITY;
    }
    /* Same table, same method: the resident kernel, then the floor it is measured against. */
    const int persistent_rc = s_bench_persistent (o, w, in, ref);
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

int main (int argc, char **argv)
{
    /* as sigserve: every kernel loaded at start, none lazily next to a resident persistent kernel */
    setenv ("CUDA_MODULE_LOADING", "EAGER", 0);
    int gpu_bad = 0;
    options_t o;
    int rc = s_parse (argc, argv, &o);
    if (rc)
        return rc;
    char pin_err[256];
    if (o.cpu >= 0 && threads_pin (o.cpu, pin_err, sizeof pin_err) != 0) {
        fprintf (stderr, "sigbench: --cpu: %s\n", pin_err);
        return 1;
    }
    weights_t *w = s_weights (&o);
    if (!w)
        return 1;
    float *in[POOL];
    double *ref[POOL];
    uint64_t state = o.seed ^ 0x9e3779b97f4a7c15ull;
    for (int p = 0; p < POOL; p++) {
        size_t n = (size_t) o.rows * w->input_size;
        in[p] = malloc (n * sizeof (float));
        ref[p] = malloc ((size_t) o.rows * w->output_size * sizeof (double));
        for (size_t k = 0; k < n; k++)
            in[p][k] = rng_uniform (&state, -1.0f, 1.0f);
        reference_forward (w, in[p], o.rows, ref[p]);
    }
    char shape[256] = "";
    for (size_t i = 0; i < w->layer_count; i++)
        snprintf (shape + strlen (shape), sizeof shape - strlen (shape), "%u->", w->layers[i].in);
    snprintf (shape + strlen (shape), sizeof shape - strlen (shape), "%u", w->output_size);
    printf ("## sigbench: model %s, rows %u\n\n", shape, o.rows);
#ifdef SIGSERVE_HAVE_CUDA
    if (o.device_count == 0)
        o.devices[o.device_count++] = 0;
    for (int d = 0; o.gpu && d < o.device_count; d++) {
        o.device = o.devices[d];
        if (o.device_count > 1)
            printf ("## device %d\n\n", o.device);
        if (cudaSetDevice (o.device) != cudaSuccess) {
            printf ("GPU tables skipped for device %d: it does not exist\n\n", o.device);
            continue;
        }
        gpu_bad |= s_bench_gpu (&o, w, in, (const double *const *) ref) > 0;
    }
#else
    printf ("GPU tables skipped: this build has no CUDA backend (nvcc was not found when it was built)\n\n");
#endif
    printf ("### CPU backend, in process: model %s, rows %u, %u iterations after %u warm-up, %s, "
            "host clock (CLOCK_MONOTONIC) around infer, microseconds\n\n",
            shape, o.rows, o.iterations, o.warmup, o.cpu >= 0 ? "pinned to one core" : "one thread");
    latency_print_header (stdout, "method");
    const cpu_kernel_t kernels[] = { CPU_KERNEL_LOOP, CPU_KERNEL_BLAS };
    const char *labels[] = { "cpu loop (fused GEMV, AVX clones)", "cpu blas (OpenBLAS sgemv/sgemm, 1 thread)" };
    double errors[2];
    for (int k = 0; k < 2; k++) {
        latency_summary_t s;
        errors[k] = s_bench_cpu (&o, w, kernels[k], in, (const double *const *) ref, &s);
        if (errors[k] < 0)
            return 1;
        latency_print_row (stdout, labels[k], &s);
    }
    printf ("\nrelative error ||y - ref|| / ||ref|| against the float64 reference over every timed call: loop %.2e, blas %.2e\n",
            errors[0], errors[1]);
    for (int p = 0; p < POOL; p++) {
        free (in[p]);
        free (ref[p]);
    }
    weights_destroy (&w);
    return errors[0] <= 1e-5 && errors[1] <= 1e-5 && !gpu_bad ? 0 : 1;
}
