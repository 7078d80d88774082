/* The fronts' side of a model (dispatch.h). Each lane's job pool is its front's alone: it takes
 * jobs at admission and returns them after sending the reply, so the free list needs no
 * synchronisation. The lane's rings carry the jobs to and from the workers. */
#include "serving/dispatch.h"
#include "serving/model_impl.h"

#include "base/log.h"
#include "clock.h"

#include <stdio.h>
#include <string.h>

void dispatch_attach (model_t *m, uint32_t lane, waker_t *front)
{
    m->lanes[lane].front = front;
    if (m->fallback)    /* its workers wake the front that collects the model's jobs */
        m->fallback->lanes[lane].front = front;
}

uint32_t dispatch_lanes (const model_t *m) { return m->lane_count; }

void dispatch_job_return (model_t *m, job_t *j)
{
    lane_t *l = &m->lanes[j->lane];
    if (j->large >= 0) {        /* the large buffer it borrowed goes back; its own is its again */
        l->large_free[l->large_free_count++] = (uint32_t) j->large;
        j->large = -1;
        j->features = j->own_features;
        j->outputs = j->own_outputs;
    }
    l->free_jobs[l->free_count++] = j;
}

uint32_t dispatch_inflight (const model_t *m, uint32_t lane) { return m->job_count - m->lanes[lane].free_count; }

uint32_t dispatch_queued (model_t *m)
{
    uint32_t q = 0;
    for (uint32_t i = 0; i < m->instance_count; i++)
        q += (uint32_t) instance_queued (&m->instances[i]);
    for (uint32_t i = 0; m->fallback && i < m->fallback->instance_count; i++)
        q += (uint32_t) instance_queued (&m->fallback->instances[i]);
    return q;
}

/* A job of M handed to instance I of its fallback says so in job_t.instance (s_reclaim_instance then
 * never takes it for one of M's own). */
static int32_t s_fallback_index (const model_t *m, uint32_t i) { return (int32_t) (m->instance_count + i); }

const char *dispatch_job_backend (const model_t *m, const job_t *j)
{
    return j->fallback ? "cpu (fallback)" : model_backend_name (m);
}

static instance_t *s_own_instance (model_t *m, lane_t *l, const admission_t *a);

/* The instance of M's fallback FB that takes A while none of M's own can: a stream's stand-in (the
 * instance that rebuilds it from its own instance's history), else the least loaded available one. */
static instance_t *s_fallback_instance (const model_t *m, model_t *fb, const admission_t *a)
{
    if (a->stream_id) {
        instance_t *in = &fb->instances[a->stream_id % m->instance_count % fb->instance_count];
        return atomic_load_explicit (&in->sh->available, memory_order_relaxed) ? in : NULL;
    }
    instance_t *best = NULL;
    size_t best_load = (size_t) -1;
    for (uint32_t k = 0; k < fb->instance_count; k++) {
        instance_t *in = &fb->instances[k];
        const size_t load = instance_queued (in);
        if (atomic_load_explicit (&in->sh->available, memory_order_relaxed) && load < best_load) {
            best = in;
            best_load = load;
        }
    }
    return best;
}

/* The instance that takes A: a stream's own (the one holding its window), else the least loaded
 * available one, ties round-robin so that equal instances share the work; where none can, one of the
 * fallback's (s_fallback_instance). NULL when none can. */
static instance_t *s_instance (model_t *m, lane_t *l, const admission_t *a)
{
    instance_t *in = s_own_instance (m, l, a);
    const bool none = in == NULL;
    if (!m->fallback)
        return in;
    if (none != atomic_load_explicit (&m->degraded, memory_order_relaxed))
        model_fallback_note (m, none);      /* once each way */
    if (none)
        return s_fallback_instance (m, m->fallback, a);
    /* back on its own instance: a stream's steps stay on the fallback's stand-in until it has applied
     * what it was given, so that one instance at a time writes the stream history (stream_history.h) */
    if (a->stream_id) {
        instance_t *standin = &m->fallback->instances[a->stream_id % m->instance_count % m->fallback->instance_count];
        if (model_queued_rows (standin) || atomic_load_explicit (&standin->sh->busy_since, memory_order_relaxed))
            return standin;
    }
    return in;
}

/* Whether IN's launch has run over M's stall_ns (only with a fallback: see model_impl.h); NOW read once
 * an admission, where a launch is running. */
