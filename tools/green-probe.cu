// green-probe: what green contexts (driver API cuGreenCtxCreate, CUDA 12.4+) give the persistent
// kernels on this device, before any of it is built into the service (issue 19 item 5). Prints one
// line per question:
//   1. the device's SM resource: count, minimum partition, co-scheduling alignment;
//   2. splits into groups of 8 and 16 SMs (plain, and with MAX_POTENTIAL_CLUSTER_SIZE);
//   3. a runtime launch (cudaLaunchKernelEx, cluster of 8, one block per SM) into a green
//      context's stream: does it run, on which SMs (distinct %smid), with memory the primary
//      context allocated;
//   4. a kernel from a module loaded (cuModuleLoadData, NVRTC cubin) in the primary context, launched
//      with cuLaunchKernelEx into the green stream;
//   5. a resident spinner (cluster of 8) in green context A: do a cluster launch in green context B
//      and one on a primary-context stream still run beside it (each bounded by 2 s);
//   6. clusters of 8 in a partition of 8 SMs: two of them launched at once (serialised, or refused);
//   7. with the spinner resident: making a green context and its stream, a stream-ordered allocation
//      and copy on that stream, destroying both (each bounded: a call that waits for the resident
//      kernel is reported, and the probe leaves: on an H100, 2026-11-27, the making waits);
//   8. (before 5) two groups of 8 from one split in one green context: a cluster of 16 and two
//      clusters of 8 launched there;
//   9. (before 5) a spinner resident in every group of 8: does a cluster of 8 launched on a
//      primary-context stream run on the SMs left over (and a single block)?
// Build (no libcuda link; the driver's entry points come from the runtime):
//   make build/green-probe (nvcc ... -Ikernels tools/green-probe.cu -lnvrtc)
// Run on the GPU host: build/green-probe [device]
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>
#include "sig_device.cuh"
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <set>
#include <thread>

#define DRV(name) static decltype (&name) p_##name
DRV (cuDeviceGetDevResource);
DRV (cuDevSmResourceSplitByCount);
DRV (cuDevResourceGenerateDesc);
DRV (cuGreenCtxCreate);
DRV (cuGreenCtxDestroy);
DRV (cuGreenCtxStreamCreate);
DRV (cuModuleLoadData);
DRV (cuModuleGetFunction);
DRV (cuLaunchKernelEx);
DRV (cuFuncSetAttribute);
DRV (cuGetErrorString);
DRV (cuStreamDestroy);

static bool s_entry (const char *name, void **fn)
{
    cudaDriverEntryPointQueryResult q;
    return cudaGetDriverEntryPointByVersion (name, fn, 13000, cudaEnableDefault, &q) == cudaSuccess
           && q == cudaDriverEntryPointSuccess && *fn;
}

static const char *s_cu (CUresult r)
{
    const char *s = "?";
    if (p_cuGetErrorString)
        p_cuGetErrorString (r, &s);
    return s;
}

enum { SMEM = 200 * 1024, THREADS = 128 };

