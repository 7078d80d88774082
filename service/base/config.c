/* The JSON configuration, read with cJSON and checked against three tables (server, model,
 * layer keys). A row names a key, its type, bounds, default and target field, so adding a key
 * is adding a row; the walker below knows nothing about any particular key except through
 * the rows' optional check and derive hooks. Every failure is one message of the form
 * "<file>: <json path>: <problem>" that says what was expected and what was found. */
#include "base/config.h"
#include "base/config_walk.h"

#include <assert.h>
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value names, indexed by the enums of config.h; NULL-terminated for the enum rows. */
static const char *const s_backend_names[] = { "auto", "cpu", "cuda", NULL };
static const char *const s_cuda_wait_names[] = { "spin", "yield", "block", NULL };
static const char *const s_cpu_kernel_names[] = { "loop", "blas", NULL };
static const char *const s_log_level_names[] = { "error", "warn", "info", "debug", NULL };
static const char *const s_log_format_names[] = { "text", "json", NULL };
static const char *const s_transport_names[] = { "zmtp", "libzmq", NULL };
static const char *const s_weight_dtype_names[] = { "f32", "f16", "bf16", "int8", NULL };

/* KEY_ENUM rows store the index through an int. */
_Static_assert (sizeof (activation_t) == sizeof (int), "activation_t is int-sized");
_Static_assert (sizeof (backend_kind_t) == sizeof (int), "backend_kind_t is int-sized");
_Static_assert (sizeof (cuda_kernel_t) == sizeof (int), "cuda_kernel_t is int-sized");
_Static_assert (sizeof (cpu_kernel_t) == sizeof (int), "cpu_kernel_t is int-sized");
_Static_assert (sizeof (cuda_wait_t) == sizeof (int), "cuda_wait_t is int-sized");
_Static_assert (sizeof (log_format_t) == sizeof (int), "log_format_t is int-sized");
_Static_assert (sizeof (transport_t) == sizeof (int), "transport_t is int-sized");
_Static_assert (sizeof (model_type_t) == sizeof (int), "model_type_t is int-sized");
_Static_assert (sizeof (weight_dtype_t) == sizeof (int), "weight_dtype_t is int-sized");
_Static_assert (sizeof (cpu_split_mode_t) == sizeof (int), "cpu_split_mode_t is int-sized");
_Static_assert (sizeof (fallback_mode_t) == sizeof (int), "fallback_mode_t is int-sized");

static int s_check_model_name (parser_t *p, const char *value);
static int s_check_printable (parser_t *p, const char *value);
static int s_check_endpoint (parser_t *p, const char *value);
static int s_check_host_port (parser_t *p, const char *value);
static int s_check_file_mode (parser_t *p, const char *value);
static int s_read_fallback (parser_t *p, const cJSON *v, char *dst);

