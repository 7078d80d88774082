/* sigload's workers: their connections (DEALER sockets of either engine, a ring of outstanding
 * requests each) and the hot loop each thread runs for a step: send what is due (open loop: on
 * schedule; closed loop: when a reply frees a place), receive every reply there is and check it,
 * expire requests past --timeout, record into the thread's own histograms, then sleep in ppoll ()
 * on the sockets' fds until the next send is due. sigload.h describes the design; nothing here
 * allocates per request. */
#define _GNU_SOURCE
#include "clock.h"
#include "rng.h"
#include "sigload.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#define HOUSEKEEPING_NS 10000000LL      /* a worker looks at timeouts and the abort flag this often */
#define BLOCKED_WAIT_NS 200000LL        /* recheck a full connection this often */
#define SPIN_NS 3000LL                  /* shorter waits are spun, not slept */
#define MAX_BURST 64                    /* sends between two looks at the replies */
#define ID_THREAD_SHIFT 56
#define ID_CONN_SHIFT 40
#define ID_SEQ_MASK ((UINT64_C (1) << ID_CONN_SHIFT) - 1)

static void s_put_le64 (uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t) (v >> (8 * i));
}

static uint64_t s_get_le64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t) p[i] << (8 * i);
    return v;
}

/* ---- connections ---- */

client_sock_t *connection_socket_new (void *ctx, const options_t *opt)
{
    const client_sock_opts_t o = { .engine = opt->engine, .curve = opt->curve_server ? &opt->curve_keys : NULL,
                                   .hwm = (int) opt->max_outstanding, .zmq_ctx = ctx };
    return client_sock_new (&o);
}

/* --streams: stream k (id base + k) to connection k mod C; each worker takes its connections'
 * streams in turn, the first of every connection, then the second..., so that the steps of one
 * connection's streams are spread in time. */
static int s_streams_assign (sigload_t *L)
{
    const options_t *opt = L->opt;
    uint64_t C = opt->connections;
    for (size_t t = 0; t < L->n_workers; t++) {
        worker_t *w = &L->workers[t];
        size_t total = 0, most = 0;
        for (size_t i = 0; i < w->n_conns; i++) {
            connection_t *c = &w->conns[SET_TARGET][i];
            c->n_streams = (uint32_t) (opt->streams / C + (c->global < opt->streams % C));
            c->streams = calloc (c->n_streams, sizeof *c->streams);
            if (!c->streams)
                return -1;
            for (uint32_t k = 0; k < c->n_streams; k++)
                c->streams[k] = (stream_t) { .id = opt->stream_base + c->global + k * C, .next_step = 1 };
            total += c->n_streams;
            most = c->n_streams > most ? c->n_streams : most;
        }
        w->streams = calloc (total, sizeof *w->streams);
        if (!w->streams)
            return -1;
        for (size_t k = 0; k < most; k++)
            for (size_t i = 0; i < w->n_conns; i++) {
                connection_t *c = &w->conns[SET_TARGET][i];
                if (k < c->n_streams) {
                    w->streams[w->n_streams].conn = c;
                    w->streams[w->n_streams++].stream = &c->streams[k];
                }
            }
    }
    return 0;
}

