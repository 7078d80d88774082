/* The stream slots of a type with streams (streams.h). */
#include "serving/streams.h"

#include <stdlib.h>

typedef struct {
    uint64_t id;                /* 0: empty (stream ids are never 0) */
    uint64_t last;              /* CLOCK_MONOTONIC ns of its last step */
    uint32_t slot;
} entry_t;

struct _streams_t {
    uint32_t slots;
    uint64_t idle_ns;
    size_t mask;                /* table size - 1: a power of two, at least twice the slots */
    entry_t *table;
    uint32_t *free_slots;
    uint32_t free_count;
    uint64_t *steps;            /* [slots]: steps applied since the slot was given to its stream */
};

streams_t *streams_new (uint32_t slots, uint64_t idle_ns)
{
    streams_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    size_t n = 16;
    while (n < 2 * (size_t) slots)
        n <<= 1;
    self->slots = slots;
    self->idle_ns = idle_ns;
    self->mask = n - 1;
    self->table = calloc (n, sizeof *self->table);
    self->free_slots = calloc (slots ? slots : 1, sizeof *self->free_slots);
    self->steps = calloc (slots ? slots : 1, sizeof *self->steps);
    if (!self->table || !self->free_slots || !self->steps) {
        streams_destroy (&self);
        return NULL;
    }
    for (uint32_t i = 0; i < slots; i++)
        self->free_slots[self->free_count++] = slots - 1 - i;
    return self;
}

void streams_destroy (streams_t **self_p)
{
    if (self_p && *self_p) {
        free ((*self_p)->table);
        free ((*self_p)->free_slots);
        free ((*self_p)->steps);
        free (*self_p);
        *self_p = NULL;
    }
}

static size_t s_home (const streams_t *self, uint64_t id)
{
    uint64_t h = id * 0x9e3779b97f4a7c15ull;
    return (size_t) (h ^ (h >> 32)) & self->mask;
}

static void s_remove (streams_t *self, size_t i)
{
    self->free_slots[self->free_count++] = self->table[i].slot;
    self->table[i].id = 0;
    size_t hole = i;
    for (size_t j = (i + 1) & self->mask; self->table[j].id; j = (j + 1) & self->mask) {
        size_t home = s_home (self, self->table[j].id);
        if (((j - home) & self->mask) >= ((j - hole) & self->mask)) {
            self->table[hole] = self->table[j];
            self->table[j].id = 0;
            hole = j;
        }
    }
}

/* Frees the slots of streams idle for idle_ns: at most a full pass, only when every slot is
 * taken (a stream refused otherwise), so the cost lands on the rare new stream, not on steps. */
static void s_evict_idle (streams_t *self, uint64_t now)
{
    for (size_t i = 0; i <= self->mask;) {
        if (self->table[i].id && now - self->table[i].last >= self->idle_ns) {
            s_remove (self, i);     /* an entry may have moved into i: look at it again */
            continue;
        }
        i++;
    }
}

int streams_slot (streams_t *self, uint64_t id, uint64_t now, bool *fresh)
{
    size_t i = s_home (self, id);
    while (self->table[i].id && self->table[i].id != id)
        i = (i + 1) & self->mask;
    *fresh = false;
    if (self->table[i].id == id) {
        self->table[i].last = now;
        return (int) self->table[i].slot;
    }
    if (self->free_count == 0) {
        s_evict_idle (self, now);
        if (self->free_count == 0)
            return -1;
        i = s_home (self, id);      /* the table moved: find the free place again */
        while (self->table[i].id)
            i = (i + 1) & self->mask;
    }
    self->table[i] = (entry_t) { .id = id, .last = now, .slot = self->free_slots[--self->free_count] };
    self->steps[self->table[i].slot] = 0;
    *fresh = true;
    return (int) self->table[i].slot;
}

int streams_lookup (const streams_t *self, uint64_t id)
{
    size_t i = s_home (self, id);
    while (self->table[i].id && self->table[i].id != id)
        i = (i + 1) & self->mask;
    return self->table[i].id == id ? (int) self->table[i].slot : -1;
}

void streams_forget (streams_t *self, uint64_t id)
{
    size_t i = s_home (self, id);
    while (self->table[i].id && self->table[i].id != id)
        i = (i + 1) & self->mask;
    if (self->table[i].id == id)
        s_remove (self, i);
}

uint64_t streams_steps (const streams_t *self, int slot) { return self->steps[slot]; }
void streams_applied (streams_t *self, int slot) { self->steps[slot]++; }
void streams_set_steps (streams_t *self, int slot, uint64_t steps) { self->steps[slot] = steps; }

uint32_t streams_active (const streams_t *self) { return self->slots - self->free_count; }
