/* The control messages between the server and a device process (serving/devices.h), one datagram
 * each way per call on a SOCK_SEQPACKET pair. Both ends are the same binary (the device process is
 * /proc/self/exe), so the messages are plain structs. Addresses are in the shared region
 * (base/shm.h), valid in both processes. Private to serving/. */
#ifndef SIGSERVE_DEVPROTO_H
#define SIGSERVE_DEVPROTO_H

#include "backends/autoselect.h"
#include "base/config.h"
#include "serving/placement.h"

#include <stdint.h>

typedef enum {
    DEV_LOAD = 1,       /* load the model's instances that run here, time them; resolve "auto" (a warm
                           spare, server.standby, is sent only these until it is promoted) */
    DEV_START,          /* start their workers on the shared rings (a promoted spare: all it is sent) */
    DEV_UNLOAD,         /* stop their workers (after what is queued) and free them */
    DEV_FAULT,          /* test builds only: trap this device's context, or exit */
    DEV_PREPARE,        /* the backend's prepare for the model here (model_prepare_here), before loads */
} dev_op_t;

typedef enum { DEV_FAULT_TRAP = 1, DEV_FAULT_EXIT, DEV_FAULT_HANG } dev_fault_t;

typedef struct {
    uint32_t op;
    uint64_t token;                     /* the server's name for the model in later messages */
    model_config_t cfg;                 /* DEV_LOAD: as configured, or resolved by an earlier load */
    bool busy_poll;                     /* DEV_LOAD: the server's keys the load reads (model_env_t) */
    uint64_t spin_ns;
    uint32_t max_message_bytes;
    uint64_t here;                      /* bit i: instance i runs on this device */
    uint32_t job_count;                 /* DEV_START: the model's jobs (rings hold that many) */
    uintptr_t shared[CONFIG_MAX_INSTANCES];     /* DEV_START: each instance's instance_shared_t */
    uintptr_t drift;                    /* DEV_START: the model's drift word */
    uint32_t lane_count;                /* DEV_START: the fronts (a lane each: instance_shared_t) */
    uintptr_t front[CONFIG_MAX_FRONTS]; /* DEV_START: the waker the workers ring for each lane (its front's) */
    uint32_t inline_way;                /* DEV_START: model_inline_t, as the server decided it (INLINE_CLAIM_MAILBOX:
                                           fronts publish into the instances' mailboxes, so workers claim them) */
    uint32_t fault;                     /* DEV_FAULT: dev_fault_t */
    bool resolve_only;                  /* DEV_LOAD: "auto" measured and resolved, nothing kept (model_plan) */
    bool park;                          /* DEV_LOAD to a warm spare: each instance's resident kernel stopped once loaded
                                           (backend.h: park), launched again at its DEV_START */
} dev_request_t;

typedef struct {
    int32_t status;                     /* 0, or -1 with error */
    char error[512];
    /* DEV_LOAD: the model as it loaded here (placement.h), which the server takes as it is; with
     * resolve_only, its cfg as "auto" resolved it and the candidates measured */
    model_desc_t desc;
    int cpus[CONFIG_MAX_INSTANCES];     /* each instance here: the first CPU it is pinned to (-1: none) */
    uint32_t green_sms[CONFIG_MAX_INSTANCES];   /* each instance here: its green context's SMs (0: none) */
    int32_t prepared;                   /* DEV_PREPARE: 1 done, 0 nothing to do, -1 not done (why in error;
                                           status stays 0: the load goes on without) */
} dev_reply_t;

#endif
