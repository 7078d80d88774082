"""sigclient-py convert: ONNX GRUs built here answer in sigserve what they answer in ONNX.

Run by test_convert.sh after onnx_convert.py, in its virtual environment (onnx, numpy, the package;
onnxruntime where pip could get it). Standalone: BUILD=build python3 tests/python/onnx_convert_gru.py.

1. GRU graphs are built with onnx.helper as torch.onnx.export writes an nn.GRU(batch_first=True) +
   nn.Linear on the last step: a batch-first input through Transpose, GRU nodes with
   linear_before_reset 1 (PyTorch's n = tanh (W_n x + b_in + r (R_n h + b_hn))), ONNX's gate order
   z, r, h, the head reading Y_h (Squeeze) or Y's last step (Gather); one layer and three stacked
   (Y with its direction axis squeezed), odd widths, without B, a sequence-first input.
2. Each is converted (`sigclient.convert.load`: "type": "gru", gates reordered to r, z, n), served
   together by the real sigserve (CPU backend), and asked whole windows (rows 1 and 3) and a stream
   longer than its window. The outputs must match a float64 evaluator of the ONNX graph written
   below from ONNX's GRU definition (gate order z, r, h, as the file has it: an independent path to
   the same numbers), and onnxruntime where it is installed, by pooled ||out - ref|| / ||ref|| <= 1e-5.
3. Refusals name the node and the attribute: linear_before_reset 0 (ONNX's default: another
   function), a bidirectional GRU, clip, a GRU stacked on an LSTM.
Last line "N passed, N failed".
"""
import os
import sys
import tempfile
import time
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import run_in_order, start_sigserve, stop_sigserve  # noqa: E402

from sigclient import SigClient  # noqa: E402
from sigclient.convert import ConvertError, load  # noqa: E402

try:
    import onnxruntime
except ImportError:
    onnxruntime = None

BUILD = os.environ.get("BUILD", "build")
RNG = np.random.default_rng(int(time.time()))
TOL = 1e-5
tmp = tempfile.mkdtemp(prefix="sigserve-convert-gru-")
server = None
models = {}


class Builder:
    """A graph under construction: nodes, initializers, fresh names."""

    def __init__(self, opset=13):
        self.opset, self.nodes, self.inits, self.count = opset, [], [], 0

    def name(self, stem):
        self.count += 1
        return f"{stem}{self.count}"

    def const(self, value, stem="c"):
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, inputs, outputs=1, name=None, **attrs):
        name = name or self.name(op.lower())
        outs = [f"{name}_out{k}" if k else f"{name}_out" for k in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def model(self, x_shape, out):
        graph = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)     # the output's shape, which the checker wants


def gru_node(g, x, n_in, hidden, name, bias=True, op="GRU", **attrs):
    """A GRU (ONNX's gate order z, r, h; weights uniform in +-1/sqrt(hidden) as PyTorch draws them)."""
    gates = 4 if op == "LSTM" else 3
    s = 1 / np.sqrt(hidden)
    w = g.const(RNG.uniform(-s, s, (1, gates * hidden, n_in)).astype(np.float32), "W")
    r = g.const(RNG.uniform(-s, s, (1, gates * hidden, hidden)).astype(np.float32), "R")
    inputs = [x, w, r]
    if bias:
        inputs.append(g.const(RNG.uniform(-s, s, (1, 2 * gates * hidden)).astype(np.float32), "B"))
    if op == "GRU":
        attrs.setdefault("linear_before_reset", 1)
    return g.node(op, inputs, outputs=2, name=name, hidden_size=hidden, **attrs)


def build(n_in, hidden, layers, window, outputs, read="y_h", bias=True, batch_first=True, head_act=None):
    g = Builder()
    x = g.node("Transpose", ["x"], perm=[1, 0, 2]) if batch_first else "x"
    y = y_h = None
    for k in range(layers):
        y, y_h = gru_node(g, x, n_in if k == 0 else hidden, hidden, f"gru{k}", bias=bias)
        x = g.node("Squeeze", [y, g.const(np.array([1], dtype=np.int64))])
    if read == "y_h":
        last = g.node("Squeeze", [y_h, g.const(np.array([0], dtype=np.int64))])
    else:   # Y [S, 1, B, H] -> the last step [1, B, H] -> [B, H]
        step = g.node("Gather", [y, g.const(np.array(window - 1, dtype=np.int64))], axis=0)
        last = g.node("Squeeze", [step, g.const(np.array([0], dtype=np.int64))])
    s = 1 / np.sqrt(hidden)
    wh = g.const(RNG.uniform(-s, s, (outputs, hidden)).astype(np.float32), "head_w")
    bh = g.const(RNG.uniform(-s, s, (outputs,)).astype(np.float32), "head_b")
    out = g.node("Gemm", [last, wh, bh], name="head", transB=1)
    if head_act:
        out = g.node(head_act, [out])
    shape = ["N", window, n_in] if batch_first else [window, "N", n_in]
    return g.model(shape, out)


