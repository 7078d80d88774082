/* The client side of the ZMTP engine (zmtp_dealer.h). */
#define _GNU_SOURCE
#include "zmtp_dealer.h"
#include "zmtp_addr.h"
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PEERS_MAX 256
#define TICK_NS 100000000ull
#define QUEUE_MAX_DEFAULT (16u << 20)

/* P_REFUSED: the server's security mechanism is not ours. No timer connects it again (it cannot
 * succeed); a message sent tries it once more, at most once per reconnect_max_ms (a server may have
 * been restarted with another configuration). */
typedef enum { P_WAITING, P_CONNECTING, P_OPEN, P_REFUSED } peer_state_t;

typedef struct {
    char endpoint[ZMTP_ENDPOINT_MAX];
    peer_state_t state;
    int fd;                             /* P_CONNECTING: the socket being connected */
    zmtp_conn_t *conn;                  /* P_OPEN */
    bool was_ready;                     /* its handshake finished (the pending queue went to it) */
    uint64_t retry_at;                  /* P_WAITING: when to connect again; P_REFUSED: when a send may */
    uint32_t backoff_ms;
} peer_t;

struct zmtp_dealer {
    zmtp_dealer_opts_t opt;
    zmtp_keypair_t keys;                /* CURVE: copies of the caller's */
    uint8_t server_key[ZMTP_CURVE_KEY_BYTES];
    zmtp_conn_opts_t conn_opts;
    peer_t *peers[PEERS_MAX];
    int n;
    int rr_send, rr_recv;               /* round-robin positions */
    uint8_t *pending;                   /* messages waiting for a connection: records of
                                           [u32 frames][u32 size]... then the bytes */
    size_t pending_len, pending_cap;
    uint64_t last_tick;
    char error[ZMTP_ENDPOINT_MAX + 256];
};

zmtp_dealer_t *zmtp_dealer_new (const zmtp_dealer_opts_t *opts)
{
    zmtp_dealer_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->opt = *opts;
    if (!self->opt.reconnect_ms)
        self->opt.reconnect_ms = 100;
    if (!self->opt.reconnect_max_ms)
        self->opt.reconnect_max_ms = 30000;
    if (!self->opt.handshake_ms)
        self->opt.handshake_ms = 30000;
    if (!self->opt.queue_max)
        self->opt.queue_max = QUEUE_MAX_DEFAULT;
    if (opts->mechanism == ZMTP_MECH_CURVE) {
        if (!opts->curve_keys || !opts->curve_server_key) {
            free (self);
            errno = EINVAL;
            return NULL;
        }
        self->keys = *opts->curve_keys;
        memcpy (self->server_key, opts->curve_server_key, sizeof self->server_key);
    }
    self->conn_opts = (zmtp_conn_opts_t) {
        .type = ZMTP_TYPE_DEALER, .as_server = false, .mechanism = opts->mechanism,
        .curve_keys = &self->keys, .curve_server_key = self->server_key,
        .max_message_bytes = opts->max_message_bytes, .max_frames = ZMTP_MSG_FRAMES,
        .heartbeat_ivl_ms = opts->heartbeat_ivl_ms, .handshake_ms = self->opt.handshake_ms,
    };
    return self;
}

static void s_close_peer (peer_t *p)
{
    zmtp_conn_destroy (&p->conn);
    if (p->fd >= 0)
        close (p->fd);
    p->fd = -1;
}

void zmtp_dealer_destroy (zmtp_dealer_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zmtp_dealer_t *self = *self_p;
    for (int i = 0; i < self->n; i++) {
        s_close_peer (self->peers[i]);
        free (self->peers[i]);
    }
    free (self->pending);
    explicit_bzero (&self->keys, sizeof self->keys);
    free (self);
    *self_p = NULL;
}

/* Starts connecting P now; on a failure that is not worth waiting for, schedules a retry. */
static void s_start (zmtp_dealer_t *self, peer_t *p, uint64_t now)
{
    char err[256];
    p->fd = zmtp_connect_start (p->endpoint, err, sizeof err);
    if (p->fd < 0) {
        snprintf (self->error, sizeof self->error, "%s", err);
        p->state = P_WAITING;
        p->retry_at = now + (uint64_t) p->backoff_ms * 1000000ull;
        return;
    }
    p->state = P_CONNECTING;
}

