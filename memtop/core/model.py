"""The Frame model: immutable snapshots of everything memtop knows at one instant.

Every part carries its own timestamp ``t`` on one clock (``time.monotonic()``, which is
system-wide on Linux, so workloads can write markers on it too). A Frame holds the newest
part from each source; a part repeats across Frames until its source samples again, and
the store writes a part only when its ``t`` changes. This module imports neither textual
nor pynvml (a test enforces it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from enum import Enum
from operator import attrgetter
from typing import Any

now = time.monotonic


def wall_offset() -> float:
    """Seconds to add to a monotonic timestamp to get Unix time (recorded once per run)."""
    return time.time() - time.monotonic()


class CapState(str, Enum):
    AVAILABLE = "available"
    UNSUPPORTED = "unsupported"
    DENIED = "denied"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Capability:
    """What one source can give; unavailable is data the UI shows, never an exception."""

    source: str  # "nvml", "gpm", "stacks", "perf", "numa", ...
    name: str  # what it is about, e.g. "GPU 0" or "pid 1234"
    state: CapState
    detail: str = ""
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.state is CapState.AVAILABLE


@dataclass(frozen=True, slots=True)
class PcieLink:
    gen: int
    width: int
    max_gen: int
    max_width: int
    bytes_per_s: float  # capacity of the negotiated link, one direction

    @property
    def downtrained(self) -> bool:
        return self.gen < self.max_gen or self.width < self.max_width

    @property
    def text(self) -> str:
        """The negotiated link as people write it: "Gen5 x16"."""
        return f"Gen{self.gen} x{self.width}"

    @property
    def max_text(self) -> str:
        return f"Gen{self.max_gen} x{self.max_width}"


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """A GPU's health counters (collectors/nvml_calls.HealthInfo; None: the GPU does not give it) and
    the critical Xids the driver reported since the previous read. Read every few seconds; memtop.analysis.health
    turns a change into events."""

    t: float  # when it was read
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None
    ecc_dbe_aggregate: int | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: int | None = None
    remap_correctable: int | None = None
    remap_uncorrectable: int | None = None
    remap_pending: int | None = None
    remap_failure: int | None = None
    pcie_replay: int | None = None
    nvlink_replay: int | None = None
    nvlink_recovery: int | None = None
    nvlink_crc: int | None = None
    violation_power_ns: int | None = None
    violation_thermal_ns: int | None = None
    xids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG device of a GPU in MIG mode: what NVML gives per GPU/compute instance (memory; utilisation
    is not given per instance without GPM, which memtop turns off under MIG)."""

    index: int
    gi: int  # GPU instance id
    ci: int  # compute instance id
    name: str  # the profile, e.g. "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    uuid: str
    mem_used: int | None = None  # bytes
    mem_total: int | None = None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_memory: int | None  # bytes; None when the driver does not say


@dataclass(frozen=True, slots=True)
class ProcUtil:
    """One process's share of a GPU over the last second, from the driver's per-process samples
    (nvmlDeviceGetProcessesUtilizationInfo): percent of the time its kernels ran (SM), its memory
    was read or written, and the video encoder/decoder worked; None where the driver gave nothing."""

    pid: int
    sm: float | None
    mem: float | None
    enc: float | None = None
    dec: float | None = None


# Clock-event (throttle) reason bits, as NVML defines them.
CLOCK_EVENT_NAMES: dict[int, str] = {
    0x1: "gpu idle",
    0x2: "app clocks",
    0x4: "sw power cap",
    0x8: "hw slowdown",
    0x10: "sync boost",
    0x20: "sw thermal",
    0x40: "hw thermal",
    0x80: "hw power brake",
    0x100: "display clocks",
}
# Reasons that mean the GPU is being held back (idle and app-clock settings are not).
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


