/* Forward error bounds for the kernel checks (tolerance.h): computed in float64 next to the
 * reference, output by output.
 *
 * THE MODEL. u = 2^-24 (float32's unit roundoff). Each float32 operation is exact times (1 + d),
 * |d| <= u, plus an absolute eta <= 2^-149 where the result underflows. An inner product of n
 * terms summed in any order, each product rounded once or fused (FMA), splits, tree sums and
 * partial sums stored in float32 included, obeys
 *
 *     |fl(sum_i p_i) - sum_i p_i| <= gamma_n sum_i |p_i|,   gamma_n = n u / (1 - n u)
 *
 * (Higham, Accuracy and Stability of Numerical Algorithms, 3.1). A dense output b + w . x of n
 * inputs is a sum of n + 1 terms: gamma_{n+1} (|b| + |w| . |x|). Exact zeros added (the padding
 * of rows to whole vectors) round nothing. The float64 reference rounds too, by the same law with
 * 2^-53: tol_gamma adds its gamma, so the bound also covers |ref - exact|.
 *
 * Activations in float32: relu and none are exact; tanhf and expf are within 2 ulps (glibc; CUDA's
 * table), 1 / (1 + expf (-v)) adds an addition and a division (each correctly rounded): within 6 u
 * of the value, taken as 8 u. The LSTM kernels use faster ones, bounded below (s_sig_err).
 *
 * MLP. First a forward pass, layer k mapping a_{k-1} to a_k = act (z_k), z_k = W_k a_{k-1} + b_k,
 * with e_{k-1} bounding |a^_{k-1} - a_{k-1}| elementwise (e_0 = 0: the inputs are float32):
 *
 *     |z^_k - z_k| <= gamma_{n+1} (|b| + |W| (|a_{k-1}| + e_{k-1})) + |W| e_{k-1}  =: ez
 *
 * the layer's own rounding (on magnitudes no smaller than the computed inputs') and the inputs'
 * error carried through |W|; by the mean value theorem |act (z^) - act (z)| <= s ez, s the
 * largest |act'| over [z - ez, z + ez]: at most 1 for relu, none and tanh (1-Lipschitz), 1/4 for
 * the sigmoid, less where the interval lies away from 0, and 0 for a relu whose interval is all
 * negative (both are 0). So e_k = s ez + the activation's own error (8 u of |act| + s ez). That
 * bound is rigorous but blind to the signs of W: each layer multiplies it by the row sums of |W|
 * (sqrt (n) / 2 for these weights), and at the tests' shapes it let a kernel that drops a layer's
 * last input pass in every row. So it serves as the magnitudes of each unit's own rounding,
 * gamma_{n+1} (|b| + |W| (|a| + e)), and the output's bound weights those with the signed
 * derivatives of the output (a backward pass, as for the LSTM below):
 *
 *     |y^ - y| <= sum over units j of |dy / dz_j| (own rounding of z_j) + |dy / da_j| (act's)
 *
 * Weights held in f16 / bf16 (the persistent kernel's weight_dtype: each weight rounded to nearest
 * once, widened back to fp32 exactly, fp32 FMAs): |W~ - W| <= u_w |W| + eta_w elementwise (u_w =
 * 2^-11 and eta_w = 2^-25 for f16, 2^-8 and 2^-134 for bf16, as for the LSTM below), so a unit's
 * own error gains u_w |W| (|a| + e) + eta_w sum (|a| + e), the weights' rounding on the inputs as
 * computed, and its sum's rounding is taken on (1 + u_w) |W| (the rounded weights' magnitudes).
 * The reference stays the f32 weights' (the model as trained): the bound says how far a kernel
 * holding the rounded weights may be from it, to first order in u_w (the product of two layers'
 * weight roundings, u_w^2 relative, is left to TOL_SAFETY).
 * bf16 on the CPU (cpu_dense.h): the odd input's weight is the nearest fp32 whose low 16 bits are its
 * neighbour's bf16, within half the spacing of those values: 2^-8 |w| inside a binade, 2^-8 / (1 -
 * 2^-8) |w| across a power of two (the gap there is an ulp plus the low bits' worth), 2^-133 near
 * 0; the bound takes u_w = 2^-8 / (1 - 2^-8), eta_w = 2^-133 for every bf16 kernel.
 * INT8 (the CPU's int8, cpu_dense.h): each row o of W is held as s_o q (q integers in [-127, 127],
 * s_o = fl (max |w_o| / 127), q the nearest integer to fl (w fl (127 / max))): the two roundings
 * before q move w / s_o by 3 u 127 < 2^-10 at most, so |w~ - w| <= ew_o = max |w_o| / 127 (1 + u)
 * (1/2 + 2^-10). Each row of a layer's computed inputs a^ is held alike, x~ = s (u8 - zero), s = max
 * |a^| / Q, Q = 255 when no a^ is negative (zero 0), else 127 (zero 128): |x~ - a^| <= ex = A / Q
 * (1 + u) (1/2 + 2^-10), with A >= max |a^| (max (|a| + e)) and Q = 127 unless no a^ can be negative
 * (the layer below is relu or sigmoid, the inputs are, or every a - e >= 0): the larger step. The
 * sum of q (u8 - zero) is exact in int32; y = fl (fl ((float) D) fl (s_o s) + b) rounds three times:
 * gamma_3 (|b| + |W~| |x~|). So a unit's own error is
 *     ew_o sum |x~| + ex sum |w_o| + gamma_3 (|b| + sum (|w| + ew_o) |x~|),  |x~| <= |a| + e + ex
 * (w~ x~ - w a^ = (w~ - w) x~ + w (x~ - a^)), and the inputs' error is carried through |W| as above.
 * The activations' step is shared by the layer's units; the backward pass weighs each unit's share
 * by |dy / dz|, an upper bound still (the triangle inequality).
 * A relu whose interval holds 0 (it may switch) passes nothing back; its whole change, at most
 * ez, counts as its own error. Through relu and none the map from the rounding errors to y is
 * then linear over the whole region they span, so for such chains the bound is rigorous; tanh and
 * sigmoid make it first order (below). The last layer's activation takes the slope over its
 * interval, as in the forward pass.
 *
 * LSTM. The elementwise bound through a recurrence grows by the row sums of |W_hh| times the
 * gates' slopes at every step: at the small size (96 units) past 1 within ten steps and
 * over float64's range before step 16 of 64. So the bound keeps the signs: to first order in the
 * rounding errors d_s of every operation s,
 *
 *     y^ - y = sum_s (dy / dq_s) d_s,   |y^ - y| <= sum_s |dy / dq_s| |d_s|max
 *
 * where q_s is the quantity operation s computes and |d_s|max its bound from the model above;
 * the derivatives come from one backward pass through the window per output (the adjoint of the
 * LSTM, evaluated on the reference's trajectory). The operations, per layer, step and unit:
 *   gates z = b + W_ih x + W_hh h:  gamma_{in+H+1} (|b| + |W_ih| |x| + |W_hh| |h|), and when the
 *     kernel holds the weights in f16 / bf16 their rounding, |W~ - W| <= u_w |W| + eta_w:
 *     u_w (|W_ih| |x| + |W_hh| |h|) + eta_w (sum |x| + sum |h|), u_w = 2^-11 (f16; eta_w = 2^-25,
 *     its subnormals) or 2^-8 (bf16);
 *   i, f, o = sigmoid (z), g = tanh (z), tanh (c): s_sig_err, s_tanh_err;
 *   c' = f c + i g: gamma_2 (|f c| + |i g|);   h = o tanh (c'): u |h|;
 *   the head: gamma_{H+1} (|b| + |W| |h|), then its activation as in the MLP.
 *
 * HALF PRODUCTS (the CUDA kernel's SIG_LSTM_MATH_HALF, plan 3 in docs/lstm-notes.md: products
 * in the weights' type P, f16 or bf16). Each input is rounded to P, x~ = fl_P (x), |x~ - x| <= u_P
 * |x| + eta_P (u_P = 2^-11, eta_P = 2^-25 for f16; 2^-8, 2^-134 for bf16); a run of R =
 * TOL_HALF_RUN products w_i x~_i is summed in P by fused multiply-adds (each of its R operations
 * rounds once, the first onto +0), so |s_r - sum_r w x~| <= gamma_R (u_P) sum_r |w| |x~| + R eta_P
 * (Higham 3.1 again, in P); the runs, widened exactly, and the bias are summed in float32,
 * gamma_{n+1} (|b| + sum_r |s_r|), with sum_r |s_r| <= (1 + gamma_R (u_P)) (1 + u_P) |W| |x| + ...
 * <= (1 + 6 u_P) |W| |x| for R = 4. So a gate's n = in + H products (M = |W_ih| |x| + |W_hh| |h|,
 * on the weights the kernel holds: (1 + u_w) M for the rounded ones) add to its bound
 *     (u_P + gamma_R (u_P) (1 + u_P)) M + eta_P ((1 + gamma_R (u_P)) sum |w| + n)
 * and its float32 part becomes gamma_{n+1} (|b| + (1 + 6 u_P) M): for f16 5.0 x 2^-11 ~ 2.4e-3 of M
 * (the float32 sums' own n u is ~1e-5 at the sizes), for bf16 5.1 x 2^-8 ~ 2e-2. Rigorous per
 * gate like the float32 model, carried to the outputs by the same backward pass. Where the kernel
 * widens the products of a command's features instead (f16 features past its half_x_max), their
 * error is the float32 one, below this bound.
 * HOW TIGHT. Worst cases throughout: every sum of n terms is charged n u (rounding errors of
 * random data add up like sqrt (n) u), and every operation's error is taken at its bound and in
 * the same direction. Against the CPU backend over 2000 random rows, the largest error seen was
 * 1/600 to 1/7000 of the MLP bound at the tests' wide shapes (2/5 at 1-1-1, where there is
 * nothing to add up); the bound itself is 0.2% of the output of the demo's 512-256-64-1 (the
 * median row) and 0.02% of 293-597-31-33-1's. The LSTM's adds every gate of every step: ~1/3000
 * at the small size, the bound ~0.1% of the largest output. A dropped input still shows
 * (test_tolerance); an f16 rounding of an LSTM's weights does not, at the sizes.
 * Second-order terms (products of two rounding errors, the derivatives' change along the error)
 * are left out: relative to the bound they are of the order of the bound itself times the
 * derivatives' relative change, ~1e-5 here; TOL_SAFETY covers them. */
