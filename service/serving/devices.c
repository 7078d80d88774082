/* The device processes, the server's side (devices.h): starting them, the control calls, and the
 * supervisor thread that notices a lost process, has the front answer what it held, and starts it
 * again, or promotes the device's warm spare (server.standby), which it prepares in the background
 * a model at a time between its watches. */
#define _GNU_SOURCE
#include "serving/devices.h"

#include "base/log.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define REGION_BYTES (64ull << 30)      /* reserved; used as blocks are written */
#define TENANTS_MAX 256
#define RESTART_ATTEMPTS 5
#define RESTART_FIRST_DELAY_MS 100
#define SWEEP_WAIT_NS 2000000000ull     /* the front answers what a lost process held within this */
#define SUPERVISE_MS 20
/* Each GPU's process takes the mailboxes of its persistent kernels from its own part of the region
 * (a front writes requests into them too): reserved like the rest, used as mailboxes are made. */
#define ARENA_BYTES (256ull << 20)
#define ARENA_ALIGN 4096u
#define SPARE_RETRY_NS 5000000000ull   /* after a spare could not be started or load a model */

/* A device's spare process (server.standby): loaded as far as it may be, nothing started. */
typedef enum { SPARE_NONE = 0, SPARE_LOADING, SPARE_READY } spare_state_t;

typedef struct {
    void *arg;                          /* the tenant */
    dev_reply_t *rp;                    /* its load's reply there (DEV_LOAD), or NULL: not loaded there */
    bool prepared;                      /* its DEV_PREPARE done there instead (a resident kernel's model) */
} staged_t;

typedef struct {
    spare_state_t state;
    pid_t pid;
    int fd;
    void *arena;                        /* its own share of the region; the device's once promoted */
    bool stale;                         /* a tenant it holds went away: it is made anew */
    uint64_t started_ns, retry_ns;
    staged_t staged[TENANTS_MAX];       /* the tenants of the device it has been asked about, in order */
    size_t staged_count, loaded_count;
} spare_t;

typedef struct {
    int device;                         /* CUDA device, or DEVICE_CPU_TEST */
    bool used;
    pid_t pid;                          /* 0: not running */
    bool reaped;                        /* its exit status was collected already */
    int fd;                             /* the control socket, -1 when not running */
    bool gave_up;
    void *arena;                        /* its share of the region (ARENA_BYTES), for good */
    uint64_t losses, restarts, failed_restarts;
    double last_recovery_ms;
    spare_t spare;
    uint64_t promotions, spares_started;
} proc_t;

typedef struct {
    int device;
    dev_tenant_t t;
} tenant_t;

struct _devices_t {
    shm_t *shm;
    waker_t *fronts;                    /* CONFIG_MAX_FRONTS of them, in the region */
    char exe[256], log_level[16], log_format[16];
    pthread_mutex_t lock;               /* calls, process starts and the tenant list */
    proc_t procs[DEVICES_MAX];
    tenant_t tenants[TENANTS_MAX];
    size_t tenant_count;
    bool cpu_models;
    _Atomic bool standby;               /* server.standby (set after the supervisor started) */
    pthread_t supervisor;
    _Atomic bool stopping;
};

void devices_place_cpu_models (devices_t *self, bool on) { self->cpu_models = on; }
void devices_set_standby (devices_t *self, bool on) { atomic_store (&self->standby, on); }
bool devices_cpu_models_placed (const devices_t *self) { return self && self->cpu_models; }
void *devices_alloc (devices_t *self, size_t bytes) { return shm_alloc (self->shm, bytes); }
void devices_free (devices_t *self, void *block) { shm_free (self->shm, block); }
waker_t *devices_front_waker (devices_t *self, uint32_t front) { return &self->fronts[front]; }

static void s_release_fronts (devices_t *self)
{
    for (int k = 0; self->fronts && k < CONFIG_MAX_FRONTS; k++)
        waker_release (&self->fronts[k]);
}

static const char *s_device_name (int device, char *buf, size_t len)
{
    if (device == DEVICE_CPU_TEST)
        snprintf (buf, len, "cpu (test)");
    else if (device == DEVICE_CPU_TEST_OTHER)
        snprintf (buf, len, "cpu1 (test)");
    else
        snprintf (buf, len, "%d", device);
    return buf;
}

