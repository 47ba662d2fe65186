"""Real NVML on a real GPU (marker gpu: skipped with a reason where there is none)."""

from __future__ import annotations

import subprocess
import time

import pytest
from memtop.collectors.nvml import NvmlCollector

from memtop.core.model import GpuSample

pytestmark = pytest.mark.gpu


def _smi(query: str) -> list[list[float]]:
    """nvidia-smi's figures, one row per GPU in index order."""
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [[float(x) for x in row.split(",")] for row in out.splitlines()]


def test_real_nvml_samples_agree_with_nvidia_smi():
    """Every GPU of the machine (two on a two-GPU kind), each against its own nvidia-smi row."""
    col = NvmlCollector()
    col.start()
    assert col.readers, col.caps
    assert [r.index for r in col.readers] == list(range(len(_smi("index"))))
    samples: dict[int, list[GpuSample]] = {r.index: [] for r in col.readers}
    for _ in range(12):
        for r in col.readers:
            samples[r.index].extend(p for p in r.sample(time.monotonic()) if isinstance(p, GpuSample))
        time.sleep(0.1)
    smi = _smi("memory.used,power.draw")
    for i, got in samples.items():
        mem_used_mib, power_w = smi[i]
        g = got[-1]
        assert g.index == i
        assert g.mode in ("gpm", "nvml")
        assert g.link is not None and g.link.bytes_per_s > 1e9
        assert abs(g.mem_used / 2**20 - mem_used_mib) <= max(0.05 * mem_used_mib, 64), i
        assert abs(g.power_w - power_w) <= max(0.05 * power_w, 10), i
        if g.mode == "gpm":
            assert all(s.sm is not None for s in got[2:]), i
    col.stop()


def test_sample_buffers_drain_gap_free():
    col = NvmlCollector()
    col.start()
    r = col.readers[0]
    time.sleep(1.2)
    first = r.drain()
    time.sleep(1.2)
    second = r.drain()
    power = [c for c in first + second if c.metric == "power_w"]
    ts = [t for c in power for t in c.t]
    assert len(ts) >= 40  # 50 Hz power buffer on the H100
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    col.stop()