# Where GPM and NVML both give a figure: the GpuSample property -> (its GPM field, its NVML field), the
# GPM one read in "gpm" mode, else the NVML one.
#   activity: SM activity, else NVML util (time a kernel or copy ran, so it reads higher): the GPU
#             table's and the history's busy figure
#   engine: graphics-engine activity, else NVML util: what the phase rules call graphics
#   bandwidth: DRAM bandwidth utilisation, else NVML memory util (time memory was read or written)
BY_MODE: dict[str, tuple[str, str]] = {
    "activity": ("sm", "util"),
    "engine": ("graphics", "util"),
    "bandwidth": ("dram", "mem_util"),
}
# busy asks NVML util first whatever the mode, because util counts copies and GPM graphics does not
BUSY = ("util", "graphics")


def _by_mode(name: str) -> Any:
    """The property ``name`` of BY_MODE."""
    gpm, nvml = map(attrgetter, BY_MODE[name])
    return property(lambda s: gpm(s) if s.mode == "gpm" else nvml(s))


def _first_of(fields: tuple[str, str]) -> Any:
    """A property: the first field's value, else (None) the second's."""
    first, other = map(attrgetter, fields)

    def get(s: GpuSample) -> float | None:
        v = first(s)
        return v if v is not None else other(s)

    return property(get)


def metrics_of(figures: tuple[str, ...]) -> frozenset[str]:
    """The metric fields GpuSample figures read: a field itself, or both fields of a fallback."""
    out: set[str] = set()
    for f in figures:
        out.update(BY_MODE.get(f, BUSY if f == "busy" else (f,)))
    return frozenset(out)


# GpuSample.mode: by GPM, by NVML alone, or the GPU lost (recordings store the index where they store
# an integer)
GPU_MODES = ("gpm", "nvml", "lost")


@dataclass(frozen=True, slots=True)
class GpuSample:
    t: float
    index: int
    uuid: str
    name: str
    mode: str  # "gpm", "nvml" (no GPM) or "lost"
    util: float | None = None  # NVML: time a kernel *or copy* ran, %
    mem_util: float | None = None
    graphics: float | None = None  # GPM, %
    sm: float | None = None
    occupancy: float | None = None
    tensor: float | None = None
    fp64: float | None = None  # GPM: non-tensor FP64/FP32/FP16 pipe activity, %
    fp32: float | None = None
    fp16: float | None = None
    dram: float | None = None
    pcie_rx: float | None = None  # bytes/s into the GPU
    pcie_tx: float | None = None
    nvlink_rx: float | None = None
    nvlink_tx: float | None = None
    link: PcieLink | None = None
    power_w: float | None = None
    energy_j: float | None = None  # the driver's counter since it loaded
    temp_c: float | None = None
    sm_clock: float | None = None  # MHz
    mem_clock: float | None = None
    clock_events: int | None = None  # bitmask, see CLOCK_EVENT_NAMES
    mem_used: int | None = None  # bytes
    mem_total: int | None = None
    processes: tuple[GpuProcess, ...] = ()
    mig: bool = False
    health: GpuHealth | None = None  # the newest health read (every HEALTH_EVERY_S)
    mig_instances: tuple[MigInstance, ...] = ()  # under MIG (live only: not recorded)
    proc_util: tuple[ProcUtil, ...] = ()  # per-process utilisation (stored in its own table)

    def util_of(self, pid: int) -> ProcUtil | None:
        return next((u for u in self.proc_util if u.pid == pid), None)

    def with_values(self, values: Mapping[str, float | int | None]) -> GpuSample:
        """This sample with metric fields set by name (the names of memtop.core.metrics.METRICS)."""
        kw: dict[str, Any] = dict(values)  # a name that is no field is a TypeError
        return replace(self, **kw)

    # The one place each fallback is decided (BY_MODE, BUSY above): these properties read it for one
    # sample, the column engine (memtop.analysis.binscan, memtop.analysis.colscan) over arrays of samples.
    activity = _by_mode("activity")
    engine = _by_mode("engine")
    bandwidth = _by_mode("bandwidth")

    busy = _first_of(BUSY)  # time a kernel or a copy ran, copies included (a gap is neither)

    @property
    def throttled(self) -> bool:
        return bool(self.clock_events and self.clock_events & THROTTLE_MASK)

    @property
    def saturated(self) -> bool:
        """The compute rule's entry (memtop.analysis.phases: GPM graphics >= 80 %, SM >= 70 %): busy
        enough that its process is compute-bound whatever its stack says: a live view dumps that
        process's stack less often (collectors.stacks.SPARSE_S). Without GPM, NVML util counts
        copies too (a pageable copy reads up to 82 %, told apart only by its stack): never."""
        return self.mode == "gpm" and (self.graphics or 0.0) >= 80 and (self.sm or 0.0) >= 70

    @property
    def throttle_reasons(self) -> tuple[str, ...]:
        ev = self.clock_events or 0
        return tuple(n for bit, n in CLOCK_EVENT_NAMES.items() if ev & bit & THROTTLE_MASK)

    def pcie_fraction(self) -> float | None:
        """Larger direction's throughput as a fraction of the link (0..1)."""
        if self.link is None or not self.link.bytes_per_s:
            return None
        rates = [r for r in (self.pcie_rx, self.pcie_tx) if r is not None]
        return max(rates) / self.link.bytes_per_s if rates else None


