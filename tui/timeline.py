"""Rolling timeline: SM / DRAM / PCIe / CPU rows with the phase band and a time axis.

A Line-API widget: each row is one Strip, built once per data version and width and then
served from the cache; equal-style runs are merged so a repaint sends little.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from memtop.pipeline import Point, View

BLOCKS = " ▁▂▃▄▅▆▇█"
ASCII_BLOCKS = " .:-=+*#@"
PHASE_COLORS = {
    "compute": "green", "memory": "cyan", "transfer": "magenta", "sync": "red", "input": "yellow",
    "cpu": "bright_red", "idle": "bright_black", "other": "white", "warmup": "bright_black",
}
PHASE_CHARS = {"compute": "C", "memory": "M", "transfer": "T", "sync": "S", "input": "I", "cpu": "P",
               "idle": ".", "other": "?", "warmup": " "}
ROWS = (("SM", "sm", "green"), ("DRAM", "dram", "cyan"), ("PCIe", "pcie", "magenta"), ("CPU", "cpu", "yellow"))
LABEL_W = 6


class Timeline(Widget):
    DEFAULT_CSS = "Timeline { height: 8; }"

    def __init__(self, ascii_only: bool = False, **kw) -> None:
        super().__init__(**kw)
        self.ascii_only = ascii_only
        self.span_s = 120.0
        self.gpu = 0
        self.cursor: float | None = None  # replay position (recording time)
        self._view: View | None = None
        self._cache: dict[int, Strip] = {}
        self._key: tuple | None = None

    def show(self, view: View, gpu: int) -> None:
        self._view = view
        self.gpu = gpu
        key = (view.version, gpu, self.span_s, self.size.width)
        if key != self._key:
            self._cache.clear()
            self.refresh()

    def zoom(self, factor: float) -> None:
        self.span_s = min(600.0, max(15.0, self.span_s * factor))
        self._cache.clear()
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        key = (self._view.version if self._view else -1, self.gpu, self.span_s, width)
        if key != self._key:
            self._cache.clear()
            self._key = key
        strip = self._cache.get(y)
        if strip is None:
            strip = self._build(y, width).adjust_cell_length(width)
            self._cache[y] = strip
        return strip

    def _build(self, y: int, width: int) -> Strip:
        v = self._view
        cols = max(1, width - LABEL_W)
        if v is None or not v.history.get(self.gpu):
            return Strip([Segment("waiting for data…" if y == 0 else "")])
        pts = v.history[self.gpu]
        end = pts[-1].t
        start = end - self.span_s
        dt = self.span_s / cols
        label_style = Style(bold=True)
        if y < len(ROWS):
            name, attr, color = ROWS[y]
            return self._series(name, attr, color, pts, start, dt, cols, label_style)
        if y == len(ROWS):
            return self._band(v, start, dt, cols, label_style)
        if y == len(ROWS) + 1:
            return self._axis(cols)
        if y == len(ROWS) + 2:
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
        head = f"{name:<4}{'' if last is None else f'{last:3.0f}'[-2:] if last < 100 else '**'}"
        return Strip([Segment(f"{head:<{LABEL_W}}", label_style), Segment(text, Style(color=color))])

    def _band(self, v: View, start: float, dt: float, cols: int, label_style: Style) -> Strip:
        labels = v.labels.get(self.gpu, ())
        cells = [" "] * cols
        kinds = ["warmup"] * cols
        for lab in labels:
            i0 = int((lab.t - start) / dt)
            i1 = int((lab.t + 0.5 - start) / dt)
            for i in range(max(0, i0), min(cols, max(i0 + 1, i1))):
                kinds[i] = lab.label
                cells[i] = PHASE_CHARS.get(lab.label, "?") if self.ascii_only else "█"
        cur = None if self.cursor is None else int((self.cursor - start) / dt)
        segs = [Segment(f"{'phase':<{LABEL_W}}", label_style)]
        run_kind, run_text = kinds[0], ""
        for i, (k, c) in enumerate(zip(kinds, cells)):
            if cur is not None and i == cur:
                c = "|"
            if k != run_kind:
                segs.append(Segment(run_text, Style(color=PHASE_COLORS.get(run_kind, "white"))))
                run_kind, run_text = k, ""
            run_text += c
        segs.append(Segment(run_text, Style(color=PHASE_COLORS.get(run_kind, "white"))))
        return Strip(segs)

    def _axis(self, cols: int) -> Strip:
        step = max(10, int(self.span_s / 6 / 10) * 10)
        axis = [" "] * cols
        for sec in range(0, int(self.span_s) + 1, step):
            i = cols - 1 - int(sec / self.span_s * (cols - 1))
            lab = "now" if sec == 0 else f"-{sec}s"
            j = max(0, i - len(lab) + 1)
            for k, ch in enumerate(lab):
                if j + k < cols:
                    axis[j + k] = ch
        return Strip([Segment(" " * LABEL_W), Segment("".join(axis), Style(dim=True))])

    def _legend(self) -> Strip:
        segs = [Segment(" " * LABEL_W)]
        for k in ("compute", "memory", "transfer", "sync", "input", "cpu", "idle"):
            mark = PHASE_CHARS[k] if self.ascii_only else "█"
            segs += [Segment(mark, Style(color=PHASE_COLORS[k])), Segment(f" {k}  ", Style(dim=True))]
        return Strip(segs)
