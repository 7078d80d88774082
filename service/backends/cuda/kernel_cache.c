/* The specialised kernels' cubins and modules (kernel_cache.h). */
#define _GNU_SOURCE
#include "backends/cuda/kernel_cache.h"

#include "backends/cuda/persistent.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KERNEL_CACHE_OPTIONS "std=c++17 default-device v1"   /* sig_spec_compile's; bump with them */

typedef struct entry {
    struct entry *next;
    uint64_t key;
    int device;                 /* -1: a cubin; else a module loaded on this device */
    void *cubin;
    size_t bytes;
    sig_spec_module_t *module;
} entry_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t *s_entries;
static char s_warned_dir[4096];   /* the last directory warned about (once each) */

static uint64_t s_fnv (uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

uint64_t kernel_cache_key (const char *src, int arch)
{
    int major = 0, minor = 0;
    sig_spec_nvrtc_version (&major, &minor);
    char tail[128];
    const int n = snprintf (tail, sizeof tail, "|sm_%d|nvrtc %d.%d|%s", arch, major, minor, KERNEL_CACHE_OPTIONS);
    uint64_t h = s_fnv (0xcbf29ce484222325ull, src, strlen (src));
    return s_fnv (h, tail, (size_t) n);
}

static entry_t *s_find (uint64_t key, int device)
{
    for (entry_t *e = s_entries; e; e = e->next)
        if (e->key == key && e->device == device)
            return e;
    return NULL;
}

static void s_warn_dir (const char *dir, const char *what, int err)
{
    if (strcmp (s_warned_dir, dir) == 0)
        return;
    snprintf (s_warned_dir, sizeof s_warned_dir, "%s", dir);
    log_warn ("server.kernel_cache_dir \"%s\": %s (%s): specialised kernels are kept in memory only", dir, what,
              strerror (err));
}

/* sigserve-<kind>-<key>.cubin: kind "lstm" for the LSTM kernel's source (lstm_persistent_spec.cu), else "mlp" */
static void s_path (char *path, size_t len, const char *dir, uint64_t key, const char *src)
{
    const char *kind = strstr (src, "\n#define L_SPEC 1\n") ? "lstm" : "mlp";
    snprintf (path, len, "%s/sigserve-%s-%016llx.cubin", dir, kind, (unsigned long long) key);
}

/* The cubin stored under DIR for KEY, or NULL (none, or unreadable: then compiled again). */
static void *s_read (const char *dir, uint64_t key, const char *src, size_t *bytes)
{
    char path[4200];
    s_path (path, sizeof path, dir, key, src);
    FILE *f = fopen (path, "rb");
    if (!f)
        return NULL;
    void *p = NULL;
    struct stat st;
    if (fstat (fileno (f), &st) == 0 && st.st_size > 4 && st.st_size < (64 << 20)) {
        p = malloc ((size_t) st.st_size);
        if (p && fread (p, 1, (size_t) st.st_size, f) != (size_t) st.st_size) {
            free (p);
            p = NULL;
        }
        if (p && memcmp (p, "\177ELF", 4) != 0) {   /* not a cubin: ignored, written again */
            free (p);
            p = NULL;
        }
        *bytes = (size_t) st.st_size;
    }
    fclose (f);
    return p;
}

/* Stores CUBIN under DIR (a file written aside, then renamed: readers never see half of one). */
static void s_write (const char *dir, uint64_t key, const char *src, const void *cubin, size_t bytes)
{
    if (mkdir (dir, 0755) != 0 && errno != EEXIST) {
        s_warn_dir (dir, "cannot create it", errno);
        return;
    }
    char path[4200], tmp[4300];
    s_path (path, sizeof path, dir, key, src);
    snprintf (tmp, sizeof tmp, "%s.%ld.tmp", path, (long) getpid ());
    const int fd = open (tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        s_warn_dir (dir, "cannot write there", errno);
        return;
    }
    const ssize_t w = write (fd, cubin, bytes);
    const int werr = errno;
    if (close (fd) != 0 || w != (ssize_t) bytes || rename (tmp, path) != 0) {
        s_warn_dir (dir, "cannot write there", w < 0 ? werr : errno ? errno : ENOSPC);
        unlink (tmp);
    }
}

/* Under the lock. */
static entry_t *s_cubin (const char *dir, int arch, const char *src, uint64_t key, const char **how, char *err,
                         size_t errlen)
{
    entry_t *e = s_find (key, -1);
    if (e) {
        *how = "memory";
        return e;
    }
    e = calloc (1, sizeof *e);
    if (!e) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    e->key = key;
    e->device = -1;
    if (dir && dir[0] && (e->cubin = s_read (dir, key, src, &e->bytes)) != NULL) {
        *how = "disk";
    } else {
        if (sig_spec_compile (src, arch, &e->cubin, &e->bytes, err, errlen) != 0) {
            free (e);
            return NULL;
        }
        *how = "compiled";
        if (dir && dir[0])
            s_write (dir, key, src, e->cubin, e->bytes);
    }
    e->next = s_entries;
    s_entries = e;
    return e;
}

int kernel_cache_cubin (const char *dir, int arch, const char *src, const void **cubin, size_t *bytes,
                        const char **how, char *err, size_t errlen)
{
    const uint64_t key = kernel_cache_key (src, arch);
    pthread_mutex_lock (&s_lock);
    const entry_t *e = s_cubin (dir, arch, src, key, how, err, errlen);
    if (e) {
        *cubin = e->cubin;
        *bytes = e->bytes;
    }
    pthread_mutex_unlock (&s_lock);
    return e ? 0 : -1;
}

const sig_spec_module_t *kernel_cache_module (const char *dir, int device, int arch, const char *src, const char *fn,
                                              uint32_t smem_bytes, bool may_load, const char **how, char *err,
                                              size_t errlen)
{
    const uint64_t key = kernel_cache_key (src, arch);
    pthread_mutex_lock (&s_lock);
    entry_t *m = s_find (key, device);
    if (m) {
        *how = "loaded";
    } else if (!may_load) {
        snprintf (err, errlen, "a persistent kernel is resident on device %d and loading a module next to one waits "
                  "for it forever (docs/persistent-notes.md); a kernel specialised for these shapes was not loaded "
                  "before it started", device);
    } else {
        const entry_t *c = s_cubin (dir, arch, src, key, how, err, errlen);
        m = c ? calloc (1, sizeof *m) : NULL;
        if (c && !m)
            snprintf (err, errlen, "out of memory");
        if (m && sig_spec_load_fn (c->cubin, fn, smem_bytes, &m->module, err, errlen) != 0) {
            free (m);
            m = NULL;
        }
        if (m) {
            m->key = key;
            m->device = device;
            m->next = s_entries;
            s_entries = m;
        }
    }
    pthread_mutex_unlock (&s_lock);
    return m ? m->module : NULL;
}

typedef struct {
    const char *dir;
    int device, arch;
    const char *src, *fn;
    uint32_t smem_bytes;
    const char **how;
    char *why;
    size_t whylen;
    const sig_spec_module_t *module;
} module_args_t;

/* Under persistent_exclusive: the module, loaded only while no persistent kernel is resident. */
static int s_module (int resident, void *arg)
{
    module_args_t *a = arg;
    const char *how = *a->how;
    a->module = kernel_cache_module (a->dir, a->device, a->arch, a->src, a->fn, a->smem_bytes, resident == 0, a->how,
                                     a->why, a->whylen);
    if (a->module && strcmp (*a->how, "loaded") != 0)
        *a->how = how;   /* where its cubin came from */
    return a->module ? 0 : -1;
}

const sig_spec_module_t *kernel_cache_specialised (const char *dir, int device, char *src, const char *fn,
                                                   uint32_t smem_bytes, const char *model, const char *what, char *why,
                                                   size_t whylen)
{
    if (!src) {
        snprintf (why, whylen, "no source (out of memory)");
        return NULL;
    }
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute (&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess
        || cudaDeviceGetAttribute (&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        snprintf (why, whylen, "device %d: compute capability unknown", device);
        free (src);
        return NULL;
    }
    const char *how = "";
    const double t0 = persistent_now_ms ();
    const void *cubin = NULL;   /* compiled (or found) first, outside the launch lock */
    size_t bytes = 0;
    module_args_t a = { dir, device, major * 10 + minor, src, fn, smem_bytes, &how, why, whylen, NULL };
    if (kernel_cache_cubin (dir, a.arch, src, &cubin, &bytes, &how, why, whylen) == 0)
        persistent_exclusive (device, s_module, &a);
    if (a.module)
        log_info ("model \"%s\": %s (NVRTC, %s, %.0f ms)", model, what, how, persistent_now_ms () - t0);
    free (src);
    return a.module;
}
