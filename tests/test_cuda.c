/* GPU suite: every CUDA kernel, direct and graph, against the float64 reference on fresh random
 * inputs with poisoned outputs, every output within its error bound (tolerance.h); every batch
 * size; the wait modes; backend selection; a lost context; and the real server serving CUDA
 * models over sockets with the same outputs as the CPU backend. Prints "SKIP: <why>" and passes
 * where there is no CUDA build or no device. CUDA does not survive fork(): only the forked tests
 * touch it, never the parent. */
#include "rng.h"
#include "st_write.h"
#include "reference.h"
#include "backends/autoselect.h"
#include "backends/backend.h"
#include "base/config.h"
#include "weights/weights.h"
#include "serving/model.h"
#include "serving/registry.h"
#include "weights/safetensors.h"
#include "signal.pb-c.h"
#include "testutil.h"
#include "tolerance.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "backends/cuda/green.h"
#include "kernels.h"

#include <cublas_v2.h>

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

/* At least 256 outputs from fresh inputs, each run on poisoned buffers, so an output the kernels
 * never write shows as NaN; every output within its error bound of the float64 reference
 * (tolerance.h: an output that cancels to near zero is judged by the sums it came from). WHAT
 * names the case in a failure. */
static void s_check_outputs_held (backend_model_t *m, const weights_t *w, weight_dtype_t held, uint32_t rows,
                                  const char *what)
{
    size_t nin = (size_t) rows * w->input_size, nout = (size_t) rows * w->output_size;
    int rounds = nout >= 64 ? 4 : (int) ((256 + nout - 1) / nout);
    float *in = malloc (nin * sizeof (float)), *out = malloc (nout * sizeof (float));
    double *ref = malloc (nout * sizeof (double)), *bound = malloc (nout * sizeof (double));
    char err[512] = "";
    for (int round = 0; round < rounds; round++) {
        for (size_t i = 0; i < nin; i++)
            in[i] = rng_uniform (&s_seed, -1.0f, 1.0f);
        ck_assert_int_eq (cuda_model_poison (m), 0);
        for (size_t i = 0; i < nout; i++)
            out[i] = NAN;
        sig_status_t st = backend_cuda_iface.infer (m, in, rows, out, err, sizeof err);
        ck_assert_msg (st == SIG_OK, "infer: %s", err);
        for (size_t i = 0; i < nout; i++)
            ck_assert_msg (isfinite (out[i]), "output %zu of %zu not written (rows %u)", i, nout, rows);
        ck_assert_int_eq (tol_mlp_held (w, held, in, rows, ref, bound), 0);
        TOL_ASSERT (out, ref, bound, nout, w->output_size, "%s rows %u round %d (weights in %s)", what, rows, round,
                    weight_dtype_name (held));
    }
    free (in);
    free (out);
    free (ref);
    free (bound);
}

static void s_check_outputs (backend_model_t *m, const weights_t *w, uint32_t rows, const char *what)
{
    s_check_outputs_held (m, w, WEIGHT_DTYPE_F32, rows, what);
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
    char what[160];
    snprintf (what, sizeof what, "%s kernel %s graph %d zero_copy %d", label, cuda_kernel_name (kernel), graph,
              zero_copy);
    for (size_t r = 0; r < nrows; r++)
        s_check_outputs (m, w, rows_list[r], what);
    backend_cuda_iface.destroy (&m);
    ck_assert_ptr_null (m);
    weights_destroy (&w);
}

static void s_check_model (const uint32_t *sizes, const activation_t *acts, size_t layers, cuda_kernel_t kernel,
                           bool graph, const uint32_t *rows_list, size_t nrows, const char *label)
{
    s_check_model_zc (sizes, acts, layers, kernel, graph, false, rows_list, nrows, label);
}

/* _i: kernel * 2 + graph. The issue's shapes (out x in), rows 1 and 7, each activation in turn. */
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
        char what[64];
        snprintf (what, sizeof what, "wait %s", cuda_wait_name ((cuda_wait_t) mode));
        s_check_outputs (m, w, 4, what);
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

/* A config serving the same 512-256-64-1 weights on the CPU and on each CUDA kernel (persistent
 * last: every other kernel has run by the time it is resident). */
