/* Every error that suggests a fix suggests one that works (issue 39): for each message of the
 * configuration checks that offers a fix (config.c, a model's load in serving/model.c), a bad config
 * gets exactly that message, and each fix the message offers, applied to the config, passes. A fix is
 * applied as edits to the config's JSON, and the words of the message that offer it are asserted in the
 * message, so the two cannot drift apart.
 *
 * Two tables: one run through the real binary (sigserve --check-config, as a user would: the message
 * on its output, exit 2; the fixed config prints "ok", exit 0), and one for the message-size advice
 * whose fixed configs hold requests of up to 64 MiB: too much memory to load in a test, so there the
 * fix is checked against the check that refused it (model_check_request_size, on the parsed config and
 * its weights). Runs from the repository root. */
#include "check_config_tests.h"

#include "backends/backends.h"
#include "lstm_reference.h"
#include "serving/model.h"
#include "st_write.h"
#include "weights/weights.h"

/* Why backend "cuda" cannot load on this host, as the load says it (test_startup.c asserts the same). */
static const char *s_no_cuda (void)
{
    return backends_gpu_built () ? "no NVIDIA driver on this host (no /proc/driver/nvidia): no GPU, or its driver is not "
                          "installed"
                        : BACKENDS_NO_GPU;
}

static bool s_cuda_runs (void)
{
    return backends_gpu_built () && (access ("/proc/driver/nvidia/version", F_OK) == 0 || access ("/dev/nvidiactl", F_OK) == 0);
}

#define SERVER_AT(extra) "'server': {'endpoints': ['tcp://127.0.0.1:1']" extra "}"
#define DEMO_LAYERS "'layers': [{'weight': '0.weight', 'activation': 'relu'}, {'weight': '2.weight', 'activation': " \
                    "'relu'}, {'weight': '4.weight'}]"
#define DEMO_MODEL(extra) "{'name': 'm', 'weights': '{DEMO}', " DEMO_LAYERS extra "}"
#define WIDE_MODEL(extra) "{'name': 'seq', 'type': 'lstm', 'weights': '{DIR}/wide.safetensors', 'lstm': 'lstm.', 'max_streams': 1, " \
                          "'head': {'weight': 'head.weight'}" extra "}"
#define CONFIG(server, model) "{" server ", 'models': [" model "]}"
/* '%s' in a message: what CUDA's absence is called on this host (s_no_cuda) */
#define NO_CUDA "%s"

