/* sigserve-test only (SIGSERVE_TEST_MAILBOX=1 in its environment): the MLP backend "cpu" replaced by
 * an emulation of the persistent kernel's mailbox, so that the path a front takes into a device
 * process's persistent model (backends/persistent_box.h: the mailbox in the region shared with
 * the server, the protocol state moved there at DEV_START, the claim, the front's bounded wait,
 * the device process watching the kernel) runs where there is no GPU, in CI. Each instance is
 * the CPU backend's own context driven by a thread that plays the kernel: it polls each slot's
 * request word in order (acquire), computes the rows, stores the outputs word by word (release)
 * as the kernel does in completion-by-outputs mode. Its mailbox comes from the device process's
 * share of the region (backends/box_source.h) when there is one. "Trap" (POST /debug/fault
 * kind=trap on device cpu) stops the thread: the kernel is gone; "hang" stalls it: it answers nothing.
 *
 * It also plays the CUDA backend's specialised kernels (backend.h's prepare): a module per shape,
 * loaded only while no emulated kernel runs in this process (CUDA's module load next to a resident
 * kernel waits forever) and kept loaded; a model whose shape's module is loaded when it loads runs
 * kernel "mailbox-emulated-nvrtc", another "mailbox-emulated" (with the CUDA backend's warning). */
#define _GNU_SOURCE
#include "backends/backend.h"
#include "backends/box_source.h"
#include "backends/persistent_box.h"
#include "base/log.h"
#include "base/status.h"
#include "weights/weights.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING 4u
#define WATCHDOG_NS 2000000000ull

struct backend_model {
    backend_model_t *cpu;           /* the arithmetic: the CPU backend's context */
    persistent_box_t own, *pbox;
    uint8_t *box;
    bool from_source;
    size_t box_bytes;               /* what the mailbox's layout takes */
    float *x, *y;                   /* the emulated kernel's rows, unpadded */
    pthread_t thread;
    _Atomic bool stop, trapped, exited;
    _Atomic bool stalled;               /* kind=hang: it runs on and answers nothing (a hung kernel) */
    bool spec;                      /* its shape's emulated module was loaded: the "specialised" kernel */
};

#define MODULES_MAX 64
static pthread_mutex_t s_modules_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t s_modules[MODULES_MAX];         /* the shapes whose module is loaded */
static size_t s_module_count;
static int s_resident;                          /* emulated kernels running in this process */

/* The shape a specialised kernel is compiled for: every layer's sizes and the rows. */
static uint64_t s_shape (const weights_t *w, const model_config_t *cfg)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < w->layer_count; i++)
        h = (h ^ ((uint64_t) w->layers[i].in << 32 | w->layers[i].out)) * 1099511628211ull;
    return (h ^ backend_rows (cfg)) * 1099511628211ull;
}

/* Whether KEY's module is loaded, loading it when no emulated kernel runs here (as kernel_cache_module). */
static bool s_module (uint64_t key)
{
    pthread_mutex_lock (&s_modules_lock);
    bool found = false;
    for (size_t i = 0; i < s_module_count && !found; i++)
        found = s_modules[i] == key;
    if (!found && s_resident == 0 && s_module_count < MODULES_MAX) {
        s_modules[s_module_count++] = key;
        found = true;
    }
    pthread_mutex_unlock (&s_modules_lock);
    return found;
}

static void s_resident_add (int d)
{
    pthread_mutex_lock (&s_modules_lock);
    s_resident += d;
    pthread_mutex_unlock (&s_modules_lock);
}

static sig_status_t s_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen);

