/* CURVE (RFC 26) for one connection, over libsodium. The byte layouts follow libzmq (4.x), which is
 * what every peer of ours speaks:
 *
 *   HELLO     "\x05HELLO" 1 0, 72 zero bytes, C', short nonce, Box[64 zero bytes](C'->S)     200
 *   WELCOME   "\x07WELCOME", long nonce, Box[S' + cookie](S->C')                               168
 *   cookie    long nonce, SecretBox[C' + s'](cookie key)                                       96
 *   INITIATE  "\x08INITIATE", cookie, short nonce, Box[C + vouch + metadata](C'->S')      257 + md
 *   vouch     long nonce, Box[C' + S](C->S')                                                   96
 *   READY     "\x05READY", short nonce, Box[metadata](S'->C')                              30 + md
 *   MESSAGE   "\x07MESSAGE", short nonce, Box[flags + frame](C'<->S')                     33 + frame
 *
 * A "Box" here is libsodium's easy form: the 16-byte MAC, then the ciphertext. Short nonces count
 * from 1 in each direction: the client's HELLO is 1, its INITIATE 2, its first MESSAGE 3; the
 * server's READY is 1, its first MESSAGE 2 (as libzmq numbers them). */
#include "zmtp_curve.h"
#include "zmtp_wire.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define S_KEY ZMTP_CURVE_KEY_BYTES
#define S_MAC crypto_box_MACBYTES
#define S_HELLO_BYTES 200
#define S_WELCOME_BYTES 168
#define S_COOKIE_BYTES 96
#define S_VOUCH_BYTES 96
#define S_INITIATE_MIN (9 + S_COOKIE_BYTES + 8 + S_MAC + S_KEY + S_VOUCH_BYTES)     /* 257 */
#define S_READY_MIN (6 + 8 + S_MAC)                                                 /* 30 */
#define S_MSG_FLAGS (ZMTP_CURVE_MSG_MORE | ZMTP_CURVE_MSG_COMMAND)
/* What the server says when the authorizer refuses a client: libzmq's ZAP status code for it,
 * which a libzmq client reports as an authentication failure (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH). */
#define S_DENIED_REASON "400"

typedef enum {
    S_CLIENT_START,                     /* client: HELLO not yet written */
    S_EXPECT_WELCOME,                   /* client */
    S_EXPECT_READY,                     /* client */
    S_EXPECT_HELLO,                     /* server */
    S_EXPECT_INITIATE,                  /* server */
    S_CONNECTED,                        /* either: messages flow */
    S_FAILED,                           /* either: nothing more is accepted */
} s_state_t;

_Static_assert (S_INITIATE_MIN + ZMTP_CURVE_METADATA_MAX <= ZMTP_CURVE_COMMAND_MAX, "INITIATE fits a command");
_Static_assert (S_KEY == crypto_box_PUBLICKEYBYTES && S_KEY == crypto_box_SECRETKEYBYTES, "curve25519 keys");
_Static_assert (crypto_secretbox_MACBYTES == S_MAC && crypto_box_NONCEBYTES == 24, "xsalsa20poly1305");
_Static_assert (ZMTP_CURVE_OVERHEAD == 8 + 8 + S_MAC + 1, "a MESSAGE's overhead");

struct zmtp_curve {
    bool server;                                    /* which side of the handshake this is */
    s_state_t state;                                /* where the handshake stands */
    uint8_t public_key[S_KEY];                      /* our long-term public key: C, or S */
    uint8_t secret_key[S_KEY];                      /* its secret half: c, or s */
    uint8_t server_key[S_KEY];                      /* S: the key the client trusts, the server's own */
    uint8_t client_key[S_KEY];                      /* server: C, once INITIATE proved it */
    uint8_t cn_public[S_KEY];                       /* our transient public key: C', or S' */
    uint8_t cn_secret[S_KEY];                       /* its secret half: c', or s' */
    uint8_t cn_peer[S_KEY];                         /* the peer's transient key: S' (client), C' (server) */
    uint8_t cookie_key[crypto_secretbox_KEYBYTES];  /* server: this connection's only cookie; erased at INITIATE */
    uint8_t cookie[S_COOKIE_BYTES];                 /* client: WELCOME's cookie, returned in INITIATE */
    uint8_t precom[crypto_box_BEFORENMBYTES];       /* the transient shared key: INITIATE, READY, MESSAGE */
    uint64_t nonce;                                 /* the short nonce of the next command we send */
    uint64_t peer_nonce;                            /* the last short nonce the peer sent (0: none yet) */
    zmtp_curve_authorize_fn authorize;              /* server: the allowlist, or NULL */
    void *authorize_arg;                            /* its argument */
    uint8_t metadata[ZMTP_CURVE_METADATA_MAX];      /* ours: INITIATE (client) or READY (server) */
    size_t md_len;                                  /* its length */
    uint8_t peer_md[ZMTP_CURVE_METADATA_MAX];       /* the peer's, once READY */
    size_t peer_md_len;                             /* its length */
    /* The plaintexts of the handshake boxes (the cookie's holds s'): erased after each command. */
    uint8_t scratch[ZMTP_CURVE_COMMAND_MAX];
};

