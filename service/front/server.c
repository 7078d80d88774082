/* The front (server.h): sockets, intake, replies, the drain, and the control thread's reloads.
 * Socket binding and its policies live in endpoint.c; what a request means, in request.c. */
#define _GNU_SOURCE
#include "front/server.h"

#include "front/clients.h"
#include "clock.h"
#include "front/codec.h"
#include "serving/dispatch.h"
#include "front/endpoint.h"
#include "base/log.h"
#include "front/request.h"
#include "base/ring.h"
#include "base/threads.h"

#include <errno.h>
#include <immintrin.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define MAX_FRAMES 16               /* envelope frames + payload; a longer message is refused */
#define ERROR_MAX 512
#define RECV_BUDGET 64              /* messages taken per turn before finished jobs are looked at */
#define QUIET_NS 100000000ull       /* draining: nothing left and the sockets quiet this long = done */
#define WARN_INTERVAL_NS 1000000000ull
#define RETIRING_MAX 16
#define HUGE_MESSAGE_FRAMES 1024    /* after refusing a message this large, give its memory back */
#define WATCH_NS 100000000ull       /* the connection events (max_connections) are read this often */

typedef enum { FRONT_SERVING, FRONT_DRAINING, FRONT_ABORTING, FRONT_DONE } front_state_t;
typedef enum { CMD_NONE = 0, CMD_BIND, CMD_UNBIND_ADDED, CMD_SWAP } command_t;

/* One message as received: its first MAX_FRAMES frames and the size of the whole. */
typedef struct {
    int socket;
    int nframes;                /* frames kept (at most MAX_FRAMES) */
    size_t total_frames;        /* frames in the message */
    size_t bytes;               /* bytes over every frame */
    uint64_t t_recv;
} message_t;

struct _server_t {
    server_config_t cfg;
    model_registry_t *models;           /* the set being served */
    model_registry_t *retiring[RETIRING_MAX];   /* replaced sets with replies still to send */
    size_t retiring_count;
    ring_t retired;                     /* front -> control: sets to destroy */
    stats_t *stats;
    bool own_stats;
    clients_t *clients;
    endpoints_t *endpoints;
    waker_t wake;                       /* workers and the control thread wake the front */
    codec_t *codec;
    zmq_msg_t frames[MAX_FRAMES];
    zmq_msg_t spare;                    /* frames past MAX_FRAMES pass through here */
    uint8_t *reply_buf;
    size_t reply_cap;
    char error[ERROR_MAX];
    Sigserve__V1__ModelInfo infos[CONFIG_MAX_MODELS];
    Sigserve__V1__ModelInfo *info_ptrs[CONFIG_MAX_MODELS];
    Sigserve__V1__InstanceInfo instance_infos[CONFIG_MAX_MODELS][CONFIG_MAX_INSTANCES];
    Sigserve__V1__InstanceInfo *instance_ptrs[CONFIG_MAX_MODELS][CONFIG_MAX_INSTANCES];
    server_stats_t counters;
    front_state_t state;
    _Atomic bool serving;               /* state == FRONT_SERVING, for other threads */
    _Atomic bool stop_requested;
    uint64_t drain_until;
    uint64_t last_message;              /* CLOCK_MONOTONIC ns of the last message taken */
    uint64_t last_activity;
    uint64_t last_warn;                 /* rate limit of the send-failure warning */
    uint64_t last_watch;                /* the connection events were last read */
    uint64_t failures_since_warn;
    /* the control thread's mailbox: a command, its arguments and its result */
    _Atomic int command;
    const server_config_t *command_cfg;
    model_registry_t *command_models;
    int command_result;
    char command_error[ERROR_MAX];
    waker_t command_done;
    pthread_mutex_t lock;               /* server_lock: reloads against other readers of models */
};

/* ---------------------------------------------------------------- replies */

/* Sends the envelope frames and the packed REPLY on socket slot SOCKET. The frames are moved into
 * ZeroMQ (or closed when it refuses them). */
