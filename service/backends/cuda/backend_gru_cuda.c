/* The CUDA GRU backend (backend_gru_cuda.h): the host side of kernels/gru_*.cu.
 *
 * One instance = one non-blocking stream, its pinned and device buffers, its weights, and its graphs:
 * one per batch size of graph_rows for whole windows (H2D, each layer's input projections by kernel
 * `warp` and its recurrence, the head, D2H), one for a stream's step (the command and features H2D,
 * a cell launch a layer, the head, D2H) and one for an advance (the command H2D, the ring's steps
 * gathered, the layers over them from a zero state, the result stored as the slot's state). A step
 * and an advance find their slot and ring position in the command the graph copies in first, so one
 * graph serves every slot. A whole-window request replays the graph of the smallest batch size that
 * holds it (rows past its own computed on what the buffer holds and dropped).
 *
 * Streams, as the CPU backend keeps them (backend_gru_cpu.c): the ring of a slot's last W raw steps
 * and its state, each layer's h after the W - 1 steps before its next step (the state of W - 1 zero
 * steps after a reset). stream_step runs the owed advance first if there is one; stream_advance
 * posts the advance and returns (it runs after the reply, before the next command on the stream).
 * Two advances never race on their pinned command: between two posts a step has run and been waited
 * for, so the first advance (before it on the stream) is complete.
 *
 * Device memory comes from the device's pool and goes back on the stream; pinned memory and graph
 * executables go back through the device level, which defers them while a persistent kernel is
 * resident (device.h). Nothing synchronises the device. */
#define _GNU_SOURCE
#include "backends/cuda/backend_gru_cuda.h"

#include "backends/cuda/device.h"
#include "cuda_check.h"
#include "sig_dense.h"
#include "sig_gru.h"
#include "weights/gru.h"
#include "weights/rnn.h"
#include "weights/reference.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GATES 3

_Static_assert (sizeof (sig_gru_cmd_t) == 16, "a step's features follow its command 16-byte aligned");

typedef struct {
    float *w_ih, *w_hh, *b_i, *b_hn;   /* device (sig_gru.h's layout) */
    sig_gru_layer_t k;                 /* the same, as the kernels take it */
} gru_layer_t;

typedef struct {
    uint32_t pos;               /* ring entry of the slot's next step */
    bool owed;                  /* a step ran and its advance was not posted yet */
    bool valid;                 /* its reset was posted (after a failed one: again before its next step) */
} gru_slot_t;

struct backend_model {
    char name[CONFIG_NAME_MAX];
    int device;
    bool whole;                 /* the recurrence: GRU_CUDA_SEQ, else GRU_CUDA_STEP */
    bool graph;                 /* requests replay graphs (else direct launches) */
    bool lost;                  /* a sticky error: every call answers SIG_UNAVAILABLE */
    cuda_wait_t wait;
    uint32_t L, in, H, W, out, max_rows, slot_count;
    activation_t head_act;
    char label[32];             /* the kernel's name ("gru-seq+graph") */
    gru_layer_t *layers;
    float *head_w, *head_b;     /* device: [out][H], [out] */
    cudaStream_t stream;        /* non-blocking: never synchronises with the legacy stream */
    cudaEvent_t done;           /* recorded after each request; what the host waits on */
    float *h_in, *h_out;        /* pinned: max_rows x W x in, max_rows x out */
    uint8_t *h_cmd, *h_adv;     /* pinned: a step's command and features; an advance's command */
    float *d_in, *d_out;        /* device, as h_in and h_out (d_in also holds an advance's gathered steps) */
    sig_gru_cmd_t *d_cmd, *d_adv;   /* device copies of h_cmd and h_adv */
    float *gi;                  /* [max_rows][W][3H]: a layer's input projections, B_I included */
    float *seq[2];              /* [max_rows][W][H]: consecutive layers' outputs (more than one layer) */
    float *hbuf[2];             /* [max_rows][H]: GRU_CUDA_STEP's state between two steps */
    float *hfin;                /* [L][max_rows][H]: each layer's last state */
    float *hstep;               /* [L][H]: a stream step's new state per layer */
    float *ring;                /* [slots][W][in]: each slot's last W steps */
    float *state;               /* [slots][L][H]: each slot's state for its next step */
    float *reset;               /* [L][H]: the state after W - 1 zero steps */
    gru_slot_t *slots;
    uint32_t graph_count;
    uint32_t graph_rows[CONFIG_MAX_GRAPH_ROWS];
    uint8_t *bucket;            /* [max_rows + 1]: rows -> index into graph_rows */
    cudaGraphExec_t *windows;   /* [graph_count] */
    cudaGraphExec_t step, advance;   /* advance: none for a window of 1 (nothing to rerun) */
};

