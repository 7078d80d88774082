/* The float64 references (reference.h): written from the equations, in double precision, slow and
 * plain on purpose. */
#include "weights/reference.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double s_sig (double x) { return 1.0 / (1.0 + exp (-x)); }

void reference_error_sums (const float *y, const double *ref, size_t n, double *num, double *den)
{
    for (size_t k = 0; k < n; k++) {
        const double d = (double) y[k] - ref[k];
        *num += isfinite (d) ? d * d : INFINITY;
        *den += ref[k] * ref[k];
    }
}

double reference_activate (activation_t a, double x)
{
    switch (a) {
    case ACTIVATION_RELU: return x > 0 ? x : 0;
    case ACTIVATION_SIGMOID: return s_sig (x);
    case ACTIVATION_TANH: return tanh (x);
    default: return x;
    }
}

/* ---- MLP ---- */

/* DST[o] = act(bias[o] + sum_i W[o][i] * SRC[i]), all in float64 */
static void s_dense (const dense_layer_t *layer, const double *src, double *dst)
{
    for (uint32_t o = 0; o < layer->out; o++) {
        const float *row = layer->weight + (size_t) o * layer->in;
        double acc = layer->bias[o];
        for (uint32_t i = 0; i < layer->in; i++)
            acc += (double) row[i] * src[i];
        dst[o] = reference_activate (layer->activation, acc);
    }
}

int reference_forward (const weights_t *w, const float *in, uint32_t rows, double *out)
{
    assert (w && w->layer_count >= 1);
    assert ((in && out) || rows == 0);
    double *a = malloc (2 * (size_t) w->widest * sizeof *a);
    if (!a)
        return -1;
    double *b = a + w->widest;
    for (uint32_t r = 0; r < rows; r++) {
        const float *x = in + (size_t) r * w->input_size;
        for (uint32_t i = 0; i < w->input_size; i++)
            a[i] = x[i];
        double *src = a, *dst = b;
        for (size_t l = 0; l < w->layer_count; l++) {
            s_dense (&w->layers[l], src, dst);
            double *t = src;
            src = dst;
            dst = t;
        }
        memcpy (out + (size_t) r * w->output_size, src, w->output_size * sizeof *out);
    }
    free (a);
    return 0;
}

/* ---- LSTM ---- */

/* W . X in float64, four partial sums (a chain of dependent additions would be four times slower;
 * the large model's reference runs two billion of these) */
static double s_dot (const float *w, const double *x, uint32_t n)
{
    double a[4] = { 0, 0, 0, 0 };
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            a[k] += (double) w[i + k] * x[i + k];
    for (; i < n; i++)
        a[0] += (double) w[i] * x[i];
    return (a[0] + a[1]) + (a[2] + a[3]);
}

/* One step of layer L: (h, c) <- cell (x, h, c). GATES: 4H scratch. */
static void s_cell (const lstm_layer_t *L, const double *x, double *h, double *c, double *gates)
{
    const uint32_t H = L->hidden;
    for (uint32_t r = 0; r < 4 * H; r++) {
        const float *wi = L->w_ih + (size_t) r * L->in, *wh = L->w_hh + (size_t) r * H;
        gates[r] = L->bias[r] + s_dot (wi, x, L->in) + s_dot (wh, h, H);
    }
    for (uint32_t j = 0; j < H; j++) {
        const double i = s_sig (gates[j]), f = s_sig (gates[H + j]);
        const double g = tanh (gates[2 * H + j]), o = s_sig (gates[3 * H + j]);
        c[j] = f * c[j] + i * g;
        h[j] = o * tanh (c[j]);
    }
}

/* The head over the last layer's h after STEPS steps (NULL: a zero step) from a zero state. */
static int s_run (const lstm_weights_t *w, const float *const *steps, uint32_t count, double *out)
{
    const uint32_t H = w->hidden, L = (uint32_t) w->layer_count, in = w->step_size;
    double *h = calloc ((size_t) L * H, sizeof *h), *c = calloc ((size_t) L * H, sizeof *c);
    double *gates = malloc (4 * (size_t) H * sizeof *gates), *x = malloc ((in > H ? in : H) * sizeof *x);
    int rc = h && c && gates && x ? 0 : -1;
    for (uint32_t t = 0; rc == 0 && t < count; t++) {
        for (uint32_t i = 0; i < in; i++)
            x[i] = steps[t] ? steps[t][i] : 0.0;
        for (uint32_t k = 0; k < L; k++) {
            s_cell (&w->layers[k], k == 0 ? x : h + (size_t) (k - 1) * H, h + (size_t) k * H, c + (size_t) k * H,
                    gates);
        }
    }
    const dense_layer_t *hd = &w->head;
    const double *last = h + (size_t) (L - 1) * H;
    for (uint32_t o = 0; rc == 0 && o < hd->out; o++) {
        double acc = hd->bias[o];
        for (uint32_t i = 0; i < H; i++)
            acc += (double) hd->weight[(size_t) o * H + i] * last[i];
        out[o] = reference_activate (hd->activation, acc);
    }
    free (h);
    free (c);
    free (gates);
    free (x);
    return rc;
}

int lstm_reference_window (const lstm_weights_t *w, const float *in, uint32_t rows, double *out)
{
    assert (w && w->layer_count >= 1);
    const float **steps = malloc (w->window * sizeof *steps);
    if (!steps)
        return -1;
    int rc = 0;
    for (uint32_t r = 0; rc == 0 && r < rows; r++) {
        for (uint32_t t = 0; t < w->window; t++)
            steps[t] = in + ((size_t) r * w->window + t) * w->step_size;
        rc = s_run (w, steps, w->window, out + (size_t) r * w->head.out);
    }
    free (steps);
    return rc;
}

int lstm_reference_stream (const lstm_weights_t *w, const float *steps, uint64_t count, double *out)
{
    assert (w && w->layer_count >= 1);
    const float **window = malloc (w->window * sizeof *window);
    if (!window)
        return -1;
    /* the last W steps, zeros (NULL) before the first */
    for (uint32_t t = 0; t < w->window; t++) {
        const int64_t i = (int64_t) count - (int64_t) w->window + t;
        window[t] = i >= 0 ? steps + (size_t) i * w->step_size : NULL;
    }
    int rc = s_run (w, window, w->window, out);
    free (window);
    return rc;
}
