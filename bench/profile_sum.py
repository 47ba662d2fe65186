"""Summarise a py-spy raw profile (``--threads``): busy samples per thread and per memtop part.

Samples whose innermost frame is a wait (select, lock, queue, sleep) are idle and left out.
usage: python bench/profile_sum.py PROFILE.txt
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

IDLE = (
    "select (selectors",
    "Condition.wait",
    "Queue.get",
    "Event.wait",
    "sleep",
    "wait (threading",
    "_worker (concurrent/futures/thread.py:81)",
    "run_forever (asyncio",
    "_run_once (asyncio",
)
PARTS = (
    ("nvml", "collectors/nvml"),
    ("perf", "collectors/perf"),
    ("host", "collectors/host"),
    ("stacks", "collectors/stacks"),
    ("sampler", "memtop/live/sampler"),
    ("classifier", "memtop/analysis/"),
    ("pipeline", "memtop/live/pipeline"),
    ("ui (memtop)", "tui/"),
    ("ui (textual)", "textual/"),
)


def main(path: str) -> None:
    threads: Counter = Counter()
    parts: Counter = Counter()
    leaves: Counter = Counter()  # (thread, innermost frame)
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, n = line.rstrip().rsplit(" ", 1)
        frames = stack.split(";")
        if any(i in frames[-1] for i in IDLE):
            continue
        total += int(n)
        threads[frames[0].split(": ", 1)[-1]] += int(n)
        parts[next((name for name, key in PARTS if any(key in f for f in frames)), "other")] += int(n)
        leaves[(frames[0].split(": ", 1)[-1], frames[-1])] += int(n)
    print(f"busy samples: {total}")
    for title, c in (("thread", threads), ("part (first match: collectors before UI)", parts)):
        print(f"\n| {title} | share |\n|---|---:|")
        for k, v in c.most_common(12):
            print(f"| {k} | {100 * v / total:.0f} % |")
    print("\n| thread | innermost frame | share |\n|---|---|---:|")
    for (th, leaf), v in leaves.most_common(25):
        print(f"| {th} | {leaf} | {100 * v / total:.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1])