static void s_send (server_t *self, int socket, zmq_msg_t *envelope, int count, const Sigserve__V1__Reply *reply)
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
    void *s = endpoints_socket (self->endpoints, socket);
    int rc = 0;
    for (int f = 0; f < count && rc == 0; f++)
        rc = zmq_msg_send (&envelope[f], s, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ? -1 : 0;
    if (rc == 0)
        rc = zmq_send (s, self->reply_buf, len, ZMQ_DONTWAIT) < 0 ? -1 : 0;
    int e = zmq_errno ();
    for (int f = 0; f < count; f++) {   /* sent frames are empty now; refused ones are still ours */
        zmq_msg_close (&envelope[f]);
        zmq_msg_init (&envelope[f]);
    }
    if (rc == 0) {
        self->counters.replied++;
        return;
    }
    /* The client's pipe is full (it does not read) or the client is gone: the reply is lost.
     * Counted, and said at warn level at most once a second with how many since. */
    self->counters.send_failures++;
    self->failures_since_warn++;
    if (self->stats)
        stats_count_send_failure (self->stats);
    uint64_t now = clock_now_ns ();
    if (now - self->last_warn >= WARN_INTERVAL_NS) {
        log_warn ("reply not sent on %s: %s (%s); %llu repl%s lost since the last warning, %llu in all",
                  endpoints_name (self->endpoints, socket), zmq_strerror (e),
                  e == EAGAIN ? "the client's queue is full: it is not reading its replies"
                              : "the client has gone", (unsigned long long) self->failures_since_warn,
                  self->failures_since_warn == 1 ? "y" : "ies", (unsigned long long) self->counters.send_failures);
        self->last_warn = now;
        self->failures_since_warn = 0;
    }
}

/* An InferReply with an error status, for a request that is answered by the front itself. */
static void s_send_error (server_t *self, int socket, zmq_msg_t *envelope, int count, uint64_t request_id,
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
    self->counters.by_status[status]++;
    if (self->stats)
        stats_count (self->stats, slot, status);
    s_send (self, socket, envelope, count, &reply);
}

/* The reply of a job a worker finished. */
static void s_send_job (server_t *self, model_t *m, job_t *j)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__InferReply infer = SIGSERVE__V1__INFER_REPLY__INIT;
    reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
    reply.infer = &infer;
    infer.request_id = j->request_id;
    infer.status = (Sigserve__V1__Status) j->status;
    infer.model_version = (char *) model_version (m);
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
    self->counters.by_status[j->status]++;
    if (self->stats) {
        int slot = model_stats_slot (m);
        stats_count (self->stats, slot, j->status);
        stats_observe (self->stats, slot, STAGE_QUEUE, infer.queue_ns);
        stats_observe (self->stats, slot, STAGE_SERVER, infer.server_ns);
        if (j->batch_rows) {
            stats_observe (self->stats, slot, STAGE_COMPUTE, j->compute_ns);
            stats_observe_batch (self->stats, slot, j->batch_rows);
        }
    }
    if (j->counted) {
        size_t len;
        const void *key = endpoints_client_key (self->endpoints, &j->envelope[0], &len);
        clients_release (self->clients, key, len);
        j->counted = false;
    }
    endpoints_release (self->endpoints, j->socket);
    s_send (self, j->socket, j->envelope, j->envelope_count, &reply);
    j->envelope_count = 0;
    dispatch_job_return (m, j);
}

/* Sends the replies of every finished job. True when there were any. */
static bool s_collect (server_t *self)
{
    bool any = false;
    for (size_t i = 0; i < model_registry_count (self->models); i++) {
        model_t *m = model_registry_at (self->models, i);
        job_t *j;
        while ((j = dispatch_next_done (m)) != NULL) {
            s_send_job (self, m, j);
            any = true;
        }
    }
    for (size_t r = 0; r < self->retiring_count; r++)
        for (size_t i = 0; i < model_registry_count (self->retiring[r]); i++) {
            if (!model_registry_owns (self->retiring[r], i))
                continue;   /* taken over by the current set: collected above */
            model_t *m = model_registry_at (self->retiring[r], i);
            job_t *j;
            while ((j = dispatch_next_done (m)) != NULL) {
                s_send_job (self, m, j);
                any = true;
            }
        }
    return any;
}

static uint32_t s_inflight (server_t *self)
{
    uint32_t n = 0;
    for (size_t i = 0; i < model_registry_count (self->models); i++)
        n += dispatch_inflight (model_registry_at (self->models, i));
    for (size_t r = 0; r < self->retiring_count; r++)
        for (size_t i = 0; i < model_registry_count (self->retiring[r]); i++)
            if (model_registry_owns (self->retiring[r], i))
                n += dispatch_inflight (model_registry_at (self->retiring[r], i));
    return n;
}

