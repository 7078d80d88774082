/* Operations: the real sigserve binary's life. /readyz 503 while its models load and while it drains
 * after SIGTERM, an HTTP endpoint it cannot bind (exit code 2); hot reload (SIGHUP and --watch) under
 * traffic: models added and removed with every request answered, a broken file changing nothing,
 * two fronts, and the probes answering during a reload. Assertions are on counts and order, never on
 * wall-clock time: waits are bounded polls (ops_tests.h). */
#define _GNU_SOURCE
#include "ops_tests.h"

#include <cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>

static double s_wait_metric (int port, const char *name, const char *labels, double want)
{
    double v = NAN;
    for (int i = 0; i < POLL_MAX; i++) {
        expo_t e;
        s_scrape (port, &e);
        v = s_value (&e, name, labels);
        s_expo_free (&e);
        if (v >= want)
            break;
        usleep (POLL_US * 5);
    }
    return v;
}

/* ---------------------------------------------------------------- probes */

typedef enum { PROBE_REFUSED, PROBE_LOADING, PROBE_READY } probe_t;

START_TEST (readyz_503_while_models_load_then_200)
{
    /* 4096 x 4096 floats (64 MiB) to read, copy and warm: the load takes a while. */
    s_weights ("big.safetensors", 4096, 4096, 4, 21);
    int zport, hport;
    s_ports (&zport, &hport);
    char models[4096];
    snprintf (models, sizeof models, "%s, { \"name\": \"big\", \"backend\": \"cpu\", \"max_rows\": 3, "
              "\"weights\": \"big.safetensors\", \"layers\": [ { \"weight\": \"a.weight\", \"activation\": \"relu\" }, "
              "{ \"weight\": \"b.weight\" } ] }", s_tick);
    char *config = s_config ("big.json", zport, hport, "", models);
    pid_t pid = s_spawn (config, NULL, false);
    /* From the moment the process starts: refused (not yet listening), then 503 "loading models"
     * with /healthz 200, then 200 "ready"; never back. */
    probe_t last = PROBE_REFUSED;
    int loading = 0, ready = 0, scraped = 0;
    for (int i = 0; i < POLL_MAX * 10 && ready < 20; i++) {
        int status;
        ck_assert_msg (waitpid (pid, &status, WNOHANG) == 0, "sigserve exited while loading");
        char body[512];
        int code = s_get_text (hport, "/readyz", body, sizeof body);
        probe_t now = code == 0 ? PROBE_REFUSED : code == 200 ? PROBE_READY : PROBE_LOADING;
        ck_assert_msg (now >= last, "readiness went back from %d to %d (HTTP %d: %s)", last, now, code, body);
        if (now == PROBE_LOADING) {
            ck_assert_int_eq (code, 503);
            ck_assert_str_eq (body, "loading models");
            loading++;
        } else if (now == PROBE_READY) {
            ck_assert_str_eq (body, "ready");
            ready++;
        }
        if (now != PROBE_REFUSED) {
            ck_assert_int_eq (s_get_text (hport, "/healthz", body, sizeof body), 200);
            ck_assert_str_eq (body, "ok");
        }
        if (now == PROBE_LOADING && !scraped) {
            /* Metrics answer during the load too: no models to describe yet. */
            expo_t e;
            s_scrape (hport, &e);
            ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 0);
            ck_assert_uint_eq (s_count_samples (&e, "sigserve_model_available"), 0);
            ck_assert (s_family_find (&e, "sigserve_model_available") != NULL);
            s_check_histograms (&e);
            s_expo_free (&e);
            ck_assert_int_eq (s_get_text (hport, "/models", body, sizeof body), 503);
            /* The endpoints are bound before the models load: an infer request is answered at
             * once, UNAVAILABLE "loading", not left waiting for the port. */
            void *d = s_dealer (zport);
            float f[512] = { 0.5f };
            s_send (d, "tick_mlp", f, 512, 1, 77);
            Sigserve__V1__Reply *whole;
            Sigserve__V1__InferReply *rep = s_recv (d, &whole);
            ck_assert_ptr_nonnull (rep);
            if (rep->status == SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE)
                ck_assert_str_eq (rep->error, "loading: this sigserve is still loading and warming its models; retry "
                                              "shortly (health says ready once it serves)");
            else    /* the load ended between the probe and the request: then it is served */
                ck_assert_int_eq (rep->status, SIGSERVE__V1__STATUS__STATUS_OK);
            ck_assert_uint_eq (rep->request_id, 77);
            sigserve__v1__reply__free_unpacked (whole, NULL);
            zmq_close (d);
            scraped = 1;
        }
        last = now;
        if (now == PROBE_REFUSED)
            usleep (200);
    }
    ck_assert_msg (loading > 0, "never saw 503 while the models loaded");
    ck_assert_int_eq (ready, 20);
    ck_assert (scraped);
    s_stop (pid);
    free (config);
}
END_TEST

