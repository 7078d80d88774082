/* The persistent kernels' shared host side (persistent.h). */
#define _GNU_SOURCE
#include "backends/cuda/persistent.h"

#include "backends/box_source.h"
#include "backends/cuda/device.h"
#include "backends/cuda/green.h"
#include "base/log.h"
#include "sig_common.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define START_MS 20000.0        /* a fresh launch may take this long to load its weights (the first of the
                                   process may still be loading modules; compute-sanitizer is far slower) */
#define KEPT_MAX 64

/* Released mailboxes, for later loads: cudaFreeHost (and cudaHostUnregister) would wait for every
 * resident kernel. SHARED: registered memory of the box source's. */
typedef struct {
    uint8_t *p;
    size_t bytes;
    bool shared;
} kept_box_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static kept_box_t s_kept[KEPT_MAX];
static size_t s_kept_count;
/* Held while a module is loaded or memory registered (neither may meet a resident kernel) and while
 * a launch makes a kernel resident. */
static pthread_mutex_t s_launch_lock = PTHREAD_MUTEX_INITIALIZER;

/* box_source_take's registration: mapped (the kernel polls it), portable (any context). */
static int s_register (void *arg, void *p, size_t bytes)
{
    (void) arg;
    const cudaError_t e = cudaHostRegister (p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        log_warn ("registering %zu MiB of the region shared with the server for persistent kernels' mailboxes: %s",
                  bytes >> 20, cudaGetErrorString (e));
        cudaGetLastError ();
    }
    return e == cudaSuccess ? 0 : -1;
}

/* The smallest kept mailbox of at least BYTES (from the source when SHARED), or a new one: from the
 * source's registered pool when SHARED (box_source.h; else *SHARED turns false: pinned memory of its
 * own, as without a source). */
static cudaError_t s_box_get (int device, size_t bytes, bool *shared, uint8_t **p, size_t *got)
{
    *shared = *shared && box_source_active ();
    pthread_mutex_lock (&s_lock);
    size_t best = s_kept_count;
    for (size_t i = 0; i < s_kept_count; i++)
        if (s_kept[i].bytes >= bytes && s_kept[i].shared == *shared
            && (best == s_kept_count || s_kept[i].bytes < s_kept[best].bytes))
            best = i;
    if (best < s_kept_count) {
        *p = s_kept[best].p;
        *got = s_kept[best].bytes;
        s_kept[best] = s_kept[--s_kept_count];
        pthread_mutex_unlock (&s_lock);
        return cudaSuccess;
    }
    pthread_mutex_unlock (&s_lock);
    if (*shared) {
        /* From the registered pool; a new chunk when it has no room (registering next to a resident
         * kernel does not wait for it: test_cuda_resident --probe 21). s_launch_lock: not while a launch makes
         * a kernel resident. */
        pthread_mutex_lock (&s_launch_lock);
        uint8_t *q = box_source_take (bytes, s_register, NULL, got);
        pthread_mutex_unlock (&s_launch_lock);
        if (q) {
            *p = q;
            return cudaSuccess;
        }
        log_warn ("a persistent kernel's mailbox on device %d: this device process's share of the shared region is "
                  "full or could not be registered with CUDA; using pinned memory of this process (the front hands "
                  "this model's requests to its worker)", device);
        *shared = false;
    }
    *got = bytes;
    /* portable: mapped in every context, whichever device the model is on */
    return cudaHostAlloc ((void **) p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
}

static void s_box_keep (uint8_t *p, size_t bytes, bool shared)
{
    if (!p)
        return;
    pthread_mutex_lock (&s_lock);
    if (s_kept_count < KEPT_MAX)
        s_kept[s_kept_count++] = (kept_box_t) { p, bytes, shared };
    else if (!shared)   /* cannot be freed safely while anything is resident: handed to the device level */
        cuda_device_release (-1, CUDA_RELEASE_HOST, p);
    /* else left registered (the region's memory, the process's to the end) */
    pthread_mutex_unlock (&s_lock);
}

int persistent_device_ok (int device, const char *model, const char *what, const char *instead, char *err,
                          size_t errlen)
{
    if (cuda_device_check (device, model, err, errlen) != 0)
        return -1;
    int major = 0, minor = 0;
    if (sig_clusters_supported (device, 1, &major, &minor))
        return 0;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties (&prop, device) != cudaSuccess)
        snprintf (prop.name, sizeof prop.name, "?");
    sig_set_error (err, errlen, "model \"%s\": %s needs a GPU of compute capability 9.0 (H100, H200: thread-block "
                   "clusters, built for sm_90) and device %d (%s) has %d.%d; %s", model, what, device, prop.name, major,
                   minor, instead);
    return -1;
}

