#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 16

struct _arena_t {
    uint8_t *base;              /* the block */
    size_t capacity;            /* its size */
    size_t used;                /* bytes handed out since the last reset */
    size_t high_water;          /* most ever used between two resets */
    bool exhausted;             /* an allocation did not fit since the last reset */
    ProtobufCAllocator allocator;
};

static void *s_pb_alloc (void *data, size_t size) { return arena_alloc (data, size); }
static void s_pb_free (void *data, void *ptr) { (void) data, (void) ptr; }

arena_t *arena_new (size_t capacity, size_t touch)
{
    arena_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->capacity = capacity;
    self->base = aligned_alloc (64, (capacity + 63) & ~(size_t) 63);
    if (!self->base) {
        free (self);
        return NULL;
    }
    memset (self->base, 0, touch < capacity ? touch : capacity);
    self->allocator = (ProtobufCAllocator) { .alloc = s_pb_alloc, .free = s_pb_free, .allocator_data = self };
    return self;
}

void arena_destroy (arena_t **self_p)
{
    if (self_p && *self_p) {
        free ((*self_p)->base);
        free (*self_p);
        *self_p = NULL;
    }
}

void arena_reset (arena_t *self)
{
    self->used = 0;
    self->exhausted = false;
}

void *arena_alloc (arena_t *self, size_t size)
{
    size_t start = (self->used + ARENA_ALIGN - 1) & ~(size_t) (ARENA_ALIGN - 1);
    if (start > self->capacity || size > self->capacity - start) {
        self->exhausted = true;
        return NULL;
    }
    self->used = start + size;
    if (self->used > self->high_water)
        self->high_water = self->used;
    return self->base + start;
}

ProtobufCAllocator *arena_protobuf_allocator (arena_t *self) { return &self->allocator; }
size_t arena_capacity (const arena_t *self) { return self->capacity; }
size_t arena_high_water (const arena_t *self) { return self->high_water; }
bool arena_exhausted (const arena_t *self) { return self->exhausted; }
