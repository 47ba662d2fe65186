"""Slowdown of a training loop while memtop samples its stacks with py-spy.

A matmul+Python training step runs continuously; py-spy dump --nonblocking is run against it
at 0 (off), 1 and 5 Hz in alternating windows. Prints JSON with the mean step time per rate and
the slowdown vs off. usage: python bench/stack_overhead.py [WINDOW_S] [ROUNDS] [MATMULS_PER_STEP]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time

import torch
from memtop.collectors.stacks import find_pyspy


def main() -> None:
    window = float(sys.argv[1]) if len(sys.argv) > 1 else 8
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    matmuls = int(sys.argv[3]) if len(sys.argv) > 3 else 6  # per step: 6 ~ 1.4 ms, 40 ~ 8 ms on the H100
    pyspy = find_pyspy()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    rate = {"hz": 0.0}
    stop = threading.Event()

    def sampler() -> None:
        import os

        while not stop.is_set():
            hz = rate["hz"]
            if hz:
                subprocess.run(
                    [pyspy, "dump", "--json", "--nonblocking", "--pid", str(os.getpid())],
                    capture_output=True,
                    env={"RUST_BACKTRACE": "0"},
                )
                time.sleep(max(0.0, 1 / hz))
            else:
                time.sleep(0.05)

    threading.Thread(target=sampler, daemon=True).start()

    def step() -> None:
        x = a
        for _ in range(matmuls):
            x = x @ a
        s = 0
        for i in range(20000):  # some Python work per step
            s += i
        x[0, 0].item()

    for _ in range(20):
        step()
    times: dict[float, list[float]] = {0.0: [], 1.0: [], 5.0: []}
    for _ in range(rounds):
        for hz in (0.0, 1.0, 0.0, 5.0):
            rate["hz"] = hz
            end = time.monotonic() + window
            n, t0 = 0, time.perf_counter()
            while time.monotonic() < end:
                step()
                n += 1
            times[hz].append((time.perf_counter() - t0) / n * 1e3)
    stop.set()
    off = statistics.mean(times[0.0])
    print(
        json.dumps(
            {
                "step_ms": {str(k): round(statistics.mean(v), 4) for k, v in times.items()},
                "slowdown_pct_1hz": round(100 * (statistics.mean(times[1.0]) / off - 1), 3),
                "slowdown_pct_5hz": round(100 * (statistics.mean(times[5.0]) / off - 1), 3),
                "windows": {str(k): [round(x, 4) for x in v] for k, v in times.items()},
                "matmuls_per_step": matmuls,
                "window_s": window,
                "rounds": rounds,
            }
        )
    )


if __name__ == "__main__":
    main()
