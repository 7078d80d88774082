/* The GRU kernels' device helpers (gru_seq.cu, gru_cell.cu): the gates' functions, one unit's
 * update, and a warp's dot product. Private to those files. */
#ifndef SIGSERVE_GRU_DEVICE_CUH
#define SIGSERVE_GRU_DEVICE_CUH

#include "sig_device.cuh"
#include "sig_gru.h"

#include <stdint.h>

/* The CUDA LSTM kernel's sigmoid and tanh (lstm_persistent_device.cuh): the tests' error bounds are
 * derived for these (tests/tolerance.c, s_sig_err and s_tanh_err), and the CPU backends' (vec16.h)
 * are within them too. */
__device__ __forceinline__ float gru_sig (float x) { return __fdividef (1.0f, 1.0f + __expf (-x)); }
__device__ __forceinline__ float gru_tanh (float x) { return 2.0f * gru_sig (2.0f * x) - 1.0f; }

/* One unit's new state from its input sums GR, GZ, GN (W_i x + B_I), its recurrent sums HR, HZ
 * (W_h h) and M (W_hn h + b_hn), and its state H. */
__device__ __forceinline__ float gru_unit (float gr, float gz, float gn, float hr, float hz, float m, float h)
{
    const float r = gru_sig (gr + hr), z = gru_sig (gz + hz);
    const float n = gru_tanh (fmaf (r, m, gn));
    return fmaf (z, h - n, n);
}

/* dot (W, X) over N floats by the whole warp (every lane gets it); XSRC says where X lives
 * (sig_device.cuh: SIG_X_RO, SIG_X_SHARED). W is read through the read-only path. */
template <int XSRC>
__device__ __forceinline__ float gru_warp_dot (const float *__restrict__ w, const float *__restrict__ x, uint32_t n,
                                               uint32_t lane)
{
    return sig_warp_sum (sig_lane_dot_scalar<XSRC> (w, x, n, lane));
}

#endif