static char *s_write_config (const char *dir, const char *weights, const char *endpoint)
{
    char json[8192];
    int n = snprintf (json, sizeof json, "{ \"server\": { \"endpoints\": [\"%s\"], \"log_level\": \"warn\" },\n  \"models\": [\n",
                      endpoint);
    const char *models[][3] = { { "on_cpu", "cpu", "warp" }, { "on_warp", "cuda", "warp" }, { "on_mbyv", "cuda", "mbyv" },
                                { "on_cublas", "cuda", "cublas" }, { "on_fused", "cuda", "fused" },
                                { "on_persistent", "cuda", "persistent" } };
    /* the persistent model: two instances, each in a green context of its own */
    for (int i = 0; i < 6; i++)
        n += snprintf (json + n, sizeof json - (size_t) n,
                       "    { \"name\": \"%s\", \"backend\": \"%s\", \"kernel\": \"%s\", \"max_rows\": 4, \"weights\": \"%s\",%s\n"
                       "      \"layers\": [ { \"weight\": \"0.weight\", \"activation\": \"relu\" }, { \"weight\": \"2.weight\", "
                       "\"activation\": \"relu\" }, { \"weight\": \"4.weight\" } ] }%s\n",
                       models[i][0], models[i][1], models[i][2], weights,
                       i == 5 ? " \"instances\": 2, \"green_context\": true," : "", i < 5 ? "," : "");
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
    ck_assert_msg (strncmp (err, "model \"on_warp\" is unavailable on instance 0: model \"on_warp\": CUDA", 63) == 0,
                   "%s", err);
    /* The CPU model in the same process still answers, and correctly. */
    double ref, bound;
    ck_assert_int_eq (tol_mlp (w, in, 1, &ref, &bound), 0);
    ck_assert_int_eq (model_infer (cpu, in, 1, out, err, sizeof err), SIG_OK);
    TOL_ASSERT (out, &ref, &bound, 1, 1, "on_cpu beside the lost on_warp");
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

/* ---- several GPUs: a model's instances spread over devices, a lost context isolated ---- */

static int s_devices (void)
{
    int n = 0;
    return cudaGetDeviceCount (&n) == cudaSuccess ? n : 0;
}

/* tick_mlp's shape on devices [0, 1] with four instances (0, 1, 0, 1), warp + graph. */
static model_t *s_two_gpu_model (const char *dir, const weights_t *w, char *err, size_t errlen)
{
    char *weights = s_write_weights (dir, w);
    model_config_t cfg = s_config (CUDA_KERNEL_WARP, true, 4);
    cfg.device_count = 2;
    cfg.devices[0] = 0;
    cfg.devices[1] = 1;
    cfg.instances = 4;
    cfg.max_batch_rows = 4;
    cfg.queue_depth = 16;
    snprintf (cfg.weights, sizeof cfg.weights, "%s", weights);
    cfg.layer_count = 3;
    for (int i = 0; i < 3; i++) {
        snprintf (cfg.layers[i].weight, sizeof cfg.layers[i].weight, "%d.weight", 2 * i);
        snprintf (cfg.layers[i].bias, sizeof cfg.layers[i].bias, "%d.bias", 2 * i);
        cfg.layers[i].activation = w->layers[i].activation;
    }
    server_config_t server = { .max_message_bytes = 65536 };
    model_t *m = model_new (&cfg, &server, NULL, err, errlen);
    free (weights);
    return m;
}

START_TEST (instances_spread_over_gpus)
{
    if (s_devices () < 2) {
        printf ("multi-GPU: not run here: needs 2 CUDA devices, this machine has %d\n", s_devices ());
        return;
    }
    char *dir = tu_tmpdir (), err[1024];
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, rng_next (&s_seed));
    model_t *m = s_two_gpu_model (dir, w, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    ck_assert_uint_eq (model_instance_count (m), 4);
    for (uint32_t i = 0; i < 4; i++) {
        ck_assert_int_eq (model_instance_device (m, i), (int) (i % 2));
        /* correct on every GPU, on fresh inputs */
        float in[4 * 512], out[4];
        double ref[4], bound[4];
        for (int round = 0; round < 8; round++) {
            for (int k = 0; k < 4 * 512; k++)
                in[k] = rng_uniform (&s_seed, -1, 1);
            ck_assert_int_eq (tol_mlp (w, in, 4, ref, bound), 0);
            ck_assert_int_eq (model_infer_instance (m, i, in, 4, out, err, sizeof err), SIG_OK);
            TOL_ASSERT (out, ref, bound, 4, 1, "instance %u round %d", i, round);
        }
    }
    model_destroy (&m);
    weights_destroy (&w);
    tu_remove_tree (dir);
    free (dir);
}
END_TEST

/* In one process, a trap on GPU 1 loses GPU 1's instances, each saying so. What it does to GPU 0's
 * context in the same process CUDA leaves undefined (cudaErrorLaunchFailure: "the process must be
 * terminated"), and on an H100 pair GPU 0's instances failed too: that is why the server runs each
 * device's work in a process of its own (test_device_processes: trap_on_gpu_1_leaves_gpu_0_serving
 * checks GPU 0 keeps serving there). Nothing is asserted here about GPU 0. */
START_TEST (lost_gpu_marks_its_instances_unavailable)
{
    if (s_devices () < 2) {
        printf ("multi-GPU: not run here: needs 2 CUDA devices, this machine has %d\n", s_devices ());
        return;
    }
    char *dir = tu_tmpdir (), err[1024];
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, rng_next (&s_seed));
    model_t *m = s_two_gpu_model (dir, w, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    ck_assert_int_eq (cuda_model_inject_fault (model_instance_handle (m, 1)), 0);
    float in[512], out[1];
    for (int k = 0; k < 512; k++)
        in[k] = rng_uniform (&s_seed, -1, 1);
    ck_assert_int_eq (model_infer_instance (m, 1, in, 1, out, err, sizeof err), SIG_UNAVAILABLE);
    ck_assert_int_eq (model_infer_instance (m, 3, in, 1, out, err, sizeof err), SIG_UNAVAILABLE);
    ck_assert (!model_instance_available (m, 1));
    ck_assert (!model_instance_available (m, 3));
    ck_assert_ptr_nonnull (strstr (model_instance_state (m, 1), "CUDA"));
    ck_assert_ptr_nonnull (strstr (model_instance_state (m, 3), "CUDA"));
    model_destroy (&m);
    weights_destroy (&w);
    tu_remove_tree (dir);
    free (dir);
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
    ck_assert_uint_eq (r->list_models->n_models, 6);
    /* the persistent model is specialised for its shapes at load (the configuration's default, specialise) */
    const char *kernels[] = { "loop", "warp+graph", "mbyv+graph", "cublas+graph", "fused+graph", "persistent-nvrtc" };
    for (int i = 0; i < 6; i++) {
        const Sigserve__V1__ModelInfo *mi = r->list_models->models[i];
        ck_assert_str_eq (mi->backend, i == 0 ? "cpu" : "cuda");
        ck_assert_str_eq (mi->kernel, kernels[i]);
        /* green_context: each persistent instance's kernel in a green context of 8 SMs (the H100's and
         * H200's smallest), as its device process loaded it; none elsewhere */
        ck_assert_uint_eq (mi->n_instance_states, i == 5 ? 2 : 1);
        for (size_t k = 0; k < mi->n_instance_states; k++)
            ck_assert_uint_eq (mi->instance_states[k]->green_sms, i == 5 ? 8 : 0);
    }
    sigserve__v1__reply__free_unpacked (r, NULL);

    /* every output within its bound of the float64 reference, and so each CUDA model's within twice
     * that of the CPU model's */
    const char *names[] = { "on_cpu", "on_warp", "on_mbyv", "on_cublas", "on_fused", "on_persistent" };
    for (int round = 0; round < 32; round++) {
        uint32_t rows = round % 2 ? 4 : 1;
        float in[4 * 512];
        for (uint32_t i = 0; i < rows * 512; i++)
            in[i] = rng_uniform (&s_seed, -1, 1);
        double ref[4], bound[4], cpu_ref[4], bound2[4];
        ck_assert_int_eq (tol_mlp (w, in, rows, ref, bound), 0);
        for (int k = 0; k < 6; k++) {
            Sigserve__V1__InferRequest inf = SIGSERVE__V1__INFER_REQUEST__INIT;
            inf.model = (char *) names[k];
            inf.features = in;
            inf.n_features = rows * 512;
            inf.rows = rows;
            inf.request_id = (uint64_t) (round * 6 + k);
            req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
            req.infer = &inf;
            r = s_call (sock, &req);
            ck_assert_msg (r->infer->status == 0, "%s: %s", names[k], r->infer->error);
            ck_assert_uint_eq (r->infer->n_outputs, rows);
            TOL_ASSERT (r->infer->outputs, ref, bound, rows, 1, "%s round %d", names[k], round);
            if (k == 0)
                tol_pair (r->infer->outputs, bound, rows, cpu_ref, bound2);
            else
                TOL_ASSERT (r->infer->outputs, cpu_ref, bound2, rows, 1, "%s against on_cpu, round %d", names[k],
                            round);
            sigserve__v1__reply__free_unpacked (r, NULL);
        }
    }
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

/* ---- kernel "persistent": a resident cluster serving requests through mapped memory ---- */

static const sig_persistent_tuning_t s_default_tuning = { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, 0 };

static model_config_t s_pconfig (uint32_t max_rows, uint32_t watchdog_ms)
{
    model_config_t cfg = s_config (CUDA_KERNEL_PERSISTENT, true, max_rows);
    cfg.watchdog_ms = watchdog_ms;
    return cfg;
}

static backend_model_t *s_pload (const weights_t *w, const model_config_t *cfg, char *err, size_t errlen)
{
    return backend_cuda_iface.load (w, cfg, cfg->device, err, errlen);
}

/* Loads W as a persistent model with TUNING, its weights held in HELD; when it fits, checks rows 1,
 * 3 and max_rows (each output within its bound: tol_mlp_held) and the kernel name, and returns
 * true; when it does not, checks the message and returns false. */
/* The persistent checks load the kernel specialised for the model (NVRTC) instead of the generic one,
 * and check every row count. */
static bool s_spec_on;

static bool s_check_persistent_held (const weights_t *w, weight_dtype_t held, const sig_persistent_tuning_t *tuning,
                                     uint32_t max_rows, const char *label)
{
    cuda_persistent_tuning (tuning);
    model_config_t cfg = s_pconfig (max_rows, 1000);
    cfg.weight_dtype = held;
    cfg.specialise = s_spec_on;
    char err[1024] = "";
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    cuda_persistent_tuning (NULL);
    if (!m) {
        ck_assert_msg (strstr (err, "kernel \"persistent\": the weights need ") && strstr (err, " KiB on chip, the cluster holds ")
                           && strstr (err, "use kernel \"fused\" or \"warp\""),
                       "%s (cluster %u, spread_all %u): load: %s", label, tuning->cluster_blocks, tuning->spread_all, err);
        return false;
    }
    ck_assert_str_eq (backend_cuda_iface.kernel_name (m), s_spec_on ? "persistent-nvrtc" : "persistent");
    const sig_persistent_plan_t *plan = cuda_model_persistent_plan (m);
    ck_assert_ptr_nonnull (plan);
    ck_assert_uint_eq (plan->dtype, (uint32_t) held);
    if (tuning->cluster_blocks)
        ck_assert_uint_eq (plan->cluster_blocks, tuning->cluster_blocks);
    const uint32_t rows[] = { 1, 3, max_rows };
    bool regs = false;
    uint32_t kept = 0, streamed = 0;
    for (uint32_t l = 0; l < plan->layer_count; l++) {
        regs |= plan->layers[l].bank == 0 && plan->layers[l].regs > 0;
        kept += plan->layers[l].fuse != 0;
        streamed += plan->layers[l].fuse == 2;
    }
    if (tuning->sync & SIG_SYNC_NO_STREAM)
        ck_assert_uint_eq (streamed, 0);
    /* every layer split, even ones by outputs: each pair is fused unless the tuning says not */
    if (tuning->split_by == 3 && tuning->spread_all && plan->cluster_blocks > 1 && plan->layer_count >= 2)
        ck_assert_uint_eq (kept, (tuning->sync & SIG_SYNC_NO_FUSE) ? 0 : plan->layer_count / 2);
    char what[256];
    snprintf (what, sizeof what, "%s: persistent (cluster %u, spread_all %u, no_registers %u%s, done %u, read by the "
              "%s, ring %u, %u fused, %u streamed)", label, plan->cluster_blocks, tuning->spread_all, tuning->no_registers,
              regs ? " (banked)" : "", plan->done_mode, plan->read_leader ? "leader" : "workers", plan->ring, kept, streamed);
    for (size_t r = 0; r < 3; r++)
        if (rows[r] <= max_rows)
            s_check_outputs_held (m, w, held, rows[r], what);
    for (uint32_t r = 2; s_spec_on && r < max_rows; r++)   /* every row count (fresh inputs each) */
        s_check_outputs_held (m, w, held, r, what);
    backend_cuda_iface.destroy (&m);
    ck_assert_ptr_null (m);
    return true;
}

static bool s_check_persistent (const weights_t *w, const sig_persistent_tuning_t *tuning, uint32_t max_rows,
                                const char *label)
{
    return s_check_persistent_held (w, WEIGHT_DTYPE_F32, tuning, max_rows, label);
}

/* The tunings every shape runs under: the service's choice, each cluster size, every layer split,
 * registers always and never, completion by the outputs, reads by the workers, shorter rings.
 * (On the GPU, 2026-11-23, the same list ran with 0 meaning "always registers".) */
/* { cluster, spread_all, no_registers (0 auto, 1 never, 2 always), done, read_workers, ring } */
static const sig_persistent_tuning_t s_tunings[] = {
    { 0, 0, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 }, { 1, 0, 2, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 }, { 2, 0, 2, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 },
    { 4, 0, 2, SIG_DONE_SEQUENCE, 1, 0, 0, 0, 0 }, { 8, 1, 2, SIG_DONE_SEQUENCE, 0, 1, 0, 0, 0 }, { 8, 0, 1, SIG_DONE_SEQUENCE, 1, 0, 0, 0, 0 },
    { 0, 0, 2, SIG_DONE_OUTPUTS, 0, 2, 0, 0, 0 },  { 2, 1, 1, SIG_DONE_OUTPUTS, 1, 0, 0, 0, 0 }, { 8, 0, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 },
    /* split layers divided by outputs: every layer split, leader reads; registers and workers reading */
    { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 2, 0 },  { 4, 0, 2, SIG_DONE_SEQUENCE, 1, 0, 0, 2, 0 },
    /* the synchronisation (every tuning above runs the compact tail and cluster barriers): the old
     * tail; mbarrier hand-offs, an arrival a warp or a block, with every layer split too (scatters),
     * completion by sequence, the old tail, registers */
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_BARRIERS | SIG_SYNC_OLD_TAIL },
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_MBAR_WARPS },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, SIG_SYNC_MBAR_WARPS },
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_MBAR_BLOCKS },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, SIG_SYNC_MBAR_BLOCKS },
    { 4, 0, 2, SIG_DONE_OUTPUTS, 0, 1, 0, 0, SIG_SYNC_MBAR_BLOCKS | SIG_SYNC_OLD_TAIL },
    /* every block polls, the workers read their slices (ignored where layer 0 is not the only split
     * layer or rows run in chunks): completion by outputs, by sequence with a ring of 1, layer 0 split
     * by outputs on 4 blocks with registers, the old tail */
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_WORKERS_POLL },
    { 0, 0, 0, SIG_DONE_SEQUENCE, 0, 1, 0, 0, SIG_SYNC_WORKERS_POLL },
    { 4, 0, 2, SIG_DONE_OUTPUTS, 0, 0, 0, 2, SIG_SYNC_WORKERS_POLL | SIG_SYNC_OLD_TAIL },
    /* fused pairs (a layer split by outputs keeps them in the workers for the next, split by columns):
     * every layer split, even ones by outputs: completion by outputs; registers always, the workers
     * reading; mbarrier hand-offs; the same pairs not fused */
    { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 3, 0 },
    { 4, 1, 2, SIG_DONE_SEQUENCE, 1, 0, 0, 3, 0 },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 3, SIG_SYNC_MBAR_WARPS },
    { 2, 1, 1, SIG_DONE_OUTPUTS, 0, 0, 0, 3, SIG_SYNC_NO_FUSE },
    /* the narrow layout (a thread 4 outputs) for every split layer: every layer split; registers
     * always (for the other role), the workers reading */
    { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 4, 0 },
    { 4, 0, 2, SIG_DONE_SEQUENCE, 1, 0, 0, 4, 0 },
    /* narrow layers streamed into a few outputs (the default where a pair is fused; here every layer
     * split, even ones by outputs): registers always (the streamed-into layer's first passes banked),
     * mbarriers a block; the same pairs with the hidden layer kept (SIG_SYNC_NO_STREAM) */
    { 4, 1, 2, SIG_DONE_SEQUENCE, 0, 0, 0, 3, SIG_SYNC_MBAR_BLOCKS },
    { 8, 1, 2, SIG_DONE_OUTPUTS, 0, 0, 0, 3, SIG_SYNC_NO_STREAM },
    /* the stores complete the hand-offs (st.async, the default where the leader reads; tunings of
     * kind 0 above run it): every layer split (scatters), by columns, by sequence;
     * layer 0 by outputs on 4 blocks with registers and a ring of 1; every layer narrow (4 outputs a
     * thread); pairs fused (kept and streamed: every layer split, even ones by outputs; registers
     * always with the streamed-into layer's first passes banked). Cluster barriers (the default
     * before): the plan's cluster, and every layer split by columns */
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_BARRIERS },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 1, SIG_SYNC_BARRIERS },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 1, SIG_SYNC_ASYNC },
    { 4, 0, 2, SIG_DONE_OUTPUTS, 0, 1, 0, 2, SIG_SYNC_ASYNC },
    { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 4, SIG_SYNC_ASYNC },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 3, SIG_SYNC_ASYNC },
    { 4, 1, 2, SIG_DONE_OUTPUTS, 0, 0, 0, 3, SIG_SYNC_ASYNC },
};
#define TUNINGS (sizeof s_tunings / sizeof s_tunings[0])

