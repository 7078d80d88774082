/* The codec: decoding with the bounded arena, its errors, and reply encoding. */
#include "front/codec.h"
#include "testutil.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every caller's buffer holds the request (the largest: max_message_bytes). */
#define s_pack_infer(buf, model, f, n, rows, id) tu_pack_infer ((buf), SIZE_MAX, (model), (f), (n), (rows), (id), 0)

static size_t s_varint (uint8_t *p, uint64_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        p[n++] = (uint8_t) (v | 0x80);
    p[n++] = (uint8_t) v;
    return n;
}

static size_t s_varint_len (uint64_t v)
{
    uint8_t scratch[10];
    return s_varint (scratch, v);
}

/* A Request with an InferRequest written by hand: the model as MODEL_LEN raw bytes (a NUL or
 * invalid UTF-8 included), and the features UNPACKED, one entry (tag 0x1d, a fixed32) per float,
 * as a legal encoder may send them (protobuf-c itself always packs). BUF holds 16 + MODEL_LEN +
 * 5 N + 32 bytes. */
static size_t s_pack_raw (uint8_t *buf, const char *model, size_t model_len, const float *f, size_t n,
                          uint32_t rows, uint64_t id)
{
    size_t inner = (id ? 1 + s_varint_len (id) : 0) + (model_len ? 1 + s_varint_len (model_len) + model_len : 0)
                 + 5 * n + (rows ? 1 + s_varint_len (rows) : 0);
    size_t at = 0;
    buf[at++] = 0x0a;                                   /* Request.infer */
    at += s_varint (buf + at, inner);
    if (id) {
        buf[at++] = 0x08;
        at += s_varint (buf + at, id);
    }
    if (model_len) {
        buf[at++] = 0x12;
        at += s_varint (buf + at, model_len);
        memcpy (buf + at, model, model_len);
        at += model_len;
    }
    for (size_t i = 0; i < n; i++) {                    /* little-endian hosts only, as the server */
        buf[at++] = 0x1d;
        memcpy (buf + at, &f[i], 4);
        at += 4;
    }
    if (rows) {
        buf[at++] = 0x20;
        at += s_varint (buf + at, rows);
    }
    return at;
}

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

/* Decodes BUF[0, LEN) with a codec for MAX-byte messages and checks every field came through. */
static void s_expect_unpacked (size_t max, const uint8_t *buf, size_t len, const float *f, size_t n, uint32_t rows)
{
    codec_t *c = codec_new (max);
    ck_assert_ptr_nonnull (c);
    Sigserve__V1__Request *req;
    char err[256] = "";
    ck_assert_msg (codec_decode_request (c, buf, len, &req, err, sizeof err) == SIG_OK,
                   "%zu unpacked floats in %zu bytes at max_message_bytes %zu: %s", n, len, max, err);
    ck_assert_str_eq (req->infer->model, "tick_mlp");
    ck_assert_uint_eq (req->infer->n_features, n);
    ck_assert_mem_eq (req->infer->features, f, n * sizeof *f);
    ck_assert_uint_eq (req->infer->rows, rows);
    ck_assert_uint_le (codec_arena_high_water (c), codec_arena_capacity (c));
    codec_destroy (&c);
}

/* Unpacked features are legal protobuf: each float is a wire entry, for which protobuf-c 1.4
 * allocates 32 to 64 bytes of scan records: up to 13 times the wire size. */
START_TEST (unpacked_requests_decode)
{
    const size_t max = 65536;
    size_t cap = 16 + 8 + 5 * (max / 5) + 32;
    uint8_t *buf = malloc (cap);
    float *f = malloc (max / 5 * sizeof *f);
    for (size_t i = 0; i < max / 5; i++)
        f[i] = (float) i * 0.25f - 100.0f;
    /* The largest unpacked request that fits 65,536 bytes. */
    size_t n = max / 5;
    while (s_pack_raw (buf, "tick_mlp", 8, f, n, 16, 7) > max)
        n--;
    ck_assert_uint_gt (s_pack_raw (buf, "tick_mlp", 8, f, n + 1, 16, 7), max);
    size_t len = s_pack_raw (buf, "tick_mlp", 8, f, n, 16, 7);
    s_expect_unpacked (max, buf, len, f, n, 16);
    /* 16 rows of a 512-input model, at 65,536 and at the smallest limit that admits it. */
    len = s_pack_raw (buf, "tick_mlp", 8, f, 16 * 512, 16, 8);
    ck_assert_uint_eq (len, 40978);
    s_expect_unpacked (max, buf, len, f, 16 * 512, 16);
    s_expect_unpacked (len, buf, len, f, 16 * 512, 16);
    /* The same request packed decodes to the same values. */
    size_t packed = s_pack_infer (buf, "tick_mlp", f, 16 * 512, 16, 8);
    s_expect_unpacked (packed, buf, packed, f, 16 * 512, 16);
    /* The price: the arena for 65,536-byte messages. */
    codec_t *c = codec_new (max);
    ck_assert_uint_le (codec_arena_capacity (c), 1 << 20);
    codec_destroy (&c);
    free (f);
    free (buf);
}
END_TEST

