/* config.c: every kind of bad input fails with the message an operator would need: file, JSON
 * path, expected vs received. Unknown keys at every level, wrong types, values out of range and
 * keys that do not go together (a table of cases, each with its whole message), too many models or
 * layers, invalid JSON (the line and column), a file that cannot be read or is too large, an error
 * buffer too small or none, and long values cut in messages. test_config.c has what loads
 * (tests/config_tests.h: what the two share). Runs from the repository root. */
#include "config_tests.h"

/* ---------------------------------------------------------------- bad input: exact messages */

typedef struct {
    const char *what;
    const char *json;       /* single-quoted */
    const char *message;    /* the whole message */
} bad_case_t;

static const bad_case_t s_bad[] = {
    /* unknown keys, at every level */
    { "unknown top-level key", "{" SERVER_OK ", " MODELS_OK ", 'modles': []}",
      "test.json: modles: unknown key; did you mean \"models\"? (expected one of server, models)" },
    { "unknown top-level key, nothing near", "{" SERVER_OK ", " MODELS_OK ", 'clients': []}",
      "test.json: clients: unknown key (expected one of server, models)" },
    { "unknown server key", WITH_SERVER (", 'bogus': 1"),
      "test.json: server.bogus: unknown key (expected one of endpoints, transport, max_message_bytes, busy_poll, "
      "spin_us, inline_us, gpu_processes, standby, log_level, log_format, io_threads, fronts, queue_depth, cpus, drain_ms, http, "
      "stats_interval_s, curve, heartbeat_ms, max_connections, max_inflight_per_client, ipc_mode, kernel_cache_dir)" },
    { "server key misspelt", WITH_SERVER (", 'max_message_size': 1024"),
      "test.json: server.max_message_size: unknown key; did you mean \"max_message_bytes\"? (expected one of endpoints, "
      "transport, max_message_bytes, busy_poll, spin_us, inline_us, gpu_processes, standby, log_level, log_format, io_threads, "
      "fronts, queue_depth, cpus, drain_ms, http, stats_interval_s, curve, heartbeat_ms, max_connections, "
      "max_inflight_per_client, ipc_mode, kernel_cache_dir)" },
    { "server key in the singular", "{'server': {'endpoint': ['tcp://127.0.0.1:5555']}, " MODELS_OK "}",
      "test.json: server.endpoint: unknown key; did you mean \"endpoints\"? (expected one of endpoints, "
      "transport, max_message_bytes, busy_poll, spin_us, inline_us, gpu_processes, standby, log_level, log_format, io_threads, "
      "fronts, queue_depth, cpus, drain_ms, http, stats_interval_s, curve, heartbeat_ms, max_connections, "
      "max_inflight_per_client, ipc_mode, kernel_cache_dir)" },
    { "curve key cut short", WITH_SERVER (", 'curve': {'secret_key': 'k', 'allowed_clients': 'd'}"),
      "test.json: server.curve.secret_key: unknown key; did you mean \"secret_key_file\"? (expected one of "
      "secret_key_file, allowed_clients)" },
    { "model key with letters swapped", WITH_MODEL (", 'wieghts': 'w.safetensors'"),
      "test.json: models[0].wieghts: unknown key; did you mean \"weights\"? (expected one of name, version, type, "
      "backend, kernel, cpu_kernel, graph, zero_copy, wait, device, devices, group, max_rows, instances, cpus, "
      "max_batch_rows, batch_delay_us, buffer_rows, large_buffers, graph_rows, queue_depth, max_queue_us, keep_warm_us, "
      "watchdog_ms, weight_dtype, specialise, weights, green_context, fallback, layers, split)" },
    { "model key in another case", WITH_MODEL (", 'Max_Rows': 4"),
      "test.json: models[0].Max_Rows: unknown key; did you mean \"max_rows\"? (expected one of name, version, type, "
      "backend, kernel, cpu_kernel, graph, zero_copy, wait, device, devices, group, max_rows, instances, cpus, "
      "max_batch_rows, batch_delay_us, buffer_rows, large_buffers, graph_rows, queue_depth, max_queue_us, keep_warm_us, "
      "watchdog_ms, weight_dtype, specialise, weights, green_context, fallback, layers, split)" },
    { "layer key misspelt", WITH_LAYERS ("{'weight': '0.weight', 'activaton': 'relu'}"),
      "test.json: models[0].layers[0].activaton: unknown key; did you mean \"activation\"? (expected one of weight, "
      "bias, activation)" },
    { "head key misspelt", "{" SERVER_OK ", 'models': [{'name': 'l', 'type': 'lstm', 'weights': 'w', 'window': 8, "
      "'head': {'wieght': 'fc.weight'}}]}",
      "test.json: models[0].head.wieght: unknown key; did you mean \"weight\"? (expected one of weight, bias, "
      "activation)" },
    { "more fronts than endpoints", WITH_SERVER (", 'fronts': 2, 'transport': 'libzmq'"),
      "test.json: server.fronts: 2 fronts need at least 2 endpoints on the libzmq transport (an endpoint's socket "
      "belongs to one front); got 1: add endpoints, lower fronts to 1, or use transport \"zmtp\"" },
    { "fronts sharing a wildcard port", "{'server': {'endpoints': ['tcp://127.0.0.1:*'], 'fronts': 2}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: tcp://127.0.0.1:*: more fronts than endpoints share each tcp:// endpoint, "
      "which needs a port number (\"*\" would give each front a port of its own); give it one, or lower fronts "
      "to 1" },
    { "fronts 0", WITH_SERVER (", 'fronts': 0"), "test.json: server.fronts: expected an integer from 1 to 8, got 0" },
    { "unknown model key", WITH_MODEL (", 'kernal': 'warp'"),
      "test.json: models[0].kernal: unknown key; did you mean \"kernel\"? (expected one of name, version, type, backend, kernel, "
      "cpu_kernel, graph, zero_copy, wait, device, devices, group, max_rows, instances, cpus, max_batch_rows, "
      "batch_delay_us, buffer_rows, large_buffers, graph_rows, queue_depth, max_queue_us, keep_warm_us, watchdog_ms, weight_dtype, "
      "specialise, weights, green_context, fallback, layers, split)" },
    /* "fallback": "off", "auto" or {"backend": "cpu", "instances": N} */
    { "fallback an unknown word", WITH_MODEL (", 'fallback': 'on'"),
      "test.json: models[0].fallback: expected \"off\", \"auto\" or an object {\"backend\": \"cpu\", \"instances\": N}, "
      "got \"on\"" },
    { "fallback a boolean", WITH_MODEL (", 'fallback': false"),
      "test.json: models[0].fallback: expected \"off\", \"auto\" or an object {\"backend\": \"cpu\", \"instances\": N}, "
      "got a boolean" },
    { "fallback on a GPU", WITH_MODEL (", 'fallback': {'backend': 'cuda'}"),
      "test.json: models[0].fallback.backend: expected one of cpu, got \"cuda\"" },
    { "fallback without its backend", WITH_MODEL (", 'fallback': {'instances': 2}"),
      "test.json: models[0].fallback.backend: required key missing" },
    { "fallback of no instances", WITH_MODEL (", 'fallback': {'backend': 'cpu', 'instances': 0}"),
      "test.json: models[0].fallback.instances: expected an integer from 1 to 64, got 0" },
    { "fallback key misspelt", WITH_MODEL (", 'fallback': {'backend': 'cpu', 'instance': 2}"),
      "test.json: models[0].fallback.instance: unknown key; did you mean \"instances\"? (expected one of backend, "
      "instances)" },
    { "green_context on the CPU", WITH_MODEL (", 'backend': 'cpu', 'green_context': true"),
      "test.json: models[0].green_context: only with \"backend\": \"cuda\" (SMs of a GPU held for the model's "
      "persistent kernel); this model's backend is \"cpu\"" },
    { "green_context with auto", WITH_MODEL (", 'green_context': true"),
      "test.json: models[0].green_context: only with \"backend\": \"cuda\" (SMs of a GPU held for the model's "
      "persistent kernel); this model's backend is \"auto\"" },
    { "green_context with a launched kernel", WITH_MODEL (", 'backend': 'cuda', 'kernel': 'fused', 'green_context': true"),
      "test.json: models[0].green_context: only with \"kernel\": \"persistent\" (a resident kernel holds SMs; a "
      "launched one gives them back); this model's kernel is \"fused\"" },
    { "green_context with the default kernel", WITH_MODEL (", 'backend': 'cuda', 'green_context': true"),
      "test.json: models[0].green_context: only with \"kernel\": \"persistent\" (a resident kernel holds SMs; a "
      "launched one gives them back); this model's kernel is \"warp\"" },
    { "green_context not a boolean", WITH_MODEL (", 'green_context': 1"),
      "test.json: models[0].green_context: expected a boolean, got a number" },
    { "unknown layer key", WITH_LAYERS ("{'weight': '0.weight', 'act': 'relu'}"),
      "test.json: models[0].layers[0].act: unknown key (expected one of weight, bias, activation)" },
    { "key repeated", WITH_SERVER (", 'log_level': 'info', 'log_level': 'debug'"),
      "test.json: server.log_level: duplicate key" },

    /* wrong types */
    { "bool as string", WITH_MODEL (", 'graph': 'true'"),
      "test.json: models[0].graph: expected a boolean, got a string" },
    { "bool as number", WITH_SERVER (", 'busy_poll': 1"),
      "test.json: server.busy_poll: expected a boolean, got a number" },
    { "standby not a boolean", WITH_SERVER (", 'standby': 'on'"),
      "test.json: server.standby: expected a boolean, got a string" },
    { "standby misspelt", WITH_SERVER (", 'stand_by': false"),
      "test.json: server.stand_by: unknown key; did you mean \"standby\"? (expected one of endpoints, transport, "
      "max_message_bytes, busy_poll, spin_us, inline_us, gpu_processes, standby, log_level, log_format, io_threads, "
      "fronts, queue_depth, cpus, drain_ms, http, stats_interval_s, curve, heartbeat_ms, max_connections, "
      "max_inflight_per_client, ipc_mode, kernel_cache_dir)" },
    { "int as string", WITH_SERVER (", 'io_threads': '3'"),
      "test.json: server.io_threads: expected an integer from 1 to 16, got a string" },
    { "int as null", WITH_MODEL (", 'device': null"),
      "test.json: models[0].device: expected an integer from 0 to 63, got null" },
    { "enum as number", WITH_MODEL (", 'backend': 1"),
      "test.json: models[0].backend: expected one of auto, cpu, cuda, got a number" },
    { "string as number", "{" SERVER_OK ", 'models': [{'name': 5, 'weights': 'w', 'layers': [" LAYER_OK "]}]}",
      "test.json: models[0].name: expected a string, got a number" },
    { "path as boolean", "{" SERVER_OK ", 'models': [{'name': 'm', 'weights': true, 'layers': [" LAYER_OK "]}]}",
      "test.json: models[0].weights: expected a string, got a boolean" },
    { "bias as number", WITH_LAYERS ("{'weight': '0.weight', 'bias': 0}"),
      "test.json: models[0].layers[0].bias: expected a string or null, got a number" },
    { "endpoints as string", "{'server': {'endpoints': 'tcp://127.0.0.1:5555'}, " MODELS_OK "}",
      "test.json: server.endpoints: expected an array of 1 to 16 endpoints, got a string" },
    { "endpoint as number", "{'server': {'endpoints': [5555]}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: expected a string, got a number" },
    { "server as array", "{'server': [], " MODELS_OK "}",
      "test.json: server: expected an object, got an array" },
    { "models as object", "{" SERVER_OK ", 'models': {}}",
      "test.json: models: expected an array of 1 to 64 models, got an object" },
    { "model as string", "{" SERVER_OK ", 'models': ['tick_mlp']}",
      "test.json: models[0]: expected a model object, got a string" },
    { "layers as object", "{" SERVER_OK ", 'models': [{'name': 'm', 'weights': 'w', 'layers': {}}]}",
      "test.json: models[0].layers: expected an array of 1 to 64 layers, got an object" },
    { "layer as array", WITH_LAYERS ("[]"),
      "test.json: models[0].layers[0]: expected a layer object, got an array" },
    { "log_level as bool", WITH_SERVER (", 'log_level': true"),
      "test.json: server.log_level: expected one of error, warn, info, debug, got a boolean" },
    { "top level array", "[]", "test.json: expected a JSON object at the top level, got an array" },

    /* out of range, low and high */
    { "max_message_bytes low", WITH_SERVER (", 'max_message_bytes': 10"),
      "test.json: server.max_message_bytes: expected an integer from 64 to 67108864, got 10" },
    { "max_message_bytes high", WITH_SERVER (", 'max_message_bytes': 67108865"),
      "test.json: server.max_message_bytes: expected an integer from 64 to 67108864, got 67108865" },
    { "io_threads low", WITH_SERVER (", 'io_threads': 0"),
      "test.json: server.io_threads: expected an integer from 1 to 16, got 0" },
    { "io_threads high", WITH_SERVER (", 'io_threads': 17"),
      "test.json: server.io_threads: expected an integer from 1 to 16, got 17" },
    { "queue_depth low", WITH_SERVER (", 'queue_depth': 0"),
      "test.json: server.queue_depth: expected an integer from 1 to 65536, got 0" },
    { "queue_depth high", WITH_SERVER (", 'queue_depth': 65537"),
      "test.json: server.queue_depth: expected an integer from 1 to 65536, got 65537" },
    { "model queue_depth low", WITH_MODEL (", 'queue_depth': 0"),
      "test.json: models[0].queue_depth: expected an integer from 1 to 65536, got 0" },
    { "inline_us high", WITH_SERVER (", 'inline_us': 10001"),
      "test.json: server.inline_us: expected an integer from 0 to 10000, got 10001" },
    { "max_queue_us low", WITH_MODEL (", 'max_queue_us': 0"),
      "test.json: models[0].max_queue_us: expected an integer from 1 to 60000000, got 0" },
    { "max_queue_us high", WITH_MODEL (", 'max_queue_us': 60000001"),
      "test.json: models[0].max_queue_us: expected an integer from 1 to 60000000, got 60000001" },
    { "instances low", WITH_MODEL (", 'instances': 0"),
      "test.json: models[0].instances: expected an integer from 1 to 64, got 0" },
    { "instances high", WITH_MODEL (", 'instances': 65"),
      "test.json: models[0].instances: expected an integer from 1 to 64, got 65" },
    { "max_batch_rows low", WITH_MODEL (", 'max_batch_rows': 0"),
      "test.json: models[0].max_batch_rows: expected an integer from 1 to 4096, got 0" },
    { "batch_delay_us high", WITH_MODEL (", 'batch_delay_us': 1000001"),
      "test.json: models[0].batch_delay_us: expected an integer from 0 to 1000000, got 1000001" },
    { "watchdog_ms low", WITH_MODEL (", 'watchdog_ms': 0"),
      "test.json: models[0].watchdog_ms: expected an integer from 1 to 600000, got 0" },
    { "drain_ms high", WITH_SERVER (", 'drain_ms': 600001"),
      "test.json: server.drain_ms: expected an integer from 0 to 600000, got 600001" },
    { "stats_interval_s high", WITH_SERVER (", 'stats_interval_s': 86401"),
      "test.json: server.stats_interval_s: expected an integer from 0 to 86400, got 86401" },
    { "device low", WITH_MODEL (", 'device': -1"),
      "test.json: models[0].device: expected an integer from 0 to 63, got -1" },
    { "device high", WITH_MODEL (", 'device': 64"),
      "test.json: models[0].device: expected an integer from 0 to 63, got 64" },
    { "max_rows low", WITH_MODEL (", 'max_rows': 0"),
      "test.json: models[0].max_rows: expected an integer from 1 to 4096, got 0" },
    { "max_rows high", WITH_MODEL (", 'max_rows': 1e10"),
      "test.json: models[0].max_rows: expected an integer from 1 to 4096, got 10000000000" },
    { "max_rows huge", WITH_MODEL (", 'max_rows': 1e400"),
      "test.json: models[0].max_rows: expected an integer from 1 to 4096, got inf" },

    /* non-integral numbers */
    { "non-integral", WITH_SERVER (", 'io_threads': 1.5"),
      "test.json: server.io_threads: expected an integer from 1 to 16, got 1.5" },
    { "non-integral device", WITH_MODEL (", 'device': 0.25"),
      "test.json: models[0].device: expected an integer from 0 to 63, got 0.25" },

    /* bad enum values */
    { "bad activation", WITH_LAYERS (LAYER_OK ", {'weight': '1.weight', 'activation': 'gelu'}"),
      "test.json: models[0].layers[1].activation: expected one of none, relu, sigmoid, tanh, got \"gelu\"" },
    { "bad backend", WITH_MODEL (", 'backend': 'tpu'"),
      "test.json: models[0].backend: expected one of auto, cpu, cuda, got \"tpu\"" },
    { "bad kernel", WITH_MODEL (", 'kernel': 'Warp'"),
      "test.json: models[0].kernel: expected one of warp, cublas, mbyv, fused, persistent, got \"Warp\"" },
    { "bad type", WITH_MODEL (", 'type': 'rnn'"),
      "test.json: models[0].type: expected one of mlp, lstm, gru, got \"rnn\"" },
    { "bad weight_dtype", WITH_MODEL (", 'weight_dtype': 'fp8'"),
      "test.json: models[0].weight_dtype: expected one of f32, f16, bf16, int8, got \"fp8\"" },
    { "bad log_format", WITH_SERVER (", 'log_format': 'yaml'"),
      "test.json: server.log_format: expected one of text, json, got \"yaml\"" },
    { "bad transport", WITH_SERVER (", 'transport': 'zeromq'"),
      "test.json: server.transport: expected one of zmtp, libzmq, got \"zeromq\"" },
    { "inproc on zmtp", "{'server': {'endpoints': ['tcp://127.0.0.1:5555', 'inproc://x'], 'transport': 'zmtp'}, " MODELS_OK "}",
      "test.json: server.endpoints[1]: inproc://x: inproc:// is libzmq's in-process transport; the zmtp transport "
      "serves tcp:// and ipc:// (use ipc://, or set server.transport to \"libzmq\")" },
    { "bad wait", WITH_MODEL (", 'wait': 'sleep'"),
      "test.json: models[0].wait: expected one of spin, yield, block, got \"sleep\"" },
    { "bad cpu_kernel", WITH_MODEL (", 'cpu_kernel': 'mkl'"),
      "test.json: models[0].cpu_kernel: expected one of loop, blas, got \"mkl\"" },
    { "bad log_level", WITH_SERVER (", 'log_level': 'verbose'"),
      "test.json: server.log_level: expected one of error, warn, info, debug, got \"verbose\"" },

    /* required keys */
    { "no server", "{" MODELS_OK "}", "test.json: server: required key missing" },
    { "no models", "{" SERVER_OK "}", "test.json: models: required key missing" },
    { "no endpoints", "{'server': {'log_level': 'info'}, " MODELS_OK "}",
      "test.json: server.endpoints: required key missing" },
    { "no name", "{" SERVER_OK ", 'models': [{'weights': 'w', 'layers': [" LAYER_OK "]}]}",
      "test.json: models[0].name: required key missing" },
    { "no weights", "{" SERVER_OK ", 'models': [{'name': 'm', 'layers': [" LAYER_OK "]}]}",
      "test.json: models[0].weights: required key missing" },
    { "no layers", "{" SERVER_OK ", 'models': [{'name': 'm', 'weights': 'w'}]}",
      "test.json: models[0].layers: required key missing for \"type\": \"mlp\"" },
    { "no layer weight", WITH_LAYERS ("{'bias': '0.bias'}"),
      "test.json: models[0].layers[0].weight: required key missing" },
    { "empty top level", "{}", "test.json: server: required key missing" },

    /* arrays: counts */
    { "empty endpoints", "{'server': {'endpoints': []}, " MODELS_OK "}",
      "test.json: server.endpoints: expected an array of 1 to 16 endpoints, got an empty array" },
    { "too many endpoints", "{'server': {'endpoints': ['inproc://1', 'inproc://2', 'inproc://3', "
      "'inproc://4', 'inproc://5', 'inproc://6', 'inproc://7', 'inproc://8', 'inproc://9', 'inproc://10', "
      "'inproc://11', 'inproc://12', 'inproc://13', 'inproc://14', 'inproc://15', 'inproc://16', "
      "'inproc://17']}, " MODELS_OK "}",
      "test.json: server.endpoints: expected an array of 1 to 16 endpoints, got 17 endpoints" },
    { "empty models", "{" SERVER_OK ", 'models': []}",
      "test.json: models: expected an array of 1 to 64 models, got an empty array" },
    { "empty layers", "{" SERVER_OK ", 'models': [{'name': 'm', 'weights': 'w', 'layers': []}]}",
      "test.json: models[0].layers: expected an array of 1 to 64 layers, got an empty array" },

    /* endpoints */
    { "bad endpoint scheme", "{'server': {'endpoints': ['tcp://127.0.0.1:5555', 'udp://127.0.0.1:5555']}, "
      MODELS_OK "}",
      "test.json: server.endpoints[1]: expected an endpoint starting with tcp://, ipc:// or inproc://, "
      "got \"udp://127.0.0.1:5555\"" },
    { "endpoint without scheme", "{'server': {'endpoints': ['127.0.0.1:5555']}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: expected an endpoint starting with tcp://, ipc:// or inproc://, "
      "got \"127.0.0.1:5555\"" },
    { "tcp endpoint without port", "{'server': {'endpoints': ['tcp://localhost']}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: expected tcp://HOST:PORT, got \"tcp://localhost\"" },
    { "tcp ipv6 without port", "{'server': {'endpoints': ['tcp://[::1]']}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: expected tcp://HOST:PORT, got \"tcp://[::1]\"" },
    { "ipc endpoint without path", "{'server': {'endpoints': ['ipc://']}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: expected an address after ipc://, got \"ipc://\"" },
    { "empty endpoint", "{'server': {'endpoints': ['']}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: expected a string of 1 to 255 bytes, got an empty string" },
    { "duplicate endpoint", "{'server': {'endpoints': ['tcp://127.0.0.1:5555', 'ipc:///tmp/s', "
      "'tcp://127.0.0.1:5555']}, " MODELS_OK "}",
      "test.json: server.endpoints[2]: duplicate endpoint \"tcp://127.0.0.1:5555\"" },

    /* integer lists */
    { "cpus as number", WITH_MODEL (", 'cpus': 3"),
      "test.json: models[0].cpus: expected an array of 1 to 256 cpus, got a number" },
    { "cpus empty", WITH_SERVER (", 'cpus': []"),
      "test.json: server.cpus: expected an array of 1 to 256 cpus, got an empty array" },
    { "cpu negative", WITH_MODEL (", 'cpus': [0, -1]"),
      "test.json: models[0].cpus[1]: expected an integer from 0 to 65535, got -1" },
    { "cpu as string", WITH_SERVER (", 'cpus': ['0']"),
      "test.json: server.cpus[0]: expected an integer from 0 to 65535, got a string" },
    { "device twice in devices", WITH_MODEL (", 'devices': [0, 1, 0]"),
      "test.json: models[0].devices[2]: duplicate device 0" },
    { "device high in devices", WITH_MODEL (", 'devices': [64]"),
      "test.json: models[0].devices[0]: expected an integer from 0 to 63, got 64" },
    { "device and devices", WITH_MODEL (", 'device': 1, 'devices': [0, 1]"),
      "test.json: models[0].devices: give either \"device\" (one GPU) or \"devices\" (a list), not both" },

    /* model types */
    { "lstm keys on an mlp", WITH_MODEL (", 'window': 64"),
      "test.json: models[0].window: only for models of \"type\": \"lstm\" or \"gru\"; this model is \"mlp\"" },
    { "head on an mlp", WITH_MODEL (", 'head': {'weight': 'fc.weight'}"),
      "test.json: models[0].head: only for models of \"type\": \"lstm\" or \"gru\"; this model is \"mlp\"" },
    { "layers on an lstm", WITH_MODEL (", 'type': 'lstm', 'window': 8, 'head': {'weight': 'fc.weight'}"),
      "test.json: models[0].layers: only for models of \"type\": \"mlp\"; this model is \"lstm\" (its layers come "
      "from the weight_ih_l{k}/weight_hh_l{k} tensors; its output layer is \"head\")" },
    { "lstm without window", "{" SERVER_OK ", 'models': [{'name': 'l', 'type': 'lstm', 'weights': 'w', "
      "'head': {'weight': 'fc.weight'}}]}",
      "test.json: models[0].window: required key missing for \"type\": \"lstm\"" },
    { "lstm without head", "{" SERVER_OK ", 'models': [{'name': 'l', 'type': 'lstm', 'weights': 'w', "
      "'window': 8}]}",
      "test.json: models[0].head: required key missing for \"type\": \"lstm\"" },
    { "window zero", "{" SERVER_OK ", 'models': [{'name': 'l', 'type': 'lstm', 'weights': 'w', "
      "'window': 0, 'head': {'weight': 'fc.weight'}}]}",
      "test.json: models[0].window: expected an integer from 1 to 4096, got 0" },

    /* ports, HTTP endpoint, CURVE, ipc mode */
    { "tcp port too large", "{'server': {'endpoints': ['tcp://127.0.0.1:99999']}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: expected a port from 1 to 65535 (or *) in tcp://HOST:PORT, "
      "got \"tcp://127.0.0.1:99999\"" },
    { "tcp port zero", "{'server': {'endpoints': ['tcp://127.0.0.1:0']}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: expected a port from 1 to 65535 (or *) in tcp://HOST:PORT, "
      "got \"tcp://127.0.0.1:0\"" },
    { "tcp port not a number", "{'server': {'endpoints': ['tcp://127.0.0.1:55x']}, " MODELS_OK "}",
      "test.json: server.endpoints[0]: expected a port from 1 to 65535 (or *) in tcp://HOST:PORT, "
      "got \"tcp://127.0.0.1:55x\"" },
    { "http without port", WITH_SERVER (", 'http': '127.0.0.1'"),
      "test.json: server.http: expected HOST:PORT with a port from 1 to 65535, got \"127.0.0.1\"" },
    { "http port too large", WITH_SERVER (", 'http': '127.0.0.1:70000'"),
      "test.json: server.http: expected HOST:PORT with a port from 1 to 65535, got \"127.0.0.1:70000\"" },
    { "curve without allowlist", WITH_SERVER (", 'curve': {'secret_key_file': 'k_secret'}"),
      "test.json: server.curve.allowed_clients: required key missing" },
    { "curve unknown key", WITH_SERVER (", 'curve': {'secret_key_file': 'k', 'allowed_clients': 'd', 'x': 1}"),
      "test.json: server.curve.x: unknown key (expected one of secret_key_file, allowed_clients)" },
    { "ipc_mode not octal", WITH_SERVER (", 'ipc_mode': '0680'"),
      "test.json: server.ipc_mode: expected an octal file mode such as \"0600\", got \"0680\"" },

    /* names and strings */
    { "duplicate model name", "{" SERVER_OK ", 'models': ["
      "{'name': 'tick_mlp', 'weights': 'a', 'layers': [" LAYER_OK "]},"
      "{'name': 'tick_mlp', 'weights': 'b', 'layers': [" LAYER_OK "]}]}",
      "test.json: models[1].name: duplicate model name \"tick_mlp\"" },
    { "bad model name characters", "{" SERVER_OK ", 'models': [{'name': 'tick mlp/1', 'weights': 'w', "
      "'layers': [" LAYER_OK "]}]}",
      "test.json: models[0].name: expected only the characters A-Z a-z 0-9 _ . -, got \"tick mlp/1\"" },
    { "empty model name", "{" SERVER_OK ", 'models': [{'name': '', 'weights': 'w', 'layers': [" LAYER_OK "]}]}",
      "test.json: models[0].name: expected a string of 1 to 63 bytes, got an empty string" },
    { "model name too long", "{" SERVER_OK ", 'models': [{'name': "
      "'a123456789b123456789c123456789d123456789e123456789f123456789g123', 'weights': 'w', "
      "'layers': [" LAYER_OK "]}]}",
      "test.json: models[0].name: expected a string of 1 to 63 bytes, got 64 bytes" },
    { "version with newline", WITH_MODEL (", 'version': 'v1\\n'"),
      "test.json: models[0].version: expected no control characters, got \"v1\\u000a\"" },
    { "empty weights", "{" SERVER_OK ", 'models': [{'name': 'm', 'weights': '', 'layers': [" LAYER_OK "]}]}",
      "test.json: models[0].weights: expected a string of 1 to 4095 bytes, got an empty string" },
    { "empty bias", WITH_LAYERS ("{'weight': '0.weight', 'bias': ''}"),
      "test.json: models[0].layers[0].bias: expected a string of 1 to 63 bytes, got an empty string" },
    { "error in a later model", "{" SERVER_OK ", 'models': [" MODEL_WITH ("") ", "
      "{'name': 'n', 'weights': 'w', 'layers': [" LAYER_OK ", " LAYER_OK ", {'weight': 7}]}]}",
      "test.json: models[1].layers[2].weight: expected a string, got a number" },
};

