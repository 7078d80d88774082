/* The front (server.h): the loop, the drain and the lifecycle. What it does with a message is in
 * intake.c, its replies in reply.c, reloads in reload.c (server_impl.h says how they share it);
 * socket binding and its policies live in endpoint.c, what a request means in request.c. */
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

static uint32_t s_inflight (server_t *self)
{
    uint32_t n = 0;
    for (size_t i = 0; i < self->answering_count; i++)
        n += dispatch_inflight (self->answering[i]);
    return n;
}

static bool s_any_done (server_t *self)
{
    for (size_t i = 0; i < self->answering_count; i++)
        if (dispatch_has_done (self->answering[i]))
            return true;
    return false;
}

/* Nothing to do: spin (busy_poll; or as base/spin.h says, for a reply of its own up to spin_us,
 * else for twice the recent time between requests), then sleep in zmq_poll on the sockets and the
 * wake-up fd. */
static void s_idle (server_t *self, uint64_t now)
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
    zmq_pollitem_t *items;
    int n = endpoints_poll_items (self->endpoints, self->wake->fd, &items);
    int rc = zmq_poll (items, n, timeout_ms);
    waker_cancel (self->wake);
    if (rc > 0) {
        waker_clear (self->wake);
        endpoints_watch_connections (self->endpoints, clock_now_ns ());
    }
}

static void s_begin_drain (server_t *self)
{
    self->state = FRONT_DRAINING;
    atomic_store (&self->serving, false);
    self->drain_until = clock_now_ns () + (uint64_t) self->cfg.drain_ms * 1000000ull;
    log_info ("stopping: draining for up to %u ms (new requests are answered UNAVAILABLE, %u admitted are finishing)",
              self->cfg.drain_ms, s_inflight (self));
}

static void s_abort_all (server_t *self, const char *why)
{
    for (size_t i = 0; i < self->answering_count; i++)
        dispatch_abort (self->answering[i], why);
}

/* The drain's progress: DRAINING until nothing is in flight and the sockets have been quiet, or
 * drain_ms is over (then the workers answer what is still queued UNAVAILABLE: ABORTING), DONE
 * when every admitted request is answered. */
static void s_drain_step (server_t *self, uint64_t now)
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

int server_run (server_t *self, volatile sig_atomic_t *stop)
{
    threads_set_role ("front");
    char err[256];
    if (self->cfg.cpu_count && threads_pin_set (self->cfg.cpus, self->cfg.cpu_count, err, sizeof err) != 0)
        log_warn ("server.cpus: %s; the front runs unpinned", err);
    log_info ("serving %zu model(s) on %zu endpoint(s)%s", model_registry_count (self->models),
              self->cfg.endpoint_count, self->cfg.busy_poll ? ", busy-polling" : "");
    self->last_activity = self->last_message = clock_now_ns ();
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
        if (self->state == FRONT_SERVING && ((stop && *stop) || atomic_load (&self->stop_requested)))
            s_begin_drain (self);
        if (self->state != FRONT_SERVING)
            s_drain_step (self, now);
        if (busy)
            self->last_activity = now;
        else if (self->state != FRONT_DONE)
            s_idle (self, now);
    }
    front_collect (self);
    uint64_t infer_replies = 0;
    for (int st = 0; st < 16; st++)
        infer_replies += self->counters.by_status[st];
    log_info ("stopped: %llu received, %llu admitted, %llu replied (%llu to infer requests), %llu send failures, "
              "%llu dropped", (unsigned long long) self->counters.received, (unsigned long long) self->counters.admitted,
              (unsigned long long) self->counters.replied, (unsigned long long) infer_replies,
              (unsigned long long) self->counters.send_failures, (unsigned long long) self->counters.dropped);
    return 0;
}

void server_stop (server_t *self)
{
    atomic_store (&self->stop_requested, true);
    waker_wake (self->wake);
}

/* ---------------------------------------------------------------- lifecycle */

server_t *server_new (const server_config_t *cfg, model_registry_t *models, stats_t *stats, auth_t *auth,
                      char *err, size_t errlen)
{
    server_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    spin_init (&self->spin, cfg->spin_cap_ns);
    atomic_init (&self->loading, models == NULL);
    if (!models && !(models = self->placeholder = model_registry_empty ())) {
        snprintf (err, errlen, "out of memory");
        free (self);
        return NULL;
    }
    self->models = models;
    self->stats = stats;
    /* With device processes, their workers ring the waker they share with us (serving/devices.h). */
    devices_t *devices = devices_current ();
    self->wake = devices ? devices_front_waker (devices) : &self->own_wake;
    self->own_wake.fd = self->command_done.fd = -1;
    atomic_init (&self->command, CMD_NONE);
    atomic_init (&self->stop_requested, false);
    atomic_init (&self->serving, true);
    pthread_mutex_init (&self->lock, NULL);
    if (!self->stats) {
        self->stats = stats_new ();
        self->own_stats = true;
    }
    size_t jobs = 0;
    for (size_t i = 0; i < model_registry_count (models); i++)
        jobs += model_queue_depth (model_registry_at (models, i))
                + (size_t) model_instance_count (model_registry_at (models, i)) * 64;
    self->codec = codec_new (cfg->max_message_bytes);
    self->listing = calloc (1, sizeof *self->listing);
    self->clients = clients_new (jobs * 2 + 1024);
    for (int f = 0; f < MAX_FRAMES; f++)
        zmq_msg_init (&self->frames[f]);
    zmq_msg_init (&self->spare);
    if (!self->stats || !self->codec || !self->listing || !self->clients || (!devices && waker_init (self->wake) != 0)
        || waker_init (&self->command_done) != 0 || ring_init (&self->retired, RETIRING_MAX) != 0
        || front_reply_buffer (self, models, err, errlen) != 0) {
        snprintf (err, errlen, "out of memory");
        server_destroy (&self);
        return NULL;
    }
    self->endpoints = endpoints_new (cfg, auth, self->stats, err, errlen);
    if (!self->endpoints) {
        server_destroy (&self);
        return NULL;
    }
    front_answering (self);
    return self;
}

void server_destroy (server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    server_t *self = *self_p;
    endpoints_destroy (&self->endpoints, self->cfg.drain_ms);
    for (int f = 0; f < MAX_FRAMES; f++)
        zmq_msg_close (&self->frames[f]);
    zmq_msg_close (&self->spare);
    for (size_t r = 0; r < self->retiring_count; r++)
        model_registry_destroy (&self->retiring[r]);
    if (self->retired.items)
        server_collect_retired (self);
    ring_release (&self->retired);
    model_registry_destroy (&self->placeholder);
    codec_destroy (&self->codec);
    free (self->listing);
    clients_destroy (&self->clients);
    waker_release (&self->own_wake);
    waker_release (&self->command_done);
    if (self->own_stats)
        stats_destroy (&self->stats);
    pthread_mutex_destroy (&self->lock);
    free (self->reply_buf);
    free (self);
    *self_p = NULL;
}

const server_stats_t *server_stats (const server_t *self) { return &self->counters; }

model_registry_t *server_models (server_t *self) { return self->models; }
void server_lock (server_t *self) { pthread_mutex_lock (&self->lock); }
void server_unlock (server_t *self) { pthread_mutex_unlock (&self->lock); }

bool server_loading (server_t *self) { return atomic_load (&self->loading); }

bool server_ready (server_t *self) { return front_ready (self); }
