/* libsigclient: see sigclient.h. One DEALER socket of either engine (sigclient_sock.c); every
 * wait is bounded by a deadline taken from CLOCK_MONOTONIC, so discarding stale replies never
 * stretches a call past its timeout. dns:// endpoints (sigclient_dns.c) are resolved again when
 * due, from inside the calls that send or receive (client_resolve_if_due), never from another
 * thread. LSTM streams have sockets of their own (sigclient_stream.c). */
#include "sigclient_impl.h"

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

void client_reset (sigclient_t *self)
{
    self->status = SIGCLIENT_OK;
    self->error[0] = '\0';
}

int client_fail (sigclient_t *self, int status, const char *fmt, ...)
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
        case SIGCLIENT_ERR_STREAM_GONE: return "ERR_STREAM_GONE";
        case SIGCLIENT_ERR_SECURITY:  return "ERR_SECURITY";
        default: break;
    }
    /* The proto's own names, so a status added to signal.proto is named without an edit here. */
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value (&sigserve__v1__status__descriptor, status);
    return v ? v->name : "STATUS_UNKNOWN";
}

/* ---- lifetime and settings ---- */

/* Counts the dns:// endpoints and checks their form; joins the others into self->static_endpoints. */
static int s_take_endpoints (sigclient_t *self, const char *const *endpoints, size_t count)
{
    size_t joined = 1;
    for (size_t i = 0; i < count; i++) {
        if (client_is_dns (endpoints[i])) self->n_dns++;
        else joined += strlen (endpoints[i]) + 2;
    }
    self->static_endpoints = malloc (joined);
    self->statics = calloc (count, sizeof *self->statics);
    self->dns = self->n_dns ? calloc (self->n_dns, sizeof *self->dns) : NULL;
    if (!self->static_endpoints || !self->statics || (self->n_dns && !self->dns)) return ENOMEM;
    self->static_endpoints[0] = '\0';
    size_t d = 0;
    for (size_t i = 0; i < count; i++) {
        if (!client_is_dns (endpoints[i])) continue;
        char why[SIGCLIENT_ENDPOINT_MAX + 96];
        if (client_dns_parse (endpoints[i], self->dns[d].name, self->dns[d].port, why, sizeof why) != 0) return EINVAL;
        d++;
    }
    return 0;
}

/* The timeouts are the client's own: every send and every wait is given its bound. dns:// names
 * give IPv6 addresses too, and some of them may not answer: with them, requests go only to
 * connections that are up (sigclient.h). */
client_sock_t *client_socket_new (sigclient_t *self)
{
    const client_sock_opts_t opts = { .engine = self->engine, .curve = self->curve ? &self->curve_keys : NULL,
                                      .immediate = self->n_dns > 0, .zmq_ctx = self->ctx };
    client_sock_t *socket = client_sock_new (&opts);
    if (!socket) {
        int err = errno;
        client_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot make a socket: %s", client_sock_strerror (err));
        errno = err;
    }
    return socket;
}

