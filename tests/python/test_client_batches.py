#!/usr/bin/python3
"""The Python client's batches (issue 39): infer, infer_rows, send_infer and Stream.step take one row
(a sequence of numbers, a 1-D numpy array) or a batch (a sequence of equal-length rows, a 2-D numpy
array), against a live sigserve. A batch's outputs come back shaped (rows, outputs): a float32 numpy
array for numpy input, lists for lists; one row's stay the flat list they were. Features the client
cannot read raise TypeError / ValueError with the exact messages below, which never print the data,
and send nothing.

Run as tests/run.sh does (it runs every tests/python/test_*.py):
    BUILD=build PYTHONPATH=build/gen/py:clients/python /usr/bin/python3 tests/python/test_client_batches.py
The server and its models are tests/python/client_fixture.py's (its start_server starts them), the
LSTM one its LstmServer's. Outputs are checked against the same float64 reference.
The numpy cases run where the interpreter has numpy and are skipped, saying so, where it has not
(Debian: python3-numpy; or PYTHON=build/venv-convert/bin/python, which tests/python/test_convert.sh
makes); the cases without numpy run everywhere, one of them with numpy made unimportable. The last
line printed is "N passed, N failed".
"""
import json
import subprocess
import sys
import traceback
import unittest
import warnings
from array import array

import client_fixture as fx
from reference import forward, lstm_stream, lstm_window, run_in_order
from sigclient import BadShape, SigClient

try:
    import numpy as np
except ImportError:
    np = None

NEEDS_NUMPY = unittest.skipIf(np is None, f"numpy is not importable by {sys.executable}")
ACCEPTED = "a sequence of numbers (one row), a sequence of equal-length rows, or a 1-D or 2-D numpy array"
NESTED = "(one row holds numbers, a batch rows of numbers: two levels at most)"


def setUpModule():
    print(f"test_client_batches: numpy {np.__version__ if np is not None else 'not importable'} in "
          f"{sys.executable}", flush=True)
    fx.start_server()


def tearDownModule():
    fx.stop_server()


def rows_of(count, width):
    return [fx.random_features(width) for _ in range(count)]


def flat(rows):
    return [v for row in rows for v in row]


def object_rows(*rows):
    """A 1-D numpy array of Python objects, one list per element (numpy makes it for ragged rows)."""
    a = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        a[i] = row
    return a


class BatchTest(unittest.TestCase):
    """A fresh client per test: its first request is id 1, so a test can tell that an error sent nothing."""

    def setUp(self):
        self.client = SigClient(fx.endpoints, timeout_ms=5000)

    def tearDown(self):
        self.client.close()

    def assert_raises_exactly(self, exc, text, call, *args, **kwargs):
        with self.assertRaises(exc) as cm:
            call(*args, **kwargs)
        self.assertIs(type(cm.exception), exc)
        self.assertEqual(str(cm.exception), text)
        return cm.exception

    def assert_nothing_sent(self):
        r = self.client.infer("odd", fx.random_features(33))
        self.assertEqual(r.request_id, 1)

    def check_odd(self, rows, outputs_flat):
        pool = fx.Pool()
        pool.add(outputs_flat, forward(fx.odd, flat(rows), len(rows)))
        pool.check(self)


