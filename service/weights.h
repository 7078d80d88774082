/* A model's weights in host memory, f32, validated as a chain of dense layers:
 * layer i maps in_i -> out_i with W_i [out_i, in_i] row-major (PyTorch's nn.Linear layout),
 * a bias [out_i] (zeros when the config names none) and an activation; in_{i+1} == out_i.
 * Backends take their own copy in their own layout; these stay the reference. */
#ifndef SIGSERVE_WEIGHTS_H
#define SIGSERVE_WEIGHTS_H

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
} weights_t;

/* Reads the tensors the config names from its safetensors file and checks every shape against
 * the chain. NULL with ERR naming the model, tensor and the expected vs found shape. */
weights_t *weights_load (const model_config_t *cfg, char *err, size_t errlen);
void weights_destroy (weights_t **self_p);

/* For builders of weights (the loader, support/reference.c): LAYER_COUNT zeroed layers, NULL when
 * memory runs out; weights_finish sets the chain's sizes once every layer is filled in. */
weights_t *weights_alloc (size_t layer_count);
void weights_finish (weights_t *self);

#endif