/* KEYS: NULL, or the server's public key and the client's keys. */
static sigclient_t *s_new (const char *const *endpoints, size_t count, int timeout_ms, sigclient_engine_t engine,
                           const client_sock_keys_t *keys)
{
    if (!endpoints || count == 0 || (engine != SIGCLIENT_ENGINE_ZMTP && engine != SIGCLIENT_ENGINE_LIBZMQ)) {
        errno = EINVAL;
        return NULL;
    }
    for (size_t i = 0; i < count; i++)
        if (!endpoints[i] || !*endpoints[i]) { errno = EINVAL; return NULL; }
    sigclient_t *self = calloc (1, sizeof *self);
    if (!self) { errno = ENOMEM; return NULL; }
    self->engine = engine;
    self->next_request_id = 1;
    self->resolve_interval_ms = SIGCLIENT_DEFAULT_RESOLVE_MS;
    self->timeout_ms = timeout_ms > 0 ? timeout_ms : SIGCLIENT_DEFAULT_TIMEOUT_MS;
    if (keys) self->curve_keys = *keys;
    self->curve = keys != NULL;
    int err = s_take_endpoints (self, endpoints, count);
    if (!err && engine == SIGCLIENT_ENGINE_LIBZMQ && !(self->ctx = zmq_ctx_new ()))
        err = errno ? errno : ENOMEM;
    if (!err && !(self->socket = client_socket_new (self)))
        err = errno ? errno : ENOMEM;
    for (size_t i = 0; i < count && !err; i++) {
        if (client_is_dns (endpoints[i])) continue;
        char why[SIGCLIENT_ENDPOINT_MAX + 256];
        if (client_sock_connect (self->socket, endpoints[i], why, sizeof why) != 0
            || !(self->statics[self->n_static] = strdup (endpoints[i]))) {
            err = errno ? errno : ENOMEM;
            break;
        }
        if (self->n_static++) strcat (self->static_endpoints, ", ");
        strcat (self->static_endpoints, endpoints[i]);
    }
    if (!err) {
        client_resolve_all (self);
        if (!self->endpoints) err = ENOMEM;
    }
    if (err) {
        sigclient_destroy (&self);
        errno = err;
        return NULL;
    }
    client_reset (self);
    return self;
}

sigclient_t *sigclient_new (const char *const *endpoints, size_t count, int timeout_ms)
{
    return s_new (endpoints, count, timeout_ms, SIGCLIENT_ENGINE_ZMTP, NULL);
}

/* s_new with KEYS, erased once the sockets have their copies. */
static sigclient_t *s_new_erasing (const char *const *endpoints, size_t count, int timeout_ms,
                                   sigclient_engine_t engine, client_sock_keys_t *keys)
{
    sigclient_t *self = s_new (endpoints, count, timeout_ms, engine, keys);
    int err = errno;
    explicit_bzero (keys, sizeof *keys);
    errno = err;
    return self;
}

sigclient_t *sigclient_new_engine (const char *const *endpoints, size_t count, int timeout_ms,
                                   sigclient_engine_t engine, const sigclient_curve_keys_t *curve)
{
    client_sock_keys_t keys;
    if (!curve)
        return s_new (endpoints, count, timeout_ms, engine, NULL);
    if (client_sock_keys_decode (curve->server_public, curve->client_public, curve->client_secret, &keys) != 0)
        return NULL;
    return s_new_erasing (endpoints, count, timeout_ms, engine, &keys);
}

sigclient_t *sigclient_new_curve (const char *const *endpoints, size_t count, int timeout_ms,
                                  const char *server_key, const char *client_public, const char *client_secret)
{
    client_sock_keys_t keys;
    if (client_sock_keys_decode (server_key, client_public, client_secret, &keys) != 0)
        return NULL;
    return s_new_erasing (endpoints, count, timeout_ms, SIGCLIENT_ENGINE_ZMTP, &keys);
}

sigclient_engine_t sigclient_engine (const sigclient_t *self)
{
    return self ? self->engine : SIGCLIENT_ENGINE_ZMTP;
}

void sigclient_destroy (sigclient_t **self_p)
{
    if (!self_p || !*self_p) return;
    sigclient_t *self = *self_p;
    if (self->streams_destroy) self->streams_destroy (self);
    client_sock_destroy (&self->socket);
    if (self->ctx) zmq_ctx_term (self->ctx);   /* prompt: LINGER is 0 */
    explicit_bzero (&self->curve_keys, sizeof self->curve_keys);
    free (self->endpoints);
    free (self->static_endpoints);
    for (size_t i = 0; self->statics && i < self->n_static; i++) free (self->statics[i]);
    free (self->statics);
    free (self->dns);
    free (self->packbuf);
    free (self);
    *self_p = NULL;
}

