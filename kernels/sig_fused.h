/* Kernel "fused": the whole MLP in one thread-block-cluster launch, as C entry points (sig_common.h:
 * what every kernel entry does). Its network descriptor, sig_fused_net_t, is also what the persistent
 * kernel's planner reads (sig_persistent.h). */
#ifndef SIGSERVE_SIG_FUSED_H
#define SIGSERVE_SIG_FUSED_H

#include "sig_common.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* fused: the whole MLP in one launch, a thread-block cluster whose blocks split each layer's outputs
 * and meet at a cluster barrier between layers. The network description lives in device memory
 * (written once at load), so nothing about the model is frozen into a captured launch but the
 * pointer to it. Activations between layers go through `scratch` (2 x rows x widest floats), except
 * on the register path (small nets, see `fast`): weights loaded into registers once, activations
 * through distributed shared memory, scratch untouched. */
#define SIG_FUSED_MAX_LAYERS 16
typedef struct {
    const float *w;     /* row-major [out][in], like warp */
    const float *b;
    uint32_t in, out;
    int act;
} sig_fused_layer_t;
typedef struct {
    uint32_t layer_count;
    uint32_t widest;    /* max over every layer's in and out */
    uint32_t fast;      /* filled by sig_fused_net_validate: 1 = the shape allows the register path */
    sig_fused_layer_t layers[SIG_FUSED_MAX_LAYERS];
} sig_fused_net_t;
/* NET points to device memory holding a sig_fused_net_t. */
int sig_mlp_fused (const sig_fused_net_t *net, const float *x, float *y, float *scratch, uint32_t rows,
                   cudaStream_t stream);
/* Host-side check of a descriptor (in host memory) before it is uploaded: 1..SIG_FUSED_MAX_LAYERS
 * layers, every in/out in 1..widest, each layer's in = the previous layer's out, non-NULL w and b,
 * max_rows x widest < 2^32. 0 (cudaSuccess) or cudaErrorInvalidValue. The kernel makes the same
 * checks and, on a bad descriptor, returns without writing y.
 * It also fills NET->fast (0 when the descriptor is bad): 1 when every layer's share of the weights
 * fits the kernel's register path (weights loaded once into registers, activations passed through
 * distributed shared memory), 0 otherwise. The kernel takes that path only when fast is 1, its own
 * check of the shape agrees, and the launch's rows x every layer's in fits its shared buffers; so
 * a caller may set fast = 0 after validating to force the general path (e.g. to compare them). */
int sig_fused_net_validate (sig_fused_net_t *net, uint32_t max_rows);

#ifdef __cplusplus
}
#endif

#endif
