"""Live mode's classifier alone on N GPUs: CPU time of ``Classifier.feed`` per second of recording
(a recording made N GPUs wide by tests/multigpu.py, its Frames read before the clock starts; the
least of REPEATS passes, each with a new classifier).

usage: python bench/feed_ab.py [RECORDING] [GPUS]                      (one JSON line)
       python bench/feed_ab.py --before CHECKOUT [--runs N] [RECORDING] [GPUS]
         (this tree and CHECKOUT alternated in fresh processes; min, median and after/before ratios)
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
REPEATS = 5


def measure(path: str, gpus: int) -> dict:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from multigpu import multi_gpu

    from memtop.analysis.phases import Classifier
    from memtop.storage.store import Recording

    frames = multi_gpu(list(Recording(path).frames()), gpus)
    cpus = []
    for _ in range(REPEATS):  # the least of a few passes: the VM is shared
        clf = Classifier(max_bins=240)  # live mode keeps a bounded history
        c0 = time.thread_time()
        for f in frames:
            clf.feed(f)
        cpus.append(time.thread_time() - c0)
    seconds = frames[-1].t - frames[0].t
    return {
        "recording": Path(path).name,
        "gpus": gpus,
        "seconds": round(seconds, 1),
        "feed_ms_per_s": round(min(cpus) / seconds * 1e3, 3),
        "gaps": len(clf.gaps),
    }


def side_by_side(before: str, runs: int, args: list[str]) -> dict:
    trees = {"after": str(HERE.parent), "before": before}
    got: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(runs):
        for key, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": tree}
            cmd = [sys.executable, str(HERE / "feed_ab.py"), *args]
            out = subprocess.run(cmd, capture_output=True, check=True, env=env, cwd="/")
            got[key].append(json.loads(out.stdout)["feed_ms_per_s"])
    a, b = got["after"], got["before"]
    return {
        **{k: {"min": min(v), "median": round(statistics.median(v), 3), "runs": v} for k, v in got.items()},
        "ratio_min": round(min(a) / min(b), 3),
        "ratio_median": round(statistics.median(a) / statistics.median(b), 3),
        "ratio_per_pair": [round(x / y, 3) for x, y in zip(a, b, strict=True)],
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
    print(json.dumps(measure(path, int(a[1]) if len(a) > 1 else 8)))


if __name__ == "__main__":
    main()
