/* One admitted infer request on its way through the serving core. Jobs are allocated with their
 * model (a pool of queue_depth + what the workers can hold), so admitting a request allocates
 * nothing: the front copies the envelope frames in (a few bytes: routing ids, a REQ delimiter) and the
 * features out of the decoding arena, and hands the job to a worker through a ring; the worker fills the outcome and
 * hands it back; the front sends the reply and returns the job to the pool.
 * Fields above "worker" are written by the front before the hand-off, those below by the worker;
 * each side reads the other's only after the ring's release/acquire pair. */
#ifndef SIGSERVE_JOB_H
#define SIGSERVE_JOB_H

#include "base/status.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define JOB_ENVELOPE_MAX 15     /* routing frames echoed back: ROUTER id, REQ delimiter, proxies' ids */
#define JOB_ENVELOPE_BYTES 512  /* their bytes (a routing id is at most 255; ours are 8, libzmq's 5) */
#define JOB_ERROR_MAX 512
#define CLIENT_KEY_MAX 64
/* The most requests the front admits between two collections of finished jobs. A model's pool
 * holds queue_depth + instances x max_batch_rows + this many jobs, so a request that finds room in
 * its queue always finds a free job (model.c). */
#define JOB_INTAKE_TURN 64

/* Who sent a request, worked out once by the front when it takes the request (front/clients.h):
 * its CURVE public key, or its routing id, and the key's hash. */
typedef struct {
    uint64_t hash;
    uint8_t len;
    uint8_t key[CLIENT_KEY_MAX];
} client_id_t;

typedef struct _model_t model_t;

/* A frame as a transport hands it over: bytes the holder does not own. */
typedef struct {
    const uint8_t *data;
    size_t size;
} frame_t;

/* A request's routing frames, copied out of the message: its reply goes back on exactly these. */
typedef struct {
    uint16_t count;
    uint16_t used;                      /* bytes in BYTES */
    uint16_t size[JOB_ENVELOPE_MAX];
    uint8_t bytes[JOB_ENVELOPE_BYTES];
} envelope_t;

/* Whether COUNT frames fit an envelope. */
static inline bool envelope_fits (const frame_t *frames, int count)
{
    size_t bytes = 0;
    for (int f = 0; f < count; f++)
        bytes += frames[f].size;
    return count >= 0 && count <= JOB_ENVELOPE_MAX && bytes <= JOB_ENVELOPE_BYTES;
}

/* Copies COUNT frames (envelope_fits) into E. */
static inline void envelope_copy (envelope_t *e, const frame_t *frames, int count)
{
    e->count = (uint16_t) count;
    e->used = 0;
    for (int f = 0; f < count; f++) {
        e->size[f] = (uint16_t) frames[f].size;
        if (frames[f].size)
            memcpy (e->bytes + e->used, frames[f].data, frames[f].size);
        e->used = (uint16_t) (e->used + frames[f].size);
    }
}

/* E's frames as views into it (OUT: JOB_ENVELOPE_MAX); their count. */
static inline int envelope_frames (const envelope_t *e, frame_t *out)
{
    size_t at = 0;
    for (int f = 0; f < e->count; f++) {
        out[f] = (frame_t) { e->bytes + at, e->size[f] };
        at += e->size[f];
    }
    return e->count;
}

typedef struct job {
    /* front */
    uint8_t lane;                       /* the front (its lane) that admitted it, and takes it back */
    int socket;                         /* that front's socket slot the request came from */
    envelope_t envelope;
    uint64_t request_id;
    uint64_t t_recv;                    /* CLOCK_MONOTONIC ns at receipt */
    uint64_t stream_id;
    uint64_t step;                      /* a stream step's number (0: not numbered) */
    uint32_t rows;
    uint32_t deadline_us;
    bool fallback;                      /* handed to the model's CPU fallback (dispatch.c), not one of its own */
    bool counted;                       /* counted against its client's in-flight limit ... */
    client_id_t client;                 /* ... as this client (set when counted) */
    float *features;                    /* rows x input size: its own buffer_rows rows, or a large buffer */
    int32_t instance;                   /* the instance it was handed to, until collected back (-1: none) */
    /* worker */
    sig_status_t status;
    uint64_t t_start;                   /* the worker took it */
    uint64_t compute_ns;                /* its launch (the whole batch) */
    uint32_t batch_rows;                /* rows in that launch */
    float *outputs;                     /* rows x output size (beside features) */
    /* the pool's: the job's own buffer (buffer_rows rows) and the large buffer it holds (-1: none) */
    float *own_features, *own_outputs;
    int large;
    char error[JOB_ERROR_MAX];          /* when status is not OK */
} job_t;

#endif