class Test1Lists(BatchTest):

    def test_a_list_of_rows_is_a_batch(self):
        rows = rows_of(4, 33)
        for given in ({}, {"rows": 4}):
            with self.subTest(**given):
                r = self.client.infer("odd", rows, **given)
                self.assertEqual((r.rows, r.output_size), (4, 3))
                self.assertIs(type(r.outputs), list)
                self.assertEqual([len(o) for o in r.outputs], [3, 3, 3, 3])
                self.assertTrue(all(type(o) is list and all(type(v) is float for v in o) for o in r.outputs))
                self.assertEqual(r.output_rows(), r.outputs)
                self.check_odd(rows, flat(r.outputs))
        # tuples, array.array rows, a generator of rows: the same batch
        for name, batch in (("tuples", tuple(tuple(row) for row in rows)), ("arrays", [array("f", row) for row in rows]),
                            ("generator", (row for row in rows))):
            with self.subTest(batch=name):
                r = self.client.infer("odd", batch)
                self.assertEqual([len(o) for o in r.outputs], [3] * 4)
                self.check_odd(rows, flat(r.outputs))
        # one output per row: tick_mlp, 3 rows -> [[y0], [y1], [y2]]
        rows = rows_of(3, 512)
        r = self.client.infer("tick_mlp", rows)
        self.assertEqual([len(o) for o in r.outputs], [1, 1, 1])
        pool = fx.Pool()
        pool.add(flat(r.outputs) + flat(self.client.infer("tick_mlp", rows[:1]).outputs),
                 forward(fx.tick, flat(rows) + rows[0], 4))
        pool.check(self)

    def test_one_row_is_as_before(self):
        rows = rows_of(2, 33)
        r = self.client.infer("odd", rows[0])
        self.assertEqual((r.rows, len(r.outputs)), (1, 3))
        self.assertTrue(all(type(v) is float for v in r.outputs))
        r2 = self.client.infer("odd", flat(rows), rows=2)        # flat, rows given: flat outputs
        self.assertEqual((r2.rows, len(r2.outputs), r2.output_size), (2, 6, 3))
        self.assertTrue(all(type(v) is float for v in r2.outputs))
        self.check_odd(rows[:1] + rows, r.outputs + r2.outputs)

    def test_the_server_sees_the_batch_shape(self):
        self.assert_raises_exactly(
            BadShape, 'server replied STATUS_BAD_SHAPE: features: expected rows x input size = 3 x 33 = 99 values for '
                      'model "odd", got 96', self.client.infer, "odd", rows_of(3, 32))
        self.assert_raises_exactly(BadShape, "server replied STATUS_BAD_SHAPE: " + fx.TEXT_ROWS,
                                   self.client.infer, "tick_mlp", rows_of(9, 512))

    def test_rows_that_contradict_the_batch(self):
        rows = rows_of(3, 33)
        self.assert_raises_exactly(ValueError, "rows: 2 given, but the features hold 3 rows of 33 values; leave rows "
                                               "out for a batch, or give the same number",
                                   self.client.infer, "odd", rows, rows=2)
        self.assert_raises_exactly(ValueError, "rows: 0 given, but the features hold 1 row of 1 value; leave rows "
                                               "out for a batch, or give the same number",
                                   self.client.infer, "odd", [[1.0]], rows=0)
        self.assert_raises_exactly(TypeError, "rows: expected an int, got float", self.client.infer, "odd", rows,
                                   rows=3.0)
        self.assert_nothing_sent()

    def test_what_features_cannot_be(self):
        good = [1.0] * 33
        cases = [
            ("abc", TypeError, f"features: expected {ACCEPTED}, got a str"),
            (b"\x00\x01", TypeError, f"features: expected {ACCEPTED}, got a bytes"),
            ({"a": 1.0}, TypeError, f"features: expected {ACCEPTED}, got a dict"),
            (None, TypeError, f"features: expected {ACCEPTED}, got None"),
            (2.5, TypeError, f"features: expected {ACCEPTED}, got a float"),
            ([good, good[:32]], ValueError,
             "features: row 1 has 32 values, row 0 has 33; the rows of a batch must be of equal length"),
            ([good, good, [1.0]], ValueError,
             "features: row 2 has 1 value, row 0 has 33; the rows of a batch must be of equal length"),
            ([good, 1.0], TypeError, "features: row 1 is a float, expected a sequence of numbers like row 0"),
            ([good, "x" * 33], TypeError, "features: row 1 is a str, expected a sequence of numbers like row 0"),
            ([[good] * 2] * 3, TypeError, f"features: features[0][0] is a list, expected a number {NESTED}"),
            (good[:5] + [[1.0, 2.0]] + good[6:], TypeError,
             f"features: features[5] is a list, expected a number {NESTED}"),
            (good[:7] + ["1.5"] + good[8:], TypeError, "features: features[7] is a str, expected a number"),
            ([good, good[:20] + [None] + good[21:]], TypeError, "features: features[1][20] is None, expected a number"),
            ([good, good[:3] + [1j] + good[4:]], TypeError, "features: features[1][3] is a complex, expected a number"),
            (good[:2] + [10 ** 400] + good[3:], ValueError, "features: features[2] is an int too large for a float"),
        ]
        for features, exc, text in cases:
            with self.subTest(text=text):
                self.assert_raises_exactly(exc, text, self.client.infer, "odd", features)
                self.assert_raises_exactly(exc, text, self.client.send_infer, "odd", features)
        self.assertEqual(self.client.pending, 0)
        self.assert_nothing_sent()

    def test_errors_never_print_the_data(self):
        """The issue: protobuf's TypeError printed the whole array. A 3-D batch of 64 x 33 x 33, a
        mark in every value: neither the message nor the traceback shows one."""
        mark = 123.0625
        big = [[[mark] * 33 for _ in range(33)] for _ in range(64)]
        for features in (big, [[mark] * 33, [mark] * 32 + ["x"]]):
            with self.assertRaises(TypeError) as cm:
                self.client.infer("odd", features)
            shown = "".join(traceback.format_exception(type(cm.exception), cm.exception, cm.exception.__traceback__))
            self.assertNotIn("123.06", shown)
            self.assertLess(len(str(cm.exception)), 200)
            self.assertTrue(cm.exception.__suppress_context__)

    def test_infer_rows(self):
        rows = rows_of(5, 33)
        out = self.client.infer_rows("odd", rows)
        self.assertIs(type(out), list)
        self.assertEqual([len(o) for o in out], [3] * 5)
        self.check_odd(rows, flat(out))
        self.assert_raises_exactly(ValueError, "rows: no rows; expected at least one", self.client.infer_rows, "odd", [])
        self.assert_raises_exactly(ValueError, "rows: row 1 has 32 values, row 0 has 33; the rows of a batch must be "
                                               "of equal length", self.client.infer_rows, "odd", [rows[0], rows[1][:32]])
        self.assert_raises_exactly(TypeError, "rows: expected a sequence of equal-length rows or a 2-D numpy array, got "
                                              "a list of numbers (one row: give [row], or use infer)",
                                   self.client.infer_rows, "odd", rows[0])
        self.assert_raises_exactly(TypeError, "rows: rows[1][0] is a str, expected a number",
                                   self.client.infer_rows, "odd", [rows[0], ["a"] + rows[1][1:]])

    def test_pipelined_batch(self):
        rows = rows_of(3, 33)
        rid = self.client.send_infer("odd", rows)
        r = self.client.recv_infer()
        self.assertEqual((r.request_id, r.rows, len(r.outputs)), (rid, 3, 9))       # flat, as recv_infer always was
        self.assertEqual([len(o) for o in r.output_rows()], [3, 3, 3])
        self.check_odd(rows, r.outputs)
        self.assert_raises_exactly(ValueError, "rows: 4 given, but the features hold 3 rows of 33 values; leave rows "
                                               "out for a batch, or give the same number",
                                   self.client.send_infer, "odd", rows, 4)

    def test_works_without_numpy(self):
        """With numpy made unimportable (as where it is not installed), batches of lists work and
        return lists; and the client never imports numpy itself."""
        rows = rows_of(2, 33)
        script = (
            "import json, sys\n"
            "block = sys.argv[3] == 'block'\n"
            "if block:\n"
            "    sys.modules['numpy'] = None      # import numpy raises ImportError from here on\n"
            "from sigclient import SigClient\n"
            "rows = json.loads(sys.argv[2])\n"
            "with SigClient(sys.argv[1], timeout_ms=5000) as c:\n"
            "    out = {'batch': c.infer('odd', rows).outputs, 'one': c.infer('odd', rows[0]).outputs,\n"
            "           'infer_rows': c.infer_rows('odd', rows)}\n"
            "    try:\n"
            "        c.infer('odd', 'abc')\n"
            "    except TypeError as e:\n"
            "        out['error'] = str(e)\n"
            "out['numpy_imported'] = sys.modules.get('numpy') is not None\n"
            "print(json.dumps(out))\n")
        for mode in ("block", "plain"):
            with self.subTest(mode=mode):
                run = subprocess.run([sys.executable, "-c", script, fx.endpoints[0], json.dumps(rows), mode],
                                     capture_output=True, text=True, timeout=60)
                self.assertEqual(run.returncode, 0, run.stderr)
                got = json.loads(run.stdout)
                self.assertEqual([len(o) for o in got["batch"]], [3, 3])
                self.assertEqual(len(got["one"]), 3)
                self.assertEqual(got["infer_rows"], got["batch"])
                self.assertEqual(got["error"], f"features: expected {ACCEPTED}, got a str")
                self.assertFalse(got["numpy_imported"])
                self.check_odd(rows + rows[:1], flat(got["batch"]) + got["one"])


