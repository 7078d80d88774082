/* The server against the ZeroMQ peers users have, on both transports (server.transport "zmtp" and
 * "libzmq"; each case runs once with each):
 *   - czmq (zsock DEALER, zmsg), libzmq (DEALER, REQ) and libsigclient (on each of its engines)
 *     clients: health, list_models and infer, outputs checked against the float64 reference;
 *   - an envelope of 1..15 frames before the payload (proxies' routing ids, a REQ delimiter) comes
 *     back frame for frame, whatever their sizes (0, 1, 255, 256 bytes: either side of ZMTP's long
 *     frame size);
 *   - heartbeats: a libzmq client that heartbeats every 100 ms with a 300 ms timeout stays connected
 *     through a second and a half of silence on a server that heartbeats every 100 ms; a peer that
 *     completes its handshake and then answers no PING is closed by the server;
 *   - a reconnect storm: 4 threads x 10 clients x 10 rounds of connect, one request, close: every
 *     request answered OK, and the server's open files back where they were.
 * Counts and values are asserted, never times: each wait polls its condition with a generous cap. */
#define _GNU_SOURCE
#include "rng.h"
#include "sigclient.h"
#include "signal.pb-c.h"
#include "testutil.h"
#include "tolerance.h"
#include "zmtp_wire.h"

#include <arpa/inet.h>
#include <check.h>
#include <czmq.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static tu_fixture_t s_fx;
static void *s_ctx;

static double s_seconds (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void *s_socket (int type, const char *endpoint)
{
    void *s = zmq_socket (s_ctx, type);
    int linger = 0, timeout = 20000;
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq (zmq_connect (s, endpoint), 0);
    return s;
}

static Sigserve__V1__Reply *s_unpack (const void *data, size_t len)
{
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, len, data);
    ck_assert_ptr_nonnull (r);
    return r;
}

/* tick_mlp's outputs for F (ROWS rows) checked against the float64 reference. */
static void s_check_tick (const float *f, uint32_t rows, const Sigserve__V1__InferReply *rep)
{
    ck_assert_msg (rep->status == SIGSERVE__V1__STATUS__STATUS_OK, "status %d: %s", rep->status, rep->error);
    ck_assert_uint_eq (rep->n_outputs, rows);
    double ref[16], bound[16];
    ck_assert_int_eq (tol_mlp (s_fx.tick, f, rows, ref, bound), 0);
    TOL_ASSERT (rep->outputs, ref, bound, rep->n_outputs, 1, "request %llu", (unsigned long long) rep->request_id);
}

START_TEST (czmq_and_libzmq_clients_are_served)
{
    uint64_t seed = 1000 + (uint64_t) _i;
    float f[3 * 512];
    for (size_t i = 0; i < 3 * 512; i++)
        f[i] = rng_uniform (&seed, -1, 1);
    uint8_t buf[16384];
    size_t len = tu_pack_infer (buf, sizeof buf, "tick_mlp", f, 3 * 512, 3, 21, 0);
    /* czmq: a zsock DEALER and a one-frame zmsg */
    zsock_t *z = zsock_new_dealer (s_fx.endpoint[0]);
    ck_assert_ptr_nonnull (z);
    zsock_set_rcvtimeo (z, 20000);
    zmsg_t *m = zmsg_new ();
    zmsg_addmem (m, buf, len);
    ck_assert_int_eq (zmsg_send (&m, z), 0);
    zmsg_t *reply = zmsg_recv (z);
    ck_assert_ptr_nonnull (reply);
    ck_assert_uint_eq (zmsg_size (reply), 1);
    zframe_t *body = zmsg_first (reply);
    Sigserve__V1__Reply *r = s_unpack (zframe_data (body), zframe_size (body));
    ck_assert_uint_eq (r->infer->request_id, 21);
    s_check_tick (f, 3, r->infer);
    sigserve__v1__reply__free_unpacked (r, NULL);
    zmsg_destroy (&reply);
    zsock_destroy (&z);
    /* libzmq: REQ (the delimiter comes back) and DEALER, health and list_models too */
    int types[2] = { ZMQ_REQ, ZMQ_DEALER };
    for (int k = 0; k < 2; k++) {
        void *s = s_socket (types[k], s_fx.endpoint[1]);
        ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
        int n = zmq_recv (s, buf + 8192, 8192, 0);
        ck_assert_int_gt (n, 0);
        r = s_unpack (buf + 8192, (size_t) n);
        s_check_tick (f, 3, r->infer);
        sigserve__v1__reply__free_unpacked (r, NULL);
        Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
        Sigserve__V1__HealthRequest h = SIGSERVE__V1__HEALTH_REQUEST__INIT;
        req.body_case = SIGSERVE__V1__REQUEST__BODY_HEALTH;
        req.health = &h;
        uint8_t hb[64];
        size_t hl = sigserve__v1__request__pack (&req, hb);
        ck_assert_int_eq (zmq_send (s, hb, hl, 0), (int) hl);
        n = zmq_recv (s, buf + 8192, 8192, 0);
        ck_assert_int_gt (n, 0);
        r = s_unpack (buf + 8192, (size_t) n);
        ck_assert_int_eq (r->body_case, SIGSERVE__V1__REPLY__BODY_HEALTH);
        ck_assert (r->health->live && r->health->ready);
        sigserve__v1__reply__free_unpacked (r, NULL);
        zmq_close (s);
    }
}
END_TEST