static const check_case_t s_cases[] = {
    /* serving/model.c: requests that ZeroMQ would drop for their size */
    { "max_rows over the message size", CONFIG (SERVER_AT (""), DEMO_MODEL (", 'backend': 'cpu', 'max_rows': 64")),
      "model \"m\": max_rows: a request of 64 rows x 512 features takes up to 131200 bytes, over "
      "server.max_message_bytes (65536); lower max_rows to 31 or raise max_message_bytes to 131200",
      { { "lower max_rows to 31", { "models.0.max_rows=31" } },
        { "raise max_message_bytes to 131200", { "server.max_message_bytes=131200" } } } },
    /* the issue's: an LSTM window of 2048 steps, not one row fitting (it was told "lower max_rows to 0") */
    { "an LSTM window over the message size",
      CONFIG (SERVER_AT (""), WIDE_MODEL (", 'backend': 'cpu', 'window': 2048, 'max_rows': 1")),
      "model \"seq\": max_rows: a request of 1 rows x 16384 features takes up to 65664 bytes, over "
      "server.max_message_bytes (65536); not one row fits: raise max_message_bytes to 65664",
      { { "raise max_message_bytes to 65664", { "server.max_message_bytes=65664" } } } },

    /* serving/model.c: what goes only with a GPU backend */
    { "bf16 weights on the CPU's blas kernel",
      CONFIG (SERVER_AT (""), DEMO_MODEL (", 'backend': 'cpu', 'cpu_kernel': 'blas', 'weight_dtype': 'bf16'")),
      "model \"m\": weight_dtype \"bf16\": cpu_kernel \"blas\" holds weights in f32 only; use \"cpu_kernel\": \"loop\" or "
      "\"weight_dtype\": \"f32\"",
      { { "use \"cpu_kernel\": \"loop\"", { "models.0.cpu_kernel='loop'" } },
        { "or \"weight_dtype\": \"f32\"", { "models.0.weight_dtype='f32'" } } } },
    { "keep_warm_us in a group", CONFIG (SERVER_AT (""), DEMO_MODEL (", 'backend': 'cpu', 'group': 'g', 'keep_warm_us': 100")),
      "model \"m\": keep_warm_us: a model in a group (\"g\") is served by the group's workers, which keep no one model "
      "warm; remove keep_warm_us or group",
      { { "remove keep_warm_us", { "models.0.keep_warm_us=" } }, { "or group", { "models.0.group=" } } } },

    /* base/config.c */
    { "a bias name that cannot be derived", CONFIG (SERVER_AT (""), "{'name': 'm', 'backend': 'cpu', 'weights': '{DIR}/named.safetensors', "
      "'layers': [{'weight': 'proj'}]}"),
      "models[0].layers[0].bias: required key missing: the weight \"proj\" does not end in \".weight\", so the bias name "
      "cannot be derived; give \"bias\" (a tensor name, or null for none)",
      { { "give \"bias\" (a tensor name", { "models.0.layers.0.bias='proj_bias'" } },
        { "or null for none", { "models.0.layers.0.bias=null" } } } },
    { "device and devices", CONFIG (SERVER_AT (""), DEMO_MODEL (", 'backend': 'cpu', 'device': 0, 'devices': [0]")),
      "models[0].devices: give either \"device\" (one GPU) or \"devices\" (a list), not both",
      { { "give either \"device\"", { "models.0.devices=" } }, { "or \"devices\"", { "models.0.device=" } } } },
    { "more fronts than endpoints on libzmq",
      CONFIG (SERVER_AT (", 'fronts': 2, 'transport': 'libzmq'"), DEMO_MODEL (", 'backend': 'cpu'")),
      "server.fronts: 2 fronts need at least 2 endpoints on the libzmq transport (an endpoint's socket belongs to one "
      "front); got 1: add endpoints, lower fronts to 1, or use transport \"zmtp\"",
      { { "add endpoints", { "server.endpoints.1='tcp://127.0.0.1:2'" } },
        { "lower fronts to 1", { "server.fronts=1" } },
        { "or use transport \"zmtp\"", { "server.transport='zmtp'" } } } },
    { "more fronts than endpoints on libzmq, a port picked by the system",
      CONFIG ("'server': {'endpoints': ['tcp://127.0.0.1:*'], 'fronts': 2, 'transport': 'libzmq'}",
              DEMO_MODEL (", 'backend': 'cpu'")),
      "server.fronts: 2 fronts need at least 2 endpoints on the libzmq transport (an endpoint's socket belongs to one "
      "front); got 1: add endpoints, lower fronts to 1",
      { { "add endpoints", { "server.endpoints.1='tcp://127.0.0.1:2'" } },
        { "lower fronts to 1", { "server.fronts=1" } } } },
    { "fronts sharing a port the system picks",
      CONFIG ("'server': {'endpoints': ['tcp://127.0.0.1:*'], 'fronts': 2}", DEMO_MODEL (", 'backend': 'cpu'")),
      "server.endpoints[0]: tcp://127.0.0.1:*: more fronts than endpoints share each tcp:// endpoint, which needs a port "
      "number (\"*\" would give each front a port of its own); give it one, or lower fronts to 1",
      { { "give it one", { "server.endpoints.0='tcp://127.0.0.1:1'" } },
        { "lower fronts to 1", { "server.fronts=1" } } } },
    { "inproc on zmtp",
      CONFIG ("'server': {'endpoints': ['tcp://127.0.0.1:1', 'inproc://x']}", DEMO_MODEL (", 'backend': 'cpu'")),
      "server.endpoints[1]: inproc://x: inproc:// is libzmq's in-process transport; the zmtp transport serves tcp:// and "
      "ipc:// (use ipc://, or set server.transport to \"libzmq\")",
      { { "use ipc://", { "server.endpoints.1='ipc://@sigserve-advice-test'" } },
        { "or set server.transport to \"libzmq\"", { "server.transport='libzmq'" } } } },
    /* libzmq would need as many endpoints as fronts: not offered */
    { "inproc on zmtp with more fronts than endpoints",
      CONFIG ("'server': {'endpoints': ['tcp://127.0.0.1:1', 'inproc://x'], 'fronts': 3}", DEMO_MODEL (", 'backend': 'cpu'")),
      "server.endpoints[1]: inproc://x: inproc:// is libzmq's in-process transport; the zmtp transport serves tcp:// and "
      "ipc:// (use ipc://)",
      { { "use ipc://", { "server.endpoints.1='ipc://@sigserve-advice-test'" } } } },
};

