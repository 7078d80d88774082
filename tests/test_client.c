/* libsigclient against the real sigserve binary over tcp loopback: outputs checked against the
 * float64 reference, result fields, every server error status as the client reports it, capacity
 * errors, pipelining across two endpoints, health, list_models, timeouts against a dead endpoint,
 * the engine's API and the endpoints neither engine takes, raw frames, and CURVE (a client the
 * server allows is served, the others time out alike; CURVE on one side only is told at once).
 * test_client_cli.c has the sigclient CLI (tests/client_tests.h: the fixture and the helpers the two
 * share).
 *
 * Every case runs twice, once per engine (a TCase each: zmtp, libzmq), through
 * sigclient_new_engine; what differs between the engines (a request sent while an endpoint is down,
 * a port past 65535) is asserted for each, exactly.
 *
 * Every output is within its forward error bound of the reference (tolerance.h): a single output
 * near zero is ill-conditioned (float32 rounding in a 512-term dot product is about 1e-8
 * absolute, so a relative 1e-5 fails for |output| < ~1e-3, about 1% of random inputs), and the
 * bound, made of the magnitudes the output came from, says so. */
#define _GNU_SOURCE
#include "client_tests.h"

#include <zmq.h>

/* ---- synchronous infer ---- */

static void s_expect_ok_result (const sigclient_result_t *r, uint64_t id, uint32_t rows, const char *version)
{
    ck_assert_uint_eq (r->request_id, id);
    ck_assert_int_eq (r->status, SIGCLIENT_OK);
    ck_assert_uint_eq (r->rows, rows);
    ck_assert_str_eq (r->model_version, version);
    ck_assert_msg (strcmp (r->backend, "cpu") == 0 || strcmp (r->backend, "cuda") == 0, "backend \"%s\"", r->backend);
    ck_assert_str_eq (r->error, "");
    ck_assert_uint_gt (r->compute_ns, 0);
    ck_assert_uint_ge (r->server_ns, r->compute_ns);
    ck_assert_uint_ge (r->server_ns, r->queue_ns);
    ck_assert_uint_lt (r->server_ns, 5000000000ull);
}

/* REQUESTS requests of ROWS rows to MODEL on s_client; outputs compared together. */
static void s_infer_and_check (const char *model, const char *version, uint32_t rows, int requests, uint64_t *next_id)
{
    const weights_t *w = s_weights (model);
    collected_t c = { 0 };
    for (int i = 0; i < requests; i++) {
        size_t n = (size_t) rows * w->input_size;
        float *in = malloc (n * sizeof *in);
        float out[8 * ODD_OUT + 1];
        s_random (in, n);
        sigclient_result_t r;
        memset (&r, 0xa5, sizeof r);
        size_t n_out = 12345;
        int rc = sigclient_infer (s_client, model, in, n, rows, out, sizeof out / sizeof *out, &n_out, &r);
        ck_assert_msg (rc == 0, "%s: %s", model, sigclient_error (s_client));
        ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_OK);
        ck_assert_str_eq (sigclient_error (s_client), "");
        s_expect_ok_result (&r, (*next_id)++, rows, version);
        s_collect (&c, w, in, rows, out, n_out);
        free (in);
    }
    char what[128];
    snprintf (what, sizeof what, "%s, %d requests of %u rows", model, requests, rows);
    s_expect_collected_match (&c, what);
}

START_TEST (infer_rows_1_matches_reference)
{
    uint64_t id = 1;   /* a new client's first request id */
    s_infer_and_check ("tick_mlp", "1", 1, 8, &id);
    s_infer_and_check ("odd", "7b", 1, 8, &id);
    /* rows 0 means 1 */
    float in[TICK_IN], out[4];
    s_random (in, TICK_IN);
    size_t n_out = 0;
    sigclient_result_t r;
    ck_assert_int_eq (sigclient_infer (s_client, "tick_mlp", in, TICK_IN, 0, out, 4, &n_out, &r), 0);
    ck_assert_uint_eq (n_out, 1);
    s_expect_ok_result (&r, id, 1, "1");
    /* RESULT and N_OUTPUTS may be NULL */
    ck_assert_int_eq (sigclient_infer (s_client, "tick_mlp", in, TICK_IN, 1, out, 4, NULL, NULL), 0);
}
END_TEST

START_TEST (infer_rows_5_matches_reference)
{
    uint64_t id = 1;
    s_infer_and_check ("tick_mlp", "1", 5, 3, &id);
    s_infer_and_check ("odd", "7b", 5, 3, &id);
    s_infer_and_check ("tick_mlp", "1", 8, 1, &id);   /* max_rows */
    s_infer_and_check ("odd", "7b", 7, 1, &id);
}
END_TEST

