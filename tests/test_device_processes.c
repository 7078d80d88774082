/* Device processes (server.gpu_processes, serving/devices.h), over the socket, with sigserve-test
 * (the build with the test hooks: POST /debug/fault, and CPU models placed in a device process so
 * the machinery runs on a host without a GPU):
 *   - a model served from a device process answers like one served by the server's own threads;
 *   - its process killed under load: every request answered exactly once (OK, or UNAVAILABLE
 *     naming the lost process), the process started again, the model serving again, counted;
 *   - SIGTERM with requests in a device process: every one answered, the process gone;
 * and on GPU hosts (skipped elsewhere, saying why):
 *   - a trap on GPU 0: the CPU model beside it answers OK throughout, the GPU model comes back;
 *   - a launch that hangs past watchdog_ms: the device process killed and started again, the same;
 *   - two GPUs, a trap on GPU 1: GPU 0's instance keeps answering OK, GPU 1's comes back and
 *     serves again;
 *   - a persistent MLP in a device process run by the front through its mailbox in the shared
 *     region (on the GPU, and in CI on the CPU with the kernel's mailbox emulated by sigserve-test): one request at a time, every one inline (counted) with outputs in bound; two fronts,
 *     one running requests inline while the other hands them to the worker, both publishing into
 *     the same mailbox: every request answered once, in bound; a trap while the front waits on
 *     the mailbox: that request answered UNAVAILABLE once, the process started again, inline again. */
#define _GNU_SOURCE
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
static int s_http (int port, const char *method, const char *path, char *body, size_t cap)
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
static double s_metric (server_t *s, const char *name)
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

static bool s_log_has (server_t *s, const char *text)
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

/* Waits until /readyz answers 200 and every instance of /models is serving. */
static bool s_wait_serving (server_t *s, int timeout_ms)
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
static void s_start (server_t *s, const char *models, bool cpu_in_device_process)
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
static int s_stop (server_t *s)
{
    weights_destroy (&s->tick);
    if (s->ctx)
        zmq_ctx_term (s->ctx);
    s->ctx = NULL;
    return tu_server_stop (s->pid);
}

/* The pid of the last device process the log says was started for DEVICE ("cpu (test)", "0"). */
static pid_t s_device_pid (server_t *s, const char *device)
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

static bool s_gone (pid_t pid)
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

/* Whether PID has a /dev/nvidia* file open: a process that initialised CUDA holds /dev/nvidiactl. */
static bool s_holds_nvidia (pid_t pid)
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

static void s_random (float *f, size_t n, unsigned *seed)
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
    /* results */
    uint32_t ok[2], unavailable[2], other;
    uint32_t unavailable_lost, unavailable_admission;
    uint32_t ok_after_fault[2];
    char first_other[512];
} load_t;

