#!/usr/bin/python3
"""The Python client (the package clients/python/sigclient) and its command line sigclient-py against a
live sigserve that this test starts.

Run from the repository root (tests/run.sh does):
    BUILD=build PYTHONPATH=build/gen/py:clients/python /usr/bin/python3 tests/python/test_client.py
or, with the package installed (tests/python/test_install.sh does), with no PYTHONPATH at all.
Uses only the standard library, pyzmq and protobuf. The last line printed is "N passed, N failed".
Where $BUILD/sigclient (the C CLI) exists, sigclient-py's output and exit codes are compared with it.

The server serves three CPU models on two tcp endpoints: the demo tick_mlp (512 -> 256 -> 64 -> 1),
"odd" (33 -> 31 -> 3, tanh then none; written here) for several outputs per row, and "slow"
(1024 -> 1024 -> 1024, 15 rows a request) to keep the server busy for the deadline tests. Outputs
are compared with a float64 reference computed in pure Python from the safetensors files: each
output within twice its forward error bound (reference.forward: gamma_n |W||x| through the chain, as
tests/tolerance.c does), the LSTM ones by the norm-wise relative error pooled over at least 4 outputs.
"""
import ast
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
from reference import f32, forward, free_port, load_lstm, load_model, lstm_stream, rel_error, run_in_order
from sigclient import (BadRequest, BadShape, BadValue, DeadlineExceeded, InferResult, InternalError, Overloaded,
                       ProtocolError, ServerError, SigClient, SigServeError, Status, StreamGone, Timeout, Unavailable,
                       UnknownModel)

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


def setUpModule():
    global server, server_log, endpoints, workdir, tick, odd, slow_features
    print(f"test_client: seed {SEED}", flush=True)
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


def tearDownModule():
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


# ---- inference ----

class Test1Infer(ClientTest):

    def check_ok(self, r, rows, version="1", outputs_per_row=1):
        self.assertIsInstance(r, InferResult)
        self.assertTrue(r.ok)
        self.assertEqual(r.status, Status.STATUS_OK)
        self.assertEqual(r.status_name, "STATUS_OK")
        self.assertEqual(r.error, "")
        self.assertEqual(r.rows, rows)
        self.assertEqual(r.model_version, version)
        self.assertEqual(len(r.outputs), rows * outputs_per_row)
        self.assertEqual(r.output_size, outputs_per_row)
        self.assertGreater(r.compute_ns, 0)
        self.assertGreaterEqual(r.server_ns, r.compute_ns)
        self.assertGreaterEqual(r.round_trip_ns, r.server_ns)    # nested intervals of one monotonic clock

    def test_rows_1_matches_reference(self):
        pool = Pool()
        first = None
        for i in range(8):
            f = random_features(512)
            r = self.client.infer("tick_mlp", f)
            self.check_ok(r, 1)
            first = r.request_id if first is None else first
            self.assertEqual(r.request_id, first + i)          # ids grow by one
            pool.add(r.outputs, forward(tick, f, 1))
        self.assertEqual(first, 1)
        pool.check(self)

    def test_rows_5_and_rows_0(self):
        pool = Pool()
        for rows in (5, 5):
            f = random_features(rows * 512)
            r = self.client.infer("tick_mlp", f, rows=rows)
            self.check_ok(r, rows)
            self.assertEqual(len(r.output_rows()), 5)
            pool.add(r.outputs, forward(tick, f, rows))
        for _ in range(4):      # rows 0 means 1
            f = random_features(512)
            r = self.client.infer("tick_mlp", f, rows=0)
            self.check_ok(r, 1)
            pool.add(r.outputs, forward(tick, f, 1))
        pool.check(self)

    def test_infer_rows(self):
        pool = Pool()
        rows = [random_features(512) for _ in range(5)]
        out = self.client.infer_rows("tick_mlp", rows)
        self.assertEqual(len(out), 5)
        self.assertTrue(all(len(o) == 1 for o in out))
        for row, o in zip(rows, out):
            pool.add(o, forward(tick, row, 1))
        pool.check(self)
        # several outputs per row: odd, 7 rows (its max) of 33 -> 3
        pool = Pool()
        rows = [random_features(33) for _ in range(7)]
        out = self.client.infer_rows("odd", rows)
        self.assertEqual([len(o) for o in out], [3] * 7)
        for row, o in zip(rows, out):
            pool.add(o, forward(odd, row, 1))
        pool.check(self)
        with self.assertRaises(ValueError):
            self.client.infer_rows("odd", [rows[0], rows[1][:32]])
        with self.assertRaises(ValueError):
            self.client.infer_rows("odd", [])

    def test_odd_model_multi_output(self):
        for rows in (1, 7):
            pool = Pool()
            for _ in range(2):
                f = random_features(rows * 33)
                r = self.client.infer("odd", f, rows=rows)
                self.check_ok(r, rows, version="7b", outputs_per_row=3)
                pool.add(r.outputs, forward(odd, f, rows))
            pool.check(self)

    def test_argument_errors_send_nothing(self):
        f = random_features(512)
        for kwargs, exc in (({"rows": -1}, ValueError), ({"rows": 1 << 32}, ValueError),
                            ({"deadline_us": 1 << 32}, ValueError), ({"rows": 1.5}, TypeError)):
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaises(exc):
                    self.client.infer("tick_mlp", f, **kwargs)
        with self.assertRaises(TypeError):
            self.client.infer(None, f)
        with self.assertRaises(ValueError):
            SigClient([])
        with self.assertRaises(ValueError):
            SigClient(endpoints, timeout_ms=0)
        self.assertEqual(self.client.pending, 0)
        self.assert_still_serving()


# ---- every error status, with the server's exact text ----

class Test2Errors(ClientTest):

    def test_error_statuses_raise_typed_exceptions(self):
        f = random_features(8 * 512)
        nan = list(f[:512])
        nan[37] = math.nan
        inf = list(f[:1024])
        inf[512 + 3] = -math.inf
        cases = [
            ("unknown model", ("nope", f[:512], 1), UnknownModel, TEXT_UNKNOWN),
            ("empty model name", ("", f[:512], 1), UnknownModel, TEXT_UNKNOWN_EMPTY),
            ("wrong feature count", ("tick_mlp", f[:511], 1), BadShape, TEXT_COUNT_511),
            ("no features", ("tick_mlp", [], 1), BadShape, TEXT_COUNT_0),
            ("rows not dividing", ("tick_mlp", f[:1000], 3), BadShape, TEXT_NOT_DIVIDING),
            ("rows x size mismatch", ("tick_mlp", f[:1026], 3), BadShape, TEXT_COUNT_1026),
            ("rows > max_rows", ("tick_mlp", f[:36], 9), BadShape, TEXT_ROWS),
            ("NaN", ("tick_mlp", nan, 1), BadValue, TEXT_NAN),
            ("Inf", ("tick_mlp", inf, 2), BadValue, TEXT_INF),
        ]
        for name, (model, features, rows), cls, text in cases:
            with self.subTest(case=name):
                with self.assertRaises(cls) as cm:
                    self.client.infer(model, features, rows=rows)
                e = cm.exception
                self.assertIs(type(e), cls)
                self.assertIsInstance(e, ServerError)
                self.assertIsInstance(e, SigServeError)
                self.assertEqual(e.message, text)
                self.assertEqual(e.status, Status[cls_status[cls]])
                self.assertEqual(e.status_name, cls_status[cls])
                self.assertEqual(str(e), f"server replied {cls_status[cls]}: {text}")
                self.assertIsNotNone(e.result)
                self.assertEqual(e.result.request_id, e.request_id)
                self.assertGreater(e.request_id, 0)
                self.assertEqual(e.result.outputs, [])
                self.assertFalse(e.result.ok)
                # ... and the client keeps working
                self.assert_still_serving()
        self.assert_server_alive()

    def test_bad_request_from_raw_bytes(self):
        for payload, text in ((JUNK, TEXT_UNDECODABLE), (b"", TEXT_EMPTY)):
            with self.subTest(payload=payload):
                self.client.send_raw(payload)
                r = self.client.recv_infer()
                self.assertEqual(r.status, Status.STATUS_BAD_REQUEST)
                self.assertEqual(r.status_name, "STATUS_BAD_REQUEST")
                self.assertEqual(r.error, text)
                self.assertEqual(r.request_id, 0)
                self.assertEqual(r.round_trip_ns, 0)    # not a request this client tracked
                with self.assertRaises(BadRequest) as cm:
                    r.raise_for_status()
                self.assertEqual(cm.exception.message, text)
        # a synchronous call takes a rejection (request_id 0) as its answer, as the C client does (one
        # endpoint: over two, the junk and the call go to different ones and may be answered in either
        # order)
        with SigClient(endpoints[:1], timeout_ms=5000) as one:
            one.send_raw(JUNK)
            with self.assertRaises(BadRequest) as cm:
                one.health()
            self.assertEqual(cm.exception.message, TEXT_UNDECODABLE)
            self.assertTrue(one.health().ready)
        self.assert_still_serving()

    def test_status_to_exception_mapping(self):
        for name, cls in cls_by_status.items():
            e = sigclient.exception_for_status(Status[name], "why")
            self.assertIs(type(e), cls)
            self.assertEqual((e.status, e.status_name, e.message), (Status[name], name, "why"))
        e = sigclient.exception_for_status(99, "from the future")
        self.assertIs(type(e), ServerError)
        self.assertEqual(e.status_name, "STATUS_UNKNOWN(99)")
        self.assertTrue(issubclass(Timeout, SigServeError) and issubclass(Timeout, TimeoutError))
        self.assertTrue(issubclass(ProtocolError, SigServeError))
        self.assertEqual(len(cls_by_status), len(Status) - 1)   # every non-OK status has its class

    def test_protocol_error_on_garbage_reply(self):
        """A 'server' that answers junk: ProtocolError, not a crash or a hang."""
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        try:
            with SigClient(f"tcp://127.0.0.1:{port}", timeout_ms=2000, context=ctx) as c:
                for answer, what in (([b"\xff\xff\xff"], "cannot decode"), ([b""], "no body"),
                                     ([b"a", b"b"], "2 frames")):
                    with self.subTest(what=what):
                        c.send_infer("x", [1.0])
                        ident, _payload = router.recv_multipart()
                        router.send_multipart([ident] + answer)
                        with self.assertRaises(ProtocolError) as cm:
                            c.recv_infer()
                        self.assertIn(what, str(cm.exception))
        finally:
            router.close()
            ctx.term()


