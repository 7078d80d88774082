/* libsigclient: see sigclient.h. One DEALER socket; every wait is a zmq_poll bounded by a
 * deadline taken from CLOCK_MONOTONIC, so discarding stale replies never stretches a call past
 * its timeout. dns:// endpoints are resolved again when due, from inside the calls that send or
 * receive (s_resolve_if_due), never from another thread. */
#include "sigclient.h"

#include "signal.pb-c.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
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

#define S_DNS_PREFIX "dns://"
#define S_DNS_NAME_MAX 254          /* a DNS name's bytes and its NUL */
#define S_DNS_MAX_ADDRS 64          /* addresses kept per name (a headless Service: one per pod) */
/* A name with no address connected is resolved again this often, however long the interval:
 * a fleet that is scaling up from nothing should be found within a fraction of a second. */
#define S_DNS_EMPTY_RETRY_MS 200

typedef char s_endpoint_t[SIGCLIENT_ENDPOINT_MAX];

/* One dns://NAME:PORT endpoint and the tcp:// endpoints it stands for now. */
typedef struct {
    char name[S_DNS_NAME_MAX];
    char port[6];
    s_endpoint_t connected[S_DNS_MAX_ADDRS];    /* connected now, sorted */
    size_t n_connected;
    char error[160];            /* why the last resolution gave nothing; "" when it gave addresses */
} s_dns_t;

/* The resolver of every client of this process: getaddrinfo unless a test replaced it. */
static int s_getaddrinfo (const char *name, char (*addrs)[SIGCLIENT_ADDRESS_MAX], size_t cap,
                          char *error, size_t error_cap, void *arg);
static sigclient_resolver_fn s_resolver = s_getaddrinfo;
static void *s_resolver_arg;

typedef Sigserve__V1__Reply reply_t;
typedef Sigserve__V1__InferReply infer_reply_t;

struct _sigclient_t {
    void *ctx;                  /* our own, so the caller needs no ZeroMQ setup */
    void *socket;               /* DEALER connected to every endpoint */
    char *endpoints;            /* "tcp://a, dns://b:1 [tcp://..]": named in error messages */
    char *static_endpoints;     /* the endpoints given that are not dns://, joined */
    size_t n_static;
    s_dns_t *dns;               /* the dns:// endpoints given */
    size_t n_dns;
    int resolve_interval_ms;    /* 0: resolve only at sigclient_new */
    int64_t next_resolve_ns;    /* when the dns:// names are due to be resolved again */
    int retries;                /* sigclient_set_retry */
    int timeout_ms;             /* bounds each send and each wait for a reply */
    uint32_t deadline_us;       /* sent with every sigclient_infer request */
    uint64_t next_request_id;   /* starts at 1: the server answers 0 to what it cannot decode */
    uint8_t *packbuf;           /* request encoding, reused; grows to the largest request */
    size_t packcap;
    size_t largest_unanswered;  /* the largest request sent since the last reply, in bytes */
    bool curve;                 /* CURVE keys set: a refused key looks like a timeout */
    zmq_msg_t frame;            /* the last frame received; its buffer is reused by libzmq */
    int status;                 /* last outcome, a sigclient_status_t */
    char error[768];            /* last failure in words */
};

static int64_t s_now_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void s_reset (sigclient_t *self)
{
    self->status = SIGCLIENT_OK;
    self->error[0] = '\0';
}

static int s_fail (sigclient_t *self, int status, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));
static int s_fail (sigclient_t *self, int status, const char *fmt, ...)
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
        default: break;
    }
    /* The proto's own names, so a status added to signal.proto is named without an edit here. */
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value (&sigserve__v1__status__descriptor, status);
    return v ? v->name : "STATUS_UNKNOWN";
}

/* ---- dns:// endpoints ---- */

