"""`memtop record`: headless recording with a one-line progress display on a terminal."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from memtop.commands.serve import stop_on_signals
from memtop.core.errors import UserError
from memtop.core.sanitize import clean
from memtop.core.wording import counted
from memtop.storage.store import Writer, check_creatable, read_markers


def _size(path: Path) -> int:
    return sum(os.path.getsize(str(path) + s) for s in ("", "-wal") if os.path.exists(str(path) + s))


def record(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if args.markers and not Path(args.markers).parent.exists():
        raise UserError(f"cannot write markers next to {args.markers}: no such directory")
    check_creatable(out, args.force)  # before the sampler starts: a refused file is one line
    from memtop.live.sampler import Sampler, SamplerConfig

    sampler = Sampler(SamplerConfig.from_args(args, recording=True), on_frame=lambda f: None)
    done = stop_on_signals()
    sampler.nvml.start()  # before meta: it names the GPUs
    from memtop.commands.snapshot import no_gpu_reason

    if no_gpu := no_gpu_reason(sampler.nvml):  # a recording of host and processes only must say so
        print(
            f"memtop: no GPU: {clean(no_gpu, 300)}; recording host, processes and stacks only",
            file=sys.stderr,
        )
    writer = Writer(out, {}, force=args.force)
    sampler.on_frame = writer.add
    for k, v in sampler.run_meta().items():
        writer.set_meta(k, v)
    sampler.start()
    if not args.no_stacks:
        from memtop.collectors.stacks import find_pyspy

        if find_pyspy() is None:  # said once, piped or not: a run without stacks must not go unnoticed
            print(
                "memtop: py-spy not found (next to this Python or on PATH): recording without Python "
                "stacks; install py-spy, or pass --no-stacks",
                file=sys.stderr,
            )
    t0 = time.monotonic()
    tty = sys.stderr.isatty()
    try:
        while not done.wait(0.5):
            elapsed = time.monotonic() - t0
            if writer.error:
                print(f"memtop: {clean(writer.error, 500)}", file=sys.stderr)
                return 2
            if tty:
                missing = sorted({c.source for c in sampler.capabilities() if not c.ok})
                line = (
                    f"\rrecording {out.name}: {elapsed:6.1f} s, {counted(writer.frames, 'frame')}, "
                    f"{_size(out) / 1e6:.1f} MB" + (f", unavailable: {', '.join(missing)}" if missing else "")
                )
                print(line[:200].ljust(80), end="", file=sys.stderr, flush=True)
            if args.duration and elapsed >= args.duration:
                break
    finally:
        sampler.stop()
        bad_markers = None
        if args.markers:
            try:
                writer.add_markers(read_markers(args.markers))
            except UserError as e:  # the recording is still closed and kept; the run says so and fails
                bad_markers = e
        writer.set_meta("ended_wall", time.time())
        writer.set_meta("missed_ticks", sampler.missed)
        writer.close()
    if writer.error:  # (close() waited for the writer: what it says is final)
        raise UserError(f"{writer.error}; {out} is incomplete")
    if bad_markers is not None:
        raise UserError(f"markers not attached ({bad_markers}); the recording {out} is complete without them")
    if tty:
        print(file=sys.stderr)
    print(
        f"recorded {counted(writer.frames, 'frame')} in {time.monotonic() - t0:.1f} s to {out} "
        f"({_size(out) / 1e6:.2f} MB)",
        file=sys.stderr,
    )
    return 0