static void *s_dealer (server_t *s, const char *endpoint)
{
    void *sock = zmq_socket (s->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt (sock, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq (zmq_connect (sock, endpoint), 0);
    return sock;
}

/* Sends L->total requests, L->window (OUTSTANDING) at a time, and checks every one is answered
 * exactly once. */
static void s_load (server_t *s, load_t *l)
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
    while (received < l->total) {
        while (next < l->total && next - received < window) {
            float *f = sent + (size_t) next * 512;
            s_random (f, 512, &seed);
            size_t len = tu_pack_infer (buf, sizeof buf, l->models[next % l->model_count], f, l->inputs ? l->inputs : 512,
                                        1, next, 0);
            ck_assert_int_eq (zmq_send (sock[next % socks], buf, len, 0), (int) len);
            next++;
        }
        zmq_pollitem_t items[2] = { { sock[0], 0, ZMQ_POLLIN, 0 }, { sock[1], 0, ZMQ_POLLIN, 0 } };
        ck_assert_msg (zmq_poll (items, socks, REPLY_WAIT_MS) > 0, "a request was not answered within %d ms (%u of %u "
                       "answered)", REPLY_WAIT_MS, received, l->total);
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
                     || strstr (rep->error, "is unavailable on instance") || strstr (rep->error, "launch failure"))
                l->unavailable_lost++;
            else
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

static const char *s_model (const char *name, const char *extra)
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

/* ---------------------------------------------------------------------- CPU in a device process */

START_TEST (device_process_answers_like_threads)
{
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", "\"backend\": \"cpu\", \"instances\": 2,"));
    server_t s;
    s_start (&s, s_models, true);
    ck_assert (s_log_has (&s, "device cpu (test): process"));
    ck_assert (s_log_has (&s, "2 instance(s) [cpu (device process), cpu (device process)]"));
    load_t l = { .models = { "tick_mlp" }, .model_count = 1, .total = 600, .check_outputs = true };
    s_load (&s, &l);
    ck_assert_uint_eq (l.ok[0], 600);
    /* both instances computed some: the rings to the device process carry every request */
    ck_assert_double_eq (s_metric (&s, "sigserve_device_process_up{device=\"cpu\"}"), 1);
    ck_assert_double_eq (s_metric (&s, "sigserve_degraded"), 0);
    double a = s_metric (&s, "sigserve_instance_requests_total{model=\"tick_mlp\",instance=\"0\",device=\"cpu\"}");
    double b = s_metric (&s, "sigserve_instance_requests_total{model=\"tick_mlp\",instance=\"1\",device=\"cpu\"}");
    ck_assert_double_eq (a + b, 600);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

START_TEST (killed_device_process_answers_every_request_once)
{
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", "\"backend\": \"cpu\", \"instances\": 2,"));
    server_t s;
    s_start (&s, s_models, true);
    const pid_t first = s_device_pid (&s, "cpu (test)");
    ck_assert_int_gt (first, 0);
    load_t l = { .models = { "tick_mlp" }, .model_count = 1, .total = 3000, .fault_after = 300,
                 .fault = "device=cpu&kind=kill", .check_outputs = true };
    s_load (&s, &l);
    printf ("killed: %u OK, %u UNAVAILABLE (%u held by the lost process, %u refused while it was down)\n", l.ok[0],
            l.unavailable[0], l.unavailable_lost, l.unavailable_admission);
    ck_assert_uint_eq (l.ok[0] + l.unavailable[0], 3000);
    ck_assert_uint_eq (l.unavailable_lost + l.unavailable_admission, l.unavailable[0]);
    ck_assert_uint_gt (l.ok[0], 300);
    ck_assert_msg (s_wait_serving (&s, 30000), "the model did not come back (log: %s)", s.log);
    const pid_t second = s_device_pid (&s, "cpu (test)");
    ck_assert_int_ne (second, first);
    ck_assert (s_gone (first));
    ck_assert (s_log_has (&s, "device cpu (test): process"));
    ck_assert (s_log_has (&s, "lost (killed by signal 9)"));
    ck_assert (s_log_has (&s, "back after"));
    ck_assert_double_eq (s_metric (&s, "sigserve_device_losses_total{device=\"cpu\"}"), 1);
    ck_assert_double_eq (s_metric (&s, "sigserve_device_restarts_total{device=\"cpu\",result=\"ok\"}"), 1);
    ck_assert_double_gt (s_metric (&s, "sigserve_device_recovery_seconds{device=\"cpu\"}"), 0);
    ck_assert_double_eq (s_metric (&s, "sigserve_degraded"), 0);
    /* serving again, with correct outputs */
    load_t again = { .models = { "tick_mlp" }, .model_count = 1, .total = 300, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0], 300);
    ck_assert_int_eq (s_stop (&s), 0);
    ck_assert (s_gone (second));
}
END_TEST

