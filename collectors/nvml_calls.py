"""The NVML calls memtop makes, as plain Python values, behind one interface.

``RealNvml`` talks to the driver through pynvml. ``RecordingNvml`` wraps it and logs every
call and reply; ``ReplayNvml`` serves such a log back, so the collector's logic runs on CI
against answers a real H100 gave.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, TypeVar, cast

SAMPLE_TYPES = {"power_w": 0, "util": 1, "mem_util": 2}  # NVML_*_SAMPLES
ERROR_GPU_LOST = 15
ERROR_NOT_FOUND = 6
ERROR_NOT_SUPPORTED = 3
ERROR_TIMEOUT = 10
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
# nvmlDeviceGetTotalEccErrors(errorType, counterType): corrected/uncorrected x volatile/aggregate
ECC_COUNTERS = {
    "ecc_sbe_volatile": (0, 0),
    "ecc_dbe_volatile": (1, 0),
    "ecc_sbe_aggregate": (0, 1),
    "ecc_dbe_aggregate": (1, 1),
}
# NVML_NVLINK_ERROR_DL_*: the link's error counters, summed over the active links
NVLINK_COUNTERS = {"nvlink_replay": 0, "nvlink_recovery": 1, "nvlink_crc": 2}
NVLINK_MAX_LINKS = 18  # NVLink 4 (Hopper): 18 links a GPU
ERROR_FUNCTION_NOT_FOUND = 13

SampleKind = Literal["power_w", "util", "mem_util"]
# one per-process sample: (pid, driver timestamp in wall µs, SM %, memory %, encoder %, decoder %)
ProcUtilRow = tuple[int, int, int, int, int, int]
Direction = Literal["rx", "tx"]


class SystemInfo(TypedDict):
    driver: str
    nvml_version: str
    cuda_driver: int
    count: int


class DeviceInfo(TypedDict):
    name: str
    uuid: str
    pci_bus_id: str
    mig: bool


class LinkInfo(TypedDict):
    gen: int
    width: int
    max_gen: int
    max_width: int
    speed_mts: int | None


class HealthInfo(TypedDict, total=False):
    """The slow health counters of one GPU; a counter the GPU or driver does not give is left out."""

    ecc_sbe_volatile: int  # corrected (single-bit) ECC errors since the driver loaded
    ecc_dbe_volatile: int  # uncorrected (double-bit) since the driver loaded
    ecc_sbe_aggregate: int  # the same over the board's life
    ecc_dbe_aggregate: int
    retired_sbe: int  # pages retired (pre-Ampere): for repeated single-bit errors
    retired_dbe: int  # for a double-bit error
    retired_pending: int  # 1: a retirement waits for the next reset
    remap_correctable: int  # rows remapped (Ampere+) for correctable errors
    remap_uncorrectable: int  # for uncorrectable errors
    remap_pending: int  # 1: a remap waits for the next reset
    remap_failure: int  # 1: a remap failed (no spare rows left)
    pcie_replay: int  # PCIe packets replayed (link errors the link layer recovered)
    nvlink_replay: int  # summed over the active NVLinks
    nvlink_recovery: int
    nvlink_crc: int
    violation_power_ns: int  # time the clocks were held down by the power limit
    violation_thermal_ns: int  # by the thermal limit


class MigInfo(TypedDict):
    """One MIG device (a compute instance of a GPU instance) of a GPU in MIG mode."""

    index: int  # its slot among the GPU's MIG devices
    gi: int  # GPU instance id
    ci: int  # compute instance id
    name: str  # e.g. "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    uuid: str
    mem_used: int | None  # bytes; None where the driver does not say
    mem_total: int | None


class Nvml(Protocol):
    """The NVML calls memtop makes, in plain (JSON-able) values. Errors are NvmlCallError (one call
    failed) or NvmlUnavailable (from ``init``: no NVML at all)."""

    def init(self) -> SystemInfo: ...
    def device(self, i: int) -> DeviceInfo: ...
    def gpm_supported(self, i: int) -> bool: ...
    def gpm_metrics(self, i: int, ids: Sequence[int]) -> dict[int, float] | None:
        """NVML_GPM_METRIC_* id -> value between the previous call and now (None on the first
        call); a metric the GPU does not give is left out."""
        ...

    def utilization(self, i: int) -> tuple[int, int]: ...
    def samples(self, i: int, kind: SampleKind, since_us: int) -> list[tuple[int, float]]: ...
    def pcie_throughput_kbs(self, i: int, direction: Direction) -> int: ...
    def link(self, i: int) -> LinkInfo: ...
    def power_mw(self, i: int) -> int: ...
    def temperature(self, i: int) -> int: ...
    def clocks(self, i: int) -> tuple[int, int]: ...
    def clock_events(self, i: int) -> int: ...
    def memory(self, i: int) -> tuple[int, int]: ...
    def processes(self, i: int) -> list[tuple[int, int | None]]: ...
    def health(self, i: int) -> HealthInfo:
        """The health counters the GPU gives (one call per counter; a missing one is left out)."""
        ...

    def energy_mj(self, i: int) -> int:
        """The driver's energy counter: mJ since the driver loaded."""
        ...

    def xids(self, i: int) -> list[int]:
        """The critical Xid errors the driver reported for this GPU since the previous call (an NVML
        event set, registered on the first call; never waits)."""
        ...

    def mig_devices(self, i: int) -> list[MigInfo]:
        """The MIG devices of a GPU in MIG mode (read only: memtop never changes the mode)."""
        ...

    def process_utilization(self, i: int, since_us: int) -> list[ProcUtilRow]:
        """The driver's per-process samples newer than ``since_us``; [] when there are none (the
        driver samples only processes that used the GPU)."""
        ...

    def shutdown(self) -> None: ...


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
        self._system: SystemInfo | None = None
        self._events: dict[int, Any] = {}  # GPU -> its Xid event set
        self._proc_util_v1 = True  # nvmlDeviceGetProcessesUtilizationInfo, until the driver lacks it

    def _call(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._nv, fn)(*args)
        except self._nv.NVMLError as e:
            raise NvmlCallError(e.value, str(e)) from None

    def init(self) -> SystemInfo:
        """Idempotent: live starts the driver before the collectors exist (commands/local.py)."""
        if self._system is not None:
            return self._system
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
        self._system = {
            "driver": _s(pynvml.nvmlSystemGetDriverVersion()),
            "nvml_version": _s(pynvml.nvmlSystemGetNVMLVersion()),
            "cuda_driver": pynvml.nvmlSystemGetCudaDriverVersion(),
            "count": count,
        }
        return self._system

    def device(self, i: int) -> DeviceInfo:
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

    def gpm_metrics(self, i: int, ids: Sequence[int]) -> dict[int, float] | None:
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
            mg.numMetrics = len(ids)
            mg.sample1 = prev
            mg.sample2 = cur
            for k, mid in enumerate(ids):
                mg.metrics[k].metricId = mid
            self._call("nvmlGpmMetricsGet", mg)
            out = {}
            for k, mid in enumerate(ids):
                m = mg.metrics[k]
                if m.nvmlReturn == 0 and m.value == m.value:  # skip NaN
                    out[mid] = float(m.value)
            return out
        finally:
            self._call("nvmlGpmSampleFree", prev)

    def utilization(self, i: int) -> tuple[int, int]:
        u = self._call("nvmlDeviceGetUtilizationRates", self._handles[i])
        return u.gpu, u.memory

    def samples(self, i: int, kind: SampleKind, since_us: int) -> list[tuple[int, float]]:
        vtype, rows = self._call("nvmlDeviceGetSamples", self._handles[i], SAMPLE_TYPES[kind], since_us)
        field = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(vtype, "uiVal")
        return [(int(r.timeStamp), float(getattr(r.sampleValue, field))) for r in rows]

    def pcie_throughput_kbs(self, i: int, direction: Direction) -> int:
        counter = self._nv.NVML_PCIE_UTIL_RX_BYTES if direction == "rx" else self._nv.NVML_PCIE_UTIL_TX_BYTES
        return self._call("nvmlDeviceGetPcieThroughput", self._handles[i], counter)

    def link(self, i: int) -> LinkInfo:
        h = self._handles[i]
        try:
            speed: int | None = self._call("nvmlDeviceGetPcieSpeed", h)
        except NvmlCallError:
            speed = None
        return {
            "gen": self._call("nvmlDeviceGetCurrPcieLinkGeneration", h),
            "width": self._call("nvmlDeviceGetCurrPcieLinkWidth", h),
            "max_gen": self._call("nvmlDeviceGetMaxPcieLinkGeneration", h),
            "max_width": self._call("nvmlDeviceGetMaxPcieLinkWidth", h),
            "speed_mts": speed,
        }

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

    def health(self, i: int) -> HealthInfo:
        h = self._handles[i]
        out: dict[str, int] = {}

        def put(key: str, fn: str, *args: Any) -> None:
            with contextlib.suppress(NvmlCallError):  # a counter this GPU lacks is left out
                out[key] = int(self._call(fn, h, *args))

        for key, (etype, ctype) in ECC_COUNTERS.items():
            put(key, "nvmlDeviceGetTotalEccErrors", etype, ctype)
        with contextlib.suppress(NvmlCallError):
            out["retired_sbe"] = len(self._call("nvmlDeviceGetRetiredPages", h, 0))
            out["retired_dbe"] = len(self._call("nvmlDeviceGetRetiredPages", h, 1))
            out["retired_pending"] = int(self._call("nvmlDeviceGetRetiredPagesPendingStatus", h))
        with contextlib.suppress(NvmlCallError):
            corr, unc, pending, failure = self._call("nvmlDeviceGetRemappedRows", h)
            out.update(
                remap_correctable=corr, remap_uncorrectable=unc, remap_pending=pending, remap_failure=failure
            )
        put("pcie_replay", "nvmlDeviceGetPcieReplayCounter")
        links = [k for k in range(NVLINK_MAX_LINKS) if self._nvlink_up(h, k)]
        for key, counter in NVLINK_COUNTERS.items():
            with contextlib.suppress(NvmlCallError):
                if links:
                    out[key] = sum(
                        int(self._call("nvmlDeviceGetNvLinkErrorCounter", h, k, counter)) for k in links
                    )
        for key, policy in (("violation_power_ns", 0), ("violation_thermal_ns", 1)):
            with contextlib.suppress(NvmlCallError):
                out[key] = int(self._call("nvmlDeviceGetViolationStatus", h, policy).violationTime)
        return cast(HealthInfo, out)

    def _nvlink_up(self, h: Any, link: int) -> bool:
        try:
            return bool(self._call("nvmlDeviceGetNvLinkState", h, link))
        except NvmlCallError:
            return False

    def energy_mj(self, i: int) -> int:
        return int(self._call("nvmlDeviceGetTotalEnergyConsumption", self._handles[i]))

    def mig_devices(self, i: int) -> list[MigInfo]:
        h = self._handles[i]
        out: list[MigInfo] = []
        for k in range(self._call("nvmlDeviceGetMaxMigDeviceCount", h)):
            try:
                m = self._call("nvmlDeviceGetMigDeviceHandleByIndex", h, k)
            except NvmlCallError as e:
                if e.code == ERROR_NOT_FOUND:  # an empty slot
                    continue
                raise
            used: int | None = None
            total: int | None = None
            with contextlib.suppress(NvmlCallError):
                mem = self._call("nvmlDeviceGetMemoryInfo", m)
                used, total = int(mem.used), int(mem.total)
            out.append(
                {
                    "index": k,
                    "gi": int(self._call("nvmlDeviceGetGpuInstanceId", m)),
                    "ci": int(self._call("nvmlDeviceGetComputeInstanceId", m)),
                    "name": _s(self._call("nvmlDeviceGetName", m)),
                    "uuid": _s(self._call("nvmlDeviceGetUUID", m)),
                    "mem_used": used,
                    "mem_total": total,
                }
            )
        return out

    def xids(self, i: int) -> list[int]:
        es = self._events.get(i)
        if es is None:
            es = self._call("nvmlEventSetCreate")
            try:
                self._call("nvmlDeviceRegisterEvents", self._handles[i], XID_CRITICAL, es)
            except NvmlCallError:
                self._call("nvmlEventSetFree", es)
                raise
            self._events[i] = es
        out: list[int] = []
        while len(out) < 64:  # a storm of Xids: the rest wait for the next call
            try:
                ev = self._call("nvmlEventSetWait_v2", es, 0)
            except NvmlCallError as e:
                if e.code == ERROR_TIMEOUT:  # nothing pending
                    break
                raise
            if ev.eventType & XID_CRITICAL:
                out.append(int(ev.eventData))
        return out

    def process_utilization(self, i: int, since_us: int) -> list[ProcUtilRow]:
        h = self._handles[i]
        rows: list[Any] = []
        try:
            if self._proc_util_v1:
                try:
                    rows = self._call("nvmlDeviceGetProcessesUtilizationInfo", h, since_us)
                except (NvmlCallError, AttributeError) as e:
                    if isinstance(e, NvmlCallError) and e.code not in (
                        ERROR_NOT_SUPPORTED,
                        ERROR_FUNCTION_NOT_FOUND,
                    ):
                        raise
                    self._proc_util_v1 = False  # an older driver (or pynvml): the older call
            if not self._proc_util_v1:
                rows = self._call("nvmlDeviceGetProcessUtilization", h, since_us)
        except NvmlCallError as e:
            # NotFound: no sample since since_us; pynvml raises "Success" for an empty buffer
            if e.code in (0, ERROR_NOT_FOUND):
                return []
            raise
        return [(r.pid, r.timeStamp, r.smUtil, r.memUtil, r.encUtil, r.decUtil) for r in rows]

    def shutdown(self) -> None:
        if self._nv is not None:
            for es in self._events.values():
                with contextlib.suppress(Exception):
                    self._nv.nvmlEventSetFree(es)
            self._events.clear()
            for s in self._gpm_prev.values():
                with contextlib.suppress(Exception):
                    self._nv.nvmlGpmSampleFree(s)
            self._gpm_prev.clear()
            self._system = None
            with contextlib.suppress(Exception):
                self._nv.nvmlShutdown()


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