/* What a client says when the server's mechanism (THEIRS) is not OURS. */
static const char *s_mismatch (zmtp_mechanism_t ours, zmtp_mechanism_t theirs)
{
    if (ours == ZMTP_MECH_NULL && theirs == ZMTP_MECH_CURVE)
        return "the server asks for CURVE, and this client has no CURVE keys";
    if (ours == ZMTP_MECH_CURVE && theirs == ZMTP_MECH_NULL)
        return "the server does not use CURVE, and this client has CURVE keys";
    return "the server asks for a security mechanism other than NULL and CURVE, which this client does not speak";
}

/* P's connection ended: try again after its backoff (doubled while it never comes up); after a
 * mechanism mismatch, only when a message is sent (P_REFUSED). */
static void s_drop (zmtp_dealer_t *self, peer_t *p, uint64_t now)
{
    if (p->conn && zmtp_conn_why (p->conn) == ZMTP_CLOSE_MECHANISM) {
        snprintf (self->error, sizeof self->error, "%s: %s", p->endpoint,
                  s_mismatch (self->opt.mechanism, zmtp_conn_peer_mechanism (p->conn)));
        s_close_peer (p);
        p->was_ready = false;
        p->state = P_REFUSED;
        p->retry_at = now + (uint64_t) self->opt.reconnect_max_ms * 1000000ull;
        return;
    }
    if (p->conn && zmtp_conn_error (p->conn)[0])
        snprintf (self->error, sizeof self->error, "%s: %s", p->endpoint, zmtp_conn_error (p->conn));
    if (p->was_ready)
        p->backoff_ms = self->opt.reconnect_ms;
    else if (p->backoff_ms < self->opt.reconnect_max_ms)
        p->backoff_ms = p->backoff_ms * 2 > self->opt.reconnect_max_ms ? self->opt.reconnect_max_ms : p->backoff_ms * 2;
    s_close_peer (p);
    p->was_ready = false;
    p->state = P_WAITING;
    p->retry_at = now + (uint64_t) p->backoff_ms * 1000000ull;
}

int zmtp_dealer_connect (zmtp_dealer_t *self, const char *endpoint, char *err, size_t errlen)
{
    if (zmtp_endpoint_check (endpoint, true, err, errlen) != 0)
        return -1;
    if (self->n == PEERS_MAX || strlen (endpoint) >= ZMTP_ENDPOINT_MAX) {
        snprintf (err, errlen, "%s: too many endpoints, or too long", endpoint);
        errno = EINVAL;
        return -1;
    }
    peer_t *p = calloc (1, sizeof *p);
    if (!p) {
        snprintf (err, errlen, "out of memory");
        errno = ENOMEM;
        return -1;
    }
    snprintf (p->endpoint, sizeof p->endpoint, "%s", endpoint);
    p->fd = -1;
    p->backoff_ms = self->opt.reconnect_ms;
    self->peers[self->n++] = p;
    s_start (self, p, clock_now_ns ());
    return 0;
}

int zmtp_dealer_disconnect (zmtp_dealer_t *self, const char *endpoint)
{
    for (int i = 0; i < self->n; i++)
        if (strcmp (self->peers[i]->endpoint, endpoint) == 0) {
            s_close_peer (self->peers[i]);
            free (self->peers[i]);
            memmove (self->peers + i, self->peers + i + 1, (size_t) (self->n - i - 1) * sizeof self->peers[0]);
            self->n--;
            return 0;
        }
    return -1;
}

bool zmtp_dealer_refused (const zmtp_dealer_t *self)
{
    for (int i = 0; i < self->n; i++)
        if (self->peers[i]->state != P_REFUSED)
            return false;
    return self->n > 0;
}

int zmtp_dealer_ready_count (const zmtp_dealer_t *self)
{
    int n = 0;
    for (int i = 0; i < self->n; i++)
        n += self->peers[i]->conn && zmtp_conn_ready (self->peers[i]->conn);
    return n;
}

/* The messages waiting for a connection, sent on P's (just up), in order. */
static void s_flush_pending (zmtp_dealer_t *self, peer_t *p)
{
    size_t at = 0;
    uint64_t now = clock_now_ns ();
    while (at < self->pending_len) {
        uint32_t n;
        memcpy (&n, self->pending + at, 4);
        zmtp_frame_t frames[ZMTP_MSG_FRAMES];
        size_t data = at + 4 + 4 * (size_t) n;
        for (uint32_t f = 0; f < n; f++) {
            uint32_t len;
            memcpy (&len, self->pending + at + 4 + 4 * f, 4);
            frames[f] = (zmtp_frame_t) { self->pending + data, len };
            data += len;
        }
        if (zmtp_conn_send (p->conn, frames, (int) n, now) != 0)
            break;
        at = data;
    }
    memmove (self->pending, self->pending + at, self->pending_len - at);
    self->pending_len -= at;
}

