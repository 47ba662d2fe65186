"""Rolling timeline: the selected GPU's SM / DRAM / PCIe / CPU rows, one phase band per GPU
(stacked: "which GPUs were input-bound this last minute" is one look), events and a time axis.

Line-API tiles (tiles.py): each row is one Strip with equal-style runs merged, built once per
update. The time window moves in quarter-span jumps; between jumps only the tiles holding the
newest columns and the current values change, so a repaint sends a few cells instead of the
whole timeline (bytes matter over SSH).
"""

from __future__ import annotations

import itertools
import math
import time
from bisect import bisect_left, bisect_right
from itertools import groupby

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from memtop.analysis.phases import Label
from memtop.core.timefmt import clock
from memtop.live.pipeline import Point, View

from .format import NVML_TITLES, now_label, nvml_only
from .palette import PHASES, Look, look
from .tiles import NULL, TiledLines

EVENT_MARKS = {
    "gap": ("▼", "v", "bright_white"),
    "throttle": ("!", "!", "bold red"),  # not T: that is transfer's letter in the band
    "start": ("+", "+", "green"),
    "exit": ("x", "x", "yellow"),
    "health": ("✖", "X", "bold magenta"),  # memtop.analysis.health: a Xid, an ECC/remap/link event
}
# the legend's: a health event is rare, and the GPU detail screen (enter) lists each one in words
LEGEND_MARKS = ("gap", "throttle", "start", "exit")
ROWS = (  # (label, Point attribute, the phase whose colour the row takes)
    ("SM", "sm", "compute"),
    ("DRAM", "dram", "memory"),
    ("PCIe", "pcie", "transfer"),
    ("CPU", "cpu", "input"),
)
LABEL_W = 9
LABEL, DIM, SELECTED = Style.parse("bold"), Style.parse("dim"), Style.parse("bold reverse")
_CODE = {k: chr(ord("A") + i) for i, k in enumerate((*PHASES, "other", "warmup"))}  # a phase as one character


