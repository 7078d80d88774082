/* One ZMTP connection (zmtp_conn.h): the greeting, the NULL handshake (CURVE's is zmtp_curve.c's),
 * the bounded frame reader and the writer. */
#define _GNU_SOURCE
#include "zmtp_conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define IN_INITIAL 8192
#define FRAME_MAX (1ull << 31)           /* a frame's bytes at most, whatever max_message_bytes says (0: none) */
#define OUT_HARD_DEFAULT (16u << 20)
#define METADATA_MAX 256
#define ERROR_TEXT 160

typedef enum { ST_GREETING, ST_HANDSHAKE, ST_READY, ST_CLOSING, ST_LINGER, ST_CLOSED } state_t;

struct zmtp_conn {
    int fd;
    zmtp_conn_opts_t opt;
    state_t state;
    zmtp_close_t why;
    uint8_t peer_minor;                 /* the peer's ZMTP minor version (0: 3.0, no PING) */
    zmtp_socket_type_t peer_type;
    zmtp_curve_t *curve;                /* CURVE's state (NULL with the NULL mechanism) */
    uint8_t *in;                        /* what was read: [in_pos, in_end) not handed out yet */
    size_t in_cap, in_pos, in_end;
    /* the message being read: its frames' offsets in IN, where the next header starts */
    size_t m_next;
    int m_nframes;
    size_t m_total, m_bytes;
    size_t m_off[ZMTP_MSG_FRAMES], m_len[ZMTP_MSG_FRAMES];
    bool m_refused;
    uint8_t *out;                       /* queued to write: [out_pos, out_end) */
    size_t out_cap, out_pos, out_end;
    uint8_t *seal;                      /* CURVE: one message's sealed frames, before they are written */
    size_t seal_cap;
    uint64_t t_start;                   /* when the connection began (the handshake's bound) */
    uint64_t t_recv;                    /* bytes last read */
    uint64_t t_active;                  /* bytes last read or written */
    uint64_t t_ping;                    /* our last PING (0: none) */
    uint64_t peer_ttl_ns;               /* the peer's TTL from its PING (0: none) */
    char error[ERROR_TEXT];
};

static const char *const s_close_names[ZMTP_CLOSE_COUNT] = {
    [ZMTP_CLOSE_NONE] = "open", [ZMTP_CLOSE_PEER] = "closed by the peer",
    [ZMTP_CLOSE_PROTOCOL] = "protocol error", [ZMTP_CLOSE_VERSION] = "not ZMTP 3",
    [ZMTP_CLOSE_MECHANISM] = "security mechanism mismatch", [ZMTP_CLOSE_CRYPTO] = "CURVE: wrong server key",
    [ZMTP_CLOSE_DENIED] = "CURVE: key not allowed", [ZMTP_CLOSE_HANDSHAKE_TIMEOUT] = "handshake timed out",
    [ZMTP_CLOSE_HEARTBEAT] = "heartbeat timed out", [ZMTP_CLOSE_REFUSED] = "message over the bounds",
    [ZMTP_CLOSE_ERROR_COMMAND] = "the peer sent ERROR", [ZMTP_CLOSE_LOCAL] = "closed here",
};

const char *zmtp_close_name (zmtp_close_t why) { return why < ZMTP_CLOSE_COUNT ? s_close_names[why] : "?"; }

