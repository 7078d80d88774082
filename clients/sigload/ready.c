/* sigload's checks before the sweep (sigload.h): every endpoint answers, on a socket of its own;
 * every load connection is up; what a dns:// name stands for (its addresses that answer); the
 * model's sizes from the server's list. Every socket is of --engine. */
#define _GNU_SOURCE
#include "clock.h"
#include "sigclient.h"
#include "sigload.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define READY_WAIT_MS 10000             /* how long to wait for an endpoint to be ready */
#define DNS_ANSWER_WAIT_MS 2000         /* how long the addresses behind a dns:// name get to answer */

/* Copies a reply's one frame into REPLY (CAP bytes at most); its whole size (more than CAP: cut). */
static int s_take (const zmtp_msg_t *m, uint8_t *reply, size_t cap)
{
    size_t n = m->frames[0].size;
    memcpy (reply, m->frames[0].data, n < cap ? n : cap);
    return (int) n;
}

static int s_exchange (client_sock_t *socket, const void *payload, size_t len, uint8_t *reply, size_t cap,
                       int timeout_ms)
{
    const zmtp_frame_t frame = { payload, len };
    zmtp_msg_t m;
    if (client_sock_send (socket, &frame, 1, timeout_ms) != 0 || client_sock_recv (socket, &m, timeout_ms) != 1)
        return -1;
    return s_take (&m, reply, cap);
}

/* The ready probe: a health request (sigserve), or 8 zero bytes (an echo server). */
static size_t s_probe (bool echo, uint8_t *buf)
{
    memset (buf, 0, 8);
    if (echo)
        return 8;
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__HealthRequest health = SIGSERVE__V1__HEALTH_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_HEALTH;
    req.health = &health;
    return sigserve__v1__request__pack (&req, buf);
}

/* 1: the reply to the probe says ready; 0: it does not (yet); -1: it is not a reply to the probe. */
static int s_probe_answer (bool echo, const uint8_t *probe, size_t probe_len, const uint8_t *reply, int n)
{
    if (echo)
        return n == (int) probe_len && memcmp (reply, probe, probe_len) == 0 ? 1 : -1;
    Sigserve__V1__Reply *rep = n >= 0 ? sigserve__v1__reply__unpack (NULL, (size_t) n, reply) : NULL;
    int rc = -1;
    if (rep && rep->body_case == SIGSERVE__V1__REPLY__BODY_HEALTH)
        rc = rep->health->ready ? 1 : 0;
    if (rep)
        sigserve__v1__reply__free_unpacked (rep, NULL);
    return rc;
}

/* Waits until ENDPOINT answers the probe with ready, over a socket of its own: a DEALER spread
 * over several peers cannot tell which one answered. */
static int s_endpoint_ready (const sigload_t *L, const char *endpoint, bool echo)
{
    uint8_t probe[64], reply[4096];
    size_t len = s_probe (echo, probe);
    int wait_ms = (int) L->opt->timeout_ms > READY_WAIT_MS ? (int) L->opt->timeout_ms : READY_WAIT_MS;
    int64_t deadline = (int64_t) clock_now_ns () + (int64_t) wait_ms * 1000000;
    const char *why = "no answer";
    int rc = -1;
    while (rc != 0) {
        int64_t left_ms = (deadline - (int64_t) clock_now_ns ()) / 1000000;
        if (left_ms <= 0) {
            fprintf (stderr, "sigload: %s: %s within %d ms\n", endpoint, why, wait_ms);
            return -1;
        }
        /* a fresh socket per try: an answer to an earlier try cannot be taken for this one's */
        client_sock_t *s = connection_socket_new (L->ctx, L->opt);
        char err[512];
        if (!s || client_sock_connect (s, endpoint, err, sizeof err) != 0) {
            fprintf (stderr, "sigload: cannot connect to %s: %s\n", endpoint, client_sock_strerror (errno));
            client_sock_destroy (&s);
            return -1;
        }
        int n = s_exchange (s, probe, len, reply, sizeof reply, (int) (left_ms < 1000 ? left_ms : 1000));
        if (n < 0 && errno == EPROTO) {
            /* CURVE on one side only: trying again cannot help (sigclient_sock.h) */
            fprintf (stderr, "sigload: %s (%s)\n", client_sock_last_failure (s),
                     L->opt->curve_server ? "leave out --curve-server and --curve-client"
                                          : "pass --curve-server FILE, the server's public certificate, and "
                                            "--curve-client FILE_secret, this client's");
            client_sock_destroy (&s);
            return -1;
        }
        client_sock_destroy (&s);
        int answer = n < 0 ? -2 : s_probe_answer (echo, probe, len, reply, n);
        if (answer == 1)
            rc = 0;
        else if (answer == 0) {
            why = "not ready";
            usleep (100 * 1000);
        } else if (answer == -1)
            why = echo ? "a reply that is not the echo of the request" : "a reply that is not a health reply";
    }
    return 0;
}

