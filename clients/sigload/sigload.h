/* sigload's private header: the state its files share and the functions they call in each other.
 *
 *   options.c  the usage text and option parsing (the thread default: the affinity mask)
 *   worker.c   connections and the worker threads' hot loop: send, receive, pace, record
 *   judge.c    each step's verdicts: saturated, the sender behind, whose doing
 *   report.c   merging the workers' results; the table, summary.csv, .hgrm, progress line
 *   plot.c     plots.gp and the PNGs gnuplot makes of it
 *   echo.c     --serve-echo: the plain ZeroMQ echo server of the transport floor (either engine)
 *   procs.c    --processes N: N copies of the load in N processes, one start per step, one report
 *   ready.c    before the sweep: every endpoint answers, every connection is up, dns:// names
 *              expanded, the model's sizes
 *   signals.c  SIGINT and SIGTERM: a flag the sweep, the echo server and the processes' steps look at
 *   main.c     main: the requests' payloads, the sweep
 *
 * Design. The main thread parses the options, connects every DEALER socket (clients/sigclient_sock.h:
 * either engine, --engine), checks that each endpoint answers (and asks the server for the model's
 * sizes), then starts T worker threads and runs the steps of the sweep one after another. Each
 * worker owns every T-th connection and, for the length of a step, runs one loop: send what is
 * due, receive every reply there is, expire requests past their timeout, then sleep in ppoll () on
 * the sockets' fds until the next send is due (or spin with --busy-poll). With the zmtp engine those
 * fds are the TCP connections themselves and the worker thread does all the I/O: a send is one
 * sendmsg, a wake-up one read per connection that has something; with libzmq they are the
 * sockets' ZMQ_FDs and libzmq's I/O thread moves the bytes.
 *
 *  - Open loop: each request has an intended send time t_k from the arrival process (constant or
 *    Poisson, each thread 1/T of the rate, phase-shifted so that constant arrivals interleave), or
 *    from --schedule (absolute offsets from the step's start; entry i to thread i mod T).
 *    The sender sends when now >= t_k; latency is receive time - t_k. A sender (or a server) that
 *    falls behind therefore shows as latency instead of being hidden: no coordinated omission.
 *    A request that cannot even be sent within --timeout of t_k counts as a timeout.
 *  - Closed loop: every connection keeps its share of the concurrency outstanding and sends the
 *    next request when a reply comes; latency is from the actual send, and the output says so.
 *  - --streams N (LSTM models): stream k (id base + k) belongs to connection k mod C alone, so its
 *    steps leave on one pipe, in order, and reach one server in order; each request is the next step
 *    of the thread's next stream (in turn), numbered from 1 (InferRequest.step) across warm-up and
 *    sweep steps. A thread's share of the rate is its streams' share, so each stream sends at R/N.
 *    Open loop never waits for a stream's previous reply: the pipe keeps the order.
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
 *    decoded with protobuf-c, straight from the socket layer's buffers, into a per-thread arena
 *    (common/arena.h) that is reset for each reply. The zmtp engine allocates nothing per message
 *    either once its buffers have grown to the traffic; libzmq allocates the body of every
 *    message above 33 bytes.
 *  - --echo and --floor send the same bytes to a plain ZeroMQ echo (sigload --serve-echo): a
 *    packed request of the same size with the id in its first 8 bytes, checked by size and id.
 *    With --floor, each value of the sweep runs against the echo just before it runs against the
 *    server: the floor of that rate, measured beside it.
 *  - Each step is judged as it ends (judge.c): saturated or not, and whose doing it was. Open
 *    loop, every request's send lag is split into the time every connection of its thread was full
 *    (the server's back-pressure) and the rest (sigload's own lateness): a generator that falls
 *    behind is told apart from a server that does.
 *
 * sigload links libsigclient (the generated protobuf code) and common/ only, never libsigcore. */
#ifndef SIGLOAD_H
#define SIGLOAD_H

#include "arena.h"
#include "histogram.h"
#include "sigclient_sock.h"
#include "signal.pb-c.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum { EXIT_OK = 0, EXIT_ERRORS = 1, EXIT_USAGE = 2 };

#define MAX_ENDPOINTS 64
#define MAX_STEPS 64
#define MAX_MODELS 64                   /* --model a,b,...: requests go round-robin over them */
#define MAX_THREADS 256                 /* the thread's field of a request id is 8 bits */
#define MAX_CONNECTIONS 4096
#define MAX_CONNS_PER_THREAD 65535      /* the connection's field is 16 bits */
#define ERROR_TEXT 160
#define MAX_STREAMS 1000000             /* --streams */
#define HELD_LOG 256                    /* a worker's log of held times (worker_t) */

