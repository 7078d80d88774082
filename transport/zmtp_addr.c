#define _GNU_SOURCE
#include "zmtp_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* "tcp://HOST:PORT" split: HOST without brackets (IPV6 says they were there), PORT. */
static int s_split_tcp (const char *endpoint, char *host, size_t hostlen, char *port, bool *ipv6, char *err,
                        size_t errlen)
{
    const char *a = endpoint + 6;
    const char *colon = strrchr (a, ':');
    *ipv6 = a[0] == '[';
    if (!colon || colon == a || !colon[1]) {
        snprintf (err, errlen, "%s: expected tcp://HOST:PORT", endpoint);
        errno = EINVAL;
        return -1;
    }
    const char *h = a, *hend = colon;
    if (*ipv6) {
        if (colon[-1] != ']') {
            snprintf (err, errlen, "%s: expected tcp://[IPV6]:PORT", endpoint);
            errno = EINVAL;
            return -1;
        }
        h = a + 1;
        hend = colon - 1;
    }
    if ((size_t) (hend - h) >= hostlen || strlen (colon + 1) > 5) {
        snprintf (err, errlen, "%s: the address or port is too long", endpoint);
        errno = EINVAL;
        return -1;
    }
    memcpy (host, h, (size_t) (hend - h));
    host[hend - h] = '\0';
    strcpy (port, colon + 1);
    if (strcmp (port, "*") == 0)
        strcpy (port, "0");
    char *end;
    long p = strtol (port, &end, 10);
    if (*end || p < 0 || p > 65535) {
        snprintf (err, errlen, "%s: expected a port from 1 to 65535 (or *)", endpoint);
        errno = EINVAL;
        return -1;
    }
    return 0;
}

