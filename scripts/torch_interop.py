#!/usr/bin/env python3
"""Weights and losses between troupe and PyTorch, through safetensors.

Run with Debian's python3-torch (/usr/bin/python3). No safetensors package is
needed: the format (8-byte little-endian header length, JSON header, raw
little-endian data) is read and written here directly.

  init  --model mlp|gpt --out FILE      PyTorch-initialised weights for troupe --init
  load  --model mlp|gpt FILE            load troupe --save weights strictly by name and shape
  losses --model mlp|gpt --init FILE --data FILE --batch B --steps N --lr LR
                                        train in PyTorch on the data rows in order
                                        (step t uses rows t*B ... t*B+B-1 mod N), one JSON
                                        line per step: {"step": t, "loss": ...}

Model shapes: --layers d0,d1,...,dn for the MLP (fc1..fcn, ReLU between);
--vocab V --d-model C --n-layers L --n-heads H --context T for the GPT, whose
module names are those of ../shared/anchors/torch_gpt_tiny.py (tok, pos,
blocks.i.{ln1,qkv,proj,ln2,fc,out}, lnf, head tied to tok).
"""
import argparse, json, math, struct, sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DT = {"F32": (np.float32, torch.float32), "I64": (np.int64, torch.int64), "I32": (np.int32, torch.int32)}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in DT:
            sys.exit(f"{path}: tensor {name}: dtype {info['dtype']} not handled here")
        lo, hi = info["data_offsets"]
        arr = np.frombuffer(raw[base + lo:base + hi], dtype=DT[info["dtype"]][0]).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def write_safetensors(path, tensors):
    names = sorted(tensors)
    header, blobs, off = {}, [], 0
    for name in names:
        t = tensors[name].detach().contiguous()
        code = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32"}[t.dtype]
        b = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


class MLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.n = len(sizes) - 1
        for i in range(1, len(sizes)):
            setattr(self, f"fc{i}", nn.Linear(sizes[i - 1], sizes[i]))

    def forward(self, x):
        for i in range(1, self.n + 1):
            x = getattr(self, f"fc{i}")(x)
            if i < self.n:
                x = F.relu(x)
        return x


class Block(nn.Module):
    def __init__(self, d, h, t):
        super().__init__()
        self.d, self.h = d, h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(t, t, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.h))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, t):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList(Block(d, heads, t) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight
        for n, m in self.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                std = 0.02 / math.sqrt(2 * layers) if n.endswith(("proj", "out")) else 0.02
                nn.init.normal_(m.weight, mean=0.0, std=std)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.lnf(x))


def build(a):
    torch.manual_seed(a.seed)
    if a.model == "mlp":
        return MLP([int(s) for s in a.layers.split(",")])
    return GPT(a.vocab, a.d_model, a.n_layers, a.n_heads, a.context)


def state_for_troupe(model):
    # The tied head is the token embedding: troupe stores it once, as tok.weight.
    return {k: v for k, v in model.state_dict().items() if k != "head.weight"}


def load_strict(model, path):
    sd = read_safetensors(path)
    own = model.state_dict()
    for name, t in sd.items():
        if name not in own:
            sys.exit(f"{path}: {name} is not a parameter of the PyTorch model")
        if tuple(t.shape) != tuple(own[name].shape):
            sys.exit(f"{path}: {name} has shape {tuple(t.shape)}, PyTorch wants {tuple(own[name].shape)}")
    missing, unexpected = model.load_state_dict(sd, strict=False)
    tied_only = [m for m in missing if not (m == "head.weight" and isinstance(model, GPT))]
    if tied_only or unexpected:
        sys.exit(f"{path}: missing {tied_only}, unexpected {unexpected}")
    if isinstance(model, GPT):
        model.head.weight = model.tok.weight
    return len(sd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["init", "load", "losses"])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--model", choices=["mlp", "gpt"], required=True)
    ap.add_argument("--layers", default="784,256,10")
    ap.add_argument("--vocab", type=int, default=65)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-layers", type=int, default=4)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--init")
    ap.add_argument("--data")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    a = ap.parse_intermixed_args()
    torch.set_num_threads(1)
    model = build(a)
    if a.cmd == "init":
        write_safetensors(a.out, state_for_troupe(model))
        print(json.dumps({"wrote": a.out, "tensors": len(state_for_troupe(model))}))
        return
    if a.cmd == "load":
        n = load_strict(model, a.file)
        print(json.dumps({"loaded": a.file, "tensors": n, "params": sum(p.numel() for p in model.parameters())}))
        return
    load_strict(model, a.init)
    d = read_safetensors(a.data)
    if a.model == "mlp":
        xs, ys = d["x"].float().reshape(d["x"].shape[0], -1), d["y"].long()
    else:
        toks = d["tokens"].long()
        n = (len(toks) - 1) // a.context
        xs = torch.stack([toks[i * a.context:i * a.context + a.context] for i in range(n)])
        ys = torch.stack([toks[i * a.context + 1:i * a.context + a.context + 1] for i in range(n)])
    n = xs.shape[0]
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    for step in range(a.steps):
        rows = [(step * a.batch + i) % n for i in range(a.batch)]
        x, y = xs[rows], ys[rows]
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        print(json.dumps({"step": step + 1, "loss": float(loss)}), flush=True)


if __name__ == "__main__":
    main()
