/* The GRU's bounds (tolerance_gru.h), derived as tolerance.c derives the LSTM's: to first order in
 * the rounding errors d_s of every float32 operation s,
 *
 *     |y^ - y| <= sum_s |dy / dq_s| |d_s|max
 *
 * with the derivatives from one backward pass (the GRU's adjoint, on the reference's trajectory).
 * The operations, per layer, step and unit (u = 2^-24, gamma_n = n u / (1 - n u)):
 *   r's and z's pre-activation a = b_i + b_h + W_i x + W_h h, summed in any order (the biases summed
 *     at load, the step's W_i x apart from the state's W_h h + b_h): gamma_{in+H+3} (|b_i| + |b_h| +
 *     |W_i| |x| + |W_h| |h|);
 *   n's: gi = b_in + W_in x, gamma_{in+1} (|b_in| + |W_in| |x|); m = b_hn + W_hn h,
 *     gamma_{H+1} (|b_hn| + |W_hn| |h|); a = gi + r m: u (|r m| + |a|);
 *   r, z = sigmoid (a), n = tanh (a): tol_sig_err, tol_tanh_err (the LSTM kernels' functions, which
 *     the GRU CPU backend shares: backends/vec16.h);
 *   h' = n + z (h - n): u (|h'| + 2 |z| |h - n|) (the subtraction, the product and the sum);
 *   the head: gamma_{H+1} (|b| + |W| |h|), then its activation as in the MLP.
 * The adjoints, from h'bar: nbar = h'bar (1 - z), zbar = h'bar (h - n), hbar += h'bar z; abar_n =
 * nbar (1 - n^2), rbar = abar_n m, mbar = abar_n r; abar_r = rbar r (1 - r), abar_z = zbar z (1 - z);
 * then through W_h to h one step back and through W_i to the layer below. TOL_SAFETY covers the
 * second-order terms, as for the LSTM. */
#include "tolerance_gru.h"

#include "weights/reference.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 0x1p-24     /* float32's unit roundoff */
#define ETA 0x1p-149    /* float32's underflow: the smallest subnormal */

static double s_sig (double x) { return 1.0 / (1.0 + exp (-x)); }

/* W . X in float64, and sum |W X| in *MAG (the reference's own order: one running sum) */
static double s_dot (const float *w, const double *x, uint32_t n, double *mag)
{
    double a = 0, m = 0;
    for (uint32_t i = 0; i < n; i++) {
        const double p = (double) w[i] * x[i];
        a += p;
        m += fabs (p);
    }
    *mag = m;
    return a;
}

/* One window's trajectory: per step t and layer k (index t L + k), for each unit: the gates' values
 * R, Z, N, their pre-activations AR, AZ, AN, n's recurrent part M, the rounding bounds ER, EZ (r's
 * and z's sums), EI (n's input sum), EM (m), and the hidden state HS. */
typedef struct {
    const rnn_weights_t *w;
    uint32_t T, L, H;
    double *R, *Z, *N, *AR, *AZ, *AN, *M, *ER, *EZ, *EI, *EM, *HS;
    double *x, *zero;               /* one step's inputs; zeros (max (step_size, H)) */
    double *hb, *gib, *ghb;         /* the backward pass: adjoints of h per layer, of the two sums per gate */
    double *block;
} gru_run_t;

static int s_open (gru_run_t *r, const rnn_weights_t *w)
{
    memset (r, 0, sizeof *r);
    r->w = w;
    r->T = w->window;
    r->L = (uint32_t) w->layer_count;
    r->H = w->hidden;
    const size_t steps = (size_t) r->T * r->L, H = r->H, wide = w->step_size > H ? w->step_size : H;
    r->block = calloc (steps * 12 * H + 2 * wide + r->L * H + 6 * H, sizeof (double));
    if (!r->block)
        return -1;
    double **at[] = { &r->R, &r->Z, &r->N, &r->AR, &r->AZ, &r->AN, &r->M, &r->ER, &r->EZ, &r->EI, &r->EM, &r->HS };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        *at[i] = r->block + i * steps * H;
    r->x = r->block + 12 * steps * H;
    r->zero = r->x + wide;
    r->hb = r->zero + wide;
    r->gib = r->hb + r->L * H;
    r->ghb = r->gib + 3 * H;
    return 0;
}

