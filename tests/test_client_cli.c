/* The sigclient CLI against the real sigserve binary over tcp loopback: infer from a file and from
 * stdin, --random rows, outputs checked against the float64 reference (within their forward error
 * bounds, tolerance.h), health and models, the exit codes (1: an error status, 2: usage, 3: no
 * answer in --timeout, or CURVE on one side only) and --engine. test_client.c has libsigclient (tests/client_tests.h: the
 * fixture and the helpers the two share).
 *
 * Every case runs twice, once per engine (a TCase each: zmtp, libzmq): the CLI is run with
 * --engine. */
#define _GNU_SOURCE
#include "client_tests.h"

/* ---- the CLI ---- */

/* Runs BUILD/sigclient --engine (the TCase's) ARGS (stdin from STDIN_PATH when given); stdout to
 * OUT, stderr to ERR. Returns the exit code. */
static int s_cli (const char *args, const char *stdin_path, char *out, size_t out_cap, char *err, size_t err_cap)
{
    char err_path[4200], cmd[16384];
    snprintf (err_path, sizeof err_path, "%s/cli.stderr", s_fx.dir);
    snprintf (cmd, sizeof cmd, "'%s/sigclient' --engine %s %s <'%s' 2>'%s'", tu_build_dir (),
              sigclient_engine_name (s_engine), args, stdin_path ? stdin_path : "/dev/null", err_path);
    FILE *p = popen (cmd, "r");
    ck_assert_ptr_nonnull (p);
    size_t n = fread (out, 1, out_cap - 1, p);
    out[n] = 0;
    int st = pclose (p);
    FILE *e = fopen (err_path, "r");
    ck_assert_ptr_nonnull (e);
    n = fread (err, 1, err_cap - 1, e);
    err[n] = 0;
    fclose (e);
    return WIFEXITED (st) ? WEXITSTATUS (st) : -1;
}

/* Parses whitespace-separated numbers ("%.9g") from TEXT: returns how many, and the line count. */
static size_t s_parse_outputs (const char *text, float *vals, size_t cap, int *lines)
{
    size_t n = 0;
    *lines = 0;
    for (const char *p = text; *p; p++)
        if (*p == '\n') (*lines)++;
    const char *p = text;
    while (*p && n < cap) {
        char *end;
        double v = strtod (p, &end);
        if (end == p) break;
        vals[n++] = (float) v;
        p = end;
    }
    while (*p == ' ' || *p == '\n') p++;
    ck_assert_msg (*p == 0, "unparsed CLI output: \"%s\"", p);
    return n;
}

/* A features file: 512 random numbers, spaces, commas and newlines between them, a comment. */
static char *s_write_features (const char *name, float *in)
{
    size_t cap = TICK_IN * 24 + 64, len = 0;
    char *text = malloc (cap);
    len += (size_t) snprintf (text + len, cap - len, "# %d features\n", TICK_IN);
    s_random (in, TICK_IN);
    for (int i = 0; i < TICK_IN; i++)
        len += (size_t) snprintf (text + len, cap - len, "%.9g%s", (double) in[i],
                                  i % 8 == 7 ? "\n" : i % 3 ? " " : ", ");
    char *path = tu_write_file (s_fx.dir, name, text, (long) len);
    ck_assert_ptr_nonnull (path);
    free (text);
    return path;
}

