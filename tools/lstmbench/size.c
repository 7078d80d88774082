/* lstmbench: one size on every backend and weight type asked for, a model per launch size,
 * synchronisation and kind of products (CUDA), each beside its floors. */
#define _GNU_SOURCE
#include "lstmbench.h"

#include "clock.h"
#include "latency.h"
#include "lstm_reference.h"
#include "read_floor.h"
#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/backend_lstm_cuda.h"
#include <cuda_runtime_api.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One backend, weight type and launch size (BLOCKS; 0: the plan's): load, the rows, destroy. A
 * model that does not load is a row saying why, not a failure. FIRST: the first launch size of
 * this weight type (the ping floor is measured once). */
static int s_bench_model (const options_t *o, const char *size, const char *bname, const char *dname, uint32_t blocks,
                          uint32_t sync, uint32_t math, uint64_t trace, bool first, const weights_t *w, model_config_t *cfg,
                          uint64_t *seed, row_t *r)
{
    const backend_iface_t *B = lb_iface (bname);
    const bool cuda = strcmp (bname, "cuda") == 0;
    const lstm_weights_t *l = w->lstm;
    char err[512];
    cfg->backend = cuda ? BACKEND_CUDA : BACKEND_CPU;
    cfg->weight_dtype = (weight_dtype_t) lb_dtype (dname);
    cfg->wait = o->wait;
    cfg->max_streams = o->slots > o->rr ? o->slots : o->rr;
    cfg->watchdog_ms = 10000;
#ifdef SIGSERVE_HAVE_CUDA
    if (cuda) {
        const sig_lstm_tuning_t t = { .blocks = blocks, .grid = (uint32_t) o->grid, .sync = sync, .math = math,
                                      .trace = trace };
        lstm_cuda_tuning (&t);
    }
#else
    (void) blocks;
    (void) first;
    (void) sync;
    (void) math;
    (void) trace;
#endif
    const double t0 = clock_now_us ();
    backend_model_t *m = B->load (w, cfg, 0, err, sizeof err);
    const double load_ms = (clock_now_us () - t0) / 1e3;
    if (!m) {
        printf ("| %s %s %s: %s | | | | | | | | |\n", size, bname, dname, err);
        return 0;
    }
    char label[256], how[160] = "1 core";
#ifdef SIGSERVE_HAVE_CUDA
    if (cuda) {
        const sig_lstm_plan_t *p = lstm_cuda_plan (m);
        static const char *const syncs[4] = { "", ", old poll", ", old exchanges", ", old poll and exchanges" };
        snprintf (how, sizeof how, "%s %u, %u KiB smem%s%s%s%s, advances %s%s", p->mode == SIG_LSTM_GRID ? "grid" : "cluster",
                  p->blocks, p->smem_bytes >> 10, syncs[p->sync & 3u],
                  (p->sync & SIG_LSTM_SYNC_BCAST_AFTER) && p->blocks > 1 ? ", broadcast after the read" : "",
                  (p->sync & SIG_LSTM_SYNC_GENERIC) ? ", generic kernel" : "",
                  p->dtype == SIG_LSTM_F32 ? "" : p->math == SIG_LSTM_MATH_HALF ? ", half math" : ", wide math",
                  p->apart ? "apart" : "inline", trace ? ", TRACED" : "");
    }
#endif
    fprintf (stderr, "lstmbench: %s %s %s loaded in %.0f ms (%s)\n", size, bname, dname, load_ms, how);
    r->n = 0;
    r->note[0] = 0;
    int rc = lb_bench_step (o, B, m, l, cuda, seed, r);
    snprintf (label, sizeof label, "%s %s %s step, critical path [%s]", size, bname, dname, how);
    if (rc == 0)
        lb_print (label, r);
    if (rc == 0 && trace) {   /* the traced launch: its step row, then (f32) its pings; no window */
#ifdef SIGSERVE_HAVE_CUDA
        if (cuda && cfg->weight_dtype == WEIGHT_DTYPE_F32 && first) {
            B->destroy (&m);   /* the step records are read once this kernel stops */
            rc = lb_trace_rows (o, size, dname, how, trace, l->layer_count, r);
            if (rc == 0 && (m = B->load (w, cfg, 0, err, sizeof err)) == NULL) {
                printf ("| %s %s %s: %s | | | | | | | | |\n", size, bname, dname, err);
                return 0;
            }
            r->n = 0;
            r->note[0] = 0;
            if (rc == 0 && (rc = lb_bench_ping (o, m, l->step_size, seed, r)) == 0) {
                snprintf (label, sizeof label, "%s floor: LSTM ring ping, no compute [%s]", size, how);
                lb_print (label, r);
            }
        }
        B->destroy (&m);
        return rc == 0 ? lb_trace_rows (o, size, dname, how, trace, l->layer_count, r) : rc;
#endif
    }
    if (rc == 0 && o->rr) {   /* the advance's time first (slot 0: a step, then its advance waited for) */
        double adv[32];
        float *x = calloc (l->step_size, sizeof (float)), *y = calloc (l->head.out, sizeof (float));
        for (int i = 0; i < 32 && rc == 0; i++) {
            lb_fill (seed, x, l->step_size);
            if (B->stream_step (m, 0, x, y, err, sizeof err) != SIG_OK)
                rc = -1;
            const uint64_t t0 = clock_now_ns ();
            B->stream_advance (m, 0);
#ifdef SIGSERVE_HAVE_CUDA
            if (cuda && lstm_cuda_sync (m, err, sizeof err) != SIG_OK)
                rc = -1;
#endif
            adv[i] = (double) (clock_now_ns () - t0) / 1e3;
        }
        free (x);
        free (y);
        latency_summary_t as;
        latency_summarize (adv, 32, &as);
        char gl[64];
        snprintf (gl, sizeof gl, "%s", o->rr_gap);
        for (char *s7 = NULL, *g = strtok_r (gl, ",", &s7); g && rc == 0; g = strtok_r (NULL, ",", &s7)) {
            const double f = atof (g), gap = f * o->rr * as.p50;
            r->n = 0;
            r->note[0] = 0;
            rc = lb_bench_rr (o, B, m, l, o->rr, gap, seed, r);
            snprintf (label, sizeof label, "%s %s %s step, %u streams round-robin, a round every %.0f us (%.2g x %u "
                      "advances of %.0f us) [%s]", size, bname, dname, o->rr, gap, f, o->rr, as.p50, how);
            if (rc == 0)
                lb_print (label, r);
        }
    }
    if (rc == 0 && !o->no_window) {
        r->n = 0;
        r->note[0] = 0;
        rc = lb_bench_window (o, B, m, l, seed, r);
        snprintf (label, sizeof label, "%s %s %s full window [%s]", size, bname, dname, how);
        if (rc == 0)
            lb_print (label, r);
    }
#ifdef SIGSERVE_HAVE_CUDA
    if (rc == 0 && cuda && !o->no_floors && cfg->weight_dtype == WEIGHT_DTYPE_F32 && first) {
        r->n = 0;
        r->note[0] = 0;
        rc = lb_bench_ping (o, m, l->step_size, seed, r);
        snprintf (label, sizeof label, "%s floor: LSTM ring ping, no compute [%s]", size, how);
        if (rc == 0)
            lb_print (label, r);
    }
#endif
    const double d0 = clock_now_us ();
    B->destroy (&m);
    fprintf (stderr, "lstmbench: %s %s %s destroyed in %.0f ms\n", size, bname, dname, (clock_now_us () - d0) / 1e3);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * One size: every backend and weight type asked for */

/* The CPU rows' floor for DTYPE: one read of the LSTM's W_ih and W_hh bytes in that dtype (a step
 * reads the W_ih part; its advance, the W_hh part), with AVX-512 loads, on the same core; a row. */
static void s_cpu_floor (const options_t *o, const char *size, const lstm_weights_t *l, const char *dname, row_t *r)
{
    if (!__builtin_cpu_supports ("avx512f"))
        return;
    size_t weights = 0;
    for (size_t k = 0; k < l->layer_count; k++)
        weights += 4 * (size_t) l->hidden * (l->layers[k].in + l->hidden);
    const size_t bytes = weights * (strcmp (dname, "f32") == 0 ? 4 : 2);
    unsigned char *buf = aligned_alloc (64, (bytes + 63) / 64 * 64);
    memset (buf, 0x5a, bytes);
    r->n = 0;
    r->note[0] = 0;
    for (uint32_t i = 0; i < o->warmup + o->iterations; i++) {
        const double t0 = clock_now_us ();
        read_floor_64 (buf, bytes);
        const double t1 = clock_now_us ();
        if (i >= o->warmup)
            r->samples[r->n++] = t1 - t0;
    }
    char label[160];
    snprintf (label, sizeof label, "%s floor %s: one read of the %zu bytes of W_ih and W_hh (64-byte loads)", size, dname,
              bytes);
    lb_print (label, r);
    free (buf);
}

int lb_bench_size (const options_t *o, const char *size, uint64_t *seed, const char *dir)
{
    lstm_shape_t shape;
    char err[512], path[1024];
    if (lstm_shape_parse (size, &shape, err, sizeof err) != 0) {
        fprintf (stderr, "lstmbench: %s\n", err);
        return -1;
    }
    snprintf (path, sizeof path, "%s/lstmbench-%s.safetensors", dir, size);
    model_config_t cfg;
    weights_t *w = lstm_random_weights (path, &shape, rng_next (seed), &cfg, err, sizeof err);
    unlink (path);
    if (!w) {
        fprintf (stderr, "lstmbench: %s\n", err);
        return -1;
    }
    const lstm_weights_t *l = w->lstm;
    printf ("\n### %s: %zu layers, window %u, %u inputs, %u units, %u output (%.2f M weights)\n\n", size, l->layer_count,
            l->window, l->step_size, l->hidden, l->head.out,
            (double) (4ull * l->hidden * (l->step_size + l->hidden) + 8ull * l->hidden * l->hidden * (l->layer_count - 1))
                / 1e6);
    latency_print_header (stdout, "row (microseconds)");
    row_t r = { .samples = malloc ((size_t) (o->iterations + 16) * sizeof (double)) };
    int rc = 0;
    char list[256];
    snprintf (list, sizeof list, "%s", o->backends);
    for (char *save = NULL, *bname = strtok_r (list, ",", &save); bname && rc == 0; bname = strtok_r (NULL, ",", &save)) {
        const backend_iface_t *B = lb_iface (bname);
        if (!B) {
            printf ("| %s: not in this build | | | | | | | | |\n", bname);
            continue;
        }
        const bool cuda = strcmp (bname, "cuda") == 0;
        char dl[64] = "";
        if (cuda)
            snprintf (dl, sizeof dl, "%s", o->dtypes);
        else {   /* the CPU's: those of --dtypes it holds (f32, bf16), each then beside its floor */
            char want[64];
            snprintf (want, sizeof want, "%s", o->dtypes);
            for (char *s8 = NULL, *d = strtok_r (want, ",", &s8); d; d = strtok_r (NULL, ",", &s8))
                if (lb_dtype (d) >= 0 && backend_holds (B, (weight_dtype_t) lb_dtype (d)))
                    snprintf (dl + strlen (dl), sizeof dl - strlen (dl), "%s%s", dl[0] ? "," : "", d);
        }
        for (char *s2 = NULL, *dname = strtok_r (dl, ",", &s2); dname && rc == 0; dname = strtok_r (NULL, ",", &s2)) {
#ifdef SIGSERVE_HAVE_CUDA
            if (cuda && o->instances[0]) {      /* --instances: those rows instead of the usual ones */
                char il[64];
                snprintf (il, sizeof il, "%s", o->instances);
                for (char *s4 = NULL, *nstr = strtok_r (il, ",", &s4); nstr && rc == 0; nstr = strtok_r (NULL, ",", &s4))
                    rc = lb_bench_instances (o, size, dname, (uint32_t) strtoul (nstr, NULL, 10), w, &cfg, seed);
                continue;
            }
#endif
            char bl[128];
            snprintf (bl, sizeof bl, "%s", cuda && o->blocks[0] ? o->blocks : "0");
            for (char *s3 = NULL, *bstr = strtok_r (bl, ",", &s3); bstr && rc == 0; bstr = strtok_r (NULL, ",", &s3)) {
                char sl[64];
                snprintf (sl, sizeof sl, "%s", cuda ? o->sync : "0");
                for (char *s5 = NULL, *sy = strtok_r (sl, ",", &s5); sy && rc == 0; sy = strtok_r (NULL, ",", &s5)) {
                  char ml[64];   /* f32 weights have one kind of products */
                  snprintf (ml, sizeof ml, "%s", cuda && strcmp (dname, "f32") != 0 ? o->math : "default");
                  for (char *s6 = NULL, *ma = strtok_r (ml, ",", &s6); ma && rc == 0; ma = strtok_r (NULL, ",", &s6)) {
                    const uint32_t blocks = (uint32_t) strtoul (bstr, NULL, 10), sync = (uint32_t) strtoul (sy, NULL, 10);
                    const uint32_t math = lb_math (ma);
                    const bool first = bstr == bl && sy == sl && ma == ml;
                    rc = s_bench_model (o, size, bname, dname, blocks, sync, math, 0, first, w, &cfg, seed, &r);
                    if (rc == 0 && !cuda && !o->no_floors)
                        s_cpu_floor (o, size, l, dname, &r);
#ifdef SIGSERVE_HAVE_CUDA
                    if (rc == 0 && cuda && o->trace) {   /* the traced instantiation, beside the serving rows */
                        const size_t bytes = (size_t) SIG_LSTM_TRACE_BLOCKS * SIG_LSTM_TRACE_RECORDS * SIG_LSTM_TRACE_WORDS
                                             * sizeof (uint64_t);
                        void *d = NULL;
                        if (cudaMalloc (&d, bytes) != cudaSuccess || cudaMemset (d, 0, bytes) != cudaSuccess) {
                            fprintf (stderr, "lstmbench: --trace: no device memory for the records\n");
                            rc = -1;
                        } else {
                            rc = s_bench_model (o, size, bname, dname, blocks, sync, math, (uint64_t) (uintptr_t) d, first,
                                                w, &cfg, seed, &r);
                        }
                        cudaFree (d);
                    }
#endif
                  }
                }
            }
        }
#ifdef SIGSERVE_HAVE_CUDA
        if (rc == 0 && cuda && !o->no_floors) {   /* a failure here is reported, not fatal */
            r.n = 0;
            r.note[0] = 0;
            char label[128];
            snprintf (label, sizeof label, "%s floor: MLP persistent ping-pong, read + output", size);
            if (lb_bench_pingpong (o, l->step_size, seed, &r) == 0)
                lb_print (label, &r);
        }
#endif
    }
    free (r.samples);
    weights_destroy (&w);
    return rc;
}
