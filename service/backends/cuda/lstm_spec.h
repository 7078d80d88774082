/* The CUDA LSTM backend's kernel specialised for a model's plan at load (kernels/lstm_persistent_spec.cu:
 * NVRTC; docs/lstm-notes.md). Private to backend_lstm_cuda.c. */
#ifndef SIGSERVE_LSTM_SPEC_H
#define SIGSERVE_LSTM_SPEC_H

#include "base/config.h"
#include "sig_lstm.h"
#include "sig_spec.h"
#include "weights/lstm.h"
#include "weights/weights.h"

#include <stddef.h>

/* LW's net for the planner (its weights borrowed from LW). */
void lstm_cuda_net (const lstm_weights_t *lw, sig_lstm_net_t *net);

/* The kernel specialised for IMAGE's header (host memory, as sig_lstm_pack wrote it with PLAN) on
 * DEVICE: from the kernel cache (server.kernel_cache_dir), compiled with NVRTC and loaded there when
 * new, which can happen only while no persistent kernel is resident on DEVICE. Borrowed (kept loaded
 * until the process ends); NULL with WHY. */
const sig_spec_module_t *lstm_cuda_specialise (const model_config_t *cfg, int device, const void *image,
                                               const sig_lstm_plan_t *plan, char *why, size_t whylen);

/* backend.h prepare for an LSTM planned with TUNING: the module a later load of (W, CFG) on DEVICE
 * will use, compiled and loaded now (the same net, plan and image header as the load's, so the load
 * finds it loaded, also next to a resident kernel). 1 done, 0 nothing to do (W NULL: whether there
 * would be), -1 with WHY. */
int lstm_cuda_prepare (const weights_t *w, const model_config_t *cfg, int device, const sig_lstm_tuning_t *tuning,
                       char *why, size_t whylen);

#endif
