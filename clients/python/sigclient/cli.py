"""sigclient-py: one-shot requests to sigserve from a shell, the Python twin of the C `sigclient`.

Same commands, options, output and exit codes as clients/sigclient_cli.c, so scripts and probes can
use either: infer prints the outputs on stdout (one row, or stream step, per line, %.9g) and one line of the server's
timings on stderr; --repeat adds round-trip and server-time percentiles in microseconds. Exit codes:
0 ok, 1 the server answered an error status (or is not ready), 2 usage or input error, 3 timeout,
transport or protocol error. --random draws from Python's generator, not the C one: same seed, other
values.

The options are parsed as getopt_long parses the C CLI's (options before or after the command,
--name=value, unique prefixes), not by argparse, so that the same command lines are accepted and
rejected with the same messages and exit codes.

One command the C CLI does not have: convert MODEL.onnx OUT turns an ONNX model into
OUT.safetensors and OUT.json, the model's entry for a sigserve config (sigclient.convert). Its
options (--name, --window, --dtype) are matched as prefixes only where no option of the C CLI matches, so
every command line of the C CLI still means the same here.
"""
from __future__ import annotations

import errno
import math
import os
import random
import re
import struct
import sys
import time
from typing import Sequence

import zmq

from . import __version__
from .client import (DEFAULT_TIMEOUT_MS, MAX_RETRY, BadShape, SecurityError, ServerError, SigClient,
                     SigServeError, TransportError, load_curve_keys)

PROG = "sigclient-py"
EXIT_OK, EXIT_STATUS, EXIT_USAGE, EXIT_TRANSPORT = 0, 1, 2, 3
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"
UINT32_MAX = (1 << 32) - 1
UINT64_MAX = (1 << 64) - 1
INT_MAX = (1 << 31) - 1
MAX_RANDOM_FEATURES = 1 << 28
MAX_REPEAT = 100_000_000
MAX_WINDOW = 4096           # config: an LSTM's "window"

SYNOPSIS = (
    f"usage: {PROG} [--endpoint E]... [--timeout MS] [--retry N]\n"
    f"{' ' * len(PROG)}        [--curve-server FILE --curve-client FILE_secret] COMMAND\n"
    "  infer --model M (--file F | --stdin | --random N) [--rows R] [--seed S]\n"
    "        [--repeat K [--warmup W]] [--deadline-us D]\n"
    "  infer --model M --stream ID [--step N]\n"
    "        (--file F | --stdin | --random N [--repeat K [--warmup W]]) [--deadline-us D]\n"
    "  health\n"
    "  models\n"
    "  convert MODEL.onnx OUT [--name N] [--window W] [--dtype f32|f16|bf16]\n"
    f"       {PROG} --help | --version\n")

