/* What the config.c suites share: test_config.c (what loads, and what it loads to) and
 * test_config_errors.c (what does not, and the message it gives). A config is written in the tests
 * with single quotes; s_parse swaps them and parses it as "test.json" in /srv/conf. The macros
 * build a config around what a test puts in the server, a model or its layers.
 *
 * Each suite's binary includes it once: everything here is static. */
#ifndef SIGSERVE_CONFIG_TESTS_H
#define SIGSERVE_CONFIG_TESTS_H

#include "base/config.h"
#include "testutil.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The JSON in these tests is written with single quotes for readability; s_json swaps them. */
static inline char *s_json (const char *text)
{
    char *s = strdup (text);
    for (char *c = s; *c; c++)
        if (*c == '\'')
            *c = '"';
    return s;
}

static inline config_t *s_parse (const char *text, char *err, size_t errlen)
{
    char *json = s_json (text);
    config_t *cfg = config_parse (json, "test.json", "/srv/conf", err, errlen);
    free (json);
    return cfg;
}

#define ENDPOINT    "'endpoints': ['tcp://127.0.0.1:5555']"
#define SERVER_OK   "'server': {" ENDPOINT "}"
#define LAYER_OK    "{'weight': '0.weight'}"
#define MODEL_WITH(extra) "{'name': 'm', 'weights': 'w.safetensors', 'layers': [" LAYER_OK "]" extra "}"
#define MODEL_LAYERS(layers) "{'name': 'm', 'weights': 'w.safetensors', 'layers': [" layers "]}"
#define MODELS_OK   "'models': [" MODEL_WITH ("") "]"
#define WITH_SERVER(extra) "{'server': {" ENDPOINT extra "}, " MODELS_OK "}"
#define WITH_MODEL(extra) "{" SERVER_OK ", 'models': [" MODEL_WITH (extra) "]}"
#define WITH_LAYERS(layers) "{" SERVER_OK ", 'models': [" MODEL_LAYERS (layers) "]}"

#endif
