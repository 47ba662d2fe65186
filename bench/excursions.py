"""One-bin excursions on the tuning recordings, with the bins re-cut at offsets.

Every timestamp of a run (frames, GPU, host and stack samples, markers) moves by the same offset, so
the 0.5 s bins fall elsewhere across the same phases: more phase edges and more process-CPU samples
straddling a bin from the same runs. Prints, per set and mode, the summary at each offset and every
flip after detection (phase, the labels around it, the rule and the features that decided the bin).
usage: python bench/excursions.py [--set first train ...] [--offsets 0 0.1 0.2 0.3 0.4] [--list]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterator
from dataclasses import replace

import accuracy
from score import score

from memtop.analysis.phases import classify
from memtop.core.model import Frame
from memtop.storage.store import Recording

TUNING = ("first", "train", "heldout", "heldout2", "heldout3")


def shifted(frames: Iterator[Frame], d: float) -> Iterator[Frame]:
    for f in frames:
        yield replace(
            f,
            t=f.t + d,
            gpus=tuple(replace(g, t=g.t + d) for g in f.gpus),
            host=None if f.host is None else replace(f.host, t=f.host.t + d),
            stacks=tuple(replace(s, t=s.t + d) for s in f.stacks),
        )


def run(paths, mode: str, d: float, guard: float, show: bool) -> list[dict]:
    view, kw = accuracy.MODES[mode]
    out = []
    for p in paths:
        rec = Recording(p)
        ms = [replace(m, t0=m.t0 + d, t1=m.t1 + d) for m in accuracy.markers_of(rec, p)]
        c = classify(view(shifted(rec.frames(), d)), **kw)
        labs = c.labels[0]
        s = score(labs, ms, guard=guard, bin_s=c.bin_s)
        s["name"] = p.name
        out.append(s)
        if show and s["flips_after_detection_per_min"]:
            for m in ms:
                inside = [x for x in labs if m.t0 + guard <= x.t and x.t + c.bin_s <= m.t1 - guard]
                hit = next((x.t for x in labs if x.t >= m.t0 and x.t <= m.t1 and x.label == m.label), None)
                after = [x for x in inside if hit is not None and x.t >= hit]
                for a, b in zip(after, after[1:]):
                    if a.label != b.label:
                        f = b.features
                        print(
                            f"  {p.stem} +{d} {m.name}({m.label}) {a.label}->{b.label} raw={b.raw} "
                            f"rule={b.rule[:40]!r} g={f.graphics:.0f} sm={f.sm} util={f.util} "
                            f"dram={f.dram} pcie={100 * f.pcie_frac:.1f}% cpu={f.proc_cpu:.0f} "
                            f"wk={f.workers}/{f.worker_cpu:.0f} n={f.stack_n}"
                        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", nargs="*", default=list(TUNING), choices=list(accuracy.SETS))
    ap.add_argument("--mode", nargs="*", default=list(accuracy.MODES))
    ap.add_argument("--offsets", type=float, nargs="*", default=[0.0, 0.1, 0.2, 0.3, 0.4])
    ap.add_argument("--guard", type=float, default=0.5)
    ap.add_argument("--list", action="store_true", help="print every flip after detection")
    a = ap.parse_args()
    print("| set | mode | offset (s) | macro-F1 mean | median detection (s) | flips/min | false sync (s) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in a.set:
        for mode in a.mode:
            for d in a.offsets:
                ss = run(accuracy.SETS[name], mode, d, a.guard, a.list)
                lat = [s["latency_median_s"] for s in ss if s["latency_median_s"] is not None]
                print(
                    f"| {name} | {mode.split(' (')[0]} | {d} "
                    f"| {statistics.mean(s['macro_f1'] for s in ss):.3f} "
                    f"| {statistics.median(lat):.2f} "
                    f"| {statistics.mean(s['flips_after_detection_per_min'] for s in ss):.3f} "
                    f"| {sum(s['neg_false_sync_s'] for s in ss)} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
