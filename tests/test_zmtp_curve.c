/* transport/zmtp_curve.c: the CURVE handshake and MESSAGE boxes, our client against our server in
 * memory (every command's bytes where the RFC puts them, metadata both ways, frames of every kind
 * and size both ways), every refusal with its exact reason (another server key, a denied client,
 * a replayed or altered MESSAGE, a command cut short or grown, one out of its turn, a WELCOME or a
 * cookie taken from another connection), Z85 against libzmq's, and the handshake against libzmq
 * itself over tcp loopback in both directions (a libzmq DEALER client, a libzmq ROUTER server). */
#define _GNU_SOURCE
#include "zmtp_curve.h"
#include "zmtp_wire.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <zmq.h>

#define IO_TIMEOUT_MS 5000          /* a bug fails the test after this rather than hanging it */
#define BIG_FRAME (64 * 1024)

/* ---- in memory ---------------------------------------------------------------------------- */

static void s_keypair (zmtp_keypair_t *kp)
{
    ck_assert_int_eq (crypto_box_keypair (kp->public_key, kp->secret_key), 0);
}

/* Metadata with Socket-Type TYPE and, unless NULL, Identity ID and a property of our own. */
static size_t s_metadata (uint8_t *md, size_t cap, const char *type, const char *id, const char *extra)
{
    size_t used = 0;
    ck_assert_int_eq (zmtp_property_write (md, cap, &used, "Socket-Type", type, strlen (type)), 0);
    if (id)
        ck_assert_int_eq (zmtp_property_write (md, cap, &used, "Identity", id, strlen (id)), 0);
    if (extra)
        ck_assert_int_eq (zmtp_property_write (md, cap, &used, "X-Test", extra, strlen (extra)), 0);
    return used;
}

/* One connection's two sides and the commands they wrote. */
typedef struct {
    zmtp_keypair_t server_keys, client_keys;
    zmtp_curve_t *server, *client;
    uint8_t hello[ZMTP_CURVE_COMMAND_MAX], welcome[ZMTP_CURVE_COMMAND_MAX];
    uint8_t initiate[ZMTP_CURVE_COMMAND_MAX], ready[ZMTP_CURVE_COMMAND_MAX];
    size_t hello_len, welcome_len, initiate_len, ready_len;
    uint8_t server_md[ZMTP_CURVE_METADATA_MAX], client_md[ZMTP_CURVE_METADATA_MAX];
    size_t server_md_len, client_md_len;
} pair_t;

/* Both sides, with SERVER_KEYS when not NULL (else fresh ones). */
static void s_pair_new (pair_t *p, const zmtp_keypair_t *server_keys, zmtp_curve_authorize_fn authorize, void *arg)
{
    memset (p, 0, sizeof *p);
    if (server_keys)
        p->server_keys = *server_keys;
    else
        s_keypair (&p->server_keys);
    s_keypair (&p->client_keys);
    p->server_md_len = s_metadata (p->server_md, sizeof p->server_md, "ROUTER", NULL, "from the server");
    p->client_md_len = s_metadata (p->client_md, sizeof p->client_md, "DEALER", "client-7", "from the client");
    p->server = zmtp_curve_new_server (&p->server_keys, authorize, arg, p->server_md, p->server_md_len);
    p->client = zmtp_curve_new_client (&p->client_keys, p->server_keys.public_key, p->client_md, p->client_md_len);
    ck_assert_ptr_nonnull (p->server);
    ck_assert_ptr_nonnull (p->client);
}

static void s_pair_destroy (pair_t *p)
{
    zmtp_curve_destroy (&p->server);
    zmtp_curve_destroy (&p->client);
    ck_assert_ptr_null (p->server);
    ck_assert_ptr_null (p->client);
}

/* The handshake up to STAGE: 1 HELLO written, 2 WELCOME written, 3 INITIATE written, 4 READY
 * written, 5 READY taken in by the client. Every step on the way must succeed. */
static void s_handshake_to (pair_t *p, int stage)
{
    zmtp_curve_fail_t why;
    p->hello_len = zmtp_curve_start (p->client, p->hello, sizeof p->hello);
    ck_assert_uint_eq (p->hello_len, 200);
    if (stage < 2)
        return;
    ck_assert_int_eq (zmtp_curve_step (p->server, p->hello, p->hello_len, p->welcome, sizeof p->welcome,
                                       &p->welcome_len, &why), ZMTP_CURVE_CONTINUE);
    ck_assert_int_eq (why, ZMTP_CURVE_OK);
    ck_assert_uint_eq (p->welcome_len, 168);
    if (stage < 3)
        return;
    ck_assert_int_eq (zmtp_curve_step (p->client, p->welcome, p->welcome_len, p->initiate, sizeof p->initiate,
                                       &p->initiate_len, &why), ZMTP_CURVE_CONTINUE);
    ck_assert_uint_eq (p->initiate_len, 257 + p->client_md_len);
    if (stage < 4)
        return;
    ck_assert_int_eq (zmtp_curve_step (p->server, p->initiate, p->initiate_len, p->ready, sizeof p->ready,
                                       &p->ready_len, &why), ZMTP_CURVE_READY);
    ck_assert_uint_eq (p->ready_len, 30 + p->server_md_len);
    if (stage < 5)
        return;
    uint8_t none[ZMTP_CURVE_COMMAND_MAX];
    size_t none_len = 99;
    ck_assert_int_eq (zmtp_curve_step (p->client, p->ready, p->ready_len, none, sizeof none, &none_len, &why),
                      ZMTP_CURVE_READY);
    ck_assert_uint_eq (none_len, 0);
    ck_assert_int_eq (why, ZMTP_CURVE_OK);
}

