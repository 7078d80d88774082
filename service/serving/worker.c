/* A worker: one thread per model instance. It takes every request of its instance already
 * queued, up to max_batch_rows rows (waiting batch_delay_us for more only when configured), runs
 * them as one launch on its own backend context, checks the outputs, and hands the jobs back to
 * the front. Idle, it spins for a while (always, with busy_poll) and then sleeps until the front
 * wakes it; with keep_warm_us it runs the model once on the last input after that long idle, so
 * the first request after a quiet spell does not meet cold caches and clocked-down cores.
 * Nothing here allocates, locks or makes a system call, except the sleep and the wake-ups. */
#define _GNU_SOURCE
#include "clock.h"
#include "base/log.h"
#include "serving/model_impl.h"

#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Hands J back on its front's lane; *WOKEN gains the lane's bit (its front is woken after the turn). */
static void s_finish (instance_t *in, job_t *j, uint32_t *woken)
{
    while (!ring_push (&in->sh->lanes[j->lane].done, j))   /* cannot happen: the ring holds every job of the lane */
        _mm_pause ();
    *woken |= 1u << j->lane;
}

/* Wakes the fronts of the lanes in WOKEN. */
static void s_wake_fronts (model_t *m, uint32_t woken)
{
    for (uint32_t k = 0; woken; k++, woken >>= 1)
        if ((woken & 1u) && m->lanes[k].front)
            waker_wake (m->lanes[k].front);
}

/* The oldest head of IN's lanes (one ring per front), or NULL; *LANE says whose. */
static job_t *s_peek (instance_t *in, uint32_t *lane)
{
    const uint32_t lanes = in->model->lane_count;
    job_t *first = ring_peek (&in->sh->lanes[0].requests);
    *lane = 0;
    for (uint32_t k = 1; k < lanes; k++) {
        job_t *j = ring_peek (&in->sh->lanes[k].requests);
        if (j && (!first || j->t_recv < first->t_recv)) {
            first = j;
            *lane = k;
        }
    }
    return first;
}

/* Takes the head of LANE's queue (already peeked), counting its rows as no longer waiting. */
static void s_pop (instance_t *in, uint32_t lane, job_t *j)
{
    lane_rings_t *r = &in->sh->lanes[lane];
    ring_pop (&r->requests);
    atomic_store_explicit (&r->rows_taken, atomic_load_explicit (&r->rows_taken, memory_order_relaxed) + j->rows,
                           memory_order_relaxed);
}

static void s_fail_job (job_t *j, sig_status_t status, const char *fmt, const char *arg)
{
    j->status = status;
    snprintf (j->error, sizeof j->error, fmt, arg);
}

/* Whether J waited past its deadline_us by NOW; if so it is answered DEADLINE_EXCEEDED, not run. */
static bool s_past_deadline (job_t *j, uint64_t now)
{
    if (!j->deadline_us || now - j->t_recv <= (uint64_t) j->deadline_us * 1000)
        return false;
    j->status = SIG_DEADLINE_EXCEEDED;
    snprintf (j->error, sizeof j->error, "deadline_us: the request waited %.1f us, past its deadline of %u us; not run",
              (double) (now - j->t_recv) / 1e3, j->deadline_us);
    return true;
}

/* Takes what is queued into in->taken, oldest first over the lanes, up to the batch's rows (a
 * request larger than the batch goes alone). Requests past their deadline, or arriving after an
 * abort, are answered at once. Returns how many were taken to run; *FINISHED counts those answered
 * without running, *WOKEN the lanes they went back on. */
static uint32_t s_take (instance_t *in, uint32_t n, uint32_t *rows, uint32_t *finished, uint32_t *woken)
{
    model_t *m = in->model;
    job_t *j;
    uint32_t lane;
    while (n < m->batch_rows && (j = s_peek (in, &lane)) != NULL) {
        if (j->stream_id)
            break;      /* a stream step goes alone (s_stream_step), after what was taken */
        if (n > 0 && (*rows + j->rows > m->batch_rows || !(m->desc.can & MODEL_CAN_BATCH)))
            break;      /* (a type that cannot batch runs one request a launch) */
        s_pop (in, lane, j);
        uint64_t now = clock_now_ns ();
        j->t_start = now;
        j->compute_ns = 0;
        j->batch_rows = 0;
        if (atomic_load_explicit (&in->sh->abort, memory_order_relaxed)) {
            s_fail_job (j, SIG_UNAVAILABLE, "model \"%s\" is shutting down; the request was not run", m->desc.cfg.name);
            s_finish (in, j, woken);
            (*finished)++;
            continue;
        }
        if (s_past_deadline (j, now)) {
            s_finish (in, j, woken);
            (*finished)++;
            continue;
        }
        in->taken[n++] = j;
        *rows += j->rows;
    }
    return n;
}

