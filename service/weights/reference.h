/* The float64 references every backend is judged by: the forward pass of an MLP (weights.h) and of
 * an LSTM (lstm.h), written straight from the equations in double precision. The tests compare each
 * backend with them by a normalised error, and the persistent kernels check their warm-up answers
 * against them before a model is reported ready. Slow on purpose: never on a request's path. */
#ifndef SIGSERVE_REFERENCE_FORWARD_H
#define SIGSERVE_REFERENCE_FORWARD_H

#include "base/config.h"
#include "weights/lstm.h"
#include "weights/weights.h"

#include <stdint.h>

/* act (X) in float64. */
double reference_activate (activation_t a, double x);

/* A backend's warm-up check against a reference: adds to *NUM the squared differences of Y and REF
 * (N values; a non-finite difference adds infinity) and to *DEN the squares of REF, so that
 * sqrt (*num) / sqrt (*den) is the relative error over every call summed. */
void reference_error_sums (const float *y, const double *ref, size_t n, double *num, double *den);

/* An MLP: IN holds rows x input_size values, OUT gets rows x output_size values, both row-major.
 * 0 on success, -1 when its scratch rows cannot be allocated. */
int reference_forward (const weights_t *w, const float *in, uint32_t rows, double *out);

/* An LSTM over full windows: IN holds ROWS windows of window x step_size floats (oldest step
 * first), OUT gets ROWS x head.out values. 0, or -1 when memory runs out. */
int lstm_reference_window (const lstm_weights_t *w, const float *in, uint32_t rows, double *out);

/* An LSTM stream: STEPS holds COUNT steps of step_size floats (oldest first); OUT (head.out values)
 * gets the output for the window of the last `window` of them, zeros standing in for steps before
 * the first. 0, or -1 when memory runs out. */
int lstm_reference_stream (const lstm_weights_t *w, const float *steps, uint64_t count, double *out);

#endif
