/* Test and tool support, outside the request path: random weights of any chain shape and the
 * float64 reference forward pass that every backend is compared against. */
#include "reference.h"

#include "rng.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>

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