int sigclient_set_timeout (sigclient_t *self, int timeout_ms)
{
    if (!self) { errno = EINVAL; return -1; }
    /* Every send and every wait, on any of the client's sockets, is given this bound when it starts. */
    self->timeout_ms = timeout_ms <= 0 ? SIGCLIENT_DEFAULT_TIMEOUT_MS : timeout_ms;
    return 0;
}

void sigclient_set_deadline_us (sigclient_t *self, uint32_t deadline_us)
{
    if (self) self->deadline_us = deadline_us;
}

int sigclient_set_retry (sigclient_t *self, int retries)
{
    if (!self) return -1;
    client_reset (self);
    if (retries < 0 || retries > SIGCLIENT_MAX_RETRY)
        return client_fail (self, SIGCLIENT_ERR_ARGUMENT, "retries: expected 0 to %d, got %d", SIGCLIENT_MAX_RETRY, retries);
    self->retries = retries;
    return 0;
}

void sigclient_set_resolve_interval (sigclient_t *self, int interval_ms)
{
    if (!self) return;
    self->resolve_interval_ms = interval_ms < 0 ? SIGCLIENT_DEFAULT_RESOLVE_MS : interval_ms;
    self->next_resolve_ns = client_now_ns () + (int64_t) self->resolve_interval_ms * 1000000;
}

const char *sigclient_endpoints (const sigclient_t *self)
{
    return self ? self->endpoints : "no client";
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

/* SOCKET's servers refused the client's security mechanism: what the socket layer says, and in
 * parentheses what to give libsigclient (sigclient.h, "Security mismatch"; sigclient_cli.c puts its
 * own options there). */
static int s_fail_security (sigclient_t *self, client_sock_t *socket)
{
    return client_fail (self, SIGCLIENT_ERR_SECURITY, "%s (%s)", client_sock_last_failure (socket),
                        self->curve ? "sigclient_new: no keys"
                                    : "sigclient_new_curve: the server's public key and this client's key pair");
}

/* Sends one frame on SOCKET (NAME: what it is connected to, for messages); no resolution here. */
static int s_send_on (sigclient_t *self, client_sock_t *socket, const char *name, const void *data, size_t len)
{
    if (len > self->largest_unanswered) self->largest_unanswered = len;
    const zmtp_frame_t frame = { data, len };
    if (client_sock_send (socket, &frame, 1, self->timeout_ms) == 0)
        return 0;
    if (errno == EPROTO)
        return s_fail_security (self, socket);
    if (errno == EAGAIN)
        return client_fail (self, SIGCLIENT_ERR_TIMEOUT, "timed out after %d ms sending to %s (send queue full)",
                            self->timeout_ms, name);
    return client_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot send to %s: %s", name, client_sock_strerror (errno));
}

/* Sends one frame on the round-robin socket, resolving dns:// names first when due. */
static int s_send_frame (sigclient_t *self, const void *data, size_t len)
{
    client_resolve_if_due (self);
    if (client_peer_count (self) == 0)
        return client_fail (self, SIGCLIENT_ERR_TRANSPORT, "no address to send to: %s", self->endpoints);
    return s_send_on (self, self->socket, self->endpoints, data, len);
}

/* Packs REQ into the client's buffer (grown only for a larger request than any before); its size
 * in *SIZE. */
static int s_pack (sigclient_t *self, const Sigserve__V1__Request *req, size_t *size)
{
    *size = sigserve__v1__request__get_packed_size (req);
    if (*size > self->packcap) {
        size_t cap = self->packcap ? self->packcap : 256;
        while (cap < *size) cap = cap > SIZE_MAX / 2 ? *size : cap * 2;
        uint8_t *buf = realloc (self->packbuf, cap);
        if (!buf)
            return client_fail (self, SIGCLIENT_ERR_NOMEM, "cannot allocate %zu bytes for a request", *size);
        self->packbuf = buf;
        self->packcap = cap;
    }
    size_t packed = sigserve__v1__request__pack (req, self->packbuf);
    if (packed != *size)
        return client_fail (self, SIGCLIENT_ERR_PROTOCOL, "packed %zu bytes, expected %zu", packed, *size);
    return 0;
}

static int s_send_request (sigclient_t *self, const Sigserve__V1__Request *req)
{
    size_t size;
    if (s_pack (self, req, &size) != 0) return -1;
    return s_send_frame (self, self->packbuf, size);
}

/* SOCKET NULL: the round-robin socket (resolving first when due). */
int client_send_infer_on (sigclient_t *self, client_sock_t *socket, const char *name, const client_infer_args_t *args,
                          uint64_t *request_id)
{
    if (!args->model)
        return client_fail (self, SIGCLIENT_ERR_ARGUMENT, "no model name");
    if (!args->features && args->n_features)
        return client_fail (self, SIGCLIENT_ERR_ARGUMENT, "features is NULL but n_features is %zu", args->n_features);
    if (args->n_features > SIZE_MAX / (2 * sizeof (float)))
        return client_fail (self, SIGCLIENT_ERR_ARGUMENT, "%zu features is too many", args->n_features);
    Sigserve__V1__InferRequest infer = SIGSERVE__V1__INFER_REQUEST__INIT;
    infer.request_id = self->next_request_id;
    infer.model = (char *) args->model;           /* packing only reads them */
    infer.features = (float *) args->features;
    infer.n_features = args->n_features;
    infer.rows = args->rows;
    infer.deadline_us = args->deadline_us;
    infer.stream_id = args->stream_id;
    infer.step = args->step;
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
    req.infer = &infer;
    size_t size;
    if (s_pack (self, &req, &size) != 0) return -1;
    if ((socket ? s_send_on (self, socket, name, self->packbuf, size) : s_send_frame (self, self->packbuf, size)) != 0)
        return -1;
    self->next_request_id++;
    if (request_id) *request_id = infer.request_id;
    return 0;
}

static int s_send_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                         uint32_t rows, uint32_t deadline_us, uint64_t *request_id)
{
    const client_infer_args_t args = { .model = model, .features = features, .n_features = n_features,
                                       .rows = rows, .deadline_us = deadline_us };
    return client_send_infer_on (self, NULL, NULL, &args, request_id);
}

