/* The JSON configuration, read with cJSON and checked against three tables (server, model,
 * layer keys). A row names a key, its type, bounds, default and target field, so adding a key
 * is adding a row; the walker below knows nothing about any particular key except through
 * the rows' optional check and derive hooks. Every failure is one message of the form
 * "<file>: <json path>: <problem>" that says what was expected and what was found. */
#include "base/config.h"

#include <assert.h>
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value names, indexed by the enums of config.h; NULL-terminated for the enum rows. */
static const char *const s_activation_names[] = { "none", "relu", "sigmoid", "tanh", NULL };
static const char *const s_backend_names[] = { "auto", "cpu", "cuda", NULL };
static const char *const s_cuda_kernel_names[] = { "warp", "cublas", "mbyv", "fused", "persistent", NULL };
_Static_assert (sizeof s_cuda_kernel_names / sizeof s_cuda_kernel_names[0] == CUDA_KERNEL_COUNT + 1, "kernel names");
static const char *const s_cuda_wait_names[] = { "spin", "yield", "block", NULL };
static const char *const s_cpu_kernel_names[] = { "loop", "blas", NULL };
static const char *const s_log_level_names[] = { "error", "warn", "info", "debug", NULL };
static const char *const s_log_format_names[] = { "text", "json", NULL };
static const char *const s_model_type_names[] = { "mlp", "lstm", NULL };
static const char *const s_weight_dtype_names[] = { "f32", "f16", "bf16", NULL };

/* KEY_ENUM rows store the index through an int. */
_Static_assert (sizeof (activation_t) == sizeof (int), "activation_t is int-sized");
_Static_assert (sizeof (backend_kind_t) == sizeof (int), "backend_kind_t is int-sized");
_Static_assert (sizeof (cuda_kernel_t) == sizeof (int), "cuda_kernel_t is int-sized");
_Static_assert (sizeof (cpu_kernel_t) == sizeof (int), "cpu_kernel_t is int-sized");
_Static_assert (sizeof (cuda_wait_t) == sizeof (int), "cuda_wait_t is int-sized");
_Static_assert (sizeof (log_format_t) == sizeof (int), "log_format_t is int-sized");
_Static_assert (sizeof (model_type_t) == sizeof (int), "model_type_t is int-sized");
_Static_assert (sizeof (weight_dtype_t) == sizeof (int), "weight_dtype_t is int-sized");

typedef enum {
    KEY_BOOL,           /* bool */
    KEY_INT,            /* int, min..max */
    KEY_U32,            /* uint32_t, min..max */
    KEY_ENUM,           /* int-sized enum: the index of the value in choices */
    KEY_ENUM_NAME,      /* char[size]: one of choices, stored as its name */
    KEY_STRING,         /* char[size]: min..max bytes */
    KEY_PATH,           /* char[size]: a relative path is joined to the config file's folder */
    KEY_STRING_ARRAY,   /* char[max][size] at offset, size_t count at count_offset */
    KEY_INT_ARRAY,      /* int[] at offset (size: the array's bytes), count at count_offset; each
                           element elem_min..elem_max, no two alike when unique */
    KEY_OBJECT,         /* an object read with table sub into the struct at offset */
    KEY_OBJECT_ARRAY,   /* objects read with sub, stride bytes apart, count at count_offset */
} key_type_t;

typedef struct s_parser parser_t;
typedef struct s_table table_t;

/* Extra validation of a string value; returns s_fail's -1 or 0. */
typedef int (*check_fn) (parser_t *p, const char *value);
/* Value of an absent optional string computed from keys read before it (rows are read in
 * table order); writes DST or fails. */
typedef int (*derive_fn) (parser_t *p, const void *object, char *dst, size_t size);

