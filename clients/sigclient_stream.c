/* libsigclient: LSTM streams (sigclient_infer_stream, sigclient_stream_t; sigclient.h says what
 * they promise). A stream is routed once, to one address, and its steps go on a DEALER (of the
 * client's engine) connected to that address alone: one connection keeps order, so the steps reach
 * the server in the order sent, and no round-robin can move them. Routes live in a small
 * open-addressing table keyed by stream id; the per-address sockets are opened when the first
 * stream is routed to their address and closed when the address vanishes (the streams routed
 * there then fail, never move). */
#include "sigclient_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *endpoint;             /* the one address it connects to */
    client_sock_t *socket;      /* DEALER connected there; NULL once the address vanished */
    bool gone;                  /* vanished from its dns:// name: its streams fail, never move */
} s_peer_t;

typedef struct {
    uint64_t stream_id;         /* 0: an empty slot (stream_id 0 is not a stream) */
    uint32_t peer;              /* index in peers */
} s_route_t;

struct client_streams {
    s_peer_t *peers;            /* every address a stream was routed to, in order of first use */
    size_t n_peers, cap_peers;
    s_route_t *routes;          /* linear probing; the capacity a power of two, at most half full */
    size_t n_routes, cap_routes;
};

struct _sigclient_stream_t {
    sigclient_t *client;        /* borrowed */
    char *model;
    uint64_t stream_id;
    uint64_t next_step;         /* the number the next step carries; 0: steps go unnumbered */
};

/* splitmix64's finalizer: consecutive stream ids spread over the addresses (the Python client's
 * _mix64 is the same function, so both route a stream id alike). */
static uint64_t s_mix64 (uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void s_streams_refresh (sigclient_t *self);
static void s_streams_destroy (sigclient_t *self);

/* The client's streams, made with the first stream call; from then on the client tells them of
 * each resolution and frees them when it is destroyed (its hooks). */
static client_streams_t *s_streams (sigclient_t *self)
{
    if (self->streams) return self->streams;
    if (!(self->streams = calloc (1, sizeof *self->streams))) {
        client_fail (self, SIGCLIENT_ERR_NOMEM, "cannot allocate the streams' table");
        return NULL;
    }
    self->streams_refresh = s_streams_refresh;
    self->streams_destroy = s_streams_destroy;
    return self->streams;
}

/* The slot of STREAM_ID, or of the empty slot where it would go. */
static size_t s_slot (const client_streams_t *st, uint64_t stream_id)
{
    size_t mask = st->cap_routes - 1, i = (size_t) s_mix64 (stream_id) & mask;
    while (st->routes[i].stream_id && st->routes[i].stream_id != stream_id) i = (i + 1) & mask;
    return i;
}

static const s_route_t *s_route_find (const client_streams_t *st, uint64_t stream_id)
{
    if (st->n_routes == 0) return NULL;
    const s_route_t *r = &st->routes[s_slot (st, stream_id)];
    return r->stream_id ? r : NULL;
}

static int s_route_add (sigclient_t *self, client_streams_t *st, uint64_t stream_id, uint32_t peer)
{
    if (2 * (st->n_routes + 1) > st->cap_routes) {
        size_t cap = st->cap_routes ? 2 * st->cap_routes : 64;
        s_route_t *old = st->routes, *fresh = calloc (cap, sizeof *fresh);
        if (!fresh) return client_fail (self, SIGCLIENT_ERR_NOMEM, "cannot grow the streams' table to %zu", cap);
        size_t old_cap = st->cap_routes;
        st->routes = fresh;
        st->cap_routes = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].stream_id) st->routes[s_slot (st, old[i].stream_id)] = old[i];
        free (old);
    }
    st->routes[s_slot (st, stream_id)] = (s_route_t) { .stream_id = stream_id, .peer = peer };
    st->n_routes++;
    return 0;
}

/* Backward-shift deletion: the entries after the hole that probed past it move into it. */
static void s_route_remove (client_streams_t *st, uint64_t stream_id)
{
    if (st->n_routes == 0) return;
    size_t mask = st->cap_routes - 1, hole = s_slot (st, stream_id);
    if (!st->routes[hole].stream_id) return;
    st->n_routes--;
    for (size_t i = (hole + 1) & mask; st->routes[i].stream_id; i = (i + 1) & mask) {
        size_t home = (size_t) s_mix64 (st->routes[i].stream_id) & mask;
        /* it may fill the hole when its home is not in (hole, i] (cyclically) */
        bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (stays) continue;
        st->routes[hole] = st->routes[i];
        hole = i;
    }
    st->routes[hole] = (s_route_t) { 0 };
}

