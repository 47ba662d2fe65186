"""Live mode's classifier on N GPUs, this tree's ``phases`` against another checkout's, in one process:
the other checkout's ``memtop/analysis/phases.py`` is loaded beside this one (the rest of memtop is
this tree's: only for comparing a change to phases.py), and ``Classifier.feed`` of the same Frames
(a recording made N GPUs wide by tests/multigpu.py; the gaps read once a second, as live mode's
paint tick reads them) is timed alternately, CPU time of this thread
per second of recording; the least of ROUNDS each (which runs first alternating), and their ratio.
Given this tree as BEFORE_CHECKOUT it times the same code twice: the noise of the measure.

usage: python bench/feed_inproc.py BEFORE_CHECKOUT [RECORDING] [GPUS] [ROUNDS]   (one JSON line)
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from multigpu import multi_gpu

    from memtop.analysis import phases
    from memtop.storage.store import Recording

    a = sys.argv[1:]
    spec = importlib.util.spec_from_file_location("phases_before", Path(a[0]) / "memtop/analysis/phases.py")
    assert spec is not None and spec.loader is not None
    before = importlib.util.module_from_spec(spec)
    sys.modules["phases_before"] = before  # (its dataclasses look their module up)
    spec.loader.exec_module(before)
    path = a[1] if len(a) > 1 else str(HERE.parent / "tests/data/labelled_s10.memtop")
    gpus = int(a[2]) if len(a) > 2 else 8
    rounds = int(a[3]) if len(a) > 3 else 15
    frames = multi_gpu(list(Recording(path).frames()), gpus)
    seconds = frames[-1].t - frames[0].t
    got: dict[str, list[float]] = {"after": [], "before": []}
    out = {}
    for r in range(rounds):
        order = (("after", phases), ("before", before))
        for key, mod in order if r % 2 else order[::-1]:  # each first every other round
            clf = mod.Classifier(max_bins=240)  # live mode keeps a bounded history
            c0 = time.thread_time()
            tick = frames[0].t + 1.0
            for f in frames:
                clf.feed(f)
                if f.t >= tick:  # the paint tick reads the gaps
                    clf.gaps[-50:]
                    tick += 1.0
            got[key].append((time.thread_time() - c0) / seconds * 1e3)
            clf.flush()  # (the newest bin's gaps: live mode finds them as it closes)
            out[key] = (clf.gaps, [(x.t, x.label, x.raw) for ls in clf.labels.values() for x in ls])
    assert repr(out["after"]) == repr(out["before"])  # the same gaps and labels
    mins = {k: round(min(v), 3) for k, v in got.items()}
    pairs = sorted(x / y for x, y in zip(got["after"], got["before"], strict=True))
    print(
        json.dumps(
            {
                "recording": Path(path).name,
                "gpus": gpus,
                "rounds": rounds,
                "feed_ms_per_s_min": mins,
                "ratio_of_mins": round(mins["after"] / mins["before"], 3),
                "ratio_per_round_median": round(pairs[len(pairs) // 2], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
