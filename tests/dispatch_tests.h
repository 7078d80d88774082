/* What the serving/dispatch.h suites share: test_dispatch.c (admission to a model's instances) and
 * test_dispatch_fronts.c (where a job runs: inline on a front, a group's one worker, two fronts'
 * lanes). The models, loaded by model_new from a config written here: a CPU MLP ("mlp", 5 -> 4 -> 2,
 * three instances, queue_depth 8), a CPU LSTM ("seq", window 4 of 3 inputs, three instances),
 * "big" (large buffers), "timed" (admission by time), "wide" (over inline_us a launch), three MLPs
 * in group "g" and "slow" in a group of its own; requests as the front hands them over; and the
 * wrapped waker.
 *
 * Holding jobs in the queue without relying on time: the Makefile links both suites with
 * -Wl,--wrap=waker_wake,--wrap=waker_sleep. The wrappers keep the wakers of the workers inside
 * waker_sleep, and while the test holds the wake-ups an admission wakes nobody (the waker it would
 * have rung is recorded instead). A worker asleep whose waker holds no wake-up has already looked at
 * its queue for the last time before sleeping with no timeout, so every job admitted while the
 * wake-ups are held stays queued, and the recorded wakers say which instance each admission chose,
 * until the test rings them.
 *
 * Each suite's binary includes it once, after defining _GNU_SOURCE: everything here is static but
 * the two wrappers the linker asks for. */
#ifndef SIGSERVE_DISPATCH_TESTS_H
#define SIGSERVE_DISPATCH_TESTS_H

#include "serving/dispatch.h"
#include "backends/backends.h"
#include "base/log.h"
#include "clock.h"
#include "lstm_reference.h"
#include "reference.h"
#include "rng.h"
#include "st_write.h"
#include "testutil.h"
#include "tolerance.h"

#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the wrapped waker ---- */

void __real_waker_wake (waker_t *w);
void __real_waker_sleep (waker_t *w, uint64_t timeout_ns);

#define RECORDED_MAX 1024

static atomic_bool s_holding;
static atomic_int s_asleep;                     /* workers inside waker_sleep */
static waker_t *s_recorded[RECORDED_MAX];      /* the wakers admissions rang while held, in order */
static int s_recorded_count;

void __wrap_waker_wake (waker_t *w)
{
    if (atomic_load (&s_holding)) {
        ck_assert_int_lt (s_recorded_count, RECORDED_MAX);
        s_recorded[s_recorded_count++] = w;     /* only the test's thread admits */
        return;
    }
    __real_waker_wake (w);
}

/* The wakers of the workers inside waker_sleep (one entry a worker asleep). */
static pthread_mutex_t s_sleepers_lock = PTHREAD_MUTEX_INITIALIZER;
static waker_t *s_sleepers[RECORDED_MAX];
static int s_sleeper_count;

void __wrap_waker_sleep (waker_t *w, uint64_t timeout_ns)
{
    pthread_mutex_lock (&s_sleepers_lock);
    s_sleepers[s_sleeper_count++] = w;
    pthread_mutex_unlock (&s_sleepers_lock);
    atomic_fetch_add (&s_asleep, 1);
    __real_waker_sleep (w, timeout_ns);
    atomic_fetch_sub (&s_asleep, 1);
    pthread_mutex_lock (&s_sleepers_lock);
    for (int i = 0; i < s_sleeper_count; i++)
        if (s_sleepers[i] == w) {
            s_sleepers[i] = s_sleepers[--s_sleeper_count];
            break;
        }
    pthread_mutex_unlock (&s_sleepers_lock);
}

/* Whether the worker asleep on W stays asleep until it is woken: no wake-up pending (its eventfd
 * empty; a futex waker's word still the one it announced) and still announced. In that order: a
 * sleep that returns stores sleeping 0 before it reads its eventfd empty. */
static inline bool s_stays_asleep (waker_t *w)
{
    bool pending;
    if (w->fd >= 0) {
        struct pollfd p = { .fd = w->fd, .events = POLLIN };
        pending = poll (&p, 1, 0) > 0;
    } else
        pending = atomic_load (&w->seq) != w->snap;
    return !pending && atomic_load (&w->sleeping) == 1;
}