/* Outputs the backend computed from finite features must be finite (a model can overflow
 * float32 near 1e38): a non-finite value is never returned as OK. */
static void s_check_outputs (model_t *m, job_t *j)
{
    size_t n = (size_t) j->rows * m->desc.output_size;
    for (size_t i = 0; i < n; i++)
        if (!isfinite (j->outputs[i])) {
            j->status = SIG_INTERNAL;
            snprintf (j->error, sizeof j->error, "non-finite output: outputs[%zu] (row %zu, column %zu) of model \"%s\" "
                      "is %s for finite features (float32 overflow); not returned", i, i / m->desc.output_size,
                      i % m->desc.output_size, m->desc.cfg.name, isnan (j->outputs[i]) ? "NaN" : "Inf");
            return;
        }
}

/* INLINE_CLAIM_*: the worker takes its instance's context from a front running a request on it
 * (which holds it for at most one launch of at most inline_us), and gives it back. */
static void s_claim (instance_t *in)
{
    if (!model_inline_claims (in->model))
        return;
    for (uint32_t free_ = 0; !atomic_compare_exchange_weak (&in->sh->claim, &free_, 1); free_ = 0)
        _mm_pause ();
}

static void s_unclaim (instance_t *in)
{
    if (model_inline_claims (in->model))
        atomic_store_explicit (&in->sh->claim, 0, memory_order_release);
}

static void s_mark_unavailable (instance_t *in, const char *why)
{
    if (!atomic_load (&in->sh->available))
        return;
    snprintf (in->sh->state, sizeof in->sh->state, "%.127s", why);
    atomic_store (&in->sh->available, false);
    log_error ("model %s instance %u marked unavailable: %s", in->model->desc.cfg.name, in->index, why);
}

static void s_run (instance_t *in, uint32_t n, uint32_t rows)
{
    model_t *m = in->model;
    const size_t in_row = m->desc.input_size, out_row = m->desc.output_size;
    const float *x;
    float *y;
    if (n == 1) {
        x = in->taken[0]->features;
        y = in->taken[0]->outputs;
    } else {
        size_t at = 0;
        for (uint32_t k = 0; k < n; k++) {
            memcpy (in->batch_in + at, in->taken[k]->features, in->taken[k]->rows * in_row * sizeof (float));
            at += in->taken[k]->rows * in_row;
        }
        x = in->batch_in;
        y = in->batch_out;
    }
    char err[JOB_ERROR_MAX];
    sig_status_t st;
    uint64_t t0 = clock_now_ns ();
    if (!atomic_load_explicit (&in->sh->available, memory_order_relaxed)) {
        st = SIG_UNAVAILABLE;
        snprintf (err, sizeof err, "model \"%s\" is unavailable on instance %u: %s", m->desc.cfg.name, in->index, in->sh->state);
    } else {
        s_claim (in);
        t0 = clock_now_ns ();
        atomic_store_explicit (&in->sh->busy_since, t0, memory_order_relaxed);     /* the server's watchdog reads it */
        st = m->iface->infer (in->impl, x, rows, y, err, sizeof err);
        atomic_store_explicit (&in->sh->busy_since, 0, memory_order_relaxed);
        s_unclaim (in);
    }
    uint64_t t1 = clock_now_ns ();
    if (st == SIG_UNAVAILABLE)
        s_mark_unavailable (in, err);
    size_t at = 0;
    for (uint32_t k = 0; k < n; k++) {
        job_t *j = in->taken[k];
        j->t_start = t0;
        j->compute_ns = t1 - t0;
        j->batch_rows = rows;
        j->status = st;
        if (st != SIG_OK)
            memcpy (j->error, err, sizeof j->error);
        else {
            if (n > 1)
                memcpy (j->outputs, y + at, j->rows * out_row * sizeof (float));
            s_check_outputs (m, j);
        }
        at += (size_t) j->rows * out_row;
    }
    if (st == SIG_OK) {
        atomic_fetch_add_explicit (&in->sh->served, n, memory_order_relaxed);
        model_observe_launch (m, rows, t1 - t0);
    }
    if (m->desc.cfg.keep_warm_us) {
        job_t *last = in->taken[n - 1];
        memcpy (in->warm_in, last->features, in_row * sizeof (float));
        in->have_warm = true;
    }
}

