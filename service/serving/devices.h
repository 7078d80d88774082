/* The device processes: GPU work runs in one process per CUDA device, behind the server's front,
 * because CUDA gives no way to confine a trap (cudaErrorLaunchFailure) to one device of a process
 * or to recover from one in place: a lost device then takes its own process only, and is brought
 * back by starting that process again.
 *
 * A device process is this binary again (posix_spawn of /proc/self/exe, never a fork of a process
 * that may have touched CUDA) with --device-process. It maps the server's shared region at the same
 * address (base/shm.h), so the rings, jobs and buffers the front and the workers share are plain
 * pointers on both sides; it loads the model instances placed on its device and runs their workers
 * (serving/worker.c, unchanged) on those rings. The server keeps every job: when a device process
 * exits, traps or hangs past a model's watchdog_ms, its instances are marked unavailable, the front
 * answers each job they held UNAVAILABLE exactly once (dispatch_reclaim), and the process is
 * started again (bounded attempts with backoff) and its models loaded, warmed and rejoined; or, with
 * a warm spare (server.standby: a second process per device with the models loaded and nothing
 * started), the spare is promoted and only started, and a new spare prepared in the background.
 *
 * The server's process makes no CUDA call while device processes are on: the CPU models stay in
 * it; everything that may touch a GPU ("cuda", and "auto", which measures there) is loaded by the
 * device process of the model's first device. */
#ifndef SIGSERVE_DEVICES_H
#define SIGSERVE_DEVICES_H

#include "base/shm.h"
#include "backends/backend.h"
#include "base/threads.h"
#include "serving/devproto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _devices_t devices_t;

/* Something a device process serves (a model), told when the process is lost and asked to load
 * again when it is back. Called on the supervisor thread, one device at a time. */
typedef struct {
    void *arg;
    /* Mark what runs on DEVICE unavailable (WHY) and ask the front to answer what it held. */
    void (*lost) (void *arg, int device, const char *why);
    /* Whether the front has answered everything DEVICE held. */
    bool (*swept) (void *arg, int device);
    /* Optional: before any tenant rejoins DEVICE's new process, what its load needs done while no
     * persistent kernel is resident there (model_prepare). */
    void (*prepare) (void *arg, int device);
    /* Load and start again on DEVICE's new process (devices_call); 0, or -1 with ERR. LOADED: the
     * process is a promoted spare that loaded it already (stage), this its reply: start only. */
    int (*rejoin) (void *arg, int device, const dev_reply_t *loaded, char *err, size_t errlen);
    /* Optional (server.standby): fills RQ with the call that prepares DEVICE's spare process for it:
     * DEV_LOAD (its instances there loaded and warmed, nothing started), or, where it must not be
     * loaded there (a resident kernel: the spare holds none; it loads when the spare is promoted),
     * DEV_PREPARE (what its load needs done while no kernel is resident, done ahead); false: nothing. */
    bool (*stage) (void *arg, int device, dev_request_t *rq);
    /* Whether a launch on DEVICE has run too long at NOW (the process is then killed), the cause into
     * WHY: past its watchdog, or, with the device's standby ready (STANDBY), past its stall switch. */
    bool (*hung) (void *arg, int device, uint64_t now, bool standby, char *why, size_t len);
} dev_tenant_t;

#define DEVICES_MAX 16
#define DEVICE_CPU_TEST (-2)    /* test builds: a device process for CPU models (no GPU needed) */
#define DEVICE_CPU_TEST_OTHER (-3)  /* test builds: a second one, for a CPU model's odd devices ("cpu1") */

/* Starts the supervisor; device processes start on first use. EXE: the binary to start;
 * LOG_LEVEL/LOG_FORMAT: passed on. NULL with ERR. The caller owns them and passes them to whatever
 * places models or reads them (model_new, server_new, the metrics): there is no global. */
devices_t *devices_new (const char *exe, const char *log_level, const char *log_format, char *err, size_t errlen);
/* Stops every device process (their models must have been unloaded) and the supervisor. */
void devices_destroy (devices_t **self_p);

/* server.standby: a warm spare process per device, its tenants loaded (stage) but nothing started,
 * prepared in the background once on (main.c turns it on when the server is ready); a loss promotes
 * it (its tenants rejoin without a load) and a new one is prepared. Off until set. */
void devices_set_standby (devices_t *self, bool on);

/* Test builds: CPU models too go to a device process (DEVICE_CPU_TEST). */
void devices_place_cpu_models (devices_t *self, bool on);
bool devices_cpu_models_placed (const devices_t *self);

/* The shared region's blocks (base/shm.h). */
void *devices_alloc (devices_t *self, size_t bytes);
void devices_free (devices_t *self, void *block);
/* The waker front FRONT (< CONFIG_MAX_FRONTS) sleeps on: in the region, its eventfd inherited by every
 * device process. */
waker_t *devices_front_waker (devices_t *self, uint32_t front);

/* One control call to DEVICE's process, started if it is not running. 0, or -1 with ERR (the
 * process could not start, died during the call, or answered an error: RP->error). Serialised:
 * one call at a time over every device. */
int devices_call (devices_t *self, int device, const dev_request_t *rq, dev_reply_t *rp, char *err, size_t errlen);

void devices_add_tenant (devices_t *self, int device, const dev_tenant_t *tenant);
void devices_remove_tenant (devices_t *self, int device, void *arg);

/* Counters for the metrics: restarts of DEVICE's process (attempts that brought it back), losses,
 * and whether it is serving now (false while lost or given up). */
typedef struct {
    int device;
    bool running;
    uint64_t losses, restarts, failed_restarts;
    double last_recovery_ms;            /* lost -> every model rejoined, the last time */
    uint64_t promotions;                /* of the restarts: a spare promoted (server.standby) */
    uint64_t spares_started;            /* spare processes started, the first included */
    bool standby_ready;                 /* a spare holds every model it may (none is being loaded) */
} devices_info_t;
size_t devices_list (devices_t *self, devices_info_t *out, size_t cap);

/* Test builds: FAULT (dev_fault_t) in DEVICE's process: trap its context, exit, or hang a launch.
 * 0, or -1 with ERR. */
int devices_inject (devices_t *self, int device, uint32_t fault, char *err, size_t errlen);

/* The device process's side: its main (argv as given to the binary). Returns its exit status. */
int devices_process_main (int argc, char **argv);

/* Test builds (sigserve-test) set it in both processes: what a DEV_FAULT does in the device process
 * (MLP: an instance of a CUDA MLP there, or NULL). Release builds leave it unset: DEV_FAULT is
 * refused. 0, or -1 with ERR. */
typedef int (*devices_fault_fn) (int device, uint32_t fault, backend_model_t *mlp, char *err, size_t errlen);
void devices_set_fault_handler (devices_fault_fn fn);

#endif
