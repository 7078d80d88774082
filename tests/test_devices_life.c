/* A device process's life as the server watches it (serving/devices_life.h), with forked children in
 * place of device processes, its record in shared memory as the region would hold it:
 *   - a child killed while it holds ALIVE: the watcher reports exactly that pid, once (one wake), the
 *     fence passes before the child is reaped, and the reason is the kernel's ("killed by signal 9");
 *   - a child that says why it ends (a lost GPU context) and exits 70: its words, after the status;
 *   - a child that exits 3 without a word: "exited with status 3";
 *   - a child that releases ALIVE as it ends cleanly: seen too;
 *   - a child that never holds it: the watcher gives up when disarmed, nothing reported;
 *   - the fence refuses a child that still runs (on a CPU), and passes once it was killed;
 *   - a child blocked in a system call when it is killed passes the fence (it dies as it leaves). */
#define _GNU_SOURCE
#include "testutil.h"

#include "serving/devices_life.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef enum { CHILD_WAITS, CHILD_BLOCKS, CHILD_SAYS_70, CHILD_EXITS_3, CHILD_RELEASES, CHILD_NEVER_HOLDS } child_t;

typedef struct {
    life_t *life;
    int wake;
    pid_t pid;
} watched_t;

/* A child that holds LIFE as a device process does, then does WHAT; its pid, watched. */
static watched_t s_start (child_t what)
{
    watched_t w;
    w.life = mmap (NULL, sizeof *w.life, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne (w.life, MAP_FAILED);
    ck_assert_int_ge (w.wake = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK), 0);
    ck_assert_int_eq (life_arm (w.life, w.wake), 0);
    int go[2], spinning[2];
    ck_assert_int_eq (pipe (go), 0);
    ck_assert_int_eq (pipe (spinning), 0);
    w.pid = fork ();
    ck_assert_int_ge (w.pid, 0);
    if (w.pid == 0) {
        if (what != CHILD_NEVER_HOLDS)
            life_hold (w.life);
        char c;
        if (read (go[0], &c, 1) != 1)
            _exit (9);
        switch (what) {
        case CHILD_SAYS_70: life_say (w.life, 70, "device 0: unspecified launch failure"); _exit (70);
        case CHILD_EXITS_3: _exit (3);
        case CHILD_RELEASES: life_release (w.life); _exit (0);
        case CHILD_NEVER_HOLDS: _exit (0);
        case CHILD_BLOCKS: for (;;) pause ();
        case CHILD_WAITS:   /* on a CPU (running or runnable): not fenced */
            if (write (spinning[1], "s", 1) != 1)
                _exit (9);
            for (volatile unsigned spin = 0;; spin++)
                ;
        }
        _exit (8);
    }
    close (go[0]);
    ck_assert (life_watch (w.life, w.pid));
    if (what != CHILD_NEVER_HOLDS)     /* it holds ALIVE before it is told to end */
        for (int i = 0; i < 5000 && atomic_load (&w.life->holder) != w.pid; i++)
            usleep (1000);
    ck_assert_int_eq (write (go[1], "g", 1), 1);
    close (go[1]);
    close (spinning[1]);
    char c;
    if (what == CHILD_WAITS)    /* past its last call: from here it only runs its own code */
        ck_assert_int_eq (read (spinning[0], &c, 1), 1);
    close (spinning[0]);
    return w;
}

/* Waits (up to 5 s) for the watcher to report W's death; the number of wakes it wrote. */
static uint64_t s_seen (const watched_t *w)
{
    for (int i = 0; i < 5000 && atomic_load (&w->life->died) == 0; i++)
        usleep (1000);
    ck_assert_int_eq (atomic_load (&w->life->died), w->pid);
    ck_assert_uint_gt (atomic_load (&w->life->died_ns), 0);
    uint64_t wakes = 0;
    ck_assert_int_eq (read (w->wake, &wakes, sizeof wakes), (ssize_t) sizeof wakes);
    return wakes;
}

static void s_end (watched_t *w, int want_status)
{
    int status;
    ck_assert_int_eq (waitpid (w->pid, &status, 0), w->pid);
    ck_assert_int_eq (status, want_status);
    life_disarm (w->life);
    ck_assert (!w->life->watching);
    close (w->wake);
    munmap (w->life, sizeof *w->life);
}

