/* sigload's main: checks that every endpoint answers and asks the server for the model's sizes
 * (ready.c), builds the requests' payloads, starts the workers, then runs the sweep step by step
 * (each value's --floor step just before its own), judging each (judge.c) as it ends. sigload.h
 * describes the whole design; sigload --help describes its use. */
#define _GNU_SOURCE
#include "clock.h"
#include "floatlist.h"
#include "rng.h"
#include "sigclient.h"
#include "sigload.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define RANDOM_SETS 64                  /* distinct random requests, cycled */

/* Features (and expected outputs), the echo payloads and the buffers' sizes. */
static int s_prepare_payloads (sigload_t *L, uint32_t input_size)
{
    const options_t *opt = L->opt;
    char err[512];
    L->per_request = (size_t) opt->rows * input_size;
    if (opt->features_file) {
        size_t n = 0;
        if (floatlist_read (opt->features_file, false, &L->pool, &n, err, sizeof err) != 0) {
            fprintf (stderr, "sigload: %s\n", err);
            return -1;
        }
        if (n == 0 || n % L->per_request != 0) {
            fprintf (stderr, "sigload: %s: %zu features are not a whole number of requests of rows x input size = "
                             "%u x %u = %zu\n", opt->features_file, n, opt->rows, input_size, L->per_request);
            return -1;
        }
        L->n_sets = n / L->per_request;
    } else {
        L->n_sets = RANDOM_SETS;
        L->pool = malloc (L->n_sets * L->per_request * sizeof *L->pool);
        if (!L->pool)
            return -1;
        uint64_t rng = opt->seed * 0x9e3779b97f4a7c15ull + 0x5eed;
        for (size_t i = 0; i < L->n_sets * L->per_request; i++)
            L->pool[i] = rng_uniform (&rng, -1.0f, 1.0f);
    }
    if (opt->expect_file) {
        size_t n = 0;
        if (floatlist_read (opt->expect_file, false, &L->expect, &n, err, sizeof err) != 0) {
            fprintf (stderr, "sigload: %s\n", err);
            return -1;
        }
        if (n == 0 || n % L->n_sets != 0) {
            fprintf (stderr, "sigload: %s: %zu expected outputs do not divide into the %zu requests of %s\n",
                     opt->expect_file, n, L->n_sets, opt->features_file ? opt->features_file : "random features");
            return -1;
        }
        L->out_per_request = n / L->n_sets;
    }
    /* The largest request: the largest id packs into the most bytes. */
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__InferRequest infer = SIGSERVE__V1__INFER_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
    req.infer = &infer;
    infer.request_id = UINT64_MAX;
    infer.model = (char *) opt->models[0];
    for (size_t k = 1; k < opt->n_models; k++)
        if (strlen (opt->models[k]) > strlen (infer.model))
            infer.model = (char *) opt->models[k];
    infer.n_features = L->per_request;
    infer.features = L->pool;
    infer.rows = opt->rows;
    infer.deadline_us = opt->deadline_us;
    if (opt->streams) {
        infer.stream_id = UINT64_MAX;
        infer.step = UINT64_MAX;
    }
    L->echo_len = sigserve__v1__request__get_packed_size (&req);
    if (L->echo_len < 8)
        L->echo_len = 8;
    L->send_cap = L->echo_len + 16;
    L->echo_payloads = malloc (L->n_sets * L->echo_len);
    if (!L->echo_payloads)
        return -1;
    for (size_t k = 0; k < L->n_sets; k++) {
        uint8_t *p = L->echo_payloads + k * L->echo_len;
        memset (p, 0, L->echo_len);
        infer.features = L->pool + k * L->per_request;
        sigserve__v1__request__pack (&req, p);
    }
    return 0;
}

/* ---- the sweep ---- */

