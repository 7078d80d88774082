#!/usr/bin/python3
"""The wire protocol from an independent client: pyzmq DEALER and REQ sockets, the protobuf code
protoc generates for Python (build/gen/py/signal_pb2.py), and a float64 reference computed in pure
Python from the safetensors file. Nothing here shares code with the C side, so a fault that the C
client and server would agree on (framing, field numbers, packing, error texts) shows up here.

Every test runs against a server of each transport (server.transport "zmtp", then "libzmq").

Run from the repository root (tests/run.sh does):
    BUILD=build PYTHONPATH=build/gen/py:clients/python /usr/bin/python3 tests/python/test_wire.py
Uses only the standard library, pyzmq and protobuf. The last line printed is "N passed, N failed".

Outputs are compared with the norm-wise relative error over several outputs at once: the demo model
has a single output per row, and one output near zero is ill-conditioned in float32 (about 1% of
random inputs would miss a 1e-5 bound on their own); the norm over 8 outputs is not.
"""
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import zmq

import signal_pb2 as pb
from reference import f32, forward, free_port, load_model, rel_error, run_classes, summary

BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIGSERVE = os.path.join(BUILD, "sigserve")
SIGCLIENT = os.path.join(BUILD, "sigclient")
WEIGHTS = os.path.join(BUILD, "models", "tick_mlp.safetensors")
MAX_ROWS = 8
TOLERANCE = 1e-5
SEED = int(time.time() * 1000) % (1 << 31)
TRANSPORT = "zmtp"      # the server's, set by main() for each run

# The exact texts tests/test_integration.c asserts (with this config's single model in "served").
JUNK = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x02])
NO_BODY = bytes([0x78, 0x01])           # field 15, varint 1: unknown to Request, so no body
TEXT_UNDECODABLE = "payload: 7 bytes do not decode as a sigserve.v1.Request"
TEXT_EMPTY = "payload: empty; expected a serialized sigserve.v1.Request"
TEXT_NO_BODY = "body: not set; expected one of infer, health, list_models"
TEXT_UNKNOWN = 'model: "nope" is not served here (served: tick_mlp)'
TEXT_COUNT_511 = 'features: expected rows x input size = 1 x 512 = 512 values for model "tick_mlp", got 511'
TEXT_COUNT_0 = 'features: expected rows x input size = 1 x 512 = 512 values for model "tick_mlp", got 0'
TEXT_NOT_DIVIDING = ('features: 1000 values do not divide into rows=3 rows of 512 '
                     '(model "tick_mlp" takes 512 features per row)')
TEXT_COUNT_1026 = 'features: expected rows x input size = 3 x 512 = 1536 values for model "tick_mlp", got 1026'
TEXT_ROWS = 'rows: expected 1 to 8 for model "tick_mlp", got 9'
TEXT_NAN = "features[37] (row 0, column 37) is NaN; every feature must be finite"
TEXT_INF = "features[515] (row 1, column 3) is Inf; every feature must be finite"

S = pb.Status  # S.Value("STATUS_OK"), S.Name(3)
OK = S.Value("STATUS_OK")
BAD_REQUEST = S.Value("STATUS_BAD_REQUEST")
UNKNOWN_MODEL = S.Value("STATUS_UNKNOWN_MODEL")
BAD_SHAPE = S.Value("STATUS_BAD_SHAPE")
BAD_VALUE = S.Value("STATUS_BAD_VALUE")

rng = random.Random(SEED)
server = None           # subprocess.Popen
server_log = None
endpoint = None
workdir = None
ctx = None
model = None            # [(weight rows, bias, activation)]


# ---- the float64 reference, from the safetensors file ----

def random_features(n):
    return f32([rng.uniform(-2.0, 2.0) for _ in range(n)])


# ---- the wire ----

def new_socket(kind, timeout_ms=5000):
    s = ctx.socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, timeout_ms)
    s.setsockopt(zmq.SNDTIMEO, timeout_ms)
    s.connect(endpoint)
    return s


def infer_payload(model_name, features, rows=0, request_id=99, deadline_us=0):
    req = pb.Request()
    req.infer.request_id = request_id
    req.infer.model = model_name
    req.infer.features.extend(features)
    req.infer.rows = rows
    req.infer.deadline_us = deadline_us
    return req.SerializeToString()


