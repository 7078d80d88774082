/* The clients' socket layer (sigclient_sock.h): a zmtp_dealer_t or a libzmq DEALER behind one type. */
#include "sigclient_sock.h"
#include "zmtp_curve.h"
#include "zmtp_dealer.h"
#include "zmtp_probe.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

/* zmtp: a connection that keeps failing is tried again after 100 ms, doubling up to this: an
 * endpoint that comes back is found within a second, as libzmq's fixed 100 ms finds it, without a
 * connect every 100 ms to a name that stays down. */
#define S_SOCK_RECONNECT_MAX_MS 1000

/* libzmq: an endpoint connected, and whether its server refused the socket's security mechanism
 * (then it is disconnected, and connected again by a send after S_SOCK_RECONNECT_MAX_MS, as the zmtp
 * dealer does). */
typedef struct {
    char *endpoint;
    bool refused;
    int64_t retry_at;
    int64_t probe_at;       /* a handshake that failed without detail is looked into again from then */
} s_sock_endpoint_t;

/* libzmq: how long a look at a server's greeting may take (zmtp_probe.h), on a failure only */
#define S_SOCK_PROBE_MS 250

struct client_sock {
    sigclient_engine_t engine;
    zmtp_dealer_t *dealer;                  /* zmtp */
    void *zsock;                            /* libzmq: the DEALER */
    void *own_ctx;                          /* libzmq: the context made here when the caller gave none */
    int fd;                                 /* libzmq: ZMQ_FD */
    bool msgs;                              /* libzmq: frames[] and spare are initialised */
    zmq_msg_t frames[ZMTP_MSG_FRAMES];      /* libzmq: the last message's frames (libzmq reuses them) */
    zmq_msg_t spare;                        /* libzmq: frames past ZMTP_MSG_FRAMES, dropped */
    void *monitor;                          /* libzmq: a PAIR taking the DEALER's handshake failures */
    bool curve;                             /* libzmq: CURVE keys set (what a mismatch means) */
    s_sock_endpoint_t *endpoints;           /* libzmq: those connected */
    size_t n_endpoints;
    char failure[SIGCLIENT_ENDPOINT_MAX + 128];     /* libzmq: the last refusal in words */
};

static int64_t s_sock_now_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int s_sock_zmtp_open (client_sock_t *self, const client_sock_opts_t *opts)
{
    zmtp_keypair_t keys;
    zmtp_dealer_opts_t o = { .mechanism = ZMTP_MECH_NULL, .reconnect_max_ms = S_SOCK_RECONNECT_MAX_MS };
    if (opts->curve) {
        memcpy (keys.public_key, opts->curve->client_public, sizeof keys.public_key);
        memcpy (keys.secret_key, opts->curve->client_secret, sizeof keys.secret_key);
        o.mechanism = ZMTP_MECH_CURVE;
        o.curve_keys = &keys;
        o.curve_server_key = opts->curve->server_public;
    }
    errno = 0;
    self->dealer = zmtp_dealer_new (&o);    /* copies the keys */
    explicit_bzero (&keys, sizeof keys);
    if (!self->dealer && !errno)
        errno = ENOMEM;
    return self->dealer ? 0 : -1;
}

