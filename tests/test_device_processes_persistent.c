/* A persistent MLP in a device process (server.gpu_processes, serving/devices.h), over the socket,
 * with sigserve-test (the build with the test hooks: POST /debug/fault, and the persistent kernel's
 * mailbox emulated on the CPU, tests/mailbox_backend.c). Each case runs on a GPU host (skipped
 * elsewhere, saying why) and has a CPU twin with the mailbox emulated (CI):
 *   - run by the front through its mailbox in the shared region: one request at a time, every one
 *     inline (counted) with outputs in bound;
 *   - two fronts, one running requests inline while the other hands them to the worker, both
 *     publishing into the same mailbox: every request answered once, in bound;
 *   - a trap while the front waits on the mailbox: that request answered UNAVAILABLE once, the
 *     process started again, inline again;
 *   - server.standby: the spare loads the model and parks its kernel; a trap promotes it, its
 *     kernel launched again, the front inline again;
 *   - every persistent model of a configuration runs a kernel specialised for its shapes, in a
 *     device process and in the server's own; one a reload adds, the generic kernel until its
 *     device process starts again.
 * test_device_processes.c has a device process answering, lost and started again
 * (tests/device_processes_tests.h: the server, the load loop and the helpers the two share). */
#define _GNU_SOURCE
#include "device_processes_tests.h"

/* A persistent model in a device process, the front free to run any request inline: tick_mlp on
 * GPU 0's persistent kernel, or (no GPU needed: CI) on the CPU with its mailbox emulated by
 * sigserve-test (tests/mailbox_backend.c: a thread plays the kernel), in the test's CPU device
 * process. Its counters' labels, and the fault that stops its kernel. */
typedef struct {
    bool gpu;
    const char *instance_metric, *trap, *device, *placement, *kernel;
    const char *backend;                /* the model's keys that put it there */
    const char *specialised, *generic;  /* its kernel's names with and without a specialised module */
} box_kind_t;

static const box_kind_t s_box_gpu = {
    true, "sigserve_instance_requests_total{model=\"box\",instance=\"0\",device=\"cuda:0\"}", "device=0&kind=trap",
    "0", "1 instance(s) [gpu 0 (device process)", "kernel persistent",
    "\"backend\": \"cuda\", \"kernel\": \"persistent\", \"devices\": [0],", "persistent-nvrtc", "persistent" };
static const box_kind_t s_box_emulated = {
    false, "sigserve_instance_requests_total{model=\"box\",instance=\"0\",device=\"cpu\"}", "device=cpu&kind=trap",
    "cpu (test)", "1 instance(s) [cpu (device process)", "kernel mailbox-emulated", "\"backend\": \"cpu\",",
    "mailbox-emulated-nvrtc", "mailbox-emulated" };

#define INLINE_METRIC "sigserve_inline_total{model=\"box\"}"

static bool s_box_skip (const box_kind_t *k, const char *test)
{
    if (!k->gpu || s_gpus () >= 1)
        return false;
    printf ("%s: skipped: no GPU here (its CPU twin runs the same with the mailbox emulated)\n", test);
    return true;
}

static void s_start_box (server_t *s, const box_kind_t *k, bool two_fronts)
{
    s_two_fronts = two_fronts;
    s_mailbox = !k->gpu;
    s_server_extra = ", \"inline_us\": 10000";
    snprintf (s_models, sizeof s_models, "%s", s_model ("box", k->backend));
    s_start (s, s_models, !k->gpu);
    s_two_fronts = s_mailbox = false;
    s_server_extra = "";
    ck_assert (s_log_has (s, k->kernel));
    ck_assert (s_log_has (s, k->placement));
    ck_assert (s_log_has (s, "(run on the front when idle)"));
}

/* After N requests sent one at a time (the counters at BEFORE): every one computed once, inline or by
 * the worker, and some inline (the path under test: their outputs were checked). Not all: a request
 * that arrives after a turn of three or more messages is taken as load and goes to the worker
 * (front/intake.c: inline_budget_ns), as does one the turn's inline budget (inline_us) no longer
 * covers; how often depends on how the machine schedules the three processes (here, when only the
 * first message of a turn could run inline: 475-500 of 500 quiet, 240 of 300 beside two fuzzers). */