def health_payload():
    req = pb.Request()
    req.health.SetInParent()
    return req.SerializeToString()


def list_models_payload():
    req = pb.Request()
    req.list_models.SetInParent()
    return req.SerializeToString()


def recv_reply(sock):
    frames = sock.recv_multipart()
    assert len(frames) == 1, f"a reply of {len(frames)} frames"
    reply = pb.Reply()
    reply.ParseFromString(frames[0])
    return reply


def roundtrip(payload, kind=zmq.DEALER):
    """One request on a fresh DEALER (one frame) or REQ (delimiter + frame) socket."""
    sock = new_socket(kind)
    try:
        sock.send(payload)
        return recv_reply(sock)
    finally:
        sock.close()


def health_ready(timeout_ms=200):
    sock = new_socket(zmq.DEALER, timeout_ms)
    try:
        sock.send(health_payload())
        reply = recv_reply(sock)
        return reply.WhichOneof("body") == "health" and reply.health.ready
    except zmq.Again:
        return False
    finally:
        sock.close()


def server_log_text():
    try:
        with open(server_log) as f:
            return f.read()
    except OSError:
        return ""


def setUpModule():
    global server, server_log, endpoint, workdir, ctx, model
    print(f"test_wire: seed {SEED}, server.transport {TRANSPORT}", flush=True)
    layers = [("0.weight", "0.bias", "relu"), ("2.weight", "2.bias", "relu"), ("4.weight", "4.bias", "none")]
    model = load_model(WEIGHTS, layers)
    workdir = tempfile.mkdtemp(prefix="sigserve-wire-")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    config = {
        "server": {"endpoints": [endpoint], "max_message_bytes": 65536, "log_level": "warn", "transport": TRANSPORT},
        "models": [{
            "name": "tick_mlp", "backend": "cpu", "max_rows": MAX_ROWS, "weights": WEIGHTS,
            "layers": [{"weight": w, "bias": b, "activation": a} for w, b, a in layers],
        }],
    }
    config_path = os.path.join(workdir, "server.json")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    server_log = os.path.join(workdir, "sigserve.log")
    with open(server_log, "w") as log:
        server = subprocess.Popen([SIGSERVE, "--config", config_path], stdout=log, stderr=subprocess.STDOUT)
    ctx = zmq.Context()
    deadline = time.monotonic() + 20
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"sigserve exited with {server.returncode}:\n{server_log_text()}")
        if health_ready():
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"sigserve not ready after 20 s:\n{server_log_text()}")
        time.sleep(0.05)


def tearDownModule():
    if server is not None and server.poll() is None:
        server.kill()
        server.wait()
    if ctx is not None:
        ctx.destroy(linger=0)
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)


def run_cli(*args, stdin_text=None):
    return subprocess.run([SIGCLIENT, "--endpoint", endpoint, *args], input=stdin_text, capture_output=True,
                          text=True, timeout=30)


def parse_cli_outputs(stdout):
    return [[float(v) for v in line.split()] for line in stdout.splitlines() if line.strip()]


def features_text(features, per_line=8):
    return "\n".join(" ".join(repr(v) for v in features[i:i + per_line])
                     for i in range(0, len(features), per_line)) + "\n"