class Timeline(TiledLines):
    DEFAULT_CSS = "Timeline { height: 8; }"  # 4 series, phase band(s), events, axis, legend

    def __init__(self, ascii_only: bool = False, **kw) -> None:
        super().__init__(**kw)
        self.ascii_only = ascii_only
        self.letters = False  # a letter per phase in the band (any mode; `--ascii` always)
        self.all_bands = False  # one band per GPU (the app turns it on where the screen has room)
        self.series_h = 1  # rows per series (SM, DRAM, PCIe, CPU): taller where the screen has room
        self.legend = True  # the phase colours' legend row (a short screen gives it to the processes)
        self.span_s = 120.0
        self.gpu = 0
        self._view: View | None = None
        self._end: float | None = None  # time at the right edge (moves in quarter-span jumps)
        self._sigs: tuple[int, list[str]] | None = None  # (width, one signature per row) last drawn
        self._look: Look = look(None, ascii_only)
        self._rows: list[tuple[str, Strip]] = []  # (signature, strip) per row, last built
        self._kinds: dict[int, tuple[tuple, list[str | None], float]] = {}  # gpu -> (window, cells, last t)
        self._columns: dict[str, tuple[tuple, list[float], float]] = {}  # attr -> (window, tops, last t)
        # (attr, level) -> (window and glyphs, the row's cells, the newest point they hold)
        self._cells: dict[tuple[str, int], tuple[tuple, list[str], float]] = {}

    def rows_wanted(self, view: View | None, all_bands: bool, series_h: int = 1) -> int:
        n = len(view.history) if view is not None and all_bands else 1
        return len(ROWS) * series_h + max(1, n) + 2 + self.legend

    def set_series_height(self, rows: int) -> None:
        if rows != self.series_h:
            self.series_h = rows
            self._sigs = None  # every row moves

    def set_legend(self, on: bool) -> None:
        if on != self.legend:
            self.legend = on
            self._sigs = None

    def set_all_bands(self, on: bool) -> None:
        if on != self.all_bands:
            self.all_bands = on
            self._sigs = None  # other rows: draw them all

    def set_letters(self, on: bool) -> None:
        self.letters = on
        self._sigs = None  # the same phases, drawn differently
        self._redraw()

    def show(self, view: View, gpu: int, bands_only: bool = False) -> None:
        """``bands_only``: rebuild only the phase bands (every paint: the band's newest cell, the GPU
        row and the headline name one label); the series rows follow on the slower paints."""
        pts = view.history.get(gpu)
        self._view = view
        if pts:
            # the window moves in quarter-span jumps on a fixed grid: where it stands depends on the
            # newest point alone, not on which views happened to be painted before (a seek's prefill)
            q = self.span_s / 4
            end = (math.floor(pts[-1].t / q) + 1) * q
            if gpu != self.gpu or end != self._end:
                self._end = end
                bands_only = False
        self.gpu = gpu
        self._redraw(bands_only)

    def zoom(self, factor: float) -> None:
        self.span_s = min(600.0, max(15.0, self.span_s * factor))
        self._end = None
        if self._view is not None:
            self.show(self._view, self.gpu)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._sigs = None  # colours changed where the signatures did not
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    def _bands(self) -> list[int]:
        v = self._view
        gpus = sorted(v.history) if v is not None else []
        return gpus if self.all_bands and len(gpus) > 1 else [self.gpu]

    def _redraw(self, bands_only: bool = False) -> None:
        width = self.content_region.width
        if width <= 0:
            return
        theme = self.app.current_theme if self.is_attached else None
        self._look = look(theme, self.ascii_only, self.letters)
        bands = self._bands()
        series = len(ROWS) * self.series_h
        n = series + len(bands) + 2 + self.legend
        keep = bands_only and self._sigs is not None and self._sigs[0] == width and len(self._rows) == n
        band_rows = range(series, series + len(bands))
        rows = [
            self._rows[y] if keep and y not in band_rows else self._build(y, width, bands) for y in range(n)
        ]
        self._rows = rows
        sigs = [sig for sig, _ in rows]
        old, self._sigs = self._sigs, (width, sigs)
        lines = [strip.adjust_cell_length(width) for _, strip in rows]
        spans = [self.geometry(t) for t in self._tiles]
        if old is None or old[0] != width or any(w <= 0 for _, w in spans):
            self.set_lines(lines)
            return
        # Each row's signature has one character per cell (its text, or its phase for the band), so
        # the tiles that changed come from comparing slices of two strings, instead of cutting every
        # changed row into tiles twice.
        changed = [
            (y, k)
            for y, (a, b) in enumerate(zip(old[1], sigs))
            if a != b
            for k, (x0, w) in enumerate(spans)
            if a[x0 : x0 + w] != b[x0 : x0 + w]
        ]
        self.set_lines(lines, changed)

    def _build(self, y: int, width: int, bands: list[int]) -> tuple[str, Strip]:
        v = self._view
        cols = max(1, width - LABEL_W)
        if v is None or not v.history.get(self.gpu):
            # a frame without GPUs will stay so: "waiting" would promise a chart that never comes
            gone = v is not None and v.frame is not None and not v.frame.gpus
            text = "no GPU: nothing to chart" if gone else f"waiting for data{self._look.glyphs.ellipsis}"
            text = text if y == 0 else ""
            return text, Strip([Segment(text, NULL)])
        pts = v.history[self.gpu]
        end = self._end if self._end is not None else pts[-1].t
        start = end - self.span_s
        dt = self.span_s / cols
        h = self.series_h
        if y < len(ROWS) * h:
            name, attr, phase = ROWS[y // h]
            if attr in NVML_TITLES and v.frame is not None and nvml_only(v.frame.gpus):
                name = NVML_TITLES[attr]  # NVML's rates, not GPM's SM and DRAM activity
            top, last = self._tops(attr, pts, start, dt, cols)
            return self._series(attr, name, self._look.phase(phase), top, last, h - 1 - y % h)
        y -= len(ROWS) * h
        if y < len(bands):
            return self._band(v, bands[y], len(bands) > 1, start, dt, cols)
        y -= len(bands)
        if y == 0:
            return self._events(v, start, dt, cols)
        if y == 1:
            return self._axis(cols, start, end, v.meta.get("wall_offset"), v.status.origin)
        return self._legend()

    def _tops(
        self, attr: str, pts: tuple[Point, ...], start: float, dt: float, cols: int
    ) -> tuple[list[float], float | None]:
        """The highest value of ``attr`` in each column of the window (-1: none), and the window's
        newest value. The columns are kept while the window stands still (it moves in quarter-span
        jumps): a paint adds only the points that came since, instead of going over the window's
        points again for each row of each series (1 200 points a row at 10 Hz over 2 minutes)."""
        i0 = bisect_left(pts, start, key=_t)  # history holds 10 minutes; the window's points are drawn
        # the window's first point: another one after a seek or a reset of the history
        window = (self.gpu, start, dt, cols, pts[i0].t if i0 < len(pts) else None)
        newest = pts[-1].t if pts else -math.inf
        cached = self._columns.get(attr)
        if cached is None or cached[0] != window or newest < cached[2]:
            cached = (window, [-1.0] * cols, -math.inf)
        top, done = cached[1], cached[2]
        for p in itertools.islice(pts, max(i0, bisect_right(pts, done, key=_t)), None):
            i = int((p.t - start) / dt)
            val = getattr(p, attr)
            if 0 <= i < cols and val is not None and val > top[i]:
                top[i] = val
        self._columns[attr] = (window, top, max(done, newest))
        last = next(
            (x for k in range(len(pts) - 1, i0 - 1, -1) if (x := getattr(pts[k], attr)) is not None), None
        )
        return top, last

    def _series(
        self, attr: str, name: str, color: Style, top: list[float], last: float | None, level: int = 0
    ) -> tuple[str, Strip]:
        """One row of a series `series_h` rows tall (`level` 0 the bottom one, which carries the name
        and the newest value): 8 steps a row, from the columns' highest values (``_tops``). The row's
        cells are kept with its columns: a paint redraws only the columns of the points since (the
        whole row, 190 cells at 200 columns, was a tenth of the UI thread's CPU at 1 Hz)."""
        chars = self._look.glyphs.blocks
        h = self.series_h
        eighths = 8 * h / 100  # a percentage in eighths of a cell over the series' rows
        window, _, done = self._columns[attr]
        key = (window, chars, h)
        kept = self._cells.get((attr, level))
        if kept is None or kept[0] != key or done < kept[2]:  # (the columns were counted again)
            cells, lo = [" "] * len(top), 0
        else:  # a column changes only where a point newer than those drawn falls: at or after `lo`
            _, start, dt, _, _ = window
            cells, lo = kept[1], max(0, int((kept[2] - start) / dt))
        for i in range(lo, len(top)):
            v = top[i]
            cells[i] = (
                " "
                if v < 0 or (level and v * eighths <= 8 * level)
                else chars[min(8, max(0, round(v * eighths) - 8 * level))]
            )
        self._cells[(attr, level)] = (key, cells, done)
        text = "".join(cells)
        head = f"{name:<5}{'' if last is None else f'{min(last, 999):3.0f}'}" if level == 0 else ""
        head = f"{head:<{LABEL_W}}"
        return head + text, Strip([Segment(head, LABEL), Segment(text, color)])

    def _band(self, v: View, gpu: int, named: bool, start: float, dt: float, cols: int) -> tuple[str, Strip]:
        lk = self._look
        labels = v.labels.get(gpu, ())
        # each GPU's cells are kept while the window stands still (it moves in quarter-span jumps):
        # a paint places only the labels that came since, not the whole window's again (8 bands)
        cached = self._kinds.get(gpu)
        newest = labels[-1].t if labels else -math.inf
        if cached is None or cached[0] != (start, dt, cols) or newest < cached[2]:
            cached = ((start, dt, cols), [None] * cols, -math.inf)
        base, done = cached[1], cached[2]
        fresh = labels[bisect_left(labels, max(start - 0.5, done + 1e-9), key=_t) :]
        for lab in fresh:
            i0 = int((lab.t - start) / dt)
            i1 = int((lab.t + 0.5 - start) / dt)
            for i in range(max(0, i0), min(cols, max(i0 + 1, i1))):
                base[i] = lab.label
        self._kinds[gpu] = (cached[0], base, max(done, newest))
        kinds: list[str | None] = list(base)  # None: no label (drawn blank, in the warm-up colour)
        # the newest cell shows the label of now (with its settling mark): the row's phase cell, the
        # headline's "now" and this cell always name the same label
        name, settling = now_label(labels)
        latest = v.history[gpu][-1].t if v.history.get(gpu) else None
        last = None if latest is None else min(cols - 1, int((latest - start) / dt))
        if last is not None and last >= 0 and labels:
            kinds[last] = name
        cur = None if latest is None or v.status.mode == "live" else last
        head = f"{f'GPU{gpu}' if named else 'phase'}{'?' if settling else ''}"
        head = f"{head:<{LABEL_W}}"
        segs = [Segment(head, SELECTED if named and gpu == self.gpu else LABEL)]
        sig = [head]
        # runs of (phase, is the replay position): the position is one cell in its phase's colour
        for (k, here), run in groupby((k, i == cur) for i, k in enumerate(kinds)):
            n = len(list(run))
            if here:
                text, code, style = lk.glyphs.cursor, "|", lk.phase(k or "warmup")
            elif k is None:
                text, code, style = " " * n, " " * n, NULL
            else:
                ch, style = lk.mark(k)
                text, code = ch * n, _CODE.get(k, " ") * n
            segs.append(Segment(text, style))
            sig.append(code)
        return "".join(sig), Strip(segs)

    def _events(self, v: View, start: float, dt: float, cols: int) -> tuple[str, Strip]:
        marks: dict[int, tuple[str, str]] = {}
        for ev in v.events:
            i = int((ev.t - start) / dt)
            if ev.gpu == self.gpu and 0 <= i < cols and ev.kind in EVENT_MARKS:
                uni, asc, style = EVENT_MARKS[ev.kind]
                marks[i] = (asc if self.ascii_only else uni, style)
        head = f"{'events':<{LABEL_W}}"
        segs = [Segment(head, LABEL)]
        sig = [head]
        at = 0
        for i in sorted(marks):
            ch, style = marks[i]
            segs += [Segment(" " * (i - at), NULL), Segment(ch, Style.parse(style))]
            sig += [" " * (i - at), ch]
            at = i + 1
        segs.append(Segment(" " * (cols - at), NULL))
        sig.append(" " * (cols - at))
        return "".join(sig), Strip(Segment.simplify(segs))

    def _axis(
        self, cols: int, start: float, end: float, offset: float | None, origin: float | None
    ) -> tuple[str, Strip]:
        """Times at fixed columns (they move only with a jump): in a replay h:mm:ss into the recording
        (as its position and --at), live the time of day."""
        step = max(5, int(self.span_s / 6 / 5) * 5)
        axis = [" "] * cols
        zero = origin if origin is not None else 0.0
        first = zero + (max(-1, int((start - zero) // step)) + 1) * step  # (none before a replay's start)
        for sec in itertools.takewhile(lambda s: s < end, itertools.count(first, step)):
            i = int((sec - start) / self.span_s * cols)
            if origin is not None:
                lab = clock(sec - origin + 1e-6)
            elif offset:
                lab = time.strftime("%H:%M:%S", time.gmtime(sec + offset))
            else:
                lab = f"{sec - start:.0f}s"
            lab = "|" + lab
            if i + len(lab) <= cols:  # (a label cut at the edge reads as another time)
                axis[i : i + len(lab)] = lab
        text = "".join(axis)
        return " " * LABEL_W + text, Strip([Segment(" " * LABEL_W, NULL), Segment(text, DIM)])

    def _legend(self) -> tuple[str, Strip]:
        lk = self._look
        segs = [Segment(" " * LABEL_W, NULL)]
        for k in (*PHASES, "other"):  # ("other": a bin no rule claims, drawn in its own colour)
            segs += [Segment(*lk.mark(k)), Segment(f" {k} ", DIM)]
        for kind in LEGEND_MARKS:
            uni, asc, st = EVENT_MARKS[kind]
            segs += [Segment(asc if self.ascii_only else uni, Style.parse(st)), Segment(f" {kind} ", DIM)]
        return "".join(seg.text for seg in segs), Strip(segs)


def _t(x: Point | Label) -> float:
    return x.t
