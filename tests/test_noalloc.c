/* No heap allocation per request once warm: the front runs in this process on a thread of its
 * own and the model's workers on theirs; the link wraps malloc, calloc, realloc, aligned_alloc and
 * posix_memalign (see the Makefile), so every call that sigserve's own code (libsigcore) makes on
 * any of the server's threads (those with a role: threads_role) is counted.
 * libzmq and libc allocate inside themselves (message bodies over 33 bytes, for one): those are
 * their business and not what this test is about; protobuf-c decodes into our arena. */
#include "rng.h"
#include "base/config.h"
#include "base/log.h"
#include "weights/weights.h"
#include "serving/registry.h"
#include "front/server.h"
#include "base/stats.h"
#include "base/threads.h"
#include "signal.pb-c.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

void *__real_malloc (size_t n);
void *__real_calloc (size_t n, size_t m);
void *__real_realloc (void *p, size_t n);
void *__real_aligned_alloc (size_t a, size_t n);
int __real_posix_memalign (void **p, size_t a, size_t n);

static atomic_int s_counting;
static atomic_long s_allocations;

static void s_count (void)
{
    if (atomic_load (&s_counting) && threads_role ()[0] != '\0')
        atomic_fetch_add (&s_allocations, 1);
}

void *__wrap_malloc (size_t n) { s_count (); return __real_malloc (n); }
void *__wrap_calloc (size_t n, size_t m) { s_count (); return __real_calloc (n, m); }
void *__wrap_realloc (void *p, size_t n) { s_count (); return __real_realloc (p, n); }
void *__wrap_aligned_alloc (size_t a, size_t n) { s_count (); return __real_aligned_alloc (a, n); }
int __wrap_posix_memalign (void **p, size_t a, size_t n) { s_count (); return __real_posix_memalign (p, a, n); }

static volatile sig_atomic_t s_stop;

/* Requests the fronts ran themselves, every model's. */
static uint64_t s_inlined (const stats_t *stats)
{
    uint64_t n = 0;
    for (size_t slot = 0; slot < stats_slot_count (stats); slot++)
        n += stats_inline (stats, slot);
    return n;
}

static void *s_serve (void *arg)
{
    server_run (arg, &s_stop);
    return NULL;
}

static void s_send (void *sock, const Sigserve__V1__Request *req)
{
    uint8_t buf[65536];
    size_t len = sigserve__v1__request__pack (req, buf);
    ck_assert_int_eq (zmq_send (sock, buf, len, 0), (int) len);
}

static void s_send_to (void *sock, const char *model, const float *features, size_t n)
{
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__InferRequest inf = SIGSERVE__V1__INFER_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
    req.infer = &inf;
    inf.model = (char *) model;
    inf.features = (float *) features;
    inf.n_features = n;
    inf.rows = 1;
    s_send (sock, &req);
}

static void s_send_one (void *sock, const float *features) { s_send_to (sock, "tick_mlp", features, 512); }

#define BURST 8
#define PER_ROUND (11 + BURST)

/* One round of every kind of request: good ones of 1 and 16 rows (over buffer_rows 4: a large buffer), each
 * error, health, list, and a
 * burst of single-row requests. */