/* ---- server errors as the client reports them ---- */

static uint64_t s_error_id;   /* the id of the last request s_expect_server_error sent */

static void s_expect_server_error (const char *model, const float *in, size_t n, uint32_t rows, int status,
                                   const char *text)
{
    float out[64];
    size_t n_out = 77;
    sigclient_result_t r;
    memset (&r, 0, sizeof r);
    ck_assert_int_eq (sigclient_infer (s_client, model, in, n, rows, out, 64, &n_out, &r), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), status);
    ck_assert_int_eq (r.status, status);
    ck_assert_msg (strcmp (r.error, text) == 0, "result.error \"%s\", expected \"%s\"", r.error, text);
    char expected[1024];
    snprintf (expected, sizeof expected, "server replied %s: %s", sigclient_status_name (status), text);
    ck_assert_msg (strcmp (sigclient_error (s_client), expected) == 0, "sigclient_error \"%s\", expected \"%s\"",
                   sigclient_error (s_client), expected);
    ck_assert_ptr_nonnull (strstr (sigclient_error (s_client), text));
    ck_assert_uint_eq (n_out, 0);
    ck_assert_uint_eq (r.request_id, ++s_error_id);   /* echoed: errors take ids like any request */
}

START_TEST (server_error_statuses)
{
    float f[8 * TICK_IN];
    s_random (f, 8 * TICK_IN);
    s_expect_server_error ("nope", f, TICK_IN, 1, SIGCLIENT_UNKNOWN_MODEL,
                           "model: \"nope\" is not served here (served: tick_mlp, odd)");
    ck_assert_str_eq (sigclient_status_name (sigclient_last_status (s_client)), "STATUS_UNKNOWN_MODEL");
    s_expect_server_error ("tick_mlp", f, 511, 1, SIGCLIENT_BAD_SHAPE,
                           "features: expected rows x input size = 1 x 512 = 512 values for model \"tick_mlp\", got 511");
    s_expect_server_error ("odd", f, 2 * ODD_IN, 3, SIGCLIENT_BAD_SHAPE,
                           "features: expected rows x input size = 3 x 33 = 99 values for model \"odd\", got 66");
    s_expect_server_error ("odd", f, 100, 3, SIGCLIENT_BAD_SHAPE,
                           "features: 100 values do not divide into rows=3 rows of 33 (model \"odd\" takes 33 features per row)");
    s_expect_server_error ("odd", f, 8 * ODD_IN, 8, SIGCLIENT_BAD_SHAPE,
                           "rows: expected 1 to 7 for model \"odd\", got 8");
    f[37] = NAN;
    s_expect_server_error ("tick_mlp", f, TICK_IN, 1, SIGCLIENT_BAD_VALUE,
                           "features[37] (row 0, column 37) is NaN; every feature must be finite");
    f[37] = 0.5f;
    f[ODD_IN + 4] = INFINITY;
    s_expect_server_error ("odd", f, 2 * ODD_IN, 2, SIGCLIENT_BAD_VALUE,
                           "features[37] (row 1, column 4) is Inf; every feature must be finite");
    ck_assert_str_eq (sigclient_status_name (sigclient_last_status (s_client)), "STATUS_BAD_VALUE");
    /* After the errors: request ids kept counting, and a good request succeeds with a clean state. */
    float out[4];
    size_t n_out;
    sigclient_result_t r;
    s_random (f, TICK_IN);
    ck_assert_int_eq (sigclient_infer (s_client, "tick_mlp", f, TICK_IN, 1, out, 4, &n_out, &r), 0);
    ck_assert_uint_eq (r.request_id, 8);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_OK);
    ck_assert_str_eq (sigclient_error (s_client), "");
    /* The client's own argument errors never reach the server. */
    ck_assert_int_eq (sigclient_infer (s_client, NULL, f, TICK_IN, 1, out, 4, &n_out, &r), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_ERR_ARGUMENT);
    ck_assert_int_eq (sigclient_infer (s_client, "tick_mlp", NULL, TICK_IN, 1, out, 4, &n_out, &r), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_ERR_ARGUMENT);
}
END_TEST