/* Runs L->step on every worker and waits for them. */
/* Runs L->step from T0 (every worker is past the barrier by then). */
static void s_run_step (sigload_t *L, int64_t t0)
{
    const options_t *opt = L->opt;
    for (size_t t = 0; t < L->n_workers; t++)
        atomic_store (&L->workers[t].done, 0);
    int64_t start = (int64_t) clock_now_ns ();
    L->step.t0 = t0;
    L->step.measure_start = L->step.t0 + (int64_t) (opt->warmup_s * 1e9);
    L->step.measure_end = opt->requests || opt->schedule_file ? INT64_MAX
                                                              : L->step.measure_start + (int64_t) (opt->duration_s * 1e9);
    double expected_s = opt->schedule_file ? (double) opt->schedule_ns[opt->n_schedule - 1] / 1e9
                        : opt->requests ? (L->step.mode == MODE_OPEN ? opt->warmup_s + (double) opt->requests / L->step.target : 0)
                                        : opt->warmup_s + opt->duration_s;
    bool progress = !opt->quiet && (expected_s > 2 || expected_s == 0);
    pthread_barrier_wait (&L->start);
    int64_t next_progress = start + 1000000000LL;
    for (;;) {
        size_t done = 0;
        for (size_t t = 0; t < L->n_workers; t++)
            done += atomic_load_explicit (&L->workers[t].done, memory_order_acquire) != 0;
        if (done == L->n_workers)
            break;
        if (sigload_interrupted && !atomic_load (&L->abort)) {
            atomic_store (&L->abort, true);
            fprintf (stderr, "sigload: interrupted: stopping\n");
        }
        usleep (20 * 1000);
        int64_t now = (int64_t) clock_now_ns ();
        if (progress && now >= next_progress) {
            report_progress (L, now);
            next_progress += 1000000000LL;
        }
    }
}

static void s_step_name (step_t *st, bool floor_step)
{
    if (st->schedule) {
        snprintf (st->name, sizeof st->name, "%sschedule", floor_step || st->echo ? "echo-" : "");
        return;
    }
    char value[32];
    snprintf (value, sizeof value, "%.10g", st->target);
    snprintf (st->name, sizeof st->name, "%s%s-%s", floor_step || st->echo ? "echo-" : "",
              st->mode == MODE_OPEN ? "open" : "closed", value);
}

/* Runs the steps (with --floor, each value's floor step just before its own), judging each and
 * printing its row as it ends; the results filled. */
static size_t s_run_sweep (sigload_t *L, result_t *results, size_t n_steps, FILE *csv, bool *any_errors,
                           char *saturated, size_t saturated_len)
{
    const options_t *opt = L->opt;
    /* the first server step's p99: the default saturation limit's base, the floor steps' too (they
     * share the plot's scale); the first floor step, before it, is judged by its own */
    double first_p99_us = 0;
    const size_t per_value = opt->floor ? 2 : 1;
    size_t n = 0;
    for (size_t i = 0; i < n_steps && !sigload_interrupted; i++) {
        bool floor_step = opt->floor && i % 2 == 0;
        size_t v = i / per_value;
        L->step = (step_t) { .mode = opt->mode, .set = floor_step ? SET_FLOOR : SET_TARGET,
                             .echo = opt->echo || floor_step, .target = opt->values[v], .requests = opt->requests,
                             .schedule = opt->schedule_file != NULL, .streams = opt->streams && !floor_step,
                             .engine = opt->engine };
        s_step_name (&L->step, floor_step);
        /* with --processes, every process starts the step at process 0's time, or stops there */
        const int64_t t0 = procs_step_begin (opt, (int64_t) clock_now_ns () + 20 * 1000000LL, false);
        if (t0 == 0)
            break;
        s_run_step (L, t0);
        result_t *r = &results[n++];
        report_merge (L, r);
        procs_step_end (opt, r);
        s_step_name (&r->step, floor_step);     /* the whole load's value (--processes) */
        double floor_base = first_p99_us;
        judge_step (opt, floor_step ? &floor_base : &first_p99_us, r);
        report_table_row (stdout, r);
        if (csv)
            report_csv_row (csv, r);
        if (opt->out_dir)
            report_write_hgrm (opt->out_dir, r);
        if (r->errors || r->counts.warmup_errors)
            *any_errors = true;
        if (floor_step)
            continue;   /* a saturated floor is said, and the sweep of the server goes on */
        if (r->saturated && opt->stop_when_saturated && i + 1 < n_steps) {
            snprintf (saturated, saturated_len, "saturated at %s (%s): the sweep stopped there", r->step.name,
                      r->saturation);
            fprintf (stderr, "sigload: %s\n", saturated);
            procs_step_begin (opt, 0, true);    /* the other processes stop here too */
            break;
        }
    }
    return n;
}