static void s_assert_mostly_inline (server_t *s, const box_kind_t *k, double before, double before_worker, uint32_t n)
{
    const double inlined = s_metric (s, INLINE_METRIC) - before, worker = s_metric (s, k->instance_metric) - before_worker;
    printf ("persistent in a device process (%s), one at a time: %.0f of %u inline, %.0f by the worker\n", k->device,
            inlined, n, worker);
    ck_assert_double_eq (inlined + worker, n);
    ck_assert_double_gt (inlined, 0);
}

/* The box model's requests so far: run inline by a front (*INLINED) and by its worker (*WORKER),
 * printed after WHAT. */
static void s_box_split (server_t *s, const box_kind_t *k, const char *what, double *inlined, double *worker)
{
    *inlined = s_metric (s, INLINE_METRIC);
    *worker = s_metric (s, k->instance_metric);
    printf ("persistent in a device process (%s), %s: %.0f inline, %.0f by the worker\n", k->device, what, *inlined,
            *worker);
}

static void s_box_runs_inline (const box_kind_t *k)
{
    server_t s;
    s_start_box (&s, k, false);
    /* one at a time: nothing queued at each arrival, so the front publishes every one itself */
    load_t l = { .models = { "box" }, .model_count = 1, .total = 500, .window = 1, .check_outputs = true };
    s_load (&s, &l);
    ck_assert_uint_eq (l.ok[0], 500);
    s_assert_mostly_inline (&s, k, 0, 0, 500);
    /* a window of 32: still one front, inline or handed to the worker when the front took several
     * messages in a turn: both publish into the same mailbox */
    load_t w = { .models = { "box" }, .model_count = 1, .total = 3000, .check_outputs = true };
    s_load (&s, &w);
    ck_assert_uint_eq (w.ok[0], 3000);
    double inlined, worker;
    s_box_split (&s, k, "window 32", &inlined, &worker);
    ck_assert_double_eq (inlined + worker, 3500);
    ck_assert_int_eq (s_stop (&s), 0);
}

static void s_box_two_fronts (const box_kind_t *k)
{
    server_t s;
    s_start_box (&s, k, true);
    /* requests alternate between the two fronts' endpoints, 32 in flight: a front finding the
     * instance claimed by the other hands its request to the worker, which waits for the claim */
    load_t l = { .models = { "box" }, .model_count = 1, .total = 6000, .both_fronts = true, .check_outputs = true };
    s_load (&s, &l);
    ck_assert_uint_eq (l.ok[0], 6000);
    double inlined, worker;
    s_box_split (&s, k, "two fronts", &inlined, &worker);
    ck_assert_double_eq (inlined + worker, 6000);
    ck_assert_double_gt (inlined, 0);
    ck_assert_double_gt (worker, 0);
    ck_assert_int_eq (s_stop (&s), 0);
}

static void s_box_trap (const box_kind_t *k)
{
    server_t s;
    s_start_box (&s, k, false);
    const pid_t first = s_device_pid (&s, k->device);
    load_t l = { .models = { "box" }, .model_count = 1, .total = 1000, .window = 1, .fault_after = 300,
                 .fault = k->trap, .check_outputs = true };
    s_load (&s, &l);
    printf ("trap under inline requests (%s): %u OK, %u UNAVAILABLE (%u held, %u refused)\n", k->device, l.ok[0],
            l.unavailable[0], l.unavailable_lost, l.unavailable_admission);
    ck_assert_uint_ge (l.ok[0], 300);
    ck_assert_uint_eq (l.unavailable_lost + l.unavailable_admission, l.unavailable[0]);
    ck_assert_uint_le (l.unavailable_lost, 1);      /* one in flight at most: the one the front waited on */
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_ne (s_device_pid (&s, k->device), first);
    ck_assert (s_log_has (&s, "back after"));
    const double before = s_metric (&s, INLINE_METRIC), before_worker = s_metric (&s, k->instance_metric);
    load_t again = { .models = { "box" }, .model_count = 1, .total = 300, .window = 1, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0], 300);
    s_assert_mostly_inline (&s, k, before, before_worker, 300);     /* inline again, on the new mailbox */
    ck_assert_int_eq (s_stop (&s), 0);
}

