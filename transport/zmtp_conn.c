/* One ZMTP connection (zmtp_conn.h): its lifecycle, the writer and the timers; the reader is
 * zmtp_conn_read.c. */
#define _GNU_SOURCE
#include "zmtp_conn_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *const s_close_names[ZMTP_CLOSE_COUNT] = {
    [ZMTP_CLOSE_NONE] = "open", [ZMTP_CLOSE_PEER] = "closed by the peer",
    [ZMTP_CLOSE_PROTOCOL] = "protocol error", [ZMTP_CLOSE_VERSION] = "not ZMTP 3",
    [ZMTP_CLOSE_MECHANISM] = "security mechanism mismatch", [ZMTP_CLOSE_CRYPTO] = "CURVE: wrong server key",
    [ZMTP_CLOSE_DENIED] = "CURVE: key not allowed", [ZMTP_CLOSE_HANDSHAKE_TIMEOUT] = "handshake timed out",
    [ZMTP_CLOSE_HEARTBEAT] = "heartbeat timed out", [ZMTP_CLOSE_REFUSED] = "message over the bounds",
    [ZMTP_CLOSE_ERROR_COMMAND] = "the peer sent ERROR", [ZMTP_CLOSE_LOCAL] = "closed here",
};

const char *zmtp_close_name (zmtp_close_t why) { return why < ZMTP_CLOSE_COUNT ? s_close_names[why] : "?"; }

void zmtp_conn_fail (zmtp_conn_t *self, zmtp_close_t why, const char *fmt, ...)
{
    if (self->state == ST_CLOSED)
        return;
    self->state = ST_CLOSED;
    self->why = why;
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (self->error, sizeof self->error, fmt, ap);
    va_end (ap);
}

/* ---------------------------------------------------------------- writing */

static int s_reserve_out (zmtp_conn_t *self, size_t more)
{
    if (self->out_pos == self->out_end)
        self->out_pos = self->out_end = 0;
    if (self->out_end + more <= self->out_cap)
        return 0;
    if (self->out_pos > 0) {
        memmove (self->out, self->out + self->out_pos, self->out_end - self->out_pos);
        self->out_end -= self->out_pos;
        self->out_pos = 0;
    }
    if (self->out_end + more <= self->out_cap)
        return 0;
    size_t cap = self->out_cap ? self->out_cap : OUT_INITIAL;
    while (cap < self->out_end + more)
        cap *= 2;
    uint8_t *p = realloc (self->out, cap);
    if (!p)
        return -1;
    self->out = p;
    self->out_cap = cap;
    return 0;
}

/* Writes IOV (COUNT entries, TOTAL bytes) with one sendmsg when nothing is queued; queues the rest.
 * 0, or -1 when the connection ended (or memory ran out). */
int zmtp_conn_write (zmtp_conn_t *self, struct iovec *iov, int count, size_t total, uint64_t now)
{
    size_t done = 0;
    if (self->out_pos == self->out_end && !self->held) {
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t) count };
        ssize_t n = sendmsg (self->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            zmtp_conn_fail (self, ZMTP_CLOSE_PEER, "write: %s", strerror (errno));
            return -1;
        }
        if (n > 0) {
            done = (size_t) n;
            self->t_active = now;
        }
    }
    if (done == total)
        return 0;
    if (s_reserve_out (self, total - done) != 0) {
        zmtp_conn_fail (self, ZMTP_CLOSE_LOCAL, "out of memory for %zu bytes to write", total - done);
        return -1;
    }
    size_t skip = done;
    for (int i = 0; i < count; i++) {
        size_t len = iov[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        memcpy (self->out + self->out_end, (uint8_t *) iov[i].iov_base + skip, len - skip);
        self->out_end += len - skip;
        skip = 0;
    }
    return 0;
}

int zmtp_conn_flush (zmtp_conn_t *self)
{
    if (self->state == ST_CLOSED)
        return -1;
    while (self->out_pos < self->out_end) {
        ssize_t n = send (self->fd, self->out + self->out_pos, self->out_end - self->out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            zmtp_conn_fail (self, ZMTP_CLOSE_PEER, "write: %s", strerror (errno));
            return -1;
        }
        self->out_pos += (size_t) n;
    }
    self->out_pos = self->out_end = 0;
    return 1;
}

