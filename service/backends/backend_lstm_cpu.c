/* The LSTM on one CPU core, weights in f32 or bf16 (backend_lstm.h), kernel "lstm-loop".
 *
 * LAYOUT. Every weight matrix is stored K-major (transposed: one row of 4Hp floats per input k)
 * with the gate rows interleaved by blocks of 16 units: columns [64b, 64b + 64) hold gates i, f, g,
 * o (16 each) of units 16b .. 16b + 15, Hp = H rounded up to 16, padding zero. A matrix-vector
 * product is then a sum over k of whole columns times the broadcast x[k] (no horizontal sums: a
 * row of 96 inputs would spend as much on them as on the products), eight 16-float accumulators
 * at a time, and the cell update runs on whole vectors: i, f, g and o of 16 units are four
 * aligned vectors. Padded units have zero weights and biases, so their c and h stay 0.
 *
 * STREAMS. A slot keeps the window as a ring of W entries and the precomputed state of the last
 * W - 1 steps: per layer G = W_hh h + b (the gates' part that does not depend on the next step)
 * and c. A step is then, per layer, gates = G + W_ih x, one cell update, and the head: W_ih only
 * on the critical path. The ring holds layer 0's input projections W_ih x (what a new step adds,
 * computed once by the step) when they fit in 512 MiB over every slot, else the raw steps (then
 * an advance projects them again). An advance reruns the last W - 1 steps from a zero state,
 * layer after layer: the layer's input projections for every step as one matrix product (weights
 * read once for all steps), then the recurrence with W_hh. The slots and their rings: rnn_slots.h.
 *
 * BF16 (weight_dtype "bf16"): each matrix in the same order, inputs in pairs: the 32-bit lane of
 * pair p and column n holds inputs 2p (low half, the plain bf16) and 2p + 1 (the whole lane, within
 * 2^-8 / (1 - 2^-8) of the weight: cpu_dense.h's packing), so one shift widens two weights and the
 * arithmetic, activations and state stay fp32; half the bytes (the medium size fits L2).
 *
 * Exponentials are a vector Cephes expf (about 1 ulp); tanh(x) = 2 sigmoid(2x) - 1 (absolute
 * error ~1e-7). Measured against float64: test_lstm. Compiled for AVX-512, AVX2 and baseline
 * x86-64 (the loader picks at start). Everything is allocated at load; nothing after. */
#include "backends/backend_lstm.h"
#include "backends/cpu_dense.h"
#include "backends/rnn_head.h"
#include "backends/rnn_slots.h"
#include "backends/vec16.h"
#include "base/floats.h"

#include "weights/lstm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VEC 16

typedef uint32_t vu16 __attribute__ ((vector_size (64)));

/* A K-major matrix of K rows of N columns: fp32 [K][N], or bf16 lanes [(K + 1) / 2][N][2]. */
typedef struct {
    float *f;
    uint16_t *h;
} cpu_mat_t;

typedef struct {
    uint32_t in;                /* inputs of the layer (step_size or H) */
    cpu_mat_t wih;              /* [in][4Hp] */
    cpu_mat_t whh;              /* [H][4Hp] */
    float *bias;                /* [4Hp] */
} cpu_lstm_layer_t;

struct backend_model {
    char name[CONFIG_NAME_MAX];
    weight_dtype_t dtype;       /* f32 or bf16 */
    uint32_t L, in, H, Hp, N;   /* N = 4 Hp */
    uint32_t in_pad;            /* a raw step's row in the ring */
    uint32_t W, out, max_rows;
    cpu_lstm_layer_t *layers;
    rnn_head_t head;
    rnn_slots_t slots;          /* each: its ring, then G [L][N], then c [L][Hp] */
    /* scratch */
    float *proj;                /* [W][N]: a layer's input projections (bias included) */
    float *proj0;               /* [W][N]: layer 0's (no bias), when they are computed here */
    float *seq[2];              /* [W][Hp]: hidden sequences of consecutive layers */
    float *h, *c;               /* [L][Hp] */
    float *gates;               /* [N] */
    const float **p0;           /* [W]: layer 0's projection of each step of a sequence */
};

static size_t s_pad (size_t n, size_t to) { return (n + to - 1) / to * to; }

/* ---------------------------------------------------------------------------------------------
 * Kernels (compiled once per target: vec16.h's CLONES) */

