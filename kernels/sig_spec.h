/* Kernels specialised for one model at load: NVRTC compiles the kernel's source (embedded in the
 * binary, tools/embed-sources.sh) with the model's plan as constants, and the driver API loads and
 * launches it (mlp_persistent_spec.cu). The persistent MLP (sig_persistent.h: its source and launch)
 * and the LSTM (sig_lstm.h) use it. Host code only; needs no GPU to compile. */
#ifndef SIGSERVE_SIG_SPEC_H
#define SIGSERVE_SIG_SPEC_H

#include <stddef.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded module of a specialised kernel. */
typedef struct sig_spec_module sig_spec_module_t;
/* NVRTC's version. 0, or -1 when it cannot say. */
int sig_spec_nvrtc_version (int *major, int *minor);
/* Compiles SRC (sig_persistent_spec_source) for sm_ARCH (90: compute capability 9.0) into *CUBIN (the
 * caller frees it) of *BYTES bytes, with the function "sig_persistent_spec". 0, or -1 with the reason
 * (and the compiler's log) in LOG. Needs no GPU. */
int sig_spec_compile (const char *src, int arch, void **cubin, size_t *bytes, char *log, size_t loglen);
/* Loads CUBIN into the calling thread's current context (the runtime's primary context of the device
 * set), its kernel allowed SMEM_BYTES of dynamic shared memory. 0, or -1 with the reason in ERR. */
int sig_spec_load (const void *cubin, uint32_t smem_bytes, sig_spec_module_t **module, char *err, size_t errlen);
/* Unloads the module (no kernel of it may still run). Safe on NULL. */
void sig_spec_unload (sig_spec_module_t **module);

/* Loads CUBIN as sig_spec_load does, its kernel the function NAME (extern "C"). */
int sig_spec_load_fn (const void *cubin, const char *name, uint32_t smem_bytes, sig_spec_module_t **module, char *err,
                      size_t errlen);
/* Launches MODULE's kernel on BLOCKS blocks of THREADS threads with SMEM_BYTES of dynamic shared memory
 * on STREAM: as one cluster of BLOCKS (CLUSTER), cooperatively (COOPERATIVE: every block resident at
 * once, or the launch fails), or plainly; ARGS the kernel's arguments. 0 or a CUDA error. */
int sig_spec_launch_args (const sig_spec_module_t *module, uint32_t blocks, uint32_t threads, uint32_t smem_bytes,
                          int cluster, int cooperative, cudaStream_t stream, void **args);

#ifdef __cplusplus
}
#endif

#endif
