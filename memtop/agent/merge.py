"""One Perfetto file: memtop's recording of a capture's window and the framework traces taken in it.

memtop's part is export.write_trace's (counters, phase slices, stacks, on CLOCK_MONOTONIC µs); the
framework's events join it shifted onto that clock. PyTorch stamps its trace with its own time base
(CLOCK_REALTIME µs from ``baseTimeNanoseconds``, GPU activities converted by Kineto onto it), so the
offset is measured, not assumed: the agent records named marks inside the profiled window, each
bracketed by two CLOCK_MONOTONIC reads; a mark's timestamp lies inside its bracket, so the tightest
bracket gives the offset with a residual of half its width less the mark's own duration. Marks at
the window's end give the drift between the clocks over the window (NTP slewing the realtime clock).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from memtop.agent import chunks
from memtop.agent.injob import CLOCK_MARKS, MARK
from memtop.core.errors import UserError
from memtop.core.sanitize import clean
from memtop.core.wording import counted
from memtop.fleet.wire import Refused, check_size

FRAMEWORK_PID_BASE = 2_000_000  # framework tracks: synthetic pids clear of memtop's and real ones
PIDS_PER_CAPTURE = 1000  # a trace's own pids (the process, its GPUs) are renumbered inside a block
# the trace's categories a summary counts (Kineto's names)
COUNTED = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op", "python_function")
_FLOW = frozenset("stf")
# gzip level of the merged file: level 6 took ~1.5 s on one core for 100 MB of a busy loop's trace,
# the longest step left of memtop's merge; level 1 is several times faster for a file ~1/3 larger
GZIP_LEVEL = 1
# a trace's objects (two per event, ~150 bytes each): a real 1 GiB trace stays under; 1 GiB of `[]`
# (500 M lists, tens of GB parsed) does not
MAX_TRACE_OBJECTS = 20_000_000
_MARK_NAME = re.compile(re.escape(MARK) + "[0-9]{1,6}")
_NS_MAX = 1 << 63  # a CLOCK_MONOTONIC ns reading (beyond it, µs as float overflow or mean nothing)


@dataclass
class Capture:
    """One process's framework trace as its agent sent it (head: the answer's JSON), parsed into
    pieces (memtop.agent.chunks: here, or each in a worker process that keeps its events), with
    what the merge needs of it up front: memtop's clock marks and the trace's own pids."""

    pid: int
    head: dict
    pieces: list = field(default_factory=list)
    marks: list = field(default_factory=list)  # the events named like memtop's clock marks
    keys: list = field(default_factory=list)  # the trace's pids, in the order they first occur
    timing: dict = field(default_factory=dict)  # memtop's side: when it came, how long it took to read

    @classmethod
    def parse(cls, pid: int, head: dict, payload: bytes, workers: list | None = None) -> Capture:
        """The agent's answer, or one UserError line: its head is checked before the trace is read.
        ``workers`` (chunks.start_workers) parse a large trace in pieces; those not used are closed."""
        workers = workers if workers is not None else []
        if not _valid_head(head):
            chunks.close_all(workers)
            raise UserError(
                f"PID {pid}: the agent's answer is malformed (clock, window or warnings of the wrong shape)"
            )
        try:
            check_size(payload, MAX_TRACE_OBJECTS)
            cap = cls(pid, head, chunks.split(payload, workers))
        except Refused as e:
            raise UserError(f"PID {pid}: the framework's trace: {e}") from None
        except chunks.Malformed as e:
            raise UserError(f"PID {pid}: {e}") from None
        finally:
            chunks.close_all(workers)
        try:
            for p in cap.pieces:
                p.send(survey, p.marks)
            for p in cap.pieces:
                marks, keys = p.receive()
                cap.marks += marks
                cap.keys += [k for k in keys if k not in cap.keys]
        except chunks.Malformed as e:
            cap.close()
            raise UserError(f"PID {pid}: {e}") from None
        return cap

    def close(self) -> None:
        """Its workers end (the pieces parsed here are dropped)."""
        for p in self.pieces:
            p.close()


def survey(events: list, marks: bool) -> tuple[list, list]:
    """A piece's clock marks (events named like them; looked for only in a piece whose text holds
    the name) and its pids in the order they first occur (one pass in C: pids of equal value but
    another type, 1 and 1.0, count as the first one seen, and the other's events are dropped)."""
    found = [e for e in events if type(n := e.get("name")) is str and n.startswith(MARK)] if marks else []
    raw = [e.get("pid") for e in events]
    try:
        firsts = list(dict.fromkeys(raw))
    except TypeError:  # an unhashable pid (a list): keyed by its text, as framework_events does
        firsts = list(dict.fromkeys(map(_key, raw)))
    return found, [_key(k) for k in firsts[: PIDS_PER_CAPTURE + 1]]


def _key(raw: object) -> object:
    return raw if type(raw) is int or type(raw) is str else str(raw)  # (a list is not hashable)


@dataclass(frozen=True)
class Alignment:
    offset_us: float  # framework ts - CLOCK_MONOTONIC µs
    residual_us: float  # the offset is right to within this
    drift_us: float | None  # the offset at the window's end less that at its start


def _valid_head(head: dict) -> bool:
    """clock: [[MARK + digits, ns, ns], ...]; window: two finite numbers; warnings: strings."""
    clock, window, warnings = head.get("clock"), head.get("window"), head.get("warnings")
    return (
        isinstance(clock, list)
        and all(
            isinstance(m, list)
            and len(m) == 3
            and isinstance(m[0], str)
            and _MARK_NAME.fullmatch(m[0]) is not None
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _NS_MAX for v in m[1:])
            for m in clock
        )
        and isinstance(window, list)
        and len(window) == 2
        and all(_finite(v) for v in window)
        and isinstance(warnings, list)
        and all(isinstance(w, str) for w in warnings)
    )


