"""sigclient-py convert: ONNX models built here answer in sigserve what they answer in ONNX.

Run by tests/python/test_convert.sh with a venv that has onnx (and onnxruntime where it installs);
by hand: BUILD=build VENV/bin/python tests/python/onnx_convert.py [--seed N] [--keep] (--seed repeats a
run's weights and inputs; --keep leaves its temporary folder). Not named test_*.py: tests/run.sh would run it with the
system python, which has no onnx.

1. Models are built with onnx.helper, fresh random weights each run (the seed is printed): MLPs of
   irregular shapes with every activation, Gemm (transB 0 and 1, bias [N], [1, N] or none) and
   MatMul (+ Add, bias on either side), Flatten/Reshape no-ops, float16 weights through Cast, a
   float64 graph; LSTMs of 1, 2 and 3 layers, batch-first (Transpose) and sequence-first inputs,
   static and dynamic sequence lengths (--window), layers joined as both torch exporters join them
   (Squeeze; Transpose + a Reshape whose shape is computed from Shape), heads on Y's last step
   (Gather, Slice), on Y_h and on torch's h_n (Concat + Gather), zero initial states as
   initializers, ConstantOfShape or Expand, no head (an identity head is written).
2. Each is converted with `sigclient-py convert`, served together by the real sigserve (CPU
   backend, a free loopback port) and sent random inputs with the Python client (MLP rows 1 and 3;
   LSTM whole windows, rows 1 and 3, stream_id 0). The outputs must match (a) a float64 evaluator
   of the ONNX graph written below (its own Gemm/MatMul/LSTM in ONNX's gate order i, o, f, c, from
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
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import free_port, run_in_order  # noqa: E402

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
OPSET = 17
INT64_MAX = (1 << 63) - 1
print(f"seed {SEED} (--seed {SEED} repeats this run's weights and inputs)", flush=True)
RNG = np.random.default_rng(SEED)
tmp = tempfile.mkdtemp(prefix="sigserve-convert-")
if "--keep" not in ARGS:            # --keep leaves the models, the converted files and the logs
    atexit.register(shutil.rmtree, tmp, True)


# ---------------------------------------------------------------- building ONNX graphs

class G:
    """A graph under construction: nodes, initializers, and fresh tensor names."""

    def __init__(self, opset=OPSET, dtype=np.float32):
        self.nodes, self.inits, self.opset, self.dtype, self.n = [], [], opset, dtype, 0

    def name(self, base):
        self.n += 1
        return f"{base}{self.n}"

    def init(self, array, base="w", name=None):
        name = name or self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape, scale=None, dtype=None):
        fan_in = shape[-1] if len(shape) > 1 else shape[0]
        a = RNG.uniform(-1, 1, size=shape) * (scale if scale is not None else 1.5 / np.sqrt(fan_in))
        return self.init(a.astype(dtype or self.dtype))

    def ints(self, values):
        return self.init(np.array(values, dtype=np.int64), "i")

    def node(self, op, inputs, name=None, outputs=1, **attrs):
        name = name or self.name(op.lower())
        outs = [f"{name}_out{k}" if k else f"{name}_out" for k in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def squeeze(self, x, axes, name=None):
        if self.opset >= 13:
            return self.node("Squeeze", [x, self.ints(axes)], name=name)
        return self.node("Squeeze", [x], name=name, axes=axes)

    def unsqueeze(self, x, axes):
        if self.opset >= 13:
            return self.node("Unsqueeze", [x, self.ints(axes)])
        return self.node("Unsqueeze", [x], axes=axes)

    def model(self, x_shape, out, x_type=None, extra_inputs=(), outputs=None):
        elem = x_type or helper.np_dtype_to_tensor_dtype(np.dtype(self.dtype))
        inputs = [helper.make_tensor_value_info("x", elem, x_shape)] + list(extra_inputs)
        outs = outputs or [helper.make_tensor_value_info(out, elem, None)]
        graph = helper.make_graph(self.nodes, "g", inputs, outs, initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)     # the output's shape, which the checker wants


def dense(g, x, n_in, n_out, form, act, name=None):
    """One dense layer in FORM: gemm1 / gemm0 (transB), gemm1_nobias, gemm0_c2d (C [1, N]),
    matmul_add, add_first (Add(bias, MatMul)), matmul (no bias); then ACT."""
    if form.startswith("gemm"):
        trans_b = 1 if form.startswith("gemm1") else 0
        w = g.weight([n_out, n_in] if trans_b else [n_in, n_out], scale=1.5 / np.sqrt(n_in))
        inputs = [x, w]
        if "nobias" not in form:
            inputs.append(g.weight([1, n_out] if "c2d" in form else [n_out], scale=0.5))
        y = g.node("Gemm", inputs, name=name, transB=trans_b)
    else:
        w = g.weight([n_in, n_out], scale=1.5 / np.sqrt(n_in))
        y = g.node("MatMul", [x, w], name=name)
        if form == "matmul_add":
            y = g.node("Add", [y, g.weight([n_out], scale=0.5)])
        elif form == "add_first":
            y = g.node("Add", [g.weight([1, n_out], scale=0.5), y])
    if act != "none":
        y = g.node({"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "identity": "Identity"}[act], [y])
    return y


def build_mlp(sizes, forms, acts, batch="N", opset=OPSET):
    g = G(opset)
    x = "x"
    for k, (form, act) in enumerate(zip(forms, acts)):
        x = dense(g, x, sizes[k], sizes[k + 1], form, act)
    return g.model([batch, sizes[0]], x)


def build_mlp_mixed():
    """10 -> 7 (Gemm transB 0 with float16 weights Cast to float, no C, sigmoid) -> 3 (MatMul + Add);
    Flatten on the input, Reshape [-1, 7] and Identity between: no-ops. Opset 11, static batch 1."""
    g = G(11)
    flat = g.node("Flatten", ["x"], axis=1)
    w16 = g.init((RNG.uniform(-1, 1, size=(10, 7)) / 2).astype(np.float16), "w16_")
    w = g.node("Cast", [w16], to=TensorProto.FLOAT)
    h = g.node("Sigmoid", [g.node("Gemm", [flat, w])])
    h = g.node("Reshape", [g.node("Identity", [h]), g.ints([-1, 7])])
    y = dense(g, h, 7, 3, "matmul_add", "none")
    return g.model([1, 10], y)


def build_mlp_f64():
    """A float64 graph whose weights are all float32 values: converted exactly."""
    g = G(dtype=np.float64)
    h = g.node("Relu", [g.node("Gemm", ["x", g.init(RNG.uniform(-1, 1, (4, 6)).astype(np.float32).astype(np.float64)),
                                            g.init(RNG.uniform(-1, 1, 4).astype(np.float32).astype(np.float64))],
                                   transB=1)])
    y = g.node("Gemm", [h, g.init(RNG.uniform(-1, 1, (4, 2)).astype(np.float32).astype(np.float64))])
    return g.model(["N", 6], y)


def lstm_node(g, x, n_in, hidden, name, bias=True, h0="", c0="", p="", **attrs):
    """An ONNX LSTM (weights in ONNX's own order i, o, f, c: the builder never reorders anything)."""
    w = g.weight([1, 4 * hidden, n_in], scale=1.0 / np.sqrt(hidden))
    r = g.weight([1, 4 * hidden, hidden], scale=1.0 / np.sqrt(hidden))
    b = g.weight([1, 8 * hidden], scale=0.5) if bias else ""
    inputs = [x, w, r, b, "", h0, c0, p]
    while inputs and not inputs[-1]:
        inputs.pop()
    return g.node("LSTM", inputs, name=name, outputs=3, hidden_size=hidden, **attrs)


def build_lstm(n_in, hidden, layers, window, batch_first=True, read="y_gather", head="gemm", init="none",
               opset=OPSET, lstm_attrs=None, bias=(True, True), hiddens=None, peephole=None, batch="N",
               between="squeeze"):
    """A stack of LAYERS ONNX LSTMs as torch.onnx.export writes them (Transpose in for batch_first;
    BETWEEN layers: Squeeze of num_directions, the TorchScript exporter's, or "dynamo", the dynamo
    exporter's Transpose and a Reshape whose shape it computes from Shape), then READ: y_gather
    (Squeeze, Transpose, Gather -1 on the step axis), y_slice (Slice [-1:] of Y, Squeeze [0, 1]),
    y_h (Squeeze of the last Y_h), h_n (Concat of every Y_h, Gather -1), or for refusals y_all,
    y_first, y_slice_first, y_c, h_n_first, tanh; then HEAD: gemm, matmul_tanh (MatMul + Add +
    Tanh), sigmoid, two (two dense layers), all_steps, or none. INIT: none, zeros (zero
    initializers, for a static BATCH), shape (ConstantOfShape and Expand from the input's Shape,
    torch's dynamic-batch form). PEEPHOLE: a value for every element of P, else no P."""
    g = G(opset)
    hiddens = hiddens or [hidden] * layers
    x = g.node("Transpose", ["x"], perm=[1, 0, 2]) if batch_first else "x"
    outs, size = [], n_in
    for k in range(layers):
        h0 = c0 = ""
        hk = hiddens[k]
        if init == "zeros":
            h0 = g.init(np.zeros((1, batch, hk), np.float32), "h0_")
            c0 = g.init(np.zeros((1, batch, hk), np.float32), "c0_")
        elif init == "shape":
            batch = g.node("Gather", [g.node("Shape", ["x"]), g.ints(0 if batch_first else 1)], axis=0)
            dims = g.node("Concat", [g.ints([1]), g.unsqueeze(batch, [0]), g.ints([hk])], axis=0)
            h0 = g.node("ConstantOfShape", [dims], value=numpy_helper.from_array(np.zeros(1, np.float32)))
            c0 = g.node("Expand", [g.init(np.zeros((1, 1, hk), np.float32), "cz"), dims])
        p = ""
        if peephole is not None:
            p = g.init(np.full((1, 3 * hk), peephole, np.float32), "p")
        y, yh, yc = lstm_node(g, x, size, hk, f"lstm{k}", bias=bias[k % len(bias)], h0=h0, c0=c0, p=p,
                              **(lstm_attrs or {}))
        outs.append((y, yh, yc))
        if between == "dynamo":
            t = g.node("Transpose", [y], perm=[0, 2, 1, 3])
            shape = g.node("Shape", [t])
            dims = [g.node("Slice", [shape, g.ints([i]), g.ints([i + 1])]) for i in range(4)]
            merged = g.node("Reshape", [g.node("Mul", [dims[2], dims[3]]), g.ints([-1])])
            x = g.node("Reshape", [t, g.node("Concat", [dims[0], dims[1], merged], axis=0)])
        else:
            x = g.squeeze(y, [1], name=f"squeeze{k}")
        size = hk
    y, yh, yc = outs[-1]
    if read == "y_gather":
        seq = g.node("Transpose", [x], perm=[1, 0, 2]) if batch_first else x
        last = g.node("Gather", [seq, g.init(np.array(-1, np.int64), "last")], axis=1 if batch_first else 0)
    elif read == "y_first":
        seq = g.node("Transpose", [x], perm=[1, 0, 2])
        last = g.node("Gather", [seq, g.init(np.array(0, np.int64), "first")], name="first_step", axis=1)
    elif read == "y_slice":
        sl = g.node("Slice", [y, g.ints([-1]), g.ints([INT64_MAX]), g.ints([0])])
        last = g.squeeze(sl, [0, 1])
    elif read == "y_slice_first":
        sl = g.node("Slice", [y, g.ints([0]), g.ints([1]), g.ints([0])], name="first_slice")
        last = g.squeeze(sl, [0, 1])
    elif read == "y_h":
        last = g.squeeze(yh, [0])
    elif read == "y_c":
        last = g.squeeze(yc, [0])
    elif read == "h_n":
        stacked = g.node("Concat", [o[1] for o in outs], axis=0)
        last = g.node("Gather", [stacked, g.init(np.array(-1, np.int64), "top")], axis=0)
    elif read == "h_n_first":
        stacked = g.node("Concat", [o[1] for o in outs], axis=0)
        last = g.node("Gather", [stacked, g.init(np.array(0, np.int64), "bottom")], axis=0)
    elif read == "y_all":
        last = g.node("Transpose", [x], perm=[1, 0, 2])
    elif read == "tanh":
        last = g.node("Tanh", [g.squeeze(yh, [0])], name="tanh_h")
    out = last
    top = hiddens[-1]
    if head == "gemm":
        out = dense(g, last, top, 3, "gemm1", "none", name="head")
    elif head == "matmul_tanh":
        out = dense(g, last, top, 1, "matmul_add", "tanh", name="head")
    elif head == "sigmoid":
        out = dense(g, last, top, 2, "gemm0", "sigmoid", name="head")
    elif head == "two":
        out = dense(g, dense(g, last, top, 4, "gemm1", "relu", name="head"), 4, 1, "gemm1", "none", name="head2")
    elif head == "all_steps":
        out = dense(g, last, top, 2, "matmul_add", "none", name="head")
    seq = window if window else "S"
    shape = [batch, seq, n_in] if batch_first else [seq, batch, n_in]
    return g.model(shape, out)


# ---------------------------------------------------------------- the float64 reference

def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def ref_lstm(x, w, r, b, h0, c0):
    """ONNX LSTM, forward, default activations, layout 0, in ONNX's gate order i, o, f, c."""
    hidden = r.shape[-1]
    w, r = w[0], r[0]
    bias = b[0, :4 * hidden] + b[0, 4 * hidden:] if b is not None else np.zeros(4 * hidden)
    h = h0[0] if h0 is not None else np.zeros((x.shape[1], hidden))
    c = c0[0] if c0 is not None else np.zeros((x.shape[1], hidden))
    ys = []
    for t in range(x.shape[0]):
        gates = x[t] @ w.T + h @ r.T + bias
        i, o, f, cc = np.split(gates, 4, axis=1)
        i, o, f, cc = sigmoid(i), sigmoid(o), sigmoid(f), np.tanh(cc)
        c = f * c + i * cc
        h = o * np.tanh(c)
        ys.append(h)
    return np.stack(ys)[:, None], h[None], c[None]


def evaluate(model, x):
    """The graph's output for input X, every float in float64."""
    env = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in env.items()}
    env["x"] = np.asarray(x, np.float64)
    opset = model.opset_import[0].version

    def axes_of(node, a):
        if "axes" in a:
            return list(a["axes"])
        return [int(v) for v in env[node.input[1]]] if len(node.input) > 1 and node.input[1] else None

    for node in model.graph.node:
        a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
        i = [env[n] if n else None for n in node.input]
        op = node.op_type
        if op == "Gemm":
            A, B = i[0], i[1]
            y = a.get("alpha", 1.0) * (A.T if a.get("transA") else A) @ (B.T if a.get("transB") else B)
            out = [y + a.get("beta", 1.0) * i[2] if len(i) > 2 and i[2] is not None else y]
        elif op == "MatMul":
            out = [i[0] @ i[1]]
        elif op == "Add":
            out = [i[0] + i[1]]
        elif op == "Relu":
            out = [np.maximum(i[0], 0)]
        elif op == "Tanh":
            out = [np.tanh(i[0])]
        elif op == "Sigmoid":
            out = [sigmoid(i[0])]
        elif op in ("Identity",):
            out = [i[0]]
        elif op == "Cast":
            out = [i[0].astype(np.float64)]
        elif op == "Flatten":
            ax = a.get("axis", 1)
            out = [i[0].reshape(int(np.prod(i[0].shape[:ax])), -1)]
        elif op == "Reshape":
            shape = [d if d != 0 else i[0].shape[k] for k, d in enumerate(i[1])]
            out = [i[0].reshape(shape)]
        elif op == "Transpose":
            out = [np.transpose(i[0], a.get("perm"))]
        elif op == "Squeeze":
            out = [np.squeeze(i[0], axis=tuple(axes_of(node, a)))]
        elif op == "Unsqueeze":
            v = i[0]
            for ax in sorted(axes_of(node, a)):
                v = np.expand_dims(v, ax)
            out = [v]
        elif op == "Gather":
            out = [np.take(i[0], i[1], axis=a.get("axis", 0))]
        elif op == "Slice":
            v = i[0]
            axes = list(i[3]) if len(i) > 3 and i[3] is not None else list(range(len(i[1])))
            index = [slice(None)] * v.ndim
            for s, e, ax in zip(i[1], i[2], axes):
                index[ax] = slice(int(s), int(min(e, 1 << 62)))
            out = [v[tuple(index)]]
        elif op == "Concat":
            out = [np.concatenate(i, axis=a.get("axis", 0))]
        elif op == "Shape":
            out = [np.array(i[0].shape[a.get("start", 0):a.get("end")], np.int64)]
        elif op == "Mul":
            out = [i[0] * i[1]]
        elif op == "ConstantOfShape":
            out = [np.zeros([int(d) for d in i[0]])]
        elif op == "Expand":
            out = [i[0] * np.ones([int(d) for d in i[1]])]
        elif op == "LSTM":
            ins = i + [None] * (8 - len(i))
            out = list(ref_lstm(ins[0], ins[1], ins[2], ins[3], ins[5], ins[6]))
        else:
            raise NotImplementedError(f"reference: {op} (opset {opset})")
        for name, v in zip(node.output, out):
            env[name] = v
    return env[model.graph.output[0].name]


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
}

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
    port = free_port()
    config = {"server": {"endpoints": [f"tcp://127.0.0.1:{port}"], "log_level": "warn"},
              "models": [dict({"max_rows": 8}, **m["snippet"], backend="cpu") for m in models.values()]}
    with open(os.path.join(tmp, "sigserve.json"), "w") as f:
        json.dump(config, f, indent=2)
    log = open(os.path.join(tmp, "sigserve.log"), "w")
    server = subprocess.Popen([os.path.join(BUILD, "sigserve"), "--config", os.path.join(tmp, "sigserve.json")],
                              stdout=log, stderr=subprocess.STDOUT)
    models["_endpoint"] = f"tcp://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    with SigClient(models["_endpoint"], timeout_ms=200) as client:
        while True:
            if server.poll() is not None:
                raise AssertionError(f"sigserve exited {server.returncode}:\n{server_log()}")
            try:
                if client.health().ready:
                    return
            except Exception:       # Timeout while it starts
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"sigserve not ready within 30 s:\n{server_log()}")
            time.sleep(0.05)


