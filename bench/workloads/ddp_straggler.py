"""2-GPU DDP workload with a straggler rank, writing ground-truth markers per rank (issue #22).

NOT RUN YET: written when no two-GPU device kind was lent; it has never been executed, so expect
to fix it on its first run. It exists so that a session with `nvidia-h200-x2` can record the
labelled multi-GPU runs at once.

usage, on a 2-GPU machine, while `memtop record -o ddp.memtop --markers OUT.rank0.jsonl` runs:
  torchrun --standalone --nproc_per_node 2 bench/workloads/ddp_straggler.py --markers OUT.jsonl \
      [--seed S] [--phase-s 8] [--scale X] [--only NAME ...]

Rank r writes OUT.rank{r}.jsonl: the same phases in the same order, each labelled as rank r's GPU
should be (the waiting rank `comm`, the straggler its own work), so GPU r is scored against rank r's
file: memtop.score.score(classifier.labels[r], markers of rank r).

Phases (rank 1 is the straggler; each step ends in an all-reduce of a gradient-sized buffer):
  straggler_host     rank 1 runs Python host work before each step   rank 1 cpu      rank 0 comm
  straggler_loader   rank 1's DataLoader is too slow for the step    rank 1 input    rank 0 comm
  straggler_compute  rank 1 runs extra matmuls each step             rank 1 compute  rank 0 comm
  comm_bandwidth     both all-reduce 1 GiB back to back              comm (bandwidth) on both
  neg_ddp_overlap    healthy DDP, backward overlapped with its       compute on both
                     bucketed all-reduce (the negative control)
NCCL's NVLink multicast (NVLS) and torch's symmetric-memory multicast are off, as the device docs
require; they are set here, before NCCL starts, whatever the caller's environment says.
"""

from __future__ import annotations

import os

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"

import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402
from wl import args, run, spin  # noqa: E402

A = args(__doc__)
S = A.scale
RANK, LOCAL = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
STRAGGLER = 1
A.markers = f"{A.markers.removesuffix('.jsonl')}.rank{RANK}.jsonl"
torch.cuda.set_device(LOCAL)
dev = torch.device("cuda", LOCAL)
dist.init_process_group("nccl", device_id=dev)
torch.manual_seed(A.seed)

GRAD = torch.randn(int(64 * S) << 20, device=dev, dtype=torch.bfloat16)  # 128 MiB of "gradients"
M = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64


def label(straggler: str) -> str:
    """What this rank's GPU does in a straggler phase: its own work, or waiting for the straggler."""
    return straggler if RANK == STRAGGLER else "comm"


def steps(end: float, body: Callable[[], None], grad: bool = True) -> dict:
    """body() then (with `grad`) the gradient all-reduce, until every rank is past `end`: a MIN
    all-reduce of a keep-going flag keeps the ranks in lockstep (the waiting rank's main thread waits
    at its .item())."""
    dist.barrier()
    t0, n = time.monotonic(), 0
    go = torch.ones(1, device=dev)
    while True:
        body()
        if grad:
            dist.all_reduce(GRAD)
        go.fill_(1.0 if time.monotonic() < end else 0.0)
        dist.all_reduce(go, op=dist.ReduceOp.MIN)
        n += 1
        if go.item() == 0:
            break
    dt = time.monotonic() - t0
    return {"_t0": t0, "steps": n, "step_ms": round(1e3 * dt / max(n, 1), 1), "rank": RANK, "gpu": LOCAL}


def work(k: int = 4) -> None:
    x = M
    for _ in range(k):
        x = x @ M


def straggler_host(end: float) -> dict:
    ms = 150 * S

    def body() -> None:
        if RANK == STRAGGLER:
            spin(ms)  # logging, checkpoint bookkeeping, rank-only evaluation: Python on the main thread
        work()

    return {**steps(end, body), "host_ms_per_step": ms if RANK == STRAGGLER else 0}


class SlowItems(Dataset):
    def __init__(self, item_ms: float):
        self.item_ms = item_ms

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> torch.Tensor:
        spin(self.item_ms)
        return torch.ones(256)


def straggler_loader(end: float) -> dict:
    item_ms = 40 * S if RANK == STRAGGLER else 0.1
    dl = DataLoader(SlowItems(item_ms), batch_size=8, num_workers=1, pin_memory=True)
    it = iter(dl)

    def body() -> None:
        next(it).to(dev, non_blocking=True)
        work()

    return {**steps(end, body), "item_ms": item_ms, "workers": 1, "batch": 8}


def straggler_compute(end: float) -> dict:
    k = 4 + (int(60 * S) if RANK == STRAGGLER else 0)
    return {**steps(end, lambda: work(k)), "matmuls_per_step": k}


def comm_bandwidth(end: float) -> dict:
    big = torch.empty(512 << 20, device=dev, dtype=torch.bfloat16)  # 1 GiB
    t = time.monotonic()
    facts = steps(end, lambda: dist.all_reduce(big), grad=False)
    dt = time.monotonic() - t
    # ring all-reduce bus bandwidth: 2 (n-1)/n of the buffer crosses each link per call
    n = dist.get_world_size()
    facts["bus_gbps"] = round(facts["steps"] * big.numel() * 2 * 2 * (n - 1) / n / dt / 1e9, 1)
    return facts


def neg_ddp_overlap(end: float) -> dict:
    layers = [nn.Linear(4096, 4096, bias=False) for _ in range(12)]
    model = DDP(nn.Sequential(*layers).to(dev, torch.bfloat16), device_ids=[LOCAL], bucket_cap_mb=25)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

    def body() -> None:  # the DDP all-reduce runs in buckets under the backward pass
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return steps(end, body, grad=False)  # DDP's own all-reduce is the only gradient traffic


PHASES: dict[str, tuple[str, Callable[[float], dict]]] = {
    "straggler_host": (label("cpu"), straggler_host),
    "straggler_loader": (label("input"), straggler_loader),
    "straggler_compute": (label("compute"), straggler_compute),
    "comm_bandwidth": ("comm", comm_bandwidth),
    "neg_ddp_overlap": ("compute", neg_ddp_overlap),
}

if __name__ == "__main__":
    try:
        run(A, PHASES)  # the same seed shuffles the same order on every rank
    finally:
        dist.destroy_process_group()