typedef struct {
    const char *name;
    key_type_t type;
    bool required;
    size_t offset;              /* target field in the struct the table fills */
    size_t size;                /* strings: buffer bytes (incl. NUL); arrays: element bytes */
    size_t count_offset;        /* arrays: the size_t element count */
    long long min, max;         /* integers: the value; arrays: the element count */
    long long elem_min, elem_max;   /* integer arrays: each element */
    size_t len_min, len_max;    /* strings (and string array elements): bytes, without NUL */
    long long def;              /* bool, integer and enum (an index) default */
    const char *def_str;        /* string default when derive is NULL */
    const char *const *choices; /* enum values */
    const char *what;           /* arrays: the element noun in messages ("endpoint") */
    bool unique;                /* strings: no two alike among array siblings */
    bool nullable;              /* strings: JSON null stores "" */
    check_fn check;
    derive_fn derive;
    const table_t *sub;         /* objects and object arrays */
} key_spec_t;

struct s_table {
    const char *what;           /* noun for messages about one such object ("model") */
    const key_spec_t *keys;
    size_t count;
};

#define KEYS_MAX 32
#define TABLE(noun, rows) { noun, rows, sizeof (rows) / sizeof (rows)[0] }
#define FIELD(type, member) .offset = offsetof (type, member), .size = sizeof (((type *) 0)->member)

struct s_parser {
    const char *file;           /* the name used in messages */
    const char *base_dir;       /* relative paths are joined to it; NULL or "": kept as is */
    char *err;
    size_t errlen;
    char path[512];             /* JSON path of the value being read, "models[0].name" */
};

static int s_check_model_name (parser_t *p, const char *value);
static int s_check_printable (parser_t *p, const char *value);
static int s_check_endpoint (parser_t *p, const char *value);
static int s_check_host_port (parser_t *p, const char *value);
static int s_check_file_mode (parser_t *p, const char *value);
static int s_derive_bias (parser_t *p, const void *object, char *dst, size_t size);

static const key_spec_t s_layer_keys[] = {
    { .name = "weight", .type = KEY_STRING, .required = true, FIELD (layer_config_t, weight),
      .len_min = 1, .len_max = CONFIG_NAME_MAX - 1 },
    { .name = "bias", .type = KEY_STRING, FIELD (layer_config_t, bias),
      .len_min = 1, .len_max = CONFIG_NAME_MAX - 1, .nullable = true, .derive = s_derive_bias },
    { .name = "activation", .type = KEY_ENUM, FIELD (layer_config_t, activation),
      .choices = s_activation_names, .def = ACTIVATION_NONE },
};
static const table_t s_layer_table = TABLE ("layer", s_layer_keys);
_Static_assert (sizeof s_layer_keys / sizeof s_layer_keys[0] <= KEYS_MAX, "raise KEYS_MAX");

