/* A device process (serving/devices.h): maps the server's shared region, then answers the server's
 * control calls (load, start, unload the model instances placed on its device) and runs their
 * workers. It exits when the server closes the control socket (after unloading everything) or
 * dies (PR_SET_PDEATHSIG), and with status 70 as soon as its device's context is lost (at once, from
 * the thread that saw the sticky error) or 71 when one of its instances can no longer run (a kernel
 * past its watchdog): the server then answers what it held and starts it again. */
#define _GNU_SOURCE
#include "serving/devices.h"
#include "serving/devices_life.h"
#include "serving/model_impl.h"

#include "backends/backends.h"
#include "backends/box_source.h"
#include "base/log.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define MODELS_MAX 256
#define HEALTH_MS 20
/* While fronts publish into its persistent kernels' mailboxes, nothing else here asks CUDA whether
 * the context still runs: the health poll does, every millisecond (a stream query per such
 * instance, a microsecond or two: ~0.2% of this thread, off every request's path). */
#define HEALTH_MAILBOX_MS 1
#define EXIT_LOST 70         /* its device's context is lost (devices.c says so) */
#define EXIT_INSTANCE 71     /* an instance cannot run, the context fine (its kernel stopped answering) */

typedef struct {
    uint64_t token;
    model_t *m;
    bool parked;            /* a warm spare's: its instances' resident kernels stopped until DEV_START */
} held_t;

static held_t s_held[MODELS_MAX];
static size_t s_held_count;
static devices_fault_fn s_fault_fn;

void devices_set_fault_handler (devices_fault_fn fn) { s_fault_fn = fn; }

static held_t *s_find (uint64_t token)
{
    for (size_t i = 0; i < s_held_count; i++)
        if (s_held[i].token == token)
            return &s_held[i];
    return NULL;
}

static void s_forget (uint64_t token)
{
    held_t *h = s_find (token);
    if (h) {
        model_destroy (&h->m);
        *h = s_held[--s_held_count];
    }
}

/* DEV_LOAD with resolve_only (model_plan): "auto" measured here, nothing kept; its resolved cfg and
 * what it measured go back in the description. */
static int s_resolve (const dev_request_t *rq, dev_reply_t *rp)
{
    model_plan_t *plan = calloc (1, sizeof *plan);
    if (!plan) {
        snprintf (rp->error, sizeof rp->error, "model \"%s\": out of memory in device process", rq->cfg.name);
        return -1;
    }
    const int rc = placement_threads.plan (NULL, &rq->cfg, plan, rp->error, sizeof rp->error);
    rp->desc.cfg = plan->cfg;
    snprintf (rp->desc.selected_by, sizeof rp->desc.selected_by, "measurement");
    rp->desc.candidate_count = (uint32_t) plan->candidate_count;
    memcpy (rp->desc.candidates, plan->candidates, sizeof rp->desc.candidates);
    free (plan);
    return rc;
}

/* DEV_LOAD: the instances of RQ->here (those placed on this device) loaded in this process's threads
 * and timed: the model's description, as placement_threads filled it, is the reply. */
