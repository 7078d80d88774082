"""Helpers shared by the Python suites: a pure-Python safetensors reader (F32, F16, BF16), the float64
reference forward pass, the norm-wise relative error, a free tcp port, sigserve started on a
config and stopped, and a unittest runner
that prints the closing line tests/run.sh reads ("N passed, N failed")."""
import json
import math
import operator
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import unittest


def _half_floats(raw, dtype, count):
    """COUNT F16 or BF16 values from RAW, exactly (both widen to float32 without rounding)."""
    halves = struct.unpack(f"<{count}H", raw)
    if dtype == "BF16":
        return struct.unpack(f"<{count}f", struct.pack(f"<{count}I", *(h << 16 for h in halves)))
    return struct.unpack(f"<{count}e", raw)


def load_safetensors(path):
    """{name: (shape, tuple of floats)} for a safetensors file of F32, F16 and BF16 tensors (the
    dtypes sigserve reads), each value exactly as stored."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + header_len].decode("utf-8"))
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        size = {"F32": 4, "F16": 2, "BF16": 2}.get(info["dtype"])
        if size is None:
            raise ValueError(f"{path}: {name}: dtype {info['dtype']}, expected F32, F16 or BF16")
        begin, end = info["data_offsets"]
        count = math.prod(info["shape"])
        if end - begin != size * count or base + end > len(data):
            raise ValueError(f"{path}: {name}: bad data_offsets {info['data_offsets']}")
        if size == 4:
            tensors[name] = (info["shape"], struct.unpack_from(f"<{count}f", data, base + begin))
        else:
            tensors[name] = (info["shape"], _half_floats(data[base + begin:base + end], info["dtype"], count))
    return tensors


def load_model(path, layers):
    """LAYERS: (weight name, bias name or None, activation) per layer -> a chain for forward()."""
    tensors = load_safetensors(path)
    chain = []
    for weight, bias, act in layers:
        (out_size, in_size), w = tensors[weight]
        rows = [w[o * in_size:(o + 1) * in_size] for o in range(out_size)]
        b = tensors[bias][1] if bias else (0.0,) * out_size
        chain.append((rows, b, act))
    return chain


class Outputs(list):
    """Reference outputs, with .bound: for each, how far a float32 computation of the same chain may
    be from it (forward's error bound)."""
    bound = None


U32 = 2.0 ** -24        # float32's unit roundoff


def forward(chain, features, rows, weight_error=0.0, weight_eta=0.0):
    """The float64 reference: rows x output size values (an Outputs, with .bound).

    The bound is first-order and follows |W| through the chain, as tests/tolerance.c does for the C
    suites in its simpler form: a dot product of n terms in float32, in any order, is off by at most
    gamma_n (|w| . |x| + |b|), gamma_n = n u / (1 - n u); an error e in a layer's inputs moves its
    outputs by at most |W| e; relu, none and tanh have slope at most 1, sigmoid 1/4; tanh and sigmoid
    in float32 add 8 u |y|. A correct float32 result is within the bound; the tests allow twice it.
    A kernel whose weights differ from the chain's by at most WEIGHT_ERROR |w| + WEIGHT_ETA each (held
    in f16, bf16: their rounding) adds WEIGHT_ERROR |W| (|x| + e) + WEIGHT_ETA sum (|x| + e) a unit."""
    in_size = len(chain[0][0][0])
    outputs, bounds = Outputs(), []
    for r in range(rows):
        x = features[r * in_size:(r + 1) * in_size]
        mag = [abs(v) for v in x]           # |x| through the chain: the magnitude pass
        err = [0.0] * len(x)                # the float32 computation's error bound so far
        for w, b, act in chain:
            n = len(x) + 1
            gamma = n * U32 / (1.0 - n * U32)
            y = [sum(map(operator.mul, row, x)) + bias for row, bias in zip(w, b)]
            abs_rows = [[abs(v) for v in row] for row in w]
            m = [sum(map(operator.mul, row, mag)) + abs(bias) for row, bias in zip(abs_rows, b)]
            e = [sum(map(operator.mul, row, err)) + gamma * mv for row, mv in zip(abs_rows, m)]
            if weight_error or weight_eta:
                reach = [a + b for a, b in zip(mag, err)]
                total = sum(reach)
                e = [ev + weight_error * sum(map(operator.mul, row, reach)) + weight_eta * total
                     for ev, row in zip(e, abs_rows)]
            if act == "relu":
                y = [v if v > 0.0 else 0.0 for v in y]
            elif act == "tanh":
                y = [math.tanh(v) for v in y]
                e = [ev + 8 * U32 * abs(v) for ev, v in zip(e, y)]
                m = [min(1.0, mv) for mv in m]
            elif act == "sigmoid":
                y = [1.0 / (1.0 + math.exp(-v)) for v in y]
                e = [0.25 * ev + 8 * U32 * abs(v) for ev, v in zip(e, y)]
                m = [1.0] * len(m)
            x, mag, err = y, m, e
        outputs.extend(x)
        bounds.extend(err)
    outputs.bound = bounds
    return outputs


def f32(values):
    """The values rounded to float32 (what goes on the wire), as Python floats."""
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def rel_error(got, ref):
    """||got - ref|| / ||ref||; inf for a length mismatch or a NaN."""
    if len(got) != len(ref) or any(math.isnan(a) for a in got):
        return math.inf
    num = sum((a - b) ** 2 for a, b in zip(got, ref))
    den = sum(b * b for b in ref)
    return math.sqrt(num / den) if den else math.sqrt(num)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sigserve(build, config, models, log_path):
    """BUILD's sigserve on a config of MODELS (config entries) and one tcp endpoint on a free port,
    written to CONFIG; its output in LOG_PATH. (process, endpoint) once it says it is ready (health
    polled, 30 s at most), or an AssertionError with the log's end (the process stopped)."""
    from sigclient import SigClient     # here: suites without the client use the rest of this file

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with open(config, "w") as f:
        json.dump({"server": {"endpoints": [endpoint], "log_level": "warn"}, "models": models}, f, indent=2)
    log = open(log_path, "w")
    proc = subprocess.Popen([os.path.join(build, "sigserve"), "--config", config], stdout=log,
                            stderr=subprocess.STDOUT)

    def tail():
        with open(log_path) as f:
            return f.read()[-3000:]

    deadline = time.monotonic() + 30
    with SigClient(endpoint, timeout_ms=200) as client:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"sigserve exited {proc.returncode}:\n{tail()}")
            try:
                if client.health().ready:
                    return proc, endpoint
            except Exception:       # Timeout while it starts
                pass
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"sigserve not ready within 30 s:\n{tail()}")
            time.sleep(0.05)


