#define _GNU_SOURCE
#include "front/endpoint.h"

#include "base/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#define SLOTS (2 * CONFIG_MAX_ENDPOINTS)    /* room for a reload's new endpoints next to the old */
#define KNOWN_FDS 65536                     /* connections on fds past this are not checked per message */

typedef struct {
    void *socket;               /* NULL: free slot */
    void *monitor;              /* PAIR receiving the socket's connection events (max_connections) */
    char name[CONFIG_ENDPOINT_MAX];
    bool added;                 /* bound by the last endpoints_add, not committed yet */
    bool closing;               /* removed by a reload: closed once inflight is 0 */
    uint32_t inflight;
} slot_t;

struct _endpoints_t {
    uint32_t connections;       /* accepted and not yet closed, over every socket */
    uint64_t last_limit_warn;   /* the connection-limit warning, at most once a second */
    uint64_t refused_since_warn;
    void *ctx;
    bool own_ctx;
    auth_t *auth;               /* CURVE (NULL: off) */
    stats_t *stats;             /* auth failures are counted here (may be NULL) */
    uint64_t last_auth_warn;    /* the refused-handshake warning, at most once a second ... */
    uint64_t auth_since_warn[AUTH_FAIL_COUNT];     /* ... with the counts since the last one */
    server_config_t cfg;        /* the socket options */
    slot_t slots[SLOTS];
    zmq_pollitem_t items[2 * SLOTS + 1];
    int refused[64];            /* fds shut down for the limit: their disconnection is not counted */
    size_t refused_count;
    uint8_t known[KNOWN_FDS / 8];   /* fds of the connections counted (max_connections): a bit each */
};

/* ipc://PATH: a live listener there means another server owns it (refuse); a socket file nobody
 * listens on is a stale leftover (remove it, so bind can create a fresh one). */
static int s_ipc_check (const char *endpoint, char *err, size_t errlen)
{
    const char *path = endpoint + strlen ("ipc://");
    if (path[0] == '@')
        return 0;               /* Linux abstract namespace: no file */
    struct stat st;
    if (lstat (path, &st) != 0)
        return 0;
    if (!S_ISSOCK (st.st_mode)) {
        snprintf (err, errlen, "server.endpoints: cannot bind %s: %s exists and is not a socket", endpoint, path);
        return -1;
    }
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (strlen (path) >= sizeof a.sun_path) {
        snprintf (err, errlen, "server.endpoints: cannot bind %s: the path is longer than %zu bytes", endpoint,
                  sizeof a.sun_path - 1);
        return -1;
    }
    strcpy (a.sun_path, path);
    int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int live = fd >= 0 && connect (fd, (struct sockaddr *) &a, sizeof a) == 0;
    int e = errno;
    if (fd >= 0)
        close (fd);
    if (live) {
        snprintf (err, errlen, "server.endpoints: cannot bind %s: another process is serving on it (a live "
                  "socket); stop it or choose another path", endpoint);
        return -1;
    }
    if (e == ECONNREFUSED && unlink (path) == 0)
        log_info ("%s: removed a stale socket file nobody listened on", endpoint);
    return 0;
}

/* Whether ENDPOINT can be reached only from this host: ipc://, inproc://, tcp:// on a loopback
 * address or the loopback interface. */
static bool s_local (const char *endpoint)
{
    if (strncmp (endpoint, "tcp://", 6) != 0)
        return true;
    const char *host = endpoint + 6;
    return strncmp (host, "127.", 4) == 0 || strncmp (host, "[::1]:", 6) == 0 || strncmp (host, "lo:", 3) == 0
           || strncmp (host, "localhost:", 10) == 0;
}

/* A tcp:// endpoint that names a host where ZeroMQ wants an address or an interface (ENODEV): the
 * address to use instead, into HINT. */