/* ---- receiving ---- */

static const char *s_name (const sigclient_t *self, const char *name)
{
    return name ? name : self->endpoints;
}

/* Receives one frame from SOCKET into self->frame (a view, valid until SOCKET's next receive),
 * waiting at most until DEADLINE_NS. RESOLVE: dns:// names are resolved when due during a long
 * wait (the round-robin socket only). NAME: what SOCKET is connected to, for messages; NULL for
 * self->endpoints, read afresh at each use (a resolution rewrites it). */
static int s_recv_on (sigclient_t *self, client_sock_t *socket, const char *name, int64_t deadline_ns, bool resolve)
{
    while (true) {
        /* A long wait still resolves dns:// names on time: wait up to when they are due. */
        int64_t wait_ns = deadline_ns - client_now_ns ();
        if (resolve) {
            client_resolve_if_due (self);
            if (self->n_dns && self->resolve_interval_ms > 0 && self->next_resolve_ns - client_now_ns () < wait_ns)
                wait_ns = self->next_resolve_ns - client_now_ns ();
        }
        if (wait_ns < 0) wait_ns = 0;
        zmtp_msg_t msg;
        int rc = client_sock_recv (socket, &msg, (int) ((wait_ns + 999999) / 1000000));
        if (rc > 0) {
            self->largest_unanswered = 0;
            if (msg.total_frames != 1)
                return client_fail (self, SIGCLIENT_ERR_PROTOCOL, "a reply of %zu frames from %s, expected one",
                                    msg.total_frames, s_name (self, name));
            self->frame = msg.frames[0];
            return 0;
        }
        if (rc < 0 && errno == EPROTO)
            return s_fail_security (self, socket);
        if (rc < 0)
            return client_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot receive from %s: %s", s_name (self, name),
                                client_sock_strerror (errno));
        if (client_now_ns () < deadline_ns)
            continue;
        if (self->largest_unanswered > S_SERVER_DEFAULT_MAX_MESSAGE)
            return client_fail (self, SIGCLIENT_ERR_TIMEOUT, "timed out after %d ms waiting for a reply from %s "
                                "(a request was %zu bytes: a server drops requests over its max_message_bytes, "
                                "%d by default, without a reply)", self->timeout_ms, s_name (self, name),
                                self->largest_unanswered, S_SERVER_DEFAULT_MAX_MESSAGE);
        return client_fail (self, SIGCLIENT_ERR_TIMEOUT, "timed out after %d ms waiting for a reply from %s%s",
                            self->timeout_ms, s_name (self, name),
                            self->curve ? " (CURVE: a server that does not allow this client's key, or whose "
                                          "key is not the one given, never answers)" : "");
    }
}

