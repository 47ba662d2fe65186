"""Phased PyTorch workload of known bottlenecks, writing ground-truth markers.

Each phase runs for --phase-s seconds and appends a JSON line to --markers:
{t0, t1, label, name, facts} with t0/t1 on time.monotonic() (the clock memtop stamps
Frames with) and measured facts proving the phase happened (bytes copied, GPU-busy ms from
CUDA events, iterations). Phase order is shuffled by --seed; idle opens and closes the run.

Labels: idle, compute, memory, transfer, sync, input, cpu. Names starting with ``neg_`` are
negative controls: healthy GPU-bound work that must not be flagged as a stall.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import time

import torch
from torch.utils.data import DataLoader, Dataset

dev = torch.device("cuda")


def spin(ms: float) -> int:
    """Pure-Python CPU work for ms milliseconds (holds the GIL)."""
    end = time.perf_counter() + ms / 1e3
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


class HeavyItems(Dataset):
    def __init__(self, item_ms: float, sleep_ms: float = 0.0, n: int = 1_000_000):
        self.item_ms, self.sleep_ms, self.n = item_ms, sleep_ms, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.sleep_ms:
            time.sleep(self.sleep_ms / 1e3)  # waiting on slow storage
        spin(self.item_ms)
        return torch.ones(64, 64)


class Phases:
    def __init__(self, secs: float):
        self.secs = secs
        self.a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        self.b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        self.s = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        self.big1 = torch.empty(256 << 20, device=dev, dtype=torch.float32)  # 1 GiB
        self.big2 = torch.empty_like(self.big1)
        self.pinned = torch.empty(64 << 20, dtype=torch.float32).pin_memory()  # 256 MiB
        self.pageable = torch.empty(64 << 20, dtype=torch.float32)
        self.dbuf = torch.empty(64 << 20, device=dev, dtype=torch.float32)
        self.tiny = torch.zeros(16, device=dev)
        self.small_ms = self._time(lambda: self.s @ self.s)

    def _time(self, fn, reps: int = 20) -> float:
        fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) / reps

    def run(self, name: str) -> dict:
        """Run one phase for self.secs; return measured facts."""
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        e0.record()
        end = time.monotonic() + self.secs
        facts = getattr(self, "p_" + name)(end)
        e1.record()
        torch.cuda.synchronize()
        facts["gpu_span_ms"] = round(e0.elapsed_time(e1), 1)
        return facts

    def p_idle(self, end: float) -> dict:
        time.sleep(max(0.0, end - time.monotonic()))
        return {"iterations": 0}

    def p_compute(self, end: float) -> dict:
        n = 0
        while time.monotonic() < end:
            for _ in range(10):
                self.a @ self.b
            torch.cuda.synchronize()
            n += 10
        return {"matmuls": n, "tflop": round(n * 2 * 8192**3 / 1e12, 1)}

    def p_memory(self, end: float) -> dict:
        n = 0
        while time.monotonic() < end:
            for _ in range(10):
                self.big2.copy_(self.big1)
            torch.cuda.synchronize()
            n += 10
        return {"copies": n, "bytes_moved": n * 2 * self.big1.numel() * 4}

    def _copies(self, end: float, src: torch.Tensor, dst: torch.Tensor, nb: bool) -> dict:
        n = 0
        while time.monotonic() < end:
            dst.copy_(src, non_blocking=nb)
            torch.cuda.synchronize()
            n += 1
        return {"copies": n, "bytes_copied": n * src.numel() * 4}

    def p_h2d_pinned(self, end: float) -> dict:
        return self._copies(end, self.pinned, self.dbuf, True)

    def p_d2h_pinned(self, end: float) -> dict:
        return self._copies(end, self.dbuf, self.pinned, True)

    def p_h2d_pageable(self, end: float) -> dict:
        return self._copies(end, self.pageable, self.dbuf, False)

    def _stall(self, end: float, cpu_ms: float, gpu_ms: float) -> dict:
        k = max(1, round(gpu_ms / self.small_ms))
        n = 0
        while time.monotonic() < end:
            spin(cpu_ms)
            x = self.s
            for _ in range(k):
                x = x @ self.s
            x[0, 0].item()  # the per-step sync that serialises CPU and GPU
            n += 1
        return {"steps": n, "cpu_ms": cpu_ms, "gpu_ms": round(k * self.small_ms, 2)}

    def p_sync_even(self, end: float) -> dict:
        return self._stall(end, 5, 5)

    def p_sync_cpu_heavy(self, end: float) -> dict:
        return self._stall(end, 8, 3)

    def p_sync_gpu_heavy(self, end: float) -> dict:
        return self._stall(end, 3, 8)

    def p_launch(self, end: float) -> dict:
        n = 0
        while time.monotonic() < end:
            for _ in range(200):
                self.tiny.add_(1)
            n += 200
            if n % 20000 == 0:
                torch.cuda.synchronize()
        return {"kernels": n}

    def p_python(self, end: float) -> dict:
        n = 0
        while time.monotonic() < end:
            spin(20)
            self.tiny.add_(1)
            n += 1
        return {"steps": n}

    def _loader(self, end: float, workers: int, item_ms: float, sleep_ms: float, gpu_k: int, bs: int) -> dict:
        dl = DataLoader(
            HeavyItems(item_ms, sleep_ms),
            batch_size=bs,
            num_workers=workers,
            pin_memory=workers > 0,
            prefetch_factor=2 if workers else None,
            persistent_workers=False,
        )
        n = 0
        for batch in dl:
            xb = batch.to(dev, non_blocking=True)
            x = self.s
            for _ in range(gpu_k):
                x = x @ self.s
            xb.sum()
            n += 1
            if time.monotonic() >= end:
                break
        torch.cuda.synchronize()
        del dl
        return {"batches": n, "workers": workers}

    def p_dl_workers0(self, end: float) -> dict:
        return self._loader(end, 0, 3, 0, 2, 8)

    def p_dl_saturated(self, end: float) -> dict:
        return self._loader(end, 2, 4, 0, 2, 8)

    def p_dl_io(self, end: float) -> dict:
        return self._loader(end, 2, 0.2, 15, 2, 8)

    def p_neg_compute_item(self, end: float) -> dict:
        n = 0
        while time.monotonic() < end:
            x = self.a @ self.b
            for _ in range(4):
                x = self.a @ self.b
            x[0, 0].item()
            n += 1
        return {"steps": n}

    def p_neg_overlap_copy(self, end: float) -> dict:
        side = torch.cuda.Stream()
        n = 0
        while time.monotonic() < end:
            with torch.cuda.stream(side):
                self.dbuf.copy_(self.pinned, non_blocking=True)
            for _ in range(8):
                self.a @ self.b
            torch.cuda.synchronize()
            n += 1
        return {"steps": n, "bytes_copied": n * self.pinned.numel() * 4}

    def p_neg_busy_workers(self, end: float) -> dict:
        return self._loader(end, 3, 2, 0, 60, 4)

    def p_neg_cpu_hog(self, end: float) -> dict:
        hogs = [mp.get_context("fork").Process(target=_hog, args=(end,), daemon=True) for _ in range(2)]
        for h in hogs:
            h.start()
        facts = self.p_compute(end)
        for h in hogs:
            h.join()
        return {**facts, "hogs": len(hogs)}


def _hog(end: float) -> None:
    while time.monotonic() < end:
        spin(50)


LABELS = {
    "idle": "idle",
    "compute": "compute",
    "memory": "memory",
    "h2d_pinned": "transfer",
    "d2h_pinned": "transfer",
    "h2d_pageable": "transfer",
    "sync_even": "sync",
    "sync_cpu_heavy": "sync",
    "sync_gpu_heavy": "sync",
    "launch": "cpu",
    "python": "cpu",
    "dl_workers0": "input",
    "dl_saturated": "input",
    "dl_io": "input",
    "neg_compute_item": "compute",
    "neg_overlap_copy": "compute",
    "neg_busy_workers": "compute",
    "neg_cpu_hog": "compute",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--markers", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phase-s", type=float, default=6.0)
    ap.add_argument("--only", nargs="*", help="run only these phases, in this order")
    a = ap.parse_args()
    ph = Phases(a.phase_s)
    names = a.only or [n for n in LABELS if n != "idle"]
    if not a.only:
        random.Random(a.seed).shuffle(names)
        names = ["idle", *names, "idle"]
    print(f"workload pid {os.getpid()} seed {a.seed}: {' '.join(names)}", flush=True)
    with open(a.markers, "a") as fh:
        for name in names:
            t0 = time.monotonic()
            facts = ph.run(name)
            t1 = time.monotonic()
            fh.write(
                json.dumps({"t0": t0, "t1": t1, "label": LABELS[name], "name": name, "facts": facts}) + "\n"
            )
            fh.flush()
            print(f"{name:18s} {LABELS[name]:9s} {t1 - t0:5.1f}s {facts}", flush=True)


if __name__ == "__main__":
    main()
