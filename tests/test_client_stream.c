/* LSTM streams in libsigclient and the sigclient CLI.
 *
 * What the client sends, read on ROUTER sockets of this test's own (fake servers): stream_id and
 * step (InferRequest field 7) on every step, numbered 1, 2, 3...; every step of a stream at one
 * endpoint on one connection while plain requests still alternate over both; a stream step sent
 * once whatever the retry setting; a stream whose dns:// address vanished failing rather than
 * moving; the CLI's --stream and --step.
 *
 * Against the real sigserve (an LSTM model on the CPU backend): steps sent through the library
 * and the CLI answer what the float64 reference (weights/reference.h) gives for the stream so
 * far, each output within its error bound (tolerance.h); list_models describes the LSTM; the
 * CLI's hints after STATUS_BAD_SHAPE.
 * Every case runs once per engine (a TCase each), the library through sigclient_new_engine and the
 * CLI with --engine.
 * Nothing here waits a fixed time: waits poll with a generous cap. */
#define _GNU_SOURCE
#include "lstm_reference.h"
#include "rng.h"
#include "sigclient.h"
#include "signal.pb-c.h"
#include "testutil.h"
#include "tolerance.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define LAYERS 2
#define WINDOW 16
#define STEP 8
#define HIDDEN 12
#define OUTS 2
#define WAIT_CAP_MS 10000       /* the most any poll below waits */

static char s_dir[2048];        /* this suite's files (stderr of the CLI, features) */
static sigclient_engine_t s_engine;     /* the TCase's: every client and CLI run uses it */

static void s_engine_zmtp (void) { s_engine = SIGCLIENT_ENGINE_ZMTP; }
static void s_engine_libzmq (void) { s_engine = SIGCLIENT_ENGINE_LIBZMQ; }

/* ---- fake servers: ROUTER threads that record what they receive ---- */

typedef struct {
    uint64_t request_id, stream_id, step;
    char model[16];
    size_t n_features;
    float features[4];
    uint8_t identity[32];       /* the connection it came on */
    size_t identity_len;
} seen_t;

#define SEEN_MAX 512

typedef struct {
    char endpoint[64];
    atomic_bool stop, bound, silent;    /* silent: infer requests go unanswered */
    pthread_t thread;
    pthread_mutex_t lock;
    seen_t seen[SEEN_MAX];      /* infer requests in arrival order */
    int n_seen;
} fake_t;

/* Infer: OK with the outputs (stream_id, step), or STATUS_BAD_VALUE when the first feature is NaN.
 * Health: ready. List: one LSTM model "seq", window 4, step_size 3, 2 outputs. */
static void s_fake_answer (void *router, zmq_msg_t *identity, const Sigserve__V1__Request *req)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__InferReply infer = SIGSERVE__V1__INFER_REPLY__INIT;
    Sigserve__V1__HealthReply health = SIGSERVE__V1__HEALTH_REPLY__INIT;
    Sigserve__V1__ListModelsReply list = SIGSERVE__V1__LIST_MODELS_REPLY__INIT;
    Sigserve__V1__ModelInfo info = SIGSERVE__V1__MODEL_INFO__INIT;
    Sigserve__V1__ModelInfo *infos[1] = { &info };
    float outputs[2];
    if (req->body_case == SIGSERVE__V1__REQUEST__BODY_INFER) {
        const Sigserve__V1__InferRequest *r = req->infer;
        infer.request_id = r->request_id;
        infer.rows = 1;
        infer.model_version = (char *) "1";
        if (r->n_features && isnan (r->features[0])) {
            infer.status = SIGSERVE__V1__STATUS__STATUS_BAD_VALUE;
            infer.error = (char *) "features[0] (row 0, column 0) is NaN; every feature must be finite";
        } else {
            outputs[0] = (float) r->stream_id;
            outputs[1] = (float) r->step;
            infer.outputs = outputs;
            infer.n_outputs = 2;
        }
        reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
        reply.infer = &infer;
    } else if (req->body_case == SIGSERVE__V1__REQUEST__BODY_LIST_MODELS) {
        info.name = (char *) "seq";
        info.version = (char *) "1";
        info.backend = (char *) "cpu";
        info.kernel = (char *) "lstm";
        info.type = (char *) "lstm";
        info.window = 4;
        info.step_size = 3;
        info.input_size = 12;
        info.output_size = 2;
        info.max_rows = 1;
        info.available = true;
        list.n_models = 1;
        list.models = infos;
        reply.body_case = SIGSERVE__V1__REPLY__BODY_LIST_MODELS;
        reply.list_models = &list;
    } else {
        health.live = health.ready = true;
        health.version = (char *) "fake";
        reply.body_case = SIGSERVE__V1__REPLY__BODY_HEALTH;
        reply.health = &health;
    }
    uint8_t buf[1024];
    size_t len = sigserve__v1__reply__pack (&reply, buf);
    zmq_msg_send (identity, router, ZMQ_SNDMORE);
    zmq_send (router, buf, len, 0);
}