static const key_spec_t s_model_keys[] = {
    { .name = "name", .type = KEY_STRING, .required = true, FIELD (model_config_t, name),
      .len_min = 1, .len_max = CONFIG_NAME_MAX - 1, .unique = true, .check = s_check_model_name },
    { .name = "version", .type = KEY_STRING, FIELD (model_config_t, version),
      .len_min = 1, .len_max = CONFIG_NAME_MAX - 1, .def_str = "1", .check = s_check_printable },
    /* the keys of its type follow these (base/model_type.c) */
    { .name = "type", .type = KEY_ENUM, FIELD (model_config_t, type),
      .choices = model_type_names, .def = MODEL_TYPE_MLP },
    { .name = "backend", .type = KEY_ENUM, FIELD (model_config_t, backend),
      .choices = s_backend_names, .def = BACKEND_AUTO },
    /* -1: not given (resolved to warp; "auto" then measures every kernel) */
    { .name = "kernel", .type = KEY_ENUM, FIELD (model_config_t, kernel),
      .choices = cuda_kernel_names, .def = -1 },
    { .name = "cpu_kernel", .type = KEY_ENUM, FIELD (model_config_t, cpu_kernel),
      .choices = s_cpu_kernel_names, .def = CPU_KERNEL_LOOP },
    { .name = "graph", .type = KEY_BOOL, FIELD (model_config_t, graph), .def = true },
    { .name = "zero_copy", .type = KEY_BOOL, FIELD (model_config_t, zero_copy), .def = false },
    { .name = "wait", .type = KEY_ENUM, FIELD (model_config_t, wait),
      .choices = s_cuda_wait_names, .def = CUDA_WAIT_SPIN },
    /* -1: not given (resolved to 0, or to devices[0]) */
    { .name = "device", .type = KEY_INT, FIELD (model_config_t, device), .min = 0, .max = 63, .def = -1 },
    { .name = "devices", .type = KEY_INT_ARRAY, FIELD (model_config_t, devices),
      .count_offset = offsetof (model_config_t, device_count), .min = 1, .max = CONFIG_MAX_DEVICES,
      .elem_min = 0, .elem_max = 63, .what = "device", .unique = true },
    { .name = "group", .type = KEY_STRING, FIELD (model_config_t, group),
      .len_min = 0, .len_max = CONFIG_NAME_MAX - 1, .def_str = "", .check = s_check_printable },
    { .name = "max_rows", .type = KEY_U32, FIELD (model_config_t, max_rows),
      .min = 1, .max = 4096, .def = 16 },
    { .name = "instances", .type = KEY_U32, FIELD (model_config_t, instances),
      .min = 1, .max = CONFIG_MAX_INSTANCES, .def = 1 },
    { .name = "cpus", .type = KEY_INT_ARRAY, FIELD (model_config_t, cpus),
      .count_offset = offsetof (model_config_t, cpu_count), .min = 1, .max = CONFIG_MAX_CPUS,
      .elem_min = 0, .elem_max = 65535, .what = "cpu" },
    /* 0: not given (resolved to max_rows) */
    { .name = "max_batch_rows", .type = KEY_U32, FIELD (model_config_t, max_batch_rows),
      .min = 1, .max = 4096, .def = 0 },
    { .name = "batch_delay_us", .type = KEY_U32, FIELD (model_config_t, batch_delay_us),
      .min = 0, .max = 1000000, .def = 0 },
    /* 0: not given (resolved to min (max_rows, 16)) */
    { .name = "buffer_rows", .type = KEY_U32, FIELD (model_config_t, buffer_rows), .min = 1, .max = 4096, .def = 0 },
    /* 0: not given (resolved to 2 x instances where max_rows is over buffer_rows) */
    { .name = "large_buffers", .type = KEY_U32, FIELD (model_config_t, large_buffers), .min = 1, .max = 1024,
      .def = 0 },
    { .name = "graph_rows", .type = KEY_INT_ARRAY, FIELD (model_config_t, graph_rows),
      .count_offset = offsetof (model_config_t, graph_rows_count), .min = 1, .max = CONFIG_MAX_GRAPH_ROWS,
      .elem_min = 1, .elem_max = 4096, .what = "batch size", .unique = true },
    /* 0: not given (server.queue_depth where that is given, else derived at load from max_queue_us) */
    { .name = "queue_depth", .type = KEY_U32, FIELD (model_config_t, queue_depth),
      .min = 1, .max = 65536, .def = 0 },
    { .name = "max_queue_us", .type = KEY_U32, FIELD (model_config_t, max_queue_us),
      .min = 1, .max = 60000000, .def = CONFIG_MAX_QUEUE_US_DEFAULT },
    { .name = "keep_warm_us", .type = KEY_U32, FIELD (model_config_t, keep_warm_us),
      .min = 0, .max = 60000000, .def = 0 },
    { .name = "watchdog_ms", .type = KEY_U32, FIELD (model_config_t, watchdog_ms),
      .min = 1, .max = 600000, .def = 1000 },
    { .name = "weight_dtype", .type = KEY_ENUM, FIELD (model_config_t, weight_dtype),
      .choices = s_weight_dtype_names, .def = WEIGHT_DTYPE_F32 },
    { .name = "specialise", .type = KEY_BOOL, FIELD (model_config_t, specialise), .def = true },
    { .name = "weights", .type = KEY_PATH, .required = true, FIELD (model_config_t, weights),
      .len_min = 1, .len_max = CONFIG_PATH_MAX - 1 },
    /* with "backend": "cuda" and a persistent kernel only: checked once the model is read (s_resolve_model) */
    { .name = "green_context", .type = KEY_BOOL, FIELD (model_config_t, green_context), .def = false },
    /* "off", "auto" (absent) or {"backend": "cpu", "instances": N}: s_read_fallback */
    { .name = "fallback", .type = KEY_CUSTOM, FIELD (model_config_t, fallback), .read = s_read_fallback },
};
static const table_t s_model_table = {
    .what = "model", .keys = s_model_keys, .count = sizeof s_model_keys / sizeof s_model_keys[0],
    .extra = model_type_config_keys, .elsewhere = model_type_config_elsewhere,
};
_Static_assert (sizeof s_model_keys / sizeof s_model_keys[0] <= KEYS_MAX, "raise KEYS_MAX");

