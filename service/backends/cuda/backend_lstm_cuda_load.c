/* The CUDA LSTM backend's load side (backend_lstm_cuda.c says what an instance is): the load with its
 * plan, image and warm-up, the specialised kernel or the generic one, green contexts, a warm spare's
 * park and unpark, destroy, the tests' tuning knobs, and the backend's table. */
#define _GNU_SOURCE
#include "backends/cuda/backend_lstm_cuda_impl.h"

#include "backends/cuda/device.h"
#include "backends/cuda/lstm_spec.h"
#include "backends/cuda/persistent.h"
#include "base/log.h"
#include "sig_common.h"
#include "sig_lstm.h"
#include "sig_spec.h"
#include "weights/lstm.h"
#include "weights/reference.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tests and benchmarks: the knobs of every later load ---- */

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static sig_lstm_tuning_t s_tuning;

void lstm_cuda_tuning (const sig_lstm_tuning_t *tuning)
{
    pthread_mutex_lock (&s_lock);
    if (tuning)
        s_tuning = *tuning;
    else
        memset (&s_tuning, 0, sizeof s_tuning);
    pthread_mutex_unlock (&s_lock);
}

/* ---- load and destroy ---- */

static void s_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    cudaSetDevice (m->host.device);
    /* apart: both stop words up before waiting for either (under compute-sanitizer memcheck the wait
     * for the first kernel did not end while the other ran: GPU calls 1 and 2, docs/lstm-notes.md) */
    if (m->adv.resident)
        __atomic_store_n ((uint32_t *) (m->adv.box + m->adv.stop_offset), 1u, __ATOMIC_RELEASE);
    const bool served = persistent_stop (&m->host), advanced = persistent_stop (&m->adv);
    if (served && advanced) {   /* else a kernel may still read them: left to the end of the process */
        cuda_device_free (m->host.stream, m->d_image);
        cuda_device_free (m->host.stream, m->d_state);
        cuda_device_free (m->host.stream, m->d_xchg);
        persistent_close (&m->host);
        if (m->adv.box)
            persistent_close (&m->adv);
    }
    free (m->slots);
    free (m);
    *m_p = NULL;
}

/* Warm-up: a full window checked against float64 (a kernel that computes garbage refuses to load),
 * a ping, a stream on slot 0 (reset, steps, advances), every command kind once. */
