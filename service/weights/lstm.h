/* LSTM models ("type": "lstm"): PyTorch nn.LSTM(batch_first=True) weights, read as every recurrent
 * type's (rnn.h: G = 4 gate blocks, in PyTorch's order i, f, g, o), a linear head on the last layer's
 * hidden state at the last step, and a window of W steps; zero initial state at the start of every
 * window.
 *
 *   i = sigmoid (W_ii x + b_ii + W_hi h + b_hi)     f = sigmoid (W_if x + b_if + W_hf h + b_hf)
 *   g = tanh (W_ig x + b_ig + W_hg h + b_hg)        o = sigmoid (W_io x + b_io + W_ho h + b_ho)
 *   c' = f * c + i * g                              h' = o * tanh (c')
 *   output = act (head.W h_last + head.b)
 *
 * A full-window request carries W x step_size features (per row); a streaming request one step. */
#ifndef SIGSERVE_LSTM_H
#define SIGSERVE_LSTM_H

#include "weights/rnn.h"

/* The LSTM's code names them so (the layers' bias: bias_ih + bias_hh, rows i, f, g, o). */
typedef rnn_layer_t lstm_layer_t;
typedef rnn_weights_t lstm_weights_t;

#endif
