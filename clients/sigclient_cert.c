/* libsigclient: reading czmq certificate files for CURVE (sigclient_read_cert,
 * sigclient_curve_keys_load; see sigclient.h). */
#include "sigclient.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

static bool s_z85_key (const char *key)
{
    uint8_t bin[32];
    return key && strlen (key) == SIGCLIENT_KEY_TEXT - 1 && zmq_z85_decode (bin, key) != NULL;
}

/* czmq's certificate files are ZPL: "curve" at column 0, then indented "public-key = "..."" and
 * "secret-key = "..."" lines (zcert_save_public, zcert_save_secret). Only those two names are
 * read; "metadata" and comments are skipped. */
#define S_CERT_MAX_BYTES 65536

static int s_cert_value (const char *line, const char *name, char *out, const char *path,
                         char *error, size_t error_cap)
{
    size_t n = strlen (name);
    if (strncmp (line, name, n) != 0) return 0;
    const char *p = line + n;
    while (*p == ' ' || *p == '\t') p++;
    if (*p != '=') return 0;
    p++;
    while (*p == ' ' || *p == '\t') p++;
    char quote = (*p == '"' || *p == '\'') ? *p++ : 0;
    size_t len = 0;
    while (p[len] && p[len] != '\n' && p[len] != '\r' && (quote ? p[len] != quote : p[len] != ' ' && p[len] != '#'))
        len++;
    if (len != SIGCLIENT_KEY_TEXT - 1) {
        snprintf (error, error_cap, "%s: %s is %zu characters, expected a 40-character Z85 key", path, name, len);
        return -1;
    }
    memcpy (out, p, len);
    out[len] = '\0';
    if (!s_z85_key (out)) {
        snprintf (error, error_cap, "%s: %s is not a Z85 key", path, name);
        out[0] = '\0';
        return -1;
    }
    return 1;
}

int sigclient_read_cert (const char *path, char *public_key, char *secret_key, char *error, size_t error_cap)
{
    char scratch[8];
    if (!error) { error = scratch; error_cap = sizeof scratch; }
    if (!path || !public_key) {
        snprintf (error, error_cap, "no certificate file given");
        errno = EINVAL;
        return -1;
    }
    public_key[0] = '\0';
    if (secret_key) secret_key[0] = '\0';
    FILE *f = fopen (path, "r");
    if (!f) {
        int e = errno;
        snprintf (error, error_cap, "cannot open the certificate %s: %s", path, strerror (e));
        errno = e;
        return -1;
    }
    char line[512];
    size_t total = 0;
    int rc = 0;
    while (rc == 0 && fgets (line, sizeof line, f)) {
        total += strlen (line);
        if (total > S_CERT_MAX_BYTES) {
            snprintf (error, error_cap, "%s: longer than %d bytes, not a certificate", path, S_CERT_MAX_BYTES);
            rc = -1;
            break;
        }
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (p == line) continue;        /* section names ("curve", "metadata") and comments */
        int got = s_cert_value (p, "public-key", public_key, path, error, error_cap);
        if (got == 0 && secret_key)
            got = s_cert_value (p, "secret-key", secret_key, path, error, error_cap);
        if (got < 0) rc = -1;
    }
    if (rc == 0 && ferror (f)) {
        snprintf (error, error_cap, "cannot read the certificate %s", path);
        rc = -1;
    }
    fclose (f);
    if (rc == 0 && !public_key[0]) {
        snprintf (error, error_cap, "%s: no public-key (not a czmq certificate: sigserve --keygen writes them)", path);
        rc = -1;
    }
    if (rc == 0 && secret_key && !secret_key[0]) {
        snprintf (error, error_cap, "%s: no secret-key (give the client's secret certificate, the file ending in _secret)", path);
        rc = -1;
    }
    if (rc != 0) {
        public_key[0] = '\0';
        if (secret_key) secret_key[0] = '\0';
        errno = EINVAL;
    }
    return rc;
}

int sigclient_curve_keys_load (const char *server_cert, const char *client_cert, sigclient_curve_keys_t *keys,
                               char *error, size_t error_cap)
{
    if (!keys) { errno = EINVAL; return -1; }
    memset (keys, 0, sizeof *keys);
    if (sigclient_read_cert (server_cert, keys->server_public, NULL, error, error_cap) != 0
        || sigclient_read_cert (client_cert, keys->client_public, keys->client_secret, error, error_cap) != 0) {
        int e = errno;
        memset (keys, 0, sizeof *keys);
        errno = e;
        return -1;
    }
    return 0;
}