USAGE = SYNOPSIS + f"""
options:
  --endpoint E     server endpoint, repeat for several (default {DEFAULT_ENDPOINT}):
                   tcp://HOST:PORT, ipc://PATH, or dns://NAME:PORT for every address behind
                   NAME, resolved again every 5 s
  --timeout MS     wait at most MS ms for each reply (default {DEFAULT_TIMEOUT_MS})
  --retry N        send a request again, up to N times (0 to 16, default 0), when it is
                   answered STATUS_UNAVAILABLE or not answered within the timeout
  --curve-server FILE
                   CURVE: the server's public certificate (from sigserve --keygen)
  --curve-client FILE_secret
                   CURVE: this client's secret certificate; the server must allow its key
  --model M        the model to run
  --file F         features from F ('-': stdin): floats separated by spaces, commas or
                   newlines, R x the model's input size, row-major; '#' starts a comment
  --stdin          features from standard input, as for --file
  --random N       N features per row, uniform in [-1, 1), from seed S (Python's generator:
                   not the C sigclient's values)
  --rows R         rows in the request (default 1)
  --seed S         seed for --random (default 1)
  --repeat K       send K requests one after another; print round-trip and server-time
                   p50 p90 p99 p99.9 min max mean sd (us) on stderr
  --warmup W       with --repeat: send W more requests first and leave them out (default 0)
  --deadline-us D  the server drops the request if still queued after D us (default: none)
  --stream ID      recurrent models: send the features as steps of stream ID (1 or more), in
                   order, one request a step, each step the model's step_size values (from
                   the server's model list): --file/--stdin hold the steps one after another
                   (one a line, by habit), --random N --repeat K sends K random steps of N.
                   Prints one line of outputs per step. Every step of a stream goes to the
                   same server, and none is sent twice (--retry does not apply to them)
  --step N         with --stream: the first step's number (default 1: a new stream; the
                   server refuses a step that is not the one it expects, naming it); the
                   steps after it count up from there. 0 sends the steps unnumbered
  --name N         convert: the model's name in OUT.json (default: MODEL's file name
                   without .onnx)
  --window W       convert: the LSTM's window in steps (1 to 4096), where the ONNX
                   model's sequence length is dynamic
  --dtype D        convert: how OUT.safetensors stores the weight matrices: f32 (default),
                   f16 or bf16 (each rounded to nearest even; biases stay f32); OUT.json
                   holds them so ("weight_dtype") where the model's type can on the CPU
  --help           this text
  --version        print sigclient-py's version and libzmq's, then exit

infer prints the outputs on stdout, one row (or stream step) per line, and the timings on stderr
(round trips and server times in microseconds, the server's stages in nanoseconds).

convert reads an ONNX model (needs the onnx package) and writes OUT.safetensors and OUT.json,
the model object for a config's "models" list ("weights" relative to OUT.json's folder); it
prints what it wrote and the model's shape. Supported: MLPs of Gemm or MatMul (+ Add) layers with
Relu, Tanh, Sigmoid or none; forward LSTMs (one or stacked) with one such layer on the last step's
hidden state. Anything else is refused naming the node, op and attribute (exit code 2).
exit codes: 0 ok, 1 the server replied with an error status (or is not ready), 2 usage or input error,
3 timeout or transport error.
"""

# name -> (takes a value, the command it belongs to: None for every command)
_OPTIONS = {
    "endpoint": (True, None), "timeout": (True, None), "model": (True, "infer"), "file": (True, "infer"),
    "stdin": (False, "infer"), "random": (True, "infer"), "rows": (True, "infer"), "seed": (True, "infer"),
    "repeat": (True, "infer"), "warmup": (True, "infer"), "deadline-us": (True, "infer"), "help": (False, None),
    "version": (False, None), "retry": (True, None), "curve-server": (True, None),
    "curve-client": (True, None), "stream": (True, "infer"), "step": (True, "infer"),
}
# Options the C CLI does not have: a prefix means one of these only where it matches none above.
_CONVERT_OPTIONS = {"name": (True, "convert"), "window": (True, "convert"), "dtype": (True, "convert")}
_DECIMAL = re.compile(r"[0-9]+")


class _Exit(Exception):
    """Ends the command with an exit code; the message (if any) is already printed."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _say(text: str) -> None:
    print(f"{PROG}: {text}", file=sys.stderr)


def _usage_error(text: str) -> _Exit:
    print(f"{PROG}: {text}\n{SYNOPSIS}({PROG} --help describes the options)", file=sys.stderr)
    return _Exit(EXIT_USAGE)


def _u64(option: str, text: str, lo: int, hi: int, hint: str = "") -> int:
    """A whole decimal number in [lo, hi], as the C CLI's s_parse_u64 takes it (no sign, no spaces)."""
    if _DECIMAL.fullmatch(text) and lo <= int(text) <= hi:
        return int(text)
    raise _usage_error(f"bad --{option} '{text}'{hint}")


class Options:
    def __init__(self) -> None:
        self.endpoints: list[str] = []
        self.timeout_ms = DEFAULT_TIMEOUT_MS
        self.retry = 0
        self.curve_server: str | None = None
        self.curve_client: str | None = None
        self.command = ""
        self.model: str | None = None
        self.file: str | None = None       # "-" for stdin
        self.random_n = 0                  # 0: not given
        self.rows = 1
        self.seed = 1
        self.repeat = 1
        self.warmup = 0
        self.deadline_us = 0
        self.convert_args: list[str] = []  # MODEL.onnx, OUT
        self.name: str | None = None
        self.window: int | None = None
        self.dtype = "f32"
        self.stream_id = 0                 # 0: not a stream
        self.step = 1                      # the first step's number
        self.given: set[str] = set()       # the options given (rows, step, repeat, warmup matter)