static int s_getaddrinfo (const char *name, char (*addrs)[SIGCLIENT_ADDRESS_MAX], size_t cap,
                          char *error, size_t error_cap, void *arg)
{
    (void) arg;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *found = NULL;
    int rc = getaddrinfo (name, NULL, &hints, &found);
    if (rc != 0) {
        snprintf (error, error_cap, "%s", rc == EAI_SYSTEM ? strerror (errno) : gai_strerror (rc));
        return -1;
    }
    size_t n = 0;
    for (const struct addrinfo *ai = found; ai && n < cap; ai = ai->ai_next) {
        const void *addr = NULL;
        if (ai->ai_family == AF_INET)
            addr = &((const struct sockaddr_in *) (const void *) ai->ai_addr)->sin_addr;
        else if (ai->ai_family == AF_INET6)
            addr = &((const struct sockaddr_in6 *) (const void *) ai->ai_addr)->sin6_addr;
        if (addr && inet_ntop (ai->ai_family, addr, addrs[n], SIGCLIENT_ADDRESS_MAX))
            n++;
    }
    freeaddrinfo (found);
    return (int) n;
}

void sigclient_set_resolver (sigclient_resolver_fn resolve, void *arg)
{
    s_resolver = resolve ? resolve : s_getaddrinfo;
    s_resolver_arg = resolve ? arg : NULL;
}

static bool s_is_dns (const char *endpoint)
{
    return strncmp (endpoint, S_DNS_PREFIX, strlen (S_DNS_PREFIX)) == 0;
}

/* Splits "dns://NAME:PORT" (NAME may be a bracketed IPv6 literal). 0, or -1 with ERROR filled. */
static int s_dns_parse (const char *endpoint, char *name, char *port, char *error, size_t error_cap)
{
    const char *rest = endpoint + strlen (S_DNS_PREFIX);
    const char *colon = strrchr (rest, ':');
    if (!colon || colon == rest) {
        snprintf (error, error_cap, "'%s': expected dns://NAME:PORT", endpoint);
        return -1;
    }
    size_t len = (size_t) (colon - rest);
    if (len >= 2 && rest[0] == '[' && rest[len - 1] == ']') {
        rest++;
        len -= 2;
    }
    char *end = NULL;
    errno = 0;
    long p = strtol (colon + 1, &end, 10);
    if (len == 0 || len >= S_DNS_NAME_MAX || memchr (rest, '/', len) || memchr (rest, '[', len)) {
        snprintf (error, error_cap, "'%s': expected dns://NAME:PORT with a host name of 1 to %d bytes",
                  endpoint, S_DNS_NAME_MAX - 1);
        return -1;
    }
    if (colon[1] < '0' || colon[1] > '9' || errno || *end || p < 1 || p > 65535) {
        snprintf (error, error_cap, "'%s': expected a port from 1 to 65535 after the name", endpoint);
        return -1;
    }
    memcpy (name, rest, len);
    name[len] = '\0';
    snprintf (port, 6, "%ld", p);
    return 0;
}

static int s_compare_endpoints (const void *a, const void *b)
{
    return strcmp (*(const s_endpoint_t *) a, *(const s_endpoint_t *) b);
}

/* The tcp:// endpoints behind NAME now: sorted, without duplicates, at most CAP. The count (0 when
 * NAME has none), or -1 with ERROR filled. */
static int s_dns_lookup (const char *name, const char *port, s_endpoint_t *out, size_t cap,
                         char *error, size_t error_cap)
{
    char addrs[S_DNS_MAX_ADDRS][SIGCLIENT_ADDRESS_MAX];
    error[0] = '\0';
    int found = s_resolver (name, addrs, cap < S_DNS_MAX_ADDRS ? cap : S_DNS_MAX_ADDRS, error, error_cap,
                            s_resolver_arg);
    if (found < 0) {
        if (!error[0]) snprintf (error, error_cap, "cannot resolve");
        return -1;
    }
    size_t n = 0;
    for (int i = 0; i < found; i++) {
        addrs[i][SIGCLIENT_ADDRESS_MAX - 1] = '\0';
        bool v6 = strchr (addrs[i], ':') != NULL;
        /* "tcp://[" + 45 + "]:" + 5 + NUL fits SIGCLIENT_ENDPOINT_MAX */
        snprintf (out[n], SIGCLIENT_ENDPOINT_MAX, v6 ? "tcp://[%.45s]:%.5s" : "tcp://%.45s:%.5s", addrs[i], port);
        n++;
    }
    qsort (out, n, sizeof *out, s_compare_endpoints);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (kept == 0 || strcmp (out[i], out[kept - 1]) != 0)
            memmove (out[kept++], out[i], sizeof *out);
    return (int) kept;
}