START_TEST (sigterm_answers_what_a_device_process_holds)
{
    snprintf (s_models, sizeof s_models, "%s", s_model ("tick_mlp", "\"backend\": \"cpu\", \"instances\": 1,"));
    server_t s;
    s_start (&s, s_models, true);
    const pid_t dev = s_device_pid (&s, "cpu (test)");
    void *sock = zmq_socket (s.ctx, ZMQ_DEALER);
    int linger = 0, timeout = REPLY_WAIT_MS;
    zmq_setsockopt (sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq (zmq_connect (sock, s.endpoint), 0);
    static uint8_t buf[1 << 16];
    float f[512];
    unsigned seed = 3;
    for (uint32_t i = 0; i < 200; i++) {
        s_random (f, 512, &seed);
        size_t len = tu_pack_infer (buf, sizeof buf, "tick_mlp", f, 512, 1, i, 0);
        ck_assert_int_eq (zmq_send (sock, buf, len, 0), (int) len);
    }
    /* the first replies show the device process computing; then SIGTERM with the rest in flight */
    uint8_t seen[200] = { 0 };
    int ok = 0;
    zmq_msg_t first;
    zmq_msg_init (&first);
    ck_assert_int_ge (zmq_msg_recv (&first, sock, 0), 0);
    Sigserve__V1__Reply *r0 = sigserve__v1__reply__unpack (NULL, zmq_msg_size (&first), zmq_msg_data (&first));
    zmq_msg_close (&first);
    ck_assert (r0 && r0->body_case == SIGSERVE__V1__REPLY__BODY_INFER);
    ck_assert_int_eq (r0->infer->status, SIGSERVE__V1__STATUS__STATUS_OK);
    seen[r0->infer->request_id] = 1;
    ok++;
    sigserve__v1__reply__free_unpacked (r0, NULL);
    kill (s.pid, SIGTERM);
    for (int i = 1; i < 200; i++) {
        zmq_msg_t msg;
        zmq_msg_init (&msg);
        ck_assert_msg (zmq_msg_recv (&msg, sock, 0) >= 0, "reply %d of 200 missing at SIGTERM", i);
        Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, zmq_msg_size (&msg), zmq_msg_data (&msg));
        zmq_msg_close (&msg);
        ck_assert (r && r->body_case == SIGSERVE__V1__REPLY__BODY_INFER);
        ck_assert_uint_lt (r->infer->request_id, 200);
        ck_assert_uint_eq (seen[r->infer->request_id]++, 0);
        /* admitted before the drain began: computed; arriving after: refused, saying so */
        if (r->infer->status == SIGSERVE__V1__STATUS__STATUS_OK)
            ok++;
        else
            ck_assert_msg (r->infer->status == SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE
                           && strstr (r->infer->error, "shutting down"), "status %d: %s", r->infer->status, r->infer->error);
        sigserve__v1__reply__free_unpacked (r, NULL);
    }
    printf ("SIGTERM: %d of 200 computed, the rest refused as the drain began\n", ok);
    zmq_close (sock);
    ck_assert_int_eq (s_stop (&s), 0);
    ck_assert (s_gone (dev));
}
END_TEST

/* ------------------------------------------------------------------------------------ GPU hosts */

static int s_gpus (void)
{
    int count = 0;
    char why[256];
    if (!backends_gpu || backends_gpu->device_count (&count, why, sizeof why) != 0)
        return 0;
    return count;
}

START_TEST (trap_on_a_gpu_leaves_the_cpu_model_serving)
{
    if (s_gpus () < 1) {
        printf ("trap_on_a_gpu_leaves_the_cpu_model_serving: skipped: no GPU here\n");
        return;
    }
    snprintf (s_models, sizeof s_models, "%s, %s", s_model ("gpu", "\"backend\": \"cuda\", \"kernel\": \"warp\", \"devices\": [0],"),
              s_model ("cpu", "\"backend\": \"cpu\","));
    server_t s;
    s_start (&s, s_models, false);
    ck_assert (s_log_has (&s, "device 0: process"));
    /* the server's own process made no CUDA call; its device process did */
    ck_assert (!s_holds_nvidia (s.pid));
    ck_assert (s_holds_nvidia (s_device_pid (&s, "0")));
    load_t l = { .models = { "gpu", "cpu" }, .model_count = 2, .total = 4000, .fault_after = 400,
                 .fault = "device=0&kind=trap", .check_outputs = true };
    s_load (&s, &l);
    printf ("trap on GPU 0: gpu %u OK / %u UNAVAILABLE (%u held, %u refused), cpu %u OK / %u UNAVAILABLE\n", l.ok[0],
            l.unavailable[0], l.unavailable_lost, l.unavailable_admission, l.ok[1], l.unavailable[1]);
    ck_assert_uint_eq (l.ok[1], 2000);                  /* the CPU model never noticed */
    ck_assert_uint_eq (l.ok[0] + l.unavailable[0], 2000);
    ck_assert_uint_gt (l.unavailable[0], 0);            /* the trap happened */
    ck_assert_msg (s_wait_serving (&s, 60000), "GPU 0 did not come back (log: %s)", s.log);
    printf ("trap on GPU 0: recovered in %.1f ms\n", s_metric (&s, "sigserve_device_recovery_seconds{device=\"cuda:0\"}") * 1e3);
    ck_assert (s_log_has (&s, "its GPU context was lost"));
    ck_assert_double_eq (s_metric (&s, "sigserve_device_restarts_total{device=\"cuda:0\",result=\"ok\"}"), 1);
    load_t again = { .models = { "gpu", "cpu" }, .model_count = 2, .total = 400, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0] + again.ok[1], 400);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

