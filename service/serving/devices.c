/* The device processes, the server's side (devices.h): starting them, the control calls, and the
 * supervisor thread that notices a lost process, has the front answer what it held, and starts it
 * again, or promotes the device's warm spare (server.standby, standby.c), which it prepares in the
 * background a model at a time between its watches. */
#define _GNU_SOURCE
#include "serving/devices_impl.h"

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
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Starts P's process (lock held). 0, or -1 with ERR. */
static int s_spawn (devices_t *self, proc_t *p, char *err, size_t errlen)
{
    devices_reap_departing (p, true);   /* the share of the region it had is the new one's */
    if (devices_spawn (self, p->device, &p->arena, &p->life, &p->pid, &p->fd, "", err, errlen) != 0)
        return -1;
    p->gave_up = false;
    return 0;
}

/* One request and its reply on P (lock held). */
static int s_exchange (proc_t *p, const dev_request_t *rq, dev_reply_t *rp, char *err, size_t errlen)
{
    return devices_exchange (p->fd, p->device, rq, rp, err, errlen);
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
    proc_t *p = s_proc (self, device, false);
    if (p)
        standby_forget (p, arg);
    pthread_mutex_unlock (&self->lock);
}

/* P's lost process let go of (lock held; T0: when its loss was seen): killed (once its threads
 * stopped, devices_life.h's fence, what it shares with the server is the server's) and left to the
 * supervisor to reap while its GPU context is torn down (tens of ms); where /proc cannot tell, reaped
 * here first. WHY: the cause the server found, or NULL: what the process said or its exit status. */
static void s_let_go (proc_t *p, const char *why_found, uint64_t t0, char *why, size_t len)
{
    const pid_t pid = p->pid;
    if (pid > 0)
        kill (pid, SIGKILL);
    const bool quiet = pid > 0 && life_quiet (pid, LET_GO_WAIT_NS);
    if (why_found)
        snprintf (why, len, "%s", why_found);
    else if (p->life)
        life_why (p->life, pid, why, len);
    else
        snprintf (why, len, "its control socket closed");
    if (!quiet) {
        devices_reap_proc (p, true);
        return;
    }
    if (p->fd >= 0)
        close (p->fd);
    p->fd = -1;
    p->departing = pid;
    p->departing_since = t0;
    p->pid = 0;
}

/* P's process is gone or must go (lock held; T0: when that was seen; WHY_FOUND as s_let_go): its
 * tenants lose it, the front answers what it held, and its spare is promoted, or it is started again
 * with backoff until every tenant rejoined. */