size_t zmtp_conn_queued (const zmtp_conn_t *self) { return self->out_end - self->out_pos; }

/* One command frame (BODY, LEN bytes), plain or, once CURVE is ready, sealed with the COMMAND flag
 * inside. Handshake commands are always plain. */
int zmtp_conn_send_command (zmtp_conn_t *self, const uint8_t *body, size_t len, uint64_t now)
{
    uint8_t hdr[ZMTP_HEADER_MAX];
    if (self->curve && self->state == ST_READY) {
        uint8_t sealed[ZMTP_PING_CONTEXT_MAX + 64 + ZMTP_CURVE_OVERHEAD];
        if (len + ZMTP_CURVE_OVERHEAD > sizeof sealed)
            return 0;
        size_t n = zmtp_curve_seal (self->curve, ZMTP_CURVE_MSG_COMMAND, body, len, sealed);
        size_t h = zmtp_header_write (hdr, 0, n);
        struct iovec iov[2] = { { hdr, h }, { sealed, n } };
        return zmtp_conn_write (self, iov, 2, h + n, now);
    }
    size_t h = zmtp_header_write (hdr, ZMTP_FLAG_COMMAND, len);
    struct iovec iov[2] = { { hdr, h }, { (void *) body, len } };
    return zmtp_conn_write (self, iov, 2, h + len, now);
}

int zmtp_conn_send_error (zmtp_conn_t *self, const char *reason, uint64_t now)
{
    uint8_t data[1 + ZMTP_ERROR_REASON_MAX], body[8 + sizeof data];
    size_t n = strlen (reason) > ZMTP_ERROR_REASON_MAX ? ZMTP_ERROR_REASON_MAX : strlen (reason);
    data[0] = (uint8_t) n;
    memcpy (data + 1, reason, n);
    size_t len = zmtp_command_write (body, sizeof body, "ERROR", data, 1 + n);
    return zmtp_conn_send_command (self, body, len, now);
}

/* Our metadata: Socket-Type, and an empty Identity (a DEALER's: the ROUTER picks its routing id). */
size_t zmtp_conn_metadata (const zmtp_conn_t *self, uint8_t *md, size_t cap)
{
    size_t used = 0;
    const char *type = zmtp_socket_type_name (self->opt.type);
    zmtp_property_write (md, cap, &used, "Socket-Type", type, strlen (type));
    if (self->opt.type == ZMTP_TYPE_DEALER)
        zmtp_property_write (md, cap, &used, "Identity", NULL, 0);
    return used;
}

void zmtp_conn_hold (zmtp_conn_t *self, bool hold) { self->held = hold; }
void zmtp_conn_set_max_message_bytes (zmtp_conn_t *self, uint64_t bytes) { self->opt.max_message_bytes = bytes; }