static int s_round (void *sock, const float *features)
{
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__InferRequest inf = SIGSERVE__V1__INFER_REQUEST__INIT;
    Sigserve__V1__HealthRequest h = SIGSERVE__V1__HEALTH_REQUEST__INIT;
    Sigserve__V1__ListModelsRequest l = SIGSERVE__V1__LIST_MODELS_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
    req.infer = &inf;
    inf.model = (char *) "tick_mlp";
    inf.features = (float *) features;
    const struct { const char *model; size_t n; uint32_t rows; } cases[] = {
        { "tick_mlp", 512, 1 }, { "tick_mlp", 16 * 512, 16 }, { "nope", 512, 1 }, { "tick_mlp", 511, 1 },
        { "tick_mlp", 1000, 3 }, { "tick_mlp", 17 * 4, 17 }, { "nan", 512, 1 },
    };
    int sent = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        inf.model = (char *) (strcmp (cases[c].model, "nan") == 0 ? "tick_mlp" : cases[c].model);
        inf.features = (float *) features + (strcmp (cases[c].model, "nan") == 0 ? 16 * 512 : 0);
        inf.n_features = cases[c].n;
        inf.rows = cases[c].rows;
        inf.request_id = (uint64_t) c;
        s_send (sock, &req);
        sent++;
    }
    req.body_case = SIGSERVE__V1__REQUEST__BODY_HEALTH;
    req.health = &h;
    s_send (sock, &req);
    req.body_case = SIGSERVE__V1__REQUEST__BODY_LIST_MODELS;
    req.list_models = &l;
    s_send (sock, &req);
    zmq_send (sock, "\xff\xff\xff", 3, 0);   /* undecodable */
    zmq_send (sock, "", 0, 0);               /* empty */
    /* A burst the worker takes as batches of several requests. */
    for (int b = 0; b < BURST; b++)
        s_send_one (sock, features);
    return sent + 4 + BURST;
}

static void s_drain (void *sock, int n)
{
    uint8_t buf[65536];
    for (int i = 0; i < n; i++)
        ck_assert_int_gt (zmq_recv (sock, buf, sizeof buf, 0), 0);
}

/* With one front (_i 0) and with two (_i 1: a front on each of two endpoints, the rounds going to
 * both in turn). */
