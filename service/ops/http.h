/* The operations endpoint (server.http, "HOST:PORT"): Prometheus metrics, the liveness and
 * readiness probes and the model list over HTTP/1.1, served by libmicrohttpd on threads of its own
 * (a listener and one thread per connection, a few at most), never on the front's or a worker's.
 *
 *   GET /metrics   Prometheus text format 0.0.4 (docs/operations.md lists every metric)
 *   GET /healthz   200 "ok" while the process runs (loading and draining included)
 *   GET /readyz    200 "ready" when every model is loaded, warm and available and the front is not
 *                  draining; else 503 and why ("loading models", "draining", "model X unavailable: ...")
 *   GET /models    the list_models reply as JSON
 *   anything else 404; methods other than GET and HEAD 405.
 *
 * It only reads: counters and histograms from stats_t (relaxed loads, never a lock, so the front
 * is never held up by a scrape), the models being served between server_lock and server_unlock.
 *
 * Life, driven by the control thread (service/main.c): http_new before the models load, so
 * /healthz answers and /readyz says "loading models" during the load; http_attach once the server
 * exists; http_reload_begin / http_reload_end around each server_reload (the reload holds the
 * server lock while new models load aside: /readyz then answers from the readiness seen when the
 * reload began, since the old models keep serving, and /metrics leaves out the per-model gauges
 * of that scrape rather than wait); http_draining at SIGTERM; http_attach (NULL) before the server
 * is destroyed; http_destroy last. */
#ifndef SIGSERVE_HTTP_H
#define SIGSERVE_HTTP_H

#include "front/server.h"
#include "base/stats.h"
#include <stddef.h>

typedef struct _http_t http_t;

/* Binds ADDRESS ("HOST:PORT"; HOST an address, a name, "*" for every IPv4 interface or "[::]")
 * and starts serving. STATS must outlive the endpoint. NULL with ERR ("server.http: cannot bind
 * 127.0.0.1:9464: Address already in use") on failure. */
http_t *http_new (const char *address, stats_t *stats, char *err, size_t errlen);
/* What http_new would refuse for CFG's server.http, checked without taking its port (sigserve
 * --check-config, and the start before anything binds): a host that does not resolve or an address not
 * on this host (the same messages as http_new's), and a port one of the endpoints would listen on too
 * (endpoints_overlap). 0 (also without server.http), or -1 with ERR. */
int http_check (const server_config_t *cfg, char *err, size_t errlen);
/* Stops serving (waits for the requests being answered) and frees everything. */
void http_destroy (http_t **self_p);

/* The server whose models are reported (NULL: none any more; returns once no request uses the
 * previous one). */
void http_attach (http_t *self, server_t *server);
/* sigserve-test only (built with SIGSERVE_TEST_HOOKS; a release build never sets it, and the route
 * answers 404): POST /debug/fault?device=N&kind=K calls FN with ARG, which answers an HTTP status and
 * a text. */
typedef int (*http_debug_fn) (void *arg, const char *device, const char *kind, char *out, size_t outlen);
void http_set_debug (http_t *self, http_debug_fn fn, void *arg);
/* From now on /readyz says "draining". */
void http_draining (http_t *self);
/* Around server_reload, on the thread that calls it (not while holding the server lock). */
void http_reload_begin (http_t *self);
void http_reload_end (http_t *self);

#endif
