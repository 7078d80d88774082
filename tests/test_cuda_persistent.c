/* GPU suite: kernel "persistent", a resident cluster serving requests through mapped memory,
 * against the float64 reference: the kernel specialised for each model (NVRTC) and the generic one,
 * single layers and chains of odd shapes under every tuning (cluster sizes, layer splits, registers,
 * completion, hand-offs), weights held in f16 and bf16 and what they refuse, every batch size, and
 * the planner's budget (what fits is accepted, what does not is refused with the message). A
 * resident kernel beside other models: test_cuda_resident. Prints "SKIP: <why>" and passes where
 * there is no CUDA build or no device (cuda_tests.h). */
#ifdef SIGSERVE_HAVE_CUDA
#include "cuda_tests.h"

#include "backends/autoselect.h"
#include "sig_persistent.h"

static const sig_persistent_tuning_t s_default_tuning = { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, 0 };

/* Loads W as a persistent model with TUNING, its weights held in HELD; when it fits, checks rows 1,
 * 3 and max_rows (each output within its bound: tol_mlp_held) and the kernel name, and returns
 * true; when it does not, checks the message and returns false. */
/* The persistent checks load the kernel specialised for the model (NVRTC) instead of the generic one,
 * and check every row count. */
static bool s_spec_on;

static bool s_check_persistent_held (const weights_t *w, weight_dtype_t held, const sig_persistent_tuning_t *tuning,
                                     uint32_t max_rows, const char *label)
{
    cuda_persistent_tuning (tuning);
    model_config_t cfg = s_pconfig (max_rows, 1000);
    cfg.weight_dtype = held;
    cfg.specialise = s_spec_on;
    char err[1024] = "";
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    cuda_persistent_tuning (NULL);
    if (!m) {
        ck_assert_msg (strstr (err, "kernel \"persistent\": the weights need ") && strstr (err, " KiB on chip, the cluster holds ")
                           && strstr (err, "use kernel \"fused\" or \"warp\""),
                       "%s (cluster %u, spread_all %u): load: %s", label, tuning->cluster_blocks, tuning->spread_all, err);
        return false;
    }
    ck_assert_str_eq (backend_cuda_iface.kernel_name (m), s_spec_on ? "persistent-nvrtc" : "persistent");
    const sig_persistent_plan_t *plan = cuda_model_persistent_plan (m);
    ck_assert_ptr_nonnull (plan);
    ck_assert_uint_eq (plan->dtype, (uint32_t) held);
    if (tuning->cluster_blocks)
        ck_assert_uint_eq (plan->cluster_blocks, tuning->cluster_blocks);
    const uint32_t rows[] = { 1, 3, max_rows };
    bool regs = false;
    uint32_t kept = 0, streamed = 0;
    for (uint32_t l = 0; l < plan->layer_count; l++) {
        regs |= plan->layers[l].bank == 0 && plan->layers[l].regs > 0;
        kept += plan->layers[l].fuse != 0;
        streamed += plan->layers[l].fuse == 2;
    }
    if (tuning->sync & SIG_SYNC_NO_STREAM)
        ck_assert_uint_eq (streamed, 0);
    /* every layer split, even ones by outputs: each pair is fused unless the tuning says not */
    if (tuning->split_by == 3 && tuning->spread_all && plan->cluster_blocks > 1 && plan->layer_count >= 2)
        ck_assert_uint_eq (kept, (tuning->sync & SIG_SYNC_NO_FUSE) ? 0 : plan->layer_count / 2);
    char what[256];
    snprintf (what, sizeof what, "%s: persistent (cluster %u, spread_all %u, no_registers %u%s, done %u, read by the "
              "%s, ring %u, %u fused, %u streamed)", label, plan->cluster_blocks, tuning->spread_all, tuning->no_registers,
              regs ? " (banked)" : "", plan->done_mode, plan->read_leader ? "leader" : "workers", plan->ring, kept, streamed);
    for (size_t r = 0; r < 3; r++)
        if (rows[r] <= max_rows)
            s_check_outputs_held (m, w, held, rows[r], what);
    for (uint32_t r = 2; s_spec_on && r < max_rows; r++)   /* every row count (fresh inputs each) */
        s_check_outputs_held (m, w, held, r, what);
    backend_cuda_iface.destroy (&m);
    ck_assert_ptr_null (m);
    return true;
}