/* ---- tests: the recurrence's mode for every later load ---- */

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static gru_cuda_mode_t s_forced;

void gru_cuda_force_mode (gru_cuda_mode_t mode)
{
    pthread_mutex_lock (&s_lock);
    s_forced = mode;
    pthread_mutex_unlock (&s_lock);
}

gru_cuda_mode_t gru_cuda_mode (const backend_model_t *m) { return m->whole ? GRU_CUDA_SEQ : GRU_CUDA_STEP; }

/* ---- what is enqueued: the graphs' bodies, and the direct launches ---- */

static size_t s_cmd_bytes (const backend_model_t *m) { return sizeof (sig_gru_cmd_t) + (size_t) m->in * sizeof (float); }

/* Every layer over ROWS sequences of T steps whose inputs are X0 ([rows][T][in]), from a zero
 * state: each layer's last state into hfin. */
static int s_enqueue_layers (backend_model_t *m, const float *x0, uint32_t rows, uint32_t T)
{
    const uint32_t H = m->H;
    for (uint32_t k = 0; k < m->L; k++) {
        const sig_gru_layer_t *L = &m->layers[k].k;
        const float *x = k == 0 ? x0 : m->seq[(k - 1) & 1];
        float *seq = k + 1 < m->L ? m->seq[k & 1] : NULL;
        float *fin = m->hfin + (size_t) k * m->max_rows * H;
        CUDA_TRY ((cudaError_t) sig_dense_warp (L->w_ih, L->b_i, x, m->gi, L->in, GATES * H, rows * T,
                                                SIG_ACT_NONE, m->stream));
        if (m->whole) {
            CUDA_TRY ((cudaError_t) sig_gru_seq (L, m->gi, T, 0, T, rows, NULL, fin, seq, 1, m->stream));
            continue;
        }
        for (uint32_t t = 0; t < T; t++) {
            const float *h0 = t == 0 ? NULL : m->hbuf[(t - 1) & 1];
            float *h1 = t + 1 == T ? fin : m->hbuf[t & 1];
            CUDA_TRY ((cudaError_t) sig_gru_seq (L, m->gi, T, t, 1, rows, h0, h1, seq, 0, m->stream));
        }
    }
    return 0;
}

/* ROWS whole windows from h_in to h_out. */
static int s_enqueue_window (backend_model_t *m, uint32_t rows)
{
    CUDA_TRY (cudaMemcpyAsync (m->d_in, m->h_in, (size_t) rows * m->W * m->in * sizeof (float), cudaMemcpyHostToDevice,
                               m->stream));
    const int rc = s_enqueue_layers (m, m->d_in, rows, m->W);
    if (rc != 0)
        return rc;
    CUDA_TRY ((cudaError_t) sig_dense_warp (m->head_w, m->head_b, m->hfin + (size_t) (m->L - 1) * m->max_rows * m->H,
                                            m->d_out, m->H, m->out, rows, (int) m->head_act, m->stream));
    return (int) cudaMemcpyAsync (m->h_out, m->d_out, (size_t) rows * m->out * sizeof (float), cudaMemcpyDeviceToHost,
                                  m->stream);
}

/* A stream's step (h_cmd: slot, its ring entry, the features) to h_out. */
static int s_enqueue_step (backend_model_t *m, uint32_t rows)
{
    (void) rows;
    const uint32_t H = m->H;
    CUDA_TRY (cudaMemcpyAsync (m->d_cmd, m->h_cmd, s_cmd_bytes (m), cudaMemcpyHostToDevice, m->stream));
    const float *x = (const float *) (m->d_cmd + 1);
    for (uint32_t k = 0; k < m->L; k++)
        CUDA_TRY ((cudaError_t) sig_gru_cell (&m->layers[k].k, k == 0 ? x : m->hstep + (size_t) (k - 1) * H,
                                              m->state + (size_t) k * H, (uint64_t) m->L * H, m->hstep + (size_t) k * H,
                                              m->d_cmd, k == 0 ? m->ring : NULL, (uint64_t) m->W * m->in, m->stream));
    CUDA_TRY ((cudaError_t) sig_dense_warp (m->head_w, m->head_b, m->hstep + (size_t) (m->L - 1) * H, m->d_out, H, m->out,
                                            1, (int) m->head_act, m->stream));
    return (int) cudaMemcpyAsync (m->h_out, m->d_out, m->out * sizeof (float), cudaMemcpyDeviceToHost, m->stream);
}

