"""What the Python client's suites share (test_client.py, test_client_py_cli.py, test_client_fleet.py,
test_client_streams.py, test_client_batches.py): the live sigserve they talk to, its models and their
float64 references, the helpers that compare outputs, run the two command lines, fake servers and a
fake resolver, and an LSTM server of a test class's own. Not a test itself (tests/run.sh runs
test_*.py only).

The server serves three CPU models on two tcp endpoints: the demo tick_mlp (512 -> 256 -> 64 -> 1),
"odd" (33 -> 31 -> 3, tanh then none; written here) for several outputs per row, and "slow"
(1024 -> 1024 -> 1024, 15 rows a request) to keep the server busy for the deadline tests. Outputs
are compared with a float64 reference computed in pure Python from the safetensors files: each
output within twice its forward error bound (reference.forward: gamma_n |W||x| through the chain, as
tests/tolerance.c does), the LSTM ones by the norm-wise relative error pooled over at least 4 outputs.

The server's state (server, endpoints, tick, odd, slow_features, workdir) is this module's: a suite
reads it as client_fixture.NAME once start_server ran (its setUpModule)."""
import contextlib
import io
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from array import array

import zmq

import sigclient
import sigclient.cli
from reference import f32, forward, free_port, load_lstm, load_model, rel_error, run_in_order
from sigclient import SigClient, Status, Timeout

BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIGSERVE = os.path.join(BUILD, "sigserve")
C_CLI = os.path.join(BUILD, "sigclient")
WEIGHTS = os.path.join(BUILD, "models", "tick_mlp.safetensors")
TOLERANCE = 1e-5
SEED = int(time.time() * 1000) % (1 << 31)

TICK_LAYERS = [("0.weight", "0.bias", "relu"), ("2.weight", "2.bias", "relu"), ("4.weight", "4.bias", "none")]
ODD_LAYERS = [("a.weight", "a.bias", "tanh"), ("b.weight", "b.bias", "none")]
SLOW_LAYERS = [("a.weight", "a.bias", "relu"), ("b.weight", "b.bias", "none")]

# The exact texts tests/test_integration.c asserts (this config serves the same three models).
SERVED = "tick_mlp, odd, slow"
TEXT_UNKNOWN = f'model: "nope" is not served here (served: {SERVED})'
TEXT_UNKNOWN_EMPTY = f'model: "" is not served here (served: {SERVED})'
TEXT_COUNT_511 = 'features: expected rows x input size = 1 x 512 = 512 values for model "tick_mlp", got 511'
TEXT_COUNT_0 = 'features: expected rows x input size = 1 x 512 = 512 values for model "tick_mlp", got 0'
TEXT_NOT_DIVIDING = ('features: 1000 values do not divide into rows=3 rows of 512 '
                     '(model "tick_mlp" takes 512 features per row)')
TEXT_COUNT_1026 = 'features: expected rows x input size = 3 x 512 = 1536 values for model "tick_mlp", got 1026'
TEXT_ROWS = 'rows: expected 1 to 8 for model "tick_mlp", got 9'
TEXT_NAN = "features[37] (row 0, column 37) is NaN; every feature must be finite"
TEXT_INF = "features[515] (row 1, column 3) is Inf; every feature must be finite"
JUNK = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x02])
TEXT_UNDECODABLE = "payload: 7 bytes do not decode as a sigserve.v1.Request"
TEXT_EMPTY = "payload: empty; expected a serialized sigserve.v1.Request"

rng = random.Random(SEED)
server = None           # subprocess.Popen
server_log = None
endpoints = []          # two tcp endpoints of the one server
workdir = None
tick = odd = None       # float64 reference chains
slow_features = None    # 15 rows x 1024


# ---- safetensors and the float64 reference ----

def write_safetensors(path, tensors):
    """tensors: {name: (shape, floats)} -> an F32 safetensors file."""
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in tensors.items():
        blob = array("f", values)
        if sys.byteorder != "little":
            blob.byteswap()
        data = blob.tobytes()
        assert len(data) == 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def random_features(n, scale=2.0):
    return f32([rng.uniform(-scale, scale) for _ in range(n)])


class Pool:
    """Outputs and their references for one check: each output within twice its error bound where
    the reference carries one (forward's), else the norm-wise relative error pooled over at least 4
    outputs (the LSTM references)."""

    def __init__(self):
        self.got, self.ref, self.bound = [], [], []

    def add(self, got, ref):
        self.got.extend(got)
        self.ref.extend(ref)
        bound = getattr(ref, "bound", None)
        self.bound.extend(bound if bound is not None else [None] * len(ref))

    def check(self, test):
        test.assertGreaterEqual(len(self.got), 4, "pool at least 4 outputs")
        pooled_got, pooled_ref = [], []
        for i, (g, r, b) in enumerate(zip(self.got, self.ref, self.bound)):
            if b is None:
                pooled_got.append(g)
                pooled_ref.append(r)
            else:
                test.assertTrue(not math.isnan(g) and abs(g - r) <= 2 * b,
                                f"output {i}: {g!r}, reference {r!r}, bound 2 x {b:.3g} (seed {SEED})")
        if pooled_got:
            e = rel_error(pooled_got, pooled_ref)
            test.assertLessEqual(e, TOLERANCE, f"relative error {e:.3g} over {len(pooled_got)} outputs (seed {SEED})")


