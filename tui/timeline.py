"""Rolling timeline: SM / DRAM / PCIe / CPU rows with the phase band and a time axis.

Line-API tiles (tiles.py): each row is one Strip with equal-style runs merged, built once per
update. The time window moves in quarter-span jumps; between jumps only the tiles holding the
newest columns and the current values change, so a repaint sends a few cells instead of the
whole timeline (bytes matter over SSH).
"""

from __future__ import annotations

import time
from bisect import bisect_left

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from memtop.phases import CHARS, Label
from memtop.pipeline import Point, View

from .tiles import TiledLines

BLOCKS = " ▁▂▃▄▅▆▇█"
ASCII_BLOCKS = " .:-=+*#@"
PHASE_COLORS = {
    "compute": "green", "memory": "cyan", "transfer": "magenta", "sync": "red", "input": "yellow",
    "cpu": "blue", "idle": "bright_black", "other": "white", "warmup": "bright_black",
}
EVENT_MARKS = {"gap": ("▼", "v", "bright_white"), "throttle": ("T", "T", "bold red"), "start": ("+", "+", "green"),
               "exit": ("x", "x", "yellow")}
ROWS = (("SM", "sm", "green"), ("DRAM", "dram", "cyan"), ("PCIe", "pcie", "magenta"), ("CPU", "cpu", "yellow"))
LABEL_W = 9


