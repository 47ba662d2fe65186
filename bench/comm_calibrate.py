"""Calibrate the `comm` rule's GPU pattern and the straggler window on TRAINING multi-GPU recordings.

Prints, per ground-truth label, the quantiles of the features the rule reads (graphics, SM, tensor,
DRAM, NVLink and PCIe as fractions of peak and link), then comm and straggler F1 (0.5 s guard,
pooled) over a grid of the thresholds in memtop/analysis/phases.py (COMM_*) and of straggler windows. Never
run it on held-out recordings: they are scored once, after the rules are frozen, by comm_accuracy.py.
usage: python bench/comm_calibrate.py train_ddp_*.memtop
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from pathlib import Path

from comm_accuracy import gpu_markers, pooled, replay, score_run
from score import truth_of

from memtop.analysis import phases
from memtop.storage.store import Recording

GRID = {
    "COMM_GRAPHICS_MIN": (60.0, 70.0, 80.0),
    "COMM_SM_MAX": (20.0, 30.0, 40.0),
    "COMM_TENSOR_MAX": (5.0, 10.0, 20.0),
    "COMM_DRAM_MAX": (10.0, 20.0),
}
WINDOWS = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
FEATURES = ("graphics", "sm", "tensor", "dram", "nvlink_frac", "pcie_frac", "power_w")


def quantiles(xs: list[float]) -> str:
    if not xs:
        return "-"
    q = statistics.quantiles(xs, n=10) if len(xs) > 1 else [xs[0]] * 9
    return f"{min(xs):.3g} / {q[0]:.3g} / {statistics.median(xs):.3g} / {q[-1]:.3g} / {max(xs):.3g}"


def main() -> None:
    runs = []
    for p in map(Path, sys.argv[1:]):
        rec = Recording(p)
        runs.append((p.name, list(rec.frames()), gpu_markers(rec)))
    # features by truth (guard 0.5 s), under today's rules
    by: dict[str, dict[str, list[float]]] = {}
    for _, frames, marks in runs:
        c, _ = replay(frames)
        for gpu, ms in marks.items():
            for f in c.features.get(gpu, []):
                m = truth_of(ms, f.t, c.bin_s, 0.5)
                if m is None:
                    continue
                key = f"{m.label} ({m.name})"
                for k in FEATURES:
                    v = getattr(f, k)
                    if v is not None:
                        by.setdefault(key, {}).setdefault(k, []).append(float(v))
    print("feature quantiles (min / p10 / median / p90 / max) by truth (phase):\n")
    print("| truth | bins | " + " | ".join(FEATURES) + " |\n|---|---:|" + "---|" * len(FEATURES))
    for key in sorted(by):
        d = by[key]
        print(
            f"| {key} | {len(d['graphics'])} | "
            + " | ".join(quantiles(d.get(k, [])) for k in FEATURES)
            + " |"
        )
    print("\ngrid (guard 0.5 s, pooled over the training runs):\n")
    print("| " + " | ".join(GRID) + " | window (s) | comm F1 | straggler F1 |\n|" + "---:|" * (len(GRID) + 3))
    saved = {k: getattr(phases, k) for k in GRID}
    rows = []
    for combo in itertools.product(*GRID.values()):
        for k, v in zip(GRID, combo):
            setattr(phases, k, v)
        replayed = [replay(fr, WINDOWS) for _, fr, _ in runs]
        for w in WINDOWS:
            res = [score_run(n, fr, mk, [0.5], w, rp) for (n, fr, mk), rp in zip(runs, replayed)]
            rows.append((combo, w, pooled(res, 0.5, "comm")[0], pooled(res, 0.5, "straggler")[0]))
    for k, v in saved.items():
        setattr(phases, k, v)
    for combo, w, cf, sf in sorted(rows, key=lambda r: (-r[2] - r[3], r[0])):
        print("| " + " | ".join(f"{v:g}" for v in combo) + f" | {w:g} | {cf:.3f} | {sf:.3f} |")
    print("\ntoday's:", json.dumps(saved))


if __name__ == "__main__":
    main()
