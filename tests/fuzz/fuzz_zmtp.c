/* libFuzzer target: the server side of a ZMTP connection (transport/zmtp_conn.c, the NULL mechanism)
 * fed the input as a peer's byte stream over a socketpair, in chunks, as a ROUTER front sees it:
 * the greeting, the READY handshake, then the bounded frame reader, PING/PONG and ERROR. Every
 * message handed out is checked against the bounds and its frames read byte by byte (a view outside
 * the buffer is ASan's), then sent back with zmtp_conn_send; what the connection writes is decoded
 * on the peer's side and must be our greeting, READY, PONGs or ERROR, and the replies as sent, in
 * order (s_check aborts). Nothing may crash, hang or leak: everything is closed each input.
 *
 * Input: byte 0 is the mode, the rest the peer's bytes.
 *   bits 0-3  the chunk size, from s_chunks (0: the whole stream in one write)
 *   bit 4     the clock moves 1 s a chunk and zmtp_conn_tick runs: the server PINGs every 1.5 s
 *             (heartbeat_ivl_ms) and keeps the peer's TTL
 *   bit 5     a slow peer: the server's send buffer is the smallest there is and its bytes are read
 *             once a chunk, so that replies queue (the writer's partial writes and zmtp_conn_flush)
 *   bit 6     with bit 7: the prefix is the greeting alone (the input is the handshake command)
 *   bit 7     a valid greeting and a NULL READY (Socket-Type DEALER) come before the input, so the
 *             fuzzer starts at the frame decoder
 * The seeds in tests/fuzz/corpus/zmtp are written by this file built with -DFUZZ_ZMTP_SEEDS (see
 * the end). */
#include "zmtp_conn.h"
#include "zmtp_wire.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FUZZ_MAX_INPUT 8192
#define MAX_BYTES 4096
#define MAX_FRAMES 15
#define PREFIX_MAX 128
#define SENT_MAX (FUZZ_MAX_INPUT + PREFIX_MAX)      /* a message is 2 bytes at least */
#define PEER_BUF (1 << 16)

static void s_check (int ok)
{
    if (!ok)
        abort ();
}

static const size_t s_chunks[16] = { 0, 1, 2, 3, 5, 7, 9, 13, 64, 100, 255, 256, 257, 1000, 4096, 4097 };

/* ---- the peer's side: what the connection wrote, decoded ----------------------------------- */

typedef struct {
    uint64_t hash;
    size_t frames, bytes;
} digest_t;

static struct {
    uint8_t buf[PEER_BUF];
    size_t len;
    bool greeting, ready, error;
    digest_t sent[SENT_MAX];            /* replies sent and not yet seen, in order */
    size_t sent_head, sent_tail;
    digest_t cur;                       /* the reply being decoded */
} s_peer;

