/* The CUDA kernels table (cuda_kernel.h). The weight dtypes are weight_dtype_t's bits (config.h). */
#include "base/cuda_kernel.h"

#include "base/config.h"

const char *const cuda_kernel_names[] = {
    [CUDA_KERNEL_WARP] = "warp",
    [CUDA_KERNEL_CUBLAS] = "cublas",
    [CUDA_KERNEL_MBYV] = "mbyv",
    [CUDA_KERNEL_FUSED] = "fused",
    [CUDA_KERNEL_PERSISTENT] = "persistent",
    [CUDA_KERNEL_COUNT] = NULL,
};

static const cuda_kernel_info_t s_kernels[CUDA_KERNEL_COUNT] = {
    [CUDA_KERNEL_WARP] = { .zero_copy_choice = true, .beside_resident = true },
    [CUDA_KERNEL_CUBLAS] = { .zero_copy_choice = true },
    [CUDA_KERNEL_MBYV] = { .zero_copy_choice = true, .beside_resident = true },
    [CUDA_KERNEL_FUSED] = { .whole_model = true, .zero_copy_choice = true, .clusters = true, .beside_resident = true },
    [CUDA_KERNEL_PERSISTENT] = { .whole_model = true, .resident = true, .clusters = true, .beside_resident = true,
                                 .weight_dtypes = 1u << WEIGHT_DTYPE_F16 | 1u << WEIGHT_DTYPE_BF16 },
};

const cuda_kernel_info_t *cuda_kernel_info (cuda_kernel_t k)
{
    return (unsigned) k < CUDA_KERNEL_COUNT ? &s_kernels[k] : NULL;
}
