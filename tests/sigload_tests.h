/* What the sigload suites share: test_sigload.c (load runs and what they report) and
 * test_sigload_options.c (streams, schedules, processes, threads and the command line). The
 * fixture (the real sigserve: CPU backend, the demo model and an LSTM model "seq"), sigload run as
 * a subprocess with the TCase's --engine, summary.csv and .hgrm read back, and the test servers:
 * a ROUTER thread in the test process that answers with status OK but stalls once, or answers with
 * error statuses, or with a wrong request_id, and records what it received (stream ids and step
 * numbers, the connection, the arrival time).
 *
 * Each suite's binary includes it once, after defining _GNU_SOURCE: everything here is static. */
#ifndef SIGSERVE_SIGLOAD_TESTS_H
#define SIGSERVE_SIGLOAD_TESTS_H

#include "lstm_reference.h"
#include "signal.pb-c.h"
#include "testutil.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static char s_dir[4096];
static char s_endpoint[128];
static pid_t s_server = -1;
static const char *s_engine = "zmtp";  /* the TCase's --engine (checked fixture) */

static inline void s_engine_zmtp (void) { s_engine = "zmtp"; }
static inline void s_engine_libzmq (void) { s_engine = "libzmq"; }

/* ---- the fixture: the real sigserve ---- */

static inline void s_setup (void)
{
    char *dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (dir);
    snprintf (s_dir, sizeof s_dir, "%s", dir);
    free (dir);
    int port = tu_free_port ();
    ck_assert_int_gt (port, 0);
    snprintf (s_endpoint, sizeof s_endpoint, "tcp://127.0.0.1:%d", port);
    const char *build = tu_build_dir ();
    /* an LSTM beside the demo model, for --streams: 2 layers, window 8, steps of 8, 16 units */
    char lstm_path[4200], err[512];
    snprintf (lstm_path, sizeof lstm_path, "%s/seq.safetensors", s_dir);
    const lstm_shape_t shape = { .layers = 2, .step_size = 8, .hidden = 16, .out = 1, .window = 8 };
    ck_assert_msg (lstm_random_file (lstm_path, &shape, 5, err, sizeof err) == 0, "%s", err);
    /* max_queue_us 1 s: these suites test the generator, not admission; a stall of this noisy machine
     * (or a sanitized server) must not turn into OVERLOADED replies */
    char json[4096];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"max_message_bytes\": 65536, \"log_level\": \"warn\" },\n"
              "  \"models\": [\n"
              "   { \"name\": \"tick_mlp\", \"backend\": \"cpu\", \"max_rows\": 8, \"max_queue_us\": 1000000,\n"
              "     \"weights\": \"%s%s%s/models/tick_mlp.safetensors\",\n"
              "     \"layers\": [ { \"weight\": \"0.weight\", \"bias\": \"0.bias\", \"activation\": \"relu\" },\n"
              "                 { \"weight\": \"2.weight\", \"bias\": \"2.bias\", \"activation\": \"relu\" },\n"
              "                 { \"weight\": \"4.weight\", \"bias\": \"4.bias\", \"activation\": \"none\" } ] },\n"
              "   { \"name\": \"seq\", \"type\": \"lstm\", \"backend\": \"cpu\", \"weights\": \"seq.safetensors\",\n"
              "     \"lstm\": \"lstm.\", \"window\": 8, \"head\": { \"weight\": \"head.weight\", \"bias\": \"head.bias\" },\n"
              "     \"instances\": 2, \"max_streams\": 64 } ] }\n",
              s_endpoint, build[0] == '/' ? "" : (getenv ("PWD") ? getenv ("PWD") : "."), build[0] == '/' ? "" : "/",
              build);
    char *path = tu_write_file (s_dir, "server.json", json, -1);
    ck_assert_ptr_nonnull (path);
    s_server = tu_server_start (path, s_endpoint, 20000);
    free (path);
    ck_assert_msg (s_server > 0, "sigserve did not become ready");
}

static inline void s_teardown (void)
{
    int rc = tu_server_stop (s_server);
    tu_remove_tree (s_dir);
    ck_assert_int_eq (rc, 0);
}

/* ---- running sigload ---- */

typedef struct {
    int status;         /* exit code, or -1 when it had to be killed */
    char *out, *err;    /* what it printed */
    char dir[4200];     /* its --out folder (when asked for one) */
} run_t;