/* protobuf-c's scan slabs double (16 records on its stack, then 32, 64, ...): a request whose entry
 * count is one past what the slabs so far hold makes it allocate the next, twice as large. Each such
 * request decodes at a limit of exactly its own size. */
START_TEST (unpacked_slab_boundaries_fit_the_arena)
{
    size_t most = 16 * ((1u << 12) - 1) + 1;
    uint8_t *buf = malloc (16 + 8 + 5 * most + 32);
    float *f = calloc (most, sizeof *f);
    for (size_t held = 16; held + 1 <= most; held = 2 * held + 16) {
        /* entries: request_id, model, rows and the features */
        for (size_t entries = held; entries <= held + 2; entries++) {
            size_t n = entries - 3;
            size_t len = s_pack_raw (buf, "tick_mlp", 8, f, n, 1, 5);
            s_expect_unpacked (len, buf, len, f, n, 1);
        }
    }
    free (f);
    free (buf);
}
END_TEST

static sig_status_t s_decode_model (const char *model, size_t model_len, char *err, size_t errlen)
{
    codec_t *c = codec_new (4096);
    uint8_t buf[256];
    float f[2] = { 1, 2 };
    size_t len = s_pack_raw (buf, model, model_len, f, 2, 1, 11);
    Sigserve__V1__Request *req = (void *) 1;
    err[0] = 0;
    sig_status_t st = codec_decode_request (c, buf, len, &req, err, errlen);
    if (st != SIG_OK)
        ck_assert_ptr_null (req);
    codec_destroy (&c);
    return st;
}

/* protobuf-c hands the name over NUL-terminated: without a check "tick_mlp\0x" would be tick_mlp. */
START_TEST (model_with_nul_is_bad_request)
{
    char err[256];
    ck_assert_int_eq (s_decode_model ("tick_mlp\0x", 10, err, sizeof err), SIG_BAD_REQUEST);
    ck_assert_str_eq (err, "model: contains a NUL byte at offset 8; expected a model name");
    ck_assert_int_eq (s_decode_model ("\0tick_mlp", 9, err, sizeof err), SIG_BAD_REQUEST);
    ck_assert_str_eq (err, "model: contains a NUL byte at offset 0; expected a model name");
    ck_assert_int_eq (s_decode_model ("tick_mlp\0", 9, err, sizeof err), SIG_BAD_REQUEST);
    ck_assert_str_eq (err, "model: contains a NUL byte at offset 8; expected a model name");
    ck_assert_int_eq (s_decode_model ("tick_mlp", 8, err, sizeof err), SIG_OK);

    /* The name that counts is the last one, in the last infer body (a oneof keeps the last). */
    codec_t *c = codec_new (4096);
    Sigserve__V1__Request *req;
    const uint8_t nul_then_good[] = { 0x0a, 0x0b, 0x12, 0x03, 'a', 0, 'b', 0x12, 0x04, 't', 'i', 'c', 'k' };
    ck_assert_int_eq (codec_decode_request (c, nul_then_good, sizeof nul_then_good, &req, err, sizeof err), SIG_OK);
    ck_assert_str_eq (req->infer->model, "tick");
    const uint8_t good_then_nul[] = { 0x0a, 0x0b, 0x12, 0x04, 't', 'i', 'c', 'k', 0x12, 0x03, 'a', 0, 'b' };
    ck_assert_int_eq (codec_decode_request (c, good_then_nul, sizeof good_then_nul, &req, err, sizeof err),
                      SIG_BAD_REQUEST);
    ck_assert_str_eq (err, "model: contains a NUL byte at offset 1; expected a model name");
    const uint8_t two_bodies[] = { 0x0a, 0x05, 0x12, 0x03, 'a', 0, 'b', 0x0a, 0x04, 0x12, 0x02, 'o', 'k' };
    ck_assert_int_eq (codec_decode_request (c, two_bodies, sizeof two_bodies, &req, err, sizeof err), SIG_OK);
    ck_assert_str_eq (req->infer->model, "ok");
    const uint8_t two_bodies_bad_last[] = { 0x0a, 0x04, 0x12, 0x02, 'o', 'k', 0x0a, 0x05, 0x12, 0x03, 'a', 0, 'b' };
    ck_assert_int_eq (codec_decode_request (c, two_bodies_bad_last, sizeof two_bodies_bad_last, &req, err,
                                            sizeof err), SIG_BAD_REQUEST);
    ck_assert_str_eq (err, "model: contains a NUL byte at offset 1; expected a model name");
    /* A health body after an infer body with a bad name is a health request. */
    const uint8_t then_health[] = { 0x0a, 0x05, 0x12, 0x03, 'a', 0, 'b', 0x12, 0x00 };
    ck_assert_int_eq (codec_decode_request (c, then_health, sizeof then_health, &req, err, sizeof err), SIG_OK);
    ck_assert_int_eq (req->body_case, SIGSERVE__V1__REQUEST__BODY_HEALTH);
    /* A tag written in more bytes than it needs (0x92 0x00: field 2, length-delimited) is the
     * same field to protobuf-c and to the check. */
    const uint8_t long_tag[] = { 0x0a, 0x06, 0x92, 0x00, 0x03, 'a', 0, 'b' };
    ck_assert_int_eq (codec_decode_request (c, long_tag, sizeof long_tag, &req, err, sizeof err), SIG_BAD_REQUEST);
    ck_assert_str_eq (err, "model: contains a NUL byte at offset 1; expected a model name");
    codec_destroy (&c);
}
END_TEST

