/* Protobuf decoding with a bounded allocator, and reply encoding into a caller's buffer.
 * A request is unpacked into an arena that is reset for every request: no heap allocation per
 * request, and a hostile payload that would need more memory than the arena holds is refused
 * (STATUS_BAD_REQUEST) instead of growing the process. */
#ifndef SIGSERVE_CODEC_H
#define SIGSERVE_CODEC_H

#include "base/config.h"
#include "base/status.h"
#include "serving/model.h"
#include "signal.pb-c.h"
#include <stddef.h>
#include <stdint.h>

typedef struct _codec_t codec_t;

/* MAX_MESSAGE_BYTES: the largest payload the server accepts; the arena is sized from it (from what
 * protobuf-c allocates while unpacking, codec.c says how) so that every well-formed request of
 * that size fits, features packed or unpacked: 7 to 14 x MAX_MESSAGE_BYTES + 64 KiB, of which what
 * a 64 KiB message needs is touched here (about 650 KB); the rest takes memory only once a larger
 * message needs it. NULL when memory runs out. */
codec_t *codec_new (size_t max_message_bytes);
void codec_destroy (codec_t **self_p);

/* Decodes PAYLOAD into *REQUEST (valid until the next decode). SIG_OK, or SIG_BAD_REQUEST with a
 * message in ERR: empty payload, undecodable bytes, more decoding memory than the arena holds, no
 * body, or an infer body whose model name has a NUL byte or is not UTF-8 (the decoded name would
 * otherwise stop at the NUL and match a model it does not name). */
sig_status_t codec_decode_request (codec_t *self, const void *payload, size_t len,
                                   Sigserve__V1__Request **request, char *err, size_t errlen);

/* Packs REPLY into BUF. The packed size, or 0 when it would not fit in CAP. */
size_t codec_encode_reply (const Sigserve__V1__Reply *reply, uint8_t *buf, size_t cap);

/* What a ListModelsReply of up to CONFIG_MAX_MODELS models is built in: the models' descriptions
 * and the wire structures pointing into them. Large (about a megabyte, barely touched): one per
 * front, reused for every list_models request. */
typedef struct {
    model_info_t described[CONFIG_MAX_MODELS];
    Sigserve__V1__ModelInfo infos[CONFIG_MAX_MODELS];
    Sigserve__V1__ModelInfo *info_ptrs[CONFIG_MAX_MODELS];
    Sigserve__V1__Candidate candidates[CONFIG_MAX_MODELS][MODEL_CANDIDATES_MAX];
    Sigserve__V1__Candidate *candidate_ptrs[CONFIG_MAX_MODELS][MODEL_CANDIDATES_MAX];
    Sigserve__V1__InstanceInfo instances[CONFIG_MAX_MODELS][CONFIG_MAX_INSTANCES];
    Sigserve__V1__InstanceInfo *instance_ptrs[CONFIG_MAX_MODELS][CONFIG_MAX_INSTANCES];
} codec_models_t;

/* Renders STORE->described[I] as STORE->infos[I] (pointers into STORE: valid while it is). */
void codec_model_info (codec_models_t *store, size_t i);

/* The arena's size in bytes and the high-water mark of its use (for tests and stats). */
size_t codec_arena_capacity (const codec_t *self);
size_t codec_arena_high_water (const codec_t *self);

#endif