static void s_fake_record (fake_t *fake, zmq_msg_t *identity, const Sigserve__V1__InferRequest *r)
{
    pthread_mutex_lock (&fake->lock);
    if (fake->n_seen < SEEN_MAX) {
        seen_t *s = &fake->seen[fake->n_seen++];
        *s = (seen_t) { .request_id = r->request_id, .stream_id = r->stream_id, .step = r->step,
                        .n_features = r->n_features };
        snprintf (s->model, sizeof s->model, "%s", r->model ? r->model : "");
        for (size_t i = 0; i < r->n_features && i < 4; i++) s->features[i] = r->features[i];
        s->identity_len = zmq_msg_size (identity) < sizeof s->identity ? zmq_msg_size (identity) : sizeof s->identity;
        memcpy (s->identity, zmq_msg_data (identity), s->identity_len);
    }
    pthread_mutex_unlock (&fake->lock);
}

static void s_fake_request (void *arg, void *router, zmq_msg_t *identity, Sigserve__V1__Request *req)
{
    fake_t *fake = arg;
    bool infer = req->body_case == SIGSERVE__V1__REQUEST__BODY_INFER;
    if (infer) s_fake_record (fake, identity, req->infer);
    if (!(infer && atomic_load (&fake->silent))) s_fake_answer (router, identity, req);
}

static void *s_fake_main (void *arg)
{
    fake_t *fake = arg;
    tu_fake_serve (fake->endpoint, &fake->bound, &fake->stop, s_fake_request, fake);
    return NULL;
}

static void s_fake_start (fake_t *fake, const char *address, int port)
{
    memset (fake, 0, sizeof *fake);
    pthread_mutex_init (&fake->lock, NULL);
    snprintf (fake->endpoint, sizeof fake->endpoint, "tcp://%s:%d", address, port > 0 ? port : tu_free_port ());
    ck_assert_int_eq (pthread_create (&fake->thread, NULL, s_fake_main, fake), 0);
    for (int waited = 0; !atomic_load (&fake->bound) && waited < WAIT_CAP_MS; waited++) usleep (1000);
    ck_assert (atomic_load (&fake->bound));
}

static void s_fake_stop (fake_t *fake)
{
    atomic_store (&fake->stop, true);
    pthread_join (fake->thread, NULL);
    pthread_mutex_destroy (&fake->lock);
}

static int s_fake_count (fake_t *fake)
{
    pthread_mutex_lock (&fake->lock);
    int n = fake->n_seen;
    pthread_mutex_unlock (&fake->lock);
    return n;
}

/* Polls until FAKE has seen at least N infer requests (at most WAIT_CAP_MS); the count. */
static int s_fake_wait (fake_t *fake, int n)
{
    for (int waited = 0; s_fake_count (fake) < n && waited < WAIT_CAP_MS; waited++) usleep (1000);
    return s_fake_count (fake);
}

static sigclient_t *s_client (const char *a, const char *b, int timeout_ms)
{
    const char *eps[2] = { a, b };
    sigclient_t *c = sigclient_new_engine (eps, b ? 2 : 1, timeout_ms, s_engine, NULL);
    ck_assert_ptr_nonnull (c);
    return c;
}

/* One step through the helper; asserts it was answered OK with (stream_id, step). */
static void s_step_ok (sigclient_stream_t *s, sigclient_t *c, uint64_t stream_id, uint64_t step, float feature)
{
    float f[3] = { feature, feature + 0.5f, feature + 0.25f }, out[4];
    size_t n = 0;
    ck_assert_uint_eq (sigclient_stream_next_step (s), step);
    ck_assert_msg (sigclient_stream_step (s, f, 3, out, 4, &n, NULL) == 0, "%s", sigclient_error (c));
    ck_assert_uint_eq (n, 2);
    ck_assert_float_eq (out[0], (float) stream_id);
    ck_assert_float_eq (out[1], (float) step);
}

/* ---- on the wire ---- */

