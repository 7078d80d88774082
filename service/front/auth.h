/* ZeroMQ CURVE for every endpoint (server.curve), with czmq: the server's certificate read with
 * zcert, and the allowed_clients folder as the allowlist (czmq re-reads the folder when it changes;
 * a reload points it at the folder again). An unknown key, or a client without CURVE, is refused
 * during the handshake and never reaches the front.
 *
 * The zmtp transport asks auth_allows during each handshake (its own CURVE, transport/zmtp_curve.h),
 * with the folder as a czmq zcertstore. The libzmq transport needs a ZAP handler: zauth, below.
 *
 * zauth answers ZAP requests only inside czmq's own ZeroMQ context, and libzmq serves any client
 * that knows the server's key when no ZAP handler answers, unless ZMQ_ZAP_ENFORCE_DOMAIN (option
 * 93, draft in the headers, honoured by libzmq 4.3) is on. So the server's sockets live in
 * czmq's context (auth_context), enforcement is on for each (auth_apply), and auth_prove shows at
 * start that an unknown key is refused; anything short of that stops the start. Configured but
 * unusable (a missing or unreadable certificate, no secret key, a missing folder) is an error,
 * never a plaintext fallback. */
#ifndef SIGSERVE_AUTH_H
#define SIGSERVE_AUTH_H

#include "base/config.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _auth_t auth_t;

/* Reads the certificate and the allowlist; with ZAP (the libzmq transport) starts czmq (its own signal
 * handling off; io_threads I/O threads) and zauth. NULL with ERR naming server.curve's key at fault. */
auth_t *auth_new (const curve_config_t *curve, uint32_t io_threads, bool zap, char *err, size_t errlen);
void auth_destroy (auth_t **self_p);
/* What auth_new would refuse, checked without starting anything (sigserve --check-config, and the start
 * before anything binds): the certificate missing, unreadable by this user, no czmq certificate or
 * without a secret key; the allowlist folder missing, not a folder or unreadable; with ZAP, a libzmq
 * without CURVE. The same messages as auth_new's. 0, or -1 with ERR. */
int auth_check (const curve_config_t *curve, bool zap, char *err, size_t errlen);

/* The context the server's sockets must be created in. */
void *auth_context (auth_t *self);
/* The server's public key (Z85, 40 characters). */
const char *auth_public_key (const auth_t *self);
/* The server's keys as bytes (32 each), for the zmtp transport's CURVE. */
void auth_keypair (const auth_t *self, uint8_t *public_key, uint8_t *secret_key);
/* Whether the client key KEY (32 bytes) is in the allowlist now. Any thread (under a lock: the
 * fronts' handshakes share the store). */
bool auth_allows (auth_t *self, const uint8_t *key);
/* Makes SOCKET (before bind) a CURVE server with the certificate's secret key, a ZAP domain and
 * enforcement. 0, or -1 with ERR. */
int auth_apply (auth_t *self, void *socket, char *err, size_t errlen);
/* Connects a client with a fresh, unknown key pair to ENDPOINT (as bound: ZMQ_LAST_ENDPOINT) and
 * waits for the handshake: 0 when it was refused for its key, -1 with ERR when it was accepted
 * or nothing answered within a few seconds. */
int auth_prove (auth_t *self, const char *endpoint, char *err, size_t errlen);
/* Points zauth at CURVE's allowed_clients folder again (SIGHUP). 0, or -1 with ERR. */
int auth_reload (auth_t *self, const curve_config_t *curve, char *err, size_t errlen);

/* sigserve --keygen PATH: a new certificate, PATH (public key) and PATH_secret (both keys), in
 * czmq's format; the secret file mode 0600. 0, or -1 with ERR. */
int auth_keygen (const char *path, char *err, size_t errlen);

#endif
