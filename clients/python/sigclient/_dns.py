"""sigclient's dns:// endpoints: "dns://NAME:PORT" parsed and resolved (getaddrinfo, IPv4 and IPv6, or a
resolver a test gives), and one such endpoint's connected addresses kept in step with its name
(sigclient.client's docstring: "Following a fleet")."""
from __future__ import annotations

import re
import socket as _socket

import zmq

from ._errors import TransportError

_DNS_PREFIX = "dns://"


def _getaddrinfo(name: str) -> list[str]:
    """Every address behind NAME, numeric ("10.0.0.7", "::1")."""
    infos = _socket.getaddrinfo(name, None, _socket.AF_UNSPEC, _socket.SOCK_STREAM)
    return [info[4][0].split("%")[0] for info in infos if info[0] in (_socket.AF_INET, _socket.AF_INET6)]


def _parse_dns(endpoint: str) -> tuple[str, int]:
    """("NAME", PORT) of "dns://NAME:PORT" (NAME may be a bracketed IPv6 literal); ValueError otherwise."""
    m = re.fullmatch(r"dns://(\[[^\]/]+\]|[^\[\]/]+):([0-9]+)", endpoint)
    port = int(m.group(2)) if m else 0
    if not m or not 1 <= port <= 65535:
        raise ValueError(f"bad endpoint {endpoint!r}: expected dns://NAME:PORT with a port from 1 to 65535")
    name = m.group(1)
    return (name[1:-1] if name.startswith("[") else name), port


def _dns_lookup(name: str, port: int, resolver) -> list[str]:
    """The tcp:// endpoints behind NAME, sorted, without duplicates (maybe none). Raises OSError."""
    found = {f"tcp://[{a}]:{port}" if ":" in a else f"tcp://{a}:{port}" for a in resolver(name)}
    return sorted(found)


def resolve_endpoint(endpoint: str, resolver=None) -> list[str]:
    """"dns://NAME:PORT" -> ["tcp://ADDR:PORT", ...] for every address behind NAME (sorted); any other
    endpoint -> [endpoint]. Raises ValueError for a malformed one, TransportError when NAME has no address.
    RESOLVER (name -> list of numeric addresses) replaces getaddrinfo, for tests."""
    if not endpoint.startswith(_DNS_PREFIX):
        return [endpoint]
    name, port = _parse_dns(endpoint)
    try:
        found = _dns_lookup(name, port, resolver or _getaddrinfo)
    except OSError as e:
        raise TransportError(f"{endpoint}: {e.strerror or e}") from e
    if not found:
        raise TransportError(f"{endpoint}: no address")
    return found


class _DnsEndpoint:
    """One dns://NAME:PORT and the tcp:// endpoints connected for it now."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.name, self.port = _parse_dns(endpoint)
        self.connected: list[str] = []
        self.error = ""       # why the last resolution gave nothing; "" when it gave addresses

    def refresh(self, sock, resolver) -> None:
        """Connects new addresses, disconnects vanished ones; a failure or no address changes nothing."""
        try:
            fresh = _dns_lookup(self.name, self.port, resolver)
        except OSError as e:
            self.error = str(e.strerror or e)
            return
        if not fresh:
            self.error = "no address"
            return
        self.error = ""
        for e in self.connected:
            if e not in fresh:
                sock.disconnect(e)        # requests still queued for it are dropped
        kept = [e for e in self.connected if e in fresh]
        for e in fresh:
            if e in kept:
                continue
            try:
                sock.connect(e)
                kept.append(e)
            except zmq.ZMQError as err:
                self.error = f"cannot connect to {e}: {err}"
        self.connected = sorted(kept)

    def describe(self) -> str:
        inner = ", ".join(self.connected) if self.connected else "no address"
        if self.error and not (not self.connected and self.error == "no address"):
            inner += ("; last resolution: " if self.connected else ": ") + self.error
        return f"{self.endpoint} [{inner}]"