def stop_sigserve(proc):
    """SIGTERM, then SIGKILL after 10 s; nothing when PROC is None or has exited."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


class CountingResult(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1


def run_classes(classes):
    """Runs the test classes in the order given (the last may stop the server); returns
    (passed, failed)."""
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for cls in classes:
        suite.addTests(loader.loadTestsFromTestCase(cls))
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=CountingResult)
    result = runner.run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    sys.stdout.flush()
    return result.passed, failed


def summary(passed, failed):
    """Prints "N passed, N failed" last and returns the exit code."""
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 and passed > 0 else 1


def run_in_order(classes):
    """Runs the test classes in the order given (the last may stop the server); prints
    "N passed, N failed" last and returns the exit code."""
    return summary(*run_classes(classes))


# ---- LSTM (service/lstm.h's equations, PyTorch's nn.LSTM gate order i, f, g, o) ----

def _act(name, v):
    if name == "relu":
        return v if v > 0.0 else 0.0
    if name == "tanh":
        return math.tanh(v)
    if name == "sigmoid":
        return 1.0 / (1.0 + math.exp(-v))
    return v


def load_lstm(path, window, prefix="lstm.", head="head.", head_act="none"):
    """An LSTM with a linear head from an F32 safetensors file (PyTorch's state-dict names) for
    lstm_window() and lstm_stream()."""
    tensors = load_safetensors(path)

    def rows(name):
        (n_rows, n_cols), values = tensors[name]
        return [values[r * n_cols:(r + 1) * n_cols] for r in range(n_rows)]

    layers, k = [], 0
    while f"{prefix}weight_ih_l{k}" in tensors:
        bias = [a + b for a, b in zip(tensors[f"{prefix}bias_ih_l{k}"][1], tensors[f"{prefix}bias_hh_l{k}"][1])]
        layers.append((rows(f"{prefix}weight_ih_l{k}"), rows(f"{prefix}weight_hh_l{k}"), bias))
        k += 1
    head_w = rows(f"{head}weight")
    head_b = tensors[f"{head}bias"][1] if f"{head}bias" in tensors else (0.0,) * len(head_w)
    return {"layers": layers, "window": window, "step_size": len(layers[0][0][0]), "hidden": len(layers[0][1][0]),
            "head": (head_w, head_b, head_act)}


def lstm_window(model, steps):
    """The float64 output for one window: STEPS is `window` lists of step_size floats, oldest first;
    zero state at the start."""
    hidden = model["hidden"]
    h = [[0.0] * hidden for _ in model["layers"]]
    c = [[0.0] * hidden for _ in model["layers"]]
    for x in steps:
        for i, (w_ih, w_hh, bias) in enumerate(model["layers"]):
            g = [sum(map(operator.mul, wi, x)) + sum(map(operator.mul, wh, h[i])) + b
                 for wi, wh, b in zip(w_ih, w_hh, bias)]
            sig = lambda v: 1.0 / (1.0 + math.exp(-v))  # noqa: E731
            for u in range(hidden):
                i_g, f_g = sig(g[u]), sig(g[hidden + u])
                g_g, o_g = math.tanh(g[2 * hidden + u]), sig(g[3 * hidden + u])
                c[i][u] = f_g * c[i][u] + i_g * g_g
                h[i][u] = o_g * math.tanh(c[i][u])
            x = h[i]
    w, b, act = model["head"]
    return [_act(act, sum(map(operator.mul, row, h[-1])) + bias) for row, bias in zip(w, b)]


def lstm_stream(model, steps, count):
    """The output a stream answers after its first COUNT steps (STEPS: lists of step_size floats):
    the window of the last `window` of them, zeros standing in for steps before the first."""
    window = model["window"]
    zeros = [0.0] * model["step_size"]
    recent = list(steps[max(0, count - window):count])
    return lstm_window(model, [zeros] * (window - len(recent)) + recent)