START_TEST (stream_steps_are_numbered_from_1_on_the_wire)
{
    fake_t f;
    s_fake_start (&f, "127.0.0.1", 0);
    sigclient_t *c = s_client (f.endpoint, NULL, 5000);
    sigclient_stream_t *s = sigclient_stream_new (c, "seq", 7);
    ck_assert_ptr_nonnull (s);
    for (uint64_t k = 1; k <= 3; k++) s_step_ok (s, c, 7, k, (float) k);
    /* a step the server refuses was not applied: the helper sends the same number again */
    float bad[3] = { NAN, 0, 0 }, out[4];
    size_t n = 0;
    sigclient_result_t r;
    ck_assert_int_eq (sigclient_stream_step (s, bad, 3, out, 4, &n, &r), -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_BAD_VALUE);
    ck_assert_int_eq (r.status, SIGCLIENT_BAD_VALUE);
    ck_assert_uint_eq (sigclient_stream_next_step (s), 4);
    s_step_ok (s, c, 7, 4, 4.0f);
    /* the raw call sends the number it is given; 0 goes unnumbered */
    float f0[3] = { 9, 9, 9 };
    ck_assert_int_eq (sigclient_infer_stream (c, "seq", 9, 0, f0, 3, out, 4, &n, NULL), 0);
    ck_assert_float_eq (out[0], 9);
    ck_assert_float_eq (out[1], 0);
    /* stream_id 0 is no stream: refused before anything is sent */
    ck_assert_int_eq (sigclient_infer_stream (c, "seq", 0, 1, f0, 3, out, 4, &n, NULL), -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_ARGUMENT);
    errno = 0;
    ck_assert_ptr_null (sigclient_stream_new (c, "seq", 0));
    ck_assert_int_eq (errno, EINVAL);
    /* every reply came back, so the fake has read every request: exactly these, in this order */
    ck_assert_int_eq (s_fake_count (&f), 6);
    const struct { uint64_t stream_id, step; float first; } want[] = {
        { 7, 1, 1 }, { 7, 2, 2 }, { 7, 3, 3 }, { 7, 4, NAN }, { 7, 4, 4 }, { 9, 0, 9 },
    };
    for (int i = 0; i < 6; i++) {
        const seen_t *got = &f.seen[i];
        ck_assert_uint_eq (got->stream_id, want[i].stream_id);
        ck_assert_uint_eq (got->step, want[i].step);
        ck_assert_str_eq (got->model, "seq");
        ck_assert_uint_eq (got->n_features, 3);
        if (isnan (want[i].first)) ck_assert (isnan (got->features[0]));
        else ck_assert_float_eq (got->features[0], want[i].first);
        ck_assert_uint_eq (got->request_id, (uint64_t) i + 1);     /* one request id sequence per client */
    }
    sigclient_stream_destroy (&s);
    ck_assert_ptr_null (s);
    sigclient_destroy (&c);
    s_fake_stop (&f);
}
END_TEST

START_TEST (a_stream_sticks_to_one_endpoint_while_round_robin_alternates)
{
    enum { STREAMS = 8, STEPS = 4, PLAIN_PER_ROUND = 5 };
    fake_t f[2];
    s_fake_start (&f[0], "127.0.0.1", 0);
    s_fake_start (&f[1], "127.0.0.1", 0);
    sigclient_t *c = s_client (f[0].endpoint, f[1].endpoint, 5000);
    sigclient_stream_t *s[STREAMS];
    for (int k = 0; k < STREAMS; k++) ck_assert_ptr_nonnull (s[k] = sigclient_stream_new (c, "seq", 100 + (uint64_t) k));
    float plain[3] = { 1, 2, 3 }, out[4];
    size_t n;
    /* Plain requests until both endpoints have had one: both round-robin connections are up. The
     * zmtp engine sends only on connections that are up, so until then every request went to the
     * one up first; libzmq alternates from the start. From here on both alternate. */
    int warmup_at[2] = { 0, 0 };
    struct timespec t0, now;
    clock_gettime (CLOCK_MONOTONIC, &t0);
    while (s_fake_count (&f[0]) == 0 || s_fake_count (&f[1]) == 0) {
        ck_assert_msg (sigclient_infer (c, "m", plain, 3, 1, out, 4, &n, NULL) == 0, "%s", sigclient_error (c));
        clock_gettime (CLOCK_MONOTONIC, &now);
        ck_assert_msg ((now.tv_sec - t0.tv_sec) * 1000 < WAIT_CAP_MS, "one endpoint took no request in %d ms: %d, %d",
                       WAIT_CAP_MS, s_fake_count (&f[0]), s_fake_count (&f[1]));
    }
    for (int e = 0; e < 2; e++) warmup_at[e] = s_fake_count (&f[e]);
    for (int step = 1; step <= STEPS; step++) {
        for (int k = 0; k < STREAMS; k++) s_step_ok (s[k], c, 100 + (uint64_t) k, (uint64_t) step, (float) step);
        for (int p = 0; p < PLAIN_PER_ROUND; p++)
            ck_assert_msg (sigclient_infer (c, "m", plain, 3, 1, out, 4, &n, NULL) == 0, "%s", sigclient_error (c));
    }
    /* plain requests alternate: half each */
    int plain_at[2] = { -warmup_at[0], -warmup_at[1] }, streams_at[2] = { 0, 0 };
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < f[e].n_seen; i++) plain_at[e] += f[e].seen[i].stream_id == 0;
    ck_assert_int_eq (plain_at[0], STEPS * PLAIN_PER_ROUND / 2);
    ck_assert_int_eq (plain_at[1], STEPS * PLAIN_PER_ROUND / 2);
    /* each stream: one endpoint, one connection, steps 1..STEPS in order */
    for (int k = 0; k < STREAMS; k++) {
        uint64_t id = 100 + (uint64_t) k;
        int at = -1;
        const seen_t *first = NULL;
        uint64_t next = 1;
        for (int e = 0; e < 2; e++)
            for (int i = 0; i < f[e].n_seen; i++) {
                const seen_t *got = &f[e].seen[i];
                if (got->stream_id != id) continue;
                ck_assert_msg (at == -1 || at == e, "stream %llu reached both endpoints", (unsigned long long) id);
                at = e;
                if (!first) first = got;
                ck_assert (got->identity_len == first->identity_len
                           && memcmp (got->identity, first->identity, got->identity_len) == 0);
                ck_assert_uint_eq (got->step, next++);
            }
        ck_assert_uint_eq (next, STEPS + 1);
        streams_at[at]++;
        ck_assert_str_eq (sigclient_stream_endpoint (c, id), f[at].endpoint);
        sigclient_stream_destroy (&s[k]);
    }
    /* the ids spread (the route is a hash of the id over the two addresses) */
    ck_assert_int_gt (streams_at[0], 0);
    ck_assert_int_gt (streams_at[1], 0);
    sigclient_destroy (&c);
    s_fake_stop (&f[0]);
    s_fake_stop (&f[1]);
}
END_TEST

