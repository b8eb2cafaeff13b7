#!/usr/bin/env python3
"""Writes torch_mlp.safetensors, the input of examples/load_pytorch.

The file is laid out as PyTorch would save the state_dict of

    torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).to(torch.bfloat16)

with safetensors.torch.save_file: entries `0.weight` [8, 4], `0.bias` [8], `2.weight` [3, 8] and
`2.bias` [3] in BF16 (a Linear weight is [out, in] and computes y = x W^T + b), and
`__metadata__` {"format": "pt"}. Beside them, `test.input` [5, 4] F32 holds five inputs and
`test.output` [5, 3] F32 the network's outputs for them, computed here in double precision from
the BF16 values exactly as stored, then rounded once to F32.

Python 3 standard library only (no torch, no numpy), so that anyone can regenerate the file; the
output is deterministic (a fixed seed, and no dependence on the platform's float formatting).
CI does not run this script: the generated file is committed.

    python3 examples/load_pytorch/make_torch_mlp.py   # rewrites examples/load_pytorch/torch_mlp.safetensors
"""

import json
import math
import pathlib
import random
import struct

SIZES = (4, 8, 3)  # in, hidden, out
BATCH = 5
SEED = 20261202


def f32(x):
    """x rounded to the nearest F32 (ties to even), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_bits(x):
    """The BF16 encoding of the F32 value nearest x, rounded to nearest, ties to even.

    All values here are finite and far from the overflow threshold, so NaN and infinity need no
    special case.
    """
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def linear(rng, fan_in, fan_out):
    """A Linear layer's weight [out][in] and bias [out] as BF16 codes, drawn as PyTorch's default
    initialization does (uniform in +-1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    weight = [[bf16_bits(rng.uniform(-bound, bound)) for _ in range(fan_in)] for _ in range(fan_out)]
    bias = [bf16_bits(rng.uniform(-bound, bound)) for _ in range(fan_out)]
    return weight, bias


def apply(weight, bias, x):
    """y = x W^T + b for one input row, in double, from the BF16 codes' exact values."""
    return [
        math.fsum([bf16_value(b)] + [bf16_value(w) * xi for w, xi in zip(row, x)])
        for row, b in zip(weight, bias)
    ]


def main():
    rng = random.Random(SEED)
    w0, b0 = linear(rng, SIZES[0], SIZES[1])
    w2, b2 = linear(rng, SIZES[1], SIZES[2])
    inputs = [[f32(rng.uniform(-2.0, 2.0)) for _ in range(SIZES[0])] for _ in range(BATCH)]
    outputs = []
    for x in inputs:
        hidden = [max(0.0, h) for h in apply(w0, b0, x)]
        outputs.append([f32(y) for y in apply(w2, b2, hidden)])

    def flat(rows):
        return [v for row in rows for v in row]

    # name -> (dtype, shape, little-endian C-order bytes)
    entries = {
        "0.weight": ("BF16", [SIZES[1], SIZES[0]], struct.pack("<%dH" % (SIZES[1] * SIZES[0]), *flat(w0))),
        "0.bias": ("BF16", [SIZES[1]], struct.pack("<%dH" % SIZES[1], *b0)),
        "2.weight": ("BF16", [SIZES[2], SIZES[1]], struct.pack("<%dH" % (SIZES[2] * SIZES[1]), *flat(w2))),
        "2.bias": ("BF16", [SIZES[2]], struct.pack("<%dH" % SIZES[2], *b2)),
        "test.input": ("F32", [BATCH, SIZES[0]], struct.pack("<%df" % (BATCH * SIZES[0]), *flat(inputs))),
        "test.output": ("F32", [BATCH, SIZES[2]], struct.pack("<%df" % (BATCH * SIZES[2]), *flat(outputs))),
    }

    # The safetensors layout: an 8-byte little-endian header length, the JSON header (padded with
    # spaces to a multiple of 8), then the data. As the reference implementation does, the data
    # are ordered by element size, largest first, then by name, so that every entry starts
    # aligned for its element type.
    element_size = {"F32": 4, "BF16": 2}
    header = {"__metadata__": {"format": "pt"}}
    data = b""
    for name in sorted(entries, key=lambda n: (-element_size[entries[n][0]], n)):
        dtype, shape, raw = entries[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)

    out = pathlib.Path(__file__).with_name("torch_mlp.safetensors")
    out.write_bytes(struct.pack("<Q", len(text)) + text + data)
    print("wrote %s (%d bytes)" % (out, 8 + len(text) + len(data)))


if __name__ == "__main__":
    main()
