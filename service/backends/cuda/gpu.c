/* The CUDA backends as the rest of the server sees them (backends.h): built only with nvcc. */
#include "backends/backends.h"

#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/backend_gru_cuda.h"
#include "backends/cuda/backend_lstm_cuda.h"
#include "backends/cuda/device.h"

/* What gpu_load.c looks up in libsigserve-cuda.so (or finds linked in). */
const gpu_backend_t sigserve_gpu_backend = {
    .name = "cuda",
    .by_type = { [MODEL_TYPE_MLP] = &backend_cuda_iface, [MODEL_TYPE_LSTM] = &backend_lstm_cuda_iface,
                 [MODEL_TYPE_GRU] = &backend_gru_cuda_iface },
    .device_count = cuda_device_count,
    .device_cpus = cuda_device_cpus,
    .resident = cuda_device_resident,
    .device_fault = cuda_device_fault,
    .on_fault = cuda_device_on_fault,
    .inject_fault = cuda_model_inject_fault,
    .inject_hang = cuda_model_inject_hang,
};
