"""`memtop export --perfetto` of the same files by two trees, alternated in fresh processes, each run's
CPU split between the writing process and the phase worker (issue #39; bench/export_ab.sh gives
/usr/bin/time's view of the same runs). On the shared 2-core VM the wall time follows the other
sessions' load: the CPU seconds, and each round's B/A ratio of them, are what compare.

usage: python bench/export_split.py VIEW_A VIEW_B ROUNDS OUTDIR FILE... [--json]
  VIEW_*: a directory whose memtop/ is the tree to run (a view of symlinks, as bench/export_ab.sh
  takes), put first on PYTHONPATH; run from OUTDIR. Every other round the second tree goes first.
  --json: the JSON form (OUT.json) rather than the protobuf.

One line per run: tree, file, round, wall s, CPU s of the writer and of the worker (user+sys, the
interpreter's start-up included), their peak RSS MiB, the events written, the 1-minute load average
before; then per file the median of each and the rounds' B/A ratios (min-max) of wall and CPU."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

RUN = """
import json, resource, sys, time
t = time.perf_counter()
from pathlib import Path
from memtop.outputs.export import export_perfetto
from memtop.storage.store import Recording
n = export_perfetto(Recording(Path(sys.argv[1])), Path(sys.argv[2]), force=True, progress=False)
s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": time.perf_counter() - t, "main": s.ru_utime + s.ru_stime,
                  "worker": c.ru_utime + c.ru_stime, "main_mib": s.ru_maxrss / 1024,
                  "worker_mib": c.ru_maxrss / 1024, "events": n}))
"""


def run(view: str, f: Path, out: Path) -> dict:
    load = float(Path("/proc/loadavg").read_text().split()[0])
    env = {**os.environ, "PYTHONPATH": view}
    r = subprocess.run([sys.executable, "-c", RUN, str(f), str(out)], env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{view} {f}: {r.stderr.strip()[-500:]}")
    return {**json.loads(r.stdout.splitlines()[-1]), "load": load}


def main(argv: list[str]) -> None:
    as_json = "--json" in argv
    a, b, rounds, outdir, *files = [x for x in argv if x != "--json"]
    views = {"A": a, "B": b}
    got: dict[tuple[str, str], list[dict]] = {}
    for r in range(1, int(rounds) + 1):
        for f in map(Path, files):
            for which in "AB" if r % 2 else "BA":
                out = Path(outdir) / f"{which}.{f.stem}.{'json' if as_json else 'pftrace'}"
                m = run(views[which], f, out)
                got.setdefault((which, f.name), []).append(m)
                print(
                    f"{which} {f.name} round={r} wall={m['wall']:.2f} main_cpu={m['main']:.2f} "
                    f"worker_cpu={m['worker']:.2f} main_mib={m['main_mib']:.1f} "
                    f"worker_mib={m['worker_mib']:.1f} events={m['events']} load={m['load']:.2f}",
                    flush=True,
                )
    for f in map(Path, files):
        ra, rb = got[("A", f.name)], got[("B", f.name)]
        for key in ("wall", "main", "worker"):
            ratios = [y[key] / x[key] for x, y in zip(ra, rb, strict=True) if x[key]]
            med = [statistics.median(m[key] for m in runs) for runs in (ra, rb)]
            print(
                f"{f.name} {key}: A {med[0]:.2f} B {med[1]:.2f} (median) B/A {min(ratios):.2f}-{max(ratios):.2f}"
            )
        cpu = [(y["main"] + y["worker"]) / (x["main"] + x["worker"]) for x, y in zip(ra, rb, strict=True)]
        print(f"{f.name} cpu total B/A {min(cpu):.2f}-{max(cpu):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
