/* LSTM backends ("type": "lstm"): the tables the model loader picks by type. Both implement the
 * whole backend_iface_t contract (backend.h), the streaming entries included:
 *   backend_lstm_cpu_iface   "cpu", kernel "lstm-loop": fp32 on one core (backend_lstm_cpu.c);
 *   backend_lstm_cuda_iface  "cuda", kernel "lstm-persistent": a resident kernel holding the weights
 *                            on chip in cfg->weight_dtype (cuda/backend_lstm_cuda.h; built with nvcc).
 * A stream slot must see stream_advance after each stream_step (the worker's order); a step on a
 * slot whose advance is still owed runs that advance first, on the critical path. */
#ifndef SIGSERVE_BACKEND_LSTM_H
#define SIGSERVE_BACKEND_LSTM_H

#include "backends/backend.h"

extern const backend_iface_t backend_lstm_cpu_iface;

#endif