START_TEST (hung_launch_past_the_watchdog_restarts_the_device)
{
    if (s_gpus () < 1) {
        printf ("hung_launch_past_the_watchdog_restarts_the_device: skipped: no GPU here\n");
        return;
    }
    snprintf (s_models, sizeof s_models, "%s, %s",
              s_model ("gpu", "\"backend\": \"cuda\", \"kernel\": \"warp\", \"devices\": [0], \"watchdog_ms\": 300,"),
              s_model ("cpu", "\"backend\": \"cpu\","));
    server_t s;
    s_start (&s, s_models, false);
    load_t l = { .models = { "gpu", "cpu" }, .model_count = 2, .total = 2000, .fault_after = 200,
                 .fault = "device=0&kind=hang", .check_outputs = true };
    s_load (&s, &l);
    printf ("hang on GPU 0: gpu %u OK / %u UNAVAILABLE (%u held, %u refused), cpu %u OK\n", l.ok[0], l.unavailable[0],
            l.unavailable_lost, l.unavailable_admission, l.ok[1]);
    ck_assert_uint_eq (l.ok[1], 1000);
    ck_assert_uint_eq (l.ok[0] + l.unavailable[0], 1000);
    ck_assert_uint_gt (l.unavailable_lost, 0);          /* what the hung instance held */
    ck_assert (s_log_has (&s, "over watchdog_ms = 300"));
    ck_assert (s_log_has (&s, "a launch ran past its model's watchdog_ms; the process was killed"));
    ck_assert_msg (s_wait_serving (&s, 60000), "GPU 0 did not come back (log: %s)", s.log);
    printf ("hang on GPU 0: recovered in %.1f ms\n", s_metric (&s, "sigserve_device_recovery_seconds{device=\"cuda:0\"}") * 1e3);
    load_t again = { .models = { "gpu" }, .model_count = 1, .total = 200, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0], 200);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

START_TEST (trap_on_gpu_1_leaves_gpu_0_serving)
{
    if (s_gpus () < 2) {
        printf ("trap_on_gpu_1_leaves_gpu_0_serving: skipped: %d GPU(s) here, 2 needed\n", s_gpus ());
        return;
    }
    snprintf (s_models, sizeof s_models, "%s",
              s_model ("spread", "\"backend\": \"cuda\", \"kernel\": \"warp\", \"devices\": [0, 1], \"instances\": 2,"));
    server_t s;
    s_start (&s, s_models, false);
    ck_assert (s_log_has (&s, "device 0: process") && s_log_has (&s, "device 1: process"));
    const char *i0 = "sigserve_instance_requests_total{model=\"spread\",instance=\"0\",device=\"cuda:0\"}";
    const char *i1 = "sigserve_instance_requests_total{model=\"spread\",instance=\"1\",device=\"cuda:1\"}";
    load_t l = { .models = { "spread" }, .model_count = 1, .total = 4000, .fault_after = 400,
                 .fault = "device=1&kind=trap", .check_outputs = true };
    s_load (&s, &l);
    printf ("trap on GPU 1: %u OK, %u UNAVAILABLE (%u held by GPU 1's process, %u refused)\n", l.ok[0], l.unavailable[0],
            l.unavailable_lost, l.unavailable_admission);
    ck_assert_uint_eq (l.ok[0] + l.unavailable[0], 4000);
    /* only what GPU 1's instance held when it was lost (at most the client's window), nothing refused:
     * GPU 0's instance took every request meanwhile */
    ck_assert_uint_le (l.unavailable[0], OUTSTANDING);
    ck_assert_uint_eq (l.unavailable_admission, 0);
    ck_assert_msg (s_wait_serving (&s, 60000), "GPU 1 did not come back (log: %s)", s.log);
    printf ("trap on GPU 1: recovered in %.1f ms\n", s_metric (&s, "sigserve_device_recovery_seconds{device=\"cuda:1\"}") * 1e3);
    ck_assert_double_eq (s_metric (&s, "sigserve_device_restarts_total{device=\"cuda:1\",result=\"ok\"}"), 1);
    ck_assert_double_eq (s_metric (&s, "sigserve_device_losses_total{device=\"cuda:0\"}"), 0);
    const double before0 = s_metric (&s, i0), before1 = s_metric (&s, i1);
    load_t again = { .models = { "spread" }, .model_count = 1, .total = 2000, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0], 2000);
    ck_assert_double_gt (s_metric (&s, i1), before1);  /* GPU 1 serves again */
    ck_assert_double_gt (s_metric (&s, i0), before0);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

