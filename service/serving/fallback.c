/* A model's CPU fallback (issue 38, item 2; model_impl.h's model_fallback_*): a hidden second model
 * of the same configuration on the CPU, in this process's threads, loaded and warmed beside the
 * model, that takes its requests while none of its own instances is available (a lost device
 * process, a GPU context gone). It has its own instances, workers, rings and timing; the requests it
 * runs stay the model's jobs (its lanes' pools), so the fronts collect and answer them as the
 * model's, with InferReply.backend "cpu (fallback)" (dispatch.c).
 *
 * Whether a model gets one ("fallback", config/README.md): "off" never; an object always where it
 * has something to fall back from (a GPU backend, or instances in device processes: the test build's
 * CPU device process); "auto" (the default) one CPU instance where the model runs on a GPU, its
 * type's CPU backend holds its weight_dtype, and its weights file is at most
 * FALLBACK_AUTO_MAX_BYTES: a model that small runs one request on a core in microseconds to a few
 * hundred of them (tick_mlp's 0.6 MiB: a one-row launch of 2.4 us + 3.7 us a row, timed at load on
 * one core of a 2-core AVX-512 VM), a degraded but useful service; a larger one would
 * queue behind itself and hold memory a GPU host may need. A CPU model never gets one by "auto". */
#define _GNU_SOURCE
#include "serving/model_impl.h"

#include "backends/backends.h"
#include "base/log.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define FALLBACK_AUTO_MAX_BYTES (64ull << 20)

/* Whether M gets a fallback, and of how many instances; else WHY (empty: nothing worth saying). */
static bool s_wanted (const model_t *m, uint32_t *instances, char *why, size_t whylen)
{
    const model_config_t *cfg = &m->desc.cfg;
    const fallback_config_t *f = &m->given.fallback;
    const bool gpu = m->iface->device == BACKEND_DEVICE_GPU;
    why[0] = '\0';
    if (f->mode == FALLBACK_OFF)
        return false;
    if (f->mode == FALLBACK_CPU && !gpu && !m->where->loses_workers) {
        snprintf (why, whylen, "its instances run on the CPU in this process: there is nothing to fall back from");
        return false;
    }
    if (f->mode == FALLBACK_AUTO && !gpu)
        return false;
    const backend_iface_t *cpu = backends_built (cfg->type, BACKEND_CPU);
    if (!cpu || !backend_holds (cpu, cfg->weight_dtype)) {
        snprintf (why, whylen, "the CPU backend of a%s %s does not hold %s weights", cfg->type == MODEL_TYPE_MLP ? "n" : "",
                  model_type_name (cfg->type), weight_dtype_name (cfg->weight_dtype));
        return false;
    }
    struct stat st;
    if (f->mode == FALLBACK_AUTO && (stat (cfg->weights, &st) != 0 || (uint64_t) st.st_size > FALLBACK_AUTO_MAX_BYTES)) {
        snprintf (why, whylen, "\"fallback\": \"auto\" takes weights up to %llu MiB, %.200s is larger (or unreadable); "
                  "name {\"backend\": \"cpu\", \"instances\": N} to have one", FALLBACK_AUTO_MAX_BYTES >> 20,
                  strrchr (cfg->weights, '/') ? strrchr (cfg->weights, '/') + 1 : cfg->weights);
        return false;
    }
    *instances = f->mode == FALLBACK_CPU ? f->instances : 1;
    /* a stream is rebuilt from its instance's history (stream_history.h): a fallback instance each */
    if ((m->desc.can & MODEL_CAN_STREAM) && m->where->loses_workers)
        *instances = m->instance_count;
    return true;
}

#define FALLBACK_STALL_MIN_NS 5000000ull     /* 5 ms: a trap took ~340 ms to be reported on an H100 */
#define STALL_SWITCH_TIMES 4                /* the stall switch: this many stall_ns, */
#define STALL_SWITCH_MIN_NS 20000000ull     /* at least 20 ms */

