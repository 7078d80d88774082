/* One ZMTP connection (zmtp_conn.h), reading: the peer's greeting, the NULL handshake (CURVE's steps
 * are zmtp_curve.c's), PING/PONG/ERROR, and the frame reader that bounds a message as it arrives and
 * hands it out as views into one buffer. */
#define _GNU_SOURCE
#include "zmtp_conn_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

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
            zmtp_conn_fail (self, ZMTP_CLOSE_LOCAL, "out of memory for a %zu-byte message", need);
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
            zmtp_conn_fail (self, why, "%s", zmtp_close_name (why));
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
        zmtp_conn_fail (self, ZMTP_CLOSE_PEER, "read: %s", strerror (errno));
        return -1;
    }
    if (n == 0) {
        zmtp_conn_fail (self, ZMTP_CLOSE_PEER, "the peer closed the connection");
        return -1;
    }
    self->in_end += (size_t) n;
    self->t_recv = self->t_active = now;
    return (int) n;
}

/* The peer's greeting: the rest of ours once its first 11 bytes say ZMTP 3 (RFC 37, "Version
 * Negotiation": what libzmq does too), then, once it is whole, its version and mechanism checked
 * and our first handshake command sent. 1 done, 0 more bytes needed, -1 failed.
 *
 * Why in two parts: a libzmq peer that has our whole greeting reads our mechanism, and on a
 * mismatch closes before it writes the rest of its own; the other side then never learns why (a
 * CURVE server could not count a plaintext client as one). In two parts, each side writes its
 * mechanism before it can read the other's, so both sides always see a mismatch for what it is. */
