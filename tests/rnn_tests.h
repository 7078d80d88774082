/* What the CPU recurrent suites share (test_lstm.c, test_gru.c): a suite's seed and temporary
 * folder, random inputs, and the checks of a loaded model against its type's bounds, each output
 * poisoned with NaN before it is written:
 *   - full windows, ROWS at a time: every output within its bound of the float64 reference;
 *   - interleaved streams of more steps than the window (so rings wrap), the first reset halfway:
 *     each step's output within its bound of the reference over that stream's history, and within
 *     twice it of a full window of the last W steps with zeros before the first (itself within the
 *     bound);
 *   - the hand-computed case: a window and a stream against the values worked out by hand.
 * A suite says what it checks with in an rnn_suite_t. Each suite includes this once: everything
 * here is static. */
#ifndef SIGSERVE_RNN_TESTS_H
#define SIGSERVE_RNN_TESTS_H

#include "backends/backend.h"
#include "lstm_reference.h"
#include "rng.h"
#include "testutil.h"
#include "tolerance.h"
#include "weights/weights.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t s_seed;
static char *s_dir;

/* NAME in the suite's folder (the caller frees it). */
static char *s_path (const char *name)
{
    char *p = malloc (strlen (s_dir) + strlen (name) + 2);
    sprintf (p, "%s/%s", s_dir, name);
    return p;
}

static void s_fill (float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform (&s_seed, -1.0f, 1.0f);
}

/* Runs S on a fresh seed (printed first) with a temporary folder, removed after. */
static int s_run (Suite *s)
{
    s_seed = (uint64_t) time (NULL) ^ ((uint64_t) clock () << 32);
    printf ("seed %llu\n", (unsigned long long) s_seed);
    s_dir = tu_tmpdir ();
    const int rc = tu_run_suite (s);
    tu_remove_tree (s_dir);
    free (s_dir);
    return rc;
}

/* What a suite checks with. */
typedef struct {
    const backend_iface_t *B;
    /* Random weights of SHAPE loaded as the server loads them, with MAX_ROWS and SLOTS stream slots:
     * the backend model (and W, CFG). */
    backend_model_t *(*load) (const lstm_shape_t *shape, uint32_t max_rows, uint32_t slots, weights_t **w,
                              model_config_t *cfg);
    /* The reference and bound of ROWS windows IN, and of a stream after COUNT steps: 0. */
    int (*window_bound) (const rnn_weights_t *w, const float *in, uint32_t rows, double *ref, double *bound);
    int (*stream_bound) (const rnn_weights_t *w, const float *steps, uint64_t count, double *ref, double *bound);
    /* Optional: the server's float64 reference of ROWS windows, which the bounds' must equal bit for bit. */
    int (*reference) (const weights_t *w, const float *in, uint32_t rows, double *out);
    /* The messages' first word: the weights' dtype. */
    const char *(*label) (void);
    /* Streams: a step I with I % OWE_EVERY == 1 leaves its advance to the next step (0: every step
     * advances). */
    uint32_t owe_every;
} rnn_suite_t;

/* Full windows, ROWS at a time, ROUNDS rounds: every output within its bound. WHAT names the case. */
static void s_check_windows (const rnn_suite_t *S, backend_model_t *m, const weights_t *w, uint32_t rows, int rounds,
                             const char *what)
{
    const rnn_weights_t *g = w->rnn;
    const size_t nin = (size_t) rows * g->window * g->step_size, nout = (size_t) rows * g->head.out;
    float *x = malloc (nin * sizeof (float)), *y = malloc (nout * sizeof (float));
    double *ref = malloc (nout * sizeof (double)), *bound = malloc (nout * sizeof (double));
    double *plain = malloc (nout * sizeof (double));
    char err[256];
    for (int r = 0; r < rounds; r++) {
        s_fill (x, nin);
        for (size_t i = 0; i < nout; i++)
            y[i] = NAN;
        ck_assert_int_eq (S->B->infer (m, x, rows, y, err, sizeof err), SIG_OK);
        for (size_t i = 0; i < nout; i++)
            ck_assert_msg (isfinite (y[i]), "%s %s: output %zu not written", S->label (), what, i);
        ck_assert_int_eq (S->window_bound (g, x, rows, ref, bound), 0);
        if (S->reference) {   /* the bounds' reference is the server's, bit for bit */
            ck_assert_int_eq (S->reference (w, x, rows, plain), 0);
            for (size_t i = 0; i < nout; i++)
                ck_assert_msg (plain[i] == ref[i], "%s: output %zu: reference %.17g, the bound's %.17g", what, i,
                               plain[i], ref[i]);
        }
        TOL_ASSERT (y, ref, bound, nout, g->head.out, "%s %s rows %u round %d", S->label (), what, rows, r);
    }
    free (x);
    free (y);
    free (ref);
    free (bound);
    free (plain);
}

/* Each of the N SHAPES loaded (3 rows, 2 stream slots) once per row count from 1 to 3, by ROWS_STEP:
 * ROUNDS rounds of s_check_windows, the case named "shape I". */
static void s_check_shapes (const rnn_suite_t *S, const lstm_shape_t *shapes, size_t n, uint32_t rows_step, int rounds)
{
    for (size_t s = 0; s < n; s++)
        for (uint32_t rows = 1; rows <= 3; rows += rows_step) {
            weights_t *w;
            model_config_t cfg;
            backend_model_t *m = S->load (&shapes[s], 3, 2, &w, &cfg);
            char what[32];
            snprintf (what, sizeof what, "shape %zu", s);
            s_check_windows (S, m, w, rows, rounds, what);
            S->B->destroy (&m);
            weights_destroy (&w);
        }
}

