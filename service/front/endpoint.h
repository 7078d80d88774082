/* The front's endpoints: one listening socket per configured endpoint, in fixed slots (a request's job
 * names its slot), over one of two transports (server.transport):
 *
 *   zmtp    our own ZMTP engine (transport/zmtp_router.h): the front reads and writes its TCP and Unix
 *           sockets itself, no I/O thread between; CURVE with libsodium, the allowlist read with czmq
 *   libzmq  a libzmq ROUTER per endpoint, its I/O threads between the front and the wire; CURVE with
 *           czmq's zauth as the ZAP handler
 *
 * Either way a message comes out as a ROUTER gives it (frames[0] the sender's routing id, then its
 * frames, the payload last) and a reply goes back on the envelope it came with. Also here: binding with
 * the socket options and policies below, reload (bind the new next to the old, then close the removed
 * ones once their last reply is sent), the front's sleep, and the client key of a message. Front
 * thread only, except endpoints_new/destroy.
 *
 * Bounds: max_message_bytes over the whole message and MAX_FRAMES frames. zmtp bounds a message as it
 * arrives: one past them is handed out "cut" (its frames within the bounds), answered, and its
 * connection closed; libzmq bounds each frame (ZMQ_MAXMSGSIZE, dropping the connection silently) and
 * buffers the rest whole, so the front bounds the message after the fact. Heartbeats: heartbeat_ms
 * (a peer silent for 3 intervals is closed). max_connections: a connection past the limit is shut
 * down at once; zmtp also closes the connection idle longest near the open-file limit rather than
 * leave a new client unanswered. Routing ids: zmtp assigns its own (no peer can take another's
 * replies); libzmq takes a peer's Identity. ipc:// endpoints: a path where a live server answers is
 * refused (never taken over); a stale socket file is removed; the new file gets ipc_mode. */
#ifndef SIGSERVE_ENDPOINT_H
#define SIGSERVE_ENDPOINT_H

#include "base/config.h"
#include "base/stats.h"
#include "front/auth.h"
#include "serving/job.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_FRAMES 16               /* envelope frames + payload; a longer message is refused */

/* One message as received: its first MAX_FRAMES frames (views valid until the next endpoints_recv or
 * endpoints_release) and the size of the whole. */
typedef struct {
    int socket;                 /* the endpoint slot it came on */
    int nframes;                /* frames kept in frames[] (at most MAX_FRAMES): frames[0] is the routing id */
    size_t total_frames;        /* frames in the message (as far as they came, when cut) */
    size_t bytes;               /* bytes over every frame */
    bool cut;                   /* zmtp refused it as it arrived (past the bounds): answer it, and its
                                   connection closes once the answer is written */
    uint64_t t_recv;            /* CLOCK_MONOTONIC ns when it was taken */
    frame_t frames[MAX_FRAMES];
} message_t;

typedef struct _endpoints_t endpoints_t;

/* Binds every endpoint of CFG over CFG's transport; with AUTH (not NULL: server.curve) every socket is
 * a CURVE server (libzmq: in czmq's context, every new endpoint proved to refuse an unknown key before
 * it serves). NULL with ERR naming the endpoint on failure (a host name where ZeroMQ wants an address
 * gets the address to use). Without AUTH, an endpoint reachable from other hosts (tcp:// on anything
 * but loopback) is warned about at start: it serves plaintext. STATS (may be NULL) counts the CURVE
 * handshakes refused. */
endpoints_t *endpoints_new (const server_config_t *cfg, auth_t *auth, stats_t *stats, char *err, size_t errlen);
/* What binding CFG's endpoints would refuse, checked without taking their ports (sigserve --check-config,
 * and the start and each reload before they bind): a tcp:// address the transport cannot bind (a host
 * name where an address or an interface name is wanted gets the address to use; an address not on this
 * host), found by binding that address on a port the system picks and letting go at once; two endpoints
 * on one port of one address (a wildcard counts as every address); an ipc:// path too long, taken by a
 * file that is not a socket, or in a folder missing or not writable; with CURVE, an inproc:// endpoint.
 * Whether a port is free, and an ipc:// path live, is known only by binding: endpoints_new says. 0, or
 * -1 with ERR naming the endpoint ("server.endpoints[1]: ..."). CFG->transport picks the rules: a reload
 * passes the running transport, which binds its endpoints whatever the file says. */
