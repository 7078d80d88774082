/* The specialised persistent kernels (kernels/mlp_persistent_spec.cu, lstm_persistent_spec.cu), compiled
 * once per source:
 * their cubins by key (a hash of the source, the architecture, NVRTC's version and the options) on
 * disk under server.kernel_cache_dir and in memory, and their modules loaded per device. Load path
 * only (one lock); a module stays loaded until the process ends (unloading one next to a resident
 * kernel could wait for it, as freeing memory does: docs/persistent-notes.md), so a reload of the
 * same shapes loads nothing. */
#ifndef SIGSERVE_KERNEL_CACHE_H
#define SIGSERVE_KERNEL_CACHE_H

#include "sig_spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The cache key of SRC compiled for sm_ARCH with this NVRTC. */
uint64_t kernel_cache_key (const char *src, int arch);

/* The cubin of SRC for sm_ARCH: from memory, from DIR ("" = memory only; a DIR that cannot be read or
 * written is used as memory only, with one warning), or compiled now and stored in both. *CUBIN is
 * borrowed (kept until the process ends), *HOW says where it came from ("memory", "disk", "compiled").
 * 0, or -1 with the reason in ERR (the compiler's log where it failed). */
int kernel_cache_cubin (const char *dir, int arch, const char *src, const void **cubin, size_t *bytes,
                        const char **how, char *err, size_t errlen);

/* The module of SRC loaded into DEVICE's context (current on the calling thread), its kernel the
 * extern "C" function FN, allowed SMEM_BYTES of dynamic shared memory: loaded once per device and key,
 * and only when MAY_LOAD (no persistent kernel resident on DEVICE: persistent_exclusive) or already
 * loaded. Borrowed; NULL with ERR. */
const sig_spec_module_t *kernel_cache_module (const char *dir, int device, int arch, const char *src, const char *fn,
                                              uint32_t smem_bytes, bool may_load, const char **how, char *err,
                                              size_t errlen);

/* Both, for DEVICE's compute capability: SRC's cubin (compiled outside any lock when new), then its
 * module loaded under persistent_exclusive (or found loaded); SRC (NULL: out of memory) is freed.
 * Logs for MODEL that WHAT was specialised, where the cubin came from and how long it took. Borrowed;
 * NULL with WHY. */
const sig_spec_module_t *kernel_cache_specialised (const char *dir, int device, char *src, const char *fn,
                                                   uint32_t smem_bytes, const char *model, const char *what, char *why,
                                                   size_t whylen);

#endif
