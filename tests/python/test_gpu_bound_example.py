#!/usr/bin/python3
"""examples/gpu-bound: make-weights.py writes what the example's sigserve.json names, and the config
serves it. At a test size (--hidden 64, plain Python: no numpy, torch or GPU needed):

  - make-weights.py --self-test passes, and a --hidden 64 file has the sha256 the script records
    and prints, the size it prints, the tensors the config names with the shapes of the layout,
    and values within each tensor's bound;
  - the shipped config asks for what issue 20 measured (cuda, cublas, max_batch_rows 4, 2 instances
    on GPU 0) and names exactly those tensors, ReLU after every layer but the last;
  - the same config with backend "cpu" and the small weights passes `sigserve --check-config`, and
    served, answers 4 rows with the float64 reference's outputs (1e-5 relative).

Run: BUILD=build python3 tests/python/test_gpu_bound_example.py. The last line is "N passed, N failed".
"""
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

from reference import forward, free_port, load_model, load_safetensors, rel_error, run_in_order

BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "gpu-bound")
SCRIPT = os.path.join(EXAMPLE, "make-weights.py")
HIDDEN = 64
SHAPES = {"0.weight": [HIDDEN, 256], "0.bias": [HIDDEN], "2.weight": [HIDDEN, HIDDEN], "2.bias": [HIDDEN],
          "4.weight": [HIDDEN, HIDDEN], "4.bias": [HIDDEN], "6.weight": [1, HIDDEN], "6.bias": [1]}


def make(out, *args):
    return subprocess.run([sys.executable, SCRIPT, "--out", out, *args], capture_output=True, text=True,
                          timeout=120)


def small_config(weights, endpoint):
    with open(os.path.join(EXAMPLE, "sigserve.json")) as f:
        config = json.load(f)
    config["server"]["endpoints"] = [endpoint]
    config["models"][0].update({"backend": "cpu", "weights": weights})
    return config