int model_fallback_load (model_t *m, const model_env_t *env, char *err, size_t errlen)
{
    uint32_t instances = 0;
    char why[512];
    if (!s_wanted (m, &instances, why, sizeof why)) {
        if (why[0])
            log_warn ("model %s: no CPU fallback: %s", m->desc.cfg.name, why);
        return 0;
    }
    model_config_t cfg = m->given;
    /* its log lines and the messages of its workers name it as what it is */
    char name[sizeof cfg.name];
    snprintf (name, sizeof name, "%.*s (fallback)", (int) (sizeof cfg.name - sizeof " (fallback)"), m->given.name);
    memcpy (cfg.name, name, sizeof name);
    cfg.backend = BACKEND_CPU;
    cfg.instances = instances;
    cfg.fallback = (fallback_config_t) { .mode = FALLBACK_OFF };
    cfg.group[0] = '\0';            /* its own workers: a group's would share a GPU model's instances */
    cfg.cpu_count = 0;              /* the GPU instances' pinned cores are theirs */
    cfg.split = CPU_SPLIT_OFF;
    cfg.green_context = false;
    cfg.keep_warm_us = 0;           /* warmed at load; idle, it costs nothing */
    cfg.queue_depth = 1;            /* its own job pool stays unused (it runs the model's jobs): the smallest */
    cfg.large_buffers = cfg.large_buffers ? 1 : 0;
    cfg.device_count = 1;
    cfg.devices[0] = cfg.device = 0;
    model_env_t here = *env;
    here.stats = NULL;              /* its requests are counted as the model's, by the fronts */
    here.devices = NULL;
    here.only = 0;
    here.inline_us = 0;
    here.ring_jobs = m->job_count;    /* any of the model's jobs may be handed to it */
    char inner[512];
    model_t *fb = model_load (&cfg, NULL, &placement_threads, &here, inner, sizeof inner);
    if (fb && model_serve (fb, inner, sizeof inner) != 0)
        model_destroy (&fb);
    if (!fb && m->given.fallback.mode == FALLBACK_AUTO) {   /* not asked for: the model serves without */
        log_warn ("model %s: no CPU fallback: it did not load: %s", m->desc.cfg.name, inner);
        return 0;
    }
    if (!fb) {
        sig_set_error (err, errlen, "model \"%s\": its CPU fallback (\"fallback\", config/README.md): %s",
                       m->desc.cfg.name, inner);
        return -1;
    }
    /* each fallback instance rebuilds and records its streams in the history of the instance it
     * stands in for, where the model's own instance finds them again when it is back */
    if ((fb->desc.can & MODEL_CAN_STREAM) && m->where->loses_workers)
        for (uint32_t i = 0; i < fb->instance_count; i++)
            fb->instances[i].sh->history = m->instances[i].sh->history;
    m->fallback = fb;
    /* a stalled launch: 20 times the longest this model's batch should take, at least FALLBACK_STALL_MIN_NS */
    const uint64_t longest = 20 * model_launch_ns (m, m->batch_rows);
    m->stall_ns = longest > FALLBACK_STALL_MIN_NS ? longest : FALLBACK_STALL_MIN_NS;
    m->stall_switch_ns = STALL_SWITCH_TIMES * m->stall_ns > STALL_SWITCH_MIN_NS ? STALL_SWITCH_TIMES * m->stall_ns
                                                                              : STALL_SWITCH_MIN_NS;
    log_info ("model %s: CPU fallback of %u instance(s) loaded and warmed (serves only while no instance of the "
              "model is available, or one's launch has run over %.1f ms; in device processes with the standby "
              "ready, a launch past %.1f ms ends its process)", m->desc.cfg.name, fb->instance_count,
              m->stall_ns / 1e6, m->stall_switch_ns / 1e6);
    return 0;
}

void model_fallback_note (model_t *m, bool on)
{
    if (!m->fallback)
        return;
    bool was = !on;
    if (!atomic_compare_exchange_strong (&m->degraded, &was, on))
        return;
    if (on)
        log_warn ("model %s: no GPU instance available: serving on its CPU fallback", m->desc.cfg.name);
    else
        log_info ("model %s: back on %s", m->desc.cfg.name, m->iface->name);
}