static int s_sock_zmq_open (client_sock_t *self, const client_sock_opts_t *opts)
{
    for (int f = 0; f < ZMTP_MSG_FRAMES; f++)
        zmq_msg_init (&self->frames[f]);
    zmq_msg_init (&self->spare);
    self->msgs = true;
    void *ctx = opts->zmq_ctx;
    if (!ctx && !(ctx = self->own_ctx = zmq_ctx_new ()))
        return -1;
    if (!(self->zsock = zmq_socket (ctx, ZMQ_DEALER)))
        return -1;
    int linger = 0, on = 1;
    if (zmq_setsockopt (self->zsock, ZMQ_LINGER, &linger, sizeof linger) != 0)
        return -1;
    if (opts->hwm > 0
        && (zmq_setsockopt (self->zsock, ZMQ_SNDHWM, &opts->hwm, sizeof opts->hwm) != 0
            || zmq_setsockopt (self->zsock, ZMQ_RCVHWM, &opts->hwm, sizeof opts->hwm) != 0))
        return -1;
    /* CURVE keys go before any connect: a connection takes the mechanism it is made with. */
    const size_t key = CLIENT_SOCK_KEY_BYTES;
    if (opts->curve
        && (zmq_setsockopt (self->zsock, ZMQ_CURVE_SERVERKEY, opts->curve->server_public, key) != 0
            || zmq_setsockopt (self->zsock, ZMQ_CURVE_PUBLICKEY, opts->curve->client_public, key) != 0
            || zmq_setsockopt (self->zsock, ZMQ_CURVE_SECRETKEY, opts->curve->client_secret, key) != 0))
        return -1;
    if (opts->immediate
        && (zmq_setsockopt (self->zsock, ZMQ_IPV6, &on, sizeof on) != 0
            || zmq_setsockopt (self->zsock, ZMQ_IMMEDIATE, &on, sizeof on) != 0))
        return -1;
    /* A server that refuses our security mechanism says so in its greeting: libzmq gives up on the
     * endpoint (a protocol error is not retried) and tells only a monitor, which is how a call can
     * fail at once, saying why, instead of timing out. */
    static atomic_uint s_monitors;
    char name[64];
    snprintf (name, sizeof name, "inproc://sigclient-handshakes-%u", atomic_fetch_add (&s_monitors, 1));
    self->curve = opts->curve != NULL;
    if (zmq_socket_monitor (self->zsock, name, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0
        || !(self->monitor = zmq_socket (ctx, ZMQ_PAIR))
        || zmq_setsockopt (self->monitor, ZMQ_LINGER, &linger, sizeof linger) != 0
        || zmq_connect (self->monitor, name) != 0)
        return -1;
    size_t len = sizeof self->fd;
    return zmq_getsockopt (self->zsock, ZMQ_FD, &self->fd, &len);
}

client_sock_t *client_sock_new (const client_sock_opts_t *opts)
{
    if (!opts || (opts->engine != SIGCLIENT_ENGINE_ZMTP && opts->engine != SIGCLIENT_ENGINE_LIBZMQ)) {
        errno = EINVAL;
        return NULL;
    }
    client_sock_t *self = calloc (1, sizeof *self);
    if (!self) {
        errno = ENOMEM;
        return NULL;
    }
    self->engine = opts->engine;
    self->fd = -1;
    int rc = self->engine == SIGCLIENT_ENGINE_ZMTP ? s_sock_zmtp_open (self, opts) : s_sock_zmq_open (self, opts);
    if (rc != 0) {
        int e = errno ? errno : ENOMEM;
        client_sock_destroy (&self);
        errno = e;
    }
    return self;
}

void client_sock_destroy (client_sock_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    client_sock_t *self = *self_p;
    zmtp_dealer_destroy (&self->dealer);
    if (self->msgs) {
        for (int f = 0; f < ZMTP_MSG_FRAMES; f++)
            zmq_msg_close (&self->frames[f]);
        zmq_msg_close (&self->spare);
    }
    if (self->monitor)
        zmq_close (self->monitor);
    if (self->zsock)
        zmq_close (self->zsock);
    for (size_t i = 0; i < self->n_endpoints; i++)
        free (self->endpoints[i].endpoint);
    free (self->endpoints);
    if (self->own_ctx)
        zmq_ctx_term (self->own_ctx);      /* prompt: LINGER is 0 */
    free (self);
    *self_p = NULL;
}

sigclient_engine_t client_sock_engine (const client_sock_t *self)
{
    return self->engine;
}

/* libzmq refuses a tcp:// endpoint that is not HOST:PORT when it is connected; the zmtp dealer
 * would only fail at each attempt, forever: refuse it here alike. */
static int s_sock_check_endpoint (const char *endpoint, char *err, size_t errlen)
{
    if (strncmp (endpoint, "ipc://", 6) == 0 && endpoint[6] == '\0') {
        snprintf (err, errlen, "%s: expected ipc://PATH", endpoint);
        return -1;
    }
    if (strncmp (endpoint, "tcp://", 6) != 0)
        return 0;
    const char *host = endpoint + 6, *colon = strrchr (host, ':');
    char *end = NULL;
    long port = colon && colon[1] >= '0' && colon[1] <= '9' ? strtol (colon + 1, &end, 10) : 0;
    if (!colon || colon == host || !end || *end || port < 1 || port > 65535) {
        snprintf (err, errlen, "%s: expected tcp://HOST:PORT with a port from 1 to 65535", endpoint);
        return -1;
    }
    return 0;
}

int client_sock_connect (client_sock_t *self, const char *endpoint, char *err, size_t errlen)
{
    if (self->engine == SIGCLIENT_ENGINE_ZMTP) {
        if (s_sock_check_endpoint (endpoint, err, errlen) != 0) {
            errno = EINVAL;
            return -1;
        }
        return zmtp_dealer_connect (self->dealer, endpoint, err, errlen);
    }
    s_sock_endpoint_t *more = realloc (self->endpoints, (self->n_endpoints + 1) * sizeof *more);
    char *copy = strdup (endpoint);
    if (more)
        self->endpoints = more;
    if (!more || !copy) {
        free (copy);
        snprintf (err, errlen, "%s: out of memory", endpoint);
        errno = ENOMEM;
        return -1;
    }
    if (zmq_connect (self->zsock, endpoint) == 0) {
        self->endpoints[self->n_endpoints++] = (s_sock_endpoint_t) { .endpoint = copy };
        return 0;
    }
    int e = errno;
    free (copy);
    snprintf (err, errlen, "%s: %s", endpoint, zmq_strerror (e));
    errno = e;
    return -1;
}

int client_sock_disconnect (client_sock_t *self, const char *endpoint)
{
    if (self->engine == SIGCLIENT_ENGINE_ZMTP)
        return zmtp_dealer_disconnect (self->dealer, endpoint);
    for (size_t i = 0; i < self->n_endpoints; i++)
        if (strcmp (self->endpoints[i].endpoint, endpoint) == 0) {
            bool refused = self->endpoints[i].refused;      /* then libzmq's own is gone already */
            free (self->endpoints[i].endpoint);
            self->endpoints[i] = self->endpoints[--self->n_endpoints];
            return refused ? 0 : zmq_disconnect (self->zsock, endpoint);
        }
    return zmq_disconnect (self->zsock, endpoint);
}

/* libzmq: whether every endpoint was refused for the socket's security mechanism. */
static bool s_sock_zmq_refused (const client_sock_t *self)
{
    for (size_t i = 0; i < self->n_endpoints; i++)
        if (!self->endpoints[i].refused)
            return false;
    return self->n_endpoints > 0;
}

/* libzmq: whether a handshake with WHERE that failed without detail (EPIPE, ECONNRESET) was a
 * mechanism mismatch. libzmq's engine often loses that race: the server closes as soon as it has
 * read our greeting, and the engine, writing the rest of its own, sees the close before it reads the
 * server's mechanism, then reconnects for ever (zmtp_probe.h). The server's greeting, read on a
 * connection of our own, says. Looked into at most once a S_SOCK_RECONNECT_MAX_MS an endpoint. */
static bool s_sock_zmq_mismatch (client_sock_t *self, s_sock_endpoint_t *ep, const char *where)
{
    const int64_t now = s_sock_now_ns ();
    if (!ep || ep->refused || now < ep->probe_at)
        return false;
    ep->probe_at = now + (int64_t) S_SOCK_RECONNECT_MAX_MS * 1000000;
    const zmtp_mechanism_t ours = self->curve ? ZMTP_MECH_CURVE : ZMTP_MECH_NULL;
    zmtp_mechanism_t theirs;
    return zmtp_probe_mechanism (where, ours, S_SOCK_PROBE_MS, &theirs) == 0 && theirs != ours
           && (theirs == ZMTP_MECH_CURVE || theirs == ZMTP_MECH_NULL);
}

/* libzmq: the monitor's events. A mechanism mismatch refuses its endpoint: named by the event as
 * connected (an address given by name is named by the address it resolved to: then, with one
 * endpoint, that one). */
static void s_sock_zmq_events (client_sock_t *self)
{
    zmq_msg_t head, where;
    zmq_msg_init (&head);
    zmq_msg_init (&where);
    while (zmq_msg_recv (&head, self->monitor, ZMQ_DONTWAIT) >= 0) {
        if (!zmq_msg_more (&head) || zmq_msg_recv (&where, self->monitor, ZMQ_DONTWAIT) < 0 || zmq_msg_size (&head) < 6)
            continue;
        uint16_t event;
        uint32_t value;
        memcpy (&event, zmq_msg_data (&head), 2);
        memcpy (&value, (uint8_t *) zmq_msg_data (&head) + 2, 4);
        s_sock_endpoint_t *ep = self->n_endpoints == 1 ? &self->endpoints[0] : NULL;
        for (size_t i = 0; i < self->n_endpoints; i++)
            if (strlen (self->endpoints[i].endpoint) == zmq_msg_size (&where)
                && memcmp (self->endpoints[i].endpoint, zmq_msg_data (&where), zmq_msg_size (&where)) == 0)
                ep = &self->endpoints[i];
        char addr[SIGCLIENT_ENDPOINT_MAX];
        snprintf (addr, sizeof addr, "%.*s", (int) zmq_msg_size (&where), (const char *) zmq_msg_data (&where));
        const bool mismatch = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                              ? value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                              : event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && s_sock_zmq_mismatch (self, ep, addr);
        if (!mismatch)
            continue;
        snprintf (self->failure, sizeof self->failure, "%s: %s", ep ? ep->endpoint : "a server",
                  self->curve ? "the server does not use CURVE, and this client has CURVE keys"
                              : "the server asks for CURVE, and this client has no CURVE keys");
        if (ep && !ep->refused) {
            zmq_disconnect (self->zsock, ep->endpoint);     /* what libzmq keeps of it: nothing more comes */
            ep->refused = true;
            ep->retry_at = s_sock_now_ns () + (int64_t) S_SOCK_RECONNECT_MAX_MS * 1000000;
        }
    }
    zmq_msg_close (&head);
    zmq_msg_close (&where);
}

/* libzmq, before a send: refused endpoints that are due connected again; -1 (EPROTO) while every one
 * is refused. */
static int s_sock_zmq_rearm (client_sock_t *self)
{
    const int64_t now = s_sock_now_ns ();
    for (size_t i = 0; i < self->n_endpoints; i++) {
        s_sock_endpoint_t *ep = &self->endpoints[i];
        if (ep->refused && now >= ep->retry_at && zmq_connect (self->zsock, ep->endpoint) == 0)
            ep->refused = false;
    }
    if (s_sock_zmq_refused (self)) {
        errno = EPROTO;
        return -1;
    }
    return 0;
}

int client_sock_send (client_sock_t *self, const zmtp_frame_t *frames, int n, int timeout_ms)
{
    if (n < 1 || n > ZMTP_MSG_FRAMES) {
        errno = EINVAL;
        return -1;
    }
    if (self->engine == SIGCLIENT_ENGINE_ZMTP)
        return zmtp_dealer_send (self->dealer, frames, n);
    if (s_sock_zmq_rearm (self) != 0)
        return -1;
    /* The first frame without waiting; when there is no room, a wait for room or for the monitor: a
     * DEALER whose every connection was refused for its mechanism has no pipe, and would wait the
     * whole bound for room that never comes. */
    const int64_t deadline = s_sock_now_ns () + (int64_t) (timeout_ms > 0 ? timeout_ms : 0) * 1000000;
    const int more = n > 1 ? ZMQ_SNDMORE : 0;
    while (zmq_send (self->zsock, frames[0].data, frames[0].size, more | ZMQ_DONTWAIT) < 0) {
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -1;
        s_sock_zmq_events (self);
        if (s_sock_zmq_refused (self)) {
            errno = EPROTO;
            return -1;
        }
        long wait_ms = -1;
        if (timeout_ms >= 0) {
            int64_t left = deadline - s_sock_now_ns ();
            if (timeout_ms == 0 || left <= 0) {
                errno = EAGAIN;
                return -1;
            }
            wait_ms = (long) ((left + 999999) / 1000000);
        }
        zmq_pollitem_t items[2] = { { .socket = self->zsock, .events = ZMQ_POLLOUT },
                                    { .socket = self->monitor, .events = ZMQ_POLLIN } };
        if (zmq_poll (items, 2, wait_ms) < 0 && errno != EINTR)
            return -1;
    }
    /* Once the first frame is taken, libzmq takes the rest of the message whatever the high-water mark. */
    for (int f = 1; f < n; f++) {
        while (zmq_send (self->zsock, frames[f].data, frames[f].size, f + 1 < n ? ZMQ_SNDMORE : 0) < 0)
            if (errno != EINTR)
                return -1;
    }
    return 0;
}

/* One whole message if there is one (libzmq delivers a message's frames together): 1, 0 none, -1. */
static int s_sock_zmq_take (client_sock_t *self, zmtp_msg_t *msg)
{
    while (zmq_msg_recv (&self->frames[0], self->zsock, ZMQ_DONTWAIT) < 0) {
        if (errno == EAGAIN)
            return 0;
        if (errno != EINTR)
            return -1;
    }
    zmq_msg_t *m = &self->frames[0];
    msg->nframes = 1;
    msg->total_frames = 1;
    msg->bytes = zmq_msg_size (m);
    msg->frames[0] = (zmtp_frame_t) { zmq_msg_data (m), zmq_msg_size (m) };
    while (zmq_msg_more (m)) {
        zmq_msg_t *next = msg->nframes < ZMTP_MSG_FRAMES ? &self->frames[msg->nframes] : &self->spare;
        int rc;
        while ((rc = zmq_msg_recv (next, self->zsock, ZMQ_DONTWAIT)) < 0 && errno == EINTR)
            ;
        if (rc < 0)
            break;          /* not seen: the rest of a message is there once its first frame is */
        m = next;
        msg->total_frames++;
        msg->bytes += zmq_msg_size (m);
        if (m != &self->spare)
            msg->frames[msg->nframes++] = (zmtp_frame_t) { zmq_msg_data (m), zmq_msg_size (m) };
    }
    msg->refused = msg->total_frames > (size_t) msg->nframes;
    return 1;
}

int client_sock_recv (client_sock_t *self, zmtp_msg_t *msg, int timeout_ms)
{
    if (self->engine == SIGCLIENT_ENGINE_ZMTP)
        return zmtp_dealer_recv (self->dealer, msg, timeout_ms);
    const int64_t deadline = s_sock_now_ns () + (int64_t) (timeout_ms > 0 ? timeout_ms : 0) * 1000000;
    for (;;) {
        int rc = s_sock_zmq_take (self, msg);
        if (rc != 0 || timeout_ms == 0)
            return rc;
        if (s_sock_zmq_refused (self)) {
            errno = EPROTO;
            return -1;
        }
        long wait_ms = -1;
        if (timeout_ms > 0) {
            int64_t left = deadline - s_sock_now_ns ();
            if (left <= 0)
                return 0;
            wait_ms = (long) ((left + 999999) / 1000000);
        }
        /* The monitor is looked at only while waiting: nothing is added to a receive that finds a reply. */
        zmq_pollitem_t items[2] = { { .socket = self->zsock, .events = ZMQ_POLLIN },
                                    { .socket = self->monitor, .events = ZMQ_POLLIN } };
        if (zmq_poll (items, 2, wait_ms) < 0 && errno != EINTR)
            return -1;
        if (items[1].revents & ZMQ_POLLIN)
            s_sock_zmq_events (self);
    }
}

int client_sock_try_recv (client_sock_t *self, zmtp_msg_t *msg)
{
    return client_sock_recv (self, msg, 0);
}

int client_sock_pollfds (client_sock_t *self, struct pollfd *fds, int cap)
{
    if (self->engine == SIGCLIENT_ENGINE_ZMTP)
        return zmtp_dealer_pollfds (self->dealer, fds, cap);
    if (cap < 1)
        return 0;
    fds[0] = (struct pollfd) { .fd = self->fd, .events = POLLIN };
    return 1;
}

int client_sock_pollfds_max (sigclient_engine_t engine, int n_endpoints)
{
    return engine == SIGCLIENT_ENGINE_ZMTP && n_endpoints > 1 ? n_endpoints : 1;
}

int client_sock_ready_count (const client_sock_t *self)
{
    return self->engine == SIGCLIENT_ENGINE_ZMTP ? zmtp_dealer_ready_count (self->dealer) : -1;
}

const char *client_sock_strerror (int err)
{
    return zmq_strerror (err);
}

const char *client_sock_last_failure (const client_sock_t *self)
{
    return self->engine == SIGCLIENT_ENGINE_ZMTP ? zmtp_dealer_error (self->dealer) : self->failure;
}

int client_sock_keys_decode (const char *server_public, const char *client_public, const char *client_secret,
                             client_sock_keys_t *keys)
{
    const char *const text[3] = { server_public, client_public, client_secret };
    uint8_t *const bytes[3] = { keys->server_public, keys->client_public, keys->client_secret };
    for (int k = 0; k < 3; k++)
        if (!text[k] || strlen (text[k]) != 40 || zmtp_z85_decode (text[k], bytes[k]) != 0) {
            explicit_bzero (keys, sizeof *keys);
            errno = EINVAL;
            return -1;
        }
    return 0;
}

const char *sigclient_engine_name (sigclient_engine_t engine)
{
    switch (engine) {
        case SIGCLIENT_ENGINE_ZMTP: return "zmtp";
        case SIGCLIENT_ENGINE_LIBZMQ: return "libzmq";
        default: return "unknown";
    }
}

int client_sock_engine_parse (const char *text, sigclient_engine_t *engine)
{
    if (text && strcmp (text, "zmtp") == 0)
        *engine = SIGCLIENT_ENGINE_ZMTP;
    else if (text && strcmp (text, "libzmq") == 0)
        *engine = SIGCLIENT_ENGINE_LIBZMQ;
    else
        return -1;
    return 0;
}