START_TEST (an_envelope_of_1_to_15_frames_comes_back_frame_for_frame)
{
    void *s = s_socket (ZMQ_DEALER, s_fx.endpoint[0]);
    uint64_t seed = 77;
    static const size_t sizes[] = { 0, 1, 255, 256, 17, 3 };
    float f[512];
    for (int i = 0; i < 512; i++)
        f[i] = rng_uniform (&seed, -1, 1);
    uint8_t req[4096], frame[256];
    size_t len = tu_pack_infer (req, sizeof req, "tick_mlp", f, 512, 1, 5, 0);
    /* The routing id the server puts in front counts: 1 + 14 envelope frames + the payload = 16. */
    for (int envelope = 0; envelope <= 14; envelope++) {
        size_t used = 0;
        for (int e = 0; e < envelope; e++) {
            size_t n = sizes[(e + envelope) % 6];
            if (used + n > 500)
                n = 1;      /* the server copies at most 512 bytes of envelope into a job */
            used += n;
            memset (frame, 'a' + e, n);
            ck_assert_int_eq (zmq_send (s, frame, n, ZMQ_SNDMORE), (int) n);
        }
        ck_assert_int_eq (zmq_send (s, req, len, 0), (int) len);
        used = 0;
        for (int e = 0; e < envelope; e++) {
            size_t n = sizes[(e + envelope) % 6];
            if (used + n > 500)
                n = 1;
            used += n;
            zmq_msg_t part;
            zmq_msg_init (&part);
            ck_assert_int_ge (zmq_msg_recv (&part, s, 0), 0);
            ck_assert_msg (zmq_msg_size (&part) == n, "envelope %d, frame %d: %zu bytes back, %zu sent", envelope, e,
                           zmq_msg_size (&part), n);
            for (size_t b = 0; b < n; b++)
                ck_assert_int_eq (((uint8_t *) zmq_msg_data (&part))[b], 'a' + e);
            ck_assert (zmq_msg_more (&part));
            zmq_msg_close (&part);
        }
        zmq_msg_t last;
        zmq_msg_init (&last);
        ck_assert_int_gt (zmq_msg_recv (&last, s, 0), 0);
        ck_assert (!zmq_msg_more (&last));
        Sigserve__V1__Reply *r = s_unpack (zmq_msg_data (&last), zmq_msg_size (&last));
        s_check_tick (f, 1, r->infer);
        sigserve__v1__reply__free_unpacked (r, NULL);
        zmq_msg_close (&last);
    }
    zmq_close (s);
}
END_TEST

