#!/usr/bin/python3
"""sigclient.convert's --dtype (issue 36 part 6): weights stored as f16 or bf16, loaded and served by the
real sigserve within the dtype's error bound.

The converter's ONNX front needs the onnx package (tests/python/test_convert.sh runs it in a venv,
with a --dtype case of its own); what --dtype adds is behind it, in sigclient.convert.Converted, and
runs here with numpy alone:

1. Two MLPs (the demo's 512-256-64-1, relu; 37-19-5-1, tanh, sigmoid), fresh random weights (the seed
   is printed; --seed repeats it), stored with Converted.store_as ("f16", "bf16") and written: the file
   names F16 / BF16 for every weight matrix and F32 for every bias, each stored value the weight
   rounded to nearest even (f16: numpy's own float16; bf16: within 2^-8 of the weight, and the nearer
   of its two neighbours), the entry holds them so ("weight_dtype").
2. One sigserve (CPU backend, a free loopback port) serves each file twice: as the entry says (held in
   the dtype) and with "weight_dtype": "f32" (widened). Random rows (1 and 3 a request) must be, output
   by output, within twice the first-order bound of reference.forward:
     - held: against the float64 reference of the ORIGINAL float32 weights, the bound adding each
       weight's error: f16 2^-11 |w| + 2^-25 (stored once, held exactly), bf16 (1 + 2^-8) (1 + 2^-8 /
       (1 - 2^-8)) - 1 (stored, then the CPU's odd lane: config/README.md, "CPU weight dtypes");
     - widened: against the reference of the STORED values, float32's bound alone: the loader reads
       F16 and BF16 exactly.
3. Refusals: a weight past f16's range names the tensor, index and value; an unknown dtype; the CLI's
   --dtype takes f32, f16 or bf16 (exit 2 otherwise, naming it).
Last line "N passed, N failed".
"""
import contextlib
import io
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from reference import forward, free_port, load_model, run_in_order
from sigclient import SigClient, cli
from sigclient.convert import ConvertError, Converted

try:
    import numpy as np
except ImportError:
    np = None

BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
SIGSERVE = os.path.join(BUILD, "sigserve")
ARGS = sys.argv[1:]
SEED = int(ARGS[ARGS.index("--seed") + 1]) if "--seed" in ARGS else time.time_ns() % (1 << 31)
# each weight's error as held, relative and absolute (reference.forward's weight_error, weight_eta)
HELD = {"f16": (2.0 ** -11, 2.0 ** -25),
        "bf16": ((1 + 2.0 ** -8) * (1 + 2.0 ** -8 / (1 - 2.0 ** -8)) - 1, 2.0 ** -133)}
MODELS = {"demo": ([512, 256, 64, 1], ["relu", "relu", "none"]),
          "odd": ([37, 19, 5, 1], ["tanh", "relu", "sigmoid"])}

tmp = server = None
endpoint = None
made = {}           # (model, dtype) -> dict(path, snippet, tensors (original), layers)


def build(sizes, acts, rng):
    tensors, layers = {}, []
    for k, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        bound = 1.0 / math.sqrt(n_in)
        tensors[f"{k}.weight"] = rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32)
        tensors[f"{k}.bias"] = rng.uniform(-bound, bound, n_out).astype(np.float32)
        layers.append({"weight": f"{k}.weight", "bias": f"{k}.bias", "activation": acts[k]})
    return tensors, layers


def chain_of(tensors, layers):
    """reference.forward's chain from numpy TENSORS (the original float32 weights)."""
    chain = []
    for layer in layers:
        w = tensors[layer["weight"]].astype(np.float64)
        chain.append(([tuple(row) for row in w.tolist()], tuple(tensors[layer["bias"]].astype(np.float64).tolist()),
                      layer["activation"]))
    return chain


def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def ready():
    try:
        with SigClient(endpoint, timeout_ms=200) as c:
            return c.health().ready
    except Exception:
        return False


