"""The report's scan: the labels, gaps and aggregates that feeding every Frame to the Classifier
would give, computed from the recording's rows bin by bin instead of Frame by Frame.

A Frame holds the newest part of each source at its time, so which GPU row, GPU state, host sample
and stack sample each Frame holds is a search over sorted times; a bin's samples, the stack window at
its last Frame, a GPU's gap events and the aggregates follow from those searches without building a
Frame. memtop.analysis.binscan turns them into every bin's features, rules and labels over arrays with the
same float operations on the same values, the rules and hysteresis being memtop.analysis.phases' own.
The rows come from the one reader of a recording (memtop.storage.reader: GPU rows;
memtop.storage.parts: host, stack, perf and caps rows), which skips and notes a damaged row as the
Frames do. What is left that this path cannot read (rows out of order, a malformed database) raises
``Unusual``: the report says so in one line, the export walks Frames.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import json
import math
import mmap
import multiprocessing
import operator
import os
import pickle
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np

from memtop.analysis import labelcols
from memtop.analysis.binscan import (
    GpuBins,
    LabelSeq,
    Rules,
    Settled,
    distinct_rows,
    gpu_bins,
    settle_from,
    settle_guess,
    settle_more,
    with_peers,
)
from memtop.analysis.jobs import JobProc, groups
from memtop.analysis.phases import (
    GAP_MIN_S,
    Classifier,
    bin_start,
    gap_event,
    gap_quiet,
    is_asleep,
    is_data_worker,
    is_stopped,
    stack_info,
    track_gaps,
)
from memtop.analysis.roofline import READS as ROOFLINE_READS
from memtop.analysis.scan import REPORT_READS, Aggregates, Stacks, extends, main_only
from memtop.analysis.stackwin import Entries, window_bounds
from memtop.core.arrays import distinct
from memtop.core.errors import UserError
from memtop.core.metrics import METRICS
from memtop.core.model import (
    BUSY,
    PROC_DEFAULTS,
    PROC_KINDS,
    THROTTLE_MASK,
    Frame,
    GpuSample,
    HostSample,
    ProcSample,
    StackSample,
)
from memtop.core.records import Gap
from memtop.progress import Progress
from memtop.storage import parts, reader
from memtop.storage.colblock import NULL, Texts
from memtop.storage.decode import (
    DECODE_ERRORS,
    HOST_PROC_FIELDS,
    INT_MAX,
    SANE_T,
    host_from_blob,
    plain_host,
    record_of,
)
from memtop.storage.parts import Blobs
from memtop.storage.store import GPU_MODES, Recording, RowsRead, before

WARM_S = 30.0  # read this much before a chunk: Frames need 5 s, the stack window 6 s, labels a few bins
CHUNK_MIN_S = 300.0  # shorter recordings are not worth the processes
# the first chunk's length against each other's where this process has the report's other reads to
# make meanwhile and the others' results to unpickle (memtop.outputs.report._Reads: health samples and
# markers, ~0.1 CPU-s of the 8-hour runs once the GPU rows came from the scan; and the results)
FIRST_SHARE = 0.95
# the GPU columns read (scan.REPORT_READS), in the metrics table's order
_COLS = tuple(m.name for m in METRICS if m.name in REPORT_READS)
_NO_STATE = ("", "GPU", False, None, ())  # a GPU row before any gpu_state row (store.Recording._gpu)
_STATE_SQL = "SELECT t, gpu, uuid, name, mig, link, processes FROM gpu_state"  # as Recording.frames reads it
_PROC = operator.itemgetter(*HOST_PROC_FIELDS)  # a process's figures from its JSON object
_FIGURES = operator.attrgetter(*HOST_PROC_FIELDS)  # and from a ProcSample


class Unusual(Exception):
    """The recording has something the column scan cannot read (the export then walks Frames)."""


class NoFrames(Unusual):
    """No Frame in the range."""


def report_scan(
    rec: Recording,
    lo: float,
    hi: float,
    fresh_at_lo: bool,
    progress: bool | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[dict, list, Aggregates]:
    """The report's scan of [lo, hi] (labels per GPU, gaps, aggregates): ``scan_columns`` read from
    the recording's start (``fresh_at_lo``: from ``lo``, a --from range); a recording it cannot read
    is one clear error. ``meanwhile``: work of the caller's that this process may do while other
    processes scan (``scan_columns``)."""
    with Progress("reading", hi - lo, enabled=progress) as bar:
        try:
            return scan_columns(
                rec, lo if fresh_at_lo else None, lo, hi, tick=bar.update, meanwhile=meanwhile
            )
        except NoFrames:
            raise UserError("empty time range: no samples in it") from None
        except Unusual as e:
            raise UserError(f"{rec.path} is damaged or truncated ({e})") from None


def scan_columns(
    rec: Recording,
    read_from: float | None,
    lo: float,
    hi: float,
    tick: Callable[[float], None] | None = None,
    workers: int | None = None,
    chunk_s: float | None = None,
    meanwhile: Callable[[], None] | None = None,
    aggregates: bool = True,
) -> tuple[dict, list, Aggregates]:
    """(labels per GPU, gaps, aggregates) of the Frames of [lo, hi] read from ``read_from`` (those
    before lo warm the classifier up); raises Unusual where it cannot read the recording.

    A long range is cut into chunks at bin edges whose features, rules, gaps and aggregates are
    found in parallel processes, each reading WARM_S early; the hysteresis then runs here over all
    of them in order (``join_parts``), as one pass would. Where a chunk's warm-up did not reach what
    the chunk before ended in (the stack window, the previous bin, a gap that began before it), the
    range is scanned serially. ``meanwhile`` is called in this process once its own chunk is scanned,
    while it would wait for the others (its chunk is the shorter for it: ``FIRST_SHARE``), or not at all.
    Without ``aggregates`` (a replay's phase runs: labels only) a serial scan gathers none, nor the GPU
    rows' reads the report joins (``Aggregates.rows``)."""
    workers = workers or min(8, os.cpu_count() or 1)
    n = 1 if workers < 2 else max(1, min(workers, int((hi - lo) // (chunk_s or CHUNK_MIN_S))))
    with no_gc():
        if n > 1:
            got = _parallel(rec, read_from, lo, hi, n, tick, meanwhile)
            if got is not None:
                return got
        try:
            try:
                return join_parts([scan_part(rec, read_from, lo, hi, tick, aggregates=aggregates)])
            except DECODE_ERRORS:  # a host sample the blocks hold whose JSON is damaged: the rows,
                # each checked as it is read (memtop.storage.parts skips it)
                return join_parts(
                    [scan_part(rec, read_from, lo, hi, tick, aggregates=aggregates, host_blocks=False)]
                )
        except (*DECODE_ERRORS, sqlite3.DatabaseError) as e:
            raise Unusual(f"{type(e).__name__}: {e}") from None


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a scan: it builds hundreds of thousands of objects that
    live to its end (labels, their features, stack samples) and no cycles, and the collector's passes
    over them cost a tenth of a long scan and half of unpickling a chunk's result (reference counting
    still frees the rest)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_OPEN = -math.inf  # a chunk's gap open at its start: its true start is the chunk before's


class _Part(NamedTuple):
    """A chunk's scan: each GPU's bins from its start (the first chunk: all, warm-up included) with
    their rules, and what the next chunk's warm-up must have reached."""

    bins: dict[int, tuple[GpuBins, Rules]]
    first: dict[int, int]  # each GPU's first bin the result holds
    gaps: list[tuple[Gap, list | None]]  # with the stack window, where the gap was open at the start
    gap_end: dict[int, tuple | None]  # each GPU's open gap at the end
    gap_start: dict[int, tuple | None]  # and at the start (after the warm-up)
    warm: dict[int, tuple[float, float]]  # each GPU's last warm-up bin: (start, graphics)
    window: tuple[tuple, tuple]  # the stack window's samples after the warm-up and at the end
    agg: Aggregates
    # the hysteresis run in the chunk's own process (``settle_first``): the first chunk's while the
    # others are still scanned, each GPU's (rule ids, stable labels, state after them), which the join
    # goes on from; another chunk's as a guess from a fresh state (binscan.settle_guess), which the join
    # takes from where the true run meets it
    settled: dict[int, tuple] | None = None


_DONE = None  # seconds scanned per chunk, shared with the worker processes (for the progress bar)


def _share(done) -> None:
    global _DONE
    _DONE = done


def _chunk(
    path: Path, read_from: float | None, lo: float, hi: float, slot: int, out: int | None = None
) -> _Part | int | None:
    """A chunk's scan in a worker process; with ``out`` (a memory file shared with the parent,
    ``_result_files``) written there, its length returned."""
    done = _DONE

    def tick(s: float) -> None:
        if done is not None:
            done[slot] = s

    rec = Recording(path)
    try:
        with no_gc():  # (a spawned worker does not inherit it)
            part = settle_first(scan_part(rec, read_from, lo, hi, tick, edge=True), later=True)
    except (Unusual, *DECODE_ERRORS, sqlite3.DatabaseError):
        return None
    finally:
        rec.close()
    if out is None:
        return part
    with open(out, "wb", closefd=False) as f:  # (pickled into the file: no copy of tens of MB made first)
        pickle.dump(part, f, pickle.HIGHEST_PROTOCOL)
        return f.tell()


def _result_files(forked: bool, n: int) -> list[int | None]:
    """A memory file for each of ``n`` forked workers' results (os.memfd_create; inherited at the
    fork): a result of tens of MB written and read at once, not through the executor's pipe 64 KB
    at a time (each a switch between the two processes: on a loaded machine half a second of the
    report's wall, its end waiting on it). None (the pipe) where spawned or not on Linux."""
    files: list[int | None] = []
    try:
        while forked and len(files) < n:
            files.append(os.memfd_create("memtop-chunk"))
    except (AttributeError, OSError):  # (EMFILE at the k-th: the ones made are closed, not leaked)
        for fd in files:
            os.close(cast(int, fd))
        files = []
    return files or [None] * n


def _result(got: _Part | int | None, out: int | None) -> _Part | None:
    """A worker's result: the part, or its length in ``out``."""
    if not isinstance(got, int) or out is None:
        return cast(_Part | None, got)
    # unpickled from the file's own pages (tens of MB: a copy of them read first took as long again)
    with mmap.mmap(out, got, prot=mmap.PROT_READ) as pages:
        return cast(_Part, pickle.loads(pages))


def _parallel(
    rec: Recording,
    read_from: float | None,
    lo: float,
    hi: float,
    n: int,
    tick: Callable[[float], None] | None,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[dict, list, Aggregates] | None:
    """The chunked scan; None where a chunk is unusual or did not catch up (the caller scans serially)."""
    # chunks of one length: this process scans the first while its executor's thread takes in the
    # others' results, which their processes pickle (8-hour runs on two cores: they end together);
    # with work to do meanwhile, its chunk is the shorter by about that work
    chunks = chunk_spans(rec, read_from, lo, hi, n, FIRST_SHARE if meanwhile else 1.0)
    if chunks is None:
        return None
    # np.unique imports numpy.ma at its first call (a tenth of a second): once, before the fork
    import numpy.ma  # noqa: F401

    # fork is cheap but unsafe in a process with threads (a test runner, a TUI): spawn there
    forked = threading.active_count() == 1
    ctx = multiprocessing.get_context("fork" if forked else "spawn")
    done = ctx.Array("d", n, lock=False)
    outs = [None, *_result_files(forked, n - 1)]
    jobs = [(rec.path, *c, k, outs[k]) for k, c in enumerate(chunks)]
    try:
        return _scan_chunks(rec, jobs, ctx, done, tick, meanwhile)
    finally:
        for fd in outs:
            if fd is not None:
                os.close(fd)


def _scan_chunks(
    rec: Recording,
    jobs: list[tuple],
    ctx: Any,
    done: Any,
    tick: Callable[[float], None] | None,
    meanwhile: Callable[[], None] | None,
) -> tuple[dict, list, Aggregates] | None:
    """``_parallel``'s chunks (``_chunk``'s arguments): the first scanned here, the others by workers."""
    n = len(jobs)

    def tick0(s: float) -> None:
        done[0] = s
        if tick:
            tick(sum(done))

    # this process scans the first chunk itself: one result fewer to pickle, one process fewer
    with ProcessPoolExecutor(n - 1, mp_context=ctx, initializer=_share, initargs=(done,)) as ex:
        futures = [ex.submit(_chunk, *job) for job in jobs[1:]]
        try:
            _, read_from, lo, hi = jobs[0][:4]
            first: _Part | None = scan_part(rec, read_from, lo, hi, tick0)
        except (Unusual, *DECODE_ERRORS, sqlite3.DatabaseError):
            first = None
        if meanwhile is not None:
            meanwhile()
        if first is not None:
            first = settle_first(first)
        while wait(futures, timeout=0.25).not_done:
            if tick:
                tick(sum(done))
        parts = [first] + [_result(f.result(), job[-1]) for f, job in zip(futures, jobs[1:], strict=True)]
    if any(p is None for p in parts):
        return None
    try:
        return join_parts(cast(list[_Part], parts))
    except Unusual:
        return None


def chunk_spans(
    rec: Recording, read_from: float | None, lo: float, hi: float, n: int, first: float = 1.0
) -> list[tuple[float | None, float, float]] | None:
    """(read from, lo, hi) of ``n`` chunks of [lo, hi] of one length (the first ``first`` times as
    long as each other), cut at bin edges, each after the first read from WARM_S before its start
    (``scan_part``'s arguments; the second on, with edge=True); None where a chunk would have no Frame."""
    b = Classifier().bin_s
    at = [(first + k - 1) / (first + n - 1) for k in range(1, n)]
    edges = [lo] + [math.floor((lo + (hi - lo) * x) / b) * b for x in at] + [hi]
    his = []
    for e in edges[1:-1]:  # a chunk ends at its last Frame before the next one's first bin
        r = rec.query(f"SELECT max(t) FROM frame WHERE t<? AND {SANE_T}", (e,)).fetchone()
        his.append(r[0])
    his.append(hi)
    if any(h is None or h < e for h, e in zip(his, edges, strict=False)):
        return None
    floor = lo if read_from is not None else rec.t0
    return [(read_from if k == 0 else max(edges[k] - WARM_S, floor), edges[k], his[k]) for k in range(n)]


def join_parts(parts: list[_Part]) -> tuple[dict, list, Aggregates]:
    """The chunks' bins as one pass: checks that each chunk's warm-up reached where the one before
    ended, then the hysteresis over every GPU's bins in order, the gaps open across a chunk's start
    given their true start, the aggregates merged."""
    clf = Classifier()
    last: dict[int, tuple[float, float]] = {}  # each GPU's newest bin so far: (start, graphics)
    open_gap: dict[int, tuple | None] = {}
    gaps: list[Gap] = []
    for k, p in enumerate(parts):
        if k and p.window[0] != parts[k - 1].window[1]:
            raise Unusual("a chunk's stack window did not catch up")
        if k and any(p.warm.get(g) != last.get(g) for g in set(p.warm) | set(last)):
            raise Unusual("a chunk's previous bin is not the pass's")  # (Features.rise)
        if k and any(
            (p.gap_start.get(g) is None) != (open_gap.get(g) is None)
            for g in set(p.gap_start) | set(open_gap)
        ):
            raise Unusual("a chunk's gaps did not catch up")
        for gap, window in p.gaps:
            if gap.t0 == _OPEN:  # open at the chunk's start: it began where the chunk before says
                start = open_gap[gap.gpu]
                assert start is not None and window is not None
                if gap.t1 - start[0] >= GAP_MIN_S:
                    gaps.append(gap_event(gap.gpu, (start[0], gap.t1), window))
            else:
                gaps.append(gap)
        for g, end in p.gap_end.items():
            open_gap[g] = end if end is None or end[0] != _OPEN else (open_gap[g] or end)[:1] + end[1:]
        for g, (bins, _) in p.bins.items():
            if len(bins):
                last[g] = (float(bins.t[-1]), float(bins.graphics[-1]))
    labels: dict[int, LabelSeq] = {}
    wb, confirm, bin_s = clf.warmup_bins, clf.confirm, clf.bin_s
    for g in sorted({g for p in parts for g in p.bins}):
        got = [(k, p.bins[g][1], (p.settled or {}).get(g)) for k, p in enumerate(parts) if g in p.bins]
        rids: list[np.ndarray] = []
        stable: list[str] = []
        at: Settled = (("", "", 0), 0)
        for k, rules, mine in got:
            if not rids:  # the GPU's first bins, from the start (the first chunk's settled already)
                r, s, at = mine if k == 0 and mine is not None else settle_more(rules, wb, confirm, bin_s)
            else:  # on from the chunk before's state (the chunk's guess taken where they meet)
                r, s, at = settle_from(rules, wb, confirm, bin_s, at, mine)
            rids.append(r)
            stable += s
        bins = GpuBins.concat([p.bins[g][0] for p in parts if g in p.bins])
        rules = Rules.concat([x[1] for x in got])
        rid = rids[0] if len(rids) == 1 else np.concatenate(rids)
        labels[g] = LabelSeq(bins, rules, rid, stable, parts[0].first.get(g, 0) if g in parts[0].bins else 0)
    agg = parts[0].agg
    for p in parts[1:]:
        agg.merge(p.agg)
    return labels, gaps, agg


def settle_first(part: _Part, later: bool = False) -> _Part:
    """The chunk with its GPUs' hysteresis run (``_Part.settled``): what its process can do of the
    join while the other chunks are still scanned; ``later``: a chunk after the first, as a guess
    from a fresh state (binscan.settle_guess)."""
    clf = Classifier()
    run = settle_guess if later else settle_more
    settled = {g: run(rules, clf.warmup_bins, clf.confirm, clf.bin_s) for g, (_, rules) in part.bins.items()}
    return part._replace(settled=settled)


def scan_part(
    rec: Recording,
    read_from: float | None,
    lo: float,
    hi: float,
    tick: Callable[[float], None] | None,
    edge: bool = False,
    aggregates: bool = True,
    host_blocks: bool = True,
) -> _Part:
    """Frames from ``read_from`` (seeded there, as Recording.frames(start) is; None: the recording's
    start) to ``hi``; those before ``lo`` only warm the classifier up. ``edge``: ``lo`` is a bin edge
    between chunks, and the bins before it are the previous chunk's: only those from lo are kept."""
    seed = read_from  # Recording.frames(start) seeds its state as it stood at the start

    def done(f: float) -> None:  # progress: about this share of the chunk's work (seconds of it)
        if tick is not None:
            tick(f * (hi - lo))

    flo = rec.t0 if seed is None else seed
    plo = float("-inf") if seed is None else seed
    frames = frame_times(rec, flo, hi)
    if not frames or frames[-1] < lo:
        raise NoFrames("no frames in the range")
    ft = np.array(frames, dtype=np.float64)
    i_lo = bisect.bisect_left(frames, lo)  # the first Frame the aggregates (and the result) take
    # the report's other reads of the GPU rows (Recording.rows_read) from this chunk's: those after
    # the chunk before's last Frame (the first chunk: from lo), joined in order by the report
    after = (frames[i_lo - 1] if i_lo else None) if edge else before(lo)
    if not aggregates:
        after = None
    gpus, rows = _gpus(rec, ft, plo, hi, seed, after)
    done(0.15)
    hosts = _Hosts(rec, ft, plo, hi, seed, host_blocks)
    done(0.25)
    stacks = _Stacks(rec, frames, plo, hi, seed)
    done(0.5)

    clf = Classifier()
    b = clf.bin_s
    sa = bin_start(ft, b)  # each Frame's bin, as Classifier.feed bins it
    ends = np.append(np.flatnonzero(sa[1:] != sa[:-1]), len(frames) - 1)
    bin_of = np.repeat(np.arange(len(ends)), np.diff(np.concatenate([[-1], ends])))
    gpm = GPU_MODES.index("gpm")
    found = {}
    entries = stacks.entries
    for g in gpus:
        got = gpu_bins(g, hosts, entries, ft, sa, ends, bin_of, gpm)
        if got is not None:
            found[g.index] = got
    done(0.6)

    def jobs_at(n: np.ndarray) -> dict[int, np.ndarray]:  # at the bins' last Frames
        return _jobs(gpus, hosts, ends[n], lambda f: done(0.6 + 0.15 * f))

    with_peers(found, len(ends), jobs_at)
    done(0.75)
    kept: dict[int, tuple[GpuBins, Rules]] = {}
    first: dict[int, int] = {}
    warm: dict[int, tuple[float, float]] = {}
    for gi, (bins, _) in found.items():
        rules = Rules.of(bins)
        # bins closed by a Frame before lo only warm up (at a chunk's edge: also the one lo closes)
        i = int(np.searchsorted(bins.k, i_lo if edge else i_lo - 1, "left"))
        if i:
            warm[gi] = (float(bins.t[i - 1]), float(bins.graphics[i - 1]))
        if edge:
            kept[gi] = (bins.take(i), rules.take(i))
            first[gi] = 0
        else:
            kept[gi] = (bins, rules)
            first[gi] = i
    # gaps: each GPU's new samples in Frame order (feed tracks them after the Frame's stacks); at a
    # chunk's edge a gap open at lo is marked, its start the chunk before's to give
    gap_lo: dict[int, tuple | None] = {}
    reset = _mark_open if edge else None
    open_gaps: dict[int, tuple | None] = {}  # each GPU's gap open after its last sample
    gap_at = sorted((k, g.index, span) for g in gpus for k, span in g.gaps(open_gaps, i_lo, gap_lo, reset))
    gap_at = [e for e in gap_at if e[0] >= i_lo]
    # the stack window at each gap's Frame, and after the warm-up and at the end (the chunks' join)
    ks = np.array([k for k, _, _ in gap_at] + [max(i_lo - 1, 0), len(frames) - 1], dtype=np.int64)
    at, inv = np.unique(ks, return_inverse=True)  # (window_bounds takes Frames in time order)
    front, count = (x[inv].tolist() for x in window_bounds(entries, ft, at))
    gaps: list[tuple[Gap, list | None]] = []
    for (_, gi, span), a, b in zip(gap_at, front, count, strict=False):
        if span[0] == _OPEN:  # the join finds its stack, once it knows the start
            gaps.append((Gap(gi, span[0], span[1], None), stacks.within(a, b)))
        else:  # gap_event takes the middle one of the window's samples in the gap that have a
            # stack (info): only that one is made (a long gap's window holds thousands)
            t = entries.t[a:b]
            inside = a + np.flatnonzero((span[0] <= t) & (t <= span[1] + 0.5) & (entries.info[a:b] >= 0))
            mid = int(inside[len(inside) // 2]) if len(inside) else a
            gaps.append((gap_event(gi, span, stacks.within(mid, mid + len(inside[:1]))), None))
    keys = (
        tuple((s.pid, s.t) for s, _ in stacks.within(front[-2], count[-2])) if i_lo else (),
        tuple((s.pid, s.t) for s, _ in stacks.within(front[-1], count[-1])),
    )
    done(0.8)
    # (``aggregates`` False: the labels alone, for the export)
    agg = _aggregate(rec, frames, i_lo, gpus, hosts, stacks, plo, hi, seed) if aggregates else Aggregates()
    agg.damage = list(rec.damage)  # (what a chunk's process skipped: its own Recording's notes)
    agg.rows = [] if rows is None or after is None else [(after, hi, rows)]
    done(1.0)
    return _Part(kept, first, gaps, open_gaps, gap_lo, warm, keys, agg)


def _jobs(
    gpus: list[_Gpu], hosts: _Hosts, ks: np.ndarray, tick: Callable[[float], None] | None = None
) -> dict[int, np.ndarray]:
    """Each GPU's job at Frames ``ks`` (ascending) as ``jobs.job_groups`` finds it, as ids (-1:
    none). A GPU's job follows from its processes' pids (its state's) and the host sample's: it is
    found by ``jobs.groups`` once per (pids, host sample alike for the GPUs' processes,
    ``_Hosts.job_hosts``); a state is written again at each change of the GPU's processes, the pids
    repeat (an 8-hour tiled run: thousands of states, a few lists of pids)."""
    pids = {p.pid for g in gpus for st in g.states for p in st[4]}
    # a GPU without processes has no job: the host sample matters where two GPUs have some
    busy = sum(
        (g.r[ks] >= 0) & np.array([bool(st[4]) for st in g.states] + [False], dtype=bool)[g.s[ks]]
        for g in gpus
    )
    h = np.where(busy > 1, np.array(hosts.at, dtype=np.int64)[ks], -1)
    u = np.full(len(ks), -1, dtype=np.int64)  # each Frame's host sample's id (-1: none needed)
    samples: list[dict[int, JobProc]] = []
    if pids and (h >= 0).any():
        hs, inv = np.unique(h[h >= 0], return_inverse=True)
        ids, samples = hosts.job_hosts(hs.tolist(), pids, tick)
        u[h >= 0] = ids[inv.reshape(-1)]
    keys: dict[str, int] = {}
    out = {}
    for g in gpus:
        lists: dict[tuple[int, ...], int] = {}  # each state's pids as a code (-1, no state: none)
        code = [lists.setdefault(tuple(q.pid for q in st[4]), len(lists)) for st in (*g.states, _NO_STATE)]
        m = len(lists)
        pair = np.where((g.r[ks] >= 0) & (u >= 0), u * m + np.array(code, dtype=np.int64)[g.s[ks]], -1)
        uniq, inv = np.unique(pair, return_inverse=True)
        job = np.full(len(uniq), -1, dtype=np.int64)
        pid_lists = list(lists)
        for j, p in enumerate(uniq.tolist()):
            if p >= 0 and (got := groups({g.index: pid_lists[p % m]}, samples[p // m])):
                job[j] = keys.setdefault(got[g.index], len(keys))
        out[g.index] = job[inv.reshape(-1)]
    return out


def _mark_open(gap: tuple | None) -> tuple | None:
    """A gap open at a chunk's start, its start marked: the chunk before knows it."""
    return None if gap is None else (_OPEN, gap[1])


def _samples_at(gpus: list[_Gpu], k: int) -> tuple[GpuSample, ...]:
    return tuple(s for g in gpus if (s := g.sample(k)) is not None)


def _states(rec: Recording, found: list[tuple], into: dict[int, list]) -> None:
    """gpu_state rows by GPU, as (t, the parsed state); a row without a GPU index is skipped, as
    the Frames skip it."""
    parsed: dict[tuple, tuple] = {}  # each state's text, once (a run repeats a few)
    for r in found:
        if type(r[1]) is int and -INT_MAX <= r[1] <= INT_MAX:
            key = (*r[2:], type(r[4]))  # (mig: 1 and 1.0 are one key, not one state)
            st = parsed[key] if key in parsed else parsed.setdefault(key, rec.gpu_state(r))
            into.setdefault(r[1], []).append((r[0], st))
        else:
            parts.damaged(rec, "gpu_state")


class _Gpu:
    """One GPU's rows and states, and which of them each Frame holds."""

    def __init__(
        self, index: int, ta: np.ndarray, code: np.ndarray, cols: dict, states: list, ft: np.ndarray
    ) -> None:
        self.index = index
        self.ta = ta  # the rows' times as stored
        self.t: list[float] = ta.tolist()  # (as floats)
        if len(ta) > 1 and not (np.diff(ta) > 0).all():
            raise Unusual("GPU rows out of order or repeated")
        self.code = code  # index into GPU_MODES
        self.cols = cols  # metric -> float array, NaN for None
        self.states = [st for _, st in states]
        st_t = np.array([s[0] for s in states], dtype=np.float64)
        self.r = np.searchsorted(ta, ft, "right") - 1  # each Frame's row (-1: none yet)
        self.s = np.searchsorted(st_t, ft, "right") - 1  # and state: its sample is the pair
        lost = np.append(code == GPU_MODES.index("lost"), True)
        self.valid = ~lost[self.r]  # the classifier skips lost samples (r == -1 reads the True)

    def state(self, s: int) -> tuple:
        return self.states[s] if s >= 0 else _NO_STATE

    def sample(self, k: int) -> GpuSample | None:
        """Frame k's sample of this GPU, with the fields job_groups and the report read."""
        r = int(self.r[k])
        if r < 0:
            return None
        uuid, name, mig, link, procs = self.state(int(self.s[k]))
        mode = GPU_MODES[self.code[r]]
        return GpuSample(self.t[r], self.index, uuid, name, mode, link=link, processes=procs, mig=mig)

    def gaps(
        self,
        open_gaps: dict[int, tuple | None],
        i_lo: int,
        at_lo: dict,
        reset: Callable[[tuple | None], tuple | None] | None,
    ) -> list[tuple[int, tuple[float, float]]]:
        """(Frame, span) of each gap event: ``phases.track_gaps`` over the GPU's new samples (each
        taken at the Frame that first holds it, as Classifier.feed takes it). ``at_lo`` gets the
        GPU's open gap as Frame i_lo finds it; ``reset``: a function of it giving the open gap to
        go on from there instead."""
        r, s = self.r, self.s
        at = np.flatnonzero(self.valid)
        ra, sa = r[at], s[at]
        new = np.ones(len(at), dtype=bool)
        new[1:] = (ra[1:] != ra[:-1]) | (sa[1:] != sa[:-1])
        frame, row, st = at[new], ra[new], sa[new]
        first, other = (self.cols[c][row] for c in BUSY)
        busy = np.where(np.isnan(first), other, first)  # GpuSample.busy (NaN: None)
        alive = np.array([bool(x[4]) for x in self.states] + [False], dtype=bool)[st]  # (-1: none)
        quiet = gap_quiet(busy, alive)
        m = int(np.searchsorted(frame, i_lo, "left"))  # the first sample from Frame i_lo on
        # track_gaps is told only the samples that can change what it finds: each run's first and a
        # quiet run's last (the ones between extend a gap to the last's time or find it ended), and
        # the two about Frame i_lo; so its lists are made of these alone (a few of every ten)
        n = len(quiet)
        told = np.zeros(n + 1, dtype=bool)
        change = np.flatnonzero(quiet[1:] != quiet[:-1])
        told[change] = told[change + 1] = True  # a run's last, the next one's first
        told[[0, n - 1, max(m - 1, 0), m]] = True
        k = np.flatnonzero(told[:n])
        ks, km = k.tolist(), int(np.searchsorted(k, m))
        quiet_k, times_k = quiet[k].tolist(), self.ta[row[k]].tolist()
        index = self.index
        got, state = [], open_gaps.get(index)
        for lo, hi in ((0, km), (km, len(ks))):
            ends, state = track_gaps(quiet_k[lo:hi], times_k[lo:hi].__getitem__, state)
            got += [(int(frame[ks[lo + i]]), span) for i, span in ends]
            if lo == 0:
                at_lo[index] = state
                state = state if reset is None else reset(state)
        open_gaps[index] = state
        return got

    def _seen(self, i_lo: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, states) of each sample the Frames from i_lo on take, once (Aggregates.add)."""
        r, s = self.r[i_lo:], self.s[i_lo:]
        at = np.flatnonzero(r >= 0)
        ra, sa = r[at], s[at]
        new = np.ones(len(at), dtype=bool)
        new[1:] = (ra[1:] != ra[:-1]) | (sa[1:] != sa[:-1])
        return ra[new], sa[new]


def _gpus(
    rec: Recording, ft: np.ndarray, plo: float, hi: float, seed: float | None, after: float | None
) -> tuple[list[_Gpu], RowsRead | None]:
    """Each GPU's rows and states; with ``after``, the report's other reads of the rows after it
    (``Recording.rows_read``), from the same read."""
    states: dict[int, list] = {}
    if seed is not None:  # Recording._seed: each GPU's state as it stood at the start
        for g in [r[0] for r in rec.query("SELECT DISTINCT gpu FROM gpu_state")]:
            sql = f"{_STATE_SQL} WHERE gpu=? AND t<=? ORDER BY t DESC LIMIT 1"
            _states(rec, rec.query(sql, (g, seed)).fetchall(), states)
    _states(rec, rec.query(f"{_STATE_SQL} WHERE t>? AND t<=? ORDER BY t", (plo, hi)).fetchall(), states)
    more = () if after is None else rec.reads_columns(ROOFLINE_READS)
    got = reader.columns(rec, plo, hi, tuple(dict.fromkeys(_COLS + more)), seed)
    rows = None
    if after is not None:
        mine = got.t > after
        rows = rec.rows_read(
            reader.GpuCols(got.t[mine], got.gpu[mine], got.mode[mine], {c: got.cols[c][mine] for c in more}),
            ROOFLINE_READS,
        )
        for c in set(more) - set(_COLS):
            del got.cols[c]
    index = distinct(got.gpu).tolist()
    at = [np.flatnonzero(got.gpu == g) for g in index]
    cols: list[dict] = [{} for _ in index]
    for c in _COLS:  # each GPU's part of a column, the whole one let go before the next is split
        v = got.cols.pop(c)
        for d, a in zip(cols, at, strict=True):
            d[c] = v[a]
    gpus = [
        _Gpu(g, got.t[a], got.mode[a], d, states.get(g, []), ft)
        for g, a, d in zip(index, at, cols, strict=True)
    ]
    return gpus, rows


def frame_times(rec: Recording, lo: float, hi: float) -> list[float]:
    """The sane Frame times in [lo, hi] in order, from the column blocks where they reach, else as
    ``SELECT t FROM frame WHERE t>=? AND t<=? AND SANE_T ORDER BY t`` gives them."""
    blocks = rec.blocks("frame")
    if blocks.end > hi and (got := blocks.read(lo, hi)) is not None:
        t = got["t"]
        if (np.diff(t) > 0).all() and ((t > -1e12) & (t < 1e12)).all():  # (as the rows' key and SANE_T)
            return t.tolist()
    return [
        r[0] for r in rec.query(f"SELECT t FROM frame WHERE t>=? AND t<=? AND {SANE_T} ORDER BY t", (lo, hi))
    ]


class _Hosts:
    """The host samples, and which one each Frame holds. Where the recording holds their figures (what
    the classifier reads) as column blocks (memtop.storage.colblock), those, and a sample's JSON is inflated
    only when asked for; else each sample's JSON, as the Frame path reads it (the host_load and
    host_proc rows recordings of 2026-11-24 hold too are a copy of it, not read)."""

    def __init__(
        self, rec: Recording, ft: np.ndarray, plo: float, hi: float, seed: float | None, blocks: bool = True
    ) -> None:
        self._load: dict[int, tuple[float, list[tuple]]] = {}  # sample -> (iowait, each process's figures)
        self._shapes: set[bytes] = set()  # the host JSON shapes checked (decode.plain_host)
        self._procs: dict[int, list] = {}  # sample -> [(pid, the JSON object or ProcSample)]
        self._table: tuple | None = None  # the host_proc blocks as arrays (parts.host_blocks)
        self._job: tuple[np.ndarray, Texts, Texts] | None = None  # and their ppid, name, cmdline
        got = parts.host_blocks(rec, plo, hi, seed) if blocks else None
        if got is not None:
            figured = np.flatnonzero(got.procs >= 0)
            counts = got.procs[figured]
            self._table = (
                figured,
                got.iowait[figured],
                np.cumsum(counts) - counts,
                counts,
                proc_arrays(got.rows),
            )
            ppid, name, cmd = got.rows["ppid"], got.rows["name"], got.rows["cmdline"]
            if (ppid != NULL).all() and (cmd.codes >= 0).all():  # (blocks of before 2026-11-28: NULL)
                self._job = (ppid, name, cmd)
            self.t = got.t.tolist()
            self.raw: Sequence[bytes] = parts.Blobs(rec, self.t)
        else:  # every sample decoded (one that does not is skipped, as the Frames skip it)
            read, _ = parts.hosts(rec, parts.host_rows(rec, plo, hi, seed), self._plain)
            self.t, self.raw = [r[0] for r in read], [r[1] for r in read]
            for h, (_, _, d) in enumerate(read):
                self._keep(h, d)
        t = np.array(self.t, dtype=np.float64)
        if len(t) > 1 and not (np.diff(t) >= 0).all():
            raise Unusual("host rows out of order")
        self.at = np.searchsorted(t, ft, "right") - 1  # each Frame's host sample (-1: none)

    def _held(self, hs: Sequence[int] | np.ndarray) -> np.ndarray | None:
        """Where host samples ``hs`` (ascending) are among those the blocks hold the figures of; None
        where one is not (or there are no blocks)."""
        if self._table is None:
            return None
        h = self._table[0]
        i = np.searchsorted(h, hs)
        return i if (i < len(h)).all() and (h[np.minimum(i, len(h) - 1)] == hs).all() else None

    def _rows(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The process rows of the samples the blocks hold at ``i`` (``_held``), and their counts."""
        _, _, start, count, _ = cast(tuple, self._table)
        n = count[i]
        return np.repeat(start[i] - (np.cumsum(n) - n), n) + np.arange(n.sum()), n

    def _pids(self, rows: np.ndarray) -> np.ndarray:
        return cast(tuple, self._table)[4]["pid"][rows]

    def figures(self, hs: list[int]) -> HostFigures:
        """The processes' figures of host samples ``hs`` (ascending) as arrays: each sample's iowait,
        first row and count of rows, and per row (a process) what the features read."""
        if len(hs) and (i := self._held(hs)) is not None:
            _, iowait, start, count, procs = cast(tuple, self._table)
            return HostFigures(iowait[i], start[i], count[i], procs)
        for x in hs:
            if x not in self._load:
                self._decode(x)
        loads = [self._load[x] for x in hs]
        n = np.array([len(ps) for _, ps in loads], dtype=np.int64)
        rows = [p for _, ps in loads for p in ps]
        cols = zip(*rows, strict=True) if rows else ((),) * len(HOST_PROC_FIELDS)
        procs = proc_arrays(dict(zip(HOST_PROC_FIELDS, cols, strict=True)))  # (checked: int64 holds them)
        return HostFigures(np.array([io for io, _ in loads], dtype=np.float64), np.cumsum(n) - n, n, procs)

    def _plain(self, raw: bytes) -> dict | HostSample:
        """A sample's JSON as a dict where it is as this version writes it (its values read straight
        from it), else decoded whole (another layout: an older memtop), as the Frames decode it."""
        d = plain_host(raw, self._shapes)
        return host_from_blob(raw) if d is None else d

    def _keep(self, h: int, d: dict | HostSample) -> None:
        if isinstance(d, dict):
            procs = d["procs"]
            self._load[h] = (d["iowait_pct"], [_PROC(p) for p in procs])
            self._procs[h] = [(p["pid"], p) for p in procs]
        else:
            self._load[h] = (d.iowait_pct, [_FIGURES(p) for p in d.procs])
            self._procs[h] = [(p.pid, p) for p in d.procs]

    def _decode(self, h: int) -> None:
        self._keep(h, self._plain(self.raw[h]))

    def latest(self, i_lo: int) -> dict[int, int]:
        """Each process of the samples the Frames from i_lo on hold, in the order it first appears
        there, and the newest of those samples it is in."""
        hs = distinct(self.at[i_lo:])
        hs = hs[hs >= 0]
        if (i := self._held(hs)) is not None:
            rows, n = self._rows(i)
            pid, sample = self._pids(rows), np.repeat(hs, n)
            pids, first = np.unique(pid, return_index=True)
            last = len(pid) - 1 - np.unique(pid[::-1], return_index=True)[1]
            order = np.argsort(first)
            return dict(zip(pids[order].tolist(), sample[last[order]].tolist(), strict=True))
        latest: dict[int, int] = {}
        for x in hs.tolist():
            if x not in self._load:
                self._decode(x)
            for p in self._load[x][1]:
                latest[p[0]] = x
        return latest

    def job_hosts(
        self, hs: list[int], pids: set[int], tick: Callable[[float], None] | None = None
    ) -> tuple[np.ndarray, list[dict[int, JobProc]]]:
        """Host samples ``hs`` (ascending) as job_groups reads them for the GPU processes ``pids``: an
        id per sample, and per id those processes by pid (the sample's last of a pid, as job_groups
        takes it), samples with the same (pid, ppid, name, cmdline) of them in order sharing an id.
        Where the blocks hold those columns (decode.HOST_PROC_JOB), from them (``_job_rows``); else
        from each sample's JSON. Decoding every sample took most of a long multi-GPU report: in the Writer's
        compact JSON a process's object starts with those four (store.json_bytes of a ProcSample), so
        samples whose starts for ``pids`` are the same text share an id, found by decoding the first
        of them whole (and checking that its text says the same); a sample in another layout is
        decoded whole."""
        if (got := self._job_rows(hs, pids)) is not None:
            return got
        alts = b"|".join(re.escape(str(p).encode()) for p in sorted(pids))
        lead = re.compile(
            rb'\{"pid":(?:' + alts + rb'),"ppid":-?\d+,"name":' + _JSTR + rb',"cmdline":' + _JSTR
        )
        mark = re.compile(rb'\{"pid":\s*(?:' + alts + rb")\b")  # such an object, however it goes on
        ids: dict[tuple[bytes, ...], int] = {}  # text -> id
        sigs: dict[tuple, int] = {}  # the four values -> id
        samples: list[dict[int, JobProc]] = []
        out: list[int] = []
        raws = self.raw.each(hs) if isinstance(self.raw, Blobs) else (self.raw[h] for h in hs)
        for j, raw in enumerate(raws):
            if tick is not None and j % 2048 == 0:
                tick(j / len(hs))
            text = tuple(lead.findall(raw))
            # every "pid" a first key, and the text holds each object of ``pids`` (the Writer's layout;
            # where each object is a lead, so is each of theirs: no second search)
            n = raw.count(b'{"pid":')
            plain = raw.count(b'"pid"') == n and (n == len(text) or len(mark.findall(raw)) == len(text))
            u = ids.get(text) if plain else None
            if u is None:
                s = host_from_blob(raw)
                procs = tuple(p for p in s.procs if p.pid in pids)
                sig = tuple((p.pid, p.ppid, p.name, p.cmdline) for p in procs)
                u = sigs.setdefault(sig, len(samples))
                if u == len(samples):
                    samples.append({p.pid: p for p in procs})
                if plain and _leads(text) == list(sig):
                    ids[text] = u
            out.append(u)
        return np.array(out, dtype=np.int64), samples

    def _job_rows(self, hs: list[int], pids: set[int]) -> tuple[np.ndarray, list[dict[int, JobProc]]] | None:
        """``job_hosts`` from the host_proc blocks: each sample's rows of ``pids`` as codes of their
        distinct (pid, ppid, name, cmdline), a sample's codes in order as the row of a matrix, one id
        per distinct row; None where the blocks do not hold the job's columns or one of the samples."""
        if self._job is None or (i := self._held(hs)) is None:
            return None
        ppid, name, cmd = self._job
        rows, n = self._rows(i)
        pid = self._pids(rows)
        keep = np.isin(pid, np.fromiter(pids, dtype=np.int64, count=len(pids)))
        rows, sample = rows[keep], np.repeat(np.arange(len(hs)), n)[keep]
        cols = np.stack([pid[keep], ppid[rows], name.codes[rows], cmd.codes[rows]], axis=1)
        first, code = distinct_rows(cols)
        place = np.arange(len(rows)) - np.searchsorted(sample, sample)  # a row's place in its sample
        sig = np.full((len(hs), int(place.max(initial=0)) + 1), -1, dtype=np.int64)
        sig[sample, place] = code
        first_sig, ids = distinct_rows(sig)
        each = [(p, _Job(q, name.strings[a], cmd.strings[c])) for p, q, a, c in cols[first].tolist()]
        return ids, [dict(each[c] for c in row if c >= 0) for row in sig[first_sig].tolist()]

    def procs(self, h: int) -> list:
        if h not in self._procs:
            self._decode(h)
        return self._procs[h]

    def sample(self, k: int) -> HostSample | None:
        h = int(self.at[k])
        return None if h < 0 else host_from_blob(self.raw[h])


class _Job(NamedTuple):
    """What job grouping reads of a process (jobs.JobProc), from the host_proc blocks."""

    ppid: int
    name: str
    cmdline: str


_JSTR = rb'"[^"\\]*(?:\\.[^"\\]*)*"'  # a JSON string's text (unrolled: a step per run of plain bytes)


def _leads(text: tuple[bytes, ...]) -> list[tuple]:
    """(pid, ppid, name, cmdline) of each process's lead (``_Hosts.job_hosts``), decoded as host_json does."""
    objs = ",".join(t.decode("utf-8", "surrogateescape") + "}" for t in text)
    return [tuple(d.values()) for d in json.loads(f"[{objs}]")]


class HostFigures:
    """Host samples' processes as arrays: per sample its iowait, first row and count of rows
    (``rows``), and per process row each of model.PROC_FIGURES (``proc_arrays``) by its name."""

    def __init__(self, iowait: np.ndarray, start: np.ndarray, rows: np.ndarray, procs: dict) -> None:
        self.iowait, self.start, self.rows = iowait, start, rows
        self.procs = procs

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.procs[name]
        except KeyError:
            raise AttributeError(name) from None


def proc_arrays(cols: dict[str, Any]) -> dict[str, Any]:
    """The processes' figures (model.PROC_FIGURES, as values or as a host_proc block's arrays) as
    arrays, where a recording lacks one (an older block: NaN, NULL, None) ProcSample's default, a None
    as -1; and what the features read of a name and state: has_parent (worker_of is not None),
    data_worker (named as a DataLoader worker), asleep (phases.is_asleep), stopped (state t or T)."""
    out: dict[str, Any] = {}
    texts: dict[str, tuple[np.ndarray, list]] = {}
    for k, kind in PROC_KINDS.items():
        c, default = cols[k], cast(Any, PROC_DEFAULTS.get(k))
        if kind == "f":
            a = np.asarray(c, dtype=np.float64)
            out[k] = a if default is None else np.where(np.isnan(a), default, a)
        elif kind == "i":
            a = (
                c
                if isinstance(c, np.ndarray)
                else np.array([NULL if v is None else v for v in c], dtype=np.int64)
            )
            out[k] = np.where(a == NULL, -1 if default is None else default, a)
        else:  # a text: each distinct value once (a None is rare: older blocks)
            texts[k] = _distinct(c, default)
            out[k] = np.array(texts[k][1], dtype=object)[texts[k][0]]
    wof = cols["worker_of"]
    out["has_parent"] = (
        np.asarray(wof != NULL)
        if isinstance(wof, np.ndarray)
        else np.array([w is not None for w in wof], dtype=bool)
    )
    out["data_worker"] = _each(is_data_worker, texts["name"])
    out["asleep"], out["stopped"] = _each(is_asleep, texts["state"]), _each(is_stopped, texts["state"])
    return out


def _distinct(c: Texts | Sequence, default: object) -> tuple[np.ndarray, list]:
    """A text column as (a code per row, each distinct value once), a None as ``default``: hours of
    a host's processes repeat a few names and states."""
    if isinstance(c, Texts):  # (-1, a NULL, reads the default put last, where there is one)
        return c.codes, c.strings + ([default] if (c.codes < 0).any() else [])
    vs = [default if v is None else v for v in c] if None in c else c
    first = {v: j for j, v in enumerate(dict.fromkeys(vs))}
    return np.fromiter(map(first.__getitem__, vs), dtype=np.int64, count=len(vs)), list(first)


def _each(test: Callable[[str], bool], coded: tuple[np.ndarray, list]) -> np.ndarray:
    """``test`` of each row of a text column (``_distinct``), called once per distinct value."""
    codes, values = coded
    return np.array([test(v) for v in values], dtype=bool)[codes] if values else np.zeros(len(codes), bool)


class _Stacks:
    """The stack samples, the Frames they are in, and the order the classifier's window takes them,
    as arrays over the samples; each distinct dump is decoded once, and a sample becomes a
    StackSample only where one is asked for (an 8-hour run holds ~200,000 samples of a few dozen dumps)."""

    def __init__(
        self,
        rec: Recording,
        frames: list[float],
        plo: float,
        hi: float,
        seed: float | None,
        main_threads: bool = False,
    ) -> None:
        """``main_threads``: the dumps' main threads alone (``parts.stack_dumps``' main_only: the export's)."""
        got = parts.stack_dumps(rec, plo, hi, seed, main_only=main_threads)
        # a dump seen before is that dump again: its main-thread summary (phases.stack_info) and
        # main-only form are the earlier one's
        self.dumps = [
            (s, stack_info(s) if s.threads else None, (main_only(s).threads, s.error)) for s in got.dumps
        ]
        self.times = got.times
        ts = np.array(self.times, dtype=np.float64)
        self.kind = got.kind
        self.pids = np.array([d[0].pid for d in self.dumps], dtype=np.int64)[self.kind]
        pids = self.pids
        # a pid's sample is in the Frames from its time until the pid's next sample, at most 5 s
        # (store._State.frame); the window takes it at the first of them, in pid order
        by_pid = np.lexsort((np.arange(len(ts)), pids))  # each pid's samples in order
        until = np.full(len(ts), np.inf)
        if len(ts):
            nxt = np.append(ts[by_pid][1:], np.inf)
            until[by_pid] = np.where(np.append(pids[by_pid][1:] == pids[by_pid][:-1], False), nxt, np.inf)
        self.frames = frames
        self.ts, self.until = ts, until
        self.ft = np.array(frames, dtype=np.float64)
        self.first = np.searchsorted(self.ft, ts, "left")  # bisect_left
        self.threads = np.array([bool(d[0].threads) for d in self.dumps], dtype=bool)[self.kind]
        held = np.flatnonzero(self.threads & self._held(self.first, ts, until))
        self.order = held[np.lexsort((pids[held], self.first[held]))]  # by Frame, then pid (a stable sort)
        codes: dict[tuple, int] = {}  # the dumps' infos, each distinct value once
        info = np.array([-1 if d[1] is None else codes.setdefault(d[1], len(codes)) for d in self.dumps])
        o = self.order
        self.entries = Entries(
            self.first[o], ts[o], pids[o], info.astype(np.int64)[self.kind[o]], tuple(codes)
        )

    def sample(self, i: int) -> StackSample:
        d = self.dumps[self.kind[i]][0]
        return StackSample(self.times[i], d.pid, d.threads, d.error)

    def within(self, a: int, b: int) -> list[tuple[StackSample, tuple | None]]:
        """The window's entries [a, b) (``entries``) as (sample, info)."""
        return [(self.sample(i), self.dumps[self.kind[i]][1]) for i in self.order[a:b].tolist()]

    def _held(self, k: np.ndarray, t: np.ndarray, until: np.ndarray) -> np.ndarray:
        """Whether Frame k[i] (at or after t[i]) holds the sample of time t[i], shown until until[i]."""
        nf = len(self.ft)
        fk = self.ft[np.minimum(k, nf - 1)] if nf else np.zeros(len(k))
        return (k < nf) & (fk < until) & ~(fk - t > 5.0)

    def seen(self, i_lo: int) -> Stacks:
        """The samples with threads the Frames from i_lo on hold, in the order the Frames meet them
        (by Frame, then pid), as the report keeps them (main thread only)."""
        order, kind = self._order(i_lo)
        return Stacks.of(self.pids[order], self.ts[order], kind, [d[2] for d in self.dumps])

    def held(self, i_lo: int) -> Iterator[tuple[int, int]]:
        """``seen``'s samples as (sample, its dump) indices (``times``, ``dumps``)."""
        order, kind = self._order(i_lo)
        return zip(order.tolist(), kind.tolist(), strict=True)

    def _order(self, i_lo: int) -> tuple[np.ndarray, np.ndarray]:
        k = np.maximum(self.first, i_lo)
        held = np.flatnonzero(self.threads & self._held(k, self.ts, self.until))
        order = held[np.lexsort((self.pids[held], k[held]))]  # by Frame, then pid
        return order, self.kind[order]


def _changes(times: list[float], ft: np.ndarray, i_lo: int) -> list[tuple[int, int]]:
    """(Frame, number of rows applied by then) at Frame i_lo and each later Frame that new rows reach
    (``times``: the rows' times in order, ``ft``: the Frames')."""
    ta = np.array(times, dtype=np.float64)
    ks = distinct(np.append(np.searchsorted(ft, ta, "left"), i_lo))
    ks = ks[(ks >= i_lo) & (ks < len(ft))]
    if not len(ks):
        return []
    ns = np.searchsorted(ta, ft[ks], "right")
    keep = np.ones(len(ks), dtype=bool)
    keep[1:] = ns[1:] != ns[:-1]
    keep[0] = True  # Frame i_lo itself, always
    return list(zip(ks[keep].tolist(), ns[keep].tolist(), strict=True))


def _aggregate(
    rec: Recording,
    frames: list[float],
    i_lo: int,
    gpus: list[_Gpu],
    hosts: _Hosts,
    stacks: _Stacks,
    plo: float,
    hi: float,
    seed: float | None,
) -> Aggregates:
    """Aggregates as Aggregates.add over the Frames from i_lo on makes them."""
    agg = Aggregates(stacks=stacks.seen(i_lo))
    reasons: dict[int, tuple[str, ...]] = {}
    for g in gpus:
        rows, sts = g._seen(i_lo)
        if not len(rows):
            continue
        rx, tx = (float(np.nanmax(g.cols[f"pcie_{d}"][rows], initial=0.0)) for d in ("rx", "tx"))
        agg.add_peak(g.index, rx, tx)  # (the samples' largest, a missing one as 0: values are >= 0)
        linked = np.array([st[3] is not None for st in g.states] + [False])[sts]  # (-1: no state)
        if linked.any():  # the newest sample's link that is not None
            agg.links[g.index] = g.states[int(sts[np.flatnonzero(linked)[-1]])][3]
        ev = np.nan_to_num(g.cols["clock_events"][rows]).astype(np.int64)  # (int() of each value)
        hit = np.flatnonzero((ev & THROTTLE_MASK) != 0)
        if not len(hit):
            continue
        # Aggregates.add_throttle of [t, t, reasons] at each throttled sample, over runs: a sample
        # extends the span before it where its reasons are the same (and scan.extends)
        values, which = np.unique(ev[hit], return_inverse=True)
        for e in values.tolist():
            if e not in reasons:  # the model's names for the bits
                reasons[e] = GpuSample(0.0, g.index, "", "", "gpm", clock_events=e).throttle_reasons
        names = [reasons[e] for e in values.tolist()]
        ids = np.array([names.index(n) for n in names])[which]  # (bits the names leave out: the same)
        t_hit = rows[hit]
        ta = g.ta[t_hit]
        new = np.ones(len(hit), dtype=bool)
        new[1:] = (ids[1:] != ids[:-1]) | ~extends(ta[:-1], ta[1:])
        starts = np.flatnonzero(new)
        times = g.t
        for a, b, k in zip(
            t_hit[starts].tolist(),
            t_hit[np.append(starts[1:], len(hit)) - 1].tolist(),
            ids[starts].tolist(),
            strict=True,
        ):
            agg.add_throttle(g.index, [times[a], times[b], names[k]])
    # hosts: each sample the Frames from i_lo on hold, once; a process keeps its first place and takes
    # its newest figures (only the samples with a process's newest are decoded whole)
    latest = hosts.latest(i_lo)
    newest = {h: dict(hosts.procs(h)) for h in set(latest.values())}
    agg.procs.update(
        (pid, p if isinstance(p, ProcSample) else record_of(ProcSample, p, "host"))
        for pid, h in latest.items()
        for p in [newest[h][pid]]
    )
    # perf and caps: few rows; as the Frames from i_lo on hold them
    ft = stacks.ft
    perf = parts.perf_rows(rec, plo, hi, seed)
    done = 0
    for _, n in _changes([q[0] for q in perf], ft, i_lo):
        reads = {q[1]: q for q in perf[done:n]}  # each process with a new sample since: its newest
        done = n
        for pid in sorted(reads):  # (the others' samples are those taken already: add_perf skips them)
            q = reads[pid]
            agg.add_perf(pid, (q[0], dict(q[2])))
    caps = parts.caps_rows(rec, plo, hi, seed)
    for _, n in _changes([r[0] for r in caps], ft, i_lo):
        for c in caps[n - 1][1] if n else ():
            agg.caps[(c.source, c.name)] = c
    k = len(frames) - 1
    agg.last = Frame(frames[k], gpus=_samples_at(gpus, k), host=hosts.sample(k))
    return agg


def phase_runs(rec: Recording) -> dict[int, tuple[tuple[float, str], ...]] | None:
    """A replay's phase runs (``ReplaySource.phase_runs``) from the column scan, or None where this path
    cannot be sure of the recording: per GPU, (offset, label) where each run of one label starts, the
    offset being the Frame that closes the run's first bin, the first in a later bin
    (``Classifier.feed``), which is where a replay's row first shows the label. The last bin, which no
    Frame closes, has none. Serial: it runs in a thread of the TUI (whose cyclic garbage collector the
    scan turns off for its second or so, ``no_gc``: the UI makes no cycles that cannot wait)."""
    try:
        labels, _, _ = scan_columns(rec, None, rec.t0, rec.t1, workers=1, aggregates=False)
    except Unusual:
        return None
    ft = np.asarray(frame_times(rec, rec.t0, rec.t1), dtype=np.float64)
    b = Classifier().bin_s  # (this scan's bins)
    frame_bin = bin_start(ft, b)
    out = {}
    for g, labs in labels.items():
        c = labelcols.columns(labs)
        closing = np.searchsorted(frame_bin, c.t, "right")  # the first Frame in a later bin
        closed = closing < len(ft)
        label, closing = c.label[closed], closing[closed]
        if len(label):  # (a GPU none of whose bins a Frame closed has no runs, as by Frames)
            start = np.flatnonzero(np.r_[True, label[1:] != label[:-1]])
            out[g] = tuple((float(ft[closing[k]] - rec.t0 + 1e-6), str(label[k])) for k in start)
    return out
