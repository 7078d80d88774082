/* libFuzzer target: the bytes as a safetensors file, opened by path as the weights loader opens
 * it. The file is a memfd reached through /proc/self/fd/N, so nothing is written to disk. Every
 * tensor the reader hands out is read in full into a buffer of exactly its size (so ASan catches a
 * read or write past either end), looked up by name, and has its shape formatted. */
#define _GNU_SOURCE
#include "weights/safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void s_check (int ok)
{
    if (!ok)
        abort ();
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create ("fuzz.safetensors", MFD_CLOEXEC);
        s_check (fd >= 0);
        snprintf (path, sizeof path, "/proc/self/fd/%d", fd);
    }
    s_check (ftruncate (fd, 0) == 0);
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite (fd, data + done, size - done, (off_t) done);
        s_check (n > 0);
        done += (size_t) n;
    }
    char err[1024];
    err[0] = 0;
    safetensors_t *st = safetensors_open (path, err, sizeof err);
    if (!st) {
        s_check (strncmp (err, path, strlen (path)) == 0);     /* every error names the file */
        return 0;
    }
    uint64_t data_bytes = 0;
    for (size_t i = 0; i < safetensors_count (st); i++) {
        const st_tensor_t *t = safetensors_at (st, i);
        s_check (t != NULL && t->name != NULL && t->ndim <= SAFETENSORS_MAX_DIMS);
        s_check (safetensors_find (st, t->name) == t);
        s_check (t->nbytes <= size && t->offset <= size);
        data_bytes += t->nbytes;
        char shape[256], small[8];
        safetensors_format_shape (t->shape, t->ndim, shape, sizeof shape);
        safetensors_format_shape (t->shape, t->ndim, small, sizeof small);
        s_check (shape[0] == '[' && strlen (small) < sizeof small);
        if (t->dtype == ST_DTYPE_OTHER) {
            float none;
            s_check (safetensors_read_f32 (t, &none, err, sizeof err) == -1);
            continue;
        }
        s_check (t->numel <= size);
        float *dst = malloc ((size_t) t->numel * sizeof *dst + 1);
        s_check (dst != NULL);
        s_check (safetensors_read_f32 (t, t->numel ? dst : NULL, err, sizeof err) == 0);
        volatile float sum = 0;
        for (uint64_t k = 0; k < t->numel; k++)
            sum += dst[k];
        (void) sum;
        free (dst);
    }
    s_check (data_bytes <= size);
    s_check (safetensors_at (st, safetensors_count (st)) == NULL);
    safetensors_destroy (&st);
    s_check (st == NULL);
    return 0;
}
