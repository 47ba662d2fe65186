"""The figures of bench/health_device.py, computed from what it saved (no GPU, no torch: testable here).

- ``energy_figures``: a recording's energy (the report's, and the counter's own rise) against an
  independent reader of the driver's counter (nvmlDeviceGetTotalEnergyConsumption) over the same window.
- ``parse_smi`` / ``compare``: the health counters memtop read (RealNvml, just before and just after)
  against what `nvidia-smi -q` printed between the two reads.

usage: python bench/health_check.py DIR   (DIR: the device run's files) -> prints JSON and a markdown table
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

from memtop.analysis import energy
from memtop.core.model import CLOCK_EVENT_NAMES
from memtop.outputs.report import build_report
from memtop.storage.store import Recording


def energy_figures(path: Path, reads: list[list[float]]) -> dict:
    """``reads``: (t, joules) of the driver's counter, t in wall seconds (the recording's clock is the
    monotonic one: its meta's wall_offset maps the reads onto it)."""
    rec = Recording(path)
    off = float(rec.meta.get("wall_offset") or 0.0)
    series = rec.gpu_reads(rec.t0, rec.t1, ()).energy
    if len(series) != 1:
        raise ValueError(f"{path}: {len(series)} GPUs with an energy counter, expected 1")
    ((t, e, p),) = series.values()
    idx = energy.reads(e)
    ta, ea = np.asarray(t), np.asarray([np.nan if v is None else v for v in e])
    rt, rj = np.asarray([x[0] - off for x in reads]), np.asarray([x[1] for x in reads])
    t_first, t_last_read, t_end = ta[idx[0]], ta[idx[-1]], ta[-1]
    if rt[0] > t_first or rt[-1] < t_end:
        raise ValueError(f"the reference reads ({rt[0]:.1f}-{rt[-1]:.1f}) miss the recording's window")

    def ref(a: float, b: float) -> float:
        return float(np.interp(b, rt, rj) - np.interp(a, rt, rj))

    (gpu,) = build_report(rec)["gpus"]
    rep = gpu["energy"]
    pw = np.nan_to_num(np.asarray([np.nan if v is None else v for v in p]))
    keep = ta >= t_first
    integ = float(
        np.sum(np.diff(ta[keep]) * pw[keep][1:])
    )  # as memtop shares it: a sample's power x its interval
    total_ref = ref(t_first, t_end)
    rise = float(ea[idx[-1]] - ea[idx[0]])
    return {
        "window_s": float(t_end - t_first),
        "counter_reads": len(idx),
        "reference_reads": len(reads),
        "report_j": rep["joules"],
        "driver_delta_j": total_ref,
        "report_error_pct": 100 * (rep["joules"] - total_ref) / total_ref,
        "counter_rise_j": rise,
        "counter_rise_ref_j": ref(t_first, t_last_read),
        "counter_rise_error_pct": 100 * (rise - ref(t_first, t_last_read)) / ref(t_first, t_last_read),
        "tail_s": float(t_end - t_last_read),
        "power_integral_j": integ,
        "power_integral_error_pct": 100 * (integ - total_ref) / total_ref,
        "split_sum_j": sum(v["joules"] for v in rep["by_phase"].values()),
        "by_phase": {k: v["joules"] for k, v in rep["by_phase"].items()},
    }


_LINE = re.compile(r"^( *)([^:]+?)\s*(?::\s*(.*))?$")