static const key_spec_t s_model_keys[] = {
    { .name = "name", .type = KEY_STRING, .required = true, FIELD (model_config_t, name),
      .len_min = 1, .len_max = CONFIG_NAME_MAX - 1, .unique = true, .check = s_check_model_name },
    { .name = "version", .type = KEY_STRING, FIELD (model_config_t, version),
      .len_min = 1, .len_max = CONFIG_NAME_MAX - 1, .def_str = "1", .check = s_check_printable },
    { .name = "type", .type = KEY_ENUM, FIELD (model_config_t, type),
      .choices = s_model_type_names, .def = MODEL_TYPE_MLP },
    { .name = "backend", .type = KEY_ENUM, FIELD (model_config_t, backend),
      .choices = s_backend_names, .def = BACKEND_AUTO },
    /* -1: not given (resolved to warp; "auto" then measures every kernel) */
    { .name = "kernel", .type = KEY_ENUM, FIELD (model_config_t, kernel),
      .choices = s_cuda_kernel_names, .def = -1 },
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
    /* 0: not given (resolved to server.queue_depth) */
    { .name = "queue_depth", .type = KEY_U32, FIELD (model_config_t, queue_depth),
      .min = 1, .max = 65536, .def = 0 },
    { .name = "keep_warm_us", .type = KEY_U32, FIELD (model_config_t, keep_warm_us),
      .min = 0, .max = 60000000, .def = 0 },
    { .name = "watchdog_ms", .type = KEY_U32, FIELD (model_config_t, watchdog_ms),
      .min = 1, .max = 600000, .def = 1000 },
    { .name = "weight_dtype", .type = KEY_ENUM, FIELD (model_config_t, weight_dtype),
      .choices = s_weight_dtype_names, .def = WEIGHT_DTYPE_F32 },
    { .name = "weights", .type = KEY_PATH, .required = true, FIELD (model_config_t, weights),
      .len_min = 1, .len_max = CONFIG_PATH_MAX - 1 },
    /* required for "mlp", refused for "lstm": checked once the model is read (s_check_model) */
    { .name = "layers", .type = KEY_OBJECT_ARRAY, .offset = offsetof (model_config_t, layers),
      .size = sizeof (layer_config_t), .count_offset = offsetof (model_config_t, layer_count),
      .min = 1, .max = CONFIG_MAX_LAYERS, .what = "layer", .sub = &s_layer_table },
    { .name = "lstm", .type = KEY_STRING, FIELD (model_config_t, lstm_prefix),
      .len_min = 0, .len_max = CONFIG_NAME_MAX - 16, .def_str = "" },
    { .name = "window", .type = KEY_U32, FIELD (model_config_t, window), .min = 1, .max = 4096, .def = 0 },
    { .name = "head", .type = KEY_OBJECT, .offset = offsetof (model_config_t, head), .sub = &s_layer_table },
    { .name = "max_streams", .type = KEY_U32, FIELD (model_config_t, max_streams),
      .min = 1, .max = 1000000, .def = 1024 },
    { .name = "stream_idle_s", .type = KEY_U32, FIELD (model_config_t, stream_idle_s),
      .min = 1, .max = 86400, .def = 300 },
};
static const table_t s_model_table = TABLE ("model", s_model_keys);
_Static_assert (sizeof s_model_keys / sizeof s_model_keys[0] <= KEYS_MAX, "raise KEYS_MAX");

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
    { .name = "max_message_bytes", .type = KEY_U32, FIELD (server_config_t, max_message_bytes),
      .min = 64, .max = 64 * 1024 * 1024, .def = 65536 },
    { .name = "busy_poll", .type = KEY_BOOL, FIELD (server_config_t, busy_poll), .def = false },
    { .name = "spin_us", .type = KEY_U32, FIELD (server_config_t, spin_us), .min = 0, .max = 100000, .def = 0 },
    { .name = "log_level", .type = KEY_ENUM_NAME, FIELD (server_config_t, log_level),
      .choices = s_log_level_names, .def = 2 /* info */ },
    { .name = "log_format", .type = KEY_ENUM, FIELD (server_config_t, log_format),
      .choices = s_log_format_names, .def = LOG_FORMAT_TEXT },
    { .name = "io_threads", .type = KEY_U32, FIELD (server_config_t, io_threads), .min = 1, .max = 16, .def = 1 },
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

/* ---------------------------------------------------------------- messages */

