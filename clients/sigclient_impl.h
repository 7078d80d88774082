/* libsigclient's private header: the client's fields and the helpers its files share (sigclient.c:
 * lifetime, sending and receiving, the round-robin calls; sigclient_dns.c: dns:// endpoints;
 * sigclient_stream.c: LSTM streams on sockets of their own; sigclient_sock.c: the socket layer over
 * either engine). Not installed. Nothing here may be named sigclient_*: the shared library exports
 * those names only (mk/install.mk's version script). */
#ifndef SIGCLIENT_IMPL_H
#define SIGCLIENT_IMPL_H

#include "clock.h"
#include "sigclient.h"
#include "sigclient_sock.h"

#include "signal.pb-c.h"

#include <stdbool.h>
#include <stdint.h>

typedef Sigserve__V1__Reply reply_t;
typedef Sigserve__V1__InferReply infer_reply_t;
typedef char client_endpoint_t[SIGCLIENT_ENDPOINT_MAX];

/* One dns://NAME:PORT endpoint and the tcp:// endpoints it stands for now. */
#define CLIENT_DNS_NAME_MAX 254         /* a DNS name's bytes and its NUL */
#define CLIENT_DNS_MAX_ADDRS 64         /* addresses kept per name (a headless Service: one per pod) */
typedef struct {
    char name[CLIENT_DNS_NAME_MAX];
    char port[6];
    client_endpoint_t connected[CLIENT_DNS_MAX_ADDRS];    /* connected now, sorted */
    size_t n_connected;
    char error[160];            /* why the last resolution gave nothing; "" when it gave addresses */
} client_dns_t;

typedef struct client_streams client_streams_t;    /* sigclient_stream.c */

struct _sigclient_t {
    sigclient_engine_t engine;
    void *ctx;                  /* libzmq: our own, so the caller needs no ZeroMQ setup; NULL with zmtp */
    client_sock_t *socket;      /* the DEALER connected to every endpoint */
    char *endpoints;            /* "tcp://a, dns://b:1 [tcp://..]": named in error messages */
    char *static_endpoints;     /* the endpoints given that are not dns://, joined */
    char **statics;             /* the same one by one, in the order given */
    size_t n_static;
    client_dns_t *dns;          /* the dns:// endpoints given */
    size_t n_dns;
    int resolve_interval_ms;    /* 0: resolve only at sigclient_new */
    int64_t next_resolve_ns;    /* when the dns:// names are due to be resolved again */
    int retries;                /* sigclient_set_retry */
    int timeout_ms;             /* bounds each send and each wait for a reply */
    uint32_t deadline_us;       /* sent with every sigclient_infer request */
    uint64_t next_request_id;   /* starts at 1: the server answers 0 to what it cannot decode */
    uint8_t *packbuf;           /* request encoding, reused; grows to the largest request */
    size_t packcap;
    size_t largest_unanswered;  /* the largest request sent since the last reply, in bytes */
    bool curve;                 /* CURVE keys set: a refused key looks like a timeout */
    client_sock_keys_t curve_keys;  /* for every socket, stream sockets too */
    client_streams_t *streams;  /* LSTM streams' routes and sockets; NULL until the first stream call */
    /* Set with self->streams by sigclient_stream.c, which holds sockets of its own: the core and the
     * dns:// resolution call down through these (after a resolution: drop the sockets of vanished
     * addresses; at destroy: free the streams), so neither depends on the streams' file. */
    void (*streams_refresh) (sigclient_t *self);
    void (*streams_destroy) (sigclient_t *self);
    zmtp_frame_t frame;         /* the last frame received: a view, valid until that socket's next receive */
    int status;                 /* last outcome, a sigclient_status_t */
    char error[768];            /* last failure in words */
};

/* What one InferRequest carries (the fields sigclient.c packs). */
typedef struct {
    const char *model;
    const float *features;
    size_t n_features;
    uint32_t rows;
    uint32_t deadline_us;
    uint64_t stream_id;
    uint64_t step;
} client_infer_args_t;

/* The monotonic clock every deadline is taken from (common/clock.h's). */
static inline int64_t client_now_ns (void) { return (int64_t) clock_now_ns (); }

/* ---- sigclient.c ---- */

void client_reset (sigclient_t *self);
int client_fail (sigclient_t *self, int status, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));
/* A DEALER of the client's engine with its options (CURVE keys; requests only to connections that
 * are up with dns:// endpoints), connected to nothing yet. NULL with the failure recorded. */
client_sock_t *client_socket_new (sigclient_t *self);
/* Packs one InferRequest and sends it on SOCKET (named NAME in messages); its id in *REQUEST_ID. */
int client_send_infer_on (sigclient_t *self, client_sock_t *socket, const char *name, const client_infer_args_t *args,
                          uint64_t *request_id);
/* Receives and decodes one Reply from SOCKET by DEADLINE_NS; the caller frees *REPLY_P. RESOLVE:
 * whether dns:// names may be resolved while waiting (never while a stream socket is in use). NAME
 * NULL: self->endpoints, which a resolution rewrites (so it is read afresh, never kept). */
int client_recv_reply_on (sigclient_t *self, client_sock_t *socket, const char *name, int64_t deadline_ns,
                          bool resolve, reply_t **reply_p);
int64_t client_deadline (const sigclient_t *self);
/* The server's answer to a request it could not read: request_id 0 and an error status. */
bool client_is_rejection (const reply_t *reply);
/* Fills RESULT and copies the outputs of an OK reply; a server error status fails the call when
 * STATUS_IS_FAILURE. */
int client_take_infer (sigclient_t *self, const infer_reply_t *rep, float *outputs, size_t cap, size_t *n_outputs,
                       sigclient_result_t *result, bool status_is_failure);

/* ---- sigclient_dns.c ---- */

bool client_is_dns (const char *endpoint);
/* Resolves the dns:// names again when due (and tells the streams what vanished). */
void client_resolve_if_due (sigclient_t *self);
/* The addresses the client sends to now: the static endpoints in the order given, then each
 * dns:// name's connected addresses (sorted). Writes up to CAP pointers (borrowed until the next
 * resolution) and returns the total. */
size_t client_addresses (const sigclient_t *self, const char **out, size_t cap);
/* Splits "dns://NAME:PORT" (NAME may be a bracketed IPv6 literal). 0, or -1 with ERROR filled. */
int client_dns_parse (const char *endpoint, char *name, char *port, char *error, size_t error_cap);
/* Addresses the round-robin socket is connected to now (static endpoints and dns:// addresses). */
size_t client_peer_count (const sigclient_t *self);
/* Resolves every dns:// name now, rewrites self->endpoints, tells the streams what vanished
 * (self->streams_refresh). */
void client_resolve_all (sigclient_t *self);

#endif