int sigclient_resolve_endpoint (const char *endpoint, char (*out)[SIGCLIENT_ENDPOINT_MAX], size_t cap,
                                char *error, size_t error_cap)
{
    char scratch[8];
    if (!error || error_cap == 0) { error = scratch; error_cap = sizeof scratch; }
    error[0] = '\0';
    if (!endpoint || !out || cap == 0) {
        snprintf (error, error_cap, "no endpoint or no room for one");
        errno = EINVAL;
        return -1;
    }
    if (!s_is_dns (endpoint)) {
        if (strlen (endpoint) >= SIGCLIENT_ENDPOINT_MAX) {
            snprintf (error, error_cap, "'%s': longer than %d bytes", endpoint, SIGCLIENT_ENDPOINT_MAX - 1);
            errno = ENOSPC;
            return -1;
        }
        snprintf (out[0], SIGCLIENT_ENDPOINT_MAX, "%s", endpoint);
        return 1;
    }
    char name[S_DNS_NAME_MAX], port[6];
    if (s_dns_parse (endpoint, name, port, error, error_cap) != 0) { errno = EINVAL; return -1; }
    char why[160];
    int n = s_dns_lookup (name, port, out, cap, why, sizeof why);
    if (n <= 0) {
        snprintf (error, error_cap, "%s: %s", endpoint, n < 0 ? why : "no address");
        errno = ENOENT;
        return -1;
    }
    return n;
}

static bool s_listed (const s_endpoint_t *list, size_t n, const char *endpoint)
{
    return bsearch (endpoint, list, n, sizeof *list, s_compare_endpoints) != NULL;
}

/* Resolves D->name again: connects the addresses that are new, disconnects those that are gone.
 * A failed resolution, or one that gives no address, changes nothing. */
static void s_dns_refresh (sigclient_t *self, s_dns_t *d)
{
    s_endpoint_t fresh[S_DNS_MAX_ADDRS];
    int n = s_dns_lookup (d->name, d->port, fresh, S_DNS_MAX_ADDRS, d->error, sizeof d->error);
    if (n <= 0) {
        if (n == 0) snprintf (d->error, sizeof d->error, "no address");
        return;
    }
    d->error[0] = '\0';
    size_t kept = 0;
    for (size_t i = 0; i < d->n_connected; i++) {
        if (s_listed (fresh, (size_t) n, d->connected[i]))
            memmove (d->connected[kept++], d->connected[i], sizeof (s_endpoint_t));
        else
            zmq_disconnect (self->socket, d->connected[i]);    /* its queued requests are dropped */
    }
    d->n_connected = kept;
    for (int i = 0; i < n; i++) {
        if (s_listed (d->connected, kept, fresh[i])) continue;
        if (zmq_connect (self->socket, fresh[i]) != 0) {
            snprintf (d->error, sizeof d->error, "cannot connect to %.63s: %.60s", fresh[i], zmq_strerror (errno));
            continue;
        }
        memcpy (d->connected[d->n_connected++], fresh[i], sizeof (s_endpoint_t));
    }
    qsort (d->connected, d->n_connected, sizeof *d->connected, s_compare_endpoints);
}

static size_t s_peer_count (const sigclient_t *self)
{
    size_t n = self->n_static;
    for (size_t i = 0; i < self->n_dns; i++) n += self->dns[i].n_connected;
    return n;
}

/* Rebuilds self->endpoints: the static endpoints, then each dns:// one with what it stands for.
 * Keeps the old text when there is no memory for the new one. */
