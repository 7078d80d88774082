/* The insides of a model, shared by model.c (lifecycle), worker.c (the worker threads) and
 * dispatch.c (the front's side). Nothing else includes this. */
#ifndef SIGSERVE_MODEL_IMPL_H
#define SIGSERVE_MODEL_IMPL_H

#include "serving/model.h"
#include "backends/persistent_box.h"
#include "base/ring.h"
#include "base/spin.h"
#include "serving/streams.h"
#include "base/threads.h"

#include <pthread.h>
#include <stdatomic.h>

/* What an instance's worker and the front share: the rings, the worker's waker, the counters and the
 * state. In the server's own process it is the instance's `own`; an instance run by a device process
 * (serving/devices.h) has it in the shared region, at the same address in both processes. */
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
    _Atomic uint32_t claim;             /* inline_shared: who runs on the instance's context (0 nobody, 1 its
                                           worker, 2 a front running a request inline) */
    /* A persistent MLP in a device process whose mailbox lies in the region: its protocol state, where
     * the device process's worker and a front that claimed the instance both publish requests
     * (worker.c: worker_run_inline_on); box_ready once the device process put it there (DEV_START). */
    persistent_box_t box;
    _Atomic bool box_ready;
    char state[128];                    /* "serving" or why not (written once, before available drops) */
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
    backend_model_t *front_impl;        /* the front's own context for requests run inline (or NULL) */
    uint64_t shed_logged_at;            /* the last shed log line, and sheds since */
    uint64_t shed_unlogged;
    _Atomic bool lost_pending;          /* an instance is lost: this front answers what it held */
} lane_t;

typedef struct {
    model_t *model;
    uint32_t index;
    int device;                         /* CUDA device, -1 on the CPU */
    bool here;
    waker_t *wake;                      /* what the front rings after queuing: &sh->wake, or its group worker's */
    group_worker_t *group;              /* the group worker that serves it ("group"), or NULL: its own thread */                          /* its worker runs in this process (a device process runs some) */
    size_t cpu_count;                   /* CPUs it is pinned to (0: not pinned) */
    int cpus[CONFIG_MAX_CPUS];          /* cpus[i % n] of the model, or the GPU's NUMA node */
    _Atomic uint32_t green_sms;         /* the SMs of its kernel's green context (backend.h); 0: none */
    backend_model_t *impl;              /* this instance's backend context */
    instance_shared_t *sh;              /* &own, or in the region shared with a device process */
    instance_shared_t own;
    _Atomic uint64_t rows_admitted[LANES_MAX];  /* front k: rows of the jobs it pushed onto its lane, ever */
    spin_t spin;                        /* the worker spins for as long as base/spin.h says, then sleeps */
    pthread_t thread;
    bool started;
    float *batch_in, *batch_out;        /* backend_rows rows: gathered inputs, outputs of a batch */
    float *warm_in;                     /* keep_warm: the last request's first row */
    bool have_warm;
    job_t **taken;                      /* the batch being computed: up to max_batch_rows jobs */
    streams_t *streams;                 /* types with streams: stream_id -> backend slot (else NULL) */
    /* the server's, for an instance in a device process: 1 once the process is lost (each front then
     * answers what its lane held: dispatch_reclaim, a bit each in reclaimed), 2 when all have, 0 serving */
    _Atomic int lost;
    _Atomic uint32_t reclaimed;
} instance_t;

struct _model_t {
    model_config_t given;               /* as configured: what a reload compares */
    model_config_t cfg;                 /* as loaded: backend, kernel and zero_copy resolved by auto */
    const backend_iface_t *iface;
    uint32_t input_size, output_size;   /* recurrent: input_size is a whole window (window x step_size) */
    uint32_t window, step_size;         /* recurrent (MODEL_CAP_WINDOW); 0 for an mlp */
    uint32_t max_rows;                  /* rows one request may carry */
    uint32_t batch_rows;                /* rows one launch may carry (max_batch_rows) */
    /* A launch of r rows takes about (launch_ns + r x row_ns) x drift / 1024: the first two timed at
     * load (model_time.c), drift the workers' running ratio of measured to predicted (1024 = as timed). */
    uint64_t launch_ns, row_ns;
    _Atomic uint32_t *drift;            /* &own_drift, or in the region shared with a device process */
    _Atomic uint32_t own_drift;
    uint64_t max_queue_ns;              /* cfg.max_queue_us */
    /* Run to completion on the front (server.inline_us): a request whose launch is predicted under
     * inline_ns, when nothing of the model waits, runs on its lane's front_impl, the front's own context. */
    uint64_t inline_ns;                 /* 0: never (a type without MODEL_CAP_INLINE, keep_warm_us, in a device
                                           process, or inline_us 0) */
    /* A GPU model in this process: no context of the front's own (one resident kernel or graph set per
     * instance), so the front runs an inline request on an idle instance's context, claimed from its
     * worker (instance_shared_t.claim). A persistent MLP in a device process: the same, through the
     * instance's mailbox in the region (instance_shared_t.box). */
    bool inline_shared;
    bool busy_poll;                     /* workers spin instead of sleeping when idle */
    uint64_t spin_ns;                   /* without busy_poll: the most an idle worker spins (0: never) */
    stats_t *stats;
    int stats_slot;
    /* the kernel's name: kernel_names[kernel_at]; a device process's rejoin may load another (a
     * specialised kernel where the generic one ran) and writes the other name, then flips kernel_at
     * (readers on any thread: model_kernel_name) */
    char kernel_names[2][48];
    _Atomic uint32_t kernel_at;
    char selected_by[16];               /* "config" or "measurement" */
    char isa[48];                       /* the CPU instruction path (backend.h's isa), "" where none */
    char split[384];                    /* instance 0's split over its cores (backend.h's split_text), "" where none */
    size_t candidate_count;
    autoselect_candidate_t candidates[MODEL_CANDIDATES_MAX];   /* what "auto" measured, fastest first */
    uint32_t instance_count;
    instance_t *instances;
    /* the fronts' (dispatch.c): a lane each, with a pool of job_count jobs */
    uint32_t lane_count;                /* server.fronts when loaded */
    lane_t lanes[LANES_MAX];
    uint32_t job_count;                 /* jobs of each lane */
    uint32_t buffer_rows;               /* rows of each job's own buffer */
    uint32_t large_count;               /* each lane's buffers of max_rows rows for larger requests */
    char abort_reason[64];
    /* Device processes (serving/devices.h): on the server, REMOTE when the instances run in them
     * (jobs, rings and drift in the shared region); in a device process, DEVICE_SIDE. */
    bool remote, device_side;
};

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

