/* The server side of the ZMTP engine (zmtp_router.h). */
#define _GNU_SOURCE
#include "zmtp_router.h"
#include "zmtp_addr.h"
#include "clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LISTENERS_MAX 64
#define EVENTS_MAX 64
#define ACCEPTS_PER_TURN 64
#define FD_HEADROOM 32                  /* fds kept free under the open-file limit for the rest of the process */
#define CLOSING_NS 1000000000ull        /* a refused message's reply is waited for this long */
#define LINGER_NS 1000000000ull         /* a connection shut on our side waits this long for the peer's end */
#define OUT_SOFT_DEFAULT (1u << 20)

/* epoll data: kind in the top 2 bits, then the slot (30 bits) and its generation (32). */
enum { EV_CONN = 0, EV_LISTENER = 1, EV_WATCH = 2 };
#define EV(kind, index, gen) (((uint64_t) (kind) << 62) | ((uint64_t) (index) << 32) | (uint64_t) (gen))

typedef struct {
    int fd;                             /* -1: free */
    int tag;
    bool ipc_file;                      /* a file of ours to remove at the end */
    char endpoint[ZMTP_ENDPOINT_MAX];
} listener_t;

typedef struct {
    zmtp_conn_t *conn;                  /* NULL: free */
    uint32_t gen;                       /* bumped at each close: stale routing ids are refused */
    int tag;
    uint32_t awaiting;                  /* messages handed out and not answered yet */
    bool queued;                        /* in the FIFO of connections with input */
    bool reading, writing;              /* what epoll watches for it */
    bool stalled;                       /* out_soft queued: no message handed out until it drains */
    bool corked;                        /* replies queued while the router is corked, to write at uncork */
    bool reap;                          /* to be closed at the next turn */
    uint64_t closing_since;             /* it refused a message at this time (0: it did not) */
    uint64_t linger_since;              /* shut on our side at this time, waiting for the peer's end (0: not) */
    uint8_t id[ZMTP_ROUTING_ID_BYTES];
} slot_t;

struct zmtp_router {
    zmtp_router_opts_t opt;
    int epfd;
    int spare_fd;                       /* given up to accept and close a connection when no fd is left */
    int watch_fd;
    listener_t listeners[LISTENERS_MAX];
    slot_t *slots;
    uint32_t cap, count;
    uint32_t *fifo;                     /* slots with input, in turn */
    uint32_t fifo_head, fifo_len;
    struct epoll_event ev[EVENTS_MAX];  /* from the last wait, not yet processed */
    int ev_count, ev_next;
    bool handed;                        /* a message was handed out since the last look at epoll */
    bool corked;                        /* zmtp_router_cork */
    uint32_t *dirty;                    /* connections with replies held while corked */
    uint32_t dirty_count;
    uint64_t fd_limit;                  /* RLIMIT_NOFILE when the router was made */
    uint64_t fd_base;                   /* fds the process had then, beside every router's connections */
    zmtp_router_stats_t stats;
};

/* Connections open in every router of the process: fds the open-file limit counts. */
static _Atomic uint64_t s_process_connections;

/* Files the process has open now (/proc/self/fd, less the directory's own). */
static uint64_t s_open_files (void)
{
    DIR *d = opendir ("/proc/self/fd");
    if (!d)
        return 64;
    uint64_t n = 0;
    for (struct dirent *e; (e = readdir (d));)
        n += e->d_name[0] != '.';
    closedir (d);
    return n ? n - 1 : 0;
}

