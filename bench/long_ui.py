"""What a user of a long recording sees, measured for bench/long_runs.py: the progress bar of report and
export on a terminal (and nothing when piped), and replay navigation (the overview strip's scan, PgDn,
End, Home, n, a jump) in the real app, driven headless by Textual's Pilot as the CLI builds it.

usage: python bench/long_ui.py FILE.memtop   (one JSON line)
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ESC = re.compile(rb"\x1b\[[0-9;?]*[a-zA-Z]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)")


def progress(path: Path) -> dict:
    """report and export with stderr on a pseudo-terminal (stdout to a file): did a rich bar show, how
    many of its redraws, and the final percentage; then with stderr piped: the bytes it wrote."""
    out: dict = {}
    path = path.resolve()  # (the commands run from a neutral directory)
    d = Path(tempfile.mkdtemp(prefix="memtop-progress-"))
    for kind, args in (
        ("report", ["report", str(path), "--format", "json"]),
        ("export", ["export", str(path), "--perfetto", str(d / "t.json.gz"), "--force"]),
    ):
        master, slave = pty.openpty()
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [sys.executable, "-m", "memtop", *args],
            stdout=subprocess.DEVNULL,
            stderr=slave,
            stdin=subprocess.DEVNULL,
            cwd=tempfile.gettempdir(),
        )
        os.close(slave)
        seen, gaps, last = b"", [], None
        while True:
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                now = time.perf_counter()
                if last is not None:
                    gaps.append(now - last)
                last = now
                seen += chunk
            elif p.poll() is not None:
                break
        p.wait()
        os.close(master)
        text = _ESC.sub(b"", seen).decode("utf-8", "replace")
        pcts = [int(x) for x in re.findall(r"(\d+)%", text)]
        out[kind] = {
            "s": round(time.perf_counter() - t0, 2),
            "bar_shown": "━" in text and bool(pcts),
            "redraws": len(pcts),
            "last_pct": pcts[-1] if pcts else None,
            "longest_silence_s": round(max(gaps, default=0.0), 2),  # a frozen bar shows as a long one
        }
        piped = subprocess.run(
            [sys.executable, "-m", "memtop", *args], capture_output=True, cwd=tempfile.gettempdir()
        )
        # (export says what it wrote in one line: that is its result, not progress)
        out[kind]["piped_stderr"] = piped.stderr.decode()[-200:]
    return out


async def _navigate(path: Path) -> dict:
    from memtop.tui.app import MemtopApp

    from memtop.analysis.colscan import phase_runs
    from memtop.core.timefmt import clock
    from memtop.live.pipeline import Pipeline, ReplaySource, Status
    from memtop.storage.store import Recording

    rec = Recording(path)
    pipe = Pipeline(Status("replay", duration=rec.duration), meta=rec.meta)
    src = ReplaySource(rec, pipe, fast_runs=phase_runs)  # as commands/local.py builds it
    app = MemtopApp(pipe, src, hangup_guard=False)
    out: dict = {"duration_s": round(rec.duration, 1)}

    async def until(pilot, cond, timeout: float = 60.0, t0: float | None = None) -> float:
        """Seconds from ``t0`` (the key's press: Pilot waits while the app handles it) to ``cond``."""
        t0 = time.perf_counter() if t0 is None else t0
        while not cond():
            if time.perf_counter() - t0 > timeout:
                return float("nan")
            await pilot.pause(0.01)
        return round(time.perf_counter() - t0, 3)

    def shown(at: float):  # the position reached and a Frame from there on screen
        return lambda: (
            abs(pipe.status.position - at) < 1.0
            and pipe.frame is not None
            and abs(pipe.frame.t - rec.t0 - at) < 2.0
        )

    async with app.run_test(size=(120, 40)) as pilot:
        t0 = time.perf_counter()
        await pilot.press("space")
        out["strip_filled_s"] = await until(pilot, lambda: src.scanned)
        out["strip_filled_from_start_s"] = round(time.perf_counter() - t0, 3)
        out["phase_changes_gpu0"] = len(src.phase_runs.get(0, ()))
        for key, at in (("pagedown", rec.duration / 10), ("end", rec.duration), ("home", 0.0)):
            t0 = time.perf_counter()
            await pilot.press(key)
            out[f"{key}_s"] = await until(pilot, shown(at), t0=t0)
        at = 18000.0 if rec.duration > 18000 else rec.duration // 2  # hour 5 (or the middle)
        await pilot.press("t", *clock(at))
        t0 = time.perf_counter()
        await pilot.press("enter")
        out["jump_s"] = {"to": clock(at), "s": await until(pilot, shown(at), t0=t0)}
        nxt = src.next_change(0)
        t0 = time.perf_counter()
        await pilot.press("n")
        out["next_change_s"] = await until(pilot, shown(nxt), t0=t0) if nxt is not None else None
        await pilot.press("q")
    rec.close()
    return out


def navigation(path: Path) -> dict:
    return asyncio.run(_navigate(path))


if __name__ == "__main__":
    f = Path(sys.argv[1]).resolve()
    print(json.dumps({"progress": progress(f), "navigation": navigation(f)}))
