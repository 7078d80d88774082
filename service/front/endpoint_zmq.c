/* The libzmq transport of the front's endpoints (endpoint.h): a ROUTER per slot in a context of the
 * front's own (or czmq's, with CURVE), ZMQ_MAXMSGSIZE per frame, ZMQ_ROUTER_MANDATORY (a reply that
 * cannot be delivered is reported, not dropped silently), heartbeats, a bounded linger, and a monitor
 * per socket for max_connections and the refused CURVE handshakes. */
#define _GNU_SOURCE
#include "front/endpoint_impl.h"

#include "base/log.h"
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

static int s_start (endpoints_t *self, char *err, size_t errlen)
{
    self->ctx = self->auth ? auth_context (self->auth) : NULL;
    if (!self->ctx) {
        self->ctx = zmq_ctx_new ();
        self->own_ctx = true;
        if (!self->ctx) {
            snprintf (err, errlen, "cannot create a ZeroMQ context: %s", zmq_strerror (zmq_errno ()));
            return -1;
        }
        zmq_ctx_set (self->ctx, ZMQ_IO_THREADS, (int) self->cfg.io_threads);
    }
    for (int f = 0; f < MAX_FRAMES; f++)
        zmq_msg_init (&self->frames[f]);
    zmq_msg_init (&self->spare);
    return 0;
}

static void s_stop (endpoints_t *self, uint32_t linger_ms)
{
    (void) linger_ms;
    for (int f = 0; f < MAX_FRAMES; f++)
        zmq_msg_close (&self->frames[f]);
    zmq_msg_close (&self->spare);
    if (self->own_ctx)
        zmq_ctx_term (self->ctx);
}

/* With CURVE: a client with an unknown key must be refused on the address just bound (a wildcard
 * address reached over loopback), or the endpoint does not serve. */
static int s_prove (endpoints_t *self, void *socket, char *err, size_t errlen)
{
    char bound[CONFIG_ENDPOINT_MAX + 16];
    size_t len = sizeof bound;
    if (zmq_getsockopt (socket, ZMQ_LAST_ENDPOINT, bound, &len) != 0) {
        snprintf (err, errlen, "server.curve: cannot read the address bound: %s", zmq_strerror (zmq_errno ()));
        return -1;
    }
    char target[CONFIG_ENDPOINT_MAX + 16];
    const char *any4 = strstr (bound, "tcp://0.0.0.0:"), *any6 = strstr (bound, "tcp://[::]:");
    if (any4)
        snprintf (target, sizeof target, "tcp://127.0.0.1:%s", any4 + strlen ("tcp://0.0.0.0:"));
    else if (any6)
        snprintf (target, sizeof target, "tcp://[::1]:%s", any6 + strlen ("tcp://[::]:"));
    else
        snprintf (target, sizeof target, "%s", bound);
    return auth_prove (self->auth, target, err, errlen);
}

/* inproc:// makes no handshake: with CURVE on, refused (at bind, and by endpoints_check before it). */
static int s_inproc_curve (bool curve, const char *endpoint, char *err, size_t errlen)
{
    if (!curve || strncmp (endpoint, "inproc://", 9) != 0)
        return 0;
    snprintf (err, errlen, "server.endpoints: %s: inproc endpoints make no security handshake, so they cannot "
              "serve with server.curve; use tcp:// or ipc://", endpoint);
    return -1;
}