/* Seals DATA on FROM, opens it on TO, and checks what comes out, byte for byte. */
static void s_pass (zmtp_curve_t *from, zmtp_curve_t *to, uint8_t flags, const uint8_t *data, size_t len,
                    uint64_t expected_nonce)
{
    uint8_t *body = malloc (len + ZMTP_CURVE_OVERHEAD);
    ck_assert_ptr_nonnull (body);
    size_t n = zmtp_curve_seal (from, flags, data, len, body);
    ck_assert_uint_eq (n, len + ZMTP_CURVE_OVERHEAD);
    ck_assert_mem_eq (body, "\x07MESSAGE", 8);
    ck_assert_uint_eq (zmtp_get_u64 (body + 8), expected_nonce);
    uint8_t got_flags = 0xff, *got = NULL;
    size_t got_len = 12345;
    zmtp_curve_fail_t why = ZMTP_CURVE_FAIL_PROTOCOL;
    ck_assert_int_eq (zmtp_curve_open (to, body, n, &got_flags, &got, &got_len, &why), 0);
    ck_assert_int_eq (why, ZMTP_CURVE_OK);
    ck_assert_uint_eq (got_flags, flags);
    ck_assert_uint_eq (got_len, len);
    ck_assert (got >= body && got + got_len <= body + n);
    if (len)
        ck_assert_mem_eq (got, data, len);
    free (body);
}

START_TEST (our_client_and_our_server_handshake_and_exchange_every_kind_of_frame)
{
    pair_t p;
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, 5);

    /* The commands' fixed bytes where RFC 26 puts them, and the short nonces as libzmq numbers
     * them: HELLO 1, INITIATE 2 from the client; READY 1 from the server. */
    uint8_t zeros[72] = { 0 };
    ck_assert_mem_eq (p.hello, "\x05HELLO\x01\x00", 8);
    ck_assert_mem_eq (p.hello + 8, zeros, 72);
    ck_assert_uint_eq (zmtp_get_u64 (p.hello + 112), 1);
    ck_assert_mem_eq (p.welcome, "\x07WELCOME", 8);
    ck_assert_mem_eq (p.initiate, "\x08INITIATE", 9);
    ck_assert_uint_eq (zmtp_get_u64 (p.initiate + 105), 2);
    ck_assert_mem_eq (p.ready, "\x05READY", 6);
    ck_assert_uint_eq (zmtp_get_u64 (p.ready + 6), 1);

    /* Each side has the other's metadata, byte for byte, and the server the client's key. */
    size_t md_len = 0;
    const uint8_t *md = zmtp_curve_peer_metadata (p.server, &md_len);
    ck_assert_uint_eq (md_len, p.client_md_len);
    ck_assert_mem_eq (md, p.client_md, md_len);
    md = zmtp_curve_peer_metadata (p.client, &md_len);
    ck_assert_uint_eq (md_len, p.server_md_len);
    ck_assert_mem_eq (md, p.server_md, md_len);
    const uint8_t *value;
    size_t value_len;
    ck_assert_int_eq (zmtp_property_find (md, md_len, "socket-type", &value, &value_len), 1);
    ck_assert_uint_eq (value_len, 6);
    ck_assert_mem_eq (value, "ROUTER", 6);
    ck_assert_ptr_nonnull (zmtp_curve_client_key (p.server));
    ck_assert_mem_eq (zmtp_curve_client_key (p.server), p.client_keys.public_key, 32);
    ck_assert_ptr_null (zmtp_curve_client_key (p.client));

    /* Frames both ways: empty, small, with MORE, COMMAND or both, and 64 KiB. MESSAGE nonces go on
     * from the handshake's: the client's from 3, the server's from 2. */
    uint8_t *big = malloc (BIG_FRAME);
    ck_assert_ptr_nonnull (big);
    randombytes_buf (big, BIG_FRAME);
    const struct { uint8_t flags; const uint8_t *data; size_t len; } frames[] = {
        { 0, NULL, 0 },
        { ZMTP_CURVE_MSG_MORE, (const uint8_t *) "first of two", 12 },
        { 0, (const uint8_t *) "second of two", 13 },
        { ZMTP_CURVE_MSG_COMMAND, (const uint8_t *) "\x04PING\x00\x00", 7 },
        { ZMTP_CURVE_MSG_MORE, NULL, 0 },
        { ZMTP_CURVE_MSG_MORE | ZMTP_CURVE_MSG_COMMAND, (const uint8_t *) "x", 1 },
        { ZMTP_CURVE_MSG_MORE, big, BIG_FRAME },
        { 0, big, BIG_FRAME },
    };
    uint64_t c_nonce = 3, s_nonce = 2;
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
            s_pass (p.client, p.server, frames[i].flags, frames[i].data, frames[i].len, c_nonce++);
            s_pass (p.server, p.client, frames[i].flags, frames[i].data, frames[i].len, s_nonce++);
        }
    free (big);

    /* Once READY, a handshake command is out of turn on either side. */
    uint8_t out[ZMTP_CURVE_COMMAND_MAX];
    size_t out_len;
    zmtp_curve_fail_t why;
    ck_assert_int_eq (zmtp_curve_step (p.server, p.hello, p.hello_len, out, sizeof out, &out_len, &why),
                      ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
    ck_assert_uint_eq (out_len, 0);
    s_pair_destroy (&p);
}
END_TEST

