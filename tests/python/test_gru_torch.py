"""A GRU built and exported in PyTorch answers in sigserve what PyTorch answers.

torch.nn.GRU(batch_first=True) + nn.Linear head, saved with safetensors.torch.save_file(state_dict)
(tensors "gru.weight_ih_l0", ..., "head.weight", "head.bias"; gates r, z, n in PyTorch's order), is
loaded by sigserve's own loader and run by `rnncheck` (the GRU backend's full-window and streaming
entries, the same code the server calls, and the float64 reference they are judged by): one full
window, then one stream of more steps than the window (each output is PyTorch's over the last
`window` steps, zeros before the first). Shapes: odd widths, one layer and several, a model without
biases. Compared with PyTorch in float64, pooled ||out - ref|| / ||ref||: 1e-5 for the CPU backend,
1e-12 for the float64 reference; where a GPU is (an NVIDIA driver), 1e-5 for the CUDA backend too
(rnncheck --backend cuda: its CUDA graphs), which is skipped, saying so, without one. Prints "SKIP:
why" and exits 0 without torch and safetensors (Debian's python3 on CI has neither); runs on the
GPU host, where torch is (rnncheck opens the CUDA backend, libsigserve-cuda.so, from beside itself).

Run: BUILD=build python3 tests/python/test_gru_torch.py
"""
import os
import subprocess
import sys
import tempfile
import time

try:
    import torch
    from safetensors.torch import save_file
except ImportError as e:  # CI: Debian's python3 has no torch
    print(f"SKIP: PyTorch GRU test needs torch and safetensors ({e})")
    sys.exit(0)

BUILD = os.environ.get("BUILD", "build")
RNNCHECK = os.path.join(BUILD, "rnncheck")
TOL = {"cpu": 1e-5, "cuda": 1e-5, "reference": 1e-12}
# The CUDA backend's comparison needs a GPU: its driver's files say whether this host has one.
GPU = os.path.exists("/proc/driver/nvidia/version")
BACKENDS = (("cpu", ["--backend", "cpu"]),) + ((("cuda", ["--backend", "cuda"]),) if GPU else ()) \
    + (("reference", ["--reference"]),)


class Model(torch.nn.Module):
    def __init__(self, inputs, hidden, layers, outputs, bias=True):
        super().__init__()
        self.gru = torch.nn.GRU(inputs, hidden, layers, batch_first=True, bias=bias)
        self.head = torch.nn.Linear(hidden, outputs)

    def forward(self, x):  # x: [batch, window, inputs]
        y, _ = self.gru(x)
        return self.head(y[:, -1])


def rel_error(got, want):
    num = sum((g - w) ** 2 for g, w in zip(got, want))
    den = sum(w * w for w in want)
    return (num / den) ** 0.5 if den else num ** 0.5


def run_case(tmp, layers, inputs, hidden, outputs, window, steps, bias=True):
    model = Model(inputs, hidden, layers, outputs, bias).float().eval()
    path = os.path.join(tmp, f"gru-{layers}-{inputs}-{hidden}-{int(bias)}.safetensors")
    save_file(model.state_dict(), path)
    ref = Model(inputs, hidden, layers, outputs, bias).double().eval()
    ref.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    g = torch.Generator().manual_seed(int(time.time()))
    win = torch.rand(window, inputs, generator=g) * 2 - 1
    stream = torch.rand(steps, inputs, generator=g) * 2 - 1
    with torch.no_grad():
        want_win = ref(win.double().unsqueeze(0))[0].tolist()
        want_steps = []
        for t in range(steps):
            w = torch.zeros(window, inputs, dtype=torch.float64)
            first = max(0, t + 1 - window)
            part = stream[first:t + 1].double()
            w[window - part.shape[0]:] = part
            want_steps.append(ref(w.unsqueeze(0))[0].tolist())
    text = " ".join(f"{v:.9g}" for v in torch.cat([win.flatten(), stream.flatten()]).tolist())
    failures = 0
    for what, args in BACKENDS:
        p = subprocess.run([RNNCHECK, "--type", "gru", "--window", str(window), path] + args, input=text,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(f"FAIL {what}: rnncheck exited {p.returncode}: {p.stderr.strip()}")
            failures += 1
            continue
        lines = p.stdout.strip().splitlines()
        got_win = [float(v) for v in lines[0].split()[1:]]
        got_steps = [[float(v) for v in line.split()[2:]] for line in lines[1:]]
        if len(got_steps) != steps or len(got_win) != outputs:
            print(f"FAIL {what}: {len(got_steps)} steps and {len(got_win)} outputs back, expected {steps} and {outputs}")
            failures += 1
            continue
        e_win = rel_error(got_win, want_win)
        e_steps = rel_error([v for s in got_steps for v in s], [v for s in want_steps for v in s])
        ok = e_win <= TOL[what] and e_steps <= TOL[what]
        print(f"{'ok  ' if ok else 'FAIL'} {what} ({layers} layers, {inputs} inputs, {hidden} units, {outputs} "
              f"outputs, window {window}, {steps} steps{'' if bias else ', no biases'}): relative error {e_win:.3g} "
              f"(window), {e_steps:.3g} (stream), allowed {TOL[what]:g}")
        failures += 0 if ok else 1
    return failures


def main():
    if not os.path.exists(RNNCHECK):
        print(f"FAIL: {RNNCHECK} not built")
        return 1
    tmp = tempfile.mkdtemp(prefix="sigserve-gru-torch-")
    if not GPU:
        print("skip cuda: no NVIDIA driver on this host (no /proc/driver/nvidia/version): the CUDA backend is compared "
              "where a GPU is")
    failures = 0
    failures += run_case(tmp, 1, 1, 1, 1, 1, 4)
    failures += run_case(tmp, 2, 7, 13, 3, 5, 12)
    failures += run_case(tmp, 3, 33, 17, 2, 9, 20)
    failures += run_case(tmp, 2, 5, 21, 1, 4, 9, bias=False)
    failures += run_case(tmp, 2, 128, 96, 1, 64, 70)   # the LSTM's small size, as a GRU
    print(f"{'FAIL' if failures else 'ok'}: PyTorch nn.GRU exports through sigserve's GRU backends "
          f"({'cpu, cuda' if GPU else 'cpu'}) and reference")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
