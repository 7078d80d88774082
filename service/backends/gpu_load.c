/* The GPU backend, loaded when a model needs it (backends.h): built only with nvcc (backends/no_gpu.c
 * otherwise). The CUDA backend is a library of its own, libsigserve-cuda.so, beside sigserve (build/)
 * or in lib/sigserve/ of its prefix; only this file opens it, so a server of CPU models maps none of
 * cudart, cuBLAS, cuBLASLt or NVRTC (about 150 MB resident when they were linked in). Tests and tools
 * that call the CUDA backend's own functions link it in (libsigcuda.a): the weak symbol finds it. */
#include "backends/backends.h"

#include <cuda_runtime_api.h>     /* CUDART_VERSION only: this file calls no CUDA function */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define GPU_LIBRARY "libsigserve-cuda.so"

/* Defined by backends/cuda/gpu.c: present here when the backend is linked in, NULL otherwise. */
extern const gpu_backend_t sigserve_gpu_backend __attribute__ ((weak));

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static const gpu_backend_t *s_gpu;
static char s_why[768];

bool backends_gpu_built (void) { return true; }

static pthread_once_t s_version_once = PTHREAD_ONCE_INIT;
static char s_version[16];

static void s_version_text (void)
{
    snprintf (s_version, sizeof s_version, "%d.%d", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
}

const char *backends_cuda_built_version (void)
{
    pthread_once (&s_version_once, s_version_text);
    return s_version;
}

/* The folder of this binary into DIR: the library lies beside it in a build, in ../lib/sigserve once installed. */
static bool s_exe_dir (char *dir, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink ("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    char *slash = strrchr (exe, '/');
    if (!slash)
        return false;
    *slash = '\0';
    return snprintf (dir, len, "%s", exe) < (int) len;
}

static void s_load (void)
{
    if (&sigserve_gpu_backend != NULL) {
        s_gpu = &sigserve_gpu_backend;
        return;
    }
    char dir[PATH_MAX], path[PATH_MAX + 64], first[600] = "";
    const char *const places[] = { "%s/" GPU_LIBRARY, "%s/../lib/sigserve/" GPU_LIBRARY };
    for (size_t i = 0; i < sizeof places / sizeof places[0] && s_exe_dir (dir, sizeof dir); i++) {
        snprintf (path, sizeof path, places[i], dir);
        if (access (path, F_OK) != 0)
            continue;
        void *lib = dlopen (path, RTLD_NOW | RTLD_LOCAL);
        const gpu_backend_t *gpu = lib ? dlsym (lib, "sigserve_gpu_backend") : NULL;
        if (gpu) {
            s_gpu = gpu;
            return;
        }
        if (!first[0])
            snprintf (first, sizeof first, "%s", lib ? "it has no sigserve_gpu_backend" : dlerror ());
        if (lib)
            dlclose (lib);
    }
    if (first[0])
        snprintf (s_why, sizeof s_why, "the CUDA backend (" GPU_LIBRARY ") did not load: %.600s", first);
    else
        snprintf (s_why, sizeof s_why, "the CUDA backend (" GPU_LIBRARY ") is missing: it belongs beside sigserve, or in "
                  "lib/sigserve/ of the prefix sigserve is installed in");
}

const gpu_backend_t *backends_gpu (char *why, size_t whylen)
{
    char none[8];
    if (!backends_gpu_driver (why ? why : none, why ? whylen : sizeof none))
        return NULL;
    pthread_once (&s_once, s_load);
    if (!s_gpu && why)
        snprintf (why, whylen, "%s", s_why);
    return s_gpu;
}