static int s_load (const dev_request_t *rq, dev_reply_t *rp)
{
    s_forget (rq->token);       /* a rejoin after a failed start */
    if (rq->resolve_only)
        return s_resolve (rq, rp);
    if (s_held_count == MODELS_MAX) {
        snprintf (rp->error, sizeof rp->error, "model \"%s\": a device process holds at most %d models", rq->cfg.name,
                  MODELS_MAX);
        return -1;
    }
    const model_env_t env = { .busy_poll = rq->busy_poll, .spin_ns = rq->spin_ns,
                              .max_message_bytes = rq->max_message_bytes, .only = rq->here };
    model_t *m = model_load (&rq->cfg, NULL, &placement_threads, &env, rp->error, sizeof rp->error);
    if (!m)
        return -1;
    /* a warm spare holds no resident kernel: each one stopped once it loaded and warmed */
    for (uint32_t i = 0; rq->park && i < m->instance_count; i++)
        if (m->instances[i].impl && (!m->iface->park || m->iface->park (m->instances[i].impl) != 0)) {
            snprintf (rp->error, sizeof rp->error, "model \"%s\": instance %u: its resident kernel could not be parked "
                      "in the standby process", rq->cfg.name, i);
            model_destroy (&m);
            return -1;
        }
    if (rq->park && (m->desc.can & MODEL_CAN_PARK))
        log_info ("device process %d (standby): model \"%s\" loaded, its resident kernel(s) parked until it is promoted",
                  (int) getpid (), rq->cfg.name);
    rp->desc = m->desc;
    for (uint32_t i = 0; i < CONFIG_MAX_INSTANCES; i++)
        rp->cpus[i] = -1;
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (m->instances[i].impl) {
            rp->cpus[i] = m->instances[i].cpu_count ? m->instances[i].cpus[0] : -1;
            rp->green_sms[i] = atomic_load (&m->instances[i].green_sms);
        }
    s_held[s_held_count++] = (held_t) { .token = rq->token, .m = m, .parked = rq->park };
    return 0;
}

/* DEV_START: the loaded instances onto the server's rings (in the region), their workers started. */
static int s_start (const dev_request_t *rq, dev_reply_t *rp)
{
    held_t *h = s_find (rq->token);
    if (!h) {
        snprintf (rp->error, sizeof rp->error, "start: no model loaded for this token");
        return -1;
    }
    model_t *m = h->m;
    for (uint32_t i = 0; i < m->instance_count; i++)
        if (m->instances[i].started)
            return 0;       /* started already (a rejoin came first): once only */
    /* a promoted spare's parked kernels launched again, before anything publishes to them */
    for (uint32_t i = 0; h->parked && i < m->instance_count; i++)
        if ((rq->here >> i & 1) && m->instances[i].impl
            && m->iface->unpark (m->instances[i].impl, rp->error, sizeof rp->error) != 0)
            return -1;
    h->parked = false;
    m->job_count = rq->job_count;
    m->drift = (_Atomic uint32_t *) rq->drift;
    m->inline_way = (model_inline_t) rq->inline_way;
    m->lane_count = rq->lane_count;
    for (uint32_t k = 0; k < m->lane_count && k < CONFIG_MAX_FRONTS; k++)
        m->lanes[k].front = (waker_t *) rq->front[k];
    for (uint32_t i = 0; i < m->instance_count; i++) {
        instance_t *in = &m->instances[i];
        if (!(rq->here >> i & 1))
            continue;
        in->sh = (instance_shared_t *) rq->shared[i];
        in->wake = &in->sh->wake;
        if (model_instance_buffers (m, in, rp->error, sizeof rp->error) != 0)
            return -1;
        /* before its worker starts: from here on both publish through the region's copy */
        if (m->inline_way == INLINE_CLAIM_MAILBOX && m->iface->share_box
            && m->iface->share_box (in->impl, &in->sh->box) == 0)
            atomic_store (&in->sh->box_ready, true);
    }
    for (uint32_t i = 0; i < m->instance_count; i++)
        if ((rq->here >> i & 1) && model_start_worker (m, &m->instances[i], rp->error, sizeof rp->error) != 0)
            return -1;
    return 0;
}

static int s_fault (const dev_request_t *rq, int device, dev_reply_t *rp)
{
    if (!s_fault_fn) {
        snprintf (rp->error, sizeof rp->error, "fault injection exists in test builds only (sigserve-test)");
        return -1;
    }
    backend_model_t *target = NULL;
    for (size_t k = 0; k < s_held_count && !target; k++) {
        model_t *m = s_held[k].m;
        for (uint32_t i = 0; i < m->instance_count && !target; i++)
            if (m->instances[i].impl && m->desc.cfg.type == MODEL_TYPE_MLP)
                target = m->instances[i].impl;
    }
    return s_fault_fn (device, rq->fault, target, rp->error, sizeof rp->error);
}

