"""What the report gathers besides the labels (``Aggregates``: stacks, throttle spans, PCIe peaks,
processes, perf reads, capabilities), which the scan by columns (memtop.analysis.colscan) fills chunk
by chunk and merges in time order, and the GPU metrics the report reads."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from memtop.analysis.phases import METRICS_READ
from memtop.core.model import Frame, StackSample

# the GPU metrics a report reads: the features' and Aggregates' (PCIe peaks, throttling)
REPORT_READS = METRICS_READ | {"clock_events"}


THROTTLE_JOIN_S = 0.5  # a throttled sample this soon after a span of the same reasons extends it


def extends(end: Any, t: Any) -> Any:
    """A throttled sample at ``t`` extends the span of its reasons that ends at ``end``: floats
    (``Aggregates.add_throttle``, merging chunks) or arrays (the column scan, each sample against the
    one before it)."""
    return end >= t - THROTTLE_JOIN_S


def main_only(s: StackSample) -> StackSample:
    m = s.main
    return s if len(s.threads) == 1 or m is None else replace(s, threads=(m,))


@dataclass
class Aggregates:
    """What the report takes from the Frames besides the classifier's labels; merged in time order."""

    stacks: dict[tuple[int, float], StackSample] = field(default_factory=dict)  # main thread only
    throttle: dict = field(default_factory=lambda: defaultdict(list))  # gpu -> [[t0, t1, reasons]]
    peaks: dict = field(default_factory=lambda: defaultdict(lambda: {"rx": 0.0, "tx": 0.0}))
    links: dict = field(default_factory=dict)
    procs: dict = field(default_factory=dict)  # pid -> newest ProcSample
    perf: dict = field(default_factory=lambda: defaultdict(list))  # pid -> [(t, rates)]
    caps: dict = field(default_factory=dict)
    damage: list[str] = field(default_factory=list)  # what the store skipped as damaged (its notes)
    last: Frame | None = None

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