__attribute__ ((format (printf, 2, 3)))
static int s_fail (parser_t *p, const char *fmt, ...)
{
    if (!p->err || p->errlen == 0)
        return -1;
    char problem[1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (problem, sizeof problem, fmt, ap);
    va_end (ap);
    if (p->path[0])
        snprintf (p->err, p->errlen, "%s: %s: %s", p->file, p->path, problem);
    else
        snprintf (p->err, p->errlen, "%s: %s", p->file, problem);
    return -1;
}

/* Appends ".KEY" (or "KEY" at the top) to the path; returns the length to pop back to. */
static size_t s_path_push_key (parser_t *p, const char *key)
{
    size_t mark = strlen (p->path);
    snprintf (p->path + mark, sizeof p->path - mark, "%s%s", mark ? "." : "", key);
    return mark;
}

static size_t s_path_push_index (parser_t *p, size_t index)
{
    size_t mark = strlen (p->path);
    snprintf (p->path + mark, sizeof p->path - mark, "[%zu]", index);
    return mark;
}

static void s_path_pop (parser_t *p, size_t mark) { p->path[mark] = '\0'; }

/* What a value is, for "got ..." when its type is wrong. */
static const char *s_kind (const cJSON *v)
{
    if (cJSON_IsString (v)) return "a string";
    if (cJSON_IsNumber (v)) return "a number";
    if (cJSON_IsBool (v)) return "a boolean";
    if (cJSON_IsNull (v)) return "null";
    if (cJSON_IsArray (v)) return "an array";
    if (cJSON_IsObject (v)) return "an object";
    return "an invalid value";
}

/* S in double quotes with JSON escapes, cut (with "...") so a message stays readable. */
static const char *s_quote (const char *s, char *buf, size_t size)
{
    size_t n = 0;
    buf[n++] = '"';
    for (; *s; s++) {
        if (n + 12 >= size) {           /* room for one escape, "...", the quote and NUL */
            memcpy (buf + n, "...", 3);
            n += 3;
            break;
        }
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char) c;
        }
        else if (c < 0x20 || c == 0x7f)
            n += (size_t) snprintf (buf + n, size - n, "\\u%04x", c);
        else
            buf[n++] = (char) c;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    return buf;
}

/* "none, relu, sigmoid, tanh" */
static const char *s_join (const char *const *names, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; names[i] && n < size; i++)
        n += (size_t) snprintf (buf + n, size - n, "%s%s", i ? ", " : "", names[i]);
    return buf;
}

static const char *s_table_keys (const table_t *t, char *buf, size_t size)
{
    const char *names[KEYS_MAX + 1];
    for (size_t i = 0; i < t->count; i++)
        names[i] = t->keys[i].name;
    names[t->count] = NULL;
    return s_join (names, buf, size);
}

/* ---------------------------------------------------------------- checks and derived values */

