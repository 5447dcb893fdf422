#!/usr/bin/env python3
"""Writes the hand-made seeds of the file-format and data-plane message fuzz
targets into fuzz/seeds/.

Small inputs that reach deep into each parser (every field present, one of
each shape), so that a short run of scripts/fuzz.sh mutates from there rather
than from nothing. Usage: fuzz/seeds/make_seeds.py CHECKPOINT, where
CHECKPOINT is an MLP checkpoint.safetensors written by `chorus node` (for its
metadata: the checkpoint seeds keep it and one small tensor).
"""
import gzip
import json
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    os.makedirs(os.path.join(here, target), exist_ok=True)
    with open(os.path.join(here, target, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata):
    header, blob = {}, b""
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob


# IDX (big-endian magic: 0x0801 bytes with one dimension, 0x0803 with three).
labels = struct.pack(">II", 0x801, 6) + bytes([0, 1, 2, 9, 4, 5])
images = struct.pack(">IIII", 0x803, 2, 3, 3) + bytes(range(18))
write("idx", "labels-idx1-ubyte", labels)
write("idx", "images-idx3-ubyte", images)
write("idx", "images-idx3-ubyte.gz", gzip.compress(images, mtime=0))

f32 = lambda *xs: struct.pack("<%df" % len(xs), *xs)
f16 = lambda *xs: struct.pack("<%de" % len(xs), *xs)
write("safetensors", "two-tensors.safetensors",
      safetensors({"fc.weight": ("F32", [2, 2], f32(1, -2, 0.5, 3)), "fc.bias": ("F16", [2], f16(0.25, -1))},
                  {"format": "pt"}))
write("safetensors", "empty-shape.safetensors", safetensors({"scalar": ("F32", [], f32(7))}, None))

# Node config: every key with its default, as docs/cli-and-configs.md's TOML
# reference lists them (ConfigDocsTest holds it to the program).
with open(os.path.join(here, "..", "..", "docs", "cli-and-configs.md")) as f:
    docs = f.read()
block = docs[docs.index("```toml\n", docs.index("## TOML reference")) + 8:]
write("config", "every-key.toml", block[:block.index("```")].encode())

# Comparison file: every [compare] key and a method of its own.
write("compare", "every-key.toml", b"""[compare]
name = "every-key"
nodes = 4
target_accuracy = 0.85
methods = ["ring-allreduce", "mine", "diloco", "noloco"]
batch_sizes = [32, 64, 64, 128]
speeds = [1, 1, 0.5, 2]
straggler = { node = 1, slowdown = 2.0 }
late_joiner = { node = 3, after_s = 2.5 }
link = { bandwidth = "1gbit", latency = "1ms" }
single_node_baseline = false

[[compare.method]]
name = "mine"
label = "pairwise, every 4th step"
family = "gossip"
set = ["exchange.kind=gossip", "exchange.protocol=pairwise-async", "exchange.period=4"]

[train]
model = "mlp"
epochs = 1
batch_size = 64
""")

# Data-plane messages (little-endian, as the readers of each *_wire.h take them).
def pairwise(kind, flags, seq, step, payload=b""):
    return struct.pack("<BB6xQq", kind, flags, seq, step) + payload

write("pairwise_wire", "request", pairwise(1, 0, 1, 3))
write("pairwise_wire", "accept-with-value", pairwise(2, 0, 1, 4, f32(0.5, -1)))
write("pairwise_wire", "notice-finished", pairwise(5, 1, 0, 9))
write("pairwise_wire", "clear", pairwise(6, 0, 7, 2))
write("push_sum_wire", "half-share", struct.pack("<dd", 0.5, 1.0) + f32(1, 2, 3))
write("push_sum_wire", "whole-share-no-values", struct.pack("<dd", 1.0, 0.25))
# live_state_wire: byte 0 even, a header; odd, a fingerprint of floats.
write("live_state_wire", "header", b"\x00" + struct.pack("<IIQqII", 0x534C4843, 1, 3 << 20, 42, 0xDEADBEEF, 1 << 20))
write("live_state_wire", "fingerprint", b"\x01" + f32(1, 0xDEAD, 0xBEEF, 0, 48, 5))
write("live_state_wire", "fingerprint-not-held", b"\x01" + f32(0, 0, 0, 0, 0, 0))
# outer_sync_wire: byte 0 the parameter count.
write("outer_sync_wire", "params-and-gradient", b"\x03" + f32(1, 2, 3) + bytes([1, 2, 3, 4]))
write("outer_sync_wire", "params-only", b"\x02" + f32(-1, 0.5))
# trainer_state_wire: byte 0 zero, a loss scaler state; else that many statistics.
write("trainer_state_wire", "loss-scaler", b"\x00" + struct.pack("<dqq", 65536.0, 12, 1))
write("trainer_state_wire", "batch-norm", b"\x03" + f32(0.1, 0.2, 1.5) + struct.pack("<q", 100))
write("segment_name", "name", b"/chorus-seg-1234-9876543210".ljust(64, b"\x00"))
write("segment_name", "none", bytes(64))

if len(sys.argv) > 1:
    with open(sys.argv[1], "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__")
    name = min((k for k in header), key=lambda k: header[k]["data_offsets"][1] - header[k]["data_offsets"][0])
    start, end = header[name]["data_offsets"]
    one = {name: (header[name]["dtype"], header[name]["shape"], raw[8 + n + start:8 + n + end])}
    write("checkpoint", "mlp-metadata-one-tensor.safetensors", safetensors(one, metadata))
    newer = dict(metadata, chorus_checkpoint="2")
    write("checkpoint", "mlp-newer-version.safetensors", safetensors(one, newer))
