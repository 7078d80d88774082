/* libsigclient: see sigclient.h. One DEALER socket; every wait is a zmq_poll bounded by a
 * deadline taken from CLOCK_MONOTONIC, so discarding stale replies never stretches a call past
 * its timeout. */
#include "sigclient.h"

#include "signal.pb-c.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

/* The client's codes are the wire's: the comparison goes through int (the enums differ). */
#define S_SAME_STATUS(ours, wire) _Static_assert ((int) (ours) == (int) (wire), #ours " != " #wire)
S_SAME_STATUS (SIGCLIENT_OK, SIGSERVE__V1__STATUS__STATUS_OK);
S_SAME_STATUS (SIGCLIENT_BAD_REQUEST, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST);
S_SAME_STATUS (SIGCLIENT_UNKNOWN_MODEL, SIGSERVE__V1__STATUS__STATUS_UNKNOWN_MODEL);
S_SAME_STATUS (SIGCLIENT_BAD_SHAPE, SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE);
S_SAME_STATUS (SIGCLIENT_BAD_VALUE, SIGSERVE__V1__STATUS__STATUS_BAD_VALUE);
S_SAME_STATUS (SIGCLIENT_OVERLOADED, SIGSERVE__V1__STATUS__STATUS_OVERLOADED);
S_SAME_STATUS (SIGCLIENT_DEADLINE_EXCEEDED, SIGSERVE__V1__STATUS__STATUS_DEADLINE_EXCEEDED);
S_SAME_STATUS (SIGCLIENT_UNAVAILABLE, SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE);
S_SAME_STATUS (SIGCLIENT_INTERNAL, SIGSERVE__V1__STATUS__STATUS_INTERNAL);

/* sigserve's default max_message_bytes: ZeroMQ drops a larger request (and the connection) without
 * a reply, so a timeout after one is worth a hint. */
#define S_SERVER_DEFAULT_MAX_MESSAGE 65536

typedef Sigserve__V1__Reply reply_t;
typedef Sigserve__V1__InferReply infer_reply_t;

struct _sigclient_t {
    void *ctx;                  /* our own, so the caller needs no ZeroMQ setup */
    void *socket;               /* DEALER connected to every endpoint */
    char *endpoints;            /* "tcp://a, tcp://b": named in error messages */
    int timeout_ms;             /* bounds each send and each wait for a reply */
    uint32_t deadline_us;       /* sent with every sigclient_infer request */
    uint64_t next_request_id;   /* starts at 1: the server answers 0 to what it cannot decode */
    uint8_t *packbuf;           /* request encoding, reused; grows to the largest request */
    size_t packcap;
    size_t largest_unanswered;  /* the largest request sent since the last reply, in bytes */
    zmq_msg_t frame;            /* the last frame received; its buffer is reused by libzmq */
    int status;                 /* last outcome, a sigclient_status_t */
    char error[768];            /* last failure in words */
};

static int64_t s_now_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void s_reset (sigclient_t *self)
{
    self->status = SIGCLIENT_OK;
    self->error[0] = '\0';
}

static int s_fail (sigclient_t *self, int status, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));
static int s_fail (sigclient_t *self, int status, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (self->error, sizeof self->error, fmt, ap);
    va_end (ap);
    self->status = status;
    return -1;
}

/* Copies a protobuf-c string (never NULL in practice, but a proto3 default may be shared). */
static void s_copy_string (char *dst, size_t cap, const char *src)
{
    snprintf (dst, cap, "%s", src ? src : "");
}

const char *sigclient_status_name (int status)
{
    switch (status) {
        case SIGCLIENT_ERR_TIMEOUT:   return "ERR_TIMEOUT";
        case SIGCLIENT_ERR_TRANSPORT: return "ERR_TRANSPORT";
        case SIGCLIENT_ERR_PROTOCOL:  return "ERR_PROTOCOL";
        case SIGCLIENT_ERR_ARGUMENT:  return "ERR_ARGUMENT";
        case SIGCLIENT_ERR_NOMEM:     return "ERR_NOMEM";
        case SIGCLIENT_ERR_CAPACITY:  return "ERR_CAPACITY";
        default: break;
    }
    /* The proto's own names, so a status added to signal.proto is named without an edit here. */
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value (&sigserve__v1__status__descriptor, status);
    return v ? v->name : "STATUS_UNKNOWN";
}

