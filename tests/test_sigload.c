/* sigload, run as a subprocess the way a user runs it, against (a) the real sigserve started by
 * the fixture (CPU backend, the demo model and an LSTM model "seq") and (b) test servers written
 * here: a ROUTER thread in the test process that answers with status OK but stalls once, or
 * answers with error statuses, or with a wrong request_id, and records what it received (stream
 * ids and step numbers, the connection, the arrival time) for the --streams and --schedule tests.
 *
 * What is asserted is what a user reads: the summary CSV (one row per step), the .hgrm files,
 * the markdown table, plots.gp, the progress line, the settings --dry-run prints, and the exit
 * code. Timing assertions are limited to what a loaded 2-core machine holds: pacing at 2000
 * requests/s, and a 200 ms stall that is 100x the normal latency.
 *
 * Every case runs once per engine (a TCase each): every sigload the suite starts, --serve-echo
 * included, is given --engine (a case's own --engine, later on the line, wins). */
#define _GNU_SOURCE
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

static void s_engine_zmtp (void) { s_engine = "zmtp"; }
static void s_engine_libzmq (void) { s_engine = "libzmq"; }

/* ---- the fixture: the real sigserve ---- */

static void s_setup (void)
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
    char json[4096];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"max_message_bytes\": 65536, \"log_level\": \"warn\" },\n"
              "  \"models\": [\n"
              "   { \"name\": \"tick_mlp\", \"backend\": \"cpu\", \"max_rows\": 8,\n"
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

static void s_teardown (void)
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

static char *s_slurp (const char *path)
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
static void s_pin_to_one_cpu (void)
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

static pid_t s_spawn_with (const char *const *args, const char *out_path, const char *err_path, unsigned flags)
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

static pid_t s_spawn (const char *const *args, const char *out_path, const char *err_path)
{
    return s_spawn_with (args, out_path, err_path, 0);
}

/* Runs sigload with ARGS (NULL-terminated) plus "--out DIR" when NAME is given and "--quiet"
 * unless RUN_VERBOSE; RUN_PINNED runs it on one CPU. Waits up to 60 s. */
static void s_sigload_with (const char *name, const char *const *args, run_t *run, unsigned flags)
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

static void s_sigload (const char *name, const char *const *args, run_t *run)
{
    s_sigload_with (name, args, run, 0);
}

static void s_run_free (run_t *run)
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

/* Today's date in UTC, as the plots' titles write it. */
static void s_utc_date (char *buf, size_t len)
{
    time_t now = time (NULL);
    struct tm tm;
    gmtime_r (&now, &tm);
    strftime (buf, len, "%Y-%m-%d", &tm);
}

/* The lines of TEXT between "START" and the next "EOD" (a gnuplot data block), as a new string. */
static char *s_block (const char *text, const char *start)
{
    const char *from = strstr (text, start);
    ck_assert_msg (from != NULL, "no \"%s\" in:\n%s", start, text);
    from += strlen (start);
    const char *to = strstr (from, "\nEOD\n");
    ck_assert_msg (to != NULL, "data block %s has no end", start);
    return strndup (from, (size_t) (to - from));
}

/* ---- reading summary.csv and .hgrm ---- */

#define CSV_MAX_COLS 32
#define CSV_MAX_ROWS 16

typedef struct {
    char *text;
    char *cols[CSV_MAX_COLS];
    int n_cols;
    char *rows[CSV_MAX_ROWS][CSV_MAX_COLS];
    int n_rows;
} csv_t;

static int s_split (char *line, char **fields)
{
    int n = 0;
    char *field;
    while ((field = strsep (&line, ",")) && n < CSV_MAX_COLS)
        fields[n++] = field;
    return n;
}

static void s_csv_read (const run_t *run, csv_t *csv)
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

static const char *s_csv (const csv_t *csv, int row, const char *col)
{
    ck_assert_int_lt (row, csv->n_rows);
    for (int c = 0; c < csv->n_cols; c++)
        if (strcmp (csv->cols[c], col) == 0)
            return csv->rows[row][c];
    ck_abort_msg ("summary.csv has no column %s", col);
    return NULL;
}

static double s_csv_num (const csv_t *csv, int row, const char *col)
{
    const char *text = s_csv (csv, row, col);
    char *end;
    double v = strtod (text, &end);
    ck_assert_msg (end != text && *end == 0, "column %s: \"%s\" is not a number", col, text);
    return v;
}

/* Parses DIR/NAME.hgrm; returns the total count of its footer, and its largest value in *MAX_US. */
static long long s_hgrm_check (const run_t *run, const char *name, double *max_us)
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

static int64_t s_now_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void s_record (test_server_t *ts, zmq_msg_t *identity, const Sigserve__V1__InferRequest *r)
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

static void s_answer (test_server_t *ts, zmq_msg_t *identity, const Sigserve__V1__Request *req)
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

static void *s_test_server_run (void *arg)
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
static void s_test_server_start (test_server_t *ts)
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

static void s_test_server_stop (test_server_t *ts)
{
    atomic_store (&ts->stop, true);
    pthread_join (ts->thread, NULL);
    zmq_close (ts->socket);
    zmq_ctx_term (ts->ctx);
}

/* ---- against sigserve ---- */

