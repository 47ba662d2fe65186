"""Classifier accuracy on the labelled H100 recordings, in three modes; prints markdown.

Modes: GPM + stacks; GPM without stacks (same recordings, stacks ignored); NVML-only (a second
recorder ran with --no-gpm during seed 2). Per 0.5 s bin with a 1 s guard band at phase edges.
usage: python bench/accuracy.py
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from memtop.phases import classify
from memtop.score import score
from memtop.store import Recording

ROOT = Path(__file__).parent.parent
RECS = {
    0: ROOT / "tests/data/labelled_s0.memtop",
    1: ROOT / "memtop/data/demo.memtop",
    2: ROOT / "tests/data/labelled_s2.memtop",
    3: ROOT / "tests/data/labelled_s3.memtop",
    **{i: ROOT / f"tests/data/labelled_s{i}.memtop" for i in (4, 5, 6, 7, 8, 9, 10, 11, 12)},
}
NOGPM = ROOT / "tests/data/labelled_s2_nogpm.memtop"


def run(mode: str, paths: list[Path], **kw) -> None:
    scores = []
    conf: Counter = Counter()
    for p in paths:
        rec = Recording(p)
        c = classify(rec.frames(), **kw)
        s = score(c.labels[0], rec.markers(), bin_s=c.bin_s)
        scores.append(s)
        for k, v in s["confusion"].items():
            conf[k] += v
    print(f"\n### {mode} ({len(paths)} recording{'s' if len(paths) > 1 else ''})\n")
    print(
        "| recording | macro-F1 | accuracy | latency median / p90 (s) | flips/min (after detection) | false sync on neg. controls (s) | any false label on neg. controls (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for p, s in zip(paths, scores):
        print(
            f"| {p.name} | {s['macro_f1']:.3f} | {s['accuracy']:.3f} | {s['latency_median_s']} / {s['latency_p90_s']} "
            f"| {s['flips_per_min']} ({s['flips_after_detection_per_min']}) | {s['neg_false_sync_s']} | {s['neg_false_any_s']} |"
        )
    classes = sorted({c for s in scores for c in s["per_class"]})
    print("\n| class | precision | recall | F1 (mean over recordings) |\n|---|---:|---:|---:|")
    for c in classes:
        vals = [s["per_class"][c] for s in scores if c in s["per_class"]]
        print(
            f"| {c} | {statistics.mean(v['precision'] for v in vals):.3f} | "
            f"{statistics.mean(v['recall'] for v in vals):.3f} | {statistics.mean(v['f1'] for v in vals):.3f} |"
        )
    truths = sorted({k.split("->")[0] for k in conf})
    preds = sorted({k.split("->")[1] for k in conf})
    print("\nconfusion (bins; rows = truth, columns = label):\n")
    print("| truth \\ label | " + " | ".join(preds) + " |\n|---|" + "---:|" * len(preds))
    for t in truths:
        print(f"| {t} | " + " | ".join(str(conf.get(f"{t}->{p}", 0)) for p in preds) + " |")


if __name__ == "__main__":
    run("GPM + stacks", list(RECS.values()))
    run("GPM, no stacks", list(RECS.values()), use_stacks=False)
    run("NVML-only (GPM disabled)", [NOGPM])
