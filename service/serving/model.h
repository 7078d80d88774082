/* A served model: its weights loaded onto a backend as `instances` independent instances (each
 * its own backend context, CUDA stream, buffers and graphs, on devices[i % n]), each driven by
 * its own worker thread (service/worker.c) pinned to cpus[i % n], plus the pool of jobs the front
 * admits its requests into (service/dispatch.c). "auto" measures the candidate backends on the
 * real weights first (service/autoselect.c). SERVER gives max_message_bytes (a max_rows request
 * must fit it), busy_poll and spin_us. */
#ifndef SIGSERVE_MODEL_H
#define SIGSERVE_MODEL_H

#include "backends/autoselect.h"
#include "backends/backend.h"
#include "base/config.h"
#include "base/stats.h"
#include "base/threads.h"
#include "serving/job.h"
#include <stdbool.h>
#include <stddef.h>

#define MODEL_CANDIDATES_MAX 16

typedef struct _devices_t devices_t;

/* Loads CFG's weights, chooses its backend, loads and warms every instance and starts the
 * workers (idle until requests come), where serving/placement.h puts it: in this process's threads
 * (DEVICES NULL), or with DEVICES (serving/devices.h, the caller's), in the device processes when
 * it may touch a GPU. STATS may be NULL. NULL with ERR naming the model. */
model_t *model_new (const model_config_t *cfg, const server_config_t *server, stats_t *stats, devices_t *devices,
                    char *err, size_t errlen);
/* Whether a request of CFG's max_rows rows of W's inputs fits MAX_MESSAGE_BYTES (else ZeroMQ would drop it
 * unanswered): 0, or -1 with ERR naming max_rows and a fix within the keys' ranges (fewer rows, a larger
 * max_message_bytes, both, or an LSTM's shorter window). model_new checks it. */
int model_check_request_size (const model_config_t *cfg, const weights_t *w, uint32_t max_message_bytes, char *err,
                              size_t errlen);
/* Stops the workers (after the requests they hold are done) and frees everything. */
void model_destroy (model_t **self_p);

/* A model's load resolved ahead (model_plan): what model_new would measure for "auto", done before
 * any model of the configuration loads, so that no candidate is measured next to a persistent kernel
 * another model made resident (graphs there may wait for it forever: measured on an H100). */
typedef struct {
    model_config_t given;               /* as configured */
    model_config_t cfg;                 /* as it loads: "auto"'s backend and kernel chosen */
    bool measured;                      /* "auto": cfg is what the measurement chose */
    size_t candidate_count;
    autoselect_candidate_t candidates[MODEL_CANDIDATES_MAX];   /* what it measured, fastest first */
    devices_t *devices;                 /* as model_plan was given them: where it loads follows */
} model_plan_t;

/* Resolves CFG into PLAN: "auto" measured where model_new would measure it (this process, or the
 * first instance's device process of DEVICES), nothing kept loaded; any other backend as configured.
 * 0, or -1 with ERR naming the model. */
int model_plan (const model_config_t *cfg, devices_t *devices, model_plan_t *plan, char *err, size_t errlen);
/* Whether loading PLAN leaves a kernel resident on its GPU (a persistent MLP, a CUDA LSTM): such
 * models load after the others. */
bool model_plan_resident (const model_plan_t *plan);
/* model_new for PLAN: loads plan->cfg, and reports plan->given as configured and the measurement as
 * what chose its backend. */
model_t *model_new_planned (const model_plan_t *plan, const server_config_t *server, stats_t *stats, char *err,
                            size_t errlen);
/* Does ahead, on every device PLAN's instances will use, what its backend needs done before any
 * persistent kernel is resident there (backend.h's prepare: a specialised kernel's module), in this
 * process or in the device processes (started if need be), as model_new_planned will load it. Called
 * for every model of a configuration before any of them loads. Never fails: what could not be done
 * is logged and the load goes on without it. */
void model_prepare (const model_plan_t *plan);

const char *model_name (const model_t *m);
const char *model_version (const model_t *m);
const char *model_backend_name (const model_t *m);
const char *model_kernel_name (const model_t *m);
uint32_t model_input_size (const model_t *m);
uint32_t model_output_size (const model_t *m);
uint32_t model_max_rows (const model_t *m);
model_type_t model_type (const model_t *m);
/* A recurrent type's time steps of a window and features of one step (0 for an mlp). */
uint32_t model_window (const model_t *m);
uint32_t model_step_size (const model_t *m);
/* Whether M keeps streams (requests with a stream_id): decided once at its load, from its type and
 * its backend. */
bool model_keeps_streams (const model_t *m);
uint32_t model_instance_count (const model_t *m);
/* Requests that may wait for a worker: as configured, or derived at load from max_queue_us. */
uint32_t model_queue_depth (const model_t *m);
/* The configuration as given (before "auto" resolved the backend). */
const model_config_t *model_config (const model_t *m);
/* True while at least one instance can run. */
bool model_available (const model_t *m);
/* True while it can take a request: an instance of its own, or its CPU fallback, can run it. */
bool model_serving (const model_t *m);
/* Whether M has a CPU fallback ("fallback": serving/fallback.c); then its INSTANCES, the requests it
 * computed (SERVED) and whether it serves now (ACTIVE: none of M's own instances is available). */
bool model_fallback (const model_t *m, uint32_t *instances, uint64_t *served, bool *active);
int model_stats_slot (const model_t *m);

/* One instance as model_describe sees it. */
typedef struct {
    uint32_t index;
    int device;                     /* CUDA device; -1 on the CPU */
    bool available;
    char state[128];                /* "serving", or why not */
    uint64_t requests;              /* requests it computed */
    uint64_t warm_runs;             /* keep_warm_us: runs on the last input while idle */
    uint32_t green_sms;             /* the SMs of its kernel's green context (green_context); 0: none */
} model_instance_info_t;

/* What a model is and how it is doing, in plain C: the wire (codec.c) and /models (http.c) each
 * render it. Strings and candidates are borrowed from the model (valid while it lives); the rest is
 * a copy, so threads describing the same model at once share nothing they write. */
typedef struct {
    const char *name, *version, *type, *backend, *kernel;
    const char *isa;                /* the CPU instruction path ("avx512"; backend.h), "" where none */
    const char *split;              /* "split": what the load decided, with its numbers; "" where not asked */
    const char *weight_dtype;       /* how the weights are held: "f32", "f16", "bf16", "int8" */
    const char *selected_by;        /* "config" or "measurement" */
    uint32_t input_size, output_size, max_rows, max_batch_rows, queue_depth, instances;
    uint32_t window, step_size;     /* recurrent (lstm, gru); 0 for an mlp */
    uint32_t max_queue_us;
    uint64_t launch_ns, row_ns;     /* a launch of r rows, as timed at load: launch_ns + r x row_ns */
    bool available;
    uint32_t fallback_instances;    /* its CPU fallback's instances; 0: none */
    bool fallback_active;           /* serving on it now */
    size_t candidate_count;         /* what "auto" measured, fastest first */
    const autoselect_candidate_t *candidates;
    model_instance_info_t instance[CONFIG_MAX_INSTANCES];
} model_info_t;

void model_describe (model_t *m, model_info_t *info);
/* Whether M keeps its streams' history (a type with streams in device processes: stream_history.h);
 * then, over its instances, the streams rebuilt after a loss and those evicted while active. */
bool model_stream_history (const model_t *m, uint64_t *rebuilds, uint64_t *evictions);
/* Instance I's state: available, "serving" or why not, requests computed, CUDA device (-1: CPU). The
 * state text is written once, before available drops, and read only after: never while written. */
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