START_TEST (metadata_up_to_the_limit_passes_and_a_byte_more_is_refused_at_construction)
{
    zmtp_keypair_t s, c;
    s_keypair (&s);
    s_keypair (&c);
    uint8_t md[ZMTP_CURVE_METADATA_MAX + 1];
    size_t used = 0;
    char value[ZMTP_CURVE_METADATA_MAX];
    memset (value, 'v', sizeof value);
    /* One property filling MAX bytes: 1 + 11 + 4 + value. */
    ck_assert_int_eq (zmtp_property_write (md, sizeof md, &used, "Socket-Type", value, ZMTP_CURVE_METADATA_MAX - 16),
                      0);
    ck_assert_uint_eq (used, ZMTP_CURVE_METADATA_MAX);
    zmtp_curve_t *server = zmtp_curve_new_server (&s, NULL, NULL, md, used);
    zmtp_curve_t *client = zmtp_curve_new_client (&c, s.public_key, md, used);
    ck_assert_ptr_nonnull (server);
    ck_assert_ptr_nonnull (client);
    uint8_t a[ZMTP_CURVE_COMMAND_MAX], b[ZMTP_CURVE_COMMAND_MAX];
    size_t a_len, b_len;
    zmtp_curve_fail_t why;
    a_len = zmtp_curve_start (client, a, sizeof a);
    ck_assert_int_eq (zmtp_curve_step (server, a, a_len, b, sizeof b, &b_len, &why), ZMTP_CURVE_CONTINUE);
    ck_assert_int_eq (zmtp_curve_step (client, b, b_len, a, sizeof a, &a_len, &why), ZMTP_CURVE_CONTINUE);
    ck_assert_uint_eq (a_len, 257 + ZMTP_CURVE_METADATA_MAX);
    ck_assert_int_eq (zmtp_curve_step (server, a, a_len, b, sizeof b, &b_len, &why), ZMTP_CURVE_READY);
    ck_assert_uint_eq (b_len, 30 + ZMTP_CURVE_METADATA_MAX);
    ck_assert_int_eq (zmtp_curve_step (client, b, b_len, a, sizeof a, &a_len, &why), ZMTP_CURVE_READY);
    const uint8_t *got = zmtp_curve_peer_metadata (client, &a_len);
    ck_assert_uint_eq (a_len, ZMTP_CURVE_METADATA_MAX);
    ck_assert_mem_eq (got, md, a_len);
    zmtp_curve_destroy (&server);
    zmtp_curve_destroy (&client);

    md[used] = 0;
    ck_assert_ptr_null (zmtp_curve_new_server (&s, NULL, NULL, md, used + 1));
    ck_assert_ptr_null (zmtp_curve_new_client (&c, s.public_key, md, used + 1));
    /* Malformed metadata (a value length past the end) is refused too. */
    ck_assert_ptr_null (zmtp_curve_new_server (&s, NULL, NULL, md, used - 1));
    zmtp_curve_destroy (&server);       /* NULL: nothing to do */
}
END_TEST

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

typedef struct {
    bool allow;                     /* the decision */
    int calls;                      /* how many times it was asked */
    uint8_t key[32];                /* the key it was asked about */
} authorizer_t;

static bool s_authorize (const uint8_t key[ZMTP_CURVE_KEY_BYTES], void *arg)
{
    authorizer_t *a = arg;
    a->calls++;
    memcpy (a->key, key, 32);
    return a->allow;
}

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

