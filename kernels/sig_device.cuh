/* Device helpers shared by the kernels: the activation, the warp sum and the warp-per-output dot
 * product (dense_warp.cu and mlp_fused.cu run the very same code, so they agree bit for bit
 * whenever both take the same path: 16-byte or scalar loads).
 * Plain fp32 FMA throughout: no fast-math intrinsics, no TF32. */
#ifndef SIGSERVE_SIG_DEVICE_CUH
#define SIGSERVE_SIG_DEVICE_CUH

#include "sig_common.h"
#include <cuda_runtime.h>
#include <stdint.h>

#define SIG_FULL_MASK 0xffffffffu

/* Largest in/out a launcher accepts: keeps every 32-bit index sum below 2^32 with room to spare
 * (the contract is 8192; this is a guard, not a tuning knob). */
#define SIG_MAX_DIM (1u << 24)

/* Blocks along grid.y: CUDA's limit. Kernels with a batch-row grid dimension loop over rows in
 * steps of gridDim.y past it. (A test build may lower it to exercise that loop cheaply.) */
#ifndef SIG_MAX_GRID_Y
#define SIG_MAX_GRID_Y 65535u
#endif

/* Same expressions as the CPU reference (service/backend_cpu.c): relu(NaN) = 0 there, too.
 * An unknown code acts as none (launchers reject it before it gets here). */
__device__ __forceinline__ float sig_activate (float v, int act)
{
    switch (act) {
    case SIG_ACT_RELU: return v > 0.0f ? v : 0.0f;
    case SIG_ACT_SIGMOID: return 1.0f / (1.0f + expf (-v));
    case SIG_ACT_TANH: return tanhf (v);
    default: return v;
    }
}

/* Sum over the 32 lanes; every lane gets the total. The whole warp must call it. */
__device__ __forceinline__ float sig_warp_sum (float v)
{
#pragma unroll
    for (uint32_t off = 16u; off > 0u; off >>= 1)
        v += __shfl_xor_sync (SIG_FULL_MASK, v, off);
    return v;
}

/* Where a dot product's input vector x is read from:
 *   SIG_X_RO: global memory constant for the kernel's lifetime: the read-only path (ld.global.nc);
 *   SIG_X_L2: global memory written by this same launch (the fused kernel's scratch): never the
 *             read-only path, which is only for data constant for the whole kernel; read at L2
 *             (ld.global.cg), the point of coherence between the SMs, so no stale L1 line can
 *             be seen whatever the L1 holds;
 *   SIG_X_SHARED: a copy in this block's shared memory. */
enum { SIG_X_RO = 0, SIG_X_L2 = 1, SIG_X_SHARED = 2 };

template <int XSRC> __device__ __forceinline__ float4 sig_load_x4 (const float4 *p)
{
    if constexpr (XSRC == SIG_X_RO)
        return __ldg (p);
    else if constexpr (XSRC == SIG_X_L2)
        return __ldcg (p);
    else
        return *p;
}
template <int XSRC> __device__ __forceinline__ float sig_load_x (const float *p)
{
    if constexpr (XSRC == SIG_X_RO)
        return __ldg (p);
    else if constexpr (XSRC == SIG_X_L2)
        return __ldcg (p);
    else
        return *p;
}

__device__ __forceinline__ float sig_fma4 (float4 w, float4 x, float acc)
{
    acc = fmaf (w.x, x.x, acc);
    acc = fmaf (w.y, x.y, acc);
    acc = fmaf (w.z, x.z, acc);
    return fmaf (w.w, x.w, acc);
}

/* This lane's part of dot(w, x) over N4 float4s; lanes stride by 32. Four float4 of W and four of
 * x per lane are in flight per step (4 independent accumulators); the last partial step issues its
 * up to 3 loads together, predicated. Only called with 16-byte-aligned W and x. */
