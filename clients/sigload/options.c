/* sigload's command line: the usage text, option parsing and checking, the thread default, and
 * the effective settings that --dry-run prints. */
#define _GNU_SOURCE
#include "sigload.h"
#include "sigclient.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYNOPSIS \
    "usage: sigload --endpoint E [--endpoint E2 ...] --model M\n" \
    "               [--rate R[,R2,...] [--arrivals constant|poisson] | --concurrency N[,N2,...]\n" \
    "                | --schedule FILE] [--streams N [--stream-base B]]\n" \
    "               [--warmup S] [--duration S | --requests N] [--connections C] [--threads T]\n" \
    "               [--rows R] [--features FILE] [--expect FILE] [--floor E] [--out DIR] [options]\n" \
    "               [--curve-server FILE --curve-client FILE_secret] [--engine zmtp|libzmq]\n" \
    "       sigload --endpoint E --echo [--rate ... | --concurrency ...] [options]\n" \
    "       sigload --serve-echo E [--serve-echo E2 ...] [--engine zmtp|libzmq]\n"

static const char *s_help =
    SYNOPSIS
    "\n"
    "Drives sigserve with InferRequests over ZeroMQ DEALER sockets, checks every reply, and reports\n"
    "the latency distribution of each step of a sweep: a markdown table on stdout and, with --out,\n"
    "HdrHistogram .hgrm files, a CSV summary and PNG plots.\n"
    "\n"
    "Load (one step per value; a value may end in k, as in 10k):\n"
    "  --rate R[,R2,...]     open loop: R requests/s in all, sent on schedule whatever the replies\n"
    "                        do. Latency is measured from each request's scheduled send time, so a\n"
    "                        server or a sender that falls behind shows as latency instead of being\n"
    "                        hidden (no coordinated omission).\n"
    "  --arrivals A          open loop: constant (evenly spaced, the default) or poisson\n"
    "                        (exponential gaps).\n"
    "  --schedule FILE       open loop: replay FILE's send times instead of a rate, one step named\n"
    "                        \"schedule\". One offset per line, in microseconds from the start of the\n"
    "                        step: absolute times, not the intervals between requests that\n"
    "                        perf_analyzer's --request-intervals takes (\"0\", \"250\", \"250\", \"1000\"\n"
    "                        sends two requests together at 250 us); offsets must not decrease;\n"
    "                        '#' starts a comment, blank lines are skipped; an error names the line.\n"
    "                        Latency is measured from each listed time, as for --rate. The\n"
    "                        requests are the file's (no --duration or --requests); with --warmup S\n"
    "                        those listed before S are sent and checked, not recorded (default 0).\n"
    "  --concurrency N[,N2,...]\n"
    "                        closed loop: N requests outstanding at all times; the next request\n"
    "                        leaves when a reply comes. Latency is from the actual send, so a slow\n"
    "                        reply hides the queueing behind it; the output says \"closed loop\".\n"
    "                        Without --rate or --concurrency: --concurrency 1.\n"
    "  --warmup S            seconds of load before each step's measurement: sent and checked,\n"
    "                        not recorded (default 1).\n"
    "  --duration S          seconds measured per step (default 5).\n"
    "  --requests N          measure N requests per step instead of a duration.\n"
    "  --endpoint E          a server: tcp://HOST:PORT, ipc://PATH, or dns://NAME:PORT for every\n"
    "                        address behind NAME (resolved once, at the start; addresses that do\n"
    "                        not answer within 2 s are left out). Repeat for several.\n"
    "  --connections C       DEALER sockets (default 1). Connection i connects to endpoint\n"
    "                        i mod E; with fewer connections than endpoints each connects to\n"
    "                        several and spreads its requests over them (round-robin; with\n"
    "                        --engine zmtp over those whose connection is up).\n"
    "  --threads T           worker threads, each owning every T-th connection. Default: the\n"
    "                        smaller of C and the number of CPUs this process may run on (its\n"
    "                        affinity mask, as taskset, numactl or a container's cpuset set it;\n"
    "                        not the machine's core count): threads that wait by spinning starve\n"
    "                        each other on fewer CPUs. --dry-run prints the count chosen.\n"
    "  --engine E            what moves the messages, for the load, the --floor and --echo steps,\n"
    "                        the readiness probes and --serve-echo (default zmtp): zmtp, sigserve's\n"
    "                        own ZeroMQ engine, where each worker thread writes and reads its\n"
    "                        connections' sockets itself (ppoll on their fds, or --busy-poll) and a\n"
    "                        request goes only to an endpoint whose connection is up; or libzmq,\n"
    "                        libzmq DEALERs whose I/O threads (--io-threads) move every message.\n"
    "                        The table and summary.csv (column engine) say which ran.\n"
    "  --io-threads N        libzmq's I/O threads, with --engine libzmq (default 1).\n"
    "  --curve-server FILE   CURVE: the server's public certificate (from sigserve --keygen).\n"
    "  --curve-client FILE_secret\n"
    "                        CURVE: this client's secret certificate; the server must allow its\n"
    "                        key. Both or neither; every connection (probes too) uses them.\n"
    "  --timeout MS          a request not answered MS ms after it was sent, or not sent within MS\n"
    "                        ms of its scheduled time, counts as a timeout (default 2000).\n"
    "  --max-outstanding N   requests in flight per connection, rounded up to a power of two\n"
    "                        (default 8192, 32 bytes each); a full connection holds the sender\n"
    "                        back, which shows as latency in open loop.\n"
    "  --busy-poll           spin instead of sleeping between sends and replies (a core per thread).\n"
    "  --spin-us US          open loop: wake US us before each scheduled send and spin the rest\n"
    "                        (default 50): a sleeping thread wakes late, by tens of us on a VM,\n"
    "                        and a late send adds to the latency measured from the schedule.\n"
    "                        Only while the gap between a thread's sends is at least 10 x US, so\n"
    "                        that spinning takes at most a tenth of its core; 0: never spin.\n"
    "\n"
    "Requests:\n"
    "  --model M[,M2,...]    the model to run (required unless --echo); several: request k goes to\n"
    "                        model k mod N (they must take the same input size; no --expect).\n"
    "  --streams N           recurrent models: every request is the next step of one of N streams\n"
    "                        (stream ids B..B+N-1), steps numbered from 1 (InferRequest.step), the\n"
    "                        way STAC-ML drives an LSTM. Stream k is carried by connection k mod C\n"
    "                        alone, so its steps reach one server in order; a thread sends to its\n"
    "                        streams in turn, each stream getting 1/N of --rate (open loop: steps are\n"
    "                        sent on schedule, never waiting for the stream's previous reply).\n"
    "                        Needs at least one stream per connection (N >= C), one --model and\n"
    "                        --rows 1; features are step_size values a request (the model list).\n"
    "                        Numbering carries on across the warm-up and the steps of a sweep; a\n"
    "                        reply whose status is not OK is counted by status as any other.\n"
    "  --stream-base B       the first stream id (default 1). The server keeps a stream until it\n"
    "                        has been idle for the model's stream_idle_s and expects a held stream's\n"
    "                        next step: a second run within that time needs other ids.\n"
    "  --rows R              rows per request (default 1).\n"
    "  --input-size N        features per row (default: the server's model list; 512 when the\n"
    "                        server does not list the model, or with --echo); with --streams,\n"
    "                        features per step (default: the model's step_size).\n"
    "  --features FILE       requests' features from FILE: floats separated by spaces, commas or\n"
    "                        newlines ('#' starts a comment), a multiple of rows x input size;\n"
    "                        requests cycle through them. Default: 64 random requests, uniform in\n"
    "                        [-1, 1), from --seed.\n"
    "  --expect FILE         check every OK reply's outputs against FILE: the expected outputs of\n"
    "                        each request of --features, in the same order and format.\n"
    "  --tolerance X         with --expect: |output - expected| <= X * max(1, |expected|)\n"
    "                        (default 1e-4). The first mismatch's text names the request, the\n"
    "                        output index, the expected and the received value.\n"
    "  --deadline-us D       the deadline sent with every request (default: none).\n"
    "  --seed S              seed of the random features and Poisson arrivals (default 1).\n"
    "\n"
    "Transport floor (a plain ZeroMQ echo of the same message size, same client, same run):\n"
    "  --serve-echo E        run an echo server on E (a ROUTER that returns every message as it\n"
    "                        came) until SIGINT or SIGTERM: with --engine zmtp one thread reads,\n"
    "                        echoes and writes every connection; with libzmq, a libzmq ROUTER.\n"
    "  --echo                the endpoints are such echo servers: send packed requests of the\n"
    "                        same size with the request id in their first 8 bytes; a reply is\n"
    "                        checked by size and id.\n"
    "  --floor E             before each step of the sweep, the same step against the echo\n"
    "                        endpoint E: the floor of that rate (or concurrency), measured beside\n"
    "                        it; its name starts with \"echo-\". A server's latency falls with the\n"
    "                        rate on many hosts (fewer sleeps between requests), so a floor\n"
    "                        measured at one rate is no floor at another.\n"
    "\n"
    "Output:\n"
    "  --out DIR             write DIR/<step>.hgrm (HdrHistogram percentile distribution of the\n"
    "                        total latency, in microseconds), DIR/summary.csv (one row per step,\n"
    "                        its verdicts included), DIR/plots.gp and, when gnuplot is installed,\n"
    "                        DIR/percentiles.png (every step's percentile spectrum) and\n"
    "                        DIR/latency_vs_throughput.png: a curve per kind of step joins the\n"
    "                        steps that did not saturate, and both axes are bounded by them; a\n"
    "                        saturated step (the rule of --stop-when-saturated) is never on a\n"
    "                        curve, but a red triangle at its achieved rate in a band of notes at\n"
    "                        the top of the graph, saying whose doing it was, why, and its p50 and\n"
    "                        p99 (unless every step saturated: then each is a point, joined to\n"
    "                        none; where more saturated than the band holds, one line each: who,\n"
    "                        its rate and p99). A step whose sender fell behind is circled, one\n"
    "                        under the floor measured beside it says so; the --floor steps are a\n"
    "                        dashed curve (a baseline for one step), drawn in the percentile plot\n"
    "                        in the color of their step; the legend is below the graph. Titles\n"
    "                        carry the host, the model, the connections (and --processes) and the\n"
    "                        date (UTC).\n"
    "  --stop-when-saturated stop the sweep after a step that achieved less than 90% of its\n"
    "                        target rate, saw errors, or whose p99 exceeded --saturation-p99.\n"
    "                        The floor steps are judged by the same rule (and stop nothing).\n"
    "  --saturation-p99 US   (default: 10 x the first step's p99, at least 1000 us; the first\n"
    "                        server step's with --floor, for the floor steps too).\n"
    "  --processes N         the load from N processes (1 to 16, default 1), where one process\n"
    "                        saturates before the server does (the table says so: see below):\n"
    "                        each carries 1/N of the rate (or concurrency), the connections, the\n"
    "                        threads and --requests; every step starts at one time in all of them,\n"
    "                        and their histograms and counts are merged into one table. Not with\n"
    "                        --schedule or --streams.\n"
    "  --quiet               no progress line on stderr (otherwise one per second in steps longer\n"
    "                        than 2 s, counting the warm-up and the measured part separately).\n"
    "  --dry-run             check the options, print the effective settings (the thread count\n"
    "                        among them) and exit without connecting.\n"
    "  --help                this text.\n"
    "\n"
    "Steps are named open-<rate>, closed-<concurrency> or schedule. The table gives, in microseconds, the\n"
    "percentiles of the total latency, and the means of the server's own time (server_ns in the\n"
    "replies), of the network time (round trip - server time: wire and both ZeroMQ stacks) and\n"
    "of the send lag (actual - scheduled send, open loop, of the OK replies: total = send lag +\n"
    "network + server). Achieved throughput is the measured requests answered divided by the time\n"
    "from the start of the measurement to the last answer. Errors are counted by status: the\n"
    "server's (STATUS_*), TIMEOUT, BAD_REPLY, UNMATCHED_ID (a reply whose request_id is not\n"
    "outstanding), OUTPUT_MISMATCH and SEND_FAILED.\n"
    "\n"
    "Whose doing. Open loop, each request's send lag is split: the time every connection was full\n"
    "(--max-outstanding requests outstanding, or a socket that took no more) is the server's\n"
    "back-pressure; the rest is sigload's own (its sender was late: its CPU, its other work). The\n"
    "column \"sigload lag mean\" is the own part's mean over every request sent. sigload fell\n"
    "behind when that mean is at least 50 us and a quarter of the mean latency, or when it left\n"
    "requests unsent within --timeout while a connection had room: its latencies then hold its own\n"
    "delay, not only the server's. The column \"saturated\" says no, no (sigload fell behind), or\n"
    "yes (server), yes (sigload), yes (sigload and server): a saturated step is sigload's when its\n"
    "sender fell behind, also the server's when the server said so (STATUS_OVERLOADED,\n"
    "DEADLINE_EXCEEDED, UNAVAILABLE) or held the sender back, the server's alone otherwise. A\n"
    "line below the table says why for each such step, and what to do (--processes, or cores of\n"
    "sigload's own). summary.csv has the same after its engine column: sigload_lag_mean_us,\n"
    "sigload_lag_max_us, held_lag_mean_us, unsent_sigload, unsent_held (requests not sent within\n"
    "--timeout, by cause; counted as TIMEOUT), saturated (0 or 1), saturated_by (-, server,\n"
    "sigload, sigload+server), sigload_behind (0 or 1), saturation and sigload_behind_why (the\n"
    "reasons, commas written as semicolons).\n"
    "\n"
    "Exit status: 0 every reply OK; 1 errors were seen (an error status, a timeout, a bad or\n"
    "unmatched reply, an output mismatch; warm-up included) or the run was interrupted;\n"
    "2 usage error.\n";

