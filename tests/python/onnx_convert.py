"""sigclient-py convert: ONNX models built here answer in sigserve what they answer in ONNX.

Run by tests/python/test_convert.sh with a venv that has onnx (and onnxruntime where it installs);
by hand: BUILD=build VENV/bin/python tests/python/onnx_convert.py [--seed N] [--keep] (--seed repeats a
run's weights and inputs; --keep leaves its temporary folder). Not named test_*.py: tests/run.sh would run it with the
system python, which has no onnx.

1. Models are built with onnx.helper (onnx_graphs.py), fresh random weights each run (the seed is
   printed): MLPs of irregular shapes with every activation, Gemm (transB 0 and 1, bias [N], [1, N] or none) and
   MatMul (+ Add, bias on either side), Flatten/Reshape no-ops, float16 weights through Cast, a
   float64 graph; LSTMs of 1, 2 and 3 layers, batch-first (Transpose) and sequence-first inputs,
   static and dynamic sequence lengths (--window), --dtype f16 and bf16 (within a pooled 2e-3 / 2e-2
   of the float32 graph), layers joined as both torch exporters join them
   (Squeeze; Transpose + a Reshape whose shape is computed from Shape), heads on Y's last step
   (Gather, Slice), on Y_h and on torch's h_n (Concat + Gather), zero initial states as
   initializers, ConstantOfShape or Expand, no head (an identity head is written).
2. Each is converted with `sigclient-py convert`, served together by the real sigserve (CPU
   backend, a free loopback port) and sent random inputs with the Python client (MLP rows 1 and 3;
   LSTM whole windows, rows 1 and 3, stream_id 0). The outputs must match (a) a float64 evaluator
   of the ONNX graph (onnx_graphs.evaluate: its own Gemm/MatMul/LSTM in ONNX's gate order i, o, f, c, from
   the ONNX initializers: nothing shared with the converter's mapping) and (b) onnxruntime, both
   within 1e-5 relative (||out - ref|| / ||ref||, pooled over the two requests).
3. Every refusal: exit code 2 and a message naming the node, op and attribute (exact substrings).
4. Where torch imports: an nn.Sequential MLP, nn.LSTM(batch_first=True) + nn.Linear on y[:, -1, :]
   and on h_n[-1], exported with torch.onnx.export (the TorchScript exporter, and the dynamo one
   where onnxscript imports), converted and served, compared with PyTorch in float64 (skipped,
   with a line saying why, where torch is missing).
Last line "N passed, N failed".
"""
import atexit
import contextlib
import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_graphs as og  # noqa: E402
from onnx_graphs import build_lstm, build_mlp, build_mlp_f64, build_mlp_mixed, evaluate, refused_models  # noqa: E402
from reference import run_in_order, start_sigserve, stop_sigserve  # noqa: E402

from sigclient import SigClient  # noqa: E402
from sigclient import cli  # noqa: E402
from sigclient.convert import load  # noqa: E402

try:
    import onnxruntime
    ORT_WHY = None
except ImportError as e:
    onnxruntime, ORT_WHY = None, str(e)

BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
ARGS = sys.argv[1:]
SEED = int(ARGS[ARGS.index("--seed") + 1]) if "--seed" in ARGS else time.time_ns() % (1 << 31)
TOL = 1e-5
print(f"seed {SEED} (--seed {SEED} repeats this run's weights and inputs)", flush=True)
og.seed(SEED)
tmp = tempfile.mkdtemp(prefix="sigserve-convert-")
if "--keep" not in ARGS:            # --keep leaves the models, the converted files and the logs
    atexit.register(shutil.rmtree, tmp, True)


# ---------------------------------------------------------------- the references

def run_onnxruntime(path, x, dtype):
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.astype(dtype)})[0].astype(np.float64)


def rel(got, ref):
    got, ref = np.asarray(got, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    if got.shape != ref.shape or not np.all(np.isfinite(got)):
        return float("inf")
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / den) if den else float(np.linalg.norm(got))


# ---------------------------------------------------------------- the models served

