#include "front/clients.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t inflight;          /* 0: free */
    client_id_t id;
} entry_t;

struct _clients_t {
    size_t mask;                /* table size - 1 (a power of two, at least twice the capacity) */
    entry_t *table;
};

clients_t *clients_new (size_t capacity)
{
    clients_t *self = calloc (1, sizeof *self);
    size_t n = 16;
    while (n < 2 * capacity)
        n <<= 1;
    if (self && !(self->table = calloc (n, sizeof *self->table))) {
        free (self);
        return NULL;
    }
    if (self)
        self->mask = n - 1;
    return self;
}

void clients_destroy (clients_t **self_p)
{
    if (self_p && *self_p) {
        free ((*self_p)->table);
        free (*self_p);
        *self_p = NULL;
    }
}

void clients_id (client_id_t *id, const void *key, size_t len)
{
    if (len > CLIENT_KEY_MAX)
        len = CLIENT_KEY_MAX;
    uint64_t h = 1469598103934665603ull;    /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const uint8_t *) key)[i]) * 1099511628211ull;
    id->hash = h;
    id->len = (uint8_t) len;
    memcpy (id->key, key, len);
}

/* The slot holding ID, or the free slot where it would go. */
static size_t s_find (const clients_t *self, const client_id_t *id)
{
    size_t i = (size_t) id->hash & self->mask;
    while (self->table[i].inflight
           && !(self->table[i].id.len == id->len && memcmp (self->table[i].id.key, id->key, id->len) == 0))
        i = (i + 1) & self->mask;
    return i;
}

uint32_t clients_inflight (const clients_t *self, const client_id_t *id)
{
    return self->table[s_find (self, id)].inflight;
}

void clients_add (clients_t *self, const client_id_t *id)
{
    entry_t *e = &self->table[s_find (self, id)];
    if (e->inflight == 0)
        e->id = *id;
    e->inflight++;
}

void clients_release (clients_t *self, const client_id_t *id)
{
    size_t i = s_find (self, id);
    if (self->table[i].inflight == 0 || --self->table[i].inflight > 0)
        return;
    /* Freed: move back any later entry of the same probe run that can now sit earlier (backward
     * shift deletion), so lookups never stop at a hole in the middle of a run. */
    size_t hole = i;
    for (size_t j = (i + 1) & self->mask; self->table[j].inflight; j = (j + 1) & self->mask) {
        size_t home = (size_t) self->table[j].id.hash & self->mask;
        if (((j - home) & self->mask) >= ((j - hole) & self->mask)) {
            self->table[hole] = self->table[j];
            self->table[j].inflight = 0;
            hole = j;
        }
    }
}