/* y[n] = b1[n] (+ b2[n]) + sum_k Wt[k][n] x[k] for n < N (a multiple of 64); B1, B2 may be NULL.
 * Eight blocks of 16 outputs at a time, then the one block of 64 left. */
CLONES static void s_gemv_f32 (const float *restrict Wt, uint32_t K, uint32_t N, const float *restrict x,
                               const float *b1, const float *b2, float *restrict y)
{
    uint32_t nb = 0;
    for (; nb + 128 <= N; nb += 128)
        vec16_gemv_block (Wt, K, N, x, b1, b2, y, nb, 8);
    if (nb < N)
        vec16_gemv_block (Wt, K, N, x, b1, b2, y, nb, 4);
}

/* Y[t][n] = (BIAS ? bias[n] : 0) + sum_k Wt[k][n] X[t][k] for T rows: tiles of 64 outputs x 4
 * rows (16 accumulators), so each weight vector loaded serves four steps. */
CLONES static void s_gemm_f32 (const float *restrict Wt, uint32_t K, uint32_t N, const float *restrict X, size_t xs,
                               uint32_t T, float *restrict Y, size_t ys, const float *bias)
{
    for (uint32_t nb = 0; nb < N; nb += 64)
        vec16_gemm_cols (Wt, K, N, X, xs, T, Y, ys, bias, nb, 4);
}

/* The lanes of pair p, columns n .. n + 15: inputs 2p (E) and 2p + 1 (O) widened to fp32. */
VEC16_INLINE void s_pair (const uint16_t *Wp, uint32_t N, uint32_t p, uint32_t n, v16 *e, v16 *o)
{
    const vu16 lane = *(const vu16 *) __builtin_assume_aligned (Wp + ((size_t) p * N + n) * 2, 64);
    *e = (v16) (lane << 16);
    *o = (v16) lane;
}

/* Outputs nb .. nb + 16 J of s_gemv_bf16 (J independent accumulators, two FMAs each a pair). */
VEC16_INLINE void s_gemv_bf16_block (const uint16_t *restrict Wp, uint32_t K, uint32_t N, const float *restrict x,
                               const float *b1, const float *b2, float *restrict y, uint32_t nb, const int J)
{
    v16 acc[8];
    for (int j = 0; j < J; j++) {
        acc[j] = b1 ? *(const v16 *) (b1 + nb + 16 * j) : vec16_splat (0.0f);
        if (b2)
            acc[j] += *(const v16 *) (b2 + nb + 16 * j);
    }
    for (uint32_t p = 0; p < K / 2; p++) {
        const v16 xe = vec16_splat (x[2 * p]), xo = vec16_splat (x[2 * p + 1]);
        for (int j = 0; j < J; j++) {
            v16 e, o;
            s_pair (Wp, N, p, nb + 16 * (uint32_t) j, &e, &o);
            acc[j] += e * xe;
            acc[j] += o * xo;
        }
    }
    if (K & 1) {
        const v16 xe = vec16_splat (x[K - 1]);
        for (int j = 0; j < J; j++) {
            v16 e, o;
            s_pair (Wp, N, K / 2, nb + 16 * (uint32_t) j, &e, &o);
            acc[j] += e * xe;
        }
    }
    for (int j = 0; j < J; j++)
        *(v16 *) (y + nb + 16 * j) = acc[j];
}

/* s_gemv_f32 on bf16 lanes (K inputs: (K + 1) / 2 pairs; an odd K's last pair has no odd input). */
CLONES static void s_gemv_bf16 (const uint16_t *restrict Wp, uint32_t K, uint32_t N, const float *restrict x,
                                const float *b1, const float *b2, float *restrict y)
{
    uint32_t nb = 0;
    for (; nb + 128 <= N; nb += 128)
        s_gemv_bf16_block (Wp, K, N, x, b1, b2, y, nb, 8);
    if (nb < N)
        s_gemv_bf16_block (Wp, K, N, x, b1, b2, y, nb, 4);
}

