"""bench/health_check.py: the figures of the device's health run, computed from the files it saves.

The energy check runs on a recording written by the real store, whose counter column repeats the last
read as the collector stores it (a read every HEALTH_EVERY_S), against a 20 Hz reader of the same
counter on the recording's clock.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import DATA
from health_check import compare, energy_figures, table
from memtop.collectors.nvml import HEALTH_EVERY_S

from memtop.core.model import Frame, GpuSample
from memtop.storage.store import Writer

T0 = 42.5  # the recording's clock: monotonic seconds (since boot)
WALL = 1.79e9  # its meta's wall_offset: wall = t + WALL


def _power(t: np.ndarray) -> np.ndarray:
    """Idle, a GEMM from 6 s to 20 s, idle again (W)."""
    return np.where((t - T0 >= 6.0) & (t - T0 < 20.0), 690.0, 75.0)


def _counter(t: np.ndarray) -> np.ndarray:
    """The driver's counter (J): power integrated exactly, from 5 kJ at the start."""
    fine = np.arange(T0 - 1.0, T0 + 40.0, 0.001)
    return np.interp(t, fine, 5000.0 + np.cumsum(_power(fine)) * 0.001)


def _recording(tmp_path, seconds: float = 30.0):
    t = T0 + np.arange(0.0, seconds, 0.1)
    read_at = t[np.searchsorted(t, T0 + np.arange(0.0, seconds, HEALTH_EVERY_S))]
    last = _counter(read_at)[np.searchsorted(read_at, t, side="right") - 1]  # the last read, repeated
    path = tmp_path / "e.memtop"
    w = Writer(
        path,
        {
            "wall_offset": WALL,
            "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "mode": "nvml"}],
        },
    )
    for ti, p, e in zip(t, _power(t), last, strict=True):
        g = GpuSample(
            float(ti),
            0,
            "GPU-1",
            "NVIDIA H100 80GB HBM3",
            "nvml",
            util=50.0,
            mem_used=1 << 30,
            mem_total=80 << 30,
            power_w=float(p),
            energy_j=float(e),
        )
        w.add(Frame(float(ti), gpus=(g,)))
    w.close()
    return path


def test_energy_figures_compare_the_recording_with_the_reader_over_the_same_window(tmp_path):
    path = _recording(tmp_path)
    rt = T0 - 0.5 + np.arange(0.0, 31.0, 0.05)
    reads = [[float(a) + WALL, float(b)] for a, b in zip(rt, _counter(rt), strict=True)]  # wall seconds
    f = energy_figures(path, reads)
    assert f["window_s"] == pytest.approx(29.9)
    assert f["counter_reads"] == 6 and f["tail_s"] == pytest.approx(4.9)
    # the counter's own rise between its first and last reads is the reader's over the same instants
    assert f["counter_rise_error_pct"] == pytest.approx(0.0, abs=0.01)
    # the report adds power x time after the last read: exact here, power being flat at idle
    assert f["report_j"] == pytest.approx(f["driver_delta_j"], rel=0.001)
    assert f["split_sum_j"] == pytest.approx(f["report_j"], abs=0.5)


def test_a_reader_on_another_clock_is_refused_not_compared(tmp_path):
    """Reads on the monotonic clock of another process (not wall seconds) would be clamped by np.interp
    to the reader's first or last value: refused instead."""
    path = _recording(tmp_path)
    rt = 1000.0 + np.arange(0.0, 40.0, 0.05)
    reads = [[float(t), float(e)] for t, e in zip(rt, np.arange(800), strict=True)]
    with pytest.raises(ValueError, match="miss the recording's window"):
        energy_figures(path, reads)


H200 = DATA.parent.parent / "bench/data/health_h200"  # bench/health_device.sh on the lent H200, 2026-11-28


def test_the_device_run_meets_the_energy_target():
    """The recording and the 20 Hz reads the H200 gave: the report's energy within 1 % of the
    driver counter's rise over the same window, and its split by phase sums to it."""
    f = energy_figures(H200 / "energy.memtop", json.loads((H200 / "energy_reads.json").read_text()))
    assert abs(f["report_error_pct"]) < 1.0 and f["window_s"] > 29
    assert f["split_sum_j"] == pytest.approx(f["report_j"], abs=0.5)
    assert f["by_phase"]["compute"] > f["by_phase"]["idle"] > 0


@pytest.mark.parametrize("tag", ["before", "after"])
def test_every_health_counter_agrees_with_nvidia_smi_on_the_device(tag):
    r = json.loads((H200 / f"memtop_{tag}.json").read_text())
    rows = compare(r["a"], (H200 / f"smi_{tag}.txt").read_text(), r["b"])
    assert [x["counter"] for x in rows if not x["agree"]] == []
    got = {x["counter"]: x["nvidia_smi"] for x in rows}
    # the lines were found, not all missing alike: this H200 has one PCIe replay, a Gen5 x16 link
    assert (got["pcie_replay"], got["link_gen"], got["link_width"], got["remap_pending"]) == (1, 5, 16, 0)
    assert got["retired_sbe"] is None  # Hopper remaps rows: "N/A", and memtop has no such counter


def test_a_counter_nvidia_smi_prints_otherwise_is_a_disagreement():
    r = json.loads((H200 / "memtop_after.json").read_text())
    text = (H200 / "smi_after.txt").read_text()
    text = text.replace("Replays Since Reset                            : 1", "Replays Since Reset : 3")
    text = text.replace(
        "SW Power Capping                               : 14225734 us", "SW Power Capping : 9 us"
    )
    rows = compare(r["a"], text, r["b"])
    assert sorted(x["counter"] for x in rows if not x["agree"]) == ["pcie_replay", "violation_power_us"]
    assert "| pcie_replay | 1 | 3 | 1 | **disagree** |" in table(rows)
