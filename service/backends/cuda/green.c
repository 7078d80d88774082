/* Green contexts for the persistent kernels (green.h). */
#include "backends/cuda/green.h"

#include "backends/cuda/device.h"
#include "base/config.h"
#include "base/log.h"

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define GROUPS_MAX 64

typedef struct {
    bool made;              /* its groups exist */
    bool none;              /* this driver or device has none (asked once) */
    char none_why[192];
    uint32_t groups, sms_each, sms_all, left;
    CUgreenCtx ctx[GROUPS_MAX];
    CUstream stream[GROUPS_MAX];
    char holder[GROUPS_MAX][CONFIG_NAME_MAX];   /* "": free */
} device_groups_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static device_groups_t s_dev[CUDA_DEVICE_MAX];

static struct {
    bool asked, have;
    char why[160];
    CUresult (*get_resource) (CUdevice, CUdevResource *, CUdevResourceType);
    CUresult (*split) (CUdevResource *, unsigned *, const CUdevResource *, CUdevResource *, unsigned, unsigned);
    CUresult (*desc) (CUdevResourceDesc *, CUdevResource *, unsigned);
    CUresult (*create) (CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned);
    CUresult (*stream_create) (CUstream *, CUgreenCtx, unsigned, int);
    CUresult (*error_string) (CUresult, const char **);
} s_drv;

/* The driver's entry points, asked at the newest version both it and these headers know (the green
 * stream's is not returned below 12.5's). Lock held. */
static bool s_entry_points (void)
{
    if (s_drv.asked)
        return s_drv.have;
    s_drv.asked = true;
    int version = 0;
    if (cudaDriverGetVersion (&version) != cudaSuccess || version < 12050) {
        snprintf (s_drv.why, sizeof s_drv.why, "the driver's CUDA version is %d.%d; green contexts need 12.5 or later",
                  version / 1000, version % 1000 / 10);
        return false;
    }
    if (version > CUDA_VERSION)
        version = CUDA_VERSION;
    struct {
        const char *name;
        void **fn;
    } want[] = { { "cuDeviceGetDevResource", (void **) &s_drv.get_resource },
                 { "cuDevSmResourceSplitByCount", (void **) &s_drv.split },
                 { "cuDevResourceGenerateDesc", (void **) &s_drv.desc },
                 { "cuGreenCtxCreate", (void **) &s_drv.create },
                 { "cuGreenCtxStreamCreate", (void **) &s_drv.stream_create },
                 { "cuGetErrorString", (void **) &s_drv.error_string } };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        enum cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion (want[i].name, want[i].fn, (unsigned) version, cudaEnableDefault, &q)
                != cudaSuccess
            || q != cudaDriverEntryPointSuccess || !*want[i].fn) {
            cudaGetLastError ();
            snprintf (s_drv.why, sizeof s_drv.why, "the driver has no %s", want[i].name);
            return false;
        }
    }
    return s_drv.have = true;
}

static const char *s_cu (CUresult r)
{
    const char *s = NULL;
    if (s_drv.error_string)
        s_drv.error_string (r, &s);
    return s ? s : "unknown driver error";
}

/* D (DEVICE's) has no green contexts, for REASON: recorded and logged the first time; WHY says so. 0. */
static int s_none (device_groups_t *d, int device, const char *reason, char *why, size_t whylen)
{
    if (!d->none) {
        d->none = true;
        snprintf (d->none_why, sizeof d->none_why, "%s", reason);
        log_warn ("device %d: no green contexts (%s): the hardware places the persistent kernels of models with "
                  "green_context there", device, d->none_why);
    }
    snprintf (why, whylen, "no green contexts on device %d: %s", device, d->none_why);
    return 0;
}

