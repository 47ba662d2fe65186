"""GPU collector: GPM (Hopper+) at 10 Hz (a live view: 5 Hz), drained driver sample buffers, NVML-only fallback.

One ``GpuReader`` per GPU; the sampler runs each in its own thread so a slow call on one
GPU (nvmlDeviceGetPcieThroughput blocks ~21 ms) never delays another or the UI.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from memtop.core.metrics import GPM_METRICS, MIB
from memtop.core.model import (
    Capability,
    CapState,
    GpuHealth,
    GpuProcess,
    GpuSample,
    MigInstance,
    PcieLink,
    ProcUtil,
    SeriesChunk,
)

from .nvml_calls import (
    ERROR_GPU_LOST,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    DeviceInfo,
    LinkInfo,
    Nvml,
    NvmlCallError,
    NvmlUnavailable,
    ProcUtilRow,
    RealNvml,
    SampleKind,
    SystemInfo,
)

GPM_IDS = tuple(m.gpm_id for m in GPM_METRICS if m.gpm_id is not None)
R = TypeVar("R")
# Per-lane transfer rate (MT/s) by PCIe generation, for when nvmlDeviceGetPcieSpeed is missing.
GEN_MTS = {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}
# Health counters (ECC, remapped rows, PCIe replays, NVLink errors, violation time; 2.3 ms of CPU a read
# on the H100) and the energy counter (4.0 ms a read!) every few seconds (bench/RESULTS.md, "Health
# counters"); Xid events (6 us) are polled each second and a Xid brings the counters' read forward, so its
# event comes with the counters it moved.
HEALTH_EVERY_S = 5.0
# Per-process utilisation costs 1.9 ms of CPU a read on the H200 (the energy counter 5.6 ms, GPM's 1.4-1.7;
# bench/RESULTS.md, "live footprint, seventh pass"). Where a GPU holds more than one process, jobs may share
# it and their split is judged each second (memtop.analysis.jobshare): read each second. Where one process
# (or none) holds it, only the process table shows its figure, and that table follows every second paint:
# a live view (``alone_util_s``) reads it every ALONE_UTIL_S there; a recording keeps each second.
ALONE_UTIL_S = 2.0
ERROR_NO_PERMISSION = 4


def link_bytes_per_s(gen: int, width: int, speed_mts: int | None = None) -> float:
    """One direction's capacity: MT/s per lane x encoding efficiency / 8 bits x lanes."""
    mts = speed_mts or GEN_MTS.get(gen, 0)
    enc = 8 / 10 if gen <= 2 else (242 / 256 if gen >= 6 else 128 / 130)
    return mts * 1e6 * enc / 8 * width


def pcie_link(lk: LinkInfo) -> PcieLink:
    """The link NVML reports, with its one-direction capacity."""
    capacity = link_bytes_per_s(lk["gen"], lk["width"], lk.get("speed_mts"))
    return PcieLink(lk["gen"], lk["width"], lk["max_gen"], lk["max_width"], capacity)


def gpm_values(got: dict[int, float]) -> dict[str, float]:
    """GpuSample fields from one GPM reply (NVML id -> value), by the metric table."""
    out = {}
    for m in GPM_METRICS:
        v = got.get(m.gpm_id) if m.gpm_id is not None else None
        if v is None:
            continue
        if m.gpm_mib:
            v *= MIB  # GPM gives MiB/s; memtop keeps bytes/s
        elif m.kind == "percent":
            v = min(v, m.hi)  # a ratio of two counters can land a rounding above 100 %
        out[m.name] = v
    return out


