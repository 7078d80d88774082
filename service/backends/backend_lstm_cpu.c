/* The LSTM on one CPU core, weights in f32 or bf16 (backend_lstm.h), kernel "lstm-loop".
 *
 * LAYOUT. Every weight matrix is one of the MLP's dense layers (cpu_dense.h: K-major blocks of 16
 * outputs, f32 or bf16), its 4Hp outputs with the gate rows interleaved by blocks of 16 units:
 * outputs [64b, 64b + 64) are gates i, f, g, o (16 each) of units 16b .. 16b + 15, Hp = H rounded up
 * to 16, padding zero. Its products run on the dense kernels of the path cpu_isa.h picks (raw sums,
 * then the biases added), so the cell update runs on whole vectors: i, f, g and o of 16 units are
 * four aligned vectors. Padded units have zero weights and biases, so their c and h stay 0. (Until
 * 2026-12-06 the products had kernels of their own on a [K][4Hp] matrix, 1.8 cycles a 64 bytes of
 * bf16 against the dense kernel's 1.5: docs/lab/cpu-dtypes.md.)
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
 * error ~1e-7). Measured against float64: test_lstm, on every ISA path. The cell updates and sums are
 * compiled for AVX-512, AVX2 and baseline x86-64 (target clones: the loader picks at start).
 * Everything is allocated at load; nothing after. */
#include "backends/backend_lstm.h"
#include "backends/cpu_dense.h"
#include "backends/cpu_isa.h"
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

typedef struct {
    uint32_t in;                /* inputs of the layer (step_size or H) */
    cpu_dense_t wih;            /* 4Hp outputs (gate-blocked) of in inputs */
    cpu_dense_t whh;            /* 4Hp outputs of H inputs */
    float *bias;                /* [4Hp] */
} cpu_lstm_layer_t;

struct backend_model {
    char name[CONFIG_NAME_MAX];
    weight_dtype_t dtype;       /* f32 or bf16 */
    const cpu_dense_ops_t *ops; /* the dense kernels of the path cpu_isa.h chose at load */
    char isa[24];
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
    float *xpad;                /* [W][in_pad]: inputs whose rows are not whole vectors, padded (else NULL) */
};

static size_t s_pad (size_t n, size_t to) { return (n + to - 1) / to * to; }

/* y = a + b (+ c: may be NULL) for N floats (a multiple of 16; Y may be A) */
CLONES static void s_sum (float *y, const float *a, const float *b, const float *c, uint32_t n)
{
    for (uint32_t i = 0; i < n; i += VEC) {
        v16 va, vb, vc = { 0 };
        memcpy (&va, a + i, sizeof va);
        memcpy (&vb, b + i, sizeof vb);
        if (c)
            memcpy (&vc, c + i, sizeof vc);
        va += vb + vc;
        memcpy (y + i, &va, sizeof va);
    }
}

/* Y[t] = sum_k W[n][k] X[t][k] (+ B1 (+ B2)) for T rows, XS and YS floats apart: the dense kernel's
 * sums (raw: no bias, no activation), then the biases. X's rows hold W->in_pad floats, the padding
 * finite (the kernels read whole vectors). */
static void s_dense (const backend_model_t *m, const cpu_dense_t *W, const float *X, uint32_t xs, uint32_t T, float *Y,
                     uint32_t ys, const float *b1, const float *b2)
{
    const cpu_dense_io_t io = { .rows = T, .raw = true, .x = X, .x_stride = xs, .y = Y, .y_stride = ys };
    m->ops->dense[W->dtype] (W, &io);
    for (uint32_t t = 0; b1 && t < T; t++)
        s_sum (Y + (size_t) t * ys, Y + (size_t) t * ys, b1, b2, W->out_pad);
}

