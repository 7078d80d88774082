/* The GRU on one CPU core, fp32 (backend_gru.h), kernel "gru-loop". Built as the LSTM's
 * (backend_lstm_cpu.c), three gate blocks instead of four.
 *
 * LAYOUT. Every weight matrix is stored K-major (one row of 3Hp floats per input k) with the gate
 * rows interleaved by blocks of 16 units: columns [48b, 48b + 48) hold gates r, z, n (16 each) of
 * units 16b .. 16b + 15, Hp = H rounded up to 16, padding zero. A matrix-vector product is a sum
 * over k of whole columns times the broadcast x[k], and the cell update runs on whole vectors.
 * Two biases, as PyTorch keeps them: BI (added to W_ih x) holds b_ir + b_hr, b_iz + b_hz and b_in;
 * BH (added to W_hh h) holds b_hn alone, because n = tanh (W_in x + b_in + r (W_hn h + b_hn)) needs
 * the recurrent part of its gate apart. Padded units have zero weights and biases: their h stays 0.
 *
 * STREAMS. A slot keeps the window as a ring of W entries and the precomputed state of the last
 * W - 1 steps: per layer GH = W_hh h + BH (the gates' part that does not depend on the next step)
 * and h itself (h' = n + z (h - n)). A step is then, per layer, GI = W_ih x + BI and one cell update,
 * and the head: W_ih only on the critical path. The ring holds layer 0's projections W_ih x
 * (computed once by the step) when they fit in 512 MiB over every slot, else the raw steps (an
 * advance then projects them again). An advance reruns the last W - 1 steps from a zero state,
 * layer after layer: a layer's input projections for every step as one matrix product, then the
 * recurrence with W_hh. The slots and their rings: rnn_slots.h, the LSTM's too.
 *
 * Exponentials, sigmoid and tanh: vec16.h. Measured against float64: test_gru. Everything is
 * allocated at load; nothing after. */
#include "backends/backend_gru.h"
#include "backends/rnn_head.h"
#include "backends/rnn_slots.h"
#include "backends/vec16.h"
#include "base/floats.h"

#include "weights/rnn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VEC 16
#define GATES 3
#define BLOCK (GATES * VEC)                  /* the columns of one block of 16 units */

typedef struct {
    uint32_t in;                /* inputs of the layer (step_size or H) */
    float *wih;                 /* [in][3Hp] */
    float *whh;                 /* [H][3Hp] */
    float *bi, *bh;             /* [3Hp] each (the header comment) */
} cpu_gru_layer_t;

struct backend_model {
    char name[CONFIG_NAME_MAX];
    uint32_t L, in, H, Hp, N;   /* N = 3 Hp */
    uint32_t in_pad;            /* a raw step's row in the ring */
    uint32_t W, out, max_rows;
    cpu_gru_layer_t *layers;
    rnn_head_t head;
    rnn_slots_t slots;          /* each: its ring, then GH [L][N], then h [L][Hp] */
    /* scratch */
    float *proj;                /* [W][N]: a layer's input projections, BI included */
    float *proj0;               /* [W][N]: layer 0's (no bias), when they are computed here */
    float *seq[2];              /* [W][Hp]: hidden sequences of consecutive layers */
    float *h;                   /* [L][Hp] */
    float *gi, *gh;             /* [N] each */
    const float **p0;           /* [W]: layer 0's projection of each step of a sequence */
};

static size_t s_pad (size_t n, size_t to) { return (n + to - 1) / to * to; }

/* ---------------------------------------------------------------------------------------------
 * Kernels (compiled once per target: vec16.h's CLONES) */

/* y[n] = b1[n] (+ b2[n]) + sum_k Wt[k][n] x[k] for n < N (a multiple of 48); B1, B2 may be NULL.
 * Two blocks of units at a time (96 columns, six accumulators), then the odd one. */
