#!/usr/bin/python3
"""The Python client (the package clients/python/sigclient) against a live sigserve that this test
starts (client_fixture.py: its models and their float64 references): the package, inference, every
error status with the server's exact text, pipelining, health and the model list, timeouts and stale
replies, deadlines, the client's lifetime, and last the server's clean exit. The command line:
test_client_py_cli.py; dns:// endpoints and retries: test_client_fleet.py; LSTM streams:
test_client_streams.py.

Run from the repository root (tests/run.sh does):
    BUILD=build PYTHONPATH=build/gen/py:clients/python /usr/bin/python3 tests/python/test_client.py
or, with the package installed (tests/python/test_install.sh does), with no PYTHONPATH at all.
Uses only the standard library, pyzmq and protobuf. The last line printed is "N passed, N failed".
"""
import ast
import math
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import zmq

import sigclient
import client_fixture as fx
from client_fixture import (BUILD, ClientTest, JUNK, Pool, ROOT, SIGSERVE, ShutdownCheck, TEXT_COUNT_0,
                            TEXT_COUNT_1026, TEXT_COUNT_511, TEXT_EMPTY, TEXT_INF, TEXT_NAN, TEXT_NOT_DIVIDING,
                            TEXT_ROWS, TEXT_UNDECODABLE, TEXT_UNKNOWN, TEXT_UNKNOWN_EMPTY, random_features)
from reference import forward, free_port
from sigclient import (BadRequest, BadShape, BadValue, DeadlineExceeded, InferResult, InternalError, Overloaded,
                       ProtocolError, ServerError, SigClient, SigServeError, Status, Timeout, Unavailable, UnknownModel)


