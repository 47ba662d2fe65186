"""CuPy workload: a kernel loop that syncs, one that reads results back with .get(), transfers,
a launch-bound loop, a bandwidth-bound elementwise loop, and a compute-bound negative control that waits in synchronize().

usage: python bench/workloads/cupy_fw.py --markers M.jsonl [--seed S] [--scale X] [--phase-s 5]
"""

from __future__ import annotations

import time

import cupy as cp
import numpy as np
from wl import Waits, args, run, spin

A = args(__doc__)
S = A.scale
cp.random.seed(A.seed)
BIG = cp.random.standard_normal((8192, 8192), dtype=cp.float32).astype(cp.float16)
MID = cp.random.standard_normal((int(2048 * S), int(2048 * S)), dtype=cp.float32)
SMALL = cp.ones(1024, dtype=cp.float32)
HOST = np.ones(int(64 * S) << 20, dtype=np.float32)
DEV = cp.ones_like(HOST)
(BIG @ BIG).sum().get()
(MID @ MID).sum().get()


def cupy_compute(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        for _ in range(10):
            BIG @ BIG
        cp.cuda.Device().synchronize()
        n += 10
    return {"matmuls": n}


def cupy_get(end: float) -> dict:
    n, w = 0, Waits()
    while time.monotonic() < end:
        spin(4 * S)
        x = MID
        for _ in range(4):
            x = MID @ x
        v = float(w.timed(x[0, 0].get))
        n += 1
    return {"steps": n, "last": v, "wait_frac": w.frac()}


def cupy_stream_sync(end: float) -> dict:
    n, s, w = 0, cp.cuda.get_current_stream(), Waits()
    while time.monotonic() < end:
        spin(3 * S)
        x = MID
        for _ in range(5):
            x = MID @ x
        w.timed(s.synchronize)
        n += 1
    return {"steps": n, "wait_frac": w.frac()}


def cupy_transfer(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        d = cp.asarray(HOST)
        DEV.get(out=None)
        n += 1
    del d
    return {"bytes_each_way": n * HOST.nbytes}


def cupy_launch(end: float) -> dict:
    x, n = SMALL, 0
    while time.monotonic() < end:
        for _ in range(100):
            x = x * 1.0001
        n += 100
    return {"kernels": n}


MEM_A = cp.ones(int(256 * S) << 20, dtype=cp.float32)  # 1 GiB at scale 1: far larger than L2
MEM_B = cp.empty_like(MEM_A)


def cupy_memory(end: float) -> dict:
    """A device-to-device copy of 1 GiB each time: bandwidth-bound (cp.add(MEM_A, 1.0, out=MEM_B)
    reached only half the DRAM bandwidth on the H100, train_cupy_s50: not established as memory-bound)."""
    n = 0
    while time.monotonic() < end:
        for _ in range(10):
            cp.copyto(MEM_B, MEM_A)
        cp.cuda.Device().synchronize()
        n += 10
    return {"copies": n, "bytes_moved": n * 2 * MEM_A.nbytes}


PHASES = {
    "cupy_memory": ("memory", cupy_memory),
    "cupy_compute": ("compute", cupy_compute),
    "cupy_get": ("sync", cupy_get),
    "cupy_stream_sync": ("sync", cupy_stream_sync),
    "cupy_transfer": ("transfer", cupy_transfer),
    "cupy_launch": ("cpu", cupy_launch),
}

if __name__ == "__main__":
    run(A, PHASES)