/* A stream's advance (h_adv: slot, its next step's entry): its state over the W - 1 steps before. */
static int s_enqueue_advance (backend_model_t *m, uint32_t rows)
{
    (void) rows;
    const uint32_t T = m->W - 1;
    CUDA_TRY (cudaMemcpyAsync (m->d_adv, m->h_adv, sizeof (sig_gru_cmd_t), cudaMemcpyHostToDevice, m->stream));
    CUDA_TRY ((cudaError_t) sig_gru_gather (m->d_adv, m->ring, (uint64_t) m->W * m->in, m->W, m->in, T, m->d_in,
                                            m->stream));
    const int rc = s_enqueue_layers (m, m->d_in, 1, T);
    if (rc != 0)
        return rc;
    return sig_gru_store (m->d_adv, m->hfin, (uint64_t) m->max_rows * m->H, m->L, m->H, m->state, (uint64_t) m->L * m->H,
                          m->stream);
}

typedef int (*enqueue_fn) (backend_model_t *m, uint32_t rows);

/* What ENQUEUE (ROWS) does, captured into an instantiated, uploaded graph. */
static int s_capture (backend_model_t *m, enqueue_fn enqueue, uint32_t rows, cudaGraphExec_t *exec)
{
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture (m->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return (int) e;
    int rc = enqueue (m, rows);
    e = cudaStreamEndCapture (m->stream, &graph);
    if (rc == 0 && e != cudaSuccess)
        rc = (int) e;
    if (rc == 0 && (e = cudaGraphInstantiate (exec, graph, 0)) != cudaSuccess)
        rc = (int) e;
    if (graph)
        cudaGraphDestroy (graph);
    if (rc == 0 && (e = cudaGraphUpload (*exec, m->stream)) != cudaSuccess)
        rc = (int) e;
    return rc;
}

/* EXEC replayed, or ENQUEUE (ROWS) launched directly. */
static int s_launch (backend_model_t *m, cudaGraphExec_t exec, enqueue_fn enqueue, uint32_t rows)
{
    return m->graph ? (int) cudaGraphLaunch (exec, m->stream) : enqueue (m, rows);
}

/* Until everything enqueued so far is done, as the model's "wait" says. */
static int s_wait (backend_model_t *m)
{
    cudaError_t e = cudaEventRecord (m->done, m->stream);
    if (e != cudaSuccess)
        return (int) e;
    if (m->wait == CUDA_WAIT_BLOCK)
        return (int) cudaEventSynchronize (m->done);   /* a blocking-sync event: sleeps in the driver */
    while ((e = cudaEventQuery (m->done)) == cudaErrorNotReady)
        if (m->wait == CUDA_WAIT_YIELD)
            sched_yield ();
    return (int) e;
}

/* ---- the backend interface ---- */

static sig_status_t s_fail (backend_model_t *m, int rc, const char *what, char *err, size_t errlen)
{
    return cuda_device_error (m->device, m->name, (cudaError_t) rc, what, &m->lost, err, errlen);
}

static sig_status_t s_unavailable (const backend_model_t *m, char *err, size_t errlen)
{
    sig_set_error (err, errlen, "model \"%s\": its CUDA context on device %d was lost; the model is unavailable", m->name,
                   m->device);
    return SIG_UNAVAILABLE;
}

static sig_status_t s_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    if (m->lost)
        return s_unavailable (m, err, errlen);
    if (rows < 1 || rows > m->max_rows) {
        sig_set_error (err, errlen, "model \"%s\": %u rows, the GRU kernels take 1 to %u", m->name, rows, m->max_rows);
        return SIG_INTERNAL;
    }
    const cudaError_t e = cudaSetDevice (m->device);   /* the serving thread may serve models of other devices */
    if (e != cudaSuccess)
        return s_fail (m, (int) e, "set device", err, errlen);
    memcpy (m->h_in, in, (size_t) rows * m->W * m->in * sizeof (float));
    int rc = s_launch (m, m->graph ? m->windows[m->bucket[rows]] : NULL, s_enqueue_window, rows);
    if (rc != 0)
        return s_fail (m, rc, m->graph ? "graph launch" : "launch", err, errlen);
    if ((rc = s_wait (m)) != 0)
        return s_fail (m, rc, "wait", err, errlen);
    memcpy (out, m->h_out, (size_t) rows * m->out * sizeof (float));
    return SIG_OK;
}