setUpModule = fx.start_server
tearDownModule = fx.stop_server


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
        self.assertIn(r.backend, ("cpu", "cuda"))     # InferReply.backend: what computed it
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
            pool.add(r.outputs, forward(fx.tick, f, 1))
        self.assertEqual(first, 1)
        pool.check(self)

    def test_rows_5_and_rows_0(self):
        pool = Pool()
        for rows in (5, 5):
            f = random_features(rows * 512)
            r = self.client.infer("tick_mlp", f, rows=rows)
            self.check_ok(r, rows)
            self.assertEqual(len(r.output_rows()), 5)
            pool.add(r.outputs, forward(fx.tick, f, rows))
        for _ in range(4):      # rows 0 means 1
            f = random_features(512)
            r = self.client.infer("tick_mlp", f, rows=0)
            self.check_ok(r, 1)
            pool.add(r.outputs, forward(fx.tick, f, 1))
        pool.check(self)

    def test_infer_rows(self):
        pool = Pool()
        rows = [random_features(512) for _ in range(5)]
        out = self.client.infer_rows("tick_mlp", rows)
        self.assertEqual(len(out), 5)
        self.assertTrue(all(len(o) == 1 for o in out))
        for row, o in zip(rows, out):
            pool.add(o, forward(fx.tick, row, 1))
        pool.check(self)
        # several outputs per row: odd, 7 rows (its max) of 33 -> 3
        pool = Pool()
        rows = [random_features(33) for _ in range(7)]
        out = self.client.infer_rows("odd", rows)
        self.assertEqual([len(o) for o in out], [3] * 7)
        for row, o in zip(rows, out):
            pool.add(o, forward(fx.odd, row, 1))
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
                pool.add(r.outputs, forward(fx.odd, f, rows))
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
            SigClient(fx.endpoints, timeout_ms=0)
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
        with SigClient(fx.endpoints[:1], timeout_ms=5000) as one:
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
        refs = [forward(fx.tick, v, 1) for v in vectors]
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
        for e in fx.endpoints:
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
        # arrive first, as a late reply would (its socket readable: 10 s at most).
        self.assertTrue(self.client._check_open().poll(10000, zmq.POLLIN), "no reply to the infer within 10 s")
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
        cert = os.path.join(fx.workdir, "mismatch")
        subprocess.run([SIGSERVE, "--keygen", cert], check=True, capture_output=True)
        want = (f"{fx.endpoints[0]}: the server does not use CURVE, and this client has CURVE keys (SigClient without "
                f"curve_server and curve_client)")
        with SigClient(fx.endpoints[0], timeout_ms=60000, curve_server=cert, curve_client=cert + "_secret") as c:
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

    def test_probe_reads_a_servers_mechanism(self):
        """After a handshake that failed without detail (libzmq saw the server's close before its
        mechanism), the client reads the server's greeting itself: CURVE and NULL from pyzmq ROUTERs,
        None from a closed port and from a peer that is not ZeroMQ."""
        from sigclient._security import probe_mechanism
        ctx = zmq.Context.instance()
        for curve in (False, True):
            r = ctx.socket(zmq.ROUTER)
            r.linger = 0
            if curve:
                r.curve_secretkey = zmq.curve_keypair()[1]
                r.curve_server = True
            port = r.bind_to_random_port("tcp://127.0.0.1")
            with self.subTest(curve=curve):
                for ours in (False, True):
                    self.assertEqual(probe_mechanism(f"tcp://127.0.0.1:{port}", ours), "CURVE" if curve else "NULL")
            r.close()
        self.assertIsNone(probe_mechanism(f"tcp://127.0.0.1:{free_port()}", False))
        import socket
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            port = listener.getsockname()[1]

            def answer():
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n" + bytes(64))
            t = threading.Thread(target=answer)
            t.start()
            self.assertIsNone(probe_mechanism(f"tcp://127.0.0.1:{port}", False, timeout=5.0))
            t.join()

    def test_stale_reply_skipped(self):
        """A reply that arrives after its call timed out is skipped by the next call, which gets its own."""
        with SigClient(fx.endpoints[0], timeout_ms=300) as c:
            c.infer("tick_mlp", random_features(512))      # connected and answering
            old = random_features(4 * 512)
            new = random_features(4 * 512)
            fx.server.send_signal(signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                with self.assertRaises(Timeout):
                    c.infer("tick_mlp", old, rows=4)
                self.assertLess(time.monotonic() - t0, 0.6)
            finally:
                fx.server.send_signal(signal.SIGCONT)
            c.timeout_ms = 5000
            r = c.infer("tick_mlp", new, rows=4)
            self.assertEqual(r.request_id, 3)
            self.assertEqual(c.discarded_replies, 1)
            pool = Pool()
            pool.add(r.outputs, forward(fx.tick, new, 4))
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
        return [client.send_infer("slow", fx.slow_features, rows=15) for _ in range(self.SLOW)]

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
        with SigClient(fx.endpoints[0], timeout_ms=30000) as c:
            c.infer("tick_mlp", random_features(512))       # connected
            tiny = random_features(4 * 512)
            fx.server.send_signal(signal.SIGSTOP)
            try:
                slow_ids = self.send_slow(c)
                # waits behind its own model's queue: slow is the one with a queue
                short_id = c.send_infer("slow", fx.slow_features, rows=15, deadline_us=1000)
                long_id = c.send_infer("tick_mlp", tiny, rows=4, deadline_us=60_000_000)
            finally:
                fx.server.send_signal(signal.SIGCONT)
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
            pool.add(r.outputs, forward(fx.tick, tiny, 4))
            pool.check(self)

    def test_deadline_raises_from_infer(self):
        """The same through infer, on the same client: it raises DeadlineExceeded for its own (answered
        at admission), skipping the slow replies that came before it (late, to it)."""
        with SigClient(fx.endpoints[0], timeout_ms=30000) as c:
            c.infer("tick_mlp", random_features(512))       # connected
            resume = threading.Timer(0.1, fx.server.send_signal, [signal.SIGCONT])
            fx.server.send_signal(signal.SIGSTOP)
            e = None
            try:
                self.send_slow(c)
                resume.start()
                try:
                    r = c.infer("slow", fx.slow_features, rows=15, deadline_us=1000)
                except DeadlineExceeded as exc:
                    e = exc
            finally:
                resume.cancel()
                if resume.ident is not None:    # started
                    resume.join()
                fx.server.send_signal(signal.SIGCONT)
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
        with SigClient(fx.endpoints, timeout_ms=2000) as c:
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
            with SigClient(fx.endpoints[1], context=ctx) as c:
                self.assertTrue(c.health().ready)
            self.assertFalse(ctx.closed)
            with SigClient(fx.endpoints[1], context=ctx) as c:     # the context still works
                self.assertEqual(len(c.list_models()), 3)
        finally:
            ctx.term()

    def test_exception_on_close_path(self):
        """An exception inside the with block still closes the client and propagates."""
        with self.assertRaises(UnknownModel):
            with SigClient(fx.endpoints[0]) as c:
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


class Test9Shutdown(ShutdownCheck, unittest.TestCase):
    """Last: the server survived everything above, and SIGTERM stops it cleanly (exit code 0)."""


def main():
    # In this order: the last one stops the server.
    return fx.run((Test0Package, Test1Infer, Test2Errors, Test3Pipelined, Test4HealthModels, Test5Timeouts,
                   Test6Deadline, Test7Lifetime, Test9Shutdown))


if __name__ == "__main__":
    sys.exit(main())
