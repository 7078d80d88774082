/* GRU test support (gru_weights.h): random weights in PyTorch's names, and configs for them. */
#include "gru_weights.h"

#include "base/status.h"
#include "rng.h"
#include "st_write.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gru_random_file (const char *path, const lstm_shape_t *s, bool bias, uint64_t seed, char *err, size_t errlen)
{
    assert (path && s);
    if (!s->layers || s->layers > 16 || !s->step_size || !s->hidden || !s->out) {
        sig_set_error (err, errlen, "%s: bad GRU shape (%u layers, %u inputs, %u units, %u outputs)", path, s->layers,
                       s->step_size, s->hidden, s->out);
        return -1;
    }
    const size_t H = s->hidden, G3 = 3 * H, per = bias ? 4 : 2;
    const size_t count = per * s->layers + 2;
    st_write_tensor_t *t = calloc (count, sizeof *t);
    float **data = calloc (count, sizeof *data);
    char (*names)[48] = calloc (count, sizeof *names);
    int rc = t && data && names ? 0 : -1;
    uint64_t state = seed;
    /* nn.GRU and nn.Linear(hidden, out) both draw from +-1/sqrt(hidden) */
    const float bound = (float) (1.0 / sqrt ((double) H));
    static const char *kinds[4] = { "weight_ih", "weight_hh", "bias_ih", "bias_hh" };
    for (size_t k = 0; rc == 0 && k < s->layers; k++)
        for (size_t j = 0; rc == 0 && j < per; j++) {
            const size_t i = per * k + j;
            const size_t cols = j == 0 ? (k == 0 ? s->step_size : H) : j == 1 ? H : 0;
            const size_t n = G3 * (cols ? cols : 1);
            snprintf (names[i], sizeof names[i], "gru.%s_l%zu", kinds[j], k);
            if (!(data[i] = malloc (n * sizeof (float)))) {
                rc = -1;
                break;
            }
            for (size_t e = 0; e < n; e++)
                data[i][e] = rng_uniform (&state, -bound, bound);
            t[i] = (st_write_tensor_t) { .name = names[i], .ndim = cols ? 2 : 1, .shape = { G3, cols }, .data = data[i] };
        }
    for (size_t j = 0; rc == 0 && j < 2; j++) {
        const size_t i = per * (size_t) s->layers + j;
        const size_t n = (size_t) s->out * (j == 0 ? H : 1);
        snprintf (names[i], sizeof names[i], "head.%s", j == 0 ? "weight" : "bias");
        if (!(data[i] = malloc (n * sizeof (float)))) {
            rc = -1;
            break;
        }
        for (size_t e = 0; e < n; e++)
            data[i][e] = rng_uniform (&state, -bound, bound);
        t[i] = (st_write_tensor_t) { .name = names[i], .ndim = j == 0 ? 2 : 1, .shape = { s->out, j == 0 ? H : 0 },
                                     .data = data[i] };
    }
    if (rc != 0)
        sig_set_error (err, errlen, "%s: out of memory for random GRU weights", path);
    else
        rc = safetensors_write_f32 (path, t, count, err, errlen);
    for (size_t i = 0; data && i < count; i++)
        free (data[i]);
    free (data);
    free (names);
    free (t);
    return rc;
}

void gru_config (model_config_t *cfg, const char *name, const char *path, const lstm_shape_t *shape)
{
    memset (cfg, 0, sizeof *cfg);
    snprintf (cfg->name, sizeof cfg->name, "%s", name);
    strcpy (cfg->version, "1");
    cfg->type = MODEL_TYPE_GRU;
    cfg->backend = BACKEND_CPU;
    cfg->cpu_kernel = CPU_KERNEL_LOOP;
    cfg->device_count = 1;
    cfg->max_rows = 1;
    cfg->max_batch_rows = 1;
    cfg->instances = 1;
    cfg->queue_depth = 64;
    cfg->watchdog_ms = 1000;
    cfg->weight_dtype = WEIGHT_DTYPE_F32;
    snprintf (cfg->weights, sizeof cfg->weights, "%s", path);
    strcpy (cfg->rnn_prefix, "gru.");
    cfg->window = shape->window;
    strcpy (cfg->head.weight, "head.weight");
    strcpy (cfg->head.bias, "head.bias");
    cfg->head.activation = shape->head_act;
    cfg->max_streams = 4;
    cfg->stream_idle_s = 300;
}

weights_t *gru_random_weights (const char *path, const lstm_shape_t *shape, uint64_t seed, model_config_t *cfg,
                               char *err, size_t errlen)
{
    if (gru_random_file (path, shape, true, seed, err, errlen) != 0)
        return NULL;
    gru_config (cfg, "gru", path, shape);
    return weights_load (cfg, err, errlen);
}