static int s_check_model_name (parser_t *p, const char *value)
{
    for (const char *c = value; *c; c++) {
        bool ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')
                  || *c == '_' || *c == '.' || *c == '-';
        if (!ok) {
            char q[160];
            return s_fail (p, "expected only the characters A-Z a-z 0-9 _ . -, got %s",
                           s_quote (value, q, sizeof q));
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
            return s_fail (p, "expected no control characters, got %s", s_quote (value, q, sizeof q));
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
        return s_fail (p, "expected an endpoint starting with tcp://, ipc:// or inproc://, got %s",
                       s_quote (value, q, sizeof q));
    const char *address = value + strlen (scheme);
    if (*address == '\0')
        return s_fail (p, "expected an address after %s, got %s", scheme, s_quote (value, q, sizeof q));
    if (strcmp (scheme, "tcp://") == 0) {
        const char *colon = strrchr (address, ':');
        const char *bracket = strrchr (address, ']');
        if (!colon || colon == address || colon[1] == '\0' || (bracket && bracket > colon))
            return s_fail (p, "expected tcp://HOST:PORT, got %s", s_quote (value, q, sizeof q));
        if (!s_port_ok (colon + 1, true))
            return s_fail (p, "expected a port from 1 to 65535 (or *) in tcp://HOST:PORT, got %s",
                           s_quote (value, q, sizeof q));
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
        return s_fail (p, "expected HOST:PORT with a port from 1 to 65535, got %s", s_quote (value, q, sizeof q));
    return 0;
}

/* A file mode in octal, "0600" or "660": digits 0-7, at most 0777. */
static int s_check_file_mode (parser_t *p, const char *value)
{
    char q[64];
    for (const char *c = value; *c; c++)
        if (*c < '0' || *c > '7')
            return s_fail (p, "expected an octal file mode such as \"0600\", got %s", s_quote (value, q, sizeof q));
    if (strtol (value, NULL, 8) > 0777)
        return s_fail (p, "expected an octal file mode of at most 0777, got %s", s_quote (value, q, sizeof q));
    return 0;
}

/* An absent "bias" is the weight's name with ".weight" replaced by ".bias", which is how
 * PyTorch names an nn.Linear's tensors. */
static int s_derive_bias (parser_t *p, const void *object, char *dst, size_t size)
{
    const layer_config_t *layer = object;
    const char *suffix = ".weight";
    size_t n = strlen (layer->weight), sn = strlen (suffix);
    if (n < sn || strcmp (layer->weight + n - sn, suffix) != 0) {
        char q[160];
        return s_fail (p, "required key missing: the weight %s does not end in \".weight\", so the "
                          "bias name cannot be derived; give \"bias\" (a tensor name, or null for none)",
                       s_quote (layer->weight, q, sizeof q));
    }
    snprintf (dst, size, "%.*s.bias", (int) (n - sn), layer->weight);
    return 0;
}

/* ---------------------------------------------------------------- the walker */

/* Where a value sits among the elements of an object array, for "unique" rows. */
typedef struct {
    const char *first;          /* element 0 */
    size_t index, stride;
    const char *what;           /* "model" */
} siblings_t;

static int s_parse_object (parser_t *p, const cJSON *obj, const table_t *t, char *target,
                           const siblings_t *sib);

static int s_read_integer (parser_t *p, const key_spec_t *k, const cJSON *v, long long *out)
{
    if (!cJSON_IsNumber (v))
        return s_fail (p, "expected an integer from %lld to %lld, got %s", k->min, k->max, s_kind (v));
    double d = v->valuedouble;
    if (!isfinite (d) || d != floor (d) || d < (double) k->min || d > (double) k->max)
        return s_fail (p, "expected an integer from %lld to %lld, got %.15g", k->min, k->max, d);
    *out = (long long) d;
    return 0;
}

static int s_read_enum (parser_t *p, const key_spec_t *k, const cJSON *v, long long *out)
{
    char list[256], q[160];
    if (!cJSON_IsString (v))
        return s_fail (p, "expected one of %s, got %s", s_join (k->choices, list, sizeof list), s_kind (v));
    for (long long i = 0; k->choices[i]; i++)
        if (strcmp (v->valuestring, k->choices[i]) == 0) {
            *out = i;
            return 0;
        }
    return s_fail (p, "expected one of %s, got %s", s_join (k->choices, list, sizeof list),
                   s_quote (v->valuestring, q, sizeof q));
}

/* Type, length and the row's check; copies into DST (k->size bytes). */
static int s_read_string (parser_t *p, const key_spec_t *k, const cJSON *v, char *dst)
{
    if (k->nullable && cJSON_IsNull (v)) {
        dst[0] = '\0';
        return 0;
    }
    if (!cJSON_IsString (v))
        return s_fail (p, "expected a string%s, got %s", k->nullable ? " or null" : "", s_kind (v));
    size_t n = strlen (v->valuestring);
    if (n == 0 && k->len_min > 0)
        return s_fail (p, "expected a string of %zu to %zu bytes, got an empty string", k->len_min, k->len_max);
    if (n < k->len_min || n > k->len_max)
        return s_fail (p, "expected a string of %zu to %zu bytes, got %zu bytes", k->len_min, k->len_max, n);
    if (k->check && k->check (p, v->valuestring) != 0)
        return -1;
    assert (k->len_max < k->size);     /* a row whose limit does not fit its field */
    memcpy (dst, v->valuestring, n + 1);
    return 0;
}

static int s_resolve_path (parser_t *p, const key_spec_t *k, char *dst)
{
    if (dst[0] == '/' || !p->base_dir || !p->base_dir[0])
        return 0;
    char joined[CONFIG_PATH_MAX];
    size_t blen = strlen (p->base_dir);
    const char *sep = p->base_dir[blen - 1] == '/' ? "" : "/";
    int n = snprintf (joined, sizeof joined, "%s%s%s", p->base_dir, sep, dst);
    if (n < 0 || (size_t) n >= k->size)
        return s_fail (p, "expected a path of at most %zu bytes once joined to the config's folder, "
                          "got %d bytes", k->size - 1, n);
    memcpy (dst, joined, (size_t) n + 1);
    return 0;
}

static int s_read_count (parser_t *p, const key_spec_t *k, const cJSON *v, size_t *count)
{
    if (!cJSON_IsArray (v))
        return s_fail (p, "expected an array of %lld to %lld %ss, got %s", k->min, k->max, k->what, s_kind (v));
    size_t n = (size_t) cJSON_GetArraySize (v);
    if (n == 0 && k->min > 0)
        return s_fail (p, "expected an array of %lld to %lld %ss, got an empty array", k->min, k->max, k->what);
    if ((long long) n < k->min || (long long) n > k->max)
        return s_fail (p, "expected an array of %lld to %lld %ss, got %zu %ss", k->min, k->max, k->what,
                       n, k->what);
    *count = n;
    return 0;
}

static int s_read_string_array (parser_t *p, const key_spec_t *k, const cJSON *v, char *target)
{
    size_t count;
    if (s_read_count (p, k, v, &count) != 0)
        return -1;
    char *first = target + k->offset;
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        size_t mark = s_path_push_index (p, i);
        char *dst = first + i * k->size;
        if (s_read_string (p, k, e, dst) != 0)
            return -1;
        for (size_t j = 0; k->unique && j < i; j++)
            if (strcmp (first + j * k->size, dst) == 0) {
                char q[320];
                return s_fail (p, "duplicate %s %s", k->what, s_quote (dst, q, sizeof q));
            }
        s_path_pop (p, mark);
    }
    memcpy (target + k->count_offset, &count, sizeof count);
    return 0;
}

static int s_read_int_array (parser_t *p, const key_spec_t *k, const cJSON *v, char *target)
{
    size_t count;
    if (s_read_count (p, k, v, &count) != 0)
        return -1;
    int *dst = (int *) (target + k->offset);
    assert ((size_t) k->max * sizeof (int) <= k->size);
    key_spec_t elem = { .min = k->elem_min, .max = k->elem_max };
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        size_t mark = s_path_push_index (p, i);
        long long x;
        if (s_read_integer (p, &elem, e, &x) != 0)
            return -1;
        dst[i] = (int) x;
        for (size_t j = 0; k->unique && j < i; j++)
            if (dst[j] == dst[i])
                return s_fail (p, "duplicate %s %d", k->what, dst[i]);
        s_path_pop (p, mark);
    }
    memcpy (target + k->count_offset, &count, sizeof count);
    return 0;
}

static int s_read_object_array (parser_t *p, const key_spec_t *k, const cJSON *v, char *target)
{
    size_t count;
    if (s_read_count (p, k, v, &count) != 0)
        return -1;
    char *first = target + k->offset;
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        size_t mark = s_path_push_index (p, i);
        if (!cJSON_IsObject (e))
            return s_fail (p, "expected a %s object, got %s", k->what, s_kind (e));
        siblings_t sib = { .first = first, .index = i, .stride = k->size, .what = k->sub->what };
        if (s_parse_object (p, e, k->sub, first + i * k->size, &sib) != 0)
            return -1;
        s_path_pop (p, mark);
    }
    memcpy (target + k->count_offset, &count, sizeof count);
    return 0;
}

