/* rtt: the transport floors in one run. Loopback round trips of one message (--bytes, default 2048:
 * the demo model's request) between two threads of one process, each pinned to its own CPU: a
 * client that sends and waits for the reply, and an echo that sends back what it got. Each method
 * is a way of moving the bytes, blocking (the thread sleeps in the kernel until they come) or
 * spinning (non-blocking calls busy-polled on both sides):
 *   tcp, tcp-spin         raw TCP (TCP_NODELAY), write and read of exactly the message: the floor
 *                         under anything that speaks TCP;
 *   zmq, zmq-spin         libzmq DEALER -> ROUTER (routing id and body back), zmq_recv blocking or
 *                         ZMQ_DONTWAIT; libzmq's I/O threads (one per side) move the bytes;
 *   zmtp, zmtp-spin       our engine (transport/): zmtp_dealer -> zmtp_router, the calling threads
 *                         doing their own reads and writes, as the server's fronts do;
 *   unix, zmq-ipc, zmtp-ipc (and -spin)  the same over Unix-domain sockets.
 * What it is for: what the service's round trips are compared with (docs/perf.md, "Protocol": the
 * raw-transport floor in the same run), and what our engine costs next to libzmq and to the kernel.
 * Every round trip is timed with CLOCK_MONOTONIC on the client (send to whole reply), the warm-up
 * dropped; every reply is checked (size, the sequence number in its first 8 bytes, every byte);
 * the messages are random bytes from a rotating pool, not zeros. libzmq's I/O threads run on the
 * CPUs of the affinity mask other than the two pinned ones (all of them when there is no other). */
#define _GNU_SOURCE
#include "base/threads.h"
#include "latency.h"
#include "zmtp_addr.h"
#include "zmtp_dealer.h"
#include "zmtp_router.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define POOL 64                 /* distinct messages cycled through */
#define SEQ_BYTES 8

typedef enum { ENGINE_RAW, ENGINE_ZMQ, ENGINE_ZMTP } engine_t;

typedef struct {
    const char *name;
    engine_t engine;
    bool spin, ipc;
} method_t;

static const method_t s_methods[] = {
    { "tcp", ENGINE_RAW, false, false },       { "tcp-spin", ENGINE_RAW, true, false },
    { "zmq", ENGINE_ZMQ, false, false },       { "zmq-spin", ENGINE_ZMQ, true, false },
    { "zmtp", ENGINE_ZMTP, false, false },     { "zmtp-spin", ENGINE_ZMTP, true, false },
    { "unix", ENGINE_RAW, false, true },       { "unix-spin", ENGINE_RAW, true, true },
    { "zmq-ipc", ENGINE_ZMQ, false, true },    { "zmq-ipc-spin", ENGINE_ZMQ, true, true },
    { "zmtp-ipc", ENGINE_ZMTP, false, true },  { "zmtp-ipc-spin", ENGINE_ZMTP, true, true },
};
#define METHODS (sizeof s_methods / sizeof s_methods[0])

typedef struct {
    size_t bytes;
    uint32_t iterations, warmup;
    int cpus[2];                /* client, echo */
    int port;                   /* 0: a free one per method */
    bool chosen[METHODS];       /* in s_methods' order */
    const char *csv;
} options_t;

/* One method's run: what the two threads share. The sockets are made by the main thread (so that
 * libzmq's I/O threads inherit its CPUs, not a pinned thread's) and used by one thread each. */
typedef struct {
    const options_t *o;
    const method_t *m;
    int client_fd, echo_fd;                     /* raw */
    void *zctx[2], *zsock[2];                   /* zmq: client, echo */
    zmtp_dealer_t *dealer;                      /* zmtp */
    zmtp_router_t *router;
    const uint8_t *pool;                        /* POOL messages of o->bytes */
    double *samples;
} run_t;

static void s_die (const run_t *r, const char *fmt, ...) __attribute__ ((format (printf, 2, 3), noreturn));
static void s_die (const run_t *r, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    fprintf (stderr, "rtt: %s: ", r ? r->m->name : "setup");
    vfprintf (stderr, fmt, ap);
    fputc ('\n', stderr);
    va_end (ap);
    exit (1);
}