/* The kernel specialised for each model (NVRTC): the demo shape and odd ones, a split layer and rows
 * run in chunks, f32, f16 and bf16 weights, every tuning on the demo shape, every row count; each
 * output within its bound, and the kernel named "persistent-nvrtc". */
START_TEST (persistent_specialised)
{
    s_spec_on = true;
    static const uint32_t shapes[][5] = { { 512, 256, 64, 1, 0 }, { 597, 293, 33, 1, 0 }, { 37, 6669, 5, 0, 0 },
                                          { 293, 597, 31, 3, 0 }, { 3, 5, 0, 0, 0 } };
    static const uint32_t max_rows[] = { 4, 7, 3, 16, 5 };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        size_t n = 0;
        while (n < 5 && shapes[k][n])
            n++;
        activation_t acts[4];
        for (size_t l = 0; l + 1 < n; l++)
            acts[l] = l + 2 < n ? ACTIVATION_TANH : ACTIVATION_NONE;
        weights_t *w = weights_random (shapes[k], acts, n - 1, 100 + k);
        char label[64];
        snprintf (label, sizeof label, "specialised shape %zu", k);
        for (int d = 0; d < 3; d++) {
            const sig_persistent_tuning_t tu = { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, 0 };
            s_check_persistent_held (w, (weight_dtype_t) d, &tu, max_rows[k], label);
        }
        for (size_t t = 0; k == 0 && t < TUNINGS; t++)
            s_check_persistent (w, &s_tunings[t], max_rows[k], "specialised demo shape, a tuning");
        weights_destroy (&w);
    }
    s_spec_on = false;
}
END_TEST

/* Loading a module next to a resident kernel waits forever (test_cuda --probe 18): a model of new
 * shapes loaded while another persistent kernel runs gets the generic kernel, and answers; shapes whose
 * module was loaded before any kernel was resident get the specialised one there too. */
START_TEST (persistent_specialised_next_to_resident)
{
    const uint32_t a[] = { 64, 32, 2 }, b[] = { 71, 13, 3 }, c[] = { 45, 9, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *wa = weights_random (a, acts, 2, 1), *wb = weights_random (b, acts, 2, 2), *wc = weights_random (c, acts, 2, 3);
    model_config_t cfg = s_pconfig (2, 1000);
    cfg.specialise = true;
    char err[2048] = "";
    backend_model_t *mc = s_pload (wc, &cfg, err, sizeof err);   /* c's module, loaded with nothing resident */
    ck_assert_msg (mc != NULL, "%s", err);
    ck_assert_str_eq (backend_cuda_iface.kernel_name (mc), "persistent-nvrtc");
    backend_cuda_iface.destroy (&mc);
    backend_model_t *ma = s_pload (wa, &cfg, err, sizeof err);   /* resident from here on */
    ck_assert_msg (ma != NULL, "%s", err);
    backend_model_t *mb = s_pload (wb, &cfg, err, sizeof err);
    ck_assert_msg (mb != NULL, "%s", err);
    ck_assert_str_eq (backend_cuda_iface.kernel_name (mb), "persistent");
    mc = s_pload (wc, &cfg, err, sizeof err);
    ck_assert_msg (mc != NULL, "%s", err);
    ck_assert_str_eq (backend_cuda_iface.kernel_name (mc), "persistent-nvrtc");
    for (uint32_t r = 1; r <= 2; r++) {
        s_check_outputs_held (ma, wa, WEIGHT_DTYPE_F32, r, "a");
        s_check_outputs_held (mb, wb, WEIGHT_DTYPE_F32, r, "b, generic beside a");
        s_check_outputs_held (mc, wc, WEIGHT_DTYPE_F32, r, "c, specialised beside a");
    }
    backend_cuda_iface.destroy (&mc);
    backend_cuda_iface.destroy (&mb);
    backend_cuda_iface.destroy (&ma);
    weights_destroy (&wa);
    weights_destroy (&wb);
    weights_destroy (&wc);
}
END_TEST

/* The shapes the other kernels are tested on; 4097x129 (2.1 MB) is over the budget and refused. */
START_TEST (persistent_single_layers)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t shapes[][2] = { { 1, 1 }, { 33, 31 }, { 597, 293 }, { 512, 256 }, { 4097, 129 }, { 64, 256 }, { 3, 8192 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const uint32_t sizes[2] = { shapes[s][1], shapes[s][0] };
        const activation_t act = (activation_t) (s % 4);
        weights_t *w = weights_random (sizes, &act, 1, rng_next (&s_seed));
        char label[64];
        snprintf (label, sizeof label, "%ux%u act %s", shapes[s][0], shapes[s][1], activation_name (act));
        bool any = false;
        for (size_t t = 0; t < TUNINGS; t++)
            any |= s_check_persistent (w, &s_tunings[t], 7, label);
        ck_assert_msg (any == (shapes[s][0] != 4097), "%s: %s", label, any ? "loaded, expected a refusal" : "refused");
        weights_destroy (&w);
    }
}
END_TEST

START_TEST (persistent_chains)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t demo[] = { 512, 256, 64, 1 }, odd[] = { 293, 597, 31, 33, 1 }, tiny[] = { 1, 1, 1 };
    const uint32_t wide[] = { 64, 512, 256, 2 };   /* a split layer after the first: the scatter path */
    /* narrow inputs: layer 0 split by outputs, kept in the workers for layer 1 (split by columns) */
    const uint32_t narrow[] = { 5, 9001, 3, 7 }, one[] = { 1, 30001, 1 };
    const activation_t demo_acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    const activation_t odd_acts[] = { ACTIVATION_TANH, ACTIVATION_RELU, ACTIVATION_SIGMOID, ACTIVATION_NONE };
    const struct { const uint32_t *sizes; const activation_t *acts; size_t layers; const char *label; } nets[] = {
        { demo, demo_acts, 3, "512-256-64-1" }, { odd, odd_acts, 4, "293-597-31-33-1" },
        { tiny, demo_acts, 2, "1-1-1" }, { wide, odd_acts, 3, "64-512-256-2" }, { narrow, odd_acts, 3, "5-9001-3-7" },
        { one, odd_acts, 2, "1-30001-1" } };
    for (size_t n = 0; n < sizeof nets / sizeof nets[0]; n++) {
        weights_t *w = weights_random (nets[n].sizes, nets[n].acts, nets[n].layers, rng_next (&s_seed));
        ck_assert_msg (s_check_persistent (w, &s_default_tuning, 7, nets[n].label), "%s refused", nets[n].label);
        for (size_t t = 1; t < TUNINGS; t++)
            s_check_persistent (w, &s_tunings[t], 7, nets[n].label);
        weights_destroy (&w);
    }
}
END_TEST

