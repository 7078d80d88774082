/* The backends this build has, and the GPUs they see: the one place that knows whether sigserve was
 * built with CUDA. When nvcc was found, backends/cuda/ is a library of its own (libsigserve-cuda.so)
 * that backends/gpu_load.c opens the first time a model needs the GPU: a server of CPU models maps
 * none of the CUDA libraries. Without nvcc, backends/no_gpu.c stands in for gpu_load.c; the Makefile
 * builds one or the other and nothing else asks. */
#ifndef SIGSERVE_BACKENDS_H
#define SIGSERVE_BACKENDS_H

#include "backends/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

typedef struct {
    const char *name;                   /* "cuda" */
    /* Its backend for each model type (the CUDA column of the model types table); NULL: none. The
     * MLP's runs the kernels of cuda_kernel_t. */
    const backend_iface_t *by_type[MODEL_TYPE_COUNT];
    /* Devices this process sees: 0 with *COUNT, or -1 with a reason a user can act on. */
    int (*device_count) (int *count, char *why, size_t whylen);
    /* The CPUs next to DEVICE (its NUMA node) into CPUS (up to CAP); 0 when the system does not say. */
    size_t (*device_cpus) (int device, int *cpus, size_t cap);
    /* Persistent kernels resident on DEVICE now (any model's). */
    int (*resident) (int device);
    /* DEVICE's fault (its context lost, a trap) as text, or NULL while it has none. */
    const char *(*device_fault) (int device);
    /* FN (or NULL) called with a device's fault the moment it is first seen, on the thread that saw it. */
    void (*on_fault) (void (*fn) (int device, const char *fault));
    /* Tests (sigserve-test's fault injection): launches a trapping kernel on an instance of its MLP
     * backend; the context is lost once it runs. 0 or a cudaError_t. */
    int (*inject_fault) (backend_model_t *mlp);
    /* Tests: hangs that instance: a persistent kernel stops answering (stalled, still honouring stop);
     * else a kernel spinning MS ms on its stream, so its next launch hangs. */
    int (*inject_hang) (backend_model_t *mlp, unsigned ms);
} gpu_backend_t;

/* The GPU backend, loaded on the first call: NULL with WHY (may be NULL) when this build has none, this
 * host has no NVIDIA driver (then nothing is loaded), or the library or the CUDA libraries it needs do
 * not load. Only models that may run on the GPU ("cuda", "auto") call it. */
const gpu_backend_t *backends_gpu (char *why, size_t whylen);
/* Whether this build has a GPU backend: asks nothing of the machine and loads nothing. */
bool backends_gpu_built (void);
/* The CUDA runtime this build was made with ("13.0"), or NULL without CUDA: loads nothing. */
const char *backends_cuda_built_version (void);
#define BACKENDS_NO_GPU "this build of sigserve has no CUDA backend (nvcc was not found when it was built)"
#define BACKENDS_NO_DRIVER "no NVIDIA driver on this host (no /proc/driver/nvidia): no GPU, or its driver is not installed"

/* Whether this host has an NVIDIA driver (its files, asked of the file system: no CUDA call); false
 * with BACKENDS_NO_DRIVER in WHY. */
static inline bool backends_gpu_driver (char *why, size_t whylen)
{
    if (access ("/proc/driver/nvidia/version", F_OK) == 0 || access ("/dev/nvidiactl", F_OK) == 0)
        return true;
    snprintf (why, whylen, "%s", BACKENDS_NO_DRIVER);
    return false;
}

/* The model types table's backend half (base/model_type.h holds the rest: names, keys, weights,
 * capabilities), by type: the CPU backend that serves it, and the float64 reference every backend
 * of it is judged by. (Its CUDA backend is the GPU library's: gpu_backend_t.by_type.) */
typedef struct {
    const backend_iface_t *cpu;
    /* ROWS rows of input_size features (a recurrent type: whole windows) into ROWS x output_size
     * values: 0, or -1 when memory runs out. */
    int (*reference) (const weights_t *w, const float *in, uint32_t rows, double *out);
    /* MODEL_CAP_STREAM: a stream's output once COUNT steps of step_size features went in (the window of
     * its last steps, zeros before the first). NULL for a type without streams. */
    int (*reference_stream) (const weights_t *w, const float *steps, uint64_t count, double *out);
} backends_type_t;

/* TYPE's row; NULL outside the table. */
const backends_type_t *backends_type (model_type_t type);

/* sigserve-test (the mailbox emulator, tests/mailbox_backend.c): the MLP backend "cpu" stands for. */
void backends_set_test_cpu_mlp (const backend_iface_t *iface);

/* The backend of KIND (cpu or cuda, not auto) for models of TYPE as this build has it, without asking
 * the machine (no GPU is touched: the server's process when device processes are on); NULL when the
 * build has none. */
const backend_iface_t *backends_built (model_type_t type, backend_kind_t kind);
/* The backend of KIND (cpu or cuda, not auto) for models of TYPE: NULL with WHY when this build or
 * this machine has none ("cuda" on a build without CUDA, or on a host without a GPU). */
const backend_iface_t *backends_find (model_type_t type, backend_kind_t kind, char *why, size_t whylen);

#endif