/* The features per row (with --streams, per step): --input-size, else the server's model list,
 * else 512. The model's outputs per row in *OUTPUT_SIZE (0 when unknown). 0 (said why) when
 * --model's models differ, or --streams names a model that keeps no streams. */
static uint32_t s_input_size (sigload_t *L, uint32_t *output_size)
{
    const options_t *opt = L->opt;
    uint32_t input_size = opt->input_size;
    uint32_t first_in = 0;
    for (size_t k = 0; k < opt->n_models && !opt->echo; k++) {
        model_sizes_t m = { 0 };
        char served[1024];
        const char *model = opt->models[k];
        if (ready_model_sizes (L->workers[0].conns[SET_TARGET][0].socket, model, (int) opt->timeout_ms, &m,
                           served, sizeof served) == 0) {
            uint32_t in = m.in, out = m.out;
            if (opt->streams && m.step_size == 0) {   /* no window (not a recurrent type): no streams */
                fprintf (stderr, "sigload: --streams: model \"%s\" is of type %s, which keeps no streams\n",
                         model, m.type[0] ? m.type : "unknown");
                return 0;
            }
            if (opt->streams)
                in = m.step_size;
            if (first_in && (in != first_in || out != *output_size)) {
                fprintf (stderr, "sigload: model \"%s\" takes %u features and gives %u outputs per row, "
                                 "model \"%s\" %u and %u: --model's models must have the same sizes\n",
                         model, in, out, opt->models[0], first_in, *output_size);
                return 0;
            }
            first_in = in;
            if (!input_size)
                input_size = in;
            *output_size = out;
        } else {
            fprintf (stderr, "sigload: the server does not list model \"%s\" (%s%s)%s\n", model,
                     served[0] ? "served: " : "no model list", served,
                     input_size ? "" : "; sending 512 features per row (--input-size sets it)");
            if (!input_size)
                input_size = 512;
        }
    }
    return input_size ? input_size : 512;
}

/* Creates DIR and DIR/summary.csv with its header; the open file, or NULL (said why). */
static FILE *s_open_out (const char *dir)
{
    if (mkdir (dir, 0777) != 0 && errno != EEXIST) {
        fprintf (stderr, "sigload: cannot create %s: %s\n", dir, strerror (errno));
        return NULL;
    }
    char path[4096];
    snprintf (path, sizeof path, "%s/summary.csv", dir);
    FILE *csv = fopen (path, "w");
    if (!csv) {
        fprintf (stderr, "sigload: cannot write %s: %s\n", path, strerror (errno));
        return NULL;
    }
    report_csv_header (csv);
    return csv;
}

