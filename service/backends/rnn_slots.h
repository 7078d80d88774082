/* The stream slots of the CPU recurrent backends (backend_lstm_cpu.c, backend_gru_cpu.c), one
 * layout and one advance for both. A slot keeps its stream's window as a ring of W entries, then
 * the state its last W - 1 steps leave (the backend's: STATE floats, e.g. the gates' recurrent part
 * per layer and the LSTM's c or the GRU's h). The ring holds layer 0's input projections W_ih x (N
 * floats an entry, what a new step adds, computed once by the step) when they fit in 512 MiB over
 * every slot, else the raw steps (IN_PAD floats an entry: an advance projects them again). An
 * advance reruns the last W - 1 steps from a zero state with the backend's rerun; a reset copies
 * the state of a window of zeros, which rnn_slots_start has the backend compute once.
 *
 * The struct is the backend's to embed and is read on a step's path: its fields are open and its
 * accessors inline. Everything is allocated by rnn_slots_init, at load; nothing after. */
#ifndef SIGSERVE_RNN_SLOTS_H
#define SIGSERVE_RNN_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RNN_SLOTS_PROJ_MAX_BYTES (512ull << 20)   /* above: the rings keep raw steps */

/* What the backend does for an advance, on its own buffers. */
typedef struct {
    /* Layer 0's projections W_ih x (no bias) of T raw steps X (XS floats apart) into Y ([T][N]). */
    void (*project) (const void *ctx, const float *x, size_t xs, uint32_t T, float *y);
    /* From a zero state through the W - 1 steps whose layer-0 projections P0 points at: the state
     * they leave, into STATE (state_floats). */
    void (*rerun) (void *ctx, float *state);
    void *ctx;
    float *proj0;               /* [W - 1][N]: where raw steps are projected */
    const float **p0;           /* [W]: the projections the rerun reads */
} rnn_slots_backend_t;

typedef struct {
    uint32_t pos;               /* ring position of the next step */
    bool owed;                  /* a step ran and no advance since: the state is stale */
} rnn_slot_t;

typedef struct {
    uint32_t count;             /* slots */
    uint32_t W;                 /* ring entries: the window */
    uint32_t N;                 /* floats of a step's projection */
    bool keep_proj;             /* the ring holds W_ih0 x (N floats), else x (in_pad floats) */
    size_t ring_row;            /* floats per ring entry */
    size_t state_floats;        /* the state after each ring */
    size_t slot_floats;         /* ring W x ring_row, then the state, rounded up to 16 floats */
    float *mem;                 /* count x slot_floats */
    rnn_slot_t *slot;           /* count (one at least) */
    float *reset_state;         /* state_floats: a window of zeros' state (rnn_slots_start) */
    float *zeros;               /* N zeros: the projection of a zero step */
    rnn_slots_backend_t backend;
} rnn_slots_t;

/* COUNT slots (0 allowed) of windows of W steps; N: floats of a step's projection, IN_PAD: of a raw
 * step's row; STATE_FLOATS: the backend's state after each ring; BACKEND: its advance (copied).
 * 0, or -1 when memory runs out (what was allocated is for rnn_slots_free). */
int rnn_slots_init (rnn_slots_t *self, uint32_t count, uint32_t W, uint32_t N, uint32_t in_pad, size_t state_floats,
                    const rnn_slots_backend_t *backend);

/* Frees the members and zeroes SELF: safe on a zeroed one, and twice. */
void rnn_slots_free (rnn_slots_t *self);

/* Once the backend can rerun (its weights in place): the state of a window of zeros, and every slot
 * reset to it. */
void rnn_slots_start (rnn_slots_t *self);

static inline float *rnn_slots_ring (const rnn_slots_t *self, uint32_t slot)
{
    return self->mem + (size_t) slot * self->slot_floats;
}

/* The state after SLOT's ring. */
static inline float *rnn_slots_state (const rnn_slots_t *self, uint32_t slot)
{
    return rnn_slots_ring (self, slot) + (size_t) self->W * self->ring_row;
}

/* The ring entry SLOT's next step writes. */
static inline float *rnn_slots_entry (const rnn_slots_t *self, uint32_t slot)
{
    return rnn_slots_ring (self, slot) + (size_t) self->slot[slot].pos * self->ring_row;
}

/* After a step of SLOT: the ring moves on, and the state is stale until the advance. */
static inline void rnn_slots_stepped (rnn_slots_t *self, uint32_t slot)
{
    self->slot[slot].pos = (self->slot[slot].pos + 1) % self->W;
    self->slot[slot].owed = true;
}

/* SLOT's window all zeros: its ring cleared, the state of a window of zeros. Past the table: nothing. */
void rnn_slots_reset (rnn_slots_t *self, uint32_t slot);

/* SLOT's owed advance (none owed, or past the table: nothing): layer 0's projections of its last
 * W - 1 steps, oldest first (from the ring, or projected from its raw steps in at most two
 * contiguous runs), rerun by the backend into the slot's state. */
void rnn_slots_advance (rnn_slots_t *self, uint32_t slot);

/* Before a step of SLOT: -1 with ERR naming MODEL when SLOT is past the table; else its owed
 * advance runs (on the critical path) and 0. */
int rnn_slots_step_begin (rnn_slots_t *self, uint32_t slot, const char *model, char *err, size_t errlen);

#endif
