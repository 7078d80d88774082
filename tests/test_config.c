/* config.c: the shipped configs load, defaults and path resolution are as documented, every value
 * is read where it belongs, the derived sizes (request buffers, graphs, serving threads) are right,
 * the enums' names, and config/README.md has a row for every key of the tables. test_config_errors.c
 * has every kind of bad input and its message (tests/config_tests.h: what the two share). Runs from
 * the repository root. */
#include "config_tests.h"

/* ---------------------------------------------------------------- files that must load */

START_TEST (test_default_config_loads)
{
    char err[512];
    config_t *cfg = config_load ("config/sigserve.json", err, sizeof err);
    ck_assert_msg (cfg != NULL, "config/sigserve.json: %s", err);
    ck_assert_str_eq (cfg->path, "config/sigserve.json");
    ck_assert_uint_eq (cfg->server.endpoint_count, 1);
    ck_assert_str_eq (cfg->server.endpoints[0], "tcp://127.0.0.1:5555");
    ck_assert_uint_eq (cfg->server.max_message_bytes, 65536);
    ck_assert (!cfg->server.busy_poll);
    ck_assert_str_eq (cfg->server.log_level, "info");
    ck_assert_uint_eq (cfg->server.io_threads, 1);
    ck_assert_uint_eq (cfg->server.queue_depth, 0);
    ck_assert_uint_eq (cfg->model_count, 1);
    const model_config_t *m = &cfg->models[0];
    ck_assert_str_eq (m->name, "tick_mlp");
    ck_assert_str_eq (m->version, "1");
    ck_assert_int_eq (m->backend, BACKEND_AUTO);
    ck_assert_int_eq (m->kernel, CUDA_KERNEL_WARP);
    ck_assert_int_eq (m->wait, CUDA_WAIT_SPIN);
    ck_assert (!m->zero_copy);
    ck_assert_int_eq (m->cpu_kernel, CPU_KERNEL_LOOP);
    ck_assert (m->graph);
    ck_assert_int_eq (m->device, 0);
    ck_assert_uint_eq (m->max_rows, 16);
    ck_assert_str_eq (m->weights, "config/../build/models/tick_mlp.safetensors");
    ck_assert_uint_eq (m->layer_count, 3);
    const char *weights[] = { "0.weight", "2.weight", "4.weight" };
    const char *biases[] = { "0.bias", "2.bias", "4.bias" };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq (m->layers[i].weight, weights[i]);
        ck_assert_str_eq (m->layers[i].bias, biases[i]);
        ck_assert_int_eq (m->layers[i].activation, acts[i]);
    }
    config_destroy (&cfg);
    ck_assert_ptr_null (cfg);
    config_destroy (&cfg);      /* safe twice */
    config_destroy (NULL);
}
END_TEST

START_TEST (test_example_cpu_config_loads)
{
    char err[512];
    config_t *cfg = config_load ("config/example-cpu.json", err, sizeof err);
    ck_assert_msg (cfg != NULL, "config/example-cpu.json: %s", err);
    ck_assert_uint_eq (cfg->server.endpoint_count, 2);
    ck_assert_str_eq (cfg->server.endpoints[0], "tcp://127.0.0.1:5555");
    ck_assert_str_eq (cfg->server.endpoints[1], "ipc:///tmp/sigserve.ipc");
    ck_assert_int_eq (cfg->models[0].backend, BACKEND_CPU);
    ck_assert_int_eq (cfg->models[0].cpu_kernel, CPU_KERNEL_LOOP);
    ck_assert_str_eq (cfg->models[0].weights, "config/../build/models/tick_mlp.safetensors");
    ck_assert_uint_eq (cfg->models[0].layer_count, 3);
    ck_assert_str_eq (cfg->models[0].layers[2].bias, "4.bias");
    ck_assert_int_eq (cfg->models[0].layers[2].activation, ACTIVATION_NONE);
    config_destroy (&cfg);
}
END_TEST

