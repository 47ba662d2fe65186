"""Capture a window of a job: the framework trace of each of its processes (through their agents)
and memtop's own recording of the same window, merged into one Perfetto file.

`memtop trace` calls it, and the live view's tracer (memtop.agent.tracer: the TUI's `x` key and
`--trace-on`) from a worker thread: it blocks for the window plus a few seconds."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memtop.agent.chunks import Worker, close_all, reap_all, start_workers
from memtop.agent.client import AgentRef, ask
from memtop.agent.merge import Alignment, Capture, align, describe, write_merged
from memtop.core.errors import UserError
from memtop.core.sanitize import clean

LEAD_S = 0.5  # the window starts this long after the recorder is up: its readings lead into the
# window, and the agents of all ranks have the request by then
READY_S = 10.0  # the recorder's start (NVML's) allowed: one that is not up by then is given up on
ANSWER_S = 120.0  # beyond the window: the profiler's stop and export of a large trace
TAIL_S = 0.5  # memtop's recording goes on this long past the window
STOP_S = 15.0  # a capture's recorder (a window's worth) closes well within this


Progress = Callable[[str], None]


def default_output(pid: int, directory: Path = Path()) -> Path:
    """A new file name for a capture of ``pid`` (a second capture in the same second gets -2...)."""
    stem = f"memtop-trace-{pid}-{time.strftime('%Y%m%d-%H%M%S')}"
    for i in range(1, 100):
        path = directory / f"{stem}{f'-{i}' if i > 1 else ''}.json.gz"
        if not os.path.lexists(path):
            return path
    return directory / f"{stem}-{time.monotonic_ns()}.json.gz"


@dataclass(frozen=True)
class TraceResult:
    path: Path
    summary: dict
    warnings: tuple[str, ...]

    def line(self) -> str:
        return f"wrote {self.path}: {describe(self.summary)}"


def start_recorder(path: Path, pids: list[int], options: list[str]) -> subprocess.Popen:
    """`memtop record` of these processes, in its own session (a Ctrl-C on the terminal is for the
    caller to pass on or not); ``options``: more of record's flags."""
    cmd = [sys.executable, "-m", "memtop", "record", "-o", str(path), "--pid", *map(str, pids), *options]
    return subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def stop_recorder(proc: subprocess.Popen, timeout: float | None = STOP_S) -> str:
    """Stop it as Ctrl-C would: the file is closed whole, its last blocks and checkpoint written,
    which takes a while for a long recording. Killed after ``timeout`` s; None waits until it is
    done (saying so on stderr after STOP_S). Its last words, if it failed."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=STOP_S if timeout is None else timeout)
    except subprocess.TimeoutExpired:
        if timeout is None:
            print("memtop: waiting for the recording to be closed (its last blocks)...", file=sys.stderr)
        else:
            proc.kill()
        _, err = proc.communicate()
    if proc.returncode == 0:
        return ""
    lines = err.decode(errors="replace").strip().splitlines()
    return clean(lines[-1] if lines else f"exit status {proc.returncode}", 300)


class _Stopper:
    """Stops the recorder at ``when`` (CLOCK_MONOTONIC), or at stop_now() if that comes first."""

    def __init__(self, proc: subprocess.Popen, when: float) -> None:
        self._now = threading.Event()
        self._fault: list[str] = []
        self._thread = threading.Thread(
            target=self._run, args=(proc, when), name="memtop-trace-stop", daemon=True
        )
        self._thread.start()

    def _run(self, proc: subprocess.Popen, when: float) -> None:
        self._now.wait(max(0.0, when - time.monotonic()))
        self._fault.append(stop_recorder(proc))

    def stop_now(self) -> str:
        """The recorder's last words if it failed ("" if not), once it has stopped."""
        self._now.set()
        self._thread.join()
        return self._fault[0] if self._fault else "its stop failed"


def _wait_ready(path: Path, proc: subprocess.Popen, deadline: float) -> bool:
    """The recorder creates its file once NVML is up and its sampler starts right after."""
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists():
            return True
        time.sleep(0.05)
    return path.exists()


Aligned = tuple[Capture, Alignment]


class _Asking:
    """Every agent asked at once (threads: each waits out the window), so all ranks share the
    window; each answer is parsed as soon as it comes, by its share of ``workers``. A process whose
    answer is bad or cannot be aligned is one failure line, not the capture's end."""

    def __init__(self, refs: list[AgentRef], request: dict, timeout: float, workers: list[Worker]) -> None:
        self._got: dict[int, Aligned | str] = {}
        shares = [workers[i :: len(refs)] for i in range(len(refs))]
        self._threads = [
            threading.Thread(
                target=self._one, args=(r, request, timeout, mine), name="memtop-trace", daemon=True
            )
            for r, mine in zip(refs, shares, strict=True)
        ]
        for t in self._threads:
            t.start()

    def _one(self, ref: AgentRef, request: dict, timeout: float, workers: list[Worker]) -> None:
        try:
            head, payload = ask(ref.pid, ref.path, request, timeout)
            t0 = time.monotonic()
            cap = Capture.parse(ref.pid, head, payload, workers)
            cap.timing["received"], cap.timing["bytes"] = t0, len(payload)
            del payload
            try:
                self._got[ref.pid] = (cap, align(cap))
            except UserError:
                cap.close()
                raise
            cap.timing["parse_s"] = time.monotonic() - t0
        except UserError as e:
            self._got[ref.pid] = str(e)
        finally:
            close_all(workers)  # (those a small or failed trace did not need)

    def join(self) -> tuple[list[Aligned], list[str]]:
        for t in self._threads:
            t.join()
        caps = [c for c in self._got.values() if isinstance(c, tuple)]
        return sorted(caps, key=lambda c: c[0].pid), [c for c in self._got.values() if isinstance(c, str)]


