/* The CUDA backend's kernel "persistent" (backend_cuda.c has the rest of the backend): one
 * resident cluster launched at load (kernels/mlp_persistent.cu) serves each request through a slot
 * of a mailbox in mapped pinned memory: features in, the request word published with a release
 * store, a spin (or yield, or short sleeps) on the slot's completion with acquire loads, outputs
 * out. No CUDA call on that path. A host watchdog turns a kernel that stops answering into
 * SIG_UNAVAILABLE. Also the ping-pong floor (sigbench) on the same request path. */
#define _GNU_SOURCE
#include "backends/cuda/backend_cuda_impl.h"

#include "base/log.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- persistent: the request path ---- */

static double s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static uint8_t *s_slot (backend_model_t *m, uint64_t n)
{
    return m->box + m->layout.slots + (size_t) (n % m->layout.ring) * m->layout.slot_bytes;
}

/* Whether request N's outputs are complete (acquire loads: what the kernel wrote before is
 * visible once this says yes). */
static bool s_answered (const backend_model_t *m, const uint8_t *slot, uint32_t seq, uint32_t words)
{
    if (m->done_mode == SIG_DONE_SEQUENCE)
        return __atomic_load_n ((const uint32_t *) (slot + m->layout.done), __ATOMIC_ACQUIRE) == seq;
    const uint32_t *y = (const uint32_t *) (slot + m->layout.outputs);
    for (uint32_t i = 0; i < words; i++)
        if (__atomic_load_n (&y[i], __ATOMIC_ACQUIRE) == SIG_PERSISTENT_SENTINEL)
            return false;
    return true;
}

/* A request that got no answer: the watchdog fired, or the kernel is gone (a sticky error in the
 * context, or it exited). The model is unavailable from now on. */
static sig_status_t s_persistent_lost (backend_model_t *m, cudaError_t e, char *err, size_t errlen)
{
    m->lost = true;
    if (e == cudaErrorNotReady) {
        m->hung = true;
        sig_set_error (err, errlen, "model \"%s\": the persistent kernel on device %d did not answer within the "
                       "watchdog (%u ms); the model is unavailable", m->name, m->device, m->watchdog_ms);
    } else if (e == cudaSuccess) {
        m->resident = false;   /* it exited: nothing of this model runs on the device any more */
        cuda_resident_add (m->device, -1);
        sig_set_error (err, errlen, "model \"%s\": the persistent kernel on device %d exited unexpectedly; the "
                       "model is unavailable", m->name, m->device);
    } else {
        sig_set_error (err, errlen, "model \"%s\": CUDA persistent kernel failed on device %d: %s (%s); the model "
                       "is unavailable", m->name, m->device, cudaGetErrorString (e), cudaGetErrorName (e));
    }
    return SIG_UNAVAILABLE;
}

/* Waits for request SEQ in SLOT: spin (pause), yield, or short sleeps, with the watchdog. The
 * clock is read every 64 rounds only, the first reading starting the watchdog (a few microseconds
 * after the request was published); past 1 ms the stream is asked about every millisecond, so a
 * context trapped by another model is reported long before the watchdog. */
static sig_status_t s_persistent_wait (backend_model_t *m, const uint8_t *slot, uint32_t seq, uint32_t words,
                                       char *err, size_t errlen)
{
    double start = 0.0, asked = 0.0;
    for (uint32_t spins = 1;; spins++) {
        if (s_answered (m, slot, seq, words))
            return SIG_OK;
        if ((spins & 63u) == 0u) {
            const double now = s_now_ms ();
            if (start == 0.0)
                start = asked = now;
            else if (now - start >= (double) m->watchdog_ms) {
                if (s_answered (m, slot, seq, words))
                    return SIG_OK;
                cudaSetDevice (m->device);
                cudaError_t e = cudaStreamQuery (m->stream);
                return s_persistent_lost (m, e == cudaSuccess || e == cudaErrorNotReady ? cudaErrorNotReady : e, err,
                                          errlen);
            } else if (now - asked >= 1.0) {
                asked = now;
                cudaSetDevice (m->device);
                cudaError_t e = cudaStreamQuery (m->stream);
                if (e != cudaErrorNotReady && !s_answered (m, slot, seq, words))
                    return s_persistent_lost (m, e, err, errlen);
            }
        }
        switch (m->wait) {
        case CUDA_WAIT_SPIN: __builtin_ia32_pause (); break;
        case CUDA_WAIT_YIELD: sched_yield (); break;
        case CUDA_WAIT_BLOCK: {
            const struct timespec ts = { 0, 2000 };
            nanosleep (&ts, NULL);
            break;
        }
        }
    }
}