/* A persistent model in a device process, the front free to run any request inline: tick_mlp on
 * GPU 0's persistent kernel, or (no GPU needed: CI) on the CPU with its mailbox emulated by
 * sigserve-test (tests/mailbox_backend.c: a thread plays the kernel), in the test's CPU device
 * process. Its counters' labels, and the fault that stops its kernel. */
typedef struct {
    bool gpu;
    const char *instance_metric, *trap, *device, *placement, *kernel;
    const char *backend;                /* the model's keys that put it there */
    const char *specialised, *generic;  /* its kernel's names with and without a specialised module */
} box_kind_t;

static const box_kind_t s_box_gpu = {
    true, "sigserve_instance_requests_total{model=\"box\",instance=\"0\",device=\"cuda:0\"}", "device=0&kind=trap",
    "0", "1 instance(s) [gpu 0 (device process)", "kernel persistent",
    "\"backend\": \"cuda\", \"kernel\": \"persistent\", \"devices\": [0],", "persistent-nvrtc", "persistent" };
static const box_kind_t s_box_emulated = {
    false, "sigserve_instance_requests_total{model=\"box\",instance=\"0\",device=\"cpu\"}", "device=cpu&kind=trap",
    "cpu (test)", "1 instance(s) [cpu (device process)", "kernel mailbox-emulated", "\"backend\": \"cpu\",",
    "mailbox-emulated-nvrtc", "mailbox-emulated" };

#define INLINE_METRIC "sigserve_inline_total{model=\"box\"}"

static bool s_box_skip (const box_kind_t *k, const char *test)
{
    if (!k->gpu || s_gpus () >= 1)
        return false;
    printf ("%s: skipped: no GPU here (its CPU twin runs the same with the mailbox emulated)\n", test);
    return true;
}

static void s_start_box (server_t *s, const box_kind_t *k, bool two_fronts)
{
    s_two_fronts = two_fronts;
    s_mailbox = !k->gpu;
    s_server_extra = ", \"inline_us\": 10000";
    snprintf (s_models, sizeof s_models, "%s", s_model ("box", k->backend));
    s_start (s, s_models, !k->gpu);
    s_two_fronts = s_mailbox = false;
    s_server_extra = "";
    ck_assert (s_log_has (s, k->kernel));
    ck_assert (s_log_has (s, k->placement));
    ck_assert (s_log_has (s, "(run on the front when idle)"));
}

/* After N requests sent one at a time (the counters at BEFORE): every one computed once, inline or by
 * the worker, and some inline (the path under test: their outputs were checked). Not all: a request
 * that arrives after a turn of three or more messages is taken as load and goes to the worker
 * (front/intake.c: inline_budget_ns), as does one the turn's inline budget (inline_us) no longer
 * covers; how often depends on how the machine schedules the three processes (here, when only the
 * first message of a turn could run inline: 475-500 of 500 quiet, 240 of 300 beside two fuzzers). */
static void s_assert_mostly_inline (server_t *s, const box_kind_t *k, double before, double before_worker, uint32_t n)
{
    const double inlined = s_metric (s, INLINE_METRIC) - before, worker = s_metric (s, k->instance_metric) - before_worker;
    printf ("persistent in a device process (%s), one at a time: %.0f of %u inline, %.0f by the worker\n", k->device,
            inlined, n, worker);
    ck_assert_double_eq (inlined + worker, n);
    ck_assert_double_gt (inlined, 0);
}

/* The box model's requests so far: run inline by a front (*INLINED) and by its worker (*WORKER),
 * printed after WHAT. */
static void s_box_split (server_t *s, const box_kind_t *k, const char *what, double *inlined, double *worker)
{
    *inlined = s_metric (s, INLINE_METRIC);
    *worker = s_metric (s, k->instance_metric);
    printf ("persistent in a device process (%s), %s: %.0f inline, %.0f by the worker\n", k->device, what, *inlined,
            *worker);
}

