"""What the stacks panel's source-line cache (collectors.stacks.SourceLines) holds after a real
torch job's worth of frames: heldout2_torch_s21's stacks name 562 (process, file) pairs and 1 342
lines; here 281 standard-library files (over 2 KB) for two processes, two lines asked of each. One
JSON line: pairs, distinct lines, the cache's Python memory (tracemalloc). For A/B of two trees.

usage: python bench/source_lines_mem.py
"""

from __future__ import annotations

import gc
import glob
import json
import os
import random
import tracemalloc

from memtop.collectors.stacks import SourceLines


def main() -> None:
    files = sorted(glob.glob(os.path.dirname(os.__file__) + "/**/*.py", recursive=True))
    random.seed(1)
    files = random.sample([f for f in files if os.path.getsize(f) > 2000], 281)
    asks = [
        (p, f, random.randint(1, 60)) for p in (os.getpid(), os.getppid()) for f in files for _ in range(2)
    ]
    gc.collect()
    tracemalloc.start()
    src = SourceLines()
    for pid, f, line in asks:
        src.get(pid, f, line)
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] / 2**20
    pairs = len({(p, f) for p, f, _ in asks})
    print(json.dumps({"pairs": pairs, "lines": len(set(asks)), "kept_mib": round(kept, 2)}))


if __name__ == "__main__":
    main()
