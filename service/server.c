#include "server.h"

#include "clock.h"
#include "codec.h"
#include "log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define MAX_FRAMES 16           /* envelope frames + payload we keep; more and the message is dropped */
#define ERROR_MAX 512
#define DRAIN_NS 1000000000ull  /* how long a stopping server keeps answering what had arrived */

typedef struct {
    void *socket;               /* where it came from, and where the reply goes */
    zmq_msg_t frames[MAX_FRAMES];
    int nframes;                /* envelope frames, then the payload last */
    int overflow;               /* had more than MAX_FRAMES frames: cannot be echoed */
    uint64_t t_recv;            /* CLOCK_MONOTONIC ns at receipt */
} slot_t;

struct _server_t {
    const server_config_t *cfg;
    model_registry_t *models;
    void *ctx;
    size_t socket_count;
    void *sockets[CONFIG_MAX_ENDPOINTS];
    zmq_pollitem_t poll[CONFIG_MAX_ENDPOINTS];
    codec_t *codec;
    slot_t *slots;              /* a ring of queue_depth: requests taken from the sockets, in arrival order */
    size_t head;                /* the oldest queued slot */
    size_t queued;              /* how many slots hold a request */
    float *outputs;             /* rows x output size of the largest model */
    uint8_t *reply_buf;         /* one packed reply */
    size_t reply_cap;
    char error[ERROR_MAX];
    Sigserve__V1__ModelInfo infos[CONFIG_MAX_MODELS];
    Sigserve__V1__ModelInfo *info_ptrs[CONFIG_MAX_MODELS];
    server_stats_t stats;
};

static void s_fill_model_infos (server_t *self)
{
    for (size_t i = 0; i < model_registry_count (self->models); i++) {
        const model_t *m = model_registry_at (self->models, i);
        Sigserve__V1__ModelInfo *info = &self->infos[i];
        sigserve__v1__model_info__init (info);
        info->name = (char *) model_name (m);
        info->version = (char *) model_version (m);
        info->backend = (char *) model_backend_name (m);
        info->kernel = (char *) model_kernel_name (m);
        info->input_size = model_input_size (m);
        info->output_size = model_output_size (m);
        info->max_rows = model_max_rows (m);
        info->available = model_available (m);
        self->info_ptrs[i] = info;
    }
}