static uint64_t s_now_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static void s_usage (FILE *out)
{
    fprintf (out,
             "usage: rtt [--bytes N] [--iterations N] [--warmup W] [--cpus A,B] [--methods LIST]\n"
             "           [--endpoint-port P] [--csv FILE]\n"
             "Loopback round trips of one message between two threads of this process, one table row\n"
             "per method: p50 p90 p99 p99.9 min max mean sd in microseconds.\n"
             "  --bytes N       message size (default 2048, the demo model's request; at least 8:\n"
             "                  the first 8 bytes carry the sequence number)\n"
             "  --iterations N  timed round trips per method (default 20000)\n"
             "  --warmup W      round trips dropped first (default 2000; they include connecting)\n"
             "  --cpus A,B      the client's CPU and the echo's (default: the first two CPUs of the\n"
             "                  affinity mask); libzmq's I/O threads get the mask's other CPUs\n"
             "  --methods LIST  comma-separated, in any order (default: all, in this order):\n"
             "                  tcp, tcp-spin       raw TCP, TCP_NODELAY; blocking read/write, or\n"
             "                                      non-blocking sockets busy-polled both sides\n"
             "                  zmq, zmq-spin       libzmq DEALER -> ROUTER over tcp://; blocking\n"
             "                                      zmq_recv, or ZMQ_DONTWAIT busy-polled\n"
             "                  zmtp, zmtp-spin     our engine: zmtp_dealer -> zmtp_router; the client\n"
             "                                      blocks in zmtp_dealer_recv and the echo sleeps in\n"
             "                                      zmtp_router_wait, or both poll without sleeping\n"
             "                  unix, unix-spin, zmq-ipc, zmq-ipc-spin, zmtp-ipc, zmtp-ipc-spin\n"
             "                                      the same over Unix-domain sockets (a socketpair,\n"
             "                                      ipc://@ abstract names)\n"
             "  --endpoint-port P  the TCP port on 127.0.0.1 (default 0: a free one for each method)\n"
             "  --csv FILE      also write the rows to FILE (method,bytes,iterations,p50,...,sd)\n"
             "  --help          this text\n"
             "Every reply is checked (size, sequence number, every byte); a mismatch stops the run.\n");
}

/* "4,5" -> two CPUs. */
static int s_parse_cpus (const char *text, int *cpus)
{
    char *end;
    long a = strtol (text, &end, 10);
    if (end == text || *end != ',')
        return -1;
    const char *b_text = end + 1;
    long b = strtol (b_text, &end, 10);
    if (end == b_text || *end || a < 0 || b < 0 || a >= CPU_SETSIZE || b >= CPU_SETSIZE)
        return -1;
    cpus[0] = (int) a;
    cpus[1] = (int) b;
    return 0;
}

static int s_parse_methods (const char *text, bool *chosen)
{
    memset (chosen, 0, METHODS * sizeof *chosen);
    char buf[512];
    snprintf (buf, sizeof buf, "%s", text);
    for (char *save, *t = strtok_r (buf, ",", &save); t; t = strtok_r (NULL, ",", &save)) {
        size_t k = 0;
        while (k < METHODS && strcmp (t, s_methods[k].name) != 0)
            k++;
        if (k == METHODS) {
            fprintf (stderr, "rtt: --methods: no method \"%s\" (see --help)\n", t);
            return -1;
        }
        chosen[k] = true;
    }
    return 0;
}

