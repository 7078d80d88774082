/* The operations endpoint (http.h): libmicrohttpd with a listener thread and a thread per
 * connection (HTTP_MAX_CONNECTIONS of them at most), so a scrape waiting for the server lock never
 * delays a liveness probe. Bodies are built in memory and handed to libmicrohttpd whole. */
#define _GNU_SOURCE
#include "ops/http.h"

#include "backends/backends.h"
#include "front/endpoint.h"
#include "serving/dispatch.h"
#include "base/log.h"
#include "ops/metrics.h"
#include "serving/model.h"
#include "serving/registry.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HTTP_MAX_CONNECTIONS 16         /* connections (and their threads) at once; more wait in the backlog */
#define HTTP_IDLE_TIMEOUT_S 10          /* an idle keep-alive connection is closed after this long */
#define HTTP_MODELS_WAIT_S 10           /* /models during a reload waits this long for it to end */
#define REASON_MAX 512

static const char *s_text_type = "text/plain; charset=utf-8";
static const char *s_metrics_type = "text/plain; version=0.0.4; charset=utf-8";
static const char *s_json_type = "application/json";

struct _http_t {
    struct MHD_Daemon *daemon;
    stats_t *stats;                 /* borrowed: outlives the endpoint */
    char address[CONFIG_ENDPOINT_MAX];
    char cuda[32];                  /* build_info's cuda label: the runtime's version, or "no" */
    pthread_mutex_t mu;             /* guards what follows; held while the server lock is taken */
    pthread_cond_t reload_done;     /* signalled by http_reload_end */
    server_t *server;               /* NULL while the models load and once the server is gone */
    bool draining;
    bool reloading;
    bool ready;                     /* readiness as last seen under the server lock ... */
    char not_ready[REASON_MAX];     /* ... and why not */
    http_debug_fn debug;            /* sigserve-test only: POST /debug/fault */
    void *debug_arg;
};

void http_set_debug (http_t *self, http_debug_fn fn, void *arg)
{
    self->debug = fn;
    self->debug_arg = arg;
}

/* ---------------------------------------------------------------- readiness */

/* Why MODELS is not ready, into WHY; false when every model is available. */
static bool s_unavailable_model (model_registry_t *models, char *why, size_t len)
{
    if (model_registry_count (models) == 0) {
        snprintf (why, len, "no models");
        return true;
    }
    for (size_t i = 0; i < model_registry_count (models); i++) {
        model_t *m = model_registry_at (models, i);
        if (model_serving (m))     /* its own instances, or its CPU fallback */
            continue;
        int n = snprintf (why, len, "model %s unavailable: ", model_name (m));
        uint32_t count = model_instance_count (m);
        for (uint32_t k = 0; k < count && n >= 0 && (size_t) n < len; k++) {
            /* The state is text a worker may be rewriting: copied with a bound. */
            if (count == 1)
                n += snprintf (why + n, len - (size_t) n, "%.200s", model_instance_state (m, k));
            else
                n += snprintf (why + n, len - (size_t) n, "%sinstance %u: %.200s", k ? "; " : "", k,
                               model_instance_state (m, k));
        }
        return true;
    }
    return false;
}

/* Readiness now, into WHY when not ready. Called with mu held; takes the server lock unless a
 * reload holds it (then the readiness seen when the reload began stands). */
static bool s_readiness (http_t *self, char *why, size_t len)
{
    if (self->draining) {
        snprintf (why, len, "draining");
        return false;
    }
    if (!self->server) {
        snprintf (why, len, "loading models");
        return false;
    }
    if (server_loading (self->server)) {
        snprintf (why, len, "loading models");
        return false;
    }
    if (!self->reloading) {
        server_lock (self->server);
        self->ready = server_ready (self->server);
        if (!self->ready && !s_unavailable_model (server_models (self->server), self->not_ready, REASON_MAX))
            snprintf (self->not_ready, REASON_MAX, "not serving");
        server_unlock (self->server);
    }
    if (!self->ready)
        snprintf (why, len, "%s", self->not_ready);
    return self->ready;
}

