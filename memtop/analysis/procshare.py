"""Whose GPU time it was: each process's share of a GPU over a span of a recording.

From the per-process figures the recorder stored (the driver's per-process SM and memory
utilisation, one row per GPU each time they changed): a figure holds until the GPU's next row, so
the means are weighted by how long each held. Read apart from the report's scans (memtop.analysis.colscan,
memtop.analysis.scan): no rule reads these figures, so both report paths give the same bytes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from memtop.core.model import ProcUtil
from memtop.storage.store import Recording


def proc_shares(rec: Recording, lo: float, hi: float, names: Mapping[int, str]) -> dict[int, list[dict]]:
    """GPU index -> its processes, the busiest first: mean SM % and memory % over [lo, hi] and the
    process's part of all its processes' SM time on that GPU (``sm_share``, 0..1). Empty where the
    recording holds no per-process figures (made before they were recorded, or the driver gave none)."""
    rows_by_gpu: dict[int, list[tuple[float, tuple[ProcUtil, ...]]]] = defaultdict(list)
    for t, gpu, us in rec.proc_util_rows(lo, hi):
        rows_by_gpu[gpu].append((t, us))
    out: dict[int, list[dict]] = {}
    for gpu, rows in rows_by_gpu.items():
        sm: dict[int, float] = defaultdict(float)  # percent-seconds
        mem: dict[int, float] = defaultdict(float)
        span = 0.0
        for k, (t, us) in enumerate(rows):
            end = rows[k + 1][0] if k + 1 < len(rows) else hi
            dt = max(0.0, min(end, hi) - max(t, lo))
            span += dt
            for u in us:
                sm[u.pid] += (u.sm or 0.0) * dt
                mem[u.pid] += (u.mem or 0.0) * dt
        total = sum(sm.values())
        if span <= 0:
            continue
        out[gpu] = [
            {
                "pid": pid,
                "name": names.get(pid),
                "sm_pct": round(sm[pid] / span, 1),
                "mem_pct": round(mem[pid] / span, 1),
                "sm_share": round(sm[pid] / total, 3) if total else 0.0,
            }
            for pid in sorted(sm, key=lambda p: (-sm[p], p))
        ]
    return out
