/* What sigserve says when it starts, with the real binary: the endpoints are bound before any model
 * loads (a taken port fails the start at once, whatever the models); a host name where ZeroMQ wants
 * an address gets the address to use (exit code 2: a configuration error, which --check-config finds
 * too); an endpoint other hosts can reach without CURVE is warned about, a loopback one is not; a CUDA
 * model on a machine without a GPU or a build without CUDA says which; a batch-scoring model (max_rows
 * 4096) starts small and answers; a server of CPU models maps no CUDA library and stays under 64 MiB.
 * Exit codes and messages are asserted exactly, never times. */
#define _GNU_SOURCE
#include "backends/backends.h"
#include "base/config.h"
#include "reference.h"
#include "signal.pb-c.h"
#include "testutil.h"
#include "tolerance.h"
#include "weights/weights.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

static char *s_dir;

/* A config serving one model; ENDPOINT, and the model's BACKEND and WEIGHTS (NULL: the demo's). */
static char *s_config (const char *name, const char *endpoint, const char *backend, const char *weights)
{
    char json[4096], demo[2048];
    snprintf (demo, sizeof demo, "%s/models/tick_mlp.safetensors", tu_build_abs ());
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"stats_interval_s\": 0 },"
              "  \"models\": [ { \"name\": \"tick_mlp\", \"backend\": \"%s\", \"weights\": \"%s\","
              "    \"layers\": [ { \"weight\": \"0.weight\", \"activation\": \"relu\" }, { \"weight\": \"2.weight\","
              "    \"activation\": \"relu\" }, { \"weight\": \"4.weight\" } ] } ] }",
              endpoint, backend, weights ? weights : demo);
    return tu_write_file (s_dir, name, json, -1);
}

/* Runs sigserve --config CONFIG to its end (SIGTERM once health answers ready, when WAIT_READY),
 * its stderr into LOG (CAP bytes). The exit code. */
static int s_run (const char *config, const char *endpoint, bool wait_ready, char *log, size_t cap)
{
    char path[2400];
    snprintf (path, sizeof path, "%s/%s.log", s_dir, strrchr (config, '/') + 1);
    int code;
    if (wait_ready) {
        pid_t pid = tu_server_start_logged (config, endpoint, 30000, path, "info");
        ck_assert_msg (pid > 0, "sigserve did not become ready");
        code = tu_server_stop (pid);
    } else {
        pid_t pid = fork ();
        if (pid == 0) {
            char bin[2400];
            snprintf (bin, sizeof bin, "%s/sigserve", tu_build_dir ());
            FILE *f = freopen (path, "w", stderr);
            (void) f;
            execl (bin, bin, "--config", config, (char *) NULL);
            _exit (127);
        }
        int status = 0;
        ck_assert_int_eq (waitpid (pid, &status, 0), pid);
        code = WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
    }
    FILE *f = fopen (path, "r");
    ck_assert_ptr_nonnull (f);
    size_t n = fread (log, 1, cap - 1, f);
    log[n] = '\0';
    fclose (f);
    return code;
}

START_TEST (a_taken_port_fails_before_any_model_loads)
{
    /* The model's weights do not exist: loading it first would exit 2 naming them. Binding first
     * exits 1 naming the port, and no model is touched. */
    void *ctx = zmq_ctx_new (), *taker = zmq_socket (ctx, ZMQ_ROUTER);
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    ck_assert_int_eq (zmq_bind (taker, endpoint), 0);
    char *config = s_config ("taken.json", endpoint, "cpu", "/nonexistent/weights.safetensors");
    char log[16384], want[256];
    ck_assert_int_eq (s_run (config, endpoint, false, log, sizeof log), 1);
    snprintf (want, sizeof want, "server.endpoints: cannot bind %s: Address already in use", endpoint);
    ck_assert_msg (strstr (log, want) != NULL, "%s", log);
    ck_assert_msg (strstr (log, "weights.safetensors") == NULL, "a model was loaded before the bind: %s", log);
    zmq_close (taker);
    zmq_ctx_term (ctx);
    free (config);
}
END_TEST

