/* The insides of a model, shared by the files of serving/ that make it (model.c, its placements:
 * placement*.c, device_main.c), run it (worker.c, group.c, model_time.c) and feed it (dispatch.c).
 * Nothing else includes this. */
#ifndef SIGSERVE_MODEL_IMPL_H
#define SIGSERVE_MODEL_IMPL_H

#include "serving/model.h"
#include "serving/placement.h"
#include "backends/persistent_box.h"
#include "base/ring.h"
#include "base/spin.h"
#include "serving/stream_history.h"
#include "serving/streams.h"
#include "base/threads.h"

#include <pthread.h>
#include <stdatomic.h>

/* What an instance's worker and the front share: the rings, the worker's waker, the counters and the
 * state. Its placement makes it (placement_t.share): in this process's threads it is the instance's
 * `own`; an instance run by a device process (serving/devices.h) has it in the shared region, at the
 * same address in both processes. */
/* Each front (server.fronts) has a lane to every instance: a ring pair and the rows its worker took
 * from it. A lane's rings hold every job of the front's pool. */
#define LANES_MAX CONFIG_MAX_FRONTS
typedef struct {
    ring_t requests;                    /* front -> worker: admitted jobs */
    _Atomic uint64_t rows_taken;        /* (worker) rows of the jobs popped: rows_admitted - this waits */
    ring_t done;                        /* worker -> front: finished jobs */
} lane_rings_t;

typedef struct {
    lane_rings_t lanes[LANES_MAX];      /* the model's lane_count of them are used */
    waker_t wake;                       /* the worker sleeps on it when idle */
    _Atomic bool stop;                  /* set once nothing more will be queued: exit when empty */
    _Atomic bool abort;                 /* answer queued jobs UNAVAILABLE without running them */
    _Atomic bool available;             /* false once the backend said it cannot run */
    _Atomic uint64_t served;            /* requests computed */
    _Atomic uint64_t warm_runs;         /* keep_warm runs */
    _Atomic uint64_t busy_since;        /* CLOCK_MONOTONIC ns a launch began, 0 between launches */
    _Atomic uint32_t claim;             /* INLINE_CLAIM_*: who runs on the instance's context (0 nobody, 1 its
                                           worker, 2 a front running a request inline) */
    /* A persistent MLP in a device process whose mailbox lies in the region: its protocol state, where
     * the device process's worker and a front that claimed the instance both publish requests
     * (worker.c: worker_run_inline_on); box_ready once the device process put it there (DEV_START). */
    persistent_box_t box;
    _Atomic bool box_ready;
    char state[128];                    /* "serving" or why not (written once, before available drops) */
    /* A type with streams in device processes: the last window of each stream's steps, in the region
     * (stream_history.h), which outlives the device process; NULL elsewhere. */
    stream_history_t *history;
} instance_shared_t;

typedef struct group_worker group_worker_t;

/* One front's side of a model (dispatch.c): its pool of jobs and what it collects. Only that front
 * touches it, except `front` and `lost_pending`. */
typedef struct {
    job_t *jobs;
    float *job_floats;                  /* every job's features and outputs, one block */
    job_t **free_jobs;
    uint32_t free_count;
    float *large_floats;                /* large_count buffers of max_rows rows, one block ... */
    uint32_t *large_free;               /* ... and the free ones */
    uint32_t large_free_count;
    uint32_t next_instance;             /* round-robin start among equally loaded instances */
    uint32_t next_done;                 /* round-robin start when collecting */
    waker_t *front;                     /* rung by workers after handing this lane's jobs back */
    backend_model_t *front_impl;        /* INLINE_FRONT_CONTEXT: the front's own context for requests run inline */
    uint64_t shed_logged_at;            /* the last shed log line, and sheds since */
    uint64_t shed_unlogged;
    _Atomic bool lost_pending;          /* an instance is lost: this front answers what it held */
} lane_t;

struct instance {
    model_t *model;
    uint32_t index;
    int device;                         /* CUDA device, -1 on the CPU */
    waker_t *wake;                      /* what the front rings after queuing: &sh->wake, or its group worker's */
    group_worker_t *group;              /* the group worker that serves it ("group"), or NULL: its own thread */
    size_t cpu_count;                   /* CPUs it is pinned to (0: not pinned) */
    int cpus[CONFIG_MAX_CPUS];          /* cpus[i % n] of the model, or the GPU's NUMA node */
    _Atomic uint32_t green_sms;         /* the SMs of its kernel's green context (backend.h); 0: none */
    backend_model_t *impl;              /* this instance's backend context, where its worker runs in this process */
    instance_shared_t *sh;              /* made by the placement (share): &own, or in the region */
    instance_shared_t own;              /* placement_threads' */
    _Atomic uint64_t rows_admitted[LANES_MAX];  /* front k: rows of the jobs it pushed onto its lane, ever */
    spin_t spin;                        /* the worker spins for as long as base/spin.h says, then sleeps */
    pthread_t thread;
    bool started;
    float *batch_in, *batch_out;        /* backend_rows rows: gathered inputs, outputs of a batch */
    float *warm_in;                     /* keep_warm: the last request's first row */
    bool have_warm;
    job_t **taken;                      /* the batch being computed: up to max_batch_rows jobs */
    streams_t *streams;                 /* types with streams: stream_id -> backend slot (else NULL) */
    int32_t *history_entry;             /* [slots]: each slot's stream's entry in sh->history (-1: none yet) */
    /* the server's, for an instance in a device process: 1 once the process is lost (each front then
     * answers what its lane held: dispatch_reclaim, a bit each in reclaimed), 2 when all have, 0 serving */
    _Atomic int lost;
    _Atomic uint32_t reclaimed;
    _Atomic uint64_t stall_noted;       /* the busy_since of the stalled launch last logged (dispatch.c) */
};

