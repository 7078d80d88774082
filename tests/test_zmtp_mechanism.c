/* transport/: CURVE on one side only (issue 39). Our greeting goes out in two parts, the rest once
 * the peer's first 11 bytes have come, so that each side reads the other's mechanism: a CURVE router
 * (ours) counts a plaintext libzmq DEALER as a mechanism mismatch, once, and the DEALER's monitor says
 * MECHANISM_MISMATCH; our DEALER, refused by a server of the other mechanism (ours or libzmq's), fails
 * its receive and its next sends at once (EPROTO) with the words for it, connects no more by itself,
 * and tries again only when a message is sent after reconnect_max_ms. The tests drive our engine
 * from their own thread, as the front does. */
#define _GNU_SOURCE
#include "testutil.h"
#include "zmtp_dealer.h"
#include "zmtp_probe.h"
#include "zmtp_router.h"

#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define WAIT_NS 10000000000ull          /* the cap on any wait for a condition */

static uint64_t s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static zmtp_keypair_t s_server_keys;

/* A router of MECH on a free loopback port, its endpoint in EP (64 bytes). Any client key is served. */
static zmtp_router_t *s_router (zmtp_mechanism_t mech, char *ep)
{
    zmtp_router_opts_t o = { .conn = { .mechanism = mech, .curve_keys = &s_server_keys, .handshake_ms = 5000 } };
    zmtp_router_t *r = zmtp_router_new (&o);
    ck_assert_ptr_nonnull (r);
    snprintf (ep, 64, "tcp://127.0.0.1:%d", tu_free_port ());
    char err[256];
    ck_assert_msg (zmtp_router_bind (r, ep, 1, false, NULL, err, sizeof err) >= 0, "%s", err);
    return r;
}

/* One turn of R: accepts, reads, writes what it has to, without waiting. */
static void s_turn (zmtp_router_t *r)
{
    zmtp_router_msg_t m;
    zmtp_router_wait (r, 0);
    while (zmtp_router_recv (r, &m, s_now ()) == 1)
        ;
    zmtp_router_tick (r, s_now ());
}

/* A dealer of MECH (CURVE: a fresh client key pair, SERVER_KEY the server's) connected to EP. */
static zmtp_dealer_t *s_dealer (zmtp_mechanism_t mech, const uint8_t *server_key, uint32_t reconnect_max_ms,
                                const char *ep)
{
    zmtp_keypair_t keys;
    ck_assert_int_eq (crypto_box_keypair (keys.public_key, keys.secret_key), 0);
    zmtp_dealer_opts_t o = { .mechanism = mech, .curve_keys = &keys, .curve_server_key = server_key,
                             .reconnect_ms = 10, .reconnect_max_ms = reconnect_max_ms };
    zmtp_dealer_t *d = zmtp_dealer_new (&o);
    ck_assert_ptr_nonnull (d);
    char err[256];
    ck_assert_msg (zmtp_dealer_connect (d, ep, err, sizeof err) == 0, "%s", err);
    return d;
}

/* Drives R (may be NULL: a libzmq peer drives itself) and D until D's receive fails: its errno. */
static int s_until_refused (zmtp_router_t *r, zmtp_dealer_t *d)
{
    zmtp_msg_t m;
    for (uint64_t until = s_now () + WAIT_NS; s_now () < until;) {
        if (r)
            s_turn (r);
        errno = 0;
        int rc = zmtp_dealer_recv (d, &m, 1);
        ck_assert_int_ne (rc, 1);
        if (rc < 0)
            return errno;
    }
    ck_abort_msg ("the dealer was not refused within 10 s: %s", zmtp_dealer_error (d));
    return 0;
}

/* Drives R until its count of connections closed for WHY reaches N. */
static void s_until_closed (zmtp_router_t *r, zmtp_close_t why, uint64_t n)
{
    for (uint64_t until = s_now () + WAIT_NS; zmtp_router_stats (r)->closed[why] < n && s_now () < until;)
        s_turn (r);
    ck_assert_uint_eq (zmtp_router_stats (r)->closed[why], n);
}

static int s_port (const char *ep) { return atoi (strrchr (ep, ':') + 1); }