R = TypeVar("R")


class RecordingNvml:
    """Wraps a backend and logs each call and its reply (or error) for replay."""

    def __init__(self, inner: Nvml) -> None:
        self.inner = inner
        self.log: list[dict[str, Any]] = []

    def _log(self, name: str, fn: Callable[..., R], *args: Any) -> R:
        entry: dict[str, Any] = {"m": name, "a": list(args)}
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
        # JSON object keys are strings: GPM ids are written as such and read back as ints
        entry["r"] = r
        self.log.append(entry)
        return r

    def init(self) -> SystemInfo:
        return self._log("init", self.inner.init)

    def device(self, i: int) -> DeviceInfo:
        return self._log("device", self.inner.device, i)

    def gpm_supported(self, i: int) -> bool:
        return self._log("gpm_supported", self.inner.gpm_supported, i)

    def gpm_metrics(self, i: int, ids: Sequence[int]) -> dict[int, float] | None:
        return self._log("gpm_metrics", self.inner.gpm_metrics, i, list(ids))

    def utilization(self, i: int) -> tuple[int, int]:
        return self._log("utilization", self.inner.utilization, i)

    def samples(self, i: int, kind: SampleKind, since_us: int) -> list[tuple[int, float]]:
        return self._log("samples", self.inner.samples, i, kind, since_us)

    def pcie_throughput_kbs(self, i: int, direction: Direction) -> int:
        return self._log("pcie_throughput_kbs", self.inner.pcie_throughput_kbs, i, direction)

    def link(self, i: int) -> LinkInfo:
        return self._log("link", self.inner.link, i)

    def power_mw(self, i: int) -> int:
        return self._log("power_mw", self.inner.power_mw, i)

    def temperature(self, i: int) -> int:
        return self._log("temperature", self.inner.temperature, i)

    def clocks(self, i: int) -> tuple[int, int]:
        return self._log("clocks", self.inner.clocks, i)

    def clock_events(self, i: int) -> int:
        return self._log("clock_events", self.inner.clock_events, i)

    def memory(self, i: int) -> tuple[int, int]:
        return self._log("memory", self.inner.memory, i)

    def processes(self, i: int) -> list[tuple[int, int | None]]:
        return self._log("processes", self.inner.processes, i)

    def health(self, i: int) -> HealthInfo:
        return self._log("health", self.inner.health, i)

    def energy_mj(self, i: int) -> int:
        return self._log("energy_mj", self.inner.energy_mj, i)

    def xids(self, i: int) -> list[int]:
        return self._log("xids", self.inner.xids, i)

    def mig_devices(self, i: int) -> list[MigInfo]:
        return self._log("mig_devices", self.inner.mig_devices, i)

    def process_utilization(self, i: int, since_us: int) -> list[ProcUtilRow]:
        return self._log("process_utilization", self.inner.process_utilization, i, since_us)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        Path(path).write_text(json.dumps({"meta": meta or {}, "calls": self.log}))