/* A 24-byte nonce: a 16-byte prefix and a short nonce, or an 8-byte prefix and a long nonce. */
static void s_nonce (uint8_t nonce[24], const char *prefix, const uint8_t *tail)
{
    size_t n = strlen (prefix);
    memcpy (nonce, prefix, n);
    memcpy (nonce + n, tail, 24 - n);
}

/* Metadata as RFC 23 lays it out: zmtp_property_find walks every property, and says -1 only when
 * one is malformed. */
static bool s_metadata_ok (const uint8_t *md, size_t len)
{
    const uint8_t *value;
    size_t value_len;
    return len <= ZMTP_CURVE_METADATA_MAX && zmtp_property_find (md, len, "Socket-Type", &value, &value_len) >= 0;
}

static zmtp_curve_t *s_new (const zmtp_keypair_t *keys, const uint8_t *metadata, size_t md_len)
{
    if (sodium_init () < 0 || !keys || md_len > ZMTP_CURVE_METADATA_MAX || (md_len && !metadata)
        || !s_metadata_ok (metadata, md_len))
        return NULL;
    zmtp_curve_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    memcpy (self->public_key, keys->public_key, S_KEY);
    memcpy (self->secret_key, keys->secret_key, S_KEY);
    if (md_len)
        memcpy (self->metadata, metadata, md_len);
    self->md_len = md_len;
    self->nonce = 1;
    if (crypto_box_keypair (self->cn_public, self->cn_secret) != 0) {
        zmtp_curve_destroy (&self);
        return NULL;
    }
    return self;
}

zmtp_curve_t *zmtp_curve_new_server (const zmtp_keypair_t *server, zmtp_curve_authorize_fn authorize, void *arg,
                                     const uint8_t *metadata, size_t md_len)
{
    zmtp_curve_t *self = s_new (server, metadata, md_len);
    if (!self)
        return NULL;
    self->server = true;
    self->state = S_EXPECT_HELLO;
    memcpy (self->server_key, server->public_key, S_KEY);
    self->authorize = authorize;
    self->authorize_arg = arg;
    return self;
}

zmtp_curve_t *zmtp_curve_new_client (const zmtp_keypair_t *client, const uint8_t server_public[ZMTP_CURVE_KEY_BYTES],
                                     const uint8_t *metadata, size_t md_len)
{
    if (!server_public)
        return NULL;
    zmtp_curve_t *self = s_new (client, metadata, md_len);
    if (!self)
        return NULL;
    self->state = S_CLIENT_START;
    memcpy (self->server_key, server_public, S_KEY);
    return self;
}

void zmtp_curve_destroy (zmtp_curve_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sodium_memzero (*self_p, sizeof **self_p);
    free (*self_p);
    *self_p = NULL;
}

/* The connection is over: no key it holds will serve again. */
static zmtp_curve_step_t s_fail (zmtp_curve_t *self, zmtp_curve_fail_t reason, zmtp_curve_fail_t *why)
{
    self->state = S_FAILED;
    sodium_memzero (self->cookie_key, sizeof self->cookie_key);
    sodium_memzero (self->cn_secret, sizeof self->cn_secret);
    sodium_memzero (self->precom, sizeof self->precom);
    sodium_memzero (self->scratch, sizeof self->scratch);
    if (why)
        *why = reason;
    return ZMTP_CURVE_ERROR;
}

