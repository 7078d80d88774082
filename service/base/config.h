/* The JSON configuration file: one server section and a list of models.
 * Loading is table-driven (config.c): every key has a type, bounds and a default, and any
 * unknown key, wrong type or out-of-range value fails the load with a message naming the
 * file and the key (the server then exits with code 2). Keys are documented in config/README.md. */
#ifndef SIGSERVE_CONFIG_H
#define SIGSERVE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/cuda_kernel.h"
#include "base/model_type.h"

#define CONFIG_MAX_ENDPOINTS 16
#define CONFIG_MAX_MODELS 64
#define CONFIG_MAX_LAYERS 64
/* A request that would wait longer than this for a worker is refused OVERLOADED at once (max_queue_us). */
#define CONFIG_MAX_QUEUE_US_DEFAULT 10000
/* A CPU model's request that takes less than this (timed at load) runs on the front when nothing waits. */
#define CONFIG_INLINE_US_DEFAULT 20
#define CONFIG_MAX_FRONTS 8      /* server.fronts: front threads, each owning some of the endpoints */
/* The most an idle serving thread spins before it sleeps (base/spin.h says when it does). */
#define CONFIG_SPIN_US_DEFAULT 1000
#define CONFIG_NAME_MAX 64      /* model names, versions, tensor names: bytes incl. NUL */
#define CONFIG_PATH_MAX 4096
#define CONFIG_ENDPOINT_MAX 256
#define CONFIG_FILE_MAX_BYTES (1024 * 1024)   /* config_load refuses larger files */
#define CONFIG_MAX_CPUS 256     /* entries of a "cpus" list */
#define CONFIG_MAX_DEVICES 16   /* entries of a "devices" list */
#define CONFIG_MAX_INSTANCES 64 /* worker instances of one model */
#define CONFIG_MAX_GRAPH_ROWS 32 /* entries of a "graph_rows" list */
#define CONFIG_MAX_MESSAGE_BYTES (64 * 1024 * 1024)    /* the most server.max_message_bytes may be */

typedef enum { ACTIVATION_NONE = 0, ACTIVATION_RELU, ACTIVATION_SIGMOID, ACTIVATION_TANH } activation_t;
typedef enum { BACKEND_AUTO = 0, BACKEND_CPU, BACKEND_CUDA } backend_kind_t;
/* How the host waits for the GPU: spin on the completion event, spin with sched_yield, or block. */
typedef enum { CUDA_WAIT_SPIN = 0, CUDA_WAIT_YIELD, CUDA_WAIT_BLOCK } cuda_wait_t;
typedef enum { CPU_KERNEL_LOOP = 0, CPU_KERNEL_BLAS } cpu_kernel_t;
/* How a backend holds the weights (backend.h's weight_dtypes says which it can): f32; f16 or bf16 (each
 * weight rounded once at load); int8 (per-output-row scales, the activations quantized per row at each
 * layer: the CPU MLP backend alone). */
typedef enum { WEIGHT_DTYPE_F32 = 0, WEIGHT_DTYPE_F16, WEIGHT_DTYPE_BF16, WEIGHT_DTYPE_INT8 } weight_dtype_t;
#define WEIGHT_DTYPE_COUNT 4
/* An MLP on the CPU over several cores an instance ("split"): never; where the load measures it faster; always
 * (every layer of two or more blocks of 16 outputs). */
typedef enum { CPU_SPLIT_OFF = 0, CPU_SPLIT_AUTO, CPU_SPLIT_ON } cpu_split_mode_t;
typedef enum { LOG_FORMAT_TEXT = 0, LOG_FORMAT_JSON } log_format_t;
/* A model's CPU fallback ("fallback", issue 38): decided at load (config/README.md says the rule);
 * none; or one of `instances` CPU instances, as given. */
typedef enum { FALLBACK_AUTO = 0, FALLBACK_OFF, FALLBACK_CPU } fallback_mode_t;
typedef struct {
    fallback_mode_t mode;
    uint32_t instances;             /* FALLBACK_CPU: 1 to CONFIG_MAX_INSTANCES (auto: 1 once decided) */
} fallback_config_t;
/* What speaks ZeroMQ on the endpoints: our own ZMTP engine, or libzmq (front/endpoint.h). */
typedef enum { TRANSPORT_ZMTP = 0, TRANSPORT_LIBZMQ } transport_t;
#define TRANSPORT_DEFAULT TRANSPORT_ZMTP

typedef struct {
    char weight[CONFIG_NAME_MAX];   /* tensor name of the [out, in] weight matrix */
    char bias[CONFIG_NAME_MAX];     /* tensor name of the [out] bias; "" for none */
    activation_t activation;
} layer_config_t;