/* "fallback" as an object: a CPU fallback of `instances` instances. */
static const char *const s_fallback_backend_names[] = { "cpu", NULL };
static const key_spec_t s_fallback_keys[] = {
    { .name = "backend", .type = KEY_ENUM, FIELD (fallback_config_t, mode), .required = true,
      .choices = s_fallback_backend_names },
    { .name = "instances", .type = KEY_U32, FIELD (fallback_config_t, instances), .min = 1,
      .max = CONFIG_MAX_INSTANCES, .def = 1 },
};
static const table_t s_fallback_table = TABLE ("fallback", s_fallback_keys);

static const key_spec_t s_curve_keys[] = {
    { .name = "secret_key_file", .type = KEY_PATH, .required = true, FIELD (curve_config_t, secret_key_file),
      .len_min = 1, .len_max = CONFIG_PATH_MAX - 1 },
    { .name = "allowed_clients", .type = KEY_PATH, .required = true, FIELD (curve_config_t, allowed_clients),
      .len_min = 1, .len_max = CONFIG_PATH_MAX - 1 },
};
static const table_t s_curve_table = TABLE ("curve", s_curve_keys);

static const key_spec_t s_server_keys[] = {
    { .name = "endpoints", .type = KEY_STRING_ARRAY, .required = true,
      .offset = offsetof (server_config_t, endpoints), .size = CONFIG_ENDPOINT_MAX,
      .count_offset = offsetof (server_config_t, endpoint_count), .min = 1, .max = CONFIG_MAX_ENDPOINTS,
      .len_min = 1, .len_max = CONFIG_ENDPOINT_MAX - 1,
      .what = "endpoint", .unique = true, .check = s_check_endpoint },
    { .name = "transport", .type = KEY_ENUM, FIELD (server_config_t, transport),
      .choices = s_transport_names, .def = TRANSPORT_DEFAULT },
    { .name = "max_message_bytes", .type = KEY_U32, FIELD (server_config_t, max_message_bytes),
      .min = 64, .max = CONFIG_MAX_MESSAGE_BYTES, .def = 65536 },
    { .name = "busy_poll", .type = KEY_BOOL, FIELD (server_config_t, busy_poll), .def = false },
    { .name = "spin_us", .type = KEY_U32, FIELD (server_config_t, spin_us), .min = 0, .max = 100000,
      .def = CONFIG_SPIN_US_DEFAULT },
    { .name = "inline_us", .type = KEY_U32, FIELD (server_config_t, inline_us), .min = 0, .max = 10000,
      .def = CONFIG_INLINE_US_DEFAULT },
    { .name = "gpu_processes", .type = KEY_BOOL, FIELD (server_config_t, gpu_processes), .def = true },
    { .name = "standby", .type = KEY_BOOL, FIELD (server_config_t, standby), .def = true },
    { .name = "log_level", .type = KEY_ENUM_NAME, FIELD (server_config_t, log_level),
      .choices = s_log_level_names, .def = 2 /* info */ },
    { .name = "log_format", .type = KEY_ENUM, FIELD (server_config_t, log_format),
      .choices = s_log_format_names, .def = LOG_FORMAT_TEXT },
    { .name = "io_threads", .type = KEY_U32, FIELD (server_config_t, io_threads), .min = 1, .max = 16, .def = 1 },
    { .name = "fronts", .type = KEY_U32, FIELD (server_config_t, fronts), .min = 1, .max = CONFIG_MAX_FRONTS,
      .def = 1 },
    /* 0: not given (resolved to 64) */
    { .name = "queue_depth", .type = KEY_U32, FIELD (server_config_t, queue_depth),
      .min = 1, .max = 65536, .def = 0 },
    { .name = "cpus", .type = KEY_INT_ARRAY, FIELD (server_config_t, cpus),
      .count_offset = offsetof (server_config_t, cpu_count), .min = 1, .max = CONFIG_MAX_CPUS,
      .elem_min = 0, .elem_max = 65535, .what = "cpu" },
    { .name = "drain_ms", .type = KEY_U32, FIELD (server_config_t, drain_ms), .min = 0, .max = 600000, .def = 500 },
    { .name = "http", .type = KEY_STRING, FIELD (server_config_t, http),
      .len_min = 0, .len_max = CONFIG_ENDPOINT_MAX - 1, .def_str = "", .check = s_check_host_port },
    { .name = "stats_interval_s", .type = KEY_U32, FIELD (server_config_t, stats_interval_s),
      .min = 0, .max = 86400, .def = 60 },
    { .name = "curve", .type = KEY_OBJECT, .offset = offsetof (server_config_t, curve), .sub = &s_curve_table },
    { .name = "heartbeat_ms", .type = KEY_U32, FIELD (server_config_t, heartbeat_ms),
      .min = 0, .max = 3600000, .def = 10000 },
    { .name = "max_connections", .type = KEY_U32, FIELD (server_config_t, max_connections),
      .min = 0, .max = 1000000, .def = 1024 },
    { .name = "max_inflight_per_client", .type = KEY_U32, FIELD (server_config_t, max_inflight_per_client),
      .min = 0, .max = 1000000, .def = 0 },
    { .name = "ipc_mode", .type = KEY_STRING, FIELD (server_config_t, ipc_mode), .len_min = 1, .len_max = 4,
      .def_str = "0600", .check = s_check_file_mode },
    { .name = "kernel_cache_dir", .type = KEY_STRING, FIELD (server_config_t, kernel_cache_dir),
      .len_min = 0, .len_max = CONFIG_PATH_MAX - 1, .def_str = "" },
};
static const table_t s_server_table = TABLE ("server", s_server_keys);
_Static_assert (sizeof s_server_keys / sizeof s_server_keys[0] <= KEYS_MAX, "raise KEYS_MAX");

