/* transport/zmtp_curve.c's refusals, each with its exact reason, our client and our server in
 * memory: another server key, a denied client (ERROR 400 both ways), an ERROR command during the
 * handshake, a replayed, reordered or altered MESSAGE, a command cut short or grown, one out of its
 * turn, a WELCOME or a cookie taken from another connection, and a client written here from RFC 26
 * with libsodium alone whose every forged part of the handshake is refused
 * (tests/zmtp_curve_tests.h: the connection's two sides and the authorizer). */
#define _GNU_SOURCE
#include "zmtp_curve_tests.h"

/* ---- refusals ----------------------------------------------------------------------------- */

static zmtp_curve_step_t s_step (zmtp_curve_t *side, const uint8_t *body, size_t len, zmtp_curve_fail_t *why,
                                 size_t *out_len_p)
{
    static uint8_t out[ZMTP_CURVE_COMMAND_MAX];
    size_t out_len = 999;
    zmtp_curve_step_t st = zmtp_curve_step (side, body, len, out, sizeof out, &out_len, why);
    if (out_len_p)
        *out_len_p = out_len;
    return st;
}

START_TEST (a_client_holding_another_server_key_fails_at_hello_with_crypto)
{
    pair_t p;
    s_pair_new (&p, NULL, NULL, NULL);
    zmtp_keypair_t other;
    s_keypair (&other);
    zmtp_curve_t *client = zmtp_curve_new_client (&p.client_keys, other.public_key, NULL, 0);
    uint8_t hello[ZMTP_CURVE_COMMAND_MAX];
    size_t hello_len = zmtp_curve_start (client, hello, sizeof hello);
    ck_assert_uint_eq (hello_len, 200);
    zmtp_curve_fail_t why;
    size_t out_len;
    ck_assert_int_eq (s_step (p.server, hello, hello_len, &why, &out_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_CRYPTO);
    ck_assert_uint_eq (out_len, 0);         /* nothing is said to an unauthenticated peer */
    /* And the failed side accepts nothing more, not even a good HELLO. */
    s_handshake_to (&p, 1);
    ck_assert_int_eq (s_step (p.server, p.hello, p.hello_len, &why, NULL), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
    zmtp_curve_destroy (&client);
    s_pair_destroy (&p);
}
END_TEST

START_TEST (a_client_the_authorizer_refuses_gets_error_400_and_the_server_says_denied)
{
    authorizer_t auth = { .allow = false };
    pair_t p;
    s_pair_new (&p, NULL, s_authorize, &auth);
    s_handshake_to (&p, 3);
    uint8_t out[ZMTP_CURVE_COMMAND_MAX];
    size_t out_len = 0;
    zmtp_curve_fail_t why;
    ck_assert_int_eq (zmtp_curve_step (p.server, p.initiate, p.initiate_len, out, sizeof out, &out_len, &why),
                      ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_DENIED);
    ck_assert_int_eq (auth.calls, 1);
    ck_assert_mem_eq (auth.key, p.client_keys.public_key, 32);     /* asked about the proven C */
    ck_assert_uint_eq (out_len, 10);
    ck_assert_mem_eq (out, "\x05" "ERROR\x03" "400", 10);
    ck_assert_ptr_null (zmtp_curve_client_key (p.server));
    /* Our client, given that ERROR instead of READY, says DENIED too. */
    ck_assert_int_eq (s_step (p.client, out, out_len, &why, NULL), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_DENIED);
    s_pair_destroy (&p);

    /* The same authorizer allowing: READY, having seen the same key. */
    auth = (authorizer_t) { .allow = true };
    s_pair_new (&p, NULL, s_authorize, &auth);
    s_handshake_to (&p, 5);
    ck_assert_int_eq (auth.calls, 1);
    ck_assert_mem_eq (auth.key, p.client_keys.public_key, 32);
    s_pair_destroy (&p);
}
END_TEST

START_TEST (an_error_command_during_the_handshake_fails_without_a_crash)
{
    const struct { const char *body; size_t len; zmtp_curve_fail_t client_why; } cases[] = {
        { "\x05" "ERROR\x03" "400", 10, ZMTP_CURVE_FAIL_DENIED },
        { "\x05" "ERROR\x13" "Invalid credentials", 26, ZMTP_CURVE_FAIL_PROTOCOL },
        { "\x05" "ERROR\x03" "500", 10, ZMTP_CURVE_FAIL_PROTOCOL },
        { "\x05" "ERROR\x09" "400", 10, ZMTP_CURVE_FAIL_PROTOCOL },     /* a reason longer than the command */
        { "\x05" "ERROR", 6, ZMTP_CURVE_FAIL_PROTOCOL },                /* no reason at all */
        { "\x05" "ERR", 4, ZMTP_CURVE_FAIL_PROTOCOL },                  /* the name cut short */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int stage = 1; stage <= 3; stage += 2) {   /* the client waiting for WELCOME, then READY */
            pair_t p;
            s_pair_new (&p, NULL, NULL, NULL);
            s_handshake_to (&p, stage);
            zmtp_curve_fail_t why;
            size_t out_len;
            ck_assert_int_eq (s_step (p.client, (const uint8_t *) cases[i].body, cases[i].len, &why, &out_len),
                              ZMTP_CURVE_ERROR);
            ck_assert_msg (why == cases[i].client_why, "case %zu stage %d: why %d", i, stage, (int) why);
            ck_assert_uint_eq (out_len, 0);
            /* The server, waiting for HELLO, takes any ERROR as out of turn. */
            ck_assert_int_eq (s_step (p.server, (const uint8_t *) cases[i].body, cases[i].len, &why, NULL),
                              ZMTP_CURVE_ERROR);
            ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
            s_pair_destroy (&p);
        }
}
END_TEST

START_TEST (a_replayed_or_reordered_message_is_refused)
{
    pair_t p;
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, 5);
    uint8_t m1[64], copy[64], m2[64], *data, flags;
    size_t n1 = zmtp_curve_seal (p.client, 0, (const uint8_t *) "once", 4, m1), data_len;
    memcpy (copy, m1, n1);
    zmtp_curve_fail_t why;
    ck_assert_int_eq (zmtp_curve_open (p.server, m1, n1, &flags, &data, &data_len, &why), 0);
    ck_assert_int_eq (zmtp_curve_open (p.server, copy, n1, &flags, &data, &data_len, &why), -1);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
    s_pair_destroy (&p);

    /* Two sealed in order, opened out of order: the second one opened is older, refused. */
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, 5);
    n1 = zmtp_curve_seal (p.server, 0, (const uint8_t *) "one", 3, m1);
    size_t n2 = zmtp_curve_seal (p.server, 0, (const uint8_t *) "two", 3, m2);
    ck_assert_int_eq (zmtp_curve_open (p.client, m2, n2, &flags, &data, &data_len, &why), 0);
    ck_assert_mem_eq (data, "two", 3);
    ck_assert_int_eq (zmtp_curve_open (p.client, m1, n1, &flags, &data, &data_len, &why), -1);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
    s_pair_destroy (&p);

    /* A client's own MESSAGE reflected back to it: the direction is in the nonce's prefix. */
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, 5);
    n1 = zmtp_curve_seal (p.client, 0, (const uint8_t *) "mirror", 6, m1);
    ck_assert_int_eq (zmtp_curve_open (p.client, m1, n1, &flags, &data, &data_len, &why), -1);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_CRYPTO);
    s_pair_destroy (&p);
}
END_TEST

