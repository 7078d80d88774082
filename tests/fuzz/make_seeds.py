#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/), deterministically,
with the standard library only: run it from the repository root after changing the formats.
Seeds are small valid inputs and near-valid ones (each a step from valid: a NUL in a name, a
duplicate key, a gap in the data). Crashing inputs found later are added by hand, under a name
that says what they are; this script leaves files it did not write alone."""
import json
import os
import shutil
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    folder = os.path.join(ROOT, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# ------------------------------------------------------------------------- requests (protobuf)

def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def ld(field, payload):
    return key(field, 2) + varint(len(payload)) + payload


def infer(model=b"tick_mlp", features=(), rows=0, request_id=0, deadline_us=0, stream_id=0, packed=True,
          extra=b""):
    body = b""
    if request_id:
        body += key(1, 0) + varint(request_id)
    if model:
        body += ld(2, model)
    floats = [struct.pack("<f", x) for x in features]
    if floats and packed:
        body += ld(3, b"".join(floats))
    elif floats:
        body += b"".join(key(3, 5) + f for f in floats)
    if rows:
        body += key(4, 0) + varint(rows)
    if deadline_us:
        body += key(5, 0) + varint(deadline_us)
    if stream_id:
        body += key(6, 0) + varint(stream_id)
    return ld(1, body + extra)


def requests():
    f16 = [i * 0.25 - 2.0 for i in range(16)]
    write("request", "infer_packed", infer(features=f16, rows=1, request_id=42, deadline_us=500))
    write("request", "infer_unpacked", infer(features=f16, rows=1, request_id=42, deadline_us=500, packed=False))
    write("request", "infer_stream_step", infer(model=b"seq", features=f16[:4], request_id=9, stream_id=12345))
    write("request", "infer_two_rows_packed", infer(features=f16, rows=2, request_id=7))
    write("request", "infer_two_rows_unpacked", infer(features=f16, rows=2, request_id=7, packed=False))
    mixed = ld(3, struct.pack("<2f", 1.0, 2.0)) + key(3, 5) + struct.pack("<f", 3.0) + ld(3, b"")
    write("request", "infer_mixed_chunks", infer(features=(), rows=1, extra=mixed))
    write("request", "infer_no_fields", ld(1, b""))
    write("request", "infer_max_varints", infer(features=[1.0], rows=2**32 - 1, request_id=2**64 - 1,
                                                deadline_us=2**32 - 1))
    write("request", "infer_nan_inf", infer(features=[float("nan"), float("inf"), -0.0, 1e-45], rows=1))
    write("request", "infer_utf8_name", infer(model="modèle_€_𝄞".encode(), features=[1.0]))
    write("request", "infer_unknown_field", infer(features=[1.0], extra=key(15, 0) + varint(1) + ld(16, b"xyz")))
    write("request", "infer_long_tag", ld(1, b"\x92\x00" + varint(8) + b"tick_mlp"))
    write("request", "health", ld(2, b""))
    write("request", "list_models", ld(3, b""))
    write("request", "infer_then_health", infer(features=[1.0]) + ld(2, b""))
    write("request", "health_then_infer", ld(2, b"") + infer(features=[1.0, 2.0]))
    # near-valid: refused by the codec
    write("request", "bad_model_nul", infer(model=b"tick_mlp\x00x", features=[1.0]))
    write("request", "bad_model_utf8", infer(model=b"tick\xc0\xafmlp", features=[1.0]))
    write("request", "bad_no_body", key(15, 0) + varint(1))
    write("request", "bad_truncated", infer(features=f16, rows=1)[:-3])
    write("request", "bad_group", key(1, 3) + key(1, 4))


# ------------------------------------------------------------------------- safetensors

def safetensors(header, data=b"", pad=True):
    text = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    raw = text.encode()
    if pad:
        raw += b" " * ((8 - (8 + len(raw)) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def tensors(entries, metadata=None):
    """entries: (name, dtype, shape, bytes) in data order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return safetensors(header, data)


