"""A server that refuses the client's security mechanism (CURVE on one side only), seen at once.

Each side of a ZeroMQ connection reads the other's mechanism in its greeting and closes on a
mismatch; libzmq then gives up on that endpoint for good (a protocol error is not retried) and tells
only a socket monitor. Without one, every call would wait for its timeout. MechanismWatch reads the
DEALER's monitor: SigClient fails a call with SecurityError as soon as every peer has refused it,
and a send tries a refused peer again (disconnect, connect) at most once a second, so a client
outlives a server's change of configuration. The C client does the same (clients/sigclient.h,
"Security mismatch").
"""
from __future__ import annotations

import time

import zmq
from zmq.utils.monitor import recv_monitor_message

RETRY_NS = 1_000_000_000        # a refused peer is tried again by a send at most this often


class MechanismWatch:
    """The handshake failures of one DEALER (SOCK), and the peers refused for their mechanism."""

    def __init__(self, sock: zmq.Socket, curve: bool):
        self._sock = sock
        self._curve = curve
        self.monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
        self._refused: dict[str, int] = {}     # endpoint -> when a send may try it again (monotonic ns)
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
            if (event["event"] != zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    or event["value"] != zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH):
                continue
            endpoint = event["endpoint"].decode(errors="replace")
            if endpoint not in peers and len(peers) == 1:
                endpoint = peers[0]
            self.failure = endpoint + (": the server does not use CURVE, and this client has CURVE keys" if self._curve
                                       else ": the server asks for CURVE, and this client has no CURVE keys")
            self._refused.setdefault(endpoint, time.monotonic_ns() + RETRY_NS)

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
                    self._sock.disconnect(endpoint)     # what libzmq keeps of the dead one
                except zmq.ZMQError:
                    pass
                self._sock.connect(endpoint)

    def hint(self) -> str:
        """What to give SigClient, for the error's end."""
        return ("SigClient without curve_server and curve_client" if self._curve
                else "SigClient(..., curve_server=FILE, curve_client=FILE_secret): the server's public "
                     "certificate and this client's secret one")