static uint64_t s_fnv (uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t s_fnv_size (uint64_t h, size_t size)
{
    uint8_t b[8];
    zmtp_put_u64 (b, size);
    return s_fnv (h, b, 8);
}

/* Decodes the whole frames in the buffer; what is left is a frame not yet all there. */
static void s_peer_decode (void)
{
    size_t at = 0;
    if (!s_peer.greeting) {
        if (s_peer.len < ZMTP_GREETING_BYTES)
            return;
        uint8_t minor;
        zmtp_mechanism_t mech;
        bool as_server;
        const char *why;
        s_check (zmtp_greeting_read (s_peer.buf, ZMTP_GREETING_BYTES, &minor, &mech, &as_server, &why) == 0);
        s_check (minor == 1 && mech == ZMTP_MECH_NULL && as_server);
        s_peer.greeting = true;
        at = ZMTP_GREETING_BYTES;
    }
    for (;;) {
        uint8_t flags;
        uint64_t size;
        int h = zmtp_header_read (s_peer.buf + at, s_peer.len - at, &flags, &size);
        s_check (h >= 0);
        if (h == 0 || s_peer.len - at - (size_t) h < size)
            break;
        s_check (size <= PEER_BUF);
        s_check ((size > 255) == (h == 9));     /* the short form whenever it fits */
        const uint8_t *body = s_peer.buf + at + h;
        at += (size_t) h + (size_t) size;
        const uint8_t *data;
        size_t dlen;
        s_check (!s_peer.error);                /* nothing after ERROR */
        if (flags & ZMTP_FLAG_COMMAND) {
            s_check (!(flags & ZMTP_FLAG_MORE));
            if (!s_peer.ready) {
                s_check (zmtp_command_is (body, (size_t) size, "READY", &data, &dlen)
                         || zmtp_command_is (body, (size_t) size, "ERROR", &data, &dlen));
                s_peer.ready = true;
                s_peer.error = body[1] == 'E';
                if (!s_peer.error) {
                    const uint8_t *type;
                    size_t type_len;
                    s_check (zmtp_property_find (data, dlen, "Socket-Type", &type, &type_len) == 1);
                    s_check (type_len == 6 && memcmp (type, "ROUTER", 6) == 0);
                }
            } else if (zmtp_command_is (body, (size_t) size, "ERROR", &data, &dlen)) {
                s_peer.error = true;
            } else if (zmtp_command_is (body, (size_t) size, "PING", &data, &dlen)) {
                s_check (dlen == 2);            /* a TTL, no context */
            } else {
                s_check (zmtp_command_is (body, (size_t) size, "PONG", &data, &dlen));
                s_check (dlen <= ZMTP_PING_CONTEXT_MAX);
            }
            continue;
        }
        s_check (s_peer.ready && !s_peer.error);
        s_peer.cur.hash = s_fnv (s_fnv_size (s_peer.cur.hash, (size_t) size), body, (size_t) size);
        s_peer.cur.frames++;
        s_peer.cur.bytes += (size_t) size;
        if (flags & ZMTP_FLAG_MORE)
            continue;
        /* A whole reply: the one sent first and not seen yet. */
        s_check (s_peer.sent_head < s_peer.sent_tail);
        const digest_t *want = &s_peer.sent[s_peer.sent_head++];
        s_check (want->frames == s_peer.cur.frames && want->bytes == s_peer.cur.bytes
                 && want->hash == s_peer.cur.hash);
        s_peer.cur = (digest_t) { 0 };
    }
    memmove (s_peer.buf, s_peer.buf + at, s_peer.len - at);
    s_peer.len -= at;
}

/* Reads what the connection wrote (the socket never fills), and decodes it. */
static void s_drain (int fd)
{
    for (;;) {
        s_check (s_peer.len < sizeof s_peer.buf);
        ssize_t n = read (fd, s_peer.buf + s_peer.len, sizeof s_peer.buf - s_peer.len);
        if (n <= 0) {
            s_check (n == 0 || errno == EAGAIN || errno == EWOULDBLOCK);
            break;
        }
        s_peer.len += (size_t) n;
        s_peer_decode ();
    }
}

/* ---- the server's side ---------------------------------------------------------------------- */

/* A message handed out keeps the bounds; its frames are read whole (ASan checks the views). */
static void s_check_message (const zmtp_msg_t *m)
{
    s_check (m->nframes >= 0 && m->nframes <= MAX_FRAMES && (size_t) m->nframes <= m->total_frames);
    size_t kept = 0;
    uint64_t h = 0xcbf29ce484222325ull;
    for (int f = 0; f < m->nframes; f++) {
        const zmtp_frame_t *fr = &m->frames[f];
        s_check (fr->data != NULL && fr->size <= MAX_BYTES);
        if (f > 0)      /* in order, a header (2 bytes at least) between two frames */
            s_check (fr->data >= m->frames[f - 1].data + m->frames[f - 1].size + 2);
        h = s_fnv (h, fr->data, fr->size);
        kept += fr->size;
    }
    volatile uint64_t sink = h;
    (void) sink;
    s_check (kept <= m->bytes);
    if (m->refused) {
        s_check (m->total_frames > MAX_FRAMES || m->bytes > MAX_BYTES);
        s_check ((size_t) m->nframes + 1 == m->total_frames);   /* the frame that passed is not kept */
        s_check (kept <= MAX_BYTES);
    } else {
        s_check (m->nframes >= 1 && (size_t) m->nframes == m->total_frames);
        s_check (kept == m->bytes && m->bytes <= MAX_BYTES);
    }
}

/* The message back, as a ROUTER front answers it (a refused one with no frame kept: one empty). */
static void s_reply (zmtp_conn_t *conn, const zmtp_msg_t *m, uint64_t now)
{
    static const uint8_t none[1];
    zmtp_frame_t empty = { none, 0 };
    const zmtp_frame_t *frames = m->nframes ? m->frames : &empty;
    int n = m->nframes ? m->nframes : 1;
    s_check (s_peer.sent_tail < SENT_MAX);
    digest_t *d = &s_peer.sent[s_peer.sent_tail];
    *d = (digest_t) { 0 };
    for (int f = 0; f < n; f++) {
        d->hash = s_fnv (s_fnv_size (d->hash, frames[f].size), frames[f].data, frames[f].size);
        d->frames++;
        d->bytes += frames[f].size;
    }
    s_check (zmtp_conn_send (conn, frames, n, now) == 0);
    s_peer.sent_tail++;
}

/* What the connection queued, written while the peer reads it. */
static void s_settle (zmtp_conn_t *conn, int peer)
{
    s_drain (peer);
    while (zmtp_conn_queued (conn) && zmtp_conn_flush (conn) >= 0)
        s_drain (peer);
}

/* The messages of what was read, answered (read by the peer at once unless SLOW). False once the
 * connection has ended or refused one. */
static bool s_serve (zmtp_conn_t *conn, int peer, bool slow, uint64_t now)
{
    for (;;) {
        zmtp_msg_t m;
        int rc = zmtp_conn_next (conn, &m, now);
        if (rc <= 0) {
            s_check (rc == 0 || zmtp_conn_closed (conn));
            break;
        }
        s_check (zmtp_conn_ready (conn) || zmtp_conn_closing (conn));
        s_check_message (&m);
        s_check (m.refused == zmtp_conn_closing (conn));
        s_reply (conn, &m, now);
        if (!slow)
            s_settle (conn, peer);
    }
    if (!slow)
        s_settle (conn, peer);
    return !zmtp_conn_closed (conn) && !zmtp_conn_closing (conn);
}

/* The greeting of a DEALER peer and, unless GREETING_ONLY, its NULL READY. */
static size_t s_prefix (uint8_t *out, bool greeting_only)
{
    zmtp_greeting_write (out, ZMTP_MECH_NULL, false);
    if (greeting_only)
        return ZMTP_GREETING_BYTES;
    uint8_t md[64], body[96];
    size_t md_len = 0;
    s_check (zmtp_property_write (md, sizeof md, &md_len, "Socket-Type", "DEALER", 6) == 0);
    s_check (zmtp_property_write (md, sizeof md, &md_len, "Identity", NULL, 0) == 0);
    size_t len = zmtp_command_write (body, sizeof body, "READY", md, md_len);
    size_t h = zmtp_header_write (out + ZMTP_GREETING_BYTES, ZMTP_FLAG_COMMAND, len);
    memcpy (out + ZMTP_GREETING_BYTES + h, body, len);
    return ZMTP_GREETING_BYTES + h + len;
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static uint8_t stream[PREFIX_MAX + FUZZ_MAX_INPUT];
    if (size < 1 || size > FUZZ_MAX_INPUT)
        return 0;
    const uint8_t mode = data[0];
    size_t len = mode & 0x80 ? s_prefix (stream, mode & 0x40) : 0;
    memcpy (stream + len, data + 1, size - 1);
    len += size - 1;
    const size_t chunk = s_chunks[mode & 0x0f] ? s_chunks[mode & 0x0f] : len;
    const bool tick = mode & 0x10, slow = mode & 0x20;

    int sv[2];
    s_check (socketpair (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    memset (&s_peer, 0, sizeof s_peer);
    uint64_t now = 1000000000ull;
    zmtp_conn_opts_t opts = { .type = ZMTP_TYPE_ROUTER, .as_server = true, .mechanism = ZMTP_MECH_NULL,
                              .max_message_bytes = MAX_BYTES, .max_frames = MAX_FRAMES, .handshake_ms = 0,
                              .heartbeat_ivl_ms = tick ? 1500 : 0 };
    int one = 1;
    s_check (!slow || setsockopt (sv[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof one) == 0);
    zmtp_conn_t *conn = zmtp_conn_new (sv[0], &opts, now);
    s_check (conn != NULL);
    const int peer = sv[1];
    const zmtp_frame_t early = { (const uint8_t *) "", 0 };
    s_check (zmtp_conn_send (conn, &early, 1, now) == -1 && errno == ENOTCONN);
    s_drain (peer);
    bool open = true;
    for (size_t at = 0; at < len && open;) {
        size_t n = len - at < chunk ? len - at : chunk;
        ssize_t w = write (peer, stream + at, n);
        s_check (w > 0);        /* the connection reads everything it is sent until it ends */
        at += (size_t) w;
        int rc;
        while (open && (rc = zmtp_conn_read (conn, now)) != 0) {
            if (rc < 0)
                open = false;
            else
                open = s_serve (conn, peer, slow, now);
        }
        s_settle (conn, peer);
        if (open && tick) {
            now += 1000000000ull;
            if (zmtp_conn_tick (conn, now))
                open = false;
        }
    }
    /* Unless it ended, every reply came back whole (a refused message's too). */
    if (!zmtp_conn_closed (conn)) {
        s_settle (conn, peer);
        s_check (zmtp_conn_queued (conn) == 0);
        s_check (s_peer.sent_head == s_peer.sent_tail && s_peer.cur.frames == 0);
    }
    /* The peer goes: a connection still open reads the end of the stream and ends. */
    if (open) {
        s_check (shutdown (peer, SHUT_WR) == 0);
        while (zmtp_conn_read (conn, now) > 0 && s_serve (conn, peer, slow, now))
            ;
        s_check (zmtp_conn_closed (conn) || zmtp_conn_closing (conn));
    }
    if (zmtp_conn_closed (conn))
        s_check (zmtp_conn_send (conn, &early, 1, now) == -1 && errno == EPIPE);
    zmtp_conn_destroy (&conn);
    s_check (conn == NULL);
    close (peer);
    return 0;
}

#ifdef FUZZ_ZMTP_SEEDS
/* Writes the seeds: cc -DFUZZ_ZMTP_SEEDS -Itransport tests/fuzz/fuzz_zmtp.c transport/zmtp_conn.c
 * transport/zmtp_wire.c transport/zmtp_curve.c -lsodium -o /tmp/seeds && /tmp/seeds tests/fuzz/corpus/zmtp */
static uint8_t s_seed[FUZZ_MAX_INPUT];
static size_t s_seed_len;

static void s_put (const void *p, size_t n)
{
    s_check (s_seed_len + n <= sizeof s_seed);
    if (n)
        memcpy (s_seed + s_seed_len, p, n);
    s_seed_len += n;
}

static void s_frame (uint8_t flags, const void *p, size_t n)
{
    uint8_t h[ZMTP_HEADER_MAX];
    s_put (h, zmtp_header_write (h, flags, n));
    s_put (p, n);
}

static void s_begin (uint8_t mode)
{
    s_seed_len = 0;
    s_put (&mode, 1);
}

static void s_write (const char *dir, const char *name)
{
    char path[512];
    snprintf (path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen (path, "wb");
    s_check (f && fwrite (s_seed, 1, s_seed_len, f) == s_seed_len && fclose (f) == 0);
    s_check (LLVMFuzzerTestOneInput (s_seed, s_seed_len) == 0);
}

int main (int argc, char **argv)
{
    if (argc != 2) {
        fprintf (stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    static uint8_t big[MAX_BYTES + 1];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t) (i * 7 + 1);
    /* The handshake in the input (1-byte chunks), then one message. */
    uint8_t prefix[PREFIX_MAX];
    s_begin (0x01);
    s_put (prefix, s_prefix (prefix, false));
    s_frame (0, "hello", 5);
    s_write (argv[1], "handshake-one-message");
    /* An empty delimiter and two frames, in 3-byte chunks. */
    s_begin (0x83);
    s_frame (ZMTP_FLAG_MORE, NULL, 0);
    s_frame (ZMTP_FLAG_MORE, "first of three", 14);
    s_frame (0, "last", 4);
    s_write (argv[1], "multi-frame");
    /* Frames either side of the long size (255, 256), then one of 4096: the bound exactly; in one
     * write, to a slow peer (the second reply is queued). */
    s_begin (0xa0);
    s_frame (ZMTP_FLAG_MORE, big, 255);
    s_frame (0, big, 256);
    s_frame (0, big, MAX_BYTES);
    s_write (argv[1], "long-frames");
    /* PING (TTL 1 s, a context) between messages and between two frames of one; the clock ticks. */
    s_begin (0x95);
    uint8_t body[32], ping[2 + 4];
    zmtp_put_u16 (ping, 10);
    memcpy (ping + 2, "ctx1", 4);
    size_t n = zmtp_command_write (body, sizeof body, "PING", ping, sizeof ping);
    s_frame (ZMTP_FLAG_COMMAND, body, n);
    s_frame (ZMTP_FLAG_MORE, "a", 1);
    s_frame (ZMTP_FLAG_COMMAND, body, n);
    s_frame (0, "b", 1);
    s_write (argv[1], "ping");
    /* 16 frames (one past the bound): refused, and nothing after it is read. */
    s_begin (0x80);
    for (int f = 0; f < 16; f++)
        s_frame (ZMTP_FLAG_MORE, "x", 1);
    s_frame (0, "y", 1);
    s_write (argv[1], "past-frames");
    /* A frame one byte past max_message_bytes, announced by its header: refused before its bytes. */
    s_begin (0x80);
    s_frame (ZMTP_FLAG_MORE, "id", 2);
    s_frame (0, big, MAX_BYTES + 1);
    s_write (argv[1], "past-bytes");
    return 0;
}
#endif