cls_by_status = {
    "STATUS_BAD_REQUEST": BadRequest, "STATUS_UNKNOWN_MODEL": UnknownModel, "STATUS_BAD_SHAPE": BadShape,
    "STATUS_BAD_VALUE": BadValue, "STATUS_OVERLOADED": Overloaded, "STATUS_DEADLINE_EXCEEDED": DeadlineExceeded,
    "STATUS_UNAVAILABLE": Unavailable, "STATUS_INTERNAL": InternalError,
}
cls_status = {cls: name for name, cls in cls_by_status.items()}


# ---- pipelining, health, models ----

class Test3Pipelined(ClientTest):

    def test_200_pipelined_across_two_endpoints(self):
        vectors = [random_features(512) for _ in range(16)]
        refs = [forward(tick, v, 1) for v in vectors]
        sent = {}
        bad_id = None
        for i in range(200):
            if i == 100:    # one bad request in the burst: its reply carries the status, nothing raised
                bad_id = self.client.send_infer("tick_mlp", vectors[0][:511])
                continue
            rid = self.client.send_infer("tick_mlp", vectors[i % 16])
            sent[rid] = i % 16
        self.assertEqual(self.client.pending, 200)
        self.assertEqual(sorted(list(sent) + [bad_id]), list(range(1, 201)))
        pool = Pool()
        seen = set()
        for _ in range(200):
            r = self.client.recv_infer()
            self.assertNotIn(r.request_id, seen)
            seen.add(r.request_id)
            self.assertGreater(r.round_trip_ns, 0)
            if r.request_id == bad_id:
                self.assertEqual(r.status, Status.STATUS_BAD_SHAPE)
                self.assertEqual(r.error, TEXT_COUNT_511)
                self.assertEqual(r.outputs, [])
                continue
            self.assertTrue(r.ok, r.error)
            self.assertEqual(r.rows, 1)
            pool.add(r.outputs, refs[sent.pop(r.request_id)])
        self.assertEqual(sent, {})
        self.assertEqual(self.client.pending, 0)
        pool.check(self)
        with self.assertRaises(Timeout):     # nothing more to come
            self.client.recv_infer(timeout_ms=50)

    def test_each_endpoint_alone(self):
        for e in endpoints:
            with self.subTest(endpoint=e), SigClient(e, timeout_ms=5000) as c:
                self.assert_still_serving(c)


class Test4HealthModels(ClientTest):

    def test_health(self):
        with open(os.path.join(ROOT, "VERSION")) as f:
            version = f.read().strip()
        h = self.client.health()
        self.assertEqual((h.live, h.ready, h.version), (True, True, version))

    def test_list_models(self):
        models = self.client.list_models()
        got = [(m.name, m.version, m.backend, m.kernel, m.input_size, m.output_size, m.max_rows, m.available)
               for m in models]
        self.assertEqual(got, [("tick_mlp", "1", "cpu", "loop", 512, 1, 8, True),
                               ("odd", "7b", "cpu", "loop", 33, 3, 7, True),
                               ("slow", "1", "cpu", "loop", 1024, 1024, 15, True)])
        self.assertEqual([(m.type, m.window, m.step_size) for m in models], [("mlp", 0, 0)] * 3)

    def test_late_infer_reply_skipped_by_health(self):
        rid = self.client.send_infer("tick_mlp", random_features(512))
        # The front answers health at once while a worker computes the infer: let the infer reply
        # arrive first, as a late reply would.
        time.sleep(0.2)
        self.assertTrue(self.client.health().ready)
        self.assertEqual(self.client.discarded_replies, 1)
        self.assertEqual(self.client.pending, 0, f"request {rid} was answered and discarded")


# ---- timeouts and stale replies ----

