/* libsigclient: dns:// endpoints (sigclient.h, "Following a fleet"). A name is resolved into
 * tcp:// endpoints that the round-robin socket connects to; resolving again connects the new ones
 * and disconnects the vanished ones (and tells the streams, whose sockets follow no name). */
#include "sigclient_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_DNS_PREFIX "dns://"
/* A name with no address connected is resolved again this often, however long the interval:
 * a fleet that is scaling up from nothing should be found within a fraction of a second. */
#define S_DNS_EMPTY_RETRY_MS 200

/* The resolver of every client of this process: getaddrinfo unless a test replaced it. */
static int s_getaddrinfo (const char *name, char (*addrs)[SIGCLIENT_ADDRESS_MAX], size_t cap,
                          char *error, size_t error_cap, void *arg);
static sigclient_resolver_fn s_resolver = s_getaddrinfo;
static void *s_resolver_arg;

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

bool client_is_dns (const char *endpoint)
{
    return strncmp (endpoint, S_DNS_PREFIX, strlen (S_DNS_PREFIX)) == 0;
}

/* Splits "dns://NAME:PORT" (NAME may be a bracketed IPv6 literal). 0, or -1 with ERROR filled. */
int client_dns_parse (const char *endpoint, char *name, char *port, char *error, size_t error_cap)
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
    if (len == 0 || len >= CLIENT_DNS_NAME_MAX || memchr (rest, '/', len) || memchr (rest, '[', len)) {
        snprintf (error, error_cap, "'%s': expected dns://NAME:PORT with a host name of 1 to %d bytes",
                  endpoint, CLIENT_DNS_NAME_MAX - 1);
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
    return strcmp (*(const client_endpoint_t *) a, *(const client_endpoint_t *) b);
}

/* The tcp:// endpoints behind NAME now: sorted, without duplicates, at most CAP. The count (0 when
 * NAME has none), or -1 with ERROR filled. */
static int s_dns_lookup (const char *name, const char *port, client_endpoint_t *out, size_t cap,
                         char *error, size_t error_cap)
{
    char addrs[CLIENT_DNS_MAX_ADDRS][SIGCLIENT_ADDRESS_MAX];
    error[0] = '\0';
    int found = s_resolver (name, addrs, cap < CLIENT_DNS_MAX_ADDRS ? cap : CLIENT_DNS_MAX_ADDRS, error, error_cap,
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
    if (!client_is_dns (endpoint)) {
        if (strlen (endpoint) >= SIGCLIENT_ENDPOINT_MAX) {
            snprintf (error, error_cap, "'%s': longer than %d bytes", endpoint, SIGCLIENT_ENDPOINT_MAX - 1);
            errno = ENOSPC;
            return -1;
        }
        snprintf (out[0], SIGCLIENT_ENDPOINT_MAX, "%s", endpoint);
        return 1;
    }
    char name[CLIENT_DNS_NAME_MAX], port[6];
    if (client_dns_parse (endpoint, name, port, error, error_cap) != 0) { errno = EINVAL; return -1; }
    char why[160];
    int n = s_dns_lookup (name, port, out, cap, why, sizeof why);
    if (n <= 0) {
        snprintf (error, error_cap, "%s: %s", endpoint, n < 0 ? why : "no address");
        errno = ENOENT;
        return -1;
    }
    return n;
}

static bool s_listed (const client_endpoint_t *list, size_t n, const char *endpoint)
{
    return bsearch (endpoint, list, n, sizeof *list, s_compare_endpoints) != NULL;
}

/* Resolves D->name again: connects the addresses that are new, disconnects those that are gone.
 * A failed resolution, or one that gives no address, changes nothing. */
static void s_dns_refresh (sigclient_t *self, client_dns_t *d)
{
    client_endpoint_t fresh[CLIENT_DNS_MAX_ADDRS];
    int n = s_dns_lookup (d->name, d->port, fresh, CLIENT_DNS_MAX_ADDRS, d->error, sizeof d->error);
    if (n <= 0) {
        if (n == 0) snprintf (d->error, sizeof d->error, "no address");
        return;
    }
    d->error[0] = '\0';
    size_t kept = 0;
    for (size_t i = 0; i < d->n_connected; i++) {
        if (s_listed (fresh, (size_t) n, d->connected[i]))
            memmove (d->connected[kept++], d->connected[i], sizeof (client_endpoint_t));
        else
            client_sock_disconnect (self->socket, d->connected[i]);   /* its queued requests are dropped */
    }
    d->n_connected = kept;
    for (int i = 0; i < n; i++) {
        if (s_listed (d->connected, kept, fresh[i])) continue;
        char why[SIGCLIENT_ENDPOINT_MAX + 256];
        if (client_sock_connect (self->socket, fresh[i], why, sizeof why) != 0) {
            snprintf (d->error, sizeof d->error, "cannot connect to %.63s: %.60s", fresh[i],
                      client_sock_strerror (errno));
            continue;
        }
        memcpy (d->connected[d->n_connected++], fresh[i], sizeof (client_endpoint_t));
    }
    qsort (d->connected, d->n_connected, sizeof *d->connected, s_compare_endpoints);
}

size_t client_peer_count (const sigclient_t *self)
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
        const client_dns_t *d = &self->dns[i];
        size += strlen (d->name) + strlen (d->port) + strlen (d->error) + 64;
        for (size_t k = 0; k < d->n_connected; k++) size += strlen (d->connected[k]) + 2;
    }
    char *text = malloc (size);
    if (!text) return;
    size_t used = (size_t) snprintf (text, size, "%s", self->static_endpoints);
    for (size_t i = 0; i < self->n_dns; i++) {
        const client_dns_t *d = &self->dns[i];
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

void client_resolve_all (sigclient_t *self)
{
    for (size_t i = 0; i < self->n_dns; i++) s_dns_refresh (self, &self->dns[i]);
    s_describe (self);
    if (self->streams_refresh) self->streams_refresh (self);
    int64_t wait_ms = self->resolve_interval_ms;
    if (client_peer_count (self) == 0 && wait_ms > S_DNS_EMPTY_RETRY_MS) wait_ms = S_DNS_EMPTY_RETRY_MS;
    self->next_resolve_ns = client_now_ns () + wait_ms * 1000000;
}

size_t client_addresses (const sigclient_t *self, const char **out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < self->n_static; i++, n++)
        if (n < cap) out[n] = self->statics[i];
    for (size_t i = 0; i < self->n_dns; i++)
        for (size_t k = 0; k < self->dns[i].n_connected; k++, n++)
            if (n < cap) out[n] = self->dns[i].connected[k];
    return n;
}

void client_resolve_if_due (sigclient_t *self)
{
    if (self->n_dns && self->resolve_interval_ms > 0 && client_now_ns () >= self->next_resolve_ns)
        client_resolve_all (self);
}
