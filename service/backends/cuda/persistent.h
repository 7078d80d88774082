/* The host side that every persistent kernel shares (the MLP's, mlp_persistent.c; the LSTM's,
 * backend_lstm_cuda.c): a resident kernel on a stream of its own, a mailbox in mapped pinned host
 * memory that the host writes requests into and the kernel answers in, and the rules around it:
 *   - the mailbox: portable mapped pinned memory; a released one is kept for the next load instead
 *     of cudaFreeHost (which waits for every resident kernel of every device);
 *   - registration: a launched kernel counts as resident on its device (cuda_device_resident_add)
 *     until it is seen to exit, so releases elsewhere wait for it;
 *   - start: the kernel says its weights are loaded (the backend's READY test) or the launch
 *     failed, or a generous limit passes;
 *   - completion: the backend's COMPLETE test polled with the configured wait (spin, yield or 2 us
 *     sleeps), the clock read every 64 rounds, the stream asked every millisecond past the first (a
 *     context trapped by another model shows at once) and the watchdog (watchdog_ms) turning a
 *     kernel that stops answering into SIG_UNAVAILABLE;
 *   - loss: hung (the watchdog), exited, or failed (a sticky error, recorded as its device's
 *     fault), after which every request is answered SIG_UNAVAILABLE;
 *   - stop: the stop word raised and the kernel waited for, bounded; a kernel that does not leave
 *     keeps its stream, mailbox and memory to the end of the process.
 * The request path (persistent_wait) makes no CUDA call while answers come in time. */
#ifndef SIGSERVE_CUDA_PERSISTENT_H
#define SIGSERVE_CUDA_PERSISTENT_H

#include "base/config.h"
#include "base/status.h"

#include <cuda_runtime_api.h>
#include <immintrin.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct {
    /* the backend's, before persistent_open */
    char name[CONFIG_NAME_MAX];     /* the model, for messages */
    const char *kernel;             /* "persistent kernel", "LSTM kernel": for messages */
    int device;
    cuda_wait_t wait;
    uint32_t watchdog_ms;           /* 0: 1000 */
    bool shareable;                 /* its mailbox from the box source when one is set (backends/box_source.h:
                                       a device process's share of the region), registered with CUDA */
    /* persistent_open's */
    cudaStream_t stream;            /* its uploads' (and, without a green context, the kernel's), for good */
    cudaStream_t kstream;           /* the kernel's: STREAM, or its green context's (persistent_green) */
    uint32_t green_sms;             /* the SMs of the green context's group lent to it (green.h); 0: none, the
                                       hardware places the kernel */
    int green;                      /* that group, when green_sms */
    uint8_t *box;                   /* the mailbox (host address), zeroed */
    size_t box_bytes;               /* what it holds (>= what was asked) */
    void *d_box;                    /* its device address */
    uint32_t stop_offset;           /* byte offset of the kernel's uint32 stop word in the mailbox */
    bool box_shared;                /* the mailbox came from the box source (registered host memory) */
    /* state */
    bool resident;                  /* launched and not yet seen to exit */
    bool lost;                      /* every request is answered SIG_UNAVAILABLE */
    bool hung;                      /* the watchdog fired */
} persistent_t;

/* Whether DEVICE exists and runs the persistent kernels (compute capability 9.0 with cluster launch).
 * 0, or -1 with ERR: "model \"MODEL\": WHAT needs a GPU of compute capability 9.0 ... ; INSTEAD". */
int persistent_device_ok (int device, const char *model, const char *what, const char *instead, char *err,
                          size_t errlen);
/* A stream for the kernel and a zeroed mailbox of at least BOX_BYTES (a kept one, or a new one),
 * the stop word at STOP_OFFSET. cudaSuccess or the failing call's error. */
