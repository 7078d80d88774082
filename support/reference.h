/* Test and tool support (never linked into the server): random weights of any chain shape. The
 * float64 reference they are judged by is the server's own (weights/reference.h). */
#ifndef SIGSERVE_REFERENCE_H
#define SIGSERVE_REFERENCE_H

#include "weights/reference.h"   /* reference_forward: the float64 reference */
#include "weights/weights.h"

/* Random weights (uniform in +-1/sqrt(in), like nn.Linear) for tests and benchmarks.
 * SIZES has LAYER_COUNT + 1 entries. NULL on a zero size or when memory runs out. */
weights_t *weights_random (const uint32_t *sizes, const activation_t *acts, size_t layer_count, uint64_t seed);

#endif