static void s_box_runs_inline (const box_kind_t *k)
{
    server_t s;
    s_start_box (&s, k, false);
    /* one at a time: nothing queued at each arrival, so the front publishes every one itself */
    load_t l = { .models = { "box" }, .model_count = 1, .total = 500, .window = 1, .check_outputs = true };
    s_load (&s, &l);
    ck_assert_uint_eq (l.ok[0], 500);
    s_assert_mostly_inline (&s, k, 0, 0, 500);
    /* a window of 32: still one front, inline or handed to the worker when the front took several
     * messages in a turn: both publish into the same mailbox */
    load_t w = { .models = { "box" }, .model_count = 1, .total = 3000, .check_outputs = true };
    s_load (&s, &w);
    ck_assert_uint_eq (w.ok[0], 3000);
    double inlined, worker;
    s_box_split (&s, k, "window 32", &inlined, &worker);
    ck_assert_double_eq (inlined + worker, 3500);
    ck_assert_int_eq (s_stop (&s), 0);
}

static void s_box_two_fronts (const box_kind_t *k)
{
    server_t s;
    s_start_box (&s, k, true);
    /* requests alternate between the two fronts' endpoints, 32 in flight: a front finding the
     * instance claimed by the other hands its request to the worker, which waits for the claim */
    load_t l = { .models = { "box" }, .model_count = 1, .total = 6000, .both_fronts = true, .check_outputs = true };
    s_load (&s, &l);
    ck_assert_uint_eq (l.ok[0], 6000);
    double inlined, worker;
    s_box_split (&s, k, "two fronts", &inlined, &worker);
    ck_assert_double_eq (inlined + worker, 6000);
    ck_assert_double_gt (inlined, 0);
    ck_assert_double_gt (worker, 0);
    ck_assert_int_eq (s_stop (&s), 0);
}

static void s_box_trap (const box_kind_t *k)
{
    server_t s;
    s_start_box (&s, k, false);
    const pid_t first = s_device_pid (&s, k->device);
    load_t l = { .models = { "box" }, .model_count = 1, .total = 1000, .window = 1, .fault_after = 300,
                 .fault = k->trap, .check_outputs = true };
    s_load (&s, &l);
    printf ("trap under inline requests (%s): %u OK, %u UNAVAILABLE (%u held, %u refused)\n", k->device, l.ok[0],
            l.unavailable[0], l.unavailable_lost, l.unavailable_admission);
    ck_assert_uint_ge (l.ok[0], 300);
    ck_assert_uint_eq (l.unavailable_lost + l.unavailable_admission, l.unavailable[0]);
    ck_assert_uint_le (l.unavailable_lost, 1);      /* one in flight at most: the one the front waited on */
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_ne (s_device_pid (&s, k->device), first);
    ck_assert (s_log_has (&s, "back after"));
    const double before = s_metric (&s, INLINE_METRIC), before_worker = s_metric (&s, k->instance_metric);
    load_t again = { .models = { "box" }, .model_count = 1, .total = 300, .window = 1, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0], 300);
    s_assert_mostly_inline (&s, k, before, before_worker, 300);     /* inline again, on the new mailbox */
    ck_assert_int_eq (s_stop (&s), 0);
}

/* Model NAME's kernel as /models lists it into KERNEL ("" when it is not listed). */
static void s_kernel_of (server_t *s, const char *name, char *kernel, size_t len)
{
    static char body[1 << 16];
    char key[160];
    kernel[0] = '\0';
    snprintf (key, sizeof key, "\"name\":\"%s\"", name);
    const char *at = s_http (s->http_port, "GET", "/models", body, sizeof body) == 200 ? strstr (body, key) : NULL;
    const char *k = at ? strstr (at, "\"kernel\":\"") : NULL;
    if (k) {
        k += strlen ("\"kernel\":\"");
        const char *end = strchr (k, '"');
        snprintf (kernel, len, "%.*s", end ? (int) (end - k) : 0, k);
    }
}

/* A model of tick_mlp's file with the dense chain of LAYERS (tensor name prefixes "0", "2", "4"),
 * the last without activation: other shapes from the same file. */
static const char *s_chain (const char *name, const char *extra, const char *const *layers, int count)
{
    static char m[3][8192];
    static int k;
    k = (k + 1) % 3;
    char chain[1024] = "";
    for (int i = 0; i < count; i++)
        snprintf (chain + strlen (chain), sizeof chain - strlen (chain),
                  "%s{ \"weight\": \"%s.weight\", \"bias\": \"%s.bias\", \"activation\": \"%s\" }", i ? ", " : "",
                  layers[i], layers[i], i + 1 < count ? "relu" : "none");
    snprintf (m[k], sizeof m[k],
              "{ \"name\": \"%s\", \"weights\": \"%s\", \"max_rows\": 8, \"max_queue_us\": 60000000, %s \"layers\": [ %s ] }",
              name, s_tick_path, extra, chain);
    return m[k];
}

