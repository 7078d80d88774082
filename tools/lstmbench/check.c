/* lstmbench --check: the outputs of an nn.LSTM + Linear export on stdin's inputs, for a test to
 * compare (tests/python/test_lstm_torch.py). */
#define _GNU_SOURCE
#include "lstmbench.h"

#include "lstm_reference.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lb_check (const options_t *o)
{
    model_config_t cfg;
    const lstm_shape_t shape = { .window = o->window, .head_act = o->head_act };
    lstm_config (&cfg, "check", o->check, &shape);
    const backend_iface_t *B = lb_iface (o->backend);
    const int d = lb_dtype (o->dtype);
    if (!B || d < 0) {
        fprintf (stderr, "lstmbench: backend \"%s\" or weight type \"%s\" not available in this build\n", o->backend,
                 o->dtype);
        return 2;
    }
    cfg.backend = strcmp (o->backend, "cuda") == 0 ? BACKEND_CUDA : BACKEND_CPU;
    cfg.weight_dtype = (weight_dtype_t) d;
#ifdef SIGSERVE_HAVE_CUDA
    if (cfg.backend == BACKEND_CUDA) {   /* --math wide or half: that kind of products, else the default */
        const sig_lstm_tuning_t t = { .math = lb_math (o->math) };
        lstm_cuda_tuning (&t);
    }
#endif
    char err[512];
    weights_t *w = weights_load (&cfg, err, sizeof err);
    if (!w) {
        fprintf (stderr, "lstmbench: %s\n", err);
        return 1;
    }
    backend_model_t *m = B->load (w, &cfg, 0, err, sizeof err);
    if (!m) {
        fprintf (stderr, "lstmbench: %s\n", err);
        weights_destroy (&w);
        return 1;
    }
    const lstm_weights_t *l = w->lstm;
    const size_t nwin = (size_t) l->window * l->step_size;
    size_t cap = nwin + 1024, n = 0;
    float *v = malloc (cap * sizeof (float));
    double d_in;
    while (v && scanf ("%lf", &d_in) == 1) {
        if (n == cap)
            v = realloc (v, (cap *= 2) * sizeof (float));
        if (v)
            v[n++] = (float) d_in;
    }
    int rc = v && n >= nwin && (n - nwin) % l->step_size == 0 ? 0 : 1;
    if (rc)
        fprintf (stderr, "lstmbench: expected %zu floats (a window) and then whole steps of %u, got %zu\n", nwin,
                 l->step_size, n);
    float *y = malloc (l->head.out * sizeof (float));
    if (rc == 0 && B->infer (m, v, 1, y, err, sizeof err) != SIG_OK) {
        fprintf (stderr, "lstmbench: %s\n", err);
        rc = 1;
    }
    if (rc == 0) {
        printf ("window");
        for (uint32_t k = 0; k < l->head.out; k++)
            printf (" %.9g", y[k]);
        printf ("\n");
        B->stream_reset (m, 0);
    }
    for (size_t s = 0; rc == 0 && nwin + (s + 1) * l->step_size <= n; s++) {
        if (B->stream_step (m, 0, v + nwin + s * l->step_size, y, err, sizeof err) != SIG_OK) {
            fprintf (stderr, "lstmbench: %s\n", err);
            rc = 1;
            break;
        }
        B->stream_advance (m, 0);
        printf ("step %zu", s);
        for (uint32_t k = 0; k < l->head.out; k++)
            printf (" %.9g", y[k]);
        printf ("\n");
    }
    free (v);
    free (y);
    B->destroy (&m);
    weights_destroy (&w);
    return rc;
}
