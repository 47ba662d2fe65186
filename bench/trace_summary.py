"""What a merged `memtop trace` file holds, and how well its clocks agree (bench/trace_device.sh).

usage: trace_summary.py TRACE.json.gz [MARKS.json]
Counts the framework's events by category and memtop's tracks, checks every kernel lies inside the
capture window, and with the job's sync marks (bench/trace_job.py) measures the GPU-side alignment:
for each note of CLOCK_MONOTONIC taken right after torch.cuda.synchronize() returned, the gap back to
the end of the cudaDeviceSynchronize call and of the last kernel before it (both from CUPTI, shifted
onto CLOCK_MONOTONIC by the merge). A gap below zero would be a clock error."""

import collections
import gzip
import json
import statistics
import sys
from pathlib import Path


def main() -> None:
    doc = json.loads(gzip.decompress(Path(sys.argv[1]).read_bytes()))
    ev = doc["traceEvents"]
    meta = doc["metadata"]
    cats = collections.Counter(e.get("cat") for e in ev if e.get("pid", 0) >= 2_000_000)
    counters = sorted({e["name"] for e in ev if e.get("ph") == "C"})
    phases = [
        e["name"]
        for e in ev
        if e.get("ph") == "X" and e.get("tid") == 1 and e.get("pid", 0) in range(1_000_000, 1_000_100)
    ]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    out = {
        "categories": dict(cats.most_common()),
        "memtop_counters": counters,
        "phase_slices": collections.Counter(phases),
        "stack_slices": sum(1 for e in ev if e.get("cat") == "stack" and e.get("ph") == "B"),
        "captures": meta.get("captures"),
    }
    for cap in meta.get("captures") or []:
        lo, hi = (t * 1e6 for t in cap["window_s"])
        inside = sum(1 for k in kernels if lo - 5e4 <= k["ts"] <= hi + 5e4)
        out.setdefault("kernels_inside_window", []).append([inside, len(kernels)])
    if len(sys.argv) > 2 and kernels:
        marks = [m * 1e6 for m in json.loads(Path(sys.argv[2]).read_text())["sync_marks"]]
        syncs = sorted(e["ts"] + e.get("dur", 0) for e in ev if e.get("name") == "cudaDeviceSynchronize")
        kends = sorted(k["ts"] + k.get("dur", 0) for k in kernels)
        gaps_sync, gaps_kernel = [], []
        for m in marks:  # the nearest within 50 ms (a misaligned clock shows as a gap below zero)
            for ends, gaps in ((syncs, gaps_sync), (kends, gaps_kernel)):
                near = [x for x in ends if abs(m - x) <= 50_000]
                if near:
                    gaps.append(m - min(near, key=lambda x: abs(m - x)))
        for name, g in (("after_sync_end_us", gaps_sync), ("after_last_kernel_end_us", gaps_kernel)):
            if g:
                out[name] = {
                    "n": len(g),
                    "min": round(min(g), 1),
                    "median": round(statistics.median(g), 1),
                    "max": round(max(g), 1),
                }
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