struct _model_t {
    model_config_t given;               /* as configured: what a reload compares */
    /* What it is as it loaded (placement.h): desc.cfg is the configuration as loaded (backend, kernel
     * and zero_copy resolved by auto), with its sizes, kernel, timings, candidates and capabilities. */
    model_desc_t desc;
    const placement_t *where;           /* where its instances run (placement.h) */
    devices_t *devices;                 /* placement_devices: the device processes (the server's, borrowed) */
    const backend_iface_t *iface;       /* desc.cfg's backend */
    weights_t *weights;                 /* while model_load makes it (the threads placement's), then NULL */
    uint32_t max_rows;                  /* rows one request may carry */
    uint32_t max_message_bytes;         /* server.max_message_bytes as loaded: max_rows rows fit it */
    uint32_t batch_rows;                /* rows one launch may carry (max_batch_rows) */
    /* A launch of r rows takes about (desc.launch_ns + r x desc.row_ns) x drift / 1024: drift is the
     * workers' running ratio of measured to predicted (1024 = as timed at load, model_time.c). */
    _Atomic uint32_t *drift;            /* &own_drift, or in the region shared with a device process */
    _Atomic uint32_t own_drift;
    uint64_t max_queue_ns;              /* cfg.max_queue_us */
    /* Run to completion on the front (server.inline_us): a request whose launch is predicted under
     * inline_ns, when nothing of the model waits, runs on the front, as inline_way says. */
    model_inline_t inline_way;
    uint64_t inline_ns;                 /* 0 with INLINE_NEVER */
    bool busy_poll;                     /* workers spin instead of sleeping when idle */
    uint64_t spin_ns;                   /* without busy_poll: the most an idle worker spins (0: never) */
    stats_t *stats;
    int stats_slot;
    /* the kernel's name: kernel_names[kernel_at]; a device process's rejoin may load another (a
     * specialised kernel where the generic one ran) and writes the other name, then flips kernel_at
     * (readers on any thread: model_kernel_name) */
    char kernel_names[2][48];
    _Atomic uint32_t kernel_at;
    uint32_t instance_count;
    instance_t *instances;
    /* the fronts' (dispatch.c): a lane each, with a pool of job_count jobs */
    uint32_t lane_count;                /* server.fronts when loaded */
    lane_t lanes[LANES_MAX];
    uint32_t job_count;                 /* jobs of each lane */
    uint32_t ring_jobs;                 /* model_env_t.ring_jobs: what its placement_threads rings hold at least */
    uint32_t buffer_rows;               /* rows of each job's own buffer */
    uint32_t large_count;               /* each lane's buffers of max_rows rows for larger requests */
    char abort_reason[64];
    /* Its CPU fallback (fallback.c), a hidden model in this process's threads that takes its requests
     * while none of its instances is available, or NULL; and whether it serves on it now (logged once
     * each way: model_fallback_note). */
    model_t *fallback;
    _Atomic bool degraded;
    /* With a fallback: a launch running longer than this (CLOCK_MONOTONIC ns; model_fallback_load) takes
     * its instance out of admission for stateless requests until it ends or the instance is lost: a
     * trap the driver has not reported yet, or a hang the watchdog has not killed, sends the next
     * requests to the fallback instead of queueing them behind it. */
    uint64_t stall_ns;
    /* With a fallback, in device processes whose standby is ready: a launch running longer than this
     * ends its process (placement_devices.c: s_hung), the standby taking over at once; 0 without. */
    uint64_t stall_switch_ns;
};

/* Whether fronts run requests inline on an instance of M claimed from its worker (instance_shared_t.claim). */
static inline bool model_inline_claims (const model_t *m)
{
    return m->inline_way == INLINE_CLAIM_CONTEXT || m->inline_way == INLINE_CLAIM_MAILBOX;
}

/* Jobs queued on IN over every lane (exact only when no front pushes meanwhile). */
static inline size_t instance_queued (const instance_t *in)
{
    size_t n = 0;
    for (uint32_t k = 0; k < in->model->lane_count; k++)
        n += ring_count (&in->sh->lanes[k].requests);
    return n;
}

/* A worker of a group of models (group.c): serves instance `index` of every member model, in
 * order of arrival (worker.c: worker_group_main). */
