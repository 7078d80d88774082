/* What --watch reloads and what the start and a reload say (issue 39, part 7), with the real binary:
 * --watch reloads when only a model's weights file changes (written over by rename, as an exporter
 * does) and the model then answers from the new weights; the start says how many models it serves
 * once they are loaded, never "0 model(s)" before; a reload names what it loaded and why (new, its
 * configuration changed, its weights file changed), and what it unloaded: models no longer served
 * apart from the previous load of models loaded anew; a reload adding an endpoint the transport cannot
 * bind changes nothing and says why (the start's own message), judged by the running transport's rules
 * when the file names another (server.transport waits for a restart). Log lines are asserted exactly and in
 * order, never times: each step waits for the line it causes, with a generous cap. */
#define _GNU_SOURCE
#include "signal.pb-c.h"
#include "st_write.h"
#include "testutil.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define WAIT_MS 60000       /* the cap on waiting for a line (a sanitizer build is slow) */

static char *s_dir;

/* DIR/NAME.safetensors: one linear layer, 4 inputs -> 1 output, every weight SCALE, bias 0. */
static void s_weights (const char *name, float scale)
{
    float w[4] = { scale, scale, scale, scale }, b[1] = { 0 };
    const st_write_tensor_t t[] = { { "fc.weight", 2, { 1, 4 }, w }, { "fc.bias", 1, { 1 }, b } };
    char path[2300], tmp[2400], err[512];
    snprintf (path, sizeof path, "%s/%s.safetensors", s_dir, name);
    snprintf (tmp, sizeof tmp, "%s.tmp", path);
    ck_assert_msg (safetensors_write_f32 (tmp, t, 2, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq (rename (tmp, path), 0);   /* a new inode: what an exporter's atomic write gives */
}

/* DIR/NAME written with ENDPOINTS (a JSON list's inside), SERVER (more server keys: ", ..." or "") and
 * MODELS (JSON objects), by rename. */
static char *s_config_server (const char *name, const char *endpoints, const char *server, const char *models)
{
    char json[8192], tmp[64];
    snprintf (json, sizeof json, "{ \"server\": { \"endpoints\": [%s], \"stats_interval_s\": 0%s }, \"models\": [%s] }",
              endpoints, server, models);
    snprintf (tmp, sizeof tmp, "%s.tmp", name);
    char *t = tu_write_file (s_dir, tmp, json, -1);
    char *path = NULL;
    ck_assert_int_gt (asprintf (&path, "%s/%s", s_dir, name), 0);
    ck_assert_int_eq (rename (t, path), 0);
    free (t);
    return path;
}

static char *s_config (const char *name, const char *endpoints, const char *models)
{
    return s_config_server (name, endpoints, "", models);
}

/* A model NAME over DIR/FILE.safetensors, with EXTRA keys (", ..." or ""). */
static char *s_model (const char *name, const char *file, const char *extra)
{
    char *m = NULL;
    ck_assert_int_gt (asprintf (&m, "{ \"name\": \"%s\", \"backend\": \"cpu\", \"max_rows\": 1, \"weights\": "
                                    "\"%s/%s.safetensors\", \"layers\": [ { \"weight\": \"fc.weight\" } ]%s }",
                                name, s_dir, file, extra), 0);
    return m;
}

static pid_t s_spawn (const char *config, const char *log, bool watch)
{
    char bin[2300];
    snprintf (bin, sizeof bin, "%s/sigserve", tu_build_dir ());
    pid_t pid = fork ();
    ck_assert_int_ge (pid, 0);
    if (pid == 0) {
        FILE *f = freopen (log, "w", stderr);
        (void) f;
        execl (bin, bin, "--config", config, "--log-level", "info", watch ? "--watch" : (char *) NULL, (char *) NULL);
        _exit (127);
    }
    return pid;
}

/* The messages of LOG's lines ("<time> <level> <message>" with the time dropped: "info  ..."), up to
 * MAX; the count. The caller frees each. */
static size_t s_lines (const char *log, char **lines, size_t max)
{
    FILE *f = fopen (log, "r");
    size_t n = 0;
    char line[8192];
    while (f && n < max && fgets (line, sizeof line, f)) {
        line[strcspn (line, "\n")] = '\0';
        const char *space = strchr (line, ' ');
        lines[n++] = strdup (space ? space + 1 : line);
    }
    if (f)
        fclose (f);
    return n;
}

static void s_free_lines (char **lines, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free (lines[i]);
}

/* How many of LOG's lines are exactly LINE (after the time). */
static int s_count (const char *log, const char *line)
{
    char *lines[1024];
    size_t n = s_lines (log, lines, 1024);
    int count = 0;
    for (size_t i = 0; i < n; i++)
        count += strcmp (lines[i], line) == 0;
    s_free_lines (lines, n);
    return count;
}

/* Waits (up to WAIT_MS) until LOG has LINE COUNT times; fails the test if it never does or PID exits. */
static void s_wait_line (pid_t pid, const char *log, const char *line, int count)
{
    for (int waited = 0; waited < WAIT_MS; waited += 20) {
        if (s_count (log, line) >= count)
            return;
        int status;
        ck_assert_msg (waitpid (pid, &status, WNOHANG) == 0, "sigserve exited waiting for \"%s\"", line);
        usleep (20000);
    }
    char *lines[1024];
    size_t n = s_lines (log, lines, 1024);
    for (size_t i = 0; i < n; i++)
        fprintf (stderr, "  log: %s\n", lines[i]);
    s_free_lines (lines, n);
    ck_abort_msg ("no line \"%s\" (x%d) in %s", line, count, log);
}

/* MODEL's output for the features 1, 2, 3, 4 (one row), asked of ENDPOINT. */
static float s_infer (const char *endpoint, const char *model)
{
    const float x[4] = { 1, 2, 3, 4 };
    uint8_t buf[512];
    size_t len = tu_pack_infer (buf, sizeof buf, model, x, 4, 1, 1, 0);
    ck_assert_uint_gt (len, 0);
    void *ctx = zmq_ctx_new (), *s = zmq_socket (ctx, ZMQ_DEALER);
    int timeout = WAIT_MS, linger = 0;
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
    ck_assert_uint_eq (r->infer->n_outputs, 1);
    float y = r->infer->outputs[0];
    sigserve__v1__reply__free_unpacked (r, NULL);
    zmq_msg_close (&m);
    zmq_close (s);
    zmq_ctx_term (ctx);
    return y;
}

static void s_endpoint (char *endpoint, size_t len, char *quoted, size_t qlen)
{
    snprintf (endpoint, len, "tcp://127.0.0.1:%d", tu_free_port ());
    snprintf (quoted, qlen, "\"%s\"", endpoint);
}

START_TEST (watch_reloads_a_changed_weights_file)
{
    char endpoint[64], quoted[80], log[2300], line[4600];
    s_endpoint (endpoint, sizeof endpoint, quoted, sizeof quoted);
    s_weights ("sum", 1);
    char *model = s_model ("sum", "sum", "");
    char *config = s_config ("watch.json", quoted, model);
    snprintf (log, sizeof log, "%s/watch.log", s_dir);
    pid_t pid = s_spawn (config, log, true);
    s_wait_line (pid, log, "info  sigserve " SIGSERVE_VERSION " ready", 1);
    ck_assert_float_eq (s_infer (endpoint, "sum"), 10);
    /* new weights, the config untouched: no signal, --watch sees the file */
    s_weights ("sum", 2);
    s_wait_line (pid, log, "info  reload: serving 1 model(s) (0 unchanged, 1 loaded: sum (its weights file changed)) on 1 "
                 "endpoint(s)", 1);
    ck_assert_float_eq (s_infer (endpoint, "sum"), 20);
    s_wait_line (pid, log, "info  reload: the previous load of 1 reloaded model(s) is unloaded: sum", 1);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    snprintf (line, sizeof line, "info  reload (the weights file of model \"sum\" changed): reading %s", config);
    ck_assert_int_eq (s_count (log, line), 1);
    /* nothing was removed, and the one change reloaded once */
    char *lines[1024];
    size_t n = s_lines (log, lines, 1024);
    int removed = 0, reloads = 0;
    for (size_t i = 0; i < n; i++) {
        removed += strstr (lines[i], "no longer served") != NULL;
        reloads += strncmp (lines[i], "info  reload (", 14) == 0;
    }
    s_free_lines (lines, n);
    ck_assert_int_eq (removed, 0);
    ck_assert_int_eq (reloads, 1);
    free (config);
    free (model);
}
END_TEST

START_TEST (the_start_counts_the_models_once_they_are_loaded)
{
    char endpoint[64], quoted[80], log[2300];
    s_endpoint (endpoint, sizeof endpoint, quoted, sizeof quoted);
    s_weights ("start", 1);
    char *model = s_model ("start", "start", "");
    char *config = s_config ("start.json", quoted, model);
    snprintf (log, sizeof log, "%s/start.log", s_dir);
    pid_t pid = s_spawn (config, log, false);
    s_wait_line (pid, log, "info  sigserve " SIGSERVE_VERSION " ready", 1);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    /* Each once, the count after both the bound line and the model's load line, then ready. The front
     * thread says it bound while the main thread loads the model: those two lines come in either order. */
    const char *want[4] = { "info  1 endpoint(s) bound, over zmtp; the models are loading",
                            "info  model start version 1: 4 -> 1, backend cpu (config), kernel loop",
                            "info  serving 1 model(s) on 1 endpoint(s)", "info  sigserve " SIGSERVE_VERSION " ready" };
    size_t at[4] = { 0 };
    int seen[4] = { 0 };
    char *lines[1024];
    size_t n = s_lines (log, lines, 1024);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg (strstr (lines[i], "serving 0 model(s)") == NULL, "%s", lines[i]);
        for (int w = 0; w < 4; w++)
            if (strncmp (lines[i], want[w], strlen (want[w])) == 0 && (w != 2 || strlen (lines[i]) == strlen (want[w]))) {
                at[w] = i;
                seen[w]++;
            }
    }
    s_free_lines (lines, n);
    for (int w = 0; w < 4; w++)
        ck_assert_msg (seen[w] == 1, "the line \"%s\" is there %d times in %s", want[w], seen[w], log);
    ck_assert_msg (at[0] < at[2] && at[1] < at[2] && at[2] < at[3], "out of order in %s: bound %zu, model %zu, "
                   "serving %zu, ready %zu", log, at[0], at[1], at[2], at[3]);
    free (config);
    free (model);
}
END_TEST

START_TEST (a_reload_names_what_it_loaded_and_unloaded)
{
    char endpoint[64], quoted[80], log[2300], line[4600];
    s_endpoint (endpoint, sizeof endpoint, quoted, sizeof quoted);
    s_weights ("a", 1);
    s_weights ("b", 3);
    char *a = s_model ("a", "a", ""), *b = s_model ("b", "b", ""), *b2 = s_model ("b", "b", ", \"max_queue_us\": 5000");
    char *config = s_config ("reload.json", quoted, a);
    snprintf (log, sizeof log, "%s/reload.log", s_dir);
    pid_t pid = s_spawn (config, log, false);
    s_wait_line (pid, log, "info  sigserve " SIGSERVE_VERSION " ready", 1);
    /* 1. b added: a taken over */
    char models[4096];
    snprintf (models, sizeof models, "%s, %s", a, b);
    free (s_config ("reload.json", quoted, models));
    kill (pid, SIGHUP);
    s_wait_line (pid, log, "info  reload: serving 2 model(s) (1 unchanged, 1 loaded: b (new)) on 1 endpoint(s)", 1);
    ck_assert_float_eq (s_infer (endpoint, "b"), 30);
    /* 2. a removed, b's configuration changed: one set retires with both, each said for what it is */
    free (s_config ("reload.json", quoted, b2));
    kill (pid, SIGHUP);
    s_wait_line (pid, log, "info  reload: serving 1 model(s) (0 unchanged, 1 loaded: b (its configuration changed)) on 1 "
                 "endpoint(s)", 1);
    s_wait_line (pid, log, "info  reload: 1 model(s) no longer served are unloaded: a", 1);
    s_wait_line (pid, log, "info  reload: the previous load of 1 reloaded model(s) is unloaded: b", 1);
    /* 3. an endpoint the transport cannot bind: refused before anything binds, the old config serves */
    const int port = tu_free_port ();
    char endpoints[256];
    snprintf (endpoints, sizeof endpoints, "%s, \"tcp://localhost:%d\"", quoted, port);
    free (s_config ("reload.json", endpoints, b2));
    kill (pid, SIGHUP);
    snprintf (line, sizeof line, "error reload failed, nothing changed, the previous configuration keeps serving: "
              "server.endpoints[1]: cannot bind tcp://localhost:%d: No such device (ZeroMQ binds an address or an "
              "interface name, not a host name: \"localhost\" is 127.0.0.1, so use tcp://127.0.0.1:%d, or tcp://*:%d "
              "for every interface)", port, port, port);
    s_wait_line (pid, log, line, 1);
    ck_assert_float_eq (s_infer (endpoint, "b"), 30);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    /* the first reload unloaded nothing */
    char *lines[1024];
    size_t n = s_lines (log, lines, 1024);
    int unloaded = 0;
    for (size_t i = 0; i < n; i++)
        unloaded += strstr (lines[i], "unloaded") != NULL;
    s_free_lines (lines, n);
    ck_assert_int_eq (unloaded, 2);
    free (config);
    free (a);
    free (b);
    free (b2);
}
END_TEST

/* A reload binds with the running transport (server.transport waits for a restart), so its endpoints are
 * checked by that transport's rules, not the file's: an inproc:// endpoint, which libzmq would bind, is
 * refused before anything binds when the server runs zmtp, with the engine's message and the reason the
 * file's transport did not apply; the old configuration keeps serving, and the file then starts as is. */
START_TEST (a_reload_checks_endpoints_by_the_running_transport)
{
    char endpoint[64], quoted[80], log[2300], line[4600];
    s_endpoint (endpoint, sizeof endpoint, quoted, sizeof quoted);
    s_weights ("t", 1);
    char *model = s_model ("t", "t", "");
    char *config = s_config ("transport.json", quoted, model);
    snprintf (log, sizeof log, "%s/transport.log", s_dir);
    pid_t pid = s_spawn (config, log, false);
    s_wait_line (pid, log, "info  1 endpoint(s) bound, over zmtp; the models are loading", 1);
    s_wait_line (pid, log, "info  sigserve " SIGSERVE_VERSION " ready", 1);
    char endpoints[256];
    snprintf (endpoints, sizeof endpoints, "%s, \"inproc://reload-check\"", quoted);
    free (s_config_server ("transport.json", endpoints, ", \"transport\": \"libzmq\"", model));
    kill (pid, SIGHUP);
    snprintf (line, sizeof line, "error reload failed, nothing changed, the previous configuration keeps serving: "
              "server.endpoints[1]: cannot bind inproc://reload-check: inproc:// is libzmq's in-process transport; the "
              "zmtp transport serves tcp:// and ipc:// (use ipc://, or server.transport \"libzmq\"); this server runs "
              "the zmtp transport until a restart (server.transport takes effect then)");
    s_wait_line (pid, log, line, 1);
    ck_assert_float_eq (s_infer (endpoint, "t"), 10);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    /* the same file, started: libzmq binds it */
    snprintf (log, sizeof log, "%s/transport-restart.log", s_dir);
    pid = s_spawn (config, log, false);
    s_wait_line (pid, log, "info  2 endpoint(s) bound, over libzmq; the models are loading", 1);
    s_wait_line (pid, log, "info  sigserve " SIGSERVE_VERSION " ready", 1);
    ck_assert_float_eq (s_infer (endpoint, "t"), 10);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    free (config);
    free (model);
}
END_TEST

START_TEST (help_says_watch_follows_the_weights)
{
    char cmd[2300], out[4096];
    snprintf (cmd, sizeof cmd, "%s/sigserve --help", tu_build_dir ());
    FILE *p = popen (cmd, "r");
    size_t n = fread (out, 1, sizeof out - 1, p);
    out[n] = '\0';
    ck_assert_int_eq (WEXITSTATUS (pclose (p)), 0);
    ck_assert_msg (strstr (out, "\n  --watch              reload when FILE or a model's weights file changes, as on "
                                "SIGHUP\n") != NULL, "%s", out);
}
END_TEST

int main (void)
{
    s_dir = tu_tmpdir ();
    Suite *s = suite_create ("reload_log");
    TCase *tc = tcase_create ("reload_log");
    tcase_set_timeout (tc, 180);
    tcase_add_test (tc, watch_reloads_a_changed_weights_file);
    tcase_add_test (tc, the_start_counts_the_models_once_they_are_loaded);
    tcase_add_test (tc, a_reload_names_what_it_loaded_and_unloaded);
    tcase_add_test (tc, a_reload_checks_endpoints_by_the_running_transport);
    tcase_add_test (tc, help_says_watch_follows_the_weights);
    suite_add_tcase (s, tc);
    int rc = tu_run_suite (s);
    if (rc == 0)
        tu_remove_tree (s_dir);
    free (s_dir);
    return rc;
}
