"""Frames -> (store, classifier, rolling history) -> immutable Views for the UI.

Frame sources are live (the Sampler) or a recording replayed at its own pace; everything
downstream is the same. Heavy work happens on the source's thread; the UI takes a View at
its own paint rate. No textual here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from memtop.analysis import roofline
from memtop.analysis.health import HealthEvent, HealthTracker, hardware_first
from memtop.analysis.jobshare import Job, JobLabeller, job_frame, shared_verdict, sharing
from memtop.analysis.phases import Classifier, Label
from memtop.analysis.straggler import stragglers
from memtop.analysis.verdict import Verdict, straggler_verdict, verdict
from memtop.core.errors import UserError
from memtop.core.model import Frame, ProcSample, StackSample
from memtop.core.records import Gap

if TYPE_CHECKING:  # SQLite and the store load when a recording is opened, not before a live first frame
    from memtop.storage.store import Recording, Writer

HISTORY_S = 600.0  # the timeline can zoom out to 10 minutes
# the classifier's labels kept live: as many as the widest timeline shows (each holds its bin's
# features, ~2.8 KiB with its dicts: twice this many held ~3.3 MiB more per GPU for nothing drawn)
BINS_KEPT = int(HISTORY_S / Classifier().bin_s)
# a paint tick may come this share of the paint interval early (frames at the paint rate jitter)
TICK_SLACK = 0.2
KEEP_FRAME_S = 1.0  # a paused live view can scroll back to any second of the history
# py-spy's non-blocking read fails now and then on a moving target (2-3 % of samples on 2 H200s under
# DDP, "Failed to get stack traces"): the last good stack stands in for this long before the error shows
STACK_HOLD_S = 2.0


@dataclass(frozen=True, slots=True)  # 10 minutes at 10 Hz are 6 000 a GPU: no dict each
class Point:
    t: float
    sm: float | None  # GPM SM %, or NVML util without GPM
    dram: float | None
    pcie: float | None  # % of link, larger direction
    cpu: float | None  # host CPU %, mean over cores


@dataclass(frozen=True)
class Status:
    mode: str  # live / replay / demo
    position: float = 0.0  # seconds into the recording
    duration: float = 0.0
    paused: bool = False
    speed: float = 1.0
    recording: str | None = None  # file being written
    fault: str | None = (
        None  # a failure that stops part of the run (recording, sampling); shown in the header
    )
    source: str = ""
    # live view paused (sampling and recording go on): how many seconds the shown instant lies
    # before the newest sample when it was chosen; None while the view follows now
    frozen_at: float | None = None
    origin: float | None = None  # replay: the recording's first time (its positions count from there)


@dataclass(frozen=True)
class Event:
    t: float
    gpu: int
    kind: str  # gap / throttle / start / exit / health
    text: str


@dataclass(frozen=True)
class View:
    frame: Frame | None
    history: dict[int, tuple[Point, ...]]
    labels: dict[int, tuple[Label, ...]]
    verdicts: dict[int, Verdict]
    gaps: tuple[Gap, ...]
    status: Status
    meta: dict = field(default_factory=dict)
    version: int = 0
    events: tuple[Event, ...] = ()
    stacks: dict[int, StackSample] = field(default_factory=dict)  # pid -> the stack to show
    natives: dict[int, StackSample] = field(default_factory=dict)  # pid -> its newest --native dump
    health: tuple[HealthEvent, ...] = ()  # the GPUs' health events, oldest first (memtop.analysis.health)
    # GPUs that jobs share: GPU -> job key -> that job's own labels (memtop.analysis.jobshare), and the jobs
    job_labels: dict[int, dict[str, tuple[Label, ...]]] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    job_verdicts: dict[int, dict[str, Verdict]] = field(default_factory=dict)  # each job's own verdict
    # GPU -> its roofline point per bin, oldest first: (bin start, point) (memtop.analysis.roofline.Trail)
    roofline_trail: dict[int, tuple[tuple[float, roofline.Point], ...]] = field(default_factory=dict)


def shown_stacks(frame: Frame | None, good: dict[int, StackSample]) -> dict[int, StackSample]:
    """The frame's stacks by pid, a failed read replaced by that process's last good stack when it is
    at most STACK_HOLD_S older (and not newer than the frame: a paused view shows its instant)."""
    if frame is None:
        return {}
    out = {s.pid: s for s in frame.stacks}
    for pid, s in out.items():
        g = good.get(pid)
        if not s.threads and g is not None and frame.t - STACK_HOLD_S <= g.t <= frame.t:
            out[pid] = g
    return out


class Pipeline:
    def __init__(
        self,
        status: Status,
        meta: dict | None = None,
        writer: Writer | None = None,
        verdict_window: float = 60.0,
    ):
        self.status = status
        self.meta = meta or {}
        self.writer = writer
        self.verdict_window = verdict_window
        self.on_tick: Callable[[], None] = lambda: None
        self.paint_interval = 1.0
        self._lock = threading.Lock()
        self._next_tick = 0.0  # when the next on_tick is due (monotonic), on a grid of paint_interval
        self._version = 0
        self._had_gpus = False
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.classifier = Classifier(max_bins=BINS_KEPT)
            self.jobshare = JobLabeller(forget_s=HISTORY_S, max_bins=BINS_KEPT)
            self.history: dict[int, deque[Point]] = {}
            self.trail = roofline.Trail(self.classifier.bin_s)
            self.frame: Frame | None = None
            self.events: deque[Event] = deque(maxlen=500)
            self._pids: dict[int, set[int]] = {}
            self._throttled: dict[int, bool] = {}
            self._trackers: dict[int, HealthTracker] = {}
            self.health: deque[HealthEvent] = deque(maxlen=500)
            self.n_health = 0  # events ever appended (the deque drops the oldest)
            self._kept: deque[Frame] = deque()  # one frame a second, for a paused live view
            self._frozen: float | None = None  # the instant (frame clock) a paused view shows
            self._frozen_version = 0
            self._good_stacks: dict[int, StackSample] = {}
            self._natives: dict[int, StackSample] = {}
            # the GPU processes seen (the newest sample of each): a verdict's command names the GPU's own
            # process after it has exited (the end of a replay said `python train.py`)
            self._gpu_procs: dict[int, ProcSample] = {}

    def on_frame(self, frame: Frame, tick: bool = True) -> None:
        if self.writer is not None:
            self.writer.add(frame)
            if self.writer.error and self.status.fault is None:
                self.status = replace(self.status, fault=self.writer.error)
        with self._lock:
            self.frame = frame
            if not self._kept or frame.t - self._kept[-1].t >= KEEP_FRAME_S:
                self._kept.append(frame)
                while self._kept[0].t < frame.t - HISTORY_S:
                    self._kept.popleft()
            self.classifier.feed(frame)
            self.jobshare.feed(frame)
            for st in frame.stacks:
                if any(th.frames for th in st.threads):  # (a process exiting: threads, no frames)
                    self._good_stacks[st.pid] = st
                if st.native:  # the next sample replaces it in the panel: the UI shows it apart
                    self._natives[st.pid] = st
            for p in frame.host.procs if frame.host is not None else ():
                if p.gpus:
                    self._gpu_procs.pop(p.pid, None)
                    self._gpu_procs[p.pid] = p
            while len(self._gpu_procs) > 64:  # processes come and go: the oldest seen goes
                del self._gpu_procs[next(iter(self._gpu_procs))]
            for kept in (self._good_stacks, self._natives):
                if len(kept) > 64:  # processes come and go: keep the recent ones
                    for pid in [p for p, st in kept.items() if st.t < frame.t - STACK_HOLD_S]:
                        del kept[pid]
            cpu = None
            if frame.host is not None and frame.host.cpu_pct:
                cpu = sum(frame.host.cpu_pct) / len(frame.host.cpu_pct)
            for g in frame.gpus:
                self._note_events(g)
                h = self.history.setdefault(g.index, deque())
                if h and h[-1].t == g.t:
                    continue
                self.trail.add(g)
                frac = g.pcie_fraction()
                h.append(
                    Point(
                        g.t,
                        g.activity,
                        g.bandwidth,
                        None if frac is None else 100 * frac,
                        cpu,
                    )
                )
                while h and h[0].t < g.t - HISTORY_S:
                    h.popleft()
            self._version += 1
        now = time.monotonic()
        # the first GPU reading is painted as it arrives, not at the next paint tick
        first = bool(frame.gpus) and not self._had_gpus
        self._had_gpus = self._had_gpus or bool(frame.gpus)
        if tick and (first or now >= self._next_tick - TICK_SLACK * self.paint_interval):
            # on a grid, a little early rather than late: frames come at the paint rate itself at
            # --interval 1, and "a full interval since the last tick" skipped every frame that came a
            # millisecond early, so the view moved every 2 s; the app's timer then painted in between
            due = self._next_tick + self.paint_interval
            self._next_tick = due if due > now else now + self.paint_interval  # after a stall: from now
            self.on_tick()

    def _note_events(self, g) -> None:
        """Process start/exit and throttling onsets, for the timeline's event row."""
        pids = {p.pid for p in g.processes}
        old = self._pids.get(g.index)
        if old is not None:
            for pid in pids - old:
                self.events.append(Event(g.t, g.index, "start", f"process {pid} started"))
            for pid in old - pids:
                self.events.append(Event(g.t, g.index, "exit", f"process {pid} exited"))
        self._pids[g.index] = pids
        if g.throttled and not self._throttled.get(g.index):
            self.events.append(Event(g.t, g.index, "throttle", "throttled: " + ", ".join(g.throttle_reasons)))
        self._throttled[g.index] = g.throttled
        tracker = self._trackers.get(g.index) or self._trackers.setdefault(g.index, HealthTracker(g.index))
        for e in tracker.feed(g):
            self.health.append(e)
            self.n_health += 1
            self.events.append(Event(e.t, e.gpu, "health", e.text))

    @property
    def version(self) -> int:
        """Bumped by every frame (but not while the view is frozen): a painter compares it first."""
        return self._version if self._frozen is None else self._frozen_version

    @property
    def frozen(self) -> bool:
        return self._frozen is not None

    def freeze(self, back: float | None) -> None:
        """Show the instant ``back`` seconds before the newest sample (clamped to the history kept),
        while frames keep coming in (and being recorded); None follows now again."""
        with self._lock:
            if back is None or self.frame is None:
                self._frozen = None
                self.status = replace(self.status, frozen_at=None)
                return
            if self._kept and self._kept[-1] is not self.frame:  # the instant paused is the one shown
                self._kept.append(self.frame)
            newest = self.frame.t
            oldest = self._kept[0].t if self._kept else newest
            self._frozen = min(newest, max(oldest, newest - back))
            self._frozen_version = self._version
            self.status = replace(self.status, frozen_at=newest - self._frozen)

    def scroll(self, delta: float) -> None:
        """Move a paused view ``delta`` seconds (back when negative; pausing at now first)."""
        with self._lock:
            if self.frame is None:
                return
            newest = self.frame.t
            oldest = self._kept[0].t if self._kept else newest
            at = (newest if self._frozen is None else self._frozen) + delta
            self._frozen = min(newest, max(oldest, at))
            self._frozen_version = self._version
            self.status = replace(self.status, frozen_at=newest - self._frozen)

    def view(self, now: bool = False) -> View:
        """What the screen shows; ``now``: at the newest sample even while the view is paused (the
        tracer's --trace-on watches the verdicts of now)."""
        with self._lock:
            at = None if now else self._frozen
            labels = {g: tuple(v) for g, v in self.classifier.labels.items()}
            jobs = dict(self.classifier.jobs)
            by_job = {g: {k: tuple(ls) for k, ls in js.items()} for g, js in self.jobshare.labels.items()}
            shared_jobs = dict(self.jobshare.jobs)
            hist = {g: tuple(h) for g, h in self.history.items()}
            frame, version, gaps = self.frame, self.version, tuple(self.classifier.gaps[-50:])
            if at is not None:  # a paused live view: everything as it stood at `at`
                labels = {g: tuple(x for x in v if x.t <= at) for g, v in labels.items()}
                by_job = {
                    g: {k: tuple(x for x in v if x.t <= at) for k, v in js.items()}
                    for g, js in by_job.items()
                }
                hist = {g: tuple(x for x in h if x.t <= at) for g, h in hist.items()}
                frame = next((f for f in reversed(self._kept) if f.t <= at), frame)
                gaps = tuple(g for g in gaps if g.t0 <= at)
            events = tuple(e for e in self.events if at is None or e.t <= at) + tuple(
                Event(g.t0, g.gpu, "gap", f"GPU idle {g.duration_s} s") for g in gaps
            )
            stacks = shown_stacks(frame, self._good_stacks)
            natives = dict(self._natives)
            health = tuple(e for e in self.health if at is None or e.t <= at)
            trail = {  # (a bin's point once the bin had closed)
                g: tuple(x for x in d if at is None or x[0] + self.trail.bin_s <= at)
                for g, d in self.trail.points.items()
            }
            seen = tuple(reversed(self._gpu_procs.values()))  # the newest first
        verdicts = {g: self._verdict(ls, frame, g, seen) for g, ls in labels.items()}
        for s in stragglers(labels, jobs):
            verdicts[s.gpu] = straggler_verdict(s, verdicts[s.gpu], frame, labels[s.gpu][-1])
        shared = {gi: cur for gi, js in by_job.items() if len(cur := sharing(labels.get(gi, ()), js)) > 1}
        job_verdicts = {
            gi: {k: self._verdict(ls, job_frame(frame, shared_jobs[k]), gi) for k, ls in js.items()}
            for gi, js in shared.items()
        }
        for gi, per_job in job_verdicts.items():
            if gi in verdicts and not verdicts[gi].straggler:
                newest = {k: ls[-1].label for k, ls in shared[gi].items()}
                verdicts[gi] = shared_verdict(gi, verdicts[gi], per_job, shared_jobs, newest)
        for gi, v in verdicts.items():
            g = frame.gpu(gi) if frame is not None else None
            verdicts[gi] = hardware_first(v, [e for e in health if e.gpu == gi], g)
        return View(
            frame,
            hist,
            labels,
            verdicts,
            gaps,
            self.status,
            self.meta,
            version,
            events,
            stacks,
            natives,
            health,
            shared,
            {k: shared_jobs[k] for js in shared.values() for k in js},
            job_verdicts,
            trail,
        )

    def _verdict(
        self, labels: Sequence[Label], frame: Frame | None, gpu: int, seen: Sequence[ProcSample] = ()
    ) -> Verdict:
        """``seen``: the GPU processes seen lately, newest first (whose command a verdict names when the
        frame shown has none)."""
        window = list(labels[-int(self.verdict_window / 0.5) - 1 :])
        return verdict(window, frame, self.verdict_window, gpu, seen)

    def set_status(self, **kw: Any) -> None:
        self.status = replace(self.status, **kw)


