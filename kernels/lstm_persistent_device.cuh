/* lstm persistent: the device helpers of lstm_persistent.cu that need none of its state: PTX with
 * its scopes and semantics said exactly (sig_device.cuh has what the MLP's kernel uses too), the
 * dot-product arithmetic per weight type, the cell update, and the trace's clock. Private to that
 * file. */
#ifndef SIGSERVE_LSTM_PERSISTENT_DEVICE_CUH
#define SIGSERVE_LSTM_PERSISTENT_DEVICE_CUH

#include "sig_lstm.h"
#include "sig_device.cuh"

#include <stdint.h>   /* no cuda_fp16.h / cuda_bf16.h (NVRTC carries neither): halves are PTX and bit operations */

/* ---------------------------------------------------------------------------------------------
 * PTX: scopes and semantics said exactly (and in sig_device.cuh, what the MLP's kernel uses too) */

__device__ __forceinline__ void l_st_cluster_u64 (uint32_t addr, uint64_t v)
{
    asm volatile ("st.relaxed.cluster.shared::cluster.u64 [%0], %1;" ::"r"(addr), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t l_ld_local_u64 (const uint64_t *p)
{
    uint64_t v;
    asm volatile ("ld.relaxed.cluster.shared::cta.u64 %0, [%1];" : "=l"(v) : "r"(sig_smem_addr (p)) : "memory");
    return v;
}
__device__ __forceinline__ uint64_t l_ld_gpu_u64 (const uint64_t *p)
{
    uint64_t v;
    asm volatile ("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void l_st_gpu_u64 (uint64_t *p, uint64_t v)
{
    asm volatile ("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void l_ld_sys_v2 (const void *p, uint64_t &a, uint64_t &b)
{
    asm volatile ("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
__device__ __forceinline__ uint32_t l_ld_sys_u32 (const void *p)
{
    uint32_t v;
    asm volatile ("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ float l_ld_sys_f32 (const void *p)
{
    float v;
    asm volatile ("ld.relaxed.sys.global.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void l_fence_sys (void) { asm volatile ("fence.acq_rel.sys;" ::: "memory"); }
/* Asynchronous copies from device to shared memory (no register held while in flight); the copying
 * thread sees them after l_cp_wait. 16 bytes at L2 (.cg), or 8 (.ca: may be an L1 line, so a reader
 * must tell a stale copy from the word itself: the LL words it is used for do). */
__device__ __forceinline__ void l_cp16 (void *dst, const void *src)
{
    asm volatile ("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sig_smem_addr (dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void l_cp8 (void *dst, const void *src)
{
    asm volatile ("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(sig_smem_addr (dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void l_cp_wait (void) { asm volatile ("cp.async.wait_all;" ::: "memory"); }

/* ---------------------------------------------------------------------------------------------
 * Arithmetic */

/* ACC + the chunk's weights (W: 4 f32, or 8 f16 / bf16) times X0 (and X1) */
template <int DT> __device__ __forceinline__ float l_fma (uint4 w, float4 x0, float4 x1, float acc);
template <> __device__ __forceinline__ float l_fma<SIG_LSTM_F32> (uint4 w, float4 x0, float4, float acc)
{
    acc = fmaf (__uint_as_float (w.x), x0.x, acc);
    acc = fmaf (__uint_as_float (w.y), x0.y, acc);
    acc = fmaf (__uint_as_float (w.z), x0.z, acc);
    return fmaf (__uint_as_float (w.w), x0.w, acc);
}
/* Two f16 (one word, element 0 low) widened to floats, exactly: cvt.f32.f16 (__half22float2's
 * instructions, without cuda_fp16.h) */
__device__ __forceinline__ float2 l_h2f (uint32_t u)
{
    float lo, hi;
    asm ("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
         : "=f"(lo), "=f"(hi)
         : "r"(u));
    return make_float2 (lo, hi);
}
template <> __device__ __forceinline__ float l_fma<SIG_LSTM_F16> (uint4 w, float4 x0, float4 x1, float acc)
{
    const float2 a = l_h2f (w.x), b = l_h2f (w.y), c = l_h2f (w.z), d = l_h2f (w.w);
    acc = fmaf (a.x, x0.x, acc);
    acc = fmaf (a.y, x0.y, acc);
    acc = fmaf (b.x, x0.z, acc);
    acc = fmaf (b.y, x0.w, acc);
    acc = fmaf (c.x, x1.x, acc);
    acc = fmaf (c.y, x1.y, acc);
    acc = fmaf (d.x, x1.z, acc);
    return fmaf (d.y, x1.w, acc);
}
__device__ __forceinline__ float l_bf_lo (uint32_t u) { return __uint_as_float (u << 16); }
__device__ __forceinline__ float l_bf_hi (uint32_t u) { return __uint_as_float (u & 0xffff0000u); }
template <> __device__ __forceinline__ float l_fma<SIG_LSTM_BF16> (uint4 w, float4 x0, float4 x1, float acc)
{
    acc = fmaf (l_bf_lo (w.x), x0.x, acc);
    acc = fmaf (l_bf_hi (w.x), x0.y, acc);
    acc = fmaf (l_bf_lo (w.y), x0.z, acc);
    acc = fmaf (l_bf_hi (w.y), x0.w, acc);
    acc = fmaf (l_bf_lo (w.z), x1.x, acc);
    acc = fmaf (l_bf_hi (w.z), x1.y, acc);
    acc = fmaf (l_bf_lo (w.w), x1.z, acc);
    return fmaf (l_bf_hi (w.w), x1.w, acc);
}

/* Plan 3 (SIG_LSTM_MATH_HALF): products in the weights' type. A chunk's 8 inputs rounded to nearest
 * into 4 pairs (element 2i in the low half, as the weights are packed), once for the four gates. */
template <int DT> __device__ __forceinline__ uint32_t l_pack2 (float lo, float hi);
template <> __device__ __forceinline__ uint32_t l_pack2<SIG_LSTM_F16> (float lo, float hi)
{
    uint32_t d;
    asm ("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
template <> __device__ __forceinline__ uint32_t l_pack2<SIG_LSTM_BF16> (float lo, float hi)
{
    uint32_t d;
    asm ("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
template <int DT> __device__ __forceinline__ uint4 l_pack_x (float4 x0, float4 x1)
{
    return make_uint4 (l_pack2<DT> (x0.x, x0.y), l_pack2<DT> (x0.z, x0.w), l_pack2<DT> (x1.x, x1.y),
                       l_pack2<DT> (x1.z, x1.w));
}
/* A * B + C per half, fused, one rounding to nearest (subnormals kept: no .ftz) */
template <int DT> __device__ __forceinline__ uint32_t l_hfma2 (uint32_t a, uint32_t b, uint32_t c);
template <> __device__ __forceinline__ uint32_t l_hfma2<SIG_LSTM_F16> (uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm ("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
template <> __device__ __forceinline__ uint32_t l_hfma2<SIG_LSTM_BF16> (uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm ("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
template <int DT> __device__ __forceinline__ float l_hsum (uint32_t s);
template <> __device__ __forceinline__ float l_hsum<SIG_LSTM_F16> (uint32_t s)
{
    const float2 f = l_h2f (s);
    return f.x + f.y;
}
template <> __device__ __forceinline__ float l_hsum<SIG_LSTM_BF16> (uint32_t s) { return l_bf_lo (s) + l_bf_hi (s); }
/* ACC + the chunk's 8 weights times the 8 packed inputs XH: per half lane SIG_LSTM_HALF_RUN = 4
 * products summed in the weights' type (the first an FMA onto +0: exact, no extra rounding), the
 * two lanes then widened (exact) and added in fp32. */
static_assert (SIG_LSTM_HALF_RUN == 4, "l_hfma's run is one 16-byte chunk: 4 products per half lane");
template <int DT> __device__ __forceinline__ float l_hfma (uint4 w, uint4 xh, float acc)
{
    uint32_t s = l_hfma2<DT> (w.x, xh.x, 0u);
    s = l_hfma2<DT> (w.y, xh.y, s);
    s = l_hfma2<DT> (w.z, xh.z, s);
    s = l_hfma2<DT> (w.w, xh.w, s);
    return acc + l_hsum<DT> (s);
}

__device__ __forceinline__ float l_sig (float x) { return __fdividef (1.0f, 1.0f + __expf (-x)); }
__device__ __forceinline__ float l_tanh (float x) { return 2.0f * l_sig (2.0f * x) - 1.0f; }
/* One cell update from the four gates: updates C, returns h. */
__device__ __forceinline__ float l_cell (float4 g, float &c)
{
    const float i = l_sig (g.x), f = l_sig (g.y), gg = l_tanh (g.z), o = l_sig (g.w);
    c = fmaf (f, c, i * gg);
    return o * l_tanh (c);
}
__device__ __forceinline__ float4 l_add4 (float4 a, float4 b) { return make_float4 (a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

__device__ __forceinline__ uint64_t l_globaltimer (void)
{
    uint64_t t;
    asm volatile ("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#endif
