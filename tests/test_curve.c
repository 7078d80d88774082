/* server.curve over tcp loopback with the real binary: certificates from sigserve --keygen, an
 * allowlisted client served, an unknown key and a plaintext client get nothing while the server
 * keeps serving, a client added to the folder is served after SIGHUP, and every way of being
 * configured but unusable stops the start with exit code 2 (never a plaintext fallback). */
#define _GNU_SOURCE
#include "signal.pb-c.h"
#include "testutil.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

static char s_dir[2048], s_config[2300], s_endpoint[64];
static void *s_ctx;

static int s_run (const char *cmd, char *out, size_t cap)
{
    FILE *p = popen (cmd, "r");
    size_t n = fread (out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose (p);
    return WIFEXITED (st) ? WEXITSTATUS (st) : -1;
}

static void s_keygen (const char *name)
{
    char cmd[4600], out[1024];
    snprintf (cmd, sizeof cmd, "%s/sigserve --keygen %s/%s 2>&1", tu_build_dir (), s_dir, name);
    ck_assert_msg (s_run (cmd, out, sizeof out) == 0, "%s", out);
}

/* The 40-character Z85 key KIND ("public-key", "secret-key") of czmq certificate PATH. */
static void s_key (const char *path, const char *kind, char *key)
{
    FILE *f = fopen (path, "r");
    ck_assert_ptr_nonnull (f);
    char line[256];
    key[0] = 0;
    while (fgets (line, sizeof line, f)) {
        char *k = strstr (line, kind);
        char *q = k ? strchr (k, '"') : NULL;
        if (q && strlen (q) > 41) {
            memcpy (key, q + 1, 40);
            key[40] = 0;
        }
    }
    fclose (f);
    ck_assert_uint_eq (strlen (key), 40);
}

static void *s_client (const char *cert)
{
    void *s = zmq_socket (s_ctx, ZMQ_DEALER);
    int linger = 0, timeout = 1500;
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    if (cert) {
        char server_pub[41], pub[41], sec[41], path[2400];
        snprintf (path, sizeof path, "%s/server", s_dir);
        s_key (path, "public-key", server_pub);
        snprintf (path, sizeof path, "%s/%s_secret", s_dir, cert);
        s_key (path, "public-key", pub);
        s_key (path, "secret-key", sec);
        zmq_setsockopt (s, ZMQ_CURVE_SERVERKEY, server_pub, 40);
        zmq_setsockopt (s, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt (s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    ck_assert_int_eq (zmq_connect (s, s_endpoint), 0);
    return s;
}

/* 1 when a health request on S is answered ready within the socket's timeout. */
static int s_health (void *s)
{
    Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
    Sigserve__V1__HealthRequest h = SIGSERVE__V1__HEALTH_REQUEST__INIT;
    req.body_case = SIGSERVE__V1__REQUEST__BODY_HEALTH;
    req.health = &h;
    uint8_t buf[512];
    size_t len = sigserve__v1__request__pack (&req, buf);
    zmq_send (s, buf, len, ZMQ_DONTWAIT);
    int n = zmq_recv (s, buf, sizeof buf, 0);
    if (n <= 0)
        return 0;
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, (size_t) n, buf);
    int ok = r && r->body_case == SIGSERVE__V1__REPLY__BODY_HEALTH && r->health->ready;
    if (r)
        sigserve__v1__reply__free_unpacked (r, NULL);
    return ok;
}

static char *s_write_config (const char *name, const char *curve)
{
    char json[8192];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"%s\"], \"log_level\": \"info\", \"stats_interval_s\": 0,"
              "              \"curve\": %s },"
              "  \"models\": [ { \"name\": \"tick_mlp\", \"backend\": \"cpu\", \"weights\": \"%s/models/tick_mlp.safetensors\","
              "    \"layers\": [ { \"weight\": \"0.weight\" }, { \"weight\": \"2.weight\" }, { \"weight\": \"4.weight\" } ] } ] }",
              s_endpoint, curve, tu_build_abs ());
    return tu_write_file (s_dir, name, json, -1);
}

static void s_setup (void)
{
    char *dir = tu_tmpdir ();
    snprintf (s_dir, sizeof s_dir, "%s", dir);
    free (dir);
    snprintf (s_endpoint, sizeof s_endpoint, "tcp://127.0.0.1:%d", tu_free_port ());
    s_keygen ("server");
    s_keygen ("alice");
    s_keygen ("mallory");
    s_keygen ("bob");
    char cmd[8192], out[256];
    snprintf (cmd, sizeof cmd, "mkdir %s/allowed && cp %s/alice %s/allowed/alice.cert", s_dir, s_dir, s_dir);
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 0);
    char curve[4800];
    snprintf (curve, sizeof curve, "{ \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"allowed\" }");
    char *path = s_write_config ("curve.json", curve);
    snprintf (s_config, sizeof s_config, "%s", path);
    free (path);
}

static void s_teardown (void) { tu_remove_tree (s_dir); }

static void s_ctx_new (void) { s_ctx = zmq_ctx_new (); }
static void s_ctx_term (void) { zmq_ctx_term (s_ctx); s_ctx = NULL; }

/* Starts the server on s_config; waits until alice (allowlisted) gets an answer. */
static pid_t s_start (void)
{
    pid_t pid = fork ();
    if (pid == 0) {
        char bin[4096], log[2400];
        snprintf (bin, sizeof bin, "%s/sigserve", tu_build_dir ());
        snprintf (log, sizeof log, "%s/server.log", s_dir);
        FILE *f = freopen (log, "a", stderr);
        (void) f;
        execl (bin, bin, "--config", s_config, (char *) NULL);
        _exit (127);
    }
    void *alice = s_client ("alice");
    int ready = 0;
    for (int i = 0; i < 40 && !ready; i++)
        ready = s_health (alice);
    zmq_close (alice);
    ck_assert_msg (ready, "the allowlisted client got no answer");
    return pid;
}

START_TEST (allowlisted_served_others_get_nothing)
{
    pid_t pid = s_start ();
    void *alice = s_client ("alice"), *mallory = s_client ("mallory"), *plain = s_client (NULL);
    ck_assert_int_eq (s_health (mallory), 0);       /* a key not in the folder */
    ck_assert_int_eq (s_health (plain), 0);         /* no CURVE at all */
    ck_assert_int_eq (s_health (alice), 1);         /* and the server still serves */
    /* Infer works over CURVE, and the reply is the model's. */
    uint8_t buf[4096];
    float f[512] = { 0.25f };
    size_t len = tu_pack_infer (buf, sizeof buf, "tick_mlp", f, 512, 1, 11, 0);
    zmq_send (alice, buf, len, 0);
    int n = zmq_recv (alice, buf, sizeof buf, 0);
    ck_assert_int_gt (n, 0);
    Sigserve__V1__Reply *r = sigserve__v1__reply__unpack (NULL, (size_t) n, buf);
    ck_assert_int_eq (r->infer->status, SIGSERVE__V1__STATUS__STATUS_OK);
    ck_assert_uint_eq (r->infer->request_id, 11);
    sigserve__v1__reply__free_unpacked (r, NULL);
    /* bob, added to the folder, is served after a reload */
    void *early = s_client ("bob");
    ck_assert_int_eq (s_health (early), 0);
    zmq_close (early);
    char cmd[8192], out[256];
    snprintf (cmd, sizeof cmd, "cp %s/bob %s/allowed/bob.cert", s_dir, s_dir);
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 0);
    kill (pid, SIGHUP);
    void *bob = s_client ("bob");
    int served = 0;
    for (int i = 0; i < 10 && !served; i++)
        served = s_health (bob);
    ck_assert (served);
    ck_assert_int_eq (s_health (mallory), 0);
    zmq_close (alice);
    zmq_close (mallory);
    zmq_close (plain);
    zmq_close (bob);
    ck_assert_int_eq (tu_server_stop (pid), 0);
    /* The start proved that an unknown key is refused, and said so. */
    char log[2400], text[65536] = "";
    snprintf (log, sizeof log, "%s/server.log", s_dir);
    FILE *fl = fopen (log, "r");
    size_t got = fread (text, 1, sizeof text - 1, fl);
    text[got] = 0;
    fclose (fl);
    ck_assert_ptr_nonnull (strstr (text, "a client with an unknown key was refused, as it must be"));
}
END_TEST

