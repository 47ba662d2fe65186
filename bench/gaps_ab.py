"""The report's gap tracking alone, this tree's ``colscan._Gpu.gaps`` against another checkout's, in
one process: the other checkout's ``memtop/analysis/colscan.py`` is loaded beside this one (the rest
of memtop is this tree's: only for comparing a change to the gap tracking), each recording's GPUs
are read once (``colscan._gpus``, the whole recording as one chunk) and both forms track every GPU's
gaps over them, alternately; the least CPU seconds of ROUNDS each, their ratio, and whether the
two found the same gaps.

usage: python bench/gaps_ab.py BEFORE_CHECKOUT [--rounds N] FILE...      (one JSON line a file)
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np


def main() -> None:
    from memtop.analysis import colscan
    from memtop.storage.store import Recording

    a = sys.argv[1:]
    spec = importlib.util.spec_from_file_location("colscan_before", Path(a[0]) / "memtop/analysis/colscan.py")
    assert spec is not None and spec.loader is not None
    before = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(before)
    a = a[1:]
    rounds = 7
    if a[:1] == ["--rounds"]:
        rounds, a = int(a[1]), a[2:]
    for path in a:
        rec = Recording(path)
        ft = np.array(colscan.frame_times(rec, rec.t0, rec.t1), dtype=np.float64)
        gpus = colscan._gpus(rec, ft, float("-inf"), rec.t1, None)
        got: dict[str, list[float]] = {"after": [], "before": []}
        found = {}
        for r in range(rounds):
            order = [("after", colscan), ("before", before)]
            for key, mod in order if r % 2 else order[::-1]:
                c0 = time.thread_time()
                found[key] = [mod._Gpu.gaps(g, {}, 0, {}, None) for g in gpus]
                got[key].append(time.thread_time() - c0)
        mins = {k: round(min(v), 4) for k, v in got.items()}
        print(
            json.dumps(
                {
                    "recording": Path(path).name,
                    "gpus": len(gpus),
                    "samples": sum(len(g.t) for g in gpus),
                    "gaps": sum(map(len, found["after"])),
                    "same_gaps": found["after"] == found["before"],
                    "cpu_s_min": mins,
                    "ratio_of_mins": round(mins["after"] / mins["before"], 3),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
