"""sigclient's argument checks: integers in the wire's ranges, timeouts, retries. A bad argument
raises TypeError or ValueError naming it and what it accepts, never printing the data."""
from __future__ import annotations

MAX_RETRY = 16
UINT32_MAX = (1 << 32) - 1
UINT64_MAX = (1 << 64) - 1


def _uint32(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not 0 <= value <= UINT32_MAX:
        raise ValueError(f"{name}: expected 0 to {UINT32_MAX}, got {value}")
    return value


def _uint64(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not 0 <= value <= UINT64_MAX:
        raise ValueError(f"{name}: expected 0 to {UINT64_MAX}, got {value}")
    return value


def _stream_id(value: int) -> int:
    if _uint64("stream_id", value) == 0:
        raise ValueError("stream_id: 0 is not a stream (a whole window goes without one)")
    return value


def _timeout(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int (milliseconds), got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive number of milliseconds, got {value}")
    return value


def _retries(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"retries: expected an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_RETRY:
        raise ValueError(f"retries: expected 0 to {MAX_RETRY}, got {value}")
    return value
