/* Where a model's instances run, as an interface (issue 37): in this process's threads
 * (placement_threads: the server's own, or a device process's for the instances placed on its
 * device), or in device processes behind the server's front (placement_devices: the server's side,
 * serving/devices.h). The one constructor (model.c: model_load) calls a placement through this
 * table; nothing else asks where a model runs (placement.c chooses it).
 *
 * Either placement fills one model description, model_desc_t: what the model is as it loaded
 * (sizes, type, kernel, timings, candidates, capabilities). In a device process the threads
 * placement fills it, and the load's reply (devproto.h) carries it to the server as it is.
 * Capabilities are decided once, at the load, from the model types table and the backend; the
 * fronts (front/request.c, dispatch.c) and the workers read them, never the type or the backend.
 * Private to serving/. */
#ifndef SIGSERVE_PLACEMENT_H
#define SIGSERVE_PLACEMENT_H

#include "serving/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _devices_t devices_t;
typedef struct instance instance_t;

/* What a loaded model can do (model_desc_t.can). */
#define MODEL_CAN_STREAM (1u << 0)      /* keeps streams: its type's MODEL_CAP_STREAM, with its backend's stream entries */
#define MODEL_CAN_BATCH (1u << 1)       /* several requests in one launch: its type's MODEL_CAP_BATCH */
#define MODEL_CAN_INLINE (1u << 2)      /* a front may run a request itself: its type's MODEL_CAP_INLINE (holds nothing
                                           per instance between requests) and no keep_warm_us (the next request must
                                           then go to the workers it keeps warm) */
#define MODEL_CAN_SHARE_BOX (1u << 3)   /* its instances' mailboxes lie in the shared region, where a front may publish
                                           too (backend.h: share_box) */
#define MODEL_CAN_PARK (1u << 4)        /* its backend can stop a resident kernel after the load and launch it again
                                           (backend.h: park): a warm spare holds it loaded, no kernel resident */

/* A model as it loaded: what the placement found, and what crosses the control socket. */
typedef struct {
    model_config_t cfg;                 /* as it loads: "auto"'s backend, kernel and zero_copy chosen */
    uint32_t input_size, output_size;   /* recurrent: input_size is a whole window (window x step_size) */
    uint32_t window, step_size;         /* recurrent (MODEL_CAP_WINDOW); 0 for an mlp */
    /* A launch of r rows takes about launch_ns + r x row_ns, timed at load (model_time.c). */
    uint64_t launch_ns, row_ns;
    uint32_t can;                       /* MODEL_CAN_* */
    char kernel[48];                    /* its backend's kernel_name */
    char isa[48];                       /* the CPU instruction path (backend.h's isa), "" where none */
    char split[384];                    /* the first instance's split over its cores (backend.h's split_text), "" where none */
    char selected_by[16];               /* "config" or "measurement" */
    uint32_t candidate_count;
    autoselect_candidate_t candidates[MODEL_CANDIDATES_MAX];   /* what "auto" measured, fastest first */
} model_desc_t;

/* How a front runs a request of a model itself (server.inline_us), decided once at the load
 * (model_load) from the model's capabilities and its placement. */
typedef enum {
    INLINE_NEVER = 0,
    INLINE_FRONT_CONTEXT,   /* on the front's own backend context, one a lane (a CPU model in the server) */
    INLINE_CLAIM_CONTEXT,   /* on an idle instance's own context, claimed from its worker (a GPU model in the
                               server: one resident kernel or graph set an instance) */
    INLINE_CLAIM_MAILBOX,   /* through an idle instance's mailbox in the shared region, claimed from its worker
                               (a persistent model in a device process: the front makes no CUDA call) */
} model_inline_t;

/* What a model is loaded with besides its configuration (model_load): the server's keys it reads, as
 * numbers a device process's load request carries too. */
typedef struct {
    bool busy_poll;                     /* server.busy_poll: idle workers spin rather than sleep */
    uint64_t spin_ns;                   /* server.spin_cap_ns: else the most an idle worker spins */
    uint32_t lanes;                     /* server.fronts: a lane (job pool, rings) for each */
    uint32_t inline_us;                 /* server.inline_us: 0, a front never runs a request itself */
    uint32_t max_message_bytes;         /* server.max_message_bytes: a request of max_rows rows must fit */
    stats_t *stats;                     /* NULL: not counted */
    devices_t *devices;                 /* the device processes (placement_devices), or NULL */
    uint64_t only;                      /* a device process: the instances placed on its device (bit i); 0: every one */
    uint32_t ring_jobs;                 /* a fallback (fallback.c): its rings hold the jobs of the model it stands in
                                           for, this many a lane (0: its own job_count) */
    const int *front_cpus;              /* server.cpus: the cores the fronts are pinned to (a split model's inline way) */
    size_t front_cpu_count;
} model_env_t;

typedef struct {
    const char *name;                   /* "threads", "device processes" */
    const char *suffix;                 /* after each instance in the load's log line: "", " (device process)" */
    bool loses_workers;                 /* its workers run in processes that may be lost and started again: a type
                                           with streams keeps their history where it outlives them (stream_history.h) */
    /* model_plan: "auto" measured for CFG where it would load it, nothing kept. 0, or -1 with ERR. */
    int (*plan) (devices_t *devices, const model_config_t *cfg, model_plan_t *plan, char *err, size_t errlen);
    /* model_prepare: backend.h's prepare of CFG (model_preparer has something to do) on every device
     * its instances use, each logged when not done. */
    void (*prepare) (devices_t *devices, const model_config_t *cfg);
    /* M's instances loaded (those of ENV->only) and M->desc, M->iface and each instance's device, CPUs
     * and green context filled; M->weights may stay loaded until model_load lets them go. */
    int (*load) (model_t *m, const model_env_t *env, char *err, size_t errlen);
    /* How a front runs a request of M itself when M may (MODEL_CAN_INLINE and server.inline_us). */
    model_inline_t (*inline_way) (const model_t *m, const model_env_t *env);
    /* Memory for M's job pools (model.c's s_jobs_init fills it), and its release. */
    void *(*alloc) (model_t *m, size_t bytes);
    void (*free) (model_t *m, void *block);
    /* Instance IN's state shared by its worker and the fronts (instance_shared_t: rings holding
     * every job of a lane, waker, counters), made where the worker can reach it; and let go. */
    int (*share) (model_t *m, instance_t *in, char *err, size_t errlen);
    void (*unshare) (model_t *m, instance_t *in);
    /* The workers started on the shared state: here, or in the device processes. */
    int (*start) (model_t *m, char *err, size_t errlen);
    /* Optional: before M's memory is let go, what runs outside this process stopped and what the load
     * made there let go. */
    void (*release) (model_t *m);
} placement_t;

/* In this process's threads (placement_threads.c). */
extern const placement_t placement_threads;
/* In device processes, the server's side (placement_devices.c). */
extern const placement_t placement_devices;

/* Where a model of CFG runs (placement.c): this process's threads without DEVICES; with them, a
 * device process for anything that may touch a GPU ("cuda", and "auto", which measures there) and,
 * in test builds that place them, CPU models. "auto" measured to the CPU runs here: model_new
 * measures it first (model_plan) and asks again with what it chose. */
const placement_t *placement_for (devices_t *devices, const model_config_t *cfg);

#endif
