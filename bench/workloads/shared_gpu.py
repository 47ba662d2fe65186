"""Two processes sharing one GPU: both in a sync-stall loop; one compute-bound beside one
Python-bound; both Python-bound. The helper process is started (and its CUDA context made) before
the first phase and told what to run at each phase's start.

usage: python bench/workloads/shared_gpu.py --markers M.jsonl [--seed S] [--scale X] [--phase-s 5]
"""

from __future__ import annotations

import multiprocessing as mp
import time

from wl import Waits, args, run, spin

A = args(__doc__)
S = A.scale


# sync: each process spins CPU_MS, then runs GPU_MS of products and waits for them. With two
# processes taking turns the GPU is busy ~2 x GPU_MS per step (35-70 %), each waits 15-35 % of its
# time: a sync stall, not the compute-bound GPU that 16 products of 4096 per 3.2 ms gave (held-out s6)
CPU_MS, GPU_MS = 5 * S, 1.6 / S
PER_MS = [1.0]  # products of 4096 per ms of GPU, measured by each process while the other is idle


def calibrate() -> None:
    import torch

    m = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    m @ m
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(50):
        m @ m
    torch.cuda.synchronize()
    PER_MS[0] = 50 / ((time.perf_counter() - t) * 1e3)


def loop(kind: str, end: float) -> list:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    m = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    k = max(1, round(GPU_MS * PER_MS[0]))
    n, w = 0, Waits()
    while time.monotonic() < end:
        if kind == "compute":
            for _ in range(10):
                a @ a
            torch.cuda.synchronize()
        elif kind == "sync":
            spin(CPU_MS)
            x = m
            for _ in range(k):
                x = m @ x
            w.timed(lambda v: v[0, 0].item(), x)
        else:  # python
            spin(10)
            m.add_(0)
        n += 1
    return [kind, n, w.frac()]


def helper(q_in, q_out) -> None:

    calibrate()  # the main process is still starting
    while (job := q_in.get()) is not None:
        q_out.put(loop(*job))


def phase(mine: str, theirs: str):
    def fn(end: float) -> dict:
        Q_IN.put((theirs, end))
        n = loop(mine, end)
        return {"mine": n, "theirs": Q_OUT.get()}

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
    calibrate()
    run(A, PHASES)
    Q_IN.put(None)
    h.join()