/* Weights held in f16 and bf16 (_i: 0 f16, 1 bf16): tick_mlp's shape, odd chains and single
 * layers under every tuning, each output of rows 1, 3 and 7 within the bound that adds the weights'
 * rounding to the f32 weights' reference (tol_mlp_held), fresh inputs each round; then every batch
 * size 1..9 of tick_mlp's shape. */
START_TEST (persistent_half_weights)
{
    printf ("test %s %d\n", __func__, _i);   /* progress, for a run that times out */
    fflush (stdout);
    const weight_dtype_t held = _i == 0 ? WEIGHT_DTYPE_F16 : WEIGHT_DTYPE_BF16;
    const uint32_t demo[] = { 512, 256, 64, 1 }, a[] = { 37, 19, 5 }, b[] = { 293, 61, 3 };
    const uint32_t odd[] = { 293, 597, 31, 33, 1 }, wide[] = { 64, 512, 256, 2 };
    const uint32_t s1[] = { 1, 1 }, s2[] = { 31, 33 }, s3[] = { 293, 597 }, s4[] = { 8192, 3 }, s5[] = { 129, 300 };
    const activation_t demo_acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    const activation_t odd_acts[] = { ACTIVATION_TANH, ACTIVATION_RELU, ACTIVATION_SIGMOID, ACTIVATION_NONE };
    const struct { const uint32_t *sizes; const activation_t *acts; size_t layers; const char *label; } nets[] = {
        { demo, demo_acts, 3, "512-256-64-1" }, { a, odd_acts, 2, "37-19-5" }, { b, demo_acts, 2, "293-61-3" },
        { odd, odd_acts, 4, "293-597-31-33-1" }, { wide, odd_acts, 3, "64-512-256-2" },
        { s1, demo_acts + 2, 1, "1x1" }, { s2, odd_acts, 1, "33x31" }, { s3, odd_acts + 1, 1, "597x293" },
        { s4, odd_acts + 2, 1, "3x8192" }, { s5, demo_acts, 1, "300x129" } };
    for (size_t n = 0; n < sizeof nets / sizeof nets[0]; n++) {
        weights_t *w = weights_random (nets[n].sizes, nets[n].acts, nets[n].layers, rng_next (&s_seed));
        char label[96];
        snprintf (label, sizeof label, "%s, %s weights", nets[n].label, weight_dtype_name (held));
        ck_assert_msg (s_check_persistent_held (w, held, &s_default_tuning, 7, label), "%s refused", label);
        for (size_t t = 0; t < TUNINGS; t++)
            s_check_persistent_held (w, held, &s_tunings[t], 7, label);
        weights_destroy (&w);
    }
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (demo, acts, 3, rng_next (&s_seed));
    model_config_t cfg = s_pconfig (9, 1000);
    cfg.weight_dtype = held;
    char err[1024] = "";
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    for (uint32_t rows = 1; rows <= 9; rows++)
        s_check_outputs_held (m, w, held, rows, "every rows");
    backend_cuda_iface.destroy (&m);
    weights_destroy (&w);
}
END_TEST

/* What half precision refuses: a weight f16 cannot hold (named: tensor, index, value), every CUDA
 * kernel but persistent (named), the CPU backend; and "auto" with f16 measures persistent alone. */
START_TEST (persistent_half_refusals)
{
    printf ("test %s\n", __func__);
    fflush (stdout);
    const uint32_t sizes[] = { 37, 19, 5 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 2, rng_next (&s_seed));
    w->layers[1].weight[2 * 19 + 7] = 70000.0f;
    model_config_t cfg = s_pconfig (3, 1000);
    cfg.weight_dtype = WEIGHT_DTYPE_F16;
    cfg.layer_count = 2;
    strcpy (cfg.layers[0].weight, "0.weight");
    strcpy (cfg.layers[1].weight, "2.weight");
    char err[1024] = "";
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_ptr_null (m);
    ck_assert_msg (strstr (err, "model \"gpu-persistent\": weight_dtype \"f16\": weight \"2.weight\" [2][7] = 70000 "
                                "does not fit in f16 (largest finite 65504)"), "%s", err);
    /* bf16 holds it (its range is f32's); within its bound */
    ck_assert (s_check_persistent_held (w, WEIGHT_DTYPE_BF16, &s_default_tuning, 3, "bf16 with a weight of 70000"));
    w->layers[1].weight[2 * 19 + 7] = 65504.0f;   /* the largest f16: held */
    ck_assert (s_check_persistent_held (w, WEIGHT_DTYPE_F16, &s_default_tuning, 3, "f16 with a weight of 65504"));
    weights_destroy (&w);
    /* every other CUDA kernel refuses f16 and bf16, naming itself */
    const uint32_t demo[] = { 512, 256, 64, 1 };
    const activation_t dacts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    w = weights_random (demo, dacts, 3, rng_next (&s_seed));
    for (int k = 0; k < CUDA_KERNEL_COUNT; k++) {
        if (k == CUDA_KERNEL_PERSISTENT)
            continue;
        for (int d = WEIGHT_DTYPE_F16; d <= WEIGHT_DTYPE_BF16; d++) {
            model_config_t c = s_config ((cuda_kernel_t) k, true, 2);
            c.weight_dtype = (weight_dtype_t) d;
            char want[256];
            snprintf (want, sizeof want, "weight_dtype \"%s\": kernel \"%s\" holds weights in f32 only; use "
                      "\"kernel\": \"persistent\"", weight_dtype_name ((weight_dtype_t) d), cuda_kernel_name ((cuda_kernel_t) k));
            m = backend_cuda_iface.load (w, &c, 0, err, sizeof err);
            ck_assert_ptr_null (m);
            ck_assert_msg (strstr (err, want), "kernel %s: %s", cuda_kernel_name ((cuda_kernel_t) k), err);
        }
    }
    /* auto with f16: the CPU and every kernel but persistent are noted as not loaded; persistent wins */
    model_config_t a = s_config (CUDA_KERNEL_WARP, true, 2);
    a.backend = BACKEND_AUTO;
    a.weight_dtype = WEIGHT_DTYPE_F16;
    autoselect_candidate_t c[16];
    size_t n = 0;
    const backend_iface_t *chosen = autoselect_choose (w, &a, 0, c, 16, &n, err, sizeof err);
    ck_assert_msg (chosen == &backend_cuda_iface, "%s", err);
    ck_assert_int_eq (a.kernel, CUDA_KERNEL_PERSISTENT);
    ck_assert_int_eq (a.weight_dtype, WEIGHT_DTYPE_F16);
    size_t measured = 0;
    for (size_t i = 0; i < n; i++) {
        if (!c[i].note[0]) {
            ck_assert_str_eq (c[i].kernel, "persistent");
            measured++;
        } else
            ck_assert_msg (strstr (c[i].note, "not loaded: ") && strstr (c[i].note, "f32 only"), "%s %s: %s",
                           c[i].backend, c[i].kernel, c[i].note);
    }
    ck_assert_uint_eq (measured, 1);
    /* auto with f32 never holds half weights: whatever it picks, the plan (if persistent) is f32 */
    a = s_config (CUDA_KERNEL_PERSISTENT, true, 2);
    a.backend = BACKEND_AUTO;
    a.kernel_given = true;
    chosen = autoselect_choose (w, &a, 0, c, 16, &n, err, sizeof err);
    ck_assert_msg (chosen != NULL, "%s", err);
    ck_assert_int_eq (a.weight_dtype, WEIGHT_DTYPE_F32);
    weights_destroy (&w);
}
END_TEST

START_TEST (persistent_every_batch_size)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t demo[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    const uint32_t rows[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
    s_check_model (demo, acts, 3, CUDA_KERNEL_PERSISTENT, true, rows, 9, "every rows");
}
END_TEST

START_TEST (persistent_refuses_over_budget)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 1024, 1024, 1024, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, 11);
    model_config_t cfg = s_pconfig (1, 1000);
    char err[1024] = "";
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_ptr_null (m);
    ck_assert_msg (strstr (err, "model \"gpu-persistent\": kernel \"persistent\": the weights need ")
                       && strstr (err, "KiB on chip, the cluster holds ") && strstr (err, "(8 blocks x 227 KiB")
                       && strstr (err, "; use kernel \"fused\" or \"warp\""),
                   "%s", err);
    weights_destroy (&w);
}
END_TEST

/* The planner takes every model whose raw fp32 weights and biases are within the budget it reports
 * (the largest cluster's shared memory): two- and three-layer nets of growing width, narrow and wide
 * inputs (a narrow input splits by outputs, kept in the workers for the next layer; one hidden layer
 * tens of thousands wide between 1 or 5 inputs and 1 or 2 outputs streamed into them, the outputs'
 * first passes in registers at 1.0 x), at 0.3, 0.6, 0.9 and 1.0 x budget, each loaded and every
 * output of rows 1 and 3 within its bound; the issue's 293-597-31-3 at max_rows 16 (its partials of 16 rows
 * do not fit beside the leader's weights: it runs in chunks of rows, so rows 16 checks the
 * chunks); past what the whole cluster holds (shared memory and every register bank) refused,
 * with the message. */
