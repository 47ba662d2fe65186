"""CPU of the Writer: a real recording's Frames (labelled_s0, repeated with shifted times) written
through this tree's Writer and, with ``--before CHECKOUT``, that checkout's, alternated.

usage: python bench/writer_bench.py [--repeat 10] [--runs 2] [--before CHECKOUT]   (prints JSON)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from trees import prelude

ROOT = Path(__file__).parent.parent
CHILD = """
import os, sys, time
from dataclasses import replace
from memtop.storage.store import Recording, Writer
rec = Recording(sys.argv[1])
frames = list(rec.frames())
span = rec.t1 - rec.t0 + 0.1
def shifted(f, dt):
    return replace(f, t=f.t + dt, gpus=tuple(replace(g, t=g.t + dt) for g in f.gpus),
                   host=None if f.host is None else replace(f.host, t=f.host.t + dt),
                   stacks=tuple(replace(s, t=s.t + dt) for s in f.stacks),
                   perf=tuple(replace(p, t=p.t + dt) for p in f.perf),
                   series=tuple(replace(c, t=tuple(x + dt for x in c.t)) for c in f.series))
frames = [shifted(f, k * span) for k in range(int(sys.argv[3])) for f in frames]
c, w = time.process_time(), time.perf_counter()
out = Writer(sys.argv[2], rec.meta, force=True)
for f in frames:
    out.add(f)
    while out._q.qsize() > 5000:
        time.sleep(0.001)
out.close()
print(len(frames), round(time.process_time() - c, 3), round(time.perf_counter() - w, 3), os.path.getsize(sys.argv[2]))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--before", type=Path)
    a = ap.parse_args()
    trees = {"after": None} | ({"before": a.before.resolve()} if a.before else {})
    res: dict = {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(a.runs):
            for key, tree in trees.items():
                code = (prelude(str(tree)) if tree else "") + CHILD
                out = subprocess.run(
                    [sys.executable, "-c", code, str(ROOT / "tests/data/labelled_s0.memtop"), f"{d}/w.memtop",
                     str(a.repeat)],
                    capture_output=True, text=True, check=True, cwd=d,
                )  # fmt: skip
                n, cpu, wall, size = out.stdout.split()
                res[key].append(
                    {"frames": int(n), "cpu_s": float(cpu), "wall_s": float(wall), "bytes": int(size)}
                )
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
