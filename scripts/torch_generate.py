#!/usr/bin/env python3
"""Greedy decoding in PyTorch, the reference of troupe generate --temperature 0.

Run with Debian's python3-torch (/usr/bin/python3). The GPT is torch_interop.py's
(the module names of ../shared/anchors/torch_gpt_tiny.py).

  init   --out FILE [--std S] [--untied] SHAPE   PyTorch-initialised weights, N(0, S^2)
                                                 added to every tensor (wide logits:
                                                 greedy choices far from ties)
  greedy --init FILE --prompt-ids "1,2,3;4,5" --max-new-tokens N [--untied] SHAPE
                                                 full-recompute greedy decoding (the whole
                                                 sequence through the model at every step,
                                                 no cache) of each prompt (';' between
                                                 them): a line {"ids": [new tokens],
                                                 "margin": smallest top-1 minus top-2 logit}

SHAPE: --vocab V --d-model C --n-layers L --n-heads H --context T.
"""
import argparse, json

import torch
import torch.nn as nn

from torch_interop import GPT, load_strict, read_safetensors, write_safetensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["init", "greedy"])
    ap.add_argument("--vocab", type=int, default=65)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-layers", type=int, default=4)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.3)
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--init")
    ap.add_argument("--prompt-ids")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    model = GPT(a.vocab, a.d_model, a.n_layers, a.n_heads, a.context)
    if a.untied:
        model.head.weight = nn.Parameter(model.tok.weight.detach().clone())
    if a.cmd == "init":
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * a.std)
        sd = model.state_dict()
        if not a.untied:
            sd = {k: v for k, v in sd.items() if k != "head.weight"}
        write_safetensors(a.out, sd)
        print(json.dumps({"wrote": a.out, "tensors": len(sd)}))
        return
    if a.untied:
        sd = read_safetensors(a.init)
        model.load_state_dict(sd, strict=True)
    else:
        load_strict(model, a.init)
    model.eval()
    for prompt in a.prompt_ids.split(";"):
        seq = [int(s) for s in prompt.split(",")]
        new, margin = [], float("inf")
        with torch.no_grad():
            for _ in range(a.max_new_tokens):
                logits = model(torch.tensor([seq]))[0, -1]
                top = torch.topk(logits, 2).values
                margin = min(margin, float(top[0] - top[1]))
                nxt = int(torch.argmax(logits))
                seq.append(nxt)
                new.append(nxt)
        print(json.dumps({"ids": new, "margin": margin}))


if __name__ == "__main__":
    main()