static bool s_check_persistent (const weights_t *w, const sig_persistent_tuning_t *tuning, uint32_t max_rows,
                                const char *label)
{
    return s_check_persistent_held (w, WEIGHT_DTYPE_F32, tuning, max_rows, label);
}

/* The tunings every shape runs under: the service's choice, each cluster size, every layer split,
 * registers always and never, completion by the outputs, reads by the workers, shorter rings.
 * (On the GPU, 2026-11-23, the same list ran with 0 meaning "always registers".) */
/* { cluster, spread_all, no_registers (0 auto, 1 never, 2 always), done, read_workers, ring } */
static const sig_persistent_tuning_t s_tunings[] = {
    { 0, 0, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 }, { 1, 0, 2, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 }, { 2, 0, 2, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 },
    { 4, 0, 2, SIG_DONE_SEQUENCE, 1, 0, 0, 0, 0 }, { 8, 1, 2, SIG_DONE_SEQUENCE, 0, 1, 0, 0, 0 }, { 8, 0, 1, SIG_DONE_SEQUENCE, 1, 0, 0, 0, 0 },
    { 0, 0, 2, SIG_DONE_OUTPUTS, 0, 2, 0, 0, 0 },  { 2, 1, 1, SIG_DONE_OUTPUTS, 1, 0, 0, 0, 0 }, { 8, 0, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, 0 },
    /* split layers divided by outputs: every layer split, leader reads; registers and workers reading */
    { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 2, 0 },  { 4, 0, 2, SIG_DONE_SEQUENCE, 1, 0, 0, 2, 0 },
    /* the synchronisation (every tuning above runs the compact tail and cluster barriers): the old
     * tail; mbarrier hand-offs, an arrival a warp or a block, with every layer split too (scatters),
     * completion by sequence, the old tail, registers */
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_BARRIERS | SIG_SYNC_OLD_TAIL },
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_MBAR_WARPS },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, SIG_SYNC_MBAR_WARPS },
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_MBAR_BLOCKS },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 0, SIG_SYNC_MBAR_BLOCKS },
    { 4, 0, 2, SIG_DONE_OUTPUTS, 0, 1, 0, 0, SIG_SYNC_MBAR_BLOCKS | SIG_SYNC_OLD_TAIL },
    /* every block polls, the workers read their slices (ignored where layer 0 is not the only split
     * layer or rows run in chunks): completion by outputs, by sequence with a ring of 1, layer 0 split
     * by outputs on 4 blocks with registers, the old tail */
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_WORKERS_POLL },
    { 0, 0, 0, SIG_DONE_SEQUENCE, 0, 1, 0, 0, SIG_SYNC_WORKERS_POLL },
    { 4, 0, 2, SIG_DONE_OUTPUTS, 0, 0, 0, 2, SIG_SYNC_WORKERS_POLL | SIG_SYNC_OLD_TAIL },
    /* fused pairs (a layer split by outputs keeps them in the workers for the next, split by columns):
     * every layer split, even ones by outputs: completion by outputs; registers always, the workers
     * reading; mbarrier hand-offs; the same pairs not fused */
    { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 3, 0 },
    { 4, 1, 2, SIG_DONE_SEQUENCE, 1, 0, 0, 3, 0 },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 3, SIG_SYNC_MBAR_WARPS },
    { 2, 1, 1, SIG_DONE_OUTPUTS, 0, 0, 0, 3, SIG_SYNC_NO_FUSE },
    /* the narrow layout (a thread 4 outputs) for every split layer: every layer split; registers
     * always (for the other role), the workers reading */
    { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 4, 0 },
    { 4, 0, 2, SIG_DONE_SEQUENCE, 1, 0, 0, 4, 0 },
    /* narrow layers streamed into a few outputs (the default where a pair is fused; here every layer
     * split, even ones by outputs): registers always (the streamed-into layer's first passes banked),
     * mbarriers a block; the same pairs with the hidden layer kept (SIG_SYNC_NO_STREAM) */
    { 4, 1, 2, SIG_DONE_SEQUENCE, 0, 0, 0, 3, SIG_SYNC_MBAR_BLOCKS },
    { 8, 1, 2, SIG_DONE_OUTPUTS, 0, 0, 0, 3, SIG_SYNC_NO_STREAM },
    /* the stores complete the hand-offs (st.async, the default where the leader reads; tunings of
     * kind 0 above run it): every layer split (scatters), by columns, by sequence;
     * layer 0 by outputs on 4 blocks with registers and a ring of 1; every layer narrow (4 outputs a
     * thread); pairs fused (kept and streamed: every layer split, even ones by outputs; registers
     * always with the streamed-into layer's first passes banked). Cluster barriers (the default
     * before): the plan's cluster, and every layer split by columns */
    { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, SIG_SYNC_BARRIERS },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 1, SIG_SYNC_BARRIERS },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 1, SIG_SYNC_ASYNC },
    { 4, 0, 2, SIG_DONE_OUTPUTS, 0, 1, 0, 2, SIG_SYNC_ASYNC },
    { 8, 1, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 4, SIG_SYNC_ASYNC },
    { 8, 1, 0, SIG_DONE_SEQUENCE, 0, 0, 0, 3, SIG_SYNC_ASYNC },
    { 4, 1, 2, SIG_DONE_OUTPUTS, 0, 0, 0, 3, SIG_SYNC_ASYNC },
};
#define TUNINGS (sizeof s_tunings / sizeof s_tunings[0])