typedef struct {
    char name[CONFIG_NAME_MAX];
    char version[CONFIG_NAME_MAX];
    char group[CONFIG_NAME_MAX];    /* "": its own workers; else the workers of the models that name it */
    model_type_t type;
    backend_kind_t backend;
    cuda_kernel_t kernel;
    bool kernel_given;              /* "kernel" was in the file (auto then measures only that kernel) */
    cpu_kernel_t cpu_kernel;
    bool graph;
    bool zero_copy;                 /* CUDA: kernels read the input from and write the output to mapped host memory */
    cuda_wait_t wait;
    int device;                     /* devices[0] once resolved */
    size_t device_count;            /* resolved: 1 ([device]) when "devices" is absent */
    int devices[CONFIG_MAX_DEVICES];
    uint32_t max_rows;              /* largest rows per request this model accepts */
    uint32_t instances;             /* worker threads, each with its own backend context */
    size_t cpu_count;               /* 0: workers are not pinned */
    int cpus[CONFIG_MAX_CPUS];      /* instance i runs on cpus[i % cpu_count] */
    uint32_t max_batch_rows;        /* resolved: most rows one launch computes (default max_rows) */
    uint32_t batch_delay_us;        /* how long a worker waits for more requests to batch (0: none) */
    uint32_t queue_depth;           /* requests waiting for a worker (a memory bound); 0: derived at load */
    uint32_t max_queue_us;          /* OVERLOADED when a request's expected wait for a worker is longer */
    uint32_t buffer_rows;           /* resolved: rows of a request buffer (default min (max_rows, 16)) */
    uint32_t large_buffers;         /* resolved: buffers of max_rows rows for requests over buffer_rows */
    size_t graph_rows_count;        /* resolved: the batch sizes CUDA graphs are captured for, ascending; */
    int graph_rows[CONFIG_MAX_GRAPH_ROWS];  /* a launch of r rows replays the first >= r, rows padded */
    uint32_t keep_warm_us;          /* idle this long, a worker runs the model once (0: off) */
    uint32_t watchdog_ms;           /* persistent kernel: no answer in this long = unavailable */
    weight_dtype_t weight_dtype;
    bool specialise;                /* persistent: compile the kernel for this model's shapes at load (NVRTC) */
    char kernel_cache_dir[CONFIG_PATH_MAX];  /* resolved: server.kernel_cache_dir (the backend reads it here) */
    char weights[CONFIG_PATH_MAX];  /* resolved: relative paths joined to the config's folder */
    /* The keys of the model's type (base/model_type.c reads them; zero for the other types): */
    size_t layer_count;             /* mlp */
    layer_config_t layers[CONFIG_MAX_LAYERS];
    char rnn_prefix[CONFIG_NAME_MAX];   /* recurrent: its tensors' name prefix ("lstm.": the key named after the type) */
    uint32_t window;                /* recurrent: time steps of a window */
    layer_config_t head;            /* recurrent: the linear head on the last hidden state */
    uint32_t max_streams;           /* recurrent: streams held at once */
    uint32_t stream_idle_s;         /* recurrent: a stream idle this long is forgotten */
    uint32_t stream_history;        /* recurrent: streams whose last window is kept to rebuild them (0: max_streams) */
    bool advances_apart;            /* lstm, cuda: the advances in a second resident kernel (plan 4) */
    bool green_context;             /* cuda, persistent kernels: each in a green context of SMs of its own */
    cpu_split_mode_t split;         /* mlp on the CPU: each instance's layers over cpus / instances cores */
    uint64_t split_spin_ns;         /* resolved (not a key): how long a split's idle helper spins before it
                                       sleeps: server.spin_us, or always with busy_poll */
    fallback_config_t fallback;     /* "fallback": "off", "auto" or {"backend": "cpu", "instances": N} */
} model_config_t;

/* ZeroMQ CURVE: on when secret_key_file is not empty. */
typedef struct {
    char secret_key_file[CONFIG_PATH_MAX];  /* czmq certificate with the server's secret key */
    char allowed_clients[CONFIG_PATH_MAX];  /* folder of allowed clients' public certificates */
} curve_config_t;

