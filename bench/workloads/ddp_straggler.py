"""2-GPU DDP/FSDP workload with a straggler rank, writing ground-truth markers per rank (issue #22).

usage, on a 2-GPU machine, while `memtop record -o RUN.memtop` runs (bench/workloads/ddp_corpus.sh):
  torchrun --standalone --nproc_per_node 2 bench/workloads/ddp_straggler.py --markers OUT.jsonl \
      [--seed S] [--phase-s 8] [--scale X] [--only NAME ...]

Rank r writes OUT.rank{r}.jsonl: the same phases in the same order (shuffled by seed), each labelled
as rank r's GPU should be: the delayed rank its own work (cpu, input, compute), the waiting rank
`comm`. Each marker's facts name its GPU (`uuid`, matched to the recording's GPUs) and whether its
rank was the straggler, so GPU g is scored against its own markers (bench/comm_accuracy.py).
Sizes, delays and which rank is late are drawn per phase from the seed, so runs differ in more
than order.

Phases (each step ends in an all-reduce of a gradient-sized buffer, so the ranks meet every step):
  straggler_host     the late rank runs Python on its main thread     late: cpu      peer: comm
  straggler_loader   the late rank's DataLoader is too slow           late: input    peer: comm
  straggler_compute  the late rank runs extra matmuls each step       late: compute  peer: comm
  fsdp_straggler     FSDP2 (fully_shard) training, one rank with      late: compute  peer: comm
                     extra matmuls before its forward pass
  comm_bandwidth     both all-reduce a large buffer back to back      comm (bandwidth) on both
  neg_ddp_overlap    healthy DDP, backward overlapped with its        compute on both
                     bucketed all-reduce (the negative control)
NCCL's NVLink multicast (NVLS), torch's symmetric-memory multicast and NVSHMEM's are off, as the
device docs require; they are set here, before NCCL starts, whatever the caller's environment says.
"""

from __future__ import annotations

import os

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from datetime import timedelta  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402
from wl import spin  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--markers", required=True)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--phase-s", type=float, default=8.0)
ap.add_argument("--idle-s", type=float, default=3.0)
ap.add_argument("--scale", type=float, default=1.0, help="delays and sizes vary with it")
ap.add_argument("--only", nargs="*")
A = ap.parse_args()
S = A.scale
RANK, LOCAL, WORLD = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
MARKERS = f"{A.markers.removesuffix('.jsonl')}.rank{RANK}.jsonl"
torch.cuda.set_device(LOCAL)
dev = torch.device("cuda", LOCAL)
UUID = str(getattr(torch.cuda.get_device_properties(dev), "uuid", ""))  # NVML's without "GPU-"
# a phase that fails on one rank leaves the other in a collective: give up on it after 60 s
dist.init_process_group("nccl", device_id=dev, timeout=timedelta(seconds=60))
torch.manual_seed(A.seed)
RNG = random.Random(A.seed)  # the same draws on every rank


def steps(dur: float, body: Callable[[], None], grad: torch.Tensor | None) -> dict:
    """body() then (with `grad`) its all-reduce, until every rank has run `dur` seconds (the phase's
    set-up, before the barrier, is not in it): a MIN all-reduce of a keep-going flag keeps the ranks
    in lockstep (the waiting rank's main thread waits at .item())."""
    dist.barrier()
    t0, n = time.monotonic(), 0
    end = t0 + dur
    go = torch.ones(1, device=dev)
    while True:
        body()
        if grad is not None:
            dist.all_reduce(grad)
        go.fill_(1.0 if time.monotonic() < end else 0.0)
        dist.all_reduce(go, op=dist.ReduceOp.MIN)
        n += 1
        if go.item() == 0:
            break
    dt = time.monotonic() - t0
    return {"_t0": t0, "steps": n, "step_ms": round(1e3 * dt / max(n, 1), 1)}


def mat(dim: int) -> torch.Tensor:
    return torch.randn(dim, dim, device=dev, dtype=torch.bfloat16) / dim**0.5


def work(m: torch.Tensor, k: int) -> None:
    x = m
    for _ in range(k):
        x = x @ m


def grad_buffer() -> tuple[torch.Tensor, int]:
    mib = RNG.choice([32, 64, 128, 256])
    return torch.randn(mib << 19, device=dev, dtype=torch.bfloat16), mib


def straggler_host(dur: float, late: int) -> dict:
    ms, dim, k = RNG.uniform(80, 250) * S, RNG.choice([2048, 4096]), RNG.randint(2, 8)
    m, (g, mib) = mat(dim), grad_buffer()

    def body() -> None:
        if late == RANK:
            spin(ms)  # logging, checkpoint bookkeeping, rank-only evaluation: Python on the main thread
        work(m, k)

    return {**steps(dur, body, g), "host_ms": round(ms, 1), "dim": dim, "matmuls": k, "grad_mib": mib}


class SlowItems(Dataset):
    def __init__(self, item_ms: float):
        self.item_ms = item_ms

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> torch.Tensor:
        spin(self.item_ms)
        return torch.ones(256)


