/* The codec: decoding with the bounded arena, its errors, and reply encoding. */
#include "codec.h"
#include "testutil.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every caller's buffer holds the request (the largest: max_message_bytes). */
#define s_pack_infer(buf, model, f, n, rows, id) tu_pack_infer ((buf), SIZE_MAX, (model), (f), (n), (rows), (id), 0)

START_TEST (decodes_infer_request)
{
    codec_t *c = codec_new (65536);
    float f[512];
    for (int i = 0; i < 512; i++)
        f[i] = (float) i * 0.5f - 3.0f;
    uint8_t buf[4096];
    size_t len = s_pack_infer (buf, "tick_mlp", f, 512, 1, 42);
    Sigserve__V1__Request *req;
    char err[256] = "";
    ck_assert_int_eq (codec_decode_request (c, buf, len, &req, err, sizeof err), SIG_OK);
    ck_assert_int_eq (req->body_case, SIGSERVE__V1__REQUEST__BODY_INFER);
    ck_assert_uint_eq (req->infer->request_id, 42);
    ck_assert_str_eq (req->infer->model, "tick_mlp");
    ck_assert_uint_eq (req->infer->n_features, 512);
    ck_assert_mem_eq (req->infer->features, f, sizeof f);
    /* A second decode reuses the arena: the high-water mark does not grow. */
    size_t hw = codec_arena_high_water (c);
    ck_assert_int_eq (codec_decode_request (c, buf, len, &req, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (codec_arena_high_water (c), hw);
    codec_destroy (&c);
    codec_destroy (&c);
    ck_assert_ptr_null (c);
}
END_TEST

START_TEST (largest_request_fits_the_arena)
{
    const size_t max = 65536;
    codec_t *c = codec_new (max);
    size_t n = (max - 64) / 4;
    float *f = calloc (n, sizeof (float));
    uint8_t *buf = malloc (max);
    size_t len = s_pack_infer (buf, "m", f, n, 1, 1);
    ck_assert_uint_le (len, max);
    Sigserve__V1__Request *req;
    char err[256] = "";
    ck_assert_msg (codec_decode_request (c, buf, len, &req, err, sizeof err) == SIG_OK, "%s", err);
    ck_assert_uint_eq (req->infer->n_features, n);
    ck_assert_uint_le (codec_arena_high_water (c), codec_arena_capacity (c));
    free (f);
    free (buf);
    codec_destroy (&c);
}
END_TEST

START_TEST (empty_payload_is_bad_request)
{
    codec_t *c = codec_new (1024);
    Sigserve__V1__Request *req = (void *) 1;
    char err[256] = "";
    ck_assert_int_eq (codec_decode_request (c, "", 0, &req, err, sizeof err), SIG_BAD_REQUEST);
    ck_assert_ptr_null (req);
    ck_assert_str_eq (err, "payload: empty; expected a serialized sigserve.v1.Request");
    codec_destroy (&c);
}
END_TEST

START_TEST (garbage_is_bad_request)
{
    codec_t *c = codec_new (1024);
    Sigserve__V1__Request *req;
    char err[256] = "";
    const uint8_t junk[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02 };
    ck_assert_int_eq (codec_decode_request (c, junk, sizeof junk, &req, err, sizeof err), SIG_BAD_REQUEST);
    ck_assert_str_eq (err, "payload: 7 bytes do not decode as a sigserve.v1.Request");
    /* Truncated inside the features of a valid request. */
    float f[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    uint8_t buf[256];
    size_t len = s_pack_infer (buf, "m", f, 8, 1, 9);
    ck_assert_int_eq (codec_decode_request (c, buf, len - 3, &req, err, sizeof err), SIG_BAD_REQUEST);
    ck_assert_ptr_nonnull (strstr (err, "do not decode as a sigserve.v1.Request"));
    codec_destroy (&c);
}
END_TEST

START_TEST (no_body_is_bad_request)
{
    codec_t *c = codec_new (1024);
    Sigserve__V1__Request *req;
    char err[256] = "";
    /* Field 15, varint 1: an unknown field, so a valid message whose oneof is not set. */
    const uint8_t unknown_only[] = { 0x78, 0x01 };
    ck_assert_int_eq (codec_decode_request (c, unknown_only, sizeof unknown_only, &req, err, sizeof err), SIG_BAD_REQUEST);
    ck_assert_str_eq (err, "body: not set; expected one of infer, health, list_models");
    codec_destroy (&c);
}
END_TEST

START_TEST (arena_bounds_hostile_payload)
{
    /* 60,000 two-byte unknown fields: within the size limit, but protobuf-c would need ~24 bytes of
     * bookkeeping for each; the arena refuses instead of growing. */
    const size_t max = 131072;
    codec_t *c = codec_new (max);
    size_t n = 60000;
    uint8_t *buf = malloc (2 * n);
    for (size_t i = 0; i < n; i++) {
        buf[2 * i] = 0x78;
        buf[2 * i + 1] = 0x01;
    }
    Sigserve__V1__Request *req;
    char err[256] = "";
    ck_assert_int_eq (codec_decode_request (c, buf, 2 * n, &req, err, sizeof err), SIG_BAD_REQUEST);
    ck_assert_ptr_nonnull (strstr (err, "need more than the"));
    ck_assert_uint_le (codec_arena_high_water (c), codec_arena_capacity (c));
    /* The codec still decodes a good request afterwards. */
    float f[2] = { 1, 2 };
    size_t len = s_pack_infer (buf, "m", f, 2, 1, 3);
    ck_assert_int_eq (codec_decode_request (c, buf, len, &req, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (req->infer->request_id, 3);
    free (buf);
    codec_destroy (&c);
}
END_TEST

START_TEST (random_bytes_never_crash)
{
    codec_t *c = codec_new (4096);
    uint64_t state = 12345;
    uint8_t buf[512];
    float f[16] = { 0 };
    size_t good = s_pack_infer (buf, "tick_mlp", f, 16, 1, 77);
    for (int iter = 0; iter < 20000; iter++) {
        uint8_t m[512];
        memcpy (m, buf, good);
        size_t len = good;
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            m[(state >> 33) % good] = (uint8_t) (state >> 17);
        }
        if (iter % 3 == 0)
            len = (size_t) (state >> 40) % (good + 1);
        Sigserve__V1__Request *req;
        char err[256];
        sig_status_t st = codec_decode_request (c, m, len, &req, err, sizeof err);
        ck_assert (st == SIG_OK || st == SIG_BAD_REQUEST);
        if (st == SIG_OK && req->body_case == SIGSERVE__V1__REQUEST__BODY_INFER)
            ck_assert_ptr_nonnull (req->infer->model);
    }
    codec_destroy (&c);
}
END_TEST

START_TEST (encode_respects_capacity)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__InferReply inf = SIGSERVE__V1__INFER_REPLY__INIT;
    float out[4] = { 1.5f, -2, 3, 4 };
    inf.request_id = 5;
    inf.outputs = out;
    inf.n_outputs = 4;
    inf.status = SIGSERVE__V1__STATUS__STATUS_OK;
    reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
    reply.infer = &inf;
    uint8_t buf[64];
    ck_assert_uint_eq (codec_encode_reply (&reply, buf, 4), 0);
    size_t len = codec_encode_reply (&reply, buf, sizeof buf);
    ck_assert_uint_gt (len, 16);
    Sigserve__V1__Reply *back = sigserve__v1__reply__unpack (NULL, len, buf);
    ck_assert_ptr_nonnull (back);
    ck_assert_uint_eq (back->infer->request_id, 5);
    ck_assert_uint_eq (back->infer->n_outputs, 4);
    ck_assert_mem_eq (back->infer->outputs, out, sizeof out);
    sigserve__v1__reply__free_unpacked (back, NULL);
}
END_TEST

START_TEST (status_names)
{
    ck_assert_str_eq (sig_status_name (SIG_OK), "STATUS_OK");
    ck_assert_str_eq (sig_status_name (SIG_BAD_VALUE), "STATUS_BAD_VALUE");
    ck_assert_str_eq (sig_status_name (SIG_INTERNAL), "STATUS_INTERNAL");
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("codec");
    TCase *tc = tcase_create ("codec");
    tcase_add_test (tc, decodes_infer_request);
    tcase_add_test (tc, largest_request_fits_the_arena);
    tcase_add_test (tc, empty_payload_is_bad_request);
    tcase_add_test (tc, garbage_is_bad_request);
    tcase_add_test (tc, no_body_is_bad_request);
    tcase_add_test (tc, arena_bounds_hostile_payload);
    tcase_add_test (tc, random_bytes_never_crash);
    tcase_add_test (tc, encode_respects_capacity);
    tcase_add_test (tc, status_names);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