typedef struct {
    size_t endpoint_count;
    char endpoints[CONFIG_MAX_ENDPOINTS][CONFIG_ENDPOINT_MAX];
    uint32_t max_message_bytes;
    bool busy_poll;
    uint32_t spin_us;               /* without busy_poll: the most an idle thread spins before it sleeps */
    uint64_t spin_cap_ns;           /* resolved by main (not a key): spin_us where the CPUs allow it, else 0 */
    uint32_t inline_us;             /* the front runs a CPU model's request itself when it takes less (0: never) */
    bool gpu_processes;             /* GPU work runs in one process per device (serving/devices.h) */
    bool standby;                   /* a warm spare device process per device, promoted on a loss */
    char log_level[16];             /* "error", "warn", "info" or "debug" */
    uint32_t io_threads;
    uint32_t fronts;                /* front threads (each owns endpoints k, k + fronts, ...); 0 is read as 1 */
    bool share_tcp;                 /* resolved: zmtp with more fronts than endpoints: every front listens on
                                       every tcp:// endpoint (SO_REUSEPORT), the kernel spreads connections */
    uint32_t queue_depth;           /* deprecated: the default of every model's queue_depth (0: not given) */
    bool queue_depth_given;         /* given in the file (deprecated there: a per-model key now) */
    size_t cpu_count;               /* 0: the front thread is not pinned */
    int cpus[CONFIG_MAX_CPUS];      /* the front thread's CPUs */
    uint32_t drain_ms;              /* at SIGTERM: how long to finish admitted requests */
    char http[CONFIG_ENDPOINT_MAX]; /* "HOST:PORT" of the metrics and probes endpoint; "" = off */
    log_format_t log_format;
    transport_t transport;          /* "zmtp" or "libzmq" */
    uint32_t stats_interval_s;      /* periodic stats log line; 0 = off */
    curve_config_t curve;
    uint32_t heartbeat_ms;          /* ZMTP heartbeats (0 = off); a silent peer is closed after 3 */
    uint32_t max_connections;       /* peers connected at once (0 = no limit) */
    uint32_t max_inflight_per_client;   /* admitted, unanswered requests per client (0 = no limit) */
    char ipc_mode[8];               /* file mode of ipc:// socket files, octal text ("0600") */
    unsigned ipc_file_mode;         /* resolved: ipc_mode's value */
    char kernel_cache_dir[CONFIG_PATH_MAX];  /* specialised kernels' cubins ("": in memory only) */
} server_config_t;

typedef struct {
    char path[CONFIG_PATH_MAX];
    server_config_t server;
    size_t model_count;
    model_config_t models[CONFIG_MAX_MODELS];
} config_t;

/* Loads and validates PATH. NULL on failure with a message in ERR that names the file and the
 * key ("config/x.json: models[0].layers[1].activation: expected one of none, relu, sigmoid,
 * tanh, got \"gelu\""). The caller owns the result. */
config_t *config_load (const char *path, char *err, size_t errlen);
/* Same from a JSON text; BASE_DIR resolves relative weight paths; NAME is used in messages. */
config_t *config_parse (const char *json, const char *name, const char *base_dir, char *err, size_t errlen);
/* CFG's graph_rows when none were given: the powers of two below the largest launch, max (max_rows,
 * max_batch_rows), then that launch. Nothing when some were given. (Config files get it when read;
 * a model config built in code, when its CUDA graphs are captured.) */
void config_graph_rows_default (model_config_t *cfg);
/* Every key the configuration knows, from its tables, in table order: FN (SECTION, KEY, ARG) with
 * SECTION the JSON path of the object that holds it ("" for the top level, "server",
 * "server.curve", "models", "models[i].layers", "models[i].head"). config/README.md must have a row
 * for each (tests/test_config.c checks it). */
void config_each_key (void (*fn) (const char *section, const char *key, void *arg), void *arg);
/* 1-based line and column of POS in TEXT, for messages (config_load's and config_parse's). */
void config_text_position (const char *text, const char *pos, size_t *line, size_t *column);
void config_destroy (config_t **self_p);
/* Whether CFG's fronts share its tcp:// endpoints (zmtp, more fronts than endpoints). */
static inline bool config_fronts_share (const server_config_t *cfg)
{
    return cfg->transport == TRANSPORT_ZMTP && cfg->fronts > cfg->endpoint_count;
}

/* The threads that serve CFG (what adaptive spinning counts against the CPUs): the fronts, libzmq's
 * I/O threads (the libzmq transport; zmtp has none), a worker per instance of each model with its own, and each group's workers (as many
 * as its largest member has instances), and a split's helpers (one for each core an instance has past its first). */
uint32_t config_serving_threads (const config_t *cfg);

const char *activation_name (activation_t a);
const char *backend_kind_name (backend_kind_t b);
const char *cuda_kernel_name (cuda_kernel_t k);
const char *cpu_kernel_name (cpu_kernel_t k);
const char *cuda_wait_name (cuda_wait_t w);
const char *weight_dtype_name (weight_dtype_t d);
const char *cpu_split_mode_name (cpu_split_mode_t s);
const char *fallback_mode_name (fallback_mode_t f);   /* "auto", "off", "cpu" */
/* The cores each instance of CFG owns: cpus / instances with "split" (on or auto), else 1. */
static inline uint32_t config_split_cores (const model_config_t *cfg)
{
    return cfg->split != CPU_SPLIT_OFF && cfg->instances ? (uint32_t) (cfg->cpu_count / cfg->instances) : 1;
}

#endif
