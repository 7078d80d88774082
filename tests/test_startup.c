/* What sigserve says when it starts, with the real binary: the endpoints are bound before any model
 * loads (a taken port fails the start at once, whatever the models); a host name where ZeroMQ wants
 * an address gets the address to use; an endpoint other hosts can reach without CURVE is warned
 * about, a loopback one is not; a CUDA model on a machine without a GPU or a build without CUDA says
 * which. Exit codes and messages are asserted exactly, never times. */
#define _GNU_SOURCE
#include "backends/backends.h"
#include "testutil.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    ck_assert_int_eq (s_run (config, endpoint, false, log, sizeof log), 1);
    snprintf (want, sizeof want, "server.endpoints: cannot bind tcp://localhost:%d: No such device (ZeroMQ binds an "
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
    const bool driver = access ("/proc/driver/nvidia/version", F_OK) == 0 || access ("/dev/nvidiactl", F_OK) == 0;
    if (backends_gpu && driver) {
        printf ("a_cuda_model_without_a_gpu_says_why: this host has an NVIDIA driver; nothing to check\n");
        free (config);
        return;
    }
    ck_assert_int_eq (s_run (config, endpoint, false, log, sizeof log), 2);
    const char *want = backends_gpu
        ? "model \"tick_mlp\": backend \"cuda\": no NVIDIA driver on this host (no /proc/driver/nvidia): no GPU, or "
          "its driver is not installed; use \"cpu\" or \"auto\""
        : "model \"tick_mlp\": backend \"cuda\": this build of sigserve has no CUDA backend (nvcc was not found when "
          "it was built); use \"cpu\" or \"auto\"";
    ck_assert_msg (strstr (log, want) != NULL, "%s", log);
    ck_assert_msg (strstr (log, "driver version is insufficient") == NULL, "%s", log);
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
    suite_add_tcase (s, tc);
    int rc = tu_run_suite (s);
    free (s_dir);
    return rc;
}