sigclient_t *sigclient_new (const char *const *endpoints, size_t count, int timeout_ms)
{
    if (!endpoints || count == 0) { errno = EINVAL; return NULL; }
    size_t joined = 1;
    for (size_t i = 0; i < count; i++) {
        if (!endpoints[i] || !*endpoints[i]) { errno = EINVAL; return NULL; }
        joined += strlen (endpoints[i]) + 2;
    }
    sigclient_t *self = calloc (1, sizeof *self);
    if (!self) { errno = ENOMEM; return NULL; }
    zmq_msg_init (&self->frame);
    self->next_request_id = 1;
    self->endpoints = malloc (joined);
    self->ctx = zmq_ctx_new ();
    self->socket = self->ctx ? zmq_socket (self->ctx, ZMQ_DEALER) : NULL;
    int err = self->endpoints ? 0 : ENOMEM;
    if (!err && !self->socket) err = errno ? errno : ENOMEM;
    if (!err) {
        int linger = 0;
        if (zmq_setsockopt (self->socket, ZMQ_LINGER, &linger, sizeof linger) != 0
            || sigclient_set_timeout (self, timeout_ms) != 0)
            err = errno ? errno : EINVAL;
    }
    if (!err) {
        self->endpoints[0] = '\0';
        for (size_t i = 0; i < count && !err; i++) {
            if (zmq_connect (self->socket, endpoints[i]) != 0) {
                err = errno;
                break;
            }
            if (i) strcat (self->endpoints, ", ");
            strcat (self->endpoints, endpoints[i]);
        }
    }
    if (err) {
        sigclient_destroy (&self);
        errno = err;
        return NULL;
    }
    s_reset (self);
    return self;
}

void sigclient_destroy (sigclient_t **self_p)
{
    if (!self_p || !*self_p) return;
    sigclient_t *self = *self_p;
    zmq_msg_close (&self->frame);
    if (self->socket) zmq_close (self->socket);
    if (self->ctx) zmq_ctx_term (self->ctx);   /* prompt: LINGER is 0 */
    free (self->endpoints);
    free (self->packbuf);
    free (self);
    *self_p = NULL;
}

int sigclient_set_timeout (sigclient_t *self, int timeout_ms)
{
    if (!self) { errno = EINVAL; return -1; }
    if (timeout_ms <= 0) timeout_ms = SIGCLIENT_DEFAULT_TIMEOUT_MS;
    /* RCVTIMEO guards any blocking receive; ours poll against a deadline anyway. SNDTIMEO rather
     * than ZMQ_IMMEDIATE: requests to a server not up yet are queued, and a full queue is a
     * timeout instead of a hang. */
    if (zmq_setsockopt (self->socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms) != 0
        || zmq_setsockopt (self->socket, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms) != 0)
        return s_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot set the timeout: %s", zmq_strerror (errno));
    self->timeout_ms = timeout_ms;
    return 0;
}

void sigclient_set_deadline_us (sigclient_t *self, uint32_t deadline_us)
{
    if (self) self->deadline_us = deadline_us;
}

const char *sigclient_error (const sigclient_t *self)
{
    return self ? self->error : "no client";
}

int sigclient_last_status (const sigclient_t *self)
{
    return self ? self->status : SIGCLIENT_ERR_ARGUMENT;
}

/* ---- sending ---- */

static int s_send_frame (sigclient_t *self, const void *data, size_t len)
{
    if (len > self->largest_unanswered) self->largest_unanswered = len;
    while (zmq_send (self->socket, data, len, 0) < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN)
            return s_fail (self, SIGCLIENT_ERR_TIMEOUT,
                           "timed out after %d ms sending to %s (send queue full)",
                           self->timeout_ms, self->endpoints);
        return s_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot send to %s: %s",
                       self->endpoints, zmq_strerror (errno));
    }
    return 0;
}

