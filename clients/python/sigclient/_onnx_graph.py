"""The ONNX graph follower behind sigclient.convert (which says what converts and what is refused).

The graph is read backwards from its output, each tensor on the way given an abstract value: a
Rows (a [batch, features] tensor: dense layers applied to the graph input or to an LSTM's last
hidden state) or a Seq (an LSTM-side tensor whose axes are known by meaning: steps, directions,
batch, hidden, ...). Each op either maps its input's value to its output's or raises ConvertError
naming the node, so a graph converts only where every step on the output's path is proven.
"""
from __future__ import annotations

_ACTIVATIONS = {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid"}
_LSTM_ACTIVATIONS = ["Sigmoid", "Tanh", "Tanh"]
_GRU_ACTIVATIONS = ["Sigmoid", "Tanh"]
INPUT = "input"                    # the source of a value computed from the graph input alone
_BIG = 2 ** 31 - 1                  # Slice ends at or past this are "to the end"
_AXIS_WORDS = {"S": "steps", "D": "directions", "B": "batch", "H": "hidden", "1": "1", "K": "layers"}
MAX_WINDOW = 4096                   # config.c: "window" is 1 to 4096


class ConvertError(ValueError):
    """The model cannot be converted (or read); the message says which node, op, attribute or input."""


class Rows:
    """A [batch, n] tensor: LAYERS (dense, in order) applied to ORIGIN (INPUT or the top Lstm)."""

    def __init__(self, n, layers, origin):
        self.n, self.layers, self.origin = n, layers, origin


class Seq:
    """A tensor on the LSTM side, known by what each axis is: "S" every step, "D" num_directions (1),
    "B" batch, "H" hidden, "1" a unit axis, "K" a stack of layers (torch's h_n), "xI" the graph
    input's axis I. SOURCES: what it holds, one entry per element of the "K" axis (else one): INPUT
    or an Lstm. An LSTM value without "S" holds the last step only (Y_h, or Y reduced to it)."""

    def __init__(self, axes, sources):
        self.axes, self.sources = list(axes), list(sources)


class Lstm:
    """One recurrent node (an LSTM, or a GRU: KIND, sigserve's "type"), its weights in PyTorch's layout and
    the layer below it (None: the input)."""

    def __init__(self, node, desc, w_ih, w_hh, b_ih, b_hh, below, kind="lstm"):
        self.node, self.desc, self.below, self.kind = node, desc, below, kind
        self.w_ih, self.w_hh, self.b_ih, self.b_hh = w_ih, w_hh, b_ih, b_hh
        self.hidden, self.inputs = w_hh.shape[1], w_ih.shape[1]


def _torch_gates(np, a):
    """Rows in ONNX's gate order i, o, f, c -> PyTorch's i, f, g (= c), o."""
    i, o, f, c = np.split(a, 4, axis=0)
    return np.concatenate([i, f, c, o], axis=0)


def _torch_gru_gates(np, a):
    """A GRU's rows in ONNX's gate order z, r, h -> PyTorch's r, z, n (= h)."""
    z, r, h = np.split(a, 3, axis=0)
    return np.concatenate([r, z, h], axis=0)


class Graph:
    def __init__(self, model, window, onnx, np):
        self.onnx, self.np = onnx, np
        g = model.graph
        self.graph = g
        self.window_option = window
        self.window = None
        self.batch = None                   # the static batch size, where the input has one
        self.notes: list[str] = []
        self.inits = {t.name: t for t in g.initializer}
        self.producer = {}
        self.index = {}
        for i, node in enumerate(g.node):
            self.index[id(node)] = i
            for k, out in enumerate(node.output):
                if out:
                    self.producer[out] = (node, k)
        self.inputs = {vi.name: vi for vi in g.input if vi.name not in self.inits}
        self.input_name = None              # the graph input the output depends on
        self.input_layout = None
        self.memo: dict = {}
        self.lstms: dict = {}
        self.const_memo: dict = {}
        self.noted: set[str] = set()

    # ---- naming things in messages ----

    def desc(self, node) -> str:
        if node.name:
            return f'{node.op_type} node "{node.name}"'
        return f'{node.op_type} node #{self.index[id(node)]} (output "{node.output[0] if node.output else ""}")'

    def origin_of(self, name) -> str:
        """What makes tensor NAME: for messages."""
        if name in self.inputs:
            return f'the graph input "{name}"'
        if name in self.inits:
            return f'the initializer "{name}"'
        if name in self.producer:
            return self.desc(self.producer[name][0])
        return "nothing in the graph"

    @staticmethod
    def axes_text(axes) -> str:
        return "[" + ", ".join(_AXIS_WORDS.get(a, f"input axis {a[1:]}" if a.startswith("x") else a)
                               for a in axes) + "]"

    def attrs(self, node) -> dict:
        return {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}

    # ---- constants ----

    def const(self, name):
        """The value of tensor NAME if it is a constant (an initializer, a Constant node, or Identity /
        Cast of one), else None."""
        if name in self.const_memo:
            return self.const_memo[name]
        np, value = self.np, None
        if name in self.inits:
            value = self.onnx.numpy_helper.to_array(self.inits[name])
        elif name in self.producer:
            node, _ = self.producer[name]
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                a = self.attrs(node)
                if "value" in a:
                    value = self.onnx.numpy_helper.to_array(a["value"])
                elif "value_float" in a:
                    value = np.array(a["value_float"], dtype=np.float32)
                elif "value_floats" in a:
                    value = np.array(a["value_floats"], dtype=np.float32)
                elif "value_int" in a:
                    value = np.array(a["value_int"], dtype=np.int64)
                elif "value_ints" in a:
                    value = np.array(a["value_ints"], dtype=np.int64)
            elif node.op_type == "Identity" and node.domain in ("", "ai.onnx"):
                value = self.const(node.input[0])
            elif node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
                v = self.const(node.input[0])
                if v is not None and v.dtype.kind == "f":
                    try:
                        value = v.astype(self.onnx.helper.tensor_dtype_to_np_dtype(self.attrs(node)["to"]))
                    except (KeyError, TypeError, ValueError):
                        value = None
        self.const_memo[name] = value
        return value

    def weight(self, name, node, what):
        """Tensor NAME, read by NODE as WHAT, as float32: it must be a float constant; float16 and
        float64 values that are all exactly float32 are converted (and noted)."""
        np = self.np
        v = self.const(name)
        if v is None:
            raise ConvertError(f'{self.desc(node)}: {what} ("{name}") is not a constant: it comes from '
                               f'{self.origin_of(name)} (weights must be initializers or Constant nodes; '
                               f'export with constant folding)')
        if v.dtype == np.float32:
            out = v
        elif v.dtype == np.float16:
            out = v.astype(np.float32)
            self.note(name, f'"{name}" is float16: converted to float32 (exactly)')
        elif v.dtype == np.float64:
            out = v.astype(np.float32)
            with np.errstate(invalid="ignore"):
                inexact = ~((out.astype(np.float64) == v) | (np.isnan(v) & np.isnan(out)))
            if inexact.any():
                k = int(np.flatnonzero(inexact.ravel())[0])
                raise ConvertError(f'{self.desc(node)}: {what} ("{name}") is float64 and not exactly float32 '
                                   f'(element {k}: {v.ravel()[k]!r}); sigserve computes in float32: cast the '
                                   f'model to float32 first')
            self.note(name, f'"{name}" is float64 with every value a float32: converted exactly')
        else:
            raise ConvertError(f'{self.desc(node)}: {what} ("{name}") has element type {v.dtype}; sigserve '
                               f'takes float32 (float16 and exactly representable float64 are converted)')
        if not np.all(np.isfinite(out)):
            raise ConvertError(f'{self.desc(node)}: {what} ("{name}") holds NaN or infinite values')
        return np.ascontiguousarray(out, dtype=np.float32)

    def note(self, key, text):
        if key not in self.noted:
            self.noted.add(key)
            self.notes.append(text)

    def ints(self, name, node, what) -> list:
        v = self.const(name)
        if v is None or v.dtype.kind not in "iu":
            raise ConvertError(f'{self.desc(node)}: {what} ("{name}") is not a constant list of integers: it '
                               f'comes from {self.origin_of(name)}')
        return [int(x) for x in v.ravel()]

    def is_zero(self, name) -> bool:
        """Whether tensor NAME is absent or provably all zeros (a zero constant, ConstantOfShape of
        zero, or a reshaping / slicing / expanding of such: torch's zero initial states)."""
        if not name:
            return True
        v = self.const(name)
        if v is not None:
            return v.dtype.kind in "fiub" and not self.np.any(v)
        if name not in self.producer:
            return False
        node, _ = self.producer[name]
        op = node.op_type
        if node.domain not in ("", "ai.onnx"):
            return False
        if op == "ConstantOfShape":
            value = self.attrs(node).get("value")
            return value is None or not self.np.any(self.onnx.numpy_helper.to_array(value))
        if op in ("Expand", "Tile", "Slice", "Gather", "Unsqueeze", "Squeeze", "Reshape", "Identity",
                  "Transpose", "Flatten", "Cast"):
            return self.is_zero(node.input[0])
        if op == "Concat":
            return all(self.is_zero(i) for i in node.input)
        return False

    # ---- the data path ----

    def value(self, name, reader):
        """The abstract value of tensor NAME (a Rows or a Seq), READER naming who reads it."""
        if name in self.memo:
            return self.memo[name]
        if name in self.inputs:
            if self.input_name not in (None, name):
                raise ConvertError(f'{reader} reads graph input "{name}", and the model already reads graph input '
                                   f'"{self.input_name}"; a sigserve model has one input')
            self.input_name = name
            dims = self.input_dims(name)
            v = Seq([f"x{i}" for i in range(len(dims))], [INPUT])
        elif self.const(name) is not None:
            raise ConvertError(f'{reader} reads "{name}", a constant, where the model\'s data should flow')
        elif name not in self.producer:
            raise ConvertError(f'{reader} reads "{name}", which no node makes and which is not a graph input')
        else:
            node, k = self.producer[name]
            if node.domain not in ("", "ai.onnx"):
                raise ConvertError(f'{self.desc(node)}: op domain "{node.domain}" is not supported')
            handler = getattr(self, "_op_" + node.op_type, None)
            if handler is None:
                raise ConvertError(f"{self.desc(node)}: op {node.op_type} is not supported (sigserve serves "
                                   f"dense layers - Gemm, MatMul + Add, with Relu, Tanh or Sigmoid - and LSTMs or GRUs "
                                   f"with a dense head)")
            if k != 0 and node.op_type not in ("LSTM", "GRU"):
                raise ConvertError(f"{self.desc(node)}: output {k} is read; only its first output is supported")
            v = handler(node, k)
        self.memo[name] = v
        return v

    def input_dims(self, name) -> list:
        """The graph input's dims: an int for a static one, None for a dynamic one."""
        vi = self.inputs[name]
        t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if t is None or not t.HasField("shape"):
            raise ConvertError(f'graph input "{name}" has no declared shape (expected [batch, features] or '
                               f'[batch, steps, features])')
        return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]

    def rows(self, v, reader) -> Rows:
        """V as a [batch, features] tensor, or a refusal saying what READER reads instead."""
        if isinstance(v, Rows):
            return v
        if v.sources == [INPUT]:
            name = self.input_name
            dims = self.input_dims(name)
            if v.axes == ["x0", "x1"]:
                if dims[1] is None:
                    raise ConvertError(f'graph input "{name}": its feature dimension is dynamic; sigserve needs '
                                       f'a fixed input size')
                self.batch = dims[0]
                return Rows(dims[1], [], INPUT)
            raise ConvertError(f'{reader} reads the graph input "{name}" as {self.axes_text(v.axes)} '
                               f'(rank {len(dims)}): a dense layer\'s input must be [batch, features]')
        if len(v.sources) == 1 and v.axes == ["B", "H"]:
            return Rows(v.sources[0].hidden, [], v.sources[0])
        if "S" in v.axes:
            raise ConvertError(f"{reader} reads the LSTM output at every step (axes {self.axes_text(v.axes)}): "
                               f"sigserve's head reads the last layer's hidden state at the last step only")
        raise ConvertError(f"{reader} reads an LSTM state of axes {self.axes_text(v.axes)}; sigserve's head "
                           f"reads [batch, hidden], the last layer's hidden state at the last step")

    def data_input(self, node, i=0):
        return self.value(node.input[i], self.desc(node))

    @staticmethod
    def bias_vector(np, c, n):
        """C broadcast to [n] if it is a per-output bias ([], [1], [n], [1, 1], [1, n]), else None."""
        if c.ndim > 2 or (c.ndim == 2 and c.shape[0] != 1) or (c.ndim >= 1 and c.shape[-1] not in (1, n)):
            return None
        return np.ascontiguousarray(np.broadcast_to(c.reshape(-1) if c.ndim else c, (n,)), dtype=np.float32)

    def new_layer(self, node, rows, weight, bias):
        if weight.shape[1] != rows.n:
            raise ConvertError(f"{self.desc(node)}: weight of shape {list(weight.shape)} (as [out, in]) takes "
                               f"{weight.shape[1]} inputs, but its input has {rows.n} features")
        layer = {"weight": weight, "bias": bias, "activation": "none", "nodes": [self.desc(node)]}
        return Rows(weight.shape[0], rows.layers + [layer], rows.origin)

    def _op_Gemm(self, node, k):
        np = self.np
        a = self.attrs(node)
        for attr in ("alpha", "beta"):
            if attr == "beta" and (len(node.input) < 3 or not node.input[2]):
                continue
            if a.get(attr, 1.0) != 1.0:
                raise ConvertError(f"{self.desc(node)}: {attr} = {a[attr]:g}; sigserve's layers compute "
                                   f"W x + b: only {attr} = 1 is supported")
        if a.get("transA", 0) != 0:
            raise ConvertError(f"{self.desc(node)}: transA = {a['transA']}; the data input must be [batch, "
                               f"features] (transA = 0)")
        if self.const(node.input[0]) is not None:
            raise ConvertError(f"{self.desc(node)}: input A is a constant; the data must come in as A")
        rows = self.rows(self.data_input(node), self.desc(node))
        b = self.weight(node.input[1], node, "input B")
        if b.ndim != 2:
            raise ConvertError(f"{self.desc(node)}: input B has shape {list(b.shape)}, expected a matrix")
        w = b if a.get("transB", 0) else b.T
        bias = None
        if len(node.input) > 2 and node.input[2]:
            c = self.weight(node.input[2], node, "input C")
            bias = self.bias_vector(np, c, w.shape[0])
            if bias is None:
                raise ConvertError(f"{self.desc(node)}: bias C has shape {list(c.shape)}; expected [{w.shape[0]}] "
                                   f"or [1, {w.shape[0]}] (one bias per output)")
        return self.new_layer(node, rows, np.ascontiguousarray(w), bias)

    def _op_MatMul(self, node, k):
        np = self.np
        left, right = (self.const(n) is not None for n in node.input[:2])
        if left:
            raise ConvertError(f"{self.desc(node)}: the constant is on the left (input A); sigserve computes "
                               f"x W with the data as A and the weight [in, out] as B")
        if not right:
            raise ConvertError(f"{self.desc(node)}: multiplies two computed tensors ({self.origin_of(node.input[0])}"
                               f" and {self.origin_of(node.input[1])}); input B must be a constant weight")
        rows = self.rows(self.data_input(node), self.desc(node))
        b = self.weight(node.input[1], node, "input B")
        if b.ndim != 2:
            raise ConvertError(f"{self.desc(node)}: input B has shape {list(b.shape)}, expected [in, out]")
        return self.new_layer(node, rows, np.ascontiguousarray(b.T), None)

    def _op_Add(self, node, k):
        consts = [self.const(n) is not None for n in node.input]
        if consts.count(True) != 1:
            what = "two constants" if all(consts) else (
                f"two computed tensors ({self.origin_of(node.input[0])} and {self.origin_of(node.input[1])}): a "
                f"residual connection is not a chain of dense layers")
            raise ConvertError(f"{self.desc(node)}: adds {what}")
        data, bias_name = (node.input[1], node.input[0]) if consts[0] else (node.input[0], node.input[1])
        v = self.value(data, self.desc(node))
        if not isinstance(v, Rows) or not v.layers:
            raise ConvertError(f"{self.desc(node)}: adds a constant to {self.origin_of(data)}, not to the output "
                               f"of a Gemm or MatMul: sigserve's bias belongs to a dense layer")
        last = v.layers[-1]
        if last["activation"] != "none":
            raise ConvertError(f"{self.desc(node)}: adds a constant after the activation of {last['nodes'][-1]}: "
                               f"a sigserve layer adds its bias before the activation")
        if last["bias"] is not None:
            raise ConvertError(f"{self.desc(node)}: adds a second bias to {last['nodes'][0]} (already "
                               f"biased by {last['nodes'][-1]})")
        c = self.weight(bias_name, node, "the bias")
        bias = self.bias_vector(self.np, c, v.n)
        if bias is None:
            raise ConvertError(f'{self.desc(node)}: bias "{bias_name}" has shape {list(c.shape)}; expected '
                               f'[{v.n}] or [1, {v.n}] (one bias per output)')
        layer = dict(last, bias=bias, nodes=last["nodes"] + [self.desc(node)])
        return Rows(v.n, v.layers[:-1] + [layer], v.origin)

    def _activation(self, node, k):
        v = self.data_input(node)
        if not isinstance(v, Rows) or not v.layers:
            raise ConvertError(f"{self.desc(node)}: applies {node.op_type} to {self.origin_of(node.input[0])}, "
                               f"not to the output of a dense layer (Gemm or MatMul)")
        last = v.layers[-1]
        if last["activation"] != "none":
            raise ConvertError(f"{self.desc(node)}: a second activation after {last['nodes'][-1]}; a sigserve "
                               f"layer has one")
        layer = dict(last, activation=_ACTIVATIONS[node.op_type], nodes=last["nodes"] + [self.desc(node)])
        return Rows(v.n, v.layers[:-1] + [layer], v.origin)

    _op_Relu = _op_Tanh = _op_Sigmoid = _activation

    def _op_Identity(self, node, k):
        return self.data_input(node)

    def _op_Flatten(self, node, k):
        v = self.data_input(node)
        axis = self.attrs(node).get("axis", 1)
        rank = 2 if isinstance(v, Rows) else len(v.axes)
        if rank == 2 and axis in (1, -1):
            return v
        raise ConvertError(f"{self.desc(node)}: axis = {axis} on a tensor of rank {rank} changes its shape; "
                           f"only a Flatten that leaves [batch, features] as it is (rank 2, axis 1) is supported")

    def axis_size(self, label, v):
        return {"S": self.window, "D": 1, "1": 1, "H": v.sources[0].hidden if v.sources[0] is not INPUT else None,
                "K": len(v.sources), "B": self.batch}.get(label)

    # Sizes are followed symbolically where a graph computes a Reshape's shape (torch's dynamo
    # exporter does): a size is (c, b), the value c x B**b with B the dynamic batch size.

    def size_of(self, label, v):
        """The symbolic size of axis LABEL of V, or None where it is not known."""
        if label == "B":
            return (self.batch, 0) if self.batch is not None else (1, 1)
        if label.startswith("x"):
            dims = self.input_dims(self.input_name)
            d = dims[int(label[1:])]
            return (d, 0) if d is not None else None
        n = self.axis_size(label, v)
        return (n, 0) if n is not None else None

    def shape_vector(self, name):
        """Tensor NAME as a list of symbolic sizes where it is a shape computation this follows
        (constants, Shape, Slice, Gather, Concat, Mul, and Reshape/Squeeze/Unsqueeze/Identity/Cast
        of those), else None."""
        c = self.const(name)
        if c is not None:
            return [(int(x), 0) for x in c.ravel()] if c.dtype.kind in "iu" else None
        if name not in self.producer:
            return None
        node, _ = self.producer[name]
        op, a = node.op_type, self.attrs(node)
        if node.domain not in ("", "ai.onnx"):
            return None
        if op == "Shape":
            v = self.data_input(node)
            sizes = ([self.size_of("B", v), (v.n, 0)] if isinstance(v, Rows)
                     else [self.size_of(label, v) for label in v.axes])
            return sizes[slice(a.get("start", 0), a.get("end"))]
        if op in ("Reshape", "Squeeze", "Unsqueeze", "Identity", "Cast"):
            return self.shape_vector(node.input[0])
        if op == "Concat":
            parts = [self.shape_vector(i) for i in node.input]
            return None if any(p is None for p in parts) else [x for p in parts for x in p]
        if op == "Mul":
            x, y = self.shape_vector(node.input[0]), self.shape_vector(node.input[1])
            if x is None or y is None or None in x + y or (len(x) != len(y) and 1 not in (len(x), len(y))):
                return None
            n = max(len(x), len(y))
            x, y = (x * n if len(x) == 1 else x), (y * n if len(y) == 1 else y)
            return [(p[0] * q[0], p[1] + q[1]) for p, q in zip(x, y)]
        if op == "Gather":
            x, index = self.shape_vector(node.input[0]), self.const(node.input[1])
            if x is None or index is None or index.dtype.kind not in "iu":
                return None
            try:
                return [x[int(i)] for i in index.ravel()]
            except IndexError:
                return None
        if op == "Slice" and "starts" not in a:
            x = self.shape_vector(node.input[0])
            args = [self.const(i) if i else None for i in (list(node.input[1:5]) + [""] * 4)[:4]]
            if x is None or args[0] is None or args[1] is None or any(
                    v is not None and (v.dtype.kind not in "iu" or v.size != 1) for v in args):
                return None
            if args[2] is not None and int(args[2].ravel()[0]) not in (0, -1):
                return None
            step = int(args[3].ravel()[0]) if args[3] is not None else 1
            if step == 0:
                return None
            return x[int(args[0].ravel()[0]):int(args[1].ravel()[0]):step]
        return None

    def _op_Reshape(self, node, k):
        v = self.data_input(node)
        try:
            shape = self.ints(node.input[1], node, "the shape")
            entries = [(t, 0) for t in shape]
        except ConvertError:
            entries = self.shape_vector(node.input[1])
            if entries is None or None in entries:
                raise
            shape = [f"{c}" if b == 0 else ("batch" if c == 1 else f"{c} x batch") for c, b in entries]
        allowzero = self.attrs(node).get("allowzero", 0)
        if isinstance(v, Seq) and v.sources == [INPUT] and len(v.axes) == 2:
            v = self.rows(v, self.desc(node))
        if isinstance(v, Rows):
            axes, sizes, unit = ["B", "F"], [self.size_of("B", v), (v.n, 0)], [False, False]
        else:
            axes, sizes, unit = v.axes, [self.size_of(a, v) for a in v.axes], [self.unit(a, v) for a in v.axes]
        refuse = ConvertError(
            f"{self.desc(node)}: shape [{', '.join(str(x) for x in shape)}] on a tensor of axes "
            f"{'[batch, features]' if isinstance(v, Rows) else self.axes_text(axes)} changes it: only a Reshape "
            f"that adds or drops axes of size 1 is supported")
        resolved = []       # ("copy", input axis) | ("?",) | ("size", symbolic size)
        for i, (c, b) in enumerate(entries):
            if b == 0 and c == 0 and not allowzero:
                if i >= len(axes):
                    raise refuse
                resolved.append(("copy", i))
            elif b == 0 and c == -1:
                resolved.append(("?",))
            elif c >= 1:
                resolved.append(("size", (c, b)))
            else:
                raise refuse
        if resolved.count(("?",)) > 1:
            raise refuse
        kept = [i for i in range(len(axes)) if not unit[i]]

        def definite(e):     # an entry that must be one of the kept axes
            return e[0] == "?" or (e[0] == "copy" and not unit[e[1]]) or (e[0] == "size" and e[1] != (1, 0))
        labels, p = [], 0
        for j, e in enumerate(resolved):
            if e[0] == "copy" and unit[e[1]]:
                labels.append("1")
                continue
            if e[0] == "size" and e[1] == (1, 0):
                # a 1: a new unit axis, or a kept axis of size 1 (a static batch of 1) the rest cannot cover
                later = sum(definite(x) for x in resolved[j + 1:])
                if p < len(kept) and later < len(kept) - p and sizes[kept[p]] == (1, 0):
                    labels.append(axes[kept[p]])
                    p += 1
                else:
                    labels.append("1")
                continue
            if p >= len(kept):
                raise refuse
            i = kept[p]
            if (e[0] == "copy" and e[1] != i) or (e[0] == "size" and e[1] != sizes[i]):
                raise refuse
            labels.append(axes[i])
            p += 1
        if p != len(kept):
            raise refuse
        if isinstance(v, Rows):
            if labels != ["B", "F"]:
                raise refuse
            return v
        return Seq(labels, v.sources)

    def _op_Transpose(self, node, k):
        v = self.data_input(node)
        rank = 2 if isinstance(v, Rows) else len(v.axes)
        perm = list(self.attrs(node).get("perm", range(rank - 1, -1, -1)))
        if isinstance(v, Rows):
            if perm == [0, 1]:
                return v
            raise ConvertError(f"{self.desc(node)}: transposes a [batch, features] tensor")
        if sorted(perm) != list(range(rank)):
            raise ConvertError(f"{self.desc(node)}: perm {perm} does not fit a tensor of rank {rank}")
        return Seq([v.axes[p] for p in perm], v.sources)

    def axes_arg(self, node, rank):
        """Squeeze/Unsqueeze axes: the attribute (opset < 13) or the second input (13+); None if absent."""
        a = self.attrs(node)
        if "axes" in a:
            axes = list(a["axes"])
        elif len(node.input) > 1 and node.input[1]:
            axes = self.ints(node.input[1], node, "axes")
        else:
            return None
        return sorted(x + rank if x < 0 else x for x in axes)

    def seq_input(self, node, what):
        v = self.data_input(node)
        if isinstance(v, Rows):
            raise ConvertError(f"{self.desc(node)}: {what} a [batch, features] tensor; only the reshaping between "
                               f"an LSTM and its head is supported")
        return v

    def unit(self, label, v) -> bool:
        return label in ("1", "D") or (label == "K" and len(v.sources) == 1) or (label == "S" and self.window == 1)

    def _op_Squeeze(self, node, k):
        v = self.seq_input(node, "squeezes")
        axes = self.axes_arg(node, len(v.axes))
        if axes is None:
            if "B" in v.axes and self.batch == 1:
                raise ConvertError(f"{self.desc(node)}: squeezes every axis of size 1, the batch axis of size 1 "
                                   f"too: give its axes")
            axes = [i for i, a in enumerate(v.axes) if self.unit(a, v)]
        for i in axes:
            if not 0 <= i < len(v.axes) or not self.unit(v.axes[i], v):
                what = self.axes_text([v.axes[i]]) if 0 <= i < len(v.axes) else "no"
                raise ConvertError(f"{self.desc(node)}: squeezes axis {i} ({what} axis) of a tensor of axes "
                                   f"{self.axes_text(v.axes)}; only axes of size 1 can go")
        return Seq([a for i, a in enumerate(v.axes) if i not in axes], v.sources)

    def _op_Unsqueeze(self, node, k):
        v = self.seq_input(node, "unsqueezes")
        a = self.attrs(node)
        n = len(a["axes"]) if "axes" in a else len(self.ints(node.input[1], node, "axes"))
        axes = self.axes_arg(node, len(v.axes) + n)
        out, rest = [], iter(v.axes)
        for i in range(len(v.axes) + len(axes)):
            out.append("1" if i in axes else next(rest))
        return Seq(out, v.sources)

    def pick(self, node, v, axis, index, keep):
        """V with element INDEX of AXIS taken (KEEP: as a unit axis, else the axis goes)."""
        label = v.axes[axis]
        size = self.axis_size(label, v)
        axes, sources = list(v.axes), list(v.sources)
        if label == "S":
            if not (index == -1 or index == self.window - 1):
                raise ConvertError(f"{self.desc(node)}: takes step {index} of the LSTM output; sigserve's head "
                                   f"reads the last step ({self.window - 1} or -1 with window {self.window})")
        elif label == "K":
            if not -size <= index < size:
                raise ConvertError(f"{self.desc(node)}: index {index} out of the {size} stacked LSTM states")
            sources = [sources[index]]
        elif label in ("1", "D"):
            if index not in (0, -1):
                raise ConvertError(f"{self.desc(node)}: index {index} on an axis of size 1")
        else:
            raise ConvertError(f"{self.desc(node)}: selects from the {self.axes_text([label])} axis of a tensor of "
                               f"axes {self.axes_text(v.axes)}; only the step, direction and layer axes can be "
                               f"indexed")
        if keep:
            axes[axis] = "K" if label == "K" else "1"
        else:
            del axes[axis]
        return Seq(axes, sources)

    def _op_Gather(self, node, k):
        v = self.seq_input(node, "gathers from")
        axis = self.attrs(node).get("axis", 0)
        axis += len(v.axes) if axis < 0 else 0
        indices = self.const(node.input[1])
        if indices is None or indices.dtype.kind not in "iu" or indices.size != 1 or indices.ndim > 1:
            raise ConvertError(f"{self.desc(node)}: indices must be one constant integer (found "
                               f"{self.origin_of(node.input[1])})")
        if not 0 <= axis < len(v.axes):
            raise ConvertError(f"{self.desc(node)}: axis out of range for a tensor of rank {len(v.axes)}")
        return self.pick(node, v, axis, int(indices.ravel()[0]), keep=indices.ndim == 1)

    def _op_Slice(self, node, k):
        v = self.seq_input(node, "slices")
        a = self.attrs(node)
        if "starts" in a:                   # opset < 10
            starts, ends = list(a["starts"]), list(a["ends"])
            axes = list(a.get("axes", range(len(starts))))
            steps = [1] * len(starts)
        else:
            starts = self.ints(node.input[1], node, "starts")
            ends = self.ints(node.input[2], node, "ends")
            axes = (self.ints(node.input[3], node, "axes") if len(node.input) > 3 and node.input[3]
                    else list(range(len(starts))))
            steps = (self.ints(node.input[4], node, "steps") if len(node.input) > 4 and node.input[4]
                     else [1] * len(starts))
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis += len(v.axes) if axis < 0 else 0
            if not 0 <= axis < len(v.axes):
                raise ConvertError(f"{self.desc(node)}: axis out of range for a tensor of rank {len(v.axes)}")
            label = v.axes[axis]
            size = self.axis_size(label, v)
            if size is None:                # batch (dynamic): only the whole of it
                if step == 1 and start in (0,) and end >= _BIG:
                    continue
                raise ConvertError(f"{self.desc(node)}: slices the {self.axes_text([label])} axis "
                                   f"[{start}:{end}:{step}]; only the whole of it is supported")
            if step == 0:
                raise ConvertError(f"{self.desc(node)}: step 0")
            taken = list(range(size))[slice(start, min(end, _BIG), step) if step > 0 else slice(start, end, step)]
            if taken == list(range(size)) and step > 0:
                continue
            if len(taken) != 1:
                raise ConvertError(f"{self.desc(node)}: slices [{start}:{end}:{step}] of the "
                                   f"{self.axes_text([label])} axis (size {size}); supported: all of it, or the "
                                   f"last step")
            v = self.pick(node, v, axis, taken[0], keep=True)
        return v

    def _op_Concat(self, node, k):
        values = [self.data_input(node, i) for i in range(len(node.input))]
        axis = self.attrs(node).get("axis", 0)
        for v in values:
            if isinstance(v, Rows) or INPUT in v.sources:
                raise ConvertError(f"{self.desc(node)}: concatenates data other than LSTM states; sigserve "
                                   f"serves a chain, not a graph")
        rank = len(values[0].axes)
        axis += rank if axis < 0 else 0
        rest = [[a for i, a in enumerate(v.axes) if i != axis] for v in values]
        if any(len(v.axes) != rank or r != rest[0] for v, r in zip(values, rest)) or not 0 <= axis < rank \
                or not all(self.unit(v.axes[axis], v) or v.axes[axis] == "K" for v in values):
            raise ConvertError(f"{self.desc(node)}: concatenates tensors of axes "
                               f"{', '.join(self.axes_text(v.axes) for v in values)} along axis {axis}; supported: "
                               f"the LSTM layers' Y_h stacked on a size-1 axis (torch's h_n)")
        axes = list(values[0].axes)
        axes[axis] = "K"
        return Seq(axes, [s for v in values for s in v.sources])

    # ---- LSTM ----

    def _op_LSTM(self, node, k):
        layer = self.lstm(node)
        if k == 0:
            return Seq(["S", "D", "B", "H"], [layer])
        if k == 1:
            return Seq(["D", "B", "H"], [layer])
        raise ConvertError(f"{self.desc(node)}: its output Y_c (the cell state) is read; sigserve's head reads "
                           f"the hidden state")

    def lstm(self, node) -> Lstm:
        if id(node) in self.lstms:
            return self.lstms[id(node)]
        np, desc, a = self.np, self.desc(node), self.attrs(node)
        self.rnn_attrs(desc, a, "LSTM", _LSTM_ACTIVATIONS,
                       ("input_forget", 0, "(coupled input and forget gates) is not supported"))
        names = list(node.input) + [""] * (8 - len(node.input))
        x, wn, rn, bn, seq_lens, h0, c0, p = names[:8]
        self.rnn_plain_inputs(desc, seq_lens, (("initial_h", h0), ("initial_c", c0)))
        if p and not self.is_zero(p):
            raise ConvertError(f'{desc}: input P (peepholes, "{p}") is given; sigserve\'s LSTM has no peepholes')
        if p:
            self.notes.append(f'{desc}: input P (peepholes, "{p}") is all zeros: no peepholes')
        w, r, b, hidden, below = self.rnn_tensors(node, desc, a, 4, "LSTM", x, wn, rn, bn)
        layer = Lstm(node, desc, _torch_gates(np, w[0]), _torch_gates(np, r[0]), _torch_gates(np, b[0, :4 * hidden]),
                      _torch_gates(np, b[0, 4 * hidden:]), below)
        self.lstms[id(node)] = layer
        return layer

    # ---- what LSTM and GRU nodes share ----

    def rnn_attrs(self, desc, a, kind, activations, own):
        """The attributes of a recurrent node of KIND ("LSTM", "GRU") in A checked, in this order: the
        direction, the layout, the kind's OWN (attribute, the value required, why another is refused),
        clip, the activations (ACTIVATIONS only) and their parameters (none)."""
        direction = a.get("direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction != "forward":
            raise ConvertError(f'{desc}: direction "{direction}"; sigserve runs forward {kind}s only')
        if a.get("layout", 0) != 0:
            raise ConvertError(f"{desc}: layout = {a['layout']} (batch first); only layout = 0 is supported "
                               f"(torch.onnx.export writes 0 and a Transpose)")
        attr, required, why = own
        if a.get(attr, 0) != required:
            raise ConvertError(f"{desc}: {attr} = {a.get(attr, 0)} {why}")
        if "clip" in a:
            raise ConvertError(f"{desc}: clip = {a['clip']:g}; sigserve's {kind} does not clip")
        acts = [x.decode() if isinstance(x, bytes) else x for x in a.get("activations", activations)]
        if acts != activations:
            raise ConvertError(f"{desc}: activations {acts}; only the default {activations} is supported")
        for attr in ("activation_alpha", "activation_beta"):
            if attr in a:
                raise ConvertError(f"{desc}: {attr} is given; only the default activations are supported")

    def rnn_plain_inputs(self, desc, seq_lens, states):
        """No sequence_lens (input SEQ_LENS, "" when absent), and every initial state in STATES ((what,
        input name) pairs) provably zero."""
        if seq_lens:
            raise ConvertError(f'{desc}: input sequence_lens ("{seq_lens}") is given; sigserve runs every window '
                               f'at its full length')
        for what, name in states:
            if not self.is_zero(name):
                raise ConvertError(f'{desc}: input {what} ("{name}") is not provably zero (it comes from '
                                   f'{self.origin_of(name)}); sigserve starts every window from a zero state')

    def rnn_tensors(self, node, desc, a, gates, kind, x, wn, rn, bn):
        """A recurrent node's W, R and B (inputs WN, RN, BN; no B: zeros) checked for GATES gate blocks of
        one hidden size, and the layer below it (its input X): (w, r, b, hidden, below)."""
        w = self.weight(wn, node, "input W")
        r = self.weight(rn, node, "input R")
        if r.ndim != 3 or r.shape[0] != 1 or r.shape[1] != gates * r.shape[2] or r.shape[2] == 0:
            raise ConvertError(f"{desc}: R has shape {list(r.shape)}, expected [1, {gates} x hidden, hidden]")
        hidden = r.shape[2]
        if a.get("hidden_size", hidden) != hidden:
            raise ConvertError(f"{desc}: hidden_size = {a['hidden_size']} but R is {list(r.shape)}")
        if w.ndim != 3 or w.shape[:2] != (1, gates * hidden) or w.shape[2] == 0:
            raise ConvertError(f"{desc}: W has shape {list(w.shape)}, expected [1, {gates * hidden}, inputs]")
        if bn:
            b = self.weight(bn, node, "input B")
            if b.shape != (1, 2 * gates * hidden):
                raise ConvertError(f"{desc}: B has shape {list(b.shape)}, expected [1, {2 * gates * hidden}]")
        else:
            b = self.np.zeros((1, 2 * gates * hidden), dtype=self.np.float32)
        below = self.lstm_input(node, self.value(x, desc), w.shape[2])
        if below is not None and below.hidden != hidden:
            raise ConvertError(f"{desc}: hidden size {hidden}, but the {kind} below it ({below.desc}) has "
                               f"{below.hidden}; sigserve's stacked layers share one hidden size")
        return w, r, b, hidden, below

    # ---- GRU ----

    def _op_GRU(self, node, k):
        layer = self.gru(node)
        if k == 0:
            return Seq(["S", "D", "B", "H"], [layer])
        return Seq(["D", "B", "H"], [layer])

    def gru(self, node) -> Lstm:
        """A GRU node as PyTorch computes it (linear_before_reset = 1: n = tanh (W_n x + b_in + r (R_n h +
        b_hn)), which torch.onnx.export writes); ONNX's default, the reset gate applied before R_n, is
        another function and refused."""
        if id(node) in self.lstms:
            return self.lstms[id(node)]
        np, desc, a = self.np, self.desc(node), self.attrs(node)
        self.rnn_attrs(desc, a, "GRU", _GRU_ACTIVATIONS,
                       ("linear_before_reset", 1, "(the reset gate applied to h before R); sigserve computes "
                        "PyTorch's GRU, r * (R_n h + b_hn): linear_before_reset = 1, as torch.onnx.export writes it"))
        names = list(node.input) + [""] * (6 - len(node.input))
        x, wn, rn, bn, seq_lens, h0 = names[:6]
        self.rnn_plain_inputs(desc, seq_lens, (("initial_h", h0),))
        w, r, b, hidden, below = self.rnn_tensors(node, desc, a, 3, "GRU", x, wn, rn, bn)
        layer = Lstm(node, desc, _torch_gru_gates(np, w[0]), _torch_gru_gates(np, r[0]),
                     _torch_gru_gates(np, b[0, :3 * hidden]), _torch_gru_gates(np, b[0, 3 * hidden:]), below, "gru")
        self.lstms[id(node)] = layer
        return layer

    def lstm_input(self, node, v, inputs):
        """The layer below NODE (None: NODE reads the graph input), from its X's value V; sets the window."""
        desc = self.desc(node)
        if isinstance(v, Seq) and len(v.sources) == 1 and isinstance(v.sources[0], Lstm):
            kind = "gru" if node.op_type == "GRU" else "lstm"
            if v.sources[0].kind != kind:
                raise ConvertError(f"{desc}: stacked on {v.sources[0].desc}; sigserve's layers are all LSTMs or all "
                                   f"GRUs")
            if v.axes != ["S", "B", "H"]:
                raise ConvertError(f"{desc}: its input X is the output of {v.sources[0].desc} as "
                                   f"{self.axes_text(v.axes)}; a stacked LSTM reads [steps, batch, hidden] (Y "
                                   f"with its direction axis squeezed)")
            return v.sources[0]
        if not (isinstance(v, Seq) and v.sources == [INPUT] and sorted(v.axes) == ["x0", "x1", "x2"]):
            raise ConvertError(f"{desc}: its input X is neither the graph input (through Transpose) nor the output "
                               f"of the LSTM below it")
        if v.axes[2] != "x2":
            raise ConvertError(f"{desc}: the graph input's features are not its last axis (X = input transposed "
                               f"to {self.axes_text(v.axes)}); sigserve takes each step's features together")
        name = self.input_name
        dims = self.input_dims(name)
        steps_axis, batch_axis = int(v.axes[0][1:]), int(v.axes[1][1:])
        if dims[2] is not None and dims[2] != inputs:
            raise ConvertError(f'{desc}: W takes {inputs} inputs a step, graph input "{name}" has {dims[2]}')
        self.batch = dims[batch_axis]
        self.input_layout = "batch, steps, features" if batch_axis == 0 else "steps, batch, features"
        static = dims[steps_axis]
        if static is not None:
            if self.window_option is not None and self.window_option != static:
                raise ConvertError(f'--window {self.window_option} differs from the sequence length {static} that '
                                   f'graph input "{name}" fixes (its axis {steps_axis})')
            self.window = static
        elif self.window_option is None:
            raise ConvertError(f'the sequence length of graph input "{name}" (axis {steps_axis}) is dynamic: give '
                               f'the window with --window N (steps a request carries)')
        else:
            self.window = self.window_option
        if not 1 <= self.window <= MAX_WINDOW:
            raise ConvertError(f"window {self.window}: sigserve's window is 1 to {MAX_WINDOW} steps")
        return None