def convert_cli(*args):
    """sigclient-py convert ARGS in process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["convert", *[str(a) for a in args]])
    return rc, out.getvalue(), err.getvalue()


# name -> (builder, convert options, kind: "mlp", or "lstm" with a batch-first input, or "lstm_seq" without)
ACCEPTED = {
    "mlp_gemm": (lambda: build_mlp([37, 19, 5, 1], ["gemm1", "gemm0_c2d", "gemm1"], ["relu", "tanh", "sigmoid"]),
                 [], "mlp"),
    "mlp_matmul": (lambda: build_mlp([512, 256, 64, 1], ["matmul_add", "add_first", "matmul"],
                                     ["relu", "tanh", "identity"]), [], "mlp"),
    "mlp_gemm_nobias": (lambda: build_mlp([9, 4, 2], ["gemm1_nobias", "gemm0"], ["tanh", "none"], batch="batch"),
                        [], "mlp"),
    "mlp_mixed": (build_mlp_mixed, [], "mlp"),
    "mlp_wide": (lambda: build_mlp([2048, 3], ["gemm1"], ["tanh"]), [], "mlp"),
    "mlp_f64": (build_mlp_f64, [], "mlp"),
    "lstm1": (lambda: build_lstm(7, 13, 1, 5, init="zeros", batch=1), [], "lstm"),
    "lstm2": (lambda: build_lstm(16, 32, 2, None, batch_first=False, read="y_h", head="matmul_tanh", init="shape"),
              ["--window", 8], "lstm_seq"),
    "lstm2_hn": (lambda: build_lstm(5, 8, 2, 6, read="h_n", head="sigmoid", opset=11, bias=(False, True)), [], "lstm"),
    "lstm_slice": (lambda: build_lstm(3, 4, 1, 4, batch_first=False, read="y_slice", head="none", peephole=0.0),
                   [], "lstm_seq"),
    "lstm3_dyn": (lambda: build_lstm(6, 10, 3, None, read="y_gather", head="gemm", init="shape", between="dynamo"),
                  ["--window", 3], "lstm"),
    # --dtype: the weight matrices stored (and held) in half precision
    "mlp_matmul_bf16": (lambda: build_mlp([512, 256, 64, 1], ["matmul_add", "add_first", "matmul"],
                                          ["relu", "tanh", "identity"]), ["--dtype", "bf16"], "mlp"),
    "mlp_gemm_f16": (lambda: build_mlp([37, 19, 5, 1], ["gemm1", "gemm0_c2d", "gemm1"], ["relu", "tanh", "sigmoid"]),
                     ["--dtype", "f16"], "mlp"),
    "lstm1_bf16": (lambda: build_lstm(7, 13, 1, 5, init="zeros", batch=1), ["--dtype", "bf16"], "lstm"),
}
# The pooled relative error a --dtype model may show against the float32 graph (sanity limits, as
# sigbench's: each output's own bound is held by tests/python/test_convert_dtypes.py).
TOL_OF = {"mlp_matmul_bf16": 2e-2, "mlp_gemm_f16": 2e-3, "lstm1_bf16": 2e-2}

server = None
models = {}         # name -> dict(model, path, snippet, kind, out (what convert printed), dims)


def input_info(model):
    dims = [d.dim_value if d.HasField("dim_value") else None for d in model.graph.input[0].type.tensor_type.shape.dim]
    return dims


def setUpModule():
    global server
    for name, (build, options, kind) in ACCEPTED.items():
        model = build()
        path = os.path.join(tmp, f"{name}.onnx")
        onnx.checker.check_model(model)
        onnx.save(model, path)
        rc, out, err = convert_cli(path, os.path.join(tmp, name), *options)
        if rc != 0:
            raise AssertionError(f"convert {name}: exit {rc}: {err}")
        with open(os.path.join(tmp, name + ".json")) as f:
            snippet = json.load(f)
        models[name] = dict(model=model, path=path, snippet=snippet, kind=kind, out=out, dims=input_info(model))
    server, models["_endpoint"] = start_sigserve(
        BUILD, os.path.join(tmp, "sigserve.json"),
        [dict({"max_rows": 8}, **m["snippet"], backend="cpu") for m in models.values()],
        os.path.join(tmp, "sigserve.log"))


def tearDownModule():
    stop_sigserve(server)


class Test1Served(unittest.TestCase):
    """Each converted model, served, answers what the ONNX graph computes."""

    def check(self, name, features_per_row, to_onnx):
        """Requests of 1 and 3 rows; the error is pooled over both (||out - ref|| / ||ref|| over the 4
        rows' outputs, as the project's other numeric tests pool): one scalar output near zero alone
        would make float32 rounding look large."""
        m = models[name]
        dtype = np.float64 if name == "mlp_f64" else np.float32
        static_batch = m["dims"][1] if m["kind"] == "lstm_seq" else m["dims"][0]
        got, ref, ort = [], [], []
        with SigClient(models["_endpoint"], timeout_ms=5000) as client:
            for rows in (1, 3):
                feats = og.RNG.uniform(-1, 1, size=(rows, features_per_row)).astype(np.float32)
                out = np.array(client.infer(name, feats.ravel().tolist(), rows=rows).outputs).reshape(rows, -1)
                got.append(out)
                # a graph with a static batch takes one row at a time
                parts = [feats[r:r + 1] for r in range(rows)] if static_batch else [feats]
                ref.append(np.concatenate([evaluate(m["model"], to_onnx(p)).reshape(p.shape[0], -1) for p in parts]))
                if onnxruntime is not None:
                    ort.append(np.concatenate([run_onnxruntime(m["path"], to_onnx(p), dtype).reshape(p.shape[0], -1)
                                               for p in parts]))
        got, ref = np.concatenate(got), np.concatenate(ref)
        err = rel(got, ref)
        line = f"{name}, rows 1 and 3: {got.shape[1]} outputs a row, vs float64 reference {err:.2g}"
        if ort:
            e2 = rel(got, np.concatenate(ort))
            line += f", vs onnxruntime {e2:.2g}"
        print("   ", line, flush=True)
        self.assertLessEqual(err, TOL_OF.get(name, TOL), f"{name}: vs float64 reference {err:.3g}")
        if ort:
            self.assertLessEqual(e2, TOL_OF.get(name, TOL), f"{name}: vs onnxruntime {e2:.3g}")

    def check_mlp(self, name):
        n = models[name]["dims"][1]
        self.check(name, n, lambda f: f)

    def check_lstm(self, name):
        m = models[name]
        window, batch_first = m["snippet"]["window"], m["kind"] == "lstm"
        n_in = m["dims"][2]

        def to_onnx(f):         # a row: window x inputs, step after step
            x = f.reshape(f.shape[0], window, n_in)
            return x if batch_first else x.transpose(1, 0, 2)
        self.check(name, window * n_in, to_onnx)

    def test_mlp_gemm(self):
        self.check_mlp("mlp_gemm")

    def test_mlp_matmul(self):
        self.check_mlp("mlp_matmul")

    def test_mlp_gemm_nobias(self):
        self.check_mlp("mlp_gemm_nobias")
        self.assertEqual([layer["bias"] for layer in models["mlp_gemm_nobias"]["snippet"]["layers"]], [None, "1.bias"])

    def test_mlp_mixed(self):
        self.check_mlp("mlp_mixed")

    def test_mlp_wide(self):
        """2048 inputs: 16 rows would not fit the default max_message_bytes, so convert sets max_rows."""
        self.check_mlp("mlp_wide")
        self.assertEqual(models["mlp_wide"]["snippet"]["max_rows"], 7)
        self.assertIn('note: "max_rows": 7, the most rows of 2048 features a request can carry within the default '
                      'server.max_message_bytes (65536)', models["mlp_wide"]["out"])
        self.assertNotIn("max_rows", models["mlp_gemm"]["snippet"])

    def test_mlp_f64(self):
        self.check_mlp("mlp_f64")
        self.assertIn("float64 with every value a float32: converted exactly", models["mlp_f64"]["out"])

    def test_lstm1(self):
        self.check_lstm("lstm1")

    def test_lstm2(self):
        self.check_lstm("lstm2")

    def test_lstm2_hn(self):
        self.check_lstm("lstm2_hn")

    def test_lstm_slice(self):
        self.check_lstm("lstm_slice")
        self.assertIn("an identity head (4 -> 4)", models["lstm_slice"]["out"])

    def test_lstm3_dyn(self):
        self.check_lstm("lstm3_dyn")

    def test_dtypes(self):
        """--dtype: F16 / BF16 weight matrices, F32 biases, held so by the entry (an MLP: f16 and bf16, an
        LSTM: bf16), said in a note; served within the dtype's error."""
        for name, dtype in (("mlp_matmul_bf16", "bf16"), ("mlp_gemm_f16", "f16"), ("lstm1_bf16", "bf16")):
            m = models[name]
            self.check_lstm(name) if m["kind"] == "lstm" else self.check_mlp(name)
            self.assertEqual(m["snippet"]["weight_dtype"], dtype)
            self.assertIn(f"note: weight matrices stored as {dtype} (each rounded to nearest even", m["out"])
            with open(os.path.join(tmp, name + ".safetensors"), "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
            for tensor, info in header.items():
                self.assertEqual(info["dtype"], dtype.upper() if len(info["shape"]) == 2 else "F32", (name, tensor))

    def test_snippets(self):
        """What convert wrote and printed: the config entry, weights relative to it, the shape line."""
        s = models["mlp_gemm"]["snippet"]
        self.assertEqual(s, {"name": "mlp_gemm", "weights": "mlp_gemm.safetensors", "layers": [
            {"weight": "0.weight", "bias": "0.bias", "activation": "relu"},
            {"weight": "1.weight", "bias": "1.bias", "activation": "tanh"},
            {"weight": "2.weight", "bias": "2.bias", "activation": "sigmoid"}]})
        out = models["mlp_gemm"]["out"].splitlines()
        self.assertRegex(out[0], r"^wrote .*/mlp_gemm\.safetensors \(6 tensors, \d+ bytes\)$")
        self.assertRegex(out[1], r'^wrote .*/mlp_gemm\.json \(model "mlp_gemm"')
        self.assertEqual(out[2], "mlp: 37 -> 19 (relu) -> 5 (tanh) -> 1 (sigmoid)")
        s = models["lstm2"]["snippet"]
        self.assertEqual(s, {"name": "lstm2", "type": "lstm", "weights": "lstm2.safetensors", "lstm": "lstm.",
                             "window": 8, "head": {"weight": "head.weight", "bias": "head.bias",
                                                   "activation": "tanh"}})
        self.assertIn("lstm: 2 layers, 16 inputs a step, hidden 32, window 8, head 32 -> 1 (tanh); a request row is "
                      "one window: 8 x 16 = 128 features, step after step (the ONNX input is [steps, batch, "
                      "features])", models["lstm2"]["out"])
        # the header: 8-byte little-endian length, F32 tensors, data in order
        with open(os.path.join(tmp, "lstm2.safetensors"), "rb") as f:
            data = f.read()
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        self.assertEqual((8 + n) % 8, 0)
        self.assertEqual(sorted(header), sorted([f"lstm.{k}_l{i}" for k in ("weight_ih", "weight_hh", "bias_ih",
                                                                              "bias_hh") for i in (0, 1)]
                                                + ["head.weight", "head.bias"]))
        self.assertEqual(header["lstm.weight_ih_l0"], {"dtype": "F32", "shape": [128, 16], "data_offsets": [0, 8192]})
        self.assertEqual(len(data), 8 + n + max(v["data_offsets"][1] for v in header.values()))

    def test_command_line(self):
        """The installed sigclient-py: --name, the OUT prefix in another folder, exit codes."""
        exe = os.path.join(os.path.dirname(sys.executable), "sigclient-py")
        cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "sigclient"]
        sub = os.path.join(tmp, "sub")
        os.makedirs(sub, exist_ok=True)
        p = subprocess.run(cmd + ["convert", models["lstm1"]["path"], os.path.join(sub, "seq.json"),
                                  "--name", "tick_seq"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p)
        with open(os.path.join(sub, "seq.json")) as f:
            s = json.load(f)
        self.assertEqual((s["name"], s["weights"], s["window"]), ("tick_seq", "seq.safetensors", 5))
        p = subprocess.run(cmd + ["convert", models["lstm1"]["path"]], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("convert needs MODEL.onnx and OUT", p.stderr)
        p = subprocess.run(cmd + ["convert", models["lstm1"]["path"], "o", "--window", "0"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual((p.returncode, p.stderr.splitlines()[0]), (2, "sigclient-py: bad --window '0' (1 to 4096)"))
        p = subprocess.run(cmd + ["--help"], capture_output=True, text=True, timeout=60)
        self.assertIn("convert MODEL.onnx OUT [--name N] [--window W]", p.stdout)

    def test_api(self):
        """The function API: load() converts without writing; its snippet is the JSON's."""
        c = load(models["mlp_matmul"]["path"], name="api")
        self.assertEqual(c.kind, "mlp")
        self.assertEqual(c.snippet["name"], "api")
        np.testing.assert_array_equal(c.tensors["0.weight"],
                                      numpy_helper.to_array(models["mlp_matmul"]["model"].graph.initializer[0]).T)


class Test2Refused(unittest.TestCase):
    """Every refusal: exit code 2, the message names the node, op and attribute, nothing written.
    One test per case (test_refuses_NAME), made from refused_models() below the class."""

    def check_refused(self, name, model, options, text):
        path = os.path.join(tmp, f"bad_{name}.onnx")
        with open(path, "wb") as f:
            f.write(model if isinstance(model, bytes) else model.SerializeToString())
        rc, out, err = convert_cli(path, os.path.join(tmp, f"bad_{name}"), *options)
        self.assertEqual((rc, out), (2, ""), f"{name}: {out}{err}")
        self.assertIn(text, err)
        self.assertTrue(err.startswith("sigclient-py: "), err)
        self.assertFalse(os.path.exists(os.path.join(tmp, f"bad_{name}.json")))
        self.assertFalse(os.path.exists(os.path.join(tmp, f"bad_{name}.safetensors")))
        print(f"    {err.strip()}", flush=True)

    def test_missing_file(self):
        missing = os.path.join(tmp, "missing.onnx")
        rc, out, err = convert_cli(missing, os.path.join(tmp, "missing"))
        self.assertEqual((rc, out), (2, ""))
        self.assertEqual(err, f"sigclient-py: cannot read {missing}: No such file or directory\n")


    def test_unwritable_output(self):
        out = os.path.join(tmp, "no-such-folder", "m")
        rc, stdout, err = convert_cli(models["mlp_gemm"]["path"], out)
        self.assertEqual((rc, stdout), (2, ""))
        self.assertEqual(err, f"sigclient-py: cannot write {out}.safetensors: No such file or directory\n")

    def test_bad_name(self):
        rc, stdout, err = convert_cli(models["mlp_gemm"]["path"], os.path.join(tmp, "m"), "--name", "a b")
        self.assertEqual((rc, err), (2, "sigclient-py: model name 'a b': expected 1 to 63 of A-Z a-z 0-9 _ . -\n"))


def _refusal_test(name, model, options, text):
    def test(self):
        self.check_refused(name, model, options, text)
    return test


for _name, _case in refused_models().items():
    setattr(Test2Refused, f"test_refuses_{_name}", _refusal_test(_name, *_case))


# ---------------------------------------------------------------- torch.onnx.export, where torch is

class Test3Torch(unittest.TestCase):
    """torch.onnx.export's graphs (the TorchScript exporter and, where onnxscript imports, the dynamo
    one, torch's default since 2.9), converted and served, answer what PyTorch answers in float64."""

    def test_torch_export(self):
        try:
            import torch
        except ImportError as e:
            print(f"    torch export case skipped: torch does not import here ({e}); not counted as a failure")
            return
        import copy
        torch.manual_seed(SEED)

        class Last(torch.nn.Module):        # y[:, -1, :] of a batch-first LSTM, then a Linear
            def __init__(self, inputs, hidden, layers, outputs):
                super().__init__()
                self.lstm = torch.nn.LSTM(inputs, hidden, num_layers=layers, batch_first=True)
                self.head = torch.nn.Linear(hidden, outputs)

            def forward(self, x):
                return self.head(self.lstm(x)[0][:, -1, :])

        class HN(Last):                     # h_n[-1]: the last layer's last hidden state
            def forward(self, x):
                _, (h, _) = self.lstm(x)
                return self.head(h[-1])

        cases = [("mlp", torch.nn.Sequential(torch.nn.Linear(37, 19), torch.nn.ReLU(), torch.nn.Linear(19, 5),
                                             torch.nn.Tanh(), torch.nn.Linear(5, 1), torch.nn.Sigmoid()), (2, 37)),
                 ("lstm2", Last(7, 13, 2, 3), (2, 5, 7)),
                 ("lstm_hn", HN(16, 32, 2, 1), (2, 8, 16)),
                 ("lstm1_b1", Last(4, 6, 1, 2), (1, 3, 4))]
        exporters = []
        if "dynamo" in torch.onnx.export.__code__.co_varnames:
            exporters.append("torchscript")
            try:
                importlib.import_module("onnxscript")
                exporters.append("dynamo")
            except ImportError as e:
                print(f"    the dynamo exporter is left out: onnxscript does not import ({e})")
        else:
            exporters.append("torchscript")
        served, snippets = [], []
        for case, net, shape in cases:
            net = net.float().eval()
            for exporter in exporters:
                name = f"torch_{case}_{exporter}"
                path = os.path.join(tmp, name + ".onnx")
                x0 = torch.zeros(shape)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        if exporter == "dynamo":
                            dyn = ({0: torch.export.Dim("N")},) if shape[0] > 1 else None
                            torch.onnx.export(net, (x0,), path, input_names=["x"], output_names=["y"],
                                              dynamic_shapes=dyn, dynamo=True)
                        else:
                            kw = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
                            dyn = {"x": {0: "N"}, "y": {0: "N"}} if shape[0] > 1 else None
                            torch.onnx.export(net, x0, path, input_names=["x"], output_names=["y"],
                                              dynamic_axes=dyn, **kw)
                ops = sorted({n.op_type for n in onnx.load(path).graph.node})
                rc, out, err = convert_cli(path, os.path.join(tmp, name))
                self.assertEqual(rc, 0, f"{name} ({', '.join(ops)}): {err}")
                with open(os.path.join(tmp, name + ".json")) as f:
                    snippets.append(dict(json.load(f), backend="cpu"))
                served.append((name, net, shape, path, ops))
        cfg = os.path.join(tmp, "torch.json")
        proc, endpoint = start_sigserve(BUILD, cfg, snippets, cfg + ".log")
        try:
            with SigClient(endpoint, timeout_ms=5000) as client:
                for name, net, shape, path, ops in served:
                    rows = 3
                    x = torch.rand((rows,) + shape[1:]) * 2 - 1
                    got = np.array(client.infer(name, x.numpy().ravel().tolist(), rows=rows).outputs)
                    ref_net = copy.deepcopy(net).double()
                    with torch.no_grad():
                        ref = torch.cat([ref_net(x[r:r + 1].double()) for r in range(rows)]).numpy()
                    err = rel(got, ref)
                    self.assertLessEqual(err, TOL, f"{name}: vs torch float64 {err:.3g}")
                    line = f"{name} ({' '.join(ops)}): vs torch float64 {err:.2g}"
                    if onnxruntime is not None:
                        ort = np.concatenate([run_onnxruntime(path, x[r:r + 1].numpy(), np.float32)
                                              for r in range(rows)])
                        e2 = rel(got, ort)
                        self.assertLessEqual(e2, TOL, f"{name}: vs onnxruntime {e2:.3g}")
                        line += f", vs onnxruntime {e2:.2g}"
                    print("   ", line, flush=True)
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    if onnxruntime is None:
        print(f"note: onnxruntime does not import ({ORT_WHY}): outputs are checked against the float64 reference only")
    sys.exit(run_in_order([Test1Served, Test2Refused, Test3Torch]))