def setUpModule():
    global tmp, server, endpoint
    if np is None:
        return
    print(f"seed {SEED} (--seed {SEED} repeats this run's weights and inputs)", flush=True)
    rng = np.random.default_rng(SEED)
    tmp = tempfile.mkdtemp(prefix="sigserve-convert-dtypes-")
    entries = []
    for name, (sizes, acts) in MODELS.items():
        tensors, layers = build(sizes, acts, rng)
        for dtype in ("f16", "bf16"):
            snippet = {"name": f"{name}_{dtype}", "weights": None, "layers": layers}
            c = Converted("mlp", dict(tensors), snippet, "mlp", []).store_as(dtype)
            c.write(os.path.join(tmp, f"{name}_{dtype}"))
            made[(name, dtype)] = {"path": c.weights_path, "snippet": dict(c.snippet), "tensors": tensors,
                                   "layers": layers, "notes": list(c.notes), "bytes": c.weights_bytes}
            entries.append(dict(c.snippet, backend="cpu", max_rows=4))
            entries.append(dict(c.snippet, name=f"{name}_{dtype}_wide", backend="cpu", max_rows=4, weight_dtype="f32"))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    config = {"server": {"endpoints": [endpoint], "log_level": "warn"}, "models": entries}
    with open(os.path.join(tmp, "server.json"), "w") as f:
        json.dump(config, f, indent=2)
    log = open(os.path.join(tmp, "sigserve.log"), "w")
    server = subprocess.Popen([SIGSERVE, "--config", os.path.join(tmp, "server.json")], stdout=log,
                              stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not ready():
        if server.poll() is not None or time.monotonic() > deadline:
            with open(os.path.join(tmp, "sigserve.log")) as f:
                raise RuntimeError(f"sigserve did not start:\n{f.read()}")
        time.sleep(0.05)


def tearDownModule():
    if server is not None and server.poll() is None:
        server.terminate()
        server.wait(10)
    if tmp and "--keep" not in ARGS:
        shutil.rmtree(tmp, True)


@unittest.skipIf(np is None, f"numpy is not importable by {sys.executable}")
class StoredFiles(unittest.TestCase):
    def test_dtypes_and_values_as_stored(self):
        for (name, dtype), m in made.items():
            h = header(m["path"])
            stored = load_model(m["path"], [(l["weight"], l["bias"], l["activation"]) for l in m["layers"]])
            for layer, (rows, bias, _) in zip(m["layers"], stored):
                self.assertEqual(h[layer["weight"]]["dtype"], dtype.upper(), (name, layer["weight"]))
                self.assertEqual(h[layer["bias"]]["dtype"], "F32", (name, layer["bias"]))
                w = m["tensors"][layer["weight"]]
                held = np.array(rows, dtype=np.float64)
                if dtype == "f16":
                    np.testing.assert_array_equal(held, w.astype(np.float16).astype(np.float64))
                else:
                    # the nearest bf16: within 2^-8 of the weight, and no farther than either neighbour
                    wd = w.astype(np.float64)
                    self.assertTrue(np.all(np.abs(held - wd) <= 2.0 ** -8 * np.abs(wd)), (name, layer["weight"]))
                    bits = held.astype(np.float32).view(np.uint32)
                    self.assertTrue(np.all(bits & 0xFFFF == 0))
                    for step in (1, -1):
                        other = ((bits.astype(np.int64) + (step << 16)) & 0xFFFFFFFF).astype(np.uint32)
                        near = other.view(np.float32).astype(np.float64)
                        self.assertTrue(np.all(np.abs(held - wd) <= np.abs(near - wd)), (name, layer["weight"]))
                np.testing.assert_array_equal(np.array(bias), m["tensors"][layer["bias"]].astype(np.float64))
            self.assertEqual(m["snippet"]["weight_dtype"], dtype)
            self.assertIn(f"stored as {dtype}", m["notes"][0])
            with open(m["path"], "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
            data = sum((2 if t.ndim == 2 else 4) * t.size for t in m["tensors"].values())
            self.assertEqual(m["bytes"], 8 + n + data)      # two bytes a weight, four a bias
            self.assertEqual(os.path.getsize(m["path"]), m["bytes"])

    def test_refusals_name_what_they_refuse(self):
        w = np.ones((2, 3), dtype=np.float32)
        w[1, 2] = 70000.0
        c = Converted("mlp", {"0.weight": w, "0.bias": np.zeros(2, np.float32)}, {"name": "x"}, "mlp", [])
        with self.assertRaises(ConvertError) as e:
            c.store_as("f16")
        self.assertEqual(str(e.exception), "--dtype f16: weight 0.weight [1][2] = 70000 does not fit in f16 (largest "
                                           "finite 65504); use --dtype bf16")
        c.store_as("bf16")      # bf16 holds it
        self.assertEqual(c.dtypes, {"0.weight": "bf16"})
        with self.assertRaises(ConvertError) as e:
            c.store_as("f8")
        self.assertEqual(str(e.exception), "--dtype f8: expected one of f32, f16, bf16")
        g = Converted("gru", {"gru.weight_ih_l0": np.ones((6, 2), np.float32)}, {"name": "g"}, "gru", [])
        g.store_as("bf16")
        self.assertNotIn("weight_dtype", g.snippet)     # the CPU GRU holds f32 only: served widened
        self.assertIn("served widened to f32", g.notes[0])
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = cli.main(["convert", "m.onnx", "out", "--dtype", "f64"])
        self.assertEqual(rc, 2)
        self.assertIn("--dtype: expected f32, f16 or bf16, got 'f64'", err.getvalue())


@unittest.skipIf(np is None, f"numpy is not importable by {sys.executable}")
class Served(unittest.TestCase):
    def check(self, name, dtype, wide):
        m = made[(name, dtype)]
        layers = [(l["weight"], l["bias"], l["activation"]) for l in m["layers"]]
        model = f"{name}_{dtype}" + ("_wide" if wide else "")
        rng = np.random.default_rng(SEED + len(model))
        n_in = MODELS[name][0][0]
        with SigClient(endpoint, timeout_ms=5000) as c:
            for rows in (1, 3):
                x = rng.uniform(-1, 1, rows * n_in).astype(np.float32)
                rows_in = x.reshape(rows, n_in) if rows > 1 else x
                out = np.asarray(c.infer(model, rows_in).outputs, dtype=np.float64).ravel()
                if wide:    # the stored values, widened: float32's bound alone
                    ref = forward(load_model(m["path"], layers), x.astype(np.float64).tolist(), rows)
                else:       # the original weights; the bound adds the dtype's
                    ref = forward(chain_of(m["tensors"], m["layers"]), x.astype(np.float64).tolist(), rows,
                                  *HELD[dtype])
                for i, (got, want, bound) in enumerate(zip(out, ref, ref.bound)):
                    self.assertLessEqual(abs(got - want), 2 * bound,
                                         f"{model} rows {rows} output {i}: {got!r}, reference {want!r}, bound {bound:.3g}")
                self.assertEqual(len(out), len(ref))

    def test_held_in_the_dtype(self):
        for name in MODELS:
            for dtype in ("f16", "bf16"):
                self.check(name, dtype, wide=False)

    def test_widened_reads_the_stored_values_exactly(self):
        for name in MODELS:
            for dtype in ("f16", "bf16"):
                self.check(name, dtype, wide=True)


if __name__ == "__main__":
    if np is None:
        print(f"SKIP: numpy is not importable by {sys.executable} (Debian: python3-numpy)")
        sys.exit(0)
    sys.exit(run_in_order([StoredFiles, Served]))