static int s_parse (int argc, char **argv, options_t *o)
{
    *o = (options_t) { .bytes = 2048, .iterations = 20000, .warmup = 2000, .cpus = { -1, -1 } };
    for (size_t k = 0; k < METHODS; k++)
        o->chosen[k] = true;
    static const struct option longs[] = {
        { "bytes", required_argument, NULL, 'b' }, { "iterations", required_argument, NULL, 'n' },
        { "warmup", required_argument, NULL, 'w' }, { "cpus", required_argument, NULL, 'c' },
        { "methods", required_argument, NULL, 'm' }, { "endpoint-port", required_argument, NULL, 'p' },
        { "csv", required_argument, NULL, 'o' }, { "help", no_argument, NULL, 'h' }, { 0, 0, 0, 0 } };
    int c;
    while ((c = getopt_long (argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'b': o->bytes = strtoul (optarg, NULL, 10); break;
        case 'n': o->iterations = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'w': o->warmup = (uint32_t) strtoul (optarg, NULL, 10); break;
        case 'c':
            if (s_parse_cpus (optarg, o->cpus) != 0) {
                fprintf (stderr, "rtt: --cpus: expected two CPU numbers like 4,5, got \"%s\"\n", optarg);
                return 2;
            }
            break;
        case 'm': if (s_parse_methods (optarg, o->chosen) != 0) return 2; break;
        case 'p': o->port = atoi (optarg); break;
        case 'o': o->csv = optarg; break;
        case 'h': s_usage (stdout); exit (0);
        default: s_usage (stderr); return 2;
        }
    }
    if (optind < argc || o->bytes < SEQ_BYTES || o->bytes > (64u << 20) || o->iterations < 1 || o->port < 0
        || o->port > 65535) {
        fprintf (stderr, "rtt: --bytes must be 8..64 MiB, --iterations >= 1, --endpoint-port 0..65535\n");
        return 2;
    }
    return 0;
}

/* ---------------------------------------------------------------- raw sockets */

static void s_nodelay (int fd)
{
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A connected pair: TCP through a listener on 127.0.0.1, or a Unix socketpair. */
static void s_raw_setup (run_t *r)
{
    int sv[2];
    if (r->m->ipc) {
        if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
            s_die (r, "socketpair: %s", strerror (errno));
    } else {
        int l = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) r->o->port),
                                 .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
        socklen_t len = sizeof a;
        if (l < 0 || setsockopt (l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || bind (l, (struct sockaddr *) &a, sizeof a) != 0 || listen (l, 1) != 0
            || getsockname (l, (struct sockaddr *) &a, &len) != 0)
            s_die (r, "listen on 127.0.0.1:%d: %s", r->o->port, strerror (errno));
        sv[0] = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (sv[0] < 0 || connect (sv[0], (struct sockaddr *) &a, sizeof a) != 0)
            s_die (r, "connect: %s", strerror (errno));
        sv[1] = accept4 (l, NULL, NULL, SOCK_CLOEXEC);
        if (sv[1] < 0)
            s_die (r, "accept: %s", strerror (errno));
        close (l);
        s_nodelay (sv[0]);
        s_nodelay (sv[1]);
    }
    for (int k = 0; k < 2 && r->m->spin; k++)
        fcntl (sv[k], F_SETFL, fcntl (sv[k], F_GETFL) | O_NONBLOCK);
    r->client_fd = sv[0];
    r->echo_fd = sv[1];
}

static void s_write_all (const run_t *r, int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write (fd, p, n);
        if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (w < 0)
            s_die (r, "write: %s", strerror (errno));
        p += w;
        n -= (size_t) w;
    }
}

/* N bytes (busy-polled when the socket is non-blocking): 1, or 0 when the peer closed before any. */
static int s_read_all (const run_t *r, int fd, uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read (fd, p + got, n - got);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (k < 0)
            s_die (r, "read: %s", strerror (errno));
        if (k == 0) {
            if (got == 0)
                return 0;
            s_die (r, "the peer closed the connection %zu bytes into a %zu-byte message", got, n);
        }
        got += (size_t) k;
    }
    return 1;
}

static void s_raw_echo (run_t *r)
{
    uint8_t *buf = malloc (r->o->bytes);
    while (s_read_all (r, r->echo_fd, buf, r->o->bytes))
        s_write_all (r, r->echo_fd, buf, r->o->bytes);
    free (buf);
}

/* ---------------------------------------------------------------- libzmq */