/* The kernel specialised for each model (NVRTC): the demo shape and odd ones, a split layer and rows
 * run in chunks, f32, f16 and bf16 weights, every tuning on the demo shape, every row count; each
 * output within its bound, and the kernel named "persistent-nvrtc". */
START_TEST (persistent_specialised)
{
    s_spec_on = true;
    static const uint32_t shapes[][5] = { { 512, 256, 64, 1, 0 }, { 597, 293, 33, 1, 0 }, { 37, 6669, 5, 0, 0 },
                                          { 293, 597, 31, 3, 0 }, { 3, 5, 0, 0, 0 } };
    static const uint32_t max_rows[] = { 4, 7, 3, 16, 5 };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        size_t n = 0;
        while (n < 5 && shapes[k][n])
            n++;
        activation_t acts[4];
        for (size_t l = 0; l + 1 < n; l++)
            acts[l] = l + 2 < n ? ACTIVATION_TANH : ACTIVATION_NONE;
        weights_t *w = weights_random (shapes[k], acts, n - 1, 100 + k);
        char label[64];
        snprintf (label, sizeof label, "specialised shape %zu", k);
        for (int d = 0; d < 3; d++) {
            const sig_persistent_tuning_t tu = { 0, 0, 0, SIG_DONE_OUTPUTS, 0, 0, 0, 0, 0 };
            s_check_persistent_held (w, (weight_dtype_t) d, &tu, max_rows[k], label);
        }
        for (size_t t = 0; k == 0 && t < TUNINGS; t++)
            s_check_persistent (w, &s_tunings[t], max_rows[k], "specialised demo shape, a tuning");
        weights_destroy (&w);
    }
    s_spec_on = false;
}
END_TEST

/* Loading a module next to a resident kernel waits forever (test_cuda_resident --probe 18): a model of new
 * shapes loaded while another persistent kernel runs gets the generic kernel, and answers; shapes whose
 * module was loaded before any kernel was resident get the specialised one there too. */