static const key_spec_t s_root_keys[] = {
    { .name = "server", .type = KEY_OBJECT, .required = true, .offset = offsetof (config_t, server),
      .sub = &s_server_table },
    { .name = "models", .type = KEY_OBJECT_ARRAY, .required = true, .offset = offsetof (config_t, models),
      .size = sizeof (model_config_t), .count_offset = offsetof (config_t, model_count),
      .min = 1, .max = CONFIG_MAX_MODELS, .what = "model", .sub = &s_model_table },
};
static const table_t s_root_table = TABLE ("configuration", s_root_keys);

/* ---------------------------------------------------------------- checks and derived values */

static int s_read_fallback (parser_t *p, const cJSON *v, char *dst)
{
    fallback_config_t *f = (fallback_config_t *) dst;
    if (cJSON_IsString (v) && (strcmp (v->valuestring, "off") == 0 || strcmp (v->valuestring, "auto") == 0)) {
        *f = (fallback_config_t) { .mode = v->valuestring[0] == 'o' ? FALLBACK_OFF : FALLBACK_AUTO };
        return 0;
    }
    if (cJSON_IsObject (v)) {
        if (config_walk_object (p, v, &s_fallback_table, dst) != 0)
            return -1;
        f->mode = FALLBACK_CPU;     /* the table's "backend" stored the index of "cpu", its one choice */
        return 0;
    }
    char q[160];
    return config_fail (p, "expected \"off\", \"auto\" or an object {\"backend\": \"cpu\", \"instances\": N}, got %s",
                        cJSON_IsString (v) ? config_quote (v->valuestring, q, sizeof q) : config_kind (v));
}

static int s_check_model_name (parser_t *p, const char *value)
{
    for (const char *c = value; *c; c++) {
        bool ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')
                  || *c == '_' || *c == '.' || *c == '-';
        if (!ok) {
            char q[160];
            return config_fail (p, "expected only the characters A-Z a-z 0-9 _ . -, got %s",
                           config_quote (value, q, sizeof q));
        }
    }
    return 0;
}

/* Versions appear in replies and log lines, where a control character would garble them. */
static int s_check_printable (parser_t *p, const char *value)
{
    for (const char *c = value; *c; c++)
        if ((unsigned char) *c < 0x20 || *c == 0x7f) {
            char q[160];
            return config_fail (p, "expected no control characters, got %s", config_quote (value, q, sizeof q));
        }
    return 0;
}

/* A TCP port: 1 to 65535, or "*" (any free port) when ANY_OK. */
static bool s_port_ok (const char *port, bool any_ok)
{
    if (any_ok && strcmp (port, "*") == 0)
        return true;
    if (!*port || strlen (port) > 5)
        return false;
    for (const char *c = port; *c; c++)
        if (*c < '0' || *c > '9')
            return false;
    long v = strtol (port, NULL, 10);
    return v >= 1 && v <= 65535;
}

