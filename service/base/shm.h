/* A region of memory shared with child processes at the same address in each, so that the pointers
 * stored in it (rings of job pointers, the jobs' feature and output pointers) mean the same thing on
 * both sides. The server creates it (shm_new: a memfd, reserved large and filled on demand), hands
 * out zeroed, 64-byte aligned blocks from it (shm_alloc / shm_free: the creator only), and a child
 * started with exec maps it at the same address before anything else can take that range
 * (shm_attach). Blocks freed give their whole pages back to the system. */
#ifndef SIGSERVE_SHM_H
#define SIGSERVE_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _shm_t shm_t;

/* A region of SIZE bytes (reserved: memory is used only where blocks are written). NULL with ERR. */
shm_t *shm_new (size_t size, char *err, size_t errlen);
/* The region FD of SIZE bytes mapped at BASE in this process (a child's view). NULL with ERR when that
 * range is taken here. */
shm_t *shm_attach (int fd, uintptr_t base, size_t size, char *err, size_t errlen);
/* An allocator over [BASE, BASE + SIZE) of a mapping made elsewhere (a device process's share of the
 * region: its mailboxes), which shm_destroy leaves mapped. NULL when out of memory. */
shm_t *shm_arena_new (void *base, size_t size);
void shm_destroy (shm_t **self_p);

/* BYTES zeroed bytes, 64-byte aligned, or NULL when the region is full. Thread-safe. */
void *shm_alloc (shm_t *self, size_t bytes);
/* BYTES bytes at an address that is a multiple of ALIGN (a power of two, >= 64), zeroed when ZERO
 * (else as they are: a range never written reads zero), or NULL when no free range holds them. */
void *shm_alloc_aligned (shm_t *self, size_t bytes, size_t align, bool zero);
/* Gives back a block of shm_alloc (NULL: nothing). */
void shm_free (shm_t *self, void *block);

int shm_fd (const shm_t *self);
uintptr_t shm_base (const shm_t *self);
size_t shm_size (const shm_t *self);
/* Bytes handed out and not given back. */
size_t shm_used (shm_t *self);

#endif
