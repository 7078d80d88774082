/* The front: the thread that owns the ROUTER sockets. It receives each message (stamped at
 * receipt), bounds it (frames x bytes), decodes and checks it, answers health, list_models and
 * every bad request at once, admits infer requests into their model's queue (or answers
 * OVERLOADED when it is full) and sends the replies of finished requests, each with exactly the
 * envelope it came with. Computing happens on the models' workers (model.h), never here.
 *
 * Stopping (server_stop, or *STOP set): for server.drain_ms the front keeps reading, answers new
 * infer requests UNAVAILABLE ("shutting down") and finishes every admitted one; past that it has
 * the workers answer what is still queued UNAVAILABLE, sends those replies, and returns. Every
 * request taken off a socket gets exactly one reply. */
#ifndef SIGSERVE_SERVER_H
#define SIGSERVE_SERVER_H

#include "front/auth.h"
#include "base/config.h"
#include "serving/registry.h"
#include "base/stats.h"
#include <signal.h>
#include <stdint.h>

typedef struct _server_t server_t;


/* Binds every endpoint of CFG (with AUTH, not NULL, every one a CURVE server: endpoint.h).
 * MODELS stays the caller's (a reload replaces it: see server_reload); STATS may be NULL; DEVICES
 * (serving/devices.h; NULL: none) stays the caller's too and must outlive the server: the fronts
 * sleep on the wakers their workers ring, and a reload places models with them (model_new).
 * NULL with ERR on failure. With MODELS NULL the server starts loading: it binds and serves at
 * once, answering health (ready false) and every infer request STATUS_UNAVAILABLE ("loading")
 * until server_serve hands it the models, so a port that cannot be bound fails the start before
 * any model loads. */
server_t *server_new (const server_config_t *cfg, model_registry_t *models, stats_t *stats, auth_t *auth,
                      devices_t *devices, char *err, size_t errlen);
/* The control thread, while server_run runs: the models, loaded, to serve from now on (between two
 * requests); loading ends. MODELS stays the caller's as in server_new. */
void server_serve (server_t *self, model_registry_t *models);
/* True from server_new without models until server_serve. */
bool server_loading (server_t *self);
void server_destroy (server_t **self_p);

/* Serves on the calling thread (pinned to server.cpus) until *STOP becomes non-zero or
 * server_stop is called, then drains as above and returns 0. */
int server_run (server_t *self, volatile sig_atomic_t *stop);
/* Any thread: begins the drain. */
void server_stop (server_t *self);

/* The control thread, while server_run runs: applies CFG (already loaded and validated): new and
 * changed models are loaded aside, unchanged ones are taken over, new endpoints are bound, then
 * the front switches between two requests; requests already admitted finish on the model they
 * were admitted to; removed models and endpoints are closed once their last reply is sent.
 * Nothing changes when any step fails (-1 with ERR). Keys that need a restart are logged and
 * keep their old values. */
int server_reload (server_t *self, const config_t *cfg, char *err, size_t errlen);
/* The control thread, now and then: destroys the model sets the front has finished with. */
void server_collect_retired (server_t *self);
/* The model set being served now. Threads other than the front and the control thread (the HTTP
 * thread) read it between server_lock and server_unlock: reloads and the destruction of retired
 * sets hold the lock, the front never takes it. */
model_registry_t *server_models (server_t *self);
void server_lock (server_t *self);
void server_unlock (server_t *self);
/* The device processes given to server_new (NULL: none). */
devices_t *server_devices (const server_t *self);
/* True while the front serves (not draining), every model is loaded and available. */
bool server_ready (server_t *self);

/* Where the server counts (the STATS given to server_new, or its own): stats_server's counts, and
 * every model's (exact once server_run has returned). */
const stats_t *server_counts (const server_t *self);

#endif
