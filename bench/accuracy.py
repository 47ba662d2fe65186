"""Classifier accuracy on the labelled H100 recordings, every evidence mode from the same files.

Modes: GPM + stacks; NVML-only (GPM fields dropped on read); GPM without stacks (stacks ignored);
neither (an older GPU in a container without ptrace).
Sets: the first corpus (one synthetic PyTorch workload, 13 seeds), the framework corpus the rules
were tuned on (train_*), the held-out runs recorded after the rules froze at d4b2494 (heldout_*,
spent: the rules were tuned again after they were scored), and the held-out runs recorded after the
second freeze (heldout2_*, spent: looked at for the third round's error classes), and those recorded
after the third freeze (heldout3_*; no stacks: py-spy was not on PATH) and again with stacks
(heldout4_*), and those recorded after the fifth freeze (heldout5_*) and the sixth (heldout6_*, and again
with the defaults: heldout7_*), and the runs declared for the eighth freeze (heldout8_*, named in
HELDOUT8 before they were recorded), each scored apart. Guard bands 0.5 s (the target) and 1 s.
Prints markdown.
usage: python bench/accuracy.py [--guard 0.5 1.0] [--set first train ... heldout8] [--checked]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from score import score

from memtop.analysis.phases import Label, classify
from memtop.core.model import Frame, Marker
from memtop.storage.store import Recording

ROOT = Path(__file__).parent.parent
DATA = ROOT / "tests/data"
# The eighth held-out round, named before it was recorded (bench/workloads/corpus.sh NAME:SCRIPT:SEED:SCALE):
# torch_fw 0.78 and 1.17, cupy_fw 0.97, shared_gpu 1.07, jax_fw 1.12 -- seeds and sizes never used
HELDOUT8 = (
    "heldout8_torch_s91",
    "heldout8_cupy_s92",
    "heldout8_shared_s93",
    "heldout8_jax_s94",
    "heldout8_torch_s95",
)
# Issue #35: input pipelines that are not torch's DataLoader (bench/workloads/pipe_fw.py). The rules
# were developed on PIPE_DEV (recorded first) and frozen; HELDOUT9 was named before it was recorded
# (bench/RESULTS.md, "ninth freeze"): seeds and scales never used.
PIPE_DEV = ("dev_pipe_s1", "dev_pipe_s2")
HELDOUT9 = ("heldout9_pipe_s111", "heldout9_pipe_s112", "heldout9_pipe_s113")
SETS = {
    "first": [ROOT / "memtop/data/demo.memtop", *sorted(DATA.glob("labelled_s*[0-9].memtop"))],
    "train": sorted(DATA.glob("train_*.memtop")),
    "heldout": sorted(DATA.glob("heldout_*.memtop")),
    "heldout2": sorted(DATA.glob("heldout2_*.memtop")),
    "heldout3": sorted(DATA.glob("heldout3_*.memtop")),
    # the same frozen rules (c800a45), recorded again with py-spy on PATH: the stack modes
    "heldout4": sorted(DATA.glob("heldout4_*.memtop")),
    # recorded after the fifth freeze (branch accuracy5), with stacks and the sparse native dumps
    "heldout5": sorted(DATA.glob("heldout5_*.memtop")),
    # recorded after the sixth freeze (branch accuracy6: one-bin excursions held)
    "heldout6": sorted(DATA.glob("heldout6_*.memtop")),
    "heldout7": sorted(DATA.glob("heldout7_*.memtop")),
    # declared before recording, rules frozen at the eighth freeze (bench/RESULTS.md): only these count
    "heldout8": [p for n in HELDOUT8 if (p := DATA / f"{n}.memtop").exists()],
    "pipe_dev": [p for n in PIPE_DEV if (p := DATA / f"{n}.memtop").exists()],
    "heldout9": [p for n in HELDOUT9 if (p := DATA / f"{n}.memtop").exists()],
}
# Training phases whose construction missed its label, judged from the workload's own facts (GPU
# work per step against CPU work per step), not from memtop's output: relabelled, or dropped where
# the bottleneck was not established. The workloads were fixed before the held-out runs.
RELABEL: dict[str, tuple[str | None, str]] = {
    "compile_sync": ("cpu", "8 tiny compiled calls (~0.3 ms GPU) per 3 ms of Python: CPU-bound"),
    "jax_float_loss": ("cpu", "train step ~0.4 ms on the GPU per 4 ms of Python: CPU-bound"),
    "jax_device_get": ("cpu", "train step ~0.4 ms on the GPU per 3 ms of Python: CPU-bound"),
    "shared_sync": ("cpu", "12 small products (~0.4 ms GPU) per 4 ms of Python in each process"),
    "neg_tv_busy_workers": (None, "resnet50 did not saturate the GPU (workers too slow): truth unknown"),
}


# Held-out phases whose construction missed its label by the workload's own numbers (noted after
# scoring; the rules were not changed). Left out only with --checked, a second figure beside the raw one.
HELDOUT_UNSOUND = {
    "neg_tv_busy_workers": "resnet50 at bs 499 took 19 steps in 6.6 s: the GPU was not saturated",
    "hf_compute": "212M-parameter Trainer made 20 steps in 2.8 s: Python-bound, not compute-bound",
    "light_compute": "46 Lightning steps in 3 s with the process at 100 % CPU: not compute-bound",
    "shared_sync": "two processes syncing in turn kept the GPU ~90 % busy: compute-bound, not a stall",
}
CHECKED = False


# For heldout2 and heldout3 the check is declared before recording (committed with the rules' second freeze):
# a phase is sound when the driver's own NVML util (not memtop's rules) and the workload's own
# wait fraction agree with its label. Median NVML util over the guard-trimmed phase:
SOUND_UTIL = {"compute": (80, 101), "memory": (80, 101), "sync": (15, 80), "cpu": (0, 80), "input": (0, 80)}
SOUND_WAIT_FRAC = 0.1  # a sync phase's loop waits in its sync call at least this share of its time


def unsound(rec: Recording, m: Marker, guard: float = 0.5) -> str | None:
    """Why a phase did not make its bottleneck by the pre-declared check, or None."""
    lo, hi = SOUND_UTIL.get(m.label, (0, 101))
    utils = [
        g.util
        for f in rec.frames(m.t0 + guard, m.t1 - guard)
        for g in f.gpus
        if g.util is not None and m.t0 + guard <= f.t <= m.t1 - guard
    ]
    if utils:
        u = statistics.median(utils)
        if not lo <= u < hi:
            return f"NVML util {u:.0f} % outside {lo}-{hi} % for {m.label}"
    try:
        wf = json.loads(m.facts or "{}").get("wait_frac")
    except (ValueError, AttributeError):
        wf = None
    if m.label == "sync" and wf is not None and wf < SOUND_WAIT_FRAC:
        return f"the loop waited {100 * wf:.1f} % of its time (< {100 * SOUND_WAIT_FRAC:.0f} %)"
    return None


# the training runs recorded before the workloads were fixed (b932853): RELABEL applies to them only
RELABELLED = ("train_torch_s1", "train_torch_s2", "train_jax_s1", "train_shared_s1", "train_cupy_s1")
# A training phase that missed its label by the workload's own numbers, left out (the workload was
# changed before the fifth freeze and validated on train_cupy_s51)
TRAIN_UNSOUND = {
    (
        "train_cupy_s50",
        "cupy_memory",
    ): "cp.add moved 1.64 TB/s, half the H100's DRAM bandwidth (GPM DRAM 50 %)",
}


def markers_of(rec: Recording, path: Path) -> list[Marker]:
    ms = rec.markers()
    if path.name.startswith("heldout_") and CHECKED:
        return [m for m in ms if m.name not in HELDOUT_UNSOUND]
    if (
        path.name.startswith(
            ("heldout2_", "heldout3_", "heldout4_", "heldout5_", "heldout6_", "heldout7_", "heldout8_")
        )
        and CHECKED
    ):
        return [m for m in ms if unsound(rec, m) is None]
    if path.stem not in RELABELLED:
        return [m for m in ms if (path.stem, m.name) not in TRAIN_UNSOUND]
    out = []
    for m in ms:
        new = RELABEL.get(m.name, (m.label, ""))[0]
        if new is not None:
            out.append(replace(m, label=new))
    return out


def nvml_only(frames: Iterator[Frame]) -> Iterator[Frame]:
    """The same run as an NVML-only recorder sees it: GPM fields dropped."""
    for f in frames:
        yield replace(
            f,
            gpus=tuple(
                replace(g, mode="nvml", graphics=None, sm=None, occupancy=None, tensor=None, dram=None)
                if g.mode == "gpm"
                else g
                for g in f.gpus
            ),
        )


MODES = {
    "GPM + stacks": (lambda fr: fr, {}),
    "NVML-only (GPM dropped on read)": (nvml_only, {}),
    "GPM, no stacks (stacks dropped on read)": (lambda fr: fr, {"use_stacks": False}),
    "NVML-only, no stacks (both dropped on read)": (nvml_only, {"use_stacks": False}),
}


def labelled(path: Path, modes: Iterable[str] = MODES) -> dict[str, tuple[list[Label], float]]:
    """Each mode's labels of one recording and their bin width, from one read of its frames (reading
    them costs several times one mode's classifying)."""
    frames = list(Recording(path).frames())
    out = {}
    for mode in modes:
        view, kw = MODES[mode]
        c = classify(view(iter(frames)), **kw)
        out[mode] = (c.labels[0], c.bin_s)
    return out