/* The kernel's part: slot n % ring, sequence n + 1, in order, until stopped or trapped. */
static void *s_kernel (void *arg)
{
    backend_model_t *m = arg;
    char err[256];
    for (uint64_t n = 0;; n++) {
        const persistent_box_t *b = &m->own;    /* its layout (never changes; the sequence is the hosts') */
        uint8_t *slot = b->box + b->slots + (size_t) (n % b->ring) * b->slot_bytes;
        const uint32_t seq = (uint32_t) (n + 1u);
        uint64_t word;
        uint32_t spins = 0;
        while (atomic_load (&m->stalled)
               || (uint32_t) (word = __atomic_load_n ((uint64_t *) (slot + b->request), __ATOMIC_ACQUIRE)) != seq) {
            if (atomic_load (&m->stop) || atomic_load (&m->trapped)) {
                atomic_store (&m->exited, true);
                return NULL;
            }
            if (++spins % 64u == 0u)
                sched_yield ();
            else
                _mm_pause ();
        }
        const uint32_t rows = (uint32_t) (word >> 32);
        const float *x = (const float *) (slot + b->features);
        for (uint32_t r = 0; r < rows; r++)
            memcpy (m->x + (size_t) r * b->input_size, x + (size_t) r * b->row_floats, b->input_size * sizeof (float));
        if (backend_cpu_iface.infer (m->cpu, m->x, rows, m->y, err, sizeof err) != SIG_OK)
            for (uint32_t i = 0; i < rows * b->output_size; i++)
                m->y[i] = 0.0f;
        uint32_t *y = (uint32_t *) (slot + b->outputs);
        for (uint32_t i = 0; i < rows * b->output_size; i++) {
            uint32_t u;
            memcpy (&u, &m->y[i], sizeof u);
            __atomic_store_n (&y[i], u == PBOX_SENTINEL ? 0x7fc00000u : u, __ATOMIC_RELEASE);
        }
    }
}

static void s_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    if (m->thread) {
        atomic_store (&m->stop, true);
        pthread_join (m->thread, NULL);
        s_resident_add (-1);
    }
    backend_cpu_iface.destroy (&m->cpu);
    if (!m->from_source)
        free (m->box);      /* the region's memory stays the device process's share */
    free (m->x);
    free (m->y);
    free (m);
    *m_p = NULL;
}

/* Host memory needs no registration here (CUDA's is cudaHostRegister). */
static int s_no_registration (void *arg, void *p, size_t bytes)
{
    (void) arg, (void) p, (void) bytes;
    return 0;
}

static backend_model_t *s_load (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen)
{
    backend_model_t *m = calloc (1, sizeof *m);
    if (!m) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        return NULL;
    }
    const uint32_t rows = backend_rows (cfg), in = (uint32_t) w->input_size, out = (uint32_t) w->output_size;
    if (!(m->cpu = backend_cpu_iface.load (w, cfg, device, err, errlen))) {
        s_destroy (&m);
        return NULL;
    }
    const size_t total = pbox_layout (&m->own, in, out, rows, RING);   /* the kernel's layout */
    m->own.done_mode = PBOX_DONE_OUTPUTS;
    size_t got = 0;
    m->box = box_source_take (total, s_no_registration, NULL, &got);   /* the pool, as CUDA's */
    m->from_source = m->box != NULL;
    if (!m->box)
        m->box = aligned_alloc (4096, (total + 4095) / 4096 * 4096);
    m->x = malloc ((size_t) rows * in * sizeof (float));
    m->y = malloc ((size_t) rows * out * sizeof (float));
    if (!m->box || !m->x || !m->y) {
        sig_set_error (err, errlen, "model \"%s\": out of memory", cfg->name);
        s_destroy (&m);
        return NULL;
    }
    memset (m->box, 0, total);
    m->box_bytes = total;
    m->own.box = m->box;
    m->pbox = &m->own;
    m->spec = cfg->specialise && s_module (s_shape (w, cfg));
    if (cfg->specialise && !m->spec)
        log_warn ("model \"%s\": no specialised persistent kernel (an emulated kernel runs in this process and "
                  "its shape's module was not loaded before it started); the generic kernel serves it", cfg->name);
    if (pthread_create (&m->thread, NULL, s_kernel, m) != 0) {
        m->thread = 0;
        sig_set_error (err, errlen, "model \"%s\": cannot start the emulated kernel", cfg->name);
        s_destroy (&m);
        return NULL;
    }
    s_resident_add (+1);
    return m;
}

