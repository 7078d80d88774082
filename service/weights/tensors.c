/* Reading the tensors a model config names out of its safetensors file (tensors.h): lookups that
 * list what the file has, f32 copies with every element checked finite, and [out, in] dense
 * layers with their bias. */
#include "weights/tensors.h"

#include "base/status.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* How many tensor names a "not found" message lists before it says how many more there are. */
#define S_LIST_NAMES 8

const st_tensor_t *tensor_find (const safetensors_t *st, const model_config_t *cfg, const char *name,
                                        char *err, size_t errlen)
{
    const st_tensor_t *t = safetensors_find (st, name);
    if (t)
        return t;
    char have[512] = "";
    size_t count = safetensors_count (st), used = 0;
    for (size_t i = 0; i < count && i < S_LIST_NAMES && used < sizeof have; i++)
        used += (size_t) snprintf (have + used, sizeof have - used, "%s%s", i ? ", " : "",
                                   safetensors_at (st, i)->name);
    if (count > S_LIST_NAMES && used < sizeof have)
        snprintf (have + used, sizeof have - used, ", ... and %zu more", count - S_LIST_NAMES);
    sig_set_error (err, errlen, "model \"%s\": tensor \"%s\" not found in %s (%s%s)", cfg->name, name,
            cfg->weights, count ? "it has: " : "it has no tensors", have);
    return NULL;
}

/* Checks the weight W at WHERE is [out, in] with sizes that fit uint32 and IN_EXPECTED columns
 * (0: any), IN_MEANING saying why in a message. */
static int s_check_weight (const model_config_t *cfg, const char *where, const st_tensor_t *w,
                           uint32_t in_expected, const char *in_meaning, char *err, size_t errlen)
{
    char shape[160];
    safetensors_format_shape (w->shape, w->ndim, shape, sizeof shape);
    if (w->ndim != 2) {
        sig_set_error (err, errlen, "model \"%s\": %s.weight \"%s\" has shape %s, expected 2 "
                "dimensions [out, in]", cfg->name, where, w->name, shape);
        return -1;
    }
    for (int d = 0; d < 2; d++)
        if (w->shape[d] < 1 || w->shape[d] > UINT32_MAX) {
            sig_set_error (err, errlen, "model \"%s\": %s.weight \"%s\" has shape %s, expected "
                    "sizes from 1 to %" PRIu32, cfg->name, where, w->name, shape, UINT32_MAX);
            return -1;
        }
    if (in_expected && w->shape[1] != in_expected) {
        sig_set_error (err, errlen, "model \"%s\": %s.weight \"%s\" has shape %s, expected [*, %"
                PRIu32 "] (%s)", cfg->name, where, w->name, shape, in_expected, in_meaning);
        return -1;
    }
    return 0;
}

static int s_check_bias (const model_config_t *cfg, const char *where, const st_tensor_t *b, uint64_t out,
                         char *err, size_t errlen)
{
    if (b->ndim == 1 && b->shape[0] == out)
        return 0;
    char shape[160];
    sig_set_error (err, errlen, "model \"%s\": %s.bias \"%s\" has shape %s, expected [%" PRIu64
            "] (the weight's output size)", cfg->name, where, b->name,
            safetensors_format_shape (b->shape, b->ndim, shape, sizeof shape), out);
    return -1;
}

float *tensor_read (const model_config_t *cfg, const char *where, const char *what, const st_tensor_t *t,
                            uint64_t row_len, char *err, size_t errlen)
{
    if (t->numel > SIZE_MAX / sizeof (float)) {
        sig_set_error (err, errlen, "model \"%s\": %s.%s \"%s\" is too large", cfg->name, where, what, t->name);
        return NULL;
    }
    float *dst = malloc ((size_t) (t->numel ? t->numel : 1) * sizeof (float));
    char why[256];
    if (!dst) {
        sig_set_error (err, errlen, "model \"%s\": %s.%s \"%s\": out of memory for %" PRIu64
                " floats", cfg->name, where, what, t->name, t->numel);
        return NULL;
    }
    if (safetensors_read_f32 (t, dst, why, sizeof why) != 0) {
        sig_set_error (err, errlen, "model \"%s\": %s.%s: %s", cfg->name, where, what, why);
        free (dst);
        return NULL;
    }
    for (uint64_t k = 0; k < t->numel; k++)
        if (!isfinite (dst[k])) {
            /* a NaN or Inf weight would turn every output into NaN; refuse the model instead */
            char at[64] = "";
            if (row_len)
                snprintf (at, sizeof at, " (row %" PRIu64 ", column %" PRIu64 ")", k / row_len, k % row_len);
            sig_set_error (err, errlen, "model \"%s\": %s.%s \"%s\" element %" PRIu64 "%s is %s, "
                    "expected a finite value", cfg->name, where, what, t->name, k, at,
                    isnan (dst[k]) ? "NaN" : dst[k] > 0 ? "inf" : "-inf");
            free (dst);
            return NULL;
        }
    return dst;
}

int tensor_read_dense (const safetensors_t *st, const model_config_t *cfg, const char *where,
                        const layer_config_t *lc, uint32_t in_expected, const char *in_meaning, dense_layer_t *layer,
                        char *err, size_t errlen)
{
    const st_tensor_t *w = tensor_find (st, cfg, lc->weight, err, errlen);
    if (!w || s_check_weight (cfg, where, w, in_expected, in_meaning, err, errlen) != 0)
        return -1;
    layer->out = (uint32_t) w->shape[0];
    layer->in = (uint32_t) w->shape[1];
    layer->activation = lc->activation;
    if (!(layer->weight = tensor_read (cfg, where, "weight", w, layer->in, err, errlen)))
        return -1;
    if (lc->bias[0] == 0) {     /* no bias named: the layer adds zeros */
        layer->bias = calloc (layer->out, sizeof *layer->bias);
        if (!layer->bias)
            sig_set_error (err, errlen, "model \"%s\": %s: out of memory", cfg->name, where);
        return layer->bias ? 0 : -1;
    }
    const st_tensor_t *b = tensor_find (st, cfg, lc->bias, err, errlen);
    if (!b || s_check_bias (cfg, where, b, layer->out, err, errlen) != 0)
        return -1;
    layer->bias = tensor_read (cfg, where, "bias", b, 0, err, errlen);
    return layer->bias ? 0 : -1;
}
