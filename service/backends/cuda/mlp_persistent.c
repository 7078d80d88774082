/* The CUDA MLP backend's kernel "persistent" (backend_cuda_impl.h): one resident cluster launched at
 * load (kernels/mlp_persistent.cu) serves each request through a slot of its mailbox (the
 * persistent host layer, persistent.h, owns the mailbox, the wait with its watchdog, the stop and
 * the losses): features in, the request word published with a release store, a wait on the slot's
 * completion (its sequence, or the outputs themselves), outputs out. No CUDA call on that path.
 * Also the ping-pong floor (sigbench) on the same request path. */
#define _GNU_SOURCE
#include "backends/cuda/backend_cuda_impl.h"

#include "backends/cuda/device.h"
#include "backends/cuda/kernel_cache.h"
#include "sig_fused.h"
#include "sig_persistent.h"
#include "sig_spec.h"
#include "base/log.h"
#include "weights/reference.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert (SIG_DTYPE_F32 == (int) WEIGHT_DTYPE_F32 && SIG_DTYPE_F16 == (int) WEIGHT_DTYPE_F16
                    && SIG_DTYPE_BF16 == (int) WEIGHT_DTYPE_BF16, "sig_persistent.h's SIG_DTYPE_* = weight_dtype_t");

/* Tests and benchmarks: the knobs every later load uses (cuda_persistent_tuning). */
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static sig_persistent_tuning_t s_tuning;

void cuda_persistent_tuning (const sig_persistent_tuning_t *tuning)
{
    pthread_mutex_lock (&s_lock);
    if (tuning)
        s_tuning = *tuning;
    else
        memset (&s_tuning, 0, sizeof s_tuning);
    pthread_mutex_unlock (&s_lock);
}

/* ---- the request path ---- */

_Static_assert (PBOX_SENTINEL == SIG_PERSISTENT_SENTINEL && (int) PBOX_DONE_OUTPUTS == (int) SIG_DONE_OUTPUTS
                    && (int) PBOX_DONE_SEQUENCE == (int) SIG_DONE_SEQUENCE, "persistent_box.h speaks sig_persistent.h's protocol");

sig_status_t cuda_persistent_infer (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err,
                                    size_t errlen)
{
    if (m->host.lost)
        return persistent_unavailable (&m->host, err, errlen);
    const pbox_answer_t answer = pbox_publish (m->pbox, in, rows);
    sig_status_t st = persistent_wait (&m->host, pbox_answered, &answer, err, errlen);
    if (st == SIG_OK)
        pbox_read (&answer, out);
    return st;
}

int cuda_persistent_share (backend_model_t *m, persistent_box_t *dest)
{
    if (!m || !m->persistent || m->pingpong || !m->host.box_shared)
        return -1;
    if (!dest)
        return 0;
    *dest = *m->pbox;
    m->pbox = dest;
    return 0;
}

int cuda_persistent_poison (backend_model_t *m)
{
    /* no device buffers outside the kernel's shared memory: the slots' outputs */
    for (uint32_t i = 0; i < m->layout.ring; i++)
        memset (m->host.box + m->layout.slots + (size_t) i * m->layout.slot_bytes + m->layout.outputs, 0xff,
                (size_t) m->max_rows * m->output_size * sizeof (float));
    return 0;
}

int cuda_model_persistent_stall (backend_model_t *m, bool stall)
{
    if (!m || !m->persistent || !m->host.box)
        return (int) cudaErrorInvalidValue;
    __atomic_store_n ((uint32_t *) (m->host.box + m->layout.ctrl + 4), stall ? 1u : 0u, __ATOMIC_RELEASE);
    return 0;
}

const sig_persistent_plan_t *cuda_model_persistent_plan (const backend_model_t *m)
{
    return m && m->persistent && !m->pingpong ? &m->plan : NULL;
}

/* ---- load and destroy ---- */

#define PERSISTENT_WARMUP 256