#define ASSERT_KERNEL(s, name, want)                                                                                   \
    do {                                                                                                               \
        char got_[64];                                                                                                 \
        s_kernel_of ((s), (name), got_, sizeof got_);                                                                  \
        ck_assert_msg (strcmp (got_, (want)) == 0, "model %s: kernel \"%s\", expected \"%s\" (log: %s)", (name), got_,  \
                       (want), (s)->log);                                                                              \
    } while (0)

/* N requests of MODEL, a window of 32 (INPUTS features, OUTPUTS outputs: 0, tick_mlp's), every one
 * answered OK (CHECK: within the float64 reference's bound; tick_mlp's chain only). */
static void s_serve_ok (server_t *s, const char *model, uint32_t n, uint32_t inputs, uint32_t outputs, bool check)
{
    load_t l = { .models = { model }, .model_count = 1, .total = n, .inputs = inputs, .outputs = outputs,
                 .check_outputs = check };
    s_load (s, &l);
    ck_assert_uint_eq (l.ok[0], n);
}

/* Every persistent model of a configuration runs a kernel specialised for its shapes: each one's
 * module is compiled and loaded before the first kernel is resident (model_prepare), where before
 * only the first model loaded got one (a module load next to a resident kernel waits forever).
 * A model of new shapes added by a reload, next to the running kernels, gets the generic kernel
 * (logged), and the specialised one once its device process has started again (every model's
 * module prepared before they rejoin). IN_PROCESS: the models in the server's process (GPU:
 * gpu_processes false; the emulation: CPU models not placed in a device process), up to the reload. */
static void s_box_prepared (const box_kind_t *k, bool in_process)
{
    static const char *const three[] = { "0", "2", "4" }, *const two[] = { "0", "2" }, *const tail[] = { "2", "4" };
    snprintf (s_models, sizeof s_models, "%s, %s", s_chain ("box", k->backend, three, 3),
              s_chain ("box2", k->backend, two, 2));
    s_mailbox = !k->gpu;
    s_server_extra = in_process && k->gpu ? ", \"gpu_processes\": false" : "";
    server_t s;
    s_start (&s, s_models, !k->gpu && !in_process);
    s_mailbox = false;
    s_server_extra = "";
    ASSERT_KERNEL (&s, "box", k->specialised);
    ASSERT_KERNEL (&s, "box2", k->specialised);
    ck_assert (!s_log_has (&s, "no specialised persistent kernel"));
    s_serve_ok (&s, "box", 200, 0, 0, true);
    s_serve_ok (&s, "box2", 200, 0, 64, false);
    /* a reload adds a third shape while the two kernels run */
    static char models[sizeof s_models + 8192];
    snprintf (models, sizeof models, "%s, %s", s_models, s_chain ("box3", k->backend, tail, 2));
    FILE *f = fopen (s.config, "r");
    static char json[32768];
    ck_assert_ptr_nonnull (f);
    const size_t n = fread (json, 1, sizeof json - 1, f);
    fclose (f);
    json[n] = '\0';
    char *list = strstr (json, s_models);
    ck_assert_ptr_nonnull (list);
    static char rewritten[65536];
    snprintf (rewritten, sizeof rewritten, "%.*s%s%s", (int) (list - json), json, models, list + strlen (s_models));
    free (tu_write_file (s.dir, "sigserve.json", rewritten, -1));
    kill (s.pid, SIGHUP);
    char kernel[64] = "";
    for (int waited = 0; waited < 60000 && !kernel[0]; waited += 50) {
        s_kernel_of (&s, "box3", kernel, sizeof kernel);
        if (!kernel[0])
            usleep (50 * 1000);
    }
    ck_assert_msg (s_wait_serving (&s, 60000), "the reload did not serve (log: %s)", s.log);
    ASSERT_KERNEL (&s, "box3", k->generic);
    ASSERT_KERNEL (&s, "box", k->specialised);
    ck_assert (s_log_has (&s, "model \"box3\": not prepared on device"));
    ck_assert (s_log_has (&s, "model \"box3\": no specialised persistent kernel"));
    s_serve_ok (&s, "box3", 200, 256, 0, false);
    if (in_process) {
        ck_assert_int_eq (s_stop (&s), 0);
        return;
    }
    /* the device process starts again: every model's module before any rejoins */
    const pid_t first = s_device_pid (&s, k->device);
    static char body[4096];
    char path[128];
    snprintf (path, sizeof path, "/debug/fault?%s", k->trap);
    ck_assert_int_eq (s_http (s.http_port, "POST", path, body, sizeof body), 200);
    for (int waited = 0; waited < 60000 && s_device_pid (&s, k->device) == first; waited += 50)
        usleep (50 * 1000);
    ck_assert_int_ne (s_device_pid (&s, k->device), first);
    ck_assert_msg (s_wait_serving (&s, 60000), "the models did not come back (log: %s)", s.log);
    ASSERT_KERNEL (&s, "box", k->specialised);
    ASSERT_KERNEL (&s, "box2", k->specialised);
    ASSERT_KERNEL (&s, "box3", k->specialised);
    s_serve_ok (&s, "box", 200, 0, 0, true);
    s_serve_ok (&s, "box3", 200, 256, 0, false);
    ck_assert_int_eq (s_stop (&s), 0);
}

