"""The column scan's readers and aggregates (memtop/analysis/colscan.py), each timed on its own: what the report
spends besides the bin loop. CPU seconds of this process, best of N, one serial pass over the whole
recording (as ``scan_part(rec, None, t0, t1, None)`` reads it). Another tree's readers:
PYTHONPATH=<its checkout> (the one of the memtop imported is printed).

    python bench/readfast_bench.py /tmp/r8h/8h.memtop /tmp/r8h/1h.memtop --runs 3
"""

from __future__ import annotations

import argparse
import bisect
import time
from pathlib import Path

import numpy as np

from memtop.analysis import colscan
from memtop.analysis.colscan import _aggregate, _gpus, _Hosts, _Stacks, no_gc
from memtop.analysis.phases import Classifier
from memtop.storage.decode import SANE_T
from memtop.storage.store import Recording


def parts(path: Path) -> dict[str, float]:
    """CPU seconds of each part of one serial column scan of the whole recording."""
    rec = Recording(path)
    out: dict[str, float] = {}
    clock = time.process_time

    def timed(name, fn, *a):
        t = clock()
        got = fn(*a)
        out[name] = clock() - t
        return got

    try:
        with no_gc():
            lo, hi = rec.t0, rec.t1
            frames = timed(
                "frames",
                lambda: [
                    r[0]
                    for r in rec._q(
                        f"SELECT t FROM frame WHERE t>=? AND t<=? AND {SANE_T} ORDER BY t", (lo, hi)
                    )
                ],
            )
            if hasattr(colscan, "frame_times"):  # what scan_part's query can be (the same list)
                assert timed("frame_times", colscan.frame_times, rec, lo, hi) == frames
            ft = np.array(frames, dtype=np.float64)
            i_lo = bisect.bisect_left(frames, lo)
            plo = float("-inf")
            gpus = timed("_gpus", _gpus, rec, ft, plo, hi, None)
            hosts = timed("_Hosts", _Hosts, rec, ft, plo, hi, None)
            stacks = timed("_Stacks", _Stacks, rec, frames, plo, hi, None)
            clf = Classifier()
            timed("gaps", lambda: [g.gaps(clf, i_lo, {}, None) for g in gpus])
            timed("_aggregate", _aggregate, rec, frames, i_lo, gpus, hosts, stacks, plo, hi, None)
    finally:
        rec.close()
    parts = sum(v for k, v in out.items() if k not in ("frames", "frame_times"))
    out["total"] = out["frames"] + parts
    if "frame_times" in out:
        out["total with frame_times"] = out["frame_times"] + parts
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    print(f"memtop.analysis.colscan from {colscan.__file__}")
    for p in a.paths:
        runs = [parts(p) for _ in range(a.runs)]
        best = {k: min(r[k] for r in runs) for k in runs[0]}
        print(f"{p.name}: " + "  ".join(f"{k} {v:.3f}" for k, v in best.items()))


if __name__ == "__main__":
    main()
