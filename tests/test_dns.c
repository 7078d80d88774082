/* dns:// endpoints and retries in libsigclient, and dns:// in the sigclient and sigload commands.
 *
 * A fleet here is two fake servers (a ROUTER thread each, answering as the test tells it: OK with
 * an output that names the server, STATUS_UNAVAILABLE, or nothing at all) on the same port of
 * 127.0.0.1 and 127.0.0.2 (all of 127/8 is loopback on Linux), and a name "fleet" whose addresses
 * the test decides through sigclient_set_resolver. The real resolver is checked with "localhost"
 * (127.0.0.1, and ::1 where /etc/hosts lists it), against fakes and against the real sigserve.
 * Every case runs once per engine (a TCase each): the library through sigclient_new_engine, the
 * commands with --engine. */
#define _GNU_SOURCE
#include "sigclient.h"
#include "signal.pb-c.h"
#include "testutil.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define TICK_IN 512

/* ---- fake servers ---- */

typedef enum { FAKE_OK, FAKE_UNAVAILABLE, FAKE_SILENT } fake_mode_t;

typedef struct {
    char endpoint[64];
    float tag;                      /* the output it answers with: which server answered */
    _Atomic int mode;               /* fake_mode_t */
    atomic_int requests;            /* infer requests received */
    atomic_int healths;             /* health requests received (answered in every mode) */
    atomic_bool stop;
    atomic_bool bound;
    pthread_t thread;
} fake_t;

static void s_fake_reply (void *router, zmq_msg_t *identity, const Sigserve__V1__Request *req, const fake_t *fake)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__InferReply infer = SIGSERVE__V1__INFER_REPLY__INIT;
    Sigserve__V1__HealthReply health = SIGSERVE__V1__HEALTH_REPLY__INIT;
    float output = fake->tag;
    if (req->body_case == SIGSERVE__V1__REQUEST__BODY_INFER) {
        infer.request_id = req->infer->request_id;
        infer.rows = 1;
        infer.model_version = (char *) "1";
        if (atomic_load (&fake->mode) == FAKE_UNAVAILABLE) {
            infer.status = SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE;
            infer.error = (char *) "draining: this server is stopping";
        } else {
            infer.outputs = &output;
            infer.n_outputs = 1;
        }
        reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
        reply.infer = &infer;
    } else {
        health.live = health.ready = true;
        health.version = (char *) "fake";
        reply.body_case = SIGSERVE__V1__REPLY__BODY_HEALTH;
        reply.health = &health;
    }
    uint8_t buf[256];
    size_t len = sigserve__v1__reply__pack (&reply, buf);
    zmq_msg_send (identity, router, ZMQ_SNDMORE);
    zmq_send (router, buf, len, 0);
}

static void s_fake_request (void *arg, void *router, zmq_msg_t *identity, Sigserve__V1__Request *req)
{
    fake_t *fake = arg;
    if (req->body_case == SIGSERVE__V1__REQUEST__BODY_INFER) atomic_fetch_add (&fake->requests, 1);
    if (req->body_case == SIGSERVE__V1__REQUEST__BODY_HEALTH) atomic_fetch_add (&fake->healths, 1);
    if (req->body_case != SIGSERVE__V1__REQUEST__BODY_INFER || atomic_load (&fake->mode) != FAKE_SILENT)
        s_fake_reply (router, identity, req, fake);
}

static void *s_fake_main (void *arg)
{
    fake_t *fake = arg;
    tu_fake_serve (fake->endpoint, &fake->bound, &fake->stop, s_fake_request, fake);
    return NULL;
}

static void s_fake_start (fake_t *fake, const char *address, int port, float tag, fake_mode_t mode)
{
    memset (fake, 0, sizeof *fake);
    snprintf (fake->endpoint, sizeof fake->endpoint, "tcp://%s:%d", address, port);
    fake->tag = tag;
    atomic_store (&fake->mode, mode);
    ck_assert_int_eq (pthread_create (&fake->thread, NULL, s_fake_main, fake), 0);
    while (!atomic_load (&fake->bound)) usleep (1000);
}

static void s_fake_stop (fake_t *fake)
{
    atomic_store (&fake->stop, true);
    pthread_join (fake->thread, NULL);
}

