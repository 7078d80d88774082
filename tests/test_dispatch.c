/* serving/dispatch.h with serving/model.h, without sockets: a CPU MLP ("mlp", 5 -> 4 -> 2, three
 * instances, queue_depth 8) and a CPU LSTM ("seq", window 4 of 3 inputs, three instances), loaded
 * by model_new from a config written here. Admitted jobs come back through dispatch_next_done with
 * the reference's outputs, their request ids and envelope frames; ties go round-robin and
 * otherwise the least loaded instance takes a job; a stream always goes to instance stream_id % n;
 * a full queue, or every request buffer in use, answers OVERLOADED with the exact message and
 * takes nothing; dispatch_inflight and dispatch_queued count; dispatch_abort turns queued jobs into
 * UNAVAILABLE "shutting down".
 *
 * Holding jobs in the queue without relying on time: the Makefile links this test with
 * -Wl,--wrap=waker_wake,--wrap=waker_sleep. The wrappers count the workers inside waker_sleep, and
 * while the test holds the wake-ups an admission wakes nobody (the waker it would have rung is
 * recorded instead). A worker counted asleep has already looked at its queue for the last time
 * before sleeping with no timeout, so every job admitted while the wake-ups are held stays queued,
 * and the recorded wakers say which instance each admission chose, until the test rings them. */
#define _GNU_SOURCE
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

static atomic_int s_sleeps;                     /* entries into waker_sleep, ever */

void __wrap_waker_sleep (waker_t *w, uint64_t timeout_ns)
{
    atomic_fetch_add (&s_sleeps, 1);
    atomic_fetch_add (&s_asleep, 1);
    __real_waker_sleep (w, timeout_ns);
    atomic_fetch_sub (&s_asleep, 1);
}

/* Waits (10 s at most) until N workers sleep, and stay asleep: a wake-up left over in a waker's
 * eventfd (rung while its worker was looking at its queue) makes its next sleep return at once, and
 * a worker counted asleep then would take what the test queues. So: N asleep, and no worker entered
 * a sleep again over 5 ms. Then holds the wake-ups. */
static void s_hold (int n)
{
    const uint64_t until = clock_now_ns () + 10000000000ull;
    for (;;) {
        while (atomic_load (&s_asleep) != n && clock_now_ns () < until)
            usleep (100);
        const int entries = atomic_load (&s_sleeps);
        usleep (5000);
        if ((atomic_load (&s_asleep) == n && atomic_load (&s_sleeps) == entries) || clock_now_ns () >= until)
            break;
    }
    ck_assert_msg (atomic_load (&s_asleep) == n, "%d of %d workers asleep after 10 s", atomic_load (&s_asleep), n);
    s_recorded_count = 0;
    atomic_store (&s_holding, true);
}

/* Rings the wakers recorded from FROM on (the workers they belong to take their queues). */
static void s_release (int from)
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

static void s_setup (void)
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

static void s_teardown (void)
{
    weights_destroy (&s_mlp_w);
    weights_destroy (&s_seq_w);
    config_destroy (&s_cfg);
    tu_remove_tree (s_dir);
    free (s_dir);
}