# Calls replayed by their first arguments only: the rest vary from run to run (a timestamp) or
# with memtop's own choices (which GPM metrics it asks for), not with what the GPU answers.
_REPLAY_KEY_ARGS = {"samples": 2, "gpm_metrics": 1, "process_utilization": 1}


class ReplayNvml:
    """Serves a recorded log: replies per (method, args) in order, the last one repeating."""

    def __init__(self, log: list[dict[str, Any]]) -> None:
        self._q: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        for e in log:
            self._q[self._key(e["m"], e["a"])].append(e)
        self._last: dict[str, dict[str, Any]] = {}

    @classmethod
    def load(cls, path: str | Path) -> ReplayNvml:
        return cls(json.loads(Path(path).read_text())["calls"])

    @staticmethod
    def _key(m: str, a: Sequence[object]) -> str:
        return json.dumps([m, list(a[: _REPLAY_KEY_ARGS.get(m, len(a))])])

    def _serve(self, m: str, *a: object, repeat: bool = True) -> Any:
        key = self._key(m, a)
        q = self._q.get(key)
        if not q and not repeat:
            return []  # events (Xids) happen once: a spent log has no more of them
        e = q.popleft() if q else self._last.get(key)
        if e is None:
            raise NvmlCallError(ERROR_NOT_SUPPORTED, f"{m} not in the recording")
        self._last[key] = e
        if "u" in e:
            raise NvmlUnavailable(e["u"])
        if "e" in e:
            raise NvmlCallError(*e["e"])
        return e["r"]

    def init(self) -> SystemInfo:
        r: SystemInfo = self._serve("init")
        return r

    def device(self, i: int) -> DeviceInfo:
        r: DeviceInfo = self._serve("device", i)
        return r

    def gpm_supported(self, i: int) -> bool:
        return bool(self._serve("gpm_supported", i))

    def gpm_metrics(self, i: int, ids: Sequence[int]) -> dict[int, float] | None:
        r = self._serve("gpm_metrics", i)
        if r is None:
            return None
        want = set(ids)
        return {int(k): float(v) for k, v in r.items() if int(k) in want}

    def utilization(self, i: int) -> tuple[int, int]:
        a, b = self._serve("utilization", i)
        return a, b

    def samples(self, i: int, kind: SampleKind, since_us: int) -> list[tuple[int, float]]:
        return [(int(t), float(v)) for t, v in self._serve("samples", i, kind)]

    def pcie_throughput_kbs(self, i: int, direction: Direction) -> int:
        return int(self._serve("pcie_throughput_kbs", i, direction))

    def link(self, i: int) -> LinkInfo:
        r: LinkInfo = self._serve("link", i)
        return r

    def power_mw(self, i: int) -> int:
        return int(self._serve("power_mw", i))

    def temperature(self, i: int) -> int:
        return int(self._serve("temperature", i))

    def clocks(self, i: int) -> tuple[int, int]:
        a, b = self._serve("clocks", i)
        return a, b

    def clock_events(self, i: int) -> int:
        return int(self._serve("clock_events", i))

    def memory(self, i: int) -> tuple[int, int]:
        a, b = self._serve("memory", i)
        return a, b

    def processes(self, i: int) -> list[tuple[int, int | None]]:
        return [(pid, mem) for pid, mem in self._serve("processes", i)]

    def health(self, i: int) -> HealthInfo:
        r = self._serve("health", i)
        return cast(HealthInfo, {k: int(v) for k, v in r.items() if k in HealthInfo.__annotations__})

    def energy_mj(self, i: int) -> int:
        return int(self._serve("energy_mj", i))

    def xids(self, i: int) -> list[int]:
        return [int(x) for x in self._serve("xids", i, repeat=False)]

    def mig_devices(self, i: int) -> list[MigInfo]:
        r: list[MigInfo] = self._serve("mig_devices", i)
        return r

    def process_utilization(self, i: int, since_us: int) -> list[ProcUtilRow]:
        return [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in self._serve("process_utilization", i)]

    def shutdown(self) -> None:
        pass


if TYPE_CHECKING:  # mypy proves each backend is an Nvml
    _BACKENDS: tuple[type[Nvml], ...] = (RealNvml, RecordingNvml, ReplayNvml)