START_TEST (a_host_name_gets_the_address_to_bind)
{
    const int port = tu_free_port ();
    char endpoint[64], log[16384], want[512];
    snprintf (endpoint, sizeof endpoint, "tcp://localhost:%d", port);
    char *config = s_config ("localhost.json", endpoint, "cpu", NULL);
    /* a configuration error (--check-config finds it too: test_check_config.c), refused before anything binds */
    ck_assert_int_eq (s_run (config, endpoint, false, log, sizeof log), 2);
    snprintf (want, sizeof want, "server.endpoints[0]: cannot bind tcp://localhost:%d: No such device (ZeroMQ binds an "
              "address or an interface name, not a host name: \"localhost\" is 127.0.0.1, so use tcp://127.0.0.1:%d, "
              "or tcp://*:%d for every interface)", port, port, port);
    ck_assert_msg (strstr (log, want) != NULL, "%s", log);
    free (config);
}
END_TEST

START_TEST (plaintext_for_other_hosts_is_warned_about)
{
    char endpoint[64], log[65536], want[512];
    const int port = tu_free_port ();
    snprintf (endpoint, sizeof endpoint, "tcp://*:%d", port);
    char *config = s_config ("wildcard.json", endpoint, "cpu", NULL);
    char ready_at[64];
    snprintf (ready_at, sizeof ready_at, "tcp://127.0.0.1:%d", port);
    ck_assert_int_eq (s_run (config, ready_at, true, log, sizeof log), 0);
    snprintf (want, sizeof want, "warn  %s serves plaintext on an address other hosts can reach: anyone who reaches "
              "the port can send requests and read the replies; bind 127.0.0.1, or set server.curve "
              "(docs/security.md)", endpoint);
    ck_assert_msg (strstr (log, want) != NULL, "%s", log);
    free (config);
    /* loopback: nobody else can reach it, nothing to warn about */
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    config = s_config ("loopback.json", endpoint, "cpu", NULL);
    ck_assert_int_eq (s_run (config, endpoint, true, log, sizeof log), 0);
    ck_assert_msg (strstr (log, "serves plaintext") == NULL, "%s", log);
    free (config);
}
END_TEST

START_TEST (a_cuda_model_without_a_gpu_says_why)
{
    char endpoint[64], log[16384];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    char *config = s_config ("cuda.json", endpoint, "cuda", NULL);
    char why[768];
    const bool driver = backends_gpu_driver (why, sizeof why);
    if (backends_gpu_built () && driver) {
        printf ("a_cuda_model_without_a_gpu_says_why: this host has an NVIDIA driver; nothing to check\n");
        free (config);
        return;
    }
    ck_assert_int_eq (s_run (config, endpoint, false, log, sizeof log), 2);
    const char *want = backends_gpu_built ()
        ? "model \"tick_mlp\": backend \"cuda\": no NVIDIA driver on this host (no /proc/driver/nvidia): no GPU, or "
          "its driver is not installed; use \"backend\": \"cpu\" or \"auto\""
        : "model \"tick_mlp\": backend \"cuda\": this build of sigserve has no CUDA backend (nvcc was not found when "
          "it was built); use \"backend\": \"cpu\" or \"auto\"";
    ck_assert_msg (strstr (log, want) != NULL, "%s", log);
    ck_assert_msg (strstr (log, "driver version is insufficient") == NULL, "%s", log);
    free (config);
}
END_TEST

/* Runs BIN --config CONFIG to its end as if this host had an NVIDIA driver (a private mount namespace
 * with /proc/driver/nvidia/version on a tmpfs), its stderr into LOG (CAP bytes): the exit code, or -1
 * when this process may not make the namespace (not root: the caller skips). */