class Test1Wire(unittest.TestCase):
    """Infer, health and list_models over DEALER and REQ; every error status with its exact text."""

    def check_ok(self, rep, request_id, rows):
        self.assertEqual(rep.status, OK, rep.error)
        self.assertEqual(rep.error, "")
        self.assertEqual(rep.request_id, request_id)
        self.assertEqual(rep.rows, rows)
        self.assertEqual(rep.model_version, "1")
        self.assertGreater(rep.compute_ns, 0)
        self.assertGreaterEqual(rep.server_ns, rep.compute_ns)
        self.assertEqual(len(rep.outputs), rows)

    def infer_and_compare(self, kind, requests, rows):
        got, ref = [], []
        sock = new_socket(kind)
        try:
            for i in range(requests):
                features = random_features(max(rows, 1) * 512)
                sock.send(infer_payload("tick_mlp", features, rows=rows, request_id=1000 + i))
                reply = recv_reply(sock)
                self.assertEqual(reply.WhichOneof("body"), "infer")
                self.check_ok(reply.infer, 1000 + i, max(rows, 1))
                got.extend(reply.infer.outputs)
                ref.extend(forward(model, features, max(rows, 1)))
        finally:
            sock.close()
        e = rel_error(got, ref)
        self.assertLessEqual(e, TOLERANCE, f"relative error {e:.3g} over {len(got)} outputs (seed {SEED})")

    def test_infer_dealer_matches_reference(self):
        self.infer_and_compare(zmq.DEALER, 8, 1)

    def test_infer_req_matches_reference(self):
        self.infer_and_compare(zmq.REQ, 8, 1)

    def test_rows_0_means_1(self):
        self.infer_and_compare(zmq.DEALER, 4, 0)

    def test_rows_4(self):
        self.infer_and_compare(zmq.DEALER, 2, 4)
        self.infer_and_compare(zmq.REQ, 2, 4)

    def test_pipelined_dealer_matched_by_request_id(self):
        sock = new_socket(zmq.DEALER)
        try:
            sent = {}
            for i in range(64):
                features = random_features(512)
                sent[7000 + i] = features
                sock.send(infer_payload("tick_mlp", features, request_id=7000 + i))
            got, ref = [], []
            for _ in range(64):
                rep = recv_reply(sock).infer
                self.assertEqual(rep.status, OK, rep.error)
                self.assertIn(rep.request_id, sent)
                got.extend(rep.outputs)
                ref.extend(forward(model, sent.pop(rep.request_id), 1))
            self.assertEqual(sent, {})
            self.assertLessEqual(rel_error(got, ref), TOLERANCE)
        finally:
            sock.close()

    def test_health(self):
        with open(os.path.join(ROOT, "VERSION")) as f:
            version = f.read().strip()
        for kind in (zmq.DEALER, zmq.REQ):
            reply = roundtrip(health_payload(), kind)
            self.assertEqual(reply.WhichOneof("body"), "health")
            self.assertTrue(reply.health.live)
            self.assertTrue(reply.health.ready)
            self.assertEqual(reply.health.version, version)

    def test_list_models(self):
        reply = roundtrip(list_models_payload())
        self.assertEqual(reply.WhichOneof("body"), "list_models")
        self.assertEqual(len(reply.list_models.models), 1)
        m = reply.list_models.models[0]
        self.assertEqual((m.name, m.version, m.backend, m.kernel), ("tick_mlp", "1", "cpu", "loop"))
        self.assertEqual((m.input_size, m.output_size, m.max_rows, m.available), (512, 1, MAX_ROWS, True))

    def expect_error(self, payload, status, text, request_id, kind=zmq.DEALER):
        reply = roundtrip(payload, kind)
        self.assertEqual(reply.WhichOneof("body"), "infer")
        rep = reply.infer
        self.assertEqual(S.Name(rep.status), S.Name(status), rep.error)
        self.assertEqual(rep.error, text)
        self.assertEqual(rep.request_id, request_id)
        self.assertEqual(len(rep.outputs), 0)

    def test_error_statuses_and_texts(self):
        f = random_features(8 * 512)
        nan = list(f[:512])
        nan[37] = math.nan
        inf = list(f[:1024])
        inf[37] = 0.25
        inf[512 + 3] = -math.inf
        cases = [
            ("undecodable payload", JUNK, BAD_REQUEST, TEXT_UNDECODABLE, 0),
            ("empty payload", b"", BAD_REQUEST, TEXT_EMPTY, 0),
            ("no body", NO_BODY, BAD_REQUEST, TEXT_NO_BODY, 0),
            ("unknown model", infer_payload("nope", f[:512], 1), UNKNOWN_MODEL, TEXT_UNKNOWN, 99),
            ("wrong feature count", infer_payload("tick_mlp", f[:511], 1), BAD_SHAPE, TEXT_COUNT_511, 99),
            ("no features", infer_payload("tick_mlp", [], 1), BAD_SHAPE, TEXT_COUNT_0, 99),
            ("rows not dividing", infer_payload("tick_mlp", f[:1000], 3), BAD_SHAPE, TEXT_NOT_DIVIDING, 99),
            ("rows x size mismatch", infer_payload("tick_mlp", f[:1026], 3), BAD_SHAPE, TEXT_COUNT_1026, 99),
            ("rows > max_rows", infer_payload("tick_mlp", f[:36], 9), BAD_SHAPE, TEXT_ROWS, 99),
            ("NaN", infer_payload("tick_mlp", nan, 1), BAD_VALUE, TEXT_NAN, 99),
            ("Inf", infer_payload("tick_mlp", inf, 2), BAD_VALUE, TEXT_INF, 99),
        ]
        for kind, kind_name in ((zmq.DEALER, "DEALER"), (zmq.REQ, "REQ")):
            for name, payload, status, text, request_id in cases:
                with self.subTest(case=name, socket=kind_name):
                    self.expect_error(payload, status, text, request_id, kind)
        # ... and the server still serves
        self.infer_and_compare(zmq.DEALER, 4, 1)