def parse_smi(text: str) -> dict[str, str]:
    """`nvidia-smi -q` of one GPU as {"Section/Sub/Key": value}; a heading's own path maps to ""."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not line.strip() or m is None or line.lstrip().startswith("="):
            continue
        indent, key, value = len(m.group(1)), m.group(2).strip(), (m.group(3) or "").strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        out["/".join(k for _, k in stack[1:])] = value  # (the first level is "GPU 00000000:..")
    return out


def _num(v: str | None) -> int | None:
    m = re.match(r"^(\d+)", v or "")
    return int(m.group(1)) if m else None


def _first(q: dict[str, str], *paths: str) -> str | None:
    return next((q[p] for p in paths if p in q), None)


def _ecc(q: dict[str, str], kind: str, corrected: bool) -> int | None:
    """The ECC total nvmlDeviceGetTotalEccErrors gives: SRAM + DRAM (Hopper's lines) or "Total" (older)."""
    base = f"ECC Errors/{kind}"
    if corrected:
        parts = ["SRAM Correctable", "DRAM Correctable"]
        old = f"{base}/Single Bit/Total"
    else:
        parts = ["SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable"]
        old = f"{base}/Double Bit/Total"
    got = [_num(q.get(f"{base}/{p}")) for p in parts if f"{base}/{p}" in q]
    if got and all(v is not None for v in got):
        return sum(v for v in got if v is not None)
    return _num(q.get(old))


def _yes(v: str | None) -> int | None:
    return None if v in (None, "N/A") else int(v == "Yes")


_REASONS = {  # nvidia-smi's names of the clock-event reasons, as memtop.core.model names the bits
    "Idle": "gpu idle",
    "Applications Clocks Setting": "app clocks",
    "SW Power Cap": "sw power cap",
    "HW Slowdown": "hw slowdown",
    "Sync Boost": "sync boost",
    "SW Thermal Slowdown": "sw thermal",
    "HW Slowdown/HW Thermal Slowdown": "hw thermal",
    "HW Slowdown/HW Power Brake Slowdown": "hw power brake",
    "Display Clock Setting": "display clocks",
}


def _reasons(q: dict[str, str]) -> int | None:
    bits = {n: b for b, n in CLOCK_EVENT_NAMES.items()}
    for sec in ("Clocks Event Reasons", "Clocks Throttle Reasons"):
        if sec in q:
            return sum(bits[n] for k, n in _REASONS.items() if q.get(f"{sec}/{k}") == "Active")
    return None


def smi_values(q: dict[str, str]) -> dict[str, int | None]:
    """What `nvidia-smi -q` says for each counter memtop reads (None: nvidia-smi has no such line or N/A)."""
    link = "PCI/GPU Link Info"
    return {
        "ecc_sbe_volatile": _ecc(q, "Volatile", True),
        "ecc_dbe_volatile": _ecc(q, "Volatile", False),
        "ecc_sbe_aggregate": _ecc(q, "Aggregate", True),
        "ecc_dbe_aggregate": _ecc(q, "Aggregate", False),
        "retired_sbe": _num(q.get("Retired Pages/Single Bit ECC")),
        "retired_dbe": _num(q.get("Retired Pages/Double Bit ECC")),
        "retired_pending": _yes(q.get("Retired Pages/Pending Page Blacklist")),
        "remap_correctable": _num(q.get("Remapped Rows/Correctable Error")),
        "remap_uncorrectable": _num(q.get("Remapped Rows/Uncorrectable Error")),
        "remap_pending": _yes(q.get("Remapped Rows/Pending")),
        "remap_failure": _yes(q.get("Remapped Rows/Remapping Failure Occurred")),
        "pcie_replay": _num(q.get("PCI/Replays Since Reset")),
        "link_gen": _num(q.get(f"{link}/PCIe Generation/Current")),
        "link_max_gen": _num(q.get(f"{link}/PCIe Generation/Max")),
        "link_width": _num(q.get(f"{link}/Link Width/Current")),
        "link_max_width": _num(q.get(f"{link}/Link Width/Max")),
        "clock_events": _reasons(q),
        "violation_power_us": _num(
            _first(
                q, "Clocks Event Reasons Counters/SW Power Capping", "Clocks Event Counters/SW Power Capping"
            )
        ),
        "violation_thermal_us": _num(
            _first(
                q,
                "Clocks Event Reasons Counters/HW Thermal Slowdown",
                "Clocks Event Counters/HW Thermal Slowdown",
            )
        ),
    }


def memtop_values(r: dict) -> dict[str, int | None]:
    """The same counters from memtop's own reads (RealNvml: health, link, clock_events)."""
    h, lk = r["health"], r["link"]
    out: dict[str, int | None] = {k: h.get(k) for k in smi_values({}) if k in h}
    out.update(
        link_gen=lk["gen"],
        link_max_gen=lk["max_gen"],
        link_width=lk["width"],
        link_max_width=lk["max_width"],
        clock_events=r["clock_events"] & sum(CLOCK_EVENT_NAMES),  # the bits both name
    )
    for k in ("power", "thermal"):
        ns = h.get(f"violation_{k}_ns")
        out[f"violation_{k}_us"] = None if ns is None else ns // 1000
    return out


def compare(before: dict, text: str, after: dict) -> list[dict]:
    """One row per counter: memtop's read before and after `nvidia-smi -q` ran, and what it printed.
    Agree: nvidia-smi's value lies between memtop's two reads (equal when the counter did not move),
    or both lack it."""
    smi = smi_values(parse_smi(text))
    a, b = memtop_values(before), memtop_values(after)
    rows = []
    for k, s in smi.items():
        lo, hi = a.get(k), b.get(k)
        if s is None or lo is None or hi is None:
            ok = s is None and lo is None and hi is None
        elif k == "clock_events":
            ok = s in (lo, hi)
        else:
            ok = min(lo, hi) <= s <= max(lo, hi)
        rows.append({"counter": k, "memtop_before": lo, "nvidia_smi": s, "memtop_after": hi, "agree": ok})
    return rows


def table(rows: list[dict]) -> str:
    def cell(v: object) -> str:
        return "—" if v is None else str(v)

    lines = ["| counter | memtop before | nvidia-smi -q | memtop after | |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['counter']} | {cell(r['memtop_before'])} | {cell(r['nvidia_smi'])} | "
            f"{cell(r['memtop_after'])} | {'agree' if r['agree'] else '**disagree**'} |"
        )
    return "\n".join(lines)


def main() -> None:
    d = Path(sys.argv[1])
    out: dict = {}
    reads = json.loads((d / "energy_reads.json").read_text())
    out["energy"] = energy_figures(d / "energy.memtop", reads)
    for tag in ("before", "after"):
        r = json.loads((d / f"memtop_{tag}.json").read_text())
        out[f"smi_{tag}"] = compare(r["a"], (d / f"smi_{tag}.txt").read_text(), r["b"])
    print(json.dumps(out, indent=1))
    for tag in ("before", "after"):
        print(f"\n{tag}:\n" + table(out[f"smi_{tag}"]))


if __name__ == "__main__":
    main()
