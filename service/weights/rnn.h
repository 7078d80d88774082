/* Recurrent models (every type whose row in base/model_type.h has gates: "lstm", "gru"), as PyTorch's
 * nn.LSTM / nn.GRU (batch_first=True) are saved by safetensors.torch.save_file: <prefix>weight_ih_l{k}
 * [G H, in_k], weight_hh_l{k} [G H, H], bias_ih_l{k} [G H], bias_hh_l{k} [G H] (no biases: zeros),
 * the G gate blocks of H rows in PyTorch's order (the type's gate_names); a linear head on the last
 * layer's hidden state at the last step; a window of W steps from a zero state. The prefix is the
 * model's key named after its type ("lstm": "lstm."); the type's own header gives its equations
 * (lstm.h). A whole-window request carries W x step_size features a row, a streaming one one step. */
#ifndef SIGSERVE_RNN_H
#define SIGSERVE_RNN_H

#include "base/config.h"
#include "weights/tensors.h"
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t in, hidden;
    float *w_ih;                /* [G H][in], PyTorch's gate order */
    float *w_hh;                /* [G H][H] */
    float *bias;                /* [G H]: bias_ih + bias_hh */
    float *bias_ih, *bias_hh;   /* [G H] each, as the file has them (a GRU's n gate needs them apart) */
} rnn_layer_t;

typedef struct rnn_weights {
    model_type_t type;
    uint32_t gates;             /* G */
    size_t layer_count;
    rnn_layer_t *layers;
    uint32_t step_size;         /* inputs of one step (layer 0's in) */
    uint32_t hidden;            /* H, the same in every layer */
    uint32_t window;            /* W time steps */
    dense_layer_t head;         /* [out][H], bias, activation */
} rnn_weights_t;   /* also declared by weights.h, which holds one */

/* Reads CFG's recurrent layers (prefix cfg->rnn_prefix, layers counted from the tensors present, G
 * from the type's row, window cfg->window, head cfg->head) and checks every shape. NULL with ERR
 * naming the model, the tensor and the expected vs found shape. */
rnn_weights_t *rnn_weights_load (const model_config_t *cfg, char *err, size_t errlen);
void rnn_weights_destroy (rnn_weights_t **self_p);

#endif
