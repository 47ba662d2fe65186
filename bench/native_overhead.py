"""What a one-off ``py-spy dump --native`` costs the process it reads, and what it sees there.

A target process runs a training-like step (Python work, bf16 products, then a wait for the GPU:
``torch.cuda.synchronize()``, ``.item()`` or ``.nonzero()``) and logs each step's duration. The
parent dumps it with ``--native`` every PERIOD_S seconds for half the run and not at all for the
other half: the pause is the step that held a dump minus the median step. Writes the raw dumps
(JSON, py-spy's own output) and a summary to OUTDIR.
usage: python bench/native_overhead.py OUTDIR [SECONDS] [PERIOD_S]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from memtop.collectors.stacks import find_pyspy

TARGET = r"""
import sys, time, torch
kind, secs, log = sys.argv[1], float(sys.argv[2]), sys.argv[3]
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
def step():
    s = 0
    for i in range(30000):  # Python work per step
        s += i
    x = a
    for _ in range(12):
        x = x @ a
    if kind == "sync":
        torch.cuda.synchronize()
    elif kind == "item":
        x[0, 0].float().item()
    else:
        (x[0] > 0).nonzero()
for _ in range(20):
    step()
end = time.monotonic() + secs
with open(log, "w") as fh:
    print("ready", flush=True)
    while time.monotonic() < end:
        t = time.monotonic()
        step()
        fh.write(f"{t} {time.monotonic() - t}\n")
"""


def run(kind: str, out: Path, secs: float, period: float, pyspy: str) -> dict:
    log = out / f"steps_{kind}.txt"
    p = subprocess.Popen(
        [sys.executable, "-c", TARGET, kind, str(secs), str(log)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    t_start = time.monotonic()
    dumps: list[tuple[float, float]] = []  # (start, wall)
    n = 0
    while p.poll() is None and time.monotonic() < t_start + secs - 0.5:
        if time.monotonic() - t_start < secs / 2:  # first half: no dumps
            time.sleep(0.05)
            continue
        t = time.monotonic()
        r = subprocess.run(
            [pyspy, "dump", "--json", "--native", "--pid", str(p.pid)],
            capture_output=True,
            text=True,
            env={"RUST_BACKTRACE": "0"},
        )
        dumps.append((t, time.monotonic() - t))
        if r.returncode == 0 and n < 3:
            (out / f"native_{kind}_{n}.json").write_text(r.stdout)
            n += 1
        elif r.returncode != 0:
            print(kind, "py-spy failed:", r.stderr[:300], flush=True)
        time.sleep(period)
    p.wait()
    steps = [tuple(map(float, ln.split())) for ln in log.read_text().splitlines()]
    half = t_start + secs / 2
    quiet = [d for t, d in steps if t < half]
    med = statistics.median(quiet)
    hit = []
    for t0, wall in dumps:  # the step that overlapped each dump
        over = [d for t, d in steps if t <= t0 + wall and t + d >= t0]
        if over:
            hit.append(max(over) - med)
    loud = [d for t, d in steps if t >= half]
    return {
        "kind": kind,
        "median_step_ms": round(1e3 * med, 2),
        "dumps": len(dumps),
        "dump_wall_ms_median": round(1e3 * statistics.median(w for _, w in dumps), 1) if dumps else None,
        "pause_ms_median": round(1e3 * statistics.median(hit), 1) if hit else None,
        "pause_ms_max": round(1e3 * max(hit), 1) if hit else None,
        "steps_per_s_quiet": round(len(quiet) / (secs / 2), 1),
        "steps_per_s_dumping": round(len(loud) / (secs / 2), 1),
    }


def main() -> None:
    out = Path(sys.argv[1])
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    period = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    out.mkdir(parents=True, exist_ok=True)
    pyspy = find_pyspy()
    assert pyspy, "py-spy not found"
    res = [run(k, out, secs, period, pyspy) for k in ("sync", "item", "nonzero")]
    (out / "native_overhead.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