START_TEST (open_loop_paces_within_1_percent)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--rate", "2000", "--duration", "3",
                           "--warmup", "0.5", NULL };
    s_sigload ("pacing", args, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "| open-2000 | open loop | 2000/s |");
    EXPECT_IN (run.out, "from each request's scheduled send time");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 1);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "open-2000");
    ck_assert_str_eq (s_csv (&csv, 0, "kind"), "sigserve");
    ck_assert_str_eq (s_csv (&csv, 0, "mode"), "open");
    ck_assert_double_eq (s_csv_num (&csv, 0, "target"), 2000);
    double achieved = s_csv_num (&csv, 0, "achieved_rps");
    printf ("pacing: target 2000/s, achieved %.1f/s, send lag mean %.1f us\n", achieved,
            s_csv_num (&csv, 0, "send_lag_mean_us"));
    ck_assert_msg (fabs (achieved - 2000) <= 20, "achieved %.1f requests/s for a target of 2000", achieved);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 6000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 6000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "errors"), 0);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "");
    /* the engine: the last column, and a line above the table */
    ck_assert_str_eq (s_csv (&csv, 0, "engine"), s_engine);
    ck_assert_str_eq (csv.cols[csv.n_cols - 1], "engine");
    char engine_line[64];
    snprintf (engine_line, sizeof engine_line, "\nEngine: %s, for every step (", s_engine);
    EXPECT_IN (run.out, engine_line);
    /* the split: a real server time, and latency percentiles in order */
    ck_assert_double_gt (s_csv_num (&csv, 0, "server_mean_us"), 0);
    ck_assert_double_gt (s_csv_num (&csv, 0, "network_mean_us"), 0);
    double p50 = s_csv_num (&csv, 0, "p50_us"), p99 = s_csv_num (&csv, 0, "p99_us");
    ck_assert (p50 > 0 && p50 <= p99 && p99 <= s_csv_num (&csv, 0, "p999_us")
               && s_csv_num (&csv, 0, "p999_us") <= s_csv_num (&csv, 0, "max_us"));
    double max_us;
    ck_assert_int_eq (s_hgrm_check (&run, "open-2000", &max_us), 6000);
    ck_assert_double_eq_tol (max_us, s_csv_num (&csv, 0, "max_us"), 0.0011);
    char path[4400];
    snprintf (path, sizeof path, "%s/plots.gp", run.dir);
    ck_assert_int_eq (access (path, R_OK), 0);
    if (access ("/usr/bin/gnuplot", X_OK) == 0) {
        snprintf (path, sizeof path, "%s/percentiles.png", run.dir);
        ck_assert_int_eq (access (path, R_OK), 0);
        snprintf (path, sizeof path, "%s/latency_vs_throughput.png", run.dir);
        ck_assert_int_eq (access (path, R_OK), 0);
    }
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (closed_loop_is_labelled_and_splits_server_time)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--concurrency", "1,4", "--requests",
                           "2000", "--warmup", "0.2", NULL };
    s_sigload ("closed", args, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "| closed-1 | closed loop | 1 outstanding |");
    EXPECT_IN (run.out, "| closed-4 | closed loop | 4 outstanding |");
    EXPECT_IN (run.out, "closed loop, from each request's actual send");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 2);
    for (int r = 0; r < 2; r++) {
        ck_assert_str_eq (s_csv (&csv, r, "mode"), "closed");
        ck_assert_double_eq (s_csv_num (&csv, r, "target"), r == 0 ? 1 : 4);
        ck_assert_double_eq (s_csv_num (&csv, r, "requests"), 2000);
        ck_assert_double_eq (s_csv_num (&csv, r, "ok"), 2000);
        ck_assert_double_gt (s_csv_num (&csv, r, "achieved_rps"), 100);
        /* closed loop: total = network + server for every request, so for the means too */
        double server = s_csv_num (&csv, r, "server_mean_us"), network = s_csv_num (&csv, r, "network_mean_us");
        ck_assert_double_gt (server, 0);
        ck_assert_double_gt (network, 0);
        ck_assert_double_eq_tol (s_csv_num (&csv, r, "mean_us"), server + network, 0.01);
        ck_assert_double_eq (s_csv_num (&csv, r, "send_lag_mean_us"), 0);
    }
    ck_assert_int_eq (s_hgrm_check (&run, "closed-1", NULL), 2000);
    ck_assert_int_eq (s_hgrm_check (&run, "closed-4", NULL), 2000);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (unknown_model_counted_by_status)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "nope", "--concurrency", "2", "--requests", "300",
                           "--warmup", "0", NULL };
    s_sigload ("unknown", args, &run);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.err, "does not list model \"nope\" (served: tick_mlp, seq)");
    EXPECT_IN (run.out, "| 300 (STATUS_UNKNOWN_MODEL 300) |");
    EXPECT_IN (run.out, "closed-2: 300 x STATUS_UNKNOWN_MODEL, first: model: \"nope\" is not served here (served: tick_mlp, seq)");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 300);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 0);
    ck_assert_double_eq (s_csv_num (&csv, 0, "errors"), 300);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "STATUS_UNKNOWN_MODEL:300");
    ck_assert_int_eq (s_hgrm_check (&run, "closed-2", NULL), 0);   /* no successful request: an empty histogram */
    free (csv.text);
    s_run_free (&run);
}
END_TEST

