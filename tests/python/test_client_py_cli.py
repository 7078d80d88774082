#!/usr/bin/python3
"""sigclient-py, the Python client's command line, against a live sigserve that this test starts
(client_fixture.py): outputs, timings, exit codes and error texts, the same as the C sigclient's
where $BUILD/sigclient exists; and last the server's clean exit.

Run from the repository root (tests/run.sh does):
    BUILD=build PYTHONPATH=build/gen/py:clients/python /usr/bin/python3 tests/python/test_client_py_cli.py
or, with the package installed (tests/python/test_install.sh does), with no PYTHONPATH at all.
Uses only the standard library, pyzmq and protobuf. The last line printed is "N passed, N failed".
"""
import math
import os
import subprocess
import sys
import time
import unittest

import client_fixture as fx
from client_fixture import (Pool, ROOT, ShutdownCheck, TEXT_COUNT_511, TEXT_NAN, TEXT_ROWS, TEXT_UNKNOWN, TIMING_KEYS,
                            c_cli, fields, keys, py_cli, random_features)
from reference import f32, forward, free_port
from sigclient import SigClient


setUpModule = fx.start_server
tearDownModule = fx.stop_server


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
        return ("--endpoint", fx.endpoints[0])

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
        self.assertIn(f["backend"], ("cpu", "cuda"))
        self.assertGreater(int(f["compute_ns"]), 0)
        self.assertGreaterEqual(int(f["server_ns"]), int(f["compute_ns"]))
        self.assertGreaterEqual(float(f["round_trip_us"]) * 1000 + 100, int(f["server_ns"]))   # one decimal of us
        return f

    def test_infer_file_and_stdin(self):
        """The outputs printed are the library's, exactly (%.9g round-trips a float32), one row a line."""
        rows = 4
        features = random_features(rows * 512)
        with SigClient(fx.endpoints[0]) as c:
            want = c.infer("tick_mlp", features, rows=rows).outputs
        pool = Pool()
        pool.add(want, forward(fx.tick, features, rows))
        pool.check(self)
        path = os.path.join(fx.workdir, "cli-features.txt")
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
        pool.add([v for g in got for v in g], forward(fx.odd, features, rows))
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
        py = py_cli("--endpoint", fx.endpoints[0], "--endpoint", fx.endpoints[1], "infer", "--model", "tick_mlp",
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
        nul = os.path.join(fx.workdir, "nul.txt")
        with open(nul, "wb") as f:
            f.write(b"1 2\0 3\n")
        missing = os.path.join(fx.workdir, "missing.txt")
        cases = [
            (("--file", missing), "", f"cannot open {missing}: No such file or directory"),
            (("--file", fx.workdir), "", f"cannot read {fx.workdir}: Is a directory"),
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
        py = py_cli("--endpoint", fx.endpoints[1], "--timeout=2000", "models")     # --name=value, as getopt_long
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
                p = subprocess.run([sys.executable, "-m", module, "--endpoint", fx.endpoints[1], "infer", "--model",
                                    "tick_mlp", "--random", "511"], capture_output=True, text=True, timeout=60)
                self.assertEqual((p.returncode, p.stdout, p.stderr),
                                 (1, "", f"sigclient-py: STATUS_BAD_SHAPE: {TEXT_COUNT_511}\n"))


class Test9Shutdown(ShutdownCheck, unittest.TestCase):
    """Last: the server survived everything above, and SIGTERM stops it cleanly (exit code 0)."""


def main():
    # In this order: the last one stops the server.
    return fx.run((Test8Cli, Test9Shutdown))


if __name__ == "__main__":
    sys.exit(main())
