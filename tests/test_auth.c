/* front/auth.h in process: auth_keygen writes a certificate pair czmq reads back; auth_new refuses
 * every unusable server.curve with a message naming the key and the file; a socket auth_apply made
 * a CURVE server accepts a client whose key is in the allowlist folder (and the front sees that
 * key as the client's User-Id) and refuses any other, decided by the handshake (socket monitor
 * events, not a wait for a reply that never comes); auth_reload takes a new folder. The binary's
 * side (sigserve --keygen, exit code 2, the clients' certificates) is tests/test_curve.c's. */
#define _GNU_SOURCE
#include "front/auth.h"
#include "base/log.h"
#include "testutil.h"

#include <check.h>
#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *s_dir;

static void s_setup (void)
{
    log_set_level (LOG_LEVEL_WARN);
    s_dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (s_dir);
}

static void s_teardown (void)
{
    tu_remove_tree (s_dir);
    free (s_dir);
}

/* DIR/NAME, in a static buffer of each call's own (up to four at once). */
static const char *s_path (const char *name)
{
    static char paths[4][4300];
    static int next;
    char *p = paths[next++ % 4];
    snprintf (p, sizeof paths[0], "%s/%s", s_dir, name);
    return p;
}

static void s_keygen (const char *name)
{
    char err[512];
    ck_assert_msg (auth_keygen (s_path (name), err, sizeof err) == 0, "%s", err);
}

/* ---- keygen ---- */