START_TEST (capacity_errors)
{
    float in[5 * TICK_IN], out[5];
    s_random (in, 5 * TICK_IN);
    size_t n_out = 0;
    sigclient_result_t r;
    memset (&r, 0, sizeof r);
    ck_assert_int_eq (sigclient_infer (s_client, "tick_mlp", in, 5 * TICK_IN, 5, out, 3, &n_out, &r), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_ERR_CAPACITY);
    ck_assert_uint_eq (n_out, 5);                    /* the count needed */
    ck_assert_int_eq (r.status, SIGCLIENT_OK);       /* the server's part went well */
    ck_assert_uint_eq (r.request_id, 1);
    ck_assert_uint_eq (r.rows, 5);
    ck_assert_ptr_nonnull (strstr (sigclient_error (s_client), "more than the buffer's 3"));
    /* with room, the same request succeeds */
    ck_assert_int_eq (sigclient_infer (s_client, "tick_mlp", in, 5 * TICK_IN, 5, out, 5, &n_out, &r), 0);
    ck_assert_uint_eq (r.request_id, 2);
    collected_t c = { 0 };
    s_collect (&c, s_fx.tick, in, 5, out, n_out);
    s_expect_collected_match (&c, "tick_mlp after a capacity error");

    /* pipelined: the reply is consumed, RESULT filled */
    uint64_t id = 0;
    ck_assert_int_eq (sigclient_send_infer (s_client, "odd", in, 2 * ODD_IN, 2, 0, &id), 0);
    ck_assert_uint_eq (id, 3);
    ck_assert_int_eq (sigclient_recv_infer (s_client, out, 5, &n_out, &r), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_ERR_CAPACITY);
    ck_assert_uint_eq (n_out, 2 * ODD_OUT);
    ck_assert_uint_eq (r.request_id, 3);
    ck_assert_int_eq (r.status, SIGCLIENT_OK);

    /* list_models: the first CAP entries, the total in *COUNT */
    sigclient_model_info_t models[1];
    size_t count = 0;
    ck_assert_int_eq (sigclient_list_models (s_client, models, 1, &count), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_ERR_CAPACITY);
    ck_assert_uint_eq (count, 2);
    ck_assert_str_eq (models[0].name, "tick_mlp");
    ck_assert_int_eq (sigclient_list_models (s_client, NULL, 0, &count), -1);
    ck_assert_uint_eq (count, 2);

    /* recv_raw: a frame over CAP is consumed, *LEN its size */
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__HealthRequest h = SIGSERVE__V1__HEALTH_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_HEALTH;
    req.health = &h;
    uint8_t buf[64];
    size_t len = sigserve__v1__request__pack (&req, buf);
    ck_assert_int_eq (sigclient_send_raw (s_client, buf, len), 0);
    size_t got = 0;
    ck_assert_int_eq (sigclient_recv_raw (s_client, buf, 2, &got), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_ERR_CAPACITY);
    ck_assert_uint_gt (got, 2);
    /* nothing left behind: the next call gets its own reply */
    sigclient_health_t health;
    ck_assert_int_eq (sigclient_health (s_client, &health), 0);
    ck_assert (health.ready);
}
END_TEST

/* ---- pipelining across both endpoints ---- */

#define PIPE_N 500

