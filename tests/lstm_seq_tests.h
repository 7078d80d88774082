/* What test_stream_survive.c and test_fallback.c share: the LSTM "seq" they serve (its shape, random
 * weights written once, its model JSON) and one step of a stream sent and its reply read. Included
 * after device_processes_tests.h (s_models) and lstm_reference.h: everything here is static. */
#ifndef SIGSERVE_LSTM_SEQ_TESTS_H
#define SIGSERVE_LSTM_SEQ_TESTS_H

#define LAYERS 2
#define WINDOW 16
#define STEP 8
#define HIDDEN 12
#define OUTS 2

static char s_lstm_path[4096];
static weights_t *s_lstm;

/* The model "seq" with KEYS (its backend among them) in s_models, its weights written from SEED the
 * first time. */
static inline const char *seq_model (const char *keys, uint64_t seed)
{
    if (!s_lstm) {
        char *dir = tu_tmpdir (), err[512];
        snprintf (s_lstm_path, sizeof s_lstm_path, "%s/seq.safetensors", dir);
        free (dir);
        lstm_shape_t shape = { .layers = LAYERS, .step_size = STEP, .hidden = HIDDEN, .out = OUTS, .window = WINDOW,
                               .head_act = ACTIVATION_TANH };
        model_config_t cfg;
        s_lstm = lstm_random_weights (s_lstm_path, &shape, seed, &cfg, err, sizeof err);
        ck_assert_msg (s_lstm != NULL, "%s", err);
    }
    snprintf (s_models, sizeof s_models,
              "{ \"name\": \"seq\", \"type\": \"lstm\", \"weights\": \"%s\", \"lstm\": \"lstm.\", \"window\": %d, "
              "\"head\": { \"weight\": \"head.weight\", \"activation\": \"tanh\" }, %s }", s_lstm_path, WINDOW, keys);
    return s_models;
}

/* One step X (STEP floats) of stream ID to MODEL over SOCK, numbered STEP_NO (0: not), as REQUEST_ID;
 * with DELIMITER an empty frame first, as a REQ peer sends. Its reply (free_unpacked by the caller). */
static inline Sigserve__V1__Reply *seq_step (void *sock, const char *model, const float *x, uint64_t id,
                                             uint64_t step_no, uint64_t request_id, bool delimiter)
{
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__InferRequest inf = SIGSERVE__V1__INFER_REQUEST__INIT;
    inf.request_id = request_id;
    inf.model = (char *) model;
    inf.features = (float *) x;
    inf.n_features = STEP;
    inf.rows = 1;
    inf.stream_id = id;
    inf.step = step_no;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
    req.infer = &inf;
    static uint8_t buf[1 << 16];
    const size_t len = sigserve__v1__request__pack (&req, buf);
    if (delimiter)
        ck_assert_int_eq (zmq_send (sock, "", 0, ZMQ_SNDMORE), 0);
    ck_assert_int_eq (zmq_send (sock, buf, len, 0), (int) len);
    int r = zmq_recv (sock, buf, sizeof buf, 0);
    if (r == 0 && delimiter)     /* the empty delimiter */
        r = zmq_recv (sock, buf, sizeof buf, 0);
    ck_assert_int_gt (r, 0);
    Sigserve__V1__Reply *rep = sigserve__v1__reply__unpack (NULL, (size_t) r, buf);
    ck_assert_ptr_nonnull (rep);
    ck_assert_ptr_nonnull (rep->infer);
    ck_assert_uint_eq (rep->infer->request_id, request_id);
    return rep;
}

#endif