/* server.standby: the spare loads the model and parks its kernel (none runs there while it waits);
 * a trap promotes it: the kernel launched again there, the front inline again on its mailbox. */
static void s_box_standby (const box_kind_t *k)
{
    server_t s;
    s_start_box (&s, k, false);
    char ready[96];
    snprintf (ready, sizeof ready, "device %s: standby process", k->device);
    for (int waited = 0; waited < 60000 && !s_log_has (&s, "(1 of 1 model(s) loaded there"); waited += 20)
        usleep (20 * 1000);
    ck_assert_msg (s_log_has (&s, "(1 of 1 model(s) loaded there"), "no standby with the model (log: %s)", s.log);
    ck_assert (s_log_has (&s, "(standby): model \"box\" loaded, its resident kernel(s) parked until it is promoted"));
    ck_assert (s_log_has (&s, ready));
    const pid_t first = s_device_pid (&s, k->device);
    load_t l = { .models = { "box" }, .model_count = 1, .total = 1000, .window = 1, .fault_after = 300,
                 .fault = k->trap, .check_outputs = true };
    s_load (&s, &l);
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    printf ("standby, trap under inline requests (%s): %u OK, %u UNAVAILABLE; recovery %.2f ms\n", k->device, l.ok[0],
            l.unavailable[0], s_metric (&s, k->gpu ? "sigserve_device_recovery_seconds{device=\"cuda:0\"}"
                                                    : "sigserve_device_recovery_seconds{device=\"cpu\"}") * 1e3);
    ck_assert_int_ne (s_device_pid (&s, k->device), first);
    ck_assert (s_log_has (&s, "(the standby, promoted)"));
    ck_assert (s_log_has (&s, "promoted, 1 model(s) rejoined (1 loaded there before)"));
    const double before = s_metric (&s, INLINE_METRIC), before_worker = s_metric (&s, k->instance_metric);
    load_t again = { .models = { "box" }, .model_count = 1, .total = 300, .window = 1, .check_outputs = true };
    s_load (&s, &again);
    ck_assert_uint_eq (again.ok[0], 300);
    s_assert_mostly_inline (&s, k, before, before_worker, 300);     /* inline again, on the kernel launched again */
    ck_assert_int_eq (s_stop (&s), 0);
}

/* Model NAME's kernel as /models lists it into KERNEL ("" when it is not listed). */
static void s_kernel_of (server_t *s, const char *name, char *kernel, size_t len)
{
    static char body[1 << 16];
    char key[160];
    kernel[0] = '\0';
    snprintf (key, sizeof key, "\"name\":\"%s\"", name);
    const char *at = s_http (s->http_port, "GET", "/models", body, sizeof body) == 200 ? strstr (body, key) : NULL;
    const char *k = at ? strstr (at, "\"kernel\":\"") : NULL;
    if (k) {
        k += strlen ("\"kernel\":\"");
        const char *end = strchr (k, '"');
        snprintf (kernel, len, "%.*s", end ? (int) (end - k) : 0, k);
    }
}

/* A model of tick_mlp's file with the dense chain of LAYERS (tensor name prefixes "0", "2", "4"),
 * the last without activation: other shapes from the same file. */
