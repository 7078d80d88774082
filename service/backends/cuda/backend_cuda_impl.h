/* The insides of the CUDA MLP backend, shared by backend_cuda.c (the interface: it hands each call
 * to the kind of model it is), graph.c (kernels launched per request, by graph replay or directly)
 * and mlp_persistent.c (kernel "persistent" and the ping-pong floor). Both kinds rest on the device
 * level (device.h); the persistent one on the persistent host layer too (persistent.h). Private to
 * those three files: nothing else includes this. */
#ifndef SIGSERVE_BACKEND_CUDA_IMPL_H
#define SIGSERVE_BACKEND_CUDA_IMPL_H

#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/persistent.h"
#include "backends/persistent_box.h"
#include "sig_fused.h"
#include "sig_persistent.h"
#include "sig_spec.h"

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
    char label[48];             /* graph models: the kernel's name and how it runs ("warp+graph+zerocopy") */
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
    /* CUDA graphs, one per batch size of graph_rows (ascending): a launch of r rows replays the
     * first of at least r rows (bucket[r]), its rows past r computed on what the buffers hold */
    uint32_t graph_count;
    uint32_t graph_rows[CONFIG_MAX_GRAPH_ROWS];
    uint8_t *bucket;            /* [max_rows + 1]: rows -> index into graph_rows */
    cudaGraphExec_t *e2e;       /* [graph_count]: H2D, layers, D2H with the pinned buffers */
    cudaGraphExec_t *kernels;   /* [graph_count]: the layers only (benchmarks) */
    bool lost;                  /* graph models: the context is unusable, every infer answers UNAVAILABLE */
    /* kernel "persistent" (and the ping-pong floor) */
    bool persistent;
    bool pingpong;              /* the floor kernel, not the MLP (sigbench) */
    const sig_spec_module_t *spec;  /* the kernel specialised for this model (NVRTC; kernel_cache.h), or
                                       NULL: the generic one */
    persistent_t host;          /* the kernel's stream, mailbox, watchdog and state (host.lost) */
    void *d_image;              /* the weights image (device) */
    sig_persistent_layout_t layout;
    sig_persistent_plan_t plan;
    persistent_box_t own_box;   /* the mailbox protocol's state (its sequence included) ... */
    persistent_box_t *pbox;     /* ... where it is used: &own_box, or its copy in the region shared with the
                                   server once a front may publish too (cuda_persistent_share) */
    uint32_t done_mode;
    cudaStream_t side;          /* a second stream (the kernel's is its for good): test faults */
    bool parked;                /* its kernel stopped after the load, everything else kept (a warm spare's) */
};

/* graph.c: every kernel but "persistent" */
backend_model_t *cuda_graph_load (const weights_t *w, const model_config_t *cfg, int device, char *err,
                                  size_t errlen);
sig_status_t cuda_graph_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err,
                               size_t errlen);
void cuda_graph_destroy (backend_model_t **m_p);
int cuda_graph_poison (backend_model_t *m);

/* mlp_persistent.c: kernel "persistent" and the ping-pong floor */
backend_model_t *cuda_persistent_load (const weights_t *w, const model_config_t *cfg, int device, char *err,
                                       size_t errlen);
/* backend.h's prepare for kernel "persistent": its specialised kernel compiled and loaded on DEVICE
 * (1), or -1 with WHY (the load then falls back as it would have). */
int cuda_persistent_prepare (const weights_t *w, const model_config_t *cfg, int device, char *why, size_t whylen);
sig_status_t cuda_persistent_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err,
                                    size_t errlen);
void cuda_persistent_destroy (backend_model_t **m_p);
int cuda_persistent_poison (backend_model_t *m);
/* backend.h's park and unpark for kernel "persistent" (0 for every other kind of model). */
int cuda_persistent_park (backend_model_t *m);
int cuda_persistent_unpark (backend_model_t *m, char *err, size_t errlen);
/* The protocol state moves to DEST (in the region shared with the server), for fronts to publish
 * too: 0, or -1 when M is not a persistent MLP whose mailbox lies in that region. */
int cuda_persistent_share (backend_model_t *m, persistent_box_t *dest);

#endif