static void s_fail (zmtp_conn_t *self, zmtp_close_t why, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));
static void s_fail (zmtp_conn_t *self, zmtp_close_t why, const char *fmt, ...)
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
    size_t cap = self->out_cap ? self->out_cap : 4096;
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
static int s_write (zmtp_conn_t *self, struct iovec *iov, int count, size_t total, uint64_t now)
{
    size_t done = 0;
    if (self->out_pos == self->out_end) {
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t) count };
        ssize_t n = sendmsg (self->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            s_fail (self, ZMTP_CLOSE_PEER, "write: %s", strerror (errno));
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
        s_fail (self, ZMTP_CLOSE_LOCAL, "out of memory for %zu bytes to write", total - done);
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
            s_fail (self, ZMTP_CLOSE_PEER, "write: %s", strerror (errno));
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
static int s_send_command (zmtp_conn_t *self, const uint8_t *body, size_t len, uint64_t now)
{
    uint8_t hdr[ZMTP_HEADER_MAX];
    if (self->curve && self->state == ST_READY) {
        uint8_t sealed[ZMTP_PING_CONTEXT_MAX + 64 + ZMTP_CURVE_OVERHEAD];
        if (len + ZMTP_CURVE_OVERHEAD > sizeof sealed)
            return 0;
        size_t n = zmtp_curve_seal (self->curve, ZMTP_CURVE_MSG_COMMAND, body, len, sealed);
        size_t h = zmtp_header_write (hdr, 0, n);
        struct iovec iov[2] = { { hdr, h }, { sealed, n } };
        return s_write (self, iov, 2, h + n, now);
    }
    size_t h = zmtp_header_write (hdr, ZMTP_FLAG_COMMAND, len);
    struct iovec iov[2] = { { hdr, h }, { (void *) body, len } };
    return s_write (self, iov, 2, h + len, now);
}

static int s_send_error (zmtp_conn_t *self, const char *reason, uint64_t now)
{
    uint8_t data[1 + ZMTP_ERROR_REASON_MAX], body[8 + sizeof data];
    size_t n = strlen (reason) > ZMTP_ERROR_REASON_MAX ? ZMTP_ERROR_REASON_MAX : strlen (reason);
    data[0] = (uint8_t) n;
    memcpy (data + 1, reason, n);
    size_t len = zmtp_command_write (body, sizeof body, "ERROR", data, 1 + n);
    return s_send_command (self, body, len, now);
}

/* Our metadata: Socket-Type, and an empty Identity (a DEALER's: the ROUTER picks its routing id). */
static size_t s_metadata (const zmtp_conn_t *self, uint8_t *md, size_t cap)
{
    size_t used = 0;
    const char *type = zmtp_socket_type_name (self->opt.type);
    zmtp_property_write (md, cap, &used, "Socket-Type", type, strlen (type));
    if (self->opt.type == ZMTP_TYPE_DEALER)
        zmtp_property_write (md, cap, &used, "Identity", NULL, 0);
    return used;
}

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
        return s_write (self, iov, 2 * n, total, now) == 0 ? 0 : (errno = EPIPE, -1);
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
    return s_write (self, &one, 1, used, now) == 0 ? 0 : (errno = EPIPE, -1);
}

/* ---------------------------------------------------------------- lifecycle */

