#!/usr/bin/python3
"""The test data of examples/hf_gpt2, and the Python-side check of what the example exports.

A GPT-2 written in plain torch (transformers cannot be installed here, and no hub download is
possible), following transformers' `GPT2LMHeadModel` (models/gpt2/modeling_gpt2.py) in its
parameter names, its layouts and its arithmetic:

- `transformer.wte.weight` [vocab, n_embd] and `transformer.wpe.weight` [n_positions, n_embd];
- per block `transformer.h.<i>.`: `ln_1`, `attn.c_attn` (q, k and v fused along the output axis),
  `attn.c_proj`, `ln_2`, `mlp.c_fc`, `mlp.c_proj`; every `c_*` is transformers' `Conv1D`, whose
  weight is stored [in, out] and computes `x @ weight + bias` (the transpose of nn.Linear);
- `transformer.ln_f`, and `lm_head.weight` tied to `transformer.wte.weight` (one parameter);
- attention scores `q kᵀ / sqrt(head_dim)`, causal (a masked score is the dtype's lowest value
  before the softmax), GELU "gelu_new" (the tanh approximation), layer norms with eps 1e-5,
  pre-norm residual blocks, the loss of `GPT2LMHeadModel(labels=input_ids)`: next-token cross
  entropy averaged over the positions 0..T-2.

Writing (the default), into examples/hf_gpt2/data/:

- `gpt2/model.safetensors` as `save_pretrained` writes it: `__metadata__` {"format": "pt"}, the
  entries in Hugging Face's names, without the tied duplicate `lm_head.weight`;
- `gpt2/config.json`, the `GPT2Config` fields of the model;
- `expected.safetensors`: `input_ids` I64 [T], the `logits` F32 [T, vocab] this model computes for
  them, and `loss` F32 [].

The weights are seeded normals, larger than GPT-2's initialization (std 0.02, biases 0, norms 1
and 0) so that every term of the forward pass moves the logits by more than the tolerance.

    /usr/bin/python3 examples/hf_gpt2/make_checkpoint.py           # rewrites data/
    /usr/bin/python3 examples/hf_gpt2/make_checkpoint.py --check WORK/export

`--check FOLDER` loads an exported folder (`FOLDER/model.safetensors` and `FOLDER/config.json`)
the way `from_pretrained` does (the reader transformers uses, `safetensors.torch.load_file`, when
installed, otherwise the reader below; the `format` metadata rule; the names of
GPT2LMHeadModel's state dict, with `lm_head.weight` tied to `transformer.wte.weight`), runs this
torch model on `input_ids` and compares with the logits the C++ example wrote beside the folder
(`FOLDER/../finetuned.safetensors`). It also repeats the fine-tune in torch, from data/gpt2 with
torch.optim.Adam and the steps and hyper-parameters recorded in that file, and compares the
weights and losses with the C++ ones.
"""

import argparse
import json
import math
import pathlib
import struct
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "data"
SEED = 20261205
CONFIG = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.0,
    "bos_token_id": 0,
    "embd_pdrop": 0.0,
    "eos_token_id": 0,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 32,
    "n_embd": 64,
    "n_head": 4,
    "n_inner": None,
    "n_layer": 2,
    "n_positions": 32,
    "resid_pdrop": 0.0,
    "scale_attn_weights": True,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 96,
}
SEQUENCE_LENGTH = 16
# The formats transformers' load_state_dict accepts in a safetensors file's metadata.
ACCEPTED_FORMATS = ("pt", "tf", "flax", "mlx")


class Conv1D(torch.nn.Module):
    """transformers' Conv1D: `x @ weight + bias` with `weight` [nx, nf] = [in, out]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(nx, nf))
        self.bias = torch.nn.Parameter(torch.empty(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


def gelu_new(x):
    """GELU, tanh approximation (transformers' NewGELUActivation)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config["n_head"]
        self.embed_dim = config["n_embd"]
        self.head_dim = self.embed_dim // self.n_head
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)

    def split_heads(self, x):  # [B, T, E] -> [B, H, T, hd]
        return x.view(*x.shape[:-1], self.n_head, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.embed_dim, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2)) / (v.size(-1) ** 0.5)
        t = x.size(1)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        w = torch.nn.functional.softmax(w, dim=-1)
        o = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        return self.c_proj(o.view(*o.shape[:-2], self.embed_dim))


