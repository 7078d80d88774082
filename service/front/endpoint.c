/* The front's endpoints (endpoint.h): the slots, reload, and what both transports share; the transports
 * themselves are endpoint_zmq.c and endpoint_zmtp.c (endpoint_impl.h). */
#define _GNU_SOURCE
#include "front/endpoint_impl.h"

#include "base/log.h"
#include "clock.h"

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

/* What binding ipc://PATH refuses whoever else runs: a path too long for a socket address, a file there
 * that is not a socket, a folder that is missing or not writable. AT names the key in the message. */
static int s_ipc_path_check (const char *at, const char *endpoint, char *err, size_t errlen)
{
    const char *path = endpoint + strlen ("ipc://");
    if (path[0] == '@')
        return 0;               /* Linux abstract namespace: no file */
    struct sockaddr_un a;
    if (strlen (path) >= sizeof a.sun_path) {
        snprintf (err, errlen, "%s: cannot bind %s: the path is longer than %zu bytes", at, endpoint,
                  sizeof a.sun_path - 1);
        return -1;
    }
    struct stat st;
    if (lstat (path, &st) == 0 && !S_ISSOCK (st.st_mode)) {
        snprintf (err, errlen, "%s: cannot bind %s: %s exists and is not a socket", at, endpoint, path);
        return -1;
    }
    char folder[CONFIG_ENDPOINT_MAX];
    const char *slash = strrchr (path, '/');
    snprintf (folder, sizeof folder, "%.*s", slash ? (slash == path ? 1 : (int) (slash - path)) : 1, slash ? path : ".");
    const char *problem = NULL;
    if (stat (folder, &st) != 0)
        problem = errno == ENOENT ? "does not exist" : strerror (errno);
    else if (!S_ISDIR (st.st_mode))
        problem = "is not a folder";
    else if (access (folder, W_OK | X_OK) != 0)
        problem = "is not writable by this user";
    if (!problem)
        return 0;
    snprintf (err, errlen, "%s: cannot bind %s: the folder %s %s", at, endpoint, folder, problem);
    return -1;
}

/* ipc://PATH at bind: what s_ipc_path_check refuses; then a live listener there means another server
 * owns it (refuse); a socket file nobody listens on is a stale leftover (remove it, so bind can create
 * a fresh one). */
