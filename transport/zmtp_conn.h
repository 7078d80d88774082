/* One ZMTP 3.x connection over a non-blocking stream socket (TCP or Unix), driven by the thread that
 * owns it: no thread of its own, no lock, no allocation per message.
 *
 *   greeting  ours goes out in two parts, as libzmq's does: the signature and major version at once,
 *             the rest once the peer's first 11 bytes have come, so that each side has written its
 *             mechanism before it can read the other's (a mismatch is seen for what it is on both
 *             sides); the peer's must be ZMTP 3.0 or later with our mechanism, else MECHANISM and
 *             close (RFC 37: no ERROR for a mismatch; the peer reads ours in our greeting)
 *   handshake NULL: READY both ways with Socket-Type (and an empty Identity); CURVE: zmtp_curve.h.
 *             The peer's socket type must suit ours (a ROUTER takes DEALER, REQ and ROUTER peers; a
 *             DEALER takes ROUTER, REP and DEALER), else ERROR and close.
 *   ready     messages: frames read into one buffer and handed out as views, bounded as they
 *             arrive (frames x bytes): a message past max_message_bytes or max_frames is handed out
 *             "refused" with the frames that fit, and the connection reads nothing more and closes
 *             once what was queued to it is written. PING is answered with PONG (its context), the
 *             peer's TTL kept; ERROR closes.
 *
 * Reading: zmtp_conn_read takes what the socket has (one read); zmtp_conn_next then hands out the
 * complete messages in order. A message's views stay valid until the next zmtp_conn_read or
 * zmtp_conn_next on this connection (the buffer is compacted or grown only there).
 * Writing: zmtp_conn_send writes a message with one sendmsg (headers and frames as an iovec, the
 * frames never copied) when nothing is queued; what the socket does not take is queued, bounded by
 * out_hard (a message that would pass it is refused whole: EAGAIN). zmtp_conn_flush writes the queue
 * when the socket is writable again. */
#ifndef SIGSERVE_ZMTP_CONN_H
#define SIGSERVE_ZMTP_CONN_H

#include "zmtp_curve.h"
#include "zmtp_wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZMTP_MSG_FRAMES 16

typedef struct {
    const uint8_t *data;
    size_t size;
} zmtp_frame_t;

/* A message as handed out: views into the connection's buffer. */
typedef struct {
    int nframes;                /* frames in frames[] */
    size_t total_frames;        /* frames in the message, as far as they came (> nframes: refused) */
    size_t bytes;               /* bytes of its frames, as far as their headers announced them */
    bool refused;               /* past max_frames or max_message_bytes: frames[] holds those within
                                   the bounds; the connection closes once the reply is written */
    zmtp_frame_t frames[ZMTP_MSG_FRAMES];
} zmtp_msg_t;

/* Why a connection ended (the engine counts and logs these). */
typedef enum {
    ZMTP_CLOSE_NONE = 0,
    ZMTP_CLOSE_PEER,            /* the peer closed or reset it */
    ZMTP_CLOSE_PROTOCOL,        /* malformed greeting, frame or command; a socket type we do not talk to */
    ZMTP_CLOSE_VERSION,         /* a ZMTP 1.0 or 2.0 peer, or not ZeroMQ */
    ZMTP_CLOSE_MECHANISM,       /* the peer's security mechanism is not ours (plaintext at a CURVE server) */
    ZMTP_CLOSE_CRYPTO,          /* CURVE: a box did not open (the client has another server key) */
    ZMTP_CLOSE_DENIED,          /* CURVE: the client's key is not allowed */
    ZMTP_CLOSE_HANDSHAKE_TIMEOUT,
    ZMTP_CLOSE_HEARTBEAT,       /* silent past the heartbeat timeout or the peer's own TTL */
    ZMTP_CLOSE_REFUSED,         /* a message past the bounds (closed after its reply) */
    ZMTP_CLOSE_ERROR_COMMAND,   /* the peer sent ERROR */
    ZMTP_CLOSE_LOCAL,           /* closed on our side (eviction, a limit, shutdown) */
    ZMTP_CLOSE_COUNT
} zmtp_close_t;

const char *zmtp_close_name (zmtp_close_t why);

typedef struct {
    zmtp_socket_type_t type;            /* ours: ZMTP_TYPE_ROUTER or ZMTP_TYPE_DEALER */
    bool as_server;                     /* the mechanism's server side */
    zmtp_mechanism_t mechanism;         /* NULL or CURVE */
    const zmtp_keypair_t *curve_keys;   /* CURVE: our long-term keys (kept by the caller) */
    const uint8_t *curve_server_key;    /* CURVE client: the server's public key (kept by the caller) */
    zmtp_curve_authorize_fn authorize;  /* CURVE server: the allowlist (NULL: any key) */
    void *authorize_arg;
    uint64_t max_message_bytes;         /* bytes over a message's frames (0: no bound) */
    int max_frames;                     /* frames a message may have (<= ZMTP_MSG_FRAMES) */
    uint32_t heartbeat_ivl_ms;          /* PING a 3.1 peer this often (0: never) */
    uint32_t heartbeat_timeout_ms;      /* no traffic this long after a PING: closed (0: 3 intervals) */
    uint32_t handshake_ms;              /* greeting and handshake within this long (0: no bound) */
    size_t out_hard;                    /* bytes queued to write at most (0: 16 MiB) */
} zmtp_conn_opts_t;