START_TEST (z85_matches_libzmq_and_refuses_what_is_not_40_z85_characters)
{
    /* RFC 32's example, extended to a key: the bytes 86 4F D2 6F B5 59 F7 5B are "HelloWorld". */
    uint8_t key[32] = { 0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B };
    char text[41], theirs[41];
    ck_assert_int_eq (zmtp_z85_encode (key, text), 0);
    ck_assert_str_eq (text, "HelloWorld000000000000000000000000000000");
    for (int i = 0; i < 200; i++) {
        randombytes_buf (key, sizeof key);
        if (i == 0)
            memset (key, 0xff, sizeof key);
        ck_assert_int_eq (zmtp_z85_encode (key, text), 0);
        ck_assert_ptr_nonnull (zmq_z85_encode (theirs, key, sizeof key));
        ck_assert_str_eq (text, theirs);
        uint8_t back[32];
        ck_assert_int_eq (zmtp_z85_decode (text, back), 0);
        ck_assert_mem_eq (back, key, 32);
    }
    uint8_t back[32];
    ck_assert_int_eq (zmtp_z85_decode ("HelloWorld00000000000000000000000000000", back), -1);      /* 39 */
    ck_assert_int_eq (zmtp_z85_decode ("HelloWorld0000000000000000000000000000000", back), -1);    /* 41 */
    ck_assert_int_eq (zmtp_z85_decode ("Hello World000000000000000000000000000000", back), -1);    /* a space */
    ck_assert_int_eq (zmtp_z85_decode ("Hello\"orld000000000000000000000000000000", back), -1);
    ck_assert_int_eq (zmtp_z85_decode ("#####00000000000000000000000000000000000", back), -1);     /* > 2^32 */
    ck_assert_int_eq (zmtp_z85_decode ("%nSc000000000000000000000000000000000000", back), 0);      /* 2^32 - 1 */
    ck_assert_mem_eq (back, "\xff\xff\xff\xff", 4);
    ck_assert_int_eq (zmtp_z85_decode (NULL, back), -1);
}
END_TEST

/* ---- against libzmq over tcp loopback ------------------------------------------------------ */

static void s_timeouts (int fd)
{
    struct timeval tv = { .tv_sec = IO_TIMEOUT_MS / 1000 };
    ck_assert_int_eq (setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    ck_assert_int_eq (setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
}

/* Reads exactly N bytes: N, or what came before the end of the stream (errno 0) or an error. */
static size_t s_read_exact (int fd, void *buf, size_t n)
{
    size_t got = 0;
    errno = 0;
    while (got < n) {
        ssize_t r = recv (fd, (char *) buf + got, n - got, 0);
        if (r == 0) {
            errno = 0;
            break;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        got += (size_t) r;
    }
    return got;
}

static void s_write_all (int fd, const void *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t w = send (fd, (const char *) buf + put, n - put, MSG_NOSIGNAL);
        ck_assert_msg (w > 0, "send: %s", strerror (errno));
        put += (size_t) w;
    }
}

/* One frame: 0 with *FLAGS (MORE, COMMAND) and the body in BUF, *LEN bytes; -1 at the end of the
 * stream or on an error (errno says which: 0 for the end). */
static int s_read_frame (int fd, uint8_t *flags, uint8_t *buf, size_t cap, size_t *len)
{
    uint8_t head[ZMTP_HEADER_MAX];
    uint64_t size;
    if (s_read_exact (fd, head, 2) != 2)
        return -1;
    size_t head_len = head[0] & ZMTP_FLAG_LONG ? 9 : 2;
    if (head_len == 9 && s_read_exact (fd, head + 2, 7) != 7)
        return -1;
    ck_assert_int_eq (zmtp_header_read (head, head_len, flags, &size), (int) head_len);
    ck_assert_uint_le (size, cap);
    ck_assert_uint_eq (s_read_exact (fd, buf, (size_t) size), size);
    *len = (size_t) size;
    return 0;
}

static void s_write_frame (int fd, uint8_t flags, const uint8_t *body, size_t len)
{
    uint8_t head[ZMTP_HEADER_MAX];
    s_write_all (fd, head, zmtp_header_write (head, flags, len));
    s_write_all (fd, body, len);
}

/* A command frame that must come next: its body's length. */
static size_t s_read_command (int fd, uint8_t *buf, size_t cap)
{
    uint8_t flags;
    size_t len;
    ck_assert_msg (s_read_frame (fd, &flags, buf, cap, &len) == 0, "no command frame: %s", strerror (errno));
    ck_assert_uint_eq (flags, ZMTP_FLAG_COMMAND);
    return len;
}

/* Greetings both ways: ours with AS_SERVER, then libzmq's, which must be CURVE, ZMTP 3.1. */
static void s_greet (int fd, bool as_server)
{
    uint8_t g[ZMTP_GREETING_BYTES], minor = 0;
    zmtp_greeting_write (g, ZMTP_MECH_CURVE, as_server);
    s_write_all (fd, g, sizeof g);
    ck_assert_uint_eq (s_read_exact (fd, g, sizeof g), sizeof g);
    zmtp_mechanism_t mech = ZMTP_MECH_OTHER;
    bool peer_server = as_server;
    const char *why = NULL;
    ck_assert_int_eq (zmtp_greeting_read (g, sizeof g, &minor, &mech, &peer_server, &why), 0);
    ck_assert_int_eq (mech, ZMTP_MECH_CURVE);
    /* libzmq writes as-server 0 in every greeting, a CURVE server's too (zmtp_engine.cpp zeroes
     * the 32 bytes after the mechanism): RFC 23 says a server sets it; libzmq decides each side's
     * role from its own options alone, and so must we. */
    ck_assert_int_eq (peer_server, false);
    ck_assert_uint_eq (minor, 1);       /* libzmq 4.2+ speaks ZMTP 3.1 */
}

static void s_property_is (const uint8_t *md, size_t md_len, const char *name, const void *want, size_t want_len)
{
    const uint8_t *value = NULL;
    size_t value_len = 0;
    ck_assert_msg (zmtp_property_find (md, md_len, name, &value, &value_len) == 1, "no %s", name);
    ck_assert_uint_eq (value_len, want_len);
    if (want_len)
        ck_assert_mem_eq (value, want, want_len);
}

/* A libzmq socket's Z85 text option. */
static void s_zsetkey (void *sock, int option, const char *z85)
{
    ck_assert_int_eq (zmq_setsockopt (sock, option, z85, 40), 0);
}

static void s_zset_int (void *sock, int option, int value)
{
    ck_assert_int_eq (zmq_setsockopt (sock, option, &value, sizeof value), 0);
}

/* A listening socket on 127.0.0.1, port in *PORT. */
static int s_listen (int *port)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge (fd, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    ck_assert_int_eq (bind (fd, (struct sockaddr *) &a, sizeof a), 0);
    ck_assert_int_eq (listen (fd, 4), 0);
    socklen_t alen = sizeof a;
    ck_assert_int_eq (getsockname (fd, (struct sockaddr *) &a, &alen), 0);
    *port = ntohs (a.sin_port);
    return fd;
}

static int s_accept (int listener)
{
    struct pollfd pfd = { .fd = listener, .events = POLLIN };
    ck_assert_int_eq (poll (&pfd, 1, IO_TIMEOUT_MS), 1);
    int fd = accept (listener, NULL, NULL);
    ck_assert_int_ge (fd, 0);
    s_timeouts (fd);
    return fd;
}

static int s_connect (const char *endpoint)
{
    /* "tcp://127.0.0.1:PORT" */
    const char *colon = strrchr (endpoint, ':');
    ck_assert_ptr_nonnull (colon);
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge (fd, 0);
    s_timeouts (fd);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK),
                             .sin_port = htons ((uint16_t) atoi (colon + 1)) };
    ck_assert_int_eq (connect (fd, (struct sockaddr *) &a, sizeof a), 0);
    return fd;
}