/* How an inline request runs: on a backend context, or through a mailbox in the region. */
typedef sig_status_t (*inline_fn) (void *arg, job_t *j, char *err, size_t errlen);

/* Runs J as a worker would (deadline, outputs checked, the launch observed), through RUN (ARG). */
static void s_run_inline (model_t *m, job_t *j, inline_fn run, void *arg)
{
    const uint64_t t0 = clock_now_ns ();
    j->t_start = t0;
    j->compute_ns = 0;
    j->batch_rows = 0;
    if (s_past_deadline (j, t0))
        return;
    char err[JOB_ERROR_MAX];
    const sig_status_t st = run (arg, j, err, sizeof err);
    const uint64_t t1 = clock_now_ns ();
    j->compute_ns = t1 - t0;
    j->batch_rows = j->rows;
    j->status = st;
    if (st != SIG_OK) {
        memcpy (j->error, err, sizeof j->error);
        return;
    }
    s_check_outputs (m, j);
    model_observe_launch (m, j->rows, t1 - t0);
}

typedef struct {
    model_t *m;
    backend_model_t *impl;
} on_context_t;

static sig_status_t s_on_context (void *arg, job_t *j, char *err, size_t errlen)
{
    const on_context_t *c = arg;
    return c->m->iface->infer (c->impl, j->features, j->rows, j->outputs, err, errlen);
}

void worker_run_inline (model_t *m, backend_model_t *impl, job_t *j)
{
    on_context_t c = { m, impl };
    s_run_inline (m, j, s_on_context, &c);
}

/* A persistent MLP in a device process, run by a front through the instance's mailbox in the region
 * (backends/persistent_box.h: pbox_call waits, and gives up when the instance is lost or its
 * watchdog passes). */
static sig_status_t s_through_box (void *arg, job_t *j, char *err, size_t errlen)
{
    instance_t *in = arg;
    const pbox_watch_t w = { .lost = &in->lost, .available = &in->sh->available, .busy_since = &in->sh->busy_since,
                             .state = in->sh->state, .model = in->model->desc.cfg.name, .instance = in->index,
                             .watchdog_ms = in->model->desc.cfg.watchdog_ms };
    return pbox_call (&in->sh->box, j->features, j->rows, j->outputs, &w, err, errlen);
}

bool worker_run_inline_on (instance_t *in, job_t *j)
{
    const bool box = in->model->inline_way == INLINE_CLAIM_MAILBOX;   /* the instance runs in a device process */
    if (box && !atomic_load_explicit (&in->sh->box_ready, memory_order_acquire))
        return false;
    uint32_t free_ = 0;
    if (!atomic_compare_exchange_strong (&in->sh->claim, &free_, 2))
        return false;
    if (box)
        s_run_inline (in->model, j, s_through_box, in);
    else
        worker_run_inline (in->model, in->impl, j);
    if (j->status == SIG_UNAVAILABLE)
        s_mark_unavailable (in, j->error);
    atomic_store_explicit (&in->sh->claim, 0, memory_order_release);
    return true;
}

/* With batch_delay_us: after the first request, wait up to that long (from its receipt by this
 * worker) for more, until the batch is full. */
static uint32_t s_gather_more (instance_t *in, uint32_t n, uint32_t *rows, uint32_t *finished, uint32_t *woken)
{
    model_t *m = in->model;
    uint64_t until = clock_now_ns () + (uint64_t) m->desc.cfg.batch_delay_us * 1000;
    while (*rows < m->batch_rows && clock_now_ns () < until) {
        uint32_t before = n;
        n = s_take (in, n, rows, finished, woken);
        if (n == before)
            _mm_pause ();
    }
    return n;
}

static void s_keep_warm (instance_t *in)
{
    model_t *m = in->model;
    char err[JOB_ERROR_MAX];
    if (in->have_warm && atomic_load_explicit (&in->sh->available, memory_order_relaxed)
        && m->iface->infer (in->impl, in->warm_in, 1, in->batch_out, err, sizeof err) == SIG_OK)
        atomic_fetch_add_explicit (&in->sh->warm_runs, 1, memory_order_relaxed);
}

