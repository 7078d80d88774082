/* The zmtp transport of the front's endpoints (endpoint.h): one zmtp_router per front, a listener per
 * slot (the slot is the listener's tag), the front's wake-up fd in the router's epoll set. */
#define _GNU_SOURCE
#include "front/endpoint_impl.h"

#include "base/log.h"
#include "clock.h"
#include "zmtp_addr.h"
#include "zmtp_router.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HANDSHAKE_MS 10000          /* a connection's greeting and handshake must end within this */
#define OUT_SOFT (1u << 20)         /* a client with this much queued is not read from until it reads */
#define OUT_HARD (8u << 20)         /* nor sent more: a reply past this is lost, counted (a send failure) */

_Static_assert (sizeof (frame_t) == sizeof (zmtp_frame_t) && offsetof (frame_t, data) == offsetof (zmtp_frame_t, data)
                    && offsetof (frame_t, size) == offsetof (zmtp_frame_t, size),
                "frame_t and zmtp_frame_t must be the same views");
_Static_assert (MAX_FRAMES == ZMTP_MSG_FRAMES, "the front and the engine keep as many frames");

typedef struct {
    zmtp_keypair_t keys;            /* the server's (CURVE) */
    int watched;                    /* the wake-up fd in the router's set (-1: none yet) */
} zmtp_state_t;

static bool s_authorize (const uint8_t key[ZMTP_CURVE_KEY_BYTES], void *arg) { return auth_allows (arg, key); }

/* The router and what it needs beside it live in one allocation hung on self->router. */
typedef struct {
    zmtp_router_t *router;
    zmtp_state_t state;
} zmtp_front_t;

static zmtp_front_t *s_front (endpoints_t *self) { return self->router; }

_Static_assert (sizeof ((endpoints_t *) 0)->zmtp_seen / sizeof (uint64_t) >= ZMTP_CLOSE_COUNT + 3,
                "zmtp_seen holds the close reasons and three more counters");

static int s_start (endpoints_t *self, char *err, size_t errlen)
{
    zmtp_front_t *z = calloc (1, sizeof *z);
    if (!z) {
        snprintf (err, errlen, "out of memory");
        return -1;
    }
    z->state.watched = -1;
    zmtp_router_opts_t o = {
        .conn = { .mechanism = self->auth ? ZMTP_MECH_CURVE : ZMTP_MECH_NULL,
                  .max_message_bytes = self->cfg.max_message_bytes, .max_frames = MAX_FRAMES - 1,
                  .heartbeat_ivl_ms = self->cfg.heartbeat_ms, .heartbeat_timeout_ms = 3 * self->cfg.heartbeat_ms,
                  .handshake_ms = HANDSHAKE_MS, .out_hard = OUT_HARD },
        .max_connections = self->cfg.max_connections, .out_soft = OUT_SOFT,
    };
    if (self->auth) {
        auth_keypair (self->auth, z->state.keys.public_key, z->state.keys.secret_key);
        o.conn.curve_keys = &z->state.keys;
        o.conn.authorize = s_authorize;
        o.conn.authorize_arg = self->auth;
    }
    z->router = zmtp_router_new (&o);
    if (!z->router) {
        snprintf (err, errlen, "cannot start the ZMTP engine: %s", strerror (errno));
        free (z);
        return -1;
    }
    self->router = z;
    return 0;
}

static void s_stop (endpoints_t *self, uint32_t linger_ms)
{
    zmtp_front_t *z = s_front (self);
    if (!z)
        return;
    zmtp_router_destroy (&z->router, linger_ms);
    explicit_bzero (&z->state.keys, sizeof z->state.keys);
    free (z);
    self->router = NULL;
}

/* tcp:// endpoints the fronts of this process share (SO_REUSEPORT), with how many fronts listen on each:
 * the first to bind one checks that no other process holds its port (a socket without SO_REUSEPORT
 * does not let ours share it; one with it, of another sigserve, would: the check refuses that). */
static pthread_mutex_t s_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[CONFIG_ENDPOINT_MAX];
    int listeners;
} s_shared[2 * CONFIG_MAX_ENDPOINTS];

static bool s_shares (const endpoints_t *self, const char *endpoint)
{
    return self->cfg.share_tcp && strncmp (endpoint, "tcp://", 6) == 0;
}