/* SLOT's window all zeros and its state the reset one, posted on the stream. */
static sig_status_t s_post_reset (backend_model_t *m, uint32_t slot, char *err, size_t errlen)
{
    const size_t ring = (size_t) m->W * m->in, state = (size_t) m->L * m->H;
    cudaError_t e = cudaMemsetAsync (m->ring + slot * ring, 0, ring * sizeof (float), m->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync (m->state + slot * state, m->reset, state * sizeof (float), cudaMemcpyDeviceToDevice,
                             m->stream);
    if (e != cudaSuccess)
        return s_fail (m, (int) e, "stream reset", err, errlen);
    m->slots[slot] = (gru_slot_t) { .pos = 0, .owed = false, .valid = true };
    return SIG_OK;
}

/* SLOT's advance, posted on the stream and not waited for (a window of 1 has nothing to rerun: its
 * state stays the zeros of the reset). */
static sig_status_t s_post_advance (backend_model_t *m, uint32_t slot, char *err, size_t errlen)
{
    if (m->W > 1) {
        const sig_gru_cmd_t c = { .slot = slot, .pos = m->slots[slot].pos };
        memcpy (m->h_adv, &c, sizeof c);
        const int rc = s_launch (m, m->advance, s_enqueue_advance, 1);
        if (rc != 0)
            return s_fail (m, rc, m->graph ? "stream advance graph launch" : "stream advance launch", err, errlen);
    }
    m->slots[slot].owed = false;
    return SIG_OK;
}

static void s_reset (backend_model_t *m, uint32_t slot)
{
    if (slot >= m->slot_count || m->lost || cudaSetDevice (m->device) != cudaSuccess)
        return;
    char err[256];
    m->slots[slot].valid = false;
    s_post_reset (m, slot, err, sizeof err);   /* a failure: posted again before the slot's next step */
}

static void s_advance (backend_model_t *m, uint32_t slot)
{
    if (slot >= m->slot_count || !m->slots[slot].owed || m->lost || cudaSetDevice (m->device) != cudaSuccess)
        return;
    char err[256];
    s_post_advance (m, slot, err, sizeof err);   /* a failure: still owed, run by the slot's next step */
}

static sig_status_t s_step (backend_model_t *m, uint32_t slot, const float *x, float *out, char *err, size_t errlen)
{
    if (slot >= m->slot_count) {
        sig_set_error (err, errlen, "model \"%s\": stream slot %u of %u", m->name, slot, m->slot_count);
        return SIG_INTERNAL;
    }
    if (m->lost)
        return s_unavailable (m, err, errlen);
    const cudaError_t e = cudaSetDevice (m->device);
    if (e != cudaSuccess)
        return s_fail (m, (int) e, "set device", err, errlen);
    gru_slot_t *s = &m->slots[slot];
    sig_status_t st = SIG_OK;
    if (!s->valid)
        st = s_post_reset (m, slot, err, errlen);
    if (st == SIG_OK && s->owed)
        st = s_post_advance (m, slot, err, errlen);
    if (st != SIG_OK)
        return st;
    const sig_gru_cmd_t c = { .slot = slot, .pos = s->pos };
    memcpy (m->h_cmd, &c, sizeof c);
    memcpy (m->h_cmd + sizeof c, x, m->in * sizeof (float));
    int rc = s_launch (m, m->step, s_enqueue_step, 1);
    if (rc != 0)
        return s_fail (m, rc, m->graph ? "stream step graph launch" : "stream step launch", err, errlen);
    if ((rc = s_wait (m)) != 0)
        return s_fail (m, rc, "wait", err, errlen);
    memcpy (out, m->h_out, m->out * sizeof (float));
    s->pos = (s->pos + 1) % m->W;
    s->owed = true;
    return SIG_OK;
}

static const char *s_kernel_name (const backend_model_t *m) { return m->label; }

/* ---- load and destroy ---- */

static void s_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    cudaSetDevice (m->device);
    if (m->stream && !m->lost)
        cudaStreamSynchronize (m->stream);   /* an advance may still run */
    for (uint32_t k = 0; m->windows && k < m->graph_count; k++)
        if (m->windows[k])
            cuda_device_release (m->device, CUDA_RELEASE_GRAPH, m->windows[k]);
    if (m->step)
        cuda_device_release (m->device, CUDA_RELEASE_GRAPH, m->step);
    if (m->advance)
        cuda_device_release (m->device, CUDA_RELEASE_GRAPH, m->advance);
    for (uint32_t k = 0; m->layers && k < m->L; k++) {
        cuda_device_free (m->stream, m->layers[k].w_ih);
        cuda_device_free (m->stream, m->layers[k].w_hh);
        cuda_device_free (m->stream, m->layers[k].b_i);
        cuda_device_free (m->stream, m->layers[k].b_hn);
    }
    void *device[] = { m->head_w, m->head_b, m->d_in, m->d_out, m->d_cmd, m->d_adv, m->gi, m->seq[0], m->seq[1],
                       m->hbuf[0], m->hbuf[1], m->hfin, m->hstep, m->ring, m->state, m->reset };
    for (size_t i = 0; i < sizeof device / sizeof device[0]; i++)
        cuda_device_free (m->stream, device[i]);
    void *pinned[] = { m->h_in, m->h_out, m->h_cmd, m->h_adv };
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
        cuda_device_release (m->device, CUDA_RELEASE_HOST, pinned[i]);
    if (m->done)
        cudaEventDestroy (m->done);
    if (m->stream)
        cudaStreamDestroy (m->stream);   /* returns at once; the frees queued on it still run */
    free (m->layers);
    free (m->slots);
    free (m->bucket);
    free (m->windows);
    free (m);
    *m_p = NULL;
}