def server_log():
    with open(os.path.join(tmp, "sigserve.log")) as f:
        return f.read()[-3000:]


def tearDownModule():
    if server is not None and server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


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
                feats = RNG.uniform(-1, 1, size=(rows, features_per_row)).astype(np.float32)
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
        self.assertLessEqual(err, TOL, f"{name}: vs float64 reference {err:.3g}")
        if ort:
            self.assertLessEqual(e2, TOL, f"{name}: vs onnxruntime {e2:.3g}")

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


# ---------------------------------------------------------------- refusals

def mlp_with(mutate, sizes=(5, 4, 2), opset=OPSET):
    """A 2-layer Gemm MLP with MUTATE(g, x) inserted: returns (graph pieces) through a builder."""
    g = G(opset)
    out = mutate(g, "x")
    return g.model(["N", sizes[0]], out)


def refused_models():
    """name -> (model or bytes, options, the substring the error must hold)."""
    cases = {}

    def gemm(g, x, name="fc0", **attrs):
        return g.node("Gemm", [x, g.weight([4, 5]), g.weight([4])], name=name, transB=1, **attrs)

    cases["alpha"] = (mlp_with(lambda g, x: gemm(g, x, alpha=0.5)), [],
                      'Gemm node "fc0": alpha = 0.5; sigserve\'s layers compute W x + b: only alpha = 1')
    cases["beta"] = (mlp_with(lambda g, x: gemm(g, x, beta=2.0)), [], 'Gemm node "fc0": beta = 2')
    cases["transA"] = (mlp_with(lambda g, x: g.node("Gemm", [x, g.weight([5, 4])], name="fc0", transA=1)), [],
                       'Gemm node "fc0": transA = 1')
    cases["leaky"] = (mlp_with(lambda g, x: g.node("LeakyRelu", [gemm(g, x)], name="act0")), [],
                      'LeakyRelu node "act0": op LeakyRelu is not supported')
    cases["softmax"] = (mlp_with(lambda g, x: g.node("Softmax", [gemm(g, x)], name="probs")), [],
                        'Softmax node "probs": op Softmax is not supported')
    cases["two_acts"] = (mlp_with(lambda g, x: g.node("Tanh", [g.node("Relu", [gemm(g, x)], name="r")], name="t")),
                         [], 'Tanh node "t": a second activation after Relu node "r"')
    cases["residual"] = (mlp_with(lambda g, x: g.node("Add", [x, g.node("Relu", [g.node("Gemm", [
        x, g.weight([5, 5]), g.weight([5])], transB=1)])], name="skip")), [],
        'Add node "skip": adds two computed tensors (the graph input "x" and Relu node')
    cases["second_bias"] = (mlp_with(lambda g, x: g.node("Add", [gemm(g, x), g.weight([4])], name="bias2")), [],
                            'Add node "bias2": adds a second bias to Gemm node "fc0"')
    cases["bias_shape"] = (mlp_with(lambda g, x: g.node("Gemm", [x, g.weight([4, 5]), g.weight([3, 4])],
                                                        name="fc0", transB=1)), [],
                           'Gemm node "fc0": bias C has shape [3, 4]; expected [4] or [1, 4]')
    cases["reshape_batch"] = (mlp_with(lambda g, x: g.node("Reshape", [gemm(g, x), g.ints([-1, 2])], name="rs")), [],
                              'Reshape node "rs": shape [-1, 2] on a tensor of axes [batch, features] changes it: '
                              'only a Reshape that adds or drops axes of size 1 is supported')
    cases["flatten0"] = (mlp_with(lambda g, x: gemm(g, g.node("Flatten", [x], name="flat", axis=0))), [],
                         'Flatten node "flat": axis = 0 on a tensor of rank 2 changes its shape')
    cases["int_weight"] = (mlp_with(lambda g, x: g.node("Gemm", [x, g.init(np.ones((4, 5), np.int32)),
                                                                 g.weight([4])], name="fc0", transB=1)), [],
                           'Gemm node "fc0": input B ("w1") has element type int32; sigserve takes float32')
    g64 = G(dtype=np.float64)
    g64.node("Gemm", ["x", g64.init(RNG.uniform(-1, 1, (4, 5)), name="w64")], name="fc0", transB=1)
    cases["f64_inexact"] = (g64.model(["N", 5], "fc0_out"), [],
                            'Gemm node "fc0": input B ("w64") is float64 and not exactly float32 (element 0:')
    cases["weight_computed"] = (mlp_with(lambda g, x: g.node("Gemm", [x, g.node("Transpose", [g.weight([5, 4])],
                                                                                 name="tw")], name="fc0", transB=1)),
                                [], 'Gemm node "fc0": input B ("tw_out") is not a constant: it comes from Transpose '
                                    'node "tw"')
    g3 = G()
    g3.node("Gemm", ["x", g3.weight([4, 5])], name="fc0", transB=1)
    cases["rank3"] = (g3.model(["N", 3, 5], "fc0_out"), [],
                      'Gemm node "fc0" reads the graph input "x" as [input axis 0, input axis 1, input axis 2] '
                      '(rank 3)')
    g2 = G()
    g2.node("Gemm", ["x", g2.weight([4, 5])], name="fc0", transB=1)
    g2.node("Relu", ["fc0_out"], name="r")
    cases["two_outputs"] = (g2.model(["N", 5], None, outputs=[
        helper.make_tensor_value_info("fc0_out", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("r_out", TensorProto.FLOAT, None)]), [],
        "the graph has 2 outputs (fc0_out, r_out); a sigserve model has one")
    cases["no_layers"] = (mlp_with(lambda g, x: g.node("Identity", [x])), [],
                          "the graph has no dense layer between its input and its output")
    cases["mlp_window"] = (mlp_with(lambda g, x: gemm(g, x)), ["--window", 4],
                           "--window is only for LSTM models; this one is an MLP")
    cases["not_onnx"] = (b"this is not a model", [], "not an ONNX model")

    def lstm(**kw):
        return build_lstm(3, 4, 1, 5, **kw)
    cases["reverse"] = (lstm(lstm_attrs={"direction": "reverse"}), [],
                        'LSTM node "lstm0": direction "reverse"; sigserve runs forward LSTMs only')
    cases["bidirectional"] = (lstm(lstm_attrs={"direction": "bidirectional"}), [],
                              'LSTM node "lstm0": direction "bidirectional"')
    cases["peepholes"] = (lstm(peephole=0.25), [], 'LSTM node "lstm0": input P (peepholes, "p')
    cases["clip"] = (lstm(lstm_attrs={"clip": 3.0}), [], 'LSTM node "lstm0": clip = 3; sigserve\'s LSTM does not clip')
    cases["activations"] = (lstm(lstm_attrs={"activations": ["Sigmoid", "Tanh", "Relu"]}), [],
                            "LSTM node \"lstm0\": activations ['Sigmoid', 'Tanh', 'Relu']; only the default")
    cases["layout"] = (lstm(lstm_attrs={"layout": 1}), [], 'LSTM node "lstm0": layout = 1')
    cases["input_forget"] = (lstm(lstm_attrs={"input_forget": 1}), [], 'LSTM node "lstm0": input_forget = 1')
    gh = G()
    x = gh.node("Transpose", ["x"], perm=[1, 0, 2])
    h0 = gh.init(np.full((1, 1, 4), 0.5, np.float32), name="h0")
    y, yh, yc = lstm_node(gh, x, 3, 4, "lstm0", h0=h0)
    dense(gh, gh.squeeze(yh, [0]), 4, 1, "gemm1", "none")
    cases["initial_h"] = (gh.model(["N", 5, 3], gh.nodes[-1].output[0]), [],
                          'LSTM node "lstm0": input initial_h ("h0") is not provably zero (it comes from the '
                          'initializer "h0"); sigserve starts every window from a zero state')
    gc = G()
    x = gc.node("Transpose", ["x"], perm=[1, 0, 2])
    y, yh, yc = lstm_node(gc, x, 3, 4, "lstm0", c0="c0")
    dense(gc, gc.squeeze(yh, [0]), 4, 1, "gemm1", "none")
    cases["initial_c"] = (gc.model(["N", 5, 3], gc.nodes[-1].output[0], extra_inputs=[
        helper.make_tensor_value_info("c0", TensorProto.FLOAT, [1, "N", 4])]), [],
        'LSTM node "lstm0": input initial_c ("c0") is not provably zero (it comes from the graph input "c0")')
    gs = G()
    x = gs.node("Transpose", ["x"], perm=[1, 0, 2])
    lens = gs.init(np.array([5], np.int32), name="lens")
    w, r = gs.weight([1, 16, 3]), gs.weight([1, 16, 4])
    y, yh, yc = gs.node("LSTM", [x, w, r, "", lens], name="lstm0", outputs=3, hidden_size=4)
    dense(gs, gs.squeeze(yh, [0]), 4, 1, "gemm1", "none")
    cases["sequence_lens"] = (gs.model(["N", 5, 3], gs.nodes[-1].output[0]), [],
                              'LSTM node "lstm0": input sequence_lens ("lens") is given; sigserve runs every '
                              'window at its full length')
    cases["all_steps"] = (lstm(read="y_all", head="all_steps"), [],
                          'MatMul node "head" reads the LSTM output at every step (axes [batch, steps, hidden]): '
                          "sigserve's head reads the last layer's hidden state at the last step only")
    cases["slice_first_step"] = (build_lstm(3, 4, 1, 5, read="y_slice_first"), [],
                                 'Slice node "first_slice": takes step 0 of the LSTM output')
    cases["first_step"] = (lstm(read="y_first"), [],
                           'Gather node "first_step": takes step 0 of the LSTM output; sigserve\'s head reads the '
                           'last step (4 or -1 with window 5)')
    cases["y_c"] = (lstm(read="y_c"), [], 'LSTM node "lstm0": its output Y_c (the cell state) is read')
    cases["tanh_hidden"] = (lstm(read="tanh"), [], 'Tanh node "tanh_h": applies Tanh to Squeeze node')
    cases["two_heads"] = (lstm(head="two"), [],
                          'after the LSTM the graph has 2 dense layers (Gemm node "head", Gemm node "head2"); '
                          "sigserve's LSTM head is one dense layer")
    cases["lower_layer"] = (build_lstm(3, 4, 2, 5, read="h_n_first"), [],
                            'the head reads LSTM node "lstm0", below LSTM node "lstm1" in the stack')
    cases["hiddens"] = (build_lstm(3, 4, 2, 5, hiddens=[4, 6]), [],
                        'LSTM node "lstm1": hidden size 6, but the LSTM below it (LSTM node "lstm0") has 4')
    cases["no_window"] = (build_lstm(3, 4, 1, None), [],
                          'the sequence length of graph input "x" (axis 1) is dynamic: give the window with '
                          '--window N')
    cases["window_differs"] = (lstm(), ["--window", 9],
                               '--window 9 differs from the sequence length 5 that graph input "x" fixes (its axis 1)')
    return cases


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

def start_server(config_path):
    """sigserve on CONFIG_PATH, ready (health polled, 30 s at most), or an AssertionError."""
    with open(config_path) as f:
        endpoint = json.load(f)["server"]["endpoints"][0]
    log = open(config_path + ".log", "w")
    proc = subprocess.Popen([os.path.join(BUILD, "sigserve"), "--config", config_path], stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    with SigClient(endpoint, timeout_ms=200) as client:
        while True:
            if proc.poll() is not None:
                with open(config_path + ".log") as f:
                    raise AssertionError(f"sigserve exited {proc.returncode}:\n{f.read()[-3000:]}")
            try:
                if client.health().ready:
                    return proc
            except Exception:       # Timeout while it starts
                pass
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("sigserve not ready within 30 s")
            time.sleep(0.05)


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
        with open(cfg, "w") as f:
            json.dump({"server": {"endpoints": [f"tcp://127.0.0.1:{free_port()}"], "log_level": "warn"},
                       "models": snippets}, f)
        proc = start_server(cfg)
        try:
            with SigClient(json.load(open(cfg))["server"]["endpoints"][0], timeout_ms=5000) as client:
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
