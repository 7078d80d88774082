/* persistent (mlp_persistent_kernel.cuh, whose MEMORY ORDERING and THE TAIL say what these are for):
 * the device helpers of the cluster's hand-offs. PTX for what the runtime headers do not say
 * exactly (scope, semantics): cluster barriers, DSMEM and host stores and loads, mbarriers and the
 * st.async stores that complete them, named barriers, and the leader's poll of the mailbox. The ones
 * both persistent kernels use are in sig_device.cuh. A part of mlp_persistent_kernel.cuh, included by
 * it after its macros (and embedded with it for NVRTC). */
#ifndef SIGSERVE_MLP_PERSISTENT_SYNC_CUH
#define SIGSERVE_MLP_PERSISTENT_SYNC_CUH

#ifndef SIGSERVE_MLP_PERSISTENT_KERNEL_CUH
#error "a part of mlp_persistent_kernel.cuh, which includes it: include that file"
#endif

/* Every thread of the block (C = 1) or of the cluster. */
__device__ __forceinline__ void s_barrier (uint32_t blocks)
{
    if (blocks > 1u) {
        sig_cluster_arrive ();
        sig_cluster_wait ();
    } else {
        __syncthreads ();
    }
}
__device__ __forceinline__ void s_st_cluster_f32 (uint32_t addr, float v)
{
    asm volatile ("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ void s_st_cluster_v4f (uint32_t addr, float4 v)
{
    asm volatile ("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z),
                  "f"(v.w)
                  : "memory");
}
__device__ __forceinline__ void s_st_cluster_v4u (uint32_t addr, uint4 v)
{
    asm volatile ("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
                  "r"(v.w)
                  : "memory");
}
__device__ __forceinline__ uint64_t s_ld_acquire_sys_u64 (const void *p)
{
    uint64_t v;
    asm volatile ("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint2 s_ld_relaxed_sys_v2 (const void *p)
{
    uint2 v;
    asm volatile ("ld.relaxed.sys.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ float4 s_ld_relaxed_sys_v4 (const float4 *p)
{
    float4 v;
    asm volatile ("ld.relaxed.sys.global.v4.f32 {%0, %1, %2, %3}, [%4];"
                  : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                  : "l"(p)
                  : "memory");
    return v;
}
/* mbarriers (sm_90): the point-to-point hand-offs. One per direction and block: s_mb[0] (a worker's:
 * the leader's warps arrive on it once they stored this block's input slice and command), s_mb[1]
 * (the leader's: the workers' warps arrive once they stored their partial sums). Arrivals come from
 * another block (mapa'd address, release at cluster scope); the waiters acquire at cluster scope. */
__device__ __forceinline__ void s_mbar_init (uint32_t addr, uint32_t count)
{
    asm volatile ("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void s_mbar_init_fence (void)
{
    asm volatile ("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* ADDR: a shared::cluster address (sig_mapa) */
__device__ __forceinline__ void s_mbar_arrive_remote (uint32_t addr)
{
    asm volatile ("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(addr) : "memory");
}
/* Waits until the phase of parity PARITY of this block's mbarrier at ADDR has completed. */
__device__ __forceinline__ void s_mbar_wait (uint32_t addr, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile ("{\n\t.reg .pred p;\n\t"
                      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
                      "selp.u32 %0, 1, 0, p;\n\t}"
                      : "=r"(done)
                      : "r"(addr), "r"(parity)
                      : "memory");
    } while (!done);
}
/* SIG_PLAN_SYNC_ASYNC: the data itself completes the receiver's mbarrier (st.async ... complete_tx:
 * no fence, no arrival after the stores). The receiver's barrier has one arrival a phase, which
 * also says how many bytes to wait for: the leader's remote arrive.expect_tx on a worker's input
 * barrier (it knows what it sends), its own local one on its gather barrier (it knows the rows). A
 * store may land before the arrival (the tx-count goes below zero within the phase; the phase
 * completes only once both are in). A phase's bytes are at most the receiver's shared memory (the
 * slices, the partials' area), far under the tx-count's limit of 2^20 - 1. ADDR, MB:
 * shared::cluster addresses (sig_mapa). */
__device__ __forceinline__ void s_st_async_v4 (uint32_t addr, float4 v, uint32_t mb)
{
    asm volatile ("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                  ::"r"(addr), "r"(__float_as_uint (v.x)), "r"(__float_as_uint (v.y)), "r"(__float_as_uint (v.z)),
                  "r"(__float_as_uint (v.w)), "r"(mb)
                  : "memory");
}
__device__ __forceinline__ void s_st_async_f32 (uint32_t addr, float v, uint32_t mb)
{
    asm volatile ("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
                  "r"(__float_as_uint (v)), "r"(mb)
                  : "memory");
}
__device__ __forceinline__ void s_mbar_expect_remote (uint32_t mb, uint32_t bytes)
{
    asm volatile ("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%0], %1;" ::"r"(mb), "r"(bytes)
                  : "memory");
}
__device__ __forceinline__ void s_mbar_expect_local (uint32_t mb, uint32_t bytes)
{
    asm volatile ("{\n\t.reg .b64 st;\n\t"
                  "mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(mb), "r"(bytes)
                  : "memory");
}
__device__ __forceinline__ void s_fence_cluster (void)
{
    asm volatile ("fence.acq_rel.cluster;" ::: "memory");
}
/* Named barrier ID over COUNT threads: the producers arrive (no wait), the consumers sync. */
__device__ __forceinline__ void s_named_arrive (uint32_t id, uint32_t count)
{
    asm volatile ("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void s_named_sync (uint32_t id, uint32_t count)
{
    asm volatile ("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/* Warp 0 of block 0 (all 32 lanes, in step): waits for request WANT in SLOT, or stop. Returns
 * OP_RUN (ROWS set) or OP_STOP. A stall keeps it polling (still honouring stop). READY_FIRST (every
 * block polls on its own, SIG_PLAN_SYNC_WPOLL): a request that is ready runs even when stop is set,
 * so that no block stops while another runs a request it saw (the host sets stop only once nothing
 * is in flight: every block then sees stop before any later request); else stop comes first. */
__device__ __forceinline__ uint32_t s_poll (const char *box, const sig_persistent_layout_t &lay, uint32_t slot,
                                            uint32_t want, uint32_t &rows, bool ready_first = false)
{
    const uint32_t lane = threadIdx.x & 31u;
    const char *ctrl = box + lay.ctrl;
    const char *req = box + lay.slots + (size_t) slot * lay.slot_bytes + lay.request;
    for (;;) {
        uint32_t decision = 0u, r = 0u;
        if (lane == 0u) {
            const uint2 c = s_ld_relaxed_sys_v2 (ctrl);     /* issued first: the acquire does not wait for it */
            const uint64_t q = s_ld_acquire_sys_u64 (req);
            const bool ready = c.y == 0u && (uint32_t) q == want;
            if (ready && (ready_first || c.x == 0u)) {
                decision = OP_RUN;
                r = (uint32_t) (q >> 32);
            } else if (c.x != 0u) {
                decision = OP_STOP;
            }
        }
        decision = __shfl_sync (SIG_FULL_MASK, decision, 0);
        if (decision != 0u) {
            rows = __shfl_sync (SIG_FULL_MASK, r, 0);
            return decision;
        }
    }
}

#endif