#include "tolerance.h"

#include "weights/reference.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define U32 0x1p-24     /* float32's unit roundoff */
#define U64 0x1p-53     /* float64's */
#define ETA 0x1p-149    /* float32's underflow: the smallest subnormal */

double tol_gamma (uint64_t n)
{
    const double a = (double) n * U32, b = (double) n * U64;
    assert (a < 0.5);
    return a / (1 - a) + b / (1 - b);
}

/* The largest |act'| over [z - e, z + e]; the derivatives of sigmoid and tanh fall with |z|, so
 * at the point of the interval nearest 0. */
static double s_slope (activation_t a, double z, double e)
{
    const double m = fmax (fabs (z) - e, 0.0);
    switch (a) {
    case ACTIVATION_RELU: return z + e > 0 ? 1.0 : 0.0;
    case ACTIVATION_SIGMOID: {
        const double s = 1.0 / (1.0 + exp (-m));
        return s * (1 - s);
    }
    case ACTIVATION_TANH: {
        const double t = tanh (m);
        return 1 - t * t;
    }
    default: return 1.0;
    }
}

/* The error of the backends' float32 activation (backend_activate, sig_activate) of a value of
 * magnitude MAG at most: 8 u relative (the header comment), and FLT_MIN absolute for a sigmoid
 * whose expf overflowed (0 for ~1e-39). */