START_TEST (a_message_with_any_one_byte_flipped_is_refused)
{
    const char *text = "seven b";
    size_t len = strlen (text) + ZMTP_CURVE_OVERHEAD;
    for (size_t at = 0; at < len; at++) {
        pair_t p;
        s_pair_new (&p, NULL, NULL, NULL);
        s_handshake_to (&p, 5);
        uint8_t body[64], *data, flags;
        size_t data_len;
        ck_assert_uint_eq (zmtp_curve_seal (p.client, ZMTP_CURVE_MSG_MORE, (const uint8_t *) text, strlen (text),
                                            body), len);
        body[at] ^= 0x01;
        zmtp_curve_fail_t why;
        ck_assert_int_eq (zmtp_curve_open (p.server, body, len, &flags, &data, &data_len, &why), -1);
        /* The name and a nonce that fell to the last one seen (the client's 3 became 2) are the
         * protocol's; any other change is caught by the MAC. */
        zmtp_curve_fail_t expected = at < 8 || at == 15 ? ZMTP_CURVE_FAIL_PROTOCOL : ZMTP_CURVE_FAIL_CRYPTO;
        ck_assert_msg (why == expected, "byte %zu: why %d, expected %d", at, (int) why, (int) expected);
        /* The connection is over: the unaltered message is refused after it. */
        body[at] ^= 0x01;
        ck_assert_int_eq (zmtp_curve_open (p.server, body, len, &flags, &data, &data_len, &why), -1);
        ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
        s_pair_destroy (&p);
    }
}
END_TEST