static int s_recv_frame (sigclient_t *self, int64_t deadline_ns)
{
    return s_recv_on (self, self->socket, NULL, deadline_ns, true);
}

int client_recv_reply_on (sigclient_t *self, client_sock_t *socket, const char *name, int64_t deadline_ns,
                          bool resolve, reply_t **reply_p)
{
    if (s_recv_on (self, socket, name, deadline_ns, resolve) != 0) return -1;
    if (!name) name = self->endpoints;      /* no resolution from here on */
    size_t size = self->frame.size;
    reply_t *reply = sigserve__v1__reply__unpack (NULL, size, self->frame.data);
    if (!reply)
        return client_fail (self, SIGCLIENT_ERR_PROTOCOL, "cannot decode a reply of %zu bytes from %s", size, name);
    if (reply->body_case == SIGSERVE__V1__REPLY__BODY__NOT_SET) {
        sigserve__v1__reply__free_unpacked (reply, NULL);
        return client_fail (self, SIGCLIENT_ERR_PROTOCOL, "a reply with no body from %s", name);
    }
    *reply_p = reply;
    return 0;
}

/* Receives and decodes one Reply from the round-robin socket; the caller frees *REPLY_P. */
static int s_recv_reply (sigclient_t *self, int64_t deadline_ns, reply_t **reply_p)
{
    return client_recv_reply_on (self, self->socket, NULL, deadline_ns, true, reply_p);
}

int64_t client_deadline (const sigclient_t *self)
{
    return client_now_ns () + (int64_t) self->timeout_ms * 1000000;
}

/* The server's answer to a request it could not read carries request_id 0; ours start at 1. */
bool client_is_rejection (const reply_t *reply)
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
        return client_fail (self, status, "server replied status %d: %s", status, text);
    return client_fail (self, status, "server replied %s: %s", name, text);
}

/* Fills RESULT and copies the outputs of an OK reply. STATUS_IS_FAILURE: a server error status
 * fails the call (synchronous API) rather than being reported in RESULT alone (pipelined API). */
int client_take_infer (sigclient_t *self, const infer_reply_t *rep, float *outputs, size_t cap, size_t *n_outputs,
                       sigclient_result_t *result, bool status_is_failure)
{
    if (result) {
        result->attempts = 1;
        result->request_id = rep->request_id;
        result->status = (int) rep->status;
        result->rows = rep->rows;
        result->queue_ns = rep->queue_ns;
        result->compute_ns = rep->compute_ns;
        result->server_ns = rep->server_ns;
        s_copy_string (result->model_version, sizeof result->model_version, rep->model_version);
        s_copy_string (result->backend, sizeof result->backend, rep->backend);
        s_copy_string (result->error, sizeof result->error, rep->error);
    }
    if (rep->status != SIGSERVE__V1__STATUS__STATUS_OK) {
        if (n_outputs) *n_outputs = 0;
        return status_is_failure ? s_fail_status (self, rep) : 0;
    }
    if (n_outputs) *n_outputs = rep->n_outputs;
    if (rep->n_outputs > cap || (rep->n_outputs && !outputs))
        return client_fail (self, SIGCLIENT_ERR_CAPACITY,
                       "the reply to request %llu has %zu outputs, more than the buffer's %zu",
                       (unsigned long long) rep->request_id, rep->n_outputs, outputs ? cap : 0);
    if (rep->n_outputs) memcpy (outputs, rep->outputs, rep->n_outputs * sizeof (float));
    return 0;
}