static bool s_stalled (const model_t *m, instance_t *in, uint64_t *now)
{
    const uint64_t since = m->stall_ns ? atomic_load_explicit (&in->sh->busy_since, memory_order_relaxed) : 0;
    if (!since)
        return false;
    if (!*now)
        *now = clock_now_ns ();
    if (*now <= since || *now - since <= m->stall_ns)
        return false;
    uint64_t noted = atomic_load_explicit (&in->stall_noted, memory_order_relaxed);
    if (noted != since && atomic_compare_exchange_strong (&in->stall_noted, &noted, since))    /* once a launch */
        log_warn ("model %s instance %u: a launch has run over %.1f ms: stateless requests go to its CPU fallback "
                  "until it ends (or the watchdog, watchdog_ms %u, ends its process)", m->desc.cfg.name, in->index,
                  m->stall_ns / 1e6, m->desc.cfg.watchdog_ms);
    return true;
}

/* A stream's steps stay on its own instance, stalled or not (its order); a stateless request skips a
 * stalled one (s_stalled). */
static instance_t *s_own_instance (model_t *m, lane_t *l, const admission_t *a)
{
    if (a->stream_id) {
        instance_t *in = &m->instances[a->stream_id % m->instance_count];
        return atomic_load_explicit (&in->sh->available, memory_order_relaxed) ? in : NULL;
    }
    instance_t *best = NULL;
    size_t best_load = (size_t) -1;
    uint64_t now = 0;
    for (uint32_t k = 0; k < m->instance_count; k++) {
        instance_t *in = &m->instances[(l->next_instance + k) % m->instance_count];
        if (!atomic_load_explicit (&in->sh->available, memory_order_relaxed) || s_stalled (m, in, &now))
            continue;
        size_t load = instance_queued (in);
        if (load < best_load) {
            best = in;
            best_load = load;
        }
    }
    return best;
}

#define SHED_LOG_INTERVAL_NS 1000000000ull

/* A request refused before it ran: counted by reason, and logged at most once a second per model
 * with how many since and the last one's message. */
static sig_status_t s_shed (model_t *m, lane_t *l, stats_shed_t why, sig_status_t status, const char *err)
{
    if (m->stats)
        stats_count_shed (m->stats, m->stats_slot, why);
    l->shed_unlogged++;
    const uint64_t now = clock_now_ns ();
    if (now - l->shed_logged_at >= SHED_LOG_INTERVAL_NS) {
        log_warn ("model %s: %llu request(s) refused since the last such line (%s), the last: %s", m->desc.cfg.name,
                  (unsigned long long) l->shed_unlogged, stats_shed_names[why], err);
        l->shed_logged_at = now;
        l->shed_unlogged = 0;
    }
    return status;
}

/* Admission by time: OVERLOADED when the rows queued on IN would keep A waiting longer than
 * max_queue_us, DEADLINE_EXCEEDED when longer than A's own deadline; SIG_OK otherwise. */
static sig_status_t s_check_wait (model_t *m, lane_t *l, const instance_t *in, const admission_t *a, char *err,
                                  size_t errlen)
{
    const uint64_t rows = model_queued_rows (in);
    const uint64_t wait = model_expected_wait (in->model, rows);   /* the fallback's own timing on its instances */
    if (wait == 0)
        return SIG_OK;
    const unsigned long long queued = rows;
    if (wait > m->max_queue_ns) {
        snprintf (err, errlen, "model \"%s\": the expected wait for a worker is %.3f us (%llu row(s) queued on instance "
                  "%u), over max_queue_us = %u; retry later, or raise the model's max_queue_us or instances", m->desc.cfg.name,
                  wait / 1e3, queued, in->index, m->desc.cfg.max_queue_us);
        return s_shed (m, l, SHED_QUEUE_TIME, SIG_OVERLOADED, err);
    }
    if (a->deadline_us && wait > (uint64_t) a->deadline_us * 1000) {
        snprintf (err, errlen, "deadline_us: model \"%s\": the expected wait for a worker is %.3f us (%llu row(s) queued "
                  "on instance %u), already over the request's deadline of %u us; not run", m->desc.cfg.name, wait / 1e3,
                  queued, in->index, a->deadline_us);
        return s_shed (m, l, SHED_DEADLINE, SIG_DEADLINE_EXCEEDED, err);
    }
    return SIG_OK;
}