/* ---------------------------------------------------------------- intake */

/* Takes one whole message from socket slot SOCKET. 1 when one was there, 0 when none. */
static int s_recv (server_t *self, int socket, message_t *msg)
{
    void *s = endpoints_socket (self->endpoints, socket);
    msg->socket = socket;
    msg->nframes = 0;
    msg->total_frames = 0;
    msg->bytes = 0;
    for (;;) {
        zmq_msg_t *f = msg->total_frames < MAX_FRAMES ? &self->frames[msg->total_frames] : &self->spare;
        if (zmq_msg_recv (f, s, msg->total_frames ? 0 : ZMQ_DONTWAIT) < 0)
            return msg->total_frames > 0;   /* EAGAIN on the first frame: nothing waiting */
        if (msg->total_frames == 0)
            msg->t_recv = clock_now_ns ();
        msg->total_frames++;
        msg->bytes += zmq_msg_size (f);
        int more = zmq_msg_more (f);
        if (f == &self->spare) {
            zmq_msg_close (&self->spare);
            zmq_msg_init (&self->spare);
        } else
            msg->nframes++;
        if (!more)
            return 1;
    }
}

static void s_release_frames (server_t *self, message_t *msg)
{
    for (int f = 0; f < msg->nframes; f++) {
        zmq_msg_close (&self->frames[f]);
        zmq_msg_init (&self->frames[f]);
    }
    msg->nframes = 0;
}

/* A message too large or of too many frames. Answered on the shortest envelope that still
 * reaches the sender (its routing id, and a REQ client's empty delimiter): echoing the rest
 * would send a hostile sender's frames back to it. */
static void s_refuse_message (server_t *self, message_t *msg)
{
    int count = 1;
    if (msg->nframes >= 3 && zmq_msg_size (&self->frames[1]) == 0)
        count = 2;
    if (msg->total_frames > MAX_FRAMES)
        snprintf (self->error, ERROR_MAX, "message: %zu frames (%zu bytes); expected the envelope and one payload "
                  "frame, at most %d frames", msg->total_frames, msg->bytes, MAX_FRAMES);
    else
        snprintf (self->error, ERROR_MAX, "message: %zu bytes in %zu frames; expected at most server.max_message_bytes "
                  "= %u bytes over the whole message", msg->bytes, msg->total_frames, self->cfg.max_message_bytes);
    /* libzmq buffered the whole message before handing over its first frame; its chunks went back
     * to malloc, which keeps them: give them to the system. Rare, so the system call is fine. */
    if (msg->total_frames > HUGE_MESSAGE_FRAMES || msg->bytes > 16u * self->cfg.max_message_bytes)
        malloc_trim (0);
    s_send_error (self, msg->socket, self->frames, count, 0, SIG_BAD_REQUEST, NULL, STATS_UNKNOWN, msg->t_recv);
    s_release_frames (self, msg);
}

static void s_reply_health (server_t *self, message_t *msg)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__HealthReply health = SIGSERVE__V1__HEALTH_REPLY__INIT;
    reply.body_case = SIGSERVE__V1__REPLY__BODY_HEALTH;
    reply.health = &health;
    health.live = 1;
    health.ready = self->state == FRONT_SERVING && model_registry_ready (self->models);
    health.version = (char *) SIGSERVE_VERSION;
    s_send (self, msg->socket, self->frames, msg->nframes - 1, &reply);
}

static void s_reply_list (server_t *self, message_t *msg)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__ListModelsReply list = SIGSERVE__V1__LIST_MODELS_REPLY__INIT;
    reply.body_case = SIGSERVE__V1__REPLY__BODY_LIST_MODELS;
    reply.list_models = &list;
    size_t n = model_registry_count (self->models);
    for (size_t i = 0; i < n; i++) {
        model_describe (model_registry_at (self->models, i), &self->infos[i], self->instance_infos[i],
                        self->instance_ptrs[i]);
        self->info_ptrs[i] = &self->infos[i];
    }
    list.n_models = n;
    list.models = self->info_ptrs;
    s_send (self, msg->socket, self->frames, msg->nframes - 1, &reply);
}

