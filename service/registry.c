#include "registry.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _model_t {
    char name[CONFIG_NAME_MAX];
    char version[CONFIG_NAME_MAX];
    const backend_iface_t *iface;   /* the backend it runs on */
    backend_model_t *impl;          /* that backend's handle */
    uint32_t input_size, output_size, max_rows;
    bool available;                 /* false once the backend reported it cannot run */
};

struct _model_registry_t {
    size_t count;
    model_t *models;
    char names[CONFIG_MAX_MODELS * CONFIG_NAME_MAX];
    size_t max_outputs;
};

#ifdef SIGSERVE_HAVE_CUDA
#include "backend_cuda.h"
#endif

const backend_iface_t *backend_resolve (const model_config_t *cfg, char *err, size_t errlen)
{
    if (cfg->backend == BACKEND_CPU)
        return &backend_cpu_iface;
#ifdef SIGSERVE_HAVE_CUDA
    int count = 0;
    char why[256] = "";
    if (cuda_device_count (&count, why, sizeof why) == 0 && cfg->device < count)
        return &backend_cuda_iface;
    if (count > 0)
        snprintf (why, sizeof why, "device %d does not exist (this machine has %d)", cfg->device, count);
#else
    const char *why = "this build of sigserve has no CUDA backend (nvcc was not found when it was built)";
#endif
    if (cfg->backend == BACKEND_AUTO) {
        log_info ("model %s: backend auto: no CUDA device to use (%s); running on the CPU", cfg->name, why);
        return &backend_cpu_iface;
    }
    sig_set_error (err, errlen, "model \"%s\": backend \"cuda\": %s; use \"cpu\" or \"auto\"", cfg->name, why);
    return NULL;
}

/* Bytes a packed InferRequest adds to its features: request id, model name, rows, deadline, tags. */
#define REQUEST_FRAMING 128

static int s_model_load (model_t *m, const model_config_t *cfg, uint32_t max_message_bytes, char *err,
                         size_t errlen)
{
    snprintf (m->name, sizeof m->name, "%s", cfg->name);
    snprintf (m->version, sizeof m->version, "%s", cfg->version);
    m->iface = backend_resolve (cfg, err, errlen);
    if (!m->iface)
        return -1;
    weights_t *w = weights_load (cfg, err, errlen);
    if (!w)
        return -1;
    /* A request of max_rows rows that ZeroMQ would drop for its size could never be answered. */
    uint64_t need = (uint64_t) cfg->max_rows * w->input_size * 4 + REQUEST_FRAMING;
    if (need > max_message_bytes) {
        uint64_t fit = (max_message_bytes - REQUEST_FRAMING) / (4ull * w->input_size);
        snprintf (err, errlen, "model \"%s\": max_rows: a request of %u rows x %u features takes up to %llu "
                  "bytes, over server.max_message_bytes (%u); lower max_rows to %llu or raise max_message_bytes",
                  cfg->name, cfg->max_rows, w->input_size, (unsigned long long) need, max_message_bytes,
                  (unsigned long long) fit);
        weights_destroy (&w);
        return -1;
    }
    m->input_size = w->input_size;
    m->output_size = w->output_size;
    m->max_rows = cfg->max_rows;
    m->impl = m->iface->load (w, cfg, cfg->device, err, errlen);
    weights_destroy (&w);
    if (!m->impl)
        return -1;
    m->available = true;
    log_info ("model %s version %s: %u -> %u, %zu layers, backend %s, kernel %s, max_rows %u",
              m->name, m->version, m->input_size, m->output_size, cfg->layer_count, m->iface->name,
              m->iface->kernel_name (m->impl), m->max_rows);
    return 0;
}

model_registry_t *model_registry_new (const config_t *cfg, char *err, size_t errlen)
{
    model_registry_t *self = calloc (1, sizeof *self);
    if (!self || !(self->models = calloc (cfg->model_count ? cfg->model_count : 1, sizeof (model_t)))) {
        snprintf (err, errlen, "out of memory");
        free (self);
        return NULL;
    }
    for (size_t i = 0; i < cfg->model_count; i++) {
        if (s_model_load (&self->models[i], &cfg->models[i], cfg->server.max_message_bytes, err, errlen) != 0) {
            self->count = i + 1;
            model_registry_destroy (&self);
            return NULL;
        }
        self->count = i + 1;
        model_t *m = &self->models[i];
        size_t outs = (size_t) m->max_rows * m->output_size;
        if (outs > self->max_outputs)
            self->max_outputs = outs;
        size_t len = strlen (self->names);
        snprintf (self->names + len, sizeof self->names - len, "%s%s", i ? ", " : "", m->name);
    }
    return self;
}

void model_registry_destroy (model_registry_t **self_p)
{
    if (self_p && *self_p) {
        model_registry_t *self = *self_p;
        for (size_t i = 0; i < self->count; i++)
            if (self->models[i].iface && self->models[i].impl)
                self->models[i].iface->destroy (&self->models[i].impl);
        free (self->models);
        free (self);
        *self_p = NULL;
    }
}

size_t model_registry_count (const model_registry_t *self) { return self->count; }
model_t *model_registry_at (model_registry_t *self, size_t index) { return index < self->count ? &self->models[index] : NULL; }
const char *model_registry_names (const model_registry_t *self) { return self->names; }
size_t model_registry_max_outputs (const model_registry_t *self) { return self->max_outputs; }

model_t *model_registry_find (model_registry_t *self, const char *name)
{
    for (size_t i = 0; i < self->count; i++)
        if (strcmp (self->models[i].name, name) == 0)
            return &self->models[i];
    return NULL;
}

bool model_registry_ready (const model_registry_t *self)
{
    for (size_t i = 0; i < self->count; i++)
        if (!self->models[i].available)
            return false;
    return self->count > 0;
}

const char *model_name (const model_t *m) { return m->name; }
const char *model_version (const model_t *m) { return m->version; }
const char *model_backend_name (const model_t *m) { return m->iface->name; }
const char *model_kernel_name (const model_t *m) { return m->iface->kernel_name (m->impl); }
uint32_t model_input_size (const model_t *m) { return m->input_size; }
uint32_t model_output_size (const model_t *m) { return m->output_size; }
uint32_t model_max_rows (const model_t *m) { return m->max_rows; }
bool model_available (const model_t *m) { return m->available; }
backend_model_t *model_backend_handle (model_t *m) { return m->impl; }

sig_status_t model_infer (model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    if (!m->available) {
        snprintf (err, errlen, "model \"%s\" is unavailable on backend %s", m->name, m->iface->name);
        return SIG_UNAVAILABLE;
    }
    sig_status_t st = m->iface->infer (m->impl, in, rows, out, err, errlen);
    if (st == SIG_UNAVAILABLE) {
        m->available = false;
        log_error ("model %s marked unavailable: %s", m->name, err);
    }
    return st;
}