START_TEST (persistent_specialised_next_to_resident)
{
    const uint32_t a[] = { 64, 32, 2 }, b[] = { 71, 13, 3 }, c[] = { 45, 9, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *wa = weights_random (a, acts, 2, 1), *wb = weights_random (b, acts, 2, 2), *wc = weights_random (c, acts, 2, 3);
    model_config_t cfg = s_pconfig (2, 1000);
    cfg.specialise = true;
    char err[2048] = "";
    backend_model_t *mc = s_pload (wc, &cfg, err, sizeof err);   /* c's module, loaded with nothing resident */
    ck_assert_msg (mc != NULL, "%s", err);
    ck_assert_str_eq (backend_cuda_iface.kernel_name (mc), "persistent-nvrtc");
    backend_cuda_iface.destroy (&mc);
    backend_model_t *ma = s_pload (wa, &cfg, err, sizeof err);   /* resident from here on */
    ck_assert_msg (ma != NULL, "%s", err);
    backend_model_t *mb = s_pload (wb, &cfg, err, sizeof err);
    ck_assert_msg (mb != NULL, "%s", err);
    ck_assert_str_eq (backend_cuda_iface.kernel_name (mb), "persistent");
    mc = s_pload (wc, &cfg, err, sizeof err);
    ck_assert_msg (mc != NULL, "%s", err);
    ck_assert_str_eq (backend_cuda_iface.kernel_name (mc), "persistent-nvrtc");
    for (uint32_t r = 1; r <= 2; r++) {
        s_check_outputs_held (ma, wa, WEIGHT_DTYPE_F32, r, "a");
        s_check_outputs_held (mb, wb, WEIGHT_DTYPE_F32, r, "b, generic beside a");
        s_check_outputs_held (mc, wc, WEIGHT_DTYPE_F32, r, "c, specialised beside a");
    }
    backend_cuda_iface.destroy (&mc);
    backend_cuda_iface.destroy (&mb);
    backend_cuda_iface.destroy (&ma);
    weights_destroy (&wa);
    weights_destroy (&wb);
    weights_destroy (&wc);
}
END_TEST

/* The shapes the other kernels are tested on; 4097x129 (2.1 MB) is over the budget and refused. */
START_TEST (persistent_single_layers)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t shapes[][2] = { { 1, 1 }, { 33, 31 }, { 597, 293 }, { 512, 256 }, { 4097, 129 }, { 64, 256 }, { 3, 8192 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const uint32_t sizes[2] = { shapes[s][1], shapes[s][0] };
        const activation_t act = (activation_t) (s % 4);
        weights_t *w = weights_random (sizes, &act, 1, rng_next (&s_seed));
        char label[64];
        snprintf (label, sizeof label, "%ux%u act %s", shapes[s][0], shapes[s][1], activation_name (act));
        bool any = false;
        for (size_t t = 0; t < TUNINGS; t++)
            any |= s_check_persistent (w, &s_tunings[t], 7, label);
        ck_assert_msg (any == (shapes[s][0] != 4097), "%s: %s", label, any ? "loaded, expected a refusal" : "refused");
        weights_destroy (&w);
    }
}
END_TEST

START_TEST (persistent_chains)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t demo[] = { 512, 256, 64, 1 }, odd[] = { 293, 597, 31, 33, 1 }, tiny[] = { 1, 1, 1 };
    const uint32_t wide[] = { 64, 512, 256, 2 };   /* a split layer after the first: the scatter path */
    /* narrow inputs: layer 0 split by outputs, kept in the workers for layer 1 (split by columns) */
    const uint32_t narrow[] = { 5, 9001, 3, 7 }, one[] = { 1, 30001, 1 };
    const activation_t demo_acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    const activation_t odd_acts[] = { ACTIVATION_TANH, ACTIVATION_RELU, ACTIVATION_SIGMOID, ACTIVATION_NONE };
    const struct { const uint32_t *sizes; const activation_t *acts; size_t layers; const char *label; } nets[] = {
        { demo, demo_acts, 3, "512-256-64-1" }, { odd, odd_acts, 4, "293-597-31-33-1" },
        { tiny, demo_acts, 2, "1-1-1" }, { wide, odd_acts, 3, "64-512-256-2" }, { narrow, odd_acts, 3, "5-9001-3-7" },
        { one, odd_acts, 2, "1-30001-1" } };
    for (size_t n = 0; n < sizeof nets / sizeof nets[0]; n++) {
        weights_t *w = weights_random (nets[n].sizes, nets[n].acts, nets[n].layers, rng_next (&s_seed));
        ck_assert_msg (s_check_persistent (w, &s_default_tuning, 7, nets[n].label), "%s refused", nets[n].label);
        for (size_t t = 1; t < TUNINGS; t++)
            s_check_persistent (w, &s_tunings[t], 7, nets[n].label);
        weights_destroy (&w);
    }
}
END_TEST