/* ---------------------------------------------------------------- /metrics */

static void s_metrics (http_t *self, metrics_text_t *t)
{
    metrics_family (t, "sigserve_build_info", "gauge", "Always 1: the version, and the CUDA runtime this build has (\"no\": none).");
    metrics_append (t, "sigserve_build_info{version=\"%s\",cuda=\"%s\"} 1\n", SIGSERVE_VERSION, self->cuda);

    metrics_requests (t, self->stats);
    metrics_histograms (t, self->stats);
    metrics_front (t, self->stats);

    char why[REASON_MAX];
    pthread_mutex_lock (&self->mu);
    bool ready = s_readiness (self, why, sizeof why);
    metrics_family (t, "sigserve_ready", "gauge", "1 when /readyz answers 200.");
    metrics_append (t, "sigserve_ready %d\n", ready ? 1 : 0);
    /* While a reload loads models aside it holds the server lock: the per-model gauges are left
     * out of this scrape rather than make it wait (their families stay, without samples). */
    bool models = self->server && !self->reloading;
    if (models)
        server_lock (self->server);
    metrics_models (t, models ? server_models (self->server) : NULL);
    if (models)
        server_unlock (self->server);
    metrics_devices (t, self->server ? server_devices (self->server) : NULL);
    metrics_family (t, "sigserve_reload_in_progress", "gauge", "1 while a configuration reload loads models aside.");
    metrics_append (t, "sigserve_reload_in_progress %d\n", self->reloading ? 1 : 0);
    pthread_mutex_unlock (&self->mu);

    metrics_family (t, "sigserve_config_reloads_total", "counter",
              "Configuration reloads (SIGHUP, --watch), by result: error means nothing changed.");
    metrics_append (t, "sigserve_config_reloads_total{result=\"ok\"} %llu\n",
              (unsigned long long) stats_reloads (self->stats, true));
    metrics_append (t, "sigserve_config_reloads_total{result=\"error\"} %llu\n",
              (unsigned long long) stats_reloads (self->stats, false));
    metrics_family (t, "sigserve_auth_failures_total", "counter",
                    "CURVE handshakes the server refused, one per connection, by reason: denied (a key not in "
                    "the allowlist), plaintext_client (no CURVE), wrong_server_key (a hello that cannot be "
                    "decrypted), protocol.");
    for (int why = 0; why < AUTH_FAIL_COUNT; why++)
        metrics_append (t, "sigserve_auth_failures_total{reason=\"%s\"} %llu\n", stats_auth_failure_names[why],
                        (unsigned long long) stats_auth_failures (self->stats, (stats_auth_failure_t) why));
    metrics_family (t, "sigserve_reply_send_failures_total", "counter",
              "Replies ZeroMQ refused (the client gone, or not reading its replies): lost.");
    metrics_append (t, "sigserve_reply_send_failures_total %llu\n", (unsigned long long) stats_send_failures (self->stats));
    metrics_process (t);
}

/* ---------------------------------------------------------------- /models */