START_TEST (test_defaults_when_absent)
{
    char err[512];
    config_t *cfg = s_parse ("{" SERVER_OK ", " MODELS_OK "}", err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_str_eq (cfg->path, "test.json");
    ck_assert_uint_eq (cfg->server.max_message_bytes, 65536);
    ck_assert (!cfg->server.busy_poll);
    ck_assert_str_eq (cfg->server.log_level, "info");
    ck_assert_uint_eq (cfg->server.io_threads, 1);
    ck_assert_uint_eq (cfg->server.queue_depth, 0);
    const model_config_t *m = &cfg->models[0];
    ck_assert_str_eq (m->version, "1");
    ck_assert_int_eq (m->backend, BACKEND_AUTO);
    ck_assert_int_eq (m->kernel, CUDA_KERNEL_WARP);
    ck_assert_int_eq (m->wait, CUDA_WAIT_SPIN);
    ck_assert_int_eq (m->cpu_kernel, CPU_KERNEL_LOOP);
    ck_assert (m->graph);
    ck_assert_int_eq (m->device, 0);
    ck_assert_uint_eq (m->max_rows, 16);
    ck_assert_str_eq (m->layers[0].bias, "0.bias");
    ck_assert_int_eq (m->layers[0].activation, ACTIVATION_NONE);
    ck_assert_int_eq (m->fallback.mode, FALLBACK_AUTO);     /* decided at load: config/README.md */
    config_destroy (&cfg);
}
END_TEST

/* "fallback": the two words and the object, its instances defaulting to 1. */
START_TEST (test_fallback_read)
{
    const struct {
        const char *json;
        fallback_mode_t mode;
        uint32_t instances;
    } cases[] = {
        { WITH_MODEL (", 'fallback': 'off'"), FALLBACK_OFF, 0 },
        { WITH_MODEL (", 'fallback': 'auto'"), FALLBACK_AUTO, 0 },
        { WITH_MODEL (", 'fallback': {'backend': 'cpu'}"), FALLBACK_CPU, 1 },
        { WITH_MODEL (", 'fallback': {'backend': 'cpu', 'instances': 3}"), FALLBACK_CPU, 3 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512];
        config_t *cfg = s_parse (cases[i].json, err, sizeof err);
        ck_assert_msg (cfg != NULL, "%s", err);
        ck_assert_int_eq (cfg->models[0].fallback.mode, cases[i].mode);
        ck_assert_uint_eq (cfg->models[0].fallback.instances, cases[i].instances);
        ck_assert_str_eq (fallback_mode_name (cfg->models[0].fallback.mode),
                          cases[i].mode == FALLBACK_OFF ? "off" : cases[i].mode == FALLBACK_CPU ? "cpu" : "auto");
        config_destroy (&cfg);
    }
}
END_TEST

START_TEST (test_every_value_read)
{
    char err[512];
    config_t *cfg = s_parse (
        "{'server': {'endpoints': ['tcp://*:6000', 'ipc:///tmp/a.ipc', 'inproc://x'], 'transport': 'libzmq',"
        "  'max_message_bytes': 67108864, 'busy_poll': true, 'log_level': 'debug',"
        "  'io_threads': 16, 'queue_depth': 4096},"
        " 'models': [{'name': 'A-z_0.9', 'version': 'v2.1 beta', 'backend': 'cuda', 'kernel': 'mbyv',"
        "  'cpu_kernel': 'blas', 'graph': false, 'zero_copy': true, 'wait': 'block', 'device': 63, 'max_rows': 4096,"
        "  'weights': '/abs/w.safetensors', 'layers': ["
        "    {'weight': 'fc1.weight', 'bias': 'fc1.b', 'activation': 'sigmoid'},"
        "    {'weight': 'fc2', 'bias': null, 'activation': 'tanh'}]},"
        "  {'name': 'B', 'kernel': 'cublas', 'max_rows': 1.0, 'weights': 'b', 'layers': [" LAYER_OK "]}]}",
        err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_uint_eq (cfg->server.endpoint_count, 3);
    ck_assert_str_eq (cfg->server.endpoints[2], "inproc://x");
    ck_assert_int_eq (cfg->server.transport, TRANSPORT_LIBZMQ);
    ck_assert_uint_eq (cfg->server.max_message_bytes, 67108864);
    ck_assert (cfg->server.busy_poll);
    ck_assert_str_eq (cfg->server.log_level, "debug");
    ck_assert_uint_eq (cfg->server.io_threads, 16);
    ck_assert_uint_eq (cfg->server.queue_depth, 4096);
    ck_assert_uint_eq (cfg->model_count, 2);
    const model_config_t *m = &cfg->models[0];
    ck_assert_str_eq (m->name, "A-z_0.9");
    ck_assert_str_eq (m->version, "v2.1 beta");
    ck_assert_int_eq (m->backend, BACKEND_CUDA);
    ck_assert_int_eq (m->kernel, CUDA_KERNEL_MBYV);
    ck_assert_int_eq (m->wait, CUDA_WAIT_BLOCK);
    ck_assert (m->zero_copy);
    ck_assert_int_eq (m->cpu_kernel, CPU_KERNEL_BLAS);
    ck_assert (!m->graph);
    ck_assert_int_eq (m->device, 63);
    ck_assert_uint_eq (m->max_rows, 4096);
    ck_assert_str_eq (m->weights, "/abs/w.safetensors");
    ck_assert_uint_eq (m->layer_count, 2);
    ck_assert_str_eq (m->layers[0].bias, "fc1.b");
    ck_assert_int_eq (m->layers[0].activation, ACTIVATION_SIGMOID);
    ck_assert_str_eq (m->layers[1].weight, "fc2");
    ck_assert_str_eq (m->layers[1].bias, "");
    ck_assert_int_eq (m->layers[1].activation, ACTIVATION_TANH);
    ck_assert_int_eq (cfg->models[1].kernel, CUDA_KERNEL_CUBLAS);
    ck_assert_uint_eq (cfg->models[1].max_rows, 1);
    ck_assert_str_eq (cfg->models[1].weights, "/srv/conf/b");
    config_destroy (&cfg);
}
END_TEST

START_TEST (test_request_buffers_and_graph_sizes)
{
    char err[512];
    /* max_rows 4096 over 3 instances: 16-row buffers, 6 large ones, graphs for the powers of two */
    config_t *cfg = s_parse (WITH_MODEL (", 'max_rows': 4096, 'instances': 3"), err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    const model_config_t *m = &cfg->models[0];
    ck_assert_uint_eq (m->buffer_rows, 16);
    ck_assert_uint_eq (m->large_buffers, 6);
    ck_assert_uint_eq (m->graph_rows_count, 13);
    ck_assert_int_eq (m->graph_rows[0], 1);
    ck_assert_int_eq (m->graph_rows[12], 4096);
    config_destroy (&cfg);
    /* given: kept as given */
    cfg = s_parse (WITH_MODEL (", 'max_rows': 100, 'max_batch_rows': 200, 'buffer_rows': 4, 'large_buffers': 9, "
                               "'graph_rows': [1, 10, 200]"), err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    m = &cfg->models[0];
    ck_assert_uint_eq (m->buffer_rows, 4);
    ck_assert_uint_eq (m->large_buffers, 9);
    ck_assert_uint_eq (m->graph_rows_count, 3);
    ck_assert_int_eq (m->graph_rows[1], 10);
    config_destroy (&cfg);
    const struct { const char *extra, *error; } bad[] = {
        { ", 'max_rows': 8, 'graph_rows': [1, 4, 2, 8]",
          "test.json: models[0].graph_rows: expected batch sizes in increasing order" },
        { ", 'max_rows': 8, 'graph_rows': [1, 4]",
          "test.json: models[0].graph_rows: the largest must be at least the largest launch, max (max_rows, "
          "max_batch_rows) = 8" },
        { ", 'max_rows': 8, 'graph_rows': [1, 16]",
          "test.json: models[0].graph_rows: at most the largest launch, max (max_rows, max_batch_rows) = 8" },
        { ", 'max_rows': 8, 'buffer_rows': 9",
          "test.json: models[0].buffer_rows: at most max_rows (a buffer larger than any request holds nothing more)" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[1024];
        snprintf (json, sizeof json, WITH_MODEL ("%s"), bad[i].extra);
        ck_assert_ptr_null (s_parse (json, err, sizeof err));
        ck_assert_str_eq (err, bad[i].error);
    }
}
END_TEST

START_TEST (test_serving_keys_and_resolved_defaults)
{
    char err[512];
    /* Absent: one instance, unpinned, batches up to max_rows, a queue derived at load (0) with a wait
     * of at most 10 ms, device 0. */
    config_t *cfg = s_parse (WITH_MODEL (", 'max_rows': 12"), err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    const model_config_t *m = &cfg->models[0];
    ck_assert_int_eq (m->type, MODEL_TYPE_MLP);
    ck_assert_uint_eq (m->instances, 1);
    ck_assert_uint_eq (m->cpu_count, 0);
    ck_assert_uint_eq (m->max_batch_rows, 12);
    ck_assert_uint_eq (m->batch_delay_us, 0);
    ck_assert_uint_eq (m->queue_depth, 0);
    ck_assert_uint_eq (m->max_queue_us, 10000);
    ck_assert_uint_eq (m->keep_warm_us, 0);
    ck_assert_uint_eq (m->watchdog_ms, 1000);
    /* request buffers of 12 rows (max_rows, under 16): no large ones; graphs for 1, 2, 4, 8, 12 rows */
    ck_assert_uint_eq (m->buffer_rows, 12);
    ck_assert_uint_eq (m->large_buffers, 0);
    ck_assert_uint_eq (m->graph_rows_count, 5);
    const int buckets[5] = { 1, 2, 4, 8, 12 };
    for (int k = 0; k < 5; k++)
        ck_assert_int_eq (m->graph_rows[k], buckets[k]);
    ck_assert_uint_eq (m->device_count, 1);
    ck_assert_int_eq (m->devices[0], 0);
    ck_assert_int_eq (m->device, 0);
    ck_assert (!cfg->server.queue_depth_given);
    ck_assert_uint_eq (cfg->server.queue_depth, 0);
    ck_assert_uint_eq (cfg->server.drain_ms, 500);
    ck_assert_uint_eq (cfg->server.spin_us, 1000);
    ck_assert_uint_eq (cfg->server.spin_cap_ns, 0);     /* resolved by main, from the machine */
    ck_assert_uint_eq (cfg->server.inline_us, 20);
    ck_assert_str_eq (cfg->server.http, "");
    ck_assert_int_eq (cfg->server.log_format, LOG_FORMAT_TEXT);
    ck_assert_int_eq (cfg->server.transport, TRANSPORT_DEFAULT);
    ck_assert_uint_eq (cfg->server.stats_interval_s, 60);
    ck_assert_str_eq (cfg->server.curve.secret_key_file, "");
    ck_assert_uint_eq (cfg->server.heartbeat_ms, 10000);
    ck_assert_uint_eq (cfg->server.max_connections, 1024);
    ck_assert_uint_eq (cfg->server.max_inflight_per_client, 0);
    ck_assert_uint_eq (cfg->server.ipc_file_mode, 0600);
    config_destroy (&cfg);

    /* Given: every value lands, and a server queue_depth is the models' default. */
    cfg = s_parse ("{'server': {" ENDPOINT ", 'queue_depth': 9, 'cpus': [1, 0], 'drain_ms': 0, 'spin_us': 75, 'inline_us': 0, "
                   "  'http': '0.0.0.0:9464', 'log_format': 'json', 'stats_interval_s': 0, 'heartbeat_ms': 0,"
                   "  'max_connections': 0, 'max_inflight_per_client': 100, 'ipc_mode': '660',"
                   "  'curve': {'secret_key_file': 'keys/server_secret', 'allowed_clients': '/etc/clients'}},"
                   " 'models': [" MODEL_WITH (", 'instances': 4, 'cpus': [2, 3], 'max_batch_rows': 64, "
                   "  'batch_delay_us': 20, 'keep_warm_us': 1000, 'devices': [1, 0], 'kernel': 'persistent', "
                   "  'backend': 'cuda', 'green_context': true, 'watchdog_ms': 250, 'max_queue_us': 2500") ", "
                   "  {'name': 'n', 'weights': 'w', 'layers': [" LAYER_OK "], 'queue_depth': 3, 'device': 2}]}",
                   err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert (cfg->server.queue_depth_given);
    ck_assert_uint_eq (cfg->server.spin_us, 75);
    ck_assert_uint_eq (cfg->server.inline_us, 0);
    ck_assert_uint_eq (cfg->server.cpu_count, 2);
    ck_assert_int_eq (cfg->server.cpus[0], 1);
    ck_assert_int_eq (cfg->server.cpus[1], 0);
    ck_assert_uint_eq (cfg->server.drain_ms, 0);
    ck_assert_str_eq (cfg->server.http, "0.0.0.0:9464");
    ck_assert_int_eq (cfg->server.log_format, LOG_FORMAT_JSON);
    ck_assert_uint_eq (cfg->server.max_inflight_per_client, 100);
    ck_assert_uint_eq (cfg->server.ipc_file_mode, 0660);
    ck_assert_str_eq (cfg->server.curve.secret_key_file, "/srv/conf/keys/server_secret");
    ck_assert_str_eq (cfg->server.curve.allowed_clients, "/etc/clients");
    m = &cfg->models[0];
    ck_assert_uint_eq (m->instances, 4);
    ck_assert_uint_eq (m->cpu_count, 2);
    ck_assert_int_eq (m->cpus[1], 3);
    ck_assert_uint_eq (m->max_batch_rows, 64);
    ck_assert_uint_eq (m->batch_delay_us, 20);
    ck_assert_uint_eq (m->keep_warm_us, 1000);
    ck_assert_uint_eq (m->queue_depth, 9);
    ck_assert_uint_eq (m->max_queue_us, 2500);
    ck_assert_int_eq (m->kernel, CUDA_KERNEL_PERSISTENT);
    ck_assert_uint_eq (m->watchdog_ms, 250);
    ck_assert (m->green_context);
    ck_assert_uint_eq (m->device_count, 2);
    ck_assert_int_eq (m->devices[0], 1);
    ck_assert_int_eq (m->device, 1);
    m = &cfg->models[1];
    ck_assert_uint_eq (m->queue_depth, 3);
    ck_assert (!m->green_context);   /* the default */
    ck_assert_uint_eq (m->device_count, 1);
    ck_assert_int_eq (m->devices[0], 2);
    config_destroy (&cfg);
}
END_TEST

START_TEST (test_lstm_model_keys)
{
    char err[512];
    config_t *cfg = s_parse ("{" SERVER_OK ", 'models': [{'name': 'l', 'type': 'lstm', 'weights': 'w', "
                             "'lstm': 'lstm.', 'window': 64, 'head': {'weight': 'fc.weight', 'activation': 'tanh'}, "
                             "'max_streams': 10, 'stream_idle_s': 5, 'weight_dtype': 'f16', 'advances_apart': true, "
                             "'backend': 'cuda', 'green_context': true}]}",
                             err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    const model_config_t *m = &cfg->models[0];
    ck_assert (m->advances_apart);
    ck_assert (m->green_context);
    ck_assert_int_eq (m->type, MODEL_TYPE_LSTM);
    ck_assert_str_eq (m->rnn_prefix, "lstm.");
    ck_assert_uint_eq (m->window, 64);
    ck_assert_str_eq (m->head.weight, "fc.weight");
    ck_assert_str_eq (m->head.bias, "fc.bias");
    ck_assert_int_eq (m->head.activation, ACTIVATION_TANH);
    ck_assert_uint_eq (m->max_streams, 10);
    ck_assert_uint_eq (m->stream_idle_s, 5);
    ck_assert_int_eq (m->weight_dtype, WEIGHT_DTYPE_F16);
    ck_assert_uint_eq (m->layer_count, 0);
    config_destroy (&cfg);
}
END_TEST

START_TEST (test_bias_null_and_derived)
{
    char err[512];
    config_t *cfg = s_parse (WITH_LAYERS ("{'weight': 'enc.0.weight'}, {'weight': '1.weight', 'bias': null},"
                                          "{'weight': 'x.weight', 'bias': 'other'}"),
                             err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_str_eq (cfg->models[0].layers[0].bias, "enc.0.bias");
    ck_assert_str_eq (cfg->models[0].layers[1].bias, "");
    ck_assert_str_eq (cfg->models[0].layers[2].bias, "other");
    config_destroy (&cfg);

    /* No ".weight" suffix and no bias: the name cannot be guessed. */
    cfg = s_parse (WITH_LAYERS (LAYER_OK ", {'weight': 'w1'}"), err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "test.json: models[0].layers[1].bias: required key missing: the weight \"w1\" "
                           "does not end in \".weight\", so the bias name cannot be derived; give \"bias\" "
                           "(a tensor name, or null for none)");
    /* ... while an explicit null is fine. */
    cfg = s_parse (WITH_LAYERS ("{'weight': 'w1', 'bias': null}"), err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_str_eq (cfg->models[0].layers[0].bias, "");
    config_destroy (&cfg);
}
END_TEST

START_TEST (test_relative_weights_resolved)
{
    char *dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (dir);
    char *json = s_json ("{" SERVER_OK ", 'models': ["
                         "{'name': 'a', 'weights': 'sub/a.safetensors', 'layers': [" LAYER_OK "]},"
                         "{'name': 'b', 'weights': '/opt/b.safetensors', 'layers': [" LAYER_OK "]},"
                         "{'name': 'c', 'weights': '../c.safetensors', 'layers': [" LAYER_OK "]}]}");
    char *path = tu_write_file (dir, "cfg.json", json, -1);
    ck_assert_ptr_nonnull (path);
    char err[512], expect[4096];
    config_t *cfg = config_load (path, err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    snprintf (expect, sizeof expect, "%s/sub/a.safetensors", dir);
    ck_assert_str_eq (cfg->models[0].weights, expect);
    ck_assert_str_eq (cfg->models[1].weights, "/opt/b.safetensors");
    snprintf (expect, sizeof expect, "%s/../c.safetensors", dir);
    ck_assert_str_eq (cfg->models[2].weights, expect);
    ck_assert_str_eq (cfg->path, path);
    config_destroy (&cfg);

    /* A file named without a folder: paths stay relative to the working folder, its own. */
    char cwd[4096];
    ck_assert_ptr_nonnull (getcwd (cwd, sizeof cwd));
    ck_assert_int_eq (chdir (dir), 0);
    cfg = config_load ("cfg.json", err, sizeof err);
    ck_assert_int_eq (chdir (cwd), 0);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_str_eq (cfg->models[0].weights, "sub/a.safetensors");
    config_destroy (&cfg);

    /* config_parse: no base folder keeps the path; a trailing slash is not doubled. */
    cfg = config_parse (json, "x", NULL, err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_str_eq (cfg->models[0].weights, "sub/a.safetensors");
    config_destroy (&cfg);
    cfg = config_parse (json, "x", "/etc/sigserve/", err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_str_eq (cfg->models[0].weights, "/etc/sigserve/sub/a.safetensors");
    config_destroy (&cfg);

    unlink (path);
    rmdir (dir);
    free (path);
    free (json);
    free (dir);
}
END_TEST

START_TEST (test_resolved_path_too_long)
{
    char base[CONFIG_PATH_MAX];
    memset (base, 'd', 4000);
    base[0] = '/';
    base[4000] = '\0';
    char *json = s_json ("{" SERVER_OK ", 'models': [{'name': 'a', 'weights': "
                         "'0123456789012345678901234567890123456789012345678901234567890123456789"
                         "012345678901234567890123456789.safetensors', 'layers': [" LAYER_OK "]}]}");
    char err[512];
    config_t *cfg = config_parse (json, "t.json", base, err, sizeof err);
    free (json);
    ck_assert_ptr_null (cfg);
    ck_assert_msg (strstr (err, "t.json: models[0].weights: expected a path of at most 4095 bytes once "
                                "joined to the config's folder") != NULL, "%s", err);
    ck_assert_msg (strstr (err, "got 4113 bytes") != NULL, "%s", err);
}
END_TEST

/* config/README.md is the reference: every key of the tables has its row ("| `key` |") in the
 * section whose heading names the object that holds it ("## `server.curve`: ..."; a heading may
 * name several), and every top-level key a heading of its own. */
typedef struct {
    char *text;
    char missing[4096];
    size_t count;
} doc_t;

/* Whether TEXT has, under a "## " heading that names SECTION in backticks (before the heading's
 * colon), a row for KEY; a top-level key (SECTION "") a heading of its own. */
static bool s_doc_has (const char *text, const char *section, const char *key)
{
    char want_heading[160], want_row[96], top[96];
    snprintf (want_heading, sizeof want_heading, "`%s`", section);
    snprintf (want_row, sizeof want_row, "| `%s` |", key);
    snprintf (top, sizeof top, "## `%s`", key);
    bool in = false;
    for (const char *line = text; *line;) {
        const char *end = strchr (line, '\n');
        size_t len = end ? (size_t) (end - line) : strlen (line);
        char copy[512];
        snprintf (copy, sizeof copy, "%.*s", (int) len, line);
        if (strncmp (copy, "## ", 3) == 0) {
            if (section[0] == '\0' && strncmp (copy, top, strlen (top)) == 0)
                return true;
            char *colon = strstr (copy, "`:");   /* the names end where the description starts */
            if (colon)
                colon[1] = '\0';
            in = section[0] != '\0' && strstr (copy, want_heading) != NULL;
        } else if (in && strncmp (copy, want_row, strlen (want_row)) == 0)
            return true;
        line += len + (end ? 1 : 0);
    }
    return false;
}

static void s_doc_key (const char *section, const char *key, void *arg)
{
    doc_t *d = arg;
    d->count++;
    if (s_doc_has (d->text, section, key))
        return;
    size_t used = strlen (d->missing);
    snprintf (d->missing + used, sizeof d->missing - used, "%s%s%s%s", used ? ", " : "", section,
              section[0] ? "." : "", key);
}

START_TEST (test_readme_documents_every_key)
{
    FILE *f = fopen ("config/README.md", "r");
    ck_assert_msg (f != NULL, "config/README.md: %s (run from the repository root)", strerror (errno));
    doc_t d = { .text = calloc (1, 1 << 20) };
    size_t n = fread (d.text, 1, (1 << 20) - 1, f);
    fclose (f);
    ck_assert_uint_gt (n, 1000);
    config_each_key (s_doc_key, &d);
    ck_assert_uint_ge (d.count, 50);
    ck_assert_msg (d.missing[0] == '\0', "config/README.md has no row for: %s", d.missing);
    /* and the check can fail: a key that is not there */
    ck_assert (!s_doc_has (d.text, "server", "no_such_key"));
    ck_assert (!s_doc_has (d.text, "server.curve", "endpoints"));
    free (d.text);
}
END_TEST

/* What adaptive spinning counts: the front, libzmq's I/O threads, each own-worker model's instances, and
 * each group once, with as many workers as its largest member has instances. */
START_TEST (test_serving_threads_count_a_group_once)
{
    char err[512];
#define NAMED(n, extra) "{'name': '" n "', 'weights': 'w.safetensors', 'layers': [" LAYER_OK "]" extra "}"
    config_t *cfg = s_parse ("{'server': {" ENDPOINT ", 'io_threads': 2}, 'models': ["
                             NAMED ("a", ", 'instances': 3") ","
                             NAMED ("b", ", 'group': 'g'") "," NAMED ("c", ", 'group': 'g', 'instances': 2") ","
                             NAMED ("d", ", 'group': 'h'") "," NAMED ("e", ", 'group': 'g'") "]}",
                             err, sizeof err);
#undef NAMED
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_str_eq (cfg->models[1].group, "g");
    ck_assert_str_eq (cfg->models[0].group, "");
    /* 1 front + 3 (a) + 2 (group g: its largest member, c) + 1 (group h): zmtp has no I/O thread */
    ck_assert_uint_eq (config_serving_threads (cfg), 7);
    cfg->server.transport = TRANSPORT_LIBZMQ;   /* and libzmq's 2 I/O threads */
    ck_assert_uint_eq (config_serving_threads (cfg), 9);
    config_destroy (&cfg);
}
END_TEST

START_TEST (test_names)
{
    ck_assert_str_eq (activation_name (ACTIVATION_NONE), "none");
    ck_assert_str_eq (activation_name (ACTIVATION_RELU), "relu");
    ck_assert_str_eq (activation_name (ACTIVATION_SIGMOID), "sigmoid");
    ck_assert_str_eq (activation_name (ACTIVATION_TANH), "tanh");
    ck_assert_str_eq (activation_name ((activation_t) 99), "unknown");
    ck_assert_str_eq (backend_kind_name (BACKEND_AUTO), "auto");
    ck_assert_str_eq (backend_kind_name (BACKEND_CPU), "cpu");
    ck_assert_str_eq (backend_kind_name (BACKEND_CUDA), "cuda");
    ck_assert_str_eq (backend_kind_name ((backend_kind_t) -1), "unknown");
    ck_assert_str_eq (cuda_kernel_name (CUDA_KERNEL_WARP), "warp");
    ck_assert_str_eq (cuda_kernel_name (CUDA_KERNEL_CUBLAS), "cublas");
    ck_assert_str_eq (cuda_kernel_name (CUDA_KERNEL_MBYV), "mbyv");
    ck_assert_str_eq (cuda_kernel_name (CUDA_KERNEL_FUSED), "fused");
    ck_assert_str_eq (cuda_wait_name (CUDA_WAIT_SPIN), "spin");
    ck_assert_str_eq (cuda_wait_name (CUDA_WAIT_YIELD), "yield");
    ck_assert_str_eq (cuda_wait_name (CUDA_WAIT_BLOCK), "block");
    ck_assert_str_eq (cuda_kernel_name (CUDA_KERNEL_PERSISTENT), "persistent");
    ck_assert_str_eq (cuda_kernel_name ((cuda_kernel_t) 5), "unknown");
    ck_assert_str_eq (cuda_wait_name ((cuda_wait_t) 3), "unknown");
    ck_assert_str_eq (cpu_kernel_name (CPU_KERNEL_LOOP), "loop");
    ck_assert_str_eq (cpu_kernel_name (CPU_KERNEL_BLAS), "blas");
    ck_assert_str_eq (cpu_kernel_name ((cpu_kernel_t) 2), "unknown");
}
END_TEST

static Suite *s_suite (void)
{
    Suite *s = suite_create ("config");
    TCase *tc = tcase_create ("config");
    tcase_add_test (tc, test_default_config_loads);
    tcase_add_test (tc, test_example_cpu_config_loads);
    tcase_add_test (tc, test_defaults_when_absent);
    tcase_add_test (tc, test_fallback_read);
    tcase_add_test (tc, test_every_value_read);
    tcase_add_test (tc, test_serving_keys_and_resolved_defaults);
    tcase_add_test (tc, test_lstm_model_keys);
    tcase_add_test (tc, test_bias_null_and_derived);
    tcase_add_test (tc, test_relative_weights_resolved);
    tcase_add_test (tc, test_resolved_path_too_long);
    tcase_add_test (tc, test_names);
    tcase_add_test (tc, test_serving_threads_count_a_group_once);
    tcase_add_test (tc, test_readme_documents_every_key);
    tcase_add_test (tc, test_request_buffers_and_graph_sizes);
    suite_add_tcase (s, tc);
    return s;
}

int main (void)
{
    return tu_run_suite (s_suite ());
}