static const char *s_chain (const char *name, const char *extra, const char *const *layers, int count)
{
    static char m[3][8192];
    static int k;
    k = (k + 1) % 3;
    char chain[1024] = "";
    for (int i = 0; i < count; i++)
        snprintf (chain + strlen (chain), sizeof chain - strlen (chain),
                  "%s{ \"weight\": \"%s.weight\", \"bias\": \"%s.bias\", \"activation\": \"%s\" }", i ? ", " : "",
                  layers[i], layers[i], i + 1 < count ? "relu" : "none");
    snprintf (m[k], sizeof m[k],
              "{ \"name\": \"%s\", \"weights\": \"%s\", \"max_rows\": 8, \"max_queue_us\": 60000000, %s \"layers\": [ %s ] }",
              name, s_tick_path, extra, chain);
    return m[k];
}

#define ASSERT_KERNEL(s, name, want)                                                                                   \
    do {                                                                                                               \
        char got_[64];                                                                                                 \
        s_kernel_of ((s), (name), got_, sizeof got_);                                                                  \
        ck_assert_msg (strcmp (got_, (want)) == 0, "model %s: kernel \"%s\", expected \"%s\" (log: %s)", (name), got_,  \
                       (want), (s)->log);                                                                              \
    } while (0)

/* N requests of MODEL, a window of 32 (INPUTS features, OUTPUTS outputs: 0, tick_mlp's), every one
 * answered OK (CHECK: within the float64 reference's bound; tick_mlp's chain only). */
static void s_serve_ok (server_t *s, const char *model, uint32_t n, uint32_t inputs, uint32_t outputs, bool check)
{
    load_t l = { .models = { model }, .model_count = 1, .total = n, .inputs = inputs, .outputs = outputs,
                 .check_outputs = check };
    s_load (s, &l);
    ck_assert_uint_eq (l.ok[0], n);
}

/* Every persistent model of a configuration runs a kernel specialised for its shapes: each one's
 * module is compiled and loaded before the first kernel is resident (model_prepare), where before
 * only the first model loaded got one (a module load next to a resident kernel waits forever).
 * A model of new shapes added by a reload, next to the running kernels, gets the generic kernel
 * (logged), and the specialised one once its device process has started again (every model's
 * module prepared before they rejoin). IN_PROCESS: the models in the server's process (GPU:
 * gpu_processes false; the emulation: CPU models not placed in a device process), up to the reload. */
static void s_box_prepared (const box_kind_t *k, bool in_process)
{
    static const char *const three[] = { "0", "2", "4" }, *const two[] = { "0", "2" }, *const tail[] = { "2", "4" };
    snprintf (s_models, sizeof s_models, "%s, %s", s_chain ("box", k->backend, three, 3),
              s_chain ("box2", k->backend, two, 2));
    s_mailbox = !k->gpu;
    s_server_extra = in_process && k->gpu ? ", \"gpu_processes\": false" : "";
    server_t s;
    s_start (&s, s_models, !k->gpu && !in_process);
    s_mailbox = false;
    s_server_extra = "";
    ASSERT_KERNEL (&s, "box", k->specialised);
    ASSERT_KERNEL (&s, "box2", k->specialised);
    ck_assert (!s_log_has (&s, "no specialised persistent kernel"));
    s_serve_ok (&s, "box", 200, 0, 0, true);
    s_serve_ok (&s, "box2", 200, 0, 64, false);
    /* a reload adds a third shape while the two kernels run */
    static char models[sizeof s_models + 8192];
    snprintf (models, sizeof models, "%s, %s", s_models, s_chain ("box3", k->backend, tail, 2));
    FILE *f = fopen (s.config, "r");
    static char json[32768];
    ck_assert_ptr_nonnull (f);
    const size_t n = fread (json, 1, sizeof json - 1, f);
    fclose (f);
    json[n] = '\0';
    char *list = strstr (json, s_models);
    ck_assert_ptr_nonnull (list);
    static char rewritten[65536];
    snprintf (rewritten, sizeof rewritten, "%.*s%s%s", (int) (list - json), json, models, list + strlen (s_models));
    free (tu_write_file (s.dir, "sigserve.json", rewritten, -1));
    kill (s.pid, SIGHUP);
    char kernel[64] = "";
    for (int waited = 0; waited < 60000 && !kernel[0]; waited += 50) {
        s_kernel_of (&s, "box3", kernel, sizeof kernel);
        if (!kernel[0])
            usleep (50 * 1000);
    }
    ck_assert_msg (s_wait_serving (&s, 60000), "the reload did not serve (log: %s)", s.log);
    ASSERT_KERNEL (&s, "box3", k->generic);
    ASSERT_KERNEL (&s, "box", k->specialised);
    ck_assert (s_log_has (&s, "model \"box3\": not prepared on device"));
    ck_assert (s_log_has (&s, "model \"box3\": no specialised persistent kernel"));
    s_serve_ok (&s, "box3", 200, 256, 0, false);
    if (in_process) {
        ck_assert_int_eq (s_stop (&s), 0);
        return;
    }
    /* the device process starts again: every model's module before any rejoins */
    const pid_t first = s_device_pid (&s, k->device);
    static char body[4096];
    char path[128];
    snprintf (path, sizeof path, "/debug/fault?%s", k->trap);
    ck_assert_int_eq (s_http (s.http_port, "POST", path, body, sizeof body), 200);
    for (int waited = 0; waited < 60000 && s_device_pid (&s, k->device) == first; waited += 50)
        usleep (50 * 1000);
    ck_assert_int_ne (s_device_pid (&s, k->device), first);
    ck_assert_msg (s_wait_serving (&s, 60000), "the models did not come back (log: %s)", s.log);
    ASSERT_KERNEL (&s, "box", k->specialised);
    ASSERT_KERNEL (&s, "box2", k->specialised);
    ASSERT_KERNEL (&s, "box3", k->specialised);
    s_serve_ok (&s, "box", 200, 0, 0, true);
    s_serve_ok (&s, "box3", 200, 256, 0, false);
    ck_assert_int_eq (s_stop (&s), 0);
}

