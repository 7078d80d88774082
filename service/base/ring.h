/* A bounded single-producer/single-consumer ring of pointers: the hand-off between the front
 * thread and a worker (requests one way, finished requests the other). Lock-free and
 * allocation-free after ring_init: the producer owns tail, the consumer owns head, each on its
 * own cache line; a push publishes the item with a release store of tail, a pop reads tail with
 * acquire, so the consumer sees everything the producer wrote into the item before pushing it. */
#ifndef SIGSERVE_RING_H
#define SIGSERVE_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

typedef struct {
    _Alignas (64) _Atomic size_t head;      /* next slot to pop: written by the consumer only */
    _Alignas (64) _Atomic size_t tail;      /* next slot to push: written by the producer only */
    _Alignas (64) size_t mask;              /* capacity - 1 (a power of two) */
    void **items;
} ring_t;

/* Room for at least CAPACITY items (rounded up to a power of two). 0, or -1 when out of memory. */
static inline int ring_init (ring_t *r, size_t capacity)
{
    size_t n = 1;
    while (n < capacity)
        n <<= 1;
    atomic_init (&r->head, 0);
    atomic_init (&r->tail, 0);
    r->mask = n - 1;
    r->items = calloc (n, sizeof *r->items);
    return r->items ? 0 : -1;
}

/* Slots a ring of CAPACITY items has (a power of two): what ring_init_at needs. */
static inline size_t ring_slots (size_t capacity)
{
    size_t n = 1;
    while (n < capacity)
        n <<= 1;
    return n;
}

/* A ring over ITEMS, SLOTS of them (ring_slots), owned by the caller (shared memory): no
 * ring_release. */
static inline void ring_init_at (ring_t *r, void **items, size_t slots)
{
    atomic_init (&r->head, 0);
    atomic_init (&r->tail, 0);
    r->mask = slots - 1;
    r->items = items;
}

static inline void ring_release (ring_t *r)
{
    free (r->items);
    r->items = NULL;
}

/* Producer: false when full. */
static inline bool ring_push (ring_t *r, void *item)
{
    size_t tail = atomic_load_explicit (&r->tail, memory_order_relaxed);
    if (tail - atomic_load_explicit (&r->head, memory_order_acquire) > r->mask)
        return false;
    r->items[tail & r->mask] = item;
    atomic_store_explicit (&r->tail, tail + 1, memory_order_release);
    return true;
}

/* Consumer: the oldest item without taking it, or NULL when empty. */
static inline void *ring_peek (ring_t *r)
{
    size_t head = atomic_load_explicit (&r->head, memory_order_relaxed);
    if (head == atomic_load_explicit (&r->tail, memory_order_acquire))
        return NULL;
    return r->items[head & r->mask];
}

/* Consumer: takes the oldest item, or NULL when empty. */
static inline void *ring_pop (ring_t *r)
{
    size_t head = atomic_load_explicit (&r->head, memory_order_relaxed);
    if (head == atomic_load_explicit (&r->tail, memory_order_acquire))
        return NULL;
    void *item = r->items[head & r->mask];
    atomic_store_explicit (&r->head, head + 1, memory_order_release);
    return item;
}

/* How many items are in the ring: exact for the producer and the consumer. From any other thread
 * only an estimate: head and tail are read one after the other, and both may move in between (a
 * push and a pop make the reading too high; a reader that wants a bound re-reads, as the metrics
 * do, metrics_queued). */
static inline size_t ring_count (ring_t *r)
{
    size_t head = atomic_load_explicit (&r->head, memory_order_acquire);
    return atomic_load_explicit (&r->tail, memory_order_acquire) - head;
}

#endif
