/* transport/: the ZMTP engine against the library it replaces, peer by peer, and against itself.
 * Our ROUTER (zmtp_router) serves libzmq DEALER and REQ sockets; our DEALER (zmtp_dealer) talks to a
 * libzmq ROUTER; both talk to each other. Frames arrive as sent (1..15 of them, empty, 255 / 256
 * bytes either side of the long size, 64 KiB); a message past the bounds is handed out refused and
 * its connection closed once the reply is written; routing ids are the router's, whatever a peer
 * announces; PINGs are answered and a silent peer is closed; a peer that goes mid-message leaves
 * nothing behind; a client that does not read its replies is not read from; near the open-file
 * limit the idle connections make room for a new one. The tests drive the engine from the test's
 * own thread, as the front does. */
#define _GNU_SOURCE
#include "testutil.h"
#include "zmtp_addr.h"
#include "zmtp_dealer.h"
#include "zmtp_router.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define WAIT_MS 10000

static uint64_t s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static zmtp_router_t *s_router (const char *endpoint, uint64_t max_bytes, uint32_t heartbeat_ms)
{
    zmtp_router_opts_t o = { .conn = { .mechanism = ZMTP_MECH_NULL, .max_message_bytes = max_bytes,
                                       .heartbeat_ivl_ms = heartbeat_ms, .handshake_ms = 5000 } };
    zmtp_router_t *r = zmtp_router_new (&o);
    ck_assert_ptr_nonnull (r);
    char err[256];
    ck_assert_msg (zmtp_router_bind (r, endpoint, 7, false, NULL, err, sizeof err) >= 0, "%s", err);
    return r;
}

/* Drives R until a message comes (1), or WAIT_MS pass (0). */
static int s_router_take (zmtp_router_t *r, zmtp_router_msg_t *m, int wait_ms)
{
    uint64_t until = s_now () + (uint64_t) wait_ms * 1000000ull;
    while (s_now () < until) {
        if (zmtp_router_recv (r, m, s_now ()) == 1)
            return 1;
        zmtp_router_tick (r, s_now ());
        zmtp_router_wait (r, 5);
    }
    return 0;
}

static void *s_zsock (void *ctx, int type, const char *endpoint)
{
    void *s = zmq_socket (ctx, type);
    int linger = 0, timeout = WAIT_MS;
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq (zmq_connect (s, endpoint), 0);
    return s;
}

static char *s_endpoint (void)
{
    static char ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", tu_free_port ());
    return ep;
}

START_TEST (a_libzmq_dealer_is_served_frame_for_frame)
{
    const char *ep = s_endpoint ();
    zmtp_router_t *r = s_router (ep, 1 << 20, 0);
    void *ctx = zmq_ctx_new ();
    void *d = s_zsock (ctx, ZMQ_DEALER, ep);
    /* 1..15 frames; sizes across the short/long boundary */
    static uint8_t big[65536];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t) (i * 7);
    const size_t sizes[] = { 0, 1, 255, 256, 65536 };
    for (int frames = 1; frames <= 15; frames++) {
        for (int f = 0; f < frames; f++)
            ck_assert_int_ge (zmq_send (d, big, sizes[(f + frames) % 5], f + 1 < frames ? ZMQ_SNDMORE : 0), 0);
        zmtp_router_msg_t m;
        ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
        ck_assert_int_eq (m.msg.nframes, frames + 1);
        ck_assert_int_eq ((int) m.msg.total_frames, frames + 1);
        ck_assert (!m.msg.refused);
        ck_assert_uint_eq (m.msg.frames[0].size, ZMTP_ROUTING_ID_BYTES);
        for (int f = 0; f < frames; f++) {
            ck_assert_uint_eq (m.msg.frames[f + 1].size, sizes[(f + frames) % 5]);
            ck_assert (memcmp (m.msg.frames[f + 1].data, big, m.msg.frames[f + 1].size) == 0);
        }
        /* echo it back whole */
        ck_assert_int_eq (zmtp_router_send (r, m.msg.frames, m.msg.nframes, s_now ()), 0);
        for (int f = 0; f < frames; f++) {
            zmq_msg_t part;
            zmq_msg_init (&part);
            ck_assert_int_ge (zmq_msg_recv (&part, d, 0), 0);
            ck_assert_uint_eq (zmq_msg_size (&part), sizes[(f + frames) % 5]);
            ck_assert (memcmp (zmq_msg_data (&part), big, zmq_msg_size (&part)) == 0);
            ck_assert_int_eq (zmq_msg_more (&part), f + 1 < frames);
            zmq_msg_close (&part);
        }
    }
    ck_assert_uint_eq (zmtp_router_connections (r), 1);
    zmq_close (d);
    zmq_ctx_term (ctx);
    zmtp_router_destroy (&r, 0);
}
END_TEST