int workers_connect (sigload_t *L, int set, const char *const *eps, size_t n_eps)
{
    const options_t *opt = L->opt;
    for (unsigned g = 0; g < opt->connections; g++) {
        worker_t *w = &L->workers[g % L->n_workers];
        connection_t *c = &w->conns[set][g / L->n_workers];
        *c = (connection_t) { .index = g / (unsigned) L->n_workers, .global = g, .next_seq = 1, .oldest = 1,
                              .ring_mask = opt->max_outstanding - 1 };
        c->ring = calloc (opt->max_outstanding, sizeof *c->ring);
        c->socket = connection_socket_new (L->ctx, opt);
        if (!c->ring || !c->socket) {
            fprintf (stderr, "sigload: out of memory or sockets%s%s\n", c->ring ? ": " : "",
                     c->ring ? client_sock_strerror (errno) : "");
            return -1;
        }
        for (size_t e = 0; e < n_eps; e++) {
            bool mine = opt->connections >= n_eps ? e == g % n_eps : e % opt->connections == g;
            if (!mine)
                continue;
            char why[512];
            if (client_sock_connect (c->socket, eps[e], why, sizeof why) != 0) {
                fprintf (stderr, "sigload: cannot connect to %s: %s\n", eps[e], client_sock_strerror (errno));
                return -1;
            }
            c->n_peers++;
        }
        w->pfd_cap[set] += client_sock_pollfds_max (opt->engine, (int) c->n_peers);
    }
    /* room for every fd the connections may have (zmtp: one per endpoint), made once */
    for (size_t t = 0; t < L->n_workers; t++) {
        worker_t *w = &L->workers[t];
        free (w->pfds[set]);
        if (!(w->pfds[set] = calloc ((size_t) w->pfd_cap[set] + 1, sizeof *w->pfds[set]))) {
            fprintf (stderr, "sigload: out of memory\n");
            return -1;
        }
    }
    return set == SET_TARGET && opt->streams ? s_streams_assign (L) : 0;
}

/* ---- the hot path ---- */

void counts_copy_error (char *dst, const char *text)
{
    if (!text || dst[0])
        return;
    size_t n = 0;
    while (n + 1 < ERROR_TEXT && text[n]) {
        dst[n] = text[n];
        n++;
    }
    dst[n] = 0;
}

static void s_count_error (worker_t *w, bool measured, int outcome, const char *text)
{
    if (measured)
        w->counts.outcomes[outcome]++;
    else
        w->counts.warmup_errors++;
    counts_copy_error (w->counts.first_error[outcome], text);
}

enum { SEND_OK, SEND_FULL, SEND_BLOCKED, SEND_FAILED };

/* Sends the connection's next request (the next step of STREAM when not NULL). T_SCHED < 0: closed
 * loop, scheduled = actual send. */
static int s_send (worker_t *w, connection_t *c, stream_t *stream, int64_t t_sched, bool measured)
{
    sigload_t *L = w->load;
    uint64_t seq = c->next_seq;
    slot_t *slot = &c->ring[seq & c->ring_mask];
    if (slot->state == SLOT_PENDING)
        return SEND_FULL;
    uint64_t id = ((uint64_t) w->index << ID_THREAD_SHIFT) | ((uint64_t) c->index << ID_CONN_SHIFT) | seq;
    size_t set = (size_t) (seq % L->n_sets), len;
    if (L->step.echo) {
        len = L->echo_len;
        memcpy (w->send_buf, L->echo_payloads + set * len, len);
        s_put_le64 (w->send_buf, id);
    } else {
        w->infer.request_id = id;
        if (L->opt->n_models > 1)
            w->infer.model = (char *) L->opt->models[seq % L->opt->n_models];
        w->infer.features = L->pool + set * L->per_request;
        w->infer.stream_id = stream ? stream->id : 0;
        w->infer.step = stream ? stream->next_step : 0;
        len = sigserve__v1__request__pack (&w->req, w->send_buf);
    }
    int64_t now = (int64_t) clock_now_ns ();
    const zmtp_frame_t frame = { w->send_buf, len };
    if (client_sock_send (c->socket, &frame, 1, 0) != 0)
        return errno == EAGAIN ? SEND_BLOCKED : SEND_FAILED;
    slot->seq = seq;
    slot->t_sched = t_sched < 0 ? now : t_sched;
    slot->t_send = now;
    slot->state = SLOT_PENDING;
    slot->measured = measured;
    c->next_seq++;
    c->outstanding++;
    w->counts.sent++;
    if (stream)
        stream->next_step++;
    return SEND_OK;
}

/* Open loop: the next connection (round robin) that takes the request; with streams, the next
 * stream (in turn) whose connection takes it. */