static int s_usage_error (const char *fmt, const char *arg)
{
    fprintf (stderr, "sigload: ");
    fprintf (stderr, fmt, arg);
    fprintf (stderr, "\n%s(sigload --help describes the options)\n", SYNOPSIS);
    return EXIT_USAGE;
}

/* A number >= MIN and <= MAX, with an optional k (x1000) or M (x1e6) suffix when SUFFIX. */
static int s_parse_number (const char *text, double min, double max, bool suffix, double *out)
{
    if (!text || !*text)
        return -1;
    char *end;
    errno = 0;
    double v = strtod (text, &end);
    if (end == text || errno)
        return -1;
    if (suffix && (*end == 'k' || *end == 'K')) {
        v *= 1e3;
        end++;
    } else if (suffix && *end == 'M') {
        v *= 1e6;
        end++;
    }
    if (*end || !isfinite (v) || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int s_parse_uint (const char *text, double min, double max, unsigned *out)
{
    double v;
    if (s_parse_number (text, min, max, false, &v) != 0 || v != floor (v))
        return -1;
    *out = (unsigned) v;
    return 0;
}

static int s_parse_list (const char *text, bool integers, double min, double max, options_t *opt)
{
    char buf[1024];
    if (strlen (text) >= sizeof buf)
        return -1;
    strcpy (buf, text);
    opt->n_values = 0;
    for (char *save = NULL, *tok = strtok_r (buf, ",", &save); tok; tok = strtok_r (NULL, ",", &save)) {
        double v;
        if (opt->n_values == MAX_STEPS || s_parse_number (tok, min, max, true, &v) != 0)
            return -1;
        if (integers && v != floor (v))
            return -1;
        opt->values[opt->n_values++] = v;
    }
    return opt->n_values > 0 ? 0 : -1;
}

enum {
    OPT_ENDPOINT = 256, OPT_MODEL, OPT_RATE, OPT_CONCURRENCY, OPT_ARRIVALS, OPT_CONNECTIONS, OPT_THREADS,
    OPT_IO_THREADS, OPT_WARMUP, OPT_DURATION, OPT_REQUESTS, OPT_FEATURES, OPT_EXPECT, OPT_TOLERANCE, OPT_ROWS,
    OPT_INPUT_SIZE, OPT_DEADLINE, OPT_TIMEOUT, OPT_MAX_OUTSTANDING, OPT_SEED, OPT_OUT, OPT_ECHO, OPT_FLOOR,
    OPT_SERVE_ECHO, OPT_STOP, OPT_SAT_P99, OPT_BUSY, OPT_SPIN, OPT_QUIET, OPT_DRY_RUN, OPT_HELP, OPT_PROCESSES,
    OPT_CURVE_SERVER, OPT_CURVE_CLIENT, OPT_SCHEDULE, OPT_STREAMS, OPT_STREAM_BASE, OPT_ENGINE,
};

static const struct option s_long_options[] = {
    { "endpoint", required_argument, NULL, OPT_ENDPOINT },
    { "model", required_argument, NULL, OPT_MODEL },
    { "rate", required_argument, NULL, OPT_RATE },
    { "concurrency", required_argument, NULL, OPT_CONCURRENCY },
    { "arrivals", required_argument, NULL, OPT_ARRIVALS },
    { "connections", required_argument, NULL, OPT_CONNECTIONS },
    { "threads", required_argument, NULL, OPT_THREADS },
    { "io-threads", required_argument, NULL, OPT_IO_THREADS },
    { "warmup", required_argument, NULL, OPT_WARMUP },
    { "duration", required_argument, NULL, OPT_DURATION },
    { "requests", required_argument, NULL, OPT_REQUESTS },
    { "features", required_argument, NULL, OPT_FEATURES },
    { "expect", required_argument, NULL, OPT_EXPECT },
    { "tolerance", required_argument, NULL, OPT_TOLERANCE },
    { "rows", required_argument, NULL, OPT_ROWS },
    { "input-size", required_argument, NULL, OPT_INPUT_SIZE },
    { "deadline-us", required_argument, NULL, OPT_DEADLINE },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "max-outstanding", required_argument, NULL, OPT_MAX_OUTSTANDING },
    { "seed", required_argument, NULL, OPT_SEED },
    { "out", required_argument, NULL, OPT_OUT },
    { "echo", no_argument, NULL, OPT_ECHO },
    { "floor", required_argument, NULL, OPT_FLOOR },
    { "serve-echo", required_argument, NULL, OPT_SERVE_ECHO },
    { "stop-when-saturated", no_argument, NULL, OPT_STOP },
    { "saturation-p99", required_argument, NULL, OPT_SAT_P99 },
    { "busy-poll", no_argument, NULL, OPT_BUSY },
    { "spin-us", required_argument, NULL, OPT_SPIN },
    { "quiet", no_argument, NULL, OPT_QUIET },
    { "dry-run", no_argument, NULL, OPT_DRY_RUN },
    { "processes", required_argument, NULL, OPT_PROCESSES },
    { "help", no_argument, NULL, OPT_HELP },
    { "curve-server", required_argument, NULL, OPT_CURVE_SERVER },
    { "curve-client", required_argument, NULL, OPT_CURVE_CLIENT },
    { "schedule", required_argument, NULL, OPT_SCHEDULE },
    { "streams", required_argument, NULL, OPT_STREAMS },
    { "stream-base", required_argument, NULL, OPT_STREAM_BASE },
    { "engine", required_argument, NULL, OPT_ENGINE },
    { NULL, 0, NULL, 0 },
};

/* Reads --schedule FILE into opt->schedule_ns: one offset per line in microseconds from the start,
 * absolute and non-decreasing; '#' comments and blank lines skipped. 0, or the exit code after a
 * message that names FILE:LINE. */
static int s_read_schedule (const char *path, options_t *opt)
{
    FILE *f = fopen (path, "r");
    if (!f) {
        fprintf (stderr, "sigload: --schedule: cannot open %s: %s\n", path, strerror (errno));
        return EXIT_USAGE;
    }
    char line[4096];
    size_t cap = 0, lineno = 0;
    int rc = 0;
    double last_us = 0;
    while (rc == 0 && fgets (line, sizeof line, f)) {
        lineno++;
        line[strcspn (line, "#\r\n")] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) continue;
        char *end;
        errno = 0;
        double us = strtod (p, &end);
        while (*end == ' ' || *end == '\t') end++;
        if (end == p || *end || errno || !isfinite (us) || us < 0 || us > 86400e6) {
            fprintf (stderr, "sigload: %s:%zu: expected an offset in microseconds from 0 to 86400000000 "
                             "(one a line), got \"%s\"\n", path, lineno, p);
            rc = EXIT_USAGE;
        } else if (opt->n_schedule && us < last_us) {
            fprintf (stderr, "sigload: %s:%zu: %.10g us comes before the line above's %.10g us: offsets are "
                             "absolute (microseconds from the start), not intervals, and must not decrease\n",
                     path, lineno, us, last_us);
            rc = EXIT_USAGE;
        } else {
            if (opt->n_schedule == cap) {
                cap = cap ? 2 * cap : 1024;
                int64_t *grown = realloc (opt->schedule_ns, cap * sizeof *grown);
                if (!grown) {
                    fprintf (stderr, "sigload: --schedule: out of memory at %s:%zu\n", path, lineno);
                    rc = EXIT_ERRORS;
                    break;
                }
                opt->schedule_ns = grown;
            }
            opt->schedule_ns[opt->n_schedule++] = (int64_t) llround (us * 1e3);
            last_us = us;
        }
    }
    if (rc == 0 && ferror (f)) {
        fprintf (stderr, "sigload: --schedule: cannot read %s\n", path);
        rc = EXIT_USAGE;
    }
    fclose (f);
    if (rc == 0 && opt->n_schedule == 0) {
        fprintf (stderr, "sigload: %s: no offsets (one a line, in microseconds from the start)\n", path);
        rc = EXIT_USAGE;
    }
    return rc;
}