START_TEST (stream_steps_are_never_retried)
{
    fake_t f;
    s_fake_start (&f, "127.0.0.1", 0);
    atomic_store (&f.silent, true);
    sigclient_t *c = s_client (f.endpoint, NULL, 300);
    ck_assert_int_eq (sigclient_set_retry (c, 3), 0);
    sigclient_stream_t *s = sigclient_stream_new (c, "seq", 5);
    float feat[3] = { 1, 2, 3 }, out[4];
    size_t n;
    ck_assert_int_eq (sigclient_stream_step (s, feat, 3, out, 4, &n, NULL), -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TIMEOUT);
    ck_assert_msg (strstr (sigclient_error (c), "timed out after 300 ms")
                   && strstr (sigclient_error (c), "(stream 5, step 1: stream steps are never retried; it may have been "
                                                   "applied)"), "%s", sigclient_error (c));
    ck_assert_uint_eq (sigclient_stream_next_step (s), 1);   /* unknown: the same number goes again */
    atomic_store (&f.silent, false);
    s_step_ok (s, c, 5, 1, 1.0f);
    /* answered on the same connection after the first: the fake has read everything sent before */
    ck_assert_int_eq (s_fake_count (&f), 2);
    ck_assert_uint_eq (f.seen[0].step, 1);
    ck_assert_uint_eq (f.seen[1].step, 1);
    ck_assert_uint_ne (f.seen[0].request_id, f.seen[1].request_id);
    /* the control: a plain request with the same setting is sent 1 + 3 times */
    atomic_store (&f.silent, true);
    ck_assert_int_eq (sigclient_infer (c, "seq", feat, 3, 1, out, 4, &n, NULL), -1);
    ck_assert_msg (strstr (sigclient_error (c), "(after 4 attempts)"), "%s", sigclient_error (c));
    ck_assert_int_eq (s_fake_wait (&f, 6), 6);
    sigclient_stream_destroy (&s);
    sigclient_destroy (&c);
    s_fake_stop (&f);
}
END_TEST

/* ---- dns:// ---- */

static const char *s_fleet[2];
static size_t s_fleet_count;

static int s_fleet_resolver (const char *name, char (*addrs)[SIGCLIENT_ADDRESS_MAX], size_t cap, char *error,
                             size_t error_cap, void *arg)
{
    (void) arg;
    if (strcmp (name, "fleet") != 0) {
        snprintf (error, error_cap, "test resolver: no %s", name);
        return -1;
    }
    size_t n = 0;
    for (; n < s_fleet_count && n < cap; n++) snprintf (addrs[n], SIGCLIENT_ADDRESS_MAX, "%s", s_fleet[n]);
    return (int) n;
}

START_TEST (a_vanished_address_fails_its_streams_and_moves_none)
{
    int port = tu_free_port ();
    fake_t a, b;
    s_fake_start (&a, "127.0.0.1", port);
    s_fake_start (&b, "127.0.0.2", port);
    s_fleet[0] = "127.0.0.1";
    s_fleet[1] = "127.0.0.2";
    s_fleet_count = 2;
    sigclient_set_resolver (s_fleet_resolver, NULL);
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "dns://fleet:%d", port);
    sigclient_t *c = s_client (endpoint, NULL, 5000);
    /* a stream on each address (which ids go where is the hash's; look, do not guess) */
    uint64_t on[2] = { 0, 0 };
    for (uint64_t id = 1; id <= 64 && !(on[0] && on[1]); id++) {
        const char *where = sigclient_stream_endpoint (c, id);
        ck_assert_ptr_nonnull (where);
        int e = strcmp (where, a.endpoint) == 0 ? 0 : 1;
        ck_assert_str_eq (where, e ? b.endpoint : a.endpoint);
        if (!on[e]) on[e] = id;
    }
    ck_assert (on[0] && on[1]);
    sigclient_stream_t *sa = sigclient_stream_new (c, "seq", on[0]), *sb = sigclient_stream_new (c, "seq", on[1]);
    s_step_ok (sa, c, on[0], 1, 1.0f);
    s_step_ok (sb, c, on[1], 1, 1.0f);
    /* 127.0.0.1 leaves the name: its stream fails at the first call after the next resolution */
    s_fleet[0] = "127.0.0.2";
    s_fleet_count = 1;
    sigclient_set_resolve_interval (c, 1);
    float feat[3] = { 1, 2, 3 }, out[4];
    size_t n;
    int rc = 0;
    for (int waited = 0; waited < WAIT_CAP_MS && (rc = sigclient_stream_step (sa, feat, 3, out, 4, &n, NULL)) == 0;
         waited++)
        usleep (1000);
    ck_assert_int_eq (rc, -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_STREAM_GONE);
    ck_assert_str_eq (sigclient_status_name (SIGCLIENT_ERR_STREAM_GONE), "ERR_STREAM_GONE");
    char want[160];
    snprintf (want, sizeof want, "stream %llu: its server %s is no longer listed", (unsigned long long) on[0],
              a.endpoint);
    ck_assert_msg (strstr (sigclient_error (c), want), "%s", sigclient_error (c));
    int at_a = s_fake_count (&a);
    /* the other stream goes on; the lost one, forgotten, starts again on a listed address */
    s_step_ok (sb, c, on[1], 2, 2.0f);
    sigclient_forget_stream (c, on[0]);
    sigclient_stream_set_next_step (sa, 1);
    s_step_ok (sa, c, on[0], 1, 5.0f);
    ck_assert_str_eq (sigclient_stream_endpoint (c, on[0]), b.endpoint);
    ck_assert_int_eq (s_fake_count (&a), at_a);     /* nothing more went to the vanished address */
    sigclient_stream_destroy (&sa);
    sigclient_stream_destroy (&sb);
    sigclient_destroy (&c);
    sigclient_set_resolver (NULL, NULL);
    s_fake_stop (&a);
    s_fake_stop (&b);
}
END_TEST