def _match_option(name: str, arg: str) -> str:
    """The long option NAME (from ARG) names: itself, or the one option it is a unique prefix of (the
    C CLI's options first, so that their prefixes keep their meaning)."""
    if name in _OPTIONS or name in _CONVERT_OPTIONS:
        return name
    for table in (_OPTIONS, _CONVERT_OPTIONS):
        found = [o for o in table if o.startswith(name)] if name else []
        if len(found) == 1:
            return found[0]
        if found:
            break
    raise _usage_error(f"unknown option '{arg}'")       # ambiguous too, as getopt_long with opterr 0


def parse_options(argv: Sequence[str]) -> Options:
    """The command line as the C CLI reads it; raises _Exit for --help, --version and usage errors."""
    opts = Options()
    positional: list[str] = []
    sources = 0
    owners: set[str] = set()            # the commands whose own options were given
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional.extend(args[i:])
            break
        if arg == "-h":
            arg = "--help"
        if not arg.startswith("--"):
            if arg.startswith("-") and arg != "-":
                raise _usage_error(f"unknown option '{arg}'")
            positional.append(arg)
            continue
        name, eq, value = arg[2:].partition("=")
        name = _match_option(name, arg)
        takes_value, owner = _OPTIONS.get(name) or _CONVERT_OPTIONS[name]
        if takes_value and not eq:
            if i >= len(args):
                raise _usage_error(f"{arg} needs a value")
            value = args[i]
            i += 1
        elif not takes_value and eq:
            raise _usage_error(f"unknown option '{arg}'")
        if owner:
            owners.add(owner)
        opts.given.add(name)
        if name == "help":
            print(USAGE, end="")
            raise _Exit(EXIT_OK)
        if name == "version":
            print(version_text())
            raise _Exit(EXIT_OK)
        if name == "endpoint":
            opts.endpoints.append(value)
        elif name == "timeout":
            opts.timeout_ms = _u64(name, value, 1, INT_MAX)
        elif name == "retry":
            opts.retry = _u64(name, value, 0, MAX_RETRY, " (0 to 16)")
        elif name == "curve-server":
            opts.curve_server = value
        elif name == "curve-client":
            opts.curve_client = value
        elif name == "model":
            opts.model = value
        elif name == "file":
            opts.file = value
            sources += 1
        elif name == "stdin":
            opts.file = "-"
            sources += 1
        elif name == "random":
            opts.random_n = _u64(name, value, 1, MAX_RANDOM_FEATURES,
                                 f" (1 to {MAX_RANDOM_FEATURES} features per row)")
            sources += 1
        elif name == "rows":
            opts.rows = _u64(name, value, 1, UINT32_MAX)
        elif name == "seed":
            opts.seed = _u64(name, value, 0, UINT64_MAX)
        elif name == "repeat":
            opts.repeat = _u64(name, value, 1, MAX_REPEAT)
        elif name == "warmup":
            opts.warmup = _u64(name, value, 0, MAX_REPEAT)
        elif name == "deadline-us":
            opts.deadline_us = _u64(name, value, 0, UINT32_MAX)
        elif name == "name":
            opts.name = value
        elif name == "window":
            opts.window = _u64(name, value, 1, MAX_WINDOW, f" (1 to {MAX_WINDOW})")
        elif name == "dtype":
            if value not in ("f32", "f16", "bf16"):
                raise _usage_error(f"--dtype: expected f32, f16 or bf16, got '{value}'")
            opts.dtype = value
        elif name == "stream":
            opts.stream_id = _u64(name, value, 1, UINT64_MAX, f" (a stream id from 1 to {UINT64_MAX})")
        elif name == "step":
            opts.step = _u64(name, value, 0, UINT64_MAX)
    if not positional:
        raise _usage_error("no command")
    opts.command = positional[0]
    takes = 2 if opts.command == "convert" else 0
    if len(positional) > 1 + takes:
        raise _usage_error(f"unexpected argument '{positional[1 + takes]}'")
    if opts.command == "convert":
        if len(positional) != 3:
            raise _usage_error("convert needs MODEL.onnx and OUT")
        opts.convert_args = positional[1:]
    if not opts.endpoints:
        opts.endpoints = [DEFAULT_ENDPOINT]
    if (opts.curve_server is None) != (opts.curve_client is None):
        raise _usage_error("CURVE needs both --curve-server and --curve-client")
    others = owners - {opts.command}
    if opts.command in ("infer", "health", "models", "convert") and others:
        raise _usage_error(f"options of {'infer' if 'infer' in others else 'convert'} given to '{opts.command}'")
    if opts.command == "infer":
        if opts.model is None:
            raise _usage_error("infer needs --model")
        if sources != 1:
            raise _usage_error("infer needs one of --file, --stdin, --random")
        if opts.seed != 1 and not opts.random_n:      # as the C CLI: --seed 1 is the default, allowed
            raise _usage_error("--seed is only for --random")
        if "step" in opts.given and not opts.stream_id:
            raise _usage_error("--step is only for --stream")
        if opts.stream_id and "rows" in opts.given:
            raise _usage_error("--rows: a stream step is one row; --stream takes no --rows")
        if opts.stream_id and not opts.random_n and ({"repeat", "warmup"} & opts.given):
            raise _usage_error("--repeat and --warmup with --stream are for --random: the steps of --file or "
                               "--stdin are the file's")
    elif opts.command not in ("health", "models", "convert"):
        raise _usage_error(f"unknown command '{opts.command}'")
    return opts


