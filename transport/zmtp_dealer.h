/* A ZeroMQ DEALER of our own: the client side of the ZMTP engine. The calling thread writes and reads
 * its own sockets (no I/O thread): a send is one sendmsg on a connection that is up, a receive one
 * read, a wait one poll over the connections.
 *
 * It connects to every endpoint given (tcp:// with host names resolved at each attempt, ipc://),
 * reconnecting one that fails or drops after reconnect_ms (doubling up to reconnect_max_ms while it
 * keeps failing). Sends go round-robin over the connections that are up (handshake done), never to
 * one that is down; while none is up, messages wait in the dealer's own queue (bounded by
 * queue_max bytes) and leave, in order, on the first connection to come up. Replies come from any
 * connection, the connections in turn. A message from a connection that then drops is lost, as with
 * libzmq: callers time out and retry.
 *
 * A server whose security mechanism is not the dealer's (a CURVE server and a dealer without keys,
 * or the other way round) cannot be talked to by reconnecting: its endpoint is then not connected
 * again by the timers, only when a message is sent, at most once per reconnect_max_ms (a server may
 * come back with another configuration); zmtp_dealer_error says what the server asks for. While
 * every endpoint is so refused, sends and receives fail at once (EPROTO) rather than wait. (RFC 37
 * has a mismatch end the connection without an ERROR; each side reads the other's mechanism in its
 * greeting. libzmq's own DEALER stops after such a protocol error too, for good.)
 *
 * Progress (connecting, handshakes, queued writes, reconnection, heartbeats) happens inside
 * zmtp_dealer_recv and zmtp_dealer_send; a caller that polls the dealer's fds itself
 * (zmtp_dealer_pollfds) calls zmtp_dealer_recv with timeout 0 when they are ready. */
#ifndef SIGSERVE_ZMTP_DEALER_H
#define SIGSERVE_ZMTP_DEALER_H

#include "zmtp_conn.h"

#include <poll.h>
#include <stdint.h>

typedef struct {
    zmtp_mechanism_t mechanism;         /* NULL or CURVE */
    const zmtp_keypair_t *curve_keys;   /* CURVE: the client's keys (copied) */
    const uint8_t *curve_server_key;    /* CURVE: the server's public key (copied) */
    uint32_t reconnect_ms;              /* 0: 100 */
    uint32_t reconnect_max_ms;          /* 0: 30000 */
    uint32_t heartbeat_ivl_ms;          /* PING the server this often (0: never) */
    uint32_t handshake_ms;              /* 0: 30000 */
    uint64_t max_message_bytes;         /* a reply's bound (0: none) */
    size_t queue_max;                   /* bytes waiting while no connection is up (0: 16 MiB) */
} zmtp_dealer_opts_t;

typedef struct zmtp_dealer zmtp_dealer_t;

zmtp_dealer_t *zmtp_dealer_new (const zmtp_dealer_opts_t *opts);
void zmtp_dealer_destroy (zmtp_dealer_t **self_p);

/* Adds ENDPOINT and starts connecting (a failure to connect now is retried, not an error). -1 with
 * errno and ERR for an endpoint this engine cannot use (a malformed one, inproc://). */
int zmtp_dealer_connect (zmtp_dealer_t *self, const char *endpoint, char *err, size_t errlen);
/* Drops ENDPOINT and its connection (what was sent on it and not answered is lost). -1 when absent. */
int zmtp_dealer_disconnect (zmtp_dealer_t *self, const char *endpoint);
/* Whether every endpoint is refused for its security mechanism (see the top of this file). */
bool zmtp_dealer_refused (const zmtp_dealer_t *self);
/* Connections up now (handshake done). */
int zmtp_dealer_ready_count (const zmtp_dealer_t *self);

/* Sends N frames (1..ZMTP_MSG_FRAMES): 0 written, queued on its connection or in the dealer's own
 * queue while none is up; -1 with errno EAGAIN when no room is left, EPROTO when every endpoint is
 * refused for its security mechanism and none is due to be tried again (nothing is queued). */
int zmtp_dealer_send (zmtp_dealer_t *self, const zmtp_frame_t *frames, int n);
/* The next message from any connection, waiting at most TIMEOUT_MS (0: no wait; -1: no bound): 1
 * (MSG filled; its views are valid until the next call on this dealer), 0 none in time, -1 with errno
 * EPROTO as soon as every endpoint is refused for its security mechanism. */
int zmtp_dealer_recv (zmtp_dealer_t *self, zmtp_msg_t *msg, int timeout_ms);

/* The fds to poll for this dealer (at most CAP), with the events wanted; the count. */
int zmtp_dealer_pollfds (zmtp_dealer_t *self, struct pollfd *fds, int cap);
/* The last connection failure in words ("" when none), for messages: "ENDPOINT: what went wrong"; for
 * a refused mechanism, "ENDPOINT: the server asks for CURVE, and this client has no CURVE keys" or
 * "ENDPOINT: the server does not use CURVE, and this client has CURVE keys". */
const char *zmtp_dealer_error (const zmtp_dealer_t *self);

#endif
