/* A device process's life as the server watches it (devices_life.c), in the region both map:
 *
 * - ALIVE, a robust process-shared mutex its main thread takes at its start and never gives back.
 *   The kernel marks a dead owner's robust mutexes the moment the owner thread lets go of its memory
 *   (exit_mm), the first thing a dying thread does: a server thread blocked on it wakes then, long
 *   before the process's files close (the control socket, the GPU's files: a CUDA context's
 *   tear-down takes tens of ms) and before its exit status can be collected.
 * - What the process said of its end just before it (a lost GPU context: status 70 and the error).
 * - The fence: whether no thread of the process can run its own code any more (each one's memory
 *   let go, or blocked in the kernel with SIGKILL pending), so that what it shares with the server (rings, jobs, instance words) is the server's
 *   alone from then on, although its GPU context may not be torn down yet. Its GPU's kernels write
 *   only into its own share of the region (persistent kernels' mailboxes, devices_impl.h: arena),
 *   which no other process gets before it was reaped.
 *
 * The server side: life_arm before the process starts, life_watch once its pid is known (a thread
 * that waits on ALIVE and then writes to WAKE_FD), life_disarm once it was reaped. */
#ifndef SIGSERVE_DEVICES_LIFE_H
#define SIGSERVE_DEVICES_LIFE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pthread_mutex_t alive;              /* robust, process-shared: held by the process's main thread */
    _Atomic int32_t holder;             /* its pid, once it holds ALIVE */
    _Atomic int32_t said;               /* the exit status it is about to end with, 0: nothing said */
    char why[200];                      /* and why, before SAID is set */
    /* the server's */
    _Atomic int32_t died;               /* the pid whose death the watcher saw (0: none yet) */
    _Atomic uint64_t died_ns;           /* when (CLOCK_MONOTONIC) */
    _Atomic bool cancel;                /* the watcher gives up waiting for a process that never held it */
    bool watching;                      /* WATCHER runs, or ended and is not joined yet */
    int wake_fd;
    pthread_t watcher;
} life_t;

/* The server, before the process that LIFE is for starts (any earlier one reaped): ALIVE made anew,
 * nothing said or seen. 0, or -1 (errno). */
int life_arm (life_t *life, int wake_fd);
/* The server, once the process PID started: a thread that waits for its death (LIFE.died, then one
 * write to the wake fd). false when no thread could start (its death is then seen when its control
 * socket closes). */
bool life_watch (life_t *life, pid_t pid);
/* The server, once the process was reaped (or never started): its watcher ended and joined. */
void life_disarm (life_t *life);

/* The process, at its start: ALIVE held for good. */
void life_hold (life_t *life);
/* The process, as it ends cleanly, before it unmaps the region (the kernel could not mark ALIVE in
 * memory no longer mapped): ALIVE given back. */
void life_release (life_t *life);
/* The process, before it ends on purpose: STATUS and WHY for the server's log and replies. */
void life_say (life_t *life, int status, const char *why);

/* The fence: whether no thread of PID (a child of this process, not reaped, sent SIGKILL) can run
 * its own code any more: each one without memory, gone, or blocked in the kernel (it dies as it
 * leaves). Waits for it up to WAIT_NS; false when that passed, or /proc cannot tell. */
bool life_quiet (pid_t pid, uint64_t wait_ns);
/* Why PID ended, into WHY: what it said (LIFE), else its exit status as the kernel has it already
 * (/proc: "killed by signal 9"), else "its control socket closed". */
void life_why (const life_t *life, pid_t pid, char *why, size_t len);

#endif
