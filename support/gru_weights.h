/* Test and tool support for GRU models (never linked into the server): random weights of any shape
 * written as PyTorch would export them, and configs for them. The float64 reference is the
 * server's own (weights/gru.h); shapes are lstm_shape_t's (lstm_reference.h), layers to window. */
#ifndef SIGSERVE_GRU_WEIGHTS_H
#define SIGSERVE_GRU_WEIGHTS_H

#include "base/config.h"
#include "lstm_reference.h"     /* lstm_shape_t, lstm_shape_parse: the same five numbers */
#include "weights/gru.h"
#include "weights/weights.h"

#include <stddef.h>
#include <stdint.h>

/* Writes random weights of SHAPE to PATH the way safetensors.torch.save_file writes the state dict
 * of nn.GRU(step_size, hidden, layers, batch_first=True) under "gru." and an nn.Linear(hidden, out)
 * under "head.": every tensor uniform in +-1/sqrt(hidden) (PyTorch's initialisation for both).
 * BIAS false: the GRU has no bias tensors (bias=False). Deterministic in SEED. 0, or -1 with ERR. */
int gru_random_file (const char *path, const lstm_shape_t *shape, bool bias, uint64_t seed, char *err, size_t errlen);

/* A model configuration for such a file: type gru, prefix "gru.", the window, the head
 * ("head.weight", "head.bias", SHAPE's activation), backend cpu, max_rows 1, max_streams 4, one
 * instance. Callers change what they test. */
void gru_config (model_config_t *cfg, const char *name, const char *path, const lstm_shape_t *shape);

/* gru_random_file (with biases) + gru_config + weights_load: the weights as the server would load
 * them. NULL with ERR. */
weights_t *gru_random_weights (const char *path, const lstm_shape_t *shape, uint64_t seed, model_config_t *cfg,
                               char *err, size_t errlen);

#endif