static void s_zmq_setup (run_t *r)
{
    char endpoint[ZMTP_ENDPOINT_MAX];
    int zero = 0;
    for (int k = 0; k < 2; k++) {
        r->zctx[k] = zmq_ctx_new ();
        r->zsock[k] = r->zctx[k] ? zmq_socket (r->zctx[k], k == 0 ? ZMQ_DEALER : ZMQ_ROUTER) : NULL;
        if (!r->zsock[k])
            s_die (r, "zmq_socket: %s", zmq_strerror (zmq_errno ()));
        zmq_setsockopt (r->zsock[k], ZMQ_LINGER, &zero, sizeof zero);
    }
    if (r->m->ipc)
        snprintf (endpoint, sizeof endpoint, "ipc://@rtt-zmq-%d", (int) getpid ());
    else if (r->o->port)
        snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", r->o->port);
    else
        snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:*");
    size_t len = sizeof endpoint;
    if (zmq_bind (r->zsock[1], endpoint) != 0
        || zmq_getsockopt (r->zsock[1], ZMQ_LAST_ENDPOINT, endpoint, &len) != 0)
        s_die (r, "zmq_bind %s: %s", endpoint, zmq_strerror (zmq_errno ()));
    if (zmq_connect (r->zsock[0], endpoint) != 0)
        s_die (r, "zmq_connect %s: %s", endpoint, zmq_strerror (zmq_errno ()));
}

/* One frame into BUF (CAP bytes): its size (libzmq's, even when larger than CAP). */
static int s_zrecv (const run_t *r, void *sock, void *buf, size_t cap)
{
    for (;;) {
        int n = zmq_recv (sock, buf, cap, r->m->spin ? ZMQ_DONTWAIT : 0);
        if (n >= 0)
            return n;
        if (zmq_errno () != EAGAIN && zmq_errno () != EINTR)
            s_die (r, "zmq_recv: %s", zmq_strerror (zmq_errno ()));
    }
}

static void s_zsend (const run_t *r, void *sock, const void *buf, size_t len, int flags)
{
    while (zmq_send (sock, buf, len, flags) < 0)
        if (zmq_errno () != EAGAIN && zmq_errno () != EINTR)
            s_die (r, "zmq_send: %s", zmq_strerror (zmq_errno ()));
}

/* Routing id and body back; an empty body ends it. */
static void s_zmq_echo (run_t *r)
{
    void *sock = r->zsock[1];
    uint8_t id[256], *body = malloc (r->o->bytes);
    for (;;) {
        int id_len = s_zrecv (r, sock, id, sizeof id);
        int more = 0;
        size_t more_len = sizeof more;
        zmq_getsockopt (sock, ZMQ_RCVMORE, &more, &more_len);
        if (id_len > (int) sizeof id || !more)
            s_die (r, "the echo got a message that is not a routing id and a body");
        int n = s_zrecv (r, sock, body, r->o->bytes);
        if (n == 0)
            break;
        s_zsend (r, sock, id, (size_t) id_len, ZMQ_SNDMORE);
        s_zsend (r, sock, body, n > (int) r->o->bytes ? r->o->bytes : (size_t) n, 0);
    }
    free (body);
}

/* ---------------------------------------------------------------- our engine */

static void s_zmtp_setup (run_t *r)
{
    char endpoint[ZMTP_ENDPOINT_MAX], bound[ZMTP_ENDPOINT_MAX], err[256];
    if (r->m->ipc)
        snprintf (endpoint, sizeof endpoint, "ipc://@rtt-zmtp-%d", (int) getpid ());
    else
        snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", r->o->port);
    zmtp_router_opts_t ro = { .conn = { .mechanism = ZMTP_MECH_NULL } };
    zmtp_dealer_opts_t dopt = { .mechanism = ZMTP_MECH_NULL };
    r->router = zmtp_router_new (&ro);
    r->dealer = zmtp_dealer_new (&dopt);
    if (!r->router || !r->dealer)
        s_die (r, "out of memory");
    if (zmtp_router_bind (r->router, endpoint, 0, false, bound, err, sizeof err) < 0)
        s_die (r, "bind %s: %s", endpoint, err);
    if (zmtp_dealer_connect (r->dealer, bound, err, sizeof err) != 0)
        s_die (r, "connect %s: %s", bound, err);
}

