/* Reloads (server.h: server_reload, server_collect_retired; server_impl.h): the control thread posts
 * a command (bind new endpoints, unbind them again, swap the model set) into each front's mailbox in
 * turn and waits; the front runs it between two requests. A replaced model set retires from a front
 * once every request it admitted there is answered; once every front let go of it, the control
 * thread destroys it. */
#define _GNU_SOURCE
#include "front/server_impl.h"

#include "base/log.h"
#include "serving/dispatch.h"
#include "serving/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void front_answering (front_t *self)
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
        dispatch_attach (self->answering[i], self->index, self->wake);
}

void front_command (front_t *self)
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

void front_retire (front_t *self)
{
    bool changed = false;
    for (size_t r = 0; r < self->retiring_count;) {
        model_registry_t *set = self->retiring[r];
        uint32_t inflight = 0;
        for (size_t i = 0; i < model_registry_count (set); i++)
            if (model_registry_owns (set, i))
                inflight += dispatch_inflight (model_registry_at (set, i), self->index);
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
static int s_call (front_t *self, command_t cmd, const server_config_t *cfg, model_registry_t *models, char *err,
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
    if (now->fronts != next->fronts)
        log_warn ("reload: server.fronts changed (%u -> %u): takes effect at the next restart; kept %u", now->fronts,
                  next->fronts, now->fronts);
    if (now->gpu_processes != next->gpu_processes)
        log_warn ("reload: server.gpu_processes changed: takes effect at the next restart; kept %s",
                  now->gpu_processes ? "true" : "false");
    if (now->busy_poll != next->busy_poll)
        log_warn ("reload: server.busy_poll changed: takes effect at the next restart; kept %s",
                  now->busy_poll ? "true" : "false");
    if (now->transport != next->transport)
        log_warn ("reload: server.transport changed (%s -> %s): takes effect at the next restart; kept %s",
                  now->transport == TRANSPORT_ZMTP ? "zmtp" : "libzmq", next->transport == TRANSPORT_ZMTP ? "zmtp" : "libzmq",
                  now->transport == TRANSPORT_ZMTP ? "zmtp" : "libzmq");
    if ((now->heartbeat_ms != next->heartbeat_ms || now->max_connections != next->max_connections)
        && now->transport == TRANSPORT_LIBZMQ)
        log_warn ("reload: server.heartbeat_ms and max_connections apply to endpoints bound from now on");
    else if (now->heartbeat_ms != next->heartbeat_ms || now->max_connections != next->max_connections)
        log_warn ("reload: server.heartbeat_ms and max_connections changed: take effect at the next restart (zmtp)");
    if (strcmp (now->curve.secret_key_file, next->curve.secret_key_file) != 0)
        log_warn ("reload: server.curve.secret_key_file changed: takes effect at the next restart; the allowlist "
                  "folder is re-read on every connection");
}

void front_assign_endpoints (server_t *self, const server_config_t *now, const server_config_t *next, int *owner)
{
    /* zmtp with more fronts than endpoints: every front listens on every tcp:// endpoint (owner -1); the
     * transport is the running one (a reload does not change it) */
    const bool share = (now ? now->transport : next->transport) == TRANSPORT_ZMTP && self->front_count > next->endpoint_count;
    uint32_t count[CONFIG_MAX_FRONTS] = { 0 };
    for (size_t e = 0; e < next->endpoint_count; e++) {
        owner[e] = -2;
        if (share && strncmp (next->endpoints[e], "tcp://", 6) == 0) {
            owner[e] = -1;
            continue;
        }
        for (size_t c = 0; now && c < now->endpoint_count && owner[e] < -1; c++)
            if (strcmp (next->endpoints[e], now->endpoints[c]) == 0 && self->endpoint_front[c] >= 0)
                owner[e] = self->endpoint_front[c];
        if (owner[e] >= 0)
            count[owner[e]]++;
    }
    for (size_t e = 0; e < next->endpoint_count; e++)
        if (owner[e] < -1) {
            uint32_t least = 0;
            for (uint32_t k = 1; k < self->front_count; k++)
                least = count[k] < count[least] ? k : least;
            owner[e] = (int) least;
            count[least]++;
        }
    for (uint32_t k = 0; k < self->front_count; k++) {
        self->next[k] = *next;
        self->next[k].fronts = self->front_count;
        self->next[k].share_tcp = share;
        self->next[k].endpoint_count = 0;
    }
    for (size_t e = 0; e < next->endpoint_count; e++)
        for (uint32_t k = 0; k < self->front_count; k++)
            if (owner[e] == (int) k || owner[e] == -1) {
                server_config_t *mine = &self->next[k];
                memcpy (mine->endpoints[mine->endpoint_count++], next->endpoints[e], CONFIG_ENDPOINT_MAX);
            }
}

int server_reload (server_t *self, const config_t *cfg, char *err, size_t errlen)
{
    /* What binding the new endpoints would refuse, before any of them binds (endpoint.h), by the rules of
     * the transport that will bind them: the running one, since a change of server.transport waits for a
     * restart (the file's transport would pass an inproc:// endpoint that zmtp then cannot bind). The
     * copy is on the heap: a server_config_t is some 18 KiB. */
    server_config_t *bind = malloc (sizeof *bind);
    if (!bind) {
        snprintf (err, errlen, "out of memory");
        return -1;
    }
    *bind = cfg->server;
    bind->transport = self->cfg.transport;
    const int refused = endpoints_check (bind, err, errlen);
    free (bind);
    if (refused != 0) {
        const size_t n = strlen (err);
        if (cfg->server.transport != self->cfg.transport && n < errlen)
            snprintf (err + n, errlen - n, "; this server runs the %s transport until a restart (server.transport "
                      "takes effect then)", self->cfg.transport == TRANSPORT_ZMTP ? "zmtp" : "libzmq");
        return -1;
    }
    s_log_restart_keys (&self->cfg, &cfg->server);
    char why[ERROR_MAX];
    int owner[CONFIG_MAX_ENDPOINTS];
    front_assign_endpoints (self, &self->cfg, &cfg->server, owner);
    /* 1. New endpoints, bound next to the old ones by the fronts that take them (nothing is unbound yet). */
    for (uint32_t k = 0; k < self->front_count; k++)
        if (s_call (self->fronts[k], CMD_BIND, &self->next[k], NULL, why, sizeof why) != 0) {
            for (uint32_t b = 0; b < k; b++)
                s_call (self->fronts[b], CMD_UNBIND_ADDED, NULL, NULL, err, errlen);
            snprintf (err, errlen, "%s", why);
            return -1;
        }
    /* 2. New and changed models, loaded and warmed aside (with a lane for each front there is: the
     * count of fronts changes at a restart only); unchanged ones taken over. */
    config_t *load = malloc (sizeof *load);
    size_t reused = 0;
    model_registry_t *next = NULL;
    if (!load)
        snprintf (why, sizeof why, "out of memory");
    else {
        *load = *cfg;
        load->server.fronts = self->front_count;
        next = model_registry_load (load, self->stats, self->devices, self->models, &reused, why, sizeof why);
        free (load);
    }
    if (!next) {
        for (uint32_t k = 0; k < self->front_count; k++)
            s_call (self->fronts[k], CMD_UNBIND_ADDED, NULL, NULL, err, errlen);
        snprintf (err, errlen, "%s", why);
        return -1;
    }
    /* 3. The switch, front by front between two of its requests (it cannot fail: the bind step
     * checked for room). The lock keeps readers of server_models (the HTTP thread) off the set while
     * it changes. */
    pthread_mutex_lock (&self->lock);
    for (uint32_t k = 0; k < self->front_count; k++)
        s_call (self->fronts[k], CMD_SWAP, &self->next[k], next, why, sizeof why);
    self->models = next;
    const uint32_t fronts = self->cfg.fronts;
    const transport_t transport = self->cfg.transport;
    self->cfg = cfg->server;
    self->cfg.fronts = fronts;
    self->cfg.transport = transport;
    memcpy (self->endpoint_front, owner, sizeof owner);
    pthread_mutex_unlock (&self->lock);
    char loaded[1024];
    model_registry_loaded (next, loaded, sizeof loaded);
    log_info ("reload: serving %zu model(s) (%zu unchanged, %zu loaded%s%s) on %zu endpoint(s)",
              model_registry_count (next), reused, model_registry_count (next) - reused, loaded[0] ? ": " : "", loaded,
              cfg->server.endpoint_count);
    return 0;
}

void server_serve (server_t *self, model_registry_t *models)
{
    char why[ERROR_MAX];
    pthread_mutex_lock (&self->lock);
    for (uint32_t k = 0; k < self->front_count; k++)
        s_call (self->fronts[k], CMD_SERVE, &self->fronts[k]->cfg, models, why, sizeof why);
    self->models = models;
    atomic_store (&self->loading, false);
    pthread_mutex_unlock (&self->lock);
    log_info ("serving %zu model(s) on %zu endpoint(s)", model_registry_count (models), self->cfg.endpoint_count);
}

/* SET was let go of by one more front: destroyed once every front has. */
static void s_retired (server_t *self, model_registry_t *set)
{
    size_t i = 0;
    while (i < self->retired_count && self->retired[i].set != set)
        i++;
    if (i == self->retired_count)
        self->retired[self->retired_count++] = (retired_t) { .set = set, .fronts = 0 };
    if (++self->retired[i].fronts < self->front_count)
        return;
    self->retired[i] = self->retired[--self->retired_count];
    /* What the set still owns: models no longer served, and the previous load of those a reload loaded
     * anew (new weights, a changed configuration), which are served by that name still. */
    size_t removed = 0, replaced = 0;
    char removed_names[512] = "", replaced_names[512] = "";
    for (size_t m = 0; m < model_registry_count (set); m++) {
        if (!model_registry_owns (set, m))
            continue;
        const char *name = model_name (model_registry_at (set, m));
        const bool served = model_registry_find (self->models, name) != NULL;
        char *names = served ? replaced_names : removed_names;
        size_t used = strlen (names);
        snprintf (names + used, sizeof removed_names - used, "%s%s", used ? ", " : "", name);
        *(served ? &replaced : &removed) += 1;
    }
    model_registry_destroy (&set);
    if (removed)
        log_info ("reload: %zu model(s) no longer served are unloaded: %s", removed, removed_names);
    if (replaced)
        log_info ("reload: the previous load of %zu reloaded model(s) is unloaded: %s", replaced, replaced_names);
}

void server_collect_retired (server_t *self)
{
    model_registry_t *set;
    pthread_mutex_lock (&self->lock);
    for (uint32_t k = 0; k < self->front_count; k++)
        while (self->fronts[k] && (set = ring_pop (&self->fronts[k]->retired)) != NULL)
            s_retired (self, set);
    pthread_mutex_unlock (&self->lock);
}