/* --model a,b: request k goes to model k mod 2, so half of them find no model. */
START_TEST (several_models_take_turns)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp,nope", "--concurrency", "1", "--requests",
                           "300", "--warmup", "0", NULL };
    s_sigload ("models", args, &run);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.err, "does not list model \"nope\" (served: tick_mlp, seq)\n");
    EXPECT_IN (run.out, "| 150 (STATUS_UNKNOWN_MODEL 150) |");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 300);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 150);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "STATUS_UNKNOWN_MODEL:150");
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (echo_floor_in_the_same_run)
{
    int port = tu_free_port ();
    char echo[128], out_path[4300], err_path[4300];
    snprintf (echo, sizeof echo, "tcp://127.0.0.1:%d", port);
    snprintf (out_path, sizeof out_path, "%s/echo-server.out", s_dir);
    snprintf (err_path, sizeof err_path, "%s/echo-server.err", s_dir);
    const char *serve[] = { "--serve-echo", echo, NULL };
    pid_t pid = s_spawn (serve, out_path, err_path);
    ck_assert_int_gt (pid, 0);

    run_t run;
    char date_before[32];
    s_utc_date (date_before, sizeof date_before);
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--floor", echo, "--rate", "1000",
                           "--duration", "1", "--warmup", "0.2", NULL };
    s_sigload ("floor", args, &run);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 2);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "echo-open-1000");
    ck_assert_str_eq (s_csv (&csv, 0, "kind"), "echo");
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "server_mean_us"), 0);
    ck_assert_str_eq (s_csv (&csv, 0, "engine"), s_engine);
    ck_assert_str_eq (s_csv (&csv, 1, "step"), "open-1000");
    ck_assert_str_eq (s_csv (&csv, 1, "kind"), "sigserve");
    ck_assert_str_eq (s_csv (&csv, 1, "engine"), s_engine);
    ck_assert_double_eq (s_csv_num (&csv, 1, "ok"), 1000);
    ck_assert_int_eq (s_hgrm_check (&run, "echo-open-1000", NULL), 1000);
    ck_assert_int_eq (s_hgrm_check (&run, "open-1000", NULL), 1000);
    /* the plots: titles name the host, the model, the connections and the date; the floor is a
     * dashed baseline at its p50 and p99, not a point series */
    char path[4400], host[256] = "", date_after[32];
    snprintf (path, sizeof path, "%s/plots.gp", run.dir);
    char *gp = s_slurp (path);
    ck_assert_int_eq (gethostname (host, sizeof host), 0);
    s_utc_date (date_after, sizeof date_after);
    EXPECT_IN (gp, "set title \"sigload on ");
    EXPECT_IN (gp, host);
    EXPECT_IN (gp, "model tick_mlp, 1 connection, ");
    ck_assert_msg (strstr (gp, date_before) || strstr (gp, date_after), "no date %s in:\n%s", date_after, gp);
    EXPECT_IN (gp, "with lines dt 2 lw 2 lc rgb 'gray30' title 'echo floor p50 (");
    EXPECT_IN (gp, "with lines dt 2 lw 1 lc rgb 'gray50' title 'echo floor p99 (");
    EXPECT_IN (gp, "'echo-open-1000.hgrm' using 4:1 with lines lw 2 dt 2");
    EXPECT_NOT_IN (gp, "$echo_open");
    char *block = s_block (gp, "$sigserve_open << EOD\n");
    EXPECT_IN (block, " open-1000");
    free (block);
    free (gp);
    if (access ("/usr/bin/gnuplot", X_OK) == 0) {
        snprintf (path, sizeof path, "%s/latency_vs_throughput.png", run.dir);
        ck_assert_int_eq (access (path, R_OK), 0);
        EXPECT_IN (run.out, "percentiles.png, latency_vs_throughput.png");
    }
    free (csv.text);
    s_run_free (&run);

    /* --echo: every step against the echo server */
    const char *echo_args[] = { "--endpoint", echo, "--echo", "--concurrency", "2", "--requests", "1000",
                                "--warmup", "0", "--connections", "2", NULL };
    s_sigload ("echo", echo_args, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "| echo-closed-2 | closed loop | 2 outstanding |");
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "kind"), "echo");
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 1000);
    free (csv.text);
    s_run_free (&run);

    /* the other engine's client against this engine's echo server: both speak ZeroMQ */
    const char *other = strcmp (s_engine, "zmtp") == 0 ? "libzmq" : "zmtp";
    const char *cross_args[] = { "--endpoint", echo, "--echo", "--rate", "1000", "--requests", "500", "--warmup", "0",
                                 "--engine", other, NULL };
    s_sigload ("echo-cross", cross_args, &run);
    EXPECT_STATUS (&run, 0);
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "engine"), other);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 500);
    free (csv.text);
    s_run_free (&run);

    kill (pid, SIGTERM);
    int status = 0;
    ck_assert_int_eq (waitpid (pid, &status, 0), pid);
    ck_assert (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    char *err = s_slurp (err_path);
    EXPECT_IN (err, "echo server stopping: ");
    free (err);
}
END_TEST

/* ---- against test servers ---- */

