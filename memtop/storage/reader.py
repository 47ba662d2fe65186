"""The one reader of a recording's GPU rows: columns of a time range, decoded and checked in one place.

Replay, export and the report's Frames (memtop.storage.store.Recording.frames) and the report's scan by
columns (memtop.analysis.colscan) both take a GPU's figures from here. The rows are read as arrays: from the
column blocks where they cover the range (memtop.storage.colblock), else as one JSON text of integers, else
row by row; each stored value is decoded by ``scaled`` (a value out of its metric's valid range, or
not a number in a damaged file, is missing data), and a row with no GPU index or mode (a damaged
file) is skipped and noted once on the recording.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from memtop.core.metrics import BY_NAME, METRICS, Metric
from memtop.core.model import GPU_MODES, GpuSample
from memtop.storage.colblock import NULL
from memtop.storage.decode import INT_MAX

if TYPE_CHECKING:
    from memtop.storage.store import Recording

_NVML = GPU_MODES.index("nvml")
# the mode as its index into GPU_MODES, in SQL (no text object per row): another text reads as "nvml"
# (claim no more than NVML), a value that is no text is damage (-1)
_MODE_SQL = (
    "CASE WHEN typeof(mode) != 'text' THEN -1 "
    + " ".join(f"WHEN mode = '{m}' THEN {i}" for i, m in enumerate(GPU_MODES))
    + f" ELSE {_NVML} END"
)
_JSON_NULL = -(1 << 63)  # NULL among the JSON text's integers (a stored value of it takes the row path)
_BLOCK = "gpu"  # the stream's name in the block table, and its rows' table
_FIRST_S = 5.0  # Frames read the first rows alone (the first Frame comes without waiting for more)
CHUNK_S = 60.0  # then this many seconds of rows at a time
DAMAGED = "damaged gpu data skipped"
_FIELDS = tuple(f.name for f in dataclasses.fields(GpuSample))[5:]  # after t, index, uuid, name, mode


class GpuCols(NamedTuple):
    """GPU rows as arrays, in the key's order (time, then GPU): each metric asked for decoded (NaN
    where missing)."""

    t: np.ndarray
    gpu: np.ndarray
    mode: np.ndarray  # index into GPU_MODES
    cols: dict[str, np.ndarray]

    def take(self, at: np.ndarray) -> GpuCols:
        return GpuCols(self.t[at], self.gpu[at], self.mode[at], {c: v[at] for c, v in self.cols.items()})


def scaled(m: Metric, a: np.ndarray) -> np.ndarray:
    """A gpu column's stored values (NaN for NULL or what is not a number) decoded: NaN where ``m.valid``
    would refuse the value, else the value at its scale (tests/test_metrics.py checks it against
    ``Metric.valid`` on edge values)."""
    with np.errstate(invalid="ignore", over="ignore"):  # (what overflows is out of range: NaN)
        ok = (a >= m.lo * m.scale) & (a <= m.hi * m.scale)
        if m.as_int:
            v = np.trunc(a) * round(1 / m.scale) if m.scale < 1 else np.trunc(a)
        else:
            v = a / float(m.scale) if m.scale >= 1 else a * (1 / m.scale)
    return np.where(ok, v, np.nan)


def columns(
    rec: Recording,
    plo: float,
    hi: float,
    names: tuple[str, ...],
    seed: float | None = None,
    blocks: bool = True,
) -> GpuCols:
    """The GPU rows of (plo, hi], and with ``seed`` first each GPU's newest row at or before it (the
    state a range read from ``seed`` starts with): each metric of ``names`` decoded, a metric the
    recording has no column for all NaN. ``blocks``: from the column blocks where they cover the span."""
    have = rec.gpu_columns
    sel = tuple(n for n in names if n in have)
    got = _block_rows(rec, plo, hi, sel) if blocks else None
    if got is None:
        got = _json_rows(rec, sel, plo, hi)
    if got is None:
        got = _from_rows(
            rec, sel, rec.query(f"{_select(sel)} WHERE t>? AND t<=? ORDER BY t", (plo, hi)).fetchall()
        )
    if seed is not None:
        first = _from_rows(rec, sel, latest(rec, sel, seed))
        t, gpu, mode = (np.concatenate([a, b]) for a, b in zip(first[:3], got[:3], strict=True))
        got = GpuCols(t, gpu, mode, {c: np.concatenate([first.cols[c], got.cols[c]]) for c in sel})
    n, cols = len(got.t), got.cols
    for c in names:  # (in place, a column at a time: an 8-hour chunk's columns are tens of MB)
        cols[c] = scaled(BY_NAME[c], cols.pop(c)) if c in cols else np.full(n, np.nan)
    return got


def latest(rec: Recording, sel: tuple[str, ...], t: float) -> list[tuple]:
    """Each GPU's newest row at or before t, as ``_select(sel)`` gives it."""
    gpus = [r[0] for r in rec.query("SELECT DISTINCT gpu FROM gpu_state").fetchall()]
    sql = f"{_select(sel)} WHERE gpu=? AND t<=? ORDER BY t DESC LIMIT 1"
    return [r for g in gpus for r in rec.query(sql, (g, t)).fetchall()]


