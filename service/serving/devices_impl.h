/* The insides of the device processes' server side, shared by devices.c (the control calls, the
 * supervisor), standby.c (the warm spare: prepared in the background, promoted on a loss) and
 * devices_proc.c (a process started, called, ended: what both use). Private to those three files;
 * calls go devices.c -> standby.c -> devices_proc.c, never back. */
#ifndef SIGSERVE_DEVICES_IMPL_H
#define SIGSERVE_DEVICES_IMPL_H

#include "serving/devices.h"
#include "serving/devices_life.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define REGION_BYTES (64ull << 30)      /* reserved; used as blocks are written */
#define TENANTS_MAX 256
#define RESTART_ATTEMPTS 5
#define RESTART_FIRST_DELAY_MS 100
#define SWEEP_WAIT_NS 2000000000ull     /* the front answers what a lost process held within this */
#define SUPERVISE_MS 5           /* its watch of the launches (a stall switch at 20 ms must not wait 20 more) */
#define LET_GO_WAIT_NS 500000000ull    /* a lost process's threads stop within this, else it is reaped first */
/* Each GPU's process takes the mailboxes of its persistent kernels from its own part of the region
 * (a front writes requests into them too): reserved like the rest, used as mailboxes are made. */
#define ARENA_BYTES (256ull << 20)
#define ARENA_ALIGN 4096u
#define SPARE_RETRY_NS 5000000000ull   /* after a spare could not be started or load a model: doubled each */
#define SPARE_RETRY_MAX_NS 300000000000ull  /* time again (a model that fits the device once, not twice), to this */

/* A device's spare process (server.standby): loaded as far as it may be, nothing started. */
typedef enum { SPARE_NONE = 0, SPARE_LOADING, SPARE_READY } spare_state_t;

typedef struct {
    void *arg;                          /* the tenant */
    dev_reply_t *rp;                    /* its load's reply there (DEV_LOAD), or NULL: not loaded there */
    bool prepared;                      /* its DEV_PREPARE done there instead (a resident kernel's model) */
} staged_t;

typedef struct {
    spare_state_t state;
    pid_t pid;
    int fd;
    void *arena;                        /* its own share of the region; the device's once promoted */
    life_t *life;                       /* its life watched (devices_life.h); the device's once promoted */
    bool stale;                         /* a tenant it holds went away: it is made anew */
    uint64_t started_ns, retry_ns;
    uint64_t backoff_ns;                /* the next wait after a failure (0: SPARE_RETRY_NS); reset when ready */
    staged_t staged[TENANTS_MAX];       /* the tenants of the device it has been asked about, in order */
    size_t staged_count, loaded_count;
} spare_t;

typedef struct {
    int device;                         /* CUDA device, or DEVICE_CPU_TEST */
    bool used;
    pid_t pid;                          /* 0: not running */
    int fd;                             /* the control socket, -1 when not running */
    bool gave_up;
    void *arena;                        /* its share of the region (ARENA_BYTES), for good */
    life_t *life;                       /* its life watched (devices_life.h), in the region */
    /* a lost process let go of before it was reaped (its threads stopped: devices_life.h's fence; its
     * GPU context perhaps still being torn down): reaped by the supervisor when it ends, and until
     * then no process gets the share of the region it had (the next spare's) */
    pid_t departing;
    uint64_t departing_since;           /* when its loss was seen */
    uint64_t losses, restarts, failed_restarts;
    double last_recovery_ms;
    spare_t spare;
    uint64_t promotions, spares_started;
} proc_t;

typedef struct {
    int device;
    dev_tenant_t t;
} tenant_t;

struct _devices_t {
    shm_t *shm;
    waker_t *fronts;                    /* CONFIG_MAX_FRONTS of them, in the region */
    char exe[256], log_level[16], log_format[16];
    pthread_mutex_t lock;               /* calls, process starts and the tenant list */
    proc_t procs[DEVICES_MAX];
    tenant_t tenants[TENANTS_MAX];
    size_t tenant_count;
    bool cpu_models;
    _Atomic bool standby;               /* server.standby (set after the supervisor started) */
    pthread_t supervisor;
    int wake_fd;                        /* eventfd: a watcher saw a device process die (devices_life.h) */
    _Atomic bool stopping;
};

/* devices_proc.c. DEVICE's name for the log ("0", "cpu (test)") into BUF. */
const char *devices_name (int device, char *buf, size_t len);
/* Starts a process for DEVICE (lock held): its pid and control socket into *PID_P and *FD_P, its share
 * of the region *ARENA_P and its watched life *LIFE_P (each made on first use, kept across restarts:
 * the new process starts them afresh).
 * WHAT: "" or "standby ", for the log. 0, or -1 with ERR. */
int devices_spawn (devices_t *self, int device_id, void **arena_p, life_t **life_p, pid_t *pid_p, int *fd_p,
                   const char *what, char *err, size_t errlen);
/* Ends the process *PID (its control socket *FD; LIFE: its watch, ended once it is): closing the
 * socket makes it unload and exit; KILL: at once. */
void devices_reap (pid_t *pid, int *fd, life_t *life, bool kill_it);
/* P's departing process reaped, if any: at once when WAIT, else only if it ended already. */
void devices_reap_departing (proc_t *p, bool wait);
/* Ends P's process (lock held). */
void devices_reap_proc (proc_t *p, bool kill_it);
/* One request and its reply on the control socket FD of DEVICE's process: 0, or -1 with ERR (-2: the
 * request was sent and the process exited before its reply). */
int devices_exchange (int fd, int device, const dev_request_t *rq, dev_reply_t *rp, char *err, size_t errlen);

/* standby.c (lock held, supervisor thread). One step of the spares' preparation; true while one
 * remains (the supervisor then does not sleep). */
bool standby_step (devices_t *self);
/* P's spare made P's process after P's loss (seen at T0), P's old process let go of: true when every
 * tenant rejoined there; else P is to be started again as without a spare. */
bool standby_promote (devices_t *self, proc_t *p, uint64_t t0);
/* Ends P's spare, if any (KILL: at once), and forgets what it held. */
void standby_end (proc_t *p, bool kill_it);
/* After SP failed at NOW: when it is tried again (the wait doubles each time). The wait. */
uint64_t standby_backoff (spare_t *sp, uint64_t now);
/* Tenant ARG left P's device: a spare that loaded it is made anew, one that only prepared forgets it. */
void standby_forget (proc_t *p, void *arg);

#endif
