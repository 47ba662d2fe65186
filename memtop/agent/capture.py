"""Capture a window of a job: the framework trace of each of its processes (through their agents)
and memtop's own recording of the same window, merged into one Perfetto file.

`memtop trace` is its one caller today; a TUI key would call it from a worker thread (it blocks for
the window plus a few seconds)."""

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
from dataclasses import dataclass
from pathlib import Path

from memtop.agent.client import AgentRef, ask
from memtop.agent.merge import Alignment, Capture, align, describe, write_merged
from memtop.errors import UserError
from memtop.sanitize import clean

LEAD_S = 1.0  # memtop records this long before the window (its readings lead into the capture)
READY_S = 10.0  # the recorder's start (NVML's) allowed before the capture starts without it
ANSWER_S = 120.0  # beyond the window: the profiler's stop and export of a large trace
STOP_S = 15.0  # a capture's recorder (a window's worth) closes well within this


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


def _wait_ready(path: Path, proc: subprocess.Popen) -> bool:
    """The recorder creates its file once NVML is up and its sampler starts right after."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists():
            return True
        time.sleep(0.05)
    return False


Aligned = tuple[Capture, Alignment]


def _ask_all(refs: list[AgentRef], request: dict, timeout: float) -> tuple[list[Aligned], list[str]]:
    """Every agent at once (threads: each waits out the window), so all ranks share the window. A
    process whose answer is bad or cannot be aligned is one failure line, not the capture's end."""
    got: dict[int, Aligned | str] = {}

    def one(ref: AgentRef) -> None:
        try:
            head, payload = ask(ref.pid, ref.path, request, timeout)
            cap = Capture.parse(ref.pid, head, payload)
            got[ref.pid] = (cap, align(cap))
        except UserError as e:
            got[ref.pid] = str(e)

    threads = [threading.Thread(target=one, args=(r,), name="memtop-trace", daemon=True) for r in refs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    caps = [c for c in got.values() if isinstance(c, tuple)]
    return sorted(caps, key=lambda c: c[0].pid), [c for c in got.values() if isinstance(c, str)]


def capture_trace(
    refs: list[AgentRef],
    seconds: float,
    out: Path,
    steps: int | None = None,
    force: bool = False,
    python: bool = False,
    stacks: bool = True,
) -> TraceResult:
    """Capture ``seconds`` (or ``steps`` optimizer steps, ``seconds`` at most) of every process in
    ``refs`` and write the merged trace to ``out``. A process that fails is a warning; all failing,
    or a bad ``out``, a UserError."""
    if os.path.lexists(out) and not force:
        raise UserError(f"{out} exists (use --force to overwrite)")
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: directory {out.parent} does not exist")
    work = Path(tempfile.mkdtemp(prefix="memtop-trace-"))  # 0700, removed whole at the end
    try:
        rec_path = work / "window.memtop"
        # bounded: a recorder whose memtop was killed ends by itself
        limit = ["--duration", repr(READY_S + LEAD_S + seconds + ANSWER_S)]
        recorder = start_recorder(
            rec_path, [r.pid for r in refs], limit + ([] if stacks else ["--no-stacks"])
        )
        warnings = []
        try:
            if not _wait_ready(rec_path, recorder):
                warnings.append(
                    "memtop's recorder did not start: the trace holds the framework's events only"
                )
            at = time.monotonic() + LEAD_S
            request = {"op": "trace", "seconds": seconds, "steps": steps, "at": at, "python": python}
            captures, failed = _ask_all(refs, request, LEAD_S + seconds + ANSWER_S)
        finally:
            fault = stop_recorder(recorder)
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
        try:
            _, summary = write_merged(recorded, captures, out, force)
        except UserError as e:
            if recorded is None or "holds no samples" not in str(e):
                raise
            _, summary = write_merged(None, captures, out, force)
        return TraceResult(out, summary, tuple(warnings))
    finally:
        shutil.rmtree(work, ignore_errors=True)