static int s_bind (endpoints_t *self, int i, const char *endpoint, char *err, size_t errlen)
{
    if (s_inproc_curve (self->auth != NULL, endpoint, err, errlen) != 0)
        return -1;
    void *s = zmq_socket (self->ctx, ZMQ_ROUTER);
    int64_t maxmsg = self->cfg.max_message_bytes;
    int one = 1, linger = 0;
    int hb_ivl = (int) self->cfg.heartbeat_ms, hb_timeout = (int) self->cfg.heartbeat_ms * 3;
    int rc = s ? 0 : -1;
    if (rc == 0)
        rc = zmq_setsockopt (s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (rc == 0)
        rc = zmq_setsockopt (s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    if (rc == 0)
        rc = zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    if (rc == 0 && hb_ivl > 0)
        rc = zmq_setsockopt (s, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl) != 0
             || zmq_setsockopt (s, ZMQ_HEARTBEAT_TIMEOUT, &hb_timeout, sizeof hb_timeout) != 0 ? -1 : 0;
    if (rc == 0 && self->auth && auth_apply (self->auth, s, err, errlen) != 0) {
        zmq_close (s);
        return -1;
    }
    if (rc == 0)
        rc = zmq_bind (s, endpoint);
    if (rc != 0) {
        const int e = zmq_errno ();
        snprintf (err, errlen, "%s", zmq_strerror (e));
        if (s)
            zmq_close (s);
        errno = e;
        return -1;
    }
    if (self->auth && s_prove (self, s, err, errlen) != 0) {
        zmq_close (s);
        return -1;
    }
    void *monitor = NULL;
    if (self->cfg.max_connections || self->auth) {
        static int count;
        char name[64];
        snprintf (name, sizeof name, "inproc://sigserve-connections-%d", count++);
        void *pair = zmq_socket (self->ctx, ZMQ_PAIR);
        int zero = 0;
        int events = (self->cfg.max_connections ? ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED : 0)
                     | (self->auth ? ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                         | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH : 0);
        if (!pair || zmq_socket_monitor (s, name, events) != 0
            || zmq_setsockopt (pair, ZMQ_LINGER, &zero, sizeof zero) != 0 || zmq_connect (pair, name) != 0) {
            snprintf (err, errlen, "server.max_connections: cannot watch the connections of %s: %s", endpoint,
                      zmq_strerror (zmq_errno ()));
            if (pair)
                zmq_close (pair);
            zmq_close (s);
            return -1;
        }
        monitor = pair;
    }
    self->slots[i].socket = s;
    self->slots[i].monitor = monitor;
    return 0;
}

static void s_unbind (endpoints_t *self, int i) { zmq_unbind (self->slots[i].socket, self->slots[i].name); }

static void s_close (endpoints_t *self, int i, uint32_t linger_ms)
{
    slot_t *sl = &self->slots[i];
    int linger = (int) linger_ms;
    if (sl->monitor) {
        zmq_socket_monitor (sl->socket, NULL, 0);
        zmq_close (sl->monitor);
    }
    if (sl->socket) {
        zmq_setsockopt (sl->socket, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close (sl->socket);     /* libzmq removes an ipc:// socket file it created */
    }
}

/* Takes one whole message from slot I. 1 when one was there, 0 when none. */
static int s_recv_slot (endpoints_t *self, int i, message_t *msg)
{
    void *s = self->slots[i].socket;
    msg->socket = i;
    msg->nframes = 0;
    msg->total_frames = 0;
    msg->bytes = 0;
    msg->cut = false;
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
        } else {
            msg->frames[msg->nframes] = (frame_t) { zmq_msg_data (f), zmq_msg_size (f) };
            msg->nframes++;
        }
        if (!more)
            return 1;
    }
}

static int s_recv (endpoints_t *self, message_t *msg)
{
    for (int k = 0; k < SLOTS; k++) {
        int i = (self->next_slot + k) % SLOTS;
        if (self->slots[i].open && s_recv_slot (self, i, msg)) {
            self->next_slot = i + 1;
            return 1;
        }
    }
    return 0;
}

static void s_release (endpoints_t *self, message_t *msg)
{
    for (int f = 0; f < msg->nframes; f++) {
        zmq_msg_close (&self->frames[f]);
        zmq_msg_init (&self->frames[f]);
    }
    msg->nframes = 0;
}

static int s_send (endpoints_t *self, int slot, const frame_t *frames, int count)
{
    void *s = self->slots[slot].socket;
    for (int f = 0; f < count; f++)
        if (zmq_send (s, frames[f].data, frames[f].size, (f + 1 < count ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) {
            /* libzmq: EHOSTUNREACH the peer has gone, EAGAIN its pipe is full */
            errno = zmq_errno ();
            return -1;
        }
    return 0;
}

static void s_watch (endpoints_t *self, uint64_t now_ns, bool force);

static int s_wait (endpoints_t *self, int wake_fd, int timeout_ms)
{
    int n = 0;
    for (int i = 0; i < SLOTS; i++)
        if (self->slots[i].open)
            self->items[n++] = (zmq_pollitem_t) { .socket = self->slots[i].socket, .events = ZMQ_POLLIN };
    for (int i = 0; i < SLOTS; i++)     /* a connection past the limit is closed as soon as it comes */
        if (self->slots[i].monitor)
            self->items[n++] = (zmq_pollitem_t) { .socket = self->slots[i].monitor, .events = ZMQ_POLLIN };
    self->items[n++] = (zmq_pollitem_t) { .fd = wake_fd, .events = ZMQ_POLLIN };
    int rc = zmq_poll (self->items, n, timeout_ms);
    if (rc > 0)
        s_watch (self, clock_now_ns (), false);
    return rc;
}

/* One event off a monitor: its number and value (the accepted connection's fd). */
static bool s_event (void *monitor, uint16_t *event, int32_t *value)
{
    zmq_msg_t msg;
    zmq_msg_init (&msg);
    if (zmq_msg_recv (&msg, monitor, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close (&msg);
        return false;
    }
    bool ok = zmq_msg_size (&msg) >= 6;
    if (ok) {
        memcpy (event, zmq_msg_data (&msg), 2);
        memcpy (value, (uint8_t *) zmq_msg_data (&msg) + 2, 4);
    }
    while (zmq_msg_more (&msg))     /* the endpoint frame */
        zmq_msg_recv (&msg, monitor, 0);
    zmq_msg_close (&msg);
    return ok;
}

/* A refused CURVE handshake: EVENT with VALUE (a ZAP status code, or a protocol error). */
static stats_auth_failure_t s_auth_reason (uint16_t event, uint32_t value)
{
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        return AUTH_FAIL_DENIED;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        return AUTH_FAIL_PLAINTEXT;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        return AUTH_FAIL_WRONG_KEY;
    return AUTH_FAIL_PROTOCOL;
}

static bool s_known (const endpoints_t *self, int fd) { return (self->known[fd / 8] >> (fd % 8)) & 1u; }

static void s_set_known (endpoints_t *self, int fd, bool on)
{
    if (fd < 0 || fd >= KNOWN_FDS)
        return;
    if (on)
        self->known[fd / 8] |= (uint8_t) (1u << (fd % 8));
    else
        self->known[fd / 8] &= (uint8_t) ~(1u << (fd % 8));
}

/* FORCE: have each monitor take in what its pipe holds first (libzmq's recv looks at its commands
 * at most once a millisecond or so; getsockopt ZMQ_EVENTS does at once). */
static void s_watch (endpoints_t *self, uint64_t now_ns, bool force)
{
    for (int i = 0; i < SLOTS; i++) {
        slot_t *sl = &self->slots[i];
        uint16_t event = 0;
        int32_t fd = -1;
        if (force && sl->monitor) {
            int events = 0;
            size_t len = sizeof events;
            zmq_getsockopt (sl->monitor, ZMQ_EVENTS, &events, &len);
        }
        while (sl->monitor && s_event (sl->monitor, &event, &fd)) {
            if (event & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                         | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)) {
                endpoints_auth_failed (self, sl->name, s_auth_reason (event, (uint32_t) fd), now_ns);
                continue;
            }
            if (!self->cfg.max_connections)
                continue;
            if (event == ZMQ_EVENT_DISCONNECTED) {
                size_t k = 0;
                while (k < self->refused_count && self->refused[k] != fd)
                    k++;
                if (k < self->refused_count)        /* one we refused: never counted */
                    self->refused[k] = self->refused[--self->refused_count];
                else if (self->connections)
                    self->connections--;
                s_set_known (self, fd, false);
                continue;
            }
            if (self->connections < self->cfg.max_connections) {
                self->connections++;
                s_set_known (self, fd, true);
                continue;
            }
            /* One too many: shut it down under libzmq, which then closes it as a peer that left
             * (closing the fd here would race libzmq's own use of it). The peer's address is read
             * first: once the peer has answered the shutdown, the socket has none. */
            char peer[INET6_ADDRSTRLEN + 8] = "?";
            struct sockaddr_storage a;
            socklen_t len = sizeof a;
            if (getpeername (fd, (struct sockaddr *) &a, &len) == 0) {
                if (a.ss_family == AF_INET)
                    inet_ntop (AF_INET, &((struct sockaddr_in *) &a)->sin_addr, peer, sizeof peer);
                else if (a.ss_family == AF_INET6)
                    inet_ntop (AF_INET6, &((struct sockaddr_in6 *) &a)->sin6_addr, peer, sizeof peer);
            }
            shutdown (fd, SHUT_RDWR);
            if (self->refused_count < sizeof self->refused / sizeof self->refused[0])
                self->refused[self->refused_count++] = fd;
            endpoints_limit_refused (self, sl->name, peer, now_ns);
        }
    }
}

static bool s_refused (endpoints_t *self, const message_t *msg, uint64_t now_ns)
{
    (void) msg;
    if (!self->cfg.max_connections)
        return false;
    const int fd = zmq_msg_get (&self->frames[0], ZMQ_SRCFD);
    if (fd < 0 || fd >= KNOWN_FDS || s_known (self, fd))
        return false;   /* a connection counted already: the common case, one bit */
    /* The first message of a connection not yet seen: its accept event came before it; take the
     * events in now, so that a connection past the limit is shut down before it is answered. */
    s_watch (self, now_ns, true);
    for (size_t k = 0; k < self->refused_count; k++)
        if (self->refused[k] == fd)
            return true;
    return false;
}

static const void *s_client_key (endpoints_t *self, const message_t *msg, size_t *len)
{
    if (self->auth) {
        const char *key = zmq_msg_gets (&self->frames[0], "User-Id");
        if (key && *key) {
            *len = strlen (key);
            return key;
        }
    }
    *len = msg->frames[0].size;
    return msg->frames[0].data;
}

/* tcp://HOST:PORT bound as tcp://HOST:* on a throwaway socket: libzmq's own rules decide what HOST may be. */
static int s_probe (const server_config_t *cfg, const char *name, char *bound, size_t boundlen, char *err, size_t errlen)
{
    if (s_inproc_curve (cfg->curve.secret_key_file[0] != '\0', name, err, errlen) != 0) {
        errno = EINVAL;
        return -1;
    }
    snprintf (bound, boundlen, "%s", name);
    const char *colon = strrchr (name, ':');
    if (strncmp (name, "tcp://", 6) != 0 || !colon)
        return 0;
    char any[CONFIG_ENDPOINT_MAX + 2];
    snprintf (any, sizeof any, "%.*s:*", (int) (colon - name), name);
    void *ctx = zmq_ctx_new (), *s = ctx ? zmq_socket (ctx, ZMQ_ROUTER) : NULL;
    int linger = 0, rc = s ? zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger) : -1;
    if (rc == 0)
        rc = zmq_bind (s, any);
    const int e = rc == 0 ? 0 : zmq_errno ();
    size_t len = boundlen;
    if (rc == 0 && zmq_getsockopt (s, ZMQ_LAST_ENDPOINT, bound, &len) != 0)
        snprintf (bound, boundlen, "%s", name);
    if (s)
        zmq_close (s);
    if (ctx)
        zmq_ctx_term (ctx);
    if (rc != 0) {
        snprintf (err, errlen, "%s", zmq_strerror (e));
        errno = e;
    }
    return rc;
}

const endpoint_ops_t endpoint_zmq_ops = {
    .name = "libzmq", .start = s_start, .stop = s_stop, .bind = s_bind, .unbind = s_unbind, .close = s_close,
    .recv = s_recv, .release = s_release, .send = s_send, .wait = s_wait, .watch = s_watch, .refused = s_refused,
    .client_key = s_client_key, .probe = s_probe,
};