class Test5Timeouts(ClientTest):

    def test_timeout_when_nobody_listens(self):
        dead = f"tcp://127.0.0.1:{free_port()}"
        timeout_ms = 300
        with SigClient(dead, timeout_ms=timeout_ms) as c:
            for name, call in (("infer", lambda: c.infer("tick_mlp", [0.0] * 512)), ("health", c.health),
                               ("list_models", c.list_models), ("recv_infer", c.recv_infer)):
                with self.subTest(call=name):
                    t0 = time.monotonic()
                    with self.assertRaises(Timeout) as cm:
                        call()
                    elapsed = time.monotonic() - t0
                    self.assertGreaterEqual(elapsed, 0.9 * timeout_ms / 1000)
                    self.assertLess(elapsed, 2 * timeout_ms / 1000, f"{name} took {elapsed:.3f} s")
                    self.assertIn(f"timed out after {timeout_ms} ms", str(cm.exception))
                    self.assertIn(dead, str(cm.exception))
                    self.assertIsInstance(cm.exception, TimeoutError)

    def test_curve_keys_at_a_plaintext_server_raise_security_error_at_once(self):
        """CURVE on one side only is no timeout: every call raises SecurityError naming the endpoint, what
        the server asks for and what to give SigClient, a stream's step too (the server without CURVE:
        tests/test_curve.c has the other way round)."""
        cert = os.path.join(workdir, "mismatch")
        subprocess.run([SIGSERVE, "--keygen", cert], check=True, capture_output=True)
        want = (f"{endpoints[0]}: the server does not use CURVE, and this client has CURVE keys (SigClient without "
                f"curve_server and curve_client)")
        with SigClient(endpoints[0], timeout_ms=60000, curve_server=cert, curve_client=cert + "_secret") as c:
            # a stream's step goes on a socket of its own, watched the same way (twice: the second
            # finds the endpoint refused already)
            step = c.stream("tick_mlp", 7).step
            for name, call in (("health", c.health), ("infer", lambda: c.infer("tick_mlp", [0.0] * 512)),
                               ("list_models", c.list_models), ("stream step", lambda: step([0.0] * 512)),
                               ("stream step again", lambda: step([0.0] * 512))):
                with self.subTest(call=name):
                    with self.assertRaises(sigclient.SecurityError) as cm:
                        call()
                    self.assertEqual(str(cm.exception), want)
                    self.assertEqual(cm.exception.failure, want[:want.index(" (")])
                    self.assertIsInstance(cm.exception, sigclient.TransportError)
        self.assert_server_alive()

    def test_stale_reply_skipped(self):
        """A reply that arrives after its call timed out is skipped by the next call, which gets its own."""
        with SigClient(endpoints[0], timeout_ms=300) as c:
            c.infer("tick_mlp", random_features(512))      # connected and answering
            old = random_features(4 * 512)
            new = random_features(4 * 512)
            server.send_signal(signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                with self.assertRaises(Timeout):
                    c.infer("tick_mlp", old, rows=4)
                self.assertLess(time.monotonic() - t0, 0.6)
            finally:
                server.send_signal(signal.SIGCONT)
            c.timeout_ms = 5000
            r = c.infer("tick_mlp", new, rows=4)
            self.assertEqual(r.request_id, 3)
            self.assertEqual(c.discarded_replies, 1)
            pool = Pool()
            pool.add(r.outputs, forward(tick, new, 4))
            pool.check(self)
        self.assert_server_alive()


# ---- deadlines ----

class Test6Deadline(ClientTest):
    """Slow requests (15 rows through 1024x1024x2) queue inside the server; one more behind them with a
    1 ms deadline is answered STATUS_DEADLINE_EXCEEDED, not run (at once when the expected wait for a
    worker is already over its deadline, else by the worker once it has waited past it); a tick_mlp request with 60 s is run (on its own
    worker: models do not wait for each other).

    The burst is sent while the server is stopped (SIGSTOP), so that it is all waiting when the server
    resumes: sent to a running server, a fast CPU could finish each slow request before this client has
    encoded the next one, and the small request would then find the server idle."""

    SLOW = 6

    def send_slow(self, client):
        return [client.send_infer("slow", slow_features, rows=15) for _ in range(self.SLOW)]

    def check_slow(self, r):
        self.assertTrue(r.ok, r.error)
        self.assertEqual((r.rows, len(r.outputs)), (15, 15 * 1024))

    def check_exceeded_text(self, text):
        # refused at admission when the slow requests still queued would keep it waiting past its
        # deadline (the usual case), else answered by the worker once it has waited past it (when the
        # worker had already taken most of them): not run either way
        if text.startswith('deadline_us: model "slow": '):
            self.assertRegex(text, r'^deadline_us: model "slow": the expected wait for a worker is [0-9.]+ us '
                                   r"\([0-9]+ row\(s\) queued on instance 0\), already over the request's deadline "
                                   r"of 1000 us; not run$")
        else:
            self.assertRegex(text, r"^deadline_us: the request waited [0-9.]+ us, past its deadline of 1000 us; "
                                   r"not run$")

    def test_deadline_in_pipelined_status(self):
        with SigClient(endpoints[0], timeout_ms=30000) as c:
            c.infer("tick_mlp", random_features(512))       # connected
            tiny = random_features(4 * 512)
            server.send_signal(signal.SIGSTOP)
            try:
                slow_ids = self.send_slow(c)
                # waits behind its own model's queue: slow is the one with a queue
                short_id = c.send_infer("slow", slow_features, rows=15, deadline_us=1000)
                long_id = c.send_infer("tick_mlp", tiny, rows=4, deadline_us=60_000_000)
            finally:
                server.send_signal(signal.SIGCONT)
            got = {}
            for _ in range(self.SLOW + 2):
                r = c.recv_infer()
                got[r.request_id] = r
            self.assertEqual(sorted(got), sorted(slow_ids + [short_id, long_id]))
            for rid in slow_ids:
                self.check_slow(got[rid])
            r = got[short_id]
            if r.ok:
                # The six slow requests (61 KB each) came in over TCP after the SIGCONT; once (make
                # test beside an image build) the short one arrived only after the worker had run them
                # all, and ran at once. A deadline kept then means it waited no longer than 1 ms.
                self.assertLessEqual(r.queue_ns, 1_000_000, "answered OK after waiting past its deadline")
            else:
                self.assertEqual(r.status, Status.STATUS_DEADLINE_EXCEEDED, r.error)
                self.check_exceeded_text(r.error)
                self.assertEqual(r.outputs, [])
                self.assertEqual(r.compute_ns, 0)
                with self.assertRaises(DeadlineExceeded):
                    r.raise_for_status()
            r = got[long_id]
            self.assertTrue(r.ok, r.error)
            self.assertLess(r.queue_ns, 60_000_000_000)
            pool = Pool()
            pool.add(r.outputs, forward(tick, tiny, 4))
            pool.check(self)

    def test_deadline_raises_from_infer(self):
        """The same through infer, on the same client: it raises DeadlineExceeded for its own (answered
        at admission), skipping the slow replies that came before it (late, to it)."""
        with SigClient(endpoints[0], timeout_ms=30000) as c:
            c.infer("tick_mlp", random_features(512))       # connected
            resume = threading.Timer(0.1, server.send_signal, [signal.SIGCONT])
            server.send_signal(signal.SIGSTOP)
            e = None
            try:
                self.send_slow(c)
                resume.start()
                try:
                    r = c.infer("slow", slow_features, rows=15, deadline_us=1000)
                except DeadlineExceeded as exc:
                    e = exc
            finally:
                resume.cancel()
                if resume.ident is not None:    # started
                    resume.join()
                server.send_signal(signal.SIGCONT)
            if e is None:
                # As in test_deadline_in_pipelined_status: the six slow requests (61 KB each) came in
                # over TCP after the SIGCONT; once (make test beside an image build) this one arrived
                # only after the worker had run them all, and ran at once. A deadline kept then means
                # it waited no longer than 1 ms.
                self.assertEqual(r.request_id, self.SLOW + 2)
                self.assertLessEqual(r.queue_ns, 1_000_000, "answered OK after waiting past its deadline")
            else:
                self.check_exceeded_text(e.message)
                self.assertEqual(e.status_name, "STATUS_DEADLINE_EXCEEDED")
                self.assertEqual(e.request_id, self.SLOW + 2)
            # refused at admission: the slow replies that came before its own were skipped, the rest are
            # still on their way, each answered
            self.assertEqual(c.discarded_replies + c.pending, self.SLOW)
            for _ in range(c.pending):
                self.check_slow(c.recv_infer())
            self.assertEqual(c.pending, 0)
            self.assert_still_serving(c)


# ---- lifetime ----

class Test7Lifetime(unittest.TestCase):

    def test_context_manager_closes(self):
        with SigClient(endpoints, timeout_ms=2000) as c:
            self.assertFalse(c.closed)
            self.assertTrue(c.health().live)
        self.assertTrue(c.closed)
        with self.assertRaises(SigServeError):
            c.infer("tick_mlp", [0.0] * 512)
        with self.assertRaises(SigServeError):
            c.health()
        c.close()   # twice is fine

    def test_shared_context_left_open(self):
        ctx = zmq.Context()
        try:
            with SigClient(endpoints[1], context=ctx) as c:
                self.assertTrue(c.health().ready)
            self.assertFalse(ctx.closed)
            with SigClient(endpoints[1], context=ctx) as c:     # the context still works
                self.assertEqual(len(c.list_models()), 3)
        finally:
            ctx.term()

    def test_exception_on_close_path(self):
        """An exception inside the with block still closes the client and propagates."""
        with self.assertRaises(UnknownModel):
            with SigClient(endpoints[0]) as c:
                c.infer("nope", [0.0])
        self.assertTrue(c.closed)


# ---- the package ----

class Test0Package(unittest.TestCase):
    """What `pip install ./clients/python` relies on: the version, and the wire code it carries."""

    def test_version_is_the_repository_version(self):
        with open(os.path.join(ROOT, "VERSION")) as f:
            self.assertEqual(sigclient.__version__, f.read().strip())

    def test_wire_code_is_the_packages_own(self):
        package_dir = os.path.dirname(os.path.abspath(sigclient.__file__))
        self.assertEqual(os.path.dirname(os.path.abspath(sigclient.pb.__file__)), os.path.join(package_dir, "_pb"))
        self.assertEqual((sigclient.pb.DESCRIPTOR.name, sigclient.pb.DESCRIPTOR.package), ("signal.proto", "sigserve.v1"))

    def test_wire_code_matches_the_builds(self):
        """The kept signal_pb2.py describes what proto/signal.proto says now (the build regenerates
        $BUILD/gen/py/signal_pb2.py from it); `make python-proto` refreshes a stale copy."""
        built = os.path.join(BUILD, "gen", "py", "signal_pb2.py")
        if not os.path.isfile(built):
            self.skipTest(f"{built} not built")
        self.assertEqual(serialized_descriptor(sigclient.pb.__file__), serialized_descriptor(built),
                         "clients/python/sigclient/_pb/signal_pb2.py is stale: run `make python-proto`")
        self.assertEqual(bytes(sigclient.pb.DESCRIPTOR.serialized_pb), serialized_descriptor(built))


def serialized_descriptor(path):
    """The FileDescriptorProto bytes a protoc-generated _pb2.py registers (read, not imported)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile"):
            return node.args[0].value
    raise AssertionError(f"{path}: no AddSerializedFile call")


# ---- the command line ----

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


TIMING_KEYS = ["request_id", "status", "rows", "queue_ns", "compute_ns", "server_ns", "round_trip_us", "model_version"]
REPEAT_KEYS = ["repeat", "warmup", None, "p50", "p90", "p99", "p99.9", "min", "max", "mean", "sd"]
MODELS_TABLE = (
    "name      version  backend  kernel   input  output  max_rows  available  type  window  step_size\n"
    "tick_mlp  1        cpu      loop       512       1         8  yes        mlp        -          -\n"
    "odd       7b       cpu      loop        33       3         7  yes        mlp        -          -\n"
    "slow      1        cpu      loop      1024    1024        15  yes        mlp        -          -\n")
SYNOPSIS_LINE = "usage: sigclient-py [--endpoint E]... [--timeout MS] [--retry N]"


class Test8Cli(unittest.TestCase):
    """sigclient-py: outputs, timings, exit codes and error texts, the same as the C sigclient's."""

    def e(self):
        return ("--endpoint", endpoints[0])

    def assert_same_as_c(self, py, *args, stdin_text="", same_stdout=True):
        """The C CLI gives the same exit code, the same stdout (unless told) and the same first line of
        stderr with its own name (timing lines: the same keys)."""
        c = c_cli(*args, stdin_text=stdin_text)
        if c is None:
            return
        self.assertEqual(py.rc, c.rc, f"python:\n{py!r}\nC:\n{c!r}")
        if same_stdout:
            self.assertEqual(py.out, c.out)
        py_first = py.err.splitlines()[0] if py.err else ""
        c_first = c.err.splitlines()[0] if c.err else ""
        if py_first.startswith("request_id="):
            self.assertEqual(keys(py_first), keys(c_first), f"python: {py_first}\nC: {c_first}")
        else:
            self.assertEqual(py_first.replace("sigclient-py", "sigclient"), c_first)

    def check_timing_line(self, line, rows, version="1"):
        self.assertEqual(keys(line), TIMING_KEYS, line)
        f = fields(line)
        self.assertEqual((f["status"], f["rows"], f["model_version"]), ("STATUS_OK", str(rows), version))
        self.assertGreater(int(f["compute_ns"]), 0)
        self.assertGreaterEqual(int(f["server_ns"]), int(f["compute_ns"]))
        self.assertGreaterEqual(float(f["round_trip_us"]) * 1000 + 100, int(f["server_ns"]))   # one decimal of us
        return f

    def test_infer_file_and_stdin(self):
        """The outputs printed are the library's, exactly (%.9g round-trips a float32), one row a line."""
        rows = 4
        features = random_features(rows * 512)
        with SigClient(endpoints[0]) as c:
            want = c.infer("tick_mlp", features, rows=rows).outputs
        pool = Pool()
        pool.add(want, forward(tick, features, rows))
        pool.check(self)
        path = os.path.join(workdir, "cli-features.txt")
        with open(path, "w") as f:     # rows on lines, commas and a comment: the C CLI's format
            f.write("# four rows\n")
            for r in range(rows):
                f.write(", ".join(repr(v) for v in features[r * 512:(r + 1) * 512]) + "\n")
        text = " ".join(repr(v) for v in features)
        for source, stdin_text in ((("--file", path), ""), (("--stdin",), text), (("--file", "-"), text)):
            with self.subTest(source=source[0]):
                args = self.e() + ("infer", "--model", "tick_mlp", "--rows", rows) + source
                py = py_cli(*args, stdin_text=stdin_text)
                self.assertEqual(py.rc, 0, py)
                lines = py.out.splitlines()
                self.assertEqual(len(lines), rows, py)
                self.assertEqual([f32([float(v)]) for line in lines for v in line.split()], [[v] for v in want])
                err = py.err.splitlines()
                self.assertEqual(len(err), 1, py)
                self.check_timing_line(err[0], rows)
                self.assert_same_as_c(py, *args, stdin_text=stdin_text)

    def test_infer_several_outputs_per_row(self):
        rows = 7
        features = random_features(rows * 33)
        py = py_cli(*self.e(), "infer", "--model", "odd", "--rows", rows, "--stdin",
                    stdin_text="\n".join(repr(v) for v in features))
        self.assertEqual(py.rc, 0, py)
        got = [[float(v) for v in line.split()] for line in py.out.splitlines()]
        self.assertEqual([len(g) for g in got], [3] * rows)
        pool = Pool()
        pool.add([v for g in got for v in g], forward(odd, features, rows))
        pool.check(self)
        self.check_timing_line(py.err.splitlines()[0], rows, version="7b")

    def test_random_is_seeded(self):
        args = self.e() + ("infer", "--model", "tick_mlp", "--random", 512, "--rows", 2)
        a, b = py_cli(*args, "--seed", 5), py_cli(*args, "--seed", 5)
        other, default = py_cli(*args, "--seed", 6), py_cli(*args)
        for run in (a, b, other, default):
            self.assertEqual(run.rc, 0, run)
            self.assertEqual(len(run.out.splitlines()), 2, run)
        self.assertEqual(a.out, b.out)
        self.assertNotEqual(a.out, other.out)
        self.assertEqual(default.out, py_cli(*args, "--seed", 1).out)      # the default seed is 1
        self.assert_same_as_c(a, *args, "--seed", 5, same_stdout=False)   # another generator: other values

    def test_repeat_prints_percentiles_in_us(self):
        args = self.e() + ("infer", "--model", "tick_mlp", "--random", 512, "--repeat", 50, "--warmup", 5)
        py = py_cli(*args)
        self.assertEqual(py.rc, 0, py)
        self.assertEqual(len(py.out.splitlines()), 1)
        err = py.err.splitlines()
        self.assertEqual(len(err), 3, py)
        self.assertEqual(fields(err[0])["request_id"], "55")      # a fresh client: warm-up requests count
        self.check_timing_line(err[0], 1)
        summaries = {}
        for line, what in zip(err[1:], ("round_trip_us", "server_us")):
            self.assertEqual(keys(line), REPEAT_KEYS[:2] + [what] + REPEAT_KEYS[3:], line)
            f = {k: float(v) for k, v in fields(line).items()}
            self.assertEqual((f["repeat"], f["warmup"]), (50, 5))
            self.assertTrue(0 < f["min"] <= f["p50"] <= f["p90"] <= f["p99"] <= f["p99.9"] <= f["max"], line)
            self.assertTrue(f["min"] <= f["mean"] <= f["max"] and f["sd"] >= 0, line)
            self.assertRegex(line, r"p50=\d+\.\d ")       # microseconds, one decimal, as the C CLI
            summaries[what] = f
        # each server time lies inside its round trip, so every order statistic does too
        for k in ("min", "p50", "p90", "max"):
            self.assertLessEqual(summaries["server_us"][k], summaries["round_trip_us"][k] + 0.1)
        self.assertLess(summaries["server_us"]["p50"], 1e6)         # us, not ns
        c = c_cli(*args)
        if c is not None:
            self.assertEqual(c.rc, 0, c)
            self.assertEqual([keys(line) for line in py.err.splitlines()], [keys(line) for line in c.err.splitlines()])
        # both endpoints, round-robin
        py = py_cli("--endpoint", endpoints[0], "--endpoint", endpoints[1], "infer", "--model", "tick_mlp",
                    "--random", 512, "--repeat", 10)
        self.assertEqual(py.rc, 0, py)

    def test_server_error_status_exits_1(self):
        nan = [0.5] * 512
        nan[37] = math.nan
        cases = [
            ("bad shape", ("--random", 511), "", f"STATUS_BAD_SHAPE: {TEXT_COUNT_511}"),
            ("rows > max_rows", ("--random", 4, "--rows", 9), "", f"STATUS_BAD_SHAPE: {TEXT_ROWS}"),
            ("NaN", ("--stdin",), " ".join(repr(v) for v in nan), f"STATUS_BAD_VALUE: {TEXT_NAN}"),
        ]
        for name, extra, stdin_text, text in cases:
            with self.subTest(case=name):
                args = self.e() + ("infer", "--model", "tick_mlp") + extra
                py = py_cli(*args, stdin_text=stdin_text)
                self.assertEqual((py.rc, py.out, py.err), (1, "", f"sigclient-py: {text}\n"))
                self.assert_same_as_c(py, *args, stdin_text=stdin_text)
        args = self.e() + ("infer", "--model", "nope", "--random", 512)
        py = py_cli(*args)
        self.assertEqual((py.rc, py.out, py.err), (1, "", f"sigclient-py: STATUS_UNKNOWN_MODEL: {TEXT_UNKNOWN}\n"))
        self.assert_same_as_c(py, *args)

    def test_bad_shape_hints_at_rows(self):
        """1024 values for a 512-input model and no --rows: the server's text, then the hint."""
        text = " ".join("0.5" for _ in range(1024))
        cases = [
            (("--stdin",), text, 1024, 'hint: 1024 values are 2 rows of model "tick_mlp"\'s 512 inputs: add --rows 2'),
            (("--random", 1536), "", 1536,
             'hint: --random gives N features per row, and model "tick_mlp" takes 512: --random 512 --rows 3'),
        ]
        for extra, stdin_text, n, hint in cases:
            with self.subTest(args=extra):
                args = self.e() + ("infer", "--model", "tick_mlp") + extra
                py = py_cli(*args, stdin_text=stdin_text)
                count = TEXT_COUNT_511.replace("got 511", f"got {n}")
                want = f"sigclient-py: STATUS_BAD_SHAPE: {count}\nsigclient-py: {hint}\n"
                self.assertEqual((py.rc, py.out, py.err), (1, "", want))
                c = c_cli(*args, stdin_text=stdin_text)
                if c is not None:
                    self.assertEqual((c.rc, c.err), (1, want.replace("sigclient-py", "sigclient")))
        py = py_cli(*self.e(), "infer", "--model", "tick_mlp", "--stdin", "--rows", 3, stdin_text=text)
        self.assertEqual(py.rc, 1, py)
        self.assertNotIn("hint", py.err)

    def test_input_errors_exit_2(self):
        nul = os.path.join(workdir, "nul.txt")
        with open(nul, "wb") as f:
            f.write(b"1 2\0 3\n")
        missing = os.path.join(workdir, "missing.txt")
        cases = [
            (("--file", missing), "", f"cannot open {missing}: No such file or directory"),
            (("--file", workdir), "", f"cannot read {workdir}: Is a directory"),
            (("--stdin",), "1 2\n3, x\n", "stdin:2: not a number: 'x'"),
            (("--stdin",), "1_000\n", "stdin:1: not a number: '1_000'"),
            (("--stdin",), "1e39", "stdin:1: out of float range: '1e39'"),
            (("--stdin",), "1 " + "2" * 200, "stdin:1: a token longer than 127 characters"),
            (("--stdin",), "# nothing\n\n", "stdin: no numbers"),
            (("--file", nul), "", f"{nul}: a NUL byte: expected text"),
            (("--random", 1 << 27, "--rows", 4), "", f"--random {1 << 27} x --rows 4 is too many features"),
        ]
        for extra, stdin_text, text in cases:
            with self.subTest(args=extra, stdin=stdin_text):
                args = self.e() + ("infer", "--model", "tick_mlp") + extra
                py = py_cli(*args, stdin_text=stdin_text)
                self.assertEqual((py.rc, py.out, py.err), (2, "", f"sigclient-py: {text}\n"))
                self.assert_same_as_c(py, *args, stdin_text=stdin_text)

    def test_usage_errors_exit_2(self):
        cases = [
            ((), "no command"),
            (("frobnicate",), "unknown command 'frobnicate'"),
            (("health", "extra"), "unexpected argument 'extra'"),
            (("infer", "--random", 512), "infer needs --model"),
            (("infer", "--model", "tick_mlp"), "infer needs one of --file, --stdin, --random"),
            (("infer", "--model", "tick_mlp", "--random", 512, "--stdin"), "infer needs one of --file, --stdin, --random"),
            (("infer", "--model", "tick_mlp", "--stdin", "--seed", 3), "--seed is only for --random"),
            (("infer", "--model", "tick_mlp", "--random", 0), "bad --random '0' (1 to 268435456 features per row)"),
            (("infer", "--model", "tick_mlp", "--random", 512, "--rows", 0), "bad --rows '0'"),
            (("infer", "--model", "tick_mlp", "--random", 512, "--rows", "-1"), "bad --rows '-1'"),
            (("infer", "--model", "tick_mlp", "--random", 512, "--repeat", "1x"), "bad --repeat '1x'"),
            (("infer", "--model", "tick_mlp", "--random", 512, "--deadline-us", 1 << 32), f"bad --deadline-us '{1 << 32}'"),
            (("--timeout", "0", "health"), "bad --timeout '0'"),
            (("health", "--model", "tick_mlp"), "options of infer given to 'health'"),
            (("models", "--rows", 2), "options of infer given to 'models'"),
            (("--bogus", "health"), "unknown option '--bogus'"),
            (("-x", "health"), "unknown option '-x'"),
            (("health", "--timeout"), "--timeout needs a value"),
            (("--retry", "17", "health"), "bad --retry '17' (0 to 16)"),
            (("--curve-server", "server.cert", "health"), "CURVE needs both --curve-server and --curve-client"),
            (("--endpoint", "foo://x", "health"), "cannot connect to 'foo://x': Protocol not supported"),
        ]
        for args, text in cases:
            with self.subTest(args=args):
                py = py_cli(*args)
                self.assertEqual(py.rc, 2, py)
                self.assertEqual(py.out, "")
                err = py.err.splitlines()
                self.assertEqual(err[0], f"sigclient-py: {text}")
                if not text.startswith("cannot connect"):
                    self.assertEqual(err[1], SYNOPSIS_LINE)
                self.assert_same_as_c(py, *args)

    def test_health_and_models(self):
        with open(os.path.join(ROOT, "VERSION")) as f:
            version = f.read().strip()
        py = py_cli(*self.e(), "health")
        self.assertEqual((py.rc, py.out, py.err), (0, f"live=1 ready=1 version={version}\n", ""))
        self.assert_same_as_c(py, *self.e(), "health")
        py = py_cli(*self.e(), "models")
        self.assertEqual((py.rc, py.out, py.err), (0, MODELS_TABLE, ""))
        self.assert_same_as_c(py, *self.e(), "models")
        py = py_cli("--endpoint", endpoints[1], "--timeout=2000", "models")     # --name=value, as getopt_long
        self.assertEqual((py.rc, py.out), (0, MODELS_TABLE))

    def test_timeout_exits_3(self):
        dead = f"tcp://127.0.0.1:{free_port()}"
        for args in (("health",), ("models",), ("infer", "--model", "tick_mlp", "--random", 512)):
            with self.subTest(command=args[0]):
                t0 = time.monotonic()
                py = py_cli("--endpoint", dead, "--timeout", 200, *args)
                self.assertLess(time.monotonic() - t0, 2)
                self.assertEqual((py.rc, py.out), (3, ""), py)
                self.assertTrue(py.err.startswith("sigclient-py: timed out after 200 ms"), py)
                self.assertIn(dead, py.err)
                c = c_cli("--endpoint", dead, "--timeout", 200, *args)
                if c is not None:
                    self.assertEqual(c.rc, 3, c)

    def test_help_and_version(self):
        with open(os.path.join(ROOT, "VERSION")) as f:
            version = f.read().strip()
        for flag in ("--help", "-h"):
            py = py_cli(flag)
            self.assertEqual(py.rc, 0)
            self.assertTrue(py.out.startswith(SYNOPSIS_LINE + "\n"), py)
            self.assertIn("exit codes: 0 ok, 1", py.out)
        py = py_cli("--version")
        self.assertEqual(py.rc, 0)
        self.assertTrue(py.out.startswith(f"sigclient-py {version} (libzmq "), py)
        c = c_cli("--version")
        if c is not None:
            self.assertEqual(c.rc, 0, c)
            self.assertTrue(c.out.startswith(f"sigclient {version} (libzmq "), c)

    def test_python_dash_m(self):
        """`python -m sigclient` and `python -m sigclient.cli` run the same command as a process."""
        for module in ("sigclient", "sigclient.cli"):
            with self.subTest(module=module):
                p = subprocess.run([sys.executable, "-m", module, "--endpoint", endpoints[1], "infer", "--model",
                                    "tick_mlp", "--random", "511"], capture_output=True, text=True, timeout=60)
                self.assertEqual((p.returncode, p.stdout, p.stderr),
                                 (1, "", f"sigclient-py: STATUS_BAD_SHAPE: {TEXT_COUNT_511}\n"))


class Test9Shutdown(unittest.TestCase):
    """Last: the server survived everything above, and SIGTERM stops it cleanly (exit code 0)."""

    def test_sigterm_exits_0(self):
        self.assertIsNone(server.poll(), "sigserve died during the tests:\n" + server_log_text())
        server.send_signal(signal.SIGTERM)
        try:
            rc = server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail("sigserve still running 10 s after SIGTERM")
        self.assertEqual(rc, 0, server_log_text())


# ---- dns:// endpoints and retries ----

class FakeServer:
    """A ROUTER thread on tcp://ADDRESS:PORT that answers infer requests OK with the outputs TAG (which
    server answered), stream_id and step, or STATUS_UNAVAILABLE, or not at all (mode "ok",
    "unavailable", "silent"), or STATUS_BAD_VALUE when the first feature is NaN; health always; the
    model list with one LSTM model "seq" (window 4, step_size 3). Counts the infer requests it
    received and keeps them in ``seen`` (connection identity, the InferRequest) in arrival order."""

    def __init__(self, address, port, tag, mode="ok"):
        self.tag, self.mode, self.requests = tag, mode, 0
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


class TestADnsRetry(unittest.TestCase):
    """dns://NAME:PORT (every address, followed as it changes) and opt-in retries, as in the C client
    (tests/test_dns.c): two fake servers on one port of 127.0.0.1 and 127.0.0.2, and the real server
    through "localhost"."""

    def setUp(self):
        self.port = free_port()
        self.fakes = []

    def tearDown(self):
        for f in self.fakes:
            f.close()

    def fake(self, address, tag, mode="ok"):
        f = FakeServer(address, self.port, tag, mode)
        self.fakes.append(f)
        return f

    def client(self, fleet, timeout_ms=2000, **kw):
        return SigClient(f"dns://fleet:{self.port}", timeout_ms=timeout_ms, resolver=fleet, **kw)

    def test_malformed_endpoints(self):
        for bad in ("dns://", "dns://fleet", "dns://:5555", "dns://fleet:0", "dns://fleet:65536", "dns://fleet:5a",
                    "dns://a/b:5555"):
            with self.assertRaises(ValueError, msg=bad):
                SigClient(bad)
            with self.assertRaises(ValueError, msg=bad):
                sigclient.resolve_endpoint(bad)
        with self.assertRaises(ValueError):
            SigClient("dns://fleet:1", retries=17)

    def test_resolve_endpoint(self):
        fleet = Fleet("10.0.0.9", "::1", "::1")
        self.assertEqual(sigclient.resolve_endpoint("dns://fleet:7000", fleet), ["tcp://10.0.0.9:7000", "tcp://[::1]:7000"])
        self.assertEqual(sigclient.resolve_endpoint("tcp://10.1.2.3:9"), ["tcp://10.1.2.3:9"])
        self.assertIn("tcp://127.0.0.1:7000", sigclient.resolve_endpoint("dns://localhost:7000"))
        fleet.down = True
        with self.assertRaisesRegex(sigclient.TransportError, "^dns://fleet:7000: test resolver: fleet is down$"):
            sigclient.resolve_endpoint("dns://fleet:7000", fleet)
        with self.assertRaisesRegex(sigclient.TransportError, "^dns://no-such-host.invalid:7000: "):
            sigclient.resolve_endpoint("dns://no-such-host.invalid:7000")

    def test_every_address_takes_requests(self):
        self.fake("127.0.0.1", 1.0)
        self.fake("127.0.0.2", 2.0)
        with self.client(Fleet("127.0.0.1", "127.0.0.2")) as c:
            self.assertEqual(c.peers, [f"tcp://127.0.0.1:{self.port}", f"tcp://127.0.0.2:{self.port}"])
            c.health()
            time.sleep(0.1)     # both connections up: ZMQ_IMMEDIATE sends only to those
            for _ in range(40):
                c.send_infer("m", [0.0])
            tags = [c.recv_infer().outputs[0] for _ in range(40)]
            self.assertEqual((tags.count(1.0), tags.count(2.0)), (20, 20))

    def test_follows_the_name(self):
        a, b = self.fake("127.0.0.1", 1.0), self.fake("127.0.0.2", 2.0)
        fleet = Fleet("127.0.0.1")
        # one retry: a request sent as its peer is disconnected may be dropped with the peer's pipe
        with self.client(fleet, timeout_ms=300, retries=1, resolve_interval_ms=100) as c:
            self.assertEqual([c.infer("m", [0.0]).outputs[0] for _ in range(10)], [1.0] * 10)
            fleet.addresses = ["127.0.0.2"]
            # the client re-resolves every 100 ms; then its only peer is the new address, and the old
            # pipe (whose requests the short timeout is for) is gone: a slow machine may take longer
            # than 300 ms to connect (it did once, beside an image build), so wait for the switch and
            # give the new connection a longer timeout
            for _ in range(100):
                if c.peers == [f"tcp://127.0.0.2:{self.port}"]:
                    break
                time.sleep(0.05)
            c.timeout_ms = 5000
            self.assertEqual([c.infer("m", [0.0]).outputs[0] for _ in range(10)], [2.0] * 10)
            self.assertEqual(c.peers, [f"tcp://127.0.0.2:{self.port}"])
            self.assertLessEqual(a.requests, 11)
            fleet.down = True       # a failed resolution keeps what the client has
            time.sleep(0.15)
            self.assertEqual(c.infer("m", [0.0]).outputs[0], 2.0)
            self.assertEqual(c.peers, [f"tcp://127.0.0.2:{self.port}"])

    def test_no_address_fails_fast_then_recovers(self):
        self.fake("127.0.0.1", 1.0)
        fleet = Fleet()
        fleet.down = True
        with self.client(fleet, timeout_ms=5000) as c:
            t0 = time.monotonic()
            with self.assertRaisesRegex(sigclient.TransportError,
                                        rf"^no address to send to: dns://fleet:{self.port} \[no address: "
                                        r"test resolver: fleet is down\]$"):
                c.infer("m", [0.0])
            self.assertLess(time.monotonic() - t0, 1.0)
            fleet.down, fleet.addresses = False, ["127.0.0.1"]
            time.sleep(0.25)
            self.assertEqual(c.infer("m", [0.0]).outputs[0], 1.0)

    def test_unavailable_is_retried(self):
        a = self.fake("127.0.0.1", 1.0, "unavailable")
        self.fake("127.0.0.2", 2.0)
        with self.client(Fleet("127.0.0.1", "127.0.0.2")) as c:
            c.health()
            time.sleep(0.1)
            failed = 0
            for _ in range(10):
                try:
                    c.infer("m", [0.0])
                except Unavailable as e:
                    self.assertEqual(str(e), "server replied STATUS_UNAVAILABLE: draining: this server is stopping")
                    failed += 1
            self.assertEqual(failed, 5)
            c.retries = 1
            results = [c.infer("m", [0.0]) for _ in range(10)]
            self.assertEqual([r.outputs[0] for r in results], [2.0] * 10)
            retried = sum(r.attempts == 2 for r in results)
            self.assertGreaterEqual(retried, 1)
            self.assertEqual(a.requests, 5 + retried)
            a.mode = self.fakes[1].mode = "unavailable"
            c.retries = 3
            with self.assertRaises(Unavailable) as cm:
                c.infer("m", [0.0])
            self.assertTrue(str(cm.exception).endswith("(after 4 attempts)"), str(cm.exception))
            self.assertEqual(cm.exception.result.attempts, 4)

    def test_timeout_is_retried(self):
        self.fake("127.0.0.1", 1.0, "silent")
        self.fake("127.0.0.2", 2.0)
        with self.client(Fleet("127.0.0.1", "127.0.0.2"), timeout_ms=300, retries=2) as c:
            c.health()
            time.sleep(0.1)
            for _ in range(4):
                t0 = time.monotonic()
                r = c.infer("m", [0.0])
                self.assertEqual(r.outputs[0], 2.0)
                if r.attempts == 2:
                    self.assertGreaterEqual(time.monotonic() - t0, 0.29)
            for f in self.fakes:
                f.mode = "silent"
            c.retries = 1
            with self.assertRaisesRegex(Timeout, r"\(after 2 attempts\)$"):
                c.infer("m", [0.0])

    def test_localhost_reaches_the_real_server(self):
        port = endpoints[0].rsplit(":", 1)[1]
        with SigClient(f"dns://localhost:{port}", timeout_ms=5000) as c:
            self.assertIn(f"tcp://127.0.0.1:{port}", c.peers)
            self.assertTrue(c.health().ready)
            f = random_features(512)
            pool = Pool()
            for _ in range(4):
                pool.add(c.infer("tick_mlp", f).outputs, forward(tick, f, 1))
            pool.check(self)
        r = py_cli("--endpoint", f"dns://localhost:{port}", "health")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(r.out.startswith("live=1 ready=1"), r)


# ---- LSTM streams ----

def wait_for(predicate, cap_s=10.0):
    """Polls PREDICATE every millisecond until it holds or CAP_S passes; its last value."""
    deadline = time.monotonic() + cap_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.001)
    return predicate()


