/* lstmbench's rows of any backend (main.c says what each times): the stream's critical path, streams
 * round-robin, the full window; a row's samples printed as a line of the table. */
#define _GNU_SOURCE
#include "lstmbench.h"

#include "clock.h"
#include "latency.h"
#include "lstm_reference.h"
#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/backend_lstm_cuda.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lb_print (const char *label, row_t *r)
{
    latency_summary_t s;
    latency_summarize (r->samples, r->n, &s);
    char l[512];
    snprintf (l, sizeof l, "%s (n %zu%s%s)", label, r->n, r->note[0] ? ", " : "", r->note);
    latency_print_row (stdout, l, &s);
    fflush (stdout);
}

static bool s_out_of_time (const options_t *o, double start_us, uint32_t i)
{
    return o->seconds > 0 && (i & 63u) == 0 && clock_now_us () - start_us > o->seconds * 1e6;
}

/* A stream's window in full: its last W steps from HIST (a ring of W rows of IN floats, COUNT steps
 * so far; zeros before the first) into WIN, run as one window into YW, and the largest relative
 * difference of its step outputs Y (OUT) from those folded into *CHECK (NAN: none yet). -1 when the
 * window fails (said on stderr). */
static int s_check_window (const backend_iface_t *B, backend_model_t *m, const float *hist, uint64_t count, uint32_t W,
                           uint32_t in, uint32_t out, const float *y, float *win, float *yw, double *check)
{
    for (uint32_t t = 0; t < W; t++) {
        const int64_t k = (int64_t) count - W + t;
        if (k >= 0)
            memcpy (win + (size_t) t * in, hist + (size_t) (k % W) * in, in * sizeof (float));
        else
            memset (win + (size_t) t * in, 0, in * sizeof (float));
    }
    char err[512];
    if (B->infer (m, win, 1, yw, err, sizeof err) != SIG_OK) {
        fprintf (stderr, "lstmbench: window: %s\n", err);
        return -1;
    }
    for (uint32_t k = 0; k < out; k++) {
        const double d = fabs ((double) y[k] - yw[k]) / fmax (fabs ((double) yw[k]), 1e-3);
        *check = isnan (*check) || d > *check || isnan (d) ? d : *check;
    }
    return 0;
}

/* The row's note: WHAT and the worst difference its window checks saw, or that none ran. */
static void s_check_note (row_t *r, const char *what)
{
    if (isnan (r->check))
        snprintf (r->note, sizeof r->note, "%s: not reached (every %d)", what, CHECK_EVERY);
    else
        snprintf (r->note, sizeof r->note, "%s %.1e", what, r->check);
}

/* A slow row's warm-up is cut at a quarter of its time (--seconds); the timed part's START is reset
 * when it begins (at I == *WARM). */
static void s_warm_cut (const options_t *o, uint32_t i, uint32_t *warm, double *start)
{
    if (i < *warm && o->seconds > 0 && clock_now_us () - *start > o->seconds * 0.25e6)
        *warm = i;
    if (i == *warm)
        *start = clock_now_us ();
}

/* Step I (WHAT, for the messages) of stream SLOT on X into Y (OUT outputs), a sample of R when TIMED,
 * every output checked finite. 0; -1 an output not finite; -2 the step failed. */
static int s_timed_step (const backend_iface_t *B, backend_model_t *m, uint32_t slot, const float *x, float *y,
                         uint32_t out, uint32_t i, bool timed, const char *what, row_t *r)
{
    char err[512];
    const uint64_t t0 = clock_now_ns ();
    const sig_status_t st = B->stream_step (m, slot, x, y, err, sizeof err);
    const uint64_t t1 = clock_now_ns ();
    if (st != SIG_OK) {
        fprintf (stderr, "lstmbench: %s: %s\n", what, err);
        return -2;
    }
    if (timed)
        r->samples[r->n++] = (double) (t1 - t0) / 1e3;
    int rc = 0;
    for (uint32_t k = 0; k < out; k++)
        if (!isfinite (y[k])) {
            fprintf (stderr, "lstmbench: %s %u: output %u is %g\n", what, i, k, y[k]);
            rc = -1;
        }
    return rc;
}

/* The streaming critical path of one stream on slot 0. */
int lb_bench_step (const options_t *o, const backend_iface_t *B, backend_model_t *m, const lstm_weights_t *w,
                   bool cuda, uint64_t *seed, row_t *r)
{
    const uint32_t in = w->step_size, W = w->window, out = w->head.out;
    float *hist = calloc ((size_t) W * in, sizeof (float)), *win = malloc ((size_t) W * in * sizeof (float));
    float *y = malloc (out * sizeof (float)), *yw = malloc (out * sizeof (float));
    uint64_t count = 0;
    int rc = 0;
    B->stream_reset (m, 0);
    r->check = NAN;
    double start = clock_now_us ();
    uint32_t warm = o->warmup;
    for (uint32_t i = 0; i < warm + o->iterations && rc == 0; i++) {
        s_warm_cut (o, i, &warm, &start);
        float *x = hist + (size_t) (count % W) * in;
        lb_fill (seed, x, in);
        const int st = s_timed_step (B, m, 0, x, y, out, i, i >= warm, "step", r);
        count++;
        if (st != 0)
            rc = -1;
        if (st == -2)
            break;
        B->stream_advance (m, 0);
#ifdef SIGSERVE_HAVE_CUDA
        char err[512];
        if (cuda && lstm_cuda_sync (m, err, sizeof err) != SIG_OK) {   /* the precomputation: not timed */
            fprintf (stderr, "lstmbench: advance: %s\n", err);
            rc = -1;
        }
#else
        (void) cuda;
#endif
        if (i % CHECK_EVERY == CHECK_EVERY - 1 && s_check_window (B, m, hist, count, W, in, out, y, win, yw, &r->check) != 0)
            rc = -1;   /* the same window in full, zeros before the first step */
        if (i >= warm && s_out_of_time (o, start, i - warm))
            break;
    }
    s_check_note (r, "stream vs its full window");
    free (hist);
    free (win);
    free (y);
    free (yw);
    return rc;
}