/* The forward pass over STEPS (NULL: a zero step), the reference's arithmetic, and the sums' bounds. */
static void s_forward (gru_run_t *r, const float *const *steps)
{
    const uint32_t H = r->H, L = r->L;
    for (uint32_t t = 0; t < r->T; t++)
        for (uint32_t k = 0; k < L; k++) {
            const rnn_layer_t *Lk = &r->w->layers[k];
            const size_t at = ((size_t) t * L + k) * H;
            const double *x = r->x;
            if (k == 0)
                for (uint32_t i = 0; i < Lk->in; i++)
                    r->x[i] = steps[t] ? steps[t][i] : 0.0;
            else
                x = r->HS + at - H;
            const double *hp = t ? r->HS + at - (size_t) L * H : r->zero;
            const double g_rz = tol_gamma ((uint64_t) Lk->in + H + 3), g_i = tol_gamma ((uint64_t) Lk->in + 1);
            const double g_m = tol_gamma ((uint64_t) H + 1);
            for (uint32_t j = 0; j < H; j++) {
                double gi[3], gh[3], mi[3], mh[3];
                for (int q = 0; q < 3; q++) {
                    const size_t row = (size_t) q * H + j;
                    gi[q] = Lk->bias_ih[row] + s_dot (Lk->w_ih + row * Lk->in, x, Lk->in, &mi[q]);
                    gh[q] = Lk->bias_hh[row] + s_dot (Lk->w_hh + row * H, hp, H, &mh[q]);
                }
                const double ar = gi[0] + gh[0], az = gi[1] + gh[1], an = gi[2] + s_sig (ar) * gh[2];
                const double rr = s_sig (ar), zz = s_sig (az), nn = tanh (an);
                r->AR[at + j] = ar;
                r->AZ[at + j] = az;
                r->AN[at + j] = an;
                r->R[at + j] = rr;
                r->Z[at + j] = zz;
                r->N[at + j] = nn;
                r->M[at + j] = gh[2];
                r->HS[at + j] = (1 - zz) * nn + zz * hp[j];
                for (int q = 0; q < 2; q++) {
                    const size_t row = (size_t) q * H + j;
                    const double e = g_rz * (fabs ((double) Lk->bias_ih[row]) + fabs ((double) Lk->bias_hh[row]) + mi[q]
                                             + mh[q]) + (Lk->in + H + 3.0) * ETA;
                    (q == 0 ? r->ER : r->EZ)[at + j] = e;
                }
                r->EI[at + j] = g_i * (fabs ((double) Lk->bias_ih[2 * H + j]) + mi[2]) + (Lk->in + 1.0) * ETA;
                r->EM[at + j] = g_m * (fabs ((double) Lk->bias_hh[2 * H + j]) + mh[2]) + (H + 1.0) * ETA;
            }
        }
}

