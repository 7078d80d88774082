"""A server that refuses the client's security mechanism (CURVE on one side only), seen at once.

Each side of a ZeroMQ connection reads the other's mechanism in its greeting and closes on a
mismatch; libzmq then gives up on that endpoint (a protocol error is not retried) and tells only a
socket monitor. Without one, every call would wait for its timeout. But libzmq's engine often loses
a race there: the server closes as soon as it has read our greeting, and the engine, writing the
rest of its own, sees the close (EPIPE, ECONNRESET) before it reads the server's mechanism; the
monitor then reports a handshake that failed without detail, and libzmq reconnects for ever. After
such a failure the server's greeting is read on a connection of our own (probe_mechanism), at most
once a second a peer. MechanismWatch reads the DEALER's monitor: SigClient fails a call with
SecurityError as soon as every peer has refused it (a refused peer is disconnected), and a send
tries a refused peer again (connect) at most once a second, so a client outlives a server's change
of configuration. The C client does the same (clients/sigclient.h, "Security mismatch";
transport/zmtp_probe.h).
"""
from __future__ import annotations

import socket
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

RETRY_NS = 1_000_000_000        # a refused peer is tried again by a send at most this often
PROBE_S = 0.25                  # how long a look at a server's greeting may take (on a failure only)
SIGNATURE = b"\xff" + bytes(8) + b"\x7f"


def _connect(endpoint: str, timeout: float) -> socket.socket:
    """A plain socket connected to ENDPOINT (tcp://HOST:PORT, tcp://[IPv6]:PORT, ipc://PATH)."""
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect("\0" + path[1:] if path.startswith("@") else path)
        return s
    if not endpoint.startswith("tcp://"):
        raise OSError(f"{endpoint}: not a tcp:// or ipc:// endpoint")
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    return socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)


def probe_mechanism(endpoint: str, curve: bool, timeout: float = PROBE_S) -> str | None:
    """ENDPOINT's security mechanism ("NULL", "CURVE", ...) from its greeting, or None (no whole
    ZMTP 3 greeting within TIMEOUT seconds). Our signature and major version go first (a libzmq
    server answers with its whole greeting), then the rest of ours with our own mechanism, so that
    the server refuses what this client is and counts it so."""
    try:
        with _connect(endpoint, timeout) as s:
            s.sendall(SIGNATURE + b"\x03")
            greeting = b""
            while len(greeting) < 64:
                chunk = s.recv(64 - len(greeting))
                if not chunk:
                    return None
                greeting += chunk
            if greeting[:1] != b"\xff" or greeting[9] & 1 == 0 or greeting[10] < 3:
                return None
            ours = (b"CURVE" if curve else b"NULL").ljust(20, b"\0")
            try:
                s.sendall(b"\x01" + ours + bytes(32))
            except OSError:
                pass
            return greeting[12:32].rstrip(b"\0").decode(errors="replace")
    except (OSError, ValueError):
        return None


class MechanismWatch:
    """The handshake failures of one DEALER (SOCK), and the peers refused for their mechanism."""

    def __init__(self, sock: zmq.Socket, curve: bool):
        self._sock = sock
        self._curve = curve
        self.monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                               | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        self._refused: dict[str, int] = {}     # endpoint -> when a send may try it again (monotonic ns)
        self._probed: dict[str, int] = {}      # endpoint -> when a failure without detail is looked into again
        self.failure = ""                      # "ENDPOINT: what the server asks for" (the last one)

    def close(self) -> None:
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(linger=0)

    def take_events(self, peers: list[str]) -> None:
        """Reads what the monitor has. An event names the address connected (a host name resolved):
        when it is none of PEERS and there is one peer, it is that one."""
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            endpoint = event["endpoint"].decode(errors="replace")
            address = endpoint
            if endpoint not in peers and len(peers) == 1:
                endpoint = peers[0]
            if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
                if event["value"] != zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
                    continue
            elif not self._mismatch(endpoint, address):
                continue
            self.failure = endpoint + (": the server does not use CURVE, and this client has CURVE keys" if self._curve
                                       else ": the server asks for CURVE, and this client has no CURVE keys")
            if endpoint not in self._refused:
                self._refused[endpoint] = time.monotonic_ns() + RETRY_NS
                try:
                    self._sock.disconnect(endpoint)     # libzmq may be reconnecting to it for ever
                except zmq.ZMQError:
                    pass

    def _mismatch(self, endpoint: str, address: str) -> bool:
        """Whether a handshake with ADDRESS (ENDPOINT's) that failed without detail was a mechanism
        mismatch: the server's greeting says, looked at most once a RETRY_NS a peer."""
        now = time.monotonic_ns()
        if endpoint in self._refused or now < self._probed.get(endpoint, 0):
            return False
        self._probed[endpoint] = now + RETRY_NS
        theirs = probe_mechanism(address, self._curve)
        return theirs in ("NULL", "CURVE") and theirs != ("CURVE" if self._curve else "NULL")

    def all_refused(self, peers: list[str]) -> bool:
        return bool(peers) and all(p in self._refused for p in peers)

    def before_send(self, peers: list[str]) -> None:
        """Refused peers that are due are connected again; those no longer listed are forgotten."""
        now = time.monotonic_ns()
        for endpoint, due in list(self._refused.items()):
            if endpoint in peers and now < due:
                continue
            del self._refused[endpoint]
            if endpoint in peers:
                try:
                    self._sock.disconnect(endpoint)     # disconnected when refused: this is in case
                except zmq.ZMQError:
                    pass
                self._sock.connect(endpoint)

    def hint(self) -> str:
        """What to give SigClient, for the error's end."""
        return ("SigClient without curve_server and curve_client" if self._curve
                else "SigClient(..., curve_server=FILE, curve_client=FILE_secret): the server's public "
                     "certificate and this client's secret one")
