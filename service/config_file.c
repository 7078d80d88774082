/* config_load: reading a config file (bounded, regular files only) and handing its text to
 * config_parse with the file's folder as the base of relative paths. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

__attribute__ ((format (printf, 4, 5)))
static int s_fail (const char *file, char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return -1;
    char problem[1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (problem, sizeof problem, fmt, ap);
    va_end (ap);
    snprintf (err, errlen, "%s: %s", file, problem);
    return -1;
}

/* The whole file, NUL-terminated, in *TEXT (the caller frees it); at most CONFIG_FILE_MAX_BYTES. */
static int s_read_file (const char *file, char **text, size_t *len, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever. */
    int fd = open (file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return s_fail (file, err, errlen, "cannot read: %s", strerror (errno));
    struct stat st;
    if (fstat (fd, &st) != 0) {
        int e = errno;
        close (fd);
        return s_fail (file, err, errlen, "cannot read: %s", strerror (e));
    }
    if (!S_ISREG (st.st_mode)) {
        close (fd);
        return s_fail (file, err, errlen, "cannot read: %s",
                       S_ISDIR (st.st_mode) ? "Is a directory" : "not a regular file (a FIFO, socket or device)");
    }
    char *buf = malloc (CONFIG_FILE_MAX_BYTES + 2);
    if (!buf) {
        close (fd);
        return s_fail (file, err, errlen, "cannot read: out of memory");
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
            return s_fail (file, err, errlen, "cannot read: %s", strerror (e));
        }
        if (r == 0)
            break;
        n += (size_t) r;
    }
    close (fd);
    if (n > CONFIG_FILE_MAX_BYTES) {
        free (buf);
        return s_fail (file, err, errlen, "cannot read: larger than %d bytes (1 MiB), the most a config may be",
                       CONFIG_FILE_MAX_BYTES);
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
        s_fail (file, err, errlen, "cannot read: no config path given");
        return NULL;
    }
    if (strlen (path) >= CONFIG_PATH_MAX) {
        s_fail (file, err, errlen, "cannot read: the path is longer than %d bytes", CONFIG_PATH_MAX - 1);
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
        s_fail (file, err, errlen, "invalid JSON near line %zu, column %zu (a NUL byte)", line, column);
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