/* The live peer for ENDPOINT, made (socket connected) when there is none yet; its index, or -1. */
static long s_peer_for (sigclient_t *self, client_streams_t *st, const char *endpoint)
{
    for (size_t i = 0; i < st->n_peers; i++)
        if (!st->peers[i].gone && strcmp (st->peers[i].endpoint, endpoint) == 0) return (long) i;
    if (st->n_peers == st->cap_peers) {
        size_t cap = st->cap_peers ? 2 * st->cap_peers : 8;
        s_peer_t *grown = realloc (st->peers, cap * sizeof *grown);
        if (!grown) return client_fail (self, SIGCLIENT_ERR_NOMEM, "cannot grow the streams' peers to %zu", cap);
        st->peers = grown;
        st->cap_peers = cap;
    }
    s_peer_t peer = { .endpoint = strdup (endpoint) };
    if (!peer.endpoint) return client_fail (self, SIGCLIENT_ERR_NOMEM, "cannot copy an endpoint");
    if (!(peer.socket = client_socket_new (self))) {
        free (peer.endpoint);
        return -1;
    }
    char why[SIGCLIENT_ENDPOINT_MAX + 256];
    if (client_sock_connect (peer.socket, endpoint, why, sizeof why) != 0) {
        client_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot connect a stream socket to %s: %s", endpoint,
                     client_sock_strerror (errno));
        client_sock_destroy (&peer.socket);
        free (peer.endpoint);
        return -1;
    }
    st->peers[st->n_peers] = peer;
    return (long) st->n_peers++;
}

/* STREAM_ID's peer: its route, or a new one to address mix64 (id) mod N of the current ones. */
static s_peer_t *s_route (sigclient_t *self, uint64_t stream_id)
{
    client_streams_t *st = s_streams (self);
    if (!st) return NULL;
    const s_route_t *r = s_route_find (st, stream_id);
    if (r) return &st->peers[r->peer];
    size_t n = client_addresses (self, NULL, 0);
    if (n == 0) {
        client_fail (self, SIGCLIENT_ERR_TRANSPORT, "no address to send stream %llu to: %s",
                     (unsigned long long) stream_id, self->endpoints);
        return NULL;
    }
    const char **addresses = malloc (n * sizeof *addresses);
    if (!addresses) {
        client_fail (self, SIGCLIENT_ERR_NOMEM, "cannot list %zu addresses", n);
        return NULL;
    }
    client_addresses (self, addresses, n);
    long peer = s_peer_for (self, st, addresses[s_mix64 (stream_id) % n]);
    free (addresses);
    if (peer < 0 || s_route_add (self, st, stream_id, (uint32_t) peer) != 0) return NULL;
    return &st->peers[peer];
}

/* After a resolution: streams routed to an address no longer listed lose their socket. */
static void s_streams_refresh (sigclient_t *self)
{
    client_streams_t *st = self->streams;
    if (!st) return;
    size_t n = client_addresses (self, NULL, 0);
    const char **addresses = malloc ((n ? n : 1) * sizeof *addresses);
    if (!addresses) return;     /* no memory: keep the sockets, as a failed resolution does */
    client_addresses (self, addresses, n);
    for (size_t i = 0; i < st->n_peers; i++) {
        s_peer_t *p = &st->peers[i];
        bool listed = false;
        for (size_t k = 0; k < n && !listed; k++) listed = strcmp (addresses[k], p->endpoint) == 0;
        if (listed || p->gone) continue;
        /* Its streams' state is on that server: they fail from now on rather than move. */
        p->gone = true;
        client_sock_destroy (&p->socket);
    }
    free (addresses);
}

static void s_streams_destroy (sigclient_t *self)
{
    client_streams_t *st = self->streams;
    if (!st) return;
    for (size_t i = 0; i < st->n_peers; i++) {
        client_sock_destroy (&st->peers[i].socket);
        free (st->peers[i].endpoint);
    }
    free (st->peers);
    free (st->routes);
    free (st);
    self->streams = NULL;
    self->streams_refresh = NULL;
    self->streams_destroy = NULL;
}

/* ---- the API ---- */

