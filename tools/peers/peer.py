#!/usr/bin/env python3
"""The servers a user would pick instead of sigserve, speaking sigserve's wire protocol (ZeroMQ
ROUTER, sigserve.v1 protobuf), so one sigload run measures them side by side with sigserve:

  --engine torch-graph   PyTorch on the GPU: the MLP captured as one CUDA graph per batch size
                         (static input/output tensors, pinned host staging), replayed per request
  --engine torch-eager   PyTorch on the GPU, eager (no graph)
  --engine onnx-cpu      ONNX Runtime on the CPU (one intra-op thread), the model exported by torch

The weights are the same safetensors file sigserve serves (a Linear/ReLU chain named like
nn.Sequential: 0.weight, 0.bias, 2.weight, ...). One request at a time, in arrival order: the
simple server such a user would write. Replies carry outputs, rows and server_ns (receipt to send).

Needs: pyzmq, protobuf, torch, safetensors (and onnxruntime, onnx for onnx-cpu). On the GPU host
pyzmq is carried as a wheel (tools/gpu-run.sh says how).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

import zmq  # noqa: E402
from sigclient._pb import signal_pb2 as pb  # noqa: E402


def load_mlp(path, activations):
    import torch
    from safetensors.torch import load_file
    tensors = load_file(path)
    layers = []
    i = n_linear = 0
    while f"{i}.weight" in tensors:
        w, b = tensors[f"{i}.weight"], tensors[f"{i}.bias"]
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        layers.append(lin)
        n_linear += 1
        if n_linear <= len(activations) and activations[n_linear - 1] == "relu":
            layers.append(torch.nn.ReLU())
        i += 2
    return torch.nn.Sequential(*layers).eval()


class TorchGraph:
    def __init__(self, model, max_rows, graph):
        import torch
        self.torch = torch
        self.dev = torch.device("cuda")
        self.model = model.to(self.dev)
        self.inp = model[0].in_features
        self.graphs = {}
        self.static_in = {}
        self.static_out = {}
        self.host_in = torch.empty((max_rows, self.inp), pin_memory=True)
        outs = model[-1].out_features if hasattr(model[-1], "out_features") else model[-2].out_features
        self.host_out = torch.empty((max_rows, outs), pin_memory=True)
        self.use_graph = graph
        with torch.no_grad():
            for r in range(1, max_rows + 1):
                x = torch.zeros((r, self.inp), device=self.dev)
                for _ in range(3):
                    y = self.model(x)
                torch.cuda.synchronize()
                if graph:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        y = self.model(x)
                    self.graphs[r] = g
                self.static_in[r] = x
                self.static_out[r] = y

    def __call__(self, features, rows):
        torch = self.torch
        hin = self.host_in[:rows]
        hin.view(-1)[:] = torch.tensor(features, dtype=torch.float32)
        with torch.no_grad():
            self.static_in[rows].copy_(hin, non_blocking=True)
            if self.use_graph:
                self.graphs[rows].replay()
                out = self.static_out[rows]
            else:
                out = self.model(self.static_in[rows])
            hout = self.host_out[:rows]
            hout.copy_(out, non_blocking=True)
            torch.cuda.synchronize()
        return hout.reshape(-1).tolist()


class OnnxCpu:
    def __init__(self, model, max_rows, path):
        import onnxruntime as ort
        import torch
        self.inp = model[0].in_features
        onnx_path = path + ".onnx"
        torch.onnx.export(model, torch.zeros((1, self.inp)), onnx_path, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "rows"}, "y": {0: "rows"}}, dynamo=False)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
        import numpy as np
        self.np = np

    def __call__(self, features, rows):
        x = self.np.asarray(features, dtype=self.np.float32).reshape(rows, self.inp)
        return self.sess.run(["y"], {"x": x})[0].reshape(-1).tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:5600")
    ap.add_argument("--engine", choices=["torch-graph", "torch-eager", "onnx-cpu"], required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--model", default="tick_mlp")
    ap.add_argument("--activations", default="relu,relu,none")
    ap.add_argument("--max-rows", type=int, default=16)
    ap.add_argument("--busy-poll", action="store_true", help="poll the socket without sleeping")
    a = ap.parse_args()
    model = load_mlp(a.weights, a.activations.split(","))
    if a.engine == "onnx-cpu":
        engine = OnnxCpu(model, a.max_rows, os.path.join("/tmp", os.path.basename(a.weights)))
    else:
        engine = TorchGraph(model, a.max_rows, a.engine == "torch-graph")
    inp = model[0].in_features
    ctx = zmq.Context(1)
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(a.endpoint)
    print(f"peer {a.engine} serving {a.model} ({inp} inputs) on {a.endpoint}", flush=True)
    flags = zmq.NOBLOCK if a.busy_poll else 0
    while True:
        try:
            frames = sock.recv_multipart(flags, copy=True)
        except zmq.Again:
            continue
        except KeyboardInterrupt:
            break
        t0 = time.monotonic_ns()
        env, payload = frames[:-1], frames[-1]
        req = pb.Request()
        rep = pb.Reply()
        try:
            req.ParseFromString(payload)
        except Exception:
            rep.infer.status = pb.STATUS_BAD_REQUEST
            rep.infer.error = "payload: does not decode"
            sock.send_multipart(env + [rep.SerializeToString()])
            continue
        if req.WhichOneof("body") == "health":
            rep.health.live = True
            rep.health.ready = True
            rep.health.version = f"peer-{a.engine}"
        elif req.WhichOneof("body") == "list_models":
            m = rep.list_models.models.add()
            m.name, m.version, m.backend, m.kernel = a.model, "1", a.engine, a.engine
            m.input_size, m.max_rows, m.available = inp, a.max_rows, True
            m.output_size = len(engine([0.0] * inp, 1))
        else:
            inf = req.infer
            rows = inf.rows or 1
            out = rep.infer
            out.request_id = inf.request_id
            if inf.model != a.model or rows > a.max_rows or len(inf.features) != rows * inp:
                out.status = pb.STATUS_BAD_SHAPE
                out.error = "bad model or shape"
            else:
                t1 = time.monotonic_ns()
                out.outputs.extend(engine(inf.features, rows))
                out.compute_ns = time.monotonic_ns() - t1
                out.rows = rows
                out.batch_rows = rows
                out.model_version = "1"
            out.server_ns = time.monotonic_ns() - t0
        sock.send_multipart(env + [rep.SerializeToString()])


if __name__ == "__main__":
    main()