START_TEST (a_libzmq_req_gets_its_delimiter_back)
{
    const char *ep = s_endpoint ();
    zmtp_router_t *r = s_router (ep, 1 << 20, 0);
    void *ctx = zmq_ctx_new ();
    void *q = s_zsock (ctx, ZMQ_REQ, ep);
    for (int round = 0; round < 3; round++) {
        char body[32];
        int n = snprintf (body, sizeof body, "question %d", round);
        ck_assert_int_eq (zmq_send (q, body, (size_t) n, 0), n);
        zmtp_router_msg_t m;
        ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
        ck_assert_int_eq (m.msg.nframes, 3);
        ck_assert_uint_eq (m.msg.frames[1].size, 0);      /* REQ's empty delimiter */
        ck_assert_uint_eq (m.msg.frames[2].size, (size_t) n);
        zmtp_frame_t reply[3] = { m.msg.frames[0], m.msg.frames[1], { (const uint8_t *) "answer", 6 } };
        ck_assert_int_eq (zmtp_router_send (r, reply, 3, s_now ()), 0);
        char got[16] = "";
        ck_assert_int_eq (zmq_recv (q, got, sizeof got, 0), 6);
        ck_assert_str_eq (got, "answer");
    }
    zmq_close (q);
    zmq_ctx_term (ctx);
    zmtp_router_destroy (&r, 0);
}
END_TEST

