/* sigserve: serve market-signal models over ZeroMQ.
 *
 * Threads: the front (server.c) owns the sockets; each model instance has a worker (worker.c);
 * with server.http, libmicrohttpd's threads answer metrics and probes (http.c), started before the
 * models load and stopped last; this, the main thread, is the control thread: it waits for signals
 * (SIGTERM/SIGINT: drain and stop; SIGHUP: reload the configuration), watches the config file with
 * --watch, writes the periodic stats line, and destroys what reloads leave behind. Signals are
 * blocked in every other thread, so none of them is ever interrupted.
 *
 * Exit codes: 0 clean stop or --check-config passed; 1 runtime failure (an endpoint cannot be
 * bound: its port is taken); 2 bad usage, bad configuration (what --check-config finds: an endpoint
 * address that cannot be bound, two endpoints on one port, unreadable CURVE files; server.http that
 * cannot be bound included) or a model that cannot load. */
#define _GNU_SOURCE
#include "front/auth.h"
#include "front/endpoint.h"
#include "backends/backends.h"
#include "base/config.h"
#include "ops/http.h"
#include "base/log.h"
#include "base/spin.h"
#include "clock.h"
#include "ops/notify.h"
#include "ops/watch.h"
#include "serving/devices.h"
#include "serving/registry.h"
#include "front/server.h"
#include "base/stats.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define WATCH_INTERVAL_NS 1000000000ull

static const char *s_usage =
    "usage: sigserve --config FILE [--log-level LEVEL] [--watch]\n"
    "       sigserve --check-config FILE\n"
    "       sigserve --keygen PATH\n"
    "       sigserve --help | --version\n"
    "\n"
    "Serves the models that FILE configures over ZeroMQ (every key: sigserve.json(5)).\n"
    "  --config FILE        load FILE, load and warm every model, bind, serve until SIGINT/SIGTERM\n"
    "  --check-config FILE  validate FILE and load every model, print a summary, exit\n"
    "  --log-level LEVEL    error, warn, info or debug (overrides server.log_level)\n"
    "  --watch              reload when FILE or a model's weights file changes, as on SIGHUP\n"
    "  --keygen PATH        write a new CURVE certificate: PATH (the public key, for clients and\n"
    "                       allowlists) and PATH_secret (both keys: server.curve.secret_key_file,\n"
    "                       or a client's own certificate), in czmq's format\n"
    "Signals: SIGTERM/SIGINT drain (server.drain_ms) and stop; SIGHUP reloads FILE.\n"
    "Exit codes: 0 clean stop, 1 runtime failure, 2 usage or configuration error.\n";

typedef struct {
    const char *config_path;
    const char *keygen_path;
    const char *level_override;
    bool check_only;
    bool watch;
    bool cpu_device_process;    /* sigserve-test: CPU models in a device process too */
} options_t;

static int s_usage_error (const char *fmt, const char *arg)
{
    fprintf (stderr, "sigserve: ");
    fprintf (stderr, fmt, arg);
    fprintf (stderr, "\n%s", s_usage);
    return 2;
}

static void s_version (void)
{
    int major, minor, patch;
    zmq_version (&major, &minor, &patch);
    char gpu[64] = "";
    if (backends_cuda_built_version ())
        snprintf (gpu, sizeof gpu, ", cuda with CUDA runtime %s", backends_cuda_built_version ());
    printf ("sigserve %s (transports: zmtp, libzmq %d.%d.%d; backends: cpu%s)\n", SIGSERVE_VERSION, major, minor, patch,
            gpu);
}