/* The bind address for HOST (libzmq's rules: *, a numeric address, an interface name). */
static int s_bind_address (const char *endpoint, const char *host, bool ipv6, uint16_t port, struct sockaddr_storage *sa,
                           socklen_t *len, char *err, size_t errlen)
{
    memset (sa, 0, sizeof *sa);
    struct sockaddr_in *v4 = (struct sockaddr_in *) sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *) sa;
    if (strcmp (host, "*") == 0) {
        v4->sin_family = AF_INET;
        v4->sin_addr.s_addr = htonl (INADDR_ANY);
        v4->sin_port = htons (port);
        *len = sizeof *v4;
        return 0;
    }
    if (!ipv6 && inet_pton (AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons (port);
        *len = sizeof *v4;
        return 0;
    }
    if (ipv6 && inet_pton (AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons (port);
        *len = sizeof *v6;
        return 0;
    }
    struct ifaddrs *ifs = NULL;
    if (!ipv6 && getifaddrs (&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strcmp (i->ifa_name, host) == 0) {
                memcpy (v4, i->ifa_addr, sizeof *v4);
                v4->sin_port = htons (port);
                *len = sizeof *v4;
                freeifaddrs (ifs);
                return 0;
            }
        freeifaddrs (ifs);
    }
    (void) endpoint;
    snprintf (err, errlen, "%s", strerror (ENODEV));   /* as libzmq says it: a host name is not bound */
    errno = ENODEV;
    return -1;
}

void zmtp_tune (int fd)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    int one = 1;
    if (getsockname (fd, (struct sockaddr *) &sa, &len) == 0 && (sa.ss_family == AF_INET || sa.ss_family == AF_INET6))
        setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int s_unix_address (const char *endpoint, struct sockaddr_un *sa, socklen_t *len, char *err, size_t errlen)
{
    const char *path = endpoint + 6;
    memset (sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = strlen (path);
    if (n == 0 || n >= sizeof sa->sun_path) {
        snprintf (err, errlen, "%s: the path must be 1 to %zu bytes", endpoint, sizeof sa->sun_path - 1);
        errno = EINVAL;
        return -1;
    }
    memcpy (sa->sun_path, path, n);
    if (path[0] == '@')
        sa->sun_path[0] = '\0';     /* the abstract namespace */
    *len = (socklen_t) (offsetof (struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
    return 0;
}

int zmtp_endpoint_check (const char *endpoint, bool connect, char *err, size_t errlen)
{
    if (strncmp (endpoint, "ipc://", 6) == 0)
        return 0;
    if (strncmp (endpoint, "tcp://", 6) == 0) {
        char host[128], port[8];
        bool ipv6;
        if (s_split_tcp (endpoint, host, sizeof host, port, &ipv6, err, errlen) != 0)
            return -1;
        if (connect && atoi (port) == 0) {
            snprintf (err, errlen, "%s: expected a port from 1 to 65535 to connect to", endpoint);
            errno = EINVAL;
            return -1;
        }
        return 0;
    }
    if (strncmp (endpoint, "inproc://", 9) == 0)
        snprintf (err, errlen, "%s: inproc:// is libzmq's in-process transport; the zmtp transport serves tcp:// "
                  "and ipc:// (use ipc://, or server.transport \"libzmq\")", endpoint);
    else
        snprintf (err, errlen, "%s: expected tcp://HOST:PORT or ipc://PATH", endpoint);
    errno = EPROTONOSUPPORT;
    return -1;
}

/* A non-blocking listening socket on SA (TCP: SO_REUSEADDR, and SO_REUSEPORT when REUSEPORT). The fd,
 * or -1 with errno and ERR. */
static int s_bound_socket (const struct sockaddr *sa, socklen_t len, int backlog, bool reuseport, char *err,
                           size_t errlen)
{
    int fd = socket (sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0 && sa->sa_family != AF_UNIX) {
        setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (reuseport)
            setsockopt (fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    }
    if (fd < 0 || bind (fd, sa, len) != 0 || listen (fd, backlog) != 0) {
        int e = errno;
        snprintf (err, errlen, "%s", strerror (e));
        if (fd >= 0)
            close (fd);
        errno = e;
        return -1;
    }
    return fd;
}

int zmtp_listen (const char *endpoint, int backlog, bool reuseport, char *bound, char *err, size_t errlen)
{
    if (zmtp_endpoint_check (endpoint, false, err, errlen) != 0)
        return -1;
    int fd = -1;
    if (strncmp (endpoint, "ipc://", 6) == 0) {
        struct sockaddr_un sa;
        socklen_t len;
        if (s_unix_address (endpoint, &sa, &len, err, errlen) != 0)
            return -1;
        fd = s_bound_socket ((struct sockaddr *) &sa, len, backlog, false, err, errlen);
        if (fd >= 0)
            snprintf (bound, ZMTP_ENDPOINT_MAX, "%s", endpoint);
        return fd;
    }
    char host[128], port[8];
    bool ipv6;
    if (s_split_tcp (endpoint, host, sizeof host, port, &ipv6, err, errlen) != 0)
        return -1;
    struct sockaddr_storage sa;
    socklen_t len;
    if (s_bind_address (endpoint, host, ipv6, (uint16_t) atoi (port), &sa, &len, err, errlen) != 0)
        return -1;
    fd = s_bound_socket ((struct sockaddr *) &sa, len, backlog, reuseport, err, errlen);
    if (fd < 0)
        return -1;
    struct sockaddr_storage got;
    socklen_t glen = sizeof got;
    getsockname (fd, (struct sockaddr *) &got, &glen);
    char addr[INET6_ADDRSTRLEN] = "?";
    uint16_t p = 0;
    if (got.ss_family == AF_INET) {
        inet_ntop (AF_INET, &((struct sockaddr_in *) &got)->sin_addr, addr, sizeof addr);
        p = ntohs (((struct sockaddr_in *) &got)->sin_port);
        snprintf (bound, ZMTP_ENDPOINT_MAX, "tcp://%s:%u", addr, p);
    } else {
        inet_ntop (AF_INET6, &((struct sockaddr_in6 *) &got)->sin6_addr, addr, sizeof addr);
        p = ntohs (((struct sockaddr_in6 *) &got)->sin6_port);
        snprintf (bound, ZMTP_ENDPOINT_MAX, "tcp://[%s]:%u", addr, p);
    }
    return fd;
}

int zmtp_connect_start (const char *endpoint, char *err, size_t errlen)
{
    if (zmtp_endpoint_check (endpoint, true, err, errlen) != 0)
        return -1;
    if (strncmp (endpoint, "ipc://", 6) == 0) {
        struct sockaddr_un sa;
        socklen_t len;
        if (s_unix_address (endpoint, &sa, &len, err, errlen) != 0)
            return -1;
        int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || (connect (fd, (struct sockaddr *) &sa, len) != 0 && errno != EINPROGRESS && errno != EAGAIN)) {
            int e = errno;
            snprintf (err, errlen, "%s: %s", endpoint, strerror (e));
            if (fd >= 0)
                close (fd);
            errno = e;
            return -1;
        }
        return fd;
    }
    char host[128], port[8];
    bool ipv6;
    if (s_split_tcp (endpoint, host, sizeof host, port, &ipv6, err, errlen) != 0)
        return -1;
    struct addrinfo want = { .ai_family = ipv6 ? AF_INET6 : AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *found = NULL;
    int rc = getaddrinfo (host, port, &want, &found);
    if (rc != 0 || !found) {
        snprintf (err, errlen, "%s: cannot resolve %s: %s", endpoint, host, rc ? gai_strerror (rc) : "no address");
        errno = EHOSTUNREACH;
        return -1;
    }
    int fd = -1, e = 0;
    for (struct addrinfo *a = found; a && fd < 0; a = a->ai_next) {
        fd = socket (a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            e = errno;
            continue;
        }
        zmtp_tune (fd);
        if (connect (fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            e = errno;
            close (fd);
            fd = -1;
        }
    }
    freeaddrinfo (found);
    if (fd < 0) {
        snprintf (err, errlen, "%s: %s", endpoint, strerror (e));
        errno = e;
    }
    return fd;
}

int zmtp_connect_done (int fd)
{
    int e = 0;
    socklen_t len = sizeof e;
    if (getsockopt (fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
        return -1;
    if (e) {
        errno = e;
        return -1;
    }
    return 0;
}

void zmtp_peer_name (int fd, char *out, size_t len)
{
    struct sockaddr_storage a;
    socklen_t alen = sizeof a;
    char addr[INET6_ADDRSTRLEN] = "?";
    snprintf (out, len, "?");
    if (getpeername (fd, (struct sockaddr *) &a, &alen) != 0)
        return;
    if (a.ss_family == AF_INET) {
        inet_ntop (AF_INET, &((struct sockaddr_in *) &a)->sin_addr, addr, sizeof addr);
        snprintf (out, len, "%s:%u", addr, ntohs (((struct sockaddr_in *) &a)->sin_port));
    } else if (a.ss_family == AF_INET6) {
        inet_ntop (AF_INET6, &((struct sockaddr_in6 *) &a)->sin6_addr, addr, sizeof addr);
        snprintf (out, len, "[%s]:%u", addr, ntohs (((struct sockaddr_in6 *) &a)->sin6_port));
    } else
        snprintf (out, len, "ipc");
}
