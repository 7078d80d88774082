/* What the transport/zmtp_curve.c suites share: test_zmtp_curve.c (our client and our server in
 * memory), test_zmtp_curve_refusals.c (every refusal with its exact reason) and
 * test_zmtp_curve_libzmq.c (the handshake against libzmq over tcp loopback). Keys, metadata, one
 * connection's two sides taken through the handshake up to a given command, and an authorizer that
 * records what it was asked.
 *
 * Each suite's binary includes it once, after defining _GNU_SOURCE: everything here is static. */
#ifndef SIGSERVE_ZMTP_CURVE_TESTS_H
#define SIGSERVE_ZMTP_CURVE_TESTS_H

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

static inline void s_keypair (zmtp_keypair_t *kp)
{
    ck_assert_int_eq (crypto_box_keypair (kp->public_key, kp->secret_key), 0);
}

/* Metadata with Socket-Type TYPE and, unless NULL, Identity ID and a property of our own. */
static inline size_t s_metadata (uint8_t *md, size_t cap, const char *type, const char *id, const char *extra)
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
static inline void s_pair_new (pair_t *p, const zmtp_keypair_t *server_keys, zmtp_curve_authorize_fn authorize, void *arg)
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

static inline void s_pair_destroy (pair_t *p)
{
    zmtp_curve_destroy (&p->server);
    zmtp_curve_destroy (&p->client);
    ck_assert_ptr_null (p->server);
    ck_assert_ptr_null (p->client);
}

/* The handshake up to STAGE: 1 HELLO written, 2 WELCOME written, 3 INITIATE written, 4 READY
 * written, 5 READY taken in by the client. Every step on the way must succeed. */
static inline void s_handshake_to (pair_t *p, int stage)
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

/* An authorizer that records the key it was asked about and answers ALLOW. */
typedef struct {
    bool allow;                     /* the decision */
    int calls;                      /* how many times it was asked */
    uint8_t key[32];                /* the key it was asked about */
} authorizer_t;

static inline bool s_authorize (const uint8_t key[ZMTP_CURVE_KEY_BYTES], void *arg)
{
    authorizer_t *a = arg;
    a->calls++;
    memcpy (a->key, key, 32);
    return a->allow;
}

#endif