START_TEST (no_allocation_per_request_once_warm)
{
    const int fronts = 1 + _i;
    char *dir = tu_tmpdir ();
    char json[16384], weights[4096], endpoint[2][64];
    ck_assert_ptr_nonnull (realpath (tu_build_dir (), weights));
    for (int k = 0; k < 2; k++)
        snprintf (endpoint[k], sizeof endpoint[k], "tcp://127.0.0.1:%d", tu_free_port ());
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\", \"%s\"], \"fronts\": %d, \"log_level\": \"error\", "
              "\"inline_us\": 10000 },"
              "  \"models\": [ { \"name\": \"tick_mlp\", \"backend\": \"cpu\", \"max_rows\": 16, \"buffer_rows\": 4,"
              "    \"weights\": \"%s/models/tick_mlp.safetensors\","
              "    \"layers\": [ { \"weight\": \"0.weight\", \"activation\": \"relu\" },"
              "                 { \"weight\": \"2.weight\", \"activation\": \"relu\" }, { \"weight\": \"4.weight\" } ] },"
              "    { \"name\": \"tiny\", \"backend\": \"cpu\", \"weights\": \"%s/models/tick_mlp.safetensors\","
              "      \"layers\": [ { \"weight\": \"4.weight\" } ] } ] }",
              endpoint[0], endpoint[1], fronts, weights, weights);
    char *path = tu_write_file (dir, "noalloc.json", json, -1);
    log_set_level (LOG_LEVEL_ERROR);
    char err[1024];
    config_t *cfg = config_load (path, err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    stats_t *stats = stats_new ();      /* the models' counts and the server's, in one place */
    ck_assert_ptr_nonnull (stats);
    model_registry_t *models = model_registry_load (cfg, stats, NULL, NULL, NULL, err, sizeof err);
    ck_assert_msg (models != NULL, "%s", err);
    server_t *server = server_new (&cfg->server, models, stats, NULL, NULL, err, sizeof err);
    ck_assert_msg (server != NULL, "%s", err);
    pthread_t th;
    s_stop = 0;
    pthread_create (&th, NULL, s_serve, server);

    void *ctx = zmq_ctx_new ();
    void *socks[2];
    for (int k = 0; k < 2; k++) {
        socks[k] = zmq_socket (ctx, ZMQ_DEALER);
        int timeout = 10000, linger = 0;
        zmq_setsockopt (socks[k], ZMQ_RCVTIMEO, &timeout, sizeof timeout);
        zmq_setsockopt (socks[k], ZMQ_LINGER, &linger, sizeof linger);
        zmq_connect (socks[k], endpoint[k]);
    }
    static float features[17 * 512];
    uint64_t seed = 5;
    for (size_t i = 0; i < sizeof features / sizeof features[0]; i++)
        features[i] = rng_uniform (&seed, -1, 1);
    features[16 * 512 + 100] = NAN;

    for (int r = 0; r < 50; r++)   /* warm */
        s_drain (socks[r % 2], s_round (socks[r % 2], features));
    atomic_store (&s_counting, 1);
    long requests = 0;
    for (int r = 0; r < 200; r++) {
        int n = s_round (socks[r % 2], features);
        s_drain (socks[r % 2], n);
        requests += n;
    }
    /* One request at a time: the front runs each itself (server.inline_us, 10 ms here), on its
     * own context. To "tiny" (64 -> 1), whose launch stays far under 10 ms however slow a
     * sanitizer's build and a loaded machine make it (the front decides by the launch time measured
     * and its drift: tick_mlp's was once predicted over 10 ms under ASan on a busy machine). The
     * front runs requests itself for up to inline_us of compute a turn, after a turn of at most two
     * messages (when it was first the only message of its turn, a front descheduled between a reply
     * and the end of its turn handed the next to the worker: 199 of 200 under make test on 2 busy
     * cores). The client sends until 200 ran on the front, each after the reply before it; every
     * one, inlined or handed off, is counted for allocations. Then 100 pairs sent together: a pair
     * is at most two messages a turn, so both of each run on the front too. */
    const uint64_t inlined_before = s_inlined (stats);
    int sent = 0;
    while (s_inlined (stats) - inlined_before < 200 && sent < 2000) {
        s_send_to (socks[sent % 2], "tiny", features, 64);
        s_drain (socks[sent % 2], 1);
        sent++;
    }
    const uint64_t lone_inlined = s_inlined (stats) - inlined_before;
    for (int pair = 0; pair < 100; pair++) {
        s_send_to (socks[0], "tiny", features, 64);
        s_send_to (socks[0], "tiny", features, 64);
        s_drain (socks[0], 2);
    }
    atomic_store (&s_counting, 0);
    ck_assert_msg (atomic_load (&s_allocations) == 0, "%ld allocations by sigserve's code over %ld requests",
                   atomic_load (&s_allocations), requests + sent);

    s_stop = 1;
    pthread_join (th, NULL);
    /* The counts are exact once the server has returned (a reply can reach the client
     * before its front counts it as replied). */
    ck_assert_uint_eq (lone_inlined, 200);
    ck_assert_msg (sent < 400, "only %llu of %d lone requests ran on the front", (unsigned long long) lone_inlined, sent);
    ck_assert_uint_eq (s_inlined (stats) - inlined_before, 200 + 200);      /* every pair's two */
    ck_assert_int_eq (stats_server (stats, STATS_RECEIVED), 250 * PER_ROUND + sent + 200);
    ck_assert_int_eq (stats_server (stats, STATS_REPLIED), 250 * PER_ROUND + sent + 200);
    ck_assert_int_eq (stats_server (stats, STATS_ADMITTED), 250 * (2 + BURST) + sent + 200);
    zmq_close (socks[0]);
    zmq_close (socks[1]);
    zmq_ctx_term (ctx);
    server_destroy (&server);
    model_registry_destroy (&models);
    stats_destroy (&stats);
    config_destroy (&cfg);
    free (path);
    ck_assert_int_eq (tu_remove_tree (dir), 0);
    free (dir);
}
END_TEST

START_TEST (counter_counts_server_thread_allocations)
{
    /* Guards the test above against a wrap that silently does nothing. */
    threads_set_role ("counted");
    atomic_store (&s_allocations, 0);
    atomic_store (&s_counting, 1);
    void *(*volatile allocate) (size_t) = malloc;   /* so the compiler cannot elide the pair */
    void *p = allocate (64);
    atomic_store (&s_counting, 0);
    free (p);
    ck_assert_int_eq (atomic_load (&s_allocations), 1);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("noalloc");
    TCase *tc = tcase_create ("no_allocation");
    tcase_set_timeout (tc, 60);
    tcase_add_test (tc, counter_counts_server_thread_allocations);
    tcase_add_loop_test (tc, no_allocation_per_request_once_warm, 0, 2);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