/* ---- the name "fleet", as the test decides ---- */

static const char *s_fleet[4];      /* its addresses now */
static size_t s_fleet_count;
static bool s_fleet_down;           /* the resolver fails */
static atomic_int s_lookups;

static int s_fleet_resolver (const char *name, char (*addrs)[SIGCLIENT_ADDRESS_MAX], size_t cap, char *error,
                             size_t error_cap, void *arg)
{
    ck_assert_ptr_eq (arg, &s_fleet);
    atomic_fetch_add (&s_lookups, 1);
    if (strcmp (name, "fleet") != 0 || s_fleet_down) {
        snprintf (error, error_cap, "test resolver: %s is down", name);
        return -1;
    }
    size_t n = 0;
    for (; n < s_fleet_count && n < cap; n++) snprintf (addrs[n], SIGCLIENT_ADDRESS_MAX, "%s", s_fleet[n]);
    return (int) n;
}

static void s_fleet_set (const char *a, const char *b)
{
    s_fleet_count = 0;
    if (a) s_fleet[s_fleet_count++] = a;
    if (b) s_fleet[s_fleet_count++] = b;
    s_fleet_down = false;
}

static int s_port;
static fake_t s_a, s_b;             /* 127.0.0.1 (tag 1) and 127.0.0.2 (tag 2) on s_port */
static sigclient_engine_t s_engine; /* the TCase's */

static void s_setup (void)
{
    sigclient_set_resolver (s_fleet_resolver, &s_fleet);
    s_fleet_set ("127.0.0.1", "127.0.0.2");
    s_port = tu_free_port ();
}

static void s_setup_zmtp (void)
{
    s_engine = SIGCLIENT_ENGINE_ZMTP;
    s_setup ();
}

static void s_setup_libzmq (void)
{
    s_engine = SIGCLIENT_ENGINE_LIBZMQ;
    s_setup ();
}

static void s_teardown (void)
{
    sigclient_set_resolver (NULL, NULL);
}

static sigclient_t *s_fleet_client (int timeout_ms)
{
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "dns://fleet:%d", s_port);
    const char *eps[] = { endpoint };
    sigclient_t *c = sigclient_new_engine (eps, 1, timeout_ms, s_engine, NULL);
    ck_assert_ptr_nonnull (c);
    return c;
}

