/* Test and tool support for recurrent models of any type (never linked into the server): random
 * weights written as PyTorch would export them, and the configuration every type's tests start
 * from. Each type's own names and defaults: lstm_reference.h (LSTM), gru_weights.h (GRU). */
#ifndef SIGSERVE_RNN_RANDOM_H
#define SIGSERVE_RNN_RANDOM_H

#include "base/config.h"
#include "lstm_reference.h"     /* lstm_shape_t: every recurrent type's five numbers */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes random weights of SHAPE to PATH the way safetensors.torch.save_file writes the state dict
 * of a recurrent module of GATES gate blocks (nn.LSTM: 4, nn.GRU: 3; (step_size, hidden, layers,
 * batch_first=True)) under PREFIX ("lstm.") and an nn.Linear(hidden, out) under "head.": every
 * tensor uniform in +-1/sqrt(hidden) (PyTorch's initialisation for both), in the order PyTorch
 * draws them. BIAS false: no bias tensors (bias=False). WHAT names the type in messages ("LSTM").
 * Deterministic in SEED. 0, or -1 with ERR. */
int rnn_random_file (const char *path, const lstm_shape_t *shape, const char *what, const char *prefix, uint32_t gates,
                     bool bias, uint64_t seed, char *err, size_t errlen);

/* A model configuration for such a file: TYPE, its tensors under PREFIX, the window, the head
 * ("head.weight", "head.bias", SHAPE's activation), backend cpu with kernel loop, max_rows 1,
 * max_streams 4, one instance, queue depth 64, weight_dtype f32, watchdog 1000 ms; every other
 * field zero. */
void rnn_config (model_config_t *cfg, model_type_t type, const char *name, const char *path, const char *prefix,
                 const lstm_shape_t *shape);

#endif
