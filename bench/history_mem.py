"""What a live view's history holds after MINUTES of sampling: the demo recording (10 Hz, one GPU)
fed again and again with its times moved on into one Pipeline, as a live sampler feeds it; then the
Python memory (tracemalloc) of each structure the pipeline keeps, the CPU of a paint's view() and the
counts kept. One JSON line. For A/B of two trees (PYTHONPATH), any machine.

usage: python bench/history_mem.py [MINUTES] [RECORDING]
"""

from __future__ import annotations

import gc
import json
import sys
import time
import tracemalloc
from dataclasses import replace

from memtop.commands.local import demo_path, open_recording
from memtop.live.pipeline import Pipeline, Status

KEPT = ("_kept", "history", "classifier", "jobshare", "trail", "events", "health")


def moved(frame, dt: float):
    """The frame ``dt`` seconds later (its GPU, host and stack samples' times with it)."""
    return replace(
        frame,
        t=frame.t + dt,
        gpus=tuple(replace(g, t=g.t + dt) for g in frame.gpus),
        host=None if frame.host is None else replace(frame.host, t=frame.host.t + dt),
        stacks=tuple(replace(s, t=s.t + dt) for s in frame.stacks),
    )


def main() -> None:
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    rec = open_recording(sys.argv[2] if len(sys.argv) > 2 else demo_path())
    frames = list(rec.frames())
    span = frames[-1].t - frames[0].t + 0.1
    pipe = Pipeline(Status("live"), meta=rec.meta)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fed, lap, cpu = 0, 0, 0.0
    while fed == 0 or frames[-1].t + lap * span - frames[0].t < minutes * 60:
        for f in frames:
            f = moved(f, lap * span) if lap else f
            t0 = time.process_time()
            pipe.on_frame(f, tick=False)
            cpu += time.process_time() - t0
            fed += 1
        lap += 1
    gc.collect()
    out: dict = {"minutes": minutes, "frames": fed, "feed_cpu_ms_per_frame": round(cpu / fed * 1e3, 3)}
    out["traced_mib"] = round((tracemalloc.get_traced_memory()[0] - base) / 2**20, 2)
    t0 = time.process_time()
    for _ in range(10):
        pipe.view()
    out["view_ms"] = round((time.process_time() - t0) / 10 * 1e3, 2)
    out["points"] = sum(len(h) for h in pipe.history.values())
    out["labels"] = sum(len(v) for v in pipe.classifier.labels.values())
    out["kept_frames"] = len(pipe._kept)
    for name in KEPT:  # what each structure holds: the memory freed when it goes
        before = tracemalloc.get_traced_memory()[0]
        setattr(pipe, name, None)
        gc.collect()
        out[name + "_mib"] = round((before - tracemalloc.get_traced_memory()[0]) / 2**20, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
