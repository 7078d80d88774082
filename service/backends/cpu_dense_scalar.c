/* The dense layers in plain C (cpu_dense.h): what a CPU without AVX2 runs, and the reference the
 * vector paths are tested beside: every weight read through cpu_dense_weight, one output at a time. */
#include "backends/backend.h"
#include "backends/cpu_dense.h"

#include <math.h>
#include <string.h>

static void s_dense_float (const cpu_dense_t *L, const cpu_dense_io_t *io)
{
    for (uint32_t r = 0; r < io->rows; r++) {
        const float *x = io->x + (size_t) r * io->x_stride;
        float *y = io->y + (size_t) r * io->y_stride;
        const uint32_t k_end = io->k_end && io->k_end < L->in ? io->k_end : L->in;
        for (uint32_t o = io->o_begin; o < (io->o_end ? io->o_end : L->out_pad); o++) {
            float acc = 0;
            for (uint32_t k = io->k_begin; k < k_end; k++)
                acc += cpu_dense_weight (L, o, k) * x[k];
            y[o] = io->raw ? acc : backend_activate (acc + L->bias[o], L->activation);
        }
    }
}

static void s_dense_int8 (const cpu_dense_t *L, const cpu_dense_io_t *io)
{
    const int8_t *W = L->weight;
    for (uint32_t r = 0; r < io->rows; r++) {
        const uint8_t *q = io->q + (size_t) r * io->q_stride;
        float *y = io->y + (size_t) r * io->y_stride;
        for (uint32_t o = io->o_begin; o < (io->o_end ? io->o_end : L->out_pad); o++) {
            int32_t dot = 0;
            for (uint32_t k = 0; k < L->in; k++)
                dot += (int32_t) W[cpu_dense_index (L, o, k)] * (int32_t) q[k];
            const float v = fmaf ((float) (dot - io->q_zero[r] * L->rowsum[o]), L->scale[o] * io->q_scale[r], L->bias[o]);
            y[o] = backend_activate (v, L->activation);
        }
    }
}

static void s_quantize (const float *x, uint32_t x_stride, uint32_t rows, uint32_t n, uint32_t n_pad, uint8_t *q,
                        uint32_t q_stride, float *scale, int32_t *zero)
{
    for (uint32_t r = 0; r < rows; r++) {
        const float *row = x + (size_t) r * x_stride;
        uint8_t *qr = q + (size_t) r * q_stride;
        float amax = 0;
        int neg = 0;
        for (uint32_t i = 0; i < n; i++) {
            const float a = row[i] < 0 ? -row[i] : row[i];
            amax = a > amax ? a : amax;
            neg |= row[i] < 0;
        }
        const float levels = neg ? 127.0f : 255.0f;
        scale[r] = amax / levels;
        zero[r] = neg ? 128 : 0;
        const float inv = amax > 0 ? levels / amax : 0.0f;
        for (uint32_t i = 0; i < n; i++) {
            const float t = nearbyintf (row[i] * inv) + (float) zero[r];
            qr[i] = (uint8_t) (t < 0 ? 0 : t > 255 ? 255 : t);
        }
        memset (qr + n, 0, n_pad - n);
    }
}

const cpu_dense_ops_t cpu_dense_scalar = {
    .name = "scalar",
    .dense = { [WEIGHT_DTYPE_F32] = s_dense_float, [WEIGHT_DTYPE_F16] = s_dense_float, [WEIGHT_DTYPE_BF16] = s_dense_float,
               [WEIGHT_DTYPE_INT8] = s_dense_int8 },
    .quantize = s_quantize,
};
