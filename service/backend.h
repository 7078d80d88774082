/* The backend interface: an opaque per-model handle behind a table of function pointers
 * (ggml-backend style). The CPU backend is always built and is the numerical reference;
 * the CUDA backend is built when nvcc is found. Optional entries are NULL. */
#ifndef SIGSERVE_BACKEND_H
#define SIGSERVE_BACKEND_H

#include "config.h"
#include "weights.h"
#include "status.h"
#include <stddef.h>
#include <stdint.h>

typedef struct backend_model backend_model_t;   /* each backend defines it */

typedef struct {
    const char *name;   /* "cpu", "cuda" */
    /* Builds one ready-to-serve instance of a model on DEVICE (CUDA; ignored by the CPU): weights
     * in the backend's layout, its own buffers (and stream, graphs) for up to backend_rows (cfg)
     * rows, warmed. NULL with ERR on failure. Nothing is allocated later. Instances are
     * independent: one thread at a time drives each, several instances run at once. */
    backend_model_t *(*load) (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen);
    /* IN: rows x input_size; OUT: rows x output_size; 1 <= rows <= backend_rows (cfg).
     * SIG_OK, or SIG_INTERNAL / SIG_UNAVAILABLE with a message in ERR. */
    sig_status_t (*infer) (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen);
    const char *(*kernel_name) (const backend_model_t *m);
    void (*destroy) (backend_model_t **m_p);
} backend_iface_t;

extern const backend_iface_t backend_cpu_iface;

/* The most rows one infer call takes: a request's max_rows, or a batch of several requests. */
static inline uint32_t backend_rows (const model_config_t *cfg)
{
    return cfg->max_batch_rows > cfg->max_rows ? cfg->max_batch_rows : cfg->max_rows;
}

#endif