static proc_t *s_proc (devices_t *self, int device, bool create)
{
    for (int i = 0; i < DEVICES_MAX; i++)
        if (self->procs[i].used && self->procs[i].device == device)
            return &self->procs[i];
    if (!create)
        return NULL;
    for (int i = 0; i < DEVICES_MAX; i++)
        if (!self->procs[i].used) {
            self->procs[i] = (proc_t) { .device = device, .used = true, .fd = -1 };
            self->procs[i].spare.fd = -1;
            return &self->procs[i];
        }
    return NULL;
}

/* Starts a process for DEVICE (lock held): its pid and control socket into *PID and *FD, its share
 * of the region *ARENA (made on first use, kept across restarts: the new process starts it afresh).
 * WHAT: "" or "standby ", for the log. 0, or -1 with ERR. */
static int s_spawn_child (devices_t *self, int device_id, void **arena_p, pid_t *pid_p, int *fd_p, const char *what,
                          char *err, size_t errlen)
{
    char name[32];
    int sv[2];
    if (socketpair (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf (err, errlen, "device %s: cannot make the control socket: %s", s_device_name (device_id, name, sizeof name),
                  strerror (errno));
        return -1;
    }
    /* The child's end crosses exec; the parent closes its copy right after, so no later child has it. */
    fcntl (sv[1], F_SETFD, 0);
    char device[16], control[16], region[64], arena[64], parent[16];
    if (!*arena_p)
        *arena_p = shm_alloc_aligned (self->shm, ARENA_BYTES, ARENA_ALIGN, false);
    snprintf (arena, sizeof arena, "%#lx:%llu", (unsigned long) (uintptr_t) *arena_p,
              *arena_p ? (unsigned long long) ARENA_BYTES : 0ull);
    snprintf (device, sizeof device, "%d", device_id);
    snprintf (control, sizeof control, "%d", sv[1]);
    snprintf (region, sizeof region, "%d:%#lx:%zu", shm_fd (self->shm), (unsigned long) shm_base (self->shm),
              shm_size (self->shm));
    snprintf (parent, sizeof parent, "%d", (int) getpid ());
    char *argv[] = { self->exe, "--device-process", device, "--control", control, "--region", region,
                     "--arena", arena, "--parent", parent, "--log-level", self->log_level, "--log-format", self->log_format, NULL };
    pid_t pid;
    int rc = posix_spawn (&pid, self->exe, NULL, NULL, argv, environ);
    close (sv[1]);
    if (rc != 0) {
        close (sv[0]);
        snprintf (err, errlen, "device %s: cannot start its %sprocess (%s): %s", s_device_name (device_id, name, sizeof name),
                  what, self->exe, strerror (rc));
        return -1;
    }
    *pid_p = pid;
    *fd_p = sv[0];
    log_info ("device %s: %sprocess %d started", s_device_name (device_id, name, sizeof name), what, (int) pid);
    return 0;
}

/* Starts P's process (lock held). 0, or -1 with ERR. */
static int s_spawn (devices_t *self, proc_t *p, char *err, size_t errlen)
{
    if (s_spawn_child (self, p->device, &p->arena, &p->pid, &p->fd, "", err, errlen) != 0)
        return -1;
    p->gave_up = false;
    return 0;
}

/* Ends the process *PID (its control socket *FD; REAPED: its status was collected already): closing
 * the socket makes it unload and exit; KILL: at once. */
static void s_reap_child (pid_t *pid, int *fd, bool reaped, bool kill_it)
{
    if (*pid > 0 && !reaped) {
        if (kill_it)
            kill (*pid, SIGKILL);
        if (*fd >= 0)
            close (*fd);
        *fd = -1;
        int status;
        uint64_t until = clock_now_ns () + 5000000000ull;
        while (waitpid (*pid, &status, WNOHANG) == 0) {
            if (clock_now_ns () > until) {
                kill (*pid, SIGKILL);
                waitpid (*pid, &status, 0);
                break;
            }
            usleep (1000);
        }
    }
    if (*fd >= 0)
        close (*fd);
    *fd = -1;
    *pid = 0;
}

/* Ends P's process (lock held). */
static void s_reap (proc_t *p, bool kill_it)
{
    s_reap_child (&p->pid, &p->fd, p->reaped, kill_it);
    p->reaped = false;
}

/* Ends P's spare, if any (KILL: at once), and forgets what it held. */
static void s_spare_end (proc_t *p, bool kill_it)
{
    spare_t *sp = &p->spare;
    s_reap_child (&sp->pid, &sp->fd, false, kill_it);
    for (size_t k = 0; k < sp->staged_count; k++)
        free (sp->staged[k].rp);
    sp->staged_count = sp->loaded_count = 0;
    sp->state = SPARE_NONE;
    sp->stale = false;
}

/* One request and its reply on the control socket FD of DEVICE's process: 0, or -1 with ERR (-2: the
 * request was sent and the process exited before its reply). */
static int s_exchange_fd (int fd, int device, const dev_request_t *rq, dev_reply_t *rp, char *err, size_t errlen)
{
    char name[32];
    if (send (fd, rq, sizeof *rq, MSG_NOSIGNAL) != (ssize_t) sizeof *rq) {
        snprintf (err, errlen, "device %s: its process is gone (%s)", s_device_name (device, name, sizeof name),
                  strerror (errno));
        return -1;
    }
    for (;;) {
        ssize_t n = recv (fd, rp, sizeof *rp, 0);
        if (n == (ssize_t) sizeof *rp)
            break;
        if (n < 0 && errno == EINTR)
            continue;
        snprintf (err, errlen, "device %s: its process exited during the call", s_device_name (device, name, sizeof name));
        return -2;
    }
    if (rp->status != 0) {
        snprintf (err, errlen, "%s", rp->error);
        return -1;
    }
    return 0;
}

/* One request and its reply on P (lock held). */
static int s_exchange (proc_t *p, const dev_request_t *rq, dev_reply_t *rp, char *err, size_t errlen)
{
    return s_exchange_fd (p->fd, p->device, rq, rp, err, errlen);
}

int devices_call (devices_t *self, int device, const dev_request_t *rq, dev_reply_t *rp, char *err, size_t errlen)
{
    /* the supervisor calls it from a tenant's rejoin, with the lock held */
    const bool locked = pthread_equal (pthread_self (), self->supervisor);
    if (!locked)
        pthread_mutex_lock (&self->lock);
    proc_t *p = s_proc (self, device, true);
    int rc = -1;
    if (!p)
        snprintf (err, errlen, "more than %d devices", DEVICES_MAX);
    else if (p->gave_up && p->pid == 0)
        snprintf (err, errlen, "device %d: its process could not be started again after %d attempts; restart the "
                  "server", device, RESTART_ATTEMPTS);
    else if (p->pid > 0 || s_spawn (self, p, err, errlen) == 0)
        rc = s_exchange (p, rq, rp, err, errlen) == 0 ? 0 : -1;
    if (!locked)
        pthread_mutex_unlock (&self->lock);
    return rc;
}

void devices_add_tenant (devices_t *self, int device, const dev_tenant_t *tenant)
{
    pthread_mutex_lock (&self->lock);
    if (self->tenant_count < TENANTS_MAX)
        self->tenants[self->tenant_count++] = (tenant_t) { .device = device, .t = *tenant };
    pthread_mutex_unlock (&self->lock);
}

void devices_remove_tenant (devices_t *self, int device, void *arg)
{
    pthread_mutex_lock (&self->lock);
    for (size_t i = 0; i < self->tenant_count; i++)
        if (self->tenants[i].device == device && self->tenants[i].t.arg == arg) {
            self->tenants[i] = self->tenants[--self->tenant_count];
            break;
        }
    /* a spare that loaded it holds a model whose token a later one may reuse: it is made anew; one
     * that only prepared for it forgets it (a later model may have its address) */
    proc_t *p = s_proc (self, device, false);
    for (size_t k = 0; p && k < p->spare.staged_count; k++)
        if (p->spare.staged[k].arg == arg) {
            if (p->spare.staged[k].rp)
                p->spare.stale = true;
            else
                p->spare.staged[k--] = p->spare.staged[--p->spare.staged_count];
        }
    pthread_mutex_unlock (&self->lock);
}

/* What P's spare did for tenant ARG, or NULL (nothing). */
static const staged_t *s_staged (const proc_t *p, void *arg)
{
    for (size_t k = 0; k < p->spare.staged_count; k++)
        if (p->spare.staged[k].arg == arg)
            return &p->spare.staged[k];
    return NULL;
}

/* P's spare (lock held, P's lost process reaped) becomes its process: its tenants prepared and
 * rejoined there, those it loaded already started only. true when every tenant rejoined; else the
 * spare is ended and P is started again as without one. T0: when the loss was noticed. */
static bool s_promote (devices_t *self, proc_t *p, uint64_t t0)
{
    char name[32], err[512] = "";
    s_device_name (p->device, name, sizeof name);
    spare_t *sp = &p->spare;
    int status;
    if (sp->pid <= 0 || sp->stale || waitpid (sp->pid, &status, WNOHANG) != 0) {
        if (sp->pid > 0)
            log_warn ("device %s: its standby process %d is %s; starting a new process instead", name, (int) sp->pid,
                      sp->stale ? "stale" : "gone");
        s_spare_end (p, true);
        return false;
    }
    /* the spare's share of the region goes with it; the lost process's is the next spare's */
    void *arena = p->arena;
    p->arena = sp->arena;
    sp->arena = arena;
    p->pid = sp->pid;
    p->fd = sp->fd;
    p->reaped = false;
    p->gave_up = false;
    sp->pid = 0;
    sp->fd = -1;
    log_info ("device %s: process %d started (the standby, promoted)", name, (int) p->pid);
    for (size_t i = 0; i < self->tenant_count; i++) {
        const staged_t *st = s_staged (p, self->tenants[i].t.arg);
        if (self->tenants[i].device == p->device && self->tenants[i].t.prepare && !(st && (st->rp || st->prepared)))
            self->tenants[i].t.prepare (self->tenants[i].t.arg, p->device);
    }
    int rc = 0;
    size_t rejoined = 0, ready = 0;
    for (size_t i = 0; rc == 0 && i < self->tenant_count; i++)
        if (self->tenants[i].device == p->device) {
            const staged_t *st = s_staged (p, self->tenants[i].t.arg);
            const dev_reply_t *loaded = st ? st->rp : NULL;
            rc = self->tenants[i].t.rejoin (self->tenants[i].t.arg, p->device, loaded, err, sizeof err);
            rejoined += rc == 0;
            ready += rc == 0 && loaded;
        }
    s_spare_end (p, true);      /* what it staged is the device's process's now; nothing left to end */
    if (rc != 0) {
        p->failed_restarts++;
        log_error ("device %s: the promoted standby process failed: %s; starting a new process instead", name, err);
        s_reap (p, true);
        return false;
    }
    p->restarts++;
    p->promotions++;
    p->last_recovery_ms = (clock_now_ns () - t0) / 1e6;
    log_info ("device %s: back after %.1f ms: standby process %d promoted, %zu model(s) rejoined (%zu loaded there "
              "before)", name, p->last_recovery_ms, (int) p->pid, rejoined, ready);
    return true;
}

/* P's process is gone or must go (lock held; T0: when that was seen, its exit status collected
 * since): its tenants lose it, the front answers what it held, and its spare is promoted, or it is
 * started again with backoff until every tenant rejoined. */
static void s_recover (devices_t *self, proc_t *p, const char *why, uint64_t t0)
{
    char name[32];
    s_device_name (p->device, name, sizeof name);
    p->losses++;
    log_error ("device %s: process %d lost (%s); its instances are unavailable until it is back", name, (int) p->pid, why);
    s_reap (p, true);
    log_info ("device %s: the lost process ended %.1f ms after its loss was seen", name, (clock_now_ns () - t0) / 1e6);
    for (size_t i = 0; i < self->tenant_count; i++)
        if (self->tenants[i].device == p->device)
            self->tenants[i].t.lost (self->tenants[i].t.arg, p->device, why);
    for (int k = 0; k < CONFIG_MAX_FRONTS; k++)
        waker_wake (&self->fronts[k]);
    for (size_t i = 0; i < self->tenant_count; i++)
        while (self->tenants[i].device == p->device && !self->tenants[i].t.swept (self->tenants[i].t.arg, p->device)
               && clock_now_ns () - t0 < SWEEP_WAIT_NS && !atomic_load (&self->stopping))
            usleep (200);
    if (atomic_load (&self->standby) && !atomic_load (&self->stopping) && s_promote (self, p, t0))
        return;
    unsigned delay_ms = RESTART_FIRST_DELAY_MS;
    for (int attempt = 1; attempt <= RESTART_ATTEMPTS && !atomic_load (&self->stopping); attempt++) {
        char err[512] = "";
        int rc = s_spawn (self, p, err, sizeof err);
        for (size_t i = 0; rc == 0 && i < self->tenant_count; i++)
            if (self->tenants[i].device == p->device && self->tenants[i].t.prepare)
                self->tenants[i].t.prepare (self->tenants[i].t.arg, p->device);
        size_t rejoined = 0;
        for (size_t i = 0; rc == 0 && i < self->tenant_count; i++)
            if (self->tenants[i].device == p->device) {
                rc = self->tenants[i].t.rejoin (self->tenants[i].t.arg, p->device, NULL, err, sizeof err);
                rejoined += rc == 0;
            }
        if (rc == 0) {
            p->restarts++;
            p->last_recovery_ms = (clock_now_ns () - t0) / 1e6;
            log_info ("device %s: back after %.1f ms (attempt %d): process %d, %zu model(s) rejoined", name,
                      p->last_recovery_ms, attempt, (int) p->pid, rejoined);
            return;
        }
        p->failed_restarts++;
        log_error ("device %s: attempt %d of %d to start it again failed: %s", name, attempt, RESTART_ATTEMPTS, err);
        s_reap (p, true);
        pthread_mutex_unlock (&self->lock);
        for (unsigned waited = 0; waited < delay_ms && !atomic_load (&self->stopping); waited += 10)
            usleep (10000);
        pthread_mutex_lock (&self->lock);
        delay_ms *= 2;
    }
    p->gave_up = true;
    log_error ("device %s: gave up after %d attempts; its models stay unavailable there until the server restarts",
               name, RESTART_ATTEMPTS);
}

/* The next tenant of DEVICE that P's spare was not asked about yet, or NULL. */
static tenant_t *s_unstaged (devices_t *self, const proc_t *p)
{
    for (size_t i = 0; i < self->tenant_count; i++) {
        if (self->tenants[i].device != p->device)
            continue;
        size_t k = 0;
        while (k < p->spare.staged_count && p->spare.staged[k].arg != self->tenants[i].t.arg)
            k++;
        if (k == p->spare.staged_count)
            return &self->tenants[i];
    }
    return NULL;
}

/* One step of the spares' preparation (lock held; the call to the spare made without it, so calls
 * and reloads go on meanwhile): a spare started for a device whose process serves a tenant, or one
 * more tenant loaded (or prepared) in it. true while a step remains (the supervisor then does not
 * sleep). */
static bool s_standby_step (devices_t *self)
{
    const uint64_t now = clock_now_ns ();
    for (int i = 0; atomic_load (&self->standby) && i < DEVICES_MAX && !atomic_load (&self->stopping); i++) {
        proc_t *p = &self->procs[i];
        spare_t *sp = &p->spare;
        char name[32], err[512] = "";
        s_device_name (p->device, name, sizeof name);
        if (sp->stale) {
            log_info ("device %s: standby process %d made anew (a model it held was unloaded)", name, (int) sp->pid);
            s_spare_end (p, true);
        }
        tenant_t *t = p->used && p->pid > 0 && !p->gave_up ? s_unstaged (self, p) : NULL;
        if (!t) {
            if (sp->state == SPARE_LOADING && sp->pid > 0) {
                sp->state = SPARE_READY;
                log_info ("device %s: standby process %d ready in %.1f ms (%zu of %zu model(s) loaded there; the rest load "
                          "when it is promoted)", name, (int) sp->pid, (now - sp->started_ns) / 1e6, sp->loaded_count,
                          sp->staged_count);
            }
            continue;
        }
        if (sp->pid <= 0) {
            if (now < sp->retry_ns)
                continue;
            if (s_spawn_child (self, p->device, &sp->arena, &sp->pid, &sp->fd, "standby ", err, sizeof err) != 0) {
                log_warn ("%s; tried again in %.0f s", err, SPARE_RETRY_NS / 1e9);
                sp->retry_ns = now + SPARE_RETRY_NS;
                continue;
            }
            p->spares_started++;
            sp->started_ns = now;
        }
        sp->state = SPARE_LOADING;
        dev_request_t *rq = calloc (1, sizeof *rq);
        dev_reply_t *rp = calloc (1, sizeof *rp);
        void *arg = t->t.arg;
        const bool load = rq && rp && t->t.stage && t->t.stage (arg, p->device, rq);
        const uint32_t rq_op = rq ? rq->op : 0;
        int rc = rq && rp ? 0 : -1;
        if (load) {
            const int fd = sp->fd, device = p->device;
            pthread_mutex_unlock (&self->lock);
            rc = s_exchange_fd (fd, device, rq, rp, err, sizeof err);
            pthread_mutex_lock (&self->lock);
        }
        free (rq);
        if (rc != 0 || sp->pid <= 0) {
            log_warn ("device %s: standby process %d could not load a model: %s; made anew in %.0f s", name,
                      (int) sp->pid, rc != 0 ? err : "ended meanwhile", SPARE_RETRY_NS / 1e9);
            free (rp);
            s_spare_end (p, true);
            sp->retry_ns = clock_now_ns () + SPARE_RETRY_NS;
            continue;
        }
        const bool loaded = load && rq_op == DEV_LOAD, prepared = load && rq_op == DEV_PREPARE && rp->prepared >= 0;
        if (!loaded) {
            free (rp);
            rp = NULL;
        }
        sp->staged[sp->staged_count++] = (staged_t) { .arg = arg, .rp = rp, .prepared = prepared };
        sp->loaded_count += loaded;
        return true;
    }
    return false;
}

static void *s_supervise (void *arg)
{
    devices_t *self = arg;
    threads_set_role ("devices");
    while (!atomic_load (&self->stopping)) {
        struct pollfd fds[2 * DEVICES_MAX];
        int which[2 * DEVICES_MAX], n = 0;
        bool spare[2 * DEVICES_MAX];
        pthread_mutex_lock (&self->lock);
        for (int i = 0; i < DEVICES_MAX; i++)
            for (int sp = 0; sp < 2; sp++) {
                const int fd = sp ? self->procs[i].spare.fd : self->procs[i].fd;
                if (self->procs[i].used && fd >= 0) {
                    fds[n] = (struct pollfd) { .fd = fd, .events = POLLRDHUP };
                    spare[n] = sp;
                    which[n++] = i;
                }
            }
        const bool more = s_standby_step (self);
        pthread_mutex_unlock (&self->lock);
        poll (fds, (nfds_t) n, more ? 0 : SUPERVISE_MS);
        pthread_mutex_lock (&self->lock);
        const uint64_t now = clock_now_ns ();
        for (int k = 0; k < n && !atomic_load (&self->stopping); k++) {
            proc_t *p = &self->procs[which[k]];
            if (spare[k]) {     /* a spare gone while it waited: made anew later */
                if (p->spare.fd == fds[k].fd && (fds[k].revents & (POLLHUP | POLLRDHUP | POLLERR))) {
                    char name[32];
                    log_warn ("device %s: standby process %d ended while it waited; made anew in %.0f s",
                              s_device_name (p->device, name, sizeof name), (int) p->spare.pid, SPARE_RETRY_NS / 1e9);
                    s_spare_end (p, true);
                    p->spare.retry_ns = now + SPARE_RETRY_NS;
                }
                continue;
            }
            if (p->fd != fds[k].fd)
                continue;       /* restarted or stopped meanwhile */
            if (fds[k].revents & (POLLHUP | POLLRDHUP | POLLERR)) {
                int status = 0;
                char why[128] = "its control socket closed";
                const uint64_t seen = clock_now_ns ();
                /* the socket closes as the process exits, a moment before its status can be collected */
                bool exited = false;
                for (int waited = 0; waited < 500 && !exited; waited++)
                    if (!(exited = waitpid (p->pid, &status, WNOHANG) == p->pid))
                        usleep (1000);
                if (exited) {
                    if (WIFSIGNALED (status))
                        snprintf (why, sizeof why, "killed by signal %d", WTERMSIG (status));
                    else
                        snprintf (why, sizeof why, "exited with status %d%s", WEXITSTATUS (status),
                                  WEXITSTATUS (status) == 70   ? ": its GPU context was lost (a trap or a lost device)"
                                  : WEXITSTATUS (status) == 71 ? ": an instance could not run (e.g. a kernel past its watchdog)"
                                                               : "");
                    p->reaped = true;   /* s_reap must not wait for it */
                }
                s_recover (self, p, why, seen);
                continue;
            }
            bool hung = false;
            for (size_t i = 0; i < self->tenant_count && !hung; i++)
                hung = self->tenants[i].device == p->device && self->tenants[i].t.hung (self->tenants[i].t.arg, p->device, now);
            if (hung)
                s_recover (self, p, "a launch ran past its model's watchdog_ms; the process was killed", now);
        }
        pthread_mutex_unlock (&self->lock);
    }
    return NULL;
}

devices_t *devices_new (const char *exe, const char *log_level, const char *log_format, char *err, size_t errlen)
{
    devices_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init (&self->lock, NULL);
    atomic_init (&self->stopping, false);
    atomic_init (&self->standby, false);
    snprintf (self->exe, sizeof self->exe, "%s", exe);
    snprintf (self->log_level, sizeof self->log_level, "%s", log_level);
    snprintf (self->log_format, sizeof self->log_format, "%s", log_format);
    if (!(self->shm = shm_new (REGION_BYTES, err, errlen))) {
        free (self);
        return NULL;
    }
    /* a waker for each front there may be (server.fronts), every one's eventfd inherited */
    self->fronts = shm_alloc (self->shm, CONFIG_MAX_FRONTS * sizeof *self->fronts);
    bool made = self->fronts != NULL;
    for (int k = 0; self->fronts && k < CONFIG_MAX_FRONTS; k++)
        self->fronts[k].fd = -1;
    for (int k = 0; made && k < CONFIG_MAX_FRONTS; k++)
        made = waker_init_inheritable (&self->fronts[k]) == 0;
    if (!made) {
        snprintf (err, errlen, "cannot make the fronts' wakers: %s", strerror (errno));
        s_release_fronts (self);
        shm_destroy (&self->shm);
        free (self);
        return NULL;
    }
    if (pthread_create (&self->supervisor, NULL, s_supervise, self) != 0) {
        snprintf (err, errlen, "cannot start the device supervisor thread");
        s_release_fronts (self);
        shm_destroy (&self->shm);
        free (self);
        return NULL;
    }
    return self;
}

void devices_destroy (devices_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    devices_t *self = *self_p;
    atomic_store (&self->stopping, true);
    pthread_join (self->supervisor, NULL);
    for (int i = 0; i < DEVICES_MAX; i++)
        if (self->procs[i].used) {
            s_spare_end (&self->procs[i], false);
            s_reap (&self->procs[i], false);
        }
    s_release_fronts (self);
    shm_destroy (&self->shm);
    pthread_mutex_destroy (&self->lock);
    free (self);
    *self_p = NULL;
}

size_t devices_list (devices_t *self, devices_info_t *out, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock (&self->lock);
    for (int i = 0; i < DEVICES_MAX && n < cap; i++) {
        const proc_t *p = &self->procs[i];
        if (p->used)
            out[n++] = (devices_info_t) { .device = p->device, .running = p->pid > 0, .losses = p->losses,
                                          .restarts = p->restarts, .failed_restarts = p->failed_restarts,
                                          .last_recovery_ms = p->last_recovery_ms, .promotions = p->promotions,
                                          .spares_started = p->spares_started,
                                          .standby_ready = p->spare.state == SPARE_READY && !p->spare.stale };
    }
    pthread_mutex_unlock (&self->lock);
    return n;
}

int devices_inject (devices_t *self, int device, uint32_t fault, char *err, size_t errlen)
{
    pthread_mutex_lock (&self->lock);
    proc_t *p = s_proc (self, device, false);
    int rc = -1;
    if (!p || p->pid <= 0)
        snprintf (err, errlen, "device %d has no running process", device);
    else {
        dev_request_t *rq = calloc (1, sizeof *rq);
        dev_reply_t *rp = calloc (1, sizeof *rp);
        if (rq && rp) {
            rq->op = DEV_FAULT;
            rq->fault = fault;
            rc = s_exchange (p, rq, rp, err, errlen);
            /* a trap noticed at once may end the process before it answers: what was asked happened */
            if (rc == -2 && fault == DEV_FAULT_TRAP)
                rc = 0;
        }
        free (rq);
        free (rp);
    }
    pthread_mutex_unlock (&self->lock);
    return rc;
}
