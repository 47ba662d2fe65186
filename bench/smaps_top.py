"""Where a running process's resident memory is, by mapping (issue #39): /proc/PID/smaps summed by
what is mapped (a file's name, [heap], [stack], or [anon] for anonymous maps: pymalloc's arenas,
thread stacks, large mallocs), the largest first, as one JSON line. Anonymous maps are also counted
by size class, since a thread's stack is an 8 MiB map of which only the touched pages are resident.

usage: python bench/smaps_top.py PID [LABEL]
"""

from __future__ import annotations

import json
import sys
from collections import Counter


def mappings(pid: str) -> list[tuple[str, int, int]]:
    """(name, size KiB, Rss KiB) per mapping."""
    out: list[tuple[str, int, int]] = []
    name, size = "", 0
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            head = line.split()
            if not head[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [path]
                name = head[5] if len(head) > 5 else "[anon]"
            elif head[0] == "Size:":
                size = int(head[1])
            elif head[0] == "Rss:":
                out.append((name, size, int(head[1])))
    return out


def main() -> None:
    pid = sys.argv[1]
    maps = mappings(pid)
    by_name: Counter[str] = Counter()
    for name, _, rss in maps:
        by_name[name.rsplit("/", 1)[-1]] += rss
    anon = Counter()
    for name, size, rss in maps:
        if name == "[anon]":
            anon[
                "8 MiB maps (thread stacks)"
                if size in (8192, 8196)
                else f"{'< 1' if size < 1024 else '>= 1'} MiB maps"
            ] += rss
    print(
        json.dumps(
            {
                "label": sys.argv[2] if len(sys.argv) > 2 else pid,
                "rss_mib": round(sum(r for _, _, r in maps) / 1024, 1),
                "top_kib": dict(by_name.most_common(16)),
                "anon_kib": dict(anon),
            }
        )
    )


if __name__ == "__main__":
    main()
