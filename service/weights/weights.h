/* A model's weights in host memory, f32, validated as a chain of dense layers:
 * layer i maps in_i -> out_i with W_i [out_i, in_i] row-major (PyTorch's nn.Linear layout),
 * a bias [out_i] (zeros when the config names none) and an activation; in_{i+1} == out_i.
 * Backends take their own copy in their own layout; these stay the reference. */
#ifndef SIGSERVE_WEIGHTS_H
#define SIGSERVE_WEIGHTS_H

#include "base/config.h"
#include "weights/safetensors.h"
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t in, out;
    activation_t activation;
    float *weight;      /* [out][in] */
    float *bias;        /* [out] */
} dense_layer_t;

typedef struct lstm_weights lstm_weights_t;     /* lstm.h */

typedef struct {
    model_type_t type;
    size_t layer_count;                         /* mlp: the dense chain */
    dense_layer_t *layers;
    lstm_weights_t *lstm;                       /* lstm: the recurrent layers, window and head */
    /* mlp: the chain's; lstm: input window x step_size (a full window), output the head's */
    uint32_t input_size, output_size, widest;   /* widest: max over in and out of every layer */
} weights_t;

/* Reads the tensors the config names from its safetensors file and checks every shape against
 * the chain (mlp), or the LSTM (lstm.h). NULL with ERR naming the model, tensor and the expected
 * vs found shape. */
weights_t *weights_load (const model_config_t *cfg, char *err, size_t errlen);
void weights_destroy (weights_t **self_p);

/* For loaders of other model types (lstm.c), the pieces the dense loader is made of; WHERE names
 * the part in messages ("layers[2]", "head").
 * The tensor NAME of ST, or NULL with ERR listing what the file has. */
const st_tensor_t *weights_find_tensor (const safetensors_t *st, const model_config_t *cfg, const char *name,
                                        char *err, size_t errlen);
/* A malloc'd f32 copy of T (WHAT: "weight", "bias"), every element checked finite; a non-zero
 * ROW_LEN lets a message give a bad element's row and column. NULL with ERR. */
float *weights_read_tensor (const model_config_t *cfg, const char *where, const char *what, const st_tensor_t *t,
                            uint64_t row_len, char *err, size_t errlen);
/* A dense layer named by LC ([out, in] weight, [out] bias or none), IN_EXPECTED columns when not
 * 0 (IN_MEANING says why, in a message). 0, or -1 with ERR. */
int weights_read_dense (const safetensors_t *st, const model_config_t *cfg, const char *where,
                        const layer_config_t *lc, uint32_t in_expected, const char *in_meaning, dense_layer_t *layer,
                        char *err, size_t errlen);

/* For builders of weights (the loader, support/reference.c): LAYER_COUNT zeroed layers, NULL when
 * memory runs out; weights_finish sets the chain's sizes once every layer is filled in. */
weights_t *weights_alloc (size_t layer_count);
void weights_finish (weights_t *self);

#endif
