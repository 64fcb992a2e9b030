"""PyTorch's ZeRO-1 beside troupe's (docs/BENCHMARKS.md §10): the anchors' torch_ddp_gpt.py (DDP +
gloo, the tiny GPT, AdamW) with its AdamW wrapped in torch.distributed.optim.ZeroRedundancyOptimizer,
PyTorch's optimizer-state sharding. Everything else (model, data, timing, output) is that script's.
Usage: . $ANCHORS/blas_env.sh; ANCHORS=../shared/anchors $PY torch_zero_gpt.py --procs 2 --threads 1
"""
import argparse, os, sys

sys.path.insert(0, os.environ.get("ANCHORS", "../shared/anchors"))
import torch
import torch_ddp_gpt
from common import set_threads

_adamw = torch.optim.AdamW


def _sharded(params, **kw):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    return ZeroRedundancyOptimizer(params, optimizer_class=_adamw, **kw)


# The worker builds its optimizer as torch.optim.AdamW(...): every spawned process runs this module's
# top level too, so the wrap holds there.
torch.optim.AdamW = _sharded

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    assert a.procs > 1, "ZeroRedundancyOptimizer shards over a process group: --procs 2 or more"
    set_threads(a.threads)
    import torch.multiprocessing as mp
    mp.spawn(torch_ddp_gpt.worker, args=(a, torch_ddp_gpt.free_port()), nprocs=a.procs, join=True)
