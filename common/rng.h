/* Deterministic random numbers for weights, tests, benchmarks and load generation (splitmix64:
 * one 64-bit state, any seed is good, the same sequence on every machine). */
#ifndef SIGSERVE_RNG_H
#define SIGSERVE_RNG_H

#include <stdint.h>

/* The next 64 random bits; advances *STATE. */
uint64_t rng_next (uint64_t *state);
/* Uniform in [LO, HI) (LO itself when HI <= LO). */
float rng_uniform (uint64_t *state, float lo, float hi);
/* Uniform in (0, 1]: never 0, so -log() of it (exponential gaps) stays finite. */
double rng_unit_open (uint64_t *state);

#endif
