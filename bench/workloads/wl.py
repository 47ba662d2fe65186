"""Shared by the framework workloads: run named phases for a fixed time, write ground-truth markers.

A marker is one JSON line {t0, t1, label, name, facts} on time.monotonic(), the clock memtop stamps
Frames with (as in bench/workload.py). A phase that raises writes no marker (its time is unscored)
and the run goes on; the error is printed for the log.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import traceback
from collections.abc import Callable


def spin(ms: float) -> int:
    """Pure-Python CPU work for ms milliseconds (holds the GIL)."""
    end = time.perf_counter() + ms / 1e3
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


class Waits:
    """Wall time a loop spends in its synchronising call, against the loop's: the workload's own
    measure that a sync phase stalled (a fact in the marker, independent of memtop)."""

    def __init__(self) -> None:
        self.t0, self.wait = time.perf_counter(), 0.0

    def timed(self, fn: Callable, *a):
        t = time.perf_counter()
        out = fn(*a)
        self.wait += time.perf_counter() - t
        return out

    def frac(self) -> float:
        return round(self.wait / max(1e-9, time.perf_counter() - self.t0), 3)


def args(doc: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--markers", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phase-s", type=float, default=5.0)
    ap.add_argument("--scale", type=float, default=1.0, help="sizes and CPU/GPU ratios vary with it")
    ap.add_argument("--only", nargs="*")
    return ap.parse_args()


def run(a: argparse.Namespace, phases: dict[str, tuple[str, Callable[[float], dict]]]) -> None:
    """phases: name -> (label, fn(end) -> facts). Shuffled by seed, idle at both ends."""
    names = a.only or list(phases)
    if not a.only:
        random.Random(a.seed).shuffle(names)
    names = ["idle", *names, "idle"]
    phases = {"idle": ("idle", _idle), **phases}
    with open(a.markers, "a") as fh:
        for name in names:
            label, fn = phases[name]
            t0 = time.monotonic()
            try:
                facts = fn(t0 + a.phase_s)
            except Exception:
                traceback.print_exc()
                print(f"{name}: failed, no marker", flush=True)
                continue
            t1 = time.monotonic()
            t0 = facts.pop("_t0", t0)  # a framework's own set-up and first steps are not the phase...
            t1 = facts.pop("_t1", t1)  # ...nor its teardown after the last step
            fh.write(json.dumps({"t0": t0, "t1": t1, "label": label, "name": name, "facts": facts}) + "\n")
            fh.flush()
            print(f"{name:22s} {label:9s} {t1 - t0:5.1f}s {facts}", flush=True)


def _idle(end: float) -> dict:
    time.sleep(max(0.0, end - time.monotonic()))
    return {}
