"""Real NVML on a real GPU (marker gpu: skipped with a reason where there is none)."""

from __future__ import annotations

import subprocess
import time

import pytest
from memtop.collectors.nvml import NvmlCollector

from memtop.model import GpuSample

pytestmark = pytest.mark.gpu


def _smi(query: str) -> list[float]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [float(x) for x in out.splitlines()[0].split(",")]


def test_real_nvml_samples_agree_with_nvidia_smi():
    col = NvmlCollector()
    col.start()
    assert col.readers, col.caps
    r = col.readers[0]
    samples = []
    for _ in range(12):
        samples.extend(p for p in r.sample(time.monotonic()) if isinstance(p, GpuSample))
        time.sleep(0.1)
    mem_used_mib, power_w = _smi("memory.used,power.draw")
    g = samples[-1]
    assert g.mode in ("gpm", "nvml")
    assert g.link is not None and g.link.bytes_per_s > 1e9
    assert abs(g.mem_used / 2**20 - mem_used_mib) <= max(0.05 * mem_used_mib, 64)
    assert abs(g.power_w - power_w) <= max(0.05 * power_w, 10)
    if g.mode == "gpm":
        assert all(s.sm is not None for s in samples[2:])
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
