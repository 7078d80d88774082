/* LSTM models ("type": "lstm"): PyTorch nn.LSTM(batch_first=True) weights as
 * safetensors.torch.save_file writes them (<prefix>weight_ih_l{k} [4H, in_k], weight_hh_l{k}
 * [4H, H], bias_ih_l{k} [4H], bias_hh_l{k} [4H]; gates in PyTorch's order i, f, g, o), a linear
 * head on the last layer's hidden state at the last step, and a window of W steps; zero initial
 * state at the start of every window.
 *
 *   i = sigmoid (W_ii x + b_ii + W_hi h + b_hi)     f = sigmoid (W_if x + b_if + W_hf h + b_hf)
 *   g = tanh (W_ig x + b_ig + W_hg h + b_hg)        o = sigmoid (W_io x + b_io + W_ho h + b_ho)
 *   c' = f * c + i * g                              h' = o * tanh (c')
 *   output = act (head.W h_last + head.b)
 *
 * A full-window request carries W x step_size features (per row); a streaming request one step. */
#ifndef SIGSERVE_LSTM_H
#define SIGSERVE_LSTM_H

#include "base/config.h"
#include "weights/tensors.h"
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t in, hidden;
    float *w_ih;                /* [4H][in], rows i, f, g, o */
    float *w_hh;                /* [4H][H] */
    float *bias;                /* [4H]: bias_ih + bias_hh */
} lstm_layer_t;

typedef struct lstm_weights {
    size_t layer_count;
    lstm_layer_t *layers;
    uint32_t step_size;         /* inputs of one step (layer 0's in) */
    uint32_t hidden;            /* H, the same in every layer */
    uint32_t window;            /* W time steps */
    dense_layer_t head;         /* [out][H], bias, activation */
} lstm_weights_t;   /* also declared by weights.h, which holds one */

/* Reads CFG's LSTM (prefix cfg->lstm_prefix, layers counted from the tensors present, window
 * cfg->window, head cfg->head) and checks every shape. NULL with ERR naming the model, the tensor
 * and the expected vs found shape. */
lstm_weights_t *lstm_weights_load (const model_config_t *cfg, char *err, size_t errlen);
void lstm_weights_destroy (lstm_weights_t **self_p);

#endif