static int s_greeting (zmtp_conn_t *self, uint64_t now)
{
    uint8_t minor = 0;
    zmtp_mechanism_t mech = ZMTP_MECH_OTHER;
    bool as_server = false;
    const char *why = NULL;
    size_t have = self->in_end - self->in_pos;
    if (zmtp_greeting_read (self->in + self->in_pos, have, &minor, &mech, &as_server, &why) != 0) {
        zmtp_conn_fail (self, ZMTP_CLOSE_VERSION, "%s", why);
        return -1;
    }
    if (have >= GREETING_FIRST && !self->greeting_sent) {
        uint8_t greeting[ZMTP_GREETING_BYTES];
        zmtp_greeting_write (greeting, self->opt.mechanism, self->opt.as_server);
        struct iovec iov = { greeting + GREETING_FIRST, ZMTP_GREETING_BYTES - GREETING_FIRST };
        self->greeting_sent = true;
        if (zmtp_conn_write (self, &iov, 1, ZMTP_GREETING_BYTES - GREETING_FIRST, now) != 0)
            return -1;
    }
    if (have < ZMTP_GREETING_BYTES)
        return 0;
    self->in_pos += ZMTP_GREETING_BYTES;
    self->m_next = self->in_pos;
    self->peer_minor = minor;
    self->peer_mechanism = mech;
    if (mech != self->opt.mechanism) {
        /* The rest of our greeting out first, even while the router holds writes for a burst: the
         * peer learns the mismatch from our mechanism (a libzmq client's monitor says so) only if
         * it has it before we close. Both parts of a fast peer's greeting can come in one read, and
         * the held rest was then dropped with the connection. */
        zmtp_conn_flush (self);
        zmtp_conn_fail (self, ZMTP_CLOSE_MECHANISM, "the peer's security mechanism is %s, ours %s",
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
        size_t md_len = zmtp_conn_metadata (self, md, sizeof md);
        len = zmtp_command_write (cmd, sizeof cmd, "READY", md, md_len);
    }
    if (len && zmtp_conn_send_command (self, cmd, len, now) != 0)
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
        zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "malformed metadata in the peer's READY");
        return -1;
    }
    self->peer_type = found ? zmtp_socket_type_parse (value, vlen) : ZMTP_TYPE_UNKNOWN;
    bool ok = self->opt.type == ZMTP_TYPE_ROUTER
                  ? (self->peer_type == ZMTP_TYPE_DEALER || self->peer_type == ZMTP_TYPE_REQ
                     || self->peer_type == ZMTP_TYPE_ROUTER)
                  : (self->peer_type == ZMTP_TYPE_ROUTER || self->peer_type == ZMTP_TYPE_REP
                     || self->peer_type == ZMTP_TYPE_DEALER);
    if (!ok) {
        zmtp_conn_send_error (self, "Invalid socket type", now);
        zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "a %.*s peer cannot talk to a %s socket",
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
        zmtp_conn_fail (self, ZMTP_CLOSE_ERROR_COMMAND, "the peer refused the handshake: %.*s", n, (const char *) data + 1);
        return -1;
    }
    if (!self->curve) {
        if (!zmtp_command_is (body, len, "READY", &data, &dlen)) {
            zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "expected READY in the NULL handshake");
            return -1;
        }
        return s_peer_metadata (self, data, dlen, now);
    }
    uint8_t out[ZMTP_CURVE_COMMAND_MAX];
    size_t out_len = 0;
    zmtp_curve_fail_t why = ZMTP_CURVE_OK;
    zmtp_curve_step_t st = zmtp_curve_step (self->curve, body, len, out, sizeof out, &out_len, &why);
    if (out_len && zmtp_conn_send_command (self, out, out_len, now) != 0)
        return -1;
    if (st == ZMTP_CURVE_ERROR) {
        zmtp_conn_fail (self, why == ZMTP_CURVE_FAIL_CRYPTO ? ZMTP_CLOSE_CRYPTO
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
            zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "malformed PING");
            return -1;
        }
        self->peer_ttl_ns = (uint64_t) zmtp_get_u16 (data) * 100000000ull;
        size_t ctx = dlen - 2 > ZMTP_PING_CONTEXT_MAX ? ZMTP_PING_CONTEXT_MAX : dlen - 2;
        uint8_t pong[16 + ZMTP_PING_CONTEXT_MAX];
        size_t n = zmtp_command_write (pong, sizeof pong, "PONG", data + 2, ctx);
        return zmtp_conn_send_command (self, pong, n, now);
    }
    if (zmtp_command_is (body, len, "ERROR", &data, &dlen)) {
        int n = dlen >= 1 && (size_t) data[0] + 1 <= dlen ? data[0] : 0;
        zmtp_conn_fail (self, ZMTP_CLOSE_ERROR_COMMAND, "the peer sent ERROR: %.*s", n, (const char *) data + 1);
        return -1;
    }
    const uint8_t *name;
    size_t name_len;
    if (zmtp_command_name (body, len, &name, &name_len) != 0) {
        zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "malformed command");
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
            zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "a frame with reserved flag bits set (0x%02x)", self->in[at]);
            return -1;
        }
        if (h == 0)
            return 0;
        const bool command = flags & ZMTP_FLAG_COMMAND;
        const bool more = flags & ZMTP_FLAG_MORE;
        if (size > FRAME_MAX && !(self->state == ST_READY && self->opt.max_message_bytes)) {
            /* no bound configured (a client's replies): a frame of 2 GiB or more is not a reply */
            zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "a frame of %llu bytes", (unsigned long long) size);
            return -1;
        }
        if (self->state == ST_HANDSHAKE && (!command || size > ZMTP_CURVE_COMMAND_MAX)) {
            zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, command ? "a handshake command of %llu bytes" :
                    "a message frame before the handshake ended (%llu bytes)", (unsigned long long) size);
            return -1;
        }
        /* A CURVE peer's frames are all MESSAGE commands, whatever the flags say. */
        const bool sealed = self->curve && self->state == ST_READY;
        if (command && !sealed && size > ZMTP_CURVE_COMMAND_MAX) {
            zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "a command of %llu bytes", (unsigned long long) size);
            return -1;
        }
        if (sealed && size < ZMTP_CURVE_OVERHEAD) {
            zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "CURVE: a MESSAGE of %llu bytes", (unsigned long long) size);
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
                zmtp_conn_fail (self, ZMTP_CLOSE_PROTOCOL, "CURVE: a MESSAGE that does not open");
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

