"""Why the stack window stays two forms (docs/ARCHITECTURE.md row 10): the cost of each form at
each caller's size, on the same windows. A recording made 8 GPUs wide is fed to the classifier; at
each bin close the window is taken as it stands and given to

- live's scalar form (``Classifier._stack_shares``, once per GPU), and
- the array form (``stackwin.stack_columns``, once for the 8 GPUs' bins, its ``Entries`` made
  from the window as live mode would have to),

then both forms over all those bins at once, as the report calls them (one ``stack_columns`` call;
one ``_stack_shares`` call per bin). CPU µs per bin.

usage: python bench/stackwin_forms.py [RECORDING] [GPUS]     (one JSON line)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def windows(path: str, gpus: int) -> list[tuple[list, float, list[set[int]]]]:
    """(window entries, now, each GPU's pids) at each bin close of the recording made ``gpus`` wide."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from multigpu import multi_gpu

    from memtop.analysis.phases import Classifier
    from memtop.storage.store import Recording

    clf, got = Classifier(max_bins=8), []
    for f in multi_gpu(list(Recording(path).frames()), gpus):
        if clf._bin is not None and clf._last is not None and f.t // clf.bin_s * clf.bin_s > clf._bin.t:
            pids = [{p.pid for p in vals[-1].processes} for vals in clf._bin.gpu_vals.values()]
            got.append((list(clf._stacks), clf._last.t, pids))
        clf.feed(f)
    return got


def entries_of(window: list, now: float):
    from memtop.analysis.stackwin import Entries

    infos = list(dict.fromkeys(i for _, i in window if i is not None))
    code = {x: j for j, x in enumerate(infos)}
    n = len(window)
    return Entries(
        np.zeros(n, np.int64),
        np.array([s.t for s, _ in window]),
        np.array([s.pid for s, _ in window], np.int64),
        np.array([-1 if i is None else code[i] for _, i in window], np.int64),
        tuple(infos),
    )


def main() -> None:
    from memtop.analysis.phases import Classifier
    from memtop.analysis.stackwin import stack_columns

    a = sys.argv[1:]
    path = a[0] if a else str(HERE.parent / "tests/data/labelled_s10.memtop")
    gpus = int(a[1]) if len(a) > 1 else 8
    wins = [w for w in windows(path, gpus) if w[0]]
    clf = Classifier()
    bins = sum(len(p) for _, _, p in wins)

    c0 = time.thread_time()
    for window, now, pids in wins:  # live, scalar: a call a GPU a bin
        clf._stacks.clear()
        clf._stacks.extend(window)
        for p in pids:
            clf._stack_shares(p, now)
    c1 = time.thread_time()
    for window, now, pids in wins:  # live, arrays: a call a bin close, the GPUs batched
        cols = stack_columns(
            entries_of(window, now),
            np.array([now]),
            np.zeros(len(pids), np.int64),
            np.arange(len(pids)),
            pids,
        )
        [cols.at(i) for i in range(len(pids))]
    c2 = time.thread_time()
    scalar_us, arrays_us = (c1 - c0) / bins * 1e6, (c2 - c1) / bins * 1e6
    print(
        json.dumps(
            {
                "recording": Path(path).name,
                "gpus": gpus,
                "bin_closes": len(wins),
                "window_entries_mean": round(sum(len(w) for w, _, _ in wins) / len(wins), 1),
                "live_scalar_us_per_gpu_bin": round(scalar_us, 1),
                "live_arrays_us_per_gpu_bin": round(arrays_us, 1),
                "arrays_over_scalar": round(arrays_us / scalar_us, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