/* ---- the CLI ---- */

typedef struct {
    int status;
    char out[16384], err[8192];
} cli_t;

/* Runs BUILD/sigclient ARGS (stdin from STDIN_PATH when given). */
static void s_cli (cli_t *r, const char *args, const char *stdin_path)
{
    char err_path[2200], cmd[8192];
    snprintf (err_path, sizeof err_path, "%s/cli.stderr", s_dir);
    snprintf (cmd, sizeof cmd, "'%s/sigclient' --engine %s %s <'%s' 2>'%s'", tu_build_dir (),
              sigclient_engine_name (s_engine), args, stdin_path ? stdin_path : "/dev/null", err_path);
    FILE *p = popen (cmd, "r");
    ck_assert_ptr_nonnull (p);
    size_t n = fread (r->out, 1, sizeof r->out - 1, p);
    r->out[n] = 0;
    int st = pclose (p);
    FILE *e = fopen (err_path, "r");
    ck_assert_ptr_nonnull (e);
    n = fread (r->err, 1, sizeof r->err - 1, e);
    r->err[n] = 0;
    fclose (e);
    r->status = WIFEXITED (st) ? WEXITSTATUS (st) : -1;
}

#define EXPECT_CLI(r, code) \
    ck_assert_msg ((r)->status == (code), "sigclient exited %d, expected %d\nstdout:\n%s\nstderr:\n%s", (r)->status, \
                   (code), (r)->out, (r)->err)
#define EXPECT_IN(text, fragment) ck_assert_msg (strstr ((text), (fragment)) != NULL, "\"%s\" not in:\n%s", (fragment), (text))

START_TEST (cli_stream_numbers_steps_from_step)
{
    fake_t f;
    s_fake_start (&f, "127.0.0.1", 0);
    char *steps = tu_write_file (s_dir, "three-steps.txt", "# stream 7\n1 2 3\n4 5 6\n7 8 9\n", -1);
    char *ragged = tu_write_file (s_dir, "ragged.txt", "1 2 3\n4 5 6 7\n", -1);
    char args[4096];
    cli_t r;
    snprintf (args, sizeof args, "--endpoint %s --retry 2 infer --model seq --stream 7 --step 5 --file '%s'",
              f.endpoint, steps);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 0);
    ck_assert_str_eq (r.out, "7 5\n7 6\n7 7\n");
    EXPECT_IN (r.err, "status=STATUS_OK");
    EXPECT_IN (r.err, " stream_id=7 step=7\n");
    ck_assert_int_eq (s_fake_wait (&f, 3), 3);      /* the CLI has exited: everything it sent is here */
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq (f.seen[i].stream_id, 7);
        ck_assert_uint_eq (f.seen[i].step, 5 + (uint64_t) i);
        ck_assert_uint_eq (f.seen[i].n_features, 3);
        ck_assert_float_eq (f.seen[i].features[0], (float) (1 + 3 * i));
    }
    /* --stdin, numbered from 1 by default; --random N --repeat K: K steps */
    snprintf (args, sizeof args, "--endpoint %s infer --model seq --stream 8 --stdin", f.endpoint);
    s_cli (&r, args, steps);
    EXPECT_CLI (&r, 0);
    ck_assert_str_eq (r.out, "8 1\n8 2\n8 3\n");
    snprintf (args, sizeof args, "--endpoint %s infer --model seq --stream 9 --random 3 --repeat 4", f.endpoint);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 0);
    ck_assert_str_eq (r.out, "9 1\n9 2\n9 3\n9 4\n");
    EXPECT_IN (r.err, "repeat=4 warmup=0 round_trip_us p50=");
    /* a step the server refuses: exit 1, naming the step; the steps before it printed */
    char *nan_step = tu_write_file (s_dir, "nan-step.txt", "1 2 3\nnan 0 0\n", -1);
    snprintf (args, sizeof args, "--endpoint %s infer --model seq --stream 10 --file '%s'", f.endpoint, nan_step);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 1);
    ck_assert_str_eq (r.out, "10 1\n");
    EXPECT_IN (r.err, "sigclient: stream 10 step 2: STATUS_BAD_VALUE: features[0] (row 0, column 0) is NaN");
    /* values that are not whole steps of the model's step_size (3, from the model list) */
    snprintf (args, sizeof args, "--endpoint %s infer --model seq --stream 11 --file '%s'", f.endpoint, ragged);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 2);
    EXPECT_IN (r.err, "ragged.txt: 7 values are not a whole number of steps of model \"seq\" (step_size 3): "
                      "2 steps and 1 values over");
    /* usage errors */
    static const char *const usage[][2] = {
        { "infer --model seq --step 2 --random 3", "--step is only for --stream" },
        { "infer --model seq --stream 3 --rows 2 --random 3", "--stream takes no --rows" },
        { "infer --model seq --stream 3 --repeat 2 --stdin", "--repeat and --warmup with --stream are for --random" },
        { "infer --model seq --stream 0 --random 3", "bad --stream '0'" },
    };
    for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
        snprintf (args, sizeof args, "--endpoint %s %s", f.endpoint, usage[i][0]);
        s_cli (&r, args, NULL);
        EXPECT_CLI (&r, 2);
        EXPECT_IN (r.err, usage[i][1]);
    }
    /* the models table shows the type, window and step size */
    snprintf (args, sizeof args, "--endpoint %s models", f.endpoint);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 0);
    EXPECT_IN (r.out, "available  type  window  step_size\n");
    EXPECT_IN (r.out, "yes        lstm       4          3\n");
    ck_assert_int_eq (s_fake_count (&f), 3 + 3 + 4 + 2);
    free (steps);
    free (ragged);
    free (nan_step);
    s_fake_stop (&f);
}
END_TEST

