"""sigclient: the Python client of sigserve (wire protocol: proto/signal.proto, package sigserve.v1).

The same operations as the C client (clients/sigclient.h), for Python users::

    from sigclient import SigClient, BadShape, Timeout

    with SigClient(["tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"], timeout_ms=1000) as client:
        result = client.infer("tick_mlp", features)          # 512 floats -> InferResult
        print(result.outputs, result.server_ns, result.round_trip_ns)
        outs = client.infer_rows("tick_mlp", [row0, row1])   # [[out...], [out...]]
        three = client.infer("tick_mlp", x)      # x: 3 rows of 512 (lists or numpy): outputs 3 x 1

        ids = [client.send_infer("tick_mlp", f) for f in batch]   # pipelined
        for _ in ids:
            r = client.recv_infer()          # arrival order; r.status / r.error, never raises on a status
            if not r.ok: ...

        client.health()        # Health(live, ready, version)
        client.list_models()   # [ModelInfo(name, version, backend, kernel, input_size, ...)]

Features are one row (a sequence of numbers, a 1-D numpy array) or a batch (a sequence of
equal-length rows, a 2-D numpy array), whose row count is ``rows`` (a ``rows=`` given too must
agree). A batch's ``outputs`` come back as (rows, outputs): a float32 numpy array for a numpy
batch, lists for any other; one row's stay the flat list. numpy is optional: never imported here.

One SigClient is one ZeroMQ DEALER socket (LINGER 0) connected to every endpoint given; ZeroMQ spreads
requests across them round-robin. An endpoint that is not up yet still takes its share of requests:
they wait in its queue until it comes up or the caller times out. Every wait (for room to send and
for a reply) is bounded by the client's timeout through a poller, so a dead or absent server never
hangs the caller: the call raises Timeout instead.

Following a fleet, as the C client does (clients/sigclient.h)::

    client = SigClient("dns://sigserve.trading.svc.cluster.local:5555", retries=2)

``dns://NAME:PORT`` stands for every address behind NAME (getaddrinfo, IPv4 and IPv6): the client
connects to tcp://ADDR:PORT for each and resolves NAME again every ``resolve_interval_ms`` (5000;
0: only at construction) inside the calls that send or receive (no thread of its own), connecting
new addresses and disconnecting vanished ones. A failed resolution keeps the addresses it has; a
name with no address yet is not an error until a call finds nothing at all to send to
(TransportError at once, not a timeout; the name is tried again every 200 ms until then). With a
dns:// endpoint the socket sets ZMQ_IMMEDIATE (for every endpoint): requests go only to peers whose
connection is up, so a listed address that does not answer takes no share. ``peers`` lists the
tcp:// endpoints connected now. ``resolve_endpoint`` expands one endpoint without connecting.

LSTM streams (the server keeps each stream's window; README, "LSTM models")::

    stream = client.stream("seq", stream_id=7)      # numbers the steps 1, 2, 3...
    for step in steps:                               # each the model's step_size floats
        print(stream.step(step).outputs)             # the output for the window ending here
    client.infer("seq", step, stream_id=8, step=1)   # the same, numbering yourself

Every step of a stream must reach the server that holds it, in order, so streams do not use the
round-robin socket: the client keeps a DEALER per address (opened when the first stream is routed
there) and routes a stream the first time it sees its id, to address ``mix64(stream_id) mod N`` of
the N addresses of ``peers`` then (splitmix64's finalizer; the C client routes alike). The route is
kept until ``forget_stream``: a dns:// name changing never moves a stream; when a stream's address
vanishes from its name, its next step raises StreamGone (its state went with that server). Steps
carry their number (InferRequest.step, from 1) so that the server refuses a duplicate or an
out-of-order step (STATUS_BAD_REQUEST naming the expected one) instead of applying it; a step
answered with any status but OK was not applied and goes again with the same number, which is what
``Stream.step`` does (its ``next_step`` moves on only after an OK). Stream steps are NEVER retried,
whatever ``retries`` says: an attempt that timed out may have been applied, and a copy that reached
another server would start the stream there.

``retries`` (0 to 16, default 0) makes ``infer`` send a request again when it is answered
STATUS_UNAVAILABLE (a draining server) or not answered within the timeout, and ``health`` /
``list_models`` on a timeout: inference has no side effect, and round-robin hands the new copy to
the next peer. Each attempt is a new request with a new id; the call takes the first answer to any
of its attempts and waits up to the timeout for each, so it lasts at most (retries + 1) x the
timeout. ``InferResult.attempts`` says how many it took. Pipelined calls and stream steps never
retry.

CURVE (a server with ``server.curve`` on)::

    client = SigClient("tcp://10.0.0.5:5555", curve_server="server.cert", curve_client="me.cert_secret")

``curve_server`` is the server's public certificate and ``curve_client`` this client's secret
certificate, both czmq certificate files as ``sigserve --keygen PATH`` writes them (PATH public,
PATH_secret both keys). The connection is encrypted and the server authenticates the client by its
public key; a server that does not allow the key (or whose key is not the one given) never answers,
so calls raise Timeout, whose message says so. A missing or malformed certificate raises ValueError
naming the file. CURVE on one side only (a CURVE server and a client without keys, or the other way
round) raises SecurityError at once, naming the endpoint and what the server asks for
(sigclient/_security.py; a stream's socket is watched the same way).

Like a ZeroMQ socket, a SigClient is not thread-safe: use one per thread.

Results and errors:

- ``infer`` / ``infer_rows`` return an InferResult for STATUS_OK and raise a ServerError subclass
  for any other status (BadRequest, UnknownModel, BadShape, BadValue, Overloaded, DeadlineExceeded,
  Unavailable, InternalError; the base ServerError for a status this client does not know). The
  exception carries ``status``, ``status_name``, ``message`` (the server's exact text),
  ``request_id`` and ``result`` (the whole InferResult, with the server's timings).
- ``recv_infer`` (pipelined) does NOT raise on a server status: it returns the InferResult of the
  next reply in arrival order with ``status`` and ``error`` set, so one bad request in a burst does
  not lose the others. Check ``result.ok`` or call ``result.raise_for_status()``. It raises only
  what is not a reply: Timeout, ProtocolError, TransportError.
- Timeout (also a builtin TimeoutError): no reply, or no room to send, within the timeout.
- ProtocolError: a reply that does not decode as a sigserve.v1.Reply, has several frames or no body.
- TransportError: a ZeroMQ call failed (bad endpoint, closed context, ...). StreamGone, a subclass:
  the address a stream was routed to has vanished from its dns:// name. SecurityError, a subclass:
  every peer refused the client's security mechanism (see CURVE above).
- ValueError / TypeError: bad arguments (rows or deadline_us out of uint32 range, ragged rows, a
  string or a 3-D array for features, ...), named with the accepted types, never printing the data.

Request ids start at 1 and grow by one per request (0 is what the server puts in the reply to a
request it could not decode). The synchronous calls (infer, health, list_models) discard replies
that are not theirs: late replies to earlier calls that timed out (counted in
``discarded_replies``). Do not mix them with pipelined requests still in flight on the same client:
their replies would be discarded too. Health and list-models replies carry no request id, so a late
one from an earlier timed-out health() call is taken by the next health() call.

The wire code is the package's own sigclient/_pb/signal_pb2.py, generated from proto/signal.proto
(see sigclient/_pb/__init__.py): the package needs neither protoc nor the C build.

The command line ``sigclient-py`` (sigclient/cli.py; also ``python3 -m sigclient``) has the C
sigclient's commands, options, output and exit codes.

Requires pyzmq and protobuf (Debian: python3-zmq, python3-protobuf); nothing else.

This module is the client itself (SigClient); its parts are modules of their own, whose public names
are this module's: _errors.py (Status and the exceptions), _results.py (InferResult, Health,
ModelInfo), _args.py (argument checks), _dns.py (dns:// endpoints), _stream.py (LSTM streams).
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import zmq

from ._security import MechanismWatch

__all__ = [
    "SigClient", "InferResult", "Health", "ModelInfo", "Status", "status_name", "exception_for_status",
    "SigServeError", "ServerError", "BadRequest", "UnknownModel", "BadShape", "BadValue", "Overloaded",
    "DeadlineExceeded", "Unavailable", "InternalError", "Timeout", "ProtocolError", "TransportError",
    "StreamGone", "SecurityError", "Stream",
    "DEFAULT_TIMEOUT_MS", "DEFAULT_RESOLVE_MS", "MAX_RETRY", "resolve_endpoint", "load_curve_keys",
]

DEFAULT_TIMEOUT_MS = 5000
DEFAULT_RESOLVE_MS = 5000        # how often dns:// names are resolved again
_EMPTY_RETRY_MS = 200            # a name with no address connected is tried this often
# sigserve's default max_message_bytes: a larger request is dropped by ZeroMQ without a reply, so a
# timeout after one is worth a hint.
_SERVER_DEFAULT_MAX_MESSAGE = 65536

# The client's parts (each module says what it holds); their public names are this module's.
from . import _features  # noqa: E402
from ._args import MAX_RETRY, UINT64_MAX, _retries, _stream_id, _timeout, _uint32, _uint64  # noqa: E402
from ._dns import _DNS_PREFIX, _DnsEndpoint, _getaddrinfo, resolve_endpoint  # noqa: E402
from ._errors import (BadRequest, BadShape, BadValue, DeadlineExceeded, InternalError, Overloaded,  # noqa: E402,F401
                      ProtocolError, SecurityError, ServerError, SigServeError, Status, StreamGone, Timeout,
                      TransportError, Unavailable, UnknownModel, _as_status, exception_for_status, pb, status_name)
from ._results import Health, InferResult, ModelInfo  # noqa: E402
from ._stream import Stream, _mix64, _StreamPeer  # noqa: E402,F401


# ---- the client ----

def _split_endpoints(endpoints: str | Sequence[str]) -> list[str]:
    if isinstance(endpoints, str):
        items = endpoints.replace(",", " ").split()
    else:
        items = list(endpoints)
    if not items:
        raise ValueError("no endpoints")
    for e in items:
        if not isinstance(e, str) or not e:
            raise ValueError(f"bad endpoint {e!r}: expected a string such as 'tcp://127.0.0.1:5555'")
    return items



def load_curve_keys(curve_server: str, curve_client: str) -> tuple[bytes, bytes, bytes]:
    """(server public, client public, client secret) keys, Z85, from czmq certificate files:
    the server's public certificate and the client's secret one. ValueError names the file."""
    import zmq.auth
    keys = []
    for path, need_secret in ((curve_server, False), (curve_client, True)):
        try:
            public, secret = zmq.auth.load_certificate(path)
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read the certificate {path}: {e}") from e
        if public is None or len(public) != 40:
            raise ValueError(f"{path}: no 40-character public-key (sigserve --keygen writes certificates)")
        if need_secret and (secret is None or len(secret) != 40):
            raise ValueError(f"{path}: no secret-key (give the client's secret certificate, the file ending in _secret)")
        keys.append(public)
        if need_secret:
            keys.append(secret)
    return keys[0], keys[1], keys[2]


class SigClient:
    """One DEALER socket connected to every endpoint. See the module docstring."""

    def __init__(self, endpoints: str | list[str], timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 context: zmq.Context | None = None, *, retries: int = 0,
                 resolve_interval_ms: int = DEFAULT_RESOLVE_MS, resolver=None,
                 curve_server: str | None = None, curve_client: str | None = None):
        self._endpoints = _split_endpoints(endpoints)
        if (curve_server is None) != (curve_client is None):
            raise ValueError("CURVE needs both curve_server and curve_client")
        self._curve = load_curve_keys(curve_server, curve_client) if curve_server is not None else None
        self._timeout_ms = _timeout("timeout_ms", timeout_ms)
        self._retries = _retries(retries)
        if isinstance(resolve_interval_ms, bool) or not isinstance(resolve_interval_ms, int) or resolve_interval_ms < 0:
            raise ValueError(f"resolve_interval_ms: expected 0 or more milliseconds, got {resolve_interval_ms!r}")
        self._resolve_interval_ms = resolve_interval_ms
        self._resolver = resolver or _getaddrinfo
        self._static = [e for e in self._endpoints if not e.startswith(_DNS_PREFIX)]
        self._dns = [_DnsEndpoint(e) for e in self._endpoints if e.startswith(_DNS_PREFIX)]
        self._next_resolve_ns = 0
        self._own_context = context is None
        self._context = zmq.Context() if context is None else context
        self._socket = None
        self._watch = None
        self._next_id = 1
        self._sent_at: dict[int, int] = {}     # pipelined request id -> send time (ns)
        self._largest_unanswered = 0           # bytes of the largest request since the last reply
        self._stream_peers: list[_StreamPeer] = []     # every address a stream was routed to
        self._stream_routes: dict[int, _StreamPeer] = {}   # stream id -> its peer, until forgotten
        self.discarded_replies = 0             # late replies the synchronous calls skipped
        try:
            self._socket = self._context.socket(zmq.DEALER)
            self._socket.setsockopt(zmq.LINGER, 0)
            self._watch = MechanismWatch(self._socket, self._curve is not None)
            if self._curve:
                # before any connect: a connection takes the mechanism it is made with
                self._socket.curve_serverkey, self._socket.curve_publickey, self._socket.curve_secretkey = self._curve
            if self._dns:
                # dns:// names give IPv6 addresses too, and some of them may not answer.
                self._socket.setsockopt(zmq.IPV6, 1)
                self._socket.setsockopt(zmq.IMMEDIATE, 1)
            for e in self._static:
                self._socket.connect(e)
        except zmq.ZMQError as e:
            self.close()
            raise TransportError(f"cannot connect to {self._describe()}: {e}") from e
        self._resolve_all()
        self._poller = zmq.Poller()
        self._poller.register(self._socket, zmq.POLLIN)
        self._poller.register(self._watch.monitor, zmq.POLLIN)

    # -- lifetime --

    def close(self) -> None:
        """Closes the socket at once (pending messages are dropped), and the context if the client
        made it. Safe to call twice."""
        for peer in self._stream_peers:
            peer.close()
        self._stream_peers.clear()
        self._stream_routes.clear()
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        if self._own_context and self._context is not None:
            self._context.term()
        self._context = None
        self._sent_at.clear()

    @property
    def closed(self) -> bool:
        return self._socket is None

    def __enter__(self) -> SigClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"timeout_ms={self._timeout_ms}"
        return f"SigClient({self._endpoints!r}, {state})"

    # -- settings --

    @property
    def endpoints(self) -> list[str]:
        """The endpoints as given (dns:// ones unexpanded)."""
        return list(self._endpoints)

    @property
    def peers(self) -> list[str]:
        """What the socket is connected to now: the static endpoints and each dns:// name's addresses."""
        return self._static + [e for d in self._dns for e in d.connected]

    @property
    def retries(self) -> int:
        return self._retries

    @retries.setter
    def retries(self, value: int) -> None:
        self._retries = _retries(value)

    @property
    def timeout_ms(self) -> int:
        return self._timeout_ms

    @timeout_ms.setter
    def timeout_ms(self, value: int) -> None:
        self._timeout_ms = _timeout("timeout_ms", value)

    @property
    def pending(self) -> int:
        """Pipelined requests sent and not answered yet (as far as this client has seen)."""
        return len(self._sent_at)

    # -- inference --

    def infer(self, model: str, features, rows: int | None = None, deadline_us: int = 0, *,
              stream_id: int = 0, step: int = 0) -> InferResult:
        """Runs one request of ROWS rows and waits for its reply. FEATURES: one row, or ROWS rows
        row-major (rows 0 or not given means 1), as a sequence of numbers or a 1-D numpy array; or a
        batch (a sequence of equal-length rows, a 2-D numpy array) whose row count is ROWS, and
        whose result's ``outputs`` are shaped (rows, outputs). Raises the ServerError subclass for
        a non-OK status, Timeout when no reply comes within the timeout, TypeError / ValueError
        for features it cannot read or a ROWS that contradicts them (nothing is sent).

        With a STREAM_ID (an LSTM model): FEATURES is one step of that stream (the model's step_size
        floats) and STEP its number in the stream (from 1; 0 sends it unnumbered, never checked).
        Sent once, on the stream's own socket (see the module docstring), never retried; raises
        StreamGone when the stream's address has vanished."""
        return self._infer(model, _features.prepare(features, rows), deadline_us, stream_id, step)

    def _infer(self, model: str, features: _features.Features, deadline_us: int, stream_id: int,
               step: int) -> InferResult:
        if stream_id:
            return _features.shape_outputs(self._infer_stream(model, features, deadline_us, _stream_id(stream_id),
                                                              _uint64("step", step)), features)
        if step:
            raise ValueError("step: only a stream's steps are numbered; give stream_id too")
        # Attempt k is request first + k: one call's ids are consecutive.
        first = self._send_infer(model, features, deadline_us)
        sent = self._sent_at.pop(first)
        ids = {first: sent}
        deadline = sent + self._timeout_ms * 1_000_000

        def again() -> None:
            nonlocal deadline
            request_id = self._send_infer(model, features, deadline_us)
            ids[request_id] = self._sent_at.pop(request_id)
            deadline = ids[request_id] + self._timeout_ms * 1_000_000

        while True:
            try:
                reply = self._recv_reply(deadline, f"the reply to request {max(ids)}")
            except Timeout as e:
                if len(ids) > self._retries:
                    raise _after_attempts(e, len(ids))
                again()
                continue
            body = reply.WhichOneof("body")
            ours = body == "infer" and reply.infer.request_id in ids
            unavailable = ours and reply.infer.status == Status.STATUS_UNAVAILABLE
            if unavailable and reply.infer.request_id != max(ids):
                continue        # an earlier attempt's: a later one is out
            if unavailable and len(ids) <= self._retries:
                again()
                continue
            if ours or self._is_rejection(reply):
                result = self._result(reply.infer, ids.get(reply.infer.request_id, sent))
                result.attempts = len(ids)
                try:
                    return _features.shape_outputs(result.raise_for_status(), features)
                except ServerError as e:
                    raise _after_attempts(e, len(ids))
            self._discard(reply)

    def stream(self, model: str, stream_id: int, first_step: int = 1) -> Stream:
        """A Stream of MODEL under STREAM_ID that numbers its steps from FIRST_STEP."""
        return Stream(self, model, stream_id, first_step)

    def stream_endpoint(self, stream_id: int) -> str:
        """The address STREAM_ID's steps go to, routing it now if it is new (TransportError when there
        is no address at all)."""
        self._check_open()
        self._resolve_if_due()
        return self._stream_route(_stream_id(stream_id)).endpoint

    def forget_stream(self, stream_id: int) -> None:
        """Drops STREAM_ID's route: its next step is routed afresh over the current addresses (after
        StreamGone: start the stream again from step 1)."""
        self._stream_routes.pop(stream_id, None)

    def infer_rows(self, model: str, rows, deadline_us: int = 0):
        """One request with one row per feature vector (ROWS: a sequence of equal-length rows, or a
        2-D numpy array); returns the outputs row by row: lists, or a float32 numpy array of
        (rows, outputs) for a numpy array."""
        features = _features.prepare(rows, None, name="rows", batch_only=True)
        return self._infer(model, features, deadline_us, 0, 0).outputs

    def send_infer(self, model: str, features, rows: int | None = None, deadline_us: int = 0) -> int:
        """Queues one request without waiting; returns its request id. Collect the reply with
        recv_infer, whose outputs are flat whatever FEATURES was (``output_rows()`` splits them).
        FEATURES and ROWS as for infer. Raises Timeout when there is no room to send within the
        timeout."""
        return self._send_infer(model, _features.prepare(features, rows), deadline_us)

    def recv_infer(self, timeout_ms: int | None = None) -> InferResult:
        """The next InferReply in arrival order (not necessarily send order when several servers
        answer: match by result.request_id), whatever its status: a non-OK reply is returned with
        ``status`` and ``error`` set, not raised (see InferResult.raise_for_status). Late health and
        list-models replies are skipped. Raises Timeout, ProtocolError, TransportError."""
        wait_ms = self._timeout_ms if timeout_ms is None else _timeout("timeout_ms", timeout_ms)
        deadline = time.monotonic_ns() + wait_ms * 1_000_000
        while True:
            reply = self._recv_reply(deadline, "a reply", wait_ms)
            if reply.WhichOneof("body") == "infer":
                return self._result(reply.infer, self._sent_at.pop(reply.infer.request_id, None))
            self._discard(reply)

    # -- health and models --

    def health(self) -> Health:
        """Whether the server is live and ready (every model loaded and warmed), and its version."""
        req = pb.Request()
        req.health.SetInParent()
        reply = self._call(req, "health")
        return Health(live=reply.health.live, ready=reply.health.ready, version=reply.health.version)

    def list_models(self) -> list[ModelInfo]:
        """The server's models, in its config's order."""
        req = pb.Request()
        req.list_models.SetInParent()
        reply = self._call(req, "list_models")
        return [ModelInfo(name=m.name, version=m.version, backend=m.backend, kernel=m.kernel,
                          input_size=m.input_size, output_size=m.output_size, max_rows=m.max_rows,
                          available=m.available, type=m.type, window=m.window, step_size=m.step_size)
                for m in reply.list_models.models]

    # -- raw frames (tests, diagnostics) --

    def send_raw(self, payload: bytes) -> None:
        """Sends any bytes as one frame."""
        self._send(bytes(payload))

    def recv_raw(self, timeout_ms: int | None = None) -> bytes:
        """The next frame, whatever it holds."""
        wait_ms = self._timeout_ms if timeout_ms is None else _timeout("timeout_ms", timeout_ms)
        return self._recv_frame(time.monotonic_ns() + wait_ms * 1_000_000, "a reply", wait_ms)

    # -- internals --

    def _check_open(self) -> zmq.Socket:
        if self._socket is None:
            raise SigServeError("the client is closed")
        return self._socket

    def _describe(self) -> str:
        """The endpoints for messages: static ones, then each dns:// name with what it stands for now."""
        return ", ".join(self._static + [d.describe() for d in self._dns])

    def _resolve_all(self) -> None:
        for d in self._dns:
            d.refresh(self._socket, self._resolver)
        listed = set(self.peers)
        for peer in self._stream_peers:
            if not peer.gone and peer.endpoint not in listed:
                # its streams' state is on that server: they fail from now on rather than move
                peer.gone = True
                peer.close()
        wait_ms = self._resolve_interval_ms
        if not self.peers:
            wait_ms = min(wait_ms, _EMPTY_RETRY_MS)
        self._next_resolve_ns = time.monotonic_ns() + wait_ms * 1_000_000

    def _resolve_if_due(self) -> None:
        if self._dns and self._resolve_interval_ms > 0 and time.monotonic_ns() >= self._next_resolve_ns:
            self._resolve_all()

    def _infer_request(self, model: str, features: _features.Features, deadline_us: int,
                       stream_id: int = 0, step: int = 0) -> bytes:
        if not isinstance(model, str):
            raise TypeError(f"model: expected a str, got {type(model).__name__}")
        req = pb.Request()
        inf = req.infer
        inf.request_id = self._next_id
        inf.model = model
        try:
            inf.features.extend(features.values)
        except (TypeError, ValueError, OverflowError):
            # protobuf's own message prints the offending value, a whole row for a 3-D input
            raise _features.element_error(features, _accepts_float) from None
        inf.rows = _uint32("rows", 1 if features.rows is None else features.rows)
        inf.deadline_us = _uint32("deadline_us", deadline_us)
        inf.stream_id = stream_id
        inf.step = step
        return req.SerializeToString()

    def _send_infer(self, model: str, features: _features.Features, deadline_us: int) -> int:
        sent_ns = self._send(self._infer_request(model, features, deadline_us))
        request_id = self._next_id
        self._sent_at[request_id] = sent_ns
        self._next_id = self._next_id + 1 if self._next_id < (1 << 64) - 1 else 1
        return request_id

    def _send(self, payload: bytes) -> int:
        """Sends one frame; returns the time (monotonic ns) taken just before handing it to ZeroMQ."""
        sock = self._check_open()
        self._resolve_if_due()
        if not self.peers:
            raise TransportError(f"no address to send to: {self._describe()}")
        self._watch.before_send(self.peers)
        self._check_mechanism()
        return self._send_on(sock, payload, self._describe())

    def _check_mechanism(self, watch: MechanismWatch | None = None, peers: list[str] | None = None) -> None:
        """Raises SecurityError while every peer of WATCH's socket (the main one's by default) refuses
        the client's security mechanism."""
        watch, peers = (self._watch, self.peers) if watch is None else (watch, peers)
        watch.take_events(peers)
        if watch.all_refused(peers):
            raise SecurityError(watch.failure, watch.hint())

    def _send_on(self, sock, payload: bytes, name: str, stream: _StreamPeer | None = None) -> int:
        """Sends on SOCK: the main socket, or STREAM's."""
        self._largest_unanswered = max(self._largest_unanswered, len(payload))
        watch, peers = (self._watch, self.peers) if stream is None else (stream.watch, [stream.endpoint])
        try:
            # Room to send: a DEALER queues for endpoints not up yet, up to its high-water mark.
            if not self._writable(sock, watch, peers):
                raise Timeout(f"timed out after {self._timeout_ms} ms sending to {name} (send queue full)")
            sent_ns = time.monotonic_ns()     # before: the reply may arrive before send() returns
            sock.send(payload, zmq.NOBLOCK)
            return sent_ns
        except zmq.Again as e:
            self._check_mechanism(watch, peers)     # its pipe went with a refused handshake
            raise Timeout(f"timed out after {self._timeout_ms} ms sending to {name} (send queue full)") from e
        except zmq.ZMQError as e:
            raise TransportError(f"cannot send to {name}: {e}") from e

    def _writable(self, sock, watch: MechanismWatch, peers: list[str]) -> bool:
        """Room to send within the timeout. Waiting, the socket's monitor (WATCH) is watched too: a
        DEALER whose every peer refused its mechanism has no pipe and would wait the whole timeout."""
        if sock.poll(0, zmq.POLLOUT):
            return True
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLOUT)
        poller.register(watch.monitor, zmq.POLLIN)
        deadline = time.monotonic_ns() + self._timeout_ms * 1_000_000
        while True:
            left_ms = max(0, math.ceil((deadline - time.monotonic_ns()) / 1e6))
            ready = dict(poller.poll(left_ms))
            if ready.get(sock, 0) & zmq.POLLOUT:
                return True
            if watch.monitor in ready:
                self._check_mechanism(watch, peers)
            elif left_ms == 0:
                return False

    # -- streams --

    def _stream_route(self, stream_id: int) -> _StreamPeer:
        """STREAM_ID's peer: its route, or a new one to address mix64(id) mod N of ``peers`` now."""
        peer = self._stream_routes.get(stream_id)
        if peer is not None:
            return peer
        addresses = self.peers
        if not addresses:
            raise TransportError(f"no address to send stream {stream_id} to: {self._describe()}")
        endpoint = addresses[_mix64(stream_id) % len(addresses)]
        peer = next((p for p in self._stream_peers if not p.gone and p.endpoint == endpoint), None)
        if peer is None:
            sock = self._context.socket(zmq.DEALER)
            watch = None
            try:
                sock.setsockopt(zmq.LINGER, 0)
                watch = MechanismWatch(sock, self._curve is not None)
                if self._curve:
                    sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = self._curve
                if self._dns:
                    sock.setsockopt(zmq.IPV6, 1)
                    sock.setsockopt(zmq.IMMEDIATE, 1)
                sock.connect(endpoint)
            except zmq.ZMQError as e:
                if watch is not None:
                    watch.close()
                sock.close(linger=0)
                raise TransportError(f"cannot connect a stream socket to {endpoint}: {e}") from e
            peer = _StreamPeer(endpoint, sock, watch)
            self._stream_peers.append(peer)
        self._stream_routes[stream_id] = peer
        return peer

    def _infer_stream(self, model: str, features: _features.Features, deadline_us: int, stream_id: int,
                      step: int) -> InferResult:
        self._check_open()
        payload = self._infer_request(model, features, deadline_us, stream_id, step)
        self._resolve_if_due()
        peer = self._stream_route(stream_id)
        if peer.gone:
            raise StreamGone(f"stream {stream_id}: its server {peer.endpoint} is no longer listed "
                             f"({self._describe()}) and the stream's state went with it; forget_stream, then "
                             f"start the stream again from step 1")
        request_id = self._next_id
        self._next_id = self._next_id + 1 if self._next_id < UINT64_MAX else 1
        peer.watch.before_send([peer.endpoint])
        self._check_mechanism(peer.watch, [peer.endpoint])
        sent = self._send_on(peer.socket, payload, peer.endpoint, peer)
        deadline = sent + self._timeout_ms * 1_000_000
        while True:
            try:
                frame = self._recv_stream_frame(peer, deadline)
            except Timeout as e:
                e.args = (f"{e.args[0]} (stream {stream_id}, step {step}: stream steps are never retried; "
                          f"it may have been applied)",)
                raise
            reply = self._parse_reply(frame, peer.endpoint)
            if reply.WhichOneof("body") == "infer" and (reply.infer.request_id == request_id
                                                       or self._is_rejection(reply)):
                return self._result(reply.infer, sent).raise_for_status()
            self._discard(reply)     # a late reply to a step that timed out

    def _recv_stream_frame(self, peer: _StreamPeer, deadline_ns: int) -> bytes:
        """The next frame on a stream's socket; no resolution while waiting (it could close it). Its
        monitor is watched while waiting: a refused security mechanism raises SecurityError at once."""
        poller = zmq.Poller()
        poller.register(peer.socket, zmq.POLLIN)
        poller.register(peer.watch.monitor, zmq.POLLIN)
        try:
            while True:
                left_ms = math.ceil((deadline_ns - time.monotonic_ns()) / 1e6)
                if left_ms <= 0:
                    hint = (" (CURVE: a server that does not allow this client's key, or whose key is not the "
                            "one given, never answers)") if self._curve else ""
                    raise Timeout(f"timed out after {self._timeout_ms} ms waiting for a reply from "
                                  f"{peer.endpoint}{hint}")
                ready = dict(poller.poll(left_ms))
                if peer.watch.monitor in ready:
                    self._check_mechanism(peer.watch, [peer.endpoint])
                if ready.get(peer.socket, 0) & zmq.POLLIN:
                    try:
                        frames = peer.socket.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        continue
                    self._largest_unanswered = 0
                    if len(frames) != 1:
                        raise ProtocolError(f"a reply of {len(frames)} frames from {peer.endpoint}, expected one")
                    return frames[0]
        except zmq.ZMQError as e:
            raise TransportError(f"cannot receive from {peer.endpoint}: {e}") from e

    def _recv_frame(self, deadline_ns: int, what: str, wait_ms: int | None = None) -> bytes:
        sock = self._check_open()
        wait_ms = self._timeout_ms if wait_ms is None else wait_ms
        try:
            while True:
                left_ms = math.ceil((deadline_ns - time.monotonic_ns()) / 1e6)
                if left_ms <= 0:
                    hint = ""
                    if self._largest_unanswered > _SERVER_DEFAULT_MAX_MESSAGE:
                        hint = (f" (a request was {self._largest_unanswered} bytes: a server drops requests "
                                f"over its max_message_bytes, {_SERVER_DEFAULT_MAX_MESSAGE} by default, "
                                f"without a reply)")
                    elif self._curve:
                        hint = (" (CURVE: a server that does not allow this client's key, or whose key is "
                                "not the one given, never answers)")
                    raise Timeout(f"timed out after {wait_ms} ms waiting for {what} from "
                                  f"{self._describe()}{hint}")
                self._resolve_if_due()
                if self._dns and self._resolve_interval_ms > 0:
                    # a long wait still resolves dns:// names on time
                    left_ms = max(0, min(left_ms, math.ceil((self._next_resolve_ns - time.monotonic_ns()) / 1e6)))
                ready = dict(self._poller.poll(left_ms))
                if self._watch.monitor in ready:
                    self._check_mechanism()
                if ready.get(sock, 0) & zmq.POLLIN:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        continue
                    self._largest_unanswered = 0
                    if len(frames) != 1:
                        raise ProtocolError(f"a reply of {len(frames)} frames from {self._describe()}, "
                                            f"expected one")
                    return frames[0]
        except zmq.ZMQError as e:
            raise TransportError(f"cannot receive from {self._describe()}: {e}") from e

    def _recv_reply(self, deadline_ns: int, what: str, wait_ms: int | None = None):
        return self._parse_reply(self._recv_frame(deadline_ns, what, wait_ms), self._describe())

    @staticmethod
    def _parse_reply(frame: bytes, name: str):
        reply = pb.Reply()
        try:
            reply.ParseFromString(frame)
        except Exception as e:  # google.protobuf.message.DecodeError, or a runtime's own error
            raise ProtocolError(f"cannot decode a reply of {len(frame)} bytes from {name}: {e}") from e
        if reply.WhichOneof("body") is None:
            raise ProtocolError(f"a reply with no body ({len(frame)} bytes) from {name}")
        return reply

    @staticmethod
    def _is_rejection(reply) -> bool:
        """The server's answer to a request it could not read: request_id 0 and an error status."""
        return (reply.WhichOneof("body") == "infer" and reply.infer.request_id == 0
                and reply.infer.status != Status.STATUS_OK)

    def _discard(self, reply) -> None:
        self.discarded_replies += 1
        if reply.WhichOneof("body") == "infer":
            self._sent_at.pop(reply.infer.request_id, None)

    def _call(self, req, want: str):
        payload = req.SerializeToString()
        deadline = self._send(payload) + self._timeout_ms * 1_000_000
        attempts = 1
        while True:
            try:
                reply = self._recv_reply(deadline, f"the {want} reply")
            except Timeout as e:
                if attempts > self._retries:
                    raise _after_attempts(e, attempts)
                deadline = self._send(payload) + self._timeout_ms * 1_000_000
                attempts += 1
                continue
            if reply.WhichOneof("body") == want:
                return reply
            if self._is_rejection(reply):
                raise exception_for_status(reply.infer.status, reply.infer.error, request_id=0)
            self._discard(reply)

    @staticmethod
    def _result(rep, sent_ns: int | None) -> InferResult:
        now = time.monotonic_ns()
        return InferResult(request_id=rep.request_id, outputs=list(rep.outputs), rows=rep.rows,
                           model_version=rep.model_version, queue_ns=rep.queue_ns, compute_ns=rep.compute_ns,
                           server_ns=rep.server_ns, round_trip_ns=now - sent_ns if sent_ns is not None else 0,
                           status=_as_status(rep.status), error=rep.error, backend=rep.backend)


def _accepts_float(value) -> bool:
    """Whether the wire's float field takes VALUE (the test behind a features error's message)."""
    try:
        pb.InferRequest().features.append(value)
        return True
    except (TypeError, ValueError, OverflowError):
        return False


def _after_attempts(error: SigServeError, attempts: int) -> SigServeError:
    """ERROR, saying how many attempts it took when more than one."""
    if attempts > 1:
        if isinstance(error, ServerError):
            error.message_suffix = f" (after {attempts} attempts)"
        else:
            error.args = (f"{error.args[0] if error.args else error} (after {attempts} attempts)",)
    return error