/* Our server side over FD: HELLO, WELCOME, INITIATE, then READY or ERROR; the step's result. */
static zmtp_curve_step_t s_serve_handshake (int fd, zmtp_curve_t *server, zmtp_curve_fail_t *why)
{
    uint8_t in[ZMTP_CURVE_COMMAND_MAX], out[ZMTP_CURVE_COMMAND_MAX];
    size_t in_len, out_len;
    zmtp_curve_step_t st = ZMTP_CURVE_CONTINUE;
    while (st == ZMTP_CURVE_CONTINUE) {
        in_len = s_read_command (fd, in, sizeof in);
        st = zmtp_curve_step (server, in, in_len, out, sizeof out, &out_len, why);
        if (out_len)
            s_write_frame (fd, ZMTP_FLAG_COMMAND, out, out_len);
    }
    return st;
}

/* The next MESSAGE: libzmq sends it in a frame with no flag set (the MORE of the frame it carries
 * is inside the box). Checks the frame it opens to. */
static void s_expect_message (int fd, zmtp_curve_t *self, uint8_t want_flags, const char *want)
{
    uint8_t buf[4096], frame_flags = 0xff, flags = 0xff, *data;
    size_t len, data_len;
    zmtp_curve_fail_t why;
    ck_assert_msg (s_read_frame (fd, &frame_flags, buf, sizeof buf, &len) == 0, "no frame: %s", strerror (errno));
    ck_assert_uint_eq (frame_flags, 0);
    ck_assert_int_eq (zmtp_curve_open (self, buf, len, &flags, &data, &data_len, &why), 0);
    ck_assert_uint_eq (flags, want_flags);
    ck_assert_uint_eq (data_len, strlen (want));
    ck_assert_mem_eq (data, want, data_len);
}

static void s_send_message (int fd, zmtp_curve_t *self, uint8_t flags, const char *text)
{
    uint8_t buf[4096];
    size_t n = zmtp_curve_seal (self, flags, (const uint8_t *) text, strlen (text), buf);
    ck_assert_uint_eq (n, strlen (text) + ZMTP_CURVE_OVERHEAD);
    s_write_frame (fd, 0, buf, n);
}

