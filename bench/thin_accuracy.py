"""The classifier's accuracy when the live sampler reads the GPU or the stacks less often (issue #39).

A recording's Frames thinned offline to what a slower sampler would have handed the classifier:
``--gpu-every K`` keeps every K-th GPU reading (the others' Frames repeat the last kept one, as the
sampler's Frames repeat a GPU's latest sample between its readings: GPM at 10/K Hz, each kept figure
the mean over the readings it spans, as GPM's counters give it); ``--sat-s S`` reads a saturated GPU
every S seconds (GpuSample.saturated; a variant measured and not used); ``--stack-every K``
keeps every K-th stack sample of each process (py-spy dumps K times rarer, the fast pace while the
stacks decide included). Scored as bench/accuracy.py scores (its sets, markers and score), mode GPM +
stacks (the live view's defaults); ``--sparse`` adds the live sampler's sparse dumps (a process whose
GPUs are all saturated, by GpuSample.saturated on the kept readings, keeps one stack sample
per collectors.stacks.SPARSE_S); ``--settled`` ends the fast pace where the live sampler does
(live.sampler.SyncWindow on the kept samples: a dump under FAST_S after the last kept one of its process,
the recording's fast pace, is dropped while that process's stacks are settled). Rules are never tuned
on what this prints.
usage: python bench/thin_accuracy.py [--set heldout8 heldout9] [--guard 0.5 1.0] [--gpu-every 1 2]
           [--stack-every 1 2] [--sparse 0 1] [--settled 0 1]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import replace

from accuracy import SETS, score_labels
from memtop.collectors.stacks import SPARSE_S

from memtop.analysis.phases import STACK_WINDOW_S, SYNC_SHARE, classify
from memtop.core.metrics import GPM_METRICS
from memtop.core.model import Frame, GpuSample, StackSample
from memtop.live.sampler import SyncWindow
from memtop.storage.store import Recording

KEPT = {"gpu": 0, "stack": 0}
DROPPED = {"gpu": 0, "stack": 0}
# a recording's dumps closer than this are its fast pace (0.25 s, jittered +-30 %; the normal pace 0.5 s)
FAST_S = 0.375


def on_saturated(gpus: Iterable[GpuSample], f: Frame) -> set[int]:
    """The pids whose GPUs are all saturated, and their workers (as the sampler's _on_saturated)."""
    by_pid: dict[int, list[bool]] = {}
    for g in gpus:
        for p in g.processes:
            by_pid.setdefault(p.pid, []).append(g.saturated)
    roots = {pid for pid, sat in by_pid.items() if all(sat)}
    workers = {p.pid for p in f.host.procs if p.worker_of in roots} if f.host is not None else set()
    return roots | workers


def spanned(gs: list[GpuSample]) -> GpuSample:
    """The last reading, its GPM figures the mean of the readings it spans: GPM gives the counters'
    change between two of its samples, so a slower reader's figure covers its whole interval."""
    vals = {}
    for m in GPM_METRICS:
        xs = [v for g in gs if (v := getattr(g, m.name)) is not None]
        vals[m.name] = sum(xs) / len(xs) if xs else None
    return gs[-1].with_values(vals) if gs[-1].mode == "gpm" else gs[-1]


def thinned(
    frames: Iterable[Frame],
    gpu_every: int,
    stack_every: int,
    sparse: bool = False,
    sat_s: float = 0.0,
    settled: bool = False,
) -> Iterator[Frame]:
    kept_gpu: dict[int, GpuSample] = {}
    gpu_seen: dict[int, tuple[float, int]] = {}  # GPU index -> (newest reading's t, distinct readings seen)
    kept_stack: dict[int, StackSample] = {}
    stack_seen: dict[int, tuple[float, int]] = {}  # pid -> (newest sample's t, distinct samples seen)
    last_stacks: tuple[StackSample, ...] = ()
    between: dict[int, list[GpuSample]] = {}  # GPU index -> its readings since the last one kept
    sync = SyncWindow(STACK_WINDOW_S, SYNC_SHARE)
    for f in frames:
        gpus = []
        for g in f.gpus:
            prev = kept_gpu.get(g.index)
            t, n = gpu_seen.get(g.index, (float("nan"), 0))
            if g.t != t:
                gpu_seen[g.index] = (g.t, n + 1)
                between.setdefault(g.index, []).append(g)
                slow = sat_s > 0 and prev is not None and prev.saturated and g.t - prev.t < sat_s - 0.05
                if n % gpu_every == 0 and not slow:
                    kept_gpu[g.index] = spanned(between.pop(g.index))
                    KEPT["gpu"] += 1
                DROPPED["gpu"] += 0 if g.index not in between else 1
            gpus.append(kept_gpu.get(g.index, g))
        slow = on_saturated(gpus, f) if sparse else set()
        for s in f.stacks:
            t, n = stack_seen.get(s.pid, (float("nan"), 0))
            if s.t != t:
                stack_seen[s.pid] = (s.t, n + 1)
                last = kept_stack.get(s.pid)
                calm = settled and last is not None and s.t - last.t < FAST_S and sync.settled(s.pid, s.t)
                if (
                    n % stack_every == 0
                    and (s.pid not in slow or last is None or s.t - last.t >= SPARSE_S)
                    and not calm
                ):
                    kept_stack[s.pid] = s
                    sync.add(s)
                    KEPT["stack"] += 1
                else:
                    DROPPED["stack"] += 1
        stacks = tuple(kept_stack[s.pid] for s in f.stacks if s.pid in kept_stack)
        if stacks == last_stacks:
            stacks = last_stacks  # the same tuple: the classifier reads a repeat as nothing new
        last_stacks = stacks
        yield replace(f, gpus=tuple(gpus), stacks=stacks)


def share(kind: str) -> str:
    n = KEPT[kind] + DROPPED[kind]
    return f"{KEPT[kind]}/{n}" if n else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", nargs="*", default=["heldout8", "heldout9"], choices=list(SETS))
    ap.add_argument("--guard", type=float, nargs="*", default=[0.5, 1.0])
    ap.add_argument("--gpu-every", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--stack-every", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--sparse", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--settled", type=int, nargs="*", default=[0, 1])
    ap.add_argument(
        "--sat-s", type=float, nargs="*", default=[0.0], help="GPU interval while saturated (0: as others)"
    )
    a = ap.parse_args()
    print(
        "| set | GPU every | stacks every | sparse | settled | saturated GPU s | guard (s) | macro-F1 mean (min) "
        "| median detection (s) | GPU readings kept | stack samples kept |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in a.set:
        frames = {p: list(Recording(p).frames()) for p in SETS[name]}
        for ge, se, sp, st, ss_ in itertools.product(
            a.gpu_every, a.stack_every, a.sparse, a.settled, a.sat_s
        ):
            labs = {}
            for k in KEPT:
                KEPT[k] = DROPPED[k] = 0
            for p, fr in frames.items():
                c = classify(thinned(fr, ge, se, bool(sp), ss_, bool(st)))
                labs[p] = (c.labels[0], c.bin_s)
            for g in a.guard:
                ss = [score_labels(p, *labs[p], g) for p in frames]
                f1 = [s["macro_f1"] for s in ss]
                lat = [s["latency_median_s"] for s in ss if s["latency_median_s"] is not None]
                print(
                    f"| {name} ({len(ss)}) | {ge} | {se} | {sp} | {st} | {ss_} | {g} | {statistics.mean(f1):.3f} "
                    f"({min(f1):.3f}) | {round(statistics.median(lat), 2) if lat else None} | {share('gpu')} "
                    f"| {share('stack')} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
