/* The warm spare of each device (server.standby; devices_impl.h): a second device process, prepared
 * in the background a model at a time between the supervisor's watches (each model's DEV_LOAD, its
 * resident kernel parked, or its DEV_PREPARE; never a DEV_START), promoted when the device's process
 * is lost (each model then only started on the existing rings) and made anew after. */
#define _GNU_SOURCE
#include "serving/devices_impl.h"

#include "base/log.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Ends P's spare, if any (KILL: at once), and forgets what it held. */
void standby_end (proc_t *p, bool kill_it)
{
    spare_t *sp = &p->spare;
    devices_reap (&sp->pid, &sp->fd, sp->life, kill_it);
    for (size_t k = 0; k < sp->staged_count; k++)
        free (sp->staged[k].rp);
    sp->staged_count = sp->loaded_count = 0;
    sp->state = SPARE_NONE;
    sp->stale = false;
}

/* What P's spare did for tenant ARG, or NULL (nothing). */
static const staged_t *s_staged (const proc_t *p, void *arg)
{
    for (size_t k = 0; k < p->spare.staged_count; k++)
        if (p->spare.staged[k].arg == arg)
            return &p->spare.staged[k];
    return NULL;
}

/* P's spare (lock held, P's lost process let go of: devices.c) becomes its process: its tenants prepared and
 * rejoined there, those it loaded already started only. true when every tenant rejoined; else the
 * spare is ended and P is started again as without one. T0: when the loss was noticed. */
bool standby_promote (devices_t *self, proc_t *p, uint64_t t0)
{
    char name[32], err[512] = "";
    devices_name (p->device, name, sizeof name);
    spare_t *sp = &p->spare;
    int status;
    const pid_t gone = sp->pid > 0 && !sp->stale ? waitpid (sp->pid, &status, WNOHANG) : 0;
    if (gone == sp->pid)
        sp->pid = 0;    /* reaped: nothing to end (its pid may be another's by now) */
    if (sp->pid <= 0 || sp->stale || gone != 0) {
        if (sp->pid > 0)
            log_warn ("device %s: its standby process %d is %s; starting a new process instead", name, (int) sp->pid,
                      sp->stale ? "stale" : "gone");
        standby_end (p, true);
        return false;
    }
    /* the spare's share of the region goes with it; the lost process's is the next spare's */
    void *arena = p->arena;
    p->arena = sp->arena;
    sp->arena = arena;
    life_t *life = p->life;     /* and its watched life likewise */
    p->life = sp->life;
    sp->life = life;
    p->pid = sp->pid;
    p->fd = sp->fd;
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
    standby_end (p, true);      /* what it staged is the device's process's now; nothing left to end */
    if (rc != 0) {
        p->failed_restarts++;
        log_error ("device %s: the promoted standby process failed: %s; starting a new process instead", name, err);
        devices_reap_proc (p, true);
        return false;
    }
    p->restarts++;
    p->promotions++;
    p->last_recovery_ms = (clock_now_ns () - t0) / 1e6;
    log_info ("device %s: back after %.1f ms: standby process %d promoted, %zu model(s) rejoined (%zu loaded there "
              "before)", name, p->last_recovery_ms, (int) p->pid, rejoined, ready);
    return true;
}

/* After SP failed at NOW: when it is tried again (the wait doubles each time, to SPARE_RETRY_MAX_NS). */
uint64_t standby_backoff (spare_t *sp, uint64_t now)
{
    const uint64_t wait = sp->backoff_ns ? sp->backoff_ns : SPARE_RETRY_NS;
    sp->retry_ns = now + wait;
    sp->backoff_ns = wait * 2 < SPARE_RETRY_MAX_NS ? wait * 2 : SPARE_RETRY_MAX_NS;
    return wait;
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
bool standby_step (devices_t *self)
{
    const uint64_t now = clock_now_ns ();
    for (int i = 0; atomic_load (&self->standby) && i < DEVICES_MAX && !atomic_load (&self->stopping); i++) {
        proc_t *p = &self->procs[i];
        spare_t *sp = &p->spare;
        char name[32], err[512] = "";
        devices_name (p->device, name, sizeof name);
        if (sp->stale) {
            log_info ("device %s: standby process %d made anew (a model it held was unloaded)", name, (int) sp->pid);
            standby_end (p, true);
        }
        tenant_t *t = p->used && p->pid > 0 && !p->gave_up ? s_unstaged (self, p) : NULL;
        if (!t) {
            if (sp->state == SPARE_LOADING && sp->pid > 0) {
                sp->state = SPARE_READY;
                sp->backoff_ns = 0;
                log_info ("device %s: standby process %d ready in %.1f ms (%zu of %zu model(s) loaded there; the rest load "
                          "when it is promoted)", name, (int) sp->pid, (now - sp->started_ns) / 1e6, sp->loaded_count,
                          sp->staged_count);
            }
            continue;
        }
        if (sp->pid <= 0) {
            /* the share of the region the lost process had is the new spare's: not while it may
             * still be written (its GPU context not torn down yet) */
            if (now < sp->retry_ns || p->departing > 0)
                continue;
            if (devices_spawn (self, p->device, &sp->arena, &sp->life, &sp->pid, &sp->fd, "standby ", err, sizeof err)
                != 0) {
                log_warn ("%s; tried again in %.0f s", err, standby_backoff (sp, now) / 1e9);
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
            rc = devices_exchange (fd, device, rq, rp, err, sizeof err);
            pthread_mutex_lock (&self->lock);
        }
        free (rq);
        if (rc != 0 || sp->pid <= 0) {
            const pid_t was = sp->pid;
            free (rp);
            standby_end (p, true);
            log_warn ("device %s: standby process %d could not load a model: %s; made anew in %.0f s", name, (int) was,
                      rc != 0 ? err : "ended meanwhile", standby_backoff (sp, clock_now_ns ()) / 1e9);
            continue;
        }
        const bool loaded = load && rq_op == DEV_LOAD, prepared = load && rq_op == DEV_PREPARE && rp->prepared >= 0;
        bool still = false;     /* unloaded while the spare loaded it (no lock): a later model may reuse its token */
        for (size_t k = 0; k < self->tenant_count && !still; k++)
            still = self->tenants[k].device == p->device && self->tenants[k].t.arg == arg;
        if (!still) {
            free (rp);
            sp->stale |= loaded;
            return true;
        }
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

void standby_forget (proc_t *p, void *arg)
{
    /* a spare that loaded it holds a model whose token a later one may reuse: it is made anew; one
     * that only prepared for it forgets it (a later model may have its address) */
    for (size_t k = 0; k < p->spare.staged_count; k++)
        if (p->spare.staged[k].arg == arg) {
            if (p->spare.staged[k].rp)
                p->spare.stale = true;
            else
                p->spare.staged[k--] = p->spare.staged[--p->spare.staged_count];
        }
}