/* Weights held in f16 and bf16 (_i: 0 f16, 1 bf16): tick_mlp's shape, odd chains and single
 * layers under every tuning, each output of rows 1, 3 and 7 within the bound that adds the weights'
 * rounding to the f32 weights' reference (tol_mlp_held), fresh inputs each round; then every batch
 * size 1..9 of tick_mlp's shape. */
START_TEST (persistent_half_weights)
{
    printf ("test %s %d\n", __func__, _i);   /* progress, for a run that times out */
    fflush (stdout);
    const weight_dtype_t held = _i == 0 ? WEIGHT_DTYPE_F16 : WEIGHT_DTYPE_BF16;
    const uint32_t demo[] = { 512, 256, 64, 1 }, a[] = { 37, 19, 5 }, b[] = { 293, 61, 3 };
    const uint32_t odd[] = { 293, 597, 31, 33, 1 }, wide[] = { 64, 512, 256, 2 };
    const uint32_t s1[] = { 1, 1 }, s2[] = { 31, 33 }, s3[] = { 293, 597 }, s4[] = { 8192, 3 }, s5[] = { 129, 300 };
    const activation_t demo_acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    const activation_t odd_acts[] = { ACTIVATION_TANH, ACTIVATION_RELU, ACTIVATION_SIGMOID, ACTIVATION_NONE };
    const struct { const uint32_t *sizes; const activation_t *acts; size_t layers; const char *label; } nets[] = {
        { demo, demo_acts, 3, "512-256-64-1" }, { a, odd_acts, 2, "37-19-5" }, { b, demo_acts, 2, "293-61-3" },
        { odd, odd_acts, 4, "293-597-31-33-1" }, { wide, odd_acts, 3, "64-512-256-2" },
        { s1, demo_acts + 2, 1, "1x1" }, { s2, odd_acts, 1, "33x31" }, { s3, odd_acts + 1, 1, "597x293" },
        { s4, odd_acts + 2, 1, "3x8192" }, { s5, demo_acts, 1, "300x129" } };
    for (size_t n = 0; n < sizeof nets / sizeof nets[0]; n++) {
        weights_t *w = weights_random (nets[n].sizes, nets[n].acts, nets[n].layers, rng_next (&s_seed));
        char label[96];
        snprintf (label, sizeof label, "%s, %s weights", nets[n].label, weight_dtype_name (held));
        ck_assert_msg (s_check_persistent_held (w, held, &s_default_tuning, 7, label), "%s refused", label);
        for (size_t t = 0; t < TUNINGS; t++)
            s_check_persistent_held (w, held, &s_tunings[t], 7, label);
        weights_destroy (&w);
    }
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (demo, acts, 3, rng_next (&s_seed));
    model_config_t cfg = s_pconfig (9, 1000);
    cfg.weight_dtype = held;
    char err[1024] = "";
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    for (uint32_t rows = 1; rows <= 9; rows++)
        s_check_outputs_held (m, w, held, rows, "every rows");
    backend_cuda_iface.destroy (&m);
    weights_destroy (&w);
}
END_TEST