/* Whether N workers are inside waker_sleep and every one stays asleep until woken. */
static inline bool s_settled (int n)
{
    pthread_mutex_lock (&s_sleepers_lock);
    bool settled = s_sleeper_count == n;
    for (int i = 0; settled && i < s_sleeper_count; i++)
        settled = s_stays_asleep (s_sleepers[i]);
    pthread_mutex_unlock (&s_sleepers_lock);
    return settled;
}

/* Waits (10 s at most) until N workers sleep and stay asleep: a wake-up left over in a waker's
 * eventfd (rung while its worker was looking at its queue) makes its next sleep return at once, and
 * a worker counted asleep then would take what the test queues; so each sleeping worker's waker must
 * hold no wake-up (s_stays_asleep). Then holds the wake-ups: from here on only s_release wakes them. */
static inline void s_hold (int n)
{
    const uint64_t until = clock_now_ns () + 10000000000ull;
    while (!s_settled (n) && clock_now_ns () < until)
        usleep (100);
    ck_assert_msg (s_settled (n), "%d of %d workers asleep after 10 s (or one with a wake-up pending)",
                   atomic_load (&s_asleep), n);
    s_recorded_count = 0;
    atomic_store (&s_holding, true);
}

/* Rings the wakers recorded from FROM on (the workers they belong to take their queues). */
static inline void s_release (int from)
{
    atomic_store (&s_holding, false);
    for (int i = from; i < s_recorded_count; i++)
        __real_waker_wake (s_recorded[i]);
}

/* ---- the models ---- */

#define IN 5
#define OUT 2
#define MAX_ROWS 4
#define DEPTH 8
#define WINDOW 4
#define STEP 3
#define TIMED_DEPTH 4096        /* model "timed": a queue deep enough that time refuses first */
#define TIMED_MAX_QUEUE_US 20
#define WIDE 1536               /* model "wide": 5 -> 1536 -> 1536 -> 2, far over inline_us (20) a launch */

/* Models 5, 6, 7: the mlp in group "g", one row a launch (so a turn takes one request); model 8:
 * "wide" in a group of its own ("slow"). */
#define GROUPED(name, group)                                                                              \
    "   { \"name\": \"" name "\", \"group\": \"" group "\", \"backend\": \"cpu\", \"max_rows\": 1, "                \
    "\"max_batch_rows\": 1,\n     \"queue_depth\": 64, \"weights\": \"mlp.safetensors\",\n"                        \
    "     \"layers\": [ { \"weight\": \"a.weight\", \"bias\": \"a.bias\", \"activation\": \"tanh\" },\n"           \
    "                 { \"weight\": \"b.weight\", \"bias\": \"b.bias\" } ] }"

static char *s_dir;
static config_t *s_cfg;
static weights_t *s_mlp_w, *s_seq_w;

