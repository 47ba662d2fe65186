"""Small array helpers the report's readers share (numpy imported where called: the live view's
modules import this one without loading numpy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


def distinct(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` of integers (the sorted distinct values) by a sort: numpy 2.4's unique hashes
    them, 10-30x slower on a report's arrays of hundreds of thousands of a few values (a GPU's
    index per row, 2026-11-28)."""
    import numpy as np

    if a.dtype.kind not in "iub":
        return np.unique(a)
    s = np.sort(a, axis=None)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s
