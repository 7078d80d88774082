/* LSTM test support (lstm_reference.h): its shapes, random weights in PyTorch's names and configs for
 * them (rnn_random.c, as every recurrent type's). */
#include "lstm_reference.h"

#include "base/status.h"
#include "rnn_random.h"

#include <stdio.h>
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
    return rnn_random_file (path, s, "LSTM", "lstm.", 4, true, seed, err, errlen);
}

void lstm_config (model_config_t *cfg, const char *name, const char *path, const lstm_shape_t *shape)
{
    rnn_config (cfg, MODEL_TYPE_LSTM, name, path, "lstm.", shape);
    cfg->kernel = CUDA_KERNEL_PERSISTENT;
    cfg->wait = CUDA_WAIT_SPIN;
    cfg->specialise = true;   /* the configuration's default (the CUDA kernel specialised for its plan) */
}

weights_t *lstm_random_weights (const char *path, const lstm_shape_t *shape, uint64_t seed, model_config_t *cfg,
                                char *err, size_t errlen)
{
    if (lstm_random_file (path, shape, seed, err, errlen) != 0)
        return NULL;
    lstm_config (cfg, "lstm", path, shape);
    return weights_load (cfg, err, errlen);
}
