/* serving/dispatch.h with serving/model.h, without sockets: admission to a model's instances.
 * Admitted jobs come back through dispatch_next_done with the reference's outputs, their request ids
 * and envelope frames; ties go round-robin and otherwise the least loaded instance takes a job; a
 * stream always goes to instance stream_id % n; a full queue, every request buffer in use, or every
 * large buffer out answers OVERLOADED with the exact message and takes nothing; admission by time
 * refuses what would wait too long or past its deadline; dispatch_inflight and dispatch_queued
 * count; dispatch_abort turns queued jobs into UNAVAILABLE "shutting down". test_dispatch_fronts.c
 * has where a job runs (inline, groups, two fronts).
 *
 * The models, the requests and the wrapped waker that holds admitted jobs in the queue without
 * relying on time are in tests/dispatch_tests.h (the Makefile links this suite with
 * -Wl,--wrap=waker_wake,--wrap=waker_sleep). */
#define _GNU_SOURCE
#include "dispatch_tests.h"

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
    model_t *m = model_new (&s_cfg->models[3], &s_cfg->server, stats, NULL, err, sizeof err);
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
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
