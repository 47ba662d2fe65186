"""One pass over a recording for the report: labels, gaps and per-GPU/host aggregates.

A long recording is cut into chunks scanned in parallel processes, and the result is the same as
one serial pass, exactly: each chunk starts reading WARM_S early, so its Frames and classifier
state have caught up by the chunk's start; the state it reached there is compared with the state
the previous chunk ended in, and if they differ (hysteresis can remember further back) the chunk
is scanned again, resumed from the previous chunk's state.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path

from memtop.metrics import METRICS
from memtop.model import Frame, StackSample
from memtop.phases import METRICS_READ, Classifier
from memtop.progress import Progress
from memtop.store import Recording

WARM_S = 30.0  # read this much before a chunk: Frames need 5 s, the stack window 6 s, labels a few bins
CHUNK_MIN_S = 300.0  # shorter recordings are not worth the processes
# what the report does not read: series, notes, and the GPU metrics neither the classifier nor
# Aggregates (PCIe peaks, throttling) look at (SQLite decodes each column of each row)
_SKIP = frozenset({"series", "note"}) | (
    frozenset(m.name for m in METRICS) - METRICS_READ - {"pcie_rx", "pcie_tx", "clock_events"}
)


def _main_only(s: StackSample) -> StackSample:
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
            self.stacks.update(((s.pid, s.t), _main_only(s)) for s in f.stacks if s.threads)
        seen_gpu = self._seen_gpu
        for g in f.gpus:
            if seen_gpu.get(g.index) is g:  # a repeated sample changes no peak, link or throttle span
                continue
            seen_gpu[g.index] = g
            pk = self.peaks[g.index]
            pk["rx"] = max(pk["rx"], g.pcie_rx or 0.0)
            pk["tx"] = max(pk["tx"], g.pcie_tx or 0.0)
            if g.link is not None:
                self.links[g.index] = g.link
            if g.throttled:
                self._throttle(g.index, [g.t, g.t, g.throttle_reasons])
        if f.host is not None and f.host is not seen[1]:
            seen[1] = f.host
            for p in f.host.procs:
                self.procs[p.pid] = p
        if f.perf is not seen[2]:
            seen[2] = f.perf
            for q in f.perf:
                self._perf(q.pid, (q.t, dict(q.rates)))
        if f.caps is not seen[3]:
            seen[3] = f.caps
            for c in f.caps:
                self.caps[(c.source, c.name)] = c
        for n in f.notes:
            if n.startswith("damaged") and n not in self.damage:
                self.damage.append(n)

    def _throttle(self, gpu: int, span: list) -> None:
        tl = self.throttle[gpu]
        if tl and tl[-1][1] >= span[0] - 0.5 and tl[-1][2] == span[2]:
            tl[-1][1] = span[1]
        else:
            tl.append(span)

    def _perf(self, pid: int, sample: tuple) -> None:
        ps = self.perf[pid]
        if not ps or ps[-1][0] != sample[0]:
            ps.append(sample)

    def merge(self, later: Aggregates) -> None:
        self.stacks.update(later.stacks)
        for gpu, spans in later.throttle.items():
            for span in spans:
                self._throttle(gpu, span)
        for gpu, pk in later.peaks.items():
            mine = self.peaks[gpu]
            mine["rx"], mine["tx"] = max(mine["rx"], pk["rx"]), max(mine["tx"], pk["tx"])
        self.links.update(later.links)
        self.procs.update(later.procs)
        for pid, samples in later.perf.items():
            for sample in samples:
                self._perf(pid, sample)
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


@dataclass
class Chunk:
    labels: dict  # gpu -> [Label] produced after the chunk's start
    gaps: list
    agg: Aggregates
    start_state: tuple | None  # the classifier's state_key() at the chunk's start
    end: bytes  # the classifier (state only) at the chunk's end, pickled


_DONE = None  # seconds scanned per chunk, shared with the worker processes (for the progress bar)


def _share(done) -> None:
    global _DONE
    _DONE = done


def _scan(
    path: Path,
    read_from: float | None,
    lo: float,
    hi: float,
    resume: bytes | None,
    last: bool,
    slot: int = 0,
    tick: Callable[[float], None] | None = None,
) -> Chunk:
    """Frames from ``read_from`` to ``hi``; those before ``lo`` only warm the classifier up.
    ``resume``: continue from a previous chunk's classifier instead (and skip the warm-up).
    Progress (seconds past ``lo``) goes to ``tick``, or to slot ``slot`` of the shared ``_DONE``."""
    if tick is None and _DONE is not None:
        done = _DONE

        def tick(s: float) -> None:
            done[slot] = s

    rec = Recording(path)
    try:
        clf: Classifier = pickle.loads(resume) if resume is not None else Classifier()
        agg = Aggregates()
        start_state = None
        counts: dict[int, int] = {}
        n_gaps = 0
        for k, f in enumerate(rec.frames(read_from, hi, skip=_SKIP)):
            if tick is not None and k % 1000 == 0:
                tick(max(0.0, f.t - lo))
            if f.t < lo:
                if resume is None:
                    clf.feed(f)
                continue
            if start_state is None:
                start_state = clf.state_key()
                counts = {g: len(ls) for g, ls in clf.labels.items()}
                n_gaps = len(clf.gaps)
            clf.feed(f)
            agg.add(f)
        if last:
            clf.flush()
        labels = {g: ls[counts.get(g, 0) :] for g, ls in clf.labels.items()}
        gaps = clf.gaps[n_gaps:]
        clf.labels, clf.features, clf.gaps = {}, {}, []
        return Chunk(labels, gaps, agg, start_state, pickle.dumps(clf))
    finally:
        rec.close()


def _resume(job: tuple, state: bytes) -> Chunk:
    """Scan a chunk again in this process, continuing from the state the chunk before ended in."""
    path, read_from, lo, hi, _, last = job
    return _scan(path, read_from, lo, hi, state, last)


def scan(
    rec: Recording,
    lo: float,
    hi: float,
    fresh_at_lo: bool,
    workers: int | None = None,
    chunk_s: float | None = None,
    progress: bool | None = None,
) -> tuple[dict, list, Aggregates]:
    """(labels per GPU, gap events, aggregates) of [lo, hi], as one serial pass would give them.

    ``fresh_at_lo``: the classifier starts at ``lo`` (a --from range) rather than at the recording's start.
    """
    workers = workers or min(8, os.cpu_count() or 1)
    span = hi - lo
    n = 1 if workers < 2 else max(1, min(workers, int(span // (chunk_s or CHUNK_MIN_S))))
    first_read = lo if fresh_at_lo else None
    if n == 1:
        with Progress("reading", span, enabled=progress) as bar:
            c = _scan(rec.path, first_read, lo, hi, None, True, tick=bar.update)
        return c.labels, c.gaps, c.agg
    edges = [lo + span * k / n for k in range(n)] + [hi]
    jobs = [
        (
            rec.path,
            first_read if k == 0 else max(edges[k] - WARM_S, lo if fresh_at_lo else rec.t0),
            edges[k],
            edges[k + 1],
            None,
            k == n - 1,
        )
        for k in range(n)
    ]
    # fork is cheap but unsafe in a process with threads (a test runner, a TUI): spawn there
    ctx = multiprocessing.get_context("fork" if threading.active_count() == 1 else "spawn")
    done = ctx.Array("d", n, lock=False)
    with (
        Progress("reading", span, enabled=progress) as bar,
        ProcessPoolExecutor(n, mp_context=ctx, initializer=_share, initargs=(done,)) as ex,
    ):
        futures = [ex.submit(_scan, *job, k) for k, job in enumerate(jobs)]
        while wait(futures, timeout=0.25).not_done:
            bar.update(sum(done))
        chunks = [f.result() for f in futures]
    for k in range(1, n):
        prev = pickle.loads(chunks[k - 1].end)
        if chunks[k].start_state != prev.state_key():  # not caught up: resume from the real state
            chunks[k] = _resume(jobs[k], chunks[k - 1].end)
    labels: dict = {}
    gaps: list = []
    agg = chunks[0].agg
    for k, c in enumerate(chunks):
        for g, ls in c.labels.items():
            labels.setdefault(g, []).extend(ls)
        gaps += c.gaps
        if k:
            agg.merge(c.agg)
    return labels, gaps, agg