typedef struct zmtp_conn zmtp_conn_t;

/* A connection on FD (non-blocking, connected), which it owns from now on; the first part of our
 * greeting is written at once. NULL when out of memory (FD is then closed). NOW: CLOCK_MONOTONIC ns. */
zmtp_conn_t *zmtp_conn_new (int fd, const zmtp_conn_opts_t *opts, uint64_t now);
/* Closes the socket and frees. Safe on NULL; NULLs *SELF_P. */
void zmtp_conn_destroy (zmtp_conn_t **self_p);

int zmtp_conn_fd (const zmtp_conn_t *self);
/* Greeting and handshake done: messages may be sent. */
bool zmtp_conn_ready (const zmtp_conn_t *self);
/* Ended (why says why), or refused a message and waits only to write its reply. */
bool zmtp_conn_closed (const zmtp_conn_t *self);
bool zmtp_conn_closing (const zmtp_conn_t *self);
zmtp_close_t zmtp_conn_why (const zmtp_conn_t *self);
/* What went wrong, in words ("" while all is well). */
const char *zmtp_conn_error (const zmtp_conn_t *self);
/* The peer's socket type and ZMTP minor version (once ready). */
zmtp_socket_type_t zmtp_conn_peer_type (const zmtp_conn_t *self);
/* The security mechanism the peer's greeting names (ZMTP_MECH_OTHER until it is whole, or for one
 * this engine does not speak): what a MECHANISM close was about. */
zmtp_mechanism_t zmtp_conn_peer_mechanism (const zmtp_conn_t *self);
/* CURVE server, once ready: the client's long-term public key (32 bytes); NULL otherwise. */
const uint8_t *zmtp_conn_curve_client_key (const zmtp_conn_t *self);

/* Reads what the socket has: > 0 bytes read, 0 nothing there (EAGAIN) or nothing wanted (closing),
 * -1 the connection has ended (closed() is true). */
int zmtp_conn_read (zmtp_conn_t *self, uint64_t now);
/* The next complete message of what was read: 1 (MSG filled), 0 none yet, -1 the connection has
 * ended. Handshake commands, PINGs and PONGs are taken care of on the way. */
int zmtp_conn_next (zmtp_conn_t *self, zmtp_msg_t *msg, uint64_t now);
/* Bytes read and not yet handed out (a message may be complete there). */
bool zmtp_conn_has_input (const zmtp_conn_t *self);

/* Sends one message of N frames (1..ZMTP_MSG_FRAMES). 0 written or queued; -1 with errno: EAGAIN
 * (the queue would pass out_hard: nothing was written), ENOTCONN (not ready), EPIPE (the connection
 * has ended). */
int zmtp_conn_send (zmtp_conn_t *self, const zmtp_frame_t *frames, int n, uint64_t now);
/* A new bound on a message's bytes (max_message_bytes), for the messages that begin from now on. */
void zmtp_conn_set_max_message_bytes (zmtp_conn_t *self, uint64_t bytes);
/* HOLD: messages sent from now on are only queued (copied), until a flush writes them all with one
 * system call; false: sends write at once again (what is queued still waits for a flush). For a burst
 * of replies to one peer. */
void zmtp_conn_hold (zmtp_conn_t *self, bool hold);
/* Writes what is queued: 1 all written, 0 some left, -1 the connection has ended. */
int zmtp_conn_flush (zmtp_conn_t *self);
/* Bytes queued to write. */
size_t zmtp_conn_queued (const zmtp_conn_t *self);

/* Timers: PINGs due, the heartbeat timeout, the peer's TTL, the handshake's bound. True when the
 * connection ended here. */
bool zmtp_conn_tick (zmtp_conn_t *self, uint64_t now);
/* CLOCK_MONOTONIC ns of the last bytes read from or written to the peer. */
uint64_t zmtp_conn_last_active (const zmtp_conn_t *self);
/* Ends it now, as closed on our side (LOCAL) or for WHY. The socket is closed by destroy. */
void zmtp_conn_close (zmtp_conn_t *self, zmtp_close_t why);
/* Ends it gracefully once nothing is queued: our side of the stream is shut (the peer reads every
 * reply, then the end), and what the peer still sends is read and thrown away until it closes its side
 * (zmtp_conn_read then returns -1). Closing a socket with unread bytes in it would reset the
 * connection instead, and the peer's kernel would drop replies it had not yet handed to the peer.
 * -1 when something is still queued (flush first) or the connection has ended. */
int zmtp_conn_linger (zmtp_conn_t *self);
bool zmtp_conn_lingering (const zmtp_conn_t *self);

#endif