static int64_t s_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One sync infer; returns the output (the answering server's tag) or -1 after a failure. */
static float s_infer (sigclient_t *c, sigclient_result_t *r)
{
    float features[4] = { 1, 2, 3, 4 }, out[4];
    size_t n = 0;
    if (sigclient_infer (c, "m", features, 4, 1, out, 4, &n, r) != 0) return -1;
    ck_assert_uint_eq (n, 1);
    return out[0];
}

/* Health requests until both fakes have answered one (10 s at most): both connections are up, and
 * from then on the client's DEALER hands its requests to the two in turn. (Until a connection is
 * up, every request goes to the other: the zmtp engine always works so, libzmq with ZMQ_IMMEDIATE,
 * which a dns:// client sets.) */
static void s_wait_both_connected (sigclient_t *c)
{
    const int64_t until = s_ms () + 10000;
    while ((atomic_load (&s_a.healths) == 0 || atomic_load (&s_b.healths) == 0) && s_ms () < until) {
        sigclient_health_t h;
        ck_assert_msg (sigclient_health (c, &h) == 0, "%s", sigclient_error (c));
        usleep (1000);
    }
    ck_assert_msg (atomic_load (&s_a.healths) > 0 && atomic_load (&s_b.healths) > 0,
                   "after 10 s of health requests 127.0.0.1 answered %d and 127.0.0.2 %d: not both connected",
                   atomic_load (&s_a.healths), atomic_load (&s_b.healths));
}

/* Infers (each answered by the fake it reached) until the client describes itself as WANT
 * (resolving again happens inside its calls), 10 s at most. Every answer must be OK. */
static void s_wait_endpoints (sigclient_t *c, const char *want)
{
    const int64_t until = s_ms () + 10000;
    while (strcmp (sigclient_endpoints (c), want) != 0 && s_ms () < until) {
        sigclient_result_t r;
        float v = s_infer (c, &r);
        ck_assert_msg (v > 0, "%s", sigclient_error (c));
        usleep (1000);
    }
    ck_assert_str_eq (sigclient_endpoints (c), want);
}

/* ---- endpoints ---- */

START_TEST (malformed_dns_endpoints_are_refused)
{
    const char *bad[] = { "dns://", "dns://fleet", "dns://:5555", "dns://fleet:", "dns://fleet:0",
                          "dns://fleet:65536", "dns://fleet:55a", "dns://fleet:-1", "dns://a/b:5555" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        sigclient_t *c = sigclient_new_engine (&bad[i], 1, 100, s_engine, NULL);
        ck_assert_msg (c == NULL, "%s accepted", bad[i]);
        ck_assert_int_eq (errno, EINVAL);
        char out[2][SIGCLIENT_ENDPOINT_MAX], err[256];
        ck_assert_int_eq (sigclient_resolve_endpoint (bad[i], out, 2, err, sizeof err), -1);
        ck_assert_int_eq (errno, EINVAL);
        ck_assert_msg (strstr (err, bad[i]) != NULL, "'%s' does not name '%s'", err, bad[i]);
    }
}
END_TEST

START_TEST (resolve_endpoint_expands_names_and_copies_the_rest)
{
    char out[8][SIGCLIENT_ENDPOINT_MAX], err[256];
    ck_assert_int_eq (sigclient_resolve_endpoint ("dns://fleet:7000", out, 8, err, sizeof err), 2);
    ck_assert_str_eq (out[0], "tcp://127.0.0.1:7000");
    ck_assert_str_eq (out[1], "tcp://127.0.0.2:7000");
    /* sorted, without duplicates; IPv6 in brackets */
    s_fleet[0] = "::1"; s_fleet[1] = "10.0.0.9"; s_fleet[2] = "::1"; s_fleet_count = 3;
    ck_assert_int_eq (sigclient_resolve_endpoint ("dns://fleet:7000", out, 8, err, sizeof err), 2);
    ck_assert_str_eq (out[0], "tcp://10.0.0.9:7000");
    ck_assert_str_eq (out[1], "tcp://[::1]:7000");
    ck_assert_int_eq (sigclient_resolve_endpoint ("tcp://10.1.2.3:9", out, 8, err, sizeof err), 1);
    ck_assert_str_eq (out[0], "tcp://10.1.2.3:9");
    s_fleet_down = true;
    ck_assert_int_eq (sigclient_resolve_endpoint ("dns://fleet:7000", out, 8, err, sizeof err), -1);
    ck_assert_int_eq (errno, ENOENT);
    ck_assert_str_eq (err, "dns://fleet:7000: test resolver: fleet is down");
    s_fleet_count = 0;
    s_fleet_down = false;
    ck_assert_int_eq (sigclient_resolve_endpoint ("dns://fleet:7000", out, 8, err, sizeof err), -1);
    ck_assert_str_eq (err, "dns://fleet:7000: no address");
}
END_TEST

START_TEST (getaddrinfo_resolves_localhost)
{
    sigclient_set_resolver (NULL, NULL);
    char out[8][SIGCLIENT_ENDPOINT_MAX], err[256];
    int n = sigclient_resolve_endpoint ("dns://localhost:7000", out, 8, err, sizeof err);
    ck_assert_msg (n >= 1, "localhost: %s", err);
    bool v4 = false;
    for (int i = 0; i < n; i++) {
        v4 |= strcmp (out[i], "tcp://127.0.0.1:7000") == 0;
        ck_assert_msg (strcmp (out[i], "tcp://127.0.0.1:7000") == 0 || strcmp (out[i], "tcp://[::1]:7000") == 0,
                       "localhost gave %s", out[i]);
    }
    ck_assert (v4);
    ck_assert_int_eq (sigclient_resolve_endpoint ("dns://no-such-host.invalid:7000", out, 8, err, sizeof err), -1);
    ck_assert_int_eq (errno, ENOENT);
    ck_assert_msg (strncmp (err, "dns://no-such-host.invalid:7000: ", 33) == 0, "%s", err);
}
END_TEST

/* ---- spreading, following, failing ---- */

START_TEST (every_address_takes_requests)
{
    s_fake_start (&s_a, "127.0.0.1", s_port, 1, FAKE_OK);
    s_fake_start (&s_b, "127.0.0.2", s_port, 2, FAKE_OK);
    sigclient_t *c = s_fleet_client (2000);
    char want[128];
    snprintf (want, sizeof want, "dns://fleet:%d [tcp://127.0.0.1:%d, tcp://127.0.0.2:%d]", s_port, s_port, s_port);
    ck_assert_str_eq (sigclient_endpoints (c), want);
    s_wait_both_connected (c);
    float features[4] = { 0 }, out[4];
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq (sigclient_send_infer (c, "m", features, 4, 1, 0, NULL), 0);
    int from_a = 0, from_b = 0;
    for (int i = 0; i < 40; i++) {
        sigclient_result_t r;
        size_t n = 0;
        ck_assert_int_eq (sigclient_recv_infer (c, out, 4, &n, &r), 0);
        ck_assert_int_eq (r.status, SIGCLIENT_OK);
        if (out[0] == 1) from_a++;
        else from_b++;
    }
    /* Both connections proven up, the DEALER alternates: an even split, whatever the timing. */
    ck_assert_int_eq (from_a, 20);
    ck_assert_int_eq (from_b, 20);
    sigclient_destroy (&c);
    s_fake_stop (&s_a);
    s_fake_stop (&s_b);
}
END_TEST

START_TEST (follows_the_name_as_its_addresses_change)
{
    s_fake_start (&s_a, "127.0.0.1", s_port, 1, FAKE_OK);
    s_fake_start (&s_b, "127.0.0.2", s_port, 2, FAKE_OK);
    s_fleet_set ("127.0.0.1", NULL);
    sigclient_t *c = s_fleet_client (300);
    sigclient_set_resolve_interval (c, 100);
    /* A request sent in the instant its peer is disconnected may be dropped with the peer's pipe
     * (ZeroMQ tears it down asynchronously): one retry covers it. */
    ck_assert_int_eq (sigclient_set_retry (c, 1), 0);
    sigclient_result_t r;
    for (int i = 0; i < 10; i++) ck_assert (s_infer (c, &r) == 1);
    ck_assert_int_eq (atomic_load (&s_a.requests), 10);
    /* A is gone from the name, B came: once the client has resolved again (it says so), every
     * request goes to B, at the first attempt. */
    s_fleet_set ("127.0.0.2", NULL);
    char want[128];
    snprintf (want, sizeof want, "dns://fleet:%d [tcp://127.0.0.2:%d]", s_port, s_port);
    s_wait_endpoints (c, want);
    for (int i = 0; i < 10; i++) {
        float v = s_infer (c, &r);
        ck_assert_msg (v == 2, "got %g: %s", v, sigclient_error (c));
        ck_assert_uint_eq (r.attempts, 1);
    }
    /* The resolver fails: the client keeps what it has, and says so. */
    s_fleet_down = true;
    snprintf (want, sizeof want, "dns://fleet:%d [tcp://127.0.0.2:%d; last resolution: test resolver: fleet is down]",
              s_port, s_port);
    s_wait_endpoints (c, want);
    for (int i = 0; i < 5; i++) ck_assert (s_infer (c, &r) == 2);
    /* Interval 0: never again. Setting an interval counts it from now, so with any other interval
     * than "never" the very next call would be due to resolve: no waiting is needed to see it not
     * happen. */
    sigclient_set_resolve_interval (c, 0);
    int lookups = atomic_load (&s_lookups);
    s_fleet_set ("127.0.0.1", NULL);
    for (int i = 0; i < 5; i++) ck_assert (s_infer (c, &r) == 2);
    ck_assert_int_eq (atomic_load (&s_lookups), lookups);
    snprintf (want, sizeof want, "dns://fleet:%d [tcp://127.0.0.2:%d; last resolution: test resolver: fleet is down]",
              s_port, s_port);
    ck_assert_str_eq (sigclient_endpoints (c), want);
    sigclient_destroy (&c);
    s_fake_stop (&s_a);
    s_fake_stop (&s_b);
}
END_TEST

START_TEST (no_address_fails_fast_then_recovers)
{
    s_fake_start (&s_a, "127.0.0.1", s_port, 1, FAKE_OK);
    s_fleet_down = true;
    sigclient_t *c = s_fleet_client (30000);    /* not an error: the fleet may not be up yet */
    sigclient_result_t r;
    int64_t t0 = s_ms ();
    ck_assert (s_infer (c, &r) == -1);
    ck_assert_int_lt (s_ms () - t0, 10000);     /* failed, not after the 30 s timeout */
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TRANSPORT);
    char want[128];
    snprintf (want, sizeof want, "no address to send to: dns://fleet:%d [no address: test resolver: fleet is down]",
              s_port);
    ck_assert_str_eq (sigclient_error (c), want);
    /* With nothing connected the name is tried again every 200 ms (not after the 5 s interval):
     * the client recovers by itself, each call failing fast until then (30 s at most). */
    s_fleet_set ("127.0.0.1", NULL);
    for (t0 = s_ms (); s_infer (c, &r) != 1 && s_ms () - t0 < 30000;) {
        ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TRANSPORT);
        usleep (1000);
    }
    ck_assert_msg (s_infer (c, &r) == 1, "no request answered by 127.0.0.1 within 30 s: %s", sigclient_error (c));
    sigclient_destroy (&c);
    s_fake_stop (&s_a);
}
END_TEST

