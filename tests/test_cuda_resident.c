/* GPU suite: a resident persistent kernel's life. 100,000 requests in a row; stop and start; the
 * wait modes; completion by the outputs with NaNs among them; the watchdog of a stalled kernel; a
 * trapped context; other models loading, serving and going beside it; green contexts, one group an
 * instance; and `test_cuda_resident --probe [N]`: which raw CUDA calls wait for a resident kernel
 * (each call in a process of its own, a table). Prints "SKIP: <why>" and passes where there is no
 * CUDA build or no device (cuda_tests.h). */
#ifdef SIGSERVE_HAVE_CUDA
#include "cuda_tests.h"

#include "backends/cuda/green.h"
#include "sig_common.h"
#include "sig_persistent.h"

#include <cublas_v2.h>
#include <pthread.h>
#include <sys/mman.h>

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
/* A stalled persistent kernel: its model answers UNAVAILABLE after about the watchdog, and at once
 * from then on; a graph model on the same GPU and a CPU model keep answering correctly; the
 * stalled kernel still stops when destroyed. */
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
    /* cuBLAS waits for the whole device (measured: test_cuda_resident --probe): refused, not hung */
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

/* ---- pitfalls (a) and (b), raw: which CUDA calls wait for a resident kernel (test_cuda_resident --probe) ---- */

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

static int s_probe_only = -1;   /* test_cuda_resident --probe N: that probe alone */

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


int main (int argc, char **argv)
{
    if (argc > 1 && strcmp (argv[1], "--probe") == 0) {
        char why[256];
        setenv ("CUDA_MODULE_LOADING", "EAGER", 0);
        if (argc > 2)
            s_probe_only = atoi (argv[2]);
        return s_device_present (why, sizeof why) ? s_probe_all () : (printf ("SKIP: no CUDA device: %s\n", why), 0);
    }
    if (!s_cuda_start ())
        return 0;
    Suite *s = suite_create ("cuda_resident");
    TCase *tr = tcase_create ("resident");
    tcase_set_timeout (tr, 600);
    tcase_add_test (tr, persistent_100k_requests);
    tcase_add_test (tr, persistent_stop_and_start);
    tcase_add_test (tr, persistent_wait_modes);
    tcase_add_test (tr, persistent_nan_outputs_complete);
    tcase_add_test (tr, persistent_watchdog);
    tcase_add_test (tr, persistent_coexists);
    suite_add_tcase (s, tr);
    /* green contexts (CK_RUN_CASE=green runs them alone) */
    TCase *tg = tcase_create ("green");
    tcase_set_timeout (tg, 300);
    /* first (CK_FORK=no: one process): it needs the contexts not made yet */
    tcase_add_test (tg, persistent_green_made_before_resident);
    tcase_add_test (tg, persistent_green_instances);
    suite_add_tcase (s, tg);
    /* The test that loses the context on purpose: last, and in a process of its own (cuda_tests.h). */
    TCase *tl = tcase_create ("lost");
    tcase_set_timeout (tl, 120);
    tcase_add_test (tl, persistent_trapped_context);
    return s_cuda_run (s, tl, argv);
}

#else

#include "testutil.h"

int main (void) { return tu_skip_without_cuda (); }

#endif
