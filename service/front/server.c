/* The fronts (server.h): the loop, the drain, the lifecycle and the fronts' threads. What a front
 * does with a message is in intake.c, its replies in reply.c, reloads in reload.c (server_impl.h says
 * how they share it); socket binding and its policies live in endpoint.c, what a request means in
 * request.c. */
#define _GNU_SOURCE
#include "front/server_impl.h"
#include "serving/devices.h"

#include "base/log.h"
#include "clock.h"
#include "serving/dispatch.h"
#include "serving/registry.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUIET_NS 100000000ull       /* draining: nothing left and the sockets quiet this long = done */
#define WATCH_NS 100000000ull       /* the connection events (max_connections) are read this often */

static uint32_t s_inflight (front_t *self)
{
    uint32_t n = 0;
    for (size_t i = 0; i < self->answering_count; i++)
        n += dispatch_inflight (self->answering[i], self->index);
    return n;
}

static bool s_any_done (front_t *self)
{
    for (size_t i = 0; i < self->answering_count; i++)
        if (dispatch_has_done (self->answering[i], self->index))
            return true;
    return false;
}

/* Nothing to do: spin (busy_poll; or as base/spin.h says, for a reply of its own up to spin_us,
 * else for twice the recent time between requests), then sleep on the sockets and the wake-up fd
 * (endpoints_wait). */
static void s_idle (front_t *self, uint64_t now)
{
    if (self->cfg.busy_poll || spin_idle (&self->spin, now, s_inflight (self) > 0)) {
        _mm_pause ();
        return;
    }
    long timeout_ms = self->state == FRONT_SERVING ? 100 : 1;   /* the stop flag is looked at this often */
    waker_prepare (self->wake);
    if (s_any_done (self) || atomic_load (&self->command) != CMD_NONE) {
        waker_cancel (self->wake);
        return;
    }
    if (spin_ended (&self->spin) && self->stats)
        stats_count_spin_sleep (self->stats, false);
    int rc = endpoints_wait (self->endpoints, self->wake->fd, timeout_ms);
    waker_cancel (self->wake);
    if (rc > 0)
        waker_clear (self->wake);
}

static void s_begin_drain (front_t *self)
{
    self->state = FRONT_DRAINING;
    atomic_store (&self->serving, false);
    self->drain_until = clock_now_ns () + (uint64_t) self->cfg.drain_ms * 1000000ull;
    char who[16] = "";
    if (self->server->front_count > 1)
        snprintf (who, sizeof who, "front %u ", self->index);
    log_info ("stopping: %sdraining for up to %u ms (new requests are answered UNAVAILABLE, %u admitted are "
              "finishing)", who, self->cfg.drain_ms, s_inflight (self));
}

static void s_abort_all (front_t *self, const char *why)
{
    for (size_t i = 0; i < self->answering_count; i++)
        dispatch_abort (self->answering[i], why);
}

/* The drain's progress: DRAINING until nothing is in flight and the sockets have been quiet, or
 * drain_ms is over (then the workers answer what is still queued UNAVAILABLE: ABORTING), DONE
 * when every admitted request is answered. */
static void s_drain_step (front_t *self, uint64_t now)
{
    uint32_t inflight = s_inflight (self);
    if (self->state == FRONT_DRAINING) {
        if (inflight == 0 && now - self->last_message >= QUIET_NS)
            self->state = FRONT_DONE;
        else if (now >= self->drain_until) {
            if (inflight == 0)
                self->state = FRONT_DONE;
            else {
                log_warn ("stopping: drain_ms (%u ms) is over with %u request(s) admitted and not yet run; they are "
                          "answered UNAVAILABLE", self->cfg.drain_ms, inflight);
                s_abort_all (self, "shutting down");
                self->state = FRONT_ABORTING;
            }
        }
    } else if (self->state == FRONT_ABORTING && inflight == 0)
        self->state = FRONT_DONE;
}

/* Front K's CPUs: its share of server.cpus when there are at least as many as fronts, else all. */
static void s_pin (front_t *self)
{
    const server_config_t *cfg = &self->server->cfg;
    if (!cfg->cpu_count)
        return;
    const uint32_t fronts = self->server->front_count;
    size_t first = 0, count = cfg->cpu_count;
    if (cfg->cpu_count >= fronts) {
        first = cfg->cpu_count * self->index / fronts;
        count = cfg->cpu_count * (self->index + 1) / fronts - first;
    }
    char err[256];
    if (threads_pin_set (cfg->cpus + first, count, err, sizeof err) != 0)
        log_warn ("server.cpus: %s; front %u runs unpinned", err, self->index);
}

/* One front's loop, until it has drained. */
_Static_assert (STATS_WRITERS >= CONFIG_MAX_FRONTS + 1, "a stats shard for each front and one for the rest");