static void s_store_int (const key_spec_t *k, char *target, long long value)
{
    if (k->type == KEY_U32) {
        uint32_t u = (uint32_t) value;
        memcpy (target + k->offset, &u, sizeof u);
    }
    else {
        int i = (int) value;
        memcpy (target + k->offset, &i, sizeof i);
    }
}

static int s_read_value (parser_t *p, const key_spec_t *k, const cJSON *v, char *target, const siblings_t *sib)
{
    long long number = 0;
    switch (k->type) {
    case KEY_BOOL:
        if (!cJSON_IsBool (v))
            return s_fail (p, "expected a boolean, got %s", s_kind (v));
        *(bool *) (target + k->offset) = cJSON_IsTrue (v);
        return 0;
    case KEY_INT:
    case KEY_U32:
        if (s_read_integer (p, k, v, &number) != 0)
            return -1;
        s_store_int (k, target, number);
        return 0;
    case KEY_ENUM:
        if (s_read_enum (p, k, v, &number) != 0)
            return -1;
        s_store_int (k, target, number);
        return 0;
    case KEY_ENUM_NAME:
        if (s_read_enum (p, k, v, &number) != 0)
            return -1;
        snprintf (target + k->offset, k->size, "%s", k->choices[number]);
        return 0;
    case KEY_STRING:
    case KEY_PATH: {
        char *dst = target + k->offset;
        if (s_read_string (p, k, v, dst) != 0)
            return -1;
        for (size_t j = 0; k->unique && sib && j < sib->index; j++)
            if (strcmp (sib->first + j * sib->stride + k->offset, dst) == 0) {
                char q[160];
                return s_fail (p, "duplicate %s %s %s", sib->what, k->name, s_quote (dst, q, sizeof q));
            }
        return k->type == KEY_PATH ? s_resolve_path (p, k, dst) : 0;
    }
    case KEY_STRING_ARRAY:
        return s_read_string_array (p, k, v, target);
    case KEY_INT_ARRAY:
        return s_read_int_array (p, k, v, target);
    case KEY_OBJECT:
        if (!cJSON_IsObject (v))
            return s_fail (p, "expected an object, got %s", s_kind (v));
        return s_parse_object (p, v, k->sub, target + k->offset, NULL);
    case KEY_OBJECT_ARRAY:
        return s_read_object_array (p, k, v, target);
    }
    return s_fail (p, "internal error: key type %d", (int) k->type);
}