static double s_act_error (activation_t a, double mag)
{
    return a == ACTIVATION_SIGMOID || a == ACTIVATION_TANH ? 8 * U32 * mag + FLT_MIN : 0.0;
}

/* ---- MLP ---- */

/* One row's trajectory, per unit of every layer (layer l's at off[l]): the pre-activation Z, the
 * value A, the rigorous bounds EZ on |z^ - z| and EA on |a^ - a| (the forward pass of the header
 * comment), and the bounds of the unit's own operations: RZ its sum's rounding, RA its
 * activation's. */
typedef struct {
    const weights_t *w;
    double uw, etaw;                /* the held weights: |W~ - W| <= uw |W| + etaw (0, 0: f32) */
    bool int8;                      /* int8 weights and activations (the header comment's INT8) */
    size_t *off;
    double *Z, *A, *EZ, *EA, *RZ, *RA;
    double *ab, *zb;                /* the backward pass: adjoints of a layer's values, of its z */
    double *block;
} mlp_run_t;

static int s_mlp_open (mlp_run_t *r, const weights_t *w, weight_dtype_t held)
{
    memset (r, 0, sizeof *r);
    r->w = w;
    /* bf16: the CPU's odd lanes (cpu_dense.h) are within 2^-8 / (1 - 2^-8) and 2^-133, plain rounding
     * within 2^-8 and 2^-134: the bound takes the larger */
    r->uw = held == WEIGHT_DTYPE_F16 ? 0x1p-11 : held == WEIGHT_DTYPE_BF16 ? 0x1p-8 / (1 - 0x1p-8) : 0.0;
    r->etaw = held == WEIGHT_DTYPE_F16 ? 0x1p-25 : held == WEIGHT_DTYPE_BF16 ? 0x1p-133 : 0.0;
    r->int8 = held == WEIGHT_DTYPE_INT8;
    r->off = malloc ((w->layer_count + 1) * sizeof *r->off);
    size_t units = 0;
    for (size_t l = 0; r->off && l < w->layer_count; l++) {
        r->off[l] = units;
        units += w->layers[l].out;
    }
    r->block = malloc ((6 * units + 2 * (size_t) w->widest) * sizeof (double));
    if (!r->off || !r->block) {
        free (r->off);
        free (r->block);
        return -1;
    }
    r->Z = r->block;
    r->A = r->Z + units;
    r->EZ = r->A + units;
    r->EA = r->EZ + units;
    r->RZ = r->EA + units;
    r->RA = r->RZ + units;
    r->ab = r->RA + units;
    r->zb = r->ab + w->widest;
    return 0;
}

/* INT8: the bound on |x~ - a^| for every input of layer L (the header comment): A / Q (1/2 + 2^-10),
 * A bounding the row's largest |a^|, Q 255 where no a^ can be negative, else 127. */
static double s_int8_input_error (const mlp_run_t *r, size_t l, const float *x)
{
    const dense_layer_t *L = &r->w->layers[l];
    const size_t below = l ? r->off[l - 1] : 0;
    const activation_t act = l ? r->w->layers[l - 1].activation : ACTIVATION_NONE;
    double A = 0;
    bool nonneg = act == ACTIVATION_RELU || act == ACTIVATION_SIGMOID;
    bool all = true;
    for (uint32_t i = 0; i < L->in; i++) {
        const double a = l ? r->A[below + i] : x[i], e = l ? r->EA[below + i] : 0.0;
        A = fmax (A, fabs (a) + e);
        all = all && a - e >= 0;
    }
    return A / (nonneg || all ? 255.0 : 127.0) * (1 + U32) * (0.5 + 0x1p-10);
}

