/* What test_lstm_serve.c and test_gru_serve.c share: a DEALER on the suite's server, one inference
 * request (a window of rows, or a stream's step) sent and its reply read and checked by id, and random
 * features. The including suite defines s_ctx (its ZeroMQ context), s_endpoint (the server's) and
 * s_seed before including it: everything here is static. */
#ifndef SIGSERVE_RNN_SERVE_TESTS_H
#define SIGSERVE_RNN_SERVE_TESTS_H

static void *s_socket (int timeout_ms)
{
    void *s = zmq_socket (s_ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (s, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    ck_assert_int_eq (zmq_connect (s, s_endpoint), 0);
    return s;
}

static Sigserve__V1__InferReply *s_infer_step (void *s, const char *model, const float *f, size_t n, uint32_t rows,
                                               uint64_t stream, uint64_t step, uint64_t id, Sigserve__V1__Reply **holder)
{
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__InferRequest inf = SIGSERVE__V1__INFER_REQUEST__INIT;
    inf.request_id = id;
    inf.model = (char *) model;
    inf.features = (float *) f;
    inf.n_features = n;
    inf.rows = rows;
    inf.stream_id = stream;
    inf.step = step;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
    req.infer = &inf;
    static uint8_t buf[1 << 16];
    size_t len = sigserve__v1__request__pack (&req, buf);
    ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
    int r = zmq_recv (s, buf, sizeof buf, 0);
    ck_assert_int_gt (r, 0);
    *holder = sigserve__v1__reply__unpack (NULL, (size_t) r, buf);
    ck_assert_ptr_nonnull (*holder);
    ck_assert_uint_eq ((*holder)->infer->request_id, id);
    return (*holder)->infer;
}

static Sigserve__V1__InferReply *s_infer (void *s, const char *model, const float *f, size_t n, uint32_t rows,
                                          uint64_t stream, uint64_t id, Sigserve__V1__Reply **holder)
{
    return s_infer_step (s, model, f, n, rows, stream, 0, id, holder);
}

static void s_random (float *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        f[i] = rng_uniform (&s_seed, -1, 1);
}

#endif