/* s_gemm_f32 on bf16 lanes: each pair of weights widened once for four rows. */
CLONES static void s_gemm_bf16 (const uint16_t *restrict Wp, uint32_t K, uint32_t N, const float *restrict X, size_t xs,
                                uint32_t T, float *restrict Y, size_t ys, const float *bias)
{
    for (uint32_t nb = 0; nb < N; nb += 64)
        for (uint32_t t0 = 0; t0 < T; t0 += 4) {
            const float *xr[4];
            for (int r = 0; r < 4; r++)   /* past the last row: recompute the last, store nothing */
                xr[r] = X + (size_t) (t0 + (uint32_t) r < T ? t0 + (uint32_t) r : T - 1) * xs;
            v16 acc[4][4];
            for (int j = 0; j < 4; j++) {
                const v16 b = bias ? *(const v16 *) (bias + nb + 16 * j) : vec16_splat (0.0f);
                for (int r = 0; r < 4; r++)
                    acc[r][j] = b;
            }
            for (uint32_t p = 0; p < (K + 1) / 2; p++) {
                v16 e[4], o[4];
                for (int j = 0; j < 4; j++)
                    s_pair (Wp, N, p, nb + 16 * (uint32_t) j, &e[j], &o[j]);
                const bool odd = 2 * p + 1 < K;
                for (int r = 0; r < 4; r++) {
                    const v16 xe = vec16_splat (xr[r][2 * p]), xo = vec16_splat (odd ? xr[r][2 * p + 1] : 0.0f);
                    for (int j = 0; j < 4; j++)
                        acc[r][j] += e[j] * xe + o[j] * xo;
                }
            }
            for (int r = 0; r < 4 && t0 + (uint32_t) r < T; r++)
                for (int j = 0; j < 4; j++)
                    *(v16 *) (Y + (size_t) (t0 + r) * ys + nb + 16 * j) = acc[r][j];
        }
}

static void s_gemv (const cpu_mat_t *W, uint32_t K, uint32_t N, const float *x, const float *b1, const float *b2,
                    float *y)
{
    if (W->h)
        s_gemv_bf16 (W->h, K, N, x, b1, b2, y);
    else
        s_gemv_f32 (W->f, K, N, x, b1, b2, y);
}

static void s_gemm (const cpu_mat_t *W, uint32_t K, uint32_t N, const float *X, size_t xs, uint32_t T, float *Y,
                    size_t ys, const float *bias)
{
    if (W->h)
        s_gemm_bf16 (W->h, K, N, X, xs, T, Y, ys, bias);
    else
        s_gemm_f32 (W->f, K, N, X, xs, T, Y, ys, bias);
}

/* The cell update of Hp / 16 blocks of units from their gates (gate-blocked): c and h in place. */
CLONES static void s_cells (const float *restrict gates, uint32_t blocks, float *restrict c, float *restrict h)
{
    for (uint32_t b = 0; b < blocks; b++) {
        const v16 *g = (const v16 *) (gates + 64 * (size_t) b);
        const v16 i = vec16_sigmoid (g[0]), f = vec16_sigmoid (g[1]), gg = vec16_tanh (g[2]), o = vec16_sigmoid (g[3]);
        v16 *cv = (v16 *) (c + 16 * (size_t) b);
        const v16 cn = f * *cv + i * gg;
        *cv = cn;
        *(v16 *) (h + 16 * (size_t) b) = o * vec16_tanh (cn);
    }
}

/* ---------------------------------------------------------------------------------------------
 * A sequence: T steps from a zero state through every layer, layer 0's projection of step t at
 * m->p0[t] (no bias). Leaves each layer's final h and c in m->h, m->c. */
static void s_sequence (backend_model_t *m, uint32_t T)
{
    const uint32_t N = m->N, Hp = m->Hp;
    memset (m->h, 0, (size_t) m->L * Hp * sizeof (float));
    memset (m->c, 0, (size_t) m->L * Hp * sizeof (float));
    for (uint32_t k = 0; k < m->L; k++) {
        const cpu_lstm_layer_t *Lk = &m->layers[k];
        float *h = m->h + (size_t) k * Hp, *c = m->c + (size_t) k * Hp;
        if (k > 0 && T > 0)   /* the whole layer's input projections at once */
            s_gemm (&Lk->wih, Lk->in, N, m->seq[(k - 1) & 1], Hp, T, m->proj, N, Lk->bias);
        float *out_seq = k + 1 < m->L ? m->seq[k & 1] : NULL;
        for (uint32_t t = 0; t < T; t++) {
            if (k == 0)
                s_gemv (&Lk->whh, m->H, N, h, Lk->bias, m->p0[t], m->gates);
            else
                s_gemv (&Lk->whh, m->H, N, h, m->proj + (size_t) t * N, NULL, m->gates);
            s_cells (m->gates, Hp / VEC, c, h);
            if (out_seq)
                memcpy (out_seq + (size_t) t * Hp, h, Hp * sizeof (float));
        }
    }
}

