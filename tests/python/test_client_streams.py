#!/usr/bin/python3
"""The Python client's LSTM streams: what it sends for a stream, read on fake servers
(client_fixture.py), and streams through SigClient, sigclient-py and the C sigclient on an LSTM model
served by a sigserve of the test's own, against a float64 LSTM in pure Python.

Run from the repository root (tests/run.sh does):
    BUILD=build PYTHONPATH=build/gen/py:clients/python /usr/bin/python3 tests/python/test_client_streams.py
or, with the package installed (tests/python/test_install.sh does), with no PYTHONPATH at all.
Uses only the standard library, pyzmq and protobuf. The last line printed is "N passed, N failed".
"""
import math
import random
import sys
import unittest

import sigclient
from client_fixture import (FakeServer, Fleet, LSTM_OUT, LSTM_STEP, LSTM_WINDOW, LstmServer, Pool, TIMING_KEYS, c_cli,
                            fields, keys, py_cli, wait_for)
from reference import f32, free_port, lstm_stream, run_in_order
from sigclient import BadShape, BadValue, SigClient, StreamGone, Timeout


# ---- LSTM streams ----

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


class TestCStreamsServer(LstmServer, unittest.TestCase):
    """An LSTM model served by a sigserve of this class's own: streams through SigClient, sigclient-py
    and the C sigclient answer what a float64 LSTM in pure Python (tests/python/reference.py) gives
    for the stream so far, within 1e-5."""

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
    return run_in_order((TestBStreamsWire, TestCStreamsServer))


if __name__ == "__main__":
    sys.exit(main())