class MLP(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        inner = config["n_inner"] or 4 * config["n_embd"]
        self.c_fc = Conv1D(inner, config["n_embd"])
        self.c_proj = Conv1D(config["n_embd"], inner)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        e, eps = config["n_embd"], config["layer_norm_epsilon"]
        self.ln_1 = torch.nn.LayerNorm(e, eps=eps)
        self.attn = Attention(config)
        self.ln_2 = torch.nn.LayerNorm(e, eps=eps)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = torch.nn.Embedding(config["vocab_size"], config["n_embd"])
        self.wpe = torch.nn.Embedding(config["n_positions"], config["n_embd"])
        self.h = torch.nn.ModuleList([Block(config) for _ in range(config["n_layer"])])
        self.ln_f = torch.nn.LayerNorm(config["n_embd"], eps=config["layer_norm_epsilon"])

    def forward(self, input_ids):
        positions = torch.arange(input_ids.size(-1)).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transformer = GPT2Model(config)
        self.lm_head = torch.nn.Linear(config["n_embd"], config["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as tie_word_embeddings says

    def forward(self, input_ids):
        return self.lm_head(self.transformer(input_ids))


def next_token_loss(logits, input_ids):
    """GPT2LMHeadModel's loss with labels=input_ids: predict token t+1 from positions 0..t."""
    return torch.nn.functional.cross_entropy(logits[:, :-1, :].reshape(-1, logits.size(-1)),
                                             input_ids[:, 1:].reshape(-1))


# --- safetensors, by the format's rules (used when the safetensors package is not installed) ---

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.int32: "I32"}
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}


def write_safetensors(path, tensors, metadata):
    """An 8-byte little-endian header length, the JSON header (entries in name order, padded with
    spaces to a multiple of 8), then the tensors' bytes in C order, little-endian."""
    header, data = {"__metadata__": metadata}, bytearray()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(data))


def read_safetensors(path):
    """The tensors and metadata of a safetensors file (F32 and I64 entries)."""
    try:
        from safetensors import safe_open  # what transformers uses
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, f.metadata(), "safetensors " + \
                __import__("safetensors").__version__
    except ImportError:
        pass
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", None)
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = TORCH_DTYPES[info["dtype"]]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"])
    return tensors, metadata, "the reader of make_checkpoint.py (safetensors is not installed)"


# --- writing the data ---

def seeded_model():
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(CONFIG)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model


def hf_state_dict(model):
    """The state dict save_pretrained writes to safetensors: the tied duplicate left out."""
    return {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}


def write_data():
    model = seeded_model()
    generator = torch.Generator().manual_seed(SEED + 1)
    input_ids = torch.randint(0, CONFIG["vocab_size"], (1, SEQUENCE_LENGTH), generator=generator)
    with torch.no_grad():
        logits = model(input_ids)
        loss = next_token_loss(logits, input_ids)
    folder = DATA / "gpt2"
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "model.safetensors", hf_state_dict(model), {"format": "pt"})
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=2, sort_keys=True) + "\n")
    write_safetensors(DATA / "expected.safetensors",
                      {"input_ids": input_ids[0], "logits": logits[0], "loss": loss},
                      {"seed": str(SEED), "torch": torch.__version__})
    print(f"wrote {folder}/model.safetensors, config.json and {DATA}/expected.safetensors "
          f"(torch {torch.__version__}, seed {SEED}); loss {loss.item():.6f}")


# --- checking an export ---

