"""CPU time of the UI thread per paint, headless and without sleeping: a recording is fed to the
pipeline one second at a time and the app paints and composes after each second. Steadier than
a pty run's CPU % for comparing two builds of the UI (the sampler and the terminal are left out).

usage: python bench/ui_paint_bench.py [RECORDING] [PAINTS] [COLSxROWS] [GPUS] [HZ]   (one JSON line)
HZ: frames fed per second of the recording (1 = what `memtop --interval 1` samples); 0 = all
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from memtop.tui.app import MemtopApp

from memtop.live.pipeline import Pipeline, Status
from memtop.storage.store import Recording

HERE = Path(__file__).resolve().parent


async def run(path: str, paints: int, size: tuple[int, int], gpus: int, hz: float) -> dict:
    rec = Recording(path)
    frames = list(rec.frames())
    if hz > 0:
        kept = [frames[0]]
        for f in frames:
            if f.t - kept[-1].t >= 1 / hz - 1e-3:
                kept.append(f)
        frames = kept
    if gpus > 1:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from multigpu import multi_gpu

        frames = multi_gpu(frames, gpus)
    pipe = Pipeline(Status("live"), meta=rec.meta)
    app = MemtopApp(pipe, hangup_guard=False, paint_rate=0.01)  # paints only when told
    ui = feed = 0.0
    done = 0
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        i, t_next = 0, frames[0].t + 1.0
        for _ in range(60):  # a minute of history before measuring
            while i < len(frames) and frames[i].t < t_next:
                pipe.on_frame(frames[i], tick=False)
                i += 1
            t_next += 1.0
        app._paint()
        await pilot.pause(0.1)
        while done < paints and i < len(frames):
            c0 = time.thread_time()
            while i < len(frames) and frames[i].t < t_next:
                pipe.on_frame(frames[i], tick=False)
                i += 1
            t_next += 1.0
            c1 = time.thread_time()
            app._paint()
            await asyncio.sleep(
                0.05
            )  # the screen's update timer composes (Pilot.pause messages every widget)
            c2 = time.thread_time()
            feed += c1 - c0
            ui += c2 - c1
            done += 1
    return {
        "recording": Path(path).name,
        "size": f"{size[0]}x{size[1]}",
        "gpus": gpus,
        "hz": hz,
        "paints": done,
        "ui_ms_per_paint": round(ui / done * 1e3, 3),
        "feed_ms_per_s": round(feed / done * 1e3, 3),
    }


def main() -> None:
    a = sys.argv[1:]
    path = a[0] if a else str(HERE.parent / "tests/data/labelled_s10.memtop")
    paints = int(a[1]) if len(a) > 1 else 120
    cols, rows = (int(x) for x in (a[2] if len(a) > 2 else "200x50").split("x"))
    gpus = int(a[3]) if len(a) > 3 else 1
    hz = float(a[4]) if len(a) > 4 else 0.0
    print(json.dumps(asyncio.run(run(path, paints, (cols, rows), gpus, hz))))


if __name__ == "__main__":
    main()