static void s_mlp_forward (mlp_run_t *r, const float *x)
{
    const weights_t *w = r->w;
    for (size_t l = 0; l < w->layer_count; l++) {
        const dense_layer_t *L = &w->layers[l];
        const double g = tol_gamma ((uint64_t) L->in + 1);
        const size_t at = r->off[l], below = l ? r->off[l - 1] : 0;
        const double ex = r->int8 ? s_int8_input_error (r, l, x) : 0.0;
        for (uint32_t o = 0; o < L->out && r->int8; o++) {
            const float *row = L->weight + (size_t) o * L->in;
            double wmax = 0;
            for (uint32_t i = 0; i < L->in; i++)
                wmax = fmax (wmax, fabs ((double) row[i]));
            const double ew = wmax / 127 * (1 + U32) * (0.5 + 0x1p-10);
            double acc = L->bias[o], xq = 0, wabs = 0, mag = 0, carried = 0;
            for (uint32_t i = 0; i < L->in; i++) {
                const double a = l ? r->A[below + i] : x[i], e = l ? r->EA[below + i] : 0.0;
                const double wa = fabs ((double) row[i]), xa = fabs (a) + e + ex;    /* |x~| at most */
                acc += (double) row[i] * a;
                xq += xa;
                wabs += wa;
                mag += (wa + ew) * xa;
                carried += wa * e;
            }
            /* the weights' quantization on x~, the activations' through W, the three fp32 roundings
             * of the rescaling on |b| + |W~| |x~| */
            const double own = ew * xq + ex * wabs + tol_gamma (3) * (fabs ((double) L->bias[o]) + mag) + 3 * ETA;
            const double ez = own + carried;
            const double v = reference_activate (L->activation, acc), sl = s_slope (L->activation, acc, ez);
            r->Z[at + o] = acc;
            r->A[at + o] = v;
            r->EZ[at + o] = ez;
            r->RZ[at + o] = own;
            r->RA[at + o] = s_act_error (L->activation, fabs (v) + sl * ez);
            r->EA[at + o] = sl * ez + r->RA[at + o];
        }
        for (uint32_t o = 0; o < L->out && !r->int8; o++) {
            const float *row = L->weight + (size_t) o * L->in;
            /* the reference's sum, in its order (reference_forward's values bit for bit) */
            double acc = L->bias[o], mag = fabs ((double) L->bias[o]), carried = 0, wmag = 0, asum = 0;
            for (uint32_t i = 0; i < L->in; i++) {
                const double a = l ? r->A[below + i] : x[i], e = l ? r->EA[below + i] : 0.0;
                acc += (double) row[i] * a;
                const double wa = fabs ((double) row[i]);
                mag += wa * (fabs (a) + e);
                wmag += wa * (fabs (a) + e);
                asum += fabs (a) + e;
                carried += wa * e;
            }
            /* held in f16 / bf16: the weights' rounding (on the inputs as computed), and the sum's
             * rounding on the rounded weights' magnitudes (|W~| <= (1 + uw) |W| + etaw) */
            const double held = r->uw * wmag + r->etaw * asum;
            const double own = g * (mag + held) + held + (L->in + 1.0) * ETA, ez = own + carried;
            const double v = reference_activate (L->activation, acc), s = s_slope (L->activation, acc, ez);
            r->Z[at + o] = acc;
            r->A[at + o] = v;
            r->EZ[at + o] = ez;
            r->RZ[at + o] = own;
            r->RA[at + o] = s_act_error (L->activation, fabs (v) + s * ez);
            r->EA[at + o] = s * ez + r->RA[at + o];
        }
    }
}

/* The bound on the last layer's pre-activation O: its own rounding, and every unit below weighted
 * by the signed derivative of that pre-activation with respect to it (the backward pass). A relu
 * whose interval [z - ez, z + ez] holds 0 passes nothing back: its whole change, at most ez
 * (forward, rigorous), counts as its own error instead. */