sig_status_t cuda_persistent_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err,
                                   size_t errlen)
{
    const uint64_t n = m->next;
    const uint32_t seq = (uint32_t) (n + 1u);
    uint8_t *slot = s_slot (m, n);
    float *x = (float *) (slot + m->layout.features);
    if (m->layout.row_floats == m->input_size)
        memcpy (x, in, (size_t) rows * m->input_size * sizeof (float));
    else
        for (uint32_t r = 0; r < rows; r++)   /* the padding of each row stays zero */
            memcpy (x + (size_t) r * m->layout.row_floats, in + (size_t) r * m->input_size, m->input_size * sizeof (float));
    const uint32_t words = rows * m->output_size;
    float *y = (float *) (slot + m->layout.outputs);
    if (m->done_mode == SIG_DONE_OUTPUTS)
        for (uint32_t i = 0; i < words; i++)
            ((uint32_t *) y)[i] = SIG_PERSISTENT_SENTINEL;
    /* features (and sentinels) first, then the request word: a release store */
    __atomic_store_n ((uint64_t *) (slot + m->layout.request), ((uint64_t) rows << 32) | seq, __ATOMIC_RELEASE);
    m->next = n + 1u;
    sig_status_t st = s_persistent_wait (m, slot, seq, words, err, errlen);
    if (st == SIG_OK)
        memcpy (out, y, (size_t) words * sizeof (float));
    return st;
}

/* Persistent: raises stop and waits (bounded by the watchdog) for the kernel to leave. true when it
 * is gone (exited or its context is lost); false when it still runs, and then nothing it may touch
 * can be freed. */
bool cuda_persistent_stop (backend_model_t *m)
{
    if (!m->resident)
        return true;
    __atomic_store_n ((uint32_t *) (m->box + m->layout.ctrl), 1u, __ATOMIC_RELEASE);
    const double start = s_now_ms ();
    const uint32_t limit = m->watchdog_ms > 10u ? m->watchdog_ms : 10u;
    for (;;) {
        cudaError_t e = cudaStreamQuery (m->stream);
        if (e != cudaErrorNotReady) {
            m->resident = false;
            cuda_resident_add (m->device, -1);
            return true;
        }
        if (s_now_ms () - start > (double) limit)
            break;
        const struct timespec ts = { 0, 100000 };
        nanosleep (&ts, NULL);
    }
    log_warn ("model \"%s\": the persistent kernel on device %d did not stop within %u ms of being asked to; its "
              "stream, mailbox and weights are left to the end of the process", m->name, m->device, limit);
    return false;
}

/* ---- persistent: load ---- */

/* How long a fresh launch may take to report its weights loaded (the first launch of the process
 * may still be loading modules; compute-sanitizer slows it down by far more). */
#define PERSISTENT_START_MS 20000.0
#define PERSISTENT_WARMUP 256

