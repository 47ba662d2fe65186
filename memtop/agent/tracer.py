"""Captures from the live view: the TUI's `x` key (the selected process, or every rank of its job) and
`--trace-on LABEL[,...]` (a capture when a GPU's verdict turns to one of those labels).

memtop's side only: it finds the agents (memtop.agent.client) and runs one capture window at a time
(memtop.agent.capture) in a thread of its own; the TUI hears one line per stage through ``notify``
and never imports this module (the controller, memtop.commands.local, holds it). A capture taken
while the view records is written into the recording (its metadata key ``captures``), so `memtop
report` lists it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memtop.agent.capture import capture_trace, default_output
from memtop.agent.client import AgentRef, hello
from memtop.analysis.jobs import job_groups
from memtop.core.errors import UserError
from memtop.core.sanitize import clean

if TYPE_CHECKING:
    from memtop.analysis.verdict import Verdict
    from memtop.core.model import Frame
    from memtop.live.pipeline import Pipeline

EVERY_S = 300.0  # --trace-every's default: a process is captured automatically at most this often
SECONDS = 3.0  # --trace-seconds' default: short, since a capture slows the job (docs/TRACE.md)
WATCH_S = 1.0  # how often --trace-on looks at the verdicts (they move in 0.5 s bins)
MAX_KEPT = 200  # captures listed in a recording's metadata (the newest)

Notify = Callable[[str, str], None]  # (stage: "progress" / "warning" / "done" / "failed", one line)


@dataclass(frozen=True)
class TraceOptions:
    seconds: float = SECONDS
    directory: Path = Path()
    on: frozenset[str] = frozenset()  # verdict labels that trigger a capture
    every_s: float = EVERY_S


class Tracer:
    def __init__(self, options: TraceOptions, pipeline: Pipeline, notify: Notify | None = None) -> None:
        self.options = options
        self.pipeline = pipeline
        self.notify: Notify = notify or (lambda _stage, _line: None)
        self.captures: list[dict] = []  # what was taken (the recording's `captures`)
        self._busy = threading.Lock()
        self._last: dict[int, float] = {}  # pid -> when it was last captured automatically
        self._labels: dict[int, str] = {}  # GPU -> its verdict's label at the last look
        self._stop = threading.Event()

    # -- one capture -----------------------------------------------------------------------
    def targets(self, pid: int, frame: Frame | None) -> list[AgentRef]:
        """The agents to capture for ``pid``: its own (or one clear error) and those of the other
        ranks of its job (the processes on the GPUs memtop groups with its GPUs: memtop.analysis.jobs), which
        are skipped quietly where they have none."""
        ref = hello(pid)
        if not ref.frameworks:
            raise UserError(f"PID {pid} has not imported torch or jax: no framework trace to take")
        refs = {pid: ref}
        for peer in _job_peers(pid, frame):
            try:
                other = hello(peer)
            except UserError:
                continue
            if other.frameworks:
                refs[peer] = other
        return [refs[p] for p in sorted(refs)]

    def capture(self, pid: int, trigger: str = "key") -> bool:
        """Capture ``pid`` (and its job's ranks) now, in this thread: True if a file was written. Every
        outcome is one ``notify`` line; a capture already under way refuses this one."""
        if not self._busy.acquire(blocking=False):
            self.notify("failed", "trace failed: a capture is already under way (one at a time)")
            return False
        try:
            return self._capture(pid, trigger)
        finally:
            self._busy.release()

    def _capture(self, pid: int, trigger: str) -> bool:
        started, wall = time.monotonic(), time.time()
        entry: dict = {"t": round(started, 3), "wall": round(wall, 3), "pids": [pid], "trigger": trigger}
        path, line, ok = None, "", False
        try:
            refs = self.targets(pid, self.pipeline.frame)
            entry["pids"] = [r.pid for r in refs]
            path = default_output(pid, self.options.directory)
            result = capture_trace(
                refs, self.options.seconds, path, progress=lambda s: self.notify("progress", f"trace: {s}")
            )
            line, ok = result.line(), True
            entry["timing"] = result.summary.get("timing")
            for w in result.warnings:
                self.notify("warning", f"trace: warning: {w}")
        except UserError as e:
            line = str(e)
        except Exception as e:  # the view goes on whatever a capture meets
            line = f"{type(e).__name__}: {e}"
        line = clean(line, 1000)
        entry |= {
            "file": str(path) if ok else None,
            "outcome": "ok" if ok else "failed",
            "detail": line,
            "took_s": round(time.monotonic() - started, 3),  # from the asking to the file written
        }
        self._keep(entry)
        self.notify("done" if ok else "failed", f"trace: {line}" if ok else f"trace failed: {line}")
        return ok

    def _keep(self, entry: dict) -> None:
        self.captures.append(entry)
        del self.captures[:-MAX_KEPT]
        writer = self.pipeline.writer
        if writer is not None:
            writer.set_meta("captures", list(self.captures))

    # -- --trace-on ------------------------------------------------------------------------
    def start(self) -> None:
        """Watch the verdicts (only with --trace-on)."""
        if self.options.on:
            threading.Thread(target=self._watch, name="memtop-trace-watch", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_S):
            try:
                due = self.due(self.pipeline.view(now=True).verdicts, self.pipeline.frame)
            except Exception as e:  # (a memtop- thread that dies ends the app: this one never does)
                self.notify(
                    "failed", f"trace failed: --trace-on stopped: {clean(f'{type(e).__name__}: {e}', 300)}"
                )
                return
            for gpu, pid, label in due:
                if self._stop.is_set():
                    return
                self.notify("progress", f"trace: GPU {gpu} turned {label}: capturing pid {pid}")
                self.capture(pid, f"{label} on GPU {gpu}")

    def due(self, verdicts: dict[int, Verdict], frame: Frame | None) -> list[tuple[int, int, str]]:
        """(GPU, pid, label) to capture now: each GPU whose verdict turned to a --trace-on label
        since the last look (or is one at the first look), for the first of its processes not captured
        automatically within --trace-every. Noted as captured when chosen, whatever the outcome: a
        process without an agent is not asked again every second."""
        now, out = time.monotonic(), []
        for gpu, v in sorted(verdicts.items()):
            label = "straggler" if v.straggler else v.label
            if self._labels.get(gpu) == label:
                continue
            pids = _gpu_pids(gpu, frame)
            if label in self.options.on and not pids:
                continue  # no process on it yet (a context not made): the turn waits for one
            self._labels[gpu] = label
            if label not in self.options.on:
                continue
            pid = next(
                (p for p in pids if now - self._last.get(p, -self.options.every_s) >= self.options.every_s),
                None,
            )
            if pid is not None:
                for p in [pid, *_job_peers(pid, frame)]:
                    self._last[p] = now
                out.append((gpu, pid, label))
        return out


def _gpu_pids(gpu: int, frame: Frame | None) -> list[int]:
    g = frame.gpu(gpu) if frame is not None else None
    return sorted(p.pid for p in g.processes) if g is not None else []


def _job_peers(pid: int, frame: Frame | None) -> list[int]:
    """The other processes on the GPUs of ``pid``'s job (the same job key as its GPUs')."""
    if frame is None:
        return []
    groups = job_groups(frame)
    mine = {groups[g.index] for g in frame.gpus if g.index in groups and pid in {p.pid for p in g.processes}}
    peers = {p.pid for g in frame.gpus if groups.get(g.index) in mine for p in g.processes}
    return sorted(peers - {pid})