/* What half precision refuses: a weight f16 cannot hold (named: tensor, index, value), every CUDA
 * kernel but persistent (named), the CPU backend; and "auto" with f16 measures persistent alone. */
START_TEST (persistent_half_refusals)
{
    printf ("test %s\n", __func__);
    fflush (stdout);
    const uint32_t sizes[] = { 37, 19, 5 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 2, rng_next (&s_seed));
    w->layers[1].weight[2 * 19 + 7] = 70000.0f;
    model_config_t cfg = s_pconfig (3, 1000);
    cfg.weight_dtype = WEIGHT_DTYPE_F16;
    cfg.layer_count = 2;
    strcpy (cfg.layers[0].weight, "0.weight");
    strcpy (cfg.layers[1].weight, "2.weight");
    char err[1024] = "";
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_ptr_null (m);
    ck_assert_msg (strstr (err, "model \"gpu-persistent\": weight_dtype \"f16\": weight \"2.weight\" [2][7] = 70000 "
                                "does not fit in f16 (largest finite 65504)"), "%s", err);
    /* bf16 holds it (its range is f32's); within its bound */
    ck_assert (s_check_persistent_held (w, WEIGHT_DTYPE_BF16, &s_default_tuning, 3, "bf16 with a weight of 70000"));
    w->layers[1].weight[2 * 19 + 7] = 65504.0f;   /* the largest f16: held */
    ck_assert (s_check_persistent_held (w, WEIGHT_DTYPE_F16, &s_default_tuning, 3, "f16 with a weight of 65504"));
    weights_destroy (&w);
    /* every other CUDA kernel refuses f16 and bf16, naming itself */
    const uint32_t demo[] = { 512, 256, 64, 1 };
    const activation_t dacts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    w = weights_random (demo, dacts, 3, rng_next (&s_seed));
    for (int k = 0; k < CUDA_KERNEL_COUNT; k++) {
        if (k == CUDA_KERNEL_PERSISTENT)
            continue;
        for (int d = WEIGHT_DTYPE_F16; d <= WEIGHT_DTYPE_BF16; d++) {
            model_config_t c = s_config ((cuda_kernel_t) k, true, 2);
            c.weight_dtype = (weight_dtype_t) d;
            char want[256];
            snprintf (want, sizeof want, "weight_dtype \"%s\": kernel \"%s\" holds weights in f32 only; use "
                      "\"kernel\": \"persistent\"", weight_dtype_name ((weight_dtype_t) d), cuda_kernel_name ((cuda_kernel_t) k));
            m = backend_cuda_iface.load (w, &c, 0, err, sizeof err);
            ck_assert_ptr_null (m);
            ck_assert_msg (strstr (err, want), "kernel %s: %s", cuda_kernel_name ((cuda_kernel_t) k), err);
        }
    }
    /* auto with f16: the CPU's loop (it holds f16 since issue 36) and the persistent kernel are
     * measured; every other kernel is noted as not loaded; the faster of the two wins, in f16 */
    model_config_t a = s_config (CUDA_KERNEL_WARP, true, 2);
    a.backend = BACKEND_AUTO;
    a.weight_dtype = WEIGHT_DTYPE_F16;
    autoselect_candidate_t c[16];
    size_t n = 0;
    const backend_iface_t *chosen = autoselect_choose (w, &a, 0, c, 16, &n, err, sizeof err);
    ck_assert_msg (chosen == &backend_cuda_iface || chosen == &backend_cpu_iface, "%s", err);
    if (chosen == &backend_cuda_iface)
        ck_assert_int_eq (a.kernel, CUDA_KERNEL_PERSISTENT);
    ck_assert_int_eq (a.weight_dtype, WEIGHT_DTYPE_F16);
    size_t measured = 0;
    for (size_t i = 0; i < n; i++) {
        if (!c[i].note[0]) {
            bool cpu = !strcmp (c[i].backend, "cpu");
            ck_assert_str_eq (c[i].kernel, cpu ? "loop" : "persistent");
            measured++;
        } else
            ck_assert_msg (strstr (c[i].note, "not loaded: ") && strstr (c[i].note, "f32 only"), "%s %s: %s",
                           c[i].backend, c[i].kernel, c[i].note);
    }
    ck_assert_uint_eq (measured, 2);
    /* auto with f32 never holds half weights: whatever it picks, the plan (if persistent) is f32 */
    a = s_config (CUDA_KERNEL_PERSISTENT, true, 2);
    a.backend = BACKEND_AUTO;
    a.kernel_given = true;
    chosen = autoselect_choose (w, &a, 0, c, 16, &n, err, sizeof err);
    ck_assert_msg (chosen != NULL, "%s", err);
    ck_assert_int_eq (a.weight_dtype, WEIGHT_DTYPE_F32);
    weights_destroy (&w);
}
END_TEST

