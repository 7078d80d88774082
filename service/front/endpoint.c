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

/* Binds ENDPOINT into slot I with the policies both transports share. */
static int s_bind (endpoints_t *self, int i, const char *endpoint, char *err, size_t errlen)
{
    if (strncmp (endpoint, "ipc://", 6) == 0 && s_ipc_check (endpoint, err, errlen) != 0)
        return -1;
    char why[CONFIG_ENDPOINT_MAX + 512];
    why[0] = '\0';
    errno = 0;
    if (self->ops->bind (self, i, endpoint, why, sizeof why) != 0) {
        const int e = errno;
        char hint[1024] = "";
        if (e == ENODEV)
            s_host_hint (endpoint, hint, sizeof hint);
        if (strncmp (why, "server.", 7) == 0)
            snprintf (err, errlen, "%s", why);
        else
            snprintf (err, errlen, "server.endpoints: cannot bind %s: %s%s", endpoint, why[0] ? why : strerror (e), hint);
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