static int s_send_any (worker_t *w, connection_t *conns, int64_t t_sched, bool measured)
{
    bool streams = w->load->step.streams;
    size_t n = streams ? w->n_streams : w->n_conns;
    for (size_t tries = 0; tries < n; tries++) {
        size_t *rr = streams ? &w->stream_rr : &w->rr;
        size_t i = *rr;
        *rr = i + 1 == n ? 0 : i + 1;
        int rc = streams ? s_send (w, w->streams[i].conn, w->streams[i].stream, t_sched, measured)
                         : s_send (w, &conns[i], NULL, t_sched, measured);
        if (rc == SEND_OK || rc == SEND_FAILED)
            return rc;
    }
    return SEND_BLOCKED;
}

static void s_schedule_advance (worker_t *w, const step_t *st)
{
    w->sched_k++;
    const options_t *opt = w->load->opt;
    if (st->schedule) {
        /* this thread's entries are every T-th of the file, from its index */
        w->sched_index += w->load->n_workers;
        if (w->sched_index >= opt->n_schedule)
            w->sched_done = true;
        else
            w->sched_next = st->t0 + opt->schedule_ns[w->sched_index];
    } else if (opt->poisson) {
        w->sched_offset_ns += -log (rng_unit_open (&w->rng)) * w->period_ns;
        w->sched_next = st->t0 + (int64_t) w->sched_offset_ns;
    } else
        w->sched_next = st->t0 + w->phase_ns + (int64_t) ((double) w->sched_k * w->period_ns);
}

/* The sender's held log (worker_t): a point where a held time begins (START) or ends at AT. */
static void s_held_mark (worker_t *w, int64_t at, bool start)
{
    if (w->held_n == HELD_LOG) {
        w->held_first = (w->held_first + 1) % HELD_LOG;
        w->held_n--;
    }
    size_t k = (w->held_first + w->held_n++) % HELD_LOG;
    w->held_log[k].at = at;
    w->held_log[k].total = w->held_total;
    w->held_log[k].start = start;
}

/* The sender's total held time up to T (T from the requests' schedule, which never goes back:
 * the points before the last one at or before T are dropped). */
static int64_t s_held_until (worker_t *w, int64_t t)
{
    while (w->held_n >= 2 && w->held_log[(w->held_first + 1) % HELD_LOG].at <= t) {
        w->held_first = (w->held_first + 1) % HELD_LOG;
        w->held_n--;
    }
    if (w->held_n == 0)
        return w->held ? w->held_total + (t > w->held_from ? t - w->held_from : 0) : w->held_total;
    const int64_t at = w->held_log[w->held_first].at, total = w->held_log[w->held_first].total;
    if (at > t)
        return total;   /* before every point: none of the held time since then was before T */
    return w->held_log[w->held_first].start ? total + (t - at) : total;
}

/* The held time between T and NOW. */
static int64_t s_held_since (worker_t *w, int64_t t, int64_t now)
{
    int64_t total = w->held_total + (w->held ? now - w->held_from : 0);
    int64_t held = total - s_held_until (w, t);
    return held > 0 ? held : 0;
}

/* A measured request scheduled at T went out at NOW: its send lag, split into the part that passed
 * while every connection was full (held back by the server) and the rest (sigload's own). */
static void s_count_lag (worker_t *w, int64_t t, int64_t now)
{
    int64_t lag = now - t > 0 ? now - t : 0;
    int64_t held = s_held_since (w, t, now);
    if (held > lag)
        held = lag;
    w->counts.lag_sent++;
    w->counts.held_lag_sum += (double) held;
    w->counts.own_lag_sum += (double) (lag - held);
    if (lag - held > w->counts.own_lag_max)
        w->counts.own_lag_max = lag - held;
}

