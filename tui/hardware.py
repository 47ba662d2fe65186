"""The GPU detail screen's hardware part: health counters and events (memtop.analysis.health) and the GPU's
point on a small roofline (memtop.analysis.roofline, an estimate from GPM pipe activity)."""

from __future__ import annotations

import math

from rich.text import Text

from memtop.analysis.health import counters_text, summary
from memtop.analysis.roofline import ESTIMATE, PEAKS, Point, point
from memtop.core.model import GpuSample
from memtop.core.sanitize import clean
from memtop.live.pipeline import View

CHART_W, CHART_H = 48, 7
AI_RANGE = (0.1, 1e4)  # FLOP per byte, log scale across the chart


def health_line(view: View, g: GpuSample) -> tuple[str, str]:
    """The health counters for people (the non-zero ones by name, times in seconds) and its style."""
    if g.health is None:
        if view.status.mode in ("replay", "demo"):  # memtop reads them at a recording's first sample
            return "none in this recording (made before memtop read them)", "dim"
        return "no health counters read yet (read every 5 s)", "dim"
    counters = summary(g.health)
    if not counters:
        return "this GPU gives no health counters", "dim"
    return counters_text(counters), ""


def hardware_text(view: View, g: GpuSample, ascii_only: bool) -> Text:
    t = Text()
    t.append(f"  {'health':<14}", style="bold")
    line, style = health_line(view, g)
    t.append(line + "\n", style=style)
    for e in [e for e in view.health if e.gpu == g.index][-5:]:
        t.append(
            f"    {e.severity}: {clean(e.text)}  $ {e.command}\n",
            style="bold red" if e.severity == "critical" else "yellow",
        )
    for m in g.mig_instances:
        mem = (
            "memory n/a"
            if m.mem_total is None
            else f"{(m.mem_used or 0) / 2**30:.1f} / {m.mem_total / 2**30:.1f} GiB"
        )
        t.append(f"  {'MIG ' + str(m.index):<14}GI {m.gi} CI {m.ci}  {clean(m.name, 60)}  {mem}\n")
    p = point(g)
    t.append(f"  {'roofline':<14}", style="bold")
    if p is None:
        why = "needs GPM" if g.mode != "gpm" else f"no datasheet peaks for {clean(g.name, 40)}"
        t.append(f"n/a ({why}: memtop never guesses a peak)\n", style="dim")
        return t
    ai = p.intensity
    t.append(
        f"{100 * p.compute_roof:.0f} % of the {p.roof} roof, {100 * p.bandwidth_roof:.0f} % of the bandwidth roof\n"
    )
    t.append(
        f"{'':16}{p.flops / 1e12:.0f} TFLOP/s, {p.bandwidth / 1e9:.0f} GB/s, "
        f"intensity {'n/a' if ai is None else f'{ai:.0f} FLOP/B'}\n{'':16}({ESTIMATE})\n",
        style="dim",
    )
    trail = tuple(q for _, q in view.roofline_trail.get(g.index, ()))
    t.append_text(chart(p, g.name, ascii_only, trail))
    return t


TRAIL_STYLES = ("grey30", "grey46", "grey66")  # the trail's oldest third to its newest


def chart(p: Point, name: str, ascii_only: bool, trail: tuple[Point, ...] = ()) -> Text:
    """Log-log: arithmetic intensity across, FLOP/s up (the roof's peak at the top, 1/1000 of it at the
    bottom); the roof is min(compute peak, intensity x bandwidth peak); the point is where the GPU runs,
    ``trail`` where it ran in the last bins (oldest first: memtop.analysis.roofline.Trail), fainter the older.
    A GPU computing nothing (0 FLOP/s, off a log scale) is drawn hollow on the floor, and said so."""
    peak = PEAKS[name]
    top = getattr(peak, p.roof)
    lo_x, hi_x = (math.log10(v) for v in AI_RANGE)

    def row_of(flops: float) -> int:
        frac = (math.log10(max(flops, top / 1e3)) - math.log10(top / 1e3)) / 3
        return CHART_H - 1 - min(CHART_H - 1, round(frac * (CHART_H - 1)))

    def col_of(ai: float) -> int:
        return round(
            (math.log10(min(max(ai, AI_RANGE[0]), AI_RANGE[1])) - lo_x) / (hi_x - lo_x) * (CHART_W - 1)
        )

    def cell(q: Point) -> tuple[int, int]:
        # no DRAM traffic: infinitely intense when computing (the right edge), nowhere when idle (the left)
        at = q.intensity if q.intensity is not None else (AI_RANGE[1] if q.flops > 0 else AI_RANGE[0])
        return row_of(q.flops), col_of(at)

    grid = [[(" ", "dim")] * CHART_W for _ in range(CHART_H)]
    for col in range(CHART_W):
        ai = 10 ** (lo_x + (hi_x - lo_x) * col / (CHART_W - 1))
        grid[row_of(min(top, ai * peak.dram))][col] = ("-" if ascii_only else "─", "dim")
    dot = "." if ascii_only else "•"
    for k, q in enumerate(trail):
        r, c = cell(q)
        grid[r][c] = (dot, TRAIL_STYLES[k * len(TRAIL_STYLES) // len(trail)])
    idle = p.flops <= 0
    mark = ("o" if ascii_only else "○") if idle else ("*" if ascii_only else "●")
    r, c = cell(p)
    grid[r][c] = (mark, "bold")
    t = Text()
    t.append(f"{'FLOP/s (log)':>14}\n", style="dim")
    for r, cells in enumerate(grid):
        label = (
            f"{top / 1e12:.0f} TFLOP/s"
            if r == 0
            else (f"{top / 1e15:.1f} TFLOP/s" if r == CHART_H - 1 else "")
        )
        t.append(f"{label:>14}  |", style="dim" if r else "")
        for ch, style in cells:
            t.append(ch, style=style)
        t.append("\n")
    left, right = f"{AI_RANGE[0]:g}", f"{AI_RANGE[1]:.0e} FLOP/B".replace("e+0", "e")
    t.append(f"{'':16}+{'-' * CHART_W}\n{'':17}{left}{right:>{CHART_W - len(left)}}\n", style="dim")
    t.append(f"{'':17}arithmetic intensity: FLOP per DRAM byte (log)\n", style="dim")
    now = f"{mark} now: 0 FLOP/s, drawn on the floor" if idle else f"{mark} now"
    t.append(f"{'':17}{now}; {'-' if ascii_only else '─'} the roof\n", style="dim")
    if trail:
        t.append(f"{'':17}{dot} its last {len(trail)} bins, the older the fainter\n", style="dim")
    return t