/* An infer request: checked, then admitted to its model's queue (or answered at once). */
static void s_admit (server_t *self, message_t *msg, const Sigserve__V1__InferRequest *req)
{
    model_t *m = NULL;
    uint32_t rows = 0;
    int envelope = msg->nframes - 1;
    sig_status_t st = request_check_infer (self->models, req, &m, &rows, self->error, ERROR_MAX);
    int slot = m ? model_stats_slot (m) : STATS_UNKNOWN;
    const char *version = m ? model_version (m) : NULL;
    if (st == SIG_OK && self->state != FRONT_SERVING) {
        st = SIG_UNAVAILABLE;
        snprintf (self->error, ERROR_MAX, "shutting down: this sigserve is draining and takes no new requests; "
                  "send them to another server");
    }
    if (st == SIG_OK && endpoints_closing (self->endpoints, msg->socket)) {
        st = SIG_UNAVAILABLE;
        snprintf (self->error, ERROR_MAX, "endpoint %s was removed by a configuration reload; connect to another",
                  endpoints_name (self->endpoints, msg->socket));
    }
    if (st == SIG_OK && dispatch_queue_full (m)) {
        st = SIG_OVERLOADED;
        snprintf (self->error, ERROR_MAX, "model \"%s\": queue full: %u requests waiting (queue_depth %u); retry "
                  "later, or raise the model's queue_depth or instances", model_name (m), dispatch_queued (m),
                  model_config (m)->queue_depth);
    }
    size_t key_len = 0;
    const void *key = NULL;
    bool counted = false;
    if (st == SIG_OK && self->cfg.max_inflight_per_client) {
        key = endpoints_client_key (self->endpoints, &self->frames[0], &key_len);
        if (!clients_admit (self->clients, key, key_len, self->cfg.max_inflight_per_client)) {
            st = SIG_OVERLOADED;
            snprintf (self->error, ERROR_MAX, "client: %u requests in flight, the most server.max_inflight_per_client "
                      "allows; wait for replies before sending more", self->cfg.max_inflight_per_client);
        } else
            counted = true;
    }
    job_t *j = NULL;
    if (st == SIG_OK && !(j = dispatch_job_take (m))) {
        s_collect (self);               /* finished jobs not yet sent hold the pool */
        if (!(j = dispatch_job_take (m))) {
            st = SIG_OVERLOADED;
            snprintf (self->error, ERROR_MAX, "model \"%s\": every request buffer is in use; retry later",
                      model_name (m));
        }
    }
    if (st == SIG_OK) {
        j->socket = msg->socket;
        j->envelope_count = envelope;
        for (int f = 0; f < envelope; f++)
            zmq_msg_move (&j->envelope[f], &self->frames[f]);
        j->request_id = req->request_id;
        j->t_recv = msg->t_recv;
        j->stream_id = req->stream_id;
        j->rows = rows;
        j->deadline_us = req->deadline_us;
        j->counted = counted;
        memcpy (j->features, req->features, req->n_features * sizeof (float));
        endpoints_hold (self->endpoints, msg->socket);
        if (dispatch_submit (m, j) == 0) {
            self->counters.admitted++;
            return;
        }
        /* Every instance became unavailable since the check: answer from here. */
        endpoints_release (self->endpoints, msg->socket);
        for (int f = 0; f < envelope; f++)
            zmq_msg_move (&self->frames[f], &j->envelope[f]);
        j->envelope_count = 0;
        dispatch_job_return (m, j);
        st = SIG_UNAVAILABLE;
        snprintf (self->error, ERROR_MAX, "model \"%s\" is unavailable on backend %s", model_name (m),
                  model_backend_name (m));
    }
    if (counted)
        clients_release (self->clients, key, key_len);
    s_send_error (self, msg->socket, self->frames, envelope, req->request_id, st, version, slot, msg->t_recv);
}

