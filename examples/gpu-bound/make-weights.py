#!/usr/bin/env python3
"""The weights of examples/gpu-bound's model "gpu_bound": an MLP 256 -> 8192 -> 8192 -> 8192 -> 1
(ReLU after each hidden layer), laid out like the state dict of PyTorch's

    nn.Sequential(Linear(256, 8192), ReLU, Linear(8192, 8192), ReLU, Linear(8192, 8192), ReLU,
                  Linear(8192, 1))

so the tensors are 0.weight [8192, 256], 0.bias [8192], 2.weight, 2.bias, 4.weight, 4.bias,
6.weight [1, 8192], 6.bias [1]: 136,347,649 float32 values, 545,390,596 bytes of data. The file is
made where it is served (545 MB is too large to copy to a lent GPU host) and is the same, byte for
byte, wherever and however it is made:

    python3 examples/gpu-bound/make-weights.py                       # gpu_bound.safetensors beside it
    python3 examples/gpu-bound/make-weights.py --out /tmp/gpu_bound.safetensors
    python3 examples/gpu-bound/make-weights.py --hidden 64 --out small.safetensors   # a test-sized one
    python3 examples/gpu-bound/make-weights.py --self-test          # the generators agree (small file)

Value k of the file (counting every tensor's values in file order) is a keyed integer hash of k
(Chris Wellons' lowbias32) turned into a float32 uniform in [-bound, bound): s = (hash >> 8) - 2^23,
value = s x (bound / 2^23), one float32 rounding. That is computed the same way by numpy, by torch
(int64 arithmetic kept below 2^63) or by plain Python (slow: a test size only), so the sha256 this
prints does not depend on which of them was installed. The bound follows the fan-in, so that
outputs stay O(1) for inputs uniform in [-1, 1) (sigload's default features): sqrt(6 / fan_in)
for a weight followed by ReLU (the mean square of a layer's input is kept through it),
sqrt(3 / fan_in) for the last weight (the output's variance is its input's mean square), and
1 / sqrt(fan_in) for biases (PyTorch's default for Linear). Where the safetensors package is
installed, the file is opened with it afterwards and every tensor's name and shape checked.
"""
import argparse
import array
import hashlib
import json
import math
import os
import struct
import sys
import tempfile
import time

MASK = 0xFFFFFFFF
CHUNK = 1 << 22                     # values generated and written at a time (16 MB)
DEFAULT_SEED = 20                   # issue 20
SMALL_HIDDEN = 64                   # --self-test's size
# sha256 of `--hidden 64` with the default seed and inputs, as numpy and plain Python made it.
SMALL_SHA256 = "509b13bd6af3820795cacca6793fcfe80d9e5d865b7fdb2e3b17117fda4a3170"


def layers(inputs, hidden):
    """(weight name, bias name, out, in, followed by ReLU) per Linear, nn.Sequential's numbering."""
    sizes = [inputs, hidden, hidden, hidden, 1]
    return [(f"{2 * i}.weight", f"{2 * i}.bias", sizes[i + 1], sizes[i], i + 1 < len(sizes) - 1)
            for i in range(len(sizes) - 1)]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def tensors(inputs, hidden):
    """(name, shape, bound as a float32 value) in file order."""
    out = []
    for weight, bias, n_out, n_in, relu in layers(inputs, hidden):
        out.append((weight, [n_out, n_in], f32(math.sqrt((6.0 if relu else 3.0) / n_in))))
        out.append((bias, [n_out], f32(1.0 / math.sqrt(n_in))))
    return out


def key_of(seed):
    return lowbias32_int((seed * 0x9E3779B9 + 0x7F4A7C15) & MASK)


def lowbias32_int(x):
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK
    x ^= x >> 16
    return x


# Each generator: values(start, count, key, scale) -> the little-endian float32 bytes of values
# start .. start + count - 1, scale = bound / 2^23 (exact: bound is a float32, 2^23 a power of two).

def python_values(start, count, key, scale):
    a = array.array("f", (float((lowbias32_int((k ^ key) & MASK) >> 8) - (1 << 23)) * scale
                          for k in range(start, start + count)))
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def numpy_values(start, count, key, scale):
    import numpy as np
    x = np.arange(start, start + count, dtype=np.uint32)
    x ^= np.uint32(key)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)      # uint32 arrays wrap modulo 2^32
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    s = (x >> np.uint32(8)).astype(np.int32) - np.int32(1 << 23)
    return (s.astype(np.float32) * np.float32(scale)).astype("<f4").tobytes()


def torch_values(start, count, key, scale):
    import ctypes
    import torch

    def mul32(x, c):                # x * c modulo 2^32 without passing 2^63 in int64
        return ((((x * (c >> 16)) & 0xFFFF) << 16) + x * (c & 0xFFFF)) & MASK
    x = torch.arange(start, start + count, dtype=torch.int64) ^ key
    x ^= x >> 16
    x = mul32(x, 0x7FEB352D)
    x ^= x >> 15
    x = mul32(x, 0x846CA68B)
    x ^= x >> 16
    v = ((x >> 8) - (1 << 23)).to(torch.float32) * torch.tensor(scale, dtype=torch.float32)
    v = v.contiguous()
    if sys.byteorder != "little":
        raise SystemExit("make-weights.py: the torch generator assumes a little-endian host; use --generator python")
    return ctypes.string_at(v.data_ptr(), v.numel() * 4)