START_TEST (persistent_accepts_within_budget)
{
    printf ("test %s\n", __func__);
    fflush (stdout);
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_TANH, ACTIVATION_NONE };
    char err[1024] = "";
    /* the budget, from a small model's plan */
    const uint32_t small[] = { 8, 8 };
    weights_t *w = weights_random (small, acts + 2, 1, 1);
    model_config_t cfg = s_pconfig (3, 1000);
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    const uint64_t budget = cuda_model_persistent_plan (m)->budget_bytes;
    backend_cuda_iface.destroy (&m);
    weights_destroy (&w);
    ck_assert_uint_ge (budget, 512u << 10);
    const struct { uint32_t in, out, hidden; double upto; } fams[] = {
        { 512, 1, 1, 1.0 }, { 293, 3, 1, 1.0 }, { 37, 5, 1, 1.0 }, { 1000, 7, 1, 1.0 }, { 64, 2, 2, 1.0 },
        { 293, 3, 2, 1.0 }, { 5, 2, 1, 1.0 }, { 1, 1, 1, 1.0 } };
    const double fractions[] = { 0.3, 0.6, 0.9, 1.0 };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++)
        for (size_t k = 0; k < sizeof fractions / sizeof fractions[0] && fractions[k] <= fams[f].upto; k++) {
            /* the widest N with raw fp32 weights (and biases) within the fraction of the budget */
            const double limit = fractions[k] * (double) budget;
            uint32_t N = 1;
            for (uint32_t step = 1u << 16; step; step >>= 1) {
                const uint64_t n = N + step;
                const uint64_t raw = 4 * (fams[f].hidden == 1 ? n * (fams[f].in + 1) + fams[f].out * (n + 1)
                                                                : n * (fams[f].in + 1) + n * (n + 1) + fams[f].out * (n + 1));
                if ((double) raw <= limit)
                    N = (uint32_t) n;
            }
            uint32_t sizes[4] = { fams[f].in, N, N, fams[f].out };
            if (fams[f].hidden == 1)
                sizes[2] = fams[f].out;
            w = weights_random (sizes, acts, fams[f].hidden + 1, rng_next (&s_seed));
            char label[128];
            snprintf (label, sizeof label, "%u-%u%s-%u (%.0f%% of the budget of %llu KiB)", fams[f].in, N,
                      fams[f].hidden == 2 ? "-N" : "", fams[f].out, 100 * fractions[k], (unsigned long long) (budget >> 10));
            ck_assert_msg (s_check_persistent (w, &s_default_tuning, 3, label), "%s refused", label);
            weights_destroy (&w);
        }
    const uint32_t issue[] = { 293, 597, 31, 3 };
    w = weights_random (issue, acts, 3, rng_next (&s_seed));
    ck_assert_msg (s_check_persistent (w, &s_default_tuning, 16, "293-597-31-3 at max_rows 16"), "refused");
    cfg = s_pconfig (16, 1000);
    m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    ck_assert_uint_lt (cuda_model_persistent_plan (m)->chunk_rows, 16);   /* the rows-16 check ran in chunks */
    for (uint32_t rows = 1; rows <= 16; rows++)
        s_check_outputs (m, w, rows, "293-597-31-3, every rows up to 16");
    backend_cuda_iface.destroy (&m);
    weights_destroy (&w);
    /* more than the whole cluster holds, every register bank included: refused, with the message */
    const uint64_t over = budget + budget / 2;
    const uint32_t wide[] = { 512, (uint32_t) (over / (4 * 513)), 1 };
    w = weights_random (wide, acts, 2, rng_next (&s_seed));
    cfg = s_pconfig (3, 1000);
    m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_ptr_null (m);
    ck_assert_msg (strstr (err, "kernel \"persistent\": the weights need ") && strstr (err, " KiB on chip, the cluster holds ")
                       && strstr (err, "use kernel \"fused\" or \"warp\""), "%s", err);
    printf ("over the budget: %s\n", err);
    weights_destroy (&w);
}
END_TEST

/* 100,000 requests in a row, each with fresh inputs, rows 1 and now and then 3: every answer
 * within its bound of the float64 reference, and within twice that of the CPU backend's. */
START_TEST (persistent_100k_requests)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, rng_next (&s_seed));
    model_config_t cfg = s_pconfig (3, 1000);
    char err[1024] = "";
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    model_config_t ccfg = cfg;
    ccfg.backend = BACKEND_CPU;
    backend_model_t *cpu = backend_cpu_iface.load (w, &ccfg, 0, err, sizeof err);
    ck_assert_msg (cpu != NULL, "%s", err);
    float in[3 * 512], out[3], out_cpu[3];
    double ref[3], bound[3], cpu_ref[3], bound2[3], worst_ref = 0, worst_cpu = 0, q;
    for (int i = 0; i < 100000; i++) {
        const uint32_t rows = i % 10 == 9 ? 3 : 1;
        for (uint32_t k = 0; k < rows * 512; k++)
            in[k] = rng_uniform (&s_seed, -1, 1);
        out[0] = out[1] = out[2] = NAN;
        ck_assert_msg (backend_cuda_iface.infer (m, in, rows, out, err, sizeof err) == SIG_OK, "request %d: %s", i, err);
        ck_assert_int_eq (backend_cpu_iface.infer (cpu, in, rows, out_cpu, err, sizeof err), SIG_OK);
        ck_assert_int_eq (tol_mlp (w, in, rows, ref, bound), 0);
        tol_pair (out_cpu, bound, rows, cpu_ref, bound2);
        TOL_ASSERT (out, ref, bound, rows, 1, "request %d", i);
        TOL_ASSERT (out, cpu_ref, bound2, rows, 1, "request %d against the CPU backend", i);
        tol_outside (out, ref, bound, rows, &q);
        worst_ref = fmax (worst_ref, q);
        tol_outside (out, cpu_ref, bound2, rows, &q);
        worst_cpu = fmax (worst_cpu, q);
    }
    printf ("persistent: 100000 requests, largest error %.3g of the bound against float64, %.3g of it against the "
            "CPU backend\n", worst_ref, worst_cpu);
    backend_cpu_iface.destroy (&cpu);
    backend_cuda_iface.destroy (&m);
    weights_destroy (&w);
}
END_TEST

START_TEST (persistent_stop_and_start)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, rng_next (&s_seed));
    for (int round = 0; round < 4; round++) {
        model_config_t cfg = s_pconfig (4, 1000);
        char err[1024] = "";
        backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
        ck_assert_msg (m != NULL, "round %d: %s", round, err);
        char what[32];
        snprintf (what, sizeof what, "round %d", round);
        s_check_outputs (m, w, round % 2 ? 4 : 1, what);
        backend_cuda_iface.destroy (&m);
        ck_assert_ptr_null (m);
    }
    weights_destroy (&w);
}
END_TEST

START_TEST (persistent_wait_modes)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, 99);
    for (int mode = 0; mode < 3; mode++) {
        model_config_t cfg = s_pconfig (4, 1000);
        cfg.wait = (cuda_wait_t) mode;
        char err[1024];
        backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
        ck_assert_msg (m != NULL, "%s", err);
        char what[64];
        snprintf (what, sizeof what, "wait %s", cuda_wait_name ((cuda_wait_t) mode));
        s_check_outputs (m, w, 4, what);
        backend_cuda_iface.destroy (&m);
    }
    weights_destroy (&w);
}
END_TEST

/* One answer of M on fresh inputs, within its bound of W's float64 reference. */
static void s_one_ok (const backend_iface_t *iface, backend_model_t *m, const weights_t *w, const char *what)
{
    float in[512], out[1];
    for (int k = 0; k < 512; k++)
        in[k] = rng_uniform (&s_seed, -1, 1);
    char err[1024] = "";
    ck_assert_msg (iface->infer (m, in, 1, out, err, sizeof err) == SIG_OK, "%s: %s", what, err);
    double ref, bound;
    ck_assert_int_eq (tol_mlp (w, in, 1, &ref, &bound), 0);
    TOL_ASSERT (out, &ref, &bound, 1, 1, "%s", what);
}

static double s_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

/* A stalled persistent kernel: its model answers UNAVAILABLE after about the watchdog, and at once
 * from then on; a graph model on the same GPU and a CPU model keep answering correctly; the
 * stalled kernel still stops when destroyed. */
/* Completion by the outputs (the default): a NaN among the outputs, even one carrying the host's
 * sentinel payload in the features, completes the request (not a watchdog), and no output word
 * comes back holding the sentinel. */
START_TEST (persistent_nan_outputs_complete)
{
    printf ("test %s\n", __func__);
    fflush (stdout);
    const uint32_t sizes[] = { 9, 7, 3 };
    const activation_t acts[] = { ACTIVATION_NONE, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 2, rng_next (&s_seed));
    char err[1024] = "";
    model_config_t pcfg = s_pconfig (2, 2000);
    backend_model_t *p = s_pload (w, &pcfg, err, sizeof err);
    ck_assert_msg (p != NULL, "%s", err);
    float in[18], out[6];
    for (int i = 0; i < 18; i++)
        in[i] = rng_uniform (&s_seed, -1, 1);
    const uint32_t sentinel = SIG_PERSISTENT_SENTINEL;
    memcpy (&in[4], &sentinel, 4);              /* row 0 carries the sentinel's NaN, row 1 is finite */
    for (int round = 0; round < 50; round++) {
        ck_assert_int_eq (backend_cuda_iface.infer (p, in, 2, out, err, sizeof err), SIG_OK);
        for (int o = 0; o < 3; o++) {
            uint32_t bits;
            memcpy (&bits, &out[o], 4);
            ck_assert_msg (isnan (out[o]) && bits != SIG_PERSISTENT_SENTINEL, "output %d: %08x", o, bits);
        }
        double ref[3], bound[3];
        ck_assert_int_eq (tol_mlp (w, in + 9, 1, ref, bound), 0);
        TOL_ASSERT (out + 3, ref, bound, 3, 3, "the finite row beside the NaN one, round %d", round);
    }
    ck_assert (!cuda_model_lost (p));
    backend_cuda_iface.destroy (&p);
    weights_destroy (&w);
}
END_TEST