/* Whether J may be applied to its stream, and *REBUILD: the stream's entry in the history
 * (stream_history.h) when this instance holds no slot for it but the history keeps it (its device
 * process was lost: the slot it will get is rebuilt first), else -1. A numbered step must be the
 * one its stream expects next: 1 for a stream neither the instance nor the history holds (new, or
 * given up after stream_idle_s), else one past the steps applied to it; if not, J is answered
 * BAD_REQUEST naming the expected number (a duplicate or out-of-order step is never applied: applying
 * it would move the window twice or out of order). A stream evicted from the history and not held
 * is refused too, numbered or not, unless it starts again at step 1: never silently restarted. */
static bool s_step_expected (instance_t *in, job_t *j, uint64_t now, int *rebuild)
{
    const model_t *m = in->model;
    stream_history_t *h = in->sh->history;
    int held = streams_lookup (in->streams, j->stream_id);
    if (held >= 0 && h && stream_history_holds (h, in->history_entry[held], j->stream_id)
        && stream_history_steps (h, in->history_entry[held]) != streams_steps (in->streams, held)) {
        /* stepped elsewhere since (by the model's CPU fallback, or by its own instance back after it):
         * the slot is stale; the history, which every instance stepping it writes, rebuilds it */
        streams_forget (in->streams, j->stream_id);
        held = -1;
    }
    *rebuild = -1;
    uint64_t expected = 1;
    bool evicted = false;
    if (held >= 0)
        expected = streams_steps (in->streams, held) + 1;
    else if (h && (*rebuild = stream_history_find (h, j->stream_id, now)) >= 0) {
        expected = stream_history_steps (h, *rebuild) + 1;
        evicted = stream_history_replay_count (h, *rebuild) < 0;    /* re-entered after an eviction: not whole yet */
    } else if (h)
        evicted = stream_history_evicted (h, j->stream_id);
    if (evicted && j->step != 1) {
        j->status = SIG_BAD_REQUEST;
        snprintf (j->error, sizeof j->error, "stream_id %llu: model \"%s\" cannot rebuild the stream: it was evicted "
                  "from the stream history (stream_history = %u streams on instance %u, the least recently stepped "
                  "evicted) and its instance has lost it since; the step was not applied: start the stream again at "
                  "step 1", (unsigned long long) j->stream_id, m->desc.cfg.name, stream_history_streams (h), in->index);
        *rebuild = -1;
        return false;
    }
    if (evicted) {
        *rebuild = -1;      /* step 1: the client starts it again */
        expected = 1;
    }
    if (!j->step || j->step == expected)
        return true;
    j->status = SIG_BAD_REQUEST;
    if (held >= 0 || *rebuild >= 0)
        snprintf (j->error, sizeof j->error, "step: stream %llu of model \"%s\" expects step %llu, got %llu (%s); it "
                  "was not applied", (unsigned long long) j->stream_id, m->desc.cfg.name, (unsigned long long) expected,
                  (unsigned long long) j->step, j->step < expected ? "a step already applied: its reply may have "
                  "been lost" : "a step is missing before it");
    else
        snprintf (j->error, sizeof j->error, "step: model \"%s\" holds no stream %llu (a new stream, or one given up "
                  "after stream_idle_s = %u s without a step): it expects step 1, got %llu; it was not applied",
                  m->desc.cfg.name, (unsigned long long) j->stream_id, m->desc.cfg.stream_idle_s, (unsigned long long) j->step);
    *rebuild = -1;
    return false;
}

/* A fresh SLOT made what stream ENTRY of the history was: its last window - 1 steps replayed (their
 * outputs dropped), its step count taken. The rare path after a loss: window - 1 steps, once. */
static sig_status_t s_rebuild (instance_t *in, uint32_t slot, int entry, char *err, size_t errlen)
{
    model_t *m = in->model;
    stream_history_t *h = in->sh->history;
    const int n = stream_history_replay_count (h, entry);
    for (int k = 0; k < n; k++) {
        const sig_status_t st = m->iface->stream_step (in->impl, slot, stream_history_replay_step (h, entry, (uint32_t) k),
                                                       in->batch_out, err, errlen);
        if (st != SIG_OK)
            return st;
        m->iface->stream_advance (in->impl, slot);
    }
    streams_set_steps (in->streams, (int) slot, stream_history_steps (h, entry));
    stream_history_rebuilt (h);
    return SIG_OK;
}

/* J's step (applied to SLOT) kept in the history before its reply goes back (stream_history.h says
 * why); the stream takes an entry when it has none (new, or evicted while it held its slot). */
