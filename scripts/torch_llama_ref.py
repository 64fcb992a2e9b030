#!/usr/bin/env python3
"""A float64 PyTorch reference for troupe's Llama: Hugging Face LlamaForCausalLM's semantics
written out (RMSNorm, rotary embeddings with rotate_half, grouped-query attention with
repeat_kv, SwiGLU MLP, no biases, untied or tied LM head, mean cross-entropy), with Hugging
Face's parameter names. Run with Debian's python3-torch (/usr/bin/python3); no transformers or
safetensors package is needed (the format is read and written here).

Reads one JSON object on stdin and prints one JSON object on stdout:
  shape:  vocab, context, d, layers, heads, kv_heads, ffn, theta, eps, tie
  init:   seed; init_out (write the initial weights there, float32, Hugging Face names: N(0, 0.02)
          projections and embedding as _init_weights draws them, norms ones, or uniform in
          [0.7, 1.3] with perturb_norms) or init_in (read them)
  train:  tokens (the stream troupe's token dataset serves as windows of context+1 at stride
          context), batch, steps, lr, weight_decay, beta1, beta2, adam_eps: AdamW in float64,
          step t on windows (t*batch + i) mod n, the data in order
  saved:  optional: a troupe --save file, loaded strictly by name and shape
Output: {"losses": [per step, before its update], "final": {name: flat weights after the last
update}, "loaded": tensors read from saved}.
"""
import json, math, struct, sys

import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            sys.exit(f"{path}: {k} is {v['dtype']}, not F32")
        lo, hi = v["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(raw[8 + n + lo:8 + n + hi], dtype="<f4").reshape(v["shape"]).copy())
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = tensors[name].detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


a = json.load(sys.stdin)
torch.set_num_threads(1)
V, C, D, L, H, KV, FF = a["vocab"], a["context"], a["d"], a["layers"], a["heads"], a["kv_heads"], a["ffn"]
HD, EPS, THETA, TIE = D // H, a["eps"], a["theta"], a["tie"]


def shapes():
    s = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    for i in range(L):
        p = f"model.layers.{i}."
        s.update({p + "self_attn.q_proj.weight": (H * HD, D), p + "self_attn.k_proj.weight": (KV * HD, D),
                  p + "self_attn.v_proj.weight": (KV * HD, D), p + "self_attn.o_proj.weight": (D, H * HD),
                  p + "mlp.gate_proj.weight": (FF, D), p + "mlp.up_proj.weight": (FF, D),
                  p + "mlp.down_proj.weight": (D, FF), p + "input_layernorm.weight": (D,),
                  p + "post_attention_layernorm.weight": (D,)})
    if not TIE:
        s["lm_head.weight"] = (V, D)
    return s


if "init_out" in a:
    g = torch.Generator().manual_seed(a["seed"])
    W0 = {}
    for name, shape in sorted(shapes().items()):
        if name.endswith("norm.weight"):
            if a.get("perturb_norms"):
                W0[name] = 0.7 + 0.6 * torch.rand(shape, generator=g, dtype=torch.float64)
            else:
                W0[name] = torch.ones(shape, dtype=torch.float64)
        else:
            W0[name] = 0.02 * torch.randn(shape, generator=g, dtype=torch.float64)
    write_safetensors(a["init_out"], W0)
    # Train from exactly the float32 values written.
    W0 = {k: v.to(torch.float32) for k, v in W0.items()}
else:
    W0 = read_safetensors(a["init_in"])
    if set(W0) != set(shapes()):
        sys.exit(f"init has {sorted(W0)}, want {sorted(shapes())}")
W = {k: v.to(torch.float64).clone().requires_grad_(True) for k, v in W0.items()}

inv_freq = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
freqs = torch.outer(torch.arange(C, dtype=torch.float64), inv_freq)
emb = torch.cat((freqs, freqs), dim=-1)
COS, SIN = emb.cos(), emb.sin()
MASK = torch.full((C, C), float("-inf"), dtype=torch.float64).triu(1)


def rmsnorm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rotate_half(x):
    return torch.cat((-x[..., HD // 2:], x[..., :HD // 2]), dim=-1)


def repeat_kv(x, rep):
    b, kv, t, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, rep, t, d).reshape(b, kv * rep, t, d)


def forward(tokens):
    B = tokens.shape[0]
    h = W["model.embed_tokens.weight"][tokens]
    for i in range(L):
        p = f"model.layers.{i}."
        x = rmsnorm(h, W[p + "input_layernorm.weight"])
        q = (x @ W[p + "self_attn.q_proj.weight"].T).view(B, C, H, HD).transpose(1, 2)
        k = (x @ W[p + "self_attn.k_proj.weight"].T).view(B, C, KV, HD).transpose(1, 2)
        v = (x @ W[p + "self_attn.v_proj.weight"].T).view(B, C, KV, HD).transpose(1, 2)
        q, k = q * COS + rotate_half(q) * SIN, k * COS + rotate_half(k) * SIN
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(HD) + MASK, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, C, H * HD)
        h = h + o @ W[p + "self_attn.o_proj.weight"].T
        x = rmsnorm(h, W[p + "post_attention_layernorm.weight"])
        h = h + (F.silu(x @ W[p + "mlp.gate_proj.weight"].T) * (x @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    head = W["model.embed_tokens.weight"] if TIE else W["lm_head.weight"]
    return rmsnorm(h, W["model.norm.weight"]) @ head.T


out = {"losses": []}
if a.get("steps", 0) > 0:
    toks = torch.tensor(a["tokens"], dtype=torch.int64)
    n = (len(toks) - 1) // C
    xs = torch.stack([toks[i * C:i * C + C] for i in range(n)])
    ys = torch.stack([toks[i * C + 1:i * C + C + 1] for i in range(n)])
    opt = torch.optim.AdamW(list(W.values()), lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["adam_eps"],
                            weight_decay=a["weight_decay"])
    for step in range(a["steps"]):
        rows = [(step * a["batch"] + i) % n for i in range(a["batch"])]
        opt.zero_grad(set_to_none=True)
        logits = forward(xs[rows])
        loss = F.cross_entropy(logits.reshape(-1, V), ys[rows].reshape(-1))
        loss.backward()
        opt.step()
        out["losses"].append(loss.item())
out["final"] = {k: w.detach().flatten().tolist() for k, w in W.items()}
if "saved" in a:
    sd = read_safetensors(a["saved"])
    want = shapes()
    if set(sd) != set(want):
        sys.exit(f"{a['saved']}: tensors {sorted(sd)}, LlamaForCausalLM's state dict has {sorted(want)}")
    for k, t in sd.items():
        if tuple(t.shape) != tuple(want[k]):
            sys.exit(f"{a['saved']}: {k} has shape {tuple(t.shape)}, LlamaForCausalLM wants {want[k]}")
    out["loaded"] = len(sd)
json.dump(out, sys.stdout)
