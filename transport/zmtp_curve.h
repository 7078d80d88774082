/* The CURVE mechanism (RFC 26, CurveZMQ) for one connection, client or server side, with libsodium's
 * crypto_box primitives only: the handshake (HELLO, WELCOME, INITIATE, READY), the cookie, the
 * vouch, the short and long nonces, and each message frame sealed into a MESSAGE command.
 *
 * zmtp_conn.c owns the connection and the bytes; this module sees only command bodies (what follows
 * a command frame's header: the name's length byte, the name, the data) and writes the command
 * bodies to send back. Nothing here allocates after zmtp_curve_new_*, reads a clock or makes a
 * system call, so a fuzz target can drive the server side alone.
 *
 * The rules kept in this one place:
 *  - short nonces are 8-byte big-endian counters, from 1, one per command sent (HELLO, INITIATE,
 *    READY, every MESSAGE); a peer's must grow strictly, or the connection fails;
 *  - the server's cookie key is fresh for each connection and erased once INITIATE is checked;
 *    the transient secret keys are erased when the connection is destroyed;
 *  - prefixes: "CurveZMQHELLO---", "WELCOME-", "COOKIE--", "CurveZMQINITIATE", "VOUCH---",
 *    "CurveZMQREADY---", "CurveZMQMESSAGEC" (client to server), "CurveZMQMESSAGES" (server to
 *    client).
 *  - a MESSAGE's plaintext is one flags byte (libzmq's: 0x01 MORE, 0x02 COMMAND) and the frame;
 *    MESSAGE is sent as libzmq sends it, in a frame without the COMMAND or MORE bits, and taken in
 *    a frame with or without the COMMAND bit. */
#ifndef SIGSERVE_ZMTP_CURVE_H
#define SIGSERVE_ZMTP_CURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZMTP_CURVE_KEY_BYTES 32
#define ZMTP_CURVE_MSG_MORE 0x01        /* the flags byte inside a MESSAGE */
#define ZMTP_CURVE_MSG_COMMAND 0x02
/* A MESSAGE body's bytes beyond its frame's: "\x07MESSAGE" (8), the short nonce (8), the MAC (16)
 * and the flags byte (1). */
#define ZMTP_CURVE_OVERHEAD 33
/* The largest handshake command body either side writes (WELCOME is 168 bytes; INITIATE and READY
 * grow with the metadata, which the engine keeps under 256 bytes). */
#define ZMTP_CURVE_COMMAND_MAX 1024
#define ZMTP_CURVE_METADATA_MAX 512

typedef struct zmtp_curve zmtp_curve_t;

typedef struct {
    uint8_t public_key[ZMTP_CURVE_KEY_BYTES];
    uint8_t secret_key[ZMTP_CURVE_KEY_BYTES];
} zmtp_keypair_t;

/* The server's decision on a client's long-term public key, once INITIATE has proved the client
 * holds its secret key (the allowlist: what ZAP decides for libzmq). */
typedef bool (*zmtp_curve_authorize_fn) (const uint8_t client_key[ZMTP_CURVE_KEY_BYTES], void *arg);

/* Why a handshake or a message failed (what the engine counts and logs). */
typedef enum {
    ZMTP_CURVE_OK = 0,
    ZMTP_CURVE_FAIL_PROTOCOL,           /* malformed, unexpected or out-of-order command, bad nonce */
    ZMTP_CURVE_FAIL_CRYPTO,             /* a box did not open: the client has another server key, or forged */
    ZMTP_CURVE_FAIL_DENIED,             /* the authorizer refused the client's key */
} zmtp_curve_fail_t;

typedef enum { ZMTP_CURVE_CONTINUE = 0, ZMTP_CURVE_READY = 1, ZMTP_CURVE_ERROR = -1 } zmtp_curve_step_t;

/* A server side for one connection with the server's long-term keys; AUTHORIZE (may be NULL: every
 * key that completes the handshake is served) with ARG. METADATA (MD_LEN bytes, at most
 * ZMTP_CURVE_METADATA_MAX) goes in the server's READY. NULL when out of memory or libsodium fails to
 * initialise. */
zmtp_curve_t *zmtp_curve_new_server (const zmtp_keypair_t *server, zmtp_curve_authorize_fn authorize, void *arg,
                                     const uint8_t *metadata, size_t md_len);
/* A client side: its long-term keys and the server's public key; METADATA goes in INITIATE. */
zmtp_curve_t *zmtp_curve_new_client (const zmtp_keypair_t *client, const uint8_t server_public[ZMTP_CURVE_KEY_BYTES],
                                     const uint8_t *metadata, size_t md_len);
/* Erases every key and frees. Safe on NULL; NULLs *SELF_P. */
void zmtp_curve_destroy (zmtp_curve_t **self_p);

/* The client's first command (HELLO) into OUT (CAP >= ZMTP_CURVE_COMMAND_MAX): its length. The
 * server writes nothing (0) and waits for HELLO. */
size_t zmtp_curve_start (zmtp_curve_t *self, uint8_t *out, size_t cap);

/* One handshake command received (BODY, LEN bytes, as it came in its command frame). Writes the
 * command to send back, if any, to OUT (*OUT_LEN, 0 for none); returns CONTINUE (more to come), READY
 * (the handshake is over: messages may flow; OUT may still hold the server's READY to send first),
 * or ERROR with *WHY. On ERROR, OUT may hold an ERROR command to send before closing (the server
 * says why it refused a client it could authenticate, as libzmq does). */
zmtp_curve_step_t zmtp_curve_step (zmtp_curve_t *self, const uint8_t *body, size_t len, uint8_t *out, size_t cap,
                                   size_t *out_len, zmtp_curve_fail_t *why);

/* Once READY: the peer's metadata (from INITIATE on the server, READY on the client), borrowed. */
const uint8_t *zmtp_curve_peer_metadata (const zmtp_curve_t *self, size_t *len);
/* On the server, once READY: the client's long-term public key (32 bytes), borrowed. */
const uint8_t *zmtp_curve_client_key (const zmtp_curve_t *self);

/* Seals one frame (DATA, LEN bytes, with FLAGS: ZMTP_CURVE_MSG_*) into a MESSAGE command body at OUT
 * (LEN + ZMTP_CURVE_OVERHEAD bytes; OUT must not overlap DATA). Returns the body's length. */
size_t zmtp_curve_seal (zmtp_curve_t *self, uint8_t flags, const uint8_t *data, size_t len, uint8_t *out);
/* Opens a MESSAGE command body in place: 0 with *FLAGS and the frame at *DATA (inside BODY),
 * *DATA_LEN bytes; -1 with *WHY (not a MESSAGE, too short, a nonce that did not grow, a box that
 * does not open): the connection must close. */
int zmtp_curve_open (zmtp_curve_t *self, uint8_t *body, size_t len, uint8_t *flags, uint8_t **data, size_t *data_len,
                     zmtp_curve_fail_t *why);

/* Z85 (RFC 32) for keys: 32 bytes <-> 40 characters (and a NUL). 0, or -1 for text that is not 40
 * Z85 characters. */
int zmtp_z85_encode (const uint8_t key[ZMTP_CURVE_KEY_BYTES], char text[41]);
int zmtp_z85_decode (const char *text, uint8_t key[ZMTP_CURVE_KEY_BYTES]);

#endif