START_TEST (readyz_503_draining_after_sigterm)
{
    s_weights ("slow.safetensors", 1024, 1024, 1024, 12);
    int zport, hport;
    s_ports (&zport, &hport);
    const char *slow = "{ \"name\": \"slow\", \"backend\": \"cpu\", \"max_rows\": 15, \"queue_depth\": 512, \"max_queue_us\": 60000000, "
                       "\"weights\": \"slow.safetensors\", \"layers\": [ { \"weight\": \"a.weight\", "
                       "\"activation\": \"relu\" }, { \"weight\": \"b.weight\" } ] }";
    char *config = s_config ("drain.json", zport, hport, ", \"drain_ms\": 120000", slow);
    pid_t pid = s_spawn (config, NULL, false);
    s_wait_ready (pid, hport);
    /* 150 requests of 15 rows through 1024 x 1024 x 2: seconds of work for one core (max_queue_us lets
     * them all wait). */
    enum { N = 150 };
    float *f = malloc (15 * 1024 * sizeof (float));
    for (int i = 0; i < 15 * 1024; i++)
        f[i] = (float) ((i * 7) % 13 - 6) / 6.0f;
    void *s = s_dealer (zport);
    for (uint64_t id = 0; id < N; id++)
        s_send (s, "slow", f, 15 * 1024, 15, id);
    Sigserve__V1__Reply *whole;
    Sigserve__V1__InferReply *r = s_recv (s, &whole);
    ck_assert_ptr_nonnull (r);
    ck_assert_int_eq (r->status, SIGSERVE__V1__STATUS__STATUS_OK);
    sigserve__v1__reply__free_unpacked (whole, NULL);
    char body[512];
    ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);

    kill (pid, SIGTERM);
    int code = 200;
    for (int i = 0; i < POLL_MAX && code == 200; i++)
        if ((code = s_get_text (hport, "/readyz", body, sizeof body)) == 200)
            usleep (200);
    ck_assert_int_eq (code, 503);
    ck_assert_str_eq (body, "draining");
    ck_assert_int_eq (s_get_text (hport, "/healthz", body, sizeof body), 200);
    /* Still draining: the slow requests are not all answered yet, and the endpoint still reports. */
    expo_t e;
    s_scrape (hport, &e);
    ck_assert_double_lt (s_value (&e, "sigserve_requests_total", "model=slow,status=ok"), N);
    ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 0);
    s_expo_free (&e);

    int ok = 1, unavailable = 0;
    for (int i = 1; i < N; i++) {
        r = s_recv (s, &whole);
        ck_assert_msg (r != NULL, "reply %d of %d missing", i, N);
        if (r->status == SIGSERVE__V1__STATUS__STATUS_OK)
            ok++;
        else {
            ck_assert_int_eq (r->status, SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE);
            unavailable++;
        }
        sigserve__v1__reply__free_unpacked (whole, NULL);
    }
    ck_assert_int_eq (ok + unavailable, N);
    ck_assert_int_gt (ok, 1);
    int status;
    ck_assert_int_eq (waitpid (pid, &status, 0), pid);
    ck_assert (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    zmq_close (s);
    free (f);
    free (config);
}
END_TEST

START_TEST (http_bind_failure_exits_2)
{
    int zport, hport;
    s_ports (&zport, &hport);
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) hport) };
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    ck_assert_int_eq (bind (fd, (struct sockaddr *) &a, sizeof a), 0);
    ck_assert_int_eq (listen (fd, 1), 0);
    char *config = s_config ("busy.json", zport, hport, "", s_tick);
    char cmd[8192], out[8192];
    snprintf (cmd, sizeof cmd, "%s/sigserve --config %s 2>&1", tu_build_dir (), config);
    FILE *p = popen (cmd, "r");
    size_t n = fread (out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose (p);
    ck_assert_msg (WIFEXITED (st) && WEXITSTATUS (st) == 2, "exit %d: %s", WEXITSTATUS (st), out);
    char want[256];
    snprintf (want, sizeof want, "server.http: cannot bind 127.0.0.1:%d: Address already in use", hport);
    ck_assert_msg (strstr (out, want) && strstr (out, config), "%s", out);
    close (fd);
    free (config);
}
END_TEST