static int s_run_with_a_driver (const char *bin, const char *config, char *log, size_t cap)
{
    char path[2400];
    snprintf (path, sizeof path, "%s/driver.log", s_dir);
    pid_t pid = fork ();
    if (pid == 0) {
        if (unshare (CLONE_NEWNS) != 0 || mount (NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0
            || mount ("none", "/proc/driver", "tmpfs", 0, NULL) != 0 || mkdir ("/proc/driver/nvidia", 0755) != 0)
            _exit (126);
        FILE *v = fopen ("/proc/driver/nvidia/version", "w");
        if (!v)
            _exit (126);
        fclose (v);
        FILE *f = freopen (path, "w", stderr);
        (void) f;
        execl (bin, bin, "--config", config, (char *) NULL);
        _exit (127);
    }
    int status = 0;
    ck_assert_int_eq (waitpid (pid, &status, 0), pid);
    const int code = WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
    if (code == 126)
        return -1;
    FILE *f = fopen (path, "r");
    ck_assert_ptr_nonnull (f);
    size_t n = fread (log, 1, cap - 1, f);
    log[n] = '\0';
    fclose (f);
    return code;
}

/* A CUDA build whose CUDA backend (libsigserve-cuda.so, opened when a model needs the GPU) is missing,
 * or is not a library, says which and where it belongs, on a host with a driver; the message is the
 * model's error, as any other. */
START_TEST (a_missing_or_broken_cuda_backend_says_so)
{
    if (!backends_gpu_built ()) {
        printf ("a_missing_or_broken_cuda_backend_says_so: skipped: this build has no CUDA backend\n");
        return;
    }
    char endpoint[64], log[16384], dir[2400], bin[2500], src[2400], lib[2500];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    char *config = s_config ("lonely.json", endpoint, "cuda", NULL);
    snprintf (dir, sizeof dir, "%s/lonely", s_dir);
    ck_assert_int_eq (mkdir (dir, 0755), 0);
    snprintf (src, sizeof src, "%s/sigserve", tu_build_dir ());
    snprintf (bin, sizeof bin, "%s/sigserve", dir);
    ck_assert_int_eq (tu_copy_file (src, bin, 0755), 0);
    int code = s_run_with_a_driver (bin, config, log, sizeof log);
    if (code < 0) {
        printf ("a_missing_or_broken_cuda_backend_says_so: skipped: cannot make a mount namespace (not root)\n");
        free (config);
        return;
    }
    ck_assert_int_eq (code, 2);
    ck_assert_msg (strstr (log, "model \"tick_mlp\": backend \"cuda\": the CUDA backend (libsigserve-cuda.so) is "
                           "missing: it belongs beside sigserve, or in lib/sigserve/ of the prefix sigserve is installed in; "
                           "use \"backend\": \"cpu\" or \"auto\"") != NULL, "%s", log);
    snprintf (lib, sizeof lib, "%s/libsigserve-cuda.so", dir);
    free (tu_write_file (dir, "libsigserve-cuda.so", "not a library", -1));
    ck_assert_int_eq (s_run_with_a_driver (bin, config, log, sizeof log), 2);
    char want[3000];
    snprintf (want, sizeof want, "model \"tick_mlp\": backend \"cuda\": the CUDA backend (libsigserve-cuda.so) did not "
              "load: %s: file too short; use \"backend\": \"cpu\" or \"auto\"", lib);
    ck_assert_msg (strstr (log, want) != NULL, "%s", log);
    free (config);
}
END_TEST

/* Resident memory of process PID in bytes (VmRSS), -1 when unreadable. */
static long long s_rss (pid_t pid)
{
    char path[64], line[256];
    snprintf (path, sizeof path, "/proc/%d/status", (int) pid);
    FILE *f = fopen (path, "r");
    long long kib = -1;
    while (f && fgets (line, sizeof line, f))
        if (sscanf (line, "VmRSS: %lld kB", &kib) == 1)
            break;
    if (f)
        fclose (f);
    return kib < 0 ? -1 : kib * 1024;
}

/* Whether process PID maps a file whose name holds NAME (/proc/PID/maps). */
static bool s_maps (pid_t pid, const char *name)
{
    char path[64], line[1024];
    snprintf (path, sizeof path, "/proc/%d/maps", (int) pid);
    FILE *f = fopen (path, "r");
    bool found = false;
    while (f && !found && fgets (line, sizeof line, f))
        found = strstr (line, name) != NULL;
    if (f)
        fclose (f);
    return found;
}

/* A server of CPU models maps none of the CUDA libraries (the CUDA backend is a library sigserve opens
 * when a model needs the GPU) and its request buffers are resident as they are used: the demo model
 * on the CPU is under 64 MiB resident once ready (it was 237 MiB; docs/operations.md has the
 * breakdown). Under AddressSanitizer the shadow memory makes the size meaningless: only the maps are
 * checked there. */
START_TEST (a_cpu_only_server_maps_no_cuda_library_and_stays_under_64_mib)
{
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    char *config = s_config ("lean.json", endpoint, "cpu", NULL);
    pid_t pid = tu_server_start (config, endpoint, 60000);
    ck_assert_msg (pid > 0, "the demo model did not start");
    const long long rss = s_rss (pid);
    const char *const cuda[] = { "libcudart", "libcublas", "libcublasLt", "libnvrtc", "libsigserve-cuda" };
    for (size_t i = 0; i < sizeof cuda / sizeof cuda[0]; i++)
        ck_assert_msg (!s_maps (pid, cuda[i]), "a CPU-only server maps %s", cuda[i]);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    printf ("a_cpu_only_server: %.1f MiB resident once ready\n", rss / 1048576.0);
    if (!getenv ("SIGSERVE_SANITIZED"))
        ck_assert_msg (rss > 0 && rss < 64ll * 1048576, "resident %lld bytes (%.1f MiB)", rss, rss / 1048576.0);
    free (config);
}
END_TEST

/* A batch-scoring model (max_rows 4096, 64 MiB messages): request buffers grow with the queue
 * times a typical request (buffer_rows), not times the largest; it starts in a few hundred MB at
 * most (it needed 35 GB and refused to start before), says what its buffers take, and answers a
 * request of 4096 rows (a large buffer) equal to the float64 reference. */
START_TEST (a_batch_scoring_model_starts_small_and_answers_4096_rows)
{
    char endpoint[64], json[4096], demo[2048], log[65536], logpath[2400], err[512];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    snprintf (demo, sizeof demo, "%s/models/tick_mlp.safetensors", tu_build_abs ());
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"max_message_bytes\": 67108864, \"stats_interval_s\": 0 },"
              "  \"models\": [ { \"name\": \"score\", \"backend\": \"cpu\", \"max_rows\": 4096, \"weights\": \"%s\","
              "    \"layers\": [ { \"weight\": \"0.weight\", \"activation\": \"relu\" }, { \"weight\": \"2.weight\","
              "    \"activation\": \"relu\" }, { \"weight\": \"4.weight\" } ] } ] }", endpoint, demo);
    char *config = tu_write_file (s_dir, "score.json", json, -1);
    /* what the process takes besides its models (libraries, runtimes): the demo model's server */
    char small_at[64];
    snprintf (small_at, sizeof small_at, "tcp://127.0.0.1:%d", tu_free_port ());
    char *small = s_config ("small.json", small_at, "cpu", NULL);
    pid_t pid = tu_server_start (small, small_at, 60000);
    ck_assert_msg (pid > 0, "the demo model did not start");
    const long long base = s_rss (pid);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    free (small);
    snprintf (logpath, sizeof logpath, "%s/score.log", s_dir);
    pid = tu_server_start_logged (config, endpoint, 60000, logpath, "info");
    ck_assert_msg (pid > 0, "the batch-scoring model did not start");
    const long long rss = s_rss (pid);
    printf ("a_batch_scoring_model: %.1f MiB resident once ready, %.1f MiB more than the demo model's server\n",
            rss / 1048576.0, (rss - base) / 1048576.0);
    ck_assert_msg (base > 0 && rss > 0 && rss - base < 300ll * 1048576, "resident %lld bytes, the demo's %lld", rss,
                   base);
    /* 4096 rows of 512 random features: a large buffer; the answer is the reference's */
    enum { ROWS = 4096, IN = 512 };
    float *x = malloc ((size_t) ROWS * IN * sizeof (float));
    uint64_t seed = 77;
    for (size_t i = 0; i < (size_t) ROWS * IN; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float) ((seed >> 40) / 8388608.0 - 1.0);
    }
    size_t cap = (size_t) ROWS * IN * 4 + 1024;
    uint8_t *buf = malloc (cap);
    size_t len = tu_pack_infer (buf, cap, "score", x, (size_t) ROWS * IN, ROWS, 5, 0);
    ck_assert_uint_gt (len, 0);
    void *ctx = zmq_ctx_new (), *s = zmq_socket (ctx, ZMQ_DEALER);
    int timeout = 60000, linger = 0;
    zmq_setsockopt (s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq (zmq_connect (s, endpoint), 0);
    ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
    zmq_msg_t m;
    zmq_msg_init (&m);
    ck_assert_int_gt (zmq_msg_recv (&m, s, 0), 0);
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, zmq_msg_size (&m), zmq_msg_data (&m));
    ck_assert_ptr_nonnull (r);
    ck_assert_msg (r->infer->status == SIGSERVE__V1__STATUS__STATUS_OK, "%s", r->infer->error);
    ck_assert_uint_eq (r->infer->n_outputs, ROWS);
    config_t *cfg = config_load (config, err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    weights_t *w = weights_load (&cfg->models[0], err, sizeof err);
    ck_assert_msg (w != NULL, "%s", err);
    double *ref = malloc (ROWS * sizeof (double)), *bound = malloc (ROWS * sizeof (double));
    ck_assert_int_eq (tol_mlp (w, x, ROWS, ref, bound), 0);
    TOL_ASSERT (r->infer->outputs, ref, bound, ROWS, 1, "the first answer");
    sigserve__v1__reply__free_unpacked (r, NULL);
    zmq_msg_close (&m);
    zmq_close (s);
    zmq_ctx_term (ctx);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    FILE *f = fopen (logpath, "r");
    size_t n = fread (log, 1, sizeof log - 1, f);
    log[n] = '\0';
    fclose (f);
    /* queue_depth (derived from max_queue_us: at most 1024) + 1 instance x 4096 batch rows + 64 jobs
     * of 16 rows, and 2 large buffers of 4096 rows, each row 513 floats */
    const char *at = strstr (log, "; max_queue_us 10000, queue_depth ");
    ck_assert_msg (at != NULL, "%s", log);
    unsigned depth = 0, jobs = 0;
    double mib = 0, resident = 0;
    ck_assert_msg (sscanf (at, "; max_queue_us 10000, queue_depth %u (derived); request buffers %u x 16 rows + 2 x 4096 "
                           "rows (%lf MiB; %lf MiB resident, the rest as a deeper queue first needs it)", &depth, &jobs,
                           &mib, &resident) == 4, "%s", at);
    ck_assert_uint_ge (depth, 64);
    ck_assert_uint_le (depth, 1024);
    ck_assert_uint_eq (jobs, depth + 4096 + 64);
    ck_assert_double_eq_tol (mib, ((double) jobs * 16 + 2 * 4096) * 513 * 4 / 1048576.0, 0.051);
    ck_assert_double_eq_tol (resident, 64.0 * 16 * 513 * 4 / 1048576.0, 0.051);    /* one intake turn's jobs */
    free (ref);
    free (bound);
    free (x);
    free (buf);
    weights_destroy (&w);
    config_destroy (&cfg);
    free (config);
}
END_TEST

int main (void)
{
    s_dir = tu_tmpdir ();
    Suite *s = suite_create ("startup");
    TCase *tc = tcase_create ("startup");
    tcase_set_timeout (tc, 120);
    tcase_add_test (tc, a_taken_port_fails_before_any_model_loads);
    tcase_add_test (tc, a_host_name_gets_the_address_to_bind);
    tcase_add_test (tc, plaintext_for_other_hosts_is_warned_about);
    tcase_add_test (tc, a_cuda_model_without_a_gpu_says_why);
    tcase_add_test (tc, a_batch_scoring_model_starts_small_and_answers_4096_rows);
    tcase_add_test (tc, a_cpu_only_server_maps_no_cuda_library_and_stays_under_64_mib);
    tcase_add_test (tc, a_missing_or_broken_cuda_backend_says_so);
    suite_add_tcase (s, tc);
    int rc = tu_run_suite (s);
    free (s_dir);
    return rc;
}
