/* The front's intake (server_impl.h): each message taken off a socket (stamped at receipt), bounded
 * (frames x bytes), decoded and checked (request.c, without ZeroMQ); health and list_models answered
 * here, every bad request answered at once, and each good infer request admitted to its model in one
 * call (dispatch_admit). */
#define _GNU_SOURCE
#include "front/server_impl.h"

#include "base/log.h"
#include "clock.h"
#include "front/request.h"
#include "serving/dispatch.h"
#include "serving/registry.h"

#include <malloc.h>
#include <stdio.h>
#include <string.h>

#define HUGE_MESSAGE_FRAMES 1024    /* after refusing a message this large, give its memory back */

/* A message too large, of too many frames, or whose routing frames do not fit a job. Answered on the
 * shortest envelope that still reaches the sender (its routing id, and a REQ client's empty
 * delimiter): echoing the rest would send a hostile sender's frames back to it. */
static void s_refuse_message (front_t *self, message_t *msg)
{
    int count = 1;
    if (msg->nframes >= 2 && msg->frames[1].size == 0 && (msg->nframes >= 3 || msg->cut))
        count = 2;
    if (msg->cut && msg->total_frames > MAX_FRAMES)
        snprintf (self->error, ERROR_MAX, "message: %zu frames or more (%zu bytes so far); expected the envelope and one "
                  "payload frame, at most %d frames; the connection is closed", msg->total_frames, msg->bytes, MAX_FRAMES);
    else if (msg->cut)
        snprintf (self->error, ERROR_MAX, "message: %zu bytes or more in %zu frames; expected at most "
                  "server.max_message_bytes = %u bytes over the whole message; the connection is closed", msg->bytes,
                  msg->total_frames, self->cfg.max_message_bytes);
    else if (msg->total_frames > MAX_FRAMES)
        snprintf (self->error, ERROR_MAX, "message: %zu frames (%zu bytes); expected the envelope and one payload "
                  "frame, at most %d frames", msg->total_frames, msg->bytes, MAX_FRAMES);
    else if (msg->bytes > self->cfg.max_message_bytes)
        snprintf (self->error, ERROR_MAX, "message: %zu bytes in %zu frames; expected at most server.max_message_bytes "
                  "= %u bytes over the whole message", msg->bytes, msg->total_frames, self->cfg.max_message_bytes);
    else
        snprintf (self->error, ERROR_MAX, "message: routing frames of more than %d bytes before the payload; expected "
                  "a routing id and a REQ delimiter (or a few proxies' ids)", JOB_ENVELOPE_BYTES);
    /* libzmq buffered the whole message before handing over its first frame; its chunks went back
     * to malloc, which keeps them: give them to the system. Rare, so the system call is fine. */
    if (!msg->cut && (msg->total_frames > HUGE_MESSAGE_FRAMES || msg->bytes > 16u * self->cfg.max_message_bytes))
        malloc_trim (0);
    if (msg->frames[0].size > JOB_ENVELOPE_BYTES)
        count = 1;
    front_send_error (self, msg->socket, msg->frames, count, 0, SIG_BAD_REQUEST, NULL, STATS_UNKNOWN, msg->t_recv);
}

static void s_reply_health (front_t *self, message_t *msg)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__HealthReply health = SIGSERVE__V1__HEALTH_REPLY__INIT;
    reply.body_case = SIGSERVE__V1__REPLY__BODY_HEALTH;
    reply.health = &health;
    health.live = 1;
    health.ready = front_ready (self);
    health.version = (char *) SIGSERVE_VERSION;
    front_send (self, msg->socket, msg->frames, msg->nframes - 1, &reply);
}

static void s_reply_list (front_t *self, message_t *msg)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__ListModelsReply list = SIGSERVE__V1__LIST_MODELS_REPLY__INIT;
    reply.body_case = SIGSERVE__V1__REPLY__BODY_LIST_MODELS;
    reply.list_models = &list;
    size_t n = model_registry_count (self->models);
    for (size_t i = 0; i < n; i++) {
        model_describe (model_registry_at (self->models, i), &self->listing->described[i]);
        codec_model_info (self->listing, i);
        self->listing->info_ptrs[i] = &self->listing->infos[i];
    }
    list.n_models = n;
    list.models = self->listing->info_ptrs;
    front_send (self, msg->socket, msg->frames, msg->nframes - 1, &reply);
}

/* Why the front takes no new request on MSG's socket now (into self->error), or SIG_OK. */
static sig_status_t s_taking (front_t *self, const message_t *msg)
{
    if (self->state != FRONT_SERVING) {
        snprintf (self->error, ERROR_MAX, "shutting down: this sigserve is draining and takes no new requests; "
                  "send them to another server");
        return SIG_UNAVAILABLE;
    }
    if (endpoints_closing (self->endpoints, msg->socket)) {
        snprintf (self->error, ERROR_MAX, "endpoint %s was removed by a configuration reload; connect to another",
                  endpoints_name (self->endpoints, msg->socket));
        return SIG_UNAVAILABLE;
    }
    return SIG_OK;
}