/* A libzmq frame that must arrive (ZMQ_RCVTIMEO set): its text, and whether more follow. */
static void s_zexpect (void *sock, const char *want, bool more)
{
    char buf[256];
    int n = zmq_recv (sock, buf, sizeof buf, 0);
    ck_assert_msg (n >= 0, "zmq_recv: %s", zmq_strerror (zmq_errno ()));
    ck_assert_int_eq (n, (int) strlen (want));
    ck_assert_mem_eq (buf, want, (size_t) n);
    int rcvmore = -1;
    size_t sz = sizeof rcvmore;
    ck_assert_int_eq (zmq_getsockopt (sock, ZMQ_RCVMORE, &rcvmore, &sz), 0);
    ck_assert_int_eq (rcvmore, more);
}

START_TEST (a_libzmq_dealer_handshakes_with_our_server_and_messages_flow_both_ways)
{
    zmtp_keypair_t server_keys;
    s_keypair (&server_keys);
    char server_z85[41], client_pub[41], client_sec[41];
    ck_assert_int_eq (zmtp_z85_encode (server_keys.public_key, server_z85), 0);
    ck_assert_int_eq (zmq_curve_keypair (client_pub, client_sec), 0);
    uint8_t client_key[32];
    ck_assert_int_eq (zmtp_z85_decode (client_pub, client_key), 0);

    int port;
    int listener = s_listen (&port);
    void *ctx = zmq_ctx_new ();
    void *dealer = zmq_socket (ctx, ZMQ_DEALER);
    s_zsetkey (dealer, ZMQ_CURVE_SERVERKEY, server_z85);
    s_zsetkey (dealer, ZMQ_CURVE_PUBLICKEY, client_pub);
    s_zsetkey (dealer, ZMQ_CURVE_SECRETKEY, client_sec);
    ck_assert_int_eq (zmq_setsockopt (dealer, ZMQ_ROUTING_ID, "dealer-1", 8), 0);
    s_zset_int (dealer, ZMQ_LINGER, 0);
    s_zset_int (dealer, ZMQ_RCVTIMEO, IO_TIMEOUT_MS);
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    ck_assert_int_eq (zmq_connect (dealer, endpoint), 0);
    /* Queued until the handshake is over. */
    ck_assert_int_eq (zmq_send (dealer, "hello from libzmq", 17, 0), 17);
    ck_assert_int_eq (zmq_send (dealer, "a", 1, ZMQ_SNDMORE), 1);
    ck_assert_int_eq (zmq_send (dealer, "b", 1, 0), 1);

    int fd = s_accept (listener);
    s_greet (fd, true);
    uint8_t md[256];
    size_t md_len = s_metadata (md, sizeof md, "ROUTER", NULL, NULL);
    zmtp_curve_t *server = zmtp_curve_new_server (&server_keys, NULL, NULL, md, md_len);
    zmtp_curve_fail_t why = ZMTP_CURVE_FAIL_PROTOCOL;
    ck_assert_int_eq (s_serve_handshake (fd, server, &why), ZMTP_CURVE_READY);
    ck_assert_int_eq (why, ZMTP_CURVE_OK);
    ck_assert_mem_eq (zmtp_curve_client_key (server), client_key, 32);
    const uint8_t *peer = zmtp_curve_peer_metadata (server, &md_len);
    s_property_is (peer, md_len, "Socket-Type", "DEALER", 6);
    s_property_is (peer, md_len, "Identity", "dealer-1", 8);

    s_expect_message (fd, server, 0, "hello from libzmq");
    s_expect_message (fd, server, ZMTP_CURVE_MSG_MORE, "a");
    s_expect_message (fd, server, 0, "b");
    s_send_message (fd, server, 0, "reply from us");
    s_send_message (fd, server, ZMTP_CURVE_MSG_MORE, "two");
    s_send_message (fd, server, 0, "parts");
    s_zexpect (dealer, "reply from us", false);
    s_zexpect (dealer, "two", true);
    s_zexpect (dealer, "parts", false);

    zmtp_curve_destroy (&server);
    close (fd);
    close (listener);
    zmq_close (dealer);
    zmq_ctx_term (ctx);
}
END_TEST

/* The first event libzmq's monitor reports of those in MASK: its number and value. */
static void s_zevent (void *monitor, uint16_t *event, uint32_t *value)
{
    uint8_t head[6];
    char endpoint[256];
    ck_assert_int_eq (zmq_recv (monitor, head, sizeof head, 0), 6);
    ck_assert_int_ge (zmq_recv (monitor, endpoint, sizeof endpoint, 0), 0);
    memcpy (event, head, 2);
    memcpy (value, head + 2, 4);
}

