/* The server loop: ROUTER sockets on every configured endpoint, requests taken in order of
 * arrival (up to queue_depth per turn, each stamped at receipt), decoded, validated, run on
 * their model, and answered DONTWAIT with exactly the envelope they came with. One thread. */
#ifndef SIGSERVE_SERVER_H
#define SIGSERVE_SERVER_H

#include "config.h"
#include "registry.h"
#include <signal.h>
#include <stdint.h>

typedef struct _server_t server_t;

typedef struct {
    uint64_t received;          /* messages taken from the sockets */
    uint64_t replied;           /* replies handed to ZeroMQ */
    uint64_t by_status[16];     /* infer replies by status */
    uint64_t send_failures;     /* replies ZeroMQ refused (peer gone, queue full) */
    uint64_t dropped;           /* messages that could not be addressed (bad envelope) */
} server_stats_t;

/* Binds every endpoint of CFG. MODELS stays the caller's. NULL with ERR on failure. */
server_t *server_new (const server_config_t *cfg, model_registry_t *models, char *err, size_t errlen);
void server_destroy (server_t **self_p);

/* Serves until *STOP becomes non-zero; then answers what has already arrived and returns 0. */
int server_run (server_t *self, volatile sig_atomic_t *stop);

const server_stats_t *server_stats (const server_t *self);

#endif
