/* A server's mechanism from its greeting (zmtp_probe.h). */
#include "zmtp_probe.h"

#include "zmtp_addr.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

static int64_t s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for EVENTS on FD until DEADLINE: 0 ready, -1 with errno (ETIMEDOUT). */
static int s_wait (int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - s_now_ms ();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = { .fd = fd, .events = events };
        int rc = poll (&p, 1, (int) left);
        if (rc > 0)
            return 0;
        if (rc < 0 && errno != EINTR)
            return -1;
    }
}

/* Writes LEN bytes of BUF before DEADLINE: 0, or -1 with errno. */
static int s_write_all (int fd, const uint8_t *buf, size_t len, int64_t deadline)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = send (fd, buf + done, len - done, MSG_NOSIGNAL);
        if (n > 0)
            done += (size_t) n;
        else if (n < 0 && errno == EINTR)
            continue;
        else if (n < 0 && errno == EAGAIN) {
            if (s_wait (fd, POLLOUT, deadline) != 0)
                return -1;
        } else
            return -1;
    }
    return 0;
}

static int s_probe (int fd, zmtp_mechanism_t ours, int64_t deadline, zmtp_mechanism_t *mechanism)
{
    if (s_wait (fd, POLLOUT, deadline) != 0 || zmtp_connect_done (fd) != 0)
        return -1;
    uint8_t mine[ZMTP_GREETING_BYTES], theirs[ZMTP_GREETING_BYTES];
    zmtp_greeting_write (mine, ours, false);
    /* the signature and major version: a libzmq server answers with its whole greeting */
    if (s_write_all (fd, mine, ZMTP_SIGNATURE_BYTES + 1, deadline) != 0)
        return -1;
    size_t got = 0;
    while (got < sizeof theirs) {
        ssize_t n = recv (fd, theirs + got, sizeof theirs - got, 0);
        if (n > 0) {
            got += (size_t) n;
            uint8_t minor;
            bool as_server;
            const char *why;
            if (zmtp_greeting_read (theirs, got, &minor, mechanism, &as_server, &why) != 0) {
                errno = EPROTO;
                return -1;
            }
        } else if (n == 0) {
            errno = ECONNRESET;
            return -1;
        } else if (errno == EAGAIN) {
            if (s_wait (fd, POLLIN, deadline) != 0)
                return -1;
        } else if (errno != EINTR)
            return -1;
    }
    /* the rest of ours, so that the server refuses what we are (a mismatch it counts as such); it
     * closes then, or waits for a handshake we close here */
    (void) s_write_all (fd, mine + ZMTP_SIGNATURE_BYTES + 1, sizeof mine - ZMTP_SIGNATURE_BYTES - 1, deadline);
    return 0;
}

int zmtp_probe_mechanism (const char *endpoint, zmtp_mechanism_t ours, int timeout_ms, zmtp_mechanism_t *mechanism)
{
    char err[256];
    int fd = zmtp_connect_start (endpoint, err, sizeof err);
    if (fd < 0)
        return -1;
    int rc = s_probe (fd, ours, s_now_ms () + (timeout_ms > 0 ? timeout_ms : 0), mechanism);
    int e = errno;
    close (fd);
    errno = e;
    return rc;
}
