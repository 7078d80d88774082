/* sigload: the load generator of sigserve (PERF.md says how we measure; --help says how to run it).
 *
 * Design. The main thread parses the options, connects every DEALER socket, checks that each
 * endpoint answers (and asks the server for the model's sizes), then starts T worker threads and
 * runs the steps of the sweep one after another. Each worker owns every T-th connection and, for
 * the length of a step, runs one loop: send what is due, receive every reply there is, expire
 * requests past their timeout, then sleep in ppoll () on the sockets' ZMQ_FDs until the next
 * send is due (or spin with --busy-poll).
 *
 *  - Open loop: each request has an intended send time t_k from the arrival process (constant or
 *    Poisson, each thread 1/T of the rate, phase-shifted so that constant arrivals interleave).
 *    The sender sends when now >= t_k; latency is receive time - t_k. A sender (or a server) that
 *    falls behind therefore shows as latency instead of being hidden: no coordinated omission.
 *    A request that cannot even be sent within --timeout of t_k counts as a timeout.
 *  - Closed loop: every connection keeps its share of the concurrency outstanding and sends the
 *    next request when a reply comes; latency is from the actual send, and the output says so.
 *  - A request id is thread (8 bits) | connection within the thread (16 bits) | sequence (40
 *    bits). Each connection keeps a ring of outstanding requests indexed by sequence (scheduled
 *    and actual send times), bounded by --max-outstanding: a full ring holds the sender back,
 *    which again shows as latency. A reply whose id is not outstanding (unknown, duplicate, or
 *    another connection's) counts as an error; one that comes after its timeout counts as late.
 *  - Every reply is checked: status OK, request_id matched, and, with --expect, the outputs.
 *    Errors are counted by status. The server's server_ns splits each round trip into server
 *    time and network time (round trip - server_ns); in open loop, total = send lag (actual -
 *    scheduled send) + network + server.
 *  - Each worker records into its own histograms (total, server, network) and counters; the main
 *    thread merges them when the step ends. Warm-up requests are sent and checked, not recorded.
 *  - Nothing is allocated per request: requests are packed into a per-thread buffer, replies
 *    received into another and decoded with protobuf-c into a per-thread arena that is reset
 *    for each reply. (libzmq itself allocates the body of every message above 33 bytes.)
 *  - --echo and --floor send the same bytes to a plain ZeroMQ echo (sigload --serve-echo): a
 *    packed request of the same size with the id in its first 8 bytes, checked by size and id.
 */
#define _GNU_SOURCE
#include "histogram.h"
#include "signal.pb-c.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

enum { EXIT_OK = 0, EXIT_ERRORS = 1, EXIT_USAGE = 2 };

#define MAX_ENDPOINTS 64
#define MAX_STEPS 64
#define MAX_THREADS 256
#define MAX_CONNECTIONS 4096
#define MAX_CONNS_PER_THREAD 65535
#define RANDOM_SETS 64                  /* distinct random requests, cycled */
#define HOUSEKEEPING_NS 10000000LL      /* a worker looks at timeouts and the abort flag this often */
#define BLOCKED_WAIT_NS 200000LL        /* recheck a full connection this often */
#define SPIN_NS 3000LL                  /* shorter waits are spun, not slept */
#define MAX_BURST 64                    /* sends between two looks at the replies */
#define READY_WAIT_MS 10000             /* how long to wait for an endpoint to be ready */
#define ERROR_TEXT 160
#define ID_THREAD_SHIFT 56
#define ID_CONN_SHIFT 40
#define ID_SEQ_MASK ((UINT64_C (1) << ID_CONN_SHIFT) - 1)

/* Outcomes: 0..8 are the server's Status values, then the client's own. */
enum {
    OUT_OK = 0,
    OUT_STATUS_COUNT = 9,
    OUT_TIMEOUT = OUT_STATUS_COUNT,     /* no reply within --timeout, or not sent in time */
    OUT_BAD_REPLY,                      /* undecodable, not an InferReply, or the wrong size */
    OUT_UNMATCHED,                      /* a request_id that is not outstanding */
    OUT_MISMATCH,                       /* outputs differ from --expect */
    OUT_SEND_FAILED,                    /* zmq_send failed (not for lack of room) */
    OUT_COUNT
};

static const char *const s_outcome_names[OUT_COUNT] = {
    "STATUS_OK", "STATUS_BAD_REQUEST", "STATUS_UNKNOWN_MODEL", "STATUS_BAD_SHAPE", "STATUS_BAD_VALUE",
    "STATUS_OVERLOADED", "STATUS_DEADLINE_EXCEEDED", "STATUS_UNAVAILABLE", "STATUS_INTERNAL",
    "TIMEOUT", "BAD_REPLY", "UNMATCHED_ID", "OUTPUT_MISMATCH", "SEND_FAILED",
};

_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_INTERNAL == OUT_STATUS_COUNT - 1, "status values");
_Static_assert ((int) SIGSERVE__V1__STATUS__STATUS_UNKNOWN_MODEL == 2, "status values");

typedef enum { MODE_OPEN, MODE_CLOSED } load_mode_t;
enum { SET_TARGET = 0, SET_FLOOR = 1 };     /* which connections carry a step */

typedef struct {
    const char *endpoints[MAX_ENDPOINTS];
    size_t n_endpoints;
    const char *serve_echo[MAX_ENDPOINTS];
    size_t n_serve_echo;
    const char *floor;              /* --floor: echo endpoint for the floor step */
    const char *model;
    bool echo;
    load_mode_t mode;
    bool mode_given;
    double values[MAX_STEPS];       /* rates or concurrencies */
    size_t n_values;
    bool poisson;
    unsigned connections, threads, io_threads;
    double warmup_s, duration_s;
    bool duration_given;
    uint64_t requests;              /* per step; 0: by duration */
    const char *features_file, *expect_file;
    unsigned rows, input_size;      /* input_size 0: ask the server */
    double tolerance;
    unsigned deadline_us;
    unsigned timeout_ms;
    unsigned max_outstanding;
    uint64_t seed;
    const char *out_dir;
    bool stop_when_saturated;
    double saturation_p99_us;       /* 0: automatic */
    bool busy_poll;
    unsigned spin_us;               /* open loop: spin this long before each scheduled send */
    bool quiet;
} options_t;

/* ---- per-request state ---- */

enum { SLOT_FREE = 0, SLOT_PENDING, SLOT_TIMED_OUT };

typedef struct {
    uint64_t seq;                   /* the request this slot holds (or last held) */
    int64_t t_sched;                /* scheduled send time (open loop) or actual (closed) */
    int64_t t_send;                 /* actual send time */
    uint8_t state;                  /* SLOT_* */
    uint8_t measured;               /* sent in the measurement window */
} slot_t;

typedef struct {
    void *socket;                   /* DEALER */
    slot_t *ring;                   /* outstanding requests by sequence */
    uint64_t ring_mask;
    uint64_t next_seq;              /* the next sequence to send (from 1) */
    uint64_t oldest;                /* no sequence below it is pending */
    uint32_t outstanding;           /* pending requests */
    uint32_t index;                 /* within its thread: in the request id */
    uint32_t global;                /* across threads */
    uint32_t closed_target;         /* closed loop: this connection's share of the concurrency */
    unsigned n_peers;               /* endpoints it connects to */
} connection_t;

/* What a step counted; workers fill their own, the main thread sums them. */
typedef struct {
    uint64_t outcomes[OUT_COUNT];   /* measured requests by outcome ([OUT_OK]: answered OK) */
    uint64_t requests;              /* measured requests scheduled (open) or sent (closed) */
    uint64_t answered;              /* measured requests answered, whatever the status */
    uint64_t sent;                  /* every request sent, warm-up included */
    uint64_t warmup_errors;         /* errors of warm-up requests */
    uint64_t late;                  /* replies that came after their timeout */
    int64_t last_answer;            /* when the last measured answer came */
    double lag_sum;                 /* send lag of measured OK requests */
    int64_t lag_max;
    char first_error[OUT_COUNT][ERROR_TEXT];   /* the server's first text per status */
} counts_t;

typedef struct {
    char name[64];
    load_mode_t mode;
    int set;                        /* SET_TARGET or SET_FLOOR */
    bool echo;                      /* echo payloads */
    double target;                  /* req/s or concurrency */
    int64_t t0;                     /* the step starts */
    int64_t measure_start;          /* t0 + warm-up */
    int64_t measure_end;            /* INT64_MAX with --requests */
    uint64_t requests;              /* --requests, 0 by duration */
} step_t;

typedef struct _sigload_t sigload_t;

typedef struct {
    sigload_t *load;
    int index;
    pthread_t thread;
    connection_t *conns[2];         /* [SET_TARGET], [SET_FLOOR] (NULL without --floor) */
    struct pollfd *pfds[2];
    size_t n_conns;
    histogram_t *total, *server, *network;
    counts_t counts;
    /* open-loop schedule */
    int64_t sched_next;             /* the next request's scheduled time */
    double sched_offset_ns;         /* Poisson: its offset from t0 */
    uint64_t sched_k;
    double period_ns;               /* constant: between this thread's requests */
    int64_t phase_ns;
    int64_t spin_ns;                /* spun before each scheduled send */
    bool sched_done, blocked;
    uint64_t quota;                 /* --requests: this thread's share */
    uint32_t closed_total;          /* closed loop: this thread's share of the concurrency */
    size_t rr;                      /* round robin over connections */
    uint64_t rng;
    /* buffers, allocated once */
    uint8_t *send_buf;
    uint8_t *recv_buf;
    size_t recv_cap;
    uint8_t *arena;
    size_t arena_cap, arena_used;
    ProtobufCAllocator allocator;
    Sigserve__V1__Request req;
    Sigserve__V1__InferRequest infer;
    /* read by the main thread while the step runs */
    _Atomic uint64_t pub_sent, pub_answered, pub_errors;
    atomic_int done;
} worker_t;