static float *s_slot_G (const backend_model_t *m, uint32_t slot) { return rnn_slots_state (&m->slots, slot); }
static float *s_slot_c (const backend_model_t *m, uint32_t slot) { return s_slot_G (m, slot) + (size_t) m->L * m->N; }

/* State from m->h, m->c: G = W_hh h + b per layer, and c. */
static void s_store_state (backend_model_t *m, float *G, float *c)
{
    for (uint32_t k = 0; k < m->L; k++)
        s_gemv (&m->layers[k].whh, m->H, m->N, m->h + (size_t) k * m->Hp, m->layers[k].bias, NULL, G + (size_t) k * m->N);
    memcpy (c, m->c, (size_t) m->L * m->Hp * sizeof (float));
}

/* rnn_slots_backend_t's: layer 0's W_ih x of raw steps from a ring */
static void s_project0 (const void *ctx, const float *x, size_t xs, uint32_t T, float *y)
{
    const backend_model_t *m = ctx;
    s_gemm (&m->layers[0].wih, m->in, m->N, x, xs, T, y, m->N, NULL);
}

/* rnn_slots_backend_t's: the W - 1 steps at m->p0 from a zero state, their state into STATE */
static void s_rerun (void *ctx, float *state)
{
    backend_model_t *m = ctx;
    s_sequence (m, m->W - 1);
    s_store_state (m, state, state + (size_t) m->L * m->N);
}

/* ---------------------------------------------------------------------------------------------
 * The interface */

static void s_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    for (uint32_t k = 0; m->layers && k < m->L; k++) {
        free (m->layers[k].wih.f);
        free (m->layers[k].wih.h);
        free (m->layers[k].whh.f);
        free (m->layers[k].whh.h);
        free (m->layers[k].bias);
    }
    free (m->layers);
    rnn_head_free (&m->head);
    rnn_slots_free (&m->slots);
    free (m->proj);
    free (m->proj0);
    free (m->seq[0]);
    free (m->seq[1]);
    free (m->h);
    free (m->c);
    free (m->gates);
    free ((void *) m->p0);
    free (m);
    *m_p = NULL;
}

/* Column of (gate q, unit j) in the gate-blocked order. */
static size_t s_col (uint32_t q, uint32_t j) { return (size_t) (j / 16) * 64 + q * 16 + j % 16; }

/* SRC [4H][K] row-major (PyTorch) -> DST [K][4Hp] gate-blocked. */
static void s_transpose (const float *src, uint32_t K, uint32_t H, uint32_t N, float *dst)
{
    for (uint32_t q = 0; q < 4; q++)
        for (uint32_t j = 0; j < H; j++) {
            const float *row = src + ((size_t) q * H + j) * K;
            const size_t col = s_col (q, j);
            for (uint32_t k = 0; k < K; k++)
                dst[(size_t) k * N + col] = row[k];
        }
}

/* The same into bf16 lanes: DST [(K + 1) / 2][4Hp][2] (cpu_dense_bf16_lane). */
static void s_transpose_bf16 (const float *src, uint32_t K, uint32_t H, uint32_t N, uint16_t *dst)
{
    for (uint32_t q = 0; q < 4; q++)
        for (uint32_t j = 0; j < H; j++) {
            const float *row = src + ((size_t) q * H + j) * K;
            const size_t col = s_col (q, j);
            for (uint32_t k = 0; k < K; k += 2)
                cpu_dense_bf16_lane (row[k], k + 1 < K ? row[k + 1] : 0.0f, dst + ((size_t) (k / 2) * N + col) * 2);
        }
}

/* A K x 4H matrix in the model's dtype; -1 when memory runs out. */
static int s_matrix (const backend_model_t *m, const float *src, uint32_t K, cpu_mat_t *dst)
{
    if (m->dtype == WEIGHT_DTYPE_BF16) {
        const size_t halves = (size_t) (K + 1) / 2 * m->N * 2;
        if (!(dst->h = aligned_alloc (64, (halves * 2 + 63) / 64 * 64)))
            return -1;
        memset (dst->h, 0, halves * 2);
        s_transpose_bf16 (src, K, m->H, m->N, dst->h);
        return 0;
    }
    if (!(dst->f = floats_zeroed ((size_t) K * m->N)))
        return -1;
    s_transpose (src, K, m->H, m->N, dst->f);
    return 0;
}