def frame_rows(rec: Recording, plo: float, hi: float, names: tuple[str, ...]) -> Iterator[list[tuple]]:
    """The GPU rows of (plo, hi] for Frames, in chunks of rows in time order (``_as_rows``)."""
    return chunks(rec, "gpu", plo, hi, lambda a, b: _as_rows(columns(rec, a, b, names, blocks=False)))


def chunks(
    rec: Recording,
    table: str,
    plo: float,
    hi: float,
    read: Callable[[float, float], list],
    first: float = _FIRST_S,
    span: float = CHUNK_S,
) -> Iterator[list]:
    """``read(a, b)`` over (plo, hi], a chunk of ``table``'s rows at a time (for the Frames the first
    _FIRST_S seconds, then CHUNK_S), empty chunks left out; a damaged time far ahead costs one chunk,
    not one per span of the gap."""
    a, step = plo, first
    while a < hi:
        head = rec.query(f"SELECT min(t) FROM {table} WHERE t>? AND t<=?", (a, hi)).fetchone()[0]
        if head is None:
            return
        b = min(hi, max(head, a) + step)
        rows = read(a, b)
        a, step = b, span
        if rows:
            yield rows


def seed_rows(rec: Recording, t: float, names: tuple[str, ...]) -> list[tuple]:
    """Each GPU's newest row at or before t (``_as_rows``): a range read from t starts with them."""
    return _as_rows(columns(rec, t, t, names, seed=t, blocks=False))


def _as_rows(got: GpuCols) -> list[tuple]:
    """Rows as a Frame's GpuSample takes them: (t, GPU, mode, then every GpuSample field after the
    mode in its order), a metric's value where ``got`` has it (None where missing), the other fields
    None (store.Recording._gpu fills them)."""
    n = len(got.t)
    if not n:
        return []
    fields = _FIELDS
    out = np.full((n, 3 + len(fields)), None, dtype=object)
    out[:, 0], out[:, 1] = got.t.tolist(), got.gpu.tolist()
    out[:, 2] = np.array(GPU_MODES, dtype=object)[got.mode]
    for j, f in enumerate(fields):
        v = got.cols.get(f)
        if v is not None:
            nan = np.isnan(v)
            col = np.where(nan, 0.0, v)
            obj = (col.astype(np.int64) if BY_NAME[f].as_int else col).astype(object)
            obj[nan] = None
            out[:, 3 + j] = obj
    return list(map(tuple, out.tolist()))


def _select(sel: tuple[str, ...]) -> str:
    return f"SELECT t, gpu, {_MODE_SQL}{''.join(', ' + c for c in sel)} FROM gpu"


def _raw(values: tuple) -> np.ndarray:
    """A gpu column's stored values as floats (an integer as the nearest one), NaN for NULL and for
    a text or a blob."""
    if not set(map(type, values)) <= {int, float, type(None)}:
        values = tuple(v if type(v) in (int, float) else None for v in values)
    return np.array(values, dtype=np.float64)


def _from_rows(rec: Recording, sel: tuple[str, ...], rows: list) -> GpuCols:
    """GpuCols of rows as ``_select(sel)`` gives them, undecoded; a row without a time, a GPU index
    or a mode (a damaged file) is left out, and the recording notes it."""
    ok = [
        r
        for r in rows
        if type(r[0]) in (int, float) and type(r[1]) is int and -INT_MAX <= r[1] <= INT_MAX and r[2] >= 0
    ]
    if len(ok) != len(rows):
        rec.note(DAMAGED)
    if not ok:
        return GpuCols(
            np.zeros(0),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            {c: np.zeros(0) for c in sel},
        )
    t, gpu, mode, *metrics = zip(*ok, strict=True)
    return GpuCols(
        np.array(t, dtype=np.float64),
        np.array(gpu, dtype=np.int64),
        np.array(mode, dtype=np.int64),
        {c: _raw(v) for c, v in zip(sel, metrics, strict=True)},
    )


