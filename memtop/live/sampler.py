"""Runs the collectors on one clock and emits immutable Frames.

Each collector's blocking ``sample`` runs in that collector's own thread, so a slow GPU or a
hung py-spy never delays the others; one more thread snapshots their latest parts into a Frame
at the base tick for ``on_frame`` (store writer, classifier, UI). Plain threads sleeping on one
stop Event: an asyncio loop handing work to executors cost a tenth of a 1 Hz monitor's CPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtop.core.errors import UserError
from memtop.core.model import (
    Capability,
    Frame,
    GpuSample,
    HostSample,
    PerfSample,
    SeriesChunk,
    StackSample,
    now,
    wall_offset,
)

if TYPE_CHECKING:  # the collectors (psutil, ctypes) load with the first Sampler, not with its config
    from memtop.collectors.base import Collector
    from memtop.collectors.nvml_calls import Nvml
    from memtop.collectors.stacks import StacksCollector


# The live view reads the GPU at 5 Hz (NVML-only mode already did): GPM's call (1.5 ms of CPU whatever
# it is asked) with util and power at 10 Hz cost ~1 % of a core more on the H200, and the held-out runs
# thinned to 5 Hz score the same macro-F1 (bench/thin_accuracy.py; bench/RESULTS.md, "live footprint,
# fifth pass"). A recording keeps 10 Hz. Either is the default of --interval where it is not given.
LIVE_GPU_S = 0.2
RECORD_GPU_S = 0.1

# The stacks' fast pace (Sampler._stacks_decide) is for telling a sync stall from CPU-bound work, which
# only a main-thread stack in a sync wait does (the rule's line: phases.SYNC_SHARE of the window). Once a
# live view's last SETTLED_N plain dumps of a process (within the classifier's stack window) found its main
# thread in a sync wait SETTLED_RATIO times as often as that line, half as many dumps tell the same and the
# pace goes back to normal: a py-spy dump is the default view's costliest reading (5.5 ms of CPU on the
# H200, 4 a second at the fast pace). Fewer sync waits (rare ones, or none: CPU-bound) keep the fast pace,
# where each dump may decide; so does a phase change, as its dumps replace the last SETTLED_N.
SETTLED_N = 8
SETTLED_RATIO = 3.0

# The energy counter costs 5.6 ms of CPU a read on the H200 (bench/RESULTS.md, "live footprint, seventh
# pass"). A recording and `serve` (whose snapshot splits it by phase) read it with the health counters
# (collectors.nvml.HEALTH_EVERY_S); the TUI's live view, where only the GPU detail screen shows it (a
# counter since the driver loaded), every VIEW_ENERGY_S.
VIEW_ENERGY_S = 30.0


class SyncWindow:
    """Whether each watched process's last plain dumps found its main thread in a sync wait, to tell
    when the stacks' evidence is settled (see SETTLED_N)."""

    def __init__(self, window_s: float, line: float) -> None:
        self.window_s = window_s
        self.line = line * SETTLED_RATIO
        self._seen: dict[int, deque[tuple[float, bool]]] = {}

    def add(self, s: StackSample) -> None:
        m = s.main
        if m is not None and not s.native:
            seen = self._seen.setdefault(s.pid, deque(maxlen=SETTLED_N))
            seen.append((s.t, m.klass == "sync"))

    def settled(self, pid: int, t: float) -> bool:
        seen = self._seen.get(pid)
        return (
            seen is not None
            and len(seen) == SETTLED_N
            and seen[0][0] >= t - self.window_s
            and sum(sync for _, sync in seen) >= self.line * SETTLED_N
        )

    def keep(self, pids: Iterable[int]) -> None:
        """Forget the processes no longer watched."""
        for pid in set(self._seen) - set(pids):
            del self._seen[pid]