/* --rr: STREAMS streams (slots 0..STREAMS-1) in turn, each step followed by its advance, which is
 * posted and not waited for: a step may wait behind the previous streams' advances (in the serving
 * kernel) or not (apart). A round (every stream once) starts GAP_US after the last one's start (0: at
 * once). Every output finite; every CHECK_EVERY-th against its stream's full window. */
int lb_bench_rr (const options_t *o, const backend_iface_t *B, backend_model_t *m, const lstm_weights_t *w,
                 uint32_t streams, double gap_us, uint64_t *seed, row_t *r)
{
    const uint32_t in = w->step_size, W = w->window, out = w->head.out;
    float *hist = calloc ((size_t) streams * W * in, sizeof (float)), *win = malloc ((size_t) W * in * sizeof (float));
    float *y = malloc (out * sizeof (float)), *yw = malloc (out * sizeof (float));
    uint64_t *count = calloc (streams, sizeof (uint64_t));
    int rc = 0;
    for (uint32_t s = 0; s < streams; s++)
        B->stream_reset (m, s);
    r->check = NAN;
    double start = clock_now_us ();
    uint32_t warm = o->warmup;
    uint64_t next = 0;   /* when the next step may start (the gap) */
    for (uint32_t i = 0; i < warm + o->iterations && rc == 0; i++) {
        s_warm_cut (o, i, &warm, &start);
        const uint32_t s = i % streams;
        float *mine = hist + (size_t) s * W * in, *x = mine + (size_t) (count[s] % W) * in;
        lb_fill (seed, x, in);
        if (s == 0) {   /* a round: its steps back to back */
            if (i == 0 || gap_us <= 0)
                next = clock_now_ns ();
            while (clock_now_ns () < next) {
            }
            next += (uint64_t) (gap_us * 1e3);
        }
        const int st = s_timed_step (B, m, s, x, y, out, i, i >= warm, "round-robin step", r);
        count[s]++;
        if (st != 0)
            rc = -1;
        if (st == -2)
            break;
        B->stream_advance (m, s);
        if (i % CHECK_EVERY == CHECK_EVERY - 1 && s_check_window (B, m, mine, count[s], W, in, out, y, win, yw, &r->check) != 0)
            rc = -1;   /* its stream's window in full (the advance not waited for) */
        if (i >= warm && s_out_of_time (o, start, i - warm))
            break;
    }
    s_check_note (r, "streams vs their full windows");
    free (hist);
    free (win);
    free (y);
    free (yw);
    free (count);
    return rc;
}

int lb_bench_window (const options_t *o, const backend_iface_t *B, backend_model_t *m, const lstm_weights_t *w,
                     uint64_t *seed, row_t *r)
{
    const size_t nin = (size_t) w->window * w->step_size;
    float *x = malloc (nin * sizeof (float)), *y = malloc (w->head.out * sizeof (float));
    double *ref = malloc (w->head.out * sizeof (double));
    char err[512];
    int rc = 0;
    double start = clock_now_us ();
    uint32_t warm = o->warmup / 10;
    for (uint32_t i = 0; i < warm + o->iterations && rc == 0; i++) {
        if (i < warm && o->seconds > 0 && clock_now_us () - start > o->seconds * 0.25e6)
            warm = i;
        if (i == warm)
            start = clock_now_us ();
        lb_fill (seed, x, nin);
        const uint64_t t0 = clock_now_ns ();
        sig_status_t st = B->infer (m, x, 1, y, err, sizeof err);
        const uint64_t t1 = clock_now_ns ();
        if (st != SIG_OK) {
            fprintf (stderr, "lstmbench: window: %s\n", err);
            rc = -1;
        }
        if (i >= warm)
            r->samples[r->n++] = (double) (t1 - t0) / 1e3;
        if (i == warm) {   /* one against float64 */
            lstm_reference_window (w, x, 1, ref);
            double num = 0, den = 0;
            for (uint32_t k = 0; k < w->head.out; k++) {
                num += ((double) y[k] - ref[k]) * ((double) y[k] - ref[k]);
                den += ref[k] * ref[k];
            }
            r->check = sqrt (num) / fmax (sqrt (den), 1e-6);
            snprintf (r->note, sizeof r->note, "vs float64 %.1e", r->check);
        }
        if (i >= warm && s_out_of_time (o, start, i - warm))
            break;
    }
    free (x);
    free (y);
    free (ref);
    return rc;
}