static model_t *s_model (int which)
{
    char err[1024];
    model_t *m = model_new (&s_cfg->models[which], &s_cfg->server, NULL, err, sizeof err);
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

static void s_request (request_t *r, uint64_t id, uint32_t rows, uint64_t stream, size_t per_row, uint64_t seed)
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

static sig_status_t s_admit (model_t *m, request_t *r, char *err, size_t errlen)
{
    const admission_t a = { .socket = 3, .envelope = r->envelope, .envelope_count = 2, .request_id = r->id,
                            .stream_id = r->stream, .t_recv = clock_now_ns (), .rows = r->rows,
                            .features = r->features, .feature_count = r->feature_count };
    err[0] = '\0';
    return dispatch_admit (m, &a, NULL, err, errlen);
}

static void s_admit_ok (model_t *m, request_t *r)
{
    char err[512];
    sig_status_t st = s_admit (m, r, err, sizeof err);
    ck_assert_msg (st == SIG_OK, "request %llu: status %d: %s", (unsigned long long) r->id, st, err);
    /* The frames were copied into the job: the caller's may go. */
    memset (r->who, 'x', sizeof r->who);
}

/* Collects N finished jobs (10 s at most) into JOBS, in the order they came. */
static void s_collect (model_t *m, job_t **jobs, int n)
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
static void s_assert_envelope (job_t *j)
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
static void s_return (model_t *m, job_t *j) { dispatch_job_return (m, j); }

static request_t *s_find (request_t *reqs, int n, uint64_t id)
{
    for (int i = 0; i < n; i++)
        if (reqs[i].id == id)
            return &reqs[i];
    ck_abort_msg ("a job for request %llu, never admitted", (unsigned long long) id);
    return NULL;
}

/* ---- tests ---- */

static sig_status_t s_admit_by (model_t *m, request_t *r, uint32_t deadline_us, char *err, size_t errlen)
{
    const admission_t a = { .socket = 3, .envelope = r->envelope, .envelope_count = 2, .request_id = r->id,
                            .t_recv = clock_now_ns (), .rows = r->rows, .deadline_us = deadline_us,
                            .features = r->features, .feature_count = r->feature_count };
    err[0] = '\0';
    return dispatch_admit (m, &a, NULL, err, errlen);
}

/* Admission by time on model "timed" (one instance, batches of one row, max_queue_us 20, a queue
 * of 4096): with its worker held, the expected wait is exactly the queued rows x the launch timed
 * at load (model_describe says it; no launch has run since to move the drift). A request whose
 * deadline_us is under it is DEADLINE_EXCEEDED at once, one whose deadline is over it is admitted;
 * the first request that would wait over 20 us is OVERLOADED naming the model, the wait and the
 * limit, long before the queue is full; each refusal takes nothing and is counted by reason. Once
 * the worker has run the queue, the same request is admitted. */
START_TEST (admission_by_time_refuses_what_would_wait_too_long)
{
    char err[512];
    stats_t *stats = stats_new ();
    model_t *m = model_new (&s_cfg->models[3], &s_cfg->server, stats, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    const int slot = model_stats_slot (m);
    model_info_t *info = calloc (1, sizeof *info);
    model_describe (m, info);
    const uint64_t per = info->launch_ns + info->row_ns;   /* one row a launch */
    ck_assert_uint_gt (per, 0);
    ck_assert_uint_eq (info->max_queue_us, TIMED_MAX_QUEUE_US);
    ck_assert_uint_eq (info->queue_depth, TIMED_DEPTH);
    s_hold (1);
    request_t r;
    uint64_t id = 1, queued = 0;
    /* Queue until the expected wait is at least 3 us (and within max_queue_us). */
    while (queued * per < 3000) {
        s_request (&r, id, 1, 0, IN, id);
        id++;
        s_admit_ok (m, &r);
        queued++;
    }
    ck_assert_uint_le (queued * per, TIMED_MAX_QUEUE_US * 1000);   /* tiny models only: 3 us + one launch */
    const uint64_t wait = queued * per;
    const uint32_t under = (uint32_t) ((wait + 999) / 1000) - 1, over = 10000000;   /* 10 s */
    s_request (&r, id, 1, 0, IN, id);
    id++;
    ck_assert_int_eq (s_admit_by (m, &r, under, err, sizeof err), SIG_DEADLINE_EXCEEDED);
    char want[512];
    snprintf (want, sizeof want, "deadline_us: model \"timed\": the expected wait for a worker is %.3f us (%llu row(s) "
              "queued on instance 0), already over the request's deadline of %u us; not run", wait / 1e3,
              (unsigned long long) queued, under);
    ck_assert_str_eq (err, want);
    char who[32];
    snprintf (who, sizeof who, "client-%llu", (unsigned long long) (id - 1));
    ck_assert_uint_eq (r.envelope[0].size, strlen (who));       /* still the caller's */
    ck_assert_uint_eq (dispatch_queued (m), queued);      /* nothing taken */
    ck_assert_int_eq (s_admit_by (m, &r, over, err, sizeof err), SIG_OK);
    queued++;
    /* Fill up to max_queue_us: the next one is refused by time, not depth. */
    while ((queued + 1) * per <= TIMED_MAX_QUEUE_US * 1000) {
        s_request (&r, id, 1, 0, IN, id);
        id++;
        s_admit_ok (m, &r);
        queued++;
    }
    ck_assert_uint_lt (queued, TIMED_DEPTH);
    s_request (&r, id, 1, 0, IN, id);
    id++;
    const uint64_t full = queued * per;
    if (full > TIMED_MAX_QUEUE_US * 1000) {
        ck_assert_int_eq (s_admit_by (m, &r, 0, err, sizeof err), SIG_OVERLOADED);
        snprintf (want, sizeof want, "model \"timed\": the expected wait for a worker is %.3f us (%llu row(s) queued on "
                  "instance 0), over max_queue_us = %d; retry later, or raise the model's max_queue_us or instances",
                  full / 1e3, (unsigned long long) queued, TIMED_MAX_QUEUE_US);
        ck_assert_str_eq (err, want);
    } else {        /* exactly 20 us queued: one more fits, the next is refused */
        s_admit_ok (m, &r);
        queued++;
        s_request (&r, id, 1, 0, IN, id);
        id++;
        ck_assert_int_eq (s_admit_by (m, &r, 0, err, sizeof err), SIG_OVERLOADED);
    }
    ck_assert_uint_eq (dispatch_queued (m), queued);
    ck_assert_uint_eq (dispatch_inflight (m, 0), queued);
    ck_assert_uint_eq (stats_sheds (stats, (size_t) slot, SHED_QUEUE_TIME), 1);
    ck_assert_uint_eq (stats_sheds (stats, (size_t) slot, SHED_DEADLINE), 1);
    ck_assert_uint_eq (stats_sheds (stats, (size_t) slot, SHED_QUEUE_DEPTH), 0);
    /* The worker runs the queue; then the refused request is admitted. */
    s_release (0);
    job_t **jobs = calloc (queued, sizeof *jobs);
    s_collect (m, jobs, (int) queued);
    for (uint64_t k = 0; k < queued; k++) {
        ck_assert_int_eq (jobs[k]->status, SIG_OK);
        s_return (m, jobs[k]);
    }
    ck_assert_int_eq (s_admit_by (m, &r, 0, err, sizeof err), SIG_OK);
    s_collect (m, jobs, 1);
    ck_assert_uint_eq (jobs[0]->request_id, id - 1);
    s_return (m, jobs[0]);
    free (jobs);
    free (info);
    model_destroy (&m);
    stats_destroy (&stats);
}
END_TEST

START_TEST (admitted_jobs_come_back_with_outputs_ids_and_envelopes)
{
    /* As many as the queue holds (more could find it full: the workers run meanwhile). */
    model_t *m = s_model (0);
    enum { N = DEPTH };
    static request_t reqs[N];
    ck_assert_uint_eq (dispatch_inflight (m, 0), 0);
    for (int i = 0; i < N; i++) {
        s_request (&reqs[i], 100 + (uint64_t) i, 1 + (uint32_t) i % MAX_ROWS, 0, IN, 1000 + (uint64_t) i);
        s_admit_ok (m, &reqs[i]);
        ck_assert_uint_eq (dispatch_inflight (m, 0), (uint32_t) i + 1);   /* out of the pool until returned */
    }
    job_t *jobs[N];
    s_collect (m, jobs, N);
    ck_assert_uint_eq (dispatch_inflight (m, 0), N);
    bool seen[N] = { false };
    for (int k = 0; k < N; k++) {
        job_t *j = jobs[k];
        request_t *r = s_find (reqs, N, j->request_id);
        ck_assert (!seen[r->id - 100]);
        seen[r->id - 100] = true;
        ck_assert_msg (j->status == SIG_OK, "request %llu: status %d: %s", (unsigned long long) r->id, j->status,
                       j->error);
        ck_assert_uint_eq (j->rows, r->rows);
        ck_assert_uint_ge (j->batch_rows, j->rows);
        ck_assert_uint_le (j->batch_rows, MAX_ROWS);
        ck_assert_uint_eq (j->stream_id, 0);
        s_assert_envelope (j);
        double ref[MAX_ROWS * OUT], bound[MAX_ROWS * OUT];
        ck_assert_int_eq (tol_mlp (s_mlp_w, r->features, r->rows, ref, bound), 0);
        TOL_ASSERT (j->outputs, ref, bound, r->rows * OUT, OUT, "request %llu", (unsigned long long) r->id);
        s_return (m, j);
        ck_assert_uint_eq (dispatch_inflight (m, 0), (uint32_t) (N - k - 1));
    }
    uint64_t computed = 0;
    for (uint32_t i = 0; i < 3; i++)
        computed += model_instance_requests (m, i);
    ck_assert_uint_eq (computed, N);
    model_destroy (&m);
}
END_TEST

START_TEST (ties_go_round_robin_and_otherwise_the_least_loaded_instance)
{
    model_t *m = s_model (0);
    s_hold (3);
    enum { N = 9 };
    static request_t reqs[N];
    for (int i = 0; i < N; i++)
        s_request (&reqs[i], (uint64_t) i, 1, 0, IN, (uint64_t) i);
    /* Six admissions on a fresh model with equal queues: instances 0, 1, 2, 0, 1, 2. */
    for (int i = 0; i < 6; i++)
        s_admit_ok (m, &reqs[i]);
    ck_assert_int_eq (s_recorded_count, 6);
    waker_t *inst[3] = { s_recorded[0], s_recorded[1], s_recorded[2] };
    ck_assert (inst[0] != inst[1] && inst[1] != inst[2] && inst[0] != inst[2]);
    for (int i = 3; i < 6; i++)
        ck_assert_msg (s_recorded[i] == inst[i - 3], "admission %d did not go round-robin", i);
    ck_assert_uint_eq (dispatch_queued (m), 6);
    ck_assert_uint_eq (dispatch_inflight (m, 0), 6);
    /* Instance 1 alone takes its two; the others keep theirs queued. */
    atomic_store (&s_holding, false);
    __real_waker_wake (inst[1]);
    job_t *jobs[N];
    s_collect (m, jobs, 2);
    ck_assert_uint_eq (jobs[0]->request_id, 1);
    ck_assert_uint_eq (jobs[1]->request_id, 4);
    ck_assert_uint_eq (model_instance_requests (m, 1), 2);
    s_hold (3);             /* instance 1's worker is back asleep */
    ck_assert_uint_eq (dispatch_queued (m), 4);
    /* Queues 2, 0, 2 and round-robin would start at instance 0: the least loaded, 1, takes the next
     * two (queues 2, 1, 2 after the first), then the tie at 2, 2, 2 goes on round-robin after 1. */
    for (int i = 6; i < 9; i++)
        s_admit_ok (m, &reqs[i]);
    ck_assert_int_eq (s_recorded_count, 3);
    ck_assert_msg (s_recorded[0] == inst[1], "the 7th admission did not go to the idle instance 1");
    ck_assert_msg (s_recorded[1] == inst[1], "the 8th admission did not go to instance 1 (queues 2, 1, 2)");
    ck_assert_msg (s_recorded[2] == inst[2], "the 9th admission did not go round-robin after instance 1");
    for (int i = 0; i < 3; i++)
        __real_waker_wake (inst[i]);
    atomic_store (&s_holding, false);
    s_collect (m, jobs + 2, N - 2);
    for (int k = 0; k < N; k++) {
        ck_assert_int_eq (jobs[k]->status, SIG_OK);
        s_assert_envelope (jobs[k]);
        s_return (m, jobs[k]);
    }
    ck_assert_uint_eq (model_instance_requests (m, 0), 2);      /* 0 and 3 */
    ck_assert_uint_eq (model_instance_requests (m, 1), 4);      /* 1, 4, 6 and 7 */
    ck_assert_uint_eq (model_instance_requests (m, 2), 3);      /* 2, 5 and 8 */
    ck_assert_uint_eq (dispatch_inflight (m, 0), 0);
    model_destroy (&m);
}
END_TEST

START_TEST (a_stream_always_goes_to_instance_stream_id_mod_n)
{
    model_t *m = s_model (1);
    s_hold (3);
    enum { N = 10 };
    static request_t reqs[N];
    /* A whole window first: on a fresh model, instance 0. Then streams 1 to 9, one step each. */
    s_request (&reqs[0], 0, 1, 0, WINDOW * STEP, 50);
    s_admit_ok (m, &reqs[0]);
    for (int i = 1; i < N; i++) {
        s_request (&reqs[i], (uint64_t) i, 1, (uint64_t) i, STEP, 50 + (uint64_t) i);
        s_admit_ok (m, &reqs[i]);
    }
    ck_assert_int_eq (s_recorded_count, N);
    waker_t *inst0 = s_recorded[0], *inst[3] = { s_recorded[3], s_recorded[1], s_recorded[2] };
    ck_assert_msg (inst[0] == inst0, "stream 3 did not go to instance 0");
    ck_assert (inst[0] != inst[1] && inst[1] != inst[2] && inst[0] != inst[2]);
    for (int i = 1; i < N; i++)
        ck_assert_msg (s_recorded[i] == inst[i % 3], "stream %d did not go to instance %d", i, i % 3);
    /* Queues 4, 3, 3, and the streams did not move round-robin's start (1, after the window on
     * 0): windows go to 1 and 2 (the least loaded), then, the queues even, round-robin: 0, 1, 2. */
    static request_t windows[5];
    const int want[5] = { 1, 2, 0, 1, 2 };
    for (int i = 0; i < 5; i++) {
        s_request (&windows[i], 100 + (uint64_t) i, 1, 0, WINDOW * STEP, 70 + (uint64_t) i);
        s_admit_ok (m, &windows[i]);
        ck_assert_msg (s_recorded[N + i] == inst[want[i]], "window %d did not go to instance %d", i, want[i]);
    }
    s_release (0);
    job_t *jobs[N + 5];
    s_collect (m, jobs, N + 5);
    for (int k = 0; k < N + 5; k++) {
        job_t *j = jobs[k];
        ck_assert_msg (j->status == SIG_OK, "request %llu: %s", (unsigned long long) j->request_id, j->error);
        s_assert_envelope (j);
        double ref[OUT], bound[OUT];
        const lstm_weights_t *l = s_seq_w->lstm;
        if (j->request_id >= 100) {
            const float *x = windows[j->request_id - 100].features;
            ck_assert_int_eq (tol_lstm_window (l, WEIGHT_DTYPE_F32, x, 1, ref, bound), 0);
        } else if (j->request_id == 0) {
            ck_assert_int_eq (tol_lstm_window (l, WEIGHT_DTYPE_F32, reqs[0].features, 1, ref, bound), 0);
        } else {
            ck_assert_uint_eq (j->stream_id, j->request_id);
            /* a new stream: its window is zeros, then this one step */
            ck_assert_int_eq (tol_lstm_stream (l, WEIGHT_DTYPE_F32, reqs[j->request_id].features, 1, ref, bound), 0);
        }
        TOL_ASSERT (j->outputs, ref, bound, OUT, OUT, "request %llu", (unsigned long long) j->request_id);
        s_return (m, j);
    }
    for (uint32_t i = 0; i < 3; i++)
        ck_assert_uint_eq (model_instance_requests (m, i), 5);     /* 3 steps and 2 windows each */
    model_destroy (&m);
}
END_TEST

START_TEST (a_full_queue_answers_overloaded_and_takes_nothing)
{
    model_t *m = s_model (0);
    s_hold (3);
    static request_t reqs[DEPTH + 1];
    for (int i = 0; i <= DEPTH; i++)
        s_request (&reqs[i], (uint64_t) i, 2, 0, IN, (uint64_t) i);
    for (int i = 0; i < DEPTH; i++) {
        s_admit_ok (m, &reqs[i]);
        ck_assert_uint_eq (dispatch_queued (m), (uint32_t) i + 1);
    }
    /* One more: refused at once, naming the model and the depth; nothing taken. */
    char err[512];
    request_t *extra = &reqs[DEPTH];
    ck_assert_int_eq (s_admit (m, extra, err, sizeof err), SIG_OVERLOADED);
    ck_assert_str_eq (err, "model \"mlp\": queue full: 8 requests waiting (queue_depth 8); retry later, or raise "
                           "the model's queue_depth or instances");
    ck_assert_uint_eq (dispatch_inflight (m, 0), DEPTH);        /* no job taken from the pool */
    ck_assert_uint_eq (dispatch_queued (m), DEPTH);
    ck_assert_int_eq (s_recorded_count, DEPTH);              /* no worker rung for it */
    ck_assert_uint_eq (extra->envelope[0].size, strlen ("client-8"));     /* still the caller's */
    ck_assert_mem_eq (extra->envelope[0].data, "client-8", strlen ("client-8"));
    /* The queued ones are all computed once the workers look. */
    s_release (0);
    job_t *jobs[DEPTH];
    s_collect (m, jobs, DEPTH);
    for (int k = 0; k < DEPTH; k++) {
        ck_assert_int_eq (jobs[k]->status, SIG_OK);
        ck_assert_uint_lt (jobs[k]->request_id, DEPTH);
        s_return (m, jobs[k]);
    }
    ck_assert_uint_eq (dispatch_queued (m), 0);
    /* Room again: the refused request is admitted now, its frames moved. */
    s_admit_ok (m, extra);
    s_collect (m, jobs, 1);
    ck_assert_uint_eq (jobs[0]->request_id, DEPTH);
    s_assert_envelope (jobs[0]);
    s_return (m, jobs[0]);
    model_destroy (&m);
}
END_TEST

static sig_status_t s_admit_inline (model_t *m, request_t *r, uint64_t t_recv, uint32_t deadline_us, job_t **ran,
                                    char *err, size_t errlen)
{
    const admission_t a = { .socket = 3, .envelope = r->envelope, .envelope_count = 2, .request_id = r->id,
                            .stream_id = r->stream, .step = r->stream ? 1 : 0, .t_recv = t_recv, .rows = r->rows,
                            .deadline_us = deadline_us, .features = r->features, .feature_count = r->feature_count,
                            .inline_budget_ns = UINT64_MAX };
    err[0] = '\0';
    return dispatch_admit (m, &a, ran, err, errlen);
}

/* Run to completion (server.inline_us 20, the default): a request the front may inline, of a CPU
 * model with nothing queued whose launch is predicted under 20 us, is computed at admission on the
 * front's own context and handed back finished (no worker rung, no instance counts it, the stats
 * do), its outputs the reference's and bit for bit what a worker computes from the same features;
 * one past its deadline is DEADLINE_EXCEEDED as a worker would answer it. Not inlined: when the
 * front may not (under load), when a request of the model waits already, a stream step (an LSTM
 * keeps no front context), and a model whose launch is predicted over inline_us ("wide"). */
START_TEST (inline_runs_on_the_front_only_when_nothing_waits)
{
    char err[512];
    stats_t *stats = stats_new ();
    ck_assert_uint_eq (s_cfg->server.inline_us, 20);
    model_t *m = model_new (&s_cfg->models[0], &s_cfg->server, stats, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    model_t *seq = s_model (1);
    model_t *wide = model_new (&s_cfg->models[4], &s_cfg->server, stats, err, sizeof err);
    ck_assert_msg (wide != NULL, "%s", err);
    const int slot = model_stats_slot (m);
    s_hold (3 + 3 + 1);
    static request_t reqs[8];
    job_t *ran = NULL;
    /* 1. Inlined: finished at admission, equal to the reference. */
    s_request (&reqs[0], 1, 3, 0, IN, 41);
    ck_assert_int_eq (s_admit_inline (m, &reqs[0], clock_now_ns (), 0, &ran, err, sizeof err), SIG_OK);
    ck_assert_ptr_nonnull (ran);
    ck_assert_int_eq (ran->status, SIG_OK);
    ck_assert_uint_eq (ran->request_id, 1);
    ck_assert_uint_eq (ran->batch_rows, 3);
    ck_assert_uint_gt (ran->compute_ns, 0);
    s_assert_envelope (ran);
    double ref[MAX_ROWS * OUT], bound[MAX_ROWS * OUT];
    ck_assert_int_eq (tol_mlp (s_mlp_w, reqs[0].features, 3, ref, bound), 0);
    TOL_ASSERT (ran->outputs, ref, bound, 3 * OUT, OUT, "the inlined request");
    float inlined[MAX_ROWS * OUT];
    memcpy (inlined, ran->outputs, sizeof (float) * 3 * OUT);
    ck_assert_int_eq (s_recorded_count, 0);                 /* no worker rung */
    ck_assert_uint_eq (dispatch_inflight (m, 0), 1);           /* its job, until the reply is sent */
    ck_assert_uint_eq (stats_inline (stats, (size_t) slot), 1);
    s_return (m, ran);
    /* 2. Past its deadline at admission: not run, answered as a worker would. */
    s_request (&reqs[1], 2, 1, 0, IN, 42);
    ck_assert_int_eq (s_admit_inline (m, &reqs[1], clock_now_ns () - 5000000, 1000, &ran, err, sizeof err), SIG_OK);
    ck_assert_ptr_nonnull (ran);
    ck_assert_int_eq (ran->status, SIG_DEADLINE_EXCEEDED);
    ck_assert_msg (strncmp (ran->error, "deadline_us: the request waited ", 32) == 0, "%s", ran->error);
    ck_assert_uint_eq (ran->compute_ns, 0);
    s_return (m, ran);
    /* 3. The front may not (busy): queued for a worker. Then with that one waiting, a request that
     * may is queued too. */
    s_request (&reqs[2], 3, 3, 0, IN, 41);     /* the same features as request 1 */
    const admission_t busy = { .socket = 3, .envelope = reqs[2].envelope, .envelope_count = 2, .request_id = 3,
                               .t_recv = clock_now_ns (), .rows = 3, .features = reqs[2].features,
                               .feature_count = reqs[2].feature_count, .inline_budget_ns = 0 };
    ck_assert_int_eq (dispatch_admit (m, &busy, &ran, err, sizeof err), SIG_OK);
    ck_assert_ptr_null (ran);
    s_request (&reqs[3], 4, 1, 0, IN, 43);
    ck_assert_int_eq (s_admit_inline (m, &reqs[3], clock_now_ns (), 0, &ran, err, sizeof err), SIG_OK);
    ck_assert_ptr_null (ran);
    ck_assert_int_eq (s_recorded_count, 2);
    ck_assert_uint_eq (dispatch_queued (m), 2);
    /* 4. A stream step, and a model over inline_us: queued. */
    s_request (&reqs[4], 5, 1, 77, STEP, 44);
    ck_assert_int_eq (s_admit_inline (seq, &reqs[4], clock_now_ns (), 0, &ran, err, sizeof err), SIG_OK);
    ck_assert_ptr_null (ran);
    model_info_t *info = calloc (1, sizeof *info);
    model_describe (wide, info);
    ck_assert_msg (info->launch_ns + info->row_ns > 20000, "wide takes %llu ns a row: not over inline_us",
                   (unsigned long long) (info->launch_ns + info->row_ns));
    s_request (&reqs[5], 6, 1, 0, IN, 45);
    ck_assert_int_eq (s_admit_inline (wide, &reqs[5], clock_now_ns (), 0, &ran, err, sizeof err), SIG_OK);
    ck_assert_ptr_null (ran);
    ck_assert_int_eq (s_recorded_count, 4);
    ck_assert_uint_eq (stats_inline (stats, (size_t) slot), 2);     /* 1 and 2 */
    ck_assert_uint_eq (stats_inline (stats, (size_t) model_stats_slot (wide)), 0);
    /* The workers' answers: request 3 bit for bit request 1's. */
    s_release (0);
    job_t *jobs[2];
    s_collect (m, jobs, 2);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq (jobs[k]->status, SIG_OK);
        if (jobs[k]->request_id == 3)
            ck_assert_mem_eq (jobs[k]->outputs, inlined, sizeof (float) * 3 * OUT);
        s_return (m, jobs[k]);
    }
    s_collect (seq, jobs, 1);
    ck_assert_int_eq (jobs[0]->status, SIG_OK);
    s_return (seq, jobs[0]);
    s_collect (wide, jobs, 1);
    ck_assert_int_eq (jobs[0]->status, SIG_OK);
    s_return (wide, jobs[0]);
    ck_assert_uint_eq (model_instance_requests (m, 0) + model_instance_requests (m, 1) + model_instance_requests (m, 2), 2);
    free (info);
    model_destroy (&wide);
    model_destroy (&seq);
    model_destroy (&m);
    stats_destroy (&stats);
}
END_TEST

START_TEST (every_request_buffer_in_use_answers_overloaded)
{
    /* Finished jobs whose replies were never sent stay out of the pool. The pool holds queue_depth
     * + instances x max_batch_rows + JOB_INTAKE_TURN jobs: after that many, with the queue empty,
     * the next admission is refused for the buffers, not the queue. */
    model_t *m = s_model (0);
    const int pool = DEPTH + 3 * MAX_ROWS + JOB_INTAKE_TURN;
    job_t **held = calloc ((size_t) pool, sizeof *held);
    request_t r;
    for (int i = 0; i < pool; i++) {
        s_request (&r, (uint64_t) i, 1, 0, IN, (uint64_t) i);
        s_admit_ok (m, &r);
        s_collect (m, &held[i], 1);     /* computed, and kept: as if its reply were waiting to be sent */
    }
    ck_assert_uint_eq (dispatch_inflight (m, 0), (uint32_t) pool);
    ck_assert_uint_eq (dispatch_queued (m), 0);
    char err[512];
    s_request (&r, 9999, 1, 0, IN, 9);
    ck_assert_int_eq (s_admit (m, &r, err, sizeof err), SIG_OVERLOADED);
    ck_assert_str_eq (err, "model \"mlp\": every request buffer is in use (replies waiting to be sent); retry later");
    ck_assert_uint_eq (r.envelope[0].size, strlen ("client-9999"));      /* still the caller's */
    s_return (m, held[0]);
    s_admit_ok (m, &r);
    s_collect (m, &held[0], 1);
    ck_assert_uint_eq (held[0]->request_id, 9999);
    for (int i = 0; i < pool; i++)
        s_return (m, held[i]);
    ck_assert_uint_eq (dispatch_inflight (m, 0), 0);
    free (held);
    model_destroy (&m);
}
END_TEST

/* Requests over buffer_rows borrow one of large_buffers buffers of max_rows rows for their whole
 * life: with both out, a third large request is OVERLOADED naming the limit (nothing taken) while a
 * one-row request still fits its own buffer; the answers are the reference's either way, and a
 * returned job gives its large buffer back. Model "big": buffer_rows 1, large_buffers 2. */
START_TEST (large_requests_borrow_the_large_buffers)
{
    model_t *m = s_model (2);
    s_hold (3);
    static request_t reqs[4];
    s_request (&reqs[0], 1, MAX_ROWS, 0, IN, 31);
    s_request (&reqs[1], 2, 2, 0, IN, 32);
    s_request (&reqs[2], 3, 2, 0, IN, 33);
    s_request (&reqs[3], 4, 1, 0, IN, 34);
    s_admit_ok (m, &reqs[0]);
    s_admit_ok (m, &reqs[1]);
    char err[512];
    ck_assert_int_eq (s_admit (m, &reqs[2], err, sizeof err), SIG_OVERLOADED);
    char want[300];
    snprintf (want, sizeof want, "model \"big\": every buffer for requests of more than 1 row(s) is in use (large_buffers "
              "2, each max_rows = %d rows); retry later, or send fewer rows a request", MAX_ROWS);
    ck_assert_str_eq (err, want);
    ck_assert_uint_eq (reqs[2].envelope[0].size, strlen ("client-3"));    /* still the caller's */
    ck_assert_uint_eq (dispatch_inflight (m, 0), 2);
    s_admit_ok (m, &reqs[3]);                               /* one row: its own buffer */
    s_release (0);
    job_t *jobs[3];
    s_collect (m, jobs, 3);
    for (int k = 0; k < 3; k++) {
        request_t *r = s_find (reqs, 4, jobs[k]->request_id);
        ck_assert_int_eq (jobs[k]->status, SIG_OK);
        double ref[MAX_ROWS * OUT], bound[MAX_ROWS * OUT];
        ck_assert_int_eq (tol_mlp (s_mlp_w, r->features, r->rows, ref, bound), 0);
        TOL_ASSERT (jobs[k]->outputs, ref, bound, r->rows * OUT, OUT, "request %llu", (unsigned long long) r->id);
        s_return (m, jobs[k]);
    }
    /* both large buffers back: the refused request fits now */
    s_admit_ok (m, &reqs[2]);
    s_collect (m, jobs, 1);
    ck_assert_uint_eq (jobs[0]->request_id, 3);
    s_return (m, jobs[0]);
    model_destroy (&m);
}
END_TEST

START_TEST (abort_answers_queued_jobs_unavailable_without_running_them)
{
    model_t *m = s_model (0);
    s_hold (3);
    enum { N = 5 };
    static request_t reqs[N];
    for (int i = 0; i < N; i++) {
        s_request (&reqs[i], (uint64_t) i, 1, 0, IN, (uint64_t) i);
        s_admit_ok (m, &reqs[i]);
    }
    /* The wake-ups let through from here on: dispatch_abort rings every worker itself. */
    atomic_store (&s_holding, false);
    dispatch_abort (m, "shutting down");
    job_t *jobs[N];
    s_collect (m, jobs, N);
    for (int k = 0; k < N; k++) {
        ck_assert_int_eq (jobs[k]->status, SIG_UNAVAILABLE);
        ck_assert_str_eq (jobs[k]->error, "model \"mlp\" is shutting down; the request was not run");
        ck_assert_uint_eq (jobs[k]->compute_ns, 0);
        ck_assert_uint_eq (jobs[k]->batch_rows, 0);
        s_assert_envelope (jobs[k]);
        s_return (m, jobs[k]);
    }
    for (uint32_t i = 0; i < 3; i++)
        ck_assert_uint_eq (model_instance_requests (m, i), 0);      /* none was run */
    ck_assert_uint_eq (dispatch_inflight (m, 0), 0);
    model_destroy (&m);
}
END_TEST


static model_t *s_model_at (int which)
{
    char err[1024];
    model_t *m = model_new (&s_cfg->models[which], &s_cfg->server, NULL, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    return m;
}

static int s_by_start (const void *a, const void *b)
{
    const job_t *x = *(job_t *const *) a, *y = *(job_t *const *) b;
    return x->t_start < y->t_start ? -1 : x->t_start > y->t_start;
}

/* Three models in one group: one worker for the three (every admission rings the same waker), and
 * it takes their requests in the order they arrived across the models, each computed right. */
START_TEST (a_group_serves_its_models_in_order_of_arrival)
{
    model_t *g[3] = { s_model_at (5), s_model_at (6), s_model_at (7) };
    s_hold (1);                                 /* the group's one worker */
    enum { N = 12 };
    static request_t reqs[N];
    for (int i = 0; i < N; i++) {
        s_request (&reqs[i], (uint64_t) i, 1, 0, IN, 100 + (uint64_t) i);
        s_admit_ok (g[(i * 7 + i / 3) % 3], &reqs[i]);     /* the models in a shuffled order */
    }
    ck_assert_int_eq (s_recorded_count, N);
    for (int i = 1; i < N; i++)
        ck_assert_ptr_eq (s_recorded[i], s_recorded[0]);
    int per[3] = { 0, 0, 0 };
    for (int i = 0; i < N; i++)
        per[(i * 7 + i / 3) % 3]++;
    s_release (0);
    job_t *jobs[N];
    int got = 0;
    for (int k = 0; k < 3; k++) {
        s_collect (g[k], jobs + got, per[k]);
        got += per[k];
    }
    qsort (jobs, N, sizeof *jobs, s_by_start);
    for (int i = 0; i < N; i++) {
        ck_assert_msg (jobs[i]->request_id == (uint64_t) i, "the %d-th request taken was request %llu", i,
                       (unsigned long long) jobs[i]->request_id);
        ck_assert_int_eq (jobs[i]->status, SIG_OK);
        double ref[OUT], bound[OUT];
        ck_assert_int_eq (tol_mlp (s_mlp_w, reqs[i].features, 1, ref, bound), 0);
        TOL_ASSERT (jobs[i]->outputs, ref, bound, OUT, OUT, "request %d, served by the group", i);
    }
    for (int i = 0; i < N; i++)
        s_return (g[(jobs[i]->request_id * 7 + jobs[i]->request_id / 3) % 3], jobs[i]);
    for (int k = 0; k < 3; k++)
        model_destroy (&g[k]);
}
END_TEST

/* A slow model in a group of its own does not hold up the other group: with the wake-ups held, eight
 * slow requests and then three fast ones are queued; woken alone, the fast group's worker answers its
 * three while the slow group's eight all still wait (its worker never woke), each computed right. */
START_TEST (a_slow_model_holds_up_only_its_own_group)
{
    model_t *fast = s_model_at (5), *slow = s_model_at (8);
    s_hold (2);                                 /* both groups' workers asleep */
    static request_t reqs[11];
    for (int i = 0; i < 8; i++) {
        s_request (&reqs[i], (uint64_t) i, 1, 0, IN, 200 + (uint64_t) i);
        s_admit_ok (slow, &reqs[i]);
    }
    for (int i = 8; i < 11; i++) {
        s_request (&reqs[i], (uint64_t) i, 1, 0, IN, 200 + (uint64_t) i);
        s_admit_ok (fast, &reqs[i]);
    }
    ck_assert_int_eq (s_recorded_count, 11);
    waker_t *slow_waker = s_recorded[0], *fast_waker = s_recorded[8];
    ck_assert_ptr_ne (slow_waker, fast_waker);  /* two groups, two workers */
    for (int i = 1; i < 8; i++)
        ck_assert_ptr_eq (s_recorded[i], slow_waker);
    __real_waker_wake (fast_waker);
    job_t *f[3], *w[8];
    s_collect (fast, f, 3);
    ck_assert_uint_eq (dispatch_queued (slow), 8);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq (f[i]->status, SIG_OK);
        double ref[OUT], bound[OUT];
        ck_assert_int_eq (tol_mlp (s_mlp_w, reqs[f[i]->request_id].features, 1, ref, bound), 0);
        TOL_ASSERT (f[i]->outputs, ref, bound, OUT, OUT, "fast request %llu", (unsigned long long) f[i]->request_id);
    }
    s_release (0);
    s_collect (slow, w, 8);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq (w[i]->status, SIG_OK);
    for (int i = 0; i < 3; i++)
        s_return (fast, f[i]);
    for (int i = 0; i < 8; i++)
        s_return (slow, w[i]);
    model_destroy (&fast);
    model_destroy (&slow);
}
END_TEST

/* ---- two fronts: a lane each ---- */

/* Model CFG_INDEX loaded for two fronts (server.fronts 2), allowed a deep queue and a minute's wait. */
static model_t *s_model_two_fronts (int cfg_index)
{
    char err[1024];
    server_config_t server = s_cfg->server;
    server.fronts = 2;
    model_config_t cfg = s_cfg->models[cfg_index];
    cfg.queue_depth = 256;
    cfg.max_queue_us = 60000000;
    model_t *m = model_new (&cfg, &server, NULL, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    ck_assert_uint_eq (dispatch_lanes (m), 2);
    return m;
}

/* Collects N finished jobs of LANE (10 s at most) into JOBS. */
static void s_collect_lane (model_t *m, uint32_t lane, job_t **jobs, int n)
{
    const uint64_t until = clock_now_ns () + 10000000000ull;
    int got = 0;
    while (got < n && clock_now_ns () < until) {
        job_t *j = dispatch_next_done (m, lane);
        if (j)
            jobs[got++] = j;
        else
            usleep (100);
    }
    ck_assert_msg (got == n, "%d of %d jobs came back on lane %u in 10 s", got, n, lane);
    ck_assert_ptr_null (dispatch_next_done (m, lane));
}

/* "timed" (one instance, one row a launch) for two fronts, its worker held: requests admitted on
 * lanes 1, 0, 1, 0 (received in that order) run in that order, each comes back on the lane that
 * admitted it, and each lane counts only its own jobs in flight. */
START_TEST (the_worker_takes_the_oldest_request_across_fronts)
{
    model_t *m = s_model_two_fronts (3);
    enum { N = 6 };
    static request_t reqs[N];
    s_hold (1);
    const uint64_t t0 = clock_now_ns ();
    char err[512];
    for (int i = 0; i < N; i++) {
        const uint32_t lane = i % 2 ? 0 : 1;
        s_request (&reqs[i], 500 + (uint64_t) i, 1, 0, IN, 77 + (uint64_t) i);
        const admission_t a = { .lane = lane, .socket = 3, .envelope = reqs[i].envelope, .envelope_count = 2,
                                .request_id = reqs[i].id, .t_recv = t0 + (uint64_t) i, .rows = 1,
                                .features = reqs[i].features, .feature_count = reqs[i].feature_count };
        ck_assert_msg (dispatch_admit (m, &a, NULL, err, sizeof err) == SIG_OK, "%s", err);
    }
    ck_assert_uint_eq (dispatch_inflight (m, 0), N / 2);
    ck_assert_uint_eq (dispatch_inflight (m, 1), N / 2);
    ck_assert_uint_eq (dispatch_queued (m), N);
    s_release (0);
    job_t *jobs[2][N / 2];
    s_collect_lane (m, 0, jobs[0], N / 2);
    s_collect_lane (m, 1, jobs[1], N / 2);
    uint64_t started[N] = { 0 };
    for (uint32_t lane = 0; lane < 2; lane++)
        for (int k = 0; k < N / 2; k++) {
            job_t *j = jobs[lane][k];
            const int i = (int) (j->request_id - 500);
            ck_assert_int_eq (i % 2 ? 0 : 1, (int) lane);       /* back on the lane that admitted it */
            ck_assert_uint_eq (j->lane, lane);
            ck_assert_msg (j->status == SIG_OK, "%s", j->error);
            double ref[OUT], bound[OUT];
            ck_assert_int_eq (tol_mlp (s_mlp_w, reqs[i].features, 1, ref, bound), 0);
            TOL_ASSERT (j->outputs, ref, bound, OUT, OUT, "request %d", i);
            started[i] = j->t_start;
        }
    for (int i = 1; i < N; i++)     /* one row a launch: each launch starts after the one before */
        ck_assert_msg (started[i] > started[i - 1], "request %d started before request %d", i, i - 1);
    for (uint32_t lane = 0; lane < 2; lane++)
        for (int k = 0; k < N / 2; k++)
            s_return (m, jobs[lane][k]);
    ck_assert_uint_eq (dispatch_inflight (m, 0), 0);
    ck_assert_uint_eq (dispatch_inflight (m, 1), 0);
    model_destroy (&m);
}
END_TEST

/* Two fronts admitting and collecting at once (a thread each, as the fronts do), on "mlp" (three
 * instances): every job comes back once, on its own lane, with its own outputs. */
typedef struct {
    model_t *m;
    uint32_t lane;
    bool may_inline;                /* one request at a time, each offered to run inline */
    int admitted, returned, wrong, refused, inlined;
    char why[512];
} producer_t;

/* LANE's job J (request I of REQS) checked against the reference, returned to the pool. */
static void s_producer_check (producer_t *p, request_t *reqs, bool *seen, job_t *j)
{
    enum { TOTAL = 2000 };
    const uint64_t i = j->request_id - (uint64_t) p->lane * 100000;
    request_t *r = &reqs[i < TOTAL ? i : 0];
    double ref[MAX_ROWS * OUT], bound[MAX_ROWS * OUT];
    bool right = i < TOTAL && !seen[i] && j->lane == p->lane && j->status == SIG_OK && r->id == j->request_id
                 && tol_mlp (s_mlp_w, r->features, r->rows, ref, bound) == 0;
    for (uint32_t o = 0; right && o < r->rows * OUT; o++)
        right = fabs (j->outputs[o] - ref[o]) <= bound[o];
    if (!right && p->wrong == 0)
        snprintf (p->why, sizeof p->why, "request %llu: status %d: %.400s", (unsigned long long) j->request_id, j->status,
                  j->status == SIG_OK ? "outputs out of bound" : j->error);
    if (i < TOTAL)
        seen[i] = true;
    p->wrong += !right;
    s_return (p->m, j);
    p->returned++;
}

static void *s_producer (void *arg)
{
    producer_t *p = arg;
    enum { TOTAL = 2000 };
    const int outstanding = p->may_inline ? 1 : 16;
    request_t *reqs = calloc (TOTAL, sizeof *reqs);
    bool *seen = calloc (TOTAL, sizeof *seen);
    int next = 0;
    uint64_t seed = 1000 + p->lane;
    while (p->returned < TOTAL) {
        if (next < TOTAL && next - p->returned < outstanding) {
            request_t *r = &reqs[next];
            s_request (r, (uint64_t) p->lane * 100000 + (uint64_t) next, 1 + (uint32_t) next % MAX_ROWS, 0, IN,
                       seed++);
            const admission_t a = { .lane = p->lane, .socket = 3, .envelope = r->envelope, .envelope_count = 2,
                                    .request_id = r->id, .t_recv = clock_now_ns (), .rows = r->rows,
                                    .features = r->features, .feature_count = r->feature_count,
                                    .inline_budget_ns = p->may_inline ? UINT64_MAX : 0 };
            char err[512];
            job_t *ran = NULL;
            if (dispatch_admit (p->m, &a, p->may_inline ? &ran : NULL, err, sizeof err) != SIG_OK) {
                if (p->refused++ == 0)
                    snprintf (p->why, sizeof p->why, "%s", err);
                break;
            }
            next++;
            p->admitted++;
            if (ran) {
                p->inlined++;
                s_producer_check (p, reqs, seen, ran);
            }
            continue;
        }
        job_t *j = dispatch_next_done (p->m, p->lane);
        if (!j) {
            sched_yield ();
            continue;
        }
        s_producer_check (p, reqs, seen, j);
    }
    for (int i = 0; i < TOTAL; i++) {
    }
    free (reqs);
    free (seen);
    return NULL;
}

/* Runs the two producers P (lanes 0 and 1) at once; each had every one of its 2000 requests back
 * once, in bound, and holds no job. */
static void s_run_producers (model_t *m, producer_t *p)
{
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq (pthread_create (&th[k], NULL, s_producer, &p[k]), 0);
    for (int k = 0; k < 2; k++)
        pthread_join (th[k], NULL);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg (p[k].refused == 0, "lane %d: refused: %s", k, p[k].why);
        ck_assert_int_eq (p[k].admitted, 2000);
        ck_assert_int_eq (p[k].returned, 2000);
        ck_assert_msg (p[k].wrong == 0, "lane %d: %d wrong, the first: %s", k, p[k].wrong, p[k].why);
        ck_assert_uint_eq (dispatch_inflight (m, (uint32_t) k), 0);
    }
}

START_TEST (two_fronts_admit_and_collect_at_once)
{
    model_t *m = s_model_two_fronts (0);
    producer_t p[2] = { { .m = m, .lane = 0 }, { .m = m, .lane = 1 } };
    s_run_producers (m, p);
    uint64_t computed = 0;
    for (uint32_t i = 0; i < 3; i++)
        computed += model_instance_requests (m, i);
    ck_assert_uint_eq (computed, 4000);
    model_destroy (&m);
}
END_TEST

/* A GPU model in the server's own process (gpu_processes false), the persistent kernel, one instance:
 * a front runs a request inline on the idle instance's own context (claimed from its worker), with
 * the outputs a worker gives, counted; then one front offering every request inline while another
 * hands its requests to the worker, at once, on that one instance: every request back once, on its
 * own lane, in bound, some run inline and some by the worker. GPU hosts only. */
START_TEST (a_gpu_model_runs_inline_on_its_idle_instance)
{
    int count = 0;
    char why[256] = "no GPU backend in this build";
    if (!backends_gpu || backends_gpu->device_count (&count, why, sizeof why) != 0 || count < 1) {
        printf ("a_gpu_model_runs_inline_on_its_idle_instance: skipped: %s\n", why);
        return;
    }
    char err[1024];
    server_config_t server = s_cfg->server;
    server.fronts = 2;
    server.gpu_processes = false;
    server.inline_us = 1000;
    model_config_t cfg = s_cfg->models[0];
    cfg.backend = BACKEND_CUDA;
    cfg.kernel = CUDA_KERNEL_PERSISTENT;
    cfg.instances = 1;
    cfg.devices[0] = 0;
    cfg.device_count = 1;
    cfg.queue_depth = 256;
    cfg.max_queue_us = 60000000;
    stats_t *stats = stats_new ();
    model_t *m = model_new (&cfg, &server, stats, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    ck_assert_str_eq (model_kernel_name (m), "persistent");
    const int slot = model_stats_slot (m);
    /* one at a time: each runs on the front */
    static request_t r;
    for (int i = 0; i < 50; i++) {
        s_request (&r, 700 + (uint64_t) i, 1 + (uint32_t) i % MAX_ROWS, 0, IN, 900 + (uint64_t) i);
        const admission_t a = { .lane = 0, .socket = 3, .envelope = r.envelope, .envelope_count = 2, .request_id = r.id,
                                .t_recv = clock_now_ns (), .rows = r.rows, .features = r.features,
                                .feature_count = r.feature_count, .inline_budget_ns = UINT64_MAX };
        job_t *ran = NULL;
        ck_assert_msg (dispatch_admit (m, &a, &ran, err, sizeof err) == SIG_OK, "%s", err);
        ck_assert_msg (ran != NULL, "request %d was handed to the worker", i);
        ck_assert_msg (ran->status == SIG_OK, "%s", ran->error);
        double ref[MAX_ROWS * OUT], bound[MAX_ROWS * OUT];
        ck_assert_int_eq (tol_mlp (s_mlp_w, r.features, r.rows, ref, bound), 0);
        TOL_ASSERT (ran->outputs, ref, bound, r.rows * OUT, OUT, "inline request %d", i);
        s_return (m, ran);
    }
    ck_assert_uint_eq (stats_inline (stats, (size_t) slot), 50);
    ck_assert_uint_eq (model_instance_requests (m, 0), 0);     /* the worker ran none of them */
    /* two fronts at once, one inlining, one handing off */
    producer_t p[2] = { { .m = m, .lane = 0, .may_inline = true }, { .m = m, .lane = 1 } };
    s_run_producers (m, p);
    printf ("gpu inline: lane 0 ran %d of 2000 inline, the worker the rest and lane 1's 2000\n", p[0].inlined);
    ck_assert_int_eq (p[1].inlined, 0);
    ck_assert_int_gt (p[0].inlined, 0);
    ck_assert_uint_eq (stats_inline (stats, (size_t) slot), 50 + (uint64_t) p[0].inlined);
    ck_assert_uint_eq (model_instance_requests (m, 0), 4000 - (uint64_t) p[0].inlined);
    model_destroy (&m);
    stats_destroy (&stats);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("dispatch");
    TCase *tc = tcase_create ("admission");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 60);
    tcase_add_test (tc, admitted_jobs_come_back_with_outputs_ids_and_envelopes);
    tcase_add_test (tc, ties_go_round_robin_and_otherwise_the_least_loaded_instance);
    tcase_add_test (tc, a_stream_always_goes_to_instance_stream_id_mod_n);
    tcase_add_test (tc, a_full_queue_answers_overloaded_and_takes_nothing);
    tcase_add_test (tc, every_request_buffer_in_use_answers_overloaded);
    tcase_add_test (tc, abort_answers_queued_jobs_unavailable_without_running_them);
    tcase_add_test (tc, large_requests_borrow_the_large_buffers);
    tcase_add_test (tc, admission_by_time_refuses_what_would_wait_too_long);
    tcase_add_test (tc, inline_runs_on_the_front_only_when_nothing_waits);
    tcase_add_test (tc, a_group_serves_its_models_in_order_of_arrival);
    tcase_add_test (tc, a_slow_model_holds_up_only_its_own_group);
    tcase_add_test (tc, the_worker_takes_the_oldest_request_across_fronts);
    tcase_add_test (tc, two_fronts_admit_and_collect_at_once);
    tcase_add_test (tc, a_gpu_model_runs_inline_on_its_idle_instance);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