static int s_queue (zmtp_dealer_t *self, const zmtp_frame_t *frames, int n)
{
    size_t need = 4 + 4 * (size_t) n;
    for (int f = 0; f < n; f++)
        need += frames[f].size;
    if (self->pending_len + need > self->opt.queue_max) {
        errno = EAGAIN;
        return -1;
    }
    if (self->pending_len + need > self->pending_cap) {
        size_t cap = self->pending_cap ? self->pending_cap : 4096;
        while (cap < self->pending_len + need)
            cap *= 2;
        uint8_t *p = realloc (self->pending, cap);
        if (!p) {
            errno = ENOMEM;
            return -1;
        }
        self->pending = p;
        self->pending_cap = cap;
    }
    uint8_t *w = self->pending + self->pending_len;
    uint32_t count = (uint32_t) n;
    memcpy (w, &count, 4);
    size_t data = 4 + 4 * (size_t) n;
    for (int f = 0; f < n; f++) {
        uint32_t len = (uint32_t) frames[f].size;
        memcpy (w + 4 + 4 * f, &len, 4);
        if (len)
            memcpy (w + data, frames[f].data, len);
        data += len;
    }
    self->pending_len += need;
    return 0;
}

int zmtp_dealer_send (zmtp_dealer_t *self, const zmtp_frame_t *frames, int n)
{
    if (n < 1 || n > ZMTP_MSG_FRAMES) {
        errno = EINVAL;
        return -1;
    }
    uint64_t now = clock_now_ns ();
    for (int i = 0; i < self->n; i++) {
        peer_t *p = self->peers[i];
        if (p->state == P_REFUSED && now >= p->retry_at) {
            p->state = P_WAITING;
            p->retry_at = now;
        }
    }
    if (zmtp_dealer_refused (self)) {
        errno = EPROTO;
        return -1;
    }
    for (int k = 0; k < self->n; k++) {
        int i = (self->rr_send + k) % self->n;
        peer_t *p = self->peers[i];
        if (!p->conn || !zmtp_conn_ready (p->conn))
            continue;
        if (self->pending_len)
            s_flush_pending (self, p);
        if (self->pending_len)
            break;      /* keep the order: this one behind those still waiting */
        if (zmtp_conn_send (p->conn, frames, n, now) == 0) {
            self->rr_send = i + 1;
            return 0;
        }
        if (errno == EPIPE)
            s_drop (self, p, now);
    }
    return s_queue (self, frames, n);
}

/* Connections that came up, retries that are due, handshake bounds and heartbeats. */
static void s_timers (zmtp_dealer_t *self, uint64_t now)
{
    for (int i = 0; i < self->n; i++) {
        peer_t *p = self->peers[i];
        if (p->state == P_WAITING && now >= p->retry_at)
            s_start (self, p, now);
    }
    if (now - self->last_tick < TICK_NS)
        return;
    self->last_tick = now;
    for (int i = 0; i < self->n; i++) {
        peer_t *p = self->peers[i];
        if (p->conn && (zmtp_conn_tick (p->conn, now) || zmtp_conn_closed (p->conn)))
            s_drop (self, p, now);
    }
}

/* One message out of what the open connections hold, in turn. */
static int s_take (zmtp_dealer_t *self, zmtp_msg_t *msg, uint64_t now)
{
    for (int k = 0; k < self->n; k++) {
        int i = (self->rr_recv + k) % self->n;
        peer_t *p = self->peers[i];
        if (!p->conn)
            continue;
        int rc = zmtp_conn_next (p->conn, msg, now);
        if (rc < 0) {
            s_drop (self, p, now);
            continue;
        }
        if (!p->was_ready && zmtp_conn_ready (p->conn)) {
            p->was_ready = true;
            p->backoff_ms = self->opt.reconnect_ms;
            if (self->pending_len) {
                s_flush_pending (self, p);
                self->rr_send = i + 1;      /* the next send goes on to the next connection */
            }
        }
        if (rc == 1) {
            self->rr_recv = i + 1;
            return 1;
        }
    }
    return 0;
}