static void s_keep_step (instance_t *in, int slot, const job_t *j, uint64_t now)
{
    stream_history_t *h = in->sh->history;
    if (!h)
        return;
    int e = in->history_entry[slot];
    if (!stream_history_holds (h, e, j->stream_id)
        && (e = in->history_entry[slot] = stream_history_enter (h, j->stream_id, streams_steps (in->streams, slot), now)) < 0)
        return;
    stream_history_record (h, e, j->features, now);
}

/* One step of a stream (an LSTM's, a GRU's): the critical path (one step per layer from the state the last
 * advance left), the reply handed to the front, and only then the advance for the next step. */
static void s_stream_step (instance_t *in, job_t *j)
{
    model_t *m = in->model;
    uint64_t now = clock_now_ns ();
    j->t_start = now;
    j->compute_ns = 0;
    j->batch_rows = 0;
    int slot = -1, rebuild = -1;
    bool fresh = false;
    uint64_t t_step = 0;
    if (atomic_load_explicit (&in->sh->abort, memory_order_relaxed))
        s_fail_job (j, SIG_UNAVAILABLE, "model \"%s\" is shutting down; the request was not run", m->desc.cfg.name);
    else if (s_past_deadline (j, now)) {
        /* answered in s_past_deadline */
    } else if (!atomic_load_explicit (&in->sh->available, memory_order_relaxed)) {
        j->status = SIG_UNAVAILABLE;
        snprintf (j->error, sizeof j->error, "model \"%s\" is unavailable on instance %u: %.200s", m->desc.cfg.name,
                  in->index, in->sh->state);
    } else if (!s_step_expected (in, j, now, &rebuild)) {
        /* refused in s_step_expected: not applied, the stream unchanged */
    } else if ((slot = streams_slot (in->streams, j->stream_id, now, &fresh)) < 0) {
        j->status = SIG_OVERLOADED;
        snprintf (j->error, sizeof j->error, "stream_id %llu: model \"%s\" holds max_streams = %u streams (%u on this "
                  "instance) and none has been idle for stream_idle_s = %u s; a new stream is refused until one is",
                  (unsigned long long) j->stream_id, m->desc.cfg.name, m->desc.cfg.max_streams,
                  streams_active (in->streams), m->desc.cfg.stream_idle_s);
    } else {
        char err[JOB_ERROR_MAX];
        sig_status_t st = SIG_OK;
        uint64_t t0 = t_step = clock_now_ns ();
        atomic_store_explicit (&in->sh->busy_since, t0, memory_order_relaxed);
        if (fresh) {
            m->iface->stream_reset (in->impl, (uint32_t) slot);
            in->history_entry[slot] = rebuild;
            if (rebuild >= 0 && (st = s_rebuild (in, (uint32_t) slot, rebuild, err, sizeof err)) != SIG_OK) {
                streams_forget (in->streams, j->stream_id);     /* the history stays: a later step rebuilds it */
                slot = -1;
            }
        }
        if (st == SIG_OK)
            st = m->iface->stream_step (in->impl, (uint32_t) slot, j->features, j->outputs, err, sizeof err);
        atomic_store_explicit (&in->sh->busy_since, 0, memory_order_relaxed);
        uint64_t t1 = clock_now_ns ();
        j->t_start = t0;
        j->compute_ns = t1 - t0;
        j->batch_rows = 1;
        j->status = st;
        if (st == SIG_OK) {
            s_keep_step (in, slot, j, t1);
            streams_applied (in->streams, slot);
            s_check_outputs (m, j);
            atomic_fetch_add_explicit (&in->sh->served, 1, memory_order_relaxed);
        } else {
            memcpy (j->error, err, sizeof j->error);
            if (st == SIG_UNAVAILABLE)
                s_mark_unavailable (in, err);
        }
    }
    uint32_t woken = 0;
    s_finish (in, j, &woken);
    s_wake_fronts (m, woken);
    if (slot >= 0 && j->status == SIG_OK) {
        m->iface->stream_advance (in->impl, (uint32_t) slot);
        model_observe_launch (m, 1, clock_now_ns () - t_step);     /* the step and the advance: the worker's time */
    }
}

/* One turn of IN's queue: a stream step, or what is queued taken (up to a batch), run and handed
 * back, the front woken. Whether there was anything. SPIN hears of the arrival. */
