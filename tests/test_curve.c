/* server.curve over tcp loopback with the real binary, on both transports (zmtp: our CURVE,
 * libzmq: libzmq's with czmq's zauth), against libzmq clients: certificates from sigserve --keygen, an
 * allowlisted client served, an unknown key and a plaintext client get nothing while the server
 * keeps serving, a client added to the folder is served after SIGHUP, refused handshakes counted by
 * reason, every client of ours without CURVE told so at once and counted once, and every way of
 * being configured but unusable stops the start with exit code 2 (never a plaintext fallback). */
#define _GNU_SOURCE
#include "sigclient.h"
#include "signal.pb-c.h"
#include "testutil.h"

#include <check.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static char s_dir[2048], s_config[2300], s_endpoint[64];
static const char *s_transport;     /* this case's server.transport */
static void *s_ctx;

static int s_run (const char *cmd, char *out, size_t cap)
{
    FILE *p = popen (cmd, "r");
    size_t n = fread (out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose (p);
    return WIFEXITED (st) ? WEXITSTATUS (st) : -1;
}

static void s_keygen (const char *name)
{
    char cmd[4600], out[1024];
    snprintf (cmd, sizeof cmd, "%s/sigserve --keygen %s/%s 2>&1", tu_build_dir (), s_dir, name);
    ck_assert_msg (s_run (cmd, out, sizeof out) == 0, "%s", out);
}

/* The 40-character Z85 key KIND ("public-key", "secret-key") of czmq certificate PATH. */
static void s_key (const char *path, const char *kind, char *key)
{
    FILE *f = fopen (path, "r");
    ck_assert_ptr_nonnull (f);
    char line[256];
    key[0] = 0;
    while (fgets (line, sizeof line, f)) {
        char *k = strstr (line, kind);
        char *q = k ? strchr (k, '"') : NULL;
        if (q && strlen (q) > 41) {
            memcpy (key, q + 1, 40);
            key[40] = 0;
        }
    }
    fclose (f);
    ck_assert_uint_eq (strlen (key), 40);
}

/* A DEALER with CERT's keys (NULL: no CURVE), not yet connected. */
static void *s_client_socket (const char *cert)
{
    void *s = zmq_socket (s_ctx, ZMQ_DEALER);
    int linger = 0, timeout = 1500;
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    if (cert) {
        char server_pub[41], pub[41], sec[41], path[2400];
        snprintf (path, sizeof path, "%s/server", s_dir);
        s_key (path, "public-key", server_pub);
        snprintf (path, sizeof path, "%s/%s_secret", s_dir, cert);
        s_key (path, "public-key", pub);
        s_key (path, "secret-key", sec);
        zmq_setsockopt (s, ZMQ_CURVE_SERVERKEY, server_pub, 40);
        zmq_setsockopt (s, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt (s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    return s;
}

static void *s_client (const char *cert)
{
    void *s = s_client_socket (cert);
    ck_assert_int_eq (zmq_connect (s, s_endpoint), 0);
    return s;
}

/* 1 when a health request on S is answered ready within the socket's timeout. */
static int s_health (void *s)
{
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__HealthRequest h = SIGSERVE__V1__HEALTH_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_HEALTH;
    req.health = &h;
    uint8_t buf[512];
    size_t len = sigserve__v1__request__pack (&req, buf);
    zmq_send (s, buf, len, ZMQ_DONTWAIT);
    int n = zmq_recv (s, buf, sizeof buf, 0);
    if (n <= 0)
        return 0;
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, (size_t) n, buf);
    int ok = r && r->body_case == SIGSERVE__V1__REPLY__BODY_HEALTH && r->health->ready;
    if (r)
        sigserve__v1__reply__free_unpacked (r, NULL);
    return ok;
}

static char *s_write_config (const char *name, const char *curve)
{
    char json[8192];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"log_level\": \"info\", \"stats_interval_s\": 0,"
              "              \"transport\": \"%s\", \"curve\": %s },"
              "  \"models\": [ { \"name\": \"tick_mlp\", \"backend\": \"cpu\", \"weights\": \"%s/models/tick_mlp.safetensors\","
              "    \"layers\": [ { \"weight\": \"0.weight\" }, { \"weight\": \"2.weight\" }, { \"weight\": \"4.weight\" } ] } ] }",
              s_endpoint, s_transport, curve, tu_build_abs ());
    return tu_write_file (s_dir, name, json, -1);
}

static void s_setup (const char *transport)
{
    s_transport = transport;
    char *dir = tu_tmpdir ();
    snprintf (s_dir, sizeof s_dir, "%s", dir);
    free (dir);
    snprintf (s_endpoint, sizeof s_endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    s_keygen ("server");
    s_keygen ("alice");
    s_keygen ("mallory");
    s_keygen ("bob");
    char cmd[8192], out[256];
    snprintf (cmd, sizeof cmd, "mkdir %s/allowed && cp %s/alice %s/allowed/alice.cert", s_dir, s_dir, s_dir);
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 0);
    char curve[4800];
    snprintf (curve, sizeof curve, "{ \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"allowed\" }");
    char *path = s_write_config ("curve.json", curve);
    snprintf (s_config, sizeof s_config, "%s", path);
    free (path);
}

static void s_setup_zmtp (void) { s_setup ("zmtp"); }
static void s_setup_libzmq (void) { s_setup ("libzmq"); }
static void s_teardown (void) { tu_remove_tree (s_dir); }

static void s_ctx_new (void) { s_ctx = zmq_ctx_new (); }
static void s_ctx_term (void) { zmq_ctx_term (s_ctx); s_ctx = NULL; }

/* Starts the server on s_config; waits (60 s at most) until alice (allowlisted) is answered ready: a
 * server still loading its models answers "not ready" at once, so each such answer is followed by a
 * short pause before the next request (under a loaded make test, 40 immediate tries were not enough). */
static pid_t s_start (void)
{
    pid_t pid = fork ();
    if (pid == 0) {
        char bin[4096], log[2400];
        snprintf (bin, sizeof bin, "%s/sigserve", tu_build_dir ());
        snprintf (log, sizeof log, "%s/server.log", s_dir);
        FILE *f = freopen (log, "a", stderr);
        (void) f;
        execl (bin, bin, "--config", s_config, (char *) NULL);
        _exit (127);
    }
    void *alice = s_client ("alice");
    int ready = 0, exited = 0;
    struct timespec t0, now;
    clock_gettime (CLOCK_MONOTONIC, &t0);
    for (;;) {
        ready = s_health (alice);
        exited = !ready && waitpid (pid, NULL, WNOHANG) == pid;
        clock_gettime (CLOCK_MONOTONIC, &now);
        if (ready || exited || now.tv_sec - t0.tv_sec >= 60)
            break;
        usleep (50 * 1000);
    }
    zmq_close (alice);
    ck_assert_msg (!exited, "the server exited before it was ready (%s/server.log)", s_dir);
    ck_assert_msg (ready, "the allowlisted client was not answered ready within 60 s");
    return pid;
}

/* How the handshake of a new client with CERT (NULL: no CURVE) went, from its own monitor (30 s at
 * most): ZMQ_EVENT_HANDSHAKE_SUCCEEDED, or the failure. A refused client is known to be refused by
 * this, not by a reply that did not come within some time. */
static int s_handshake (const char *cert)
{
    static int count;
    char name[64];
    snprintf (name, sizeof name, "inproc://curve-events-%d", count++);
    void *c = s_client_socket (cert), *events = zmq_socket (s_ctx, ZMQ_PAIR);
    int linger = 0, timeout = 30000;
    zmq_setsockopt (events, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (events, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq (zmq_socket_monitor (c, name, ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                                                   | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                                   | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL), 0);
    ck_assert_int_eq (zmq_connect (events, name), 0);   /* before the client connects: no event is missed */
    ck_assert_int_eq (zmq_connect (c, s_endpoint), 0);
    zmq_msg_t msg;
    zmq_msg_init (&msg);
    ck_assert_msg (zmq_msg_recv (&msg, events, 0) >= 2, "%s: no handshake in 30 s", cert ? cert : "plain");
    uint16_t event;
    memcpy (&event, zmq_msg_data (&msg), 2);
    while (zmq_msg_more (&msg))
        zmq_msg_recv (&msg, events, 0);
    zmq_msg_close (&msg);
    zmq_socket_monitor (c, NULL, 0);
    zmq_close (events);
    zmq_close (c);
    return event;
}

START_TEST (allowlisted_served_others_get_nothing)
{
    pid_t pid = s_start ();
    ck_assert_int_eq (s_handshake ("mallory"), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);     /* a key not in the folder */
    /* No CURVE at all: the mechanisms do not match and the handshake fails. zmtp: the client always
     * reads the server's mechanism (its greeting comes in two parts) and says it is a mismatch; a
     * libzmq server may close first (no detail), whichever comes first. */
    const int plain = s_handshake (NULL);
    if (strcmp (s_transport, "zmtp") == 0)
        ck_assert_int_eq (plain, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL);
    ck_assert_msg (plain == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || plain == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL,
                   "a plaintext client's handshake ended with event 0x%x", plain);
    ck_assert_int_eq (s_handshake ("alice"), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    void *alice = s_client ("alice");
    ck_assert_int_eq (s_health (alice), 1);         /* and the server still serves */
    /* Infer works over CURVE, and the reply is the model's. */
    uint8_t buf[4096];
    float f[512] = { 0.25f };
    size_t len = tu_pack_infer (buf, sizeof buf, "tick_mlp", f, 512, 1, 11, 0);
    zmq_send (alice, buf, len, 0);
    int n = zmq_recv (alice, buf, sizeof buf, 0);
    ck_assert_int_gt (n, 0);
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, (size_t) n, buf);
    ck_assert_int_eq (r->infer->status, SIGSERVE__V1__STATUS__STATUS_OK);
    ck_assert_uint_eq (r->infer->request_id, 11);
    sigserve__v1__reply__free_unpacked (r, NULL);
    /* bob, added to the folder, is served after a reload */
    ck_assert_int_eq (s_handshake ("bob"), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    char cmd[8192], out[256];
    snprintf (cmd, sizeof cmd, "cp %s/bob %s/allowed/bob.cert", s_dir, s_dir);
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 0);
    kill (pid, SIGHUP);
    void *bob = s_client ("bob");
    int served = 0;
    for (int i = 0; i < 10 && !served; i++)
        served = s_health (bob);
    ck_assert (served);
    ck_assert_int_eq (s_handshake ("mallory"), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    zmq_close (alice);
    zmq_close (bob);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    /* libzmq: the start proved that an unknown key is refused (libzmq serves any key when no ZAP
     * handler answers), and said so. zmtp checks every key itself in the handshake (shown above). */
    char log[2400], text[65536] = "";
    snprintf (log, sizeof log, "%s/server.log", s_dir);
    FILE *fl = fopen (log, "r");
    size_t got = fread (text, 1, sizeof text - 1, fl);
    text[got] = 0;
    fclose (fl);
    ck_assert_ptr_nonnull (strstr (text, "CURVE on: server key "));
    if (strcmp (s_transport, "libzmq") == 0)
        ck_assert_ptr_nonnull (strstr (text, "a client with an unknown key was refused, as it must be"));
}
END_TEST

/* sigserve_auth_failures_total{reason=...} of the server's /metrics on PORT, or -1 when it cannot
 * be read. */
static long s_auth_failures (int port, const char *reason)
{
    char cmd[1024], out[65536];
    const char *py = getenv ("PYTHON") ? getenv ("PYTHON") : "/usr/bin/python3";
    snprintf (cmd, sizeof cmd, "%s -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:%d/metrics\", "
              "timeout=10).read().decode())' 2>&1", py, port);
    if (s_run (cmd, out, sizeof out) != 0)
        return -1;
    char want[128];
    snprintf (want, sizeof want, "sigserve_auth_failures_total{reason=\"%s\"} ", reason);
    const char *at = strstr (out, want);
    return at ? strtol (at + strlen (want), NULL, 10) : -1;
}

/* A plaintext peer that says so and then waits: a raw TCP connection sending a whole ZMTP 3.0
 * greeting of mechanism NULL. (A libzmq plaintext client may close as soon as it sees the server's
 * CURVE greeting, racing the server's own check of its greeting.) The descriptor; close it later. */
static int s_plaintext_greeting (void)
{
    int port = atoi (strrchr (s_endpoint, ':') + 1);
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    ck_assert_int_eq (connect (fd, (struct sockaddr *) &a, sizeof a), 0);
    uint8_t g[64] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0, 'N', 'U', 'L', 'L' };
    ck_assert_int_eq (send (fd, g, sizeof g, MSG_NOSIGNAL), (int) sizeof g);
    return fd;
}

/* Refused handshakes are counted by reason in /metrics and said in the log (at most once a
 * second): a key not in the folder (denied), a client without CURVE (plaintext_client), a client
 * that holds another server key (wrong_server_key: its hello cannot be decrypted). One connection
 * attempt each, so one each. (The protocol bucket takes the rest, such as a peer that hung up in the
 * middle of its handshake, which libzmq reports without detail: not asserted.) */
START_TEST (refused_handshakes_are_counted_and_logged)
{
    const int port = tu_free_port ();
    char curve[4800], saved[2300];
    snprintf (curve, sizeof curve, "{ \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"allowed\" }, "
              "\"http\": \"127.0.0.1:%d\"", port);
    char *path = s_write_config ("curve-metrics.json", curve);
    snprintf (saved, sizeof saved, "%s", s_config);
    snprintf (s_config, sizeof s_config, "%s", path);
    free (path);
    pid_t pid = s_start ();
    snprintf (s_config, sizeof s_config, "%s", saved);
    void *mallory = s_client_socket ("mallory");
    int never = -1;
    zmq_setsockopt (mallory, ZMQ_RECONNECT_IVL, &never, sizeof never);
    ck_assert_int_eq (zmq_connect (mallory, s_endpoint), 0);
    const int plain = s_plaintext_greeting ();
    /* a client that holds bob's public key where the server's belongs */
    void *wrong = s_client_socket ("alice");
    char other[41], p[2400];
    snprintf (p, sizeof p, "%s/bob", s_dir);
    s_key (p, "public-key", other);
    zmq_setsockopt (wrong, ZMQ_RECONNECT_IVL, &never, sizeof never);
    zmq_setsockopt (wrong, ZMQ_CURVE_SERVERKEY, other, 40);
    ck_assert_int_eq (zmq_connect (wrong, s_endpoint), 0);
    ck_assert_int_eq (s_health (mallory), 0);
    ck_assert_int_eq (s_health (wrong), 0);
    /* the counts reach the metrics as the front reads the socket events: wait for them (30 s) */
    long denied = 0, plaintext = 0, wrong_key = 0;
    for (int i = 0; i < 300 && (denied < 1 || plaintext < 1 || wrong_key < 1); i++) {
        denied = s_auth_failures (port, "denied");
        plaintext = s_auth_failures (port, "plaintext_client");
        wrong_key = s_auth_failures (port, "wrong_server_key");
        if (denied < 1 || plaintext < 1 || wrong_key < 1)
            usleep (100000);
    }
    ck_assert_int_eq (denied, 1);
    ck_assert_int_eq (plaintext, 1);
    ck_assert_int_eq (wrong_key, 1);
    zmq_close (mallory);
    close (plain);
    zmq_close (wrong);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    char log[2400], text[65536] = "";
    snprintf (log, sizeof log, "%s/server.log", s_dir);
    FILE *fl = fopen (log, "r");
    size_t got = fread (text, 1, sizeof text - 1, fl);
    text[got] = 0;
    fclose (fl);
    ck_assert_msg (strstr (text, "CURVE handshakes refused since the last warning: ") != NULL, "%s", text);
}
END_TEST

/* Waits (30 s at most) until the server on PORT has counted N plaintext clients, and requires N
 * exactly: the clients counted have exited or been destroyed, so none is still on its way. */
static long s_plaintext_after (int port, long n)
{
    long got = -1;
    for (int i = 0; i < 300 && (got = s_auth_failures (port, "plaintext_client")) < n; i++)
        usleep (100000);
    return got;
}

static void s_expect_plaintext (int port, long n)
{
    ck_assert_int_eq (s_plaintext_after (port, n), n);
}

/* sigload (FLAG: its engine) without CURVE at s_endpoint: exit 1, and "sigload: " SAYS. */
static void s_sigload_refused (const char *flag, const char *says)
{
    static char cmd[8192];
    char text[4096], want[1300];
    snprintf (cmd, sizeof cmd, "%s/sigload %s --endpoint %s --model tick_mlp --timeout 60000 --warmup 0 "
              "--requests 10 --quiet 2>&1", tu_build_dir (), flag, s_endpoint);
    ck_assert_int_eq (s_run (cmd, text, sizeof text), 1);
    snprintf (want, sizeof want, "sigload: %s", says);
    ck_assert_str_eq (text, want);
}

/* A client without CURVE (issue 39): each of ours is told at once what the server asks for and what
 * to pass, in its own words, and one such client is one refused handshake (plaintext_client), not
 * one a reconnection. Every wait is bounded by 60 s: were a client to time out instead, its text
 * would say so. zmtp transport: every count exact. libzmq transport: libzmq's greeting (10 bytes,
 * then the rest) races a libzmq client's, which may close before it writes its mechanism (libzmq
 * then counts it as protocol, or not at all): the counts there are those of our engine's clients.
 * sigload opens its load connections before it probes the server, and libzmq's I/O thread makes
 * their handshakes while the probe fails: it adds one more when that one ends before sigload does. */
START_TEST (a_client_without_curve_is_told_at_once_and_counted_once)
{
    const bool zmtp = strcmp (s_transport, "zmtp") == 0;
    const int port = tu_free_port ();
    char curve[4800], saved[2300];
    snprintf (curve, sizeof curve, "{ \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"allowed\" }, "
              "\"http\": \"127.0.0.1:%d\"", port);
    char *path = s_write_config ("curve-plain.json", curve);
    snprintf (saved, sizeof saved, "%s", s_config);
    snprintf (s_config, sizeof s_config, "%s", path);
    free (path);
    pid_t pid = s_start ();
    snprintf (s_config, sizeof s_config, "%s", saved);
    const char *what = "the server asks for CURVE, and this client has no CURVE keys";
    const char *eps[] = { s_endpoint };
    static char cmd[16384];
    char expect[1200], text[8192], says[1024];
    long counted = 0;
    /* what the command lines say after their name */
    snprintf (says, sizeof says, "%s: %s (pass --curve-server FILE, the server's public certificate, and "
              "--curve-client FILE_secret, this client's)\n", s_endpoint, what);
    for (int e = 0; e < 2; e++) {
        const sigclient_engine_t engine = e ? SIGCLIENT_ENGINE_LIBZMQ : SIGCLIENT_ENGINE_ZMTP;
        const char *flag = e ? "--engine libzmq" : "";
        const bool exact = zmtp || engine == SIGCLIENT_ENGINE_ZMTP;
        /* libsigclient: the call fails at once, and so does the next, without a connection. libzmq
         * connects at once: its handshake may have failed before the first call, leaving the socket
         * no pipe to send on (on the zmtp transport, where it is counted, the test waits for that). */
        sigclient_t *c = sigclient_new_engine (eps, 1, 60000, engine, NULL);
        ck_assert_ptr_nonnull (c);
        if (engine == SIGCLIENT_ENGINE_LIBZMQ && zmtp)
            s_expect_plaintext (port, counted + 1);
        snprintf (expect, sizeof expect, "%s: %s (sigclient_new_curve: the server's public key and this client's key "
                  "pair)", s_endpoint, what);
        for (int call = 0; call < 2; call++) {
            sigclient_health_t h;
            ck_assert_int_eq (sigclient_health (c, &h), -1);
            ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_SECURITY);
            ck_assert_str_eq (sigclient_error (c), expect);
        }
        ck_assert_str_eq (sigclient_status_name (SIGCLIENT_ERR_SECURITY), "ERR_SECURITY");
        sigclient_destroy (&c);
        if (exact)
            s_expect_plaintext (port, ++counted);
        /* sigclient and sigload: their own options */
        snprintf (cmd, sizeof cmd, "%s/sigclient %s --endpoint %s --timeout 60000 health 2>&1", tu_build_dir (), flag,
                  s_endpoint);
        ck_assert_int_eq (s_run (cmd, text, sizeof text), 3);
        snprintf (expect, sizeof expect, "sigclient: %s", says);
        ck_assert_str_eq (text, expect);
        if (exact)
            s_expect_plaintext (port, ++counted);
        if (engine == SIGCLIENT_ENGINE_ZMTP) {
            s_sigload_refused (flag, says);
            s_expect_plaintext (port, ++counted);
        }
    }
    /* the Python client (pyzmq, libzmq's engine) and its command line */
    const char *py = getenv ("PYTHON") ? getenv ("PYTHON") : "/usr/bin/python3";
    snprintf (cmd, sizeof cmd,
              "PYTHONPATH=clients/python %s -c '\n"
              "import sigclient\n"
              "c = sigclient.SigClient(\"%s\", timeout_ms=60000)\n"
              "for call in range(2):\n"
              "    try:\n"
              "        c.health(); print(\"served\")\n"
              "    except sigclient.SecurityError as e:\n"
              "        print(type(e).__name__, isinstance(e, sigclient.TransportError), e.failure, \"|\", e)\n"
              "' 2>&1", py, s_endpoint);
    ck_assert_msg (s_run (cmd, text, sizeof text) == 0, "%s", text);
    char line[512];
    snprintf (line, sizeof line, "SecurityError True %s: %s | %s: %s (SigClient(..., curve_server=FILE, "
              "curve_client=FILE_secret): the server's public certificate and this client's secret one)\n",
              s_endpoint, what, s_endpoint, what);
    snprintf (expect, sizeof expect, "%s%s", line, line);
    ck_assert_str_eq (text, expect);
    if (zmtp)
        s_expect_plaintext (port, ++counted);
    snprintf (cmd, sizeof cmd, "PYTHONPATH=clients/python %s -m sigclient --endpoint %s --timeout 60000 health 2>&1",
              py, s_endpoint);
    ck_assert_int_eq (s_run (cmd, text, sizeof text), 3);
    snprintf (expect, sizeof expect, "sigclient-py: %s", says);
    ck_assert_str_eq (text, expect);
    if (zmtp)
        s_expect_plaintext (port, ++counted);
    s_sigload_refused ("--engine libzmq", says);
    if (zmtp) {
        long got = s_plaintext_after (port, counted + 1);
        ck_assert_msg (got == counted + 1 || got == counted + 2, "%ld after sigload's probe and connection", got);
    }
    ck_assert_int_eq (tu_server_stop (pid), 0);
}
END_TEST

/* A configuration that asks for CURVE and cannot have it: exit 2 naming the key, no fallback (each
 * message in full: tests/test_auth.c). */
START_TEST (configured_but_unusable_refuses_to_start)
{
    const struct { const char *curve; const char *expect; } cases[] = {
        { "{ \"secret_key_file\": \"nope_secret\", \"allowed_clients\": \"allowed\" }",
          "server.curve.secret_key_file: " },
        { "{ \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"no-such-folder\" }",
          "server.curve.allowed_clients: " },
        { "{ \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"server\" }",
          "not a folder" },
        { "{ \"secret_key_file\": \"public-only\", \"allowed_clients\": \"allowed\" }",
          "holds no secret key" },
        { "{ \"secret_key_file\": \"garbage\", \"allowed_clients\": \"allowed\" }",
          "cannot be read as a czmq certificate" },
    };
    char cmd[8192], out[4096];
    snprintf (cmd, sizeof cmd, "cp %s/alice %s/public-only && printf 'not a certificate' > %s/garbage", s_dir, s_dir, s_dir);
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = s_write_config ("bad.json", cases[i].curve);
        snprintf (cmd, sizeof cmd, "%s/sigserve --config %s 2>&1", tu_build_dir (), path);
        int rc = s_run (cmd, out, sizeof out);
        ck_assert_msg (rc == 2, "case %zu: exit %d: %s", i, rc, out);
        ck_assert_msg (strstr (out, cases[i].expect), "case %zu: %s", i, out);
        free (path);
    }
    /* inproc has no security handshake: refused with CURVE (zmtp: inproc is libzmq's alone) */
    char json[8192];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"inproc://x\"], \"transport\": \"%s\", "
              "  \"curve\": { \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"allowed\" } },"
              "  \"models\": [ { \"name\": \"m\", \"backend\": \"cpu\", \"weights\": \"%s/models/tick_mlp.safetensors\","
              "    \"layers\": [ { \"weight\": \"0.weight\" }, { \"weight\": \"2.weight\" }, { \"weight\": \"4.weight\" } ] } ] }",
              s_transport, tu_build_abs ());
    char *path = tu_write_file (s_dir, "inproc.json", json, -1);
    snprintf (cmd, sizeof cmd, "%s/sigserve --config %s 2>&1", tu_build_dir (), path);
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 2);
    ck_assert_msg (strstr (out, strcmp (s_transport, "zmtp") == 0 ? "inproc:// is libzmq's in-process transport"
                                                                   : "inproc endpoints make no security handshake"),
                   "%s", out);
    free (path);
}
END_TEST

