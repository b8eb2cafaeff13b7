#!/usr/bin/python3
"""Writes torch_mlp.bin: the tensors of torch_mlp.safetensors saved by torch.save, as a
`pytorch_model.bin` is (an OrderedDict state dict in PyTorch's zip format).

Needs PyTorch (Debian: python3-torch). The safetensors file is parsed with the standard library,
so both files hold the very same bytes. CI does not run this script: the output is committed.

    /usr/bin/python3 examples/load_pytorch/make_torch_bin.py
"""

import collections
import json
import pathlib
import struct

import torch

DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32}

here = pathlib.Path(__file__).resolve().parent
data = (here / "torch_mlp.safetensors").read_bytes()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
header.pop("__metadata__", None)
state = collections.OrderedDict()
for name, spec in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
    begin, end = spec["data_offsets"]
    raw = bytearray(data[8 + n + begin:8 + n + end])
    state[name] = torch.frombuffer(raw, dtype=DTYPES[spec["dtype"]]).reshape(spec["shape"]).clone()
torch.save(state, here / "torch_mlp.bin")
