/* Zeroed float arrays aligned to a cache line (64 bytes, so vector loads of any width stay aligned
 * and no two arrays share a line), the size rounded up to whole lines. Free with free (). NULL when
 * memory runs out. Allocation at load only: never on a request's path. */
#ifndef SIGSERVE_FLOATS_H
#define SIGSERVE_FLOATS_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define FLOATS_MAP_HEAD 64     /* the mapping's size, before the floats (keeps them 64-byte aligned) */

static inline float *floats_zeroed (size_t n)
{
    size_t bytes = ((n ? n : 1) * sizeof (float) + 63) & ~(size_t) 63;
    float *p = aligned_alloc (64, bytes);
    if (p)
        memset (p, 0, bytes);
    return p;
}

/* N zeroed floats (64-byte aligned) that become resident only as they are first written: a model
 * reserves request buffers for everything its admission can hold and keeps in memory what it uses
 * (its free buffers are reused last-in first-out, so a steady load touches a few). Freed with
 * floats_unmap. */
static inline float *floats_mapped (size_t n)
{
    const size_t bytes = FLOATS_MAP_HEAD + (n ? n : 1) * sizeof (float);
    char *base = mmap (NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    memcpy (base, &bytes, sizeof bytes);
    return (float *) (base + FLOATS_MAP_HEAD);
}

static inline void floats_unmap (float *p)
{
    if (!p)
        return;
    char *base = (char *) p - FLOATS_MAP_HEAD;
    size_t bytes;
    memcpy (&bytes, base, sizeof bytes);
    munmap (base, bytes);
}

#endif
