/* GPU suite of the CUDA LSTM backend's plan 4 (SIG_LSTM_SYNC_ADVANCE_APART, the model key
 * advances_apart): the advances in a second resident launch on other SMs. Many streams interleaved
 * at the sizes and odd shapes, within the bounds of every streamed output; and the order a
 * held advancer leaves (head of line by order and counts, no clock), its watchdog, and destroy
 * stopping both kernels. launch_shapes (test_lstm_cuda) runs three more apart. Prints "SKIP: <why>"
 * and passes where there is no CUDA build, no device, or a device other than compute capability
 * 9.0; the tolerances are lstm_cuda_tests.h's. */
#ifdef SIGSERVE_HAVE_CUDA
#include "lstm_cuda_tests.h"

#include <pthread.h>

/* Plan 4 (SIG_LSTM_SYNC_ADVANCE_APART): many streams interleaved (each step followed by its advance,
 * the advancer on other SMs), the small and medium sizes in every weight type (the plan's launch
 * size), and odd shapes at cluster 1, 4 and 16; within the bounds as every streamed output. _i: 0-5
 * size * 3 + dtype, 6-14 the odd shape at cluster (1, 4, 16)[(_i - 6) / 3] in dtype (_i - 6) % 3.
 * Case 0 asks through the model key advances_apart (as sigserve's config does), the others through
 * the tuning. */
START_TEST (advances_apart_many_streams)
{
    const lstm_shape_t odd = { .layers = 3, .step_size = 37, .hidden = 45, .out = 3, .window = 7,
                               .head_act = ACTIVATION_TANH };
    static const char *names[2] = { "small, 6 streams apart", "medium, 6 streams apart" };
    static const char *odd_names[3] = { "cluster 1, 6 streams apart", "cluster 4, 6 streams apart",
                                        "cluster 16, 6 streams apart" };
    s_slots = 6;
    s_expect_apart = 1;
    if (_i < 6) {
        const lstm_shape_t *s = _i < 3 ? &LSTM_SHAPE_SMALL : &LSTM_SHAPE_MEDIUM;
        const uint32_t self_every = _i < 3 ? 8 : 24, ref_every = _i < 3 ? 8 : 48;
        const sig_lstm_tuning_t t = { .sync = _i == 0 ? 0u : (uint32_t) SIG_LSTM_SYNC_ADVANCE_APART };
        s_cfg_apart = _i == 0;
        s_check_model (s, (weight_dtype_t) (_i % 3), &t, 6, s->window + 2, self_every, ref_every, 1,
                       _i == 0 ? "small, 6 streams apart (the model key)" : names[_i / 3]);
    } else {
        const uint32_t blocks[3] = { 1, 4, 16 };
        const sig_lstm_tuning_t t = { .blocks = blocks[(_i - 6) / 3], .sync = SIG_LSTM_SYNC_ADVANCE_APART };
        s_check_model (&odd, (weight_dtype_t) ((_i - 6) % 3), &t, 6, 2 * odd.window + 3, 1, 1, 1, odd_names[(_i - 6) / 3]);
    }
}
END_TEST

typedef struct {
    backend_model_t *m;
    uint32_t slot;
    const float *x;
    float *y;
    sig_status_t st;
    int done;
    char err[512];
} step_arg_t;

