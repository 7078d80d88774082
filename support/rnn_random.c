/* Recurrent test support (rnn_random.h): random weights in PyTorch's names, and the configuration
 * every type's tests start from. */
#include "rnn_random.h"

#include "base/status.h"
#include "rng.h"
#include "st_write.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rnn_random_file (const char *path, const lstm_shape_t *s, const char *what, const char *prefix, uint32_t gates,
                     bool bias, uint64_t seed, char *err, size_t errlen)
{
    assert (path && s && what && prefix && gates);
    if (!s->layers || s->layers > 16 || !s->step_size || !s->hidden || !s->out) {
        sig_set_error (err, errlen, "%s: bad %s shape (%u layers, %u inputs, %u units, %u outputs)", path, what,
                       s->layers, s->step_size, s->hidden, s->out);
        return -1;
    }
    const size_t H = s->hidden, GH = (size_t) gates * H, per = bias ? 4 : 2;
    const size_t count = per * s->layers + 2;
    st_write_tensor_t *t = calloc (count, sizeof *t);
    float **data = calloc (count, sizeof *data);
    char (*names)[48] = calloc (count, sizeof *names);
    int rc = t && data && names ? 0 : -1;
    uint64_t state = seed;
    /* the recurrent module and nn.Linear(hidden, out) both draw from +-1/sqrt(hidden) */
    const float bound = (float) (1.0 / sqrt ((double) H));
    static const char *kinds[4] = { "weight_ih", "weight_hh", "bias_ih", "bias_hh" };
    for (size_t k = 0; rc == 0 && k < s->layers; k++)
        for (size_t j = 0; rc == 0 && j < per; j++) {
            const size_t i = per * k + j;
            const size_t cols = j == 0 ? (k == 0 ? s->step_size : H) : j == 1 ? H : 0;
            const size_t n = GH * (cols ? cols : 1);
            snprintf (names[i], sizeof names[i], "%s%s_l%zu", prefix, kinds[j], k);
            if (!(data[i] = malloc (n * sizeof (float)))) {
                rc = -1;
                break;
            }
            for (size_t e = 0; e < n; e++)
                data[i][e] = rng_uniform (&state, -bound, bound);
            t[i] = (st_write_tensor_t) { .name = names[i], .ndim = cols ? 2 : 1, .shape = { GH, cols }, .data = data[i] };
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
        sig_set_error (err, errlen, "%s: out of memory for random %s weights", path, what);
    else
        rc = safetensors_write_f32 (path, t, count, err, errlen);
    for (size_t i = 0; data && i < count; i++)
        free (data[i]);
    free (data);
    free (names);
    free (t);
    return rc;
}

void rnn_config (model_config_t *cfg, model_type_t type, const char *name, const char *path, const char *prefix,
                 const lstm_shape_t *shape)
{
    memset (cfg, 0, sizeof *cfg);
    snprintf (cfg->name, sizeof cfg->name, "%s", name);
    strcpy (cfg->version, "1");
    cfg->type = type;
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
    snprintf (cfg->rnn_prefix, sizeof cfg->rnn_prefix, "%s", prefix);
    cfg->window = shape->window;
    strcpy (cfg->head.weight, "head.weight");
    strcpy (cfg->head.bias, "head.bias");
    cfg->head.activation = shape->head_act;
    cfg->max_streams = 4;
    cfg->stream_idle_s = 300;
}