/* ---------------------------------------------------------------- reload under traffic */

#define STREAM_MAX (1u << 20)

/* One DEALER pipelining requests for MODEL (WINDOW in flight) until told to stop (or, with
 * STOP_AFTER_UNKNOWN, until that many UNKNOWN_MODEL replies came), then collecting what is still
 * out. Request ids count up from 0 on this one connection, so they are admitted in order. */
typedef struct {
    int zport;
    const char *model;
    const float *features;
    size_t n;
    int window;
    int stop_after_unknown;
    _Atomic int stop;
    _Atomic uint64_t replies;
    uint64_t sent, ok, unknown, other, max_ok_id, min_unknown_id;
    bool failed;
    char why[256];
    char unknown_error[256];
} stream_t;

static void *s_stream (void *arg)
{
    stream_t *st = arg;
    void *s = s_dealer (st->zport);
    char *seen = calloc (STREAM_MAX, 1);
    st->min_unknown_id = UINT64_MAX;
    for (; st->sent < (uint64_t) st->window; st->sent++)
        s_send (s, st->model, st->features, st->n, 1, st->sent);
    while (atomic_load (&st->replies) < st->sent) {
        Sigserve__V1__Reply *whole;
        Sigserve__V1__InferReply *r = s_recv (s, &whole);
        if (!r) {
            snprintf (st->why, sizeof st->why, "no reply after %llu of %llu", (unsigned long long) st->replies,
                      (unsigned long long) st->sent);
            st->failed = true;
            break;
        }
        uint64_t id = r->request_id;
        if (id >= st->sent || seen[id]) {
            snprintf (st->why, sizeof st->why, "reply for id %llu (sent %llu) twice or never sent",
                      (unsigned long long) id, (unsigned long long) st->sent);
            st->failed = true;
        } else
            seen[id] = 1;
        if (r->status == SIGSERVE__V1__STATUS__STATUS_OK) {
            st->ok++;
            if (id > st->max_ok_id || st->ok == 1)
                st->max_ok_id = id;
        } else if (r->status == SIGSERVE__V1__STATUS__STATUS_UNKNOWN_MODEL) {
            st->unknown++;
            if (id < st->min_unknown_id)
                st->min_unknown_id = id;
            snprintf (st->unknown_error, sizeof st->unknown_error, "%s", r->error);
        } else {
            st->other++;
            snprintf (st->why, sizeof st->why, "id %llu: status %d: %s", (unsigned long long) id, r->status, r->error);
        }
        sigserve__v1__reply__free_unpacked (whole, NULL);
        atomic_fetch_add (&st->replies, 1);
        bool stopping = atomic_load (&st->stop)
                        || (st->stop_after_unknown && st->unknown >= (uint64_t) st->stop_after_unknown);
        if (!stopping && st->sent < STREAM_MAX)
            s_send (s, st->model, st->features, st->n, 1, st->sent++);
    }
    free (seen);
    zmq_close (s);
    return NULL;
}

static void s_wait_replies (stream_t *st, uint64_t at_least)
{
    for (int i = 0; i < POLL_MAX && atomic_load (&st->replies) < at_least && !st->failed; i++)
        usleep (POLL_US);
    ck_assert_msg (atomic_load (&st->replies) >= at_least, "the stream stalled at %llu replies",
                   (unsigned long long) atomic_load (&st->replies));
}

static bool s_models_has (int hport, const char *name)
{
    http_reply_t r;
    ck_assert_int_eq (s_http (hport, "GET", "/models", &r), 0);
    ck_assert_int_eq (r.status, 200);
    cJSON *j = cJSON_Parse (r.body);
    ck_assert_ptr_nonnull (j);
    bool has = false;
    cJSON *m;
    cJSON_ArrayForEach (m, cJSON_GetObjectItem (j, "models"))
        has |= strcmp (cJSON_GetObjectItem (m, "name")->valuestring, name) == 0;
    cJSON_Delete (j);
    s_http_free (&r);
    return has;
}

