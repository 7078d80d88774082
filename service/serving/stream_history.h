/* The last window of steps each stream applied, kept where the instance's worker cannot take it with
 * it (issue 38): in the region shared with the device processes (placement_devices allocates it
 * beside the instance's rings), so that when a device process is lost, the worker of the process
 * that replaces it rebuilds a stream it finds no slot for by replaying these steps into a fresh slot:
 * a recurrent model's state after a step depends only on the last `window` steps (rnn_slots.h), so
 * the next step's output is what it would have been without the loss.
 *
 * Why the worker writes it, not the front at admission: the worker knows a step was applied (its
 * output computed), the front only that it was sent; and it holds the features already. It writes a
 * step before the step's reply goes back, so every step a client saw answered is in it (a process
 * lost between the two leaves a step applied whose reply the client never got: its next try is
 * refused as "a step already applied", as for any lost reply). A step is copied into the ring slot
 * of the step a window before it, which a rebuild never needs, and only then counted (release): a
 * process killed mid-copy leaves the history as it was.
 *
 * Bounded: `streams` entries of window x step_size floats each. A new stream takes an empty entry,
 * or one whose stream has been idle for stream_idle_s, else the least recently stepped one's: that
 * one is evicted (counted, its id remembered), and if its instance is then lost it cannot be
 * rebuilt: its next step is refused, naming the eviction (never silently restarted).
 *
 * One writer at a time: the instance's worker (a lost process's worker is gone before the new one
 * starts). No pointers inside: it means the same in every process that maps it. */
#ifndef SIGSERVE_STREAM_HISTORY_H
#define SIGSERVE_STREAM_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _stream_history_t stream_history_t;

/* Bytes of a history of STREAMS streams of WINDOW steps of STEP_SIZE floats. */
size_t stream_history_bytes (uint32_t streams, uint32_t window, uint32_t step_size);
/* Makes BYTES (stream_history_bytes, zeroed) a history of that shape; streams idle IDLE_NS are given up. */
stream_history_t *stream_history_init (void *bytes, uint32_t streams, uint32_t window, uint32_t step_size,
                                       uint64_t idle_ns);

/* The entry of stream ID (not idle at NOW), or -1. Scans every entry: for a stream the worker holds
 * no slot for (a new one, or one to rebuild), not for every step. */
int stream_history_find (const stream_history_t *self, uint64_t id, uint64_t now);
/* Whether stream ID was evicted (among the last `streams` evicted) and not kept since. */
bool stream_history_evicted (const stream_history_t *self, uint64_t id);
/* An entry for stream ID, which has applied STEPS steps of which none is kept, at NOW (evicting the
 * least recently stepped stream when every entry holds one active within idle_ns). */
int stream_history_enter (stream_history_t *self, uint64_t id, uint64_t steps, uint64_t now);
/* Whether ENTRY still belongs to stream ID (another may have evicted it). */
bool stream_history_holds (const stream_history_t *self, int entry, uint64_t id);
/* STEP (step_size floats), applied to ENTRY's stream at NOW, kept. No allocation, no lock. */
void stream_history_record (stream_history_t *self, int entry, const float *step, uint64_t now);
/* Steps ENTRY's stream applied. */
uint64_t stream_history_steps (const stream_history_t *self, int entry);
/* The steps a rebuild of ENTRY replays (the last window - 1, or all when fewer), or -1 when some of
 * them are not kept (it entered after its first steps, an eviction ago, and has not stepped a
 * window since). */
int stream_history_replay_count (const stream_history_t *self, int entry);
/* The K-th of those, oldest first. */
const float *stream_history_replay_step (const stream_history_t *self, int entry, uint32_t k);

/* Streams kept at once (the bound), evictions of streams still active, streams rebuilt. */
uint32_t stream_history_streams (const stream_history_t *self);
uint64_t stream_history_evictions (const stream_history_t *self);
uint64_t stream_history_rebuilds (const stream_history_t *self);
void stream_history_rebuilt (stream_history_t *self);

#endif
