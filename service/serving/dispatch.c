/* The front's side of a model (dispatch.h). The job pool is the front's alone: it takes jobs at
 * admission and returns them after sending the reply, so the free list needs no synchronisation.
 * The rings carry the jobs to and from the workers. */
#include "serving/dispatch.h"
#include "serving/model_impl.h"

#include <stdio.h>

void dispatch_attach (model_t *m, waker_t *front) { m->front = front; }

job_t *dispatch_job_take (model_t *m) { return m->free_count ? m->free_jobs[--m->free_count] : NULL; }

void dispatch_job_return (model_t *m, job_t *j) { m->free_jobs[m->free_count++] = j; }

uint32_t dispatch_inflight (const model_t *m) { return m->job_count - m->free_count; }

uint32_t dispatch_queued (model_t *m)
{
    uint32_t q = 0;
    for (uint32_t i = 0; i < m->instance_count; i++)
        q += (uint32_t) ring_count (&m->instances[i].requests);
    return q;
}

bool dispatch_queue_full (model_t *m) { return dispatch_queued (m) >= m->cfg.queue_depth; }

int dispatch_submit (model_t *m, job_t *j)
{
    if (j->stream_id) {
        /* A stream's steps always go to the instance that holds its window. */
        instance_t *in = &m->instances[j->stream_id % m->instance_count];
        if (!atomic_load_explicit (&in->available, memory_order_relaxed))
            return -1;
        ring_push (&in->requests, j);
        waker_wake (&in->wake);
        return 0;
    }
    /* The least loaded available instance; ties go round-robin so equal instances share work. */
    instance_t *best = NULL;
    size_t best_load = (size_t) -1;
    for (uint32_t k = 0; k < m->instance_count; k++) {
        instance_t *in = &m->instances[(m->next_instance + k) % m->instance_count];
        if (!atomic_load_explicit (&in->available, memory_order_relaxed))
            continue;
        size_t load = ring_count (&in->requests);
        if (load < best_load) {
            best = in;
            best_load = load;
        }
    }
    if (!best)
        return -1;
    m->next_instance = (best->index + 1) % m->instance_count;
    ring_push (&best->requests, j);     /* cannot fail: the ring holds every job of the model */
    waker_wake (&best->wake);
    return 0;
}

bool dispatch_has_done (model_t *m)
{
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (ring_count (&m->instances[i].done))
            return true;
    return false;
}

job_t *dispatch_next_done (model_t *m)
{
    for (uint32_t k = 0; k < m->instance_count; k++) {
        uint32_t i = (m->next_done + k) % m->instance_count;
        job_t *j = ring_pop (&m->instances[i].done);
        if (j) {
            m->next_done = (i + 1) % m->instance_count;
            return j;
        }
    }
    return NULL;
}

void dispatch_abort (model_t *m, const char *why)
{
    snprintf (m->abort_reason, sizeof m->abort_reason, "%s", why);
    for (uint32_t i = 0; i < m->instance_count; i++) {
        atomic_store (&m->instances[i].abort, true);
        waker_wake (&m->instances[i].wake);
    }
}
