/* What the client suites share: test_client.c (libsigclient) and test_client_cli.c (the sigclient
 * CLI), both against the real sigserve binary over tcp loopback (tu_fixture: tick_mlp and "odd" on
 * the CPU, two endpoints). The engine of the TCase (zmtp, libzmq), a client per test connected to
 * both endpoints, a seed printed once, and outputs collected with their float64 references and
 * error bounds to be compared at once (tolerance.h).
 *
 * Each suite's binary includes it once, after defining _GNU_SOURCE: everything here is static. */
#ifndef SIGSERVE_CLIENT_TESTS_H
#define SIGSERVE_CLIENT_TESTS_H

#include "rng.h"
#include "st_write.h"
#include "reference.h"
#include "base/config.h"
#include "weights/weights.h"
#include "weights/safetensors.h"
#include "sigclient.h"
#include "signal.pb-c.h"
#include "testutil.h"
#include "tolerance.h"

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TICK_IN 512
#define ODD_IN 33
#define ODD_HIDDEN 31
#define ODD_OUT 3

static tu_fixture_t s_fx;
static char s_dead_endpoint[128];   /* a port nobody listens on */
static uint64_t s_seed, s_seed0;   /* s_seed0: the printed seed; every test starts from it */
static sigclient_t *s_client;       /* per test (checked fixture): connected to both endpoints */
static sigclient_engine_t s_engine; /* the TCase's (checked fixture): every client and CLI run uses it */

/* ---- helpers ---- */

static inline double s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static inline void s_random (float *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        f[i] = rng_uniform (&s_seed, -2.0f, 2.0f);
}

static inline const weights_t *s_weights (const char *model)
{
    return strcmp (model, "odd") == 0 ? s_fx.odd : s_fx.tick;
}

/* Outputs collected over several requests with their float64 references and error bounds,
 * compared at once; ROW_LEN outputs a row (one model). */
typedef struct {
    float *out;
    double *ref, *bound;
    size_t n, cap, row_len;
} collected_t;

static inline void s_collect (collected_t *c, const weights_t *w, const float *in, uint32_t rows, const float *out,
                       size_t n_out)
{
    ck_assert_uint_eq (n_out, (size_t) rows * w->output_size);
    ck_assert (c->n == 0 || c->row_len == w->output_size);
    c->row_len = w->output_size;
    if (c->n + n_out > c->cap) {
        c->cap = (c->n + n_out) * 2;
        c->out = realloc (c->out, c->cap * sizeof *c->out);
        c->ref = realloc (c->ref, c->cap * sizeof *c->ref);
        c->bound = realloc (c->bound, c->cap * sizeof *c->bound);
        ck_assert (c->out && c->ref && c->bound);
    }
    memcpy (c->out + c->n, out, n_out * sizeof *out);
    ck_assert_int_eq (tol_mlp (w, in, rows, c->ref + c->n, c->bound + c->n), 0);
    c->n += n_out;
}

static inline void s_expect_collected_match (collected_t *c, const char *what)
{
    ck_assert_uint_gt (c->n, 0);
    TOL_ASSERT (c->out, c->ref, c->bound, c->n, c->row_len, "%s, %zu outputs (seed %llu)", what, c->n,
                (unsigned long long) s_seed0);
    free (c->out);
    free (c->ref);
    free (c->bound);
    *c = (collected_t) { 0 };
}

static inline sigclient_t *s_new_client (const char *endpoint, int timeout_ms)
{
    const char *eps[1] = { endpoint };
    sigclient_t *c = sigclient_new_engine (eps, 1, timeout_ms, s_engine, NULL);
    ck_assert_ptr_nonnull (c);
    ck_assert_int_eq (sigclient_engine (c), s_engine);
    return c;
}

/* A client's sockets (and with libzmq its context) must not cross Check's fork: one per test. */
static inline void s_client_new (void)
{
    const char *eps[2] = { s_fx.endpoint[0], s_fx.endpoint[1] };
    s_client = sigclient_new_engine (eps, 2, 5000, s_engine, NULL);
    ck_assert_ptr_nonnull (s_client);
}

static inline void s_client_new_zmtp (void)
{
    s_engine = SIGCLIENT_ENGINE_ZMTP;
    s_client_new ();
}

static inline void s_client_new_libzmq (void)
{
    s_engine = SIGCLIENT_ENGINE_LIBZMQ;
    s_client_new ();
}

static inline void s_client_destroy (void)
{
    sigclient_destroy (&s_client);
    ck_assert_ptr_null (s_client);
}

/* ---- the TCases ---- */

static inline void s_setup (void)
{
    const tu_fixture_options_t options = { .tick_backend = "cpu", .odd_kernel = "loop", .queue_depth = 1024 };
    tu_fixture_setup (&s_fx, &options);
    snprintf (s_dead_endpoint, sizeof s_dead_endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
}

static inline void s_teardown (void) { tu_fixture_teardown (&s_fx); }

/* The seed, printed under NAME: every test starts from it. */
static inline void s_seed_init (const char *name)
{
    s_seed = s_seed0 = (uint64_t) time (NULL) * 2654435761u;
    printf ("%s: seed %llu\n", name, (unsigned long long) s_seed);
    fflush (stdout);
}

/* The TCase of engine E (0: zmtp, 1: libzmq): sigserve started once for it (unchecked fixture), a
 * client of that engine made and destroyed around each case (checked fixture), 60 s a case. */
static inline TCase *s_engine_tcase (size_t e)
{
    static const struct { const char *name; void (*setup) (void); } engines[] = {
        { "zmtp", s_client_new_zmtp }, { "libzmq", s_client_new_libzmq },
    };
    TCase *tc = tcase_create (engines[e].name);
    tcase_add_unchecked_fixture (tc, s_setup, s_teardown);
    tcase_add_checked_fixture (tc, engines[e].setup, s_client_destroy);
    tcase_set_timeout (tc, 60);
    return tc;
}

#endif
