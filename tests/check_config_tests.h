/* What the suites that run sigserve --check-config on tables of configs share (test_config_advice.c,
 * test_check_config.c): a case is a bad config, the exact message it gets, and the fixes the message
 * offers, each applied to the config as edits of its JSON and then passing ("ok", exit 0). The words of
 * the message that offer a fix are asserted in the message, so the two cannot drift apart.
 *
 * Configs are written with single quotes (config_tests.h's s_json swaps them); {DIR} is the suite's
 * folder (check_dir) and {DEMO} the demo model's weights, in configs, edits and messages alike. Each
 * suite's binary includes it once: everything here is static. */
#ifndef SIGSERVE_CHECK_CONFIG_TESTS_H
#define SIGSERVE_CHECK_CONFIG_TESTS_H

#define _GNU_SOURCE
#include "config_tests.h"

#include <cJSON.h>
#include <grp.h>
#include <sys/wait.h>

#define FIXES_MAX 3
#define EDITS_MAX 3

/* One fix a message offers: SAID, the words of the message that offer it; EDITS, "PATH=JSON" applied
 * to the config ("PATH=" removes the key; an array index one past the end appends). */
typedef struct {
    const char *said;
    const char *edits[EDITS_MAX];
} fix_t;

typedef struct {
    const char *what;
    const char *json;
    const char *message;            /* the whole message, to the end of its line */
    fix_t fixes[FIXES_MAX];
} check_case_t;
/* A message that offers no fix. */
#define NO_FIXES { { NULL, { NULL } } }

static char *check_dir;             /* set by the suite's setup */

/* TEXT with {DIR} and {DEMO} put in; the caller frees it. */
static char *check_fill (const char *text)
{
    char demo[2100];
    snprintf (demo, sizeof demo, "%s/models/tick_mlp.safetensors", tu_build_abs ());
    const char *const keys[] = { "{DIR}", "{DEMO}" }, *values[] = { check_dir, demo };
    char *out = strdup (text);
    for (int k = 0; k < 2; k++)
        for (char *at; (at = strstr (out, keys[k])) != NULL;) {
            char *next = NULL;
            ck_assert_int_gt (asprintf (&next, "%.*s%s%s", (int) (at - out), out, values[k], at + strlen (keys[k])), 0);
            free (out);
            out = next;
        }
    return out;
}

/* Applies EDIT ("a.0.b=JSON") to ROOT. */
static void check_edit (cJSON *root, const char *edit)
{
    char path[512], *value;
    snprintf (path, sizeof path, "%s", edit);
    ck_assert_ptr_nonnull (value = strchr (path, '='));
    *value++ = '\0';
    char *last = strrchr (path, '.');
    ck_assert_ptr_nonnull (last);
    *last++ = '\0';
    cJSON *at = root;
    for (char *save = NULL, *tok = strtok_r (path, ".", &save); tok; tok = strtok_r (NULL, ".", &save))
        ck_assert_msg ((at = cJSON_IsArray (at) ? cJSON_GetArrayItem (at, atoi (tok))
                                                : cJSON_GetObjectItemCaseSensitive (at, tok)) != NULL,
                       "edit %s: no %s", edit, tok);
    char *swapped = s_json (value), *filled = check_fill (swapped);
    cJSON *v = *filled ? cJSON_Parse (filled) : NULL;
    ck_assert_msg (!*filled || v, "edit %s: the value does not parse", edit);
    if (cJSON_IsArray (at)) {
        int i = atoi (last);
        if (!v)
            cJSON_DeleteItemFromArray (at, i);
        else if (i == cJSON_GetArraySize (at))
            cJSON_AddItemToArray (at, v);
        else
            cJSON_ReplaceItemInArray (at, i, v);
    } else if (!v)
        cJSON_DeleteItemFromObjectCaseSensitive (at, last);
    else if (cJSON_GetObjectItemCaseSensitive (at, last))
        cJSON_ReplaceItemInObjectCaseSensitive (at, last, v);
    else
        cJSON_AddItemToObject (at, last, v);
    free (swapped);
    free (filled);
}

/* The config of case JSON (quotes swapped, {DIR} and {DEMO} put in) with EDITS (may be NULL) applied;
 * the caller frees it. */
static char *check_edited (const char *json, const char *const *edits)
{
    char *swapped = s_json (json), *filled = check_fill (swapped);
    free (swapped);
    cJSON *root = cJSON_Parse (filled);
    ck_assert_msg (root != NULL, "the case's JSON does not parse: %s", filled);
    free (filled);
    for (int e = 0; e < EDITS_MAX && edits && edits[e]; e++)
        check_edit (root, edits[e]);
    char *text = cJSON_Print (root);
    cJSON_Delete (root);
    return text;
}

/* sigserve --check-config on TEXT written as check_dir/NAME, as user UID (-1: this process's): the
 * exit code, stdout and stderr in OUT. */
static int check_config_as (int uid, const char *name, const char *text, char *out, size_t cap)
{
    char *path = tu_write_file (check_dir, name, text, -1);
    char bin[2300];
    snprintf (bin, sizeof bin, "%s/sigserve", tu_build_dir ());
    int fds[2];
    ck_assert_int_eq (pipe (fds), 0);
    pid_t pid = fork ();
    ck_assert_int_ge (pid, 0);
    if (pid == 0) {
        dup2 (fds[1], 1);
        dup2 (fds[1], 2);
        close (fds[0]);
        if (uid >= 0 && (setgroups (0, NULL) != 0 || setgid ((gid_t) uid) != 0 || setuid ((uid_t) uid) != 0))
            _exit (126);
        execl (bin, bin, "--check-config", path, (char *) NULL);
        _exit (127);
    }
    close (fds[1]);
    size_t n = 0;
    for (ssize_t r; n < cap - 1 && (r = read (fds[0], out + n, cap - 1 - n)) > 0;)
        n += (size_t) r;
    out[n] = '\0';
    close (fds[0]);
    int status = 0;
    ck_assert_int_eq (waitpid (pid, &status, 0), pid);
    free (path);
    return WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
}

static int check_config (const char *name, const char *text, char *out, size_t cap)
{
    return check_config_as (-1, name, text, out, cap);
}

/* Case C: its config gets its message (MESSAGE: C's, with {DIR} and {DEMO} put in; exit 2), and each
 * fix it offers, applied, passes. */
static void check_each_fix_passes (const check_case_t *c, const char *message)
{
    char out[16384];
    char *bad = check_edited (c->json, NULL), *want = check_fill (message);
    ck_assert_msg (check_config ("bad.json", bad, out, sizeof out) == 2, "case \"%s\" did not exit 2:\n%s", c->what, out);
    char line[2200];
    snprintf (line, sizeof line, "%s\n", want);
    ck_assert_msg (strstr (out, line) != NULL, "case \"%s\":\n  got      %s  expected %s", c->what, out, line);
    for (int f = 0; f < FIXES_MAX && c->fixes[f].said; f++) {
        const fix_t *fix = &c->fixes[f];
        char *said = check_fill (fix->said);
        ck_assert_msg (strstr (want, said) != NULL, "case \"%s\": the message does not say \"%s\"", c->what, said);
        char *fixed = check_edited (c->json, fix->edits);
        int rc = check_config ("fixed.json", fixed, out, sizeof out);
        ck_assert_msg (rc == 0 && strstr (out, ": ok: "), "case \"%s\": fix \"%s\" does not pass (exit %d):\n%s\n%s",
                       c->what, said, rc, fixed, out);
        free (fixed);
        free (said);
    }
    free (want);
    free (bad);
}

#endif
