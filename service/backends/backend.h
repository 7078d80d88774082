/* The backend interface: an opaque per-model handle behind a table of function pointers
 * (ggml-backend style). The CPU backend is always built; the CUDA backends are built when nvcc is
 * found (backends.h: the table of what this build has). Optional entries are NULL. */
#ifndef SIGSERVE_BACKEND_H
#define SIGSERVE_BACKEND_H

#include "base/config.h"
#include "backends/persistent_box.h"
#include "base/floats.h"
#include "base/status.h"
#include "weights/weights.h"
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct backend_model backend_model_t;   /* each backend defines it */

/* Where a backend's instances run: the CPU, or a GPU (the model's devices[i % n]). */
typedef enum { BACKEND_DEVICE_CPU = 0, BACKEND_DEVICE_GPU } backend_device_t;

typedef struct {
    const char *name;   /* "cpu", "cuda" */
    backend_device_t device;
    /* The weight_dtypes it can hold the weights in besides f32: a bit per weight_dtype_t (0: f32 only). */
    uint32_t weight_dtypes;
    /* Builds one ready-to-serve instance of a model on DEVICE (CUDA; ignored by the CPU): weights
     * in the backend's layout, its own buffers (and stream, graphs) for up to backend_rows (cfg)
     * rows, warmed. NULL with ERR on failure. Nothing is allocated later. Instances are
     * independent: one thread at a time drives each, several instances run at once. */
    backend_model_t *(*load) (const weights_t *w, const model_config_t *cfg, int device, char *err, size_t errlen);
    /* IN: rows x input_size; OUT: rows x output_size; 1 <= rows <= backend_rows (cfg).
     * SIG_OK, or SIG_INTERNAL / SIG_UNAVAILABLE with a message in ERR. */
    sig_status_t (*infer) (backend_model_t *m, const float *in, uint32_t rows, float *out, char *err, size_t errlen);
    const char *(*kernel_name) (const backend_model_t *m);
    /* Optional (NULL: none to name). The instruction path M runs on the CPU: "avx512", "avx512-vnni",
     * "avx2", "scalar" (cpu_isa.h), or the library's ("openblas SkylakeX"); /models and the load's
     * log line show it. */
    const char *(*isa) (const backend_model_t *m);
    void (*destroy) (backend_model_t **m_p);
    /* Streaming LSTM models only (NULL elsewhere). A stream's window and precomputed state live in
     * slot SLOT (0 <= SLOT < backend_stream_slots (cfg)), which the worker assigns.
     * stream_reset: the window all zeros (its state: the LSTM run over window - 1 zero steps).
     * stream_step: the critical path: appends step X (step_size floats) to the window and writes
     *   the output for the window ending at X (OUT: output_size floats), from the state
     *   stream_advance left (one step per layer, then the head).
     * stream_advance: after the reply went out: the state of the last window - 1 steps from a
     *   zero start, ready for the next step. */
    void (*stream_reset) (backend_model_t *m, uint32_t slot);
    sig_status_t (*stream_step) (backend_model_t *m, uint32_t slot, const float *x, float *out, char *err,
                                 size_t errlen);
    void (*stream_advance) (backend_model_t *m, uint32_t slot);
    /* Optional (NULL: never). A persistent kernel whose requests a front of the server may publish
     * too (its mailbox came from backends/box_source.h): DEST NULL asks whether M can; else M's
     * protocol state moves to DEST (in the region shared with the server), where every later
     * request of either side takes its sequence. 0, or -1 when M cannot. */
    int (*share_box) (backend_model_t *m, persistent_box_t *dest);
    /* Optional: NULL while M's resident kernel runs (or M has none), else why it stopped (its
     * context trapped, or it exited). Any thread: a device process asks while a front waits on it. */
    const char *(*kernel_stopped) (backend_model_t *m);
    /* Optional (NULL: M keeps nothing resident). A warm spare's (serving/devices.h): park stops M's
     * resident kernel once it loaded and warmed, keeping everything else (its weights on the device,
     * its mailbox, its module), so the spare holds no SM; unpark launches it again, as it was after
     * the load (its mailbox afresh), before M serves. 0 (also when M has no resident kernel), or -1
     * (park: the kernel did not leave; unpark: with ERR). */
    int (*park) (backend_model_t *m);
    int (*unpark) (backend_model_t *m, char *err, size_t errlen);
    /* Optional (NULL: 0). The SMs of the green context M's resident kernel runs in (model key
     * green_context), 0 when the hardware places it. */
    uint32_t (*green_sms) (const backend_model_t *m);
    /* Optional (NULL: nothing to do). Does ahead what a later load of (W, CFG) on DEVICE needs done
     * while no persistent kernel is resident on DEVICE (CUDA: compiling and loading the module of a
     * persistent kernel specialised for the model's shapes; a module load next to a resident kernel
     * waits for it forever). The serving layer calls it for every model of a configuration before it
     * loads any, and for every model of a device process before they rejoin it. 1 when it did
     * something, 0 when there was nothing to do, -1 with WHY when it could not (the load then goes
     * on without it: not an error). W NULL: only whether it would do something for CFG (1) or not (0),
     * before the weights are read. */
    int (*prepare) (const weights_t *w, const model_config_t *cfg, int device, char *why, size_t whylen);
    /* Optional (NULL: one core). The CPU MLP's "split" (CFG->split, config/README.md): M's instance owns
     * CPUS[0 .. COUNT - 1] (COUNT >= 2), its calls come from a thread on CPUS[0] (its worker) or on a core
     * none of the others is; M may split its layers over them with helper threads pinned to CPUS[1 ..]
     * (never elsewhere), deciding by measuring both here (the calling thread pinned to CPUS[0] meanwhile,
     * its own affinity restored after) for "auto". 0, or -1 with ERR: "on" and a helper cannot start on
     * its CPU (with "auto": logged, and M stays on one core). */
    int (*split) (backend_model_t *m, const int *cpus, size_t count, const model_config_t *cfg, char *err,
                  size_t errlen);
    /* Optional (NULL or "": no split asked): what the split decided, with the measured numbers, for
     * /models and the load's log line. */
    const char *(*split_text) (const backend_model_t *m);
} backend_iface_t;

