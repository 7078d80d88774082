/* The set of models a server serves, looked up by name. A reload builds a new set next to the
 * old one, taking over the models whose configuration and weights file did not change; the old
 * set then holds only what the new one did not take, and is destroyed once the front has sent
 * every reply of it. */
#ifndef SIGSERVE_REGISTRY_H
#define SIGSERVE_REGISTRY_H

#include "base/config.h"
#include "serving/model.h"
#include "base/stats.h"
#include <stdbool.h>
#include <stddef.h>

typedef struct _model_registry_t model_registry_t;

/* Loads every model of CFG (weights, backend, instances, warm-up, workers) in this process's threads.
 * NULL with ERR on the first failure. Every "auto" model is measured before any model loads, and
 * the models that keep a kernel resident on a GPU load last (model_plan). */
model_registry_t *model_registry_new (const config_t *cfg, char *err, size_t errlen);
/* The same, where model_new would place each model with DEVICES (serving/devices.h; NULL: none),
 * counted in STATS (may be NULL), taking over from PREVIOUS (may be NULL) every model whose
 * configuration and weights file are unchanged: they move to the new set and PREVIOUS no longer
 * owns them. On failure PREVIOUS is left as it was. *REUSED (may be NULL) counts the models taken
 * over. */
model_registry_t *model_registry_load (const config_t *cfg, stats_t *stats, devices_t *devices, model_registry_t *previous,
                                       size_t *reused, char *err, size_t errlen);
/* A set of no models: what a server serves while its models load. NULL when memory runs out. */
model_registry_t *model_registry_empty (void);
/* Destroys the models it still owns (their workers stop first). */
void model_registry_destroy (model_registry_t **self_p);

size_t model_registry_count (const model_registry_t *self);
model_t *model_registry_at (model_registry_t *self, size_t index);
/* Whether the set owns model INDEX (false once a newer set took it over). */
bool model_registry_owns (const model_registry_t *self, size_t index);
/* NULL when no model has that name. */
model_t *model_registry_find (model_registry_t *self, const char *name);
/* "a, b, c": the served names, for error messages. */
const char *model_registry_names (const model_registry_t *self);
/* The models this set loaded anew, each with why, for the reload's log line: "tick_mlp (its weights file
 * changed), odd (new)" ("its configuration changed" the third reason); "" when it took every one over.
 * Written into OUT (LEN bytes, cut when longer), which it returns. */
const char *model_registry_loaded (const model_registry_t *self, char *out, size_t len);
/* True when every model is loaded, warmed and available. */
bool model_registry_ready (const model_registry_t *self);
/* The largest rows x output size over the models: the reply buffer a server needs. */
size_t model_registry_max_outputs (const model_registry_t *self);

#endif