int options_parse (int argc, char **argv, options_t *opt)
{
    *opt = (options_t) { .connections = 1, .io_threads = 1, .warmup_s = 1, .duration_s = 5, .rows = 1,
                         .tolerance = 1e-4, .timeout_ms = 2000, .max_outstanding = 8192, .seed = 1,
                         .spin_us = 50 };
    const char *rate_text = NULL, *conc_text = NULL;
    bool warmup_given = false, arrivals_given = false, rows_given = false, base_given = false;
    double d;
    unsigned u;
    int c;
    opterr = 0;
    while ((c = getopt_long (argc, argv, "", s_long_options, NULL)) != -1) {
        const char *arg = optarg;
        switch (c) {
        case OPT_ENDPOINT:
            if (opt->n_endpoints == MAX_ENDPOINTS)
                return s_usage_error ("too many --endpoint (at most %s)", "64");
            opt->endpoints[opt->n_endpoints++] = arg;
            break;
        case OPT_SERVE_ECHO:
            if (opt->n_serve_echo == MAX_ENDPOINTS)
                return s_usage_error ("too many --serve-echo (at most %s)", "64");
            opt->serve_echo[opt->n_serve_echo++] = arg;
            break;
        case OPT_MODEL: opt->model = arg; break;
        case OPT_RATE: rate_text = arg; break;
        case OPT_CONCURRENCY: conc_text = arg; break;
        case OPT_ARRIVALS:
            arrivals_given = true;
            if (strcmp (arg, "constant") == 0)
                opt->poisson = false;
            else if (strcmp (arg, "poisson") == 0)
                opt->poisson = true;
            else
                return s_usage_error ("--arrivals: expected constant or poisson, got \"%s\"", arg);
            break;
        case OPT_CONNECTIONS:
            if (s_parse_uint (arg, 1, MAX_CONNECTIONS, &opt->connections))
                return s_usage_error ("--connections: expected 1 to 4096, got \"%s\"", arg);
            break;
        case OPT_THREADS:
            if (s_parse_uint (arg, 1, MAX_THREADS, &opt->threads))
                return s_usage_error ("--threads: expected 1 to 256, got \"%s\"", arg);
            opt->threads_given = true;
            break;
        case OPT_ENGINE:
            if (client_sock_engine_parse (arg, &opt->engine) != 0)
                return s_usage_error ("--engine: expected zmtp or libzmq, got \"%s\"", arg);
            break;
        case OPT_IO_THREADS:
            if (s_parse_uint (arg, 1, 64, &opt->io_threads))
                return s_usage_error ("--io-threads: expected 1 to 64, got \"%s\"", arg);
            break;
        case OPT_WARMUP:
            if (s_parse_number (arg, 0, 3600, false, &opt->warmup_s))
                return s_usage_error ("--warmup: expected 0 to 3600 seconds, got \"%s\"", arg);
            warmup_given = true;
            break;
        case OPT_DURATION:
            if (s_parse_number (arg, 0.001, 86400, false, &opt->duration_s))
                return s_usage_error ("--duration: expected 0.001 to 86400 seconds, got \"%s\"", arg);
            opt->duration_given = true;
            break;
        case OPT_REQUESTS:
            if (s_parse_number (arg, 1, 1e12, true, &d) || d != floor (d))
                return s_usage_error ("--requests: expected a whole number from 1 to 1e12, got \"%s\"", arg);
            opt->requests = (uint64_t) d;
            break;
        case OPT_FEATURES: opt->features_file = arg; break;
        case OPT_EXPECT: opt->expect_file = arg; break;
        case OPT_TOLERANCE:
            if (s_parse_number (arg, 0, 1e30, false, &opt->tolerance))
                return s_usage_error ("--tolerance: expected a number >= 0, got \"%s\"", arg);
            break;
        case OPT_ROWS:
            if (s_parse_uint (arg, 1, 65536, &opt->rows))
                return s_usage_error ("--rows: expected 1 to 65536, got \"%s\"", arg);
            rows_given = true;
            break;
        case OPT_INPUT_SIZE:
            if (s_parse_uint (arg, 1, 1 << 24, &opt->input_size))
                return s_usage_error ("--input-size: expected 1 to 16777216, got \"%s\"", arg);
            break;
        case OPT_DEADLINE:
            if (s_parse_uint (arg, 0, UINT32_MAX, &opt->deadline_us))
                return s_usage_error ("--deadline-us: expected 0 to 4294967295, got \"%s\"", arg);
            break;
        case OPT_TIMEOUT:
            if (s_parse_uint (arg, 1, 3600000, &opt->timeout_ms))
                return s_usage_error ("--timeout: expected 1 to 3600000 ms, got \"%s\"", arg);
            break;
        case OPT_MAX_OUTSTANDING:
            if (s_parse_uint (arg, 1, 1 << 22, &u))
                return s_usage_error ("--max-outstanding: expected 1 to 4194304, got \"%s\"", arg);
            opt->max_outstanding = u;
            break;
        case OPT_SEED:
            if (s_parse_number (arg, 0, 1.8e19, false, &d) || d != floor (d))
                return s_usage_error ("--seed: expected a whole number >= 0, got \"%s\"", arg);
            opt->seed = (uint64_t) d;
            break;
        case OPT_OUT: opt->out_dir = arg; break;
        case OPT_ECHO: opt->echo = true; break;
        case OPT_FLOOR: opt->floor = arg; break;
        case OPT_STOP: opt->stop_when_saturated = true; break;
        case OPT_SAT_P99:
            if (s_parse_number (arg, 1, 1e12, false, &opt->saturation_p99_us))
                return s_usage_error ("--saturation-p99: expected microseconds >= 1, got \"%s\"", arg);
            break;
        case OPT_BUSY: opt->busy_poll = true; break;
        case OPT_SPIN:
            if (s_parse_uint (arg, 0, 1000000, &opt->spin_us))
                return s_usage_error ("--spin-us: expected 0 to 1000000 us, got \"%s\"", arg);
            break;
        case OPT_QUIET: opt->quiet = true; break;
        case OPT_CURVE_SERVER: opt->curve_server = arg; break;
        case OPT_CURVE_CLIENT: opt->curve_client = arg; break;
        case OPT_DRY_RUN: opt->dry_run = true; break;
        case OPT_PROCESSES:
            if (s_parse_uint (arg, 1, 16, &opt->processes))
                return s_usage_error ("--processes: expected 1 to 16, got \"%s\"", arg);
            break;
        case OPT_SCHEDULE: opt->schedule_file = arg; break;
        case OPT_STREAMS:
            if (s_parse_number (arg, 1, MAX_STREAMS, true, &d) || d != floor (d))
                return s_usage_error ("--streams: expected a whole number from 1 to 1000000, got \"%s\"", arg);
            opt->streams = (uint64_t) d;
            break;
        case OPT_STREAM_BASE: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull (arg, &end, 10);
            if (arg[0] < '1' || arg[0] > '9' || *end || errno)
                return s_usage_error ("--stream-base: expected a stream id from 1 to 18446744073709551615, got \"%s\"",
                                      arg);
            opt->stream_base = v;
            base_given = true;
            break;
        }
        case OPT_HELP:
            fputs (s_help, stdout);
            return -1;
        default:
            return s_usage_error ("unknown option or missing value: %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return s_usage_error ("unexpected argument \"%s\"", argv[optind]);
    if (opt->n_serve_echo > 0) {
        if (opt->n_endpoints || opt->model || rate_text || conc_text || opt->dry_run)
            return s_usage_error ("%s: --serve-echo runs an echo server and takes no load options",
                                  "--serve-echo");
        return 0;
    }
    if (opt->n_endpoints == 0)
        return s_usage_error ("%s: at least one --endpoint is required", "--endpoint");
    if (!opt->model && !opt->echo)
        return s_usage_error ("%s: --model is required (unless --echo)", "--model");
    if (!opt->model)
        opt->model = "echo";
    if (strlen (opt->model) >= sizeof opt->model_names)
        return s_usage_error ("--model: at most %s bytes", "1023");
    strcpy (opt->model_names, opt->model);
    for (char *save = NULL, *tok = strtok_r (opt->model_names, ",", &save); tok; tok = strtok_r (NULL, ",", &save)) {
        if (opt->n_models == MAX_MODELS)
            return s_usage_error ("--model: at most %s models", "64");
        opt->models[opt->n_models++] = tok;
    }
    if (opt->n_models == 0)
        return s_usage_error ("--model: expected a model name, got \"%s\"", opt->model);
    if (opt->n_models > 1 && opt->echo)
        return s_usage_error ("%s: --echo sends no model", "--model");
    if (opt->n_models > 1 && opt->expect_file)
        return s_usage_error ("%s: --expect holds one model's outputs; give one --model", "--expect");
    if (!opt->curve_server != !opt->curve_client)
        return s_usage_error ("%s: CURVE needs both --curve-server and --curve-client", "--curve-server");
    if (opt->curve_server) {
        sigclient_curve_keys_t keys;
        char why[512];
        if (sigclient_curve_keys_load (opt->curve_server, opt->curve_client, &keys, why, sizeof why) != 0)
            return s_usage_error ("%s", why);
        int bad = client_sock_keys_decode (keys.server_public, keys.client_public, keys.client_secret,
                                           &opt->curve_keys);
        explicit_bzero (&keys, sizeof keys);
        if (bad)
            return s_usage_error ("%s: a key that is not Z85", opt->curve_client);
    }
    if (rate_text && conc_text)
        return s_usage_error ("%s: give --rate (open loop) or --concurrency (closed loop), not both", "--rate");
    if (opt->schedule_file) {
        if (rate_text || conc_text || arrivals_given)
            return s_usage_error ("%s: the file gives the send times; no --rate, --concurrency or --arrivals",
                                  "--schedule");
        if (opt->requests || opt->duration_given)
            return s_usage_error ("%s: the file gives the requests; no --duration or --requests", "--schedule");
        if (!warmup_given)
            opt->warmup_s = 0;
        int rc = s_read_schedule (opt->schedule_file, opt);
        if (rc != 0)
            return rc;
        /* the step's target: the schedule's mean rate (its requests over its span) */
        double span_s = (double) opt->schedule_ns[opt->n_schedule - 1] / 1e9;
        opt->mode = MODE_OPEN;
        opt->values[0] = span_s > 0 ? (double) opt->n_schedule / span_s : (double) opt->n_schedule;
        opt->n_values = 1;
    } else if (rate_text) {
        opt->mode = MODE_OPEN;
        if (s_parse_list (rate_text, false, 0.001, 1e9, opt))
            return s_usage_error ("--rate: expected requests/s from 0.001 to 1e9, comma-separated, got \"%s\"",
                                  rate_text);
    } else {
        opt->mode = MODE_CLOSED;
        if (s_parse_list (conc_text ? conc_text : "1", true, 1, 1e6, opt))
            return s_usage_error ("--concurrency: expected whole numbers from 1 to 1e6, comma-separated, got \"%s\"",
                                  conc_text);
    }
    if (opt->requests && opt->duration_given)
        return s_usage_error ("%s: give --duration or --requests, not both", "--requests");
    if (opt->echo && opt->floor)
        return s_usage_error ("%s: --floor adds an echo step to a sigserve sweep; with --echo every step is one",
                              "--floor");
    if (opt->echo && opt->expect_file)
        return s_usage_error ("%s: an echo server returns the request, not outputs", "--expect");
    if (opt->poisson && opt->mode == MODE_CLOSED)
        return s_usage_error ("%s: arrivals are for open loop (--rate)", "--arrivals");
    if (base_given && !opt->streams)
        return s_usage_error ("%s: --stream-base is for --streams", "--stream-base");
    if (opt->streams) {
        if (opt->echo)
            return s_usage_error ("%s: an echo server keeps no streams", "--streams");
        if (opt->n_models > 1)
            return s_usage_error ("%s: streams belong to one model; give one --model", "--streams");
        if (opt->expect_file)
            return s_usage_error ("%s: a stream's outputs depend on its steps so far; no --expect", "--streams");
        if (rows_given && opt->rows != 1)
            return s_usage_error ("%s: a stream step is one row; give --rows 1 or none", "--streams");
        if (opt->streams < opt->connections)
            return s_usage_error ("%s: every connection carries streams of its own: give at least one stream "
                                  "per connection (--streams >= --connections)", "--streams");
        if (!base_given)
            opt->stream_base = 1;
        if (opt->stream_base - 1 > UINT64_MAX - opt->streams)
            return s_usage_error ("%s: the stream ids would pass 2^64 - 1", "--stream-base");
    }
    if (opt->processes > 1) {
        if (opt->schedule_file || opt->streams)
            return s_usage_error ("--processes: %s keeps one process's order; run it from one process",
                                  opt->schedule_file ? "--schedule" : "--streams");
        if (opt->connections < opt->processes)
            return s_usage_error ("--processes: each process needs a connection; raise --connections to at least %s",
                                  "the process count");
    }
    if (opt->processes == 0)
        opt->processes = 1;
    /* One thread per CPU we may run on, at most one per connection: each thread spins before
     * its sends, so two on one CPU take turns and both send late. */
    opt->affinity_cpus = options_affinity_cpus ();
    if (opt->threads == 0) {
        opt->threads = opt->affinity_cpus < opt->connections ? opt->affinity_cpus : opt->connections;
        if (opt->threads > MAX_THREADS)
            opt->threads = MAX_THREADS;
    }
    if (opt->threads > opt->connections)
        return s_usage_error ("--threads: each thread needs a connection; raise --connections to at least %s",
                              "the thread count");
    if (opt->connections / opt->threads + 1 > MAX_CONNS_PER_THREAD)
        return s_usage_error ("%s: too many connections per thread", "--connections");
    unsigned ring = 1;
    while (ring < opt->max_outstanding)
        ring <<= 1;
    opt->max_outstanding = ring;
    if (opt->dry_run) {
        options_print (stdout, opt);
        return -1;
    }
    return 0;
}

unsigned options_affinity_cpus (void)
{
    cpu_set_t set;
    CPU_ZERO (&set);
    if (sched_getaffinity (0, sizeof set, &set) == 0 && CPU_COUNT (&set) > 0)
        return (unsigned) CPU_COUNT (&set);
    /* more CPUs than a cpu_set_t holds (1024), or no such call: count them all */
    long online = sysconf (_SC_NPROCESSORS_ONLN);
    return online > 0 ? (unsigned) online : 1;
}

void options_print (FILE *out, const options_t *opt)
{
    fprintf (out, "sigload: dry run: these settings, nothing sent\n");
    for (size_t i = 0; i < opt->n_endpoints; i++)
        fprintf (out, "endpoint: %s\n", opt->endpoints[i]);
    if (opt->floor)
        fprintf (out, "floor: %s (echo)\n", opt->floor);
    fprintf (out, "model: %s%s\n", opt->echo ? "-" : opt->model,
             opt->echo ? " (echo)" : opt->n_models > 1 ? " (round-robin)" : "");
    if (opt->curve_server)
        fprintf (out, "curve: server %s, client %s\n", opt->curve_server, opt->curve_client);
    fprintf (out, "load: %s\n", opt->mode == MODE_CLOSED ? "closed loop"
                               : opt->schedule_file ? "open loop, send times from --schedule"
                               : opt->poisson ? "open loop, Poisson arrivals" : "open loop, constant arrivals");
    if (opt->schedule_file)
        fprintf (out, "schedule: %zu requests from %s, the last at %.3f ms\n", opt->n_schedule, opt->schedule_file,
                 (double) opt->schedule_ns[opt->n_schedule - 1] / 1e6);
    if (opt->streams)
        fprintf (out, "streams: %" PRIu64 " (ids %" PRIu64 " to %" PRIu64 "), stream k on connection k mod %u\n",
                 opt->streams, opt->stream_base, opt->stream_base + opt->streams - 1, opt->connections);
    fprintf (out, "steps:");
    for (size_t i = 0; i < opt->n_values; i++)
        fprintf (out, "%s %.10g%s", i ? "," : "", opt->values[i], opt->mode == MODE_OPEN ? "/s" : " outstanding");
    fprintf (out, "\n");
    if (opt->requests)
        fprintf (out, "per step: warm-up %.3g s, %" PRIu64 " requests measured\n", opt->warmup_s, opt->requests);
    else
        fprintf (out, "per step: warm-up %.3g s, %.3g s measured\n", opt->warmup_s, opt->duration_s);
    fprintf (out, "connections: %u\n", opt->connections);
    if (opt->threads_given)
        fprintf (out, "threads: %u (--threads)\n", opt->threads);
    else
        fprintf (out, "threads: %u (default: the smaller of %u connection(s) and %u CPU(s) in the affinity mask)\n",
                 opt->threads, opt->connections, opt->affinity_cpus);
    fprintf (out, "engine: %s\n", sigclient_engine_name (opt->engine));
    if (opt->engine == SIGCLIENT_ENGINE_LIBZMQ)
        fprintf (out, "io threads: %u\n", opt->io_threads);
    if (opt->processes > 1)
        fprintf (out, "processes: %u, each 1/%u of the load, connections and threads\n", opt->processes, opt->processes);
    fprintf (out, "rows: %u, %s: ", opt->rows, opt->streams ? "step size" : "input size");
    if (opt->input_size)
        fprintf (out, "%u\n", opt->input_size);
    else
        fprintf (out, "%s\n", opt->echo ? "512" : opt->streams ? "the model's step_size, from the server's model list"
                                                                : "from the server's model list");
    fprintf (out, "timeout: %u ms, max outstanding: %u per connection, %s, spin: %u us\n", opt->timeout_ms,
             opt->max_outstanding, opt->busy_poll ? "busy poll" : "ppoll", opt->spin_us);
    if (opt->out_dir)
        fprintf (out, "out: %s\n", opt->out_dir);
}

