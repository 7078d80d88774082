/* Writes F32 safetensors files (the demo-weight generator and the tests): test and tool support,
 * never linked into the server. */
#include "st_write.h"
#include "base/status.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_METADATA "__metadata__"
/* Readers take JSON numbers as doubles: above 2^53 an integer cannot be told from its neighbours. */
#define ST_MAX_EXACT 9007199254740992.0

static bool s_mul_u64 (uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow (a, b, out); }


static int s_check_write_args (const char *path, const st_write_tensor_t *tensors, size_t count,
                               uint64_t *nbytes, char *err, size_t errlen)
{
    for (size_t i = 0; i < count; i++) {
        const st_write_tensor_t *t = &tensors[i];
        if (!t->name || strcmp (t->name, ST_METADATA) == 0) {
            sig_set_error (err, errlen, "%s: tensor %zu: name is %s", path, i,
                    t->name ? "reserved (\"" ST_METADATA "\")" : "missing");
            return -1;
        }
        if (t->ndim > SAFETENSORS_MAX_DIMS) {
            sig_set_error (err, errlen, "%s: tensor \"%s\": %zu dimensions, at most %d are supported",
                    path, t->name, t->ndim, SAFETENSORS_MAX_DIMS);
            return -1;
        }
        uint64_t numel = 1;
        for (size_t d = 0; d < t->ndim; d++)
            if (t->shape[d] >= (uint64_t) ST_MAX_EXACT || !s_mul_u64 (numel, t->shape[d], &numel)) {
                sig_set_error (err, errlen, "%s: tensor \"%s\": shape is too large", path, t->name);
                return -1;
            }
        if (!s_mul_u64 (numel, 4, &nbytes[i]) || nbytes[i] >= (uint64_t) ST_MAX_EXACT
            || (numel && !t->data)) {
            sig_set_error (err, errlen, "%s: tensor \"%s\": %s", path, t->name,
                    numel && !t->data ? "data is NULL" : "too large");
            return -1;
        }
        /* quadratic, but writers hold a handful of tensors; readers would refuse a duplicate */
        for (size_t j = 0; j < i; j++)
            if (strcmp (tensors[j].name, t->name) == 0) {
                sig_set_error (err, errlen, "%s: duplicate tensor \"%s\"", path, t->name);
                return -1;
            }
    }
    return 0;
}

static void s_write_json_string (FILE *f, const char *s)
{
    fputc ('"', f);
    for (const unsigned char *c = (const unsigned char *) s; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf (f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf (f, "\\u%04x", *c);
        else
            fputc (*c, f);
    }
    fputc ('"', f);
}

/* The header JSON, padded with spaces to a multiple of 8 bytes; malloc'd, NULL when out of memory. */
static char *s_build_header (const st_write_tensor_t *tensors, size_t count, const uint64_t *nbytes,
                             size_t *len)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream (&buf, &size);
    if (!f)
        return NULL;
    fputc ('{', f);
    uint64_t offset = 0;
    for (size_t i = 0; i < count; i++) {
        const st_write_tensor_t *t = &tensors[i];
        fputs (i ? "," : "", f);
        s_write_json_string (f, t->name);
        fputs (":{\"dtype\":\"F32\",\"shape\":[", f);
        for (size_t d = 0; d < t->ndim; d++)
            fprintf (f, "%s%" PRIu64, d ? "," : "", t->shape[d]);
        fprintf (f, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset, offset + nbytes[i]);
        offset += nbytes[i];
    }
    fputc ('}', f);
    /* the data section then starts 8-aligned, as the Python library writes it */
    while ((ftell (f) % 8) != 0)
        fputc (' ', f);
    bool failed = ferror (f) != 0;
    failed |= fclose (f) != 0;      /* always close: it is what hands BUF over */
    if (failed) {
        free (buf);
        return NULL;
    }
    *len = size;
    return buf;
}