CLONES static void s_gemv (const float *restrict Wt, uint32_t K, uint32_t N, const float *restrict x,
                           const float *b1, const float *b2, float *restrict y)
{
    uint32_t nb = 0;
    for (; nb + 2 * BLOCK <= N; nb += 2 * BLOCK)
        vec16_gemv_block (Wt, K, N, x, b1, b2, y, nb, 6);
    if (nb < N)
        vec16_gemv_block (Wt, K, N, x, b1, b2, y, nb, 3);
}

/* Y[t][n] = (BIAS ? bias[n] : 0) + sum_k Wt[k][n] X[t][k] for T rows: tiles of one block (48
 * columns) x 4 rows (12 accumulators), so each weight vector loaded serves four steps. */
CLONES static void s_gemm (const float *restrict Wt, uint32_t K, uint32_t N, const float *restrict X, size_t xs,
                           uint32_t T, float *restrict Y, size_t ys, const float *bias)
{
    for (uint32_t nb = 0; nb < N; nb += BLOCK)
        vec16_gemm_cols (Wt, K, N, X, xs, T, Y, ys, bias, nb, GATES);
}

/* The cell update of Hp / 16 blocks of units from GI (W_ih x + BI) and GH (W_hh h + BH), both
 * gate-blocked: h in place. */
CLONES static void s_cells (const float *restrict gi, const float *restrict gh, uint32_t blocks, float *restrict h)
{
    for (uint32_t b = 0; b < blocks; b++) {
        const v16 *i = (const v16 *) (gi + BLOCK * (size_t) b), *g = (const v16 *) (gh + BLOCK * (size_t) b);
        const v16 r = vec16_sigmoid (i[0] + g[0]), z = vec16_sigmoid (i[1] + g[1]);
        const v16 n = vec16_tanh (i[2] + r * g[2]);
        v16 *hv = (v16 *) (h + 16 * (size_t) b);
        *hv = n + z * (*hv - n);
    }
}

/* ---------------------------------------------------------------------------------------------
 * A sequence: T steps from a zero state through every layer, layer 0's projection of step t at
 * m->p0[t] (no bias). Leaves each layer's final h in m->h. */
static void s_sequence (backend_model_t *m, uint32_t T)
{
    const uint32_t N = m->N, Hp = m->Hp;
    memset (m->h, 0, (size_t) m->L * Hp * sizeof (float));
    for (uint32_t k = 0; k < m->L; k++) {
        const cpu_gru_layer_t *Lk = &m->layers[k];
        float *h = m->h + (size_t) k * Hp;
        if (k > 0 && T > 0)   /* the whole layer's input projections at once */
            s_gemm (Lk->wih, Lk->in, N, m->seq[(k - 1) & 1], Hp, T, m->proj, N, Lk->bi);
        float *out_seq = k + 1 < m->L ? m->seq[k & 1] : NULL;
        for (uint32_t t = 0; t < T; t++) {
            const float *gi = m->proj + (size_t) t * N;
            if (k == 0) {
                for (uint32_t i = 0; i < N; i++)
                    m->gi[i] = m->p0[t][i] + Lk->bi[i];
                gi = m->gi;
            }
            s_gemv (Lk->whh, m->H, N, h, Lk->bh, NULL, m->gh);
            s_cells (gi, m->gh, Hp / VEC, h);
            if (out_seq)
                memcpy (out_seq + (size_t) t * Hp, h, Hp * sizeof (float));
        }
    }
}

static float *s_slot_GH (const backend_model_t *m, uint32_t slot) { return rnn_slots_state (&m->slots, slot); }
static float *s_slot_h (const backend_model_t *m, uint32_t slot) { return s_slot_GH (m, slot) + (size_t) m->L * m->N; }

/* State from m->h: GH = W_hh h + BH per layer, and h. */
static void s_store_state (backend_model_t *m, float *GH, float *h)
{
    for (uint32_t k = 0; k < m->L; k++)
        s_gemv (m->layers[k].whh, m->H, m->N, m->h + (size_t) k * m->Hp, m->layers[k].bh, NULL, GH + (size_t) k * m->N);
    memcpy (h, m->h, (size_t) m->L * m->Hp * sizeof (float));
}

