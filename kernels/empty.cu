/* An empty kernel: the launch-overhead table (seed 000, Table 1) times launching nothing. */
#include "cuda_check.h"
#include "sig_common.h"

static __global__ void s_empty_kernel (void) {}

static int s_empty (cudaStream_t stream)
{
    s_empty_kernel<<<1, 1, 0, stream>>> ();
    CUDA_TRY_LAUNCH ();
    return (int) cudaSuccess;
}

extern "C" int sig_empty_kernel (cudaStream_t stream)
{
    return s_empty (stream);
}
