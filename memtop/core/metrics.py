"""The one table of GPU metrics. Every consumer derives from it: the NVML/GPM collector (which GPM
metric id feeds which field), the store (column, integer scale, valid range), the Perfetto export
(counter tracks), `memtop serve` (Prometheus names and units), the TUI's GPU detail screen and table.

To add a metric: a row here, a field on `model.GpuSample` (a test checks that they agree), the table in
docs/ARCHITECTURE.md regenerated (tests/test_metrics.py's `markdown()`; a test checks it), and a test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Source = Literal["gpm", "nvml"]
Kind = Literal["percent", "bytes_per_s", "watts", "joules", "celsius", "mhz", "bytes", "bitmask"]

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # GpuSample field
    title: str  # short human title (detail screen, export counter track)
    kind: Kind  # unit family: decides display format and the Prometheus unit
    source: Source  # who provides it: GPM (Hopper+, 10 Hz) or plain NVML
    scale: float  # store: stored integer = round(value * scale)
    lo: float = 0.0  # valid range on decode; outside it (or non-finite) the value is missing
    hi: float = math.inf
    gpm_id: int | None = None  # NVML_GPM_METRIC_* id, when GPM provides it
    gpm_mib: bool = False  # the GPM metric is in MiB/s (converted to bytes/s)
    counter: bool = False  # a Perfetto counter track by default
    prom: str | None = None  # Prometheus metric name (without the memtop_ prefix); None: not exported
    dcgm: str | None = None  # the dcgm-exporter field with the same meaning, for docs
    help: str = ""

    @property
    def as_int(self) -> bool:
        return self.kind in ("bytes", "bitmask")

    def valid(self, v: float | None) -> float | None:
        """The value if it is finite and in range, else None (recordings are untrusted)."""
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        if not math.isfinite(v) or v < self.lo or v > self.hi:
            return None
        return v


_PCT = 100.0
_BW = 1e13  # 10 TB/s: above any PCIe or NVLink link
# one metric a row: what it is and how it is stored, then what it is exported as
METRICS: tuple[Metric, ...] = (
    Metric("util", "util", "percent", "nvml", 10, hi=_PCT, counter=True,
           prom="gpu_utilization_ratio", dcgm="DCGM_FI_DEV_GPU_UTIL", help="time a kernel or a copy ran (NVML utilization)"),
    Metric("mem_util", "memory util", "percent", "nvml", 10, hi=_PCT,
           prom="gpu_memory_utilization_ratio", dcgm="DCGM_FI_DEV_MEM_COPY_UTIL", help="time device memory was read or written (NVML)"),
    Metric("graphics", "graphics", "percent", "gpm", 10, hi=_PCT, gpm_id=1, counter=True,
           prom="gpu_graphics_activity_ratio", dcgm="DCGM_FI_PROF_GR_ENGINE_ACTIVE", help="time the graphics/compute engine was busy (GPM)"),
    Metric("sm", "SM", "percent", "gpm", 10, hi=_PCT, gpm_id=2, counter=True,
           prom="gpu_sm_activity_ratio", dcgm="DCGM_FI_PROF_SM_ACTIVE", help="SM activity (GPM)"),
    Metric("occupancy", "occupancy", "percent", "gpm", 10, hi=_PCT, gpm_id=3,
           prom="gpu_sm_occupancy_ratio", dcgm="DCGM_FI_PROF_SM_OCCUPANCY", help="resident warps over the maximum (GPM)"),
    Metric("tensor", "tensor", "percent", "gpm", 10, hi=_PCT, gpm_id=5, counter=True,
           prom="gpu_tensor_activity_ratio", dcgm="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", help="tensor pipe activity (GPM)"),
    Metric("dram", "DRAM", "percent", "gpm", 10, hi=_PCT, gpm_id=10, counter=True,
           prom="gpu_dram_activity_ratio", dcgm="DCGM_FI_PROF_DRAM_ACTIVE", help="device memory bandwidth utilisation (GPM)"),
    Metric("fp64", "FP64", "percent", "gpm", 10, hi=_PCT, gpm_id=11,
           prom="gpu_fp64_activity_ratio", dcgm="DCGM_FI_PROF_PIPE_FP64_ACTIVE", help="non-tensor FP64 pipe activity (GPM)"),
    Metric("fp32", "FP32", "percent", "gpm", 10, hi=_PCT, gpm_id=12,
           prom="gpu_fp32_activity_ratio", dcgm="DCGM_FI_PROF_PIPE_FP32_ACTIVE", help="non-tensor FP32 pipe activity (GPM)"),
    Metric("fp16", "FP16", "percent", "gpm", 10, hi=_PCT, gpm_id=13,
           prom="gpu_fp16_activity_ratio", dcgm="DCGM_FI_PROF_PIPE_FP16_ACTIVE", help="non-tensor FP16 pipe activity (GPM)"),
    Metric("pcie_rx", "PCIe RX", "bytes_per_s", "gpm", 1 / 1024, hi=_BW, gpm_id=21, gpm_mib=True,
           prom="gpu_pcie_rx_bytes_per_second", dcgm="DCGM_FI_PROF_PCIE_RX_BYTES", help="PCIe bytes per second into the GPU"),
    Metric("pcie_tx", "PCIe TX", "bytes_per_s", "gpm", 1 / 1024, hi=_BW, gpm_id=20, gpm_mib=True,
           prom="gpu_pcie_tx_bytes_per_second", dcgm="DCGM_FI_PROF_PCIE_TX_BYTES", help="PCIe bytes per second out of the GPU"),
    Metric("nvlink_rx", "NVLink RX", "bytes_per_s", "gpm", 1 / 1024, hi=_BW, gpm_id=60, gpm_mib=True,
           prom="gpu_nvlink_rx_bytes_per_second", dcgm="DCGM_FI_PROF_NVLINK_RX_BYTES", help="NVLink bytes per second received"),
    Metric("nvlink_tx", "NVLink TX", "bytes_per_s", "gpm", 1 / 1024, hi=_BW, gpm_id=61, gpm_mib=True,
           prom="gpu_nvlink_tx_bytes_per_second", dcgm="DCGM_FI_PROF_NVLINK_TX_BYTES", help="NVLink bytes per second sent"),
    Metric("power_w", "power", "watts", "nvml", 10, hi=5000, counter=True,
           prom="gpu_power_watts", dcgm="DCGM_FI_DEV_POWER_USAGE", help="board power draw"),
    # scale 10, 0.1 J: a 10 s run at 300 W is 3 kJ, so 0.003 %; hi: the counter runs from the driver's
    # load: 700 W for 40 years is below this
    Metric("energy_j", "energy", "joules", "nvml", 10, hi=1e12,
           dcgm="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", help="since driver load; a run's: `memtop report`"),
    Metric("temp_c", "temperature", "celsius", "nvml", 1, lo=-50, hi=200,
           prom="gpu_temperature_celsius", dcgm="DCGM_FI_DEV_GPU_TEMP", help="GPU temperature"),
    Metric("sm_clock", "SM clock", "mhz", "nvml", 1, hi=10000, counter=True,
           prom="gpu_sm_clock_hertz", dcgm="DCGM_FI_DEV_SM_CLOCK", help="SM clock"),
    Metric("mem_clock", "memory clock", "mhz", "nvml", 1, hi=20000,
           prom="gpu_memory_clock_hertz", dcgm="DCGM_FI_DEV_MEM_CLOCK", help="memory clock"),
    Metric("clock_events", "clock events", "bitmask", "nvml", 1, hi=2**32 - 1,
           dcgm="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", help="clock-event (throttle) reason bits"),
    Metric("mem_used", "memory used", "bytes", "nvml", 1 / MIB, hi=2**50,
           prom="gpu_memory_used_bytes", dcgm="DCGM_FI_DEV_FB_USED", help="device memory in use"),
    Metric("mem_total", "memory total", "bytes", "nvml", 1 / MIB, hi=2**50,
           prom="gpu_memory_total_bytes", help="device memory size"),
)  # fmt: skip
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
GPM_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS if m.gpm_id is not None)


def fmt(m: Metric, v: float | None) -> str:
    """A value with its unit, for people (detail screen, report text)."""
    if v is None:
        return "n/a"
    if m.kind == "percent":
        return f"{v:.0f} %"
    if m.kind == "bytes_per_s":
        return f"{v / 1e9:.2f} GB/s" if v >= 1e8 else f"{v / 1e6:.1f} MB/s"
    if m.kind == "watts":
        return f"{v:.0f} W"
    if m.kind == "joules":
        return f"{v / 3.6e6:.3f} kWh" if v >= 3.6e5 else f"{v:.0f} J"
    if m.kind == "celsius":
        return f"{v:.0f} °C"
    if m.kind == "mhz":
        return f"{v:.0f} MHz"
    if m.kind == "bytes":
        return f"{v / (1 << 30):.1f} GiB"
    return f"0x{int(v):x}"
