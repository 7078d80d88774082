/* What the device-process suites share: test_device_processes.c (a device process answering, lost
 * and started again) and test_device_processes_persistent.c (a persistent model in a device process,
 * run inline through its mailbox). sigserve-test started with a config written here (and, where
 * asked, CPU models placed in a device process, or the persistent kernel's mailbox emulated),
 * HTTP (metrics, /models, /debug/fault), its log, its device processes, and the load loop: requests
 * over the socket, a window at a time, every one answered exactly once, outputs against the float64
 * reference, a fault posted part way.
 *
 * Each suite's binary includes it once, after defining _GNU_SOURCE: everything here is static. */
#ifndef SIGSERVE_DEVICE_PROCESSES_TESTS_H
#define SIGSERVE_DEVICE_PROCESSES_TESTS_H

#include "testutil.h"
#include "tolerance.h"

#include "backends/backends.h"
#include "signal.pb-c.h"
#include "weights/weights.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define OUTSTANDING 32
#define REPLY_WAIT_MS 20000     /* a reply later than this is a lost request (sanitizer builds included) */

typedef struct {
    char dir[2048];
    char config[2200], log[2200];
    char endpoint[64], endpoint2[64];   /* endpoint2: with s_two_fronts */
    int http_port;
    pid_t pid;
    void *ctx;
    weights_t *tick;
} server_t;

static char s_tick_path[4096];
static bool s_two_fronts;               /* s_start: two endpoints, a front each */
static const char *s_server_extra = "";    /* s_start: more keys of "server" (", \"inline_us\": 10000") */
static bool s_mailbox;                  /* s_start: SIGSERVE_TEST_MAILBOX=1 (tests/mailbox_backend.c) */

/* ------------------------------------------------------------------------------------- helpers */

/* One HTTP request; the status (0: no answer) and the body into BODY. */
static inline int s_http (int port, const char *method, const char *path, char *body, size_t cap)
{
    body[0] = '\0';
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = { .tv_sec = 20 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    if (fd < 0 || connect (fd, (struct sockaddr *) &a, sizeof a) != 0) {
        if (fd >= 0)
            close (fd);
        return 0;
    }
    char req[512];
    int n = snprintf (req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                      method, path);
    send (fd, req, (size_t) n, MSG_NOSIGNAL);
    static char buf[1 << 20];
    size_t len = 0;
    ssize_t got;
    while (len + 1 < sizeof buf && (got = recv (fd, buf + len, sizeof buf - len - 1, 0)) > 0)
        len += (size_t) got;
    close (fd);
    buf[len] = '\0';
    int status = 0;
    sscanf (buf, "HTTP/1.%*d %d", &status);
    const char *b = strstr (buf, "\r\n\r\n");
    snprintf (body, cap, "%s", b ? b + 4 : "");
    return status;
}

/* The value of the metric line that starts with NAME ("name{labels}"), or -1. */
static inline double s_metric (server_t *s, const char *name)
{
    static char body[1 << 20];
    if (s_http (s->http_port, "GET", "/metrics", body, sizeof body) != 200)
        return -1;
    size_t n = strlen (name);
    for (const char *l = body; l && *l; l = strchr (l, '\n') ? strchr (l, '\n') + 1 : NULL)
        if (strncmp (l, name, n) == 0 && l[n] == ' ')
            return atof (l + n + 1);
    return -1;
}

static inline bool s_log_has (server_t *s, const char *text)
{
    FILE *f = fopen (s->log, "r");
    if (!f)
        return false;
    static char line[8192];
    bool found = false;
    while (!found && fgets (line, sizeof line, f))
        found = strstr (line, text) != NULL;
    fclose (f);
    return found;
}

/* The line number (1-based) of the Nth (0-based) line of the log holding TEXT, or 0. */
static inline int s_log_line (server_t *s, const char *text, int nth)
{
    FILE *f = fopen (s->log, "r");
    if (!f)
        return 0;
    static char line[8192];
    int at = 0, found = 0;
    for (int no = 1; !found && fgets (line, sizeof line, f); no++)
        if (strstr (line, text) && nth-- == 0)
            found = at = no;
    fclose (f);
    return at;
}

/* Waits until the metric line NAME reads VALUE; false past TIMEOUT_MS. */
static inline bool s_wait_metric (server_t *s, const char *name, double value, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        if (s_metric (s, name) == value)
            return true;
        usleep (20 * 1000);
    }
    return false;
}