/* A configuration that asks for CURVE and cannot have it: exit 2 naming the key, no fallback. */
START_TEST (configured_but_unusable_refuses_to_start)
{
    const struct { const char *curve; const char *expect; } cases[] = {
        { "{ \"secret_key_file\": \"nope_secret\", \"allowed_clients\": \"allowed\" }",
          "server.curve.secret_key_file: " },
        { "{ \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"no-such-folder\" }",
          "server.curve.allowed_clients: " },
        { "{ \"secret_key_file\": \"server_secret\", \"allowed_clients\": \"server\" }",
          "not a folder" },
        { "{ \"secret_key_file\": \"public-only\", \"allowed_clients\": \"allowed\" }",
          "holds no secret key" },
        { "{ \"secret_key_file\": \"garbage\", \"allowed_clients\": \"allowed\" }",
          "cannot be read as a czmq certificate" },
    };
    char cmd[8192], out[4096];
    snprintf (cmd, sizeof cmd, "cp %s/alice %s/public-only && printf 'not a certificate' > %s/garbage", s_dir, s_dir, s_dir);
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = s_write_config ("bad.json", cases[i].curve);
        snprintf (cmd, sizeof cmd, "%s/sigserve --config %s 2>&1", tu_build_dir (), path);
        int rc = s_run (cmd, out, sizeof out);
        ck_assert_msg (rc == 2, "case %zu: exit %d: %s", i, rc, out);
        ck_assert_msg (strstr (out, cases[i].expect), "case %zu: %s", i, out);
        free (path);
    }
    /* inproc has no security handshake: refused with CURVE */
    char json[8192];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"inproc://x\"], \"curve\": { \"secret_key_file\": \"server_secret\","
              "  \"allowed_clients\": \"allowed\" } },"
              "  \"models\": [ { \"name\": \"m\", \"backend\": \"cpu\", \"weights\": \"%s/models/tick_mlp.safetensors\","
              "    \"layers\": [ { \"weight\": \"0.weight\" }, { \"weight\": \"2.weight\" }, { \"weight\": \"4.weight\" } ] } ] }",
              tu_build_abs ());
    char *path = tu_write_file (s_dir, "inproc.json", json, -1);
    snprintf (cmd, sizeof cmd, "%s/sigserve --config %s 2>&1", tu_build_dir (), path);
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 2);
    ck_assert_ptr_nonnull (strstr (out, "inproc endpoints make no security handshake"));
    free (path);
}
END_TEST