START_TEST (coordinated_omission_open_shows_stall_closed_hides_it)
{
    /* Open loop, 1000/s for 3 s after 0.5 s of warm-up: the server stalls 200 ms at the 1500th
     * inference (1 s into the measurement). The ~200 requests scheduled during the stall wait
     * 200 ms down to 0 ms: p99.9 (the 3rd worst of 3000) is close to 200 ms. */
    test_server_t ts = { .stall_at = 1500, .stall_ms = 200 };
    s_test_server_start (&ts);
    run_t run;
    const char *open_args[] = { "--endpoint", ts.endpoint, "--model", "test", "--rate", "1000", "--duration", "3",
                                "--warmup", "0.5", NULL };
    s_sigload ("stall-open", open_args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 3000);
    double open_p999 = s_csv_num (&csv, 0, "p999_us"), open_p50 = s_csv_num (&csv, 0, "p50_us");
    printf ("stall of 200 ms, open loop 1000/s: p50 %.0f us, p99 %.0f us, p99.9 %.0f us\n", open_p50,
            s_csv_num (&csv, 0, "p99_us"), open_p999);
    ck_assert_msg (open_p999 >= 150000, "open loop p99.9 %.0f us: the 200 ms stall does not show", open_p999);
    ck_assert_msg (s_csv_num (&csv, 0, "p99_us") >= 100000, "open loop p99 %.0f us", s_csv_num (&csv, 0, "p99_us"));
    ck_assert_msg (open_p50 < 20000, "open loop p50 %.0f us", open_p50);
    free (csv.text);
    s_run_free (&run);

    /* Closed loop, one request at a time: the stall delays one request; the ones that would have
     * been sent meanwhile simply are not. 1 sample in 20,000: p99.9 does not see it, max does. */
    test_server_t tc = { .stall_at = 2000, .stall_ms = 200 };
    s_test_server_start (&tc);
    const char *closed_args[] = { "--endpoint", tc.endpoint, "--model", "test", "--concurrency", "1", "--requests",
                                  "20000", "--warmup", "0", NULL };
    s_sigload ("stall-closed", closed_args, &run);
    s_test_server_stop (&tc);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "| closed-1 | closed loop |");
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 20000);
    double closed_p999 = s_csv_num (&csv, 0, "p999_us"), closed_max = s_csv_num (&csv, 0, "max_us");
    printf ("stall of 200 ms, closed loop concurrency 1: p50 %.0f us, p99.9 %.0f us, max %.0f us\n",
            s_csv_num (&csv, 0, "p50_us"), closed_p999, closed_max);
    ck_assert_msg (closed_p999 < 50000, "closed loop p99.9 %.0f us: expected the stall to hide", closed_p999);
    ck_assert_msg (closed_max >= 190000, "closed loop max %.0f us: the stalled request itself", closed_max);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (error_statuses_counted_by_status)
{
    /* every 10th inference OVERLOADED (100 of 1000), every other 25th DEADLINE_EXCEEDED (20) */
    test_server_t ts = { .overloaded_every = 10, .deadline_every = 25 };
    s_test_server_start (&ts);
    run_t run;
    const char *args[] = { "--endpoint", ts.endpoint, "--model", "test", "--concurrency", "1", "--requests", "1000",
                           "--warmup", "0", NULL };
    s_sigload ("statuses", args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.out, "| 120 (STATUS_OVERLOADED 100, STATUS_DEADLINE_EXCEEDED 20) |");
    EXPECT_IN (run.out, "closed-1: 100 x STATUS_OVERLOADED, first: queue full");
    EXPECT_IN (run.out, "closed-1: 20 x STATUS_DEADLINE_EXCEEDED, first: deadline_us: too late");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 880);
    ck_assert_double_eq (s_csv_num (&csv, 0, "errors"), 120);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "STATUS_OVERLOADED:100;STATUS_DEADLINE_EXCEEDED:20");
    ck_assert_int_eq (s_hgrm_check (&run, "closed-1", NULL), 880);
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (wrong_request_id_is_unmatched_and_times_out)
{
    test_server_t ts = { .wrong_id_at = 5 };
    s_test_server_start (&ts);
    run_t run;
    const char *args[] = { "--endpoint", ts.endpoint, "--model", "test", "--concurrency", "1", "--requests", "50",
                           "--warmup", "0", "--timeout", "300", NULL };
    s_sigload ("unmatched", args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 1);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 49);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "TIMEOUT:1;UNMATCHED_ID:1");
    EXPECT_IN (run.out, "1 x UNMATCHED_ID");
    free (csv.text);
    s_run_free (&run);
}
END_TEST

START_TEST (outputs_checked_against_expected_file)
{
    /* the test server answers the sum of the features */
    char *features = tu_write_file (s_dir, "features.txt",
                                    "# three requests of 8 features\n"
                                    "1 2 3 4 5 6 7 8\n"
                                    "0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5\n"
                                    "-1 1 -1 1 -1 1 -1 1\n", -1);
    char *good = tu_write_file (s_dir, "good.txt", "36\n4\n0\n", -1);
    char *bad = tu_write_file (s_dir, "bad.txt", "36\n4\n1\n", -1);
    ck_assert (features && good && bad);
    test_server_t ts = { 0 };
    s_test_server_start (&ts);
    run_t run;
    const char *args[] = { "--endpoint", ts.endpoint, "--model", "test", "--concurrency", "1", "--requests", "300",
                           "--warmup", "0", "--features", features, "--expect", good, NULL };
    s_sigload ("expect-good", args, &run);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 300);
    free (csv.text);
    s_run_free (&run);
    /* the third request's expected output is wrong: a third of the replies mismatch */
    args[13] = bad;
    s_sigload ("expect-bad", args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 1);
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 200);
    ck_assert_str_eq (s_csv (&csv, 0, "errors_by_status"), "OUTPUT_MISMATCH:100");
    /* which request and output, what was expected, what came, and the tolerance */
    EXPECT_IN (run.out, "closed-1: 100 x OUTPUT_MISMATCH, first: request 3 of --features, output 0: expected 1, got 0 "
                        "(tolerance 0.0001 x max(1, |expected|))\n");
    free (csv.text);
    s_run_free (&run);
    free (features);
    free (good);
    free (bad);
}
END_TEST