static int s_ipc_check (const char *endpoint, char *err, size_t errlen)
{
    if (s_ipc_path_check ("server.endpoints", endpoint, err, errlen) != 0)
        return -1;
    const char *path = endpoint + strlen ("ipc://");
    struct stat st;
    if (path[0] == '@' || lstat (path, &st) != 0)
        return 0;
    struct sockaddr_un a = { .sun_family = AF_UNIX };
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

/* "AT: cannot bind ENDPOINT: WHY", with the address to use where a host name was given (E: ENODEV). A
 * WHY that names its key already ("server.curve: ...") is the message. */
static void s_cannot_bind (const char *at, const char *endpoint, const char *why, int e, char *err, size_t errlen)
{
    char hint[1024] = "";
    if (e == ENODEV)
        s_host_hint (endpoint, hint, sizeof hint);
    if (strncmp (why, "server.", 7) == 0)
        snprintf (err, errlen, "%s", why);
    else
        snprintf (err, errlen, "%s: cannot bind %s: %s%s", at, endpoint, why[0] ? why : strerror (e), hint);
}

/* Binds ENDPOINT into slot I with the policies both transports share. */
static int s_bind (endpoints_t *self, int i, const char *endpoint, char *err, size_t errlen)
{
    if (strncmp (endpoint, "ipc://", 6) == 0 && s_ipc_check (endpoint, err, errlen) != 0)
        return -1;
    char why[CONFIG_ENDPOINT_MAX + 512];
    why[0] = '\0';
    errno = 0;
    if (self->ops->bind (self, i, endpoint, why, sizeof why) != 0) {
        s_cannot_bind ("server.endpoints", endpoint, why, errno, err, errlen);
        return -1;
    }
    if (!self->auth && !s_local (endpoint))
        log_warn ("%s serves plaintext on an address other hosts can reach: anyone who reaches the port can send "
                  "requests and read the replies; bind 127.0.0.1, or set server.curve (docs/security.md)", endpoint);
    if (strncmp (endpoint, "ipc://", 6) == 0 && endpoint[6] != '@' && chmod (endpoint + 6, self->cfg.ipc_file_mode) != 0)
        log_warn ("%s: cannot set its mode to %s: %s", endpoint, self->cfg.ipc_mode, strerror (errno));
    log_info ("listening on %s (%s)", endpoint, self->ops->name);
    return 0;
}

static int s_find (const endpoints_t *self, const char *name)
{
    for (int i = 0; i < SLOTS; i++)
        if (self->slots[i].open && !self->slots[i].closing && strcmp (self->slots[i].name, name) == 0)
            return i;
    return -1;
}

static int s_free_slot (const endpoints_t *self)
{
    for (int i = 0; i < SLOTS; i++)
        if (!self->slots[i].open)
            return i;
    return -1;
}

static void s_close (endpoints_t *self, int i, uint32_t linger_ms)
{
    slot_t *sl = &self->slots[i];
    if (!sl->open)
        return;
    self->ops->close (self, i, linger_ms);
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
    self->ops = cfg->transport == TRANSPORT_LIBZMQ ? &endpoint_zmq_ops : &endpoint_zmtp_ops;
    if (self->ops->start (self, err, errlen) != 0) {
        free (self);
        return NULL;
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
    self->ops->stop (self, linger_ms);
    free (self);
    *self_p = NULL;
}

int endpoints_recv (endpoints_t *self, message_t *msg) { return self->ops->recv (self, msg); }
void endpoints_release (endpoints_t *self, message_t *msg) { self->ops->release (self, msg); }

int endpoints_send (endpoints_t *self, int slot, const frame_t *envelope, int count, const void *payload, size_t len)
{
    frame_t frames[JOB_ENVELOPE_MAX + 1];
    if (count > JOB_ENVELOPE_MAX) {
        errno = EINVAL;
        return -1;
    }
    memcpy (frames, envelope, (size_t) count * sizeof *frames);
    frames[count] = (frame_t) { payload, len };
    return self->ops->send (self, slot, frames, count + 1);
}

int endpoints_wait (endpoints_t *self, int wake_fd, int timeout_ms) { return self->ops->wait (self, wake_fd, timeout_ms); }

void endpoints_cork (endpoints_t *self, bool on)
{
    if (self->ops->cork)
        self->ops->cork (self, on);
}

const char *endpoints_name (const endpoints_t *self, int slot) { return self->slots[slot].name; }
const char *endpoints_transport (const endpoints_t *self) { return self->ops->name; }

void endpoints_hold (endpoints_t *self, int slot) { self->slots[slot].inflight++; }
void endpoints_release_slot (endpoints_t *self, int slot) { self->slots[slot].inflight--; }

int endpoints_add (endpoints_t *self, const server_config_t *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < SLOTS; i++)
        self->slots[i].added = false;
    server_config_t options = self->cfg;     /* new sockets take the new options */
    self->cfg = *cfg;
    self->cfg.transport = options.transport;  /* a restart changes it, never a reload */
    for (size_t e = 0; e < cfg->endpoint_count; e++) {
        if (s_find (self, cfg->endpoints[e]) >= 0)
            continue;
        int i = s_free_slot (self);
        if (i < 0) {
            snprintf (err, errlen, "server.endpoints: no room for %s while earlier endpoints are closing",
                      cfg->endpoints[e]);
        } else if (s_bind (self, i, cfg->endpoints[e], err, errlen) == 0) {
            slot_t *sl = &self->slots[i];
            sl->open = true;
            snprintf (sl->name, sizeof sl->name, "%s", cfg->endpoints[e]);
            sl->added = true;
            continue;
        }
        endpoints_drop_added (self);
        self->cfg = options;
        return -1;
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
    if (self->ops->options)
        self->ops->options (self);
    for (int i = 0; i < SLOTS; i++) {
        slot_t *sl = &self->slots[i];
        sl->added = false;
        if (!sl->open || sl->closing)
            continue;
        bool kept = false;
        for (size_t e = 0; e < cfg->endpoint_count && !kept; e++)
            kept = strcmp (cfg->endpoints[e], sl->name) == 0;
        if (!kept) {
            /* No new connections from now on; requests already admitted are answered on it. */
            self->ops->unbind (self, i);
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

const void *endpoints_client_key (endpoints_t *self, const message_t *msg, size_t *len)
{
    return self->ops->client_key (self, msg, len);
}

void endpoints_watch_connections (endpoints_t *self, uint64_t now_ns) { self->ops->watch (self, now_ns, false); }
bool endpoints_refused (endpoints_t *self, const message_t *msg, uint64_t now_ns)
{
    return self->ops->refused (self, msg, now_ns);
}
uint32_t endpoints_connections (const endpoints_t *self) { return self->connections; }

/* ---------------------------------------------------------------- checked before anything binds */

/* A tcp:// endpoint as bound (BOUND: "tcp://ADDRESS:P", the address the transport resolved) on the
 * configured PORT; false when it has no address to compare (the port picked by the system). */
static bool s_address (const char *bound, const char *configured, struct sockaddr_storage *sa)
{
    const char *colon = strrchr (configured, ':'), *bcolon = strrchr (bound, ':');
    if (strncmp (bound, "tcp://", 6) != 0 || !colon || !bcolon)
        return false;
    const long port = strtol (colon + 1, NULL, 10);
    if (port <= 0)
        return false;       /* "*" or 0: never the port of another */
    char host[INET6_ADDRSTRLEN + 2];
    snprintf (host, sizeof host, "%.*s", (int) (bcolon - bound - 6), bound + 6);
    memset (sa, 0, sizeof *sa);
    struct sockaddr_in *v4 = (struct sockaddr_in *) sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *) sa;
    size_t n = strlen (host);
    if (host[0] == '[' && n > 2 && host[n - 1] == ']') {
        host[n - 1] = '\0';
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons ((uint16_t) port);
        return inet_pton (AF_INET6, host + 1, &v6->sin6_addr) == 1;
    }
    v4->sin_family = AF_INET;
    v4->sin_port = htons ((uint16_t) port);
    return inet_pton (AF_INET, host, &v4->sin_addr) == 1;
}

static bool s_any (const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *) a)->sin_addr.s_addr == htonl (INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED (&((const struct sockaddr_in6 *) a)->sin6_addr);
}

/* Whether listening on A and on B cannot both be done (Linux, SO_REUSEADDR): one port, and one address,
 * or a wildcard of the other's family; the IPv6 wildcard takes IPv4's too (dual stack). */
static bool s_overlap (const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    const uint16_t pa = a->ss_family == AF_INET ? ((const struct sockaddr_in *) a)->sin_port
                                                 : ((const struct sockaddr_in6 *) a)->sin6_port;
    const uint16_t pb = b->ss_family == AF_INET ? ((const struct sockaddr_in *) b)->sin_port
                                                 : ((const struct sockaddr_in6 *) b)->sin6_port;
    if (pa != pb)
        return false;
    if (a->ss_family != b->ss_family)
        return (a->ss_family == AF_INET6 && s_any (a)) || (b->ss_family == AF_INET6 && s_any (b))
               || (s_any (a) && s_any (b));
    if (s_any (a) || s_any (b))
        return true;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *) a)->sin_addr.s_addr == ((const struct sockaddr_in *) b)->sin_addr.s_addr;
    return memcmp (&((const struct sockaddr_in6 *) a)->sin6_addr, &((const struct sockaddr_in6 *) b)->sin6_addr,
                   sizeof (struct in6_addr)) == 0;
}

static const endpoint_ops_t *s_ops (const server_config_t *cfg)
{
    return cfg->transport == TRANSPORT_LIBZMQ ? &endpoint_zmq_ops : &endpoint_zmtp_ops;
}

/* Endpoint E of CFG checked as binding it would be (without its port), into ADDR (its address, when
 * it has one to compare: *HAS). */
static int s_check_one (const server_config_t *cfg, size_t e, struct sockaddr_storage *addr, bool *has, char *err,
                        size_t errlen)
{
    const char *name = cfg->endpoints[e];
    char at[48];
    snprintf (at, sizeof at, "server.endpoints[%zu]", e);
    *has = false;
    if (strncmp (name, "ipc://", 6) == 0)
        return s_ipc_path_check (at, name, err, errlen);
    char bound[CONFIG_ENDPOINT_MAX + 64] = "", why[CONFIG_ENDPOINT_MAX + 512] = "";
    errno = 0;
    if (s_ops (cfg)->probe (cfg, name, bound, sizeof bound, why, sizeof why) != 0) {
        s_cannot_bind (at, name, why, errno, err, errlen);
        return -1;
    }
    *has = s_address (bound, name, addr);
    return 0;
}

int endpoints_check (const server_config_t *cfg, char *err, size_t errlen)
{
    struct sockaddr_storage addr[CONFIG_MAX_ENDPOINTS];
    bool has[CONFIG_MAX_ENDPOINTS];
    for (size_t e = 0; e < cfg->endpoint_count && e < CONFIG_MAX_ENDPOINTS; e++) {
        if (s_check_one (cfg, e, &addr[e], &has[e], err, errlen) != 0)
            return -1;
        for (size_t k = 0; k < e && has[e]; k++)
            if (has[k] && s_overlap (&addr[e], &addr[k])) {
                const char *colon = strrchr (cfg->endpoints[e], ':');
                snprintf (err, errlen, "server.endpoints[%zu]: %s would listen on port %s where server.endpoints[%zu] "
                          "(%s) listens; give one of them another port", e, cfg->endpoints[e], colon + 1, k,
                          cfg->endpoints[k]);
                return -1;
            }
    }
    return 0;
}

int endpoints_overlap (const server_config_t *cfg, const char *what, const char *name, const struct sockaddr *sa,
                       char *err, size_t errlen)
{
    struct sockaddr_storage mine;
    memset (&mine, 0, sizeof mine);
    memcpy (&mine, sa, sa->sa_family == AF_INET6 ? sizeof (struct sockaddr_in6) : sizeof (struct sockaddr_in));
    for (size_t e = 0; e < cfg->endpoint_count && e < CONFIG_MAX_ENDPOINTS; e++) {
        struct sockaddr_storage addr;
        bool has;
        char why[8];
        if (s_check_one (cfg, e, &addr, &has, why, sizeof why) == 0 && has && s_overlap (&mine, &addr)) {
            snprintf (err, errlen, "%s: %s would listen on port %u where server.endpoints[%zu] (%s) listens; give one "
                      "of them another port", what, name,
                      ntohs (sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *) sa)->sin6_port
                                                       : ((const struct sockaddr_in *) sa)->sin_port),
                      e, cfg->endpoints[e]);
            return -1;
        }
    }
    return 0;
}