static int s_open_send (worker_t *w, connection_t *conns, int64_t now)
{
    const step_t *st = &w->load->step;
    int sent = 0;
    w->blocked = false;
    /* a sender that fell behind catches up in bursts, receiving in between */
    while (!w->sched_done && w->sched_next <= now && sent < MAX_BURST) {
        int64_t t = w->sched_next;
        bool measured = t >= st->measure_start;
        if (t >= st->measure_end || (measured && st->requests && w->counts.requests >= w->quota)) {
            w->sched_done = true;
            break;
        }
        if (now - t > w->load->timeout_ns) {
            /* could not even be sent in time: the connections were full (the server's doing) or
             * the sender could not keep up (sigload's) */
            s_count_error (w, measured, OUT_TIMEOUT, "not sent within --timeout of its scheduled time");
            if (measured && 2 * s_held_since (w, t, now) >= now - t)
                w->counts.unsent_held++;
            else if (measured)
                w->counts.unsent_own++;
        } else {
            int rc = s_send_any (w, conns, t, measured);
            if (rc == SEND_BLOCKED) {
                w->blocked = true;
                if (!w->held) {
                    w->held = true;
                    w->held_from = now;
                    s_held_mark (w, now, true);
                }
                break;
            }
            if (w->held) {
                w->held = false;
                w->held_total += now - w->held_from;
                s_held_mark (w, now, false);
            }
            if (rc == SEND_FAILED)
                s_count_error (w, measured, OUT_SEND_FAILED, client_sock_strerror (errno));
            else {
                sent++;
                if (measured)
                    s_count_lag (w, t, now);
            }
        }
        if (measured)
            w->counts.requests++;
        s_schedule_advance (w, st);
    }
    return sent;
}

static bool s_closed_active (const worker_t *w, int64_t now)
{
    const step_t *st = &w->load->step;
    if (w->closed_total == 0 || now >= st->measure_end)
        return false;
    return !(st->requests && w->counts.requests >= w->quota);
}

static int s_closed_send (worker_t *w, connection_t *conns, int64_t now)
{
    const step_t *st = &w->load->step;
    int sent = 0;
    for (size_t i = 0; i < w->n_conns; i++) {
        connection_t *c = &conns[i];
        while (c->outstanding < c->closed_target && s_closed_active (w, now)) {
            bool measured = now >= st->measure_start;
            stream_t *stream = st->streams ? &c->streams[c->stream_rr] : NULL;
            int rc = s_send (w, c, stream, -1, measured);
            if (rc == SEND_OK && stream)
                c->stream_rr = c->stream_rr + 1 == c->n_streams ? 0 : c->stream_rr + 1;
            if (rc == SEND_FAILED) {
                s_count_error (w, measured, OUT_SEND_FAILED, client_sock_strerror (errno));
                if (measured)
                    w->counts.requests++;
                break;
            }
            if (rc != SEND_OK)
                break;
            if (measured)
                w->counts.requests++;
            sent++;
        }
    }
    return sent;
}

/* Whether OUT matches the expected outputs of request SEQ; when not, and *WHY is still empty (the
 * first mismatch of its kind), says which output, what was expected and what came. */
static bool s_outputs_match (const sigload_t *L, uint64_t seq, const float *out, size_t n, char *why)
{
    size_t set = (size_t) (seq % L->n_sets);
    char text[256];
    if (n != L->out_per_request) {
        if (!why[0]) {
            snprintf (text, sizeof text, "request %zu of --features: %zu outputs, --expect holds %zu", set + 1, n,
                      L->out_per_request);
            counts_copy_error (why, text);
        }
        return false;
    }
    const float *e = L->expect + set * n;
    float tol = (float) L->opt->tolerance;
    for (size_t i = 0; i < n; i++)
        if (!(fabsf (out[i] - e[i]) <= tol * fmaxf (1.0f, fabsf (e[i])))) {
            if (!why[0]) {
                snprintf (text, sizeof text, "request %zu of --features, output %zu: expected %.9g, got %.9g "
                          "(tolerance %.3g x max(1, |expected|))", set + 1, i, (double) e[i], (double) out[i],
                          L->opt->tolerance);
                counts_copy_error (why, text);
            }
            return false;
        }
    return true;
}

