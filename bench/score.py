"""Score classifier labels against ground-truth markers of a labelled recording.

Per bin, outside a guard band at each phase edge (GUARD_S, the stated target). Macro-F1 averages
over every class that was true *or* predicted (a label never true scores 0), and detection latency
counts every phase, those whose label equals the previous phase's included; a phase never detected
counts as its whole length.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from memtop.analysis.phases import Label
from memtop.core.model import Marker


def truth_of(markers: list[Marker], t: float, width: float, guard: float) -> Marker | None:
    """The marker whose guard-trimmed span holds the bin [t, t+width]."""
    for m in markers:
        if m.t0 + guard <= t and t + width <= m.t1 - guard:
            return m
    return None


GUARD_S = 0.5


def score(labels: list[Label], markers: list[Marker], guard: float = GUARD_S, bin_s: float = 1.0) -> dict:
    pairs: list[tuple[str, str, Marker]] = []
    for lab in labels:
        m = truth_of(markers, lab.t, bin_s, guard)
        if m is not None:
            pairs.append((m.label, lab.label, m))
    classes = sorted({p[0] for p in pairs} | {p[1] for p in pairs})
    conf = Counter((a, b) for a, b, _ in pairs)
    per = {}
    for c in classes:
        tp = conf[(c, c)]
        fp = sum(v for (a, b), v in conf.items() if b == c and a != c)
        fn = sum(v for (a, b), v in conf.items() if a == c and b != c)
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn) if tp + fn else 0.0
        per[c] = {
            "precision": round(p, 3),
            "recall": round(r, 3),
            "f1": round(2 * p * r / (p + r), 3) if p + r else 0.0,
            "support": tp + fn,
        }
    lat = []
    detected: dict[int, float] = {}  # marker -> when its label first showed
    for k, m in enumerate(markers):
        hit = next(
            (
                lab
                for lab in labels
                if lab.t >= m.t0 and lab.t + bin_s <= m.t1 + bin_s and lab.label == m.label
            ),
            None,
        )
        if hit is not None:
            detected[k] = hit.t
        if m.name != "idle":
            lat.append(min(hit.t + bin_s, m.t1) - m.t0 if hit is not None else m.t1 - m.t0)
    # flips inside each phase past the guard band; and, apart from detection latency (a late first
    # correct label is one change inside the band), only after the phase's label first showed
    flips = steady_s = flips_after = after_s = 0.0
    for k, m in enumerate(markers):
        inside = [
            (lab.t, lab.label) for lab in labels if m.t0 + guard <= lab.t and lab.t + bin_s <= m.t1 - guard
        ]
        flips += sum(a[1] != b[1] for a, b in zip(inside, inside[1:]))
        steady_s += len(inside) * bin_s
        after = [x for x in inside if x[0] >= detected.get(k, -math.inf)]
        flips_after += sum(a[1] != b[1] for a, b in zip(after, after[1:]))
        after_s += len(after) * bin_s
    neg = [(a, b, m) for a, b, m in pairs if m.name.startswith("neg_")]
    return {
        "bins": len(pairs),
        "accuracy": round(sum(a == b for a, b, _ in pairs) / len(pairs), 3) if pairs else 0.0,
        "macro_f1": round(statistics.mean(v["f1"] for v in per.values()), 3) if per else 0.0,
        "per_class": per,
        "confusion": {f"{a}->{b}": v for (a, b), v in sorted(conf.items())},
        "classes": classes,
        "latency_median_s": round(statistics.median(lat), 2) if lat else None,
        "latency_p90_s": round(sorted(lat)[max(0, int(0.9 * len(lat)) - 1)], 2) if lat else None,
        "guard_s": guard,
        "missed_phases": sum(1 for k, m in enumerate(markers) if m.name != "idle" and k not in detected),
        "flips_per_min": round(60 * flips / steady_s, 2) if steady_s else 0.0,
        "flips_after_detection_per_min": round(60 * flips_after / after_s, 2) if after_s else 0.0,
        "neg_false_sync_s": sum(bin_s for _, b, _ in neg if b == "sync"),
        "neg_false_input_s": sum(bin_s for _, b, _ in neg if b == "input"),
        "neg_false_any_s": sum(bin_s for a, b, _ in neg if a != b),
    }
