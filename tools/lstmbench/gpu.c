/* lstmbench's CUDA rows: the floors (the LSTM kernel's ring ping, the MLP persistent kernel's
 * ping-pong) and several instances at once (issue 19 item 5). */
#define _GNU_SOURCE
#include "lstmbench.h"

#include "base/threads.h"
#include "clock.h"
#include "latency.h"
#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/backend_cuda.h"
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SIGSERVE_HAVE_CUDA
int lb_bench_ping (const options_t *o, backend_model_t *m, uint32_t in, uint64_t *seed, row_t *r)
{
    float *x = malloc (in * sizeof (float)), y;
    char err[512];
    int rc = 0;
    for (uint32_t i = 0; i < o->warmup + o->iterations && rc == 0; i++) {
        lb_fill (seed, x, in);
        const uint64_t t0 = clock_now_ns ();
        sig_status_t st = lstm_cuda_ping (m, x, &y, err, sizeof err);
        const uint64_t t1 = clock_now_ns ();
        if (st != SIG_OK || y != x[0]) {
            fprintf (stderr, "lstmbench: ping: %s (answer %g, sent %g)\n", st != SIG_OK ? err : "wrong answer", y, x[0]);
            rc = -1;
        }
        if (i >= o->warmup)
            r->samples[r->n++] = (double) (t1 - t0) / 1e3;
    }
    snprintf (r->note, sizeof r->note, "%u floats in, 1 out", in);
    free (x);
    return rc;
}

/* The MLP persistent kernel's floor (backend_cuda.h): one block, reads IN floats, sums them, the
 * output store as completion. */
int lb_bench_pingpong (const options_t *o, uint32_t in, uint64_t *seed, row_t *r)
{
    char err[512];
    backend_model_t *pp = cuda_pingpong_load (0, in, SIG_PINGPONG_READ, SIG_DONE_OUTPUTS, o->wait, err, sizeof err);
    if (!pp) {
        fprintf (stderr, "lstmbench: ping-pong floor: %s\n", err);
        return -1;
    }
    float *x = malloc (in * sizeof (float)), y;
    int rc = 0;
    for (uint32_t i = 0; i < o->warmup + o->iterations && rc == 0; i++) {
        lb_fill (seed, x, in);
        const uint64_t t0 = clock_now_ns ();
        sig_status_t st = backend_cuda_iface.infer (pp, x, 1, &y, err, sizeof err);
        const uint64_t t1 = clock_now_ns ();
        if (st != SIG_OK) {
            fprintf (stderr, "lstmbench: ping-pong: %s\n", err);
            rc = -1;
        }
        if (i >= o->warmup)
            r->samples[r->n++] = (double) (t1 - t0) / 1e3;
    }
    snprintf (r->note, sizeof r->note, "MLP kernel's, %u floats read", in);
    free (x);
    backend_cuda_iface.destroy (&pp);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Several instances at once (issue 19 item 5): N instances of one model on GPU 0, each driven by
 * its own thread (pinned to --cpu + k when --cpu is given), one stream each, at the same time. */

typedef struct {
    const options_t *o;
    const backend_iface_t *B;
    backend_model_t *m;
    const lstm_weights_t *w;
    int cpu;
    uint64_t seed;
    row_t r;
    int rc;
} driver_t;

static void *s_drive (void *arg)
{
    driver_t *d = arg;
    char err[256];
    if (d->cpu >= 0 && threads_pin (d->cpu, err, sizeof err) != 0)
        fprintf (stderr, "lstmbench: a driver: %s\n", err);
    d->rc = lb_bench_step (d->o, d->B, d->m, d->w, true, &d->seed, &d->r);
    return NULL;
}

int lb_bench_instances (const options_t *o, const char *size, const char *dname, uint32_t n, const weights_t *w,
                        model_config_t *cfg, uint64_t *seed)
{
    const backend_iface_t *B = lb_iface ("cuda");
    cfg->backend = BACKEND_CUDA;
    cfg->weight_dtype = (weight_dtype_t) lb_dtype (dname);
    cfg->wait = o->wait;
    cfg->max_streams = o->slots;
    cfg->watchdog_ms = 10000;
    cfg->green_context = o->green != 0;
    driver_t *d = calloc (n, sizeof *d);
    pthread_t *th = calloc (n, sizeof *th);
    char err[512];
    int rc = 0;
    uint32_t loaded = 0;
    for (; loaded < n; loaded++) {
        d[loaded] = (driver_t) { .o = o, .B = B, .w = w->lstm, .cpu = o->cpu >= 0 ? o->cpu + (int) loaded : -1,
                                 .seed = rng_next (seed),
                                 .r = { .samples = malloc ((size_t) (o->iterations + 16) * sizeof (double)) } };
        if (!(d[loaded].m = B->load (w, cfg, 0, err, sizeof err))) {
            printf ("| %s cuda %s, %u instances at once: instance %u: %s | | | | | | | | |\n", size, dname, n, loaded, err);
            break;
        }
    }
    if (loaded == n) {
        for (uint32_t k = 0; k < n; k++)
            pthread_create (&th[k], NULL, s_drive, &d[k]);
        for (uint32_t k = 0; k < n; k++)
            pthread_join (th[k], NULL);
        row_t all = { .samples = malloc ((size_t) n * (o->iterations + 16) * sizeof (double)) };
        double worst = 0;
        for (uint32_t k = 0; k < n; k++) {
            rc |= d[k].rc;
            memcpy (all.samples + all.n, d[k].r.samples, d[k].r.n * sizeof (double));
            all.n += d[k].r.n;
            latency_summary_t one;
            latency_summarize (d[k].r.samples, d[k].r.n, &one);
            worst = one.p99 > worst ? one.p99 : worst;
        }
        const sig_lstm_plan_t *p = lstm_cuda_plan (d[0].m);
        char label[256];
        snprintf (all.note, sizeof all.note, "the worst instance's p99 %.2f", worst);
        char green[48] = "";
        if (B->green_sms (d[0].m))
            snprintf (green, sizeof green, ", each in a green context of %u SMs", B->green_sms (d[0].m));
        snprintf (label, sizeof label, "%s cuda %s step, %u instance(s) at once%s [%s %u, %u KiB smem each]", size, dname,
                  n, green, p->mode == SIG_LSTM_GRID ? "grid" : "cluster", p->blocks, p->smem_bytes >> 10);
        if (rc == 0)
            lb_print (label, &all);
        free (all.samples);
    }
    for (uint32_t k = 0; k < n; k++) {
        if (d[k].m)
            B->destroy (&d[k].m);
        free (d[k].r.samples);
    }
    free (d);
    free (th);
    return rc;
}
#endif
