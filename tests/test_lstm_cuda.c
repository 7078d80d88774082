/* GPU suite of the CUDA LSTM backend (backend_lstm_cuda.c, kernels/lstm_persistent.cu): the issue's
 * three sizes in every weight type, full windows and interleaved streams longer than the window,
 * against the float64 reference; forced cluster sizes, grid mode and weights read from device
 * memory; the half products; the generic kernel; heads of several outputs; stream slots kept apart;
 * refusals; the watchdog and stop; a resident kernel beside other models; green contexts. The
 * advances on other SMs (plan 4): test_lstm_cuda_apart. Prints "SKIP: <why>" and passes where there
 * is no CUDA build, no device, or a device other than compute capability 9.0; the tolerances are
 * lstm_cuda_tests.h's. */
#ifdef SIGSERVE_HAVE_CUDA
#include "lstm_cuda_tests.h"

/* _i: size * 3 + dtype. Streams: W + 3 steps each (the rings wrap). */
START_TEST (sizes_and_weight_types)
{
    const lstm_shape_t *shapes[3] = { &LSTM_SHAPE_SMALL, &LSTM_SHAPE_MEDIUM, &LSTM_SHAPE_LARGE };
    static const char *names[3] = { "small", "medium", "large" };
    const lstm_shape_t *s = shapes[_i / 3];
    const weight_dtype_t d = (weight_dtype_t) (_i % 3);
    /* large: the float64 bound of one step costs ~1.5 s there: a few points a stream (the last, past the
     * ring's wrap, always) keep the suite within its time */
    const uint32_t self_every[3] = { 1, 2, 64 }, ref_every[3] = { 2, 12, 1000 };
    s_check_model (s, d, NULL, _i / 3 == 2 ? 2 : 3, s->window + 3, self_every[_i / 3], ref_every[_i / 3], _i / 3 == 2 ? 1 : 2, names[_i / 3]);
}
END_TEST

/* The same kernel in every shape of its launch: clusters of 1, 2, 4, 8 and 16, a grid, and weights
 * read from device memory (a shared-memory cap a little above the buffers: most of every matrix
 * from L2). Small irregular models; a window of 1 (advances of zero steps). */