/* The log file's lines, each parsed (the caller deletes them); fails on a line that is not JSON
 * with ts, level and msg. */
static size_t s_json_log (const char *path, cJSON **lines, size_t cap)
{
    FILE *f = fopen (path, "r");
    ck_assert_ptr_nonnull (f);
    size_t n = 0;
    char *line = NULL;
    size_t len = 0;
    ssize_t got;
    while ((got = getline (&line, &len, f)) > 0) {
        ck_assert_msg (line[got - 1] == '\n', "a log line without its newline: %s", line);
        cJSON *j = cJSON_Parse (line);
        ck_assert_msg (j != NULL && cJSON_IsObject (j), "not a JSON object: %s", line);
        ck_assert_msg (cJSON_IsString (cJSON_GetObjectItem (j, "ts")) && cJSON_IsString (cJSON_GetObjectItem (j, "level"))
                       && cJSON_IsString (cJSON_GetObjectItem (j, "msg")), "ts, level or msg missing: %s", line);
        const char *level = cJSON_GetObjectItem (j, "level")->valuestring;
        ck_assert_msg (strcmp (level, "error") == 0 || strcmp (level, "warn") == 0 || strcmp (level, "info") == 0
                       || strcmp (level, "debug") == 0, "level %s", level);
        ck_assert_uint_eq (strlen (cJSON_GetObjectItem (j, "ts")->valuestring), strlen ("2026-11-23T19:20:35.123456Z"));
        if (n < cap)
            lines[n++] = j;
        else
            cJSON_Delete (j);
    }
    free (line);
    fclose (f);
    return n;
}

static bool s_log_has_stats_line (const char *path, const char *model)
{
    cJSON *lines[4096];
    size_t n = s_json_log (path, lines, 4096);
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        cJSON *fields = cJSON_GetObjectItem (lines[i], "fields");
        if (strcmp (cJSON_GetObjectItem (lines[i], "msg")->valuestring, "stats") == 0 && fields
            && strcmp (cJSON_GetObjectItem (fields, "model")->valuestring, model) == 0) {
            ck_assert (cJSON_IsNumber (cJSON_GetObjectItem (fields, "requests")));
            ck_assert_double_gt (cJSON_GetObjectItem (fields, "requests")->valuedouble, 0);
            ck_assert_double_gt (cJSON_GetObjectItem (fields, "rate_per_s")->valuedouble, 0);
            double p50 = cJSON_GetObjectItem (fields, "server_p50_us")->valuedouble;
            double p99 = cJSON_GetObjectItem (fields, "server_p99_us")->valuedouble;
            ck_assert_msg (p50 >= 0 && p50 <= p99, "p50 %g, p99 %g", p50, p99);
            found |= p50 > 0;
        }
    }
    for (size_t i = 0; i < n; i++)
        cJSON_Delete (lines[i]);
    return found;
}

/* The features the reload tests send: F for tick_mlp (512), G for odd (33). */
static void s_reload_features (float *f, float *g)
{
    for (int i = 0; i < 512; i++)
        f[i] = (float) ((i % 11) - 5) / 5.0f;
    for (int i = 0; i < 33; i++)
        g[i] = (float) (i % 5) / 5.0f;
}