/* Counts one more (DELTA 1) or one fewer (-1) listener of ENDPOINT; the count before. */
static int s_shared_count (const char *endpoint, int delta)
{
    int free_at = -1, before = 0;
    for (size_t k = 0; k < sizeof s_shared / sizeof s_shared[0]; k++) {
        if (s_shared[k].listeners && strcmp (s_shared[k].name, endpoint) == 0) {
            before = s_shared[k].listeners;
            s_shared[k].listeners += delta;
            return before;
        }
        if (!s_shared[k].listeners && free_at < 0)
            free_at = (int) k;
    }
    if (delta > 0 && free_at >= 0) {
        snprintf (s_shared[free_at].name, sizeof s_shared[free_at].name, "%s", endpoint);
        s_shared[free_at].listeners = 1;
    }
    return 0;
}

static int s_bind (endpoints_t *self, int i, const char *endpoint, char *err, size_t errlen)
{
    if (!s_shares (self, endpoint))
        return zmtp_router_bind (s_front (self)->router, endpoint, i, false, NULL, err, errlen) < 0 ? -1 : 0;
    pthread_mutex_lock (&s_shared_lock);
    int rc = 0;
    if (s_shared_count (endpoint, 0) == 0) {
        char bound[ZMTP_ENDPOINT_MAX];
        int probe = zmtp_listen (endpoint, 1, false, bound, err, errlen);
        if (probe < 0)
            rc = -1;
        else
            close (probe);
    }
    if (rc == 0)
        rc = zmtp_router_bind (s_front (self)->router, endpoint, i, true, NULL, err, errlen) < 0 ? -1 : 0;
    if (rc == 0)
        s_shared_count (endpoint, 1);
    pthread_mutex_unlock (&s_shared_lock);
    return rc;
}

static void s_unlisten (endpoints_t *self, int i)
{
    zmtp_router_unbind (s_front (self)->router, i);
    if (s_shares (self, self->slots[i].name)) {
        pthread_mutex_lock (&s_shared_lock);
        s_shared_count (self->slots[i].name, -1);
        pthread_mutex_unlock (&s_shared_lock);
    }
}

static void s_unbind (endpoints_t *self, int i) { s_unlisten (self, i); }

static void s_close (endpoints_t *self, int i, uint32_t linger_ms)
{
    (void) linger_ms;
    if (!self->slots[i].closing)
        s_unlisten (self, i);
    zmtp_router_close_tag (s_front (self)->router, i);
}

static int s_recv (endpoints_t *self, message_t *msg)
{
    zmtp_router_msg_t m;
    uint64_t now = clock_now_ns ();
    if (zmtp_router_recv (s_front (self)->router, &m, now) != 1)
        return 0;
    msg->socket = m.tag;
    msg->nframes = m.msg.nframes;
    msg->total_frames = m.msg.total_frames;
    msg->bytes = m.msg.bytes;
    msg->cut = m.msg.refused;
    msg->t_recv = now;
    memcpy (msg->frames, m.msg.frames, (size_t) m.msg.nframes * sizeof msg->frames[0]);
    return 1;
}

static void s_release (endpoints_t *self, message_t *msg)
{
    (void) self;
    msg->nframes = 0;
}

static int s_send (endpoints_t *self, int slot, const frame_t *frames, int count)
{
    (void) slot;
    return zmtp_router_send (s_front (self)->router, (const zmtp_frame_t *) frames, count, clock_now_ns ());
}

/* A reload: max_message_bytes bounds every connection's next message (heartbeat_ms and max_connections
 * keep their start-up values: main's reload says so). */
static void s_options (endpoints_t *self)
{
    zmtp_router_set_max_message_bytes (s_front (self)->router, self->cfg.max_message_bytes);
}

static void s_cork (endpoints_t *self, bool on) { zmtp_router_cork (s_front (self)->router, on, clock_now_ns ()); }

static void s_watch (endpoints_t *self, uint64_t now_ns, bool force);

static int s_wait (endpoints_t *self, int wake_fd, int timeout_ms)
{
    zmtp_front_t *z = s_front (self);
    if (z->state.watched != wake_fd) {
        zmtp_router_watch (z->router, wake_fd);
        z->state.watched = wake_fd;
    }
    int rc = zmtp_router_wait (z->router, timeout_ms);
    if (rc > 0)
        s_watch (self, clock_now_ns (), false);
    return rc;
}

/* The router's counters since they were last looked at: refused handshakes and connections, logged
 * and counted as the libzmq transport's monitor events are. */
