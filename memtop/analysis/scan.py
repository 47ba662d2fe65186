"""The report's scan by Frames: labels, gaps and per-GPU/host aggregates from one serial pass.

The report reads by columns (memtop.analysis.colscan, in parallel chunks); this is its path for what the
column scan cannot be sure of (a damaged part, rows out of order), and ``Aggregates`` is what both
gather besides the labels.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from memtop.analysis.phases import METRICS_READ, Classifier
from memtop.core.metrics import METRICS
from memtop.core.model import Frame, StackSample
from memtop.progress import Progress
from memtop.storage.store import Recording

# the GPU metrics a report reads: the features' and Aggregates' (PCIe peaks, throttling)
REPORT_READS = METRICS_READ | {"clock_events"}
# what the report does not read: series, notes, and the other GPU metrics (SQLite decodes each column
# of each row)
_SKIP = frozenset({"series", "note"}) | (frozenset(m.name for m in METRICS) - REPORT_READS)


THROTTLE_JOIN_S = 0.5  # a throttled sample this soon after a span of the same reasons extends it


def extends(end: Any, t: Any) -> Any:
    """A throttled sample at ``t`` extends the span of its reasons that ends at ``end``: floats (the
    Frames' pass, ``Aggregates.add_throttle``) or arrays (the columns', each sample against the one
    before it)."""
    return end >= t - THROTTLE_JOIN_S


def main_only(s: StackSample) -> StackSample:
    m = s.main
    return s if len(s.threads) == 1 or m is None else replace(s, threads=(m,))


@dataclass
class Aggregates:
    """What the report takes from every Frame besides the classifier's labels; merged in time order."""

    stacks: dict[tuple[int, float], StackSample] = field(default_factory=dict)  # main thread only
    throttle: dict = field(default_factory=lambda: defaultdict(list))  # gpu -> [[t0, t1, reasons]]
    peaks: dict = field(default_factory=lambda: defaultdict(lambda: {"rx": 0.0, "tx": 0.0}))
    links: dict = field(default_factory=dict)
    procs: dict = field(default_factory=dict)  # pid -> newest ProcSample
    perf: dict = field(default_factory=lambda: defaultdict(list))  # pid -> [(t, rates)]
    caps: dict = field(default_factory=dict)
    damage: list[str] = field(default_factory=list)  # what the store skipped as damaged (its notes)
    last: Frame | None = None
    # parts repeat across Frames until their source samples again: take each once
    _seen: list = field(default_factory=lambda: [None, None, None, None])
    _seen_gpu: dict = field(default_factory=dict)  # gpu -> the sample last taken

    def add(self, f: Frame) -> None:
        self.last = f
        seen = self._seen
        if f.stacks is not seen[0]:
            seen[0] = f.stacks
            # the report reads only the main thread: keeping the others would cost hours' worth of memory
            self.stacks.update(((s.pid, s.t), main_only(s)) for s in f.stacks if s.threads)
        seen_gpu = self._seen_gpu
        for g in f.gpus:
            if seen_gpu.get(g.index) is g:  # a repeated sample changes no peak, link or throttle span
                continue
            seen_gpu[g.index] = g
            self.add_peak(g.index, g.pcie_rx or 0.0, g.pcie_tx or 0.0)
            if g.link is not None:
                self.links[g.index] = g.link
            if g.throttled:
                self.add_throttle(g.index, [g.t, g.t, g.throttle_reasons])
        if f.host is not None and f.host is not seen[1]:
            seen[1] = f.host
            for p in f.host.procs:
                self.procs[p.pid] = p
        if f.perf is not seen[2]:
            seen[2] = f.perf
            for q in f.perf:
                self.add_perf(q.pid, (q.t, dict(q.rates)))
        if f.caps is not seen[3]:
            seen[3] = f.caps
            for c in f.caps:
                self.caps[(c.source, c.name)] = c
        for n in f.notes:
            if n.startswith("damaged") and n not in self.damage:
                self.damage.append(n)

    def add_throttle(self, gpu: int, span: list) -> None:
        tl = self.throttle[gpu]
        if tl and extends(tl[-1][1], span[0]) and tl[-1][2] == span[2]:
            tl[-1][1] = span[1]
        else:
            tl.append(span)

    def add_peak(self, gpu: int, rx: float, tx: float) -> None:
        """PCIe's peak of each direction: the largest reading (a missing one counts as 0)."""
        pk = self.peaks[gpu]
        pk["rx"], pk["tx"] = max(pk["rx"], rx), max(pk["tx"], tx)

    def add_perf(self, pid: int, sample: tuple) -> None:
        ps = self.perf[pid]
        if not ps or ps[-1][0] != sample[0]:
            ps.append(sample)

    def merge(self, later: Aggregates) -> None:
        self.stacks.update(later.stacks)
        for gpu, spans in later.throttle.items():
            for span in spans:
                self.add_throttle(gpu, span)
        for gpu, pk in later.peaks.items():
            self.add_peak(gpu, pk["rx"], pk["tx"])
        self.links.update(later.links)
        self.procs.update(later.procs)
        for pid, samples in later.perf.items():
            for sample in samples:
                self.add_perf(pid, sample)
        self.caps.update(later.caps)
        self.damage += [n for n in later.damage if n not in self.damage]
        self.last = later.last if later.last is not None else self.last

    def __getstate__(self) -> dict:  # defaultdicts with lambdas do not pickle
        d = dict(self.__dict__)
        d["throttle"], d["peaks"], d["perf"] = (
            dict(self.throttle),
            {k: dict(v) for k, v in self.peaks.items()},
            dict(self.perf),
        )
        d["_seen"], d["_seen_gpu"] = [None] * 4, {}
        # the stacks as columns and each distinct (threads, error) once: a chunk of 8 hours holds
        # tens of thousands of samples of a few dozen stacks, and pickle takes an object at a time
        kinds: dict[tuple[int, str | None], int] = {}
        payloads: list[tuple] = []
        which: list[int] = []
        for s in self.stacks.values():
            k = kinds.setdefault((id(s.threads), s.error), len(kinds))
            if k == len(payloads):
                payloads.append((s.threads, s.error))
            which.append(k)
        d["stacks"] = (list(self.stacks), [s.t for s in self.stacks.values()], which, payloads)
        return d

    def __setstate__(self, d: dict) -> None:
        self.__init__()  # type: ignore[misc]
        throttle, peaks, perf = d.pop("throttle"), d.pop("peaks"), d.pop("perf")
        keys, times, which, payloads = d.pop("stacks")
        self.__dict__.update(d)
        self.stacks = {
            key: StackSample(t, key[0], *payloads[k]) for key, t, k in zip(keys, times, which, strict=True)
        }
        self.throttle.update(throttle)
        self.peaks.update(peaks)
        self.perf.update(perf)


def scan(
    rec: Recording, lo: float, hi: float, fresh_at_lo: bool, progress: bool | None = None
) -> tuple[dict, list, Aggregates]:
    """(labels per GPU, gap events, aggregates) of [lo, hi] by Frames. The classifier reads the
    Frames from the recording's start (``fresh_at_lo``: from ``lo``, a --from range), those before
    ``lo`` only warming it up."""
    clf = Classifier()
    agg = Aggregates()
    counts: dict[int, int] | None = None
    n_gaps = 0
    with Progress("reading", hi - lo, enabled=progress) as bar:
        for k, f in enumerate(rec.frames(lo if fresh_at_lo else None, hi, skip=_SKIP)):
            if k % 1000 == 0:
                bar.update(max(0.0, f.t - lo))
            if f.t >= lo:
                if counts is None:  # the labels and gaps before are the warm-up's
                    counts, n_gaps = {g: len(ls) for g, ls in clf.labels.items()}, len(clf.gaps)
                agg.add(f)
            clf.feed(f)
    clf.flush()
    counts = counts or {}
    labels = {g: ls[counts.get(g, 0) :] for g, ls in clf.labels.items()}
    return labels, clf.gaps[n_gaps:], agg