@dataclass
class SamplerConfig:
    gpu_interval: float = 0.1
    host_interval: float = 0.5
    stack_interval: float = 0.5
    perf_interval: float = 1.0
    use_gpm: bool = True
    series: bool = True  # the driver's util/power sample buffers, drained each second (for recordings)
    stacks: bool = True
    native: bool = False  # the sparse automatic --native dumps: they pause the target (opt-in: --native)
    perf: bool = True
    pids: tuple[int, ...] = ()
    nvml: Nvml | None = None  # a backend (ReplayNvml in tests); None = the real driver
    root: Path = field(default_factory=lambda: Path("/"))
    # a live view (no recording): a process on saturated GPUs is dumped every collectors.stacks.SPARSE_S,
    # and the fast pace ends once the stacks are settled (SETTLED_N); a GPU that one process holds has its
    # per-process utilisation read every collectors.nvml.ALONE_UTIL_S; a recording keeps every reading
    lean: bool = False
    energy_s: float | None = None  # the energy counter's cadence; None: with the health counters

    @classmethod
    def from_args(cls, args: argparse.Namespace, recording: bool) -> SamplerConfig:
        """The config the CLI's flags ask for; a --pid that does not exist is a UserError."""
        check_pids(args.pid)
        gpu = args.interval if args.interval is not None else RECORD_GPU_S if recording else LIVE_GPU_S
        # the host follows a slower GPU cadence (--interval 1 asks for a 1 Hz monitor), never above 2 Hz
        return cls(
            gpu_interval=gpu,
            host_interval=max(0.5, gpu),
            stack_interval=args.stack_interval,
            use_gpm=not args.no_gpm,
            stacks=not args.no_stacks,
            native=args.native,
            perf=not args.no_perf,
            pids=tuple(args.pid),
            series=recording,
            lean=not recording,
        )


def check_pids(pids: Iterable[int]) -> None:
    for pid in pids:
        if not Path(f"/proc/{pid}").exists():
            raise UserError(f"no process with PID {pid}")


def is_python(pid: int) -> bool:
    try:
        exe = Path(f"/proc/{pid}/exe").resolve().name
    except OSError:
        exe = ""
    if "python" in exe:
        return True
    try:
        return b"python" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False