/* ---- against the real sigserve ---- */

static char s_endpoint[64];
static pid_t s_server = -1;
static weights_t *s_weights;
static const lstm_weights_t *s_w;

static void s_server_setup (void)
{
    char path[2200], err[512];
    snprintf (path, sizeof path, "%s/seq.safetensors", s_dir);
    lstm_shape_t shape = { .layers = LAYERS, .step_size = STEP, .hidden = HIDDEN, .out = OUTS, .window = WINDOW,
                           .head_act = ACTIVATION_TANH };
    model_config_t cfg;
    s_weights = lstm_random_weights (path, &shape, 77, &cfg, err, sizeof err);
    ck_assert_msg (s_weights != NULL, "%s", err);
    s_w = s_weights->lstm;
    snprintf (s_endpoint, sizeof s_endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    char json[4096];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"log_level\": \"warn\", \"stats_interval_s\": 0 },"
              "  \"models\": [ { \"name\": \"seq\", \"type\": \"lstm\", \"backend\": \"cpu\", \"weights\": \"seq.safetensors\","
              "    \"lstm\": \"lstm.\", \"window\": %d, \"head\": { \"weight\": \"head.weight\", \"bias\": \"head.bias\","
              "    \"activation\": \"tanh\" }, \"instances\": 2, \"max_rows\": 3, \"max_streams\": 64 },"
              "   { \"name\": \"tick_mlp\", \"backend\": \"cpu\", \"max_rows\": 8, \"weights\": \"%s/models/tick_mlp.safetensors\","
              "    \"layers\": [ { \"weight\": \"0.weight\" }, { \"weight\": \"2.weight\" }, { \"weight\": \"4.weight\" } ] } ] }",
              s_endpoint, WINDOW, tu_build_abs ());
    char *cp = tu_write_file (s_dir, "lstm.json", json, -1);
    s_server = tu_server_start (cp, s_endpoint, 30000);
    free (cp);
    ck_assert_msg (s_server > 0, "sigserve did not become ready");
}

static void s_server_teardown (void)
{
    int rc = tu_server_stop (s_server);
    weights_destroy (&s_weights);
    ck_assert_int_eq (rc, 0);
}

/* Outputs of steps with their references and error bounds, checked together. */
typedef struct {
    float out[4096];
    double ref[4096], bound[4096];
    size_t n;
} pool_t;

static void s_pool_add (pool_t *p, const float *steps, uint64_t count, const float *out)
{
    ck_assert_uint_le (p->n + OUTS, sizeof p->out / sizeof *p->out);
    ck_assert_int_eq (tol_lstm_stream (s_w, WEIGHT_DTYPE_F32, steps, count, p->ref + p->n, p->bound + p->n), 0);
    memcpy (p->out + p->n, out, OUTS * sizeof *out);
    p->n += OUTS;
}

static void s_pool_check (const pool_t *p, const char *what)
{
    ck_assert_uint_ge (p->n, 4);
    TOL_ASSERT (p->out, p->ref, p->bound, p->n, OUTS, "%s, %zu outputs", what, p->n);
}