/* The frames back as they came (routing id and body); an empty body ends it. */
static void s_zmtp_echo (run_t *r)
{
    zmtp_router_msg_t m;
    for (;;) {
        uint64_t now = s_now_ns ();
        if (zmtp_router_recv (r->router, &m, now) != 1) {
            if (!r->m->spin && zmtp_router_wait (r->router, 100) == 0)
                zmtp_router_tick (r->router, s_now_ns ());
            continue;
        }
        if (m.msg.refused || m.msg.nframes != 2)
            s_die (r, "the echo got a message of %d frames%s", m.msg.nframes, m.msg.refused ? ", refused" : "");
        if (m.msg.frames[1].size == 0)
            break;
        if (zmtp_router_send (r->router, m.msg.frames, m.msg.nframes, now) != 0)
            s_die (r, "zmtp_router_send: %s", strerror (errno));
    }
}

/* ---------------------------------------------------------------- the two threads */

static void s_pin (const run_t *r, int cpu)
{
    char err[256];
    if (threads_pin (cpu, err, sizeof err) != 0)
        s_die (r, "%s", err);
}

static void *s_echo_main (void *arg)
{
    run_t *r = arg;
    s_pin (r, r->o->cpus[1]);
    if (r->m->engine == ENGINE_RAW)
        s_raw_echo (r);
    else if (r->m->engine == ENGINE_ZMQ)
        s_zmq_echo (r);
    else
        s_zmtp_echo (r);
    return NULL;
}

/* Sends MSG (N bytes) and waits for the reply: its bytes, *LEN set. */
static const uint8_t *s_round_trip (run_t *r, const uint8_t *msg, size_t n, uint8_t *buf, size_t *len)
{
    switch (r->m->engine) {
    case ENGINE_RAW:
        s_write_all (r, r->client_fd, msg, n);
        if (!s_read_all (r, r->client_fd, buf, n))
            s_die (r, "the echo closed the connection");
        *len = n;
        return buf;
    case ENGINE_ZMQ: {
        s_zsend (r, r->zsock[0], msg, n, 0);
        int got = s_zrecv (r, r->zsock[0], buf, n);
        *len = (size_t) got;
        return buf;
    }
    case ENGINE_ZMTP: {
        zmtp_msg_t m;   /* its views are into the dealer's buffer, valid until its next call */
        zmtp_frame_t f = { msg, n };
        if (zmtp_dealer_send (r->dealer, &f, 1) != 0)
            s_die (r, "zmtp_dealer_send: %s", strerror (errno));
        while (zmtp_dealer_recv (r->dealer, &m, r->m->spin ? 0 : -1) != 1)
            ;
        if (m.nframes != 1)
            s_die (r, "a reply of %d frames", m.nframes);
        *len = m.frames[0].size;
        return m.frames[0].data;
    }
    }
    return NULL;
}

