/* The CUDA backends as the rest of the server sees them (backends.h): built only with nvcc. */
#include "backends/backends.h"

#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/backend_lstm_cuda.h"
#include "backends/cuda/device.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

/* The version built against, not asked of the runtime: the server's process makes no CUDA call when
 * GPU work runs in device processes (serving/devices.h). */
static void s_runtime_version (char *buf, size_t len)
{
    snprintf (buf, len, "%d.%d", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
}

static const gpu_backend_t s_cuda = {
    .name = "cuda",
    .mlp = &backend_cuda_iface,
    .lstm = &backend_lstm_cuda_iface,
    .device_count = cuda_device_count,
    .device_cpus = cuda_device_cpus,
    .device_fault = cuda_device_fault,
    .inject_fault = cuda_model_inject_fault,
    .inject_hang = cuda_model_inject_hang,
    .runtime_version = s_runtime_version,
};

const gpu_backend_t *const backends_gpu = &s_cuda;