/* Where the engines differ: every address of the name is listed, none is up. A request waits for
 * a connection for up to the timeout either way, but libzmq's waits in the send (ZMQ_IMMEDIATE: no
 * pipe takes it) and the zmtp engine's in the client's own queue, so the call fails in the send with
 * one and waiting for the reply with the other. */
START_TEST (nothing_up_times_out_where_the_request_waits)
{
    sigclient_t *c = s_fleet_client (300);      /* no fake listens on s_port */
    sigclient_result_t r;
    int64_t t0 = s_ms ();
    ck_assert (s_infer (c, &r) == -1);
    int64_t took = s_ms () - t0;
    ck_assert_msg (took >= 290 && took < 2000, "took %lld ms with a 300 ms timeout", (long long) took);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TIMEOUT);
    char want[256];
    char fleet[128];
    snprintf (fleet, sizeof fleet, "dns://fleet:%d [tcp://127.0.0.1:%d, tcp://127.0.0.2:%d]", s_port, s_port, s_port);
    if (s_engine == SIGCLIENT_ENGINE_LIBZMQ)
        snprintf (want, sizeof want, "timed out after 300 ms sending to %s (send queue full)", fleet);
    else
        snprintf (want, sizeof want, "timed out after 300 ms waiting for a reply from %s", fleet);
    ck_assert_str_eq (sigclient_error (c), want);
    sigclient_destroy (&c);
}
END_TEST