cudaError_t persistent_open (persistent_t *p, size_t box_bytes, uint32_t stop_offset);
/* Green contexts (green.h), after persistent_open, before the launch, for a kernel of BLOCKS blocks in
 * clusters of CLUSTER. ASKED (model key green_context): the kernel's stream becomes a green
 * context's, of SMs no other persistent kernel of the process runs on (a group: 8 SMs on an H100),
 * the device's green contexts made first where they were not (only while no persistent kernel is
 * resident there); where the driver has none, the hardware places the kernel, logged once a device.
 * Not ASKED: on a device already split, the kernel takes a free group all the same where it fits one
 * (a kernel the hardware placed may sit on a free group's SMs, and the green kernel later lent that
 * group would not start while it runs: measured, docs/persistent-notes.md); else, and where none is
 * free, the hardware places it. p->green_sms says which (0: the hardware). 0, or -1 with ERR naming
 * the model when ASKED and no group can be had (none free, the kernel larger than one, or the
 * contexts cannot be made now). */
int persistent_green (persistent_t *p, uint32_t blocks, uint32_t cluster, bool asked, char *err, size_t errlen);
/* The backends' prepare for a model with green_context: DEVICE's green contexts made while no
 * persistent kernel is resident. 1 made (now or before), 0 none on this driver, -1 with WHY. */
int persistent_green_prepare (int device, char *why, size_t whylen);
/* Counts the kernel as resident (from here on, releases that would wait for it are deferred), then
 * launches it: LAUNCH (ARG) on p->kstream. A failed launch is undone. Its error, or cudaSuccess. */
cudaError_t persistent_launch (persistent_t *p, int (*launch) (void *arg), void *arg);
/* Runs FN (ARG) while no persistent kernel can be launched (persistent_launch waits for it), with
 * the number of persistent kernels resident on DEVICE then: loading a module next to a resident
 * kernel waits for it forever (measured: test_cuda_resident --probe 18), so a module is loaded only when that
 * number is 0, and none can become resident meanwhile. Returns FN's result. */
int persistent_exclusive (int device, int (*fn) (int resident, void *arg), void *arg);
/* Waits until READY (ARG) says the kernel loaded its weights, the kernel ends (its error), or 20 s
 * pass. 0, or -1 with ERR. */
int persistent_started (persistent_t *p, bool (*ready) (const void *arg), const void *arg, char *err, size_t errlen);
/* Raises stop and waits for the kernel to leave, up to max(watchdog_ms, 100 ms). true when it is
 * gone (or never ran); false when it still runs: then nothing it may touch can be freed. */
bool persistent_stop (persistent_t *p);
/* After a successful persistent_stop: the stream is destroyed (what was queued on it still runs), the
 * green context's group given back and the mailbox kept for later loads. */
void persistent_close (persistent_t *p);

/* The request could not be answered: E is cudaErrorNotReady (the watchdog fired: hung),
 * cudaSuccess (the kernel exited) or the context's error. Marks P lost; SIG_UNAVAILABLE. */
sig_status_t persistent_lost (persistent_t *p, cudaError_t e, char *err, size_t errlen);
/* The answer for every request once P is lost. */
sig_status_t persistent_unavailable (const persistent_t *p, char *err, size_t errlen);
/* The slow part of persistent_wait, every 64 rounds: *START (0 at first) and *ASKED are its
 * clocks. SIG_OK to keep waiting, else the loss. */
sig_status_t persistent_check (persistent_t *p, bool (*complete) (const void *arg), const void *arg, double *start,
                               double *asked, char *err, size_t errlen);

static inline double persistent_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

/* Waits until COMPLETE (ARG): the request path. Inline, so COMPLETE, a static function of the
 * caller, is inlined into the polling loop. */
static inline sig_status_t persistent_wait (persistent_t *p, bool (*complete) (const void *arg), const void *arg,
                                            char *err, size_t errlen)
{
    double start = 0.0, asked = 0.0;
    for (uint32_t spins = 1;; spins++) {
        if (complete (arg))
            return SIG_OK;
        if ((spins & 63u) == 0u) {
            sig_status_t st = persistent_check (p, complete, arg, &start, &asked, err, errlen);
            if (st != SIG_OK)
                return st;
        }
        switch (p->wait) {
        case CUDA_WAIT_SPIN: _mm_pause (); break;
        case CUDA_WAIT_YIELD: sched_yield (); break;
        case CUDA_WAIT_BLOCK: {
            const struct timespec ts = { 0, 2000 };
            nanosleep (&ts, NULL);
            break;
        }
        }
    }
}

#endif
