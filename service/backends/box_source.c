/* The mailboxes' source and its registered pool (box_source.h). */
#include "backends/box_source.h"

#include <pthread.h>
#include <stdint.h>

#define PAGE 4096u

typedef struct {
    uint8_t *base;
    size_t bytes, used;
} chunk_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static void *(*s_alloc) (void *arg, size_t bytes);
static void *s_arg;
static chunk_t s_chunks[BOX_SOURCE_CHUNKS];
static size_t s_chunk_count;

void box_source_set (void *(*alloc) (void *arg, size_t bytes), void *arg)
{
    pthread_mutex_lock (&s_lock);
    s_alloc = alloc;
    s_arg = arg;
    s_chunk_count = 0;
    pthread_mutex_unlock (&s_lock);
}

bool box_source_active (void)
{
    pthread_mutex_lock (&s_lock);
    const bool on = s_alloc != NULL;
    pthread_mutex_unlock (&s_lock);
    return on;
}

static size_t s_pages (size_t bytes) { return (bytes + PAGE - 1) / PAGE * PAGE; }

void *box_source_take (size_t bytes, int (*reg) (void *arg, void *p, size_t bytes), void *arg, size_t *got)
{
    const size_t pages = s_pages (bytes);
    void *p = NULL;
    pthread_mutex_lock (&s_lock);
    for (size_t i = 0; s_alloc && bytes && i < s_chunk_count && !p; i++)
        if (s_chunks[i].bytes - s_chunks[i].used >= pages) {
            p = s_chunks[i].base + s_chunks[i].used;
            s_chunks[i].used += pages;
        }
    if (!p && s_alloc && bytes && s_chunk_count < BOX_SOURCE_CHUNKS) {
        const size_t size = pages > BOX_SOURCE_CHUNK ? pages : BOX_SOURCE_CHUNK;
        uint8_t *c = s_alloc (s_arg, size);
        if (c && reg (arg, c, size) == 0) {
            s_chunks[s_chunk_count++] = (chunk_t) { c, size, pages };
            p = c;
        }
        /* a chunk that could not be registered stays the source's: the arena is this process's alone */
    }
    pthread_mutex_unlock (&s_lock);
    if (p && got)
        *got = pages;
    return p;
}