extern const backend_iface_t backend_cpu_iface;

/* Stream slots one instance holds: max_streams over the instances, rounded up (a stream lives on
 * the instance stream_id % instances). */
static inline uint32_t backend_stream_slots (const model_config_t *cfg)
{
    return (cfg->max_streams + cfg->instances - 1) / (cfg->instances ? cfg->instances : 1);
}

/* Whether B can hold weights in D (every backend holds f32). */
static inline bool backend_holds (const backend_iface_t *b, weight_dtype_t d)
{
    return d == WEIGHT_DTYPE_F32 || (b->weight_dtypes & (1u << d)) != 0;
}

/* The weight dtypes B holds, as text ("f32 only", "f32, f16 and bf16 only") in BUF. */
static inline const char *backend_holds_text (const backend_iface_t *b, char *buf, size_t len)
{
    size_t used = (size_t) snprintf (buf, len, "f32");
    int left = __builtin_popcount (b->weight_dtypes & ~1u);
    for (int d = 1; d < WEIGHT_DTYPE_COUNT && used < len; d++)
        if (b->weight_dtypes & (1u << d))
            used += (size_t) snprintf (buf + used, len - used, "%s%s", --left ? ", " : " and ", weight_dtype_name ((weight_dtype_t) d));
    if (used < len)
        snprintf (buf + used, len - used, " only");
    return buf;
}

/* act (V) in float32, as the CPU backends apply it. */
static inline float backend_activate (float v, activation_t a)
{
    switch (a) {
    case ACTIVATION_RELU: return v > 0.0f ? v : 0.0f;
    case ACTIVATION_SIGMOID: return 1.0f / (1.0f + expf (-v));
    case ACTIVATION_TANH: return tanhf (v);
    case ACTIVATION_NONE: break;
    }
    return v;
}

/* The most rows one infer call takes: a request's max_rows, or a batch of several requests. */
static inline uint32_t backend_rows (const model_config_t *cfg)
{
    return cfg->max_batch_rows > cfg->max_rows ? cfg->max_batch_rows : cfg->max_rows;
}

/* A load's last step (the CPU recurrent backends'): B->infer once on ROWS rows of zeros (IN floats a
 * row in, OUT out), which pages in the weights and buffers and has the loader resolve the target
 * clones before the first request. 0, or -1 when memory runs out. */
static inline int backend_warm (const backend_iface_t *B, backend_model_t *m, uint32_t rows, size_t in, size_t out,
                                char *err, size_t errlen)
{
    float *probe = floats_zeroed ((size_t) rows * out), *x = floats_zeroed ((size_t) rows * in);
    if (probe && x)
        B->infer (m, x, rows, probe, err, errlen);
    const int rc = probe && x ? 0 : -1;
    free (probe);
    free (x);
    return rc;
}

#endif
