"""bench/health_check.py: the figures of the device's health run, computed from the files it saves.

The energy check runs on a recording written by the real store, whose counter column repeats the last
read as the collector stores it (a read every HEALTH_EVERY_S), against a 20 Hz reader of the same
counter on the recording's clock.
"""

from __future__ import annotations

import numpy as np
import pytest
from health_check import energy_figures
from memtop.collectors.nvml import HEALTH_EVERY_S

from memtop.model import Frame, GpuSample
from memtop.store import Writer

T0 = 1.79e9  # a wall-clock second, as recordings keep time


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
        path, {"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "mode": "nvml"}]}
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
    reads = [[float(a), float(b)] for a, b in zip(rt, _counter(rt), strict=True)]
    f = energy_figures(path, reads)
    assert f["window_s"] == pytest.approx(29.9)
    assert f["counter_reads"] == 6 and f["tail_s"] == pytest.approx(4.9)
    # the counter's own rise between its first and last reads is the reader's over the same instants
    assert f["counter_rise_error_pct"] == pytest.approx(0.0, abs=0.01)
    # the report adds power x time after the last read: exact here, power being flat at idle
    assert f["report_j"] == pytest.approx(f["driver_delta_j"], rel=0.001)
    assert f["split_sum_j"] == pytest.approx(f["report_j"], abs=0.5)


def test_a_reader_on_another_clock_is_refused_not_compared(tmp_path):
    """The first version read the counter on the monotonic clock and the recording on the wall clock:
    np.interp clamped every instant to the reader's last value."""
    path = _recording(tmp_path)
    reads = [[float(t), float(e)] for t, e in zip(np.arange(0.0, 40.0, 0.05), np.arange(800), strict=True)]
    with pytest.raises(ValueError, match="miss the recording's window"):
        energy_figures(path, reads)
