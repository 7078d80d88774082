/* The shared region (shm.h): a memfd mapped MAP_SHARED, and a first-fit list of free extents kept
 * by the creator (a few dozen blocks at most: a model's jobs and buffers, its instances' rings). */
#define _GNU_SOURCE
#include "base/shm.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXTENTS_MAX 1024
#define ALIGN 64u
#define SHM_HINT 0x300000000000ull    /* 48 TiB */

typedef struct {
    size_t at, len;
} extent_t;

struct _shm_t {
    int fd;
    bool owner;
    bool view;                          /* shm_arena_new: a range of a mapping made elsewhere */
    uint8_t *base;
    size_t size;
    pthread_mutex_t lock;
    size_t free_count;
    extent_t free[EXTENTS_MAX];         /* sorted by offset, never adjacent (merged) */
    size_t used_count;
    extent_t used[EXTENTS_MAX];         /* unsorted */
    size_t used_bytes;
};

shm_t *shm_new (size_t size, char *err, size_t errlen)
{
    shm_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init (&self->lock, NULL);
    self->owner = true;
    self->size = size;
    /* no MFD_CLOEXEC: the device processes inherit it at the same number */
    self->fd = memfd_create ("sigserve-shared", 0);
    if (self->fd < 0 || ftruncate (self->fd, (off_t) size) != 0) {
        snprintf (err, errlen, "cannot create the region shared with the device processes (%zu MiB): %s",
                  size >> 20, strerror (errno));
        shm_destroy (&self);
        return NULL;
    }
    /* At 48 TiB: far from the binary and its heap (near 85 TiB with PIE) and from libraries, stacks
     * and other mappings (down from 128 TiB), so a child finds the range free; and inside what
     * AddressSanitizer leaves to the program (its shadow ends near 16 TiB). */
    void *p = mmap ((void *) SHM_HINT, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                    self->fd, 0);
    if (p == MAP_FAILED)
        p = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, self->fd, 0);
    if (p == MAP_FAILED) {
        snprintf (err, errlen, "cannot map the region shared with the device processes (%zu MiB): %s",
                  size >> 20, strerror (errno));
        shm_destroy (&self);
        return NULL;
    }
    self->base = p;
    self->free[0] = (extent_t) { 0, size };
    self->free_count = 1;
    return self;
}

shm_t *shm_attach (int fd, uintptr_t base, size_t size, char *err, size_t errlen)
{
    shm_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init (&self->lock, NULL);
    self->fd = fd;
    self->size = size;
    void *p = mmap ((void *) base, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED_NOREPLACE, fd, 0);
    if (p == MAP_FAILED || p != (void *) base) {
        snprintf (err, errlen, "cannot map the shared region at %#lx (%zu MiB): %s", (unsigned long) base, size >> 20,
                  p == MAP_FAILED ? strerror (errno) : "the kernel chose another address");
        if (p != MAP_FAILED)
            munmap (p, size);
        self->fd = -1;
        shm_destroy (&self);
        return NULL;
    }
    self->base = p;
    return self;
}

void shm_destroy (shm_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shm_t *self = *self_p;
    if (self->base && !self->view)
        munmap (self->base, self->size);
    if (self->fd >= 0)
        close (self->fd);
    pthread_mutex_destroy (&self->lock);
    free (self);
    *self_p = NULL;
}

shm_t *shm_arena_new (void *base, size_t size)
{
    shm_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    pthread_mutex_init (&self->lock, NULL);
    self->fd = -1;
    self->owner = self->view = true;
    self->base = base;
    self->size = size;
    self->free[0] = (extent_t) { 0, size };
    self->free_count = 1;
    return self;
}

void *shm_alloc_aligned (shm_t *self, size_t bytes, size_t align, bool zero)
{
    if (!self->owner || bytes == 0 || align < ALIGN || (align & (align - 1)))
        return NULL;
    bytes = (bytes + ALIGN - 1) & ~(size_t) (ALIGN - 1);
    void *p = NULL;
    pthread_mutex_lock (&self->lock);
    for (size_t i = 0; i < self->free_count && self->used_count < EXTENTS_MAX; i++) {
        extent_t *f = &self->free[i];
        const uintptr_t addr = (uintptr_t) self->base + f->at;
        const size_t skip = (size_t) (((addr + align - 1) & ~(uintptr_t) (align - 1)) - addr);
        if (f->len < skip + bytes || (skip && self->free_count == EXTENTS_MAX))
            continue;
        const size_t at = f->at + skip, rest = f->len - skip - bytes;
        self->used[self->used_count++] = (extent_t) { at, bytes };
        p = self->base + at;
        if (skip) {     /* the part before stays free, and the part after becomes a free extent of its own */
            f->len = skip;
            if (rest) {
                memmove (f + 2, f + 1, (self->free_count - i - 1) * sizeof *f);
                f[1] = (extent_t) { at + bytes, rest };
                self->free_count++;
            }
        } else {
            f->at += bytes;
            f->len -= bytes;
            if (f->len == 0) {
                memmove (f, f + 1, (self->free_count - i - 1) * sizeof *f);
                self->free_count--;
            }
        }
        self->used_bytes += bytes;
        break;
    }
    pthread_mutex_unlock (&self->lock);
    if (p && zero)
        memset (p, 0, bytes);
    return p;
}

void *shm_alloc (shm_t *self, size_t bytes) { return shm_alloc_aligned (self, bytes, ALIGN, true); }

/* Returns the whole pages inside [at, at + len) to the system (they read as zeros again). */
static void s_release_pages (shm_t *self, size_t at, size_t len)
{
    const size_t page = (size_t) sysconf (_SC_PAGESIZE);
    size_t from = (at + page - 1) / page * page, to = (at + len) / page * page;
    if (to > from)
        madvise (self->base + from, to - from, MADV_REMOVE);
}

void shm_free (shm_t *self, void *block)
{
    if (!block)
        return;
    pthread_mutex_lock (&self->lock);
    const size_t at = (size_t) ((uint8_t *) block - self->base);
    for (size_t u = 0; u < self->used_count; u++) {
        if (self->used[u].at != at)
            continue;
        size_t len = self->used[u].len;
        self->used[u] = self->used[--self->used_count];
        self->used_bytes -= len;
        size_t i = 0;
        while (i < self->free_count && self->free[i].at < at)
            i++;
        /* merge with the free extent before and after */
        size_t start = at, end = at + len;
        bool before = i > 0 && self->free[i - 1].at + self->free[i - 1].len == start;
        bool after = i < self->free_count && self->free[i].at == end;
        if (before && after) {
            self->free[i - 1].len += len + self->free[i].len;
            memmove (&self->free[i], &self->free[i + 1], (self->free_count - i - 1) * sizeof self->free[0]);
            self->free_count--;
        } else if (before)
            self->free[i - 1].len += len;
        else if (after) {
            self->free[i].at = start;
            self->free[i].len += len;
        } else if (self->free_count < EXTENTS_MAX) {
            memmove (&self->free[i + 1], &self->free[i], (self->free_count - i) * sizeof self->free[0]);
            self->free[i] = (extent_t) { start, len };
            self->free_count++;
        }
        s_release_pages (self, start, len);
        break;
    }
    pthread_mutex_unlock (&self->lock);
}

int shm_fd (const shm_t *self) { return self->fd; }
uintptr_t shm_base (const shm_t *self) { return (uintptr_t) self->base; }
size_t shm_size (const shm_t *self) { return self->size; }

size_t shm_used (shm_t *self)
{
    pthread_mutex_lock (&self->lock);
    size_t n = self->used_bytes;
    pthread_mutex_unlock (&self->lock);
    return n;
}