static void s_handle (server_t *self, message_t *msg)
{
    self->counters.received++;
    if (msg->total_frames < 2) {
        /* Not from a ROUTER peer we can address: nothing to reply to. */
        self->counters.dropped++;
        log_debug ("dropped a message of %zu frame(s): it carries no envelope to reply on", msg->total_frames);
    } else if (msg->total_frames > MAX_FRAMES || msg->bytes > self->cfg.max_message_bytes) {
        s_refuse_message (self, msg);
    } else {
        zmq_msg_t *payload = &self->frames[msg->nframes - 1];
        Sigserve__V1__Request *req = NULL;
        sig_status_t st = codec_decode_request (self->codec, zmq_msg_data (payload), zmq_msg_size (payload), &req,
                                                self->error, ERROR_MAX);
        if (st != SIG_OK)
            s_send_error (self, msg->socket, self->frames, msg->nframes - 1, 0, st, NULL, STATS_UNKNOWN, msg->t_recv);
        else if (req->body_case == SIGSERVE__V1__REQUEST__BODY_INFER)
            s_admit (self, msg, req->infer);
        else if (req->body_case == SIGSERVE__V1__REQUEST__BODY_HEALTH)
            s_reply_health (self, msg);
        else
            s_reply_list (self, msg);
    }
    s_release_frames (self, msg);
}

/* Takes up to RECV_BUDGET messages, the sockets in turn. True when there were any. */
static bool s_intake (server_t *self)
{
    message_t msg;
    int taken = 0, progress = 1;
    while (progress && taken < RECV_BUDGET) {
        progress = 0;
        for (int s = endpoints_first (self->endpoints); s >= 0 && taken < RECV_BUDGET;
             s = endpoints_next (self->endpoints, s))
            if (s_recv (self, s, &msg)) {
                s_handle (self, &msg);
                taken++;
                progress = 1;
            }
    }
    if (taken)
        self->last_message = clock_now_ns ();
    return taken > 0;
}

/* ---------------------------------------------------------------- control (reloads) */

static int s_reply_buffer (server_t *self, model_registry_t *models, char *err, size_t errlen)
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

static void s_attach (server_t *self, model_registry_t *models)
{
    for (size_t i = 0; i < model_registry_count (models); i++)
        dispatch_attach (model_registry_at (models, i), &self->wake);
}

/* Runs the control thread's command, on the front, between two requests. */
static void s_command (server_t *self)
{
    int cmd = atomic_load_explicit (&self->command, memory_order_acquire);
    if (cmd == CMD_NONE)
        return;
    int rc = 0;
    self->command_error[0] = '\0';
    if (cmd == CMD_BIND)
        rc = endpoints_add (self->endpoints, self->command_cfg, self->command_error, ERROR_MAX);
    if (cmd == CMD_UNBIND_ADDED)
        endpoints_drop_added (self->endpoints);
    else if (cmd == CMD_BIND && self->retiring_count == RETIRING_MAX) {
        snprintf (self->command_error, ERROR_MAX, "%d earlier reloads still have requests in flight; try again once "
                  "they are answered", RETIRING_MAX);
        endpoints_drop_added (self->endpoints);
        rc = -1;
    } else if (cmd == CMD_SWAP) {
        /* A reply buffer too small for the new models' outputs would answer their requests
         * INTERNAL (s_send); growing it can only fail when memory is gone. */
        if (s_reply_buffer (self, self->command_models, self->command_error, ERROR_MAX) != 0)
            log_error ("reload: %s", self->command_error);
        s_attach (self, self->command_models);
        self->retiring[self->retiring_count++] = self->models;
        self->models = self->command_models;
        endpoints_commit (self->endpoints, self->command_cfg);
        self->cfg.max_message_bytes = self->command_cfg->max_message_bytes;
        self->cfg.max_inflight_per_client = self->command_cfg->max_inflight_per_client;
        self->cfg.drain_ms = self->command_cfg->drain_ms;
    }
    self->command_result = rc;
    atomic_store_explicit (&self->command, CMD_NONE, memory_order_release);
    waker_wake (&self->command_done);
}

/* Model sets whose owned models have nothing in flight go back to the control thread. */
static void s_retire (server_t *self)
{
    for (size_t r = 0; r < self->retiring_count;) {
        model_registry_t *set = self->retiring[r];
        uint32_t inflight = 0;
        for (size_t i = 0; i < model_registry_count (set); i++)
            if (model_registry_owns (set, i))
                inflight += dispatch_inflight (model_registry_at (set, i));
        if (inflight == 0 && ring_push (&self->retired, set)) {
            self->retiring[r] = self->retiring[--self->retiring_count];
            continue;
        }
        r++;
    }
    endpoints_close_idle (self->endpoints);
}