/* ---- retries ---- */

START_TEST (retry_settings_are_bounded)
{
    sigclient_t *c = s_fleet_client (100);
    ck_assert_int_eq (sigclient_set_retry (c, -1), -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_ARGUMENT);
    ck_assert_int_eq (sigclient_set_retry (c, SIGCLIENT_MAX_RETRY + 1), -1);
    ck_assert_str_eq (sigclient_error (c), "retries: expected 0 to 16, got 17");
    ck_assert_int_eq (sigclient_set_retry (c, SIGCLIENT_MAX_RETRY), 0);
    sigclient_destroy (&c);
}
END_TEST

START_TEST (unavailable_is_retried_on_the_other_peer)
{
    s_fake_start (&s_a, "127.0.0.1", s_port, 1, FAKE_UNAVAILABLE);   /* draining */
    s_fake_start (&s_b, "127.0.0.2", s_port, 2, FAKE_OK);
    sigclient_t *c = s_fleet_client (2000);
    s_wait_both_connected (c);
    sigclient_result_t r;
    /* Without retries, A's answers reach the caller. */
    int unavailable = 0;
    for (int i = 0; i < 10; i++) {
        if (s_infer (c, &r) == -1) {
            ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_UNAVAILABLE);
            ck_assert_str_eq (sigclient_error (c), "server replied STATUS_UNAVAILABLE: draining: this server is stopping");
            unavailable++;
        }
    }
    ck_assert_int_eq (unavailable, 5);
    /* With one retry, every call is answered by B; those that met A first took two attempts. */
    ck_assert_int_eq (sigclient_set_retry (c, 1), 0);
    int retried = 0;
    for (int i = 0; i < 10; i++) {
        ck_assert (s_infer (c, &r) == 2);
        ck_assert_int_eq (r.status, SIGCLIENT_OK);
        ck_assert_uint_ge (r.attempts, 1);
        ck_assert_uint_le (r.attempts, 2);
        retried += r.attempts == 2;
    }
    ck_assert_int_ge (retried, 1);
    ck_assert_int_eq (atomic_load (&s_a.requests), 5 + retried);
    sigclient_destroy (&c);
    s_fake_stop (&s_a);
    s_fake_stop (&s_b);
}
END_TEST

