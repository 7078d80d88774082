#include "front/codec.h"

#include "arena.h"

#include <assert.h>
#include <stdbool.h>
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

/* What protobuf-c 1.4's unpack (protobuf_c_message_unpack in protobuf-c.c) allocates for one
 * message: the struct; then, while it scans the wire entries before parsing them, one 32-byte
 * "ScannedMember" record per entry: the first 16 on its stack, the rest in slabs from the
 * allocator of 32, 64, 128, ... records, each twice the last, kept until the message is parsed;
 * then one array per repeated field, a copy of each string (its length + 1), 24 bytes per
 * unknown field plus a copy of its bytes, and the same again for every embedded message.
 * Every wire entry costs a record: a packed features field is one entry, unpacked features are
 * one entry per float (5 wire bytes), so the slabs, not the floats, dominate an unpacked request
 * (up to 64 bytes per float when the last slab has just been started). The record is 32 bytes on
 * LP64 (a uint32, two uint8s, a pointer, a size_t, a pointer); 32 also bounds it on 32-bit. */
#define PB_SCANNED_MEMBER_BYTES 32
#define PB_STACK_MEMBERS 16
/* Bytes of a float entry on the wire when unpacked: a 1-byte tag and a fixed32. A packed chunk
 * holding at least one float is longer, so no well-formed request has more entries than this. */
#define PB_UNPACKED_FLOAT_BYTES 5
/* arena_alloc rounds every allocation up to 16 bytes. */
#define ARENA_ROUND(n) (((n) + 15) & ~(size_t) 15)
/* Room above the well-formed worst case: a few fields that a newer client knows and we do not
 * (40 to 100 bytes each) decode, a payload made of thousands of them does not. */
#define ARENA_SLACK 65536

/* The slab bytes protobuf-c allocates to scan a message of ENTRIES wire entries. */
static size_t s_slab_bytes (size_t entries)
{
    size_t total = 0, scanned = PB_STACK_MEMBERS;
    for (size_t slab = 2 * PB_STACK_MEMBERS; scanned < entries; slab *= 2) {
        total += ARENA_ROUND (slab * PB_SCANNED_MEMBER_BYTES);
        scanned += slab;
    }
    return total;
}

/* The most protobuf-c allocates for a well-formed body of type DESC in at most MAX bytes: its
 * struct, the slabs for its entries (each singular field once, the rest floats of 5 bytes), and
 * the copies: a float array takes no more bytes than its wire bytes, a string one more. The
 * bound holds for bodies whose repeated fields are floats and that embed no message, as ours do;
 * the assert stops a proto change that breaks this from going unnoticed. */
static size_t s_body_bytes (const ProtobufCMessageDescriptor *desc, size_t max)
{
    size_t singular = 0, strings = 0, arrays = 0;
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *field = &desc->fields[i];
        assert (field->type != PROTOBUF_C_TYPE_MESSAGE);
        assert (field->label != PROTOBUF_C_LABEL_REPEATED || field->type == PROTOBUF_C_TYPE_FLOAT);
        if (field->label == PROTOBUF_C_LABEL_REPEATED)
            arrays++;
        else
            singular++;
        strings += field->type == PROTOBUF_C_TYPE_STRING || field->type == PROTOBUF_C_TYPE_BYTES;
    }
    size_t entries = singular + (arrays ? max / PB_UNPACKED_FLOAT_BYTES : 0);
    return ARENA_ROUND (desc->sizeof_message) + s_slab_bytes (entries)
         + ARENA_ROUND (max + strings) + 16 * (strings + arrays);
}

/* The most a well-formed request of at most MAX bytes makes protobuf-c allocate. Well-formed:
 * what protobuf encoders write: one body, each of its fields at most once except the repeated
 * ones, whose floats come packed (in one or more chunks) or unpacked, and no unknown fields. The
 * Request itself is one entry (no slab). Payloads outside that (a field repeated thousands of
 * times, empty packed chunks, unknown fields) may still decode in the slack, or be refused. */
static size_t s_arena_bytes (size_t max)
{
    const ProtobufCMessageDescriptor *bodies[] = { &sigserve__v1__infer_request__descriptor,
        &sigserve__v1__health_request__descriptor, &sigserve__v1__list_models_request__descriptor };
    size_t body = 0;
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        size_t need = s_body_bytes (bodies[i], max);
        body = need > body ? need : body;
    }
    return ARENA_ROUND (sizeof (Sigserve__V1__Request)) + body + ARENA_SLACK;
}

