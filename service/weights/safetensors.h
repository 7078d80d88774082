/* Read-only safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian
 * header length, a JSON header naming each tensor's dtype, shape and data offsets, then the data.
 * The file is mapped; every offset is checked against the file size and every size against the
 * dtype and shape before a tensor is handed out, so a truncated or corrupt file is an error,
 * never a crash. F32 is read as is; F16 and BF16 are converted to f32. */
#ifndef SIGSERVE_SAFETENSORS_H
#define SIGSERVE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define SAFETENSORS_MAX_DIMS 8

typedef enum {
    ST_DTYPE_F32 = 0, ST_DTYPE_F16, ST_DTYPE_BF16, ST_DTYPE_OTHER
} st_dtype_t;

typedef struct {
    const char *name;           /* borrowed from the file object */
    st_dtype_t dtype;
    const char *dtype_name;     /* as written in the header, e.g. "F32", "I64" */
    size_t ndim;
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t numel;
    const void *data;           /* into the mapping; not aligned in general */
    uint64_t nbytes;
    uint64_t offset;            /* data_offsets[0]: bytes from the start of the data section */
} st_tensor_t;

typedef struct _safetensors_t safetensors_t;

/* NULL on failure, with ERR naming the file and the problem: among them a path that is not a
 * regular file (refused at once: a FIFO is not waited on), a header key given twice, and a name or
 * value with an escaped NUL (which would end it early). */
safetensors_t *safetensors_open (const char *path, char *err, size_t errlen);
void safetensors_destroy (safetensors_t **self_p);

size_t safetensors_count (const safetensors_t *self);
const st_tensor_t *safetensors_at (const safetensors_t *self, size_t index);
/* NULL when the file has no tensor of that name. */
const st_tensor_t *safetensors_find (const safetensors_t *self, const char *name);

/* Writes "[16, 32]" (or "[]" for a scalar) into BUF and returns BUF; for error messages. */
char *safetensors_format_shape (const uint64_t *shape, size_t ndim, char *buf, size_t len);

/* Copies the tensor into DST (numel floats), converting F16/BF16. -1 with ERR for other dtypes. */
int safetensors_read_f32 (const st_tensor_t *tensor, float *dst, char *err, size_t errlen);

#endif
