"""Health counters, the energy counter and the roofline estimate on a real GPU (issue 36).

usage: python bench/health_device.py OUTDIR [STEP ...]   (on the GPU machine; bench/health_device.sh)
STEP: cost, roofline, smi_before, energy, smi_after (default: all, in that order).

- cost: CPU cost of the new NVML calls (thread time, as bench/nvml_cost.py measures).
- roofline: a bf16 GEMM of known FLOPs and a streaming copy of known bytes, each ~6 s, while a
  GpuReader samples GPM at 10 Hz through RecordingNvml; measured FLOP/s and GB/s against
  memtop.analysis.roofline's estimate (mean over the steady part). The first seconds of that NVML log are the
  replay fixture (tests/data/nvml_health_h100.json).
- smi_before / smi_after: every health counter memtop reads (RealNvml), then `nvidia-smi -q`, then the
  counters again; bench/health_check.py compares them.
- energy: `memtop record` 30 s over idle, GEMM, idle while a thread reads the driver's energy counter at
  20 Hz on the recording's clock; bench/health_check.energy_figures compares the report's energy and
  the counter's rise with that reader over the same window.
Writes OUTDIR/health.json (all figures) and the raw files health_check.py reads.
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

from memtop.analysis.roofline import point


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


def memtop_reads(nv: RealNvml) -> dict:
    """Every counter memtop reads for a GPU's health, as RealNvml gives them."""
    return {
        "t": time.time(),
        "health": nv.health(0),
        "link": nv.link(0),
        "clock_events": nv.clock_events(0),
        "xids": nv.xids(0),
        "energy_mj": nv.energy_mj(0),
    }


def smi(tag: str, out: dict, outdir: Path) -> None:
    """memtop's reads, then `nvidia-smi -q` (and its PERFORMANCE section), then memtop's reads again."""
    nv = RealNvml()
    nv.init()
    a = memtop_reads(nv)
    q = subprocess.run(["nvidia-smi", "-q", "-i", "0"], capture_output=True, text=True, timeout=60)
    b = memtop_reads(nv)
    (outdir / f"smi_{tag}.txt").write_text(q.stdout + q.stderr)
    (outdir / f"memtop_{tag}.json").write_text(json.dumps({"a": a, "b": b}, default=str))
    perf = subprocess.run(
        ["nvidia-smi", "-q", "-i", "0", "-d", "PERFORMANCE,ECC,PAGE_RETIREMENT,ROW_REMAPPER"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    (outdir / f"smi_{tag}_sections.txt").write_text(perf.stdout + perf.stderr)
    from health_check import compare

    out[f"smi_{tag}"] = compare(a, q.stdout, b)


def energy(out: dict, outdir: Path) -> None:
    """`memtop record` over idle, a bf16 GEMM, idle, while a thread reads the driver's energy counter
    at 20 Hz in wall seconds (health_check maps them onto the recording's clock by its wall_offset)."""
    nv = RealNvml()
    nv.init()
    off = time.time() - time.monotonic()
    reads: list[tuple[float, float]] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            t = time.monotonic()
            mj = nv.energy_mj(0)
            reads.append(((t + time.monotonic()) / 2 + off, mj / 1000.0))  # the call's midpoint
            time.sleep(0.05)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    time.sleep(0.5)
    path = outdir / "energy.memtop"
    cmd = [sys.executable, "-m", "memtop", "record", "-o", str(path), "--force", "--duration", "30"]
    # cwd: not the tree, whose memtop/ (no collectors) would shadow the view
    p = subprocess.Popen([*cmd, "--no-stacks"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=outdir)
    time.sleep(6)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 14.0:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    del a
    _, err = p.communicate(timeout=60)
    time.sleep(0.5)
    stop.set()
    th.join()
    (outdir / "energy_reads.json").write_text(json.dumps(reads))
    out["record_stderr"] = err.decode()[-500:]
    from health_check import energy_figures

    out["energy"] = energy_figures(path, [list(r) for r in reads])


def main() -> None:
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    out: dict = {"device": torch.cuda.get_device_name(0)}
    steps = {
        "cost": cost,
        "roofline": roofline,
        "smi_before": lambda o, d: smi("before", o, d),
        "energy": energy,
        "smi_after": lambda o, d: smi("after", o, d),
    }
    for name in sys.argv[2:] or list(steps):
        try:
            steps[name](out, outdir)
        except Exception as e:  # one failed step must not lose the others' figures
            out[f"{name}_error"] = repr(e)
        (outdir / "health.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
