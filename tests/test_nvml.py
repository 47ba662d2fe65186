"""The NVML collector's logic on real H100 answers (recorded calls), and its arithmetic."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from memtop.collectors.nvml import GpuReader, NvmlCollector, SampleDrain, link_bytes_per_s
from memtop.collectors.nvml_calls import NvmlCallError, NvmlUnavailable, ReplayNvml

from memtop.core.model import CapState, GpuSample, SeriesChunk

FIXTURE = DATA / "nvml_h100.json"


def _collector(use_gpm: bool = True) -> NvmlCollector:
    col = NvmlCollector(ReplayNvml.load(FIXTURE), 0.1, use_gpm=use_gpm, offset=0.0)
    col.start()
    return col


@pytest.mark.parametrize(
    ("gen", "width", "gbps"),
    [(1, 16, 4.0), (2, 16, 8.0), (3, 16, 15.75), (4, 16, 31.5), (5, 16, 63.0), (5, 8, 31.5), (4, 4, 7.88)],
)
def test_link_capacity_per_generation(gen, width, gbps):
    assert link_bytes_per_s(gen, width) / 1e9 == pytest.approx(gbps, rel=0.01)


def test_link_capacity_prefers_the_reported_speed():
    # nvmlDeviceGetPcieSpeed said 32000 MT/s on the H100 (Gen5)
    assert link_bytes_per_s(5, 16, 32000) == pytest.approx(63.0e9, rel=0.001)


def test_gpm_mode_on_recorded_h100_answers():
    col = _collector()
    assert [c.ok for c in col.caps] == [True]
    (r,) = col.readers
    assert r.gpm and r.info["name"] == "NVIDIA H100 80GB HBM3"
    gs = [p for _ in range(20) for p in r.sample(1000.0) if isinstance(p, GpuSample)]
    busy = [g for g in gs if g.sm is not None]
    assert busy, "GPM metrics were replayed"
    # the fixture was recorded under a bf16 matmul load
    assert max(g.sm for g in busy) > 80 and max(g.tensor for g in busy) > 60
    g = gs[-1]
    assert g.mode == "gpm" and g.link is not None and g.link.gen == 5 and g.link.width == 16
    assert not g.link.downtrained
    assert g.power_w > 100 and g.mem_total > 80e9 and g.processes


def test_nvml_only_mode_reads_pcie_throughput():
    col = _collector(use_gpm=False)
    (r,) = col.readers
    assert not r.gpm and r.interval >= 0.2
    g = next(p for p in r.sample(5.0) if isinstance(p, GpuSample))
    assert g.mode == "nvml" and g.sm is None and g.pcie_rx is not None and g.pcie_tx is not None
    cap = next(c for c in r.capabilities() if c.source == "gpm")
    assert cap.state is CapState.UNSUPPORTED and "disabled" in cap.detail


def test_drain_returns_new_samples_only_in_order():
    d = SampleDrain("power_w", 1e-3)
    t, v = d.take([(2_000_000, 100_000.0), (1_000_000, 90_000.0)], offset=0.0)
    assert t == (1.0, 2.0) and v == (90.0, 100.0)
    t2, v2 = d.take([(2_000_000, 100_000.0), (3_000_000, 110_000.0)], offset=0.5)
    assert t2 == (2.5,) and v2 == (110.0,)
    assert d.take([(3_000_000, 1.0)], offset=0.0) == ((), ())


def test_drained_h100_buffers_are_gap_free_series():
    log = json.loads(FIXTURE.read_text())["calls"]
    power = [e for e in log if e["m"] == "samples" and e["a"][1] == "power_w" and "r" in e]
    assert power
    col = _collector()
    (r,) = col.readers
    for d in r._drains:
        d.last_us = 0
    ts, vs = [], []
    for _ in range(3):  # drained across calls, as the collector does each second
        for c in r.drain():
            if isinstance(c, SeriesChunk) and c.metric == "power_w":
                ts += c.t
                vs += c.v
    steps = [b - a for a, b in zip(ts, ts[1:])]
    assert len(ts) > 20 and min(steps) > 0 and max(steps) < 0.05  # 50 Hz buffer, ordered, no holes
    assert all(50 < w < 1000 for w in vs)  # H100 SXM peaks near 780 W under matmul


class _Counting(ReplayNvml):
    def __init__(self) -> None:
        super().__init__(json.loads(FIXTURE.read_text())["calls"])
        self.drains = 0

    def samples(self, i, kind, since_us):
        self.drains += 1
        return super().samples(i, kind, since_us)


@pytest.mark.parametrize("series", [True, False])
def test_sample_buffers_are_drained_only_for_a_recording(series):
    nv = _Counting()
    col = NvmlCollector(nv, 0.1, offset=0.0, series=series)
    col.start()
    (r,) = col.readers
    parts = [p for k in range(30) for p in r.sample(1000.0 + 0.1 * k)]  # 3 s at 10 Hz
    assert (nv.drains > 0) is series
    assert any(isinstance(p, SeriesChunk) for p in parts) is series
    assert sum(isinstance(p, GpuSample) for p in parts) == 30


def _Failing(code: int, method: str) -> ReplayNvml:
    """The recorded H100, except that one call fails with this NVML error code."""
    nv = ReplayNvml.load(FIXTURE)

    def fail(*a):
        raise NvmlCallError(code, f"{method} failed ({code})")

    setattr(nv, method, fail)
    return nv


def test_one_failing_call_marks_that_metric_and_the_collector_goes_on():
    col = NvmlCollector(_Failing(999, "power_mw"), offset=0.0)
    col.start()
    (r,) = col.readers
    g = next(p for p in r.sample(1.0) if isinstance(p, GpuSample))
    assert g.power_w is None and g.util is not None
    assert any(c.name.endswith("power") and c.state is CapState.ERROR for c in r.capabilities())


def test_a_lost_gpu_is_marked_lost():
    col = NvmlCollector(_Failing(15, "utilization"), offset=0.0)
    col.start()
    (r,) = col.readers
    g = next(p for p in r.sample(1.0) if isinstance(p, GpuSample))
    assert g.mode == "lost"
    assert any("lost" in c.detail for c in r.capabilities())


def test_no_driver_is_a_capability_not_a_traceback():
    class NoDriver:
        def init(self):
            raise NvmlUnavailable("NVIDIA driver not found (libnvidia-ml.so.1)")

        def shutdown(self):
            pass

    col = NvmlCollector(NoDriver())
    col.start()
    assert col.readers == []
    (cap,) = col.caps
    assert cap.state is CapState.UNSUPPORTED and "libnvidia-ml.so.1" in cap.detail and "--demo" in cap.fix


def test_real_driver_absent_here_gives_the_same_message():
    from conftest import HAS_GPU

    if HAS_GPU:
        pytest.skip("a GPU is present")
    col = NvmlCollector()
    col.start()
    assert col.caps[0].detail.startswith("NVIDIA driver not found") or "NVML" in col.caps[0].detail


def test_reader_handles_mig():
    r = GpuReader(
        ReplayNvml.load(FIXTURE),
        0,
        {"name": "x", "uuid": "u", "mig": True},
        False,
        "MIG is enabled",
        0.2,
        0.0,
    )
    assert "MIG" in r.capabilities()[0].detail


def test_recorded_link_reads_as_people_write_it():
    from memtop.collectors.nvml import pcie_link

    lk = pcie_link(ReplayNvml.load(FIXTURE).link(0))
    assert (lk.text, lk.max_text, lk.downtrained) == ("Gen5 x16", "Gen5 x16", False)
    assert lk.bytes_per_s == pytest.approx(63.0e9, rel=0.001)
    slow = pcie_link({"gen": 4, "width": 8, "max_gen": 5, "max_width": 16, "speed_mts": None})
    assert slow.downtrained and slow.text == "Gen4 x8" and slow.max_text == "Gen5 x16"


def test_gpm_replies_map_to_fields_by_the_metric_table():
    """Each recorded GPM reply lands in the GpuSample field its NVML id names, MiB/s as bytes/s."""
    log = json.loads(FIXTURE.read_text())["calls"]
    replies = [e["r"] for e in log if e["m"] == "gpm_metrics" and e.get("r")]
    col = _collector()
    (r,) = col.readers
    gs = [p for _ in replies for p in r.sample(1000.0) if isinstance(p, GpuSample)]
    for reply, g in zip(replies, gs):
        assert g.sm == pytest.approx(reply["2"]) and g.tensor == pytest.approx(reply["5"])
        assert g.pcie_rx == pytest.approx(reply["21"] * (1 << 20))
        assert g.dram == (None if "10" not in reply else pytest.approx(reply["10"]))


class _Reads(ReplayNvml):
    """The recorded H100 with ``procs`` processes on it, counting the per-process utilisation and energy
    reads (1.9 and 5.6 ms of CPU each on the H200)."""

    def __init__(self, procs: int) -> None:
        super().__init__(json.loads(FIXTURE.read_text())["calls"])
        self.procs, self.putil, self.energy = procs, 0, 0

    def processes(self, i):
        return [(100 + k, 1 << 30) for k in range(self.procs)]

    def process_utilization(self, i, since_us):
        self.putil += 1
        return []

    def energy_mj(self, i):
        self.energy += 1
        return 7_000_000


def _one_hz(nv: ReplayNvml, seconds: int, **kw) -> list[GpuSample]:
    """``seconds`` samples of a reader at --interval 1, each tick a few ms early or late, as threads wake."""
    col = NvmlCollector(nv, 1.0, offset=0.0, **kw)
    col.start()
    (r,) = col.readers
    return [
        p
        for k in range(seconds)
        for p in r.sample(1000.0 + k + 0.004 * (-1) ** k)
        if isinstance(p, GpuSample)
    ]


@pytest.mark.parametrize(
    ("procs", "alone_s", "reads"), [(1, 2.0, 5), (0, 2.0, 5), (2, 2.0, 10), (1, 1.0, 10)]
)
def test_per_process_utilisation_each_second_only_where_jobs_may_share_the_gpu(procs, alone_s, reads):
    """A live view reads a GPU that one process holds every ALONE_UTIL_S (only the process table, which
    follows every second paint, shows it); two processes (jobs split by it each second) and a
    recording's reader (alone_util_s 1) each second."""
    nv = _Reads(procs)
    got = _one_hz(nv, 10, alone_util_s=alone_s)
    assert nv.putil == reads
    assert all(len(g.processes) == procs for g in got)


