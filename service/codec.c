#include "codec.h"

#include "arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_OK == SIG_OK, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_BAD_REQUEST == SIG_BAD_REQUEST, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_UNKNOWN_MODEL == SIG_UNKNOWN_MODEL, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_BAD_SHAPE == SIG_BAD_SHAPE, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_BAD_VALUE == SIG_BAD_VALUE, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_OVERLOADED == SIG_OVERLOADED, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_DEADLINE_EXCEEDED == SIG_DEADLINE_EXCEEDED, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE == SIG_UNAVAILABLE, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_INTERNAL == SIG_INTERNAL, "status values");

struct _codec_t {
    arena_t *arena;             /* every decoded request lives here until the next decode */
};

codec_t *codec_new (size_t max_message_bytes)
{
    codec_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    /* Packed floats take 4 bytes per 4 wire bytes (non-packed ones 4 per 5), strings one more
     * byte than on the wire, message structs ~100 bytes each: 2x the size limit plus slack holds
     * any well-formed request. Unknown fields cost protobuf-c ~24 bytes of bookkeeping for as
     * little as 2 wire bytes: a payload made of them is refused rather than let grow the process. */
    self->arena = arena_new (2 * max_message_bytes + 65536);
    if (!self->arena) {
        free (self);
        return NULL;
    }
    return self;
}

void codec_destroy (codec_t **self_p)
{
    if (self_p && *self_p) {
        arena_destroy (&(*self_p)->arena);
        free (*self_p);
        *self_p = NULL;
    }
}

sig_status_t codec_decode_request (codec_t *self, const void *payload, size_t len,
                                   Sigserve__V1__Request **request, char *err, size_t errlen)
{
    *request = NULL;
    if (len == 0) {
        snprintf (err, errlen, "payload: empty; expected a serialized sigserve.v1.Request");
        return SIG_BAD_REQUEST;
    }
    arena_reset (self->arena);
    Sigserve__V1__Request *req = sigserve__v1__request__unpack (arena_protobuf_allocator (self->arena), len, payload);
    if (!req) {
        if (arena_exhausted (self->arena))
            snprintf (err, errlen, "payload: %zu bytes need more than the %zu bytes of decoding "
                      "memory a request may use; expected a serialized sigserve.v1.Request", len,
                      arena_capacity (self->arena));
        else
            snprintf (err, errlen, "payload: %zu bytes do not decode as a sigserve.v1.Request", len);
        return SIG_BAD_REQUEST;
    }
    if (req->body_case == SIGSERVE__V1__REQUEST__BODY__NOT_SET) {
        snprintf (err, errlen, "body: not set; expected one of infer, health, list_models");
        return SIG_BAD_REQUEST;
    }
    *request = req;
    return SIG_OK;
}

size_t codec_encode_reply (const Sigserve__V1__Reply *reply, uint8_t *buf, size_t cap)
{
    size_t need = sigserve__v1__reply__get_packed_size (reply);
    if (need > cap)
        return 0;
    return sigserve__v1__reply__pack (reply, buf);
}

size_t codec_arena_capacity (const codec_t *self) { return arena_capacity (self->arena); }
size_t codec_arena_high_water (const codec_t *self) { return arena_high_water (self->arena); }