# ---- the server ----

def server_log_text():
    try:
        with open(server_log) as f:
            return f.read()
    except (OSError, TypeError):
        return ""


def server_ready():
    try:
        with SigClient(endpoints[0], timeout_ms=200) as c:
            return c.health().ready
    except Timeout:
        return False


def write_models():
    """odd: 33 -> 31 -> 3 (tanh, none); slow: 1024 -> 1024 -> 1024 (relu, none)."""
    r = random.Random(11)
    sizes = (33, 31, 3)
    tensors = {}
    for (w, b, _), n_in, n_out in zip(ODD_LAYERS, sizes, sizes[1:]):
        bound = 1.0 / math.sqrt(n_in)
        tensors[w] = ((n_out, n_in), [r.uniform(-bound, bound) for _ in range(n_out * n_in)])
        tensors[b] = ((n_out,), [r.uniform(-bound, bound) for _ in range(n_out)])
    write_safetensors(os.path.join(workdir, "odd.safetensors"), tensors)
    # Only its run time matters: one random row repeated keeps writing it fast.
    row = [r.uniform(-0.03, 0.03) for _ in range(1024)]
    tensors = {}
    for w, b, _ in SLOW_LAYERS:
        tensors[w] = ((1024, 1024), row * 1024)
        tensors[b] = ((1024,), row)
    write_safetensors(os.path.join(workdir, "slow.safetensors"), tensors)


