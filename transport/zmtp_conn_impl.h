/* The insides of a ZMTP connection (zmtp_conn.h), shared by its two files: zmtp_conn.c (lifecycle,
 * writing, timers) and zmtp_conn_read.c (the greeting, the handshake and the bounded frame reader).
 * Private to transport/zmtp_conn*.c. */
#ifndef SIGSERVE_ZMTP_CONN_IMPL_H
#define SIGSERVE_ZMTP_CONN_IMPL_H

#include "zmtp_conn.h"

#define IN_INITIAL 8192
#define OUT_INITIAL 8192
#define FRAME_MAX (1ull << 31)           /* a frame's bytes at most, whatever max_message_bytes says (0: none) */
#define OUT_HARD_DEFAULT (16u << 20)
#define METADATA_MAX 256
#define ERROR_TEXT 160
#define GREETING_FIRST 11                /* the signature and the major version: what tells ZMTP 3 from older */

typedef enum { ST_GREETING, ST_HANDSHAKE, ST_READY, ST_CLOSING, ST_LINGER, ST_CLOSED } state_t;

struct zmtp_conn {
    int fd;
    zmtp_conn_opts_t opt;
    state_t state;
    zmtp_close_t why;
    uint8_t peer_minor;                 /* the peer's ZMTP minor version (0: 3.0, no PING) */
    zmtp_mechanism_t peer_mechanism;    /* what the peer's greeting names (once it is whole) */
    bool greeting_sent;                 /* the rest of our greeting went out (after the peer's first 11 bytes) */
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
    bool held;                          /* zmtp_conn_hold: sends are queued, written by the next flush */
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

/* zmtp_conn.c */
/* Ends the connection for WHY, the words in its error (the first failure wins). */
void zmtp_conn_fail (zmtp_conn_t *self, zmtp_close_t why, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));
/* Writes IOV (COUNT entries, TOTAL bytes) with one sendmsg when nothing is queued, and queues the rest:
 * 0, or -1 when the connection ended. */
struct iovec;
int zmtp_conn_write (zmtp_conn_t *self, struct iovec *iov, int count, size_t total, uint64_t now);
/* One command frame (BODY, LEN bytes): plain, or once CURVE is ready sealed with the COMMAND flag inside. */
int zmtp_conn_send_command (zmtp_conn_t *self, const uint8_t *body, size_t len, uint64_t now);
int zmtp_conn_send_error (zmtp_conn_t *self, const char *reason, uint64_t now);
/* Our READY metadata into MD (CAP bytes): its length. */
size_t zmtp_conn_metadata (const zmtp_conn_t *self, uint8_t *md, size_t cap);

#endif