START_TEST (saturated_steps_stay_off_the_plot_scale)
{
    /* closed-1 gets 200 OK replies; every inference after that is OVERLOADED, so closed-2 is
     * saturated (errors). Without --stop-when-saturated the sweep goes on; the plot keeps
     * closed-2's latencies out of its points and marks it with a vertical line. */
    test_server_t ts = { .overloaded_after = 200 };
    s_test_server_start (&ts);
    run_t run;
    const char *args[] = { "--endpoint", ts.endpoint, "--model", "test", "--concurrency", "1,2", "--requests", "200",
                           "--warmup", "0", NULL };
    s_sigload ("saturated", args, &run);
    s_test_server_stop (&ts);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.out, "| closed-2 | closed loop | 2 outstanding |");
    EXPECT_IN (run.out, "closed-2: 200 x STATUS_OVERLOADED");
    char path[4400];
    snprintf (path, sizeof path, "%s/plots.gp", run.dir);
    char *gp = s_slurp (path);
    EXPECT_IN (gp, "model test, 1 connection, ");
    char *block = s_block (gp, "$sigserve_closed << EOD\n");
    EXPECT_IN (block, " closed-1");
    EXPECT_NOT_IN (block, "closed-2");
    free (block);
    EXPECT_IN (gp, "# saturated: closed-2 (200 errors)");
    EXPECT_IN (gp, "set label \"saturated: closed-2\"");
    EXPECT_IN (gp, "nohead dt 3");
    /* closed-2 had no OK reply: no percentile curve, and no floor in this run */
    EXPECT_IN (gp, "'closed-1.hgrm' using 4:1");
    EXPECT_NOT_IN (gp, "'closed-2.hgrm'");
    EXPECT_NOT_IN (gp, "echo floor");
    free (gp);
    s_run_free (&run);
}
END_TEST

/* ---- LSTM streams and schedules ---- */

/* Asserts that LOG holds N_STREAMS streams (ids BASE...) of STEPS steps each, every stream on one
 * connection, its steps 1..STEPS in arrival order; stream k on the connection of stream k mod C. */
static void s_expect_streams (const test_server_t *ts, uint64_t base, int n_streams, int steps, int connections)
{
    int next[64] = { 0 }, conn_of[64];
    for (int k = 0; k < n_streams; k++)
        conn_of[k] = -1;
    for (int i = 0; i < ts->n_log; i++) {
        const received_t *r = &ts->log[i];
        ck_assert_msg (r->stream_id >= base && r->stream_id < base + (uint64_t) n_streams, "stream_id %llu",
                       (unsigned long long) r->stream_id);
        int k = (int) (r->stream_id - base);
        ck_assert_msg (conn_of[k] == -1 || conn_of[k] == r->conn, "stream %llu came on two connections",
                       (unsigned long long) r->stream_id);
        conn_of[k] = r->conn;
        ck_assert_msg (r->step == (uint64_t) ++next[k], "stream %llu: step %llu arrived where %d was due",
                       (unsigned long long) r->stream_id, (unsigned long long) r->step, next[k]);
        ck_assert_uint_eq (r->n_features, 8);     /* one step of the model's step_size */
    }
    for (int k = 0; k < n_streams; k++) {
        ck_assert_int_eq (next[k], steps);
        ck_assert_int_eq (conn_of[k], conn_of[k % connections]);
        if (k < connections && k > 0)
            ck_assert_int_ne (conn_of[k], conn_of[0]);
    }
}

START_TEST (streams_send_each_streams_steps_in_order_on_one_connection)
{
    /* open loop: 4 streams over 2 connections (2 threads), 200 requests: 50 steps a stream */
    test_server_t *ts = calloc (1, sizeof *ts);
    ts->lstm = true;
    s_test_server_start (ts);
    run_t run;
    const char *open_args[] = { "--endpoint", ts->endpoint, "--model", "test", "--streams", "4", "--connections", "2",
                                "--rate", "2000", "--requests", "200", "--warmup", "0", NULL };
    s_sigload ("streams-open", open_args, &run);
    s_test_server_stop (ts);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "Streams: 4 (ids 1 to 4), stream k on connection k mod 2, steps of 8 features numbered from 1");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 200);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 200);
    free (csv.text);
    s_run_free (&run);
    ck_assert_int_eq (ts->n_log, 200);
    ck_assert_int_eq (ts->n_identities, 2);
    s_expect_streams (ts, 1, 4, 50, 2);

    /* closed loop, ids from --stream-base, numbering carried across the warm-up: 3 streams on one
     * connection, 2 outstanding */
    memset (ts, 0, sizeof *ts);
    ts->lstm = true;
    s_test_server_start (ts);
    const char *closed_args[] = { "--endpoint", ts->endpoint, "--model", "test", "--streams", "3", "--stream-base",
                                  "1000", "--concurrency", "2", "--requests", "90", "--warmup", "0", NULL };
    s_sigload ("streams-closed", closed_args, &run);
    s_test_server_stop (ts);
    EXPECT_STATUS (&run, 0);
    ck_assert_int_eq (ts->n_log, 90);
    s_expect_streams (ts, 1000, 3, 30, 1);
    s_run_free (&run);
    free (ts);
}
END_TEST