START_TEST (our_greeting_goes_in_two_parts_the_rest_once_the_peers_first_11_bytes_came)
{
    char ep[64];
    zmtp_router_t *r = s_router (ZMTP_MECH_CURVE, ep);
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) s_port (ep)) };
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    ck_assert_int_eq (connect (fd, (struct sockaddr *) &a, sizeof a), 0);
    for (uint64_t until = s_now () + WAIT_NS; zmtp_router_stats (r)->accepted < 1 && s_now () < until;)
        s_turn (r);
    struct pollfd p = { .fd = fd, .events = POLLIN };
    ck_assert_int_eq (poll (&p, 1, 10000), 1);
    uint8_t got[64];
    /* the signature and the major version, and nothing more: the router has done all it would */
    ck_assert_int_eq (recv (fd, got, sizeof got, MSG_DONTWAIT), 11);
    const uint8_t first[11] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3 };
    ck_assert_mem_eq (got, first, 11);
    uint8_t ours[ZMTP_GREETING_BYTES];
    zmtp_greeting_write (ours, ZMTP_MECH_NULL, false);
    ck_assert_int_eq (send (fd, ours, 10, MSG_NOSIGNAL), 10);
    for (int i = 0; i < 20; i++)
        s_turn (r);
    ck_assert_int_eq (recv (fd, got, sizeof got, MSG_DONTWAIT), -1);   /* 10 bytes do not tell ZMTP 3 */
    ck_assert_int_eq (errno, EAGAIN);
    ck_assert_int_eq (send (fd, ours + 10, 1, MSG_NOSIGNAL), 1);
    for (uint64_t until = s_now () + WAIT_NS; poll (&p, 1, 0) == 0 && s_now () < until;)
        s_turn (r);
    ck_assert_int_eq (recv (fd, got, sizeof got, MSG_DONTWAIT), 53);
    ck_assert_uint_eq (got[0], 1);                                      /* 3.1 */
    ck_assert_mem_eq (got + 1, "CURVE\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 20);
    ck_assert_uint_eq (got[21], 1);                                     /* as-server */
    /* then our mechanism, NULL: the router closes, a mechanism mismatch, without an ERROR (RFC 37) */
    ck_assert_int_eq (send (fd, ours + 11, 53, MSG_NOSIGNAL), 53);
    s_until_closed (r, ZMTP_CLOSE_MECHANISM, 1);
    ck_assert_int_eq (poll (&p, 1, 10000), 1);
    ck_assert_int_eq (recv (fd, got, sizeof got, 0), 0);
    char want[128];
    snprintf (want, sizeof want, ": the peer's security mechanism is NULL (plaintext), ours CURVE");
    const char *last = zmtp_router_stats (r)->last_error;
    ck_assert_str_eq (last + strlen (last) - strlen (want), want);
    close (fd);
    zmtp_router_destroy (&r, 0);
}
END_TEST

/* The event a libzmq socket's monitor has, waiting 10 s at most: event and value. */
static void s_zevent (void *monitor, uint16_t *event, uint32_t *value)
{
    uint8_t head[6];
    char where[256];
    ck_assert_int_eq (zmq_recv (monitor, head, sizeof head, 0), 6);
    ck_assert_int_ge (zmq_recv (monitor, where, sizeof where, 0), 0);
    memcpy (event, head, 2);
    memcpy (value, head + 2, 4);
}

