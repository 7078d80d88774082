/* The CUDA LSTM backend (backend_lstm_cuda.h): the host side of kernels/lstm_persistent.cu.
 *
 * One model instance = one resident kernel on its own stream, a mailbox in mapped pinned memory
 * (a ring of SIG_LSTM_RING command entries and the full-window area), the image (weights and
 * plan), the stream state (every slot's ring of projections, G and c) and, in GRID mode, the
 * exchange buffers, all in device memory. The request path makes no CUDA call: it writes tagged
 * 64-bit words into the next ring entry (features first, the command words last, each word
 * carrying the command's sequence, so the kernel reads everything in one round trip and needs no
 * separate flag) and spins on the answer (a step's outputs, reset to a sentinel before the command,
 * or the entry's done word), with the watchdog. Commands complete in order; an advance is posted
 * and not waited for (it runs after the reply, before the next command); a step on a slot whose
 * advance is owed posts it first; a slot never reset is reset first.
 *
 * Nothing synchronises the device once a kernel may be resident (docs/persistent-notes.md):
 * device memory from a stream-ordered pool per device that never trims (cudaFreeAsync on the
 * model's stream after its kernel left), mailboxes kept in a free list for later loads instead of
 * cudaFreeHost, no cudaDeviceSynchronize anywhere. */
#ifdef SIGSERVE_HAVE_CUDA
#define _GNU_SOURCE
#include "backends/cuda/backend_lstm_cuda.h"
#include "backends/cuda/backend_cuda.h"

#include "kernels.h"
#include "weights/lstm.h"
#include "base/log.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define START_MS 20000.0        /* a fresh launch may take this long to load its weights */
#define SENTINEL SIG_PERSISTENT_SENTINEL

typedef struct {
    uint32_t pos;               /* ring position of the slot's next step */
    bool valid;                 /* reset at least once */
    bool owed;                  /* a step ran and its advance was not posted yet */
} slot_t;

struct backend_model {
    char name[CONFIG_NAME_MAX];
    int device;
    cuda_wait_t wait;
    uint32_t watchdog_ms;
    uint32_t in, out, W, max_rows, slot_count;
    sig_lstm_plan_t plan;
    sig_lstm_layout_t lay;
    cudaStream_t stream;        /* the kernel's, for good */
    uint8_t *box;               /* the mailbox (host address) */
    size_t box_bytes;
    void *d_box;
    void *d_image, *d_state, *d_xchg;
    uint64_t posted;            /* commands posted: command n in entry n % RING, sequence n + 1 */
    uint64_t completed;         /* commands known complete (they complete in order) */
    slot_t *slots;
    bool resident;              /* launched and not seen to leave */
    bool lost, hung;
};

/* ---- process-wide: pools, kept mailboxes, tuning ---- */

typedef struct {
    uint8_t *p;
    size_t bytes;
} kept_box_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;   /* load and destroy only */
static kept_box_t s_kept[64];
static size_t s_kept_count;
static sig_lstm_tuning_t s_tuning;

void lstm_cuda_tuning (const sig_lstm_tuning_t *tuning)
{
    pthread_mutex_lock (&s_lock);
    if (tuning)
        s_tuning = *tuning;
    else
        memset (&s_tuning, 0, sizeof s_tuning);
    pthread_mutex_unlock (&s_lock);
}

static cudaError_t s_dev_alloc (backend_model_t *m, void **p, size_t bytes)
{
    cudaMemPool_t pool;
    cudaError_t e = cuda_device_pool (m->device, &pool);
    return e != cudaSuccess ? e : cudaMallocFromPoolAsync (p, bytes ? bytes : 16, pool, m->stream);
}