/* What auth_keygen writes (modes, keys, metadata) is tests/test_auth.c's: here, the command line. */
START_TEST (keygen_on_the_command_line_writes_the_pair_or_exits_2)
{
    char path[2400];
    struct stat st;
    snprintf (path, sizeof path, "%s/server_secret", s_dir);      /* written by the setup's --keygen */
    ck_assert_int_eq (stat (path, &st), 0);
    snprintf (path, sizeof path, "%s/server", s_dir);
    ck_assert_int_eq (stat (path, &st), 0);
    char cmd[4600], out[1024];
    snprintf (cmd, sizeof cmd, "%s/sigserve --keygen %s/carol 2>&1", tu_build_dir (), s_dir);
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 0);
    char pub[41], want[4600];
    snprintf (path, sizeof path, "%s/carol", s_dir);
    s_key (path, "public-key", pub);
    snprintf (want, sizeof want, "wrote %s/carol (public key %s) and %s/carol_secret (keep it secret)\n", s_dir, pub,
              s_dir);
    ck_assert_str_eq (out, want);
    snprintf (cmd, sizeof cmd, "%s/sigserve --keygen /no/such/folder/x 2>&1", tu_build_dir ());
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 2);
    ck_assert_ptr_nonnull (strstr (out, "sigserve: --keygen: cannot write /no/such/folder/x"));
}
END_TEST