START_TEST (emulated_persistent_models_all_specialised)
{
    s_box_prepared (&s_box_emulated, false);
    s_box_prepared (&s_box_emulated, true);
}
END_TEST

START_TEST (persistent_models_all_specialised)
{
    if (!s_box_skip (&s_box_gpu, "persistent_models_all_specialised")) {
        s_box_prepared (&s_box_gpu, false);
        s_box_prepared (&s_box_gpu, true);
    }
}
END_TEST

START_TEST (emulated_persistent_runs_inline_across_processes) { s_box_runs_inline (&s_box_emulated); }
END_TEST

START_TEST (emulated_persistent_two_fronts_and_the_worker_share_the_mailbox) { s_box_two_fronts (&s_box_emulated); }
END_TEST

START_TEST (emulated_persistent_trap_while_the_front_waits) { s_box_trap (&s_box_emulated); }
END_TEST

START_TEST (persistent_in_a_device_process_runs_inline)
{
    if (!s_box_skip (&s_box_gpu, "persistent_in_a_device_process_runs_inline"))
        s_box_runs_inline (&s_box_gpu);
}
END_TEST

START_TEST (two_fronts_and_the_worker_share_the_mailbox)
{
    if (!s_box_skip (&s_box_gpu, "two_fronts_and_the_worker_share_the_mailbox"))
        s_box_two_fronts (&s_box_gpu);
}
END_TEST

START_TEST (trap_while_the_front_waits_on_the_mailbox)
{
    if (!s_box_skip (&s_box_gpu, "trap_while_the_front_waits_on_the_mailbox"))
        s_box_trap (&s_box_gpu);
}
END_TEST

static Suite *s_suite (void)
{
    Suite *suite = suite_create ("device_processes");
    TCase *c = tcase_create ("cpu");
    tcase_set_timeout (c, 300);
    tcase_add_test (c, device_process_answers_like_threads);
    tcase_add_test (c, killed_device_process_answers_every_request_once);
    tcase_add_test (c, sigterm_answers_what_a_device_process_holds);
    tcase_add_test (c, emulated_persistent_runs_inline_across_processes);
    tcase_add_test (c, emulated_persistent_two_fronts_and_the_worker_share_the_mailbox);
    tcase_add_test (c, emulated_persistent_trap_while_the_front_waits);
    tcase_add_test (c, emulated_persistent_models_all_specialised);
    suite_add_tcase (suite, c);
    TCase *g = tcase_create ("gpu");
    tcase_set_timeout (g, 300);
    tcase_add_test (g, trap_on_a_gpu_leaves_the_cpu_model_serving);
    tcase_add_test (g, hung_launch_past_the_watchdog_restarts_the_device);
    tcase_add_test (g, trap_on_gpu_1_leaves_gpu_0_serving);
    tcase_add_test (g, persistent_in_a_device_process_runs_inline);
    tcase_add_test (g, two_fronts_and_the_worker_share_the_mailbox);
    tcase_add_test (g, trap_while_the_front_waits_on_the_mailbox);
    tcase_add_test (g, persistent_models_all_specialised);
    suite_add_tcase (suite, g);
    return suite;
}

int main (void)
{
    snprintf (s_tick_path, sizeof s_tick_path, "%s/models/tick_mlp.safetensors", tu_build_abs ());
    return tu_run_suite (s_suite ());
}
