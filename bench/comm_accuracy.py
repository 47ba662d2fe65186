"""`comm` and straggler accuracy on labelled multi-GPU recordings (bench/workloads/ddp_corpus.sh).

Each GPU is scored against its own rank's markers (a marker's facts name its GPU by uuid, else by
local rank): `comm` one-vs-rest per bin (the waiting ranks' truth), and the straggler flag per bin
and GPU (truth: that GPU's rank was the late one in that phase; flagged: memtop.analysis.straggler, run on
the labels as they stood at that bin, as the live pipeline does). Guard bands at each phase edge
as in bench/accuracy.py; F1 pooled over every GPU and bin of the set. Also the bandwidth sub-tag's
share of comm bins in the comm_bandwidth phases, and the macro-F1 over all classes (bench/score.py).
usage: python bench/comm_accuracy.py RUN.memtop ... [--guard 0.5 1.0] [--window S] [--no-stacks]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from score import score, truth_of

from memtop.analysis.phases import Classifier, Label
from memtop.analysis.straggler import WINDOW_S, stragglers
from memtop.core.model import Frame, Marker
from memtop.storage.store import Recording


def gpu_markers(rec: Recording) -> dict[int, list[Marker]]:
    """GPU index -> the markers its rank wrote. torch's uuid lacks NVML's "GPU-" prefix."""
    by_uuid = {str(g.get("uuid", "")).removeprefix("GPU-"): g["index"] for g in rec.meta.get("gpus", [])}
    out: dict[int, list[Marker]] = {}
    for m in rec.markers():
        facts = json.loads(m.facts or "{}")
        gpu = by_uuid.get(str(facts.get("uuid", "")).removeprefix("GPU-"), facts.get("local_rank"))
        if isinstance(gpu, int):
            out.setdefault(gpu, []).append(m)
    return out


def replay(
    frames: Iterable[Frame], windows: tuple[float, ...] = (WINDOW_S,), use_stacks: bool = True
) -> tuple[Classifier, dict[float, dict[int, set[float]]]]:
    """Labels per GPU, and per straggler window the bins at which each GPU was flagged."""
    c = Classifier(use_stacks=use_stacks)
    flagged: dict[float, dict[int, set[float]]] = {w: {} for w in windows}
    seen: dict[int, int] = {}

    def check() -> None:
        counts = {g: len(ls) for g, ls in c.labels.items()}
        if counts != seen:
            seen.update(counts)
            for w in windows:
                for s in stragglers(c.labels, c.jobs, w):
                    flagged[w].setdefault(s.gpu, set()).add(c.labels[s.gpu][-1].t)

    for f in frames:
        c.feed(f)
        check()
    c.flush()
    check()
    return c, flagged


def _f1(tp: int, fp: int, fn: int) -> float:
    return round(2 * tp / (2 * tp + fp + fn), 3) if tp else 0.0


def score_file(path: Path, guards: list[float], window_s: float, use_stacks: bool = True) -> dict:
    rec = Recording(path)
    replayed = replay(rec.frames(), (window_s,), use_stacks)
    return score_run(path.name, rec.frames(), gpu_markers(rec), guards, window_s, replayed)


def score_run(
    name: str,
    frames: Iterable[Frame],
    marks: dict[int, list[Marker]],
    guards: list[float],
    window_s: float,
    replayed: tuple[Classifier, dict[float, dict[int, set[float]]]] | None = None,
) -> dict:
    c, by_window = replayed or replay(frames, (window_s,))
    flagged = by_window[window_s]
    out: dict = {"name": name, "gpus": sorted(marks)}
    for guard in guards:
        comm, strag = Counter(), Counter()
        sub_bw = sub_n = 0
        macro = []
        for gpu, ms in marks.items():
            labels: list[Label] = c.labels.get(gpu, [])
            macro.append(score(labels, ms, guard=guard, bin_s=c.bin_s)["macro_f1"])
            for lab in labels:
                m = truth_of(ms, lab.t, c.bin_s, guard)
                if m is None:
                    continue
                comm[(m.label == "comm", lab.label == "comm")] += 1
                truth_late = bool(json.loads(m.facts or "{}").get("straggler"))
                strag[(truth_late, lab.t in flagged.get(gpu, ()))] += 1
                if m.name == "comm_bandwidth" and lab.label == "comm":
                    sub_n += 1
                    sub_bw += lab.raw == "comm" and lab.sub == "bandwidth"
        out[guard] = {
            "comm": comm,
            "straggler": strag,
            "macro_f1": round(statistics.mean(macro), 3) if macro else 0.0,
            "bandwidth_sub": (sub_bw, sub_n),
        }
    return out


def pooled(results: list[dict], guard: float, key: str) -> tuple[float, int, int, int]:
    tot: Counter = Counter()
    for r in results:
        tot.update(r[guard][key])
    tp, fp, fn = tot[(True, True)], tot[(False, True)], tot[(True, False)]
    return _f1(tp, fp, fn), tp, fp, fn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--guard", type=float, nargs="*", default=[0.5, 1.0])
    ap.add_argument("--window", type=float, default=WINDOW_S, help="straggler window, seconds")
    ap.add_argument(
        "--no-stacks", action="store_true", help="drop the stacks on read (a container without ptrace)"
    )
    a = ap.parse_args()
    results = [score_file(p, a.guard, a.window, not a.no_stacks) for p in a.files]
    print("| recording | guard (s) | comm F1 | straggler F1 | macro-F1 (all classes) | bandwidth sub-tag |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        for g in a.guard:
            d = r[g]
            cf = pooled([r], g, "comm")[0]
            sf = pooled([r], g, "straggler")[0]
            bw, n = d["bandwidth_sub"]
            print(f"| {r['name']} | {g} | {cf:.3f} | {sf:.3f} | {d['macro_f1']:.3f} | {bw}/{n} |")
    for g in a.guard:
        cf, ctp, cfp, cfn = pooled(results, g, "comm")
        sf, stp, sfp, sfn = pooled(results, g, "straggler")
        print(
            f"| **all ({len(results)})** | {g} | **{cf:.3f}** (tp {ctp} fp {cfp} fn {cfn}) "
            f"| **{sf:.3f}** (tp {stp} fp {sfp} fn {sfn}) | | |"
        )


if __name__ == "__main__":
    main()