static int s_write_data (FILE *f, const st_write_tensor_t *t, uint64_t nbytes)
{
    if (nbytes == 0)
        return 0;
    if (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
        return fwrite (t->data, 1, (size_t) nbytes, f) == nbytes ? 0 : -1;
    for (uint64_t i = 0; i < nbytes / 4; i++) {
        uint32_t bits;
        memcpy (&bits, &t->data[i], 4);
        uint8_t le[4] = { (uint8_t) bits, (uint8_t) (bits >> 8), (uint8_t) (bits >> 16),
                          (uint8_t) (bits >> 24) };
        if (fwrite (le, 1, 4, f) != 4)
            return -1;
    }
    return 0;
}

/* Writes the length, HEADER and every tensor's data to F, then closes it. 0, or -1 with errno. */
static int s_write_stream (FILE *f, const char *header, size_t hlen, const st_write_tensor_t *tensors,
                           size_t count, const uint64_t *nbytes)
{
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t) ((uint64_t) hlen >> (8 * i));
    int rc = fwrite (len8, 1, 8, f) == 8 && fwrite (header, 1, hlen, f) == hlen ? 0 : -1;
    for (size_t i = 0; i < count && rc == 0; i++)
        rc = s_write_data (f, &tensors[i], nbytes[i]);
    int saved = errno;
    if (fclose (f) != 0 && rc == 0) {
        saved = errno;
        rc = -1;
    }
    errno = saved;
    return rc;
}

/* A regular file (or a new one) is written beside PATH and renamed over it, so readers never
 * see half a file and a failed write leaves what was there. Anything else (/dev/stdout, a fifo)
 * is written in place. */
static int s_write_file (const char *path, const char *header, size_t hlen,
                         const st_write_tensor_t *tensors, size_t count, const uint64_t *nbytes,
                         char *err, size_t errlen)
{
    struct stat st;
    if (stat (path, &st) == 0 && !S_ISREG (st.st_mode)) {
        FILE *f = fopen (path, "wb");
        if (!f || s_write_stream (f, header, hlen, tensors, count, nbytes) != 0) {
            sig_set_error (err, errlen, "%s: %s: %s", path, f ? "write failed" : "cannot open",
                    strerror (errno));
            return -1;
        }
        return 0;
    }
    size_t n = strlen (path) + sizeof ".tmp.XXXXXX";
    char *tmp = malloc (n);
    if (!tmp) {
        sig_set_error (err, errlen, "%s: out of memory", path);
        return -1;
    }
    snprintf (tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp (tmp);
    /* mkstemp makes the file 0600; a model file is for every user that runs the service */
    FILE *f = fd >= 0 && fchmod (fd, 0644) == 0 ? fdopen (fd, "wb") : NULL;
    int rc = -1;
    if (!f) {
        sig_set_error (err, errlen, "%s: cannot create: %s", path, strerror (errno));
        if (fd >= 0)
            close (fd);
    }
    else if (s_write_stream (f, header, hlen, tensors, count, nbytes) != 0)
        sig_set_error (err, errlen, "%s: write failed: %s", path, strerror (errno));
    else if (rename (tmp, path) != 0)
        sig_set_error (err, errlen, "%s: cannot rename %s over it: %s", path, tmp, strerror (errno));
    else
        rc = 0;
    if (rc != 0 && fd >= 0)
        unlink (tmp);
    free (tmp);
    return rc;
}

int safetensors_write_f32 (const char *path, const st_write_tensor_t *tensors, size_t count,
                           char *err, size_t errlen)
{
    assert (path && (tensors || count == 0));
    uint64_t *nbytes = calloc (count ? count : 1, sizeof *nbytes);
    if (!nbytes) {
        sig_set_error (err, errlen, "%s: out of memory", path);
        return -1;
    }
    size_t hlen = 0;
    char *header = NULL;
    int rc = s_check_write_args (path, tensors, count, nbytes, err, errlen);
    if (rc == 0 && !(header = s_build_header (tensors, count, nbytes, &hlen))) {
        sig_set_error (err, errlen, "%s: out of memory building the header", path);
        rc = -1;
    }
    if (rc == 0)
        rc = s_write_file (path, header, hlen, tensors, count, nbytes, err, errlen);
    free (header);
    free (nbytes);
    return rc;
}