static int s_apply_default (parser_t *p, const key_spec_t *k, char *target)
{
    if (k->required)
        return s_fail (p, "required key missing");
    switch (k->type) {
    case KEY_BOOL:
        *(bool *) (target + k->offset) = k->def != 0;
        break;
    case KEY_INT:
    case KEY_U32:
    case KEY_ENUM:
        s_store_int (k, target, k->def);
        break;
    case KEY_ENUM_NAME:
        snprintf (target + k->offset, k->size, "%s", k->choices[k->def]);
        break;
    case KEY_STRING:
    case KEY_PATH:
        if (k->derive)
            return k->derive (p, target, target + k->offset, k->size);
        snprintf (target + k->offset, k->size, "%s", k->def_str ? k->def_str : "");
        break;
    case KEY_STRING_ARRAY:
    case KEY_INT_ARRAY:
    case KEY_OBJECT_ARRAY:
        memset (target + k->count_offset, 0, sizeof (size_t));
        break;
    case KEY_OBJECT:
        break;
    }
    return 0;
}

/* Unknown and repeated keys first (in document order), then every row in table order, so a
 * derived default sees the keys of the rows above it. */
static int s_parse_object (parser_t *p, const cJSON *obj, const table_t *t, char *target, const siblings_t *sib)
{
    bool seen[KEYS_MAX] = { false };
    for (const cJSON *c = obj->child; c; c = c->next) {
        size_t mark = s_path_push_key (p, c->string ? c->string : "");
        size_t i = 0;
        while (i < t->count && (!c->string || strcmp (c->string, t->keys[i].name) != 0))
            i++;
        if (i == t->count) {
            char list[512];
            return s_fail (p, "unknown key (expected one of %s)", s_table_keys (t, list, sizeof list));
        }
        if (seen[i])
            return s_fail (p, "duplicate key");
        seen[i] = true;
        s_path_pop (p, mark);
    }
    for (size_t i = 0; i < t->count; i++) {
        const key_spec_t *k = &t->keys[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive (obj, k->name);
        size_t mark = s_path_push_key (p, k->name);
        if ((v ? s_read_value (p, k, v, target, sib) : s_apply_default (p, k, target)) != 0)
            return -1;
        s_path_pop (p, mark);
    }
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
    return s_fail (p, fmt, arg);
}

/* One model, once every key is read: the defaults that depend on other keys, and the keys that
 * go (or must not go) with its type. */
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
    if (m->queue_depth == 0)
        m->queue_depth = server->queue_depth;
    static const char *const lstm_only[] = { "window", "head" };
    bool has_lstm[2] = { m->window > 0, m->head.weight[0] != '\0' };
    if (m->type == MODEL_TYPE_MLP) {
        if (m->layer_count == 0)
            return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].layers", index), at), "required key missing%s", "");
        for (int k = 0; k < 2; k++)
            if (has_lstm[k])
                return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].%s", index, lstm_only[k]), at),
                                  "only for models of \"type\": \"lstm\"; this model is \"%s\"", "mlp");
        return 0;
    }
    if (m->layer_count > 0)
        return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].layers", index), at),
                          "not for models of \"type\": \"lstm\" (the layers come from the %s tensors; "
                          "the output layer is \"head\")", "weight_ih_l{k}/weight_hh_l{k}");
    for (int k = 0; k < 2; k++)
        if (!has_lstm[k])
            return s_fail_at (p, (snprintf (at, sizeof at, "models[%zu].%s", index, lstm_only[k]), at),
                              "required key missing for \"type\": \"%s\"", "lstm");
    return 0;
}

