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
    /* Builds a ready-to-serve model: weights in the backend's layout, buffers for up to
     * cfg->max_rows rows, warmed. NULL with ERR on failure. Nothing is allocated later. */
    backend_model_t *(*load) (const weights_t *w, const model_config_t *cfg, char *err, size_t errlen);
    /* IN: rows x input_size; OUT: rows x output_size; 1 <= rows <= max_rows.
     * SIG_OK, or SIG_INTERNAL / SIG_UNAVAILABLE with a message in ERR. */
    sig_status_t (*infer) (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen);
    const char *(*kernel_name) (const backend_model_t *m);
    void (*destroy) (backend_model_t **m_p);
} backend_iface_t;

extern const backend_iface_t backend_cpu_iface;

#endif