/* The command of STAGE (1 HELLO to the server, 2 WELCOME to the client, 3 INITIATE to the server,
 * 4 READY to the client), as this connection's side wrote it, given to the other side cut or grown
 * to LEN bytes (zeros past its end; SIZE_MAX: its own length), after EDIT (may be NULL) changed it;
 * or, with FOREIGN, those bytes instead. What the receiving side says: it must fail and write
 * nothing back. */
static zmtp_curve_fail_t s_refusal (int stage, size_t len, void (*edit) (uint8_t *body), const uint8_t *foreign)
{
    pair_t p;
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, stage);
    uint8_t body[ZMTP_CURVE_COMMAND_MAX + 64] = { 0 };
    const uint8_t *src[] = { NULL, p.hello, p.welcome, p.initiate, p.ready };
    size_t lens[] = { 0, p.hello_len, p.welcome_len, p.initiate_len, p.ready_len };
    memcpy (body, foreign ? foreign : src[stage], foreign ? len : lens[stage]);
    if (len == SIZE_MAX)
        len = lens[stage];
    ck_assert_uint_le (len, sizeof body);
    if (edit)
        edit (body);
    zmtp_curve_t *to = stage % 2 ? p.server : p.client;
    zmtp_curve_fail_t why = ZMTP_CURVE_OK;
    size_t out_len;
    ck_assert_int_eq (s_step (to, body, len, &why, &out_len), ZMTP_CURVE_ERROR);
    ck_assert_uint_eq (out_len, 0);
    s_pair_destroy (&p);
    return why;
}

/* A valid command of STAGE from a fresh connection, into BUF: its length. */
static size_t s_valid (int stage, uint8_t *buf)
{
    pair_t p;
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, stage);
    const uint8_t *src[] = { NULL, p.hello, p.welcome, p.initiate, p.ready };
    size_t lens[] = { 0, p.hello_len, p.welcome_len, p.initiate_len, p.ready_len };
    memcpy (buf, src[stage], lens[stage]);
    size_t n = lens[stage];
    s_pair_destroy (&p);
    return n;
}

static void s_rename (uint8_t *body) { body[1] ^= 0x20; }       /* "hELLO", "wELCOME", ... */
static void s_version_1_1 (uint8_t *body) { body[7] = 1; }
static void s_version_2_0 (uint8_t *body) { body[6] = 2; }
static void s_hello_nonce_0 (uint8_t *body) { zmtp_put_u64 (body + 112, 0); }
static void s_initiate_nonce_1 (uint8_t *body) { zmtp_put_u64 (body + 105, 1); }       /* HELLO's */
static void s_initiate_nonce_3 (uint8_t *body) { zmtp_put_u64 (body + 105, 3); }
static void s_ready_nonce_0 (uint8_t *body) { zmtp_put_u64 (body + 6, 0); }
static void s_padding (uint8_t *body) { body[40] = 0x55; }