struct _sigload_t {
    const options_t *opt;
    void *ctx;
    worker_t *workers;
    size_t n_workers;
    step_t step;                    /* the running step: written by main between steps */
    pthread_barrier_t start;
    atomic_bool quit, abort;
    float *pool;                    /* n_sets requests of per_request features */
    size_t n_sets, per_request;
    float *expect;                  /* n_sets x out_per_request, or NULL */
    size_t out_per_request;
    uint8_t *echo_payloads;         /* n_sets x echo_len */
    size_t echo_len;
    size_t send_cap;
    int64_t timeout_ns;
    int64_t spin_ns;                /* --spin-us */
};

static volatile sig_atomic_t s_interrupted;

static void s_on_signal (int sig)
{
    (void) sig;
    s_interrupted = 1;
}

static int64_t s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t s_rand (uint64_t *state)
{
    /* xorshift64* */
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * UINT64_C (2685821657736338717);
}

/* Uniform in (0, 1]. */
static double s_rand_unit (uint64_t *state)
{
    return ((double) (s_rand (state) >> 11) + 1.0) / 9007199254740992.0;
}

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

/* ---- usage ---- */

#define SYNOPSIS \
    "usage: sigload --endpoint E [--endpoint E2 ...] --model M\n" \
    "               [--rate R[,R2,...] [--arrivals constant|poisson] | --concurrency N[,N2,...]]\n" \
    "               [--warmup S] [--duration S | --requests N] [--connections C] [--threads T]\n" \
    "               [--rows R] [--features FILE] [--expect FILE] [--floor E] [--out DIR] [options]\n" \
    "       sigload --endpoint E --echo [--rate ... | --concurrency ...] [options]\n" \
    "       sigload --serve-echo E [--serve-echo E2 ...]\n"

static const char *s_help =
    SYNOPSIS
    "\n"
    "Drives sigserve with InferRequests over ZeroMQ DEALER sockets, checks every reply, and reports\n"
    "the latency distribution of each step of a sweep: a markdown table on stdout and, with --out,\n"
    "HdrHistogram .hgrm files, a CSV summary and PNG plots.\n"
    "\n"
    "Load (one step per value; a value may end in k, as in 10k):\n"
    "  --rate R[,R2,...]     open loop: R requests/s in all, sent on schedule whatever the replies\n"
    "                        do. Latency is measured from each request's scheduled send time, so a\n"
    "                        server or a sender that falls behind shows as latency instead of being\n"
    "                        hidden (no coordinated omission).\n"
    "  --arrivals A          open loop: constant (evenly spaced, the default) or poisson\n"
    "                        (exponential gaps).\n"
    "  --concurrency N[,N2,...]\n"
    "                        closed loop: N requests outstanding at all times; the next request\n"
    "                        leaves when a reply comes. Latency is from the actual send, so a slow\n"
    "                        reply hides the queueing behind it; the output says \"closed loop\".\n"
    "                        Without --rate or --concurrency: --concurrency 1.\n"
    "  --warmup S            seconds of load before each step's measurement: sent and checked,\n"
    "                        not recorded (default 1).\n"
    "  --duration S          seconds measured per step (default 5).\n"
    "  --requests N          measure N requests per step instead of a duration.\n"
    "  --connections C       DEALER sockets (default 1). Connection i connects to endpoint\n"
    "                        i mod E; with fewer connections than endpoints each connects to\n"
    "                        several and ZeroMQ spreads its requests over them.\n"
    "  --threads T           worker threads, each owning every T-th connection\n"
    "                        (default: the smaller of C and the number of cores).\n"
    "  --io-threads N        ZeroMQ I/O threads (default 1).\n"
    "  --timeout MS          a request not answered MS ms after it was sent, or not sent within MS\n"
    "                        ms of its scheduled time, counts as a timeout (default 2000).\n"
    "  --max-outstanding N   requests in flight per connection, rounded up to a power of two\n"
    "                        (default 8192, 32 bytes each); a full connection holds the sender\n"
    "                        back, which shows as latency in open loop.\n"
    "  --busy-poll           spin instead of sleeping between sends and replies (a core per thread).\n"
    "  --spin-us US          open loop: wake US us before each scheduled send and spin the rest\n"
    "                        (default 50): a sleeping thread wakes late, by tens of us on a VM,\n"
    "                        and a late send adds to the latency measured from the schedule.\n"
    "                        Only while the gap between a thread's sends is at least 10 x US, so\n"
    "                        that spinning takes at most a tenth of its core; 0: never spin.\n"
    "\n"
    "Requests:\n"
    "  --model M             the model to run (required unless --echo).\n"
    "  --rows R              rows per request (default 1).\n"
    "  --input-size N        features per row (default: the server's model list; 512 when the\n"
    "                        server does not list the model, or with --echo).\n"
    "  --features FILE       requests' features from FILE: floats separated by spaces, commas or\n"
    "                        newlines ('#' starts a comment), a multiple of rows x input size;\n"
    "                        requests cycle through them. Default: 64 random requests, uniform in\n"
    "                        [-1, 1), from --seed.\n"
    "  --expect FILE         check every OK reply's outputs against FILE: the expected outputs of\n"
    "                        each request of --features, in the same order and format.\n"
    "  --tolerance X         with --expect: |output - expected| <= X * max(1, |expected|)\n"
    "                        (default 1e-4).\n"
    "  --deadline-us D       the deadline sent with every request (default: none).\n"
    "  --seed S              seed of the random features and Poisson arrivals (default 1).\n"
    "\n"
    "Transport floor (a plain ZeroMQ echo of the same message size, same client, same run):\n"
    "  --serve-echo E        run an echo server on E (a ROUTER that returns every message as it\n"
    "                        came) until SIGINT or SIGTERM.\n"
    "  --echo                the endpoints are such echo servers: send packed requests of the\n"
    "                        same size with the request id in their first 8 bytes; a reply is\n"
    "                        checked by size and id.\n"
    "  --floor E             before the sweep, run its first step against the echo endpoint E;\n"
    "                        that step's name starts with \"echo-\".\n"
    "\n"
    "Output:\n"
    "  --out DIR             write DIR/<step>.hgrm (HdrHistogram percentile distribution of the\n"
    "                        total latency, in microseconds), DIR/summary.csv (one row per step),\n"
    "                        DIR/plots.gp and, when gnuplot is installed, DIR/percentiles.png\n"
    "                        (every step's percentile spectrum) and DIR/latency_vs_throughput.png.\n"
    "  --stop-when-saturated stop the sweep after a step that achieved less than 90% of its\n"
    "                        target rate, saw errors, or whose p99 exceeded --saturation-p99.\n"
    "  --saturation-p99 US   (default: 10 x the first step's p99, at least 1000 us).\n"
    "  --quiet               no progress line on stderr (otherwise one per second in steps longer\n"
    "                        than 2 s).\n"
    "  --help                this text.\n"
    "\n"
    "Steps are named open-<rate> or closed-<concurrency>. The table gives, in microseconds, the\n"
    "percentiles of the total latency, and the means of the server's own time (server_ns in the\n"
    "replies), of the network time (round trip - server time: wire and both ZeroMQ stacks) and\n"
    "of the send lag (actual - scheduled send, open loop). Achieved throughput is the measured\n"
    "requests answered divided by the time from the start of the measurement to the last answer.\n"
    "Errors are counted by status: the server's (STATUS_*), TIMEOUT, BAD_REPLY, UNMATCHED_ID\n"
    "(a reply whose request_id is not outstanding), OUTPUT_MISMATCH and SEND_FAILED.\n"
    "\n"
    "Exit status: 0 every reply OK; 1 errors were seen (an error status, a timeout, a bad or\n"
    "unmatched reply, an output mismatch; warm-up included) or the run was interrupted;\n"
    "2 usage error.\n";

static int s_usage_error (const char *fmt, const char *arg)
{
    fprintf (stderr, "sigload: ");
    fprintf (stderr, fmt, arg);
    fprintf (stderr, "\n%s(sigload --help describes the options)\n", SYNOPSIS);
    return EXIT_USAGE;
}

