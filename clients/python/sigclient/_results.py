"""sigclient's results: InferResult (one InferReply), Health and ModelInfo. Re-exported by
sigclient.client."""
from __future__ import annotations

from dataclasses import dataclass

from . import _features
from ._errors import Status, exception_for_status, status_name


@dataclass
class InferResult:
    """One InferReply. ``outputs`` is rows x output size, row-major (flat; for a batch, shaped
    (rows, outputs): see the module docstring). Timings in nanoseconds:
    ``queue_ns`` (server: receipt to compute), ``compute_ns`` (the backend), ``server_ns`` (receipt
    to send) and ``round_trip_ns`` (this client: send to receipt; 0 when the request was not sent by
    this client, e.g. a rejection of raw bytes). ``status``/``error`` are set on the results of
    recv_infer; infer raises instead of returning a non-OK result."""
    request_id: int
    outputs: list       # flat floats; a batch's: rows of floats, or a float32 numpy array
    rows: int
    model_version: str
    queue_ns: int
    compute_ns: int
    server_ns: int
    round_trip_ns: int
    status: int = Status.STATUS_OK
    error: str = ""
    attempts: int = 1        # infer: requests sent for this answer (1 + retries used)
    backend: str = ""        # what computed it (InferReply.backend: "cpu", "cuda"); "" when none ran

    @property
    def ok(self) -> bool:
        return self.status == Status.STATUS_OK

    @property
    def status_name(self) -> str:
        return status_name(self.status)

    @property
    def output_size(self) -> int:
        """Outputs per row (0 for a non-OK result)."""
        if _features.is_shaped(self.outputs):
            return len(self.outputs[0])
        return len(self.outputs) // self.rows if self.rows else 0

    def output_rows(self) -> list[list[float]]:
        """The outputs split into rows (lists of floats, whatever shape ``outputs`` has)."""
        if _features.is_shaped(self.outputs):
            return [[float(v) for v in row] for row in self.outputs]
        n = self.output_size
        return [self.outputs[r * n:(r + 1) * n] for r in range(self.rows)] if n else []

    def raise_for_status(self) -> InferResult:
        """Raises the ServerError subclass for a non-OK status; returns self when OK."""
        if not self.ok:
            raise exception_for_status(self.status, self.error, request_id=self.request_id, result=self)
        return self


@dataclass
class Health:
    live: bool
    ready: bool          # every model loaded and warmed
    version: str         # the server's version


@dataclass
class ModelInfo:
    name: str
    version: str
    backend: str         # "cpu" or "cuda"
    kernel: str
    input_size: int      # features per row
    output_size: int     # outputs per row
    max_rows: int
    available: bool
    type: str = ""       # "mlp" or "lstm" ("" from a server that predates LSTM models)
    window: int = 0      # lstm: time steps of a window (input_size = window x step_size)
    step_size: int = 0   # lstm: features of one step, what a stream step carries

