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

from memtop.agent.injob import CLOCK_MARKS, MARK
from memtop.errors import UserError
from memtop.fleet.wire import Refused, load_json
from memtop.sanitize import clean
from memtop.wording import counted

FRAMEWORK_PID_BASE = 2_000_000  # framework tracks: synthetic pids clear of memtop's and real ones
PIDS_PER_CAPTURE = 1000  # a trace's own pids (the process, its GPUs) are renumbered inside a block
# the trace's categories a summary counts (Kineto's names)
COUNTED = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op", "python_function")
_FLOW = frozenset("stf")
# a trace's objects (two per event, ~150 bytes each): a real 1 GiB trace stays under; 1 GiB of `[]`
# (500 M lists, tens of GB parsed) does not
MAX_TRACE_OBJECTS = 20_000_000
_MARK_NAME = re.compile(re.escape(MARK) + "[0-9]{1,6}")
_NS_MAX = 1 << 63  # a CLOCK_MONOTONIC ns reading (beyond it, µs as float overflow or mean nothing)


@dataclass
class Capture:
    """One process's framework trace as its agent sent it (head: the answer's JSON)."""

    pid: int
    head: dict
    events: list = field(default_factory=list)
    timing: dict = field(default_factory=dict)  # memtop's side: when it came, how long it took to read

    @classmethod
    def parse(cls, pid: int, head: dict, payload: bytes) -> Capture:
        """The agent's answer, or one UserError line: its head is checked before the trace is read."""
        if not _valid_head(head):
            raise UserError(
                f"PID {pid}: the agent's answer is malformed (clock, window or warnings of the wrong shape)"
            )
        try:
            doc = load_json(payload, MAX_TRACE_OBJECTS)
        except Refused as e:
            raise UserError(f"PID {pid}: the framework's trace: {e}") from None
        events = doc.get("traceEvents") if isinstance(doc, dict) else None
        if not isinstance(events, list):
            raise UserError(f"PID {pid}: the framework's trace has no traceEvents")
        return cls(pid, head, [e for e in events if isinstance(e, dict) and isinstance(e.get("ph"), str)])


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
    for ev in cap.events:
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


def framework_events(cap: Capture, k: int, offset_us: float, counts: Counter) -> Iterator[dict]:
    """The capture's events on CLOCK_MONOTONIC, its pids renumbered into block ``k`` (two ranks'
    "GPU 0" tracks, or their flow ids, never merge) and its process names prefixed with the pid.
    The events are changed in place (they are parsed for this and read once: a copy of each was a
    third of the merge's time, bench/RESULTS.md)."""
    pids: dict[object, int] = {}
    framework = str(cap.head.get("framework", "framework"))[:20]
    for ev in cap.events:
        ph, raw, ts = ev["ph"], ev.get("pid"), ev.get("ts")
        key = raw if type(raw) is int or type(raw) is str else str(raw)  # (a list is not hashable)
        pid = pids.get(key)
        if pid is None:
            if len(pids) >= PIDS_PER_CAPTURE:
                continue
            pid = pids[key] = FRAMEWORK_PID_BASE + k * PIDS_PER_CAPTURE + len(pids)
        ev["pid"] = pid
        if type(ts) is float and ts - ts == 0 or _finite(ts):  # (the first test: finite floats, fast)
            ev["ts"] = round(ts - offset_us, 3)
        elif ph != "M":
            continue
        if ph in _FLOW and "id" in ev:
            ev["id"] = f"{k}:{ev['id']}"
        elif ph == "M" and ev.get("name") == "process_name" and isinstance(ev.get("args"), dict):
            ev["args"] = {**ev["args"], "name": f"{framework} pid {cap.pid}: {ev['args'].get('name', '')}"}
        cat = ev.get("cat")
        if type(cat) is str and cat in COUNTED:
            counts[cat] += 1
        counts["framework"] += 1
        yield ev


def write_merged(
    recording: Path | None, aligned: list[tuple[Capture, Alignment]], out: Path, force: bool
) -> tuple[int, dict]:
    """Write the merged trace of captures ``align`` placed; returns (events written, a summary of
    what it holds)."""
    from memtop.export import dumps, private_output, write_trace  # (numpy, SQLite: only when writing)
    from memtop.store import Recording

    counts: Counter = Counter()
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

    def extra() -> Iterator[dict]:
        for k, (cap, al) in enumerate(aligned):
            yield from framework_events(cap, k, al.offset_us, counts)

    meta = {"clock": "CLOCK_MONOTONIC", "captures": info}
    with private_output(out, force) as fh:
        if recording is None:  # memtop could not record the window: the framework's part alone
            events = list(extra())
            fh.write('{"traceEvents":[' + ",".join(map(dumps, events)) + f'],"metadata":{dumps(meta)}}}')
            n = len(events)
        else:
            rec = Recording(recording)
            try:
                n = write_trace(rec, fh, progress=False, extra=extra(), extra_meta=meta)
            finally:
                rec.close()
    summary = {
        "events": n,
        "framework_events": counts["framework"],
        "memtop": recording is not None,
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
