"""CPU seconds of the stack-window features of every bin: memtop.stackwin.stack_columns against the
per-bin Python (Classifier._stack_shares on the window as colscan's scan advances it), over the bins
and GPU processes colscan's scan of the recording asks about, with the cyclic garbage collector off as
colscan's scan runs (colscan.no_gc). Checks the two agree on every bin.

usage: python bench/stackwin_bench.py [RECORDING] [ROUNDS]   (default /tmp/r8h/8h.memtop, 5)
"""

from __future__ import annotations

import bisect
import gc
import sys
import time

import numpy as np

from memtop import colscan
from memtop.phases import STACK_WINDOW_S, Classifier
from memtop.stackwin import Entries, stack_columns
from memtop.store import Recording


def asked(path: str) -> tuple[list, list[float], list[tuple[frozenset[int], float]]]:
    """The window's entries, the Frame times and each bin's (GPU processes, now) of colscan's scan."""
    calls: list[tuple[frozenset[int], float]] = []
    held: list = []

    class Asked(Classifier):
        def _stack_shares(self, pids, now):
            calls.append((frozenset(pids), now))
            return super()._stack_shares(pids, now)

    class Kept(colscan._Stacks):
        def __init__(self, *args, **kw) -> None:
            super().__init__(*args, **kw)
            held.append(self)

    colscan.Classifier, colscan._Stacks = Asked, Kept  # type: ignore[misc]
    rec = Recording(path)
    colscan._scan(rec, None, rec.t0, rec.t1, None)
    return held[0].window, held[0].frames, calls


def per_bin(window: list, frames: list[float], k: list[int], pids: list) -> list[tuple]:
    clf = Classifier()
    out, nxt = [], 0
    for kk, p in zip(k, pids, strict=True):
        while nxt < len(window) and window[nxt][0] <= kk:
            clf._stacks.append(window[nxt][1:])
            nxt += 1
        while clf._stacks and clf._stacks[0][0].t < frames[kk] - STACK_WINDOW_S:
            clf._stacks.popleft()
        out.append(clf._stack_shares(p, frames[kk]))
    return out


def cpu(f, rounds: int) -> tuple[float, object]:
    best, got = float("inf"), None
    for _ in range(rounds):
        t = time.process_time()
        got = f()
        best = min(best, time.process_time() - t)
    return best, got


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/r8h/8h.memtop"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    window, frames, calls = asked(path)
    gc.disable()
    sets = list(dict.fromkeys(p for p, _ in calls))
    ft = np.array(frames)  # as colscan holds the Frame times
    k = np.array([bisect.bisect_right(frames, now) - 1 for _, now in calls], dtype=np.int64)
    ps = np.array([sets.index(p) for p, _ in calls], dtype=np.int64)
    t_cols, cols = cpu(lambda: stack_columns(window, ft, k, ps, sets), rounds)
    t_entries, entries = cpu(lambda: Entries.of(window), rounds)
    t_pre, _ = cpu(lambda: stack_columns(entries, ft, k, ps, sets), rounds)
    t_rows, _ = cpu(lambda: cols.tuples(), rounds)  # type: ignore[union-attr]
    t_py, want = cpu(lambda: per_bin(window, frames, k.tolist(), [p for p, _ in calls]), max(1, rounds // 3))
    assert cols is not None and want is not None
    same = cols.tuples() == want  # type: ignore[union-attr]
    pairs = int(sum(w[2] for w in want))  # type: ignore[attr-defined,union-attr]
    print(f"{path}: {len(calls)} bins, {len(window)} window entries, {pairs} (bin, sample) weights")
    print(f"stack_columns(entries)        {t_cols:.3f} CPU-s (best of {rounds})")
    print(f"  Entries.of(entries)         {t_entries:.3f}")
    print(f"  stack_columns(Entries)      {t_pre:.3f}")
    print(f"StackCols.tuples() (all bins) {t_rows:.3f}")
    print(f"per-bin _stack_shares         {t_py:.3f}")
    print(f"ratio {t_py / t_cols:.1f}x; every bin equal: {same}")


if __name__ == "__main__":
    main()