/* One reply of N bytes at DATA (a view into the socket layer's buffer) on connection C. */
static void s_reply (worker_t *w, connection_t *c, const uint8_t *data, size_t n, int64_t now)
{
    sigload_t *L = w->load;
    const step_t *st = &L->step;
    uint64_t id, server_ns = 0;
    int status = OUT_OK;
    const char *error = NULL;
    const float *outputs = NULL;
    size_t n_outputs = 0;
    if (n > w->recv_cap) {
        s_count_error (w, true, OUT_BAD_REPLY, "a reply larger than the receive buffer");
        return;
    }
    if (st->echo) {
        if (n != L->echo_len) {
            s_count_error (w, true, OUT_BAD_REPLY, "an echo of another size than the request");
            return;
        }
        id = s_get_le64 (data);
    } else {
        arena_reset (w->arena);
        Sigserve__V1__Reply *rep = sigserve__v1__reply__unpack (arena_protobuf_allocator (w->arena), n, data);
        if (!rep || rep->body_case != SIGSERVE__V1__REPLY__BODY_INFER || (int) rep->infer->status < 0
            || (int) rep->infer->status >= OUT_STATUS_COUNT) {
            s_count_error (w, true, OUT_BAD_REPLY, rep ? "a reply that is not an InferReply with a known status"
                                                       : "an undecodable reply");
            return;
        }
        const Sigserve__V1__InferReply *r = rep->infer;
        id = r->request_id;
        status = (int) r->status;
        server_ns = r->server_ns;
        error = r->error;
        outputs = r->outputs;
        n_outputs = r->n_outputs;
        if (id == 0 && status != OUT_OK) {
            /* the server could not decode a request: no id to match it with */
            s_count_error (w, true, status, error);
            return;
        }
    }
    uint64_t seq = id & ID_SEQ_MASK;
    slot_t *slot = &c->ring[seq & c->ring_mask];
    if ((id >> ID_THREAD_SHIFT) != (uint64_t) w->index || ((id >> ID_CONN_SHIFT) & 0xffff) != c->index || seq == 0
        || seq >= c->next_seq || slot->seq != seq || slot->state == SLOT_FREE) {
        s_count_error (w, true, OUT_UNMATCHED, "a reply whose request_id is not outstanding");
        return;
    }
    if (slot->state == SLOT_TIMED_OUT) {
        slot->state = SLOT_FREE;
        w->counts.late++;
        return;
    }
    slot->state = SLOT_FREE;
    c->outstanding--;
    bool measured = slot->measured;
    if (measured) {
        w->counts.answered++;
        w->counts.last_answer = now;
    }
    if (status == OUT_OK && L->expect && !s_outputs_match (L, seq, outputs, n_outputs,
                                                            w->counts.first_error[OUT_MISMATCH]))
        status = OUT_MISMATCH;
    if (status != OUT_OK) {
        s_count_error (w, measured, status, status == OUT_MISMATCH ? NULL : error);
        return;
    }
    if (!measured)
        return;
    w->counts.outcomes[OUT_OK]++;
    int64_t total = now - slot->t_sched, round_trip = now - slot->t_send, lag = slot->t_send - slot->t_sched;
    histogram_record (w->total, total);
    if (!st->echo)
        histogram_record (w->server, (int64_t) server_ns);
    histogram_record (w->network, round_trip - (int64_t) server_ns);
    w->counts.lag_sum += (double) lag;
    if (lag > w->counts.lag_max)
        w->counts.lag_max = lag;
}

/* Every reply C has now, to the end (zmtp: none is left in its buffers; libzmq: its ZMQ_FD is armed). */
static int s_drain (worker_t *w, connection_t *c)
{
    int got = 0;
    zmtp_msg_t m;
    while (client_sock_try_recv (c->socket, &m) == 1) {
        if (m.total_frames == 1)
            s_reply (w, c, m.frames[0].data, m.frames[0].size, (int64_t) clock_now_ns ());
        else
            s_count_error (w, true, OUT_BAD_REPLY, "a reply of more than one frame");
        got++;
    }
    return got;
}

