"""Which Python allocations a live view holds after AT seconds (issue #39, RSS): the memtop CLI on the
recorded H100 NVML replies (bench/fake_nvml.py) with tracemalloc on from the start; at AT s one JSON
line to OUT: traced MiB, the top files and the top packages by live allocations, and the modules loaded.

usage: python bench/pty_bench.py 14 200x50 4 -- python bench/live_tracemalloc.py OUT AT -- [memtop arguments]
"""

from __future__ import annotations

import json
import sys
import threading
import time
import tracemalloc
from collections import Counter


def package(filename: str) -> str:
    """A path's package: the directory after site-packages or the stdlib's lib dir, else memtop's part."""
    parts = filename.replace("\\", "/").split("/")
    for anchor in ("site-packages", "python3.11", "python3.12", "python3.13"):
        if anchor in parts:
            rest = parts[parts.index(anchor) + 1 :]
            return rest[0] if len(rest) > 1 else "(stdlib)" if anchor.startswith("python") else rest[0]
    for anchor in ("memtop", "collectors", "tui"):
        if anchor in parts:
            return anchor + "/" + parts[parts.index(anchor) + 1] if anchor == "memtop" else anchor
    return "(other)"


def report(out: str, at: float) -> None:
    time.sleep(at)
    snap = tracemalloc.take_snapshot()
    files: Counter = Counter()
    pkgs: Counter = Counter()
    for st in snap.statistics("filename"):
        name = st.traceback[0].filename
        files[name] += st.size
        pkgs[package(name)] += st.size
    mib = 1 << 20
    with open(out, "w") as fh:
        json.dump(
            {
                "at_s": at,
                "traced_mib": round(tracemalloc.get_traced_memory()[0] / mib, 2),
                "packages_kib": {k: v >> 10 for k, v in pkgs.most_common(25)},
                "files_kib": {k: v >> 10 for k, v in files.most_common(40)},
                "modules": sorted(sys.modules),
            },
            fh,
        )
        fh.write("\n")


def main() -> None:
    out, at = sys.argv[1], float(sys.argv[2])
    tracemalloc.start()
    threading.Thread(target=report, args=(out, at), daemon=True).start()
    sys.argv = ["fake_nvml.py", *sys.argv[3:]]
    import fake_nvml

    fake_nvml.main()


if __name__ == "__main__":
    main()