static cudaError_t s_alloc (backend_model_t *m, void *p, size_t floats)
{
    return cuda_device_alloc (m->device, m->stream, (void **) p, floats * sizeof (float));
}

/* A host array of N floats to device memory from the pool at *DST. */
static cudaError_t s_upload (backend_model_t *m, float **dst, const float *src, size_t n)
{
    cudaError_t e = s_alloc (m, dst, n);
    /* from pageable memory: returns once the data is staged, so SRC may go at once */
    return e != cudaSuccess ? e : cudaMemcpyAsync (*dst, src, n * sizeof (float), cudaMemcpyHostToDevice, m->stream);
}

/* Layer K's weights in sig_gru.h's layout. */
static cudaError_t s_upload_layer (backend_model_t *m, const rnn_layer_t *src, gru_layer_t *dst)
{
    const size_t H = m->H;
    float *bias = malloc ((GATES + 1) * H * sizeof (float));   /* B_I, then B_HN */
    if (!bias)
        return cudaErrorMemoryAllocation;
    for (size_t j = 0; j < GATES * H; j++)   /* r, z: both biases (summed at load, as the CPU's); n: b_in */
        bias[j] = j < 2 * H ? src->bias[j] : src->bias_ih[j];
    memcpy (bias + GATES * H, src->bias_hh + 2 * H, H * sizeof (float));
    cudaError_t e = s_upload (m, &dst->w_ih, src->w_ih, GATES * H * src->in);
    if (e == cudaSuccess)
        e = s_upload (m, &dst->w_hh, src->w_hh, GATES * H * H);
    if (e == cudaSuccess)
        e = s_upload (m, &dst->b_i, bias, GATES * H);
    if (e == cudaSuccess)
        e = s_upload (m, &dst->b_hn, bias + GATES * H, H);
    free (bias);
    dst->k = (sig_gru_layer_t) { .w_ih = dst->w_ih, .w_hh = dst->w_hh, .b_i = dst->b_i, .b_hn = dst->b_hn,
                                 .in = src->in, .hidden = m->H };
    return e;
}