static double s_mlp_backward (mlp_run_t *r, uint32_t o)
{
    const weights_t *w = r->w;
    const size_t last = w->layer_count - 1;
    double E = r->RZ[r->off[last] + o];
    const dense_layer_t *top = &w->layers[last];
    for (uint32_t i = 0; i < top->in; i++)
        r->ab[i] = top->weight[(size_t) o * top->in + i];
    for (size_t l = last; l-- > 0;) {
        const dense_layer_t *L = &w->layers[l];
        const size_t at = r->off[l];
        for (uint32_t j = 0; j < L->out; j++) {
            const double ab = r->ab[j], z = r->Z[at + j], a = r->A[at + j];
            double d = 1.0;
            E += fabs (ab) * r->RA[at + j];
            switch (L->activation) {
            case ACTIVATION_RELU:
                if (fabs (z) <= r->EZ[at + j]) {
                    E += fabs (ab) * r->EZ[at + j];
                    d = 0;
                } else
                    d = z > 0 ? 1.0 : 0.0;
                break;
            case ACTIVATION_SIGMOID: d = a * (1 - a); break;
            case ACTIVATION_TANH: d = 1 - a * a; break;
            default: break;
            }
            r->zb[j] = ab * d;
            if (d != 0)
                E += fabs (r->zb[j]) * r->RZ[at + j];
        }
        if (l == 0)
            break;
        memset (r->ab, 0, L->in * sizeof *r->ab);
        for (uint32_t j = 0; j < L->out; j++) {
            const double d = r->zb[j];
            if (d == 0)
                continue;
            const float *row = L->weight + (size_t) j * L->in;
            for (uint32_t i = 0; i < L->in; i++)
                r->ab[i] += row[i] * d;
        }
    }
    return E;
}

int tol_mlp (const weights_t *w, const float *in, uint32_t rows, double *ref, double *bound)
{
    return tol_mlp_held (w, WEIGHT_DTYPE_F32, in, rows, ref, bound);
}

int tol_mlp_held (const weights_t *w, weight_dtype_t held, const float *in, uint32_t rows, double *ref, double *bound)
{
    assert (w && w->layer_count >= 1);
    assert ((in && ref && bound) || rows == 0);
    mlp_run_t r;
    if (s_mlp_open (&r, w, held) != 0)
        return -1;
    const dense_layer_t *top = &w->layers[w->layer_count - 1];
    const size_t at = r.off[w->layer_count - 1];
    for (uint32_t row = 0; row < rows; row++) {
        s_mlp_forward (&r, in + (size_t) row * w->input_size);
        for (uint32_t o = 0; o < w->output_size; o++) {
            const double E = s_mlp_backward (&r, o), v = r.A[at + o], s = s_slope (top->activation, r.Z[at + o], E);
            ref[(size_t) row * w->output_size + o] = v;
            bound[(size_t) row * w->output_size + o] = s * E + s_act_error (top->activation, fabs (v) + s * E);
        }
    }
    free (r.off);
    free (r.block);
    return 0;
}

/* ---- LSTM ---- */

/* u x the absolute error of 1 / (1 + exp (-z)) as the LSTM kernels evaluate it in float32, at
 * most: the GPU's __fdividef (1, 1 + __expf (-z)) (__expf within 2 + 1.173 |z| ulps, __fdividef 2
 * ulps: CUDA's table; an ulp is at most 2 u relative); the CPU's Cephes expf (1 ulp) and IEEE
 * division are within it. With e = exp (-z) off by E u relative, 1 + e rounded and the quotient
 * off by D u, s^ = s (1 - (1 - s) d_e - d_1 + d_D) to first order (e / (1 + e) = 1 - s), so
 * |s^ - s| <= u s ((1 - s) E + 1 + D) with E = 4 + 2.4 |z|, D = 4. FLT_MIN for an overflowed
 * exp. */
static double s_sig_err (double z)
{
    const double s = 1.0 / (1.0 + exp (-z));
    return U32 * s * ((1 - s) * (4 + 2.4 * fabs (z)) + 5) + FLT_MIN;
}

/* tanh (z) = 2 sigmoid (2z) - 1 in both kernels: twice the sigmoid's error (2z and the doubling
 * are exact) and the subtraction's rounding. */
static double s_tanh_err (double z) { return 2 * s_sig_err (2 * z) + U32 * fabs (tanh (z)); }

static double s_sig (double x) { return 1.0 / (1.0 + exp (-x)); }

/* W . X in float64 in the reference's order (four partial sums), and sum |W X| in *MAG; sum |W| in
 * *WABS unless it is NULL. */
static double s_dot (const float *w, const double *x, uint32_t n, double *mag, double *wabs)
{
    if (wabs) {
        double s = 0;
        for (uint32_t i = 0; i < n; i++)
            s += fabs ((double) w[i]);
        *wabs = s;
    }
    double a[4] = { 0, 0, 0, 0 }, m = 0;
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) {
            const double p = (double) w[i + k] * x[i + k];
            a[k] += p;
            m += fabs (p);
        }
    for (; i < n; i++) {
        const double p = (double) w[i] * x[i];
        a[0] += p;
        m += fabs (p);
    }
    *mag = m;
    return (a[0] + a[1]) + (a[2] + a[3]);
}

static double s_abs_sum (const double *x, uint32_t n)
{
    double s = 0;
    for (uint32_t i = 0; i < n; i++)
        s += fabs (x[i]);
    return s;
}

/* gamma_n at unit roundoff U (the half products' type) */
static double s_gamma_in (uint64_t n, double u) { return (double) n * u / (1 - (double) n * u); }

/* One window's trajectory: per step t and layer k (index t L + k) the gates' pre-activations Z,
 * their values A (i, f, g, o; 4H each), the bound EZ on the gates' rounding, C and H. */