/* The first weight of SRC (N values) bf16 cannot hold, or -1. */
static long s_unheld_bf16 (const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabsf (src[i]) <= 0x1.fep127f))
            return (long) i;
    return -1;
}

static backend_model_t *s_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    (void) device;
    if (w->type != MODEL_TYPE_LSTM || !w->lstm) {
        sig_set_error (err, errlen, "model \"%s\": the LSTM backend needs LSTM weights (\"type\": \"lstm\")", cfg->name);
        return NULL;
    }
    const lstm_weights_t *lw = w->lstm;
    backend_model_t *m = calloc (1, sizeof *m);
    if (!m)
        goto oom;
    snprintf (m->name, sizeof m->name, "%s", cfg->name);
    m->dtype = cfg->weight_dtype;
    if (m->dtype != WEIGHT_DTYPE_F32 && m->dtype != WEIGHT_DTYPE_BF16) {
        sig_set_error (err, errlen, "model \"%s\": weight_dtype \"%s\": the LSTM loop holds weights in f32 and bf16 only; "
                       "use \"weight_dtype\": \"bf16\" or \"f32\"", cfg->name, weight_dtype_name (m->dtype));
        s_destroy (&m);
        return NULL;
    }
    for (size_t k = 0; m->dtype == WEIGHT_DTYPE_BF16 && k < lw->layer_count; k++) {
        const lstm_layer_t *src = &lw->layers[k];
        const long a = s_unheld_bf16 (src->w_ih, 4 * (size_t) lw->hidden * src->in);
        const long b = a < 0 ? s_unheld_bf16 (src->w_hh, 4 * (size_t) lw->hidden * lw->hidden) : -1;
        if (a >= 0 || b >= 0) {
            sig_set_error (err, errlen, "model \"%s\": weight_dtype \"bf16\": layer %zu's %s [%ld] = %.9g does not fit in "
                           "bf16 (largest finite 3.39e38); use \"weight_dtype\": \"f32\"", cfg->name, k,
                           a >= 0 ? "weight_ih" : "weight_hh", a >= 0 ? a : b,
                           (double) (a >= 0 ? src->w_ih[a] : src->w_hh[b]));
            s_destroy (&m);
            return NULL;
        }
    }
    m->L = (uint32_t) lw->layer_count;
    m->in = lw->step_size;
    m->H = lw->hidden;
    m->Hp = (uint32_t) s_pad (m->H, VEC);
    m->N = 4 * m->Hp;
    m->in_pad = (uint32_t) s_pad (m->in, VEC);
    m->W = lw->window;
    m->out = lw->head.out;
    m->max_rows = backend_rows (cfg) ? backend_rows (cfg) : 1;
    const size_t N = m->N, Hp = m->Hp, W = m->W, L = m->L;
    if (!(m->layers = calloc (L, sizeof *m->layers)))
        goto oom;
    for (uint32_t k = 0; k < m->L; k++) {
        const lstm_layer_t *src = &lw->layers[k];
        cpu_lstm_layer_t *dst = &m->layers[k];
        dst->in = src->in;
        if (s_matrix (m, src->w_ih, src->in, &dst->wih) != 0 || s_matrix (m, src->w_hh, m->H, &dst->whh) != 0
            || !(dst->bias = floats_zeroed (N)))
            goto oom;
        for (uint32_t q = 0; q < 4; q++)
            for (uint32_t j = 0; j < m->H; j++)
                dst->bias[s_col (q, j)] = src->bias[(size_t) q * m->H + j];
    }
    if (rnn_head_init (&m->head, &lw->head, m->Hp) != 0
        || !(m->proj = floats_zeroed (W * N))
        || !(m->proj0 = floats_zeroed (W * N)) || !(m->seq[0] = floats_zeroed (W * Hp))
        || !(m->seq[1] = floats_zeroed (W * Hp)) || !(m->h = floats_zeroed (L * Hp)) || !(m->c = floats_zeroed (L * Hp))
        || !(m->gates = floats_zeroed (N))
        || !(m->p0 = calloc (W, sizeof *m->p0)))
        goto oom;
    const rnn_slots_backend_t advance = { .project = s_project0, .rerun = s_rerun, .ctx = m, .proj0 = m->proj0,
                                          .p0 = m->p0 };
    if (rnn_slots_init (&m->slots, backend_stream_slots (cfg), m->W, m->N, m->in_pad, L * N + L * Hp, &advance) != 0)
        goto oom;
    rnn_slots_start (&m->slots);
    if (backend_warm (&backend_lstm_cpu_iface, m, m->max_rows, W * m->in, m->out, err, errlen) != 0)
        goto oom;
    return m;
