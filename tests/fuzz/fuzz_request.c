/* libFuzzer target: one payload through codec_decode_request, as the server's front reads it.
 * A decoded infer body has every field the server reads touched (so ASan sees any stray pointer)
 * and the invariants the server relies on checked; then a reply echoing it is encoded. */
#include "front/codec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The limit the codec is built for; the server's socket drops longer payloads (ZMQ_MAXMSGSIZE)
 * before they reach the codec. mk/fuzz.mk passes -max_len a little above it. */
#define FUZZ_MAX_MESSAGE_BYTES 8192

static void s_check (int ok)
{
    if (!ok)
        abort ();
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static codec_t *codec;
    static uint8_t reply_buf[4 * FUZZ_MAX_MESSAGE_BYTES];
    if (!codec && !(codec = codec_new (FUZZ_MAX_MESSAGE_BYTES)))
        abort ();
    if (size > FUZZ_MAX_MESSAGE_BYTES)
        return -1;                      /* not added to the corpus */
    Sigserve__V1__Request *req = NULL;
    char err[512];
    err[0] = 0;
    sig_status_t st = codec_decode_request (codec, data, size, &req, err, sizeof err);
    s_check (codec_arena_high_water (codec) <= codec_arena_capacity (codec));
    if (st != SIG_OK) {
        s_check (st == SIG_BAD_REQUEST && req == NULL && err[0] != 0 && strlen (err) < sizeof err);
        return 0;
    }
    s_check (req != NULL && req->body_case != SIGSERVE__V1__REQUEST__BODY__NOT_SET);
    if (req->body_case != SIGSERVE__V1__REQUEST__BODY_INFER)
        return 0;
    const Sigserve__V1__InferRequest *in = req->infer;
    s_check (in != NULL && in->model != NULL);
    /* The name is all of its wire bytes: no NUL inside, so it is at most the payload's size. */
    size_t name_len = strlen (in->model);
    s_check (name_len < size);
    s_check (in->n_features == 0 || in->features != NULL);
    s_check (in->n_features <= size / 4);
    volatile float sum = 0;
    for (size_t i = 0; i < in->n_features; i++)
        sum += in->features[i];
    volatile uint64_t fields = in->request_id + in->rows + in->deadline_us;
    (void) sum, (void) fields;

    /* The reply the server would send for it: its outputs, the name in the error text. */
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__InferReply infer = SIGSERVE__V1__INFER_REPLY__INIT;
    infer.request_id = in->request_id;
    infer.status = SIGSERVE__V1__STATUS__STATUS_UNKNOWN_MODEL;
    infer.error = in->model;
    infer.outputs = in->features;
    infer.n_outputs = in->n_features;
    infer.rows = in->rows;
    reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
    reply.infer = &infer;
    size_t len = codec_encode_reply (&reply, reply_buf, sizeof reply_buf);
    s_check (len > 0 && len <= sizeof reply_buf);
    s_check (codec_encode_reply (&reply, reply_buf, len - 1) == 0);
    return 0;
}
