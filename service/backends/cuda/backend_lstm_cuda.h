/* The CUDA LSTM backend (backend_lstm_cuda_iface, backend_lstm.h): one resident kernel per model
 * instance (kernels/lstm_persistent.cu) holding the weights on chip in cfg->weight_dtype, serving
 * stream steps, advances, resets and full windows through a ring in mapped pinned memory; a host
 * watchdog (cfg->watchdog_ms) turns a kernel that stops answering into SIG_UNAVAILABLE. Compute
 * capability 9.0 only. Built only with nvcc.
 *
 * The process must run with CUDA_MODULE_LOADING=EAGER (set before CUDA starts): with lazy loading
 * the first launch of any kernel next to a resident one waits forever (docs/persistent-notes.md).
 * Nothing here synchronises the device (the persistent host layer and the device level see to it:
 * persistent.h, device.h). */
#ifndef SIGSERVE_BACKEND_LSTM_CUDA_H
#define SIGSERVE_BACKEND_LSTM_CUDA_H

#include "backends/backend_lstm.h"

#include "sig_lstm.h"

#include <stdbool.h>

extern const backend_iface_t backend_lstm_cuda_iface;

/* Below: for tests and benchmarks. */
/* The knobs of every later load (NULL: the plan's own choice). */
void lstm_cuda_tuning (const sig_lstm_tuning_t *tuning);
/* What the load planned (mode, blocks, placement, shared memory). */
const sig_lstm_plan_t *lstm_cuda_plan (const backend_model_t *m);
/* Waits until every command posted so far is complete (the advances too). SIG_OK, or
 * SIG_UNAVAILABLE with ERR. */
sig_status_t lstm_cuda_sync (backend_model_t *m, char *err, size_t errlen);
/* The protocol's floor on the same ring: a command with step_size features whose answer (one
 * float: feature 0) is written back by the polling block without any compute. */
sig_status_t lstm_cuda_ping (backend_model_t *m, const float *x, float *out, char *err, size_t errlen);
/* Test only: the kernel stops taking commands (it still honours stop), so the watchdog fires. */
int lstm_cuda_stall (backend_model_t *m);
bool lstm_cuda_lost (const backend_model_t *m);
/* Whether the advances run apart, in a second resident launch (plan 4: sig_lstm.h). */
bool lstm_cuda_apart (const backend_model_t *m);
/* Test only, apart: ON, the advancer takes no further command (SIG_LSTM_OP_HOLD) until called with
 * ON false (which only lowers the hold word: safe while another thread waits in a step). 0, or a
 * CUDA error (cudaErrorNotSupported: not apart). */
int lstm_cuda_hold (backend_model_t *m, bool on);
/* Test only: the advancer's commands posted and not yet done (0 when not apart). */
uint32_t lstm_cuda_advances_pending (const backend_model_t *m);
/* Test only: the commands posted to the serving kernel so far (safe from another thread than the
 * one posting: a test waits on it instead of sleeping). */
uint64_t lstm_cuda_commands_posted (const backend_model_t *m);

#endif
