/* config_load: reading a config file (bounded, regular files only) and handing its text to
 * config_parse with the file's folder as the base of relative paths. */
#include "base/config.h"
#include "base/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int s_cannot_read (const char *file, const char *why, char *err, size_t errlen)
{
    sig_set_error (err, errlen, "%s: cannot read: %s", file, why);
    return -1;
}

/* The whole file, NUL-terminated, in *TEXT (the caller frees it); at most CONFIG_FILE_MAX_BYTES. */
static int s_read_file (const char *file, char **text, size_t *len, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever. */
    int fd = open (file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return s_cannot_read (file, strerror (errno), err, errlen);
    struct stat st;
    if (fstat (fd, &st) != 0) {
        int e = errno;
        close (fd);
        return s_cannot_read (file, strerror (e), err, errlen);
    }
    if (!S_ISREG (st.st_mode)) {
        close (fd);
        return s_cannot_read (file, S_ISDIR (st.st_mode) ? "Is a directory"
                                                        : "not a regular file (a FIFO, socket or device)", err, errlen);
    }
    char *buf = malloc (CONFIG_FILE_MAX_BYTES + 2);
    if (!buf) {
        close (fd);
        return s_cannot_read (file, "out of memory", err, errlen);
    }
    size_t n = 0;
    while (n <= CONFIG_FILE_MAX_BYTES) {
        ssize_t r = read (fd, buf + n, CONFIG_FILE_MAX_BYTES + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close (fd);
            free (buf);
            return s_cannot_read (file, strerror (e), err, errlen);
        }
        if (r == 0)
            break;
        n += (size_t) r;
    }
    close (fd);
    if (n > CONFIG_FILE_MAX_BYTES) {
        free (buf);
        sig_set_error (err, errlen, "%s: cannot read: larger than %d bytes (1 MiB), the most a config may be", file,
                       CONFIG_FILE_MAX_BYTES);
        return -1;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

config_t *config_load (const char *path, char *err, size_t errlen)
{
    const char *file = path ? path : "(null)";
    if (err && errlen)
        err[0] = '\0';
    if (!path || !path[0]) {
        sig_set_error (err, errlen, "%s: cannot read: no config path given", file);
        return NULL;
    }
    if (strlen (path) >= CONFIG_PATH_MAX) {
        sig_set_error (err, errlen, "%s: cannot read: the path is longer than %d bytes", file, CONFIG_PATH_MAX - 1);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0;
    if (s_read_file (file, &text, &len, err, errlen) != 0)
        return NULL;
    /* cJSON would stop at a NUL and accept whatever precedes it. */
    const char *nul = memchr (text, '\0', len);
    if (nul) {
        size_t line, column;
        config_text_position (text, nul, &line, &column);
        sig_set_error (err, errlen, "%s: invalid JSON near line %zu, column %zu (a NUL byte)", file, line, column);
        free (text);
        return NULL;
    }
    /* Some editors start UTF-8 files with a byte-order mark; JSON parsers need not accept it. */
    const char *json = strncmp (text, "\xEF\xBB\xBF", 3) == 0 ? text + 3 : text;

    char base_dir[CONFIG_PATH_MAX];
    const char *slash = strrchr (path, '/');
    if (!slash)
        base_dir[0] = '\0';     /* relative paths then stay relative to the working folder */
    else if (slash == path)
        snprintf (base_dir, sizeof base_dir, "/");
    else
        snprintf (base_dir, sizeof base_dir, "%.*s", (int) (slash - path), path);

    config_t *self = config_parse (json, path, base_dir, err, errlen);
    free (text);
    return self;
}
