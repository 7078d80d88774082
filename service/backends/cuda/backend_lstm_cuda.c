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
 * The mailbox, the wait with its watchdog, the start, the stop and the losses are the persistent
 * host layer's (persistent.h); the kernel counts as resident on its device like the MLP's, so
 * releases that would wait for it are deferred and cuBLAS loads refused (device.h). Nothing
 * synchronises the device; device memory comes from the device's stream-ordered pool.
 *
 * Apart (plan 4, sig_lstm.h; the plan's `apart`, asked for with SIG_LSTM_SYNC_ADVANCE_APART: not the
 * default, a single stream's step measured slower): a second resident launch, the advancer, with a
 * mailbox and stream of its own, takes the advances and resets, so a stream's step never waits
 * behind another stream's advance. Each slot counts the versions of its state posted (every
 * advance and reset one more); a step carries the version it needs and the kernel waits for it. An
 * advance or reset is posted once the slot's last step is done (its done word, which the kernel
 * writes after fencing the step's ring entry); both rings' losses are the model's. */
#define _GNU_SOURCE
#include "backends/cuda/backend_lstm_cuda_impl.h"

#include "backends/cuda/device.h"
#include "backends/cuda/lstm_spec.h"
#include "backends/cuda/persistent.h"
#include "base/log.h"
#include "sig_common.h"
#include "sig_lstm.h"
#include "sig_spec.h"
#include "weights/lstm.h"
#include "weights/reference.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the request path ---- */

static uint8_t *s_entry (const backend_model_t *m, const ring_t *r, uint64_t n)
{
    return r->host->box + m->lay.ring + (size_t) (n % SIG_LSTM_RING) * m->lay.entry_bytes;
}

/* The launch that is lost, if either is (apart, either loss is the model's). */
static const persistent_t *s_lost (const backend_model_t *m)
{
    return m->host.lost ? &m->host : m->adv.lost ? &m->adv : NULL;
}

/* What a wait waits for: command N of ring R of M complete, WORDS outputs of a step (no sentinel
 * left), else (WORDS 0) its done word; DONE: its done word itself, whatever the host knows (apart,
 * a step's ring entry is visible to the advancer once done says so, after its outputs). */
typedef struct {
    const backend_model_t *m;
    const ring_t *r;
    uint64_t n;
    uint32_t words;
    bool done;
} command_t;

static bool s_complete (const void *arg)
{
    const command_t *c = arg;
    const backend_model_t *m = c->m;
    const uint8_t *e = s_entry (m, c->r, c->n);
    if (c->done) {   /* the entry may hold a later command by now: its done word is then later still */
        const uint32_t d = __atomic_load_n ((const uint32_t *) (e + m->lay.done), __ATOMIC_ACQUIRE);
        return (int32_t) (d - (uint32_t) (c->n + 1u)) >= 0;
    }
    if (c->r->completed > c->n)
        return true;
    if (c->words) {
        const uint32_t *y = (const uint32_t *) (e + m->lay.outputs);
        for (uint32_t i = 0; i < c->words; i++)
            if (__atomic_load_n (&y[i], __ATOMIC_ACQUIRE) == SENTINEL)
                return false;
        return true;
    }
    return __atomic_load_n ((const uint32_t *) (e + m->lay.done), __ATOMIC_ACQUIRE) == (uint32_t) (c->n + 1u);
}

/* Waits for command N of ring R (persistent_wait: the configured wait, the watchdog). */
static sig_status_t s_wait_as (backend_model_t *m, ring_t *r, uint64_t n, uint32_t words, bool done, char *err,
                               size_t errlen)
{
    const command_t c = { m, r, n, words, done };
    sig_status_t st = persistent_wait (r->host, s_complete, &c, err, errlen);
    if (st == SIG_OK && r->completed < n + 1u)
        r->completed = n + 1u;
    return st;
}

static sig_status_t s_wait (backend_model_t *m, ring_t *r, uint64_t n, uint32_t words, char *err, size_t errlen)
{
    return s_wait_as (m, r, n, words, false, err, errlen);
}

/* Posts command OP (POS, SLOT) with NX features X on ring R; *N gets its number. OUTS: the output
 * words the answer will fill (set to the sentinel first). */