typedef struct {
    const lstm_weights_t *w;
    uint32_t T, L, H;
    double uw, etaw;                /* the held weights: |W~ - W| <= uw |W| + etaw */
    double up, etap;                /* half products: the type's unit roundoff and underflow (0: float32) */
    double *Z, *A, *EZ, *C, *Hs;
    double *x, *zero;               /* one step's inputs; zeros (max (step_size, H)) */
    double *hb, *cb, *zb;           /* the backward pass: adjoints of h and c per layer, of z */
    double *block;
} lstm_run_t;

static int s_run_open (lstm_run_t *r, const lstm_weights_t *w, weight_dtype_t held, weight_dtype_t products)
{
    memset (r, 0, sizeof *r);
    r->w = w;
    r->T = w->window;
    r->L = (uint32_t) w->layer_count;
    r->H = w->hidden;
    /* bf16 weights: the CPU's odd lanes (cpu_dense.h) as for the MLP, plain rounding within it */
    r->uw = held == WEIGHT_DTYPE_F16 ? 0x1p-11 : held == WEIGHT_DTYPE_BF16 ? 0x1p-8 / (1 - 0x1p-8) : 0.0;
    r->etaw = held == WEIGHT_DTYPE_F16 ? 0x1p-25 : held == WEIGHT_DTYPE_BF16 ? 0x1p-133 : 0.0;
    r->up = products == WEIGHT_DTYPE_F16 ? 0x1p-11 : products == WEIGHT_DTYPE_BF16 ? 0x1p-8 : 0.0;
    r->etap = products == WEIGHT_DTYPE_F16 ? 0x1p-25 : products == WEIGHT_DTYPE_BF16 ? 0x1p-134 : 0.0;
    const size_t steps = (size_t) r->T * r->L, H = r->H, wide = w->step_size > H ? w->step_size : H;
    const size_t n = steps * 14 * H + 2 * wide + 2 * r->L * H + 4 * H;
    r->block = calloc (n, sizeof (double));
    if (!r->block)
        return -1;
    r->Z = r->block;
    r->A = r->Z + steps * 4 * H;
    r->EZ = r->A + steps * 4 * H;
    r->C = r->EZ + steps * 4 * H;
    r->Hs = r->C + steps * H;
    r->x = r->Hs + steps * H;
    r->zero = r->x + wide;
    r->hb = r->zero + wide;
    r->cb = r->hb + r->L * H;
    r->zb = r->cb + r->L * H;
    return 0;
}

/* The forward pass over STEPS (NULL: a zero step), the reference's arithmetic, and the gates'
 * rounding bounds. */
static void s_lstm_forward (lstm_run_t *r, const float *const *steps)
{
    const uint32_t H = r->H, L = r->L;
    for (uint32_t t = 0; t < r->T; t++)
        for (uint32_t k = 0; k < L; k++) {
            const lstm_layer_t *Lk = &r->w->layers[k];
            const size_t at = (size_t) t * L + k;
            const double *x = r->x;
            if (k == 0)
                for (uint32_t i = 0; i < Lk->in; i++)
                    r->x[i] = steps[t] ? steps[t][i] : 0.0;
            else
                x = r->Hs + (at - 1) * H;
            const double *hp = t ? r->Hs + (at - L) * H : r->zero, *cp = t ? r->C + (at - L) * H : r->zero;
            const double g = tol_gamma ((uint64_t) Lk->in + H + 1), sums = s_abs_sum (x, Lk->in) + s_abs_sum (hp, H);
            /* half products (0 for float32 ones: the bound is then exactly the float32 one) */
            const double gp = s_gamma_in (TOL_HALF_RUN, r->up), half = r->up + gp * (1 + r->up), grow = 1 + 6 * r->up;
            const bool halfp = r->up > 0;
            double *z = r->Z + at * 4 * H, *a = r->A + at * 4 * H, *ez = r->EZ + at * 4 * H;
            for (uint32_t q = 0; q < 4 * H; q++) {
                double mi, mh, wi = 0, wh = 0;
                const double di = s_dot (Lk->w_ih + (size_t) q * Lk->in, x, Lk->in, &mi, halfp ? &wi : NULL);
                const double dh = s_dot (Lk->w_hh + (size_t) q * H, hp, H, &mh, halfp ? &wh : NULL);
                z[q] = Lk->bias[q] + di + dh;
                ez[q] = g * (fabs ((double) Lk->bias[q]) + grow * (mi + mh)) + r->uw * (mi + mh) + r->etaw * sums
                        + (Lk->in + H + 1.0) * ETA;
                if (halfp) {   /* on the held weights' magnitudes: (1 + uw) |W| + etaw */
                    const double M = (1 + r->uw) * (mi + mh) + r->etaw * sums;
                    const double wabs = (1 + r->uw) * (wi + wh) + r->etaw * (Lk->in + H);
                    ez[q] += half * M + r->etap * ((1 + gp) * wabs + Lk->in + H);
                }
            }
            double *c = r->C + at * H, *h = r->Hs + at * H;
            for (uint32_t j = 0; j < H; j++) {
                const double i = s_sig (z[j]), f = s_sig (z[H + j]), gg = tanh (z[2 * H + j]), o = s_sig (z[3 * H + j]);
                a[j] = i;
                a[H + j] = f;
                a[2 * H + j] = gg;
                a[3 * H + j] = o;
                c[j] = f * cp[j] + i * gg;
                h[j] = o * tanh (c[j]);
            }
        }
}

