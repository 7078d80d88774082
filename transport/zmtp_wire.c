#include "zmtp_wire.h"

#include <string.h>
#include <strings.h>

static const char *const s_mechanisms[] = { "NULL", "CURVE" };

void zmtp_greeting_write (uint8_t *out, zmtp_mechanism_t mechanism, bool as_server)
{
    memset (out, 0, ZMTP_GREETING_BYTES);
    out[0] = 0xff;
    /* Padding: libzmq puts its routing id's length + 1 there (a ZMTP 1.0 peer reads it as one);
     * one is as good as any. */
    out[8] = 1;
    out[9] = 0x7f;
    out[10] = 3;
    out[11] = 1;
    const char *name = s_mechanisms[mechanism == ZMTP_MECH_CURVE];
    memcpy (out + 12, name, strlen (name));
    out[32] = as_server ? 1 : 0;
}

int zmtp_greeting_read (const uint8_t *in, size_t len, uint8_t *minor, zmtp_mechanism_t *mechanism, bool *as_server,
                        const char **why)
{
    if (len >= 1 && in[0] != 0xff) {
        *why = "not a ZMTP 3 greeting (the first byte is not 0xFF: ZMTP 1.0, or not ZeroMQ)";
        return -1;
    }
    if (len >= ZMTP_SIGNATURE_BYTES && !(in[9] & 0x01)) {
        *why = "not a ZMTP 3 greeting (a ZMTP 1.0 peer)";
        return -1;
    }
    if (len >= 11 && in[10] < 3) {
        *why = "ZMTP 1.0 or 2.0 peer: this engine speaks ZMTP 3.0 and 3.1 only";
        return -1;
    }
    if (len < ZMTP_GREETING_BYTES)
        return 0;
    *minor = in[10] > 3 ? 1 : in[11];
    *as_server = in[32] != 0;
    *mechanism = ZMTP_MECH_OTHER;
    for (size_t m = 0; m < sizeof s_mechanisms / sizeof s_mechanisms[0]; m++) {
        uint8_t want[ZMTP_MECHANISM_BYTES] = { 0 };
        memcpy (want, s_mechanisms[m], strlen (s_mechanisms[m]));
        if (memcmp (in + 12, want, ZMTP_MECHANISM_BYTES) == 0)
            *mechanism = (zmtp_mechanism_t) m;
    }
    return 0;
}

size_t zmtp_header_write (uint8_t *out, uint8_t flags, uint64_t size)
{
    if (size <= 255) {
        out[0] = flags;
        out[1] = (uint8_t) size;
        return 2;
    }
    out[0] = flags | ZMTP_FLAG_LONG;
    zmtp_put_u64 (out + 1, size);
    return 9;
}

int zmtp_header_read (const uint8_t *in, size_t len, uint8_t *flags, uint64_t *size)
{
    if (len < 1)
        return 0;
    if (in[0] & ~(ZMTP_FLAG_MORE | ZMTP_FLAG_LONG | ZMTP_FLAG_COMMAND))
        return -1;
    if (!(in[0] & ZMTP_FLAG_LONG)) {
        if (len < 2)
            return 0;
        *flags = in[0];
        *size = in[1];
        return 2;
    }
    if (len < 9)
        return 0;
    *flags = in[0] & (uint8_t) ~ZMTP_FLAG_LONG;
    *size = zmtp_get_u64 (in + 1);
    return 9;
}

size_t zmtp_command_write (uint8_t *out, size_t cap, const char *name, const void *data, size_t data_len)
{
    size_t n = strlen (name);
    if (n == 0 || n > 255 || 1 + n + data_len > cap)
        return 0;
    out[0] = (uint8_t) n;
    memcpy (out + 1, name, n);
    if (data_len)
        memcpy (out + 1 + n, data, data_len);
    return 1 + n + data_len;
}

int zmtp_command_name (const uint8_t *body, size_t len, const uint8_t **name, size_t *name_len)
{
    if (len < 1 || body[0] == 0 || (size_t) body[0] + 1 > len)
        return -1;
    *name = body + 1;
    *name_len = body[0];
    return 0;
}

bool zmtp_command_is (const uint8_t *body, size_t len, const char *name, const uint8_t **data, size_t *data_len)
{
    const uint8_t *got;
    size_t got_len, n = strlen (name);
    if (zmtp_command_name (body, len, &got, &got_len) != 0 || got_len != n || memcmp (got, name, n) != 0)
        return false;
    *data = body + 1 + n;
    *data_len = len - 1 - n;
    return true;
}

int zmtp_property_write (uint8_t *out, size_t cap, size_t *used, const char *name, const void *value, size_t value_len)
{
    size_t n = strlen (name);
    if (n == 0 || n > 255 || value_len > UINT32_MAX || *used + 1 + n + 4 + value_len > cap)
        return -1;
    uint8_t *p = out + *used;
    p[0] = (uint8_t) n;
    memcpy (p + 1, name, n);
    zmtp_put_u32 (p + 1 + n, (uint32_t) value_len);
    if (value_len)
        memcpy (p + 5 + n, value, value_len);
    *used += 1 + n + 4 + value_len;
    return 0;
}

int zmtp_property_find (const uint8_t *md, size_t len, const char *name, const uint8_t **value, size_t *value_len)
{
    size_t want = strlen (name), at = 0;
    int found = 0;
    while (at < len) {
        size_t n = md[at];
        if (n == 0 || at + 1 + n + 4 > len)
            return -1;
        const uint8_t *pname = md + at + 1;
        uint32_t vlen = zmtp_get_u32 (md + at + 1 + n);
        if (vlen > len - (at + 1 + n + 4))
            return -1;
        if (!found && n == want && strncasecmp ((const char *) pname, name, n) == 0) {
            *value = md + at + 1 + n + 4;
            *value_len = vlen;
            found = 1;
        }
        at += 1 + n + 4 + vlen;
    }
    return found;
}

static const char *const s_types[] = {
    [ZMTP_TYPE_UNKNOWN] = "?", [ZMTP_TYPE_REQ] = "REQ", [ZMTP_TYPE_REP] = "REP",
    [ZMTP_TYPE_DEALER] = "DEALER", [ZMTP_TYPE_ROUTER] = "ROUTER", [ZMTP_TYPE_OTHER] = "another type",
};

zmtp_socket_type_t zmtp_socket_type_parse (const uint8_t *value, size_t len)
{
    static const char *const others[] = { "PAIR", "PUB", "SUB", "XPUB", "XSUB", "PUSH", "PULL", "CLIENT",
                                          "SERVER", "RADIO", "DISH", "GATHER", "SCATTER", "DGRAM", "PEER",
                                          "CHANNEL" };
    for (int t = ZMTP_TYPE_REQ; t <= ZMTP_TYPE_ROUTER; t++)
        if (len == strlen (s_types[t]) && memcmp (value, s_types[t], len) == 0)
            return (zmtp_socket_type_t) t;
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (len == strlen (others[i]) && memcmp (value, others[i], len) == 0)
            return ZMTP_TYPE_OTHER;
    return ZMTP_TYPE_UNKNOWN;
}

const char *zmtp_socket_type_name (zmtp_socket_type_t type)
{
    return type <= ZMTP_TYPE_OTHER ? s_types[type] : "?";
}