static inline void s_setup (void)
{
    log_set_level (LOG_LEVEL_WARN);
    s_dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (s_dir);
    const uint32_t sizes[] = { IN, 4, OUT };
    const activation_t acts[] = { ACTIVATION_TANH, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 2, 17);
    st_write_tensor_t t[4] = {
        { "a.weight", 2, { 4, IN }, w->layers[0].weight }, { "a.bias", 1, { 4 }, w->layers[0].bias },
        { "b.weight", 2, { OUT, 4 }, w->layers[1].weight }, { "b.bias", 1, { OUT }, w->layers[1].bias },
    };
    char path[4200], err[1024];
    snprintf (path, sizeof path, "%s/mlp.safetensors", s_dir);
    ck_assert_msg (safetensors_write_f32 (path, t, 4, err, sizeof err) == 0, "%s", err);
    weights_destroy (&w);
    const uint32_t wide_sizes[] = { IN, WIDE, WIDE, OUT };
    const activation_t wide_acts[] = { ACTIVATION_TANH, ACTIVATION_TANH, ACTIVATION_NONE };
    w = weights_random (wide_sizes, wide_acts, 3, 19);
    st_write_tensor_t wt[3] = {
        { "a.weight", 2, { WIDE, IN }, w->layers[0].weight }, { "b.weight", 2, { WIDE, WIDE }, w->layers[1].weight },
        { "c.weight", 2, { OUT, WIDE }, w->layers[2].weight },
    };
    snprintf (path, sizeof path, "%s/wide.safetensors", s_dir);
    ck_assert_msg (safetensors_write_f32 (path, wt, 3, err, sizeof err) == 0, "%s", err);
    weights_destroy (&w);
    const lstm_shape_t shape = { .layers = 1, .step_size = STEP, .hidden = 4, .out = OUT, .window = WINDOW };
    snprintf (path, sizeof path, "%s/seq.safetensors", s_dir);
    ck_assert_msg (lstm_random_file (path, &shape, 18, err, sizeof err) == 0, "%s", err);
    char json[8192];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:1\"] },\n"
              "  \"models\": [\n"
              "   { \"name\": \"mlp\", \"backend\": \"cpu\", \"instances\": 3, \"max_rows\": %d, \"queue_depth\": %d,\n"
              "     \"weights\": \"mlp.safetensors\",\n"
              "     \"layers\": [ { \"weight\": \"a.weight\", \"bias\": \"a.bias\", \"activation\": \"tanh\" },\n"
              "                 { \"weight\": \"b.weight\", \"bias\": \"b.bias\" } ] },\n"
              "   { \"name\": \"seq\", \"type\": \"lstm\", \"backend\": \"cpu\", \"instances\": 3, \"max_rows\": 2,\n"
              "     \"queue_depth\": 64, \"weights\": \"seq.safetensors\", \"lstm\": \"lstm.\", \"window\": %d,\n"
              "     \"head\": { \"weight\": \"head.weight\", \"bias\": \"head.bias\" } },\n"
              "   { \"name\": \"big\", \"backend\": \"cpu\", \"instances\": 3, \"max_rows\": %d, \"queue_depth\": %d,\n"
              "     \"buffer_rows\": 1, \"large_buffers\": 2, \"weights\": \"mlp.safetensors\",\n"
              "     \"layers\": [ { \"weight\": \"a.weight\", \"bias\": \"a.bias\", \"activation\": \"tanh\" },\n"
              "                 { \"weight\": \"b.weight\", \"bias\": \"b.bias\" } ] },\n"
              "   { \"name\": \"timed\", \"backend\": \"cpu\", \"instances\": 1, \"max_rows\": 1, \"max_batch_rows\": 1,\n"
              "     \"queue_depth\": %d, \"max_queue_us\": %d, \"weights\": \"mlp.safetensors\",\n"
              "     \"layers\": [ { \"weight\": \"a.weight\", \"bias\": \"a.bias\", \"activation\": \"tanh\" },\n"
              "                 { \"weight\": \"b.weight\", \"bias\": \"b.bias\" } ] },\n"
              "   { \"name\": \"wide\", \"backend\": \"cpu\", \"max_rows\": 1, \"weights\": \"wide.safetensors\",\n"
              "     \"layers\": [ { \"weight\": \"a.weight\", \"bias\": null, \"activation\": \"tanh\" },\n"
              "                 { \"weight\": \"b.weight\", \"bias\": null, \"activation\": \"tanh\" },\n"
              "                 { \"weight\": \"c.weight\", \"bias\": null } ] },\n"
              GROUPED ("g1", "g") ",\n" GROUPED ("g2", "g") ",\n" GROUPED ("g3", "g") ",\n"
              "   { \"name\": \"slow\", \"group\": \"slow\", \"backend\": \"cpu\", \"max_rows\": 1,\n"
              "     \"max_queue_us\": 60000000, \"weights\": \"wide.safetensors\",\n"
              "     \"layers\": [ { \"weight\": \"a.weight\", \"bias\": null, \"activation\": \"tanh\" },\n"
              "                 { \"weight\": \"b.weight\", \"bias\": null, \"activation\": \"tanh\" },\n"
              "                 { \"weight\": \"c.weight\", \"bias\": null } ] } ] }\n",
              MAX_ROWS, DEPTH, WINDOW, MAX_ROWS, DEPTH, TIMED_DEPTH, TIMED_MAX_QUEUE_US);
    char *config = tu_write_file (s_dir, "dispatch.json", json, -1);
    s_cfg = config_load (config, err, sizeof err);
    free (config);
    ck_assert_msg (s_cfg != NULL, "%s", err);
    s_mlp_w = weights_load (&s_cfg->models[0], err, sizeof err);
    ck_assert_msg (s_mlp_w != NULL, "%s", err);
    s_seq_w = weights_load (&s_cfg->models[1], err, sizeof err);
    ck_assert_msg (s_seq_w != NULL && s_seq_w->lstm, "%s", err);
}

