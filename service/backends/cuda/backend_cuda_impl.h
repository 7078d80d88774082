/* The insides of the CUDA backend, shared by backend_cuda.c (helpers, deferred releases, graphs,
 * the piecewise interface, infer, destroy, load) and backend_cuda_persistent.c (kernel
 * "persistent" and the ping-pong floor). Private to backend_cuda*.c: nothing else includes this. */
#ifndef SIGSERVE_BACKEND_CUDA_IMPL_H
#define SIGSERVE_BACKEND_CUDA_IMPL_H

#include "backends/cuda/backend_cuda.h"
#include "kernels.h"

#include <cublas_v2.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint32_t in, out, out_pad;  /* out_pad: mbyv's M padded to 32; out otherwise */
    activation_t activation;
    float *w;                   /* device, in the kernel's layout */
    float *b;                   /* device */
} cuda_layer_t;

struct backend_model {
    char name[CONFIG_NAME_MAX];
    int device;
    cuda_kernel_t kernel;
    bool graph;                 /* the request path replays graphs (else direct launches) */
    bool zero_copy;             /* d_in/d_out are the device addresses of mapped h_in/h_out */
    cuda_wait_t wait;
    uint32_t max_rows, input_size, output_size, widest;
    size_t layer_count;
    cuda_layer_t *layers;
    cudaStream_t stream;        /* non-blocking: never synchronises with the legacy stream */
    cudaEvent_t done;           /* recorded after each run; what the host waits on */
    float *h_in, *h_out;        /* pinned, max_rows rows */
    float *d_in, *d_out;        /* device, max_rows rows (zero_copy: h_in and h_out, mapped) */
    float *d_act[2];            /* device ping-pong activations, max_rows x widest each, one block:
                                   the fused kernel takes the pair as its 2 x rows x widest scratch */
    sig_fused_net_t *d_net;     /* fused: the network description, in device memory */
    cublasHandle_t cublas;      /* cublas: handle bound to the stream, with its own workspace */
    void *cublas_workspace;
    cudaGraphExec_t *e2e;       /* [rows]: H2D, layers, D2H with the pinned buffers */
    cudaGraphExec_t *kernels;   /* [rows]: the layers only (benchmarks) */
    bool lost;                  /* the context is unusable: every infer answers UNAVAILABLE */
    /* kernel "persistent" (and the ping-pong floor) */
    bool persistent;
    bool pingpong;              /* the floor kernel, not the MLP (sigbench) */
    bool resident;              /* launched and not yet seen to exit: counts in s_resident (backend_cuda.c) */
    bool hung;                  /* the watchdog fired */
    uint8_t *box;               /* the mailbox, mapped pinned memory (host address) */
    void *d_box;                /* its device address */
    void *d_image;              /* the weights image (device) */
    sig_persistent_layout_t layout;
    sig_persistent_plan_t plan;
    uint64_t next;              /* requests published so far: request n uses slot n % RING, sequence n + 1 */
    uint32_t watchdog_ms;
    uint32_t done_mode;
    cudaStream_t side;          /* a second stream (the first is the kernel's for good): test faults */
};

/* backend_cuda.c */

/* Turns a CUDA error into a status, naming the model and what failed; a sticky error marks the
 * model lost. */
sig_status_t cuda_fail (backend_model_t *m, cudaError_t e, const char *what, char *err, size_t errlen);
/* Counts persistent kernels launched (+1) or seen to exit (-1) on DEVICE, and runs the deferred
 * releases that no longer have to wait. */
void cuda_resident_add (int device, int delta);
/* Device memory for model M from its device's pool, ordered on its stream. */
cudaError_t cuda_dev_alloc (backend_model_t *m, void **p, size_t bytes);
/* The knobs set by cuda_persistent_tuning (zero: the defaults). */
void cuda_persistent_tuning_get (sig_persistent_tuning_t *tuning);
/* backend_cuda_iface's infer and destroy. */
sig_status_t cuda_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen);
void cuda_destroy (backend_model_t **m_p);

/* backend_cuda_persistent.c */

/* One request through the mailbox (cuda_infer, for a persistent model that is not lost). */
sig_status_t cuda_persistent_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err,
                                   size_t errlen);
/* Stops the kernel (cuda_destroy): true when it is gone, false when it still runs. */
bool cuda_persistent_stop (backend_model_t *m);
/* Plans, launches and warms a kernel "persistent" model (the load of backend_cuda_iface). */
backend_model_t *cuda_persistent_load (const weights_t *w, const model_config_t *cfg, int device, char *err,
                                       size_t errlen);

#endif