START_TEST (pipelined_500_matched_by_request_id)
{
    /* s_client is connected to both endpoints: ZeroMQ spreads the requests across them. Every
     * request has its own features, so a reply matched to the wrong request would not match. */
    static float in[PIPE_N][2 * TICK_IN];
    static uint32_t rows_of[PIPE_N];
    static const char *model_of[PIPE_N];
    static float out[PIPE_N][2 * ODD_OUT];
    static size_t n_out_of[PIPE_N];
    static char seen[PIPE_N];
    memset (seen, 0, sizeof seen);
    uint64_t first = 0;
    for (int i = 0; i < PIPE_N; i++) {
        model_of[i] = i % 2 ? "odd" : "tick_mlp";
        rows_of[i] = i % 5 == 0 ? 2 : 1;
        size_t n = rows_of[i] * s_weights (model_of[i])->input_size;
        s_random (in[i], n);
        uint64_t id = 0;
        ck_assert_msg (sigclient_send_infer (s_client, model_of[i], in[i], n, rows_of[i], 0, &id) == 0, "%s",
                       sigclient_error (s_client));
        if (i == 0) first = id;
        ck_assert_uint_eq (id, first + (uint64_t) i);
    }
    ck_assert_uint_eq (first, 1);
    for (int k = 0; k < PIPE_N; k++) {
        float buf[2 * ODD_OUT];
        size_t n_out = 0;
        sigclient_result_t r;
        ck_assert_msg (sigclient_recv_infer (s_client, buf, 2 * ODD_OUT, &n_out, &r) == 0, "reply %d: %s", k,
                       sigclient_error (s_client));
        ck_assert_msg (r.request_id >= first && r.request_id < first + PIPE_N, "unexpected request_id %llu",
                       (unsigned long long) r.request_id);
        int i = (int) (r.request_id - first);
        ck_assert_msg (!seen[i], "request_id %llu answered twice", (unsigned long long) r.request_id);
        seen[i] = 1;
        ck_assert_msg (r.status == SIGCLIENT_OK, "request %d: %s %s", i, sigclient_status_name (r.status), r.error);
        ck_assert_uint_eq (r.rows, rows_of[i]);
        ck_assert_str_eq (r.model_version, i % 2 ? "7b" : "1");
        memcpy (out[i], buf, n_out * sizeof *buf);
        n_out_of[i] = n_out;
    }
    collected_t tick = { 0 }, odd = { 0 };
    for (int i = 0; i < PIPE_N; i++)
        s_collect (i % 2 ? &odd : &tick, s_weights (model_of[i]), in[i], rows_of[i], out[i], n_out_of[i]);
    s_expect_collected_match (&tick, "pipelined tick_mlp");
    s_expect_collected_match (&odd, "pipelined odd");
    /* no reply left over */
    ck_assert_int_eq (sigclient_set_timeout (s_client, 100), 0);
    float buf[8];
    size_t n_out;
    sigclient_result_t r;
    ck_assert_int_eq (sigclient_recv_infer (s_client, buf, 8, &n_out, &r), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_ERR_TIMEOUT);
}
END_TEST

/* Each endpoint on its own: both serve, and a pipelined error comes back as a status, not a failure. */
START_TEST (pipelined_each_endpoint_and_error_status)
{
    for (int e = 0; e < 2; e++) {
        sigclient_t *c = s_new_client (s_fx.endpoint[e], 5000);
        float in[4][TICK_IN];
        for (int i = 0; i < 4; i++) {
            s_random (in[i], TICK_IN);
            ck_assert_int_eq (sigclient_send_infer (c, "tick_mlp", in[i], TICK_IN, 1, 0, NULL), 0);
        }
        ck_assert_int_eq (sigclient_send_infer (c, "nope", in[0], TICK_IN, 1, 0, NULL), 0);
        collected_t col = { 0 };
        float out[4];
        int errors = 0;
        for (int k = 0; k < 5; k++) {
            size_t n_out;
            sigclient_result_t r;
            ck_assert_int_eq (sigclient_recv_infer (c, out, 4, &n_out, &r), 0);
            if (r.request_id == 5) {
                ck_assert_int_eq (r.status, SIGCLIENT_UNKNOWN_MODEL);
                ck_assert_str_eq (r.error, "model: \"nope\" is not served here (served: tick_mlp, odd)");
                ck_assert_uint_eq (n_out, 0);
                errors++;
            } else {
                ck_assert_int_eq (r.status, SIGCLIENT_OK);
                s_collect (&col, s_fx.tick, in[r.request_id - 1], 1, out, n_out);
            }
        }
        ck_assert_int_eq (errors, 1);
        s_expect_collected_match (&col, s_fx.endpoint[e]);
        sigclient_destroy (&c);
    }
}
END_TEST

/* ---- health, models, version ---- */

START_TEST (health_live_ready_version)
{
    sigclient_health_t h;
    memset (&h, 0, sizeof h);
    ck_assert_int_eq (sigclient_health (s_client, &h), 0);
    ck_assert (h.live);
    ck_assert (h.ready);
    ck_assert_str_eq (h.version, SIGSERVE_VERSION);
    FILE *f = fopen ("VERSION", "r");   /* the tests run from the repository root */
    if (f) {
        char v[64] = "";
        ck_assert_ptr_nonnull (fgets (v, sizeof v, f));
        fclose (f);
        v[strcspn (v, " \r\n")] = 0;
        ck_assert_str_eq (h.version, v);
    }
    ck_assert_int_eq (sigclient_health (s_client, NULL), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_ERR_ARGUMENT);
}
END_TEST