START_TEST (persistent_watchdog)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, rng_next (&s_seed));
    char err[1024] = "";
    model_config_t pcfg = s_pconfig (1, 50);
    backend_model_t *p = s_pload (w, &pcfg, err, sizeof err);
    ck_assert_msg (p != NULL, "%s", err);
    model_config_t gcfg = s_config (CUDA_KERNEL_WARP, true, 1);
    backend_model_t *g = backend_cuda_iface.load (w, &gcfg, 0, err, sizeof err);
    ck_assert_msg (g != NULL, "%s", err);
    model_config_t ccfg = gcfg;
    ccfg.backend = BACKEND_CPU;
    backend_model_t *c = backend_cpu_iface.load (w, &ccfg, 0, err, sizeof err);
    ck_assert_msg (c != NULL, "%s", err);
    s_one_ok (&backend_cuda_iface, p, w, "persistent before the stall");

    ck_assert_int_eq (cuda_model_persistent_stall (p, true), 0);
    float in[512] = { 0 }, out[1];
    const double t0 = s_ms ();
    ck_assert_int_eq (backend_cuda_iface.infer (p, in, 1, out, err, sizeof err), SIG_UNAVAILABLE);
    const double waited = s_ms () - t0;
    /* At least the watchdog; the cap only tells a watchdog that never fires from one that does. */
    ck_assert_msg (waited >= 45 && waited < 10000, "the watchdog of 50 ms fired after %.1f ms", waited);
    ck_assert_msg (strstr (err, "model \"gpu-persistent\": the persistent kernel on device 0 did not answer within the "
                                "watchdog (50 ms); the model is unavailable"), "%s", err);
    ck_assert (cuda_model_lost (p));
    /* A lost model answers from its lost state (this text), not by waiting out the watchdog again
     * (the text above): that, not a time, says it answered at once. */
    const double t1 = s_ms ();
    ck_assert_int_eq (backend_cuda_iface.infer (p, in, 1, out, err, sizeof err), SIG_UNAVAILABLE);
    ck_assert_msg (s_ms () - t1 < 10000, "a lost model took %.1f ms to answer", s_ms () - t1);
    ck_assert_msg (strstr (err, "stopped answering (watchdog 50 ms)"), "%s", err);
    for (int i = 0; i < 200; i++) {
        s_one_ok (&backend_cuda_iface, g, w, "graph model next to a stalled persistent kernel");
        s_one_ok (&backend_cpu_iface, c, w, "CPU model next to a stalled persistent kernel");
    }
    printf ("persistent: watchdog of 50 ms fired after %.1f ms\n", waited);
    const double t2 = s_ms ();
    backend_cuda_iface.destroy (&p);   /* stop is honoured while stalled */
    ck_assert_msg (s_ms () - t2 < 10000, "destroying the stalled kernel took %.1f ms", s_ms () - t2);
    s_one_ok (&backend_cuda_iface, g, w, "graph model after the stalled kernel stopped");
    backend_cuda_iface.destroy (&g);
    backend_cpu_iface.destroy (&c);
    weights_destroy (&w);
}
END_TEST

/* A trap in another model's kernel loses the context: the CUDA models answer UNAVAILABLE (the
 * persistent one long before its watchdog), the CPU model keeps serving, and destroying the
 * CUDA models returns. */
START_TEST (persistent_trapped_context)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, rng_next (&s_seed));
    char err[1024] = "";
    model_config_t pcfg = s_pconfig (1, 60000);     /* a watchdog far beyond the cap below */
    backend_model_t *p = s_pload (w, &pcfg, err, sizeof err);
    ck_assert_msg (p != NULL, "%s", err);
    model_config_t gcfg = s_config (CUDA_KERNEL_WARP, true, 1);
    backend_model_t *g = backend_cuda_iface.load (w, &gcfg, 0, err, sizeof err);
    ck_assert_msg (g != NULL, "%s", err);
    model_config_t ccfg = gcfg;
    ccfg.backend = BACKEND_CPU;
    backend_model_t *c = backend_cpu_iface.load (w, &ccfg, 0, err, sizeof err);
    ck_assert_msg (c != NULL, "%s", err);
    s_one_ok (&backend_cuda_iface, p, w, "persistent before the trap");

    ck_assert_int_eq (cuda_model_inject_fault (g), 0);
    float in[512] = { 0 }, out[1];
    ck_assert_int_eq (backend_cuda_iface.infer (g, in, 1, out, err, sizeof err), SIG_UNAVAILABLE);
    const double t0 = s_ms ();
    ck_assert_int_eq (backend_cuda_iface.infer (p, in, 1, out, err, sizeof err), SIG_UNAVAILABLE);
    const double waited = s_ms () - t0;
    ck_assert_msg (strstr (err, "model \"gpu-persistent\": CUDA persistent kernel failed on device 0: ")
                       && strstr (err, "the model is unavailable"), "%s", err);
    ck_assert_msg (waited < 10000, "the lost context was noticed after %.1f ms (watchdog 60000)", waited);
    printf ("persistent: a trapped context noticed after %.2f ms: %s\n", waited, err);
    ck_assert_int_eq (backend_cuda_iface.infer (p, in, 1, out, err, sizeof err), SIG_UNAVAILABLE);
    for (int i = 0; i < 100; i++)
        s_one_ok (&backend_cpu_iface, c, w, "CPU model after the trap");
    backend_cuda_iface.destroy (&p);
    backend_cuda_iface.destroy (&g);
    backend_cpu_iface.destroy (&c);
    weights_destroy (&w);
}
END_TEST

/* Pitfalls (b) and (c): while a persistent kernel is resident, other models load, serve (graph
 * launches are not starved: the kernel holds only its cluster's SMs) and are destroyed, a second
 * persistent instance comes and goes, and the first keeps answering throughout; a cublas model
 * is refused with a message. */
START_TEST (persistent_coexists)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, rng_next (&s_seed));
    char err[1024] = "";
    model_config_t pcfg = s_pconfig (1, 1000);
    backend_model_t *p = s_pload (w, &pcfg, err, sizeof err);
    ck_assert_msg (p != NULL, "%s", err);
    /* cuBLAS waits for the whole device (measured: test_cuda --probe): refused, not hung */
    model_config_t bcfg = s_config (CUDA_KERNEL_CUBLAS, true, 1);
    ck_assert_ptr_null (backend_cuda_iface.load (w, &bcfg, 0, err, sizeof err));
    ck_assert_msg (strstr (err, "model \"gpu-cublas\": kernel \"cublas\" cannot be loaded while a persistent kernel is "
                                "resident on device 0"), "%s", err);
    const cuda_kernel_t kernels[] = { CUDA_KERNEL_WARP, CUDA_KERNEL_FUSED, CUDA_KERNEL_MBYV, CUDA_KERNEL_PERSISTENT,
                                      CUDA_KERNEL_WARP };
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        model_config_t cfg = kernels[k] == CUDA_KERNEL_PERSISTENT ? s_pconfig (1, 1000) : s_config (kernels[k], true, 1);
        const double t0 = s_ms ();
        backend_model_t *o = backend_cuda_iface.load (w, &cfg, 0, err, sizeof err);
        const double loaded = s_ms () - t0;
        ck_assert_msg (o != NULL, "%s next to a persistent kernel: %s", cuda_kernel_name (kernels[k]), err);
        for (int i = 0; i < 500; i++) {
            s_one_ok (&backend_cuda_iface, o, w, cuda_kernel_name (kernels[k]));
            s_one_ok (&backend_cuda_iface, p, w, "the resident persistent model");
        }
        const double t1 = s_ms ();
        backend_cuda_iface.destroy (&o);
        printf ("persistent resident: %s loaded in %.1f ms, destroyed in %.1f ms\n", cuda_kernel_name (kernels[k]),
                loaded, s_ms () - t1);
    }
    s_one_ok (&backend_cuda_iface, p, w, "the resident persistent model at the end");
    backend_cuda_iface.destroy (&p);
    weights_destroy (&w);
}
END_TEST

/* Model key green_context: every group of the device holds an instance of its own (tick_mlp's shape;
 * the first specialised, its module and the green contexts prepared before any kernel was resident,
 * as the server does), each answering within its bound while all are resident; one more is refused
 * naming who holds them; a destroyed instance's group goes to the next persistent load, one without
 * the key too (it follows the split: placed by the hardware it could sit on a free group's SMs); every
 * group is given back at the end. (A cluster of 8 without a group, beside 15 green ones, did not start
 * within 20 s on an H100: the 12 SMs left are spread over the GPCs.) */