cudaError_t persistent_open (persistent_t *p, size_t box_bytes, uint32_t stop_offset)
{
    if (!p->watchdog_ms)
        p->watchdog_ms = 1000u;
    p->stop_offset = stop_offset;
    cudaError_t e = cudaSetDevice (p->device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags (&p->stream, cudaStreamNonBlocking);
    p->kstream = p->stream;
    p->box_shared = p->shareable;
    if (e == cudaSuccess)
        e = s_box_get (p->device, box_bytes, &p->box_shared, &p->box, &p->box_bytes);
    if (e == cudaSuccess) {
        memset (p->box, 0, p->box_bytes);
        e = cudaHostGetDevicePointer (&p->d_box, p->box, 0);
    }
    return e;
}

/* DEVICE's green contexts made, under the launch lock (no kernel becomes resident meanwhile). */
static int s_green_make (int device, char *why, size_t whylen)
{
    pthread_mutex_lock (&s_launch_lock);
    const int rc = cuda_green_make (device, cuda_device_resident (device), why, whylen);
    pthread_mutex_unlock (&s_launch_lock);
    return rc;
}

int persistent_green_prepare (int device, char *why, size_t whylen)
{
    return s_green_make (device, why, whylen);
}

/* A group of P's device for its kernel: 0 with it lent (the kernel's stream its context's), or -1 with WHY. */
static int s_green_take (persistent_t *p, uint32_t blocks, uint32_t cluster, char *why, size_t whylen)
{
    cuda_green_t g;
    if (cuda_green_take (p->device, blocks, cluster, p->name, &g, why, whylen) != 0)
        return -1;
    p->green = g.group;
    p->green_sms = g.sms;
    p->kstream = g.stream;
    return 0;
}

int persistent_green (persistent_t *p, uint32_t blocks, uint32_t cluster, bool asked, char *err, size_t errlen)
{
    char why[512];
    uint32_t groups = 0;
    if (!asked) {   /* follows the device's split where there is one (a free group it fits), else the hardware */
        cuda_green_lent (p->device, &groups);
        if (groups)
            (void) s_green_take (p, blocks, cluster, why, sizeof why);
        return 0;
    }
    const int made = s_green_make (p->device, why, sizeof why);
    if (made == 0)      /* this driver has none (green.c logs it once): the hardware places it */
        return 0;
    if (made < 0 || s_green_take (p, blocks, cluster, why, sizeof why) != 0) {
        sig_set_error (err, errlen, "model \"%s\": green_context: %s", p->name, why);
        return -1;
    }
    return 0;
}

int persistent_exclusive (int device, int (*fn) (int resident, void *arg), void *arg)
{
    pthread_mutex_lock (&s_launch_lock);
    const int r = fn (cuda_device_resident (device), arg);
    pthread_mutex_unlock (&s_launch_lock);
    return r;
}

cudaError_t persistent_launch (persistent_t *p, int (*launch) (void *arg), void *arg)
{
    p->resident = true;
    pthread_mutex_lock (&s_launch_lock);
    cuda_device_resident_add (p->device, +1);
    pthread_mutex_unlock (&s_launch_lock);
    cudaError_t e = (cudaError_t) launch (arg);
    if (e != cudaSuccess) {
        p->resident = false;
        cuda_device_resident_add (p->device, -1);
    }
    return e;
}

/* The kernel is gone (exited, or its context lost): nothing of it runs on the device any more. */
static void s_gone (persistent_t *p)
{
    if (p->resident) {
        p->resident = false;
        cuda_device_resident_add (p->device, -1);
    }
}

int persistent_started (persistent_t *p, bool (*ready) (const void *arg), const void *arg, char *err, size_t errlen)
{
    const double start = persistent_now_ms ();
    for (;;) {
        if (ready (arg))
            return 0;
        cudaError_t e = cudaStreamQuery (p->kstream);
        if (e != cudaErrorNotReady) {   /* it ended (or never ran) without loading its weights */
            s_gone (p);
            sig_set_error (err, errlen, "model \"%s\": the %s on device %d ended before it started: %s", p->name,
                           p->kernel, p->device, e == cudaSuccess ? "it returned" : cudaGetErrorString (e));
            return -1;
        }
        if (persistent_now_ms () - start > START_MS) {
            sig_set_error (err, errlen, "model \"%s\": the %s on device %d did not start within %.0f s (SMs held by "
                           "other resident kernels?)", p->name, p->kernel, p->device, START_MS / 1e3);
            return -1;
        }
        const struct timespec ts = { 0, 50000 };
        nanosleep (&ts, NULL);
    }
}

sig_status_t persistent_lost (persistent_t *p, cudaError_t e, char *err, size_t errlen)
{
    p->lost = true;
    if (e == cudaErrorNotReady) {
        p->hung = true;
        sig_set_error (err, errlen, "model \"%s\": the %s on device %d did not answer within the watchdog (%u ms); the "
                       "model is unavailable", p->name, p->kernel, p->device, p->watchdog_ms);
    } else if (e == cudaSuccess) {
        s_gone (p);
        sig_set_error (err, errlen, "model \"%s\": the %s on device %d exited unexpectedly; the model is unavailable",
                       p->name, p->kernel, p->device);
    } else {
        bool lost = true;
        cuda_device_error (p->device, p->name, e, p->kernel, &lost, err, errlen);   /* records the device's fault */
        sig_set_error (err, errlen, "model \"%s\": CUDA %s failed on device %d: %s (%s); the model is unavailable",
                       p->name, p->kernel, p->device, cudaGetErrorString (e), cudaGetErrorName (e));
    }
    return SIG_UNAVAILABLE;
}

sig_status_t persistent_unavailable (const persistent_t *p, char *err, size_t errlen)
{
    if (p->hung)
        sig_set_error (err, errlen, "model \"%s\": its %s on device %d stopped answering (watchdog %u ms); the model is "
                       "unavailable", p->name, p->kernel, p->device, p->watchdog_ms);
    else
        sig_set_error (err, errlen, "model \"%s\": its %s on device %d is gone (its CUDA context was lost, or it "
                       "exited); the model is unavailable", p->name, p->kernel, p->device);
    return SIG_UNAVAILABLE;
}

sig_status_t persistent_check (persistent_t *p, bool (*complete) (const void *arg), const void *arg, double *start,
                               double *asked, char *err, size_t errlen)
{
    const double now = persistent_now_ms ();
    if (*start == 0.0) {    /* the first reading starts the watchdog, a few microseconds after publishing */
        *start = *asked = now;
        return SIG_OK;
    }
    if (now - *start >= (double) p->watchdog_ms) {
        if (complete (arg))
            return SIG_OK;
        cudaSetDevice (p->device);
        cudaError_t e = cudaStreamQuery (p->kstream);
        return persistent_lost (p, e == cudaSuccess || e == cudaErrorNotReady ? cudaErrorNotReady : e, err, errlen);
    }
    if (now - *asked >= 1.0) {
        *asked = now;
        cudaSetDevice (p->device);
        cudaError_t e = cudaStreamQuery (p->kstream);
        if (e != cudaErrorNotReady && !complete (arg))
            return persistent_lost (p, e, err, errlen);
    }
    return SIG_OK;
}

bool persistent_stop (persistent_t *p)
{
    if (!p->resident)
        return true;
    cudaSetDevice (p->device);
    __atomic_store_n ((uint32_t *) (p->box + p->stop_offset), 1u, __ATOMIC_RELEASE);
    const double start = persistent_now_ms ();
    const double limit = p->watchdog_ms > 100u ? (double) p->watchdog_ms : 100.0;
    for (;;) {
        if (cudaStreamQuery (p->kstream) != cudaErrorNotReady) {
            s_gone (p);
            return true;
        }
        if (persistent_now_ms () - start > limit)
            break;
        const struct timespec ts = { 0, 100000 };
        nanosleep (&ts, NULL);
    }
    log_warn ("model \"%s\": the %s on device %d did not stop within %.0f ms of being asked to; its stream, mailbox and "
              "memory are left to the end of the process", p->name, p->kernel, p->device, limit);
    return false;
}

void persistent_close (persistent_t *p)
{
    if (p->stream)
        cudaStreamDestroy (p->stream);   /* returns at once; what was queued on it still runs */
    p->stream = p->kstream = NULL;
    if (p->green_sms)   /* its kernel has left (a green stream is kept with its context, for the next) */
        cuda_green_give (p->device, p->green);
    p->green_sms = 0;
    s_box_keep (p->box, p->box_bytes, p->box_shared);
    p->box = NULL;
    p->d_box = NULL;
}