zmtp_router_t *zmtp_router_new (const zmtp_router_opts_t *opts)
{
    zmtp_router_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->opt = *opts;
    self->opt.conn.type = ZMTP_TYPE_ROUTER;
    self->opt.conn.as_server = true;
    if (self->opt.conn.max_frames <= 0 || self->opt.conn.max_frames > ZMTP_MSG_FRAMES - 1)
        self->opt.conn.max_frames = ZMTP_MSG_FRAMES - 1;     /* frames[0] is the routing id */
    if (!self->opt.out_soft)
        self->opt.out_soft = OUT_SOFT_DEFAULT;
    for (int i = 0; i < LISTENERS_MAX; i++)
        self->listeners[i].fd = -1;
    self->watch_fd = -1;
    struct rlimit rl;
    self->fd_limit = getrlimit (RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : 1u << 20;
    self->epfd = epoll_create1 (EPOLL_CLOEXEC);
    self->spare_fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
    uint64_t open_now = s_open_files (), conns = atomic_load (&s_process_connections);
    self->fd_base = open_now > conns ? open_now - conns : 0;
    if (self->epfd < 0) {
        zmtp_router_destroy (&self, 0);
        return NULL;
    }
    return self;
}

static slot_t *s_slot (const zmtp_router_t *self, const zmtp_frame_t *id)
{
    if (!id || id->size != ZMTP_ROUTING_ID_BYTES)
        return NULL;
    uint32_t index, gen;
    memcpy (&index, id->data, 4);
    memcpy (&gen, id->data + 4, 4);
    if (index >= self->cap || !self->slots[index].conn || self->slots[index].gen != gen)
        return NULL;
    return &self->slots[index];
}

static void s_interest (zmtp_router_t *self, uint32_t i)
{
    slot_t *s = &self->slots[i];
    const size_t queued = zmtp_conn_queued (s->conn);
    bool reading = zmtp_conn_lingering (s->conn)
                   || (!zmtp_conn_closing (s->conn)
                       && (s->reading ? queued < self->opt.out_soft : queued < self->opt.out_soft / 2));
    bool writing = queued > 0;
    if (reading == s->reading && writing == s->writing)
        return;
    struct epoll_event e = { .events = (reading ? EPOLLIN : 0) | (writing ? EPOLLOUT : 0),
                             .data.u64 = EV (EV_CONN, i, s->gen) };
    epoll_ctl (self->epfd, EPOLL_CTL_MOD, zmtp_conn_fd (s->conn), &e);
    s->reading = reading;
    s->writing = writing;
}

static void s_close (zmtp_router_t *self, uint32_t i)
{
    slot_t *s = &self->slots[i];
    if (!s->conn)
        return;
    zmtp_close_t why = zmtp_conn_why (s->conn);
    if (why == ZMTP_CLOSE_NONE)
        why = ZMTP_CLOSE_LOCAL;
    self->stats.closed[why]++;
    if (why != ZMTP_CLOSE_PEER && why != ZMTP_CLOSE_LOCAL && why != ZMTP_CLOSE_REFUSED && zmtp_conn_error (s->conn)[0]) {
        char peer[ZMTP_PEER_NAME];
        zmtp_peer_name (zmtp_conn_fd (s->conn), peer, sizeof peer);
        snprintf (self->stats.last_error, sizeof self->stats.last_error, "%s: %s", peer, zmtp_conn_error (s->conn));
    }
    epoll_ctl (self->epfd, EPOLL_CTL_DEL, zmtp_conn_fd (s->conn), NULL);
    zmtp_conn_destroy (&s->conn);
    atomic_fetch_sub (&s_process_connections, 1);
    s->gen++;
    s->queued = s->reap = s->stalled = s->corked = false;
    s->awaiting = 0;
    s->closing_since = s->linger_since = 0;
    self->count--;
}

/* Shuts connection I on our side once its queue is written (zmtp_conn_linger), or closes it now when
 * that cannot be. */
static void s_linger (zmtp_router_t *self, uint32_t i, uint64_t now)
{
    slot_t *s = &self->slots[i];
    if (s->linger_since)
        return;
    if (zmtp_conn_linger (s->conn) != 0) {
        s_close (self, i);
        return;
    }
    s->linger_since = now;
    s_interest (self, i);
}

static void s_push (zmtp_router_t *self, uint32_t i)
{
    if (self->slots[i].queued)
        return;
    self->fifo[(self->fifo_head + self->fifo_len) % self->cap] = i;
    self->fifo_len++;
    self->slots[i].queued = true;
}

/* Room for one more connection: the table grown when full. The slot, or -1. */
static int s_free_slot (zmtp_router_t *self)
{
    for (uint32_t i = 0; i < self->cap; i++)
        if (!self->slots[i].conn)
            return (int) i;
    uint32_t cap = self->cap ? self->cap * 2 : 64;
    slot_t *slots = realloc (self->slots, cap * sizeof *slots);
    if (!slots)
        return -1;
    self->slots = slots;
    uint32_t *fifo = malloc (cap * sizeof *fifo);
    uint32_t *dirty = realloc (self->dirty, cap * sizeof *dirty);
    if (dirty)
        self->dirty = dirty;
    if (!fifo || !dirty) {
        free (fifo);
        return -1;
    }
    for (uint32_t k = 0; k < self->fifo_len; k++)
        fifo[k] = self->fifo[(self->fifo_head + k) % self->cap];
    free (self->fifo);
    self->fifo = fifo;
    self->fifo_head = 0;
    memset (self->slots + self->cap, 0, (cap - self->cap) * sizeof *slots);
    uint32_t first = self->cap;
    self->cap = cap;
    return (int) first;
}

/* The connection idle longest with nothing awaiting a reply, closed to make room. */
static bool s_evict_idle (zmtp_router_t *self)
{
    int oldest = -1;
    for (uint32_t i = 0; i < self->cap; i++) {
        slot_t *s = &self->slots[i];
        if (s->conn && s->awaiting == 0
            && (oldest < 0 || zmtp_conn_last_active (s->conn) < zmtp_conn_last_active (self->slots[oldest].conn)))
            oldest = (int) i;
    }
    if (oldest < 0)
        return false;
    zmtp_conn_close (self->slots[oldest].conn, ZMTP_CLOSE_LOCAL);
    s_close (self, (uint32_t) oldest);
    self->stats.evicted++;
    return true;
}

static void s_accept (zmtp_router_t *self, listener_t *l, uint64_t now)
{
    for (int k = 0; k < ACCEPTS_PER_TURN; k++) {
        int fd = accept4 (l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                if (s_evict_idle (self))
                    continue;
                /* No fd and no idle connection: take it off the backlog and close it, rather than
                 * leave the client waiting on a connection nobody will read. */
                if (self->spare_fd >= 0) {
                    close (self->spare_fd);
                    int lost = accept4 (l->fd, NULL, NULL, SOCK_CLOEXEC);
                    if (lost >= 0) {
                        close (lost);
                        self->stats.refused_files++;
                    }
                    self->spare_fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
                }
                return;
            }
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return;     /* EAGAIN: the backlog is empty */
        }
        if (self->opt.max_connections && self->count >= self->opt.max_connections) {
            zmtp_peer_name (fd, self->stats.last_refused, sizeof self->stats.last_refused);
            close (fd);
            self->stats.refused_limit++;
            continue;
        }
        if (self->fd_base + atomic_load (&s_process_connections) + 1 + FD_HEADROOM >= self->fd_limit)
            s_evict_idle (self);
        zmtp_tune (fd);
        int i = s_free_slot (self);
        zmtp_conn_t *conn = i >= 0 ? zmtp_conn_new (fd, &self->opt.conn, now) : NULL;
        if (!conn) {
            if (i < 0)
                close (fd);
            continue;
        }
        slot_t *s = &self->slots[i];
        s->conn = conn;
        s->tag = l->tag;
        s->awaiting = 0;
        s->reading = true;
        s->writing = zmtp_conn_queued (conn) > 0;
        memcpy (s->id, &(uint32_t) { (uint32_t) i }, 4);
        memcpy (s->id + 4, &s->gen, 4);
        struct epoll_event e = { .events = EPOLLIN | (s->writing ? EPOLLOUT : 0),
                                 .data.u64 = EV (EV_CONN, (uint32_t) i, s->gen) };
        if (epoll_ctl (self->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
            zmtp_conn_destroy (&s->conn);
            continue;
        }
        self->count++;
        atomic_fetch_add (&s_process_connections, 1);
        self->stats.accepted++;
    }
}

/* One readiness event. */
static void s_event (zmtp_router_t *self, const struct epoll_event *e, uint64_t now)
{
    const uint64_t d = e->data.u64;
    const int kind = (int) (d >> 62);
    const uint32_t index = (uint32_t) (d >> 32) & 0x3fffffffu, gen = (uint32_t) d;
    if (kind == EV_LISTENER) {
        if (index < LISTENERS_MAX && self->listeners[index].fd >= 0)
            s_accept (self, &self->listeners[index], now);
        return;
    }
    if (kind != EV_CONN || index >= self->cap || !self->slots[index].conn || self->slots[index].gen != gen)
        return;     /* the watched fd (the caller drains it), or a connection closed since */
    slot_t *s = &self->slots[index];
    if (e->events & EPOLLOUT) {
        if (zmtp_conn_flush (s->conn) < 0) {
            s_close (self, index);
            return;
        }
        if (zmtp_conn_closing (s->conn) && zmtp_conn_queued (s->conn) == 0) {
            s_linger (self, index, now);
            if (!s->conn)
                return;
        }
        if (s->stalled && zmtp_conn_queued (s->conn) < self->opt.out_soft / 2) {
            s->stalled = false;
            if (zmtp_conn_has_input (s->conn))
                s_push (self, index);
        }
    }
    if (e->events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        int n = zmtp_conn_read (s->conn, now);
        if (n < 0) {
            s_close (self, index);
            return;
        }
        if (n > 0 && !s->stalled)
            s_push (self, index);
    }
    s_interest (self, index);
}

/* Processes the events of the last wait, or of a look (epoll_wait with TIMEOUT_MS) when none is left.
 * The number processed. */
static int s_poll (zmtp_router_t *self, int timeout_ms, uint64_t now)
{
    if (self->ev_next >= self->ev_count) {
        self->ev_count = epoll_wait (self->epfd, self->ev, EVENTS_MAX, timeout_ms);
        self->ev_next = 0;
        self->handed = false;
        if (self->ev_count <= 0) {
            self->ev_count = 0;
            return 0;
        }
    }
    int n = 0;
    while (self->ev_next < self->ev_count) {
        s_event (self, &self->ev[self->ev_next++], now);
        n++;
    }
    return n;
}

static void s_reap (zmtp_router_t *self)
{
    for (uint32_t i = 0; i < self->cap; i++)
        if (self->slots[i].conn && self->slots[i].reap)
            s_close (self, i);
}

int zmtp_router_recv (zmtp_router_t *self, zmtp_router_msg_t *out, uint64_t now)
{
    for (int pass = 0; pass < 2; pass++) {
        while (self->fifo_len) {
            uint32_t i = self->fifo[self->fifo_head];
            self->fifo_head = (self->fifo_head + 1) % self->cap;
            self->fifo_len--;
            slot_t *s = &self->slots[i];
            s->queued = false;
            if (!s->conn)
                continue;
            if (zmtp_conn_queued (s->conn) >= self->opt.out_soft) {
                s->stalled = true;      /* taken up again once its queue drains (s_event) */
                continue;
            }
            zmtp_msg_t m;
            int rc = zmtp_conn_next (s->conn, &m, now);
            if (rc < 0) {
                s_close (self, i);
                continue;
            }
            s_interest (self, i);   /* the handshake may have queued bytes, a refusal stops the reading */
            if (rc == 0)
                continue;
            if (zmtp_conn_has_input (s->conn) && !zmtp_conn_closing (s->conn))
                s_push (self, i);   /* the next message waits its turn behind the other connections */
            if (m.refused)
                s->closing_since = now;
            s->awaiting++;
            out->tag = s->tag;
            out->msg.nframes = m.nframes + 1;
            out->msg.total_frames = m.total_frames + 1;
            out->msg.bytes = m.bytes + ZMTP_ROUTING_ID_BYTES;
            out->msg.refused = m.refused;
            out->msg.frames[0] = (zmtp_frame_t) { s->id, ZMTP_ROUTING_ID_BYTES };
            memcpy (out->msg.frames + 1, m.frames, (size_t) m.nframes * sizeof m.frames[0]);
            self->handed = true;
            return 1;
        }
        /* Nothing buffered: look at epoll again, unless messages went out since the last look and its
         * events are all taken: then the caller's next call (or its wait) looks, and a lone request
         * costs no empty epoll_wait after its reply. */
        if (pass == 1 || (self->handed && self->ev_next >= self->ev_count)) {
            self->handed = false;
            break;
        }
        if (s_poll (self, 0, now) == 0)
            break;
    }
    return 0;
}

int zmtp_router_send (zmtp_router_t *self, const zmtp_frame_t *frames, int n, uint64_t now)
{
    slot_t *s = n >= 2 ? s_slot (self, &frames[0]) : NULL;
    if (!s || zmtp_conn_closed (s->conn)) {
        errno = EHOSTUNREACH;
        return -1;
    }
    uint32_t i = (uint32_t) (s - self->slots);
    if (self->corked && !s->corked && self->dirty_count < self->cap) {
        s->corked = true;
        zmtp_conn_hold (s->conn, true);
        self->dirty[self->dirty_count++] = i;
    }
    if (zmtp_conn_send (s->conn, frames + 1, n - 1, now) != 0) {
        int e = errno;
        if (e == EPIPE || e == ENOTCONN) {
            s->reap = zmtp_conn_closed (s->conn);
            e = EHOSTUNREACH;
        }
        errno = e;
        return -1;
    }
    if (s->awaiting)
        s->awaiting--;
    if (s->corked)
        return 0;       /* written, and looked at, when the router is uncorked */
    if (zmtp_conn_closing (s->conn) && zmtp_conn_queued (s->conn) == 0)
        s_linger (self, i, now);
    else
        s_interest (self, i);
    return 0;
}

void zmtp_router_set_max_message_bytes (zmtp_router_t *self, uint64_t bytes)
{
    self->opt.conn.max_message_bytes = bytes;
    for (uint32_t i = 0; i < self->cap; i++)
        if (self->slots[i].conn)
            zmtp_conn_set_max_message_bytes (self->slots[i].conn, bytes);
}

void zmtp_router_cork (zmtp_router_t *self, bool on, uint64_t now)
{
    self->corked = on;
    if (on)
        return;
    for (uint32_t k = 0; k < self->dirty_count; k++) {
        uint32_t i = self->dirty[k];
        slot_t *s = &self->slots[i];
        if (!s->conn || !s->corked)
            continue;
        s->corked = false;
        zmtp_conn_hold (s->conn, false);
        if (zmtp_conn_flush (s->conn) < 0) {
            s_close (self, i);
            continue;
        }
        if (zmtp_conn_closing (s->conn) && zmtp_conn_queued (s->conn) == 0)
            s_linger (self, i, now);
        else
            s_interest (self, i);
    }
    self->dirty_count = 0;
}

void zmtp_router_tick (zmtp_router_t *self, uint64_t now)
{
    s_reap (self);
    for (uint32_t i = 0; i < self->cap; i++) {
        slot_t *s = &self->slots[i];
        if (!s->conn)
            continue;
        if (zmtp_conn_tick (s->conn, now) || zmtp_conn_closed (s->conn)
            || (s->linger_since && now - s->linger_since > LINGER_NS))
            s_close (self, i);
        else if (s->closing_since && !s->linger_since && now - s->closing_since > CLOSING_NS)
            s_linger (self, i, now);
        else
            s_interest (self, i);
    }
}

int zmtp_router_bind (zmtp_router_t *self, const char *endpoint, int tag, bool reuseport, char *bound, char *err,
                      size_t errlen)
{
    int l = 0;
    while (l < LISTENERS_MAX && self->listeners[l].fd >= 0)
        l++;
    if (l == LISTENERS_MAX) {
        snprintf (err, errlen, "%s: no room for another listener (%d at most)", endpoint, LISTENERS_MAX);
        errno = ENOSPC;
        return -1;
    }
    char got[ZMTP_ENDPOINT_MAX];
    int fd = zmtp_listen (endpoint, 1024, reuseport, got, err, errlen);
    if (fd < 0)
        return -1;
    struct epoll_event e = { .events = EPOLLIN, .data.u64 = EV (EV_LISTENER, (uint32_t) l, 0) };
    if (epoll_ctl (self->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
        snprintf (err, errlen, "%s: epoll: %s", endpoint, strerror (errno));
        close (fd);
        return -1;
    }
    listener_t *li = &self->listeners[l];
    li->fd = fd;
    li->tag = tag;
    li->ipc_file = strncmp (endpoint, "ipc://", 6) == 0 && endpoint[6] != '@';
    snprintf (li->endpoint, sizeof li->endpoint, "%s", got);
    if (bound)
        snprintf (bound, ZMTP_ENDPOINT_MAX, "%s", got);
    return l;
}

static void s_unlisten (zmtp_router_t *self, listener_t *l)
{
    epoll_ctl (self->epfd, EPOLL_CTL_DEL, l->fd, NULL);
    close (l->fd);
    if (l->ipc_file)
        unlink (l->endpoint + 6);
    l->fd = -1;
}

void zmtp_router_unbind (zmtp_router_t *self, int tag)
{
    for (int l = 0; l < LISTENERS_MAX; l++)
        if (self->listeners[l].fd >= 0 && self->listeners[l].tag == tag)
            s_unlisten (self, &self->listeners[l]);
}

void zmtp_router_close_tag (zmtp_router_t *self, int tag)
{
    for (uint32_t i = 0; i < self->cap; i++)
        if (self->slots[i].conn && self->slots[i].tag == tag) {
            zmtp_conn_flush (self->slots[i].conn);
            s_linger (self, i, clock_now_ns ());
        }
}

int zmtp_router_watch (zmtp_router_t *self, int fd)
{
    struct epoll_event e = { .events = EPOLLIN, .data.u64 = EV (EV_WATCH, 0, 0) };
    if (self->watch_fd >= 0)
        epoll_ctl (self->epfd, EPOLL_CTL_DEL, self->watch_fd, NULL);
    self->watch_fd = fd;
    return fd >= 0 ? epoll_ctl (self->epfd, EPOLL_CTL_ADD, fd, &e) : 0;
}

int zmtp_router_wait (zmtp_router_t *self, int timeout_ms)
{
    if (self->fifo_len || self->ev_next < self->ev_count)
        return 1;
    int n = epoll_wait (self->epfd, self->ev, EVENTS_MAX, timeout_ms);
    self->ev_count = n > 0 ? n : 0;
    self->ev_next = 0;
    self->handed = false;
    return self->ev_count;
}

const uint8_t *zmtp_router_peer_key (const zmtp_router_t *self, const zmtp_frame_t *routing_id)
{
    slot_t *s = s_slot (self, routing_id);
    return s ? zmtp_conn_curve_client_key (s->conn) : NULL;
}

uint32_t zmtp_router_connections (const zmtp_router_t *self) { return self->count; }
const zmtp_router_stats_t *zmtp_router_stats (const zmtp_router_t *self) { return &self->stats; }

void zmtp_router_destroy (zmtp_router_t **self_p, uint32_t linger_ms)
{
    if (!self_p || !*self_p)
        return;
    zmtp_router_t *self = *self_p;
    for (int l = 0; l < LISTENERS_MAX; l++)
        if (self->listeners[l].fd >= 0)
            s_unlisten (self, &self->listeners[l]);
    /* Replies still queued get LINGER_MS to be written; then each connection is shut on our side and
     * read until the peer's end (within LINGER_MS too, and a little more), so that no unread request
     * turns the close into a reset that would drop replies the peer has not read yet. */
    const uint64_t until = clock_now_ns () + (uint64_t) linger_ms * 1000000ull;
    for (int phase = 0; phase < 2; phase++) {
        const uint64_t end = phase ? clock_now_ns () + (uint64_t) (linger_ms < 100 ? 100 : linger_ms) * 1000000ull : until;
        for (;;) {
            bool left = false;
            for (uint32_t i = 0; i < self->cap; i++) {
                zmtp_conn_t *c = self->slots[i].conn;
                if (!c || zmtp_conn_closed (c))
                    continue;
                if (phase == 0)
                    left |= zmtp_conn_queued (c) && zmtp_conn_flush (c) == 0;
                else if (zmtp_conn_linger (c) == 0 && zmtp_conn_read (c, clock_now_ns ()) == 0)
                    left = true;
            }
            if (!left || clock_now_ns () >= end)
                break;
            struct timespec ts = { 0, 1000000 };
            nanosleep (&ts, NULL);
        }
    }
    for (uint32_t i = 0; i < self->cap; i++)
        if (self->slots[i].conn) {
            zmtp_conn_destroy (&self->slots[i].conn);
            atomic_fetch_sub (&s_process_connections, 1);
        }
    if (self->epfd >= 0)
        close (self->epfd);
    if (self->spare_fd >= 0)
        close (self->spare_fd);
    free (self->slots);
    free (self->fifo);
    free (self->dirty);
    free (self);
    *self_p = NULL;
}
