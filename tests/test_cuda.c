/* GPU suite: every CUDA kernel, direct and graph, against the CPU backend's float64 reference on
 * fresh random inputs with poisoned outputs; every batch size; the wait modes; backend selection;
 * a lost context; and the real server serving CUDA models over sockets with the same outputs as
 * the CPU backend. Prints "SKIP: <why>" and passes where there is no CUDA build or no device.
 * CUDA does not survive fork(): only the forked tests touch it, never the parent. */
#include "rng.h"
#include "st_write.h"
#include "reference.h"
#include "autoselect.h"
#include "backend.h"
#include "config.h"
#include "weights.h"
#include "model.h"
#include "registry.h"
#include "safetensors.h"
#include "signal.pb-c.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#ifdef SIGSERVE_HAVE_CUDA
#include "backend_cuda.h"

static uint64_t s_seed;

static model_config_t s_config (cuda_kernel_t kernel, bool graph, uint32_t max_rows)
{
    model_config_t cfg;
    memset (&cfg, 0, sizeof cfg);
    snprintf (cfg.name, sizeof cfg.name, "gpu-%s", cuda_kernel_name (kernel));
    strcpy (cfg.version, "1");
    cfg.backend = BACKEND_CUDA;
    cfg.kernel = kernel;
    cfg.graph = graph;
    cfg.wait = CUDA_WAIT_SPIN;
    cfg.max_rows = max_rows;
    return cfg;
}

/* Pooled ||out - ref|| / ||ref|| over at least 256 outputs from fresh inputs, each run on poisoned
 * buffers, so an output the kernels never write shows as NaN. */
static double s_error (backend_model_t *m, const weights_t *w, uint32_t rows)
{
    size_t nin = (size_t) rows * w->input_size, nout = (size_t) rows * w->output_size;
    int rounds = nout >= 64 ? 4 : (int) ((256 + nout - 1) / nout);
    float *in = malloc (nin * sizeof (float)), *out = malloc (nout * sizeof (float));
    double *ref = malloc (nout * sizeof (double));
    double num = 0, den = 0;
    char err[512] = "";
    for (int round = 0; round < rounds; round++) {
        for (size_t i = 0; i < nin; i++)
            in[i] = rng_uniform (&s_seed, -1.0f, 1.0f);
        ck_assert_int_eq (cuda_model_poison (m), 0);
        for (size_t i = 0; i < nout; i++)
            out[i] = NAN;
        sig_status_t st = backend_cuda_iface.infer (m, in, rows, out, err, sizeof err);
        ck_assert_msg (st == SIG_OK, "infer: %s", err);
        reference_forward (w, in, rows, ref);
        for (size_t i = 0; i < nout; i++) {
            ck_assert_msg (isfinite (out[i]), "output %zu of %zu not written (rows %u)", i, nout, rows);
            num += ((double) out[i] - ref[i]) * ((double) out[i] - ref[i]);
            den += ref[i] * ref[i];
        }
    }
    free (in);
    free (out);
    free (ref);
    return den > 0 ? sqrt (num / den) : sqrt (num);
}

static void s_check_model_zc (const uint32_t *sizes, const activation_t *acts, size_t layers, cuda_kernel_t kernel,
                              bool graph, bool zero_copy, const uint32_t *rows_list, size_t nrows, const char *label)
{
    weights_t *w = weights_random (sizes, acts, layers, rng_next (&s_seed));
    uint32_t max_rows = 0;
    for (size_t r = 0; r < nrows; r++)
        if (rows_list[r] > max_rows)
            max_rows = rows_list[r];
    model_config_t cfg = s_config (kernel, graph, max_rows);
    cfg.zero_copy = zero_copy;
    char err[512] = "";
    backend_model_t *m = backend_cuda_iface.load (w, &cfg, cfg.device, err, sizeof err);
    ck_assert_msg (m != NULL, "%s: load: %s", label, err);
    for (size_t r = 0; r < nrows; r++) {
        double e = s_error (m, w, rows_list[r]);
        ck_assert_msg (e <= 1e-5, "%s kernel %s graph %d zero_copy %d rows %u: relative error %.3g", label,
                       cuda_kernel_name (kernel), graph, zero_copy, rows_list[r], e);
    }
    backend_cuda_iface.destroy (&m);
    ck_assert_ptr_null (m);
    weights_destroy (&w);
}

