/* sigbench: the persistent kernel's rows of the end-to-end table, the floors beside them (ping-pong,
 * reads), the traced instantiations and several instances at once (main.c's usage says which). */
#define _GNU_SOURCE
#include "sigbench.h"

#include "base/threads.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SIGSERVE_HAVE_CUDA
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
        double t0 = sb_now_us ();
        if (backend_cuda_iface.infer (m, x, 1, &y, err, sizeof err) != SIG_OK) {
            fprintf (stderr, "sigbench: ping-pong: %s\n", err);
            exit (1);
        }
        double t1 = sb_now_us ();
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
    backend_model_t *m = sb_load_gpu_held (o, w, CUDA_KERNEL_PERSISTENT, false, dtype);
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
    sb_specialise = spec;
    backend_model_t *m = s_load_persistent (o, w, &tu, dtype);
    sb_specialise = false;
    if (!m) {
        cudaFree (d_trace);
        return INFINITY;
    }
    latency_summary_t sum;
    char label[384];
    const double e = sb_bench_e2e (o, m, w, E2E_PINNED_GRAPH, in, ref, &sum);
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
    d->err = sb_e2e_samples (d->o, d->m, d->w, E2E_PINNED_GRAPH, d->in, d->ref, d->samples);
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
        sb_specialise = true;
        sb_green = o->green != 0;
        sig_persistent_tuning_t tu = { 0 };
        tu.sync = o->sync;
        d[loaded] = (driver_t) { .o = o, .m = s_load_persistent (o, w, o->sync ? &tu : NULL, dtype), .w = w, .in = in, .ref = ref,
                                 .cpu = o->cpu >= 0 ? o->cpu + (int) loaded : -1,
                                 .samples = all + (size_t) loaded * o->iterations };
        sb_specialise = sb_green = false;
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

int sb_bench_persistent (const options_t *o, const weights_t *w, float *const *in, const double *const *ref)
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
            sb_specialise = spec == 1;
            backend_model_t *m = s_load_persistent (o, w, o->sync ? &tu : NULL, dtypes[d]);
            sb_specialise = false;
            if (!m)
                continue;
            const double e = sb_bench_e2e (o, m, w, E2E_PINNED_GRAPH, in, ref, &sum);
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
            e_var[nvar++] = sb_bench_e2e (o, vm, w, E2E_PINNED_GRAPH, in, ref, &sum);
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
            sb_specialise = k % 2 == 1;
            backend_model_t *vm = s_load_persistent (o, w, &variants[v], WEIGHT_DTYPE_F32);
            sb_specialise = false;
            if (!vm)
                continue;
            lim_var[nvar] = s_dtype_limit (WEIGHT_DTYPE_F32);
            e_var[nvar++] = sb_bench_e2e (o, vm, w, E2E_PINNED_GRAPH, in, ref, &sum);
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
#endif