static void s_watch (endpoints_t *self, uint64_t now_ns, bool force)
{
    (void) force;
    zmtp_front_t *z = s_front (self);
    zmtp_router_tick (z->router, now_ns);
    const zmtp_router_stats_t *st = zmtp_router_stats (z->router);
    self->connections = zmtp_router_connections (z->router);
    static const struct {
        zmtp_close_t why;
        stats_auth_failure_t reason;
    } auth[] = { { ZMTP_CLOSE_DENIED, AUTH_FAIL_DENIED }, { ZMTP_CLOSE_MECHANISM, AUTH_FAIL_PLAINTEXT },
                 { ZMTP_CLOSE_CRYPTO, AUTH_FAIL_WRONG_KEY }, { ZMTP_CLOSE_PROTOCOL, AUTH_FAIL_PROTOCOL } };
    const char *where = "server.endpoints";
    for (int i = 0; i < SLOTS; i++)
        if (self->slots[i].open) {
            where = self->slots[i].name;
            break;
        }
    for (size_t k = 0; k < sizeof auth / sizeof auth[0]; k++) {
        uint64_t *seen = &self->zmtp_seen[auth[k].why];
        while (*seen < st->closed[auth[k].why]) {
            (*seen)++;
            if (self->auth)
                endpoints_auth_failed (self, where, auth[k].reason, now_ns);
        }
    }
    uint64_t *limit = &self->zmtp_seen[ZMTP_CLOSE_COUNT];
    while (*limit < st->refused_limit) {
        (*limit)++;
        endpoints_limit_refused (self, where, st->last_refused, now_ns);
    }
    uint64_t *evicted = &self->zmtp_seen[ZMTP_CLOSE_COUNT + 1];
    if (*evicted < st->evicted || self->zmtp_seen[ZMTP_CLOSE_COUNT + 2] < st->refused_files) {
        log_warn ("%s: near the open-file limit: closed %llu idle connection(s) to make room for new ones, %llu "
                  "new one(s) closed for lack of a file descriptor (raise the limit: ulimit -n, LimitNOFILE=)",
                  where, (unsigned long long) (st->evicted - *evicted),
                  (unsigned long long) (st->refused_files - self->zmtp_seen[ZMTP_CLOSE_COUNT + 2]));
        *evicted = st->evicted;
        self->zmtp_seen[ZMTP_CLOSE_COUNT + 2] = st->refused_files;
    }
}

static bool s_refused (endpoints_t *self, const message_t *msg, uint64_t now_ns)
{
    (void) self, (void) msg, (void) now_ns;
    return false;
}

static const void *s_client_key (endpoints_t *self, const message_t *msg, size_t *len)
{
    const uint8_t *key = self->auth ? zmtp_router_peer_key (s_front (self)->router, (const zmtp_frame_t *) &msg->frames[0])
                                    : NULL;
    if (key) {
        *len = ZMTP_CURVE_KEY_BYTES;
        return key;
    }
    *len = msg->frames[0].size;
    return msg->frames[0].data;
}

/* tcp://HOST:PORT bound as tcp://HOST:0, the engine's own rules deciding what HOST may be; any other
 * scheme (inproc://, reaching here from a reload whose file names another transport) judged by the engine
 * as its bind would judge it, without the endpoint its message starts with (the caller names it). */
static int s_probe (const server_config_t *cfg, const char *name, char *bound, size_t boundlen, char *err, size_t errlen)
{
    (void) cfg;
    if (strncmp (name, "tcp://", 6) != 0) {
        if (zmtp_endpoint_check (name, false, err, errlen) != 0) {
            const size_t n = strlen (name);
            if (strncmp (err, name, n) == 0 && strncmp (err + n, ": ", 2) == 0)
                memmove (err, err + n + 2, strlen (err + n + 2) + 1);
            return -1;
        }
        snprintf (bound, boundlen, "%s", name);
        return 0;
    }
    const char *colon = strrchr (name, ':');
    char any[ZMTP_ENDPOINT_MAX], got[ZMTP_ENDPOINT_MAX];
    snprintf (any, sizeof any, "%.*s:0", colon ? (int) (colon - name) : 0, name);
    int fd = zmtp_listen (any, 1, false, got, err, errlen);
    if (fd < 0)
        return -1;
    close (fd);
    snprintf (bound, boundlen, "%s", got);
    return 0;
}

const endpoint_ops_t endpoint_zmtp_ops = {
    .name = "zmtp", .start = s_start, .stop = s_stop, .bind = s_bind, .unbind = s_unbind, .close = s_close,
    .recv = s_recv, .release = s_release, .send = s_send, .wait = s_wait, .options = s_options, .cork = s_cork, .watch = s_watch,
    .refused = s_refused, .client_key = s_client_key, .probe = s_probe,
};