/* A model struct for a persistent kernel: its stream, side stream and mapped mailbox. */
static backend_model_t *s_persistent_new (const char *name, int device, uint32_t in, uint32_t out, uint32_t rows,
                                          uint32_t ring, cuda_wait_t wait, uint32_t watchdog_ms, char *err, size_t errlen)
{
    backend_model_t *m = calloc (1, sizeof *m);
    if (!m) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", name);
        return NULL;
    }
    snprintf (m->name, sizeof m->name, "%s", name);
    m->device = device;
    m->kernel = CUDA_KERNEL_PERSISTENT;
    m->persistent = true;
    m->zero_copy = true;
    m->wait = wait;
    m->max_rows = rows;
    m->input_size = in;
    m->output_size = out;
    m->watchdog_ms = watchdog_ms ? watchdog_ms : 1000u;
    cudaError_t e = cudaSetDevice (device);
    if (e == cudaSuccess)
        e = (cudaError_t) sig_persistent_layout (in, out, rows, ring, &m->layout);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags (&m->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags (&m->side, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaHostAlloc ((void **) &m->box, m->layout.total, cudaHostAllocMapped);
    if (e == cudaSuccess)
        e = cudaHostGetDevicePointer (&m->d_box, m->box, 0);
    if (e != cudaSuccess) {
        cuda_fail (m, e, "allocation", err, errlen);
        cuda_destroy (&m);
        return NULL;
    }
    memset (m->box, 0, m->layout.total);
    return m;
}

/* After the launch: waits for status.ready (or a launch failure), then counts as resident. */
static int s_persistent_started (backend_model_t *m, char *err, size_t errlen)
{
    const double start = s_now_ms ();
    for (;;) {
        if (__atomic_load_n ((const uint32_t *) (m->box + m->layout.status), __ATOMIC_ACQUIRE) != 0u)
            return 0;
        cudaError_t e = cudaStreamQuery (m->stream);
        if (e != cudaErrorNotReady) {   /* it ended (or never ran) without loading its weights */
            m->resident = false;
            cuda_resident_add (m->device, -1);
            cuda_fail (m, e == cudaSuccess ? cudaErrorLaunchFailure : e, "persistent kernel start", err, errlen);
            return -1;
        }
        if (s_now_ms () - start > PERSISTENT_START_MS) {
            sig_set_error (err, errlen, "model \"%s\": the persistent kernel on device %d did not start within %.0f s "
                           "(no room for its cluster next to the kernels already resident?)", m->name, m->device,
                           PERSISTENT_START_MS / 1e3);
            return -1;
        }
        const struct timespec ts = { 0, 50000 };
        nanosleep (&ts, NULL);
    }
}

/* The float64 forward pass of W on one row (the warm-up's check). */
static void s_forward_f64 (const weights_t *w, const float *x, double *y, double *a, double *b)
{
    for (uint32_t i = 0; i < w->input_size; i++)
        a[i] = x[i];
    for (size_t l = 0; l < w->layer_count; l++) {
        const dense_layer_t *L = &w->layers[l];
        for (uint32_t o = 0; o < L->out; o++) {
            double acc = L->bias[o];
            for (uint32_t i = 0; i < L->in; i++)
                acc += (double) L->weight[(size_t) o * L->in + i] * a[i];
            switch (L->activation) {
            case ACTIVATION_RELU: acc = acc > 0 ? acc : 0; break;
            case ACTIVATION_SIGMOID: acc = 1.0 / (1.0 + exp (-acc)); break;
            case ACTIVATION_TANH: acc = tanh (acc); break;
            default: break;
            }
            b[o] = acc;
        }
        double *t = a;
        a = b;
        b = t;
    }
    memcpy (y, a, w->output_size * sizeof (double));
}

/* A few hundred requests through the kernel, rows 1 and max_rows in turn, two in every 16 checked
 * against the float64 forward pass: ||y - ref|| / ||ref|| pooled over them (as the tests judge)
 * must stay within 1e-5. 0, or -1 with ERR. */
static int s_persistent_warm (backend_model_t *m, const weights_t *w, char *err, size_t errlen)
{
    const size_t nin = (size_t) m->max_rows * w->input_size, nout = (size_t) m->max_rows * w->output_size;
    float *x = malloc (nin * sizeof (float)), *y = malloc (nout * sizeof (float));
    double *ref = malloc (w->output_size * sizeof (double)), *a = malloc (w->widest * sizeof (double)),
           *b = malloc (w->widest * sizeof (double));
    int rc = x && y && ref && a && b ? 0 : -1;
    if (rc)
        sig_set_error (err, errlen, "model \"%s\": out of memory", m->name);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    double num = 0, den = 0;   /* pooled over every checked output: a lone output near zero would
                                  turn rounding into a large relative error */
    for (int i = 0; rc == 0 && i < PERSISTENT_WARMUP; i++) {
        const uint32_t rows = i % 2 ? m->max_rows : 1u;
        for (size_t k = 0; k < (size_t) rows * w->input_size; k++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            x[k] = (float) ((double) (state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
        if (cuda_infer (m, x, rows, y, err, errlen) != SIG_OK) {
            rc = -1;
            break;
        }
        if (i % 16 != 0 && i % 16 != 1)
            continue;
        for (uint32_t r = 0; r < rows; r++) {
            s_forward_f64 (w, x + (size_t) r * w->input_size, ref, a, b);
            for (uint32_t o = 0; o < w->output_size; o++) {
                const double d = (double) y[(size_t) r * w->output_size + o] - ref[o];
                num += isfinite (d) ? d * d : INFINITY;
                den += ref[o] * ref[o];
            }
        }
    }
    const double rel = sqrt (num) / fmax (sqrt (den), 1e-30);
    if (rc == 0 && !(rel <= 1e-5)) {
        sig_set_error (err, errlen, "model \"%s\": the persistent kernel's warm-up answers differ from the reference "
                       "(relative error %.3g over the checked requests)", m->name, rel);
        rc = -1;
    }
    free (x);
    free (y);
    free (ref);
    free (a);
    free (b);
    return rc;
}

backend_model_t *cuda_persistent_load (const weights_t *w, const model_config_t *cfg, int device, char *err,
                                       size_t errlen)
{
    int major = 0, minor = 0;
    if (!sig_persistent_supported (device, &major, &minor)) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties (&prop, device) != cudaSuccess)
            snprintf (prop.name, sizeof prop.name, "?");
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\" needs a GPU of compute capability 9.0 "
                       "(thread-block clusters; built for sm_90) and device %d (%s) has %d.%d; use kernel \"fused\" "
                       "or \"warp\"", cfg->name, device, prop.name, major, minor);
        return NULL;
    }
    if (w->layer_count > SIG_FUSED_MAX_LAYERS) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\" takes at most %d layers, the model has %zu",
                       cfg->name, SIG_FUSED_MAX_LAYERS, w->layer_count);
        return NULL;
    }
    sig_fused_net_t net;
    memset (&net, 0, sizeof net);
    net.layer_count = (uint32_t) w->layer_count;
    net.widest = w->widest;
    for (size_t i = 0; i < w->layer_count; i++)
        net.layers[i] = (sig_fused_layer_t) { .w = w->layers[i].weight, .b = w->layers[i].bias, .in = w->layers[i].in,
                                              .out = w->layers[i].out, .act = (int) w->layers[i].activation };
    sig_persistent_tuning_t tuning;
    cuda_persistent_tuning_get (&tuning);
    sig_persistent_plan_t plan;
    cudaError_t e = cudaSetDevice (device);
    if (e == cudaSuccess)
        e = (cudaError_t) sig_persistent_plan (&net, backend_rows (cfg), device, &tuning, &plan);
    if (e == cudaErrorMemoryAllocation) {
        const uint64_t need = plan.need_bytes, have = plan.cluster_bytes;
        const uint64_t regs = have - (uint64_t) plan.max_cluster * plan.smem_limit;
        char extra[160] = "";
        if (regs)
            snprintf (extra, sizeof extra, " + %llu KiB of registers", (unsigned long long) (regs >> 10));
        if (need <= have)   /* enough in total, but the leader's share does not fit one block */
            snprintf (extra + strlen (extra), sizeof extra - strlen (extra), "; block 0 alone would need %llu KiB",
                      (unsigned long long) ((plan.smem_bytes == UINT32_MAX ? need : plan.smem_bytes) >> 10));
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\": the weights need %llu KiB on chip, the "
                       "cluster holds %llu KiB (%u blocks x %u KiB%s); use kernel \"fused\" or \"warp\"", cfg->name,
                       (unsigned long long) (need >> 10), (unsigned long long) (have >> 10), plan.max_cluster,
                       plan.smem_limit >> 10, extra);
        return NULL;
    }
    if (e != cudaSuccess) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\": planning on device %d failed: %s", cfg->name,
                       device, cudaGetErrorString (e));
        return NULL;
    }
    backend_model_t *m = s_persistent_new (cfg->name, device, w->input_size, w->output_size, backend_rows (cfg),
                                           plan.ring, cfg->wait, cfg->watchdog_ms, err, errlen);
    if (!m)
        return NULL;
    m->plan = plan;
    m->done_mode = plan.done_mode;
    m->widest = w->widest;
    void *image = malloc (plan.image_bytes);
    e = image ? (cudaError_t) sig_persistent_pack (&net, &plan, &m->layout, image) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = cuda_dev_alloc (m, &m->d_image, plan.image_bytes);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync (m->d_image, image, plan.image_bytes, cudaMemcpyHostToDevice, m->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize (m->stream);
    free (image);
    if (e == cudaSuccess) {
        cuda_resident_add (device, +1);   /* from here on, releases elsewhere wait for it */
        m->resident = true;
        e = (cudaError_t) sig_persistent_launch (m->d_image, m->d_box, &plan, m->stream);
        if (e != cudaSuccess) {
            m->resident = false;
            cuda_resident_add (device, -1);
        }
    }
    if (e != cudaSuccess) {
        cuda_fail (m, e, "persistent kernel launch", err, errlen);
        cuda_destroy (&m);
        return NULL;
    }
    if (s_persistent_started (m, err, errlen) != 0 || s_persistent_warm (m, w, err, errlen) != 0) {
        cuda_destroy (&m);
        return NULL;
    }
    return m;
}

