/* A model's weights (weights.h): the dense chain read here, recurrent layers by rnn.c, every tensor
 * through tensors.c. (Random weights and the float64 reference are test and tool support:
 * support/reference.c.) */
#include "weights/weights.h"

#include "base/status.h"
#include "weights/rnn.h"
#include "weights/safetensors.h"
#include "weights/tensors.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

weights_t *weights_alloc (size_t layer_count)
{
    weights_t *self = calloc (1, sizeof *self);
    if (self && !(self->layers = calloc (layer_count, sizeof *self->layers)))
        weights_destroy (&self);
    if (self)
        self->layer_count = layer_count;
    return self;
}

/* Sizes of the whole chain, once every layer is in place. */
void weights_finish (weights_t *self)
{
    self->input_size = self->layers[0].in;
    self->output_size = self->layers[self->layer_count - 1].out;
    self->widest = 0;
    for (size_t i = 0; i < self->layer_count; i++) {
        uint32_t wider = self->layers[i].in > self->layers[i].out ? self->layers[i].in : self->layers[i].out;
        if (wider > self->widest)
            self->widest = wider;
    }
}

static int s_load_layer (weights_t *self, size_t i, const model_config_t *cfg,
                         const safetensors_t *st, char *err, size_t errlen)
{
    char where[32];
    snprintf (where, sizeof where, "layers[%zu]", i);
    return tensor_read_dense (st, cfg, where, &cfg->layers[i], i > 0 ? self->layers[i - 1].out : 0,
                               "the previous layer's output size", &self->layers[i], err, errlen);
}

weights_t *weights_load (const model_config_t *cfg, char *err, size_t errlen)
{
    assert (cfg);
    const model_type_info_t *type = model_type_info (cfg->type);
    if (!type) {
        sig_set_error (err, errlen, "model \"%s\": no model type %d", cfg->name, (int) cfg->type);
        return NULL;
    }
    if (type->gates) {
        weights_t *self = calloc (1, sizeof *self);
        if (!self) {
            sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
            return NULL;
        }
        self->type = cfg->type;
        if (!(self->rnn = rnn_weights_load (cfg, err, errlen))) {
            free (self);
            return NULL;
        }
        const rnn_weights_t *l = self->rnn;
        self->lstm = cfg->type == MODEL_TYPE_LSTM ? self->rnn : NULL;
        self->window = l->window;
        self->step_size = l->step_size;
        self->input_size = l->window * l->step_size;
        self->output_size = l->head.out;
        self->widest = l->step_size > l->hidden ? l->step_size : l->hidden;
        if (l->head.out > self->widest)
            self->widest = l->head.out;
        return self;
    }
    if (cfg->layer_count < 1 || cfg->layer_count > CONFIG_MAX_LAYERS) {
        sig_set_error (err, errlen, "model \"%s\": %zu layers, expected 1 to %d", cfg->name,
                cfg->layer_count, CONFIG_MAX_LAYERS);
        return NULL;
    }
    char why[512];
    safetensors_t *st = safetensors_open (cfg->weights, why, sizeof why);
    if (!st) {
        sig_set_error (err, errlen, "model \"%s\": %s", cfg->name, why);
        return NULL;
    }
    weights_t *self = weights_alloc (cfg->layer_count);
    int rc = self ? 0 : -1;
    if (!self)
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
    for (size_t i = 0; i < cfg->layer_count && rc == 0; i++)
        rc = s_load_layer (self, i, cfg, st, err, errlen);
    safetensors_destroy (&st);      /* everything was copied out of the mapping */
    if (rc != 0)
        weights_destroy (&self);
    else
        weights_finish (self);
    return self;
}

void weights_destroy (weights_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    weights_t *self = *self_p;
    rnn_weights_destroy (&self->rnn);
    for (size_t i = 0; self->layers && i < self->layer_count; i++) {
        free (self->layers[i].weight);
        free (self->layers[i].bias);
    }
    free (self->layers);
    free (self);
    *self_p = NULL;
}
