/* GRU backends ("type": "gru"): the CPU column of its row in the model types table
 * (backends/backends.c); its CUDA column is the GPU library's (backends/cuda/gpu.c). Both implement
 * the whole backend_iface_t contract, the streaming entries included:
 *   backend_gru_cpu_iface   "cpu", kernel "gru-loop": fp32 on one core (backend_gru_cpu.c);
 *   backend_gru_cuda_iface  "cuda", kernel "gru-seq" or "gru-step" (+graph): small kernels a request,
 *                           replayed as CUDA graphs (cuda/backend_gru_cuda.h; built with nvcc).
 * A stream slot must see stream_advance after each stream_step (the worker's order); a step on a
 * slot whose advance is still owed runs that advance first, on the critical path. */
#ifndef SIGSERVE_BACKEND_GRU_H
#define SIGSERVE_BACKEND_GRU_H

#include "backends/backend.h"

extern const backend_iface_t backend_gru_cpu_iface;

#endif
