/* A server's security mechanism, read from its greeting on a connection of our own.
 *
 * For a client on libzmq's engine: a CURVE server refusing a plaintext client (or the reverse) closes
 * as soon as it has read the client's greeting, and libzmq's client engine, writing the rest of its
 * own, often sees that close (EPIPE, ECONNRESET) before it reads the server's mechanism: its monitor
 * then reports a handshake that failed without detail, and libzmq reconnects for ever (measured
 * across two processes, 2026-12-06: told only 2 to 3 times in 12). After such a failure the client
 * asks here what the server speaks: the signature and major version, the server's whole greeting
 * back, then the rest of ours with OUR mechanism (so that the server refuses it as what it is, and
 * counts it so), and the connection is closed (a server of the same mechanism then sees a handshake
 * that failed without detail: the probe runs only after libzmq's own failed). Blocking, bounded by
 * TIMEOUT_MS. */
#ifndef SIGSERVE_ZMTP_PROBE_H
#define SIGSERVE_ZMTP_PROBE_H

#include "zmtp_wire.h"

/* ENDPOINT's mechanism into *MECHANISM: 0, or -1 with errno (ETIMEDOUT: no whole greeting within
 * TIMEOUT_MS; EPROTO: not a ZMTP 3 peer; another: the connection failed). */
int zmtp_probe_mechanism (const char *endpoint, zmtp_mechanism_t ours, int timeout_ms, zmtp_mechanism_t *mechanism);

#endif