@NEEDS_NUMPY
class Test2Numpy(BatchTest):

    def test_the_issue(self):
        """c.infer("m", x, rows=3) with x a 2-D numpy array: outputs (3, outputs) as a numpy array."""
        rows = rows_of(3, 33)
        x = np.array(rows)
        for given in ({"rows": 3}, {}):
            with self.subTest(**given):
                r = self.client.infer("odd", x, **given)
                self.assertIsInstance(r.outputs, np.ndarray)
                self.assertEqual((r.outputs.shape, r.outputs.dtype), ((3, 3), np.float32))
                self.assertEqual((r.rows, r.output_size), (3, 3))
                self.assertEqual(r.output_rows(), r.outputs.tolist())
                self.check_odd(rows, r.outputs.ravel().tolist())

    def test_dtypes_and_layouts(self):
        rows = rows_of(4, 33)
        cases = [("float32", np.array(rows, dtype=np.float32), rows),
                 # a transposed view: not contiguous, read row by row all the same
                 ("transposed", np.array(rows).T.copy().T, rows),
                 ("every other row", np.repeat(np.array(rows), 2, axis=0)[::2], rows),
                 ("int64", np.arange(4 * 33).reshape(4, 33) % 5 - 2, None)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            cases.append(("matrix", np.asmatrix(rows), rows))     # stays 2-D when raveled: read as an array
        for name, x, ref_rows in cases:
            with self.subTest(case=name):
                ref_rows = ref_rows or [[float(v) for v in row] for row in x.tolist()]
                r = self.client.infer("odd", x)
                self.assertEqual(r.outputs.shape, (4, 3))
                self.check_odd(ref_rows, r.outputs.ravel().tolist())
        r = self.client.infer("tick_mlp", np.array(rows_of(1, 512)))
        self.assertEqual(r.outputs.shape, (1, 1))

    def test_one_row_arrays_are_as_before(self):
        rows = rows_of(2, 33)
        r = self.client.infer("odd", np.array(rows[0], dtype=np.float32))
        self.assertIs(type(r.outputs), list)
        self.assertEqual(len(r.outputs), 3)
        r2 = self.client.infer("odd", np.array(flat(rows)), rows=2)
        self.assertIs(type(r2.outputs), list)
        self.assertEqual((len(r2.outputs), r2.output_size), (6, 3))
        self.check_odd(rows[:1] + rows, r.outputs + r2.outputs)

    def test_what_arrays_cannot_be(self):
        cases = [
            (np.zeros((2, 3, 33)), ValueError, f"features: expected {ACCEPTED}, got a 3-D numpy array of shape (2, 3, 33)"),
            (np.array(1.5), ValueError, f"features: expected {ACCEPTED}, got a 0-D numpy array of shape ()"),
            (np.zeros((0, 33)), ValueError, "features: a numpy array of shape (0, 33) holds no rows; expected at least one"),
            (np.array(["1", "2"]), TypeError, "features: expected numbers, got a numpy array of dtype <U1 (shape (2,))"),
            (np.zeros((2, 33), dtype=complex), TypeError,
             "features: expected numbers, got a numpy array of dtype complex128 (shape (2, 33))"),
            (object_rows([1.0] * 33, [1.0] * 32), ValueError,
             "features: row 1 has 32 values, row 0 has 33; the rows of a batch must be of equal length"),
            (np.array([[1.0, "a"]], dtype=object), TypeError, "features: features[0][1] is a str, expected a number"),
            (np.float32(1.0), TypeError, f"features: expected {ACCEPTED}, got a float32"),
            ([np.zeros((33, 2))], TypeError,
             f"features: features[0][0] is a 1-D numpy array of shape (2,), expected a number {NESTED}"),
        ]
        for features, exc, text in cases:
            with self.subTest(text=text):
                self.assert_raises_exactly(exc, text, self.client.infer, "odd", features)
        self.assert_raises_exactly(ValueError, "rows: 2 given, but the features hold 3 rows of 33 values; leave rows "
                                               "out for a batch, or give the same number",
                                   self.client.infer, "odd", np.zeros((3, 33)), rows=2)
        self.assert_nothing_sent()

    def test_errors_never_print_the_data(self):
        x = np.full((100, 33, 33), 123.0625)
        with self.assertRaises(ValueError) as cm:
            self.client.infer("odd", x)
        shown = "".join(traceback.format_exception(type(cm.exception), cm.exception, cm.exception.__traceback__))
        self.assertNotIn("123.06", shown)

    def test_infer_rows_and_lists_of_arrays(self):
        rows = rows_of(3, 33)
        out = self.client.infer_rows("odd", np.array(rows))
        self.assertIsInstance(out, np.ndarray)
        self.assertEqual((out.shape, out.dtype), ((3, 3), np.float32))
        self.check_odd(rows, out.ravel().tolist())
        out = self.client.infer_rows("odd", [np.array(row) for row in rows])     # a list of rows: lists back
        self.assertIs(type(out), list)
        self.check_odd(rows, flat(out))
        self.assert_raises_exactly(ValueError, "rows: expected a 2-D numpy array or a sequence of equal-length rows, "
                                               "got a 1-D numpy array of shape (33,)",
                                   self.client.infer_rows, "odd", np.array(rows[0]))


class Test3Streams(fx.LstmServer, unittest.TestCase):
    """Stream.step and stream_id steps on client_fixture's LSTM server: a step is one row, as a list, a
    1-D array or a batch of one row (answered as one row); whole windows go as batches too."""

    def test_steps_in_every_form(self):
        n = 2 * fx.LSTM_WINDOW
        steps = self.steps(n)
        forms = [("list", lambda s: s, None), ("one-row list", lambda s: [s], "list")]
        if np is not None:
            forms += [("1-D array", np.array, None), ("one-row array", lambda s: np.array([s], dtype=np.float32), "numpy")]
        pool = fx.Pool()
        with SigClient(self.endpoint) as c:
            stream = c.stream("seq", 91)
            for t, step in enumerate(steps):
                name, form, batch = forms[t % len(forms)]
                with self.subTest(step=t + 1, form=name):
                    r = stream.step(form(step))
                    if batch is None:
                        self.assertIs(type(r.outputs), list)
                        self.assertEqual(len(r.outputs), fx.LSTM_OUT)
                        got = r.outputs
                    elif batch == "list":
                        self.assertEqual([len(o) for o in r.outputs], [fx.LSTM_OUT])
                        got = r.outputs[0]
                    else:
                        self.assertEqual((r.outputs.shape, r.outputs.dtype), ((1, fx.LSTM_OUT), np.float32))
                        got = r.outputs[0].tolist()
                    pool.add(got, lstm_stream(self.model, steps, t + 1))
            pool.check(self)
            self.assertEqual(stream.next_step, n + 1)

    def test_a_step_is_one_row(self):
        steps = self.steps(3)
        with SigClient(self.endpoint) as c:
            stream = c.stream("seq", 92)
            stream.step(steps[0])
            self.assertEqual(stream.next_step, 2)
            with self.assertRaises(BadShape) as cm:
                stream.step(steps[1:3])
            self.assertEqual(cm.exception.message, 'rows: a streaming request (stream_id 92) carries one step of model '
                                                   '"seq": expected 1, got 2')
            for bad, exc, text in (("abc", TypeError, f"features: expected {ACCEPTED}, got a str"),
                                   ([steps[1], steps[2][:3]], ValueError, "features: row 1 has 3 values, row 0 has 4; "
                                                                          "the rows of a batch must be of equal length")):
                with self.assertRaises(exc) as cm:
                    stream.step(bad)
                self.assertEqual(str(cm.exception), text)
            self.assertEqual(stream.next_step, 2)          # nothing applied: step 2 goes again
            pool = fx.Pool()
            for t in (1, 2):
                pool.add(stream.step(steps[t]).outputs, lstm_stream(self.model, steps, t + 1))
            pool.add(c.infer("seq", [steps[0]], stream_id=93, step=1).outputs[0], lstm_stream(self.model, steps, 1))
            pool.check(self)

    def test_whole_windows_as_a_batch(self):
        windows = [self.steps(fx.LSTM_WINDOW) for _ in range(3)]
        batch = [flat(w) for w in windows]
        with SigClient(self.endpoint) as c:
            r = c.infer("seq", batch)
            self.assertEqual([len(o) for o in r.outputs], [fx.LSTM_OUT] * 3)
            pool = fx.Pool()
            for w, o in zip(windows, r.outputs):
                pool.add(o, lstm_window(self.model, w))
            pool.check(self)


def main():
    try:
        return run_in_order((Test1Lists, Test2Numpy, Test3Streams))
    finally:
        tearDownModule()


if __name__ == "__main__":
    sys.exit(main())
