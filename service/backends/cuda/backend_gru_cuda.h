/* The CUDA GRU backend (backend_gru_cuda_iface, "cuda" in the GRU's row of the model types table:
 * backends/cuda/gpu.c's by_type): whole windows and streams, as the CPU GRU backend serves them
 * (backend_gru.h), on small kernels launched per request (kernels/sig_gru.h, and kernel `warp` for
 * the input projections and the head), one CUDA graph per request shape replayed on the instance's
 * own stream, pinned host buffers in and out; nothing resident between requests. Weights f32.
 *
 * A layer's recurrence runs one of two ways, chosen at load from its width (gru_cuda_mode):
 *   "gru-seq": one block a row runs every step of a window, h in shared memory (narrow layers);
 *   "gru-step": the units spread over blocks, one launch a step (wide layers: W_hh would not stay
 *   in one SM's cache).
 * Streams keep, per slot, the ring of its last W raw steps and the state (each layer's h) after the
 * W - 1 steps before the next; a step is one cell launch a layer and the head; an advance gathers
 * the ring's W - 1 steps and reruns them from a zero state, posted after the reply and not waited
 * for. Nothing is allocated or captured after the load. Built only with nvcc. */
#ifndef SIGSERVE_BACKEND_GRU_CUDA_H
#define SIGSERVE_BACKEND_GRU_CUDA_H

#include "backends/backend_gru.h"

#include <stdbool.h>

extern const backend_iface_t backend_gru_cuda_iface;

/* Below: for tests. How the recurrence runs. */
typedef enum { GRU_CUDA_PLAN = 0, GRU_CUDA_SEQ, GRU_CUDA_STEP } gru_cuda_mode_t;
/* Every later load uses MODE (GRU_CUDA_PLAN: the load's own choice by width). */
void gru_cuda_force_mode (gru_cuda_mode_t mode);
/* The mode M runs (GRU_CUDA_SEQ or GRU_CUDA_STEP). */
gru_cuda_mode_t gru_cuda_mode (const backend_model_t *m);
/* The widest layer the load's own choice runs as GRU_CUDA_SEQ. */
#define GRU_CUDA_SEQ_MAX_HIDDEN 104

#endif