static cJSON *s_model_json (model_t *m, model_info_t *info)
{
    model_describe (m, info);
    cJSON *j = cJSON_CreateObject ();
    if (!j)
        return NULL;
    cJSON_AddStringToObject (j, "name", info->name);
    cJSON_AddStringToObject (j, "version", info->version);
    cJSON_AddStringToObject (j, "type", info->type);
    cJSON_AddStringToObject (j, "backend", info->backend);
    cJSON_AddStringToObject (j, "kernel", info->kernel);
    if (info->isa[0])
        cJSON_AddStringToObject (j, "isa", info->isa);
    if (info->split[0])
        cJSON_AddStringToObject (j, "split", info->split);
    cJSON_AddStringToObject (j, "weight_dtype", info->weight_dtype);
    cJSON_AddNumberToObject (j, "input_size", info->input_size);
    cJSON_AddNumberToObject (j, "output_size", info->output_size);
    if (info->window) {
        cJSON_AddNumberToObject (j, "window", info->window);
        cJSON_AddNumberToObject (j, "step_size", info->step_size);
    }
    cJSON_AddNumberToObject (j, "max_rows", info->max_rows);
    cJSON_AddNumberToObject (j, "max_batch_rows", info->max_batch_rows);
    cJSON_AddNumberToObject (j, "instances", info->instances);
    cJSON_AddNumberToObject (j, "queue_depth", info->queue_depth);
    cJSON_AddNumberToObject (j, "queued", metrics_queued (m));
    cJSON_AddNumberToObject (j, "max_queue_us", info->max_queue_us);
    cJSON_AddNumberToObject (j, "launch_us", (double) info->launch_ns / 1e3);   /* timed at load */
    cJSON_AddNumberToObject (j, "row_us", (double) info->row_ns / 1e3);
    cJSON_AddBoolToObject (j, "available", info->available);
    cJSON *fallback = info->fallback_instances ? cJSON_AddObjectToObject (j, "fallback") : NULL;
    if (fallback) {     /* its CPU fallback ("fallback"), and whether it serves now */
        cJSON_AddStringToObject (fallback, "backend", "cpu");
        cJSON_AddNumberToObject (fallback, "instances", info->fallback_instances);
        cJSON_AddBoolToObject (fallback, "active", info->fallback_active);
    }
    cJSON_AddStringToObject (j, "selected_by", info->selected_by);
    cJSON *candidates = cJSON_AddArrayToObject (j, "candidates");
    for (size_t i = 0; candidates && i < info->candidate_count; i++) {
        const autoselect_candidate_t *c = &info->candidates[i];
        cJSON *o = cJSON_CreateObject ();
        if (!o)
            break;
        cJSON_AddStringToObject (o, "backend", c->backend);
        cJSON_AddStringToObject (o, "kernel", c->kernel);
        cJSON_AddNumberToObject (o, "p50_us", c->p50_us);
        cJSON_AddNumberToObject (o, "p99_us", c->p99_us);
        cJSON_AddNumberToObject (o, "batch_rows", c->batch_rows);
        cJSON_AddNumberToObject (o, "batch_p50_us", c->batch_p50_us);
        cJSON_AddNumberToObject (o, "batch_p99_us", c->batch_p99_us);
        cJSON_AddStringToObject (o, "note", c->note);
        cJSON_AddItemToArray (candidates, o);
    }
    cJSON *states = cJSON_AddArrayToObject (j, "instance_states");
    for (uint32_t i = 0; states && i < info->instances; i++) {
        const model_instance_info_t *ii = &info->instance[i];
        cJSON *o = cJSON_CreateObject ();
        if (!o)
            break;
        cJSON_AddNumberToObject (o, "index", ii->index);
        cJSON_AddStringToObject (o, "backend", info->backend);
        cJSON_AddNumberToObject (o, "device", ii->device);
        cJSON_AddBoolToObject (o, "available", ii->available);
        cJSON_AddStringToObject (o, "state", ii->state);
        cJSON_AddNumberToObject (o, "requests", (double) ii->requests);
        cJSON_AddNumberToObject (o, "warm_runs", (double) ii->warm_runs);
        cJSON_AddNumberToObject (o, "green_sms", (double) ii->green_sms);
        cJSON_AddItemToArray (states, o);
    }
    return j;
}

