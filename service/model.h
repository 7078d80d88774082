/* A model's weights in host memory, f32, validated as a chain of dense layers:
 * layer i maps in_i -> out_i with W_i [out_i, in_i] row-major (PyTorch's nn.Linear layout),
 * a bias [out_i] (zeros when the config names none) and an activation; in_{i+1} == out_i.
 * Backends take their own copy in their own layout; these stay the reference. */
#ifndef SIGSERVE_MODEL_H
#define SIGSERVE_MODEL_H

#include "config.h"
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t in, out;
    activation_t activation;
    float *weight;      /* [out][in] */
    float *bias;        /* [out] */
} dense_layer_t;

typedef struct {
    size_t layer_count;
    dense_layer_t *layers;
    uint32_t input_size, output_size, widest;   /* widest: max over in and out of every layer */
} model_weights_t;

/* Reads the tensors the config names from its safetensors file and checks every shape against
 * the chain. NULL with ERR naming the model, tensor and the expected vs found shape. */
model_weights_t *model_weights_load (const model_config_t *cfg, char *err, size_t errlen);
/* Random weights (uniform in +-1/sqrt(in), like nn.Linear) for tests and benchmarks.
 * SIZES has LAYER_COUNT + 1 entries. */
model_weights_t *model_weights_random (const uint32_t *sizes, const activation_t *acts,
                                       size_t layer_count, uint64_t seed);
void model_weights_destroy (model_weights_t **self_p);

/* The float64 reference: IN holds rows x input_size values, OUT gets rows x output_size values,
 * both row-major. 0 on success, -1 when its scratch rows cannot be allocated. */
int model_reference_forward (const model_weights_t *w, const float *in, uint32_t rows, double *out);

/* Deterministic random numbers for weights, tests and benchmarks (splitmix64);
 * rng_uniform returns a value in [lo, hi). */
uint64_t rng_next (uint64_t *state);
float rng_uniform (uint64_t *state, float lo, float hi);

#endif