class ReplaySource:
    """Plays a recording into a pipeline at its original pace x speed; pause, seek, loop."""

    def __init__(
        self,
        rec: Recording,
        pipeline: Pipeline,
        speed: float = 1.0,
        loop: bool = False,
        prefill_s: float = 120.0,
        start_at: float = 0.0,
        fast_runs: Callable[[Recording], dict[int, tuple[tuple[float, str], ...]] | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[UserError], None] | None = None,
    ):
        self.rec = rec
        self._clock = clock  # the pace's clock (a test gives a virtual one)
        # a recording damaged past what replay can skip: handed to on_error (a headless command ends on
        # it with one line), else raised in the thread (the TUI's thread hook ends the app with it)
        self._on_error = on_error
        self.pipeline = pipeline
        self.speed = speed
        self.loop = loop
        self.prefill_s = prefill_s
        self.paused = False
        # a start point later than 0 is a seek: the timeline is prefilled with what came before
        self._seek: float | None = min(start_at, rec.duration) if start_at > 0 else None
        self._seek_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._main, name="memtop-replay", daemon=True)
        self.position = 0.0
        # per GPU, (offset, label) where each run of one phase label starts: the whole recording,
        # filled in by a background scan (the overview strip and "next/previous phase change")
        self.phase_runs: dict[int, tuple[tuple[float, str], ...]] = {}
        self.scanned = False
        self._fast_runs = fast_runs

    def start(self) -> None:
        self._thread.start()
        threading.Thread(target=self._find_changes, name="memtop-phases", daemon=True).start()

    def _find_changes(self) -> None:
        """Classify the whole recording once, in the background, for the overview strip and for
        "next/previous phase change": by ``fast_runs`` (the CLI gives colscan.phase_runs, the report's
        column scan: 8 hours in about a second); none where it cannot read the recording ("next phase"
        then uses what was played) or none is given."""
        if self._fast_runs is not None:
            try:
                rec = type(self.rec)(self.rec.path)  # its own connection: SQLite objects stay in one thread
                try:
                    self.phase_runs = self._fast_runs(rec) or {}
                finally:
                    rec.close()
            except Exception:  # noqa: BLE001 (a file it refuses: the report says why, in one line)
                pass
        self.scanned = True

    def _changes(self, gpu: int | None) -> list[float]:
        runs = self.phase_runs
        keys = [gpu] if gpu in runs else list(runs)
        return sorted({t for g in keys for t, lab in runs[g][1:] if lab != "warmup"})

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:  # a quit before the first paint never started it
            self._thread.join(timeout=5)

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        self._wake.set()
        self._status()
        self.pipeline.on_tick()  # shown now: the app's timer paints only when no ticks come for a while

    def set_speed(self, speed: float) -> None:
        self.speed = min(64.0, max(0.25, speed))
        self._wake.set()
        self._status()
        self.pipeline.on_tick()

    def seek(self, offset: float) -> None:
        """Jump to ``offset`` seconds into the recording (read from there: the store seeks)."""
        with self._seek_lock:
            self._seek = min(max(0.0, offset), self.rec.duration)
            self.position = self._seek  # repeated keys step from where the last one landed
        self._wake.set()

    @property
    def duration(self) -> float:
        return self.rec.duration

    def next_change(self, gpu: int | None = None) -> float | None:
        """Offset of the next phase-label change after the current position."""
        changes = self._changes(gpu)
        if changes or self.scanned:
            return next((c for c in changes if c > self.position + 0.05), None)
        labels = self.pipeline.view().labels
        cur = self.position + self.rec.t0
        for ls in labels.values():
            for a, b in zip(ls, ls[1:]):
                if b.t > cur + 0.5 and a.label != b.label and b.label != "warmup":
                    return b.t - self.rec.t0
        return None

    def prev_change(self, gpu: int | None = None) -> float | None:
        """Offset of the last phase-label change before the current position."""
        return next((c for c in reversed(self._changes(gpu)) if c < self.position - 0.3), None)

    def _status(self) -> None:
        self.pipeline.set_status(
            position=self.position,
            duration=self.rec.duration,
            paused=self.paused,
            speed=self.speed,
            origin=self.rec.t0,
        )

    def _prefill(self, start: float) -> None:
        """Fill the timeline with what came before ``start`` (no pacing) so a seek shows context."""
        self.pipeline.reset()
        lo = max(self.rec.t0, start - self.prefill_s)
        for f in self.rec.frames(lo, start):
            if self._stop.is_set() or self._seek is not None:
                return
            self.pipeline.on_frame(f, tick=False)

    def _take_seek(self) -> float | None:
        """The newest seek asked for, taken once: under the lock ``seek`` sets it with, so a key pressed
        while the last seek is being taken (n, then End at once) is never overwritten by None."""
        with self._seek_lock:
            at, self._seek = self._seek, None
            if at is not None:
                self.position = at
            return at

    def _main(self) -> None:
        try:
            self._run()
        except UserError as e:
            if self._on_error is None:
                raise
            self._on_error(e)

    def _run(self) -> None:
        start = self.rec.t0
        if (at := self._take_seek()) is not None:
            start = self.rec.t0 + at
        while not self._stop.is_set():
            if start > self.rec.t0:
                self._prefill(start)
            else:
                self.pipeline.reset()
            self.position = start - self.rec.t0  # a seek while paused shows where it landed
            self._status()
            self.pipeline.on_tick()
            prev_t: float | None = None
            prev_wall = self._clock()
            for f in self.rec.frames(start=start if start > self.rec.t0 else None):
                if self._stop.is_set():
                    return
                # (paused, a seek shows the Frame where it landed before it waits)
                while self.paused and prev_t is not None and self._seek is None and not self._stop.is_set():
                    self._wake.wait(0.2)
                    self._wake.clear()
                    prev_wall = self._clock()
                if self._seek is not None:
                    break
                if prev_t is not None:
                    due = prev_wall + (f.t - prev_t) / self.speed
                    while (
                        (delay := due - self._clock()) > 0 and self._seek is None and not self._stop.is_set()
                    ):
                        self._wake.wait(min(delay, 1.0))  # (a damaged time's gap: no wait past TIMEOUT_MAX)
                        self._wake.clear()
                    if self._seek is not None:
                        break
                prev_t, prev_wall = f.t, self._clock()
                self.position = f.t - self.rec.t0
                self._status()
                self.pipeline.on_frame(f)
            if (at := self._take_seek()) is not None:
                start = self.rec.t0 + at
                continue
            if not self.loop:
                paused, self.paused = self.paused, True  # at the end; a seek plays on unless paused before
                self._status()
                while self._seek is None and not self._stop.is_set():
                    self._wake.wait(0.5)
                    self._wake.clear()
                if (at := self._take_seek()) is not None:
                    start = self.rec.t0 + at
                    self.paused = self.paused and paused  # (space pressed at the end: plays)
                continue
            start = self.rec.t0
