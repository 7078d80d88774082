// A kernel that traps: the GPU suites use it to lose the context on purpose and check that the
// model is marked unavailable and the service keeps answering.
#include "sig_common.h"
#include "cuda_check.h"

static __global__ void s_trap_kernel (void) { __trap (); }

static int s_launch_trap (cudaStream_t stream)
{
    s_trap_kernel<<<1, 1, 0, stream>>> ();
    return (int) cudaGetLastError ();
}

extern "C" int sig_fault_kernel (cudaStream_t stream) { return s_launch_trap (stream); }

// A kernel that spins for MS milliseconds of the GPU's clock (%globaltimer, ns), for the tests of a
// launch that hangs: the launch after it waits that long, past a model's watchdog_ms.
static __global__ void s_hang_kernel (unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile ("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile ("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

extern "C" int sig_hang_kernel (cudaStream_t stream, unsigned ms)
{
    s_hang_kernel<<<1, 1, 0, stream>>> ((unsigned long long) ms * 1000000ull);
    return (int) cudaGetLastError ();
}