static bool s_turn (instance_t *in, spin_t *spin)
{
    model_t *m = in->model;
    uint32_t rows = 0, finished = 0, woken = 0, lane;
    job_t *head = s_peek (in, &lane);
    if (head && head->stream_id) {
        s_pop (in, lane, head);
        spin_arrival (spin, clock_now_ns ());
        s_stream_step (in, head);
        return true;
    }
    uint32_t n = s_take (in, 0, &rows, &finished, &woken);
    if (n + finished == 0)
        return false;
    spin_arrival (spin, clock_now_ns ());
    if (n > 0 && m->desc.cfg.batch_delay_us && rows < m->batch_rows)
        n = s_gather_more (in, n, &rows, &finished, &woken);
    if (n > 0) {
        s_run (in, n, rows);
        for (uint32_t k = 0; k < n; k++)
            s_finish (in, in->taken[k], &woken);
    }
    s_wake_fronts (m, woken);
    return true;
}

void *worker_main (void *arg)
{
    instance_t *in = arg;
    model_t *m = in->model;
    char role[16], err[256];
    snprintf (role, sizeof role, "w%u-%.10s", in->index % 1000, m->desc.cfg.name);
    threads_set_role (role);
    if (in->cpu_count && threads_pin_set (in->cpus, in->cpu_count, err, sizeof err) != 0)
        log_warn ("model %s instance %u: %s; running unpinned", m->desc.cfg.name, in->index, err);
    const uint64_t keep_warm_ns = (uint64_t) m->desc.cfg.keep_warm_us * 1000;
    uint64_t last_active = clock_now_ns ();
    for (;;) {
        if (s_turn (in, &in->spin)) {
            last_active = clock_now_ns ();
            continue;
        }
        if (atomic_load_explicit (&in->sh->stop, memory_order_acquire) && instance_queued (in) == 0)
            break;
        uint64_t now = clock_now_ns ();
        if (keep_warm_ns && now - last_active >= keep_warm_ns) {
            s_keep_warm (in);
            last_active = clock_now_ns ();
            continue;
        }
        /* Idle: spin (busy_poll, or as base/spin.h says: never where the threads do not each have a
         * CPU, since on shared cores spinning takes the time the others need: 24 -> 128 us server
         * time on the 2-core VM with a fixed 50 us spin), else sleep until the front wakes us. */
        if (m->busy_poll || spin_idle (&in->spin, now, false)) {
            _mm_pause ();
            continue;
        }
        waker_prepare (&in->sh->wake);
        if (instance_queued (in) > 0 || atomic_load (&in->sh->stop)) {
            waker_cancel (&in->sh->wake);
            continue;
        }
        if (spin_ended (&in->spin) && m->stats)
            stats_count_spin_sleep (m->stats, true);
        waker_sleep (&in->sh->wake, keep_warm_ns ? keep_warm_ns - (now - last_active) : 0);
    }
    return NULL;
}

/* A group's worker (serving/group.c): the instances of its members, served in order of arrival:
 * each turn takes the member whose oldest queued request came first. */
void *worker_group_main (void *arg)
{
    group_worker_t *w = arg;
    char role[16];
    snprintf (role, sizeof role, "g%u-%.10s", w->index % 100, w->name);
    threads_set_role (role);
    instance_t *members[GROUP_MEMBERS_MAX];
    size_t count = 0;
    uint64_t seen = (uint64_t) -1;
    for (;;) {
        const uint64_t version = atomic_load (&w->version);
        if (version != seen) {      /* joined or left: take the new list (the leaver waits for this) */
            pthread_mutex_lock (&w->lock);
            count = w->member_count;
            memcpy (members, w->members, count * sizeof *members);
            seen = atomic_load (&w->version);
            pthread_mutex_unlock (&w->lock);
            atomic_store (&w->version_seen, seen);
        }
        instance_t *first = NULL;
        uint64_t oldest = UINT64_MAX;
        for (size_t k = 0; k < count; k++) {
            uint32_t lane;
            const job_t *head = s_peek (members[k], &lane);
            if (head && head->t_recv < oldest) {
                oldest = head->t_recv;
                first = members[k];
            }
        }
        if (first && s_turn (first, &w->spin))
            continue;
        if (atomic_load (&w->stop))
            break;
        if (w->busy_poll || spin_idle (&w->spin, clock_now_ns (), false)) {
            _mm_pause ();
            continue;
        }
        waker_prepare (&w->wake);
        bool work = atomic_load (&w->version) != seen || atomic_load (&w->stop);
        for (size_t k = 0; k < count && !work; k++)
            work = instance_queued (members[k]) > 0;
        if (work) {
            waker_cancel (&w->wake);
            continue;
        }
        waker_sleep (&w->wake, 0);
    }
    return NULL;
}
