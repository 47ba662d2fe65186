"""Screenshots of the real CLI in a real terminal (tmux), on a real H100 recording.

Each shot replays the recording up to a moment inside one phase (a copy cut there, replayed at x64:
the replay stops, paused, at its last frame), captures the tmux pane with its colours and writes it
as SVG (Rich's export; PNG too when `rsvg-convert` is installed). The straggler shot replays a real
2-GPU recording (two H200s, torchrun FSDP with one late rank); the 8-GPU shot replays a recording
synthesized from the 1-GPU one (tests/multigpu.py): its caption says so.

usage: python bench/screenshots.py [NAME ...]   (writes screenshots/NAME.svg; all of them by default)
"""

from __future__ import annotations

import html
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from multigpu import multi_gpu  # noqa: E402

from memtop.storage.store import Recording, Writer  # noqa: E402

REC = ROOT / "tests" / "data" / "labelled_s0.memtop"
OUT = ROOT / "screenshots"


def cut(upto_phase: str, gpus: int, path: Path, src: Path = REC) -> None:
    rec = Recording(src)
    m = next(m for m in rec.markers() if m.name == upto_phase)
    frames = list(rec.frames(end=m.t1 - 1.0))
    meta = dict(rec.meta)
    if gpus > 1:
        frames = multi_gpu(frames, gpus)
        g0 = meta["gpus"][0]
        meta["gpus"] = [{**g0, "index": i} for i in range(gpus)]
    w = Writer(path, meta, force=True)
    for f in frames:
        w.add(f)
    w.close()


_TEXT = re.compile(
    r'<text (class="[^"]*") x="([0-9.]+)" y="([0-9.]+)" textLength="([0-9.]+)" (clip-path="[^"]*")>([^<]*)</text>'
)


def _by_cell(svg: str) -> str:
    """Each run of characters its own <text> at its own cell. Rich puts a styled segment in one
    element, spaces as no-break spaces, stretched to its cells by textLength; rsvg-convert drew those
    spaces narrower, so what followed a blank run landed too far left (a timeline series at its
    axis's start, "otheractive"). Blank runs need no text: backgrounds are rects of their own."""

    def split(m: re.Match) -> str:
        cls, x, y, length, clip, body = m.groups()
        chars = html.unescape(body)
        cells = cell_len(chars)
        if not cells:
            return m.group(0)
        w, col, out = float(length) / cells, 0, []
        for run in re.findall("\xa0+|[^\xa0]+", chars):
            if run[0] != "\xa0":
                x0, n = float(x) + col * w, cell_len(run) * w
                body = html.escape(run, quote=False)
                out.append(f'<text {cls} x="{x0:.1f}" y="{y}" textLength="{n:.1f}" {clip}>{body}</text>')
            col += cell_len(run)
        return "".join(out)

    return _TEXT.sub(split, svg)


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True).stdout


def shot(
    name: str, size: tuple[int, int], upto_phase: str, title: str, gpus: int = 1, src: Path = REC
) -> Path | None:
    if len(sys.argv) > 1 and name not in sys.argv[1:]:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / f"{name}.memtop"
        cut(upto_phase, gpus, rec, src)
        sock = f"memtop-shot-{uuid.uuid4().hex[:8]}"
        cmd = f"{sys.executable} -m memtop replay {rec} --speed 64; sleep 60"
        env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor"}
        subprocess.run(
            ["tmux", "-L", sock, "new-session", "-d", "-x", str(size[0]), "-y", str(size[1]), cmd],
            check=True,
            env=env,
        )
        try:
            end = time.monotonic() + 60
            while "⏸" not in _tmux(sock, "capture-pane", "-p") and time.monotonic() < end:
                time.sleep(0.5)  # the replay pauses at its last frame
            time.sleep(2.5)  # two paints: the slow panels follow every second one
            ansi = _tmux(sock, "capture-pane", "-p", "-e")
        finally:
            _tmux(sock, "kill-server")
    console = Console(record=True, width=size[0], height=size[1], file=io.StringIO())
    console.print(Text.from_ansi(ansi.rstrip("\n")), crop=True, overflow="crop", no_wrap=True)
    path = OUT / f"{name}.svg"
    path.write_text(_by_cell(console.export_svg(title=title)))
    if shutil.which("rsvg-convert"):
        subprocess.run(["rsvg-convert", "-o", str(path.with_suffix(".png")), str(path)], check=True)
    print(path)
    return path


def main() -> None:
    shot("sync-stall", (120, 40), "sync_gpu_heavy", "memtop replay: a real H100 run waiting in .item()")
    shot(
        "pageable-copy",
        (120, 40),
        "h2d_pageable",
        "memtop replay: a real H100 run copying from pageable memory",
    )
    shot("sync-stall-80x24", (80, 24), "sync_gpu_heavy", "memtop at 80x24 (same H100 run)")
    shot(
        "input-bound-8gpu",
        (120, 40),
        "dl_saturated",
        "SYNTHESIZED 8-GPU view (one real H100 run, shifted per GPU): DataLoader-bound",
        gpus=8,
    )
    shot(
        "straggler-2gpu",
        (120, 40),
        "fsdp_straggler",
        "memtop replay: a real 2-GPU FSDP run on two H200s, GPU 0 the straggler",
        src=ROOT / "tests" / "data" / "multi" / "heldout_ddp_s13.memtop",
    )


if __name__ == "__main__":
    main()