static void s_recover (devices_t *self, proc_t *p, const char *why_found, uint64_t t0)
{
    char name[32], why[256];
    devices_name (p->device, name, sizeof name);
    p->losses++;
    const pid_t was = p->pid;
    s_let_go (p, why_found, t0, why, sizeof why);
    log_error ("device %s: process %d lost (%s); its instances are unavailable until it is back", name, (int) was, why);
    log_info ("device %s: its threads stopped %.1f ms after its loss was seen%s", name, (clock_now_ns () - t0) / 1e6,
              p->departing ? " (it is reaped once it ends)" : ", and it ended");
    for (size_t i = 0; i < self->tenant_count; i++)
        if (self->tenants[i].device == p->device)
            self->tenants[i].t.lost (self->tenants[i].t.arg, p->device, why);
    for (int k = 0; k < CONFIG_MAX_FRONTS; k++)
        waker_wake (&self->fronts[k]);
    for (size_t i = 0; i < self->tenant_count; i++)
        while (self->tenants[i].device == p->device && !self->tenants[i].t.swept (self->tenants[i].t.arg, p->device)
               && clock_now_ns () - t0 < SWEEP_WAIT_NS && !atomic_load (&self->stopping))
            usleep (200);
    if (atomic_load (&self->standby) && !atomic_load (&self->stopping) && standby_promote (self, p, t0))
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
        devices_reap_proc (p, true);
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

/* Whether a launch on P's device ran past what its tenant allows (lock held): its watchdog_ms, or,
 * with the device's standby ready, its stall switch (dev_tenant_t.hung); the cause into WHY. */
static bool s_hung (devices_t *self, proc_t *p, uint64_t now, char *why, size_t len)
{
    const bool standby = atomic_load (&self->standby) && p->spare.state == SPARE_READY && !p->spare.stale;
    for (size_t i = 0; i < self->tenant_count; i++)
        if (self->tenants[i].device == p->device
            && self->tenants[i].t.hung (self->tenants[i].t.arg, p->device, now, standby, why, len))
            return true;
    return false;
}

static void *s_supervise (void *arg)
{
    devices_t *self = arg;
    threads_set_role ("devices");
    while (!atomic_load (&self->stopping)) {
        struct pollfd fds[2 * DEVICES_MAX + 1];
        int which[2 * DEVICES_MAX], n = 0;
        bool spare[2 * DEVICES_MAX], recovered[DEVICES_MAX] = { false };
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
        fds[n] = (struct pollfd) { .fd = self->wake_fd, .events = POLLIN };
        const bool more = standby_step (self);
        pthread_mutex_unlock (&self->lock);
        poll (fds, (nfds_t) n + 1, more ? 0 : SUPERVISE_MS);
        pthread_mutex_lock (&self->lock);
        uint64_t woken;
        if (fds[n].revents & POLLIN && read (self->wake_fd, &woken, sizeof woken) < 0)
            log_debug ("device supervisor: reading its wake: %s", strerror (errno));
        /* a process whose main thread died (its watcher saw it): its loss, seen then */
        for (int i = 0; i < DEVICES_MAX && !atomic_load (&self->stopping); i++) {
            proc_t *p = &self->procs[i];
            if (p->used && p->pid > 0 && p->life && atomic_load (&p->life->died) == p->pid) {
                s_recover (self, p, NULL, atomic_load (&p->life->died_ns));
                recovered[i] = true;
            }
        }
        const uint64_t now = clock_now_ns ();
        for (int k = 0; k < n && !atomic_load (&self->stopping); k++) {
            proc_t *p = &self->procs[which[k]];
            if (spare[k]) {     /* a spare gone while it waited: made anew later */
                if (p->spare.fd == fds[k].fd && (fds[k].revents & (POLLHUP | POLLRDHUP | POLLERR))) {
                    char name[32];
                    const pid_t was = p->spare.pid;
                    standby_end (p, true);
                    log_warn ("device %s: standby process %d ended while it waited; made anew in %.0f s",
                              devices_name (p->device, name, sizeof name), (int) was,
                              standby_backoff (&p->spare, now) / 1e9);
                }
                continue;
            }
            /* restarted or stopped meanwhile (its fd's number may be a new process's by now) */
            if (recovered[which[k]] || p->fd != fds[k].fd)
                continue;
            if (fds[k].revents & (POLLHUP | POLLRDHUP | POLLERR)) {
                s_recover (self, p, NULL, now);
                recovered[which[k]] = true;
            }
        }
        for (int i = 0; i < DEVICES_MAX && !atomic_load (&self->stopping); i++) {
            proc_t *p = &self->procs[i];
            char why[256];
            if (p->used && p->pid > 0 && !recovered[i] && s_hung (self, p, now, why, sizeof why))
                s_recover (self, p, why, now);
            if (p->used)
                devices_reap_departing (p, false);
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
    if ((self->wake_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0
        || pthread_create (&self->supervisor, NULL, s_supervise, self) != 0) {
        snprintf (err, errlen, "cannot start the device supervisor thread");
        if (self->wake_fd >= 0)
            close (self->wake_fd);
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
            standby_end (&self->procs[i], false);
            devices_reap_proc (&self->procs[i], false);
        }
    close (self->wake_fd);
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
        char name[32];
        log_warn ("device %s: injecting a fault into process %d (%s; POST /debug/fault)",
                  devices_name (device, name, sizeof name), (int) p->pid,
                  fault == DEV_FAULT_TRAP ? "trap" : fault == DEV_FAULT_EXIT ? "kill" : "hang");
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