START_TEST (launch_shapes)
{
    const lstm_shape_t odd = { .layers = 3, .step_size = 37, .hidden = 45, .out = 3, .window = 9,
                               .head_act = ACTIVATION_TANH };
    const lstm_shape_t one = { .layers = 1, .step_size = 5, .hidden = 20, .out = 1, .window = 1 };
    const struct { sig_lstm_tuning_t t; const char *label; } cases[] = {
        { { .blocks = 1 }, "cluster 1" },  { { .blocks = 2 }, "cluster 2" },  { { .blocks = 4 }, "cluster 4" },
        { { .blocks = 8 }, "cluster 8" },  { { .blocks = 16 }, "cluster 16" }, { { .blocks = 6, .grid = 1 }, "grid 6" },
        { { .blocks = 1, .smem_cap = 40960 }, "cluster 1, 40 KiB" },
        { { .blocks = 4, .smem_cap = 49152 }, "cluster 4, 48 KiB" },
        { { .blocks = 5, .grid = 1, .smem_cap = 40960 }, "grid 5, 40 KiB" },
        /* both kinds of products of f16 / bf16 weights, whichever is the default (plan 3) */
        { { .blocks = 1, .math = SIG_LSTM_MATH_WIDE }, "cluster 1, wide math" },
        { { .blocks = 4, .math = SIG_LSTM_MATH_WIDE }, "cluster 4, wide math" },
        { { .blocks = 6, .grid = 1, .math = SIG_LSTM_MATH_WIDE }, "grid 6, wide math" },
        { { .blocks = 1, .math = SIG_LSTM_MATH_HALF }, "cluster 1, half math" },
        { { .blocks = 5, .grid = 1, .smem_cap = 40960, .math = SIG_LSTM_MATH_HALF }, "grid 5, 40 KiB, half math" },
        /* the synchronisation before plans 1 and 2, kept to compare (lstmbench --sync) */
        { { .blocks = 4, .sync = SIG_LSTM_SYNC_POLL_ROUNDS | SIG_LSTM_SYNC_XCHG_ROUNDS }, "cluster 4, old sync" },
        { { .blocks = 6, .grid = 1, .sync = SIG_LSTM_SYNC_POLL_ROUNDS | SIG_LSTM_SYNC_XCHG_ROUNDS }, "grid 6, old sync" },
        /* a step's features broadcast after block 0 read them all, as before they were forwarded as
         * read (lstmbench --sync 16; the forwarding is the default, every other case of several blocks
         * checks it) */
        { { .blocks = 4, .sync = SIG_LSTM_SYNC_BCAST_AFTER }, "cluster 4, broadcast after the read" },
        { { .blocks = 6, .grid = 1, .sync = SIG_LSTM_SYNC_BCAST_AFTER }, "grid 6, broadcast after the read" },
        /* the advances in a second launch (plan 4, lstmbench --sync 8); W = 1: advances of zero steps */
        { { .blocks = 1, .sync = SIG_LSTM_SYNC_ADVANCE_APART }, "cluster 1, advances apart" },
        { { .blocks = 4, .sync = SIG_LSTM_SYNC_ADVANCE_APART }, "cluster 4, advances apart" },
        { { .blocks = 4, .sync = SIG_LSTM_SYNC_ADVANCE_APART, .math = SIG_LSTM_MATH_HALF }, "cluster 4, advances apart, "
          "half math" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 3; d++) {
            s_check_model (&odd, (weight_dtype_t) d, &cases[i].t, 3, 14, 1, 1, 2, cases[i].label);
            if (d == 0)
                s_check_model (&one, (weight_dtype_t) d, &cases[i].t, 3, 4, 1, 1, 2, cases[i].label);
        }
}
END_TEST

/* The half products (SIG_LSTM_MATH_HALF, a variant: the widening math is the default) at the issue's
 * three sizes in f16 and bf16, within their bound: full windows, and streams past the ring's wrap.
 * _i: size * 2 + (dtype - 1). */
START_TEST (half_products_every_size)
{
    const lstm_shape_t *shapes[3] = { &LSTM_SHAPE_SMALL, &LSTM_SHAPE_MEDIUM, &LSTM_SHAPE_LARGE };
    static const char *names[3] = { "small, half math", "medium, half math", "large, half math" };
    const lstm_shape_t *s = shapes[_i / 2];
    const weight_dtype_t d = (weight_dtype_t) (1 + _i % 2);
    const sig_lstm_tuning_t t = { .math = SIG_LSTM_MATH_HALF };
    const uint32_t self_every[3] = { 4, 8, 64 }, ref_every[3] = { 8, 24, 1000 };
    s_check_model (s, d, &t, 2, s->window + 3, self_every[_i / 2], ref_every[_i / 2], 1, names[_i / 2]);
}
END_TEST

/* f16 products take features up to the plan's half_x_max (2^12 / max |W_ih of layer 0|): features
 * of 10^5 (past f16's range: in half products, inf - inf) make the host send their products in the
 * widening math (SIG_LSTM_WIDE_INPUTS), the h products staying in half. Every output finite and within
 * the half products' bound (which holds for the widened ones too), windows and streams; then inputs
 * in range again on the same kernel. */
START_TEST (f16_features_past_half_range)
{
    const lstm_shape_t odd = { .layers = 2, .step_size = 37, .hidden = 45, .out = 3, .window = 9,
                               .head_act = ACTIVATION_TANH };
    const sig_lstm_tuning_t t[] = { { .blocks = 1, .math = SIG_LSTM_MATH_HALF },
                                    { .blocks = 6, .grid = 1, .math = SIG_LSTM_MATH_HALF } };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        s_scale = 1e5f;
        s_check_model (&odd, WEIGHT_DTYPE_F16, &t[i], 2, 12, 1, 1, 2, i ? "grid 6, features 1e5" : "cluster 1, features 1e5");
        s_scale = 1.0f;
        s_check_model (&odd, WEIGHT_DTYPE_F16, &t[i], 2, 12, 1, 1, 2, i ? "grid 6, features 1" : "cluster 1, features 1");
    }
}
END_TEST

/* Heads of several outputs with an activation, on one block, a cluster of 4 and a grid of 6 (block 0
 * computes the head from the gathered h, the other blocks none), f32 and f16; a model of one layer;
 * and a head too wide for shared memory (4 x 2056 weights, past L_HEAD_SMEM_MAX), which block 0
 * reads from the image: the only case of that path. Windows and streams within their bounds. */