static inline char *s_slurp (const char *path)
{
    FILE *f = fopen (path, "rb");
    if (!f)
        return strdup ("");
    fseek (f, 0, SEEK_END);
    long n = ftell (f);
    fseek (f, 0, SEEK_SET);
    char *text = malloc ((size_t) n + 1);
    size_t got = fread (text, 1, (size_t) n, f);
    text[got] = 0;
    fclose (f);
    return text;
}

/* Pins the calling process to the first CPU it may run on (what taskset -c N does). */
static inline void s_pin_to_one_cpu (void)
{
    cpu_set_t set, one;
    CPU_ZERO (&one);
    if (sched_getaffinity (0, sizeof set, &set) != 0)
        _exit (125);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET (cpu, &set)) {
            CPU_SET (cpu, &one);
            break;
        }
    if (sched_setaffinity (0, sizeof one, &one) != 0)
        _exit (125);
}

enum { RUN_VERBOSE = 1, RUN_PINNED = 2 };   /* s_sigload_with's flags */

static inline pid_t s_spawn_with (const char *const *args, const char *out_path, const char *err_path, unsigned flags)
{
    char bin[4096];
    snprintf (bin, sizeof bin, "%s/sigload", tu_build_dir ());
    const char *argv[66] = { bin, "--engine", s_engine };
    int n = 3;
    for (; args[n - 3] && n < 65; n++)
        argv[n] = args[n - 3];
    argv[n] = NULL;
    pid_t pid = fork ();
    if (pid == 0) {
        int o = open (out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open (err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0)
            _exit (126);
        dup2 (o, 1);
        dup2 (e, 2);
        if (flags & RUN_PINNED)
            s_pin_to_one_cpu ();
        execv (bin, (char *const *) argv);
        _exit (127);
    }
    return pid;
}

static inline pid_t s_spawn (const char *const *args, const char *out_path, const char *err_path)
{
    return s_spawn_with (args, out_path, err_path, 0);
}

/* Starts sigload with ARGS (NULL-terminated) plus "--out DIR" when NAME is given and "--quiet"
 * unless RUN_VERBOSE; RUN_PINNED runs it on one CPU. Its pid; s_sigload_wait ends the run. */
static inline pid_t s_sigload_start (const char *name, const char *const *args, run_t *run, unsigned flags)
{
    memset (run, 0, sizeof *run);
    const char *all[64];
    int n = 0;
    for (; args[n] && n < 58; n++)
        all[n] = args[n];
    if (name) {
        snprintf (run->dir, sizeof run->dir, "%s/%s", s_dir, name);
        all[n++] = "--out";
        all[n++] = run->dir;
    }
    if (!(flags & RUN_VERBOSE))
        all[n++] = "--quiet";
    all[n] = NULL;
    char out_path[4300], err_path[4300];
    snprintf (out_path, sizeof out_path, "%s/%s.out", s_dir, name ? name : "run");
    snprintf (err_path, sizeof err_path, "%s/%s.err", s_dir, name ? name : "run");
    pid_t pid = s_spawn_with (all, out_path, err_path, flags);
    ck_assert_int_gt (pid, 0);
    return pid;
}

/* Waits up to 60 s for the sigload of s_sigload_start (PID, named NAME) to exit, then reads what
 * it printed into RUN. */
static inline void s_sigload_wait (const char *name, pid_t pid, run_t *run)
{
    char out_path[4300], err_path[4300];
    snprintf (out_path, sizeof out_path, "%s/%s.out", s_dir, name ? name : "run");
    snprintf (err_path, sizeof err_path, "%s/%s.err", s_dir, name ? name : "run");
    int status = 0;
    run->status = -1;
    for (int waited = 0; waited < 60000; waited += 10) {
        if (waitpid (pid, &status, WNOHANG) == pid) {
            run->status = WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
            break;
        }
        usleep (10 * 1000);
    }
    if (run->status == -1) {
        kill (pid, SIGKILL);
        waitpid (pid, NULL, 0);
    }
    run->out = s_slurp (out_path);
    run->err = s_slurp (err_path);
}

/* Runs sigload (s_sigload_start's arguments) and waits for it. */
static inline void s_sigload_with (const char *name, const char *const *args, run_t *run, unsigned flags)
{
    s_sigload_wait (name, s_sigload_start (name, args, run, flags), run);
}

static inline void s_sigload (const char *name, const char *const *args, run_t *run)
{
    s_sigload_with (name, args, run, 0);
}

static inline void s_run_free (run_t *run)
{
    free (run->out);
    free (run->err);
}

#define EXPECT_STATUS(run, code) \
    ck_assert_msg ((run)->status == (code), "sigload exited %d, expected %d\nstdout:\n%s\nstderr:\n%s", \
                   (run)->status, (code), (run)->out, (run)->err)

#define EXPECT_IN(text, fragment) \
    ck_assert_msg (strstr ((text), (fragment)) != NULL, "\"%s\" not found in:\n%s", (fragment), (text))

#define EXPECT_NOT_IN(text, fragment) \
    ck_assert_msg (strstr ((text), (fragment)) == NULL, "\"%s\" found in:\n%s", (fragment), (text))

/* ---- reading summary.csv, .hgrm and plots.gp ---- */

/* The lines of TEXT between "START" and the next "EOD" (a gnuplot data block), as a new string. */
static inline char *s_block (const char *text, const char *start)
{
    const char *from = strstr (text, start);
    ck_assert_msg (from != NULL, "no \"%s\" in:\n%s", start, text);
    from += strlen (start);
    const char *to = strstr (from, "\nEOD\n");
    ck_assert_msg (to != NULL, "data block %s has no end", start);
    return strndup (from, (size_t) (to - from));
}

/* RUN's plots.gp, as a new string. */
static inline char *s_plots (const run_t *run)
{
    char path[4400];
    snprintf (path, sizeof path, "%s/plots.gp", run->dir);
    return s_slurp (path);
}

#define CSV_MAX_COLS 48
#define CSV_MAX_ROWS 16

typedef struct {
    char *text;
    char *cols[CSV_MAX_COLS];
    int n_cols;
    char *rows[CSV_MAX_ROWS][CSV_MAX_COLS];
    int n_rows;
} csv_t;

static inline int s_split (char *line, char **fields)
{
    int n = 0;
    char *field;
    while ((field = strsep (&line, ",")) && n < CSV_MAX_COLS)
        fields[n++] = field;
    return n;
}

static inline void s_csv_read (const run_t *run, csv_t *csv)
{
    char path[4300];
    snprintf (path, sizeof path, "%s/summary.csv", run->dir);
    memset (csv, 0, sizeof *csv);
    csv->text = s_slurp (path);
    char *rest = csv->text, *line = strsep (&rest, "\n");
    ck_assert_msg (line && *line, "%s is empty", path);
    csv->n_cols = s_split (line, csv->cols);
    while ((line = strsep (&rest, "\n")) && *line) {
        ck_assert_int_lt (csv->n_rows, CSV_MAX_ROWS);
        int n = s_split (line, csv->rows[csv->n_rows]);
        ck_assert_msg (n == csv->n_cols, "a row of %d fields under a header of %d", n, csv->n_cols);
        csv->n_rows++;
    }
}

static inline const char *s_csv (const csv_t *csv, int row, const char *col)
{
    ck_assert_int_lt (row, csv->n_rows);
    for (int c = 0; c < csv->n_cols; c++)
        if (strcmp (csv->cols[c], col) == 0)
            return csv->rows[row][c];
    ck_abort_msg ("summary.csv has no column %s", col);
    return NULL;
}

static inline double s_csv_num (const csv_t *csv, int row, const char *col)
{
    const char *text = s_csv (csv, row, col);
    char *end;
    double v = strtod (text, &end);
    ck_assert_msg (end != text && *end == 0, "column %s: \"%s\" is not a number", col, text);
    return v;
}

/* Parses DIR/NAME.hgrm; returns the total count of its footer, and its largest value in *MAX_US. */
static inline long long s_hgrm_check (const run_t *run, const char *name, double *max_us)
{
    char path[4400];
    snprintf (path, sizeof path, "%s/%s.hgrm", run->dir, name);
    char *text = s_slurp (path);
    char *rest = text, *line = strsep (&rest, "\n");
    ck_assert_msg (strcmp (line, "       Value     Percentile TotalCount 1/(1-Percentile)") == 0, "%s: header \"%s\"",
                   path, line);
    line = strsep (&rest, "\n");
    ck_assert_str_eq (line, "");
    long long last_count = 0, footer_count = -1;
    double value = 0, last_p = 0, footer_max = -1, mean, sd;
    int footers = 0;
    while ((line = strsep (&rest, "\n")) && *line) {
        if (line[0] == '#') {
            footers++;
            if (sscanf (line, "#[Max     = %lf, Total count    = %lld]", &footer_max, &footer_count) == 2)
                continue;
            if (sscanf (line, "#[Mean    = %lf, StdDeviation   = %lf]", &mean, &sd) == 2)
                continue;
            ck_assert_msg (strncmp (line, "#[Buckets = ", 12) == 0, "%s: footer \"%s\"", path, line);
            continue;
        }
        double p, inverse;
        long long count;
        int fields = sscanf (line, "%lf %lf %lld %lf", &value, &p, &count, &inverse);
        ck_assert_msg (fields == 4 || (fields == 3 && p == 1.0), "%s: row \"%s\"", path, line);
        ck_assert (count >= last_count);
        last_count = count;
        last_p = p;
    }
    ck_assert_int_eq (footers, 3);
    ck_assert (footer_count == 0 || last_p == 1.0);   /* an empty histogram has no rows */
    ck_assert_int_eq (last_count, footer_count);
    ck_assert_double_eq_tol (value, footer_max, 0.0011);
    if (max_us)
        *max_us = footer_max;
    free (text);
    return footer_count;
}

/* ---- test servers ---- */

#define LOG_MAX 8192

/* One inference as a test server received it. */
typedef struct {
    uint64_t request_id, stream_id, step;
    size_t n_features;
    int conn;                               /* which connection (identity) it came on, from 0 */
    int64_t at_ns;                          /* when (CLOCK_MONOTONIC) */
} received_t;

typedef struct {
    char endpoint[128];
    void *ctx, *socket;
    pthread_t thread;
    atomic_bool stop;
    int stall_at, stall_ms;                 /* stall once, before answering the Nth inference */
    int overloaded_every, deadline_every;   /* answer every Nth inference with that status */
    int errors_from;                        /* ... counting only inferences after this many */
    int overloaded_after;                   /* answer every inference after the Nth OVERLOADED */
    int wrong_id_at;                        /* answer the Nth inference with another id */
    bool lstm;                              /* list "test" as an LSTM: window 4, step_size 8 */
    int infers;                             /* inferences seen */
    /* what it received, read by the test after s_test_server_stop */
    received_t log[LOG_MAX];
    int n_log;
    uint8_t identities[16][64];
    size_t identity_len[16];
    int n_identities;
} test_server_t;

static inline int64_t s_now_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void s_record (test_server_t *ts, zmq_msg_t *identity, const Sigserve__V1__InferRequest *r)
{
    int conn = -1;
    size_t len = zmq_msg_size (identity) < 64 ? zmq_msg_size (identity) : 64;
    for (int i = 0; i < ts->n_identities && conn < 0; i++)
        if (ts->identity_len[i] == len && memcmp (ts->identities[i], zmq_msg_data (identity), len) == 0)
            conn = i;
    if (conn < 0 && ts->n_identities < 16) {
        conn = ts->n_identities++;
        memcpy (ts->identities[conn], zmq_msg_data (identity), len);
        ts->identity_len[conn] = len;
    }
    if (ts->n_log < LOG_MAX)
        ts->log[ts->n_log++] = (received_t) { .request_id = r->request_id, .stream_id = r->stream_id, .step = r->step,
                                              .n_features = r->n_features, .conn = conn, .at_ns = s_now_ns () };
}

static inline void s_answer (test_server_t *ts, zmq_msg_t *identity, const Sigserve__V1__Request *req)
{
    Sigserve__V1__Reply reply = SIGSERVE__V1__REPLY__INIT;
    Sigserve__V1__InferReply infer = SIGSERVE__V1__INFER_REPLY__INIT;
    Sigserve__V1__HealthReply health = SIGSERVE__V1__HEALTH_REPLY__INIT;
    Sigserve__V1__ListModelsReply list = SIGSERVE__V1__LIST_MODELS_REPLY__INIT;
    Sigserve__V1__ModelInfo info = SIGSERVE__V1__MODEL_INFO__INIT;
    Sigserve__V1__ModelInfo *infos[1] = { &info };
    float output = 0;
    if (req->body_case == SIGSERVE__V1__REQUEST__BODY_HEALTH) {
        reply.body_case = SIGSERVE__V1__REPLY__BODY_HEALTH;
        reply.health = &health;
        health.live = health.ready = 1;
        health.version = (char *) "test";
    } else if (req->body_case == SIGSERVE__V1__REQUEST__BODY_LIST_MODELS) {
        reply.body_case = SIGSERVE__V1__REPLY__BODY_LIST_MODELS;
        reply.list_models = &list;
        info.name = (char *) "test";
        info.input_size = ts->lstm ? 32 : 8;
        info.output_size = 1;
        info.type = (char *) (ts->lstm ? "lstm" : "mlp");
        info.window = ts->lstm ? 4 : 0;
        info.step_size = ts->lstm ? 8 : 0;
        info.max_rows = 16;
        info.available = 1;
        list.n_models = 1;
        list.models = infos;
    } else {
        int n = ++ts->infers;
        s_record (ts, identity, req->infer);
        int counted = n - ts->errors_from;
        if (n == ts->stall_at)
            usleep ((useconds_t) ts->stall_ms * 1000);
        reply.body_case = SIGSERVE__V1__REPLY__BODY_INFER;
        reply.infer = &infer;
        infer.request_id = req->infer->request_id + (n == ts->wrong_id_at ? 1000000 : 0);
        if ((ts->overloaded_every && counted > 0 && counted % ts->overloaded_every == 0)
            || (ts->overloaded_after && n > ts->overloaded_after)) {
            infer.status = SIGSERVE__V1__STATUS__STATUS_OVERLOADED;
            infer.error = (char *) "queue full";
        } else if (ts->deadline_every && n % ts->deadline_every == 0) {
            infer.status = SIGSERVE__V1__STATUS__STATUS_DEADLINE_EXCEEDED;
            infer.error = (char *) "deadline_us: too late";
        } else {
            for (size_t i = 0; i < req->infer->n_features; i++)
                output += req->infer->features[i];
            infer.outputs = &output;
            infer.n_outputs = 1;
            infer.rows = 1;
        }
        infer.server_ns = 1000;
        infer.compute_ns = 500;
    }
    uint8_t buf[1024];
    size_t len = sigserve__v1__reply__pack (&reply, buf);
    zmq_msg_send (identity, ts->socket, ZMQ_SNDMORE);
    zmq_send (ts->socket, buf, len, 0);
}

static inline void *s_test_server_run (void *arg)
{
    test_server_t *ts = arg;
    zmq_pollitem_t item = { .socket = ts->socket, .events = ZMQ_POLLIN };
    uint8_t buf[65536];
    while (!atomic_load (&ts->stop)) {
        if (zmq_poll (&item, 1, 20) <= 0)
            continue;
        for (;;) {
            zmq_msg_t identity;
            zmq_msg_init (&identity);
            if (zmq_msg_recv (&identity, ts->socket, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close (&identity);
                break;
            }
            int n = zmq_recv (ts->socket, buf, sizeof buf, 0);
            Sigserve__V1__Request *req = n > 0 ? sigserve__v1__request__unpack (NULL, (size_t) n, buf) : NULL;
            if (req)
                s_answer (ts, &identity, req);
            if (req)
                sigserve__v1__request__free_unpacked (req, NULL);
            zmq_msg_close (&identity);
        }
    }
    return NULL;
}

/* Starts TS (its knobs set by the caller) on a free port. */
static inline void s_test_server_start (test_server_t *ts)
{
    int port = tu_free_port ();
    ck_assert_int_gt (port, 0);
    snprintf (ts->endpoint, sizeof ts->endpoint, "tcp://127.0.0.1:%d", port);
    ts->ctx = zmq_ctx_new ();
    ts->socket = zmq_socket (ts->ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt (ts->socket, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq (zmq_bind (ts->socket, ts->endpoint), 0);
    atomic_store (&ts->stop, false);
    ck_assert_int_eq (pthread_create (&ts->thread, NULL, s_test_server_run, ts), 0);
}

static inline void s_test_server_stop (test_server_t *ts)
{
    atomic_store (&ts->stop, true);
    pthread_join (ts->thread, NULL);
    zmq_close (ts->socket);
    zmq_ctx_term (ts->ctx);
}

/* ---- the TCases ---- */

/* The TCase of engine E (0: zmtp, 1: libzmq): the real sigserve started once for it (unchecked
 * fixture), the engine set before each case (checked fixture), 60 s a case. */
static inline TCase *s_engine_tcase (size_t e)
{
    static const struct { const char *name; void (*engine) (void); } engines[] = {
        { "sigload, zmtp", s_engine_zmtp }, { "sigload, libzmq", s_engine_libzmq },
    };
    TCase *tc = tcase_create (engines[e].name);
    tcase_add_unchecked_fixture (tc, s_setup, s_teardown);
    tcase_add_checked_fixture (tc, engines[e].engine, NULL);
    tcase_set_timeout (tc, 60);
    return tc;
}

#endif
