/* Tolerances for the GRU (weights/gru.h), as tolerance.h's for the MLP and the LSTM: the float64
 * reference of each output (gru_reference_window's and gru_reference_stream's values, bit for bit)
 * and a first-order bound on |float32 output - reference|, from one backward pass through the
 * window per output that weights every float32 operation's rounding bound by the magnitude of its
 * adjoint (tolerance_gru.c lists the operations). The suites assert |out - ref| <= TOL_SAFETY x
 * bound with TOL_ASSERT (tolerance.h). */
#ifndef SIGSERVE_TOLERANCE_GRU_H
#define SIGSERVE_TOLERANCE_GRU_H

#include "tolerance.h"
#include "weights/rnn.h"

#include <stdint.h>

/* ROWS whole windows of IN (window x step_size floats each): REF and BOUND get rows x head.out
 * values. 0, or -1 when memory runs out. */
int tol_gru_window (const rnn_weights_t *w, const float *in, uint32_t rows, double *ref, double *bound);
/* A stream after COUNT steps of STEPS (the window of its last `window` steps, zeros before the
 * first): REF and BOUND get head.out values. 0, or -1 when memory runs out. */
int tol_gru_stream (const rnn_weights_t *w, const float *steps, uint64_t count, double *ref, double *bound);

#endif
