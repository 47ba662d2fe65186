"""Per-process SM utilisation: memtop's recording against `nvidia-smi pmon -s u -o T` over the same seconds.

usage: python bench/procs_pmon.py PMON.txt RUN.memtop
PMON.txt from `nvidia-smi pmon -s u -o T -d 1 -c 30` run beside `memtop record` on the same GPU. Each
pmon line (one second, one process) is matched with memtop's figure for that process at the frame
nearest that second's end (memtop's figure is the driver's samples of the second before, as pmon's);
"-" (no sample: the process did not use the GPU) counts as 0 on both sides. Prints each process's
mean over the matched seconds, both ways, and the difference in points.
"""

from __future__ import annotations

import datetime
import sys
from collections import defaultdict
from pathlib import Path

from memtop.storage.store import Recording


def pmon_rows(path: str) -> list[tuple[str, int, int, float]]:
    """(HH:MM:SS, gpu, pid, SM %) per line."""
    out = []
    for line in Path(path).read_text().splitlines():
        f = line.split()
        if not f or line.startswith("#") or len(f) < 5 or not f[2].isdigit():
            continue
        out.append((f[0], int(f[1]), int(f[2]), 0.0 if f[4] == "-" else float(f[4])))
    return out


def main() -> None:
    rows = pmon_rows(sys.argv[1])
    rec = Recording(sys.argv[2])
    offset = float(rec.meta["wall_offset"])
    day = datetime.datetime.fromtimestamp(rec.meta["started_wall"]).date()
    frames = [(f.t + offset, f) for f in rec.frames(skip=frozenset({"series", "stack", "perf", "note"}))]
    pm: dict[int, list[float]] = defaultdict(list)
    mt: dict[int, list[float]] = defaultdict(list)
    for hms, gpu, pid, sm in rows:
        wall = (
            datetime.datetime.combine(day, datetime.time.fromisoformat(hms)).timestamp() + 0.5
        )  # (HH:MM:SS: somewhere in that second)
        if not frames[0][0] <= wall <= frames[-1][0]:
            continue
        _, f = min(frames, key=lambda tf: abs(tf[0] - wall))
        g = f.gpu(gpu)
        u = g.util_of(pid) if g else None
        if u is None or u.sm is None:
            continue
        pm[pid].append(sm)
        mt[pid].append(u.sm)
    print("pid      seconds  pmon SM %  memtop SM %  difference (points)")
    for pid in sorted(pm):
        a, b = sum(pm[pid]) / len(pm[pid]), sum(mt[pid]) / len(mt[pid])
        print(f"{pid:<8} {len(pm[pid]):>7}  {a:9.1f}  {b:11.1f}  {b - a:+.1f}")


if __name__ == "__main__":
    main()
