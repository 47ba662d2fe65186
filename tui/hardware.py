"""The GPU detail screen's hardware part: health counters and events (memtop.health) and the GPU's
point on a small roofline (memtop.roofline, an estimate from GPM pipe activity)."""

from __future__ import annotations

import math

from rich.text import Text

from memtop.health import summary
from memtop.model import GpuSample
from memtop.pipeline import View
from memtop.roofline import ESTIMATE, PEAKS, Point, point
from memtop.sanitize import clean

CHART_W, CHART_H = 48, 7
AI_RANGE = (0.1, 1e4)  # FLOP per byte, log scale across the chart


def hardware_text(view: View, g: GpuSample, ascii_only: bool) -> Text:
    t = Text()
    counters = summary(g.health)
    t.append(f"  {'health':<14}", style="bold")
    if g.health is None:
        t.append("no health counters read yet\n", style="dim")
    else:
        bad = {k: v for k, v in counters.items() if v}
        t.append(", ".join(f"{k} {v}" for k, v in bad.items()) or f"{len(counters)} counters, all zero")
        t.append("\n")
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
    t.append(f"{p.text}\n")
    t.append(
        f"{'':16}{p.flops / 1e12:.0f} TFLOP/s, {p.bandwidth / 1e9:.0f} GB/s, "
        f"intensity {'n/a' if ai is None else f'{ai:.0f} FLOP/B'} ({ESTIMATE})\n",
        style="dim",
    )
    t.append_text(chart(p, g.name, ascii_only))
    return t


def chart(p: Point, name: str, ascii_only: bool) -> Text:
    """Log-log: arithmetic intensity across, FLOP/s up (the roof's peak at the top, 1/1000 of it at the
    bottom); the roof is min(compute peak, intensity x bandwidth peak); the point is where the GPU runs."""
    peak = PEAKS[name]
    top = getattr(peak, p.roof)
    lo_x, hi_x = (math.log10(v) for v in AI_RANGE)

    def row_of(flops: float) -> int:
        frac = (math.log10(max(flops, top / 1e3)) - math.log10(top / 1e3)) / 3
        return CHART_H - 1 - min(CHART_H - 1, round(frac * (CHART_H - 1)))

    grid = [[" "] * CHART_W for _ in range(CHART_H)]
    for col in range(CHART_W):
        ai = 10 ** (lo_x + (hi_x - lo_x) * col / (CHART_W - 1))
        grid[row_of(min(top, ai * peak.dram))][col] = "-" if ascii_only else "─"
    at = p.intensity
    if at is not None and p.flops > 0:
        col = round(
            (math.log10(min(max(at, AI_RANGE[0]), AI_RANGE[1])) - lo_x) / (hi_x - lo_x) * (CHART_W - 1)
        )
        grid[row_of(p.flops)][col] = "*" if ascii_only else "●"
    t = Text()
    for r, cells in enumerate(grid):
        label = (
            f"{top / 1e12:.0f} TFLOP/s"
            if r == 0
            else (f"{top / 1e15:.1f} TFLOP/s" if r == CHART_H - 1 else "")
        )
        t.append(f"{label:>14}  |{''.join(cells)}\n", style="dim" if r else "")
    t.append(
        f"{'':16}+{'-' * CHART_W}\n{'':17}{AI_RANGE[0]} FLOP/B{'':>{CHART_W - 22}}{AI_RANGE[1]:.0e}\n",
        style="dim",
    )
    return t
