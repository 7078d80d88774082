#include "rng.h"

#include <math.h>

uint64_t rng_next (uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float rng_uniform (uint64_t *state, float lo, float hi)
{
    double u = (double) (rng_next (state) >> 11) * 0x1p-53;    /* [0, 1) */
    float r = (float) (lo + ((double) hi - lo) * u);
    /* rounding to float can land on HI itself; keep the interval half-open */
    return r < hi || !(hi > lo) ? r : nextafterf (hi, lo);
}

double rng_unit_open (uint64_t *state)
{
    return ((double) (rng_next (state) >> 11) + 1.0) * 0x1p-53;
}