def _marks(head: dict) -> dict[str, tuple[float, float]]:
    return {name: (a / 1000.0, b / 1000.0) for name, a, b in head["clock"]}  # ns -> µs (parse checked)


def align(cap: Capture) -> Alignment:
    marks = _marks(cap.head)
    fits: dict[bool, list[tuple[float, float]]] = {True: [], False: []}  # start? -> (residual, offset)
    for ev in cap.marks:
        name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur", 0)
        if not isinstance(name, str) or name not in marks or not _finite(ts) or not _finite(dur):
            continue
        a, b = marks[name]
        residual = max(0.0, (b - a) - dur) / 2
        fits[int(name[len(MARK) :]) < CLOCK_MARKS].append((residual, ts + dur / 2 - (a + b) / 2))
    if not fits[True]:
        raise UserError(f"PID {cap.pid}: the framework's trace lacks memtop's clock marks (cannot align it)")
    residual, offset = min(fits[True])
    drift = min(fits[False])[1] - offset if fits[False] else None
    return Alignment(offset, residual, drift)


def _finite(v: object) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an int beyond any float
        return False


def framework_events(
    events: list, pids: dict, k: int, offset_us: float, framework: str, pid: int, counts: Counter
) -> Iterator[dict]:
    """A capture's events on CLOCK_MONOTONIC, its pids renumbered (``pids``: block_pids) into block
    ``k`` (two ranks' "GPU 0" tracks, or their flow ids, never merge) and its process names
    prefixed with the pid. The events are changed in place (they are parsed for this and read
    once: a copy of each was a third of the merge's time, bench/RESULTS.md)."""
    for ev in events:
        ph, ts, raw = ev["ph"], ev.get("ts"), ev.get("pid")
        mapped = pids.get(raw if type(raw) is int or type(raw) is str else str(raw))  # (_key, inline)
        if mapped is None:  # beyond the block's pids
            continue
        ev["pid"] = mapped
        if type(ts) is float and ts - ts == 0 or _finite(ts):  # (the first test: finite floats, fast)
            ev["ts"] = round(ts - offset_us, 3)
        elif ph != "M":
            continue
        if ph in _FLOW and "id" in ev:
            ev["id"] = f"{k}:{ev['id']}"
        elif ph == "M" and ev.get("name") == "process_name" and isinstance(ev.get("args"), dict):
            ev["args"] = {**ev["args"], "name": f"{framework} pid {pid}: {ev['args'].get('name', '')}"}
        cat = ev.get("cat")
        if type(cat) is str and cat in COUNTED:
            counts[cat] += 1
        counts["framework"] += 1
        yield ev


def block_pids(cap: Capture, k: int) -> dict:
    """The trace's pids -> capture ``k``'s synthetic ones (the first PIDS_PER_CAPTURE of them)."""
    return {
        key: FRAMEWORK_PID_BASE + k * PIDS_PER_CAPTURE + n
        for n, key in enumerate(cap.keys[:PIDS_PER_CAPTURE])
    }