START_TEST (timeout_is_retried_and_retries_are_bounded)
{
    s_fake_start (&s_a, "127.0.0.1", s_port, 1, FAKE_SILENT);       /* hung */
    s_fake_start (&s_b, "127.0.0.2", s_port, 2, FAKE_OK);
    sigclient_t *c = s_fleet_client (300);
    s_wait_both_connected (c);
    ck_assert_int_eq (sigclient_set_retry (c, 2), 0);
    sigclient_result_t r;
    int retried = 0;
    for (int i = 0; i < 6; i++) {
        int64_t t0 = s_ms ();
        ck_assert (s_infer (c, &r) == 2);
        ck_assert_uint_ge (r.attempts, 1);
        ck_assert_uint_le (r.attempts, 2);
        if (r.attempts == 2) {
            ck_assert_int_ge (s_ms () - t0, 290);      /* a whole timeout on A first */
            retried++;
        }
    }
    ck_assert_int_ge (retried, 1);      /* in turn: A got its share, and each of them was retried on B */
    /* Everyone unavailable: 1 + 3 attempts, then the last answer, said to be the fourth. */
    atomic_store (&s_a.mode, FAKE_UNAVAILABLE);
    atomic_store (&s_b.mode, FAKE_UNAVAILABLE);
    int before = atomic_load (&s_a.requests) + atomic_load (&s_b.requests);
    ck_assert_int_eq (sigclient_set_retry (c, 3), 0);
    ck_assert (s_infer (c, &r) == -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_UNAVAILABLE);
    ck_assert_uint_eq (r.attempts, 4);
    ck_assert_str_eq (sigclient_error (c),
                      "server replied STATUS_UNAVAILABLE: draining: this server is stopping (after 4 attempts)");
    ck_assert_int_eq (atomic_load (&s_a.requests) + atomic_load (&s_b.requests), before + 4);
    /* Everyone silent: a timeout per attempt, then ERR_TIMEOUT. */
    atomic_store (&s_a.mode, FAKE_SILENT);
    atomic_store (&s_b.mode, FAKE_SILENT);
    ck_assert_int_eq (sigclient_set_retry (c, 1), 0);
    int64_t t0 = s_ms ();
    ck_assert (s_infer (c, &r) == -1);
    ck_assert_int_ge (s_ms () - t0, 590);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TIMEOUT);
    ck_assert_msg (strstr (sigclient_error (c), "(after 2 attempts)") != NULL, "%s", sigclient_error (c));
    sigclient_destroy (&c);
    s_fake_stop (&s_a);
    s_fake_stop (&s_b);
}
END_TEST

/* ---- the real resolver and the real server, through the library and both commands ---- */

static tu_fixture_t s_fx;