/* The JSON of /models (malloc'd), or NULL with *STATUS and WHY set. */
static char *s_models (http_t *self, unsigned *status, char *why, size_t len)
{
    pthread_mutex_lock (&self->mu);
    /* A reload holds the server lock while it loads: wait for it to end (bounded). */
    struct timespec until;
    clock_gettime (CLOCK_MONOTONIC, &until);
    until.tv_sec += HTTP_MODELS_WAIT_S;
    while (self->reloading && pthread_cond_timedwait (&self->reload_done, &self->mu, &until) != ETIMEDOUT)
        ;
    char *text = NULL;
    if (!self->server || server_loading (self->server)) {
        *status = MHD_HTTP_SERVICE_UNAVAILABLE;
        snprintf (why, len, "%s", self->draining ? "draining" : "loading models");
    } else if (self->reloading) {
        *status = MHD_HTTP_SERVICE_UNAVAILABLE;
        snprintf (why, len, "a configuration reload is in progress; try again");
    } else {
        cJSON *root = cJSON_CreateObject ();
        cJSON *list = root ? cJSON_AddArrayToObject (root, "models") : NULL;
        model_info_t *info = malloc (sizeof *info);     /* 10 KiB: not on a thread's stack */
        if (!info)
            list = NULL;                                /* answered 500 below */
        server_lock (self->server);
        model_registry_t *models = server_models (self->server);
        for (size_t i = 0; list && info && i < model_registry_count (models); i++) {
            cJSON *m = s_model_json (model_registry_at (models, i), info);
            if (m)
                cJSON_AddItemToArray (list, m);
        }
        server_unlock (self->server);
        free (info);
        text = list ? cJSON_PrintUnformatted (root) : NULL;
        cJSON_Delete (root);
        if (!text) {
            *status = MHD_HTTP_INTERNAL_SERVER_ERROR;
            snprintf (why, len, "out of memory");
        }
    }
    pthread_mutex_unlock (&self->mu);
    return text;
}

/* ---------------------------------------------------------------- requests */