/* proto3 strings are UTF-8. */
START_TEST (model_not_utf8_is_bad_request)
{
    char err[256];
    static const struct { const char *name; size_t len; size_t at; } bad[] = {
        { "abc\xff", 4, 3 },
        { "ab\xc0\xaf", 4, 2 },                 /* overlong '/' */
        { "\xe0\x80\xaf", 3, 0 },               /* overlong, 3 bytes */
        { "x\xed\xa0\x80", 4, 1 },              /* a surrogate, U+D800 */
        { "xy\xf4\x90\x80\x80", 6, 2 },         /* U+110000 */
        { "tick\xe2\x82", 6, 4 },               /* cut short */
        { "t\x80", 2, 1 },                      /* a lone continuation byte */
        { "\xc3(", 2, 0 },
        { "\xf8\x88\x80\x80\x80", 5, 0 },       /* 5-byte forms are gone */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq (s_decode_model (bad[i].name, bad[i].len, err, sizeof err), SIG_BAD_REQUEST);
        char want[128];
        snprintf (want, sizeof want, "model: not valid UTF-8 at byte %zu; expected a model name", bad[i].at);
        ck_assert_str_eq (err, want);
    }
    const char *good[] = { "tick_mlp", "mod\xc3\xa8le", "\xe2\x82\xac", "\xf0\x9d\x84\x9e_clef", "\xed\x9f\xbf",
                           "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf" };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg (s_decode_model (good[i], strlen (good[i]), err, sizeof err) == SIG_OK, "%s", err);
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

    /* The same at the default limit, now that the arena holds unpacked requests: 32,768 fields. */
    c = codec_new (65536);
    buf = malloc (65536);
    for (size_t i = 0; i < 32768; i++) {
        buf[2 * i] = 0x78;
        buf[2 * i + 1] = 0x01;
    }
    ck_assert_int_eq (codec_decode_request (c, buf, 65536, &req, err, sizeof err), SIG_BAD_REQUEST);
    char want[256];
    snprintf (want, sizeof want, "payload: 65536 bytes need more than the %zu bytes of decoding memory a "
              "request may use; expected a serialized sigserve.v1.Request", codec_arena_capacity (c));
    ck_assert_str_eq (err, want);
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
    tcase_add_test (tc, unpacked_requests_decode);
    tcase_add_test (tc, unpacked_slab_boundaries_fit_the_arena);
    tcase_add_test (tc, model_with_nul_is_bad_request);
    tcase_add_test (tc, model_not_utf8_is_bad_request);
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