static int s_resolve (parser_t *p, config_t *cfg)
{
    server_config_t *server = &cfg->server;
    server->queue_depth_given = server->queue_depth != 0;
    if (!server->queue_depth_given)
        server->queue_depth = 64;
    server->ipc_file_mode = (unsigned) strtoul (server->ipc_mode, NULL, 8);
    for (size_t i = 0; i < cfg->model_count; i++)
        if (s_resolve_model (p, &cfg->models[i], i, server) != 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- public API */

config_t *config_parse (const char *json, const char *name, const char *base_dir, char *err, size_t errlen)
{
    parser_t p = { .file = name ? name : "(config)", .base_dir = base_dir, .err = err, .errlen = errlen };
    if (err && errlen)
        err[0] = '\0';
    if (!json) {
        s_fail (&p, "no JSON text");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts (json, &end, 1);
    if (!root) {
        size_t line, column;
        config_text_position (json, end ? end : json, &line, &column);
        s_fail (&p, "invalid JSON near line %zu, column %zu", line, column);
        return NULL;
    }
    if (!cJSON_IsObject (root)) {
        s_fail (&p, "expected a JSON object at the top level, got %s", s_kind (root));
        cJSON_Delete (root);
        return NULL;
    }
    config_t *self = calloc (1, sizeof *self);
    if (!self) {
        s_fail (&p, "out of memory");
        cJSON_Delete (root);
        return NULL;
    }
    snprintf (self->path, sizeof self->path, "%s", p.file);
    int rc = s_parse_object (&p, root, &s_root_table, (char *) self, NULL);
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

const char *activation_name (activation_t a) { return S_NAME (s_activation_names, a); }
const char *backend_kind_name (backend_kind_t b) { return S_NAME (s_backend_names, b); }
const char *cuda_kernel_name (cuda_kernel_t k) { return S_NAME (s_cuda_kernel_names, k); }
const char *cpu_kernel_name (cpu_kernel_t k) { return S_NAME (s_cpu_kernel_names, k); }
const char *cuda_wait_name (cuda_wait_t w) { return S_NAME (s_cuda_wait_names, w); }
const char *model_type_name (model_type_t t) { return S_NAME (s_model_type_names, t); }
const char *weight_dtype_name (weight_dtype_t d) { return S_NAME (s_weight_dtype_names, d); }
