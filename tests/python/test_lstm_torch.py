"""An LSTM built and exported in PyTorch answers in sigserve what PyTorch answers.

torch.nn.LSTM(batch_first=True) + nn.Linear head, saved with safetensors.torch.save_file(state_dict)
(tensors "lstm.weight_ih_l0", ..., "head.weight", "head.bias"), is loaded by sigserve's own loader
and run by `lstmbench --check` (the backend's full-window and streaming entries, the same code the
server calls): one full window, then one stream of more steps than the window (each output is
PyTorch's over the last `window` steps, zeros before the first). Compared with PyTorch in float64,
pooled ||out - ref|| / ||ref||: 1e-5 on the CPU backend and the CUDA backend with f32 weights,
5e-3 with f16, 3e-2 with bf16 (where the build has CUDA and torch sees a device). Prints
"SKIP: why" and exits 0 without torch and safetensors (Debian's python3 on CI has neither).

Run: BUILD=build python3 tests/python/test_lstm_torch.py
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
    print(f"SKIP: PyTorch LSTM test needs torch and safetensors ({e})")
    sys.exit(0)

BUILD = os.environ.get("BUILD", "build")
LSTMBENCH = os.path.join(BUILD, "lstmbench")
TOL = {"f32": 1e-5, "f16": 5e-3, "bf16": 3e-2}


class Model(torch.nn.Module):
    def __init__(self, inputs, hidden, layers, outputs):
        super().__init__()
        self.lstm = torch.nn.LSTM(inputs, hidden, layers, batch_first=True)
        self.head = torch.nn.Linear(hidden, outputs)

    def forward(self, x):  # x: [batch, window, inputs]
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


def rel_error(got, want):
    num = sum((g - w) ** 2 for g, w in zip(got, want))
    den = sum(w * w for w in want)
    return (num / den) ** 0.5 if den else num ** 0.5


def run_case(tmp, layers, inputs, hidden, outputs, window, steps, backends):
    model = Model(inputs, hidden, layers, outputs).float().eval()
    path = os.path.join(tmp, f"lstm-{layers}-{hidden}.safetensors")
    save_file(model.state_dict(), path)
    ref = Model(inputs, hidden, layers, outputs).double().eval()
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
    for backend, dtype in backends:
        p = subprocess.run([LSTMBENCH, "--check", path, "--window", str(window), "--backend", backend,
                            "--dtype", dtype], input=text, capture_output=True, text=True, timeout=600)
        if p.returncode == 2 and "not available in this build" in p.stderr:
            print(f"note: {backend} {dtype}: {p.stderr.strip()}")
            continue
        if p.returncode != 0:
            print(f"FAIL {backend} {dtype}: lstmbench exited {p.returncode}: {p.stderr.strip()}")
            failures += 1
            continue
        lines = p.stdout.strip().splitlines()
        got_win = [float(v) for v in lines[0].split()[1:]]
        got_steps = [[float(v) for v in line.split()[2:]] for line in lines[1:]]
        if len(got_steps) != steps or len(got_win) != outputs:
            print(f"FAIL {backend} {dtype}: {len(got_steps)} steps and {len(got_win)} outputs back, "
                  f"expected {steps} and {outputs}")
            failures += 1
            continue
        e_win = rel_error(got_win, want_win)
        e_steps = rel_error([v for s in got_steps for v in s], [v for s in want_steps for v in s])
        ok = e_win <= TOL[dtype] and e_steps <= TOL[dtype]
        print(f"{'ok  ' if ok else 'FAIL'} {backend} {dtype} ({layers} layers, {inputs} inputs, {hidden} units, "
              f"{outputs} outputs, window {window}, {steps} steps): relative error {e_win:.3g} (window), "
              f"{e_steps:.3g} (stream), allowed {TOL[dtype]:g}")
        failures += 0 if ok else 1
    return failures


def main():
    if not os.path.exists(LSTMBENCH):
        print(f"FAIL: {LSTMBENCH} not built")
        return 1
    backends = [("cpu", "f32")]
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        if (major, minor) == (9, 0):
            backends += [("cuda", "f32"), ("cuda", "f16"), ("cuda", "bf16")]
        else:
            print(f"note: device 0 has compute capability {major}.{minor}: the CUDA LSTM kernel needs 9.0, CPU only")
    tmp = tempfile.mkdtemp(prefix="sigserve-lstm-torch-")
    failures = 0
    failures += run_case(tmp, 2, 7, 13, 3, 5, 12, backends)
    failures += run_case(tmp, 2, 128, 96, 1, 64, 70, backends)   # the small size
    print(f"{'FAIL' if failures else 'ok'}: PyTorch nn.LSTM exports through sigserve's LSTM backends "
          f"({', '.join(b + ' ' + d for b, d in backends)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
