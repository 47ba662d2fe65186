"""The NVML calls memtop makes, as plain Python values, behind one interface.

``RealNvml`` talks to the driver through pynvml. ``RecordingNvml`` wraps it and logs every
call and reply; ``ReplayNvml`` serves such a log back, so the collector's logic runs on CI
against answers a real H100 gave.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

GPM_METRICS = {  # our name -> NVML_GPM_METRIC_* id
    "graphics": 1,
    "sm": 2,
    "occupancy": 3,
    "tensor": 5,
    "dram": 10,
    "pcie_tx_mib": 20,
    "pcie_rx_mib": 21,
    "nvlink_rx_mib": 60,
    "nvlink_tx_mib": 61,
}
SAMPLE_TYPES = {"power_w": 0, "util": 1, "mem_util": 2}  # NVML_*_SAMPLES
ERROR_GPU_LOST = 15
ERROR_NOT_FOUND = 6
ERROR_NOT_SUPPORTED = 3


class NvmlUnavailable(Exception):
    """NVML cannot be used at all on this machine (no driver, no library)."""


class NvmlCallError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class RealNvml:
    def __init__(self) -> None:
        self._nv: Any = None
        self._handles: list[Any] = []
        self._gpm_prev: dict[int, Any] = {}

    def _call(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._nv, fn)(*args)
        except self._nv.NVMLError as e:
            raise NvmlCallError(e.value, str(e)) from None

    def init(self) -> dict:
        try:
            import pynvml
        except ImportError as e:  # pragma: no cover - it is a dependency
            raise NvmlUnavailable(f"pynvml not importable: {e}") from None
        self._nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            raise NvmlUnavailable("NVIDIA driver not found (libnvidia-ml.so.1)") from None
        except pynvml.NVMLError as e:
            raise NvmlUnavailable(f"NVML failed to initialise: {e}") from None
        count = pynvml.nvmlDeviceGetCount()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        return {
            "driver": _s(pynvml.nvmlSystemGetDriverVersion()),
            "nvml_version": _s(pynvml.nvmlSystemGetNVMLVersion()),
            "cuda_driver": pynvml.nvmlSystemGetCudaDriverVersion(),
            "count": count,
        }

    def device(self, i: int) -> dict:
        h = self._handles[i]
        try:
            mig = self._call("nvmlDeviceGetMigMode", h)[0] == 1
        except NvmlCallError:
            mig = False
        return {
            "name": _s(self._call("nvmlDeviceGetName", h)),
            "uuid": _s(self._call("nvmlDeviceGetUUID", h)),
            "pci_bus_id": _s(self._call("nvmlDeviceGetPciInfo", h).busId),
            "mig": mig,
        }

    def gpm_supported(self, i: int) -> bool:
        return bool(self._call("nvmlGpmQueryDeviceSupport", self._handles[i]).isSupportedDevice)

    def gpm_metrics(self, i: int) -> dict[str, float] | None:
        """Metrics between the previous call's sample and now; None on the first call."""
        nv = self._nv
        h = self._handles[i]
        cur = self._call("nvmlGpmSampleAlloc")
        self._call("nvmlGpmSampleGet", h, cur)
        prev = self._gpm_prev.get(i)
        self._gpm_prev[i] = cur
        if prev is None:
            return None
        try:
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(GPM_METRICS)
            mg.sample1 = prev
            mg.sample2 = cur
            for k, mid in enumerate(GPM_METRICS.values()):
                mg.metrics[k].metricId = mid
            self._call("nvmlGpmMetricsGet", mg)
            out = {}
            for k, name in enumerate(GPM_METRICS):
                m = mg.metrics[k]
                if m.nvmlReturn == 0 and m.value == m.value:  # skip NaN
                    out[name] = float(m.value)
            return out
        finally:
            self._call("nvmlGpmSampleFree", prev)

    def utilization(self, i: int) -> tuple[int, int]:
        u = self._call("nvmlDeviceGetUtilizationRates", self._handles[i])
        return u.gpu, u.memory

    def samples(self, i: int, kind: str, since_us: int) -> list[tuple[int, float]]:
        vtype, rows = self._call("nvmlDeviceGetSamples", self._handles[i], SAMPLE_TYPES[kind], since_us)
        field = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(vtype, "uiVal")
        return [(int(r.timeStamp), float(getattr(r.sampleValue, field))) for r in rows]

    def pcie_throughput_kbs(self, i: int, direction: str) -> int:
        counter = self._nv.NVML_PCIE_UTIL_RX_BYTES if direction == "rx" else self._nv.NVML_PCIE_UTIL_TX_BYTES
        return self._call("nvmlDeviceGetPcieThroughput", self._handles[i], counter)

    def link(self, i: int) -> dict:
        h = self._handles[i]
        out = {
            "gen": self._call("nvmlDeviceGetCurrPcieLinkGeneration", h),
            "width": self._call("nvmlDeviceGetCurrPcieLinkWidth", h),
            "max_gen": self._call("nvmlDeviceGetMaxPcieLinkGeneration", h),
            "max_width": self._call("nvmlDeviceGetMaxPcieLinkWidth", h),
        }
        try:
            out["speed_mts"] = self._call("nvmlDeviceGetPcieSpeed", h)
        except NvmlCallError:
            out["speed_mts"] = None
        return out

    def power_mw(self, i: int) -> int:
        return self._call("nvmlDeviceGetPowerUsage", self._handles[i])

    def temperature(self, i: int) -> int:
        return self._call("nvmlDeviceGetTemperature", self._handles[i], 0)  # NVML_TEMPERATURE_GPU

    def clocks(self, i: int) -> tuple[int, int]:
        h = self._handles[i]
        return self._call("nvmlDeviceGetClockInfo", h, 1), self._call("nvmlDeviceGetClockInfo", h, 2)

    def clock_events(self, i: int) -> int:
        h = self._handles[i]
        try:
            return self._call("nvmlDeviceGetCurrentClocksEventReasons", h)
        except (NvmlCallError, AttributeError):  # older drivers: the throttle-reasons name
            return self._call("nvmlDeviceGetCurrentClocksThrottleReasons", h)

    def memory(self, i: int) -> tuple[int, int]:
        # v2 leaves the driver-reserved memory out of "used", as nvidia-smi does
        try:
            m = self._call("nvmlDeviceGetMemoryInfo", self._handles[i], self._nv.nvmlMemory_v2)
        except (NvmlCallError, AttributeError):
            m = self._call("nvmlDeviceGetMemoryInfo", self._handles[i])
        return m.used, m.total

    def processes(self, i: int) -> list[tuple[int, int | None]]:
        h = self._handles[i]
        try:
            procs = self._call("nvmlDeviceGetComputeRunningProcesses_v3", h)
        except (NvmlCallError, AttributeError):
            procs = self._call("nvmlDeviceGetComputeRunningProcesses", h)
        # pynvml already maps "not available" to None
        return [(p.pid, None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in procs]

    def shutdown(self) -> None:
        if self._nv is not None:
            for s in self._gpm_prev.values():
                with contextlib.suppress(Exception):
                    self._nv.nvmlGpmSampleFree(s)
            self._gpm_prev.clear()
            with contextlib.suppress(Exception):
                self._nv.nvmlShutdown()


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


_METHODS = [
    "init",
    "device",
    "gpm_supported",
    "gpm_metrics",
    "utilization",
    "samples",
    "pcie_throughput_kbs",
    "link",
    "power_mw",
    "temperature",
    "clocks",
    "clock_events",
    "memory",
    "processes",
]


class RecordingNvml:
    """Wraps a backend and logs each call and its reply (or error) for replay."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.log: list[dict] = []

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)
        if name not in _METHODS:
            return fn

        def call(*args: Any) -> Any:
            entry: dict = {"m": name, "a": list(args)}
            try:
                r = fn(*args)
            except NvmlCallError as e:
                entry["e"] = [e.code, e.message]
                self.log.append(entry)
                raise
            except NvmlUnavailable as e:
                entry["u"] = str(e)
                self.log.append(entry)
                raise
            entry["r"] = r
            self.log.append(entry)
            return r

        return call

    def save(self, path: str | Path, meta: dict | None = None) -> None:
        Path(path).write_text(json.dumps({"meta": meta or {}, "calls": self.log}))


class ReplayNvml:
    """Serves a recorded log: replies per (method, args) in order, the last one repeating."""

    def __init__(self, log: list[dict]) -> None:
        self._q: dict[str, deque] = defaultdict(deque)
        for e in log:
            self._q[self._key(e["m"], e["a"] if e["m"] != "samples" else e["a"][:2])].append(e)
        self._last: dict[str, dict] = {}

    @classmethod
    def load(cls, path: str | Path) -> ReplayNvml:
        return cls(json.loads(Path(path).read_text())["calls"])

    @staticmethod
    def _key(m: str, a: list) -> str:
        return json.dumps([m, a])

    def _serve(self, m: str, a: list) -> Any:
        key = self._key(m, a)
        q = self._q.get(key)
        e = q.popleft() if q else self._last.get(key)
        if e is None:
            raise NvmlCallError(ERROR_NOT_SUPPORTED, f"{m} not in the recording")
        self._last[key] = e
        if "u" in e:
            raise NvmlUnavailable(e["u"])
        if "e" in e:
            raise NvmlCallError(*e["e"])
        r = e["r"]
        return tuple(r) if isinstance(r, list) and m in ("utilization", "clocks", "memory") else r

    def __getattr__(self, name: str) -> Any:
        if name not in _METHODS:
            raise AttributeError(name)
        if name == "samples":
            return lambda i, kind, since_us: [tuple(x) for x in self._serve(name, [i, kind])]
        return lambda *args: self._serve(name, list(args))

    def shutdown(self) -> None:
        pass
