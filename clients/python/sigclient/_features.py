"""How SigClient reads the features of a request, and shapes the outputs of a batch.

Accepted: one row (a sequence of numbers, a 1-D numpy array; also a stream step) or a batch (a
sequence of equal-length rows, a 2-D numpy array). A batch sets ``rows`` itself: a ``rows`` given
too must agree. What goes on the wire is the row-major flat list; a batch's outputs come back as
(rows, outputs): a float32 numpy array for a numpy batch (the wire's precision), lists of floats
for any other. One row's outputs stay the flat list they always were, so no caller of a flat
``infer`` sees a change.

numpy stays optional: this module never imports it. A caller who passes an array has imported
numpy, so an array is recognised through ``sys.modules``; without numpy, nothing here needs it.

Errors name the argument, what it accepts, and the offending type or shape, never the data: a
message that printed a 1,000-row batch would bury the one line that matters.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

ACCEPTED = "a sequence of numbers (one row), a sequence of equal-length rows, or a 1-D or 2-D numpy array"
_NOT_ROWS = (str, bytes, bytearray, Mapping)
_NUMERIC_KINDS = "biuf"          # numpy dtype kinds: bool, signed and unsigned integers, floats


class Features:
    """One request's features, ready for the wire: ``values`` (flat, row-major), ``rows`` (what the
    request says; None: not given, the server's 1), ``width`` (values per row of a batch, None for
    one row) and ``batch`` (None for one row, "list" or "numpy": how the outputs come back)."""

    __slots__ = ("name", "values", "rows", "width", "batch")

    def __init__(self, name: str, values, rows, width=None, batch=None):
        self.name, self.values, self.rows, self.width, self.batch = name, values, rows, width, batch


def _ndarray():
    numpy = sys.modules.get("numpy")
    return getattr(numpy, "ndarray", None) if numpy is not None else None


def _kind(value) -> str:
    """What VALUE is, for a message: "a str", "None", "a 3-D numpy array of shape (2, 3, 4)"."""
    if value is None:
        return "None"
    ndarray = _ndarray()
    if ndarray is not None and isinstance(value, ndarray):
        return f"a {value.ndim}-D numpy array of shape {tuple(value.shape)}"
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _is_row(value, ndarray) -> bool:
    if ndarray is not None and isinstance(value, ndarray):
        return True
    return isinstance(value, Sequence) and not isinstance(value, _NOT_ROWS)


def _batch_rows(rows, count: int, width: int):
    """The rows of a batch of COUNT rows of WIDTH: ROWS when it agrees, COUNT when not given."""
    if rows is None:
        return count
    if isinstance(rows, bool) or not isinstance(rows, int):
        raise TypeError(f"rows: expected an int, got {type(rows).__name__}")
    if rows != count:
        raise ValueError(f"rows: {rows} given, but the features hold {_count(count, 'row')} of {_count(width, 'value')}; "
                         f"leave rows out for a batch, or give the same number")
    return rows


def prepare(features, rows=None, name: str = "features", batch_only: bool = False) -> Features:
    """FEATURES as a Features; ROWS as given to infer (None: not given). NAME names the argument in
    messages. BATCH_ONLY (infer_rows): one row is refused. Raises TypeError / ValueError."""
    if type(features) is list and features and type(features[0]) in (float, int) and not batch_only:
        return Features(name, features, rows)       # the common case first: one row of floats
    ndarray = _ndarray()
    if ndarray is not None and isinstance(features, ndarray):
        return _from_array(features, rows, name, batch_only)
    if isinstance(features, (list, tuple)):
        items = features
    elif isinstance(features, _NOT_ROWS) or not hasattr(features, "__iter__"):
        raise TypeError(f"{name}: expected {ACCEPTED}, got {_kind(features)}")
    elif isinstance(features, Sequence):
        items = features                 # array.array, range: protobuf takes them as they are
    else:
        items = list(features)           # a generator: read once, kept for a retry
    if not items:
        if batch_only:
            raise ValueError(f"{name}: no rows; expected at least one")
        return Features(name, items, rows)
    if not _is_row(items[0], ndarray):
        if batch_only:
            raise TypeError(f"{name}: expected a sequence of equal-length rows or a 2-D numpy array, got "
                            f"{_kind(features)} of numbers (one row: give [row], or use infer)")
        return Features(name, items, rows)
    width = len(items[0])
    flat: list = []
    for i, row in enumerate(items):
        if not _is_row(row, ndarray):
            raise TypeError(f"{name}: row {i} is {_kind(row)}, expected a sequence of numbers like row 0")
        if len(row) != width:
            raise ValueError(f"{name}: row {i} has {_count(len(row), 'value')}, row 0 has {width}; "
                             f"the rows of a batch must be of equal length")
        flat.extend(row)
    return Features(name, flat, _batch_rows(rows, len(items), width), width, "list")


def _from_array(a, rows, name: str, batch_only: bool) -> Features:
    a = sys.modules["numpy"].asarray(a)      # a subclass (np.matrix) as the plain array it holds
    if a.ndim not in (1, 2) or (batch_only and a.ndim != 2):
        expected = "a 2-D numpy array or a sequence of equal-length rows" if batch_only else ACCEPTED
        raise ValueError(f"{name}: expected {expected}, got {_kind(a)}")
    if a.dtype.kind == "O":
        # Python objects: read as the nested lists they are, answered as numpy.
        prepared = prepare(a.tolist(), rows, name, batch_only)
        prepared.batch = "numpy" if prepared.batch else None
        return prepared
    if a.dtype.kind not in _NUMERIC_KINDS:
        raise TypeError(f"{name}: expected numbers, got a numpy array of dtype {a.dtype} (shape {tuple(a.shape)})")
    if a.ndim == 1:
        return Features(name, a.tolist(), rows)
    count, width = a.shape
    if count == 0:
        raise ValueError(f"{name}: a numpy array of shape {tuple(a.shape)} holds no rows; expected at least one")
    rows = _batch_rows(rows, count, width)
    # ravel() reads in row-major order whatever the memory layout (a transposed view, a slice).
    return Features(name, a.ravel().tolist(), rows, width, "numpy")


def element_error(features: Features, accepts) -> Exception:
    """The error for the first value of FEATURES that ACCEPTS (the wire's float check) refuses."""
    for k, value in enumerate(features.values):
        if accepts(value):
            continue
        where = (f"{features.name}[{k}]" if features.width is None
                 else f"{features.name}[{k // features.width}][{k % features.width}]")
        hint = ""
        if isinstance(value, int) and not isinstance(value, bool):
            return ValueError(f"{features.name}: {where} is an int too large for a float")
        if _is_row(value, _ndarray()):
            hint = " (one row holds numbers, a batch rows of numbers: two levels at most)"
        return TypeError(f"{features.name}: {where} is {_kind(value)}, expected a number{hint}")
    return TypeError(f"{features.name}: expected {ACCEPTED}")


def shape_outputs(result, features: Features):
    """RESULT with its outputs as (rows, outputs) when FEATURES is an answered batch."""
    if features.batch is None or not result.ok or not result.rows:
        return result
    flat, rows = result.outputs, result.rows
    n = len(flat) // rows
    if features.batch == "numpy":
        numpy = sys.modules["numpy"]
        result.outputs = numpy.asarray(flat, dtype=numpy.float32).reshape(rows, n)
    else:
        result.outputs = [flat[r * n:(r + 1) * n] for r in range(rows)]
    return result


def is_shaped(outputs) -> bool:
    """Whether OUTPUTS is a batch's (rows, outputs) rather than a flat list."""
    if getattr(outputs, "ndim", 1) == 2:
        return True
    return len(outputs) > 0 and isinstance(outputs[0], list)
