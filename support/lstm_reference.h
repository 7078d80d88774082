/* Test and tool support for LSTM models (never linked into the server): random weights of any shape
 * written as PyTorch would export them, and configs for them. The float64 reference for full
 * windows and for streams is the server's own (weights/reference.h). */
#ifndef SIGSERVE_LSTM_REFERENCE_H
#define SIGSERVE_LSTM_REFERENCE_H

#include "base/config.h"
#include "weights/lstm.h"
#include "weights/reference.h"   /* lstm_reference_window, lstm_reference_stream */
#include "weights/weights.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t layers;            /* stacked LSTM layers */
    uint32_t step_size;         /* inputs of one step */
    uint32_t hidden;            /* units per layer */
    uint32_t out;               /* head outputs */
    uint32_t window;            /* time steps of a window */
    activation_t head_act;
} lstm_shape_t;

/* The three sizes (NVIDIA's dl-lowlat-infer models), one head output, no activation. */
extern const lstm_shape_t LSTM_SHAPE_SMALL;     /* 2 layers, window 64, 128 inputs, 96 units */
extern const lstm_shape_t LSTM_SHAPE_MEDIUM;    /* 3 layers, window 96, 192 inputs, 160 units */
extern const lstm_shape_t LSTM_SHAPE_LARGE;     /* 4 layers, window 128, 512 inputs, 736 units */
/* "small", "medium", "large", or "L,W,IN,H[,OUT]" (layers, window, inputs, units, outputs; ':'
 * may stand for ',').
 * 0, or -1 with ERR. */
int lstm_shape_parse (const char *text, lstm_shape_t *shape, char *err, size_t errlen);

/* Writes random weights of SHAPE to PATH the way safetensors.torch.save_file writes the state
 * dict of nn.LSTM(step_size, hidden, layers, batch_first=True) under "lstm." and an
 * nn.Linear(hidden, out) under "head.": every tensor uniform in +-1/sqrt(hidden) (PyTorch's
 * initialisation for both). Deterministic in SEED. 0, or -1 with ERR. */
int lstm_random_file (const char *path, const lstm_shape_t *shape, uint64_t seed, char *err, size_t errlen);

/* A model configuration for such a file: type lstm, prefix "lstm.", the window, the head
 * ("head.weight", "head.bias", SHAPE's activation), max_rows 1, max_streams 4, one instance,
 * weight_dtype f32, watchdog 1000 ms. Callers change what they test. */
void lstm_config (model_config_t *cfg, const char *name, const char *path, const lstm_shape_t *shape);

/* lstm_random_file + lstm_config + weights_load: the weights as the server would load them.
 * NULL with ERR. */
weights_t *lstm_random_weights (const char *path, const lstm_shape_t *shape, uint64_t seed, model_config_t *cfg,
                                char *err, size_t errlen);

#endif