/* Packs REQ into the client's buffer (grown only for a larger request than any before) and sends it. */
static int s_send_request (sigclient_t *self, const Sigserve__V1__Request *req)
{
    size_t size = sigserve__v1__request__get_packed_size (req);
    if (size > self->packcap) {
        size_t cap = self->packcap ? self->packcap : 256;
        while (cap < size) cap = cap > SIZE_MAX / 2 ? size : cap * 2;
        uint8_t *buf = realloc (self->packbuf, cap);
        if (!buf)
            return s_fail (self, SIGCLIENT_ERR_NOMEM, "cannot allocate %zu bytes for a request", size);
        self->packbuf = buf;
        self->packcap = cap;
    }
    size_t packed = sigserve__v1__request__pack (req, self->packbuf);
    if (packed != size)
        return s_fail (self, SIGCLIENT_ERR_PROTOCOL, "packed %zu bytes, expected %zu", packed, size);
    return s_send_frame (self, self->packbuf, size);
}

static int s_send_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                         uint32_t rows, uint32_t deadline_us, uint64_t *request_id)
{
    if (!model)
        return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "no model name");
    if (!features && n_features)
        return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "features is NULL but n_features is %zu", n_features);
    if (n_features > SIZE_MAX / (2 * sizeof (float)))
        return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "%zu features is too many", n_features);
    Sigserve__V1__InferRequest infer = SIGSERVE__V1__INFER_REQUEST__INIT;
    infer.request_id = self->next_request_id;
    infer.model = (char *) model;           /* packing only reads them */
    infer.features = (float *) features;
    infer.n_features = n_features;
    infer.rows = rows;
    infer.deadline_us = deadline_us;
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
    req.infer = &infer;
    if (s_send_request (self, &req) != 0) return -1;
    self->next_request_id++;
    if (request_id) *request_id = infer.request_id;
    return 0;
}

/* ---- receiving ---- */

/* Receives one frame into self->frame, waiting at most until DEADLINE_NS. */
static int s_recv_frame (sigclient_t *self, int64_t deadline_ns)
{
    while (true) {
        if (zmq_msg_recv (&self->frame, self->socket, ZMQ_DONTWAIT) >= 0) {
            self->largest_unanswered = 0;
            if (!zmq_msg_more (&self->frame)) return 0;
            size_t parts = 1;   /* the rest of a multipart message is already here: drop it */
            while (zmq_msg_more (&self->frame)
                   && zmq_msg_recv (&self->frame, self->socket, ZMQ_DONTWAIT) >= 0)
                parts++;
            return s_fail (self, SIGCLIENT_ERR_PROTOCOL,
                           "a reply of %zu frames from %s, expected one", parts, self->endpoints);
        }
        if (errno != EAGAIN && errno != EINTR)
            return s_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot receive from %s: %s",
                           self->endpoints, zmq_strerror (errno));
        int64_t left_ns = deadline_ns - s_now_ns ();
        if (left_ns <= 0 && self->largest_unanswered > S_SERVER_DEFAULT_MAX_MESSAGE)
            return s_fail (self, SIGCLIENT_ERR_TIMEOUT, "timed out after %d ms waiting for a reply from %s "
                           "(a request was %zu bytes: a server drops requests over its max_message_bytes, "
                           "%d by default, without a reply)", self->timeout_ms, self->endpoints,
                           self->largest_unanswered, S_SERVER_DEFAULT_MAX_MESSAGE);
        if (left_ns <= 0)
            return s_fail (self, SIGCLIENT_ERR_TIMEOUT, "timed out after %d ms waiting for a reply from %s",
                           self->timeout_ms, self->endpoints);
        zmq_pollitem_t item = { .socket = self->socket, .events = ZMQ_POLLIN };
        if (zmq_poll (&item, 1, (long) ((left_ns + 999999) / 1000000)) < 0 && errno != EINTR)
            return s_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot poll %s: %s",
                           self->endpoints, zmq_strerror (errno));
    }
}

/* Receives and decodes one Reply; the caller frees *REPLY_P with sigserve__v1__reply__free_unpacked. */
static int s_recv_reply (sigclient_t *self, int64_t deadline_ns, reply_t **reply_p)
{
    if (s_recv_frame (self, deadline_ns) != 0) return -1;
    size_t size = zmq_msg_size (&self->frame);
    reply_t *reply = sigserve__v1__reply__unpack (NULL, size, zmq_msg_data (&self->frame));
    if (!reply)
        return s_fail (self, SIGCLIENT_ERR_PROTOCOL, "cannot decode a reply of %zu bytes from %s",
                       size, self->endpoints);
    if (reply->body_case == SIGSERVE__V1__REPLY__BODY__NOT_SET) {
        sigserve__v1__reply__free_unpacked (reply, NULL);
        return s_fail (self, SIGCLIENT_ERR_PROTOCOL, "a reply with no body from %s", self->endpoints);
    }
    *reply_p = reply;
    return 0;
}

