/* Requests in flight per client, for server.max_inflight_per_client. A client is its CURVE public
 * key when CURVE is on, else the ROUTER's routing id (client_id_t, serving/job.h: a job carries
 * its client's identity from admission to reply, so it is worked out once per request). A fixed
 * table sized at start (no allocation per request): open addressing on the key's hash, entries
 * dropped when their count returns to zero (backward-shift deletion). Front thread only. */
#ifndef SIGSERVE_CLIENTS_H
#define SIGSERVE_CLIENTS_H

#include "serving/job.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _clients_t clients_t;

/* ID for KEY (LEN bytes, cut at CLIENT_KEY_MAX), hash included. */
void clients_id (client_id_t *id, const void *key, size_t len);

/* Room for CAPACITY clients with requests in flight at once (the server's total jobs bound it). */
clients_t *clients_new (size_t capacity);
void clients_destroy (clients_t **self_p);

/* Requests in flight for ID. */
uint32_t clients_inflight (const clients_t *self, const client_id_t *id);
/* One more request of ID in flight (the caller checked the limit with clients_inflight first). */
void clients_add (clients_t *self, const client_id_t *id);
/* One request of ID answered. */
void clients_release (clients_t *self, const client_id_t *id);

#endif