static void s_host_hint (const char *endpoint, char *hint, size_t len)
{
    if (strncmp (endpoint, "tcp://", 6) != 0)
        return;
    const char *host = endpoint + 6, *colon = strrchr (host, ':');
    if (!colon || colon == host || host[0] == '[')
        return;
    char name[CONFIG_ENDPOINT_MAX + 1];
    snprintf (name, sizeof name, "%.*s", (int) (colon - host), host);
    struct addrinfo want = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *found = NULL;
    char addr[INET_ADDRSTRLEN] = "";
    if (getaddrinfo (name, NULL, &want, &found) == 0 && found) {
        inet_ntop (AF_INET, &((struct sockaddr_in *) found->ai_addr)->sin_addr, addr, sizeof addr);
        freeaddrinfo (found);
    }
    if (addr[0])
        snprintf (hint, len, " (ZeroMQ binds an address or an interface name, not a host name: \"%.64s\" is %s, so "
                  "use tcp://%s%.8s, or tcp://*%.8s for every interface)", name, addr, addr, colon, colon);
    else
        snprintf (hint, len, " (ZeroMQ binds an address or an interface name, not a host name: use "
                  "tcp://ADDRESS%.8s, or tcp://*%.8s for every interface)", colon, colon);
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

static void *s_bind (endpoints_t *self, const char *endpoint, void **monitor, char *err, size_t errlen)
{
    bool ipc = strncmp (endpoint, "ipc://", 6) == 0;
    if (self->auth && strncmp (endpoint, "inproc://", 9) == 0) {
        snprintf (err, errlen, "server.endpoints: %s: inproc endpoints make no security handshake, so they cannot "
                  "serve with server.curve; use tcp:// or ipc://", endpoint);
        return NULL;
    }
    if (ipc && s_ipc_check (endpoint, err, errlen) != 0)
        return NULL;
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
        return NULL;
    }
    if (rc == 0)
        rc = zmq_bind (s, endpoint);
    if (rc != 0) {
        const int e = zmq_errno ();
        char hint[1024] = "";
        if (e == ENODEV)
            s_host_hint (endpoint, hint, sizeof hint);
        snprintf (err, errlen, "server.endpoints: cannot bind %s: %s%s", endpoint, zmq_strerror (e), hint);
        if (s)
            zmq_close (s);
        return NULL;
    }
    if (!self->auth && !s_local (endpoint))
        log_warn ("%s serves plaintext on an address other hosts can reach: anyone who reaches the port can send "
                  "requests and read the replies; bind 127.0.0.1, or set server.curve (docs/security.md)", endpoint);
    if (self->auth && s_prove (self, s, err, errlen) != 0) {
        zmq_close (s);
        return NULL;
    }
    *monitor = NULL;
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
            return NULL;
        }
        *monitor = pair;
    }
    if (ipc && endpoint[6] != '@' && chmod (endpoint + 6, self->cfg.ipc_file_mode) != 0)
        log_warn ("%s: cannot set its mode to %s: %s", endpoint, self->cfg.ipc_mode, strerror (errno));
    log_info ("listening on %s", endpoint);
    return s;
}

static int s_find (const endpoints_t *self, const char *name)
{
    for (int i = 0; i < SLOTS; i++)
        if (self->slots[i].socket && !self->slots[i].closing && strcmp (self->slots[i].name, name) == 0)
            return i;
    return -1;
}

static int s_free_slot (const endpoints_t *self)
{
    for (int i = 0; i < SLOTS; i++)
        if (!self->slots[i].socket)
            return i;
    return -1;
}

