/* GRU models ("type": "gru"): PyTorch nn.GRU(batch_first=True) weights, read as every recurrent
 * type's (rnn.h: G = 3 gate blocks, in PyTorch's order r, z, n; bias_ih and bias_hh both kept), a
 * linear head on the last layer's hidden state at the last step, and a window of W steps; zero
 * initial state at the start of every window.
 *
 *   r = sigmoid (W_ir x + b_ir + W_hr h + b_hr)     z = sigmoid (W_iz x + b_iz + W_hz h + b_hz)
 *   n = tanh (W_in x + b_in + r * (W_hn h + b_hn))  h' = (1 - z) * n + z * h
 *   output = act (head.W h_last + head.b)
 *
 * The float64 references its backends are judged by, written straight from these equations: slow
 * on purpose, never on a request's path. */
#ifndef SIGSERVE_GRU_H
#define SIGSERVE_GRU_H

#include "weights/rnn.h"
#include "weights/weights.h"

#include <stdint.h>

/* Whole windows: IN holds ROWS windows of window x step_size floats (oldest step first), OUT gets
 * ROWS x head.out values. 0, or -1 when memory runs out (or W is not a GRU's). */
int gru_reference_window (const weights_t *w, const float *in, uint32_t rows, double *out);

/* A stream: STEPS holds COUNT steps of step_size floats (oldest first); OUT (head.out values) gets
 * the output for the window of the last `window` of them, zeros standing in for steps before the
 * first. 0, or -1 when memory runs out (or W is not a GRU's). */
int gru_reference_stream (const weights_t *w, const float *steps, uint64_t count, double *out);

#endif