static void s_check_model (const uint32_t *sizes, const activation_t *acts, size_t layers, cuda_kernel_t kernel,
                           bool graph, const uint32_t *rows_list, size_t nrows, const char *label)
{
    s_check_model_zc (sizes, acts, layers, kernel, graph, false, rows_list, nrows, label);
}

/* _i: kernel * 2 + graph. The shapes (out x in), rows 1 and 7, each activation in turn. */
START_TEST (single_layers_match_reference)
{
    const cuda_kernel_t kernel = (cuda_kernel_t) (_i / 2);
    const bool graph = _i % 2;
    const uint32_t shapes[][2] = { { 1, 1 }, { 33, 31 }, { 597, 293 }, { 512, 256 }, { 4097, 129 }, { 64, 256 }, { 3, 8192 } };
    const uint32_t rows[] = { 1, 7 };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const uint32_t sizes[2] = { shapes[s][1], shapes[s][0] };
        const activation_t act = (activation_t) (s % 4);
        char label[64];
        snprintf (label, sizeof label, "%ux%u act %s", shapes[s][0], shapes[s][1], activation_name (act));
        s_check_model (sizes, &act, 1, kernel, graph, rows, 2, label);
    }
}
END_TEST

/* _i: kernel * 4 + zero_copy * 2 + graph. */
START_TEST (chains_match_reference)
{
    const cuda_kernel_t kernel = (cuda_kernel_t) (_i / 4);
    const bool graph = _i % 2, zero_copy = (_i / 2) % 2;
    const uint32_t demo[] = { 512, 256, 64, 1 }, odd[] = { 293, 597, 31, 33, 1 }, tiny[] = { 1, 1, 1 };
    const activation_t demo_acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    const activation_t odd_acts[] = { ACTIVATION_TANH, ACTIVATION_RELU, ACTIVATION_SIGMOID, ACTIVATION_NONE };
    const uint32_t rows[] = { 1, 3, 7 };
    s_check_model_zc (demo, demo_acts, 3, kernel, graph, zero_copy, rows, 3, "512-256-64-1");
    s_check_model_zc (odd, odd_acts, 4, kernel, graph, zero_copy, rows, 3, "293-597-31-33-1");
    s_check_model_zc (tiny, demo_acts, 2, kernel, graph, zero_copy, rows, 3, "1-1-1");
}
END_TEST