static void s_close (endpoints_t *self, int i, uint32_t linger_ms)
{
    slot_t *sl = &self->slots[i];
    if (!sl->socket)
        return;
    int linger = (int) linger_ms;
    if (sl->monitor) {
        zmq_socket_monitor (sl->socket, NULL, 0);
        zmq_close (sl->monitor);
    }
    zmq_setsockopt (sl->socket, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close (sl->socket);     /* libzmq removes an ipc:// socket file it created */
    memset (sl, 0, sizeof *sl);
}

endpoints_t *endpoints_new (const server_config_t *cfg, auth_t *auth, stats_t *stats, char *err, size_t errlen)
{
    endpoints_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    self->auth = auth;
    self->stats = stats;
    self->ctx = auth ? auth_context (auth) : NULL;
    if (!self->ctx) {
        self->ctx = zmq_ctx_new ();
        self->own_ctx = true;
        if (!self->ctx) {
            snprintf (err, errlen, "cannot create a ZeroMQ context: %s", zmq_strerror (zmq_errno ()));
            free (self);
            return NULL;
        }
        zmq_ctx_set (self->ctx, ZMQ_IO_THREADS, (int) cfg->io_threads);
    }
    if (endpoints_add (self, cfg, err, errlen) != 0) {
        endpoints_destroy (&self, 0);
        return NULL;
    }
    for (int i = 0; i < SLOTS; i++)
        self->slots[i].added = false;
    return self;
}

void endpoints_destroy (endpoints_t **self_p, uint32_t linger_ms)
{
    if (!self_p || !*self_p)
        return;
    endpoints_t *self = *self_p;
    for (int i = 0; i < SLOTS; i++)
        s_close (self, i, linger_ms);
    if (self->own_ctx)
        zmq_ctx_term (self->ctx);
    free (self);
    *self_p = NULL;
}

void *endpoints_context (endpoints_t *self) { return self->ctx; }
void *endpoints_socket (endpoints_t *self, int slot) { return self->slots[slot].socket; }
const char *endpoints_name (const endpoints_t *self, int slot) { return self->slots[slot].name; }

int endpoints_first (const endpoints_t *self) { return endpoints_next (self, -1); }

int endpoints_next (const endpoints_t *self, int slot)
{
    for (int i = slot + 1; i < SLOTS; i++)
        if (self->slots[i].socket)
            return i;
    return -1;
}

int endpoints_poll_items (endpoints_t *self, int extra_fd, zmq_pollitem_t **items)
{
    int n = 0;
    for (int i = 0; i < SLOTS; i++)
        if (self->slots[i].socket)
            self->items[n++] = (zmq_pollitem_t) { .socket = self->slots[i].socket, .events = ZMQ_POLLIN };
    for (int i = 0; i < SLOTS; i++)     /* a connection past the limit is closed as soon as it comes */
        if (self->slots[i].monitor)
            self->items[n++] = (zmq_pollitem_t) { .socket = self->slots[i].monitor, .events = ZMQ_POLLIN };
    self->items[n++] = (zmq_pollitem_t) { .fd = extra_fd, .events = ZMQ_POLLIN };
    *items = self->items;
    return n;
}

void endpoints_hold (endpoints_t *self, int slot) { self->slots[slot].inflight++; }
void endpoints_release (endpoints_t *self, int slot) { self->slots[slot].inflight--; }

int endpoints_add (endpoints_t *self, const server_config_t *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < SLOTS; i++)
        self->slots[i].added = false;
    server_config_t options = self->cfg;     /* new sockets take the new options */
    self->cfg = *cfg;
    for (size_t e = 0; e < cfg->endpoint_count; e++) {
        if (s_find (self, cfg->endpoints[e]) >= 0)
            continue;
        int i = s_free_slot (self);
        void *monitor = NULL;
        void *s = i >= 0 ? s_bind (self, cfg->endpoints[e], &monitor, err, errlen) : NULL;
        if (i < 0)
            snprintf (err, errlen, "server.endpoints: no room for %s while earlier endpoints are closing",
                      cfg->endpoints[e]);
        if (!s) {
            endpoints_drop_added (self);
            self->cfg = options;
            return -1;
        }
        slot_t *sl = &self->slots[i];
        sl->socket = s;
        sl->monitor = monitor;
        snprintf (sl->name, sizeof sl->name, "%s", cfg->endpoints[e]);
        sl->added = true;
    }
    return 0;
}

void endpoints_drop_added (endpoints_t *self)
{
    for (int i = 0; i < SLOTS; i++)
        if (self->slots[i].added)
            s_close (self, i, 0);
}