template <int XSRC>
__device__ __forceinline__ float sig_lane_dot_vec4 (const float4 *__restrict__ w, const float4 *__restrict__ x,
                                                    uint32_t n4, uint32_t lane)
{
    constexpr uint32_t U = 4u;
    float acc[U] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint32_t i = lane;
#pragma unroll 1   /* U loads deep is the intended depth: more costs registers */
    for (; i + (U - 1u) * 32u < n4; i += U * 32u) {   /* i + 32u < n4 for every u < U */
        float4 wv[U], xv[U];
#pragma unroll
        for (uint32_t u = 0; u < U; ++u) {
            wv[u] = __ldg (w + i + 32u * u);
            xv[u] = sig_load_x4<XSRC> (x + i + 32u * u);
        }
#pragma unroll
        for (uint32_t u = 0; u < U; ++u)
            acc[u] = sig_fma4 (wv[u], xv[u], acc[u]);
    }
#pragma unroll
    for (uint32_t u = 0; u + 1u < U; ++u)   /* fewer than U left for this lane */
        if (i + 32u * u < n4)
            acc[u] = sig_fma4 (__ldg (w + i + 32u * u), sig_load_x4<XSRC> (x + i + 32u * u), acc[u]);
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* The same over N scalar floats (any alignment), eight loads of each in flight per step. */
template <int XSRC>
__device__ __forceinline__ float sig_lane_dot_scalar (const float *__restrict__ w, const float *__restrict__ x,
                                                      uint32_t n, uint32_t lane)
{
    constexpr uint32_t U = 8u;
    float acc[U] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    uint32_t i = lane;
#pragma unroll 1
    for (; i + (U - 1u) * 32u < n; i += U * 32u) {
        float wv[U], xv[U];
#pragma unroll
        for (uint32_t u = 0; u < U; ++u) {
            wv[u] = __ldg (w + i + 32u * u);
            xv[u] = sig_load_x<XSRC> (x + i + 32u * u);
        }
#pragma unroll
        for (uint32_t u = 0; u < U; ++u)
            acc[u] = fmaf (wv[u], xv[u], acc[u]);
    }
#pragma unroll
    for (uint32_t u = 0; u + 1u < U; ++u)
        if (i + 32u * u < n)
            acc[u] = fmaf (__ldg (w + i + 32u * u), sig_load_x<XSRC> (x + i + 32u * u), acc[u]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* act(dot(w, x) + bias) for one output by one warp; every lane gets the value. VEC4 only when
 * K % 4 == 0 and both w and x are 16-byte aligned (the caller checks). The whole warp calls it. */
template <int XSRC>
__device__ __forceinline__ float sig_warp_output (const float *__restrict__ w, const float *__restrict__ x,
                                                  uint32_t k, bool vec4, float bias, int act, uint32_t lane)
{
    const float part = vec4 ? sig_lane_dot_vec4<XSRC> (reinterpret_cast<const float4 *> (w),
                                                           reinterpret_cast<const float4 *> (x), k / 4u, lane)
                            : sig_lane_dot_scalar<XSRC> (w, x, k, lane);
    return sig_activate (sig_warp_sum (part) + bias, act);
}

__host__ __device__ __forceinline__ bool sig_aligned16 (const void *p)
{
    return (reinterpret_cast<uintptr_t> (p) & 15u) == 0u;
}

/* ---------------------------------------------------------------------------------------------
 * PTX for what the runtime headers do not say exactly (scope, semantics): the thread-block
 * cluster, distributed shared memory, and the mapped host memory the persistent kernels poll. */

__device__ __forceinline__ uint32_t sig_cluster_rank (void)
{
    uint32_t r;
    asm volatile ("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t sig_smem_addr (const void *p) { return (uint32_t) __cvta_generic_to_shared (p); }
/* The address of the same shared-memory location in block RANK of the cluster. */
__device__ __forceinline__ uint32_t sig_mapa (uint32_t addr, uint32_t rank)
{
    uint32_t r;
    asm volatile ("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
/* Not .aligned: a poller warp may arrive later than the rest of its block. */
__device__ __forceinline__ void sig_cluster_arrive (void) { asm volatile ("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void sig_cluster_wait (void) { asm volatile ("barrier.cluster.wait.acquire;" ::: "memory"); }
__device__ __forceinline__ void sig_cluster_sync (void)
{
    sig_cluster_arrive ();
    sig_cluster_wait ();
}
__device__ __forceinline__ void sig_st_sys_u32 (void *p, uint32_t v)
{
    asm volatile ("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void sig_st_sys_f32 (void *p, float v)
{
    asm volatile ("st.relaxed.sys.global.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}

/* An output the host may wait on (SIG_DONE_OUTPUTS): one that holds the sentinel's bits goes out as
 * the canonical NaN, so a value never reads as "not written yet" (the worker then refuses the NaN). */
__device__ __forceinline__ void sig_st_sys_output (void *p, float v)
{
    sig_st_sys_f32 (p, __float_as_uint (v) == SIG_PERSISTENT_SENTINEL ? __uint_as_float (0x7fffffffu) : v);
}

/* ---------------------------------------------------------------------------------------------
 * Host: launching one thread-block cluster */

#ifndef __CUDACC_RTC__   /* host code: not in the specialised kernel's NVRTC source */
/* The configuration of a launch of one cluster of BLOCKS blocks of THREADS threads with SMEM bytes
 * of dynamic shared memory on STREAM; ATTR holds its cluster attribute. */
static inline cudaLaunchConfig_t sig_cluster_config (uint32_t blocks, uint32_t threads, size_t smem,
                                                     cudaStream_t stream, cudaLaunchAttribute *attr)
{
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = blocks;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3 (blocks);
    cfg.blockDim = dim3 (threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}
#endif

#endif