static int64_t s_deadline (const sigclient_t *self)
{
    return s_now_ns () + (int64_t) self->timeout_ms * 1000000;
}

/* The server's answer to a request it could not read carries request_id 0; ours start at 1. */
static bool s_is_rejection (const reply_t *reply)
{
    return reply->body_case == SIGSERVE__V1__REPLY__BODY_INFER && reply->infer->request_id == 0
           && reply->infer->status != SIGSERVE__V1__STATUS__STATUS_OK;
}

static int s_fail_status (sigclient_t *self, const infer_reply_t *rep)
{
    int status = (int) rep->status;
    const char *text = rep->error && *rep->error ? rep->error : "(no error text)";
    const char *name = sigclient_status_name (status);
    if (strcmp (name, "STATUS_UNKNOWN") == 0)
        return s_fail (self, status, "server replied status %d: %s", status, text);
    return s_fail (self, status, "server replied %s: %s", name, text);
}

/* Fills RESULT and copies the outputs of an OK reply. STATUS_IS_FAILURE: a server error status
 * fails the call (synchronous API) rather than being reported in RESULT alone (pipelined API). */
static int s_take_infer (sigclient_t *self, const infer_reply_t *rep, float *outputs, size_t cap,
                         size_t *n_outputs, sigclient_result_t *result, bool status_is_failure)
{
    if (result) {
        result->request_id = rep->request_id;
        result->status = (int) rep->status;
        result->rows = rep->rows;
        result->queue_ns = rep->queue_ns;
        result->compute_ns = rep->compute_ns;
        result->server_ns = rep->server_ns;
        s_copy_string (result->model_version, sizeof result->model_version, rep->model_version);
        s_copy_string (result->error, sizeof result->error, rep->error);
    }
    if (rep->status != SIGSERVE__V1__STATUS__STATUS_OK) {
        if (n_outputs) *n_outputs = 0;
        return status_is_failure ? s_fail_status (self, rep) : 0;
    }
    if (n_outputs) *n_outputs = rep->n_outputs;
    if (rep->n_outputs > cap || (rep->n_outputs && !outputs))
        return s_fail (self, SIGCLIENT_ERR_CAPACITY,
                       "the reply to request %llu has %zu outputs, more than the buffer's %zu",
                       (unsigned long long) rep->request_id, rep->n_outputs, outputs ? cap : 0);
    if (rep->n_outputs) memcpy (outputs, rep->outputs, rep->n_outputs * sizeof (float));
    return 0;
}

/* ---- the API ---- */

int sigclient_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                     uint32_t rows, float *outputs, size_t out_capacity, size_t *n_outputs,
                     sigclient_result_t *result)
{
    if (!self) return -1;
    s_reset (self);
    uint64_t id = 0;
    if (s_send_infer (self, model, features, n_features, rows, self->deadline_us, &id) != 0) return -1;
    int64_t deadline = s_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        if (s_recv_reply (self, deadline, &reply) != 0) return -1;
        if (reply->body_case == SIGSERVE__V1__REPLY__BODY_INFER
            && (reply->infer->request_id == id || s_is_rejection (reply))) {
            int rc = s_take_infer (self, reply->infer, outputs, out_capacity, n_outputs, result, true);
            sigserve__v1__reply__free_unpacked (reply, NULL);
            return rc;
        }
        sigserve__v1__reply__free_unpacked (reply, NULL);   /* late reply to an earlier call */
    }
}

int sigclient_send_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                          uint32_t rows, uint32_t deadline_us, uint64_t *request_id)
{
    if (!self) return -1;
    s_reset (self);
    return s_send_infer (self, model, features, n_features, rows, deadline_us, request_id);
}

