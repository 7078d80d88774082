/* Test and tool support (never linked into the server): random weights of any chain shape and the
 * float64 reference forward pass every backend is compared against. */
#ifndef SIGSERVE_REFERENCE_H
#define SIGSERVE_REFERENCE_H

#include "weights/weights.h"

/* Random weights (uniform in +-1/sqrt(in), like nn.Linear) for tests and benchmarks.
 * SIZES has LAYER_COUNT + 1 entries. NULL on a zero size or when memory runs out. */
weights_t *weights_random (const uint32_t *sizes, const activation_t *acts, size_t layer_count, uint64_t seed);

/* The float64 reference: IN holds rows x input_size values, OUT gets rows x output_size values,
 * both row-major. 0 on success, -1 when its scratch rows cannot be allocated. */
int reference_forward (const weights_t *w, const float *in, uint32_t rows, double *out);

#endif
