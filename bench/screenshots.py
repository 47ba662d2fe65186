"""Export screenshots of the real app on a real H100 recording (SVG; PNG via rsvg-convert if present).

usage: python bench/screenshots.py   (writes screenshots/*.svg and *.png)
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from memtop.tui.app import MemtopApp  # noqa: E402
from multigpu import multi_gpu  # noqa: E402

from memtop.pipeline import Pipeline, Status  # noqa: E402
from memtop.store import Recording  # noqa: E402

REC = ROOT / "tests" / "data" / "labelled_s0.memtop"


# Two <text> runs of one style that touch (the app draws panels as tiles, and the SVG export keeps
# each tile's run apart): rsvg-convert stretches each run to its textLength and shifts a leading
# non-breaking space, which opens gaps at tile edges in the PNG. Joined runs render as one.
_RUN = re.compile(
    r'<text class="([^"]+)" x="([0-9.]+)" y="([0-9.]+)" textLength="([0-9.]+)" clip-path="([^"]+)">'
    r'([^<]*)</text><text class="\1" x="([0-9.]+)" y="\3" textLength="([0-9.]+)" clip-path="\5">'
)


def _join_runs(svg: str) -> str:
    def join(m: re.Match) -> str:
        cls, x, y, length, clip, text, x2, length2 = m.groups()
        if abs(float(x) + float(length) - float(x2)) > 0.05:
            return m.group(0)
        return (
            f'<text class="{cls}" x="{x}" y="{y}" textLength="{float(length) + float(length2):g}" '
            f'clip-path="{clip}">{text}'
        )

    while True:
        joined = _RUN.sub(join, svg)
        if joined == svg:
            return svg
        svg = joined


async def shot(name: str, size: tuple[int, int], upto_phase: str, gpus: int = 1) -> None:
    rec = Recording(REC)
    m = next(m for m in rec.markers() if m.name == upto_phase)
    frames = list(rec.frames(end=m.t1 - 1.0))
    if gpus > 1:
        frames = multi_gpu(frames, gpus)
    p = Pipeline(
        Status("replay", position=frames[-1].t - rec.t0, duration=rec.duration, paused=True), meta=rec.meta
    )
    for f in frames:
        p.on_frame(f, tick=False)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        path = app.save_screenshot(f"{name}.svg", str(ROOT / "screenshots"))
    if shutil.which("rsvg-convert"):
        subprocess.run(
            ["rsvg-convert", "-o", str(Path(path).with_suffix(".png"))],
            input=_join_runs(Path(path).read_text()).encode(),
            check=True,
        )
    print(path)


async def main() -> None:
    await shot("sync-stall", (160, 45), "sync_gpu_heavy")
    await shot("pageable-copy", (160, 45), "h2d_pageable")
    await shot("input-bound-8gpu", (200, 50), "dl_saturated", gpus=8)


if __name__ == "__main__":
    asyncio.run(main())