START_TEST (persistent_green_instances)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, rng_next (&s_seed));
    char err[2048] = "", want[512];
    model_config_t cfg = s_pconfig (3, 1000);
    snprintf (cfg.name, sizeof cfg.name, "green");
    cfg.green_context = true;
    cfg.specialise = true;
    ck_assert_int_eq (backend_cuda_iface.prepare (NULL, &cfg, 0, err, sizeof err), 1);
    ck_assert_msg (backend_cuda_iface.prepare (w, &cfg, 0, err, sizeof err) == 1, "%s", err);
    uint32_t groups = 0;
    ck_assert_uint_eq (cuda_green_lent (0, &groups), 0);
    ck_assert_uint_ge (groups, 4);   /* an H100 or H200: 15 groups of 8 SMs */
    ck_assert_uint_le (groups, 64);
    backend_model_t *m[64] = { NULL };
    for (uint32_t i = 0; i < groups; i++) {
        cfg.specialise = i == 0;
        m[i] = s_pload (w, &cfg, err, sizeof err);
        ck_assert_msg (m[i] != NULL, "instance %u: %s", i, err);
        ck_assert_uint_eq (backend_cuda_iface.green_sms (m[i]), 8);
        ck_assert_str_eq (backend_cuda_iface.kernel_name (m[i]), i == 0 ? "persistent-nvrtc" : "persistent");
        ck_assert_uint_eq (cuda_green_lent (0, NULL), i + 1);
    }
    for (uint32_t r = 1; r <= 3; r++)
        for (uint32_t i = 0; i < groups; i++)
            s_check_outputs (m[i], w, r, "a green instance, every group held");
    backend_model_t *more = s_pload (w, &cfg, err, sizeof err);
    ck_assert_ptr_null (more);
    snprintf (want, sizeof want, "model \"green\": green_context: all %u green contexts of device 0 (8 SMs each) are "
              "held: \"green\" %u", groups, groups);
    ck_assert_str_eq (err, want);
    ck_assert_uint_eq (cuda_green_lent (0, NULL), groups);
    backend_cuda_iface.destroy (&m[2]);
    ck_assert_uint_eq (cuda_green_lent (0, NULL), groups - 1);
    model_config_t plain = s_pconfig (3, 1000);
    backend_model_t *p = s_pload (w, &plain, err, sizeof err);
    ck_assert_msg (p != NULL, "without the key, into the group given back: %s", err);
    ck_assert_uint_eq (backend_cuda_iface.green_sms (p), 8);
    ck_assert_uint_eq (cuda_green_lent (0, NULL), groups);
    ck_assert_ptr_null (s_pload (w, &cfg, err, sizeof err));
    snprintf (want, sizeof want, "model \"green\": green_context: all %u green contexts of device 0 (8 SMs each) are "
              "held: \"green\" %u, \"gpu-persistent\" 1", groups, groups - 1);
    ck_assert_str_eq (err, want);
    for (uint32_t r = 1; r <= 3; r++)
        s_check_outputs (p, w, r, "a persistent model without green_context, in a group");
    backend_cuda_iface.destroy (&p);
    m[2] = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (m[2] != NULL, "into the group given back: %s", err);
    ck_assert_uint_eq (backend_cuda_iface.green_sms (m[2]), 8);
    for (uint32_t r = 1; r <= 3; r++) {
        s_check_outputs (m[2], w, r, "a green instance in a group given back");
        s_check_outputs (m[groups - 1], w, r, "the last green instance");
    }
    for (uint32_t i = 0; i < groups; i++)
        backend_cuda_iface.destroy (&m[i]);
    ck_assert_uint_eq (cuda_green_lent (0, NULL), 0);
    weights_destroy (&w);
}
END_TEST

/* Green contexts are made only while no persistent kernel is resident on the device (making one
 * waits for every resident kernel: tools/green-probe.cu step 7): a green load beside a resident
 * kernel, none made before, is refused saying so and holds nothing; once that kernel is gone the
 * same load makes them; from then on green loads beside resident kernels work, and a load without
 * the key follows the split. */
START_TEST (persistent_green_made_before_resident)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 37, 29, 3 };
    const activation_t acts[] = { ACTIVATION_TANH, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 2, rng_next (&s_seed));
    char err[2048] = "";
    model_config_t plain = s_pconfig (2, 1000), cfg = plain;
    snprintf (cfg.name, sizeof cfg.name, "late");
    cfg.green_context = true;
    uint32_t groups = 1;
    cuda_green_lent (0, &groups);
    ck_assert_msg (groups == 0, "the green contexts were made before this test (it runs before any other green load)");
    backend_model_t *p = s_pload (w, &plain, err, sizeof err);
    ck_assert_msg (p != NULL, "%s", err);
    ck_assert_uint_eq (backend_cuda_iface.green_sms (p), 0);   /* no split yet: the hardware places it */
    ck_assert_ptr_null (s_pload (w, &cfg, err, sizeof err));
    ck_assert_str_eq (err, "model \"late\": green_context: the green contexts of device 0 can only be made while no "
                           "persistent kernel runs there (making one waits for every resident kernel) and 1 runs now; "
                           "they are made when a configuration that asks for them starts, before its first kernel");
    ck_assert_uint_eq (cuda_green_lent (0, &groups), 0);
    ck_assert_uint_eq (groups, 0);
    backend_cuda_iface.destroy (&p);
    backend_model_t *g = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (g != NULL, "with nothing resident: %s", err);
    ck_assert_uint_eq (backend_cuda_iface.green_sms (g), 8);
    p = s_pload (w, &plain, err, sizeof err);
    ck_assert_msg (p != NULL, "%s", err);
    ck_assert_uint_eq (backend_cuda_iface.green_sms (p), 8);
    backend_model_t *g2 = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (g2 != NULL, "beside resident kernels, the contexts made: %s", err);
    ck_assert_uint_eq (cuda_green_lent (0, NULL), 3);
    for (uint32_t r = 1; r <= 2; r++) {
        s_check_outputs (g, w, r, "green, made at its load");
        s_check_outputs (g2, w, r, "green, loaded beside resident kernels");
        s_check_outputs (p, w, r, "without the key, following the split");
    }
    backend_cuda_iface.destroy (&g2);
    backend_cuda_iface.destroy (&g);
    backend_cuda_iface.destroy (&p);
    ck_assert_uint_eq (cuda_green_lent (0, NULL), 0);
    weights_destroy (&w);
}
END_TEST

/* ---- pitfalls (a) and (b), raw: which CUDA calls wait for a resident kernel (test_cuda --probe) ---- */

static volatile int s_probe_done;

static void *s_probe_watchdog (void *arg)
{
    const double limit = *(const double *) arg, start = s_ms ();
    while (!s_probe_done) {
        if (s_ms () - start > limit) {
            printf ("RESULT hangs (no return within %.0f s)\n", limit / 1e3);
            fflush (stdout);
            _exit (3);
        }
        usleep (1000);
    }
    return NULL;
}

/* One probe in this (child) process: a persistent model resident, then OP; prints one RESULT line. */
static const char *s_probe_kernel = "";   /* probes 18-20: the kernel the new model got */

