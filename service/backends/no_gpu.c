/* A build without CUDA (nvcc was not found): no GPU backend. The Makefile builds this file instead
 * of backends/cuda/; backends.h says what that means to the rest of the server. */
#include "backends/backends.h"

const gpu_backend_t *const backends_gpu = NULL;
