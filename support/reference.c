/* Test and tool support, outside the request path: random weights of any chain shape and the
 * float64 reference forward pass that every backend is compared against. */
#include "reference.h"

#include "rng.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Random weights */

weights_t *weights_random (const uint32_t *sizes, const activation_t *acts, size_t layer_count, uint64_t seed)
{
    assert (sizes && acts);
    if (layer_count < 1)
        return NULL;
    for (size_t i = 0; i <= layer_count; i++)
        if (sizes[i] < 1)
            return NULL;
    weights_t *self = weights_alloc (layer_count);
    uint64_t state = seed;
    for (size_t i = 0; self && i < layer_count; i++) {
        dense_layer_t *layer = &self->layers[i];
        layer->in = sizes[i];
        layer->out = sizes[i + 1];
        layer->activation = acts[i];
        size_t n = (size_t) layer->in * layer->out;
        layer->weight = malloc (n * sizeof *layer->weight);
        layer->bias = malloc (layer->out * sizeof *layer->bias);
        if (!layer->weight || !layer->bias) {
            weights_destroy (&self);
            break;
        }
        /* nn.Linear's default init: weight and bias uniform in +-1/sqrt(fan_in) */
        float bound = (float) (1.0 / sqrt ((double) layer->in));
        for (size_t k = 0; k < n; k++)
            layer->weight[k] = rng_uniform (&state, -bound, bound);
        for (uint32_t k = 0; k < layer->out; k++)
            layer->bias[k] = rng_uniform (&state, -bound, bound);
    }
    if (self)
        weights_finish (self);
    return self;
}

/* ---------------------------------------------------------------------------------------------
 * Reference forward */

static double s_activate (activation_t a, double x)
{
    switch (a) {
    case ACTIVATION_RELU:    return x > 0 ? x : 0;
    case ACTIVATION_SIGMOID: return 1.0 / (1.0 + exp (-x));
    case ACTIVATION_TANH:    return tanh (x);
    default:                 return x;
    }
}

/* DST[o] = act(bias[o] + sum_i W[o][i] * SRC[i]), all in float64 */
static void s_dense (const dense_layer_t *layer, const double *src, double *dst)
{
    for (uint32_t o = 0; o < layer->out; o++) {
        const float *row = layer->weight + (size_t) o * layer->in;
        double acc = layer->bias[o];
        for (uint32_t i = 0; i < layer->in; i++)
            acc += (double) row[i] * src[i];
        dst[o] = s_activate (layer->activation, acc);
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