/* ---- the API ---- */

/* Says how many attempts a failure took, when more than one. */
static int s_after_attempts (sigclient_t *self, uint32_t attempts)
{
    if (attempts > 1) {
        size_t used = strlen (self->error);
        snprintf (self->error + used, sizeof self->error - used, " (after %u attempts)", attempts);
    }
    return -1;
}

/* A call's retries (sigclient_set_retry): whether a failed receive may be tried again (a timeout,
 * with retries left), and the next attempt: SEND (ARG) again, counted, its wait started anew. 0, or
 * -1 when the send failed (the call ends with that error). */
typedef int (*resend_fn) (sigclient_t *self, const void *arg);
static bool s_may_retry (const sigclient_t *self, uint32_t attempts)
{
    return self->status == SIGCLIENT_ERR_TIMEOUT && attempts <= (uint32_t) self->retries;
}
static int s_attempt_again (sigclient_t *self, resend_fn send, const void *arg, uint32_t *attempts, int64_t *deadline)
{
    if (send (self, arg) != 0)
        return s_after_attempts (self, *attempts);
    (*attempts)++;
    *deadline = client_deadline (self);
    return 0;
}
static int s_resend_infer (sigclient_t *self, const void *args)
{
    return client_send_infer_on (self, NULL, NULL, args, NULL);
}
static int s_resend_request (sigclient_t *self, const void *req) { return s_send_request (self, req); }

int sigclient_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                     uint32_t rows, float *outputs, size_t out_capacity, size_t *n_outputs,
                     sigclient_result_t *result)
{
    if (!self) return -1;
    client_reset (self);
    /* Attempt k has request id first + k: ids are consecutive within one call, so "a reply to any
     * of this call's attempts" is a range. */
    const client_infer_args_t args = { .model = model, .features = features, .n_features = n_features,
                                       .rows = rows, .deadline_us = self->deadline_us };
    uint64_t first = 0;
    if (client_send_infer_on (self, NULL, NULL, &args, &first) != 0) return -1;
    uint32_t attempts = 1;
    int64_t deadline = client_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        if (s_recv_reply (self, deadline, &reply) != 0) {
            if (!s_may_retry (self, attempts))
                return s_after_attempts (self, attempts);
            client_reset (self);
            if (s_attempt_again (self, s_resend_infer, &args, &attempts, &deadline) != 0) return -1;
            continue;
        }
        bool ours = reply->body_case == SIGSERVE__V1__REPLY__BODY_INFER
                    && reply->infer->request_id >= first && reply->infer->request_id < first + attempts;
        bool unavailable = ours && reply->infer->status == SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE;
        if (unavailable && reply->infer->request_id != first + attempts - 1) {
            sigserve__v1__reply__free_unpacked (reply, NULL);    /* an earlier attempt's: a later one is out */
            continue;
        }
        if (unavailable && attempts <= (uint32_t) self->retries) {
            sigserve__v1__reply__free_unpacked (reply, NULL);
            if (s_attempt_again (self, s_resend_infer, &args, &attempts, &deadline) != 0) return -1;
            continue;
        }
        if (ours || client_is_rejection (reply)) {
            int rc = client_take_infer (self, reply->infer, outputs, out_capacity, n_outputs, result, true);
            sigserve__v1__reply__free_unpacked (reply, NULL);
            if (result) result->attempts = attempts;
            return rc == 0 ? 0 : s_after_attempts (self, attempts);
        }
        sigserve__v1__reply__free_unpacked (reply, NULL);   /* late reply to an earlier call */
    }
}