/* What runs (the settings in one line) and how latency is measured. */
static void s_print_banner (const sigload_t *L, uint32_t input_size)
{
    const options_t *opt = L->opt;
    char duration[64];
    if (opt->schedule_file)
        snprintf (duration, sizeof duration, "the schedule's %zu requests", opt->n_schedule);
    else if (opt->requests)
        snprintf (duration, sizeof duration, "%" PRIu64 " requests measured per step", opt->requests);
    else
        snprintf (duration, sizeof duration, "%.3g s measured per step", opt->duration_s);
    char procs_note[96] = "";
    if (opt->processes > 1)
        snprintf (procs_note, sizeof procs_note, " in each of %u processes (1/%u of the load each)", opt->processes,
                  opt->processes);
    printf ("sigload%s: %zu endpoint(s)%s%s, model %s, %u row(s) of %u features (%zu-byte requests), %u "
            "connection(s), %u thread(s)%s, %s, warm-up %.3g s, %s\n\n",
            opt->echo ? " (echo)" : "", opt->n_endpoints, opt->floor ? ", echo floor at " : "",
            opt->floor ? opt->floor : "", opt->echo ? "-" : opt->model, opt->rows, input_size, L->echo_len,
            opt->connections, opt->threads, procs_note,
            opt->mode == MODE_CLOSED ? "closed loop"
            : opt->schedule_file     ? "open loop, send times from --schedule"
            : opt->poisson           ? "open loop, Poisson arrivals"
                                     : "open loop, constant arrivals",
            opt->warmup_s, duration);
    if (opt->schedule_file)
        printf ("Schedule: %zu requests from %s, the last at %.3f ms from the start.\n\n", opt->n_schedule,
                opt->schedule_file, (double) opt->schedule_ns[opt->n_schedule - 1] / 1e6);
    if (opt->streams)
        printf ("Streams: %" PRIu64 " (ids %" PRIu64 " to %" PRIu64 "), stream k on connection k mod %u, steps of %zu "
                "features numbered from 1; each stream %s.\n\n", opt->streams, opt->stream_base,
                opt->stream_base + opt->streams - 1, opt->connections, L->per_request,
                opt->schedule_file ? "takes its turn among its thread's streams"
                : opt->mode == MODE_OPEN ? "gets 1/N of the rate" : "takes its turn on its connection");
    printf ("Latency in microseconds: %s.\n\n",
            opt->mode == MODE_OPEN ? "open loop, from each request's scheduled send time (coordinated-omission safe)"
                                   : "closed loop, from each request's actual send: a slow reply delays the requests "
                                     "behind it, so the percentiles hide queueing (coordinated omission); use --rate "
                                     "for open loop");
    printf ("Engine: %s, for every step (%s).\n\n", sigclient_engine_name (opt->engine),
            opt->engine == SIGCLIENT_ENGINE_ZMTP ? "each worker thread writes and reads its own sockets"
                                                  : "libzmq DEALERs, moved by libzmq's I/O threads");
}

