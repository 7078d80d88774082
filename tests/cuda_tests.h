/* What the GPU suites share: test_cuda.c (every CUDA kernel against the float64 reference, backend
 * selection, lost contexts, the real server), test_cuda_persistent.c (the persistent kernel's shapes,
 * tunings and weight types) and test_cuda_resident.c (a resident persistent kernel's life beside
 * other models, green contexts, and --probe). Their models' configuration, the output checks on
 * poisoned buffers, and the main: a suite prints "SKIP: <why>" and passes where there is no device;
 * CUDA does not survive fork(), so only the forked tests touch it, never the parent.
 *
 * Each suite's binary includes it once, inside #ifdef SIGSERVE_HAVE_CUDA: everything here is static. */
#ifndef SIGSERVE_CUDA_TESTS_H
#define SIGSERVE_CUDA_TESTS_H

#include "rng.h"
#include "reference.h"
#include "backends/backend.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "base/config.h"
#include "weights/weights.h"
#include "testutil.h"
#include "tolerance.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t s_seed;

static inline model_config_t s_config (cuda_kernel_t kernel, bool graph, uint32_t max_rows)
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
static inline void s_check_outputs_held (backend_model_t *m, const weights_t *w, weight_dtype_t held, uint32_t rows,
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

static inline void s_check_outputs (backend_model_t *m, const weights_t *w, uint32_t rows, const char *what)
{
    s_check_outputs_held (m, w, WEIGHT_DTYPE_F32, rows, what);
}

static inline void s_check_model_zc (const uint32_t *sizes, const activation_t *acts, size_t layers, cuda_kernel_t kernel,
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

static inline void s_check_model (const uint32_t *sizes, const activation_t *acts, size_t layers, cuda_kernel_t kernel,
                           bool graph, const uint32_t *rows_list, size_t nrows, const char *label)
{
    s_check_model_zc (sizes, acts, layers, kernel, graph, false, rows_list, nrows, label);
}

/* ---- kernel "persistent" ---- */

static inline model_config_t s_pconfig (uint32_t max_rows, uint32_t watchdog_ms)
{
    model_config_t cfg = s_config (CUDA_KERNEL_PERSISTENT, true, max_rows);
    cfg.watchdog_ms = watchdog_ms;
    return cfg;
}

static inline backend_model_t *s_pload (const weights_t *w, const model_config_t *cfg, char *err, size_t errlen)
{
    return backend_cuda_iface.load (w, cfg, cfg->device, err, errlen);
}

/* One answer of M on fresh inputs, within its bound of W's float64 reference. */
static inline void s_one_ok (const backend_iface_t *iface, backend_model_t *m, const weights_t *w, const char *what)
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

static inline double s_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

/* ---- the main ---- */

/* Is there a device? Asked in a child (tu_in_child): the parent must not initialise CUDA before
 * Check forks. */
static inline int s_count_devices (char *msg, size_t cap)
{
    int count = 0;
    return cuda_device_count (&count, msg, cap);
}

static inline bool s_device_present (char *why, size_t len)
{
    return tu_in_child (s_count_devices, why, len);
}

/* Whether the suite runs: SKIP (and false) without a device; else the seed, printed. Every kernel
 * is loaded when CUDA starts (as sigserve does): a lazy module load while a persistent kernel spins
 * could wait for it (test_cuda_resident --probe shows what happens without). */
static inline bool s_cuda_start (void)
{
    setenv ("CUDA_MODULE_LOADING", "EAGER", 0);
    char why[256];
    if (!s_device_present (why, sizeof why)) {
        printf ("SKIP: no CUDA device: %s\n", why);
        return false;
    }
    s_seed = (uint64_t) time (NULL) * 0x9e3779b97f4a7c15ull;
    printf ("seed %llu\n", (unsigned long long) s_seed);
    return true;
}

/* Runs S, then LOST (the tests that lose the context on purpose; a TCase named "lost", or NULL).
 * With CK_FORK=no every test shares one context, so they run in a process of their own (this binary
 * again, CK_RUN_CASE=lost, each test forked), after the rest. The process's exit code. */
static inline int s_cuda_run (Suite *s, TCase *lost, char **argv)
{
    const char *fork_mode = getenv ("CK_FORK");
    const bool shared = fork_mode && strcmp (fork_mode, "no") == 0;
    if (!lost || !shared || getenv ("CK_RUN_CASE")) {
        if (lost)
            suite_add_tcase (s, lost);
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

#endif