backend_model_t *cuda_pingpong_load (int device, uint32_t in, uint32_t flags, uint32_t done_mode, cuda_wait_t wait,
                                     char *err, size_t errlen)
{
    int count = 0;
    char why[256];
    if (cuda_device_count (&count, why, sizeof why) != 0 || device >= count) {
        sig_set_error (err, errlen, "ping-pong: device %d: %s", device, count ? "no such CUDA device" : why);
        return NULL;
    }
    if (in < 1 || in > 8192) {
        sig_set_error (err, errlen, "ping-pong: %u features: expected 1 to 8192", in);
        return NULL;
    }
    backend_model_t *m = s_persistent_new ("pingpong", device, in, 1u, 1u, 0u, wait, 1000u, err, errlen);
    if (!m)
        return NULL;
    m->pingpong = true;
    m->done_mode = done_mode;
    cuda_resident_add (device, +1);
    m->resident = true;
    cudaError_t e = (cudaError_t) sig_pingpong_launch (m->d_box, &m->layout, in, flags, done_mode, m->stream);
    if (e != cudaSuccess) {
        m->resident = false;
        cuda_resident_add (device, -1);
        cuda_fail (m, e, "ping-pong kernel launch", err, errlen);
        cuda_destroy (&m);
        return NULL;
    }
    if (s_persistent_started (m, err, errlen) != 0) {
        cuda_destroy (&m);
        return NULL;
    }
    float x[8192], y;
    for (uint32_t k = 0; k < in && k < 8192; k++)
        x[k] = (float) (k % 7) - 3.0f;
    for (int i = 0; i < PERSISTENT_WARMUP; i++)
        if (cuda_infer (m, x, 1, &y, err, errlen) != SIG_OK) {
            cuda_destroy (&m);
            return NULL;
        }
    return m;
}