def version_text() -> str:
    import google.protobuf
    return (f"{PROG} {__version__} (libzmq {zmq.zmq_version()}, pyzmq {zmq.pyzmq_version()}, "
            f"protobuf {google.protobuf.__version__})")


# ---- features ----

_FLOAT32 = struct.Struct("<f")
_TOKEN = re.compile(r"[^\s,#]+|#[^\n]*|\n")
_TOKEN_MAX = 127        # common/floatlist.c's limit


def parse_floats(text: str, name: str) -> list[float]:
    """Floats separated by whitespace or commas, '#' comments to the end of the line, as the C CLI
    reads them (common/floatlist.c; strtof: also nan, inf, hex floats; nan and inf go to the server,
    which answers STATUS_BAD_VALUE). Raises _Exit(2) naming the line of a bad value."""
    values: list[float] = []
    line = 1
    for m in _TOKEN.finditer(text):
        token = m.group()
        if token == "\n":
            line += 1
            continue
        if token.startswith("#"):
            continue
        if len(token.encode()) > _TOKEN_MAX:
            _say(f"{name}:{line}: a token longer than {_TOKEN_MAX} characters")
            raise _Exit(EXIT_USAGE)
        try:
            if "_" in token:        # Python's float() takes 1_000; strtof does not
                raise ValueError(token)
            hexadecimal = token.lstrip("+-")[:2].lower() == "0x"
            v = float.fromhex(token) if hexadecimal else float(token)
        except ValueError:
            _say(f"{name}:{line}: not a number: '{token}'")
            raise _Exit(EXIT_USAGE) from None
        try:
            _FLOAT32.pack(v)
        except OverflowError:
            _say(f"{name}:{line}: out of float range: '{token}'")
            raise _Exit(EXIT_USAGE) from None
        values.append(v)
    if not values:
        _say(f"{name}: no numbers")
        raise _Exit(EXIT_USAGE)
    return values


