/* The CUDA kernels table: a row per value of the model key "kernel" (the MLP's CUDA kernels), saying
 * what the kernel is and supports, which the config (its names), "auto" (what to measure), the
 * placement (which kernels stay resident) and the CUDA MLP backend (what it may hold, how it names
 * the kernel) read instead of testing names. How each kernel is launched is the CUDA backend's half
 * of the row, under the same index (backends/cuda/graph.c's launch table; "persistent" is
 * mlp_persistent.c). A new kernel: a value here, its row in cuda_kernel.c, its launch in graph.c. */
#ifndef SIGSERVE_CUDA_KERNEL_H
#define SIGSERVE_CUDA_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    CUDA_KERNEL_WARP = 0, CUDA_KERNEL_CUBLAS, CUDA_KERNEL_MBYV, CUDA_KERNEL_FUSED, CUDA_KERNEL_PERSISTENT
} cuda_kernel_t;
#define CUDA_KERNEL_COUNT 5

typedef struct {
    bool whole_model;           /* one launch computes every layer (else a launch a layer) */
    bool resident;              /* launched once at load and never exits: requests through a mailbox */
    bool zero_copy_choice;      /* "zero_copy" is the config's choice (else it always reads mapped memory) */
    bool clusters;              /* needs thread-block clusters (compute capability 9.0) */
    bool beside_resident;       /* loads beside another model's resident kernel (cuBLAS waits for the whole
                                   device, which a resident kernel never lets go idle) */
    uint32_t weight_dtypes;     /* a bit per weight_dtype_t it holds weights in besides f32 */
} cuda_kernel_info_t;

/* K's row; NULL outside the table. */
const cuda_kernel_info_t *cuda_kernel_info (cuda_kernel_t k);
/* Every kernel's name in table order, NULL-terminated (the "kernel" key's choices). */
extern const char *const cuda_kernel_names[];

#endif
