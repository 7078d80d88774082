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
 *   4. the CPU backend, host clock around infer: the loop kernel in each weight dtype, each beside the
 *      floor of its dtype (one streaming read of the weights' bytes on the same core), and OpenBLAS
 *      (cpu.c);
 *   5. with --split A,B[,C..]: the loop kernel split across those cores beside one core, per dtype, with
 *      both floors and the hand-off between the cores (split.c).
 * Without a CUDA build or device only tables 4 and 5 are printed, with the reason. */
#define _GNU_SOURCE
#include "rng.h"
#include "reference.h"
#include "backends/backend.h"
#include "base/threads.h"
#include "latency.h"
#include "sigbench.h"
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
             "  --cpu-dtypes L  the CPU table's loop rows (and their floors) once per weight dtype in L\n"
             "               (default \"f32,f16,bf16,int8\"); SIGSERVE_CPU_ISA=avx2 (or scalar) runs them on\n"
             "               a lower path\n"
             "  --split A,B[,C..]  also table 5: the loop kernel split across cpus A (the leader), B ...\n"
             "               beside one core, per --cpu-dtypes, with both floors and the hand-off A-B\n"
             "  --split-only of the CPU tables, table 5 alone; with --trace, each split plan's phases\n"
             "               (per core: saw the call, slice done, barrier passed) at the leader's\n"
             "               shares of -1 to 4 more blocks, p50 ns from the call's start\n"
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

/* "A,B[,C..]": 2 to SB_SPLIT_MAX different CPUs. */
static int s_parse_split (const char *text, options_t *o)
{
    o->split_count = 0;
    for (const char *p = text; *p;) {
        char *end;
        const long cpu = strtol (p, &end, 10);
        if (end == p || cpu < 0 || cpu > 4095 || o->split_count == SB_SPLIT_MAX || (*end && *end != ','))
            return -1;
        for (int k = 0; k < o->split_count; k++)
            if (o->split_cpus[k] == cpu)
                return -1;
        o->split_cpus[o->split_count++] = (int) cpu;
        p = *end ? end + 1 : end;
    }
    return o->split_count >= 2 ? 0 : -1;
}

static int s_parse (int argc, char **argv, options_t *o)
{
    *o = (options_t) { .sizes = { 512, 256, 64, 1 }, .layers = 3, .rows = 1, .iterations = 20000, .warmup = 2000,
                       .cpu = -1, .seed = 42, .wait = CUDA_WAIT_SPIN, .gpu = 1, .instances = "",
                       .cpu_dtypes = { WEIGHT_DTYPE_F32, WEIGHT_DTYPE_F16, WEIGHT_DTYPE_BF16, WEIGHT_DTYPE_INT8 },
                       .cpu_dtype_count = 4 };
    static const struct option longs[] = {
        { "shape", required_argument, NULL, 's' }, { "rows", required_argument, NULL, 'r' },
        { "iterations", required_argument, NULL, 'n' }, { "warmup", required_argument, NULL, 'w' },
        { "cpu", required_argument, NULL, 'c' }, { "weights", required_argument, NULL, 'f' },
        { "seed", required_argument, NULL, 'S' }, { "wait", required_argument, NULL, 'W' },
        { "no-gpu", no_argument, NULL, 'G' }, { "help", no_argument, NULL, 'h' },
        { "only-persistent", no_argument, NULL, 'P' }, { "persistent-variants", no_argument, NULL, 'V' },
        { "devices", required_argument, NULL, 'D' }, { "trace", no_argument, NULL, 'T' },
        { "dtypes", required_argument, NULL, 'd' }, { "instances", required_argument, NULL, 'I' },
        { "sync", required_argument, NULL, 'Y' }, { "cpu-dtypes", required_argument, NULL, 'C' }, { "green", no_argument, NULL, 'g' },
        { "split", required_argument, NULL, 'X' }, { "split-only", no_argument, NULL, 'x' }, { 0, 0, 0, 0 } };
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
        case 'X':
            if (s_parse_split (optarg, o) != 0) {
                fprintf (stderr, "sigbench: --split: expected 2 to %d different CPUs like 0,1 or 2,3,4,5, got \"%s\"\n",
                         SB_SPLIT_MAX, optarg);
                return 2;
            }
            o->split = 1;
            break;
        case 'x': o->split_only = 1; break;
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
        case 'C':
            o->cpu_dtype_count = 0;
            for (char *t = strtok (optarg, ","); t; t = strtok (NULL, ",")) {
                int d = -1;
                for (int k = 0; k < WEIGHT_DTYPE_COUNT; k++)
                    if (strcmp (t, weight_dtype_name ((weight_dtype_t) k)) == 0)
                        d = k;
                if (d < 0 || o->cpu_dtype_count == WEIGHT_DTYPE_COUNT) {
                    fprintf (stderr, "sigbench: --cpu-dtypes: expected up to four of f32, f16, bf16, int8, got \"%s\"\n", t);
                    return 2;
                }
                o->cpu_dtypes[o->cpu_dtype_count++] = (weight_dtype_t) d;
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
        gpu_bad |= sb_bench_gpu (&o, w, in, (const double *const *) ref, sb_bench_persistent) > 0;
    }
#else
    printf ("GPU tables skipped: this build has no CUDA backend (nvcc was not found when it was built)\n\n");
#endif
    if (o.split_only && !o.split) {
        fprintf (stderr, "sigbench: --split-only needs --split A,B\n");
        return 2;
    }
    int cpu_bad = o.split_only ? 0 : sb_bench_cpu (&o, w, in, (const double *const *) ref);
    if (o.split)
        cpu_bad |= sb_bench_split (&o, w, in, (const double *const *) ref);
    for (int p = 0; p < POOL; p++) {
        free (in[p]);
        free (ref[p]);
    }
    weights_destroy (&w);
    return !cpu_bad && !gpu_bad ? 0 : 1;
}