static sig_status_t s_post (backend_model_t *m, ring_t *r, uint32_t op, uint32_t pos, uint32_t slot, const float *x,
                            uint32_t nx, uint32_t outs, uint64_t *n_out, char *err, size_t errlen)
{
    const persistent_t *lost = s_lost (m);
    if (lost)
        return persistent_unavailable (lost, err, errlen);
    const uint64_t n = r->posted;
    if (n >= SIG_LSTM_RING && r->completed < n - SIG_LSTM_RING + 1u) {   /* the entry's last use */
        sig_status_t st = s_wait (m, r, n - SIG_LSTM_RING, 0u, err, errlen);
        if (st != SIG_OK)
            return st;
    }
    uint8_t *e = s_entry (m, r, n);
    const uint64_t tag = (uint64_t) (uint32_t) (n + 1u) << 32;
    uint32_t *y = (uint32_t *) (e + m->lay.outputs);
    for (uint32_t i = 0; i < outs; i++)
        __atomic_store_n (&y[i], SENTINEL, __ATOMIC_RELAXED);
    uint64_t *w = (uint64_t *) (e + m->lay.cmd);
    for (uint32_t i = 0; i < nx; i++) {
        uint32_t bits;
        memcpy (&bits, &x[i], sizeof bits);
        __atomic_store_n (&w[m->lay.feat + i], tag | bits, __ATOMIC_RELAXED);
    }
    __atomic_store_n (&w[1], tag | slot, __ATOMIC_RELAXED);
    /* the sentinels before any word the kernel could act on: a release store last (x86: in order) */
    __atomic_store_n (&w[0], tag | (uint64_t) (pos << 8) | op, __ATOMIC_RELEASE);
    __atomic_store_n (&r->posted, n + 1u, __ATOMIC_RELEASE);   /* (lstm_cuda_commands_posted reads it) */
    *n_out = n;
    return SIG_OK;
}

/* SIG_LSTM_WIDE_INPUTS where one of the N features X passes the plan's half_x_max (f16 products:
 * a partial sum could leave f16's range), so the kernel widens their products; else 0. NaN passes
 * as it is (the widening math would give NaN too). */
static uint32_t s_wide_inputs (const backend_model_t *m, const float *x, size_t n)
{
    if (m->plan.math != SIG_LSTM_MATH_HALF)
        return 0u;
    const float lim = m->plan.half_x_max;
    bool big = false;
    for (size_t i = 0; i < n; i++)
        big |= fabsf (x[i]) > lim;
    return big ? SIG_LSTM_WIDE_INPUTS : 0u;
}

sig_status_t lstm_cuda_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    if (s_lost (m))
        return persistent_unavailable (s_lost (m), err, errlen);
    if (rows < 1 || rows > m->max_rows) {
        sig_set_error (err, errlen, "model \"%s\": %u rows, the LSTM kernel takes 1 to %u", m->host.name, rows, m->max_rows);
        return SIG_INTERNAL;
    }
    /* the previous window (if any) is complete: the host waited for it */
    memcpy (m->host.box + m->lay.window_in, in, (size_t) rows * m->W * m->in * sizeof (float));
    uint64_t n = 0;
    const uint32_t wide = s_wide_inputs (m, in, (size_t) rows * m->W * m->in);
    sig_status_t st = s_post (m, &m->serve, SIG_LSTM_OP_WINDOW, 0u, rows | wide, NULL, 0u, 0u, &n, err, errlen);
    if (st == SIG_OK)
        st = s_wait (m, &m->serve, n, 0u, err, errlen);
    if (st == SIG_OK)
        memcpy (out, m->host.box + m->lay.window_out, (size_t) rows * m->out * sizeof (float));
    return st;
}

/* Apart: word 1 of the slot's next advance or reset (its state's next version), once its last
 * step is done (the advancer reads that step's ring entry). Its ring and word, or NULL (lost). */
static ring_t *s_state_cmd (backend_model_t *m, uint32_t slot, uint32_t *word, char *err, size_t errlen)
{
    slot_t *s = &m->slots[slot];
    if (!m->plan.apart) {
        *word = slot;
        return &m->serve;
    }
    if (s->stepped && s_wait_as (m, &m->serve, s->step_n, 0u, true, err, errlen) != SIG_OK)
        return NULL;
    s->stepped = false;
    *word = slot | ((s->ver + 1u) & SIG_LSTM_VERSION_MASK) << SIG_LSTM_VERSION_SHIFT;
    return &m->advr;
}

void lstm_cuda_reset (backend_model_t *m, uint32_t slot)
{
    if (slot >= m->slot_count)
        return;
    uint64_t n = 0;
    uint32_t word = 0;
    char err[256];
    ring_t *r = s_state_cmd (m, slot, &word, err, sizeof err);
    if (r && s_post (m, r, SIG_LSTM_OP_RESET, 0u, word, NULL, 0u, 0u, &n, err, sizeof err) == SIG_OK)
        m->slots[slot] = (slot_t) { .pos = 0, .valid = true, .owed = false, .ver = m->slots[slot].ver + 1u };
}

void lstm_cuda_advance (backend_model_t *m, uint32_t slot)
{
    if (slot >= m->slot_count || !m->slots[slot].owed)
        return;
    uint64_t n = 0;
    uint32_t word = 0;
    char err[256];
    ring_t *r = s_state_cmd (m, slot, &word, err, sizeof err);
    if (r && s_post (m, r, SIG_LSTM_OP_ADVANCE, m->slots[slot].pos, word, NULL, 0u, 0u, &n, err, sizeof err) == SIG_OK) {
        m->slots[slot].owed = false;
        m->slots[slot].ver++;
    }
}

