/* The streams' last windows of steps, in the shared region (stream_history.h). */
#include "serving/stream_history.h"

#include <stdatomic.h>
#include <string.h>

typedef struct {
    _Atomic uint64_t id;                /* 0: empty (stream ids are never 0); set last when entered */
    _Atomic uint64_t steps;             /* steps its stream applied (counted after the step is copied) */
    uint64_t first;                     /* steps applied before it entered: those are not kept */
    _Atomic uint64_t last;              /* CLOCK_MONOTONIC ns of its last step */
} entry_t;

struct _stream_history_t {
    uint32_t streams, window, step_size;
    uint64_t idle_ns;
    _Atomic uint64_t evictions;         /* of streams active within idle_ns */
    _Atomic uint64_t rebuilds;
    uint64_t evicted_count;             /* evicted[evicted_count % streams] is the next to write */
    /* then: entry_t entries[streams]; uint64_t evicted[streams]; float steps[streams][window][step_size] */
};

static entry_t *s_entries (const stream_history_t *self) { return (entry_t *) (void *) (self + 1); }
static uint64_t *s_evicted (const stream_history_t *self)
{
    return (uint64_t *) (void *) (s_entries (self) + self->streams);
}
static float *s_ring (const stream_history_t *self, int entry)
{
    float *base = (float *) (void *) (s_evicted (self) + self->streams);
    return base + (size_t) entry * self->window * self->step_size;
}

size_t stream_history_bytes (uint32_t streams, uint32_t window, uint32_t step_size)
{
    return sizeof (stream_history_t) + (size_t) streams * (sizeof (entry_t) + sizeof (uint64_t))
           + (size_t) streams * window * step_size * sizeof (float);
}

stream_history_t *stream_history_init (void *bytes, uint32_t streams, uint32_t window, uint32_t step_size,
                                       uint64_t idle_ns)
{
    _Static_assert (sizeof (stream_history_t) % 8 == 0 && sizeof (entry_t) % 8 == 0, "the arrays stay aligned");
    stream_history_t *self = bytes;
    self->streams = streams;
    self->window = window ? window : 1;
    self->step_size = step_size;
    self->idle_ns = idle_ns;
    return self;
}

int stream_history_find (const stream_history_t *self, uint64_t id, uint64_t now)
{
    const entry_t *e = s_entries (self);
    for (uint32_t i = 0; i < self->streams; i++)
        if (atomic_load_explicit (&e[i].id, memory_order_acquire) == id)
            return now - atomic_load_explicit (&e[i].last, memory_order_relaxed) < self->idle_ns ? (int) i : -1;
    return -1;
}

bool stream_history_evicted (const stream_history_t *self, uint64_t id)
{
    const uint64_t *ev = s_evicted (self);
    for (uint32_t i = 0; i < self->streams; i++)
        if (ev[i] == id)
            return true;
    return false;
}

int stream_history_enter (stream_history_t *self, uint64_t id, uint64_t steps, uint64_t now)
{
    entry_t *e = s_entries (self);
    int take = -1, oldest = -1;
    uint64_t oldest_last = UINT64_MAX;
    for (uint32_t i = 0; i < self->streams && take < 0; i++)    /* its own entry (left incomplete), if any */
        if (atomic_load_explicit (&e[i].id, memory_order_relaxed) == id)
            take = (int) i;
    for (uint32_t i = 0; i < self->streams && take < 0; i++) {
        const uint64_t last = atomic_load_explicit (&e[i].last, memory_order_relaxed);
        if (!atomic_load_explicit (&e[i].id, memory_order_relaxed) || now - last >= self->idle_ns)
            take = (int) i;
        else if (last < oldest_last) {
            oldest_last = last;
            oldest = (int) i;
        }
    }
    if (take < 0) {
        if (oldest < 0)
            return -1;      /* (streams == 0) */
        take = oldest;
        uint64_t *ev = s_evicted (self);
        ev[self->evicted_count++ % self->streams] = atomic_load_explicit (&e[take].id, memory_order_relaxed);
        atomic_fetch_add_explicit (&self->evictions, 1, memory_order_relaxed);
    }
    /* no longer kept for stream ID once it holds an entry again */
    uint64_t *ev = s_evicted (self);
    for (uint32_t i = 0; i < self->streams; i++)
        if (ev[i] == id)
            ev[i] = 0;
    entry_t *t = &e[take];
    atomic_store_explicit (&t->id, 0, memory_order_release);
    atomic_store_explicit (&t->steps, steps, memory_order_relaxed);
    t->first = steps;
    atomic_store_explicit (&t->last, now, memory_order_relaxed);
    atomic_store_explicit (&t->id, id, memory_order_release);
    return take;
}

bool stream_history_holds (const stream_history_t *self, int entry, uint64_t id)
{
    return entry >= 0 && atomic_load_explicit (&s_entries (self)[entry].id, memory_order_relaxed) == id;
}

void stream_history_record (stream_history_t *self, int entry, const float *step, uint64_t now)
{
    entry_t *e = &s_entries (self)[entry];
    const uint64_t n = atomic_load_explicit (&e->steps, memory_order_relaxed);
    memcpy (s_ring (self, entry) + (size_t) (n % self->window) * self->step_size, step, self->step_size * sizeof (float));
    atomic_store_explicit (&e->last, now, memory_order_relaxed);
    atomic_store_explicit (&e->steps, n + 1, memory_order_release);
}

uint64_t stream_history_steps (const stream_history_t *self, int entry)
{
    return atomic_load_explicit (&s_entries (self)[entry].steps, memory_order_acquire);
}

int stream_history_replay_count (const stream_history_t *self, int entry)
{
    const entry_t *e = &s_entries (self)[entry];
    const uint64_t steps = atomic_load_explicit (&e->steps, memory_order_acquire);
    const uint64_t need = steps < self->window - 1u ? steps : self->window - 1u;
    return steps - e->first >= need ? (int) need : -1;
}

const float *stream_history_replay_step (const stream_history_t *self, int entry, uint32_t k)
{
    const uint64_t steps = stream_history_steps (self, entry);
    const uint64_t need = steps < self->window - 1u ? steps : self->window - 1u;
    return s_ring (self, entry) + (size_t) ((steps - need + k) % self->window) * self->step_size;
}

uint32_t stream_history_streams (const stream_history_t *self) { return self->streams; }
uint64_t stream_history_evictions (const stream_history_t *self) { return atomic_load (&self->evictions); }
uint64_t stream_history_rebuilds (const stream_history_t *self) { return atomic_load (&self->rebuilds); }
void stream_history_rebuilt (stream_history_t *self) { atomic_fetch_add (&self->rebuilds, 1); }
