/* The streams (of an LSTM, a GRU) one worker instance holds: stream_id -> backend slot, sized at load
 * (backend_stream_slots), no allocation after. A stream idle for stream_idle_s gives its slot to
 * a new one; with every slot busy and none idle, a new stream is refused (the caller answers
 * OVERLOADED). Open addressing with backward-shift deletion. One worker thread only. */
#ifndef SIGSERVE_STREAMS_H
#define SIGSERVE_STREAMS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct _streams_t streams_t;

streams_t *streams_new (uint32_t slots, uint64_t idle_ns);
void streams_destroy (streams_t **self_p);

/* The slot of stream ID at time NOW: *FRESH is true when it was just given a slot (the caller
 * resets it). -1 when every slot belongs to a stream active within idle_ns. */
int streams_slot (streams_t *self, uint64_t id, uint64_t now, bool *fresh);
/* The slot stream ID holds, or -1 when it holds none (never seen, or given up); nothing changes. */
int streams_lookup (const streams_t *self, uint64_t id);
/* Steps applied to SLOT since it was given to its stream (0 when just given); streams_applied
 * counts one more. The numbering of steps (InferRequest.step) is checked against it. */
uint64_t streams_steps (const streams_t *self, int slot);
void streams_applied (streams_t *self, int slot);
/* SLOT's stream rebuilt from its history (stream_history.h): STEPS applied already. */
void streams_set_steps (streams_t *self, int slot, uint64_t steps);
/* Stream ID's slot given back (a rebuild that failed: its next step must not find it half made). */
void streams_forget (streams_t *self, uint64_t id);
/* Streams holding a slot. */
uint32_t streams_active (const streams_t *self);

#endif