/* A server of the fixture's models with heartbeat_ms 100; its endpoint in EP. */
static pid_t s_heartbeat_server (char *ep, size_t eplen)
{
    int p0 = tu_free_port (), p1 = tu_free_port ();
    char *path = tu_fixture_config (&s_fx, "heartbeat.json", p0, p1);
    char cmd[5000];
    snprintf (cmd, sizeof cmd, "sed -i 's/\"stats_interval_s\": 0/\"stats_interval_s\": 0, \"heartbeat_ms\": 100/' %s", path);
    ck_assert_int_eq (system (cmd), 0);
    snprintf (ep, eplen, "tcp://127.0.0.1:%d", p0);
    pid_t pid = tu_server_start (path, ep, 30000);
    ck_assert_int_gt (pid, 0);
    free (path);
    return pid;
}

static int s_raw_connect (const char *ep)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) atoi (strrchr (ep, ':') + 1)) };
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    ck_assert_int_eq (connect (fd, (struct sockaddr *) &a, sizeof a), 0);
    struct timeval tv = { .tv_sec = 10 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

START_TEST (heartbeats_keep_a_live_client_and_close_a_silent_one)
{
    char ep[64];
    pid_t pid = s_heartbeat_server (ep, sizeof ep);
    /* a libzmq client heartbeating on its side too, watched for a disconnection */
    void *d = zmq_socket (s_ctx, ZMQ_DEALER);
    int ivl = 100, timeout = 300, linger = 0, rcv = 20000;
    zmq_setsockopt (d, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt (d, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
    zmq_setsockopt (d, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (d, ZMQ_RCVTIMEO, &rcv, sizeof rcv);
    ck_assert_int_eq (zmq_socket_monitor (d, "inproc://interop-hb", ZMQ_EVENT_DISCONNECTED), 0);
    void *events = zmq_socket (s_ctx, ZMQ_PAIR);
    zmq_setsockopt (events, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq (zmq_connect (events, "inproc://interop-hb"), 0);
    ck_assert_int_eq (zmq_connect (d, ep), 0);
    float f[512] = { 0.3f };
    uint8_t buf[4096];
    for (int round = 0; round < 2; round++) {
        size_t len = tu_pack_infer (buf, sizeof buf, "tick_mlp", f, 512, 1, (uint64_t) round + 1, 0);
        ck_assert_int_eq (zmq_send (d, buf, len, 0), (int) len);
        int n = zmq_recv (d, buf, sizeof buf, 0);
        ck_assert_int_gt (n, 0);
        Sigserve__V1__Reply *r = s_unpack (buf, (size_t) n);
        ck_assert_int_eq (r->infer->status, SIGSERVE__V1__STATUS__STATUS_OK);
        ck_assert_uint_eq (r->infer->request_id, (uint64_t) round + 1);
        sigserve__v1__reply__free_unpacked (r, NULL);
        if (round == 0) {
            /* 1.5 s of silence: five of each side's timeouts; the heartbeats keep the connection */
            zmq_pollitem_t item = { .socket = events, .events = ZMQ_POLLIN };
            ck_assert_msg (zmq_poll (&item, 1, 1500) == 0, "the connection dropped while idle with heartbeats");
        }
    }
    zmq_socket_monitor (d, NULL, 0);
    zmq_close (events);
    zmq_close (d);
    /* a raw peer: ZMTP 3.1 greeting and READY as a DEALER, then nothing, whatever comes */
    int fd = s_raw_connect (ep);
    uint8_t g[ZMTP_GREETING_BYTES], md[64], body[96], hdr[9];
    zmtp_greeting_write (g, ZMTP_MECH_NULL, false);
    ck_assert_int_eq (send (fd, g, sizeof g, MSG_NOSIGNAL), (int) sizeof g);
    size_t used = 0;
    zmtp_property_write (md, sizeof md, &used, "Socket-Type", "DEALER", 6);
    size_t blen = zmtp_command_write (body, sizeof body, "READY", md, used);
    size_t h = zmtp_header_write (hdr, ZMTP_FLAG_COMMAND, blen);
    ck_assert_int_eq (send (fd, hdr, h, MSG_NOSIGNAL), (int) h);
    ck_assert_int_eq (send (fd, body, blen, MSG_NOSIGNAL), (int) blen);
    /* the server's greeting, READY, PINGs ..., then the end of the stream within a few timeouts */
    const double until = s_seconds () + 10;
    bool closed = false;
    while (!closed && s_seconds () < until) {
        uint8_t sink[4096];
        ssize_t k = recv (fd, sink, sizeof sink, 0);
        closed = k == 0 || (k < 0 && errno == ECONNRESET);
        ck_assert_msg (closed || k > 0, "recv: %s", strerror (errno));
    }
    ck_assert_msg (closed, "the server kept a peer that answered no PING for 10 s");
    close (fd);
    ck_assert_int_eq (tu_server_stop (pid), 0);
}
END_TEST

/* Files the process PID has open. */
static int s_open_files (pid_t pid)
{
    char path[64];
    snprintf (path, sizeof path, "/proc/%d/fd", (int) pid);
    DIR *d = opendir (path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir (d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir (d);
    return n;
}

enum { STORM_THREADS = 4, STORM_CLIENTS = 10, STORM_ROUNDS = 10 };

typedef struct {
    int index;
    int ok;
    char failure[256];
} storm_t;

static void *s_storm (void *arg)
{
    storm_t *t = arg;
    uint64_t seed = 500 + (uint64_t) t->index;
    float f[512];
    uint8_t buf[4096];
    for (int round = 0; round < STORM_ROUNDS; round++) {
        void *c[STORM_CLIENTS];
        for (int k = 0; k < STORM_CLIENTS; k++) {
            c[k] = zmq_socket (s_ctx, k % 2 ? ZMQ_REQ : ZMQ_DEALER);
            int linger = 0, timeout = 30000;
            zmq_setsockopt (c[k], ZMQ_LINGER, &linger, sizeof linger);
            zmq_setsockopt (c[k], ZMQ_RCVTIMEO, &timeout, sizeof timeout);
            zmq_connect (c[k], s_fx.endpoint[k % 2]);
            for (int i = 0; i < 512; i++)
                f[i] = rng_uniform (&seed, -1, 1);
            size_t len = tu_pack_infer (buf, sizeof buf, "tick_mlp", f, 512, 1, (uint64_t) k + 1, 0);
            zmq_send (c[k], buf, len, 0);
        }
        for (int k = 0; k < STORM_CLIENTS; k++) {
            int n = zmq_recv (c[k], buf, sizeof buf, 0);
            Sigserve__V1__Reply *r = n > 0 ? sigserve__v1__reply__unpack (NULL, (size_t) n, buf) : NULL;
            if (r && r->body_case == SIGSERVE__V1__REPLY__BODY_INFER && r->infer->status == SIGSERVE__V1__STATUS__STATUS_OK
                && r->infer->request_id == (uint64_t) k + 1)
                t->ok++;
            else if (!t->failure[0])
                snprintf (t->failure, sizeof t->failure, "thread %d round %d client %d: %s", t->index, round, k,
                          n <= 0 ? zmq_strerror (zmq_errno ()) : r ? "a wrong reply" : "undecodable");
            if (r)
                sigserve__v1__reply__free_unpacked (r, NULL);
            zmq_close (c[k]);
        }
    }
    return NULL;
}

START_TEST (a_reconnect_storm_is_served_and_leaves_no_connection_behind)
{
    const int before = s_open_files (s_fx.server);
    pthread_t th[STORM_THREADS];
    storm_t st[STORM_THREADS];
    for (int i = 0; i < STORM_THREADS; i++) {
        st[i] = (storm_t) { .index = i };
        ck_assert_int_eq (pthread_create (&th[i], NULL, s_storm, &st[i]), 0);
    }
    int ok = 0;
    for (int i = 0; i < STORM_THREADS; i++) {
        pthread_join (th[i], NULL);
        ck_assert_msg (!st[i].failure[0], "%s", st[i].failure);
        ok += st[i].ok;
    }
    ck_assert_int_eq (ok, STORM_THREADS * STORM_CLIENTS * STORM_ROUNDS);
    /* the server closes its side of each as the client goes: its open files come back (30 s at most) */
    int now = s_open_files (s_fx.server);
    for (const double until = s_seconds () + 30; now > before && s_seconds () < until; now = s_open_files (s_fx.server))
        usleep (20000);
    ck_assert_msg (now <= before, "the server had %d files open before the storm, %d after", before, now);
}
END_TEST

/* zmtp: a reload's max_message_bytes bounds the next message of every connection, open ones too (libzmq
 * sets its bound on a socket when it binds it: its endpoints keep the old one). */
/* A message of an envelope frame of 300 bytes and an "odd" request: 460-odd bytes in all. */
static int s_send_padded (void *s, uint64_t id)
{
    static uint8_t pad[300];
    memset (pad, 'p', sizeof pad);
    float g[33] = { 0.1f };
    uint8_t buf[1024];
    size_t len = tu_pack_infer (buf, sizeof buf, "odd", g, 33, 1, id, 0);
    ck_assert_int_eq (zmq_send (s, pad, sizeof pad, ZMQ_SNDMORE), (int) sizeof pad);
    ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
    /* the reply: the envelope frame back, then the reply */
    zmq_msg_t part;
    zmq_msg_init (&part);
    int status = -1;
    if (zmq_msg_recv (&part, s, 0) >= 0) {
        while (zmq_msg_more (&part))
            zmq_msg_recv (&part, s, 0);
        Sigserve__V1__Reply *r = s_unpack (zmq_msg_data (&part), zmq_msg_size (&part));
        status = r->infer->status;
        sigserve__v1__reply__free_unpacked (r, NULL);
    }
    zmq_msg_close (&part);
    return status;
}

/* zmtp: a reload's max_message_bytes bounds the next message of every connection, open ones too (libzmq
 * sets its bound on a socket when it binds it: its endpoints keep the old one). */
START_TEST (a_reload_moves_the_message_bound_of_open_connections)
{
    if (strcmp (s_fx.options.transport, "zmtp") != 0)
        return;
    char json[4096], path[2400], cmd[5000], ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", tu_free_port ());
    snprintf (path, sizeof path, "%s/bound.json", s_fx.dir);
    for (int k = 0; k < 2; k++) {
        snprintf (json, sizeof json,
                  "{ \"server\": { \"endpoints\": [\"%s\"], \"max_message_bytes\": %d, \"log_level\": \"warn\" },"
                  "  \"models\": [ { \"name\": \"odd\", \"backend\": \"cpu\", \"max_rows\": 1, \"weights\": \"%s/odd.safetensors\","
                  "    \"layers\": [ { \"weight\": \"a.weight\", \"activation\": \"tanh\" }, { \"weight\": \"b.weight\" } ] } ] }",
                  ep, k ? 65536 : 400, s_fx.dir);
        char *written = tu_write_file (s_fx.dir, k ? "bound-next.json" : "bound.json", json, -1);
        free (written);
    }
    pid_t pid = tu_server_start (path, ep, 30000);
    ck_assert_int_gt (pid, 0);
    void *s = s_socket (ZMQ_DEALER, ep);
    ck_assert_int_eq (s_send_padded (s, 1), SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST);   /* and closed */
    zmq_close (s);
    /* a connection opened before the reload, a small request answered on it first */
    s = s_socket (ZMQ_DEALER, ep);
    float g[33] = { 0.1f };
    uint8_t buf[1024];
    size_t len = tu_pack_infer (buf, sizeof buf, "odd", g, 33, 1, 2, 0);
    ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
    ck_assert_int_gt (zmq_recv (s, buf, sizeof buf, 0), 0);
    snprintf (cmd, sizeof cmd, "cp %s/bound-next.json %s", s_fx.dir, path);
    ck_assert_int_eq (system (cmd), 0);
    kill (pid, SIGHUP);
    /* once the reload is in (the small request's reply says nothing of it: poll until a padded one is
     * answered OK on the same connection, 30 s at most, the refused ones on fresh connections) */
    int status = -1;
    for (const double until = s_seconds () + 30; s_seconds () < until;) {
        len = tu_pack_infer (buf, sizeof buf, "odd", g, 33, 1, 3, 0);
        ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
        ck_assert_int_gt (zmq_recv (s, buf, sizeof buf, 0), 0);
        void *probe = s_socket (ZMQ_DEALER, ep);
        status = s_send_padded (probe, 4);
        zmq_close (probe);
        if (status == SIGSERVE__V1__STATUS__STATUS_OK)
            break;
    }
    ck_assert_int_eq (status, SIGSERVE__V1__STATUS__STATUS_OK);
    /* the connection opened before the reload takes the larger message too */
    ck_assert_int_eq (s_send_padded (s, 5), SIGSERVE__V1__STATUS__STATUS_OK);
    zmq_close (s);
    ck_assert_int_eq (tu_server_stop (pid), 0);
}
END_TEST

/* libsigclient on each of its engines against this case's server: infer (outputs within the float64
 * reference's bound, 1 and 3 rows), health and list_models. */
START_TEST (libsigclient_on_either_engine_is_served)
{
    const sigclient_engine_t engine = _i ? SIGCLIENT_ENGINE_LIBZMQ : SIGCLIENT_ENGINE_ZMTP;
    const char *eps[2] = { s_fx.endpoint[0], s_fx.endpoint[1] };
    sigclient_t *c = sigclient_new_engine (eps, 2, 20000, engine, NULL);
    ck_assert_ptr_nonnull (c);
    ck_assert_int_eq (sigclient_engine (c), engine);
    uint64_t seed = 900 + (uint64_t) _i;
    float f[3 * 512], out[3];
    for (size_t i = 0; i < 3 * 512; i++)
        f[i] = rng_uniform (&seed, -1, 1);
    for (uint32_t rows = 1; rows <= 3; rows += 2) {
        size_t n = 0;
        sigclient_result_t res;
        ck_assert_msg (sigclient_infer (c, "tick_mlp", f, rows * 512, rows, out, 3, &n, &res) == 0, "%s",
                       sigclient_error (c));
        ck_assert_uint_eq (n, rows);
        double ref[3], bound[3];
        ck_assert_int_eq (tol_mlp (s_fx.tick, f, rows, ref, bound), 0);
        TOL_ASSERT (out, ref, bound, n, 1, "%s, %u row(s)", sigclient_engine_name (engine), rows);
    }
    sigclient_health_t h;
    ck_assert_int_eq (sigclient_health (c, &h), 0);
    ck_assert (h.live && h.ready);
    sigclient_model_info_t models[4];
    size_t count = 0;
    ck_assert_int_eq (sigclient_list_models (c, models, 4, &count), 0);
    ck_assert_uint_eq (count, 2);
    sigclient_destroy (&c);
}
END_TEST

static void s_ctx_new (void) { s_ctx = zmq_ctx_new (); }
static void s_ctx_term (void) { zmq_ctx_term (s_ctx); s_ctx = NULL; }

static void s_setup (const char *transport)
{
    const tu_fixture_options_t options = { .tick_backend = "cpu", .odd_kernel = "loop", .transport = transport };
    tu_fixture_setup (&s_fx, &options);
}

static void s_setup_zmtp (void) { s_setup ("zmtp"); }
static void s_setup_libzmq (void) { s_setup ("libzmq"); }
static void s_teardown (void) { tu_fixture_teardown (&s_fx); }

int main (void)
{
    Suite *s = suite_create ("interop");
    for (int transport = 0; transport < 2; transport++) {
        TCase *tc = tcase_create (transport ? "libzmq" : "zmtp");
        tcase_add_unchecked_fixture (tc, transport ? s_setup_libzmq : s_setup_zmtp, s_teardown);
        tcase_add_checked_fixture (tc, s_ctx_new, s_ctx_term);
        tcase_set_timeout (tc, 120);
        tcase_add_loop_test (tc, czmq_and_libzmq_clients_are_served, 0, 2);
        tcase_add_loop_test (tc, libsigclient_on_either_engine_is_served, 0, 2);
        tcase_add_test (tc, an_envelope_of_1_to_15_frames_comes_back_frame_for_frame);
        tcase_add_test (tc, heartbeats_keep_a_live_client_and_close_a_silent_one);
        tcase_add_test (tc, a_reconnect_storm_is_served_and_leaves_no_connection_behind);
        tcase_add_test (tc, a_reload_moves_the_message_bound_of_open_connections);
        suite_add_tcase (s, tc);
    }
    return tu_run_suite (s);
}