__device__ __forceinline__ unsigned s_smid (void)
{
    unsigned id;
    asm volatile ("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

__global__ void k_where (unsigned *smid)
{
    extern __shared__ char pad[];
    if (threadIdx.x == 0) {
        pad[0] = 1;
        smid[blockIdx.x] = s_smid ();
    }
}

// Spins until *flag (mapped host memory) is non-zero; block 0 reports it runs.
__global__ void k_spin (volatile int *flag, volatile int *running)
{
    extern __shared__ char pad[];
    if (threadIdx.x == 0) {
        pad[0] = 1;
        if (blockIdx.x == 0)
            *running = 1;
        while (*flag == 0)
            __nanosleep (1000);
    }
}

/* BLOCKS blocks in clusters of 8 (the persistent kernels' launch configuration, more clusters) */
static cudaError_t s_launch_cluster (const void *fn, unsigned blocks, cudaStream_t s, void **args)
{
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = sig_cluster_config (8, THREADS, SMEM, s, &attr);
    cfg.gridDim = dim3 (blocks);
    return cudaLaunchKernelExC (&cfg, fn, args);
}

// Waits for S up to MS milliseconds: 1 done, 0 still running, -1 failed (printed).
static int s_wait (cudaStream_t s, int ms, const char *what)
{
    auto t0 = std::chrono::steady_clock::now ();
    for (;;) {
        cudaError_t e = cudaStreamQuery (s);
        if (e == cudaSuccess)
            return 1;
        if (e != cudaErrorNotReady) {
            printf ("  %s: %s\n", what, cudaGetErrorString (e));
            return -1;
        }
        if (std::chrono::steady_clock::now () - t0 > std::chrono::milliseconds (ms))
            return 0;
        std::this_thread::sleep_for (std::chrono::microseconds (200));
    }
}

// Runs FN, reporting and leaving the process when it takes more than 3 s (a call that waits for a
// resident kernel waits forever).
template <class F> static void s_bounded (const char *what, F fn)
{
    volatile bool done = false;
    std::thread dog ([&] {
        for (int i = 0; i < 3000 && !done; i++)
            std::this_thread::sleep_for (std::chrono::milliseconds (1));
        if (!done) {
            printf ("7. %s: still waiting after 3 s (it waits for the resident kernel)\n", what);
            fflush (stdout);
            _exit (2);
        }
    });
    auto t0 = std::chrono::steady_clock::now ();
    fn ();
    done = true;
    dog.join ();
    printf ("7.   (%s took %.0f us)\n", what,
            std::chrono::duration<double, std::micro> (std::chrono::steady_clock::now () - t0).count ());
}

struct green_t {
    CUgreenCtx g = nullptr;
    CUstream s = nullptr;
    unsigned sms = 0;
};

static bool s_green (CUdevResource *r, int dev, green_t *out, const char *what)
{
    CUdevResourceDesc desc;
    CUresult c = p_cuDevResourceGenerateDesc (&desc, r, 1);
    if (c == CUDA_SUCCESS)
        c = p_cuGreenCtxCreate (&out->g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (c == CUDA_SUCCESS)
        c = p_cuGreenCtxStreamCreate (&out->s, out->g, CU_STREAM_NON_BLOCKING, 0);
    out->sms = r->sm.smCount;
    if (c != CUDA_SUCCESS)
        printf ("  %s: green context of %u SMs: %s\n", what, r->sm.smCount, s_cu (c));
    return c == CUDA_SUCCESS;
}

static const char *s_src = "extern \"C\" __global__ void k_mod (unsigned *smid) {\n"
                           "  extern __shared__ char pad[]; if (threadIdx.x == 0) { unsigned id;\n"
                           "  asm volatile (\"mov.u32 %0, %%smid;\" : \"=r\"(id)); pad[0] = 1; smid[blockIdx.x] = id; } }\n";

int main (int argc, char **argv)
{
    const int dev = argc > 1 ? atoi (argv[1]) : 0;
    if (cudaSetDevice (dev) != cudaSuccess || cudaFree (0) != cudaSuccess) {
        printf ("green-probe: no device %d\n", dev);
        return 1;
    }
    struct {
        const char *n;
        void **f;
    } want[] = { { "cuDeviceGetDevResource", (void **) &p_cuDeviceGetDevResource },
                 { "cuDevSmResourceSplitByCount", (void **) &p_cuDevSmResourceSplitByCount },
                 { "cuDevResourceGenerateDesc", (void **) &p_cuDevResourceGenerateDesc },
                 { "cuGreenCtxCreate", (void **) &p_cuGreenCtxCreate },
                 { "cuGreenCtxDestroy", (void **) &p_cuGreenCtxDestroy },
                 { "cuGreenCtxStreamCreate", (void **) &p_cuGreenCtxStreamCreate },
                 { "cuModuleLoadData", (void **) &p_cuModuleLoadData },
                 { "cuModuleGetFunction", (void **) &p_cuModuleGetFunction },
                 { "cuLaunchKernelEx", (void **) &p_cuLaunchKernelEx },
                 { "cuFuncSetAttribute", (void **) &p_cuFuncSetAttribute },
                 { "cuGetErrorString", (void **) &p_cuGetErrorString },
                 { "cuStreamDestroy", (void **) &p_cuStreamDestroy } };
    for (auto &w : want)
        if (!s_entry (w.n, w.f)) {
            printf ("1. %s: not in this driver: no green contexts\n", w.n);
            return 1;
        }
    cudaFuncSetAttribute (k_where, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute (k_spin, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute (k_where, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);

    CUdevResource all;
    CUresult c = p_cuDeviceGetDevResource (dev, &all, CU_DEV_RESOURCE_TYPE_SM);
    if (c != CUDA_SUCCESS) {
        printf ("1. cuDeviceGetDevResource: %s\n", s_cu (c));
        return 1;
    }
    printf ("1. device %d: %u SMs, minimum partition %u SMs, co-scheduled alignment %u SMs\n", dev, all.sm.smCount,
            all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment);

    CUdevResource g8[32], g16[16], rest8, rest16;
    unsigned n8 = 32, n16 = 16;
    for (unsigned flags = 0; flags <= CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE; flags += 2) {
        CUdevResource g[32], rest;
        for (unsigned min : { 8u, 16u }) {
            unsigned n = 32;
            c = p_cuDevSmResourceSplitByCount (g, &n, &all, &rest, flags, min);
            if (c != CUDA_SUCCESS)
                printf ("2. split by %u, flags %u: %s\n", min, flags, s_cu (c));
            else
                printf ("2. split by %u, flags %u: %u groups of %u SMs, %u left\n", min, flags, n, g[0].sm.smCount,
                        rest.sm.smCount);
        }
    }
    c = p_cuDevSmResourceSplitByCount (g8, &n8, &all, &rest8, 0, 8);
    CUresult c16 = p_cuDevSmResourceSplitByCount (g16, &n16, &all, &rest16, 0, 16);
    if (c != CUDA_SUCCESS || n8 < 3 || c16 != CUDA_SUCCESS || n16 < 1) {
        printf ("3. no groups to test with\n");
        return 1;
    }

    unsigned *d_smid = nullptr, h_smid[64];
    cudaMalloc ((void **) &d_smid, sizeof h_smid);   // the primary context's memory
    green_t a, b, a16;
    if (!s_green (&g8[0], dev, &a, "3") || !s_green (&g8[1], dev, &b, "3") || !s_green (&g16[n16 - 1], dev, &a16, "3"))
        return 1;

    // 3. runtime launch into a green stream: 8 blocks (one cluster) in the 8-SM partition, 16 in the 16-SM one
    for (int k = 0; k < 2; k++) {
        green_t &g = k == 0 ? a : a16;
        const unsigned blocks = g.sms;
        cudaMemset (d_smid, 0xff, sizeof h_smid);
        void *args[] = { &d_smid };
        cudaError_t e = s_launch_cluster ((const void *) k_where, blocks, (cudaStream_t) g.s, args);
        int done = e == cudaSuccess ? s_wait ((cudaStream_t) g.s, 2000, "3") : -1;
        std::set<unsigned> ids;
        if (done == 1) {
            cudaMemcpy (h_smid, d_smid, sizeof h_smid, cudaMemcpyDeviceToHost);
            for (unsigned i = 0; i < blocks; i++)
                ids.insert (h_smid[i]);
        }
        printf ("3. runtime cluster-8 launch of %u blocks into a green context of %u SMs: %s%s", blocks, g.sms,
                e != cudaSuccess ? cudaGetErrorString (e) : done == 1 ? "ran" : done == 0 ? "did not finish in 2 s" : "failed",
                done == 1 ? ", SMs" : "");
        for (unsigned id : ids)
            printf (" %u", id);
        printf ("\n");
    }

    // 4. a module loaded in the primary context, launched into the green stream
    {
        nvrtcProgram prog;
        nvrtcCreateProgram (&prog, s_src, "k_mod.cu", 0, nullptr, nullptr);
        const char *opts[] = { "--gpu-architecture=sm_90" };
        size_t n = 0;
        char *cubin = nullptr;
        if (nvrtcCompileProgram (prog, 1, opts) == NVRTC_SUCCESS && nvrtcGetCUBINSize (prog, &n) == NVRTC_SUCCESS) {
            cubin = new char[n];
            nvrtcGetCUBIN (prog, cubin);
        }
        nvrtcDestroyProgram (&prog);
        CUmodule mod;
        CUfunction fn;
        c = cubin ? p_cuModuleLoadData (&mod, cubin) : CUDA_ERROR_INVALID_IMAGE;
        if (c == CUDA_SUCCESS)
            c = p_cuModuleGetFunction (&fn, mod, "k_mod");
        if (c == CUDA_SUCCESS)
            c = p_cuFuncSetAttribute (fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, SMEM);
        if (c == CUDA_SUCCESS) {
            CUlaunchConfig cfg = {};
            CUlaunchAttribute at[1];
            at[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            at[0].value.clusterDim.x = 8;
            at[0].value.clusterDim.y = 1;
            at[0].value.clusterDim.z = 1;
            cfg.gridDimX = 8;
            cfg.gridDimY = cfg.gridDimZ = 1;
            cfg.blockDimX = THREADS;
            cfg.blockDimY = cfg.blockDimZ = 1;
            cfg.sharedMemBytes = SMEM;
            cfg.hStream = a.s;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            void *args[] = { &d_smid };
            c = p_cuLaunchKernelEx (&cfg, fn, args, nullptr);
        }
        const int done = c == CUDA_SUCCESS ? s_wait ((cudaStream_t) a.s, 2000, "4") : -1;
        printf ("4. a primary-context module's kernel (cuLaunchKernelEx) into the green stream: %s\n",
                c != CUDA_SUCCESS ? s_cu (c) : done == 1 ? "ran" : done == 0 ? "did not finish in 2 s" : "failed");
        delete[] cubin;
    }

    // 8. groups 3 and 4 of the split by 8 in one green context: a cluster of 16 (non-portable), two of 8
    {
        CUdevResourceDesc desc;
        CUresult r = p_cuDevResourceGenerateDesc (&desc, &g8[3], 2);
        green_t d;
        if (r == CUDA_SUCCESS)
            r = p_cuGreenCtxCreate (&d.g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
        if (r == CUDA_SUCCESS)
            r = p_cuGreenCtxStreamCreate (&d.s, d.g, CU_STREAM_NON_BLOCKING, 0);
        printf ("8. one green context of groups 3 and 4: %s\n", s_cu (r));
        if (r == CUDA_SUCCESS) {
            void *args[] = { &d_smid };
            for (unsigned cl : { 8u, 16u }) {
                cudaFuncSetAttribute (k_where, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
                cudaLaunchAttribute attr;
                cudaLaunchConfig_t cfg = sig_cluster_config (cl, THREADS, SMEM, (cudaStream_t) d.s, &attr);
                cfg.gridDim = dim3 (16);
                cudaMemset (d_smid, 0xff, sizeof h_smid);
                cudaError_t e = cudaLaunchKernelExC (&cfg, (const void *) k_where, args);
                int done = e == cudaSuccess ? s_wait ((cudaStream_t) d.s, 2000, "8") : -1;
                std::set<unsigned> ids;
                if (done == 1) {
                    cudaMemcpy (h_smid, d_smid, sizeof h_smid, cudaMemcpyDeviceToHost);
                    for (unsigned i = 0; i < 16; i++)
                        ids.insert (h_smid[i]);
                }
                printf ("8. 16 blocks in clusters of %u there: %s, %zu distinct SMs\n", cl,
                        e != cudaSuccess ? cudaGetErrorString (e) : done == 1 ? "ran" : done == 0 ? "did not finish in 2 s" : "failed",
                        ids.size ());
                cudaGetLastError ();
            }
        }
    }
    // 9. every group of 8 held by a spinner: a cluster of 8, then one block, on a primary stream.
    //    Every green context is made first (making one beside a resident kernel waits: step 7).
    {
        static green_t g9[32];
        g9[0] = a;
        g9[1] = b;
        bool made = true;
        for (unsigned i = 2; i < n8 && made; i++)
            made = s_green (&g8[i], dev, &g9[i], "9");
        int *h9 = nullptr, *d9 = nullptr;
        cudaHostAlloc ((void **) &h9, 4096, cudaHostAllocMapped);
        memset (h9, 0, 4096);
        cudaHostGetDevicePointer ((void **) &d9, h9, 0);
        unsigned running = 0;
        for (unsigned i = 0; i < n8 && made; i++) {
            int *flag = d9, *run = d9 + 64 + i;
            void *sargs[] = { &flag, &run };
            if (s_launch_cluster ((const void *) k_spin, 8, (cudaStream_t) g9[i].s, sargs) != cudaSuccess)
                break;
        }
        auto t0 = std::chrono::steady_clock::now ();
        while (std::chrono::steady_clock::now () - t0 < std::chrono::seconds (2)) {
            running = 0;
            for (unsigned i = 0; i < n8; i++)
                running += ((volatile int *) h9)[64 + i] != 0;
            if (running == n8)
                break;
        }
        printf ("9. spinners (clusters of 8) resident in %u of the %u groups of 8 (%u SMs left over)\n", running, n8,
                rest8.sm.smCount);
        cudaStream_t ps;
        cudaStreamCreateWithFlags (&ps, cudaStreamNonBlocking);
        void *args[] = { &d_smid };
        cudaError_t e = s_launch_cluster ((const void *) k_where, 8, ps, args);
        int done = e == cudaSuccess ? s_wait (ps, 2000, "9") : -1;
        printf ("9. beside them, a cluster of 8 on a primary-context stream: %s\n",
                e != cudaSuccess ? cudaGetErrorString (e) : done == 1 ? "ran" : done == 0 ? "did not start in 2 s" : "failed");
        cudaStream_t ps1;
        cudaStreamCreateWithFlags (&ps1, cudaStreamNonBlocking);
        k_where<<<1, THREADS, SMEM, ps1>>> (d_smid);
        const int done1 = s_wait (ps1, 2000, "9");
        printf ("9. beside them, one block on another primary-context stream: %s\n",
                done1 == 1 ? "ran" : done1 == 0 ? "did not start in 2 s" : "failed");
        *(volatile int *) h9 = 1;   /* the spinners leave; the pending cluster then runs */
        for (unsigned i = 0; i < n8 && made; i++)
            s_wait ((cudaStream_t) g9[i].s, 2000, "9");
        done = s_wait (ps, 2000, "9");
        printf ("9. the spinners stopped; the cluster of 8 then: %s\n", done == 1 ? "ran" : "still waiting");
        cudaStreamDestroy (ps);
        cudaStreamDestroy (ps1);
    }

    // 5. a resident spinner in A; a cluster launch in B and on a primary stream beside it
    int *h_flag = nullptr, *h_run = nullptr;
    cudaHostAlloc ((void **) &h_flag, 4096, cudaHostAllocMapped);
    h_run = h_flag + 64;
    *h_flag = 0;
    *h_run = 0;
    int *d_flag = nullptr, *d_run = nullptr;
    cudaHostGetDevicePointer ((void **) &d_flag, h_flag, 0);
    cudaHostGetDevicePointer ((void **) &d_run, h_run, 0);
    {
        void *sargs[] = { &d_flag, &d_run };
        cudaError_t e = s_launch_cluster ((const void *) k_spin, 8, (cudaStream_t) a.s, sargs);
        auto t0 = std::chrono::steady_clock::now ();
        while (e == cudaSuccess && !*(volatile int *) h_run
               && std::chrono::steady_clock::now () - t0 < std::chrono::seconds (2))
            ;
        printf ("5. resident spinner (cluster of 8) in green context A: %s\n",
                e != cudaSuccess ? cudaGetErrorString (e) : *(volatile int *) h_run ? "running" : "did not start in 2 s");
        void *args[] = { &d_smid };
        e = s_launch_cluster ((const void *) k_where, 8, (cudaStream_t) b.s, args);
        int done = e == cudaSuccess ? s_wait ((cudaStream_t) b.s, 2000, "5") : -1;
        printf ("5. beside it, a cluster launch in green context B: %s\n",
                e != cudaSuccess ? cudaGetErrorString (e) : done == 1 ? "ran" : done == 0 ? "did not finish in 2 s" : "failed");
        cudaStream_t ps;
        cudaStreamCreateWithFlags (&ps, cudaStreamNonBlocking);
        e = s_launch_cluster ((const void *) k_where, 8, ps, args);
        done = e == cudaSuccess ? s_wait (ps, 2000, "5") : -1;
        printf ("5. beside it, a cluster launch on a primary-context stream: %s\n",
                e != cudaSuccess ? cudaGetErrorString (e) : done == 1 ? "ran" : done == 0 ? "did not finish in 2 s" : "failed");
        // 6. while A is full: another cluster of 8 into A waits (its partition is taken)
        e = s_launch_cluster ((const void *) k_where, 8, (cudaStream_t) b.s, args);
        if (e == cudaSuccess)
            e = s_launch_cluster ((const void *) k_where, 16, (cudaStream_t) b.s, args);
        done = e == cudaSuccess ? s_wait ((cudaStream_t) b.s, 2000, "6") : -1;
        printf ("6. 8 then 16 blocks (clusters of 8) in the 8-SM green context B: %s\n",
                e != cudaSuccess ? cudaGetErrorString (e) : done == 1 ? "ran (in turn)" : done == 0 ? "did not finish in 2 s" : "failed");
        // 7. beside the resident spinner: a green context and stream of group 2, used and destroyed
        {
            green_t c7;
            bool made = false;
            s_bounded ("cuGreenCtxCreate + cuGreenCtxStreamCreate", [&] { made = s_green (&g8[2], dev, &c7, "7"); });
            printf ("7. beside the resident spinner, a green context of group 2 and its stream: %s\n",
                    made ? "made" : "failed");
            if (made) {
                void *p = nullptr;
                cudaError_t e7 = cudaSuccess;
                s_bounded ("cudaMallocAsync + cudaMemsetAsync + cudaStreamSynchronize on the green stream", [&] {
                    e7 = cudaMallocAsync (&p, 1 << 20, (cudaStream_t) c7.s);
                    if (e7 == cudaSuccess)
                        e7 = cudaMemsetAsync (p, 0, 1 << 20, (cudaStream_t) c7.s);
                    if (e7 == cudaSuccess)
                        e7 = cudaFreeAsync (p, (cudaStream_t) c7.s);
                    if (e7 == cudaSuccess)
                        e7 = cudaStreamSynchronize ((cudaStream_t) c7.s);
                });
                printf ("7. a stream-ordered allocation, memset and free on the green stream: %s\n",
                        cudaGetErrorString (e7));
                cudaGetLastError ();
                void *args7[] = { &d_smid };
                e7 = s_launch_cluster ((const void *) k_where, 8, (cudaStream_t) c7.s, args7);
                done = e7 == cudaSuccess ? s_wait ((cudaStream_t) c7.s, 2000, "7") : -1;
                printf ("7. a cluster launch there: %s\n", e7 != cudaSuccess ? cudaGetErrorString (e7)
                                                           : done == 1 ? "ran" : "did not finish in 2 s");
                CUresult d1 = CUDA_SUCCESS, d2 = CUDA_SUCCESS;
                s_bounded ("cuStreamDestroy + cuGreenCtxDestroy", [&] {
                    d1 = p_cuStreamDestroy (c7.s);
                    d2 = p_cuGreenCtxDestroy (c7.g);
                });
                printf ("7. destroying its stream and the green context: %s, %s\n", s_cu (d1), s_cu (d2));
            }
        }
        *(volatile int *) h_flag = 1;
        done = s_wait ((cudaStream_t) a.s, 2000, "5");
        printf ("5. the spinner stopped when asked: %s\n", done == 1 ? "yes" : "no");
        cudaStreamDestroy (ps);
    }
    printf ("green-probe: done\n");
    return 0;
}
