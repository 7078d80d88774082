/* rnncheck: a recurrent model's outputs on given inputs, through the backend the server would use,
 * for a test to compare with another implementation (tests/python/test_gru_torch.py: PyTorch).
 *
 *   rnncheck --type gru|lstm --window W FILE [--prefix P] [--head-act none|relu|sigmoid|tanh]
 *            [--backend cpu|cuda | --reference] < INPUTS
 *
 * FILE is a safetensors file of that type's PyTorch layout (tensors <prefix>weight_ih_l0, ... and
 * head.weight, head.bias; the prefix defaults to the type's name and a dot: "gru."). INPUTS: one
 * window (W x step_size values), then any number of steps (step_size values each), whitespace
 * apart. Prints "window" and the window's outputs, then "step K" and a stream's outputs after step K
 * of those steps (0 first: the window of its last W steps, zeros before its first), %.9g each;
 * --reference: the float64 reference's outputs instead (%.17g), which every backend is judged by.
 * Every type, backend and reference comes from the model types table (base/model_type.h,
 * backends/backends.h): nothing here is one type's. Exits 0; 1 with a message when a step fails or
 * the inputs do not divide; 2 when the type or backend is not one this build serves. */
#include "backends/backends.h"
#include "base/config.h"
#include "weights/weights.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_usage (void)
{
    fprintf (stderr, "usage: rnncheck --type gru|lstm --window W FILE [--prefix P] [--head-act none|relu|sigmoid|tanh]\n"
                     "                [--backend cpu|cuda | --reference] < INPUTS\n");
}

/* INDEX of NAME among NAMES (NULL-terminated), or -1 */
static int s_index (const char *const *names, const char *name)
{
    for (int i = 0; names[i]; i++)
        if (strcmp (names[i], name) == 0)
            return i;
    return -1;
}

/* WHAT (and K unless it is negative), then N outputs: Y's, or REF's when it is not NULL */
static void s_print (const char *what, long k, const float *y, const double *ref, uint32_t n)
{
    printf (k < 0 ? "%s" : "%s %ld", what, k);
    for (uint32_t i = 0; i < n; i++)
        printf (ref ? " %.17g" : " %.9g", ref ? ref[i] : (double) y[i]);
    printf ("\n");
}

int main (int argc, char **argv)
{
    const char *type = NULL, *prefix = NULL, *backend = "cpu";
    int window = 0, act = ACTIVATION_NONE, reference = 0;
    static const char *const acts[] = { "none", "relu", "sigmoid", "tanh", NULL };
    static const struct option opts[] = {
        { "type", required_argument, 0, 't' },     { "window", required_argument, 0, 'w' },
        { "prefix", required_argument, 0, 'p' },   { "head-act", required_argument, 0, 'a' },
        { "backend", required_argument, 0, 'b' },  { "reference", no_argument, 0, 'r' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    for (int c; (c = getopt_long (argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 't': type = optarg; break;
        case 'w': window = atoi (optarg); break;
        case 'p': prefix = optarg; break;
        case 'a': act = s_index (acts, optarg); break;
        case 'b': backend = optarg; break;
        case 'r': reference = 1; break;
        default: s_usage (); return c == 'h' ? 0 : 2;
        }
    }
    const int t = type ? s_index (model_type_names, type) : -1;
    if (optind + 1 != argc || t < 0 || window < 1 || window > 4096 || act < 0) {
        s_usage ();
        return 2;
    }
    const model_type_info_t *info = model_type_info ((model_type_t) t);
    const backends_type_t *row = backends_type ((model_type_t) t);
    const backend_kind_t kind = strcmp (backend, "cuda") == 0 ? BACKEND_CUDA : BACKEND_CPU;
    const backend_iface_t *B = backends_built ((model_type_t) t, kind);
    if (!info->gates || !B || !B->stream_step) {
        fprintf (stderr, "rnncheck: \"type\": \"%s\" with backend \"%s\": not available in this build (%s)\n", type,
                 backend, !info->gates ? "not a recurrent type" : "no such backend for it");
        return 2;
    }
    model_config_t cfg = {
        .type = (model_type_t) t, .backend = kind, .cpu_kernel = CPU_KERNEL_LOOP, .device_count = 1, .max_rows = 1,
        .max_batch_rows = 1, .instances = 1, .max_streams = 1, .stream_idle_s = 300, .watchdog_ms = 1000,
        .window = (uint32_t) window, .head = { .weight = "head.weight", .bias = "head.bias", .activation = act },
        .specialise = true, .graph = true,   /* as a model's config has them by default */
    };
    snprintf (cfg.name, sizeof cfg.name, "check");
    snprintf (cfg.weights, sizeof cfg.weights, "%s", argv[optind]);
    snprintf (cfg.rnn_prefix, sizeof cfg.rnn_prefix, "%s", prefix ? prefix : "");
    if (!prefix)
        snprintf (cfg.rnn_prefix, sizeof cfg.rnn_prefix, "%s.", type);
    config_graph_rows_default (&cfg);
    char err[512];
    weights_t *w = weights_load (&cfg, err, sizeof err);
    backend_model_t *m = w ? B->load (w, &cfg, 0, err, sizeof err) : NULL;
    if (!m) {
        fprintf (stderr, "rnncheck: %s\n", err);
        weights_destroy (&w);
        return 1;
    }
    const size_t nwin = w->input_size, step = w->step_size;
    size_t cap = nwin + 1024, n = 0;
    float *v = malloc (cap * sizeof (float)), *y = malloc (w->output_size * sizeof (float));
    double *ref = reference ? malloc (w->output_size * sizeof (double)) : NULL;
    double d;
    while (v && scanf ("%lf", &d) == 1) {
        if (n == cap) {
            float *more = realloc (v, (cap *= 2) * sizeof (float));
            if (!more)
                free (v);
            v = more;
        }
        if (v)
            v[n++] = (float) d;
    }
    int rc = v && y && (ref || !reference) && n >= nwin && (n - nwin) % step == 0 ? 0 : 1;
    if (rc)
        fprintf (stderr, "rnncheck: expected %zu values (a window) and then whole steps of %zu, got %zu\n", nwin, step, n);
    if (rc == 0 && (ref ? row->reference (w, v, 1, ref) != 0 : B->infer (m, v, 1, y, err, sizeof err) != SIG_OK)) {
        fprintf (stderr, "rnncheck: %s\n", ref ? "out of memory for the reference" : err);
        rc = 1;
    }
    if (rc == 0) {
        s_print ("window", -1, y, ref, w->output_size);
        B->stream_reset (m, 0);
    }
    for (size_t k = 0; rc == 0 && nwin + (k + 1) * step <= n; k++) {
        if (ref ? row->reference_stream (w, v + nwin, k + 1, ref) != 0
                : B->stream_step (m, 0, v + nwin + k * step, y, err, sizeof err) != SIG_OK) {
            fprintf (stderr, "rnncheck: %s\n", ref ? "out of memory for the reference" : err);
            rc = 1;
            break;
        }
        B->stream_advance (m, 0);
        s_print ("step", (long) k, y, ref, w->output_size);
    }
    free (v);
    free (y);
    free (ref);
    B->destroy (&m);
    weights_destroy (&w);
    return rc;
}