@dataclass(frozen=True, slots=True)
class SeriesChunk:
    """Driver-buffered samples (nvmlDeviceGetSamples) drained since the previous chunk."""

    gpu: int
    metric: str  # "util", "mem_util", "power_w"
    t: tuple[float, ...]
    v: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class NumaNode:
    node: int
    cpus: str  # cpulist, e.g. "0-15"
    mem_total: int
    mem_free: int
    # numastat deltas per second since the previous sample (page allocations, not traffic)
    hit_rate: float = 0.0
    miss_rate: float = 0.0
    foreign_rate: float = 0.0
    other_node_rate: float = 0.0


@dataclass(frozen=True, slots=True)
class ProcSample:
    pid: int
    ppid: int
    name: str
    cmdline: str
    user: str
    cpu_pct: float
    threads: int
    state: str  # one-letter /proc state of the main thread: R, S, D, ...
    cpus_allowed: str
    mems_allowed: str
    last_cpus: tuple[int, ...]  # CPUs its threads last ran on
    gpus: tuple[int, ...]  # GPU indices it has a context on (empty for workers)
    worker_of: int | None = None  # parent GPU process pid, for DataLoader workers
    placement: str = "n/a"  # local / remote / split / n/a
    started: float = 0.0  # process start on the monotonic clock (for nsys --delay)
    argv: tuple[str, ...] = ()  # the command line as its arguments (suggested commands quote them)
    # a GPU process's main thread (collectors/host.py; other processes, and recordings from before
    # 2026-11-28, hold the defaults): its CPU % (-1: not read), what it waits on while blocked
    # (procfs.thread_wait's class, "" while it runs), the descriptor's target where one is named, and
    # the busiest other part of the job (a child of any kind, or its other threads together) that
    # could be feeding it: "PID name", and its CPU %
    main_cpu: float = -1.0
    wait: str = ""
    wait_on: str = ""
    feeder: str = ""
    feeder_cpu: float = 0.0


# what the phase features take of a GPU process (the busiest) besides its CPU
MAIN_FIELDS = ("main_cpu", "wait", "wait_on", "feeder", "feeder_cpu")
# what the phase features read of any process: stored again as the host_proc column blocks, read back
# as arrays by the report (memtop.storage.decode.BLOCK_STREAMS, memtop.analysis.colscan.HostFigures), each column's kind
# and the value an older recording's rows read as following from ProcSample's field (a new figure is
# a field there and its name here; those after the first five are optional in a block)
PROC_FIGURES = ("pid", "cpu_pct", "worker_of", "name", "state", *MAIN_FIELDS)