int zmtp_conn_send (zmtp_conn_t *self, const zmtp_frame_t *frames, int n, uint64_t now)
{
    if (self->state == ST_CLOSED) {
        errno = EPIPE;
        return -1;
    }
    if (self->state == ST_LINGER) {
        errno = EPIPE;
        return -1;
    }
    if (self->state != ST_READY && self->state != ST_CLOSING) {
        errno = ENOTCONN;
        return -1;
    }
    if (n < 1 || n > ZMTP_MSG_FRAMES) {
        errno = EINVAL;
        return -1;
    }
    uint8_t hdr[ZMTP_MSG_FRAMES][ZMTP_HEADER_MAX];
    struct iovec iov[2 * ZMTP_MSG_FRAMES];
    size_t total = 0;
    if (!self->curve) {
        for (int f = 0; f < n; f++) {
            size_t h = zmtp_header_write (hdr[f], f + 1 < n ? ZMTP_FLAG_MORE : 0, frames[f].size);
            iov[2 * f] = (struct iovec) { hdr[f], h };
            iov[2 * f + 1] = (struct iovec) { (void *) frames[f].data, frames[f].size };
            total += h + frames[f].size;
        }
    } else {
        for (int f = 0; f < n; f++)
            total += ZMTP_HEADER_MAX + frames[f].size + ZMTP_CURVE_OVERHEAD;
    }
    if (self->out_end - self->out_pos + total > self->opt.out_hard) {
        errno = EAGAIN;
        return -1;
    }
    if (!self->curve)
        return zmtp_conn_write (self, iov, 2 * n, total, now) == 0 ? 0 : (errno = EPIPE, -1);
    if (total > self->seal_cap) {
        uint8_t *p = realloc (self->seal, total);
        if (!p) {
            errno = ENOMEM;
            return -1;
        }
        self->seal = p;
        self->seal_cap = total;
    }
    size_t used = 0;
    for (int f = 0; f < n; f++) {
        size_t body = frames[f].size + ZMTP_CURVE_OVERHEAD;
        size_t h = zmtp_header_write (self->seal + used, 0, body);
        zmtp_curve_seal (self->curve, f + 1 < n ? ZMTP_CURVE_MSG_MORE : 0, frames[f].data, frames[f].size,
                         self->seal + used + h);
        used += h + body;
    }
    struct iovec one = { self->seal, used };
    return zmtp_conn_write (self, &one, 1, used, now) == 0 ? 0 : (errno = EPIPE, -1);
}

/* ---------------------------------------------------------------- lifecycle */

zmtp_conn_t *zmtp_conn_new (int fd, const zmtp_conn_opts_t *opts, uint64_t now)
{
    zmtp_conn_t *self = calloc (1, sizeof *self);
    if (self) {
        /* both buffers now: a burst of replies held for one write (zmtp_conn_hold) allocates nothing */
        self->in = malloc (IN_INITIAL);
        self->out = malloc (OUT_INITIAL);
        self->out_cap = OUT_INITIAL;
    }
    if (!self || !self->in || !self->out) {
        if (self) {
            free (self->in);
            free (self->out);
        }
        free (self);
        close (fd);
        return NULL;
    }
    self->fd = fd;
    self->opt = *opts;
    if (self->opt.max_frames <= 0 || self->opt.max_frames > ZMTP_MSG_FRAMES)
        self->opt.max_frames = ZMTP_MSG_FRAMES;
    if (!self->opt.out_hard)
        self->opt.out_hard = OUT_HARD_DEFAULT;
    if (self->opt.heartbeat_ivl_ms && !self->opt.heartbeat_timeout_ms)
        self->opt.heartbeat_timeout_ms = 3 * self->opt.heartbeat_ivl_ms;
    self->in_cap = IN_INITIAL;
    self->t_start = self->t_recv = self->t_active = now;
    self->state = ST_GREETING;
    self->peer_type = ZMTP_TYPE_UNKNOWN;
    self->peer_mechanism = ZMTP_MECH_OTHER;
    if (self->opt.mechanism == ZMTP_MECH_CURVE) {
        uint8_t md[METADATA_MAX];
        size_t md_len = zmtp_conn_metadata (self, md, sizeof md);
        self->curve = self->opt.as_server
                          ? zmtp_curve_new_server (self->opt.curve_keys, self->opt.authorize, self->opt.authorize_arg, md,
                                                   md_len)
                          : zmtp_curve_new_client (self->opt.curve_keys, self->opt.curve_server_key, md, md_len);
        if (!self->curve) {
            zmtp_conn_destroy (&self);
            return NULL;
        }
    }
    /* The signature and major version now; the rest once the peer's have come (zmtp_conn_read.c). */
    uint8_t greeting[ZMTP_GREETING_BYTES];
    zmtp_greeting_write (greeting, self->opt.mechanism, self->opt.as_server);
    struct iovec iov = { greeting, GREETING_FIRST };
    zmtp_conn_write (self, &iov, 1, GREETING_FIRST, now);
    return self;
}

void zmtp_conn_destroy (zmtp_conn_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zmtp_conn_t *self = *self_p;
    if (self->fd >= 0)
        close (self->fd);
    zmtp_curve_destroy (&self->curve);
    free (self->in);
    free (self->out);
    free (self->seal);
    free (self);
    *self_p = NULL;
}

