/* Operations: what the real sigserve binary tells an operator. /metrics counted exactly and in the
 * strict exposition format, where it reports instances placed (a CPU LSTM on the CPU, pinned only
 * when asked), and its log lines (JSON, whatever the message). Readiness, draining and hot reload:
 * test_ops_lifecycle. Assertions are on counts and order, never on wall-clock time: waits are
 * bounded polls (ops_tests.h). */
#define _GNU_SOURCE
#include "ops_tests.h"

#include "base/log.h"
#include "lstm_reference.h"

#include <cJSON.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- metrics */

START_TEST (metrics_counts_exact_and_exposition_strict)
{
    int zport, hport;
    s_ports (&zport, &hport);
    char models[4096];
    snprintf (models, sizeof models, "%s, %s", s_tick, s_odd);
    /* inline_us 10 ms, so that even a sanitizer's build runs requests on the front when it is idle:
     * the first of the 100 at least (the front idle, nothing queued). */
    char *config = s_config ("metrics.json", zport, hport, ", \"inline_us\": 10000", models);
    pid_t pid = s_spawn (config, NULL, false);
    s_wait_ready (pid, hport);

    /* 100 ok (pipelined), 5 bad_shape and 4 bad_value for tick_mlp, 3 unknown models, 2
     * undecodable payloads, 7 ok for odd. */
    void *s = s_dealer (zport);
    float f[512], g[33];
    for (int i = 0; i < 512; i++)
        f[i] = (float) ((i % 17) - 8) / 8.0f;
    for (int i = 0; i < 33; i++)
        g[i] = (float) i / 33.0f;
    for (uint64_t id = 1000; id < 1100; id++)
        s_send (s, "tick_mlp", f, 512, 1, id);
    for (uint64_t id = 100; id < 105; id++)
        s_send (s, "tick_mlp", f, 511, 1, id);
    float bad[512];
    memcpy (bad, f, sizeof bad);
    bad[3] = NAN;
    for (uint64_t id = 105; id < 109; id++)
        s_send (s, "tick_mlp", bad, 512, 1, id);
    for (uint64_t id = 109; id < 112; id++)
        s_send (s, id == 109 ? "nope" : id == 110 ? "" : "TICK_MLP", f, 512, 1, id);
    const uint8_t junk[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02 };
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq (zmq_send (s, junk, sizeof junk, 0), (int) sizeof junk);
    for (uint64_t id = 2000; id < 2007; id++)
        s_send (s, "odd", g, 33, 1, id);
    int by_status[16] = { 0 };
    for (int i = 0; i < 100 + 5 + 4 + 3 + 2 + 7; i++) {
        Sigserve__V1__Reply *whole;
        Sigserve__V1__InferReply *r = s_recv (s, &whole);
        ck_assert_msg (r != NULL, "reply %d missing", i);
        if (r->request_id >= 1000)
            ck_assert_msg (r->status == SIGSERVE__V1__STATUS__STATUS_OK, "id %llu: status %d: %s",
                           (unsigned long long) r->request_id, r->status, r->error);
        by_status[r->status]++;
        sigserve__v1__reply__free_unpacked (whole, NULL);
    }
    ck_assert_int_eq (by_status[SIGSERVE__V1__STATUS__STATUS_OK], 107);
    zmq_close (s);

    expo_t e;
    s_scrape (hport, &e);
    const double inlined = s_value (&e, "sigserve_inline_total", "model=tick_mlp");
    /* requests_total: exactly these numbers, every status present for every model, model labels
     * only the configured names and "_unknown". */
    static const char *statuses[] = { "ok", "bad_request", "unknown_model", "bad_shape", "bad_value", "overloaded",
                                      "deadline_exceeded", "unavailable", "internal" };
    static const char *names[] = { "_unknown", "tick_mlp", "odd" };
    const double want[3][9] = {
        { 0, 2, 3, 0, 0, 0, 0, 0, 0 },
        { 100, 0, 0, 5, 4, 0, 0, 0, 0 },
        { 7, 0, 0, 0, 0, 0, 0, 0, 0 },
    };
    for (int m = 0; m < 3; m++)
        for (int st = 0; st < 9; st++) {
            char labels[128];
            snprintf (labels, sizeof labels, "model=%s,status=%s", names[m], statuses[st]);
            double v = s_value (&e, "sigserve_requests_total", labels);
            ck_assert_msg (v == want[m][st], "sigserve_requests_total{%s} = %g, expected %g", labels, v, want[m][st]);
        }
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_requests_total"), 27);
    for (size_t i = 0; i < e.n; i++) {
        const char *model = s_label_of (&e.samples[i], "model");
        ck_assert_msg (!model || strcmp (model, "_unknown") == 0 || strcmp (model, "tick_mlp") == 0
                       || strcmp (model, "odd") == 0, "%s has model=\"%s\"", e.samples[i].name, model);
    }
    /* Histograms: consistent everywhere; counts exact where they are known. 3 models x 3 stages
     * + 3 batch-rows histograms. */
    ck_assert_uint_eq (s_check_histograms (&e), 12);
    const char *stages[] = { "queue", "compute", "server" };
    for (int st = 0; st < 3; st++) {
        char labels[128];
        snprintf (labels, sizeof labels, "model=tick_mlp,stage=%s", stages[st]);
        ck_assert_double_eq (s_value (&e, "sigserve_request_duration_seconds_count", labels), 100);
        ck_assert_double_gt (s_value (&e, "sigserve_request_duration_seconds_sum", labels), 0);
        snprintf (labels, sizeof labels, "model=odd,stage=%s", stages[st]);
        ck_assert_double_eq (s_value (&e, "sigserve_request_duration_seconds_count", labels), 7);
        snprintf (labels, sizeof labels, "model=_unknown,stage=%s", stages[st]);
        ck_assert_double_eq (s_value (&e, "sigserve_request_duration_seconds_count", labels), 0);
        ck_assert_double_eq (s_value (&e, "sigserve_request_duration_seconds_sum", labels), 0);
    }
    ck_assert_double_eq (s_value (&e, "sigserve_batch_rows_count", "model=tick_mlp"), 100);
    double rows = s_value (&e, "sigserve_batch_rows_sum", "model=tick_mlp");
    ck_assert_msg (rows >= 100 && rows <= 100 * 8, "batch rows sum %g", rows);
    ck_assert_double_eq (s_value (&e, "sigserve_batch_rows_bucket", "model=odd,le=+Inf"), 7);
    /* Gauges of the models served now, and the rest. */
    ck_assert_double_eq (s_value (&e, "sigserve_queue_depth", "model=tick_mlp"), 0);
    ck_assert_double_eq (s_value (&e, "sigserve_queue_depth", "model=odd"), 0);
    ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=tick_mlp"), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=odd"), 1);
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_model_available"), 2);
    ck_assert_double_eq (s_value (&e, "sigserve_instance_available", "model=tick_mlp,instance=0,device=cpu"), 1);
    /* computed once each: by the worker or on the front */
    ck_assert_double_eq (s_value (&e, "sigserve_instance_requests_total", "model=odd,instance=0,device=cpu")
                         + s_value (&e, "sigserve_inline_total", "model=odd"), 7);
    ck_assert_double_eq (s_value (&e, "sigserve_instance_requests_total", "model=tick_mlp,instance=0,device=cpu")
                         + inlined, 100);
    /* Nothing was refused before running: every model x reason present, all 0. */
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_shed_total"), 3 * 5);
    static const char *reasons[] = { "queue_time", "deadline", "queue_depth", "buffers", "client" };
    for (int m = 0; m < 3; m++)
        for (int k = 0; k < 5; k++) {
            char labels[128];
            snprintf (labels, sizeof labels, "model=%s,reason=%s", names[m], reasons[k]);
            ck_assert_double_eq (s_value (&e, "sigserve_shed_total", labels), 0);
        }
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_inline_total"), 2);     /* the models, not _unknown */
    /* a sample per model and result, 0 with no device process lost */
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_lost_requests_total"), 4);
    ck_assert_double_eq (s_value (&e, "sigserve_lost_requests_total", "model=tick_mlp,result=rerun"), 0);
    ck_assert_double_ge (inlined, 1);
    ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_config_reloads_total", "result=ok"), 0);
    ck_assert_double_eq (s_value (&e, "sigserve_config_reloads_total", "result=error"), 0);
    ck_assert_double_eq (s_value (&e, "sigserve_reply_send_failures_total", ""), 0);
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_build_info"), 1);
    for (size_t i = 0; i < e.n; i++)
        if (strcmp (e.samples[i].name, "sigserve_build_info") == 0) {
            ck_assert_str_eq (s_label_of (&e.samples[i], "version"), SIGSERVE_VERSION);
            ck_assert_ptr_nonnull (s_label_of (&e.samples[i], "cuda"));
            ck_assert_double_eq (e.samples[i].value, 1);
        }
    ck_assert_double_gt (s_value (&e, "process_resident_memory_bytes", ""), 1 << 20);
    ck_assert_double_ge (s_value (&e, "process_cpu_seconds_total", ""), 0);
    ck_assert_double_gt (s_value (&e, "process_start_time_seconds", ""), 1.5e9);
    ck_assert_double_gt (s_value (&e, "process_open_fds", ""), 3);
    const char *types[][2] = {
        { "sigserve_requests_total", "counter" }, { "sigserve_request_duration_seconds", "histogram" },
        { "sigserve_batch_rows", "histogram" }, { "sigserve_queue_depth", "gauge" },
        { "sigserve_model_available", "gauge" }, { "sigserve_config_reloads_total", "counter" },
        { "sigserve_reply_send_failures_total", "counter" }, { "sigserve_build_info", "gauge" },
        { "process_cpu_seconds_total", "counter" }, { "process_resident_memory_bytes", "gauge" },
        { "process_start_time_seconds", "gauge" }, { "sigserve_shed_total", "counter" },
        { "sigserve_inline_total", "counter" }, { "sigserve_lost_requests_total", "counter" },
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        family_t *fam = s_family_find (&e, types[i][0]);
        ck_assert_msg (fam != NULL, "no family %s", types[i][0]);
        ck_assert_str_eq (fam->type, types[i][1]);
    }
    s_expo_free (&e);

    /* Probes, the model list, and what is not there. */
    char body[1024];
    ck_assert_int_eq (s_get_text (hport, "/healthz", body, sizeof body), 200);
    ck_assert_str_eq (body, "ok");
    ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);
    ck_assert_str_eq (body, "ready");
    ck_assert_int_eq (s_get_text (hport, "/nope", NULL, 0), 404);
    ck_assert_int_eq (s_get_text (hport, "/metrics/", NULL, 0), 404);
    http_reply_t r;
    ck_assert_int_eq (s_http (hport, "POST", "/metrics", &r), 0);
    ck_assert_int_eq (r.status, 405);
    ck_assert_str_eq (r.allow, "GET, HEAD");
    s_http_free (&r);
    ck_assert_int_eq (s_http (hport, "DELETE", "/models", &r), 0);
    ck_assert_int_eq (r.status, 405);
    s_http_free (&r);
    ck_assert_int_eq (s_http (hport, "HEAD", "/metrics", &r), 0);
    ck_assert_int_eq (r.status, 200);
    ck_assert_uint_eq (r.len, 0);
    s_http_free (&r);

    ck_assert_int_eq (s_http (hport, "GET", "/models", &r), 0);
    ck_assert_int_eq (r.status, 200);
    ck_assert_str_eq (r.type, "application/json");
    cJSON *j = cJSON_Parse (r.body);
    ck_assert_ptr_nonnull (j);
    cJSON *list = cJSON_GetObjectItemCaseSensitive (j, "models");
    ck_assert_int_eq (cJSON_GetArraySize (list), 2);
    cJSON *tick = cJSON_GetArrayItem (list, 0), *odd = cJSON_GetArrayItem (list, 1);
    ck_assert_str_eq (cJSON_GetObjectItem (tick, "name")->valuestring, "tick_mlp");
    ck_assert_str_eq (cJSON_GetObjectItem (tick, "backend")->valuestring, "cpu");
    ck_assert_str_eq (cJSON_GetObjectItem (tick, "type")->valuestring, "mlp");
    ck_assert_int_eq (cJSON_GetObjectItem (tick, "input_size")->valueint, 512);
    ck_assert_int_eq (cJSON_GetObjectItem (tick, "output_size")->valueint, 1);
    ck_assert_int_eq (cJSON_GetObjectItem (tick, "max_rows")->valueint, 8);
    ck_assert (cJSON_IsTrue (cJSON_GetObjectItem (tick, "available")));
    ck_assert (cJSON_IsArray (cJSON_GetObjectItem (tick, "candidates")));
    ck_assert_str_eq (cJSON_GetObjectItem (odd, "name")->valuestring, "odd");
    ck_assert_int_eq (cJSON_GetObjectItem (odd, "input_size")->valueint, 33);
    ck_assert_int_eq (cJSON_GetObjectItem (odd, "output_size")->valueint, 3);
    cJSON *states = cJSON_GetObjectItem (tick, "instance_states");
    ck_assert_int_eq (cJSON_GetArraySize (states), cJSON_GetObjectItem (tick, "instances")->valueint);
    cJSON *i0 = cJSON_GetArrayItem (states, 0);
    ck_assert_str_eq (cJSON_GetObjectItem (i0, "state")->valuestring, "serving");
    ck_assert_int_eq (cJSON_GetObjectItem (i0, "device")->valueint, -1);
    ck_assert_int_eq (cJSON_GetObjectItem (i0, "requests")->valueint + (int) inlined, 100);
    cJSON_Delete (j);
    s_http_free (&r);

    s_stop (pid);
    free (config);
}
END_TEST

