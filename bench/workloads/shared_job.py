"""One of two training jobs sharing one GPU (issue #37, labels per job): its phases are drawn by
seed from compute-bound (bf16 8192² products back to back), input-bound (a DataLoader, a
multiprocessing.Pool, a producer Queue or a thread pool feeding ~1 ms of GPU work per batch: pipe_fw's
producers) and CPU-bound (a Python loop launching tiny kernels). bench/workloads/shared_jobs.sh starts
two of them at once with other seeds, so each job's phase changes while the other's goes on. Its
markers name the job (``A/compute``) and carry its pid (the truth of that job's label only).

usage: PHASES=compute,loader,pool,python JOB=A python shared_job.py --markers M.jsonl --seed S [--phase-s 6]
"""

from __future__ import annotations

import os
import time

import pipe_fw as pf  # (parses this script's arguments: the same ones)
import torch
from wl import run, spin

JOB = os.environ.get("JOB", "A")


def compute(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        for _ in range(10):
            pf.BIG @ pf.BIG
        torch.cuda.synchronize()
        n += 1
    return {"steps": n}


def python(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        spin(10)
        pf.MID.add_(0)
        n += 1
    torch.cuda.synchronize()
    return {"steps": n}


def _input(fn):
    return lambda end: fn(end, False)  # ~1 ms of GPU per batch: the producers set the pace


ALL = {
    "compute": ("compute", compute),
    "python": ("cpu", python),
    **{k: ("input", _input(getattr(pf, k))) for k in ("loader", "pool", "queue", "threads")},
}


def job(name: str, label: str, fn):
    def phase(end: float) -> dict:
        return {**fn(end), "job": JOB, "pid": os.getpid()}

    return (f"{JOB}/{name}", (label, phase))


if __name__ == "__main__":
    names = os.environ.get("PHASES", "compute,loader,pool,python").split(",")
    phases = dict(job(k, *ALL[k]) for k in names)
    run(pf.A, phases)