int zmtp_dealer_pollfds (zmtp_dealer_t *self, struct pollfd *fds, int cap)
{
    int n = 0;
    for (int i = 0; i < self->n && n < cap; i++) {
        peer_t *p = self->peers[i];
        if (p->state == P_CONNECTING)
            fds[n++] = (struct pollfd) { .fd = p->fd, .events = POLLOUT };
        else if (p->state == P_OPEN)
            fds[n++] = (struct pollfd) { .fd = zmtp_conn_fd (p->conn),
                                         .events = POLLIN | (zmtp_conn_queued (p->conn) ? POLLOUT : 0) };
    }
    return n;
}

/* Takes in what poll said of the sockets (FDS, NFDS, in the peers' order): connections that came up get
 * their greeting, readable ones are read, writable ones flushed. */
static void s_io (zmtp_dealer_t *self, const struct pollfd *fds, int nfds, uint64_t now)
{
    for (int i = 0, f = 0; i < self->n && f < nfds; i++) {
        peer_t *p = self->peers[i];
        if (p->state == P_CONNECTING && fds[f].fd == p->fd) {
            short ev = fds[f++].revents;
            if (!ev)
                continue;
            if (zmtp_connect_done (p->fd) != 0) {
                snprintf (self->error, sizeof self->error, "%s: %s", p->endpoint, strerror (errno));
                s_drop (self, p, now);
                continue;
            }
            int fd = p->fd;
            p->fd = -1;
            zmtp_tune (fd);
            p->conn = zmtp_conn_new (fd, &self->conn_opts, now);
            p->state = p->conn ? P_OPEN : P_WAITING;
            if (!p->conn)
                p->retry_at = now + (uint64_t) p->backoff_ms * 1000000ull;
        } else if (p->state == P_OPEN && fds[f].fd == zmtp_conn_fd (p->conn)) {
            short ev = fds[f++].revents;
            if (!ev)
                continue;
            if ((ev & POLLOUT) && zmtp_conn_flush (p->conn) < 0) {
                s_drop (self, p, now);
                continue;
            }
            if ((ev & (POLLIN | POLLHUP | POLLERR)) && zmtp_conn_read (p->conn, now) < 0)
                s_drop (self, p, now);
        }
    }
}

/* Without waiting: every open connection read once (its queue written first), no poll before (one
 * system call a connection when nothing came); connections still being made looked at with poll. */
static void s_look (zmtp_dealer_t *self, uint64_t now)
{
    struct pollfd fds[PEERS_MAX];
    int nfds = 0;
    for (int i = 0; i < self->n; i++) {
        peer_t *p = self->peers[i];
        if (p->state == P_CONNECTING)
            fds[nfds++] = (struct pollfd) { .fd = p->fd, .events = POLLOUT };
        else if (p->state == P_OPEN) {
            if ((zmtp_conn_queued (p->conn) && zmtp_conn_flush (p->conn) < 0) || zmtp_conn_read (p->conn, now) < 0)
                s_drop (self, p, now);
        }
    }
    if (nfds && poll (fds, (nfds_t) nfds, 0) > 0)
        s_io (self, fds, nfds, now);
}

int zmtp_dealer_recv (zmtp_dealer_t *self, zmtp_msg_t *msg, int timeout_ms)
{
    uint64_t now = clock_now_ns ();
    const uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t) timeout_ms * 1000000ull;
    struct pollfd fds[PEERS_MAX];
    for (bool first = true;; first = false) {
        if (s_take (self, msg, now) == 1)
            return 1;
        if (zmtp_dealer_refused (self)) {
            errno = EPROTO;
            return -1;
        }
        s_timers (self, now);
        if (first && timeout_ms == 0) {
            s_look (self, now);
            now = clock_now_ns ();
            continue;
        }
        if (now >= deadline)
            return 0;
        uint64_t wait_ns = deadline - now;
        for (int i = 0; i < self->n; i++)
            if (self->peers[i]->state == P_WAITING && self->peers[i]->retry_at - now < wait_ns)
                wait_ns = self->peers[i]->retry_at > now ? self->peers[i]->retry_at - now : 0;
        if (wait_ns > TICK_NS)
            wait_ns = TICK_NS;
        int nfds = zmtp_dealer_pollfds (self, fds, PEERS_MAX);
        int rc = poll (fds, (nfds_t) nfds, (int) ((wait_ns + 999999) / 1000000));
        now = clock_now_ns ();
        if (rc > 0)
            s_io (self, fds, nfds, now);
    }
}

const char *zmtp_dealer_error (const zmtp_dealer_t *self) { return self->error; }
