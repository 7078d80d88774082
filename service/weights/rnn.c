/* Loading a recurrent model's weights (rnn.h): the layers counted from the tensors present, every
 * shape checked against the chain and the type's gate count, the two biases kept and summed, the
 * head read like a dense layer. */
#include "weights/rnn.h"

#include "base/status.h"
#include "weights/tensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RNN_MAX_LAYERS 16

void rnn_weights_destroy (rnn_weights_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rnn_weights_t *self = *self_p;
    for (size_t i = 0; self->layers && i < self->layer_count; i++) {
        free (self->layers[i].w_ih);
        free (self->layers[i].w_hh);
        free (self->layers[i].bias);
        free (self->layers[i].bias_ih);
        free (self->layers[i].bias_hh);
    }
    free (self->layers);
    free (self->head.weight);
    free (self->head.bias);
    free (self);
    *self_p = NULL;
}

/* TENSOR must be ROWS x COLS (COLS 0: a vector of ROWS). */
static int s_shape (const model_config_t *cfg, const st_tensor_t *t, uint64_t rows, uint64_t cols, const char *why,
                    char *err, size_t errlen)
{
    bool ok = cols ? t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols : t->ndim == 1 && t->shape[0] == rows;
    if (ok)
        return 0;
    char found[160], want[64];
    safetensors_format_shape (t->shape, t->ndim, found, sizeof found);
    if (cols)
        snprintf (want, sizeof want, "[%" PRIu64 ", %" PRIu64 "]", rows, cols);
    else
        snprintf (want, sizeof want, "[%" PRIu64 "]", rows);
    sig_set_error (err, errlen, "model \"%s\": tensor \"%s\" has shape %s, expected %s (%s)", cfg->name, t->name, found,
                   want, why);
    return -1;
}

static int s_load_layer (rnn_weights_t *self, size_t k, const model_config_t *cfg, const safetensors_t *st,
                         char *err, size_t errlen)
{
    const model_type_info_t *type = model_type_info (cfg->type);
    const uint64_t G = self->gates;
    rnn_layer_t *L = &self->layers[k];
    char name[CONFIG_NAME_MAX + 32], where[32], rows[48];
    snprintf (where, sizeof where, "%s layer %zu", model_type_name (cfg->type), k);
    snprintf (rows, sizeof rows, "%u x hidden", self->gates);
    snprintf (name, sizeof name, "%sweight_hh_l%zu", cfg->rnn_prefix, k);
    const st_tensor_t *hh = tensor_find (st, cfg, name, err, errlen);
    if (!hh)
        return -1;
    if (hh->ndim != 2 || hh->shape[1] == 0 || hh->shape[0] != G * hh->shape[1] || hh->shape[1] > 65536) {
        char found[160];
        safetensors_format_shape (hh->shape, hh->ndim, found, sizeof found);
        sig_set_error (err, errlen, "model \"%s\": tensor \"%s\" has shape %s, expected [%s, hidden] (gates %s)",
                       cfg->name, name, found, rows, type->gate_names);
        return -1;
    }
    uint32_t H = (uint32_t) hh->shape[1];
    if (k == 0)
        self->hidden = H;
    else if (H != self->hidden)
        return s_shape (cfg, hh, G * self->hidden, self->hidden, "every layer has the first layer's hidden size",
                        err, errlen);
    snprintf (name, sizeof name, "%sweight_ih_l%zu", cfg->rnn_prefix, k);
    const st_tensor_t *ih = tensor_find (st, cfg, name, err, errlen);
    if (!ih)
        return -1;
    char why[64];
    snprintf (why, sizeof why, "[%s, inputs]", rows);
    if (k == 0 && (ih->ndim != 2 || ih->shape[1] == 0 || ih->shape[1] > 65536))
        return s_shape (cfg, ih, G * H, 1, why, err, errlen);
    uint32_t in = k == 0 ? (uint32_t) ih->shape[1] : H;
    snprintf (why, sizeof why, "%s rows", rows);
    if (s_shape (cfg, ih, G * H, in, k == 0 ? why : "a layer's inputs are the hidden size", err, errlen) != 0)
        return -1;
    L->in = in;
    L->hidden = H;
    if (!(L->w_ih = tensor_read (cfg, where, "weight_ih", ih, in, err, errlen))
        || !(L->w_hh = tensor_read (cfg, where, "weight_hh", hh, H, err, errlen)))
        return -1;
    const size_t n = G * H;
    float **dst[2] = { &L->bias_ih, &L->bias_hh };
    if (!(L->bias = calloc (n, sizeof (float))) || !(L->bias_ih = calloc (n, sizeof (float)))
        || !(L->bias_hh = calloc (n, sizeof (float)))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        return -1;
    }
    /* bias=False in PyTorch: no bias tensors, zeros; one of the two alone is an error. */
    const char *kinds[2] = { "bias_ih", "bias_hh" };
    const st_tensor_t *b[2];
    for (int j = 0; j < 2; j++) {
        snprintf (name, sizeof name, "%s%s_l%zu", cfg->rnn_prefix, kinds[j], k);
        b[j] = safetensors_find (st, name);
    }
    if (!b[0] != !b[1]) {
        snprintf (name, sizeof name, "%s%s_l%zu", cfg->rnn_prefix, kinds[b[0] ? 1 : 0], k);
        return tensor_find (st, cfg, name, err, errlen) ? 0 : -1;
    }
    snprintf (why, sizeof why, "%s", rows);
    for (int j = 0; j < 2 && b[0]; j++) {
        if (s_shape (cfg, b[j], n, 0, why, err, errlen) != 0)
            return -1;
        float *v = tensor_read (cfg, where, kinds[j], b[j], 0, err, errlen);
        if (!v)
            return -1;
        for (size_t i = 0; i < n; i++)
            L->bias[i] += v[i];
        free (*dst[j]);
        *dst[j] = v;
    }
    return 0;
}