sig_status_t dispatch_admit (model_t *m, const admission_t *a, job_t **ran, char *err, size_t errlen)
{
    if (ran)
        *ran = NULL;
    lane_t *l = &m->lanes[a->lane];
    instance_t *in = s_instance (m, l, a);
    if (!in) {
        snprintf (err, errlen, "model \"%s\" is unavailable on backend %s%s: no instance of it can run%s", m->desc.cfg.name,
                  m->iface->name, a->stream_id ? " (the instance holding this stream cannot run)" : "",
                  m->fallback ? ", nor its CPU fallback" : " and it has no fallback");
        return SIG_UNAVAILABLE;
    }
    bool fallback = in->model != m;
    const uint32_t queued = dispatch_queued (m);
    if (queued >= m->desc.cfg.queue_depth) {
        snprintf (err, errlen, "model \"%s\": queue full: %u requests waiting (queue_depth %u); retry later, or raise "
                  "the model's queue_depth or instances", m->desc.cfg.name, queued, m->desc.cfg.queue_depth);
        return s_shed (m, l, SHED_QUEUE_DEPTH, SIG_OVERLOADED, err);
    }
    const sig_status_t waiting = s_check_wait (m, l, in, a, err, errlen);
    if (waiting != SIG_OK)
        return waiting;
    /* The pool holds queue_depth + what the workers and one intake turn can hold (model.c): with room
     * in the queue, a job is free unless finished ones wait to be sent. */
    if (l->free_count == 0) {
        snprintf (err, errlen, "model \"%s\": every request buffer is in use (replies waiting to be sent); retry "
                  "later", m->desc.cfg.name);
        return s_shed (m, l, SHED_BUFFERS, SIG_OVERLOADED, err);
    }
    /* A request over buffer_rows rows borrows one of the large buffers (max_rows rows). */
    const bool large = a->rows > m->buffer_rows;
    if (large && l->large_free_count == 0) {
        snprintf (err, errlen, "model \"%s\": every buffer for requests of more than %u row(s) is in use (large_buffers "
                  "%u, each max_rows = %u rows); retry later, or send fewer rows a request", m->desc.cfg.name,
                  m->buffer_rows, m->large_count, m->max_rows);
        return s_shed (m, l, SHED_BUFFERS, SIG_OVERLOADED, err);
    }
    job_t *j = l->free_jobs[--l->free_count];
    if (large) {
        const uint32_t k = l->large_free[--l->large_free_count];
        const size_t per_large = ((size_t) m->max_rows * (m->desc.input_size + m->desc.output_size) + 15) & ~(size_t) 15;
        j->large = (int) k;
        j->features = l->large_floats + per_large * k;
        j->outputs = j->features + (size_t) m->max_rows * m->desc.input_size;
    }
    j->socket = a->socket;
    envelope_copy (&j->envelope, a->envelope, a->envelope_count);
    j->request_id = a->request_id;
    j->t_recv = a->t_recv;
    j->stream_id = a->stream_id;
    j->step = a->step;
    j->rows = a->rows;
    j->deadline_us = a->deadline_us;
    j->fallback = fallback;
    j->counted = a->client != NULL;
    if (a->client)
        j->client = *a->client;
    memcpy (j->features, a->features, a->feature_count * sizeof (float));
    if (ran && !fallback && a->inline_budget_ns && m->inline_ns && !a->stream_id && queued == 0
        && model_launch_ns (m, a->rows) <= (m->inline_ns < a->inline_budget_ns ? m->inline_ns : a->inline_budget_ns)) {
        bool done = m->inline_way == INLINE_FRONT_CONTEXT;
        if (done)
            worker_run_inline (m, l->front_impl, j);
        else    /* the idle instance's own context or mailbox, unless its worker has it */
            done = worker_run_inline_on (in, j);
        instance_t *fb = NULL;
        if (done && j->status == SIG_UNAVAILABLE && m->fallback && (fb = s_fallback_instance (m, m->fallback, a))) {
            /* its instance was lost while this front waited on it (a trap, a hang past the watchdog): run
             * on the fallback, as a job the lost instance held is (its features are as they came) */
            j->status = SIG_OK;
            j->error[0] = '\0';
            j->fallback = fallback = true;
            in = fb;
            done = false;
        }
        if (done) {
            if (m->stats)
                stats_count_inline (m->stats, m->stats_slot);
            *ran = j;
            return SIG_OK;
        }
    }
    if (!a->stream_id && !fallback)
        l->next_instance = (in->index + 1) % m->instance_count;
    /* before the worker can take it: rows_taken never passes it */
    _Atomic uint64_t *admitted = &in->rows_admitted[a->lane];
    atomic_store_explicit (admitted, atomic_load_explicit (admitted, memory_order_relaxed) + j->rows,
                           memory_order_relaxed);
    j->instance = fallback ? s_fallback_index (m, in->index) : (int32_t) in->index;
    ring_push (&in->sh->lanes[a->lane].requests, j);   /* cannot fail: the ring holds every job of the lane */
    waker_wake (in->wake);
    return SIG_OK;
}