static void s_describe (sigclient_t *self)
{
    size_t size = strlen (self->static_endpoints) + 1;
    for (size_t i = 0; i < self->n_dns; i++) {
        const s_dns_t *d = &self->dns[i];
        size += strlen (d->name) + strlen (d->port) + strlen (d->error) + 64;
        for (size_t k = 0; k < d->n_connected; k++) size += strlen (d->connected[k]) + 2;
    }
    char *text = malloc (size);
    if (!text) return;
    size_t used = (size_t) snprintf (text, size, "%s", self->static_endpoints);
    for (size_t i = 0; i < self->n_dns; i++) {
        const s_dns_t *d = &self->dns[i];
        bool v6 = strchr (d->name, ':') != NULL;
        used += (size_t) snprintf (text + used, size - used, v6 ? "%sdns://[%s]:%s [" : "%sdns://%s:%s [",
                                   used ? ", " : "", d->name, d->port);
        for (size_t k = 0; k < d->n_connected; k++)
            used += (size_t) snprintf (text + used, size - used, "%s%s", k ? ", " : "", d->connected[k]);
        if (d->n_connected == 0)
            used += (size_t) snprintf (text + used, size - used, "no address");
        if (d->error[0] && !(d->n_connected == 0 && strcmp (d->error, "no address") == 0))
            used += (size_t) snprintf (text + used, size - used, "%s%s", d->n_connected ? "; last resolution: " : ": ",
                                       d->error);
        used += (size_t) snprintf (text + used, size - used, "]");
    }
    free (self->endpoints);
    self->endpoints = text;
}

static void s_resolve_all (sigclient_t *self)
{
    for (size_t i = 0; i < self->n_dns; i++) s_dns_refresh (self, &self->dns[i]);
    s_describe (self);
    int64_t wait_ms = self->resolve_interval_ms;
    if (s_peer_count (self) == 0 && wait_ms > S_DNS_EMPTY_RETRY_MS) wait_ms = S_DNS_EMPTY_RETRY_MS;
    self->next_resolve_ns = s_now_ns () + wait_ms * 1000000;
}

static void s_resolve_if_due (sigclient_t *self)
{
    if (self->n_dns && self->resolve_interval_ms > 0 && s_now_ns () >= self->next_resolve_ns)
        s_resolve_all (self);
}

/* ---- lifetime and settings ---- */

/* Counts the dns:// endpoints and checks their form; joins the others into self->static_endpoints. */
static int s_take_endpoints (sigclient_t *self, const char *const *endpoints, size_t count)
{
    size_t joined = 1;
    for (size_t i = 0; i < count; i++) {
        if (s_is_dns (endpoints[i])) self->n_dns++;
        else joined += strlen (endpoints[i]) + 2;
    }
    self->static_endpoints = malloc (joined);
    self->dns = self->n_dns ? calloc (self->n_dns, sizeof *self->dns) : NULL;
    if (!self->static_endpoints || (self->n_dns && !self->dns)) return ENOMEM;
    self->static_endpoints[0] = '\0';
    size_t d = 0;
    for (size_t i = 0; i < count; i++) {
        if (!s_is_dns (endpoints[i])) continue;
        char why[SIGCLIENT_ENDPOINT_MAX + 96];
        if (s_dns_parse (endpoints[i], self->dns[d].name, self->dns[d].port, why, sizeof why) != 0) return EINVAL;
        d++;
    }
    return 0;
}