def score_labels(path: Path, labels: list[Label], bin_s: float, guard: float) -> dict:
    """Labels of the recording ``path`` scored against its markers (``markers_of``)."""
    s = score(labels, markers_of(Recording(path), path), guard=guard, bin_s=bin_s)
    s["name"] = path.name
    return s


def scores(paths: list[Path], mode: str, guard: float) -> list[dict]:
    return [score_labels(p, *labelled(p, (mode,))[mode], guard) for p in paths]


def summary(ss: list[dict]) -> dict:
    lat = [s["latency_median_s"] for s in ss if s["latency_median_s"] is not None]
    return {
        "macro_f1_mean": round(statistics.mean(s["macro_f1"] for s in ss), 3),
        "macro_f1_min": min(s["macro_f1"] for s in ss),
        "latency_median_s": round(statistics.median(lat), 2) if lat else None,
        "flips_after_detection_per_min": round(
            statistics.mean(s["flips_after_detection_per_min"] for s in ss), 2
        ),
        "neg_false_sync_s": sum(s["neg_false_sync_s"] for s in ss),
        "neg_false_input_s": sum(s["neg_false_input_s"] for s in ss),
    }


def table(title: str, ss: list[dict]) -> None:
    print(f"\n#### {title}\n")
    print(
        "| recording | macro-F1 | accuracy | latency median / p90 (s) | missed | flips/min after detection | false sync on neg. (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in ss:
        print(
            f"| {s['name']} | {s['macro_f1']:.3f} | {s['accuracy']:.3f} | {s['latency_median_s']} / {s['latency_p90_s']} "
            f"| {s['missed_phases']} | {s['flips_after_detection_per_min']} | {s['neg_false_sync_s']} |"
        )
    conf: Counter = Counter()
    for s in ss:
        conf.update(s["confusion"])
    truths = sorted({k.split("->")[0] for k in conf})
    preds = sorted({k.split("->")[1] for k in conf})
    print("\nconfusion (bins; rows = truth, columns = label):\n")
    print("| truth \\ label | " + " | ".join(preds) + " |\n|---|" + "---:|" * len(preds))
    for t in truths:
        print(f"| {t} | " + " | ".join(str(conf.get(f"{t}->{p}", 0)) for p in preds) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--guard", type=float, nargs="*", default=[0.5, 1.0])
    ap.add_argument("--set", nargs="*", default=list(SETS), choices=list(SETS))
    ap.add_argument("--detail", action="store_true", help="per-recording tables and confusion matrices")
    ap.add_argument(
        "--checked",
        action="store_true",
        help="leave out HELDOUT_UNSOUND phases (heldout) and phases failing the declared check (heldout2-8)",
    )
    ap.add_argument(
        "--soundness", action="store_true", help="list heldout2-8 phases failing the declared check"
    )
    a = ap.parse_args()
    global CHECKED
    CHECKED = a.checked
    if a.soundness:
        for p in [
            p
            for n in ("heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8")
            for p in SETS[n]
        ]:
            rec = Recording(p)
            for m in rec.markers():
                why = unsound(rec, m)
                if why:
                    print(f"- {p.name} {m.name} ({m.label}): {why}; facts {m.facts}")
        return
    print(
        "| set | mode | guard (s) | macro-F1 mean (min) | median detection (s) | flips/min after detection "
        "| false sync on neg. controls (s) | false input on neg. controls (s) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    detail = []
    for name in a.set:
        if not SETS[name]:
            continue
        for mode in MODES:
            for g in a.guard:
                ss = scores(SETS[name], mode, g)
                m = summary(ss)
                print(
                    f"| {name} ({len(ss)}) | {mode} | {g} | {m['macro_f1_mean']:.3f} ({m['macro_f1_min']:.3f}) "
                    f"| {m['latency_median_s']} | {m['flips_after_detection_per_min']} | {m['neg_false_sync_s']} "
                    f"| {m['neg_false_input_s']} |"
                )
                if a.detail and g == a.guard[0]:
                    detail.append((f"{name}, {mode}, guard {g} s", ss))
    for title, ss in detail:
        table(title, ss)


if __name__ == "__main__":
    main()