# ---- the float64 evaluator: ONNX's definitions, gate order z, r, h as the graph holds them ----

def _sig(v):
    return 1 / (1 + np.exp(-v))


def evaluate(model, x):
    """The graph's output for input X (float64), op by op."""
    vals = {"x": x.astype(np.float64)}
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    vals.update(inits)
    for n in model.graph.node:
        a = {at.name: helper.get_attribute_value(at) for at in n.attribute}
        i = [vals[v] if v else None for v in n.input]
        if n.op_type == "Transpose":
            out = [np.transpose(i[0], a["perm"])]
        elif n.op_type == "Squeeze":
            out = [np.squeeze(i[0], axis=tuple(int(v) for v in i[1]))]
        elif n.op_type == "Gather":
            out = [np.take(i[0], int(i[1]), axis=a.get("axis", 0))]
        elif n.op_type == "Gemm":
            out = [i[0] @ (i[1].T if a.get("transB", 0) else i[1]) + i[2]]
        elif n.op_type in ("Tanh", "Sigmoid", "Relu"):
            f = {"Tanh": np.tanh, "Sigmoid": _sig, "Relu": lambda v: np.maximum(v, 0)}[n.op_type]
            out = [f(i[0])]
        elif n.op_type == "GRU":
            X, W, R = i[0], i[1][0], i[2][0]
            H = R.shape[1]
            B = i[3][0] if len(i) > 3 and i[3] is not None else np.zeros(6 * H)
            Wz, Wr, Wh = np.split(W, 3)
            Rz, Rr, Rh = np.split(R, 3)
            wbz, wbr, wbh, rbz, rbr, rbh = np.split(B, 6)
            h = np.zeros((X.shape[1], H))
            ys = []
            for t in range(X.shape[0]):
                xt = X[t]
                z = _sig(xt @ Wz.T + h @ Rz.T + wbz + rbz)
                r = _sig(xt @ Wr.T + h @ Rr.T + wbr + rbr)
                hh = np.tanh(xt @ Wh.T + r * (h @ Rh.T + rbh) + wbh)     # linear_before_reset = 1
                h = (1 - z) * hh + z * h
                ys.append(h)
            out = [np.stack(ys)[:, None], h[None]]
        else:
            raise AssertionError(f"the evaluator has no {n.op_type}")
        for name, v in zip(n.output, out):
            vals[name] = v
    return vals[model.graph.output[0].name]


def rel(got, ref):
    got, ref = np.asarray(got, dtype=np.float64).ravel(), np.asarray(ref, dtype=np.float64).ravel()
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


CASES = {
    # name: (inputs, hidden, layers, window, outputs, read, bias, batch_first, head activation)
    "gru1": (5, 7, 1, 4, 1, "y_h", True, True, None),
    "gru3": (9, 17, 3, 6, 3, "y_last", True, True, "Tanh"),
    "gru_nob": (3, 16, 2, 5, 2, "y_h", False, True, None),
    "gru_seq": (4, 33, 1, 3, 2, "y_last", True, False, "Sigmoid"),
}


def setUpModule():
    global server
    for name, (n_in, hidden, layers, window, outs, read, bias, bf, act) in CASES.items():
        m = build(n_in, hidden, layers, window, outs, read, bias, bf, act)
        conv = load_model(m, name)
        snippet = conv.write(os.path.join(tmp, name))
        models[name] = dict(model=m, snippet=snippet, conv=conv, window=window, n_in=n_in, batch_first=bf)
    server, models["_endpoint"] = start_sigserve(
        BUILD, os.path.join(tmp, "sigserve.json"),
        [dict(m["snippet"], backend="cpu", max_rows=3, max_streams=8) for m in models.values()],
        os.path.join(tmp, "sigserve.log"))