/* y = W x + b1 (+ b2) for one row X (W->in_pad floats) */
static void s_gemv (const backend_model_t *m, const cpu_dense_t *W, const float *x, const float *b1, const float *b2,
                    float *y)
{
    s_dense (m, W, x, W->in_pad, 1, y, W->out_pad, b1, b2);
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
            s_dense (m, &Lk->wih, m->seq[(k - 1) & 1], Hp, T, m->proj, N, Lk->bias, NULL);
        float *out_seq = k + 1 < m->L ? m->seq[k & 1] : NULL;
        for (uint32_t t = 0; t < T; t++) {
            if (k == 0)
                s_gemv (m, &Lk->whh, h, Lk->bias, m->p0[t], m->gates);
            else
                s_gemv (m, &Lk->whh, h, m->proj + (size_t) t * N, NULL, m->gates);
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
        s_gemv (m, &m->layers[k].whh, m->h + (size_t) k * m->Hp, m->layers[k].bias, NULL, G + (size_t) k * m->N);
    memcpy (c, m->c, (size_t) m->L * m->Hp * sizeof (float));
}

/* rnn_slots_backend_t's: layer 0's W_ih x of raw steps from a ring */
static void s_project0 (const void *ctx, const float *x, size_t xs, uint32_t T, float *y)
{
    const backend_model_t *m = ctx;
    s_dense (m, &m->layers[0].wih, x, (uint32_t) xs, T, y, m->N, NULL, NULL);
}

/* The BYTES at P asked for (prefetcht0; prefetcht1, into L2 alone, left more of the gap measured). */
static void s_fetch (const void *p, size_t bytes)
{
    for (size_t at = 0; at < bytes; at += 64)
        __builtin_prefetch ((const char *) p + at, 0, 3);
}

/* What the next step reads (every W_ih, the biases, the head) asked for into L2, last thing in an
 * advance: the advance reads every W_hh W - 1 times and its own buffers, which in a model whose
 * weights and buffers pass the L2 (lstmbench's medium in bf16: 1.27 MB of weights, ~0.7 MB of
 * buffers and ring, 2 MiB L2) leave part of W_ih in L3 for the step. A matter of order, not of
 * bytes: the advance costs the same reads (~1%: 655 KB from L3 against the ~1 ms of a medium advance).
 * lstmbench on the development VM, medium bf16: the step 15-30 us before, 10-11 after. */
static void s_warm_step (const backend_model_t *m)
{
    for (uint32_t k = 0; k < m->L; k++) {
        const cpu_lstm_layer_t *Lk = &m->layers[k];
        s_fetch (Lk->wih.weight, Lk->wih.weight_bytes);
        s_fetch (Lk->bias, m->N * sizeof (float));
    }
    s_fetch (m->head.w, (size_t) m->head.out * m->Hp * sizeof (float));
}

/* rnn_slots_backend_t's: the W - 1 steps at m->p0 from a zero state, their state into STATE; then the
 * next step's weights into L2 */
static void s_rerun (void *ctx, float *state)
{
    backend_model_t *m = ctx;
    s_sequence (m, m->W - 1);
    s_store_state (m, state, state + (size_t) m->L * m->N);
    s_warm_step (m);
}

/* ---------------------------------------------------------------------------------------------
 * The interface */

static void s_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    for (uint32_t k = 0; m->layers && k < m->L; k++) {
        cpu_dense_free (&m->layers[k].wih);
        cpu_dense_free (&m->layers[k].whh);
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
    free (m->xpad);
    free (m);
    *m_p = NULL;
}

/* Column of (gate q, unit j) in the gate-blocked order. */
static size_t s_col (uint32_t q, uint32_t j) { return (size_t) (j / 16) * 64 + q * 16 + j % 16; }

/* SRC [4H][K] row-major (PyTorch) packed as a dense layer of 4Hp outputs in the gate-blocked order
 * (padded units: zero rows), K inputs, in the model's dtype (cpu_dense.h). 0, or -1 with ERR. */
static int s_matrix (const backend_model_t *m, const float *src, uint32_t K, cpu_dense_t *dst, const char *what,
                     char *err, size_t errlen)
{
    float *rows = floats_zeroed ((size_t) m->N * K);
    if (!rows) {
        sig_set_error (err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t q = 0; q < 4; q++)
        for (uint32_t j = 0; j < m->H; j++)
            memcpy (rows + s_col (q, j) * K, src + ((size_t) q * m->H + j) * K, K * sizeof (float));
    const dense_layer_t layer = { .in = K, .out = m->N, .activation = ACTIVATION_NONE, .weight = rows };
    const int rc = cpu_dense_pack (dst, &layer, m->dtype, what, err, errlen);
    free (rows);
    return rc;
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
    /* the MLP's dense kernels (cpu_dense.h) on the path this CPU has (SIGSERVE_CPU_ISA caps it) */
    const cpu_path_t path = cpu_isa_path (m->dtype, 1, NULL, 0);
    m->ops = path >= CPU_PATH_AVX512 ? &cpu_dense_avx512 : path == CPU_PATH_AVX2 ? &cpu_dense_avx2 : &cpu_dense_scalar;
    snprintf (m->isa, sizeof m->isa, "%s", cpu_path_name (path >= CPU_PATH_AVX512 ? CPU_PATH_AVX512 : path, m->dtype));
    if (!(m->layers = calloc (L, sizeof *m->layers)))
        goto oom;
    for (uint32_t k = 0; k < m->L; k++) {
        const lstm_layer_t *src = &lw->layers[k];
        cpu_lstm_layer_t *dst = &m->layers[k];
        dst->in = src->in;
        char e[384];
        if (s_matrix (m, src->w_ih, src->in, &dst->wih, "weight_ih", e, sizeof e) != 0
            || s_matrix (m, src->w_hh, m->H, &dst->whh, "weight_hh", e, sizeof e) != 0) {
            sig_set_error (err, errlen, "model \"%s\": layer %u: %s", cfg->name, k, e);
            s_destroy (&m);
            return NULL;
        }
        if (!(dst->bias = floats_zeroed (N)))
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
        || !(m->p0 = calloc (W, sizeof *m->p0))
        || (m->in != m->in_pad && !(m->xpad = floats_zeroed (W * m->in_pad))))
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

/* T rows of inputs at X (m->in floats each, contiguous) as the dense kernels read them: X itself
 * where a row is whole vectors, else copied into m->xpad with each row's padding 0. */
static const float *s_rows_in (const backend_model_t *m, const float *x, uint32_t T)
{
    if (!m->xpad)
        return x;
    for (uint32_t t = 0; t < T; t++)
        memcpy (m->xpad + (size_t) t * m->in_pad, x + (size_t) t * m->in, m->in * sizeof (float));
    return m->xpad;
}

static sig_status_t s_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    (void) err;
    (void) errlen;
    for (uint32_t r = 0; r < rows; r++) {
        const float *x = s_rows_in (m, in + (size_t) r * m->W * m->in, m->W);
        s_dense (m, &m->layers[0].wih, x, m->in_pad, m->W, m->proj0, m->N, NULL, NULL);
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
        s_gemv (m, &m->layers[0].wih, s_rows_in (m, x, 1), NULL, NULL, entry);
        p = entry;
    } else {
        memcpy (entry, x, m->in * sizeof (float));      /* in_pad floats an entry, the padding 0 */
        s_gemv (m, &m->layers[0].wih, entry, NULL, NULL, m->proj0);
        p = m->proj0;
    }
    float *h = m->h, *c = m->c;   /* scratch: the slot's state stays for the advance */
    memcpy (c, c0, (size_t) m->L * Hp * sizeof (float));
    for (uint32_t k = 0; k < m->L; k++) {
        float *hk = h + (size_t) k * Hp, *ck = c + (size_t) k * Hp;
        if (k == 0)
            s_sum (m->gates, G, p, NULL, N);
        else
            s_gemv (m, &m->layers[k].wih, h + (size_t) (k - 1) * Hp, G + (size_t) k * N, NULL, m->gates);
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

/* the dense kernels' path (the cell updates' target clones follow the CPU, not SIGSERVE_CPU_ISA) */
static const char *s_isa (const backend_model_t *m) { return m->isa; }

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