def start_server():
    """The shared server (each test module's setUpModule)."""
    global server, server_log, endpoints, workdir, tick, odd, slow_features
    print(f"{os.path.basename(sys.argv[0])}: seed {SEED}", flush=True)
    workdir = tempfile.mkdtemp(prefix="sigserve-pyclient-")
    write_models()
    tick = load_model(WEIGHTS, TICK_LAYERS)
    odd = load_model(os.path.join(workdir, "odd.safetensors"), ODD_LAYERS)
    slow_features = random_features(15 * 1024, 1.0)
    endpoints = [f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"]

    def layers(chain):
        return [{"weight": w, "bias": b, "activation": a} for w, b, a in chain]

    config = {
        "server": {"endpoints": endpoints, "max_message_bytes": 65536, "log_level": "warn"},
        "models": [
            # the pipelining tests queue 200 requests at once and expect every one answered OK, in a
            # sanitizer's build too (~10x slower): admission by time must not refuse them
            {"name": "tick_mlp", "backend": "cpu", "max_rows": 8, "queue_depth": 256, "max_queue_us": 60_000_000,
             "weights": WEIGHTS, "layers": layers(TICK_LAYERS)},
            {"name": "odd", "backend": "cpu", "version": "7b", "max_rows": 7, "max_queue_us": 60_000_000,
             "weights": "odd.safetensors", "layers": layers(ODD_LAYERS)},
            # a queue of slow requests is what the deadline tests need: let them all wait
            {"name": "slow", "backend": "cpu", "max_rows": 15, "max_queue_us": 60_000_000,
             "weights": "slow.safetensors", "layers": layers(SLOW_LAYERS)},
        ],
    }
    config_path = os.path.join(workdir, "server.json")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    server_log = os.path.join(workdir, "sigserve.log")
    with open(server_log, "w") as log:
        server = subprocess.Popen([SIGSERVE, "--config", config_path], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while not server_ready():
        if server.poll() is not None:
            raise RuntimeError(f"sigserve exited with {server.returncode}:\n{server_log_text()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"sigserve not ready after 20 s:\n{server_log_text()}")
        time.sleep(0.05)


def stop_server():
    """Stops the shared server, whatever state a test left it in (each test module's tearDownModule)."""
    if server is not None and server.poll() is None:
        server.send_signal(signal.SIGCONT)     # in case a test left it stopped
        server.kill()
        server.wait()
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)


class ClientTest(unittest.TestCase):
    """A fresh client on both endpoints per test, closed after it."""

    def setUp(self):
        self.client = SigClient(endpoints, timeout_ms=5000)

    def tearDown(self):
        self.client.close()

    def assert_server_alive(self):
        self.assertIsNone(server.poll(), "sigserve died:\n" + server_log_text())

    def assert_still_serving(self, client=None):
        client = client or self.client
        pool = Pool()
        for _ in range(2):
            f = random_features(2 * 512)
            pool.add(client.infer("tick_mlp", f, rows=2).outputs, forward(tick, f, 2))
        pool.check(self)



def run(classes):
    """A suite's main: runs CLASSES in the order given (the last may stop the server), then stops the
    server also when interrupted (unittest's tearDownModule does too; twice is harmless)."""
    try:
        return run_in_order(classes)
    finally:
        stop_server()


class ShutdownCheck:
    """A mixin for a module's last TestCase: the server survived everything before, and SIGTERM stops
    it cleanly (exit code 0)."""

    def test_sigterm_exits_0(self):
        self.assertIsNone(server.poll(), "sigserve died during the tests:\n" + server_log_text())
        server.send_signal(signal.SIGTERM)
        try:
            rc = server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail("sigserve still running 10 s after SIGTERM")
        self.assertEqual(rc, 0, server_log_text())


# ---- the command lines ----

class Cli:
    """One run of a command line: exit code, stdout, stderr."""

    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def __repr__(self):
        return f"rc={self.rc}\nstdout:\n{self.out}stderr:\n{self.err}"


def py_cli(*args, stdin_text=""):
    """sigclient-py in this process (sigclient.cli.main)."""
    out, err = io.StringIO(), io.StringIO()
    saved_stdin, sys.stdin = sys.stdin, io.StringIO(stdin_text)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = sigclient.cli.main([str(a) for a in args])
    finally:
        sys.stdin = saved_stdin
    return Cli(rc, out.getvalue(), err.getvalue())


def c_cli(*args, stdin_text=""):
    """The C sigclient, or None where it is not built."""
    if not os.access(C_CLI, os.X_OK):
        return None
    p = subprocess.run([C_CLI] + [str(a) for a in args], input=stdin_text, capture_output=True, text=True,
                       timeout=60)
    return Cli(p.returncode, p.stdout, p.stderr)


def keys(line):
    """The keys of a 'k=v k=v' line, in order."""
    return [field.split("=", 1)[0] for field in line.split()]


def fields(line):
    return {k: v for k, v in (f.split("=", 1) for f in line.split() if "=" in f)}


TIMING_KEYS = ["request_id", "status", "rows", "queue_ns", "compute_ns", "server_ns", "round_trip_us", "model_version",
               "backend"]

# ---- fake servers and a fake resolver ----

class FakeServer:
    """A ROUTER thread on tcp://ADDRESS:PORT that answers infer requests OK with the outputs TAG (which
    server answered), stream_id and step, or STATUS_UNAVAILABLE, or not at all (mode "ok",
    "unavailable", "silent"), or STATUS_BAD_VALUE when the first feature is NaN; health always; the
    model list with one LSTM model "seq" (window 4, step_size 3). Counts the infer requests it
    received and keeps them in ``seen`` (connection identity, the InferRequest) in arrival order, and
    counts the health requests it answered (``healths``)."""

    def __init__(self, address, port, tag, mode="ok"):
        self.tag, self.mode, self.requests, self.healths = tag, mode, 0, 0
        self.seen = []
        self._stop = threading.Event()
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(f"tcp://{address}:{port}")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            if not self._sock.poll(20):
                continue
            identity, payload = self._sock.recv_multipart()
            req = sigclient.pb.Request()
            req.ParseFromString(payload)
            reply = sigclient.pb.Reply()
            if req.WhichOneof("body") == "infer":
                self.requests += 1
                self.seen.append((identity, req.infer))
                if self.mode == "silent":
                    continue
                reply.infer.request_id = req.infer.request_id
                reply.infer.rows = 1
                if self.mode == "unavailable":
                    reply.infer.status = Status.STATUS_UNAVAILABLE
                    reply.infer.error = "draining: this server is stopping"
                elif req.infer.features and math.isnan(req.infer.features[0]):
                    reply.infer.status = Status.STATUS_BAD_VALUE
                    reply.infer.error = "features[0] (row 0, column 0) is NaN; every feature must be finite"
                else:
                    reply.infer.outputs.extend([self.tag, req.infer.stream_id, req.infer.step])
            elif req.WhichOneof("body") == "list_models":
                m = reply.list_models.models.add()
                m.name, m.version, m.backend, m.kernel, m.type = "seq", "1", "cpu", "lstm", "lstm"
                m.window, m.step_size, m.input_size, m.output_size, m.max_rows, m.available = 4, 3, 12, 2, 1, True
            else:
                reply.health.live = reply.health.ready = True
                self.healths += 1
            self._sock.send_multipart([identity, reply.SerializeToString()])

    def close(self):
        self._stop.set()
        self._thread.join()
        self._sock.close()
        self._ctx.term()


class Fleet:
    """The name "fleet" with the addresses a test gives it (a resolver for SigClient)."""

    def __init__(self, *addresses):
        self.addresses, self.down, self.lookups = list(addresses), False, 0

    def __call__(self, name):
        self.lookups += 1
        if name != "fleet" or self.down:
            raise OSError(-2, f"test resolver: {name} is down")
        return list(self.addresses)


def wait_for(predicate, cap_s=10.0):
    """Polls PREDICATE every millisecond until it holds or CAP_S passes; its last value."""
    deadline = time.monotonic() + cap_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.001)
    return predicate()


def wait_connected(client, fakes, cap_s=10.0):
    """Sends health requests until each of FAKES has answered one since (CAP_S at most): the client's
    connection to every one is then up, and ZMQ_IMMEDIATE (a dns:// client's) hands requests to all of
    them in turn. Whether they all answered."""
    before = [f.healths for f in fakes]
    return wait_for(lambda: client.health().live and all(f.healths > b for f, b in zip(fakes, before)), cap_s)


def drive_until(client, predicate, cap_s=10.0):
    """Receives (nothing is pending: each wait of 20 ms times out) until PREDICATE holds, CAP_S at most:
    a client resolves its dns:// names when they are due inside the calls that send or receive, and
    this one sends nothing. PREDICATE's last value."""
    def received_then():
        with contextlib.suppress(Timeout):
            client.recv_infer(timeout_ms=20)
        return predicate()
    return wait_for(received_then, cap_s)


# ---- an LSTM server of a test class's own ----

LSTM_WINDOW, LSTM_STEP, LSTM_HIDDEN, LSTM_OUT = 5, 4, 6, 2


class LstmServer:
    """A mixin for a TestCase: an LSTM model "seq" (window LSTM_WINDOW of LSTM_STEP features, LSTM_HIDDEN
    units, LSTM_OUT outputs, tanh head) served by a sigserve of the class's own (cls.endpoint), its
    float64 reference (cls.model, tests/python/reference.py), and random steps."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sigserve-pystream-")
        r = random.Random(5)
        bound = 1.0 / math.sqrt(LSTM_HIDDEN)
        tensors = {}
        for k, n_in in enumerate((LSTM_STEP, LSTM_HIDDEN)):
            for name, shape in ((f"weight_ih_l{k}", (4 * LSTM_HIDDEN, n_in)), (f"weight_hh_l{k}", (4 * LSTM_HIDDEN, LSTM_HIDDEN)),
                                (f"bias_ih_l{k}", (4 * LSTM_HIDDEN,)), (f"bias_hh_l{k}", (4 * LSTM_HIDDEN,))):
                tensors["lstm." + name] = (shape, [r.uniform(-bound, bound) for _ in range(math.prod(shape))])
        tensors["head.weight"] = ((LSTM_OUT, LSTM_HIDDEN), [r.uniform(-bound, bound) for _ in range(LSTM_OUT * LSTM_HIDDEN)])
        tensors["head.bias"] = ((LSTM_OUT,), [r.uniform(-bound, bound) for _ in range(LSTM_OUT)])
        path = os.path.join(cls.dir, "seq.safetensors")
        write_safetensors(path, tensors)
        cls.model = load_lstm(path, LSTM_WINDOW, head_act="tanh")
        cls.endpoint = f"tcp://127.0.0.1:{free_port()}"
        config = {"server": {"endpoints": [cls.endpoint], "log_level": "warn"},
                  "models": [{"name": "seq", "type": "lstm", "backend": "cpu", "weights": "seq.safetensors",
                              "lstm": "lstm.", "window": LSTM_WINDOW, "instances": 2, "max_streams": 64,
                              "head": {"weight": "head.weight", "bias": "head.bias", "activation": "tanh"}}]}
        config_path = os.path.join(cls.dir, "server.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        cls.log = os.path.join(cls.dir, "sigserve.log")
        with open(cls.log, "w") as log:
            cls.server = subprocess.Popen([SIGSERVE, "--config", config_path], stdout=log, stderr=subprocess.STDOUT)

        def ready():
            try:
                with SigClient(cls.endpoint, timeout_ms=200) as c:
                    return c.health().ready
            except Timeout:
                return cls.server.poll() is not None
        if not wait_for(ready, 20) or cls.server.poll() is not None:
            with open(cls.log) as f:
                raise RuntimeError(f"the LSTM sigserve did not start:\n{f.read()}")

    @classmethod
    def tearDownClass(cls):
        cls.server.send_signal(signal.SIGTERM)
        cls.server.wait(timeout=10)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def steps(self, n):
        return [f32([rng.uniform(-1, 1) for _ in range(LSTM_STEP)]) for _ in range(n)]