/* One graph per batch size: every size up to max_rows picks its own and gets its own answer. */
START_TEST (every_batch_size)
{
    const uint32_t demo[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    const uint32_t rows[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
    s_check_model (demo, acts, 3, (cuda_kernel_t) _i, true, rows, 9, "every rows");
}
END_TEST

START_TEST (wait_modes)
{
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, 99);
    for (int mode = 0; mode < 3; mode++) {
        model_config_t cfg = s_config (CUDA_KERNEL_WARP, true, 4);
        cfg.wait = (cuda_wait_t) mode;
        char err[512];
        backend_model_t *m = backend_cuda_iface.load (w, &cfg, cfg.device, err, sizeof err);
        ck_assert_msg (m != NULL, "%s", err);
        double e = s_error (m, w, 4);
        ck_assert_msg (e <= 1e-5, "wait %s: relative error %.3g", cuda_wait_name ((cuda_wait_t) mode), e);
        backend_cuda_iface.destroy (&m);
    }
    weights_destroy (&w);
}
END_TEST

/* "auto" measures every candidate on the real weights and keeps the lowest rows-1 p99; every
 * CUDA kernel this device runs is among the measured; a missing device is named. */
START_TEST (auto_measures_candidates_and_names_missing_devices)
{
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, 7);
    model_config_t cfg = s_config (CUDA_KERNEL_WARP, true, 4);
    cfg.backend = BACKEND_AUTO;
    autoselect_candidate_t c[16];
    size_t n = 0;
    char err[512] = "";
    const backend_iface_t *chosen = autoselect_choose (w, &cfg, 0, c, 16, &n, err, sizeof err);
    ck_assert_msg (chosen != NULL, "%s", err);
    ck_assert_uint_ge (n, 9);       /* cpu, and warp/cublas/mbyv/fused with and without zero-copy */
    ck_assert_str_eq (c[0].note, "");
    ck_assert_str_eq (c[0].backend, chosen->name);
    ck_assert_int_eq (cfg.backend, chosen == &backend_cpu_iface ? BACKEND_CPU : BACKEND_CUDA);
    int cuda_measured = 0;
    for (size_t i = 0; i < n; i++) {
        if (c[i].note[0])
            continue;
        ck_assert (c[i].p99_us >= c[0].p99_us);
        ck_assert (c[i].p50_us > 0 && c[i].batch_p50_us > 0);
        ck_assert_uint_eq (c[i].batch_rows, 4);
        cuda_measured += strcmp (c[i].backend, "cuda") == 0;
    }
    ck_assert_int_ge (cuda_measured, 8);
    /* An explicit kernel restricts the CUDA candidates to it. */
    cfg = s_config (CUDA_KERNEL_MBYV, true, 4);
    cfg.backend = BACKEND_AUTO;
    cfg.kernel_given = true;
    ck_assert_ptr_nonnull (autoselect_choose (w, &cfg, 0, c, 16, &n, err, sizeof err));
    ck_assert_uint_eq (n, 3);
    for (size_t i = 0; i < n; i++)
        ck_assert (strcmp (c[i].backend, "cpu") == 0 || strncmp (c[i].kernel, "mbyv", 4) == 0);
    weights_destroy (&w);
    /* backend "cuda" on a device that does not exist: refused, naming it. */
    char *dir = tu_tmpdir ();
    cfg = s_config (CUDA_KERNEL_WARP, true, 1);
    cfg.backend = BACKEND_CUDA;
    cfg.devices[0] = cfg.device = 63;
    cfg.device_count = 1;
    cfg.instances = 1;
    cfg.max_batch_rows = 1;
    cfg.queue_depth = 4;
    snprintf (cfg.weights, sizeof cfg.weights, "%s/models/tick_mlp.safetensors", tu_build_dir ());
    cfg.layer_count = 3;
    for (int i = 0; i < 3; i++) {
        snprintf (cfg.layers[i].weight, sizeof cfg.layers[i].weight, "%d.weight", 2 * i);
        snprintf (cfg.layers[i].bias, sizeof cfg.layers[i].bias, "%d.bias", 2 * i);
    }
    server_config_t server = { .max_message_bytes = 65536 };
    model_t *m = model_new (&cfg, &server, NULL, err, sizeof err);
    ck_assert_ptr_null (m);
    ck_assert_msg (strstr (err, "backend \"cuda\": device 63 does not exist (this machine has"), "%s", err);
    tu_remove_tree (dir);
    free (dir);
}
END_TEST

/* ---- a lost context: the model answers UNAVAILABLE, the registry says not ready, others serve ---- */

static char *s_write_weights (const char *dir, const weights_t *w)
{
    st_write_tensor_t t[2 * 8];
    char names[2 * 8][16];
    for (size_t i = 0; i < w->layer_count; i++) {
        snprintf (names[2 * i], 16, "%zu.weight", 2 * i);
        snprintf (names[2 * i + 1], 16, "%zu.bias", 2 * i);
        t[2 * i] = (st_write_tensor_t) { names[2 * i], 2, { w->layers[i].out, w->layers[i].in }, w->layers[i].weight };
        t[2 * i + 1] = (st_write_tensor_t) { names[2 * i + 1], 1, { w->layers[i].out }, w->layers[i].bias };
    }
    char *path = malloc (4200), err[512];
    snprintf (path, 4200, "%s/model.safetensors", dir);
    ck_assert_msg (safetensors_write_f32 (path, t, 2 * w->layer_count, err, sizeof err) == 0, "%s", err);
    return path;
}

/* A config serving the same 512-256-64-1 weights on the CPU and on each CUDA kernel. */
static char *s_write_config (const char *dir, const char *weights, const char *endpoint)
{
    char json[8192];
    int n = snprintf (json, sizeof json, "{ \"server\": { \"endpoints\": [\"%s\"], \"log_level\": \"warn\" },\n  \"models\": [\n",
                      endpoint);
    const char *models[][3] = { { "on_cpu", "cpu", "warp" }, { "on_warp", "cuda", "warp" }, { "on_mbyv", "cuda", "mbyv" },
                                { "on_cublas", "cuda", "cublas" }, { "on_fused", "cuda", "fused" } };
    for (int i = 0; i < 5; i++)
        n += snprintf (json + n, sizeof json - (size_t) n,
                       "    { \"name\": \"%s\", \"backend\": \"%s\", \"kernel\": \"%s\", \"max_rows\": 4, \"weights\": \"%s\",\n"
                       "      \"layers\": [ { \"weight\": \"0.weight\", \"activation\": \"relu\" }, { \"weight\": \"2.weight\", "
                       "\"activation\": \"relu\" }, { \"weight\": \"4.weight\" } ] }%s\n",
                       models[i][0], models[i][1], models[i][2], weights, i < 4 ? "," : "");
    snprintf (json + n, sizeof json - (size_t) n, "  ] }\n");
    return tu_write_file (dir, "gpu.json", json, -1);
}

