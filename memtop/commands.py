"""The TUI commands (live, replay, demo) and report/export entry points."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from memtop.errors import UserError
from memtop.pipeline import Pipeline, ReplaySource, Status

if TYPE_CHECKING:
    from memtop.store import Recording

DEMO = "demo.memtop"


def open_recording(path: str | Path) -> Recording:
    """The store (and SQLite) load here: a live view without --record never needs them."""
    from memtop.store import Recording

    return Recording(path)


def demo_path() -> Path:
    from importlib import resources  # ~10 ms: only the demo needs it

    return Path(str(resources.files("memtop") / "data" / DEMO))


def _need_tty() -> None:
    if not (sys.stderr.isatty() and sys.stdin.isatty()):  # Textual paints on stderr
        raise UserError("the TUI needs a terminal; use `memtop record` or `memtop report` when piping")


class LiveController:
    """Builds and starts the sampler after the first paint, off the UI thread (importing the
    collectors and starting NVML take a while); the pipeline's metadata (driver, GPUs) follows."""

    def __init__(self, args: argparse.Namespace, pipeline: Pipeline, sampler=None) -> None:
        self.args = args
        self.pipeline = pipeline
        self.sampler = sampler  # built already when recording (the file's metadata names the GPUs)
        self._thread = threading.Thread(target=self._start, name="memtop-start", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _start(self) -> None:
        from memtop.record import run_meta, sampler_config
        from memtop.sampler import Sampler

        try:
            if self.sampler is None:
                self.sampler = Sampler(
                    sampler_config(self.args, recording=False), on_frame=self.pipeline.on_frame
                )
            self.sampler.start()
        except Exception as e:  # the app stays up to say so (and to be quit) rather than going blank
            self.pipeline.set_status(fault=f"sampling could not start: {type(e).__name__}: {e}")
            return
        if not self.pipeline.meta.get("gpus"):
            self.pipeline.meta = {**self.pipeline.meta, **run_meta(self.sampler)}

    def stop(self) -> None:
        if self._thread.ident is not None:
            self._thread.join(timeout=5)
        if self.sampler is not None:
            self.sampler.stop()

    def request_native(self, pid: int) -> bool:
        if self.sampler is None or self.sampler.stacks is None:
            return False
        self.sampler.stacks.request_native(pid)
        return True


def _run_app(pipeline: Pipeline, controller, args: argparse.Namespace) -> int:
    _need_tty()
    from memtop.tui.app import MemtopApp

    app = MemtopApp(pipeline, controller, paint_rate=args.paint_rate, ascii_only=args.ascii, theme=args.theme)
    app.run(mouse=not args.no_mouse)
    return 0


def replay_app(
    path: Path, args: argparse.Namespace, mode: str, loop: bool, speed: float = 1.0, start_at: float = 0.0
) -> int:
    rec = open_recording(path)
    pipeline = Pipeline(Status(mode, duration=rec.duration, speed=speed, source=str(path)), meta=rec.meta)
    return _run_app(pipeline, ReplaySource(rec, pipeline, speed=speed, loop=loop, start_at=start_at), args)


def live(args: argparse.Namespace) -> int:
    if args.demo:
        # start a minute in, so the first screen already shows a timeline of phases
        return replay_app(demo_path(), args, "demo", loop=True, start_at=60.0)
    _need_tty()
    from memtop.record import check_pids

    check_pids(args)
    writer = sampler = None
    meta = {"host": platform.node()}  # the rest once NVML is up (LiveController)
    if args.record:  # a recording names its GPUs in its metadata: NVML first
        from memtop.record import run_meta, sampler_config
        from memtop.sampler import Sampler
        from memtop.store import Writer

        sampler = Sampler(sampler_config(args, recording=True), on_frame=lambda f: None)
        sampler.nvml.start()
        meta = run_meta(sampler)
        writer = Writer(args.record, meta, force=args.force)
    pipeline = Pipeline(Status("live", recording=args.record), meta=meta, writer=writer)
    if sampler is not None:
        sampler.on_frame = pipeline.on_frame
    try:
        return _run_app(pipeline, LiveController(args, pipeline, sampler), args)
    finally:
        if writer is not None:
            writer.close()


def replay(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if args.summary:
        rec = open_recording(path)
        print(json.dumps(rec.summary(), indent=2))
        return 0
    return replay_app(path, args, "replay", loop=False, speed=args.speed)


def report(args: argparse.Namespace) -> int:
    import time

    from memtop import cache
    from memtop.report import build_report, render

    rec = open_recording(args.file)
    key = None if args.no_cache else cache.key(Path(args.file), (args.gpu, args.t_from, args.t_to))
    rep = cache.load(key)
    if rep is None:
        started = time.monotonic()
        rep = build_report(rec, gpu=args.gpu, t_from=args.t_from, t_to=args.t_to)
        if time.monotonic() - started >= cache.MIN_S:  # asking again about a long run: instant
            cache.save(key, rep)
    print(render(rep, args.format))
    return 0


def export(args: argparse.Namespace) -> int:
    from memtop.export import export_perfetto

    rec = open_recording(args.file)
    n = export_perfetto(
        rec, Path(args.perfetto), force=args.force, gpu=args.gpu, t_from=args.t_from, t_to=args.t_to
    )
    print(f"wrote {n} trace events to {args.perfetto} (open it in https://ui.perfetto.dev)", file=sys.stderr)
    return 0