START_TEST (emulated_persistent_models_all_specialised)
{
    s_box_prepared (&s_box_emulated, false);
    s_box_prepared (&s_box_emulated, true);
}
END_TEST

START_TEST (persistent_models_all_specialised)
{
    if (!s_box_skip (&s_box_gpu, "persistent_models_all_specialised")) {
        s_box_prepared (&s_box_gpu, false);
        s_box_prepared (&s_box_gpu, true);
    }
}
END_TEST

START_TEST (emulated_persistent_runs_inline_across_processes) { s_box_runs_inline (&s_box_emulated); }
END_TEST

START_TEST (emulated_persistent_two_fronts_and_the_worker_share_the_mailbox) { s_box_two_fronts (&s_box_emulated); }
END_TEST

START_TEST (emulated_persistent_trap_while_the_front_waits) { s_box_trap (&s_box_emulated); }
END_TEST

/* A trap while the front waits on the emulated kernel's mailbox, the model with a CPU fallback: the
 * request the front ran inline is run again on the fallback (dispatch_admit), as are the requests after
 * it until the process is back: every request answered once, OK, none UNAVAILABLE. */
START_TEST (emulated_persistent_trap_with_a_fallback_loses_nothing)
{
    s_mailbox = true;
    s_server_extra = ", \"inline_us\": 10000";
    snprintf (s_models, sizeof s_models, "%s",
              s_model ("box", "\"backend\": \"cpu\", \"fallback\": { \"backend\": \"cpu\", \"instances\": 1 },"));
    server_t s;
    s_start (&s, s_models, true);
    s_mailbox = false;
    s_server_extra = "";
    ck_assert (s_log_has (&s, "(run on the front when idle)"));
    load_t l = { .models = { "box" }, .model_count = 1, .total = 1000, .window = 1, .fault_after = 300,
                 .fault = s_box_emulated.trap, .check_outputs = true };
    s_load (&s, &l);
    printf ("trap under inline requests with a fallback: %u OK (%u on the fallback), %u UNAVAILABLE\n", l.ok[0],
            l.fallback[0], l.unavailable[0]);
    ck_assert_uint_eq (l.ok[0], 1000);
    ck_assert_uint_eq (l.unavailable[0], 0);
    ck_assert_uint_ge (l.fallback[0], 1);       /* the one the front waited on, at least */
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

/* The emulated persistent model "box" with a CPU fallback and watchdog_ms 1000, SERVER_EXTRA the
 * server's keys, started in the test build's CPU device process. */
static void s_start_box_with_fallback (server_t *s, const char *server_extra)
{
    s_mailbox = true;
    s_server_extra = server_extra;
    snprintf (s_models, sizeof s_models, "%s",
              s_model ("box", "\"backend\": \"cpu\", \"watchdog_ms\": 1000, "
                              "\"fallback\": { \"backend\": \"cpu\", \"instances\": 1 },"));
    s_start (s, s_models, true);
    s_mailbox = false;
    s_server_extra = "";
}

/* A stalled launch with a CPU fallback (dispatch.c: s_stalled): the emulated kernel hung (it answers
 * nothing, as a hung kernel, or a trapped one before the driver reports it), its worker waiting (no
 * front inline), watchdog_ms 1000 and no standby. The requests after the stall's first go to the
 * fallback while the process still runs (logged before its loss), what the stalled instance held is
 * re-run there once the watchdog ends it: every request answered once, OK, within the reference's
 * bound, none UNAVAILABLE. */
START_TEST (emulated_persistent_stall_goes_to_the_fallback)
{
    server_t s;
    s_start_box_with_fallback (&s, ", \"inline_us\": 0, \"standby\": false");
    ck_assert (s_log_has (&s, "kernel mailbox-emulated"));
    /* after the hang, a request every 2 ms whatever the replies (a client's own pace): those of the first
     * stall_ns queue behind the stalled launch, the rest go to the fallback while the process runs */
    load_t l = { .models = { "box" }, .model_count = 1, .total = 600, .fault_after = 300, .pace_us = 2000,
                 .fault = "device=cpu&kind=hang", .check_outputs = true };
    s_load (&s, &l);
    const double rerun = s_metric (&s, "sigserve_lost_requests_total{model=\"box\",result=\"rerun\"}");
    printf ("stalled emulated kernel with a fallback: %u OK (%u on the fallback, %.0f of them re-run), %u UNAVAILABLE\n",
            l.ok[0], l.fallback[0], rerun, l.unavailable[0]);
    ck_assert_uint_eq (l.ok[0], 600);
    ck_assert_uint_eq (l.unavailable[0], 0);
    ck_assert_double_ge (rerun, 1);                          /* the stalled launch's own, at least */
    ck_assert_uint_gt (l.fallback[0], (uint32_t) rerun);     /* the others went there while the process ran */
    const int stalled = s_log_line (&s, "a launch has run over", 0);
    ck_assert_msg (stalled > 0, "no stall line (log: %s)", s.log);
    ck_assert_int_lt (stalled, s_log_line (&s, "its instances are unavailable until it is back", 0));
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

/* The stall switch (placement_devices.c: s_hung): the emulated kernel hung while a front waits on its
 * mailbox inline, the model with a CPU fallback, its device's standby ready and watchdog_ms 1000. The
 * launch is ended long before the watchdog: past the stall switch the process is killed, its standby
 * promoted, and the request the front waited on is run again on the fallback: every request answered
 * once, OK, within the reference's bound, none UNAVAILABLE; the log says the switch, then the
 * promotion, never the watchdog. (No "a launch has run over" line comes first: the only front waits
 * in the stalled launch, so no admission sees it. A loaded machine may stall the promoted emulation
 * too, and switch again: at least one promotion.) */
START_TEST (emulated_persistent_stall_switches_to_the_standby)
{
    server_t s;
    s_start_box_with_fallback (&s, ", \"inline_us\": 10000");
    ck_assert (s_log_has (&s, "(run on the front when idle)"));
    for (int waited = 0; waited < 60000 && !s_log_has (&s, "(1 of 1 model(s) loaded there"); waited += 20)
        usleep (20000);
    ck_assert_msg (s_log_has (&s, "(1 of 1 model(s) loaded there"), "no standby ready (log: %s)", s.log);
    load_t l = { .models = { "box" }, .model_count = 1, .total = 600, .window = 1, .fault_after = 300,
                 .pace_us = 1000, .fault = "device=cpu&kind=hang", .check_outputs = true };
    s_load (&s, &l);
    printf ("stall switch: %u OK (%u on the fallback), %u UNAVAILABLE; back in %.2f ms\n", l.ok[0], l.fallback[0],
            l.unavailable[0], s_metric (&s, "sigserve_device_recovery_seconds{device=\"cpu\"}") * 1e3);
    ck_assert_uint_eq (l.ok[0], 600);
    ck_assert_uint_eq (l.unavailable[0], 0);
    ck_assert_uint_ge (l.fallback[0], 1);       /* the one the front waited on, at least */
    const int switched = s_log_line (&s, "over its stall switch of", 0);
    const int promoted = s_log_line (&s, "(the standby, promoted)", 0);
    ck_assert_msg (switched > 0 && promoted > switched, "switch %d, promotion %d (log: %s)", switched, promoted, s.log);
    ck_assert_msg (!s_log_has (&s, "over watchdog_ms"), "the watchdog ended it (log: %s)", s.log);
    ck_assert_double_ge (s_metric (&s, "sigserve_device_standby_promotions_total{device=\"cpu\"}"), 1);
    ck_assert_msg (s_wait_serving (&s, 60000), "the model did not come back (log: %s)", s.log);
    ck_assert_int_eq (s_stop (&s), 0);
}
END_TEST

START_TEST (emulated_persistent_standby_parks_its_kernel) { s_box_standby (&s_box_emulated); }
END_TEST

START_TEST (persistent_standby_parks_its_kernel)
{
    if (!s_box_skip (&s_box_gpu, "persistent_standby_parks_its_kernel"))
        s_box_standby (&s_box_gpu);
}
END_TEST

START_TEST (persistent_in_a_device_process_runs_inline)
{
    if (!s_box_skip (&s_box_gpu, "persistent_in_a_device_process_runs_inline"))
        s_box_runs_inline (&s_box_gpu);
}
END_TEST

START_TEST (two_fronts_and_the_worker_share_the_mailbox)
{
    if (!s_box_skip (&s_box_gpu, "two_fronts_and_the_worker_share_the_mailbox"))
        s_box_two_fronts (&s_box_gpu);
}
END_TEST

START_TEST (trap_while_the_front_waits_on_the_mailbox)
{
    if (!s_box_skip (&s_box_gpu, "trap_while_the_front_waits_on_the_mailbox"))
        s_box_trap (&s_box_gpu);
}
END_TEST

static Suite *s_suite (void)
{
    Suite *suite = suite_create ("device_processes_persistent");
    TCase *c = s_tcase ("cpu");
    tcase_add_test (c, emulated_persistent_runs_inline_across_processes);
    tcase_add_test (c, emulated_persistent_two_fronts_and_the_worker_share_the_mailbox);
    tcase_add_test (c, emulated_persistent_trap_while_the_front_waits);
    tcase_add_test (c, emulated_persistent_stall_goes_to_the_fallback);
    tcase_add_test (c, emulated_persistent_stall_switches_to_the_standby);
    tcase_add_test (c, emulated_persistent_trap_with_a_fallback_loses_nothing);
    tcase_add_test (c, emulated_persistent_models_all_specialised);
    tcase_add_test (c, emulated_persistent_standby_parks_its_kernel);
    suite_add_tcase (suite, c);
    TCase *g = s_tcase ("gpu");
    tcase_add_test (g, persistent_in_a_device_process_runs_inline);
    tcase_add_test (g, two_fronts_and_the_worker_share_the_mailbox);
    tcase_add_test (g, trap_while_the_front_waits_on_the_mailbox);
    tcase_add_test (g, persistent_models_all_specialised);
    tcase_add_test (g, persistent_standby_parks_its_kernel);
    suite_add_tcase (suite, g);
    return suite;
}

int main (void)
{
    return s_main (s_suite ());
}