/* Posts CMD to the front and waits for it to be done. */
static int s_call (server_t *self, command_t cmd, const server_config_t *cfg, model_registry_t *models, char *err,
                   size_t errlen)
{
    self->command_cfg = cfg;
    self->command_models = models;
    atomic_store_explicit (&self->command, cmd, memory_order_release);
    waker_wake (&self->wake);
    for (;;) {
        waker_prepare (&self->command_done);
        if (atomic_load_explicit (&self->command, memory_order_acquire) == CMD_NONE) {
            waker_cancel (&self->command_done);
            break;
        }
        waker_sleep (&self->command_done, 100000000ull);
    }
    if (self->command_result != 0)
        snprintf (err, errlen, "%s", self->command_error);
    return self->command_result;
}

static void s_log_restart_keys (const server_config_t *now, const server_config_t *next)
{
    if (now->io_threads != next->io_threads)
        log_warn ("reload: server.io_threads changed (%u -> %u): takes effect at the next restart; kept %u",
                  now->io_threads, next->io_threads, now->io_threads);
    if (now->cpu_count != next->cpu_count || memcmp (now->cpus, next->cpus, now->cpu_count * sizeof (int)) != 0)
        log_warn ("reload: server.cpus changed: takes effect at the next restart; kept the old list");
    if (strcmp (now->http, next->http) != 0)
        log_warn ("reload: server.http changed (\"%s\" -> \"%s\"): takes effect at the next restart; kept \"%s\"",
                  now->http, next->http, now->http);
    if (now->busy_poll != next->busy_poll)
        log_warn ("reload: server.busy_poll changed: takes effect at the next restart; kept %s",
                  now->busy_poll ? "true" : "false");
    if (now->heartbeat_ms != next->heartbeat_ms || now->max_connections != next->max_connections)
        log_warn ("reload: server.heartbeat_ms and max_connections apply to endpoints bound from now on");
    if (strcmp (now->curve.secret_key_file, next->curve.secret_key_file) != 0)
        log_warn ("reload: server.curve.secret_key_file changed: takes effect at the next restart; the allowlist "
                  "folder is re-read on every connection");
}

int server_reload (server_t *self, const config_t *cfg, char *err, size_t errlen)
{
    s_log_restart_keys (&self->cfg, &cfg->server);
    char why[ERROR_MAX];
    /* 1. New endpoints, bound next to the old ones (nothing is unbound yet). */
    if (s_call (self, CMD_BIND, &cfg->server, NULL, why, sizeof why) != 0) {
        snprintf (err, errlen, "%s", why);
        return -1;
    }
    /* 2. New and changed models, loaded and warmed aside; unchanged ones taken over. */
    size_t reused = 0;
    model_registry_t *next = model_registry_load (cfg, self->stats, self->models, &reused, why, sizeof why);
    if (!next) {
        s_call (self, CMD_UNBIND_ADDED, NULL, NULL, err, errlen);
        snprintf (err, errlen, "%s", why);
        return -1;
    }
    /* 3. The switch, between two requests (it cannot fail: the bind step checked for room). The
     * lock keeps readers of server_models (the HTTP thread) off the set while it changes. */
    pthread_mutex_lock (&self->lock);
    s_call (self, CMD_SWAP, &cfg->server, next, why, sizeof why);
    pthread_mutex_unlock (&self->lock);
    log_info ("reload: serving %zu model(s) (%zu unchanged, %zu loaded) on %zu endpoint(s)",
              model_registry_count (next), reused, model_registry_count (next) - reused, cfg->server.endpoint_count);
    return 0;
}

void server_collect_retired (server_t *self)
{
    model_registry_t *set;
    pthread_mutex_lock (&self->lock);
    while ((set = ring_pop (&self->retired)) != NULL) {
        size_t owned = 0;
        for (size_t i = 0; i < model_registry_count (set); i++)
            owned += model_registry_owns (set, i);
        model_registry_destroy (&set);
        if (owned)
            log_info ("reload: %zu model(s) no longer served are unloaded", owned);
    }
    pthread_mutex_unlock (&self->lock);
}

