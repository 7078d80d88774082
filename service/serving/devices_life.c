/* A device process's life as the server watches it (devices_life.h): its robust mutex, its last
 * word, and the fence read from /proc. */
#define _GNU_SOURCE
#include "serving/devices_life.h"

#include "base/log.h"
#include "base/threads.h"
#include "clock.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WATCH_POLL_US 500       /* how often a watcher looks whether its process holds ALIVE yet */

int life_arm (life_t *life, int wake_fd)
{
    life_disarm (life);
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init (&a) != 0)
        return -1;
    int rc = pthread_mutexattr_setpshared (&a, PTHREAD_PROCESS_SHARED);
    if (rc == 0)
        rc = pthread_mutexattr_setrobust (&a, PTHREAD_MUTEX_ROBUST);
    memset (&life->alive, 0, sizeof life->alive);
    if (rc == 0)
        rc = pthread_mutex_init (&life->alive, &a);
    pthread_mutexattr_destroy (&a);
    atomic_store (&life->holder, 0);
    atomic_store (&life->said, 0);
    life->why[0] = '\0';
    atomic_store (&life->died, 0);
    atomic_store (&life->died_ns, 0);
    atomic_store (&life->cancel, false);
    life->wake_fd = wake_fd;
    if (rc != 0)
        errno = rc;
    return rc == 0 ? 0 : -1;
}

typedef struct {
    life_t *life;
    pid_t pid;
} watch_arg_t;

static void *s_watch (void *arg)
{
    watch_arg_t w = *(watch_arg_t *) arg;
    free (arg);
    threads_set_role ("devwatch");
    while (atomic_load (&w.life->holder) != w.pid)
        if (atomic_load (&w.life->cancel))
            return NULL;
        else
            usleep (WATCH_POLL_US);
    int rc = pthread_mutex_lock (&w.life->alive);
    const uint64_t now = clock_now_ns ();
    if (rc == EOWNERDEAD)
        pthread_mutex_consistent (&w.life->alive);
    if (rc == 0 || rc == EOWNERDEAD)
        pthread_mutex_unlock (&w.life->alive);
    atomic_store (&w.life->died_ns, now);
    atomic_store (&w.life->died, (int32_t) w.pid);
    const uint64_t one = 1;
    if (write (w.life->wake_fd, &one, sizeof one) < 0)
        log_debug ("device watcher: cannot wake the supervisor: %s", strerror (errno));
    return NULL;
}

bool life_watch (life_t *life, pid_t pid)
{
    watch_arg_t *w = malloc (sizeof *w);
    if (!w)
        return false;
    *w = (watch_arg_t) { life, pid };
    if (pthread_create (&life->watcher, NULL, s_watch, w) != 0) {
        free (w);
        log_warn ("device process %d: no thread watches it; its loss is seen when its control socket closes", (int) pid);
        return false;
    }
    life->watching = true;
    return true;
}

void life_disarm (life_t *life)
{
    if (!life->watching)
        return;
    atomic_store (&life->cancel, true);
    pthread_join (life->watcher, NULL);
    life->watching = false;
}

void life_hold (life_t *life)
{
    if (pthread_mutex_lock (&life->alive) == 0)
        atomic_store (&life->holder, (int32_t) getpid ());
}

void life_release (life_t *life)
{
    if (atomic_load (&life->holder) == (int32_t) getpid ())
        pthread_mutex_unlock (&life->alive);
}

void life_say (life_t *life, int status, const char *why)
{
    snprintf (life->why, sizeof life->why, "%s", why);
    atomic_store (&life->said, status);
}

/* Whether thread TASK of PID, sent SIGKILL, can no longer run its own code: it let its memory go
 * (/proc/PID/task/TASK/statm all zeros: no mm), it is gone, or it is blocked in the kernel
 * (/proc/.../syscall says other than "running": a thread not on a CPU handles the pending SIGKILL
 * before any instruction of its own, so one held in a driver's call for as long as the driver
 * takes, as a trapped GPU's are for ~0.3 s, counts at once); -1 when /proc cannot tell. */
