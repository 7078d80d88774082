"""sigclient's LSTM streams: a Stream (the steps of one stream id, numbered), the socket of the
streams routed to one address, and how a stream id picks its address (sigclient.client's docstring:
"LSTM streams")."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ._args import UINT64_MAX, _stream_id, _uint64
from ._results import InferResult
from ._security import MechanismWatch

if TYPE_CHECKING:
    from .client import SigClient


def _mix64(z: int) -> int:
    """splitmix64's finalizer (as the C client's s_mix64): how a stream id picks its address."""
    z = (z + 0x9E3779B97F4A7C15) & UINT64_MAX
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & UINT64_MAX
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & UINT64_MAX
    return z ^ (z >> 31)


class _StreamPeer:
    """The socket of the streams routed to one address: a DEALER connected there alone, with the
    watch of its handshakes (a refused security mechanism fails a step at once, as on the main socket)."""

    def __init__(self, endpoint: str, sock, watch: MechanismWatch):
        self.endpoint = endpoint
        self.socket = sock
        self.watch = watch
        self.gone = False

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        if self.socket is not None:
            self.socket.close(linger=0)
            self.socket = None


class Stream:
    """One stream of an LSTM model on a SigClient (``client.stream(model, stream_id)``): ``step``
    sends the next step numbered ``next_step`` (1 for a new stream) and moves the number on only
    after an OK answer; after a ServerError the step was not applied and the same number goes
    again; after Timeout or TransportError nobody knows: the number stays too (a server that checks
    numbers refuses a duplicate rather than apply it; set ``next_step`` to move past it)."""

    def __init__(self, client: SigClient, model: str, stream_id: int, first_step: int = 1):
        if not isinstance(model, str):
            raise TypeError(f"model: expected a str, got {type(model).__name__}")
        self.client = client
        self.model = model
        self.stream_id = _stream_id(stream_id)
        self.next_step = _uint64("first_step", first_step)

    def step(self, features: Sequence[float], deadline_us: int = 0) -> InferResult:
        """Sends one step (the model's step_size floats: a sequence, a 1-D numpy array, or one row
        of them, whose output comes back as one row) and returns the output for the window that
        ends with it. Raises as ``SigClient.infer``."""
        result = self.client.infer(self.model, features, deadline_us=deadline_us, stream_id=self.stream_id,
                                   step=self.next_step)
        if self.next_step:
            self.next_step += 1
        return result

    @property
    def endpoint(self) -> str:
        """The address this stream's steps go to."""
        return self.client.stream_endpoint(self.stream_id)

    def __repr__(self) -> str:
        return f"Stream({self.model!r}, stream_id={self.stream_id}, next_step={self.next_step})"
