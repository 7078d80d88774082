"""The ONNX graphs tests/python/onnx_convert.py converts, built with onnx.helper, and a float64 evaluator
of them: MLPs (Gemm, MatMul + Add, Flatten/Reshape, float16 weights through Cast, a float64 graph),
LSTMs in the forms both torch exporters write, the models the converter must refuse, and evaluate(),
an interpreter of every op they use in float64 (its own Gemm/MatMul/LSTM in ONNX's gate order i, o,
f, c, from the ONNX initializers: nothing shared with the converter's mapping). Not a test itself
(needs onnx: tests/python/test_convert.sh).

The weights are random from RNG, which onnx_convert.py seeds (seed) before building any model, so
its --seed repeats a run."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
INT64_MAX = (1 << 63) - 1
RNG = np.random.default_rng(0)


def seed(n):
    """Every weight (and onnx_convert.py's inputs) from now on from a generator seeded with N."""
    global RNG
    RNG = np.random.default_rng(n)


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