class Sampler:
    def __init__(self, cfg: SamplerConfig, on_frame: Callable[[Frame], None]):
        from memtop.collectors.host import HostCollector
        from memtop.collectors.nvml import ALONE_UTIL_S, HEALTH_EVERY_S, NvmlCollector
        from memtop.collectors.perf import PerfCollector
        from memtop.collectors.pidns import PidMap

        self.cfg = cfg
        self.on_frame = on_frame
        self.offset = wall_offset()
        pids = PidMap(cfg.root)
        self.nvml = NvmlCollector(
            cfg.nvml,
            cfg.gpu_interval,
            cfg.use_gpm,
            self.offset,
            cfg.series,
            pids.local,
            cfg.energy_s or HEALTH_EVERY_S,
            ALONE_UTIL_S if cfg.lean else 1.0,
        )
        self.host = HostCollector(cfg.host_interval, cfg.root, cfg.pids, pids)
        self.stacks: StacksCollector | None = None
        if cfg.stacks:  # imported only here: --no-stacks never loads py-spy's collector
            from memtop.collectors.stacks import StacksCollector

            self.stacks = StacksCollector(cfg.stack_interval, pids=cfg.pids)
        self.perf = PerfCollector(cfg.perf_interval, cfg.pids) if cfg.perf else None
        self.sync = self._sync_window() if cfg.lean and cfg.stacks else None
        self.missed = 0
        self._rng = random.Random()
        self.frames = 0
        self._gpus: dict[int, GpuSample] = {}
        self._host: HostSample | None = None
        self._stacks: dict[int, StackSample] = {}
        # a --native dump takes ~1 s on a torch rank: the stacks thread is late, its next cycle starts
        # at once, and a plain sample replaced the dump before any Frame carried it (`s` showed
        # nothing on two H100s). A sample after a dump waits here until a Frame has taken the dump.
        self._unsent_native: set[int] = set()
        self._after_native: dict[int, StackSample] = {}
        self._perf: dict[int, PerfSample] = {}
        self._series: list[SeriesChunk] = []
        self._notes: deque[str] = deque(maxlen=20)
        self._caps: tuple[Capability, ...] = ()
        self._roots: tuple[int, ...] = ()  # who is watched, from the last _retarget
        self._gpu_pids: dict[int, tuple[int, ...]] = {}
        self._python: dict[int, bool] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._first_gpu = threading.Event()  # the first Frame waits (briefly) for a GPU reading
        self._threads: list[threading.Thread] = []
        self._started: list[Collector] = []

    @staticmethod
    def _sync_window() -> SyncWindow:
        from memtop.analysis.phases import STACK_WINDOW_S, SYNC_SHARE  # a live view loads it anyway

        return SyncWindow(STACK_WINDOW_S, SYNC_SHARE)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        self.nvml.start()
        others = self._collectors()[len(self.nvml.readers) :]  # the GPU readers start with NVML
        for c in others:
            c.start()
        collectors = self._started = [*self.nvml.readers, *others]
        names = [f"memtop-gpu{r.index}" for r in self.nvml.readers] + [f"memtop-{c.name}" for c in others]
        self._threads = [
            threading.Thread(target=self._run, args=(c,), name=n, daemon=True)
            for c, n in zip(collectors, names)
        ]
        self._threads.append(threading.Thread(target=self._frames, name="memtop-sampler", daemon=True))
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Ends the threads; one stuck in a collector (a hung py-spy) is left behind after 5 s."""
        self._stop.set()
        end = now() + 5.0
        for t in self._threads:
            t.join(timeout=max(0.0, end - now()))
        for c in self._started:
            c.stop()
        self.nvml.stop()

    def _collectors(self) -> list[Collector]:
        cs: list[Collector] = [*self.nvml.readers, self.host]
        cs += [c for c in (self.stacks, self.perf) if c is not None]
        return cs

    def capabilities(self) -> tuple[Capability, ...]:
        caps = list(self.nvml.capabilities()) + list(self.host.capabilities())
        for c in (self.stacks, self.perf):
            if c is not None:
                caps.extend(c.capabilities())
        return tuple(caps)

    def note(self, text: str) -> None:
        with self._lock:
            if not self._notes or self._notes[-1] != text:
                self._notes.append(text)

    def _run(self, c: Collector) -> None:
        due = now()
        while True:
            try:
                parts = c.sample(now())
            except Exception as e:  # a collector bug must not end the run
                self.note(f"{c.name} collector failed: {type(e).__name__}: {e}")
                parts = []
            self._absorb(parts)
            due += c.interval * (1 + c.jitter * self._rng.uniform(-1, 1)) if c.jitter else c.interval
            if due < now():
                with self._lock:
                    self.missed += int((now() - due) / c.interval) + 1
                due = now()
            if self._stop.wait(max(0.0, due - now())):
                return

    def _absorb(self, parts: Iterable[object]) -> None:
        with self._lock:
            for p in parts:
                if isinstance(p, GpuSample):
                    self._gpus[p.index] = p
                    self._first_gpu.set()
                elif isinstance(p, SeriesChunk):
                    self._series.append(p)
                elif isinstance(p, HostSample):
                    self._host = p
                elif isinstance(p, StackSample):
                    if self.sync is not None and p.pid in self._roots:  # (workers: no pace of their own)
                        self.sync.add(p)
                    if p.pid in self._unsent_native and not p.native:
                        self._after_native[p.pid] = p
                    else:
                        self._stacks[p.pid] = p
                        if p.native:
                            self._unsent_native.add(p.pid)
                elif isinstance(p, PerfSample):
                    self._perf[p.pid] = p

    def _retarget(self) -> None:
        """Feed who to watch (from NVML and host data) back to the host, stack and perf collectors."""
        gpu_pids: dict[int, tuple[int, ...]] = {}
        for g in self._gpus.values():
            for p in g.processes:
                gpu_pids[p.pid] = (*gpu_pids.get(p.pid, ()), g.index)
        self.host.set_gpu_processes(gpu_pids, tuple(r.info.get("pci_bus_id", "") for r in self.nvml.readers))
        roots = tuple(self.cfg.pids) or tuple(p for p in gpu_pids if self._is_python(p))
        targets: dict[int, int | None] = dict.fromkeys(roots)
        if self._host is not None:
            for ps in self._host.procs:
                if ps.worker_of in targets and ps.pid not in targets and self._is_python(ps.pid):
                    targets[ps.pid] = ps.worker_of
        self._roots, self._gpu_pids = roots, gpu_pids
        if self.stacks is not None:
            self.stacks.set_targets(targets)
        if self.sync is not None:
            self.sync.keep(roots)
        if self.perf is not None:
            self.perf.set_targets(roots)
        live = set(targets)
        for pid in [p for p in self._python if p not in live and p not in gpu_pids]:
            del self._python[pid]
        for pid in [p for p in self._stacks if p not in live]:
            del self._stacks[pid]
        for pid in [p for p in self._perf if p not in live]:
            del self._perf[pid]

    def _is_python(self, pid: int) -> bool:
        """is_python, remembered while the pid is watched (resolving /proc/PID/exe each second cost
        more than the rest of the retarget)."""
        if pid not in self._python:
            self._python[pid] = is_python(pid)
        return self._python[pid]

    def _pace_stacks(self, t: float | None = None) -> None:
        """Every tick, not with the 1 s retarget: a sync stall starting should speed stacks up at once."""
        if self.stacks is not None:
            with self._lock:
                t = now() if t is None else t
                self.stacks.set_fast(self._stacks_decide(self._roots, self._gpu_pids, t))
                if self.cfg.lean:
                    self.stacks.set_sparse(self._on_saturated())
                if not self.cfg.native:
                    return
                for pid in self._opaque_waits():
                    self.stacks.want_native(pid, t)  # sparse: at most one per NATIVE_EVERY_S per pid

    def _on_saturated(self) -> frozenset[int]:
        """The watched processes whose GPUs are all saturated: their stacks decide nothing now."""
        out = []
        for pid in self._roots:
            gs = [self._gpus.get(i) for i in self._gpu_pids.get(pid, ())]
            if gs and all(g is not None and g.saturated for g in gs):
                out.append(pid)
        return frozenset(out)

    def _opaque_waits(self) -> list[int]:
        """GPU processes whose main thread waits in native code without the GIL, in no wait its
        Python stack names, while their GPU is under-used: a sync the Python line does not show
        (a forward pass that reads a flag, a library's own .item()), or not one. Only a --native
        dump's leaf (cudaStreamSynchronize, _local_scalar_dense...) tells."""
        out = []
        for pid in self._roots:
            s = self._stacks.get(pid)
            m = None if s is None or s.native else s.main
            if m is None or not m.active or m.owns_gil or m.klass != "other":
                continue
            for i in self._gpu_pids.get(pid, ()):
                g = self._gpus.get(i)
                use = None if g is None else g.engine
                if use is not None and 10 <= use < 80:
                    out.append(pid)
                    break
        return out

    def _stacks_decide(self, roots: tuple[int, ...], gpu_pids: dict[int, tuple[int, ...]], t: float) -> bool:
        """A GPU partly busy while its process burns a core: sync-stall and CPU-bound look alike
        here and only a stack in a sync wait tells them apart, so those samples should come sooner
        (in a live view, until its stacks are settled)."""
        if self._host is None:
            return False
        busy_cpu = {p.pid for p in self._host.procs if p.pid in roots and p.cpu_pct >= 50}
        if self.sync is not None:
            busy_cpu = {pid for pid in busy_cpu if not self.sync.settled(pid, t)}
        for pid in busy_cpu:
            for i in gpu_pids.get(pid, ()):
                g = self._gpus.get(i)
                use = None if g is None else g.engine
                if use is not None and 10 <= use < 80:
                    return True
        return False

    def run_meta(self) -> dict[str, Any]:
        """What a recording says about where it came from (never environment variables)."""
        nv = self.nvml
        cfg = self.cfg
        return {
            "host": platform.node(),
            "started_wall": time.time(),
            "wall_offset": self.offset,
            "command": ["memtop", *sys.argv[1:]],
            "driver": nv.system["driver"] if nv.system else None,
            "nvml_version": nv.system["nvml_version"] if nv.system else None,
            "gpus": [
                {
                    "index": r.index,
                    "name": r.info["name"],
                    "uuid": r.info["uuid"],
                    "pci_bus_id": r.info.get("pci_bus_id"),
                    "mode": "gpm" if r.gpm else "nvml",
                }
                for r in nv.readers
            ],
            "cadence": {
                "gpu_s": cfg.gpu_interval,
                "host_s": cfg.host_interval,
                "stacks_s": cfg.stack_interval if cfg.stacks else None,
                "perf_s": cfg.perf_interval if cfg.perf else None,
            },
            "cpus": os.cpu_count(),
        }

    def snapshot(self, t: float) -> Frame:
        with self._lock:
            series, self._series = tuple(self._series), []
            frame = Frame(
                t=t,
                gpus=tuple(self._gpus[i] for i in sorted(self._gpus)),
                host=self._host,
                stacks=tuple(self._stacks[p] for p in sorted(self._stacks)),
                perf=tuple(self._perf[p] for p in sorted(self._perf)),
                series=series,
                caps=self._caps,
                notes=tuple(self._notes),
                jobs=self.host.jobs,
            )
            for pid in self._unsent_native:  # carried now: the sample after it takes its place
                later = self._after_native.pop(pid, None)
                if later is not None and pid in self._stacks:
                    self._stacks[pid] = later
            self._unsent_native.clear()
            return frame

    def _frames(self) -> None:
        base = min([r.interval for r in self.nvml.readers] or [self.cfg.host_interval])
        if self.nvml.readers:  # else the first reading waits a whole interval (1 s at --interval 1)
            self._first_gpu.wait(0.5)
        due = now()
        caps_due = due
        while True:
            t = now()
            if t >= caps_due:
                with self._lock:
                    self._retarget()
                self._caps = self.capabilities()
                caps_due = t + 1.0
            self._pace_stacks()
            frame = self.snapshot(t)
            self.frames += 1
            try:
                self.on_frame(frame)
            except Exception as e:
                self.note(f"frame consumer failed: {type(e).__name__}: {e}")
            due += base
            if due < now():
                due = now()
            if self._stop.wait(max(0.0, due - now())):
                return