/* model.c, for model_remote.c */
const backend_iface_t *model_choose_backend (model_t *m, model_config_t *cfg, const weights_t *w, char *err,
                                             size_t errlen);
int model_instance_load (model_t *m, instance_t *in, uint32_t index, const weights_t *w, char *err, size_t errlen);
int model_instance_queues (model_t *m, instance_t *in, char *err, size_t errlen);
uint32_t model_queue_depth_default (const model_t *m);
double model_buffer_mib (const model_t *m);
/* M's sizes from its weights W (input, output, a recurrent model's window and step) and its row limits from its cfg. */
void model_take_sizes (model_t *m, const weights_t *w);
/* Its row limits from its cfg (max_rows, max_batch_rows, buffer_rows). */
void model_take_limits (model_t *m);
/* 0 when a request of max_rows rows fits MAX_MESSAGE_BYTES; else -1 with ERR saying what to change. */
int model_check_message_size (const model_t *m, uint32_t max_message_bytes, char *err, size_t errlen);
/* model_jobs_init's allocator in the server's process: zeroed, resident as it is first written
 * (floats_mapped); freed with floats_unmap. */
void *model_heap_alloc (void *arg, size_t bytes);
/* The jobs whose buffers model_jobs_init writes (resident from the load): what one intake turn takes. */
uint32_t model_warm_jobs (const model_t *m);
/* A pool of job_count jobs for each lane (with ALLOC: the server's heap, or the shared region). */
int model_jobs_init (model_t *m, void *(*alloc) (void *arg, size_t bytes), void *arg, char *err, size_t errlen);
/* The lanes a model gets: server.fronts (0 read as 1). */
uint32_t model_lanes (const server_config_t *server);
int model_start_workers (model_t *m, char *err, size_t errlen);
void model_log_loaded (const model_t *m, bool derived);
/* model_new in this process; PLAN (NULL: none) resolved CFG ahead (model_new_planned). */
model_t *model_local_new (const model_config_t *cfg, const model_plan_t *plan, const server_config_t *server,
                          stats_t *stats, char *err, size_t errlen);
/* M was loaded from PLAN (not NULL): PLAN's configuration as given, its measurement as what chose. */
void model_take_plan (model_t *m, const model_plan_t *plan);
/* model_plan in this process: "auto" measured on CFG's first device; nothing kept. */
int model_local_plan (const model_config_t *cfg, model_plan_t *plan, char *err, size_t errlen);
/* Stops the workers of this process and frees what this process holds (model_destroy: also what
 * device processes hold, first). */
void model_local_destroy (model_t **self_p);

/* model_remote.c: the server's side of a model whose instances run in device processes */
bool model_remote_wanted (const model_config_t *cfg);
model_t *model_remote_new (const model_config_t *cfg, const model_plan_t *plan, const server_config_t *server,
                           stats_t *stats, char *err, size_t errlen);
/* model_plan in the device process of CFG's first instance. */
int model_remote_plan (const model_config_t *cfg, model_plan_t *plan, char *err, size_t errlen);
void model_remote_release (model_t *m);
/* model_remote.c: model_prepare in the device processes CFG's instances use (GPU: its backend runs on a GPU). */
void model_remote_prepare (const model_config_t *cfg, bool gpu);
/* model.c: CFG's backend when its prepare (backend.h) has something to do for CFG, else NULL. Touches
 * no GPU. */
const backend_iface_t *model_preparer (const model_config_t *cfg);
/* model.c: backend.h's prepare of CFG on DEVICE, here (a device process, or the server when the model
 * runs in it), its weights read when there is something to do: 1 done, 0 nothing to do, -1 WHY. */
int model_prepare_here (const model_config_t *cfg, int device, char *why, size_t whylen);

/* worker.c */
void *worker_main (void *instance);

/* worker.c: runs J (admitted, not queued) on IMPL, its front's own context, as a worker would. */
void worker_run_inline (model_t *m, backend_model_t *impl, job_t *j);
/* worker.c (inline_shared): runs J on IN's own context when its worker is not using it (claimed for the
 * run); false, with J untouched, when it is. */
bool worker_run_inline_on (instance_t *in, job_t *j);

/* model_time.c: times a launch of 1 and of up to max_batch_rows rows on instance 0 (launch_ns,
 * row_ns); 0, or -1 with ERR when the backend fails. */
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
