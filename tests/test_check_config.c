/* sigserve --check-config refuses what the start would refuse, short of binding (issue 39, part 4):
 * an endpoint address the transport cannot bind (a host name gets the address to use; an address not
 * on this host), two endpoints or the HTTP endpoint on one port, an ipc:// path in a missing folder or
 * on a file, CURVE files that are missing, no certificate, or unreadable by the server's user, and
 * weights unreadable by it. Each with its exact message (the start's own: one check serves both), and
 * each fix the message offers, applied, passes. Its "ok" line says that binding is checked at start,
 * and it holds: a port another process holds passes the check and fails the start. Runs from the
 * repository root; as root, the unreadable files are read as the user nobody. */
#include "check_config_tests.h"

#include <netinet/in.h>
#include <sys/socket.h>

#define DEMO_LAYERS "'layers': [{'weight': '0.weight', 'activation': 'relu'}, {'weight': '2.weight', 'activation': " \
                    "'relu'}, {'weight': '4.weight'}]"
#define MODELS "'models': [{'name': 'm', 'backend': 'cpu', 'weights': '{DEMO}', " DEMO_LAYERS "}]"
#define WITH_SERVER_KEYS(keys) "{'server': {" keys "}, " MODELS "}"
#define CURVE(key, folder) "'curve': {'secret_key_file': '" key "', 'allowed_clients': '" folder "'}"

static const check_case_t s_cases[] = {
    /* what the transport cannot bind */
    { "a host name", WITH_SERVER_KEYS ("'endpoints': ['tcp://localhost:5562']"),
      "server.endpoints[0]: cannot bind tcp://localhost:5562: No such device (ZeroMQ binds an address or an interface "
      "name, not a host name: \"localhost\" is 127.0.0.1, so use tcp://127.0.0.1:5562, or tcp://*:5562 for every "
      "interface)",
      { { "use tcp://127.0.0.1:5562", { "server.endpoints.0='tcp://127.0.0.1:5562'" } },
        { "or tcp://*:5562", { "server.endpoints.0='tcp://*:5562'" } } } },
    { "a host name on libzmq", WITH_SERVER_KEYS ("'endpoints': ['tcp://localhost:5562'], 'transport': 'libzmq'"),
      "server.endpoints[0]: cannot bind tcp://localhost:5562: No such device (ZeroMQ binds an address or an interface "
      "name, not a host name: \"localhost\" is 127.0.0.1, so use tcp://127.0.0.1:5562, or tcp://*:5562 for every "
      "interface)",
      { { "use tcp://127.0.0.1:5562", { "server.endpoints.0='tcp://127.0.0.1:5562'" } },
        { "or tcp://*:5562", { "server.endpoints.0='tcp://*:5562'" } } } },
    { "an address not on this host", WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5561', 'tcp://203.0.113.7:5562']"),
      "server.endpoints[1]: cannot bind tcp://203.0.113.7:5562: Cannot assign requested address", NO_FIXES },

    /* one port taken twice */
    { "two endpoints on one port", WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5562', 'tcp://*:5562']"),
      "server.endpoints[1]: tcp://*:5562 would listen on port 5562 where server.endpoints[0] (tcp://127.0.0.1:5562) "
      "listens; give one of them another port",
      { { "give one of them another port", { "server.endpoints.1='tcp://*:5563'" } } } },
    { "an interface and its address", WITH_SERVER_KEYS ("'endpoints': ['tcp://lo:5562', 'tcp://127.0.0.1:5562']"),
      "server.endpoints[1]: tcp://127.0.0.1:5562 would listen on port 5562 where server.endpoints[0] (tcp://lo:5562) "
      "listens; give one of them another port",
      { { "give one of them another port", { "server.endpoints.0='tcp://lo:5563'" } } } },
    { "the HTTP endpoint on an endpoint's port", WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5562'], "
                                                                   "'http': 'localhost:5562'"),
      "server.http: localhost:5562 would listen on port 5562 where server.endpoints[0] (tcp://127.0.0.1:5562) listens; "
      "give one of them another port",
      { { "give one of them another port", { "server.http='localhost:5563'" } } } },

    /* ipc:// paths */
    { "an ipc:// folder that does not exist", WITH_SERVER_KEYS ("'endpoints': ['ipc:///nonexistent-sigserve-folder/s']"),
      "server.endpoints[0]: cannot bind ipc:///nonexistent-sigserve-folder/s: the folder /nonexistent-sigserve-folder "
      "does not exist", NO_FIXES },
    { "an ipc:// path on a file", WITH_SERVER_KEYS ("'endpoints': ['ipc://{DIR}/plain']"),
      "server.endpoints[0]: cannot bind ipc://{DIR}/plain: {DIR}/plain exists and is not a socket", NO_FIXES },

    /* CURVE's files (the start read them only when it started; --check-config never did) */
    { "no secret key file", WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5562'], " CURVE ("{DIR}/nokey", "{DIR}/clients")),
      "server.curve.secret_key_file: {DIR}/nokey: No such file or directory", NO_FIXES },
    { "a public certificate for the secret key", WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5562'], "
                                                                   CURVE ("{DIR}/public_only", "{DIR}/clients")),
      "server.curve.secret_key_file: {DIR}/public_only holds no secret key (a public certificate); give the _secret "
      "file sigserve --keygen wrote",
      { { "give the _secret file sigserve --keygen wrote", { "server.curve.secret_key_file='{DIR}/server_secret'" } } } },
    { "no certificate at all", WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5562'], "
                                                 CURVE ("{DIR}/plain", "{DIR}/clients")),
      "server.curve.secret_key_file: {DIR}/plain: cannot be read as a czmq certificate (make one with sigserve --keygen "
      "PATH and give PATH_secret)",
      { { "give PATH_secret", { "server.curve.secret_key_file='{DIR}/server_secret'" } } } },
    { "no allowlist folder", WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5562'], "
                                               CURVE ("{DIR}/server_secret", "{DIR}/noclients")),
      "server.curve.allowed_clients: {DIR}/noclients: No such file or directory", NO_FIXES },
    { "inproc with CURVE on libzmq", WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5562', 'inproc://x'], "
                                                       "'transport': 'libzmq', " CURVE ("{DIR}/server_secret", "{DIR}/clients")),
      "server.endpoints: inproc://x: inproc endpoints make no security handshake, so they cannot serve with "
      "server.curve; use tcp:// or ipc://",
      { { "use tcp://", { "server.endpoints.1='tcp://127.0.0.1:5563'" } },
        { "or ipc://", { "server.endpoints.1='ipc://@sigserve-check-config-test'" } } } },
};

