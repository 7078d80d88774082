/* ops/notify.c: what systemd hears (sd_notify on $NOTIFY_SOCKET, Type=notify-reload), each message
 * exact: notify_ready, notify_reloading and notify_stopping called here, then the server's own
 * order: READY=1 once it serves, RELOADING=1 then READY=1 "serving (reloaded)" on SIGHUP, STOPPING=1
 * on SIGTERM; nothing without $NOTIFY_SOCKET. */
#define _GNU_SOURCE
#include "ops/notify.h"
#include "testutil.h"

#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char *s_dir;

/* A datagram socket bound in the test's folder, named in $NOTIFY_SOCKET: its fd. */
static int s_listen (const char *name)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf (a.sun_path, sizeof a.sun_path, "%s/%s", s_dir, name);
    int fd = socket (AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge (fd, 0);
    ck_assert_msg (bind (fd, (struct sockaddr *) &a, sizeof a) == 0, "bind %s: %s", a.sun_path, strerror (errno));
    ck_assert_int_eq (setenv ("NOTIFY_SOCKET", a.sun_path, 1), 0);
    return fd;
}

/* The next message on FD within TIMEOUT_MS into BUF: its length, or -1 when none came. */
static int s_next (int fd, char *buf, size_t cap, int timeout_ms)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll (&p, 1, timeout_ms) != 1)
        return -1;
    ssize_t n = recv (fd, buf, cap - 1, 0);
    ck_assert_int_ge (n, 0);
    buf[n] = 0;
    return (int) n;
}

/* "RELOADING=1\nMONOTONIC_USEC=<digits>": whether MSG is one. */
static bool s_is_reloading (const char *msg)
{
    const char *head = "RELOADING=1\nMONOTONIC_USEC=";
    if (strncmp (msg, head, strlen (head)) != 0)
        return false;
    const char *d = msg + strlen (head);
    if (!*d)
        return false;
    for (; *d; d++)
        if (*d < '0' || *d > '9')
            return false;
    return true;
}

static void s_setup (void) { s_dir = tu_tmpdir (); ck_assert_ptr_nonnull (s_dir); }

static void s_teardown (void)
{
    unsetenv ("NOTIFY_SOCKET");
    tu_remove_tree (s_dir);
    free (s_dir);
    s_dir = NULL;
}

START_TEST (each_message_is_what_systemd_expects)
{
    int fd = s_listen ("notify");
    char msg[512];
    notify_ready ("serving");
    ck_assert_int_gt (s_next (fd, msg, sizeof msg, 5000), 0);
    ck_assert_str_eq (msg, "READY=1\nSTATUS=serving");
    notify_reloading ();
    ck_assert_int_gt (s_next (fd, msg, sizeof msg, 5000), 0);
    ck_assert_msg (s_is_reloading (msg), "%s", msg);
    notify_stopping ();
    ck_assert_int_gt (s_next (fd, msg, sizeof msg, 5000), 0);
    ck_assert_str_eq (msg, "STOPPING=1\nSTATUS=draining");
    /* without $NOTIFY_SOCKET: nothing is sent, nothing fails */
    unsetenv ("NOTIFY_SOCKET");
    notify_ready ("serving");
    notify_stopping ();
    ck_assert_int_eq (s_next (fd, msg, sizeof msg, 100), -1);
    close (fd);
}
END_TEST

START_TEST (the_server_says_ready_reloading_ready_stopping_in_that_order)
{
    int fd = s_listen ("server-notify");
    char endpoint[64], json[2048], msg[512];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"log_level\": \"warn\", \"stats_interval_s\": 0 },"
              " \"models\": [ { \"name\": \"tick_mlp\", \"backend\": \"cpu\","
              " \"weights\": \"%s/models/tick_mlp.safetensors\", \"layers\": [ { \"weight\": \"0.weight\" },"
              " { \"weight\": \"2.weight\" }, { \"weight\": \"4.weight\" } ] } ] }",
              endpoint, tu_build_abs ());
    char *config = tu_write_file (s_dir, "notify.json", json, -1);
    pid_t pid = tu_server_start (config, endpoint, 30000);
    ck_assert_int_gt (pid, 0);
    ck_assert_int_gt (s_next (fd, msg, sizeof msg, 30000), 0);
    ck_assert_str_eq (msg, "READY=1\nSTATUS=serving");
    ck_assert_int_eq (kill (pid, SIGHUP), 0);
    ck_assert_int_gt (s_next (fd, msg, sizeof msg, 30000), 0);
    ck_assert_msg (s_is_reloading (msg), "%s", msg);
    ck_assert_int_gt (s_next (fd, msg, sizeof msg, 30000), 0);
    ck_assert_str_eq (msg, "READY=1\nSTATUS=serving (reloaded)");
    ck_assert_int_eq (tu_server_stop (pid), 0);
    ck_assert_int_gt (s_next (fd, msg, sizeof msg, 5000), 0);
    ck_assert_str_eq (msg, "STOPPING=1\nSTATUS=draining");
    ck_assert_int_eq (s_next (fd, msg, sizeof msg, 100), -1);
    close (fd);
    free (config);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("notify");
    TCase *tc = tcase_create ("notify");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 120);
    tcase_add_test (tc, each_message_is_what_systemd_expects);
    tcase_add_test (tc, the_server_says_ready_reloading_ready_stopping_in_that_order);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