bool dispatch_has_done (model_t *m, uint32_t lane)
{
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (ring_count (&m->instances[i].sh->lanes[lane].done))
            return true;
    for (uint32_t i = 0; m->fallback && i < m->fallback->instance_count; i++)
        if (ring_count (&m->fallback->instances[i].sh->lanes[lane].done))
            return true;
    return false;
}

job_t *dispatch_next_done (model_t *m, uint32_t lane)
{
    lane_t *l = &m->lanes[lane];
    for (uint32_t k = 0; k < m->instance_count; k++) {
        uint32_t i = (l->next_done + k) % m->instance_count;
        job_t *j = ring_pop (&m->instances[i].sh->lanes[lane].done);
        if (j) {
            j->instance = -1;
            l->next_done = (i + 1) % m->instance_count;
            return j;
        }
    }
    for (uint32_t i = 0; m->fallback && i < m->fallback->instance_count; i++) {
        job_t *j = ring_pop (&m->fallback->instances[i].sh->lanes[lane].done);
        if (j) {
            j->instance = -1;
            return j;
        }
    }
    return NULL;
}

/* Another instance of M that can run J, held by the lost instance LOST, in time: available, the
 * least loaded, with an expected wait within max_queue_us (the admission rule, applied again) and,
 * counting the time J has been held since it arrived, within J's deadline. NULL with WHY when none
 * can. A stream's step is not re-run: its state lived in the lost instance. */
static instance_t *s_rerun_target (model_t *m, const instance_t *lost, const job_t *j, uint64_t now, char *why,
                                   size_t whylen)
{
    if (j->stream_id) {
        snprintf (why, whylen, "a stream's state lives in its instance: not re-run");
        return NULL;
    }
    instance_t *best = NULL;
    uint64_t best_rows = UINT64_MAX;
    for (uint32_t k = 0; k < m->instance_count; k++) {
        instance_t *in = &m->instances[k];
        if (in == lost || atomic_load (&in->lost) != 0 || !atomic_load (&in->sh->available))
            continue;
        const uint64_t rows = model_queued_rows (in);
        if (rows < best_rows) {
            best = in;
            best_rows = rows;
        }
    }
    for (uint32_t k = 0; !best && m->fallback && k < m->fallback->instance_count; k++) {
        instance_t *in = &m->fallback->instances[k];     /* none of its own: its fallback's */
        const uint64_t rows = model_queued_rows (in);
        if (atomic_load (&in->sh->available) && rows < best_rows) {
            best = in;
            best_rows = rows;
        }
    }
    if (!best) {
        snprintf (why, whylen, "no other instance of the model is available to re-run it, %s",
                  m->fallback ? "nor its CPU fallback" : "and it has no fallback");
        return NULL;
    }
    const uint64_t wait = model_expected_wait (best->model, best_rows);
    const uint64_t held = now > j->t_recv ? now - j->t_recv : 0;
    if (wait > m->max_queue_ns) {
        snprintf (why, whylen, "not re-run: the expected wait on instance %u is %.3f us, over max_queue_us = %u", best->index,
                  wait / 1e3, m->desc.cfg.max_queue_us);
        return NULL;
    }
    if (j->deadline_us && held + wait > (uint64_t) j->deadline_us * 1000) {
        snprintf (why, whylen, "not re-run: held %.3f us already, with an expected wait of %.3f us on instance %u it would "
                  "pass its deadline of %u us", held / 1e3, wait / 1e3, best->index, j->deadline_us);
        return NULL;
    }
    return best;
}