START_TEST (keygen_writes_czmq_certificates)
{
    char path[2400];
    struct stat st;
    snprintf (path, sizeof path, "%s/server_secret", s_dir);
    ck_assert_int_eq (stat (path, &st), 0);
    ck_assert_int_eq (st.st_mode & 0777, 0600);
    char pub[41], pub2[41], sec[41];
    s_key (path, "public-key", pub);
    s_key (path, "secret-key", sec);
    snprintf (path, sizeof path, "%s/server", s_dir);
    s_key (path, "public-key", pub2);
    ck_assert_str_eq (pub, pub2);
    FILE *f = fopen (path, "r");
    char text[2048];
    size_t n = fread (text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose (f);
    ck_assert_ptr_null (strstr (text, "secret-key"));   /* the public file holds no secret */
    ck_assert_ptr_nonnull (strstr (text, "created-by = \"sigserve"));
    char cmd[4600], out[1024];
    snprintf (cmd, sizeof cmd, "%s/sigserve --keygen /no/such/folder/x 2>&1", tu_build_dir ());
    ck_assert_int_eq (s_run (cmd, out, sizeof out), 2);
    ck_assert_ptr_nonnull (strstr (out, "sigserve: --keygen: cannot write /no/such/folder/x"));
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("curve");
    TCase *tc = tcase_create ("curve");
    tcase_add_unchecked_fixture (tc, s_setup, s_teardown);
    tcase_add_checked_fixture (tc, s_ctx_new, s_ctx_term);
    tcase_set_timeout (tc, 120);
    tcase_add_test (tc, keygen_writes_czmq_certificates);
    tcase_add_test (tc, allowlisted_served_others_get_nothing);
    tcase_add_test (tc, configured_but_unusable_refuses_to_start);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
