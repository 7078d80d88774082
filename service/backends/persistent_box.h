/* The host's half of the persistent MLP kernel's mailbox protocol (kernels/sig_persistent.h),
 * without CUDA: what the CUDA backend does for each request (backends/cuda/mlp_persistent.c), and
 * what a front does when it runs a request inline on a persistent model that a device process
 * serves (pbox_call, from serving/worker.c: the mailbox then lies in the region shared with that
 * process, and the descriptor below too, so both sides publish into the same ring; the wait and its
 * watchdog are the backend's, the front only says who watches the process).
 *
 * A request: its features copied into slot n % ring (each row padded with zeros to row_floats),
 * the output words it waits for set to the sentinel (done by outputs), then the request word
 * (rows << 32 | sequence n + 1) stored with release; complete when no output word holds the
 * sentinel any more, or (done by sequence) when the slot's done word reads n + 1. Only one thread
 * at a time may publish: the one that holds the instance (its worker, or a front that claimed it);
 * `next` moves only under that hold. */
#ifndef SIGSERVE_PERSISTENT_BOX_H
#define SIGSERVE_PERSISTENT_BOX_H

#include "base/status.h"
#include "clock.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define PBOX_SENTINEL 0x7fbadbadu          /* = SIG_PERSISTENT_SENTINEL */
enum { PBOX_DONE_OUTPUTS = 0, PBOX_DONE_SEQUENCE = 1 };   /* = SIG_DONE_* */

typedef struct {
    uint8_t *box;                       /* the mailbox's host address (NULL: none) */
    uint32_t slots, slot_bytes, ring;   /* slot i at box + slots + i x slot_bytes */
    uint32_t request, features, outputs, done;   /* byte offsets within a slot */
    uint32_t row_floats;                /* floats a feature row takes (input_size rounded up) */
    uint32_t input_size, output_size, max_rows;
    uint32_t done_mode;                 /* PBOX_DONE_* */
    uint64_t next;                      /* requests published: the next uses slot next % ring, sequence next + 1 */
} persistent_box_t;

/* B laid out as kernels/mlp_persistent_plan.cu's sig_persistent_layout lays the kernel's mailbox out
 * for IN features and OUT outputs a row, MAX_ROWS rows and RING slots: a control line and a status
 * line, then each slot: the request word, the features from the next line (rows padded to a multiple
 * of 4 floats), the outputs from the line after them, the done word right after the outputs, the
 * slot rounded up to two lines. Returns the mailbox's bytes (test_spec checks it against the
 * kernel's own layout); B's box, done_mode and next are left to the caller. */
static inline size_t pbox_layout (persistent_box_t *b, uint32_t in, uint32_t out, uint32_t max_rows, uint32_t ring)
{
    const uint32_t line = 64u, row_floats = (in + 3u) / 4u * 4u, features = line;
    const uint32_t outputs = features + (max_rows * row_floats * 4u + line - 1u) / line * line;
    const uint32_t done = outputs + max_rows * out * 4u;
    const uint32_t slot = (done + 4u + 2u * line - 1u) / (2u * line) * (2u * line);
    b->slots = 2u * line;
    b->slot_bytes = slot;
    b->ring = ring;
    b->request = 0u;
    b->features = features;
    b->outputs = outputs;
    b->done = done;
    b->row_floats = row_floats;
    b->input_size = in;
    b->output_size = out;
    b->max_rows = max_rows;
    return 2u * line + (size_t) ring * slot;
}

/* What a published request waits for. */
typedef struct {
    const uint32_t *done;               /* its slot's done word (PBOX_DONE_SEQUENCE) */
    const uint32_t *outputs;            /* its output words (PBOX_DONE_OUTPUTS) */
    uint32_t seq, words, mode;
} pbox_answer_t;