/* A number >= MIN and <= MAX, with an optional k (x1000) or M (x1e6) suffix when SUFFIX. */
static int s_parse_number (const char *text, double min, double max, bool suffix, double *out)
{
    if (!text || !*text)
        return -1;
    char *end;
    errno = 0;
    double v = strtod (text, &end);
    if (end == text || errno)
        return -1;
    if (suffix && (*end == 'k' || *end == 'K')) {
        v *= 1e3;
        end++;
    } else if (suffix && *end == 'M') {
        v *= 1e6;
        end++;
    }
    if (*end || !isfinite (v) || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int s_parse_uint (const char *text, double min, double max, unsigned *out)
{
    double v;
    if (s_parse_number (text, min, max, false, &v) != 0 || v != floor (v))
        return -1;
    *out = (unsigned) v;
    return 0;
}

static int s_parse_list (const char *text, bool integers, double min, double max, options_t *opt)
{
    char buf[1024];
    if (strlen (text) >= sizeof buf)
        return -1;
    strcpy (buf, text);
    opt->n_values = 0;
    for (char *save = NULL, *tok = strtok_r (buf, ",", &save); tok; tok = strtok_r (NULL, ",", &save)) {
        double v;
        if (opt->n_values == MAX_STEPS || s_parse_number (tok, min, max, true, &v) != 0)
            return -1;
        if (integers && v != floor (v))
            return -1;
        opt->values[opt->n_values++] = v;
    }
    return opt->n_values > 0 ? 0 : -1;
}

enum {
    OPT_ENDPOINT = 256, OPT_MODEL, OPT_RATE, OPT_CONCURRENCY, OPT_ARRIVALS, OPT_CONNECTIONS, OPT_THREADS,
    OPT_IO_THREADS, OPT_WARMUP, OPT_DURATION, OPT_REQUESTS, OPT_FEATURES, OPT_EXPECT, OPT_TOLERANCE, OPT_ROWS,
    OPT_INPUT_SIZE, OPT_DEADLINE, OPT_TIMEOUT, OPT_MAX_OUTSTANDING, OPT_SEED, OPT_OUT, OPT_ECHO, OPT_FLOOR,
    OPT_SERVE_ECHO, OPT_STOP, OPT_SAT_P99, OPT_BUSY, OPT_SPIN, OPT_QUIET, OPT_HELP,
};

static const struct option s_long_options[] = {
    { "endpoint", required_argument, NULL, OPT_ENDPOINT },
    { "model", required_argument, NULL, OPT_MODEL },
    { "rate", required_argument, NULL, OPT_RATE },
    { "concurrency", required_argument, NULL, OPT_CONCURRENCY },
    { "arrivals", required_argument, NULL, OPT_ARRIVALS },
    { "connections", required_argument, NULL, OPT_CONNECTIONS },
    { "threads", required_argument, NULL, OPT_THREADS },
    { "io-threads", required_argument, NULL, OPT_IO_THREADS },
    { "warmup", required_argument, NULL, OPT_WARMUP },
    { "duration", required_argument, NULL, OPT_DURATION },
    { "requests", required_argument, NULL, OPT_REQUESTS },
    { "features", required_argument, NULL, OPT_FEATURES },
    { "expect", required_argument, NULL, OPT_EXPECT },
    { "tolerance", required_argument, NULL, OPT_TOLERANCE },
    { "rows", required_argument, NULL, OPT_ROWS },
    { "input-size", required_argument, NULL, OPT_INPUT_SIZE },
    { "deadline-us", required_argument, NULL, OPT_DEADLINE },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "max-outstanding", required_argument, NULL, OPT_MAX_OUTSTANDING },
    { "seed", required_argument, NULL, OPT_SEED },
    { "out", required_argument, NULL, OPT_OUT },
    { "echo", no_argument, NULL, OPT_ECHO },
    { "floor", required_argument, NULL, OPT_FLOOR },
    { "serve-echo", required_argument, NULL, OPT_SERVE_ECHO },
    { "stop-when-saturated", no_argument, NULL, OPT_STOP },
    { "saturation-p99", required_argument, NULL, OPT_SAT_P99 },
    { "busy-poll", no_argument, NULL, OPT_BUSY },
    { "spin-us", required_argument, NULL, OPT_SPIN },
    { "quiet", no_argument, NULL, OPT_QUIET },
    { "help", no_argument, NULL, OPT_HELP },
    { NULL, 0, NULL, 0 },
};

/* 0 to go on, or the exit code (help printed: -1 meaning exit 0). */
static int s_parse_options (int argc, char **argv, options_t *opt)
{
    *opt = (options_t) { .connections = 1, .io_threads = 1, .warmup_s = 1, .duration_s = 5, .rows = 1,
                         .tolerance = 1e-4, .timeout_ms = 2000, .max_outstanding = 8192, .seed = 1,
                         .spin_us = 50 };
    const char *rate_text = NULL, *conc_text = NULL;
    double d;
    unsigned u;
    int c;
    opterr = 0;
    while ((c = getopt_long (argc, argv, "", s_long_options, NULL)) != -1) {
        const char *arg = optarg;
        switch (c) {
        case OPT_ENDPOINT:
            if (opt->n_endpoints == MAX_ENDPOINTS)
                return s_usage_error ("too many --endpoint (at most %s)", "64");
            opt->endpoints[opt->n_endpoints++] = arg;
            break;
        case OPT_SERVE_ECHO:
            if (opt->n_serve_echo == MAX_ENDPOINTS)
                return s_usage_error ("too many --serve-echo (at most %s)", "64");
            opt->serve_echo[opt->n_serve_echo++] = arg;
            break;
        case OPT_MODEL: opt->model = arg; break;
        case OPT_RATE: rate_text = arg; break;
        case OPT_CONCURRENCY: conc_text = arg; break;
        case OPT_ARRIVALS:
            if (strcmp (arg, "constant") == 0)
                opt->poisson = false;
            else if (strcmp (arg, "poisson") == 0)
                opt->poisson = true;
            else
                return s_usage_error ("--arrivals: expected constant or poisson, got \"%s\"", arg);
            break;
        case OPT_CONNECTIONS:
            if (s_parse_uint (arg, 1, MAX_CONNECTIONS, &opt->connections))
                return s_usage_error ("--connections: expected 1 to 4096, got \"%s\"", arg);
            break;
        case OPT_THREADS:
            if (s_parse_uint (arg, 1, MAX_THREADS, &opt->threads))
                return s_usage_error ("--threads: expected 1 to 256, got \"%s\"", arg);
            break;
        case OPT_IO_THREADS:
            if (s_parse_uint (arg, 1, 64, &opt->io_threads))
                return s_usage_error ("--io-threads: expected 1 to 64, got \"%s\"", arg);
            break;
        case OPT_WARMUP:
            if (s_parse_number (arg, 0, 3600, false, &opt->warmup_s))
                return s_usage_error ("--warmup: expected 0 to 3600 seconds, got \"%s\"", arg);
            break;
        case OPT_DURATION:
            if (s_parse_number (arg, 0.001, 86400, false, &opt->duration_s))
                return s_usage_error ("--duration: expected 0.001 to 86400 seconds, got \"%s\"", arg);
            opt->duration_given = true;
            break;
        case OPT_REQUESTS:
            if (s_parse_number (arg, 1, 1e12, true, &d) || d != floor (d))
                return s_usage_error ("--requests: expected a whole number from 1 to 1e12, got \"%s\"", arg);
            opt->requests = (uint64_t) d;
            break;
        case OPT_FEATURES: opt->features_file = arg; break;
        case OPT_EXPECT: opt->expect_file = arg; break;
        case OPT_TOLERANCE:
            if (s_parse_number (arg, 0, 1e30, false, &opt->tolerance))
                return s_usage_error ("--tolerance: expected a number >= 0, got \"%s\"", arg);
            break;
        case OPT_ROWS:
            if (s_parse_uint (arg, 1, 65536, &opt->rows))
                return s_usage_error ("--rows: expected 1 to 65536, got \"%s\"", arg);
            break;
        case OPT_INPUT_SIZE:
            if (s_parse_uint (arg, 1, 1 << 24, &opt->input_size))
                return s_usage_error ("--input-size: expected 1 to 16777216, got \"%s\"", arg);
            break;
        case OPT_DEADLINE:
            if (s_parse_uint (arg, 0, UINT32_MAX, &opt->deadline_us))
                return s_usage_error ("--deadline-us: expected 0 to 4294967295, got \"%s\"", arg);
            break;
        case OPT_TIMEOUT:
            if (s_parse_uint (arg, 1, 3600000, &opt->timeout_ms))
                return s_usage_error ("--timeout: expected 1 to 3600000 ms, got \"%s\"", arg);
            break;
        case OPT_MAX_OUTSTANDING:
            if (s_parse_uint (arg, 1, 1 << 22, &u))
                return s_usage_error ("--max-outstanding: expected 1 to 4194304, got \"%s\"", arg);
            opt->max_outstanding = u;
            break;
        case OPT_SEED:
            if (s_parse_number (arg, 0, 1.8e19, false, &d) || d != floor (d))
                return s_usage_error ("--seed: expected a whole number >= 0, got \"%s\"", arg);
            opt->seed = (uint64_t) d;
            break;
        case OPT_OUT: opt->out_dir = arg; break;
        case OPT_ECHO: opt->echo = true; break;
        case OPT_FLOOR: opt->floor = arg; break;
        case OPT_STOP: opt->stop_when_saturated = true; break;
        case OPT_SAT_P99:
            if (s_parse_number (arg, 1, 1e12, false, &opt->saturation_p99_us))
                return s_usage_error ("--saturation-p99: expected microseconds >= 1, got \"%s\"", arg);
            break;
        case OPT_BUSY: opt->busy_poll = true; break;
        case OPT_SPIN:
            if (s_parse_uint (arg, 0, 1000000, &opt->spin_us))
                return s_usage_error ("--spin-us: expected 0 to 1000000 us, got \"%s\"", arg);
            break;
        case OPT_QUIET: opt->quiet = true; break;
        case OPT_HELP:
            fputs (s_help, stdout);
            return -1;
        default:
            return s_usage_error ("unknown option or missing value: %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return s_usage_error ("unexpected argument \"%s\"", argv[optind]);
    if (opt->n_serve_echo > 0) {
        if (opt->n_endpoints || opt->model || rate_text || conc_text)
            return s_usage_error ("%s: --serve-echo runs an echo server and takes no load options",
                                  "--serve-echo");
        return 0;
    }
    if (opt->n_endpoints == 0)
        return s_usage_error ("%s: at least one --endpoint is required", "--endpoint");
    if (!opt->model && !opt->echo)
        return s_usage_error ("%s: --model is required (unless --echo)", "--model");
    if (!opt->model)
        opt->model = "echo";
    if (rate_text && conc_text)
        return s_usage_error ("%s: give --rate (open loop) or --concurrency (closed loop), not both", "--rate");
    if (rate_text) {
        opt->mode = MODE_OPEN;
        if (s_parse_list (rate_text, false, 0.001, 1e9, opt))
            return s_usage_error ("--rate: expected requests/s from 0.001 to 1e9, comma-separated, got \"%s\"",
                                  rate_text);
    } else {
        opt->mode = MODE_CLOSED;
        if (s_parse_list (conc_text ? conc_text : "1", true, 1, 1e6, opt))
            return s_usage_error ("--concurrency: expected whole numbers from 1 to 1e6, comma-separated, got \"%s\"",
                                  conc_text);
    }
    if (opt->requests && opt->duration_given)
        return s_usage_error ("%s: give --duration or --requests, not both", "--requests");
    if (opt->echo && opt->floor)
        return s_usage_error ("%s: --floor adds an echo step to a sigserve sweep; with --echo every step is one",
                              "--floor");
    if (opt->echo && opt->expect_file)
        return s_usage_error ("%s: an echo server returns the request, not outputs", "--expect");
    if (opt->poisson && opt->mode == MODE_CLOSED)
        return s_usage_error ("%s: arrivals are for open loop (--rate)", "--arrivals");
    long cores = sysconf (_SC_NPROCESSORS_ONLN);
    if (opt->threads == 0)
        opt->threads = (unsigned) (cores > 0 && (unsigned) cores < opt->connections ? cores : opt->connections);
    if (opt->threads > opt->connections)
        return s_usage_error ("--threads: each thread needs a connection; raise --connections to at least %s",
                              "the thread count");
    if (opt->connections / opt->threads + 1 > MAX_CONNS_PER_THREAD)
        return s_usage_error ("%s: too many connections per thread", "--connections");
    unsigned ring = 1;
    while (ring < opt->max_outstanding)
        ring <<= 1;
    opt->max_outstanding = ring;
    return 0;
}

/* ---- the echo server ---- */

#define ECHO_MAX_FRAMES 16

static int s_serve_echo (const options_t *opt)
{
    void *ctx = zmq_ctx_new ();
    if (!ctx) {
        fprintf (stderr, "sigload: zmq_ctx_new: %s\n", zmq_strerror (zmq_errno ()));
        return EXIT_ERRORS;
    }
    zmq_ctx_set (ctx, ZMQ_IO_THREADS, (int) opt->io_threads);
    zmq_pollitem_t items[MAX_ENDPOINTS];
    size_t n = opt->n_serve_echo;
    int rc = EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        items[i] = (zmq_pollitem_t) { .socket = zmq_socket (ctx, ZMQ_ROUTER), .events = ZMQ_POLLIN };
        int linger = 0;
        zmq_setsockopt (items[i].socket, ZMQ_LINGER, &linger, sizeof linger);
        if (zmq_bind (items[i].socket, opt->serve_echo[i]) != 0) {
            fprintf (stderr, "sigload: cannot bind the echo server to %s: %s\n", opt->serve_echo[i],
                     zmq_strerror (zmq_errno ()));
            n = i + 1;
            rc = EXIT_ERRORS;
            goto done;
        }
        fprintf (stderr, "sigload: echoing on %s (stop with SIGINT or SIGTERM)\n", opt->serve_echo[i]);
    }
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigemptyset (&sa.sa_mask);
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    zmq_msg_t frames[ECHO_MAX_FRAMES];
    for (int f = 0; f < ECHO_MAX_FRAMES; f++)
        zmq_msg_init (&frames[f]);
    uint64_t echoed = 0, dropped = 0;
    while (!s_interrupted) {
        int ready = zmq_poll (items, (int) n, 100);
        if (ready < 0) {
            if (zmq_errno () == EINTR)
                continue;
            fprintf (stderr, "sigload: zmq_poll: %s\n", zmq_strerror (zmq_errno ()));
            rc = EXIT_ERRORS;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            void *s = items[i].socket;
            for (;;) {
                int nf = 0, more = 1, ok = 1;
                while (more) {
                    zmq_msg_t *m = &frames[nf < ECHO_MAX_FRAMES ? nf : ECHO_MAX_FRAMES - 1];
                    if (zmq_msg_recv (m, s, nf == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                        ok = 0;
                        break;
                    }
                    more = zmq_msg_more (m);
                    if (nf < ECHO_MAX_FRAMES)
                        nf++;
                    else
                        ok = -1;   /* too many frames: receive them all, echo none */
                }
                if (nf == 0 && ok == 0)
                    break;         /* nothing more on this socket */
                if (ok != 1) {
                    dropped++;
                    continue;
                }
                for (int f = 0; f < nf; f++)
                    if (zmq_msg_send (&frames[f], s, (f + 1 < nf ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) {
                        dropped++;
                        break;
                    }
                echoed++;
            }
        }
    }
    for (int f = 0; f < ECHO_MAX_FRAMES; f++)
        zmq_msg_close (&frames[f]);
    fprintf (stderr, "sigload: echo server stopping: %" PRIu64 " messages echoed, %" PRIu64 " dropped\n", echoed,
             dropped);
done:
    for (size_t i = 0; i < n; i++)
        zmq_close (items[i].socket);
    zmq_ctx_term (ctx);
    return rc;
}

/* ---- files of floats ---- */

/* Reads every float of PATH into a malloc'd array. -1 with a message on failure. */
static int s_read_floats (const char *path, float **out, size_t *count)
{
    FILE *f = fopen (path, "rb");
    if (!f) {
        fprintf (stderr, "sigload: cannot open %s: %s\n", path, strerror (errno));
        return -1;
    }
    size_t cap = 1024, n = 0;
    float *v = malloc (cap * sizeof *v);
    char token[128];
    size_t len = 0;
    int ch, line = 1, comment = 0, rc = 0;
    do {
        ch = fgetc (f);
        bool sep = ch == EOF || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == ',' || ch == '#';
        if (ch == '#')
            comment = 1;
        if (!sep && !comment) {
            if (len + 1 >= sizeof token) {
                fprintf (stderr, "sigload: %s:%d: a token longer than %zu characters\n", path, line, sizeof token);
                rc = -1;
                break;
            }
            token[len++] = (char) ch;
            continue;
        }
        if (len > 0) {
            token[len] = 0;
            char *end;
            errno = 0;
            float x = strtof (token, &end);
            if (*end || errno || !isfinite (x)) {
                fprintf (stderr, "sigload: %s:%d: \"%s\" is not a finite number\n", path, line, token);
                rc = -1;
                break;
            }
            if (n == cap) {
                cap *= 2;
                float *bigger = realloc (v, cap * sizeof *v);
                if (!bigger) {
                    rc = -1;
                    break;
                }
                v = bigger;
            }
            v[n++] = x;
            len = 0;
        }
        if (ch == '\n') {
            line++;
            comment = 0;
        }
    } while (ch != EOF);
    fclose (f);
    if (rc != 0 || !v) {
        free (v);
        return -1;
    }
    *out = v;
    *count = n;
    return 0;
}

/* ---- connecting ---- */

static int s_exchange (void *socket, const void *payload, size_t len, uint8_t *reply, size_t cap, int timeout_ms)
{
    if (zmq_send (socket, payload, len, 0) != (int) len)
        return -1;
    zmq_pollitem_t item = { .socket = socket, .events = ZMQ_POLLIN };
    if (zmq_poll (&item, 1, timeout_ms) <= 0)
        return -1;
    return zmq_recv (socket, reply, cap, ZMQ_DONTWAIT);
}

static void *s_new_socket (void *ctx, const options_t *opt)
{
    void *s = zmq_socket (ctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    int linger = 0, hwm = (int) opt->max_outstanding;
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt (s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    return s;
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
    int64_t deadline = s_now () + (int64_t) wait_ms * 1000000;
    const char *why = "no answer";
    int rc = -1;
    while (rc != 0) {
        int64_t left_ms = (deadline - s_now ()) / 1000000;
        if (left_ms <= 0) {
            fprintf (stderr, "sigload: %s: %s within %d ms\n", endpoint, why, wait_ms);
            return -1;
        }
        /* a fresh socket per try: an answer to an earlier try cannot be taken for this one's */
        void *s = s_new_socket (L->ctx, L->opt);
        if (!s || zmq_connect (s, endpoint) != 0) {
            fprintf (stderr, "sigload: cannot connect to %s: %s\n", endpoint, zmq_strerror (zmq_errno ()));
            if (s)
                zmq_close (s);
            return -1;
        }
        int n = s_exchange (s, probe, len, reply, sizeof reply, (int) (left_ms < 1000 ? left_ms : 1000));
        zmq_close (s);
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

/* One probe to each peer of C (every one is known to answer by now), so that every pipe of
 * the load connection is up before the first timed request. */
static int s_connection_ready (const sigload_t *L, const connection_t *c, bool echo, const char *what)
{
    uint8_t probe[64], reply[4096];
    size_t len = s_probe (echo, probe);
    for (unsigned i = 0; i < c->n_peers; i++)
        if (zmq_send (c->socket, probe, len, 0) != (int) len)
            return -1;
    int64_t deadline = s_now () + (int64_t) L->opt->timeout_ms * 1000000 + 1000000000LL;
    for (unsigned got = 0; got < c->n_peers;) {
        int64_t left_ms = (deadline - s_now ()) / 1000000;
        zmq_pollitem_t item = { .socket = c->socket, .events = ZMQ_POLLIN };
        if (left_ms <= 0 || zmq_poll (&item, 1, (long) left_ms) <= 0) {
            fprintf (stderr, "sigload: %s: %u of %u peers answered\n", what, got, c->n_peers);
            return -1;
        }
        int n = zmq_recv (c->socket, reply, sizeof reply, ZMQ_DONTWAIT);
        if (n >= 0 && s_probe_answer (echo, probe, len, reply, n) >= 0)
            got++;
    }
    return 0;
}

/* Asks the server for the model's input and output sizes. 0 when it lists the model. */
static int s_model_sizes (void *socket, const char *model, int timeout_ms, uint32_t *in, uint32_t *out,
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
                *in = m->input_size;
                *out = m->output_size;
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

/* ---- the worker's hot path ---- */

static void *s_arena_alloc (void *data, size_t size)
{
    worker_t *w = data;
    size_t start = (w->arena_used + 15) & ~(size_t) 15;
    if (start > w->arena_cap || size > w->arena_cap - start)
        return NULL;
    w->arena_used = start + size;
    return w->arena + start;
}

static void s_arena_free (void *data, void *ptr)
{
    (void) data;
    (void) ptr;
}

static void s_copy_error (char *dst, const char *text)
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
    s_copy_error (w->counts.first_error[outcome], text);
}

enum { SEND_OK, SEND_FULL, SEND_BLOCKED, SEND_FAILED };

/* Sends the connection's next request. T_SCHED < 0: closed loop, scheduled = actual send. */
static int s_send (worker_t *w, connection_t *c, int64_t t_sched, bool measured)
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
        w->infer.features = L->pool + set * L->per_request;
        len = sigserve__v1__request__pack (&w->req, w->send_buf);
    }
    int64_t now = s_now ();
    while (zmq_send (c->socket, w->send_buf, len, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno ();
        if (e == EINTR)
            continue;
        return e == EAGAIN ? SEND_BLOCKED : SEND_FAILED;
    }
    slot->seq = seq;
    slot->t_sched = t_sched < 0 ? now : t_sched;
    slot->t_send = now;
    slot->state = SLOT_PENDING;
    slot->measured = measured;
    c->next_seq++;
    c->outstanding++;
    w->counts.sent++;
    return SEND_OK;
}

/* Open loop: the next connection (round robin) that takes the request. */
static int s_send_any (worker_t *w, connection_t *conns, int64_t t_sched, bool measured)
{
    for (size_t tries = 0; tries < w->n_conns; tries++) {
        connection_t *c = &conns[w->rr];
        w->rr = w->rr + 1 == w->n_conns ? 0 : w->rr + 1;
        int rc = s_send (w, c, t_sched, measured);
        if (rc == SEND_OK || rc == SEND_FAILED)
            return rc;
    }
    return SEND_BLOCKED;
}

static void s_schedule_advance (worker_t *w, const step_t *st)
{
    w->sched_k++;
    if (w->load->opt->poisson) {
        w->sched_offset_ns += -log (s_rand_unit (&w->rng)) * w->period_ns;
        w->sched_next = st->t0 + (int64_t) w->sched_offset_ns;
    } else
        w->sched_next = st->t0 + w->phase_ns + (int64_t) ((double) w->sched_k * w->period_ns);
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
            /* could not even be sent in time: the client is saturated */
            s_count_error (w, measured, OUT_TIMEOUT, "not sent within --timeout of its scheduled time");
        } else {
            int rc = s_send_any (w, conns, t, measured);
            if (rc == SEND_BLOCKED) {
                w->blocked = true;
                break;
            }
            if (rc == SEND_FAILED)
                s_count_error (w, measured, OUT_SEND_FAILED, zmq_strerror (zmq_errno ()));
            else
                sent++;
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
            int rc = s_send (w, c, -1, measured);
            if (rc == SEND_FAILED) {
                s_count_error (w, measured, OUT_SEND_FAILED, zmq_strerror (zmq_errno ()));
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

static bool s_outputs_match (const sigload_t *L, uint64_t seq, const float *out, size_t n)
{
    if (n != L->out_per_request)
        return false;
    const float *e = L->expect + (size_t) (seq % L->n_sets) * n;
    float tol = (float) L->opt->tolerance;
    for (size_t i = 0; i < n; i++)
        if (!(fabsf (out[i] - e[i]) <= tol * fmaxf (1.0f, fabsf (e[i]))))
            return false;
    return true;
}

static void s_reply (worker_t *w, connection_t *c, size_t n, int64_t now)
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
        id = s_get_le64 (w->recv_buf);
    } else {
        w->arena_used = 0;
        Sigserve__V1__Reply *rep = sigserve__v1__reply__unpack (&w->allocator, n, w->recv_buf);
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
    if (status == OUT_OK && L->expect && !s_outputs_match (L, seq, outputs, n_outputs))
        status = OUT_MISMATCH;
    if (status != OUT_OK) {
        s_count_error (w, measured, status, status == OUT_MISMATCH ? "outputs differ from --expect" : error);
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

static int s_drain (worker_t *w, connection_t *c)
{
    int got = 0;
    for (;;) {
        int n = zmq_recv (c->socket, w->recv_buf, w->recv_cap, ZMQ_DONTWAIT);
        if (n < 0) {
            if (zmq_errno () == EINTR)
                continue;
            return got;   /* EAGAIN: nothing more now */
        }
        s_reply (w, c, (size_t) n, s_now ());
        got++;
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
    atomic_store_explicit (&w->pub_answered, w->counts.answered, memory_order_relaxed);
    atomic_store_explicit (&w->pub_errors, errors, memory_order_relaxed);
}

static void s_sleep_until (int64_t t)
{
    int64_t now = s_now ();
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
    if (st->mode == MODE_OPEN) {
        double rate = st->target / (double) T;
        w->period_ns = 1e9 / rate;
        w->phase_ns = opt->poisson ? 0 : (int64_t) ((double) t * 1e9 / st->target);
        w->sched_k = 0;
        w->quota = st->requests / T + (t < st->requests % T);
        w->sched_done = st->requests && w->quota == 0;
        /* spin only while it costs at most a tenth of this thread's time */
        w->spin_ns = w->period_ns >= 10.0 * (double) L->spin_ns ? L->spin_ns : 0;
        if (opt->poisson) {
            w->sched_offset_ns = -log (s_rand_unit (&w->rng)) * w->period_ns;
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
    for (;;) {
        int64_t now = s_now ();
        bool aborted = atomic_load_explicit (&L->abort, memory_order_relaxed);
        int sent = 0;
        if (!aborted)
            sent = st->mode == MODE_OPEN ? s_open_send (w, conns, now) : s_closed_send (w, conns, now);
        /* Receiving last, until EAGAIN, leaves every ZMQ_FD armed for the sleep below. */
        int got = 0;
        for (size_t i = 0; i < w->n_conns; i++)
            got += s_drain (w, &conns[i]);
        now = s_now ();
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
        ppoll (pfds, w->n_conns, &ts, NULL);
    }
    s_publish (w);
}

static void *s_worker_main (void *arg)
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

/* ---- results ---- */

typedef struct {
    step_t step;
    counts_t counts;
    histogram_t *total, *server, *network;
    double achieved;
    uint64_t errors;                /* measured errors */
} result_t;

static void s_merge (sigload_t *L, result_t *r)
{
    r->step = L->step;
    histogram_reset (r->total);
    histogram_reset (r->server);
    histogram_reset (r->network);
    memset (&r->counts, 0, sizeof r->counts);
    r->counts.last_answer = L->step.measure_start;
    for (size_t t = 0; t < L->n_workers; t++) {
        const worker_t *w = &L->workers[t];
        const counts_t *c = &w->counts;
        histogram_merge (r->total, w->total);
        histogram_merge (r->server, w->server);
        histogram_merge (r->network, w->network);
        for (int o = 0; o < OUT_COUNT; o++) {
            r->counts.outcomes[o] += c->outcomes[o];
            s_copy_error (r->counts.first_error[o], c->first_error[o]);
        }
        r->counts.requests += c->requests;
        r->counts.answered += c->answered;
        r->counts.sent += c->sent;
        r->counts.warmup_errors += c->warmup_errors;
        r->counts.late += c->late;
        r->counts.lag_sum += c->lag_sum;
        if (c->last_answer > r->counts.last_answer)
            r->counts.last_answer = c->last_answer;
        if (c->lag_max > r->counts.lag_max)
            r->counts.lag_max = c->lag_max;
    }
    r->errors = 0;
    for (int o = 1; o < OUT_COUNT; o++)
        r->errors += r->counts.outcomes[o];
    double seconds = (double) (r->counts.last_answer - L->step.measure_start) / 1e9;
    r->achieved = r->counts.answered && seconds > 0 ? (double) r->counts.answered / seconds : 0;
}

static double s_us (int64_t ns)
{
    return (double) ns / 1e3;
}

static void s_format_target (const step_t *st, char *buf, size_t len)
{
    if (st->mode == MODE_OPEN)
        snprintf (buf, len, "%.10g/s", st->target);
    else
        snprintf (buf, len, "%.10g outstanding", st->target);
}

/* "STATUS_X:n;TIMEOUT:m" (SEP ";" and ":"), or "STATUS_X n, TIMEOUT m" for the table. */
static void s_format_errors (const result_t *r, bool csv, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (int o = 1; o < OUT_COUNT; o++) {
        if (!r->counts.outcomes[o])
            continue;
        int n = snprintf (buf + used, len - used, csv ? "%s%s:%" PRIu64 : "%s%s %" PRIu64, used ? (csv ? ";" : ", ") : "",
                          s_outcome_names[o], r->counts.outcomes[o]);
        if (n < 0 || used + (size_t) n >= len)
            break;
        used += (size_t) n;
    }
}

static void s_print_table_header (FILE *out)
{
    fprintf (out, "| step | mode | target | achieved req/s | requests | p50 | p90 | p99 | p99.9 | max | "
                  "server mean | network mean | send lag mean | errors |\n");
    fprintf (out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
}

static void s_print_row (FILE *out, const result_t *r)
{
    char target[64], errors[512], server[32], lag[32];
    s_format_target (&r->step, target, sizeof target);
    s_format_errors (r, false, errors, sizeof errors);
    const histogram_t *h = r->total;
    uint64_t ok = r->counts.outcomes[OUT_OK];
    if (r->step.echo)
        snprintf (server, sizeof server, "-");
    else
        snprintf (server, sizeof server, "%.2f", histogram_mean (r->server) / 1e3);
    if (r->step.mode == MODE_CLOSED)
        snprintf (lag, sizeof lag, "-");
    else
        snprintf (lag, sizeof lag, "%.2f", ok ? r->counts.lag_sum / (double) ok / 1e3 : 0.0);
    fprintf (out, "| %s | %s | %s | %.1f | %" PRIu64 " | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %.2f | %s | %" PRIu64
             "%s%s%s |\n",
             r->step.name, r->step.mode == MODE_OPEN ? "open loop" : "closed loop", target, r->achieved,
             r->counts.requests, s_us (histogram_value_at_percentile (h, 50)),
             s_us (histogram_value_at_percentile (h, 90)), s_us (histogram_value_at_percentile (h, 99)),
             s_us (histogram_value_at_percentile (h, 99.9)), s_us (histogram_max (h)), server,
             histogram_mean (r->network) / 1e3, lag, r->errors,
             r->errors ? " (" : "", errors, r->errors ? ")" : "");
    fflush (out);
}

static const char *s_csv_header =
    "step,kind,mode,target,achieved_rps,requests,ok,errors,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,"
    "server_mean_us,server_p50_us,server_p99_us,network_mean_us,network_p50_us,network_p99_us,"
    "send_lag_mean_us,send_lag_max_us,errors_by_status\n";

static void s_print_csv_row (FILE *out, const result_t *r)
{
    char errors[512];
    s_format_errors (r, true, errors, sizeof errors);
    const histogram_t *h = r->total, *s = r->server, *n = r->network;
    uint64_t ok = r->counts.outcomes[OUT_OK];
    fprintf (out,
             "%s,%s,%s,%.10g,%.3f,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
             "%.3f,%.3f,%.3f,%.3f,%.3f,%s\n",
             r->step.name, r->step.echo ? "echo" : "sigserve", r->step.mode == MODE_OPEN ? "open" : "closed",
             r->step.target, r->achieved, r->counts.requests, ok, r->errors,
             s_us (histogram_value_at_percentile (h, 50)), s_us (histogram_value_at_percentile (h, 90)),
             s_us (histogram_value_at_percentile (h, 99)), s_us (histogram_value_at_percentile (h, 99.9)),
             s_us (histogram_max (h)), histogram_mean (h) / 1e3, histogram_mean (s) / 1e3,
             s_us (histogram_value_at_percentile (s, 50)), s_us (histogram_value_at_percentile (s, 99)),
             histogram_mean (n) / 1e3, s_us (histogram_value_at_percentile (n, 50)),
             s_us (histogram_value_at_percentile (n, 99)), ok ? r->counts.lag_sum / (double) ok / 1e3 : 0.0,
             s_us (r->counts.lag_max), errors);
    fflush (out);
}

static int s_write_hgrm (const char *dir, const result_t *r)
{
    char path[4096];
    snprintf (path, sizeof path, "%s/%s.hgrm", dir, r->step.name);
    FILE *f = fopen (path, "w");
    if (!f) {
        fprintf (stderr, "sigload: cannot write %s: %s\n", path, strerror (errno));
        return -1;
    }
    int rc = histogram_write_hgrm (r->total, f, 1000.0);
    if (fclose (f) != 0 || rc != 0) {
        fprintf (stderr, "sigload: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

/* Writes DIR/plots.gp and runs gnuplot on it in DIR. */
static bool s_plot (const char *dir, const result_t *results, size_t n)
{
    char path[4096];
    snprintf (path, sizeof path, "%s/plots.gp", dir);
    FILE *f = fopen (path, "w");
    if (!f) {
        fprintf (stderr, "sigload: cannot write %s: %s\n", path, strerror (errno));
        return false;
    }
    fprintf (f, "# sigload's plots: run \"gnuplot plots.gp\" in this folder.\n"
                "set terminal pngcairo size 1280,800 noenhanced\n"
                "set rmargin 8\n"
                "set grid\n"
                "set key top left\n"
                "set logscale y\n"
                "set ylabel 'latency (us)'\n"
                "\n"
                "# Every step's percentile spectrum; x is 1/(1-percentile) on a log axis.\n"
                "set output 'percentiles.png'\n"
                "set title 'sigload: latency by percentile (open loop: from each scheduled send; "
                "closed loop: from the actual send)'\n"
                "set logscale x\n"
                "set xlabel 'percentile'\n"
                "set xtics ('0%%%%' 1, '90%%%%' 10, '99%%%%' 100, '99.9%%%%' 1000, '99.99%%%%' 10000, '99.999%%%%' 100000, "
                "'99.9999%%%%' 1000000)\n"
                "plot");
    for (size_t i = 0; i < n; i++)
        fprintf (f, "%s \\\n     '%s.hgrm' using 4:1 with lines lw 2 title '%s'", i ? "," : "", results[i].step.name,
                 results[i].step.name);
    fprintf (f, "\n\n# Latency against achieved throughput, from summary.csv (columns: see its header).\n"
                "set output 'latency_vs_throughput.png'\n"
                "set title 'sigload: latency against achieved throughput'\n"
                "unset logscale x\n"
                "set xtics autofreq\n"
                "set xlabel 'achieved throughput (requests/s)'\n"
                "set datafile separator ','\n"
                "plot");
    static const struct { const char *kind, *mode; } series[] = {
        { "sigserve", "open" }, { "sigserve", "closed" }, { "echo", "open" }, { "echo", "closed" },
    };
    static const struct { int column; const char *name; } pcts[] = { { 9, "p50" }, { 11, "p99" }, { 12, "p99.9" } };
    int plotted = 0;
    for (size_t s = 0; s < sizeof series / sizeof series[0]; s++) {
        bool present = false;
        for (size_t i = 0; i < n; i++)
            present |= strcmp (results[i].step.echo ? "echo" : "sigserve", series[s].kind) == 0
                       && strcmp (results[i].step.mode == MODE_OPEN ? "open" : "closed", series[s].mode) == 0;
        if (!present)
            continue;
        for (size_t p = 0; p < sizeof pcts / sizeof pcts[0]; p++)
            fprintf (f, "%s \\\n     'summary.csv' skip 1 using (strcol(2) eq '%s' && strcol(3) eq '%s' ? $5 : NaN):%d "
                        "with linespoints lw 2 pt 7 title '%s %s loop %s'",
                     plotted++ ? "," : "", series[s].kind, series[s].mode, pcts[p].column, series[s].kind,
                     series[s].mode, pcts[p].name);
    }
    fprintf (f, "\n");
    if (fclose (f) != 0) {
        fprintf (stderr, "sigload: cannot write %s\n", path);
        return false;
    }
    fflush (stdout);
    fflush (stderr);
    pid_t pid = fork ();
    if (pid == 0) {
        if (chdir (dir) != 0)
            _exit (126);
        FILE *log = freopen ("gnuplot.log", "w", stderr);   /* its warnings, out of the way */
        (void) log;
        execlp ("gnuplot", "gnuplot", "plots.gp", (char *) NULL);
        _exit (127);
    }
    int status = 0;
    if (pid < 0 || waitpid (pid, &status, 0) != pid) {
        fprintf (stderr, "sigload: cannot run gnuplot: %s\n", strerror (errno));
        return false;
    }
    int code = WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
    char log[4200];
    snprintf (log, sizeof log, "%s/gnuplot.log", dir);
    if (code == 0 || code == 127)
        unlink (log);   /* only warnings (such as a single step's empty x range), or nothing */
    if (code == 127)
        fprintf (stderr, "sigload: gnuplot is not installed: no PNG plots (the data files and %s are written; "
                         "install gnuplot and run it there)\n", path);
    else if (code != 0)
        fprintf (stderr, "sigload: gnuplot failed on %s (%s/gnuplot.log says why)\n", path, dir);
    return code == 0;
}

/* ---- setup ---- */

static int s_connect_set (sigload_t *L, int set, const char *const *eps, size_t n_eps)
{
    const options_t *opt = L->opt;
    for (unsigned g = 0; g < opt->connections; g++) {
        worker_t *w = &L->workers[g % L->n_workers];
        connection_t *c = &w->conns[set][g / L->n_workers];
        *c = (connection_t) { .index = g / (unsigned) L->n_workers, .global = g, .next_seq = 1, .oldest = 1,
                              .ring_mask = opt->max_outstanding - 1 };
        c->ring = calloc (opt->max_outstanding, sizeof *c->ring);
        c->socket = s_new_socket (L->ctx, opt);
        if (!c->ring || !c->socket) {
            fprintf (stderr, "sigload: out of memory or sockets\n");
            return -1;
        }
        for (size_t e = 0; e < n_eps; e++) {
            bool mine = opt->connections >= n_eps ? e == g % n_eps : e % opt->connections == g;
            if (!mine)
                continue;
            if (zmq_connect (c->socket, eps[e]) != 0) {
                fprintf (stderr, "sigload: cannot connect to %s: %s\n", eps[e], zmq_strerror (zmq_errno ()));
                return -1;
            }
            c->n_peers++;
        }
        size_t fd_len = sizeof (int);
        int fd = -1;
        zmq_getsockopt (c->socket, ZMQ_FD, &fd, &fd_len);
        w->pfds[set][c->index] = (struct pollfd) { .fd = fd, .events = POLLIN };
    }
    return 0;
}

static int s_check_ready (sigload_t *L, int set, bool echo, const char *const *eps, size_t n_eps)
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

/* Features (and expected outputs), the echo payloads and the buffers' sizes. */
static int s_prepare_payloads (sigload_t *L, uint32_t input_size)
{
    const options_t *opt = L->opt;
    L->per_request = (size_t) opt->rows * input_size;
    if (opt->features_file) {
        size_t n = 0;
        if (s_read_floats (opt->features_file, &L->pool, &n) != 0)
            return -1;
        if (n == 0 || n % L->per_request != 0) {
            fprintf (stderr, "sigload: %s: %zu features are not a whole number of requests of rows x input size = "
                             "%u x %u = %zu\n", opt->features_file, n, opt->rows, input_size, L->per_request);
            return -1;
        }
        L->n_sets = n / L->per_request;
    } else {
        L->n_sets = RANDOM_SETS;
        L->pool = malloc (L->n_sets * L->per_request * sizeof *L->pool);
        if (!L->pool)
            return -1;
        uint64_t rng = opt->seed * 0x9e3779b97f4a7c15ull + 0x5eed;
        for (size_t i = 0; i < L->n_sets * L->per_request; i++)
            L->pool[i] = (float) (2.0 * s_rand_unit (&rng) - 1.0);
    }
    if (opt->expect_file) {
        size_t n = 0;
        if (s_read_floats (opt->expect_file, &L->expect, &n) != 0)
            return -1;
        if (n == 0 || n % L->n_sets != 0) {
            fprintf (stderr, "sigload: %s: %zu expected outputs do not divide into the %zu requests of %s\n",
                     opt->expect_file, n, L->n_sets, opt->features_file ? opt->features_file : "random features");
            return -1;
        }
        L->out_per_request = n / L->n_sets;
    }
    /* The largest request: the largest id packs into the most bytes. */
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__InferRequest infer = SIGSERVE__V1__INFER_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
    req.infer = &infer;
    infer.request_id = UINT64_MAX;
    infer.model = (char *) opt->model;
    infer.n_features = L->per_request;
    infer.features = L->pool;
    infer.rows = opt->rows;
    infer.deadline_us = opt->deadline_us;
    L->echo_len = sigserve__v1__request__get_packed_size (&req);
    if (L->echo_len < 8)
        L->echo_len = 8;
    L->send_cap = L->echo_len + 16;
    L->echo_payloads = malloc (L->n_sets * L->echo_len);
    if (!L->echo_payloads)
        return -1;
    for (size_t k = 0; k < L->n_sets; k++) {
        uint8_t *p = L->echo_payloads + k * L->echo_len;
        memset (p, 0, L->echo_len);
        infer.features = L->pool + k * L->per_request;
        sigserve__v1__request__pack (&req, p);
    }
    return 0;
}

static int s_workers_new (sigload_t *L, bool with_floor)
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
        for (int set = 0; set < (with_floor ? 2 : 1); set++) {
            w->conns[set] = calloc (w->n_conns, sizeof *w->conns[set]);
            w->pfds[set] = calloc (w->n_conns, sizeof *w->pfds[set]);
            if (!w->conns[set] || !w->pfds[set])
                return -1;
        }
        w->total = histogram_new ();
        w->server = histogram_new ();
        w->network = histogram_new ();
        if (!w->total || !w->server || !w->network)
            return -1;
        w->rng = (opt->seed + 1) * 0xd1b54a32d192ed03ull + t * 0x9e3779b97f4a7c15ull;
        if (!w->rng)
            w->rng = 1;
    }
    return 0;
}

static int s_workers_buffers (sigload_t *L)
{
    for (size_t t = 0; t < L->n_workers; t++) {
        worker_t *w = &L->workers[t];
        w->send_buf = malloc (L->send_cap);
        w->recv_cap = 65536 + L->echo_len;
        w->recv_buf = malloc (w->recv_cap);
        w->arena_cap = 2 * w->recv_cap + 65536;
        w->arena = malloc (w->arena_cap);
        if (!w->send_buf || !w->recv_buf || !w->arena)
            return -1;
        memset (w->arena, 0, w->arena_cap);   /* fault the pages in now, not on the first reply */
        w->allocator = (ProtobufCAllocator) { .alloc = s_arena_alloc, .free = s_arena_free, .allocator_data = w };
        w->req = (Sigserve__V1__Request) SIGSERVE__V1__REQUEST__INIT;
        w->infer = (Sigserve__V1__InferRequest) SIGSERVE__V1__INFER_REQUEST__INIT;
        w->req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
        w->req.infer = &w->infer;
        w->infer.model = (char *) L->opt->model;
        w->infer.n_features = L->per_request;
        w->infer.features = L->pool;
        w->infer.rows = L->opt->rows;
        w->infer.deadline_us = L->opt->deadline_us;
    }
    return 0;
}

static void s_workers_destroy (sigload_t *L)
{
    if (!L->workers)
        return;
    for (size_t t = 0; t < L->n_workers; t++) {
        worker_t *w = &L->workers[t];
        for (int set = 0; set < 2; set++) {
            for (size_t i = 0; w->conns[set] && i < w->n_conns; i++) {
                if (w->conns[set][i].socket)
                    zmq_close (w->conns[set][i].socket);
                free (w->conns[set][i].ring);
            }
            free (w->conns[set]);
            free (w->pfds[set]);
        }
        histogram_destroy (&w->total);
        histogram_destroy (&w->server);
        histogram_destroy (&w->network);
        free (w->send_buf);
        free (w->recv_buf);
        free (w->arena);
    }
    free (L->workers);
    L->workers = NULL;
}

/* ---- running the steps ---- */

static void s_progress (sigload_t *L, int64_t start, double expected_s)
{
    uint64_t sent = 0, answered = 0, errors = 0;
    for (size_t t = 0; t < L->n_workers; t++) {
        sent += atomic_load_explicit (&L->workers[t].pub_sent, memory_order_relaxed);
        answered += atomic_load_explicit (&L->workers[t].pub_answered, memory_order_relaxed);
        errors += atomic_load_explicit (&L->workers[t].pub_errors, memory_order_relaxed);
    }
    double elapsed = (double) (s_now () - start) / 1e9;
    const char *phase = s_now () < L->step.measure_start ? "warm-up" : "measuring";
    if (expected_s > 0)
        fprintf (stderr, "sigload: %s: %s, %.0f/%.0f s, %" PRIu64 " sent, %" PRIu64 " measured answered, %" PRIu64
                         " errors\n", L->step.name, phase, elapsed, expected_s, sent, answered, errors);
    else
        fprintf (stderr, "sigload: %s: %s, %.0f s, %" PRIu64 " sent, %" PRIu64 " measured answered, %" PRIu64
                         " errors\n", L->step.name, phase, elapsed, sent, answered, errors);
}

/* Runs L->step on every worker and waits for them. */
static void s_run_step (sigload_t *L)
{
    const options_t *opt = L->opt;
    for (size_t t = 0; t < L->n_workers; t++)
        atomic_store (&L->workers[t].done, 0);
    int64_t start = s_now ();
    L->step.t0 = start + 20 * 1000000LL;   /* every worker is past the barrier by then */
    L->step.measure_start = L->step.t0 + (int64_t) (opt->warmup_s * 1e9);
    L->step.measure_end = opt->requests ? INT64_MAX : L->step.measure_start + (int64_t) (opt->duration_s * 1e9);
    double expected_s = opt->requests ? (L->step.mode == MODE_OPEN ? opt->warmup_s + (double) opt->requests / L->step.target : 0)
                                      : opt->warmup_s + opt->duration_s;
    bool progress = !opt->quiet && (expected_s > 2 || expected_s == 0);
    pthread_barrier_wait (&L->start);
    int64_t next_progress = start + 1000000000LL;
    for (;;) {
        size_t done = 0;
        for (size_t t = 0; t < L->n_workers; t++)
            done += atomic_load_explicit (&L->workers[t].done, memory_order_acquire) != 0;
        if (done == L->n_workers)
            break;
        if (s_interrupted && !atomic_load (&L->abort)) {
            atomic_store (&L->abort, true);
            fprintf (stderr, "sigload: interrupted: stopping\n");
        }
        usleep (20 * 1000);
        if (progress && s_now () >= next_progress) {
            s_progress (L, start, expected_s);
            next_progress += 1000000000LL;
        }
    }
}

static void s_step_name (step_t *st, bool floor_step)
{
    char value[32];
    snprintf (value, sizeof value, "%.10g", st->target);
    snprintf (st->name, sizeof st->name, "%s%s-%s", floor_step || st->echo ? "echo-" : "",
              st->mode == MODE_OPEN ? "open" : "closed", value);
}

/* Why the sweep should stop after R (--stop-when-saturated), or "" to go on. */
static void s_saturation (const options_t *opt, const result_t *r, double *first_p99_us, char *why, size_t len)
{
    double p99 = s_us (histogram_value_at_percentile (r->total, 99));
    if (*first_p99_us == 0)
        *first_p99_us = p99 > 0 ? p99 : 1;
    double limit = opt->saturation_p99_us > 0 ? opt->saturation_p99_us
                                              : (10 * *first_p99_us > 1000 ? 10 * *first_p99_us : 1000);
    why[0] = 0;
    if (opt->mode == MODE_OPEN && r->achieved < 0.9 * r->step.target)
        snprintf (why, len, "achieved %.0f req/s, less than 90%% of %.10g", r->achieved, r->step.target);
    else if (r->errors)
        snprintf (why, len, "%" PRIu64 " errors", r->errors);
    else if (p99 > limit)
        snprintf (why, len, "p99 %.1f us above %.1f us", p99, limit);
}

/* Runs the steps (the floor step first), printing each row as it ends; the results filled. */
static size_t s_run_sweep (sigload_t *L, result_t *results, size_t n_steps, FILE *csv, bool *any_errors,
                           char *saturated, size_t saturated_len)
{
    const options_t *opt = L->opt;
    double first_p99_us = 0;
    size_t n = 0;
    for (size_t i = 0; i < n_steps && !s_interrupted; i++) {
        bool floor_step = opt->floor && i == 0;
        size_t v = opt->floor ? (i == 0 ? 0 : i - 1) : i;
        L->step = (step_t) { .mode = opt->mode, .set = floor_step ? SET_FLOOR : SET_TARGET,
                             .echo = opt->echo || floor_step, .target = opt->values[v], .requests = opt->requests };
        s_step_name (&L->step, floor_step);
        s_run_step (L);
        result_t *r = &results[n++];
        s_merge (L, r);
        s_print_row (stdout, r);
        if (csv)
            s_print_csv_row (csv, r);
        if (opt->out_dir)
            s_write_hgrm (opt->out_dir, r);
        if (r->errors || r->counts.warmup_errors)
            *any_errors = true;
        if (floor_step || !opt->stop_when_saturated)
            continue;
        char why[256];
        s_saturation (opt, r, &first_p99_us, why, sizeof why);
        if (why[0] && i + 1 < n_steps) {
            snprintf (saturated, saturated_len, "saturated at %s (%s): the sweep stopped there", r->step.name, why);
            fprintf (stderr, "sigload: %s\n", saturated);
            break;
        }
    }
    return n;
}

static void s_print_error_details (const result_t *results, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const result_t *r = &results[i];
        if (r->counts.warmup_errors)
            printf ("%s: %" PRIu64 " errors in the warm-up\n", r->step.name, r->counts.warmup_errors);
        for (int o = 1; o < OUT_COUNT; o++)
            if (r->counts.outcomes[o])
                printf ("%s: %" PRIu64 " x %s%s%s\n", r->step.name, r->counts.outcomes[o], s_outcome_names[o],
                        r->counts.first_error[o][0] ? ", first: " : "", r->counts.first_error[o]);
        if (r->counts.late)
            printf ("%s: %" PRIu64 " replies came after their timeout\n", r->step.name, r->counts.late);
    }
}

int main (int argc, char **argv)
{
    options_t opt;
    int rc = s_parse_options (argc, argv, &opt);
    if (rc != 0)
        return rc < 0 ? EXIT_OK : rc;
    if (opt.n_serve_echo > 0)
        return s_serve_echo (&opt);

    sigload_t L = { .opt = &opt, .timeout_ns = (int64_t) opt.timeout_ms * 1000000,
                    .spin_ns = (int64_t) opt.spin_us * 1000 };
    result_t *results = NULL;
    size_t n_steps = 0, n_results = 0;
    FILE *csv = NULL;
    int exit_code = EXIT_ERRORS;
    bool threads_started = false;

    struct sigaction sa = { .sa_handler = s_on_signal };
    sigemptyset (&sa.sa_mask);
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);

    L.ctx = zmq_ctx_new ();
    if (!L.ctx || s_workers_new (&L, opt.floor != NULL) != 0) {
        fprintf (stderr, "sigload: out of memory\n");
        goto done;
    }
    zmq_ctx_set (L.ctx, ZMQ_IO_THREADS, (int) opt.io_threads);
    if (s_connect_set (&L, SET_TARGET, opt.endpoints, opt.n_endpoints) != 0)
        goto done;
    if (opt.floor && s_connect_set (&L, SET_FLOOR, &opt.floor, 1) != 0)
        goto done;
    if (s_check_ready (&L, SET_TARGET, opt.echo, opt.endpoints, opt.n_endpoints) != 0)
        goto done;
    if (opt.floor && s_check_ready (&L, SET_FLOOR, true, &opt.floor, 1) != 0)
        goto done;

    uint32_t input_size = opt.input_size, output_size = 0;
    if (!opt.echo) {
        uint32_t in = 0, out = 0;
        char served[1024];
        if (s_model_sizes (L.workers[0].conns[SET_TARGET][0].socket, opt.model, (int) opt.timeout_ms, &in, &out, served,
                           sizeof served) == 0) {
            if (!input_size)
                input_size = in;
            output_size = out;
        } else if (!input_size) {
            fprintf (stderr, "sigload: the server does not list model \"%s\" (%s%s); sending 512 features per row "
                             "(--input-size sets it)\n", opt.model, served[0] ? "served: " : "no model list",
                     served);
            input_size = 512;
        }
    }
    if (!input_size)
        input_size = 512;
    if (s_prepare_payloads (&L, input_size) != 0 || s_workers_buffers (&L) != 0)
        goto done;
    if (L.expect && output_size && L.out_per_request != (size_t) opt.rows * output_size)
        fprintf (stderr, "sigload: warning: %s holds %zu outputs per request; the model gives %u x %u\n",
                 opt.expect_file, L.out_per_request, opt.rows, output_size);

    if (opt.out_dir) {
        if (mkdir (opt.out_dir, 0777) != 0 && errno != EEXIST) {
            fprintf (stderr, "sigload: cannot create %s: %s\n", opt.out_dir, strerror (errno));
            goto done;
        }
        char path[4096];
        snprintf (path, sizeof path, "%s/summary.csv", opt.out_dir);
        csv = fopen (path, "w");
        if (!csv) {
            fprintf (stderr, "sigload: cannot write %s: %s\n", path, strerror (errno));
            goto done;
        }
        fputs (s_csv_header, csv);
    }

    n_steps = opt.n_values + (opt.floor ? 1 : 0);
    results = calloc (n_steps, sizeof *results);
    if (!results)
        goto done;
    for (size_t i = 0; i < n_steps; i++) {
        results[i].total = histogram_new ();
        results[i].server = histogram_new ();
        results[i].network = histogram_new ();
        if (!results[i].total || !results[i].server || !results[i].network)
            goto done;
    }

    pthread_barrier_init (&L.start, NULL, (unsigned) L.n_workers + 1);
    for (size_t t = 0; t < L.n_workers; t++)
        if (pthread_create (&L.workers[t].thread, NULL, s_worker_main, &L.workers[t]) != 0) {
            fprintf (stderr, "sigload: cannot start a thread\n");
            abort ();   /* the barrier counts on every thread */
        }
    threads_started = true;

    char duration[64];
    if (opt.requests)
        snprintf (duration, sizeof duration, "%" PRIu64 " requests measured per step", opt.requests);
    else
        snprintf (duration, sizeof duration, "%.3g s measured per step", opt.duration_s);
    printf ("sigload%s: %zu endpoint(s)%s%s, model %s, %u row(s) of %u features (%zu-byte requests), %u "
            "connection(s), %u thread(s), %s, warm-up %.3g s, %s\n\n",
            opt.echo ? " (echo)" : "", opt.n_endpoints, opt.floor ? ", echo floor at " : "", opt.floor ? opt.floor : "",
            opt.echo ? "-" : opt.model, opt.rows, input_size, L.echo_len, opt.connections, opt.threads,
            opt.mode == MODE_CLOSED ? "closed loop" : opt.poisson ? "open loop, Poisson arrivals" : "open loop, constant arrivals",
            opt.warmup_s, duration);
    printf ("Latency in microseconds: %s.\n\n",
            opt.mode == MODE_OPEN ? "open loop, from each request's scheduled send time (coordinated-omission safe)"
                                  : "closed loop, from each request's actual send: a slow reply delays the requests "
                                    "behind it, so the percentiles hide queueing (coordinated omission); use --rate "
                                    "for open loop");
    s_print_table_header (stdout);

    bool any_errors = false;
    char saturated[512] = "";
    n_results = s_run_sweep (&L, results, n_steps, csv, &any_errors, saturated, sizeof saturated);
    printf ("\n");
    if (saturated[0])
        printf ("%s\n", saturated);
    s_print_error_details (results, n_results);
    if (opt.out_dir) {
        if (csv) {
            fclose (csv);
            csv = NULL;
        }
        bool plotted = s_plot (opt.out_dir, results, n_results);
        printf ("files in %s: <step>.hgrm for each step, summary.csv, plots.gp%s\n", opt.out_dir,
                plotted ? ", percentiles.png, latency_vs_throughput.png" : "");
    }
    exit_code = any_errors || s_interrupted ? EXIT_ERRORS : EXIT_OK;

done:
    if (threads_started) {
        atomic_store (&L.quit, true);
        pthread_barrier_wait (&L.start);
        for (size_t t = 0; t < L.n_workers; t++)
            pthread_join (L.workers[t].thread, NULL);
        pthread_barrier_destroy (&L.start);
    }
    if (csv)
        fclose (csv);
    for (size_t i = 0; results && i < n_steps; i++) {
        histogram_destroy (&results[i].total);
        histogram_destroy (&results[i].server);
        histogram_destroy (&results[i].network);
    }
    free (results);
    s_workers_destroy (&L);
    if (L.ctx)
        zmq_ctx_term (L.ctx);
    free (L.pool);
    free (L.expect);
    free (L.echo_payloads);
    return exit_code;
}