/* tcp://HOST:PORT, ipc://PATH or inproc://NAME. The shape and the port's range are checked here;
 * zmq_bind has the last word on interfaces. */
static int s_check_endpoint (parser_t *p, const char *value)
{
    static const char *const schemes[] = { "tcp://", "ipc://", "inproc://" };
    char q[320];
    const char *scheme = NULL;
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (strncmp (value, schemes[i], strlen (schemes[i])) == 0)
            scheme = schemes[i];
    if (!scheme)
        return config_fail (p, "expected an endpoint starting with tcp://, ipc:// or inproc://, got %s",
                       config_quote (value, q, sizeof q));
    const char *address = value + strlen (scheme);
    if (*address == '\0')
        return config_fail (p, "expected an address after %s, got %s", scheme, config_quote (value, q, sizeof q));
    if (strcmp (scheme, "tcp://") == 0) {
        const char *colon = strrchr (address, ':');
        const char *bracket = strrchr (address, ']');
        if (!colon || colon == address || colon[1] == '\0' || (bracket && bracket > colon))
            return config_fail (p, "expected tcp://HOST:PORT, got %s", config_quote (value, q, sizeof q));
        if (!s_port_ok (colon + 1, true))
            return config_fail (p, "expected a port from 1 to 65535 (or *) in tcp://HOST:PORT, got %s",
                           config_quote (value, q, sizeof q));
    }
    return 0;
}

/* HOST:PORT (the HTTP endpoint): a host and a port from 1 to 65535; "" turns it off. */
static int s_check_host_port (parser_t *p, const char *value)
{
    char q[320];
    if (!*value)
        return 0;
    const char *colon = strrchr (value, ':');
    if (!colon || colon == value || !s_port_ok (colon + 1, false))
        return config_fail (p, "expected HOST:PORT with a port from 1 to 65535, got %s", config_quote (value, q, sizeof q));
    return 0;
}

/* A file mode in octal, "0600" or "660": digits 0-7, at most 0777. */
static int s_check_file_mode (parser_t *p, const char *value)
{
    char q[64];
    for (const char *c = value; *c; c++)
        if (*c < '0' || *c > '7')
            return config_fail (p, "expected an octal file mode such as \"0600\", got %s", config_quote (value, q, sizeof q));
    if (strtol (value, NULL, 8) > 0777)
        return config_fail (p, "expected an octal file mode of at most 0777, got %s", config_quote (value, q, sizeof q));
    return 0;
}

void config_text_position (const char *text, const char *pos, size_t *line, size_t *column)
{
    *line = 1;
    const char *line_start = text;
    for (const char *c = text; c < pos && *c; c++)
        if (*c == '\n') {
            (*line)++;
            line_start = c + 1;
        }
    *column = (size_t) (pos - line_start) + 1;
}

/* ---------------------------------------------------------------- defaults that depend on other keys */

static int s_fail_at (parser_t *p, const char *path, const char *fmt, const char *arg)
{
    snprintf (p->path, sizeof p->path, "%s", path);
    return config_fail (p, fmt, arg);
}

void config_graph_rows_default (model_config_t *m)
{
    if (m->graph_rows_count)
        return;
    const uint32_t launch = m->max_batch_rows > m->max_rows ? m->max_batch_rows : m->max_rows;
    for (uint32_t r = 1; r < launch && m->graph_rows_count < CONFIG_MAX_GRAPH_ROWS - 1; r *= 2)
        m->graph_rows[m->graph_rows_count++] = (int) r;
    m->graph_rows[m->graph_rows_count++] = (int) (launch ? launch : 1);
}

/* Request buffers and CUDA graph batch sizes, once max_rows and max_batch_rows are known. */
static int s_resolve_buffers (parser_t *p, model_config_t *m, size_t index)
{
    char at[64];
    if (m->buffer_rows == 0)
        m->buffer_rows = m->max_rows < 16 ? m->max_rows : 16;
    if (m->buffer_rows > m->max_rows)
        return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].buffer_rows", index), at),
                          "%s", "at most max_rows (a buffer larger than any request holds nothing more)");
    if (m->max_rows <= m->buffer_rows)
        m->large_buffers = 0;
    else if (m->large_buffers == 0)
        m->large_buffers = 2 * m->instances;
    const uint32_t launch = m->max_batch_rows > m->max_rows ? m->max_batch_rows : m->max_rows;
    if (m->graph_rows_count == 0) {
        config_graph_rows_default (m);
        return 0;
    }
    for (size_t i = 1; i < m->graph_rows_count; i++)
        if (m->graph_rows[i] <= m->graph_rows[i - 1])
            return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].graph_rows", index), at),
                              "%s", "expected batch sizes in increasing order");
    if ((uint32_t) m->graph_rows[m->graph_rows_count - 1] < launch) {
        char why[160];
        snprintf (why, sizeof why, "the largest must be at least the largest launch, max (max_rows, max_batch_rows) = "
                  "%u", launch);
        return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].graph_rows", index), at), "%s", why);
    }
    if ((uint32_t) m->graph_rows[m->graph_rows_count - 1] > launch) {
        char why[160];
        snprintf (why, sizeof why, "at most the largest launch, max (max_rows, max_batch_rows) = %u", launch);
        return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].graph_rows", index), at), "%s", why);
    }
    return 0;
}

