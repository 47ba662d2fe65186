"""`memtop cluster`'s two costs at 1 024 nodes measured apart, as CPU time of the thread doing each
(less blurred by a loaded machine than the process's share of a core, bench/cluster_ab.py's):

- `loop`: the poll loop's thread per GET (`time.pthread_getcpuclockid`), HttpPoller asking each node
  of bench/cluster_bench.py's endpoint (one process for every run) for its compact form, a round
  every 0.2 s or more as the TUI starts one (every node at once, poll_all(wait=False)), the trees
  given alternated, each run a fresh client (the collector set as the tree's `memtop cluster` sets it);
- `paint`: the main thread per round, ClusterApp headless at 200x50 over 1 024 nodes answering anew
  (rows, cells, the table, Textual's layout and compositor; the round's decoding apart, as the poll
  thread's), with how many screen layouts and collector passes each round caused (the collector set
  as the tree's `memtop cluster` sets it); `--flip` alternates the frame of the snapshots that flags
  342 rows as straggler candidates with one that flags none (the verdict column takes the band's
  cells, then gives them back).

usage: python bench/cluster_cost.py loop A B [--nodes 1024] [--rounds 10] [--runs 3] --snaps FILE
       PYTHONPATH=TREE python bench/cluster_cost.py paint [--rounds 10] [--flip] --snaps FILE
(--snaps: bench/cluster_ab.py's file; A, B: trees as cluster_ab.py takes them). One JSON line per
run; run `paint` for each tree alternately to compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cluster_bench as cb
from memtop.tui.cluster import ClusterApp
from textual.screen import Screen

from memtop.commands import cluster as cluster_cmd
from memtop.fleet import wire
from memtop.fleet.view import NodeState


def loop(trees: list[str], n: int, rounds: int, runs: int, snaps: Path) -> None:
    """The trees alternated (A, B; B, A; ...) against one endpoint process: each run a fresh client."""
    ports = cb.free_ports(n)
    ep = subprocess.Popen(
        [sys.executable, cb.__file__, "--_endpoint", ",".join(map(str, ports)), str(snaps)],
        env={**os.environ, "PYTHONPATH": trees[-1]},
    )
    try:
        time.sleep(5)  # (the endpoint answers no /-/ready)
        hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
        for r in range(runs):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                out = subprocess.run(
                    [sys.executable, __file__, "_loop", hosts, str(rounds)],
                    env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
                print(
                    json.dumps({"what": "loop", "tree": tree, **json.loads(out), "load": os.getloadavg()[0]}),
                    flush=True,
                )
    finally:
        cb.stop(ep)


def _loop(hosts: str, rounds: int) -> dict:
    """One client: HttpPoller over the hosts, CPU of its loop's thread per GET over `rounds` rounds."""
    from memtop.fleet.sources import HttpPoller

    nodes = [NodeState(h) for h in hosts.split(",")]
    p = HttpPoller(nodes, 0, timeout=60.0, compact=True)
    p.poll_all()  # the first polls open the connections (the workers); the loop carries the rest
    p.poll_all()
    _collector_as_the_view()
    clock = time.pthread_getcpuclockid(p._loop_thread.ident or 0)
    c0 = time.clock_gettime(clock)
    for _ in range(rounds):
        p.poll_all(wait=False)
        time.sleep(0.2)
        while p._busy:
            time.sleep(0.05)
    us = 1e6 * (time.clock_gettime(clock) - c0) / (rounds * len(nodes))
    p.close(wait=True)
    return {"loop_us_per_get": round(us, 1), "failures": sum(x.failures for x in nodes)}


def _collector_as_the_view() -> None:
    """The collector as the tree's `memtop cluster` sets it once started (its own threshold)."""
    gc.freeze()
    gc.set_threshold(getattr(cluster_cmd, "GC_YOUNG", 700), *gc.get_threshold()[1:])


class _Nodes:
    def __init__(self, nodes: list[NodeState]) -> None:
        self.nodes = nodes

    def poll_all(self, wait: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def paint(rounds: int, flip: bool, snaps: Path) -> dict:
    groups = [
        [json.dumps(wire.compact(json.loads(s))).encode() for s in g] for g in json.loads(snaps.read_text())
    ]
    nodes = [NodeState(f"127.0.0.1:{43000 + i}") for i in range(1024)]
    layouts = [0]
    layout = Screen._refresh_layout

    def counted(self, *a, **kw):
        layouts[0] += 1
        return layout(self, *a, **kw)

    Screen._refresh_layout = counted  # type: ignore[method-assign]

    def answer(frame: int) -> None:
        for i, n in enumerate(nodes):
            g = groups[i % len(groups)]
            n.receive(g[frame % len(g)], compact=True)

    passes = [0]
    gc.callbacks.append(lambda phase, info: passes.__setitem__(0, passes[0] + (phase == "stop")))

    async def run() -> dict:
        app = ClusterApp(_Nodes(nodes), interval=5.0)
        async with app.run_test(size=(200, 50)) as pilot:
            answer(4)
            app.paint()
            await pilot.pause(0.2)
            _collector_as_the_view()
            l0, g0, decode, main = layouts[0], passes[0], 0.0, 0.0
            for k in range(rounds):
                # frame 3 flags 342 rows, 4 none; without --flip, consecutive frames, as the endpoint's
                c0 = time.thread_time()
                answer((3 if k % 2 else 4) if flip else k + 1)
                c1 = time.thread_time()
                app.paint()
                await pilot.pause(0.1)
                decode, main = decode + c1 - c0, main + time.thread_time() - c1
            return {
                "main_ms_per_round": round(1000 * main / rounds, 1),
                "decode_ms_per_round": round(1000 * decode / rounds, 1),
                "layouts_per_round": (layouts[0] - l0) / rounds,
                "gc_passes_per_round": (passes[0] - g0) / rounds,
            }

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("loop", "paint", "_loop"))
    ap.add_argument("args", nargs="*", help="loop: the trees (directories for PYTHONPATH) to alternate")
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3, help="loop: runs of each tree")
    ap.add_argument("--flip", action="store_true")
    ap.add_argument("--snaps", type=Path)
    a = ap.parse_args()
    if a.what == "_loop":
        print(json.dumps(_loop(a.args[0], int(a.args[1]))))
    elif a.what == "loop":
        loop(a.args, a.nodes, a.rounds, a.runs, a.snaps)
    else:
        got = paint(a.rounds, a.flip, a.snaps)
        tree = os.environ.get("PYTHONPATH", "")
        print(json.dumps({"what": "paint", "tree": tree, "flip": a.flip, **got, "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