/* Waits until /readyz answers 200 and every instance of /models is serving. */
static inline bool s_wait_serving (server_t *s, int timeout_ms)
{
    static char body[1 << 16];
    for (int waited = 0; waited < timeout_ms; waited += 50) {
        if (s_http (s->http_port, "GET", "/readyz", body, sizeof body) == 200
            && s_http (s->http_port, "GET", "/models", body, sizeof body) == 200 && strstr (body, "\"state\"")
            && !strstr (body, "\"available\":false"))
            return true;
        usleep (50 * 1000);
    }
    return false;
}

/* MODELS: the JSON objects of the models list (each with "weights" set by the caller). */
static inline void s_start (server_t *s, const char *models, bool cpu_in_device_process)
{
    memset (s, 0, sizeof *s);
    char *dir = tu_tmpdir ();
    snprintf (s->dir, sizeof s->dir, "%s", dir);
    free (dir);
    int port = tu_free_port ();
    s->http_port = tu_free_port ();
    snprintf (s->endpoint, sizeof s->endpoint, "tcp://127.0.0.1:%d", port);
    char endpoints[160];
    if (s_two_fronts) {
        snprintf (s->endpoint2, sizeof s->endpoint2, "tcp://127.0.0.1:%d", tu_free_port ());
        snprintf (endpoints, sizeof endpoints, "\"%s\", \"%s\"], \"fronts\": 2", s->endpoint, s->endpoint2);
    } else
        snprintf (endpoints, sizeof endpoints, "\"%s\"]", s->endpoint);
    char json[24576];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [%s, \"http\": \"127.0.0.1:%d\", \"drain_ms\": 5000%s },\n"
              "  \"models\": [ %s ] }\n", endpoints, s->http_port, s_server_extra, models);
    char *path = tu_write_file (s->dir, "sigserve.json", json, -1);
    snprintf (s->config, sizeof s->config, "%s", path);
    free (path);
    snprintf (s->log, sizeof s->log, "%s/server.log", s->dir);
    char bin[4096];
    snprintf (bin, sizeof bin, "%s/sigserve-test", tu_build_abs ());
    s->pid = fork ();
    ck_assert_int_ge (s->pid, 0);
    if (s->pid == 0) {
        if (!freopen (s->log, "w", stderr))
            _exit (126);
        if (s_mailbox)
            setenv ("SIGSERVE_TEST_MAILBOX", "1", 1);
        if (cpu_in_device_process)
            execl (bin, bin, "--config", s->config, "--log-level", "info", "--test-cpu-device-process", (char *) NULL);
        else
            execl (bin, bin, "--config", s->config, "--log-level", "info", (char *) NULL);
        _exit (127);
    }
    ck_assert_msg (s_wait_serving (s, 120000), "the server did not become ready (log: %s)", s->log);
    s->ctx = zmq_ctx_new ();
    char err[256];
    model_config_t mc = { 0 };
    snprintf (mc.weights, sizeof mc.weights, "%s", s_tick_path);
    mc.layer_count = 3;
    const char *names[3][2] = { { "0.weight", "0.bias" }, { "2.weight", "2.bias" }, { "4.weight", "4.bias" } };
    const activation_t acts[3] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    for (int l = 0; l < 3; l++) {
        snprintf (mc.layers[l].weight, sizeof mc.layers[l].weight, "%s", names[l][0]);
        snprintf (mc.layers[l].bias, sizeof mc.layers[l].bias, "%s", names[l][1]);
        mc.layers[l].activation = acts[l];
    }
    s->tick = weights_load (&mc, err, sizeof err);
    ck_assert_msg (s->tick != NULL, "%s", err);
}

/* The exit status of the server after SIGTERM. */
static inline int s_stop (server_t *s)
{
    weights_destroy (&s->tick);
    if (s->ctx)
        zmq_ctx_term (s->ctx);
    s->ctx = NULL;
    return tu_server_stop (s->pid);
}

