/* Test and tool support: writing F32 safetensors files. */
#ifndef SIGSERVE_ST_WRITE_H
#define SIGSERVE_ST_WRITE_H

#include "weights/safetensors.h"

/* Writes an F32 safetensors file (used by the demo-weight generator and the tests): entries in
 * the given order, the header padded with spaces so the data starts at a multiple of 8 bytes.
 * -1 with ERR naming the file (and the tensor, for bad arguments); no partial file is left. */
typedef struct {
    const char *name;
    size_t ndim;
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    const float *data;
} st_write_tensor_t;
int safetensors_write_f32 (const char *path, const st_write_tensor_t *tensors, size_t count,
                           char *err, size_t errlen);

#endif