static int s_probe_one (int op)
{
    const double t_init = s_ms ();
    if (cudaFree (NULL) != cudaSuccess) {
        printf ("RESULT error: no CUDA\n");
        return 1;
    }
    const double init_ms = s_ms () - t_init;
    void *before_dev = NULL, *before_host = NULL;
    cudaMalloc (&before_dev, 1 << 20);
    cudaHostAlloc (&before_host, 1 << 20, cudaHostAllocDefault);
    cublasHandle_t handle = NULL;   /* a handle, and for op 16 a warm one, from before the launch */
    float *ga = NULL;
    cudaStream_t gs = NULL;
    const float one = 1.0f, zero = 0.0f;
    if (op >= 15 && op <= 17) {
        cudaStreamCreateWithFlags (&gs, cudaStreamNonBlocking);
        cudaMalloc ((void **) &ga, 3 * 64 * 64 * sizeof (float));
        cublasCreate (&handle);
        cublasSetStream (handle, gs);
        if (op == 16) {
            cublasSgemm (handle, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, ga, 64, ga + 4096, 64, &zero, ga + 8192, 64);
            cudaStreamSynchronize (gs);
        }
    }
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, 7);
    char err[1024] = "";
    const uint32_t sizes2[] = { 300, 77, 1 };   /* probes 18-20: a shape this process has not compiled */
    weights_t *w2 = weights_random (sizes2, acts + 1, 2, 9);
    if (op == 20) {   /* the specialised kernel's module loaded before any kernel is resident */
        model_config_t scfg = s_pconfig (1, 1000);
        scfg.specialise = true;
        backend_model_t *o = backend_cuda_iface.load (w2, &scfg, 0, err, sizeof err);
        if (!o || strcmp (backend_cuda_iface.kernel_name (o), "persistent-nvrtc") != 0) {
            printf ("RESULT error: before: %s\n", err);
            return 1;
        }
        backend_cuda_iface.destroy (&o);
    }
    model_config_t pcfg = s_pconfig (1, 1000);
    backend_model_t *p = backend_cuda_iface.load (w, &pcfg, 0, err, sizeof err);
    if (!p) {
        printf ("RESULT error: persistent load: %s\n", err);
        return 1;
    }
    float in[512] = { 0.5f }, out[1];
    static double limit = 3000;
    pthread_t th;
    pthread_create (&th, NULL, s_probe_watchdog, &limit);
    const double t0 = s_ms ();
    cudaError_t e = cudaSuccess;
    switch (op) {
    case 0: { void *q; e = cudaMalloc (&q, 1 << 20); if (e == cudaSuccess) e = cudaFree (q); break; }
    case 1: e = cudaFree (before_dev); break;
    case 2: { void *q; e = cudaHostAlloc (&q, 1 << 20, cudaHostAllocDefault); break; }
    case 3: e = cudaFreeHost (before_host); break;
    case 4: {
        cudaStream_t s; void *q;
        e = cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaMallocAsync (&q, 1 << 20, s);
        if (e == cudaSuccess) e = cudaFreeAsync (q, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize (s);
        if (e == cudaSuccess) e = cudaStreamDestroy (s);
        break;
    }
    case 5: {
        cudaStream_t s; cudaEvent_t ev;
        e = cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreate (&ev);
        if (e == cudaSuccess) e = cudaEventDestroy (ev);
        if (e == cudaSuccess) e = cudaStreamDestroy (s);
        break;
    }
    case 6: {   /* the first launch of a kernel this process has not run yet */
        cudaStream_t s;
        e = cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = (cudaError_t) sig_empty_kernel (s);
        if (e == cudaSuccess) e = cudaStreamSynchronize (s);
        break;
    }
    case 7: {
        cudaStream_t s; cudaGraph_t g; cudaGraphExec_t x;
        e = cudaStreamCreateWithFlags (&s, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaStreamBeginCapture (s, cudaStreamCaptureModeThreadLocal);
        if (e == cudaSuccess) { sig_empty_kernel (s); e = cudaStreamEndCapture (s, &g); }
        if (e == cudaSuccess) e = cudaGraphInstantiate (&x, g, 0);
        if (e == cudaSuccess) e = cudaGraphUpload (x, s);
        if (e == cudaSuccess) e = cudaGraphLaunch (x, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize (s);
        if (e == cudaSuccess) e = cudaGraphExecDestroy (x);
        if (e == cudaSuccess) e = cudaGraphDestroy (g);
        break;
    }
    case 8: case 9: case 10: {   /* the backend, with its workarounds */
        const cuda_kernel_t k = op == 8 ? CUDA_KERNEL_WARP : op == 9 ? CUDA_KERNEL_CUBLAS : CUDA_KERNEL_PERSISTENT;
        model_config_t cfg = k == CUDA_KERNEL_PERSISTENT ? s_pconfig (1, 1000) : s_config (k, true, 1);
        backend_model_t *o = backend_cuda_iface.load (w, &cfg, 0, err, sizeof err);
        if (!o || backend_cuda_iface.infer (o, in, 1, out, err, sizeof err) != SIG_OK) {
            printf ("RESULT error: %s\n", err);
            fflush (stdout);
            _exit (1);
        }
        backend_cuda_iface.destroy (&o);
        break;
    }
    case 11: {
        void *q;
        e = cudaMalloc (&q, 1 << 20);
        static char buf[1 << 20];
        if (e == cudaSuccess) e = cudaMemcpy (q, buf, sizeof buf, cudaMemcpyHostToDevice);
        break;
    }
    case 12: e = cudaDeviceSynchronize (); break;
    case 13: { void *q; e = cudaMalloc (&q, 1 << 20); break; }
    case 14: { cublasHandle_t h2; e = cublasCreate (&h2) == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown; break; }
    case 15: e = cublasDestroy (handle) == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown; break;
    case 18: case 19: case 20: {   /* a specialised kernel (NVRTC compile + module load) next to the resident
                                      one; 20: its module loaded before the resident one started */
        model_config_t cfg = s_pconfig (1, 1000);
        cfg.specialise = true;
        backend_model_t *o = backend_cuda_iface.load (w2, &cfg, 0, err, sizeof err);
        if (!o || backend_cuda_iface.infer (o, in, 1, out, err, sizeof err) != SIG_OK) {
            printf ("RESULT error: %s\n", err);
            fflush (stdout);
            _exit (1);
        }
        s_probe_kernel = backend_cuda_iface.kernel_name (o);
        if (op == 19)
            backend_cuda_iface.destroy (&o);
        break;
    }
    case 21: {  /* what a device process does for a mailbox in the region shared with the server */
        void *q = mmap (NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        e = q == MAP_FAILED ? cudaErrorMemoryAllocation
                            : cudaHostRegister (q, 1 << 20, cudaHostRegisterMapped | cudaHostRegisterPortable);
        break;
    }
    case 16: case 17:
        e = cublasSgemm (handle, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, ga, 64, ga + 4096, 64, &zero, ga + 8192, 64)
                    == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
        if (e == cudaSuccess)
            e = cudaStreamSynchronize (gs);
        break;
    }
    const double took = s_ms () - t0;
    s_probe_done = 1;
    pthread_join (th, NULL);
    const bool alive = backend_cuda_iface.infer (p, in, 1, out, err, sizeof err) == SIG_OK;
    printf ("RESULT %s %.2f ms (persistent still answers: %s; CUDA init %.0f ms)%s%s\n",
            e == cudaSuccess ? "ok" : cudaGetErrorName (e), took, alive ? "yes" : "NO", init_ms,
            s_probe_kernel[0] ? "; kernel " : "", s_probe_kernel);
    fflush (stdout);   /* the caller leaves with _exit */
    backend_cuda_iface.destroy (&p);
    weights_destroy (&w);
    return 0;
}

static int s_probe_only = -1;   /* test_cuda --probe N: that probe alone */

static int s_probe_all (void)
{
    static const char *const names[] = {
        "cudaMalloc + cudaFree (new 1 MiB)", "cudaFree (a buffer from before the launch)", "cudaHostAlloc (1 MiB)",
        "cudaFreeHost (a buffer from before the launch)", "cudaMallocAsync + cudaFreeAsync + stream sync",
        "stream and event create/destroy", "first launch of a kernel not run yet + stream sync",
        "graph capture, instantiate, upload, launch, sync, destroy", "backend: load + infer + destroy warp+graph",
        "backend: load + infer + destroy cublas+graph", "backend: load + infer + destroy a 2nd persistent",
        "cudaMemcpy H2D on the legacy stream (1 MiB)", "cudaDeviceSynchronize (expected to wait)",
        "cudaMalloc alone (1 MiB)", "cublasCreate", "cublasDestroy of a handle from before the launch",
        "cublasSgemm + sync, handle used before the launch", "cublasSgemm + sync, first use of a handle from before",
        "backend: load (NVRTC compile + cuModuleLoadData + launch) + infer a specialised persistent",
        "the same, then destroy it", "the same, its module loaded before the resident kernel started",
        "cudaHostRegister (1 MiB of MAP_SHARED memory, mapped, portable)" };
    const char *modes[] = { "EAGER", "LAZY" };
    printf ("| CUDA_MODULE_LOADING | call while a persistent kernel is resident | result |\n| --- | --- | --- |\n");
    for (int mode = 0; mode < 2; mode++)
        for (int op = 0; op < 22; op++) {
            if (mode == 1 && op != 6 && op != 7 && op != 8 && op != 9 && op != 14 && op != 17 && op != 18)
                continue;
            if (s_probe_only >= 0 && op != s_probe_only)
                continue;
            int fds[2];
            if (pipe (fds) != 0)
                return 1;
            fflush (stdout);
            pid_t pid = fork ();
            if (pid == 0) {
                close (fds[0]);
                dup2 (fds[1], 1);
                setenv ("CUDA_MODULE_LOADING", modes[mode], 1);
                const int r = s_probe_one (op);
                fflush (stdout);   /* _exit does not flush */
                _exit (r);
            }
            close (fds[1]);
            char buf[4096];
            size_t n = 0;
            ssize_t k;
            while (n + 1 < sizeof buf && (k = read (fds[0], buf + n, sizeof buf - 1 - n)) > 0)
                n += (size_t) k;
            buf[n] = 0;
            close (fds[0]);
            int status = 0;
            waitpid (pid, &status, 0);
            char *line = strstr (buf, "RESULT ");
            char *nl = line ? strchr (line, '\n') : NULL;
            if (nl)
                *nl = 0;
            printf ("| %s | %s | %s |\n", modes[mode], names[op], line ? line + 7 : "no result (crashed?)");
            fflush (stdout);
        }
    return 0;
}

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

int main (int argc, char **argv)
{
    /* Every kernel loaded when CUDA starts (as sigserve does): a lazy module load while a
     * persistent kernel spins could wait for it. test_cuda --probe shows what happens without. */
    setenv ("CUDA_MODULE_LOADING", "EAGER", 0);
    char why[256];
    if (argc > 2 && strcmp (argv[1], "--probe") == 0)
        s_probe_only = atoi (argv[2]);
    if (argc > 1 && strcmp (argv[1], "--probe") == 0)
        return s_probe (why, sizeof why) ? s_probe_all () : (printf ("SKIP: no CUDA device: %s\n", why), 0);
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
    tcase_add_test (tc, server_serves_cuda_like_cpu);
    tcase_add_test (tc, instances_spread_over_gpus);
    suite_add_tcase (s, tc);
    TCase *tp = tcase_create ("persistent");
    tcase_set_timeout (tp, 600);
    tcase_add_test (tp, persistent_specialised);
    tcase_add_test (tp, persistent_specialised_next_to_resident);
    tcase_add_test (tp, persistent_single_layers);
    tcase_add_test (tp, persistent_chains);
    tcase_add_test (tp, persistent_every_batch_size);
    tcase_add_loop_test (tp, persistent_half_weights, 0, 2);
    tcase_add_test (tp, persistent_half_refusals);
    tcase_add_test (tp, persistent_refuses_over_budget);
    tcase_add_test (tp, persistent_accepts_within_budget);
    tcase_add_test (tp, persistent_100k_requests);
    tcase_add_test (tp, persistent_stop_and_start);
    tcase_add_test (tp, persistent_wait_modes);
    tcase_add_test (tp, persistent_nan_outputs_complete);
    tcase_add_test (tp, persistent_watchdog);
    tcase_add_test (tp, persistent_coexists);
    suite_add_tcase (s, tp);
    /* green contexts (CK_RUN_CASE=green runs them alone) */
    TCase *tg = tcase_create ("green");
    tcase_set_timeout (tg, 300);
    /* first (CK_FORK=no: one process): it needs the contexts not made yet */
    tcase_add_test (tg, persistent_green_made_before_resident);
    tcase_add_test (tg, persistent_green_instances);
    suite_add_tcase (s, tg);
    /* The tests that lose the context on purpose. With CK_FORK=no every test shares one context,
     * so they run in a process of their own, after the rest. */
    TCase *tl = tcase_create ("lost");
    tcase_set_timeout (tl, 120);
    tcase_add_test (tl, lost_context_marks_model_unavailable);
    tcase_add_test (tl, persistent_trapped_context);
    tcase_add_test (tl, lost_gpu_marks_its_instances_unavailable);
    const char *fork_mode = getenv ("CK_FORK");
    const bool shared = fork_mode && strcmp (fork_mode, "no") == 0;
    if (!shared || getenv ("CK_RUN_CASE")) {
        suite_add_tcase (s, tl);
        return tu_run_suite (s);
    }
    int rc = tu_run_suite (s);
    fflush (stdout);
    pid_t pid = fork ();
    if (pid == 0) {   /* no CUDA call in this child before exec: a fresh process, each test forked */
        setenv ("CK_RUN_CASE", "lost", 1);
        unsetenv ("CK_FORK");
        execv ("/proc/self/exe", argv);
        _exit (127);
    }
    int status = 0;
    waitpid (pid, &status, 0);
    return rc || !WIFEXITED (status) || WEXITSTATUS (status) != 0;
}

#else

int main (void)
{
    printf ("SKIP: this build has no CUDA backend (nvcc was not found when it was built)\n");
    return 0;
}

#endif
