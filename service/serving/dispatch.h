/* The fronts' side of a model: admitting a request into a job on one of its instances, and
 * collecting finished jobs. Each front (server.fronts) has a lane of its own: its pool of jobs and,
 * to every instance, a request ring it alone produces and a done ring it alone consumes; a lane's
 * functions are for its front's thread only, except dispatch_queued, which any thread may call for
 * an estimate (the metrics do), and dispatch_abort. */
#ifndef SIGSERVE_DISPATCH_H
#define SIGSERVE_DISPATCH_H

#include "serving/model.h"

/* The waker the workers ring after handing back LANE's finished jobs (its front sleeps on it). */
void dispatch_attach (model_t *m, uint32_t lane, waker_t *front);
/* The lanes M has (server.fronts when it was loaded). */
uint32_t dispatch_lanes (const model_t *m);

/* One checked request, as the front took it (front/request.c: a stream_id only where model_keeps_streams). */
typedef struct {
    uint32_t lane;                  /* the front that took it */
    int socket;                     /* that front's socket slot it came from */
    const frame_t *envelope;        /* its routing frames (envelope_fits), copied into the job when admitted */
    int envelope_count;
    uint64_t request_id, stream_id, step;
    uint64_t t_recv;
    uint32_t rows, deadline_us;
    const float *features;          /* rows x the model's input size (one step for a stream) */
    size_t feature_count;
    const client_id_t *client;      /* counted against its client's in-flight limit; NULL: not counted */
    uint64_t inline_budget_ns;      /* what the front may still spend computing requests itself in its turn
                                       (server.inline_us, less what it ran already); 0: never */
} admission_t;

/* Admits A in one step: an instance that can run it (a stream's own; else the least loaded
 * available one), room in the model's queue (queue_depth), an expected wait within max_queue_us and
 * A's deadline, and a free job; then the envelope and the features are copied into the job, and
 * the job handed to the instance, whose worker is woken. SIG_OK; or SIG_UNAVAILABLE /
 * SIG_OVERLOADED / SIG_DEADLINE_EXCEEDED with ERR naming the model and the limit, and nothing taken.
 * Run to completion: when A is not a stream step, nothing of the model waits and its launch is
 * predicted within server.inline_us and A's inline_budget_ns, the job is computed here, on the front's own context,
 * and handed back in *RAN (otherwise *RAN is NULL): the caller replies and returns it like a
 * finished one. RAN may be NULL (never inline). */
sig_status_t dispatch_admit (model_t *m, const admission_t *a, job_t **ran, char *err, size_t errlen);

/* Whether a finished job of LANE waits to be collected. */
bool dispatch_has_done (model_t *m, uint32_t lane);
/* LANE's next finished job of any instance, or NULL. */
job_t *dispatch_next_done (model_t *m, uint32_t lane);
/* When an instance's device process was lost (serving/devices.h): every job it held and had not
 * handed back on LANE is admitted again to another available instance of the model, when one can
 * start it within max_queue_us and the job's deadline (counting the time since it arrived) and it
 * is not a stream step; the rest are answered UNAVAILABLE with why, as finished jobs
 * (dispatch_next_done then returns them). Counted (stats_count_rerun). LANE's front; costs one
 * atomic load when nothing was lost. */
void dispatch_reclaim (model_t *m, uint32_t lane);
/* What computed J, for InferReply.backend: M's backend, or "cpu (fallback)" where M's CPU fallback
 * did (serving/fallback.c). */
const char *dispatch_job_backend (const model_t *m, const job_t *j);
/* Back to its lane's pool, once its reply is sent. */
void dispatch_job_return (model_t *m, job_t *j);
/* LANE's jobs out of its pool (queued, computing or finished but not yet returned). */
uint32_t dispatch_inflight (const model_t *m, uint32_t lane);
/* How many of its requests wait for a worker. Exact on the front; from another thread an estimate
 * that may be off by what moved while it counted (each ring's count is read without a lock). */
uint32_t dispatch_queued (model_t *m);

/* Shutdown, in this order: dispatch_abort makes the workers answer whatever is still queued
 * with UNAVAILABLE instead of running it (the end of the drain window); model_destroy then stops
 * them. Any thread. */
void dispatch_abort (model_t *m, const char *why);

#endif
