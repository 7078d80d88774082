/* persistent: the whole MLP served by one resident thread-block cluster: the launches, the kernel
 * queries of the planner and the ping-pong floor. The kernel itself is in mlp_persistent_kernel.cuh,
 * which says how it works; mlp_persistent_spec.cu compiles the same source specialised for one model
 * at load (NVRTC). */
#include "cuda_check.h"
#include "sig_persistent.h"
#include "mlp_persistent_impl.cuh"
#include "mlp_persistent_kernel.cuh"
#include "sig_device.cuh"

#include <stddef.h>

/* ---------------------------------------------------------------------------------------------
 * The ping-pong floor: one block of 128 threads, the same mailbox, poll and completion. */

#define PP_T 128u

static __global__ void __launch_bounds__ (PP_T, 1)
s_pingpong_kernel (char *box, sig_persistent_layout_t lay, uint32_t in, uint32_t flags, uint32_t done_mode)
{
    __shared__ uint4 s_cmd;
    __shared__ float s_part[PP_T / 32u];
    const uint32_t t = threadIdx.x, warp = t >> 5, lane = t & 31u;
    const bool seq_done = done_mode == SIG_DONE_SEQUENCE;
    const bool output = flags != 0u || !seq_done;
    if (t == 0u) {
        sig_st_sys_u32 (box + lay.status, 1u);
        s_fence_sys ();
    }
    uint32_t next_slot = 0u, next_seq = 1u;
    for (;;) {
        if (warp == 0u) {
            uint32_t rows = 0u;
            const uint32_t op = s_poll (box, lay, next_slot, next_seq, rows);
            if (lane == 0u)
                s_cmd = make_uint4 (op, rows, next_slot, next_seq);
            next_slot = next_slot + 1u == lay.ring ? 0u : next_slot + 1u;
            ++next_seq;
        }
        __syncthreads ();
        const uint4 cmd = s_cmd;   /* after a barrier (a compiler barrier too) */
        if (cmd.x != OP_RUN)
            break;
        char *const sb = box + lay.slots + (size_t) cmd.z * lay.slot_bytes;
        float y = 1.0f;
        if (flags & SIG_PINGPONG_READ) {
            const float4 *hx = reinterpret_cast<const float4 *> (sb + lay.features);
            const uint32_t n4 = s_div_up (in, 4u);
            float4 v[4];
#pragma unroll
            for (uint32_t u = 0; u < 4u; ++u)   /* every load issued before any is used */
                v[u] = t + u * PP_T < n4 ? s_ld_relaxed_sys_v4 (hx + t + u * PP_T) : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
            float acc = 0.0f;
#pragma unroll
            for (uint32_t u = 0; u < 4u; ++u)
                acc += (v[u].x + v[u].y) + (v[u].z + v[u].w);
            for (uint32_t i = t + 4u * PP_T; i < n4; i += PP_T) {   /* beyond 2048 floats: not timed */
                const float4 w = s_ld_relaxed_sys_v4 (hx + i);
                acc += (w.x + w.y) + (w.z + w.w);
            }
            acc = sig_warp_sum (acc);
            if (lane == 0u)
                s_part[warp] = acc;
            __syncthreads ();
            y = (s_part[0] + s_part[1]) + (s_part[2] + s_part[3]);
        }
        if (t == 0u) {
            float *hy = reinterpret_cast<float *> (sb + lay.outputs);
            if (output) {
                if (seq_done)
                    *hy = y;
                else
                    sig_st_sys_output (hy, y);
            }
            if (seq_done) {
                if (output)
                    s_fence_sys ();
                sig_st_sys_u32 (sb + lay.done, cmd.w);
            }
        }
        __syncthreads ();   /* s_cmd and s_part are rewritten next round */
    }
    if (t == 0u) {
        sig_st_sys_u32 (box + lay.status + 4u, 1u);
        s_fence_sys ();
    }
}

/* ---------------------------------------------------------------------------------------------
 * Host side: device check, kernel queries, launches (layout, plan, pack: mlp_persistent_plan.cu) */

/* Static shared memory of the kernel (its header copy and command word). */
uint32_t p_static_smem (void)
{
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes (&a, s_persistent_kernel<false, SIG_DTYPE_F32>) != cudaSuccess) {
        (void) cudaGetLastError ();
        return (uint32_t) (sizeof (p_header_t) + 64u);
    }
    return (uint32_t) a.sharedSizeBytes;
}

