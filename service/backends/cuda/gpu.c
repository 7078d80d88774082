/* The CUDA backends as the rest of the server sees them (backends.h): built only with nvcc. */
#include "backends/backends.h"

#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/backend_lstm_cuda.h"
#include "backends/cuda/device.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

static void s_runtime_version (char *buf, size_t len)
{
    int v = 0;
    if (cudaRuntimeGetVersion (&v) == cudaSuccess)
        snprintf (buf, len, "%d.%d", v / 1000, v % 1000 / 10);
    else
        snprintf (buf, len, "unknown");
}

static const gpu_backend_t s_cuda = {
    .name = "cuda",
    .mlp = &backend_cuda_iface,
    .lstm = &backend_lstm_cuda_iface,
    .device_count = cuda_device_count,
    .device_cpus = cuda_device_cpus,
    .device_fault = cuda_device_fault,
    .runtime_version = s_runtime_version,
};

const gpu_backend_t *const backends_gpu = &s_cuda;
