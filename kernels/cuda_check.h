/* The one error macro of the CUDA launchers (and of any C caller that wants it). A service never
 * aborts on a CUDA failure: the failing call's cudaError_t goes back to the caller as an int
 * (0 = cudaSuccess), which turns it into a status and, for a sticky error, marks the context lost.
 * Plain C99 so that service/ code can include it too. */
#ifndef SIGSERVE_CUDA_CHECK_H
#define SIGSERVE_CUDA_CHECK_H

#include <cuda_runtime_api.h>

/* Evaluates EXPR once; on failure returns its cudaError_t, as int, from the enclosing function. */
#define CUDA_TRY(expr)                                                                             \
    do {                                                                                           \
        const cudaError_t sig_cuda_err_ = (expr);                                                  \
        if (sig_cuda_err_ != cudaSuccess)                                                          \
            return (int) sig_cuda_err_;                                                            \
    } while (0)

/* Right after a <<<...>>> launch. A launch reports a bad configuration (grid, block, shared
 * memory, missing image for this device) only through the runtime's last-error slot;
 * cudaGetLastError reads it and clears it when the error is not sticky, so the next launcher
 * does not see this one's failure. (cudaPeekAtLastError would leave it set.) A sticky error
 * (a lost context) is returned by every later call anyway. */
#define CUDA_TRY_LAUNCH() CUDA_TRY (cudaGetLastError ())

#endif