sig_status_t lstm_cuda_step (backend_model_t *m, uint32_t slot, const float *x, float *out, char *err, size_t errlen)
{
    if (slot >= m->slot_count) {
        sig_set_error (err, errlen, "model \"%s\": stream slot %u of %u", m->host.name, slot, m->slot_count);
        return SIG_INTERNAL;
    }
    if (s_lost (m))
        return persistent_unavailable (s_lost (m), err, errlen);
    slot_t *s = &m->slots[slot];
    if (!s->valid)
        lstm_cuda_reset (m, slot);
    if (s->owed)
        lstm_cuda_advance (m, slot);
    uint64_t n = 0;
    const uint32_t word = m->plan.apart ? slot | (s->ver & SIG_LSTM_VERSION_MASK) << SIG_LSTM_VERSION_SHIFT : slot;
    sig_status_t st = s_post (m, &m->serve, SIG_LSTM_OP_STEP, s->pos, word | s_wide_inputs (m, x, m->in), x, m->in,
                              m->out, &n, err, errlen);
    if (st == SIG_OK)
        st = s_wait (m, &m->serve, n, m->out, err, errlen);
    if (st != SIG_OK)
        return st;
    memcpy (out, s_entry (m, &m->serve, n) + m->lay.outputs, m->out * sizeof (float));
    s->pos = (s->pos + 1u) % m->W;
    s->owed = true;
    s->stepped = m->plan.apart;
    s->step_n = n;
    return SIG_OK;
}

sig_status_t lstm_cuda_ping (backend_model_t *m, const float *x, float *out, char *err, size_t errlen)
{
    uint64_t n = 0;
    sig_status_t st = s_post (m, &m->serve, SIG_LSTM_OP_PING, 0u, 0u, x, m->in, 1u, &n, err, errlen);
    if (st == SIG_OK)
        st = s_wait (m, &m->serve, n, 1u, err, errlen);
    if (st == SIG_OK)
        memcpy (out, s_entry (m, &m->serve, n) + m->lay.outputs, sizeof (float));
    return st;
}

sig_status_t lstm_cuda_sync (backend_model_t *m, char *err, size_t errlen)
{
    if (s_lost (m))
        return persistent_unavailable (s_lost (m), err, errlen);
    sig_status_t st = m->serve.posted ? s_wait (m, &m->serve, m->serve.posted - 1u, 0u, err, errlen) : SIG_OK;
    if (st == SIG_OK && m->advr.posted)
        st = s_wait (m, &m->advr, m->advr.posted - 1u, 0u, err, errlen);
    return st;
}

int lstm_cuda_stall (backend_model_t *m)
{
    uint64_t n = 0;
    char err[256];
    return s_post (m, &m->serve, SIG_LSTM_OP_STALL, 0u, 0u, NULL, 0u, 0u, &n, err, sizeof err) == SIG_OK
               ? 0 : (int) cudaErrorNotReady;
}

int lstm_cuda_hold (backend_model_t *m, bool on)
{
    if (!m->plan.apart)
        return (int) cudaErrorNotSupported;
    uint32_t *hold = (uint32_t *) (m->adv.box + m->lay.hold);
    if (!on) {   /* only the word: safe while another thread waits in a step */
        __atomic_store_n (hold, 0u, __ATOMIC_RELEASE);
        return 0;
    }
    __atomic_store_n (hold, 1u, __ATOMIC_RELEASE);
    uint64_t n = 0;
    char err[256];
    return s_post (m, &m->advr, SIG_LSTM_OP_HOLD, 0u, 0u, NULL, 0u, 0u, &n, err, sizeof err) == SIG_OK
               ? 0 : (int) cudaErrorNotReady;
}

uint32_t lstm_cuda_advances_pending (const backend_model_t *m)
{
    if (!m->plan.apart)
        return 0u;
    uint32_t pending = 0;
    for (uint64_t n = m->advr.posted > SIG_LSTM_RING ? m->advr.posted - SIG_LSTM_RING : 0; n < m->advr.posted; n++) {
        const uint8_t *e = s_entry (m, &m->advr, n);
        const uint32_t d = __atomic_load_n ((const uint32_t *) (e + m->lay.done), __ATOMIC_ACQUIRE);
        pending += (int32_t) (d - (uint32_t) (n + 1u)) < 0;
    }
    return pending;
}

uint64_t lstm_cuda_commands_posted (const backend_model_t *m) { return __atomic_load_n (&m->serve.posted, __ATOMIC_ACQUIRE); }

bool lstm_cuda_lost (const backend_model_t *m) { return s_lost (m) != NULL; }
const sig_lstm_plan_t *lstm_cuda_plan (const backend_model_t *m) { return m ? &m->plan : NULL; }

bool lstm_cuda_apart (const backend_model_t *m) { return m && m->plan.apart; }

const char *lstm_cuda_kernel_name (const backend_model_t *m)
{
    if (m->spec)
        return m->plan.mode == SIG_LSTM_GRID ? "lstm-grid-nvrtc" : "lstm-persistent-nvrtc";
    return m->plan.mode == SIG_LSTM_GRID ? "lstm-grid" : "lstm-persistent";
}