GENERATORS = {"numpy": numpy_values, "torch": torch_values, "python": python_values}


def available(name):
    if name == "python":
        return True
    try:
        __import__(name)
        return True
    except ImportError:
        return False


def pick_generator(name):
    if name != "auto":
        if not available(name):
            raise SystemExit(f"make-weights.py: --generator {name}: the {name} package is not installed")
        return name
    for candidate in ("numpy", "torch"):
        if available(candidate):
            return candidate
    return "python"


def write(path, inputs, hidden, seed, generator):
    """Writes the file (through PATH.tmp, then renamed); returns (bytes, sha256 hex)."""
    values = GENERATORS[generator]
    key = key_of(seed)
    header, offset = {}, 0
    header["__metadata__"] = {"format": "pt", "model": "gpu_bound", "seed": str(seed),
                              "made_by": "examples/gpu-bound/make-weights.py"}
    plan = tensors(inputs, hidden)
    for name, shape, _ in plan:
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    digest = hashlib.sha256()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for block in (struct.pack("<Q", len(text)), text):
            f.write(block)
            digest.update(block)
        k = 0
        for name, shape, bound in plan:
            n, scale = math.prod(shape), bound / (1 << 23)
            for start in range(0, n, CHUNK):
                block = values(k + start, min(CHUNK, n - start), key, scale)
                f.write(block)
                digest.update(block)
            k += n
    os.replace(tmp, path)
    return 8 + len(text) + offset, digest.hexdigest()


def check_with_safetensors(path, inputs, hidden):
    """Names and shapes as the safetensors package reads them; None when it cannot be used here."""
    try:
        from safetensors import safe_open
    except ImportError:
        return None
    framework = "numpy" if available("numpy") else "pt" if available("torch") else None
    if framework is None:
        return None
    with safe_open(path, framework=framework) as f:
        got = {name: list(f.get_slice(name).get_shape()) for name in f.keys()}
    want = {name: shape for name, shape, _ in tensors(inputs, hidden)}
    if got != want:
        raise SystemExit(f"make-weights.py: {path}: the safetensors package reads {got}, expected {want}")
    return framework


def self_test():
    """Makes the --hidden 64 file with every generator installed here: all must give SMALL_SHA256."""
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        for name in GENERATORS:
            if not available(name):
                print(f"{name}: not installed, skipped")
                continue
            size, sha = write(os.path.join(d, name + ".safetensors"), 256, SMALL_HIDDEN, DEFAULT_SEED, name)
            same = sha == SMALL_SHA256
            bad += not same
            print(f"{name}: {size} bytes, sha256 {sha} {'ok' if same else 'DIFFERS from ' + SMALL_SHA256}")
    print(f"self-test: {'passed' if not bad else 'FAILED'}")
    return 1 if bad else 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description="Writes the gpu_bound model's weights (an F32 safetensors file).")
    p.add_argument("--out", default=os.path.join(here, "gpu_bound.safetensors"),
                   help="where to write (default: gpu_bound.safetensors beside this script, where "
                        "examples/gpu-bound/sigserve.json looks)")
    p.add_argument("--hidden", type=int, default=8192, help="hidden width, 1 to 8192 (default 8192)")
    p.add_argument("--inputs", type=int, default=256, help="input size, 1 to 8192 (default 256)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"0 to 2^32-1 (default {DEFAULT_SEED})")
    p.add_argument("--generator", choices=["auto", *GENERATORS], default="auto",
                   help="what computes the values: auto takes numpy, else torch, else plain Python "
                        "(the bytes are the same; plain Python is slow: test sizes only)")
    p.add_argument("--self-test", action="store_true",
                   help=f"make a --hidden {SMALL_HIDDEN} file with every generator installed and check its sha256")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    for name, v in (("--hidden", a.hidden), ("--inputs", a.inputs)):
        if not 1 <= v <= 8192:
            p.error(f"{name}: expected 1 to 8192 (the kernels' contract), got {v}")
    if not 0 <= a.seed <= MASK:
        p.error(f"--seed: expected 0 to {MASK}, got {a.seed}")
    generator = pick_generator(a.generator)
    t0 = time.monotonic()
    size, sha = write(a.out, a.inputs, a.hidden, a.seed, generator)
    seconds = time.monotonic() - t0
    checked = check_with_safetensors(a.out, a.inputs, a.hidden)
    shapes = " -> ".join(str(s) for s in [a.inputs] + [a.hidden] * 3 + [1])
    print(f"{a.out}: MLP {shapes}, seed {a.seed}, {size} bytes ({size / 1e6:.1f} MB), "
          f"{generator} in {seconds:.1f} s")
    print(f"sha256 {sha}")
    print("checked with the safetensors package (" + checked + ")" if checked else
          "not checked with the safetensors package (not installed, or neither numpy nor torch is)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
