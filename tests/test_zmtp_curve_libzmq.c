/* transport/zmtp_curve.c against libzmq itself over tcp loopback, in both directions: a libzmq
 * DEALER client handshaking with our server (messages both ways, and a refusal libzmq reports as
 * an authentication failure with ZAP status 400), and our client handshaking with a libzmq ROUTER
 * server (messages both ways, and the connection it closes on a client holding another server key).
 * The greetings and frames are written and read here over plain sockets
 * (tests/zmtp_curve_tests.h: keys, metadata and the authorizer). */
#define _GNU_SOURCE
#include "zmtp_curve_tests.h"

#define IO_TIMEOUT_MS 5000          /* a bug fails the test after this rather than hanging it */

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
    Suite *s = suite_create ("zmtp_curve_libzmq");
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