/* KEYS: NULL, or the server's public key, the client's public and secret keys (Z85). */
static sigclient_t *s_new (const char *const *endpoints, size_t count, int timeout_ms, const char *const keys[3])
{
    if (!endpoints || count == 0) { errno = EINVAL; return NULL; }
    for (size_t i = 0; i < count; i++)
        if (!endpoints[i] || !*endpoints[i]) { errno = EINVAL; return NULL; }
    sigclient_t *self = calloc (1, sizeof *self);
    if (!self) { errno = ENOMEM; return NULL; }
    zmq_msg_init (&self->frame);
    self->next_request_id = 1;
    self->resolve_interval_ms = SIGCLIENT_DEFAULT_RESOLVE_MS;
    int err = s_take_endpoints (self, endpoints, count);
    if (!err) {
        self->ctx = zmq_ctx_new ();
        self->socket = self->ctx ? zmq_socket (self->ctx, ZMQ_DEALER) : NULL;
        if (!self->socket) err = errno ? errno : ENOMEM;
    }
    if (!err) {
        int linger = 0, on = 1;
        if (zmq_setsockopt (self->socket, ZMQ_LINGER, &linger, sizeof linger) != 0
            || sigclient_set_timeout (self, timeout_ms) != 0)
            err = errno ? errno : EINVAL;
        /* CURVE keys go before any connect: a connection takes the mechanism it is made with. */
        if (!err && keys) {
            self->curve = true;
            int opts[3] = { ZMQ_CURVE_SERVERKEY, ZMQ_CURVE_PUBLICKEY, ZMQ_CURVE_SECRETKEY };
            for (int k = 0; k < 3 && !err; k++)
                if (zmq_setsockopt (self->socket, opts[k], keys[k], SIGCLIENT_KEY_TEXT - 1) != 0)
                    err = errno ? errno : EINVAL;
        }
        /* dns:// names give IPv6 addresses too, and some of them may not answer (sigclient.h). */
        if (!err && self->n_dns
            && (zmq_setsockopt (self->socket, ZMQ_IPV6, &on, sizeof on) != 0
                || zmq_setsockopt (self->socket, ZMQ_IMMEDIATE, &on, sizeof on) != 0))
            err = errno ? errno : EINVAL;
    }
    for (size_t i = 0; i < count && !err; i++) {
        if (s_is_dns (endpoints[i])) continue;
        if (zmq_connect (self->socket, endpoints[i]) != 0) {
            err = errno;
            break;
        }
        if (self->n_static++) strcat (self->static_endpoints, ", ");
        strcat (self->static_endpoints, endpoints[i]);
    }
    if (!err) {
        s_resolve_all (self);
        if (!self->endpoints) err = ENOMEM;
    }
    if (err) {
        sigclient_destroy (&self);
        errno = err;
        return NULL;
    }
    s_reset (self);
    return self;
}

sigclient_t *sigclient_new (const char *const *endpoints, size_t count, int timeout_ms)
{
    return s_new (endpoints, count, timeout_ms, NULL);
}

sigclient_t *sigclient_new_curve (const char *const *endpoints, size_t count, int timeout_ms,
                                  const char *server_key, const char *client_public, const char *client_secret)
{
    const char *const keys[3] = { server_key, client_public, client_secret };
    /* 40 characters each; libzmq's setsockopt refuses text that is not Z85 (EINVAL). */
    for (int k = 0; k < 3; k++)
        if (!keys[k] || strlen (keys[k]) != SIGCLIENT_KEY_TEXT - 1) {
            errno = EINVAL;
            return NULL;
        }
    return s_new (endpoints, count, timeout_ms, keys);
}

void sigclient_destroy (sigclient_t **self_p)
{
    if (!self_p || !*self_p) return;
    sigclient_t *self = *self_p;
    zmq_msg_close (&self->frame);
    if (self->socket) zmq_close (self->socket);
    if (self->ctx) zmq_ctx_term (self->ctx);   /* prompt: LINGER is 0 */
    free (self->endpoints);
    free (self->static_endpoints);
    free (self->dns);
    free (self->packbuf);
    free (self);
    *self_p = NULL;
}

int sigclient_set_timeout (sigclient_t *self, int timeout_ms)
{
    if (!self) { errno = EINVAL; return -1; }
    if (timeout_ms <= 0) timeout_ms = SIGCLIENT_DEFAULT_TIMEOUT_MS;
    /* RCVTIMEO guards any blocking receive; ours poll against a deadline anyway. SNDTIMEO rather
     * than ZMQ_IMMEDIATE: requests to a server not up yet are queued, and a full queue is a
     * timeout instead of a hang. */
    if (zmq_setsockopt (self->socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms) != 0
        || zmq_setsockopt (self->socket, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms) != 0)
        return s_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot set the timeout: %s", zmq_strerror (errno));
    self->timeout_ms = timeout_ms;
    return 0;
}

void sigclient_set_deadline_us (sigclient_t *self, uint32_t deadline_us)
{
    if (self) self->deadline_us = deadline_us;
}