/* serving/model.c: a backend this host cannot run (these cases exist only where CUDA cannot run) */
static const check_case_t s_cases_without_gpu[] = {
    { "backend cuda without a GPU", CONFIG (SERVER_AT (""), DEMO_MODEL (", 'backend': 'cuda'")),
      "model \"m\": backend \"cuda\": " NO_CUDA "; use \"backend\": \"cpu\" or \"auto\"",
      { { "use \"backend\": \"cpu\"", { "models.0.backend='cpu'" } },
        { "or \"auto\"", { "models.0.backend='auto'" } } } },
    { "backend cuda without a GPU, weights in f16",
      CONFIG (SERVER_AT (""), WIDE_MODEL (", 'backend': 'cuda', 'window': 8, 'weight_dtype': 'f16'")),
      "model \"seq\": backend \"cuda\": " NO_CUDA "; use \"backend\": \"cpu\" or \"auto\" with \"weight_dtype\": \"f32\"",
      { { "use \"backend\": \"cpu\"", { "models.0.backend='cpu'", "models.0.weight_dtype='f32'" } },
        { "or \"auto\" with \"weight_dtype\": \"f32\"", { "models.0.backend='auto'", "models.0.weight_dtype='f32'" } } } },
    /* the CPU's MLP loop holds bf16 (and f16, int8): nothing else to change */
    { "backend cuda without a GPU, MLP weights in bf16",
      CONFIG (SERVER_AT (""), DEMO_MODEL (", 'backend': 'cuda', 'kernel': 'persistent', 'weight_dtype': 'bf16'")),
      "model \"m\": backend \"cuda\": " NO_CUDA "; use \"backend\": \"cpu\" or \"auto\"",
      { { "use \"backend\": \"cpu\"", { "models.0.backend='cpu'" } },
        { "or \"auto\"", { "models.0.backend='auto'" } } } },
    { "backend cuda without a GPU, in a green context",
      CONFIG (SERVER_AT (""), DEMO_MODEL (", 'backend': 'cuda', 'kernel': 'persistent', 'green_context': true")),
      "model \"m\": backend \"cuda\": " NO_CUDA "; use \"backend\": \"cpu\" or \"auto\" with \"green_context\": false",
      { { "use \"backend\": \"cpu\"", { "models.0.backend='cpu'", "models.0.green_context=false" } },
        { "or \"auto\" with \"green_context\": false", { "models.0.backend='auto'", "models.0.green_context=false" } } } },
    { "f16 weights on the CPU's LSTM, no GPU to offer",
      CONFIG (SERVER_AT (""), WIDE_MODEL (", 'backend': 'cpu', 'window': 8, 'weight_dtype': 'f16'")),
      "model \"seq\": weight_dtype \"f16\": backend \"cpu\" (the LSTM loop) holds weights in f32 and bf16 only; use "
      "\"weight_dtype\": \"f32\"",
      { { "use \"weight_dtype\": \"f32\"", { "models.0.weight_dtype='f32'" } } } },
};

static void s_each_fix_passes (const check_case_t *c)
{
    char message[1024];
    snprintf (message, sizeof message, c->message, s_no_cuda ());
    check_each_fix_passes (c, message);
}

START_TEST (each_fix_offered_passes)
{
    s_each_fix_passes (&s_cases[_i]);
}
END_TEST

START_TEST (each_fix_offered_without_a_gpu_passes)
{
    if (s_cuda_runs ()) {
        printf ("%s: this host runs CUDA; nothing to check\n", s_cases_without_gpu[_i].what);
        return;
    }
    s_each_fix_passes (&s_cases_without_gpu[_i]);
}
END_TEST

/* ---------------------------------------------------------------- requests of up to 64 MiB */

static const check_case_t s_size_cases[] = {
    { "fewer rows fit, more would not fit any message",
      CONFIG (SERVER_AT (", 'max_message_bytes': 1048576"), WIDE_MODEL (", 'window': 4096, 'max_rows': 1024")),
      "model \"seq\": max_rows: a request of 1024 rows x 32768 features takes up to 134217856 bytes, over "
      "server.max_message_bytes (1048576); lower max_rows to 7",
      { { "lower max_rows to 7", { "models.0.max_rows=7" } } } },
    { "not one row fits, nor every row in the largest message",
      CONFIG (SERVER_AT (""), WIDE_MODEL (", 'window': 4096, 'max_rows': 1024")),
      "model \"seq\": max_rows: a request of 1024 rows x 32768 features takes up to 134217856 bytes, over "
      "server.max_message_bytes (65536); not one row fits: lower max_rows to 511 and raise max_message_bytes to 66977920",
      { { "lower max_rows to 511 and raise max_message_bytes to 66977920",
          { "models.0.max_rows=511", "server.max_message_bytes=66977920" } } } },
    { "one window over the largest message",
      CONFIG (SERVER_AT (""), "{'name': 'seq', 'type': 'lstm', 'weights': '{DIR}/vast.safetensors', 'lstm': 'lstm.', 'max_rows': 2, "
              "'window': 4096, 'head': {'weight': 'head.weight'}}"),
      "model \"seq\": max_rows: a request of 2 rows x 16781312 features takes up to 134250624 bytes, over "
      "server.max_message_bytes (65536); one window of 4096 steps is over the largest message (67108864 bytes): lower "
      "window to 4094, max_rows to 1 and raise max_message_bytes to 67092600",
      { { "lower window to 4094, max_rows to 1 and raise max_message_bytes to 67092600",
          { "models.0.window=4094", "models.0.max_rows=1", "server.max_message_bytes=67092600" } } } },
};