const char *sigclient_stream_endpoint (sigclient_t *self, uint64_t stream_id)
{
    if (!self) return NULL;
    client_reset (self);
    if (stream_id == 0) {
        client_fail (self, SIGCLIENT_ERR_ARGUMENT, "stream_id 0 is not a stream");
        return NULL;
    }
    client_resolve_if_due (self);
    s_peer_t *peer = s_route (self, stream_id);
    return peer ? peer->endpoint : NULL;
}

void sigclient_forget_stream (sigclient_t *self, uint64_t stream_id)
{
    if (self && self->streams && stream_id) s_route_remove (self->streams, stream_id);
}

int sigclient_infer_stream (sigclient_t *self, const char *model, uint64_t stream_id, uint64_t step,
                            const float *features, size_t n_features, float *outputs, size_t out_capacity,
                            size_t *n_outputs, sigclient_result_t *result)
{
    if (!self) return -1;
    client_reset (self);
    if (stream_id == 0)
        return client_fail (self, SIGCLIENT_ERR_ARGUMENT,
                            "stream_id 0 is not a stream (a whole window goes with sigclient_infer)");
    client_resolve_if_due (self);
    s_peer_t *peer = s_route (self, stream_id);
    if (!peer) return -1;
    if (peer->gone)
        return client_fail (self, SIGCLIENT_ERR_STREAM_GONE,
                            "stream %llu: its server %s is no longer listed (%s) and the stream's state went with "
                            "it; sigclient_forget_stream, then start the stream again from step 1",
                            (unsigned long long) stream_id, peer->endpoint, self->endpoints);
    const client_infer_args_t args = { .model = model, .features = features, .n_features = n_features,
                                       .deadline_us = self->deadline_us, .stream_id = stream_id, .step = step };
    uint64_t id = 0;
    if (client_send_infer_on (self, peer->socket, peer->endpoint, &args, &id) != 0) return -1;
    int64_t deadline = client_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        /* no resolution while waiting: it could close this very socket */
        if (client_recv_reply_on (self, peer->socket, peer->endpoint, deadline, false, &reply) != 0) {
            if (self->status == SIGCLIENT_ERR_TIMEOUT) {
                size_t used = strlen (self->error);
                snprintf (self->error + used, sizeof self->error - used,
                          " (stream %llu, step %llu: stream steps are never retried; it may have been applied)",
                          (unsigned long long) stream_id, (unsigned long long) step);
            }
            return -1;
        }
        bool ours = reply->body_case == SIGSERVE__V1__REPLY__BODY_INFER && reply->infer->request_id == id;
        if (ours || client_is_rejection (reply)) {
            int rc = client_take_infer (self, reply->infer, outputs, out_capacity, n_outputs, result, true);
            sigserve__v1__reply__free_unpacked (reply, NULL);
            return rc;
        }
        sigserve__v1__reply__free_unpacked (reply, NULL);   /* a late reply to a step that timed out */
    }
}

/* ---- the numbering helper ---- */

sigclient_stream_t *sigclient_stream_new (sigclient_t *client, const char *model, uint64_t stream_id)
{
    if (!client || !model || stream_id == 0) {
        errno = EINVAL;
        return NULL;
    }
    sigclient_stream_t *self = calloc (1, sizeof *self);
    if (self) self->model = strdup (model);
    if (!self || !self->model) {
        free (self);
        errno = ENOMEM;
        return NULL;
    }
    self->client = client;
    self->stream_id = stream_id;
    self->next_step = 1;
    return self;
}

void sigclient_stream_destroy (sigclient_stream_t **self_p)
{
    if (!self_p || !*self_p) return;
    free ((*self_p)->model);
    free (*self_p);
    *self_p = NULL;
}

int sigclient_stream_step (sigclient_stream_t *self, const float *features, size_t n_features, float *outputs,
                           size_t out_capacity, size_t *n_outputs, sigclient_result_t *result)
{
    if (!self) return -1;
    int rc = sigclient_infer_stream (self->client, self->model, self->stream_id, self->next_step, features,
                                     n_features, outputs, out_capacity, n_outputs, result);
    /* Applied: answered OK (the outputs not fitting the buffer is the caller's side of it). */
    bool applied = rc == 0 || sigclient_last_status (self->client) == SIGCLIENT_ERR_CAPACITY;
    if (applied && self->next_step) self->next_step++;
    return rc;
}

uint64_t sigclient_stream_next_step (const sigclient_stream_t *self)
{
    return self ? self->next_step : 0;
}

void sigclient_stream_set_next_step (sigclient_stream_t *self, uint64_t step)
{
    if (self) self->next_step = step;
}