int sigclient_set_retry (sigclient_t *self, int retries)
{
    if (!self) return -1;
    s_reset (self);
    if (retries < 0 || retries > SIGCLIENT_MAX_RETRY)
        return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "retries: expected 0 to %d, got %d", SIGCLIENT_MAX_RETRY, retries);
    self->retries = retries;
    return 0;
}

void sigclient_set_resolve_interval (sigclient_t *self, int interval_ms)
{
    if (!self) return;
    self->resolve_interval_ms = interval_ms < 0 ? SIGCLIENT_DEFAULT_RESOLVE_MS : interval_ms;
    self->next_resolve_ns = s_now_ns () + (int64_t) self->resolve_interval_ms * 1000000;
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

static int s_send_frame (sigclient_t *self, const void *data, size_t len)
{
    s_resolve_if_due (self);
    if (s_peer_count (self) == 0)
        return s_fail (self, SIGCLIENT_ERR_TRANSPORT, "no address to send to: %s", self->endpoints);
    if (len > self->largest_unanswered) self->largest_unanswered = len;
    while (zmq_send (self->socket, data, len, 0) < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN)
            return s_fail (self, SIGCLIENT_ERR_TIMEOUT,
                           "timed out after %d ms sending to %s (send queue full)",
                           self->timeout_ms, self->endpoints);
        return s_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot send to %s: %s",
                       self->endpoints, zmq_strerror (errno));
    }
    return 0;
}

/* Packs REQ into the client's buffer (grown only for a larger request than any before) and sends it. */
static int s_send_request (sigclient_t *self, const Sigserve__V1__Request *req)
{
    size_t size = sigserve__v1__request__get_packed_size (req);
    if (size > self->packcap) {
        size_t cap = self->packcap ? self->packcap : 256;
        while (cap < size) cap = cap > SIZE_MAX / 2 ? size : cap * 2;
        uint8_t *buf = realloc (self->packbuf, cap);
        if (!buf)
            return s_fail (self, SIGCLIENT_ERR_NOMEM, "cannot allocate %zu bytes for a request", size);
        self->packbuf = buf;
        self->packcap = cap;
    }
    size_t packed = sigserve__v1__request__pack (req, self->packbuf);
    if (packed != size)
        return s_fail (self, SIGCLIENT_ERR_PROTOCOL, "packed %zu bytes, expected %zu", packed, size);
    return s_send_frame (self, self->packbuf, size);
}

static int s_send_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                         uint32_t rows, uint32_t deadline_us, uint64_t *request_id)
{
    if (!model)
        return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "no model name");
    if (!features && n_features)
        return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "features is NULL but n_features is %zu", n_features);
    if (n_features > SIZE_MAX / (2 * sizeof (float)))
        return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "%zu features is too many", n_features);
    Sigserve__V1__InferRequest infer = SIGSERVE__V1__INFER_REQUEST__INIT;
    infer.request_id = self->next_request_id;
    infer.model = (char *) model;           /* packing only reads them */
    infer.features = (float *) features;
    infer.n_features = n_features;
    infer.rows = rows;
    infer.deadline_us = deadline_us;
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
    req.infer = &infer;
    if (s_send_request (self, &req) != 0) return -1;
    self->next_request_id++;
    if (request_id) *request_id = infer.request_id;
    return 0;
}

/* ---- receiving ---- */

