"""Both ranks of a 2-rank capture in one merged file, and on one clock (bench/trace_fast.sh, DDP=1).

usage: trace_ddp_check.py TRACE.json.gz
Per capture (the file's metadata.captures, in the merge's order: block k holds pids 2 000 000 + 1000 k
+ n): its pid, residual, window and its kernels (all, NCCL's, inside its window). Then the ranks'
NCCL all-reduce kernels against each other: an all-reduce ends on both GPUs at nearly the same
instant (the ranks wait for each other inside it), so for each of rank A's NCCL kernels the nearest
end of rank B's is a direct measure of how well the two traces are aligned (a clock error of X µs
would show as gaps of about X)."""

import bisect
import gzip
import json
import statistics
import sys
from pathlib import Path


def main() -> None:
    doc = json.loads(gzip.decompress(Path(sys.argv[1]).read_bytes()))
    caps = doc["metadata"]["captures"]
    per: dict[int, list] = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and isinstance(e.get("pid"), int) and e["pid"] >= 2_000_000:
            per.setdefault((e["pid"] - 2_000_000) // 1000, []).append(e)
    out: dict = {"captures": []}
    for k, c in enumerate(caps):
        ks = per.get(k, [])
        lo, hi = (t * 1e6 for t in c["window_s"])
        out["captures"].append(
            {
                "pid": c["pid"],
                "residual_us": c["clock_residual_us"],
                "window_s": c["window_s"],
                "kernels": len(ks),
                "nccl_kernels": sum("nccl" in e["name"].lower() for e in ks),
                "inside_window": sum(lo - 1e3 <= e["ts"] <= hi + 1e3 for e in ks),
            }
        )
    ranks = [k for k in per if any("nccl" in e["name"].lower() for e in per[k])]
    if len(ranks) >= 2:
        a, b = (
            sorted(e["ts"] + e.get("dur", 0) for e in per[k] if "nccl" in e["name"].lower())
            for k in ranks[:2]
        )
        gaps = []
        for t in a:
            i = bisect.bisect_left(b, t)
            gaps.append(min(abs(t - b[j]) for j in (i - 1, i) if 0 <= j < len(b)))
        out["nccl_end_gap_us"] = {
            "n": len(gaps),
            "min": round(min(gaps), 1),
            "median": round(statistics.median(gaps), 1),
            "p90": round(sorted(gaps)[int(0.9 * (len(gaps) - 1))], 1),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
