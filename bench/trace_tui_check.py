"""Check what bench/trace_tui.sh brought back from the GPU machine (docs/TRACE.md, bench/RESULTS.md).

usage: python bench/trace_tui_check.py DIR      (DIR: results.tgz unpacked)
For each merged trace the live view wrote (--trace-on, the `x` key): the framework's kernels, memtop's
counters and phase slices are present, and on one clock — every kernel inside the capture window,
memtop's GPU counters sampled across it, a phase slice over it — and the clock residual the merge
measured is under 1 ms; with the job's sync marks (bench/trace_job.py) the GPU-side check of
bench/trace_summary.py too. Then the recording's captures as `memtop report` lists them, how long each
took, and the job's step rate inside each window against the 10 s before it. Prints JSON; exits 1 if
a check fails.

Perfetto's own trace processor (the `perfetto` package's TraceProcessor) downloads its binary on first
use from a host this workplace cannot reach, so the file is read as the JSON it is."""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

GPU_PID = 1_000_000  # memtop's GPU tracks (export.GPU_PID_BASE + index)
FRAMEWORK_PID = 2_000_000
SLACK_US = 50_000  # a kernel launched in the window may end just after it


def check_trace(path: Path) -> dict:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ev, (cap, *more) = doc["traceEvents"], doc["metadata"]["captures"]
    lo, hi = (t * 1e6 for t in cap["window_s"])
    kernels = [e for e in ev if e.get("cat") == "kernel" and e.get("pid", 0) >= FRAMEWORK_PID]
    gpu_counters = [e for e in ev if e.get("ph") == "C" and GPU_PID <= e.get("pid", 0) < FRAMEWORK_PID]
    phases = [
        e
        for e in ev
        if e.get("ph") == "X" and GPU_PID <= e.get("pid", 0) < FRAMEWORK_PID and e.get("tid") == 1
    ]
    cts = [e["ts"] for e in gpu_counters]
    out = {
        "file": path.name,
        "ranks": 1 + len(more),
        "kernels": len(kernels),
        "kernels_outside_window": sum(1 for k in kernels if not lo - SLACK_US <= k["ts"] <= hi + SLACK_US),
        "counter_names": sorted({e["name"] for e in gpu_counters}),
        "counter_samples": len(gpu_counters),
        "counters_span_window": bool(cts) and min(cts) <= lo + 2e5 and max(cts) >= hi - 2e5,
        "phase_slices": sorted(
            {e["name"] for e in phases if e["ts"] <= hi and e["ts"] + e.get("dur", 0) >= lo}
        ),
        "clock_residual_us": cap["clock_residual_us"],
        "clock_drift_us": cap["clock_drift_us"],
        "window_s": round((hi - lo) / 1e6, 3),
    }
    summary = path.with_name(path.name + ".summary.json")
    if summary.exists():
        s = json.loads(summary.read_text())
        out["sync_check"] = {k: s.get(k) for k in ("after_sync_end_us", "after_last_kernel_end_us")}
    out["ok"] = bool(
        out["kernels"]
        and out["kernels_outside_window"] == 0
        and out["counters_span_window"]
        and out["phase_slices"]
        and cap["clock_residual_us"] < 1000
        and all(v is None or v["min"] >= 0 for v in out.get("sync_check", {}).values())
    )
    return out


def step_rates(log: Path, captures: list[dict]) -> list[dict]:
    rows = [json.loads(x) for x in log.read_text().splitlines() if x.startswith('{"t"')]
    out = []
    for c in captures:
        timing = c.get("timing") or {}
        if c["outcome"] != "ok" or not timing:
            continue
        # the window began recorder_start_s + lead_s after the capture was asked (its t)
        t0 = c["t"] + timing["recorder_start_s"] + timing["lead_s"]
        t1 = t0 + timing["window_s"]
        inside = [r["steps_per_s"] for r in rows if t0 + 1 <= r["t"] <= t1]
        after = [r["steps_per_s"] for r in rows if t1 < r["t"] <= t1 + 6]
        before = [r["steps_per_s"] for r in rows if t0 - 10 <= r["t"] < t0 - 1]
        out.append(
            {
                "trigger": c["trigger"],
                "before": round(statistics.median(before), 1) if before else None,
                "inside": inside,
                "after_6s": after,
            }
        )
    return out


def main() -> None:
    d = Path(sys.argv[1])
    traces = [check_trace(p) for p in sorted(d.glob("memtop-trace-*.json.gz"))]
    meta = json.loads((d / "report.json").read_text())
    from memtop.storage.store import Recording

    captures = Recording(d / "run.memtop").meta.get("captures") or []
    res = {
        "traces": traces,
        "report_captures": meta.get("captures"),
        "took_s": [
            {"trigger": c["trigger"], "took_s": c.get("took_s"), "timing": c.get("timing")} for c in captures
        ],
        "step_rates": step_rates(d / "job.log", captures),
    }
    five = d / "t5.summary.json"
    if five.exists():
        res["headless_5s"] = json.loads(five.read_text())
    print(json.dumps(res, indent=1))
    ok = len(traces) >= 2 and all(t["ok"] for t in traces) and len(meta.get("captures") or []) >= 2
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