void cuda_persistent_destroy (backend_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    backend_model_t *m = *m_p;
    cudaSetDevice (m->device);
    if (persistent_stop (&m->host)) {   /* else the kernel may still read them: left to the end of the process */
        cuda_device_free (m->host.stream, m->d_image);
        if (m->side)
            cudaStreamDestroy (m->side);
        persistent_close (&m->host);
    }
    free (m);
    *m_p = NULL;
}

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
    snprintf (m->host.name, sizeof m->host.name, "%s", name);
    m->host.kernel = "persistent kernel";
    m->host.device = device;
    m->host.wait = wait;
    m->host.watchdog_ms = watchdog_ms;
    m->host.shareable = true;
    cudaError_t e = (cudaError_t) sig_persistent_layout (in, out, rows, ring, &m->layout);
    if (e == cudaSuccess)
        e = persistent_open (&m->host, m->layout.total, m->layout.ctrl);
    if (e == cudaSuccess)
        m->own_box = (persistent_box_t) { .box = m->host.box, .slots = m->layout.slots,
                                          .slot_bytes = m->layout.slot_bytes, .ring = m->layout.ring,
                                          .request = m->layout.request, .features = m->layout.features,
                                          .outputs = m->layout.outputs, .done = m->layout.done,
                                          .row_floats = m->layout.row_floats, .input_size = in,
                                          .output_size = out, .max_rows = rows };
    m->pbox = &m->own_box;
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags (&m->side, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        bool lost = false;
        cuda_device_error (device, name, e, "allocation", &lost, err, errlen);
        cuda_persistent_destroy (&m);
        return NULL;
    }
    return m;
}

static bool s_ready (const void *arg)
{
    const backend_model_t *m = arg;
    return __atomic_load_n ((const uint32_t *) (m->host.box + m->layout.status), __ATOMIC_ACQUIRE) != 0u;
}

/* A few hundred requests through the kernel, rows 1 and max_rows in turn, two in every 16 checked
 * against the float64 reference: ||y - ref|| / ||ref|| pooled over them (as the tests judge) must
 * stay within 1e-5 (f32 weights), 2e-2 (f16) or 1e-1 (bf16; the LSTM backend's limits: a sanity
 * check of the load, the tests check each output against its bound). 0, or -1 with ERR. */
static int s_persistent_warm (backend_model_t *m, const weights_t *w, weight_dtype_t dtype, char *err, size_t errlen)
{
    const double tol = dtype == WEIGHT_DTYPE_F32 ? 1e-5 : dtype == WEIGHT_DTYPE_F16 ? 2e-2 : 1e-1;
    const size_t nin = (size_t) m->max_rows * w->input_size, nout = (size_t) m->max_rows * w->output_size;
    float *x = malloc (nin * sizeof (float)), *y = malloc (nout * sizeof (float));
    double *ref = malloc (nout * sizeof (double));
    int rc = x && y && ref ? 0 : -1;
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
        if (cuda_persistent_infer (m, x, rows, y, err, errlen) != SIG_OK) {
            rc = -1;
            break;
        }
        if (i % 16 != 0 && i % 16 != 1)
            continue;
        if (reference_forward (w, x, rows, ref) != 0) {
            sig_set_error (err, errlen, "model \"%s\": out of memory", m->name);
            rc = -1;
            break;
        }
        reference_error_sums (y, ref, (size_t) rows * w->output_size, &num, &den);
    }
    const double rel = sqrt (num) / fmax (sqrt (den), 1e-30);
    if (rc == 0 && !(rel <= tol)) {
        sig_set_error (err, errlen, "model \"%s\": the persistent kernel's warm-up answers differ from the reference "
                       "(relative error %.3g over the checked requests, weights in %s)", m->name, rel,
                       weight_dtype_name (dtype));
        rc = -1;
    }
    free (x);
    free (y);
    free (ref);
    return rc;
}

static int s_launch_mlp (void *arg)
{
    backend_model_t *m = arg;
    if (m->spec)
        return sig_spec_launch (m->spec, m->d_image, m->host.d_box, &m->plan, m->host.kstream);
    return sig_persistent_launch (m->d_image, m->host.d_box, &m->plan, m->host.kstream);
}

/* The kernel specialised for IMAGE's header (host memory) on DEVICE: from the kernel cache, compiled
 * and loaded there when new. NULL with the reason in WHY. */