START_TEST (list_models_describes_the_lstm)
{
    sigclient_t *c = s_client (s_endpoint, NULL, 5000);
    sigclient_model_info_t m[4];
    size_t count = 0;
    ck_assert_int_eq (sigclient_list_models (c, m, 4, &count), 0);
    ck_assert_uint_eq (count, 2);
    ck_assert_str_eq (m[0].name, "seq");
    ck_assert_str_eq (m[0].type, "lstm");
    ck_assert_uint_eq (m[0].window, WINDOW);
    ck_assert_uint_eq (m[0].step_size, STEP);
    ck_assert_uint_eq (m[0].input_size, WINDOW * STEP);
    ck_assert_uint_eq (m[0].output_size, OUTS);
    ck_assert_str_eq (m[1].type, "mlp");
    ck_assert_uint_eq (m[1].window, 0);
    ck_assert_uint_eq (m[1].step_size, 0);
    sigclient_destroy (&c);
}
END_TEST

START_TEST (library_streams_match_the_reference)
{
    /* two streams through the helper and one through the raw call, 2.5 windows each, interleaved */
    enum { STEPS = 5 * WINDOW / 2, STREAMS = 3 };
    static float steps[STREAMS][STEPS * STEP];
    uint64_t seed = 4242;
    for (int k = 0; k < STREAMS; k++)
        for (int i = 0; i < STEPS * STEP; i++) steps[k][i] = rng_uniform (&seed, -1, 1);
    sigclient_t *c = s_client (s_endpoint, NULL, 5000);
    sigclient_stream_t *s[2] = { sigclient_stream_new (c, "seq", 21), sigclient_stream_new (c, "seq", 22) };
    static pool_t pool;
    pool.n = 0;
    for (int t = 0; t < STEPS; t++)
        for (int k = 0; k < STREAMS; k++) {
            float out[OUTS + 1];
            size_t n = 0;
            sigclient_result_t r;
            const float *f = steps[k] + (size_t) t * STEP;
            int rc = k < 2 ? sigclient_stream_step (s[k], f, STEP, out, OUTS + 1, &n, &r)
                           : sigclient_infer_stream (c, "seq", 23, (uint64_t) t + 1, f, STEP, out, OUTS + 1, &n, &r);
            ck_assert_msg (rc == 0, "stream %d step %d: %s", k, t + 1, sigclient_error (c));
            ck_assert_uint_eq (n, OUTS);
            ck_assert_uint_eq (r.rows, 1);
            s_pool_add (&pool, steps[k], (uint64_t) t + 1, out);
        }
    s_pool_check (&pool, "libsigclient streams");
    ck_assert_uint_eq (sigclient_stream_next_step (s[0]), STEPS + 1);
    /* the wrong step size: the server's BAD_SHAPE, the step not applied (the number stays) */
    float f[STEP + 1] = { 0 }, out[4];
    ck_assert_int_eq (sigclient_stream_step (s[0], f, STEP + 1, out, 4, NULL, NULL), -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_BAD_SHAPE);
    ck_assert_msg (strstr (sigclient_error (c), "expected one step of 8 values for model \"seq\" (stream_id 21)"), "%s",
                   sigclient_error (c));
    ck_assert_uint_eq (sigclient_stream_next_step (s[0]), STEPS + 1);
    sigclient_stream_destroy (&s[0]);
    sigclient_stream_destroy (&s[1]);
    sigclient_destroy (&c);
}
END_TEST

/* Parses lines of OUTS numbers into OUT; returns the line count. */
static size_t s_parse_lines (const char *text, float *out, size_t max_lines)
{
    size_t lines = 0;
    const char *p = text;
    while (*p && lines < max_lines) {
        for (int o = 0; o < OUTS; o++) {
            char *end;
            out[lines * OUTS + (size_t) o] = strtof (p, &end);
            ck_assert_msg (end != p, "not a number at \"%s\"", p);
            p = end;
        }
        ck_assert_msg (*p == '\n', "line %zu has more than %d outputs: \"%s\"", lines + 1, OUTS, p);
        p++;
        lines++;
    }
    ck_assert_msg (*p == 0, "unparsed output: \"%s\"", p);
    return lines;
}

START_TEST (cli_streams_match_the_reference)
{
    enum { STEPS = 20 };
    static float steps[STEPS * STEP], got[STEPS * OUTS];
    uint64_t seed = 99;
    char text[STEPS * STEP * 20 + 64];
    size_t used = (size_t) snprintf (text, sizeof text, "# %d steps of %d\n", STEPS, STEP);
    for (int i = 0; i < STEPS * STEP; i++) {
        steps[i] = rng_uniform (&seed, -1, 1);
        used += (size_t) snprintf (text + used, sizeof text - used, "%.9g%s", (double) steps[i],
                                   i % STEP == STEP - 1 ? "\n" : " ");
    }
    char *path = tu_write_file (s_dir, "steps.txt", text, -1);
    char args[4096];
    cli_t r;
    static pool_t pool;
    const char *const sources[2] = { "--file", "--stdin" };
    for (int k = 0; k < 2; k++) {
        pool.n = 0;
        if (k == 0)
            snprintf (args, sizeof args, "--endpoint %s infer --model seq --stream %d --file '%s'", s_endpoint, 31, path);
        else
            snprintf (args, sizeof args, "--endpoint %s infer --model seq --stream %d --step 1 --stdin", s_endpoint, 32);
        s_cli (&r, args, k ? path : NULL);
        EXPECT_CLI (&r, 0);
        ck_assert_uint_eq (s_parse_lines (r.out, got, STEPS), STEPS);
        for (int t = 0; t < STEPS; t++) s_pool_add (&pool, steps, (uint64_t) t + 1, got + t * OUTS);
        s_pool_check (&pool, sources[k]);
    }
    /* --random 8 --repeat 6: the steps are the seed's values in order */
    snprintf (args, sizeof args, "--endpoint %s infer --model seq --stream 33 --random %d --repeat 6 --seed 5",
              s_endpoint, STEP);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 0);
    ck_assert_uint_eq (s_parse_lines (r.out, got, 6), 6);
    uint64_t state = 5;
    for (int i = 0; i < 6 * STEP; i++) steps[i] = rng_uniform (&state, -1.0f, 1.0f);
    pool.n = 0;
    for (int t = 0; t < 6; t++) s_pool_add (&pool, steps, (uint64_t) t + 1, got + t * OUTS);
    s_pool_check (&pool, "--random --repeat");
    free (path);
}
END_TEST