/* Queues BODY (LEN bytes; FREE: malloc'd, libmicrohttpd frees it). */
static enum MHD_Result s_reply (struct MHD_Connection *c, unsigned status, const char *type, char *body, size_t len,
                                bool free_body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer (len, body, free_body ? MHD_RESPMEM_MUST_FREE
                                                                                   : MHD_RESPMEM_MUST_COPY);
    if (!r) {
        if (free_body)
            free (body);
        return MHD_NO;
    }
    MHD_add_response_header (r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header (r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header (r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result rc = MHD_queue_response (c, status, r);
    MHD_destroy_response (r);
    return rc;
}

/* A one-line text body: TEXT and a newline. */
static enum MHD_Result s_reply_text (struct MHD_Connection *c, unsigned status, const char *text)
{
    char body[REASON_MAX + 64];
    int n = snprintf (body, sizeof body, "%s\n", text);
    return s_reply (c, status, s_text_type, body, n > 0 && (size_t) n < sizeof body ? (size_t) n : sizeof body - 1,
                    false);
}

static enum MHD_Result s_handle (void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **request_state)
{
    (void) version, (void) upload_data;
    http_t *self = cls;
    char why[REASON_MAX];
    const bool debug = self->debug && strcmp (method, MHD_HTTP_METHOD_POST) == 0 && strcmp (url, "/debug/fault") == 0;
    if (!debug && strcmp (method, MHD_HTTP_METHOD_GET) != 0 && strcmp (method, MHD_HTTP_METHOD_HEAD) != 0) {
        snprintf (why, sizeof why, "method %.32s not allowed: GET or HEAD", method);
        return s_reply_text (c, MHD_HTTP_METHOD_NOT_ALLOWED, why);
    }
    /* The first call comes with the headers alone: answering then would make libmicrohttpd close
     * the connection (it cannot know the request is complete), so the answer waits for the
     * second, and a scraper's connection is kept alive. */
    static int s_headers_seen;
    if (*request_state == NULL) {
        *request_state = &s_headers_seen;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;      /* a body on a GET is read and ignored */
        return MHD_YES;
    }
    if (debug) {
        const char *device = MHD_lookup_connection_value (c, MHD_GET_ARGUMENT_KIND, "device");
        const char *kind = MHD_lookup_connection_value (c, MHD_GET_ARGUMENT_KIND, "kind");
        unsigned status = (unsigned) self->debug (self->debug_arg, device ? device : "", kind ? kind : "", why, sizeof why);
        return s_reply_text (c, status, why);
    }
    if (strcmp (url, "/healthz") == 0)
        return s_reply_text (c, MHD_HTTP_OK, "ok");
    if (strcmp (url, "/readyz") == 0) {
        pthread_mutex_lock (&self->mu);
        bool ready = s_readiness (self, why, sizeof why);
        pthread_mutex_unlock (&self->mu);
        return s_reply_text (c, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, ready ? "ready" : why);
    }
    if (strcmp (url, "/metrics") == 0) {
        metrics_text_t t = { 0 };
        s_metrics (self, &t);
        if (t.failed || !t.data) {
            free (t.data);
            return s_reply_text (c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
        }
        return s_reply (c, MHD_HTTP_OK, s_metrics_type, t.data, t.len, true);
    }
    if (strcmp (url, "/models") == 0) {
        unsigned status = MHD_HTTP_OK;
        char *json = s_models (self, &status, why, sizeof why);
        if (!json)
            return s_reply_text (c, status, why);
        return s_reply (c, MHD_HTTP_OK, s_json_type, json, strlen (json), true);
    }
    snprintf (why, sizeof why, "not found: %.200s (try /metrics, /healthz, /readyz or /models)", url);
    return s_reply_text (c, MHD_HTTP_NOT_FOUND, why);
}

/* libmicrohttpd's own complaints (a connection it could not handle, a thread it could not start). */
static void s_mhd_log (void *cls, const char *fmt, va_list ap)
{
    (void) cls;
    char msg[512];
    vsnprintf (msg, sizeof msg, fmt, ap);
    size_t n = strlen (msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    log_warn ("server.http: %s", msg);
}

/* ---------------------------------------------------------------- lifecycle */

/* A listening socket on ADDRESS; -1 with ERR. *IPV6 says its family. */
/* A listening socket on ADDRESS ("HOST:PORT", HOST resolved; IPv4 first), the address taken in *CHOSEN
 * (may be NULL). PROBE (http_check): on a port the system picks instead of PORT, so what binding
 * ADDRESS refuses (a name that does not resolve, an address not on this host) is found without
 * taking the port; *CHOSEN still has PORT. The fd, or -1 with ERR. */
static int s_listen (const char *address, bool probe, struct sockaddr_storage *chosen, bool *ipv6, char *err,
                     size_t errlen)
{
    char host[CONFIG_ENDPOINT_MAX];
    const char *colon = strrchr (address, ':');
    if (!colon || colon == address) {
        snprintf (err, errlen, "server.http: expected HOST:PORT, got \"%s\"", address);
        return -1;
    }
    snprintf (host, sizeof host, "%.*s", (int) (colon - address), address);
    const char *port = colon + 1;
    size_t hl = strlen (host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove (host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    const char *node = strcmp (host, "*") == 0 ? "0.0.0.0" : host;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV | AI_PASSIVE | AI_ADDRCONFIG };
    struct addrinfo *res = NULL;
    int gai = getaddrinfo (node, port, &hints, &res);
    if (gai == EAI_NONAME || gai == EAI_ADDRFAMILY) {
        hints.ai_flags &= ~AI_ADDRCONFIG;       /* loopback-only hosts: "127.0.0.1" still resolves */
        gai = getaddrinfo (node, port, &hints, &res);
    }
    if (gai != 0) {
        snprintf (err, errlen, "server.http: cannot resolve \"%s\": %s", host, gai_strerror (gai));
        return -1;
    }
    int fd = -1, e = 0;
    /* IPv4 addresses first: "localhost" then listens where IPv4 probes look. */
    for (int pass = 0; pass < 2 && fd < 0; pass++)
        for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
            if ((pass == 0) != (a->ai_family == AF_INET))
                continue;
            int s = socket (a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (s < 0) {
                e = errno;
                continue;
            }
            int one = 1;
            setsockopt (s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            struct sockaddr_storage where;
            memset (&where, 0, sizeof where);
            memcpy (&where, a->ai_addr, a->ai_addrlen <= sizeof where ? a->ai_addrlen : sizeof where);
            if (probe && a->ai_family == AF_INET)
                ((struct sockaddr_in *) &where)->sin_port = 0;
            else if (probe)
                ((struct sockaddr_in6 *) &where)->sin6_port = 0;
            if (bind (s, (struct sockaddr *) &where, a->ai_addrlen) != 0 || listen (s, 64) != 0) {
                e = errno;
                close (s);
                continue;
            }
            fd = s;
            *ipv6 = a->ai_family == AF_INET6;
            if (chosen)
                memcpy (chosen, a->ai_addr, a->ai_addrlen <= sizeof *chosen ? a->ai_addrlen : sizeof *chosen);
        }
    freeaddrinfo (res);
    if (fd < 0)
        snprintf (err, errlen, "server.http: cannot bind %s: %s", address, strerror (e ? e : EADDRNOTAVAIL));
    return fd;
}

int http_check (const server_config_t *cfg, char *err, size_t errlen)
{
    if (!cfg->http[0])
        return 0;
    struct sockaddr_storage chosen;
    bool ipv6 = false;
    int fd = s_listen (cfg->http, true, &chosen, &ipv6, err, errlen);
    if (fd < 0)
        return -1;
    close (fd);
    return endpoints_overlap (cfg, "server.http", cfg->http, (const struct sockaddr *) &chosen, err, errlen);
}

http_t *http_new (const char *address, stats_t *stats, char *err, size_t errlen)
{
    http_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "server.http: out of memory");
        return NULL;
    }
    self->stats = stats;
    snprintf (self->address, sizeof self->address, "%s", address);
    snprintf (self->not_ready, sizeof self->not_ready, "loading models");
    pthread_mutex_init (&self->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init (&attr);
    pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
    pthread_cond_init (&self->reload_done, &attr);
    pthread_condattr_destroy (&attr);
    snprintf (self->cuda, sizeof self->cuda, "%s", backends_cuda_built_version () ? backends_cuda_built_version () : "no");
    bool ipv6 = false;
    int fd = s_listen (address, false, NULL, &ipv6, err, errlen);
    if (fd < 0) {
        http_destroy (&self);
        return NULL;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ERROR_LOG
                     | (ipv6 ? MHD_USE_IPv6 : 0);
    self->daemon = MHD_start_daemon (flags, 0, NULL, NULL, s_handle, self,
                                     MHD_OPTION_EXTERNAL_LOGGER, s_mhd_log, NULL,
                                     MHD_OPTION_LISTEN_SOCKET, fd,
                                     MHD_OPTION_CONNECTION_LIMIT, (unsigned) HTTP_MAX_CONNECTIONS,
                                     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) HTTP_IDLE_TIMEOUT_S,
                                     MHD_OPTION_END);
    if (!self->daemon) {
        snprintf (err, errlen, "server.http: libmicrohttpd could not start on %s (%s)", address,
                  errno ? strerror (errno) : "no reason given");
        if (fcntl (fd, F_GETFD) != -1)
            close (fd);     /* it is ours again when the daemon did not start */
        http_destroy (&self);
        return NULL;
    }
    log_info ("server.http: metrics and probes on http://%s/ (/metrics, /healthz, /readyz, /models)", address);
    return self;
}

void http_destroy (http_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    http_t *self = *self_p;
    if (self->daemon)
        MHD_stop_daemon (self->daemon);     /* joins its threads and closes the listening socket */
    pthread_cond_destroy (&self->reload_done);
    pthread_mutex_destroy (&self->mu);
    free (self);
    *self_p = NULL;
}

void http_attach (http_t *self, server_t *server)
{
    if (!self)
        return;
    pthread_mutex_lock (&self->mu);     /* waits for a request reading the previous server */
    self->server = server;
    pthread_mutex_unlock (&self->mu);
}

void http_draining (http_t *self)
{
    if (!self)
        return;
    pthread_mutex_lock (&self->mu);
    self->draining = true;
    pthread_mutex_unlock (&self->mu);
}

void http_reload_begin (http_t *self)
{
    if (!self)
        return;
    pthread_mutex_lock (&self->mu);
    char why[REASON_MAX];
    s_readiness (self, why, sizeof why);    /* what /readyz answers until the reload ends */
    self->reloading = true;
    pthread_mutex_unlock (&self->mu);
}

void http_reload_end (http_t *self)
{
    if (!self)
        return;
    pthread_mutex_lock (&self->mu);
    self->reloading = false;
    pthread_cond_broadcast (&self->reload_done);
    pthread_mutex_unlock (&self->mu);
}