START_TEST (head_shapes)
{
    const lstm_shape_t five = { .layers = 2, .step_size = 19, .hidden = 45, .out = 5, .window = 6,
                                .head_act = ACTIVATION_SIGMOID };
    const lstm_shape_t one = { .layers = 1, .step_size = 7, .hidden = 33, .out = 2, .window = 3,
                               .head_act = ACTIVATION_TANH };
    const lstm_shape_t wide = { .layers = 1, .step_size = 3, .hidden = 2056, .out = 4, .window = 2 };
    const struct { sig_lstm_tuning_t t; const char *label; } cases[] = {
        { { .blocks = 1 }, "cluster 1" },
        { { .blocks = 4 }, "cluster 4" },
        { { .blocks = 6, .grid = 1 }, "grid 6" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 2; d++) {
            s_check_model (&five, (weight_dtype_t) d, &cases[i].t, 3, 10, 1, 1, 2, cases[i].label);
            s_check_model (&one, (weight_dtype_t) d, &cases[i].t, 2, 6, 1, 1, 2, cases[i].label);
        }
    s_expect_head_smem = 0;
    s_check_model (&wide, WEIGHT_DTYPE_F16, &cases[2].t, 2, 4, 1, 1, 1, "grid 6, the head from the image");
    s_expect_head_smem = -1;
}
END_TEST

/* The generic kernel (SIG_LSTM_SYNC_GENERIC: the specialised one is the default, every other case runs
 * it) in the launch shapes: one block, clusters of 4 and 8, a grid of 6, weights read from L2 (a
 * shared-memory cap), both kinds of products, an odd three-layer model and a one-layer one in every
 * weight type, then the small and medium sizes in f16: every output within its bound. The
 * model says which kernel runs (list_models). */
START_TEST (generic_every_shape)
{
    const lstm_shape_t odd = { .layers = 3, .step_size = 37, .hidden = 45, .out = 3, .window = 9,
                               .head_act = ACTIVATION_TANH };
    const lstm_shape_t one = { .layers = 1, .step_size = 5, .hidden = 20, .out = 1, .window = 1 };
    const uint32_t S = SIG_LSTM_SYNC_GENERIC;
    const struct { sig_lstm_tuning_t t; const char *label; } cases[] = {
        { { .blocks = 1, .sync = S }, "cluster 1, generic" },
        { { .blocks = 4, .sync = S }, "cluster 4, generic" },
        { { .blocks = 8, .sync = S }, "cluster 8, generic" },
        { { .blocks = 6, .grid = 1, .sync = S }, "grid 6, generic" },
        { { .blocks = 4, .smem_cap = 49152, .sync = S }, "cluster 4, 48 KiB, generic" },
        { { .blocks = 1, .math = SIG_LSTM_MATH_HALF, .sync = S }, "cluster 1, half math, generic" },
        { { .blocks = 6, .grid = 1, .math = SIG_LSTM_MATH_HALF, .sync = S }, "grid 6, half math, generic" },
    };
    s_expect_spec = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 3; d++) {
            s_check_model (&odd, (weight_dtype_t) d, &cases[i].t, 3, 14, 1, 1, 2, cases[i].label);
            if (d == 0)
                s_check_model (&one, (weight_dtype_t) d, &cases[i].t, 3, 4, 1, 1, 2, cases[i].label);
        }
    const sig_lstm_tuning_t t = { .sync = S };
    s_check_model (&LSTM_SHAPE_SMALL, WEIGHT_DTYPE_F16, &t, 3, LSTM_SHAPE_SMALL.window + 3, 1, 2, 1, "small, generic");
    s_check_model (&LSTM_SHAPE_MEDIUM, WEIGHT_DTYPE_F16, &t, 2, LSTM_SHAPE_MEDIUM.window + 3, 4, 24, 1,
                   "medium, generic");
    s_expect_spec = -1;
}
END_TEST

/* The small size under every cluster size the plan could choose, and a grid: the timings differ,
 * the numbers must not. */
START_TEST (small_every_cluster)
{
    const sig_lstm_tuning_t t[] = { { .blocks = 1 }, { .blocks = 2 }, { .blocks = 4 }, { .blocks = 8 }, { .blocks = 16, .grid = 1 } };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        s_check_model (&LSTM_SHAPE_SMALL, WEIGHT_DTYPE_F16, &t[i], 3, 70, 3, 10, 1, "small, forced");
}
END_TEST

