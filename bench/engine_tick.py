"""The live engine's cost per second on N GPUs, without the UI: a recording made N GPUs wide
(tests/multigpu.py) is fed to the Pipeline Frame by Frame (`on_frame`: the classifier, history,
events) and a View is built once per second of it (`view`: labels, verdicts, stragglers), as the
TUI's paint tick does. CPU time of this thread per second of recording.

usage: python bench/engine_tick.py [RECORDING] [GPUS] [SECONDS]            (one JSON line)
       python bench/engine_tick.py --before CHECKOUT [--runs N] [RECORDING] [GPUS] [SECONDS]
         (this tree and CHECKOUT alternated in fresh processes; min and median of each)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(path: str, gpus: int, seconds: float) -> dict:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from multigpu import multi_gpu

    from memtop.live.pipeline import Pipeline, Status
    from memtop.storage.store import Recording

    rec = Recording(path)
    frames = multi_gpu(list(rec.frames()), gpus) if gpus > 1 else list(rec.frames())
    pipe = Pipeline(Status("live"), meta=rec.meta)
    i, t_next = 0, frames[0].t + 1.0
    for _ in range(60):  # a minute of history first, as a view that has been open a while
        while i < len(frames) and frames[i].t < t_next:
            pipe.on_frame(frames[i], tick=False)
            i += 1
        t_next += 1.0
    pipe.view()
    feed = view = 0.0
    done = 0
    while done < seconds and i < len(frames):
        c0 = time.thread_time()
        while i < len(frames) and frames[i].t < t_next:
            pipe.on_frame(frames[i], tick=False)
            i += 1
        c1 = time.thread_time()
        pipe.view()
        c2 = time.thread_time()
        t_next += 1.0
        feed, view, done = feed + c1 - c0, view + c2 - c1, done + 1
    return {
        "recording": Path(path).name,
        "gpus": gpus,
        "seconds": done,
        "feed_ms_per_s": round(feed / done * 1e3, 3),
        "view_ms_per_s": round(view / done * 1e3, 3),
        "total_ms_per_s": round((feed + view) / done * 1e3, 3),
    }


def side_by_side(before: str, runs: int, args: list[str]) -> dict:
    """This tree and ``before`` alternated, each run a fresh process (PYTHONPATH picks the tree)."""
    trees = {"after": str(HERE.parent), "before": before}
    got: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(runs):
        for key, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": tree}
            out = subprocess.run(
                [sys.executable, str(HERE / "engine_tick.py"), *args],
                capture_output=True,
                check=True,
                env=env,
                cwd="/",
            )
            got[key].append(json.loads(out.stdout)["total_ms_per_s"])
    return {
        k: {"min_ms_per_s": min(v), "median_ms_per_s": round(statistics.median(v), 3), "runs": v}
        for k, v in got.items()
    }


def main() -> None:
    a = sys.argv[1:]
    if a[:1] == ["--before"]:
        before, a = a[1], a[2:]
        runs = 3
        if a[:1] == ["--runs"]:
            runs, a = int(a[1]), a[2:]
        a = [str(Path(a[0]).resolve()), *a[1:]] if a else a  # (the runs start in /)
        print(json.dumps(side_by_side(before, runs, a)))
        return
    path = a[0] if a else str(HERE.parent / "tests/data/labelled_s10.memtop")
    gpus = int(a[1]) if len(a) > 1 else 8
    seconds = float(a[2]) if len(a) > 2 else 60
    print(json.dumps(measure(path, gpus, seconds)))


if __name__ == "__main__":
    main()
