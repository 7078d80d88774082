/* fused: the whole MLP in one launch. One thread-block cluster is the whole grid; its blocks
 * split each layer's rows x out outputs (one warp per output, the dense_warp code) and meet at a
 * cluster barrier between layers. The network description is read from device memory at every
 * launch, so a captured graph freezes only the pointer to it.
 *
 * Launch: one cluster of FUSED_CLUSTER_BLOCKS = 8 blocks (the portable cluster size) of
 * FUSED_THREADS = 1024 threads: 256 warps, so the demo model's widest layer (256 outputs) is one
 * output per warp and one pass. Output o = r * out + m of a layer goes to global warp o mod 256
 * (a warp takes o, o + 256, o + 512, ...), and warps are numbered across blocks first (warp w of
 * block b is global warp w * 8 + b), so even a 64-output layer keeps all 8 SMs busy.
 *
 * Layer inputs: layer 0 reads x, layer l > 0 reads the scratch half (l - 1) & 1 and layer l
 * writes the half l & 1 (each half rows x widest floats), the last layer writes y. When the
 * layer's input (rows x in floats) fits FUSED_STAGE_FLOATS, each block first copies it into its
 * shared memory (read once per block instead of once per warp); otherwise the warps read it from
 * global memory at L2 (ld.global.cg), never through the read-only path.
 *
 * Visibility between layers: cluster.sync() is barrier.cluster.arrive (release semantics by
 * default) + barrier.cluster.wait (acquire semantics by default), at cluster scope, executed by
 * every thread of every block. So every store of layer l (global scratch) happens-before every
 * load of layer l + 1 in any block of the cluster, and every load of layer l (of the half that
 * layer l + 1 overwrites) happens-before those stores. (In the sm_90 SASS the arrive comes after
 * a MEMBAR.ALL.GPU and the wait is followed by CCTL.IVALL, an L1 invalidate.) The __threadfence()
 * before it (a gpu-scope fence, stronger than needed) is belt and braces and costs little next to
 * the barrier itself; build with -DSIG_FUSED_EXTRA_FENCE=0 to time without it. Scratch is read
 * with ld.global.cg (L2), so no stale L1 line of an earlier layer can be read even in principle.
 *
 * The kernel checks the descriptor (1..SIG_FUSED_MAX_LAYERS layers, every in/out in 1..widest,
 * each layer's in = the previous out, rows x widest < 2^32, non-NULL pointers) and, when it is
 * wrong, returns without writing anything: every thread of every block reads the same descriptor
 * and so takes the same decision before any barrier (no block can wait forever). The host-side
 * sig_fused_net_validate() performs the same checks with a message-worthy status. */
#include "cuda_check.h"
#include "kernels.h"
#include "sig_device.cuh"

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#ifndef SIG_FUSED_EXTRA_FENCE
#define SIG_FUSED_EXTRA_FENCE 1
#endif

#define FUSED_CLUSTER_BLOCKS 8u
#define FUSED_THREADS 1024u
#define FUSED_STAGE_FLOATS 8192u   /* 32 KB: any batch-1 layer input of the contract (K <= 8192) */

/* The checks of the file comment; the same code runs on host and device. */
__host__ __device__ static bool s_net_ok (const sig_fused_net_t *n, uint32_t rows)
{
    if (n->layer_count < 1u || n->layer_count > SIG_FUSED_MAX_LAYERS || n->widest == 0u ||
        (uint64_t) rows * n->widest > UINT32_MAX)
        return false;
    for (uint32_t l = 0; l < n->layer_count; ++l) {
        const sig_fused_layer_t *L = &n->layers[l];
        if (!L->w || !L->b || L->in == 0u || L->out == 0u || L->in > n->widest || L->out > n->widest)
            return false;
        if (l > 0u && L->in != n->layers[l - 1u].out)
            return false;
    }
    return true;
}

/* All threads of the block copy N floats from global SRC (at L2: SRC may be this launch's
 * scratch) into shared DST (16-byte aligned). */
__device__ __forceinline__ void s_stage (float *dst, const float *src, uint32_t n)
{
    if (sig_aligned16 (src) && n % 4u == 0u) {
        float4 *d4 = reinterpret_cast<float4 *> (dst);
        const float4 *s4 = reinterpret_cast<const float4 *> (src);
        for (uint32_t i = threadIdx.x; i < n / 4u; i += blockDim.x)
            d4[i] = __ldcg (s4 + i);
    } else {
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
            dst[i] = __ldcg (src + i);
    }
}

