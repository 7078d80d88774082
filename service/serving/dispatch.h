/* The front thread's side of a model: admitting a request into a job, choosing the instance,
 * handing it over, and collecting finished jobs. Front thread only (single producer of every
 * instance's request ring, single consumer of every done ring), except where noted. */
#ifndef SIGSERVE_DISPATCH_H
#define SIGSERVE_DISPATCH_H

#include "serving/model.h"

/* The waker the workers ring after handing back finished jobs (the front sleeps on it). */
void dispatch_attach (model_t *m, waker_t *front);

/* A free job, or NULL when every job is out. */
job_t *dispatch_job_take (model_t *m);
/* Back to the pool, once its reply is sent (the envelope frames must be closed or moved). */
void dispatch_job_return (model_t *m, job_t *j);
/* How many of its requests wait for a worker; true when queue_depth do. */
uint32_t dispatch_queued (model_t *m);
bool dispatch_queue_full (model_t *m);
/* Hands J to the least loaded available instance and wakes its worker. -1 when no instance is
 * available (J stays the caller's). */
int dispatch_submit (model_t *m, job_t *j);
/* Whether a finished job waits to be collected. */
bool dispatch_has_done (model_t *m);
/* The next finished job of any instance, or NULL. */
job_t *dispatch_next_done (model_t *m);
/* Jobs out of the pool (queued, computing or finished but not yet returned). */
uint32_t dispatch_inflight (const model_t *m);

/* Shutdown, in this order: dispatch_abort makes the workers answer whatever is still queued
 * with UNAVAILABLE instead of running it (the end of the drain window); model_destroy then stops
 * them. Any thread. */
void dispatch_abort (model_t *m, const char *why);

#endif
