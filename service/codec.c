#include "codec.h"

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

#define ARENA_ALIGN 16

struct _codec_t {
    uint8_t *arena;             /* one block, reset per request */
    size_t capacity;            /* its size */
    size_t used;                /* bytes handed out since the last reset */
    size_t high_water;          /* most ever used by one request */
    int exhausted;              /* set when an allocation did not fit, to word the error */
    ProtobufCAllocator allocator;
};

static void *s_arena_alloc (void *data, size_t size)
{
    codec_t *self = data;
    size_t start = (self->used + ARENA_ALIGN - 1) & ~(size_t) (ARENA_ALIGN - 1);
    if (start > self->capacity || size > self->capacity - start) {
        self->exhausted = 1;
        return NULL;
    }
    self->used = start + size;
    if (self->used > self->high_water)
        self->high_water = self->used;
    return self->arena + start;
}

/* The arena is reset as a whole before each decode. */
static void s_arena_free (void *data, void *ptr)
{
    (void) data;
    (void) ptr;
}

codec_t *codec_new (size_t max_message_bytes)
{
    codec_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    /* Packed floats take 4 bytes per 4 wire bytes (non-packed ones 4 per 5), strings one more
     * byte than on the wire, message structs ~100 bytes each: 2x the size limit plus slack holds
     * any well-formed request. Unknown fields cost protobuf-c ~24 bytes of bookkeeping for as
     * little as 2 wire bytes: a payload made of them is refused rather than let grow the process. */
    self->capacity = 2 * max_message_bytes + 65536;
    self->arena = aligned_alloc (64, (self->capacity + 63) & ~(size_t) 63);
    if (!self->arena) {
        free (self);
        return NULL;
    }
    /* Touch every page now so the first large request does not fault them in. */
    memset (self->arena, 0, self->capacity);
    self->allocator.alloc = s_arena_alloc;
    self->allocator.free = s_arena_free;
    self->allocator.allocator_data = self;
    return self;
}

void codec_destroy (codec_t **self_p)
{
    if (self_p && *self_p) {
        codec_t *self = *self_p;
        free (self->arena);
        free (self);
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
    self->used = 0;
    self->exhausted = 0;
    Sigserve__V1__Request *req = sigserve__v1__request__unpack (&self->allocator, len, payload);
    if (!req) {
        if (self->exhausted)
            snprintf (err, errlen, "payload: %zu bytes need more than the %zu bytes of decoding "
                      "memory a request may use; expected a serialized sigserve.v1.Request", len, self->capacity);
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

size_t codec_arena_capacity (const codec_t *self) { return self->capacity; }
size_t codec_arena_high_water (const codec_t *self) { return self->high_water; }
