/* Tolerances from the condition: how far a float32 kernel's output may be from the float64
 * reference (weights/reference.h), output by output, for the data it ran on. Every kernel check of
 * the suites asserts |out - ref| <= TOL_SAFETY x bound for each output, where the bound is a
 * forward error bound computed in float64 alongside the reference (tolerance.c derives it):
 *
 *   an inner product of n terms in float32, in any order, with or without FMA:
 *       |fl(w . x) - w . x| <= gamma_n (|w| . |x|),   gamma_n = n u / (1 - n u),   u = 2^-24
 *
 * so the bound scales with the magnitudes that went into an output, not with the output itself:
 * an output that cancels to near zero keeps the bound of the sums it came from. A fixed relative
 * tolerance (the suites' old 1e-5) fails such an output however right it is, and passes a wrong
 * output that is large. Each operation's rounding bound (magnitudes from a forward pass through
 * |W|) is weighted by the signed derivative of the output with respect to it (a backward pass):
 * rigorous for MLPs of relu and none layers, first order where tanh, sigmoid or an LSTM cell come
 * in; tolerance.c derives both, and says how tight they are. TOL_SAFETY covers what the bounds
 * leave out: second-order terms, and library functions a few ulps worse than stated. */
#ifndef SIGSERVE_TOLERANCE_H
#define SIGSERVE_TOLERANCE_H

#include "base/config.h"
#include "weights/lstm.h"
#include "weights/weights.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOL_SAFETY 2.0

/* gamma_n of float32 (plus float64's, for the reference's own rounding). */
double tol_gamma (uint64_t n);

/* An MLP (weights_t of type mlp) on ROWS rows of IN: REF gets the float64 reference (the values
 * reference_forward gives, bit for bit), BOUND the bound on |float32 output - REF|, rows x
 * output_size each. 0, or -1 when memory runs out. */
int tol_mlp (const weights_t *w, const float *in, uint32_t rows, double *ref, double *bound);
/* The same for a kernel that holds the weights in HELD (f16, bf16: each weight rounded to nearest,
 * widened to fp32 exactly, fp32 arithmetic): REF stays the f32 weights' reference; BOUND adds the
 * weights' rounding, u_w |W| |x| + eta_w sum |x| per unit (u_w = 2^-11 for f16, 2^-8 for bf16),
 * carried to the outputs like every other rounding. HELD int8: the CPU's int8 (weights per row and each
 * layer's activations per row quantized to 8 bits, exact integer sums; tolerance.c derives it). HELD
 * f32: tol_mlp. */
int tol_mlp_held (const weights_t *w, weight_dtype_t held, const float *in, uint32_t rows, double *ref, double *bound);

/* An LSTM over full windows (lstm_reference_window's values in REF) and a stream's output for the
 * window of its last `window` steps (lstm_reference_stream's): the bound on the float32 output of
 * a kernel that holds W_ih and W_hh in HELD (f32: W itself; f16, bf16: W rounded to nearest in
 * that type, the rounding added to the bound: REF stays the f32 weights' reference). To bound a
 * kernel against the reference of the rounded weights themselves, pass those with f32. 0, or -1
 * when memory runs out. */
int tol_lstm_window (const lstm_weights_t *w, weight_dtype_t held, const float *in, uint32_t rows, double *ref,
                     double *bound);
int tol_lstm_stream (const lstm_weights_t *w, weight_dtype_t held, const float *steps, uint64_t count, double *ref,
                     double *bound);

/* The same for a kernel whose gate products are in half precision (the CUDA kernel's
 * SIG_LSTM_MATH_HALF): PRODUCTS f16 or bf16, the inputs x and h rounded to it and every run of
 * TOL_HALF_RUN products summed in it (fused multiply-adds), the runs summed in float32; the bound
 * adds the inputs' rounding and the runs' (tolerance.c derives it). PRODUCTS f32: the functions above,
 * bound for bound. */
#define TOL_HALF_RUN 4
int tol_lstm_window_products (const lstm_weights_t *w, weight_dtype_t held, weight_dtype_t products, const float *in,
                              uint32_t rows, double *ref, double *bound);
int tol_lstm_stream_products (const lstm_weights_t *w, weight_dtype_t held, weight_dtype_t products, const float *steps,
                              uint64_t count, double *ref, double *bound);

/* The pieces of these bounds that other recurrent types' bounds reuse (tolerance_gru.c): the
 * recurrent kernels' float32 sigmoid and tanh of Z, their absolute errors at most; the largest
 * |act'| over [Z - E, Z + E]; and the error of the backends' float32 activation A of a value of
 * magnitude MAG. */
double tol_sig_err (double z);
double tol_tanh_err (double z);
double tol_slope (activation_t a, double z, double e);
double tol_act_error (activation_t a, double mag);

/* V as a kernel holding weights in D holds it: rounded to nearest even in f16 or bf16 (f32: V). */
float tol_round (float v, weight_dtype_t d);
/* Every weight matrix of an MLP (the biases stay f32, as the persistent kernel holds them) rounded to
 * D: the weights a kernel holding D computes with. */
void tol_round_mlp (weights_t *w, weight_dtype_t d);
/* W_ih and W_hh of W (biases and the head stay f32, as the CUDA LSTM kernel holds them) rounded
 * to D: the weights a kernel holding D computes with. */
void tol_round_lstm (lstm_weights_t *w, weight_dtype_t d);

/* The first i < N with |OUT[i] - REF[i]| > TOL_SAFETY x BOUND[i] (NaN is outside), or N. WORST
 * (may be NULL) gets the largest |out - ref| / (TOL_SAFETY x bound) over all N: at most 1 when
 * every output is within. */
size_t tol_outside (const float *out, const double *ref, const double *bound, size_t n, double *worst);

/* For checking two float32 outputs of the same function with each other (two kernels; a stream and
 * the same window in full), each within BOUND of the reference: AS_REF gets A as doubles and
 * BOUND2 twice BOUND, so TOL_ASSERT (b, as_ref, bound2, ...) checks |b - a| <= 2 x TOL_SAFETY x
 * bound. */
void tol_pair (const float *a, const double *bound, size_t n, double *as_ref, double *bound2);

/* Output I for a message, ROW_LEN outputs a row: "row R output O: OUT, reference REF, bound
 * TOL_SAFETY x B (error E, X times the bound)". A buffer of the calling thread's: one at a time. */
const char *tol_describe (const float *out, const double *ref, const double *bound, size_t i, size_t row_len);

/* The check itself, in the suites: each of N outputs (ROW_LEN a row) within its bound, or the test
 * fails with the printf-style label, then the first output outside, its value, reference and
 * bound. Needs <check.h>. */
#define TOL_ASSERT(out, ref, bound, n, row_len, ...)                                                         \
    do {                                                                                                    \
        const size_t tol_n_ = (n);                                                                          \
        const size_t tol_bad_ = tol_outside ((out), (ref), (bound), tol_n_, NULL);                          \
        if (tol_bad_ < tol_n_) {                                                                            \
            char tol_label_[512];                                                                           \
            snprintf (tol_label_, sizeof tol_label_, __VA_ARGS__);                                          \
            ck_abort_msg ("%s: %s", tol_label_, tol_describe ((out), (ref), (bound), tol_bad_, (row_len))); \
        }                                                                                                   \
    } while (0)

#endif