class Weights(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="sigserve-gpu-bound-")
        cls.path = os.path.join(cls.tmp.name, "small.safetensors")
        cls.made = make(cls.path, "--hidden", str(HIDDEN), "--generator", "python")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_self_test_passes(self):
        r = subprocess.run([sys.executable, SCRIPT, "--self-test"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"(?m)^python: 100004 bytes, sha256 [0-9a-f]{64} ok$")
        self.assertTrue(r.stdout.rstrip().endswith("self-test: passed"), r.stdout)

    def test_prints_size_and_sha256_of_the_file(self):
        self.assertEqual(self.made.returncode, 0, self.made.stderr)
        with open(self.path, "rb") as f:
            data = f.read()
        size = re.search(r", (\d+) bytes \(", self.made.stdout)
        self.assertIsNotNone(size, self.made.stdout)
        self.assertEqual(int(size.group(1)), len(data))
        self.assertIn(f"sha256 {hashlib.sha256(data).hexdigest()}\n", self.made.stdout)
        with open(SCRIPT) as f:
            recorded = re.search(r'^SMALL_SHA256 = "([0-9a-f]{64})"$', f.read(), re.M).group(1)
        self.assertEqual(hashlib.sha256(data).hexdigest(), recorded)

    def test_tensors_shapes_and_bounds(self):
        tensors = load_safetensors(self.path)
        self.assertEqual({name: shape for name, (shape, _) in tensors.items()}, SHAPES)
        for name, (shape, values) in tensors.items():
            fan_in = 256 if name.startswith("0.") else HIDDEN
            if name.endswith(".bias"):
                bound = 1 / math.sqrt(fan_in)
            else:
                bound = math.sqrt((3.0 if name.startswith("6.") else 6.0) / fan_in)
            self.assertLessEqual(max(abs(v) for v in values), bound * (1 + 1e-6), name)
            if len(values) > 1000:    # spread over the range, not a constant
                self.assertGreater(max(values), 0.9 * bound, name)
                self.assertLess(min(values), -0.9 * bound, name)

    def test_seed_changes_the_values(self):
        other = os.path.join(self.tmp.name, "seed7.safetensors")
        self.assertEqual(make(other, "--hidden", str(HIDDEN), "--generator", "python", "--seed", "7").returncode, 0)
        self.assertNotEqual(load_safetensors(other)["2.weight"][1], load_safetensors(self.path)["2.weight"][1])

    def test_bad_hidden_is_refused(self):
        r = make(os.path.join(self.tmp.name, "x.safetensors"), "--hidden", "9000")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--hidden: expected 1 to 8192 (the kernels' contract), got 9000", r.stderr)


class Config(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(EXAMPLE, "sigserve.json")) as f:
            cls.config = json.load(f)
        cls.model = cls.config["models"][0]

    def test_what_issue_20_measured(self):
        m = self.model
        self.assertEqual((m["name"], m["backend"], m["kernel"], m["max_batch_rows"], m["instances"], m["devices"],
                          m["weights"]),
                         ("gpu_bound", "cuda", "cublas", 4, 2, [0], "gpu_bound.safetensors"))

    def test_layers_name_the_tensors_the_script_writes(self):
        layers = self.model["layers"]
        self.assertEqual([(layer["weight"], layer["bias"]) for layer in layers],
                         [(f"{i}.weight", f"{i}.bias") for i in (0, 2, 4, 6)])
        self.assertEqual([layer["activation"] for layer in layers], ["relu", "relu", "relu", "none"])


class Serves(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="sigserve-gpu-bound-")
        cls.weights = os.path.join(cls.tmp.name, "gpu_bound.safetensors")
        made = make(cls.weights, "--hidden", str(HIDDEN), "--generator", "python")
        assert made.returncode == 0, made.stderr
        cls.endpoint = f"tcp://127.0.0.1:{free_port()}"
        cls.config_path = os.path.join(cls.tmp.name, "sigserve.json")
        with open(cls.config_path, "w") as f:
            json.dump(small_config(cls.weights, cls.endpoint), f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_check_config_passes(self):
        r = subprocess.run([os.path.join(BUILD, "sigserve"), "--check-config", self.config_path],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("gpu_bound version 1: 256 -> 1, backend cpu", r.stdout)

    def test_serves_the_reference_outputs(self):
        rows = 4
        features = [math.sin(0.37 * k) for k in range(rows * 256)]
        path = os.path.join(self.tmp.name, "features.txt")
        with open(path, "w") as f:
            f.write(" ".join(repr(v) for v in features))
        log = open(os.path.join(self.tmp.name, "sigserve.log"), "w")
        server = subprocess.Popen([os.path.join(BUILD, "sigserve"), "--config", self.config_path], stdout=log,
                                  stderr=subprocess.STDOUT)
        try:
            cli = [os.path.join(BUILD, "sigclient"), "--endpoint", self.endpoint, "--timeout", "500"]
            deadline = time.monotonic() + 30
            while subprocess.run(cli + ["health"], capture_output=True).returncode != 0:
                self.assertIsNone(server.poll(), "sigserve exited")
                self.assertLess(time.monotonic(), deadline, "sigserve not ready in 30 s")
                time.sleep(0.1)
            r = subprocess.run(cli + ["infer", "--model", "gpu_bound", "--file", path, "--rows", str(rows)],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            got = [float(line) for line in r.stdout.split() if re.fullmatch(r"-?[0-9.]+(e[-+]?\d+)?", line)]
            model = load_model(self.weights, [(f"{i}.weight", f"{i}.bias", "none" if i == 6 else "relu")
                                              for i in (0, 2, 4, 6)])
            want = forward(model, features, rows)
            self.assertEqual(len(got), rows, r.stdout)
            self.assertLess(rel_error(got, want), 1e-5, (got, want))
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()


if __name__ == "__main__":
    sys.exit(run_in_order([Weights, Config, Serves]))
