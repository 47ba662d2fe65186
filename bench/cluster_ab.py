"""`memtop cluster` (the TUI under tmux, 200x50) over N fake nodes: two trees alternated on one
endpoint process (bench/cluster_bench.py's), CPU % of a core of the memtop process per run (from its
/proc/PID/stat: the cluster process only, not the endpoint or tmux).

usage: python bench/cluster_ab.py [--nodes 64 256 1024] [--interval 5] [--seconds 40] [--rounds 3]
                                  [--snaps FILE] A B
A and B: directories put first on PYTHONPATH (each holding a `memtop` package, e.g. a view of
symlinks into a `git archive` of a commit). Prints one JSON line per run (with the 1-minute load
average before and after it), then per tree and node count the median and the range.
--snaps FILE: the endpoint's snapshots, made once (`memtop snapshot --replay` of six recordings
takes a minute) and read again by later runs. Each node sends its recording's snapshots in turn, one
per request (the same sequence for every run and tree); --frames 3,8 sends only those, alternately
(frame 3 flags 342 of 1 024 rows as straggler candidates, the others none).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import cluster_bench as cb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[1024])
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--snaps", type=Path, default=Path(f"/tmp/cluster-ab-snaps-{os.getpid()}.json"))
    ap.add_argument("--frames", help="the snapshots each node sends in turn, e.g. 3,8 (default: all)")
    ap.add_argument("trees", nargs=2)
    a = ap.parse_args()
    if not a.snaps.exists():
        a.snaps.write_text(json.dumps([[s.decode() for s in g] for g in cb.real_snapshots()]))
    got: dict[tuple[str, int], list[float]] = {}
    for n in a.nodes:
        ports = cb.free_ports(n)
        # the endpoint serves the compact form: it imports the fleet's wire code of the last tree
        # given (an interpreter's own older install would lack it, and each poll fall back to the full one)
        frames = [a.frames] if a.frames else []
        ep = subprocess.Popen(
            [sys.executable, cb.__file__, "--_endpoint", ",".join(map(str, ports)), str(a.snaps), *frames],
            env={**os.environ, "PYTHONPATH": a.trees[-1]},
        )
        try:
            time.sleep(5)  # (the endpoint answers no /-/ready)
            hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
            for r in range(a.rounds):
                for tree in a.trees if r % 2 == 0 else a.trees[::-1]:
                    os.environ["PYTHONPATH"] = tree
                    load0 = os.getloadavg()[0]
                    res = cb.tui(hosts, a.interval, a.seconds)
                    got.setdefault((tree, n), []).append(res["tui_cpu_pct"])
                    print(json.dumps({"round": r + 1, "tree": tree, "nodes": n, **res,
                                      "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
                                      "at": time.strftime("%H:%M:%S")}), flush=True)  # fmt: skip
        finally:
            cb.stop(ep)
    for (tree, n), xs in got.items():
        print(json.dumps({"tree": tree, "nodes": n, "median": round(statistics.median(xs), 2),
                          "min": min(xs), "max": max(xs), "runs": len(xs)}))  # fmt: skip


if __name__ == "__main__":
    main()
