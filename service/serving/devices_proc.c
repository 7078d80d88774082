/* A device process's life as the server sees it (devices_impl.h), for devices.c and standby.c alike:
 * started (posix_spawn of this binary, its control socket, its share of the region), one control
 * exchange, ended. */
#define _GNU_SOURCE
#include "serving/devices_impl.h"

#include "base/log.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

const char *devices_name (int device, char *buf, size_t len)
{
    if (device == DEVICE_CPU_TEST)
        snprintf (buf, len, "cpu (test)");
    else if (device == DEVICE_CPU_TEST_OTHER)
        snprintf (buf, len, "cpu1 (test)");
    else
        snprintf (buf, len, "%d", device);
    return buf;
}

/* Starts a process for DEVICE (lock held): its pid and control socket into *PID and *FD, its share
 * of the region *ARENA and its watched life *LIFE (each made on first use, kept across restarts: the
 * new process starts them afresh; a watcher thread started for it: devices_life.h).
 * WHAT: "" or "standby ", for the log. 0, or -1 with ERR. */
int devices_spawn (devices_t *self, int device_id, void **arena_p, life_t **life_p, pid_t *pid_p, int *fd_p,
                   const char *what, char *err, size_t errlen)
{
    char name[32];
    int sv[2];
    if (socketpair (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf (err, errlen, "device %s: cannot make the control socket: %s", devices_name (device_id, name, sizeof name),
                  strerror (errno));
        return -1;
    }
    /* The child's end crosses exec; the parent closes its copy right after, so no later child has it. */
    fcntl (sv[1], F_SETFD, 0);
    char device[16], control[16], region[64], arena[64], parent[16], life[32] = "0";
    if (!*arena_p)
        *arena_p = shm_alloc_aligned (self->shm, ARENA_BYTES, ARENA_ALIGN, false);
    if (!*life_p)
        *life_p = shm_alloc (self->shm, sizeof **life_p);
    /* without it (the region full, a mutex refused) the loss is seen when the control socket closes */
    life_t *watched = *life_p && life_arm (*life_p, self->wake_fd) == 0 ? *life_p : NULL;
    if (watched)
        snprintf (life, sizeof life, "%#lx", (unsigned long) (uintptr_t) watched);
    snprintf (arena, sizeof arena, "%#lx:%llu", (unsigned long) (uintptr_t) *arena_p,
              *arena_p ? (unsigned long long) ARENA_BYTES : 0ull);
    snprintf (device, sizeof device, "%d", device_id);
    snprintf (control, sizeof control, "%d", sv[1]);
    snprintf (region, sizeof region, "%d:%#lx:%zu", shm_fd (self->shm), (unsigned long) shm_base (self->shm),
              shm_size (self->shm));
    snprintf (parent, sizeof parent, "%d", (int) getpid ());
    char *argv[] = { self->exe, "--device-process", device, "--control", control, "--region", region,
                     "--arena", arena, "--life", life, "--parent", parent, "--log-level", self->log_level, "--log-format", self->log_format, NULL };
    pid_t pid;
    int rc = posix_spawn (&pid, self->exe, NULL, NULL, argv, environ);
    close (sv[1]);
    if (rc != 0) {
        close (sv[0]);
        snprintf (err, errlen, "device %s: cannot start its %sprocess (%s): %s", devices_name (device_id, name, sizeof name),
                  what, self->exe, strerror (rc));
        return -1;
    }
    *pid_p = pid;
    *fd_p = sv[0];
    if (watched)
        life_watch (watched, pid);
    log_info ("device %s: %sprocess %d started", devices_name (device_id, name, sizeof name), what, (int) pid);
    return 0;
}

/* Ends the process *PID (its control socket *FD; LIFE: its watch, ended once it is): closing the
 * socket makes it unload and exit; KILL: at once. */
void devices_reap (pid_t *pid, int *fd, life_t *life, bool kill_it)
{
    if (*pid > 0) {
        if (kill_it)
            kill (*pid, SIGKILL);
        if (*fd >= 0)
            close (*fd);
        *fd = -1;
        int status;
        uint64_t until = clock_now_ns () + 5000000000ull;
        while (waitpid (*pid, &status, WNOHANG) == 0) {
            if (clock_now_ns () > until) {
                kill (*pid, SIGKILL);
                waitpid (*pid, &status, 0);
                break;
            }
            usleep (1000);
        }
    }
    if (*fd >= 0)
        close (*fd);
    *fd = -1;
    *pid = 0;
    if (life)
        life_disarm (life);
}

/* Ends P's process (lock held). */
void devices_reap_proc (proc_t *p, bool kill_it)
{
    devices_reap_departing (p, true);
    devices_reap (&p->pid, &p->fd, p->life, kill_it);
}

void devices_reap_departing (proc_t *p, bool wait)
{
    if (p->departing <= 0)
        return;
    int status;
    const pid_t got = waitpid (p->departing, &status, wait ? 0 : WNOHANG);
    if (got == 0)
        return;
    char name[32], words[128] = "its status lost";
    if (got == p->departing && WIFSIGNALED (status))
        snprintf (words, sizeof words, "killed by signal %d", WTERMSIG (status));
    else if (got == p->departing)
        snprintf (words, sizeof words, "exit status %d", WEXITSTATUS (status));
    log_info ("device %s: the lost process %d ended %.1f ms after its loss was seen (%s)",
              devices_name (p->device, name, sizeof name), (int) p->departing,
              (clock_now_ns () - p->departing_since) / 1e6, words);
    p->departing = 0;
}

/* One request and its reply on the control socket FD of DEVICE's process: 0, or -1 with ERR (-2: the
 * request was sent and the process exited before its reply). */
int devices_exchange (int fd, int device, const dev_request_t *rq, dev_reply_t *rp, char *err, size_t errlen)
{
    char name[32];
    if (send (fd, rq, sizeof *rq, MSG_NOSIGNAL) != (ssize_t) sizeof *rq) {
        snprintf (err, errlen, "device %s: its process is gone (%s)", devices_name (device, name, sizeof name),
                  strerror (errno));
        return -1;
    }
    for (;;) {
        ssize_t n = recv (fd, rp, sizeof *rp, 0);
        if (n == (ssize_t) sizeof *rp)
            break;
        if (n < 0 && errno == EINTR)
            continue;
        snprintf (err, errlen, "device %s: its process exited during the call", devices_name (device, name, sizeof name));
        return -2;
    }
    if (rp->status != 0) {
        snprintf (err, errlen, "%s", rp->error);
        return -1;
    }
    return 0;
}