/* -1 to go on, or an exit code. */
static int s_parse (int argc, char **argv, options_t *o)
{
    enum { O_CONFIG = 256, O_CHECK, O_LEVEL, O_WATCH, O_KEYGEN, O_VERSION, O_HELP, O_CPU_DEVICE };
    static const struct option longopts[] = {
        { "config", required_argument, NULL, O_CONFIG },
        { "check-config", required_argument, NULL, O_CHECK },
        { "log-level", required_argument, NULL, O_LEVEL },
        { "watch", no_argument, NULL, O_WATCH },
        { "keygen", required_argument, NULL, O_KEYGEN },
        { "version", no_argument, NULL, O_VERSION },
        { "help", no_argument, NULL, O_HELP },
#ifdef SIGSERVE_TEST_HOOKS
        { "test-cpu-device-process", no_argument, NULL, O_CPU_DEVICE },
#endif
        { NULL, 0, NULL, 0 },
    };
    opterr = 0;
    int c;
    while ((c = getopt_long (argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_CONFIG: o->config_path = optarg; o->check_only = false; break;
        case O_CHECK: o->config_path = optarg; o->check_only = true; break;
        case O_LEVEL: o->level_override = optarg; break;
        case O_WATCH: o->watch = true; break;
        case O_KEYGEN: o->keygen_path = optarg; break;
        case O_CPU_DEVICE: o->cpu_device_process = true; break;
        case O_VERSION: s_version (); return 0;
        case 'h': case O_HELP: fputs (s_usage, stdout); return 0;
        case ':': return s_usage_error ("%s needs a value", argv[optind - 1]);
        default: return s_usage_error ("unknown or incomplete argument \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return s_usage_error ("unexpected argument \"%s\"", argv[optind]);
    if (o->keygen_path) {
        char err[512];
        if (auth_keygen (o->keygen_path, err, sizeof err) != 0) {
            fprintf (stderr, "sigserve: --keygen: %s\n", err);
            return 2;
        }
        return 0;
    }
    if (!o->config_path)
        return s_usage_error ("%s", "--config FILE is required");
    return -1;
}

static int s_apply_logging (const config_t *cfg, const char *override)
{
    log_level_t level;
    const char *name = override ? override : cfg->server.log_level;
    if (log_level_from_name (name, &level) != 0) {
        fprintf (stderr, "sigserve: --log-level: expected one of error, warn, info, debug, got \"%s\"\n", name);
        return -1;
    }
    log_set_level (level);
    log_set_format (cfg->server.log_format);
    return 0;
}

/* What the start would refuse before it binds anything, checked the way the start does (each check is
 * the one its part runs): endpoints the transport cannot bind or that take one port twice (the HTTP
 * endpoint's included), an HTTP address that does not resolve, CURVE files this user cannot read. Ports
 * are not taken: whether they are free is known when the start binds them. --check-config and the
 * start both call it. */
static int s_preflight (const config_t *cfg, char *err, size_t errlen)
{
    const server_config_t *s = &cfg->server;
    if (endpoints_check (s, err, errlen) != 0 || http_check (s, err, errlen) != 0)
        return -1;
    return s->curve.secret_key_file[0] ? auth_check (&s->curve, s->transport == TRANSPORT_LIBZMQ, err, errlen) : 0;
}

static int s_check (const char *path, const config_t *cfg, model_registry_t *models)
{
    printf ("%s: ok: %zu endpoint(s), %zu model(s); binding is checked at start (a port another process holds "
            "fails it there)\n", path, cfg->server.endpoint_count, model_registry_count (models));
    for (size_t i = 0; i < model_registry_count (models); i++) {
        model_t *m = model_registry_at (models, i);
        printf ("  %s version %s: %u -> %u, backend %s, kernel %s, max_rows %u, instances %u\n", model_name (m),
                model_version (m), model_input_size (m), model_output_size (m), model_backend_name (m),
                model_kernel_name (m), model_max_rows (m), model_instance_count (m));
    }
    return 0;
}

/* Connections take a file descriptor each: the open-file limit goes up to its hard limit, and
 * max_connections down to what fits under it (with room for models, logs and ZeroMQ's own). At
 * the limit, libzmq's listener would spin on accept(). */
static void s_fit_connections (server_config_t *server)
{
    struct rlimit rl;
    if (getrlimit (RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit (RLIMIT_NOFILE, &rl);
        getrlimit (RLIMIT_NOFILE, &rl);
    }
    const rlim_t reserve = 256;
    rlim_t room = rl.rlim_cur > 2 * reserve ? rl.rlim_cur - reserve : rl.rlim_cur / 2;
    uint32_t fits = (uint32_t) (room > UINT32_MAX ? UINT32_MAX : room);
    if (server->max_connections > fits)
        log_warn ("server.max_connections: lowered from %u to %u: the open-file limit is %llu (ulimit -n), and %llu "
                  "of it is kept for the rest of the process; raise the limit to allow more", server->max_connections,
                  fits, (unsigned long long) rl.rlim_cur, (unsigned long long) reserve);
    if (server->max_connections == 0 || server->max_connections > fits)
        server->max_connections = fits;     /* 0: as many as the limit allows */
}

/* ---------------------------------------------------------------- the control thread */

typedef struct {
    const options_t *opt;
    config_t *cfg;                  /* the configuration being served */
    server_t *server;
    stats_t *stats;
    http_t *http;                   /* NULL without server.http */
    auth_t *auth;                   /* NULL without server.curve */
    watch_t *watch;                 /* --watch: the files a reload reads, as last read */
    uint64_t last_stats;            /* the stats line: when, and the snapshots it diffs against */
    stats_snapshot_t *before;       /* STATS_SLOTS of them */
    uint64_t requests_before[STATS_SLOTS];
} control_t;

/* How long the serving threads may spin (base/spin.h): server.spin_us when each of them (the front,
 * ZeroMQ's I/O threads and every model instance's worker) has a CPU of those this process may use. */
static void s_resolve_spin (config_t *cfg, bool say)
{
    const int threads = (int) config_serving_threads (cfg);
    char why[256];
    cfg->server.spin_cap_ns = spin_cap ((uint64_t) cfg->server.spin_us * 1000, threads, spin_cpus_available (), why,
                                        sizeof why);
    if (say && !cfg->server.busy_poll)
        log_info ("adaptive spinning: %s", why);
}

static void s_reload (control_t *c, const char *why)
{
    char err[1024];
    log_info ("reload (%s): reading %s", why, c->opt->config_path);
    notify_reloading ();
    watch_config_read (c->watch);
    config_t *next = config_load (c->opt->config_path, err, sizeof err);
    if (next) {
        watch_weights_read (c->watch, next);
        s_resolve_spin (next, false);
    }
    int rc = -1;
    bool curve_now = c->auth != NULL, curve_next = next && next->server.curve.secret_key_file[0];
    if (next && curve_now != curve_next) {
        snprintf (err, sizeof err, "%s: server.curve: turning CURVE %s needs a restart", c->opt->config_path,
                  curve_next ? "on" : "off");
    } else if (next) {
        http_reload_begin (c->http);
        rc = server_reload (c->server, next, err, sizeof err);
        http_reload_end (c->http);
        /* The allowlist folder (czmq re-reads it as it changes; a new one is taken here). */
        if (rc == 0 && c->auth && auth_reload (c->auth, &next->server.curve, err, sizeof err) != 0)
            log_error ("reload: %s; the previous allowlist stays", err);
    }
    if (rc != 0) {
        log_error ("reload failed, nothing changed, the previous configuration keeps serving: %s", err);
        if (c->stats)
            stats_count_reload (c->stats, false);
        config_destroy (&next);
    } else {
        if (c->stats)
            stats_count_reload (c->stats, true);
        /* The level (unless --log-level set it) and the format apply at once. */
        if (strcmp (next->server.log_level, c->cfg->server.log_level) != 0 && !c->opt->level_override)
            s_apply_logging (next, NULL);
        log_set_format (next->server.log_format);
        config_destroy (&c->cfg);
        c->cfg = next;
    }
    notify_ready (rc == 0 ? "serving (reloaded)" : "serving (reload failed)");
}

/* One line per model with traffic since the last line: rate and server-time percentiles. */
static void s_stats_line (control_t *c, uint64_t now)
{
    double seconds = (double) (now - c->last_stats) / 1e9;
    c->last_stats = now;
    if (seconds <= 0)
        seconds = 1e-9;     /* a rate must stay a finite JSON number */
    for (size_t slot = 0; slot < stats_slot_count (c->stats); slot++) {
        uint64_t total = 0;
        for (int st = 0; st < STATS_STATUS_COUNT; st++)
            total += stats_requests (c->stats, slot, (sig_status_t) st);
        uint64_t delta = total - c->requests_before[slot];
        c->requests_before[slot] = total;
        stats_snapshot_t now_snap;
        stats_snapshot (c->stats, slot, STAGE_SERVER, &now_snap);
        uint64_t n;
        uint64_t p50 = stats_quantile_ns (&now_snap, &c->before[slot], 0.50, &n);
        uint64_t p99 = stats_quantile_ns (&now_snap, &c->before[slot], 0.99, NULL);
        c->before[slot] = now_snap;
        if (delta == 0)
            continue;
        char fields[512], name[160];
        log_json_escape (stats_slot_name (c->stats, slot), name, sizeof name);
        snprintf (fields, sizeof fields, "\"model\":\"%s\",\"requests\":%llu,\"rate_per_s\":%.1f,\"server_p50_us\":%.1f,"
                  "\"server_p99_us\":%.1f", name, (unsigned long long) delta,
                  (double) delta / seconds, (double) p50 / 1e3, (double) p99 / 1e3);
        log_write_fields (LOG_LEVEL_INFO, "stats", fields);
    }
}

/* Until SIGTERM/SIGINT: signals, --watch, the stats line, retired model sets. */
static void s_control_loop (control_t *c, const sigset_t *signals)
{
    uint64_t last_watch = clock_now_ns ();
    c->last_stats = last_watch;
    for (;;) {
        struct timespec tick = { .tv_sec = 0, .tv_nsec = 250000000 };
        int sig = sigtimedwait (signals, NULL, &tick);
        if (sig == SIGTERM || sig == SIGINT) {
            log_info ("%s: draining, then stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
            notify_stopping ();
            http_draining (c->http);
            server_stop (c->server);
            return;
        }
        if (sig == SIGHUP)
            s_reload (c, "SIGHUP");
        uint64_t now = clock_now_ns ();
        char why[CONFIG_NAME_MAX + 64];
        if (c->opt->watch && now - last_watch >= WATCH_INTERVAL_NS) {
            last_watch = now;
            if (watch_changed (c->watch, why, sizeof why))
                s_reload (c, why);
        }
        server_collect_retired (c->server);
        uint32_t interval = c->cfg->server.stats_interval_s;
        if (interval && c->stats && now - c->last_stats >= (uint64_t) interval * 1000000000ull)
            s_stats_line (c, now);
    }
}

typedef struct {
    server_t *server;
    int rc;
} front_t;

static pthread_t s_control_thread;

static void s_forward_signal (int sig)
{
    pthread_kill (s_control_thread, sig);   /* async-signal-safe; blocked there, so it waits for sigtimedwait */
}

#ifdef SIGSERVE_TEST_HOOKS
/* sigserve-test's fault injection (tests/test_gpu_faults.c), in the device process. */
/* tests/mailbox_backend.c (linked into sigserve-test only): the persistent kernel's mailbox emulated */
extern const backend_iface_t test_mailbox_iface;
int test_mailbox_trap (backend_model_t *m);
int test_mailbox_hang (backend_model_t *m);

static int s_test_fault (int device, uint32_t fault, backend_model_t *mlp, char *err, size_t errlen)
{
    if (fault == DEV_FAULT_EXIT)
        return 0;       /* the device process kills itself once it has answered */
    if (fault == DEV_FAULT_TRAP && device == DEVICE_CPU_TEST && getenv ("SIGSERVE_TEST_MAILBOX")) {
        if (test_mailbox_trap (mlp) == 0)
            return 0;
        snprintf (err, errlen, "device cpu (test) holds no emulated persistent model to trap");
        return -1;
    }
    if (fault == DEV_FAULT_TRAP) {
        const gpu_backend_t *gpu = backends_gpu (NULL, 0);
        if (!gpu || !mlp) {
            snprintf (err, errlen, "device %d holds no CUDA MLP instance to trap", device);
            return -1;
        }
        int rc = gpu->inject_fault (mlp);
        if (rc != 0)
            snprintf (err, errlen, "device %d: the trapping kernel did not launch (CUDA error %d)", device, rc);
        return rc == 0 ? 0 : -1;
    }
    if (fault == DEV_FAULT_HANG && device == DEVICE_CPU_TEST && getenv ("SIGSERVE_TEST_MAILBOX")) {
        if (test_mailbox_hang (mlp) == 0)
            return 0;
        snprintf (err, errlen, "device cpu (test) holds no emulated persistent model to hang");
        return -1;
    }
    if (fault == DEV_FAULT_HANG) {
        const gpu_backend_t *gpu = backends_gpu (NULL, 0);
        if (!gpu || !mlp) {
            snprintf (err, errlen, "device %d holds no CUDA MLP instance to hang", device);
            return -1;
        }
        int rc = gpu->inject_hang (mlp, 60000);
        if (rc != 0)
            snprintf (err, errlen, "device %d: the spinning kernel did not launch (CUDA error %d)", device, rc);
        return rc == 0 ? 0 : -1;
    }
    snprintf (err, errlen, "fault %u is not one of trap, exit, hang", fault);
    return -1;
}

/* POST /debug/fault?device=N&kind=trap|kill|hang: the server's side. */
static int s_debug_fault (void *devices, const char *device, const char *kind, char *out, size_t outlen)
{
    devices_t *d = devices;
    uint32_t fault = strcmp (kind, "trap") == 0 ? DEV_FAULT_TRAP : strcmp (kind, "kill") == 0 ? DEV_FAULT_EXIT
                   : strcmp (kind, "hang") == 0 ? DEV_FAULT_HANG : 0;
    char *end = NULL;
    long n = strcmp (device, "cpu") == 0    ? DEVICE_CPU_TEST
             : strcmp (device, "cpu1") == 0 ? DEVICE_CPU_TEST_OTHER
                                            : strtol (device, &end, 10);
    if (!d) {
        snprintf (out, outlen, "no device processes (server.gpu_processes false, or no GPU)");
        return 409;
    }
    if (!fault || (end && (*end || end == device))) {
        snprintf (out, outlen, "expected device=N (or cpu, cpu1) and kind=trap, kill or hang, got device=\"%s\" kind=\"%s\"", device,
                  kind);
        return 400;
    }
    if (devices_inject (d, (int) n, fault, out, outlen) != 0)
        return 409;
    snprintf (out, outlen, "ok");
    return 200;
}
#endif

/* Device processes (serving/devices.h) when the configuration wants them and the host has an NVIDIA
 * device node (asked of the file system: the server's process makes no CUDA call). */
static devices_t *s_start_devices (const options_t *opt, const config_t *cfg)
{
    const bool gpu_host = access ("/dev/nvidiactl", F_OK) == 0 || access ("/dev/nvidia0", F_OK) == 0;
    if (!opt->cpu_device_process && (!cfg->server.gpu_processes || !backends_gpu_built () || !gpu_host))
        return NULL;
    char exe[256], err[512];
    ssize_t n = readlink ("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        log_warn ("server.gpu_processes: cannot find this binary (/proc/self/exe); GPU work runs in this process");
        return NULL;
    }
    exe[n] = 0;
    devices_t *d = devices_new (exe, opt->level_override ? opt->level_override : cfg->server.log_level,
                                cfg->server.log_format == LOG_FORMAT_JSON ? "json" : "text", err, sizeof err);
    if (!d) {
        log_warn ("server.gpu_processes: %s; GPU work runs in this process", err);
        return NULL;
    }
    devices_place_cpu_models (d, opt->cpu_device_process);
    log_info ("GPU work runs in one process per device%s", opt->cpu_device_process ? " (CPU models too: a test build)" : "");
    return d;
}

static void *s_front_main (void *arg)
{
    front_t *f = arg;
    f->rc = server_run (f->server, NULL);
    return NULL;
}

int main (int argc, char **argv)
{
#ifdef SIGSERVE_TEST_HOOKS
    devices_set_fault_handler (s_test_fault);
    if (getenv ("SIGSERVE_TEST_MAILBOX"))   /* inherited by the device processes */
        backends_set_test_cpu_mlp (&test_mailbox_iface);
#endif
    if (argc > 1 && strcmp (argv[1], "--device-process") == 0)
        return devices_process_main (argc, argv);
    options_t opt = { 0 };
    int rc = s_parse (argc, argv, &opt);
    if (rc >= 0)
        return rc;
    /* Load every CUDA kernel when CUDA starts rather than at first use: a lazy load while a
     * persistent kernel spins on the device can wait for it forever. */
    setenv ("CUDA_MODULE_LOADING", "EAGER", 0);
    char err[1024];
    config_t *cfg = config_load (opt.config_path, err, sizeof err);
    if (!cfg) {
        fprintf (stderr, "sigserve: %s\n", err);
        return 2;
    }
    if (s_apply_logging (cfg, opt.level_override) != 0) {
        config_destroy (&cfg);
        return 2;
    }
    s_resolve_spin (cfg, true);
    if (cfg->server.queue_depth_given)
        log_warn ("%s: server.queue_depth is deprecated: it is now the default of each model's queue_depth "
                  "(requests waiting for a worker before STATUS_OVERLOADED); set it per model", opt.config_path);
    if (s_preflight (cfg, err, sizeof err) != 0) {
        log_error ("%s: %s", opt.config_path, err);
        config_destroy (&cfg);
        return 2;
    }

    /* Every thread created from here on (workers, the front, ZeroMQ's) inherits the mask. */
    sigset_t signals;
    sigemptyset (&signals);
    sigaddset (&signals, SIGINT);
    sigaddset (&signals, SIGTERM);
    sigaddset (&signals, SIGHUP);
    pthread_sigmask (SIG_BLOCK, &signals, NULL);
    signal (SIGPIPE, SIG_IGN);
    /* Threads that started before main blocked them (OpenBLAS starts its workers in a library
     * constructor) still take these signals, whose default action would end the process on the
     * spot, with no drain: a handler sends them on to this thread, which waits for them. */
    s_control_thread = pthread_self ();
    struct sigaction forward = { .sa_handler = s_forward_signal };
    sigemptyset (&forward.sa_mask);
    sigaction (SIGINT, &forward, NULL);
    sigaction (SIGTERM, &forward, NULL);
    sigaction (SIGHUP, &forward, NULL);

    stats_t *stats = stats_new ();
    stats_snapshot_t *before = calloc (STATS_SLOTS, sizeof *before);
    if (!stats || !before) {
        log_error ("%s: out of memory", opt.config_path);
        stats_destroy (&stats);
        free (before);
        config_destroy (&cfg);
        return 2;
    }
    /* The HTTP endpoint comes up first, so probes get answers while the models load and warm
     * ("loading models"), and a port that cannot be bound stops the start before that work. */
    http_t *http = NULL;
    if (!opt.check_only && cfg->server.http[0] && !(http = http_new (cfg->server.http, stats, err, sizeof err))) {
        log_error ("%s: %s", opt.config_path, err);
        stats_destroy (&stats);
        free (before);
        config_destroy (&cfg);
        return 2;
    }
    /* CURVE configured but unusable stops the start here, before the models load. */
    auth_t *auth = NULL;
    if (!opt.check_only && cfg->server.curve.secret_key_file[0]
        && !(auth = auth_new (&cfg->server.curve, cfg->server.io_threads, cfg->server.transport == TRANSPORT_LIBZMQ, err,
                              sizeof err))) {
        log_error ("%s: %s", opt.config_path, err);
        http_destroy (&http);
        stats_destroy (&stats);
        free (before);
        config_destroy (&cfg);
        return 2;
    }
    model_registry_t *models = NULL;
    if (opt.check_only) {
        models = model_registry_load (cfg, stats, NULL, NULL, NULL, err, sizeof err);
        if (models)
            s_check (opt.config_path, cfg, models);
        else
            log_error ("%s: %s", opt.config_path, err);
        rc = models ? 0 : 2;
        model_registry_destroy (&models);
        stats_destroy (&stats);
        free (before);
        config_destroy (&cfg);
        return rc;
    }

    /* Before the server: its front sleeps on the waker the device processes share. */
    devices_t *devices = s_start_devices (&opt, cfg);
#ifdef SIGSERVE_TEST_HOOKS
    if (http)
        http_set_debug (http, s_debug_fault, devices);
#endif
    /* The endpoints are bound before the models load: a port that cannot be bound fails the start
     * at once, and clients get answers while the models load (ready false, infer "loading"). */
    s_fit_connections (&cfg->server);
    server_t *server = server_new (&cfg->server, NULL, stats, auth, devices, err, sizeof err);
    if (!server) {
        log_error ("%s: %s", opt.config_path, err);
        /* a CURVE endpoint that cannot prove it refuses unknown keys is a configuration error */
        rc = strstr (err, "server.curve") ? 2 : 1;
    } else {
        front_t front = { .server = server };
        pthread_t thread;
        if (pthread_create (&thread, NULL, s_front_main, &front) != 0) {
            log_error ("cannot start the front thread");
            rc = 1;
        } else {
            http_attach (http, server);
            /* --watch compares with the files as the load reads them (a write during the load reloads) */
            watch_t *watch = watch_new (opt.config_path);
            if (watch) {
                watch_config_read (watch);
                watch_weights_read (watch, cfg);
            }
            models = watch ? model_registry_load (cfg, stats, devices, NULL, NULL, err, sizeof err) : NULL;
            if (!watch)
                snprintf (err, sizeof err, "out of memory");
            if (!models) {
                log_error ("%s: %s", opt.config_path, err);
                server_stop (server);
                pthread_join (thread, NULL);
                rc = 2;
            } else {
                server_serve (server, models);
                log_info ("sigserve %s ready", SIGSERVE_VERSION);
                if (devices)    /* the spares load after the start, never competing with it */
                    devices_set_standby (devices, cfg->server.standby);
                notify_ready ("serving");
                control_t control = { .opt = &opt, .cfg = cfg, .server = server, .stats = stats, .http = http,
                                      .auth = auth, .watch = watch, .before = before };
                s_control_loop (&control, &signals);
                pthread_join (thread, NULL);
                cfg = control.cfg;
                models = server_models (server);
                rc = front.rc == 0 ? 0 : 1;
            }
            watch_destroy (&watch);
        }
        /* The endpoint lets go of the server before it goes; it answers (draining) to the end. */
        http_draining (http);
        http_attach (http, NULL);
        server_destroy (&server);
    }
    model_registry_destroy (&models);
    devices_destroy (&devices);
    auth_destroy (&auth);
    http_destroy (&http);
    stats_destroy (&stats);
    free (before);
    config_destroy (&cfg);
    log_info ("sigserve stopped");
    return rc;
}
