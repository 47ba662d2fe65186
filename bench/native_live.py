"""The `s` key's path on a real process, step by step (for a machine where the TUI's dump did not show).

usage: python bench/native_live.py PID
1. StacksCollector.native_dump(PID) alone: seconds, threads, frames, error.
2. The live app under Textual's Pilot with the real sampler watching PID (as `memtop --pid PID`):
   `s`'s action, then every 0.5 s for 8 s what the pipeline holds as PID's native dump and which
   screen is up. One JSON line per step.
"""

from __future__ import annotations

import asyncio
import json
import platform
import sys
import time

from memtop.collectors.stacks import StacksCollector
from memtop.tui.app import MemtopApp

from memtop.cli import build_parser
from memtop.commands.local import LiveController
from memtop.live.pipeline import Pipeline, Status


def alone(pid: int) -> None:
    c = StacksCollector(0.5, pids=(pid,))
    for k in range(2):
        t0 = time.monotonic()
        s = c.native_dump(pid)
        frames = [len(th.frames) for th in s.threads]
        print(
            json.dumps(
                {
                    "alone": k,
                    "s": round(time.monotonic() - t0, 3),
                    "threads": len(s.threads),
                    "frames": frames[:4],
                    "error": s.error,
                }
            )
        )


async def in_app(pid: int) -> None:
    args = build_parser().parse_args(["--pid", str(pid), "--no-mouse"])
    p = Pipeline(Status("live"), meta={"host": platform.node()})
    ctl = LiveController(args, p)
    app = MemtopApp(p, ctl, hangup_guard=False)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause(4)
        app.selected_pid = pid
        f = app.view.frame if app.view else None
        print(
            json.dumps(
                {
                    "before": True,
                    "stacks": [(s.pid, s.native, len(s.threads)) for s in (f.stacks if f else ())],
                    "gpus": len(f.gpus) if f else 0,
                }
            )
        )
        made: list = []  # what the sampler's own native_dump returned, and when
        col = ctl.sampler.stacks if ctl.sampler else None
        if col is not None:
            dump = col.native_dump

            def logged(pid: int):
                a = time.monotonic()
                try:
                    s = dump(pid)
                except BaseException as e:
                    made.append(["raised", repr(e)[:200]])
                    raise
                made.append([round(time.monotonic() - a, 3), len(s.threads), s.error, s.native])
                return s

            col.native_dump = logged
        t0 = time.monotonic()
        app.action_native()
        print(json.dumps({"asked": app._native_asked, "sampler": ctl.sampler is not None}))
        for _i in range(16):
            await pilot.pause(0.5)
            got = p._natives.get(pid)
            print(
                json.dumps(
                    {
                        "t": round(time.monotonic() - t0, 2),
                        "native": None if got is None else [round(got.t, 2), len(got.threads), got.error],
                        "screen": type(app.screen).__name__,
                        "frame_t": round(app.view.frame.t, 2) if app.view and app.view.frame else None,
                        "notes": list(app.view.frame.notes) if app.view and app.view.frame else [],
                        "made": made,
                        "in_frame": [(x.pid, x.native) for x in p.frame.stacks] if p.frame else None,
                        "cycle": getattr(ctl.sampler.stacks, "_cycle", None) if ctl.sampler else None,
                        "pending": sorted(getattr(ctl.sampler.stacks, "_native", ()))
                        if ctl.sampler
                        else None,
                        "targets": sorted(ctl.sampler.stacks.targets)
                        if ctl.sampler and ctl.sampler.stacks
                        else None,
                    }
                )
            )
    ctl.stop()


if __name__ == "__main__":
    target = int(sys.argv[1])
    alone(target)
    asyncio.run(in_app(target))
