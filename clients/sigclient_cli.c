/* sigclient: one-shot requests to sigserve from a shell (infer, health, models).
 * Exit codes: 0 ok, 1 the server answered with an error status or is not ready, 2 usage or input error,
 * 3 timeout, transport or protocol error. */
#include "clock.h"
#include "floatlist.h"
#include "latency.h"
#include "rng.h"
#include "sigclient.h"
#include "sigclient_sock.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

enum { EXIT_OK = 0, EXIT_STATUS = 1, EXIT_USAGE = 2, EXIT_TRANSPORT = 3 };

#define DEFAULT_ENDPOINT "tcp://127.0.0.1:5555"
#define MAX_RANDOM_FEATURES (1u << 28)
#define MAX_REPEAT 100000000ull

#define SYNOPSIS \
    "usage: sigclient [--endpoint E]... [--timeout MS] [--retry N]\n" \
    "                 [--engine zmtp|libzmq] [--curve-server FILE --curve-client FILE_secret] COMMAND\n" \
    "  infer --model M (--file F | --stdin | --random N) [--rows R] [--seed S]\n" \
    "        [--repeat K [--warmup W]] [--deadline-us D]\n" \
    "  infer --model M --stream ID [--step N]\n" \
    "        (--file F | --stdin | --random N [--repeat K [--warmup W]]) [--deadline-us D]\n" \
    "  health\n" \
    "  models\n" \
    "       sigclient --help | --version\n"

static const char *s_usage =
    SYNOPSIS
    "\n"
    "options:\n"
    "  --endpoint E     server endpoint, repeat for several (default " DEFAULT_ENDPOINT "):\n"
    "                   tcp://HOST:PORT, ipc://PATH, or dns://NAME:PORT for every address behind\n"
    "                   NAME, resolved again every 5 s\n"
    "  --timeout MS     wait at most MS ms for each reply (default 5000)\n"
    "  --retry N        send a request again, up to N times (0 to 16, default 0), when it is\n"
    "                   answered STATUS_UNAVAILABLE or not answered within the timeout\n"
    "  --engine E       what moves the messages (default zmtp): zmtp, sigserve's own ZeroMQ\n"
    "                   engine, where this process writes and reads its sockets itself and a\n"
    "                   request goes only to an endpoint that is up; or libzmq, a libzmq DEALER\n"
    "                   whose I/O thread moves every message and which queues a request for an\n"
    "                   endpoint that is not up yet. Both speak ZeroMQ to any server\n"
    "  --curve-server FILE\n"
    "                   CURVE: the server's public certificate (from sigserve --keygen)\n"
    "  --curve-client FILE_secret\n"
    "                   CURVE: this client's secret certificate; the server must allow its key\n"
    "  --model M        the model to run\n"
    "  --file F         features from F ('-': stdin): floats separated by spaces, commas or\n"
    "                   newlines, R x the model's input size, row-major; '#' starts a comment\n"
    "  --stdin          features from standard input, as for --file\n"
    "  --random N       N features per row, uniform in [-1, 1), from seed S\n"
    "  --rows R         rows in the request (default 1)\n"
    "  --seed S         seed for --random (default 1)\n"
    "  --repeat K       send K requests one after another; print round-trip and server-time\n"
    "                   p50 p90 p99 p99.9 min max mean sd (us) on stderr\n"
    "  --warmup W       with --repeat: send W more requests first and leave them out (default 0)\n"
    "  --deadline-us D  the server drops the request if still queued after D us (default: none)\n"
    "  --stream ID      recurrent models: send the features as steps of stream ID (1 or more), in\n"
    "                   order, one request a step, each step the model's step_size values (from\n"
    "                   the server's model list): --file/--stdin hold the steps one after another\n"
    "                   (one a line, by habit), --random N --repeat K sends K random steps of N.\n"
    "                   Prints one line of outputs per step. Every step of a stream goes to the\n"
    "                   same server, and none is sent twice (--retry does not apply to them)\n"
    "  --step N         with --stream: the first step's number (default 1: a new stream; the\n"
    "                   server refuses a step that is not the one it expects, naming it); the\n"
    "                   steps after it count up from there. 0 sends the steps unnumbered\n"
    "  --help           this text\n"
    "  --version        print sigclient's version, libzmq's and the engines, then exit\n"
    "\n"
    "infer prints the outputs on stdout, one row (or stream step) per line, and the timings on stderr\n"
    "(round trips and server times in microseconds, the server's stages in nanoseconds).\n"
    "exit codes: 0 ok, 1 the server replied with an error status (or is not ready), 2 usage or input error,\n"
    "3 timeout or transport error.\n";