class Test2Cli(unittest.TestCase):
    """The C CLI and this client agree on the same request: same floats, same error status."""

    def python_infer(self, model_name, features, rows):
        return roundtrip(infer_payload(model_name, features, rows=rows, request_id=5)).infer

    def test_cli_outputs_equal_python_outputs(self):
        all_py, all_ref = [], []
        for rows in (1, 4):
            features = random_features(rows * 512)
            rep = self.python_infer("tick_mlp", features, rows)
            self.assertEqual(rep.status, OK, rep.error)
            py = list(rep.outputs)
            all_py.extend(py)
            all_ref.extend(forward(model, features, rows))
            path = os.path.join(workdir, f"features{rows}.txt")
            with open(path, "w") as f:
                f.write(features_text(features))
            for args, stdin_text in ((("--file", path), None), (("--stdin",), features_text(features))):
                with self.subTest(rows=rows, source=args[0]):
                    cli = run_cli("infer", "--model", "tick_mlp", "--rows", str(rows), *args, stdin_text=stdin_text)
                    self.assertEqual(cli.returncode, 0, cli.stderr)
                    lines = parse_cli_outputs(cli.stdout)
                    self.assertEqual(len(lines), rows, cli.stdout)
                    c = [v for line in lines for v in line]
                    self.assertEqual(len(c), len(py))
                    for a, b in zip(py, c):
                        self.assertTrue(math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0), f"python {a!r}, sigclient {b!r}")
                    self.assertIn("status=STATUS_OK", cli.stderr)
        e = rel_error(all_py, all_ref)
        self.assertLessEqual(e, TOLERANCE, f"relative error {e:.3g} over {len(all_py)} outputs (seed {SEED})")

    def test_cli_same_error_status(self):
        features = random_features(512)
        rep = self.python_infer("nope", features, 1)
        self.assertEqual(rep.status, UNKNOWN_MODEL)
        self.assertEqual(rep.error, TEXT_UNKNOWN)
        cli = run_cli("infer", "--model", "nope", "--stdin", stdin_text=features_text(features))
        self.assertEqual(cli.returncode, 1, cli.stderr)
        self.assertIn(S.Name(rep.status), cli.stderr)
        self.assertIn(rep.error, cli.stderr)
        self.assertEqual(cli.stdout, "")
        # a wrong feature count: the same on both sides too
        rep = self.python_infer("tick_mlp", features[:511], 1)
        cli = run_cli("infer", "--model", "tick_mlp", "--stdin", stdin_text=features_text(features[:511]))
        self.assertEqual(cli.returncode, 1, cli.stderr)
        self.assertIn(S.Name(rep.status), cli.stderr)
        self.assertIn(rep.error, cli.stderr)

    def test_cli_health(self):
        cli = run_cli("health")
        self.assertEqual(cli.returncode, 0, cli.stderr)
        self.assertTrue(cli.stdout.startswith("live=1 ready=1 version="), cli.stdout)


class Test3Shutdown(unittest.TestCase):
    """Last: SIGTERM stops the server cleanly (exit code 0)."""

    def test_sigterm_exits_0(self):
        self.assertIsNone(server.poll(), "sigserve died during the tests:\n" + server_log_text())
        server.send_signal(signal.SIGTERM)
        try:
            rc = server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail("sigserve still running 10 s after SIGTERM")
        self.assertEqual(rc, 0, server_log_text())


def main():
    global TRANSPORT
    passed = failed = 0
    for TRANSPORT in ("zmtp", "libzmq"):
        p, f = run_classes((Test1Wire, Test2Cli, Test3Shutdown))    # in this order: the last one stops the server
        passed += p
        failed += f
    return summary(passed, failed)


if __name__ == "__main__":
    sys.exit(main())