/* The clients take the server's public certificate and the client's secret one: libsigclient,
 * sigclient, sigload and the Python client are served with alice's key and get nothing with
 * mallory's (a timeout that says why); a bad certificate is a clear error before anything is sent. */
START_TEST (clients_take_certificates)
{
    pid_t pid = s_start ();
    char server[2400], alice[2400], mallory[2400], bob_public[2400], missing[2400];
    snprintf (server, sizeof server, "%s/server", s_dir);
    snprintf (alice, sizeof alice, "%s/alice_secret", s_dir);
    snprintf (mallory, sizeof mallory, "%s/mallory_secret", s_dir);
    snprintf (bob_public, sizeof bob_public, "%s/bob", s_dir);
    snprintf (missing, sizeof missing, "%s/nobody_secret", s_dir);
    const char *eps[] = { s_endpoint };

    /* libsigclient */
    sigclient_curve_keys_t keys;
    char why[512];
    ck_assert_int_eq (sigclient_curve_keys_load (server, alice, &keys, why, sizeof why), 0);
    char expect[41];
    s_key (server, "public-key", expect);
    ck_assert_str_eq (keys.server_public, expect);
    s_key (alice, "secret-key", expect);
    ck_assert_str_eq (keys.client_secret, expect);
    sigclient_t *c = sigclient_new_curve (eps, 1, 3000, keys.server_public, keys.client_public, keys.client_secret);
    ck_assert_ptr_nonnull (c);
    sigclient_health_t h;
    ck_assert_int_eq (sigclient_health (c, &h), 0);
    ck_assert (h.ready);
    float f[512], out[8];
    for (int i = 0; i < 512; i++) f[i] = (float) (i % 7) * 0.1f;
    size_t n_out = 0;
    sigclient_result_t r;
    ck_assert_msg (sigclient_infer (c, "tick_mlp", f, 512, 1, out, 8, &n_out, &r) == 0, "%s", sigclient_error (c));
    ck_assert_uint_eq (n_out, 1);
    sigclient_destroy (&c);

    ck_assert_int_eq (sigclient_curve_keys_load (server, mallory, &keys, why, sizeof why), 0);
    c = sigclient_new_curve (eps, 1, 500, keys.server_public, keys.client_public, keys.client_secret);
    ck_assert_int_eq (sigclient_health (c, &h), -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TIMEOUT);
    ck_assert_ptr_nonnull (strstr (sigclient_error (c), "CURVE: a server that does not allow this client's key"));
    sigclient_destroy (&c);
    /* keys that are not 40 Z85 characters */
    errno = 0;
    ck_assert_ptr_null (sigclient_new_curve (eps, 1, 500, "short", keys.client_public, keys.client_secret));
    ck_assert_int_eq (errno, EINVAL);
    errno = 0;
    ck_assert_ptr_null (sigclient_new_curve (eps, 1, 500, "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~",   /* 40, not Z85 */
                                             keys.client_public, keys.client_secret));
    ck_assert_int_eq (errno, EINVAL);

    /* bad certificate files, each named with what is wrong */
    ck_assert_int_eq (sigclient_curve_keys_load (server, bob_public, &keys, why, sizeof why), -1);
    ck_assert_msg (strstr (why, "bob: no secret-key (give the client's secret certificate"), "%s", why);
    ck_assert_int_eq (sigclient_curve_keys_load (server, missing, &keys, why, sizeof why), -1);
    ck_assert_msg (strstr (why, "cannot open the certificate") && strstr (why, "nobody_secret: No such file"), "%s", why);
    char *garbage = tu_write_file (s_dir, "garbage.cert", "curve\n    public-key = \"tooshort\"\n", -1);
    ck_assert_int_eq (sigclient_curve_keys_load (garbage, alice, &keys, why, sizeof why), -1);
    ck_assert_msg (strstr (why, "garbage.cert: public-key is 8 characters, expected a 40-character Z85 key"), "%s", why);
    free (garbage);
    char *empty = tu_write_file (s_dir, "empty.cert", "# nothing here\n", -1);
    ck_assert_int_eq (sigclient_curve_keys_load (empty, alice, &keys, why, sizeof why), -1);
    ck_assert_msg (strstr (why, "empty.cert: no public-key"), "%s", why);
    free (empty);

    /* sigclient */
    static char cmd[32768];
    char text[8192];
    snprintf (cmd, sizeof cmd, "%s/sigclient --endpoint %s --curve-server %s --curve-client %s health 2>&1",
              tu_build_dir (), s_endpoint, server, alice);
    ck_assert_msg (s_run (cmd, text, sizeof text) == 0, "%s", text);
    snprintf (cmd, sizeof cmd, "%s/sigclient --endpoint %s --timeout 300 --curve-server %s --curve-client %s health 2>&1",
              tu_build_dir (), s_endpoint, server, mallory);
    ck_assert_int_eq (s_run (cmd, text, sizeof text), 3);
    ck_assert_msg (strstr (text, "CURVE"), "%s", text);
    snprintf (cmd, sizeof cmd, "%s/sigclient --endpoint %s --curve-server %s health 2>&1", tu_build_dir (), s_endpoint, server);
    ck_assert_int_eq (s_run (cmd, text, sizeof text), 2);
    ck_assert_msg (strstr (text, "CURVE needs both --curve-server and --curve-client"), "%s", text);
    snprintf (cmd, sizeof cmd, "%s/sigclient --endpoint %s --curve-server %s --curve-client %s health 2>&1",
              tu_build_dir (), s_endpoint, server, bob_public);
    ck_assert_int_eq (s_run (cmd, text, sizeof text), 2);
    ck_assert_msg (strstr (text, "no secret-key"), "%s", text);

    /* sigload: every request answered OK over CURVE */
    snprintf (cmd, sizeof cmd, "%s/sigload --endpoint %s --model tick_mlp --curve-server %s --curve-client %s "
              "--warmup 0 --requests 200 --quiet 2>&1", tu_build_dir (), s_endpoint, server, alice);
    ck_assert_msg (s_run (cmd, text, sizeof text) == 0, "%s", text);
    snprintf (cmd, sizeof cmd, "%s/sigload --endpoint %s --model tick_mlp --curve-server %s --curve-client %s "
              "--warmup 0 --requests 10 --quiet 2>&1", tu_build_dir (), s_endpoint, server, bob_public);
    ck_assert_int_eq (s_run (cmd, text, sizeof text), 2);
    ck_assert_msg (strstr (text, "no secret-key"), "%s", text);

    /* the Python client and its CLI */
    const char *py = getenv ("PYTHON") ? getenv ("PYTHON") : "/usr/bin/python3";
    snprintf (cmd, sizeof cmd,
              "PYTHONPATH=clients/python %s -c '\n"
              "import sigclient\n"
              "c = sigclient.SigClient(\"%s\", timeout_ms=3000, curve_server=\"%s\", curve_client=\"%s\")\n"
              "assert c.health().ready\n"
              "r = c.infer(\"tick_mlp\", [0.1] * 512)\n"
              "print(\"outputs\", len(r.outputs))\n"
              "m = sigclient.SigClient(\"%s\", timeout_ms=300, curve_server=\"%s\", curve_client=\"%s\")\n"
              "try:\n"
              "    m.health(); print(\"mallory served\")\n"
              "except sigclient.Timeout as e:\n"
              "    print(\"mallory:\", e)\n"
              "try:\n"
              "    sigclient.SigClient(\"%s\", curve_server=\"%s\", curve_client=\"%s\")\n"
              "except ValueError as e:\n"
              "    print(\"bob:\", e)\n"
              "' 2>&1 && PYTHONPATH=clients/python %s -m sigclient --endpoint %s --curve-server %s --curve-client %s health 2>&1",
              py, s_endpoint, server, alice, s_endpoint, server, mallory, s_endpoint, server, bob_public,
              py, s_endpoint, server, alice);
    ck_assert_msg (s_run (cmd, text, sizeof text) == 0, "%s", text);
    ck_assert_msg (strstr (text, "outputs 1\n"), "%s", text);
    ck_assert_msg (strstr (text, "mallory: timed out after 300 ms") && strstr (text, "CURVE: a server that does not allow"), "%s", text);
    ck_assert_msg (strstr (text, "no secret-key (give the client's secret certificate"), "%s", text);
    ck_assert_int_eq (tu_server_stop (pid), 0);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("curve");
    for (int transport = 0; transport < 2; transport++) {
        TCase *tc = tcase_create (transport ? "curve_libzmq" : "curve_zmtp");
        tcase_add_unchecked_fixture (tc, transport ? s_setup_libzmq : s_setup_zmtp, s_teardown);
        tcase_add_checked_fixture (tc, s_ctx_new, s_ctx_term);
        tcase_set_timeout (tc, 120);
        if (transport == 0)     /* the command line's, whatever the transport */
            tcase_add_test (tc, keygen_on_the_command_line_writes_the_pair_or_exits_2);
        tcase_add_test (tc, allowlisted_served_others_get_nothing);
        tcase_add_test (tc, configured_but_unusable_refuses_to_start);
        tcase_add_test (tc, clients_take_certificates);
        tcase_add_test (tc, refused_handshakes_are_counted_and_logged);
        tcase_add_test (tc, a_client_without_curve_is_told_at_once_and_counted_once);
        suite_add_tcase (s, tc);
    }
    return tu_run_suite (s);
}