rnn_weights_t *rnn_weights_load (const model_config_t *cfg, char *err, size_t errlen)
{
    const model_type_info_t *type = model_type_info (cfg->type);
    if (!type || !type->gates) {
        sig_set_error (err, errlen, "model \"%s\": \"type\": \"%s\" has no recurrent layers", cfg->name,
                       model_type_name (cfg->type));
        return NULL;
    }
    char why[512];
    safetensors_t *st = safetensors_open (cfg->weights, why, sizeof why);
    if (!st) {
        sig_set_error (err, errlen, "model \"%s\": %s", cfg->name, why);
        return NULL;
    }
    size_t layers = 0;
    char name[CONFIG_NAME_MAX + 32];
    for (; layers < RNN_MAX_LAYERS + 1; layers++) {
        snprintf (name, sizeof name, "%sweight_ih_l%zu", cfg->rnn_prefix, layers);
        if (!safetensors_find (st, name))
            break;
    }
    rnn_weights_t *self = calloc (1, sizeof *self);
    int rc = self ? 0 : -1;
    if (!self)
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
    else if (layers == 0) {
        snprintf (name, sizeof name, "%sweight_ih_l0", cfg->rnn_prefix);
        tensor_find (st, cfg, name, err, errlen);   /* says what the file has */
        rc = -1;
    } else if (layers > RNN_MAX_LAYERS) {
        sig_set_error (err, errlen, "model \"%s\": more than %d %s layers", cfg->name, RNN_MAX_LAYERS, type->title);
        rc = -1;
    } else if (!(self->layers = calloc (layers, sizeof *self->layers))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        rc = -1;
    }
    if (rc == 0) {
        self->type = cfg->type;
        self->gates = type->gates;
        self->layer_count = layers;
    }
    for (size_t k = 0; rc == 0 && k < layers; k++)
        rc = s_load_layer (self, k, cfg, st, err, errlen);
    if (rc == 0) {
        self->step_size = self->layers[0].in;
        self->window = cfg->window;
        snprintf (why, sizeof why, "the %s's hidden size", type->title);
        rc = tensor_read_dense (st, cfg, "head", &cfg->head, self->hidden, why, &self->head, err, errlen);
    }
    safetensors_destroy (&st);
    if (rc != 0)
        rnn_weights_destroy (&self);
    return self;
}