def capture_trace(
    refs: list[AgentRef],
    seconds: float,
    out: Path,
    steps: int | None = None,
    force: bool = False,
    python: bool = False,
    stacks: bool = True,
    progress: Progress | None = None,
    cpu_ops: bool = False,
) -> TraceResult:
    """Capture ``seconds`` (or ``steps`` optimizer steps, ``seconds`` at most) of every process in
    ``refs`` and write the merged trace to ``out``. A process that fails is a warning; all failing,
    or a bad ``out``, a UserError. ``cpu_ops``: the job's CPU ops too (``python``: and its Python
    frames; both slow the job and the capture). ``progress`` hears one line per stage (from this
    thread)."""
    say = progress or (lambda _line: None)
    if os.path.lexists(out) and not force:
        raise UserError(f"{out} exists (use --force to overwrite)")
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: directory {out.parent} does not exist")
    work = Path(tempfile.mkdtemp(prefix="memtop-trace-"))  # 0700, removed whole at the end
    captures: list[Aligned] = []
    workers: list[Worker] = []
    try:
        asked = time.monotonic()
        # the trace's parsers start now: their interpreters' start is hidden in the window
        workers = start_workers()
        rec_path = work / "window.memtop"
        # bounded: a recorder whose memtop was killed ends by itself
        limit = ["--duration", repr(READY_S + LEAD_S + seconds + ANSWER_S)]
        recorder = start_recorder(
            rec_path, [r.pid for r in refs], limit + ([] if stacks else ["--no-stacks"])
        )
        warnings: list[str] = []
        stopper = None
        try:
            # the window starts LEAD_S after the request, the recorder's start running meanwhile
            # (NVML's start takes about that long): the agents wait for `at` (and for the job's
            # imports to settle, which takes as long), so waiting for the recorder first only
            # added its start to every capture
            at = time.monotonic() + LEAD_S
            request = dict(op="trace", seconds=seconds, steps=steps, at=at, python=python, cpu_ops=cpu_ops)
            say(f"capturing {seconds:g} s of {', '.join(f'pid {r.pid}' for r in refs)}")
            # the recorder stops once the window is over, while the agents stop their profilers and
            # export (seconds for a large trace): its close is then off the way to the file
            stopper = _Stopper(recorder, at + seconds + TAIL_S)
            asking = _Asking(refs, request, LEAD_S + seconds + ANSWER_S, workers)
            if not _wait_ready(rec_path, recorder, asked + READY_S):
                warnings.append(
                    "memtop's recorder did not start: the trace holds the framework's events only"
                )
            ready = time.monotonic()
            captures, failed = asking.join()
        finally:
            answered = time.monotonic()
            fault = stop_recorder(recorder) if stopper is None else stopper.stop_now()
        warnings += failed
        if not captures:
            raise UserError("; ".join(failed) or "no capture")
        for cap, _ in captures:
            warnings += [f"PID {cap.pid}: {clean(w, 300)}" for w in cap.head["warnings"]]
        recorded = rec_path if rec_path.exists() and not fault else None
        if fault:
            warnings.append(
                f"memtop's recording failed ({fault}): the trace holds the framework's events only"
            )
        size = sum(c.timing["bytes"] for c, _ in captures)
        say(f"merging {size / 1e6:.0f} MB of framework trace with memtop's tracks into {out}")
        merging = time.monotonic()
        _, summary = write_merged(recorded, captures, out, force)
        if summary["unusable"]:  # a recording without a sample of the window (a slow recorder's)
            warnings.append(
                f"memtop's recording of the window is unusable ({summary['unusable']}): the framework's events only"
            )
        done = time.monotonic()
        summary["timing"] = _timing(asked, ready, at, seconds, captures, answered, merging, done)
        return TraceResult(out, summary, tuple(warnings))
    finally:
        for cap, _ in captures:
            cap.close()
        reap_all(workers)  # (each one: hung up on by now, or here)
        shutil.rmtree(work, ignore_errors=True)


def _timing(
    asked: float,
    ready: float,
    at: float,
    seconds: float,
    captures: list[Aligned],
    answered: float,
    merging: float,
    done: float,
) -> dict:
    """Where the time from the request to the written file went (seconds; docs/TRACE.md)."""
    agents = [c.head.get("timing") for c, _ in captures]
    worst = {
        k: max((a[k] for a in agents if isinstance(a, dict) and _seconds(a.get(k))), default=None)
        for k in ("stop_s", "export_s")
    }
    last = max(c.timing["received"] for c, _ in captures)
    return {
        "recorder_start_s": round(ready - asked, 3),  # (meanwhile the lead runs)
        "lead_s": round(at - asked, 3),
        "window_s": round(max(c.head["window"][1] - c.head["window"][0] for c, _ in captures), 3),
        "asked_window_s": seconds,
        "profiler_stop_s": worst["stop_s"],
        "profiler_export_s": worst["export_s"],
        "received_s": round(last - asked, 3),  # request to the last trace in memtop's hands
        "parse_s": round(max(c.timing["parse_s"] for c, _ in captures), 3),
        "recorder_stop_s": round(merging - answered, 3),
        "merge_s": round(done - merging, 3),
        "total_s": round(done - asked, 3),
    }


def _seconds(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e6
