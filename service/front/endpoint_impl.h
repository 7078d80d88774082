/* The insides of endpoints_t (endpoint.h), shared by its three files:
 *   endpoint.c       the slots, reload, the checks and warnings both transports share
 *   endpoint_zmq.c   the libzmq transport: a ROUTER socket per slot, its monitor, zmq_poll
 *   endpoint_zmtp.c  the zmtp transport: one zmtp_router for the front, a listener per slot
 *   endpoint_events.c  the connection events both report (refused handshakes, the connection limit)
 * Private to front/endpoint*.c. */
#ifndef SIGSERVE_ENDPOINT_IMPL_H
#define SIGSERVE_ENDPOINT_IMPL_H

#include "front/endpoint.h"

#include <zmq.h>

#define SLOTS (2 * CONFIG_MAX_ENDPOINTS)    /* room for a reload's new endpoints next to the old */
#define KNOWN_FDS 65536                     /* libzmq: connections on fds past this are not checked per message */

typedef struct {
    bool open;
    char name[CONFIG_ENDPOINT_MAX];
    bool added;                 /* bound by the last endpoints_add, not committed yet */
    bool closing;               /* removed by a reload: closed once inflight is 0 */
    uint32_t inflight;
    void *socket;               /* libzmq: the ROUTER */
    void *monitor;              /* libzmq: a PAIR receiving the socket's connection events */
} slot_t;

/* What a transport does (each entry for the front's thread). */
typedef struct {
    const char *name;
    int (*start) (endpoints_t *self, char *err, size_t errlen);
    void (*stop) (endpoints_t *self, uint32_t linger_ms);
    /* Binds NAME into slot I (its name and flags are set by the caller). */
    int (*bind) (endpoints_t *self, int i, const char *name, char *err, size_t errlen);
    /* No new connections on slot I (a reload removed it); those open stay until it closes. */
    void (*unbind) (endpoints_t *self, int i);
    void (*close) (endpoints_t *self, int i, uint32_t linger_ms);
    int (*recv) (endpoints_t *self, message_t *msg);
    void (*release) (endpoints_t *self, message_t *msg);
    /* FRAMES: the envelope, then the payload. */
    int (*send) (endpoints_t *self, int slot, const frame_t *frames, int count);
    int (*wait) (endpoints_t *self, int wake_fd, int timeout_ms);
    /* The options of self->cfg apply from now on (a reload; NULL: they apply to new sockets only). */
    void (*options) (endpoints_t *self);
    /* A burst of replies begins (ON) or ends (OFF): replies to one client may leave in one write (NULL: no such thing). */
    void (*cork) (endpoints_t *self, bool on);
    void (*watch) (endpoints_t *self, uint64_t now_ns, bool force);
    bool (*refused) (endpoints_t *self, const message_t *msg, uint64_t now_ns);
    const void *(*client_key) (endpoints_t *self, const message_t *msg, size_t *len);
    /* What binding NAME (a tcp:// or inproc:// endpoint of CFG) would refuse, found without its port: a
     * tcp:// address is bound by the transport's own rules on a port the system picks, and let go at
     * once. 0 with the address as bound in BOUND ("tcp://127.0.0.1:40411"; NAME for inproc://), or -1
     * with errno and ERR. Any thread; no endpoints_t needed (endpoints_check). */
    int (*probe) (const server_config_t *cfg, const char *name, char *bound, size_t boundlen, char *err, size_t errlen);
} endpoint_ops_t;

extern const endpoint_ops_t endpoint_zmq_ops;
extern const endpoint_ops_t endpoint_zmtp_ops;

struct _endpoints_t {
    const endpoint_ops_t *ops;
    server_config_t cfg;        /* the socket options */
    auth_t *auth;               /* CURVE (NULL: off) */
    stats_t *stats;             /* auth failures are counted here (may be NULL) */
    slot_t slots[SLOTS];
    int next_slot;              /* libzmq: the slot whose socket is read first next time */
    uint32_t connections;       /* accepted and not yet closed, over every socket */
    uint64_t last_limit_warn;   /* the connection-limit warning, at most once a second */
    uint64_t refused_since_warn;
    uint64_t last_auth_warn;    /* the refused-handshake warning, at most once a second ... */
    uint64_t auth_since_warn[AUTH_FAIL_COUNT];     /* ... with the counts since the last one */
    /* libzmq */
    void *ctx;
    bool own_ctx;
    zmq_msg_t frames[MAX_FRAMES];
    zmq_msg_t spare;            /* frames past MAX_FRAMES pass through here */
    zmq_pollitem_t items[2 * SLOTS + 1];
    int refused[64];            /* fds shut down for the limit: their disconnection is not counted */
    size_t refused_count;
    uint8_t known[KNOWN_FDS / 8];   /* fds of the connections counted (max_connections): a bit each */
    /* zmtp */
    void *router;               /* zmtp_router_t */
    uint64_t zmtp_seen[16];     /* the router's counters as last logged */
};

/* endpoint_events.c: the warnings both transports give, rate-limited to one a second. */
void endpoints_auth_failed (endpoints_t *self, const char *where, stats_auth_failure_t why, uint64_t now_ns);
void endpoints_limit_refused (endpoints_t *self, const char *where, const char *peer, uint64_t now_ns);

#endif
