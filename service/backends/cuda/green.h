/* Green contexts for the persistent kernels (model key green_context): a device's SMs split once
 * into groups of the driver's smallest partition (8 SMs on an H100 or H200: 15 groups, 12 SMs left
 * to everything else), each group with its green context (driver API cuGreenCtxCreate, CUDA 12.4+)
 * and a stream of that context made ahead, and lent to one persistent kernel at a time: a kernel
 * launched into a group's stream runs on that group's SMs only, so two such kernels never share an
 * SM, whatever else the process launches (tools/green-probe.cu, docs/persistent-notes.md).
 *
 * Making a green context next to a resident kernel waits for that kernel (measured on an H100:
 * green-probe step 7), so a device's groups are all made at once, only while no persistent kernel is
 * resident there: cuda_green_make is called under persistent.c's launch lock with the resident
 * count (persistent_green_prepare, from the backends' prepare before any model of a configuration
 * loads, and again at the first green load). They are kept for the life of the process (destroying
 * one would wait too). The driver's entry points come through the runtime: no link to libcuda.
 * Every function may be called from any thread; none is on a request's path. */
#ifndef SIGSERVE_CUDA_GREEN_H
#define SIGSERVE_CUDA_GREEN_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int group;              /* 0 .. groups - 1 */
    uint32_t sms;           /* the SMs it holds */
    cudaStream_t stream;    /* its green context's stream (non-blocking) */
} cuda_green_t;

/* DEVICE's groups and their contexts and streams, made now when they were not and RESIDENT (the
 * persistent kernels resident on DEVICE; the caller holds the launch lock) is 0. 1 when they are
 * made (now or before), 0 when this driver or device has none (WHY says why: not an error, the
 * hardware places the kernels), -1 with WHY when they cannot be made now (kernels resident, or a
 * driver call failed). */
int cuda_green_make (int device, int resident, char *why, size_t whylen);
/* Lends a free group of DEVICE (made) whose SMs hold BLOCKS blocks in clusters of CLUSTER to *OUT.
 * 0, or -1 with WHY (none free, naming how many there are and what holds them; or the kernel does
 * not fit a group). */
int cuda_green_take (int device, uint32_t blocks, uint32_t cluster, const char *model, cuda_green_t *out, char *why,
                     size_t whylen);
/* Gives GROUP of DEVICE back (its kernel has left). */
void cuda_green_give (int device, int group);
/* DEVICE's groups lent now, and made (0 when none are). Tests. */
uint32_t cuda_green_lent (int device, uint32_t *groups);

#endif