/* The fds of the set's connections, each connection's range noted; their count. */
static int s_gather_fds (worker_t *w, connection_t *conns, struct pollfd *pfds, int cap)
{
    int n = 0;
    for (size_t i = 0; i < w->n_conns; i++) {
        conns[i].pfd_first = n;
        conns[i].pfd_count = client_sock_pollfds (conns[i].socket, pfds + n, cap - n);
        n += conns[i].pfd_count;
    }
    return n;
}

/* Which connections the next turn receives from. After a ppoll that saw events, with zmtp, those
 * whose fds it saw ready: each was drained to the end, so one with no event holds no reply. Else
 * all: libzmq's ZMQ_FD says nothing of what a send's processing took in, and a timeout is when the
 * zmtp connections' timers (reconnecting, heartbeats) run, inside the receive. */
static void s_mark_wake (worker_t *w, connection_t *conns, const struct pollfd *pfds, int events)
{
    bool all = events <= 0 || w->load->opt->engine != SIGCLIENT_ENGINE_ZMTP;
    for (size_t i = 0; i < w->n_conns; i++) {
        connection_t *c = &conns[i];
        c->wake = all;
        for (int k = 0; k < c->pfd_count && !c->wake; k++)
            c->wake = pfds[c->pfd_first + k].revents != 0;
    }
}

static void s_expire (worker_t *w, connection_t *c, int64_t now)
{
    while (c->oldest < c->next_seq) {
        slot_t *slot = &c->ring[c->oldest & c->ring_mask];
        if (slot->seq == c->oldest && slot->state == SLOT_PENDING) {
            if (now - slot->t_send < w->load->timeout_ns)
                return;
            slot->state = SLOT_TIMED_OUT;
            c->outstanding--;
            s_count_error (w, slot->measured, OUT_TIMEOUT, "no reply within --timeout");
        }
        c->oldest++;
    }
}

static void s_publish (worker_t *w)
{
    uint64_t errors = w->counts.warmup_errors;
    for (int o = 1; o < OUT_COUNT; o++)
        errors += w->counts.outcomes[o];
    atomic_store_explicit (&w->pub_sent, w->counts.sent, memory_order_relaxed);
    atomic_store_explicit (&w->pub_measured, w->counts.requests, memory_order_relaxed);
    atomic_store_explicit (&w->pub_answered, w->counts.answered, memory_order_relaxed);
    atomic_store_explicit (&w->pub_errors, errors, memory_order_relaxed);
}