START_TEST (truncated_grown_and_out_of_turn_commands_fail_the_protocol_at_each_step)
{
    const size_t min[] = { 0, 200, 168, 257, 30 };
    uint8_t buf[ZMTP_CURVE_COMMAND_MAX];
    for (int stage = 1; stage <= 4; stage++) {
        size_t n = s_valid (stage, buf), name = 1 + buf[0];
        /* Cut to nothing, into the name, to the name alone, to one byte short of the minimum. */
        ck_assert_int_eq (s_refusal (stage, 0, NULL, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
        ck_assert_int_eq (s_refusal (stage, name - 1, NULL, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
        ck_assert_int_eq (s_refusal (stage, name, NULL, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
        ck_assert_int_eq (s_refusal (stage, min[stage] - 1, NULL, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
        if (stage <= 2) {
            /* HELLO and WELCOME have one size: a byte more or less is the protocol's. */
            ck_assert_int_eq (s_refusal (stage, n + 1, NULL, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
            ck_assert_int_eq (s_refusal (stage, n - 1, NULL, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
        } else {
            /* INITIATE and READY grow with the metadata: one byte short, the box does not open;
             * past the metadata's limit they are refused before any box is tried. */
            ck_assert_int_eq (s_refusal (stage, n - 1, NULL, NULL), ZMTP_CURVE_FAIL_CRYPTO);
            ck_assert_int_eq (s_refusal (stage, n + 1, NULL, NULL), ZMTP_CURVE_FAIL_CRYPTO);
            ck_assert_int_eq (s_refusal (stage, min[stage] + ZMTP_CURVE_METADATA_MAX + 1, NULL, NULL),
                              ZMTP_CURVE_FAIL_PROTOCOL);
            ck_assert_int_eq (s_refusal (stage, ZMTP_CURVE_COMMAND_MAX + 64, NULL, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
        }
        /* The right size, a wrong name. */
        ck_assert_int_eq (s_refusal (stage, SIZE_MAX, s_rename, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
    }
    /* HELLO with another version, or a short nonce of 0 (counters start at 1). */
    ck_assert_int_eq (s_refusal (1, SIZE_MAX, s_version_1_1, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
    ck_assert_int_eq (s_refusal (1, SIZE_MAX, s_version_2_0, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
    ck_assert_int_eq (s_refusal (1, SIZE_MAX, s_hello_nonce_0, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
    /* INITIATE's nonce must be above HELLO's, which is checked before its box; a larger one than
     * the client used is caught by the box. READY's must be at least 1. */
    ck_assert_int_eq (s_refusal (3, SIZE_MAX, s_initiate_nonce_1, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
    ck_assert_int_eq (s_refusal (3, SIZE_MAX, s_initiate_nonce_3, NULL), ZMTP_CURVE_FAIL_CRYPTO);
    ck_assert_int_eq (s_refusal (4, SIZE_MAX, s_ready_nonce_0, NULL), ZMTP_CURVE_FAIL_PROTOCOL);
    /* Commands out of turn: the server given INITIATE first, the client READY for WELCOME, the
     * server HELLO again where INITIATE belongs, the client WELCOME again for READY, and a PING. */
    uint8_t other[ZMTP_CURVE_COMMAND_MAX];
    size_t n = s_valid (3, other);
    ck_assert_int_eq (s_refusal (1, n, NULL, other), ZMTP_CURVE_FAIL_PROTOCOL);
    n = s_valid (4, other);
    ck_assert_int_eq (s_refusal (2, n, NULL, other), ZMTP_CURVE_FAIL_PROTOCOL);
    n = s_valid (1, other);
    ck_assert_int_eq (s_refusal (3, n, NULL, other), ZMTP_CURVE_FAIL_PROTOCOL);
    n = s_valid (2, other);
    ck_assert_int_eq (s_refusal (4, n, NULL, other), ZMTP_CURVE_FAIL_PROTOCOL);
    ck_assert_int_eq (s_refusal (3, 7, NULL, (const uint8_t *) "\x04PING\x00\x00"), ZMTP_CURVE_FAIL_PROTOCOL);

    /* HELLO's padding is outside the box, and libzmq ignores it: so do we. */
    pair_t p;
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, 1);
    s_padding (p.hello);
    zmtp_curve_fail_t why;
    ck_assert_int_eq (s_step (p.server, p.hello, p.hello_len, &why, NULL), ZMTP_CURVE_CONTINUE);
    s_pair_destroy (&p);

    /* A MESSAGE before READY, or cut below its 33 bytes. */
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, 3);
    uint8_t msg[64], *data, flags;
    size_t data_len;
    ck_assert_uint_eq (zmtp_curve_seal (p.client, 0, (const uint8_t *) "x", 1, msg), 0);   /* not READY */
    memcpy (msg, "\x07MESSAGE", 8);
    memset (msg + 8, 0, sizeof msg - 8);
    msg[15] = 9;
    ck_assert_int_eq (zmtp_curve_open (p.server, msg, 40, &flags, &data, &data_len, &why), -1);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
    s_pair_destroy (&p);
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, 5);
    size_t m = zmtp_curve_seal (p.client, 0, NULL, 0, msg);
    ck_assert_uint_eq (m, 33);
    ck_assert_int_eq (zmtp_curve_open (p.server, msg, 32, &flags, &data, &data_len, &why), -1);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
    s_pair_destroy (&p);
}
END_TEST

START_TEST (a_welcome_replayed_to_a_second_client_does_not_open)
{
    pair_t p;
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, 2);
    /* A second client of the same server, given the first one's WELCOME. */
    zmtp_curve_t *second = zmtp_curve_new_client (&p.client_keys, p.server_keys.public_key, NULL, 0);
    uint8_t hello[ZMTP_CURVE_COMMAND_MAX];
    ck_assert_uint_eq (zmtp_curve_start (second, hello, sizeof hello), 200);
    zmtp_curve_fail_t why;
    size_t out_len;
    ck_assert_int_eq (s_step (second, p.welcome, p.welcome_len, &why, &out_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_CRYPTO);
    ck_assert_uint_eq (out_len, 0);
    zmtp_curve_destroy (&second);
    /* The first client still takes it. */
    ck_assert_int_eq (s_step (p.client, p.welcome, p.welcome_len, &why, &out_len), ZMTP_CURVE_CONTINUE);
    s_pair_destroy (&p);
}
END_TEST

START_TEST (an_initiate_with_a_cookie_from_another_connection_is_refused)
{
    /* Two connections to one server key. */
    pair_t a, b;
    s_pair_new (&a, NULL, NULL, NULL);
    s_pair_new (&b, &a.server_keys, NULL, NULL);
    s_handshake_to (&a, 3);
    s_handshake_to (&b, 3);
    zmtp_curve_fail_t why;
    size_t out_len;
    /* B's INITIATE carrying A's cookie. */
    uint8_t spliced[ZMTP_CURVE_COMMAND_MAX];
    memcpy (spliced, b.initiate, b.initiate_len);
    memcpy (spliced + 9, a.initiate + 9, 96);
    ck_assert_int_eq (s_step (b.server, spliced, b.initiate_len, &why, &out_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_CRYPTO);
    ck_assert_uint_eq (out_len, 0);
    /* A's whole INITIATE sent on B's connection. */
    s_pair_destroy (&b);
    s_pair_new (&b, &a.server_keys, NULL, NULL);
    s_handshake_to (&b, 3);
    ck_assert_int_eq (s_step (b.server, a.initiate, a.initiate_len, &why, &out_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_CRYPTO);
    /* A's INITIATE on its own connection is served, once: a second time is out of turn. */
    ck_assert_int_eq (s_step (a.server, a.initiate, a.initiate_len, &why, &out_len), ZMTP_CURVE_READY);
    ck_assert_int_eq (s_step (a.server, a.initiate, a.initiate_len, &why, &out_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
    s_pair_destroy (&a);
    s_pair_destroy (&b);
}
END_TEST

/* A client written here from RFC 26 with libsodium alone, apart from zmtp_curve.c's: it puts in
 * HELLO and INITIATE what our client never would (a signature box that is not zeros, a vouch for
 * another key, malformed metadata), and checks our server against a second reading of the RFC. */
typedef struct {
    uint8_t cn_public[32], cn_secret[32];   /* C', c' */
    uint8_t server_cn[32];                  /* S', from WELCOME */
    uint8_t cookie[96];                     /* from WELCOME */
} forge_t;

static size_t s_forge_hello (forge_t *f, const uint8_t server_key[32], const uint8_t signature[64], uint8_t *out)
{
    ck_assert_int_eq (crypto_box_keypair (f->cn_public, f->cn_secret), 0);
    uint8_t nonce[24] = "CurveZMQHELLO---";
    memset (out, 0, 200);
    memcpy (out, "\x05HELLO\x01\x00", 8);
    memcpy (out + 80, f->cn_public, 32);
    zmtp_put_u64 (out + 112, 1);
    memcpy (nonce + 16, out + 112, 8);
    ck_assert_int_eq (crypto_box_easy (out + 120, signature, 64, nonce, server_key, f->cn_secret), 0);
    return 200;
}

static void s_forge_welcome (forge_t *f, const uint8_t server_key[32], const uint8_t *welcome, size_t len)
{
    ck_assert_uint_eq (len, 168);
    uint8_t nonce[24] = "WELCOME-", plain[128];
    memcpy (nonce + 8, welcome + 8, 16);
    ck_assert_int_eq (crypto_box_open_easy (plain, welcome + 24, 144, nonce, server_key, f->cn_secret), 0);
    memcpy (f->server_cn, plain, 32);
    memcpy (f->cookie, plain + 32, 96);
}

/* INITIATE from CLIENT_KEY, its vouch box [VOUCH (C' and S, 64 bytes)] made with SIGNER's secret
 * key, then MD. */
static size_t s_forge_initiate (forge_t *f, const uint8_t client_key[32], const zmtp_keypair_t *signer,
                                const uint8_t vouch[64], const uint8_t *md, size_t md_len, uint8_t *out)
{
    uint8_t plain[128 + ZMTP_CURVE_METADATA_MAX + 8], vnonce[24] = "VOUCH---", nonce[24] = "CurveZMQINITIATE";
    ck_assert_uint_le (md_len, sizeof plain - 128);
    memcpy (plain, client_key, 32);
    randombytes_buf (vnonce + 8, 16);
    memcpy (plain + 32, vnonce + 8, 16);
    ck_assert_int_eq (crypto_box_easy (plain + 48, vouch, 64, vnonce, f->server_cn, signer->secret_key), 0);
    if (md_len)
        memcpy (plain + 128, md, md_len);
    memcpy (out, "\x08INITIATE", 9);
    memcpy (out + 9, f->cookie, 96);
    zmtp_put_u64 (out + 105, 2);
    memcpy (nonce + 16, out + 105, 8);
    ck_assert_int_eq (crypto_box_easy (out + 113, plain, 128 + md_len, nonce, f->server_cn, f->cn_secret), 0);
    return 113 + 16 + 128 + md_len;
}

/* A forged handshake against a fresh server: HELLO with SIGNATURE, then (when HELLO passes) an
 * INITIATE with the vouch's C' and S replaced where WRONG_CN / WRONG_S, signed by SIGNER (NULL: the
 * client itself), with MD. The server's last answer, its fail reason in *WHY, READY in READY. */
static zmtp_curve_step_t s_forge (const uint8_t signature[64], bool wrong_cn, bool wrong_s,
                                  const zmtp_keypair_t *signer, const uint8_t *md, size_t md_len,
                                  zmtp_curve_fail_t *why, uint8_t *ready, size_t *ready_len)
{
    pair_t p;
    s_pair_new (&p, NULL, NULL, NULL);
    forge_t f;
    uint8_t cmd[ZMTP_CURVE_COMMAND_MAX], out[ZMTP_CURVE_COMMAND_MAX], vouch[64];
    size_t len = s_forge_hello (&f, p.server_keys.public_key, signature, cmd), out_len;
    zmtp_curve_step_t st = zmtp_curve_step (p.server, cmd, len, out, sizeof out, &out_len, why);
    if (st == ZMTP_CURVE_CONTINUE) {
        s_forge_welcome (&f, p.server_keys.public_key, out, out_len);
        memcpy (vouch, f.cn_public, 32);
        memcpy (vouch + 32, p.server_keys.public_key, 32);
        if (wrong_cn)
            vouch[0] ^= 1;
        if (wrong_s)
            vouch[63] ^= 1;
        len = s_forge_initiate (&f, p.client_keys.public_key, signer ? signer : &p.client_keys, vouch, md, md_len, cmd);
        st = zmtp_curve_step (p.server, cmd, len, ready, ZMTP_CURVE_COMMAND_MAX, ready_len, why);
        if (st == ZMTP_CURVE_READY) {
            /* The forged client opens READY with its own transient keys. */
            uint8_t nonce[24] = "CurveZMQREADY---", plain[ZMTP_CURVE_METADATA_MAX];
            memcpy (nonce + 16, ready + 6, 8);
            ck_assert_int_eq (crypto_box_open_easy (plain, ready + 14, *ready_len - 14, nonce, f.server_cn,
                                                    f.cn_secret), 0);
            ck_assert_uint_eq (*ready_len - 30, p.server_md_len);
            ck_assert_mem_eq (plain, p.server_md, p.server_md_len);
            size_t got_len;
            const uint8_t *got = zmtp_curve_peer_metadata (p.server, &got_len);
            ck_assert_uint_eq (got_len, md_len);
            if (md_len)
                ck_assert_mem_eq (got, md, md_len);
        }
    }
    s_pair_destroy (&p);
    return st;
}

START_TEST (an_independent_client_is_served_and_each_forged_part_of_its_handshake_refused)
{
    uint8_t zeros[64] = { 0 }, ready[ZMTP_CURVE_COMMAND_MAX], md[ZMTP_CURVE_METADATA_MAX];
    size_t ready_len, md_len = s_metadata (md, sizeof md, "DEALER", "forged", NULL);
    zmtp_curve_fail_t why;
    ck_assert_int_eq (s_forge (zeros, false, false, NULL, md, md_len, &why, ready, &ready_len), ZMTP_CURVE_READY);
    ck_assert_int_eq (why, ZMTP_CURVE_OK);
    ck_assert_int_eq (s_forge (zeros, false, false, NULL, NULL, 0, &why, ready, &ready_len), ZMTP_CURVE_READY);
    /* HELLO's box opens, but what it seals is not the 64 zero bytes. */
    uint8_t signature[64] = { 0 };
    signature[63] = 1;
    ck_assert_int_eq (s_forge (signature, false, false, NULL, md, md_len, &why, ready, &ready_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_CRYPTO);
    /* The vouch opens but names another C', or another S. */
    ck_assert_int_eq (s_forge (zeros, true, false, NULL, md, md_len, &why, ready, &ready_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_CRYPTO);
    ck_assert_int_eq (s_forge (zeros, false, true, NULL, md, md_len, &why, ready, &ready_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_CRYPTO);
    /* The vouch was made by another key than the C that INITIATE claims: it does not open. */
    zmtp_keypair_t other;
    s_keypair (&other);
    ck_assert_int_eq (s_forge (zeros, false, false, &other, md, md_len, &why, ready, &ready_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_CRYPTO);
    /* Metadata whose last value runs past its end, inside a box that opens. */
    ck_assert_int_eq (s_forge (zeros, false, false, NULL, md, md_len - 1, &why, ready, &ready_len), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
    ck_assert_int_eq (s_forge (zeros, false, false, NULL, (const uint8_t *) "\x00", 1, &why, ready, &ready_len),
                      ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
}
END_TEST

int main (void)
{
    if (sodium_init () < 0)
        return 1;
    Suite *s = suite_create ("zmtp_curve_refusals");
    TCase *ref = tcase_create ("refusals");
    tcase_set_timeout (ref, 60);
    tcase_add_test (ref, a_client_holding_another_server_key_fails_at_hello_with_crypto);
    tcase_add_test (ref, a_client_the_authorizer_refuses_gets_error_400_and_the_server_says_denied);
    tcase_add_test (ref, an_error_command_during_the_handshake_fails_without_a_crash);
    tcase_add_test (ref, a_replayed_or_reordered_message_is_refused);
    tcase_add_test (ref, a_message_with_any_one_byte_flipped_is_refused);
    tcase_add_test (ref, truncated_grown_and_out_of_turn_commands_fail_the_protocol_at_each_step);
    tcase_add_test (ref, a_welcome_replayed_to_a_second_client_does_not_open);
    tcase_add_test (ref, an_initiate_with_a_cookie_from_another_connection_is_refused);
    tcase_add_test (ref, an_independent_client_is_served_and_each_forged_part_of_its_handshake_refused);
    suite_add_tcase (s, ref);
    SRunner *sr = srunner_create (s);
    srunner_run_all (sr, CK_NORMAL);
    int failed = srunner_ntests_failed (sr);
    srunner_free (sr);
    return failed;
}