/* Receives one frame into self->frame, waiting at most until DEADLINE_NS. */
static int s_recv_frame (sigclient_t *self, int64_t deadline_ns)
{
    while (true) {
        if (zmq_msg_recv (&self->frame, self->socket, ZMQ_DONTWAIT) >= 0) {
            self->largest_unanswered = 0;
            if (!zmq_msg_more (&self->frame)) return 0;
            size_t parts = 1;   /* the rest of a multipart message is already here: drop it */
            while (zmq_msg_more (&self->frame)
                   && zmq_msg_recv (&self->frame, self->socket, ZMQ_DONTWAIT) >= 0)
                parts++;
            return s_fail (self, SIGCLIENT_ERR_PROTOCOL,
                           "a reply of %zu frames from %s, expected one", parts, self->endpoints);
        }
        if (errno != EAGAIN && errno != EINTR)
            return s_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot receive from %s: %s",
                           self->endpoints, zmq_strerror (errno));
        int64_t left_ns = deadline_ns - s_now_ns ();
        if (left_ns <= 0 && self->largest_unanswered > S_SERVER_DEFAULT_MAX_MESSAGE)
            return s_fail (self, SIGCLIENT_ERR_TIMEOUT, "timed out after %d ms waiting for a reply from %s "
                           "(a request was %zu bytes: a server drops requests over its max_message_bytes, "
                           "%d by default, without a reply)", self->timeout_ms, self->endpoints,
                           self->largest_unanswered, S_SERVER_DEFAULT_MAX_MESSAGE);
        if (left_ns <= 0)
            return s_fail (self, SIGCLIENT_ERR_TIMEOUT, "timed out after %d ms waiting for a reply from %s%s",
                           self->timeout_ms, self->endpoints,
                           self->curve ? " (CURVE: a server that does not allow this client's key, or whose "
                                         "key is not the one given, never answers)" : "");
        /* A long wait still resolves dns:// names on time: poll up to when they are due. */
        s_resolve_if_due (self);
        int64_t wait_ns = left_ns;
        if (self->n_dns && self->resolve_interval_ms > 0 && self->next_resolve_ns - s_now_ns () < wait_ns)
            wait_ns = self->next_resolve_ns - s_now_ns ();
        if (wait_ns < 0) wait_ns = 0;
        zmq_pollitem_t item = { .socket = self->socket, .events = ZMQ_POLLIN };
        if (zmq_poll (&item, 1, (long) ((wait_ns + 999999) / 1000000)) < 0 && errno != EINTR)
            return s_fail (self, SIGCLIENT_ERR_TRANSPORT, "cannot poll %s: %s",
                           self->endpoints, zmq_strerror (errno));
    }
}

/* Receives and decodes one Reply; the caller frees *REPLY_P with sigserve__v1__reply__free_unpacked. */
static int s_recv_reply (sigclient_t *self, int64_t deadline_ns, reply_t **reply_p)
{
    if (s_recv_frame (self, deadline_ns) != 0) return -1;
    size_t size = zmq_msg_size (&self->frame);
    reply_t *reply = sigserve__v1__reply__unpack (NULL, size, zmq_msg_data (&self->frame));
    if (!reply)
        return s_fail (self, SIGCLIENT_ERR_PROTOCOL, "cannot decode a reply of %zu bytes from %s",
                       size, self->endpoints);
    if (reply->body_case == SIGSERVE__V1__REPLY__BODY__NOT_SET) {
        sigserve__v1__reply__free_unpacked (reply, NULL);
        return s_fail (self, SIGCLIENT_ERR_PROTOCOL, "a reply with no body from %s", self->endpoints);
    }
    *reply_p = reply;
    return 0;
}

static int64_t s_deadline (const sigclient_t *self)
{
    return s_now_ns () + (int64_t) self->timeout_ms * 1000000;
}

/* The server's answer to a request it could not read carries request_id 0; ours start at 1. */
static bool s_is_rejection (const reply_t *reply)
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
        return s_fail (self, status, "server replied status %d: %s", status, text);
    return s_fail (self, status, "server replied %s: %s", name, text);
}

/* Fills RESULT and copies the outputs of an OK reply. STATUS_IS_FAILURE: a server error status
 * fails the call (synchronous API) rather than being reported in RESULT alone (pipelined API). */