START_TEST (reload_adds_removes_and_survives_a_broken_file)
{
    int zport, hport;
    s_ports (&zport, &hport);
    const char *extra = ", \"log_format\": \"json\", \"stats_interval_s\": 1";
    char *config = s_config ("reload.json", zport, hport, extra, s_tick);
    char log_path[4096];
    snprintf (log_path, sizeof log_path, "%s/reload.log", s_dir);
    pid_t pid = s_spawn (config, log_path, false);
    s_wait_ready (pid, hport);
    float f[512], g[33];
    s_reload_features (f, g);

    /* 1. A model added while a pipelined stream to another one runs: every request answered OK. */
    stream_t tick = { .zport = zport, .model = "tick_mlp", .features = f, .n = 512, .window = 32 };
    pthread_t th;
    pthread_create (&th, NULL, s_stream, &tick);
    s_wait_replies (&tick, 500);
    char models[4096];
    snprintf (models, sizeof models, "%s, %s", s_tick, s_odd);
    free (s_config ("reload.json", zport, hport, extra, models));
    kill (pid, SIGHUP);
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 1), 1);
    uint64_t at_reload = atomic_load (&tick.replies);
    s_wait_replies (&tick, at_reload + 500);
    atomic_store (&tick.stop, 1);
    pthread_join (th, NULL);
    ck_assert_msg (!tick.failed && tick.other == 0, "%s", tick.why);
    ck_assert_uint_eq (tick.ok, tick.sent);
    ck_assert_uint_eq (atomic_load (&tick.replies), tick.sent);
    ck_assert (s_models_has (hport, "odd"));

    /* 2. The model removed while a stream to it runs: requests admitted before the switch are
     * answered OK, those after it UNKNOWN_MODEL, none lost and none out of order. */
    stream_t odd = { .zport = zport, .model = "odd", .features = g, .n = 33, .window = 16,
                     .stop_after_unknown = 50 };
    pthread_create (&th, NULL, s_stream, &odd);
    s_wait_replies (&odd, 300);
    free (s_config ("reload.json", zport, hport, extra, s_tick));
    kill (pid, SIGHUP);
    pthread_join (th, NULL);
    ck_assert_msg (!odd.failed && odd.other == 0, "%s", odd.why);
    ck_assert_uint_eq (atomic_load (&odd.replies), odd.sent);
    ck_assert_uint_eq (odd.ok + odd.unknown, odd.sent);
    ck_assert_uint_ge (odd.ok, 300);
    ck_assert_uint_ge (odd.unknown, 50);
    ck_assert_uint_lt (odd.max_ok_id, odd.min_unknown_id);
    ck_assert_str_eq (odd.unknown_error, "model: \"odd\" is not served here (served: tick_mlp)");
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 2), 2);
    ck_assert (!s_models_has (hport, "odd"));
    expo_t e;
    s_scrape (hport, &e);
    ck_assert_double_eq (s_value (&e, "sigserve_requests_total", "model=odd,status=ok"), (double) odd.ok);
    ck_assert_double_eq (s_value (&e, "sigserve_requests_total", "model=_unknown,status=unknown_model"),
                         (double) odd.unknown);
    ck_assert_double_eq (s_value (&e, "sigserve_requests_total", "model=tick_mlp,status=ok"), (double) tick.ok);
    ck_assert (isnan (s_value (&e, "sigserve_model_available", "model=odd")));
    ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=tick_mlp"), 1);
    s_check_histograms (&e);
    s_expo_free (&e);

    /* 3. A broken file: nothing changes, the error is counted and logged with the file and key. */
    char *broken = s_config ("reload.json", zport, hport, ", \"log_format\": \"json\", \"bogus_key\": 1", s_tick);
    kill (pid, SIGHUP);
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=error", 1), 1);
    s_scrape (hport, &e);
    ck_assert_double_eq (s_value (&e, "sigserve_config_reloads_total", "result=ok"), 2);
    ck_assert_double_eq (s_value (&e, "sigserve_config_reloads_total", "result=error"), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 1);
    s_expo_free (&e);
    void *s = s_dealer (zport);
    s_send (s, "tick_mlp", f, 512, 1, 7);
    Sigserve__V1__Reply *whole;
    Sigserve__V1__InferReply *r = s_recv (s, &whole);
    ck_assert_ptr_nonnull (r);
    ck_assert_int_eq (r->status, SIGSERVE__V1__STATUS__STATUS_OK);
    sigserve__v1__reply__free_unpacked (whole, NULL);
    zmq_close (s);
    char body[256];
    ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);

    /* 4. The logs: a stats line for the model with traffic (stats_interval_s 1), every line JSON. */
    bool stats = false;
    for (int i = 0; i < POLL_MAX / 10 && !stats; i++) {
        stats = s_log_has_stats_line (log_path, "tick_mlp");
        if (!stats)
            usleep (POLL_US * 10);
    }
    ck_assert_msg (stats, "no stats line for tick_mlp");
    s_stop (pid);
    cJSON *lines[4096];
    size_t n = s_json_log (log_path, lines, 4096);
    bool named = false;
    char key[300];
    snprintf (key, sizeof key, "%s: server.bogus_key: unknown key", broken);
    int reloads_logged = 0;
    for (size_t i = 0; i < n; i++) {
        const char *msg = cJSON_GetObjectItem (lines[i], "msg")->valuestring;
        const char *level = cJSON_GetObjectItem (lines[i], "level")->valuestring;
        if (strcmp (level, "error") == 0 && strstr (msg, "reload failed") && strstr (msg, key))
            named = true;
        reloads_logged += strncmp (msg, "reload: serving ", 16) == 0;
        cJSON_Delete (lines[i]);
    }
    ck_assert_msg (named, "no error line naming \"%s\" in %s", key, log_path);
    ck_assert_int_eq (reloads_logged, 2);
    free (broken);
    free (config);
}
END_TEST