/* The parsed config of TEXT, its first model's weights and model_check_request_size's answer in ERR. */
static int s_request_size (const char *text, char *err, size_t errlen)
{
    config_t *cfg = config_parse (text, "test.json", check_dir, err, errlen);
    ck_assert_msg (cfg != NULL, "%s", err);
    weights_t *w = weights_load (&cfg->models[0], err, errlen);
    ck_assert_msg (w != NULL, "%s", err);
    err[0] = '\0';
    int rc = model_check_request_size (&cfg->models[0], w, cfg->server.max_message_bytes, err, errlen);
    weights_destroy (&w);
    config_destroy (&cfg);
    return rc;
}

START_TEST (each_message_size_fix_passes_the_check)
{
    const check_case_t *c = &s_size_cases[_i];
    char err[1024];
    char *bad = check_edited (c->json, NULL);
    ck_assert_int_eq (s_request_size (bad, err, sizeof err), -1);
    ck_assert_msg (strcmp (err, c->message) == 0, "case \"%s\":\n  got      %s\n  expected %s", c->what, err, c->message);
    for (int f = 0; f < FIXES_MAX && c->fixes[f].said; f++) {
        ck_assert_ptr_nonnull (strstr (c->message, c->fixes[f].said));
        char *fixed = check_edited (c->json, c->fixes[f].edits);
        ck_assert_msg (s_request_size (fixed, err, sizeof err) == 0, "case \"%s\": fix \"%s\": %s", c->what,
                       c->fixes[f].said, err);
        free (fixed);
    }
    free (bad);
}
END_TEST

/* ---------------------------------------------------------------- the weights the cases name */

static void s_write_weights (void)
{
    char path[2300], err[512];
    /* an LSTM of 8 inputs a step (a window of 2048 steps: 64 KiB a row, as in the issue) */
    const lstm_shape_t wide = { .layers = 1, .step_size = 8, .hidden = 4, .out = 1, .window = 8 };
    snprintf (path, sizeof path, "%s/wide.safetensors", check_dir);
    ck_assert_msg (lstm_random_file (path, &wide, 1, err, sizeof err) == 0, "%s", err);
    /* 4097 inputs a step: a window of 4096 steps is over 64 MiB */
    const lstm_shape_t vast = { .layers = 1, .step_size = 4097, .hidden = 1, .out = 1, .window = 8 };
    snprintf (path, sizeof path, "%s/vast.safetensors", check_dir);
    ck_assert_msg (lstm_random_file (path, &vast, 2, err, sizeof err) == 0, "%s", err);
    /* a layer whose tensors PyTorch did not name: "proj" and "proj_bias" */
    static float weight[4 * 8], bias[4];
    const st_write_tensor_t named[] = { { "proj", 2, { 4, 8 }, weight }, { "proj_bias", 1, { 4 }, bias } };
    snprintf (path, sizeof path, "%s/named.safetensors", check_dir);
    ck_assert_msg (safetensors_write_f32 (path, named, 2, err, sizeof err) == 0, "%s", err);
}

static void s_setup (void)
{
    check_dir = tu_tmpdir ();
    s_write_weights ();
}

static void s_teardown (void)
{
    tu_remove_tree (check_dir);
    free (check_dir);
}

int main (void)
{
    Suite *s = suite_create ("config_advice");
    TCase *tc = tcase_create ("advice");
    tcase_add_unchecked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 120);
    tcase_add_loop_test (tc, each_fix_offered_passes, 0, (int) (sizeof s_cases / sizeof s_cases[0]));
    tcase_add_loop_test (tc, each_fix_offered_without_a_gpu_passes, 0,
                         (int) (sizeof s_cases_without_gpu / sizeof s_cases_without_gpu[0]));
    tcase_add_loop_test (tc, each_message_size_fix_passes_the_check, 0,
                         (int) (sizeof s_size_cases / sizeof s_size_cases[0]));
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