/* A mapped mailbox of at least BYTES: a kept one, or a new one. */
static cudaError_t s_box_get (size_t bytes, uint8_t **p, size_t *got)
{
    pthread_mutex_lock (&s_lock);
    size_t best = s_kept_count;
    for (size_t i = 0; i < s_kept_count; i++)
        if (s_kept[i].bytes >= bytes && (best == s_kept_count || s_kept[i].bytes < s_kept[best].bytes))
            best = i;
    if (best < s_kept_count) {
        *p = s_kept[best].p;
        *got = s_kept[best].bytes;
        s_kept[best] = s_kept[--s_kept_count];
        pthread_mutex_unlock (&s_lock);
        return cudaSuccess;
    }
    pthread_mutex_unlock (&s_lock);
    *got = bytes;
    /* portable: mapped in every context, whichever device the model is on */
    return cudaHostAlloc ((void **) p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
}

static void s_box_keep (uint8_t *p, size_t bytes)
{
    if (!p)
        return;
    pthread_mutex_lock (&s_lock);
    if (s_kept_count < sizeof s_kept / sizeof s_kept[0])
        s_kept[s_kept_count++] = (kept_box_t) { p, bytes };
    else
        log_warn ("CUDA LSTM backend: more than %zu mailboxes kept; one (%zu bytes of pinned memory) is leaked",
                  sizeof s_kept / sizeof s_kept[0], bytes);
    pthread_mutex_unlock (&s_lock);
}

/* ---- the request path ---- */

static double s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static uint8_t *s_entry (const backend_model_t *m, uint64_t n)
{
    return m->box + m->lay.ring + (size_t) (n % SIG_LSTM_RING) * m->lay.entry_bytes;
}

static sig_status_t s_lost (backend_model_t *m, cudaError_t e, char *err, size_t errlen)
{
    m->lost = true;
    if (e == cudaErrorNotReady) {
        m->hung = true;
        sig_set_error (err, errlen, "model \"%s\": the LSTM kernel on device %d did not answer within the watchdog "
                       "(%u ms); the model is unavailable", m->name, m->device, m->watchdog_ms);
    } else if (e == cudaSuccess) {
        m->resident = false;
        sig_set_error (err, errlen, "model \"%s\": the LSTM kernel on device %d exited unexpectedly; the model is "
                       "unavailable", m->name, m->device);
    } else {
        sig_set_error (err, errlen, "model \"%s\": the LSTM kernel on device %d failed: %s (%s); the model is "
                       "unavailable", m->name, m->device, cudaGetErrorString (e), cudaGetErrorName (e));
    }
    return SIG_UNAVAILABLE;
}

static sig_status_t s_unavailable (const backend_model_t *m, char *err, size_t errlen)
{
    if (m->hung)
        sig_set_error (err, errlen, "model \"%s\": its LSTM kernel on device %d stopped answering (watchdog %u ms); "
                       "the model is unavailable", m->name, m->device, m->watchdog_ms);
    else
        sig_set_error (err, errlen, "model \"%s\": its LSTM kernel on device %d is gone; the model is unavailable",
                       m->name, m->device);
    return SIG_UNAVAILABLE;
}

/* Whether command N is complete: WORDS outputs of a step (no sentinel left), else its done word. */
static bool s_complete (const backend_model_t *m, uint64_t n, uint32_t words)
{
    if (m->completed > n)
        return true;
    const uint8_t *e = s_entry (m, n);
    if (words) {
        const uint32_t *y = (const uint32_t *) (e + m->lay.outputs);
        for (uint32_t i = 0; i < words; i++)
            if (__atomic_load_n (&y[i], __ATOMIC_ACQUIRE) == SENTINEL)
                return false;
        return true;
    }
    return __atomic_load_n ((const uint32_t *) (e + m->lay.done), __ATOMIC_ACQUIRE) == (uint32_t) (n + 1u);
}

/* Waits for command N (spin, yield or short sleeps, as configured), with the watchdog: the clock
 * read every 64 rounds, the stream asked every millisecond past the first (a context lost to
 * another model's fault shows at once, not after the watchdog). */
static sig_status_t s_wait (backend_model_t *m, uint64_t n, uint32_t words, char *err, size_t errlen)
{
    double start = 0.0, asked = 0.0;
    for (uint32_t spins = 1;; spins++) {
        if (s_complete (m, n, words)) {
            if (m->completed < n + 1u)
                m->completed = n + 1u;
            return SIG_OK;
        }
        if ((spins & 63u) == 0u) {
            const double now = s_now_ms ();
            if (start == 0.0)
                start = asked = now;
            else if (now - start >= (double) m->watchdog_ms) {
                if (s_complete (m, n, words))
                    continue;
                cudaSetDevice (m->device);
                cudaError_t e = cudaStreamQuery (m->stream);
                return s_lost (m, e == cudaSuccess || e == cudaErrorNotReady ? cudaErrorNotReady : e, err, errlen);
            } else if (now - asked >= 1.0) {
                asked = now;
                cudaSetDevice (m->device);
                cudaError_t e = cudaStreamQuery (m->stream);
                if (e != cudaErrorNotReady && !s_complete (m, n, words))
                    return s_lost (m, e, err, errlen);
            }
        }
        switch (m->wait) {
        case CUDA_WAIT_SPIN: __builtin_ia32_pause (); break;
        case CUDA_WAIT_YIELD: sched_yield (); break;
        case CUDA_WAIT_BLOCK: {
            const struct timespec ts = { 0, 2000 };
            nanosleep (&ts, NULL);
            break;
        }
        }
    }
}

/* Posts command OP (POS, SLOT) with NX features X; *N gets its number. OUTS: the output words the
 * answer will fill (set to the sentinel first). */
static sig_status_t s_post (backend_model_t *m, uint32_t op, uint32_t pos, uint32_t slot, const float *x, uint32_t nx,
                            uint32_t outs, uint64_t *n_out, char *err, size_t errlen)
{
    if (m->lost)
        return s_unavailable (m, err, errlen);
    const uint64_t n = m->posted;
    if (n >= SIG_LSTM_RING && m->completed < n - SIG_LSTM_RING + 1u) {   /* the entry's last use */
        sig_status_t st = s_wait (m, n - SIG_LSTM_RING, 0u, err, errlen);
        if (st != SIG_OK)
            return st;
    }
    uint8_t *e = s_entry (m, n);
    const uint64_t tag = (uint64_t) (uint32_t) (n + 1u) << 32;
    uint32_t *y = (uint32_t *) (e + m->lay.outputs);
    for (uint32_t i = 0; i < outs; i++)
        __atomic_store_n (&y[i], SENTINEL, __ATOMIC_RELAXED);
    uint64_t *w = (uint64_t *) (e + m->lay.cmd);
    for (uint32_t i = 0; i < nx; i++) {
        uint32_t bits;
        memcpy (&bits, &x[i], sizeof bits);
        __atomic_store_n (&w[2 + i], tag | bits, __ATOMIC_RELAXED);
    }
    __atomic_store_n (&w[1], tag | slot, __ATOMIC_RELAXED);
    /* the sentinels before any word the kernel could act on: a release store last (x86: in order) */
    __atomic_store_n (&w[0], tag | (uint64_t) (pos << 8) | op, __ATOMIC_RELEASE);
    m->posted = n + 1u;
    *n_out = n;
    return SIG_OK;
}

static sig_status_t s_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    if (m->lost)
        return s_unavailable (m, err, errlen);
    if (rows < 1 || rows > m->max_rows) {
        sig_set_error (err, errlen, "model \"%s\": %u rows, the LSTM kernel takes 1 to %u", m->name, rows, m->max_rows);
        return SIG_INTERNAL;
    }
    /* the previous window (if any) is complete: the host waited for it */
    memcpy (m->box + m->lay.window_in, in, (size_t) rows * m->W * m->in * sizeof (float));
    uint64_t n;
    sig_status_t st = s_post (m, SIG_LSTM_OP_WINDOW, 0u, rows, NULL, 0u, 0u, &n, err, errlen);
    if (st == SIG_OK)
        st = s_wait (m, n, 0u, err, errlen);
    if (st == SIG_OK)
        memcpy (out, m->box + m->lay.window_out, (size_t) rows * m->out * sizeof (float));
    return st;
}

