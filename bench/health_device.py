"""Health counters, the energy counter and the roofline estimate on a real GPU (issue 36).

usage: python bench/health_device.py OUTDIR   (on the GPU machine; bench/health_device.sh runs it)

1. CPU cost of the new NVML calls (thread time, as bench/nvml_cost.py measures).
2. Roofline: a bf16 GEMM of known FLOPs and a streaming copy of known bytes, each ~6 s, while a
   GpuReader samples GPM at 10 Hz through RecordingNvml; measured FLOP/s and GB/s against
   memtop.roofline's estimate (mean over the steady part). The first seconds of that NVML log are the
   replay fixture (tests/data/nvml_health_h100.json).
3. Energy: `memtop record` over idle, GEMM, idle while a thread reads the driver's energy counter at
   20 Hz on the same monotonic clock; the recording's counter rise against the thread's over the same
   instants, and against power integrated from the recording's samples.
Writes OUTDIR/health.json (all figures) and the fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
from memtop.collectors.nvml import NvmlCollector
from memtop.collectors.nvml_calls import RealNvml, RecordingNvml

from memtop.roofline import point


def cost(out: dict, _outdir: Path) -> None:
    nv = RealNvml()
    nv.init()

    def cpu_us(fn, n: int) -> float:
        t = time.thread_time()
        for _ in range(n):
            fn()
        return (time.thread_time() - t) / n * 1e6

    calls = {
        "health": (lambda: nv.health(0), 50),
        "energy_mj": (lambda: nv.energy_mj(0), 500),
        "xids": (lambda: nv.xids(0), 500),
        "power_mw": (lambda: nv.power_mw(0), 500),
    }
    out["cost_us"] = {}
    for name, (fn, n) in calls.items():
        try:
            out["cost_us"][name] = cpu_us(fn, n)
        except Exception as e:  # one refused call must not lose the others
            out["cost_us"][name] = repr(e)
    out["health_now"] = nv.health(0)
    out["energy_mj_now"] = nv.energy_mj(0)


class Sampler(threading.Thread):
    def __init__(self, rec: RecordingNvml) -> None:
        super().__init__(daemon=True)
        self.col = NvmlCollector(rec, 0.1, use_gpm=True)
        self.col.start()
        self.samples: list = []
        self.stop = threading.Event()

    def run(self) -> None:
        r = self.col.readers[0]
        while not self.stop.is_set():
            self.samples += [g for g in r.sample(time.monotonic()) if hasattr(g, "tensor")]
            time.sleep(0.1)


def steady(samples: list, t0: float, t1: float) -> list:
    return [g for g in samples if t0 + 1.5 <= g.t <= t1 - 0.3]


def mean(xs: list) -> float:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else float("nan")


def roofline(out: dict, outdir: Path) -> None:
    rec = RecordingNvml(RealNvml())
    s = Sampler(rec)
    s.start()
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    t0 = time.monotonic()
    iters = 0
    while time.monotonic() - t0 < 6.0:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        iters += 20
    t1 = time.monotonic()
    measured = 2 * n**3 * iters / (t1 - t0)
    gs = steady(s.samples, t0, t1)
    pts = [point(g) for g in gs]
    out["gemm"] = {
        "measured_tflops": measured / 1e12,
        "estimated_tflops": mean([p.flops for p in pts if p]) / 1e12,
        "tensor_pct": mean([g.tensor for g in gs]),
        "sm_clock_mhz": mean([g.sm_clock for g in gs]),
        "dram_pct": mean([g.dram for g in gs]),
        "samples": len(gs),
    }
    del a, b
    x = torch.empty(1 << 30, device="cuda", dtype=torch.bfloat16)  # 2 GiB
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    iters = 0
    while time.monotonic() - t0 < 6.0:
        for _ in range(10):
            y.copy_(x)
        torch.cuda.synchronize()
        iters += 10
    t1 = time.monotonic()
    measured = 2 * x.numel() * x.element_size() * iters / (t1 - t0)  # read + write
    gs = steady(s.samples, t0, t1)
    pts = [point(g) for g in gs]
    out["copy"] = {
        "measured_gbs": measured / 1e9,
        "estimated_gbs": mean([p.bandwidth for p in pts if p]) / 1e9,
        "dram_pct": mean([g.dram for g in gs]),
        "samples": len(gs),
    }
    del x, y
    s.stop.set()
    s.join()
    # the fixture: the first ~3 s (GEMM under way), with every health, energy and Xid reply
    first = next(i for i, e in enumerate(rec.log) if e["m"] == "gpm_metrics")
    rec.log = rec.log[: first + 400]
    rec.save(
        outdir / "nvml_health_h100.json",
        {"recorded": time.strftime("%Y-%m-%d %H:%M:%S"), "load": "bf16 GEMM"},
    )


def energy(out: dict, outdir: Path) -> None:
    nv = RealNvml()
    nv.init()
    reads: list[tuple[float, int]] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            reads.append((time.monotonic(), nv.energy_mj(0)))
            time.sleep(0.05)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    path = outdir / "energy.memtop"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memtop",
            "record",
            "-o",
            str(path),
            "--force",
            "--duration",
            "16",
            "--no-stacks",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=outdir,  # not the tree: `-m memtop` would import its memtop/ (no collectors) before the view's
    )
    time.sleep(4)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 7.0:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    _, err = p.communicate(timeout=60)
    stop.set()
    th.join()
    from memtop.store import Recording

    r = Recording(path)
    ((ts_all, es_all, _power),) = r.energy(r.t0, r.t1).values()
    ts, es = zip(*[(t, e) for t, e in zip(ts_all, es_all) if e is not None])  # the samples with a read
    rt = np.array([t for t, _ in reads])
    re_ = np.array([e / 1000 for _, e in reads])
    ref = float(np.interp(ts[-1], rt, re_) - np.interp(ts[0], rt, re_))
    got = es[-1] - es[0]
    pw = [(g.t, g.power_w) for f in r.frames() for g in f.gpus if g.power_w is not None]
    pw = sorted(set(pw))
    pt = np.array([t for t, _ in pw])
    pv = np.array([v for _, v in pw])
    integ = float(np.sum(np.diff(pt) * (pv[1:] + pv[:-1]) / 2))
    out["energy"] = {
        "recorded_j": got,
        "driver_counter_j": ref,
        "error_pct": 100 * (got - ref) / ref,
        "power_integral_j": integ,
        "power_integral_error_pct": 100 * (integ - ref) / ref,
        "window_s": ts[-1] - ts[0],
        "record_stderr": err.decode()[-500:],
    }
    try:
        from memtop.report import build_report

        rep = build_report(r)
        out["report_energy"] = [g.get("energy") for g in rep["gpus"]]
        out["report_health"] = [g.get("health") for g in rep["gpus"]]
    except Exception as e:  # the report part may not be built yet: the figures above stand alone
        out["report_error"] = repr(e)


def main() -> None:
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    out: dict = {"device": torch.cuda.get_device_name(0)}
    for step in (cost, roofline, energy):
        try:
            step(out, outdir)
        except Exception as e:
            out[f"{step.__name__}_error"] = repr(e)
        (outdir / "health.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