/* Two fronts (a front each on two endpoints), a pipelined stream on each: a reload adding a model
 * and a third endpoint (served by one of them at once), then one removing the model and the first
 * endpoint. Every request of the streams is answered OK, the new endpoint answers, the removed
 * model's set is unloaded once (both fronts let go of it), and SIGTERM exits 0. */
START_TEST (reload_with_two_fronts)
{
    int hport, z[3];
    s_ports (&z[0], &hport);
    do
        z[1] = tu_free_port ();
    while (z[1] == z[0] || z[1] == hport);
    do
        z[2] = tu_free_port ();
    while (z[2] == z[0] || z[2] == z[1] || z[2] == hport);
    const char *extra = ", \"fronts\": 2";
    char *config = s_config_on ("fronts.json", z, 2, hport, extra, s_tick);
    char log_path[4096];
    snprintf (log_path, sizeof log_path, "%s/fronts.log", s_dir);
    pid_t pid = s_spawn (config, log_path, false);
    s_wait_ready (pid, hport);
    float f[512], g[33];
    s_reload_features (f, g);
    stream_t st[2] = { { .zport = z[0], .model = "tick_mlp", .features = f, .n = 512, .window = 32 },
                       { .zport = z[1], .model = "tick_mlp", .features = f, .n = 512, .window = 32 } };
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        pthread_create (&th[k], NULL, s_stream, &st[k]);
    s_wait_replies (&st[0], 500);
    s_wait_replies (&st[1], 500);
    /* 1. a model and an endpoint added */
    char models[4096];
    snprintf (models, sizeof models, "%s, %s", s_tick, s_odd);
    free (s_config_on ("fronts.json", z, 3, hport, extra, models));
    kill (pid, SIGHUP);
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 1), 1);
    for (int k = 0; k < 2; k++)
        s_wait_replies (&st[k], atomic_load (&st[k].replies) + 500);
    void *s = s_dealer (z[2]);
    s_send (s, "odd", g, 33, 1, 9);
    Sigserve__V1__Reply *whole;
    Sigserve__V1__InferReply *r = s_recv (s, &whole);
    ck_assert_ptr_nonnull (r);
    ck_assert_msg (r->status == SIGSERVE__V1__STATUS__STATUS_OK, "%s", r->error);
    ck_assert_uint_eq (r->request_id, 9);
    sigserve__v1__reply__free_unpacked (whole, NULL);
    zmq_close (s);
    /* 2. the model and the first endpoint removed (its stream stopped first) */
    atomic_store (&st[0].stop, 1);
    pthread_join (th[0], NULL);
    free (s_config_on ("fronts.json", z + 1, 2, hport, extra, s_tick));
    kill (pid, SIGHUP);
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 2), 2);
    s_wait_replies (&st[1], atomic_load (&st[1].replies) + 500);
    atomic_store (&st[1].stop, 1);
    pthread_join (th[1], NULL);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg (!st[k].failed && st[k].other == 0, "stream %d: %s", k, st[k].why);
        ck_assert_uint_eq (st[k].ok, st[k].sent);
    }
    ck_assert (!s_models_has (hport, "odd"));
    /* the removed model's set, unloaded once: both fronts let go of it */
    int unloaded = 0;
    for (int i = 0; i < POLL_MAX && unloaded == 0; i++) {
        FILE *lf = fopen (log_path, "r");
        char line[2048];
        unloaded = 0;
        while (lf && fgets (line, sizeof line, lf))
            unloaded += strstr (line, "reload: 1 model(s) no longer served are unloaded") != NULL;
        if (lf)
            fclose (lf);
        if (!unloaded)
            usleep (POLL_US);
    }
    s_stop (pid);
    FILE *lf = fopen (log_path, "r");
    char line[2048];
    int fronts_named = 0;
    unloaded = 0;
    while (lf && fgets (line, sizeof line, lf)) {
        unloaded += strstr (line, "no longer served are unloaded") != NULL;
        fronts_named += strstr (line, "front 0: ") != NULL || strstr (line, "front 1: ") != NULL;
    }
    if (lf)
        fclose (lf);
    ck_assert_int_eq (unloaded, 1);
    ck_assert_int_eq (fronts_named, 2);
    free (config);
}
END_TEST