codec_t *codec_new (size_t max_message_bytes)
{
    codec_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    /* A hostile payload that needs more than a well-formed one (unknown fields cost protobuf-c
     * ~100 bytes of bookkeeping for as little as 2 wire bytes) is refused rather than let grow the
     * process. */
    /* Touched now: what a message of up to 64 KiB (the default limit) needs. The rest of a larger
     * limit's worst case (unpacked floats: ~7 bytes of bookkeeping a wire byte) is faulted in by the
     * first message that needs it, so a 64 MiB limit costs memory only when used. */
    self->arena = arena_new (s_arena_bytes (max_message_bytes),
                             s_arena_bytes (max_message_bytes < 65536 ? max_message_bytes : 65536));
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

/* ---------------------------------------------------------------------------------------------
 * The model name's wire bytes. protobuf-c hands a string over NUL-terminated and without its
 * length, so "tick_mlp\0x" would read as "tick_mlp"; the length comes from the payload itself. */

/* A cursor over protobuf wire bytes. It only runs on payloads protobuf-c accepted, but checks
 * every length against the bytes left anyway, and reads tags and lengths as protobuf-c 1.4 does
 * (at most 5 bytes each) so that both see the same fields. */
typedef struct {
    const uint8_t *at;
    const uint8_t *end;
} s_wire_t;

static bool s_wire_varint (s_wire_t *w, unsigned max_bytes, uint64_t *value)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < max_bytes && w->at < w->end; i++) {
        uint8_t b = *w->at++;
        v |= (uint64_t) (b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *value = v;
            return true;
        }
    }
    return false;
}

/* Moves past N bytes; false when fewer are left. */
static bool s_wire_skip (s_wire_t *w, uint64_t n)
{
    if (n > (uint64_t) (w->end - w->at))
        return false;
    w->at += n;
    return true;
}

/* The bytes of the last length-delimited entry of field FIELD in the message [MSG, MSG + LEN),
 * in *VALUE and *VALUE_LEN (NULL and 0 when there is none: the field's default). false when the
 * bytes do not parse as a message. */
static bool s_wire_last_bytes (const uint8_t *msg, size_t len, uint32_t field,
                               const uint8_t **value, size_t *value_len)
{
    s_wire_t w = { msg, msg + len };
    *value = NULL;
    *value_len = 0;
    while (w.at < w.end) {
        uint64_t key, n;
        if (!s_wire_varint (&w, 5, &key))
            return false;
        switch (key & 7) {
        case 0:                         /* varint */
            if (!s_wire_varint (&w, 10, &n))
                return false;
            break;
        case 1:                         /* fixed64 */
            if (!s_wire_skip (&w, 8))
                return false;
            break;
        case 2:                         /* length-delimited */
            if (!s_wire_varint (&w, 5, &n) || n > (uint64_t) (w.end - w.at))
                return false;
            if ((uint32_t) (key >> 3) == field) {
                *value = w.at;
                *value_len = (size_t) n;
            }
            w.at += n;
            break;
        case 5:                         /* fixed32 */
            if (!s_wire_skip (&w, 4))
                return false;
            break;
        default:                        /* groups: refused by protobuf-c too */
            return false;
        }
    }
    return true;
}

/* The offset of the first byte of S that does not begin a well-formed UTF-8 sequence (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF), or LEN when there is none. */
static size_t s_utf8_invalid_at (const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t more;                    /* continuation bytes */
        uint8_t lo = 0x80, hi = 0xbf;   /* bounds of the first continuation byte */
        if (c >= 0xc2 && c <= 0xdf)
            more = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            more = 2;
            if (c == 0xe0)
                lo = 0xa0;              /* overlong */
            else if (c == 0xed)
                hi = 0x9f;              /* surrogates */
        }
        else if (c >= 0xf0 && c <= 0xf4) {
            more = 3;
            if (c == 0xf0)
                lo = 0x90;              /* overlong */
            else if (c == 0xf4)
                hi = 0x8f;              /* above U+10FFFF */
        }
        else
            return i;
        if (more >= len - i)
            return i;
        for (size_t k = 1; k <= more; k++) {
            uint8_t b = s[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf))
                return i;
        }
        i += more + 1;
    }
    return len;
}

/* SIG_OK when the decoded model name MODEL is the whole of its wire bytes in PAYLOAD and those
 * are UTF-8, as proto3 requires of a string. */