/* The pid of the last device process the log says was started for DEVICE ("cpu (test)", "0"). */
static inline pid_t s_device_pid (server_t *s, const char *device)
{
    FILE *f = fopen (s->log, "r");
    pid_t pid = 0;
    char line[8192], want[64];
    snprintf (want, sizeof want, "device %s: process ", device);
    while (f && fgets (line, sizeof line, f)) {
        const char *p = strstr (line, want);
        if (p && strstr (line, " started"))
            pid = (pid_t) atoi (p + strlen (want));
    }
    if (f)
        fclose (f);
    return pid;
}

/* The next reply on SOCK (within REPLY_WAIT_MS), unpacked: an infer reply of a request below TOTAL not
 * answered before (SEEN counts each). The caller frees it. */
static inline Sigserve__V1__Reply *s_infer_reply (void *sock, uint8_t *seen, uint32_t total)
{
    zmq_msg_t msg;
    zmq_msg_init (&msg);
    ck_assert_msg (zmq_msg_recv (&msg, sock, 0) >= 0, "a request was not answered within %d ms", REPLY_WAIT_MS);
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, zmq_msg_size (&msg), zmq_msg_data (&msg));
    zmq_msg_close (&msg);
    ck_assert (r && r->body_case == SIGSERVE__V1__REPLY__BODY_INFER);
    ck_assert_uint_lt (r->infer->request_id, total);
    ck_assert_msg (seen[r->infer->request_id]++ == 0, "request %llu answered twice",
                   (unsigned long long) r->infer->request_id);
    return r;
}

static inline bool s_gone_now (pid_t pid)
{
    char path[64], state = 0;
    snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
    FILE *f = fopen (path, "r");
    if (!f)
        return true;
    if (fscanf (f, "%*d (%*[^)]) %c", &state) != 1)
        state = 0;
    fclose (f);
    return state == 'Z' || state == 'X';
}

/* Whether process PID is gone (or a zombie) within 10 s: a lost device process is let go of before it
 * ends (its GPU context's tear-down, tens of ms; 0.37 s after a trap on an H100), and the model may
 * serve again before that. A live process (a spare) stays, and takes the 10 s to say so. */
static inline bool s_gone (pid_t pid)
{
    for (int waited = 0; waited < 10000; waited += 10) {
        if (s_gone_now (pid))
            return true;
        usleep (10 * 1000);
    }
    return false;
}

/* What process PID costs: its resident memory in MiB (/proc; -1 when gone) and, where nvidia-smi
 * answers, the GPU memory it holds in MiB (-1: unknown). For the standby's cost, printed. */
static inline void s_process_cost (pid_t pid, double *rss_mib, double *gpu_mib)
{
    char path[64], line[256];
    *rss_mib = *gpu_mib = -1;
    snprintf (path, sizeof path, "/proc/%d/status", (int) pid);
    FILE *f = fopen (path, "r");
    while (f && fgets (line, sizeof line, f))
        if (strncmp (line, "VmRSS:", 6) == 0)
            *rss_mib = atof (line + 6) / 1024.0;
    if (f)
        fclose (f);
    FILE *p = popen ("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null", "r");
    while (p && fgets (line, sizeof line, p)) {
        int who = 0;
        double mib = 0;
        if (sscanf (line, "%d, %lf", &who, &mib) == 2 && who == (int) pid)
            *gpu_mib = mib;
    }
    if (p)
        pclose (p);
}

/* Whether PID has a /dev/nvidia* file open: a process that initialised CUDA holds /dev/nvidiactl. */
static inline bool s_holds_nvidia (pid_t pid)
{
    char dir[64], link[96], target[256];
    snprintf (dir, sizeof dir, "/proc/%d/fd", (int) pid);
    bool found = false;
    for (int fd = 0; fd < 4096 && !found; fd++) {
        snprintf (link, sizeof link, "%s/%d", dir, fd);
        ssize_t n = readlink (link, target, sizeof target - 1);
        if (n > 0) {
            target[n] = 0;
            found = strncmp (target, "/dev/nvidia", 11) == 0;
        }
    }
    return found;
}

static inline void s_random (float *f, size_t n, unsigned *seed)
{
    for (size_t i = 0; i < n; i++)
        f[i] = (float) rand_r (seed) / (float) RAND_MAX * 2.0f - 1.0f;
}

/* ------------------------------------------------------------------------------- the load loop */