/* Every connection of C up before the first timed request (every peer is known to answer by now).
 * libzmq: one probe to each peer, which its round-robin hands to each pipe in turn. zmtp: probes,
 * one at a time, until every connection is up: its round-robin skips a connection that is not up
 * yet, so probes alone prove nothing of the others. */
static int s_connection_ready (const sigload_t *L, const connection_t *c, bool echo, const char *what)
{
    uint8_t probe[64], reply[4096];
    size_t len = s_probe (echo, probe);
    const zmtp_frame_t frame = { probe, len };
    bool one_at_a_time = client_sock_engine (c->socket) == SIGCLIENT_ENGINE_ZMTP;
    const int peers = (int) c->n_peers;
    for (unsigned i = 0; i < (one_at_a_time ? 1 : c->n_peers); i++)
        if (client_sock_send (c->socket, &frame, 1, -1) != 0)
            return -1;
    int64_t deadline = (int64_t) clock_now_ns () + (int64_t) L->opt->timeout_ms * 1000000 + 1000000000LL;
    for (unsigned got = 0; got < c->n_peers || (one_at_a_time && client_sock_ready_count (c->socket) < peers);) {
        int64_t left_ms = (deadline - (int64_t) clock_now_ns ()) / 1000000;
        zmtp_msg_t m;
        if (left_ms <= 0 || client_sock_recv (c->socket, &m, (int) left_ms) != 1) {
            fprintf (stderr, "sigload: %s: %u of %u peers answered\n", what,
                     one_at_a_time ? (unsigned) client_sock_ready_count (c->socket) : got, c->n_peers);
            return -1;
        }
        int n = s_take (&m, reply, sizeof reply);
        if (s_probe_answer (echo, probe, len, reply, n) < 0)
            continue;
        got++;
        if (one_at_a_time && (got < c->n_peers || client_sock_ready_count (c->socket) < peers)
            && client_sock_send (c->socket, &frame, 1, -1) != 0)
            return -1;
    }
    return 0;
}

/* ---- dns:// endpoints ---- */

/* Room for what dns:// endpoints stand for: one address each, MAX_ENDPOINTS in all. */
static char s_expanded[MAX_ENDPOINTS][SIGCLIENT_ENDPOINT_MAX];
static size_t s_n_expanded;

/* Keeps in ADDRS those that answer the probe within DNS_ANSWER_WAIT_MS (all of them when none
 * does, so that the readiness check says which fails): a name may list an address that takes no
 * part (::1 beside a server bound to 127.0.0.1, a pod on its way out), and a connection spread
 * over it would queue its share of requests there. Returns how many are kept; LEFT gets the rest. */
static size_t s_answering (const sigload_t *L, bool echo, char (*addrs)[SIGCLIENT_ENDPOINT_MAX], size_t n,
                           char *left, size_t left_len)
{
    uint8_t probe[64], reply[4096];
    size_t len = s_probe (echo, probe);
    const zmtp_frame_t frame = { probe, len };
    client_sock_t *sockets[MAX_ENDPOINTS] = { NULL };
    bool answered[MAX_ENDPOINTS] = { false };
    size_t waiting = 0;
    for (size_t i = 0; i < n; i++) {
        char err[512];
        sockets[i] = connection_socket_new (L->ctx, L->opt);
        if (sockets[i] && client_sock_connect (sockets[i], addrs[i], err, sizeof err) == 0
            && client_sock_send (sockets[i], &frame, 1, -1) == 0)
            waiting++;
        else
            client_sock_destroy (&sockets[i]);
    }
    /* Look at every socket (taking in what came, and with zmtp making the connections), then sleep
     * on all their fds: at most 10 ms, for zmtp's connection timers. */
    int64_t deadline = (int64_t) clock_now_ns () + (int64_t) DNS_ANSWER_WAIT_MS * 1000000;
    while (waiting > 0 && (int64_t) clock_now_ns () < deadline) {
        struct pollfd fds[4 * MAX_ENDPOINTS];
        int nfds = 0;
        for (size_t i = 0; i < n; i++) {
            zmtp_msg_t m;
            while (sockets[i] && !answered[i] && client_sock_try_recv (sockets[i], &m) == 1)
                if (s_probe_answer (echo, probe, len, reply, s_take (&m, reply, sizeof reply)) >= 0) {
                    answered[i] = true;
                    waiting--;
                }
            if (sockets[i] && !answered[i])
                nfds += client_sock_pollfds (sockets[i], fds + nfds, (int) (sizeof fds / sizeof fds[0]) - nfds);
        }
        if (waiting > 0)
            poll (fds, (nfds_t) nfds, 10);
    }
    size_t kept = 0, used = 0;
    left[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        client_sock_destroy (&sockets[i]);
        if (answered[i])
            memmove (addrs[kept++], addrs[i], sizeof *addrs);
        else if (used < left_len) {
            int w = snprintf (left + used, left_len - used, "%s%s", used ? ", " : "", addrs[i]);
            used += w > 0 ? (size_t) w : 0;
        }
    }
    return kept ? kept : n;
}