model_registry_t *server_models (server_t *self) { return self->models; }
void server_lock (server_t *self) { pthread_mutex_lock (&self->lock); }
void server_unlock (server_t *self) { pthread_mutex_unlock (&self->lock); }

bool server_ready (server_t *self)
{
    return atomic_load (&self->serving) && !atomic_load (&self->stop_requested) && model_registry_ready (self->models);
}

/* ---------------------------------------------------------------- the loop */

static bool s_any_done (server_t *self)
{
    for (size_t i = 0; i < model_registry_count (self->models); i++)
        if (dispatch_has_done (model_registry_at (self->models, i)))
            return true;
    for (size_t r = 0; r < self->retiring_count; r++)
        for (size_t i = 0; i < model_registry_count (self->retiring[r]); i++)
            if (model_registry_owns (self->retiring[r], i) && dispatch_has_done (model_registry_at (self->retiring[r], i)))
                return true;
    return false;
}

/* Nothing to do: spin (busy_poll, or for spin_us), then sleep in zmq_poll on the sockets and the
 * wake-up fd. */
static void s_idle (server_t *self, uint64_t now)
{
    if (self->cfg.busy_poll || now - self->last_activity < (uint64_t) self->cfg.spin_us * 1000) {
        _mm_pause ();
        return;
    }
    long timeout_ms = self->state == FRONT_SERVING ? 100 : 1;   /* the stop flag is looked at this often */
    waker_prepare (&self->wake);
    if (s_any_done (self) || atomic_load (&self->command) != CMD_NONE) {
        waker_cancel (&self->wake);
        return;
    }
    zmq_pollitem_t *items;
    int n = endpoints_poll_items (self->endpoints, self->wake.fd, &items);
    int rc = zmq_poll (items, n, timeout_ms);
    waker_cancel (&self->wake);
    if (rc > 0) {
        waker_clear (&self->wake);
        endpoints_watch_connections (self->endpoints, clock_now_ns ());
    }
}

static void s_begin_drain (server_t *self)
{
    self->state = FRONT_DRAINING;
    atomic_store (&self->serving, false);
    self->drain_until = clock_now_ns () + (uint64_t) self->cfg.drain_ms * 1000000ull;
    log_info ("stopping: draining for up to %u ms (new requests are answered UNAVAILABLE, %u admitted are finishing)",
              self->cfg.drain_ms, s_inflight (self));
}

static void s_abort_all (server_t *self, const char *why)
{
    for (size_t i = 0; i < model_registry_count (self->models); i++)
        dispatch_abort (model_registry_at (self->models, i), why);
    for (size_t r = 0; r < self->retiring_count; r++)
        for (size_t i = 0; i < model_registry_count (self->retiring[r]); i++)
            if (model_registry_owns (self->retiring[r], i))
                dispatch_abort (model_registry_at (self->retiring[r], i), why);
}

/* The drain's progress: DRAINING until nothing is in flight and the sockets have been quiet, or
 * drain_ms is over (then the workers answer what is still queued UNAVAILABLE: ABORTING), DONE
 * when every admitted request is answered. */
static void s_drain_step (server_t *self, uint64_t now)
{
    uint32_t inflight = s_inflight (self);
    if (self->state == FRONT_DRAINING) {
        if (inflight == 0 && now - self->last_message >= QUIET_NS)
            self->state = FRONT_DONE;
        else if (now >= self->drain_until) {
            if (inflight == 0)
                self->state = FRONT_DONE;
            else {
                log_warn ("stopping: drain_ms (%u ms) is over with %u request(s) admitted and not yet run; they are "
                          "answered UNAVAILABLE", self->cfg.drain_ms, inflight);
                s_abort_all (self, "shutting down");
                self->state = FRONT_ABORTING;
            }
        }
    } else if (self->state == FRONT_ABORTING && inflight == 0)
        self->state = FRONT_DONE;
}

