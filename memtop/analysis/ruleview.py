"""What the phase rules read of a bin, as one bin's scalars or as arrays over many bins.

memtop.analysis.phases writes each rule once, as an expression over a view: ``&``/``|`` for and/or, ``v.no``
for not, ``v.where`` for a conditional, and a missing value (SM without GPM, a mean of no samples)
read as 0 beside a ``has_`` flag. ``One`` evaluates it for one bin (live mode: Python scalars, no
numpy per bin); ``Cols`` for every bin of a range at once (the report: numpy arrays). Comparisons,
+, -, * and / are IEEE operations in both, so both give the same answer for the same numbers.

The two classes are also the two backends the features are written over (memtop.analysis.phases
``gpu_figures``, ``proc_figures``, ``gap_quiet``): ``nz``, ``ratio`` and ``unless`` are the
operations on a missing value (None for One, NaN for Cols) and a zero divisor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
else:
    from memtop.lazy import Lazy

    np = Lazy("numpy")  # (the report's; live mode never reads it)

Bool = Any  # bool for One, a bool array for Cols
Num = Any  # float or int for One, an array for Cols
Str = Any  # str for One, a str array for Cols


class View(Protocol):
    graphics: Num  # GPM graphics %, or NVML util % without GPM
    gpm: Bool
    has_sm: Bool
    sm0: Num  # SM %, 0 without it
    tensor0: Num
    dram0: Num
    util0: Num  # NVML util %, 0 without it
    pcie_bps: Num
    pcie_frac: Num
    nvlink_frac: Num
    proc_cpu: Num
    workers: Num
    worker_cpu: Num
    worker_sleeping: Num
    stack_n: Num
    rise: Num
    awake: Bool  # phases._main_awake
    sync_age: Num
    has_peers: Bool
    has_away: Bool  # a peer GPU of the job not in a collective
    alive: Bool
    stopped: Bool
    main_cpu: Num  # the GPU process's main thread CPU %, -1 where not recorded
    feeder_cpu: Num  # the busiest other part of its job
    wait: Str  # what the main thread waits on ("" while it runs or where not recorded)

    def share(self, klass: str) -> Num: ...
    def recent_has(self, klass: str) -> Bool: ...
    def no(self, x: Bool) -> Bool: ...
    def where(self, cond: Bool, a: Any, b: Any) -> Any: ...


class One:
    """One bin's Features as the rules read them."""

    __slots__ = (
        "graphics", "gpm", "has_sm", "sm0", "tensor0", "dram0", "util0", "pcie_bps", "pcie_frac",
        "nvlink_frac", "proc_cpu", "workers", "worker_cpu", "worker_sleeping", "stack_n", "rise",
        "awake", "sync_age", "has_peers", "has_away", "alive", "stopped", "main_cpu", "feeder_cpu", "wait",
        "_shares", "_recent",
    )  # fmt: skip

    def __init__(self, f: Any) -> None:  # a phases.Features
        self.graphics = f.graphics
        self.gpm = f.gpm
        self.has_sm = f.sm is not None
        self.sm0 = f.sm if f.sm is not None else 0
        self.tensor0 = f.tensor or 0
        self.dram0 = f.dram or 0
        self.util0 = f.util or 0
        self.pcie_bps = f.pcie_bps
        self.pcie_frac = f.pcie_frac
        self.nvlink_frac = f.nvlink_frac
        self.proc_cpu = f.proc_cpu
        self.workers = f.workers
        self.worker_cpu = f.worker_cpu
        self.worker_sleeping = f.worker_sleeping
        self.stack_n = f.stack_n
        self.rise = f.rise
        self.awake = not f.recent or bool(f.recent - {"idle"})
        self.sync_age = f.sync_age
        self.has_peers = bool(f.peers)
        self.has_away = bool(f.peers_elsewhere)
        self.alive = f.alive
        self.stopped = f.stopped
        self.main_cpu = f.main_cpu
        self.feeder_cpu = f.feeder_cpu
        self.wait = f.wait
        self._shares: Mapping[str, float] = f.shares
        self._recent: frozenset[str] = f.recent

    def share(self, klass: str) -> float:
        return self._shares.get(klass, 0)

    def recent_has(self, klass: str) -> bool:
        return klass in self._recent

    @staticmethod
    def no(x: bool) -> bool:
        return not x

    @staticmethod
    def where(cond: bool, a: Any, b: Any) -> Any:
        return a if cond else b

    @staticmethod
    def nz(x: float | None) -> float:
        """A missing value as 0.0."""
        return x or 0.0

    @staticmethod
    def ratio(a: float, b: float) -> float:
        """a / b, 0.0 where b is 0."""
        return a / b if b else 0.0

    @staticmethod
    def unless(cond: bool, x: float | None) -> float | None:
        """x where cond holds, else missing."""
        return x if cond else None


@dataclass
class Cols:
    """Every bin's features of one GPU as arrays (the same names as One's)."""

    graphics: np.ndarray
    gpm: np.ndarray
    has_sm: np.ndarray
    sm0: np.ndarray
    tensor0: np.ndarray
    dram0: np.ndarray
    util0: np.ndarray
    pcie_bps: np.ndarray
    pcie_frac: np.ndarray
    nvlink_frac: np.ndarray
    proc_cpu: np.ndarray
    workers: np.ndarray
    worker_cpu: np.ndarray
    worker_sleeping: np.ndarray
    stack_n: np.ndarray
    rise: np.ndarray
    awake: np.ndarray
    sync_age: np.ndarray
    has_peers: np.ndarray
    has_away: np.ndarray
    alive: np.ndarray
    stopped: np.ndarray
    main_cpu: np.ndarray
    feeder_cpu: np.ndarray
    wait: np.ndarray  # of str
    shares: Callable[[str], np.ndarray]
    recent: Callable[[str], np.ndarray]

    def share(self, klass: str) -> np.ndarray:
        return self.shares(klass)

    def recent_has(self, klass: str) -> np.ndarray:
        return self.recent(klass)

    @staticmethod
    def no(x: np.ndarray) -> np.ndarray:
        return np.logical_not(x)

    @staticmethod
    def where(cond: np.ndarray, a: Any, b: Any) -> np.ndarray:
        return np.where(cond, a, b)

    @staticmethod
    def nz(x: np.ndarray) -> np.ndarray:
        return np.nan_to_num(x)

    @staticmethod
    def ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(b != 0, a / np.where(b != 0, b, 1), 0.0)

    @staticmethod
    def unless(cond: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.where(cond, x, np.nan)
