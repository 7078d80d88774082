/* The CUDA LSTM backend's insides, shared by its two files: backend_lstm_cuda.c (the request path and
 * the tests' hooks) and backend_lstm_cuda_load.c (load, warm-up, park, destroy, and the backend's
 * table). Not for anyone else: backend_lstm_cuda.h is the interface. */
#ifndef SIGSERVE_BACKEND_LSTM_CUDA_IMPL_H
#define SIGSERVE_BACKEND_LSTM_CUDA_IMPL_H

#include "backends/cuda/backend_lstm_cuda.h"
#include "backends/cuda/persistent.h"
#include "sig_lstm.h"
#include "sig_spec.h"

#include <stdbool.h>
#include <stdint.h>

#define SENTINEL SIG_PERSISTENT_SENTINEL

typedef struct {
    uint32_t pos;               /* ring position of the slot's next step */
    bool valid;                 /* reset at least once */
    bool owed;                  /* a step ran and its advance was not posted yet */
    bool stepped;               /* apart: step_n is its last step */
    uint32_t ver;               /* apart: versions of its state posted (kept across a reset) */
    uint64_t step_n;
} slot_t;

typedef struct {                /* one resident launch's command ring */
    persistent_t *host;
    uint64_t posted;            /* commands posted: command n in entry n % RING, sequence n + 1 */
    uint64_t completed;         /* commands known complete (they complete in order) */
} ring_t;

struct backend_model {
    persistent_t host;          /* name, device, wait, watchdog, the kernel's stream, the mailbox, state */
    persistent_t adv;           /* apart: the advancer's */
    uint32_t in, out, W, max_rows, slot_count;
    sig_lstm_plan_t plan;
    sig_lstm_layout_t lay;
    void *d_image, *d_state, *d_xchg;
    const sig_spec_module_t *spec;   /* the kernel specialised for the plan (the kernel cache's), else NULL:
                                      * the generic kernel (sig_lstm.h SIG_LSTM_SYNC_GENERIC) */
    ring_t serve, advr;         /* the serving kernel's ring; apart, the advancer's */
    slot_t *slots;
    bool parked;                /* its kernel(s) stopped after the load, everything else kept (a warm spare's) */
};

/* The request path (backend_lstm_cuda.c), as the backend's table names it. */
sig_status_t lstm_cuda_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen);
void lstm_cuda_reset (backend_model_t *m, uint32_t slot);
void lstm_cuda_advance (backend_model_t *m, uint32_t slot);
sig_status_t lstm_cuda_step (backend_model_t *m, uint32_t slot, const float *x, float *out, char *err, size_t errlen);
const char *lstm_cuda_kernel_name (const backend_model_t *m);

#endif