/* rnn_slots_backend_t's: layer 0's W_ih x of raw steps from a ring */
static void s_project0 (const void *ctx, const float *x, size_t xs, uint32_t T, float *y)
{
    const backend_model_t *m = ctx;
    s_gemm (m->layers[0].wih, m->in, m->N, x, xs, T, y, m->N, NULL);
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
        free (m->layers[k].wih);
        free (m->layers[k].whh);
        free (m->layers[k].bi);
        free (m->layers[k].bh);
    }
    free (m->layers);
    rnn_head_free (&m->head);
    rnn_slots_free (&m->slots);
    free (m->proj);
    free (m->proj0);
    free (m->seq[0]);
    free (m->seq[1]);
    free (m->h);
    free (m->gi);
    free (m->gh);
    free ((void *) m->p0);
    free (m);
    *m_p = NULL;
}

/* Column of (gate q, unit j) in the gate-blocked order. */
static size_t s_col (uint32_t q, uint32_t j) { return (size_t) (j / 16) * BLOCK + q * 16 + j % 16; }

/* SRC [3H][K] row-major (PyTorch) -> DST [K][3Hp] gate-blocked. */
static void s_transpose (const float *src, uint32_t K, uint32_t H, uint32_t N, float *dst)
{
    for (uint32_t q = 0; q < GATES; q++)
        for (uint32_t j = 0; j < H; j++) {
            const float *row = src + ((size_t) q * H + j) * K;
            const size_t col = s_col (q, j);
            for (uint32_t k = 0; k < K; k++)
                dst[(size_t) k * N + col] = row[k];
        }
}

/* LAYER's weights in the layout of the header comment. */
static int s_take_layer (backend_model_t *m, const rnn_layer_t *src, cpu_gru_layer_t *dst)
{
    const size_t N = m->N, H = m->H;
    dst->in = src->in;
    if (!(dst->wih = floats_zeroed ((size_t) src->in * N)) || !(dst->whh = floats_zeroed (H * N))
        || !(dst->bi = floats_zeroed (N)) || !(dst->bh = floats_zeroed (N)))
        return -1;
    s_transpose (src->w_ih, src->in, m->H, m->N, dst->wih);
    s_transpose (src->w_hh, m->H, m->H, m->N, dst->whh);
    for (uint32_t q = 0; q < GATES; q++)
        for (uint32_t j = 0; j < m->H; j++) {
            const size_t at = (size_t) q * H + j;
            dst->bi[s_col (q, j)] = q < 2 ? src->bias[at] : src->bias_ih[at];   /* r, z: both biases; n: b_in */
            dst->bh[s_col (q, j)] = q < 2 ? 0.0f : src->bias_hh[at];             /* n: b_hn, inside r (...) */
        }
    return 0;
}