/* Publishes ROWS rows of IN (rows x input_size floats, 1 <= rows <= max_rows) in B's next slot. */
static inline pbox_answer_t pbox_publish (persistent_box_t *b, const float *in, uint32_t rows)
{
    const uint64_t n = b->next;
    const uint32_t seq = (uint32_t) (n + 1u);
    uint8_t *slot = b->box + b->slots + (size_t) (n % b->ring) * b->slot_bytes;
    float *x = (float *) (slot + b->features);
    if (b->row_floats == b->input_size)
        memcpy (x, in, (size_t) rows * b->input_size * sizeof (float));
    else
        for (uint32_t r = 0; r < rows; r++)   /* the padding of each row stays zero */
            memcpy (x + (size_t) r * b->row_floats, in + (size_t) r * b->input_size, b->input_size * sizeof (float));
    const uint32_t words = rows * b->output_size;
    uint32_t *y = (uint32_t *) (slot + b->outputs);
    if (b->done_mode == PBOX_DONE_OUTPUTS)
        for (uint32_t i = 0; i < words; i++)
            y[i] = PBOX_SENTINEL;
    /* features (and sentinels) first, then the request word: a release store */
    __atomic_store_n ((uint64_t *) (slot + b->request), ((uint64_t) rows << 32) | seq, __ATOMIC_RELEASE);
    b->next = n + 1u;
    return (pbox_answer_t) { .done = (const uint32_t *) (slot + b->done), .outputs = y, .seq = seq, .words = words,
                             .mode = b->done_mode };
}

/* Whether A is complete (acquire loads: what the kernel wrote before is visible once this says so). */
static inline bool pbox_answered (const void *arg)
{
    const pbox_answer_t *a = arg;
    if (a->mode == PBOX_DONE_SEQUENCE)
        return __atomic_load_n (a->done, __ATOMIC_ACQUIRE) == a->seq;
    for (uint32_t i = 0; i < a->words; i++)
        if (__atomic_load_n (&a->outputs[i], __ATOMIC_ACQUIRE) == PBOX_SENTINEL)
            return false;
    return true;
}

/* A complete answer's outputs into OUT (rows x output_size floats). */
static inline void pbox_read (const pbox_answer_t *a, float *out)
{
    memcpy (out, a->outputs, (size_t) a->words * sizeof (float));
}

/* Who watches a request published into a mailbox that another process's kernel serves (a device
 * process: the front runs such a request itself, serving/worker.c): the process's supervisor sets
 * LOST when the process is gone and clears AVAILABLE (with STATE saying why) when the instance cannot
 * run; BUSY_SINCE is set for the call's length, and the supervisor ends a process whose launch runs
 * past WATCHDOG_MS (0: 1000) by it. MODEL and INSTANCE name it in messages. */
typedef struct {
    const _Atomic int *lost;
    const _Atomic bool *available;
    _Atomic uint64_t *busy_since;
    const char *state;
    const char *model;
    uint32_t instance, watchdog_ms;
} pbox_watch_t;

#define PBOX_GRACE_NS 1000000000ull     /* past watchdog_ms, in case the supervisor did not end it */

/* One request through B watched by W: ROWS rows of IN published, polled until answered (OUT: rows x
 * output_size floats), or until W says the instance is lost or watchdog_ms + 1 s pass.
 * SIG_OK, or SIG_UNAVAILABLE with ERR naming the model and instance. */
static inline sig_status_t pbox_call (persistent_box_t *b, const float *in, uint32_t rows, float *out,
                                      const pbox_watch_t *w, char *err, size_t errlen)
{
    const uint32_t watchdog_ms = w->watchdog_ms ? w->watchdog_ms : 1000u;
    const uint64_t t0 = clock_now_ns (), limit = (uint64_t) watchdog_ms * 1000000ull + PBOX_GRACE_NS;
    atomic_store_explicit (w->busy_since, t0, memory_order_relaxed);
    const pbox_answer_t a = pbox_publish (b, in, rows);
    sig_status_t st = SIG_OK;
    for (uint32_t spins = 1; !pbox_answered (&a); spins++) {
        if ((spins & 63u) == 0u) {
            if (atomic_load_explicit (w->lost, memory_order_relaxed)
                || !atomic_load_explicit (w->available, memory_order_relaxed)) {
                snprintf (err, errlen, "model \"%s\" instance %u: %.200s; the request was not answered by it",
                          w->model, w->instance, w->state);
                st = SIG_UNAVAILABLE;
                break;
            }
            if (clock_now_ns () - t0 > limit) {
                snprintf (err, errlen, "model \"%s\" instance %u: its persistent kernel did not answer within "
                          "watchdog_ms (%u) + 1 s; the model is unavailable there until its process is started "
                          "again", w->model, w->instance, watchdog_ms);
                st = SIG_UNAVAILABLE;
                break;
            }
        }
        _mm_pause ();
    }
    if (st == SIG_OK)
        pbox_read (&a, out);
    atomic_store_explicit (w->busy_since, 0, memory_order_relaxed);
    return st;
}

#endif