int sigclient_send_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                          uint32_t rows, uint32_t deadline_us, uint64_t *request_id)
{
    if (!self) return -1;
    client_reset (self);
    return s_send_infer (self, model, features, n_features, rows, deadline_us, request_id);
}

int sigclient_recv_infer (sigclient_t *self, float *outputs, size_t out_capacity, size_t *n_outputs,
                          sigclient_result_t *result)
{
    if (!self) return -1;
    client_reset (self);
    if (!result) return client_fail (self, SIGCLIENT_ERR_ARGUMENT, "no result to fill");
    int64_t deadline = client_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        if (s_recv_reply (self, deadline, &reply) != 0) return -1;
        if (reply->body_case == SIGSERVE__V1__REPLY__BODY_INFER) {
            int rc = client_take_infer (self, reply->infer, outputs, out_capacity, n_outputs, result, false);
            sigserve__v1__reply__free_unpacked (reply, NULL);
            return rc;
        }
        sigserve__v1__reply__free_unpacked (reply, NULL);   /* late health or list reply */
    }
}

/* Sends REQ and waits for a Reply with body WANT; discards late replies to earlier calls. Sends
 * again on a timeout, up to self->retries times. */
static int s_call (sigclient_t *self, const Sigserve__V1__Request *req, Sigserve__V1__Reply__BodyCase want,
                   reply_t **reply_p)
{
    if (s_send_request (self, req) != 0) return -1;
    uint32_t attempts = 1;
    int64_t deadline = client_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        if (s_recv_reply (self, deadline, &reply) != 0) {
            if (!s_may_retry (self, attempts))
                return s_after_attempts (self, attempts);
            client_reset (self);
            if (s_attempt_again (self, s_resend_request, req, &attempts, &deadline) != 0) return -1;
            continue;
        }
        if (reply->body_case == want) {
            *reply_p = reply;
            return 0;
        }
        if (client_is_rejection (reply)) {
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
    client_reset (self);
    if (!out) return client_fail (self, SIGCLIENT_ERR_ARGUMENT, "no health struct to fill");
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
    client_reset (self);
    if (cap && !models) return client_fail (self, SIGCLIENT_ERR_ARGUMENT, "models is NULL but cap is %zu", cap);
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
        s_copy_string (o->type, sizeof o->type, m->type);
        o->window = m->window;
        o->step_size = m->step_size;
    }
    sigserve__v1__reply__free_unpacked (reply, NULL);
    if (count) *count = total;
    if (total > cap)
        return client_fail (self, SIGCLIENT_ERR_CAPACITY, "the server has %zu models, more than the buffer's %zu",
                       total, cap);
    return 0;
}

int sigclient_send_raw (sigclient_t *self, const void *payload, size_t len)
{
    if (!self) return -1;
    client_reset (self);
    if (!payload && len) return client_fail (self, SIGCLIENT_ERR_ARGUMENT, "payload is NULL but len is %zu", len);
    return s_send_frame (self, payload, len);
}

int sigclient_recv_raw (sigclient_t *self, void *buf, size_t cap, size_t *len)
{
    if (!self) return -1;
    client_reset (self);
    if (s_recv_frame (self, client_deadline (self)) != 0) return -1;
    size_t size = self->frame.size;
    if (len) *len = size;
    if (size > cap || (size && !buf))
        return client_fail (self, SIGCLIENT_ERR_CAPACITY, "a frame of %zu bytes, more than the buffer's %zu",
                       size, buf ? cap : 0);
    if (size) memcpy (buf, self->frame.data, size);
    return 0;
}
