/* Where persistent kernels' mailboxes come from in a device process (serving/devices.h): its share
 * of the region shared with the server, so that a front of the server can publish requests into
 * them too (backends/persistent_box.h). Set once by the device process before any model loads;
 * elsewhere unset, and each backend allocates its mailboxes as it always did.
 *
 * A backend that must register host memory with its device before the device may touch it (CUDA:
 * cudaHostRegister) takes mailboxes from a registered pool (box_source_take): chunks of at least
 * BOX_SOURCE_CHUNK bytes, each registered once when it is taken from the source, and mailboxes cut
 * from them, so that most loads take their mailbox without a registration. Registering next to a
 * resident persistent kernel does not wait for it (test_cuda_resident --probe 21: 0.75 ms on an H200, the
 * kernel answering throughout), so a new chunk may be registered at any time. Mailboxes are never
 * given back to the pool (the backend keeps released ones for later loads). */
#ifndef SIGSERVE_BOX_SOURCE_H
#define SIGSERVE_BOX_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

#define BOX_SOURCE_CHUNK (32u << 20)
#define BOX_SOURCE_CHUNKS 16

/* ALLOC (ARG, BYTES): page-aligned memory of the region, or NULL when it is full. NULL: unset (and
 * the pool forgotten). */
void box_source_set (void *(*alloc) (void *arg, size_t bytes), void *arg);
bool box_source_active (void);
/* A mailbox of BYTES (rounded up to whole pages, in *GOT) from the registered pool: cut from a chunk
 * with room, else from a new chunk of max(BYTES, BOX_SOURCE_CHUNK) that REGISTER (ARG, chunk, its
 * bytes) accepted (0). NULL when neither: the source unset or full, BOX_SOURCE_CHUNKS chunks taken,
 * or REGISTER refused. */
void *box_source_take (size_t bytes, int (*reg) (void *arg, void *p, size_t bytes), void *arg, size_t *got);

#endif