/* A monitor of SOCK's handshake failures (every kind), in CTX. */
static void *s_zmonitor (void *ctx, void *sock, const char *name)
{
    ck_assert_int_eq (zmq_socket_monitor (sock, name, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                                          | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                                          | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH), 0);
    void *m = zmq_socket (ctx, ZMQ_PAIR);
    int timeout = 10000, linger = 0;
    zmq_setsockopt (m, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt (m, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq (zmq_connect (m, name), 0);
    return m;
}

/* A libzmq DEALER without CURVE (CURVE: with keys for our server) at our router of the other
 * mechanism: both sides see the mismatch for what it is, once. */
START_TEST (a_libzmq_dealer_of_the_other_mechanism_is_refused_once_and_both_sides_know_why)
{
    const bool client_curve = _i == 1;
    char ep[64];
    zmtp_router_t *r = s_router (client_curve ? ZMTP_MECH_NULL : ZMTP_MECH_CURVE, ep);
    void *ctx = zmq_ctx_new ();
    void *d = zmq_socket (ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt (d, ZMQ_LINGER, &linger, sizeof linger);
    if (client_curve) {
        char pub[41], sec[41], server[41];
        ck_assert_int_eq (zmq_curve_keypair (pub, sec), 0);
        zmtp_z85_encode (s_server_keys.public_key, server);
        zmq_setsockopt (d, ZMQ_CURVE_SERVERKEY, server, 40);
        zmq_setsockopt (d, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt (d, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    void *monitor = s_zmonitor (ctx, d, "inproc://mismatch");
    ck_assert_int_eq (zmq_connect (d, ep), 0);
    s_until_closed (r, ZMTP_CLOSE_MECHANISM, 1);
    uint16_t event = 0;
    uint32_t value = 0;
    s_zevent (monitor, &event, &value);
    ck_assert_uint_eq (event, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL);
    ck_assert_uint_eq (value, ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH);
    ck_assert_uint_eq (zmtp_router_stats (r)->accepted, 1);
    zmq_close (monitor);
    zmq_close (d);
    zmq_ctx_term (ctx);
    zmtp_router_destroy (&r, 0);
}
END_TEST

/* Our dealer without CURVE at our CURVE router, and with CURVE at a NULL one: refused after one
 * connection, with the words for it; the next send fails at once and connects nothing. */
START_TEST (our_dealer_of_the_other_mechanism_fails_at_once_and_connects_no_more)
{
    const bool client_curve = _i == 1;
    char ep[64], want[256];
    zmtp_router_t *r = s_router (client_curve ? ZMTP_MECH_NULL : ZMTP_MECH_CURVE, ep);
    zmtp_dealer_t *d = s_dealer (client_curve ? ZMTP_MECH_CURVE : ZMTP_MECH_NULL, s_server_keys.public_key, 600000, ep);
    const zmtp_frame_t hello = { (const uint8_t *) "hello", 5 };
    ck_assert_int_eq (zmtp_dealer_send (d, &hello, 1), 0);            /* queued: nothing is up yet */
    ck_assert (!zmtp_dealer_refused (d));
    ck_assert_int_eq (s_until_refused (r, d), EPROTO);
    snprintf (want, sizeof want, "%s: %s", ep,
              client_curve ? "the server does not use CURVE, and this client has CURVE keys"
                           : "the server asks for CURVE, and this client has no CURVE keys");
    ck_assert_str_eq (zmtp_dealer_error (d), want);
    ck_assert (zmtp_dealer_refused (d));
    s_until_closed (r, ZMTP_CLOSE_MECHANISM, 1);
    /* at once, and no new connection: reconnect_max_ms (10 min) has not passed */
    errno = 0;
    ck_assert_int_eq (zmtp_dealer_send (d, &hello, 1), -1);
    ck_assert_int_eq (errno, EPROTO);
    zmtp_msg_t m;
    ck_assert_int_eq (zmtp_dealer_recv (d, &m, 1000), -1);
    ck_assert_int_eq (errno, EPROTO);
    struct pollfd fds[4];
    ck_assert_int_eq (zmtp_dealer_pollfds (d, fds, 4), 0);
    for (int i = 0; i < 20; i++)
        s_turn (r);
    ck_assert_uint_eq (zmtp_router_stats (r)->accepted, 1);
    ck_assert_uint_eq (zmtp_router_connections (r), 0);
    zmtp_dealer_destroy (&d);
    zmtp_router_destroy (&r, 0);
}
END_TEST

/* A refused endpoint is tried again by a send once reconnect_max_ms have passed: one more connection,
 * refused again. */
START_TEST (a_send_tries_a_refused_endpoint_again_after_reconnect_max_ms)
{
    char ep[64];
    zmtp_router_t *r = s_router (ZMTP_MECH_CURVE, ep);
    zmtp_dealer_t *d = s_dealer (ZMTP_MECH_NULL, NULL, 50, ep);
    const zmtp_frame_t hello = { (const uint8_t *) "hello", 5 };
    ck_assert_int_eq (zmtp_dealer_send (d, &hello, 1), 0);
    ck_assert_int_eq (s_until_refused (r, d), EPROTO);
    s_until_closed (r, ZMTP_CLOSE_MECHANISM, 1);
    /* Until the 50 ms have passed, a send fails at once and connects nothing; then one is taken
     * (WAIT_NS at most, however slow the machine). */
    int sent = -1;
    for (const uint64_t until = s_now () + WAIT_NS; (sent = zmtp_dealer_send (d, &hello, 1)) != 0 && s_now () < until;) {
        ck_assert_int_eq (errno, EPROTO);
        usleep (1000);
    }
    ck_assert_int_eq (sent, 0);
    ck_assert (!zmtp_dealer_refused (d));
    ck_assert_int_eq (s_until_refused (r, d), EPROTO);
    s_until_closed (r, ZMTP_CLOSE_MECHANISM, 2);
    ck_assert_uint_eq (zmtp_router_stats (r)->accepted, 2);
    zmtp_dealer_destroy (&d);
    zmtp_router_destroy (&r, 0);
}
END_TEST

/* Our dealer without CURVE at a libzmq CURVE router: refused with the same words, and libzmq's own
 * monitor saw our mechanism (the rest of our greeting went out before we closed). */
START_TEST (our_dealer_without_curve_at_a_libzmq_curve_router_is_refused_and_libzmq_knows_why)
{
    void *ctx = zmq_ctx_new ();
    char pub[41], sec[41], ep[64];
    ck_assert_int_eq (zmq_curve_keypair (pub, sec), 0);
    void *router = zmq_socket (ctx, ZMQ_ROUTER);
    int on = 1, linger = 0;
    zmq_setsockopt (router, ZMQ_CURVE_SERVER, &on, sizeof on);
    zmq_setsockopt (router, ZMQ_CURVE_SECRETKEY, sec, 40);
    zmq_setsockopt (router, ZMQ_LINGER, &linger, sizeof linger);
    void *monitor = s_zmonitor (ctx, router, "inproc://router-mismatch");
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", tu_free_port ());
    ck_assert_int_eq (zmq_bind (router, ep), 0);
    zmtp_dealer_t *d = s_dealer (ZMTP_MECH_NULL, NULL, 600000, ep);
    const zmtp_frame_t hello = { (const uint8_t *) "hello", 5 };
    ck_assert_int_eq (zmtp_dealer_send (d, &hello, 1), 0);
    ck_assert_int_eq (s_until_refused (NULL, d), EPROTO);
    char want[256];
    snprintf (want, sizeof want, "%s: the server asks for CURVE, and this client has no CURVE keys", ep);
    ck_assert_str_eq (zmtp_dealer_error (d), want);
    uint16_t event = 0;
    uint32_t value = 0;
    s_zevent (monitor, &event, &value);
    ck_assert_uint_eq (event, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL);
    ck_assert_uint_eq (value, ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH);
    zmtp_dealer_destroy (&d);
    zmq_close (monitor);
    zmq_close (router);
    zmq_ctx_term (ctx);
}
END_TEST


/* A peer that is not ZeroMQ: accepts one connection on *ARG (a listening fd) and answers in HTTP. */
static void *s_http_peer (void *arg)
{
    int c = accept (*(int *) arg, NULL, NULL);
    if (c >= 0) {
        static const char answer[] = "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        if (write (c, answer, sizeof answer - 1) < 0)
            perror ("write");
        close (c);
    }
    return NULL;
}

/* zmtp_probe_mechanism: a libzmq ROUTER's mechanism from its greeting (CURVE and NULL), the rest of
 * ours sent so that a CURVE server counts the probe as the plaintext client it is (a mechanism
 * mismatch in its monitor, not a failure without detail); a closed port, a listener that says
 * nothing and a peer that is not ZeroMQ each fail with their errno. */
START_TEST (the_probe_reads_a_servers_mechanism_and_is_refused_as_what_it_is)
{
    void *ctx = zmq_ctx_new ();
    for (int curve = 0; curve < 2; curve++) {
        void *r = zmq_socket (ctx, ZMQ_ROUTER);
        int one = 1, linger = 0;
        zmq_setsockopt (r, ZMQ_LINGER, &linger, sizeof linger);
        char pub[41], sec[41], ep[64], name[64];
        if (curve) {
            ck_assert_int_eq (zmq_curve_keypair (pub, sec), 0);
            zmq_setsockopt (r, ZMQ_CURVE_SERVER, &one, sizeof one);
            zmq_setsockopt (r, ZMQ_CURVE_SECRETKEY, sec, 40);
        }
        snprintf (name, sizeof name, "inproc://probe-%d", curve);
        void *monitor = s_zmonitor (ctx, r, name);
        snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", tu_free_port ());
        ck_assert_int_eq (zmq_bind (r, ep), 0);
        /* the other mechanism first (a mismatch), then the same (the server waits for a handshake
         * the probe closes: a failure without detail) */
        for (int same = 0; same < 2; same++) {
            zmtp_mechanism_t got = ZMTP_MECH_OTHER;
            const bool ours_curve = same ? curve : !curve;
            ck_assert_int_eq (zmtp_probe_mechanism (ep, ours_curve ? ZMTP_MECH_CURVE : ZMTP_MECH_NULL, 5000, &got), 0);
            ck_assert_int_eq (got, curve ? ZMTP_MECH_CURVE : ZMTP_MECH_NULL);
            uint16_t event = 0;
            uint32_t value = 0;
            s_zevent (monitor, &event, &value);
            ck_assert_uint_eq (event, same ? ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL : ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL);
            if (!same)
                ck_assert_uint_eq (value, ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH);
        }
        zmq_close (monitor);
        zmq_close (r);
    }
    zmq_ctx_term (ctx);
    zmtp_mechanism_t got;
    char ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", tu_free_port ());
    ck_assert_int_eq (zmtp_probe_mechanism (ep, ZMTP_MECH_NULL, 5000, &got), -1);
    ck_assert_int_eq (errno, ECONNREFUSED);
    /* a listener that accepts (the backlog) and says nothing; then one that is not ZeroMQ */
    int l = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    ck_assert_int_eq (bind (l, (struct sockaddr *) &a, sizeof a), 0);
    ck_assert_int_eq (listen (l, 4), 0);
    ck_assert_int_eq (getsockname (l, (struct sockaddr *) &a, &len), 0);
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", ntohs (a.sin_port));
    ck_assert_int_eq (zmtp_probe_mechanism (ep, ZMTP_MECH_NULL, 100, &got), -1);
    ck_assert_int_eq (errno, ETIMEDOUT);
    int c = accept (l, NULL, NULL);     /* the probe's, closed */
    ck_assert_int_ge (c, 0);
    close (c);
    pthread_t t;
    ck_assert_int_eq (pthread_create (&t, NULL, s_http_peer, &l), 0);
    ck_assert_int_eq (zmtp_probe_mechanism (ep, ZMTP_MECH_NULL, 5000, &got), -1);
    ck_assert_int_eq (errno, EPROTO);
    ck_assert_int_eq (pthread_join (t, NULL), 0);
    close (l);
}
END_TEST

int main (void)
{
    if (sodium_init () < 0 || crypto_box_keypair (s_server_keys.public_key, s_server_keys.secret_key) != 0)
        return 1;
    Suite *s = suite_create ("zmtp_mechanism");
    TCase *tc = tcase_create ("mismatch");
    tcase_set_timeout (tc, 60);
    tcase_add_test (tc, our_greeting_goes_in_two_parts_the_rest_once_the_peers_first_11_bytes_came);
    tcase_add_loop_test (tc, a_libzmq_dealer_of_the_other_mechanism_is_refused_once_and_both_sides_know_why, 0, 2);
    tcase_add_loop_test (tc, our_dealer_of_the_other_mechanism_fails_at_once_and_connects_no_more, 0, 2);
    tcase_add_test (tc, a_send_tries_a_refused_endpoint_again_after_reconnect_max_ms);
    tcase_add_test (tc, our_dealer_without_curve_at_a_libzmq_curve_router_is_refused_and_libzmq_knows_why);
    tcase_add_test (tc, the_probe_reads_a_servers_mechanism_and_is_refused_as_what_it_is);
    suite_add_tcase (s, tc);
    SRunner *sr = srunner_create (s);
    srunner_run_all (sr, CK_NORMAL);
    int failed = srunner_ntests_failed (sr);
    srunner_free (sr);
    return failed ? 1 : 0;
}