def encode_piece(
    events: list, pids: dict, k: int, offset_us: float, framework: str, pid: int
) -> tuple[str, int, Counter]:
    """A piece's events as framework_events makes them, encoded: (JSON objects joined by commas,
    how many, their counts). Runs where the piece is (a worker process)."""
    from memtop.outputs.export import dumps

    counts: Counter = Counter()
    out = list(framework_events(events, pids, k, offset_us, framework, pid, counts))
    events.clear()  # (each piece is encoded once)
    return dumps(out)[1:-1], len(out), counts


class Encoded:
    """Every capture's events, encoded where their pieces are. All pieces are asked at once, when
    this is made: the workers encode side by side, and beside memtop's own part, written meanwhile.
    Iterated once: (JSON objects joined by commas, how many)."""

    def __init__(self, aligned: list[tuple[Capture, Alignment]]) -> None:
        self.aligned = aligned
        self.counts: Counter = Counter()
        self.started = False
        for k, (cap, al) in enumerate(aligned):
            framework = str(cap.head.get("framework", "framework"))[:20]
            for p in cap.pieces:
                p.send(encode_piece, block_pids(cap, k), k, al.offset_us, framework, cap.pid)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        self.started = True
        for cap, _ in self.aligned:
            for p in cap.pieces:
                try:
                    text, n, got = p.receive()
                except chunks.Malformed as e:
                    raise UserError(f"PID {cap.pid}: {e}") from None
                self.counts.update(got)
                if n:
                    yield text, n


def write_merged(
    recording: Path | None, aligned: list[tuple[Capture, Alignment]], out: Path, force: bool
) -> tuple[int, dict]:
    """Write the merged trace of captures ``align`` placed; returns (events written, a summary of
    what it holds). A recording that cannot be used (one without a sample of the window, from a
    recorder slow to start on a busy host) leaves the framework's part alone, said in the summary's
    ``unusable``. Each capture's pieces are encoded once: another write needs new captures."""
    from memtop.outputs.export import dumps, private_output, write_trace  # (numpy, SQLite: only when writing)
    from memtop.storage.store import Recording

    info = [
        {
            "pid": cap.pid,
            "framework": cap.head.get("framework"),
            "version": cap.head.get("version"),
            "window_s": cap.head.get("window"),
            "steps": cap.head.get("steps"),
            "warnings": cap.head.get("warnings"),
            "clock_offset_us": round(al.offset_us, 3),
            "clock_residual_us": round(al.residual_us, 3),
            "clock_drift_us": None if al.drift_us is None else round(al.drift_us, 3),
        }
        for cap, al in aligned
    ]
    meta = {"clock": "CLOCK_MONOTONIC", "captures": info}
    events, unusable = Encoded(aligned), None
    if recording is not None:
        try:
            with private_output(out, force, GZIP_LEVEL) as fh:
                rec = Recording(recording)
                try:
                    n = write_trace(rec, fh, progress=False, extra=events, extra_meta=meta)
                finally:
                    rec.close()
        except UserError as e:
            if events.started:
                raise
            unusable, recording = str(e), None
    if recording is None:  # memtop could not record the window: the framework's part alone
        with private_output(out, force, GZIP_LEVEL) as fh:
            parts = list(events)
            fh.write('{"traceEvents":[' + ",".join(t for t, _ in parts) + f'],"metadata":{dumps(meta)}}}')
            n = sum(c for _, c in parts)
    counts = events.counts
    summary = {
        "events": n,
        "framework_events": counts["framework"],
        "memtop": recording is not None,
        "unusable": unusable,
        "captures": info,
        **{c: counts[c] for c in COUNTED},
    }
    return n, summary


def describe(summary: dict) -> str:
    """One line for a terminal: what the file holds."""
    parts = [f"{summary[c]} {c.replace('_', ' ')}" for c in COUNTED if summary.get(c)]
    worst = max((c["clock_residual_us"] for c in summary["captures"]), default=0.0)
    who = ", ".join(f"pid {c['pid']}" for c in summary["captures"])
    tracks = (
        "memtop's counters and phases"
        if summary["memtop"]
        else "no memtop tracks (the window was not recorded)"
    )
    return clean(
        f"{counted(summary['events'], 'event')}: {', '.join(parts) or counted(summary['framework_events'], 'framework event')} from {who}; {tracks}; "
        f"clocks aligned to within {worst:.0f} µs",
        1000,
    )