START_TEST (lost_context_marks_model_unavailable)
{
    char *dir = tu_tmpdir ();
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, 5);
    char *weights = s_write_weights (dir, w);
    char *path = s_write_config (dir, weights, "tcp://127.0.0.1:1");
    char err[1024];
    config_t *cfg = config_load (path, err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    model_registry_t *models = model_registry_new (cfg, err, sizeof err);
    ck_assert_msg (models != NULL, "%s", err);
    ck_assert (model_registry_ready (models));
    model_t *gpu = model_registry_find (models, "on_warp"), *cpu = model_registry_find (models, "on_cpu");
    ck_assert_str_eq (model_backend_name (gpu), "cuda");
    ck_assert_str_eq (model_kernel_name (gpu), "warp+graph");
    float in[512], out[1];
    for (int i = 0; i < 512; i++)
        in[i] = rng_uniform (&s_seed, -1, 1);
    ck_assert_int_eq (model_infer (gpu, in, 1, out, err, sizeof err), SIG_OK);

    ck_assert_int_eq (cuda_model_inject_fault (model_backend_handle (gpu)), 0);
    ck_assert_int_eq (model_infer (gpu, in, 1, out, err, sizeof err), SIG_UNAVAILABLE);
    ck_assert_msg (strstr (err, "model \"on_warp\": CUDA") && strstr (err, "the model is unavailable"), "%s", err);
    ck_assert (!model_available (gpu));
    ck_assert (!model_registry_ready (models));
    ck_assert_int_eq (model_infer (gpu, in, 1, out, err, sizeof err), SIG_UNAVAILABLE);
    ck_assert_str_eq (err, "model \"on_warp\" is unavailable on backend cuda");
    /* The CPU model in the same process still answers, and correctly. */
    double ref;
    reference_forward (w, in, 1, &ref);
    ck_assert_int_eq (model_infer (cpu, in, 1, out, err, sizeof err), SIG_OK);
    ck_assert (fabs (out[0] - ref) <= 1e-5 * fmax (1.0, fabs (ref)));
    /* Destroying a lost model must not hang or crash. */
    model_registry_destroy (&models);
    config_destroy (&cfg);
    weights_destroy (&w);
    tu_remove_tree (dir);
    free (dir);
    free (weights);
    free (path);
}
END_TEST

/* ---- the real server: CUDA models over sockets give what the CPU backend gives ---- */

static Sigserve__V1__Reply *s_call (void *sock, const Sigserve__V1__Request *req)
{
    uint8_t buf[65536];
    size_t len = sigserve__v1__request__pack (req, buf);
    ck_assert_int_eq (zmq_send (sock, buf, len, 0), (int) len);
    int n = zmq_recv (sock, buf, sizeof buf, 0);
    ck_assert_int_gt (n, 0);
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, (size_t) n, buf);
    ck_assert_ptr_nonnull (r);
    return r;
}

