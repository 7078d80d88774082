"""sigclient.convert: an ONNX model into what sigserve serves (a safetensors file and a config entry).

    from sigclient.convert import convert, ConvertError

    snippet = convert("model.onnx", "out/model")     # writes out/model.safetensors and out/model.json
    # snippet: the model object for the config's "models" list, as written to out/model.json

``sigclient-py convert MODEL.onnx OUT [--name N] [--window W] [--dtype D]`` is the same from a shell.
Needs the ``onnx`` package (and numpy, which it brings); nothing else: the safetensors file is written
here.

``dtype`` ("f32", the default; "f16", "bf16"): how the file stores the weight matrices (every 2-D
tensor; biases stay F32, as every backend holds them), each rounded to nearest even once (f16: within
2^-11 of the weight, bf16: 2^-8; a weight past the type's range is refused by name). The server reads
F16 and BF16 tensors exactly; the snippet holds them so where the model's type can on the CPU
(``"weight_dtype"``: an MLP f16 or bf16, an LSTM bf16; the error bounds are in config/README.md, "CPU
weight dtypes"), else they are served widened to f32 (said in a note).

What converts (the graph is followed backwards from its one output, so only what the output
depends on matters; everything on that path must be one of these):

- MLP: a chain of dense layers on a [batch, features] input: ``Gemm`` (transA 0, transB 0 or 1,
  alpha 1, bias C of shape [N] or [1, N] with beta 1, or none) or ``MatMul`` with a constant
  right-hand side [in, out] (transposed into sigserve's [out, in]), optionally ``Add`` of a constant
  bias, each optionally followed by ``Relu``, ``Tanh``, ``Sigmoid``; ``Identity`` anywhere;
  ``Flatten`` (axis 1) and ``Reshape`` only where they leave a [batch, features] tensor as it is.
- LSTM: one or more ``LSTM`` nodes in a chain (forward, default activations, no clip, layout 0,
  input_forget 0, no sequence_lens, no peepholes (a P of zeros is taken), initial states absent or
  provably zero: zero constants, or ConstantOfShape / Expand of zero as torch writes them), their
  input the graph's [batch, steps, features] (or [steps, batch, features]) through ``Transpose``,
  stacked layers joined as torch.onnx.export joins them (``Squeeze`` of num_directions, or
  ``Transpose`` + ``Reshape`` whose shape may be computed by Shape/Slice/Gather/Mul/Concat, the
  dynamo exporter's way), then a head (one dense layer as above, optionally with an activation)
  on the last layer's hidden state at the last step: ``Y`` reduced to its last step by ``Gather``
  or ``Slice`` on the step axis, or ``Y_h``, through ``Squeeze``/``Unsqueeze``/``Transpose``/
  ``Reshape`` and, for torch's h_n, a ``Concat`` of the layers' ``Y_h`` and a ``Gather`` of the
  last. Without a head the converter writes an identity head (hidden -> hidden). ONNX's gate
  order i, o, f, c is reordered to PyTorch's i, f, g, o; B's first half (Wb) goes to bias_ih, its
  second (Rb) to bias_hh. The window is the input's static sequence length, else ``window``.
- GRU: the same with ``GRU`` nodes (all of a stack GRUs; forward, default activations, no clip,
  layout 0, ``linear_before_reset`` 1 as torch.onnx.export writes it: PyTorch's n = tanh (W_n x +
  b_in + r (R_n h + b_hn)); ONNX's default 0 is another function and refused; initial_h absent or
  provably zero), the model ``"type": "gru"``. ONNX's gate order z, r, h is reordered to
  PyTorch's r, z, n.

Everything else is refused with a ConvertError that names the node, the op and the attribute or
input: other ops, other attribute values, a head that reads anything but the last step of the last
layer, initial states not provably zero, weights that are not constants, non-float32 weights
unless float16 (always exact) or float64 whose every value is a float32 (both converted, with a
note). Weights must be initializers or Constant nodes (through Identity or Cast), as
torch.onnx.export writes them with constant folding on (its default).
"""
from __future__ import annotations

import json
import os
import re
import struct

from ._onnx_graph import INPUT, MAX_WINDOW, ConvertError, Graph, Seq

__all__ = ["ConvertError", "Converted", "load", "convert", "write_safetensors", "model_name", "DTYPES"]

DTYPES = ("f32", "f16", "bf16")
_ST_DTYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
# The dtypes the CPU backend of each model type holds the weights in (weight_dtype), besides f32.
_CPU_HOLDS = {"mlp": ("f16", "bf16"), "lstm": ("bf16",), "gru": ()}

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,63}")


