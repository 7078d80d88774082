/* Endpoints as ZeroMQ writes them, for the ZMTP engine: tcp://ADDRESS:PORT and ipc://PATH.
 *
 * Binding (libzmq's rules): ADDRESS is "*" (every IPv4 interface), a numeric IPv4 address, a
 * bracketed IPv6 address ("[::1]"), or an interface name ("lo"); PORT is 1..65535, or "*" / "0" for
 * one the system picks. A host name is refused (ENODEV), as libzmq refuses it. ipc://@NAME is Linux's
 * abstract namespace. Connecting: ADDRESS may also be a host name (resolved with getaddrinfo; the
 * first address that accepts is used). Every socket is non-blocking and close-on-exec; TCP ones have
 * TCP_NODELAY. */
#ifndef SIGSERVE_ZMTP_ADDR_H
#define SIGSERVE_ZMTP_ADDR_H

#include <stdbool.h>
#include <stddef.h>

#define ZMTP_ENDPOINT_MAX 256

/* A listening socket for ENDPOINT (backlog BACKLOG); REUSEPORT: SO_REUSEPORT, so that several
 * listeners (one per front) share a TCP port. The endpoint as bound (the port picked for "*") goes
 * to BOUND (ZMTP_ENDPOINT_MAX bytes). The fd, or -1 with errno and ERR (what went wrong, as libzmq
 * says it: "Address already in use", "No such device" for a host name; the caller names the
 * endpoint). An ipc:// path is not checked or removed here: the caller decides what a file already
 * there means. */
int zmtp_listen (const char *endpoint, int backlog, bool reuseport, char *bound, char *err, size_t errlen);

/* Starts connecting to ENDPOINT: the fd (connected, or with the connection in progress: poll for
 * writable, then zmtp_connect_done), or -1 with errno and ERR (a name that does not resolve, a
 * transport this engine lacks). */
int zmtp_connect_start (const char *endpoint, char *err, size_t errlen);
/* Whether the connection started on FD came up: 0 yes, -1 no (errno from SO_ERROR). */
int zmtp_connect_done (int fd);

/* Whether ENDPOINT is one this engine can bind (CONNECT false) or connect to (true): tcp://HOST:PORT
 * (a port from 1 to 65535; binding also takes * or 0) or ipc://PATH. 0, or -1 with errno and ERR
 * saying why not. */
int zmtp_endpoint_check (const char *endpoint, bool connect, char *err, size_t errlen);

/* A socket just accepted or connected: TCP_NODELAY where it is TCP. */
void zmtp_tune (int fd);

/* The peer's address of a connected FD, for messages ("127.0.0.1:40312", "ipc"). */
void zmtp_peer_name (int fd, char *out, size_t len);

#endif
