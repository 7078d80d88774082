/* The front's replies (server_impl.h): encoding and sending, with exactly the envelope a request came
 * with, and collecting what the workers finished. */
#define _GNU_SOURCE
#include "front/server_impl.h"

#include "base/log.h"
#include "clock.h"
#include "serving/dispatch.h"
#include "serving/registry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARN_INTERVAL_NS 1000000000ull

void front_send (front_t *self, int socket, const frame_t *envelope, int count, const Sigserve__V1__Reply *reply)
{
    size_t len = codec_encode_reply (reply, self->reply_buf, self->reply_cap);
    if (len == 0) {
        /* Cannot happen with the buffer sized for the largest model; answer rather than go silent. */
        Sigserve__V1__Reply fallback = SIGSERVE__V1__REPLY__INIT;
        Sigserve__V1__InferReply bad = SIGSERVE__V1__INFER_REPLY__INIT;
        bad.request_id = reply->body_case == SIGSERVE__V1__REPLY__BODY_INFER ? reply->infer->request_id : 0;
        bad.status = SIGSERVE__V1__STATUS__STATUS_INTERNAL;
        bad.error = (char *) "reply: larger than the server's reply buffer";
        fallback.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
        fallback.infer = &bad;
        len = codec_encode_reply (&fallback, self->reply_buf, self->reply_cap);
    }
    int rc = endpoints_send (self->endpoints, socket, envelope, count, self->reply_buf, len);
    int e = errno;
    if (rc == 0) {
        stats_count_server (self->stats, STATS_REPLIED);
        return;
    }
    /* The client's pipe is full (it does not read) or the client is gone: the reply is lost.
     * Counted, and said at warn level at most once a second with how many since. */
    self->failures_since_warn++;
    stats_count_send_failure (self->stats);
    uint64_t now = clock_now_ns ();
    if (now - self->last_warn >= WARN_INTERVAL_NS) {
        log_warn ("reply not sent on %s: %s (%s); %llu repl%s lost since the last warning, %llu in all",
                  endpoints_name (self->endpoints, socket), strerror (e),
                  e == EAGAIN ? "the client's queue is full: it is not reading its replies"
                              : "the client has gone", (unsigned long long) self->failures_since_warn,
                  self->failures_since_warn == 1 ? "y" : "ies", (unsigned long long) stats_send_failures (self->stats));
        self->last_warn = now;
        self->failures_since_warn = 0;
    }
}

void front_send_error (front_t *self, int socket, const frame_t *envelope, int count, uint64_t request_id,
                       sig_status_t status, const char *model_version, int slot, uint64_t t_recv)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__InferReply infer = SIGSERVE__V1__INFER_REPLY__INIT;
    reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
    reply.infer = &infer;
    infer.request_id = request_id;
    infer.status = (Sigserve__V1__Status) status;
    infer.error = self->error;
    if (model_version)
        infer.model_version = (char *) model_version;
    uint64_t now = clock_now_ns ();
    infer.queue_ns = now - t_recv;
    infer.server_ns = now - t_recv;
    stats_count_server (self->stats, STATS_INFER_REPLIES);
    stats_count (self->stats, slot, status);
    front_send (self, socket, envelope, count, &reply);
}

void front_send_job (front_t *self, model_t *m, job_t *j)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__InferReply infer = SIGSERVE__V1__INFER_REPLY__INIT;
    reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
    reply.infer = &infer;
    infer.request_id = j->request_id;
    infer.status = (Sigserve__V1__Status) j->status;
    infer.model_version = (char *) model_version (m);
    if (j->status == SIG_OK)
        infer.backend = (char *) dispatch_job_backend (m, j);
    infer.rows = j->rows;
    infer.batch_rows = j->batch_rows;
    infer.compute_ns = j->compute_ns;
    infer.queue_ns = j->t_start > j->t_recv ? j->t_start - j->t_recv : 0;
    if (j->status == SIG_OK) {
        infer.outputs = j->outputs;
        infer.n_outputs = (size_t) j->rows * model_output_size (m);
    } else
        infer.error = j->error;
    uint64_t now = clock_now_ns ();
    infer.server_ns = now - j->t_recv;
    stats_count_server (self->stats, STATS_INFER_REPLIES);
    const int slot = model_stats_slot (m);
    stats_count (self->stats, slot, j->status);
    stats_observe (self->stats, slot, STAGE_QUEUE, infer.queue_ns);
    stats_observe (self->stats, slot, STAGE_SERVER, infer.server_ns);
    if (j->batch_rows) {
        stats_observe (self->stats, slot, STAGE_COMPUTE, j->compute_ns);
        stats_observe_batch (self->stats, slot, j->batch_rows);
    }
    if (j->counted) {
        clients_release (self->clients, &j->client);
        j->counted = false;
    }
    endpoints_release_slot (self->endpoints, j->socket);
    frame_t envelope[JOB_ENVELOPE_MAX];
    int count = envelope_frames (&j->envelope, envelope);
    front_send (self, j->socket, envelope, count, &reply);
    dispatch_job_return (m, j);
}

bool front_collect (front_t *self)
{
    int sent = 0;
    for (size_t i = 0; i < self->answering_count; i++) {
        model_t *m = self->answering[i];
        job_t *j;
        dispatch_reclaim (m, self->index);
        while ((j = dispatch_next_done (m, self->index)) != NULL) {
            /* several finished jobs: each client's replies leave in one write (the first alone
             * is sent at once, a lone reply waits for nothing) */
            if (sent++ == 1)
                endpoints_cork (self->endpoints, true);
            front_send_job (self, m, j);
        }
    }
    if (sent > 1)
        endpoints_cork (self->endpoints, false);
    return sent > 0;
}

int front_reply_buffer (front_t *self, model_registry_t *models, char *err, size_t errlen)
{
    /* Packed floats (4 bytes each, plus a length), the error text, the version and the fixed
     * fields; a ListModelsReply fits too (< 2 KiB per model with its candidates and instances). */
    size_t cap = model_registry_max_outputs (models) * 4 + ERROR_MAX + 1024 + CONFIG_MAX_MODELS * 2048;
    if (cap <= self->reply_cap)
        return 0;
    uint8_t *buf = realloc (self->reply_buf, cap);
    if (!buf) {
        snprintf (err, errlen, "out of memory for a %zu-byte reply buffer", cap);
        return -1;
    }
    self->reply_buf = buf;
    self->reply_cap = cap;
    return 0;
}
