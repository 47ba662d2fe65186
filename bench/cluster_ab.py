"""`memtop cluster` (the TUI under tmux, 200x50) over N fake nodes: two trees alternated on one
endpoint process (bench/cluster_bench.py's), CPU % of a core of the memtop process per run.

usage: python bench/cluster_ab.py [--nodes 1024] [--interval 5] [--seconds 40] [--rounds 3] A B
A and B: directories put first on PYTHONPATH (each holding a `memtop` package, e.g. a view of
symlinks into a `git archive` of a commit). Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cluster_bench as cb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("trees", nargs=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        snaps = Path(d) / "snaps.json"
        snaps.write_text(json.dumps([[s.decode() for s in g] for g in cb.real_snapshots()]))
        ports = cb.free_ports(a.nodes)
        ep = subprocess.Popen(
            [sys.executable, cb.__file__, "--_endpoint", ",".join(map(str, ports)), str(snaps)]
        )
        try:
            time.sleep(5)  # (the endpoint answers no /-/ready)
            hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
            for r in range(a.rounds):
                for tree in a.trees if r % 2 == 0 else a.trees[::-1]:
                    os.environ["PYTHONPATH"] = tree
                    res = cb.tui(hosts, a.interval, a.seconds)
                    print(json.dumps({"round": r + 1, "tree": tree, "nodes": a.nodes, **res,
                                      "load": os.getloadavg()[0]}), flush=True)  # fmt: skip
        finally:
            cb.stop(ep)


if __name__ == "__main__":
    main()
