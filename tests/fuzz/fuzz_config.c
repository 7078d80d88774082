/* libFuzzer target: the bytes as the JSON configuration, through config_parse (what config_load
 * does after reading the file). A parse either fails with a message that names the file, or
 * gives a configuration that is then destroyed. */
#include "base/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void s_check (int ok)
{
    if (!ok)
        abort ();
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size > CONFIG_FILE_MAX_BYTES)
        return -1;
    char *json = malloc (size + 1);
    s_check (json != NULL);
    memcpy (json, data, size);
    json[size] = 0;
    char err[1024];
    err[0] = 0;
    config_t *cfg = config_parse (json, "fuzz.json", "/fuzz/base", err, sizeof err);
    if (!cfg)
        s_check (strncmp (err, "fuzz.json: ", 11) == 0 && strlen (err) < sizeof err);
    config_destroy (&cfg);
    s_check (cfg == NULL);
    free (json);
    return 0;
}