/* Outcomes: 0..8 are the server's Status values, then the client's own. */
enum {
    OUT_OK = 0,
    OUT_STATUS_COUNT = 9,
    OUT_TIMEOUT = OUT_STATUS_COUNT,     /* no reply within --timeout, or not sent in time */
    OUT_BAD_REPLY,                      /* undecodable, not an InferReply, or the wrong size */
    OUT_UNMATCHED,                      /* a request_id that is not outstanding */
    OUT_MISMATCH,                       /* outputs differ from --expect */
    OUT_SEND_FAILED,                    /* the send failed (not for lack of room) */
    OUT_COUNT
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
    const char *floor;              /* --floor: echo endpoint for the floor steps (one beside each step) */
    const char *model;              /* as given ("a,b" for several); "echo" with --echo */
    const char *models[MAX_MODELS]; /* --model split at commas, pointing into model_names */
    size_t n_models;
    char model_names[1024];
    const char *curve_server, *curve_client;    /* certificate files; both or neither */
    client_sock_keys_t curve_keys;  /* decoded from the certificates */
    sigclient_engine_t engine;      /* --engine: every socket's, the echo server's too */
    bool echo;
    load_mode_t mode;
    double values[MAX_STEPS];       /* rates or concurrencies */
    size_t n_values;
    bool poisson;
    unsigned connections, threads, io_threads;
    bool threads_given;             /* --threads; otherwise the default below */
    unsigned affinity_cpus;         /* CPUs this process may run on (the default's bound) */
    double warmup_s, duration_s;
    bool duration_given;
    uint64_t requests;              /* per step; 0: by duration */
    const char *features_file, *expect_file;
    unsigned rows, input_size;      /* input_size 0: ask the server */
    double tolerance;
    unsigned deadline_us;
    unsigned timeout_ms;
    unsigned max_outstanding;       /* rounded up to a power of two */
    uint64_t seed;
    const char *out_dir;
    bool stop_when_saturated;
    double saturation_p99_us;       /* 0: automatic */
    bool busy_poll;
    unsigned spin_us;               /* open loop: spin this long before each scheduled send */
    bool quiet;
    bool dry_run;                   /* print the effective settings and exit */
    uint64_t streams;               /* --streams: LSTM streams, 0 for none */
    uint64_t stream_base;           /* the first stream id */
    const char *schedule_file;      /* --schedule */
    int64_t *schedule_ns;           /* its send offsets from the step's start, non-decreasing */
    size_t n_schedule;
    unsigned processes;             /* --processes: copies of the load, each 1/N of it (procs.c) */
    unsigned process;               /* this copy's index (0: the one that reports) */
    unsigned all_connections;       /* --connections of the whole load (connections: this copy's share) */
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

/* One LSTM stream (--streams): its id and the number its next step carries. */
typedef struct {
    uint64_t id;
    uint64_t next_step;             /* from 1; counts every step sent, warm-up included */
} stream_t;

typedef struct {
    client_sock_t *socket;          /* DEALER */
    int pfd_first, pfd_count;       /* its fds in the worker's pollfds, as last gathered */
    bool wake;                      /* receive from it in the next turn of the loop */
    slot_t *ring;                   /* outstanding requests by sequence */
    uint64_t ring_mask;
    uint64_t next_seq;              /* the next sequence to send (from 1) */
    uint64_t oldest;                /* no sequence below it is pending */
    uint32_t outstanding;           /* pending requests */
    uint32_t index;                 /* within its thread: in the request id */
    uint32_t global;                /* across threads */
    uint32_t closed_target;         /* closed loop: this connection's share of the concurrency */
    unsigned n_peers;               /* endpoints it connects to */
    stream_t *streams;              /* --streams: the streams it alone carries (target set only) */
    uint32_t n_streams;
    uint32_t stream_rr;             /* closed loop: its stream that sends next */
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
    /* Open loop: the send lag of every measured request sent, split by cause. Held: while every
     * connection of the thread was full (--max-outstanding, or a socket that took no more), which
     * is the server's back-pressure. Own: the rest, while a connection had room: sigload's sender
     * itself was late (its CPU, its other work). */
    uint64_t lag_sent;              /* measured requests sent */
    double own_lag_sum, held_lag_sum;
    int64_t own_lag_max;
    uint64_t unsent_own, unsent_held;   /* not sent within --timeout (counted as TIMEOUT), by cause */
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
    bool schedule;                  /* --schedule: send times from the file */
    bool streams;                   /* requests are steps of the connections' streams */
    sigclient_engine_t engine;      /* what moved its messages */
} step_t;

typedef struct _sigload_t sigload_t;

typedef struct {
    sigload_t *load;
    int index;
    pthread_t thread;
    connection_t *conns[2];         /* [SET_TARGET], [SET_FLOOR] (NULL without --floor) */
    struct pollfd *pfds[2];         /* room for every fd of the set's connections */
    int pfd_cap[2];
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
    /* Open loop: the time the sender was held back by full connections (from a send that found
     * every connection full to the next that went out), as the points where such a time began
     * and ended with the total held before each: a request's held lag is the total's growth
     * between its scheduled and its actual send. Points older than the next request's schedule
     * are dropped; a full log drops its oldest. */
    bool held;                      /* the last send found every connection full */
    int64_t held_from;              /* since then */
    int64_t held_total;             /* held time ended so far in the step */
    struct { int64_t at, total; bool start; } held_log[HELD_LOG];
    size_t held_first, held_n;      /* the log's oldest point, and its points (a ring) */
    size_t sched_index;             /* --schedule: the entry of this thread's next request */
    uint64_t quota;                 /* --requests: this thread's share */
    struct { connection_t *conn; stream_t *stream; } *streams;   /* its connections' streams, in turn */
    size_t n_streams, stream_rr;    /* open loop: the stream that sends next */
    uint32_t closed_total;          /* closed loop: this thread's share of the concurrency */
    size_t rr;                      /* round robin over connections */
    uint64_t rng;                   /* Poisson gaps (common/rng.h) */
    /* buffers, allocated once */
    uint8_t *send_buf;
    size_t recv_cap;                /* the largest reply taken (the arena's bound) */
    arena_t *arena;                 /* each reply is decoded into it */
    Sigserve__V1__Request req;
    Sigserve__V1__InferRequest infer;
    /* read by the main thread while the step runs (the progress line) */
    _Atomic uint64_t pub_sent, pub_measured, pub_answered, pub_errors;
    atomic_int done;
} worker_t;

struct _sigload_t {
    const options_t *opt;
    void *ctx;                      /* libzmq: the sockets' context (NULL with zmtp) */
    worker_t *workers;
    size_t n_workers;
    step_t step;                    /* the running step: written by main between steps */
    pthread_barrier_t start;
    atomic_bool quit, abort;
    float *pool;                    /* n_sets requests of per_request features */
    size_t n_sets, per_request;
    float *expect;                  /* n_sets x out_per_request, or NULL */
    size_t out_per_request;
    size_t stream_step_size;        /* --streams: features of one step */
    uint8_t *echo_payloads;         /* n_sets x echo_len */
    size_t echo_len;
    size_t send_cap;
    int64_t timeout_ns;
    int64_t spin_ns;                /* --spin-us */
};

/* Whose doing a saturated step was (judge.c). */
typedef enum { SAT_NONE, SAT_SERVER, SAT_SIGLOAD, SAT_BOTH } saturated_by_t;

/* One step's merged results. */
typedef struct {
    step_t step;
    counts_t counts;
    histogram_t *total, *server, *network;
    double achieved;
    uint64_t errors;                /* measured errors */
    bool saturated;                 /* past saturation (judge.c's rule): kept off the plots' scale */
    char saturation[256];           /* why, when saturated */
    double p99_limit_us;            /* the p99 above which it would be (--saturation-p99, or the default) */
    bool sender_behind;             /* sigload's own sender fell behind (judge.c's rule) */
    char sender[448];               /* how, and what to do, when it did */
    saturated_by_t saturated_by;    /* SAT_NONE unless saturated */
} result_t;

/* ---- signals.c ---- */

/* Set by SIGINT and SIGTERM once sigload_catch_signals () ran. */
extern volatile sig_atomic_t sigload_interrupted;
void sigload_catch_signals (void);

static inline double sigload_us (int64_t ns) { return (double) ns / 1e3; }

/* ---- options.c ---- */

/* 0 to go on, or the exit code (help or a dry run printed: -1 meaning exit 0). */
int options_parse (int argc, char **argv, options_t *opt);
/* The CPUs in this process's affinity mask (taskset, a cpuset), or the online count. */
unsigned options_affinity_cpus (void);
/* The effective settings (--dry-run), one per line. */
void options_print (FILE *out, const options_t *opt);

/* ---- ready.c ---- */

/* What the server's model list says of a model. */
typedef struct {
    uint32_t in, out;               /* features and outputs per row */
    uint32_t step_size;             /* lstm: features of one step */
    char type[8];                   /* "mlp", "lstm", or "" from an older server */
} model_sizes_t;

/* Replaces each dns://NAME:PORT of EPS by the tcp:// endpoints of the addresses behind NAME that
 * answer (said on stdout). Names are resolved once: a load run measures the fleet it started with.
 * 0, or -1 (said why). */
int ready_expand_dns (const sigload_t *L, bool echo, const char **eps, size_t *n_eps);
/* Waits until each of EPS answers ready (a probe on a socket of its own), then until every
 * connection of SET is up. 0, or -1 (said why). */
int ready_check (sigload_t *L, int set, bool echo, const char *const *eps, size_t n_eps);
/* Asks the server for MODEL's sizes on SOCKET; SERVED gets the names it lists. 0 when it lists it. */
int ready_model_sizes (client_sock_t *socket, const char *model, int timeout_ms, model_sizes_t *sizes, char *served,
                       size_t served_len);

/* ---- procs.c ---- */

/* --processes N (N > 1): forks N - 1 copies before any ZeroMQ context exists; each process (this
 * one too) then carries its share of the rate or concurrency, the connections, the threads and
 * --requests, and sets opt->process. 0, or an exit code. */
int procs_start (options_t *opt);
/* Every process: waits for the others before a step; the step's start time T0 is process 0's (it
 * passes its own), and whether to stop instead (process 0 decides: STOP). Returns the shared T0, or
 * 0 when the sweep ends here. */
int64_t procs_step_begin (const options_t *opt, int64_t t0, bool stop);
/* After a step: the others hand their results to process 0, which merges them into R. */
void procs_step_end (const options_t *opt, result_t *r);
/* Process 0 at the end: waits for the others; their worst exit code. Others: nothing. */
int procs_finish (const options_t *opt);

/* ---- echo.c ---- */

/* Runs the echo server on opt->serve_echo until SIGINT or SIGTERM; the exit code. */
int echo_serve (const options_t *opt);

/* ---- worker.c ---- */

/* A DEALER of --engine with sigload's options (libzmq: no linger, high-water marks of
 * --max-outstanding, in CTX); NULL with errno. */
client_sock_t *connection_socket_new (void *ctx, const options_t *opt);
/* Copies TEXT into DST (ERROR_TEXT bytes) unless DST already holds a text. */
void counts_copy_error (char *dst, const char *text);
/* opt->threads workers, their connection arrays (two sets WITH_FLOOR), histograms and seeds. */
int workers_new (sigload_t *L, bool with_floor);
/* Connects SET's connections to EPS: connection g to endpoint g mod n (or several when fewer). */
int workers_connect (sigload_t *L, int set, const char *const *eps, size_t n_eps);
/* The buffers, arena and request template once the payload sizes are known. */
int workers_buffers (sigload_t *L);
void workers_destroy (sigload_t *L);
/* A worker thread: waits at L->start, runs L->step, sets done; until L->quit. */
void *worker_main (void *arg);

/* ---- judge.c ---- */

/* Judges R as it ended: saturated (and why), the sender behind (and how), saturated by whom.
 * *FIRST_P99_US: the default limit's base, the p99 of the sweep's first step (0 before it: R's own,
 * set there). */
void judge_step (const options_t *opt, double *first_p99_us, result_t *r);
/* The mean send lag, in us, of R's measured requests: sigload's own part, and the part held back
 * by full connections. */
double judge_own_lag_us (const result_t *r);
double judge_held_lag_us (const result_t *r);
/* "-", "server", "sigload" or "sigload+server". */
const char *judge_by_name (saturated_by_t by);
/* US as "850 us", "12.3 ms" or "1.20 s". */
void judge_format_us (double us, char *buf, size_t len);

/* ---- report.c ---- */

/* Sums the workers' histograms and counts of L->step into R. */
void report_merge (const sigload_t *L, result_t *r);
/* Adds one worker's (or one process's) counts C and histograms into R. */
void report_add (result_t *r, const counts_t *c, const histogram_t *total, const histogram_t *server,
                 const histogram_t *network);
/* R's errors and achieved rate from its counts. */
void report_totals (result_t *r);
void report_table_header (FILE *out);
void report_table_row (FILE *out, const result_t *r);
void report_csv_header (FILE *out);
void report_csv_row (FILE *out, const result_t *r);
int report_write_hgrm (const char *dir, const result_t *r);
/* A line for each step that saturated (why, and by whom) or whose sender fell behind (how). */
void report_verdicts (FILE *out, const result_t *results, size_t n);
/* The errors of every step by status, with the first text of each. */
void report_error_details (FILE *out, const result_t *results, size_t n);
/* One progress line on stderr: the phase (warm-up or measuring) and what was sent so far. */
void report_progress (const sigload_t *L, int64_t now);

/* ---- plot.c ---- */

/* Writes opt->out_dir/plots.gp and runs gnuplot on it there; true when it made PNGs, named in MADE. */
bool report_plot (const options_t *opt, const result_t *results, size_t n, char *made, size_t made_len);

#endif
