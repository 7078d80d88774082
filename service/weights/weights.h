/* A model's weights in host memory, f32, every shape checked: an MLP ("type": "mlp") as a chain of
 * dense layers (tensors.h), layer i mapping in_i -> out_i with in_{i+1} == out_i; a recurrent type
 * ("lstm", "gru": its row in base/model_type.h has gates) as its recurrent layers, window and head
 * (rnn.h). Backends take their own copy in their own layout; these stay the reference. */
#ifndef SIGSERVE_WEIGHTS_H
#define SIGSERVE_WEIGHTS_H

#include "base/config.h"
#include "weights/tensors.h"
#include <stddef.h>
#include <stdint.h>

typedef struct rnn_weights rnn_weights_t;       /* rnn.h */
typedef rnn_weights_t lstm_weights_t;           /* lstm.h */

typedef struct {
    model_type_t type;
    size_t layer_count;                         /* mlp: the dense chain */
    dense_layer_t *layers;
    rnn_weights_t *rnn;                         /* recurrent: the recurrent layers, window and head */
    lstm_weights_t *lstm;                       /* rnn for an lstm, else NULL (what the LSTM's code reads) */
    uint32_t window, step_size;                 /* recurrent: steps of a window, inputs of a step; else 0 */
    /* mlp: the chain's; recurrent: input window x step_size (a full window), output the head's */
    uint32_t input_size, output_size, widest;   /* widest: max over in and out of every layer */
} weights_t;

/* Reads the tensors the config names from its safetensors file and checks every shape against
 * the chain (mlp), or the recurrent layers (rnn.h). NULL with ERR naming the model, tensor and the expected
 * vs found shape. */
weights_t *weights_load (const model_config_t *cfg, char *err, size_t errlen);
void weights_destroy (weights_t **self_p);

/* For builders of weights (the loader, support/reference.c): LAYER_COUNT zeroed layers, NULL when
 * memory runs out; weights_finish sets the chain's sizes once every layer is filled in. */
weights_t *weights_alloc (size_t layer_count);
void weights_finish (weights_t *self);

#endif
