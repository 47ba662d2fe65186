"""memtop's readings vs nvidia-smi on the same H100 run (seed 0): per phase, middle 5 s.

nvidia-smi dmon --gpm-metrics 1,2,3,5,10,20,21 -d 1 -o DT and --query-gpu=memory.used,power.draw
ran beside `memtop record` (bench/device_run.sh, step seed0). Prints a markdown table.
usage: python bench/compare_smi.py
"""

from __future__ import annotations

import calendar
import statistics
import time
from pathlib import Path

from memtop.storage.store import Recording

ROOT = Path(__file__).parent.parent
PHASES = ("compute", "memory", "h2d_pinned", "d2h_pinned", "idle")


def _wall(date: str, clock: str) -> float:
    return calendar.timegm(time.strptime(f"{date} {clock}", "%Y%m%d %H:%M:%S"))  # the device runs in UTC


def dmon_rows() -> list[dict]:
    rows = []
    for line in (ROOT / "bench/data/dmon_s0.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        if len(f) < 21 or "-" in f[14:21]:
            continue
        rows.append(
            {
                "t": _wall(f[0], f[1]),
                "smutil": float(f[15]),
                "dram": float(f[18]),
                "pcitx": float(f[19]) * 2**20,
                "pcirx": float(f[20]) * 2**20,
                "gract": float(f[14]),
            }
        )
    return rows


def smi_rows() -> list[dict]:
    rows = []
    for line in (ROOT / "bench/data/smi_s0.csv").read_text().splitlines():
        ts, mem, pw = (x.strip() for x in line.split(","))
        t = calendar.timegm(time.strptime(ts.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float(
            "0." + ts.split(".")[1]
        )
        rows.append({"t": t, "mem_mib": float(mem.split()[0]), "power": float(pw.split()[0])})
    return rows


def main() -> None:
    rec = Recording(ROOT / "tests/data/labelled_s0.memtop")
    off = rec.meta["wall_offset"]
    dm, sm = dmon_rows(), smi_rows()
    print(
        "| phase | SM % memtop / dmon | DRAM % memtop / dmon | PCIe RX GB/s memtop / dmon | PCIe TX GB/s memtop / dmon "
        "| power W memtop / smi | memory MiB memtop / smi |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in PHASES:
        m = next(m for m in rec.markers() if m.name == name)
        a, b = m.t0 + 1.0, m.t1 - 1.0
        gs = [f.gpus[0] for f in rec.frames(a, b) if f.gpus]
        seen = {g.t: g for g in gs}.values()
        # a dmon row stamped s (whole seconds) covers the second before s
        d = [r for r in dm if a + off + 1 <= r["t"] <= b + off]
        s = [r for r in sm if a + off <= r["t"] <= b + off]

        def mean(xs):
            xs = [x for x in xs if x is not None]
            return statistics.mean(xs) if xs else float("nan")

        print(
            f"| {name} | {mean(g.sm for g in seen):.1f} / {mean(r['smutil'] for r in d):.1f} "
            f"| {mean(g.dram for g in seen):.1f} / {mean(r['dram'] for r in d):.1f} "
            f"| {mean(g.pcie_rx for g in seen) / 1e9:.2f} / {mean(r['pcirx'] for r in d) / 1e9:.2f} "
            f"| {mean(g.pcie_tx for g in seen) / 1e9:.2f} / {mean(r['pcitx'] for r in d) / 1e9:.2f} "
            f"| {mean(g.power_w for g in seen):.0f} / {mean(r['power'] for r in s):.0f} "
            f"| {mean(g.mem_used for g in seen) / 2**20:.0f} / {mean(r['mem_mib'] for r in s):.0f} |"
        )


if __name__ == "__main__":
    main()