START_TEST (watch_reloads_when_the_file_changes)
{
    int zport, hport;
    s_ports (&zport, &hport);
    char *config = s_config ("watch.json", zport, hport, "", s_tick);
    pid_t pid = s_spawn (config, NULL, true);
    s_wait_ready (pid, hport);
    ck_assert (!s_models_has (hport, "odd"));
    char models[4096];
    snprintf (models, sizeof models, "%s, %s", s_tick, s_odd);
    free (s_config ("watch.json", zport, hport, "", models));     /* no signal: --watch sees it */
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 1), 1);
    ck_assert (s_models_has (hport, "odd"));
    char body[256];
    ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);
    s_stop (pid);
    free (config);
}
END_TEST

/* While a reload loads a big model aside (holding the server lock), /readyz keeps answering from
 * the readiness seen when it began (the old models serve meanwhile) and /metrics answers without
 * the per-model gauges; neither waits for the load. */
START_TEST (probes_answer_during_a_reload)
{
    int zport, hport;
    s_ports (&zport, &hport);
    char *config = s_config ("during.json", zport, hport, "", s_tick);
    pid_t pid = s_spawn (config, NULL, false);
    s_wait_ready (pid, hport);
    s_weights ("big.safetensors", 4096, 4096, 4, 21);
    char models[4096];
    snprintf (models, sizeof models, "%s, { \"name\": \"big\", \"backend\": \"cpu\", \"max_rows\": 3, "
              "\"weights\": \"big.safetensors\", \"layers\": [ { \"weight\": \"a.weight\", \"activation\": \"relu\" }, "
              "{ \"weight\": \"b.weight\" } ] }", s_tick);
    free (s_config ("during.json", zport, hport, "", models));
    kill (pid, SIGHUP);
    int during = 0, polls = 0;
    double reloaded = 0;
    for (; polls < POLL_MAX && reloaded < 1; polls++) {
        char body[512];
        ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);
        ck_assert_str_eq (body, "ready");
        expo_t e;
        s_scrape (hport, &e);
        reloaded = s_value (&e, "sigserve_config_reloads_total", "result=ok");
        if (s_value (&e, "sigserve_reload_in_progress", "") == 1) {
            during++;
            ck_assert_uint_eq (s_count_samples (&e, "sigserve_model_available"), 0);
            ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 1);
            /* tick_mlp's and _unknown's counters; big's too once the load has taken its stats
             * slot, which may be before or after this scrape */
            size_t samples = s_count_samples (&e, "sigserve_requests_total");
            ck_assert_msg (samples == 2 * 9 || samples == 3 * 9, "%zu requests_total samples", samples);
        } else if (reloaded < 1)
            ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=tick_mlp"), 1);
        s_expo_free (&e);
    }
    ck_assert_double_eq (reloaded, 1);
    ck_assert_msg (during > 0, "no scrape during the reload (%d polls)", polls);
    ck_assert (s_models_has (hport, "big"));
    expo_t e;
    s_scrape (hport, &e);
    ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=big"), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_reload_in_progress", ""), 0);
    s_expo_free (&e);
    s_stop (pid);
    free (config);
}
END_TEST


int main (void)
{
    Suite *s = suite_create ("ops_lifecycle");
    TCase *tc = tcase_create ("lifecycle");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 180);
    tcase_add_test (tc, readyz_503_while_models_load_then_200);
    tcase_add_test (tc, readyz_503_draining_after_sigterm);
    tcase_add_test (tc, http_bind_failure_exits_2);
    tcase_add_test (tc, reload_adds_removes_and_survives_a_broken_file);
    tcase_add_test (tc, reload_with_two_fronts);
    tcase_add_test (tc, watch_reloads_when_the_file_changes);
    tcase_add_test (tc, probes_answer_during_a_reload);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