/* The first-order bound on the head's pre-activation for output O (the header comment): one
 * backward pass from it through the window, every operation's rounding bound weighted by the
 * magnitude of its adjoint. */
static double s_lstm_backward (lstm_run_t *r, uint32_t o)
{
    const uint32_t H = r->H, L = r->L;
    const double g2 = tol_gamma (2);
    memset (r->hb, 0, (size_t) L * H * sizeof (double));
    memset (r->cb, 0, (size_t) L * H * sizeof (double));
    const float *hw = r->w->head.weight + (size_t) o * H;
    for (uint32_t j = 0; j < H; j++)
        r->hb[(size_t) (L - 1) * H + j] = hw[j];
    double E = 0;
    for (uint32_t t = r->T; t-- > 0;)
        for (uint32_t k = L; k-- > 0;) {
            const lstm_layer_t *Lk = &r->w->layers[k];
            const size_t at = (size_t) t * L + k;
            const double *a = r->A + at * 4 * H, *z = r->Z + at * 4 * H, *ez = r->EZ + at * 4 * H;
            const double *c = r->C + at * H, *cp = t ? r->C + (at - L) * H : r->zero;
            double *hb = r->hb + (size_t) k * H, *cb = r->cb + (size_t) k * H, *zb = r->zb;
            for (uint32_t j = 0; j < H; j++) {
                const double i = a[j], f = a[H + j], g = a[2 * H + j], oo = a[3 * H + j], tc = tanh (c[j]);
                const double hbar = hb[j], tcbar = hbar * oo, obar = hbar * tc;
                const double cbar = tcbar * (1 - tc * tc) + cb[j];
                const double ibar = cbar * g, fbar = cbar * cp[j], gbar = cbar * i;
                cb[j] = cbar * f;
                E += fabs (hbar) * U32 * fabs (oo * tc) + fabs (tcbar) * s_tanh_err (c[j])
                     + fabs (cbar) * g2 * (fabs (f * cp[j]) + fabs (i * g));
                E += fabs (ibar) * s_sig_err (z[j]) + fabs (fbar) * s_sig_err (z[H + j])
                     + fabs (gbar) * s_tanh_err (z[2 * H + j]) + fabs (obar) * s_sig_err (z[3 * H + j]);
                zb[j] = ibar * i * (1 - i);
                zb[H + j] = fbar * f * (1 - f);
                zb[2 * H + j] = gbar * (1 - g * g);
                zb[3 * H + j] = obar * oo * (1 - oo);
                for (int q = 0; q < 4; q++)
                    E += fabs (zb[(size_t) q * H + j]) * ez[(size_t) q * H + j];
            }
            /* to h of this layer one step back, and to this step's input: the layer below's h */
            memset (hb, 0, H * sizeof *hb);
            for (uint32_t q = 0; q < 4 * H; q++) {
                const double d = zb[q];
                if (d == 0)
                    continue;
                if (t > 0) {
                    const float *wh = Lk->w_hh + (size_t) q * H;
                    for (uint32_t j = 0; j < H; j++)
                        hb[j] += wh[j] * d;
                }
                if (k > 0) {
                    const float *wi = Lk->w_ih + (size_t) q * Lk->in;
                    double *below = r->hb + (size_t) (k - 1) * H;
                    for (uint32_t j = 0; j < Lk->in; j++)
                        below[j] += wi[j] * d;
                }
            }
        }
    return E;
}

/* One window (STEPS[t], NULL for zeros): REF and BOUND get head.out values. */
static void s_lstm_one (lstm_run_t *r, const float *const *steps, double *ref, double *bound)
{
    s_lstm_forward (r, steps);
    const dense_layer_t *hd = &r->w->head;
    const uint32_t H = r->H;
    const double *last = r->Hs + ((size_t) (r->T - 1) * r->L + r->L - 1) * H;
    for (uint32_t o = 0; o < hd->out; o++) {
        double acc = hd->bias[o], mag = fabs ((double) hd->bias[o]);
        for (uint32_t i = 0; i < H; i++) {
            acc += (double) hd->weight[(size_t) o * H + i] * last[i];
            mag += fabs ((double) hd->weight[(size_t) o * H + i] * last[i]);
        }
        const double E = s_lstm_backward (r, o) + tol_gamma ((uint64_t) H + 1) * mag + (H + 1.0) * ETA;
        const double v = reference_activate (hd->activation, acc), s = s_slope (hd->activation, acc, E);
        ref[o] = v;
        bound[o] = s * E + s_act_error (hd->activation, fabs (v) + s * E);
    }
}

