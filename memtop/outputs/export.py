"""`memtop export --perfetto`: Chrome/Perfetto trace-event JSON of a recording, streamed.

Events are written as the recording is read, so memory stays flat whatever its length: only the
open phase run per GPU, the open stack per sampled thread and the table of distinct stack frames
are held. Timestamps (``ts``, µs) are CLOCK_MONOTONIC, the clock memtop stamps Frames with; the
trace's metadata carries the wall-clock offset (docs/EXPORT.md says how to line it up with nsys).

Stacks go out twice: as nested B/E slices on the sampled thread (Perfetto draws them as a flame
chart; its JSON importer ignores ``samples``) and as ``stackFrames``/``samples`` of the Trace Event
Format (chrome://tracing, speedscope).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import queue
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from memtop.analysis.phases import TITLES, Classifier, Label
from memtop.core.arrays import distinct
from memtop.core.errors import UserError
from memtop.core.metrics import METRICS, Metric
from memtop.core.model import ThreadStack
from memtop.core.stackclass import site
from memtop.outputs import perfetto_pb as pb
from memtop.progress import Progress
from memtop.storage.colblock import Blocks
from memtop.storage.decode import (
    BLOCK_STREAMS,
    BLOCK_TABLES,
    DECODE_ERRORS,
    HOST_PROC_ADDED,
    SANE_T,
    finite_tree,
    host_from_blob,
)
from memtop.storage.store import WRITTEN_STREAMS, Recording, create_private

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    import numpy as np
    from _typeshed import ReadableBuffer

    from memtop.analysis.binscan import GpuBins, LabelSeq, Rules, Settled

GPU_PID_BASE = 1_000_000  # GPU tracks get synthetic pids that cannot clash with real ones
HOST_PID = 999_999
STALE_S = 2.5  # a thread's stack not sampled for this long is closed where its last sample ended
SAMPLE_S = 0.5  # how long a last sample is taken to last (the default stack interval)
_KEPT = 4096  # stacks whose path and instant are kept (a run has tens to hundreds)
_SKIP = frozenset({"series", "note", "perf", "caps"})  # parts neither the trace nor the classifier reads
_UNITS = {"percent": ("%", 1.0), "watts": ("W", 1.0), "mhz": ("MHz", 1.0), "bytes_per_s": ("GB/s", 1e-9)}


def _track(m: Metric) -> tuple[str, str, float]:
    unit, scale = _UNITS.get(m.kind, ("", 1.0))
    return f"{m.title} {unit}".strip(), m.name, scale


# counter tracks: the metrics table's own choice (Metric.counter), titled with their unit
COUNTERS: tuple[tuple[str, str, float], ...] = tuple(_track(m) for m in METRICS if m.counter)


def _us(t: float) -> float:
    return round(t * 1e6, 1)


_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def dumps(o: object) -> str:
    try:
        return _encode(o)
    except ValueError:  # a NaN or an infinity somewhere (a damaged recording): null instead
        return _encode(finite_tree(o))


Floats = Any  # a list of floats or a float array (numpy's: the column walk's)


def _listed(v: Floats) -> list[float]:
    return v.tolist() if hasattr(v, "tolist") else v


# a sink's encoding of an instant, made once for the events at it: JSON text (µs) or a protobuf field (ns)
Stamp = Any
Fmt = Callable[[Floats], "np.ndarray"]  # how a counter's values are rounded for the trace


def rounded(values: Floats, digits: int) -> np.ndarray:
    """``round(x, digits)`` of each value, bit for bit, over an array (an 8-hour run's PCIe values
    are a million Python calls). numpy's rint of y = x·10^digits, divided by 10^digits, is Python's
    correctly rounded answer wherever rounding y cannot have moved it across a half (then rint rounds
    the exact product the same way, and the division rounds k/10^digits to the nearest double as
    Python's decimal conversion does); the values within y's rounding error of a half, too large to
    hold a fraction, or not finite are left to Python's ``round`` (none in the 8-hour files)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    p = 10.0**digits
    with np.errstate(invalid="ignore", over="ignore"):
        y = v * p
        out = np.rint(y) / p
        clear = (np.abs(y - np.floor(y) - 0.5) > np.abs(y) * 2.0**-51) & (np.abs(y) < 2.0**52)
    for i in np.flatnonzero(~clear).tolist():
        out[i] = round(float(v[i]), digits)
    return out


def gbps(v: Floats) -> np.ndarray:
    """PCIe bytes/s as the trace's GB/s (each ``round(x / 1e9, 3)``)."""
    import numpy as np

    return rounded(np.asarray(v, dtype=np.float64) / 1e9, 3)


def tenths(v: Floats) -> np.ndarray:
    """CPU %s as the trace's (each ``round(x, 1)``)."""
    return rounded(v, 1)


class _Json:
    """The JSON document's events, written as they come, comma-separated, in batches.

    The frequent events (counters, stack slices and samples) are formatted from templates with
    their JSON strings made once (a template makes the text ``dumps`` of the dict would make)."""

    def __init__(self, fh: io.TextIOBase, samples: io.TextIOBase) -> None:
        self.fh = fh
        self.samples = samples  # spill file: `samples` follow `traceEvents` in the document
        self.n_samples = 0
        self.n = 0  # events written
        self._buf: list[str] = []
        self.raw = self._buf.append  # an event already encoded
        self._counters: dict[tuple[str, int], str] = {}  # (track name, pid) -> the event's head
        self._names: dict[str, str] = {}  # frame name or class -> its JSON string
        # (pid, tid) -> their JSON fields in an event, the head of a sample of theirs
        self._who: dict[tuple[int, int], tuple[str, str]] = {}

    def __call__(self, ev: dict) -> None:
        self.raw(dumps(ev))
        self.flush(2000)

    @staticmethod
    def stamp(t: float) -> str:
        return repr(_us(t))

    @staticmethod
    def stamps(t: Floats) -> list[str]:
        """``stamp`` of each of times ``t`` (seconds)."""
        import numpy as np

        return list(map(repr, rounded(np.asarray(t, dtype=np.float64) * 1e6, 1).tolist()))

    def process(self, pid: int, name: str) -> None:
        self({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})

    def thread(self, pid: int, tid: int, name: str) -> None:
        self({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})

    track = thread  # a GPU's phases and markers are threads of its process here

    def counter(self, name: str, pid: int, ts: Stamp, value: float) -> None:
        """A counter sample (most of a trace) at ``ts`` (``stamp``): ``value`` must be finite."""
        head = self._counters.get((name, pid))
        if head is None:
            head = self._counters[(name, pid)] = f'{{"ph":"C","name":{dumps(name)},"pid":{pid},"tid":0,"ts":'
        self.raw(f'{head}{ts},"args":{{"value":{value!r}}}}}')

    def counters(self, name: str, pid: int, t: Floats, values: Floats, fmt: Fmt | None = None) -> None:
        """``counter`` at each of times ``t`` (seconds), of each value as ``fmt`` rounds it."""
        stamp, counter = self.stamp, self.counter
        vals = _listed(values) if fmt is None else fmt(values).tolist()
        for x, v in zip(_listed(t), vals, strict=True):
            counter(name, pid, stamp(x), v)
        self.flush(2000)

    def pcie(self, pid: int, ts: Stamp, rx: float, tx: float) -> None:
        self.raw(
            f'{{"ph":"C","name":"PCIe GB/s","pid":{pid},"tid":0,"ts":{ts},"args":{{"rx":{rx!r},"tx":{tx!r}}}}}'
        )

    def pcies(self, pid: int, t: Floats, rx: Floats, tx: Floats) -> None:
        """``pcie`` at each of times ``t`` of rx and tx in bytes/s (``gbps`` rounds them)."""
        stamp, pcie = self.stamp, self.pcie
        for x, r, w in zip(_listed(t), gbps(rx).tolist(), gbps(tx).tolist(), strict=True):
            pcie(pid, stamp(x), r, w)
        self.flush(2000)

    def _json(self, text: str) -> str:
        got = self._names.get(text)
        if got is None:
            got = self._names[text] = dumps(text)
        return got

    def _of(self, pid: int, tid: int) -> tuple[str, str]:
        got = self._who.get((pid, tid))
        if got is None:
            tj = dumps(tid)
            got = self._who[(pid, tid)] = (f'"pid":{dumps(pid)},"tid":{tj}', f'{{"cpu":0,"tid":{tj},"ts":')
        return got

    def begin(self, pid: int, tid: int, ts: Stamp, nid: int, name: str) -> None:
        who = self._of(pid, tid)[0]
        self.raw(f'{{"ph":"B","name":{self._json(name)},"cat":"stack",{who},"ts":{ts},"sf":{nid}}}')

    def end(self, pid: int, tid: int, ts: Stamp, name: str) -> None:
        self.raw(f'{{"ph":"E","name":{self._json(name)},"cat":"stack",{self._of(pid, tid)[0]},"ts":{ts}}}')

    def move(self, pid: int, tid: int, ts: Stamp, _move: int, ends: tuple, begins: tuple) -> None:
        """Stack slices ending (``ends``: names), then beginning (``begins``: (stack id, name))."""
        for name in ends:
            self.end(pid, tid, ts, name)
        for nid, name in begins:
            self.begin(pid, tid, ts, nid, name)

    def step(
        self, pid: int, tid: int, ts: Stamp, move: Move | None, body: Any, klass: str, sf: int | None
    ) -> None:
        """A stack sample: its slices' ``move`` (None: the stack before, nothing ends or begins), its
        sample (``sf``: its stack's leaf, None for an empty stack) and its instant (``body``)."""
        if move is not None:
            self.move(pid, tid, ts, *move)
        if sf is not None:
            self.sample(pid, tid, ts, klass, sf)
        self.instant(pid, tid, ts, body, sf)

    def sample(self, pid: int, tid: int, ts: Stamp, klass: str, sf: int) -> None:
        sample = f'{self._of(pid, tid)[1]}{ts},"name":{self._json(klass)},"sf":{sf},"weight":1}}'
        self.samples.write("," + sample if self.n_samples else sample)
        self.n_samples += 1

    @staticmethod
    def instant_body(name: str, args: dict) -> tuple[str, str]:
        return dumps(name), dumps(args)

    def instant(self, pid: int, tid: int, ts: Stamp, body: Any, sf: int | None) -> None:
        tail = "}" if sf is None else f',"sf":{sf}}}'
        who = self._of(pid, tid)[0]
        self.raw(f'{{"ph":"i","s":"t","name":{body[0]},{who},"ts":{ts},"args":{body[1]}{tail}')

    def span(self, pid: int, tid: int, name: str, t0: float, t1: float, args: dict) -> None:
        """A complete slice (a phase run, a marker)."""
        self(
            {
                "ph": "X",
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": _us(t0),
                "dur": _us(max(0.0, t1 - t0)),
                "args": args,
            }
        )

    def encoded(self, text: str, n: int) -> None:
        """``n`` events encoded elsewhere, joined by commas (after a flush)."""
        self.fh.write(("," if self.n else "") + text)
        self.n += n

    def flush(self, at_least: int = 1) -> None:
        """Write the events held if there are ``at_least`` of them."""
        if len(self._buf) >= at_least:
            self.fh.write(("," if self.n else "") + ",".join(self._buf))
            self.n += len(self._buf)
            self._buf.clear()


class _Proto:
    """The same events as Perfetto's protobuf TrackEvents (memtop.outputs.perfetto_pb): a process track per
    pid, counter tracks under it, named tracks for a GPU's phases and markers (overlapping markers
    on further lanes), thread tracks for stacks. Stacks go out as slices only (the flame chart):
    the JSON's ``samples`` are for chrome://tracing and speedscope, which do not read protobuf."""

    def __init__(self, fh: BinaryIO) -> None:
        self.w = pb.TraceWriter(fh)
        self.stamp, self.stamps = self.w.stamp, self.w.stamps
        self._procs: dict[int, int] = {}  # pid -> its process track
        self._tracks: dict[tuple[int, int], int] = {}  # (pid, tid) -> its track
        self._counters: dict[tuple[str, int], int] = {}
        self._lanes: dict[
            tuple[int, int], list[tuple[int, float]]
        ] = {}  # (pid, tid) -> [(track, busy until)]
        self._names: dict[tuple[int, int], str] = {}
        self._moves: dict[int, list[tuple[int, str | None, bytes]]] = {}  # a stack move's id -> its events
        self._steps: dict[tuple, list[tuple[int, str | None, bytes]]] = {}  # (track, move, instant) -> events
        self._json = 0  # ``n`` less the packets written: the count as the JSON's events

    @property
    def n(self) -> int:
        """The events as the JSON form counts them (its ``traceEvents``): a name's metadata event is a
        descriptor here, a PCIe sample two counters, a phase or marker two slice events, and a counter's
        repeated value, left out here (``TraceWriter.counter``), one all the same."""
        return self.w.n + self.w.repeats + self._json

    def process(self, pid: int, name: str) -> None:
        self._procs[pid] = self.w.process(pid, name)
        self._json += 1

    def _proc(self, pid: int) -> int:
        got = self._procs.get(pid)
        if got is None:  # (a pid the JSON names in its events only)
            got = self._procs[pid] = self.w.process(pid, f"pid {pid}")
        return got

    def thread(self, pid: int, tid: int, name: str) -> None:
        self._tracks[(pid, tid)] = self.w.thread(pid, tid, name, self._proc(pid))
        self._json += 1

    def track(self, pid: int, tid: int, name: str) -> None:
        self._names[(pid, tid)] = name
        self._tracks[(pid, tid)] = self.w.track(self._proc(pid), name)
        self._json += 1

    def _on(self, pid: int, tid: int) -> int:
        got = self._tracks.get((pid, tid))
        if got is None:
            got = self._tracks[(pid, tid)] = self.w.thread(pid, tid, f"thread {tid}", self._proc(pid))
        return got

    def counter(self, name: str, pid: int, ts: Stamp, value: float) -> None:
        self.w.counter(self._counter_track(name, pid), ts, value)

    def _counter_track(self, name: str, pid: int) -> int:
        uuid = self._counters.get((name, pid))
        if uuid is None:
            uuid = self._counters[(name, pid)] = self.w.counter_track(self._proc(pid), name)
        return uuid

    def counters(self, name: str, pid: int, t: Floats, values: Floats, fmt: Fmt | None = None) -> None:
        """``counter`` of each value as ``fmt`` rounds it; a value equal to the one before is left out
        before it is rounded (it rounds the same), the rest where the writer finds them."""
        import numpy as np

        t, v = np.asarray(t, dtype=np.float64), np.asarray(values, dtype=np.float64)
        if fmt is not None and len(v):
            changed = np.r_[True, v[1:] != v[:-1]]
            self._json += len(v) - int(changed.sum())
            t, v = t[changed], fmt(v[changed])
        self.w.counters(self._counter_track(name, pid), t, v)

    def pcie(self, pid: int, ts: Stamp, rx: float, tx: float) -> None:
        self.counter("PCIe GB/s rx", pid, ts, rx)  # (the JSON importer's names for its two args)
        self.counter("PCIe GB/s tx", pid, ts, tx)
        self._json -= 1

    def pcies(self, pid: int, t: Floats, rx: Floats, tx: Floats) -> None:
        self.counters("PCIe GB/s rx", pid, t, rx, gbps)
        self.counters("PCIe GB/s tx", pid, t, tx, gbps)
        self._json -= len(t)

    def move(self, pid: int, tid: int, ts: Stamp, move: int, ends: tuple, begins: tuple) -> None:
        uuid = self._on(pid, tid)
        self.w.events((uuid, move), uuid, ts, self._events((move, ends, begins)))

    def _events(self, move: Move) -> list[tuple[int, str | None, bytes]]:
        """A move's slice events (``TraceWriter.events``'), made once per move."""
        events = self._moves.get(move[0])
        if events is None:
            events = [(pb.SLICE_END, None, b"")] * len(move[1]) + [
                (pb.SLICE_BEGIN, n, b"") for _, n in move[2]
            ]
            if len(self._moves) >= _KEPT:
                self._moves.clear()
            self._moves[move[0]] = events
        return events

    def step(
        self, pid: int, tid: int, ts: Stamp, move: Move | None, body: Any, klass: str, sf: int | None
    ) -> None:
        """A stack sample's slices' move and its instant, one run of packets made once per (track, move,
        instant) (``TraceWriter.events``; the protobuf has the stack's slices only: chrome://tracing's
        samples are JSON's)."""
        uuid = self._on(pid, tid)
        key = (uuid, 0 if move is None else move[0], body)  # (move ids start at 1)
        events = self._steps.get(key)
        if events is None:
            events = [*(() if move is None else self._events(move)), (pb.INSTANT, body[0], body[1])]
            if len(self._steps) >= _KEPT:
                self._steps.clear()
            self._steps[key] = events
        self.w.events(key, uuid, ts, events)

    @staticmethod
    def instant_body(name: str, args: dict) -> tuple[str, bytes]:
        return name, pb.debug_args(args)

    def span(self, pid: int, tid: int, name: str, t0: float, t1: float, args: dict) -> None:
        """A complete slice, on the first lane of its track free at ``t0`` (slices on a track nest)."""
        t1 = max(t0, t1)
        lanes = self._lanes.setdefault((pid, tid), [(self._on(pid, tid), -math.inf)])
        k = next((i for i, (_, busy) in enumerate(lanes) if busy <= t0), None)
        if k is None:
            k = len(lanes)
            base = self._names.get((pid, tid), f"thread {tid}")
            lanes.append((self.w.track(self._proc(pid), f"{base} {k + 1}"), t1))
        uuid = lanes[k][0]
        lanes[k] = (uuid, t1)
        self.w.slice(uuid, self.stamp(t0), self.stamp(t1), name, pb.debug_args(args))
        self._json -= 1
        self.w.flush(1000)  # (a slice's packets are large: an 8-hour run's markers would be ~10 MB)

    def flush(self, at_least: int = 1) -> None:
        self.w.flush(at_least)


Sink = _Json | _Proto


Sampled = tuple[float, int, "ThreadStack | None"]  # a stack sample: its time, pid and main thread
# a move between stacks: its id, the frames it ends (names, innermost first), those it begins ((id, name))
Move = tuple[int, tuple[str, ...], tuple[tuple[int, str], ...]]
_MANY = 64  # samples whose stamps are made over an array (fewer: one by one)


class _Stacks:
    """Stack samples of main threads: nested slices (the flame chart), their stack ids and samples."""

    def __init__(self, out: Sink) -> None:
        self.out = out
        self.nodes: dict[tuple[int | None, str], int] = {}  # (parent id, frame) -> stackFrames id
        self.frames: dict[int, dict] = {}
        self.open: dict[
            tuple[int, int], tuple[list[tuple[int, str]], float]
        ] = {}  # (pid, tid) -> (path, last t)
        # per stack (the recording hands on one tuple per stored stack; holding it keeps its id
        # unique): the stack, its path of (stackFrames id, frame name), root first, and leaf
        self._paths: dict[int, tuple[tuple, list[tuple[int, str]], int | None]] = {}
        self._instants: dict[tuple[int, str, bool], tuple[tuple, object]] = {}  # -> (stack, encoded)
        # (leaf before, leaf after) -> (the move's id, the frames it ends, the frames it begins)
        self._moves: dict[tuple[int | None, int | None], tuple[int, tuple[str, ...], tuple]] = {}
        self._ids = 0
        self._last: tuple[float, Stamp] = (math.nan, None)  # the newest (time, stamp)

    def _node(self, parent: int | None, label: str) -> int:
        key = (parent, label)
        nid = self.nodes.get(key)
        if nid is None:
            nid = len(self.nodes) + 1
            self.nodes[key] = nid
            self.frames[nid] = {"name": label, "category": "python"}
            if parent is not None:
                self.frames[nid]["parent"] = parent
        return nid

    def _path(self, frames: tuple) -> tuple[list[tuple[int, str]], int | None]:
        got = self._paths.get(id(frames))
        if got is None:
            path: list[tuple[int, str]] = []
            parent = None
            for fr in reversed(frames):  # root first
                parent = self._node(parent, f"{fr.name} {fr.file.rsplit('/', 1)[-1]}:{fr.line}")
                path.append((parent, fr.name))
            if len(self._paths) >= _KEPT:  # a reader that hands on a new tuple per sample: stay flat
                self._paths.clear()
            got = self._paths[id(frames)] = (frames, path, parent)
        return got[1], got[2]

    def feed(self, samples: list[Sampled], seen: dict[int, float], named: set[int], cut: float) -> None:
        """Each sample's main thread, once per process and time (``seen``: each pid's last), from ``cut``
        on: the process named at its first (``named``), the open stack's slices moved to the sample's,
        its sample and its instant. One loop, the same stack again a dict lookup, the stamps made at
        once: an 8-hour run holds ~100,000 samples, most of them the stack before."""
        out, opened, paths, instants = self.out, self.open, self._paths, self._instants
        stamps = out.stamps([x[0] for x in samples]) if len(samples) >= _MANY else None
        for j, (t, pid, m) in enumerate(samples):
            if m is None or t < cut or seen.get(pid) == t:
                continue
            seen[pid] = t
            tid, frames = m.tid, m.frames
            if pid not in named:
                named.add(pid)
                out.process(pid, f"pid {pid}")
                out.thread(pid, tid, "main (stacks)")
            got = paths.get(id(frames))
            path, leaf = (got[1], got[2]) if got is not None else self._path(frames)
            key = (pid, tid)
            cur, last = opened.get(key) or ([], t)
            if cur and t - last > STALE_S:
                self._close(key, cur, last + SAMPLE_S)
                cur = []
            ts = self._stamp(t) if stamps is None else stamps[j]
            move = None if cur and cur[-1][0] == leaf else self._move(cur, path)  # (a stack to itself: none)
            opened[key] = (path, t)
            body = instants.get((id(frames), m.klass, m.owns_gil))
            out.step(pid, tid, ts, move, body[1] if body is not None else self._instant(m), m.klass, leaf)

    def _move(self, cur: list, path: list) -> Move:
        """From the open stack ``cur`` to ``path``: the frames they do not share end (innermost first),
        then ``path``'s begin. A stack's path is known by its leaf's id (the frames are a tree): each
        move is worked out once."""
        move = (cur[-1][0] if cur else None, path[-1][0] if path else None)
        got = self._moves.get(move)
        if got is None:
            common = 0
            while common < min(len(cur), len(path)) and cur[common][0] == path[common][0]:
                common += 1
            ends = tuple(name for _, name in reversed(cur[common:]))
            if len(self._moves) >= _KEPT:
                self._moves.clear()
            self._ids += 1
            got = self._moves[move] = (self._ids, ends, tuple(path[common:]))
        return got

    def _instant(self, m: ThreadStack) -> object:
        """The body of a sample's instant event (``Sink.instant_body``): class, file:line, source and GIL."""
        w, code = site(m.frames)
        args = {"class": m.klass, "where": w, "code": code, "gil": m.owns_gil}
        name = f"{m.klass}: {m.frames[0].name if m.frames else '?'}"
        if len(self._instants) >= _KEPT:
            self._instants.clear()
        body = self.out.instant_body(name, args)
        # (the frames held with it: while they are, no other stack takes their id)
        self._instants[(id(m.frames), m.klass, m.owns_gil)] = (m.frames, body)
        return body

    def _close(self, key: tuple[int, int], path: list, t: float) -> None:
        if path:
            self.out.move(key[0], key[1], self._stamp(t), *self._move(path, []))

    def _stamp(self, t: float) -> Stamp:
        """The sink's stamp of ``t``, made once for a sample's slices and its instant."""
        if t != self._last[0]:
            self._last = (t, self.out.stamp(t))
        return self._last[1]

    def finish(self, hi: float) -> None:
        for key, (path, last) in self.open.items():
            self._close(key, path, min(last + SAMPLE_S, hi) if hi >= last else last)
        self.open = {}


def _check(rec: Recording, gpu: int | None, t_from: float | None, t_to: float | None) -> tuple:
    """(lo, hi, the GPUs' metadata) of a --gpu/--from/--to choice, or one clear error."""
    lo, hi = rec.span(t_from, t_to)
    gpus = [g for g in rec.meta.get("gpus") or [] if isinstance(g, dict) and isinstance(g.get("index"), int)]
    known = {g["index"] for g in gpus}
    if gpu is not None and gpu not in known:
        raise UserError(
            f"no GPU {gpu} in this recording (it has: {', '.join(map(str, sorted(known))) or 'none'})"
        )
    return lo, hi, gpus


def _walk(
    rec: Recording,
    out: Sink,
    gpu: int | None,
    t_from: float | None,
    t_to: float | None,
    progress: bool | None,
    whole: bool = False,
) -> tuple[float, float, _Stacks]:
    """Every event of the recording (a --gpu/--from/--to choice of it) into ``out``: the tracks'
    names, counters, stacks, phases and markers; returns (lo, hi, the stacks seen). ``whole``: read
    as one window (``_columns_walk``)."""
    lo, hi, gpus_meta = _check(rec, gpu, t_from, t_to)
    out.process(HOST_PID, "host")
    for g in gpus_meta:
        if gpu is not None and g["index"] != gpu:
            continue
        pid = GPU_PID_BASE + g["index"]
        out.process(pid, f"GPU {g['index']} {g.get('name')}")
        out.track(pid, 1, "phases")
        out.track(pid, 2, "markers")
    stacks = _columns_walk(rec, out, lo, hi, _Carry(lo if t_from else -math.inf, gpu), progress, whole)
    stacks.finish(hi)
    for m in rec.markers():
        if m.t1 < lo or m.t0 > hi:
            continue
        for g in gpus_meta or [{"index": 0}]:
            if gpu is not None and g["index"] != gpu:
                continue
            out.span(
                GPU_PID_BASE + g["index"],
                2,
                f"marker {m.name}",
                m.t0,
                m.t1,
                {"label": m.label, "facts": m.facts},
            )
    return lo, hi, stacks


WINDOW_S = 900.0  # the column walk's span read at a time (memory stays flat whatever the length)
_CPU_LIST = re.compile(rb'"cpu_pct":\[([^\]]*)\]')  # the host's (a process's cpu_pct is a number)


class _NoColumns(Exception):
    """The phase slices cannot be had window by window (the column scan's windows did not join, or
    it could not read the recording): the export is made again as one window, else refused."""


def _columns_walk(
    rec: Recording, out: Sink, lo: float, hi: float, state: _Carry, progress: bool | None, whole: bool
) -> _Stacks:
    """The events of [lo, hi] (with --gpu those of its GPU, its processes' stacks and the host's
    counters), read a window of ``WINDOW_S`` at a time (``whole``: one) through the one reader of a
    recording (memtop.storage.reader, memtop.storage.parts: column blocks where they cover a window,
    else rows; a damaged part skipped and noted), never Frame by Frame. The phases are the column
    scan's labels (memtop.analysis.colscan, a window at a time: the report's)."""
    from memtop.analysis import colscan

    blocks = _Reads(rec)
    fresh = state.cut > -math.inf
    n = 1 if whole else _windows(rec, lo, hi)
    # (a window without a Frame, where a recording stopped for longer: one window)
    windows = colscan.chunk_spans(rec, lo if fresh else None, lo, hi, n) or colscan.chunk_spans(
        rec, lo if fresh else None, lo, hi, 1
    )
    assert windows is not None  # (one window always has one)
    stacks = _Stacks(out)
    mine = None if state.only is None else GPU_PID_BASE + state.only  # --gpu: its phases alone
    with _phase_pass(rec, windows, lo) as phases, Progress("exporting", hi - lo, enabled=progress) as bar:
        try:
            # each window's rows from the last Frame of the one before (those older were held there)
            after = math.nextafter(lo, -math.inf) if fresh else -math.inf
            for a, b in ((a, b) for _, a, b in windows):
                _window(rec, blocks, out, stacks, state, after, a, b)
                for args in phases.ready():  # (written as they come: none are held to the end)
                    if mine is None or args[0] == mine:
                        out.span(*args)
                out.flush()
                after = b
                bar.update(b - lo)
        except sqlite3.DatabaseError as e:
            raise UserError(f"{rec.path} is damaged or truncated ({e})") from None
        for args in phases.rest():
            if mine is None or args[0] == mine:
                out.span(*args)
    return stacks


def _windows(rec: Recording, lo: float, hi: float) -> int:
    """How many windows [lo, hi] is read in: one per WINDOW_S, at most one per _WINDOW_FRAMES Frames
    (a damaged time far ahead must not make a billion windows of nothing)."""
    frames = rec.query(f"SELECT count(*) FROM frame WHERE t>=? AND t<=? AND {SANE_T}", (lo, hi)).fetchone()[0]
    return max(1, min(int((hi - lo) // WINDOW_S), frames // _WINDOW_FRAMES))


_WINDOW_FRAMES = 100


PHASE_WORKER = True  # the phase slices of a recording of several windows found in a process of their own


class _Slices:
    """The phase slices (``Sink.span``'s arguments) of the windows, in time order: ``ready`` those
    found so far (without waiting), ``rest`` the others as they come; it raises _NoColumns where they
    cannot be had window by window (then the slices handed out so far may not be the column scan's:
    the export starts again as one window)."""

    def __init__(self, rec: Recording, windows: list, lo: float, conn: Connection | None = None) -> None:
        self._args = (rec, windows, lo)
        self._conn = conn  # the worker's end of the pipe, or None: found here, in ``rest``
        self._end: tuple[str | None] | None = None  # the worker's last word, once ``ready`` met it

    def ready(self) -> list[tuple]:
        got: list[tuple] = []
        while self._conn is not None and self._conn.poll():
            more = self._recv()
            if not isinstance(more, list):  # (the end, or an error: ``rest`` says which)
                self._end = (more,)
                self._conn = None
                break
            got += more
        return got

    def rest(self) -> Iterator[tuple]:
        if self._end is not None:
            error = self._end[0]
        elif self._conn is None:
            got: list[tuple] = []
            error = _phase_slices(*self._args, got.extend)
            if not error:
                yield from got
        else:
            while isinstance(more := self._recv(), list):
                yield from more
            error = more
        if error:
            raise _NoColumns(error)

    def _recv(self) -> list[tuple] | str | None:
        try:
            return self._conn.recv()  # type: ignore[union-attr]
        except EOFError:  # (it died: the export is made again as one window)
            return "the phase worker ended without its slices"


@contextlib.contextmanager
def _phase_pass(rec: Recording, windows: list, lo: float) -> Iterator[_Slices]:
    """The phase slices of the windows (``_phase_slices``), found while the block is run: in another
    process where there are several windows (the events' and the labels' reads each take about half
    the time: the export ends in about half the time on two cores), which sends each window's as it
    goes; else here when asked for."""
    if not PHASE_WORKER or len(windows) < 2:
        yield _Slices(rec, windows, lo)
        return
    import multiprocessing

    # fork is cheap but unsafe in a process with threads (a test runner, the gzip thread): spawn there
    ctx = (
        multiprocessing.get_context("fork")
        if threading.active_count() == 1
        else multiprocessing.get_context("spawn")
    )
    got, put = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=_phase_worker, args=(rec.path, windows, lo, put), daemon=True)
    worker.start()
    put.close()
    try:
        yield _Slices(rec, windows, lo, got)
    finally:
        if worker.is_alive():  # (an export that failed before it asked for them)
            worker.terminate()
        worker.join()
        got.close()


def _phase_worker(path: Path, windows: list, lo: float, put: Connection) -> None:
    """Each window's phase slices sent as found, then None (or why there are none: a str)."""
    rec = Recording(path)
    try:
        put.send(_phase_slices(rec, windows, lo, put.send))
    finally:
        rec.close()


def _phase_slices(rec: Recording, windows: list, lo: float, emit: Callable[[list[tuple]], Any]) -> str | None:
    """The phase slices (``Sink.span``'s arguments) of the column scan's labels over ``windows``
    (``colscan.chunk_spans``), handed to ``emit`` a window's at a time; or why they cannot be had so
    (some may have been handed out by then). A range without a Frame has none."""
    from memtop.analysis import colscan

    phases = _Phases(lo)
    try:
        for k, (read_from, a, b) in enumerate(windows):
            with colscan.no_gc():
                try:
                    part = colscan.scan_part(rec, read_from, a, b, None, edge=k > 0, aggregates=False)
                except DECODE_ERRORS:  # a host sample the blocks hold whose JSON is damaged: the rows,
                    # each checked as it is read (as scan_columns does)
                    part = colscan.scan_part(
                        rec, read_from, a, b, None, edge=k > 0, aggregates=False, host_blocks=False
                    )
            phases.add(part, first=k == 0)
            del part
            if phases.slices:
                emit(phases.slices)
                phases.slices = []
        emit(phases.finish(colscan.join_parts(phases.parts)[0]))
        return None
    except colscan.NoFrames:
        return None if len(windows) == 1 else "a window without a Frame"
    except (colscan.Unusual, _NoColumns, *DECODE_ERRORS, sqlite3.DatabaseError) as e:
        return str(e) or type(e).__name__


class _Reads:
    """The host and host_proc blocks a window's host counters are read from where they cover it
    (their index is read once: ``Blocks`` counts the rows of the stream's table), with the CPU mean
    ``parts.host_blocks`` does not read."""

    def __init__(self, rec: Recording) -> None:
        self.host = Blocks(rec.db, "host", WRITTEN_STREAMS["host"], BLOCK_TABLES["host"])
        self.host_proc = Blocks(rec.db, "host_proc", _HOST_PROC_READ, None, HOST_PROC_ADDED)
        self.mean = True  # the host blocks hold the CPU mean (WRITTEN_STREAMS; a block of before does not)

    def host_rows(self, rec: Recording, lo: float, hi: float) -> dict | None:
        """The host blocks' rows in [lo, hi], with their CPU mean where they hold it."""
        got = self.host.read(lo, hi) if self.mean else None
        if got is None and self.mean:  # (a block without the mean, or damage: read without it)
            self.mean = False
            self.host = Blocks(rec.db, "host", BLOCK_STREAMS["host"], BLOCK_TABLES["host"])
        return got if got is not None else self.host.read(lo, hi)


class _Phases:
    """The phase slices of the column scan's labels, found a window at a time: the hysteresis carried
    from one window's bins to the next (``binscan.settle_more``), each run's slice written once the bin
    after its last is known, with that last bin's Label (read while its window's bins are held: an
    8-hour run's features would take ~15 MiB a GPU). The windows' bins, slimmed, are joined at the end
    (``colscan.join_parts``): its checks that each window took up where the one before ended, and its
    labels, which must be the ones found here."""

    def __init__(self, lo: float) -> None:
        self.lo = lo
        self.slices: list[tuple] = []
        clf = Classifier()
        self.bin_s, self.warmup_bins, self.confirm = clf.bin_s, clf.warmup_bins, clf.confirm
        self.parts: list = []  # the windows' scans, slimmed
        self.at: dict[int, Settled] = {}  # each GPU's hysteresis after its bins so far
        self.rid: dict[int, list[np.ndarray]] = {}  # each GPU's rule ids that stand, per window
        # each GPU's last run: its label, start and last bin's Label (None in the warm-up)
        self.open: dict[int, tuple[str, float, Label | None]] = {}

    def add(self, part: Any, first: bool) -> None:
        """A window's scan (``colscan.scan_part``): the slices of the runs that end in it."""
        import numpy as np

        from memtop.analysis.binscan import LabelSeq, settle_more

        for gpu, (bins, rules) in part.bins.items():
            rid, stable, self.at[gpu] = settle_more(
                rules, self.warmup_bins, self.confirm, self.bin_s, self.at.get(gpu, (("", "", 0), 0))
            )
            # (the first window's bins before its first kept only warmed the hysteresis up)
            seq = LabelSeq(bins, rules, rid, stable, part.first.get(gpu, 0) if first else 0)
            self.rid.setdefault(gpu, []).append(seq.rid)
            k0 = int(np.searchsorted(seq.t + self.bin_s, self.lo, "right"))  # (ending by lo: left out)
            label = seq.label[k0:]
            if len(label):
                start = np.flatnonzero(np.r_[True, label[1:] != label[:-1]]).tolist()
                for i, j in zip(start, [*start[1:], len(label)], strict=True):
                    self._run(gpu, str(label[i]), float(seq.t[k0 + i]), seq, k0 + j - 1)
        self.parts.append(part._replace(bins={g: _slim(*x) for g, x in part.bins.items()}))

    def _run(self, gpu: int, label: str, t0: float, seq: LabelSeq, last: int) -> None:
        """A run of ``label`` from ``t0`` to bin ``last`` of ``seq``: the open run's end, or its sequel."""
        run = self.open.get(gpu)
        if run is not None and run[0] == label:  # the same run, on from the window before
            t0 = run[1]
        else:
            self._close(gpu)
        self.open[gpu] = (label, t0, None if label == "warmup" else seq[last])

    def _close(self, gpu: int) -> None:
        run = self.open.pop(gpu, None)
        if run is not None and run[2] is not None:
            self.slices.append(_slice_args(gpu, run[0], run[1], run[2], self.bin_s))

    def finish(self, labels: dict[int, LabelSeq]) -> list[tuple]:
        """Every slice, once the join (``labels``) has held the windows to one pass."""
        import numpy as np

        for gpu in list(self.open):
            self._close(gpu)
        if set(labels) != set(self.rid) or any(
            not np.array_equal(labels[g].rid, np.concatenate(r)) for g, r in self.rid.items()
        ):
            raise _NoColumns("the windows' labels are not the joined pass's")
        return self.slices


def _slim(bins: GpuBins, rules: Rules) -> tuple[GpuBins, Rules]:
    """A window's bins and rules as far as ``colscan.join_parts`` reads them (the bins' starts and
    graphics, the rules but their sub-tags)."""
    # (copies: a slice of a column, even an empty one, would hold the whole column)
    empty = copy.deepcopy(bins.take(len(bins)))
    return replace(empty, t=bins.t.copy(), graphics=bins.graphics.copy()), copy.deepcopy(
        replace(rules, subs={})
    )


class _Carry:
    """What a window's events depend on from the windows before: the samples already out, the stack
    processes named; with --gpu (``only``) its state's processes and when each was first shown on it."""

    def __init__(self, cut: float, only: int | None) -> None:
        self.cut = cut  # with --from, parts sampled before it are left out
        self.only = only
        self.gpu_t: dict[int, float] = {}
        self.host_t = -math.inf
        self.stack_t: dict[int, float] = {}
        self.named: set[int] = set()
        self.state: tuple[int, ...] | None = None  # --gpu: its newest state's processes
        self.seen: dict[int, float] = {}  # --gpu: each of its processes, the first Frame that shows it

    def show(self, pids: Iterable[int], t: float) -> None:
        """``pids`` shown on --gpu's GPU at the Frame at ``t``."""
        for p in pids:
            if self.seen.get(p, math.inf) > t:
                self.seen[p] = t


def _held(times: np.ndarray, ft: np.ndarray, last: float, cut: float) -> np.ndarray:
    """The rows (by ``times``, ascending) the Frames at ``ft`` hold, each once, newer than ``last``
    (the newest already out) and not before ``cut``."""
    import numpy as np

    r = distinct(np.searchsorted(times, ft, "right") - 1)
    r = r[r >= 0]
    t = times[r]
    return r[(t > last) & (t >= cut)]


def _window(
    rec: Recording, blocks: _Reads, out: Sink, stacks: _Stacks, st: _Carry, after: float, a: float, b: float
) -> None:
    """The events of the Frames in [a, b], from the rows in (after, b]."""
    import numpy as np

    from memtop.analysis import colscan

    ft_list = colscan.frame_times(rec, a, b)
    ft = np.array(ft_list, dtype=np.float64)
    _gpu_window(rec, out, st, ft, after, b)
    _host_window(rec, blocks, out, st, ft, after, b)
    got = colscan._Stacks(rec, ft_list, after, b, None, main_threads=True)
    mains = [(d.pid, d.main) for d, _, _ in got.dumps]
    held = got.held(0)
    if st.only is not None:  # its processes' stacks, from the first Frame that shows each on it
        _gpu_processes(rec, st, ft, after, b)
        first = got.first.tolist()
        held = (x for x in list(held) if st.seen.get(mains[x[1]][0], math.inf) <= ft_list[first[x[0]]])
    times = got.times
    stacks.feed([(times[i], *mains[k]) for i, k in held], st.stack_t, st.named, st.cut)


def _gpu_processes(rec: Recording, st: _Carry, ft: np.ndarray, after: float, b: float) -> None:
    """--gpu: the processes its states of (after, b] show (a state's from the first Frame that holds it)."""
    import numpy as np

    sql = "SELECT t, gpu, uuid, name, mig, link, processes FROM gpu_state WHERE gpu=? AND t>? AND t<=? ORDER BY t"
    rows = rec.query(sql, (st.only, after, b)).fetchall()
    if st.state is None and after > -math.inf:  # (--from: the state as it stood there)
        rows[:0] = rec.query(
            sql.replace("t>? AND ", "").replace("BY t", "BY t DESC LIMIT 1"), (st.only, after)
        )
    if not len(ft):
        return
    ts = np.array([r[0] for r in rows], dtype=np.float64)
    k = np.searchsorted(ft, ts, "left")  # each state's first Frame, held until the next state
    ends = np.append(ts[1:], np.inf)
    if st.state is not None and (not len(ts) or ft[0] < ts[0]):
        st.show(st.state, float(ft[0]))
    for r, at, end in zip(rows, k.tolist(), ends.tolist(), strict=True):
        st.state = tuple(p.pid for p in rec.gpu_state(r)[4])
        if at < len(ft) and ft[at] < end:
            st.show(st.state, float(ft[at]))


_GPU_COLS = (*dict.fromkeys(attr for _, attr, _ in COUNTERS), "pcie_rx", "pcie_tx")


def _gpu_window(rec: Recording, out: Sink, st: _Carry, ft: np.ndarray, after: float, b: float) -> None:
    """The GPU counters of the rows (``reader.columns``: decoded, a damaged row skipped) the Frames hold."""
    import numpy as np

    from memtop.storage.reader import columns

    got = columns(rec, after, b, _GPU_COLS)
    ta, gi, cols = got.t, got.gpu, got.cols
    for g in distinct(gi).tolist():
        if st.only is not None and g != st.only:
            continue
        at = np.flatnonzero(gi == g)
        rows = at[_held(ta[at], ft, st.gpu_t.get(g, -math.inf), st.cut)]
        if not len(rows):
            continue
        st.gpu_t[g] = float(ta[rows[-1]])
        pid, t = GPU_PID_BASE + g, ta[rows]
        for name, attr, scale in COUNTERS:
            v = cols[attr][rows] * scale
            ok = np.isfinite(v)
            out.counters(name, pid, t[ok], v[ok])
        rx, tx = cols["pcie_rx"][rows], cols["pcie_tx"][rows]
        some = ~(np.isnan(rx) & np.isnan(tx))  # (a NULL, or a value out of range, reads as None)
        out.pcies(pid, t[some], np.nan_to_num(rx[some]), np.nan_to_num(tx[some]))


_HOST_PROC_READ = (("t", "f"), ("pid", "i"), ("cpu_pct", "f"), ("name", "s"))
# the host samples the Frames hold: their times and CPU means, and their processes' rows (time, pid,
# name, CPU %)
HostRows = tuple[list[float], list[float], "np.ndarray", "np.ndarray", list[str], "np.ndarray"]


def _host_window(
    rec: Recording, blocks: _Reads, out: Sink, st: _Carry, ft: np.ndarray, after: float, b: float
) -> None:
    """The host's CPU % and its processes' of the samples the Frames hold: from the column blocks where
    they hold every figure drawn (not with --gpu: which processes are on a GPU is in the JSON), else
    each sample decoded (``parts.hosts``)."""
    import numpy as np

    got = None
    if st.only is None and blocks.host.end > b and blocks.host_proc.end > b:
        with contextlib.suppress(*DECODE_ERRORS):  # (a sample's JSON that does not inflate)
            got = _host_blocks(rec, blocks, st, ft, after, b)
    if got is None:
        got = _host_samples(rec, st, ft, after, b)
    t, cpu, tp, pids, names, cpus = got
    if not t:
        return
    st.host_t = t[-1]
    finite = [k for k, c in enumerate(cpu) if math.isfinite(c)]
    out.counters("CPU %", HOST_PID, [t[k] for k in finite], [cpu[k] for k in finite], tenths)
    keys, code = _processes(pids, names)
    order = np.argsort(code, kind="stable")  # each process's rows, in time order
    bounds = np.searchsorted(code[order], np.arange(len(keys) + 1))
    for k, (pid, name) in enumerate(keys):
        at = order[bounds[k] : bounds[k + 1]]
        v = cpus[at]
        ok = np.isfinite(v)
        out.counters(f"CPU % {pid} {name}", HOST_PID, tp[at][ok], v[ok], tenths)


def _host_samples(rec: Recording, st: _Carry, ft: np.ndarray, after: float, b: float) -> HostRows:
    """``HostRows`` of the host rows of (after, b], each decoded (one that does not is skipped and
    noted, as the Frames skip it); with --gpu, the processes on its GPU shown from their sample's Frame."""
    import numpy as np

    from memtop.storage import parts

    seed = after if after > -math.inf else None  # (the chain the first row is deflated against)
    read = [
        r for r in parts.hosts(rec, parts.host_rows(rec, after, b, seed), host_from_blob)[0] if r[0] > after
    ]
    ht = np.array([r[0] for r in read], dtype=np.float64)
    hs = _held(ht, ft, st.host_t, st.cut).tolist()
    samples = [read[h][2] for h in hs]
    if st.only is not None:
        shown = ft[np.searchsorted(ft, ht[hs], "left")].tolist()  # each sample's first Frame
        for s, f in zip(samples, shown, strict=True):
            st.show((p.pid for p in s.procs if st.only in p.gpus), f)
    procs = [(s.t, p) for s in samples for p in s.procs]
    return (
        [s.t for s in samples],
        [sum(s.cpu_pct) / max(1, len(s.cpu_pct)) for s in samples],
        np.array([t for t, _ in procs], dtype=np.float64),
        np.array([p.pid for _, p in procs], dtype=np.int64),
        [p.name for _, p in procs],
        np.array([p.cpu_pct for _, p in procs], dtype=np.float64),
    )


def _host_blocks(
    rec: Recording, blocks: _Reads, st: _Carry, ft: np.ndarray, after: float, b: float
) -> HostRows | None:
    """``HostRows`` from the host and host_proc blocks (each sample's CPU mean: the blocks', or its
    JSON's list where they lack it); None where they cannot give them all."""
    import numpy as np

    from memtop.storage.parts import Blobs

    h = blocks.host_rows(rec, float(np.nextafter(after, np.inf)), b)
    if h is None:
        return None
    ht, count = h["t"], h["procs"]
    if len(ht) > 1 and not (np.diff(ht) > 0).all():
        return None
    if (count < 0).any():  # (a sample whose processes' figures are in its JSON alone)
        return None
    hs = _held(ht, ft, st.host_t, st.cut)
    if not len(hs):
        none = np.zeros(0)
        return [], [], none, none.astype(np.int64), [], none
    p = blocks.host_proc.read(ht[0], ht[-1])
    if p is None or len(p["t"]) != count[count > 0].sum():
        return None
    start = np.cumsum(count) - count
    n = count[hs]
    rows = np.repeat(start[hs] - (np.cumsum(n) - n), n) + np.arange(n.sum())  # the held samples' rows
    tp = p["t"][rows]
    if not np.array_equal(tp, np.repeat(ht[hs], n)):
        return None
    if "cpu_mean" in h:
        cpu = h["cpu_mean"][hs].tolist()
    else:
        cpu = [_cpu_mean(raw) for raw in Blobs(rec, ht.tolist()).each(hs.tolist())]
    names = list(map(p["name"].__getitem__, rows.tolist()))
    return ht[hs].tolist(), cpu, tp, p["pid"][rows], names, p["cpu_pct"][rows]


def _processes(pids: np.ndarray, names: list[str]) -> tuple[list[tuple[int, str]], np.ndarray]:
    """The distinct (pid, name) of the rows in the order they first come, and each row's number in it."""
    import numpy as np

    known = {n: k for k, n in enumerate(dict.fromkeys(names))}
    pid_code = np.unique(pids, return_inverse=True)[1].reshape(-1).astype(np.int64)  # (no overflow below)
    key = pid_code * len(known) + np.fromiter(map(known.__getitem__, names), np.int64, len(names))
    _, first, which = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    at = np.sort(first).tolist()
    return [(pid, names[i]) for pid, i in zip(pids[at].tolist(), at, strict=True)], rank[which.reshape(-1)]


def _cpu_mean(raw: bytes) -> float:
    """The mean of a host sample's CPU %s (``HostSample.cpu_pct``), read from its JSON's list (a host
    block from before WRITTEN_STREAMS holds no mean)."""
    got = _CPU_LIST.findall(raw)
    if len(got) == 1:
        vals = json.loads(b"[" + got[0] + b"]")
        if all(type(v) is float for v in vals):
            return sum(vals) / max(1, len(vals))
    cpu = host_from_blob(raw).cpu_pct  # another layout: decoded whole
    return sum(cpu) / max(1, len(cpu))


def _meta(rec: Recording, lo: float, hi: float, gpu: int | None, extra: dict | None) -> dict:
    """The trace's metadata; ``damage``: the parts skipped as damaged (the report's notes), if any."""
    return {
        "clock": "CLOCK_MONOTONIC",
        "wall_offset_s": rec.meta.get("wall_offset"),
        "host": rec.meta.get("host"),
        "memtop_version": rec.meta.get("memtop_version"),
        "range_s": [round(lo - rec.t0, 3), round(hi - rec.t0, 3)],
        "gpu": gpu,
        **({"damage": list(rec.damage)} if rec.damage else {}),
        **(extra or {}),
    }


def write_trace(
    rec: Recording,
    fh: io.TextIOBase,
    gpu: int | None = None,
    t_from: float | None = None,
    t_to: float | None = None,
    progress: bool | None = None,
    extra: Iterable[tuple[str, int]] = (),
    extra_meta: dict | None = None,
    whole: bool = False,
) -> int:
    """Write the whole trace document (JSON) to ``fh``; returns the number of trace events. ``extra``
    events (a framework's trace on this clock, encoded: runs of JSON objects joined by commas and
    their number, memtop.agent.merge) join ``traceEvents``, and ``extra_meta`` the metadata."""
    import tempfile  # (here: the protobuf, the default, has no use for it; nor its imports' memory)

    _check(rec, gpu, t_from, t_to)
    fh.write('{"traceEvents":[')
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spill:
        emit = _Json(fh, spill)
        lo, hi, stacks = _walk(rec, emit, gpu, t_from, t_to, progress, whole)
        emit.flush()
        for text, n in extra:
            emit.encoded(text, n)
        fh.write('],"displayTimeUnit":"ms","stackFrames":{')
        fh.write(",".join(f'"{k}":{dumps(v)}' for k, v in stacks.frames.items()))
        fh.write('},"samples":[')
        spill.seek(0)
        while chunk := spill.read(1 << 20):
            fh.write(chunk)
    fh.write(f'],"metadata":{dumps(_meta(rec, lo, hi, gpu, extra_meta))}}}')
    return emit.n


def write_proto(
    rec: Recording,
    fh: BinaryIO,
    gpu: int | None = None,
    t_from: float | None = None,
    t_to: float | None = None,
    progress: bool | None = None,
    whole: bool = False,
) -> int:
    """The same trace as Perfetto's protobuf (``write_trace``'s metadata as the arguments of an
    instant "memtop trace" at its start, on the host's track); returns the number of events, counted
    as ``write_trace`` counts the JSON's (``_Proto.n``): the same for the same recording."""
    out = _Proto(fh)
    lo, hi, _ = _walk(rec, out, gpu, t_from, t_to, progress, whole)
    out.w.event(
        out._proc(HOST_PID),
        out.stamp(lo),
        pb.INSTANT,
        "memtop trace",
        pb.debug_args(_meta(rec, lo, hi, gpu, None)),
    )
    out.flush()
    return out.n - 1  # (the JSON holds the metadata beside its events)


def _slice_args(gpu: int, label: str, t0: float, b: Label, bin_s: float) -> tuple:
    """The phase slice (``Sink.span``'s arguments) of a run of ``label`` from the bin at ``t0`` to bin ``b``."""
    args = {"label": label, "confidence": b.confidence, "rule": b.rule, **b.evidence.as_dict()}
    return GPU_PID_BASE + gpu, 1, TITLES.get(label, label), t0, b.t + bin_s, args


@contextlib.contextmanager
def private_output(out: Path, force: bool, level: int = 6) -> Iterator[io.TextIOBase]:
    """A text stream whose content becomes ``out`` only when the block ends without an error
    (``private_binary``'s, as UTF-8)."""
    with (
        private_binary(out, force, level) as sink,
        io.TextIOWrapper(sink, encoding="utf-8", newline="\n") as text,
    ):
        yield text


@contextlib.contextmanager
def private_binary(out: Path, force: bool, level: int = 6) -> Iterator[BinaryIO]:
    """A byte stream whose content becomes ``out`` only when the block ends without an error.

    It is written to a temporary file beside ``out``, created like recordings are (0600, O_EXCL, so
    never through a symlink), then renamed over ``out``: a failed export leaves nothing, and --force
    replaces a link rather than writing through it. A name ending in .gz is gzip-compressed
    (at ``level``).
    """
    if os.path.lexists(out) and not force:
        raise UserError(f"{out} exists (use --force to overwrite)")
    if out.is_dir() and not out.is_symlink():
        raise UserError(f"{out} is a directory")
    tmp = out.with_name(f".{out.name}.{os.urandom(4).hex()}.tmp")  # (secrets' token_hex, without its imports)
    create_private(tmp, False)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        with open(fd, "wb", buffering=1 << 20) as raw:
            if out.name.endswith(".gz"):
                with io.BufferedWriter(_Deflater(raw, level), 1 << 20) as gz:
                    yield gz
            else:
                yield raw
        _publish(tmp, out, force)
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class _Deflater(io.RawIOBase):
    """Gzips what is written to it in a thread (zlib lets go of the GIL: the compression runs on
    another core beside the export; the bytes are those of a GzipFile written in line)."""

    def __init__(self, raw: BinaryIO, level: int = 6) -> None:
        import gzip

        self._gz = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level, mtime=0)
        self._chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)  # memory stays flat
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="memtop-gzip", daemon=True)
        self._thread.start()

    def writable(self) -> bool:
        return True

    def write(self, b: ReadableBuffer) -> int:
        if self._error is not None:
            raise self._error
        chunk = bytes(b)  # (b is the caller's buffer, reused)
        self._chunks.put(chunk)
        return len(chunk)

    def _run(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            if self._error is None:  # after an error, chunks are only taken (the writer never waits)
                # any error is kept: a thread that died would leave the writer blocked on a full queue
                try:
                    self._gz.write(chunk)
                except Exception as e:
                    self._error = e

    def close(self) -> None:
        if not self.closed:
            self._chunks.put(None)
            self._thread.join()
            super().close()
            if self._error is not None:
                raise self._error
            self._gz.close()


def _publish(tmp: Path, out: Path, force: bool) -> None:
    if force:
        os.replace(tmp, out)  # replaces a symlink itself, never its target
        return
    try:
        os.link(tmp, out, follow_symlinks=False)  # fails if out appeared meanwhile
    except FileExistsError:
        raise UserError(f"{out} exists (use --force to overwrite)") from None
    except OSError:  # a file system without hard links
        if os.path.lexists(out):
            raise UserError(f"{out} exists (use --force to overwrite)") from None
        os.replace(tmp, out)


def trace_format(out: Path) -> str:
    """The format a trace file's name asks for: JSON for .json and .json.gz, else Perfetto's protobuf."""
    return "json" if out.name.removesuffix(".gz").endswith(".json") else "proto"


def export_perfetto(
    rec: Recording,
    out: Path,
    force: bool = False,
    progress: bool | None = None,
    gpu: int | None = None,
    t_from: float | None = None,
    t_to: float | None = None,
    fmt: str | None = None,
) -> int:
    """``out`` in ``fmt`` ("json" or "proto"; None: as its name asks, ``trace_format``), a window at a
    time; where the column scan's windows do not join, or it cannot read a window, the file is started
    again as one window (as the report scans serially where its chunks do not join), else refused."""
    _check(rec, gpu, t_from, t_to)  # a bad choice fails before any file is made
    kw: dict[str, Any] = {"gpu": gpu, "t_from": t_from, "t_to": t_to, "progress": progress}
    with contextlib.suppress(_NoColumns):
        return _export(rec, out, force, fmt, **kw)
    try:
        return _export(rec, out, force, fmt, whole=True, **kw)
    except _NoColumns as e:
        raise UserError(f"{rec.path} is damaged or truncated ({e})") from None


def _export(rec: Recording, out: Path, force: bool, fmt: str | None, **kw: Any) -> int:
    if (fmt or trace_format(out)) == "json":
        with private_output(out, force) as fh:
            return write_trace(rec, fh, **kw)
    with private_binary(out, force) as bh:
        return write_proto(rec, bh, **kw)
