/* serving/placement.h: where a model runs, as an interface, and the one constructor that calls it.
 *   - placement_for: this process's threads without device processes; with them, device processes
 *     for "cuda" and "auto" where the build has a GPU backend, and for CPU models only where the
 *     devices place them (test builds);
 *   - placement_threads' load (model_load) fills the model's description (model_desc_t): sizes,
 *     kernel, selected_by, a timed launch, and capabilities from the type's row and the backend
 *     (MODEL_CAN_STREAM only with the backend's stream entries, MODEL_CAN_INLINE not with
 *     keep_warm_us); model_keeps_streams answers from them;
 *   - how a front runs a model inline (model_inline_t) is decided once, in model_load: never without
 *     server.inline_us or MODEL_CAN_INLINE, else as the placement says (the threads placement: a
 *     front context for a CPU model; the devices placement: the mailbox where the instances share it,
 *     else never);
 *   - placement_devices, in-process against real device processes (this build's sigserve, CPU
 *     models placed there as in sigserve-test): the description crosses the control socket as it is
 *     (the same as the threads placement's for the same configuration, but the timings), requests
 *     admitted on the front come back computed by the device process with the threads model's
 *     outputs, and model_destroy unloads it there;
 *   - model_new with "auto" and device processes measures first (model_plan) and places the model
 *     by what the measurement chose.
 * The test includes serving/model_impl.h: the constructor's result (desc, where, inline_way) is
 * what it checks, before anything serves. */
#define _GNU_SOURCE
#include "serving/devices.h"
#include "serving/dispatch.h"
#include "serving/model_impl.h"
#include "backends/backends.h"
#include "base/log.h"
#include "clock.h"
#include "lstm_reference.h"
#include "reference.h"
#include "rng.h"
#include "st_write.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IN 5
#define OUT 2

static char *s_dir;
static config_t *s_cfg;

enum { MLP, SEQ, WARM, AUTO };

static void s_setup (void)
{
    log_set_level (LOG_LEVEL_WARN);
    s_dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (s_dir);
    const uint32_t sizes[] = { IN, 4, OUT };
    const activation_t acts[] = { ACTIVATION_TANH, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 2, 23);
    st_write_tensor_t t[4] = {
        { "a.weight", 2, { 4, IN }, w->layers[0].weight }, { "a.bias", 1, { 4 }, w->layers[0].bias },
        { "b.weight", 2, { OUT, 4 }, w->layers[1].weight }, { "b.bias", 1, { OUT }, w->layers[1].bias },
    };
    char path[4200], err[1024];
    snprintf (path, sizeof path, "%s/mlp.safetensors", s_dir);
    ck_assert_msg (safetensors_write_f32 (path, t, 4, err, sizeof err) == 0, "%s", err);
    weights_destroy (&w);
    const lstm_shape_t shape = { .layers = 1, .step_size = 3, .hidden = 4, .out = OUT, .window = 4 };
    snprintf (path, sizeof path, "%s/seq.safetensors", s_dir);
    ck_assert_msg (lstm_random_file (path, &shape, 24, err, sizeof err) == 0, "%s", err);
#define MLP_MODEL(name, extra)                                                                                  \
    "   { \"name\": \"" name "\", " extra " \"instances\": 2, \"max_rows\": 4, \"weights\": \"mlp.safetensors\",\n" \
    "     \"layers\": [ { \"weight\": \"a.weight\", \"bias\": \"a.bias\", \"activation\": \"tanh\" },\n"              \
    "                 { \"weight\": \"b.weight\", \"bias\": \"b.bias\" } ] }"
    const char *json =
        "{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:1\"], \"inline_us\": 10000 },\n"
        "  \"models\": [\n" MLP_MODEL ("mlp", "\"backend\": \"cpu\",") ",\n"
        "   { \"name\": \"seq\", \"type\": \"lstm\", \"backend\": \"cpu\", \"max_rows\": 2, \"weights\": \"seq.safetensors\",\n"
        "     \"lstm\": \"lstm.\", \"window\": 4, \"head\": { \"weight\": \"head.weight\", \"bias\": \"head.bias\" } },\n"
        MLP_MODEL ("warm", "\"backend\": \"cpu\", \"keep_warm_us\": 1000,") ",\n"
        MLP_MODEL ("chosen", "\"backend\": \"auto\",") " ] }\n";
    char *config = tu_write_file (s_dir, "placement.json", json, -1);
    s_cfg = config_load (config, err, sizeof err);
    free (config);
    ck_assert_msg (s_cfg != NULL, "%s", err);
}