START_TEST (list_models_names_sizes_backend)
{
    sigclient_model_info_t m[4];
    size_t count = 0;
    ck_assert_int_eq (sigclient_list_models (s_client, m, 4, &count), 0);
    ck_assert_uint_eq (count, 2);
    ck_assert_str_eq (m[0].name, "tick_mlp");
    ck_assert_str_eq (m[0].version, "1");
    ck_assert_str_eq (m[0].backend, "cpu");
    ck_assert_str_eq (m[0].kernel, "loop");
    ck_assert_uint_eq (m[0].input_size, TICK_IN);
    ck_assert_uint_eq (m[0].output_size, 1);
    ck_assert_uint_eq (m[0].max_rows, 8);
    ck_assert (m[0].available);
    ck_assert_str_eq (m[1].name, "odd");
    ck_assert_str_eq (m[1].version, "7b");
    ck_assert_str_eq (m[1].backend, "cpu");
    ck_assert_str_eq (m[1].kernel, "loop");
    ck_assert_uint_eq (m[1].input_size, ODD_IN);
    ck_assert_uint_eq (m[1].output_size, ODD_OUT);
    ck_assert_uint_eq (m[1].max_rows, 7);
    ck_assert (m[1].available);
}
END_TEST

/* ---- timeouts and raw frames ---- */

START_TEST (timeout_on_dead_endpoint)
{
    sigclient_t *c = s_new_client (s_dead_endpoint, 300);
    float in[TICK_IN], out[4];
    s_random (in, TICK_IN);
    size_t n_out = 99;
    double t0 = s_now ();
    ck_assert_int_eq (sigclient_infer (c, "tick_mlp", in, TICK_IN, 1, out, 4, &n_out, NULL), -1);
    double took = s_now () - t0;
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TIMEOUT);
    ck_assert_str_eq (sigclient_status_name (SIGCLIENT_ERR_TIMEOUT), "ERR_TIMEOUT");
    ck_assert_msg (took >= 0.29 && took < 0.6, "infer took %.3f s with a 300 ms timeout", took);
    ck_assert_msg (strstr (sigclient_error (c), "timed out after 300 ms") && strstr (sigclient_error (c), s_dead_endpoint),
                   "%s", sigclient_error (c));
    sigclient_health_t h;
    t0 = s_now ();
    ck_assert_int_eq (sigclient_health (c, &h), -1);
    took = s_now () - t0;
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TIMEOUT);
    ck_assert_msg (took >= 0.29 && took < 0.6, "health took %.3f s with a 300 ms timeout", took);
    ck_assert_int_eq (sigclient_recv_infer (c, out, 4, &n_out, &(sigclient_result_t) { 0 }), -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TIMEOUT);
    sigclient_destroy (&c);
}
END_TEST

/* Where the engines differ: a dead endpoint beside a live one. libzmq's DEALER queues every other
 * request on the dead endpoint's pipe (made at connect, up or not), where it waits for a server
 * that never comes: of 4 pipelined requests, 2 are answered. The zmtp engine sends only on a
 * connection that is up (or holds the request until one is): the live server answers all 4. */
START_TEST (requests_while_an_endpoint_is_down)
{
    const char *eps[2] = { s_dead_endpoint, s_fx.endpoint[0] };
    sigclient_t *c = sigclient_new_engine (eps, 2, 2000, s_engine, NULL);
    ck_assert_ptr_nonnull (c);
    float in[TICK_IN], out[2];
    s_random (in, TICK_IN);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq (sigclient_send_infer (c, "tick_mlp", in, TICK_IN, 1, 0, NULL), 0);
    int answered = 0;
    size_t n_out;
    sigclient_result_t r;
    while (sigclient_recv_infer (c, out, 2, &n_out, &r) == 0) {
        ck_assert_int_eq (r.status, SIGCLIENT_OK);
        answered++;
    }
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TIMEOUT);
    ck_assert_int_eq (answered, s_engine == SIGCLIENT_ENGINE_ZMTP ? 4 : 2);
    sigclient_destroy (&c);
}
END_TEST