static void s_reset (backend_model_t *m, uint32_t slot)
{
    if (slot >= m->slot_count)
        return;
    uint64_t n;
    char err[256];
    if (s_post (m, SIG_LSTM_OP_RESET, 0u, slot, NULL, 0u, 0u, &n, err, sizeof err) == SIG_OK)
        m->slots[slot] = (slot_t) { .pos = 0, .valid = true, .owed = false };
}

static void s_advance (backend_model_t *m, uint32_t slot)
{
    if (slot >= m->slot_count || !m->slots[slot].owed)
        return;
    uint64_t n;
    char err[256];
    if (s_post (m, SIG_LSTM_OP_ADVANCE, m->slots[slot].pos, slot, NULL, 0u, 0u, &n, err, sizeof err) == SIG_OK)
        m->slots[slot].owed = false;
}

static sig_status_t s_step (backend_model_t *m, uint32_t slot, const float *x, float *out, char *err, size_t errlen)
{
    if (slot >= m->slot_count) {
        sig_set_error (err, errlen, "model \"%s\": stream slot %u of %u", m->name, slot, m->slot_count);
        return SIG_INTERNAL;
    }
    if (m->lost)
        return s_unavailable (m, err, errlen);
    slot_t *s = &m->slots[slot];
    if (!s->valid)
        s_reset (m, slot);
    if (s->owed)
        s_advance (m, slot);
    uint64_t n;
    sig_status_t st = s_post (m, SIG_LSTM_OP_STEP, s->pos, slot, x, m->in, m->out, &n, err, errlen);
    if (st == SIG_OK)
        st = s_wait (m, n, m->out, err, errlen);
    if (st != SIG_OK)
        return st;
    memcpy (out, s_entry (m, n) + m->lay.outputs, m->out * sizeof (float));
    s->pos = (s->pos + 1u) % m->W;
    s->owed = true;
    return SIG_OK;
}