static void s_teardown (void)
{
    config_destroy (&s_cfg);
    tu_remove_tree (s_dir);
    free (s_dir);
}

/* The device processes of this build's sigserve (any build answers --device-process). */
static devices_t *s_devices (bool cpu_models)
{
    char exe[4200], err[512];
    snprintf (exe, sizeof exe, "%s/sigserve", tu_build_abs ());
    devices_t *d = devices_new (exe, "warn", "text", err, sizeof err);
    ck_assert_msg (d != NULL, "%s", err);
    devices_place_cpu_models (d, cpu_models);
    return d;
}

/* What the server's keys give a model's load (placement.c builds the same from server_config_t). */
static model_env_t s_env (uint32_t inline_us, devices_t *devices)
{
    return (model_env_t) { .lanes = 1, .inline_us = inline_us, .max_message_bytes = s_cfg->server.max_message_bytes,
                           .devices = devices };
}

static model_t *s_load (int which, const placement_t *where, uint32_t inline_us)
{
    char err[1024];
    const model_env_t env = s_env (inline_us, NULL);
    model_t *m = model_load (&s_cfg->models[which], NULL, where, &env, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    return m;
}

/* ---- tests ---- */

START_TEST (placement_for_places_by_the_devices_and_the_backend)
{
    model_config_t cpu = s_cfg->models[MLP], cuda = cpu, automatic = s_cfg->models[AUTO];
    cuda.backend = BACKEND_CUDA;
    ck_assert_ptr_eq (placement_for (NULL, &cpu), &placement_threads);
    ck_assert_ptr_eq (placement_for (NULL, &cuda), &placement_threads);
    ck_assert_ptr_eq (placement_for (NULL, &automatic), &placement_threads);
    devices_t *d = s_devices (false);
    const placement_t *gpu = backends_gpu_built () ? &placement_devices : &placement_threads;
    ck_assert_ptr_eq (placement_for (d, &cpu), &placement_threads);
    ck_assert_ptr_eq (placement_for (d, &cuda), gpu);
    ck_assert_ptr_eq (placement_for (d, &automatic), gpu);
    devices_place_cpu_models (d, true);
    ck_assert_ptr_eq (placement_for (d, &cpu), &placement_devices);
    ck_assert_ptr_eq (placement_for (d, &cuda), gpu);
    /* nothing was placed: no process started */
    devices_info_t info[DEVICES_MAX];
    ck_assert_uint_eq (devices_list (d, info, DEVICES_MAX), 0);
    devices_destroy (&d);
}
END_TEST

START_TEST (threads_placement_load_fills_the_description)
{
    model_t *m = s_load (MLP, &placement_threads, 0);
    const model_desc_t *d = &m->desc;
    ck_assert_ptr_eq (m->where, &placement_threads);
    ck_assert_uint_eq (d->input_size, IN);
    ck_assert_uint_eq (d->output_size, OUT);
    ck_assert_uint_eq (d->window, 0);
    ck_assert_str_eq (d->selected_by, "config");
    ck_assert_str_eq (d->kernel, model_kernel_name (m));
    ck_assert (d->kernel[0]);
    ck_assert_uint_gt (d->launch_ns, 0);
    ck_assert_uint_eq (d->cfg.backend, BACKEND_CPU);
    ck_assert_uint_eq (d->can, MODEL_CAN_BATCH | MODEL_CAN_INLINE);
    ck_assert (!model_keeps_streams (m));
    /* loaded, not serving: every instance has its context, no worker runs, no job pool yet */
    for (uint32_t i = 0; i < m->instance_count; i++) {
        ck_assert_ptr_nonnull (m->instances[i].impl);
        ck_assert (!m->instances[i].started);
        ck_assert_ptr_null (m->instances[i].sh);
    }
    ck_assert_ptr_null (m->lanes[0].jobs);
    ck_assert_ptr_null (m->weights);    /* let go once the load was done with them */
    model_destroy (&m);
    ck_assert_ptr_null (m);
    model_destroy (&m);     /* twice: nothing happens */

    m = s_load (SEQ, &placement_threads, 0);
    ck_assert_uint_eq (m->desc.window, 4);
    ck_assert_uint_eq (m->desc.step_size, 3);
    ck_assert_uint_eq (m->desc.input_size, 12);
    ck_assert_uint_eq (m->desc.can, MODEL_CAN_STREAM | MODEL_CAN_BATCH);   /* whole windows batch; never inline */
    ck_assert (model_keeps_streams (m));
    model_destroy (&m);

    m = s_load (WARM, &placement_threads, 0);
    ck_assert_uint_eq (m->desc.can, MODEL_CAN_BATCH);   /* keep_warm_us: its requests go to the workers */
    model_destroy (&m);
}
END_TEST

START_TEST (inline_way_is_decided_once_at_the_load)
{
    model_t *m = s_load (MLP, &placement_threads, 20);
    ck_assert_int_eq (m->inline_way, INLINE_FRONT_CONTEXT);
    ck_assert_uint_eq (m->inline_ns, 20000);
    ck_assert_ptr_nonnull (m->lanes[0].front_impl);
    /* the placement's way, for what the model can do: the devices placement publishes into a shared
     * mailbox or runs nothing on the front */
    ck_assert_int_eq (placement_devices.inline_way (m, &(model_env_t) { 0 }), INLINE_NEVER);
    m->desc.can |= MODEL_CAN_SHARE_BOX;
    ck_assert_int_eq (placement_devices.inline_way (m, &(model_env_t) { 0 }), INLINE_CLAIM_MAILBOX);
    model_destroy (&m);

    m = s_load (MLP, &placement_threads, 0);     /* server.inline_us 0 */
    ck_assert_int_eq (m->inline_way, INLINE_NEVER);
    ck_assert_uint_eq (m->inline_ns, 0);
    ck_assert_ptr_null (m->lanes[0].front_impl);
    model_destroy (&m);
    const int never[] = { SEQ, WARM };
    for (int k = 0; k < 2; k++) {
        m = s_load (never[k], &placement_threads, 20);
        ck_assert_msg (m->inline_way == INLINE_NEVER, "model %s: inline way %d", model_name (m), m->inline_way);
        ck_assert_ptr_null (m->lanes[0].front_impl);
        model_destroy (&m);
    }
}
END_TEST

/* Admits ROWS rows of FEATURES to M on lane 0 (never inline) and waits for the finished job; the
 * outputs into OUT_. */
static void s_run (model_t *m, uint64_t id, const float *features, uint32_t rows, float *out_)
{
    const frame_t envelope[1] = { { (const uint8_t *) "peer", 4 } };
    const admission_t a = { .envelope = envelope, .envelope_count = 1, .request_id = id, .t_recv = clock_now_ns (),
                            .rows = rows, .features = features, .feature_count = (size_t) rows * IN };
    char err[512] = "";
    ck_assert_msg (dispatch_admit (m, &a, NULL, err, sizeof err) == SIG_OK, "%s", err);
    const uint64_t until = clock_now_ns () + 10000000000ull;
    job_t *j = NULL;
    while (!(j = dispatch_next_done (m, 0)) && clock_now_ns () < until)
        usleep (100);
    ck_assert_msg (j != NULL, "request %llu not answered in 10 s", (unsigned long long) id);
    ck_assert_msg (j->status == SIG_OK, "request %llu: %s", (unsigned long long) id, j->error);
    ck_assert_uint_eq (j->request_id, id);
    memcpy (out_, j->outputs, (size_t) rows * OUT * sizeof (float));
    dispatch_job_return (m, j);
}

START_TEST (devices_placement_describes_and_serves_from_a_device_process)
{
    char err[1024];
    devices_t *d = s_devices (true);
    model_t *here = model_new (&s_cfg->models[MLP], &s_cfg->server, NULL, NULL, err, sizeof err);
    ck_assert_msg (here != NULL, "%s", err);
    model_t *there = model_new (&s_cfg->models[MLP], &s_cfg->server, NULL, d, err, sizeof err);
    ck_assert_msg (there != NULL, "%s", err);
    ck_assert_ptr_eq (here->where, &placement_threads);
    ck_assert_ptr_eq (there->where, &placement_devices);
    /* the description the device process filled, as it is: the same as this process's but the timings */
    ck_assert_mem_eq (&there->desc.cfg, &here->desc.cfg, sizeof here->desc.cfg);
    ck_assert_uint_eq (there->desc.input_size, here->desc.input_size);
    ck_assert_uint_eq (there->desc.output_size, here->desc.output_size);
    ck_assert_uint_eq (there->desc.can, here->desc.can);
    ck_assert_str_eq (there->desc.kernel, here->desc.kernel);
    ck_assert_str_eq (there->desc.isa, here->desc.isa);
    ck_assert_str_eq (there->desc.selected_by, here->desc.selected_by);
    ck_assert_uint_gt (there->desc.launch_ns, 0);
    ck_assert_ptr_eq (there->iface, here->iface);
    /* decided once, by where it runs: the CPU backend's context is the device process's */
    ck_assert_int_eq (here->inline_way, INLINE_FRONT_CONTEXT);
    ck_assert_int_eq (there->inline_way, INLINE_NEVER);
    model_info_t *a = calloc (1, sizeof *a), *b = calloc (1, sizeof *b);
    model_describe (here, a);
    model_describe (there, b);
    ck_assert_str_eq (b->backend, a->backend);
    ck_assert_str_eq (b->kernel, a->kernel);
    ck_assert_str_eq (b->isa, a->isa);
    ck_assert_uint_eq (b->instances, 2);
    for (uint32_t i = 0; i < 2; i++) {
        ck_assert_int_eq (b->instance[i].device, -1);
        ck_assert (b->instance[i].available);
        ck_assert_ptr_null (there->instances[i].impl);     /* no context here: it is the device process's */
        ck_assert (!there->instances[i].started);
    }
    devices_info_t info[DEVICES_MAX];
    ck_assert_uint_eq (devices_list (d, info, DEVICES_MAX), 1);
    ck_assert_int_eq (info[0].device, DEVICE_CPU_TEST);
    ck_assert (info[0].running);
    /* requests admitted here, computed there: the same outputs as this process's model */
    uint64_t seed = 5;
    for (uint64_t id = 1; id <= 20; id++) {
        const uint32_t rows = 1 + (uint32_t) (id % 4);
        float x[4 * IN], want[4 * OUT], got[4 * OUT];
        for (uint32_t k = 0; k < rows * IN; k++)
            x[k] = rng_uniform (&seed, -2, 2);
        s_run (here, id, x, rows, want);
        s_run (there, id, x, rows, got);
        for (uint32_t k = 0; k < rows * OUT; k++)
            ck_assert_msg (fabsf (got[k] - want[k]) <= 1e-6f * (1 + fabsf (want[k])), "request %llu output %u: %g, want %g",
                           (unsigned long long) id, k, got[k], want[k]);
    }
    model_describe (there, b);
    ck_assert_uint_eq (b->instance[0].requests + b->instance[1].requests, 20);
    model_destroy (&there);
    model_destroy (&here);
    ck_assert_uint_eq (devices_list (d, info, DEVICES_MAX), 1);
    ck_assert (info[0].running);    /* unloaded, still there for the next model */
    free (a);
    free (b);
    devices_destroy (&d);
}
END_TEST

START_TEST (auto_with_devices_is_measured_first_and_placed_by_its_choice)
{
    char err[1024];
    devices_t *d = s_devices (false);
    model_t *m = model_new (&s_cfg->models[AUTO], &s_cfg->server, NULL, d, err, sizeof err);
    ck_assert_msg (m != NULL, "%s", err);
    ck_assert_str_eq (m->desc.selected_by, "measurement");
    ck_assert_uint_ge (m->desc.candidate_count, 1);
    ck_assert_uint_ne (m->desc.cfg.backend, BACKEND_AUTO);
    ck_assert_uint_eq (model_config (m)->backend, BACKEND_AUTO);   /* as given */
    /* where it runs follows from what was measured (here the CPU stays in this process, unless a GPU won) */
    ck_assert_ptr_eq (m->where, placement_for (d, &m->desc.cfg));
    model_destroy (&m);
    devices_destroy (&d);
}
END_TEST

static Suite *s_suite (void)
{
    Suite *s = suite_create ("placement");
    TCase *tc = tcase_create ("placement");
    tcase_set_timeout (tc, 120);
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_add_test (tc, placement_for_places_by_the_devices_and_the_backend);
    tcase_add_test (tc, threads_placement_load_fills_the_description);
    tcase_add_test (tc, inline_way_is_decided_once_at_the_load);
    tcase_add_test (tc, devices_placement_describes_and_serves_from_a_device_process);
    tcase_add_test (tc, auto_with_devices_is_measured_first_and_placed_by_its_choice);
    suite_add_tcase (s, tc);
    return s;
}

int main (void) { return tu_run_suite (s_suite ()); }