/* The engine's API, and what neither engine takes (the same errno from both). */
START_TEST (engine_api_and_refused_endpoints)
{
    ck_assert_int_eq (sigclient_engine (s_client), s_engine);
    ck_assert_int_eq (sigclient_engine (NULL), SIGCLIENT_ENGINE_ZMTP);
    ck_assert_str_eq (sigclient_engine_name (SIGCLIENT_ENGINE_ZMTP), "zmtp");
    ck_assert_str_eq (sigclient_engine_name (SIGCLIENT_ENGINE_LIBZMQ), "libzmq");
    ck_assert_str_eq (sigclient_engine_name ((sigclient_engine_t) 7), "unknown");
    const char *eps[1] = { s_fx.endpoint[0] };
    sigclient_t *c = sigclient_new (eps, 1, 1000);      /* sigclient_new: the zmtp engine */
    ck_assert_int_eq (sigclient_engine (c), SIGCLIENT_ENGINE_ZMTP);
    sigclient_destroy (&c);
    errno = 0;
    ck_assert_ptr_null (sigclient_new_engine (eps, 1, 1000, (sigclient_engine_t) 7, NULL));
    ck_assert_int_eq (errno, EINVAL);
    static const struct { const char *endpoint; int err; } bad[] = {
        { "tcp://127.0.0.1", EINVAL }, { "foo://x", EPROTONOSUPPORT }, { "tcp://127.0.0.1:99999", EINVAL },
    };
    /* A port past 65535: zmtp refuses it; libzmq takes it (its parser keeps the low 16 bits). */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] - (s_engine == SIGCLIENT_ENGINE_LIBZMQ); i++) {
        errno = 0;
        ck_assert_msg (sigclient_new_engine (&bad[i].endpoint, 1, 100, s_engine, NULL) == NULL, "%s taken",
                       bad[i].endpoint);
        ck_assert_msg (errno == bad[i].err, "%s: errno %d (%s), expected %d", bad[i].endpoint, errno, strerror (errno),
                       bad[i].err);
    }
    sigclient_curve_keys_t keys;    /* 40 characters, not Z85 */
    memset (&keys, '~', sizeof keys);
    keys.server_public[40] = keys.client_public[40] = keys.client_secret[40] = '\0';
    errno = 0;
    ck_assert_ptr_null (sigclient_new_engine (eps, 1, 100, s_engine, &keys));
    ck_assert_int_eq (errno, EINVAL);
}
END_TEST

static Sigserve__V1__InferReply *s_raw_roundtrip (const void *payload, size_t len, Sigserve__V1__Reply **reply_p)
{
    ck_assert_int_eq (sigclient_send_raw (s_client, payload, len), 0);
    uint8_t buf[4096];
    size_t got = 0;
    ck_assert_msg (sigclient_recv_raw (s_client, buf, sizeof buf, &got) == 0, "%s", sigclient_error (s_client));
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, got, buf);
    ck_assert_ptr_nonnull (r);
    ck_assert_int_eq (r->body_case, SIGSERVE__V1__REPLY__BODY_INFER);
    *reply_p = r;
    return r->infer;
}

START_TEST (send_raw_garbage_gets_bad_request)
{
    const uint8_t junk[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02 };
    Sigserve__V1__Reply *r;
    Sigserve__V1__InferReply *rep = s_raw_roundtrip (junk, sizeof junk, &r);
    ck_assert_int_eq (rep->status, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST);
    ck_assert_uint_eq (rep->request_id, 0);
    ck_assert_str_eq (rep->error, "payload: 7 bytes do not decode as a sigserve.v1.Request");
    ck_assert_uint_eq (rep->n_outputs, 0);
    sigserve__v1__reply__free_unpacked (r, NULL);

    rep = s_raw_roundtrip ("", 0, &r);
    ck_assert_int_eq (rep->status, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST);
    ck_assert_str_eq (rep->error, "payload: empty; expected a serialized sigserve.v1.Request");
    sigserve__v1__reply__free_unpacked (r, NULL);

    const uint8_t no_body[] = { 0x78, 0x01 };
    rep = s_raw_roundtrip (no_body, sizeof no_body, &r);
    ck_assert_int_eq (rep->status, SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST);
    ck_assert_str_eq (rep->error, "body: not set; expected one of infer, health, list_models");
    sigserve__v1__reply__free_unpacked (r, NULL);

    /* the client and the server both carry on */
    float in[TICK_IN], out[2];
    s_random (in, TICK_IN);
    size_t n_out;
    sigclient_result_t res;
    ck_assert_int_eq (sigclient_infer (s_client, "tick_mlp", in, TICK_IN, 1, out, 2, &n_out, &res), 0);
    ck_assert_uint_eq (res.request_id, 1);
    ck_assert_int_eq (sigclient_send_raw (s_client, NULL, 3), -1);
    ck_assert_int_eq (sigclient_last_status (s_client), SIGCLIENT_ERR_ARGUMENT);
}
END_TEST

/* ---- CURVE ---- */

/* A client with CURVE keys at the plaintext fixture's server: refused at once, naming the endpoint
 * and what the server asks for; every call after it too, the round-robin and a stream's socket. */