#define GROUP_MEMBERS_MAX 256
struct group_worker {
    char name[CONFIG_NAME_MAX];
    uint32_t index;
    pthread_t thread;
    waker_t wake;
    spin_t spin;
    bool busy_poll;
    pthread_mutex_t lock;               /* the member list; the worker copies it when version moves */
    instance_t *members[GROUP_MEMBERS_MAX];
    size_t member_count;
    _Atomic uint64_t version, version_seen;
    _Atomic bool stop;
};
void *worker_group_main (void *worker);
/* group.c: IN (of a model whose cfg.group is set) served by its group's worker IN->index, started
 * when it is the first; 0, or -1 with ERR. */
int group_join (instance_t *in, char *err, size_t errlen);
/* After IN's model stopped taking requests: once the worker has served what IN holds, IN leaves; the
 * last member stops the worker. */
void group_leave (instance_t *in);

/* model.c: the one constructor. A model of CFG (PLAN, may be NULL, resolved it ahead) loaded where
 * WHERE puts it (placement.h: its instances' backend contexts, M->desc filled), how fronts run it
 * inline decided, not yet serving. NULL with ERR naming the model. */
model_t *model_load (const model_config_t *cfg, const model_plan_t *plan, const placement_t *where,
                     const model_env_t *env, char *err, size_t errlen);
/* model.c: the fronts' side of M made (queue depth, job pools, each instance's shared state) and its
 * workers started where it was placed: it serves. 0, or -1 with ERR (then model_destroy it). */
int model_serve (model_t *m, char *err, size_t errlen);
/* model.c: instance I of M as its placement is about to load it: model, index, device (of desc.cfg's
 * devices when M->iface runs on a GPU, else -1), idle spin. */
void model_instance_init (model_t *m, uint32_t i);
/* model.c: the shared state's fields as a worker starts with them (available, "serving", counters at 0). */
void model_shared_init (instance_shared_t *sh);
/* model.c: what IN's worker computes with (batch buffers, the last input for keep_warm, a stream's
 * slots), where the worker runs. 0, or -1 with ERR. */
int model_instance_buffers (model_t *m, instance_t *in, char *err, size_t errlen);
/* model.c: IN's own worker thread started. 0, or -1 with ERR. */
int model_start_worker (model_t *m, instance_t *in, char *err, size_t errlen);
/* model.c: M->desc's sizes from its weights W (input, output, a recurrent model's window and step). */
void model_take_sizes (model_t *m, const weights_t *w);
/* model.c: 0 when a request of max_rows rows fits MAX_MESSAGE_BYTES; else -1 with ERR saying what to change. */
int model_check_message_size (const model_t *m, uint32_t max_message_bytes, char *err, size_t errlen);
/* model.c: what PLAN (not NULL) measured as what chose M's backend, into M->desc. */
void model_take_plan (model_t *m, const model_plan_t *plan);

/* placement_threads.c, for the device process and the other placement: CFG's backend when its
 * prepare (backend.h) has something to do for CFG, else NULL (touches no GPU); and that prepare on
 * DEVICE in this process, its weights read when there is something to do: 1 done, 0 nothing to do,
 * -1 WHY. */
const backend_iface_t *model_preparer (const model_config_t *cfg);
int model_prepare_here (const model_config_t *cfg, int device, char *why, size_t whylen);

/* fallback.c: M's CPU fallback (M->fallback) loaded, warmed and serving where M's configuration and
 * what it loaded as say it gets one (config/README.md: "fallback"), with ENV as M was loaded; 0, or -1
 * with ERR. Nothing where it gets none (a line logged where it asked for one and cannot have it).
 * model_destroy stops and frees it first (its workers hold M's jobs). */
int model_fallback_load (model_t *m, const model_env_t *env, char *err, size_t errlen);
/* fallback.c: M serves on its fallback (ON) or on its own instances again: logged once each way. */
void model_fallback_note (model_t *m, bool on);

/* worker.c */
void *worker_main (void *instance);

/* worker.c: runs J (admitted, not queued) on IMPL, its front's own context, as a worker would. */
void worker_run_inline (model_t *m, backend_model_t *impl, job_t *j);
/* worker.c (INLINE_CLAIM_*): runs J on IN's own context, or through its mailbox, when its worker is not
 * using it (claimed for the run); false, with J untouched, when it is. */
bool worker_run_inline_on (instance_t *in, job_t *j);

/* model_time.c: times a launch of 1 and of up to max_batch_rows rows on the first instance loaded in
 * this process (desc.launch_ns, desc.row_ns); 0, or -1 with ERR when the backend fails. */
int model_time (model_t *m, char *err, size_t errlen);
/* Rows admitted to IN and not yet taken by its worker, over every lane (exact with one front). */
uint64_t model_queued_rows (const instance_t *in);
/* The expected time (ns) before QUEUED rows on one instance start, from the launch cost model. */
uint64_t model_expected_wait (const model_t *m, uint64_t queued);
/* The predicted time (ns) of one launch of ROWS rows. */
uint64_t model_launch_ns (const model_t *m, uint32_t rows);
/* A worker's launch of ROWS rows took NS: the drift follows it. */
void model_observe_launch (model_t *m, uint32_t rows, uint64_t ns);

#endif
