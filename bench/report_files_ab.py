"""Cold `memtop report --format json` of given recordings, this tree against another checkout, alternated
in fresh processes: wall and CPU seconds (user+sys of the report and its chunk process), the 1-minute
load average before each run, and whether the two trees' JSON is the same bytes.

usage: python bench/report_files_ab.py BEFORE_CHECKOUT FILE... [--runs 3]   (prints JSON)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from trees import prelude

ROOT = Path(__file__).parent.parent
REPORT = "from memtop.cli import main; sys.exit(main(sys.argv[1:]))"


def run(tree: str, path: Path) -> dict:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    s = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", prelude(tree) + REPORT, "report", str(path), "--format", "json"],
        capture_output=True, check=True, cwd="/tmp",
    )  # fmt: skip
    wall = time.perf_counter() - s
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    digest = hashlib.sha256(p.stdout).hexdigest()[:16]
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "load1": round(load, 1), "sha": digest}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    trees = {"before": str(a.before.resolve()), "after": str(ROOT.resolve())}
    out: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": os.cpu_count()}
    for f in a.files:
        runs: dict[str, list] = {k: [] for k in trees}
        for _ in range(a.runs):
            for name, tree in trees.items():
                runs[name].append(run(tree, f))
        same = len({r["sha"] for rs in runs.values() for r in rs}) == 1
        out[f.name] = {"same_json": same, **runs}
        print(json.dumps({f.name: out[f.name]}), file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
