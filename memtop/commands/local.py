"""The TUI commands (live, replay, demo) and report/export entry points."""

from __future__ import annotations

import argparse
import gc
import os
import platform
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from memtop.commands.firstlook import FirstLook
from memtop.config import Config
from memtop.core.errors import UserError
from memtop.core.sanitize import clean
from memtop.core.timefmt import clock

if TYPE_CHECKING:
    from collections.abc import Callable

    from memtop.agent.tracer import Notify, Tracer
    from memtop.collectors.nvml_calls import RealNvml
    from memtop.core.model import ProcSample
    from memtop.live.pipeline import Pipeline
    from memtop.live.playback import Playback
    from memtop.live.sampler import Sampler
    from memtop.storage.store import Recording

DEMO = "demo.memtop"
TRIM_AFTER_S = 3.0  # the app is up and painting by then (0.5 s on the H100, 2 s on a loaded VM)


def open_recording(path: str | Path) -> Recording:
    """The store (and SQLite) load here: a live view without --record never needs them."""
    from memtop.storage.store import Recording

    return Recording(path)


def demo_path() -> Path:
    from importlib import resources  # ~10 ms: only the demo needs it

    return Path(str(resources.files("memtop") / "data" / DEMO))


def _lean_process() -> None:
    """Before Textual loads: asyncio imports ssl for TLS streams the TUI never opens, and it is
    4 MiB of a live view's RSS with libcrypto (bench/RESULTS.md); asyncio runs without it.
    The cyclic garbage collector waits for the first paint (the app enables it then): importing
    and starting Textual and memtop makes few cycles, yet the collector went over the new objects
    some 100 times on the way (~9 ms of the main thread's CPU on the VM; bench/RESULTS.md)."""
    if "ssl" not in sys.modules:
        sys.modules["ssl"] = None  # type: ignore[assignment]  # `import ssl` raises ImportError
    gc.disable()
    _one_malloc_arena()


M_ARENA_MAX = -8  # glibc's mallopt parameter


def _one_malloc_arena() -> None:
    """Before any thread starts: glibc gives each thread that mallocs an arena of its own (up to 8
    per core), and memtop's dozen light threads (GPU readers, host, stacks, Textual's) then keep
    free pages in a dozen arenas. One arena is 0.3-0.4 MiB less RSS (bench/RESULTS.md); these
    threads allocate little and mostly under the GIL, so they hardly contend for it. A no-op
    without glibc."""
    if (mallopt := _glibc("mallopt")) is not None:
        mallopt(M_ARENA_MAX, 1)


def _glibc(name: str) -> Callable | None:
    """glibc's function ``name``; None under another C library (musl, macOS), where the memory
    tunings that use it have nothing to do."""
    import ctypes  # loaded anyway by pynvml

    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def release_free_memory() -> None:
    """Once start-up is over: free its garbage cycles and give glibc's free heap pages back to the
    OS. NVML's start and Textual's (imports, CSS, first layout) free more than they keep, and RSS
    counts those pages until malloc_trim returns them (bench/RESULTS.md). A no-op without glibc."""
    gc.collect()
    if (trim := _glibc("malloc_trim")) is not None:
        trim(0)


def _start_nvml() -> RealNvml | None:
    """The driver started before the collectors are imported; None where NVML cannot start (the
    collector then says why, as it would without this)."""
    from memtop.collectors.nvml_calls import NvmlUnavailable, RealNvml

    nv = RealNvml()
    try:
        nv.init()
    except NvmlUnavailable:
        return None
    return nv


def _need_tty() -> None:
    if sys.stdin.isatty() and not sys.stderr.isatty():  # `memtop 2>err.log`: Textual paints on stderr
        raise UserError(
            "the TUI draws on stderr, which is not a terminal here (2> redirects it): leave stderr on "
            "the terminal, or use `memtop record` or `memtop report` for a file"
        )
    if not (sys.stderr.isatty() and sys.stdin.isatty()):
        raise UserError("the TUI needs a terminal; use `memtop record` or `memtop report` when piping")


