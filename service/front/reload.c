/* Reloads (server.h: server_reload, server_collect_retired; server_impl.h): the control thread posts
 * a command (bind new endpoints, unbind them again, swap the model set) into the front's mailbox and
 * waits; the front runs it between two requests. Replaced model sets retire once every request they
 * admitted is answered, and go back to the control thread to be destroyed. */
#define _GNU_SOURCE
#include "front/server_impl.h"

#include "base/log.h"
#include "serving/dispatch.h"
#include "serving/registry.h"

#include <stdio.h>
#include <string.h>

void front_answering (server_t *self)
{
    size_t n = 0;
    for (size_t i = 0; i < model_registry_count (self->models); i++)
        self->answering[n++] = model_registry_at (self->models, i);
    for (size_t r = 0; r < self->retiring_count; r++)
        for (size_t i = 0; i < model_registry_count (self->retiring[r]); i++)
            if (model_registry_owns (self->retiring[r], i))   /* else taken over by the current set */
                self->answering[n++] = model_registry_at (self->retiring[r], i);
    self->answering_count = n;
    for (size_t i = 0; i < n; i++)
        dispatch_attach (self->answering[i], self->wake);
}

void front_command (server_t *self)
{
    int cmd = atomic_load_explicit (&self->command, memory_order_acquire);
    if (cmd == CMD_NONE)
        return;
    int rc = 0;
    self->command_error[0] = '\0';
    if (cmd == CMD_BIND)
        rc = endpoints_add (self->endpoints, self->command_cfg, self->command_error, ERROR_MAX);
    if (cmd == CMD_UNBIND_ADDED)
        endpoints_drop_added (self->endpoints);
    else if (cmd == CMD_BIND && self->retiring_count == RETIRING_MAX) {
        snprintf (self->command_error, ERROR_MAX, "%d earlier reloads still have requests in flight; try again once "
                  "they are answered", RETIRING_MAX);
        endpoints_drop_added (self->endpoints);
        rc = -1;
    } else if (cmd == CMD_SERVE) {
        if (front_reply_buffer (self, self->command_models, self->command_error, ERROR_MAX) != 0)
            log_error ("serving: %s", self->command_error);
        self->models = self->command_models;
        front_answering (self);
        atomic_store (&self->loading, false);
    } else if (cmd == CMD_SWAP) {
        /* A reply buffer too small for the new models' outputs would answer their requests
         * INTERNAL (front_send); growing it can only fail when memory is gone. */
        if (front_reply_buffer (self, self->command_models, self->command_error, ERROR_MAX) != 0)
            log_error ("reload: %s", self->command_error);
        self->retiring[self->retiring_count++] = self->models;
        self->models = self->command_models;
        front_answering (self);
        endpoints_commit (self->endpoints, self->command_cfg);
        self->cfg.max_message_bytes = self->command_cfg->max_message_bytes;
        self->cfg.max_inflight_per_client = self->command_cfg->max_inflight_per_client;
        self->cfg.drain_ms = self->command_cfg->drain_ms;
    }
    self->command_result = rc;
    atomic_store_explicit (&self->command, CMD_NONE, memory_order_release);
    waker_wake (&self->command_done);
}

void front_retire (server_t *self)
{
    bool changed = false;
    for (size_t r = 0; r < self->retiring_count;) {
        model_registry_t *set = self->retiring[r];
        uint32_t inflight = 0;
        for (size_t i = 0; i < model_registry_count (set); i++)
            if (model_registry_owns (set, i))
                inflight += dispatch_inflight (model_registry_at (set, i));
        if (inflight == 0 && ring_push (&self->retired, set)) {
            self->retiring[r] = self->retiring[--self->retiring_count];
            changed = true;
            continue;
        }
        r++;
    }
    if (changed)
        front_answering (self);
    endpoints_close_idle (self->endpoints);
}

/* Posts CMD to the front and waits for it to be done. */
static int s_call (server_t *self, command_t cmd, const server_config_t *cfg, model_registry_t *models, char *err,
                   size_t errlen)
{
    self->command_cfg = cfg;
    self->command_models = models;
    atomic_store_explicit (&self->command, cmd, memory_order_release);
    waker_wake (self->wake);
    for (;;) {
        waker_prepare (&self->command_done);
        if (atomic_load_explicit (&self->command, memory_order_acquire) == CMD_NONE) {
            waker_cancel (&self->command_done);
            break;
        }
        waker_sleep (&self->command_done, 100000000ull);
    }
    if (self->command_result != 0)
        snprintf (err, errlen, "%s", self->command_error);
    return self->command_result;
}

