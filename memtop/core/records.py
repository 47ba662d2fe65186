"""What the classifier finds, as frozen records: a GPU gap and the evidence behind a label.

They travel from memtop.analysis.phases to the pipeline, verdict, report, export and TUI (and, pickled, between
the report's parallel scans), so they are typed here rather than passed as string-keyed dicts.
``as_dict()`` gives the JSON the report and export have always written.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class StackTop:
    """One main-thread stack leaf: its class (sync, copy, data, comm, other, idle), file:line and code."""

    klass: str
    where: str
    code: str

    def as_dict(self) -> dict[str, str]:
        return {"class": self.klass, "where": self.where, "code": self.code}


@dataclass(frozen=True)
class Gap:
    """A stretch with neither kernels nor copies on a GPU whose process lives (>= 0.5 s)."""

    gpu: int
    t0: float
    t1: float
    stack: StackTop | None = None  # the main thread's stack in the middle of the gap

    @property
    def duration_s(self) -> float:
        return round(self.t1 - self.t0, 2)

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "t0": self.t0,
            "t1": self.t1,
            "duration_s": self.duration_s,
            "stack": None if self.stack is None else self.stack.as_dict(),
        }


@dataclass(frozen=True)
class Evidence:
    """The numbers of one bin that fired a rule, rounded as people read them."""

    graphics: float  # GPM graphics %, or NVML util % without GPM
    sm: float | None
    tensor: float | None
    dram: float | None
    pcie_gbps: float
    pcie_pct_link: float
    nvml_util: float | None  # NVML's "kernel running" %, beside GPM's activity
    nvlink_gbps: float
    nvlink_pct_peak: float
    power_w: float | None
    peers: tuple[int, ...]  # the GPUs of the same job (collectives' partners)
    peers_elsewhere: tuple[int, ...]  # those of them not in a collective now
    mode: str  # which signals the bin had (phases.Features.mode); "evidence" in the JSON
    proc_cpu: int  # main GPU process CPU %
    workers: int
    worker_cpu: int  # mean CPU % per DataLoader worker
    workers_sleeping: float  # share of workers in S/D state
    iowait: float
    stack_shares: tuple[tuple[str, float], ...]  # (stack class, share of main-thread samples), by class
    gil: float  # share of samples where the main thread held the GIL
    stack_samples: int
    comm: str | None = None  # why a collective's wait was not judged, where it could not be
    # the GPU process's main thread (-1: not recorded), what it waits on, the file/pipe/socket its call
    # names, and the busiest other part of its job ("PID name") with its CPU % (phases.Features)
    main_cpu: int = -1
    wait: str = ""
    wait_on: str = ""
    feeder: str = ""
    feeder_cpu: int = 0
    top_stack: StackTop | None = None  # the stack that explains the label

    def share(self, klass: str) -> float:
        return dict(self.stack_shares).get(klass, 0.0)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {("evidence" if k == "mode" else k): getattr(self, k) for k in _ALWAYS}
        d["peers"], d["peers_elsewhere"] = list(self.peers), list(self.peers_elsewhere)
        d["stack_shares"] = dict(self.stack_shares)
        if self.comm is not None:
            d["comm"] = self.comm
        if self.main_cpu >= 0:
            d |= {k: getattr(self, k) for k in ("main_cpu", "wait", "wait_on", "feeder", "feeder_cpu")}
        if self.top_stack is not None:
            d["top_stack"] = self.top_stack.as_dict()
        return d


# the fields every Evidence's JSON holds, in their order ("mode" named "evidence"); those with a default
# are written only where they say something
_ALWAYS = tuple(f.name for f in fields(Evidence) if f.default is MISSING)
