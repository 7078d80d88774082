// A kernel that traps: the GPU suites use it to lose the context on purpose and check that the
// model is marked unavailable and the service keeps answering.
#include "kernels.h"
#include "cuda_check.h"

static __global__ void s_trap_kernel (void) { __trap (); }

static int s_launch_trap (cudaStream_t stream)
{
    s_trap_kernel<<<1, 1, 0, stream>>> ();
    return (int) cudaGetLastError ();
}

extern "C" int sig_fault_kernel (cudaStream_t stream) { return s_launch_trap (stream); }
