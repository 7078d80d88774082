/* The clients' socket layer (libsigclient and sigload; private, not installed): one DEALER that
 * speaks ZeroMQ through either engine of sigclient.h's sigclient_engine_t, behind one type.
 *
 *   zmtp    transport/zmtp_dealer.h: the calling thread writes and reads its own sockets. A send
 *           is one sendmsg on a connection that is up (round-robin over those), or waits in the
 *           dealer's own queue while none is up; a receive reads what the sockets hold. Nothing is
 *           allocated per message once the buffers have grown to the traffic.
 *   libzmq  a ZMQ_DEALER in a context (the caller's, or one of the socket's own): libzmq's I/O
 *           thread moves every message. Requests queue per endpoint, also on one that is not up
 *           yet, unless IMMEDIATE is asked for.
 *
 * A server that refuses the socket's security mechanism (CURVE on one side only) is not tried again
 * until a send, at most once a second, and while every endpoint is so refused, sends and receives
 * fail at once with EPROTO (client_sock_last_failure says what the server asks for). zmtp: the
 * dealer reads the server's greeting (zmtp_dealer.h); libzmq: a monitor of the DEALER's handshake
 * failures, read while a receive waits.
 *
 * Names here are client_sock_* (never sigclient_*: the shared library exports those alone). A
 * socket is used by one thread at a time, like a ZeroMQ socket. Calls return -1 with errno on
 * failure; client_sock_strerror says it in words. */
#ifndef SIGCLIENT_SOCK_H
#define SIGCLIENT_SOCK_H

#include "sigclient.h"
#include "zmtp_conn.h"

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#define CLIENT_SOCK_KEY_BYTES 32

/* CURVE keys as bytes (zmtp_z85_decode gives them from Z85 text). */
typedef struct {
    uint8_t server_public[CLIENT_SOCK_KEY_BYTES];
    uint8_t client_public[CLIENT_SOCK_KEY_BYTES];
    uint8_t client_secret[CLIENT_SOCK_KEY_BYTES];
} client_sock_keys_t;

typedef struct {
    sigclient_engine_t engine;
    const client_sock_keys_t *curve;    /* NULL: plaintext; else copied */
    /* Requests only to connections that are up (dns:// fleets: an address that is listed but does
     * not answer takes no share). libzmq: ZMQ_IMMEDIATE and ZMQ_IPV6; zmtp always works so. */
    bool immediate;
    int hwm;                            /* libzmq: ZMQ_SNDHWM and ZMQ_RCVHWM (0: libzmq's default) */
    void *zmq_ctx;                      /* libzmq: the context to open the socket in (NULL: its own) */
} client_sock_opts_t;

typedef struct client_sock client_sock_t;

/* A socket connected to nothing yet. NULL with errno (EINVAL: an engine that is neither; ENOMEM; a
 * libzmq failure). */
client_sock_t *client_sock_new (const client_sock_opts_t *opts);
/* Closes at once: what is queued is dropped. Safe on NULL; NULLs *SELF_P. */
void client_sock_destroy (client_sock_t **self_p);
sigclient_engine_t client_sock_engine (const client_sock_t *self);

/* Adds ENDPOINT (tcp://HOST:PORT, ipc://PATH; libzmq takes its other transports too). Connecting
 * does not wait for the peer. -1 with errno EINVAL (malformed) or EPROTONOSUPPORT (a transport the
 * engine lacks) and ERR (ERRLEN bytes) saying why. */
int client_sock_connect (client_sock_t *self, const char *endpoint, char *err, size_t errlen);
/* Drops ENDPOINT and what was queued for it. -1 when it was not connected. */
int client_sock_disconnect (client_sock_t *self, const char *endpoint);

/* Sends one message of N frames (1..ZMTP_MSG_FRAMES). libzmq waits up to TIMEOUT_MS (0: not at all,
 * -1: no bound) for room; zmtp never waits (a message with no connection up waits in its queue).
 * 0, or -1 with errno: EAGAIN (no room in time), EPROTO (every endpoint refused the security
 * mechanism: see above), another (the socket failed). */
int client_sock_send (client_sock_t *self, const zmtp_frame_t *frames, int n, int timeout_ms);
/* The next message, waiting at most TIMEOUT_MS (0: no wait; -1: no bound): 1 with MSG filled (its
 * frame views valid until the next call on this socket; a message of more frames than MSG holds
 * has total_frames > nframes), 0 none in time, -1 with errno when the socket failed (EPROTO: every
 * endpoint refused the security mechanism, seen while waiting). */
int client_sock_recv (client_sock_t *self, zmtp_msg_t *msg, int timeout_ms);
/* For callers that poll many sockets themselves (sigload's workers): the fds to poll (at most CAP)
 * with the events wanted, and their count. After the poll, client_sock_try_recv takes in what came
 * and returns a message if one is complete; call it until it returns 0 before polling again (libzmq's
 * ZMQ_FD is edge-triggered). zmtp's fds change as connections come and go: ask again each time. */
int client_sock_pollfds (client_sock_t *self, struct pollfd *fds, int cap);
int client_sock_try_recv (client_sock_t *self, zmtp_msg_t *msg);
/* The most fds client_sock_pollfds gives for a socket of N_ENDPOINTS endpoints. */
int client_sock_pollfds_max (sigclient_engine_t engine, int n_endpoints);

/* Connections up now (zmtp), or -1 where the engine does not say (libzmq). */
int client_sock_ready_count (const client_sock_t *self);
/* ERR in words (libzmq's texts for its own codes). */
const char *client_sock_strerror (int err);
/* The last connection failure in words ("" when none): zmtp, any ("ENDPOINT: why"); libzmq, a refused
 * security mechanism only ("ENDPOINT: the server asks for CURVE, and this client has no CURVE keys",
 * or "...: the server does not use CURVE, and this client has CURVE keys"). */
const char *client_sock_last_failure (const client_sock_t *self);

/* CURVE keys from their Z85 text (40 characters each) into KEYS: 0, or -1 with errno EINVAL (KEYS
 * erased). */
int client_sock_keys_decode (const char *server_public, const char *client_public, const char *client_secret,
                             client_sock_keys_t *keys);
/* "zmtp" or "libzmq" into *ENGINE: 0, or -1 for any other text. */
int client_sock_engine_parse (const char *text, sigclient_engine_t *engine);

#endif