static const sig_spec_module_t *s_specialise (const model_config_t *cfg, int device, const void *image,
                                              const sig_persistent_plan_t *plan, char *why, size_t whylen)
{
    char *src = plan->trace ? sig_persistent_spec_source_traced (image) : sig_persistent_spec_source (image);
    return kernel_cache_specialised (cfg->kernel_cache_dir, device, src, "sig_persistent_spec", plan->smem_bytes,
                                     cfg->name, "persistent kernel specialised for its shapes", why, whylen);
}

static backend_model_t *s_persistent_load (const weights_t *w, const model_config_t *cfg, int device, bool specialise,
                                           bool *spec_failed, char *err, size_t errlen);
static int s_net_plan (const weights_t *w, const model_config_t *cfg, int device, sig_fused_net_t *out,
                       sig_persistent_plan_t *plan_out, char *err, size_t errlen);

/* The specialised kernel's module compiled and loaded into the kernel cache ahead of the load (which
 * then finds it loaded, also next to a resident kernel): the same net, plan and image header. */
int cuda_persistent_prepare (const weights_t *w, const model_config_t *cfg, int device, char *why, size_t whylen)
{
    sig_fused_net_t net;
    sig_persistent_plan_t plan;
    sig_persistent_layout_t layout;
    if (s_net_plan (w, cfg, device, &net, &plan, why, whylen) != 0)
        return -1;
    void *image = NULL;
    cudaError_t e = (cudaError_t) sig_persistent_layout (w->input_size, w->output_size, backend_rows (cfg), plan.ring,
                                                         &layout);
    if (e == cudaSuccess)
        e = (image = malloc (plan.image_bytes)) ? (cudaError_t) sig_persistent_pack (&net, &plan, &layout, image)
                                                : cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        snprintf (why, whylen, "packing its image: %s", cudaGetErrorString (e));
        free (image);
        return -1;
    }
    const sig_spec_module_t *mod = s_specialise (cfg, device, image, &plan, why, whylen);
    free (image);
    return mod ? 1 : -1;
}

backend_model_t *cuda_persistent_load (const weights_t *w, const model_config_t *cfg, int device, char *err,
                                       size_t errlen)
{
    bool spec_failed = false;
    backend_model_t *m = s_persistent_load (w, cfg, device, cfg->specialise, &spec_failed, err, errlen);
    if (!m && spec_failed) {   /* the specialised kernel failed to start or to answer: the generic one */
        log_warn ("model \"%s\": the specialised persistent kernel failed (%s); the generic kernel serves it", cfg->name,
                  err);
        m = s_persistent_load (w, cfg, device, false, &spec_failed, err, errlen);
    }
    return m;
}

/* W's net (NET, its weights borrowed from W) and its plan on DEVICE (PLAN, DEVICE current after): what
 * a load and a prepare of (W, CFG) both start from. 0, or -1 with ERR. */