/* Whether this process must go, as its exit status: EXIT_LOST when its device's context is lost
 * (or a kernel a front waits on ended), EXIT_INSTANCE when an instance cannot run (a persistent
 * kernel past its watchdog); 0 while all is well. */
static int s_lost (int device, char *why, size_t len)
{
    const gpu_backend_t *gpu = device >= 0 ? backends_gpu (NULL, 0) : NULL;
    const char *fault = gpu ? gpu->device_fault (device) : NULL;
    if (fault) {
        snprintf (why, len, "device %d: %s", device, fault);
        return EXIT_LOST;
    }
    for (size_t k = 0; k < s_held_count; k++) {
        model_t *m = s_held[k].m;
        for (uint32_t i = 0; i < m->instance_count; i++) {
            instance_t *in = &m->instances[i];
            if (in->started && !atomic_load (&in->sh->available)) {
                snprintf (why, len, "model %s instance %u: %s", m->desc.cfg.name, i, in->sh->state);
                return EXIT_INSTANCE;
            }
            /* a front waiting on its mailbox makes no CUDA call: its kernel's end shows here */
            const char *stopped = in->started && atomic_load (&in->sh->box_ready) && m->iface->kernel_stopped
                                      ? m->iface->kernel_stopped (in->impl) : NULL;
            if (stopped) {
                snprintf (why, len, "model %s instance %u: %s", m->desc.cfg.name, i, stopped);
                return EXIT_LOST;
            }
        }
    }
    return 0;
}

static life_t *s_life;      /* this process's life, watched by the server (devices_life.h) */

/* A sticky CUDA error, the moment a worker's wait (or a stream query) sees it: the context is gone,
 * so is this process, at once, saying why first; the server recovers as soon as this thread's exit
 * begins (devices_life.h). */
static void s_on_fault (int device, const char *fault)
{
    char why[200];
    snprintf (why, sizeof why, "device %d: %s", device, fault);
    if (s_life)
        life_say (s_life, EXIT_LOST, why);
    log_error ("device process %d: device %d: %s; its GPU context is lost, exiting so the server starts it again",
               (int) getpid (), device, fault);
    _exit (EXIT_LOST);      /* no clean-up: a lost context may hang in it */
}

/* Whether a front may be waiting on a mailbox here (the instance's box shared): no CUDA call of a
 * worker would notice a lost context then. */
static bool s_fronts_wait (void)
{
    for (size_t k = 0; k < s_held_count; k++)
        for (uint32_t i = 0; i < s_held[k].m->instance_count; i++)
            if (s_held[k].m->instances[i].started && atomic_load (&s_held[k].m->instances[i].sh->box_ready))
                return true;
    return false;
}

static void *s_arena_alloc (void *arena, size_t bytes) { return shm_alloc_aligned (arena, bytes, 4096, false); }