int cuda_green_make (int device, int resident, char *why, size_t whylen)
{
    if (device < 0 || device >= CUDA_DEVICE_MAX) {
        snprintf (why, whylen, "device %d: out of range", device);
        return -1;
    }
    pthread_mutex_lock (&s_lock);
    device_groups_t *d = &s_dev[device];
    int rc = 1;
    if (d->made)
        goto done;
    if (d->none || !s_entry_points ()) {
        rc = s_none (d, device, s_drv.why, why, whylen);
        goto done;
    }
    if (resident > 0) {
        snprintf (why, whylen, "the green contexts of device %d can only be made while no persistent kernel runs there "
                  "(making one waits for every resident kernel) and %d run%s now; they are made when a configuration "
                  "that asks for them starts, before its first kernel", device, resident, resident == 1 ? "s" : "");
        rc = -1;
        goto done;
    }
    CUdevResource all, group[GROUPS_MAX], rest;
    CUresult c = s_drv.get_resource ((CUdevice) device, &all, CU_DEV_RESOURCE_TYPE_SM);
    if (c != CUDA_SUCCESS) {
        char reason[160];
        snprintf (reason, sizeof reason, "cuDeviceGetDevResource: %s", s_cu (c));
        rc = s_none (d, device, reason, why, whylen);
        goto done;
    }
    /* the smallest group the driver allows that a cluster of 8 is co-scheduled in */
    unsigned size = all.sm.minSmPartitionSize > 8 ? all.sm.minSmPartitionSize : 8;
    if (all.sm.smCoscheduledAlignment > 1)
        size = (size + all.sm.smCoscheduledAlignment - 1) / all.sm.smCoscheduledAlignment * all.sm.smCoscheduledAlignment;
    unsigned n = GROUPS_MAX;
    c = s_drv.split (group, &n, &all, &rest, 0, size);
    if (c != CUDA_SUCCESS || n == 0) {
        snprintf (why, whylen, "splitting device %d's %u SMs into groups of %u: %s", device, all.sm.smCount, size,
                  c != CUDA_SUCCESS ? s_cu (c) : "no group");
        rc = -1;
        goto done;
    }
    unsigned made = 0;
    for (; made < n; made++) {
        CUdevResourceDesc desc;
        c = s_drv.desc (&desc, &group[made], 1);
        if (c == CUDA_SUCCESS)
            c = s_drv.create (&d->ctx[made], desc, (CUdevice) device, CU_GREEN_CTX_DEFAULT_STREAM);
        if (c == CUDA_SUCCESS)
            c = s_drv.stream_create (&d->stream[made], d->ctx[made], CU_STREAM_NON_BLOCKING, 0);
        if (c != CUDA_SUCCESS)
            break;
    }
    if (made == 0) {
        snprintf (why, whylen, "making a green context of %u SMs on device %d: %s", group[0].sm.smCount, device,
                  s_cu (c));
        rc = -1;
        goto done;
    }
    if (made < n)   /* what was made serves; the rest is logged */
        log_warn ("device %d: %u of %u green contexts of %u SMs made (the next: %s)", device, made, n,
                  group[0].sm.smCount, s_cu (c));
    d->made = true;
    d->groups = made;
    d->sms_each = group[0].sm.smCount;
    d->sms_all = all.sm.smCount;
    d->left = all.sm.smCount - made * d->sms_each;
    log_info ("device %d: %u green contexts of %u SMs for persistent kernels (model key green_context), %u SMs left to "
              "the rest", device, d->groups, d->sms_each, d->left);
done:
    pthread_mutex_unlock (&s_lock);
    return rc;
}

int cuda_green_take (int device, uint32_t blocks, uint32_t cluster, const char *model, cuda_green_t *out, char *why,
                     size_t whylen)
{
    pthread_mutex_lock (&s_lock);
    device_groups_t *d = &s_dev[device];
    int rc = -1;
    if (!d->made) {
        snprintf (why, whylen, "device %d has no green contexts made", device);
    } else if (blocks > d->sms_each || cluster > d->sms_each) {
        snprintf (why, whylen, "its kernel runs %u blocks in clusters of %u and a green context of device %d holds %u "
                  "SMs (one block an SM, the driver's smallest partition)", blocks, cluster, device, d->sms_each);
    } else {
        for (uint32_t g = 0; g < d->groups; g++)
            if (!d->holder[g][0]) {
                snprintf (d->holder[g], sizeof d->holder[g], "%s", model);
                *out = (cuda_green_t) { .group = (int) g, .sms = d->sms_each, .stream = (cudaStream_t) d->stream[g] };
                rc = 0;
                break;
            }
        if (rc != 0) {
            /* who holds them, by model (a model's instances hold one each) */
            size_t used = (size_t) snprintf (why, whylen, "all %u green contexts of device %d (%u SMs each) are held:",
                                             d->groups, device, d->sms_each);
            for (uint32_t g = 0; g < d->groups && used < whylen; g++) {
                bool first = true;
                uint32_t count = 0;
                for (uint32_t k = 0; k < d->groups; k++)
                    if (!strcmp (d->holder[k], d->holder[g])) {
                        first = first && k >= g;
                        count++;
                    }
                if (first)
                    used += (size_t) snprintf (why + used, whylen - used, "%s \"%s\" %u", g ? "," : "", d->holder[g],
                                               count);
            }
        }
    }
    pthread_mutex_unlock (&s_lock);
    return rc;
}

void cuda_green_give (int device, int group)
{
    if (device < 0 || device >= CUDA_DEVICE_MAX || group < 0 || group >= GROUPS_MAX)
        return;
    pthread_mutex_lock (&s_lock);
    s_dev[device].holder[group][0] = '\0';
    pthread_mutex_unlock (&s_lock);
}

uint32_t cuda_green_lent (int device, uint32_t *groups)
{
    uint32_t lent = 0;
    pthread_mutex_lock (&s_lock);
    const device_groups_t *d = &s_dev[device];
    for (uint32_t g = 0; g < d->groups; g++)
        lent += d->holder[g][0] != '\0';
    if (groups)
        *groups = d->made ? d->groups : 0;
    pthread_mutex_unlock (&s_lock);
    return lent;
}
