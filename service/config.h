/* The JSON configuration file: one server section and a list of models.
 * Loading is table-driven (config.c): every key has a type, bounds and a default, and any
 * unknown key, wrong type or out-of-range value fails the load with a message naming the
 * file and the key (the server then exits with code 2). Keys are documented in config/README.md. */
#ifndef SIGSERVE_CONFIG_H
#define SIGSERVE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONFIG_MAX_ENDPOINTS 16
#define CONFIG_MAX_MODELS 64
#define CONFIG_MAX_LAYERS 64
#define CONFIG_NAME_MAX 64      /* model names, versions, tensor names: bytes incl. NUL */
#define CONFIG_PATH_MAX 4096
#define CONFIG_ENDPOINT_MAX 256
#define CONFIG_FILE_MAX_BYTES (1024 * 1024)   /* config_load refuses larger files */

typedef enum { ACTIVATION_NONE = 0, ACTIVATION_RELU, ACTIVATION_SIGMOID, ACTIVATION_TANH } activation_t;
typedef enum { BACKEND_AUTO = 0, BACKEND_CPU, BACKEND_CUDA } backend_kind_t;
typedef enum { CUDA_KERNEL_WARP = 0, CUDA_KERNEL_CUBLAS, CUDA_KERNEL_MBYV, CUDA_KERNEL_FUSED } cuda_kernel_t;
/* How the host waits for the GPU: spin on the completion event, spin with sched_yield, or block. */
typedef enum { CUDA_WAIT_SPIN = 0, CUDA_WAIT_YIELD, CUDA_WAIT_BLOCK } cuda_wait_t;
typedef enum { CPU_KERNEL_LOOP = 0, CPU_KERNEL_BLAS } cpu_kernel_t;

typedef struct {
    char weight[CONFIG_NAME_MAX];   /* tensor name of the [out, in] weight matrix */
    char bias[CONFIG_NAME_MAX];     /* tensor name of the [out] bias; "" for none */
    activation_t activation;
} layer_config_t;

typedef struct {
    char name[CONFIG_NAME_MAX];
    char version[CONFIG_NAME_MAX];
    backend_kind_t backend;
    cuda_kernel_t kernel;
    cpu_kernel_t cpu_kernel;
    bool graph;
    bool zero_copy;                 /* CUDA: kernels read the input from and write the output to mapped host memory */
    cuda_wait_t wait;
    int device;
    uint32_t max_rows;              /* largest rows per request this model accepts */
    char weights[CONFIG_PATH_MAX];  /* resolved: relative paths joined to the config's folder */
    size_t layer_count;
    layer_config_t layers[CONFIG_MAX_LAYERS];
} model_config_t;

typedef struct {
    size_t endpoint_count;
    char endpoints[CONFIG_MAX_ENDPOINTS][CONFIG_ENDPOINT_MAX];
    uint32_t max_message_bytes;
    bool busy_poll;
    char log_level[16];             /* "error", "warn", "info" or "debug" */
    uint32_t io_threads;
    uint32_t queue_depth;           /* requests taken from the sockets per loop turn */
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
void config_destroy (config_t **self_p);

const char *activation_name (activation_t a);
const char *backend_kind_name (backend_kind_t b);
const char *cuda_kernel_name (cuda_kernel_t k);
const char *cpu_kernel_name (cpu_kernel_t k);
const char *cuda_wait_name (cuda_wait_t w);

#endif