int devices_process_main (int argc, char **argv)
{
    int device = 0, control = -1, region_fd = -1;
    unsigned long base = 0, arena_base = 0, life_at = 0;
    size_t size = 0, arena_size = 0;
    pid_t parent = 0;
    const char *level = "info", *format = "text";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp (argv[i], "--device-process") == 0)
            device = atoi (argv[i + 1]);
        else if (strcmp (argv[i], "--control") == 0)
            control = atoi (argv[i + 1]);
        else if (strcmp (argv[i], "--region") == 0)
            sscanf (argv[i + 1], "%d:%lx:%zu", &region_fd, &base, &size);
        else if (strcmp (argv[i], "--arena") == 0)
            sscanf (argv[i + 1], "%lx:%zu", &arena_base, &arena_size);
        else if (strcmp (argv[i], "--life") == 0)
            life_at = strtoul (argv[i + 1], NULL, 0);
        else if (strcmp (argv[i], "--parent") == 0)
            parent = (pid_t) atoi (argv[i + 1]);
        else if (strcmp (argv[i], "--log-level") == 0)
            level = argv[i + 1];
        else if (strcmp (argv[i], "--log-format") == 0)
            format = argv[i + 1];
    }
    /* the region first: nothing else (CUDA least of all) may take its addresses */
    char err[512];
    shm_t *shm = control >= 0 && region_fd >= 0 ? shm_attach (region_fd, base, size, err, sizeof err) : NULL;
    if (!shm) {
        fprintf (stderr, "sigserve --device-process: %s\n", control < 0 ? "started by hand: the server starts it" : err);
        return 2;
    }
    prctl (PR_SET_PDEATHSIG, SIGKILL);
    if (parent && getppid () != parent)
        return 1;
    /* held by this thread until the process ends: the server sees the end the moment it begins */
    if (life_at)
        life_hold (s_life = (life_t *) (uintptr_t) life_at);
    /* the server drains at SIGINT/SIGTERM and then closes the control socket: only that stops us */
    signal (SIGINT, SIG_IGN);
    signal (SIGTERM, SIG_IGN);
    signal (SIGHUP, SIG_IGN);
    log_level_t lv;
    if (log_level_from_name (level, &lv) == 0)
        log_set_level (lv);
    log_set_format (strcmp (format, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT);
    /* the persistent kernels' mailboxes from this process's share of the region, for the fronts */
    shm_t *arena = arena_base && arena_size ? shm_arena_new ((void *) arena_base, arena_size) : NULL;
    if (arena)
        box_source_set (s_arena_alloc, arena);
    char role[16];
    if (device == DEVICE_CPU_TEST || device == DEVICE_CPU_TEST_OTHER)
        snprintf (role, sizeof role, device == DEVICE_CPU_TEST ? "dev-cpu" : "dev-cpu1");
    else
        snprintf (role, sizeof role, "dev%d", device);
    threads_set_role (role);
    const gpu_backend_t *gpu = device >= 0 ? backends_gpu (NULL, 0) : NULL;
    if (gpu && gpu->on_fault)
        gpu->on_fault (s_on_fault);
    dev_request_t *rq = calloc (1, sizeof *rq);
    dev_reply_t *rp = calloc (1, sizeof *rp);
    if (!rq || !rp)
        return 1;
    for (;;) {
        struct pollfd p = { .fd = control, .events = POLLIN };
        int n = poll (&p, 1, gpu && s_fronts_wait () ? HEALTH_MAILBOX_MS : HEALTH_MS);
        char why[256];
        const int lost = s_lost (device, why, sizeof why);
        if (lost) {
            if (s_life)
                life_say (s_life, lost, why);
            log_error ("device process %d: %s; exiting so the server starts it again", (int) getpid (), why);
            _exit (lost);       /* no clean-up: a lost context may hang in it */
        }
        if (n <= 0)
            continue;
        ssize_t got = recv (control, rq, sizeof *rq, 0);
        if (got == 0 || (got < 0 && errno != EINTR))
            break;
        if (got != (ssize_t) sizeof *rq)
            continue;
        memset (rp, 0, sizeof *rp);
        int rc = 0;
        switch (rq->op) {
        case DEV_LOAD: rc = s_load (rq, rp); break;
        case DEV_START: rc = s_start (rq, rp); break;
        case DEV_UNLOAD: s_forget (rq->token); break;
        case DEV_FAULT: rc = s_fault (rq, device, rp); break;
        case DEV_PREPARE: rp->prepared = model_prepare_here (&rq->cfg, device, rp->error, sizeof rp->error); break;
        default:
            snprintf (rp->error, sizeof rp->error, "unknown control operation %u", rq->op);
            rc = -1;
        }
        rp->status = rc;
        if (send (control, rp, sizeof *rp, MSG_NOSIGNAL) != (ssize_t) sizeof *rp)
            break;
        if (rq->op == DEV_FAULT && rc == 0 && rq->fault == DEV_FAULT_EXIT)
            raise (SIGKILL);
    }
    while (s_held_count)
        s_forget (s_held[0].token);
    free (rq);
    free (rp);
    if (arena)
        box_source_set (NULL, NULL);
    shm_destroy (&arena);
    if (s_life)
        life_release (s_life);
    shm_destroy (&shm);
    return 0;
}
