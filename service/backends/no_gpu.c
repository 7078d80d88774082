/* A build without CUDA (nvcc was not found): no GPU backend. The Makefile builds this file instead
 * of backends/gpu_load.c and backends/cuda/; backends.h says what that means to the rest of the server. */
#include "backends/backends.h"

bool backends_gpu_built (void) { return false; }

const char *backends_cuda_built_version (void) { return NULL; }

const gpu_backend_t *backends_gpu (char *why, size_t whylen)
{
    if (why)
        snprintf (why, whylen, "%s", BACKENDS_NO_GPU);
    return NULL;
}