typedef struct {
    const char **endpoints;     /* argv entries, borrowed */
    size_t endpoint_count;
    int timeout_ms;
    int retry;
    sigclient_engine_t engine;  /* --engine */
    const char *curve_server;   /* certificate files, borrowed; both or neither */
    const char *curve_client;
    const char *command;
    const char *model;
    const char *file;           /* "-" for stdin */
    uint64_t random_n;          /* 0: not given */
    uint64_t rows;
    uint64_t seed;
    uint64_t repeat;
    uint64_t warmup;
    uint64_t deadline_us;
    uint64_t stream_id;         /* 0: not a stream */
    uint64_t step;              /* the first step's number (--step; default 1) */
    bool rows_given, step_given, repeat_given, warmup_given;
    int infer_options;          /* how many infer-only options were given */
} options_t;

static int s_usage_error (const char *fmt, const char *arg)
{
    fprintf (stderr, "sigclient: ");
    fprintf (stderr, fmt, arg);
    fprintf (stderr, "\n%s(sigclient --help describes the options)\n", SYNOPSIS);
    return EXIT_USAGE;
}

/* A whole decimal number in [MIN, MAX]. */
static int s_parse_u64 (const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!text || !isdigit ((unsigned char) *text)) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull (text, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

/* Parses the command line into OPTS; returns -1 to go on, or an exit code. */
static int s_parse_options (int argc, char **argv, options_t *opts)
{
    enum { O_ENDPOINT = 256, O_TIMEOUT, O_MODEL, O_FILE, O_STDIN, O_RANDOM, O_ROWS, O_SEED,
           O_REPEAT, O_WARMUP, O_DEADLINE, O_HELP, O_VERSION, O_RETRY, O_CURVE_SERVER, O_CURVE_CLIENT,
           O_STREAM, O_STEP, O_ENGINE };
    static const struct option longopts[] = {
        { "endpoint", required_argument, NULL, O_ENDPOINT },
        { "timeout", required_argument, NULL, O_TIMEOUT },
        { "model", required_argument, NULL, O_MODEL },
        { "file", required_argument, NULL, O_FILE },
        { "stdin", no_argument, NULL, O_STDIN },
        { "random", required_argument, NULL, O_RANDOM },
        { "rows", required_argument, NULL, O_ROWS },
        { "seed", required_argument, NULL, O_SEED },
        { "repeat", required_argument, NULL, O_REPEAT },
        { "warmup", required_argument, NULL, O_WARMUP },
        { "deadline-us", required_argument, NULL, O_DEADLINE },
        { "retry", required_argument, NULL, O_RETRY },
        { "curve-server", required_argument, NULL, O_CURVE_SERVER },
        { "curve-client", required_argument, NULL, O_CURVE_CLIENT },
        { "stream", required_argument, NULL, O_STREAM },
        { "step", required_argument, NULL, O_STEP },
        { "engine", required_argument, NULL, O_ENGINE },
        { "help", no_argument, NULL, O_HELP },
        { "version", no_argument, NULL, O_VERSION },
        { NULL, 0, NULL, 0 },
    };
    *opts = (options_t) { .timeout_ms = SIGCLIENT_DEFAULT_TIMEOUT_MS, .rows = 1, .seed = 1, .repeat = 1, .step = 1 };
    opts->endpoints = calloc ((size_t) argc + 1, sizeof *opts->endpoints);
    if (!opts->endpoints) { fprintf (stderr, "sigclient: out of memory\n"); return EXIT_TRANSPORT; }
    int sources = 0, c;
    uint64_t v;
    opterr = 0;
    while ((c = getopt_long (argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
            case O_ENDPOINT: opts->endpoints[opts->endpoint_count++] = optarg; break;
            case O_TIMEOUT:
                if (s_parse_u64 (optarg, 1, INT_MAX, &v)) return s_usage_error ("bad --timeout '%s'", optarg);
                opts->timeout_ms = (int) v;
                break;
            case O_RETRY:
                if (s_parse_u64 (optarg, 0, SIGCLIENT_MAX_RETRY, &v))
                    return s_usage_error ("bad --retry '%s' (0 to 16)", optarg);
                opts->retry = (int) v;
                break;
            case O_ENGINE:
                if (client_sock_engine_parse (optarg, &opts->engine) != 0)
                    return s_usage_error ("bad --engine '%s' (zmtp or libzmq)", optarg);
                break;
            case O_CURVE_SERVER: opts->curve_server = optarg; break;
            case O_CURVE_CLIENT: opts->curve_client = optarg; break;
            case O_MODEL: opts->model = optarg; opts->infer_options++; break;
            case O_FILE: opts->file = optarg; sources++; opts->infer_options++; break;
            case O_STDIN: opts->file = "-"; sources++; opts->infer_options++; break;
            case O_RANDOM:
                if (s_parse_u64 (optarg, 1, MAX_RANDOM_FEATURES, &opts->random_n))
                    return s_usage_error ("bad --random '%s' (1 to 268435456 features per row)", optarg);
                sources++;
                opts->infer_options++;
                break;
            case O_ROWS:
                if (s_parse_u64 (optarg, 1, UINT32_MAX, &opts->rows))
                    return s_usage_error ("bad --rows '%s'", optarg);
                opts->rows_given = true;
                opts->infer_options++;
                break;
            case O_SEED:
                if (s_parse_u64 (optarg, 0, UINT64_MAX, &opts->seed))
                    return s_usage_error ("bad --seed '%s'", optarg);
                opts->infer_options++;
                break;
            case O_REPEAT:
                if (s_parse_u64 (optarg, 1, MAX_REPEAT, &opts->repeat))
                    return s_usage_error ("bad --repeat '%s'", optarg);
                opts->repeat_given = true;
                opts->infer_options++;
                break;
            case O_WARMUP:
                if (s_parse_u64 (optarg, 0, MAX_REPEAT, &opts->warmup))
                    return s_usage_error ("bad --warmup '%s'", optarg);
                opts->warmup_given = true;
                opts->infer_options++;
                break;
            case O_DEADLINE:
                if (s_parse_u64 (optarg, 0, UINT32_MAX, &opts->deadline_us))
                    return s_usage_error ("bad --deadline-us '%s'", optarg);
                opts->infer_options++;
                break;
            case O_STREAM:
                if (s_parse_u64 (optarg, 1, UINT64_MAX, &opts->stream_id))
                    return s_usage_error ("bad --stream '%s' (a stream id from 1 to 18446744073709551615)", optarg);
                opts->infer_options++;
                break;
            case O_STEP:
                if (s_parse_u64 (optarg, 0, UINT64_MAX, &opts->step))
                    return s_usage_error ("bad --step '%s'", optarg);
                opts->step_given = true;
                opts->infer_options++;
                break;
            case 'h': case O_HELP: fputs (s_usage, stdout); return EXIT_OK;
            case O_VERSION: {
                int major, minor, patch;
                zmq_version (&major, &minor, &patch);
                printf ("sigclient %s (libzmq %d.%d.%d; engines zmtp, the default, and libzmq)\n", SIGSERVE_VERSION,
                        major, minor, patch);
                return EXIT_OK;
            }
            case ':': return s_usage_error ("%s needs a value", argv[optind - 1]);
            default: return s_usage_error ("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) return s_usage_error ("%s", "no command");
    opts->command = argv[optind];
    if (optind + 1 < argc) return s_usage_error ("unexpected argument '%s'", argv[optind + 1]);
    if (opts->endpoint_count == 0) opts->endpoints[opts->endpoint_count++] = DEFAULT_ENDPOINT;
    if (!opts->curve_server != !opts->curve_client)
        return s_usage_error ("%s", "CURVE needs both --curve-server and --curve-client");
    if (strcmp (opts->command, "infer") == 0) {
        if (!opts->model) return s_usage_error ("%s", "infer needs --model");
        if (sources != 1) return s_usage_error ("%s", "infer needs one of --file, --stdin, --random");
        if (opts->seed != 1 && !opts->random_n) return s_usage_error ("%s", "--seed is only for --random");
        if (opts->step_given && !opts->stream_id) return s_usage_error ("%s", "--step is only for --stream");
        if (opts->stream_id && opts->rows_given)
            return s_usage_error ("%s", "--rows: a stream step is one row; --stream takes no --rows");
        if (opts->stream_id && !opts->random_n && (opts->repeat_given || opts->warmup_given))
            return s_usage_error ("%s", "--repeat and --warmup with --stream are for --random: the steps of "
                                        "--file or --stdin are the file's");
    }
    else if (strcmp (opts->command, "health") == 0 || strcmp (opts->command, "models") == 0) {
        if (opts->infer_options) return s_usage_error ("options of infer given to '%s'", opts->command);
    }
    else
        return s_usage_error ("unknown command '%s'", opts->command);
    return -1;
}

/* ---- features ---- */

static int s_load_features (const options_t *opts, float **out, size_t *count)
{
    if (opts->random_n) {
        if (opts->random_n > SIZE_MAX / sizeof (float) / opts->rows
            || opts->random_n * opts->rows > MAX_RANDOM_FEATURES) {
            fprintf (stderr, "sigclient: --random %llu x --rows %llu is too many features\n",
                     (unsigned long long) opts->random_n, (unsigned long long) opts->rows);
            return EXIT_USAGE;
        }
        size_t n = (size_t) (opts->random_n * opts->rows);
        float *vals = malloc (n * sizeof *vals);
        if (!vals) { fprintf (stderr, "sigclient: out of memory\n"); return EXIT_TRANSPORT; }
        uint64_t state = opts->seed;
        for (size_t i = 0; i < n; i++) vals[i] = rng_uniform (&state, -1.0f, 1.0f);
        *out = vals;
        *count = n;
        return EXIT_OK;
    }
    /* nan and inf are sent as they are: the server's STATUS_BAD_VALUE is for the user to see */
    char err[512];
    if (floatlist_read (opts->file, true, out, count, err, sizeof err) != 0) {
        fprintf (stderr, "sigclient: %s\n", err);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* ---- commands ---- */

/* Reports the client's last failure (after CONTEXT, "" or "stream 7 step 3: "); returns the exit
 * code it maps to. */
static int s_client_failure_in (const sigclient_t *client, const char *context)
{
    int status = sigclient_last_status (client);
    if (status > 0) {
        /* sigclient_error reads "server replied STATUS_X: text"; the CLI's form is shorter. */
        const char *text = sigclient_error (client);
        const char *colon = strstr (text, ": ");
        fprintf (stderr, "sigclient: %s%s: %s\n", context, sigclient_status_name (status), colon ? colon + 2 : text);
        return EXIT_STATUS;
    }
    const char *text = sigclient_error (client);
    if (status == SIGCLIENT_ERR_SECURITY) {
        /* the library's words end with what to give libsigclient, in parentheses: ours instead */
        const char *hint = strrchr (text, '(');
        int keep = hint && hint > text ? (int) (hint - text - 1) : (int) strlen (text);
        const bool keys = strstr (text, "has CURVE keys") != NULL;
        fprintf (stderr, "sigclient: %s%.*s (%s)\n", context, keep, text,
                 keys ? "leave out --curve-server and --curve-client"
                      : "pass --curve-server FILE, the server's public certificate, and --curve-client "
                        "FILE_secret, this client's");
        return EXIT_TRANSPORT;
    }
    fprintf (stderr, "sigclient: %s%s\n", context, text);
    return status == SIGCLIENT_ERR_ARGUMENT ? EXIT_USAGE : EXIT_TRANSPORT;
}

static int s_client_failure (const sigclient_t *client)
{
    return s_client_failure_in (client, "");
}

/* The server's model list (grown to fit); 0, or -1 with the client's failure to report. */
static int s_list (sigclient_t *client, sigclient_model_info_t **models, size_t *count)
{
    size_t cap = 64;
    *models = malloc (cap * sizeof **models);
    if (!*models) return -1;
    int r = sigclient_list_models (client, *models, cap, count);
    if (r != 0 && sigclient_last_status (client) == SIGCLIENT_ERR_CAPACITY) {
        sigclient_model_info_t *grown = realloc (*models, *count * sizeof **models);
        if (grown) {
            *models = grown;
            r = sigclient_list_models (client, *models, *count, count);
        }
    }
    if (r != 0) {
        free (*models);
        *models = NULL;
    }
    return r;
}

/* MODEL's entry in the server's list: 0 when listed, 1 when not, -1 when there is no list. */
static int s_find_model (sigclient_t *client, const char *model, sigclient_model_info_t *out)
{
    sigclient_model_info_t *models;
    size_t count = 0;
    if (s_list (client, &models, &count) != 0) return -1;
    int rc = 1;
    for (size_t i = 0; i < count && rc; i++)
        if (strcmp (models[i].name, model) == 0) {
            *out = models[i];
            rc = 0;
        }
    free (models);
    return rc;
}

/* After STATUS_BAD_SHAPE for N values: what the user probably meant, from the model's sizes (the
 * server's text stays as it is; this line comes after it). Nothing when the sizes say nothing. */
static void s_shape_hint (sigclient_t *client, const options_t *opts, size_t n)
{
    sigclient_model_info_t m;
    if (s_find_model (client, opts->model, &m) != 0 || m.input_size == 0) return;
    /* a model with a window (a recurrent type: its list entry gives a step size) keeps streams */
    char title[sizeof m.type];
    for (size_t i = 0; i < sizeof title; i++)
        title[i] = (char) toupper ((unsigned char) m.type[i]);
    if (!opts->rows_given && n % m.input_size == 0 && n / m.input_size > 1) {
        size_t rows = n / m.input_size;
        if (opts->random_n)
            fprintf (stderr, "sigclient: hint: --random gives N features per row, and model \"%s\" takes %u: "
                             "--random %u --rows %zu\n", opts->model, m.input_size, m.input_size, rows);
        else
            fprintf (stderr, "sigclient: hint: %zu values are %zu rows of model \"%s\"'s %u inputs: add --rows %zu%s\n",
                     n, rows, opts->model, m.input_size, rows, m.max_rows && rows > m.max_rows
                     ? " (more than its max_rows: split them over several requests)" : "");
    }
    else if (m.step_size && n == (size_t) opts->rows * m.step_size)
        fprintf (stderr, "sigclient: hint: %zu values are one step of %s model \"%s\" (window %u x step_size %u): "
                         "add --stream ID to send them as a step of stream ID\n", n, title, opts->model, m.window,
                 m.step_size);
}

static void s_print_outputs (const float *outputs, size_t n, uint32_t rows)
{
    size_t per_row = rows && n % rows == 0 ? n / rows : n;
    for (size_t i = 0; i < n; i++)
        printf ("%.9g%s", (double) outputs[i], (i + 1) % per_row == 0 || i + 1 == n ? "\n" : " ");
}

/* With K > 1 samples: the round-trip and server-time percentiles on stderr. */
static void s_print_summary (double *round_trips, double *server_times, uint64_t k, uint64_t warmup)
{
    if (k <= 1) return;
    latency_summary_t rt, srv;
    latency_summarize (round_trips, k, &rt);
    latency_summarize (server_times, k, &srv);
    const struct { const char *what; const latency_summary_t *s; } lines[] = { { "round_trip_us", &rt }, { "server_us", &srv } };
    for (int l = 0; l < 2; l++)
        fprintf (stderr, "repeat=%llu warmup=%llu %s p50=%.1f p90=%.1f p99=%.1f p99.9=%.1f min=%.1f max=%.1f "
                 "mean=%.1f sd=%.1f\n", (unsigned long long) k, (unsigned long long) warmup,
                 lines[l].what, lines[l].s->p50, lines[l].s->p90, lines[l].s->p99, lines[l].s->p999,
                 lines[l].s->min, lines[l].s->max, lines[l].s->mean, lines[l].s->sd);
}

static void s_print_timing (const sigclient_result_t *result, double round_trip_us)
{
    fprintf (stderr, "request_id=%llu status=%s rows=%u queue_ns=%llu compute_ns=%llu server_ns=%llu "
             "round_trip_us=%.1f model_version=%s backend=%s",
             (unsigned long long) result->request_id, sigclient_status_name (result->status), result->rows,
             (unsigned long long) result->queue_ns, (unsigned long long) result->compute_ns,
             (unsigned long long) result->server_ns, round_trip_us, result->model_version,
             result->backend[0] ? result->backend : "-");
}

/* --stream: the features as steps of one stream, in order, one output line per step. The step
 * size comes from the server's model list (unknown for a model it does not list as an LSTM: then
 * the whole input is one step, and the server's answer says what is wrong). */
static int s_infer_stream (sigclient_t *client, const options_t *opts)
{
    sigclient_model_info_t m;
    int found = s_find_model (client, opts->model, &m);
    if (found < 0) return s_client_failure (client);
    size_t step_size = found == 0 ? m.step_size : 0;     /* 0: not a model with a window */
    float *features = NULL;
    size_t n_features = 0, n_steps;
    uint64_t warmup = 0;
    if (opts->random_n) {
        step_size = (size_t) opts->random_n;
        n_steps = (size_t) (opts->warmup + opts->repeat);
        warmup = opts->warmup;
        if (!(features = malloc (step_size * sizeof *features))) { fprintf (stderr, "sigclient: out of memory\n"); return EXIT_TRANSPORT; }
    } else {
        int rc = s_load_features (opts, &features, &n_features);
        if (rc != EXIT_OK) return rc;
        if (step_size == 0) step_size = n_features;
        if (n_features % step_size != 0) {
            fprintf (stderr, "sigclient: %s: %zu values are not a whole number of steps of model \"%s\" (step_size %zu): "
                             "%zu steps and %zu values over\n", strcmp (opts->file, "-") == 0 ? "stdin" : opts->file,
                     n_features, opts->model, step_size, n_features / step_size, n_features % step_size);
            free (features);
            return EXIT_USAGE;
        }
        n_steps = n_features / step_size;
    }
    sigclient_set_deadline_us (client, (uint32_t) opts->deadline_us);
    size_t cap = found == 0 && m.output_size > 1024 ? m.output_size : 1024, n_outputs = 0;
    float *outputs = malloc (cap * sizeof *outputs);
    double *round_trips = malloc (n_steps * sizeof *round_trips);
    double *server_times = malloc (n_steps * sizeof *server_times);
    sigclient_stream_t *stream = sigclient_stream_new (client, opts->model, opts->stream_id);
    sigclient_result_t result = { 0 };
    double round_trip = 0;
    int rc = EXIT_OK;
    if (!outputs || !round_trips || !server_times || !stream) { fprintf (stderr, "sigclient: out of memory\n"); rc = EXIT_TRANSPORT; goto done; }
    sigclient_stream_set_next_step (stream, opts->step);
    uint64_t state = opts->seed, measured = 0;
    for (size_t k = 0; k < n_steps; k++) {
        const float *f = features + (opts->random_n ? 0 : k * step_size);
        if (opts->random_n)
            for (size_t i = 0; i < step_size; i++) features[i] = rng_uniform (&state, -1.0f, 1.0f);
        uint64_t number = sigclient_stream_next_step (stream);
        double start = clock_now_us ();
        int r = sigclient_stream_step (stream, f, step_size, outputs, cap, &n_outputs, &result);
        round_trip = clock_now_us () - start;
        if (r != 0) {
            char context[96];
            snprintf (context, sizeof context, "stream %llu step %llu: ", (unsigned long long) opts->stream_id,
                      (unsigned long long) number);
            fflush (stdout);
            rc = s_client_failure_in (client, context);
            goto done;
        }
        s_print_outputs (outputs, n_outputs, 1);
        if (k >= warmup) {
            round_trips[measured] = round_trip;
            server_times[measured++] = (double) result.server_ns / 1e3;
        }
    }
    fflush (stdout);
    s_print_timing (&result, round_trip);
    fprintf (stderr, " stream_id=%llu step=%llu\n", (unsigned long long) opts->stream_id,
             (unsigned long long) (sigclient_stream_next_step (stream) ? sigclient_stream_next_step (stream) - 1 : 0));
    s_print_summary (round_trips, server_times, measured, warmup);
done:
    sigclient_stream_destroy (&stream);
    free (server_times);
    free (round_trips);
    free (outputs);
    free (features);
    return rc;
}

static int s_infer (sigclient_t *client, const options_t *opts)
{
    float *features = NULL;
    size_t n_features = 0;
    int rc = s_load_features (opts, &features, &n_features);
    if (rc != EXIT_OK) return rc;
    sigclient_set_deadline_us (client, (uint32_t) opts->deadline_us);
    size_t cap = 1 << 16, n_outputs = 0;
    float *outputs = malloc (cap * sizeof *outputs);
    double *round_trips = malloc (opts->repeat * sizeof *round_trips);
    double *server_times = malloc (opts->repeat * sizeof *server_times);
    sigclient_result_t result;
    if (!outputs || !round_trips || !server_times) { fprintf (stderr, "sigclient: out of memory\n"); rc = EXIT_TRANSPORT; goto done; }
    for (uint64_t k = 0; k < opts->warmup + opts->repeat; k++) {
        /* Warm-up requests overwrite slot 0; only the last repeat requests are kept. */
        uint64_t i = k < opts->warmup ? 0 : k - opts->warmup;
        double start = clock_now_us ();
        int r = sigclient_infer (client, opts->model, features, n_features, (uint32_t) opts->rows,
                                 outputs, cap, &n_outputs, &result);
        if (r != 0 && sigclient_last_status (client) == SIGCLIENT_ERR_CAPACITY) {
            /* More outputs than we guessed: make room and ask again (inference is idempotent). */
            float *grown = realloc (outputs, n_outputs * sizeof *outputs);
            if (!grown) { fprintf (stderr, "sigclient: out of memory\n"); rc = EXIT_TRANSPORT; goto done; }
            outputs = grown;
            cap = n_outputs;
            start = clock_now_us ();
            r = sigclient_infer (client, opts->model, features, n_features, (uint32_t) opts->rows,
                                 outputs, cap, &n_outputs, &result);
        }
        round_trips[i] = clock_now_us () - start;
        server_times[i] = (double) result.server_ns / 1e3;
        if (r != 0) {
            rc = s_client_failure (client);
            if (sigclient_last_status (client) == SIGCLIENT_BAD_SHAPE) s_shape_hint (client, opts, n_features);
            goto done;
        }
    }
    s_print_outputs (outputs, n_outputs, result.rows ? result.rows : (uint32_t) opts->rows);
    fflush (stdout);
    s_print_timing (&result, round_trips[opts->repeat - 1]);
    fprintf (stderr, "\n");
    s_print_summary (round_trips, server_times, opts->repeat, opts->warmup);
done:
    free (server_times);
    free (round_trips);
    free (outputs);
    free (features);
    return rc;
}

static int s_health (sigclient_t *client)
{
    sigclient_health_t health;
    if (sigclient_health (client, &health) != 0) return s_client_failure (client);
    printf ("live=%d ready=%d version=%s\n", health.live, health.ready, health.version);
    /* A probe (Docker, Kubernetes) reads the exit code: not ready is a failure. */
    return health.live && health.ready ? EXIT_OK : EXIT_STATUS;
}

static int s_width (size_t current, const char *text)
{
    size_t n = strlen (text);
    return (int) (n > current ? n : current);
}

static int s_models (sigclient_t *client)
{
    sigclient_model_info_t *models;
    size_t count = 0;
    if (s_list (client, &models, &count) != 0) {
        if (sigclient_last_status (client) == SIGCLIENT_OK) { fprintf (stderr, "sigclient: out of memory\n"); return EXIT_TRANSPORT; }
        return s_client_failure (client);
    }
    int wn = 4, wv = 7, wb = 7, wk = 6;
    for (size_t i = 0; i < count; i++) {
        wn = s_width ((size_t) wn, models[i].name);
        wv = s_width ((size_t) wv, models[i].version);
        wb = s_width ((size_t) wb, models[i].backend);
        wk = s_width ((size_t) wk, models[i].kernel);
    }
    printf ("%-*s  %-*s  %-*s  %-*s  %6s  %6s  %8s  %-9s  %-4s  %6s  %9s\n", wn, "name", wv, "version", wb, "backend",
            wk, "kernel", "input", "output", "max_rows", "available", "type", "window", "step_size");
    for (size_t i = 0; i < count; i++) {
        const sigclient_model_info_t *m = &models[i];
        char window[16] = "-", step[16] = "-";
        if (m->window) snprintf (window, sizeof window, "%u", m->window);
        if (m->step_size) snprintf (step, sizeof step, "%u", m->step_size);
        printf ("%-*s  %-*s  %-*s  %-*s  %6u  %6u  %8u  %-9s  %-4s  %6s  %9s\n", wn, m->name, wv, m->version, wb,
                m->backend, wk, m->kernel, m->input_size, m->output_size, m->max_rows, m->available ? "yes" : "no",
                m->type[0] ? m->type : "-", window, step);
    }
    free (models);
    return EXIT_OK;
}

int main (int argc, char **argv)
{
    options_t opts;
    int rc = s_parse_options (argc, argv, &opts);
    sigclient_curve_keys_t keys;
    char why[512];
    if (rc < 0 && opts.curve_server
        && sigclient_curve_keys_load (opts.curve_server, opts.curve_client, &keys, why, sizeof why) != 0) {
        fprintf (stderr, "sigclient: %s\n", why);
        rc = EXIT_USAGE;
    }
    if (rc < 0) {
        sigclient_t *client = sigclient_new_engine (opts.endpoints, opts.endpoint_count, opts.timeout_ms, opts.engine,
                                                    opts.curve_server ? &keys : NULL);
        if (client) sigclient_set_retry (client, opts.retry);
        if (!client) {
            /* Name the endpoint the engine rejects: try them one at a time. */
            int err = errno;
            const char *bad = opts.endpoints[0];
            for (size_t i = 0; i < opts.endpoint_count; i++) {
                sigclient_t *probe = sigclient_new_engine (&opts.endpoints[i], 1, 1, opts.engine, NULL);
                if (!probe) { err = errno; bad = opts.endpoints[i]; break; }
                sigclient_destroy (&probe);
            }
            fprintf (stderr, "sigclient: cannot connect to '%s': %s\n", bad, strerror (err));
            rc = err == EINVAL || err == EPROTONOSUPPORT ? EXIT_USAGE : EXIT_TRANSPORT;
        }
        else {
            if (strcmp (opts.command, "infer") == 0) rc = opts.stream_id ? s_infer_stream (client, &opts) : s_infer (client, &opts);
            else if (strcmp (opts.command, "health") == 0) rc = s_health (client);
            else rc = s_models (client);
            sigclient_destroy (&client);
        }
    }
    free (opts.endpoints);
    return rc;
}