def straggler_loader(dur: float, late: int) -> dict:
    slow, batch, dim, k = RNG.uniform(25, 60) * S, RNG.choice([4, 8]), RNG.choice([2048, 4096]), 4
    item_ms = slow if late == RANK else 0.05
    m, (g, mib) = mat(dim), grad_buffer()
    it = iter(DataLoader(SlowItems(item_ms), batch_size=batch, num_workers=1, pin_memory=True))

    def body() -> None:
        next(it).to(dev, non_blocking=True)
        work(m, k)

    return {**steps(dur, body, g), "item_ms": round(slow, 1), "batch": batch, "workers": 1, "grad_mib": mib}


def straggler_compute(dur: float, late: int) -> dict:
    dim, base, extra = RNG.choice([4096, 6144]), RNG.randint(1, 4), int(RNG.randint(30, 90) * S)
    m, (g, mib) = mat(dim), grad_buffer()
    k = base + (extra if late == RANK else 0)
    return {**steps(dur, lambda: work(m, k), g), "dim": dim, "matmuls": base, "extra": extra, "grad_mib": mib}


def fsdp_straggler(dur: float, late: int) -> dict:
    from torch.distributed.fsdp import fully_shard

    width, layers, extra = RNG.choice([2048, 4096]), RNG.randint(4, 8), int(RNG.randint(120, 300) * S)
    model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)]).to(dev)
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(2048, width, device=dev)
    m = mat(4096)

    def body() -> None:
        if late == RANK:
            work(m, extra)  # the late rank's extra work before the forward pass's all-gathers
        with torch.autocast("cuda", torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {**steps(dur, body, None), "width": width, "layers": layers, "extra": extra}


def comm_bandwidth(dur: float, late: int) -> dict:
    mib = RNG.choice([256, 512, 1024])
    big = torch.empty(mib << 19, device=dev, dtype=torch.bfloat16)
    t = time.monotonic()
    facts = steps(dur, lambda: dist.all_reduce(big), None)
    dt = time.monotonic() - t
    # ring all-reduce bus bandwidth: 2 (n-1)/n of the buffer crosses each link per call
    bus = facts["steps"] * (mib << 20) * 2 * (WORLD - 1) / WORLD / dt / 1e9
    return {**facts, "buffer_mib": mib, "bus_gbps": round(bus, 1)}


def neg_ddp_overlap(dur: float, late: int) -> dict:
    width, layers = RNG.choice([4096, 6144]), RNG.randint(8, 14)
    seq = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    model = DDP(seq.to(dev, torch.bfloat16), device_ids=[LOCAL], bucket_cap_mb=25)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4096, width, device=dev, dtype=torch.bfloat16)

    def body() -> None:  # the DDP all-reduce runs in buckets under the backward pass
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {**steps(dur, body, None), "width": width, "layers": layers}


# name -> (the late rank's label, its peers' label, fn); None: no straggler, every rank gets the label
PHASES: dict[str, tuple[str, str, Callable[[float, int], dict]]] = {
    "straggler_host": ("cpu", "comm", straggler_host),
    "straggler_loader": ("input", "comm", straggler_loader),
    "straggler_compute": ("compute", "comm", straggler_compute),
    "fsdp_straggler": ("compute", "comm", fsdp_straggler),
    "comm_bandwidth": ("comm", "comm", comm_bandwidth),
    "neg_ddp_overlap": ("compute", "compute", neg_ddp_overlap),
}
NO_STRAGGLER = {"comm_bandwidth", "neg_ddp_overlap"}


def idle(dur: float, late: int) -> dict:
    dist.barrier()
    t0 = time.monotonic()
    time.sleep(dur)
    return {"_t0": t0}


def main() -> None:
    names = A.only or list(PHASES)
    if not A.only:
        RNG.shuffle(names)
    with open(MARKERS, "a") as fh:
        for name in ["idle", *names, "idle"]:
            late = -1 if name in NO_STRAGGLER | {"idle"} else RNG.randint(0, WORLD - 1)
            if name == "idle":
                own, fn, dur = "idle", idle, A.idle_s
            else:
                late_label, peer_label, fn = PHASES[name]
                own, dur = (late_label if late == RANK or late < 0 else peer_label), A.phase_s
            t0 = time.monotonic()
            try:
                facts = fn(dur, late)
            except Exception:
                traceback.print_exc()
                print(f"rank {RANK} {name}: failed, no marker", flush=True)
                continue
            torch.cuda.synchronize()
            t1 = time.monotonic()
            t0 = facts.pop("_t0", t0)
            facts.update(rank=RANK, local_rank=LOCAL, uuid=UUID, late_rank=late, straggler=late == RANK)
            fh.write(json.dumps({"t0": t0, "t1": t1, "label": own, "name": name, "facts": facts}) + "\n")
            fh.flush()
            print(f"rank {RANK} {name:18s} {own:8s} {t1 - t0:5.1f}s {facts}", flush=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        dist.destroy_process_group()