START_TEST (streams_against_an_lstm_model)
{
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "seq", "--streams", "4", "--connections", "2",
                           "--rate", "1000", "--duration", "1", "--warmup", "0.2", NULL };
    s_sigload ("streams-seq", args, &run);
    EXPECT_STATUS (&run, 0);
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "errors"), 0);
    free (csv.text);
    s_run_free (&run);
    /* a model that keeps no streams */
    const char *mlp[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--streams", "2", "--concurrency", "1",
                          "--requests", "10", NULL };
    s_sigload (NULL, mlp, &run);
    EXPECT_STATUS (&run, 1);
    EXPECT_IN (run.err, "--streams: model \"tick_mlp\" is of type mlp; only lstm models keep streams");
    s_run_free (&run);
}
END_TEST

START_TEST (schedule_sends_at_the_listed_offsets)
{
    char *good = tu_write_file (s_dir, "schedule.txt",
                                "# offsets in microseconds from the start\n"
                                "0\n"
                                "0   # two at once\n"
                                "\n"
                                "1000\n"
                                "2000.5\n"
                                "300000\n", -1);
    test_server_t *ts = calloc (1, sizeof *ts);
    s_test_server_start (ts);
    run_t run;
    const char *args[] = { "--endpoint", ts->endpoint, "--model", "test", "--schedule", good, NULL };
    int64_t launched = s_now_ns ();
    s_sigload ("schedule", args, &run);
    s_test_server_stop (ts);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "Schedule: 5 requests from ");
    EXPECT_IN (run.out, "| schedule | open loop | schedule (");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "schedule");
    ck_assert_double_eq (s_csv_num (&csv, 0, "requests"), 5);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 5);
    ck_assert_int_eq (s_hgrm_check (&run, "schedule", NULL), 5);
    /* sent in the file's order; the last not before its offset (sigload never sends early) */
    ck_assert_int_eq (ts->n_log, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_uint_eq (ts->log[i].request_id & ((UINT64_C (1) << 40) - 1), (uint64_t) i + 1);
    ck_assert_msg (ts->log[4].at_ns - launched >= 300000000LL, "the request listed at 300 ms arrived after %.1f ms",
                   (double) (ts->log[4].at_ns - launched) / 1e6);
    free (csv.text);
    s_run_free (&run);
    free (ts);

    /* --dry-run says what it would send */
    const char *dry[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--schedule", good, "--dry-run", NULL };
    s_sigload (NULL, dry, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "load: open loop, send times from --schedule\n");
    EXPECT_IN (run.out, "schedule: 5 requests from ");
    EXPECT_IN (run.out, ", the last at 300.000 ms\n");
    s_run_free (&run);

    /* errors name the file and the line */
    static const struct { const char *name, *text, *message; } bad[] = {
        { "not-a-number.txt", "0\n# fine\n10\nabc\n", "not-a-number.txt:4: expected an offset in microseconds from 0 to "
                                                     "86400000000 (one a line), got \"abc\"" },
        { "negative.txt", "-5\n", "negative.txt:1: expected an offset in microseconds" },
        { "two-on-a-line.txt", "0\n10 20\n", "two-on-a-line.txt:2: expected an offset in microseconds" },
        { "decreasing.txt", "0\n2000\n1000\n", "decreasing.txt:3: 1000 us comes before the line above's 2000 us: "
                                               "offsets are absolute (microseconds from the start), not intervals" },
        { "empty.txt", "# nothing\n\n", "empty.txt: no offsets" },
        { "missing/none.txt", NULL, "--schedule: cannot open " },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *path = bad[i].text ? tu_write_file (s_dir, bad[i].name, bad[i].text, -1) : NULL;
        if (!path && asprintf (&path, "%s/%s", s_dir, bad[i].name) < 0)
            ck_abort ();
        const char *a[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--schedule", path, NULL };
        s_sigload (NULL, a, &run);
        EXPECT_STATUS (&run, 2);
        EXPECT_IN (run.err, bad[i].message);
        s_run_free (&run);
        free (path);
    }
    free (good);
}
END_TEST

START_TEST (the_knee_is_plotted_and_marked_saturated)
{
    /* closed-1: 200 OK; closed-2 and closed-3: every other reply OVERLOADED, so both saturated
     * (errors) with OK replies. closed-2 is the knee: a point marked "saturated"; closed-3 is past
     * it: a vertical line, off the latency scale. */
    test_server_t *ts = calloc (1, sizeof *ts);
    ts->overloaded_every = 2;
    ts->errors_from = 200;
    s_test_server_start (ts);
    run_t run;
    const char *args[] = { "--endpoint", ts->endpoint, "--model", "test", "--concurrency", "1,2,3", "--requests", "200",
                           "--warmup", "0", NULL };
    s_sigload ("knee", args, &run);
    s_test_server_stop (ts);
    free (ts);
    EXPECT_STATUS (&run, 1);
    char path[4400];
    snprintf (path, sizeof path, "%s/plots.gp", run.dir);
    char *gp = s_slurp (path);
    char *block = s_block (gp, "$sigserve_closed << EOD\n");
    EXPECT_IN (block, " closed-1\n");
    EXPECT_IN (block, " closed-2");
    EXPECT_NOT_IN (block, "closed-3");
    free (block);
    EXPECT_IN (gp, "# knee: closed-2 (100 errors), the first saturated step of sigserve closed loop\n");
    EXPECT_IN (gp, "set label \"saturated: closed-2\" at first ");
    EXPECT_IN (gp, "# saturated: closed-3 (100 errors)");
    EXPECT_IN (gp, "set label \"saturated: closed-3, p99 ");
    EXPECT_NOT_IN (gp, "# saturated: closed-2");
    EXPECT_IN (gp, "'closed-2.hgrm' using 4:1 with lines lw 2 title 'closed-2 (saturated)'");
    free (gp);
    s_run_free (&run);
}
END_TEST

START_TEST (default_threads_follow_the_affinity_mask)
{
    /* --dry-run prints the effective settings without connecting: nobody listens on port 1 */
    run_t run;
    const char *args[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--rate", "1k,2k", "--connections", "4",
                           "--dry-run", NULL };
    s_sigload_with (NULL, args, &run, RUN_PINNED);   /* as under taskset -c N */
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "threads: 1 (default: the smaller of 4 connection(s) and 1 CPU(s) in the affinity mask)");
    EXPECT_IN (run.out, "connections: 4\n");
    EXPECT_IN (run.out, "steps: 1000/s, 2000/s\n");
    s_run_free (&run);

    /* unpinned: this process's CPUs, at most one thread per connection */
    cpu_set_t set;
    ck_assert_int_eq (sched_getaffinity (0, sizeof set, &set), 0);
    int cpus = CPU_COUNT (&set);
    char expect[128];
    snprintf (expect, sizeof expect, "threads: %d (default: the smaller of 4 connection(s) and %d CPU(s)",
              cpus < 4 ? cpus : 4, cpus);
    s_sigload (NULL, args, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, expect);
    s_run_free (&run);

    const char *given[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--connections", "4", "--threads", "3",
                            "--dry-run", NULL };
    s_sigload_with (NULL, given, &run, RUN_PINNED);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "threads: 3 (--threads)");
    s_run_free (&run);

    /* a real run says the same in its header */
    const char *real[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--concurrency", "4", "--requests", "200",
                           "--warmup", "0", "--connections", "4", NULL };
    s_sigload_with (NULL, real, &run, RUN_PINNED);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "4 connection(s), 1 thread(s)");
    s_run_free (&run);
}
END_TEST

