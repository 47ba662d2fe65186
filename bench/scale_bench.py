"""The sampler with N GPUs at full cadence: missed ticks and CPU.

The N GPUs answer with the real H100 replies recorded in tests/data/nvml_h100.json (each GPU
serves the same recording), so this measures memtop's scheduling and Frame building, not the
driver. usage: python bench/scale_bench.py [SECONDS]   (prints JSON lines for 1, 8 and 16 GPUs)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from memtop.collectors.nvml_calls import ReplayNvml

from memtop.live.sampler import Sampler, SamplerConfig

FIXTURE = Path(__file__).parent.parent / "tests/data/nvml_h100.json"


class ManyGpus:
    """N devices, each answering like the recorded H100 (own replay queue per device)."""

    def __init__(self, n: int):
        self.n = n
        self.devs = [ReplayNvml.load(FIXTURE) for _ in range(n)]

    def init(self) -> dict:
        return {**self.devs[0].init(), "count": self.n}

    def __getattr__(self, name: str):
        def call(i, *a):
            r = getattr(self.devs[i], name)(0, *a)
            if name == "device":
                r = {**r, "uuid": f"{r['uuid'][:-2]}{i:02d}"}
            return r

        return call

    def shutdown(self) -> None:
        pass


def run(n: int, secs: float) -> dict:
    frames = []
    s = Sampler(SamplerConfig(nvml=ManyGpus(n), stacks=False, perf=False), on_frame=frames.append)
    c0, w0 = time.process_time(), time.monotonic()
    s.start()
    threading.Event().wait(secs)
    s.stop()
    wall = time.monotonic() - w0
    per_gpu = [sum(1 for f in frames for g in f.gpus if g.index == i) for i in range(n)]
    return {
        "gpus": n,
        "seconds": round(wall, 1),
        "frames": len(frames),
        "frames_per_s": round(len(frames) / wall, 1),
        "missed_ticks": s.missed,
        "cpu_pct_one_core": round(100 * (time.process_time() - c0) / wall, 1),
        "gpus_in_last_frame": len(frames[-1].gpus) if frames else 0,
        "min_samples_per_gpu": min(per_gpu),
    }


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    for n in (1, 8, 16):
        print(json.dumps(run(n, secs)))
