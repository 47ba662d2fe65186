"""A GPU's labels as columns (time, shown label, rule label, evidence mode), whichever form they
come in: a list of Label objects (live mode: the newest few hundred) or a report's binscan.LabelSeq
(hours of bins, whose Label objects are built only when one is read). The verdict and the report
count over these, and read Label objects only for the bins they quote."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from memtop.analysis.phases import Label
else:
    from memtop.lazy import Lazy

    np = Lazy("numpy")  # (the report's; live mode never reads it)


@dataclass(frozen=True)
class LabelCols:
    t: np.ndarray  # bin starts
    label: np.ndarray  # shown label ("warmup" in the warm-up), str objects
    raw: np.ndarray  # the rule's label
    mode: np.ndarray  # each bin's evidence mode (Features.mode)


def columns(labels: Sequence[Label]) -> LabelCols:
    cols = getattr(labels, "columns", None)
    if cols is not None:
        return cols()
    return LabelCols(
        np.array([lab.t for lab in labels], dtype=np.float64),
        np.array([lab.label for lab in labels], dtype=object),
        np.array([lab.raw for lab in labels], dtype=object),
        np.array([lab.features.mode for lab in labels], dtype=object),
    )


def rows(labels: Sequence[Label]) -> tuple[list[float], list[str], list[str], list[str]]:
    """``columns`` as lists: live mode's newest few hundred labels without numpy."""
    cols = getattr(labels, "columns", None)
    if cols is not None:
        c = cols()
        return c.t.tolist(), c.label.tolist(), c.raw.tolist(), c.mode.tolist()
    return (
        [lab.t for lab in labels],
        [lab.label for lab in labels],
        [lab.raw for lab in labels],
        [lab.features.mode for lab in labels],
    )


def counts(values: np.ndarray) -> Counter[str]:
    """Counter(values), its keys in the order they first occur (as Counter counts a sequence, so
    most_common breaks ties alike): counted as a list (np.unique sorts str objects by comparing
    them, a tenth of a long report's verdict and timeline; a str() of each, 2 ms a GPU's 57,600)."""
    return Counter(values.tolist())


def codes(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Each value's code (int64) and the distinct values in the order they first occur, in two passes
    of C over the list (np.unique sorts str objects by comparing them; a comparison of the array with
    each distinct value is a pass each)."""
    vs = values.tolist()
    names = list(dict.fromkeys(vs))
    index = {v: j for j, v in enumerate(names)}
    return np.fromiter(map(index.__getitem__, vs), dtype=np.int64, count=len(vs)), names