/* "split": the cores it splits over are cpus / instances an instance, each its own (never one another
 * instance or part has: the leader waits for its helpers spinning). */
static int s_resolve_split (parser_t *p, const model_config_t *m, size_t index)
{
    char at[64], why[256];
    if (m->split == CPU_SPLIT_OFF)
        return 0;
    snprintf (at, sizeof at, "models[%zu].split", index);
    if (m->backend == BACKEND_CUDA || m->cpu_kernel == CPU_KERNEL_BLAS) {
        snprintf (why, sizeof why, "only on the CPU with \"cpu_kernel\": \"loop\" (this model's %s is \"%s\"); "
                  "remove split or use \"backend\": \"cpu\" or \"auto\"", m->backend == BACKEND_CUDA ? "backend"
                  : "cpu_kernel", m->backend == BACKEND_CUDA ? "cuda" : "blas");
        return s_fail_at (p, at, "%s", why);
    }
    if (m->group[0]) {
        snprintf (why, sizeof why, "not with \"group\" (\"%s\"): a group's workers run its members unpinned, and one "
                  "on a helper's core would wait for a helper that cannot run; remove split or group", m->group);
        return s_fail_at (p, at, "%s", why);
    }
    if (m->cpu_count < 2 * (size_t) m->instances) {
        snprintf (why, sizeof why, "needs at least 2 cpus an instance, from \"cpus\" (instance i takes the i-th "
                  "share of cpus / instances); this model has %zu cpus for %u instance(s)", m->cpu_count, m->instances);
        return s_fail_at (p, at, "%s", why);
    }
    for (size_t i = 0; i < m->cpu_count; i++)
        for (size_t k = 0; k < i; k++)
            if (m->cpus[i] == m->cpus[k]) {
                snprintf (why, sizeof why, "cpu %d is listed twice in \"cpus\": a split gives each of its cores "
                          "to one part of one instance", m->cpus[i]);
                return s_fail_at (p, at, "%s", why);
            }
    return 0;
}

/* One model, once every key is read (its type's with them): the defaults that depend on other keys. */
static int s_resolve_model (parser_t *p, model_config_t *m, size_t index, const server_config_t *server)
{
    char at[64];
    if (m->device_count > 0 && m->device >= 0)
        return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].devices", index), at),
                          "give either \"device\" (one GPU) or \"devices\" (a list), not both%s", "");
    if (m->device_count == 0) {
        m->devices[0] = m->device < 0 ? 0 : m->device;
        m->device_count = 1;
    }
    m->device = m->devices[0];
    m->kernel_given = (int) m->kernel >= 0;
    if (!m->kernel_given)
        m->kernel = CUDA_KERNEL_WARP;
    if (m->max_batch_rows == 0)
        m->max_batch_rows = m->max_rows;
    if (s_resolve_buffers (p, m, index) != 0)
        return -1;
    if (m->queue_depth == 0)
        m->queue_depth = server->queue_depth;   /* 0 unless the deprecated server key is given */
    snprintf (m->kernel_cache_dir, sizeof m->kernel_cache_dir, "%s", server->kernel_cache_dir);
    m->split_spin_ns = server->busy_poll ? UINT64_MAX : (uint64_t) server->spin_us * 1000;
    if (s_resolve_split (p, m, index) != 0)
        return -1;
    if (m->green_context && m->backend != BACKEND_CUDA)
        return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].green_context", index), at),
                          "only with \"backend\": \"cuda\" (SMs of a GPU held for the model's persistent kernel); this "
                          "model's backend is \"%s\"", backend_kind_name (m->backend));
    if (m->green_context && !model_type_can (m->type, MODEL_CAP_CUDA_RESIDENT) && !cuda_kernel_info (m->kernel)->resident)
        return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].green_context", index), at),
                          "only with \"kernel\": \"persistent\" (a resident kernel holds SMs; a launched one gives "
                          "them back); this model's kernel is \"%s\"", cuda_kernel_name (m->kernel));
    return 0;
}

