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

from collections.abc import Callable, Iterable, Mapping
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
    """What a rule reads of a bin: every ``phases.Features`` field by name (a missing value None in
    One, NaN in Cols), so a feature is declared once, as a Features field; and these, made from them
    once per view."""

    has_sm: Bool  # SM % known (GPM)
    sm0: Num  # SM %, 0 without it
    tensor0: Num
    dram0: Num
    util0: Num  # NVML util %, 0 without it
    awake: Bool  # phases._main_awake
    has_peers: Bool
    has_away: Bool  # a peer GPU of the job not in a collective

    def __getattr__(self, name: str) -> Any: ...  # a Features field
    def share(self, klass: str) -> Num: ...
    def recent_has(self, klass: str) -> Bool: ...
    def no(self, x: Bool) -> Bool: ...
    def where(self, cond: Bool, a: Any, b: Any) -> Any: ...


class Scalars:
    """One bin's features as the rules read them: the base of ``phases.One``, the class ``scalars``
    makes for the Features' fields (View's own are computed here, once a bin)."""

    __slots__ = ("has_sm", "sm0", "tensor0", "dram0", "util0", "awake", "has_peers", "has_away")
    _MINE = """
    sm = f.sm
    self.has_sm = sm is not None
    self.sm0 = sm if sm is not None else 0
    self.tensor0 = f.tensor or 0
    self.dram0 = f.dram or 0
    self.util0 = f.util or 0
    recent = f.recent
    self.awake = not recent or bool(recent - {"idle"})
    self.has_peers = bool(f.peers)
    self.has_away = bool(f.peers_elsewhere)
"""

    if TYPE_CHECKING:

        def __init__(self, f: Any) -> None: ...  # a phases.Features
        def __getattr__(self, name: str) -> Any: ...  # a Features field

    def share(self, klass: str) -> float:
        return self.shares.get(klass, 0)

    def recent_has(self, klass: str) -> bool:
        return klass in self.recent

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


def scalars(fields: Iterable[str]) -> type[Scalars]:
    """The class of one bin's view whose instances copy these fields of a Features into slots: an
    ``__init__`` made for them, as dataclasses make theirs (a rule reads a slot; a copy of 43 fields
    costs about a microsecond a bin, where reading them through the Features would cost a call each)."""
    names = tuple(fields)
    code = "def __init__(self, f):\n" + "".join(f"    self.{n} = f.{n}\n" for n in names) + Scalars._MINE
    ns: dict[str, Any] = {}
    exec(code, ns)  # (the names are a dataclass's fields)
    return type(
        "One",
        (Scalars,),
        {"__slots__": names, "__init__": ns["__init__"], "__module__": "memtop.analysis.phases"},
    )


class Cols:
    """Every bin's features of one GPU as arrays, by the same names as One's: ``cols`` holds each
    Features field a scan gathers per bin (NaN for None; memtop.analysis.binscan.GpuBins), ``share`` and
    ``recent_has`` read the stack window's columns."""

    def __init__(
        self,
        cols: Mapping[str, np.ndarray],
        share: Callable[[str], np.ndarray],
        recent_has: Callable[[str], np.ndarray],
    ) -> None:
        d = self.__dict__
        d.update(cols)
        sm = cols["sm"]
        d["has_sm"] = ~np.isnan(sm)
        d["sm0"] = np.nan_to_num(sm)
        d["tensor0"] = np.nan_to_num(cols["tensor"])
        d["dram0"] = np.nan_to_num(cols["dram"])
        d["util0"] = np.nan_to_num(cols["util"])
        self._share, self._recent_has = share, recent_has

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...  # a Features field

    def share(self, klass: str) -> np.ndarray:
        return self._share(klass)

    def recent_has(self, klass: str) -> np.ndarray:
        return self._recent_has(klass)

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
