/* The GRU's float64 reference (gru.h): the equations in double precision, plain and slow on purpose. */
#include "weights/gru.h"

#include "weights/reference.h"

#include <math.h>
#include <stdlib.h>

static double s_sig (double x) { return 1.0 / (1.0 + exp (-x)); }

/* W . X in float64 */
static double s_dot (const float *w, const double *x, uint32_t n)
{
    double a = 0;
    for (uint32_t i = 0; i < n; i++)
        a += (double) w[i] * x[i];
    return a;
}

/* One step of layer L: h <- cell (x, h). GI, GH: 3H scratch each. */
static void s_cell (const rnn_layer_t *L, const double *x, double *h, double *gi, double *gh)
{
    const uint32_t H = L->hidden;
    for (uint32_t q = 0; q < 3 * H; q++) {
        gi[q] = L->bias_ih[q] + s_dot (L->w_ih + (size_t) q * L->in, x, L->in);
        gh[q] = L->bias_hh[q] + s_dot (L->w_hh + (size_t) q * H, h, H);
    }
    for (uint32_t j = 0; j < H; j++) {
        const double r = s_sig (gi[j] + gh[j]), z = s_sig (gi[H + j] + gh[H + j]);
        const double n = tanh (gi[2 * H + j] + r * gh[2 * H + j]);
        h[j] = (1 - z) * n + z * h[j];
    }
}

/* The head over the last layer's h after COUNT steps (STEPS[t] NULL: a zero step) from a zero state. */
static int s_run (const rnn_weights_t *w, const float *const *steps, uint32_t count, double *out)
{
    const uint32_t H = w->hidden, L = (uint32_t) w->layer_count, in = w->step_size;
    double *h = calloc ((size_t) L * H, sizeof *h), *gi = malloc (6 * (size_t) H * sizeof *gi);
    double *x = malloc ((in > H ? in : H) * sizeof *x);
    int rc = h && gi && x ? 0 : -1;
    for (uint32_t t = 0; rc == 0 && t < count; t++) {
        for (uint32_t i = 0; i < in; i++)
            x[i] = steps[t] ? steps[t][i] : 0.0;
        for (uint32_t k = 0; k < L; k++)
            s_cell (&w->layers[k], k == 0 ? x : h + (size_t) (k - 1) * H, h + (size_t) k * H, gi, gi + 3 * H);
    }
    const dense_layer_t *hd = &w->head;
    const double *last = h + (size_t) (L - 1) * H;
    for (uint32_t o = 0; rc == 0 && o < hd->out; o++)
        out[o] = reference_activate (hd->activation, hd->bias[o] + s_dot (hd->weight + (size_t) o * H, last, H));
    free (h);
    free (gi);
    free (x);
    return rc;
}

static const rnn_weights_t *s_gru (const weights_t *w)
{
    return w && w->type == MODEL_TYPE_GRU && w->rnn && w->rnn->gates == 3 && w->rnn->layer_count ? w->rnn : NULL;
}

int gru_reference_window (const weights_t *w, const float *in, uint32_t rows, double *out)
{
    const rnn_weights_t *g = s_gru (w);
    const float **steps = g ? malloc (g->window * sizeof *steps) : NULL;
    if (!steps)
        return -1;
    int rc = 0;
    for (uint32_t r = 0; rc == 0 && r < rows; r++) {
        for (uint32_t t = 0; t < g->window; t++)
            steps[t] = in + ((size_t) r * g->window + t) * g->step_size;
        rc = s_run (g, steps, g->window, out + (size_t) r * g->head.out);
    }
    free (steps);
    return rc;
}

int gru_reference_stream (const weights_t *w, const float *steps, uint64_t count, double *out)
{
    const rnn_weights_t *g = s_gru (w);
    const float **window = g ? malloc (g->window * sizeof *window) : NULL;
    if (!window)
        return -1;
    /* the last W steps, zeros (NULL) before the first */
    for (uint32_t t = 0; t < g->window; t++) {
        const int64_t i = (int64_t) count - (int64_t) g->window + t;
        window[t] = i >= 0 ? steps + (size_t) i * g->step_size : NULL;
    }
    int rc = s_run (g, window, g->window, out);
    free (window);
    return rc;
}