/* An infer request: checked, then admitted to its model (or answered at once). */
static void s_admit (front_t *self, message_t *msg, const Sigserve__V1__InferRequest *req)
{
    model_t *m = NULL;
    uint32_t rows = 0;
    const int envelope = msg->nframes - 1;
    sig_status_t st = SIG_OK;
    if (atomic_load_explicit (&self->loading, memory_order_relaxed)) {   /* no model is known yet */
        snprintf (self->error, ERROR_MAX, "loading: this sigserve is still loading and warming its models; retry "
                  "shortly (health says ready once it serves)");
        st = SIG_UNAVAILABLE;
    }
    if (st == SIG_OK)
        st = request_check_infer (self->models, req, &m, &rows, self->error, ERROR_MAX);
    if (st == SIG_OK)
        st = s_taking (self, msg);
    client_id_t client;
    const bool limited = self->cfg.max_inflight_per_client != 0;
    if (st == SIG_OK && limited) {
        size_t len = 0;
        const void *key = endpoints_client_key (self->endpoints, msg, &len);
        clients_id (&client, key, len);
        if (clients_inflight (self->clients, &client) >= self->cfg.max_inflight_per_client) {
            st = SIG_OVERLOADED;
            snprintf (self->error, ERROR_MAX, "client: %u requests in flight, the most server.max_inflight_per_client "
                      "allows; wait for replies before sending more", self->cfg.max_inflight_per_client);
            if (self->stats)
                stats_count_shed (self->stats, model_stats_slot (m), SHED_CLIENT);
        }
    }
    if (st == SIG_OK) {
        const admission_t a = { .lane = self->index, .socket = msg->socket, .envelope = msg->frames, .envelope_count = envelope,
                                .request_id = req->request_id, .stream_id = req->stream_id, .step = req->step,
                                .t_recv = msg->t_recv, .rows = rows, .deadline_us = req->deadline_us,
                                .features = req->features, .feature_count = req->n_features,
                                .client = limited ? &client : NULL,
                                /* up to inline_us of compute a turn, after a light turn: a burst of two
                                 * small requests both run here (a hand-off to a sleeping worker costs more
                                 * than the second's compute), and under load the front hands them off */
                                .inline_budget_ns = self->inline_left_ns };
        job_t *ran = NULL;
        st = dispatch_admit (m, &a, &ran, self->error, ERROR_MAX);
        if (st == SIG_OK) {
            if (limited)
                clients_add (self->clients, &client);
            endpoints_hold (self->endpoints, msg->socket);
            stats_count_server (self->stats, STATS_ADMITTED);
            if (ran) {
                uint64_t spent = clock_now_ns () - msg->t_recv;
                self->inline_left_ns = spent < self->inline_left_ns ? self->inline_left_ns - spent : 0;
                front_send_job (self, m, ran);
            }
            return;
        }
    }
    front_send_error (self, msg->socket, msg->frames, envelope, req->request_id, st, m ? model_version (m) : NULL,
                      m ? model_stats_slot (m) : STATS_UNKNOWN, msg->t_recv);
}

static void s_handle (front_t *self, message_t *msg)
{
    stats_count_server (self->stats, STATS_RECEIVED);
    if (endpoints_refused (self->endpoints, msg, msg->t_recv)) {
        /* From a connection past max_connections, already shut down: no reply goes to it. */
        stats_count_server (self->stats, STATS_DROPPED);
    } else if (msg->total_frames < 2) {
        /* Not from a ROUTER peer we can address: nothing to reply to. */
        stats_count_server (self->stats, STATS_DROPPED);
        log_debug ("dropped a message of %zu frame(s): it carries no envelope to reply on", msg->total_frames);
    } else if (msg->cut || msg->total_frames > MAX_FRAMES || msg->bytes > self->cfg.max_message_bytes
               || !envelope_fits (msg->frames, msg->nframes - 1)) {
        s_refuse_message (self, msg);
    } else {
        const frame_t *payload = &msg->frames[msg->nframes - 1];
        Sigserve__V1__Request *req = NULL;
        sig_status_t st = codec_decode_request (self->codec, payload->data, payload->size, &req, self->error,
                                                ERROR_MAX);
        if (st != SIG_OK)
            front_send_error (self, msg->socket, msg->frames, msg->nframes - 1, 0, st, NULL, STATS_UNKNOWN,
                              msg->t_recv);
        else if (req->body_case == SIGSERVE__V1__REQUEST__BODY_INFER)
            s_admit (self, msg, req->infer);
        else if (req->body_case == SIGSERVE__V1__REQUEST__BODY_HEALTH)
            s_reply_health (self, msg);
        else
            s_reply_list (self, msg);
    }
    endpoints_release (self->endpoints, msg);
}

bool front_intake (front_t *self)
{
    message_t msg;
    int taken = 0;
    self->turn_taken = 0;
    self->inline_left_ns = self->last_turn_taken <= 2 ? (uint64_t) self->cfg.inline_us * 1000 : 0;
    while (taken < JOB_INTAKE_TURN && endpoints_recv (self->endpoints, &msg)) {
        s_handle (self, &msg);
        taken++;
        self->turn_taken = taken;
    }
    self->last_turn_taken = taken;
    if (taken) {
        self->last_message = clock_now_ns ();
        spin_arrival (&self->spin, self->last_message);
    }
    return taken > 0;
}