static inline void s_teardown (void)
{
    weights_destroy (&s_mlp_w);
    weights_destroy (&s_seq_w);
    config_destroy (&s_cfg);
    tu_remove_tree (s_dir);
    free (s_dir);
}

static inline model_t *s_model (int which)
{
    char err[1024];
    model_t *m = model_new (&s_cfg->models[which], &s_cfg->server, NULL, NULL, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    ck_assert_uint_eq (model_instance_count (m), 3);
    return m;
}

/* ---- requests as the front hands them over ---- */

typedef struct {
    char who[32];
    frame_t envelope[2];            /* a ROUTER routing id ("client-ID") and a REQ delimiter */
    float features[MAX_ROWS * WINDOW * STEP];
    uint32_t rows;
    uint64_t id, stream;
    size_t feature_count;
} request_t;

static inline void s_request (request_t *r, uint64_t id, uint32_t rows, uint64_t stream, size_t per_row, uint64_t seed)
{
    memset (r, 0, sizeof *r);
    int n = snprintf (r->who, sizeof r->who, "client-%llu", (unsigned long long) id);
    r->envelope[0] = (frame_t) { (const uint8_t *) r->who, (size_t) n };
    r->envelope[1] = (frame_t) { (const uint8_t *) "", 0 };
    r->id = id;
    r->rows = rows;
    r->stream = stream;
    r->feature_count = rows * per_row;
    for (size_t i = 0; i < r->feature_count; i++)
        r->features[i] = rng_uniform (&seed, -2, 2);
}

static inline sig_status_t s_admit (model_t *m, request_t *r, char *err, size_t errlen)
{
    const admission_t a = { .socket = 3, .envelope = r->envelope, .envelope_count = 2, .request_id = r->id,
                            .stream_id = r->stream, .t_recv = clock_now_ns (), .rows = r->rows,
                            .features = r->features, .feature_count = r->feature_count };
    err[0] = '\0';
    return dispatch_admit (m, &a, NULL, err, errlen);
}

static inline void s_admit_ok (model_t *m, request_t *r)
{
    char err[512];
    sig_status_t st = s_admit (m, r, err, sizeof err);
    ck_assert_msg (st == SIG_OK, "request %llu: status %d: %s", (unsigned long long) r->id, st, err);
    /* The frames were copied into the job: the caller's may go. */
    memset (r->who, 'x', sizeof r->who);
}

/* Collects N finished jobs (10 s at most) into JOBS, in the order they came. */
static inline void s_collect (model_t *m, job_t **jobs, int n)
{
    const uint64_t until = clock_now_ns () + 10000000000ull;
    int got = 0;
    while (got < n && clock_now_ns () < until) {
        job_t *j = dispatch_next_done (m, 0);
        if (j)
            jobs[got++] = j;
        else
            usleep (100);
    }
    ck_assert_msg (got == n, "%d of %d jobs came back in 10 s", got, n);
    ck_assert_ptr_null (dispatch_next_done (m, 0));
}

/* The envelope a job carries back is the request's: "client-ID", then the empty delimiter. */
static inline void s_assert_envelope (job_t *j)
{
    char who[32];
    int n = snprintf (who, sizeof who, "client-%llu", (unsigned long long) j->request_id);
    ck_assert_int_eq (j->socket, 3);
    frame_t f[JOB_ENVELOPE_MAX];
    ck_assert_int_eq (envelope_frames (&j->envelope, f), 2);
    ck_assert_uint_eq (f[0].size, (size_t) n);
    ck_assert_mem_eq (f[0].data, who, (size_t) n);
    ck_assert_uint_eq (f[1].size, 0);
}

/* What the front does once the reply is sent: the job back in the pool. */
static inline void s_return (model_t *m, job_t *j) { dispatch_job_return (m, j); }

#endif
