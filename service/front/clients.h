/* Requests in flight per client, for server.max_inflight_per_client. A client is its CURVE public
 * key when CURVE is on, else the ROUTER's routing id. A fixed table sized at start (no
 * allocation per request): open addressing on a hash of the key, entries dropped when their count
 * returns to zero. Front thread only. */
#ifndef SIGSERVE_CLIENTS_H
#define SIGSERVE_CLIENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLIENT_KEY_MAX 64

typedef struct _clients_t clients_t;

/* Room for CAPACITY clients with requests in flight at once (the server's total jobs bound it). */
clients_t *clients_new (size_t capacity);
void clients_destroy (clients_t **self_p);

/* Counts one more request for KEY unless it already has LIMIT in flight (then false). */
bool clients_admit (clients_t *self, const void *key, size_t len, uint32_t limit);
/* One request of KEY answered. */
void clients_release (clients_t *self, const void *key, size_t len);
/* Requests in flight for KEY (tests). */
uint32_t clients_inflight (const clients_t *self, const void *key, size_t len);

#endif