class Timeline(TiledLines):
    DEFAULT_CSS = "Timeline { height: 8; }"  # 4 series, phase band, events, axis, legend

    def __init__(self, ascii_only: bool = False, **kw) -> None:
        super().__init__(**kw)
        self.ascii_only = ascii_only
        self.span_s = 120.0
        self.gpu = 0
        self._view: View | None = None
        self._end: float | None = None  # time at the right edge (moves in quarter-span jumps)

    def show(self, view: View, gpu: int) -> None:
        pts = view.history.get(gpu)
        latest = pts[-1].t if pts else None
        self._view = view
        if latest is not None and (gpu != self.gpu or self._end is None or latest > self._end
                                   or latest < self._end - self.span_s):
            self._end = latest + self.span_s / 4
        self.gpu = gpu
        self._redraw()

    def zoom(self, factor: float) -> None:
        self.span_s = min(600.0, max(15.0, self.span_s * factor))
        self._end = None
        if self._view is not None:
            self.show(self._view, self.gpu)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        width = self.content_region.width
        if width > 0:
            self.set_lines([self._build(y, width).adjust_cell_length(width) for y in range(len(ROWS) + 4)])

    def _build(self, y: int, width: int) -> Strip:
        v = self._view
        cols = max(1, width - LABEL_W)
        if v is None or not v.history.get(self.gpu):
            return Strip([Segment("waiting for data…" if y == 0 else "")])
        pts = v.history[self.gpu]
        end = self._end if self._end is not None else pts[-1].t
        start = end - self.span_s
        # history holds 10 minutes at the GPU rate; only the window's points are drawn
        pts = pts[bisect_left(pts, start, key=_t):]
        dt = self.span_s / cols
        label_style = Style(bold=True)
        if y < len(ROWS):
            name, attr, color = ROWS[y]
            return self._series(name, attr, color, pts, start, dt, cols, label_style)
        if y == len(ROWS):
            return self._band(v, start, dt, cols, label_style)
        if y == len(ROWS) + 1:
            return self._events(v, start, dt, cols, label_style)
        if y == len(ROWS) + 2:
            return self._axis(cols, start, end, v.meta.get("wall_offset"))
        if y == len(ROWS) + 3:
            return self._legend()
        return Strip([])

    def _series(self, name: str, attr: str, color: str, pts: tuple[Point, ...], start: float, dt: float,
                cols: int, label_style: Style) -> Strip:
        chars = ASCII_BLOCKS if self.ascii_only else BLOCKS
        buckets: list[list[float]] = [[] for _ in range(cols)]
        for p in pts:
            i = int((p.t - start) / dt)
            val = getattr(p, attr)
            if 0 <= i < cols and val is not None:
                buckets[i].append(val)
        text = "".join(chars[min(8, max(0, round(max(b) / 12.5)))] if b else " " for b in buckets)
        last = next((getattr(p, attr) for p in reversed(pts) if getattr(p, attr) is not None), None)
        head = f"{name:<5}{'' if last is None else f'{min(last, 999):3.0f}'}"
        return Strip([Segment(f"{head:<{LABEL_W}}", label_style), Segment(text, Style(color=color))])

    def _band(self, v: View, start: float, dt: float, cols: int, label_style: Style) -> Strip:
        labels = v.labels.get(self.gpu, ())
        labels = labels[bisect_left(labels, start - 0.5, key=_t):]
        cells = [" "] * cols
        kinds = ["warmup"] * cols
        for lab in labels:
            i0 = int((lab.t - start) / dt)
            i1 = int((lab.t + 0.5 - start) / dt)
            for i in range(max(0, i0), min(cols, max(i0 + 1, i1))):
                kinds[i] = lab.label
                cells[i] = CHARS.get(lab.label, "?") if self.ascii_only else "█"
        latest = v.history[self.gpu][-1].t if v.history.get(self.gpu) else None
        cur = None if latest is None or v.status.mode == "live" else int((latest - start) / dt)
        segs = [Segment(f"{'phase':<{LABEL_W}}", label_style)]
        run_kind, run_text = kinds[0], ""
        for i, (k, c) in enumerate(zip(kinds, cells)):
            if cur is not None and i == cur:
                c = "▏" if not self.ascii_only else "|"  # the replay position
            if k != run_kind:
                segs.append(Segment(run_text, Style(color=PHASE_COLORS.get(run_kind, "white"))))
                run_kind, run_text = k, ""
            run_text += c
        segs.append(Segment(run_text, Style(color=PHASE_COLORS.get(run_kind, "white"))))
        return Strip(segs)

    def _events(self, v: View, start: float, dt: float, cols: int, label_style: Style) -> Strip:
        marks: dict[int, tuple[str, str]] = {}
        for ev in v.events:
            i = int((ev.t - start) / dt)
            if ev.gpu == self.gpu and 0 <= i < cols:
                uni, asc, style = EVENT_MARKS[ev.kind]
                marks[i] = (asc if self.ascii_only else uni, style)
        segs = [Segment(f"{'events':<{LABEL_W}}", label_style)]
        at = 0
        for i in sorted(marks):
            ch, style = marks[i]
            segs += [Segment(" " * (i - at)), Segment(ch, Style.parse(style))]
            at = i + 1
        segs.append(Segment(" " * (cols - at)))
        return Strip(Segment.simplify(segs))

    def _axis(self, cols: int, start: float, end: float, offset: float | None) -> Strip:
        """Clock times (of the recording, or now) at fixed columns: they move only with a jump."""
        step = max(5, int(self.span_s / 6 / 5) * 5)
        axis = [" "] * cols
        first = (int(start // step) + 1) * step
        for sec in range(int(first), int(end), step):
            i = int((sec - start) / self.span_s * cols)
            lab = time.strftime("%H:%M:%S", time.gmtime(sec + offset)) if offset else f"{sec - start:.0f}s"
            lab = "|" + lab
            for k, ch in enumerate(lab):
                if i + k < cols:
                    axis[i + k] = ch
        return Strip([Segment(" " * LABEL_W), Segment("".join(axis), Style(dim=True))])

    def _legend(self) -> Strip:
        segs = [Segment(" " * LABEL_W)]
        for k in ("compute", "memory", "transfer", "sync", "input", "cpu", "idle"):
            mark = CHARS[k] if self.ascii_only else "█"
            segs += [Segment(mark, Style(color=PHASE_COLORS[k])), Segment(f" {k}  ", Style(dim=True))]
        for kind, (uni, asc, st) in EVENT_MARKS.items():
            segs += [Segment(asc if self.ascii_only else uni, Style.parse(st)), Segment(f" {kind}  ", Style(dim=True))]
        return Strip(segs)


def _t(x: Point | Label) -> float:
    return x.t