def load_like_from_pretrained(folder):
    """GPT2LMHeadModel from `folder` by the rules from_pretrained applies to a safetensors file."""
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") != "gpt2":
        raise SystemExit(f"{folder}/config.json: model_type is {config.get('model_type')!r}, not 'gpt2'")
    full = dict(CONFIG)
    full.update(config)
    tensors, metadata, reader = read_safetensors(folder / "model.safetensors")
    # modeling_utils.load_state_dict: a file with metadata must say one of these formats.
    if metadata is not None and metadata.get("format") not in ACCEPTED_FORMATS:
        raise SystemExit(f"{folder}/model.safetensors does not contain the valid metadata: "
                         f"format is {metadata.get('format')!r}")
    model = GPT2LMHeadModel(full)
    expected = set(model.state_dict())
    missing = sorted(expected - set(tensors) - {"lm_head.weight"})  # the tied head is not stored
    unexpected = sorted(set(tensors) - expected)
    if missing or unexpected:
        raise SystemExit(f"{folder}: missing entries {missing}, unexpected entries {unexpected}")
    for name, t in tensors.items():
        if t.dtype != torch.float32:
            raise SystemExit(f"{folder}: {name} is {t.dtype}, not float32")
    model.load_state_dict(tensors, strict=False)  # strict=False: lm_head.weight comes from the tie
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        raise SystemExit("the head is not tied to wte after loading")
    return model, metadata, reader


def check(folder):
    folder = pathlib.Path(folder).resolve()
    model, metadata, reader = load_like_from_pretrained(folder)
    print(f"loaded {folder} with {reader}: metadata {metadata}, "
          f"{len(model.state_dict()) - 1} entries + lm_head.weight tied to transformer.wte.weight")
    results, _, _ = read_safetensors(folder.parent / "finetuned.safetensors")
    expected, _, _ = read_safetensors(DATA / "expected.safetensors")
    input_ids = expected["input_ids"].unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids)[0]
    diff = (logits - results["logits"]).abs().max().item()
    print(f"torch logits of the export vs the C++ fine-tuned logits: max |diff| = {diff:.3g}")
    ok = diff < 1e-4

    # The same fine-tune in torch: from data/gpt2, torch.optim.Adam, the C++ run's settings.
    steps = int(results["steps"].item())
    lr = results["lr"].item()
    base, _, _ = load_like_from_pretrained(DATA / "gpt2")
    optimizer = torch.optim.Adam(base.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = next_token_loss(base(input_ids), input_ids)
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
    cpp_losses = results["losses"].tolist()
    print("losses, torch: " + " ".join(f"{x:.6f}" for x in losses))
    print("losses, C++:   " + " ".join(f"{x:.6f}" for x in cpp_losses))
    loss_diff = max(abs(a - b) for a, b in zip(losses, cpp_losses))
    # The key part of each c_attn.bias (its middle third) has a true gradient of exactly 0: adding
    # a constant to every key shifts a row of scores by one amount, which the softmax ignores. Both
    # runs see rounding noise there, and Adam, dividing by the noise's own RMS, turns it into steps
    # of about lr either way: those entries are compared on their own, against 2 steps lr (each run moves them by at most
    # about steps lr).
    exported, e = model.state_dict(), CONFIG["n_embd"]
    weight_diff, key_bias_diff = 0.0, 0.0
    for name, tuned in base.state_dict().items():
        d = (exported[name] - tuned).abs()
        if name.endswith("attn.c_attn.bias"):
            key_bias_diff = max(key_bias_diff, d[e:2 * e].max().item())
            d = torch.cat([d[:e], d[2 * e:]])
        weight_diff = max(weight_diff, d.max().item())
    print(f"torch's fine-tune vs the C++ one ({steps} steps, lr {lr:g}): max |loss diff| = {loss_diff:.3g}, "
          f"max |weight diff| = {weight_diff:.3g}; key biases (true gradient 0): {key_bias_diff:.3g}")
    ok = ok and loss_diff < 1e-4 and weight_diff < 1e-4 and key_bias_diff <= 2 * steps * lr
    print("check passed" if ok else "check FAILED")
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", metavar="FOLDER", help="check an exported folder instead of writing data/")
    args = parser.parse_args()
    if args.check:
        return check(args.check)
    write_data()
    return 0


if __name__ == "__main__":
    sys.exit(main())
