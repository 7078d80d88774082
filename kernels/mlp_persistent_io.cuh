/* persistent (mlp_persistent_kernel.cuh, ROLES and MEMORY ORDERING): the features in. The rows read
 * from the mapped slot (all loads in flight at once), the worker that owns an input chunk of a
 * layer split by columns, a chunk stored into its worker's slice (DSMEM or st.async), the leader's
 * read-and-scatter, and the system-scope fence of the completion. A part of
 * mlp_persistent_kernel.cuh, included by it after mlp_persistent_gemv.cuh (and embedded with it for
 * NVRTC). */
#ifndef SIGSERVE_MLP_PERSISTENT_IO_CUH
#define SIGSERVE_MLP_PERSISTENT_IO_CUH

#ifndef SIGSERVE_MLP_PERSISTENT_KERNEL_CUH
#error "a part of mlp_persistent_kernel.cuh, which includes it: include that file"
#endif

/* Chunks [kc0, kc0 + nk) of ROWS feature rows (row stride RS float4) from host memory into DST
 * (row stride XS float4). Each thread issues its loads (up to 4) before storing any, so up to
 * 4 x T chunks are one round trip; one row (the common case) needs no division. Block-wide. */
__device__ __forceinline__ void s_read_host (const float4 *hx, uint32_t rs, uint32_t kc0, uint32_t nk, uint32_t rows,
                                             float4 *dst, uint32_t xs)
{
    const uint32_t t = threadIdx.x;
    if (rows * nk <= P_T) {   /* the usual case: one load per thread at most (row r, chunk j) */
        if (t < rows * nk) {
            const uint32_t r = rows == 1u ? 0u : t / nk, j = t - r * nk;
            dst[(size_t) r * xs + j] = s_ld_relaxed_sys_v4 (hx + (size_t) r * rs + kc0 + j);
        }
        return;
    }
    if (rows == 1u) {
        hx += kc0;
        for (uint32_t base = 0; base < nk; base += 4u * P_T) {
            float4 v[4];
#pragma unroll
            for (uint32_t u = 0; u < 4u; ++u)
                if (base + u * P_T + t < nk)
                    v[u] = s_ld_relaxed_sys_v4 (hx + base + u * P_T + t);
#pragma unroll
            for (uint32_t u = 0; u < 4u; ++u)
                if (base + u * P_T + t < nk)
                    dst[base + u * P_T + t] = v[u];
        }
        return;
    }
    const uint32_t n = rows * nk;
    for (uint32_t base = 0; base < n; base += 4u * P_T) {
        float4 v[4];
        uint32_t at[4];   /* r * xs + j of each */
#pragma unroll
        for (uint32_t u = 0; u < 4u; ++u) {
            const uint32_t i = base + u * P_T + t;
            const uint32_t r = i / nk, j = i - r * nk;
            at[u] = r * xs + j;
            if (i < n)
                v[u] = s_ld_relaxed_sys_v4 (hx + (size_t) r * rs + kc0 + j);
        }
#pragma unroll
        for (uint32_t u = 0; u < 4u; ++u)
            if (base + u * P_T + t < n)
                dst[at[u]] = v[u];
    }
}

/* The worker owning input chunk KC of a layer with IN4 chunks split over W workers: the largest w
 * with in4 * w / W <= kc. */
__device__ __forceinline__ uint32_t s_owner (uint32_t kc, uint32_t in4, uint32_t W)
{
    return ((kc + 1u) * W + in4 - 1u) / in4 - 1u;
}

/* Worker K's chunks of a layer input of IN4 chunks split by columns over W workers. */
__host__ __device__ __forceinline__ uint32_t s_chunks_of (uint32_t k, uint32_t in4, uint32_t W)
{
    return in4 * (k + 1u) / W - in4 * k / W;
}

/* One chunk into block K's shared memory at ADDR (this block's address of it): a DSMEM store, or
 * st.async completing block K's mbarrier at MB (this block's address of it) when MB is not 0. */
__device__ __forceinline__ void s_st_to (uint32_t addr, uint32_t k, float4 v, uint32_t mb)
{
    if (mb)
        s_st_async_v4 (sig_mapa (addr, k), v, sig_mapa (mb, k));
    else
        s_st_cluster_v4f (sig_mapa (addr, k), v);
}

/* Stores chunk KC of row R of a split layer's input (IN4 chunks, slice row stride XS float4) into
 * the slice (shared-memory address SLICE, the same in every block) of the worker owning it, or of
 * every worker when the layer is split by outputs (BCAST); MB: see s_st_to. */
__device__ __forceinline__ void s_st_slice (uint32_t slice, uint32_t r, uint32_t kc, uint32_t in4, uint32_t W,
                                            uint32_t xs, bool bcast, float4 v, uint32_t mb)
{
    if (bcast) {
        for (uint32_t k = 0; k < W; ++k)
            s_st_to (slice + 16u * (r * xs + kc), k + 1u, v, mb);
        return;
    }
    const uint32_t k = s_owner (kc, in4, W);
    s_st_to (slice + 16u * (r * xs + kc - in4 * k / W), k + 1u, v, mb);
}

/* The leader: every chunk of ROWS feature rows (IN4 chunks, row stride RS float4) from host memory,
 * stored straight into the slice of the worker owning it (DSMEM; W workers, slice row stride XS
 * float4, SLICE the slice's shared-memory address, the same in every block; BCAST: every worker's,
 * a layer 0 split by outputs). Up to 4 loads per thread in flight before any store: one round
 * trip for up to 4 x 256 chunks. Block-wide. MB: see s_st_to. */
__device__ __forceinline__ void s_read_scatter (const float4 *hx, uint32_t rs, uint32_t in4, uint32_t rows, uint32_t W,
                                                uint32_t slice, uint32_t xs, bool bcast, uint32_t mb)
{
    const uint32_t t = threadIdx.x, n = rows * in4;
    if (n <= P_T) {   /* the usual case: one chunk per thread at most, its load issued first */
        if (t < n) {
            const uint32_t r = rows == 1u ? 0u : t / in4, kc = t - r * in4;
            const float4 v = s_ld_relaxed_sys_v4 (hx + (size_t) r * rs + kc);
            s_st_slice (slice, r, kc, in4, W, xs, bcast, v, mb);
        }
        return;
    }
    for (uint32_t base = 0; base < n; base += 4u * P_T) {
        float4 v[4];
#pragma unroll
        for (uint32_t u = 0; u < 4u; ++u) {
            const uint32_t i = base + u * P_T + t;
            if (i < n) {
                const uint32_t r = rows == 1u ? 0u : i / in4, kc = i - r * in4;
                v[u] = s_ld_relaxed_sys_v4 (hx + (size_t) r * rs + kc);
            }
        }
#pragma unroll
        for (uint32_t u = 0; u < 4u; ++u) {
            const uint32_t i = base + u * P_T + t;
            if (i < n) {
                const uint32_t r = rows == 1u ? 0u : i / in4, kc = i - r * in4;
                s_st_slice (slice, r, kc, in4, W, xs, bcast, v[u], mb);
            }
        }
    }
}

__device__ __forceinline__ void s_fence_sys (void)   /* a release (and acquire) fence at system scope */
{
    asm volatile ("fence.acq_rel.sys;" ::: "memory");
}

#endif
