/* "backend": "auto": every candidate that can serve the model on this machine (the CPU loop;
 * each CUDA kernel that supports the shapes, with and without zero-copy; persistent where the
 * weights fit on chip; an explicit "kernel" restricts the CUDA candidates to it) is loaded and
 * timed in process on the real weights at rows 1 and at max_batch_rows, on fresh random inputs;
 * the lowest rows-1 p99 wins. The table goes to the log and to list_models. */
#ifndef SIGSERVE_AUTOSELECT_H
#define SIGSERVE_AUTOSELECT_H

#include "backends/backend.h"

typedef struct {
    char backend[16];
    char kernel[48];        /* with its launch mode, as list_models shows it */
    double p50_us, p99_us;  /* rows 1 */
    uint32_t batch_rows;
    double batch_p50_us, batch_p99_us;
    char note[96];          /* why it was not measured; "" when it was */
} autoselect_candidate_t;

/* Measures and chooses. On return CFG's backend is cpu or cuda, and kernel and zero_copy are the
 * winner's. NULL with ERR when no candidate could be loaded. At most CAP candidates are reported
 * (fastest first, the unmeasured last); *COUNT is how many. DEVICE: where CUDA candidates load. */
const backend_iface_t *autoselect_choose (const weights_t *w, model_config_t *cfg, int device,
                                          autoselect_candidate_t *out, size_t cap, size_t *count,
                                          char *err, size_t errlen);

#endif