START_TEST (a_libzmq_dealer_our_server_refuses_reports_authentication_failure_400)
{
    zmtp_keypair_t server_keys;
    s_keypair (&server_keys);
    char server_z85[41], client_pub[41], client_sec[41];
    zmtp_z85_encode (server_keys.public_key, server_z85);
    ck_assert_int_eq (zmq_curve_keypair (client_pub, client_sec), 0);
    int port;
    int listener = s_listen (&port);
    void *ctx = zmq_ctx_new ();
    void *dealer = zmq_socket (ctx, ZMQ_DEALER);
    s_zsetkey (dealer, ZMQ_CURVE_SERVERKEY, server_z85);
    s_zsetkey (dealer, ZMQ_CURVE_PUBLICKEY, client_pub);
    s_zsetkey (dealer, ZMQ_CURVE_SECRETKEY, client_sec);
    s_zset_int (dealer, ZMQ_LINGER, 0);
    ck_assert_int_eq (zmq_socket_monitor (dealer, "inproc://monitor", ZMQ_EVENT_HANDSHAKE_FAILED_AUTH), 0);
    void *monitor = zmq_socket (ctx, ZMQ_PAIR);
    s_zset_int (monitor, ZMQ_RCVTIMEO, IO_TIMEOUT_MS);
    ck_assert_int_eq (zmq_connect (monitor, "inproc://monitor"), 0);
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    ck_assert_int_eq (zmq_connect (dealer, endpoint), 0);

    int fd = s_accept (listener);
    s_greet (fd, true);
    authorizer_t auth = { .allow = false };
    zmtp_curve_t *server = zmtp_curve_new_server (&server_keys, s_authorize, &auth, NULL, 0);
    zmtp_curve_fail_t why = ZMTP_CURVE_OK;
    ck_assert_int_eq (s_serve_handshake (fd, server, &why), ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_DENIED);
    uint8_t client_key[32];
    zmtp_z85_decode (client_pub, client_key);
    ck_assert_mem_eq (auth.key, client_key, 32);
    /* libzmq reads our ERROR "400" as a ZAP status: an authentication failure with that code. */
    uint16_t event = 0;
    uint32_t value = 0;
    s_zevent (monitor, &event, &value);
    ck_assert_uint_eq (event, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    ck_assert_uint_eq (value, 400);

    zmtp_curve_destroy (&server);
    close (fd);
    close (listener);
    zmq_close (monitor);
    zmq_close (dealer);
    zmq_ctx_term (ctx);
}
END_TEST

/* A libzmq ROUTER with CURVE server keys, bound on loopback: its endpoint in ENDPOINT. No ZAP
 * handler and ZMQ_ZAP_ENFORCE_DOMAIN off (the default): every client key is served. */
static void *s_zrouter (void *ctx, char *server_pub, char *endpoint, size_t cap)
{
    char server_sec[41];
    ck_assert_int_eq (zmq_curve_keypair (server_pub, server_sec), 0);
    void *router = zmq_socket (ctx, ZMQ_ROUTER);
    s_zset_int (router, ZMQ_CURVE_SERVER, 1);
    s_zsetkey (router, ZMQ_CURVE_SECRETKEY, server_sec);
    s_zset_int (router, ZMQ_LINGER, 0);
    s_zset_int (router, ZMQ_RCVTIMEO, IO_TIMEOUT_MS);
    ck_assert_int_eq (zmq_bind (router, "tcp://127.0.0.1:*"), 0);
    ck_assert_int_eq (zmq_getsockopt (router, ZMQ_LAST_ENDPOINT, endpoint, &cap), 0);
    return router;
}

START_TEST (our_client_handshakes_with_a_libzmq_router_and_messages_flow_both_ways)
{
    void *ctx = zmq_ctx_new ();
    char server_pub[41], endpoint[64];
    void *router = s_zrouter (ctx, server_pub, endpoint, sizeof endpoint);
    uint8_t server_key[32];
    ck_assert_int_eq (zmtp_z85_decode (server_pub, server_key), 0);
    zmtp_keypair_t keys;
    s_keypair (&keys);
    uint8_t md[256];
    size_t md_len = s_metadata (md, sizeof md, "DEALER", "", NULL);
    zmtp_curve_t *client = zmtp_curve_new_client (&keys, server_key, md, md_len);
    ck_assert_ptr_nonnull (client);

    int fd = s_connect (endpoint);
    s_greet (fd, false);
    uint8_t in[ZMTP_CURVE_COMMAND_MAX], out[ZMTP_CURVE_COMMAND_MAX];
    size_t out_len = zmtp_curve_start (client, out, sizeof out);
    ck_assert_uint_eq (out_len, 200);
    s_write_frame (fd, ZMTP_FLAG_COMMAND, out, out_len);
    zmtp_curve_fail_t why;
    size_t in_len = s_read_command (fd, in, sizeof in);
    ck_assert_uint_eq (in_len, 168);
    ck_assert_int_eq (zmtp_curve_step (client, in, in_len, out, sizeof out, &out_len, &why), ZMTP_CURVE_CONTINUE);
    s_write_frame (fd, ZMTP_FLAG_COMMAND, out, out_len);
    in_len = s_read_command (fd, in, sizeof in);
    ck_assert_int_eq (zmtp_curve_step (client, in, in_len, out, sizeof out, &out_len, &why), ZMTP_CURVE_READY);
    ck_assert_uint_eq (out_len, 0);
    /* libzmq's READY: Socket-Type and its (empty) Identity, nothing else. */
    const uint8_t *peer = zmtp_curve_peer_metadata (client, &md_len);
    s_property_is (peer, md_len, "Socket-Type", "ROUTER", 6);
    s_property_is (peer, md_len, "Identity", "", 0);
    ck_assert_uint_eq (md_len, (1 + 11 + 4 + 6) + (1 + 8 + 4));
    ck_assert_uint_eq (zmtp_get_u64 (in + 6), 1);       /* libzmq's READY nonce: 1 */

    s_send_message (fd, client, ZMTP_CURVE_MSG_MORE, "part-1");
    s_send_message (fd, client, 0, "part-2");
    /* The ROUTER prefixes the routing id it made up for a peer with an empty Identity: five bytes,
     * a zero and a counter. */
    uint8_t id[256];
    int id_len = zmq_recv (router, id, sizeof id, 0);
    ck_assert_int_eq (id_len, 5);
    ck_assert_uint_eq (id[0], 0);
    s_zexpect (router, "part-1", true);
    s_zexpect (router, "part-2", false);
    ck_assert_int_eq (zmq_send (router, id, (size_t) id_len, ZMQ_SNDMORE), id_len);
    ck_assert_int_eq (zmq_send (router, "reply-1", 7, 0), 7);
    s_expect_message (fd, client, 0, "reply-1");

    zmtp_curve_destroy (&client);
    close (fd);
    zmq_close (router);
    zmq_ctx_term (ctx);
}
END_TEST

START_TEST (a_libzmq_router_closes_the_connection_on_our_client_holding_another_server_key)
{
    void *ctx = zmq_ctx_new ();
    char server_pub[41], endpoint[64];
    void *router = s_zrouter (ctx, server_pub, endpoint, sizeof endpoint);
    zmtp_keypair_t keys, wrong;
    s_keypair (&keys);
    s_keypair (&wrong);
    zmtp_curve_t *client = zmtp_curve_new_client (&keys, wrong.public_key, NULL, 0);
    int fd = s_connect (endpoint);
    s_greet (fd, false);
    uint8_t out[ZMTP_CURVE_COMMAND_MAX], in[ZMTP_CURVE_COMMAND_MAX], flags;
    size_t out_len = zmtp_curve_start (client, out, sizeof out), in_len;
    s_write_frame (fd, ZMTP_FLAG_COMMAND, out, out_len);
    /* libzmq cannot open our HELLO box, sends nothing back (no ERROR: RFC 26 lets a server stay
     * silent to a peer it cannot authenticate) and closes the socket: the stream ends (recv 0,
     * errno 0), well before our 5 s receive timeout (which would be EAGAIN). */
    ck_assert_int_eq (s_read_frame (fd, &flags, in, sizeof in, &in_len), -1);
    ck_assert_msg (errno == 0, "expected the end of the stream, got %s", strerror (errno));
    zmtp_curve_destroy (&client);
    close (fd);
    zmq_close (router);
    zmq_ctx_term (ctx);
}
END_TEST

int main (void)
{
    if (sodium_init () < 0)
        return 1;
    Suite *s = suite_create ("zmtp_curve");
    TCase *mem = tcase_create ("in_memory");
    tcase_set_timeout (mem, 60);
    tcase_add_test (mem, our_client_and_our_server_handshake_and_exchange_every_kind_of_frame);
    tcase_add_test (mem, metadata_up_to_the_limit_passes_and_a_byte_more_is_refused_at_construction);
    tcase_add_test (mem, z85_matches_libzmq_and_refuses_what_is_not_40_z85_characters);
    suite_add_tcase (s, mem);
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
    TCase *lz = tcase_create ("libzmq");
    tcase_set_timeout (lz, 60);
    tcase_add_test (lz, a_libzmq_dealer_handshakes_with_our_server_and_messages_flow_both_ways);
    tcase_add_test (lz, a_libzmq_dealer_our_server_refuses_reports_authentication_failure_400);
    tcase_add_test (lz, our_client_handshakes_with_a_libzmq_router_and_messages_flow_both_ways);
    tcase_add_test (lz, a_libzmq_router_closes_the_connection_on_our_client_holding_another_server_key);
    suite_add_tcase (s, lz);
    SRunner *sr = srunner_create (s);
    srunner_run_all (sr, CK_NORMAL);
    int failed = srunner_ntests_failed (sr);
    srunner_free (sr);
    return failed;
}