/* Slots are separate: a step on one slot (with its advance owed, not posted) never moves another
 * slot's output; a step whose advance is owed runs it first. */
START_TEST (slots_isolated)
{
    static fixture_t f;   /* static: the teardown may see it after a failed assertion left the frame */
    const lstm_shape_t s = { .layers = 2, .step_size = 16, .hidden = 24, .out = 1, .window = 4 };
    s_open (&f, &s, WEIGHT_DTYPE_F32, 1, 4, NULL);
    ck_assert (!lstm_cuda_apart (f.m));   /* the default: the advances in the serving kernel */
    float x[5][16], y0 = NAN, y1 = NAN, yagain = NAN;
    double r, b;
    char err[512];
    for (int i = 0; i < 5; i++)
        s_fill (x[i], 16);
    B->stream_reset (f.m, 2);
    B->stream_reset (f.m, 3);
    ck_assert_int_eq (B->stream_step (f.m, 2, x[0], &y0, err, sizeof err), SIG_OK);
    /* slot 3 gets other steps meanwhile, advances owed and never posted by the caller */
    for (int i = 1; i < 5; i++)
        ck_assert_int_eq (B->stream_step (f.m, 3, x[i], &y1, err, sizeof err), SIG_OK);
    ck_assert_int_eq (tol_lstm_stream (f.wr->lstm, WEIGHT_DTYPE_F32, x[1], 4, &r, &b), 0);
    TOL_ASSERT (&y1, &r, &b, 1, 1, "slot 3 after 4 steps");
    /* slot 2 resumes: its window is x[0], x[1] */
    ck_assert_int_eq (B->stream_step (f.m, 2, x[1], &yagain, err, sizeof err), SIG_OK);
    float pair[2][16];
    memcpy (pair[0], x[0], sizeof pair[0]);
    memcpy (pair[1], x[1], sizeof pair[1]);
    ck_assert_int_eq (tol_lstm_stream (f.wr->lstm, WEIGHT_DTYPE_F32, pair[0], 2, &r, &b), 0);
    TOL_ASSERT (&yagain, &r, &b, 1, 1, "slot 2");
    /* a slot past the table: an error, not a crash */
    ck_assert_int_eq (B->stream_step (f.m, 4, x[0], &y0, err, sizeof err), SIG_INTERNAL);
    ck_assert_msg (strstr (err, "slot 4") != NULL, "%s", err);
    ck_assert_str_eq (B->kernel_name (f.m), "lstm-persistent-nvrtc");   /* specialised: the default */
    s_close (&f);
}
END_TEST

/* A warm spare's park and unpark (backend.h): loaded and warmed, the kernel(s) stopped (nothing
 * resident: the device's resident count back to what it was), launched again; then full windows and
 * interleaved streams, each within its bound of the reference, as after a plain load. _i: the
 * default plan (advances in the serving kernel), then advances apart (two kernels), each parked
 * twice in a row (the second a no-op) and unparked twice. */
START_TEST (parked_and_unparked_answers_as_loaded)
{
    static fixture_t f;   /* static: the teardown may see it after a failed assertion left the frame */
    s_cfg_apart = _i == 1;
    s_expect_apart = _i == 1;
    const lstm_shape_t s = { .layers = 2, .step_size = 16, .hidden = 24, .out = 2, .window = 5 };
    const int before = cuda_device_resident (0);
    s_open (&f, &s, WEIGHT_DTYPE_F16, 2, 3, NULL);
    ck_assert_int_eq (cuda_device_resident (0), before + (_i == 1 ? 2 : 1));
    ck_assert_ptr_nonnull (B->park);
    ck_assert_int_eq (B->park (f.m), 0);
    ck_assert_int_eq (B->park (f.m), 0);
    ck_assert_int_eq (cuda_device_resident (0), before);
    char err[512] = "";
    ck_assert_msg (B->unpark (f.m, err, sizeof err) == 0, "unpark: %s", err);
    ck_assert_int_eq (B->unpark (f.m, err, sizeof err), 0);
    ck_assert_int_eq (cuda_device_resident (0), before + (_i == 1 ? 2 : 1));
    worst_t w = { 0, 0, 0 };
    s_check_windows (&f, 2, 2, "parked and unparked", &w);
    s_check_streams (&f, 3, s.window + 4, 1, 2, "parked and unparked", &w);
    printf ("  parked and unparked (%s): largest error %.3g (rounded weights), %.3g (fp32), %.3g (own windows) of the "
            "bound x %g\n", _i == 1 ? "advances apart" : "advances inline", w.rounded, w.raw, w.self, TOL_SAFETY);
    s_close (&f);
    s_cfg_apart = false;
    s_expect_apart = -1;
}
END_TEST

