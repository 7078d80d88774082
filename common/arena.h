/* A bump allocator over one block allocated up front, reset as a whole. Requests are decoded into
 * one (server, sigload's replies), so decoding allocates nothing per message, and a payload that
 * would need more memory than the arena holds fails to decode instead of growing the process. */
#ifndef SIGSERVE_ARENA_H
#define SIGSERVE_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct _arena_t arena_t;

/* CAPACITY bytes, the first TOUCH of them touched now (so a message that needs no more does not
 * fault pages in; the rest cost address space, not memory, until a large message uses them).
 * NULL when memory runs out. */
arena_t *arena_new (size_t capacity, size_t touch);
void arena_destroy (arena_t **self_p);

/* Forgets every allocation (and the exhausted flag); keeps the high-water mark. */
void arena_reset (arena_t *self);
/* SIZE bytes aligned to 16, or NULL (and the exhausted flag set) when they do not fit. */
void *arena_alloc (arena_t *self, size_t size);
/* A protobuf-c allocator drawing from the arena; its free does nothing (reset frees all). */
ProtobufCAllocator *arena_protobuf_allocator (arena_t *self);

size_t arena_capacity (const arena_t *self);
/* The most bytes used between two resets, ever. */
size_t arena_high_water (const arena_t *self);
/* Whether an allocation failed since the last reset. */
bool arena_exhausted (const arena_t *self);

#endif
