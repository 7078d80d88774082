/* A ZeroMQ ROUTER of our own: the server side of the ZMTP engine, driven by one thread (a front, or
 * sigload's echo server) that reads, decodes and answers on its own sockets, with no I/O thread in
 * between: epoll over the listeners and the connections, one read per readable connection, one
 * sendmsg per reply.
 *
 * Messages come out as a libzmq ROUTER gives them: frames[0] is the routing id, then the peer's
 * frames (a REQ peer's empty delimiter among them); a reply goes back by the same frames[0]. Routing
 * ids are the router's own (8 bytes: the connection's slot and generation), never a peer's Identity,
 * so no peer can take another's replies, and a reply for a connection that has gone is refused
 * (EHOSTUNREACH) rather than delivered to the next one in its slot.
 *
 * Bounds: a message past max_message_bytes (frames x bytes) or 16 frames is handed out refused (the
 * frames within the bounds, with the routing id), and that connection reads nothing more and closes
 * once its reply is written; max_connections refuses a connection past the limit at once; near the
 * open-file limit the connection idle longest (nothing awaiting a reply) is closed to make room, so
 * a new client is served rather than left in the backlog; a connection with out_soft bytes queued
 * (a client that does not read its replies) is not read from until its queue drains, and a reply
 * that would pass the connection's out_hard is refused (EAGAIN). */
#ifndef SIGSERVE_ZMTP_ROUTER_H
#define SIGSERVE_ZMTP_ROUTER_H

#include "zmtp_conn.h"

#include <stdint.h>

#define ZMTP_ROUTING_ID_BYTES 8
#define ZMTP_PEER_NAME 64

typedef struct {
    zmtp_conn_opts_t conn;              /* every connection's (type and as_server are set here) */
    uint32_t max_connections;           /* 0: no limit but the open-file limit */
    size_t out_soft;                    /* stop reading a connection with this much queued (0: 1 MiB) */
} zmtp_router_opts_t;

typedef struct {
    int tag;                            /* the tag of the listener the connection came through */
    zmtp_msg_t msg;                     /* frames[0]: the routing id; then the peer's frames */
} zmtp_router_msg_t;

/* Counters, for logs and metrics (read by the owning thread). */
typedef struct {
    uint64_t accepted;
    uint64_t closed[ZMTP_CLOSE_COUNT];  /* by why they ended */
    uint64_t refused_limit;             /* past max_connections */
    uint64_t evicted;                   /* idle ones closed for room under the open-file limit */
    uint64_t refused_files;             /* accepted and closed at once: no fd left and none idle */
    char last_refused[ZMTP_PEER_NAME];  /* the last peer refused for max_connections */
    char last_error[160];               /* the last connection that failed its handshake, and why */
} zmtp_router_stats_t;

typedef struct zmtp_router zmtp_router_t;

zmtp_router_t *zmtp_router_new (const zmtp_router_opts_t *opts);
/* Writes what is queued for at most LINGER_MS, then closes everything (ipc:// files it made are
 * removed). Safe on NULL; NULLs *SELF_P. */
void zmtp_router_destroy (zmtp_router_t **self_p, uint32_t linger_ms);

/* Listens on ENDPOINT (zmtp_addr.h); its connections' messages carry TAG. REUSEPORT: share a TCP port
 * with other listeners (SO_REUSEPORT). The listener's id (>= 0), or -1 with ERR. BOUND (may be NULL;
 * ZMTP_ENDPOINT_MAX bytes) gets the endpoint as bound. */
int zmtp_router_bind (zmtp_router_t *self, const char *endpoint, int tag, bool reuseport, char *bound, char *err,
                      size_t errlen);
/* Stops listening on the listeners of TAG (no new connections; those open stay). */
void zmtp_router_unbind (zmtp_router_t *self, int tag);
/* Closes the connections that came through TAG's listeners. */
void zmtp_router_close_tag (zmtp_router_t *self, int tag);

/* FD (an eventfd, a pipe) wakes zmtp_router_wait when readable; the caller drains it. */
int zmtp_router_watch (zmtp_router_t *self, int fd);
/* Sleeps until a socket has something or the watched fd is readable, for at most TIMEOUT_MS (0: look
 * and return; -1: no bound). > 0 something to do, 0 nothing. */
int zmtp_router_wait (zmtp_router_t *self, int timeout_ms);

/* The next message of any connection, the connections in turn: 1 (OUT filled; its views are valid
 * until the next zmtp_router_recv), 0 none now. New connections, handshakes, PINGs and queued
 * writes are taken care of on the way. */
int zmtp_router_recv (zmtp_router_t *self, zmtp_router_msg_t *out, uint64_t now);
/* Sends N frames (frames[0]: the routing id of the connection; then what the peer receives). 0, or
 * -1 with errno: EHOSTUNREACH (no such connection now), EAGAIN (its queue is full: nothing sent). */
int zmtp_router_send (zmtp_router_t *self, const zmtp_frame_t *frames, int n, uint64_t now);

/* A new max_message_bytes for every connection, open or to come (a reload). */
void zmtp_router_set_max_message_bytes (zmtp_router_t *self, uint64_t bytes);

/* Corks the router (ON) for a burst of replies: each connection's replies are queued and written with
 * one system call when it is uncorked (OFF), instead of one each. */
void zmtp_router_cork (zmtp_router_t *self, bool on, uint64_t now);

/* Heartbeats, handshake bounds, and connections that finished closing. Call a few times a second. */
void zmtp_router_tick (zmtp_router_t *self, uint64_t now);

/* The CURVE client key (32 bytes) of the connection a routing id names, or NULL (NULL mechanism, gone). */
const uint8_t *zmtp_router_peer_key (const zmtp_router_t *self, const zmtp_frame_t *routing_id);
uint32_t zmtp_router_connections (const zmtp_router_t *self);
const zmtp_router_stats_t *zmtp_router_stats (const zmtp_router_t *self);

#endif