START_TEST (a_killed_child_is_seen_fenced_and_named_before_it_is_reaped)
{
    watched_t w = s_start (CHILD_WAITS);
    ck_assert (!life_quiet (w.pid, 20000000ull));  /* it runs: the fence does not pass */
    ck_assert_int_eq (atomic_load (&w.life->died), 0);
    ck_assert_int_eq (kill (w.pid, SIGKILL), 0);
    ck_assert_uint_eq (s_seen (&w), 1);
    ck_assert (life_quiet (w.pid, 1000000000ull));
    char why[256];
    life_why (w.life, w.pid, why, sizeof why);
    ck_assert_str_eq (why, "killed by signal 9");
    s_end (&w, SIGKILL);
}
END_TEST

/* Whether PID is asleep in a call (/proc: state S), waited for up to 5 s. */
static bool s_sleeping (pid_t pid)
{
    char path[64], state = 0;
    snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
    for (int waited = 0; waited < 5000 && state != 'S'; waited++) {
        FILE *f = fopen (path, "r");
        if (f && fscanf (f, "%*d (%*[^)]) %c", &state) != 1)
            state = 0;
        if (f)
            fclose (f);
        if (state != 'S')
            usleep (1000);
    }
    return state == 'S';
}

START_TEST (a_killed_child_blocked_in_a_call_passes_the_fence)
{
    watched_t w = s_start (CHILD_BLOCKS);
    ck_assert (s_sleeping (w.pid));     /* in pause () */
    ck_assert_int_eq (kill (w.pid, SIGKILL), 0);
    ck_assert (life_quiet (w.pid, 1000000000ull));
    ck_assert_uint_eq (s_seen (&w), 1);
    s_end (&w, SIGKILL);
}
END_TEST

/* A child that ends by itself (WHAT): seen once, fenced, named WANT, its status STATUS. */
static void s_ends_named (child_t what, const char *want, int status)
{
    watched_t w = s_start (what);
    ck_assert_uint_eq (s_seen (&w), 1);
    ck_assert (life_quiet (w.pid, 1000000000ull));
    char why[256];
    life_why (w.life, w.pid, why, sizeof why);
    ck_assert_str_eq (why, want);
    s_end (&w, status);
}

START_TEST (a_child_that_says_why_is_named_by_its_words)
{
    s_ends_named (CHILD_SAYS_70, "exited with status 70: its GPU context was lost (a trap or a lost device): device 0: "
                                 "unspecified launch failure", 70 << 8);
}
END_TEST

START_TEST (a_child_that_exits_is_named_by_its_status) { s_ends_named (CHILD_EXITS_3, "exited with status 3", 3 << 8); }
END_TEST

START_TEST (a_child_that_releases_as_it_ends_is_seen)
{
    watched_t w = s_start (CHILD_RELEASES);
    ck_assert_uint_eq (s_seen (&w), 1);
    s_end (&w, 0);
}
END_TEST

START_TEST (a_child_that_never_holds_it_reports_nothing)
{
    watched_t w = s_start (CHILD_NEVER_HOLDS);
    int status;
    ck_assert_int_eq (waitpid (w.pid, &status, 0), w.pid);
    life_disarm (w.life);      /* the watcher, still waiting for a holder, gives up */
    ck_assert_int_eq (atomic_load (&w.life->died), 0);
    uint64_t wakes = 0;
    ck_assert_int_eq (read (w.wake, &wakes, sizeof wakes), -1);
    close (w.wake);
    munmap (w.life, sizeof *w.life);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("devices_life");
    TCase *c = tcase_create ("life");
    tcase_set_timeout (c, 60);
    tcase_add_test (c, a_killed_child_is_seen_fenced_and_named_before_it_is_reaped);
    tcase_add_test (c, a_killed_child_blocked_in_a_call_passes_the_fence);
    tcase_add_test (c, a_child_that_says_why_is_named_by_its_words);
    tcase_add_test (c, a_child_that_exits_is_named_by_its_status);
    tcase_add_test (c, a_child_that_releases_as_it_ends_is_seen);
    tcase_add_test (c, a_child_that_never_holds_it_reports_nothing);
    suite_add_tcase (s, c);
    return tu_run_suite (s);
}