START_TEST (a_curve_client_at_a_plaintext_server_fails_at_once)
{
    sigclient_curve_keys_t keys;
    char other[41];
    ck_assert_int_eq (zmq_curve_keypair (keys.server_public, other), 0);
    ck_assert_int_eq (zmq_curve_keypair (keys.client_public, keys.client_secret), 0);
    const char *eps[1] = { s_fx.endpoint[0] };
    sigclient_t *c = sigclient_new_engine (eps, 1, 60000, s_engine, &keys);
    ck_assert_ptr_nonnull (c);
    char want[512];
    snprintf (want, sizeof want, "%s: the server does not use CURVE, and this client has CURVE keys (sigclient_new: "
              "no keys)", s_fx.endpoint[0]);
    sigclient_health_t h;
    for (int call = 0; call < 2; call++) {
        ck_assert_int_eq (sigclient_health (c, &h), -1);
        ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_SECURITY);
        ck_assert_str_eq (sigclient_error (c), want);
    }
    float in[TICK_IN], out[2];
    s_random (in, TICK_IN);
    size_t n_out;
    ck_assert_int_eq (sigclient_infer (c, "tick_mlp", in, TICK_IN, 1, out, 2, &n_out, NULL), -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_SECURITY);
    ck_assert_str_eq (sigclient_error (c), want);
    ck_assert_int_eq (sigclient_infer_stream (c, "tick_mlp", 9, 1, in, TICK_IN, out, 2, &n_out, NULL), -1);
    ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_SECURITY);
    ck_assert_str_eq (sigclient_error (c), want);
    sigclient_destroy (&c);
}
END_TEST

/* A CURVE server (keys from sigserve --keygen; alice allowed, mallory not), of each server transport
 * (a loop test: libzmq, zmtp): alice is served, her streams' sockets too; mallory's key, or alice's
 * with another server key, gets no answer at all, and the timeout says why in the same words on
 * both engines; a client without keys is told at once what the server asks for. */