static int s_take_infer (sigclient_t *self, const infer_reply_t *rep, float *outputs, size_t cap,
                         size_t *n_outputs, sigclient_result_t *result, bool status_is_failure)
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
        s_copy_string (result->error, sizeof result->error, rep->error);
    }
    if (rep->status != SIGSERVE__V1__STATUS__STATUS_OK) {
        if (n_outputs) *n_outputs = 0;
        return status_is_failure ? s_fail_status (self, rep) : 0;
    }
    if (n_outputs) *n_outputs = rep->n_outputs;
    if (rep->n_outputs > cap || (rep->n_outputs && !outputs))
        return s_fail (self, SIGCLIENT_ERR_CAPACITY,
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

int sigclient_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                     uint32_t rows, float *outputs, size_t out_capacity, size_t *n_outputs,
                     sigclient_result_t *result)
{
    if (!self) return -1;
    s_reset (self);
    /* Attempt k has request id first + k: ids are consecutive within one call, so "a reply to any
     * of this call's attempts" is a range. */
    uint64_t first = 0, id = 0;
    if (s_send_infer (self, model, features, n_features, rows, self->deadline_us, &first) != 0) return -1;
    uint32_t attempts = 1;
    int64_t deadline = s_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        if (s_recv_reply (self, deadline, &reply) != 0) {
            if (self->status != SIGCLIENT_ERR_TIMEOUT || attempts > (uint32_t) self->retries)
                return s_after_attempts (self, attempts);
            s_reset (self);
            if (s_send_infer (self, model, features, n_features, rows, self->deadline_us, &id) != 0)
                return s_after_attempts (self, attempts);
            attempts++;
            deadline = s_deadline (self);
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
            if (s_send_infer (self, model, features, n_features, rows, self->deadline_us, &id) != 0)
                return s_after_attempts (self, attempts);
            attempts++;
            deadline = s_deadline (self);
            continue;
        }
        if (ours || s_is_rejection (reply)) {
            int rc = s_take_infer (self, reply->infer, outputs, out_capacity, n_outputs, result, true);
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
    s_reset (self);
    return s_send_infer (self, model, features, n_features, rows, deadline_us, request_id);
}

int sigclient_recv_infer (sigclient_t *self, float *outputs, size_t out_capacity, size_t *n_outputs,
                          sigclient_result_t *result)
{
    if (!self) return -1;
    s_reset (self);
    if (!result) return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "no result to fill");
    int64_t deadline = s_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        if (s_recv_reply (self, deadline, &reply) != 0) return -1;
        if (reply->body_case == SIGSERVE__V1__REPLY__BODY_INFER) {
            int rc = s_take_infer (self, reply->infer, outputs, out_capacity, n_outputs, result, false);
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
    int64_t deadline = s_deadline (self);
    while (true) {
        reply_t *reply = NULL;
        if (s_recv_reply (self, deadline, &reply) != 0) {
            if (self->status != SIGCLIENT_ERR_TIMEOUT || attempts > (uint32_t) self->retries)
                return s_after_attempts (self, attempts);
            s_reset (self);
            if (s_send_request (self, req) != 0) return s_after_attempts (self, attempts);
            attempts++;
            deadline = s_deadline (self);
            continue;
        }
        if (reply->body_case == want) {
            *reply_p = reply;
            return 0;
        }
        if (s_is_rejection (reply)) {
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
    s_reset (self);
    if (!out) return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "no health struct to fill");
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
    s_reset (self);
    if (cap && !models) return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "models is NULL but cap is %zu", cap);
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
    }
    sigserve__v1__reply__free_unpacked (reply, NULL);
    if (count) *count = total;
    if (total > cap)
        return s_fail (self, SIGCLIENT_ERR_CAPACITY, "the server has %zu models, more than the buffer's %zu",
                       total, cap);
    return 0;
}

int sigclient_send_raw (sigclient_t *self, const void *payload, size_t len)
{
    if (!self) return -1;
    s_reset (self);
    if (!payload && len) return s_fail (self, SIGCLIENT_ERR_ARGUMENT, "payload is NULL but len is %zu", len);
    return s_send_frame (self, payload, len);
}

int sigclient_recv_raw (sigclient_t *self, void *buf, size_t cap, size_t *len)
{
    if (!self) return -1;
    s_reset (self);
    if (s_recv_frame (self, s_deadline (self)) != 0) return -1;
    size_t size = zmq_msg_size (&self->frame);
    if (len) *len = size;
    if (size > cap || (size && !buf))
        return s_fail (self, SIGCLIENT_ERR_CAPACITY, "a frame of %zu bytes, more than the buffer's %zu",
                       size, buf ? cap : 0);
    if (size) memcpy (buf, zmq_msg_data (&self->frame), size);
    return 0;
}
