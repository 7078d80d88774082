/* The front's ROUTER sockets, one per configured endpoint, in fixed slots (a request's job names
 * its slot): binding with the socket options and policies below, reload (bind the new next to
 * the old, then close the removed ones once their last reply is sent), the poll set, and the
 * client key of a message. Front thread only, except endpoints_new/destroy.
 *
 * Every socket: ZMQ_MAXMSGSIZE = max_message_bytes (libzmq bounds each frame with it; the front
 * bounds the whole message), ZMQ_ROUTER_MANDATORY (a reply that cannot be delivered is reported,
 * not dropped silently), heartbeats (heartbeat_ms: a peer silent for 3 intervals is closed) and a
 * bounded linger. ipc:// endpoints: a path where a live server answers is refused (never taken
 * over); a stale socket file is removed; the new file gets ipc_mode. */
#ifndef SIGSERVE_ENDPOINT_H
#define SIGSERVE_ENDPOINT_H

#include "base/config.h"
#include "base/stats.h"
#include "front/auth.h"
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

typedef struct _endpoints_t endpoints_t;

/* Binds every endpoint of CFG in a context of its own (io_threads I/O threads), or with AUTH (not
 * NULL: server.curve) in czmq's, every socket a CURVE server and every new endpoint proved to
 * refuse an unknown key before it serves. NULL with ERR naming the endpoint on failure (a host name
 * where ZeroMQ wants an address gets the address to use). Without AUTH, an endpoint reachable from
 * other hosts (tcp:// on anything but loopback) is warned about at start: it serves plaintext.
 * STATS (may be NULL) counts the CURVE handshakes refused (endpoints_watch_connections). */
endpoints_t *endpoints_new (const server_config_t *cfg, auth_t *auth, stats_t *stats, char *err, size_t errlen);
/* Closes every socket, letting queued replies go for at most LINGER_MS. */
void endpoints_destroy (endpoints_t **self_p, uint32_t linger_ms);
/* The context the sockets live in. */
void *endpoints_context (endpoints_t *self);

void *endpoints_socket (endpoints_t *self, int slot);
const char *endpoints_name (const endpoints_t *self, int slot);
/* Open slots in order: for (s = first; s >= 0; s = next (s)). */
int endpoints_first (const endpoints_t *self);
int endpoints_next (const endpoints_t *self, int slot);
/* The poll set: every open socket, then EXTRA_FD for reading. Returns the count. */
int endpoints_poll_items (endpoints_t *self, int extra_fd, zmq_pollitem_t **items);

/* Requests admitted from a slot and not yet answered (its socket stays open until then). */
void endpoints_hold (endpoints_t *self, int slot);
void endpoints_release (endpoints_t *self, int slot);

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

/* Takes the connection events of every socket. server.max_connections: a connection past the
 * limit is shut down at once (logged at warn at most once a second). With CURVE: a refused
 * handshake is counted by reason (stats_count_auth_failure) and logged at warn at most once a
 * second with the counts since. Cheap when nothing happened; the front calls it a few times a
 * second, whenever a monitor polls readable, and at the first message of a connection (endpoints_refused). */
void endpoints_watch_connections (endpoints_t *self, uint64_t now_ns);
/* Whether FRAME (a message's first) came on a connection shut down for the limit (max_connections),
 * whose messages are dropped unanswered. One bit tested for a connection already counted; the first
 * message of another takes the connection events in first (at once, whether the front sleeps in
 * zmq_poll or spins). */
bool endpoints_refused (endpoints_t *self, const zmq_msg_t *frame, uint64_t now_ns);
uint32_t endpoints_connections (const endpoints_t *self);

/* Who sent FRAME (a message's first frame): its CURVE public key when CURVE is on, else the
 * routing id. Borrowed from the frame. */
const void *endpoints_client_key (endpoints_t *self, zmq_msg_t *frame, size_t *len);

#endif