zmtp_conn_t *zmtp_conn_new (int fd, const zmtp_conn_opts_t *opts, uint64_t now)
{
    zmtp_conn_t *self = calloc (1, sizeof *self);
    if (self)
        self->in = malloc (IN_INITIAL);
    if (!self || !self->in) {
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
    if (self->opt.mechanism == ZMTP_MECH_CURVE) {
        uint8_t md[METADATA_MAX];
        size_t md_len = s_metadata (self, md, sizeof md);
        self->curve = self->opt.as_server
                          ? zmtp_curve_new_server (self->opt.curve_keys, self->opt.authorize, self->opt.authorize_arg, md,
                                                   md_len)
                          : zmtp_curve_new_client (self->opt.curve_keys, self->opt.curve_server_key, md, md_len);
        if (!self->curve) {
            zmtp_conn_destroy (&self);
            return NULL;
        }
    }
    uint8_t greeting[ZMTP_GREETING_BYTES];
    zmtp_greeting_write (greeting, self->opt.mechanism, self->opt.as_server);
    struct iovec iov = { greeting, sizeof greeting };
    s_write (self, &iov, 1, sizeof greeting, now);
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
uint64_t zmtp_conn_last_active (const zmtp_conn_t *self) { return self->t_active; }

const uint8_t *zmtp_conn_curve_client_key (const zmtp_conn_t *self)
{
    return self->curve && self->opt.as_server && self->state >= ST_READY && self->state != ST_CLOSED
               ? zmtp_curve_client_key (self->curve)
               : NULL;
}

void zmtp_conn_close (zmtp_conn_t *self, zmtp_close_t why)
{
    s_fail (self, why == ZMTP_CLOSE_NONE ? ZMTP_CLOSE_LOCAL : why, "%s", zmtp_close_name (why));
}

/* ---------------------------------------------------------------- reading */

bool zmtp_conn_has_input (const zmtp_conn_t *self) { return self->in_pos < self->in_end; }

/* Room to read into: the unread part moved to the front of the buffer (offsets of the message being
 * read with it), or the buffer grown to hold NEED bytes from in_pos. */
static int s_room (zmtp_conn_t *self, size_t need)
{
    if (self->in_pos == self->in_end && self->m_nframes == 0) {
        /* all handed out: start from the front again (a 2 KiB message then comes in one read) */
        self->in_pos = self->in_end = self->m_next = 0;
    }
    if (self->in_pos > 0 && (self->in_end == self->in_cap || self->in_pos + need > self->in_cap)) {
        size_t shift = self->in_pos;
        memmove (self->in, self->in + shift, self->in_end - shift);
        self->in_end -= shift;
        self->in_pos = 0;
        self->m_next -= shift;
        for (int f = 0; f < self->m_nframes; f++)
            self->m_off[f] -= shift;
    }
    if (need > self->in_cap || self->in_end == self->in_cap) {
        size_t cap = self->in_cap;
        while (cap < need || cap == self->in_end)
            cap *= 2;
        uint8_t *p = realloc (self->in, cap);
        if (!p) {
            s_fail (self, ZMTP_CLOSE_LOCAL, "out of memory for a %zu-byte message", need);
            return -1;
        }
        self->in = p;
        self->in_cap = cap;
    }
    return 0;
}

/* Bytes the message being read needs from in_pos to hold its next frame whole (what the header at
 * m_next announces), or a little more than what is there when the header itself is not in yet. */
static size_t s_need (const zmtp_conn_t *self)
{
    size_t at = self->m_next > self->in_pos ? self->m_next : self->in_pos;
    uint8_t flags;
    uint64_t size;
    int h = zmtp_header_read (self->in + at, self->in_end - at, &flags, &size);
    if (h <= 0)
        return self->in_end - self->in_pos + ZMTP_HEADER_MAX;
    return at - self->in_pos + (size_t) h + (size_t) size;
}

int zmtp_conn_read (zmtp_conn_t *self, uint64_t now)
{
    if (self->state == ST_CLOSED)
        return -1;
    if (self->state == ST_CLOSING)
        return 0;
    if (self->state == ST_LINGER) {
        /* thrown away, until the peer's end */
        ssize_t n;
        do
            n = recv (self->fd, self->in, self->in_cap, MSG_DONTWAIT);
        while (n > 0 || (n < 0 && errno == EINTR));
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            zmtp_close_t why = self->why ? self->why : ZMTP_CLOSE_LOCAL;
            s_fail (self, why, "%s", zmtp_close_name (why));
            return -1;
        }
        return 0;
    }
    if (s_room (self, s_need (self)) != 0)
        return -1;
    ssize_t n;
    do
        n = recv (self->fd, self->in + self->in_end, self->in_cap - self->in_end, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        s_fail (self, ZMTP_CLOSE_PEER, "read: %s", strerror (errno));
        return -1;
    }
    if (n == 0) {
        s_fail (self, ZMTP_CLOSE_PEER, "the peer closed the connection");
        return -1;
    }
    self->in_end += (size_t) n;
    self->t_recv = self->t_active = now;
    return (int) n;
}

/* The peer's greeting, once whole: its version and mechanism checked, and our first handshake
 * command sent. 1 done, 0 more bytes needed, -1 failed. */
static int s_greeting (zmtp_conn_t *self, uint64_t now)
{
    uint8_t minor = 0;
    zmtp_mechanism_t mech = ZMTP_MECH_OTHER;
    bool as_server = false;
    const char *why = NULL;
    size_t have = self->in_end - self->in_pos;
    if (zmtp_greeting_read (self->in + self->in_pos, have, &minor, &mech, &as_server, &why) != 0) {
        s_fail (self, ZMTP_CLOSE_VERSION, "%s", why);
        return -1;
    }
    if (have < ZMTP_GREETING_BYTES)
        return 0;
    self->in_pos += ZMTP_GREETING_BYTES;
    self->m_next = self->in_pos;
    self->peer_minor = minor;
    if (mech != self->opt.mechanism) {
        s_fail (self, ZMTP_CLOSE_MECHANISM, "the peer's security mechanism is %s, ours %s",
                mech == ZMTP_MECH_NULL ? "NULL (plaintext)" : mech == ZMTP_MECH_CURVE ? "CURVE" : "another one",
                self->opt.mechanism == ZMTP_MECH_CURVE ? "CURVE" : "NULL");
        return -1;
    }
    /* The roles come from our own configuration: libzmq writes as-server 0 even as a CURVE server. */
    (void) as_server;
    self->state = ST_HANDSHAKE;
    uint8_t cmd[ZMTP_CURVE_COMMAND_MAX];
    size_t len;
    if (self->curve)
        len = zmtp_curve_start (self->curve, cmd, sizeof cmd);
    else {
        uint8_t md[METADATA_MAX];
        size_t md_len = s_metadata (self, md, sizeof md);
        len = zmtp_command_write (cmd, sizeof cmd, "READY", md, md_len);
    }
    if (len && s_send_command (self, cmd, len, now) != 0)
        return -1;
    return 1;
}

/* The peer's metadata: its socket type must suit ours. */
static int s_peer_metadata (zmtp_conn_t *self, const uint8_t *md, size_t len, uint64_t now)
{
    const uint8_t *value;
    size_t vlen;
    int found = zmtp_property_find (md, len, "Socket-Type", &value, &vlen);
    if (found < 0) {
        s_fail (self, ZMTP_CLOSE_PROTOCOL, "malformed metadata in the peer's READY");
        return -1;
    }
    self->peer_type = found ? zmtp_socket_type_parse (value, vlen) : ZMTP_TYPE_UNKNOWN;
    bool ok = self->opt.type == ZMTP_TYPE_ROUTER
                  ? (self->peer_type == ZMTP_TYPE_DEALER || self->peer_type == ZMTP_TYPE_REQ
                     || self->peer_type == ZMTP_TYPE_ROUTER)
                  : (self->peer_type == ZMTP_TYPE_ROUTER || self->peer_type == ZMTP_TYPE_REP
                     || self->peer_type == ZMTP_TYPE_DEALER);
    if (!ok) {
        s_send_error (self, "Invalid socket type", now);
        s_fail (self, ZMTP_CLOSE_PROTOCOL, "a %.*s peer cannot talk to a %s socket",
                found ? (int) (vlen > 32 ? 32 : vlen) : 9, found ? (const char *) value : "(unnamed)",
                zmtp_socket_type_name (self->opt.type));
        return -1;
    }
    self->state = ST_READY;
    return 0;
}

/* A command during the handshake (BODY, LEN bytes). */
static int s_handshake_command (zmtp_conn_t *self, const uint8_t *body, size_t len, uint64_t now)
{
    const uint8_t *data;
    size_t dlen;
    if (zmtp_command_is (body, len, "ERROR", &data, &dlen)) {
        int n = dlen >= 1 && (size_t) data[0] + 1 <= dlen ? data[0] : 0;
        s_fail (self, ZMTP_CLOSE_ERROR_COMMAND, "the peer refused the handshake: %.*s", n, (const char *) data + 1);
        return -1;
    }
    if (!self->curve) {
        if (!zmtp_command_is (body, len, "READY", &data, &dlen)) {
            s_fail (self, ZMTP_CLOSE_PROTOCOL, "expected READY in the NULL handshake");
            return -1;
        }
        return s_peer_metadata (self, data, dlen, now);
    }
    uint8_t out[ZMTP_CURVE_COMMAND_MAX];
    size_t out_len = 0;
    zmtp_curve_fail_t why = ZMTP_CURVE_OK;
    zmtp_curve_step_t st = zmtp_curve_step (self->curve, body, len, out, sizeof out, &out_len, &why);
    if (out_len && s_send_command (self, out, out_len, now) != 0)
        return -1;
    if (st == ZMTP_CURVE_ERROR) {
        s_fail (self, why == ZMTP_CURVE_FAIL_CRYPTO ? ZMTP_CLOSE_CRYPTO
                      : why == ZMTP_CURVE_FAIL_DENIED ? ZMTP_CLOSE_DENIED : ZMTP_CLOSE_PROTOCOL,
                "CURVE handshake: %s", why == ZMTP_CURVE_FAIL_CRYPTO ? "a box did not open (another server key?)"
                                       : why == ZMTP_CURVE_FAIL_DENIED ? "the client's key is not allowed"
                                                                       : "protocol error");
        return -1;
    }
    if (st == ZMTP_CURVE_READY) {
        size_t md_len;
        const uint8_t *md = zmtp_curve_peer_metadata (self->curve, &md_len);
        return s_peer_metadata (self, md, md_len, now);
    }
    return 0;
}

/* A command once ready: PING answered, PONG taken as life, ERROR ends it, others ignored. */
static int s_ready_command (zmtp_conn_t *self, const uint8_t *body, size_t len, uint64_t now)
{
    const uint8_t *data;
    size_t dlen;
    if (zmtp_command_is (body, len, "PING", &data, &dlen)) {
        if (dlen < 2) {
            s_fail (self, ZMTP_CLOSE_PROTOCOL, "malformed PING");
            return -1;
        }
        self->peer_ttl_ns = (uint64_t) zmtp_get_u16 (data) * 100000000ull;
        size_t ctx = dlen - 2 > ZMTP_PING_CONTEXT_MAX ? ZMTP_PING_CONTEXT_MAX : dlen - 2;
        uint8_t pong[16 + ZMTP_PING_CONTEXT_MAX];
        size_t n = zmtp_command_write (pong, sizeof pong, "PONG", data + 2, ctx);
        return s_send_command (self, pong, n, now);
    }
    if (zmtp_command_is (body, len, "ERROR", &data, &dlen)) {
        int n = dlen >= 1 && (size_t) data[0] + 1 <= dlen ? data[0] : 0;
        s_fail (self, ZMTP_CLOSE_ERROR_COMMAND, "the peer sent ERROR: %.*s", n, (const char *) data + 1);
        return -1;
    }
    const uint8_t *name;
    size_t name_len;
    if (zmtp_command_name (body, len, &name, &name_len) != 0) {
        s_fail (self, ZMTP_CLOSE_PROTOCOL, "malformed command");
        return -1;
    }
    return 0;   /* PONG, SUBSCRIBE, CANCEL, ...: nothing to do */
}

static void s_message_reset (zmtp_conn_t *self)
{
    self->m_nframes = 0;
    self->m_total = self->m_bytes = 0;
    self->m_refused = false;
    self->m_next = self->in_pos;
}

/* Hands out the message read so far (whole, or refused). */
static void s_message_out (zmtp_conn_t *self, zmtp_msg_t *msg)
{
    msg->nframes = self->m_nframes;
    msg->total_frames = self->m_total;
    msg->bytes = self->m_bytes;
    msg->refused = self->m_refused;
    for (int f = 0; f < self->m_nframes; f++)
        msg->frames[f] = (zmtp_frame_t) { self->in + self->m_off[f], self->m_len[f] };
}

/* Whether one more frame of LEN bytes (counted as a frame when FRAME) passes the message's bounds. */
static bool s_over (const zmtp_conn_t *self, uint64_t len, bool frame)
{
    return (frame && self->m_total + 1 > (size_t) self->opt.max_frames)
           || (self->opt.max_message_bytes && self->m_bytes + len > self->opt.max_message_bytes);
}

/* The message read so far, handed out refused with the frame that passed the bounds counted (LEN
 * bytes); nothing more is read, and the connection closes once its reply is written. */
static int s_refuse (zmtp_conn_t *self, zmtp_msg_t *msg, uint64_t len)
{
    self->m_total++;
    self->m_bytes += len;
    self->m_refused = true;
    s_message_out (self, msg);
    self->state = ST_CLOSING;
    self->why = ZMTP_CLOSE_REFUSED;
    return 1;
}

int zmtp_conn_next (zmtp_conn_t *self, zmtp_msg_t *msg, uint64_t now)
{
    for (;;) {
        if (self->state == ST_CLOSED)
            return -1;
        if (self->state == ST_CLOSING || self->state == ST_LINGER)
            return 0;
        if (self->state == ST_GREETING) {
            int rc = s_greeting (self, now);
            if (rc <= 0)
                return rc;
            continue;
        }
        size_t at = self->m_next;
        uint8_t flags;
        uint64_t size;
        int h = zmtp_header_read (self->in + at, self->in_end - at, &flags, &size);
        if (h < 0) {
            s_fail (self, ZMTP_CLOSE_PROTOCOL, "a frame with reserved flag bits set (0x%02x)", self->in[at]);
            return -1;
        }
        if (h == 0)
            return 0;
        const bool command = flags & ZMTP_FLAG_COMMAND;
        const bool more = flags & ZMTP_FLAG_MORE;
        if (size > FRAME_MAX && !(self->state == ST_READY && self->opt.max_message_bytes)) {
            /* no bound configured (a client's replies): a frame of 2 GiB or more is not a reply */
            s_fail (self, ZMTP_CLOSE_PROTOCOL, "a frame of %llu bytes", (unsigned long long) size);
            return -1;
        }
        if (self->state == ST_HANDSHAKE && (!command || size > ZMTP_CURVE_COMMAND_MAX)) {
            s_fail (self, ZMTP_CLOSE_PROTOCOL, command ? "a handshake command of %llu bytes" :
                    "a message frame before the handshake ended (%llu bytes)", (unsigned long long) size);
            return -1;
        }
        /* A CURVE peer's frames are all MESSAGE commands, whatever the flags say. */
        const bool sealed = self->curve && self->state == ST_READY;
        if (command && !sealed && size > ZMTP_CURVE_COMMAND_MAX) {
            s_fail (self, ZMTP_CLOSE_PROTOCOL, "a command of %llu bytes", (unsigned long long) size);
            return -1;
        }
        if (sealed && size < ZMTP_CURVE_OVERHEAD) {
            s_fail (self, ZMTP_CLOSE_PROTOCOL, "CURVE: a MESSAGE of %llu bytes", (unsigned long long) size);
            return -1;
        }
        /* A message frame is bounded before its bytes are waited for (a sealed one by its size: the
         * frame count waits for the flags inside). */
        if (self->state == ST_READY && (!command || sealed)
            && s_over (self, sealed ? size - ZMTP_CURVE_OVERHEAD : size, !sealed))
            return s_refuse (self, msg, sealed ? size - ZMTP_CURVE_OVERHEAD : size);
        if (self->in_end - at - (size_t) h < size)
            return 0;   /* the frame's bytes are not all here yet */
        uint8_t *body = self->in + at + h;
        self->m_next = at + (size_t) h + (size_t) size;
        if (self->state == ST_HANDSHAKE) {
            if (s_handshake_command (self, body, (size_t) size, now) != 0)
                return -1;
            self->in_pos = self->m_next;
            continue;
        }
        uint8_t *data = body;
        size_t len = (size_t) size;
        bool is_command = command, has_more = more;
        if (sealed) {
            uint8_t inner;
            zmtp_curve_fail_t why;
            if (zmtp_curve_open (self->curve, body, (size_t) size, &inner, &data, &len, &why) != 0) {
                s_fail (self, ZMTP_CLOSE_PROTOCOL, "CURVE: a MESSAGE that does not open");
                return -1;
            }
            is_command = inner & ZMTP_CURVE_MSG_COMMAND;
            has_more = inner & ZMTP_CURVE_MSG_MORE;
            if (!is_command && s_over (self, len, true))
                return s_refuse (self, msg, len);
        }
        if (is_command) {
            /* Between two messages, or (libzmq's heartbeats) between two frames of one. */
            if (s_ready_command (self, data, len, now) != 0)
                return -1;
            if (self->m_nframes == 0)
                self->in_pos = self->m_next;
            continue;
        }
        self->m_off[self->m_nframes] = (size_t) (data - self->in);
        self->m_len[self->m_nframes] = len;
        self->m_nframes++;
        self->m_total++;
        self->m_bytes += len;
        if (has_more)
            continue;
        s_message_out (self, msg);
        self->in_pos = self->m_next;
        s_message_reset (self);
        return 1;
    }
}

/* ---------------------------------------------------------------- timers */

bool zmtp_conn_tick (zmtp_conn_t *self, uint64_t now)
{
    if (self->state == ST_CLOSED)
        return false;
    if ((self->state == ST_GREETING || self->state == ST_HANDSHAKE) && self->opt.handshake_ms
        && now - self->t_start > (uint64_t) self->opt.handshake_ms * 1000000ull) {
        s_fail (self, ZMTP_CLOSE_HANDSHAKE_TIMEOUT, "no handshake within %u ms", self->opt.handshake_ms);
        return true;
    }
    if (self->state != ST_READY)
        return false;
    const uint64_t silent = now - self->t_recv;
    if (self->peer_ttl_ns && silent > self->peer_ttl_ns) {
        s_fail (self, ZMTP_CLOSE_HEARTBEAT, "nothing from the peer within its TTL of %llu ms",
                (unsigned long long) (self->peer_ttl_ns / 1000000));
        return true;
    }
    if (!self->opt.heartbeat_ivl_ms || self->peer_minor < 1)
        return false;
    const uint64_t ivl = (uint64_t) self->opt.heartbeat_ivl_ms * 1000000ull;
    const uint64_t timeout = (uint64_t) self->opt.heartbeat_timeout_ms * 1000000ull;
    if (self->t_ping > self->t_recv && now - self->t_ping >= timeout) {
        s_fail (self, ZMTP_CLOSE_HEARTBEAT, "no answer to a PING within %u ms", self->opt.heartbeat_timeout_ms);
        return true;
    }
    if (now - self->t_ping >= ivl && !(self->t_ping > self->t_recv)) {
        uint8_t data[2], body[16];
        uint64_t ttl = timeout / 100000000ull;
        zmtp_put_u16 (data, (uint16_t) (ttl > 65535 ? 65535 : ttl));
        size_t n = zmtp_command_write (body, sizeof body, "PING", data, 2);
        self->t_ping = now;
        if (s_send_command (self, body, n, now) != 0)
            return true;
    }
    return false;
}