void endpoints_commit (endpoints_t *self, const server_config_t *cfg)
{
    for (int i = 0; i < SLOTS; i++) {
        slot_t *sl = &self->slots[i];
        sl->added = false;
        if (!sl->socket || sl->closing)
            continue;
        bool kept = false;
        for (size_t e = 0; e < cfg->endpoint_count && !kept; e++)
            kept = strcmp (cfg->endpoints[e], sl->name) == 0;
        if (!kept) {
            /* No new connections from now on; requests already admitted are answered on it. */
            zmq_unbind (sl->socket, sl->name);
            sl->closing = true;
            log_info ("reload: %s removed; closing it once its %u request(s) in flight are answered", sl->name,
                      sl->inflight);
        }
    }
}

bool endpoints_closing (const endpoints_t *self, int slot) { return self->slots[slot].closing; }

bool endpoints_any_closing (const endpoints_t *self)
{
    for (int i = 0; i < SLOTS; i++)
        if (self->slots[i].closing)
            return true;
    return false;
}

void endpoints_close_idle (endpoints_t *self)
{
    for (int i = 0; i < SLOTS; i++)
        if (self->slots[i].closing && self->slots[i].inflight == 0)
            s_close (self, i, 0);
}

const void *endpoints_client_key (endpoints_t *self, zmq_msg_t *frame, size_t *len)
{
    if (self->auth) {
        const char *key = zmq_msg_gets (frame, "User-Id");
        if (key && *key) {
            *len = strlen (key);
            return key;
        }
    }
    *len = zmq_msg_size (frame);
    return zmq_msg_data (frame);
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

/* A refused CURVE handshake on SL: EVENT with VALUE (a ZAP status code, or a protocol error). */
static void s_auth_failed (endpoints_t *self, const slot_t *sl, uint16_t event, uint32_t value, uint64_t now_ns)
{
    stats_auth_failure_t why = AUTH_FAIL_PROTOCOL;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        why = AUTH_FAIL_DENIED;
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        why = AUTH_FAIL_PLAINTEXT;
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        why = AUTH_FAIL_WRONG_KEY;
    if (self->stats)
        stats_count_auth_failure (self->stats, why);
    self->auth_since_warn[why]++;
    if (now_ns - self->last_auth_warn < 1000000000ull)
        return;
    log_warn ("%s: CURVE handshakes refused since the last warning: %llu denied (a key not in "
              "server.curve.allowed_clients), %llu from plaintext clients, %llu with another server key, %llu "
              "protocol errors", sl->name, (unsigned long long) self->auth_since_warn[AUTH_FAIL_DENIED],
              (unsigned long long) self->auth_since_warn[AUTH_FAIL_PLAINTEXT],
              (unsigned long long) self->auth_since_warn[AUTH_FAIL_WRONG_KEY],
              (unsigned long long) self->auth_since_warn[AUTH_FAIL_PROTOCOL]);
    memset (self->auth_since_warn, 0, sizeof self->auth_since_warn);
    self->last_auth_warn = now_ns;
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
                s_auth_failed (self, sl, event, (uint32_t) fd, now_ns);
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
            self->refused_since_warn++;
            if (now_ns - self->last_limit_warn >= 1000000000ull) {
                log_warn ("%s: connection limit reached (server.max_connections = %u): closed a connection from %s; "
                          "%llu refused since the last warning", sl->name, self->cfg.max_connections, peer,
                          (unsigned long long) self->refused_since_warn);
                self->last_limit_warn = now_ns;
                self->refused_since_warn = 0;
            }
        }
    }
}

void endpoints_watch_connections (endpoints_t *self, uint64_t now_ns) { s_watch (self, now_ns, false); }

uint32_t endpoints_connections (const endpoints_t *self) { return self->connections; }

bool endpoints_refused (endpoints_t *self, const zmq_msg_t *frame, uint64_t now_ns)
{
    if (!self->cfg.max_connections)
        return false;
    const int fd = zmq_msg_get (frame, ZMQ_SRCFD);
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