START_TEST (routing_ids_are_the_routers_so_no_peer_takes_anothers_replies)
{
    const char *ep = s_endpoint ();
    zmtp_router_t *r = s_router (ep, 1 << 20, 0);
    void *ctx = zmq_ctx_new ();
    void *a = zmq_socket (ctx, ZMQ_DEALER), *b = zmq_socket (ctx, ZMQ_DEALER);
    int timeout = WAIT_MS, linger = 0;
    for (int k = 0; k < 2; k++) {
        void *s = k ? b : a;
        zmq_setsockopt (s, ZMQ_ROUTING_ID, "victim", 6);    /* both claim the same id */
        zmq_setsockopt (s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
        zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
        ck_assert_int_eq (zmq_connect (s, ep), 0);
    }
    zmq_send (a, "from a", 6, 0);
    zmq_send (b, "from b", 6, 0);
    for (int k = 0; k < 2; k++) {
        zmtp_router_msg_t m;
        ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
        ck_assert_uint_eq (m.msg.frames[0].size, ZMTP_ROUTING_ID_BYTES);   /* ours, not "victim" */
        char reply[16];
        snprintf (reply, sizeof reply, "to %c", m.msg.frames[1].data[5]);
        zmtp_frame_t out[2] = { m.msg.frames[0], { (const uint8_t *) reply, 4 } };
        ck_assert_int_eq (zmtp_router_send (r, out, 2, s_now ()), 0);
    }
    char got[8] = "";
    ck_assert_int_eq (zmq_recv (a, got, sizeof got, 0), 4);
    ck_assert_str_eq (got, "to a");
    memset (got, 0, sizeof got);
    ck_assert_int_eq (zmq_recv (b, got, sizeof got, 0), 4);
    ck_assert_str_eq (got, "to b");
    /* a routing id of a connection that has gone is refused, not handed to the slot's next tenant */
    uint8_t stale[ZMTP_ROUTING_ID_BYTES] = { 0, 0, 0, 0, 99, 0, 0, 0 };
    zmtp_frame_t out[2] = { { stale, sizeof stale }, { (const uint8_t *) "x", 1 } };
    ck_assert_int_eq (zmtp_router_send (r, out, 2, s_now ()), -1);
    ck_assert_int_eq (errno, EHOSTUNREACH);
    zmq_close (a);
    zmq_close (b);
    zmq_ctx_term (ctx);
    zmtp_router_destroy (&r, 0);
}
END_TEST

/* A raw TCP client that speaks ZMTP by hand, for what libzmq will not send. */
static int s_raw_connect (const char *ep)
{
    int port = atoi (strrchr (ep, ':') + 1);
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    ck_assert_int_eq (connect (fd, (struct sockaddr *) &a, sizeof a), 0);
    struct timeval tv = { .tv_sec = WAIT_MS / 1000 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void s_write_all (int fd, const void *p, size_t n)
{
    ck_assert_int_eq ((int) send (fd, p, n, MSG_NOSIGNAL), (int) n);
}

static void s_read_exact (int fd, uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv (fd, p + got, n - got, 0);
        ck_assert_msg (k > 0, "read %zu of %zu bytes, then %zd (%s)", got, n, k, strerror (errno));
        got += (size_t) k;
    }
}

/* The greeting and READY of a DEALER, written without waiting for the router's. */
static void s_raw_hello (int fd)
{
    uint8_t g[ZMTP_GREETING_BYTES], md[64], body[96], hdr[9];
    zmtp_greeting_write (g, ZMTP_MECH_NULL, false);
    s_write_all (fd, g, sizeof g);
    size_t used = 0;
    zmtp_property_write (md, sizeof md, &used, "Socket-Type", "DEALER", 6);
    size_t len = zmtp_command_write (body, sizeof body, "READY", md, used);
    size_t h = zmtp_header_write (hdr, ZMTP_FLAG_COMMAND, len);
    s_write_all (fd, hdr, h);
    s_write_all (fd, body, len);
}

/* Greeting and NULL handshake as a DEALER, R driven meanwhile (this thread runs both ends). */
static void s_raw_handshake (int fd, zmtp_router_t *r)
{
    s_raw_hello (fd);
    zmtp_router_msg_t m;
    ck_assert_int_eq (s_router_take (r, &m, 50), 0);
    uint8_t peer[ZMTP_GREETING_BYTES], body[96], hdr[9];
    s_read_exact (fd, peer, sizeof peer);
    s_read_exact (fd, hdr, 2);
    ck_assert_int_eq (hdr[0], ZMTP_FLAG_COMMAND);
    s_read_exact (fd, body, hdr[1]);
    const uint8_t *data;
    size_t dlen;
    ck_assert (zmtp_command_is (body, hdr[1], "READY", &data, &dlen));
}

static void s_raw_frame (int fd, uint8_t flags, const void *p, size_t n)
{
    uint8_t hdr[9];
    size_t h = zmtp_header_write (hdr, flags, n);
    s_write_all (fd, hdr, h);
    if (n)
        s_write_all (fd, p, n);
}

/* True when the peer closed FD (within WAIT_MS). */
static bool s_closed_by_peer (int fd)
{
    uint8_t b[4096];
    for (;;) {
        ssize_t k = recv (fd, b, sizeof b, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET))
            return true;
        if (k < 0)
            return false;
    }
}

START_TEST (a_message_past_the_bounds_is_refused_and_its_connection_closed_after_the_reply)
{
    const char *ep = s_endpoint ();
    zmtp_router_t *r = s_router (ep, 1000, 0);
    /* bytes: 600 + 600 passes 1000 at the second frame's header, before its bytes come */
    int fd = s_raw_connect (ep);
    s_raw_handshake (fd, r);
    static uint8_t buf[600];
    s_raw_frame (fd, ZMTP_FLAG_MORE, buf, 600);
    uint8_t hdr[9];
    size_t h = zmtp_header_write (hdr, 0, 600);
    s_write_all (fd, hdr, h);      /* only the header of the second frame */
    zmtp_router_msg_t m;
    ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
    ck_assert (m.msg.refused);
    ck_assert_int_eq (m.msg.nframes, 2);            /* the routing id and the first frame */
    ck_assert_uint_eq (m.msg.total_frames, 3);
    ck_assert_uint_eq (m.msg.bytes, ZMTP_ROUTING_ID_BYTES + 1200);
    zmtp_frame_t reply[2] = { m.msg.frames[0], { (const uint8_t *) "refused", 7 } };
    ck_assert_int_eq (zmtp_router_send (r, reply, 2, s_now ()), 0);
    zmtp_router_tick (r, s_now ());
    uint8_t got[16];
    s_read_exact (fd, got, 9);
    ck_assert_int_eq (got[0], 0);
    ck_assert_int_eq (got[1], 7);
    ck_assert (memcmp (got + 2, "refused", 7) == 0);
    /* the router shut its side after the reply (the peer reads the end), and reads and drops what
     * the peer still sends (the rest of the message) until the peer closes too: no reset that could
     * drop the reply before the peer read it */
    s_write_all (fd, buf, 600);
    ck_assert (s_closed_by_peer (fd));
    ck_assert_uint_eq (zmtp_router_connections (r), 1);
    close (fd);
    for (uint64_t until = s_now () + 5000000000ull; zmtp_router_connections (r) > 0 && s_now () < until;)
        s_router_take (r, &m, 5);
    ck_assert_uint_eq (zmtp_router_connections (r), 0);
    ck_assert_uint_eq (zmtp_router_stats (r)->closed[ZMTP_CLOSE_REFUSED], 1);

    /* frames: the 16th of the peer's is past the bound (15 and the routing id) */
    fd = s_raw_connect (ep);
    s_raw_handshake (fd, r);
    for (int f = 0; f < 16; f++)
        s_raw_frame (fd, ZMTP_FLAG_MORE, "", 0);
    ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
    ck_assert (m.msg.refused);
    ck_assert_int_eq (m.msg.nframes, 16);
    ck_assert_uint_eq (m.msg.total_frames, 17);
    close (fd);

    /* one frame that alone passes the bound: refused at its header */
    fd = s_raw_connect (ep);
    s_raw_handshake (fd, r);
    h = zmtp_header_write (hdr, 0, 1ull << 40);
    s_write_all (fd, hdr, h);
    ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
    ck_assert (m.msg.refused);
    ck_assert_int_eq (m.msg.nframes, 1);
    ck_assert_uint_eq (m.msg.bytes, ZMTP_ROUTING_ID_BYTES + (1ull << 40));
    close (fd);
    zmtp_router_destroy (&r, 0);
}
END_TEST

START_TEST (a_peer_gone_mid_message_leaves_nothing_and_others_are_served)
{
    const char *ep = s_endpoint ();
    zmtp_router_t *r = s_router (ep, 1 << 20, 0);
    int fd = s_raw_connect (ep);
    s_raw_handshake (fd, r);
    uint8_t hdr[9];
    size_t h = zmtp_header_write (hdr, 0, 5000);
    s_write_all (fd, hdr, h);
    s_write_all (fd, "half", 4);
    close (fd);
    zmtp_router_msg_t m;
    ck_assert_int_eq (s_router_take (r, &m, 300), 0);
    ck_assert_uint_eq (zmtp_router_connections (r), 0);
    ck_assert_uint_eq (zmtp_router_stats (r)->closed[ZMTP_CLOSE_PEER], 1);
    /* a peer that sends garbage instead of a greeting */
    fd = s_raw_connect (ep);
    s_write_all (fd, "GET / HTTP/1.1\r\n\r\n", 18);
    ck_assert_int_eq (s_router_take (r, &m, 100), 0);
    ck_assert (s_closed_by_peer (fd));
    close (fd);
    ck_assert_int_eq (s_router_take (r, &m, 100), 0);
    ck_assert_uint_eq (zmtp_router_stats (r)->closed[ZMTP_CLOSE_VERSION], 1);
    /* and a proper client is still served */
    void *ctx = zmq_ctx_new ();
    void *d = s_zsock (ctx, ZMQ_DEALER, ep);
    zmq_send (d, "hi", 2, 0);
    ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
    ck_assert_uint_eq (m.msg.frames[1].size, 2);
    zmq_close (d);
    zmq_ctx_term (ctx);
    zmtp_router_destroy (&r, 0);
}
END_TEST

START_TEST (pings_are_answered_and_a_silent_peer_is_closed)
{
    const char *ep = s_endpoint ();
    zmtp_router_t *r = s_router (ep, 1 << 20, 100);
    /* a libzmq DEALER heartbeating every 50 ms with a 200 ms timeout stays up on our PONGs ... */
    void *ctx = zmq_ctx_new ();
    void *d = zmq_socket (ctx, ZMQ_DEALER);
    int ivl = 50, to = 200, linger = 0, rcv = WAIT_MS;
    zmq_setsockopt (d, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt (d, ZMQ_HEARTBEAT_TIMEOUT, &to, sizeof to);
    zmq_setsockopt (d, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (d, ZMQ_RCVTIMEO, &rcv, sizeof rcv);
    void *mon = zmq_socket (ctx, ZMQ_PAIR);
    ck_assert_int_eq (zmq_socket_monitor (d, "inproc://mon", ZMQ_EVENT_DISCONNECTED), 0);
    ck_assert_int_eq (zmq_connect (mon, "inproc://mon"), 0);
    ck_assert_int_eq (zmq_connect (d, ep), 0);
    zmq_send (d, "one", 3, 0);
    zmtp_router_msg_t m;
    ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
    /* ... through a second of heartbeats both ways (ours every 100 ms, timeout 300) */
    ck_assert_int_eq (s_router_take (r, &m, 1000), 0);
    ck_assert_uint_eq (zmtp_router_connections (r), 1);
    int events = 0;
    size_t len = sizeof events;
    zmq_getsockopt (mon, ZMQ_EVENTS, &events, &len);
    ck_assert_msg (!(events & ZMQ_POLLIN), "libzmq saw its connection drop");
    zmq_send (d, "two", 3, 0);
    ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
    ck_assert (memcmp (m.msg.frames[1].data, "two", 3) == 0);
    zmq_close (mon);
    zmq_close (d);
    zmq_ctx_term (ctx);
    /* a raw peer that handshakes (ZMTP 3.1) and then never answers a PING is closed */
    int fd = s_raw_connect (ep);
    s_raw_handshake (fd, r);
    ck_assert_int_eq (s_router_take (r, &m, 100), 0);
    uint64_t until = s_now () + 3000000000ull;
    while (zmtp_router_connections (r) > 0 && s_now () < until) {
        zmtp_router_tick (r, s_now ());
        zmtp_router_wait (r, 10);
        zmtp_router_recv (r, &m, s_now ());
    }
    ck_assert_uint_eq (zmtp_router_connections (r), 0);
    ck_assert_uint_ge (zmtp_router_stats (r)->closed[ZMTP_CLOSE_HEARTBEAT], 1);
    /* what the raw peer got: the router's PING commands (TTL 3 deciseconds), then the close */
    uint8_t b[64];
    s_read_exact (fd, b, 2);
    ck_assert_int_eq (b[0], ZMTP_FLAG_COMMAND);
    s_read_exact (fd, b + 2, b[1]);
    const uint8_t *data;
    size_t dlen;
    ck_assert (zmtp_command_is (b + 2, b[1], "PING", &data, &dlen));
    ck_assert_uint_eq (dlen, 2);
    ck_assert_uint_eq (zmtp_get_u16 (data), 3);
    ck_assert (s_closed_by_peer (fd));
    close (fd);
    zmtp_router_destroy (&r, 0);
}
END_TEST

/* Drives both ends in this thread until the dealer has a message (1) or WAIT_MS pass. */
static int s_pair_take (zmtp_dealer_t *d, zmtp_router_t *r, zmtp_msg_t *out)
{
    uint64_t until = s_now () + (uint64_t) WAIT_MS * 1000000ull;
    zmtp_router_msg_t m;
    while (s_now () < until) {
        if (zmtp_dealer_recv (d, out, 1) == 1)
            return 1;
        while (r && zmtp_router_recv (r, &m, s_now ()) == 1)
            zmtp_router_send (r, m.msg.frames, m.msg.nframes, s_now ());     /* an echo */
    }
    return 0;
}

START_TEST (our_dealer_and_our_router_over_tcp_and_ipc)
{
    char ipc[256], *dir = tu_tmpdir ();
    snprintf (ipc, sizeof ipc, "ipc://%s/zmtp.sock", dir);
    free (dir);
    const char *eps[2] = { s_endpoint (), ipc };
    for (int e = 0; e < 2; e++) {
        zmtp_router_t *r = s_router (eps[e], 1 << 20, 0);
        zmtp_dealer_opts_t o = { .mechanism = ZMTP_MECH_NULL };
        zmtp_dealer_t *d = zmtp_dealer_new (&o);
        char err[256];
        ck_assert_int_eq (zmtp_dealer_connect (d, eps[e], err, sizeof err), 0);
        /* sent before the connection is up: held, then delivered in order */
        for (int k = 0; k < 3; k++) {
            char body[16];
            snprintf (body, sizeof body, "m%d", k);
            zmtp_frame_t f[2] = { { (const uint8_t *) "head", 4 }, { (const uint8_t *) body, 2 } };
            ck_assert_int_eq (zmtp_dealer_send (d, f, 2), 0);
        }
        for (int k = 0; k < 3; k++) {
            zmtp_msg_t m;
            ck_assert_int_eq (s_pair_take (d, r, &m), 1);
            ck_assert_int_eq (m.nframes, 2);
            ck_assert (memcmp (m.frames[0].data, "head", 4) == 0);
            char want[16];
            snprintf (want, sizeof want, "m%d", k);
            ck_assert (memcmp (m.frames[1].data, want, 2) == 0);
        }
        ck_assert_int_eq (zmtp_dealer_ready_count (d), 1);
        zmtp_dealer_destroy (&d);
        zmtp_router_destroy (&r, 0);
    }
    ck_assert_int_eq (access (ipc + 6, F_OK), -1);     /* the socket file is removed with the router */
}
END_TEST

START_TEST (our_dealer_talks_to_a_libzmq_router_and_reconnects_when_it_returns)
{
    const char *ep = s_endpoint ();
    void *ctx = zmq_ctx_new ();
    void *rt = zmq_socket (ctx, ZMQ_ROUTER);
    int linger = 0, timeout = 20;
    zmq_setsockopt (rt, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (rt, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq (zmq_bind (rt, ep), 0);
    zmtp_dealer_opts_t o = { .mechanism = ZMTP_MECH_NULL, .reconnect_ms = 20 };
    zmtp_dealer_t *d = zmtp_dealer_new (&o);
    char err[256];
    ck_assert_int_eq (zmtp_dealer_connect (d, ep, err, sizeof err), 0);
    for (int round = 0; round < 2; round++) {
        zmtp_frame_t f = { (const uint8_t *) "ping", 4 };
        ck_assert_int_eq (zmtp_dealer_send (d, &f, 1), 0);
        zmq_msg_t id, body;
        zmq_msg_init (&id);
        zmq_msg_init (&body);
        uint64_t until = s_now () + (uint64_t) WAIT_MS * 1000000ull;
        zmtp_msg_t m;
        while (zmq_msg_recv (&id, rt, 0) < 0 && s_now () < until)
            zmtp_dealer_recv (d, &m, 5);      /* drives the dealer's handshake */
        ck_assert_int_eq (zmq_msg_more (&id), 1);
        ck_assert_int_eq (zmq_msg_recv (&body, rt, 0), 4);
        ck_assert (memcmp (zmq_msg_data (&body), "ping", 4) == 0);
        zmq_msg_send (&id, rt, ZMQ_SNDMORE);
        zmq_send (rt, "pong", 4, 0);
        zmq_msg_close (&body);
        ck_assert_int_eq (zmtp_dealer_recv (d, &m, WAIT_MS), 1);
        ck_assert_int_eq (m.nframes, 1);
        ck_assert (memcmp (m.frames[0].data, "pong", 4) == 0);
        if (round == 0) {
            /* the server goes away and comes back on the same port */
            zmq_close (rt);
            rt = zmq_socket (ctx, ZMQ_ROUTER);
            zmq_setsockopt (rt, ZMQ_LINGER, &linger, sizeof linger);
            zmq_setsockopt (rt, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
            until = s_now () + (uint64_t) WAIT_MS * 1000000ull;
            while (zmtp_dealer_ready_count (d) > 0 && s_now () < until)
                zmtp_dealer_recv (d, &m, 5);
            ck_assert_int_eq (zmtp_dealer_ready_count (d), 0);
            ck_assert_int_eq (zmq_bind (rt, ep), 0);
        }
    }
    zmtp_dealer_destroy (&d);
    zmq_close (rt);
    zmq_ctx_term (ctx);
}
END_TEST

START_TEST (a_client_that_does_not_read_is_not_read_from)
{
    const char *ep = s_endpoint ();
    zmtp_router_opts_t o = { .conn = { .mechanism = ZMTP_MECH_NULL, .max_message_bytes = 1 << 20,
                                       .out_hard = 4 << 20 },
                             .out_soft = 256 << 10 };
    zmtp_router_t *r = zmtp_router_new (&o);
    char err[256];
    ck_assert_int_ge (zmtp_router_bind (r, ep, 0, false, NULL, err, sizeof err), 0);
    int fd = s_raw_connect (ep);
    s_raw_handshake (fd, r);
    /* 2000 requests, each answered with 16 KiB (32 MB, more than the kernel's buffers hold) */
    enum { REQUESTS = 2000 };
    static uint8_t big[16384];
    uint8_t req[16] = { 0 };
    for (int sent = 0; sent < REQUESTS; sent++)
        s_raw_frame (fd, 0, req, sizeof req);
    int taken = 0;
    zmtp_router_msg_t m;
    while (s_router_take (r, &m, 300) == 1) {
        taken++;
        zmtp_frame_t out[2] = { m.msg.frames[0], { big, sizeof big } };
        ck_assert_int_eq (zmtp_router_send (r, out, 2, s_now ()), 0);   /* never past out_hard */
    }
    /* it stopped reading while the client did not read */
    ck_assert_msg (taken < REQUESTS, "taken %d", taken);
    ck_assert_uint_eq (zmtp_router_connections (r), 1);
    /* the client reads: every request is then taken and every reply arrives, none lost */
    int flags = fcntl (fd, F_GETFL);
    fcntl (fd, F_SETFL, flags | O_NONBLOCK);
    static uint8_t sink[1 << 16];
    size_t got = 0;
    const size_t want = (size_t) REQUESTS * (sizeof big + 9);
    uint64_t until = s_now () + 30000000000ull;
    while (got < want && s_now () < until) {
        ssize_t k = recv (fd, sink, sizeof sink, 0);
        if (k > 0)
            got += (size_t) k;
        while (zmtp_router_recv (r, &m, s_now ()) == 1) {
            taken++;
            zmtp_frame_t out[2] = { m.msg.frames[0], { big, sizeof big } };
            ck_assert_int_eq (zmtp_router_send (r, out, 2, s_now ()), 0);
        }
        zmtp_router_wait (r, 1);
    }
    ck_assert_int_eq (taken, REQUESTS);
    ck_assert_uint_eq (got, want);
    close (fd);
    zmtp_router_destroy (&r, 0);
}
END_TEST

START_TEST (idle_connections_make_room_under_the_open_file_limit)
{
    /* The router's process may open 128 files; 150 idle clients (in a child with its own limit)
     * connect and handshake, then a new client must still be served. */
    const char *ep = s_endpoint ();
    struct rlimit rl;
    getrlimit (RLIMIT_NOFILE, &rl);
    rl.rlim_cur = 128;
    ck_assert_int_eq (setrlimit (RLIMIT_NOFILE, &rl), 0);
    zmtp_router_t *r = s_router (ep, 1 << 20, 0);
    int ready[2];
    ck_assert_int_eq (pipe (ready), 0);
    pid_t child = fork ();
    if (child == 0) {
        rl.rlim_cur = rl.rlim_max > 1024 ? 1024 : rl.rlim_max;
        setrlimit (RLIMIT_NOFILE, &rl);
        for (int i = 0; i < 150; i++)
            s_raw_hello (s_raw_connect (ep));
        if (write (ready[1], "x", 1) != 1)
            _exit (1);
        pause ();
        _exit (0);
    }
    zmtp_router_msg_t m;
    struct pollfd p = { .fd = ready[0], .events = POLLIN };
    uint64_t until = s_now () + (uint64_t) WAIT_MS * 1000000ull;
    while (poll (&p, 1, 0) == 0 && s_now () < until)
        s_router_take (r, &m, 5);
    s_router_take (r, &m, 100);
    const zmtp_router_stats_t *st = zmtp_router_stats (r);
    ck_assert_uint_eq (st->accepted, 150);
    ck_assert_uint_gt (st->evicted, 0);
    ck_assert_uint_eq (st->refused_files, 0);
    ck_assert_uint_eq (st->accepted - st->evicted, zmtp_router_connections (r));
    /* a new libzmq client is served */
    void *ctx = zmq_ctx_new ();
    void *d = zmq_socket (ctx, ZMQ_DEALER);
    ck_assert_msg (d != NULL, "%s", zmq_strerror (zmq_errno ()));
    ck_assert_msg (zmq_connect (d, ep) == 0, "%s", zmq_strerror (zmq_errno ()));
    zmq_send (d, "new", 3, 0);
    ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
    ck_assert (memcmp (m.msg.frames[1].data, "new", 3) == 0);
    zmtp_frame_t out[2] = { m.msg.frames[0], { (const uint8_t *) "ok", 2 } };
    ck_assert_int_eq (zmtp_router_send (r, out, 2, s_now ()), 0);
    char got[4] = "";
    ck_assert_int_eq (zmq_recv (d, got, sizeof got, 0), 2);
    kill (child, SIGKILL);
    waitpid (child, NULL, 0);
    zmq_close (d);
    zmq_ctx_term (ctx);
    zmtp_router_destroy (&r, 0);
}
END_TEST

START_TEST (max_connections_refuses_one_past_the_limit)
{
    const char *ep = s_endpoint ();
    zmtp_router_opts_t o = { .conn = { .mechanism = ZMTP_MECH_NULL }, .max_connections = 2 };
    zmtp_router_t *r = zmtp_router_new (&o);
    char err[256];
    ck_assert_int_ge (zmtp_router_bind (r, ep, 0, false, NULL, err, sizeof err), 0);
    int fds[3];
    zmtp_router_msg_t m;
    for (int i = 0; i < 3; i++) {
        fds[i] = s_raw_connect (ep);
        s_router_take (r, &m, 50);
    }
    ck_assert_uint_eq (zmtp_router_connections (r), 2);
    ck_assert_uint_eq (zmtp_router_stats (r)->refused_limit, 1);
    ck_assert (s_closed_by_peer (fds[2]));
    for (int i = 0; i < 3; i++)
        close (fds[i]);
    zmtp_router_destroy (&r, 0);
}
END_TEST

/* A server that announces a frame of 2^63 bytes: the dealer (no bound configured, as a client's replies
 * have none) ends that connection as a protocol error instead of growing its buffer forever. */
START_TEST (a_dealer_refuses_a_frame_no_reply_can_be)
{
    int lfd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    ck_assert_int_eq (bind (lfd, (struct sockaddr *) &a, sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname (lfd, (struct sockaddr *) &a, &len);
    listen (lfd, 4);
    char ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", ntohs (a.sin_port));
    zmtp_dealer_opts_t o = { .mechanism = ZMTP_MECH_NULL, .reconnect_ms = 60000 };
    zmtp_dealer_t *d = zmtp_dealer_new (&o);
    char err[256];
    ck_assert_int_eq (zmtp_dealer_connect (d, ep, err, sizeof err), 0);
    zmtp_msg_t m;
    zmtp_dealer_recv (d, &m, 20);           /* its connect completes */
    int fd = accept (lfd, NULL, NULL);
    ck_assert_int_ge (fd, 0);
    uint8_t g[ZMTP_GREETING_BYTES], md[64], body[96], hdr[9];
    zmtp_greeting_write (g, ZMTP_MECH_NULL, true);
    s_write_all (fd, g, sizeof g);
    size_t used = 0;
    zmtp_property_write (md, sizeof md, &used, "Socket-Type", "ROUTER", 6);
    size_t blen = zmtp_command_write (body, sizeof body, "READY", md, used);
    size_t h = zmtp_header_write (hdr, ZMTP_FLAG_COMMAND, blen);
    s_write_all (fd, hdr, h);
    s_write_all (fd, body, blen);
    for (uint64_t until = s_now () + 5000000000ull; zmtp_dealer_ready_count (d) == 0 && s_now () < until;)
        zmtp_dealer_recv (d, &m, 5);
    ck_assert_int_eq (zmtp_dealer_ready_count (d), 1);
    h = zmtp_header_write (hdr, 0, 1ull << 63);
    s_write_all (fd, hdr, h);
    for (uint64_t until = s_now () + 5000000000ull; zmtp_dealer_ready_count (d) == 1 && s_now () < until;)
        ck_assert_int_eq (zmtp_dealer_recv (d, &m, 5), 0);
    ck_assert_int_eq (zmtp_dealer_ready_count (d), 0);
    ck_assert_ptr_nonnull (strstr (zmtp_dealer_error (d), "a frame of 9223372036854775808 bytes"));
    zmtp_dealer_destroy (&d);
    close (fd);
    close (lfd);
}
END_TEST

/* Corked, a burst of replies is held and leaves with one write at uncork, in order; uncorked, a reply
 * leaves at once. */
START_TEST (a_corked_burst_leaves_in_one_write_in_order)
{
    const char *ep = s_endpoint ();
    zmtp_router_t *r = s_router (ep, 1 << 20, 0);
    int fd = s_raw_connect (ep);
    s_raw_handshake (fd, r);
    s_raw_frame (fd, 0, "q", 1);
    zmtp_router_msg_t m;
    ck_assert_int_eq (s_router_take (r, &m, WAIT_MS), 1);
    uint8_t id[ZMTP_ROUTING_ID_BYTES];
    memcpy (id, m.msg.frames[0].data, sizeof id);
    zmtp_router_cork (r, true, s_now ());
    for (int k = 0; k < 3; k++) {
        char body[4] = { 'a', (char) ('0' + k) };
        zmtp_frame_t out[2] = { { id, sizeof id }, { (const uint8_t *) body, 2 } };
        ck_assert_int_eq (zmtp_router_send (r, out, 2, s_now ()), 0);
    }
    uint8_t got[16];
    ck_assert_int_eq ((int) recv (fd, got, sizeof got, MSG_DONTWAIT), -1);     /* nothing yet */
    zmtp_router_cork (r, false, s_now ());
    s_read_exact (fd, got, 12);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq (got[4 * k + 1], 2);
        ck_assert_int_eq (got[4 * k + 3], '0' + k);
    }
    zmtp_frame_t out[2] = { { id, sizeof id }, { (const uint8_t *) "z", 1 } };
    ck_assert_int_eq (zmtp_router_send (r, out, 2, s_now ()), 0);
    s_read_exact (fd, got, 3);
    ck_assert_int_eq (got[2], 'z');
    close (fd);
    zmtp_router_destroy (&r, 0);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("zmtp");
    TCase *tc = tcase_create ("null");
    tcase_set_timeout (tc, 60);
    tcase_add_test (tc, a_libzmq_dealer_is_served_frame_for_frame);
    tcase_add_test (tc, a_libzmq_req_gets_its_delimiter_back);
    tcase_add_test (tc, routing_ids_are_the_routers_so_no_peer_takes_anothers_replies);
    tcase_add_test (tc, a_message_past_the_bounds_is_refused_and_its_connection_closed_after_the_reply);
    tcase_add_test (tc, a_peer_gone_mid_message_leaves_nothing_and_others_are_served);
    tcase_add_test (tc, pings_are_answered_and_a_silent_peer_is_closed);
    tcase_add_test (tc, our_dealer_and_our_router_over_tcp_and_ipc);
    tcase_add_test (tc, our_dealer_talks_to_a_libzmq_router_and_reconnects_when_it_returns);
    tcase_add_test (tc, a_client_that_does_not_read_is_not_read_from);
    tcase_add_test (tc, idle_connections_make_room_under_the_open_file_limit);
    tcase_add_test (tc, max_connections_refuses_one_past_the_limit);
    tcase_add_test (tc, a_dealer_refuses_a_frame_no_reply_can_be);
    tcase_add_test (tc, a_corked_burst_leaves_in_one_write_in_order);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
