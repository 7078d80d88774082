/* lstmbench: in-process LSTM timings (docs/perf.md's method) for the three sizes, on the CPU
 * (fp32) and on the GPU in every weight type, plus the floors measured in the same run.
 *   step    the streaming critical path: a host clock from handing the step to stream_step to
 *           having its outputs (the advance that follows, and its completion, are not timed:
 *           Tacana's precomputation), one stream, fresh random steps;
 *   round-robin (--rr N)  N streams stepping in turn, each step followed by its advance, posted and
 *           not waited for (as a server does): the same host clock around each step, which waits
 *           behind the previous streams' advances where the advances run in the serving kernel and
 *           not where they run apart (plan 4: --sync 0 against --sync 8 in one binary). A row per
 *           --rr-gap F: the N steps of a round back to back (every stream's data at once), a round
 *           F x N advances (the advance's time measured first, on slot 0) after the last (F > 1:
 *           the advances keep up; F 0: rounds back to back, the advances bound the rate either way);
 *   window  a full window (rows 1): a host clock around infer;
 *   ping    the LSTM kernel's own ring with the step's features and no compute (its floor);
 *   pingpong  the MLP persistent kernel's ping-pong floor reading the same number of floats, output
 *           as completion (kernels/mlp_persistent.cu), when this build has it.
 * Every row: warm-up dropped, then --iterations timed calls (a row stops early after --seconds and
 * says how many it took), p50 p90 p99 p99.9 min max mean sd in microseconds. Outputs are checked:
 * every step's finite, every 500th against the same backend's full window over the same W steps,
 * and one window per row against the float64 reference (relative error printed).
 *
 * lstmbench --check FILE --window W [--head-act none] [--backend cpu|cuda] [--dtype f32]: loads an
 * nn.LSTM + Linear export (tensors "lstm.*" and "head.*"), reads floats from stdin: one window
 * (W x inputs), then any number of steps of one stream; prints "window v..." then "step i v..."
 * (tests/python/test_lstm_torch.py compares them with PyTorch). */
#define _GNU_SOURCE
#include "lstmbench.h"

#include "base/threads.h"
#ifdef SIGSERVE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void s_usage (FILE *out)
{
    fprintf (out,
             "usage: lstmbench [--sizes small,medium,large] [--dtypes f32,f16,bf16] [--backends cpu,cuda]\n"
             "                 [--iterations N] [--warmup N] [--seconds S] [--cpu CORE] [--seed N]\n"
             "                 [--blocks B1,B2,..] [--grid] [--slots N] [--no-window] [--no-floors]\n"
             "                 [--instances N1,N2,..]   (CUDA: N instances on GPU 0, a thread each driving its own\n"
             "                  stream at once, pinned to --cpu + k: one step row over all their steps per N)\n"
             "                 [--green]   (CUDA: the --instances rows with the model key green_context, each\n"
             "                  instance's kernel in a green context of SMs of its own)\n"
             "                 [--sync S1,S2,..]   (CUDA: the rows once per synchronisation: 0 today's, 1 the old\n"
             "                  poll in block-wide rounds, 2 a cluster's exchanges in rounds (a grid's always), 3 both;\n"
             "                  + 4: the features in the command words' line, as before 2026-11-26; + 8: the advances\n"
             "                  in a second resident launch on other SMs (plan 4, opt-in); + 16: a step's features\n"
             "                  broadcast after block 0 read them all, as before 2026-11-26 15:00; + 64: the generic\n"
             "                  kernel, not the one specialised for the plan at load (NVRTC), as before 2026-11-26)\n"
             "                 [--math default,wide,half]   (CUDA, f16 / bf16 weights: the rows once per kind of gate\n"
             "                  products: wide, each weight widened to fp32; half, in the weights' type (plan 3))\n"
             "                 [--trace]   (CUDA: also the traced instantiation of the kernel: where a step's and\n"
             "                  a ping's time goes in the kernel, a row per phase, beside the serving kernel's rows)\n"
             "                 [--rr N] [--rr-gap F1,F2,..]   (also a row per F of N streams stepping round-robin, each\n"
             "                  step followed by its advance, not waited for, rounds of N steps F x N advances apart\n"
             "                  (0: back to back); --sync 8: the advances in a second launch, plan 4)\n"
             "       lstmbench --check FILE --window W [--head-act none|relu|sigmoid|tanh] [--backend cpu|cuda]\n"
             "                 [--dtype f32|f16|bf16] [--math wide|half]   (floats on stdin: a window, then steps)\n"
             "sizes: small, medium, large (the issue's), or LAYERS:WINDOW:INPUTS:UNITS[:OUTPUTS]\n");
}

