/* A safetensors tensor as floats: F32 copied (byte by byte on a big-endian host), F16 and BF16
 * widened exactly. The reader (safetensors.c) has checked the tensor's size before this runs. */
#include "weights/safetensors.h"
#include "base/status.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

static float s_bits_to_f32 (uint32_t bits)
{
    float f;
    memcpy (&f, &bits, sizeof f);
    return f;
}

/* IEEE half to single: every half is exactly representable, subnormals included. */
static float s_f16_to_f32 (uint16_t h)
{
    uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f)    /* inf or nan; the payload moves to the top of the f32 mantissa */
        return s_bits_to_f32 (sign | 0x7f800000u | (mant << 13));
    if (exp != 0)       /* rebias 15 -> 127 */
        return s_bits_to_f32 (sign | ((exp + 112) << 23) | (mant << 13));
    /* zero or subnormal: mant * 2^-24, exact in f32 */
    float mag = (float) mant * 0x1p-24f;
    return sign ? -mag : mag;
}

static int s_host_is_little_endian (void)
{
    const uint16_t one = 1;
    uint8_t first;
    memcpy (&first, &one, 1);
    return first == 1;
}

int safetensors_read_f32 (const st_tensor_t *tensor, float *dst, char *err, size_t errlen)
{
    assert (tensor);
    assert (dst || tensor->numel == 0);
    const uint8_t *p = tensor->data;
    uint64_t n = tensor->numel;
    switch (tensor->dtype) {
    case ST_DTYPE_F32:
        if (n && s_host_is_little_endian ())
            memcpy (dst, p, (size_t) n * 4);    /* memcpy: the data is not aligned in general */
        else
            for (uint64_t i = 0; i < n; i++, p += 4)
                dst[i] = s_bits_to_f32 ((uint32_t) p[0] | (uint32_t) p[1] << 8
                                        | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24);
        return 0;
    case ST_DTYPE_F16:
        for (uint64_t i = 0; i < n; i++, p += 2)
            dst[i] = s_f16_to_f32 ((uint16_t) (p[0] | p[1] << 8));
        return 0;
    case ST_DTYPE_BF16:     /* bf16 is the top half of an f32 */
        for (uint64_t i = 0; i < n; i++, p += 2)
            dst[i] = s_bits_to_f32 ((uint32_t) p[0] << 16 | (uint32_t) p[1] << 24);
        return 0;
    default:
        sig_set_error (err, errlen, "tensor \"%s\": dtype %s cannot be read as floats, expected F32, F16 "
                "or BF16", tensor->name, tensor->dtype_name);
        return -1;
    }
}