START_TEST (refusals)
{
    char err[512] = "", path[512];
    model_config_t cfg;
    /* 60,000 inputs a step: its buffers alone pass a block's shared memory */
    const lstm_shape_t wide = { .layers = 1, .step_size = 60000, .hidden = 1, .out = 1, .window = 2 };
    snprintf (path, sizeof path, "%s/wide.safetensors", s_dir);
    weights_t *w = lstm_random_weights (path, &wide, 1, &cfg, err, sizeof err);
    ck_assert_msg (w != NULL, "%s", err);
    cfg.backend = BACKEND_CUDA;
    ck_assert_ptr_null (B->load (w, &cfg, 0, err, sizeof err));
    printf ("  refused: %s\n", err);
    ck_assert_msg (strstr (err, "cannot serve") != NULL && strstr (err, "shared memory") != NULL, "%s", err);
    /* no such device */
    const lstm_shape_t s = { .layers = 1, .step_size = 2, .hidden = 3, .out = 1, .window = 2 };
    weights_t *w2 = lstm_random_weights (path, &s, 2, &cfg, err, sizeof err);
    ck_assert_ptr_null (B->load (w2, &cfg, 99, err, sizeof err));
    ck_assert_msg (strstr (err, "device 99") != NULL, "%s", err);
    /* MLP weights */
    weights_t *mlp = weights_alloc (1);
    mlp->layers[0] = (dense_layer_t) { .in = 3, .out = 2 };
    weights_finish (mlp);
    ck_assert_ptr_null (B->load (mlp, &cfg, 0, err, sizeof err));
    ck_assert_msg (strstr (err, "LSTM weights") != NULL, "%s", err);
    weights_destroy (&w);
    weights_destroy (&w2);
    weights_destroy (&mlp);
}
END_TEST

/* A kernel that stops answering: the step comes back UNAVAILABLE after the watchdog, every later
 * call at once; destroy stops the kernel and returns; a new load works (stop and start). */
START_TEST (watchdog_and_stop)
{
    static fixture_t f;   /* static: the teardown may see it after a failed assertion left the frame */
    s_open (&f, &LSTM_SHAPE_SMALL, WEIGHT_DTYPE_F16, 1, 2, NULL);
    char err[512];
    float x[128], y;
    s_fill (x, 128);
    B->stream_reset (f.m, 0);
    ck_assert_int_eq (B->stream_step (f.m, 0, x, &y, err, sizeof err), SIG_OK);
    /* the fixture's watchdog is 5 s; this model's 50 ms */
    B->destroy (&f.m);
    f.cfg.watchdog_ms = 50;
    f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
    s_live = &f;
    ck_assert_msg (f.m != NULL, "%s", err);
    ck_assert_int_eq (lstm_cuda_stall (f.m), 0);
    const double t0 = (clock_now_us () / 1e6);
    ck_assert_int_eq (B->stream_step (f.m, 0, x, &y, err, sizeof err), SIG_UNAVAILABLE);
    const double waited = (clock_now_us () / 1e6) - t0;
    printf ("  watchdog: %s (after %.1f ms)\n", err, waited * 1e3);
    ck_assert_msg (strstr (err, "watchdog") != NULL, "%s", err);
    /* At least the watchdog; the cap only tells a watchdog that never fires from one that does. */
    ck_assert_msg (waited >= 0.045 && waited < 10.0, "fired after %.3f s", waited);
    ck_assert (lstm_cuda_lost (f.m));
    ck_assert_int_eq (B->infer (f.m, x, 1, &y, err, sizeof err), SIG_UNAVAILABLE);
    const double t1 = (clock_now_us () / 1e6);
    B->destroy (&f.m);
    printf ("  destroy of the stalled kernel: %.1f ms\n", ((clock_now_us () / 1e6) - t1) * 1e3);
    ck_assert_ptr_null (f.m);
    /* start again, many times: mailboxes are reused, nothing leaks into the next */
    for (int i = 0; i < 3; i++) {
        f.cfg.watchdog_ms = 1000;
        f.m = B->load (f.w, &f.cfg, 0, err, sizeof err);
        ck_assert_msg (f.m != NULL, "%s", err);
        ck_assert_int_eq (B->stream_step (f.m, 1, x, &y, err, sizeof err), SIG_OK);
        B->destroy (&f.m);
    }
    s_live = NULL;
    weights_destroy (&f.w);
    weights_destroy (&f.wr);
}
END_TEST