static int s_net_plan (const weights_t *w, const model_config_t *cfg, int device, sig_fused_net_t *out,
                       sig_persistent_plan_t *plan_out, char *err, size_t errlen)
{
    if (persistent_device_ok (device, cfg->name, "kernel \"persistent\"", "use kernel \"fused\" or \"warp\"", err,
                              errlen) != 0)
        return -1;
    if (w->layer_count > SIG_FUSED_MAX_LAYERS) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\" takes at most %d layers, the model has %zu",
                       cfg->name, SIG_FUSED_MAX_LAYERS, w->layer_count);
        return -1;
    }
    sig_fused_net_t net;
    memset (&net, 0, sizeof net);
    net.layer_count = (uint32_t) w->layer_count;
    net.widest = w->widest;
    for (size_t i = 0; i < w->layer_count; i++)
        net.layers[i] = (sig_fused_layer_t) { .w = w->layers[i].weight, .b = w->layers[i].bias, .in = w->layers[i].in,
                                              .out = w->layers[i].out, .act = (int) w->layers[i].activation };
    /* A weight the dtype cannot hold is refused, naming the tensor and the value (rounding it to
     * infinity, or clamping it, would change the model without a word). */
    const uint32_t dtype = (uint32_t) cfg->weight_dtype;
    uint32_t bad_layer = 0;
    uint64_t bad_index = 0;
    if (sig_persistent_dtype_check (&net, dtype, &bad_layer, &bad_index) != 0) {
        const dense_layer_t *L = &w->layers[bad_layer];
        char tensor[CONFIG_NAME_MAX + 32];
        if (bad_layer < cfg->layer_count && cfg->layers[bad_layer].weight[0])
            snprintf (tensor, sizeof tensor, "\"%s\"", cfg->layers[bad_layer].weight);
        else
            snprintf (tensor, sizeof tensor, "of layer %u", bad_layer);
        sig_set_error (err, errlen, "model \"%s\": weight_dtype \"%s\": weight %s [%llu][%llu] = %.9g does not fit "
                       "in %s (largest finite %s); use \"weight_dtype\": \"%s\"", cfg->name,
                       weight_dtype_name (cfg->weight_dtype), tensor, (unsigned long long) (bad_index / L->in),
                       (unsigned long long) (bad_index % L->in), (double) L->weight[bad_index],
                       weight_dtype_name (cfg->weight_dtype), dtype == SIG_DTYPE_F16 ? "65504" : "3.39e38",
                       dtype == SIG_DTYPE_F16 ? "bf16\" or \"f32" : "f32");
        return -1;
    }
    sig_persistent_tuning_t tuning;
    pthread_mutex_lock (&s_lock);
    tuning = s_tuning;
    pthread_mutex_unlock (&s_lock);
    sig_persistent_plan_t plan;
    cudaError_t e = cudaSetDevice (device);
    if (e == cudaSuccess)
        e = (cudaError_t) sig_persistent_plan (&net, backend_rows (cfg), device, dtype, &tuning, &plan);
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
                       "cluster holds %llu KiB (%u blocks x %u KiB%s)%s%s%s; use kernel \"fused\" or \"warp\"", cfg->name,
                       (unsigned long long) (need >> 10), (unsigned long long) (have >> 10), plan.max_cluster,
                       plan.smem_limit >> 10, extra, dtype != SIG_DTYPE_F32 ? " (weights in " : "",
                       dtype != SIG_DTYPE_F32 ? weight_dtype_name (cfg->weight_dtype) : "",
                       dtype != SIG_DTYPE_F32 ? ")" : "");
        return -1;
    }
    if (e != cudaSuccess) {
        sig_set_error (err, errlen, "model \"%s\": kernel \"persistent\": planning on device %d failed: %s", cfg->name,
                       device, cudaGetErrorString (e));
        return -1;
    }
    *out = net;
    *plan_out = plan;
    return 0;
}

