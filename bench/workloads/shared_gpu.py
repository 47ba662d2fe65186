"""Two processes sharing one GPU: both in a sync-stall loop; one compute-bound beside one
Python-bound; both Python-bound. The helper process is started (and its CUDA context made) before
the first phase and told what to run at each phase's start.

usage: python bench/workloads/shared_gpu.py --markers M.jsonl [--seed S] [--scale X] [--phase-s 5]
"""

from __future__ import annotations

import multiprocessing as mp
import time

from wl import args, run, spin

A = args(__doc__)
S = A.scale


def loop(kind: str, end: float) -> int:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    m = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    n = 0
    while time.monotonic() < end:
        if kind == "compute":
            for _ in range(10):
                a @ a
            torch.cuda.synchronize()
        elif kind == "sync":
            spin(4 * S)
            x = m
            for _ in range(int(16 / S)):  # ~4 ms of GPU per ~4 ms of Python
                x = m @ x
            x[0, 0].item()
        else:  # python
            spin(10)
            m.add_(0)
        n += 1
    return n


def helper(q_in, q_out) -> None:
    import torch

    torch.ones(1, device="cuda")
    while (job := q_in.get()) is not None:
        q_out.put(loop(*job))


def phase(mine: str, theirs: str):
    def fn(end: float) -> dict:
        Q_IN.put((theirs, end))
        n = loop(mine, end)
        return {"mine": [mine, n], "theirs": [theirs, Q_OUT.get()]}

    return fn


PHASES = {
    "shared_sync": ("sync", phase("sync", "sync")),
    "shared_compute_python": ("compute", phase("python", "compute")),
    "shared_python": ("cpu", phase("python", "python")),
}

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    Q_IN, Q_OUT = ctx.Queue(), ctx.Queue()
    h = ctx.Process(target=helper, args=(Q_IN, Q_OUT))
    h.start()
    import torch

    torch.ones(1, device="cuda")
    loop("python", time.monotonic() + 3)  # the helper's CUDA context is up by now
    run(A, PHASES)
    Q_IN.put(None)
    h.join()
