/* The insides of the fronts (server.h), shared by the files they are made of, one concern each:
 *   server.c  the loop (intake, replies, commands, idling), the drain, lifecycle; the fronts' threads
 *   intake.c  taking a message off a socket, bounding, decoding, answering health, list_models and
 *             every bad request, and admitting infer requests (dispatch_admit)
 *   reply.c   sending replies, and collecting the finished jobs of every model the front answers for
 *   reload.c  the control thread's commands (bind, swap, unbind) and retiring replaced model sets
 * A server has server.fronts fronts (front_t), each a thread owning some of the endpoints (front k:
 * endpoints k, k + fronts, ...), its clients table, codec, reply buffer, waker, and a lane
 * of every model (serving/dispatch.h): nothing on the request path is shared between fronts but the
 * workers' rings. The server_t holds what they share: the configuration, the stop flag, the set the
 * HTTP thread reads, the reload lock, and the sets retired by some fronts and not yet by all.
 * Private to front/: nothing else includes this. Front thread only, except where a field says. */
#ifndef SIGSERVE_SERVER_IMPL_H
#define SIGSERVE_SERVER_IMPL_H

#include "front/clients.h"
#include "front/codec.h"
#include "front/endpoint.h"
#include "front/server.h"
#include "base/ring.h"
#include "base/threads.h"
#include "base/spin.h"
#include "serving/registry.h"

#include <pthread.h>
#include <stdatomic.h>

#define ERROR_MAX 512
#define RETIRING_MAX 16
/* Every model the front answers for: the current set's and those a retiring set still owns. */
#define ANSWERING_MAX (CONFIG_MAX_MODELS * (RETIRING_MAX + 1))

typedef enum { FRONT_SERVING, FRONT_DRAINING, FRONT_ABORTING, FRONT_DONE } front_state_t;
typedef enum { CMD_NONE = 0, CMD_BIND, CMD_UNBIND_ADDED, CMD_SWAP, CMD_SERVE } command_t;

typedef struct front front_t;

struct front {
    server_t *server;
    uint32_t index;                     /* its lane in every model */
    pthread_t thread;                   /* fronts 1..: their own thread (front 0 runs on server_run's) */
    bool started;
    volatile sig_atomic_t *stop;        /* server_run's */
    server_config_t cfg;                /* the server's, with this front's endpoints only */
    model_registry_t *models;           /* the set being served */
    model_registry_t *retiring[RETIRING_MAX];   /* replaced sets with replies still to send */
    size_t retiring_count;
    model_t *answering[ANSWERING_MAX];  /* the models of models and retiring (owned ones): what the
                                           front collects from, counts and aborts (front_answering) */
    size_t answering_count;
    ring_t retired;                     /* front -> control: sets this front let go of */
    stats_t *stats;
    clients_t *clients;
    endpoints_t *endpoints;
    waker_t *wake;                      /* workers and the control thread wake the front: own_wake, or the
                                           device processes' (in the shared region: serving/devices.h) */
    waker_t own_wake;
    codec_t *codec;
    codec_models_t *listing;            /* list_models replies are built here */
    uint8_t *reply_buf;
    size_t reply_cap;
    char error[ERROR_MAX];
    front_state_t state;
    _Atomic bool serving;               /* state == FRONT_SERVING, for other threads */
    _Atomic bool loading;               /* no models yet (server_new without them): infer answers UNAVAILABLE */
    uint64_t drain_until;
    uint64_t last_message;              /* CLOCK_MONOTONIC ns of the last message taken */
    int turn_taken, last_turn_taken;    /* messages taken in this intake turn so far, and in the last one */
    uint64_t inline_left_ns;            /* what the front may still spend computing requests itself this turn */
    spin_t spin;                        /* how long the front spins idle (base/spin.h) */
    uint64_t last_activity;
    uint64_t last_warn;                 /* rate limit of the send-failure warning */
    uint64_t last_watch;                /* the connection events were last read */
    uint64_t failures_since_warn;
    /* the control thread's mailbox: a command, its arguments and its result */
    _Atomic int command;
    const server_config_t *command_cfg;
    model_registry_t *command_models;
    int command_result;
    char command_error[ERROR_MAX];
    waker_t command_done;
};

/* A set some fronts retired and not yet every one (the control thread's: server_collect_retired). */
typedef struct {
    model_registry_t *set;
    uint32_t fronts;                    /* how many have let go of it */
} retired_t;

struct _server_t {
    server_config_t cfg;                /* as configured (the last reload's) */
    front_t *fronts[CONFIG_MAX_FRONTS];
    uint32_t front_count;
    int endpoint_front[CONFIG_MAX_ENDPOINTS];   /* the front owning cfg.endpoints[e] */
    server_config_t next[CONFIG_MAX_FRONTS];    /* a reload's configuration for each front */
    model_registry_t *models;           /* the set served (server_models; under lock) */
    model_registry_t *placeholder;      /* the empty set served while loading */
    stats_t *stats;
    bool own_stats;
    devices_t *devices;                 /* the device processes (the caller's), or NULL */
    _Atomic bool stop_requested;
    _Atomic bool loading;
    retired_t retired[2 * RETIRING_MAX + 2];
    size_t retired_count;
    pthread_mutex_t lock;               /* server_lock: reloads against other readers of models */
};

/* Whether the front serves (not loading, not draining or asked to stop) and every model can run:
 * health's answer. */
static inline bool front_ready (front_t *self)
{
    return !atomic_load (&self->loading) && atomic_load (&self->serving)
           && !atomic_load (&self->server->stop_requested) && model_registry_ready (self->models);
}

/* reply.c */
/* Sends the envelope frames (COUNT, the routing id first) and REPLY. */
void front_send (front_t *self, int socket, const frame_t *envelope, int count, const Sigserve__V1__Reply *reply);
/* An InferReply with an error status (the text in self->error), for a request the front answers. */
void front_send_error (front_t *self, int socket, const frame_t *envelope, int count, uint64_t request_id,
                       sig_status_t status, const char *model_version, int slot, uint64_t t_recv);
/* Sends the replies of every finished job. True when there were any. */
bool front_collect (front_t *self);
/* The reply of job J of M, finished by a worker or run on the front (inline); J goes back to the pool. */
void front_send_job (front_t *self, model_t *m, job_t *j);
/* The reply buffer grown for MODELS' largest reply. 0, or -1 with ERR. */
int front_reply_buffer (front_t *self, model_registry_t *models, char *err, size_t errlen);

/* intake.c */
/* Takes up to JOB_INTAKE_TURN messages, the sockets in turn. True when there were any. */
bool front_intake (front_t *self);

/* reload.c */
/* Runs the control thread's command, between two requests. */
void front_command (front_t *self);
/* Model sets whose owned models have nothing in flight go back to the control thread. */
void front_retire (front_t *self);
/* Rebuilds self->answering after the sets changed (and wires new models' workers to the front). */
void front_answering (front_t *self);
/* Which front takes each endpoint of NEXT (OWNER[e]): the one serving it in NOW (NULL at start: none),
 * else the one with the fewest so far (so at start front k gets endpoints k, k + fronts, ...); -1 for
 * a tcp:// endpoint every front listens on (zmtp with more fronts than endpoints: share_tcp);
 * self->next[k] is NEXT with front k's endpoints only. */
void front_assign_endpoints (server_t *self, const server_config_t *now, const server_config_t *next, int *owner);

#endif