START_TEST (cli_infer_file_and_stdin_match_reference)
{
    enum { FILES = 4 };
    float in[FILES][TICK_IN], from_file[FILES], from_stdin[FILES];
    collected_t cf = { 0 }, cs = { 0 };
    char args[8192], out[4096], err[4096];
    for (int k = 0; k < FILES; k++) {
        char name[32];
        snprintf (name, sizeof name, "features%d.txt", k);
        char *path = s_write_features (name, in[k]);
        int lines;
        snprintf (args, sizeof args, "--endpoint %s infer --model tick_mlp --file '%s'", s_fx.endpoint[0], path);
        ck_assert_msg (s_cli (args, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
        ck_assert_uint_eq (s_parse_outputs (out, &from_file[k], 1, &lines), 1);
        ck_assert_int_eq (lines, 1);
        ck_assert_msg (strstr (err, "status=STATUS_OK") && strstr (err, "model_version=1 backend=cpu"), "%s", err);
        s_collect (&cf, s_fx.tick, in[k], 1, &from_file[k], 1);

        snprintf (args, sizeof args, "--endpoint %s --timeout 5000 infer --model tick_mlp --stdin", s_fx.endpoint[1]);
        ck_assert_msg (s_cli (args, path, out, sizeof out, err, sizeof err) == 0, "%s", err);
        ck_assert_uint_eq (s_parse_outputs (out, &from_stdin[k], 1, &lines), 1);
        ck_assert_int_eq (lines, 1);
        s_collect (&cs, s_fx.tick, in[k], 1, &from_stdin[k], 1);
        /* same input, same server arithmetic, and %.9g round-trips a float exactly */
        ck_assert_msg (from_file[k] == from_stdin[k], "--file %.9g, --stdin %.9g", (double) from_file[k],
                       (double) from_stdin[k]);
        free (path);
    }
    s_expect_collected_match (&cf, "sigclient --file");
    s_expect_collected_match (&cs, "sigclient --stdin");
}
END_TEST

START_TEST (cli_infer_random_rows_3)
{
    char args[8192], out[4096], err[4096];
    float vals[8];
    int lines;
    collected_t c = { 0 };
    for (int k = 0; k < 2; k++) {   /* two seeds: 6 outputs compared together */
        uint64_t seed = s_seed0 % 1000000 + 2 + (uint64_t) k;
        snprintf (args, sizeof args, "--endpoint %s infer --model tick_mlp --random 512 --rows 3 --seed %llu",
                  s_fx.endpoint[k], (unsigned long long) seed);
        ck_assert_msg (s_cli (args, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
        ck_assert_uint_eq (s_parse_outputs (out, vals, 8, &lines), 3);
        ck_assert_int_eq (lines, 3);
        ck_assert_ptr_nonnull (strstr (err, "rows=3"));
        /* --random N: uniform in [-1, 1) from the seed, as the usage text says */
        float in[3 * TICK_IN];
        uint64_t state = seed;
        for (int i = 0; i < 3 * TICK_IN; i++)
            in[i] = rng_uniform (&state, -1.0f, 1.0f);
        s_collect (&c, s_fx.tick, in, 3, vals, 3);
    }
    s_expect_collected_match (&c, "sigclient --random 512 --rows 3");
    /* odd: 3 outputs per row, one row per line */
    snprintf (args, sizeof args, "--endpoint %s infer --model odd --random 33 --rows 2", s_fx.endpoint[1]);
    ck_assert_msg (s_cli (args, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq (s_parse_outputs (out, vals, 8, &lines), 6);
    ck_assert_int_eq (lines, 2);
}
END_TEST

START_TEST (cli_exit_codes)
{
    char args[8192], out[4096], err[4096];
    float in[TICK_IN];
    char *good = s_write_features ("good.txt", in);
    /* 1: the server answered with an error status */
    snprintf (args, sizeof args, "--endpoint %s infer --model nope --file '%s'", s_fx.endpoint[0], good);
    ck_assert_int_eq (s_cli (args, NULL, out, sizeof out, err, sizeof err), 1);
    ck_assert_msg (strstr (err, "STATUS_UNKNOWN_MODEL")
                   && strstr (err, "model: \"nope\" is not served here (served: tick_mlp, odd)"), "%s", err);
    ck_assert_str_eq (out, "");
    /* 1 as well: a wrong feature count */
    snprintf (args, sizeof args, "--endpoint %s infer --model odd --file '%s'", s_fx.endpoint[0], good);
    ck_assert_int_eq (s_cli (args, NULL, out, sizeof out, err, sizeof err), 1);
    ck_assert_msg (strstr (err, "STATUS_BAD_SHAPE"), "%s", err);
    /* 2: usage errors */
    snprintf (args, sizeof args, "--endpoint %s infer --file '%s'", s_fx.endpoint[0], good);
    ck_assert_int_eq (s_cli (args, NULL, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg (strstr (err, "infer needs --model") && strstr (err, "usage: sigclient"), "%s", err);
    ck_assert_int_eq (s_cli ("frobnicate", NULL, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg (strstr (err, "unknown command 'frobnicate'"), "%s", err);
    ck_assert_int_eq (s_cli ("--timeout x health", NULL, out, sizeof out, err, sizeof err), 2);
    ck_assert_int_eq (s_cli ("", NULL, out, sizeof out, err, sizeof err), 2);
    ck_assert_int_eq (s_cli ("--help", NULL, out, sizeof out, err, sizeof err), 0);
    ck_assert_ptr_nonnull (strstr (out, "exit codes:"));
    /* 2: a file with a non-number */
    char *bad = tu_write_file (s_fx.dir, "bad.txt", "0.5 1.25\n-3 abc 4\n", -1);
    snprintf (args, sizeof args, "--endpoint %s infer --model tick_mlp --file '%s'", s_fx.endpoint[0], bad);
    ck_assert_int_eq (s_cli (args, NULL, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg (strstr (err, "bad.txt:2: not a number: 'abc'"), "%s", err);
    /* 2: a missing file */
    snprintf (args, sizeof args, "--endpoint %s infer --model tick_mlp --file '%s/absent.txt'", s_fx.endpoint[0], s_fx.dir);
    ck_assert_int_eq (s_cli (args, NULL, out, sizeof out, err, sizeof err), 2);
    /* 3: nobody listens; the timeout bounds the wait */
    snprintf (args, sizeof args, "--endpoint %s --timeout 300 infer --model tick_mlp --file '%s'", s_dead_endpoint, good);
    double t0 = s_now ();
    ck_assert_int_eq (s_cli (args, NULL, out, sizeof out, err, sizeof err), 3);
    double took = s_now () - t0;
    ck_assert_msg (strstr (err, "timed out after 300 ms"), "%s", err);
    ck_assert_msg (took < 2.0, "sigclient took %.3f s with --timeout 300", took);
    snprintf (args, sizeof args, "--endpoint %s --timeout 300 health", s_dead_endpoint);
    ck_assert_int_eq (s_cli (args, NULL, out, sizeof out, err, sizeof err), 3);
    /* 3 as well, at once: CURVE keys for a server without CURVE, and what to leave out */
    snprintf (args, sizeof args, "'%s/sigserve' --keygen '%s/cli-key' >/dev/null", tu_build_dir (), s_fx.dir);
    ck_assert_int_eq (system (args), 0);
    snprintf (args, sizeof args, "--endpoint %s --timeout 60000 --curve-server '%s/cli-key' --curve-client "
              "'%s/cli-key_secret' health", s_fx.endpoint[0], s_fx.dir, s_fx.dir);
    ck_assert_int_eq (s_cli (args, NULL, out, sizeof out, err, sizeof err), 3);
    char want[512];
    snprintf (want, sizeof want, "sigclient: %s: the server does not use CURVE, and this client has CURVE keys (leave "
              "out --curve-server and --curve-client)\n", s_fx.endpoint[0]);
    ck_assert_str_eq (err, want);
    free (good);
    free (bad);
}
END_TEST

START_TEST (cli_health_and_models)
{
    char args[8192], out[4096], err[4096];
    snprintf (args, sizeof args, "--endpoint %s health", s_fx.endpoint[0]);
    ck_assert_msg (s_cli (args, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
    ck_assert_msg (strncmp (out, "live=1 ready=1 version=", 23) == 0, "%s", out);
    ck_assert_str_eq (out, "live=1 ready=1 version=" SIGSERVE_VERSION "\n");

    snprintf (args, sizeof args, "--endpoint %s --endpoint %s models", s_fx.endpoint[0], s_fx.endpoint[1]);
    ck_assert_msg (s_cli (args, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
    int found = 0;
    for (char *line = strtok (out, "\n"); line; line = strtok (NULL, "\n")) {
        char name[64], version[64], backend[16], kernel[32], avail[8];
        unsigned in, outs, max_rows;
        if (sscanf (line, "%63s %63s %15s %31s %u %u %u %7s", name, version, backend, kernel, &in, &outs, &max_rows,
                    avail) != 8)
            continue;
        if (strcmp (name, "tick_mlp") == 0) {
            ck_assert_uint_eq (in, 512);
            ck_assert_uint_eq (outs, 1);
            ck_assert_str_eq (backend, "cpu");
            ck_assert_str_eq (avail, "yes");
            found++;
        } else if (strcmp (name, "odd") == 0) {
            ck_assert_uint_eq (in, ODD_IN);
            ck_assert_uint_eq (outs, ODD_OUT);
            ck_assert_str_eq (version, "7b");
            found++;
        }
    }
    ck_assert_int_eq (found, 2);
}
END_TEST

/* --engine: a bad value is a usage error naming what it takes; --help tells of it, --version keeps
 * its prefix (the Python test reads it); either engine reaches the server. */
START_TEST (cli_engine_option)
{
    char args[8192], out[4096], err[4096];
    ck_assert_int_eq (s_cli ("--engine zeromq health", NULL, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg (strstr (err, "sigclient: bad --engine 'zeromq' (zmtp or libzmq)\n")
                   && strstr (err, "usage: sigclient"), "%s", err);
    ck_assert_int_eq (s_cli ("health --engine", NULL, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg (strstr (err, "--engine needs a value"), "%s", err);
    ck_assert_int_eq (s_cli ("--help", NULL, out, sizeof out, err, sizeof err), 0);
    ck_assert_msg (strstr (out, "[--engine zmtp|libzmq]") && strstr (out, "  --engine E "), "%s", out);
    ck_assert_int_eq (s_cli ("--version", NULL, out, sizeof out, err, sizeof err), 0);
    const char *prefix = "sigclient " SIGSERVE_VERSION " (libzmq ";
    ck_assert_msg (strncmp (out, prefix, strlen (prefix)) == 0, "%s", out);
    for (int e = 0; e < 2; e++) {   /* the last --engine counts */
        snprintf (args, sizeof args, "--endpoint %s --engine %s health", s_fx.endpoint[e],
                  sigclient_engine_name (e ? SIGCLIENT_ENGINE_LIBZMQ : SIGCLIENT_ENGINE_ZMTP));
        ck_assert_msg (s_cli (args, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
        ck_assert_str_eq (out, "live=1 ready=1 version=" SIGSERVE_VERSION "\n");
    }
}
END_TEST

int main (void)
{
    s_seed_init ("test_client_cli");
    Suite *s = suite_create ("client_cli");
    for (size_t e = 0; e < 2; e++) {
        TCase *tc = s_engine_tcase (e);
        tcase_add_test (tc, cli_infer_file_and_stdin_match_reference);
        tcase_add_test (tc, cli_infer_random_rows_3);
        tcase_add_test (tc, cli_exit_codes);
        tcase_add_test (tc, cli_health_and_models);
        tcase_add_test (tc, cli_engine_option);
        suite_add_tcase (s, tc);
    }
    return tu_run_suite (s);
}