static void *s_step_thread (void *arg)
{
    step_arg_t *a = arg;
    a->st = B->stream_step (a->m, a->slot, a->x, a->y, a->err, sizeof a->err);
    __atomic_store_n (&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* STEPS steps X of one stream: Y within the bound of the rounded weights' reference. */
static void s_check_stream_out (fixture_t *f, const float *x, uint32_t steps, const float *y, const char *what)
{
    const uint32_t out = f->w->lstm->head.out;
    double r[4], b[4];
    ck_assert (out <= 4);
    ck_assert_int_eq (tol_lstm_stream_products (f->wr->lstm, WEIGHT_DTYPE_F32, f->products, x, steps, r, b), 0);
    TOL_ASSERT (y, r, b, out, out, "%s (%s)", what, s_dtype_names[f->cfg.weight_dtype]);
}

/* Head-of-line, by order and counts (no clock): with the advancer held (lstm_cuda_hold), stream A's
 * advance stays pending while stream B's step is answered, and correct; A's next step, posted while
 * its advance is held, is not answered before the hold is lifted, then is correct. _i: the dtype.
 * Then (f32): an advancer held for good makes the step waiting for it UNAVAILABLE after the
 * watchdog; destroy stops both kernels (none left resident) and a new load works. */
START_TEST (advances_apart_head_of_line)
{
    static fixture_t f;   /* static: the teardown may see it after a failed assertion left the frame */
    const lstm_shape_t s = { .layers = 2, .step_size = 37, .hidden = 45, .out = 3, .window = 5,
                             .head_act = ACTIVATION_TANH };
    const sig_lstm_tuning_t apart = { .sync = SIG_LSTM_SYNC_ADVANCE_APART };
    s_expect_apart = 1;
    s_open (&f, &s, (weight_dtype_t) _i, 1, 3, &apart);
    float xa[3][37], xb[2][37], ya[3], yb[3];
    char err[512];
    s_fill (&xa[0][0], 3 * 37);
    s_fill (&xb[0][0], 2 * 37);
    B->stream_reset (f.m, 0);
    B->stream_reset (f.m, 1);
    ck_assert_int_eq (B->stream_step (f.m, 0, xa[0], ya, err, sizeof err), SIG_OK);
    B->stream_advance (f.m, 0);
    ck_assert_int_eq (B->stream_step (f.m, 1, xb[0], yb, err, sizeof err), SIG_OK);
    B->stream_advance (f.m, 1);
    ck_assert_int_eq (lstm_cuda_sync (f.m, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 0);
    /* hold the advancer; A steps, and its advance goes in behind the hold */
    ck_assert_int_eq (lstm_cuda_hold (f.m, true), 0);
    ck_assert_int_eq (B->stream_step (f.m, 0, xa[1], ya, err, sizeof err), SIG_OK);
    s_check_stream_out (&f, &xa[0][0], 2, ya, "A's second step, its advance done before the hold");
    B->stream_advance (f.m, 0);
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 2);   /* the hold, A's advance */
    /* B's step is answered, and right, while A's advance has not run */
    for (int o = 0; o < 3; o++)
        yb[o] = NAN;
    ck_assert_int_eq (B->stream_step (f.m, 1, xb[1], yb, err, sizeof err), SIG_OK);
    s_check_stream_out (&f, &xb[0][0], 2, yb, "B's step while A's advance is held");
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 2);
    /* A's next step waits for its advance: not answered while the hold is up */
    step_arg_t a = { .m = f.m, .slot = 0, .x = xa[2], .y = ya };
    for (int o = 0; o < 3; o++)
        ya[o] = NAN;
    pthread_t th;
    const uint64_t posted = lstm_cuda_commands_posted (f.m);
    ck_assert_int_eq (pthread_create (&th, NULL, s_step_thread, &a), 0);
    /* until its step is posted (at most 10 s): from then on it can only be waiting for the advance */
    for (int waited = 0; lstm_cuda_commands_posted (f.m) == posted && waited < 10000; waited++)
        usleep (1000);
    ck_assert_uint_gt (lstm_cuda_commands_posted (f.m), posted);
    ck_assert_int_eq (__atomic_load_n (&a.done, __ATOMIC_ACQUIRE), 0);
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 2);
    ck_assert_int_eq (lstm_cuda_hold (f.m, false), 0);
    pthread_join (th, NULL);
    ck_assert_msg (a.st == SIG_OK, "A's step after the hold: %s", a.err);
    s_check_stream_out (&f, &xa[0][0], 3, ya, "A's step posted while its advance was held");
    ck_assert_int_eq (lstm_cuda_sync (f.m, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (lstm_cuda_advances_pending (f.m), 0);
    /* B goes on after all that: its third step over B's two and this one */
    float xb3[3][37];
    memcpy (xb3, xb, sizeof xb);
    s_fill (xb3[2], 37);
    ck_assert_int_eq (B->stream_step (f.m, 1, xb3[2], yb, err, sizeof err), SIG_OK);
    s_check_stream_out (&f, &xb3[0][0], 3, yb, "B's third step");
    s_close (&f);
    if (_i != 0)
        return;
    /* an advancer that never resumes: the watchdog, then stop */
    s_open (&f, &s, WEIGHT_DTYPE_F32, 1, 3, &apart);
    B->destroy (&f.m);
    f.cfg.watchdog_ms = 100;
    lstm_cuda_tuning (&apart);
    f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
    lstm_cuda_tuning (NULL);
    ck_assert_msg (f.m != NULL, "%s", err);
    ck_assert_int_eq (cuda_device_resident (0), 2);
    ck_assert_int_eq (lstm_cuda_hold (f.m, true), 0);
    ck_assert_int_eq (B->stream_step (f.m, 2, xa[0], ya, err, sizeof err), SIG_UNAVAILABLE);   /* its reset is held */
    printf ("  held advancer: %s\n", err);
    ck_assert_msg (strstr (err, "watchdog") != NULL, "%s", err);
    ck_assert (lstm_cuda_lost (f.m));
    ck_assert_int_eq (B->stream_step (f.m, 1, xa[0], ya, err, sizeof err), SIG_UNAVAILABLE);
    B->destroy (&f.m);
    ck_assert_int_eq (cuda_device_resident (0), 0);   /* both stopped */
    f.cfg.watchdog_ms = 5000;
    lstm_cuda_tuning (&apart);
    f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
    lstm_cuda_tuning (NULL);
    ck_assert_msg (f.m != NULL, "%s", err);
    ck_assert (lstm_cuda_apart (f.m));
    ck_assert_int_eq (B->stream_step (f.m, 0, xa[0], ya, err, sizeof err), SIG_OK);
    s_check_stream_out (&f, &xa[0][0], 1, ya, "a step after the reload");
    s_close (&f);
}
END_TEST

int main (void)
{
    if (!s_lstm_cuda_start ())
        return 0;
    Suite *s = suite_create ("lstm_cuda_apart");
    TCase *t4 = s_lstm_cuda_tcase ("plan4");
    tcase_add_loop_test (t4, advances_apart_head_of_line, 0, 3);
    tcase_add_loop_test (t4, advances_apart_many_streams, 0, 15);
    suite_add_tcase (s, t4);
    return s_lstm_cuda_run (s);
}

#else

#include "testutil.h"

int main (void) { return tu_skip_without_cuda (); }

#endif