int zmtp_conn_fd (const zmtp_conn_t *self) { return self->fd; }
bool zmtp_conn_ready (const zmtp_conn_t *self) { return self->state == ST_READY; }
bool zmtp_conn_closed (const zmtp_conn_t *self) { return self->state == ST_CLOSED; }
bool zmtp_conn_closing (const zmtp_conn_t *self) { return self->state == ST_CLOSING; }
bool zmtp_conn_lingering (const zmtp_conn_t *self) { return self->state == ST_LINGER; }

int zmtp_conn_linger (zmtp_conn_t *self)
{
    if (self->state == ST_CLOSED || self->out_pos < self->out_end)
        return -1;
    if (self->state != ST_LINGER) {
        shutdown (self->fd, SHUT_WR);
        self->state = ST_LINGER;
    }
    return 0;
}
zmtp_close_t zmtp_conn_why (const zmtp_conn_t *self) { return self->why; }
const char *zmtp_conn_error (const zmtp_conn_t *self) { return self->error; }
zmtp_socket_type_t zmtp_conn_peer_type (const zmtp_conn_t *self) { return self->peer_type; }
zmtp_mechanism_t zmtp_conn_peer_mechanism (const zmtp_conn_t *self) { return self->peer_mechanism; }
uint64_t zmtp_conn_last_active (const zmtp_conn_t *self) { return self->t_active; }

const uint8_t *zmtp_conn_curve_client_key (const zmtp_conn_t *self)
{
    return self->curve && self->opt.as_server && self->state >= ST_READY && self->state != ST_CLOSED
               ? zmtp_curve_client_key (self->curve)
               : NULL;
}

void zmtp_conn_close (zmtp_conn_t *self, zmtp_close_t why)
{
    zmtp_conn_fail (self, why == ZMTP_CLOSE_NONE ? ZMTP_CLOSE_LOCAL : why, "%s", zmtp_close_name (why));
}

/* ---------------------------------------------------------------- timers */

bool zmtp_conn_tick (zmtp_conn_t *self, uint64_t now)
{
    if (self->state == ST_CLOSED)
        return false;
    if ((self->state == ST_GREETING || self->state == ST_HANDSHAKE) && self->opt.handshake_ms
        && now - self->t_start > (uint64_t) self->opt.handshake_ms * 1000000ull) {
        zmtp_conn_fail (self, ZMTP_CLOSE_HANDSHAKE_TIMEOUT, "no handshake within %u ms", self->opt.handshake_ms);
        return true;
    }
    if (self->state != ST_READY)
        return false;
    const uint64_t silent = now - self->t_recv;
    if (self->peer_ttl_ns && silent > self->peer_ttl_ns) {
        zmtp_conn_fail (self, ZMTP_CLOSE_HEARTBEAT, "nothing from the peer within its TTL of %llu ms",
                (unsigned long long) (self->peer_ttl_ns / 1000000));
        return true;
    }
    if (!self->opt.heartbeat_ivl_ms || self->peer_minor < 1)
        return false;
    const uint64_t ivl = (uint64_t) self->opt.heartbeat_ivl_ms * 1000000ull;
    const uint64_t timeout = (uint64_t) self->opt.heartbeat_timeout_ms * 1000000ull;
    if (self->t_ping > self->t_recv && now - self->t_ping >= timeout) {
        zmtp_conn_fail (self, ZMTP_CLOSE_HEARTBEAT, "no answer to a PING within %u ms", self->opt.heartbeat_timeout_ms);
        return true;
    }
    if (now - self->t_ping >= ivl && !(self->t_ping > self->t_recv)) {
        uint8_t data[2], body[16];
        uint64_t ttl = timeout / 100000000ull;
        zmtp_put_u16 (data, (uint16_t) (ttl > 65535 ? 65535 : ttl));
        size_t n = zmtp_command_write (body, sizeof body, "PING", data, 2);
        self->t_ping = now;
        if (zmtp_conn_send_command (self, body, n, now) != 0)
            return true;
    }
    return false;
}