/* The first-order bound on the head's pre-activation for output O (the header comment). */
static double s_backward (gru_run_t *r, uint32_t o)
{
    const uint32_t H = r->H, L = r->L;
    memset (r->hb, 0, (size_t) L * H * sizeof (double));
    const float *hw = r->w->head.weight + (size_t) o * H;
    for (uint32_t j = 0; j < H; j++)
        r->hb[(size_t) (L - 1) * H + j] = hw[j];
    double E = 0;
    for (uint32_t t = r->T; t-- > 0;)
        for (uint32_t k = L; k-- > 0;) {
            const rnn_layer_t *Lk = &r->w->layers[k];
            const size_t at = ((size_t) t * L + k) * H;
            const double *hp = t ? r->HS + at - (size_t) L * H : r->zero;
            double *hb = r->hb + (size_t) k * H;
            for (uint32_t j = 0; j < H; j++) {
                const double rr = r->R[at + j], zz = r->Z[at + j], nn = r->N[at + j], m = r->M[at + j];
                const double hbar = hb[j], d = hp[j] - nn;
                const double nbar = hbar * (1 - zz), zbar = hbar * d;
                const double anbar = nbar * (1 - nn * nn), rbar = anbar * m, mbar = anbar * rr;
                const double arbar = rbar * rr * (1 - rr), azbar = zbar * zz * (1 - zz);
                E += fabs (hbar) * U32 * (fabs (r->HS[at + j]) + 2 * fabs (zz) * fabs (d));
                E += fabs (nbar) * tol_tanh_err (r->AN[at + j]) + fabs (zbar) * tol_sig_err (r->AZ[at + j])
                     + fabs (rbar) * tol_sig_err (r->AR[at + j]);
                E += fabs (anbar) * (r->EI[at + j] + U32 * (fabs (rr * m) + fabs (r->AN[at + j])))
                     + fabs (mbar) * r->EM[at + j] + fabs (arbar) * r->ER[at + j] + fabs (azbar) * r->EZ[at + j];
                r->gib[j] = arbar;
                r->gib[H + j] = azbar;
                r->gib[2 * H + j] = anbar;
                r->ghb[j] = arbar;
                r->ghb[H + j] = azbar;
                r->ghb[2 * H + j] = mbar;
                hb[j] = hbar * zz;      /* h' = (1 - z) n + z h: to h one step back, directly */
            }
            /* through W_hh to h one step back, through W_ih to this step's input (the layer below's h) */
            for (uint32_t q = 0; q < 3 * H; q++) {
                if (t > 0 && r->ghb[q] != 0) {
                    const float *wh = Lk->w_hh + (size_t) q * H;
                    for (uint32_t j = 0; j < H; j++)
                        hb[j] += wh[j] * r->ghb[q];
                }
                if (k > 0 && r->gib[q] != 0) {
                    const float *wi = Lk->w_ih + (size_t) q * Lk->in;
                    double *below = r->hb + (size_t) (k - 1) * H;
                    for (uint32_t j = 0; j < Lk->in; j++)
                        below[j] += wi[j] * r->gib[q];
                }
            }
        }
    return E;
}

/* One window (STEPS[t], NULL for zeros): REF and BOUND get head.out values. */
static void s_one (gru_run_t *r, const float *const *steps, double *ref, double *bound)
{
    s_forward (r, steps);
    const dense_layer_t *hd = &r->w->head;
    const uint32_t H = r->H;
    const double *last = r->HS + ((size_t) (r->T - 1) * r->L + r->L - 1) * H;
    for (uint32_t o = 0; o < hd->out; o++) {
        double mag;
        const double acc = hd->bias[o] + s_dot (hd->weight + (size_t) o * H, last, H, &mag);
        mag += fabs ((double) hd->bias[o]);
        const double E = s_backward (r, o) + tol_gamma ((uint64_t) H + 1) * mag + (H + 1.0) * ETA;
        const double v = reference_activate (hd->activation, acc), s = tol_slope (hd->activation, acc, E);
        ref[o] = v;
        bound[o] = s * E + tol_act_error (hd->activation, fabs (v) + s * E);
    }
}

int tol_gru_window (const rnn_weights_t *w, const float *in, uint32_t rows, double *ref, double *bound)
{
    assert (w && w->layer_count >= 1 && w->gates == 3);
    gru_run_t r;
    const float **steps = malloc (w->window * sizeof *steps);
    if (!steps || s_open (&r, w) != 0) {
        free (steps);
        return -1;
    }
    for (uint32_t row = 0; row < rows; row++) {
        for (uint32_t t = 0; t < w->window; t++)
            steps[t] = in + ((size_t) row * w->window + t) * w->step_size;
        s_one (&r, steps, ref + (size_t) row * w->head.out, bound + (size_t) row * w->head.out);
    }
    free (r.block);
    free (steps);
    return 0;
}

int tol_gru_stream (const rnn_weights_t *w, const float *steps, uint64_t count, double *ref, double *bound)
{
    assert (w && w->layer_count >= 1 && w->gates == 3);
    gru_run_t r;
    const float **window = malloc (w->window * sizeof *window);
    if (!window || s_open (&r, w) != 0) {
        free (window);
        return -1;
    }
    for (uint32_t t = 0; t < w->window; t++) {
        const int64_t i = (int64_t) count - (int64_t) w->window + t;
        window[t] = i >= 0 ? steps + (size_t) i * w->step_size : NULL;
    }
    s_one (&r, window, ref, bound);
    free (r.block);
    free (window);
    return 0;
}