/* ---------------------------------------------------------------- placement */

/* The log line of PATH that contains WHAT, into LINE (without its newline); false when none. */
static bool s_log_line (const char *path, const char *what, char *line, size_t cap)
{
    FILE *f = fopen (path, "r");
    ck_assert_ptr_nonnull (f);
    bool found = false;
    while (!found && fgets (line, (int) cap, f))
        found = strstr (line, what) != NULL;
    fclose (f);
    if (found)
        line[strcspn (line, "\n")] = 0;
    return found;
}

START_TEST (a_cpu_lstm_is_placed_on_the_cpu_and_pinned_only_when_asked)
{
    /* Two CPU LSTM models: "seq" (two instances, no "cpus") and "pinned" ("cpus": [0]). Each
     * instance is on the CPU wherever the server reports it, the load line, /models and /metrics;
     * seq's workers run wherever the process may, pinned's on CPU 0 only. */
    const lstm_shape_t shape = { .layers = 1, .step_size = 3, .hidden = 4, .out = 2, .window = 4 };
    char path[4200], err[512];
    snprintf (path, sizeof path, "%s/seq.safetensors", s_dir);
    ck_assert_msg (lstm_random_file (path, &shape, 31, err, sizeof err) == 0, "%s", err);
    int zport, hport;
    s_ports (&zport, &hport);
    const char *models =
        "{ \"name\": \"seq\", \"type\": \"lstm\", \"backend\": \"cpu\", \"instances\": 2, \"weights\": \"seq.safetensors\", "
        "\"lstm\": \"lstm.\", \"window\": 4, \"head\": { \"weight\": \"head.weight\", \"bias\": \"head.bias\" } }, "
        "{ \"name\": \"pinned\", \"type\": \"lstm\", \"backend\": \"cpu\", \"cpus\": [0], \"weights\": \"seq.safetensors\", "
        "\"lstm\": \"lstm.\", \"window\": 4, \"head\": { \"weight\": \"head.weight\", \"bias\": \"head.bias\" } }";
    char *config = s_config ("lstm.json", zport, hport, "", models);
    char log_path[4200];
    snprintf (log_path, sizeof log_path, "%s/lstm.log", s_dir);
    pid_t pid = s_spawn (config, log_path, false);
    s_wait_ready (pid, hport);

    /* The load lines: "cpu" per instance, "on cpu N" only where "cpus" asks for it. */
    char line[4096];
    ck_assert_msg (s_log_line (log_path, "model seq version 1: ", line, sizeof line), "no load line for seq in %s",
                   log_path);
    ck_assert_msg (strstr (line, ", 2 instance(s) [cpu, cpu]") && !strstr (line, "gpu") && !strstr (line, "on cpu"),
                   "%s", line);
    ck_assert_msg (s_log_line (log_path, "model pinned version 1: ", line, sizeof line), "no load line for pinned");
    ck_assert_msg (strstr (line, ", 1 instance(s) [cpu on cpu 0]") && !strstr (line, "gpu"), "%s", line);

    /* /models: device -1 for every instance. */
    http_reply_t r;
    ck_assert_int_eq (s_http (hport, "GET", "/models", &r), 0);
    ck_assert_int_eq (r.status, 200);
    cJSON *j = cJSON_Parse (r.body);
    ck_assert_ptr_nonnull (j);
    int instances = 0;
    cJSON *m;
    cJSON_ArrayForEach (m, cJSON_GetObjectItem (j, "models")) {
        ck_assert_str_eq (cJSON_GetObjectItem (m, "type")->valuestring, "lstm");
        ck_assert_str_eq (cJSON_GetObjectItem (m, "backend")->valuestring, "cpu");
        cJSON *st;
        cJSON_ArrayForEach (st, cJSON_GetObjectItem (m, "instance_states")) {
            ck_assert_int_eq (cJSON_GetObjectItem (st, "device")->valueint, -1);
            ck_assert_str_eq (cJSON_GetObjectItem (st, "state")->valuestring, "serving");
            instances++;
        }
    }
    ck_assert_int_eq (instances, 3);
    cJSON_Delete (j);
    s_http_free (&r);

    /* One step on each of seq's instances (stream_id % 2), then /metrics: device="cpu" throughout. */
    void *s = s_dealer (zport);
    const float step[3] = { 0.1f, -0.2f, 0.3f };
    for (uint64_t stream = 2; stream <= 3; stream++) {
        Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
        Sigserve__V1__InferRequest inf = SIGSERVE__V1__INFER_REQUEST__INIT;
        inf.request_id = stream;
        inf.model = (char *) "seq";
        inf.features = (float *) step;
        inf.n_features = 3;
        inf.stream_id = stream;
        req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
        req.infer = &inf;
        uint8_t buf[256];
        size_t len = sigserve__v1__request__pack (&req, buf);
        ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
        Sigserve__V1__Reply *whole;
        Sigserve__V1__InferReply *rep = s_recv (s, &whole);
        ck_assert_ptr_nonnull (rep);
        ck_assert_msg (rep->status == SIGSERVE__V1__STATUS__STATUS_OK, "%s", rep->error);
        ck_assert_uint_eq (rep->n_outputs, 2);
        sigserve__v1__reply__free_unpacked (whole, NULL);
    }
    zmq_close (s);
    expo_t e;
    s_scrape (hport, &e);
    for (int i = 0; i < 2; i++) {
        char labels[128];
        snprintf (labels, sizeof labels, "model=seq,instance=%d,device=cpu", i);
        ck_assert_double_eq (s_value (&e, "sigserve_instance_available", labels), 1);
        ck_assert_double_eq (s_value (&e, "sigserve_instance_requests_total", labels), 1);
    }
    ck_assert_double_eq (s_value (&e, "sigserve_instance_available", "model=pinned,instance=0,device=cpu"), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_instance_requests_total", "model=pinned,instance=0,device=cpu"), 0);
    size_t with_device = 0;
    for (size_t i = 0; i < e.n; i++) {
        const char *device = s_label_of (&e.samples[i], "device");
        if (device) {
            ck_assert_msg (strcmp (device, "cpu") == 0, "%s has device=\"%s\"", e.samples[i].name, device);
            with_device++;
        }
    }
    ck_assert_uint_eq (with_device, 2 * 3);     /* available and requests_total, for 3 instances */
    s_expo_free (&e);

    /* Workers: seq's unpinned (the process's own CPUs), pinned's on CPU 0. */
    char own[256], cpus[256];
    snprintf (path, sizeof path, "/proc/%d/status", (int) pid);
    FILE *f = fopen (path, "r");
    own[0] = '\0';
    while (f && fgets (line, sizeof line, f))
        if (strncmp (line, "Cpus_allowed_list:", 18) == 0) {
            snprintf (own, sizeof own, "%s", line + 18 + strspn (line + 18, " \t"));
            own[strcspn (own, "\n")] = 0;
        }
    if (f)
        fclose (f);
    ck_assert_str_ne (own, "");
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf (name, sizeof name, "w%d-seq", i);
        ck_assert_msg (tu_thread_cpus (pid, name, cpus, sizeof cpus) == 0, "no thread %s", name);
        ck_assert_msg (strcmp (cpus, own) == 0, "%s may run on %s, the process on %s", name, cpus, own);
    }
    ck_assert_int_eq (tu_thread_cpus (pid, "w0-pinned", cpus, sizeof cpus), 0);
    ck_assert_str_eq (cpus, "0");
    s_stop (pid);
    free (config);
}
END_TEST