static cudaError_t s_allocate (backend_model_t *m, const rnn_weights_t *g)
{
    const size_t R = m->max_rows, W = m->W, H = m->H, L = m->L, slots = m->slot_count ? m->slot_count : 1;
    const size_t in_floats = R * W * m->in, out_floats = R * m->out;
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags (&m->stream, cudaStreamNonBlocking)) != cudaSuccess
        || (e = cudaEventCreateWithFlags (&m->done, cudaEventDisableTiming
                                                        | (m->wait == CUDA_WAIT_BLOCK ? cudaEventBlockingSync : 0)))
               != cudaSuccess
        || (e = cudaHostAlloc ((void **) &m->h_in, in_floats * sizeof (float), cudaHostAllocDefault)) != cudaSuccess
        || (e = cudaHostAlloc ((void **) &m->h_out, out_floats * sizeof (float), cudaHostAllocDefault)) != cudaSuccess
        || (e = cudaHostAlloc ((void **) &m->h_cmd, s_cmd_bytes (m), cudaHostAllocDefault)) != cudaSuccess
        || (e = cudaHostAlloc ((void **) &m->h_adv, sizeof (sig_gru_cmd_t), cudaHostAllocDefault)) != cudaSuccess)
        return e;
    memset (m->h_in, 0, in_floats * sizeof (float));
    memset (m->h_out, 0, out_floats * sizeof (float));
    memset (m->h_cmd, 0, s_cmd_bytes (m));
    memset (m->h_adv, 0, sizeof (sig_gru_cmd_t));
    if ((e = s_alloc (m, &m->d_in, in_floats)) != cudaSuccess || (e = s_alloc (m, &m->d_out, out_floats)) != cudaSuccess
        || (e = cuda_device_alloc (m->device, m->stream, (void **) &m->d_cmd, s_cmd_bytes (m))) != cudaSuccess
        || (e = cuda_device_alloc (m->device, m->stream, (void **) &m->d_adv, sizeof (sig_gru_cmd_t))) != cudaSuccess
        || (e = s_alloc (m, &m->gi, R * W * GATES * H)) != cudaSuccess
        || (L > 1 && (e = s_alloc (m, &m->seq[0], R * W * H)) != cudaSuccess)
        || (L > 1 && (e = s_alloc (m, &m->seq[1], R * W * H)) != cudaSuccess)
        || (e = s_alloc (m, &m->hbuf[0], R * H)) != cudaSuccess || (e = s_alloc (m, &m->hbuf[1], R * H)) != cudaSuccess
        || (e = s_alloc (m, &m->hfin, L * R * H)) != cudaSuccess || (e = s_alloc (m, &m->hstep, L * H)) != cudaSuccess
        || (e = s_alloc (m, &m->ring, slots * W * m->in)) != cudaSuccess
        || (e = s_alloc (m, &m->state, slots * L * H)) != cudaSuccess || (e = s_alloc (m, &m->reset, L * H)) != cudaSuccess)
        return e;
    for (uint32_t k = 0; k < m->L; k++)
        if ((e = s_upload_layer (m, &g->layers[k], &m->layers[k])) != cudaSuccess)
            return e;
    if ((e = s_upload (m, &m->head_w, g->head.weight, (size_t) m->out * H)) != cudaSuccess
        || (e = s_upload (m, &m->head_b, g->head.bias, m->out)) != cudaSuccess)
        return e;
    /* the buffers a request reads before anything writes them: defined (zeros), not stale pool memory */
    if ((e = cudaMemsetAsync (m->d_in, 0, in_floats * sizeof (float), m->stream)) != cudaSuccess
        || (e = cudaMemsetAsync (m->ring, 0, slots * W * m->in * sizeof (float), m->stream)) != cudaSuccess
        || (e = cudaMemsetAsync (m->state, 0, slots * L * H * sizeof (float), m->stream)) != cudaSuccess
        || (e = cudaMemsetAsync (m->reset, 0, L * H * sizeof (float), m->stream)) != cudaSuccess)
        return e;
    return cudaStreamSynchronize (m->stream);   /* every allocation and copy done before anything uses them */
}

/* The graphs: a whole window per batch size of graph_rows, a step, an advance. */
static int s_capture_all (backend_model_t *m)
{
    int rc = 0;
    for (uint32_t k = 0; rc == 0 && k < m->graph_count; k++)
        rc = s_capture (m, s_enqueue_window, m->graph_rows[k], &m->windows[k]);
    if (rc == 0)
        rc = s_capture (m, s_enqueue_step, 1, &m->step);
    if (rc == 0 && m->W > 1)
        rc = s_capture (m, s_enqueue_advance, 1, &m->advance);
    return rc;
}

/* The reset state (slot 0's advance over its zero ring: W - 1 zero steps; zeros for a window of 1),
 * then every slot reset. */