int ready_expand_dns (const sigload_t *L, bool echo, const char **eps, size_t *n_eps)
{
    const char *given[MAX_ENDPOINTS];
    size_t n_given = *n_eps, n = 0;
    memcpy (given, eps, n_given * sizeof *eps);
    for (size_t i = 0; i < n_given; i++) {
        if (strncmp (given[i], "dns://", 6) != 0) {
            if (n == MAX_ENDPOINTS)
                goto too_many;
            eps[n++] = given[i];
            continue;
        }
        char (*out)[SIGCLIENT_ENDPOINT_MAX] = &s_expanded[s_n_expanded];
        char err[512], left[1024];
        int found = sigclient_resolve_endpoint (given[i], out, MAX_ENDPOINTS - s_n_expanded, err, sizeof err);
        if (found < 0) {
            fprintf (stderr, "sigload: %s\n", err);
            return -1;
        }
        size_t kept = s_answering (L, echo, out, (size_t) found, left, sizeof left);
        printf ("%s:", given[i]);
        for (size_t k = 0; k < kept; k++)
            printf ("%s %s", k ? "," : "", out[k]);
        printf (kept < (size_t) found ? " (left out, no answer within %d ms: %s)\n" : "\n", DNS_ANSWER_WAIT_MS, left);
        if (n + kept > MAX_ENDPOINTS)
            goto too_many;
        for (size_t k = 0; k < kept; k++)
            eps[n++] = out[k];
        s_n_expanded += kept;
    }
    *n_eps = n;
    return 0;
too_many:
    fprintf (stderr, "sigload: more than %d endpoints once dns:// names are resolved\n", MAX_ENDPOINTS);
    return -1;
}

int ready_model_sizes (client_sock_t *socket, const char *model, int timeout_ms, model_sizes_t *sizes,
                          char *served, size_t served_len)
{
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__ListModelsRequest list = SIGSERVE__V1__LIST_MODELS_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_LIST_MODELS;
    req.list_models = &list;
    uint8_t request[64];
    static uint8_t reply[65536];
    size_t len = sigserve__v1__request__pack (&req, request);
    int n = s_exchange (socket, request, len, reply, sizeof reply, timeout_ms);
    served[0] = 0;
    if (n < 0 || n > (int) sizeof reply)
        return -1;
    Sigserve__V1__Reply *rep = sigserve__v1__reply__unpack (NULL, (size_t) n, reply);
    int rc = -1;
    if (rep && rep->body_case == SIGSERVE__V1__REPLY__BODY_LIST_MODELS) {
        size_t used = 0;
        for (size_t i = 0; i < rep->list_models->n_models; i++) {
            const Sigserve__V1__ModelInfo *m = rep->list_models->models[i];
            if (strcmp (m->name, model) == 0) {
                *sizes = (model_sizes_t) { .in = m->input_size, .out = m->output_size, .step_size = m->step_size };
                snprintf (sizes->type, sizeof sizes->type, "%s", m->type ? m->type : "");
                rc = 0;
            }
            int w = snprintf (served + used, served_len - used, "%s%s", i ? ", " : "", m->name);
            if (w > 0 && used + (size_t) w < served_len)
                used += (size_t) w;
        }
    }
    if (rep)
        sigserve__v1__reply__free_unpacked (rep, NULL);
    return rc;
}

int ready_check (sigload_t *L, int set, bool echo, const char *const *eps, size_t n_eps)
{
    for (size_t e = 0; e < n_eps; e++)
        if (s_endpoint_ready (L, eps[e], echo) != 0)
            return -1;
    for (size_t t = 0; t < L->n_workers; t++)
        for (size_t i = 0; i < L->workers[t].n_conns; i++) {
            char label[256];
            snprintf (label, sizeof label, "connection %u", L->workers[t].conns[set][i].global);
            if (s_connection_ready (L, &L->workers[t].conns[set][i], echo, label) != 0)
                return -1;
        }
    return 0;
}
