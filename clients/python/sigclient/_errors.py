"""sigclient's statuses and errors: sigserve.v1.Status as an IntEnum, the exceptions a call raises
(SigServeError and its subclasses) and the ServerError subclass for each status. Re-exported by
sigclient.client, whose docstring says when each is raised."""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING

# The package's own generated module (see _pb/__init__.py): never a signal_pb2 found elsewhere on
# sys.path, so what this client speaks is what it was tested with.
from ._pb import signal_pb2 as pb

if TYPE_CHECKING:
    from ._results import InferResult

# sigserve.v1.Status as an IntEnum, built from the generated code so a status added to the proto is
# known here without an edit.
Status = enum.IntEnum("Status", {name: value for name, value in pb.Status.items()})
Status.__doc__ = "sigserve.v1.Status: STATUS_OK, STATUS_BAD_REQUEST, ..."


def status_name(status: int) -> str:
    """"STATUS_OK", "STATUS_BAD_SHAPE", ...; "STATUS_UNKNOWN(N)" for a value the proto does not name."""
    try:
        return Status(status).name
    except ValueError:
        return f"STATUS_UNKNOWN({status})"


def _as_status(status: int) -> int:
    try:
        return Status(status)
    except ValueError:
        return int(status)


# ---- exceptions ----

class SigServeError(Exception):
    """Base of every error this module raises (besides ValueError/TypeError for bad arguments)."""


class ServerError(SigServeError):
    """The server answered with a non-OK status. ``message`` is the server's text, verbatim."""

    def __init__(self, status: int, status_name: str, message: str, *, request_id: int | None = None,
                 result: InferResult | None = None):
        super().__init__(status, status_name, message)
        self.status = status
        self.status_name = status_name
        self.message = message
        self.request_id = request_id
        self.result = result

    message_suffix = ""      # " (after N attempts)" when retries were used

    def __str__(self) -> str:
        return f"server replied {self.status_name}: {self.message or '(no error text)'}{self.message_suffix}"


class BadRequest(ServerError):
    """STATUS_BAD_REQUEST: the server could not decode the request."""


class UnknownModel(ServerError):
    """STATUS_UNKNOWN_MODEL: the model is not served there."""


class BadShape(ServerError):
    """STATUS_BAD_SHAPE: features != rows x input size, or rows out of 1..max_rows."""


class BadValue(ServerError):
    """STATUS_BAD_VALUE: a NaN or Inf feature."""


class Overloaded(ServerError):
    """STATUS_OVERLOADED."""


class DeadlineExceeded(ServerError):
    """STATUS_DEADLINE_EXCEEDED: still queued past deadline_us, not run."""


class Unavailable(ServerError):
    """STATUS_UNAVAILABLE: the model cannot run now (for example a lost GPU context)."""


class InternalError(ServerError):
    """STATUS_INTERNAL."""


class Timeout(SigServeError, TimeoutError):
    """No reply (or no room to send) within the timeout."""


class ProtocolError(SigServeError):
    """A reply that is not a well-formed sigserve.v1.Reply (undecodable, several frames, no body)."""


class TransportError(SigServeError):
    """A ZeroMQ call failed."""


class SecurityError(TransportError):
    """CURVE on one side only. ``failure``: the endpoint and what the server asks for; the message adds
    what to give SigClient."""

    def __init__(self, failure: str, hint: str):
        super().__init__(f"{failure} ({hint})")
        self.failure = failure


class StreamGone(TransportError):
    """The address a stream was routed to has vanished from its dns:// name, and the stream's state
    with it: ``forget_stream``, then start the stream again from step 1."""


_EXCEPTIONS: dict[int, type[ServerError]] = {
    Status.STATUS_BAD_REQUEST: BadRequest,
    Status.STATUS_UNKNOWN_MODEL: UnknownModel,
    Status.STATUS_BAD_SHAPE: BadShape,
    Status.STATUS_BAD_VALUE: BadValue,
    Status.STATUS_OVERLOADED: Overloaded,
    Status.STATUS_DEADLINE_EXCEEDED: DeadlineExceeded,
    Status.STATUS_UNAVAILABLE: Unavailable,
    Status.STATUS_INTERNAL: InternalError,
}


def exception_for_status(status: int, message: str, *, request_id: int | None = None,
                         result: InferResult | None = None) -> ServerError:
    """The ServerError subclass for a non-OK STATUS (the base class for a status not known here)."""
    cls = _EXCEPTIONS.get(int(status), ServerError)
    return cls(int(status), status_name(status), message, request_id=request_id, result=result)