int tol_lstm_window (const lstm_weights_t *w, weight_dtype_t held, const float *in, uint32_t rows, double *ref,
                     double *bound)
{
    return tol_lstm_window_products (w, held, WEIGHT_DTYPE_F32, in, rows, ref, bound);
}

int tol_lstm_window_products (const lstm_weights_t *w, weight_dtype_t held, weight_dtype_t products, const float *in,
                              uint32_t rows, double *ref, double *bound)
{
    assert (w && w->layer_count >= 1);
    lstm_run_t r;
    const float **steps = malloc (w->window * sizeof *steps);
    if (!steps || s_run_open (&r, w, held, products) != 0) {
        free (steps);
        return -1;
    }
    for (uint32_t row = 0; row < rows; row++) {
        for (uint32_t t = 0; t < w->window; t++)
            steps[t] = in + ((size_t) row * w->window + t) * w->step_size;
        s_lstm_one (&r, steps, ref + (size_t) row * w->head.out, bound + (size_t) row * w->head.out);
    }
    free (r.block);
    free (steps);
    return 0;
}

int tol_lstm_stream (const lstm_weights_t *w, weight_dtype_t held, const float *steps, uint64_t count, double *ref,
                     double *bound)
{
    return tol_lstm_stream_products (w, held, WEIGHT_DTYPE_F32, steps, count, ref, bound);
}

int tol_lstm_stream_products (const lstm_weights_t *w, weight_dtype_t held, weight_dtype_t products, const float *steps,
                              uint64_t count, double *ref, double *bound)
{
    assert (w && w->layer_count >= 1);
    lstm_run_t r;
    const float **window = malloc (w->window * sizeof *window);
    if (!window || s_run_open (&r, w, held, products) != 0) {
        free (window);
        return -1;
    }
    /* the last W steps, zeros (NULL) before the first, as lstm_reference_stream */
    for (uint32_t t = 0; t < w->window; t++) {
        const int64_t i = (int64_t) count - (int64_t) w->window + t;
        window[t] = i >= 0 ? steps + (size_t) i * w->step_size : NULL;
    }
    s_lstm_one (&r, window, ref, bound);
    free (r.block);
    free (window);
    return 0;
}

float tol_round (float v, weight_dtype_t d)
{
    if (d == WEIGHT_DTYPE_F16)
        return (float) (_Float16) v;
    if (d == WEIGHT_DTYPE_BF16) {
        uint32_t u;
        memcpy (&u, &v, 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy (&v, &u, 4);
    }
    return v;
}

void tol_round_mlp (weights_t *w, weight_dtype_t d)
{
    for (size_t k = 0; k < w->layer_count; k++) {
        dense_layer_t *L = &w->layers[k];
        for (size_t i = 0; i < (size_t) L->out * L->in; i++)
            L->weight[i] = tol_round (L->weight[i], d);
    }
}

void tol_round_lstm (lstm_weights_t *w, weight_dtype_t d)
{
    for (size_t k = 0; k < w->layer_count; k++) {
        lstm_layer_t *L = &w->layers[k];
        for (size_t i = 0; i < 4 * (size_t) L->hidden * L->in; i++)
            L->w_ih[i] = tol_round (L->w_ih[i], d);
        for (size_t i = 0; i < 4 * (size_t) L->hidden * L->hidden; i++)
            L->w_hh[i] = tol_round (L->w_hh[i], d);
    }
}

/* ---- for the bounds of other recurrent types (tolerance_gru.c) ---- */

double tol_sig_err (double z) { return s_sig_err (z); }
double tol_tanh_err (double z) { return s_tanh_err (z); }
double tol_slope (activation_t a, double z, double e) { return s_slope (a, z, e); }
double tol_act_error (activation_t a, double mag) { return s_act_error (a, mag); }

/* ---- the check ---- */

size_t tol_outside (const float *out, const double *ref, const double *bound, size_t n, double *worst)
{
    size_t first = n;
    double most = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs ((double) out[i] - ref[i]), lim = TOL_SAFETY * bound[i];
        if (!(d <= lim) && first == n)
            first = i;
        const double q = d == 0 ? 0 : lim > 0 ? d / lim : INFINITY;
        most = isnan (q) ? INFINITY : fmax (most, q);
    }
    if (worst)
        *worst = most;
    return first;
}

void tol_pair (const float *a, const double *bound, size_t n, double *as_ref, double *bound2)
{
    for (size_t i = 0; i < n; i++) {
        as_ref[i] = a[i];
        bound2[i] = 2 * bound[i];
    }
}

const char *tol_describe (const float *out, const double *ref, const double *bound, size_t i, size_t row_len)
{
    static __thread char text[320];
    const double d = fabs ((double) out[i] - ref[i]);
    row_len = row_len ? row_len : 1;
    snprintf (text, sizeof text, "row %zu output %zu: %.9g, reference %.9g, bound %g x %.3g (error %.3g, %.3g times "
              "the bound)", i / row_len, i % row_len, out[i], ref[i], TOL_SAFETY, bound[i], d,
              d / (TOL_SAFETY * bound[i]));
    return text;
}