int server_run (server_t *self, volatile sig_atomic_t *stop)
{
    threads_set_role ("front");
    char err[256];
    if (self->cfg.cpu_count && threads_pin_set (self->cfg.cpus, self->cfg.cpu_count, err, sizeof err) != 0)
        log_warn ("server.cpus: %s; the front runs unpinned", err);
    log_info ("serving %zu model(s) on %zu endpoint(s)%s", model_registry_count (self->models),
              self->cfg.endpoint_count, self->cfg.busy_poll ? ", busy-polling" : "");
    self->last_activity = self->last_message = clock_now_ns ();
    while (self->state != FRONT_DONE) {
        bool busy = s_collect (self);
        busy |= s_intake (self);
        s_command (self);
        if (self->retiring_count || endpoints_any_closing (self->endpoints))
            s_retire (self);
        uint64_t now = clock_now_ns ();
        if (now - self->last_watch >= WATCH_NS) {
            endpoints_watch_connections (self->endpoints, now);
            self->last_watch = now;
        }
        if (self->state == FRONT_SERVING && ((stop && *stop) || atomic_load (&self->stop_requested)))
            s_begin_drain (self);
        if (self->state != FRONT_SERVING)
            s_drain_step (self, now);
        if (busy)
            self->last_activity = now;
        else if (self->state != FRONT_DONE)
            s_idle (self, now);
    }
    s_collect (self);
    uint64_t infer_replies = 0;
    for (int st = 0; st < 16; st++)
        infer_replies += self->counters.by_status[st];
    log_info ("stopped: %llu received, %llu admitted, %llu replied (%llu to infer requests), %llu send failures, "
              "%llu dropped", (unsigned long long) self->counters.received, (unsigned long long) self->counters.admitted,
              (unsigned long long) self->counters.replied, (unsigned long long) infer_replies,
              (unsigned long long) self->counters.send_failures, (unsigned long long) self->counters.dropped);
    return 0;
}

void server_stop (server_t *self)
{
    atomic_store (&self->stop_requested, true);
    waker_wake (&self->wake);
}

/* ---------------------------------------------------------------- lifecycle */

server_t *server_new (const server_config_t *cfg, model_registry_t *models, stats_t *stats, auth_t *auth,
                      char *err, size_t errlen)
{
    server_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    self->models = models;
    self->stats = stats;
    self->wake.fd = self->command_done.fd = -1;
    atomic_init (&self->command, CMD_NONE);
    atomic_init (&self->stop_requested, false);
    atomic_init (&self->serving, true);
    pthread_mutex_init (&self->lock, NULL);
    if (!self->stats) {
        self->stats = stats_new ();
        self->own_stats = true;
    }
    size_t jobs = 0;
    for (size_t i = 0; i < model_registry_count (models); i++)
        jobs += model_config (model_registry_at (models, i))->queue_depth
                + (size_t) model_instance_count (model_registry_at (models, i)) * 64;
    self->codec = codec_new (cfg->max_message_bytes);
    self->clients = clients_new (jobs * 2 + 1024);
    for (int f = 0; f < MAX_FRAMES; f++)
        zmq_msg_init (&self->frames[f]);
    zmq_msg_init (&self->spare);
    if (!self->stats || !self->codec || !self->clients || waker_init (&self->wake) != 0
        || waker_init (&self->command_done) != 0 || ring_init (&self->retired, RETIRING_MAX) != 0
        || s_reply_buffer (self, models, err, errlen) != 0) {
        snprintf (err, errlen, "out of memory");
        server_destroy (&self);
        return NULL;
    }
    self->endpoints = endpoints_new (cfg, auth, err, errlen);
    if (!self->endpoints) {
        server_destroy (&self);
        return NULL;
    }
    s_attach (self, models);
    return self;
}

void server_destroy (server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    server_t *self = *self_p;
    endpoints_destroy (&self->endpoints, self->cfg.drain_ms);
    for (int f = 0; f < MAX_FRAMES; f++)
        zmq_msg_close (&self->frames[f]);
    zmq_msg_close (&self->spare);
    for (size_t r = 0; r < self->retiring_count; r++)
        model_registry_destroy (&self->retiring[r]);
    if (self->retired.items)
        server_collect_retired (self);
    ring_release (&self->retired);
    codec_destroy (&self->codec);
    clients_destroy (&self->clients);
    waker_release (&self->wake);
    waker_release (&self->command_done);
    if (self->own_stats)
        stats_destroy (&self->stats);
    pthread_mutex_destroy (&self->lock);
    free (self->reply_buf);
    free (self);
    *self_p = NULL;
}

const server_stats_t *server_stats (const server_t *self) { return &self->counters; }
