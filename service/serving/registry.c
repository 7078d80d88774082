#include "serving/registry.h"

#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    model_t *model;
    bool owned;
    struct stat weights;            /* the weights file as loaded: a reload compares it */
    const char *loaded;             /* why it was loaded (model_registry_loaded); NULL: taken over */
} entry_t;

struct _model_registry_t {
    size_t count;
    entry_t entries[CONFIG_MAX_MODELS];
    char names[CONFIG_MAX_MODELS * CONFIG_NAME_MAX];
    size_t max_outputs;
};

/* PREVIOUS's entry for CFG when the model can be kept as it is: same configuration, same weights
 * file (device, inode, size and modification time). */
static entry_t *s_unchanged (model_registry_t *previous, const model_config_t *cfg, const struct stat *st)
{
    for (size_t i = 0; previous && i < previous->count; i++) {
        entry_t *e = &previous->entries[i];
        const model_config_t *old = model_config (e->model);
        if (e->owned && strcmp (model_name (e->model), cfg->name) == 0 && memcmp (old, cfg, sizeof *cfg) == 0
            && e->weights.st_dev == st->st_dev && e->weights.st_ino == st->st_ino && e->weights.st_size == st->st_size
            && e->weights.st_mtim.tv_sec == st->st_mtim.tv_sec && e->weights.st_mtim.tv_nsec == st->st_mtim.tv_nsec)
            return e;
    }
    return NULL;
}

/* Why CFG loads anew where PREVIOUS (may be NULL) had no unchanged model for it. */
static const char *s_why_loaded (const model_registry_t *previous, const model_config_t *cfg)
{
    for (size_t i = 0; previous && i < previous->count; i++) {
        const entry_t *e = &previous->entries[i];
        if (strcmp (model_name (e->model), cfg->name) == 0)
            return memcmp (model_config (e->model), cfg, sizeof *cfg) != 0 ? "its configuration changed"
                                                                             : "its weights file changed";
    }
    return "new";
}

model_registry_t *model_registry_load (const config_t *cfg, stats_t *stats, devices_t *devices, model_registry_t *previous,
                                       size_t *reused, char *err, size_t errlen)
{
    model_registry_t *self = calloc (1, sizeof *self);
    model_plan_t *plans = calloc (cfg->model_count ? cfg->model_count : 1, sizeof *plans);
    if (!self || !plans) {
        snprintf (err, errlen, "out of memory");
        free (self);
        free (plans);
        return NULL;
    }
    entry_t *taken[CONFIG_MAX_MODELS] = { NULL };
    size_t kept = 0;
    /* What PREVIOUS serves as it is stays; the rest loads anew. */
    for (size_t i = 0; i < cfg->model_count; i++) {
        entry_t *e = &self->entries[i];
        memset (&e->weights, 0, sizeof e->weights);
        stat (cfg->models[i].weights, &e->weights);     /* a missing file fails the load below, with its name */
        taken[i] = s_unchanged (previous, &cfg->models[i], &e->weights);
        kept += taken[i] != NULL;
        e->loaded = taken[i] ? NULL : s_why_loaded (previous, &cfg->models[i]);
    }
    /* "auto" measured for every new model before any of them loads: a candidate measured next to a
     * kernel another model made resident may wait for it forever (graphs did, on an H100). */
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < cfg->model_count; i++)
        if (!taken[i])
            rc = model_plan (&cfg->models[i], devices, &plans[i], err, errlen);
    /* What the loads below need done before the first of them makes a persistent kernel resident
     * (model_prepare: a kernel specialised for each persistent model's shapes), for every model that
     * loads, as resolved. At a reload PREVIOUS's kernels run: what is new then is prepared only as far
     * as it can be next to them (a module already loaded for the same shapes), and logged. */
    for (size_t i = 0; rc == 0 && i < cfg->model_count; i++)
        if (!taken[i])
            model_prepare (&plans[i]);
    /* The loads: first the models that leave no kernel resident, then those that do (a persistent
     * MLP, a CUDA LSTM), so that nothing else loads next to a resident kernel of this configuration. */
    for (int resident = 0; rc == 0 && resident < 2; resident++)
        for (size_t i = 0; rc == 0 && i < cfg->model_count; i++)
            if (!taken[i] && model_plan_resident (&plans[i]) == (resident == 1)
                && !(self->entries[i].model = model_new_planned (&plans[i], &cfg->server, stats, err, errlen)))
                rc = -1;
    free (plans);
    if (rc != 0) {
        for (size_t i = 0; i < cfg->model_count; i++)    /* nothing taken over is given back: PREVIOUS keeps it */
            if (!taken[i] && self->entries[i].model)
                model_destroy (&self->entries[i].model);
        free (self);
        return NULL;
    }
    for (size_t i = 0; i < cfg->model_count; i++) {
        entry_t *e = &self->entries[i];
        if (taken[i]) {
            e->model = taken[i]->model;
            taken[i]->owned = false;
        }
        e->owned = true;
        size_t outs = (size_t) model_max_rows (e->model) * model_output_size (e->model);
        if (outs > self->max_outputs)
            self->max_outputs = outs;
        size_t len = strlen (self->names);
        snprintf (self->names + len, sizeof self->names - len, "%s%s", i ? ", " : "", model_name (e->model));
    }
    self->count = cfg->model_count;
    if (reused)
        *reused = kept;
    return self;
}

model_registry_t *model_registry_empty (void) { return calloc (1, sizeof (model_registry_t)); }

model_registry_t *model_registry_new (const config_t *cfg, char *err, size_t errlen)
{
    return model_registry_load (cfg, NULL, NULL, NULL, NULL, err, errlen);
}

void model_registry_destroy (model_registry_t **self_p)
{
    if (self_p && *self_p) {
        model_registry_t *self = *self_p;
        for (size_t i = 0; i < self->count; i++)
            if (self->entries[i].owned)
                model_destroy (&self->entries[i].model);
        free (self);
        *self_p = NULL;
    }
}

size_t model_registry_count (const model_registry_t *self) { return self->count; }
model_t *model_registry_at (model_registry_t *self, size_t index) { return index < self->count ? self->entries[index].model : NULL; }
bool model_registry_owns (const model_registry_t *self, size_t index) { return index < self->count && self->entries[index].owned; }
const char *model_registry_names (const model_registry_t *self) { return self->names; }

const char *model_registry_loaded (const model_registry_t *self, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < self->count && used < len; i++)
        if (self->entries[i].loaded)
            used += (size_t) snprintf (out + used, len - used, "%s%s (%s)", used ? ", " : "",
                                       model_name (self->entries[i].model), self->entries[i].loaded);
    return out;
}
size_t model_registry_max_outputs (const model_registry_t *self) { return self->max_outputs; }

model_t *model_registry_find (model_registry_t *self, const char *name)
{
    for (size_t i = 0; i < self->count; i++)
        if (strcmp (model_name (self->entries[i].model), name) == 0)
            return self->entries[i].model;
    return NULL;
}

bool model_registry_ready (const model_registry_t *self)
{
    for (size_t i = 0; i < self->count; i++)
        if (!model_serving (self->entries[i].model))
            return false;
    return self->count > 0;
}