START_TEST (curve_allowed_served_others_time_out_alike)
{
    const char *transport = _i ? "zmtp" : "libzmq";
    char *dir = tu_tmpdir (), cmd[8192], out[1024], path[2][4200], json[4096];
    ck_assert_ptr_nonnull (dir);
    static const char *const names[] = { "server", "alice", "mallory", "bob" };
    for (int k = 0; k < 4; k++) {
        snprintf (cmd, sizeof cmd, "'%s/sigserve' --keygen '%s/%s' >/dev/null 2>&1", tu_build_dir (), dir, names[k]);
        ck_assert_int_eq (system (cmd), 0);
    }
    snprintf (cmd, sizeof cmd, "mkdir '%s/allowed' && cp '%s/alice' '%s/allowed/alice.cert'", dir, dir, dir);
    ck_assert_int_eq (system (cmd), 0);
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"log_level\": \"warn\", \"stats_interval_s\": 0,"
              " \"transport\": \"%s\","
              " \"curve\": { \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"allowed\" } },"
              " \"models\": [ { \"name\": \"tick_mlp\", \"backend\": \"cpu\","
              " \"weights\": \"%s/models/tick_mlp.safetensors\", \"layers\": [ { \"weight\": \"0.weight\" },"
              " { \"weight\": \"2.weight\" }, { \"weight\": \"4.weight\" } ] } ] }",
              endpoint, transport, tu_build_abs ());
    char *config = tu_write_file (dir, "curve.json", json, -1);
    pid_t pid = fork ();
    if (pid == 0) {
        char bin[4200], log[4200];
        snprintf (bin, sizeof bin, "%s/sigserve", tu_build_dir ());
        snprintf (log, sizeof log, "%s/server.log", dir);
        if (!freopen (log, "w", stderr))
            _exit (126);
        execl (bin, bin, "--config", config, (char *) NULL);
        _exit (127);
    }
    ck_assert_int_gt (pid, 0);
    const char *eps[1] = { endpoint };
    sigclient_curve_keys_t keys;
    snprintf (path[0], sizeof path[0], "%s/server", dir);
    snprintf (path[1], sizeof path[1], "%s/alice_secret", dir);
    ck_assert_msg (sigclient_curve_keys_load (path[0], path[1], &keys, out, sizeof out) == 0, "%s", out);
    sigclient_t *c = sigclient_new_engine (eps, 1, 200, s_engine, &keys);
    ck_assert_ptr_nonnull (c);
    sigclient_health_t h = { 0 };
    double t0 = s_now ();      /* the server loads, then answers: 30 s at most */
    while ((sigclient_health (c, &h) != 0 || !h.ready) && s_now () - t0 < 30)
        ck_assert_int_ne (sigclient_last_status (c), SIGCLIENT_ERR_TRANSPORT);
    ck_assert_msg (h.ready, "alice was not answered ready within 30 s by a %s server: %s", transport,
                   sigclient_error (c));
    float in[TICK_IN], got[2];
    s_random (in, TICK_IN);
    size_t n_out = 0;
    ck_assert_int_eq (sigclient_set_timeout (c, 5000), 0);
    ck_assert_msg (sigclient_infer (c, "tick_mlp", in, TICK_IN, 1, got, 2, &n_out, NULL) == 0, "%s",
                   sigclient_error (c));
    ck_assert_uint_eq (n_out, 1);
    /* a stream's own socket takes the keys too: the server answers (an MLP keeps no stream) */
    ck_assert_int_eq (sigclient_infer_stream (c, "tick_mlp", 5, 1, in, TICK_IN, got, 2, &n_out, NULL), -1);
    ck_assert_str_eq (sigclient_error (c), "server replied STATUS_BAD_SHAPE: stream_id: model \"tick_mlp\" is of type "
                                           "mlp, which keeps no streams; send stream_id 0");
    sigclient_destroy (&c);
    char want[512];
    snprintf (want, sizeof want, "timed out after 300 ms waiting for a reply from %s (CURVE: a server that does not "
              "allow this client's key, or whose key is not the one given, never answers)", endpoint);
    for (int k = 0; k < 2; k++) {
        /* mallory's own keys; then alice's with bob's public key where the server's should be */
        snprintf (path[0], sizeof path[0], "%s/%s", dir, k ? "bob" : "server");
        snprintf (path[1], sizeof path[1], "%s/%s_secret", dir, k ? "alice" : "mallory");
        ck_assert_msg (sigclient_curve_keys_load (path[0], path[1], &keys, out, sizeof out) == 0, "%s", out);
        c = sigclient_new_engine (eps, 1, 300, s_engine, &keys);
        ck_assert_int_eq (sigclient_health (c, &h), -1);
        ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_TIMEOUT);
        ck_assert_str_eq (sigclient_error (c), want);
        sigclient_destroy (&c);
    }
    /* no keys at all: told at once, its stream's socket too (libzmq's engine against libzmq's server
     * too: its handshake that failed without detail is looked into, zmtp_probe.h) */
    c = sigclient_new_engine (eps, 1, 60000, s_engine, NULL);
    snprintf (want, sizeof want, "%s: the server asks for CURVE, and this client has no CURVE keys "
              "(sigclient_new_curve: the server's public key and this client's key pair)", endpoint);
    for (int call = 0; call < 2; call++) {
        ck_assert_int_eq (call ? sigclient_infer_stream (c, "tick_mlp", 5, 1, in, TICK_IN, got, 2, &n_out, NULL)
                               : sigclient_health (c, &h), -1);
        ck_assert_int_eq (sigclient_last_status (c), SIGCLIENT_ERR_SECURITY);
        ck_assert_str_eq (sigclient_error (c), want);
    }
    sigclient_destroy (&c);
    kill (pid, SIGTERM);
    int status = 0;
    ck_assert_int_eq (waitpid (pid, &status, 0), pid);
    ck_assert (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    tu_remove_tree (dir);
    free (config);
    free (dir);
}
END_TEST

int main (void)
{
    s_seed_init ("test_client");
    Suite *s = suite_create ("client");
    for (size_t e = 0; e < 2; e++) {
        TCase *tc = s_engine_tcase (e);
        tcase_add_test (tc, infer_rows_1_matches_reference);
        tcase_add_test (tc, infer_rows_5_matches_reference);
        tcase_add_test (tc, server_error_statuses);
        tcase_add_test (tc, capacity_errors);
        tcase_add_test (tc, pipelined_500_matched_by_request_id);
        tcase_add_test (tc, pipelined_each_endpoint_and_error_status);
        tcase_add_test (tc, health_live_ready_version);
        tcase_add_test (tc, list_models_names_sizes_backend);
        tcase_add_test (tc, timeout_on_dead_endpoint);
        tcase_add_test (tc, send_raw_garbage_gets_bad_request);
        tcase_add_test (tc, requests_while_an_endpoint_is_down);
        tcase_add_test (tc, engine_api_and_refused_endpoints);
        tcase_add_loop_test (tc, curve_allowed_served_others_time_out_alike, 0, 2);
        tcase_add_test (tc, a_curve_client_at_a_plaintext_server_fails_at_once);
        suite_add_tcase (s, tc);
    }
    return tu_run_suite (s);
}