/* The end of sig_persistent_plan (mlp_persistent_plan.cu), the part that needs the kernel. */
int p_placeable (const sig_persistent_plan_t *plan, int optin, uint32_t static_smem)
{
    /* The kernel may take up to the whole opt-in limit (set once, the same for every model: a
     * smaller value set by another load could otherwise race with this launch). */
    const void *const kernels[] = { (const void *) s_persistent_kernel<false, SIG_DTYPE_F32>,
                                    (const void *) s_persistent_kernel<true, SIG_DTYPE_F32>,
                                    (const void *) s_persistent_kernel<false, SIG_DTYPE_F16>,
                                    (const void *) s_persistent_kernel<true, SIG_DTYPE_F16>,
                                    (const void *) s_persistent_kernel<false, SIG_DTYPE_BF16>,
                                    (const void *) s_persistent_kernel<true, SIG_DTYPE_BF16> };
    cudaError_t e = cudaSuccess;
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0] && e == cudaSuccess; ++k)
        e = cudaFuncSetAttribute (kernels[k], cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int) static_smem);
    if (e != cudaSuccess)
        return (int) e;
    /* Can a cluster of this size with this much shared memory be placed at all? */
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = sig_cluster_config (plan->cluster_blocks, P_T, plan->smem_bytes, 0, &attr);
    int clusters = 0;
    e = cudaOccupancyMaxActiveClusters (&clusters, kernels[2u * (plan->dtype <= SIG_DTYPE_BF16 ? plan->dtype : 0u)], &cfg);
    if (e != cudaSuccess)
        return (int) e;
    return clusters >= 1 ? (int) cudaSuccess : (int) cudaErrorMemoryAllocation;
}

extern "C" int sig_persistent_launch (const void *image, void *box, const sig_persistent_plan_t *plan,
                                      cudaStream_t stream)
{
    if (!image || !box || !plan || plan->cluster_blocks < 1u || plan->cluster_blocks > SIG_PERSISTENT_MAX_BLOCKS)
        return (int) cudaErrorInvalidValue;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = sig_cluster_config (plan->cluster_blocks, P_T, plan->smem_bytes, stream, &attr);
    unsigned long long *trace = reinterpret_cast<unsigned long long *> (plan->trace);
    const p_header_t *img = static_cast<const p_header_t *> (image);
    char *b = static_cast<char *> (box);
    cudaError_t launched = cudaErrorInvalidValue;
    switch (plan->dtype) {
    case SIG_DTYPE_F32:
        launched = trace ? cudaLaunchKernelEx (&cfg, s_persistent_kernel<true, SIG_DTYPE_F32>, img, b, trace)
                         : cudaLaunchKernelEx (&cfg, s_persistent_kernel<false, SIG_DTYPE_F32>, img, b, trace);
        break;
    case SIG_DTYPE_F16:
        launched = trace ? cudaLaunchKernelEx (&cfg, s_persistent_kernel<true, SIG_DTYPE_F16>, img, b, trace)
                         : cudaLaunchKernelEx (&cfg, s_persistent_kernel<false, SIG_DTYPE_F16>, img, b, trace);
        break;
    case SIG_DTYPE_BF16:
        launched = trace ? cudaLaunchKernelEx (&cfg, s_persistent_kernel<true, SIG_DTYPE_BF16>, img, b, trace)
                         : cudaLaunchKernelEx (&cfg, s_persistent_kernel<false, SIG_DTYPE_BF16>, img, b, trace);
        break;
    default: break;
    }
    const cudaError_t last = cudaGetLastError ();
    return (int) (launched != cudaSuccess ? launched : last);
}

extern "C" int sig_pingpong_launch (void *box, const sig_persistent_layout_t *layout, uint32_t in, uint32_t flags,
                                    uint32_t done_mode, cudaStream_t stream)
{
    if (!box || !layout || in == 0u)
        return (int) cudaErrorInvalidValue;
    s_pingpong_kernel<<<1, PP_T, 0, stream>>> (static_cast<char *> (box), *layout, in, flags, done_mode);
    CUDA_TRY_LAUNCH ();
    return (int) cudaSuccess;
}

/* ---------------------------------------------------------------------------------------------
 * %globaltimer's step on this device: whether it can time phases of a microsecond (sigbench --trace). */

static __global__ void s_globaltimer_probe (uint32_t n, unsigned long long *out)
{
    unsigned long long prev, now, step = ~0ull;
    asm volatile ("mov.u64 %0, %%globaltimer;" : "=l"(prev));
    for (uint32_t i = 0; i < n; ++i) {
        asm volatile ("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now != prev) {
            step = now - prev < step ? now - prev : step;
            prev = now;
        }
    }
    *out = step;
}

extern "C" int sig_globaltimer_step (int device, uint32_t n, unsigned long long *ns)
{
    unsigned long long *d = nullptr;
    cudaError_t e = cudaSetDevice (device);
    if (e == cudaSuccess)
        e = cudaMalloc (&d, sizeof *d);
    if (e == cudaSuccess) {
        s_globaltimer_probe<<<1, 1>>> (n, d);
        e = cudaGetLastError ();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy (ns, d, sizeof *ns, cudaMemcpyDeviceToHost);
    if (d)
        cudaFree (d);
    return (int) e;
}