static void s_front_run (front_t *self)
{
    char role[16];
    snprintf (role, sizeof role, self->index ? "front%u" : "front", self->index);
    threads_set_role (role);
    stats_writer (1u + self->index);    /* this thread's shard: no other writes its counters */
    s_pin (self);
    self->last_activity = self->last_message = clock_now_ns ();
    server_t *server = self->server;
    while (self->state != FRONT_DONE) {
        bool busy = front_collect (self);
        busy |= front_intake (self);
        front_command (self);
        if (self->retiring_count || endpoints_any_closing (self->endpoints))
            front_retire (self);
        uint64_t now = clock_now_ns ();
        if (now - self->last_watch >= WATCH_NS) {
            endpoints_watch_connections (self->endpoints, now);
            self->last_watch = now;
        }
        if (self->state == FRONT_SERVING && ((self->stop && *self->stop) || atomic_load (&server->stop_requested)))
            s_begin_drain (self);
        if (self->state != FRONT_SERVING)
            s_drain_step (self, now);
        if (busy)
            self->last_activity = now;
        else if (self->state != FRONT_DONE)
            s_idle (self, now);
    }
    front_collect (self);
}

static void *s_front_thread (void *arg)
{
    s_front_run (arg);
    return NULL;
}

int server_run (server_t *self, volatile sig_atomic_t *stop)
{
    char fronts[32] = "";
    if (self->front_count > 1)
        snprintf (fronts, sizeof fronts, " by %u fronts", self->front_count);
    /* Started before its models load (server_serve then says how many it serves), or with them. */
    const char *transport = self->cfg.transport == TRANSPORT_LIBZMQ ? "libzmq" : "zmtp";
    if (atomic_load (&self->loading))
        log_info ("%zu endpoint(s) bound, over %s%s%s; the models are loading", self->cfg.endpoint_count, transport,
                  fronts, self->cfg.busy_poll ? ", busy-polling" : "");
    else
        log_info ("serving %zu model(s) on %zu endpoint(s) over %s%s%s", model_registry_count (self->models),
                  self->cfg.endpoint_count, transport, fronts, self->cfg.busy_poll ? ", busy-polling" : "");
    if (self->front_count > 1)
        for (uint32_t k = 0; k < self->front_count; k++) {
            char list[512] = "";
            size_t used = 0;
            for (size_t e = 0; e < self->fronts[k]->cfg.endpoint_count && used < sizeof list; e++)
                used += (size_t) snprintf (list + used, sizeof list - used, "%s%s", e ? ", " : "",
                                           self->fronts[k]->cfg.endpoints[e]);
            log_info ("front %u: %s", k, list);
        }
    for (uint32_t k = 0; k < self->front_count; k++)
        self->fronts[k]->stop = stop;
    for (uint32_t k = 1; k < self->front_count; k++) {
        front_t *f = self->fronts[k];
        f->started = pthread_create (&f->thread, NULL, s_front_thread, f) == 0;
        if (!f->started) {      /* its endpoints would go unanswered: stop the others too */
            log_error ("front %u: cannot start its thread; stopping", k);
            server_stop (self);
        }
    }
    s_front_run (self->fronts[0]);
    for (uint32_t k = 1; k < self->front_count; k++)
        if (self->fronts[k]->started) {
            pthread_join (self->fronts[k]->thread, NULL);
            self->fronts[k]->started = false;
        }
    const stats_t *c = self->stats;
    log_info ("stopped: %llu received, %llu admitted, %llu replied (%llu to infer requests), %llu send failures, "
              "%llu dropped", (unsigned long long) stats_server (c, STATS_RECEIVED),
              (unsigned long long) stats_server (c, STATS_ADMITTED), (unsigned long long) stats_server (c, STATS_REPLIED),
              (unsigned long long) stats_server (c, STATS_INFER_REPLIES),
              (unsigned long long) stats_send_failures (c), (unsigned long long) stats_server (c, STATS_DROPPED));
    return 0;
}

void server_stop (server_t *self)
{
    atomic_store (&self->stop_requested, true);
    for (uint32_t k = 0; k < self->front_count; k++)
        waker_wake (self->fronts[k]->wake);
}

/* ---------------------------------------------------------------- lifecycle */

static void s_front_destroy (front_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    front_t *self = *self_p;
    endpoints_destroy (&self->endpoints, self->cfg.drain_ms);
    ring_release (&self->retired);
    codec_destroy (&self->codec);
    free (self->listing);
    clients_destroy (&self->clients);
    waker_release (&self->own_wake);
    waker_release (&self->command_done);
    free (self->reply_buf);
    free (self);
    *self_p = NULL;
}