def _proc_figures() -> tuple[dict[str, str], dict[str, object]]:
    kind = {"float": "f", "int": "i", "int | None": "i", "str": "s"}  # (colblock's column kinds)
    by_name = {f.name: f for f in fields(ProcSample)}
    figures = [by_name[n] for n in PROC_FIGURES]
    return (
        {f.name: kind[str(f.type)] for f in figures},
        {f.name: f.default for f in figures if f.default is not MISSING},
    )


# each figure's column kind, and the value it reads as where a recording lacks it (its default)
PROC_KINDS, PROC_DEFAULTS = _proc_figures()


@dataclass(frozen=True, slots=True)
class HostSample:
    t: float
    cpu_pct: tuple[float, ...]  # per core
    iowait_pct: float
    load: tuple[float, float, float]
    mem_used: int
    mem_total: int
    swap_used: int
    swap_total: int
    numa: tuple[NumaNode, ...] = ()
    gpu_nodes: tuple[int, ...] = ()  # NUMA node of each GPU by index; -1 unknown
    procs: tuple[ProcSample, ...] = ()


@dataclass(frozen=True, slots=True)
class StackFrame:
    name: str
    file: str
    line: int
    code: str = ""  # the source line's text when readable


@dataclass(frozen=True, slots=True)
class ThreadStack:
    tid: int
    name: str
    active: bool
    owns_gil: bool
    frames: tuple[StackFrame, ...]  # leaf first
    klass: str = "other"  # sync / copy / data / other / idle (see memtop.core.stackclass)


@dataclass(frozen=True, slots=True)
class StackSample:
    t: float
    pid: int
    threads: tuple[ThreadStack, ...] = ()
    error: str | None = None
    native: bool = False  # a one-off --native dump taken on request

    @property
    def main(self) -> ThreadStack | None:
        """The thread whose id is the process's, else the first one."""
        first = self.threads[0] if self.threads else None
        return next((th for th in self.threads if th.tid == self.pid), first)


@dataclass(frozen=True, slots=True)
class PerfSample:
    t: float
    pid: int
    # per-second rates by event name (task-clock in CPU-seconds/s); hardware ones absent without a PMU
    rates: tuple[tuple[str, float], ...]

    def get(self, name: str) -> float | None:
        return dict(self.rates).get(name)


@dataclass(frozen=True, slots=True)
class Marker:
    """Ground truth from a labelled workload: a phase of known bottleneck."""

    t0: float
    t1: float
    label: str
    name: str
    facts: str = ""  # JSON text of the measured facts


@dataclass(frozen=True, slots=True)
class ProcJob:
    """Who a watched process works for, from its cgroup (collectors/jobid.py): keys of JOB_KEYS
    (container and runtime, pod UID and QoS class, Slurm job and step). Never from its environment:
    that is read live for snapshots and serve, and never recorded."""

    pid: int
    job: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Frame:
    t: float
    gpus: tuple[GpuSample, ...] = ()
    host: HostSample | None = None
    stacks: tuple[StackSample, ...] = ()
    perf: tuple[PerfSample, ...] = ()
    series: tuple[SeriesChunk, ...] = ()  # only the chunks new in this Frame
    caps: tuple[Capability, ...] = ()
    notes: tuple[str, ...] = field(default=())  # faults during the run, shown in the UI
    jobs: tuple[ProcJob, ...] = ()  # the watched processes' identity from their cgroups, by pid

    def job_of(self, pid: int) -> dict[str, str]:
        return next((dict(j.job) for j in self.jobs if j.pid == pid), {})

    def gpu(self, index: int) -> GpuSample | None:
        return next((g for g in self.gpus if g.index == index), None)


# The job-identity keys a snapshot or metric may carry (collectors/jobid.py reads them from the training
# process's environment: Slurm job id and name, torchrun rank / local rank / world size, Kubernetes pod
# and namespace; and from its cgroup: pod UID and QoS class, container id and runtime, Slurm step).
JOB_KEYS: tuple[str, ...] = (
    *("slurm_job_id", "slurm_job_name", "rank", "local_rank", "world_size", "pod", "pod_namespace"),
    *("pod_uid", "qos", "container", "runtime", "slurm_step"),
)