class LiveController:
    """Starts sampling off the UI thread, as early as live() can: the driver first (nvmlInit, 0.1-0.3 s
    on the H100, in ctypes calls that release the GIL), while the main thread imports the pipeline
    and Textual, so the first paint already holds a GPU reading. The sampler is built once the
    pipeline is attached (its frames go there); the pipeline's metadata (driver, GPUs) follows."""

    def __init__(
        self,
        args: argparse.Namespace,
        pipeline: Pipeline | None = None,
        sampler=None,
        first_look: FirstLook | None = None,
    ) -> None:
        self.args = args
        self.first_look = first_look  # readings on screen before the TUI's imports are done
        self.pipeline = pipeline
        self.sampler = sampler  # built already when recording (the file's metadata names the GPUs)
        self._recording = sampler is not None
        self._attached = threading.Event()  # the pipeline is there (or the view has ended)
        if pipeline is not None:
            self._attached.set()
        self._thread = threading.Thread(target=self._start, name="memtop-start", daemon=True)
        self._trim = threading.Timer(TRIM_AFTER_S, release_free_memory)
        self._trim.name, self._trim.daemon = "memtop-trim", True
        self._lock = threading.Lock()  # which of stop() and _start() stops a sampler started late
        self._running: Sampler | None = None
        self._stopped = False
        self._tracer: Tracer | None = None  # `x` and --trace-on (made when first wanted)
        self._trace_notify: Notify | None = None

    def start(self) -> None:
        """Idempotent: live() starts it before its imports, a test's app after its first paint."""
        if self._thread.ident is None:
            self._thread.start()
            self._trim.start()

    def attach(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self._attached.set()

    def _start(self) -> None:
        nv: RealNvml | None = None
        try:
            if self.sampler is None:
                nv = _start_nvml()
            if nv is not None and self.first_look is not None:
                self.first_look.paint(nv)
            self._attached.wait()
            if self._stopped or self.pipeline is None:  # the view ended first (a bad flag, a quick q)
                if nv is not None:
                    nv.shutdown()
                return
            from dataclasses import replace

            from memtop.live.sampler import VIEW_ENERGY_S, Sampler, SamplerConfig

            if self.sampler is None:
                cfg = replace(SamplerConfig.from_args(self.args, recording=False), energy_s=VIEW_ENERGY_S)
                self.sampler = Sampler(cfg if nv is None else replace(cfg, nvml=nv), self.pipeline.on_frame)
            self.sampler.start()
        except Exception as e:  # the app stays up to say so (and to be quit) rather than going blank
            if nv is not None and self.sampler is None:
                nv.shutdown()
            self._attached.wait()
            if self.pipeline is not None:
                self.pipeline.set_status(fault=f"sampling could not start: {type(e).__name__}: {e}")
                self.pipeline.on_tick()  # shown at once (the app's timer waits 1.5 paint intervals)
            return
        with self._lock:
            late = self._stopped
            if not late:
                self._running = self.sampler
        if late:  # the app ended (a bad flag, a quick q) while NVML was starting: stop it here
            self.sampler.stop()
            return
        if not self.pipeline.meta.get("gpus"):
            self.pipeline.meta = {**self.pipeline.meta, **self.sampler.run_meta()}
        if getattr(self.args, "trace_on", None):
            self.tracer().start()

    def stop(self) -> None:
        """Idempotent: the app stops it on unmount, live() again if the app never ran."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._attached.set()  # a start-up waiting for a pipeline that will not come ends
        self._trim.cancel()
        if self._tracer is not None:
            self._tracer.stop()
        if self.first_look is not None:
            self.first_look.close()
        if self._thread.ident is None:  # never started: only a recording's sampler has NVML up
            if self.sampler is not None:
                self.sampler.stop()
            return
        if self._recording:  # quick (NVML is up already); its file closes after the sampler stops
            self._thread.join(timeout=5)
            running = self.sampler
        else:  # a slow nvmlInit (seconds on some nodes) must not hold up an exit: a sampler that
            with self._lock:  # starts after this stops itself in _start
                running = self._running
        if running is not None:
            running.stop()

    def _watched(self, pid: int) -> ProcSample | None:
        f = self.pipeline.frame if self.pipeline is not None else None
        procs = f.host.procs if f is not None and f.host is not None else ()
        return next((p for p in procs if p.pid == pid), None)

    def may_signal(self, pid: int) -> str:
        """Why ``pid`` may not be signalled from the view, or "" when it may: only a process memtop
        watches (in the newest frame), never memtop itself, and only where the kernel lets this user
        (kill(pid, 0) checks the permission and sends nothing)."""
        p = self._watched(pid)
        if p is None:
            return f"{pid} is not a process memtop watches now"
        if pid in (os.getpid(), 1):
            return f"{pid} is not a process to stop from here"
        try:
            os.kill(pid, 0)
        except PermissionError:
            return f"not permitted: {pid} runs as {clean(p.user, 32)}, and this user may not signal it"
        except ProcessLookupError:
            return f"{pid} has exited"
        return ""

    def send_signal(self, pid: int, sig: signal.Signals) -> str:
        """Send ``sig`` (SIGINT or SIGTERM) to a watched process; one line saying what happened. The
        pidfd is opened before the process is checked: a PID reused since the check is not signalled."""
        if sig not in (signal.SIGINT, signal.SIGTERM):
            return f"{sig.name} is not offered"
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return f"{pid} has exited"
        except OSError as e:
            return f"{pid} not signalled: {e.strerror}"
        try:
            why = self.may_signal(pid)
            p = self._watched(pid)
            if why or p is None:
                return why
            from memtop.collectors import procfs

            now = procfs.cmdline(Path("/"), pid) or []  # (the frame holds it bounded: a prefix)
            if p.argv and not (len(now) >= len(p.argv) and all(n.startswith(a) for n, a in zip(now, p.argv))):
                return f"{pid} is another process now (its command line changed): not signalled"
            signal.pidfd_send_signal(fd, sig)
        except PermissionError:
            return f"not permitted to signal {pid}"
        except ProcessLookupError:
            return f"{pid} has exited"
        finally:
            os.close(fd)
        return f"sent {sig.name} to {pid}"

    def tracer(self) -> Tracer:
        """The live view's captures (memtop.agent.tracer), with the run's --trace-* options."""
        if self._tracer is None:
            from memtop.agent.tracer import SECONDS, TraceOptions, Tracer

            assert self.pipeline is not None
            a = self.args
            opts = TraceOptions(
                seconds=getattr(a, "trace_seconds", None) or SECONDS,
                directory=Path(getattr(a, "trace_dir", None) or "."),
                on=frozenset(getattr(a, "trace_on", None) or ()),
                **({"every_s": a.trace_every} if getattr(a, "trace_every", None) else {}),
            )
            self._tracer = Tracer(opts, self.pipeline, self._trace_notify)
        return self._tracer

    def listen_traces(self, notify: Notify) -> None:
        """Where the captures' lines go (the app posts them to itself: they come from other threads)."""
        self._trace_notify = notify
        if self._tracer is not None:
            self._tracer.notify = notify

    def capture_trace(self, pid: int) -> bool:
        """`x`: capture ``pid`` and its job's other ranks now; blocks for the window and the merge (the
        app calls it from a worker thread). Its outcome comes through listen_traces' ``notify``."""
        if self.pipeline is None:
            return False
        return self.tracer().capture(pid)

    def request_native(self, pid: int) -> bool:
        if self.sampler is None or self.sampler.stacks is None:
            return False
        self.sampler.stacks.request_native(pid)
        return True


def display_options(args: argparse.Namespace, cfg: Config) -> Config:
    """The config file's display choices with the command line's on top (flags win)."""
    return Config(
        theme=args.theme or cfg.theme,
        paint_rate=args.paint_rate or cfg.paint_rate,
        mouse=cfg.mouse and not args.no_mouse,
        ascii=args.ascii or cfg.ascii,
        letters=cfg.letters,
        timeline_s=cfg.timeline_s,
    )


def _run_app(pipeline: Pipeline, controller: Playback | LiveController, args: argparse.Namespace) -> int:
    """Run the TUI; its exit code: q and Ctrl-C 0, a signal 128+N (terminal restored, recording
    closed), an exception anywhere 70 with one line naming the log file (crash.py)."""
    _need_tty()
    from memtop import config
    from memtop.crash import report_crash
    from memtop.tui.app import MemtopApp

    opts = display_options(args, config.load())
    first_look = controller.first_look if isinstance(controller, LiveController) else None

    def make(theme: str | None) -> MemtopApp:
        return MemtopApp(
            pipeline,
            controller,
            paint_rate=opts.paint_rate or 1.0,
            ascii_only=opts.ascii,
            theme=theme,
            letters=opts.letters,
            timeline_s=opts.timeline_s,
            save_config=True,
            no_color=getattr(args, "no_color", False),
        )

    try:
        app = make(opts.theme)
    except UserError as e:
        if args.theme:  # the flag's theme: the user's error
            raise
        # the config file's: it must not stop the monitor from starting (said on the normal screen)
        if first_look is not None:
            first_look.close()
        print(f"memtop: ignoring the theme in {config.path()}: {clean(str(e), 300)}", file=sys.stderr)
        app = make(None)
    hook = threading.excepthook

    def thread_crash(a: threading.ExceptHookArgs) -> None:
        """One of memtop's threads died (replay, phase scan, start-up): a crash like one in the app.
        Textual's own threads are left to Textual (its writer meets EIO after a hang-up)."""
        ours = a.thread is not None and a.thread.name.startswith("memtop-")
        if ours and a.exc_value is not None and app.is_running:
            app.call_from_thread(app.crash, a.exc_value)
        else:
            hook(a)

    threading.excepthook = thread_crash
    if first_look is not None:
        first_look.hand_over()
    try:
        app.run(mouse=opts.mouse)
    except Exception as e:  # Textual failed outside its own handler (it has restored the terminal)
        return report_crash(e)
    finally:
        threading.excepthook = hook
    if isinstance(app.crashed, UserError):  # a recording damaged past what replay can skip
        print(f"memtop: {app.crashed}", file=sys.stderr)
        return 2
    if app.crashed is not None:
        return report_crash(app.crashed)
    return app.return_code or 0


def replay_app(
    path: Path, args: argparse.Namespace, mode: str, loop: bool, speed: float = 1.0, start_at: float = 0.0
) -> int:
    rec = open_recording(path)  # (bad input first: one line, with or without a terminal)
    if start_at > rec.duration:
        raise UserError(
            f"--at {clock(start_at)} is past the end: the recording covers 0:00:00–{clock(rec.duration)}"
        )
    _need_tty()
    _lean_process()
    from memtop.live.pipeline import Pipeline, ReplaySource, Status

    pipeline = Pipeline(Status(mode, duration=rec.duration, speed=speed, source=str(path)), meta=rec.meta)
    src = ReplaySource(rec, pipeline, speed=speed, loop=loop, start_at=start_at, fast_runs=_phase_runs)
    return _run_app(pipeline, src, args)


def _phase_runs(rec: Recording) -> dict[int, tuple[tuple[float, str], ...]] | None:
    """The overview strip's runs by columns (imported in the scan's thread: not at start-up)."""
    from memtop.analysis.colscan import phase_runs

    return phase_runs(rec)


def check_trace_dir(args: argparse.Namespace) -> None:
    """--trace-dir must be a directory that exists (the captures are written there, never made)."""
    d = getattr(args, "trace_dir", None)
    if d is not None and not Path(d).is_dir():
        raise UserError(f"--trace-dir {clean(d, 200)}: no such directory")


# flags that act on this machine's processes: --demo plays a recording, where they would be ignored
LIVE_ONLY = (("record", "--record"), ("pid", "--pid"), ("trace_on", "--trace-on"))


def live(args: argparse.Namespace) -> int:
    check_trace_dir(args)
    if args.demo:
        given = [flag for name, flag in LIVE_ONLY if getattr(args, name, None)]
        if given:
            raise UserError(
                f"{given[0]} watches this machine live: it does nothing with --demo (a recording)"
            )
        # start a minute in, so the first screen already shows a timeline of phases
        return replay_app(demo_path(), args, "demo", loop=True, start_at=60.0)
    _need_tty()
    _lean_process()
    controller = None if args.record else LiveController(args, first_look=FirstLook(sys.stderr))
    if controller is not None:
        controller.start()  # first: the driver's start overlaps the imports below and Textual's
    writer = sampler = None
    try:
        from memtop.live.pipeline import Pipeline, Status
        from memtop.live.sampler import check_pids

        check_pids(args.pid)
        meta = {"host": platform.node()}  # the rest once NVML is up (LiveController)
        if args.record:  # a recording names its GPUs in its metadata: NVML first
            from memtop.live.sampler import Sampler, SamplerConfig
            from memtop.storage.store import Writer

            sampler = Sampler(SamplerConfig.from_args(args, recording=True), on_frame=lambda f: None)
            sampler.nvml.start()
            meta = sampler.run_meta()
            writer = Writer(args.record, meta, force=args.force)
        pipeline = Pipeline(Status("live", recording=args.record), meta=meta, writer=writer)
        if sampler is not None:
            sampler.on_frame = pipeline.on_frame
        if controller is None:
            controller = LiveController(args, pipeline, sampler)
        else:
            controller.attach(pipeline)
        controller.start()
        return _run_app(pipeline, controller, args)
    finally:
        if controller is not None:
            controller.stop()
        if writer is not None:
            writer.close()


def replay(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if args.summary:
        import json

        rec = open_recording(path)
        print(json.dumps(rec.summary(), indent=2))
        return 0
    return replay_app(path, args, "replay", loop=False, speed=args.speed, start_at=args.at)


def report(args: argparse.Namespace) -> int:
    from memtop.outputs.report import build_report, render

    rec = open_recording(args.file)
    _reuse_freed_memory()
    print(render(build_report(rec, gpu=args.gpu, t_from=args.t_from, t_to=args.t_to), args.format))
    return 0


def _reuse_freed_memory() -> None:
    """glibc's malloc told to keep what a report frees for its next arrays (its chunk process, forked,
    inherits it): by default an array past 128 KB is mapped afresh and unmapped when freed, and the
    heap's freed top given back, so each of a report's thousands of temporaries is zeroed page by
    page by the kernel again (an 8-hour report: 110,000-184,000 page faults, a fifth of its CPU as
    system time; kept: 35-45 % fewer, peak RSS the same or 11 % more). Another C library: nothing to do."""
    if (mallopt := _glibc("mallopt")) is None:
        return
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: glibc's largest (an array of more is still mapped)
    mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: the heap's free top is kept (the process is short-lived)


def export(args: argparse.Namespace) -> int:
    from memtop.outputs.export import export_perfetto

    rec = open_recording(args.file)
    n = export_perfetto(
        rec,
        Path(args.perfetto),
        force=args.force,
        gpu=args.gpu,
        t_from=args.t_from,
        t_to=args.t_to,
        fmt=args.format,
    )
    print(f"wrote {n} trace events to {args.perfetto} (open it in https://ui.perfetto.dev)", file=sys.stderr)
    return 0