sig_status_t lstm_cuda_ping (backend_model_t *m, const float *x, float *out, char *err, size_t errlen)
{
    uint64_t n;
    sig_status_t st = s_post (m, SIG_LSTM_OP_PING, 0u, 0u, x, m->in, 1u, &n, err, errlen);
    if (st == SIG_OK)
        st = s_wait (m, n, 1u, err, errlen);
    if (st == SIG_OK)
        memcpy (out, s_entry (m, n) + m->lay.outputs, sizeof (float));
    return st;
}

sig_status_t lstm_cuda_sync (backend_model_t *m, char *err, size_t errlen)
{
    if (m->lost)
        return s_unavailable (m, err, errlen);
    return m->posted ? s_wait (m, m->posted - 1u, 0u, err, errlen) : SIG_OK;
}

int lstm_cuda_stall (backend_model_t *m)
{
    uint64_t n;
    char err[256];
    return s_post (m, SIG_LSTM_OP_STALL, 0u, 0u, NULL, 0u, 0u, &n, err, sizeof err) == SIG_OK ? 0
                                                                                               : (int) cudaErrorNotReady;
}

bool lstm_cuda_lost (const backend_model_t *m) { return m->lost; }
const sig_lstm_plan_t *lstm_cuda_plan (const backend_model_t *m) { return m ? &m->plan : NULL; }

static const char *s_kernel_name (const backend_model_t *m)
{
    return m->plan.mode == SIG_LSTM_GRID ? "lstm-grid" : "lstm-persistent";
}

/* ---- load and destroy ---- */

/* Raises stop and waits (bounded) for the kernel to leave. true when it is gone. */
static bool s_stop (backend_model_t *m)
{
    if (!m->resident)
        return true;
    __atomic_store_n ((uint32_t *) (m->box + m->lay.ctrl), 1u, __ATOMIC_RELEASE);
    const double start = s_now_ms ();
    const double limit = m->watchdog_ms > 100u ? m->watchdog_ms : 100.0;
    for (;;) {
        cudaError_t e = cudaStreamQuery (m->stream);
        if (e != cudaErrorNotReady) {
            m->resident = false;
            return true;
        }
        if (s_now_ms () - start > limit)
            break;
        const struct timespec ts = { 0, 100000 };
        nanosleep (&ts, NULL);
    }
    log_warn ("model \"%s\": the LSTM kernel on device %d did not stop within %.0f ms; its memory is left to the end "
              "of the process", m->name, m->device, limit);
    return false;
}

static void s_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    cudaSetDevice (m->device);
    if (s_stop (m)) {
        if (m->stream) {
            if (m->d_image)
                cudaFreeAsync (m->d_image, m->stream);
            if (m->d_state)
                cudaFreeAsync (m->d_state, m->stream);
            if (m->d_xchg)
                cudaFreeAsync (m->d_xchg, m->stream);
            cudaStreamDestroy (m->stream);   /* returns at once; the frees queued on it still run */
        }
        s_box_keep (m->box, m->box_bytes);
    }
    free (m->slots);
    free (m);
    *m_p = NULL;
}

