"""Cold `memtop report` on hours of recording, this tree against another checkout, where the two write
different schemas: each tree's own Writer re-writes the real 142 s labelled run and tiles it (its own
bench/long_runs.py), then the two reports run as fresh processes, alternated; their JSON must be equal
but for the file's path.

usage: python bench/report_ab.py BEFORE_CHECKOUT [--hours 8] [--runs 5] [--dir DIR]   (prints JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trees import prelude

ROOT = Path(__file__).parent.parent
BUILD = "from pathlib import Path; from long_runs import rewrite, tile, SRC; rewrite(SRC, Path(sys.argv[1])); tile(Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]))"
REPORT = "from memtop.cli import main; sys.exit(main(sys.argv[1:]))"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", type=Path)
    a = ap.parse_args()
    d = (a.dir or Path(tempfile.mkdtemp(prefix="memtop-ab-"))).resolve()
    d.mkdir(parents=True, exist_ok=True)
    trees = {"before": str(a.before.resolve()), "after": str(ROOT.resolve())}
    files = {}
    for name, tree in trees.items():
        tile_path, out = d / f"{name}_tile.memtop", d / f"{name}_{a.hours:g}h.memtop"
        for p in (tile_path, out):
            p.unlink(missing_ok=True)
        code = prelude(tree) + BUILD
        subprocess.run([sys.executable, "-c", code, tile_path, out, str(a.hours * 3600)], check=True, cwd=d)
        files[name] = out
    runs: dict[str, list] = {k: [] for k in trees}
    outs = {}
    load = os.getloadavg()[0]
    for _ in range(a.runs):
        for name, tree in trees.items():
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            s = time.perf_counter()
            p = subprocess.run(
                [sys.executable, "-c", prelude(tree) + REPORT, "report", files[name], "--format", "json"],
                capture_output=True, text=True, check=True, cwd=d,
            )  # fmt: skip
            wall = time.perf_counter() - s
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
            runs[name].append({"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)})
            outs[name] = json.loads(p.stdout)
    for o in outs.values():
        o["recording"].pop("path", None)
    res = {
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "loadavg_1m_before": round(load, 2),
        "hours": a.hours,
        "bytes": {k: f.stat().st_size for k, f in files.items()},
        "equal_but_path": outs["before"] == outs["after"],
    }
    for name, r in runs.items():
        res[name] = {
            "wall_median_s": statistics.median(x["wall_s"] for x in r),
            "wall_best_s": min(x["wall_s"] for x in r),
            "cpu_median_s": statistics.median(x["cpu_s"] for x in r),
            "runs": r,
        }
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