static void s_sleep_until (int64_t t)
{
    int64_t now = (int64_t) clock_now_ns ();
    if (t > now) {
        struct timespec ts = { .tv_sec = (t - now) / 1000000000LL, .tv_nsec = (t - now) % 1000000000LL };
        while (nanosleep (&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

/* Sets this thread's share of the step: rate and phase, or concurrency per connection; quota. */
static void s_step_begin (worker_t *w, connection_t *conns)
{
    sigload_t *L = w->load;
    const step_t *st = &L->step;
    const options_t *opt = L->opt;
    uint64_t T = L->n_workers, t = (uint64_t) w->index;
    histogram_reset (w->total);
    histogram_reset (w->server);
    histogram_reset (w->network);
    memset (&w->counts, 0, sizeof w->counts);
    w->counts.last_answer = st->measure_start;
    w->rr = 0;
    w->blocked = false;
    w->held = false;
    w->held_from = w->held_total = 0;
    w->held_first = w->held_n = 0;
    w->stream_rr = 0;
    if (st->mode == MODE_OPEN) {
        /* each thread's share of the rate: 1/T, or with streams its streams' share (1/N a stream) */
        double share = st->streams ? (double) w->n_streams / (double) opt->streams : 1.0 / (double) T;
        double rate = st->target * share;
        w->period_ns = 1e9 / rate;
        w->phase_ns = opt->poisson ? 0 : (int64_t) ((double) t * 1e9 / st->target);
        w->sched_k = 0;
        if (st->streams) {
            uint64_t R = st->requests, before = 0;
            for (size_t u = 0; u < (size_t) t; u++)
                before += w->load->workers[u].n_streams;
            w->quota = (uint64_t) ((long double) R * (before + w->n_streams) / opt->streams)
                       - (uint64_t) ((long double) R * before / opt->streams);
        } else
            w->quota = st->requests / T + (t < st->requests % T);
        w->sched_done = (st->requests && w->quota == 0) || (st->schedule && t >= opt->n_schedule);
        if (st->schedule) {
            w->sched_index = (size_t) t;
            w->sched_next = w->sched_done ? INT64_MAX : st->t0 + opt->schedule_ns[t];
            w->spin_ns = L->spin_ns;
            return;
        }
        /* spin only while it costs at most a tenth of this thread's time */
        w->spin_ns = w->period_ns >= 10.0 * (double) L->spin_ns ? L->spin_ns : 0;
        if (opt->poisson) {
            w->sched_offset_ns = -log (rng_unit_open (&w->rng)) * w->period_ns;
            w->sched_next = st->t0 + (int64_t) w->sched_offset_ns;
        } else
            w->sched_next = st->t0 + w->phase_ns;
        return;
    }
    /* closed loop: connection g keeps N / C (+1 for the first N mod C) outstanding */
    uint64_t N = (uint64_t) st->target, C = opt->connections;
    uint64_t before = 0, mine = 0;
    for (uint64_t g = 0; g < C; g++) {
        uint64_t share = N / C + (g < N % C);
        if (g % T < t)
            before += share;
        else if (g % T == t)
            mine += share;
    }
    for (size_t i = 0; i < w->n_conns; i++)
        conns[i].closed_target = (uint32_t) (N / C + (conns[i].global < N % C));
    w->closed_total = (uint32_t) mine;
    /* --requests split in proportion to the concurrency */
    uint64_t R = st->requests;
    w->quota = N ? (uint64_t) ((long double) R * (before + mine) / N) - (uint64_t) ((long double) R * before / N) : 0;
}

static void s_step_run (worker_t *w)
{
    sigload_t *L = w->load;
    const step_t *st = &L->step;
    connection_t *conns = w->conns[st->set];
    struct pollfd *pfds = w->pfds[st->set];
    s_step_begin (w, conns);
    s_sleep_until (st->t0);
    s_mark_wake (w, conns, pfds, 0);
    for (;;) {
        int64_t now = (int64_t) clock_now_ns ();
        bool aborted = atomic_load_explicit (&L->abort, memory_order_relaxed);
        int sent = 0;
        if (!aborted)
            sent = st->mode == MODE_OPEN ? s_open_send (w, conns, now) : s_closed_send (w, conns, now);
        /* Receiving last, until there is nothing more, leaves every ZMQ_FD armed for the sleep below
         * (and every zmtp connection empty). */
        int got = 0;
        for (size_t i = 0; i < w->n_conns; i++)
            if (conns[i].wake)
                got += s_drain (w, &conns[i]);
        s_mark_wake (w, conns, pfds, 0);
        now = (int64_t) clock_now_ns ();
        uint64_t outstanding = 0;
        for (size_t i = 0; i < w->n_conns; i++) {
            s_expire (w, &conns[i], now);
            outstanding += conns[i].outstanding;
        }
        s_publish (w);
        bool sending = !aborted && (st->mode == MODE_OPEN ? !w->sched_done : s_closed_active (w, now));
        if (!sending && (outstanding == 0 || aborted))
            break;
        if (got > 0 || (st->mode == MODE_CLOSED && sent > 0))
            continue;
        int64_t wake = now + HOUSEKEEPING_NS;
        bool send_due = false;
        if (sending && st->mode == MODE_OPEN) {
            int64_t due = w->blocked ? now + BLOCKED_WAIT_NS : w->sched_next;
            if (due < wake) {
                wake = due;
                send_due = !w->blocked;
            }
        }
        if (sending && st->mode == MODE_CLOSED && st->measure_end < wake)
            wake = st->measure_end;
        /* A sleeping thread wakes late (tens of us on a VM): wake a little early and spin. */
        if (send_due)
            wake -= w->spin_ns;
        int64_t wait = wake - now;
        if (L->opt->busy_poll || wait < SPIN_NS)
            continue;
        struct timespec ts = { .tv_sec = wait / 1000000000LL, .tv_nsec = wait % 1000000000LL };
        int nfds = s_gather_fds (w, conns, pfds, w->pfd_cap[st->set]);
        s_mark_wake (w, conns, pfds, ppoll (pfds, (nfds_t) nfds, &ts, NULL));
    }
    s_publish (w);
}

void *worker_main (void *arg)
{
    worker_t *w = arg;
    sigload_t *L = w->load;
    /* Sleep precisely: the default 50 us of timer slack would make every send late. */
    prctl (PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    for (;;) {
        pthread_barrier_wait (&L->start);
        if (atomic_load (&L->quit))
            break;
        s_step_run (w);
        atomic_store_explicit (&w->done, 1, memory_order_release);
    }
    return NULL;
}

/* ---- setup ---- */

int workers_new (sigload_t *L, bool with_floor)
{
    const options_t *opt = L->opt;
    L->n_workers = opt->threads;
    L->workers = calloc (L->n_workers, sizeof *L->workers);
    if (!L->workers)
        return -1;
    for (size_t t = 0; t < L->n_workers; t++) {
        worker_t *w = &L->workers[t];
        w->load = L;
        w->index = (int) t;
        w->n_conns = opt->connections / L->n_workers + (t < opt->connections % L->n_workers);
        for (int set = 0; set < (with_floor ? 2 : 1); set++)
            if (!(w->conns[set] = calloc (w->n_conns, sizeof *w->conns[set])))
                return -1;
        w->total = histogram_new ();
        w->server = histogram_new ();
        w->network = histogram_new ();
        if (!w->total || !w->server || !w->network)
            return -1;
        w->rng = (opt->seed + 1) * 0xd1b54a32d192ed03ull + t * 0x9e3779b97f4a7c15ull;   /* any state is good */
    }
    return 0;
}

int workers_buffers (sigload_t *L)
{
    for (size_t t = 0; t < L->n_workers; t++) {
        worker_t *w = &L->workers[t];
        w->send_buf = malloc (L->send_cap);
        w->recv_cap = 65536 + L->echo_len;
        w->arena = arena_new (2 * w->recv_cap + 65536, SIZE_MAX);   /* its pages touched now, not on the first reply */
        if (!w->send_buf || !w->arena)
            return -1;
        w->req = (Sigserve__V1__Request) SIGSERVE__V1__REQUEST__INIT;
        w->infer = (Sigserve__V1__InferRequest) SIGSERVE__V1__INFER_REQUEST__INIT;
        w->req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
        w->req.infer = &w->infer;
        w->infer.model = (char *) L->opt->models[0];
        w->infer.n_features = L->per_request;
        w->infer.features = L->pool;
        w->infer.rows = L->opt->rows;
        w->infer.deadline_us = L->opt->deadline_us;
    }
    return 0;
}

void workers_destroy (sigload_t *L)
{
    if (!L->workers)
        return;
    for (size_t t = 0; t < L->n_workers; t++) {
        worker_t *w = &L->workers[t];
        for (int set = 0; set < 2; set++) {
            for (size_t i = 0; w->conns[set] && i < w->n_conns; i++) {
                client_sock_destroy (&w->conns[set][i].socket);
                free (w->conns[set][i].ring);
                free (w->conns[set][i].streams);
            }
            free (w->conns[set]);
            free (w->pfds[set]);
        }
        histogram_destroy (&w->total);
        histogram_destroy (&w->server);
        histogram_destroy (&w->network);
        free (w->streams);
        free (w->send_buf);
        arena_destroy (&w->arena);
    }
    free (L->workers);
    L->workers = NULL;
}
