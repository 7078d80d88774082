/* Worker groups ("group" in a model's configuration): models that share their workers. Worker k of
 * a group serves instance k of every member model, taking the member whose oldest request came
 * first (worker.c); each model keeps its own queue, limits, stats and backend contexts. Fewer
 * threads than one per instance of every model, so several models on a few cores do not each keep
 * a thread to wake. The groups are the process's: a model loaded at a reload joins the group that
 * the models it replaces are still in. */
#define _GNU_SOURCE
#include "serving/model_impl.h"

#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GROUPS_WORKERS_MAX 256

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static group_worker_t *s_workers[GROUPS_WORKERS_MAX];      /* every group's workers, by name and index */

int group_join (instance_t *in, char *err, size_t errlen)
{
    const model_t *m = in->model;
    pthread_mutex_lock (&s_lock);
    group_worker_t *w = NULL;
    int free_slot = -1;
    for (int i = 0; i < GROUPS_WORKERS_MAX && !w; i++) {
        if (!s_workers[i]) {
            if (free_slot < 0)
                free_slot = i;
        } else if (s_workers[i]->index == in->index && strcmp (s_workers[i]->name, m->desc.cfg.group) == 0)
            w = s_workers[i];
    }
    if (!w) {
        if (free_slot < 0 || !(w = calloc (1, sizeof *w))) {
            pthread_mutex_unlock (&s_lock);
            snprintf (err, errlen, "model \"%s\": group \"%s\": no room for another group worker", m->desc.cfg.name,
                      m->desc.cfg.group);
            return -1;
        }
        snprintf (w->name, sizeof w->name, "%s", m->desc.cfg.group);
        w->index = in->index;
        w->busy_poll = m->busy_poll;
        spin_init (&w->spin, m->spin_ns);
        pthread_mutex_init (&w->lock, NULL);
        atomic_init (&w->version, 0);
        atomic_init (&w->version_seen, 0);
        atomic_init (&w->stop, false);
        if (waker_init (&w->wake) != 0 || pthread_create (&w->thread, NULL, worker_group_main, w) != 0) {
            waker_release (&w->wake);
            free (w);
            pthread_mutex_unlock (&s_lock);
            snprintf (err, errlen, "model \"%s\": group \"%s\": cannot start its worker %u", m->desc.cfg.name, m->desc.cfg.group,
                      in->index);
            return -1;
        }
        s_workers[free_slot] = w;
    }
    pthread_mutex_lock (&w->lock);
    int rc = 0;
    if (w->member_count == GROUP_MEMBERS_MAX) {
        snprintf (err, errlen, "model \"%s\": group \"%s\" has %d models already", m->desc.cfg.name, m->desc.cfg.group,
                  GROUP_MEMBERS_MAX);
        rc = -1;
    } else {
        w->members[w->member_count++] = in;
        in->group = w;
        in->wake = &w->wake;
        atomic_fetch_add (&w->version, 1);
    }
    pthread_mutex_unlock (&w->lock);
    pthread_mutex_unlock (&s_lock);
    waker_wake (&w->wake);
    return rc;
}

void group_leave (instance_t *in)
{
    group_worker_t *w = in->group;
    if (!w)
        return;
    /* what it holds is served first (nothing more comes: the model no longer takes requests) */
    while (instance_queued (in) > 0) {
        waker_wake (&w->wake);
        usleep (200);
    }
    pthread_mutex_lock (&s_lock);
    pthread_mutex_lock (&w->lock);
    for (size_t k = 0; k < w->member_count; k++)
        if (w->members[k] == in) {
            w->members[k] = w->members[--w->member_count];
            break;
        }
    const uint64_t version = atomic_fetch_add (&w->version, 1) + 1;
    const bool last = w->member_count == 0;
    pthread_mutex_unlock (&w->lock);
    /* the worker no longer looks at IN once it took the new list (it may be in IN's turn now) */
    while (atomic_load (&w->version_seen) < version) {
        waker_wake (&w->wake);
        usleep (100);
    }
    in->group = NULL;
    in->wake = &in->sh->wake;
    if (last) {
        atomic_store (&w->stop, true);
        waker_wake (&w->wake);
        pthread_join (w->thread, NULL);
        for (int i = 0; i < GROUPS_WORKERS_MAX; i++)
            if (s_workers[i] == w)
                s_workers[i] = NULL;
        waker_release (&w->wake);
        pthread_mutex_destroy (&w->lock);
        free (w);
    }
    pthread_mutex_unlock (&s_lock);
}