/* The float64 forward pass of one window (the warm-up's check). */
static int s_window_f64 (const lstm_weights_t *w, const float *x, double *out)
{
    const uint32_t H = w->hidden, L = (uint32_t) w->layer_count, in = w->step_size;
    double *h = calloc ((size_t) L * H, sizeof *h), *c = calloc ((size_t) L * H, sizeof *c);
    double *g = malloc (4 * (size_t) H * sizeof *g);
    if (!h || !c || !g) {
        free (h);
        free (c);
        free (g);
        return -1;
    }
    for (uint32_t t = 0; t < w->window; t++)
        for (uint32_t k = 0; k < L; k++) {
            const lstm_layer_t *Lk = &w->layers[k];
            const double *hx = k ? h + (size_t) (k - 1) * H : NULL;
            const float *xt = x + (size_t) t * in;
            double *hk = h + (size_t) k * H, *ck = c + (size_t) k * H;
            for (uint32_t r = 0; r < 4 * H; r++) {
                double acc = Lk->bias[r];
                for (uint32_t i = 0; i < Lk->in; i++)
                    acc += (double) Lk->w_ih[(size_t) r * Lk->in + i] * (k ? hx[i] : (double) xt[i]);
                for (uint32_t i = 0; i < H; i++)
                    acc += (double) Lk->w_hh[(size_t) r * H + i] * hk[i];
                g[r] = acc;
            }
            for (uint32_t j = 0; j < H; j++) {
                const double i = 1.0 / (1.0 + exp (-g[j])), f = 1.0 / (1.0 + exp (-g[H + j]));
                const double gg = tanh (g[2 * H + j]), o = 1.0 / (1.0 + exp (-g[3 * H + j]));
                ck[j] = f * ck[j] + i * gg;
                hk[j] = o * tanh (ck[j]);
            }
        }
    const double *last = h + (size_t) (L - 1) * H;
    for (uint32_t o = 0; o < w->head.out; o++) {
        double acc = w->head.bias[o];
        for (uint32_t i = 0; i < H; i++)
            acc += (double) w->head.weight[(size_t) o * H + i] * last[i];
        switch (w->head.activation) {
        case ACTIVATION_RELU: acc = acc > 0 ? acc : 0; break;
        case ACTIVATION_SIGMOID: acc = 1.0 / (1.0 + exp (-acc)); break;
        case ACTIVATION_TANH: acc = tanh (acc); break;
        default: break;
        }
        out[o] = acc;
    }
    free (h);
    free (c);
    free (g);
    return 0;
}

/* Warm-up: a full window checked against float64 (a kernel that computes garbage refuses to load),
 * a ping, a stream on slot 0 (reset, steps, advances), every command kind once. */
static int s_warm (backend_model_t *m, const lstm_weights_t *w, weight_dtype_t dtype, char *err, size_t errlen)
{
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
    if (rc == 0 && s_window_f64 (w, x, ref) != 0) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", m->name);
        rc = -1;
    }
    if (rc == 0) {
        double num = 0, den = 0;
        for (uint32_t o = 0; o < m->out; o++) {
            const double d = (double) y[o] - ref[o];
            num += isfinite (d) ? d * d : INFINITY;
            den += ref[o] * ref[o];
        }
        const double rel = sqrt (num) / fmax (sqrt (den), 1e-3);
        const double tol = dtype == WEIGHT_DTYPE_F32 ? 1e-4 : dtype == WEIGHT_DTYPE_F16 ? 2e-2 : 1e-1;
        if (!(rel <= tol)) {
            sig_set_error (err, errlen, "model \"%s\": the LSTM kernel's warm-up window differs from the float64 "
                           "reference (relative error %.3g, allowed %.0e for %s weights)", m->name, rel, tol,
                           weight_dtype_name (dtype));
            rc = -1;
        }
    }
    float p = 0.0f;
    if (rc == 0 && lstm_cuda_ping (m, x, &p, err, errlen) != SIG_OK)
        rc = -1;
    if (rc == 0 && m->slot_count > 0) {
        for (int i = 0; rc == 0 && i < 8; i++) {
            if (s_step (m, 0, x + (size_t) (i % m->W) * m->in, y, err, errlen) != SIG_OK)
                rc = -1;
            s_advance (m, 0);
        }
        if (rc == 0 && lstm_cuda_sync (m, err, errlen) != SIG_OK)
            rc = -1;
        m->slots[0] = (slot_t) { 0 };   /* its first user resets it */
    }
    free (x);
    free (y);
    free (ref);
    return rc;
}