oom:
    sig_set_error (err, errlen, "model \"%s\": out of memory loading the LSTM CPU backend", cfg->name);
    s_destroy (&m);
    return NULL;
}

static sig_status_t s_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    (void) err;
    (void) errlen;
    for (uint32_t r = 0; r < rows; r++) {
        const float *x = in + (size_t) r * m->W * m->in;
        s_gemm (&m->layers[0].wih, m->in, m->N, x, m->in, m->W, m->proj0, m->N, NULL);
        for (uint32_t t = 0; t < m->W; t++)
            m->p0[t] = m->proj0 + (size_t) t * m->N;
        s_sequence (m, m->W);
        rnn_head_apply (&m->head, m->h + (size_t) (m->L - 1) * m->Hp, out + (size_t) r * m->out);
    }
    return SIG_OK;
}

static void s_reset (backend_model_t *m, uint32_t slot) { rnn_slots_reset (&m->slots, slot); }

static void s_advance (backend_model_t *m, uint32_t slot) { rnn_slots_advance (&m->slots, slot); }

static sig_status_t s_step (backend_model_t *m, uint32_t slot, const float *x, float *out, char *err, size_t errlen)
{
    if (rnn_slots_step_begin (&m->slots, slot, m->name, err, errlen) != 0)   /* an owed advance runs first */
        return SIG_INTERNAL;
    const uint32_t N = m->N, Hp = m->Hp;
    float *G = s_slot_G (m, slot), *c0 = s_slot_c (m, slot);
    float *entry = rnn_slots_entry (&m->slots, slot);
    /* layer 0: its projection of x goes into the ring (or x itself), then gates = G + W_ih x */
    const float *p;
    if (m->slots.keep_proj) {
        s_gemv (&m->layers[0].wih, m->in, N, x, NULL, NULL, entry);
        p = entry;
    } else {
        memcpy (entry, x, m->in * sizeof (float));
        s_gemv (&m->layers[0].wih, m->in, N, x, NULL, NULL, m->proj0);
        p = m->proj0;
    }
    float *h = m->h, *c = m->c;   /* scratch: the slot's state stays for the advance */
    memcpy (c, c0, (size_t) m->L * Hp * sizeof (float));
    for (uint32_t k = 0; k < m->L; k++) {
        float *hk = h + (size_t) k * Hp, *ck = c + (size_t) k * Hp;
        if (k == 0)
            for (uint32_t i = 0; i < N; i++)
                m->gates[i] = G[i] + p[i];
        else
            s_gemv (&m->layers[k].wih, m->H, N, h + (size_t) (k - 1) * Hp, G + (size_t) k * N, NULL, m->gates);
        s_cells (m->gates, Hp / VEC, ck, hk);
    }
    rnn_head_apply (&m->head, h + (size_t) (m->L - 1) * Hp, out);
    rnn_slots_stepped (&m->slots, slot);
    return SIG_OK;
}

static const char *s_kernel_name (const backend_model_t *m)
{
    (void) m;
    return "lstm-loop";
}

/* the path the target clones resolved to (the loader's choice, as for every clone) */
static const char *s_isa (const backend_model_t *m)
{
    (void) m;
    return __builtin_cpu_supports ("avx512f") ? "avx512" : __builtin_cpu_supports ("avx2") ? "avx2" : "scalar";
}

const backend_iface_t backend_lstm_cpu_iface = {
    .name = "cpu",
    .load = s_load,
    .infer = s_infer,
    .weight_dtypes = 1u << WEIGHT_DTYPE_BF16,
    .kernel_name = s_kernel_name,
    .isa = s_isa,
    .destroy = s_destroy,
    .stream_reset = s_reset,
    .stream_step = s_step,
    .stream_advance = s_advance,
};