START_TEST (keygen_writes_a_pair_czmq_reads_back)
{
    s_keygen ("server");
    struct stat st;
    ck_assert_int_eq (stat (s_path ("server_secret"), &st), 0);
    ck_assert_int_eq (st.st_mode & 0777, 0600);     /* the secret: its owner's alone */
    ck_assert_int_eq (stat (s_path ("server"), &st), 0);
    ck_assert_int_eq (st.st_mode & 0777, 0644);     /* the public one is meant to be handed out */
    zcert_t *secret = zcert_load (s_path ("server_secret"));
    ck_assert_ptr_nonnull (secret);
    ck_assert_uint_eq (strlen (zcert_public_txt (secret)), 40);
    ck_assert_uint_eq (strlen (zcert_secret_txt (secret)), 40);
    ck_assert_str_ne (zcert_secret_txt (secret), "0000000000000000000000000000000000000000");
    /* The public file holds the same public key and no secret one (czmq reads it as zeros). */
    FILE *f = fopen (s_path ("server"), "r");
    char text[4096];
    size_t n = fread (text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose (f);
    ck_assert_ptr_null (strstr (text, "secret-key"));
    ck_assert_ptr_nonnull (strstr (text, zcert_public_txt (secret)));
    char want[64];
    snprintf (want, sizeof want, "sigserve %s --keygen", SIGSERVE_VERSION);
    ck_assert_str_eq (zcert_meta (secret, "created-by"), want);
    ck_assert_uint_eq (strlen (zcert_meta (secret, "created")), strlen ("2026-01-02T03:04:05Z"));
    zcert_destroy (&secret);
    /* Two runs, two different keys. */
    s_keygen ("other");
    zcert_t *a = zcert_load (s_path ("server_secret")), *b = zcert_load (s_path ("other_secret"));
    ck_assert_str_ne (zcert_public_txt (a), zcert_public_txt (b));
    zcert_destroy (&a);
    zcert_destroy (&b);
}
END_TEST

START_TEST (keygen_to_a_folder_that_does_not_exist_fails_naming_both_files)
{
    char err[512];
    ck_assert_int_eq (auth_keygen ("/no/such/folder/x", err, sizeof err), -1);
    ck_assert_str_eq (err, "cannot write /no/such/folder/x and /no/such/folder/x_secret: No such file or directory");
}
END_TEST

/* ---- refusals ---- */

static void s_refused (const char *key_file, const char *folder, const char *want)
{
    curve_config_t curve;
    memset (&curve, 0, sizeof curve);
    snprintf (curve.secret_key_file, sizeof curve.secret_key_file, "%s", key_file);
    snprintf (curve.allowed_clients, sizeof curve.allowed_clients, "%s", folder);
    char err[1024] = "";
    auth_t *a = auth_new (&curve, 1, true, err, sizeof err);
    ck_assert_msg (a == NULL, "accepted %s with %s", key_file, folder);
    ck_assert_str_eq (err, want);
}

START_TEST (an_unusable_secret_key_file_is_refused_naming_the_key_and_the_file)
{
    s_keygen ("server");
    ck_assert_int_eq (mkdir (s_path ("allowed"), 0700), 0);
    char want[8192];
    const char *missing = s_path ("nope_secret"), *allowed = s_path ("allowed");
    snprintf (want, sizeof want, "server.curve.secret_key_file: %s: No such file or directory", missing);
    s_refused (missing, allowed, want);
    snprintf (want, sizeof want, "server.curve.secret_key_file: %s: not a regular file", allowed);
    s_refused (allowed, allowed, want);
    char *garbage = tu_write_file (s_dir, "garbage", "not a certificate\n", -1);
    snprintf (want, sizeof want, "server.curve.secret_key_file: %s: cannot be read as a czmq certificate (make one "
              "with sigserve --keygen PATH and give PATH_secret)", garbage);
    s_refused (garbage, allowed, want);
    free (garbage);
    /* A public certificate with no _secret file next to it (with one, zcert reads that first). */
    zcert_t *pair = zcert_load (s_path ("server_secret"));
    const char *public_only = s_path ("public-only");
    ck_assert_int_eq (zcert_save_public (pair, public_only), 0);
    zcert_destroy (&pair);
    snprintf (want, sizeof want, "server.curve.secret_key_file: %s holds no secret key (a public certificate); give "
              "the _secret file sigserve --keygen wrote", public_only);
    s_refused (public_only, allowed, want);
    /* A file its reader may not open (not checkable as root: root reads it anyway). */
    if (geteuid () != 0) {
        const char *locked = s_path ("server_secret");
        ck_assert_int_eq (chmod (locked, 0), 0);
        snprintf (want, sizeof want, "server.curve.secret_key_file: %s: cannot be read as a czmq certificate (make "
                  "one with sigserve --keygen PATH and give PATH_secret)", locked);
        s_refused (locked, allowed, want);
    } else
        printf ("an unreadable key file: not checked, this test runs as root\n");
}
END_TEST

START_TEST (an_unusable_allowlist_folder_is_refused_naming_the_key_and_the_folder)
{
    s_keygen ("server");
    char want[8192];
    const char *key = s_path ("server_secret"), *missing = s_path ("no-such-folder"), *file = s_path ("server");
    snprintf (want, sizeof want, "server.curve.allowed_clients: %s: No such file or directory", missing);
    s_refused (key, missing, want);
    snprintf (want, sizeof want, "server.curve.allowed_clients: %s: not a folder (expected a folder of client "
              "certificates)", file);
    s_refused (key, file, want);
}
END_TEST

/* ---- the allowlist ---- */

/* What the handshake of a client with KEYS (NULL: a fresh key pair) to ENDPOINT came to: a
 * ZMQ_EVENT_HANDSHAKE_* event read from the client's monitor (30 s at most). */
static int s_handshake (void *ctx, const char *endpoint, const char *server_public, zcert_t *client, void **sock)
{
    static int count;
    char monitor[64];
    snprintf (monitor, sizeof monitor, "inproc://test-auth-%d", count++);
    void *s = zmq_socket (ctx, ZMQ_DEALER), *events = zmq_socket (ctx, ZMQ_PAIR);
    int linger = 0, timeout = 30000;
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (s, ZMQ_CURVE_SERVERKEY, server_public, 40);
    zmq_setsockopt (s, ZMQ_CURVE_PUBLICKEY, zcert_public_txt (client), 40);
    zmq_setsockopt (s, ZMQ_CURVE_SECRETKEY, zcert_secret_txt (client), 40);
    zmq_setsockopt (events, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (events, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq (zmq_socket_monitor (s, monitor, ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                                                      | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                                      | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL), 0);
    ck_assert_int_eq (zmq_connect (events, monitor), 0);
    ck_assert_int_eq (zmq_connect (s, endpoint), 0);
    zmq_msg_t msg;
    zmq_msg_init (&msg);
    ck_assert_msg (zmq_msg_recv (&msg, events, 0) >= 2, "no handshake with %s in 30 s", endpoint);
    uint16_t event;
    memcpy (&event, zmq_msg_data (&msg), 2);
    while (zmq_msg_more (&msg))
        zmq_msg_recv (&msg, events, 0);
    zmq_msg_close (&msg);
    zmq_socket_monitor (s, NULL, 0);
    zmq_close (events);
    *sock = s;
    return event;
}

START_TEST (the_allowlist_admits_a_listed_key_and_refuses_another)
{
    s_keygen ("server");
    ck_assert_int_eq (mkdir (s_path ("allowed"), 0700), 0);
    zcert_t *alice = zcert_new (), *mallory = zcert_new ();
    ck_assert_int_eq (zcert_save_public (alice, s_path ("allowed/alice.cert")), 0);
    curve_config_t curve;
    snprintf (curve.secret_key_file, sizeof curve.secret_key_file, "%s", s_path ("server_secret"));
    snprintf (curve.allowed_clients, sizeof curve.allowed_clients, "%s", s_path ("allowed"));
    char err[1024];
    auth_t *a = auth_new (&curve, 1, true, err, sizeof err);
    ck_assert_msg (a != NULL, "%s", err);
    zcert_t *server = zcert_load (s_path ("server"));
    ck_assert_str_eq (auth_public_key (a), zcert_public_txt (server));
    zcert_destroy (&server);

    void *ctx = auth_context (a);
    void *router = zmq_socket (ctx, ZMQ_ROUTER);
    int linger = 0, timeout = 30000;
    zmq_setsockopt (router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (router, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_msg (auth_apply (a, router, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq (zmq_bind (router, "tcp://127.0.0.1:*"), 0);
    char endpoint[128];
    size_t len = sizeof endpoint;
    zmq_getsockopt (router, ZMQ_LAST_ENDPOINT, endpoint, &len);
    /* The start's own proof: a fresh unknown key is refused. */
    ck_assert_msg (auth_prove (a, endpoint, err, sizeof err) == 0, "%s", err);

    void *client;
    ck_assert_int_eq (s_handshake (ctx, endpoint, auth_public_key (a), mallory, &client), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    zmq_close (client);
    ck_assert_int_eq (s_handshake (ctx, endpoint, auth_public_key (a), alice, &client), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    /* Served: its message reaches the front, which knows it by its public key. */
    ck_assert_int_eq (zmq_send (client, "hello", 5, 0), 5);
    zmq_msg_t id, payload;
    zmq_msg_init (&id);
    zmq_msg_init (&payload);
    ck_assert_int_ge (zmq_msg_recv (&id, router, 0), 0);
    ck_assert_int_eq (zmq_msg_recv (&payload, router, 0), 5);
    ck_assert_mem_eq (zmq_msg_data (&payload), "hello", 5);
    const char *user = zmq_msg_gets (&payload, "User-Id");
    ck_assert_ptr_nonnull (user);
    ck_assert_str_eq (user, zcert_public_txt (alice));
    zmq_msg_close (&id);
    zmq_msg_close (&payload);
    zmq_close (client);

    /* A reload to a folder with mallory only: mallory in, alice out. A missing folder: refused, and
     * the folder before it still applies. */
    ck_assert_int_eq (mkdir (s_path ("allowed2"), 0700), 0);
    ck_assert_int_eq (zcert_save_public (mallory, s_path ("allowed2/mallory.cert")), 0);
    snprintf (curve.allowed_clients, sizeof curve.allowed_clients, "%s", s_path ("allowed2"));
    ck_assert_msg (auth_reload (a, &curve, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq (s_handshake (ctx, endpoint, auth_public_key (a), mallory, &client), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    zmq_close (client);
    ck_assert_int_eq (s_handshake (ctx, endpoint, auth_public_key (a), alice, &client), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    zmq_close (client);
    snprintf (curve.allowed_clients, sizeof curve.allowed_clients, "%s", s_path ("gone"));
    ck_assert_int_eq (auth_reload (a, &curve, err, sizeof err), -1);
    char want[8192];
    snprintf (want, sizeof want, "server.curve.allowed_clients: %s: No such file or directory", s_path ("gone"));
    ck_assert_str_eq (err, want);
    ck_assert_int_eq (s_handshake (ctx, endpoint, auth_public_key (a), mallory, &client), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    zmq_close (client);

    zmq_close (router);
    zcert_destroy (&alice);
    zcert_destroy (&mallory);
    auth_destroy (&a);
    ck_assert_ptr_null (a);
    auth_destroy (&a);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("auth");
    TCase *tk = tcase_create ("keygen");
    tcase_add_checked_fixture (tk, s_setup, s_teardown);
    tcase_add_test (tk, keygen_writes_a_pair_czmq_reads_back);
    tcase_add_test (tk, keygen_to_a_folder_that_does_not_exist_fails_naming_both_files);
    suite_add_tcase (s, tk);
    TCase *tc = tcase_create ("curve_server");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 60);
    tcase_add_test (tc, an_unusable_secret_key_file_is_refused_naming_the_key_and_the_file);
    tcase_add_test (tc, an_unusable_allowlist_folder_is_refused_naming_the_key_and_the_folder);
    tcase_add_test (tc, the_allowlist_admits_a_listed_key_and_refuses_another);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
