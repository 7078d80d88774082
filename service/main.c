/* sigserve: serve market-signal models over ZeroMQ.
 * Exit codes: 0 clean stop (SIGINT/SIGTERM) or --check-config passed; 1 runtime failure
 * (an endpoint cannot be bound); 2 bad usage, bad configuration or a model that cannot load. */
#include "config.h"
#include "log.h"
#include "registry.h"
#include "server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>
#ifdef SIGSERVE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static volatile sig_atomic_t s_stop = 0;

static void s_on_signal (int sig)
{
    (void) sig;
    s_stop = 1;
}

static void s_usage (FILE *out)
{
    fprintf (out,
             "usage: sigserve --config FILE [--log-level LEVEL]\n"
             "       sigserve --check-config FILE\n"
             "       sigserve --help | --version\n"
             "\n"
             "Serves the models that FILE configures over ZeroMQ (see config/README.md).\n"
             "  --config FILE       load FILE, load and warm every model, bind, serve until SIGINT/SIGTERM\n"
             "  --check-config FILE validate FILE and load every model, print a summary, exit\n"
             "  --log-level LEVEL   error, warn, info or debug (overrides server.log_level)\n"
             "Exit codes: 0 clean stop, 1 runtime failure, 2 usage or configuration error.\n");
}

int main (int argc, char **argv)
{
    const char *config_path = NULL, *level_override = NULL;
    int check_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp (argv[i], "--help") == 0 || strcmp (argv[i], "-h") == 0) {
            s_usage (stdout);
            return 0;
        } else if (strcmp (argv[i], "--version") == 0) {
            int major, minor, patch;
            zmq_version (&major, &minor, &patch);
#ifdef SIGSERVE_HAVE_CUDA
            int runtime = 0;
            cudaRuntimeGetVersion (&runtime);
            printf ("sigserve %s (libzmq %d.%d.%d, backends: cpu, cuda with CUDA runtime %d.%d)\n", SIGSERVE_VERSION,
                    major, minor, patch, runtime / 1000, runtime % 1000 / 10);
#else
            printf ("sigserve %s (libzmq %d.%d.%d, backends: cpu)\n", SIGSERVE_VERSION, major, minor, patch);
#endif
            return 0;
        } else if ((strcmp (argv[i], "--config") == 0 || strcmp (argv[i], "--check-config") == 0) && i + 1 < argc) {
            check_only = strcmp (argv[i], "--check-config") == 0;
            config_path = argv[++i];
        } else if (strcmp (argv[i], "--log-level") == 0 && i + 1 < argc) {
            level_override = argv[++i];
        } else {
            fprintf (stderr, "sigserve: unknown or incomplete argument \"%s\"\n", argv[i]);
            s_usage (stderr);
            return 2;
        }
    }
    if (!config_path) {
        fprintf (stderr, "sigserve: --config FILE is required\n");
        s_usage (stderr);
        return 2;
    }
    char err[1024];
    config_t *cfg = config_load (config_path, err, sizeof err);
    if (!cfg) {
        fprintf (stderr, "sigserve: %s\n", err);
        return 2;
    }
    log_level_t level;
    const char *level_name = level_override ? level_override : cfg->server.log_level;
    if (log_level_from_name (level_name, &level) != 0) {
        fprintf (stderr, "sigserve: --log-level: expected one of error, warn, info, debug, got \"%s\"\n", level_name);
        config_destroy (&cfg);
        return 2;
    }
    log_set_level (level);

    model_registry_t *models = model_registry_new (cfg, err, sizeof err);
    if (!models) {
        log_error ("%s: %s", config_path, err);
        config_destroy (&cfg);
        return 2;
    }
    if (check_only) {
        printf ("%s: ok: %zu endpoint(s), %zu model(s)\n", config_path, cfg->server.endpoint_count,
                model_registry_count (models));
        for (size_t i = 0; i < model_registry_count (models); i++) {
            model_t *m = model_registry_at (models, i);
            printf ("  %s version %s: %u -> %u, backend %s, kernel %s, max_rows %u\n", model_name (m),
                    model_version (m), model_input_size (m), model_output_size (m), model_backend_name (m),
                    model_kernel_name (m), model_max_rows (m));
        }
        model_registry_destroy (&models);
        config_destroy (&cfg);
        return 0;
    }

    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset (&sa.sa_mask);
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    signal (SIGPIPE, SIG_IGN);

    int rc = 0;
    server_t *server = server_new (&cfg->server, models, err, sizeof err);
    if (!server) {
        log_error ("%s: %s", config_path, err);
        rc = 1;
    } else {
        log_info ("sigserve %s ready", SIGSERVE_VERSION);
        rc = server_run (server, &s_stop) == 0 ? 0 : 1;
        server_destroy (&server);
    }
    model_registry_destroy (&models);
    config_destroy (&cfg);
    log_info ("sigserve stopped");
    return rc;
}