/* ---------------------------------------------------------------- log lines, in process */

static bool s_utf8_valid (const char *s)
{
    const unsigned char *p = (const unsigned char *) s;
    while (*p) {
        int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
        if (n == 0)
            return false;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xc0) != 0x80)
                return false;
        p += n;
    }
    return true;
}

/* Runs the log calls of WHICH with stderr in a file; the lines written. */
static size_t s_capture (void (*which) (void), char lines[][16384], size_t cap)
{
    char path[4096];
    snprintf (path, sizeof path, "%s/capture.log", s_dir);
    int fd = open (path, O_CREAT | O_TRUNC | O_WRONLY, 0600), saved = dup (STDERR_FILENO);
    ck_assert (fd >= 0 && saved >= 0);
    dup2 (fd, STDERR_FILENO);
    which ();
    dup2 (saved, STDERR_FILENO);
    close (saved);
    close (fd);
    FILE *f = fopen (path, "r");
    size_t n = 0;
    while (n < cap && fgets (lines[n], 16384, f)) {
        size_t len = strlen (lines[n]);
        ck_assert_msg (len > 0 && lines[n][len - 1] == '\n', "line %zu cut or without a newline", n);
        n++;
    }
    fclose (f);
    return n;
}

static char s_long_msg[12000];

static void s_log_calls (void)
{
    log_set_level (LOG_LEVEL_DEBUG);
    log_write (LOG_LEVEL_INFO, "quote \" backslash \\ newline \n tab \t bell \x07 del \x7f end");
    log_write (LOG_LEVEL_WARN, "bad utf-8: \xff|\xc3|\xc0\x80|\xed\xa0\x80|\xf4\x90\x80\x80| ok: \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    log_write (LOG_LEVEL_ERROR, "%s", s_long_msg);
    log_write_fields (LOG_LEVEL_INFO, "stats", "\"model\":\"m\",\"requests\":3");
    log_write_fields (LOG_LEVEL_INFO, "bad \"fields\"", "\"model\":oops");
    log_debug ("debug %d", 1);
    log_write_fields (LOG_LEVEL_INFO, "two objects", "\"a\":1},{\"b\":2");
}

START_TEST (log_lines_are_json_whatever_the_message)
{
    /* A message far over the buffers: 'a' then 3-byte characters, so every cut point but one in
     * three falls inside a character. */
    size_t n = 0;
    s_long_msg[n++] = 'a';
    while (n + 3 < sizeof s_long_msg) {
        memcpy (s_long_msg + n, "\xe2\x82\xac", 3);
        n += 3;
    }
    s_long_msg[n] = '\0';
    static char lines[8][16384];

    log_set_format (LOG_FORMAT_JSON);
    size_t count = s_capture (s_log_calls, lines, 8);
    ck_assert_uint_eq (count, 7);
    cJSON *j[7];
    for (size_t i = 0; i < count; i++) {
        j[i] = cJSON_Parse (lines[i]);
        ck_assert_msg (j[i] != NULL, "line %zu is not JSON: %s", i, lines[i]);
        ck_assert (cJSON_IsString (cJSON_GetObjectItem (j[i], "ts")));
        ck_assert (s_utf8_valid (cJSON_GetObjectItem (j[i], "msg")->valuestring));
    }
    ck_assert_str_eq (cJSON_GetObjectItem (j[0], "level")->valuestring, "info");
    ck_assert_str_eq (cJSON_GetObjectItem (j[0], "msg")->valuestring,
                      "quote \" backslash \\ newline \n tab \t bell \x07 del \x7f end");
    ck_assert_str_eq (cJSON_GetObjectItem (j[1], "level")->valuestring, "warn");
    ck_assert_str_eq (cJSON_GetObjectItem (j[1], "msg")->valuestring,
                      "bad utf-8: \xef\xbf\xbd|\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
                      "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd| ok: \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    const char *cut = cJSON_GetObjectItem (j[2], "msg")->valuestring;
    size_t cut_len = strlen (cut);
    ck_assert_uint_gt (cut_len, 3000);
    ck_assert_uint_lt (cut_len, strlen (s_long_msg));
    ck_assert_str_eq (cut + cut_len - 3, "...");
    ck_assert_int_eq (strncmp (cut, s_long_msg, cut_len - 3), 0);
    ck_assert_uint_eq ((cut_len - 3 - 1) % 3, 0);    /* whole characters only */
    cJSON *fields = cJSON_GetObjectItem (j[3], "fields");
    ck_assert_str_eq (cJSON_GetObjectItem (fields, "model")->valuestring, "m");
    ck_assert_int_eq (cJSON_GetObjectItem (fields, "requests")->valueint, 3);
    ck_assert_str_eq (cJSON_GetObjectItem (j[4], "msg")->valuestring, "bad \"fields\"");
    ck_assert_str_eq (cJSON_GetObjectItem (j[4], "fields_raw")->valuestring, "\"model\":oops");
    ck_assert_str_eq (cJSON_GetObjectItem (j[5], "level")->valuestring, "debug");
    ck_assert_str_eq (cJSON_GetObjectItem (j[6], "fields_raw")->valuestring, "\"a\":1},{\"b\":2");
    for (size_t i = 0; i < count; i++)
        cJSON_Delete (j[i]);

    /* Text lines: one line per call (a newline in a message cannot start a line of its own). */
    log_set_format (LOG_FORMAT_TEXT);
    count = s_capture (s_log_calls, lines, 8);
    ck_assert_uint_eq (count, 7);
    ck_assert_ptr_nonnull (strstr (lines[0], " info  quote \" backslash \\ newline \\n tab \\t bell \\x07 del \\x7f end\n"));
    ck_assert_ptr_nonnull (strstr (lines[3], " info  stats model=m requests=3\n"));
    ck_assert_ptr_nonnull (strstr (lines[2], "...\n"));
    ck_assert (s_utf8_valid (lines[2]));
}
END_TEST


int main (void)
{
    Suite *s = suite_create ("ops");
    TCase *tc = tcase_create ("ops");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 180);
    tcase_add_test (tc, log_lines_are_json_whatever_the_message);
    tcase_add_test (tc, metrics_counts_exact_and_exposition_strict);
    tcase_add_test (tc, a_cpu_lstm_is_placed_on_the_cpu_and_pinned_only_when_asked);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