int endpoints_check (const server_config_t *cfg, char *err, size_t errlen);
/* Whether listening on SA (an address and port of another listener: WHAT, e.g. "server.http", written
 * NAME) would take the port of one of CFG's tcp:// endpoints: -1 with ERR naming both, else 0. */
struct sockaddr;
int endpoints_overlap (const server_config_t *cfg, const char *what, const char *name, const struct sockaddr *sa,
                       char *err, size_t errlen);
/* Closes every socket, letting queued replies go for at most LINGER_MS. */
void endpoints_destroy (endpoints_t **self_p, uint32_t linger_ms);

/* The next message of any endpoint, the endpoints (zmtp: the connections) in turn: 1 (MSG filled),
 * 0 none waiting. */
int endpoints_recv (endpoints_t *self, message_t *msg);
/* MSG's frames are not needed any more (libzmq gives its buffers back). */
void endpoints_release (endpoints_t *self, message_t *msg);
/* Sends a reply: ENVELOPE's COUNT frames (its routing id first), then PAYLOAD. 0, or -1 with errno:
 * EAGAIN (the client's queue is full: it is not reading), EHOSTUNREACH (the client has gone). */
int endpoints_send (endpoints_t *self, int slot, const frame_t *envelope, int count, const void *payload, size_t len);
/* A burst of replies (ON ... OFF): zmtp writes each client's replies of the burst with one system call
 * at OFF instead of one each; libzmq batches by itself. */
void endpoints_cork (endpoints_t *self, bool on);
/* Sleeps until a socket has something or WAKE_FD is readable, at most TIMEOUT_MS. > 0 woken. */
int endpoints_wait (endpoints_t *self, int wake_fd, int timeout_ms);

const char *endpoints_name (const endpoints_t *self, int slot);
/* The transport serving them: "zmtp" or "libzmq". */
const char *endpoints_transport (const endpoints_t *self);

/* Requests admitted from a slot and not yet answered (its socket stays open until then). */
void endpoints_hold (endpoints_t *self, int slot);
void endpoints_release_slot (endpoints_t *self, int slot);

/* Reload: binds CFG's endpoints that are not bound yet (-1 with ERR, binding nothing, when one
 * fails); drop_added undoes the last add; commit marks the endpoints CFG no longer has as closing
 * (unbound at once, new requests on them answered UNAVAILABLE, closed once idle). */
int endpoints_add (endpoints_t *self, const server_config_t *cfg, char *err, size_t errlen);
void endpoints_drop_added (endpoints_t *self);
void endpoints_commit (endpoints_t *self, const server_config_t *cfg);
bool endpoints_closing (const endpoints_t *self, int slot);
bool endpoints_any_closing (const endpoints_t *self);
/* Closes the closing slots that have nothing in flight. */
void endpoints_close_idle (endpoints_t *self);

/* The connections' housekeeping: their events (max_connections: a connection past the limit is shut
 * down, logged at warn at most once a second; CURVE: a refused handshake is counted by reason,
 * stats_count_auth_failure, and logged at warn at most once a second with the counts since), and
 * zmtp's heartbeats and closing connections. Cheap when nothing happened; the front calls it a few
 * times a second, whenever it wakes from endpoints_wait, and (libzmq) at the first message of a
 * connection (endpoints_refused). */
void endpoints_watch_connections (endpoints_t *self, uint64_t now_ns);
/* Whether MSG came on a connection shut down for the limit (max_connections), whose messages are
 * dropped unanswered (libzmq: the limit is applied after the fact; zmtp never hands such a message
 * out). */
bool endpoints_refused (endpoints_t *self, const message_t *msg, uint64_t now_ns);
uint32_t endpoints_connections (const endpoints_t *self);

/* Who sent MSG: its CURVE public key when CURVE is on, else the routing id. Borrowed from MSG. */
const void *endpoints_client_key (endpoints_t *self, const message_t *msg, size_t *len);

#endif