int main (int argc, char **argv)
{
    /* every kernel loaded when CUDA starts: a lazy load next to a resident kernel waits forever */
    setenv ("CUDA_MODULE_LOADING", "EAGER", 0);
    options_t o = { .sizes = "small,medium,large", .dtypes = "f32,f16,bf16", .backends = "cpu,cuda",
                    .iterations = 10000, .warmup = 1000, .seconds = 60, .cpu = -1, .wait = CUDA_WAIT_SPIN,
                    .slots = 4, .backend = "cpu", .dtype = "f32", .head_act = ACTIVATION_NONE, .blocks = "",
                    .instances = "", .sync = "0", .math = "default", .rr_gap = "0" };
    o.seed = (uint64_t) time (NULL) * 0x9e3779b97f4a7c15ull;
    static const struct option longs[] = {
        { "sizes", required_argument, 0, 's' },      { "dtypes", required_argument, 0, 'd' },
        { "backends", required_argument, 0, 'b' },   { "iterations", required_argument, 0, 'n' },
        { "warmup", required_argument, 0, 'w' },     { "seconds", required_argument, 0, 'S' },
        { "cpu", required_argument, 0, 'c' },        { "seed", required_argument, 0, 'r' },
        { "blocks", required_argument, 0, 'B' },     { "grid", no_argument, 0, 'G' },
        { "slots", required_argument, 0, 'L' },      { "no-window", no_argument, 0, 'N' },
        { "no-floors", no_argument, 0, 'F' },        { "check", required_argument, 0, 'k' },
        { "window", required_argument, 0, 'W' },     { "head-act", required_argument, 0, 'a' },
        { "backend", required_argument, 0, 'e' },    { "dtype", required_argument, 0, 't' },
        { "instances", required_argument, 0, 'I' },  { "help", no_argument, 0, 'h' },
        { "sync", required_argument, 0, 'y' },       { "trace", no_argument, 0, 'T' },
        { "math", required_argument, 0, 'M' },       { "rr", required_argument, 0, 'R' },
        { "rr-gap", required_argument, 0, 'g' },    { "green", no_argument, 0, 'E' },
        { 0, 0, 0, 0 },
    };
    for (int c; (c = getopt_long (argc, argv, "h", longs, NULL)) != -1;) {
        switch (c) {
        case 's': o.sizes = optarg; break;
        case 'd': o.dtypes = optarg; break;
        case 'b': o.backends = optarg; break;
        case 'n': o.iterations = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'w': o.warmup = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'S': o.seconds = atof (optarg); break;
        case 'c': o.cpu = atoi (optarg); break;
        case 'r': o.seed = strtoull (optarg, NULL, 10); break;
        case 'B': o.blocks = optarg; break;
        case 'G': o.grid = 1; break;
        case 'L': o.slots = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'N': o.no_window = 1; break;
        case 'F': o.no_floors = 1; break;
        case 'k': o.check = optarg; break;
        case 'W': o.window = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'a':
            o.head_act = strcmp (optarg, "relu") == 0 ? ACTIVATION_RELU : strcmp (optarg, "sigmoid") == 0 ? ACTIVATION_SIGMOID
                         : strcmp (optarg, "tanh") == 0 ? ACTIVATION_TANH : ACTIVATION_NONE;
            break;
        case 'e': o.backend = optarg; break;
        case 't': o.dtype = optarg; break;
        case 'I': o.instances = optarg; break;
        case 'y': o.sync = optarg; break;
        case 'T': o.trace = 1; break;
        case 'M': o.math = optarg; break;
        case 'R': o.rr = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'g': o.rr_gap = optarg; break;
        case 'E': o.green = 1; break;
        case 'h': s_usage (stdout); return 0;
        default: s_usage (stderr); return 2;
        }
    }
    if (o.check) {
        if (!o.window) {
            fprintf (stderr, "lstmbench: --check needs --window\n");
            return 2;
        }
        return lb_check (&o);
    }
    if (o.iterations < 1 || o.slots < 1) {
        s_usage (stderr);
        return 2;
    }
    char pin_err[256];
    if (o.cpu >= 0 && threads_pin (o.cpu, pin_err, sizeof pin_err) != 0)
        fprintf (stderr, "lstmbench: --cpu: %s\n", pin_err);
    char host[128] = "?";
    gethostname (host, sizeof host);
    time_t now = time (NULL);
    char date[64];
    strftime (date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime (&now));
    printf ("lstmbench on %s, %s, %u timed iterations after %u warm-up (at most %.0f s a row), seed %llu, CPU %d\n",
            host, date, o.iterations, o.warmup, o.seconds, (unsigned long long) o.seed, o.cpu);
#ifdef SIGSERVE_HAVE_CUDA
    {
        int dev = 0, drv = 0, rt = 0;
        struct cudaDeviceProp p;
        if (strstr (o.backends, "cuda") && cudaGetDeviceCount (&dev) == cudaSuccess && dev > 0
            && cudaGetDeviceProperties (&p, 0) == cudaSuccess) {
            cudaDriverGetVersion (&drv);
            cudaRuntimeGetVersion (&rt);
            printf ("GPU 0: %s, %d SMs, %zu KiB L2, driver API %d, runtime %d\n", p.name, p.multiProcessorCount,
                    (size_t) p.l2CacheSize >> 10, drv, rt);
        } else if (strstr (o.backends, "cuda")) {
            printf ("no CUDA device: the cuda rows are skipped\n");
            o.backends = "cpu";
        }
    }
#endif
    char dir[] = "/tmp/lstmbench-XXXXXX";
    if (!mkdtemp (dir)) {
        perror ("lstmbench: mkdtemp");
        return 1;
    }
    int rc = 0;
    char list[256];
    snprintf (list, sizeof list, "%s", o.sizes);
    for (char *save = NULL, *size = strtok_r (list, ",", &save); size; size = strtok_r (NULL, ",", &save))
        rc |= lb_bench_size (&o, size, &o.seed, dir);
    rmdir (dir);
    return rc ? 1 : 0;
}