int main (int argc, char **argv)
{
    options_t opt;
    int rc = options_parse (argc, argv, &opt);
    if (rc != 0) {
        free (opt.schedule_ns);     /* help, a dry run, or a usage error after --schedule was read */
        return rc < 0 ? EXIT_OK : rc;
    }
    if (opt.n_serve_echo > 0)
        return echo_serve (&opt);
    if ((rc = procs_start (&opt)) != 0)    /* before any ZeroMQ context: fork */
        return rc;

    sigload_t L = { .opt = &opt, .timeout_ns = (int64_t) opt.timeout_ms * 1000000,
                    .spin_ns = (int64_t) opt.spin_us * 1000 };
    result_t *results = NULL;
    size_t n_steps = 0, n_results = 0;
    FILE *csv = NULL;
    int exit_code = EXIT_ERRORS;
    bool threads_started = false;

    sigload_catch_signals ();

    /* libzmq: one context, its I/O threads shared by every socket; zmtp needs none */
    if (opt.engine == SIGCLIENT_ENGINE_LIBZMQ && (L.ctx = zmq_ctx_new ()))
        zmq_ctx_set (L.ctx, ZMQ_IO_THREADS, (int) opt.io_threads);
    if ((opt.engine == SIGCLIENT_ENGINE_LIBZMQ && !L.ctx) || workers_new (&L, opt.floor != NULL) != 0) {
        fprintf (stderr, "sigload: out of memory\n");
        goto done;
    }
    const char *floor_eps[MAX_ENDPOINTS] = { opt.floor };
    size_t n_floor = opt.floor ? 1 : 0;
    if (ready_expand_dns (&L, opt.echo, opt.endpoints, &opt.n_endpoints) != 0
        || (opt.floor && ready_expand_dns (&L, true, floor_eps, &n_floor) != 0))
        goto done;
    if (workers_connect (&L, SET_TARGET, opt.endpoints, opt.n_endpoints) != 0)
        goto done;
    if (opt.floor && workers_connect (&L, SET_FLOOR, floor_eps, n_floor) != 0)
        goto done;
    if (ready_check (&L, SET_TARGET, opt.echo, opt.endpoints, opt.n_endpoints) != 0)
        goto done;
    if (opt.floor && ready_check (&L, SET_FLOOR, true, floor_eps, n_floor) != 0)
        goto done;

    uint32_t output_size = 0, input_size = s_input_size (&L, &output_size);
    if (input_size == 0)
        goto done;
    if (s_prepare_payloads (&L, input_size) != 0 || workers_buffers (&L) != 0)
        goto done;
    if (L.expect && output_size && L.out_per_request != (size_t) opt.rows * output_size)
        fprintf (stderr, "sigload: warning: %s holds %zu outputs per request; the model gives %u x %u\n",
                 opt.expect_file, L.out_per_request, opt.rows, output_size);

    if (opt.out_dir && !(csv = s_open_out (opt.out_dir)))
        goto done;

    n_steps = opt.n_values * (opt.floor ? 2 : 1);
    results = calloc (n_steps, sizeof *results);
    if (!results)
        goto done;
    for (size_t i = 0; i < n_steps; i++) {
        results[i].total = histogram_new ();
        results[i].server = histogram_new ();
        results[i].network = histogram_new ();
        if (!results[i].total || !results[i].server || !results[i].network)
            goto done;
    }

    pthread_barrier_init (&L.start, NULL, (unsigned) L.n_workers + 1);
    for (size_t t = 0; t < L.n_workers; t++)
        if (pthread_create (&L.workers[t].thread, NULL, worker_main, &L.workers[t]) != 0) {
            fprintf (stderr, "sigload: cannot start a thread\n");
            abort ();   /* the barrier counts on every thread */
        }
    threads_started = true;

    s_print_banner (&L, input_size);
    report_table_header (stdout);

    bool any_errors = false;
    char saturated[512] = "";
    n_results = s_run_sweep (&L, results, n_steps, csv, &any_errors, saturated, sizeof saturated);
    printf ("\n");
    if (saturated[0])
        printf ("%s\n", saturated);
    report_verdicts (stdout, results, n_results);
    report_error_details (stdout, results, n_results);
    if (opt.out_dir) {
        if (csv) {
            fclose (csv);
            csv = NULL;
        }
        char made[128];
        bool plotted = report_plot (&opt, results, n_results, made, sizeof made);
        printf ("files in %s: <step>.hgrm for each step, summary.csv, plots.gp%s%s\n", opt.out_dir,
                plotted ? ", " : "", plotted ? made : "");
    }
    exit_code = any_errors || sigload_interrupted ? EXIT_ERRORS : EXIT_OK;

done:
    if (threads_started) {
        atomic_store (&L.quit, true);
        pthread_barrier_wait (&L.start);
        for (size_t t = 0; t < L.n_workers; t++)
            pthread_join (L.workers[t].thread, NULL);
        pthread_barrier_destroy (&L.start);
    }
    if (csv)
        fclose (csv);
    for (size_t i = 0; results && i < n_steps; i++) {
        histogram_destroy (&results[i].total);
        histogram_destroy (&results[i].server);
        histogram_destroy (&results[i].network);
    }
    free (results);
    workers_destroy (&L);
    if (L.ctx)
        zmq_ctx_term (L.ctx);
    free (L.pool);
    free (L.expect);
    free (L.echo_payloads);
    free (opt.schedule_ns);
    const int others = procs_finish (&opt);
    return others > exit_code ? others : exit_code;
}
