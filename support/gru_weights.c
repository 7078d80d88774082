/* GRU test support (gru_weights.h): random weights in PyTorch's names, and configs for them (rnn_random.c,
 * as every recurrent type's). */
#include "gru_weights.h"

#include "rnn_random.h"

int gru_random_file (const char *path, const lstm_shape_t *s, bool bias, uint64_t seed, char *err, size_t errlen)
{
    return rnn_random_file (path, s, "GRU", "gru.", 3, bias, seed, err, errlen);
}

void gru_config (model_config_t *cfg, const char *name, const char *path, const lstm_shape_t *shape)
{
    rnn_config (cfg, MODEL_TYPE_GRU, name, path, "gru.", shape);
}

weights_t *gru_random_weights (const char *path, const lstm_shape_t *shape, uint64_t seed, model_config_t *cfg,
                               char *err, size_t errlen)
{
    if (gru_random_file (path, shape, true, seed, err, errlen) != 0)
        return NULL;
    gru_config (cfg, "gru", path, shape);
    return weights_load (cfg, err, errlen);
}