typedef struct {
    const char *models[2];          /* requests alternate between them (one: always it) */
    size_t model_count;
    uint32_t total;
    uint32_t fault_after;           /* replies before FAULT is posted (0: never) */
    const char *fault;              /* "device=cpu&kind=kill" */
    bool check_outputs;             /* every OK reply against the float64 reference */
    uint32_t inputs, outputs;       /* a request's features and a reply's outputs (0: tick_mlp's, 512 and 1) */
    uint32_t window;                /* requests in flight at most (0: OUTSTANDING) */
    bool both_fronts;               /* requests alternate between endpoint and endpoint2 (s_two_fronts) */
    uint32_t pace_us;               /* after the fault: open loop, a request every PACE_US whatever the replies */
    /* results */
    uint32_t ok[2], unavailable[2], other;
    uint32_t unavailable_lost, unavailable_admission;
    uint32_t unavailable_no_rerun;  /* of unavailable_lost: saying why it was not re-run on another instance */
    uint32_t ok_after_fault[2];
    uint32_t fallback[2];           /* of ok: computed by the model's CPU fallback ("cpu (fallback)") */
    double fault_at_ms;             /* CLOCK_MONOTONIC ms when the fault was posted */
    char first_other[512];
} load_t;

static inline double s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static inline void *s_dealer (server_t *s, const char *endpoint)
{
    void *sock = zmq_socket (s->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt (sock, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq (zmq_connect (sock, endpoint), 0);
    return sock;
}

/* Sends L->total requests, L->window (OUTSTANDING) at a time, and checks every one is answered
 * exactly once. */
static inline void s_load (server_t *s, load_t *l)
{
    const int socks = l->both_fronts ? 2 : 1;
    void *sock[2] = { s_dealer (s, s->endpoint), l->both_fronts ? s_dealer (s, s->endpoint2) : NULL };
    const uint32_t window = l->window ? l->window : OUTSTANDING;
    uint8_t *seen = calloc (l->total, 1);
    float *sent = calloc ((size_t) l->total * 512, sizeof (float));
    uint32_t next = 0, received = 0;
    bool faulted = false;
    unsigned seed = 7;
    static uint8_t buf[1 << 16];
    double next_at = 0;
    while (received < l->total) {
        const bool paced = faulted && l->pace_us;
        while (next < l->total && (paced ? s_now_ms () >= next_at : next - received < window)) {
            float *f = sent + (size_t) next * 512;
            s_random (f, 512, &seed);
            size_t len = tu_pack_infer (buf, sizeof buf, l->models[next % l->model_count], f, l->inputs ? l->inputs : 512,
                                        1, next, 0);
            ck_assert_int_eq (zmq_send (sock[next % socks], buf, len, 0), (int) len);
            next++;
            next_at += paced ? l->pace_us / 1e3 : 0;
        }
        zmq_pollitem_t items[2] = { { sock[0], 0, ZMQ_POLLIN, 0 }, { sock[1], 0, ZMQ_POLLIN, 0 } };
        const bool sending = paced && next < l->total;
        const int ready = zmq_poll (items, socks, sending ? 1 : REPLY_WAIT_MS);
        if (ready == 0 && sending)
            continue;       /* the next paced request is due */
        ck_assert_msg (ready > 0, "a request was not answered within %d ms (%u of %u answered)", REPLY_WAIT_MS, received,
                       l->total);
        zmq_msg_t msg;
        zmq_msg_init (&msg);
        ck_assert_int_ge (zmq_msg_recv (&msg, sock[items[0].revents & ZMQ_POLLIN ? 0 : 1], 0), 0);
        Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, zmq_msg_size (&msg), zmq_msg_data (&msg));
        zmq_msg_close (&msg);
        ck_assert (r && r->body_case == SIGSERVE__V1__REPLY__BODY_INFER);
        const Sigserve__V1__InferReply *rep = r->infer;
        ck_assert_uint_lt (rep->request_id, l->total);
        ck_assert_msg (seen[rep->request_id] == 0, "request %llu answered twice", (unsigned long long) rep->request_id);
        seen[rep->request_id] = 1;
        const size_t which = rep->request_id % l->model_count;
        if (rep->status == SIGSERVE__V1__STATUS__STATUS_OK) {
            l->ok[which]++;
            l->ok_after_fault[which] += faulted;
            ck_assert_uint_eq (rep->n_outputs, l->outputs ? l->outputs : 1);
            /* what computed it: the model's backend (a re-run one included), or its CPU fallback */
            ck_assert_msg (strcmp (rep->backend, "cpu") == 0 || strcmp (rep->backend, "cuda") == 0
                           || strcmp (rep->backend, "cpu (fallback)") == 0, "backend \"%s\"", rep->backend);
            l->fallback[which] += strcmp (rep->backend, "cpu (fallback)") == 0;
            if (l->check_outputs) {
                double ref, bound;
                ck_assert_int_eq (tol_mlp (s->tick, sent + rep->request_id * 512, 1, &ref, &bound), 0);
                TOL_ASSERT (rep->outputs, &ref, &bound, 1, 1, "request %llu of model %s",
                            (unsigned long long) rep->request_id, l->models[which]);
            }
        } else if (rep->status == SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE) {
            l->unavailable[which]++;
            /* refused at admission (no instance could take it), else held by the instance that was lost:
             * answered by the front for the lost process, or by its worker before the process went */
            if (strstr (rep->error, "is unavailable on backend"))
                l->unavailable_admission++;
            else if ((strstr (rep->error, "device process lost") && strstr (rep->error, "the request was not answered by it"))
                     || strstr (rep->error, "is unavailable on instance") || strstr (rep->error, "launch failure")) {
                l->unavailable_lost++;
                l->unavailable_no_rerun += strstr (rep->error, "re-run") != NULL;
            } else
                ck_abort_msg ("UNAVAILABLE with an unexpected message: %s", rep->error);
        } else {
            if (!l->other)
                snprintf (l->first_other, sizeof l->first_other, "status %d: %s", rep->status, rep->error);
            l->other++;
        }
        sigserve__v1__reply__free_unpacked (r, NULL);
        received++;
        if (l->fault && !faulted && received == l->fault_after) {
            char body[512], path[256];
            snprintf (path, sizeof path, "/debug/fault?%s", l->fault);
            int st = s_http (s->http_port, "POST", path, body, sizeof body);
            ck_assert_msg (st == 200, "POST %s: %d %s", path, st, body);
            l->fault_at_ms = next_at = s_now_ms ();
            faulted = true;
        }
    }
    for (uint32_t i = 0; i < l->total; i++)
        ck_assert_msg (seen[i] == 1, "request %u never answered", i);
    ck_assert_msg (l->other == 0, "%u replies neither OK nor UNAVAILABLE, the first: %s", l->other, l->first_other);
    free (seen);
    free (sent);
    for (int k = 0; k < socks; k++)
        zmq_close (sock[k]);
}

static char s_models[20000];

static inline const char *s_model (const char *name, const char *extra)
{
    static char m[3][8192];
    static int k;
    k = (k + 1) % 3;
    snprintf (m[k], sizeof m[k],
              "{ \"name\": \"%s\", \"weights\": \"%s\", \"max_rows\": 8, \"max_queue_us\": 60000000, %s "
              "\"layers\": [ { \"weight\": \"0.weight\", \"bias\": \"0.bias\", \"activation\": \"relu\" }, "
              "{ \"weight\": \"2.weight\", \"bias\": \"2.bias\", \"activation\": \"relu\" }, "
              "{ \"weight\": \"4.weight\", \"bias\": \"4.bias\", \"activation\": \"none\" } ] }",
              name, s_tick_path, extra);
    return m[k];
}

/* The GPUs here (0 without a GPU backend). */
static inline int s_gpus (void)
{
    int count = 0;
    char why[768];
    const gpu_backend_t *gpu = backends_gpu (why, sizeof why);
    if (!gpu || gpu->device_count (&count, why, sizeof why) != 0)
        return 0;
    return count;
}

/* Every case of a suite runs in a TCase of its kind, "cpu" or "gpu" (the GPU cases skip themselves,
 * saying why, where there is no GPU), 300 s a case. */
static inline TCase *s_tcase (const char *kind)
{
    TCase *tc = tcase_create (kind);
    tcase_set_timeout (tc, 300);
    return tc;
}

/* Runs SUITE with the demo model's weights at their absolute path (the server is started from a
 * folder of its own). */
static inline int s_main (Suite *suite)
{
    snprintf (s_tick_path, sizeof s_tick_path, "%s/models/tick_mlp.safetensors", tu_build_abs ());
    return tu_run_suite (suite);
}

#endif