static int s_run (const char *cmd, char *out, size_t cap)
{
    FILE *p = popen (cmd, "r");
    ck_assert_ptr_nonnull (p);
    size_t n = fread (out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose (p);
    return WIFEXITED (st) ? WEXITSTATUS (st) : -1;
}

START_TEST (localhost_reaches_the_real_server)
{
    sigclient_set_resolver (NULL, NULL);
    const tu_fixture_options_t options = { .tick_backend = "cpu", .odd_kernel = "loop" };
    tu_fixture_setup (&s_fx, &options);
    const char *port = strrchr (s_fx.endpoint[0], ':') + 1;
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "dns://localhost:%s", port);
    const char *eps[] = { endpoint };
    sigclient_t *c = sigclient_new_engine (eps, 1, 5000, s_engine, NULL);
    ck_assert_ptr_nonnull (c);
    sigclient_health_t h;
    ck_assert_msg (sigclient_health (c, &h) == 0, "%s", sigclient_error (c));
    ck_assert (h.ready);
    float features[TICK_IN], out[4];
    for (int i = 0; i < TICK_IN; i++) features[i] = (float) (i % 7) / 7.0f;
    size_t n = 0;
    sigclient_result_t r;
    for (int i = 0; i < 10; i++) {      /* ::1, if localhost has it, is never connected: no timeouts */
        ck_assert_msg (sigclient_infer (c, "tick_mlp", features, TICK_IN, 1, out, 4, &n, &r) == 0, "%s",
                       sigclient_error (c));
        ck_assert_uint_eq (n, 1);
    }
    sigclient_destroy (&c);

    char cmd[512], text[8192];
    const char *build = tu_build_dir (), *engine = sigclient_engine_name (s_engine);
    snprintf (cmd, sizeof cmd, "%s/sigclient --engine %s --endpoint %s health 2>&1", build, engine, endpoint);
    ck_assert_int_eq (s_run (cmd, text, sizeof text), 0);
    ck_assert_msg (strncmp (text, "live=1 ready=1", 14) == 0, "%s", text);
    snprintf (cmd, sizeof cmd, "%s/sigclient --engine %s --endpoint dns://no-such-host.invalid:%s --timeout 5000 "
              "health 2>&1", build, engine, port);
    ck_assert_int_eq (s_run (cmd, text, sizeof text), 3);
    ck_assert_msg (strstr (text, "no address to send to: dns://no-such-host.invalid:") != NULL, "%s", text);
    snprintf (cmd, sizeof cmd, "%s/sigload --engine %s --endpoint %s --model tick_mlp --concurrency 1 --warmup 0 "
              "--requests 50 --quiet 2>&1", build, engine, endpoint);
    int rc = s_run (cmd, text, sizeof text);
    ck_assert_msg (rc == 0, "sigload exited %d:\n%s", rc, text);
    char want[96];
    snprintf (want, sizeof want, "%s: tcp://127.0.0.1:%s", endpoint, port);
    ck_assert_msg (strstr (text, want) != NULL, "sigload does not say what %s stands for:\n%s", endpoint, text);
    snprintf (cmd, sizeof cmd, "%s/sigload --engine %s --endpoint dns://no-such-host.invalid:%s --model tick_mlp 2>&1",
              build, engine, port);
    ck_assert_int_eq (s_run (cmd, text, sizeof text), 1);
    ck_assert_msg (strstr (text, "sigload: dns://no-such-host.invalid:") != NULL, "%s", text);
    tu_fixture_teardown (&s_fx);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("dns");
    static const struct { const char *name; void (*setup) (void); } engines[] = {
        { "dns+retry, zmtp", s_setup_zmtp }, { "dns+retry, libzmq", s_setup_libzmq },
    };
    for (size_t e = 0; e < 2; e++) {
        TCase *tc = tcase_create (engines[e].name);
        tcase_add_checked_fixture (tc, engines[e].setup, s_teardown);
        tcase_set_timeout (tc, 60);
        tcase_add_test (tc, malformed_dns_endpoints_are_refused);
        tcase_add_test (tc, resolve_endpoint_expands_names_and_copies_the_rest);
        tcase_add_test (tc, getaddrinfo_resolves_localhost);
        tcase_add_test (tc, every_address_takes_requests);
        tcase_add_test (tc, follows_the_name_as_its_addresses_change);
        tcase_add_test (tc, no_address_fails_fast_then_recovers);
        tcase_add_test (tc, nothing_up_times_out_where_the_request_waits);
        tcase_add_test (tc, retry_settings_are_bounded);
        tcase_add_test (tc, unavailable_is_retried_on_the_other_peer);
        tcase_add_test (tc, timeout_is_retried_and_retries_are_bounded);
        tcase_add_test (tc, localhost_reaches_the_real_server);
        suite_add_tcase (s, tc);
    }
    return tu_run_suite (s);
}
