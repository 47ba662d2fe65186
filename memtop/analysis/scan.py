"""What the report gathers besides the labels (``Aggregates``: stacks, throttle spans, PCIe peaks,
processes, perf reads, capabilities), which the scan by columns (memtop.analysis.colscan) fills chunk
by chunk and merges in time order, and the GPU metrics the report reads."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from memtop.analysis.phases import METRICS_READ
from memtop.core.model import Frame, StackSample, ThreadStack
from memtop.storage.store import RowsRead

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
class Stacks:
    """The stack samples the Frames held, main thread only, as the report keeps them: each (pid, t) once,
    at the place it was first met, with the newest of its dumps, as an index into ``dumps`` ((threads,
    error) of each distinct dump: an 8-hour run holds tens of thousands of samples of a few dozen);
    as arrays in that order (made, merged and pickled without an object per sample)."""

    pid: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    t: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    dumps: list[tuple[tuple[ThreadStack, ...], str | None]] = field(default_factory=list)

    @classmethod
    def of(cls, pid: np.ndarray, t: np.ndarray, kind: np.ndarray, dumps: list) -> Stacks:
        """Samples in the order met: a (pid, t) met again keeps its first place and takes its later dump."""
        order = np.lexsort((t, pid))  # (stable: a key's samples in the order met)
        p, ts = pid[order], t[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (p[1:] != p[:-1]) | (ts[1:] != ts[:-1])
        start = np.flatnonzero(new)
        first, last = order[start], order[np.append(start[1:], len(order))[: len(start)] - 1]
        place = np.argsort(first, kind="stable")
        return cls(pid[first[place]], t[first[place]], kind[last[place]], dumps)

    def update(self, later: Stacks) -> None:
        """``later``'s samples after these (a sample met again takes its dump)."""
        off = len(self.dumps)
        got = Stacks.of(
            np.concatenate([self.pid, later.pid]),
            np.concatenate([self.t, later.t]),
            np.concatenate([self.kind, later.kind + off]),
            self.dumps + later.dumps,
        )
        self.pid, self.t, self.kind, self.dumps = got.pid, got.t, got.kind, got.dumps

    def sample(self, i: int) -> StackSample:
        threads, error = self.dumps[self.kind[i]]
        return StackSample(float(self.t[i]), int(self.pid[i]), threads, error)


@dataclass
class Aggregates:
    """What the report takes from the Frames besides the classifier's labels; merged in time order."""

    stacks: Stacks = field(default_factory=Stacks)  # main thread only
    throttle: dict = field(default_factory=lambda: defaultdict(list))  # gpu -> [[t0, t1, reasons]]
    peaks: dict = field(default_factory=lambda: defaultdict(lambda: {"rx": 0.0, "tx": 0.0}))
    links: dict = field(default_factory=dict)
    procs: dict = field(default_factory=dict)  # pid -> newest ProcSample
    perf: dict = field(default_factory=lambda: defaultdict(list))  # pid -> [(t, rates)]
    caps: dict = field(default_factory=dict)
    damage: list[str] = field(default_factory=list)  # what the store skipped as damaged (its notes)
    # the report's other reads of the GPU rows (Recording.rows_read) of each chunk's rows (after, upto]
    rows: list[tuple[float, float, RowsRead]] = field(default_factory=list)
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
        for pid, samples in later.perf.items():  # (add_perf kept no two of one time in a row there)
            if samples:
                self.add_perf(pid, samples[0])
                self.perf[pid] += samples[1:]
        self.caps.update(later.caps)
        self.damage += [n for n in later.damage if n not in self.damage]
        self.rows += later.rows
        self.last = later.last if later.last is not None else self.last

    def __getstate__(self) -> dict:  # defaultdicts with lambdas do not pickle
        d = dict(self.__dict__)
        d["throttle"], d["peaks"], d["perf"] = (
            dict(self.throttle),
            {k: dict(v) for k, v in self.peaks.items()},
            dict(self.perf),
        )
        return d

    def __setstate__(self, d: dict) -> None:
        self.__init__()  # type: ignore[misc]
        throttle, peaks, perf = d.pop("throttle"), d.pop("peaks"), d.pop("perf")
        self.__dict__.update(d)
        self.throttle.update(throttle)
        self.peaks.update(peaks)
        self.perf.update(perf)