static int s_prime (backend_model_t *m, char *err, size_t errlen)
{
    int rc = 0;
    if (m->W > 1) {
        const sig_gru_cmd_t c = { .slot = 0, .pos = 0 };
        memcpy (m->h_adv, &c, sizeof c);
        rc = s_launch (m, m->advance, s_enqueue_advance, 1);
        if (rc == 0)
            rc = (int) cudaMemcpyAsync (m->reset, m->state, (size_t) m->L * m->H * sizeof (float),
                                        cudaMemcpyDeviceToDevice, m->stream);
    }
    if (rc != 0) {
        s_fail (m, rc, "the stream reset state", err, errlen);
        return -1;
    }
    for (uint32_t s = 0; s < m->slot_count; s++)
        if (s_post_reset (m, s, err, errlen) != SIG_OK)
            return -1;
    return 0;
}

/* Warm-up: every graph replayed (each window size, a stream on slot 0 of a few steps, their
 * advances), and a full window checked against float64: a kernel that computes garbage refuses to
 * load. Slot 0 is reset again after. */
static int s_warm (backend_model_t *m, const weights_t *w, char *err, size_t errlen)
{
    for (uint32_t k = 0; k < m->graph_count; k++) {
        int rc = s_launch (m, m->graph ? m->windows[k] : NULL, s_enqueue_window, m->graph_rows[k]);
        if (rc == 0)
            rc = (int) cudaStreamSynchronize (m->stream);
        if (rc != 0) {
            s_fail (m, rc, "warm-up", err, errlen);
            return -1;
        }
    }
    const size_t nwin = (size_t) m->W * m->in;
    float *x = malloc (nwin * sizeof (float)), *y = malloc (m->out * sizeof (float));
    double *ref = malloc (m->out * sizeof (double));
    int rc = x && y && ref ? 0 : -1;
    if (rc)
        sig_set_error (err, errlen, "model \"%s\": out of memory", m->name);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t k = 0; rc == 0 && k < nwin; k++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        x[k] = (float) ((double) (state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    if (rc == 0 && s_infer (m, x, 1, y, err, errlen) != SIG_OK)
        rc = -1;
    if (rc == 0 && gru_reference_window (w, x, 1, ref) != 0) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", m->name);
        rc = -1;
    }
    if (rc == 0) {
        double num = 0, den = 0;
        reference_error_sums (y, ref, m->out, &num, &den);
        const double rel = sqrt (num) / fmax (sqrt (den), 1e-3);
        if (!(rel <= 1e-4)) {
            sig_set_error (err, errlen, "model \"%s\": the GRU kernels' warm-up window differs from the float64 "
                           "reference (relative error %.3g, allowed 1e-4)", m->name, rel);
            rc = -1;
        }
    }
    for (uint32_t i = 0; rc == 0 && m->slot_count > 0 && i < 3; i++) {
        if (s_step (m, 0, x + (size_t) (i % m->W) * m->in, y, err, errlen) != SIG_OK)
            rc = -1;
        s_advance (m, 0);
    }
    if (rc == 0 && m->slot_count > 0 && s_post_reset (m, 0, err, errlen) != SIG_OK)
        rc = -1;
    int e = 0;
    if (rc == 0 && (e = (int) cudaStreamSynchronize (m->stream)) != 0) {
        s_fail (m, e, "warm-up", err, errlen);
        rc = -1;
    }
    free (x);
    free (y);
    free (ref);
    return rc;
}

/* Whether DEVICE can run this build's kernels (sm_90 and compute_90 PTX): 0, or -1 with ERR. */
static int s_device_ok (int device, const char *model, char *err, size_t errlen)
{
    if (cuda_device_check (device, model, err, errlen) != 0)
        return -1;
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute (&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess
        || cudaDeviceGetAttribute (&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess || major < 9) {
        sig_set_error (err, errlen, "model \"%s\": the CUDA GRU kernels are built for compute capability 9.0 and later "
                       "(CUDA_ARCH) and device %d has %d.%d; use \"backend\": \"cpu\"", model, device, major, minor);
        return -1;
    }
    return 0;
}

static backend_model_t *s_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    const rnn_weights_t *g = w->rnn;
    if (w->type != MODEL_TYPE_GRU || !g || g->gates != GATES || !g->layer_count) {
        sig_set_error (err, errlen, "model \"%s\": the GRU backend needs GRU weights (\"type\": \"gru\"), got a model of "
                       "\"type\": \"%s\"", cfg->name, model_type_name (w->type));
        return NULL;
    }
    if (cfg->weight_dtype != WEIGHT_DTYPE_F32) {
        sig_set_error (err, errlen, "model \"%s\": weight_dtype \"%s\": the CUDA GRU kernels hold weights in f32 only; "
                       "use \"weight_dtype\": \"f32\"", cfg->name, weight_dtype_name (cfg->weight_dtype));
        return NULL;
    }
    if (g->hidden > SIG_GRU_MAX_HIDDEN) {
        sig_set_error (err, errlen, "model \"%s\": the CUDA GRU kernels take at most %d hidden units (h is kept in "
                       "shared memory), the model has %u; use \"backend\": \"cpu\"", cfg->name, SIG_GRU_MAX_HIDDEN,
                       g->hidden);
        return NULL;
    }
    if (s_device_ok (device, cfg->name, err, errlen) != 0)
        return NULL;
    model_config_t buckets = *cfg;
    config_graph_rows_default (&buckets);
    const uint32_t max_rows = backend_rows (cfg) ? backend_rows (cfg) : 1;
    if ((uint32_t) buckets.graph_rows[buckets.graph_rows_count - 1] < max_rows) {
        sig_set_error (err, errlen, "model \"%s\": graph_rows: the largest (%d) is below the largest launch (%u)",
                       cfg->name, buckets.graph_rows[buckets.graph_rows_count - 1], max_rows);
        return NULL;
    }
    backend_model_t *m = calloc (1, sizeof *m);
    const uint32_t slot_count = backend_stream_slots (cfg);
    if (!m || !(m->layers = calloc (g->layer_count, sizeof *m->layers))
        || !(m->slots = calloc (slot_count ? slot_count : 1, sizeof *m->slots))
        || !(m->windows = calloc (buckets.graph_rows_count, sizeof *m->windows))
        || !(m->bucket = calloc (max_rows + 1, sizeof *m->bucket))) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        s_destroy (&m);
        return NULL;
    }
    snprintf (m->name, sizeof m->name, "%s", cfg->name);
    m->device = device;
    m->graph = cfg->graph;
    m->wait = cfg->wait;
    m->L = (uint32_t) g->layer_count;
    m->in = g->step_size;
    m->H = g->hidden;
    m->W = g->window;
    m->out = g->head.out;
    m->head_act = g->head.activation;
    m->max_rows = max_rows;
    m->slot_count = slot_count;
    pthread_mutex_lock (&s_lock);
    const gru_cuda_mode_t forced = s_forced;
    pthread_mutex_unlock (&s_lock);
    m->whole = forced == GRU_CUDA_PLAN ? m->H <= GRU_CUDA_SEQ_MAX_HIDDEN : forced == GRU_CUDA_SEQ;
    snprintf (m->label, sizeof m->label, "%s%s", m->whole ? "gru-seq" : "gru-step", m->graph ? "+graph" : "");
    m->graph_count = (uint32_t) buckets.graph_rows_count;
    for (uint32_t k = 0, r = 1; k < m->graph_count; k++) {
        /* (the config's last is the largest launch; a caller's larger one would overrun the buffers) */
        m->graph_rows[k] = (uint32_t) buckets.graph_rows[k] < max_rows ? (uint32_t) buckets.graph_rows[k] : max_rows;
        for (; r <= m->graph_rows[k] && r <= max_rows; r++)
            m->bucket[r] = (uint8_t) k;
    }
    cudaError_t e = cudaSetDevice (device);
    if (e == cudaSuccess)
        e = s_allocate (m, g);
    if (e != cudaSuccess) {
        s_fail (m, (int) e, "allocation", err, errlen);
        s_destroy (&m);
        return NULL;
    }
    const int rc = m->graph ? s_capture_all (m) : 0;
    if (rc != 0) {
        s_fail (m, rc, "graph capture", err, errlen);
        s_destroy (&m);
        return NULL;
    }
    if (s_prime (m, err, errlen) != 0 || s_warm (m, w, err, errlen) != 0) {
        s_destroy (&m);
        return NULL;
    }
    return m;
}

const backend_iface_t backend_gru_cuda_iface = {
    .name = "cuda",
    .device = BACKEND_DEVICE_GPU,
    .load = s_load,
    .infer = s_infer,
    .kernel_name = s_kernel_name,
    .destroy = s_destroy,
    .stream_reset = s_reset,
    .stream_step = s_step,
    .stream_advance = s_advance,
};