static void *s_bind (server_t *self, const char *endpoint, char *err, size_t errlen)
{
    void *s = zmq_socket (self->ctx, ZMQ_ROUTER);
    int64_t maxmsg = self->cfg->max_message_bytes;
    int one = 1, linger = 1000;
    if (!s || zmq_setsockopt (s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0
        /* Report unroutable or refused replies instead of dropping them silently. */
        || zmq_setsockopt (s, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0
        || zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger) != 0
        || zmq_bind (s, endpoint) != 0) {
        snprintf (err, errlen, "server.endpoints: cannot bind %s: %s", endpoint, zmq_strerror (zmq_errno ()));
        if (s)
            zmq_close (s);
        return NULL;
    }
    return s;
}

server_t *server_new (const server_config_t *cfg, model_registry_t *models, char *err, size_t errlen)
{
    server_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    self->cfg = cfg;
    self->models = models;
    self->ctx = zmq_ctx_new ();
    self->codec = codec_new (cfg->max_message_bytes);
    self->slots = calloc (cfg->queue_depth, sizeof *self->slots);
    size_t max_out = model_registry_max_outputs (models);
    self->outputs = calloc (max_out ? max_out : 1, sizeof (float));
    /* Packed floats (4 bytes each, plus a length), the error text, the version and the fixed
     * fields; a ListModelsReply fits too (< 400 bytes per model). */
    self->reply_cap = max_out * 4 + ERROR_MAX + 1024 + CONFIG_MAX_MODELS * 400;
    self->reply_buf = malloc (self->reply_cap);
    if (!self->ctx || !self->codec || !self->slots || !self->outputs || !self->reply_buf) {
        snprintf (err, errlen, "out of memory");
        server_destroy (&self);
        return NULL;
    }
    zmq_ctx_set (self->ctx, ZMQ_IO_THREADS, (int) cfg->io_threads);
    for (size_t i = 0; i < cfg->endpoint_count; i++) {
        void *s = s_bind (self, cfg->endpoints[i], err, errlen);
        if (!s) {
            server_destroy (&self);
            return NULL;
        }
        self->sockets[self->socket_count] = s;
        self->poll[self->socket_count] = (zmq_pollitem_t) { .socket = s, .events = ZMQ_POLLIN };
        self->socket_count++;
        log_info ("listening on %s", cfg->endpoints[i]);
    }
    for (size_t i = 0; i < cfg->queue_depth; i++)
        for (int f = 0; f < MAX_FRAMES; f++)
            zmq_msg_init (&self->slots[i].frames[f]);
    s_fill_model_infos (self);
    return self;
}

void server_destroy (server_t **self_p)
{
    if (self_p && *self_p) {
        server_t *self = *self_p;
        for (size_t i = 0; i < self->socket_count; i++)
            zmq_close (self->sockets[i]);
        if (self->slots)
            for (size_t i = 0; i < self->cfg->queue_depth; i++)
                for (int f = 0; f < MAX_FRAMES; f++)
                    zmq_msg_close (&self->slots[i].frames[f]);
        if (self->ctx)
            zmq_ctx_term (self->ctx);
        codec_destroy (&self->codec);
        free (self->slots);
        free (self->outputs);
        free (self->reply_buf);
        free (self);
        *self_p = NULL;
    }
}

const server_stats_t *server_stats (const server_t *self) { return &self->stats; }

/* Takes one whole message from SOCKET into SLOT. 1 when one was there, 0 when none. */
static int s_recv_one (void *socket, slot_t *slot)
{
    slot->nframes = 0;
    slot->overflow = 0;
    slot->socket = socket;
    int flags = ZMQ_DONTWAIT;
    for (;;) {
        zmq_msg_t *f = &slot->frames[slot->nframes < MAX_FRAMES ? slot->nframes : MAX_FRAMES - 1];
        if (zmq_msg_recv (f, socket, flags) < 0)
            return slot->nframes > 0;   /* EAGAIN on the first frame: nothing waiting */
        if (slot->nframes == 0)
            slot->t_recv = clock_now_ns ();
        if (slot->nframes < MAX_FRAMES)
            slot->nframes++;
        else
            slot->overflow = 1;
        if (!zmq_msg_more (f))
            return 1;
        flags = 0;                      /* the rest of a multipart message is already here */
    }
}

static void s_release (slot_t *slot)
{
    for (int f = 0; f < slot->nframes; f++) {
        zmq_msg_close (&slot->frames[f]);
        zmq_msg_init (&slot->frames[f]);
    }
    slot->nframes = 0;
}

/* Sends the envelope frames back, then the packed reply. Envelope frames move into ZeroMQ. */
static void s_send_reply (server_t *self, slot_t *slot, size_t len)
{
    for (int f = 0; f < slot->nframes - 1; f++)
        if (zmq_msg_send (&slot->frames[f], slot->socket, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
            goto failed;
    if (zmq_send (slot->socket, self->reply_buf, len, ZMQ_DONTWAIT) < 0)
        goto failed;
    self->stats.replied++;
    return;
failed:
    self->stats.send_failures++;
    log_debug ("reply not sent: %s", zmq_strerror (zmq_errno ()));
}

static sig_status_t s_check_infer (server_t *self, const Sigserve__V1__InferRequest *req, model_t **model_p,
                                   uint32_t *rows_p)
{
    char *err = self->error;
    model_t *m = model_registry_find (self->models, req->model);
    if (!m) {
        snprintf (err, ERROR_MAX, "model: \"%.64s\" is not served here (served: %s)", req->model,
                  model_registry_names (self->models));
        return SIG_UNKNOWN_MODEL;
    }
    uint32_t rows = req->rows ? req->rows : 1;
    uint32_t in = model_input_size (m);
    if (rows > model_max_rows (m)) {
        snprintf (err, ERROR_MAX, "rows: expected 1 to %u for model \"%s\", got %u", model_max_rows (m),
                  model_name (m), rows);
        return SIG_BAD_SHAPE;
    }
    if (req->n_features % rows != 0) {
        snprintf (err, ERROR_MAX, "features: %zu values do not divide into rows=%u rows of %u "
                  "(model \"%s\" takes %u features per row)", req->n_features, rows, in, model_name (m), in);
        return SIG_BAD_SHAPE;
    }
    if (req->n_features != (size_t) rows * in) {
        snprintf (err, ERROR_MAX, "features: expected rows x input size = %u x %u = %zu values for model "
                  "\"%s\", got %zu", rows, in, (size_t) rows * in, model_name (m), req->n_features);
        return SIG_BAD_SHAPE;
    }
    for (size_t i = 0; i < req->n_features; i++)
        if (!isfinite (req->features[i])) {
            snprintf (err, ERROR_MAX, "features[%zu] (row %zu, column %zu) is %s; every feature must be finite",
                      i, i / in, i % in, isnan (req->features[i]) ? "NaN" : "Inf");
            return SIG_BAD_VALUE;
        }
    if (!model_available (m)) {
        snprintf (err, ERROR_MAX, "model \"%s\" is unavailable on backend %s", model_name (m), model_backend_name (m));
        return SIG_UNAVAILABLE;
    }
    *model_p = m;
    *rows_p = rows;
    return SIG_OK;
}

static void s_handle_infer (server_t *self, const Sigserve__V1__InferRequest *req, const slot_t *slot,
                            Sigserve__V1__InferReply *rep)
{
    model_t *m = NULL;
    uint32_t rows = 0;
    rep->request_id = req->request_id;
    sig_status_t st = s_check_infer (self, req, &m, &rows);
    uint64_t t_start = clock_now_ns ();
    rep->queue_ns = t_start - slot->t_recv;
    if (st == SIG_OK && req->deadline_us && rep->queue_ns > (uint64_t) req->deadline_us * 1000) {
        snprintf (self->error, ERROR_MAX, "deadline_us: the request waited %.1f us, past its deadline of %u us; "
                  "not run", (double) rep->queue_ns / 1e3, req->deadline_us);
        st = SIG_DEADLINE_EXCEEDED;
    }
    if (m)
        rep->model_version = (char *) model_version (m);
    if (st == SIG_OK) {
        st = model_infer (m, req->features, rows, self->outputs, self->error, ERROR_MAX);
        uint64_t t_end = clock_now_ns ();
        rep->compute_ns = t_end - t_start;
        if (st == SIG_OK) {
            rep->outputs = self->outputs;
            rep->n_outputs = (size_t) rows * model_output_size (m);
            rep->rows = rows;
        }
    }
    rep->status = (Sigserve__V1__Status) st;
    if (st != SIG_OK)
        rep->error = self->error;
    self->stats.by_status[st]++;
}

static void s_handle (server_t *self, slot_t *slot)
{
    if (slot->overflow || slot->nframes < 2) {
        /* Not from a ROUTER peer we can address exactly: nothing to reply to. */
        self->stats.dropped++;
        log_warn ("dropped a message of %d frames: cannot echo its envelope", slot->nframes);
        return;
    }
    zmq_msg_t *payload = &slot->frames[slot->nframes - 1];
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__InferReply infer = SIGSERVE__V1__INFER_REPLY__INIT;
    Sigserve__V1__HealthReply health = SIGSERVE__V1__HEALTH_REPLY__INIT;
    Sigserve__V1__ListModelsReply list = SIGSERVE__V1__LIST_MODELS_REPLY__INIT;
    Sigserve__V1__Request *req = NULL;
    sig_status_t st = codec_decode_request (self->codec, zmq_msg_data (payload), zmq_msg_size (payload), &req,
                                            self->error, ERROR_MAX);
    if (st != SIG_OK) {
        reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
        reply.infer = &infer;
        infer.status = (Sigserve__V1__Status) st;
        infer.error = self->error;
        infer.queue_ns = clock_now_ns () - slot->t_recv;
        self->stats.by_status[st]++;
    } else if (req->body_case == SIGSERVE__V1__REQUEST__BODY_INFER) {
        reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
        reply.infer = &infer;
        s_handle_infer (self, req->infer, slot, &infer);
    } else if (req->body_case == SIGSERVE__V1__REQUEST__BODY_HEALTH) {
        reply.body_case = SIGSERVE__V1__REPLY__BODY_HEALTH;
        reply.health = &health;
        health.live = 1;
        health.ready = model_registry_ready (self->models);
        health.version = (char *) SIGSERVE_VERSION;
    } else {
        reply.body_case = SIGSERVE__V1__REPLY__BODY_LIST_MODELS;
        reply.list_models = &list;
        size_t n = model_registry_count (self->models);
        for (size_t i = 0; i < n; i++)
            self->infos[i].available = model_available (model_registry_at (self->models, i));
        list.n_models = n;
        list.models = self->info_ptrs;
    }
    if (reply.body_case == SIGSERVE__V1__REPLY__BODY_INFER)
        infer.server_ns = clock_now_ns () - slot->t_recv;
    size_t len = codec_encode_reply (&reply, self->reply_buf, self->reply_cap);
    if (len == 0) {
        /* Cannot happen with the buffer sized at start; answer rather than go silent. */
        Sigserve__V1__InferReply bad = SIGSERVE__V1__INFER_REPLY__INIT;
        bad.request_id = infer.request_id;
        bad.status = SIGSERVE__V1__STATUS__STATUS_INTERNAL;
        bad.error = (char *) "reply: larger than the server's reply buffer";
        reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
        reply.infer = &bad;
        len = codec_encode_reply (&reply, self->reply_buf, self->reply_cap);
    }
    s_send_reply (self, slot, len);
}

/* Moves whatever has arrived on the sockets into free slots of the ring, one socket after another
 * in turn, stamping each at receipt. */
static void s_top_up (server_t *self)
{
    const size_t depth = self->cfg->queue_depth;
    int progress = 1;
    while (progress && self->queued < depth) {
        progress = 0;
        for (size_t i = 0; i < self->socket_count && self->queued < depth; i++)
            if (s_recv_one (self->sockets[i], &self->slots[(self->head + self->queued) % depth])) {
                self->queued++;
                self->stats.received++;
                progress = 1;
            }
    }
}

/* Serves until the ring is empty. The ring is topped up on entry and, while requests remain
 * queued, again between them once TOP_UP_NS has passed: a request that arrives while others
 * compute is stamped then, not when the whole batch ends, so queue_ns and deadline_us count its
 * wait (to within the larger of TOP_UP_NS and one compute). Not before every request: a receive
 * that finds nothing costs libzmq a poll() system call, and with the ring empty the loop's own
 * zmq_poll is next anyway. */
#define TOP_UP_NS 20000ull

static size_t s_serve_queue (server_t *self)
{
    size_t served = 0;
    s_top_up (self);
    uint64_t last_top_up = clock_now_ns ();
    while (self->queued > 0) {
        slot_t *slot = &self->slots[self->head];
        s_handle (self, slot);
        s_release (slot);
        self->head = (self->head + 1) % self->cfg->queue_depth;
        self->queued--;
        served++;
        uint64_t now = clock_now_ns ();
        if (self->queued > 0 && now - last_top_up >= TOP_UP_NS) {
            s_top_up (self);
            last_top_up = now;
        }
    }
    return served;
}

int server_run (server_t *self, volatile sig_atomic_t *stop)
{
    long timeout_ms = self->cfg->busy_poll ? 0 : 100;   /* the stop flag is looked at this often */
    log_info ("serving %zu model(s) on %zu endpoint(s)%s", model_registry_count (self->models), self->socket_count,
              self->cfg->busy_poll ? ", busy-polling" : "");
    while (!*stop) {
        int rc = zmq_poll (self->poll, (int) self->socket_count, timeout_ms);
        if (rc < 0) {
            if (zmq_errno () == EINTR)
                continue;
            log_error ("zmq_poll: %s", zmq_strerror (zmq_errno ()));
            return -1;
        }
        if (rc > 0 || self->cfg->busy_poll)
            s_serve_queue (self);
    }
    /* Stopping: answer what has already arrived (including what ZeroMQ's I/O thread is still
     * handing over) until the sockets stay quiet for 10 ms, for up to a second. */
    uint64_t until = clock_now_ns () + DRAIN_NS;
    size_t drained = 0;
    while (clock_now_ns () < until) {
        size_t n = s_serve_queue (self);
        drained += n;
        if (n == 0 && zmq_poll (self->poll, (int) self->socket_count, 10) <= 0)
            break;
    }
    log_info ("stopping: answered %zu request(s) that were waiting; %llu received, %llu replied, "
              "%llu send failures, %llu dropped", drained, (unsigned long long) self->stats.received,
              (unsigned long long) self->stats.replied, (unsigned long long) self->stats.send_failures,
              (unsigned long long) self->stats.dropped);
    return 0;
}