class SampleDrain:
    """Drains one nvmlDeviceGetSamples buffer, remembering the newest timestamp seen.

    The driver keeps ~14 s of util and ~2.4 s of power samples; asking each second for
    those newer than the last one seen gives a gap-free history at the driver's own rate.
    """

    def __init__(self, metric: SampleKind, scale: float = 1.0):
        self.metric = metric
        self.scale = scale
        self.last_us = 0

    def take(
        self, rows: Sequence[tuple[int, float]], offset: float
    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """New rows only, as (monotonic t, value); ``offset`` = wall - monotonic."""
        fresh = sorted(r for r in rows if r[0] > self.last_us)
        if not fresh:
            return (), ()
        self.last_us = fresh[-1][0]
        return (
            tuple(ts / 1e6 - offset for ts, _ in fresh),
            tuple(v * self.scale for _, v in fresh),
        )


class ProcUtilDrain:
    """Per-process utilisation from the driver's per-process samples, drained each second by the
    newest timestamp seen (so none is read twice or missed while the buffer holds it).

    A process's figure is the mean of its samples new this second. The driver samples about once a
    second (the H100's driver 580: one sample a second, naming only the processes that used the GPU
    in it), so a second's drain may find none: then every process keeps its last figure for
    ``HOLD_S`` after its sample. Where the driver did sample, a process it left out reads 0.
    """

    HOLD_S = 2.0

    def __init__(self) -> None:
        self.last_us = 0
        self._last: dict[int, tuple[int, ProcUtil]] = {}  # pid -> (its newest sample's time, figure)

    def take(self, rows: Sequence[ProcUtilRow], pids: Sequence[int], now_us: int) -> tuple[ProcUtil, ...]:
        """``pids``: the GPU's processes (NVML's list); each gets a figure, as does any sampled pid."""
        fresh: dict[int, list[ProcUtilRow]] = {}
        for r in rows:
            if r[1] > self.last_us:
                fresh.setdefault(r[0], []).append(r)
        if fresh:
            self.last_us = max(r[1] for rs in fresh.values() for r in rs)
        for pid, rs in fresh.items():
            n = len(rs)
            mean = [min(100.0, sum(r[k] for r in rs) / n) for k in (2, 3, 4, 5)]
            self._last[pid] = (max(r[1] for r in rs), ProcUtil(pid, *mean))
        out = []
        for pid in sorted(set(pids) | set(fresh)):
            ts, u = self._last.get(pid, (0, None))
            if u is None or (fresh and pid not in fresh) or now_us - ts > self.HOLD_S * 1e6:
                u = ProcUtil(pid, 0.0, 0.0, 0.0, 0.0)
                self._last[pid] = (now_us, u)
            out.append(u)
        for gone in set(self._last) - set(pids) - set(fresh):
            del self._last[gone]
        return tuple(out)


class GpuReader:
    name = "nvml"
    jitter = 0.0  # GPM pairs and drains keep a fixed rate

    def __init__(
        self,
        nv: Nvml,
        index: int,
        info: DeviceInfo,
        gpm: bool,
        gpm_reason: str,
        interval: float,
        offset: float,
        series: bool = True,
        pid_map: Callable[[int], int] | None = None,
        energy_s: float = HEALTH_EVERY_S,
        alone_util_s: float = 1.0,
    ):
        self.nv = nv
        self.energy_s = energy_s  # the energy counter's cadence (read with the health counters at most)
        self.alone_util_s = alone_util_s  # per-process utilisation of a GPU with one process (ALONE_UTIL_S)
        self.index = index
        self.pid_map = pid_map or (lambda pid: pid)  # NVML's (the host's) PIDs to this namespace's
        self.info = info
        self.gpm = gpm
        self.gpm_reason = gpm_reason
        self.interval = interval
        self.offset = offset
        self.series = series  # drain the driver's sample buffers (only a recording keeps them)
        self.lost = False
        self._last_code = 0
        self.errors: dict[str, str] = {}  # metric -> last error, cleared when it works again
        self._link: PcieLink | None = None
        self._link_t = -1e9
        self._procs: tuple[GpuProcess, ...] = ()
        self._procs_t = -1e9
        self._drain_t = -1e9
        self._slow_t = -1e9
        self._slow: dict[str, float | int | None] = {}
        self._drains = [SampleDrain("util"), SampleDrain("mem_util"), SampleDrain("power_w", 1e-3)]
        self._health: GpuHealth | None = None
        self._mig: tuple[MigInstance, ...] = ()
        self._energy: float | None = (
            None  # J, as last read (memtop.analysis.energy shares each rise by power)
        )
        self._health_t = -1e9
        self._energy_t = -1e9
        self._putil_t = -1e9
        self.unsupported: dict[str, str] = {}  # optional readings this GPU or driver refused, not asked again
        self._putil = ProcUtilDrain()
        self._putil_ok = True  # until the driver says it has no per-process utilisation
        self._proc_util: tuple[ProcUtil, ...] = ()

    def start(self) -> None:
        # Prime the drains so the first chunk holds only samples taken after start.
        now_us = int((time.monotonic() + self.offset) * 1e6)
        for d in self._drains:
            d.last_us = now_us
        self._putil.last_us = now_us
        if self.gpm:
            self._try("gpm", self.nv.gpm_metrics, self.index, GPM_IDS)

    def capabilities(self) -> tuple[Capability, ...]:
        g = f"GPU {self.index}"
        caps = [
            Capability(
                "gpm",
                g,
                CapState.AVAILABLE if self.gpm else CapState.UNSUPPORTED,
                f"GPM metrics at {1 / self.interval:.3g} Hz" if self.gpm else self.gpm_reason,
                "" if self.gpm else "NVML-only mode: util is 'kernel or copy running', not SM activity",
            ),
        ]
        if self.lost:
            caps.append(
                Capability(
                    "nvml",
                    g,
                    CapState.ERROR,
                    "GPU is lost (fell off the bus)",
                    "check dmesg for Xid errors; the GPU needs a reset by an administrator",
                )
            )
        for metric, err in sorted(self.unsupported.items()):
            caps.append(Capability("nvml", f"{g} {metric}", CapState.UNSUPPORTED, err))
        for metric, err in sorted(self.errors.items()):
            caps.append(Capability("nvml", f"{g} {metric}", CapState.ERROR, err))
        return tuple(caps)

    def _fail(self, metric: str, e: NvmlCallError) -> None:
        self._last_code = e.code
        if e.code == ERROR_GPU_LOST:
            self.lost = True
        self.errors[metric] = e.message

    def _try(self, metric: str, fn: Callable[..., R], *args: object) -> R | None:
        try:
            r = fn(*args)
        except NvmlCallError as e:
            self._fail(metric, e)
            return None
        self.errors.pop(metric, None)
        return r

    def _optional(self, metric: str, fn: Callable[..., R], *args: object) -> R | None:
        """``_try`` for a reading some GPUs or drivers lack (energy before Volta, Xid events in some
        containers): refused once, it is a capability and never asked again."""
        if metric in self.unsupported:
            return None
        try:
            return self._try(metric, fn, *args)
        finally:
            err = self.errors.get(metric)
            if err is not None and self._last_code in (ERROR_NOT_SUPPORTED, ERROR_NO_PERMISSION):
                self.unsupported[metric] = self.errors.pop(metric)

    def _due(self, now: float, last: float, every: float) -> bool:
        """A reading every ``every`` s is due. Within half an interval: the ticks come a few ms late or
        early as threads wake, and at --interval 1 a plain ``>= 1.0`` skipped every other second's
        temperature, clocks, memory and processes whenever a tick came less late than the one before."""
        return now - last >= every - self.interval / 2

    def _read_health(self, now: float) -> None:
        """Xids each call (each second); the counters every HEALTH_EVERY_S, or now when a Xid came."""
        xids = self._optional("xid events", self.nv.xids, self.index) or []
        if not xids and not self._due(now, self._health_t, HEALTH_EVERY_S):
            return
        self._health_t = now
        if self._due(now, self._energy_t, self.energy_s):
            self._energy_t = now
            e = self._optional("energy", self.nv.energy_mj, self.index)  # 4-5.6 ms of CPU a read
            self._energy = None if e is None else e / 1000.0
        info = self._optional("health", self.nv.health, self.index)
        if info is not None or xids:
            self._health = GpuHealth(now, **(info or {}), xids=tuple(xids))
        if self.info["mig"]:  # the instances change only when an administrator changes them
            devs = self._optional("mig devices", self.nv.mig_devices, self.index)
            if devs is not None:
                self._mig = tuple(MigInstance(**d) for d in devs)

    def sample(self, now: float) -> list[object]:
        i = self.index
        info = self.info
        if self.lost:
            return [GpuSample(now, i, info["uuid"], info["name"], "lost", mig=info["mig"])]
        nv = self.nv
        f: dict[str, float | int | None] = {}
        util = self._try("util", nv.utilization, i)
        if util:
            f["util"], f["mem_util"] = float(util[0]), float(util[1])
        if self.gpm:
            got = self._try("gpm", nv.gpm_metrics, i, GPM_IDS)
            f.update(gpm_values(got or {}))
        else:
            # Blocking ~21 ms each; this runs in this GPU's own thread. Never the 32-bit
            # field counters: they wrap every ~70 ms at Gen5.
            for d in ("rx", "tx"):
                kbs = self._try("pcie", nv.pcie_throughput_kbs, i, d)
                if kbs is not None:
                    f["pcie_" + d] = kbs * 1024.0
        p = self._try("power", nv.power_mw, i)
        f["power_w"] = None if p is None else p / 1000.0
        if self._due(now, self._slow_t, 1.0):  # temperature, clocks, throttle, memory: 1 Hz is plenty
            self._slow_t = now
            tc = self._try("temperature", nv.temperature, i)
            clk = self._try("clocks", nv.clocks, i)
            mem = self._try("memory", nv.memory, i)
            self._slow = {
                "temp_c": None if tc is None else float(tc),
                "sm_clock": float(clk[0]) if clk else None,
                "mem_clock": float(clk[1]) if clk else None,
                "clock_events": self._try("clock events", nv.clock_events, i),
                "mem_used": mem[0] if mem else None,
                "mem_total": mem[1] if mem else None,
            }
            self._read_health(now)
        f.update(self._slow)
        f["energy_j"] = self._energy
        if self._due(now, self._link_t, 10.0):
            self._link_t = now
            lk = self._try("pcie link", nv.link, i)
            if lk:
                self._link = pcie_link(lk)
        if self._due(now, self._procs_t, 1.0):
            self._procs_t = now
            procs = self._try("processes", nv.processes, i)
            if procs is not None:
                self._procs = tuple(GpuProcess(self.pid_map(pid), mem) for pid, mem in procs)
            if len(self._procs) > 1 or self._due(now, self._putil_t, self.alone_util_s):
                self._putil_t = now
                self._proc_util = self._process_util(now)
        if self.lost:
            return [GpuSample(now, i, info["uuid"], info["name"], "lost", mig=info["mig"])]
        g = GpuSample(
            now,
            i,
            info["uuid"],
            info["name"],
            "gpm" if self.gpm else "nvml",
            link=self._link,
            processes=self._procs,
            mig=info["mig"],
            health=self._health,
            mig_instances=self._mig,
            proc_util=self._proc_util,
        )
        out: list[object] = [g.with_values(f)]
        if self.series and self._due(now, self._drain_t, 1.0):
            self._drain_t = now
            out.extend(self.drain())
        return out

    def _process_util(self, now: float) -> tuple[ProcUtil, ...]:
        if not self._putil_ok:
            return ()
        try:
            rows = self.nv.process_utilization(self.index, self._putil.last_us)
        except NvmlCallError as e:
            if e.code == ERROR_NOT_SUPPORTED:  # (MIG, an older GPU): the column reads "-"; ask no more
                self._putil_ok = False
            else:
                self._fail("process utilization", e)
            return ()
        self.errors.pop("process utilization", None)
        now_us = int((now + self.offset) * 1e6)
        rows = [(self.pid_map(r[0]), r[1], r[2], r[3], r[4], r[5]) for r in rows]
        return self._putil.take(rows, [p.pid for p in self._procs], now_us)

    def drain(self) -> list[SeriesChunk]:
        chunks = []
        for d in self._drains:
            try:
                rows = self.nv.samples(self.index, d.metric, d.last_us)
            except NvmlCallError as e:
                if e.code != ERROR_NOT_FOUND:  # NotFound = nothing new since last_us
                    self._fail("samples " + d.metric, e)
                continue
            self.errors.pop("samples " + d.metric, None)
            if rows:
                t, v = d.take(rows, self.offset)
                if t:
                    chunks.append(SeriesChunk(self.index, d.metric, t, v))
        return chunks

    def stop(self) -> None:
        pass


class NvmlCollector:
    """Owns NVML for the process; hands out one GpuReader per GPU."""

    def __init__(
        self,
        nv: Nvml | None = None,
        interval: float = 0.1,
        use_gpm: bool = True,
        offset: float | None = None,
        series: bool = True,
        pid_map: Callable[[int], int] | None = None,
        energy_s: float = HEALTH_EVERY_S,
        alone_util_s: float = 1.0,
    ):
        self.nv: Nvml = nv if nv is not None else RealNvml()
        self.pid_map = pid_map
        self.energy_s = energy_s
        self.alone_util_s = alone_util_s
        self.interval = interval
        self.use_gpm = use_gpm
        # nvmlDeviceGetSamples copies the driver's whole buffer: a quarter of a 1 Hz live view's
        # CPU on the H100 (bench/RESULTS.md), and only a recording stores what it returns
        self.series = series
        self.offset = offset if offset is not None else time.time() - time.monotonic()
        self.system: SystemInfo | None = None
        self.readers: list[GpuReader] = []
        self.caps: list[Capability] = []

    def start(self) -> None:
        if self.caps:  # already started (record starts it early to name the GPUs)
            return
        try:
            self.system = self.nv.init()
        except NvmlUnavailable as e:
            self.caps = [
                Capability(
                    "nvml",
                    "driver",
                    CapState.UNSUPPORTED,
                    str(e),
                    "install the NVIDIA driver, or run `memtop --demo` to see a recording",
                )
            ]
            return
        self.caps = [
            Capability(
                "nvml",
                "driver",
                CapState.AVAILABLE,
                f"driver {self.system['driver']}, NVML {self.system['nvml_version']}",
            )
        ]
        for i in range(self.system["count"]):
            try:
                info = self.nv.device(i)
            except NvmlCallError as e:
                self.caps.append(Capability("nvml", f"GPU {i}", CapState.ERROR, e.message))
                continue
            gpm, reason = self._gpm(i, info)
            interval = self.interval if gpm else max(self.interval, 0.2)
            self.readers.append(
                GpuReader(
                    self.nv,
                    i,
                    info,
                    gpm,
                    reason,
                    interval,
                    self.offset,
                    self.series,
                    self.pid_map,
                    self.energy_s,
                    self.alone_util_s,
                )
            )
        if not self.readers and self.system["count"] == 0:
            self.caps.append(Capability("nvml", "GPUs", CapState.UNSUPPORTED, "the driver reports no GPUs"))
        for r in self.readers:
            r.start()

    def _gpm(self, i: int, info: DeviceInfo) -> tuple[bool, str]:
        if not self.use_gpm:
            return False, "GPM disabled (--no-gpm)"
        if info["mig"]:
            return False, "MIG is enabled: GPM per GPU instance is not read by memtop"
        try:
            ok = self.nv.gpm_supported(i)
        except NvmlCallError as e:
            return False, f"GPM query failed: {e.message}"
        return (True, "") if ok else (False, "GPM not supported on this GPU (needs Hopper or newer)")

    def capabilities(self) -> tuple[Capability, ...]:
        return tuple(self.caps) + tuple(c for r in self.readers for c in r.capabilities())

    def stop(self) -> None:
        self.nv.shutdown()