/* IN's device process is gone: whatever it held of LANE and had not handed back is admitted again
 * to another instance of the model that can run it in time (s_rerun_target), else answered
 * UNAVAILABLE with the reason, through the lane's done ring; the lane's queue on IN is emptied. The
 * front is the only producer of its lane's rings now (the lost process pushes nothing), so both
 * hand-offs are its own pushes. */
static void s_reclaim_instance (model_t *m, uint32_t lane, instance_t *in)
{
    lane_rings_t *sh = &in->sh->lanes[lane];
    const int32_t mine = (int32_t) in->index;
    /* what the dead process handed back is answered as it finished: skip those */
    size_t head = atomic_load (&sh->done.head), tail = atomic_load (&sh->done.tail);
    for (size_t k = head; k != tail; k++)
        ((job_t *) sh->done.items[k & sh->done.mask])->instance = -2;
    uint32_t answered = 0, rerun = 0, on_fallback = 0;
    const uint64_t now = clock_now_ns ();
    char why[200] = "";
    for (uint32_t i = 0; i < m->job_count; i++) {
        job_t *j = &m->lanes[lane].jobs[i];
        if (j->instance != mine)
            continue;
        instance_t *to = s_rerun_target (m, in, j, now, why, sizeof why);
        if (to) {   /* as dispatch_admit hands a job over: its rows first, then the ring, then the wake */
            _Atomic uint64_t *admitted = &to->rows_admitted[lane];
            atomic_store_explicit (admitted, atomic_load_explicit (admitted, memory_order_relaxed) + j->rows,
                                   memory_order_relaxed);
            j->fallback = to->model != m;
            j->instance = j->fallback ? s_fallback_index (m, to->index) : (int32_t) to->index;
            ring_push (&to->sh->lanes[lane].requests, j);   /* cannot fail: the ring holds every job of the lane */
            waker_wake (to->wake);
            rerun++;
            on_fallback += j->fallback;
            continue;
        }
        j->status = SIG_UNAVAILABLE;
        j->compute_ns = 0;
        j->batch_rows = 0;
        snprintf (j->error, sizeof j->error, "model \"%s\" instance %u: %s; the request was not answered by it (%s)",
                  m->desc.cfg.name, in->index, in->sh->state, why);
        j->instance = -2;
        ring_push (&sh->done, j);
        answered++;
    }
    for (size_t k = head; k != tail; k++)
        ((job_t *) sh->done.items[k & sh->done.mask])->instance = mine;
    atomic_store (&sh->requests.head, atomic_load (&sh->requests.tail));
    atomic_store (&sh->rows_taken, atomic_load (&in->rows_admitted[lane]));
    if (m->stats && (rerun || answered))
        stats_count_rerun (m->stats, m->stats_slot, rerun, answered);
    if (rerun)
        log_warn ("model %s instance %u: %u request(s) held by its lost device process re-run on other instances "
                  "(%u of them on its CPU fallback)", m->desc.cfg.name, in->index, rerun, on_fallback);
    if (answered)
        log_warn ("model %s instance %u: %u request(s) held by its lost device process answered UNAVAILABLE (the last: %s)",
                  m->desc.cfg.name, in->index, answered, why);
    /* the last lane to answer marks the instance answered (the supervisor waits for it: s_swept) */
    const uint32_t all = (1u << m->lane_count) - 1;
    if ((atomic_fetch_or (&in->reclaimed, 1u << lane) | 1u << lane) == all)
        atomic_store (&in->lost, 2);
}

void dispatch_reclaim (model_t *m, uint32_t lane)
{
    lane_t *l = &m->lanes[lane];
    if (!atomic_load_explicit (&l->lost_pending, memory_order_acquire))
        return;
    atomic_store (&l->lost_pending, false);
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (atomic_load (&m->instances[i].lost) == 1 && !(atomic_load (&m->instances[i].reclaimed) & 1u << lane))
            s_reclaim_instance (m, lane, &m->instances[i]);
}

void dispatch_abort (model_t *m, const char *why)
{
    snprintf (m->abort_reason, sizeof m->abort_reason, "%s", why);
    for (uint32_t i = 0; i < m->instance_count; i++) {
        atomic_store (&m->instances[i].sh->abort, true);
        waker_wake (m->instances[i].wake);
    }
    if (m->fallback)
        dispatch_abort (m->fallback, why);
}