static backend_model_t *s_persistent_load (const weights_t *w, const model_config_t *cfg, int device, bool specialise,
                                           bool *spec_failed, char *err, size_t errlen)
{
    sig_fused_net_t net;
    sig_persistent_plan_t plan;
    if (s_net_plan (w, cfg, device, &net, &plan, err, errlen) != 0)
        return NULL;
    backend_model_t *m = s_persistent_new (cfg->name, device, w->input_size, w->output_size, backend_rows (cfg),
                                           plan.ring, cfg->wait, cfg->watchdog_ms, err, errlen);
    if (!m)
        return NULL;
    if (persistent_green (&m->host, plan.cluster_blocks, plan.cluster_blocks, cfg->green_context, err, errlen) != 0) {
        cuda_persistent_destroy (&m);
        return NULL;
    }
    m->plan = plan;
    m->done_mode = m->own_box.done_mode = plan.done_mode;
    m->widest = w->widest;
    void *image = malloc (plan.image_bytes);
    cudaError_t e = image ? (cudaError_t) sig_persistent_pack (&net, &plan, &m->layout, image) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = cuda_device_alloc (device, m->host.stream, &m->d_image, plan.image_bytes);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync (m->d_image, image, plan.image_bytes, cudaMemcpyHostToDevice, m->host.stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize (m->host.stream);
    if (e == cudaSuccess && specialise) {
        char why[2048];
        m->spec = s_specialise (cfg, device, image, &plan, why, sizeof why);
        if (!m->spec)
            log_warn ("model \"%s\": no specialised persistent kernel (%s); the generic kernel serves it", cfg->name, why);
        else
            m->host.kernel = "specialised persistent kernel";
    }
    free (image);
    if (e == cudaSuccess)
        e = persistent_launch (&m->host, s_launch_mlp, m);
    *spec_failed = m->spec != NULL;
    if (e != cudaSuccess) {
        cuda_device_error (device, m->name, e, "persistent kernel launch", &m->host.lost, err, errlen);
        *spec_failed = *spec_failed && !m->host.lost;   /* a lost context: no second try */
        cuda_persistent_destroy (&m);
        return NULL;
    }
    if (persistent_started (&m->host, s_ready, m, err, errlen) != 0
        || s_persistent_warm (m, w, cfg->weight_dtype, err, errlen) != 0) {
        *spec_failed = *spec_failed && !m->host.lost;
        cuda_persistent_destroy (&m);
        return NULL;
    }
    return m;
}

/* A warm spare's (backend.h: park): the kernel asked to stop and waited for; its weights image, module,
 * green group and mailbox kept. The mailbox is zeroed for the next launch, which counts requests
 * from the first slot again (so does the host: nothing was shared yet). */
int cuda_persistent_park (backend_model_t *m)
{
    if (!m->persistent || m->parked)
        return 0;
    if (m->pingpong || m->host.lost || m->pbox != &m->own_box || !persistent_stop (&m->host))
        return -1;
    memset (m->host.box, 0, m->host.box_bytes);
    m->own_box.next = 0;
    m->parked = true;
    return 0;
}

int cuda_persistent_unpark (backend_model_t *m, char *err, size_t errlen)
{
    if (!m->persistent || !m->parked)
        return 0;
    cudaSetDevice (m->device);
    cudaError_t e = persistent_launch (&m->host, s_launch_mlp, m);
    if (e != cudaSuccess) {
        cuda_device_error (m->device, m->name, e, "persistent kernel launch (a standby's)", &m->host.lost, err, errlen);
        return -1;
    }
    if (persistent_started (&m->host, s_ready, m, err, errlen) != 0)
        return -1;
    m->parked = false;
    return 0;
}

typedef struct {
    backend_model_t *m;
    uint32_t in, flags, done_mode;
} pingpong_args_t;

static int s_launch_pingpong (void *arg)
{
    const pingpong_args_t *a = arg;
    return sig_pingpong_launch (a->m->host.d_box, &a->m->layout, a->in, a->flags, a->done_mode, a->m->host.kstream);
}

backend_model_t *cuda_pingpong_load (int device, uint32_t in, uint32_t flags, uint32_t done_mode, cuda_wait_t wait,
                                     char *err, size_t errlen)
{
    if (cuda_device_check (device, "pingpong", err, errlen) != 0)
        return NULL;
    if (in < 1 || in > 8192) {
        sig_set_error (err, errlen, "ping-pong: %u features: expected 1 to 8192", in);
        return NULL;
    }
    backend_model_t *m = s_persistent_new ("pingpong", device, in, 1u, 1u, 0u, wait, 1000u, err, errlen);
    if (!m)
        return NULL;
    m->pingpong = true;
    m->done_mode = m->own_box.done_mode = done_mode;
    m->host.kernel = "ping-pong kernel";
    pingpong_args_t args = { m, in, flags, done_mode };
    cudaError_t e = persistent_launch (&m->host, s_launch_pingpong, &args);
    if (e != cudaSuccess) {
        cuda_device_error (device, m->name, e, "ping-pong kernel launch", &m->host.lost, err, errlen);
        cuda_persistent_destroy (&m);
        return NULL;
    }
    if (persistent_started (&m->host, s_ready, m, err, errlen) != 0) {
        cuda_persistent_destroy (&m);
        return NULL;
    }
    float x[8192], y;
    for (uint32_t k = 0; k < in && k < 8192; k++)
        x[k] = (float) (k % 7) - 3.0f;
    for (int i = 0; i < PERSISTENT_WARMUP; i++)
        if (cuda_persistent_infer (m, x, 1, &y, err, errlen) != SIG_OK) {
            cuda_persistent_destroy (&m);
            return NULL;
        }
    return m;
}