static uint64_t s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static sig_status_t s_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen)
{
    if (atomic_load (&m->exited)) {
        sig_set_error (err, errlen, "the emulated persistent kernel is gone");
        return SIG_UNAVAILABLE;
    }
    const pbox_answer_t a = pbox_publish (m->pbox, in, rows);
    const uint64_t t0 = s_now ();
    for (uint32_t spins = 1; !pbox_answered (&a); spins++) {
        if (spins % 64u == 0u && (atomic_load (&m->exited) || s_now () - t0 > WATCHDOG_NS)) {
            sig_set_error (err, errlen, "the emulated persistent kernel did not answer");
            return SIG_UNAVAILABLE;
        }
        _mm_pause ();
    }
    pbox_read (&a, out);
    return SIG_OK;
}

static const char *s_kernel_name (const backend_model_t *m)
{
    return m->spec ? "mailbox-emulated-nvrtc" : "mailbox-emulated";
}

static int s_prepare (const weights_t *w, const model_config_t *cfg, int device, char *why, size_t whylen)
{
    (void) device;
    if (!cfg->specialise)
        return 0;
    if (!w)
        return 1;
    if (s_module (s_shape (w, cfg)))
        return 1;
    snprintf (why, whylen, "an emulated persistent kernel runs in this process: its module cannot load next to it");
    return -1;
}

static int s_share_box (backend_model_t *m, persistent_box_t *dest)
{
    if (!m->from_source)
        return -1;
    if (dest) {
        *dest = *m->pbox;   /* before the worker starts: nothing is in flight */
        m->pbox = dest;
    }
    return 0;
}

static const char *s_kernel_stopped (backend_model_t *m)
{
    return atomic_load (&m->exited) ? "its emulated persistent kernel stopped (trap)" : NULL;
}

/* A warm spare's (backend.h: park): the emulated kernel stopped as CUDA's is, the mailbox zeroed for
 * the next one, which counts from the first slot again; it no longer counts as resident (a module
 * may load beside it). */
static int s_park (backend_model_t *m)
{
    if (!m->thread)
        return 0;
    if (m->pbox != &m->own || atomic_load (&m->trapped))
        return -1;
    atomic_store (&m->stop, true);
    pthread_join (m->thread, NULL);
    m->thread = 0;
    s_resident_add (-1);
    memset (m->box, 0, m->box_bytes);
    m->own.next = 0;
    atomic_store (&m->stop, false);
    atomic_store (&m->exited, false);
    return 0;
}

static int s_unpark (backend_model_t *m, char *err, size_t errlen)
{
    if (m->thread)
        return 0;
    if (pthread_create (&m->thread, NULL, s_kernel, m) != 0) {
        m->thread = 0;
        snprintf (err, errlen, "cannot start the emulated kernel again");
        return -1;
    }
    s_resident_add (+1);
    return 0;
}

const backend_iface_t test_mailbox_iface = {
    .name = "cpu",
    .device = BACKEND_DEVICE_CPU,
    .load = s_load,
    .infer = s_infer,
    .kernel_name = s_kernel_name,
    .destroy = s_destroy,
    .share_box = s_share_box,
    .kernel_stopped = s_kernel_stopped,
    .park = s_park,
    .unpark = s_unpark,
    .prepare = s_prepare,
};

/* POST /debug/fault kind=hang on device cpu: the emulated kernel runs on and answers nothing, as a hung
 * one (its host's wait gives up after WATCHDOG_NS; a model's watchdog_ms under it ends the process first). */
int test_mailbox_hang (backend_model_t *m)
{
    if (!m)
        return -1;
    atomic_store (&m->stalled, true);
    return 0;
}

/* POST /debug/fault kind=trap on device cpu: the emulated kernel stops, as a trapped one would. */
int test_mailbox_trap (backend_model_t *m)
{
    if (!m)
        return -1;
    atomic_store (&m->trapped, true);
    return 0;
}