def weights():
    w0 = f32([((i * 37) % 17 - 8) / 16 for i in range(8 * 4)])
    b0 = f32([i / 8 for i in range(8)])
    w2 = f32([((i * 11) % 13 - 6) / 13 for i in range(2 * 8)])
    b2 = f32([0.5, -0.5])
    mlp = [("0.weight", "F32", [8, 4], w0), ("0.bias", "F32", [8], b0),
           ("2.weight", "F32", [2, 8], w2), ("2.bias", "F32", [2], b2)]
    write("safetensors", "mlp_f32", tensors(mlp, {"format": "pt"}))
    halves = struct.pack("<6H", 0x3C00, 0x4000, 0x4200, 0x7C00, 0xFC00, 0x0001)
    bf = struct.pack("<3H", 0x3F80, 0xC000, 0x7FC0)
    write("safetensors", "f16_bf16_scalar_empty", tensors([
        ("i", "I64", [3], struct.pack("<3q", 0, 1, 2)), ("e", "F32", [0, 4], b""),
        ("s", "F32", [], f32([3.5])), ("h", "F16", [2, 3], halves), ("b", "BF16", [3], bf)], {"format": "np"}))
    sizes = {"F64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8,
             "F8_E4M3": 1, "F8_E5M2": 1}
    write("safetensors", "every_dtype", tensors([(d, d, [2], bytes(range(2 * n))) for d, n in sizes.items()]))
    write("safetensors", "empty_header", safetensors("{}"))
    write("safetensors", "metadata_only", safetensors({"__metadata__": {"a": "b", "c": ""}}))
    write("safetensors", "unpadded",
          safetensors('{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32([1.0]), pad=False))
    write("safetensors", "lstm", tensors([
        ("lstm.weight_ih_l0", "F32", [8, 2], f32([0.1] * 16)), ("lstm.weight_hh_l0", "F32", [8, 2], f32([0.2] * 16)),
        ("lstm.bias_ih_l0", "F32", [8], f32([0.0] * 8)), ("lstm.bias_hh_l0", "F32", [8], f32([0.0] * 8)),
        ("head.weight", "F32", [1, 2], f32([1.0, -1.0])), ("head.bias", "F32", [1], f32([0.0]))]))
    # near-valid
    one = '"dtype":"F32","shape":[1],"data_offsets":[0,4]'
    write("safetensors", "bad_duplicate_key", safetensors('{"t":{"dtype":"I64",%s}}' % one, f32([1.0])))
    write("safetensors", "bad_duplicate_tensor", safetensors('{"t":{%s},"t":{%s}}' % (one, one), f32([1.0])))
    write("safetensors", "bad_escaped_nul", safetensors('{"t\\u0000x":{%s}}' % one, f32([1.0])))
    write("safetensors", "bad_gap", safetensors('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32([1, 2])))
    write("safetensors", "bad_overlap", safetensors('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                                    '"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32([1, 2])))
    write("safetensors", "bad_shape_overflow",
          safetensors('{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}', f32([1])))
    write("safetensors", "bad_header_length", struct.pack("<Q", 2**63) + b"{}")
    write("safetensors", "bad_truncated", tensors(mlp)[:-5])
    write("safetensors", "bad_header_nul", safetensors('{"a"\x00:1}'))


# ------------------------------------------------------------------------- configuration

def configs(repo):
    for name in ("sigserve.json", "example-cpu.json"):
        shutil.copyfile(os.path.join(repo, "config", name), os.path.join(ROOT, "config", name))
    layers = [{"weight": "0.weight", "bias": "0.bias", "activation": "relu"},
              {"weight": "2.weight", "bias": None, "activation": "none"}]
    full = {
        "server": {"endpoints": ["tcp://127.0.0.1:5555", "ipc:///tmp/s.ipc", "inproc://x"],
                   "max_message_bytes": 65536, "busy_poll": True, "log_level": "debug", "log_format": "json",
                   "io_threads": 2, "queue_depth": 128, "cpus": [0, 1], "drain_ms": 100,
                   "http": "127.0.0.1:9100", "stats_interval_s": 0, "heartbeat_ms": 1000,
                   "max_connections": 16, "max_inflight_per_client": 4, "ipc_mode": "0660",
                   "curve": {"secret_key_file": "keys/server.key_secret", "allowed_clients": "keys/clients"}},
        "models": [
            {"name": "tick_mlp", "version": "2", "type": "mlp", "backend": "cuda", "kernel": "persistent",
             "cpu_kernel": "blas", "graph": False, "zero_copy": True, "wait": "block", "devices": [0, 1],
             "max_rows": 32, "instances": 2, "cpus": [2, 3], "max_batch_rows": 64, "batch_delay_us": 20,
             "queue_depth": 256, "keep_warm_us": 1000, "watchdog_ms": 500, "weight_dtype": "bf16",
             "weights": "/abs/tick.safetensors", "layers": layers},
            {"name": "seq", "type": "lstm", "backend": "cpu", "weights": "seq.safetensors", "lstm": "lstm",
             "window": 32, "head": {"weight": "head.weight", "activation": "sigmoid"},
             "max_streams": 100, "stream_idle_s": 60, "advances_apart": True},
        ],
    }
    write("config", "every_key.json", json.dumps(full, indent=1, ensure_ascii=False))
    minimal = {"server": {"endpoints": ["tcp://*:5555"]},
               "models": [{"name": "m", "weights": "m.safetensors", "layers": [{"weight": "0.weight"}]}]}
    write("config", "minimal.json", json.dumps(minimal))
    def variant(name, change):
        cfg = json.loads(json.dumps(minimal))
        change(cfg)
        write("config", name, json.dumps(cfg))
    variant("bad_unknown_key.json", lambda c: c["server"].update(max_mesage_bytes=1))
    variant("bad_range.json", lambda c: c["server"].update(max_message_bytes=63))
    variant("bad_type.json", lambda c: c["models"][0].update(max_rows="16"))
    variant("bad_enum.json", lambda c: c["models"][0].update(backend="tpu"))
    variant("bad_device_and_devices.json", lambda c: c["models"][0].update(device=0, devices=[0]))
    variant("bad_duplicate_names.json", lambda c: c["models"].append(dict(c["models"][0])))
    variant("bad_lstm_without_window.json", lambda c: c["models"][0].update(type="lstm"))
    variant("bad_endpoint.json", lambda c: c["server"].update(endpoints=["udp://x:1"]))
    write("config", "bad_not_object.json", "[1, 2, 3]")
    write("config", "bad_truncated.json", json.dumps(minimal)[:40])


def main():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.makedirs(os.path.join(ROOT, "config"), exist_ok=True)
    requests()
    weights()
    configs(repo)


if __name__ == "__main__":
    main()