static int s_task_quiet (pid_t pid, const char *task)
{
    char path[320], buf[64];
    snprintf (path, sizeof path, "/proc/%d/task/%.255s/statm", (int) pid, task);
    FILE *f = fopen (path, "re");
    if (!f)
        return errno == ENOENT || errno == ESRCH ? 1 : -1;
    const bool got = fgets (buf, sizeof buf, f) != NULL;
    fclose (f);
    if (!got)
        return 1;       /* released while read */
    unsigned long size = 1;
    if (sscanf (buf, "%lu", &size) != 1)
        return -1;
    if (size == 0)
        return 1;
    /* its parent may read it (ptrace's rule; where it may not, only the memory's going tells) */
    snprintf (path, sizeof path, "/proc/%d/task/%.255s/syscall", (int) pid, task);
    if (!(f = fopen (path, "re")))
        return errno == ENOENT || errno == ESRCH ? 1 : 0;
    const bool said = fgets (buf, sizeof buf, f) != NULL;
    fclose (f);
    return said && strncmp (buf, "running", 7) != 0;
}

/* 1: every thread of PID quiet; 0: one is not yet; -1: /proc cannot tell. */
static int s_quiet_now (pid_t pid)
{
    char path[64];
    snprintf (path, sizeof path, "/proc/%d/task", (int) pid);
    DIR *d = opendir (path);
    if (!d)
        return -1;      /* a child not reaped keeps its /proc entry: /proc is not there */
    int quiet = 1;
    for (struct dirent *e; quiet == 1 && (e = readdir (d));)
        if (e->d_name[0] != '.')
            quiet = s_task_quiet (pid, e->d_name);
    closedir (d);
    return quiet;
}

bool life_quiet (pid_t pid, uint64_t wait_ns)
{
    const uint64_t until = clock_now_ns () + wait_ns;
    for (;;) {
        const int q = s_quiet_now (pid);
        if (q != 0)
            return q == 1;
        if (clock_now_ns () > until)
            return false;
        usleep (50);
    }
}

/* The exit status STATUS (waitpid's form) in words, into WHY. */
static void s_status_words (int status, char *why, size_t len)
{
    if (WIFSIGNALED (status))
        snprintf (why, len, "killed by signal %d", WTERMSIG (status));
    else
        snprintf (why, len, "exited with status %d%s", WEXITSTATUS (status),
                  WEXITSTATUS (status) == 70   ? ": its GPU context was lost (a trap or a lost device)"
                  : WEXITSTATUS (status) == 71 ? ": an instance could not run (e.g. a kernel past its watchdog)"
                                               : "");
}

/* PID's exit status as the kernel has it once it began to exit (/proc/PID/stat, field 52), or -1. */
static int s_exit_code (pid_t pid)
{
    char path[64], buf[1024];
    snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
    FILE *f = fopen (path, "re");
    if (!f)
        return -1;
    const size_t n = fread (buf, 1, sizeof buf - 1, f);
    fclose (f);
    buf[n] = '\0';
    const char *p = strrchr (buf, ')');     /* past the command's name, which may hold anything */
    if (!p)
        return -1;
    /* fields 3..52 follow: the state, then 48 numbers, the last the exit code */
    int field = 2, code = -1;
    for (const char *s = p + 1; *s; s++)
        if (*s == ' ' && ++field == 52)
            code = atoi (s + 1);
    return field >= 52 ? code : -1;
}

void life_why (const life_t *life, pid_t pid, char *why, size_t len)
{
    const int said = atomic_load (&life->said);
    if (said) {
        char words[96];
        s_status_words (said << 8, words, sizeof words);
        snprintf (why, len, "%s: %s", words, life->why);
        return;
    }
    const int code = s_exit_code (pid);
    if (code > 0)
        s_status_words (code, why, len);
    else
        snprintf (why, len, "its control socket closed");
}
