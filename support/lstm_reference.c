/* LSTM test support: random weights in PyTorch's names and the float64 reference (lstm_reference.h). */
#include "lstm_reference.h"

#include "rng.h"
#include "st_write.h"
#include "base/status.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const lstm_shape_t LSTM_SHAPE_SMALL = { .layers = 2, .step_size = 128, .hidden = 96, .out = 1, .window = 64 };
const lstm_shape_t LSTM_SHAPE_MEDIUM = { .layers = 3, .step_size = 192, .hidden = 160, .out = 1, .window = 96 };
const lstm_shape_t LSTM_SHAPE_LARGE = { .layers = 4, .step_size = 512, .hidden = 736, .out = 1, .window = 128 };

int lstm_shape_parse (const char *text, lstm_shape_t *shape, char *err, size_t errlen)
{
    if (strcmp (text, "small") == 0)
        *shape = LSTM_SHAPE_SMALL;
    else if (strcmp (text, "medium") == 0)
        *shape = LSTM_SHAPE_MEDIUM;
    else if (strcmp (text, "large") == 0)
        *shape = LSTM_SHAPE_LARGE;
    else {
        unsigned v[5] = { 0, 0, 0, 0, 1 };
        char tail, t[128];
        snprintf (t, sizeof t, "%s", text);
        for (char *c = t; *c; c++)   /* ':' too, for lists of shapes separated by commas */
            *c = *c == ':' ? ',' : *c;
        int n = sscanf (t, "%u,%u,%u,%u,%u%c", &v[0], &v[1], &v[2], &v[3], &v[4], &tail);
        if ((n != 4 && n != 5) || !v[0] || !v[1] || !v[2] || !v[3] || !v[4] || v[0] > 16 || v[1] > 4096
            || v[2] > 65536 || v[3] > 65536 || v[4] > 65536) {
            sig_set_error (err, errlen, "LSTM shape \"%s\": expected small, medium, large or LAYERS,WINDOW,INPUTS,"
                           "UNITS[,OUTPUTS] (or with ':', layers 1-16, window 1-4096)", text);
            return -1;
        }
        *shape = (lstm_shape_t) { .layers = v[0], .window = v[1], .step_size = v[2], .hidden = v[3], .out = v[4] };
    }
    return 0;
}

int lstm_random_file (const char *path, const lstm_shape_t *s, uint64_t seed, char *err, size_t errlen)
{
    assert (path && s);
    if (!s->layers || s->layers > 16 || !s->step_size || !s->hidden || !s->out) {
        sig_set_error (err, errlen, "%s: bad LSTM shape (%u layers, %u inputs, %u units, %u outputs)", path, s->layers,
                       s->step_size, s->hidden, s->out);
        return -1;
    }
    const size_t H = s->hidden, G4 = 4 * H;
    const size_t count = 4 * (size_t) s->layers + 2;
    st_write_tensor_t *t = calloc (count, sizeof *t);
    float **data = calloc (count, sizeof *data);
    char (*names)[48] = calloc (count, sizeof *names);
    int rc = t && data && names ? 0 : -1;
    uint64_t state = seed;
    /* nn.LSTM and nn.Linear(hidden, out) both draw from +-1/sqrt(hidden) */
    const float bound = (float) (1.0 / sqrt ((double) H));
    static const char *kinds[4] = { "weight_ih", "weight_hh", "bias_ih", "bias_hh" };
    for (size_t k = 0; rc == 0 && k < s->layers; k++)
        for (size_t j = 0; rc == 0 && j < 4; j++) {
            const size_t i = 4 * k + j;
            const size_t cols = j == 0 ? (k == 0 ? s->step_size : H) : j == 1 ? H : 0;
            const size_t n = G4 * (cols ? cols : 1);
            snprintf (names[i], sizeof names[i], "lstm.%s_l%zu", kinds[j], k);
            if (!(data[i] = malloc (n * sizeof (float)))) {
                rc = -1;
                break;
            }
            for (size_t e = 0; e < n; e++)
                data[i][e] = rng_uniform (&state, -bound, bound);
            t[i] = (st_write_tensor_t) { .name = names[i], .ndim = cols ? 2 : 1, .shape = { G4, cols }, .data = data[i] };
        }
    for (size_t j = 0; rc == 0 && j < 2; j++) {
        const size_t i = 4 * (size_t) s->layers + j;
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
        sig_set_error (err, errlen, "%s: out of memory for random LSTM weights", path);
    else
        rc = safetensors_write_f32 (path, t, count, err, errlen);
    for (size_t i = 0; data && i < count; i++)
        free (data[i]);
    free (data);
    free (names);
    free (t);
    return rc;
}

void lstm_config (model_config_t *cfg, const char *name, const char *path, const lstm_shape_t *shape)
{
    memset (cfg, 0, sizeof *cfg);
    snprintf (cfg->name, sizeof cfg->name, "%s", name);
    strcpy (cfg->version, "1");
    cfg->type = MODEL_TYPE_LSTM;
    cfg->backend = BACKEND_CPU;
    cfg->kernel = CUDA_KERNEL_PERSISTENT;
    cfg->cpu_kernel = CPU_KERNEL_LOOP;
    cfg->wait = CUDA_WAIT_SPIN;
    cfg->device_count = 1;
    cfg->max_rows = 1;
    cfg->max_batch_rows = 1;
    cfg->instances = 1;
    cfg->queue_depth = 64;
    cfg->watchdog_ms = 1000;
    cfg->weight_dtype = WEIGHT_DTYPE_F32;
    cfg->specialise = true;   /* the configuration's default (the CUDA kernel specialised for its plan) */
    snprintf (cfg->weights, sizeof cfg->weights, "%s", path);
    strcpy (cfg->rnn_prefix, "lstm.");
    cfg->window = shape->window;
    strcpy (cfg->head.weight, "head.weight");
    strcpy (cfg->head.bias, "head.bias");
    cfg->head.activation = shape->head_act;
    cfg->max_streams = 4;
    cfg->stream_idle_s = 300;
}

weights_t *lstm_random_weights (const char *path, const lstm_shape_t *shape, uint64_t seed, model_config_t *cfg,
                                char *err, size_t errlen)
{
    if (lstm_random_file (path, shape, seed, err, errlen) != 0)
        return NULL;
    lstm_config (cfg, "lstm", path, shape);
    return weights_load (cfg, err, errlen);
}