/* Front INDEX of SERVER, serving MODELS on the endpoints of CFG (its own only). */
static front_t *s_front_new (server_t *server, uint32_t index, const server_config_t *cfg, model_registry_t *models,
                             auth_t *auth, char *err, size_t errlen)
{
    front_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    self->server = server;
    self->index = index;
    self->cfg = *cfg;
    spin_init (&self->spin, cfg->spin_cap_ns);
    atomic_init (&self->loading, atomic_load (&server->loading));
    self->models = models;
    self->stats = server->stats;
    /* With device processes, their workers ring the wakers they share with us (serving/devices.h). */
    devices_t *devices = server->devices;
    self->wake = devices ? devices_front_waker (devices, index) : &self->own_wake;
    self->own_wake.fd = self->command_done.fd = -1;
    atomic_init (&self->command, CMD_NONE);
    atomic_init (&self->serving, true);
    size_t jobs = 0;
    for (size_t i = 0; i < model_registry_count (models); i++)
        jobs += model_queue_depth (model_registry_at (models, i))
                + (size_t) model_instance_count (model_registry_at (models, i)) * 64;
    self->codec = codec_new (cfg->max_message_bytes);
    self->listing = calloc (1, sizeof *self->listing);
    self->clients = clients_new (jobs * 2 + 1024);
    if (!self->codec || !self->listing || !self->clients || (!devices && waker_init (self->wake) != 0)
        || waker_init (&self->command_done) != 0 || ring_init (&self->retired, RETIRING_MAX) != 0
        || front_reply_buffer (self, models, err, errlen) != 0) {
        snprintf (err, errlen, "out of memory");
        s_front_destroy (&self);
        return NULL;
    }
    self->endpoints = endpoints_new (cfg, auth, self->stats, err, errlen);
    if (!self->endpoints) {
        s_front_destroy (&self);
        return NULL;
    }
    front_answering (self);
    return self;
}

server_t *server_new (const server_config_t *cfg, model_registry_t *models, stats_t *stats, auth_t *auth,
                      devices_t *devices, char *err, size_t errlen)
{
    server_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    self->devices = devices;
    self->front_count = cfg->fronts == 0 ? 1 : cfg->fronts;
    self->cfg.fronts = self->front_count;
    atomic_init (&self->stop_requested, false);
    atomic_init (&self->loading, models == NULL);
    pthread_mutex_init (&self->lock, NULL);
    if (self->front_count > CONFIG_MAX_FRONTS
        || (self->front_count > cfg->endpoint_count && cfg->transport == TRANSPORT_LIBZMQ)) {
        snprintf (err, errlen, "server.fronts: %u fronts need %u endpoints at least on the libzmq transport (at most %d "
                  "fronts); got %zu", self->front_count, self->front_count, CONFIG_MAX_FRONTS, cfg->endpoint_count);
        server_destroy (&self);
        return NULL;
    }
    if (!models && !(models = self->placeholder = model_registry_empty ())) {
        snprintf (err, errlen, "out of memory");
        server_destroy (&self);
        return NULL;
    }
    for (size_t i = 0; i < model_registry_count (models); i++)
        if (dispatch_lanes (model_registry_at (models, i)) < self->front_count) {
            snprintf (err, errlen, "model \"%s\" was loaded for %u front(s), the server has %u (load the models "
                      "with the same server configuration)", model_name (model_registry_at (models, i)),
                      dispatch_lanes (model_registry_at (models, i)), self->front_count);
            server_destroy (&self);
            return NULL;
        }
    self->models = models;
    self->stats = stats;
    if (!self->stats) {
        self->stats = stats_new ();
        self->own_stats = true;
        if (!self->stats) {
            snprintf (err, errlen, "out of memory");
            server_destroy (&self);
            return NULL;
        }
    }
    front_assign_endpoints (self, NULL, &self->cfg, self->endpoint_front);     /* k, k + fronts, ... */
    for (uint32_t k = 0; k < self->front_count; k++) {
        if (!(self->fronts[k] = s_front_new (self, k, &self->next[k], models, auth, err, errlen))) {
            server_destroy (&self);
            return NULL;
        }
    }
    return self;
}

void server_destroy (server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    server_t *self = *self_p;
    /* every set some front still retires, once */
    server_collect_retired (self);
    for (uint32_t k = 0; k < self->front_count; k++)
        for (size_t r = 0; self->fronts[k] && r < self->fronts[k]->retiring_count; r++) {
            model_registry_t *set = self->fronts[k]->retiring[r];
            bool seen = false;
            for (size_t i = 0; i < self->retired_count && !seen; i++)
                seen = self->retired[i].set == set;
            if (!seen && self->retired_count < sizeof self->retired / sizeof self->retired[0])
                self->retired[self->retired_count++] = (retired_t) { .set = set };
        }
    for (size_t i = 0; i < self->retired_count; i++)
        model_registry_destroy (&self->retired[i].set);
    for (uint32_t k = 0; k < self->front_count; k++)
        s_front_destroy (&self->fronts[k]);
    model_registry_destroy (&self->placeholder);
    if (self->own_stats)
        stats_destroy (&self->stats);
    pthread_mutex_destroy (&self->lock);
    free (self);
    *self_p = NULL;
}

const stats_t *server_counts (const server_t *self) { return self->stats; }

model_registry_t *server_models (server_t *self) { return self->models; }
void server_lock (server_t *self) { pthread_mutex_lock (&self->lock); }
void server_unlock (server_t *self) { pthread_mutex_unlock (&self->lock); }
devices_t *server_devices (const server_t *self) { return self->devices; }

bool server_loading (server_t *self) { return atomic_load (&self->loading); }

bool server_ready (server_t *self)
{
    if (atomic_load (&self->loading) || atomic_load (&self->stop_requested) || !model_registry_ready (self->models))
        return false;
    for (uint32_t k = 0; k < self->front_count; k++)
        if (!atomic_load (&self->fronts[k]->serving))
            return false;
    return true;
}