/* tcp://HOST:* or tcp://HOST:0: a port the system picks. */
static bool s_tcp_any_port (const char *endpoint)
{
    const char *colon = strrchr (endpoint, ':');
    return strncmp (endpoint, "tcp://", 6) == 0 && colon && (strcmp (colon + 1, "*") == 0 || strcmp (colon + 1, "0") == 0);
}

static int s_resolve (parser_t *p, config_t *cfg)
{
    server_config_t *server = &cfg->server;
    server->queue_depth_given = server->queue_depth != 0;
    server->ipc_file_mode = (unsigned) strtoul (server->ipc_mode, NULL, 8);
    /* Each fix a message below offers is one this function then accepts: another transport is offered
     * only where the endpoints suit it (tests/test_config_advice.c applies every one). */
    bool inproc = false, wildcard = false;
    for (size_t e = 0; e < server->endpoint_count; e++) {
        inproc |= strncmp (server->endpoints[e], "inproc://", 9) == 0;
        wildcard |= s_tcp_any_port (server->endpoints[e]);
    }
    if (server->fronts > server->endpoint_count && server->transport == TRANSPORT_LIBZMQ) {
        char why[256];
        snprintf (why, sizeof why, "%u fronts need at least %u endpoints on the libzmq transport (an endpoint's socket "
                  "belongs to one front); got %zu: add endpoints, lower fronts to %zu%s", server->fronts, server->fronts,
                  server->endpoint_count, server->endpoint_count,
                  inproc || wildcard ? "" : ", or use transport \"zmtp\"");
        return s_fail_at (p, "server.fronts", "%s", why);
    }
    server->share_tcp = config_fronts_share (server);
    for (size_t e = 0; e < server->endpoint_count && server->share_tcp; e++)
        if (s_tcp_any_port (server->endpoints[e])) {
            char at[48], why[CONFIG_ENDPOINT_MAX + 256];
            snprintf (at, sizeof at, "server.endpoints[%zu]", e);
            snprintf (why, sizeof why, "%s: more fronts than endpoints share each tcp:// endpoint, which needs a port "
                      "number (\"*\" would give each front a port of its own); give it one, or lower fronts to %zu",
                      server->endpoints[e], server->endpoint_count);
            return s_fail_at (p, at, "%s", why);
        }
    const bool libzmq_fits = server->fronts <= server->endpoint_count && !server->curve.secret_key_file[0];
    for (size_t e = 0; e < server->endpoint_count && server->transport == TRANSPORT_ZMTP; e++)
        if (strncmp (server->endpoints[e], "inproc://", 9) == 0) {
            char at[48], why[CONFIG_ENDPOINT_MAX + 256];
            snprintf (at, sizeof at, "server.endpoints[%zu]", e);
            snprintf (why, sizeof why, "%s: inproc:// is libzmq's in-process transport; the zmtp transport serves "
                      "tcp:// and ipc:// (use ipc://%s)", server->endpoints[e],
                      libzmq_fits ? ", or set server.transport to \"libzmq\"" : "");
            return s_fail_at (p, at, "%s", why);
        }
    for (size_t i = 0; i < cfg->model_count; i++)
        if (s_resolve_model (p, &cfg->models[i], i, server) != 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- public API */

/* The keys of table T in SECTION (ARRAY: SECTION is an array of such objects, so the sections
 * below it index an element: "models" -> "models[i].layers"); the model table's followed by every
 * model type's, each key once. */
static void s_each_key (const table_t *t, const char *section, bool array,
                        void (*fn) (const char *, const char *, void *), void *arg)
{
    for (size_t i = 0; i < t->count; i++) {
        const key_spec_t *k = &t->keys[i];
        bool again = false;     /* another type's key of that name, listed already */
        for (int ty = 0; ty < MODEL_TYPE_COUNT && t->required_for && !again; ty++) {
            const table_t *o = model_type_info ((model_type_t) ty)->keys;
            if (o == t)
                break;
            for (size_t j = 0; j < o->count; j++)
                again |= strcmp (o->keys[j].name, k->name) == 0;
        }
        if (again)
            continue;
        fn (section, k->name, arg);
        if (!k->sub)
            continue;
        char sub[128];
        snprintf (sub, sizeof sub, "%s%s%s%s", section, array ? "[i]" : "", section[0] ? "." : "", k->name);
        s_each_key (k->sub, sub, k->type == KEY_OBJECT_ARRAY, fn, arg);
    }
    for (int ty = 0; ty < MODEL_TYPE_COUNT && t->extra; ty++)
        s_each_key (model_type_info ((model_type_t) ty)->keys, section, array, fn, arg);
}

void config_each_key (void (*fn) (const char *section, const char *key, void *arg), void *arg)
{
    s_each_key (&s_root_table, "", false, fn, arg);
}

config_t *config_parse (const char *json, const char *name, const char *base_dir, char *err, size_t errlen)
{
    parser_t p = { .file = name ? name : "(config)", .base_dir = base_dir, .err = err, .errlen = errlen };
    if (err && errlen)
        err[0] = '\0';
    if (!json) {
        config_fail (&p, "no JSON text");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts (json, &end, 1);
    if (!root) {
        size_t line, column;
        config_text_position (json, end ? end : json, &line, &column);
        config_fail (&p, "invalid JSON near line %zu, column %zu", line, column);
        return NULL;
    }
    if (!cJSON_IsObject (root)) {
        config_fail (&p, "expected a JSON object at the top level, got %s", config_kind (root));
        cJSON_Delete (root);
        return NULL;
    }
    config_t *self = calloc (1, sizeof *self);
    if (!self) {
        config_fail (&p, "out of memory");
        cJSON_Delete (root);
        return NULL;
    }
    snprintf (self->path, sizeof self->path, "%s", p.file);
    int rc = config_walk_object (&p, root, &s_root_table, (char *) self);
    if (rc == 0)
        rc = s_resolve (&p, self);
    cJSON_Delete (root);
    if (rc != 0)
        config_destroy (&self);
    return self;
}

void config_destroy (config_t **self_p)
{
    if (self_p && *self_p) {
        free (*self_p);
        *self_p = NULL;
    }
}

#define S_NAME(names, value) \
    ((unsigned) (value) < sizeof (names) / sizeof (names)[0] - 1 ? (names)[value] : "unknown")

/* (every name but the NULL that ends the list) */
const char *activation_name (activation_t a)
{
    return (unsigned) a <= ACTIVATION_TANH ? config_activation_names[a] : "unknown";
}
const char *backend_kind_name (backend_kind_t b) { return S_NAME (s_backend_names, b); }
const char *cuda_kernel_name (cuda_kernel_t k) { return (unsigned) k < CUDA_KERNEL_COUNT ? cuda_kernel_names[k] : "unknown"; }
const char *cpu_kernel_name (cpu_kernel_t k) { return S_NAME (s_cpu_kernel_names, k); }
const char *cuda_wait_name (cuda_wait_t w) { return S_NAME (s_cuda_wait_names, w); }
const char *weight_dtype_name (weight_dtype_t d) { return S_NAME (s_weight_dtype_names, d); }
const char *fallback_mode_name (fallback_mode_t f)
{
    static const char *const names[] = { "auto", "off", "cpu" };
    return (unsigned) f <= FALLBACK_CPU ? names[f] : "unknown";
}
const char *cpu_split_mode_name (cpu_split_mode_t s) { return (unsigned) s <= CPU_SPLIT_ON ? config_split_names[s] : "unknown"; }

uint32_t config_serving_threads (const config_t *cfg)
{
    /* each front, and (libzmq) the I/O threads of its ZeroMQ context */
    const uint32_t fronts = cfg->server.fronts ? cfg->server.fronts : 1;
    uint32_t threads = fronts * (1 + (cfg->server.transport == TRANSPORT_LIBZMQ ? cfg->server.io_threads : 0));
    for (size_t i = 0; i < cfg->model_count; i++) {
        const model_config_t *mc = &cfg->models[i];
        threads += mc->instances * (config_split_cores (mc) - 1);     /* a split's helpers, one a core */
        if (!mc->group[0]) {
            threads += mc->instances;
            continue;
        }
        bool first = true;      /* a group counts once, at its first member */
        uint32_t most = 0;
        for (size_t k = 0; k < cfg->model_count; k++)
            if (strcmp (cfg->models[k].group, mc->group) == 0) {
                first &= k >= i;
                most = cfg->models[k].instances > most ? cfg->models[k].instances : most;
            }
        if (first)
            threads += most;
    }
    return threads;
}

