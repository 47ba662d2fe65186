"""Recording size per GPU-hour, seek time and report time on an hour-long recording.

The hour is built from a real H100 recording (142 s, GPM 10 Hz, power 50 Hz, host 2 Hz, stacks
2 Hz) repeated with shifted timestamps, written through the real Writer.
usage: python bench/store_bench.py [SECONDS] [OUT.memtop]   (prints JSON)
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from memtop.outputs.report import build_report
from memtop.storage.store import Recording, Writer

ROOT = Path(__file__).parent.parent
SRC = ROOT / "tests/data/labelled_s0.memtop"


def shifted(frames, dt: float):
    for f in frames:
        yield replace(
            f,
            t=f.t + dt,
            gpus=tuple(replace(g, t=g.t + dt) for g in f.gpus),
            host=replace(f.host, t=f.host.t + dt) if f.host else None,
            stacks=tuple(replace(s, t=s.t + dt) for s in f.stacks),
            perf=tuple(replace(p, t=p.t + dt) for p in f.perf),
            series=tuple(replace(c, t=tuple(x + dt for x in c.t)) for c in f.series),
        )


def main() -> None:
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3600
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp()) / "hour.memtop"
    src = Recording(SRC)
    frames = list(src.frames())
    span = src.duration + 0.1
    w = Writer(out, src.meta, force=True)
    t0 = time.perf_counter()
    n = 0
    k = 0
    while k * span < secs:
        for f in shifted(frames, k * span):
            w.add(f)
            n += 1
            while w._q.qsize() > 5000:  # let the writer thread keep up
                time.sleep(0.01)
        k += 1
    w.close()
    write_s = time.perf_counter() - t0
    size = os.path.getsize(out)
    rec = Recording(out)
    hours = rec.duration / 3600
    seeks = []
    for _ in range(20):
        t = rec.t0 + random.random() * rec.duration
        a = time.perf_counter()
        rec.seek(t)
        seeks.append(time.perf_counter() - a)
    a = time.perf_counter()
    build_report(rec)
    report_s = time.perf_counter() - a
    a = time.perf_counter()
    m = sum(1 for _ in rec.frames())
    read_s = time.perf_counter() - a
    print(
        json.dumps(
            {
                "duration_s": round(rec.duration),
                "frames": n,
                "size_mb": round(size / 1e6, 2),
                "mb_per_gpu_hour": round(size / 1e6 / hours / max(1, len(src.meta.get("gpus") or [1])), 2),
                "write_s": round(write_s, 1),
                "seek_ms_median": round(1e3 * statistics.median(seeks), 1),
                "seek_ms_max": round(1e3 * max(seeks), 1),
                "report_s": round(report_s, 2),
                "read_all_frames_s": round(read_s, 1),
                "frames_read": m,
            }
        )
    )


if __name__ == "__main__":
    main()
