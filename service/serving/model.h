/* A served model: its weights loaded onto a backend as `instances` independent instances (each
 * its own backend context, CUDA stream, buffers and graphs, on devices[i % n]), each driven by
 * its own worker thread (service/worker.c) pinned to cpus[i % n], plus the pool of jobs the front
 * admits its requests into (service/dispatch.c). "auto" measures the candidate backends on the
 * real weights first (service/autoselect.c). SERVER gives max_message_bytes (a max_rows request
 * must fit it), busy_poll and spin_us. */
#ifndef SIGSERVE_MODEL_H
#define SIGSERVE_MODEL_H

#include "backends/backend.h"
#include "base/config.h"
#include "serving/job.h"
#include "signal.pb-c.h"
#include "base/stats.h"
#include "base/threads.h"
#include <stdbool.h>
#include <stddef.h>

/* Loads CFG's weights, chooses its backend, loads and warms every instance and starts the
 * workers (idle until requests come). STATS may be NULL. NULL with ERR naming the model. */
model_t *model_new (const model_config_t *cfg, const server_config_t *server, stats_t *stats, char *err,
                    size_t errlen);
/* Stops the workers (after the requests they hold are done) and frees everything. */
void model_destroy (model_t **self_p);

const char *model_name (const model_t *m);
const char *model_version (const model_t *m);
const char *model_backend_name (const model_t *m);
const char *model_kernel_name (const model_t *m);
uint32_t model_input_size (const model_t *m);
uint32_t model_output_size (const model_t *m);
uint32_t model_max_rows (const model_t *m);
model_type_t model_type (const model_t *m);
/* LSTM: time steps of a window and features of one step (0 for an mlp). */
uint32_t model_window (const model_t *m);
uint32_t model_step_size (const model_t *m);
uint32_t model_instance_count (const model_t *m);
/* The configuration as given (before "auto" resolved the backend). */
const model_config_t *model_config (const model_t *m);
/* True while at least one instance can run. */
bool model_available (const model_t *m);
int model_stats_slot (const model_t *m);

/* Fills INFO: strings and candidates borrowed from the model (valid while it lives), the
 * instances' states written into the caller's INSTANCES / INSTANCE_PTRS (CONFIG_MAX_INSTANCES
 * each), so threads describing the same model at once do not share anything they write. */
void model_describe (model_t *m, Sigserve__V1__ModelInfo *info, Sigserve__V1__InstanceInfo *instances,
                     Sigserve__V1__InstanceInfo **instance_ptrs);
/* Instance I's state: available, "serving" or why not, requests computed, CUDA device (-1: CPU). */
bool model_instance_available (const model_t *m, uint32_t i);
const char *model_instance_state (const model_t *m, uint32_t i);
uint64_t model_instance_requests (const model_t *m, uint32_t i);
int model_instance_device (const model_t *m, uint32_t i);

/* Direct use of instance 0 from the calling thread, bypassing the workers (tests and benchmarks;
 * never while requests are being served). A SIG_UNAVAILABLE marks that instance unavailable. */
backend_model_t *model_backend_handle (model_t *m);
sig_status_t model_infer (model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen);
/* The same on instance I. */
backend_model_t *model_instance_handle (model_t *m, uint32_t i);
sig_status_t model_infer_instance (model_t *m, uint32_t i, const float *in, uint32_t rows, float *out, char *err,
                                   size_t errlen);

#endif
