"""Time memtop's side of a capture (parse, align, merge and write) on a synthetic PyTorch trace of
Kineto's layout and a real busy loop's size and shape (the H200's 5 s capture of 2026-11-28:
654 882 events, 316k CPU ops, 142k flow events, 68k runtime calls, 55k kernels), or on a real
trace file. Runs against whichever memtop is first on sys.path (main's or a branch's).

usage: trace_merge_bench.py [--events N] [--no-cpu-ops] [--trace FILE.json] [--recording R.memtop]
                            [--keep OUT.json.gz]
prints one JSON line: bytes, events, parse_s, merge_s, total_s, workers.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import sys
import tempfile
import time
from pathlib import Path

MARK = "memtop.clock."
PID, BASE_US = 4242, 1_764_000_000_000_000.0  # the job's pid; CLOCK_REALTIME µs as Kineto's


def _event(ph: str, cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: dict) -> str:
    """One event as Kineto's ChromeTraceLogger lays it out (one line per field group)."""
    body = ",".join(f"\n      {json.dumps(k)}: {json.dumps(v)}" for k, v in args.items())
    return (
        f'  {{\n    "ph": "{ph}", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{{body}\n    }}\n  }}'
    )


def _flow(ph: str, fid: int, pid: int, tid: int, ts: float) -> str:
    bp = ', "bp": "e"' if ph == "f" else ""
    return (
        f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {ts:.3f},\n'
        f'    "cat": "ac2g", "name": "ac2g"{bp}\n  }}'
    )


def synthetic(steps: int, cpu_ops: bool, mono_offset_us: float) -> tuple[bytes, dict]:
    """A trace of ``steps`` training steps (12 kernels each) and the agent's answer head."""
    rnd = random.Random(7)
    out, marks, corr = [], [], 0
    t = BASE_US
    for k in range(3):  # memtop's marks at the start (and 3 at the end, below)
        a = int((t - mono_offset_us) * 1000)
        out.append(_event("X", "user_annotation", f"{MARK}{k}", PID, PID + 1, t + 1, 2.0, {"External id": k}))
        marks.append([f"{MARK}{k}", a, a + 4000])
        t += 10
    for _ in range(steps):
        for i in range(12):
            corr += 1
            if cpu_ops:
                for j in range(2):
                    out.append(
                        _event(
                            "X",
                            "cpu_op",
                            f"aten::op{j}_{i}",
                            PID,
                            PID,
                            t,
                            3.1,
                            {"External id": corr * 3 + j, "Record function id": 0, "Ev Idx": corr},
                        )
                    )
                    t += 3.5
            out.append(
                _event(
                    "X",
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    PID,
                    PID,
                    t,
                    4.2,
                    {"External id": corr, "cbid": 211, "correlation": corr},
                )
            )
            g = t + 20 + rnd.random() * 10
            out.append(
                _event(
                    "X",
                    "kernel",
                    f"void gemm_kernel_{i}<float, 128, 64>(Params)",
                    0,
                    7,
                    g,
                    12.5,
                    {
                        "External id": corr,
                        "queued": 0,
                        "device": 0,
                        "context": 1,
                        "stream": 7,
                        "correlation": corr,
                        "registers per thread": 128,
                        "shared memory": 49152,
                        "blocks per SM": 1.5,
                        "warps per SM": 12.0,
                        "grid": [132, 1, 1],
                        "block": [384, 1, 1],
                        "est. achieved occupancy %": 19,
                    },
                )
            )
            out.append(_flow("s", corr, PID, PID, t))
            out.append(_flow("f", corr, 0, 7, g))
            t += 5
        if cpu_ops:
            out.append(_event("X", "user_annotation", "Optimizer.step#Adam.step", PID, PID, t, 50.0, {}))
        corr += 1
        out.append(_event("X", "cuda_driver", "cuLaunchKernel", PID, PID, t, 3.0, {"correlation": corr}))
        out.append(
            _event(
                "X",
                "gpu_memcpy",
                "Memcpy HtoD (Pageable -> Device)",
                0,
                7,
                t + 30,
                2.0,
                {
                    "device": 0,
                    "stream": 7,
                    "correlation": corr,
                    "bytes": 4096,
                    "memory bandwidth (GB/s)": 2.0,
                },
            )
        )
    for k in range(3, 6):
        a = int((t - mono_offset_us) * 1000)
        out.append(_event("X", "user_annotation", f"{MARK}{k}", PID, PID + 1, t + 1, 2.0, {"External id": k}))
        marks.append([f"{MARK}{k}", a, a + 4000])
        t += 10
    meta = [
        f'  {{\n    "name": "process_name", "ph": "M", "ts": {BASE_US:.3f}, "pid": {p}, "tid": 0,\n'
        f'    "args": {{\n      "name": "{n}"\n    }}\n  }}'
        for p, n in ((PID, "python3"), (0, "GPU 0"))
    ]
    end = f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": {t:.3f}\n  }}'
    doc = (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, "name": "NVIDIA H100"\n    }\n  ],\n'
        f'  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {int(BASE_US * 1000)},\n  "traceEvents": [\n'
        + ",\n".join([*meta, *out, end])
        + '\n],\n  "traceName": "/tmp/x.json"\n}'
    )
    head = {
        "framework": "torch",
        "version": "synthetic",
        "clock": marks,
        "window": [0.0, 5.0],
        "steps": steps,
        "warnings": [],
    }
    return doc.encode(), head


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=654_882, help="about this many events (synthetic)")
    ap.add_argument("--no-cpu-ops", action="store_true")
    ap.add_argument("--trace", help="a real trace (with its head as FILE.head.json)")
    ap.add_argument("--recording", default=str(Path(__file__).parents[1] / "tests/data/h100_labelled.memtop"))
    ap.add_argument("--keep", help="keep the merged file here")
    ap.add_argument("--workers", type=int, help="this many parsing processes (default: memtop's choice)")
    a = ap.parse_args()
    from memtop.agent import merge

    if a.trace:
        payload = Path(a.trace).read_bytes()
        head = json.loads(Path(a.trace + ".head.json").read_text())
    else:
        per_step = 61 if not a.no_cpu_ops else 37  # events per step (see synthetic)
        payload, head = synthetic(max(1, a.events // per_step), not a.no_cpu_ops, 1.7e15)
    new = "workers" in inspect.signature(merge.Capture.parse).parameters
    workers = []
    t0 = time.monotonic()
    if new:
        from memtop.agent.chunks import reap_all, start_workers

        workers = start_workers(a.workers)
        time.sleep(1.0)  # (their start is hidden in the capture's window)
    t1 = time.monotonic()
    cap = merge.Capture.parse(PID, head, payload, *([workers] if new else []))
    al = merge.align(cap)
    t2 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        out = Path(a.keep) if a.keep else Path(d) / "m.json.gz"
        rec = Path(a.recording)
        n, summary = merge.write_merged(rec, [(cap, al)], out, True)
        t3 = time.monotonic()
        size = out.stat().st_size
    if new:
        cap.close()
        reap_all(workers)
    print(
        json.dumps(
            {
                "bytes": len(payload),
                "events": n,
                "framework_events": summary.get("framework_events"),
                "kernel": summary.get("kernel"),
                "parse_s": round(t2 - t1, 3),
                "merge_s": round(t3 - t2, 3),
                "total_s": round(t3 - t1, 3),
                "out_bytes": size,
                "workers": len(workers),
                "residual_us": round(al.residual_us, 3),
                "startup_s": round(t1 - t0, 3),
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