START_TEST (refused_as_the_start_would_with_fixes_that_pass)
{
    check_each_fix_passes (&s_cases[_i], s_cases[_i].message);
}
END_TEST

/* The ok line says what is left to the start, and it is so: a port another process holds passes the
 * check, and the start fails on it with exit code 1. */
START_TEST (binding_is_left_to_the_start)
{
    int taker = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    ck_assert_int_eq (bind (taker, (struct sockaddr *) &a, sizeof a), 0);
    ck_assert_int_eq (listen (taker, 1), 0);
    ck_assert_int_eq (getsockname (taker, (struct sockaddr *) &a, &len), 0);
    char json[1024], out[16384], want[1024];
    snprintf (json, sizeof json, WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:%u']"), ntohs (a.sin_port));
    char *text = check_edited (json, NULL);
    ck_assert_int_eq (check_config ("taken.json", text, out, sizeof out), 0);
    snprintf (want, sizeof want, "%s/taken.json: ok: 1 endpoint(s), 1 model(s); binding is checked at start (a port "
              "another process holds fails it there)\n  m version 1: 512 -> 1, backend cpu, kernel loop, max_rows 16, "
              "instances 1\n", check_dir);
    ck_assert_msg (strstr (out, want) != NULL, "got %s\nexpected %s", out, want);
    char cmd[4400];
    snprintf (cmd, sizeof cmd, "%s/sigserve --config %s/taken.json 2>&1", tu_build_dir (), check_dir);
    FILE *p = popen (cmd, "r");
    size_t n = fread (out, 1, sizeof out - 1, p);
    out[n] = '\0';
    ck_assert_int_eq (WEXITSTATUS (pclose (p)), 1);
    snprintf (want, sizeof want, "server.endpoints: cannot bind tcp://127.0.0.1:%u: Address already in use",
              ntohs (a.sin_port));
    ck_assert_msg (strstr (out, want) != NULL, "%s", out);
    close (taker);
    free (text);
}
END_TEST

/* Files the server's user cannot read: as root, the check runs as nobody (uid 65534) on files only root
 * reads; otherwise as this user, on files made unreadable. */
START_TEST (files_the_server_user_cannot_read)
{
    const bool root = geteuid () == 0;
    const int uid = root ? 65534 : -1;
    char path[2300], out[16384], want[2600];
    /* nobody must reach the suite's folders and the config in them: the suite's own folder
     * (sigserve-test_check_config-XXXXXX) is opened to it, never $TMPDIR itself (where tu_tmpdir falls
     * back to when that folder could not be made) */
    if (root) {
        char parent[2300];
        snprintf (parent, sizeof parent, "%s", check_dir);
        *strrchr (parent, '/') = '\0';
        const char *base = strrchr (parent, '/');
        if (base && strncmp (base + 1, "sigserve-", 9) == 0)
            ck_assert_int_eq (chmod (parent, 0711), 0);
        ck_assert_int_eq (chmod (check_dir, 0711), 0);
    }
    /* weights: a copy only its owner reads */
    snprintf (path, sizeof path, "%s/private.safetensors", check_dir);
    char cmd[4800];
    snprintf (cmd, sizeof cmd, "cp %s/models/tick_mlp.safetensors %s && chmod %s %s", tu_build_abs (), path,
              root ? "600" : "000", path);
    ck_assert_int_eq (system (cmd), 0);
    char *text = check_edited ("{'server': {'endpoints': ['tcp://127.0.0.1:5562']}, 'models': [{'name': 'm', 'backend': "
                               "'cpu', 'weights': '{DIR}/private.safetensors', " DEMO_LAYERS "}]}", NULL);
    ck_assert_int_eq (check_config_as (uid, "weights.json", text, out, sizeof out), 2);
    snprintf (want, sizeof want, "model \"m\": %s: cannot open: Permission denied\n", path);
    ck_assert_msg (strstr (out, want) != NULL, "got %s\nexpected %s", out, want);
    free (text);
    /* the secret key (sigserve --keygen makes it 0600: root's, the server run as another user) */
    snprintf (path, sizeof path, "%s/server_secret", check_dir);
    if (!root)
        ck_assert_int_eq (chmod (path, 0), 0);
    text = check_edited (WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5562'], "
                                           CURVE ("{DIR}/server_secret", "{DIR}/clients")), NULL);
    ck_assert_int_eq (check_config_as (uid, "key.json", text, out, sizeof out), 2);
    snprintf (want, sizeof want, "server.curve.secret_key_file: %s: Permission denied (the server's user must read it)\n",
              path);
    ck_assert_msg (strstr (out, want) != NULL, "got %s\nexpected %s", out, want);
    ck_assert_int_eq (chmod (path, 0644), 0);
    free (text);
    /* the allowlist folder */
    snprintf (path, sizeof path, "%s/private_clients", check_dir);
    ck_assert_int_eq (mkdir (path, root ? 0700 : 0), 0);
    text = check_edited (WITH_SERVER_KEYS ("'endpoints': ['tcp://127.0.0.1:5562'], "
                                           CURVE ("{DIR}/server_secret", "{DIR}/private_clients")), NULL);
    ck_assert_int_eq (check_config_as (uid, "clients.json", text, out, sizeof out), 2);
    snprintf (want, sizeof want, "server.curve.allowed_clients: %s: Permission denied (the server's user must read it)\n",
              path);
    ck_assert_msg (strstr (out, want) != NULL, "got %s\nexpected %s", out, want);
    /* readable to it, the same config passes */
    ck_assert_int_eq (chmod (path, 0755), 0);
    ck_assert_int_eq (check_config_as (uid, "clients.json", text, out, sizeof out), 0);
    free (text);
}
END_TEST

static void s_setup (void)
{
    check_dir = tu_tmpdir ();
    char cmd[4600];
    snprintf (cmd, sizeof cmd, "%s/sigserve --keygen %s/server >/dev/null && cp %s/server %s/public_only && "
              "mkdir %s/clients && echo 'not a certificate' >%s/plain", tu_build_dir (), check_dir, check_dir, check_dir,
              check_dir, check_dir);
    ck_assert_int_eq (system (cmd), 0);
}

static void s_teardown (void)
{
    tu_remove_tree (check_dir);
    free (check_dir);
}

int main (void)
{
    Suite *s = suite_create ("check_config");
    TCase *tc = tcase_create ("check_config");
    tcase_add_unchecked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 120);
    tcase_add_loop_test (tc, refused_as_the_start_would_with_fixes_that_pass, 0,
                         (int) (sizeof s_cases / sizeof s_cases[0]));
    tcase_add_test (tc, binding_is_left_to_the_start);
    tcase_add_test (tc, files_the_server_user_cannot_read);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
