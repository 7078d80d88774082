/* serving/dispatch.h with serving/model.h, without sockets: where an admitted job runs. Inline on
 * the front (run to completion at admission, only when nothing of the model waits, never a stream
 * step nor a model over inline_us, bit for bit what a worker computes); three models of a group served
 * by its one worker in order of arrival, and a slow model holding up only its own group; two fronts,
 * a lane each: the worker takes the oldest request across them, both admit and collect at once
 * (every job back once, on its own lane), and on GPU hosts a persistent model run inline on its idle
 * instance while the other front hands requests to its worker. test_dispatch.c has admission.
 *
 * The models, the requests and the wrapped waker that holds admitted jobs in the queue without
 * relying on time are in tests/dispatch_tests.h (the Makefile links this suite with
 * -Wl,--wrap=waker_wake,--wrap=waker_sleep). */
#define _GNU_SOURCE
#include "dispatch_tests.h"
#include "serving/model_impl.h"

/* ---- inline on the front ---- */

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
    model_t *m = model_new (&s_cfg->models[0], &s_cfg->server, stats, NULL, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    /* Its prediction pinned, 1 us a launch and 0.1 us a row (a 5-4-2 MLP takes well under that): the
     * load times it by the clock, and on a busy 2-core machine an ASan build once read it past
     * inline_us, so request 1 was queued. Where a job runs is what this test asserts, from the
     * prediction; not what the clock read. */
    m->desc.launch_ns = 1000;
    m->desc.row_ns = 100;
    model_t *seq = s_model (1);
    model_t *wide = model_new (&s_cfg->models[4], &s_cfg->server, stats, NULL, err, sizeof err);
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

/* ---- groups ---- */

static model_t *s_model_at (int which)
{
    char err[1024];
    model_t *m = model_new (&s_cfg->models[which], &s_cfg->server, NULL, NULL, err, sizeof err);
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
    model_t *m = model_new (&cfg, &server, NULL, NULL, err, sizeof err);
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
    char why[768];
    const gpu_backend_t *gpu = backends_gpu (why, sizeof why);
    if (!gpu || gpu->device_count (&count, why, sizeof why) != 0 || count < 1) {
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
    model_t *m = model_new (&cfg, &server, stats, NULL, err, sizeof err);
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
    Suite *s = suite_create ("dispatch_fronts");
    TCase *tc = tcase_create ("admission");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 60);
    tcase_add_test (tc, inline_runs_on_the_front_only_when_nothing_waits);
    tcase_add_test (tc, a_group_serves_its_models_in_order_of_arrival);
    tcase_add_test (tc, a_slow_model_holds_up_only_its_own_group);
    tcase_add_test (tc, the_worker_takes_the_oldest_request_across_fronts);
    tcase_add_test (tc, two_fronts_admit_and_collect_at_once);
    tcase_add_test (tc, a_gpu_model_runs_inline_on_its_idle_instance);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