START_TEST (cli_hints_after_bad_shape)
{
    char args[4096];
    cli_t r;
    /* 1024 values for a 512-input model, no --rows: the server's text, then the hint */
    static char text[1024 * 4 + 16];
    size_t used = 0;
    for (int i = 0; i < 1024; i++) used += (size_t) snprintf (text + used, sizeof text - used, "0.%d\n", i % 10);
    char *path = tu_write_file (s_dir, "1024.txt", text, -1);
    snprintf (args, sizeof args, "--endpoint %s infer --model tick_mlp --file '%s'", s_endpoint, path);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 1);
    EXPECT_IN (r.err, "sigclient: STATUS_BAD_SHAPE: features: expected rows x input size = 1 x 512 = 512 values for "
                      "model \"tick_mlp\", got 1024\n"
                      "sigclient: hint: 1024 values are 2 rows of model \"tick_mlp\"'s 512 inputs: add --rows 2\n");
    /* --random N is per row: the hint says so */
    snprintf (args, sizeof args, "--endpoint %s infer --model tick_mlp --random 1536", s_endpoint);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 1);
    EXPECT_IN (r.err, "sigclient: hint: --random gives N features per row, and model \"tick_mlp\" takes 512: "
                      "--random 512 --rows 3\n");
    /* with --rows given, no hint: the count is what the user asked for */
    snprintf (args, sizeof args, "--endpoint %s infer --model tick_mlp --file '%s' --rows 3", s_endpoint, path);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 1);
    ck_assert_msg (!strstr (r.err, "hint"), "%s", r.err);
    /* one LSTM step without --stream */
    snprintf (args, sizeof args, "--endpoint %s infer --model seq --random %d", s_endpoint, STEP);
    s_cli (&r, args, NULL);
    EXPECT_CLI (&r, 1);
    EXPECT_IN (r.err, "sigclient: hint: 8 values are one step of LSTM model \"seq\" (window 16 x step_size 8): "
                      "add --stream ID to send them as a step of stream ID\n");
    free (path);
}
END_TEST

static void s_dir_setup (void)
{
    char *dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (dir);
    snprintf (s_dir, sizeof s_dir, "%s", dir);
    free (dir);
}

static void s_dir_teardown (void)
{
    tu_remove_tree (s_dir);
}

static void s_all_setup (void)
{
    s_dir_setup ();
    s_server_setup ();
}

static void s_all_teardown (void)
{
    s_server_teardown ();
    s_dir_teardown ();
}

int main (void)
{
    Suite *s = suite_create ("client-stream");
    static const struct { const char *wire, *real; void (*engine) (void); } engines[] = {
        { "on the wire, zmtp", "sigserve, zmtp", s_engine_zmtp },
        { "on the wire, libzmq", "sigserve, libzmq", s_engine_libzmq },
    };
    for (size_t e = 0; e < 2; e++) {
        TCase *wire = tcase_create (engines[e].wire);
        tcase_add_unchecked_fixture (wire, s_dir_setup, s_dir_teardown);
        tcase_add_checked_fixture (wire, engines[e].engine, NULL);
        tcase_set_timeout (wire, 60);
        tcase_add_test (wire, stream_steps_are_numbered_from_1_on_the_wire);
        tcase_add_test (wire, a_stream_sticks_to_one_endpoint_while_round_robin_alternates);
        tcase_add_test (wire, stream_steps_are_never_retried);
        tcase_add_test (wire, a_vanished_address_fails_its_streams_and_moves_none);
        tcase_add_test (wire, cli_stream_numbers_steps_from_step);
        suite_add_tcase (s, wire);
        TCase *real = tcase_create (engines[e].real);
        tcase_add_unchecked_fixture (real, s_all_setup, s_all_teardown);
        tcase_add_checked_fixture (real, engines[e].engine, NULL);
        tcase_set_timeout (real, 60);
        tcase_add_test (real, list_models_describes_the_lstm);
        tcase_add_test (real, library_streams_match_the_reference);
        tcase_add_test (real, cli_streams_match_the_reference);
        tcase_add_test (real, cli_hints_after_bad_shape);
        suite_add_tcase (s, real);
    }
    return tu_run_suite (s);
}
