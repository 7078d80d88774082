/* The CPU recurrent backends' stream slots (rnn_slots.h). */
#include "backends/rnn_slots.h"
#include "base/floats.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

int rnn_slots_init (rnn_slots_t *self, uint32_t count, uint32_t W, uint32_t N, uint32_t in_pad, size_t state_floats,
                    const rnn_slots_backend_t *backend)
{
    memset (self, 0, sizeof *self);
    self->count = count;
    self->W = W;
    self->N = N;
    self->keep_proj = (uint64_t) count * W * N * sizeof (float) <= RNN_SLOTS_PROJ_MAX_BYTES;
    self->ring_row = self->keep_proj ? N : in_pad;
    self->state_floats = state_floats;
    self->slot_floats = ((size_t) W * self->ring_row + state_floats + 15) / 16 * 16;
    self->backend = *backend;
    if (!(self->mem = floats_zeroed ((size_t) count * self->slot_floats))
        || !(self->slot = calloc (count ? count : 1, sizeof *self->slot))
        || !(self->reset_state = floats_zeroed (state_floats)) || !(self->zeros = floats_zeroed (N)))
        return -1;
    return 0;
}

void rnn_slots_free (rnn_slots_t *self)
{
    if (!self)
        return;
    free (self->mem);
    free (self->slot);
    free (self->reset_state);
    free (self->zeros);
    memset (self, 0, sizeof *self);
}

void rnn_slots_start (rnn_slots_t *self)
{
    for (uint32_t t = 0; t < self->W; t++)   /* a window of zeros: its W - 1 steps project to 0 */
        self->backend.p0[t] = self->zeros;
    self->backend.rerun (self->backend.ctx, self->reset_state);
    for (uint32_t s = 0; s < self->count; s++)
        rnn_slots_reset (self, s);
}

void rnn_slots_reset (rnn_slots_t *self, uint32_t slot)
{
    if (slot >= self->count)
        return;
    memset (rnn_slots_ring (self, slot), 0, (size_t) self->W * self->ring_row * sizeof (float));
    memcpy (rnn_slots_state (self, slot), self->reset_state, self->state_floats * sizeof (float));
    self->slot[slot] = (rnn_slot_t) { .pos = 0, .owed = false };
}

void rnn_slots_advance (rnn_slots_t *self, uint32_t slot)
{
    if (slot >= self->count || !self->slot[slot].owed)
        return;
    const rnn_slots_backend_t *b = &self->backend;
    const uint32_t W = self->W, T = W - 1, first = (self->slot[slot].pos + 1) % W;
    const float *ring = rnn_slots_ring (self, slot);
    if (self->keep_proj) {
        for (uint32_t t = 0; t < T; t++)
            b->p0[t] = ring + (size_t) ((first + t) % W) * self->ring_row;
    } else {
        const uint32_t run = T < W - first ? T : W - first;
        if (run)
            b->project (b->ctx, ring + (size_t) first * self->ring_row, self->ring_row, run, b->proj0);
        if (T > run)
            b->project (b->ctx, ring, self->ring_row, T - run, b->proj0 + (size_t) run * self->N);
        for (uint32_t t = 0; t < T; t++)
            b->p0[t] = b->proj0 + (size_t) t * self->N;
    }
    b->rerun (b->ctx, rnn_slots_state (self, slot));
    self->slot[slot].owed = false;
}

int rnn_slots_step_begin (rnn_slots_t *self, uint32_t slot, const char *model, char *err, size_t errlen)
{
    if (slot >= self->count) {
        sig_set_error (err, errlen, "model \"%s\": stream slot %u of %u", model, slot, self->count);
        return -1;
    }
    rnn_slots_advance (self, slot);
    return 0;
}
