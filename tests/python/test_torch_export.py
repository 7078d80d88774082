"""A model built and exported in PyTorch, served by sigserve, answers what PyTorch answers.

torch.nn.Sequential of Linear/ReLU layers, saved with safetensors.torch.save_file(state_dict), is
served as it is on the CPU backend and (where this build has CUDA and a device) on every CUDA
kernel; outputs come back through the C client `sigclient` and must equal PyTorch's float64
forward pass within 1e-5 relative (pooled over all outputs). Prints "SKIP: why" and exits 0 where
torch or safetensors is not installed (Debian's python3 on CI has neither).

Run: BUILD=build python3 tests/python/test_torch_export.py
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

try:
    import torch
    from safetensors.torch import save_file
except ImportError as e:  # CI: Debian's python3 has no torch
    print(f"SKIP: PyTorch export test needs torch and safetensors ({e})")
    sys.exit(0)

BUILD = os.environ.get("BUILD", "build")
SIGSERVE = os.path.join(BUILD, "sigserve")
SIGCLIENT = os.path.join(BUILD, "sigclient")
ROWS = 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def has_cuda_backend():
    out = subprocess.run([SIGSERVE, "--version"], capture_output=True, text=True).stdout
    return "cuda" in out and torch.cuda.is_available()


def main():
    torch.manual_seed(int(time.time()))
    model = torch.nn.Sequential(
        torch.nn.Linear(37, 91), torch.nn.ReLU(),
        torch.nn.Linear(91, 13), torch.nn.ReLU(),
        torch.nn.Linear(13, 3),
    ).float().eval()
    tmp = tempfile.mkdtemp(prefix="sigserve-torch-")
    weights = os.path.join(tmp, "model.safetensors")
    save_file(model.state_dict(), weights)

    layers = [{"weight": "0.weight", "bias": "0.bias", "activation": "relu"},
              {"weight": "2.weight", "bias": "2.bias", "activation": "relu"},
              {"weight": "4.weight", "bias": "4.bias", "activation": "none"}]
    served = [("torch_cpu", {"backend": "cpu"})]
    if has_cuda_backend():
        for kernel in ("warp", "mbyv", "cublas", "fused"):
            served.append((f"torch_{kernel}", {"backend": "cuda", "kernel": kernel}))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    config = {"server": {"endpoints": [endpoint], "log_level": "warn"},
              "models": [dict(name=name, weights=weights, max_rows=ROWS, layers=layers, **extra)
                         for name, extra in served]}
    config_path = os.path.join(tmp, "torch.json")
    with open(config_path, "w") as f:
        json.dump(config, f)

    server = subprocess.Popen([SIGSERVE, "--config", config_path])
    failures = 0
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            h = subprocess.run([SIGCLIENT, "--endpoint", endpoint, "--timeout", "500", "health"],
                               capture_output=True, text=True)
            if h.returncode == 0:
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("sigserve did not become ready")

        features = torch.rand(ROWS, 37, dtype=torch.float32) * 4 - 2
        feature_file = os.path.join(tmp, "features.txt")
        with open(feature_file, "w") as f:
            for row in features.tolist():
                f.write(" ".join(repr(v) for v in row) + "\n")
        with torch.no_grad():
            expected64 = model.double()(features.double())
            model.float()
        for name, _ in served:
            r = subprocess.run([SIGCLIENT, "--endpoint", endpoint, "infer", "--model", name,
                                "--file", feature_file, "--rows", str(ROWS)], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {name}: exit {r.returncode}: {r.stderr.strip()}")
                failures += 1
                continue
            got = torch.tensor([[float(v) for v in line.split()] for line in r.stdout.strip().splitlines()],
                               dtype=torch.float64)
            err = (torch.linalg.norm(got - expected64) / torch.linalg.norm(expected64)).item()
            ok = got.shape == expected64.shape and err <= 1e-5
            print(f"{'PASS' if ok else 'FAIL'} {name}: relative error {err:.2e} against PyTorch float64 "
                  f"({ROWS} rows x 3 outputs)")
            failures += 0 if ok else 1
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=10)
        if code != 0:
            print(f"FAIL sigserve exited {code}")
            failures += 1
    passed = len(served) - failures
    print(f"{max(passed, 0)} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
