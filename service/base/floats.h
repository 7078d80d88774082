/* Zeroed float arrays aligned to a cache line (64 bytes, so vector loads of any width stay aligned
 * and no two arrays share a line), the size rounded up to whole lines. Free with free (). NULL when
 * memory runs out. Allocation at load only: never on a request's path. */
#ifndef SIGSERVE_FLOATS_H
#define SIGSERVE_FLOATS_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static inline float *floats_zeroed (size_t n)
{
    size_t bytes = ((n ? n : 1) * sizeof (float) + 63) & ~(size_t) 63;
    float *p = aligned_alloc (64, bytes);
    if (p)
        memset (p, 0, bytes);
    return p;
}

#endif
