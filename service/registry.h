/* The models a server serves: each loaded from its config on its backend, looked up by name. */
#ifndef SIGSERVE_REGISTRY_H
#define SIGSERVE_REGISTRY_H

#include "backend.h"
#include "config.h"
#include <stdbool.h>
#include <stddef.h>

typedef struct _model_t model_t;
typedef struct _model_registry_t model_registry_t;

/* Loads every model of CFG (weights, backend, warm-up). NULL with ERR on the first failure. */
model_registry_t *model_registry_new (const config_t *cfg, char *err, size_t errlen);
void model_registry_destroy (model_registry_t **self_p);

size_t model_registry_count (const model_registry_t *self);
model_t *model_registry_at (model_registry_t *self, size_t index);
/* NULL when no model has that name. */
model_t *model_registry_find (model_registry_t *self, const char *name);
/* "a, b, c": the served names, for error messages. */
const char *model_registry_names (const model_registry_t *self);
/* True when every model is loaded, warmed and available. */
bool model_registry_ready (const model_registry_t *self);
/* The largest rows x output size over the models: the reply buffer a server needs. */
size_t model_registry_max_outputs (const model_registry_t *self);

const char *model_name (const model_t *m);
const char *model_version (const model_t *m);
const char *model_backend_name (const model_t *m);
const char *model_kernel_name (const model_t *m);
uint32_t model_input_size (const model_t *m);
uint32_t model_output_size (const model_t *m);
uint32_t model_max_rows (const model_t *m);
bool model_available (const model_t *m);
/* The backend's own handle (tests and benchmarks drive it directly). */
backend_model_t *model_backend_handle (model_t *m);
/* Runs the backend. A SIG_UNAVAILABLE from it marks the model unavailable for good. */
sig_status_t model_infer (model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen);

/* The backend CFG's "backend" resolves to on this machine; NULL with ERR when none can serve it. */
const backend_iface_t *backend_resolve (const model_config_t *cfg, char *err, size_t errlen);

#endif