START_TEST (progress_counts_warmup_apart)
{
    /* one progress line a second: at about 1 s the warm-up (2 s) runs, at about 3 s the measured
     * part (2 s) does. Only the phases and their totals are asserted, not when the lines came. */
    run_t run;
    const char *args[] = { "--endpoint", s_endpoint, "--model", "tick_mlp", "--rate", "500", "--warmup", "2",
                           "--duration", "2", NULL };
    s_sigload_with (NULL, args, &run, RUN_VERBOSE);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.err, "sigload: open-500: warm-up ");
    EXPECT_IN (run.err, "/2.0 s, ");
    EXPECT_IN (run.err, "sigload: open-500: measuring ");
    EXPECT_IN (run.err, " answered, 0 errors\n");
    s_run_free (&run);
}
END_TEST

/* --processes: the load from several processes, one table: every step's counts are the sum of
 * theirs (exact with --requests), the target the whole load's, the histograms merged. */
START_TEST (processes_merge_into_one_table)
{
    int port = tu_free_port ();
    char echo[128], out_path[4300], err_path[4300];
    snprintf (echo, sizeof echo, "tcp://127.0.0.1:%d", port);
    snprintf (out_path, sizeof out_path, "%s/echo-procs.out", s_dir);
    snprintf (err_path, sizeof err_path, "%s/echo-procs.err", s_dir);
    const char *serve[] = { "--serve-echo", echo, NULL };
    pid_t pid = s_spawn (serve, out_path, err_path);
    ck_assert_int_gt (pid, 0);
    run_t run;
    const char *open_args[] = { "--endpoint", echo, "--echo", "--processes", "2", "--connections", "3", "--rate",
                                "1000,2000", "--requests", "1001", "--warmup", "0.1", NULL };
    s_sigload_with ("procs-open", open_args, &run, RUN_VERBOSE);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "in each of 2 processes (1/2 of the load each)");
    csv_t csv;
    s_csv_read (&run, &csv);
    ck_assert_int_eq (csv.n_rows, 2);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "echo-open-1000");
    ck_assert_double_eq (s_csv_num (&csv, 0, "target"), 1000);
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 1001);     /* 501 + 500 */
    ck_assert_str_eq (s_csv (&csv, 1, "step"), "echo-open-2000");
    ck_assert_double_eq (s_csv_num (&csv, 1, "ok"), 1001);
    ck_assert_int_eq (s_hgrm_check (&run, "echo-open-2000", NULL), 1001);
    free (csv.text);
    s_run_free (&run);
    const char *closed_args[] = { "--endpoint", echo, "--echo", "--processes", "3", "--connections", "3",
                                  "--concurrency", "7", "--requests", "3001", "--warmup", "0", NULL };
    s_sigload ("procs-closed", closed_args, &run);
    EXPECT_STATUS (&run, 0);
    s_csv_read (&run, &csv);
    ck_assert_str_eq (s_csv (&csv, 0, "step"), "echo-closed-7");
    ck_assert_double_eq (s_csv_num (&csv, 0, "ok"), 3001);
    free (csv.text);
    s_run_free (&run);
    kill (pid, SIGTERM);
    int status = 0;
    ck_assert_int_eq (waitpid (pid, &status, 0), pid);
}
END_TEST