/* After the launch: every block loaded its weights (or the launch failed, or timed out). */
static int s_started (backend_model_t *m, char *err, size_t errlen)
{
    const double start = s_now_ms ();
    const uint32_t *ready = (const uint32_t *) (m->box + m->lay.ready);
    for (;;) {
        uint32_t count = 0;
        for (uint32_t b = 0; b < m->plan.blocks; b++)
            count += __atomic_load_n (&ready[b], __ATOMIC_ACQUIRE) != 0u;
        if (count == m->plan.blocks)
            return 0;
        cudaError_t e = cudaStreamQuery (m->stream);
        if (e != cudaErrorNotReady) {
            m->resident = false;
            sig_set_error (err, errlen, "model \"%s\": the LSTM kernel on device %d ended before it started: %s",
                           m->name, m->device, e == cudaSuccess ? "it returned" : cudaGetErrorString (e));
            return -1;
        }
        if (s_now_ms () - start > START_MS) {
            sig_set_error (err, errlen, "model \"%s\": only %u of the LSTM kernel's %u blocks started on device %d "
                           "within %.0f s (SMs held by other resident kernels?)", m->name, count, m->plan.blocks,
                           m->device, START_MS / 1e3);
            return -1;
        }
        const struct timespec ts = { 0, 50000 };
        nanosleep (&ts, NULL);
    }
}