/* The client: warm-up, then the timed round trips, every reply checked outside the timed region. */
static void *s_client_main (void *arg)
{
    run_t *r = arg;
    const size_t n = r->o->bytes;
    s_pin (r, r->o->cpus[0]);
    uint8_t *msg = malloc (n), *buf = malloc (n);
    for (uint64_t i = 0; i < (uint64_t) r->o->warmup + r->o->iterations; i++) {
        memcpy (msg, r->pool + (i % POOL) * n, n);
        memcpy (msg, &i, SEQ_BYTES);
        size_t len = 0;
        const uint64_t t0 = s_now_ns ();
        const uint8_t *reply = s_round_trip (r, msg, n, buf, &len);
        const uint64_t t1 = s_now_ns ();
        uint64_t seq;
        if (len != n)
            s_die (r, "round trip %llu: a reply of %zu bytes, %zu sent", (unsigned long long) i, len, n);
        memcpy (&seq, reply, SEQ_BYTES);
        if (seq != i)
            s_die (r, "round trip %llu: the reply carries sequence number %llu", (unsigned long long) i,
                   (unsigned long long) seq);
        if (memcmp (reply, msg, n) != 0)
            s_die (r, "round trip %llu: the reply's bytes differ from the message's", (unsigned long long) i);
        if (i >= r->o->warmup)
            r->samples[i - r->o->warmup] = (double) (t1 - t0) / 1e3;
    }
    /* The end: the echo sees the stream close, or an empty body. */
    if (r->m->engine == ENGINE_RAW)
        shutdown (r->client_fd, SHUT_WR);
    else if (r->m->engine == ENGINE_ZMQ)
        s_zsend (r, r->zsock[0], "", 0, 0);
    else if (zmtp_dealer_send (r->dealer, &(zmtp_frame_t) { msg, 0 }, 1) != 0)
        s_die (r, "zmtp_dealer_send: %s", strerror (errno));
    free (msg);
    free (buf);
    return NULL;
}

static void s_run (const options_t *o, const method_t *m, const uint8_t *pool, latency_summary_t *out)
{
    run_t r = { .o = o, .m = m, .client_fd = -1, .echo_fd = -1, .pool = pool,
                .samples = malloc (o->iterations * sizeof (double)) };
    if (!r.samples)
        s_die (&r, "out of memory");
    if (m->engine == ENGINE_RAW)
        s_raw_setup (&r);
    else if (m->engine == ENGINE_ZMQ)
        s_zmq_setup (&r);
    else
        s_zmtp_setup (&r);
    pthread_t echo, client;
    if (pthread_create (&echo, NULL, s_echo_main, &r) != 0 || pthread_create (&client, NULL, s_client_main, &r) != 0)
        s_die (&r, "pthread_create failed");
    pthread_join (client, NULL);
    pthread_join (echo, NULL);
    latency_summarize (r.samples, o->iterations, out);
    free (r.samples);
    if (r.client_fd >= 0)
        close (r.client_fd);
    if (r.echo_fd >= 0)
        close (r.echo_fd);
    for (int k = 0; k < 2; k++) {
        if (r.zsock[k])
            zmq_close (r.zsock[k]);
        if (r.zctx[k])
            zmq_ctx_term (r.zctx[k]);
    }
    zmtp_dealer_destroy (&r.dealer);
    zmtp_router_destroy (&r.router, 0);
}

/* ---------------------------------------------------------------- setup and report */

/* "0-3,6" for the CPUs of SET. */
static void s_cpu_list (const cpu_set_t *set, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && used < cap; c++) {
        if (!CPU_ISSET (c, set) || (c > 0 && CPU_ISSET (c - 1, set)))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET (e + 1, set))
            e++;
        used += (size_t) snprintf (out + used, cap - used, e > c ? "%s%d-%d" : "%s%d", used ? "," : "", c, e);
    }
}

/* The default CPUs (the mask's first two), and the main thread moved to the mask's others (where
 * libzmq's I/O threads, started from it, will run). Their list goes to IO_CPUS. */
static int s_cpus (options_t *o, char *io_cpus, size_t cap)
{
    cpu_set_t mask, rest;
    if (sched_getaffinity (0, sizeof mask, &mask) != 0) {
        fprintf (stderr, "rtt: sched_getaffinity: %s\n", strerror (errno));
        return -1;
    }
    for (int c = 0, k = 0; o->cpus[1] < 0 && c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET (c, &mask))
            o->cpus[k++] = c;
    if (o->cpus[0] < 0 || o->cpus[1] < 0) {
        fprintf (stderr, "rtt: the affinity mask has fewer than two CPUs: name them with --cpus A,B\n");
        return -1;
    }
    for (int k = 0; k < 2; k++)
        if (!CPU_ISSET (o->cpus[k], &mask)) {
            s_cpu_list (&mask, io_cpus, cap);
            fprintf (stderr, "rtt: --cpus: CPU %d is not one this process may run on (%s)\n", o->cpus[k], io_cpus);
            return -1;
        }
    if (o->cpus[0] == o->cpus[1])
        fprintf (stderr, "rtt: warning: the client and the echo share CPU %d\n", o->cpus[0]);
    rest = mask;
    CPU_CLR (o->cpus[0], &rest);
    CPU_CLR (o->cpus[1], &rest);
    if (CPU_COUNT (&rest) == 0)
        rest = mask;
    pthread_setaffinity_np (pthread_self (), sizeof rest, &rest);
    s_cpu_list (&rest, io_cpus, cap);
    return 0;
}