static void s_log_restart_keys (const server_config_t *now, const server_config_t *next)
{
    if (now->io_threads != next->io_threads)
        log_warn ("reload: server.io_threads changed (%u -> %u): takes effect at the next restart; kept %u",
                  now->io_threads, next->io_threads, now->io_threads);
    if (now->cpu_count != next->cpu_count || memcmp (now->cpus, next->cpus, now->cpu_count * sizeof (int)) != 0)
        log_warn ("reload: server.cpus changed: takes effect at the next restart; kept the old list");
    if (strcmp (now->http, next->http) != 0)
        log_warn ("reload: server.http changed (\"%s\" -> \"%s\"): takes effect at the next restart; kept \"%s\"",
                  now->http, next->http, now->http);
    if (now->inline_us != next->inline_us)
        log_warn ("reload: server.inline_us changed (%u -> %u): applies to the models loaded from now on (new or "
                  "changed ones); the others keep %u", now->inline_us, next->inline_us, now->inline_us);
    if (now->gpu_processes != next->gpu_processes)
        log_warn ("reload: server.gpu_processes changed: takes effect at the next restart; kept %s",
                  now->gpu_processes ? "true" : "false");
    if (now->busy_poll != next->busy_poll)
        log_warn ("reload: server.busy_poll changed: takes effect at the next restart; kept %s",
                  now->busy_poll ? "true" : "false");
    if (now->heartbeat_ms != next->heartbeat_ms || now->max_connections != next->max_connections)
        log_warn ("reload: server.heartbeat_ms and max_connections apply to endpoints bound from now on");
    if (strcmp (now->curve.secret_key_file, next->curve.secret_key_file) != 0)
        log_warn ("reload: server.curve.secret_key_file changed: takes effect at the next restart; the allowlist "
                  "folder is re-read on every connection");
}

int server_reload (server_t *self, const config_t *cfg, char *err, size_t errlen)
{
    s_log_restart_keys (&self->cfg, &cfg->server);
    char why[ERROR_MAX];
    /* 1. New endpoints, bound next to the old ones (nothing is unbound yet). */
    if (s_call (self, CMD_BIND, &cfg->server, NULL, why, sizeof why) != 0) {
        snprintf (err, errlen, "%s", why);
        return -1;
    }
    /* 2. New and changed models, loaded and warmed aside; unchanged ones taken over. */
    size_t reused = 0;
    model_registry_t *next = model_registry_load (cfg, self->stats, self->models, &reused, why, sizeof why);
    if (!next) {
        s_call (self, CMD_UNBIND_ADDED, NULL, NULL, err, errlen);
        snprintf (err, errlen, "%s", why);
        return -1;
    }
    /* 3. The switch, between two requests (it cannot fail: the bind step checked for room). The
     * lock keeps readers of server_models (the HTTP thread) off the set while it changes. */
    pthread_mutex_lock (&self->lock);
    s_call (self, CMD_SWAP, &cfg->server, next, why, sizeof why);
    pthread_mutex_unlock (&self->lock);
    log_info ("reload: serving %zu model(s) (%zu unchanged, %zu loaded) on %zu endpoint(s)",
              model_registry_count (next), reused, model_registry_count (next) - reused, cfg->server.endpoint_count);
    return 0;
}

void server_serve (server_t *self, model_registry_t *models)
{
    char why[ERROR_MAX];
    pthread_mutex_lock (&self->lock);
    s_call (self, CMD_SERVE, &self->cfg, models, why, sizeof why);
    pthread_mutex_unlock (&self->lock);
}

void server_collect_retired (server_t *self)
{
    model_registry_t *set;
    pthread_mutex_lock (&self->lock);
    while ((set = ring_pop (&self->retired)) != NULL) {
        size_t owned = 0;
        for (size_t i = 0; i < model_registry_count (set); i++)
            owned += model_registry_owns (set, i);
        model_registry_destroy (&set);
        if (owned)
            log_info ("reload: %zu model(s) no longer served are unloaded", owned);
    }
    pthread_mutex_unlock (&self->lock);
}