static int s_warm (backend_model_t *m, const lstm_weights_t *w, weight_dtype_t dtype, char *err, size_t errlen)
{
    const size_t nwin = (size_t) m->W * m->in;
    float *x = malloc (nwin * sizeof (float)), *y = malloc (m->out * sizeof (float));
    double *ref = malloc (m->out * sizeof (double));
    int rc = x && y && ref ? 0 : -1;
    if (rc)
        sig_set_error (err, errlen, "model \"%s\": out of memory", m->host.name);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t k = 0; rc == 0 && k < nwin; k++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        x[k] = (float) ((double) (state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    if (rc == 0 && lstm_cuda_infer (m, x, 1, y, err, errlen) != SIG_OK)
        rc = -1;
    if (rc == 0 && lstm_reference_window (w, x, 1, ref) != 0) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", m->host.name);
        rc = -1;
    }
    if (rc == 0) {
        double num = 0, den = 0;
        reference_error_sums (y, ref, m->out, &num, &den);
        const double rel = sqrt (num) / fmax (sqrt (den), 1e-3);
        const double tol = dtype == WEIGHT_DTYPE_F32 ? 1e-4 : dtype == WEIGHT_DTYPE_F16 ? 2e-2 : 1e-1;
        if (!(rel <= tol)) {
            sig_set_error (err, errlen, "model \"%s\": the LSTM kernel's warm-up window differs from the float64 "
                           "reference (relative error %.3g, allowed %.0e for %s weights)", m->host.name, rel, tol,
                           weight_dtype_name (dtype));
            rc = -1;
        }
    }
    float p = 0.0f;
    if (rc == 0 && lstm_cuda_ping (m, x, &p, err, errlen) != SIG_OK)
        rc = -1;
    if (rc == 0 && m->slot_count > 0) {
        for (int i = 0; rc == 0 && i < 8; i++) {
            if (lstm_cuda_step (m, 0, x + (size_t) (i % m->W) * m->in, y, err, errlen) != SIG_OK)
                rc = -1;
            lstm_cuda_advance (m, 0);
        }
        if (rc == 0 && lstm_cuda_sync (m, err, errlen) != SIG_OK)
            rc = -1;
        m->slots[0] = (slot_t) { .ver = m->slots[0].ver };   /* its first user resets it (the versions go on) */
    }
    free (x);
    free (y);
    free (ref);
    return rc;
}

/* Every block of the launch whose mailbox is at BOX loaded its weights. */
static bool s_ready_in (const backend_model_t *m, const uint8_t *box)
{
    const uint32_t *ready = (const uint32_t *) (box + m->lay.ready);
    for (uint32_t b = 0; b < m->plan.blocks; b++)
        if (__atomic_load_n (&ready[b], __ATOMIC_ACQUIRE) == 0u)
            return false;
    return true;
}
static bool s_ready (const void *arg) { return s_ready_in (arg, ((const backend_model_t *) arg)->host.box); }
static bool s_ready_adv (const void *arg) { return s_ready_in (arg, ((const backend_model_t *) arg)->adv.box); }

static int s_launch (void *arg)
{
    backend_model_t *m = arg;
    if (m->spec)
        return sig_lstm_spec_launch (m->spec, m->d_image, m->d_state, m->d_xchg, m->host.d_box, &m->plan, m->host.kstream);
    return sig_lstm_launch (m->d_image, m->d_state, m->d_xchg, m->host.d_box, &m->plan,
                            m->plan.apart ? SIG_LSTM_ROLE_SERVE : SIG_LSTM_ROLE_ALL, m->host.kstream);
}

/* Apart: the advancer, the same kernel function (no module to load next to the resident one). */
static int s_launch_adv (void *arg)
{
    backend_model_t *m = arg;
    return sig_lstm_launch (m->d_image, m->d_state, m->d_xchg, m->adv.d_box, &m->plan, SIG_LSTM_ROLE_ADVANCE,
                            m->adv.kstream);
}

/* The tuning a load of CFG plans with: the tests' and benchmarks' knobs, then the model's keys
 * (advances_apart; SPECIALISE false: the generic kernel). */
static sig_lstm_tuning_t s_tuning_for (const model_config_t *cfg, bool specialise)
{
    sig_lstm_tuning_t t;
    pthread_mutex_lock (&s_lock);
    t = s_tuning;
    pthread_mutex_unlock (&s_lock);
    if (cfg->advances_apart)   /* the model's configuration asks for plan 4 */
        t.sync |= SIG_LSTM_SYNC_ADVANCE_APART;
    if (!specialise)
        t.sync |= SIG_LSTM_SYNC_GENERIC;
    return t;
}

/* backend.h prepare: the device's green contexts (green_context) and the specialised kernel's module
 * (lstm_spec.h) ahead of the load. */
static int s_prepare (const weights_t *w, const model_config_t *cfg, int device, char *why, size_t whylen)
{
    const bool green = cfg->type == MODEL_TYPE_LSTM && cfg->green_context;
    if (green && !w)
        return 1;
    if (green && persistent_green_prepare (device, why, whylen) < 0)
        return -1;
    const sig_lstm_tuning_t tuning = s_tuning_for (cfg, true);
    const int rc = lstm_cuda_prepare (w, cfg, device, &tuning, why, whylen);
    return rc == 0 && green ? 1 : rc;
}

/* P's kernel (the serving one, or the advancer) in a green context of its own (persistent_green: with
 * green_context, or following the device's split); a grid (one block an SM of the device) cannot be.
 * 0, or -1 with ERR. */
static int s_green (const backend_model_t *m, persistent_t *p, const model_config_t *cfg, char *err, size_t errlen)
{
    if (m->plan.mode == SIG_LSTM_GRID && !cfg->green_context)
        return 0;
    if (m->plan.mode == SIG_LSTM_GRID) {
        sig_set_error (err, errlen, "model \"%s\": green_context: its LSTM kernel runs as a grid of %u blocks, one on "
                       "every SM of device %d (its weights fit no cluster), and a green context holds a few SMs; drop "
                       "green_context for this model", cfg->name, m->plan.blocks, p->device);
        return -1;
    }
    return persistent_green (p, m->plan.blocks, m->plan.blocks, cfg->green_context, err, errlen);
}

/* The load, the kernel specialised for the plan where SPECIALISE (and the plan allows it); *SPEC_FAILED:
 * a load that failed with the specialised kernel (a second try with the generic one may succeed). */
static backend_model_t *s_load_as (const weights_t *w, const model_config_t *cfg, int device, bool specialise,
                                   bool *spec_failed, char *err, size_t errlen)
{
    *spec_failed = false;
    if (w->type != MODEL_TYPE_LSTM || !w->lstm) {
        sig_set_error (err, errlen, "model \"%s\": the LSTM backend needs LSTM weights (\"type\": \"lstm\")", cfg->name);
        return NULL;
    }
    const lstm_weights_t *lw = w->lstm;
    if (persistent_device_ok (device, cfg->name, "the CUDA LSTM kernel", "use \"backend\": \"cpu\"", err, errlen) != 0)
        return NULL;
    if (lw->layer_count > SIG_LSTM_MAX_LAYERS) {
        sig_set_error (err, errlen, "model \"%s\": the CUDA LSTM kernel takes at most %d layers, the model has %zu",
                       cfg->name, SIG_LSTM_MAX_LAYERS, lw->layer_count);
        return NULL;
    }
    sig_lstm_net_t net;
    lstm_cuda_net (lw, &net);
    const sig_lstm_tuning_t tuning = s_tuning_for (cfg, specialise);
    backend_model_t *m = calloc (1, sizeof *m);
    const uint32_t slot_count = backend_stream_slots (cfg);
    if (!m || !(m->slots = calloc (slot_count ? slot_count : 1, sizeof *m->slots))) {
        free (m);
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        return NULL;
    }
    snprintf (m->host.name, sizeof m->host.name, "%s", cfg->name);
    m->host.kernel = "LSTM kernel";
    m->host.device = device;
    m->host.wait = cfg->wait;
    m->host.watchdog_ms = cfg->watchdog_ms;
    m->serve.host = &m->host;
    m->advr.host = &m->adv;
    m->in = net.in;
    m->out = net.out;
    m->W = net.window;
    m->max_rows = backend_rows (cfg) ? backend_rows (cfg) : 1u;
    m->slot_count = slot_count;
    cudaError_t e;
    if ((e = cudaSetDevice (device)) == cudaSuccess)
        e = (cudaError_t) sig_lstm_plan (&net, (uint32_t) cfg->weight_dtype, slot_count, m->max_rows, device, &tuning,
                                         &m->plan);
    if (e == cudaErrorNotSupported || e == cudaErrorInvalidValue) {
        sig_set_error (err, errlen, "model \"%s\": the CUDA LSTM kernel cannot serve %zu layers of %u units, %u inputs "
                       "in %s: %s; use \"backend\": \"cpu\"", cfg->name, lw->layer_count, net.hidden, net.in,
                       weight_dtype_name (cfg->weight_dtype), m->plan.why);
        s_destroy (&m);
        return NULL;
    }
    void *image = NULL;
    if (e == cudaSuccess)
        e = (cudaError_t) sig_lstm_layout (&m->plan, &m->lay);
    if (e == cudaSuccess)
        e = persistent_open (&m->host, m->lay.total, m->lay.ctrl);
    if (e == cudaSuccess && s_green (m, &m->host, cfg, err, errlen) != 0) {
        s_destroy (&m);
        return NULL;
    }
    if (e == cudaSuccess && m->plan.apart) {   /* the advancer: a stream and a mailbox of its own, same layout */
        memcpy (m->adv.name, m->host.name, sizeof m->adv.name);
        m->adv.kernel = "LSTM advancer kernel";
        m->adv.device = device;
        m->adv.wait = cfg->wait;
        m->adv.watchdog_ms = cfg->watchdog_ms;
        e = persistent_open (&m->adv, m->lay.total, m->lay.ctrl);
        if (e == cudaSuccess && s_green (m, &m->adv, cfg, err, errlen) != 0) {
            s_destroy (&m);
            return NULL;
        }
    }
    if (e == cudaSuccess && !(image = malloc (m->plan.image_bytes)))
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = (cudaError_t) sig_lstm_pack (&net, &m->plan, &m->lay, image);
    if (e == cudaSuccess && !(m->plan.sync & SIG_LSTM_SYNC_GENERIC)) {
        char why[2048];
        if (!(m->spec = lstm_cuda_specialise (cfg, device, image, &m->plan, why, sizeof why))) {
            log_warn ("model \"%s\": no specialised LSTM kernel (%s); the generic kernel serves it", cfg->name, why);
            m->plan.sync |= SIG_LSTM_SYNC_GENERIC;   /* what runs (the image's copy does not matter to it) */
        }
    }
    if (e == cudaSuccess)
        e = cuda_device_alloc (device, m->host.stream, &m->d_image, m->plan.image_bytes);
    if (e == cudaSuccess)
        e = cuda_device_alloc (device, m->host.stream, &m->d_state, m->plan.state_bytes);
    if (e == cudaSuccess && m->plan.xchg_bytes)
        e = cuda_device_alloc (device, m->host.stream, &m->d_xchg, m->plan.xchg_bytes);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync (m->d_image, image, m->plan.image_bytes, cudaMemcpyHostToDevice, m->host.stream);
    if (e == cudaSuccess)
        e = cudaMemsetAsync (m->d_state, 0, m->plan.state_bytes, m->host.stream);
    if (e == cudaSuccess && m->d_xchg)
        e = cudaMemsetAsync (m->d_xchg, 0, m->plan.xchg_bytes, m->host.stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize (m->host.stream);   /* its own stream: uploads done before the kernel reads them */
    free (image);
    const bool setup = e == cudaSuccess;
    if (setup)   /* registered as resident like every persistent kernel (device.h) */
        e = persistent_launch (&m->host, s_launch, m);
    *spec_failed = m->spec != NULL;
    if (e != cudaSuccess) {
        sig_set_error (err, errlen, "model \"%s\": CUDA LSTM kernel %s on device %d: %s (%s)", cfg->name,
                       setup ? "launch" : "setup", device, cudaGetErrorString (e), cudaGetErrorName (e));
        *spec_failed = *spec_failed && setup && !m->host.lost;   /* a lost context: no second try */
        s_destroy (&m);
        return NULL;
    }
    if (persistent_started (&m->host, s_ready, m, err, errlen) != 0) {
        *spec_failed = *spec_failed && !m->host.lost;
        s_destroy (&m);
        return NULL;
    }
    /* apart: the advancer once the serving kernel is resident (both are before any command) */
    if (m->plan.apart && (e = persistent_launch (&m->adv, s_launch_adv, m)) != cudaSuccess) {
        sig_set_error (err, errlen, "model \"%s\": CUDA LSTM advancer kernel launch on device %d: %s (%s)", cfg->name,
                       device, cudaGetErrorString (e), cudaGetErrorName (e));
        s_destroy (&m);
        return NULL;
    }
    if ((m->plan.apart && persistent_started (&m->adv, s_ready_adv, m, err, errlen) != 0)
        || s_warm (m, lw, cfg->weight_dtype, err, errlen) != 0) {
        *spec_failed = *spec_failed && !m->host.lost;
        s_destroy (&m);
        return NULL;
    }
    if (!m->plan.apart && (tuning.sync & SIG_LSTM_SYNC_ADVANCE_APART))
        log_warn ("model \"%s\": the LSTM advances were asked to run apart (plan 4) and run in the serving kernel: %s",
                  cfg->name, m->plan.why);
    return m;
}

static uint32_t s_green_sms (const backend_model_t *m) { return m->host.green_sms; }

/* A warm spare's (backend.h: park): the kernel(s) asked to stop and waited for; the image, the state,
 * the specialised module, the green groups and the mailboxes kept. A relaunch counts commands from
 * the ring's first entry again (the kernel's count is its own, from 0), so the mailboxes and the
 * rings' counts start afresh, and so do the exchange words (tagged by that count); every slot is
 * reset by its first user, its state's versions going on (apart: the records in the state carry
 * them), as after the warm-up. */
static int s_park (backend_model_t *m)
{
    if (m->parked)
        return 0;
    char err[256];
    if (lstm_cuda_lost (m) || lstm_cuda_sync (m, err, sizeof err) != SIG_OK)     /* the warm-up's commands all done */
        return -1;
    cudaSetDevice (m->host.device);
    if (m->adv.resident)    /* both stop words up before waiting for either (s_destroy) */
        __atomic_store_n ((uint32_t *) (m->adv.box + m->adv.stop_offset), 1u, __ATOMIC_RELEASE);
    if (!persistent_stop (&m->host) || !persistent_stop (&m->adv))
        return -1;
    if (m->d_xchg && (cudaMemsetAsync (m->d_xchg, 0, m->plan.xchg_bytes, m->host.stream) != cudaSuccess
                      || cudaStreamSynchronize (m->host.stream) != cudaSuccess))
        return -1;
    memset (m->host.box, 0, m->host.box_bytes);
    if (m->adv.box)
        memset (m->adv.box, 0, m->adv.box_bytes);
    m->serve.posted = m->serve.completed = 0;
    m->advr.posted = m->advr.completed = 0;
    for (uint32_t k = 0; k < m->slot_count; k++)
        m->slots[k] = (slot_t) { .ver = m->slots[k].ver };
    m->parked = true;
    return 0;
}

static int s_unpark (backend_model_t *m, char *err, size_t errlen)
{
    if (!m->parked)
        return 0;
    cudaSetDevice (m->host.device);
    cudaError_t e = persistent_launch (&m->host, s_launch, m);
    if (e == cudaSuccess && persistent_started (&m->host, s_ready, m, err, errlen) != 0)
        return -1;
    if (e == cudaSuccess && m->plan.apart && (e = persistent_launch (&m->adv, s_launch_adv, m)) == cudaSuccess
        && persistent_started (&m->adv, s_ready_adv, m, err, errlen) != 0)
        return -1;
    if (e != cudaSuccess) {
        sig_set_error (err, errlen, "model \"%s\": CUDA LSTM kernel launch (a standby's) on device %d: %s (%s)",
                       m->host.name, m->host.device, cudaGetErrorString (e), cudaGetErrorName (e));
        return -1;
    }
    m->parked = false;
    return 0;
}

static backend_model_t *s_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    bool spec_failed = false;
    backend_model_t *m = s_load_as (w, cfg, device, cfg->specialise, &spec_failed, err, errlen);
    if (!m && spec_failed) {   /* the specialised kernel failed to start or to answer: the generic one */
        log_warn ("model \"%s\": the specialised LSTM kernel failed (%s); the generic kernel serves it", cfg->name, err);
        m = s_load_as (w, cfg, device, false, &spec_failed, err, errlen);
    }
    return m;
}

const backend_iface_t backend_lstm_cuda_iface = {
    .name = "cuda",
    .device = BACKEND_DEVICE_GPU,
    .weight_dtypes = 1u << WEIGHT_DTYPE_F16 | 1u << WEIGHT_DTYPE_BF16,
    .load = s_load,
    .infer = lstm_cuda_infer,
    .kernel_name = lstm_cuda_kernel_name,
    .destroy = s_destroy,
    .stream_reset = lstm_cuda_reset,
    .stream_step = lstm_cuda_step,
    .stream_advance = lstm_cuda_advance,
    .prepare = s_prepare,
    .green_sms = s_green_sms,
    .park = s_park,
    .unpark = s_unpark,
};