def load_model(m, name):
    path = os.path.join(tmp, name + ".onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return load(path, name=name)


def tearDownModule():
    stop_sigserve(server)


def onnx_input(m, windows):
    """WINDOWS [rows, window, inputs] as the graph takes them."""
    return windows if m["batch_first"] else np.transpose(windows, (1, 0, 2))


class Test1Converted(unittest.TestCase):
    """What the converter makes of each graph: the type, the tensors in PyTorch's names, the snippet."""

    def test_snippets(self):
        for name, (n_in, hidden, layers, window, outs, read, bias, bf, act) in CASES.items():
            conv, snippet = models[name]["conv"], models[name]["snippet"]
            self.assertEqual(conv.kind, "gru")
            self.assertEqual(snippet["type"], "gru")
            self.assertEqual(snippet["gru"], "gru.")
            self.assertEqual(snippet["window"], window)
            self.assertNotIn("lstm", snippet)
            for k in range(layers):
                self.assertEqual(conv.tensors[f"gru.weight_ih_l{k}"].shape, (3 * hidden, n_in if k == 0 else hidden))
                self.assertEqual(conv.tensors[f"gru.weight_hh_l{k}"].shape, (3 * hidden, hidden))
                self.assertEqual(conv.tensors[f"gru.bias_hh_l{k}"].shape, (3 * hidden,))
            self.assertTrue(conv.shape.startswith(f"gru: {layers} layer"), conv.shape)

    def test_gates_reordered(self):
        """ONNX's z, r, h blocks become PyTorch's r, z, n."""
        m = models["gru1"]["model"]
        w = next(numpy_helper.to_array(t) for t in m.graph.initializer if t.name == m.graph.node[1].input[1])[0]
        z, r, h = np.split(w, 3)
        np.testing.assert_array_equal(models["gru1"]["conv"].tensors["gru.weight_ih_l0"], np.concatenate([r, z, h]))


class Test2Served(unittest.TestCase):
    """Each converted GRU, served, answers what the ONNX graph computes."""

    def test_windows(self):
        with SigClient(models["_endpoint"], timeout_ms=5000) as client:
            for name in CASES:
                m = models[name]
                got, ref, ort = [], [], []
                for rows in (1, 3):
                    wins = RNG.uniform(-1, 1, (rows, m["window"], m["n_in"])).astype(np.float32)
                    got.append(client.infer(name, wins.ravel().tolist(), rows=rows).outputs)
                    ref.append(evaluate(m["model"], onnx_input(m, wins)))
                    if onnxruntime is not None:
                        s = onnxruntime.InferenceSession(m["model"].SerializeToString(),
                                                         providers=["CPUExecutionProvider"])
                        ort.append(s.run(None, {"x": onnx_input(m, wins)})[0])
                e = rel(np.concatenate([np.ravel(v) for v in got]), np.concatenate([np.ravel(v) for v in ref]))
                self.assertLessEqual(e, TOL, f"{name}: whole windows, relative error {e:.3g} against the evaluator")
                if ort:
                    e2 = rel(np.concatenate([np.ravel(v) for v in ort]), np.concatenate([np.ravel(v) for v in ref]))
                    self.assertLessEqual(e2, TOL, f"{name}: onnxruntime against the evaluator {e2:.3g}")

    def test_streams(self):
        """A stream of more steps than the window: each output is the graph over the last `window` steps,
        zeros before the first."""
        with SigClient(models["_endpoint"], timeout_ms=5000) as client:
            for k, name in enumerate(CASES):
                m = models[name]
                W, n = m["window"], m["n_in"]
                steps = RNG.uniform(-1, 1, (2 * W + 3, n)).astype(np.float32)
                stream = client.stream(name, 100 + k)
                got, ref = [], []
                for t in range(len(steps)):
                    got.append(stream.step(steps[t].tolist()).outputs)
                    win = np.zeros((1, W, n), dtype=np.float32)
                    part = steps[max(0, t + 1 - W):t + 1]
                    win[0, W - len(part):] = part
                    ref.append(evaluate(m["model"], onnx_input(m, win)))
                e = rel(np.concatenate([np.ravel(v) for v in got]), np.concatenate([np.ravel(v) for v in ref]))
                self.assertLessEqual(e, TOL, f"{name}: stream, relative error {e:.3g}")


class Test3Refused(unittest.TestCase):
    """What sigserve does not compute is refused, naming the node and the attribute."""

    def refused(self, m, text):
        with self.assertRaises(ConvertError) as cm:
            load_model(m, "refused")
        self.assertIn(text, str(cm.exception))

    def one(self, op="GRU", below=None, **attrs):
        g = Builder()
        x = g.node("Transpose", ["x"], perm=[1, 0, 2])
        if below:
            y, _ = gru_node(g, x, 3, 4, "low", op=below)
            x = g.node("Squeeze", [y, g.const(np.array([1], dtype=np.int64))])
        _, y_h = gru_node(g, x, 4 if below else 3, 4, "g0", op=op, **attrs)
        last = g.node("Squeeze", [y_h, g.const(np.array([0], dtype=np.int64))])
        return g.model(["N", 2, 3], last)

    def test_linear_before_reset_0(self):
        self.refused(self.one(linear_before_reset=0), 'GRU node "g0": linear_before_reset = 0')

    def test_bidirectional(self):
        self.refused(self.one(direction="bidirectional"), 'GRU node "g0": direction "bidirectional"')

    def test_clip(self):
        self.refused(self.one(clip=3.0), 'GRU node "g0": clip = 3')

    def test_gru_on_an_lstm(self):
        self.refused(self.one(below="LSTM"), 'GRU node "g0": stacked on LSTM node "low"')


if __name__ == "__main__":
    print(f"onnxruntime: {'yes' if onnxruntime is not None else 'not installed (the evaluator alone)'}")
    sys.exit(run_in_order([Test1Converted, Test2Served, Test3Refused]))