/* STREAMS interleaved streams of STEPS steps each on slots 1.. (slot 0 unused: ids need not be
 * dense), each step's output checked on every CHECK_EVERY-th step and the last two. */
static void s_check_streams (const rnn_suite_t *S, const lstm_shape_t *shape, uint32_t streams, uint32_t steps,
                             uint32_t check_every)
{
    weights_t *w;
    model_config_t cfg;
    backend_model_t *m = S->load (shape, 1, streams + 1, &w, &cfg);
    const rnn_weights_t *g = w->rnn;
    const uint32_t in = g->step_size, W = g->window, out = g->head.out;
    float *hist = calloc ((size_t) streams * steps * in, sizeof (float));
    uint32_t *count = calloc (streams, sizeof (uint32_t));
    float *y = malloc (out * sizeof (float)), *yw = malloc (out * sizeof (float));
    float *win = malloc ((size_t) W * in * sizeof (float));
    double *ref = malloc (out * sizeof (double)), *bound = malloc (out * sizeof (double));
    double *as_ref = malloc (out * sizeof (double)), *bound2 = malloc (out * sizeof (double));
    char err[256];
    for (uint32_t s = 0; s < streams; s++)
        S->B->stream_reset (m, s + 1);
    for (uint32_t i = 0; i < steps; i++)
        for (uint32_t s = 0; s < streams; s++) {
            if (s == 0 && i == steps / 2) {   /* a stream reset: it starts over from zeros */
                S->B->stream_reset (m, 1);
                count[0] = 0;
            }
            float *x = hist + ((size_t) s * steps + count[s]) * in;
            s_fill (x, in);
            count[s]++;
            for (uint32_t o = 0; o < out; o++)
                y[o] = NAN;
            ck_assert_int_eq (S->B->stream_step (m, s + 1, x, y, err, sizeof err), SIG_OK);
            if (!S->owe_every || i % S->owe_every != 1)   /* else the next step runs the owed advance itself */
                S->B->stream_advance (m, s + 1);
            if (i % check_every != 0 && i + 2 < steps)
                continue;
            for (uint32_t o = 0; o < out; o++)
                ck_assert_msg (isfinite (y[o]), "stream %u step %u output %u not written", s, i, o);
            const float *mine = hist + (size_t) s * steps * in;
            ck_assert_int_eq (S->stream_bound (g, mine, count[s], ref, bound), 0);
            TOL_ASSERT (y, ref, bound, out, out, "%s: %u streams x %u steps (window %u, %zu layers, %u units): stream %u "
                        "step %u", S->label (), streams, steps, W, g->layer_count, g->hidden, s, i);
            /* the same window as a full-window request */
            for (uint32_t t = 0; t < W; t++) {
                const int64_t k = (int64_t) count[s] - W + t;
                if (k >= 0)
                    memcpy (win + (size_t) t * in, hist + ((size_t) s * steps + k) * in, in * sizeof (float));
                else
                    memset (win + (size_t) t * in, 0, in * sizeof (float));
            }
            ck_assert_int_eq (S->B->infer (m, win, 1, yw, err, sizeof err), SIG_OK);
            TOL_ASSERT (yw, ref, bound, out, out, "stream %u step %u: the full window", s, i);
            tol_pair (y, bound, out, as_ref, bound2);
            TOL_ASSERT (yw, as_ref, bound2, out, out, "stream %u step %u: the full window against the streamed output",
                        s, i);
        }
    free (hist);
    free (count);
    free (y);
    free (yw);
    free (win);
    free (ref);
    free (bound);
    free (as_ref);
    free (bound2);
    S->B->destroy (&m);
    weights_destroy (&w);
}


/* The hand-computed case (1 input, 1 unit, 1 output, window 2) loaded as M: the window [1, -2], then
 * a stream 1, -2, 3 on slot 1 (windows [0, 1], [1, -2], [-2, 3]), each output's reference the hand's
 * (WANT_WINDOW, WANT_STEPS; computed with the decimal weights: the file holds them rounded to f32,
 * 0.1f and the like, ~1e-9 here) and the backend within its bound of it. Destroys M, twice. */
static void s_check_hand (const rnn_suite_t *S, backend_model_t *m, const weights_t *w, double want_window,
                          const double want_steps[3])
{
    const float window[2] = { 1.0f, -2.0f };
    float y = NAN;
    double ref, bound;
    char err[256];
    ck_assert_int_eq (S->B->infer (m, window, 1, &y, err, sizeof err), SIG_OK);
    ck_assert_int_eq (S->window_bound (w->rnn, window, 1, &ref, &bound), 0);
    ck_assert_msg (fabs (ref - want_window) < 1e-8, "reference, window [1, -2]: %.17g", ref);
    TOL_ASSERT (&y, &ref, &bound, 1, 1, "window [1, -2]");
    const float steps[3] = { 1.0f, -2.0f, 3.0f };
    S->B->stream_reset (m, 1);
    for (int i = 0; i < 3; i++) {
        y = NAN;
        ck_assert_int_eq (S->B->stream_step (m, 1, &steps[i], &y, err, sizeof err), SIG_OK);
        ck_assert_int_eq (S->stream_bound (w->rnn, steps, (uint64_t) i + 1, &ref, &bound), 0);
        ck_assert_msg (fabs (ref - want_steps[i]) < 1e-8, "reference, step %d: %.17g, expected %.17g", i, ref,
                       want_steps[i]);
        TOL_ASSERT (&y, &ref, &bound, 1, 1, "step %d", i);
        S->B->stream_advance (m, 1);
    }
    S->B->destroy (&m);
    S->B->destroy (&m);
    ck_assert_ptr_null (m);
}

#endif