static __global__ void __launch_bounds__ (FUSED_THREADS, 1)
s_mlp_fused_kernel (const sig_fused_net_t *__restrict__ net, const float *__restrict__ x, float *__restrict__ y,
                    float *__restrict__ scratch, uint32_t rows)
{
    __shared__ sig_fused_net_t s_net;
    __shared__ __align__ (16) float s_in[FUSED_STAGE_FLOATS];

    /* The descriptor, word by word (it is a multiple of 8 bytes: it holds pointers). */
    static_assert (sizeof (sig_fused_net_t) % sizeof (uint32_t) == 0, "descriptor copied as words");
    {
        const uint32_t *src = reinterpret_cast<const uint32_t *> (net);
        uint32_t *dst = reinterpret_cast<uint32_t *> (&s_net);
        for (uint32_t i = threadIdx.x; i < sizeof (sig_fused_net_t) / sizeof (uint32_t); i += blockDim.x)
            dst[i] = src[i];
    }
    __syncthreads ();
    if (!s_net_ok (&s_net, rows))   /* same verdict in every thread of the cluster: see above */
        return;

    cg::cluster_group cluster = cg::this_cluster ();
    const uint32_t lane = threadIdx.x & 31u;
    const uint32_t warp = (threadIdx.x >> 5) * gridDim.x + blockIdx.x;   /* the grid is the cluster */
    const uint32_t warps = (blockDim.x >> 5) * gridDim.x;
    const size_t half = (size_t) rows * s_net.widest;
    const uint32_t layers = s_net.layer_count;

    for (uint32_t l = 0; l < layers; ++l) {
        const sig_fused_layer_t L = s_net.layers[l];
        const float *src = l == 0u ? x : scratch + ((l - 1u) & 1u) * half;
        float *dst = l + 1u == layers ? y : scratch + (l & 1u) * half;
        const uint32_t total = rows * L.out;   /* <= rows * widest < 2^32 */
        const bool staged = (uint64_t) rows * L.in <= FUSED_STAGE_FLOATS;   /* block-uniform */
        if (staged) {
            s_stage (s_in, src, rows * L.in);
            __syncthreads ();
        }
        /* s_in is 16-byte aligned; its rows are when in % 4 == 0 */
        const bool vec4 = L.in % 4u == 0u && sig_aligned16 (L.w) && (staged || sig_aligned16 (src));
        for (uint32_t o = warp; o < total; o += warps) {   /* warp-uniform */
            const uint32_t r = o / L.out, m = o - r * L.out;
            const float *wm = L.w + (size_t) m * L.in;
            const float bias = __ldg (L.b + m);
            const float v = staged ? sig_warp_output<SIG_X_SHARED> (wm, s_in + (size_t) r * L.in, L.in, vec4, bias, L.act, lane)
                                   : sig_warp_output<SIG_X_L2> (wm, src + (size_t) r * L.in, L.in, vec4, bias, L.act, lane);
            if (lane == 0u)
                dst[(size_t) r * L.out + m] = v;
        }
        /* After the last layer nothing reads y in this launch. Otherwise: this layer's outputs
         * must be visible to the whole cluster, and every block must be done reading s_in and
         * this layer's input half before anyone overwrites them. */
        if (l + 1u < layers) {
#if SIG_FUSED_EXTRA_FENCE
            __threadfence ();
#endif
            cluster.sync ();
        }
    }
}

static int s_mlp_fused (const sig_fused_net_t *net, const float *x, float *y, float *scratch, uint32_t rows,
                        cudaStream_t stream)
{
    if (!net || !x || !y || !scratch || rows == 0u)
        return (int) cudaErrorInvalidValue;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = FUSED_CLUSTER_BLOCKS;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3 (FUSED_CLUSTER_BLOCKS);   /* exactly one cluster */
    cfg.blockDim = dim3 (FUSED_THREADS);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const cudaError_t launched = cudaLaunchKernelEx (&cfg, s_mlp_fused_kernel, net, x, y, scratch, rows);
    const cudaError_t last = cudaGetLastError ();   /* clears what the failed launch left, if anything */
    return (int) (launched != cudaSuccess ? launched : last);
}

extern "C" int sig_mlp_fused (const sig_fused_net_t *net, const float *x, float *y, float *scratch, uint32_t rows,
                              cudaStream_t stream)
{
    return s_mlp_fused (net, x, y, scratch, rows, stream);
}

extern "C" int sig_fused_net_validate (const sig_fused_net_t *net, uint32_t max_rows)
{
    return net && max_rows >= 1u && s_net_ok (net, max_rows) ? (int) cudaSuccess : (int) cudaErrorInvalidValue;
}

extern "C" int sig_fused_supported (int device)
{
    int major = 0, cluster = 0;
    if (cudaDeviceGetAttribute (&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute (&cluster, cudaDevAttrClusterLaunch, device) != cudaSuccess) {
        (void) cudaGetLastError ();   /* a bad device number is an answer (0), not a pending error */
        return 0;
    }
    return major >= 9 && cluster != 0 ? 1 : 0;
}