static void s_cpu_model (char *out, size_t cap)
{
    snprintf (out, cap, "unknown CPU");
    FILE *f = fopen ("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets (line, sizeof line, f)) {
        char *colon = strchr (line, ':');
        if (strncmp (line, "model name", 10) == 0 && colon) {
            colon += 1 + (colon[1] == ' ');
            colon[strcspn (colon, "\n")] = '\0';
            snprintf (out, cap, "%s", colon);
            break;
        }
    }
    if (f)
        fclose (f);
}

/* The message pool: random bytes (xorshift64* seeded from getrandom), never zeros. */
static uint8_t *s_pool (size_t bytes)
{
    uint8_t *pool = malloc (POOL * bytes);
    uint64_t x = 0;
    if (!pool)
        return NULL;
    if (getrandom (&x, sizeof x, 0) != (ssize_t) sizeof x || x == 0)
        x = s_now_ns () | 1;
    for (size_t i = 0; i < POOL * bytes; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        pool[i] = (uint8_t) ((x * 0x2545f4914f6cdd1dull) >> 56);
    }
    return pool;
}

int main (int argc, char **argv)
{
    options_t o;
    int rc = s_parse (argc, argv, &o);
    if (rc)
        return rc;
    char io_cpus[256], model[256], date[64];
    if (s_cpus (&o, io_cpus, sizeof io_cpus) != 0)
        return 1;
    s_cpu_model (model, sizeof model);
    time_t t = time (NULL);
    strftime (date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime (&t));
    struct utsname u;
    uname (&u);
    int zmajor, zminor, zpatch;
    zmq_version (&zmajor, &zminor, &zpatch);
    uint8_t *pool = s_pool (o.bytes);
    FILE *csv = o.csv ? fopen (o.csv, "w") : NULL;
    if (!pool || (o.csv && !csv)) {
        fprintf (stderr, "rtt: %s\n", !pool ? "out of memory" : strerror (errno));
        return 1;
    }
    printf ("## rtt: loopback round trips, two threads of one process\n\n");
    printf ("CPU: %s; client on CPU %d, echo on CPU %d, libzmq I/O threads on CPUs %s\n", model, o.cpus[0],
            o.cpus[1], io_cpus);
    printf ("message %zu bytes, %u iterations after %u dropped; libzmq %d.%d.%d; %s %s; %s\n\n", o.bytes,
            o.iterations, o.warmup, zmajor, zminor, zpatch, u.sysname, u.release, date);
    if (csv)
        fprintf (csv, "method,bytes,iterations,p50_us,p90_us,p99_us,p999_us,min_us,max_us,mean_us,sd_us\n");
    latency_print_header (stdout, "method (us)");
    fflush (stdout);
    for (size_t k = 0; k < METHODS; k++) {
        if (!o.chosen[k])
            continue;
        latency_summary_t s;
        s_run (&o, &s_methods[k], pool, &s);
        latency_print_row (stdout, s_methods[k].name, &s);
        fflush (stdout);
        if (csv)
            fprintf (csv, "%s,%zu,%u,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", s_methods[k].name, o.bytes,
                     o.iterations, s.p50, s.p90, s.p99, s.p999, s.min, s.max, s.mean, s.sd);
    }
    if (csv)
        fclose (csv);
    free (pool);
    return 0;
}