START_TEST (test_bad_input)
{
    const bad_case_t *c = &s_bad[_i];
    char err[1024];
    memset (err, 'x', sizeof err);
    config_t *cfg = s_parse (c->json, err, sizeof err);
    ck_assert_msg (cfg == NULL, "case \"%s\" loaded", c->what);
    ck_assert_msg (strcmp (err, c->message) == 0, "case \"%s\":\n  got      %s\n  expected %s",
                   c->what, err, c->message);
}
END_TEST

START_TEST (test_too_many_models_and_layers)
{
    char err[512];
    size_t size = 64 * 1024;
    char *json = malloc (size);
    size_t n = (size_t) snprintf (json, size, "{" SERVER_OK ", 'models': [");
    for (int i = 0; i < CONFIG_MAX_MODELS + 1; i++)
        n += (size_t) snprintf (json + n, size - n, "%s{'name': 'm%d', 'weights': 'w', 'layers': [" LAYER_OK "]}",
                                i ? "," : "", i);
    snprintf (json + n, size - n, "]}");
    config_t *cfg = s_parse (json, err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "test.json: models: expected an array of 1 to 64 models, got 65 models");

    n = (size_t) snprintf (json, size, "{" SERVER_OK ", 'models': [{'name': 'm', 'weights': 'w', 'layers': [");
    for (int i = 0; i < CONFIG_MAX_LAYERS + 1; i++)
        n += (size_t) snprintf (json + n, size - n, "%s{'weight': '%d.weight'}", i ? "," : "", i);
    snprintf (json + n, size - n, "]}]}");
    cfg = s_parse (json, err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "test.json: models[0].layers: expected an array of 1 to 64 layers, got 65 layers");

    /* Exactly the maximum loads. */
    n = (size_t) snprintf (json, size, "{" SERVER_OK ", 'models': [{'name': 'm', 'weights': 'w', 'layers': [");
    for (int i = 0; i < CONFIG_MAX_LAYERS; i++)
        n += (size_t) snprintf (json + n, size - n, "%s{'weight': '%d.weight'}", i ? "," : "", i);
    snprintf (json + n, size - n, "]}]}");
    cfg = s_parse (json, err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    ck_assert_uint_eq (cfg->models[0].layer_count, CONFIG_MAX_LAYERS);
    ck_assert_str_eq (cfg->models[0].layers[63].bias, "63.bias");
    config_destroy (&cfg);
    free (json);
}
END_TEST

START_TEST (test_invalid_json_line)
{
    char err[512];
    /* A trailing comma on line 3. */
    config_t *cfg = s_parse ("{\n  'server': {" ENDPOINT "},\n  'models': [],\n}\n", err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_msg (strstr (err, "test.json: invalid JSON near line 4") == err, "%s", err);

    cfg = s_parse ("{\n  'server': {\n    'endpoints': ['tcp://127.0.0.1:5555'\n  }\n}", err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "test.json: invalid JSON near line 4, column 3");

    cfg = s_parse ("{'server': {}} trailing", err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "test.json: invalid JSON near line 1, column 16");

    cfg = s_parse ("", err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "test.json: invalid JSON near line 1, column 1");

    /* Through a file: the file's name leads the message. */
    char *dir = tu_tmpdir ();
    char *path = tu_write_file (dir, "broken.json", "{\n\"server\": {\n\"endpoints\": [\"tcp://a:1\",]\n}}\n", -1);
    cfg = config_load (path, err, sizeof err);
    ck_assert_ptr_null (cfg);
    char expect[4200];
    snprintf (expect, sizeof expect, "%s: invalid JSON near line 3", path);
    ck_assert_msg (strstr (err, expect) == err, "%s", err);
    unlink (path);
    free (path);

    /* A NUL byte would otherwise end the text early and hide what follows. */
    path = tu_write_file (dir, "nul.json", "{}\n\0{", 5);
    cfg = config_load (path, err, sizeof err);
    ck_assert_ptr_null (cfg);
    snprintf (expect, sizeof expect, "%s: invalid JSON near line 2, column 1 (a NUL byte)", path);
    ck_assert_str_eq (err, expect);
    unlink (path);
    free (path);
    rmdir (dir);
    free (dir);
}
END_TEST

START_TEST (test_unreadable_file)
{
    char err[512];
    config_t *cfg = config_load ("no/such/dir/sigserve.json", err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "no/such/dir/sigserve.json: cannot read: No such file or directory");

    char *dir = tu_tmpdir ();
    cfg = config_load (dir, err, sizeof err);
    ck_assert_ptr_null (cfg);
    char expect[4200];
    snprintf (expect, sizeof expect, "%s: cannot read: Is a directory", dir);
    ck_assert_str_eq (err, expect);

    if (geteuid () != 0) {      /* root reads anything */
        char *path = tu_write_file (dir, "secret.json", "{}", -1);
        chmod (path, 0);
        cfg = config_load (path, err, sizeof err);
        ck_assert_ptr_null (cfg);
        snprintf (expect, sizeof expect, "%s: cannot read: Permission denied", path);
        ck_assert_str_eq (err, expect);
        unlink (path);
        free (path);
    }

    /* A FIFO (or any non-regular file) is refused at once: opening it must not wait for a writer. */
    char fifo[2048];
    snprintf (fifo, sizeof fifo, "%s/config.fifo", dir);
    ck_assert_int_eq (mkfifo (fifo, 0600), 0);
    cfg = config_load (fifo, err, sizeof err);
    ck_assert_ptr_null (cfg);
    snprintf (expect, sizeof expect, "%s: cannot read: not a regular file (a FIFO, socket or device)", fifo);
    ck_assert_str_eq (err, expect);
    unlink (fifo);

    cfg = config_load (NULL, err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "(null): cannot read: no config path given");
    rmdir (dir);
    free (dir);
}
END_TEST

START_TEST (test_file_size_cap)
{
    char *dir = tu_tmpdir ();
    char err[512];
    /* A valid config padded with spaces to exactly the cap loads; one byte more does not. */
    char *body = s_json ("{" SERVER_OK ", " MODELS_OK "}");
    size_t len = strlen (body);
    char *text = malloc (CONFIG_FILE_MAX_BYTES + 1);
    memset (text, ' ', CONFIG_FILE_MAX_BYTES + 1);
    memcpy (text, body, len);
    char *path = tu_write_file (dir, "big.json", text, CONFIG_FILE_MAX_BYTES);
    config_t *cfg = config_load (path, err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    config_destroy (&cfg);
    unlink (path);
    free (path);

    path = tu_write_file (dir, "bigger.json", text, CONFIG_FILE_MAX_BYTES + 1);
    cfg = config_load (path, err, sizeof err);
    ck_assert_ptr_null (cfg);
    char expect[4200];
    snprintf (expect, sizeof expect, "%s: cannot read: larger than 1048576 bytes (1 MiB), the most a config may be",
              path);
    ck_assert_str_eq (err, expect);
    unlink (path);
    free (path);

    /* A UTF-8 byte-order mark is skipped. */
    char *bom = malloc (len + 4);
    memcpy (bom, "\xEF\xBB\xBF", 3);
    memcpy (bom + 3, body, len + 1);
    path = tu_write_file (dir, "bom.json", bom, -1);
    cfg = config_load (path, err, sizeof err);
    ck_assert_msg (cfg != NULL, "%s", err);
    config_destroy (&cfg);
    unlink (path);
    free (path);
    free (bom);
    free (text);
    free (body);
    rmdir (dir);
    free (dir);
}
END_TEST

START_TEST (test_small_or_no_error_buffer)
{
    char err[16];
    config_t *cfg = s_parse (WITH_SERVER (", 'io_threads': 0"), err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "test.json: serv");     /* cut, still terminated */
    cfg = s_parse (WITH_SERVER (", 'io_threads': 0"), NULL, 0);
    ck_assert_ptr_null (cfg);
    cfg = config_load ("no/such/file.json", NULL, 0);
    ck_assert_ptr_null (cfg);
    cfg = config_parse (NULL, "x.json", NULL, err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_str_eq (err, "x.json: no JSON");
}
END_TEST

START_TEST (test_long_values_are_cut_in_messages)
{
    char json[2048];
    char value[1001];
    memset (value, 'z', 1000);
    value[1000] = '\0';
    snprintf (json, sizeof json, WITH_MODEL (", 'backend': '%s'"), value);
    char err[1024];
    config_t *cfg = s_parse (json, err, sizeof err);
    ck_assert_ptr_null (cfg);
    ck_assert_msg (strstr (err, "test.json: models[0].backend: expected one of auto, cpu, cuda, got \"zzz") == err,
                   "%s", err);
    ck_assert_msg (strstr (err, "...\"") != NULL && strlen (err) < 300, "%s", err);
}
END_TEST

static Suite *s_suite (void)
{
    Suite *s = suite_create ("config_errors");
    TCase *tc = tcase_create ("config");
    tcase_add_loop_test (tc, test_bad_input, 0, (int) (sizeof s_bad / sizeof s_bad[0]));
    tcase_add_test (tc, test_too_many_models_and_layers);
    tcase_add_test (tc, test_invalid_json_line);
    tcase_add_test (tc, test_unreadable_file);
    tcase_add_test (tc, test_file_size_cap);
    tcase_add_test (tc, test_small_or_no_error_buffer);
    tcase_add_test (tc, test_long_values_are_cut_in_messages);
    suite_add_tcase (s, tc);
    return s;
}

int main (void)
{
    return tu_run_suite (s_suite ());
}