int sigclient_recv_infer (sigclient_t *self, float *outputs, size_t out_capacity, size_t *n_outputs,
                          sigclient_result_t *result)
{
    if (!self) return -1;
    s_reset (self);
    if (!result) return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "no result to fill");
    int64_t deadline = s_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        if (s_recv_reply (self, deadline, &reply) != 0) return -1;
        if (reply->body_case == SIGSERVE__V1__REPLY__BODY_INFER) {
            int rc = s_take_infer (self, reply->infer, outputs, out_capacity, n_outputs, result, false);
            sigserve__v1__reply__free_unpacked (reply, NULL);
            return rc;
        }
        sigserve__v1__reply__free_unpacked (reply, NULL);   /* late health or list reply */
    }
}

/* Sends REQ and waits for a Reply with body WANT; discards late replies to earlier calls. */
static int s_call (sigclient_t *self, const Sigserve__V1__Request *req, Sigserve__V1__Reply__BodyCase want,
                   reply_t **reply_p)
{
    if (s_send_request (self, req) != 0) return -1;
    int64_t deadline = s_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        if (s_recv_reply (self, deadline, &reply) != 0) return -1;
        if (reply->body_case == want) {
            *reply_p = reply;
            return 0;
        }
        if (s_is_rejection (reply)) {
            s_fail_status (self, reply->infer);
            sigserve__v1__reply__free_unpacked (reply, NULL);
            return -1;
        }
        sigserve__v1__reply__free_unpacked (reply, NULL);
    }
}

int sigclient_health (sigclient_t *self, sigclient_health_t *out)
{
    if (!self) return -1;
    s_reset (self);
    if (!out) return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "no health struct to fill");
    Sigserve__V1__HealthRequest health = SIGSERVE__V1__HEALTH_REQUEST__INIT;
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_HEALTH;
    req.health = &health;
    reply_t *reply = NULL;
    if (s_call (self, &req, SIGSERVE__V1__REPLY__BODY_HEALTH, &reply) != 0) return -1;
    out->live = reply->health->live;
    out->ready = reply->health->ready;
    s_copy_string (out->version, sizeof out->version, reply->health->version);
    sigserve__v1__reply__free_unpacked (reply, NULL);
    return 0;
}

int sigclient_list_models (sigclient_t *self, sigclient_model_info_t *models, size_t cap, size_t *count)
{
    if (!self) return -1;
    s_reset (self);
    if (cap && !models) return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "models is NULL but cap is %zu", cap);
    Sigserve__V1__ListModelsRequest list = SIGSERVE__V1__LIST_MODELS_REQUEST__INIT;
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_LIST_MODELS;
    req.list_models = &list;
    reply_t *reply = NULL;
    if (s_call (self, &req, SIGSERVE__V1__REPLY__BODY_LIST_MODELS, &reply) != 0) return -1;
    size_t total = reply->list_models->n_models;
    for (size_t i = 0; i < total && i < cap; i++) {
        const Sigserve__V1__ModelInfo *m = reply->list_models->models[i];
        sigclient_model_info_t *o = &models[i];
        s_copy_string (o->name, sizeof o->name, m->name);
        s_copy_string (o->version, sizeof o->version, m->version);
        s_copy_string (o->backend, sizeof o->backend, m->backend);
        s_copy_string (o->kernel, sizeof o->kernel, m->kernel);
        o->input_size = m->input_size;
        o->output_size = m->output_size;
        o->max_rows = m->max_rows;
        o->available = m->available;
    }
    sigserve__v1__reply__free_unpacked (reply, NULL);
    if (count) *count = total;
    if (total > cap)
        return s_fail (self, SIGCLIENT_ERR_CAPACITY, "the server has %zu models, more than the buffer's %zu",
                       total, cap);
    return 0;
}

int sigclient_send_raw (sigclient_t *self, const void *payload, size_t len)
{
    if (!self) return -1;
    s_reset (self);
    if (!payload && len) return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "payload is NULL but len is %zu", len);
    return s_send_frame (self, payload, len);
}

int sigclient_recv_raw (sigclient_t *self, void *buf, size_t cap, size_t *len)
{
    if (!self) return -1;
    s_reset (self);
    if (s_recv_frame (self, s_deadline (self)) != 0) return -1;
    size_t size = zmq_msg_size (&self->frame);
    if (len) *len = size;
    if (size > cap || (size && !buf))
        return s_fail (self, SIGCLIENT_ERR_CAPACITY, "a frame of %zu bytes, more than the buffer's %zu",
                       size, buf ? cap : 0);
    if (size) memcpy (buf, zmq_msg_data (&self->frame), size);
    return 0;
}