@pytest.mark.parametrize(("energy_s", "reads"), [(5.0, 6), (30.0, 1)])
def test_the_energy_counter_is_read_at_its_cadence_and_carried_between(energy_s, reads):
    """With the health counters (every HEALTH_EVERY_S) for a recording and serve; the TUI's live view
    every VIEW_ENERGY_S. Every sample carries the last reading."""
    nv = _Reads(1)
    got = _one_hz(nv, 30, energy_s=energy_s)
    assert nv.energy == reads
    assert all(g.energy_j == 7000.0 for g in got)


def test_a_live_view_reads_less_often_than_a_recording():
    from memtop.collectors.nvml import ALONE_UTIL_S, HEALTH_EVERY_S

    from memtop.live.sampler import VIEW_ENERGY_S, Sampler, SamplerConfig

    view = Sampler(SamplerConfig(nvml=_Reads(1), lean=True, energy_s=VIEW_ENERGY_S), lambda f: None)
    rec = Sampler(SamplerConfig(nvml=_Reads(1)), lambda f: None)
    assert (view.nvml.energy_s, view.nvml.alone_util_s) == (VIEW_ENERGY_S, ALONE_UTIL_S)
    assert (rec.nvml.energy_s, rec.nvml.alone_util_s) == (HEALTH_EVERY_S, 1.0)