/* A resident LSTM kernel counts on its device like the MLP's (device.h): next to it a cuBLAS model
 * is refused (cuBLAS would wait for the kernel forever) and the pinned memory of a model destroyed
 * next to it is released later rather than waited for; once it stops, both work again. Before the
 * device level, the LSTM backend never registered its kernel: this hung or was not refused. */
START_TEST (resident_like_every_persistent_kernel)
{
    static fixture_t f;
    char err[512] = "";
    ck_assert_int_eq (cuda_device_resident (0), 0);
    const size_t deferred0 = cuda_device_deferred ();
    s_open (&f, &LSTM_SHAPE_SMALL, WEIGHT_DTYPE_F16, 1, 2, NULL);
    ck_assert_int_eq (cuda_device_resident (0), 1 + (int) lstm_cuda_apart (f.m));   /* apart: the advancer too */
    const uint32_t sizes[3] = { 37, 19, 3 };
    const activation_t acts[2] = { ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *mlp = weights_random (sizes, acts, 2, rng_next (&s_seed));
    model_config_t mcfg;
    memset (&mcfg, 0, sizeof mcfg);
    snprintf (mcfg.name, sizeof mcfg.name, "beside-the-lstm");
    mcfg.backend = BACKEND_CUDA;
    mcfg.kernel = CUDA_KERNEL_WARP;
    mcfg.graph = true;
    mcfg.max_rows = 2;
    backend_model_t *g = backend_cuda_iface.load (mlp, &mcfg, 0, err, sizeof err);
    ck_assert_msg (g != NULL, "warp model next to the LSTM kernel: %s", err);
    float x[2 * 37], y[2 * 3];
    s_fill (x, 2 * 37);
    ck_assert_int_eq (backend_cuda_iface.infer (g, x, 2, y, err, sizeof err), SIG_OK);
    backend_cuda_iface.destroy (&g);
    /* its pinned buffers and graph executables: released later, none waited for */
    ck_assert_uint_gt (cuda_device_deferred (), deferred0 + 1);
    mcfg.kernel = CUDA_KERNEL_CUBLAS;
    ck_assert_ptr_null (backend_cuda_iface.load (mlp, &mcfg, 0, err, sizeof err));
    ck_assert_msg (strstr (err, "kernel \"cublas\" cannot be loaded while a persistent kernel is resident on device 0")
                   != NULL, "%s", err);
    /* the LSTM still answers */
    float step[128], out;
    s_fill (step, 128);
    ck_assert_int_eq (B->stream_step (f.m, 0, step, &out, err, sizeof err), SIG_OK);
    s_close (&f);
    ck_assert_int_eq (cuda_device_resident (0), 0);
    ck_assert_uint_eq (cuda_device_deferred (), deferred0);       /* released once it stopped */
    g = backend_cuda_iface.load (mlp, &mcfg, 0, err, sizeof err);
    ck_assert_msg (g != NULL, "cublas once no kernel is resident: %s", err);
    backend_cuda_iface.destroy (&g);
    weights_destroy (&mlp);
}
END_TEST

/* Model key green_context: the small and medium sizes (clusters of 1 and 8) in f16, medium with its
 * advances apart (two kernels, two groups), each within the bounds as every streamed output, the
 * groups given back at destroy; large (a grid over every SM) and a cluster of 16 are refused,
 * naming why. _i: 0 small, 1 medium, 2 medium apart, 3 large, 4 cluster 16. */
START_TEST (green_context_sizes)
{
    const lstm_shape_t odd = { .layers = 3, .step_size = 37, .hidden = 45, .out = 3, .window = 7,
                               .head_act = ACTIVATION_TANH };
    s_cfg_green = true;
    if (_i < 3) {
        const lstm_shape_t *s = _i == 0 ? &LSTM_SHAPE_SMALL : &LSTM_SHAPE_MEDIUM;
        s_expect_apart = _i == 2;
        s_cfg_apart = _i == 2;
        s_check_model (s, WEIGHT_DTYPE_F16, NULL, 3, s->window + 3, _i == 0 ? 1 : 2, _i == 0 ? 2 : 12, 2,
                       _i == 0 ? "small, green" : _i == 1 ? "medium, green" : "medium, green, advances apart");
        ck_assert_uint_eq (cuda_green_lent (0, NULL), 0);   /* given back */
        return;
    }
    char path[512], err[1024] = "";
    const lstm_shape_t *s = _i == 3 ? &LSTM_SHAPE_LARGE : &odd;
    snprintf (path, sizeof path, "%s/lstm-green-%d.safetensors", s_dir, _i);
    model_config_t cfg;
    weights_t *w = lstm_random_weights (path, s, rng_next (&s_seed), &cfg, err, sizeof err);
    ck_assert_msg (w != NULL, "weights: %s", err);
    cfg.backend = BACKEND_CUDA;
    cfg.weight_dtype = WEIGHT_DTYPE_F16;
    cfg.max_rows = cfg.max_batch_rows = 1;
    cfg.max_streams = 2;
    cfg.green_context = true;
    const sig_lstm_tuning_t t16 = { .blocks = 16 };
    lstm_cuda_tuning (_i == 4 ? &t16 : NULL);
    backend_model_t *m = B->load (w, &cfg, 0, err, sizeof err);
    lstm_cuda_tuning (NULL);
    ck_assert_msg (m == NULL, "loaded, expected a refusal");
    if (_i == 3)
        ck_assert_msg (strstr (err, "\": green_context: its LSTM kernel runs as a grid of ") != NULL
                           && strstr (err, "blocks, one on every SM of device 0 (its weights fit no cluster), and a green "
                                           "context holds a few SMs; drop green_context for this model") != NULL, "%s", err);
    else
        ck_assert_msg (strstr (err, "\": green_context: its kernel runs 16 blocks in clusters of 16 and a green context "
                                    "of device 0 holds 8 SMs (one block an SM, the driver's smallest partition)") != NULL,
                       "%s", err);
    ck_assert_uint_eq (cuda_green_lent (0, NULL), 0);   /* nothing held by a refused load */
    weights_destroy (&w);
}
END_TEST

int main (void)
{
    if (!s_lstm_cuda_start ())
        return 0;
    Suite *s = suite_create ("lstm_cuda");
    TCase *tc = s_lstm_cuda_tcase ("lstm");
    tcase_add_test (tc, refusals);
    tcase_add_test (tc, slots_isolated);
    tcase_add_loop_test (tc, sizes_and_weight_types, 0, 9);
    tcase_add_test (tc, launch_shapes);
    tcase_add_test (tc, small_every_cluster);
    tcase_add_loop_test (tc, half_products_every_size, 0, 6);
    tcase_add_test (tc, f16_features_past_half_range);
    tcase_add_test (tc, watchdog_and_stop);
    tcase_add_test (tc, resident_like_every_persistent_kernel);
    /* the generic kernel's own cases (CK_RUN_CASE=generic runs them alone) */
    TCase *ts = s_lstm_cuda_tcase ("generic");
    tcase_add_test (ts, generic_every_shape);
    suite_add_tcase (s, ts);
    /* a warm spare's park and unpark (CK_RUN_CASE=park runs them alone) */
    TCase *tp = s_lstm_cuda_tcase ("park");
    tcase_add_loop_test (tp, parked_and_unparked_answers_as_loaded, 0, 2);
    suite_add_tcase (s, tp);
    /* the head's own cases (CK_RUN_CASE=head runs them alone) */
    TCase *th = s_lstm_cuda_tcase ("head");
    tcase_add_test (th, head_shapes);
    suite_add_tcase (s, th);
    suite_add_tcase (s, tc);
    /* green contexts last (CK_RUN_CASE=green runs them alone): with CK_FORK=no the device stays split
     * for the rest of the process, and every later kernel would follow the split */
    TCase *tg = s_lstm_cuda_tcase ("green");
    tcase_add_loop_test (tg, green_context_sizes, 0, 5);
    suite_add_tcase (s, tg);
    return s_lstm_cuda_run (s);
}

#else

#include "testutil.h"

int main (void) { return tu_skip_without_cuda (); }

#endif