size_t zmtp_curve_start (zmtp_curve_t *self, uint8_t *out, size_t cap)
{
    if (!self || self->server || self->state != S_CLIENT_START || cap < S_HELLO_BYTES)
        return 0;
    uint8_t nonce[24], zeros[64] = { 0 };
    memset (out, 0, S_HELLO_BYTES);
    memcpy (out, "\x05HELLO\x01\x00", 8);
    memcpy (out + 80, self->cn_public, S_KEY);
    zmtp_put_u64 (out + 112, self->nonce);
    s_nonce (nonce, "CurveZMQHELLO---", out + 112);
    if (crypto_box_easy (out + 120, zeros, sizeof zeros, nonce, self->server_key, self->cn_secret) != 0) {
        s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, NULL);
        return 0;
    }
    self->nonce++;
    self->state = S_EXPECT_WELCOME;
    return S_HELLO_BYTES;
}

/* Server: HELLO in, WELCOME out. */
static zmtp_curve_step_t s_hello (zmtp_curve_t *self, const uint8_t *body, size_t len, uint8_t *out, size_t cap,
                                  size_t *out_len, zmtp_curve_fail_t *why)
{
    const uint8_t *data;
    size_t data_len;
    if (!zmtp_command_is (body, len, "HELLO", &data, &data_len) || len != S_HELLO_BYTES || body[6] != 1
        || body[7] != 0 || cap < S_WELCOME_BYTES)
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    uint64_t short_nonce = zmtp_get_u64 (body + 112);
    if (short_nonce <= self->peer_nonce)
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    uint8_t nonce[24];
    s_nonce (nonce, "CurveZMQHELLO---", body + 112);
    /* A box that opens under S proves the client knows S; one that does not is the commonest
     * misconfiguration (a client holding another server's key), hence CRYPTO rather than PROTOCOL. */
    if (crypto_box_open_easy (self->scratch, body + 120, 64 + S_MAC, nonce, body + 80, self->secret_key) != 0
        || !sodium_is_zero (self->scratch, 64))
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    memcpy (self->cn_peer, body + 80, S_KEY);
    self->peer_nonce = short_nonce;
    if (crypto_box_beforenm (self->precom, self->cn_peer, self->cn_secret) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);

    /* The cookie keeps C' and s' sealed under a key only this connection knows, as libzmq does (a
     * server keeping no state between WELCOME and INITIATE would share one key across clients). */
    uint8_t *cookie_plain = self->scratch, *welcome_plain = self->scratch + 64;
    uint8_t cookie_nonce[24], welcome_nonce[24], long_nonce[16];
    randombytes_buf (self->cookie_key, sizeof self->cookie_key);
    randombytes_buf (long_nonce, sizeof long_nonce);
    s_nonce (cookie_nonce, "COOKIE--", long_nonce);
    memcpy (cookie_plain, self->cn_peer, S_KEY);
    memcpy (cookie_plain + S_KEY, self->cn_secret, S_KEY);
    memcpy (welcome_plain, self->cn_public, S_KEY);
    memcpy (welcome_plain + S_KEY, long_nonce, 16);
    if (crypto_secretbox_easy (welcome_plain + S_KEY + 16, cookie_plain, 64, cookie_nonce, self->cookie_key) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    memcpy (out, "\x07WELCOME", 8);
    randombytes_buf (out + 8, 16);
    s_nonce (welcome_nonce, "WELCOME-", out + 8);
    int rc = crypto_box_easy (out + 24, welcome_plain, S_KEY + S_COOKIE_BYTES, welcome_nonce, self->cn_peer,
                              self->secret_key);
    sodium_memzero (self->scratch, 64 + S_KEY + S_COOKIE_BYTES);
    if (rc != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    *out_len = S_WELCOME_BYTES;
    self->state = S_EXPECT_INITIATE;
    return ZMTP_CURVE_CONTINUE;
}

/* Server: INITIATE in; READY out, or ERROR when the authorizer refuses the client. */
static zmtp_curve_step_t s_initiate (zmtp_curve_t *self, const uint8_t *body, size_t len, uint8_t *out, size_t cap,
                                     size_t *out_len, zmtp_curve_fail_t *why)
{
    const uint8_t *data;
    size_t data_len;
    if (!zmtp_command_is (body, len, "INITIATE", &data, &data_len) || len < S_INITIATE_MIN
        || len - S_INITIATE_MIN > ZMTP_CURVE_METADATA_MAX || cap < S_READY_MIN + self->md_len)
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    uint8_t nonce[24];
    s_nonce (nonce, "COOKIE--", body + 9);
    int rc = crypto_secretbox_open_easy (self->scratch, body + 25, 64 + S_MAC, nonce, self->cookie_key);
    /* The cookie key seals one cookie, and this was the one chance to return it. */
    sodium_memzero (self->cookie_key, sizeof self->cookie_key);
    if (rc != 0 || sodium_memcmp (self->scratch, self->cn_peer, S_KEY) != 0
        || sodium_memcmp (self->scratch + S_KEY, self->cn_secret, S_KEY) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    sodium_memzero (self->scratch, 64);
    uint64_t short_nonce = zmtp_get_u64 (body + 105);
    if (short_nonce <= self->peer_nonce)
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    s_nonce (nonce, "CurveZMQINITIATE", body + 105);
    uint8_t *plain = self->scratch;     /* C (32), vouch (96), metadata */
    size_t plain_len = len - 113 - S_MAC;
    if (crypto_box_open_easy_afternm (plain, body + 113, len - 113, nonce, self->precom) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    /* The vouch: C's holder vouches for C' towards S, so the client is who INITIATE says. */
    uint8_t vouch[64];
    s_nonce (nonce, "VOUCH---", plain + S_KEY);
    if (crypto_box_open_easy (vouch, plain + S_KEY + 16, 64 + S_MAC, nonce, plain, self->cn_secret) != 0
        || sodium_memcmp (vouch, self->cn_peer, S_KEY) != 0
        || sodium_memcmp (vouch + S_KEY, self->server_key, S_KEY) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    const uint8_t *md = plain + S_KEY + S_VOUCH_BYTES;
    size_t md_len = plain_len - S_KEY - S_VOUCH_BYTES;
    if (!s_metadata_ok (md, md_len))
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    self->peer_nonce = short_nonce;
    memcpy (self->client_key, plain, S_KEY);
    memcpy (self->peer_md, md, md_len);
    self->peer_md_len = md_len;
    sodium_memzero (self->scratch, plain_len);

    if (self->authorize && !self->authorize (self->client_key, self->authorize_arg)) {
        *out_len = zmtp_command_write (out, cap, "ERROR", "\x03" S_DENIED_REASON, 1 + strlen (S_DENIED_REASON));
        return s_fail (self, ZMTP_CURVE_FAIL_DENIED, why);
    }
    memcpy (out, "\x05READY", 6);
    zmtp_put_u64 (out + 6, self->nonce);
    s_nonce (nonce, "CurveZMQREADY---", out + 6);
    if (crypto_box_easy_afternm (out + 14, self->metadata, self->md_len, nonce, self->precom) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    self->nonce++;
    *out_len = S_READY_MIN + self->md_len;
    self->state = S_CONNECTED;
    return ZMTP_CURVE_READY;
}

/* Client: WELCOME in, INITIATE out. */
static zmtp_curve_step_t s_welcome (zmtp_curve_t *self, const uint8_t *body, size_t len, uint8_t *out, size_t cap,
                                    size_t *out_len, zmtp_curve_fail_t *why)
{
    const uint8_t *data;
    size_t data_len, initiate_len = S_INITIATE_MIN + self->md_len;
    if (!zmtp_command_is (body, len, "WELCOME", &data, &data_len) || len != S_WELCOME_BYTES || cap < initiate_len)
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    uint8_t nonce[24];
    s_nonce (nonce, "WELCOME-", body + 8);
    /* Only S's holder can box to our fresh C': a WELCOME that does not open came from another
     * server, or was meant for another connection. */
    if (crypto_box_open_easy (self->scratch, body + 24, S_KEY + S_COOKIE_BYTES + S_MAC, nonce, self->server_key,
                              self->cn_secret) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    memcpy (self->cn_peer, self->scratch, S_KEY);
    memcpy (self->cookie, self->scratch + S_KEY, S_COOKIE_BYTES);
    if (crypto_box_beforenm (self->precom, self->cn_peer, self->cn_secret) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);

    uint8_t vouch_plain[64], vouch_nonce[24], long_nonce[16];
    memcpy (vouch_plain, self->cn_public, S_KEY);
    memcpy (vouch_plain + S_KEY, self->server_key, S_KEY);
    randombytes_buf (long_nonce, sizeof long_nonce);
    s_nonce (vouch_nonce, "VOUCH---", long_nonce);
    uint8_t *plain = self->scratch;     /* C (32), vouch (96), metadata */
    memcpy (plain, self->public_key, S_KEY);
    memcpy (plain + S_KEY, long_nonce, 16);
    if (crypto_box_easy (plain + S_KEY + 16, vouch_plain, sizeof vouch_plain, vouch_nonce, self->cn_peer,
                         self->secret_key) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    if (self->md_len)
        memcpy (plain + S_KEY + S_VOUCH_BYTES, self->metadata, self->md_len);
    memcpy (out, "\x08INITIATE", 9);
    memcpy (out + 9, self->cookie, S_COOKIE_BYTES);
    zmtp_put_u64 (out + 105, self->nonce);
    s_nonce (nonce, "CurveZMQINITIATE", out + 105);
    int rc = crypto_box_easy_afternm (out + 113, plain, S_KEY + S_VOUCH_BYTES + self->md_len, nonce, self->precom);
    sodium_memzero (self->scratch, S_KEY + S_VOUCH_BYTES + self->md_len);
    if (rc != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    self->nonce++;
    *out_len = initiate_len;
    self->state = S_EXPECT_READY;
    return ZMTP_CURVE_CONTINUE;
}

/* Client: READY in. */
static zmtp_curve_step_t s_ready (zmtp_curve_t *self, const uint8_t *body, size_t len, zmtp_curve_fail_t *why)
{
    const uint8_t *data;
    size_t data_len;
    if (!zmtp_command_is (body, len, "READY", &data, &data_len) || len < S_READY_MIN
        || len - S_READY_MIN > ZMTP_CURVE_METADATA_MAX)
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    uint64_t short_nonce = zmtp_get_u64 (body + 6);
    if (short_nonce <= self->peer_nonce)
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    uint8_t nonce[24];
    s_nonce (nonce, "CurveZMQREADY---", body + 6);
    size_t md_len = len - S_READY_MIN;
    if (crypto_box_open_easy_afternm (self->scratch, body + 14, len - 14, nonce, self->precom) != 0)
        return s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
    if (!s_metadata_ok (self->scratch, md_len))
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    memcpy (self->peer_md, self->scratch, md_len);
    self->peer_md_len = md_len;
    self->peer_nonce = short_nonce;
    self->state = S_CONNECTED;
    return ZMTP_CURVE_READY;
}

/* An ERROR from the server during the handshake: a well-formed one with libzmq's status code for
 * a refused client says DENIED; anything else is the protocol failing. */
static zmtp_curve_fail_t s_error_reason (const uint8_t *body, size_t len)
{
    const uint8_t *data;
    size_t data_len, n = strlen (S_DENIED_REASON);
    if (zmtp_command_is (body, len, "ERROR", &data, &data_len) && data_len == 1 + n && data[0] == n
        && memcmp (data + 1, S_DENIED_REASON, n) == 0)
        return ZMTP_CURVE_FAIL_DENIED;
    return ZMTP_CURVE_FAIL_PROTOCOL;
}

zmtp_curve_step_t zmtp_curve_step (zmtp_curve_t *self, const uint8_t *body, size_t len, uint8_t *out, size_t cap,
                                   size_t *out_len, zmtp_curve_fail_t *why)
{
    *out_len = 0;
    *why = ZMTP_CURVE_FAIL_PROTOCOL;
    if (!self)
        return ZMTP_CURVE_ERROR;
    *why = ZMTP_CURVE_OK;
    const uint8_t *data;
    size_t data_len;
    if (!body)
        len = 0;
    if (!self->server && (self->state == S_EXPECT_WELCOME || self->state == S_EXPECT_READY)
        && zmtp_command_is (body, len, "ERROR", &data, &data_len))
        return s_fail (self, s_error_reason (body, len), why);
    switch (self->state) {
    case S_EXPECT_HELLO:
        return s_hello (self, body, len, out, cap, out_len, why);
    case S_EXPECT_INITIATE:
        return s_initiate (self, body, len, out, cap, out_len, why);
    case S_EXPECT_WELCOME:
        return s_welcome (self, body, len, out, cap, out_len, why);
    case S_EXPECT_READY:
        return s_ready (self, body, len, why);
    default:                            /* before HELLO was sent, after READY, after a failure */
        return s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
    }
}

const uint8_t *zmtp_curve_peer_metadata (const zmtp_curve_t *self, size_t *len)
{
    if (!self || self->state != S_CONNECTED) {
        *len = 0;
        return NULL;
    }
    *len = self->peer_md_len;
    return self->peer_md;
}

const uint8_t *zmtp_curve_client_key (const zmtp_curve_t *self)
{
    return self && self->server && self->state == S_CONNECTED ? self->client_key : NULL;
}

size_t zmtp_curve_seal (zmtp_curve_t *self, uint8_t flags, const uint8_t *data, size_t len, uint8_t *out)
{
    /* The last nonce is never used: past it the counter would wrap and repeat. */
    if (!self || self->state != S_CONNECTED || self->nonce == UINT64_MAX
        || len > crypto_box_MESSAGEBYTES_MAX - 1)
        return 0;
    uint8_t nonce[24];
    memcpy (out, "\x07MESSAGE", 8);
    zmtp_put_u64 (out + 8, self->nonce);
    s_nonce (nonce, self->server ? "CurveZMQMESSAGES" : "CurveZMQMESSAGEC", out + 8);
    /* The plaintext goes where its ciphertext will be, past the MAC: libsodium seals in place. */
    out[16 + S_MAC] = flags & S_MSG_FLAGS;
    if (len)
        memcpy (out + 16 + S_MAC + 1, data, len);
    if (crypto_box_easy_afternm (out + 16, out + 16 + S_MAC, 1 + len, nonce, self->precom) != 0)
        return 0;
    self->nonce++;
    return len + ZMTP_CURVE_OVERHEAD;
}

int zmtp_curve_open (zmtp_curve_t *self, uint8_t *body, size_t len, uint8_t *flags, uint8_t **data, size_t *data_len,
                     zmtp_curve_fail_t *why)
{
    const uint8_t *name_data;
    size_t name_data_len;
    *why = ZMTP_CURVE_FAIL_PROTOCOL;
    if (!self)
        return -1;
    if (self->state != S_CONNECTED || !body || len < ZMTP_CURVE_OVERHEAD
        || !zmtp_command_is (body, len, "MESSAGE", &name_data, &name_data_len)) {
        s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
        return -1;
    }
    uint64_t short_nonce = zmtp_get_u64 (body + 8);
    if (short_nonce <= self->peer_nonce) {
        s_fail (self, ZMTP_CURVE_FAIL_PROTOCOL, why);
        return -1;
    }
    uint8_t nonce[24];
    s_nonce (nonce, self->server ? "CurveZMQMESSAGEC" : "CurveZMQMESSAGES", body + 8);
    /* In place: the plaintext lands where the MAC was, the frame one byte past the flags. */
    if (crypto_box_open_easy_afternm (body + 16, body + 16, len - 16, nonce, self->precom) != 0) {
        s_fail (self, ZMTP_CURVE_FAIL_CRYPTO, why);
        return -1;
    }
    self->peer_nonce = short_nonce;
    *why = ZMTP_CURVE_OK;
    *flags = body[16] & S_MSG_FLAGS;
    *data = body + 17;
    *data_len = len - ZMTP_CURVE_OVERHEAD;
    return 0;
}

/* Z85 (RFC 32): four bytes, big-endian, as five base-85 digits. */
static const char s_z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

int zmtp_z85_encode (const uint8_t key[ZMTP_CURVE_KEY_BYTES], char text[41])
{
    for (size_t i = 0; i < S_KEY / 4; i++) {
        uint32_t value = zmtp_get_u32 (key + 4 * i);
        for (int d = 4; d >= 0; d--, value /= 85)
            text[5 * i + (size_t) d] = s_z85[value % 85];
    }
    text[40] = 0;
    return 0;
}

int zmtp_z85_decode (const char *text, uint8_t key[ZMTP_CURVE_KEY_BYTES])
{
    if (!text || strnlen (text, 41) != 40)
        return -1;
    for (size_t i = 0; i < S_KEY / 4; i++) {
        uint64_t value = 0;
        for (size_t d = 0; d < 5; d++) {
            const char *at = strchr (s_z85, text[5 * i + d]);     /* no NUL among the 40: strnlen said so */
            if (!at)
                return -1;
            value = value * 85 + (uint64_t) (at - s_z85);
        }
        if (value > UINT32_MAX)         /* "%%%%%" and the like: five digits that overflow four bytes */
            return -1;
        zmtp_put_u32 (key + 4 * i, (uint32_t) value);
    }
    return 0;
}