class TestBStreamsWire(unittest.TestCase):
    """What the client sends for a stream, read on fake servers' ROUTER sockets: stream_id and step
    (field 7) numbered 1, 2, 3...; one endpoint and one connection per stream while plain requests
    alternate; routed as the C client routes; never retried; failing, not moving, when its address
    vanishes."""

    def setUp(self):
        self.fakes = []

    def tearDown(self):
        for f in self.fakes:
            f.close()

    def fake(self, tag, address="127.0.0.1", port=None, mode="ok"):
        port = port or free_port()
        f = FakeServer(address, port, tag, mode)
        f.endpoint = f"tcp://{address}:{port}"
        self.fakes.append(f)
        return f

    def test_steps_are_numbered_from_1(self):
        f = self.fake(1.0)
        with SigClient(f.endpoint) as c:
            s = c.stream("seq", 7)
            for k in (1, 2, 3):
                self.assertEqual(s.next_step, k)
                self.assertEqual(s.step([k, 0.5, 0.25]).outputs, [1.0, 7.0, float(k)])
            with self.assertRaises(BadValue):        # refused: not applied, the same number goes again
                s.step([math.nan, 0, 0])
            self.assertEqual(s.next_step, 4)
            self.assertEqual(s.step([4, 0, 0]).outputs, [1.0, 7.0, 4.0])
            self.assertEqual(c.infer("seq", [9, 9, 9], stream_id=9).outputs, [1.0, 9.0, 0.0])   # unnumbered
            for bad in (dict(stream_id=0, step=1), dict(step=2), dict(stream_id=-1), dict(stream_id=1 << 64)):
                with self.subTest(bad=bad), self.assertRaises(ValueError):
                    c.infer("seq", [1, 2, 3], **bad)
            with self.assertRaises(ValueError):
                c.stream("seq", 0)
        got = [(r.stream_id, r.step, r.model, len(r.features), r.request_id) for _, r in f.seen]
        self.assertEqual(got, [(7, 1, "seq", 3, 1), (7, 2, "seq", 3, 2), (7, 3, "seq", 3, 3), (7, 4, "seq", 3, 4),
                               (7, 4, "seq", 3, 5), (9, 0, "seq", 3, 6)])
        self.assertTrue(math.isnan(f.seen[3][1].features[0]))

    def test_a_stream_sticks_while_round_robin_alternates(self):
        a, b = self.fake(1.0), self.fake(2.0)
        with SigClient([a.endpoint, b.endpoint]) as c:
            streams = [c.stream("seq", 100 + k) for k in range(8)]
            for step in range(1, 5):
                for s in streams:
                    s.step([step, 0, 0])
                for _ in range(5):
                    c.infer("m", [1, 2, 3])
            self.assertEqual([sum(r.stream_id == 0 for _, r in f.seen) for f in (a, b)], [10, 10])
            used = set()
            for s in streams:
                where = [(i, ident, r.step) for i, f in enumerate((a, b)) for ident, r in f.seen
                         if r.stream_id == s.stream_id]
                self.assertEqual(len({(i, ident) for i, ident, _ in where}), 1, f"stream {s.stream_id}: {where}")
                self.assertEqual([step for _, _, step in where], [1, 2, 3, 4])
                at = where[0][0]
                used.add(at)
                self.assertEqual(s.endpoint, (a, b)[at].endpoint)
                self.assertEqual(at, sigclient.client._mix64(s.stream_id) % 2)
            self.assertEqual(used, {0, 1})

    def test_the_c_client_routes_alike(self):
        """The same endpoint list and stream id reach the same server from sigclient (C) and Python."""
        a, b = self.fake(1.0), self.fake(2.0)
        if c_cli("--version") is None:
            self.skipTest("the C sigclient is not built")
        with SigClient([a.endpoint, b.endpoint]) as c:
            want = {sid: c.stream_endpoint(sid) for sid in range(200, 206)}
        for sid in want:
            r = c_cli("--endpoint", a.endpoint, "--endpoint", b.endpoint, "infer", "--model", "seq", "--stream", sid,
                      "--random", 3)
            self.assertEqual(r.rc, 0, r)
            self.assertEqual(r.out.split()[1:], [str(sid), "1"], r)
        for sid, endpoint in want.items():
            f = a if endpoint == a.endpoint else b
            self.assertTrue(wait_for(lambda: any(r.stream_id == sid for _, r in f.seen)), f"stream {sid} not at {endpoint}")

    def test_stream_steps_are_never_retried(self):
        f = self.fake(1.0, mode="silent")
        with SigClient(f.endpoint, timeout_ms=300, retries=3) as c:
            s = c.stream("seq", 5)
            with self.assertRaisesRegex(Timeout, r"^timed out after 300 ms waiting for a reply from tcp://.* "
                                                 r"\(stream 5, step 1: stream steps are never retried; it may have "
                                                 r"been applied\)$"):
                s.step([1, 2, 3])
            self.assertEqual(s.next_step, 1)
            f.mode = "ok"
            self.assertEqual(s.step([1, 2, 3]).outputs, [1.0, 5.0, 1.0])
            # answered on the same connection after the first: every request sent before is read
            self.assertEqual([(r.stream_id, r.step) for _, r in f.seen], [(5, 1), (5, 1)])
            f.mode = "silent"
            with self.assertRaisesRegex(Timeout, r"\(after 4 attempts\)$"):
                c.infer("seq", [1, 2, 3])
            self.assertTrue(wait_for(lambda: len(f.seen) >= 6))
            self.assertEqual(len(f.seen), 6)

    def test_a_vanished_address_fails_its_streams(self):
        port = free_port()
        a, b = self.fake(1.0, "127.0.0.1", port), self.fake(2.0, "127.0.0.2", port)
        fleet = Fleet("127.0.0.1", "127.0.0.2")
        with SigClient(f"dns://fleet:{port}", resolver=fleet, resolve_interval_ms=1) as c:
            on = {}
            for sid in range(1, 65):
                on.setdefault(c.stream_endpoint(sid), sid)
            self.assertEqual(sorted(on), [a.endpoint, b.endpoint])
            sa, sb = c.stream("seq", on[a.endpoint]), c.stream("seq", on[b.endpoint])
            sa.step([1, 0, 0])
            sb.step([1, 0, 0])
            fleet.addresses = ["127.0.0.2"]

            def gone():
                try:
                    sa.step([2, 0, 0])
                    return False
                except StreamGone as e:
                    self.error = str(e)
                    return True
            self.assertTrue(wait_for(gone))
            self.assertIn(f"stream {sa.stream_id}: its server {a.endpoint} is no longer listed", self.error)
            at_a = len(a.seen)
            self.assertEqual(sb.step([2, 0, 0]).outputs[0], 2.0)
            c.forget_stream(sa.stream_id)
            sa.next_step = 1
            self.assertEqual(sa.step([3, 0, 0]).outputs, [2.0, float(sa.stream_id), 1.0])
            self.assertEqual(sa.endpoint, b.endpoint)
            self.assertEqual(len(a.seen), at_a)