static backend_model_t *s_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    if (w->type != MODEL_TYPE_LSTM || !w->lstm) {
        sig_set_error (err, errlen, "model \"%s\": the LSTM backend needs LSTM weights (\"type\": \"lstm\")", cfg->name);
        return NULL;
    }
    const lstm_weights_t *lw = w->lstm;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount (&count);
    if (e != cudaSuccess || device < 0 || device >= count) {
        sig_set_error (err, errlen, "model \"%s\": device %d: %s", cfg->name, device,
                       e != cudaSuccess ? cudaGetErrorString (e) : "no such CUDA device");
        return NULL;
    }
    int major = 0, minor = 0;
    if (!sig_lstm_supported (device, &major, &minor)) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties (&prop, device) != cudaSuccess)
            snprintf (prop.name, sizeof prop.name, "?");
        sig_set_error (err, errlen, "model \"%s\": the CUDA LSTM kernel needs a GPU of compute capability 9.0 (H100, "
                       "H200: thread-block clusters, built for sm_90) and device %d (%s) has %d.%d; use \"backend\": "
                       "\"cpu\"", cfg->name, device, prop.name, major, minor);
        return NULL;
    }
    if (lw->layer_count > SIG_LSTM_MAX_LAYERS) {
        sig_set_error (err, errlen, "model \"%s\": the CUDA LSTM kernel takes at most %d layers, the model has %zu",
                       cfg->name, SIG_LSTM_MAX_LAYERS, lw->layer_count);
        return NULL;
    }
    sig_lstm_net_t net;
    memset (&net, 0, sizeof net);
    net.layers = (uint32_t) lw->layer_count;
    net.in = lw->step_size;
    net.hidden = lw->hidden;
    net.out = lw->head.out;
    net.window = lw->window;
    net.head_act = (int) lw->head.activation;
    for (uint32_t k = 0; k < net.layers; k++) {
        net.w_ih[k] = lw->layers[k].w_ih;
        net.w_hh[k] = lw->layers[k].w_hh;
        net.bias[k] = lw->layers[k].bias;
    }
    net.head_w = lw->head.weight;
    net.head_b = lw->head.bias;
    sig_lstm_tuning_t tuning;
    pthread_mutex_lock (&s_lock);
    tuning = s_tuning;
    pthread_mutex_unlock (&s_lock);
    backend_model_t *m = calloc (1, sizeof *m);
    const uint32_t slot_count = backend_stream_slots (cfg);
    if (!m || !(m->slots = calloc (slot_count ? slot_count : 1, sizeof *m->slots))) {
        free (m);
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        return NULL;
    }
    snprintf (m->name, sizeof m->name, "%s", cfg->name);
    m->device = device;
    m->wait = cfg->wait;
    m->watchdog_ms = cfg->watchdog_ms ? cfg->watchdog_ms : 1000u;
    m->in = net.in;
    m->out = net.out;
    m->W = net.window;
    m->max_rows = backend_rows (cfg) ? backend_rows (cfg) : 1u;
    m->slot_count = slot_count;
    if ((e = cudaSetDevice (device)) == cudaSuccess)
        e = (cudaError_t) sig_lstm_plan (&net, (uint32_t) cfg->weight_dtype, slot_count, m->max_rows, device, &tuning,
                                         &m->plan);
    if (e == cudaErrorNotSupported || e == cudaErrorInvalidValue) {
        sig_set_error (err, errlen, "model \"%s\": the CUDA LSTM kernel cannot serve %zu layers of %u units, %u inputs "
                       "in %s: %s; use \"backend\": \"cpu\"", cfg->name, lw->layer_count, net.hidden, net.in,
                       weight_dtype_name (cfg->weight_dtype), m->plan.why);
        s_destroy (&m);
        return NULL;
    }
    void *image = NULL;
    if (e == cudaSuccess)
        e = (cudaError_t) sig_lstm_layout (&m->plan, &m->lay);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags (&m->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = s_box_get (m->lay.total, &m->box, &m->box_bytes);
    if (e == cudaSuccess) {
        memset (m->box, 0, m->box_bytes);
        e = cudaHostGetDevicePointer (&m->d_box, m->box, 0);
    }
    if (e == cudaSuccess && !(image = malloc (m->plan.image_bytes)))
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = (cudaError_t) sig_lstm_pack (&net, &m->plan, &m->lay, image);
    if (e == cudaSuccess)
        e = s_dev_alloc (m, &m->d_image, m->plan.image_bytes);
    if (e == cudaSuccess)
        e = s_dev_alloc (m, &m->d_state, m->plan.state_bytes);
    if (e == cudaSuccess && m->plan.xchg_bytes)
        e = s_dev_alloc (m, &m->d_xchg, m->plan.xchg_bytes);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync (m->d_image, image, m->plan.image_bytes, cudaMemcpyHostToDevice, m->stream);
    if (e == cudaSuccess)
        e = cudaMemsetAsync (m->d_state, 0, m->plan.state_bytes, m->stream);
    if (e == cudaSuccess && m->d_xchg)
        e = cudaMemsetAsync (m->d_xchg, 0, m->plan.xchg_bytes, m->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize (m->stream);   /* its own stream: uploads done before the kernel reads them */
    free (image);
    if (e == cudaSuccess) {
        m->resident = true;
        e = (cudaError_t) sig_lstm_launch (m->d_image, m->d_state, m->d_xchg, m->d_box, &m->plan, m->stream);
        if (e != cudaSuccess)
            m->resident = false;
    }
    if (e != cudaSuccess) {
        sig_set_error (err, errlen, "model \"%s\": CUDA LSTM kernel %s on device %d: %s (%s)", cfg->name,
                       m->resident ? "start" : "setup", device, cudaGetErrorString (e), cudaGetErrorName (e));
        s_destroy (&m);
        return NULL;
    }
    if (s_started (m, err, errlen) != 0 || s_warm (m, lw, cfg->weight_dtype, err, errlen) != 0) {
        s_destroy (&m);
        return NULL;
    }
    return m;
}

const backend_iface_t backend_lstm_cuda_iface = {
    .name = "cuda",
    .load = s_load,
    .infer = s_infer,
    .kernel_name = s_kernel_name,
    .destroy = s_destroy,
    .stream_reset = s_reset,
    .stream_step = s_step,
    .stream_advance = s_advance,
};

#endif /* SIGSERVE_HAVE_CUDA */
