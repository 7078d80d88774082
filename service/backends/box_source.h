/* Where persistent kernels' mailboxes come from in a device process (serving/devices.h): its share
 * of the region shared with the server, so that a front of the server can publish requests into
 * them too (backends/persistent_box.h). Set once by the device process before any model loads;
 * elsewhere unset, and each backend allocates its mailboxes as it always did. */
#ifndef SIGSERVE_BOX_SOURCE_H
#define SIGSERVE_BOX_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

/* ALLOC (ARG, BYTES): page-aligned memory of the region, or NULL when it is full. NULL: unset. */
void box_source_set (void *(*alloc) (void *arg, size_t bytes), void *arg);
bool box_source_active (void);
/* BYTES rounded up to whole pages from the source (a registration owns its pages), the rounded size
 * in *GOT; NULL when the source is unset or full. */
void *box_source_alloc (size_t bytes, size_t *got);

#endif