static backend_model_t *s_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    (void) device;
    const rnn_weights_t *gw = w->rnn;
    if (w->type != MODEL_TYPE_GRU || !gw || gw->gates != GATES) {
        sig_set_error (err, errlen, "model \"%s\": the GRU backend needs GRU weights (\"type\": \"gru\"), got a model of "
                       "\"type\": \"%s\"", cfg->name, model_type_name (w->type));
        return NULL;
    }
    backend_model_t *m = calloc (1, sizeof *m);
    if (!m)
        goto oom;
    snprintf (m->name, sizeof m->name, "%s", cfg->name);
    m->L = (uint32_t) gw->layer_count;
    m->in = gw->step_size;
    m->H = gw->hidden;
    m->Hp = (uint32_t) s_pad (m->H, VEC);
    m->N = GATES * m->Hp;
    m->in_pad = (uint32_t) s_pad (m->in, VEC);
    m->W = gw->window;
    m->out = gw->head.out;
    m->max_rows = backend_rows (cfg) ? backend_rows (cfg) : 1;
    const size_t N = m->N, Hp = m->Hp, W = m->W, L = m->L;
    if (!(m->layers = calloc (L, sizeof *m->layers)))
        goto oom;
    for (uint32_t k = 0; k < m->L; k++)
        if (s_take_layer (m, &gw->layers[k], &m->layers[k]) != 0)
            goto oom;
    if (rnn_head_init (&m->head, &gw->head, m->Hp) != 0
        || !(m->proj = floats_zeroed (W * N))
        || !(m->proj0 = floats_zeroed (W * N)) || !(m->seq[0] = floats_zeroed (W * Hp))
        || !(m->seq[1] = floats_zeroed (W * Hp)) || !(m->h = floats_zeroed (L * Hp)) || !(m->gi = floats_zeroed (N))
        || !(m->gh = floats_zeroed (N)) || !(m->p0 = calloc (W, sizeof *m->p0)))
        goto oom;
    const rnn_slots_backend_t advance = { .project = s_project0, .rerun = s_rerun, .ctx = m, .proj0 = m->proj0,
                                          .p0 = m->p0 };
    if (rnn_slots_init (&m->slots, backend_stream_slots (cfg), m->W, m->N, m->in_pad, L * N + L * Hp, &advance) != 0)
        goto oom;
    rnn_slots_start (&m->slots);
    if (backend_warm (&backend_gru_cpu_iface, m, m->max_rows, W * m->in, m->out, err, errlen) != 0)
        goto oom;
    return m;
oom:
    sig_set_error (err, errlen, "model \"%s\": out of memory loading the GRU CPU backend", cfg->name);
    s_destroy (&m);
    return NULL;
}

static sig_status_t s_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    (void) err;
    (void) errlen;
    for (uint32_t r = 0; r < rows; r++) {
        const float *x = in + (size_t) r * m->W * m->in;
        s_gemm (m->layers[0].wih, m->in, m->N, x, m->in, m->W, m->proj0, m->N, NULL);
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
    float *GH = s_slot_GH (m, slot), *h0 = s_slot_h (m, slot);
    float *entry = rnn_slots_entry (&m->slots, slot);
    /* layer 0: its projection of x goes into the ring (or x itself) */
    const float *p;
    if (m->slots.keep_proj) {
        s_gemv (m->layers[0].wih, m->in, N, x, NULL, NULL, entry);
        p = entry;
    } else {
        memcpy (entry, x, m->in * sizeof (float));
        s_gemv (m->layers[0].wih, m->in, N, x, NULL, NULL, m->proj0);
        p = m->proj0;
    }
    float *h = m->h;   /* scratch: the slot's state stays for the advance */
    memcpy (h, h0, (size_t) m->L * Hp * sizeof (float));
    for (uint32_t k = 0; k < m->L; k++) {
        const cpu_gru_layer_t *Lk = &m->layers[k];
        if (k == 0)
            for (uint32_t i = 0; i < N; i++)
                m->gi[i] = p[i] + Lk->bi[i];
        else
            s_gemv (Lk->wih, m->H, N, h + (size_t) (k - 1) * Hp, Lk->bi, NULL, m->gi);
        s_cells (m->gi, GH + (size_t) k * N, Hp / VEC, h + (size_t) k * Hp);
    }
    rnn_head_apply (&m->head, h + (size_t) (m->L - 1) * Hp, out);
    rnn_slots_stepped (&m->slots, slot);
    return SIG_OK;
}

static const char *s_kernel_name (const backend_model_t *m)
{
    (void) m;
    return "gru-loop";
}

const backend_iface_t backend_gru_cpu_iface = {
    .name = "cpu",
    .load = s_load,
    .infer = s_infer,
    .kernel_name = s_kernel_name,
    .destroy = s_destroy,
    .stream_reset = s_reset,
    .stream_step = s_step,
    .stream_advance = s_advance,
};