def _block_rows(rec: Recording, plo: float, hi: float, sel: tuple[str, ...]) -> GpuCols | None:
    """The rows of (plo, hi] from the column blocks, undecoded; None where they do not cover the span
    or are damaged."""
    layout = (("t", "f"), ("gpu", "i"), ("mode", "i"), *((c, "i") for c in sel))
    blocks = rec.blocks(_BLOCK).subset(layout)
    if blocks.end <= hi:
        return None
    got = blocks.read(float(np.nextafter(plo, np.inf)), hi, ordered=False)
    if got is None:
        return None
    ta, gi = got["t"], got["gpu"]
    order = None  # (the rows' key, t then gpu: written in Frame order, so in it already)
    if not _ascending(ta, gi):
        order = np.lexsort((gi, ta))
        ta, gi = ta[order], gi[order]
        if not _ascending(ta, gi):
            return None  # a key twice (NaN fails too)
    if not (np.abs(gi) <= INT_MAX).all():
        return None
    mode = got["mode"] if order is None else got["mode"][order]
    mode = np.where((mode >= 0) & (mode < len(GPU_MODES)), mode, _NVML)  # (the Writer's -1: another text)
    cols = {}
    for c in sel:  # (a column at a time, each raw one let go once read)
        raw = got.pop(c) if order is None else got.pop(c)[order]
        cols[c] = np.where(raw == NULL, np.nan, raw)
    return GpuCols(ta, gi, mode, cols)


def _ascending(ta: np.ndarray, gi: np.ndarray) -> bool:
    """Whether the rows' keys (time, then GPU) are strictly ascending (a NaN time is not)."""
    return len(ta) < 2 or bool(((ta[1:] > ta[:-1]) | ((ta[1:] == ta[:-1]) & (gi[1:] > gi[:-1]))).all())


def _scale(lo: object, hi: object) -> float | None:
    """A power of two that makes every float in [lo, hi] an integer below 2**62 (lo's ulp is its
    inverse: a float at or above lo is a multiple of it), or None where there is none."""
    if type(lo) is not float or type(hi) is not float or not 1e-6 < lo <= hi < 1e12:
        return None
    scale = 2.0 ** (53 - math.frexp(lo)[1])
    return scale if hi * scale < 2.0**62 else None


def _json_rows(rec: Recording, sel: tuple[str, ...], plo: float, hi: float) -> GpuCols | None:
    """The rows of (plo, hi], undecoded, read as one JSON text of integers that numpy parses: a Python
    object per value costs twice SQLite's rendering of it as text. Times are sent as integers exactly
    (t * 2**k, k from the smallest: a float at or above it is a multiple of its ulp); None where that
    cannot be exact, or where a value is not an integer or NULL (a REAL or a text in a damaged or
    older file, a row without a GPU index or mode): the rows are then read one by one."""
    q = rec.db.execute
    try:  # (a damaged table: the row path reads it, and says so as it does)
        lo_t, hi_t = (  # (min and max alone are a search each)
            q(f"SELECT {f}(t) FROM gpu WHERE t>? AND t<=?", (plo, hi)).fetchone()[0] for f in ("min", "max")
        )
        if lo_t is None:
            return _from_rows(rec, sel, [])
        scale = _scale(lo_t, hi_t)
        if scale is None:
            return None
        cols = "".join(", " + c for c in sel)
        text = q(
            f"SELECT json_group_array(json_array(CAST(t * ? AS INTEGER), gpu, {_MODE_SQL}{cols}))"
            " FROM gpu WHERE t>? AND t<=?",  # in the key's order (checked below)
            (scale, plo, hi),
        ).fetchone()[0]
    except sqlite3.DatabaseError:  # also an SQLite without JSON functions, or a blob value
        return None
    if not isinstance(text, str) or any(c in text for c in '".eE') or "9223372036854775808" in text:
        return None  # a text, a REAL, the value taken for NULL
    n = 3 + len(sel)
    body = text[2:-2].replace("],[", ",").replace("null", str(_JSON_NULL))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short parse is checked below
        try:
            a = np.fromstring(body, dtype=np.int64, sep=",")  # noqa: NPY201 (text mode is not deprecated)
        except ValueError:  # a value that is no integer (SQLite's text of an infinity): the row path
            return None
    if len(a) != n * (text.count("[") - 1):  # as many rows as the JSON holds
        return None
    a = a.reshape(-1, n)
    if (a[:, :3] == _JSON_NULL).any() or (np.abs(a[:, 1]) > INT_MAX).any() or (a[:, 2] < 0).any():
        return None
    ta = a[:, 0].astype(np.float64) / scale
    if len(ta) > 1 and (np.diff(ta) < 0).any():
        return None
    raw = a[:, 3:].astype(np.float64)
    raw[a[:, 3:] == _JSON_NULL] = np.nan
    return GpuCols(ta, a[:, 1], a[:, 2], {c: raw[:, j] for j, c in enumerate(sel)})


# every metric, in the metrics table's order
ALL = tuple(m.name for m in METRICS)