static sig_status_t s_check_model (const uint8_t *payload, size_t len, const char *model, char *err,
                                   size_t errlen)
{
    const uint8_t *infer, *name;
    size_t infer_len, name_len;
    /* The last infer entry is the body (a oneof keeps the last), its last model entry the name. */
    if (!s_wire_last_bytes (payload, len, 1, &infer, &infer_len) || !infer
        || !s_wire_last_bytes (infer, infer_len, 2, &name, &name_len)) {
        snprintf (err, errlen, "payload: the infer body cannot be found in the %zu bytes; expected a "
                  "serialized sigserve.v1.Request", len);
        return SIG_BAD_REQUEST;
    }
    size_t decoded = strlen (model);
    if (decoded != name_len || (name_len && memcmp (model, name, name_len) != 0)) {
        if (decoded < name_len && memcmp (model, name, decoded) == 0 && name[decoded] == 0)
            snprintf (err, errlen, "model: contains a NUL byte at offset %zu; expected a model name",
                      decoded);
        else
            snprintf (err, errlen, "model: the decoded name differs from its %zu wire bytes; expected "
                      "a model name", name_len);
        return SIG_BAD_REQUEST;
    }
    size_t bad = s_utf8_invalid_at (name, name_len);
    if (bad < name_len) {
        snprintf (err, errlen, "model: not valid UTF-8 at byte %zu; expected a model name", bad);
        return SIG_BAD_REQUEST;
    }
    return SIG_OK;
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
    if (req->body_case == SIGSERVE__V1__REQUEST__BODY_INFER
        && s_check_model (payload, len, req->infer->model, err, errlen) != SIG_OK)
        return SIG_BAD_REQUEST;
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

void codec_model_info (codec_models_t *store, size_t i)
{
    const model_info_t *d = &store->described[i];
    Sigserve__V1__ModelInfo *info = &store->infos[i];
    sigserve__v1__model_info__init (info);
    info->name = (char *) d->name;
    info->version = (char *) d->version;
    info->backend = (char *) d->backend;
    info->kernel = (char *) d->kernel;
    info->input_size = d->input_size;
    info->output_size = d->output_size;
    info->max_rows = d->max_rows;
    info->available = d->available;
    info->instances = d->instances;
    info->max_batch_rows = d->max_batch_rows;
    info->queue_depth = d->queue_depth;
    info->selected_by = (char *) d->selected_by;
    info->type = (char *) d->type;
    info->window = d->window;
    info->step_size = d->step_size;
    for (size_t k = 0; k < d->candidate_count && k < MODEL_CANDIDATES_MAX; k++) {
        const autoselect_candidate_t *c = &d->candidates[k];
        Sigserve__V1__Candidate *w = &store->candidates[i][k];
        sigserve__v1__candidate__init (w);
        w->backend = (char *) c->backend;
        w->kernel = (char *) c->kernel;
        w->note = (char *) c->note;
        w->p50_us = c->p50_us;
        w->p99_us = c->p99_us;
        w->batch_rows = c->batch_rows;
        w->batch_p50_us = c->batch_p50_us;
        w->batch_p99_us = c->batch_p99_us;
        store->candidate_ptrs[i][k] = w;
    }
    info->n_candidates = d->candidate_count < MODEL_CANDIDATES_MAX ? d->candidate_count : MODEL_CANDIDATES_MAX;
    info->candidates = store->candidate_ptrs[i];
    for (uint32_t k = 0; k < d->instances && k < CONFIG_MAX_INSTANCES; k++) {
        const model_instance_info_t *ii = &d->instance[k];
        Sigserve__V1__InstanceInfo *w = &store->instances[i][k];
        sigserve__v1__instance_info__init (w);
        w->index = ii->index;
        w->backend = (char *) d->backend;
        w->device = ii->device;
        w->available = ii->available;
        w->state = (char *) ii->state;
        w->requests = ii->requests;
        w->warm_runs = ii->warm_runs;
        w->green_sms = ii->green_sms;
        store->instance_ptrs[i][k] = w;
    }
    info->n_instance_states = d->instances;
    info->instance_states = store->instance_ptrs[i];
}

size_t codec_arena_capacity (const codec_t *self) { return arena_capacity (self->arena); }
size_t codec_arena_high_water (const codec_t *self) { return arena_high_water (self->arena); }