START_TEST (server_serves_cuda_like_cpu)
{
    char *dir = tu_tmpdir ();
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, rng_next (&s_seed));
    char *weights = s_write_weights (dir, w);
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    char *path = s_write_config (dir, weights, endpoint);
    pid_t pid = tu_server_start (path, endpoint, 60000);
    ck_assert_msg (pid > 0, "sigserve with CUDA models did not become ready");
    void *ctx = zmq_ctx_new ();
    void *sock = zmq_socket (ctx, ZMQ_DEALER);
    int timeout = 10000, linger = 0;
    zmq_setsockopt (sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt (sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_connect (sock, endpoint);

    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__ListModelsRequest l = SIGSERVE__V1__LIST_MODELS_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_LIST_MODELS;
    req.list_models = &l;
    Sigserve__V1__Reply *r = s_call (sock, &req);
    ck_assert_uint_eq (r->list_models->n_models, 5);
    const char *kernels[] = { "loop", "warp+graph", "mbyv+graph", "cublas+graph", "fused+graph" };
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq (r->list_models->models[i]->backend, i == 0 ? "cpu" : "cuda");
        ck_assert_str_eq (r->list_models->models[i]->kernel, kernels[i]);
    }
    sigserve__v1__reply__free_unpacked (r, NULL);

    const char *names[] = { "on_cpu", "on_warp", "on_mbyv", "on_cublas", "on_fused" };
    double num[5] = { 0 }, den[5] = { 0 }, cross = 0;
    for (int round = 0; round < 32; round++) {
        uint32_t rows = round % 2 ? 4 : 1;
        float in[4 * 512];
        for (uint32_t i = 0; i < rows * 512; i++)
            in[i] = rng_uniform (&s_seed, -1, 1);
        double ref[4];
        reference_forward (w, in, rows, ref);
        float cpu_out[4];
        for (int k = 0; k < 5; k++) {
            Sigserve__V1__InferRequest inf = SIGSERVE__V1__INFER_REQUEST__INIT;
            inf.model = (char *) names[k];
            inf.features = in;
            inf.n_features = rows * 512;
            inf.rows = rows;
            inf.request_id = (uint64_t) (round * 5 + k);
            req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
            req.infer = &inf;
            r = s_call (sock, &req);
            ck_assert_msg (r->infer->status == 0, "%s: %s", names[k], r->infer->error);
            ck_assert_uint_eq (r->infer->n_outputs, rows);
            for (uint32_t i = 0; i < rows; i++) {
                num[k] += ((double) r->infer->outputs[i] - ref[i]) * ((double) r->infer->outputs[i] - ref[i]);
                den[k] += ref[i] * ref[i];
                if (k == 0)
                    cpu_out[i] = r->infer->outputs[i];
                else
                    cross += ((double) r->infer->outputs[i] - cpu_out[i]) * ((double) r->infer->outputs[i] - cpu_out[i]);
            }
            sigserve__v1__reply__free_unpacked (r, NULL);
        }
    }
    for (int k = 0; k < 5; k++)
        ck_assert_msg (sqrt (num[k] / den[k]) <= 1e-5, "%s: relative error %.3g", names[k], sqrt (num[k] / den[k]));
    ck_assert_msg (sqrt (cross / (4 * den[0])) <= 2e-5, "CUDA vs CPU outputs differ: %.3g", sqrt (cross / (4 * den[0])));
    zmq_close (sock);
    zmq_ctx_term (ctx);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    weights_destroy (&w);
    tu_remove_tree (dir);
    free (dir);
    free (weights);
    free (path);
}
END_TEST

/* In a child: is there a device? The parent must not initialise CUDA before Check forks. */
static int s_probe (char *why, size_t len)
{
    int fds[2];
    if (pipe (fds) != 0)
        return 0;
    pid_t pid = fork ();
    if (pid == 0) {
        close (fds[0]);
        int count = 0;
        char reason[256] = "";
        int rc = cuda_device_count (&count, reason, sizeof reason);
        ssize_t ignored = write (fds[1], reason, strlen (reason) + 1);
        (void) ignored;
        _exit (rc == 0 ? 0 : 1);
    }
    close (fds[1]);
    ssize_t n = read (fds[0], why, len - 1);
    why[n > 0 ? n : 0] = 0;
    close (fds[0]);
    int status = 0;
    waitpid (pid, &status, 0);
    return WIFEXITED (status) && WEXITSTATUS (status) == 0;
}

int main (void)
{
    char why[256];
    if (!s_probe (why, sizeof why)) {
        printf ("SKIP: no CUDA device: %s\n", why);
        return 0;
    }
    s_seed = (uint64_t) time (NULL) * 0x9e3779b97f4a7c15ull;
    printf ("seed %llu\n", (unsigned long long) s_seed);
    Suite *s = suite_create ("cuda");
    TCase *tc = tcase_create ("kernels");
    tcase_set_timeout (tc, 600);
    tcase_add_loop_test (tc, single_layers_match_reference, 0, 8);
    tcase_add_loop_test (tc, chains_match_reference, 0, 16);
    tcase_add_loop_test (tc, every_batch_size, 0, 4);
    tcase_add_test (tc, wait_modes);
    tcase_add_test (tc, auto_measures_candidates_and_names_missing_devices);
    tcase_add_test (tc, lost_context_marks_model_unavailable);
    tcase_add_test (tc, server_serves_cuda_like_cpu);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}

#else

int main (void)
{
    printf ("SKIP: this build has no CUDA backend (nvcc was not found when it was built)\n");
    return 0;
}

#endif
