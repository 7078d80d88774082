/* sigbench: in-process latency tables (PERF.md's protocol): every timed call on fresh inputs from a
 * rotating pool, warm-up dropped, p50 p90 p99 p99.9 min max mean sd, outputs of the timed run
 * checked against the float64 reference. This build measures the CPU backend; the CUDA tables
 * (launch floor, kernel-only, end-to-end) join it with the CUDA backend. */
#define _GNU_SOURCE
#include "backend.h"
#include "latency.h"
#include "model.h"

#include <getopt.h>
#include <math.h>
#include <sched.h>
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
             "Prints a markdown table in microseconds.\n");
}

static int s_parse_shape (const char *text, options_t *o)
{
    o->layers = 0;
    const char *p = text;
    while (*p) {
        char *end;
        unsigned long v = strtoul (p, &end, 10);
        if (end == p || v == 0 || v > 65536 || o->layers > MAX_LAYERS)
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
                       .cpu = -1, .seed = 42 };
    static const struct option longs[] = {
        { "shape", required_argument, NULL, 's' }, { "rows", required_argument, NULL, 'r' },
        { "iterations", required_argument, NULL, 'n' }, { "warmup", required_argument, NULL, 'w' },
        { "cpu", required_argument, NULL, 'c' }, { "weights", required_argument, NULL, 'f' },
        { "seed", required_argument, NULL, 'S' }, { "help", no_argument, NULL, 'h' }, { 0, 0, 0, 0 } };
    int c;
    while ((c = getopt_long (argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 's': if (s_parse_shape (optarg, o)) { fprintf (stderr, "sigbench: --shape: expected widths like 512,256,64,1, got \"%s\"\n", optarg); return 2; } break;
        case 'r': o->rows = (uint32_t) atoi (optarg); break;
        case 'n': o->iterations = (uint32_t) atoi (optarg); break;
        case 'w': o->warmup = (uint32_t) atoi (optarg); break;
        case 'c': o->cpu = atoi (optarg); break;
        case 'f': o->weights = optarg; break;
        case 'S': o->seed = strtoull (optarg, NULL, 10); break;
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

static model_weights_t *s_weights (const options_t *o)
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
        model_weights_t *w = model_weights_load (&cfg, err, sizeof err);
        if (!w)
            fprintf (stderr, "sigbench: %s\n", err);
        return w;
    }
    activation_t acts[MAX_LAYERS];
    for (size_t i = 0; i < o->layers; i++)
        acts[i] = i + 1 < o->layers ? ACTIVATION_RELU : ACTIVATION_NONE;
    return model_weights_random (o->sizes, acts, o->layers, o->seed);
}

/* Times one CPU kernel; returns ||y - ref|| / ||ref|| over the timed run (or -1 on failure). */
static double s_bench_cpu (const options_t *o, const model_weights_t *w, cpu_kernel_t kernel, float *const *in,
                           const double *const *ref, latency_summary_t *out)
{
    model_config_t cfg;
    memset (&cfg, 0, sizeof cfg);
    snprintf (cfg.name, sizeof cfg.name, "bench");
    cfg.cpu_kernel = kernel;
    cfg.max_rows = o->rows;
    char err[512];
    backend_model_t *m = backend_cpu_iface.load (w, &cfg, err, sizeof err);
    if (!m) {
        fprintf (stderr, "sigbench: %s\n", err);
        return -1;
    }
    size_t nout = (size_t) o->rows * w->output_size;
    float *y = malloc (nout * sizeof (float));
    double *samples = malloc (o->iterations * sizeof (double));
    double num = 0, den = 0;
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        const float *x = in[i % POOL];
        double t0 = s_now_us ();
        backend_cpu_iface.infer (m, x, o->rows, y, err, sizeof err);
        double t1 = s_now_us ();
        if (i >= o->warmup) {
            samples[i - o->warmup] = t1 - t0;
            /* Checked outside the timed region, as one normalised error over every timed output:
             * a one-output model judged call by call would measure cancellation in single values. */
            for (size_t k = 0; k < nout; k++) {
                double d = (double) y[k] - ref[i % POOL][k];
                num += isfinite (d) ? d * d : INFINITY;
                den += ref[i % POOL][k] * ref[i % POOL][k];
            }
        }
    }
    double error = den > 0 ? sqrt (num / den) : sqrt (num);
    latency_summarize (samples, o->iterations, out);
    free (samples);
    free (y);
    backend_cpu_iface.destroy (&m);
    return error;
}

int main (int argc, char **argv)
{
    options_t o;
    int rc = s_parse (argc, argv, &o);
    if (rc)
        return rc;
    if (o.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO (&set);
        CPU_SET (o.cpu, &set);
        if (sched_setaffinity (0, sizeof set, &set) != 0) {
            perror ("sigbench: sched_setaffinity");
            return 1;
        }
    }
    model_weights_t *w = s_weights (&o);
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
        model_reference_forward (w, in[p], o.rows, ref[p]);
    }
    char shape[256] = "";
    for (size_t i = 0; i < w->layer_count; i++)
        snprintf (shape + strlen (shape), sizeof shape - strlen (shape), "%u->", w->layers[i].in);
    snprintf (shape + strlen (shape), sizeof shape - strlen (shape), "%u", w->output_size);
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
    model_weights_destroy (&w);
    return errors[0] <= 1e-5 && errors[1] <= 1e-5 ? 0 : 1;
}
