/* The backends this build has, and the GPUs they see: the one place that knows whether sigserve was
 * built with CUDA. backends/cuda/gpu.c fills backends_gpu when nvcc was found, backends/no_gpu.c
 * leaves it NULL otherwise; the Makefile builds one or the other and nothing else asks. */
#ifndef SIGSERVE_BACKENDS_H
#define SIGSERVE_BACKENDS_H

#include "backends/backend.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *name;                   /* "cuda" */
    const backend_iface_t *mlp;         /* its MLP backend (kernels: cuda_kernel_t) */
    const backend_iface_t *lstm;        /* its LSTM backend */
    /* Devices this process sees: 0 with *COUNT, or -1 with a reason a user can act on. */
    int (*device_count) (int *count, char *why, size_t whylen);
    /* The CPUs next to DEVICE (its NUMA node) into CPUS (up to CAP); 0 when the system does not say. */
    size_t (*device_cpus) (int device, int *cpus, size_t cap);
    /* DEVICE's fault (its context lost, a trap) as text, or NULL while it has none. */
    const char *(*device_fault) (int device);
    /* Tests (sigserve-test's fault injection): launches a trapping kernel on an instance of its MLP
     * backend; the context is lost once it runs. 0 or a cudaError_t. */
    int (*inject_fault) (backend_model_t *mlp);
    /* Tests: launches a kernel that spins for MS ms on that instance's stream, so its next launch hangs. */
    int (*inject_hang) (backend_model_t *mlp, unsigned ms);
    /* The runtime's version ("13.0") into BUF. */
    void (*runtime_version) (char *buf, size_t len);
} gpu_backend_t;

/* The GPU backend, or NULL when this build has none. */
extern const gpu_backend_t *const backends_gpu;
#define BACKENDS_NO_GPU "this build of sigserve has no CUDA backend (nvcc was not found when it was built)"

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