LSTM_WINDOW, LSTM_STEP, LSTM_HIDDEN, LSTM_OUT = 5, 4, 6, 2


class TestCStreamsServer(unittest.TestCase):
    """An LSTM model served by a sigserve of this class's own: streams through SigClient, sigclient-py
    and the C sigclient answer what a float64 LSTM in pure Python (tests/python/reference.py) gives
    for the stream so far, within 1e-5."""

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

    def test_model_info(self):
        with SigClient(self.endpoint) as c:
            (m,) = c.list_models()
        self.assertEqual((m.name, m.type, m.window, m.step_size, m.input_size, m.output_size),
                         ("seq", "lstm", LSTM_WINDOW, LSTM_STEP, LSTM_WINDOW * LSTM_STEP, LSTM_OUT))

    def test_streams_match_the_reference(self):
        """Two Streams and one numbered by hand, 2.5 windows each, interleaved."""
        n = 5 * LSTM_WINDOW // 2
        steps = [self.steps(n) for _ in range(3)]
        pool = Pool()
        with SigClient(self.endpoint) as c:
            streams = [c.stream("seq", 51), c.stream("seq", 52)]
            for t in range(n):
                for k in range(3):
                    r = streams[k].step(steps[k][t]) if k < 2 else c.infer("seq", steps[k][t], stream_id=53, step=t + 1)
                    self.assertEqual((r.rows, len(r.outputs)), (1, LSTM_OUT))
                    pool.add(r.outputs, lstm_stream(self.model, steps[k], t + 1))
            pool.check(self)
            self.assertEqual(streams[0].next_step, n + 1)
            with self.assertRaisesRegex(BadShape, r'expected one step of 4 values for model "seq" \(stream_id 51\)'):
                streams[0].step([0.0] * (LSTM_STEP + 1))
            self.assertEqual(streams[0].next_step, n + 1)

    def test_cli_streams_match_the_reference(self):
        n = 9
        steps = self.steps(n)
        text = "# 9 steps\n" + "".join(" ".join(f"{v:.9g}" for v in step) + "\n" for step in steps)
        runs = [("sigclient-py", py_cli("--endpoint", self.endpoint, "infer", "--model", "seq", "--stream", 61,
                                        "--stdin", stdin_text=text))]
        c = c_cli("--endpoint", self.endpoint, "infer", "--model", "seq", "--stream", 62, "--step", 1, "--stdin",
                  stdin_text=text)
        if c is not None:
            runs.append(("sigclient", c))
        for name, run in runs:
            with self.subTest(cli=name):
                self.assertEqual(run.rc, 0, run)
                lines = run.out.splitlines()
                self.assertEqual(len(lines), n, run)
                pool = Pool()
                for t, line in enumerate(lines):
                    pool.add([float(v) for v in line.split()], lstm_stream(self.model, steps, t + 1))
                pool.check(self)
                self.assertEqual(keys(run.err.splitlines()[0]), TIMING_KEYS + ["stream_id", "step"])
                self.assertEqual(fields(run.err.splitlines()[0])["step"], str(n))
        if c is not None:
            self.assertEqual(runs[0][1].out, runs[1][1].out)   # the same steps, the same arithmetic
        # --random N --repeat K: K steps drawn from the seed
        py = py_cli("--endpoint", self.endpoint, "infer", "--model", "seq", "--stream", 63, "--random", LSTM_STEP,
                    "--repeat", 4, "--seed", 3)
        self.assertEqual(py.rc, 0, py)
        gen = random.Random(3)
        steps = [[gen.uniform(-1.0, 1.0) for _ in range(LSTM_STEP)] for _ in range(4)]
        pool = Pool()
        for t, line in enumerate(py.out.splitlines()):
            pool.add([float(v) for v in line.split()], lstm_stream(self.model, [f32(s) for s in steps], t + 1))
        pool.check(self)
        self.assertIn("repeat=4 warmup=0 round_trip_us p50=", py.err)

    def test_cli_errors_and_hint(self):
        e = ("--endpoint", self.endpoint)
        cases = [
            ((*e, "infer", "--model", "seq", "--random", LSTM_STEP), 1,
             f'STATUS_BAD_SHAPE: features: expected rows x window x step size = 1 x {LSTM_WINDOW} x {LSTM_STEP} = '
             f'{LSTM_WINDOW * LSTM_STEP} values for model "seq" (whole windows; one step goes with a stream_id), got '
             f'{LSTM_STEP}\n'
             f'sigclient-py: hint: {LSTM_STEP} values are one step of LSTM model "seq" (window {LSTM_WINDOW} x '
             f'step_size {LSTM_STEP}): add --stream ID to send them as a step of stream ID'),
            ((*e, "infer", "--model", "seq", "--stream", 70, "--stdin"), 2,
             'stdin: 6 values are not a whole number of steps of model "seq" (step_size 4): 1 steps and 2 values over'),
            ((*e, "infer", "--model", "seq", "--step", 2, "--random", 4), 2, "--step is only for --stream"),
            ((*e, "infer", "--model", "seq", "--stream", 3, "--rows", 2, "--random", 4), 2,
             "--rows: a stream step is one row; --stream takes no --rows"),
            ((*e, "infer", "--model", "seq", "--stream", 3, "--repeat", 2, "--stdin"), 2,
             "--repeat and --warmup with --stream are for --random: the steps of --file or --stdin are the file's"),
            ((*e, "infer", "--model", "seq", "--stream", 0, "--random", 4), 2,
             "bad --stream '0' (a stream id from 1 to 18446744073709551615)"),
        ]
        for args, rc, text in cases:
            with self.subTest(args=args):
                py = py_cli(*args, stdin_text="1 2 3 4 5 6")
                self.assertEqual((py.rc, py.out), (rc, ""), py)
                self.assertEqual(py.err.splitlines()[0], "sigclient-py: " + text.splitlines()[0])
                if rc == 1:
                    self.assertEqual(py.err, "sigclient-py: " + text + "\n")
                c = c_cli(*args, stdin_text="1 2 3 4 5 6")
                if c is not None:
                    self.assertEqual((c.rc, c.err.splitlines()[0]), (rc, py.err.splitlines()[0].replace("-py", "")))
                    if rc == 1:
                        self.assertEqual(c.err, py.err.replace("sigclient-py", "sigclient"))
        py = py_cli(*e, "models")
        self.assertEqual(py.rc, 0, py)
        self.assertTrue(py.out.splitlines()[1].endswith(f"yes        lstm       {LSTM_WINDOW}          {LSTM_STEP}"), py)
        self.assert_same_models(py)

    def assert_same_models(self, py):
        c = c_cli("--endpoint", self.endpoint, "models")
        if c is not None:
            self.assertEqual(c.out, py.out)


def main():
    try:
        # In this order: the last one stops the server.
        return run_in_order((Test0Package, Test1Infer, Test2Errors, Test3Pipelined, Test4HealthModels, Test5Timeouts,
                             Test6Deadline, Test7Lifetime, Test8Cli, TestADnsRetry, TestBStreamsWire, TestCStreamsServer,
                             Test9Shutdown))
    finally:
        tearDownModule()    # also when interrupted; unittest calls it too, and twice is harmless


if __name__ == "__main__":
    sys.exit(main())