def model_name(stem: str) -> str:
    """A config model name (1 to 63 bytes of A-Z a-z 0-9 _ . -) from a file name's stem."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:63]
    return name or "model"


def _max_rows(features: int, notes: list) -> dict:
    """{"max_rows": N} where the default max_rows (16) of FEATURES-wide rows would not fit the default
    server.max_message_bytes, which sigserve refuses to start with (service/model.c); else {}."""
    default_rows, default_bytes, framing = 16, 65536, 128
    fit = (default_bytes - framing) // (4 * features)
    if fit >= default_rows:
        return {}
    if fit >= 1:
        notes.append(f'"max_rows": {fit}, the most rows of {features} features a request can carry within the '
                     f'default server.max_message_bytes ({default_bytes}); raise both for more')
        return {"max_rows": fit}
    notes.append(f"one row of {features} features takes {4 * features + framing} bytes: set "
                 f"server.max_message_bytes to at least that")
    return {"max_rows": 1}


def _bf16_bits(array):
    """ARRAY's float32 values rounded to nearest even bfloat16: their bits, as little-endian uint16."""
    import numpy as np
    u = np.ascontiguousarray(array, dtype="<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def _stored(array, dtype: str):
    """ARRAY's bytes as DTYPE ("f32", "f16", "bf16") stores them, and the values they hold (float64)."""
    import numpy as np
    a = np.asarray(array, dtype=np.float32)
    if dtype == "f16":
        with np.errstate(over="ignore"):
            h = a.astype("<f2")
        return h.tobytes(), h.astype(np.float64)
    if dtype == "bf16":
        bits = _bf16_bits(a)
        return bits.tobytes(), (bits.astype("<u4") << 16).view("<f4").reshape(a.shape).astype(np.float64)
    return np.ascontiguousarray(a, dtype="<f4").tobytes(), a.astype(np.float64)


def stored_values(array, dtype: str):
    """The values a tensor holds once written in DTYPE (float64 numpy array): for references."""
    return _stored(array, dtype)[1]


def write_safetensors(path: str, tensors: dict, dtypes: dict | None = None) -> int:
    """Writes TENSORS (name -> numpy array) as a safetensors file: an 8-byte little-endian header
    length, a JSON header (dtype, shape, data_offsets per tensor, padded with spaces to a multiple of
    8), then the raw little-endian data in the header's order: F32, or the dtype DTYPES names for the
    tensor ("f16", "bf16": rounded to nearest even). Returns the file's size."""
    import numpy as np
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        dtype = (dtypes or {}).get(name, "f32")
        data = _stored(np.asarray(array), dtype)[0]
        header[name] = {"dtype": _ST_DTYPE[dtype], "shape": list(np.shape(array)),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
    os.replace(tmp, path)
    return 8 + len(text) + offset


class Converted:
    """What the converter makes of an ONNX model: TENSORS (name -> float32 array) for the safetensors
    file, SNIPPET (the config's model object, "weights" filled in by write), KIND ("mlp", "lstm" or
    "gru"), SHAPE (one line describing it) and NOTES (conversions the user should know of)."""

    def __init__(self, kind, tensors, snippet, shape, notes):
        self.kind, self.tensors, self.snippet, self.shape, self.notes = kind, tensors, snippet, shape, notes
        self.weights_path = self.config_path = None
        self.weights_bytes = 0
        self.dtypes = {}        # tensor name -> "f16" / "bf16" where not F32

    def store_as(self, dtype: str) -> "Converted":
        """Stores every weight matrix (2-D tensor) in DTYPE ("f32", "f16", "bf16"), biases in F32; the
        snippet holds them so where the type's CPU backend can (weight_dtype), else a note says they
        are served widened. Raises ConvertError for an unknown dtype or a weight past its range."""
        import numpy as np
        if dtype not in DTYPES:
            raise ConvertError(f"--dtype {dtype}: expected one of {', '.join(DTYPES)}")
        self.dtypes = {}
        self.snippet.pop("weight_dtype", None)
        if dtype == "f32":
            return self
        for name, array in self.tensors.items():
            if np.ndim(array) != 2:
                continue
            held = stored_values(array, dtype)
            bad = np.flatnonzero(~np.isfinite(held))
            if bad.size:
                row, col = divmod(int(bad[0]), np.shape(array)[1])
                largest = "65504" if dtype == "f16" else "3.39e38"
                raise ConvertError(f'--dtype {dtype}: weight {name} [{row}][{col}] = {float(np.asarray(array)[row, col]):.9g} '
                                   f'does not fit in {dtype} (largest finite {largest}); use --dtype '
                                   f'{"bf16" if dtype == "f16" else "f32"}')
            self.dtypes[name] = dtype
        bound = "2^-11" if dtype == "f16" else "2^-8"
        if dtype in _CPU_HOLDS.get(self.kind, ()):
            # after "weights" and the type's keys: where a reader looks for how they are held
            self.snippet["weight_dtype"] = dtype
            self.notes.append(f"weight matrices stored as {dtype} (each rounded to nearest even, within {bound} of "
                              f"the weight; biases F32) and held as {dtype} (\"weight_dtype\"; its error bound: "
                              f"sigserve's config/README.md, \"CPU weight dtypes\")")
        else:
            holds = ", ".join(_CPU_HOLDS.get(self.kind, ())) or "f32 only"
            self.notes.append(f"weight matrices stored as {dtype} (each rounded to nearest even, within {bound} of "
                              f"the weight; biases F32); sigserve's CPU {self.kind} holds {holds}, so they are "
                              f"served widened to f32 (exactly the stored values)")
        return self

    def write(self, out_prefix: str) -> dict:
        """Writes OUT_PREFIX.safetensors and OUT_PREFIX.json (the snippet, "weights" relative to the
        JSON's folder); returns the snippet."""
        for suffix in (".json", ".safetensors"):
            if out_prefix.endswith(suffix):
                out_prefix = out_prefix[:-len(suffix)]
        self.weights_path, self.config_path = out_prefix + ".safetensors", out_prefix + ".json"
        folder = os.path.dirname(os.path.abspath(self.config_path))
        self.snippet["weights"] = os.path.relpath(os.path.abspath(self.weights_path), folder)
        target = self.weights_path
        try:
            self.weights_bytes = write_safetensors(self.weights_path, self.tensors, self.dtypes)
            target = self.config_path
            with open(self.config_path + ".tmp", "w") as f:
                f.write(json.dumps(self.snippet, indent=2) + "\n")
            os.replace(self.config_path + ".tmp", self.config_path)
        except OSError as e:
            raise ConvertError(f"cannot write {target}: {e.strerror or e}") from None
        return self.snippet


def load(onnx_path: str, name: str | None = None, window: int | None = None, dtype: str = "f32") -> Converted:
    """Reads and converts ONNX_PATH (nothing written). NAME: the model's name (default: the file's
    stem); WINDOW: the LSTM's window where the model's sequence length is dynamic; DTYPE: how the
    weight matrices are stored (Converted.store_as). Raises ConvertError."""
    if dtype not in DTYPES:
        raise ConvertError(f"--dtype {dtype}: expected one of {', '.join(DTYPES)}")
    return _load(onnx_path, name, window).store_as(dtype)


def _load(onnx_path: str, name: str | None, window: int | None) -> Converted:
    try:
        import numpy as np
        import onnx
        import onnx.numpy_helper  # noqa: F401
    except ImportError as e:
        raise ConvertError(f"converting needs the onnx package (pip install onnx): {e}") from None
    if name is None:
        name = model_name(os.path.splitext(os.path.basename(onnx_path))[0])
    elif not _NAME_RE.fullmatch(name):
        raise ConvertError(f"model name '{name}': expected 1 to 63 of A-Z a-z 0-9 _ . -")
    if window is not None and not 1 <= window <= MAX_WINDOW:
        raise ConvertError(f"--window {window}: expected 1 to {MAX_WINDOW}")
    try:
        model = onnx.load(onnx_path)
    except OSError as e:
        raise ConvertError(f"cannot read {onnx_path}: {e.strerror or e}") from None
    except Exception as e:      # onnx raises DecodeError and others for a file that is not a model
        raise ConvertError(f"{onnx_path}: not an ONNX model ({type(e).__name__}: {e})") from None
    g = Graph(model, window, onnx, np)
    graph = model.graph
    if len(graph.output) != 1:
        raise ConvertError(f"the graph has {len(graph.output)} outputs ({', '.join(o.name for o in graph.output)}); "
                           f"a sigserve model has one")
    out_name = graph.output[0].name
    reader = f'the graph output "{out_name}"'
    rows = g.rows(g.value(out_name, reader), reader)
    if len(g.inputs) != 1:
        raise ConvertError(f"the graph has {len(g.inputs)} inputs ({', '.join(g.inputs)}); a sigserve model has one")
    (input_name,) = g.inputs
    elem = g.inputs[input_name].type.tensor_type.elem_type
    elem_name = onnx.TensorProto.DataType.Name(elem)
    if elem_name in ("FLOAT16", "DOUBLE"):
        g.notes.append(f'graph input "{input_name}" is {elem_name}: sigserve takes and computes float32')
    elif elem_name != "FLOAT":
        raise ConvertError(f'graph input "{input_name}" has element type {elem_name}; sigserve takes float32')
    acts = [layer["activation"] for layer in rows.layers]
    if rows.origin is INPUT:
        if not rows.layers:
            raise ConvertError("the graph has no dense layer between its input and its output")
        if window is not None:
            raise ConvertError("--window is only for LSTM models; this one is an MLP")
        tensors, layers = {}, []
        for k, layer in enumerate(rows.layers):
            tensors[f"{k}.weight"] = layer["weight"]
            if layer["bias"] is not None:
                tensors[f"{k}.bias"] = layer["bias"]
            layers.append({"weight": f"{k}.weight", "bias": f"{k}.bias" if layer["bias"] is not None else None,
                           "activation": layer["activation"]})
        sizes = [rows.layers[0]["weight"].shape[1]] + [layer["weight"].shape[0] for layer in rows.layers]
        shape = "mlp: " + " -> ".join([str(sizes[0])] + [f"{s} ({a})" for s, a in zip(sizes[1:], acts)])
        snippet = {"name": name, "weights": None, **_max_rows(sizes[0], g.notes), "layers": layers}
        return Converted("mlp", tensors, snippet, shape, g.notes)
    stack, top = [], rows.origin
    while top is not None:
        stack.insert(0, top)
        top = top.below
    in_stack = {id(layer.node) for layer in stack}
    kind = stack[0].kind            # "lstm" or "gru": sigserve's type, its tensors' prefix
    title = kind.upper()
    for node in graph.node:         # a layer on top of the one the head reads: the head skips a layer
        if node.op_type in ("LSTM", "GRU") and id(node) not in in_stack and node.input:
            try:
                above = g.value(node.input[0], g.desc(node))
            except ConvertError:
                continue
            if isinstance(above, Seq) and above.sources == [rows.origin]:
                raise ConvertError(f"the head reads {rows.origin.desc}, below {g.desc(node)} in the stack; "
                                   f"sigserve's head reads the last layer")
    if len(rows.layers) > 1:
        raise ConvertError(f"after the {title} the graph has {len(rows.layers)} dense layers "
                           f"({', '.join(layer['nodes'][0] for layer in rows.layers)}); sigserve's {title} head is "
                           f"one dense layer")
    hidden = stack[0].hidden
    tensors = {}
    for k, layer in enumerate(stack):
        tensors[f"{kind}.weight_ih_l{k}"] = layer.w_ih
        tensors[f"{kind}.weight_hh_l{k}"] = layer.w_hh
        tensors[f"{kind}.bias_ih_l{k}"] = layer.b_ih
        tensors[f"{kind}.bias_hh_l{k}"] = layer.b_hh
    if rows.layers:
        head = rows.layers[0]
    else:
        head = {"weight": np.eye(hidden, dtype=np.float32), "bias": None, "activation": "none"}
        g.notes.append(f"no dense layer after the {title}: an identity head ({hidden} -> {hidden}) was written")
    tensors["head.weight"] = head["weight"]
    if head["bias"] is not None:
        tensors["head.bias"] = head["bias"]
    inputs = stack[0].inputs
    snippet = {"name": name, "type": kind, "weights": None, **_max_rows(g.window * inputs, g.notes),
               kind: f"{kind}.", "window": g.window,
               "head": {"weight": "head.weight", "bias": "head.bias" if head["bias"] is not None else None,
                        "activation": head["activation"]}}
    shape = (f"{kind}: {len(stack)} layer{'s' if len(stack) > 1 else ''}, {inputs} inputs a step, hidden {hidden}, "
             f"window {g.window}, head {hidden} -> {head['weight'].shape[0]} ({head['activation']}); a request row "
             f"is one window: {g.window} x {inputs} = {g.window * inputs} features, step after step (the ONNX "
             f"input is [{g.input_layout}])")
    return Converted(kind, tensors, snippet, shape, g.notes)


def convert(onnx_path: str, out_prefix: str, name: str | None = None, window: int | None = None,
            dtype: str = "f32") -> dict:
    """Converts ONNX_PATH into OUT_PREFIX.safetensors and OUT_PREFIX.json; returns the config snippet
    (the model object for sigserve's "models" list). Raises ConvertError naming what is refused."""
    return load(onnx_path, name=name, window=window, dtype=dtype).write(out_prefix)
