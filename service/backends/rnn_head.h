/* The linear head of the CPU recurrent backends (backend_lstm_cpu.c, backend_gru_cpu.c) on the last
 * layer's hidden state: out = act (W h + b), W's rows padded with zeros to whole vectors of 16 (Hp
 * floats), as the backends keep h. Allocated at load by rnn_head_init; applied with no allocation. */
#ifndef SIGSERVE_RNN_HEAD_H
#define SIGSERVE_RNN_HEAD_H

#include "base/config.h"
#include "weights/tensors.h"

#include <stdint.h>

typedef struct {
    uint32_t out, Hp;
    activation_t act;
    float *w;                   /* [out][Hp] */
    float *b;                   /* [out] */
} rnn_head_t;

/* SRC ([out][H] and its bias) padded to rows of HP floats. 0, or -1 when memory runs out (what was
 * allocated is for rnn_head_free). */
int rnn_head_init (rnn_head_t *self, const dense_layer_t *src, uint32_t Hp);

/* Frees the members and zeroes SELF: safe on a zeroed one, and twice. */
void rnn_head_free (rnn_head_t *self);

/* OUT[o] = act (w[o] . H + b[o]) for every output; H: Hp floats, 64-byte aligned. */
void rnn_head_apply (const rnn_head_t *self, const float *h, float *out);

#endif