START_TEST (persistent_every_batch_size)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t demo[] = { 512, 256, 64, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    const uint32_t rows[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
    s_check_model (demo, acts, 3, CUDA_KERNEL_PERSISTENT, true, rows, 9, "every rows");
}
END_TEST

START_TEST (persistent_refuses_over_budget)
{
    printf ("test %s\n", __func__);   /* progress, for a run that times out */
    fflush (stdout);
    const uint32_t sizes[] = { 1024, 1024, 1024, 1 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 3, 11);
    model_config_t cfg = s_pconfig (1, 1000);
    char err[1024] = "";
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_ptr_null (m);
    ck_assert_msg (strstr (err, "model \"gpu-persistent\": kernel \"persistent\": the weights need ")
                       && strstr (err, "KiB on chip, the cluster holds ") && strstr (err, "(8 blocks x 227 KiB")
                       && strstr (err, "; use kernel \"fused\" or \"warp\""),
                   "%s", err);
    weights_destroy (&w);
}
END_TEST

/* The planner takes every model whose raw fp32 weights and biases are within the budget it reports
 * (the largest cluster's shared memory): two- and three-layer nets of growing width, narrow and wide
 * inputs (a narrow input splits by outputs, kept in the workers for the next layer; one hidden layer
 * tens of thousands wide between 1 or 5 inputs and 1 or 2 outputs streamed into them, the outputs'
 * first passes in registers at 1.0 x), at 0.3, 0.6, 0.9 and 1.0 x budget, each loaded and every
 * output of rows 1 and 3 within its bound; the issue's 293-597-31-3 at max_rows 16 (its partials of 16 rows
 * do not fit beside the leader's weights: it runs in chunks of rows, so rows 16 checks the
 * chunks); past what the whole cluster holds (shared memory and every register bank) refused,
 * with the message. */
START_TEST (persistent_accepts_within_budget)
{
    printf ("test %s\n", __func__);
    fflush (stdout);
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_TANH, ACTIVATION_NONE };
    char err[1024] = "";
    /* the budget, from a small model's plan */
    const uint32_t small[] = { 8, 8 };
    weights_t *w = weights_random (small, acts + 2, 1, 1);
    model_config_t cfg = s_pconfig (3, 1000);
    backend_model_t *m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    const uint64_t budget = cuda_model_persistent_plan (m)->budget_bytes;
    backend_cuda_iface.destroy (&m);
    weights_destroy (&w);
    ck_assert_uint_ge (budget, 512u << 10);
    const struct { uint32_t in, out, hidden; double upto; } fams[] = {
        { 512, 1, 1, 1.0 }, { 293, 3, 1, 1.0 }, { 37, 5, 1, 1.0 }, { 1000, 7, 1, 1.0 }, { 64, 2, 2, 1.0 },
        { 293, 3, 2, 1.0 }, { 5, 2, 1, 1.0 }, { 1, 1, 1, 1.0 } };
    const double fractions[] = { 0.3, 0.6, 0.9, 1.0 };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++)
        for (size_t k = 0; k < sizeof fractions / sizeof fractions[0] && fractions[k] <= fams[f].upto; k++) {
            /* the widest N with raw fp32 weights (and biases) within the fraction of the budget */
            const double limit = fractions[k] * (double) budget;
            uint32_t N = 1;
            for (uint32_t step = 1u << 16; step; step >>= 1) {
                const uint64_t n = N + step;
                const uint64_t raw = 4 * (fams[f].hidden == 1 ? n * (fams[f].in + 1) + fams[f].out * (n + 1)
                                                                : n * (fams[f].in + 1) + n * (n + 1) + fams[f].out * (n + 1));
                if ((double) raw <= limit)
                    N = (uint32_t) n;
            }
            uint32_t sizes[4] = { fams[f].in, N, N, fams[f].out };
            if (fams[f].hidden == 1)
                sizes[2] = fams[f].out;
            w = weights_random (sizes, acts, fams[f].hidden + 1, rng_next (&s_seed));
            char label[128];
            snprintf (label, sizeof label, "%u-%u%s-%u (%.0f%% of the budget of %llu KiB)", fams[f].in, N,
                      fams[f].hidden == 2 ? "-N" : "", fams[f].out, 100 * fractions[k], (unsigned long long) (budget >> 10));
            ck_assert_msg (s_check_persistent (w, &s_default_tuning, 3, label), "%s refused", label);
            weights_destroy (&w);
        }
    const uint32_t issue[] = { 293, 597, 31, 3 };
    w = weights_random (issue, acts, 3, rng_next (&s_seed));
    ck_assert_msg (s_check_persistent (w, &s_default_tuning, 16, "293-597-31-3 at max_rows 16"), "refused");
    cfg = s_pconfig (16, 1000);
    m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    ck_assert_uint_lt (cuda_model_persistent_plan (m)->chunk_rows, 16);   /* the rows-16 check ran in chunks */
    for (uint32_t rows = 1; rows <= 16; rows++)
        s_check_outputs (m, w, rows, "293-597-31-3, every rows up to 16");
    backend_cuda_iface.destroy (&m);
    weights_destroy (&w);
    /* more than the whole cluster holds, every register bank included: refused, with the message */
    const uint64_t over = budget + budget / 2;
    const uint32_t wide[] = { 512, (uint32_t) (over / (4 * 513)), 1 };
    w = weights_random (wide, acts, 2, rng_next (&s_seed));
    cfg = s_pconfig (3, 1000);
    m = s_pload (w, &cfg, err, sizeof err);
    ck_assert_ptr_null (m);
    ck_assert_msg (strstr (err, "kernel \"persistent\": the weights need ") && strstr (err, " KiB on chip, the cluster holds ")
                       && strstr (err, "use kernel \"fused\" or \"warp\""), "%s", err);
    printf ("over the budget: %s\n", err);
    weights_destroy (&w);
}
END_TEST

int main (void)
{
    if (!s_cuda_start ())
        return 0;
    Suite *s = suite_create ("cuda_persistent");
    TCase *tp = tcase_create ("persistent");
    tcase_set_timeout (tp, 600);
    tcase_add_test (tp, persistent_specialised);
    tcase_add_test (tp, persistent_specialised_next_to_resident);
    tcase_add_test (tp, persistent_single_layers);
    tcase_add_test (tp, persistent_chains);
    tcase_add_test (tp, persistent_every_batch_size);
    tcase_add_loop_test (tp, persistent_half_weights, 0, 2);
    tcase_add_test (tp, persistent_half_refusals);
    tcase_add_test (tp, persistent_refuses_over_budget);
    tcase_add_test (tp, persistent_accepts_within_budget);
    suite_add_tcase (s, tp);
    return tu_run_suite (s);
}

#else

#include "testutil.h"

int main (void) { return tu_skip_without_cuda (); }

#endif