/* --engine: a bad value is a usage error naming the accepted values; --dry-run and --help say it. */
START_TEST (engine_option)
{
    run_t run;
    const char *bad[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--engine", "zeromq", NULL };
    s_sigload (NULL, bad, &run);
    EXPECT_STATUS (&run, 2);
    EXPECT_IN (run.err, "sigload: --engine: expected zmtp or libzmq, got \"zeromq\"\n");
    EXPECT_IN (run.err, "sigload --help");
    s_run_free (&run);
    const char *serve_bad[] = { "--serve-echo", "tcp://127.0.0.1:1", "--engine", "", NULL };
    s_sigload (NULL, serve_bad, &run);
    EXPECT_STATUS (&run, 2);
    EXPECT_IN (run.err, "sigload: --engine: expected zmtp or libzmq, got \"\"\n");
    s_run_free (&run);
    const char *dry[] = { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--dry-run", NULL };
    s_sigload (NULL, dry, &run);
    EXPECT_STATUS (&run, 0);
    char line[64];
    snprintf (line, sizeof line, "\nengine: %s\n", s_engine);
    EXPECT_IN (run.out, line);
    if (strcmp (s_engine, "libzmq") == 0)
        EXPECT_IN (run.out, "\nio threads: 1\n");
    else
        EXPECT_NOT_IN (run.out, "io threads");
    s_run_free (&run);
    const char *help[] = { "--help", NULL };
    s_sigload (NULL, help, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "[--engine zmtp|libzmq]");
    EXPECT_IN (run.out, "  --engine E ");
    s_run_free (&run);
}
END_TEST

START_TEST (usage_errors_exit_2)
{
    static const char *const cases[][12] = {
        { NULL },
        { "--model", "m", "--rate", "100", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--rate", "100", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--rate", "100", "--concurrency", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--rate", "fast", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--concurrency", "1.5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--threads", "4", "--connections", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--duration", "1", "--requests", "10", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--arrivals", "bursty", "--rate", "5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--no-such-option", NULL },
        { "--serve-echo", "tcp://127.0.0.1:1", "--dry-run", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "a,b", "--expect", "x", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", ",", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--curve-server", "x", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--curve-server", "/nonexistent/s",
          "--curve-client", "/nonexistent/c_secret", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--streams", "0", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--streams", "2", "--connections", "3", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--streams", "2", "--rows", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "a,b", "--streams", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--streams", "2", "--expect", "x", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--stream-base", "5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--schedule", "x", "--rate", "5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--schedule", "x", "--requests", "5", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--processes", "2", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--processes", "17", "--connections", "17", NULL },
        { "--endpoint", "tcp://127.0.0.1:1", "--model", "m", "--processes", "2", "--connections", "2", "--streams",
          "2", NULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_t run;
        s_sigload (NULL, cases[i], &run);
        EXPECT_STATUS (&run, 2);
        EXPECT_IN (run.err, "sigload --help");
        s_run_free (&run);
    }
    run_t run;
    const char *help[] = { "--help", NULL };
    s_sigload (NULL, help, &run);
    EXPECT_STATUS (&run, 0);
    EXPECT_IN (run.out, "coordinated omission");
    EXPECT_IN (run.out, "--serve-echo E");
    EXPECT_IN (run.out, "affinity mask");
    EXPECT_IN (run.out, "--streams N");
    EXPECT_IN (run.out, "--schedule FILE");
    EXPECT_IN (run.out, "perf_analyzer's --request-intervals");
    s_run_free (&run);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("sigload");
    static const struct { const char *name; void (*engine) (void); } engines[] = {
        { "sigload, zmtp", s_engine_zmtp }, { "sigload, libzmq", s_engine_libzmq },
    };
    for (size_t e = 0; e < 2; e++) {
        TCase *tc = tcase_create (engines[e].name);
        tcase_add_unchecked_fixture (tc, s_setup, s_teardown);
        tcase_add_checked_fixture (tc, engines[e].engine, NULL);
        tcase_set_timeout (tc, 60);
        tcase_add_test (tc, open_loop_paces_within_1_percent);
        tcase_add_test (tc, closed_loop_is_labelled_and_splits_server_time);
        tcase_add_test (tc, unknown_model_counted_by_status);
        tcase_add_test (tc, several_models_take_turns);
        tcase_add_test (tc, echo_floor_in_the_same_run);
        tcase_add_test (tc, coordinated_omission_open_shows_stall_closed_hides_it);
        tcase_add_test (tc, error_statuses_counted_by_status);
        tcase_add_test (tc, wrong_request_id_is_unmatched_and_times_out);
        tcase_add_test (tc, outputs_checked_against_expected_file);
        tcase_add_test (tc, saturated_steps_stay_off_the_plot_scale);
        tcase_add_test (tc, streams_send_each_streams_steps_in_order_on_one_connection);
        tcase_add_test (tc, streams_against_an_lstm_model);
        tcase_add_test (tc, schedule_sends_at_the_listed_offsets);
        tcase_add_test (tc, the_knee_is_plotted_and_marked_saturated);
        tcase_add_test (tc, default_threads_follow_the_affinity_mask);
        tcase_add_test (tc, progress_counts_warmup_apart);
        tcase_add_test (tc, usage_errors_exit_2);
        tcase_add_test (tc, processes_merge_into_one_table);
        tcase_add_test (tc, engine_option);
        suite_add_tcase (s, tc);
    }
    return tu_run_suite (s);
}