def load_features(opts: Options) -> list[float]:
    if opts.random_n:
        if opts.random_n * opts.rows > MAX_RANDOM_FEATURES:
            _say(f"--random {opts.random_n} x --rows {opts.rows} is too many features")
            raise _Exit(EXIT_USAGE)
        rng = random.Random(opts.seed)
        return [rng.uniform(-1.0, 1.0) for _ in range(opts.random_n * opts.rows)]
    name = "stdin" if opts.file == "-" else opts.file
    try:
        if opts.file == "-":
            data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        else:
            with open(opts.file, "rb") as f:
                data = f.read()
    except OSError as e:
        verb = "open" if opts.file != "-" and not isinstance(e, IsADirectoryError) else "read"
        _say(f"cannot {verb} {name}: {e.strerror or e}")
        raise _Exit(EXIT_USAGE) from None
    if b"\0" in data:
        _say(f"{name}: a NUL byte: expected text")
        raise _Exit(EXIT_USAGE)
    return parse_floats(data.decode("utf-8", errors="replace"), name)


# ---- latency summaries (common/latency.c: nearest-rank percentiles, sample sd) ----

def percentile(sorted_values: Sequence[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    rank = min(max(math.ceil(p / 100.0 * len(sorted_values)), 1), len(sorted_values))
    return sorted_values[rank - 1]


def summary_fields(samples: Sequence[float]) -> str:
    """'p50=... p90=... p99=... p99.9=... min=... max=... mean=... sd=...', one decimal, as the C CLI."""
    s = sorted(samples)
    n = len(s)
    mean = sum(s) / n if n else 0.0
    sd = math.sqrt(sum((x - mean) ** 2 for x in s) / (n - 1)) if n > 1 else 0.0
    fields = (("p50", percentile(s, 50)), ("p90", percentile(s, 90)), ("p99", percentile(s, 99)),
              ("p99.9", percentile(s, 99.9)), ("min", s[0] if s else 0.0), ("max", s[-1] if s else 0.0),
              ("mean", mean), ("sd", sd))
    return " ".join(f"{k}={v:.1f}" for k, v in fields)


# ---- commands ----

def timing_line(result, round_trip_us: float) -> str:
    return (f"request_id={result.request_id} status={result.status_name} rows={result.rows} "
            f"queue_ns={result.queue_ns} compute_ns={result.compute_ns} server_ns={result.server_ns} "
            f"round_trip_us={round_trip_us:.1f} model_version={result.model_version} "
            f"backend={result.backend or '-'}")


def print_summary(round_trips_us: Sequence[float], server_us: Sequence[float], warmup: int) -> None:
    if len(round_trips_us) > 1:
        for what, samples in (("round_trip_us", round_trips_us), ("server_us", server_us)):
            print(f"repeat={len(round_trips_us)} warmup={warmup} {what} {summary_fields(samples)}", file=sys.stderr)


def find_model(client: SigClient, name: str):
    """NAME's entry in the server's model list, or None."""
    return next((m for m in client.list_models() if m.name == name), None)


def shape_hint(client: SigClient, opts: Options, n: int) -> None:
    """After STATUS_BAD_SHAPE for N values: what the user probably meant (the C CLI's s_shape_hint)."""
    try:
        m = find_model(client, opts.model)
    except SigServeError:
        return
    if m is None or not m.input_size:
        return
    if "rows" not in opts.given and n % m.input_size == 0 and n // m.input_size > 1:
        rows = n // m.input_size
        if opts.random_n:
            _say(f'hint: --random gives N features per row, and model "{opts.model}" takes {m.input_size}: '
                 f"--random {m.input_size} --rows {rows}")
        else:
            split = " (more than its max_rows: split them over several requests)" if m.max_rows and rows > m.max_rows else ""
            _say(f'hint: {n} values are {rows} rows of model "{opts.model}"\'s {m.input_size} inputs: '
                 f"add --rows {rows}{split}")
    elif m.step_size and n == opts.rows * m.step_size:   # a model with a window (recurrent) keeps streams
        _say(f'hint: {n} values are one step of {m.type.upper()} model "{opts.model}" (window {m.window} x step_size '
             f"{m.step_size}): add --stream ID to send them as a step of stream ID")


def run_infer_stream(client: SigClient, opts: Options) -> int:
    """--stream: the features as steps of one stream, in order, one output line per step (the C CLI's
    s_infer_stream)."""
    m = find_model(client, opts.model)
    step_size = m.step_size if m is not None else 0   # 0: not a model with a window
    rng = values = None
    warmup = 0
    if opts.random_n:
        step_size, n_steps, warmup = opts.random_n, opts.warmup + opts.repeat, opts.warmup
        rng = random.Random(opts.seed)
    else:
        values = load_features(opts)
        step_size = step_size or len(values)
        if len(values) % step_size:
            name = "stdin" if opts.file == "-" else opts.file
            _say(f'{name}: {len(values)} values are not a whole number of steps of model "{opts.model}" '
                 f"(step_size {step_size}): {len(values) // step_size} steps and {len(values) % step_size} "
                 f"values over")
            return EXIT_USAGE
        n_steps = len(values) // step_size
    stream = client.stream(opts.model, opts.stream_id, opts.step)
    round_trips_us: list[float] = []
    server_us: list[float] = []
    result, elapsed_us = None, 0.0
    for k in range(n_steps):
        if rng is not None:
            features = [rng.uniform(-1.0, 1.0) for _ in range(step_size)]
        else:
            features = values[k * step_size:(k + 1) * step_size]
        number = stream.next_step
        start = time.perf_counter_ns()
        try:
            result = stream.step(features, deadline_us=opts.deadline_us)
        except ServerError as e:
            sys.stdout.flush()
            _say(f"stream {opts.stream_id} step {number}: {e.status_name}: {e.message}")
            return EXIT_STATUS
        except (ValueError, TypeError) as e:
            _say(f"stream {opts.stream_id} step {number}: {e}")
            return EXIT_USAGE
        except SigServeError as e:
            sys.stdout.flush()
            _say(f"stream {opts.stream_id} step {number}: {e}")
            return EXIT_TRANSPORT
        elapsed_us = (time.perf_counter_ns() - start) / 1e3
        print(" ".join(f"{v:.9g}" for v in result.outputs))
        if k >= warmup:
            round_trips_us.append(elapsed_us)
            server_us.append(result.server_ns / 1e3)
    sys.stdout.flush()
    last = stream.next_step - 1 if stream.next_step else 0
    print(f"{timing_line(result, elapsed_us)} stream_id={opts.stream_id} step={last}", file=sys.stderr)
    print_summary(round_trips_us, server_us, warmup)
    return EXIT_OK


def run_infer(client: SigClient, opts: Options) -> int:
    if opts.stream_id:
        return run_infer_stream(client, opts)
    features = load_features(opts)
    round_trips_us: list[float] = []
    server_us: list[float] = []
    result = None
    for k in range(opts.warmup + opts.repeat):
        start = time.perf_counter_ns()
        try:
            result = client.infer(opts.model, features, rows=opts.rows, deadline_us=opts.deadline_us)
        except BadShape as e:
            _say(f"{e.status_name}: {e.message}")
            shape_hint(client, opts, len(features))
            return EXIT_STATUS
        elapsed_us = (time.perf_counter_ns() - start) / 1e3
        if k >= opts.warmup:        # warm-up requests are left out
            round_trips_us.append(elapsed_us)
            server_us.append(result.server_ns / 1e3)
    rows = result.rows or opts.rows
    n = len(result.outputs)
    per_row = n // rows if n % rows == 0 else n
    for r in range(0, n, per_row or 1):
        print(" ".join(f"{v:.9g}" for v in result.outputs[r:r + per_row]))
    sys.stdout.flush()      # the outputs before the timings, when both go to one terminal
    print(timing_line(result, round_trips_us[-1]), file=sys.stderr)
    print_summary(round_trips_us, server_us, opts.warmup)
    return EXIT_OK


def run_health(client: SigClient) -> int:
    h = client.health()
    print(f"live={int(h.live)} ready={int(h.ready)} version={h.version}")
    # A probe (Docker, Kubernetes) reads the exit code: not ready is a failure.
    return EXIT_OK if h.live and h.ready else EXIT_STATUS


def run_models(client: SigClient) -> int:
    models = client.list_models()
    wn = max([4] + [len(m.name) for m in models])
    wv = max([7] + [len(m.version) for m in models])
    wb = max([7] + [len(m.backend) for m in models])
    wk = max([6] + [len(m.kernel) for m in models])
    print(f"{'name':<{wn}}  {'version':<{wv}}  {'backend':<{wb}}  {'kernel':<{wk}}  {'input':>6}  {'output':>6}  "
          f"{'max_rows':>8}  {'available':<9}  {'type':<4}  {'window':>6}  {'step_size':>9}")
    for m in models:
        print(f"{m.name:<{wn}}  {m.version:<{wv}}  {m.backend:<{wb}}  {m.kernel:<{wk}}  {m.input_size:>6}  "
              f"{m.output_size:>6}  {m.max_rows:>8}  {'yes' if m.available else 'no':<9}  {m.type or '-':<4}  "
              f"{m.window or '-':>6}  {m.step_size or '-':>9}")
    return EXIT_OK


def _connect(opts: Options) -> SigClient:
    if opts.curve_server is not None:
        try:
            load_curve_keys(opts.curve_server, opts.curve_client)
        except ValueError as e:
            _say(str(e))
            raise _Exit(EXIT_USAGE) from None
    try:
        return SigClient(opts.endpoints, timeout_ms=opts.timeout_ms, retries=opts.retry,
                         curve_server=opts.curve_server, curve_client=opts.curve_client)
    except (TransportError, ValueError) as first:
        # Name the endpoint ZeroMQ rejects: try them one at a time, as the C CLI does.
        bad, err = opts.endpoints[0], first
        for e in opts.endpoints:
            try:
                SigClient([e], timeout_ms=1).close()
            except (TransportError, ValueError) as failure:
                bad, err = e, failure
                break
        cause = err.__cause__ if isinstance(err.__cause__, zmq.ZMQError) else None
        text = os.strerror(cause.errno) if cause is not None else str(err)    # pyzmq 27 adds the address
        _say(f"cannot connect to '{bad}': {text}")
        usage = cause is None or cause.errno in (errno.EINVAL, errno.EPROTONOSUPPORT)
        raise _Exit(EXIT_USAGE if usage else EXIT_TRANSPORT) from None


def run_convert(opts: Options) -> int:
    from .convert import ConvertError, load
    model, out = opts.convert_args
    try:
        converted = load(model, name=opts.name, window=opts.window, dtype=opts.dtype)
        converted.write(out)
    except ConvertError as e:
        text = str(e)
        _say(text if text.startswith(("cannot read", "cannot write", model, "converting needs", "model name",
                                      "--window", "--dtype"))
             else f"{model}: {text}")
        return EXIT_USAGE
    print(f"wrote {converted.weights_path} ({len(converted.tensors)} tensors, {converted.weights_bytes} bytes)")
    print(f"wrote {converted.config_path} (model \"{converted.snippet['name']}\": put it in a config's \"models\")")
    print(converted.shape)
    for note in converted.notes:
        print(f"note: {note}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """The sigclient-py command: returns its exit code (ARGV without the program name; None: sys.argv)."""
    try:
        opts = parse_options(sys.argv[1:] if argv is None else argv)
        if opts.command == "convert":
            return run_convert(opts)
        with _connect(opts) as client:
            if opts.command == "infer":
                return run_infer(client, opts)
            if opts.command == "health":
                return run_health(client)
            return run_models(client)
    except _Exit as e:
        return e.code
    except ServerError as e:
        _say(f"{e.status_name}: {e.message}")
        return EXIT_STATUS
    except (ValueError, TypeError) as e:     # arguments the client refuses before sending
        _say(str(e))
        return EXIT_USAGE
    except SecurityError as e:               # CURVE on one side only: the options, not SigClient's arguments
        _say(f"{e.failure} (" + ("leave out --curve-server and --curve-client" if "has CURVE keys" in e.failure else
                                 "pass --curve-server FILE, the server's public certificate, and --curve-client "
                                 "FILE_secret, this client's") + ")")
        return EXIT_TRANSPORT
    except SigServeError as e:               # Timeout, ProtocolError, TransportError
        _say(str(e))
        return EXIT_TRANSPORT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
