/* ZMTP 3.x on the wire (RFC 23/37): the 64-byte greeting, frame headers and the command bodies the
 * engine speaks (READY and its metadata, ERROR, PING, PONG). Pure functions over byte buffers, no
 * state and no system call: zmtp_conn.c drives them, the fuzz target feeds them garbage.
 *
 * A frame is a flags byte (MORE 0x01, LONG 0x02, COMMAND 0x04; the other bits must be 0), a size
 * (one byte, or eight big-endian bytes with LONG) and the body. A command's body is its name (one
 * length byte, then the name) and its data. Metadata (READY, and CURVE's INITIATE and READY boxes)
 * is a list of properties: a name (one length byte, 1..255 characters) and a value (four big-endian
 * length bytes, then the value). */
#ifndef SIGSERVE_ZMTP_WIRE_H
#define SIGSERVE_ZMTP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZMTP_GREETING_BYTES 64
#define ZMTP_SIGNATURE_BYTES 10         /* 0xFF, 8 bytes of padding, 0x7F: enough to tell ZMTP 1.0 from 2.0+ */
#define ZMTP_FLAG_MORE 0x01
#define ZMTP_FLAG_LONG 0x02
#define ZMTP_FLAG_COMMAND 0x04
#define ZMTP_HEADER_MAX 9               /* flags and an eight-byte size */
#define ZMTP_MECHANISM_BYTES 20
#define ZMTP_PING_CONTEXT_MAX 16
#define ZMTP_ERROR_REASON_MAX 255

typedef enum { ZMTP_MECH_NULL = 0, ZMTP_MECH_CURVE = 1, ZMTP_MECH_OTHER = 2 } zmtp_mechanism_t;

/* The socket types a peer may announce (Socket-Type); only those ours talk to are named. */
typedef enum {
    ZMTP_TYPE_UNKNOWN = 0,
    ZMTP_TYPE_REQ,
    ZMTP_TYPE_REP,
    ZMTP_TYPE_DEALER,
    ZMTP_TYPE_ROUTER,
    ZMTP_TYPE_OTHER,                    /* a valid ZeroMQ type we do not talk to (PUB, PAIR, ...) */
} zmtp_socket_type_t;

/* The greeting: version 3.1, MECHANISM, as-server AS_SERVER. Writes ZMTP_GREETING_BYTES to OUT. */
void zmtp_greeting_write (uint8_t *out, zmtp_mechanism_t mechanism, bool as_server);

/* A peer's greeting as far as LEN bytes of it go: 0 it is a ZMTP 3.x greeting so far (complete when
 * LEN >= ZMTP_GREETING_BYTES, then *MINOR, *MECHANISM and *AS_SERVER are set), -1 it is not one
 * (an older ZMTP or not ZeroMQ at all: WHY says which). */
int zmtp_greeting_read (const uint8_t *in, size_t len, uint8_t *minor, zmtp_mechanism_t *mechanism, bool *as_server,
                        const char **why);

/* A frame header for SIZE bytes with FLAGS (MORE, COMMAND; LONG is decided here). Returns its length
 * (2 or 9). */
size_t zmtp_header_write (uint8_t *out, uint8_t flags, uint64_t size);
/* Reads a frame header from the LEN bytes at IN: its length (2 or 9) with *FLAGS and *SIZE, 0 when
 * more bytes are needed, -1 when the flags have a reserved bit set. */
int zmtp_header_read (const uint8_t *in, size_t len, uint8_t *flags, uint64_t *size);

/* A command body: NAME (1..255 characters), then DATA (may be NULL with DATA_LEN 0). Returns the
 * bytes written, or 0 when they do not fit CAP. */
size_t zmtp_command_write (uint8_t *out, size_t cap, const char *name, const void *data, size_t data_len);
/* Whether the command body BODY (LEN bytes) is NAME; its data in *DATA / *DATA_LEN. False for a
 * malformed body (a name length past its end) or another name. */
bool zmtp_command_is (const uint8_t *body, size_t len, const char *name, const uint8_t **data, size_t *data_len);
/* The command's name length and name, or -1 when malformed. */
int zmtp_command_name (const uint8_t *body, size_t len, const uint8_t **name, size_t *name_len);

/* One metadata property appended at OUT + *USED (CAP in all). 0, or -1 when it does not fit. */
int zmtp_property_write (uint8_t *out, size_t cap, size_t *used, const char *name, const void *value, size_t value_len);
/* The value of property NAME (case-insensitive, as the RFC says) in the metadata MD (LEN bytes):
 * 1 found, 0 absent, -1 the metadata is malformed. */
int zmtp_property_find (const uint8_t *md, size_t len, const char *name, const uint8_t **value, size_t *value_len);

/* Socket-Type's value as a type ("DEALER" -> ZMTP_TYPE_DEALER); ZMTP_TYPE_UNKNOWN for a name that
 * is no ZeroMQ socket type. */
zmtp_socket_type_t zmtp_socket_type_parse (const uint8_t *value, size_t len);
const char *zmtp_socket_type_name (zmtp_socket_type_t type);

/* Big-endian helpers. */
static inline void zmtp_put_u16 (uint8_t *p, uint16_t v) { p[0] = (uint8_t) (v >> 8); p[1] = (uint8_t) v; }
static inline uint16_t zmtp_get_u16 (const uint8_t *p) { return (uint16_t) ((p[0] << 8) | p[1]); }
static inline void zmtp_put_u32 (uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t) v;
}
static inline uint32_t zmtp_get_u32 (const uint8_t *p)
{
    return ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16) | ((uint32_t) p[2] << 8) | p[3];
}
static inline void zmtp_put_u64 (uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t) v;
}
static inline uint64_t zmtp_get_u64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

#endif
